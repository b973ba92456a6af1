/* Dynamic tables' key maps: lookups and row-wise updates equal a fixed table's bit for bit when
 * every key is admitted; admission at exactly min_count (exact and Bloom); eviction by age, norm
 * and row bound, with a key coming back at its initial row; compaction; the memory bound; the
 * state restored. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/keymap.h"
#include "dtrain/rng.h"
#include "dtrain/rowopt.h"
#include "test.h"

enum { DIM = 5, KEYS = 2000 };
#define SEED 77u
#define STDDEV 0.05f

static dt_keymap *make_map(const dt_keymap_policy *p, int64_t cap, dt_table *t,
                           const dt_rowopt_config *opt)
{
    dt_keymap *m = NULL;
    CHECK_OK(dt_keymap_create("emb", p, cap, &m));
    CHECK_OK(dt_table_create(t, "emb", cap, DIM));
    CHECK_OK(dt_keymap_attach(m, t, STDDEV, SEED));
    if (opt)
        CHECK_OK(dt_rowopt_setup(opt, t));
    return m;
}

/* A batch of n places over keys [0, KEYS), skewed so that some repeat. */
static void batch_keys(dt_rng *r, int64_t *keys, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        uint64_t u = dt_rng_below(r, KEYS);
        keys[j] = (int64_t)(u * u / KEYS);
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The batch's unique keys (increasing) and a gradient row for each, drawn from the key. */
static size_t unique_grad(const int64_t *keys, size_t n, int64_t *uniq, float *rows, int step)
{
    memcpy(uniq, keys, n * sizeof *uniq);
    qsort(uniq, n, sizeof *uniq, cmp_i64);
    size_t u = 0;
    for (size_t j = 0; j < n; j++)
        if (u == 0 || uniq[u - 1] != uniq[j])
            uniq[u++] = uniq[j];
    for (size_t k = 0; k < u; k++) {
        dt_rng r;
        dt_rng_derive(&r, 5, (uint64_t)uniq[k], (uint64_t)step);
        for (int d = 0; d < DIM; d++)
            rows[k * DIM + (size_t)d] = dt_rng_uniform(&r) - 0.5f;
    }
    return u;
}

TEST(keymap_rows_and_updates_equal_a_fixed_table_bit_for_bit)
{
    for (int kind = DT_ROWOPT_SGD; kind <= DT_ROWOPT_FTRL; kind++) {
        dt_rowopt_config opt;
        dt_rowopt_config_default(&opt, (dt_rowopt_kind)kind);
        opt.lr = 0.1f, opt.l2_reg = 1e-3f;
        dt_table fixed, dyn;
        CHECK_OK(dt_table_create(&fixed, "emb", KEYS, DIM));
        dt_table_init_normal(&fixed, STDDEV, SEED, NULL);
        CHECK_OK(dt_rowopt_setup(&opt, &fixed));
        dt_keymap_policy p;
        dt_keymap_policy_default(&p);
        dt_keymap *m = make_map(&p, KEYS + 1, &dyn, &opt);
        dt_rng r;
        dt_rng_seed(&r, 9);
        enum { N = 300 };
        int64_t keys[N], rows[N], uniq[N];
        float grad[N * DIM];
        dt_sparse_rows gf, gd;
        dt_sparse_rows_init(&gf, DIM), dt_sparse_rows_init(&gd, DIM);
        CHECK_OK(dt_sparse_rows_reserve(&gf, N));
        CHECK_OK(dt_sparse_rows_reserve(&gd, N));
        for (int step = 1; step <= 20; step++) {
            batch_keys(&r, keys, N);
            CHECK_OK(dt_keymap_resolve(m, keys, N, step, rows));
            for (size_t j = 0; j < N; j++)
                CHECK(rows[j] > 0 && memcmp(dt_table_row(&dyn, rows[j]),
                                            dt_table_row(&fixed, keys[j]), DIM * sizeof(float)) == 0);
            size_t u = unique_grad(keys, N, uniq, grad, step);
            gf.n = gd.n = u;
            memcpy(gf.ids, uniq, u * sizeof *uniq);
            memcpy(gf.rows, grad, u * DIM * sizeof *grad);
            memcpy(gd.rows, grad, u * DIM * sizeof *grad);
            for (size_t k = 0; k < u; k++)
                gd.ids[k] = dt_keymap_row(m, uniq[k]);
            dt_rowopt_update(&opt, opt.lr, step, &fixed, &gf, NULL);
            dt_rowopt_update(&opt, opt.lr, step, &dyn, &gd, NULL);
        }
        int64_t checked = 0;
        for (int64_t k = 0; k < KEYS; k++) {
            int64_t row = dt_keymap_row(m, k);
            if (!row)
                continue;
            checked++;
            CHECK(memcmp(dt_table_row(&dyn, row), dt_table_row(&fixed, k), DIM * sizeof(float)) == 0);
            for (int s = 0; s < fixed.n_slots; s++)
                CHECK(memcmp(dyn.slots[s] + row * DIM, fixed.slots[s] + k * DIM,
                             DIM * sizeof(float)) == 0);
        }
        CHECK_MSG(checked > 100, "%lld keys seen", (long long)checked);
        dt_sparse_rows_free(&gf), dt_sparse_rows_free(&gd);
        dt_table_free(&fixed), dt_table_free(&dyn);
        dt_keymap_destroy(m);
    }
}

static void check_admitted_at(bool bloom)
{
    dt_keymap_policy p;
    dt_keymap_policy_default(&p);
    p.min_count = 3;
    if (bloom)
        p.bloom_bits = 1 << 16, p.bloom_hashes = 3;
    dt_table t;
    dt_keymap *m = make_map(&p, 100, &t, NULL);
    int64_t rows[4];
    int64_t one[1] = {1234567890123LL};
    CHECK_OK(dt_keymap_resolve(m, one, 1, 1, rows));
    CHECK(rows[0] == 0);
    CHECK_OK(dt_keymap_resolve(m, one, 1, 2, rows));
    CHECK(rows[0] == 0); /* seen twice: min_count - 1 */
    /* The third and fourth sightings in one batch, with another key between: both places get
     * the row, the key being admitted at the first of them. */
    int64_t batch[3] = {one[0], 42, one[0]};
    CHECK_OK(dt_keymap_resolve(m, batch, 3, 3, rows));
    CHECK(rows[0] > 0 && rows[2] == rows[0] && rows[1] == 0);
    float init[DIM];
    dt_table_draw_row(init, DIM, STDDEV, SEED, (uint64_t)one[0]);
    CHECK(memcmp(dt_table_row(&t, rows[0]), init, sizeof init) == 0);
    /* An earlier place of a key admitted later in the batch gets the row too. */
    int64_t late[3] = {42, 42, 7};
    CHECK_OK(dt_keymap_resolve(m, late, 3, 4, rows));
    CHECK(rows[0] > 0 && rows[1] == rows[0] && rows[2] == 0);
    dt_keymap_stats s;
    dt_keymap_stats_get(m, &s);
    CHECK(s.live == 2 && s.admitted == 2);
    CHECK(s.counting == (bloom ? 0 : 1));
    dt_table_free(&t);
    dt_keymap_destroy(m);
}

TEST(keymap_admits_a_key_at_its_min_count_exactly) { check_admitted_at(false); }
TEST(keymap_bloom_filter_admits_a_key_at_its_min_count) { check_admitted_at(true); }

TEST(keymap_bloom_filter_admits_few_keys_early_at_its_size)
{
    dt_keymap_policy p;
    dt_keymap_policy_default(&p);
    p.min_count = 2, p.bloom_bits = 8 * 20000, p.bloom_hashes = 3; /* 8 bits per key counted */
    dt_table t;
    dt_keymap *m = make_map(&p, 30000, &t, NULL);
    int64_t rows[1];
    int early = 0;
    for (int64_t k = 0; k < 20000; k++) {
        int64_t key = k * 1000003;
        CHECK_OK(dt_keymap_resolve(m, &key, 1, 1, rows));
        early += rows[0] != 0;
    }
    /* 40000 counters, 3 per key, 20000 keys: a counting filter's false positive rate near
     * (1 - e^(-3/2))^3 = 0.22 bounds the keys admitted at their first sighting. */
    CHECK_MSG(early < 20000 / 4, "%d of 20000 keys admitted at their first sighting", early);
    dt_table_free(&t);
    dt_keymap_destroy(m);
}

TEST(keymap_evicts_keys_not_seen_for_steps_to_live_and_they_come_back_fresh)
{
    dt_keymap_policy p;
    dt_keymap_policy_default(&p);
    p.steps_to_live = 5;
    dt_rowopt_config opt;
    dt_rowopt_config_default(&opt, DT_ROWOPT_ADAGRAD);
    dt_table t;
    dt_keymap *m = make_map(&p, 100, &t, &opt);
    int64_t keys[2] = {10, 20}, rows[2];
    CHECK_OK(dt_keymap_resolve(m, keys, 2, 1, rows));
    int64_t r10 = rows[0];
    dt_table_row(&t, r10)[0] = 99.0f; /* trained */
    t.slots[0][r10 * DIM] = 5.0f;
    for (int64_t step = 2; step <= 6; step++)
        CHECK_OK(dt_keymap_resolve(m, &keys[1], 1, step, rows));
    dt_keymap_evict_all(m, 5); /* key 10 last seen 4 steps ago */
    CHECK(dt_keymap_row(m, 10) == r10);
    dt_keymap_evict_all(m, 6); /* 5 steps */
    CHECK(dt_keymap_row(m, 10) == 0 && dt_keymap_row(m, 20) != 0);
    CHECK_OK(dt_keymap_resolve(m, keys, 1, 7, rows));
    float init[DIM];
    dt_table_draw_row(init, DIM, STDDEV, SEED, 10);
    CHECK(rows[0] > 0 && memcmp(dt_table_row(&t, rows[0]), init, sizeof init) == 0);
    CHECK(t.slots[0][rows[0] * DIM] == opt.initial_accumulator);
    dt_keymap_stats s;
    dt_keymap_stats_get(m, &s);
    CHECK(s.evicted == 1 && s.live == 2 && s.admitted == 3);
    dt_table_free(&t);
    dt_keymap_destroy(m);
}

TEST(keymap_evicts_rows_of_small_norm)
{
    dt_keymap_policy p;
    dt_keymap_policy_default(&p);
    p.l2_below = 0.5f;
    dt_table t;
    dt_keymap *m = make_map(&p, 100, &t, NULL);
    int64_t keys[2] = {1, 2}, rows[2];
    CHECK_OK(dt_keymap_resolve(m, keys, 2, 1, rows));
    for (int d = 0; d < DIM; d++)
        dt_table_row(&t, rows[1])[d] = 1.0f;
    dt_keymap_evict_all(m, 2);
    CHECK(dt_keymap_row(m, 1) == 0 && dt_keymap_row(m, 2) == rows[1]);
    dt_table_free(&t);
    dt_keymap_destroy(m);
}

TEST(keymap_never_holds_more_than_max_rows_and_drops_the_least_recent)
{
    dt_keymap_policy p;
    dt_keymap_policy_default(&p);
    p.max_rows = 64;
    dt_table t;
    dt_keymap *m = make_map(&p, dt_keymap_capacity(&p, DIM * 4), &t, NULL);
    int64_t rows[1];
    for (int64_t k = 0; k < 100; k++) {
        CHECK_OK(dt_keymap_resolve(m, &k, 1, k + 1, rows));
        CHECK(k < 64 ? rows[0] > 0 : rows[0] == 0);
    }
    dt_keymap_stats s;
    dt_keymap_stats_get(m, &s);
    CHECK(s.live == 64 && s.waiting_full == 36);
    dt_keymap_evict_all(m, 101);
    dt_keymap_stats_get(m, &s);
    CHECK_MSG(s.live <= 64 - 4 && s.live >= 48, "%lld live", (long long)s.live);
    /* The newest keys stay, the oldest go. */
    CHECK(dt_keymap_row(m, 63) != 0 && dt_keymap_row(m, 0) == 0);
    int64_t k = 1000;
    CHECK_OK(dt_keymap_resolve(m, &k, 1, 102, rows));
    CHECK(rows[0] > 0);
    dt_table_free(&t);
    dt_keymap_destroy(m);
}

TEST(keymap_compaction_packs_rows_and_keeps_every_key_s_row)
{
    dt_keymap_policy p;
    dt_keymap_policy_default(&p);
    p.steps_to_live = 2;
    dt_rowopt_config opt;
    dt_rowopt_config_default(&opt, DT_ROWOPT_ADAM);
    dt_table t;
    dt_keymap *m = make_map(&p, 1000, &t, &opt);
    int64_t keys[300], rows[300];
    for (int64_t k = 0; k < 300; k++)
        keys[k] = k * 7919;
    CHECK_OK(dt_keymap_resolve(m, keys, 300, 1, rows));
    for (int64_t k = 0; k < 300; k++) {
        dt_table_row(&t, rows[k])[1] = (float)k;
        t.slots[1][rows[k] * DIM + 2] = (float)-k;
    }
    /* Every third key seen again; the others go. */
    for (int64_t k = 0; k < 300; k += 3)
        CHECK_OK(dt_keymap_resolve(m, &keys[k], 1, 3, &rows[k]));
    dt_keymap_evict_all(m, 3);
    dt_keymap_compact(m);
    const int64_t *ks;
    const uint32_t *cs, *ls;
    int64_t n;
    CHECK_OK(dt_keymap_rows(m, &ks, &cs, &ls, &n));
    CHECK(n == 100);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = ks[i] / 7919;
        CHECK(ks[i] % 7919 == 0 && k % 3 == 0 && dt_keymap_row(m, ks[i]) == i + 1);
        CHECK(dt_table_row(&t, i + 1)[1] == (float)k && t.slots[1][(i + 1) * DIM + 2] == (float)-k);
        CHECK(cs[i] == 2 && ls[i] == 3);
    }
    dt_table_free(&t);
    dt_keymap_destroy(m);
}

TEST(keymap_stops_at_its_memory_limit_naming_the_table)
{
    dt_keymap_policy p;
    dt_keymap_policy_default(&p);
    p.memory_limit = 64 * 1024;
    dt_table t;
    dt_keymap *m = make_map(&p, dt_keymap_capacity(&p, DIM * 4), &t, NULL);
    int64_t rows[1];
    dt_status st = DT_OK;
    int64_t k = 0;
    for (; k < 100000 && st == DT_OK; k++)
        st = dt_keymap_resolve(m, &k, 1, 1, rows);
    CHECK(st == DT_ERR_NOMEM && strstr(dt_last_error(), "table emb") &&
          strstr(dt_last_error(), "rows"));
    CHECK_MSG(k > 1000 && k < 3000, "stopped at key %lld", (long long)k);
    dt_table_free(&t);
    dt_keymap_destroy(m);
}

TEST(keymap_state_restores_into_a_new_map)
{
    dt_keymap_policy p;
    dt_keymap_policy_default(&p);
    p.min_count = 2;
    dt_table t, u;
    dt_keymap *m = make_map(&p, 100, &t, NULL), *n = make_map(&p, 100, &u, NULL);
    int64_t keys[5] = {5, 5, 6, 7, 7}, rows[5];
    CHECK_OK(dt_keymap_resolve(m, keys, 5, 3, rows));
    dt_keymap_compact(m);
    const int64_t *ks, *cks;
    const uint32_t *cs, *ls, *ccs, *cls;
    int64_t nr, nc;
    CHECK_OK(dt_keymap_rows(m, &ks, &cs, &ls, &nr));
    CHECK_OK(dt_keymap_counting(m, &cks, &ccs, &cls, &nc));
    CHECK(nr == 2 && nc == 1 && cks[0] == 6 && ccs[0] == 1 && cls[0] == 3);
    CHECK_OK(dt_keymap_restore_rows(n, ks, cs, ls, nr, "test"));
    CHECK_OK(dt_keymap_restore_counting(n, cks, ccs, cls, nc, "test"));
    CHECK(dt_keymap_row(n, 5) == dt_keymap_row(m, 5) && dt_keymap_row(n, 7) == dt_keymap_row(m, 7));
    int64_t six = 6, r6;
    CHECK_OK(dt_keymap_resolve(n, &six, 1, 4, &r6));
    CHECK(r6 > 0); /* its second sighting */
    dt_table v;
    dt_keymap *o = make_map(&p, 100, &v, NULL);
    int64_t dup[2] = {9, 9};
    uint32_t c2[2] = {1, 1}, l2[2] = {1, 1};
    CHECK(dt_keymap_restore_rows(o, dup, c2, l2, 2, "f.safetensors") == DT_ERR_INVALID &&
          strstr(dt_last_error(), "key 9 given twice"));
    dt_table_free(&t), dt_table_free(&u), dt_table_free(&v);
    dt_keymap_destroy(m), dt_keymap_destroy(n), dt_keymap_destroy(o);
}

TEST(keymap_eviction_scans_one_page_a_step)
{
    dt_keymap_policy p;
    dt_keymap_policy_default(&p);
    p.steps_to_live = 2, p.evict_every_steps = 10;
    dt_table t;
    enum { N = 2 * DT_KEYMAP_PAGE_ROWS + 100 };
    dt_keymap *m = make_map(&p, N + 1, &t, NULL);
    int64_t *keys = malloc(N * sizeof *keys), *rows = malloc(N * sizeof *rows);
    for (int64_t k = 0; k < N; k++)
        keys[k] = k;
    CHECK_OK(dt_keymap_resolve(m, keys, N, 1, rows));
    /* Not due before step 10; then a pass of three pages, one a call, evicting as it goes. */
    CHECK(!dt_keymap_evict_step(m, 9, false));
    dt_keymap_stats s;
    dt_keymap_stats_get(m, &s);
    CHECK(s.evicted == 0);
    CHECK(dt_keymap_evict_step(m, 10, false));
    dt_keymap_stats_get(m, &s);
    CHECK_MSG(s.evicted == DT_KEYMAP_PAGE_ROWS, "%lld evicted after one page", (long long)s.evicted);
    CHECK(dt_keymap_evict_step(m, 11, false));
    CHECK(!dt_keymap_evict_step(m, 12, false)); /* the third page ends the pass */
    dt_keymap_stats_get(m, &s);
    CHECK(s.evicted == N && s.live == 0);
    free(keys), free(rows);
    dt_table_free(&t);
    dt_keymap_destroy(m);
}

/* Two tables' parts merged into one map that attaches both: the union of their keys, each table's
 * rows where it had them and its initial row where not, the greater count and step; a key given
 * twice for one table refused; counted keys and Bloom counters merged by the greater. */
TEST(keymap_merges_parts_into_the_union_of_their_keys)
{
    dt_keymap_policy p;
    dt_keymap_policy_default(&p);
    p.min_count = 3;
    dt_keymap *m = NULL;
    dt_table a, b;
    CHECK_OK(dt_keymap_create("a", &p, 100, &m));
    CHECK_OK(dt_table_create(&a, "a", 100, DIM));
    CHECK_OK(dt_table_create(&b, "b", 100, 2));
    CHECK_OK(dt_keymap_attach(m, &a, STDDEV, SEED));
    CHECK_OK(dt_keymap_attach(m, &b, STDDEV, SEED + 1));
    int64_t ka[2] = {10, 20}, kb[2] = {20, 30};
    uint32_t ca[2] = {4, 5}, la[2] = {7, 8}, cb[2] = {9, 3}, lb[2] = {2, 6};
    float ra[2 * DIM], rb[4] = {1, 2, 3, 4};
    for (int i = 0; i < 2 * DIM; i++)
        ra[i] = (float)i;
    CHECK_OK(dt_keymap_merge_rows(m, 0, ka, ca, la, 2, ra, NULL, "part a"));
    CHECK_OK(dt_keymap_merge_rows(m, 1, kb, cb, lb, 2, rb, NULL, "part b"));
    dt_keymap_stats s;
    dt_keymap_stats_get(m, &s);
    CHECK(s.live == 3);
    int64_t r10 = dt_keymap_row(m, 10), r20 = dt_keymap_row(m, 20), r30 = dt_keymap_row(m, 30);
    CHECK(r10 && r20 && r30);
    CHECK(dt_table_row(&a, r20)[0] == (float)DIM && dt_table_row(&b, r20)[1] == 2.0f);
    float init[DIM];
    dt_table_draw_row(init, DIM, STDDEV, SEED, 30);
    CHECK(memcmp(dt_table_row(&a, r30), init, sizeof init) == 0); /* a lacked 30 */
    int64_t c0;
    const int64_t *ks;
    const uint32_t *cs, *ls;
    int64_t cursor = 0, rows[3], keys[3];
    uint32_t counts[3], last[3];
    CHECK(dt_keymap_next_live(m, &cursor, 3, rows, keys, counts, last) == 3);
    for (int i = 0; i < 3; i++)
        if (keys[i] == 20)
            CHECK(counts[i] == 9 && last[i] == 8);
    CHECK(dt_keymap_merge_rows(m, 0, ka, ca, la, 1, ra, NULL, "part a again") == DT_ERR_INVALID &&
          strstr(dt_last_error(), "key 10 given twice"));
    int64_t ck[2] = {20, 40};
    uint32_t cc[2] = {1, 2}, cl[2] = {3, 4};
    CHECK_OK(dt_keymap_merge_counting(m, ck, cc, cl, 2, "counted"));
    CHECK_OK(dt_keymap_counting(m, &ks, &cs, &ls, &c0));
    CHECK(c0 == 1 && ks[0] == 40 && cs[0] == 2); /* 20 has a row: it stays admitted */
    int64_t forty = 40, r40;
    CHECK_OK(dt_keymap_resolve(m, &forty, 1, 9, &r40));
    CHECK(r40 > 0); /* its third sighting */
    dt_keymap_merge_end(m);
    dt_table_free(&a), dt_table_free(&b);
    dt_keymap_destroy(m);

    p.bloom_bits = 1024, p.bloom_hashes = 2;
    dt_table t;
    dt_keymap *f = make_map(&p, 10, &t, NULL);
    size_t nb = 0;
    dt_keymap_bloom(f, &nb);
    uint8_t *x = calloc(nb, 1);
    CHECK(x != NULL);
    if (!x)
        return;
    x[0] = 0x3a; /* counters 10 (low) and 3 (high) */
    CHECK_OK(dt_keymap_merge_bloom(f, x, nb, 0, "x"));
    x[0] = 0x52;
    CHECK_OK(dt_keymap_merge_bloom(f, x, 1, 0, "y"));
    CHECK(dt_keymap_bloom(f, &nb)[0] == 0x5a);
    CHECK(dt_keymap_merge_bloom(f, x, nb, 1, "z") == DT_ERR_INVALID);
    free(x);
    dt_table_free(&t);
    dt_keymap_destroy(f);
}
