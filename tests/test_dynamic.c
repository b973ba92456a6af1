/* Dynamic tables in the CTR models: a dynamic DeepFM trained on the same batches as a fixed one
 * (every key admitted, nothing evicted, ids below the fixed table's rows) has the same dense
 * parameters and, key for key, the same rows and slots, bit for bit; keys not admitted read the
 * zero row and take no update; scoring adds no key. */
#include <stdlib.h>
#include <string.h>

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
