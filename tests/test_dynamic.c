/* Dynamic tables in the CTR models: a dynamic DeepFM trained on the same batches as a fixed one
 * (every key admitted, nothing evicted, ids below the fixed table's rows) has the same dense
 * parameters and, key for key, the same rows and slots, bit for bit; keys not admitted read the
 * zero row and take no update; scoring adds no key. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/features.h"
#include "dtrain/keymap.h"
#include "dtrain/model.h"
#include "dtrain/optim.h"
#include "dtrain/pool.h"
#include "dtrain/rng.h"
#include "test.h"

enum { FIELDS = 6, ROWS = 500, EMB = 4, BATCH = 64 };

static dt_model *make_deepfm(bool dynamic, int64_t min_count, dt_pool *pool)
{
    dt_ctr_spec c;
    dt_ctr_spec_default(&c);
    c.field_size = FIELDS, c.feature_size = dynamic ? 0 : ROWS, c.embedding_size = EMB;
    c.n_deep = 2, c.deep_layers[0] = 8, c.deep_layers[1] = 6;
    c.dropout_keep[0] = c.dropout_keep[1] = 1.0f;
    c.init_stddev = 0.3f;
    c.dynamic = dynamic;
    c.dynamic_policy.min_count = min_count;
    c.dynamic_policy.memory_limit = dynamic ? 64 << 20 : 0;
    dt_model_spec spec;
    dt_model *m = NULL;
    CHECK_OK(dt_model_spec_ctr(DT_ARCH_DEEPFM, &c, &spec));
    CHECK_OK(dt_model_create(&spec, BATCH, pool, NULL, &m));
    if (m)
        dt_model_init_params(m, 11);
    return m;
}

static dt_elem *batch_of(uint64_t seed, int32_t *labels)
{
    dt_rng r;
    dt_rng_seed(&r, seed);
    dt_elem *e = dt_elem_alloc(BATCH, 0, BATCH * FIELDS, 0);
    for (int i = 0; i <= BATCH; i++)
        e->sp_row[i] = (int64_t)i * FIELDS;
    for (int i = 0; i < BATCH * FIELDS; i++) {
        uint64_t u = dt_rng_below(&r, ROWS);
        e->sp_ids[i] = (int64_t)(u * u / ROWS); /* skewed: ids repeat */
        e->sp_vals[i] = i % 3 ? 1.0f : dt_rng_uniform(&r) * 2.0f;
    }
    for (int i = 0; i < BATCH; i++)
        labels[i] = (int32_t)dt_rng_below(&r, 2), e->labels[i] = (float)labels[i];
    return e;
}

static double train_step(dt_model *m, dt_optim *o, const dt_elem *e, const int32_t *labels,
                         dt_pool *pool)
{
    CHECK_OK(dt_model_forward_batch(m, e, true, NULL));
    double loss = dt_model_loss(m, e->n, labels, 1.0f / e->n, true, NULL);
    dt_model_zero_grads(m);
    dt_model_backward(m, e->n);
    dt_model_update_tables(m, 1.0f, o->iterations + 1, pool);
    dt_optim_step(o, pool, dt_model_params(m)->data, dt_model_grads(m)->data,
                  dt_model_params(m)->n_elems);
    return loss;
}

static void setup(dt_model *m, dt_optim *o, dt_opt_kind kind)
{
    dt_optim_init(o);
    dt_optim_config oc;
    dt_optim_config_default(&oc, kind);
    oc.lr = 0.05f;
    CHECK_OK(dt_model_setup_optimizer(m, o, &oc));
}

static void check_same_training(dt_opt_kind kind, dt_pool *pool)
{
    dt_model *f = make_deepfm(false, 0, pool), *d = make_deepfm(true, 0, pool);
    if (!f || !d)
        return;
    dt_optim of, od;
    setup(f, &of, kind), setup(d, &od, kind);
    for (int step = 0; step < 12; step++) {
        int32_t labels[BATCH];
        dt_elem *e = batch_of(100 + (uint64_t)step, labels);
        double lf = train_step(f, &of, e, labels, pool), ld = train_step(d, &od, e, labels, pool);
        CHECK_MSG(lf == ld, "step %d: loss %.9g fixed, %.9g dynamic", step, lf, ld);
        dt_elem_free(e);
    }
    const dt_arena *pf = dt_model_params(f), *pd = dt_model_params(d);
    CHECK(pf->n_elems == pd->n_elems &&
          memcmp(pf->data, pd->data, pf->n_elems * sizeof(float)) == 0);
    dt_keymap *km = dt_model_keymap(d, 0);
    CHECK(km && dt_model_keymap(f, 0) == NULL);
    int64_t keys = 0;
    for (int t = 0; km && t < dt_model_num_tables(f); t++) {
        const dt_table *tf = dt_model_table(f, t), *td = dt_model_table(d, t);
        CHECK(tf->n_slots == td->n_slots);
        for (int64_t k = 0; k < ROWS; k++) {
            int64_t r = dt_keymap_row(km, k);
            if (!r)
                continue;
            keys += t == 0;
            size_t dim = (size_t)tf->dim;
            CHECK_MSG(memcmp(dt_table_row(tf, k), dt_table_row(td, r), dim * sizeof(float)) == 0,
                      "table %s, key %lld", tf->name, (long long)k);
            for (int s = 0; s < tf->n_slots; s++)
                CHECK(memcmp(tf->slots[s] + (size_t)k * dim, td->slots[s] + (size_t)r * dim,
                             dim * sizeof(float)) == 0);
        }
    }
    CHECK_MSG(keys > 100, "%lld keys", (long long)keys);
    dt_optim_free(&of), dt_optim_free(&od);
    dt_model_destroy(f), dt_model_destroy(d);
}

TEST(dynamic_deepfm_trains_as_the_fixed_one_bit_for_bit)
{
    check_same_training(DT_OPT_ADAGRAD, NULL);
    check_same_training(DT_OPT_ADAM, NULL);
    dt_pool *pool = NULL;
    CHECK_OK(dt_pool_create(2, &pool));
    check_same_training(DT_OPT_SGD, pool);
    dt_pool_destroy(pool);
}

TEST(dynamic_keys_not_admitted_read_zeros_and_take_no_update)
{
    dt_model *d = make_deepfm(true, 3, NULL);
    if (!d)
        return;
    dt_optim o;
    setup(d, &o, DT_OPT_ADAGRAD);
    dt_keymap *km = dt_model_keymap(d, 0);
    /* Key 7 in one place of each batch, every other key unique to its batch. */
    dt_elem *e = dt_elem_alloc(BATCH, 0, BATCH * FIELDS, 0);
    int32_t labels[BATCH];
    for (int i = 0; i <= BATCH; i++)
        e->sp_row[i] = (int64_t)i * FIELDS;
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < BATCH * FIELDS; i++) {
            e->sp_ids[i] = i == 5 ? 7 : ((int64_t)1 << 62) + step * 100000 + i;
            e->sp_vals[i] = 1.0f;
        }
        for (int i = 0; i < BATCH; i++)
            labels[i] = i % 2, e->labels[i] = (float)labels[i];
        train_step(d, &o, e, labels, NULL);
        dt_keymap_stats s;
        dt_keymap_stats_get(km, &s);
        CHECK_MSG(s.live == (step == 2), "step %d: %lld live", step, (long long)s.live);
        /* The zero row stays zero in both tables and their slots' first use. */
        for (int t = 0; t < dt_model_num_tables(d); t++) {
            const dt_table *tab = dt_model_table(d, t);
            for (int k = 0; k < tab->dim; k++)
                CHECK(dt_table_row(tab, 0)[k] == 0.0f);
        }
    }
    /* Key 7 was admitted at its third sighting, and that step updated it: its row left its
     * initial draw. */
    int64_t r = dt_keymap_row(km, 7);
    CHECK(r > 0);
    float init[EMB];
    dt_table_draw_row(init, EMB, 0.3f, 11, 7);
    const dt_table *v = dt_model_table(d, 1);
    CHECK(r > 0 && memcmp(dt_table_row(v, r), init, sizeof init) != 0);
    CHECK(r > 0 && v->slots[0][r * EMB] != 0.1f);
    /* Scoring counts nothing and admits nothing. */
    dt_keymap_stats before, after;
    dt_keymap_stats_get(km, &before);
    for (int i = 0; i < BATCH * FIELDS; i++)
        e->sp_ids[i] = 7 + i;
    CHECK_OK(dt_model_forward_batch(d, e, false, NULL));
    dt_keymap_stats_get(km, &after);
    CHECK(after.live == before.live && after.counting == before.counting);
    dt_elem_free(e);
    dt_optim_free(&o);
    dt_model_destroy(d);
}

/* ---- A feature spec's dynamic columns ---- */

/* A columns model over one dynamic hash column (its key pairs in slot 0) and a fixed identity
 * one (slot 1), both embedded; keys admitted at their second sighting. */
static dt_model *columns_model(dt_features **f)
{
    const char *spec =
        "{\"label\": \"y\", \"columns\": ["
        " {\"name\": \"h\", \"type\": \"hash_bucket\", \"key\": \"h\", \"dynamic\": true,"
        "  \"admit\": {\"min_count\": 2}, \"memory_limit\": 67108864},"
        " {\"name\": \"i\", \"type\": \"identity\", \"key\": \"i\", \"num_buckets\": 10}],"
        " \"model\": {\"type\": \"dnn\", \"dnn_hidden_units\": [4],"
        "  \"dnn_feature_columns\": [{\"embedding\": \"h\", \"dimension\": 3},"
        "                            {\"embedding\": \"i\", \"dimension\": 3}]}}";
    dt_feature_model fm;
    dt_model *m = NULL;
    CHECK_OK(dt_features_parse(spec, "spec.json", NULL, f));
    dt_status st = *f ? dt_features_model(*f, &fm) : DT_ERR_INVALID;
    CHECK_OK(st);
    if (st == DT_OK)
        CHECK_OK(dt_model_create(&fm.spec, 8, NULL, NULL, &m));
    if (m)
        dt_model_init_params(m, 5);
    return m;
}

/* Rows of (slot 0's keys, slot 1's ids), n_keys and n_ids per row. */
static dt_elem *key_rows(int n, const int64_t (*keys)[2], const int *n_keys, const int64_t *ids)
{
    size_t nnz = 0;
    for (int r = 0; r < n; r++)
        nnz += 2 * (size_t)n_keys[r] + 1;
    dt_elem *e = dt_elem_alloc(n, 0, nnz, 0);
    size_t at = 0;
    for (int r = 0; r < n; r++) {
        e->sp_row[r] = (int64_t)at;
        for (int k = 0; k < n_keys[r]; k++) {
            e->sp_ids[at] = dt_feature_key_hi(0, keys[r][k]), e->sp_vals[at++] = 1.0f;
            e->sp_ids[at] = dt_feature_key_lo(0, keys[r][k]), e->sp_vals[at++] = 1.0f;
        }
        e->sp_ids[at] = dt_feature_entry(1, ids[r]), e->sp_vals[at++] = 1.0f;
        e->labels[r] = (float)(r % 2);
    }
    e->sp_row[n] = (int64_t)at;
    return e;
}

TEST(dynamic_columns_turn_key_pairs_into_rows)
{
    dt_features *f = NULL;
    dt_model *m = columns_model(&f);
    if (!m) {
        dt_features_destroy(f);
        return;
    }
    const int64_t big = INT64_MAX - 6, small = 41;
    const int64_t keys[3][2] = {{big, small}, {big, 0}, {small, 0}};
    const int n_keys[3] = {2, 1, 0}, ids[3] = {3, 9, 0};
    dt_elem *e = key_rows(3, keys, n_keys, (const int64_t[]){ids[0], ids[1], ids[2]});
    dt_keymap *km = dt_model_keymap(m, 0);
    CHECK(km != NULL && dt_model_keymap(m, 1) == NULL);
    /* Scoring counts nothing; training admits `big` (two sightings), not `small` (one). */
    CHECK_OK(dt_model_forward_batch(m, e, false, NULL));
    CHECK(km && dt_keymap_row(km, big) == 0);
    CHECK_OK(dt_model_forward_batch(m, e, true, NULL));
    CHECK(km && dt_keymap_row(km, big) > 0 && dt_keymap_row(km, small) == 0);
    dt_elem_free(e);
    /* A key's half alone, and a high half past its 31 bits, name the example and slot. */
    e = dt_elem_alloc(1, 0, 2, 0);
    e->sp_row[0] = 0, e->sp_row[1] = 2;
    e->sp_ids[0] = dt_feature_key_hi(0, big), e->sp_ids[1] = dt_feature_entry(1, 2);
    e->sp_vals[0] = e->sp_vals[1] = 1.0f;
    e->labels[0] = 0;
    CHECK_ERR(dt_model_forward_batch(m, e, true, NULL), DT_ERR_INVALID,
              "example 0: slot 0: entry 0 is not the first half of a dynamic column's key");
    e->sp_ids[0] = dt_feature_entry(0, (int64_t)1 << 31), e->sp_ids[1] = dt_feature_entry(0, 1);
    CHECK_ERR(dt_model_forward_batch(m, e, true, NULL), DT_ERR_INVALID, "example 0: slot 0:");
    dt_elem_free(e);
    dt_model_destroy(m);
    dt_features_destroy(f);
}
