/* Row-wise optimizers: the pooled kernel equals its reference bit for bit; one step of each rule
 * equals the formula computed here in double; rows a step did not touch keep their values and
 * slots (lazy Adam); FTRL's l1 gives exact zeros. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/rng.h"
#include "dtrain/rowopt.h"
#include "test.h"

enum { ROWS = 300, DIM = 7 };

static void fill_table(dt_table *t, uint64_t seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed);
    for (size_t i = 0; i < (size_t)t->rows * (size_t)t->dim; i++)
        t->data[i] = dt_rng_uniform(&r) - 0.5f;
}

/* n unique ids (every third row), rows of gradients. */
static void make_grad(dt_sparse_rows *g, size_t n, uint64_t seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed);
    dt_sparse_rows_init(g, DIM);
    CHECK_OK(dt_sparse_rows_reserve(g, n));
    g->n = n;
    for (size_t u = 0; u < n; u++) {
        g->ids[u] = (int64_t)(u * 3 % ROWS);
        for (int k = 0; k < DIM; k++)
            g->rows[u * DIM + (size_t)k] = dt_rng_uniform(&r) * 2.0f - 1.0f;
    }
}

static bool same_table(const dt_table *a, const dt_table *b)
{
    size_t n = (size_t)a->rows * (size_t)a->dim * sizeof(float);
    bool same = memcmp(a->data, b->data, n) == 0;
    for (int s = 0; s < a->n_slots; s++)
        same = same && memcmp(a->slots[s], b->slots[s], n) == 0;
    return same;
}

TEST(rowopt_pooled_update_equals_the_reference_bit_for_bit)
{
    dt_pool *pool = NULL;
    CHECK_OK(dt_pool_create(2, &pool));
    for (int kind = DT_ROWOPT_SGD; kind <= DT_ROWOPT_FTRL; kind++) {
        dt_rowopt_config c;
        dt_rowopt_config_default(&c, (dt_rowopt_kind)kind);
        c.lr = 0.05f, c.l2_reg = 1e-3f, c.l1 = 0.01f, c.l2 = 0.02f;
        dt_table a, b;
        CHECK_OK(dt_table_create(&a, "t", ROWS, DIM));
        CHECK_OK(dt_table_create(&b, "t", ROWS, DIM));
        CHECK_OK(dt_rowopt_setup(&c, &a));
        CHECK_OK(dt_rowopt_setup(&c, &b));
        fill_table(&a, 3), fill_table(&b, 3);
        dt_sparse_rows g;
        make_grad(&g, 100, 4);
        for (int step = 1; step <= 3; step++) {
            dt_rowopt_update(&c, c.lr, step, &a, &g, pool);
            dt_rowopt_update_naive(&c, c.lr, step, &b, &g);
        }
        CHECK_MSG(same_table(&a, &b), "%s: pooled and reference updates differ",
                  dt_rowopt_kind_name(c.kind));
        dt_sparse_rows_free(&g);
        dt_table_free(&a), dt_table_free(&b);
    }
    dt_pool_destroy(pool);
}

/* One coordinate, one step, computed here in double from the documented rules. */
static double expected_after_one_step(const dt_rowopt_config *c, double w, double g)
{
    g += c->l2_reg * w;
    switch (c->kind) {
    case DT_ROWOPT_SGD:
        return w - c->lr * g;
    case DT_ROWOPT_ADAGRAD: {
        double a = c->initial_accumulator + g * g;
        return w - c->lr * g / (sqrt(a) + c->epsilon);
    }
    case DT_ROWOPT_ADAM: {
        double m = (1 - c->beta1) * g, v = (1 - c->beta2) * g * g;
        double lr_t = c->lr * sqrt(1 - c->beta2) / (1 - c->beta1);
        return w - lr_t * m / (sqrt(v) + c->epsilon);
    }
    case DT_ROWOPT_FTRL: {
        double n0 = c->initial_accumulator, n = n0 + g * g;
        double z = g - (sqrt(n) - sqrt(n0)) / c->lr * w;
        if (fabs(z) <= c->l1)
            return 0.0;
        return -(z - (z > 0 ? c->l1 : -c->l1)) / ((c->beta + sqrt(n)) / c->lr + 2 * c->l2);
    }
    }
    return NAN;
}

TEST(rowopt_one_step_follows_the_documented_rules)
{
    for (int kind = DT_ROWOPT_SGD; kind <= DT_ROWOPT_FTRL; kind++) {
        dt_rowopt_config c;
        dt_rowopt_config_default(&c, (dt_rowopt_kind)kind);
        c.lr = 0.1f, c.l2_reg = 0.01f, c.l1 = 0.001f, c.l2 = 0.05f;
        dt_table t;
        CHECK_OK(dt_table_create(&t, "t", ROWS, DIM));
        CHECK_OK(dt_rowopt_setup(&c, &t));
        fill_table(&t, 8);
        float *before = malloc(sizeof(float) * ROWS * DIM);
        memcpy(before, t.data, sizeof(float) * ROWS * DIM);
        dt_sparse_rows g;
        make_grad(&g, 50, 9);
        dt_rowopt_update(&c, c.lr, 1, &t, &g, NULL);
        for (size_t u = 0; u < g.n; u++)
            for (int k = 0; k < DIM; k++) {
                size_t at = (size_t)g.ids[u] * DIM + (size_t)k;
                double want = expected_after_one_step(&c, before[at], g.rows[u * DIM + (size_t)k]);
                CHECK_NEAR(t.data[at], want, 2e-5);
            }
        /* Rows the step did not touch (ids 1, 2, 4, ...) keep their values and slots. */
        bool untouched = true;
        for (int64_t r = 1; r < ROWS; r += 3)
            for (int k = 0; k < DIM; k++) {
                size_t at = (size_t)r * DIM + (size_t)k;
                untouched = untouched && t.data[at] == before[at];
                for (int s = 0; s < t.n_slots; s++) {
                    float init = (kind == DT_ROWOPT_ADAGRAD || (kind == DT_ROWOPT_FTRL && s == 1))
                                     ? c.initial_accumulator : 0.0f;
                    untouched = untouched && t.slots[s][at] == init;
                }
            }
        CHECK_MSG(untouched, "%s moved rows it was not given", dt_rowopt_kind_name(c.kind));
        free(before);
        dt_sparse_rows_free(&g);
        dt_table_free(&t);
    }
}

TEST(rowopt_ftrl_l1_gives_exact_zeros_and_slots_are_named)
{
    dt_rowopt_config c;
    dt_rowopt_config_default(&c, DT_ROWOPT_FTRL);
    c.lr = 0.1f, c.l1 = 10.0f; /* far above any |z| one step can reach */
    dt_table t;
    CHECK_OK(dt_table_create(&t, "fm_w", ROWS, DIM));
    CHECK_OK(dt_rowopt_setup(&c, &t));
    fill_table(&t, 1);
    dt_sparse_rows g;
    make_grad(&g, 20, 2);
    dt_rowopt_update(&c, c.lr, 1, &t, &g, NULL);
    for (size_t u = 0; u < g.n; u++)
        for (int k = 0; k < DIM; k++)
            CHECK(dt_table_row(&t, g.ids[u])[k] == 0.0f);
    CHECK(t.n_slots == 2 && strcmp(t.slot_names[0], "ftrl/linear/fm_w") == 0 &&
          strcmp(t.slot_names[1], "ftrl/accumulator/fm_w") == 0);
    dt_sparse_rows_free(&g);
    dt_table_free(&t);
}

TEST(rowopt_config_errors_name_the_field)
{
    dt_rowopt_config c;
    dt_rowopt_config_default(&c, DT_ROWOPT_FTRL);
    CHECK_OK(dt_rowopt_config_check(&c));
    c.l1 = -1.0f;
    CHECK(dt_rowopt_config_check(&c) == DT_ERR_INVALID && strstr(dt_last_error(), "l1"));
    dt_rowopt_kind k;
    CHECK(dt_rowopt_kind_parse("lazyadam", &k) == DT_ERR_INVALID &&
          strstr(dt_last_error(), "lazyadam"));
    dt_table t;
    CHECK(dt_table_create(&t, "big", 0, 4) == DT_ERR_INVALID && strstr(dt_last_error(), "big"));
    dt_table_free(&t);
}

TEST(table_normal_init_depends_on_the_row_alone)
{
    dt_pool *pool = NULL;
    CHECK_OK(dt_pool_create(2, &pool));
    dt_table a, b;
    CHECK_OK(dt_table_create(&a, "v", 1000, 4));
    CHECK_OK(dt_table_create(&b, "v", 500, 4));
    dt_table_init_normal(&a, 0.01f, 42, pool);
    dt_table_init_normal(&b, 0.01f, 42, NULL);
    /* A table of fewer rows (one thread) holds the same first rows. */
    CHECK(memcmp(a.data, b.data, sizeof(float) * 500 * 4) == 0);
    double sum = 0, sq = 0;
    for (int i = 0; i < 4000; i++)
        sum += a.data[i], sq += (double)a.data[i] * a.data[i];
    CHECK_NEAR(sqrt(sq / 4000 - (sum / 4000) * (sum / 4000)), 0.01, 0.001);
    dt_table_free(&a), dt_table_free(&b);
    dt_pool_destroy(pool);
}

/* A row range of a table as an arena: the rows' storage, named for its range. */
TEST(table_row_range_arena_covers_those_rows)
{
    dt_table t;
    CHECK_OK(dt_table_create(&t, "fm_v", 100, 3));
    for (int i = 0; i < 300; i++)
        t.data[i] = (float)i;
    dt_arena a;
    CHECK_OK(dt_table_arena_rows(&t, -1, 40, 70, &a));
    CHECK(a.n_views == 1 && strcmp(a.views[0].name, "fm_v/part_40_70") == 0);
    CHECK(a.views[0].dims[0] == 30 && a.views[0].dims[1] == 3 && a.data[0] == 120.0f);
    dt_table_arena_release(&a);
    CHECK(dt_table_arena_rows(&t, -1, 70, 40, &a) == DT_ERR_INVALID);
    CHECK(dt_table_arena_rows(&t, -1, 0, 101, &a) == DT_ERR_INVALID);
    dt_table_arena_release(&a);
    dt_table_free(&t);
}

/* Claiming slot pages before an update reads them changes no value, whatever the page held
 * (zero, or values written some other way, as a restore does), marks each page once, and is a
 * no-op on a slot filled at creation. */
TEST(table_claim_slot_keeps_values_and_marks_pages)
{
    dt_table t;
    CHECK_OK(dt_table_create(&t, "tab", 3000, 7)); /* rows of 28 bytes: some span two pages */
    static const char *const names[] = {"m", "acc"};
    CHECK_OK(dt_table_set_slots(&t, "opt", 2, names, (const float[]){0.0f, 0.1f}));
    CHECK(t.slot_pages[0] != NULL && t.slot_pages[1] == NULL);
    size_t n = (size_t)t.rows * (size_t)t.dim;
    for (size_t i = 0; i < n; i += 3)
        t.slots[0][i] = (float)i; /* a restore's values on some pages */
    for (int64_t r = 0; r < t.rows; r += 5) {
        dt_table_claim_slot(&t, 0, (size_t)r * 7, 7);
        dt_table_claim_slot(&t, 1, (size_t)r * 7, 7);
    }
    bool same = true;
    for (size_t i = 0; i < n; i++) {
        same = same && t.slots[0][i] == (i % 3 == 0 ? (float)i : 0.0f);
        same = same && t.slots[1][i] == 0.1f;
    }
    CHECK(same);
    /* Every fifth row is claimed, so every page of the slot (146 rows each) is marked, and no
     * bit past the last page. */
    size_t pages = n * sizeof(float) / 4096 + 1;
    size_t marked = 0;
    for (size_t p = 0; p < pages; p++)
        marked += (t.slot_pages[0][p / 64] >> (p % 64)) & 1;
    CHECK_MSG(marked == pages, "%zu of %zu pages marked after claiming every fifth row", marked,
              pages);
    CHECK(!(t.slot_pages[0][pages / 64] >> (pages % 64)));
    /* A fresh table: one claimed row marks its page alone. */
    dt_table_free(&t);
    CHECK_OK(dt_table_create(&t, "tab", 3000, 7));
    CHECK_OK(dt_table_set_slots(&t, "opt", 1, names, (const float[]){0.0f}));
    dt_table_claim_slot(&t, 0, 150 * 7, 7); /* bytes 4200..4227: page 1 */
    CHECK(t.slot_pages[0][0] == 2);
    CHECK(t.slots[0][150 * 7] == 0.0f);
    dt_table_free(&t);
}
