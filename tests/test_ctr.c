/* CTR models: the FM kernels against their pairwise references, and the fused lookups against
 * the lookups then the FM; LR, FM and DeepFM gradients
 * (dense and sparse rows) against finite differences of the loss; the logits against a
 * computation written here from the formula; bad batches named; training moves only the rows a
 * batch touched. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/nn/embedding.h"
#include "../src/nn/fm.h"
#include "dtrain/model.h"
#include "dtrain/pool.h"
#include "dtrain/rng.h"
#include "test.h"

static float uniform(dt_rng *r) { return dt_rng_uniform(r) * 2.0f - 1.0f; }

TEST(fm_kernels_match_their_pairwise_references)
{
    enum { B = 9, F = 7, K = 5 };
    dt_rng r;
    dt_rng_seed(&r, 3);
    float emb[B * F * K], sums[B * K], y[B], y_ref[B], dy[B], d[B * F * K], d_ref[B * F * K];
    for (int i = 0; i < B * F * K; i++)
        emb[i] = uniform(&r);
    for (int i = 0; i < B; i++)
        dy[i] = uniform(&r);
    dt_fm_forward(B, F, K, emb, sums, y);
    dt_fm_forward_naive(B, F, K, emb, y_ref);
    for (int i = 0; i < B; i++)
        CHECK_NEAR(y[i], y_ref[i], 1e-5);
    memset(d, 0, sizeof d), memset(d_ref, 0, sizeof d_ref);
    dt_fm_backward(B, F, K, emb, sums, dy, d);
    dt_fm_backward_naive(B, F, K, emb, dy, d_ref);
    for (int i = 0; i < B * F * K; i++)
        CHECK_NEAR(d[i], d_ref[i], 1e-5);
}

/* The fused pass gives the bits of the lookups then dt_fm_forward, at widths around a vector. */
TEST(fm_lookup_pass_has_the_bits_of_lookups_then_fm)
{
    static const int widths[] = {1, 5, 16, 32, 33};
    enum { ROWS_T = 50, B = 13, F = 39 };
    dt_rng r;
    dt_rng_seed(&r, 4);
    for (size_t c = 0; c < sizeof widths / sizeof widths[0]; c++) {
        int K = widths[c];
        size_t n = (size_t)B * F, nk = n * (size_t)K;
        float *w = malloc(ROWS_T * sizeof *w), *v = malloc((size_t)ROWS_T * K * sizeof *v);
        int64_t *ids = malloc(n * sizeof *ids);
        float *vals = malloc(n * sizeof *vals);
        float *lin = malloc(n * sizeof *lin), *lin_ref = malloc(n * sizeof *lin_ref);
        float *emb = malloc(nk * sizeof *emb), *emb_ref = malloc(nk * sizeof *emb_ref);
        float *sums = malloc((size_t)B * K * sizeof *sums);
        float *sums_ref = malloc((size_t)B * K * sizeof *sums_ref);
        float y[B], y_ref[B];
        for (int i = 0; i < ROWS_T; i++)
            w[i] = uniform(&r);
        for (int i = 0; i < ROWS_T * K; i++)
            v[i] = uniform(&r);
        for (size_t p = 0; p < n; p++) {
            ids[p] = (int64_t)dt_rng_below(&r, ROWS_T);
            vals[p] = p % 3 ? 1.0f : uniform(&r) * 3.0f;
        }
        dt_fm_forward_lookup(w, v, B, F, K, ids, vals, lin, emb, sums, y);
        dt_embedding_forward(w, 1, ids, vals, n, lin_ref);
        dt_embedding_forward(v, K, ids, vals, n, emb_ref);
        dt_fm_forward(B, F, K, emb_ref, sums_ref, y_ref);
        CHECK_MSG(memcmp(lin, lin_ref, n * sizeof *lin) == 0, "K=%d: lin", K);
        CHECK_MSG(memcmp(emb, emb_ref, nk * sizeof *emb) == 0, "K=%d: emb", K);
        CHECK_MSG(memcmp(sums, sums_ref, (size_t)B * K * sizeof *sums) == 0, "K=%d: sums", K);
        CHECK_MSG(memcmp(y, y_ref, sizeof y) == 0, "K=%d: the FM term", K);
        free(w), free(v), free(ids), free(vals), free(lin), free(lin_ref), free(emb), free(emb_ref);
        free(sums), free(sums_ref);
    }
}

enum { ROWS = 40, FIELDS = 5, EMB = 4, BATCH = 6 };

/* A batch of BATCH examples with FIELDS fields each; ids repeat across and within examples. */
static dt_elem *make_batch(uint64_t seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed);
    dt_elem *e = dt_elem_alloc(BATCH, 0, BATCH * FIELDS, 0);
    for (int i = 0; i <= BATCH; i++)
        e->sp_row[i] = (int64_t)i * FIELDS;
    for (int i = 0; i < BATCH * FIELDS; i++) {
        e->sp_ids[i] = (int64_t)dt_rng_below(&r, ROWS / 2) * (i % 2 ? 2 : 1);
        e->sp_vals[i] = i % 3 ? 1.0f : uniform(&r) * 2.0f;
    }
    for (int i = 0; i < BATCH; i++)
        e->labels[i] = (float)(i % 2);
    return e;
}

static dt_model *make_model(dt_arch arch)
{
    dt_ctr_spec c;
    dt_ctr_spec_default(&c);
    c.field_size = FIELDS, c.feature_size = ROWS, c.embedding_size = EMB;
    c.n_deep = 2, c.deep_layers[0] = 8, c.deep_layers[1] = 6;
    c.dropout_keep[0] = c.dropout_keep[1] = 1.0f;
    c.init_stddev = 0.3f;
    dt_model_spec spec;
    dt_model *m = NULL;
    CHECK_OK(dt_model_spec_ctr(arch, &c, &spec));
    CHECK_OK(dt_model_create(&spec, BATCH, NULL, NULL, &m));
    if (m) {
        dt_model_init_params(m, 11);
        /* Non-zero first-order weights and bias, so every term has a gradient to check. */
        dt_rng r;
        dt_rng_seed(&r, 12);
        dt_table *w = dt_model_table(m, 0);
        for (int i = 0; i < ROWS; i++)
            w->data[i] = uniform(&r) * 0.5f;
        dt_model_params(m)->data[0] = 0.2f;
    }
    return m;
}

static double mean_loss(dt_model *m, const dt_elem *e, const int32_t *labels, bool grad)
{
    CHECK_OK(dt_model_forward_batch(m, e, true, NULL));
    double loss = dt_model_loss(m, e->n, labels, 1.0f / e->n, grad, NULL) / e->n;
    if (grad) {
        dt_model_zero_grads(m);
        dt_model_backward(m, e->n);
    }
    return loss;
}

/* d loss / d p by central differences, p a float of the model's. *kink is set when the two
 * one-sided differences disagree: a ReLU unit crossed zero within the step, where no finite
 * difference tells the gradient. */
static double numeric_grad(dt_model *m, const dt_elem *e, const int32_t *labels, float *p,
                           bool *kink)
{
    const float h = 1e-3f;
    float keep = *p;
    double mid = mean_loss(m, e, labels, false);
    *p = keep + h;
    double up = mean_loss(m, e, labels, false);
    *p = keep - h;
    double down = mean_loss(m, e, labels, false);
    *p = keep;
    *kink = fabs((up - mid) - (mid - down)) / h > 0.05;
    return (up - down) / (2.0 * h);
}

static void check_gradients(dt_arch arch)
{
    dt_model *m = make_model(arch);
    dt_elem *e = make_batch(5);
    int32_t labels[BATCH];
    for (int i = 0; i < BATCH; i++)
        labels[i] = (int32_t)e->labels[i];
    mean_loss(m, e, labels, true);
    /* Sparse rows: every touched row's analytic gradient against the numeric one; rows not in
     * the gradient were not touched and have none. */
    int checked = 0, kinks = 0;
    for (int t = 0; t < dt_model_num_tables(m); t++) {
        dt_table *tab = dt_model_table(m, t);
        const dt_sparse_rows *g = dt_model_table_grad(m, t);
        dt_sparse_rows copy;
        dt_sparse_rows_init(&copy, g->dim);
        CHECK_OK(dt_sparse_rows_reserve(&copy, g->n));
        copy.n = g->n;
        memcpy(copy.ids, g->ids, g->n * sizeof *g->ids);
        memcpy(copy.rows, g->rows, g->n * (size_t)g->dim * sizeof *g->rows);
        for (size_t u = 0; u < copy.n; u++)
            for (int k = 0; k < tab->dim; k++) {
                bool kink;
                double want = numeric_grad(m, e, labels, dt_table_row(tab, copy.ids[u]) + k, &kink);
                if (kink) {
                    kinks++;
                    continue;
                }
                CHECK_NEAR(copy.rows[u * (size_t)tab->dim + (size_t)k], want, 2e-3);
                checked++;
            }
        for (int64_t row = 0; row < ROWS; row++) {
            bool in_batch = false;
            for (int i = 0; i < BATCH * FIELDS; i++)
                in_batch = in_batch || e->sp_ids[i] == row;
            bool in_grad = false;
            for (size_t u = 0; u < copy.n; u++)
                in_grad = in_grad || copy.ids[u] == row;
            CHECK(in_batch == in_grad);
        }
        dt_sparse_rows_free(&copy);
        mean_loss(m, e, labels, true);
    }
    /* Dense variables: the bias and the MLP's. */
    dt_arena *params = dt_model_params(m), *grads = dt_model_grads(m);
    float *analytic = malloc(grads->n_elems * sizeof(float));
    memcpy(analytic, grads->data, grads->n_elems * sizeof(float));
    for (int view = 0; view < params->n_views; view++) {
        size_t off = params->views[view].offset, n = params->views[view].n_elems;
        for (size_t j = 0; j < n; j += 1 + j / 4) {
            bool kink;
            double want = numeric_grad(m, e, labels, &params->data[off + j], &kink);
            if (kink) {
                kinks++;
                continue;
            }
            CHECK_NEAR(analytic[off + j], want, 2e-3);
            checked++;
        }
    }
    CHECK(checked > (arch == DT_ARCH_LR ? 8 : 60));
    CHECK_MSG(kinks * 20 <= checked, "%d of %d checks at a ReLU kink", kinks, checked);
    free(analytic);
    dt_elem_free(e);
    dt_model_destroy(m);
}

TEST(ctr_lr_gradients_match_finite_differences) { check_gradients(DT_ARCH_LR); }
TEST(ctr_fm_gradients_match_finite_differences) { check_gradients(DT_ARCH_FM); }
TEST(ctr_deepfm_gradients_match_finite_differences) { check_gradients(DT_ARCH_DEEPFM); }

TEST(ctr_fm_logits_follow_the_formula)
{
    dt_model *m = make_model(DT_ARCH_FM);
    dt_elem *e = make_batch(8);
    const float *z = NULL;
    CHECK_OK(dt_model_forward_batch(m, e, false, &z));
    const dt_table *w = dt_model_table(m, 0), *v = dt_model_table(m, 1);
    for (int i = 0; i < BATCH; i++) {
        double want = dt_model_params(m)->data[0];
        for (int f = 0; f < FIELDS; f++) {
            int64_t id = e->sp_ids[i * FIELDS + f];
            want += (double)w->data[id] * e->sp_vals[i * FIELDS + f];
            for (int g = f + 1; g < FIELDS; g++) {
                int64_t id2 = e->sp_ids[i * FIELDS + g];
                for (int k = 0; k < EMB; k++)
                    want += (double)dt_table_row(v, id)[k] * e->sp_vals[i * FIELDS + f] *
                            dt_table_row(v, id2)[k] * e->sp_vals[i * FIELDS + g];
            }
        }
        CHECK_NEAR(z[i], want, 1e-5);
    }
    dt_elem_free(e);
    dt_model_destroy(m);
}

TEST(ctr_bad_batches_name_the_example_and_field)
{
    dt_model *m = make_model(DT_ARCH_DEEPFM);
    dt_elem *e = make_batch(2);
    e->sp_ids[2 * FIELDS + 3] = ROWS;
    CHECK(dt_model_forward_batch(m, e, false, NULL) == DT_ERR_INVALID &&
          strstr(dt_last_error(), "example 2") && strstr(dt_last_error(), "field 4") &&
          strstr(dt_last_error(), "outside"));
    e->sp_ids[2 * FIELDS + 3] = -1;
    CHECK(dt_model_forward_batch(m, e, false, NULL) == DT_ERR_INVALID &&
          strstr(dt_last_error(), "id -1"));
    e->sp_ids[2 * FIELDS + 3] = 0;
    e->sp_vals[FIELDS] = NAN;
    CHECK(dt_model_forward_batch(m, e, false, NULL) == DT_ERR_INVALID &&
          strstr(dt_last_error(), "example 1") && strstr(dt_last_error(), "nan"));
    e->sp_vals[FIELDS] = 1.0f;
    e->sp_row[1] = FIELDS - 1; /* 4 fields, then 6 */
    CHECK(dt_model_forward_batch(m, e, false, NULL) == DT_ERR_INVALID &&
          strstr(dt_last_error(), "example 0 of the batch has 4 fields"));
    dt_elem_free(e);
    dt_model_destroy(m);
}

/* A DeepFM spec over the test's tables with MLP layers of these widths and keep probabilities. */
static void deepfm_spec(int n_deep, const int *units, const float *keep, dt_model_spec *spec)
{
    dt_ctr_spec c;
    dt_ctr_spec_default(&c);
    c.field_size = FIELDS, c.feature_size = ROWS, c.embedding_size = EMB;
    c.n_deep = n_deep;
    for (int i = 0; i < n_deep; i++)
        c.deep_layers[i] = units[i], c.dropout_keep[i] = keep[i];
    CHECK_OK(dt_model_spec_ctr(DT_ARCH_DEEPFM, &c, spec));
}

/* n examples of FIELDS ids drawn from seed, with values 1 or drawn too, labelled 1 on every
 * label_every-th example (in labels and in the batch). NULL when out of memory. */
static dt_elem *random_batch(int n, uint64_t seed, bool drawn_values, int label_every,
                             int32_t *labels)
{
    dt_elem *e = dt_elem_alloc(n, 0, (size_t)n * FIELDS, 0);
    if (!e)
        return NULL;
    dt_rng r;
    dt_rng_seed(&r, seed);
    for (int i = 0; i <= n; i++)
        e->sp_row[i] = (int64_t)i * FIELDS;
    for (int i = 0; i < n * FIELDS; i++) {
        e->sp_ids[i] = (int64_t)dt_rng_below(&r, ROWS);
        e->sp_vals[i] = drawn_values ? uniform(&r) : 1.0f;
    }
    for (int i = 0; i < n; i++)
        labels[i] = i % label_every == 0, e->labels[i] = (float)labels[i];
    return e;
}

/* A batch of n examples over a pool of 2: its examples are checked by several tasks at once,
 * and the error still names the first bad example of the batch, training or not. A batch after
 * a bad one trains as if the bad one had never come. */
TEST(ctr_bad_batches_over_a_pool_name_the_first_bad_example)
{
    enum { N = 256 };
    dt_pool *pool = NULL;
    CHECK_OK(dt_pool_create(2, &pool));
    dt_model_spec spec;
    deepfm_spec(1, (const int[]){8}, (const float[]){1.0f}, &spec);
    dt_model *m = NULL, *ref = NULL;
    CHECK_OK(dt_model_create(&spec, N, pool, NULL, &m));
    CHECK_OK(dt_model_create(&spec, N, NULL, NULL, &ref));
    int32_t labels[N];
    dt_elem *e = random_batch(N, 9, false, 3, labels);
    if (!m || !ref || !e)
        goto done;
    dt_model_init_params(m, 5);
    dt_model_init_params(ref, 5);
    for (int training = 0; training <= 1; training++) {
        /* Example 200 (in the last task) and example 70 (in the second): 70 is named. */
        e->sp_ids[200 * FIELDS + 1] = ROWS + 3;
        e->sp_vals[70 * FIELDS + 4] = INFINITY;
        CHECK(dt_model_forward_batch(m, e, training, NULL) == DT_ERR_INVALID &&
              strstr(dt_last_error(), "example 70 of the batch, field 5: value inf"));
        e->sp_vals[70 * FIELDS + 4] = 1.0f;
        CHECK(dt_model_forward_batch(m, e, training, NULL) == DT_ERR_INVALID &&
              strstr(dt_last_error(), "example 200 of the batch, field 2: id 43 outside"));
        e->sp_ids[200 * FIELDS + 1] = 7;
    }
    /* One good step on each model: same loss and same logits, bit for bit, with and without the
     * pool, after the refused batches. */
    const float *z = NULL, *z_ref = NULL;
    CHECK_OK(dt_model_forward_batch(m, e, true, &z));
    CHECK_OK(dt_model_forward_batch(ref, e, true, &z_ref));
    double l = dt_model_loss(m, N, labels, 1.0f / N, true, NULL);
    double l_ref = dt_model_loss(ref, N, labels, 1.0f / N, true, NULL);
    CHECK(l == l_ref);
    int same = 1;
    for (int i = 0; i < N && z && z_ref; i++)
        same &= z[i] == z_ref[i];
    CHECK(same);
    dt_model_backward(m, N);
    dt_model_backward(ref, N);
    CHECK(dt_model_table_grad(m, 1)->n == dt_model_table_grad(ref, 1)->n &&
          memcmp(dt_model_table_grad(m, 1)->rows, dt_model_table_grad(ref, 1)->rows,
                 dt_model_table_grad(m, 1)->n * EMB * sizeof(float)) == 0);
done:
    dt_elem_free(e);
    dt_model_destroy(m);
    dt_model_destroy(ref);
    dt_pool_destroy(pool);
}

/* DeepFM's MLP runs each dense layer's activation and the dropout after it in one pass over the
 * pool, both ways: the logits, the loss and every gradient equal those of the model built with
 * no fusion, bit for bit, on one thread and on two, over three steps (new masks each step). */
TEST(ctr_dense_dropout_fusion_changes_no_bit)
{
    enum { N = 512 };
    dt_pool *pool = NULL;
    CHECK_OK(dt_pool_create(2, &pool));
    dt_model_spec spec;
    deepfm_spec(2, (const int[]){64, 32}, (const float[]){0.5f, 0.7f}, &spec);
    dt_model_options unfused = {.no_fuse = true};
    dt_model *m[3] = {NULL, NULL, NULL};
    CHECK_OK(dt_model_create(&spec, N, pool, NULL, &m[0]));
    CHECK_OK(dt_model_create(&spec, N, NULL, NULL, &m[1]));
    CHECK_OK(dt_model_create(&spec, N, pool, &unfused, &m[2]));
    int32_t labels[N];
    dt_elem *e = random_batch(N, 4, true, 4, labels);
    if (!m[0] || !m[1] || !m[2] || !e)
        goto done;
    for (int k = 0; k < 3; k++)
        dt_model_init_params(m[k], 8);
    for (int step = 0; step < 3; step++) {
        const float *z[3];
        double loss[3];
        for (int k = 0; k < 3; k++) {
            dt_model_zero_grads(m[k]);
            CHECK_OK(dt_model_forward_batch(m[k], e, true, &z[k]));
            loss[k] = dt_model_loss(m[k], N, labels, 1.0f / N, true, NULL);
            dt_model_backward(m[k], N);
        }
        for (int k = 1; k < 3; k++) {
            CHECK(loss[k] == loss[0] && memcmp(z[k], z[0], N * sizeof(float)) == 0);
            dt_arena *g = dt_model_grads(m[k]), *g0 = dt_model_grads(m[0]);
            CHECK(memcmp(g->data, g0->data, g0->n_elems * sizeof(float)) == 0);
            dt_sparse_rows *v = dt_model_table_grad(m[k], 1), *v0 = dt_model_table_grad(m[0], 1);
            CHECK(v->n == v0->n && memcmp(v->rows, v0->rows, v0->n * EMB * sizeof(float)) == 0);
        }
    }
done:
    dt_elem_free(e);
    for (int k = 0; k < 3; k++)
        dt_model_destroy(m[k]);
    dt_pool_destroy(pool);
}

TEST(ctr_training_moves_only_the_touched_rows_and_lowers_the_loss)
{
    dt_model *m = make_model(DT_ARCH_DEEPFM);
    dt_optim o;
    dt_optim_init(&o);
    dt_optim_config oc;
    dt_optim_config_default(&oc, DT_OPT_ADAM);
    oc.lr = 0.01f;
    CHECK_OK(dt_model_setup_optimizer(m, &o, &oc));
    CHECK(dt_model_table_optimizer(m) && dt_model_table_optimizer(m)->kind == DT_ROWOPT_ADAM);
    dt_elem *e = make_batch(4);
    int32_t labels[BATCH];
    for (int i = 0; i < BATCH; i++)
        labels[i] = (int32_t)e->labels[i];
    dt_table *v = dt_model_table(m, 1);
    float *before = malloc(sizeof(float) * ROWS * EMB);
    memcpy(before, v->data, sizeof(float) * ROWS * EMB);
    double first = mean_loss(m, e, labels, true), last = first;
    for (int step = 0; step < 30; step++) {
        if (step > 0)
            last = mean_loss(m, e, labels, true);
        dt_model_update_tables(m, 1.0f, o.iterations + 1, NULL);
        dt_optim_step(&o, NULL, dt_model_params(m)->data, dt_model_grads(m)->data,
                      dt_model_params(m)->n_elems);
    }
    CHECK_MSG(last < first * 0.7, "loss %g -> %g", first, last);
    for (int64_t row = 0; row < ROWS; row++) {
        bool in_batch = false;
        for (int i = 0; i < BATCH * FIELDS; i++)
            in_batch = in_batch || e->sp_ids[i] == row;
        bool moved = memcmp(before + row * EMB, dt_table_row(v, row), sizeof(float) * EMB) != 0;
        CHECK_MSG(moved == in_batch, "row %lld: moved %d, in the batch %d", (long long)row, moved,
                  in_batch);
    }
    free(before);
    dt_elem_free(e);
    dt_optim_free(&o);
    dt_model_destroy(m);
}
