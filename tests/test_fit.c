/* fit: the epoch order follows tf.data's shuffle, batches are scaled like the tutorial, training
 * learns, runs are bit-reproducible for a thread count, and divergence is reported. */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/comm.h"
#include "dtrain/dataset.h"
#include "dtrain/fit.h"
#include "dtrain/rng.h"
#include "test.h"
#include "../src/data/image_pipeline.h"
#include "../src/strategy/store_choice.h"

TEST(batches_are_scaled_by_255_like_the_tutorial)
{
    uint8_t images[3 * 4] = {0, 255, 51, 1, 2, 3, 4, 5, 10, 20, 30, 40};
    int32_t labels[3] = {7, 8, 9};
    dt_image_dataset ds = {.images = images, .labels = labels, .n = 3, .h = 2, .w = 2, .c = 1};
    uint32_t idx[2] = {2, 0};
    float x[8];
    int32_t got[2];
    dt_gather_batch(&ds, idx, 2, x, got);
    CHECK(got[0] == 9 && got[1] == 7);
    CHECK(x[0] == 10.0f / 255.0f && x[4] == 0.0f && x[5] == 1.0f && x[6] == 51.0f / 255.0f);
    /* Every byte value, at every offset modulo 16 of an item that is not a multiple of it: the
     * vector part and the scalar tail give v / 255 exactly. */
    enum { ITEM = 277 };
    uint8_t *img = malloc(2 * ITEM);
    int32_t lab[2] = {0, 1}, out[2];
    float *y = malloc(2 * ITEM * sizeof *y);
    for (int i = 0; i < 2 * ITEM; i++)
        img[i] = (uint8_t)(i * 7 + i / 256);
    dt_image_dataset big = {.images = img, .labels = lab, .n = 2, .h = 1, .w = ITEM, .c = 1};
    uint32_t order[2] = {1, 0};
    dt_gather_batch(&big, order, 2, y, out);
    int wrong = 0, seen[256] = {0};
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < ITEM; k++) {
            uint8_t v = img[order[b] * ITEM + k];
            seen[v] = 1;
            wrong += y[b * ITEM + k] != (float)v / 255.0f;
        }
    int values = 0;
    for (int v = 0; v < 256; v++)
        values += seen[v];
    CHECK_MSG(wrong == 0 && values == 256 && out[0] == 1 && out[1] == 0,
              "%d wrong pixels, %d byte values seen", wrong, values);
    free(img);
    free(y);
}

/* ---- The image pipeline against the datasets it stands for ---- */

typedef struct {
    const dt_image_dataset *ds;
    int n_workers, worker;
} chained_gather;

/* The map at the end of the chain: the images of this worker's block of a batch of indices. */
static dt_status gather_block(void *ctx, dt_elem *in, dt_elem **out)
{
    const chained_gather *g = ctx;
    size_t first, rows;
    dt_comm_block((size_t)in->n, g->n_workers, g->worker, &first, &rows);
    int item = g->ds->h * g->ds->w * g->ds->c;
    dt_elem *e = dt_elem_alloc((int)rows, item, 0, 0);
    for (size_t r = 0; r < rows; r++) {
        uint32_t id = (uint32_t)in->sp_ids[in->sp_row[first + r]];
        int32_t label;
        dt_gather_batch(g->ds, &id, 1, e->dense + r * (size_t)item, &label);
        e->labels[r] = (float)label;
    }
    e->index = in->index + first;
    dt_elem_free(in);
    *out = e;
    return DT_OK;
}

/* range -> shuffle -> batch -> map: what dt_image_pipeline_sharded computes in one stage. */
static dt_dataset *chained_pipeline(chained_gather *g, int batch, bool drop, int64_t buffer,
                                    uint64_t seed)
{
    dt_dataset *p;
    CHECK_OK(dt_dataset_range(0, g->ds->n, 1, &p));
    if (buffer > 1)
        CHECK_OK(dt_dataset_shuffle(p, buffer < g->ds->n ? buffer : g->ds->n, seed, true, &p));
    CHECK_OK(dt_dataset_batch(p, batch, drop, &p));
    CHECK_OK(dt_dataset_map(p, gather_block, g, 1, &p));
    return p;
}

/* Both pipelines through three iterations (reset between them): the same elements, bit for
 * bit, and the same end. Returns the elements seen. */
static int compare_pipelines(dt_dataset *a, dt_dataset *b, const char *what)
{
    int seen = 0;
    for (int it = 0; it < 3; it++) {
        for (;;) {
            dt_elem *x = NULL, *y = NULL;
            dt_status sa = dt_dataset_next(a, &x), sb = dt_dataset_next(b, &y);
            CHECK_MSG(sa == sb, "%s: iteration %d, element %d: %s against %s", what, it, seen,
                      dt_status_name(sa), dt_status_name(sb));
            if (sa != DT_OK || sb != DT_OK) {
                dt_elem_free(x), dt_elem_free(y);
                break;
            }
            size_t n = (size_t)x->n * x->n_dense;
            CHECK_MSG(x->n == y->n && x->n_dense == y->n_dense && x->index == y->index &&
                          memcmp(x->dense, y->dense, n * sizeof(float)) == 0 &&
                          memcmp(x->labels, y->labels, (size_t)x->n * sizeof(float)) == 0,
                      "%s: iteration %d, element %d differs (%d rows, index %llu, against %d, "
                      "%llu)", what, it, seen, x->n, (unsigned long long)x->index, y->n,
                      (unsigned long long)y->index);
            seen++;
            dt_elem_free(x), dt_elem_free(y);
        }
        CHECK_OK(dt_dataset_reset(a));
        CHECK_OK(dt_dataset_reset(b));
    }
    return seen;
}

TEST(image_pipeline_equals_the_chained_datasets)
{
    /* 53 images of 5x3 pixels whose bytes name the image: any slip in the order shows. */
    enum { N = 53, ITEM = 15 };
    uint8_t images[N * ITEM];
    int32_t labels[N];
    for (int i = 0; i < N; i++) {
        labels[i] = i % 10;
        for (int k = 0; k < ITEM; k++)
            images[i * ITEM + k] = (uint8_t)(i * 3 + k);
    }
    dt_image_dataset ds = {.images = images, .labels = labels, .n = N, .h = 5, .w = 3, .c = 1};
    const int64_t buffers[] = {0, 1, 2, 7, N, INT64_MAX};
    const int batches[] = {1, 8, 53, 64};
    int compared = 0;
    for (size_t bi = 0; bi < sizeof buffers / sizeof buffers[0]; bi++)
        for (size_t ba = 0; ba < sizeof batches / sizeof batches[0]; ba++)
            for (int drop = 0; drop < 2; drop++)
                for (int workers = 1; workers <= 3; workers++)
                    for (int w = 0; w < workers; w++) {
                        char what[128];
                        snprintf(what, sizeof what, "buffer %lld, batch %d, drop %d, worker %d "
                                 "of %d", (long long)buffers[bi], batches[ba], drop, w, workers);
                        chained_gather g = {&ds, workers, w};
                        dt_dataset *a, *b = chained_pipeline(&g, batches[ba], drop,
                                                             buffers[bi], 11);
                        CHECK_OK(dt_image_pipeline_sharded(&ds, batches[ba], drop, buffers[bi],
                                                           11, w % 2 ? 2 : 0, workers, w, &a));
                        compared += compare_pipelines(a, b, what);
                        dt_dataset_destroy(a);
                        dt_dataset_destroy(b);
                    }
    /* Every configuration gave elements, but a batch of 64 over 53 with drop_remainder. */
    CHECK_MSG(compared > 2000, "%d elements compared", compared);
}

/* A synthetic 8x8 dataset whose class is the bright quadrant, with noise. */
static void make_quadrants(dt_image_dataset *ds, int n, uint64_t seed)
{
    memset(ds, 0, sizeof *ds);
    ds->n = n, ds->h = 8, ds->w = 8, ds->c = 1, ds->n_classes = 4;
    ds->images = malloc((size_t)n * 64);
    ds->labels = malloc((size_t)n * sizeof *ds->labels);
    snprintf(ds->images_path, sizeof ds->images_path, "quadrants");
    snprintf(ds->labels_path, sizeof ds->labels_path, "quadrants-labels");
    dt_rng r;
    dt_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        int q = (int)dt_rng_below(&r, 4);
        ds->labels[i] = q;
        for (int y = 0; y < 8; y++)
            for (int x = 0; x < 8; x++) {
                int in_q = (y / 4) * 2 + x / 4 == q;
                ds->images[i * 64 + y * 8 + x] = (uint8_t)(dt_rng_below(&r, 120) + (in_q ? 100 : 0));
            }
    }
}

static const char *const small_cnn =
    "{\"name\": \"quad\", \"input_shape\": [8, 8, 1], \"layers\": ["
    "{\"type\": \"conv2d\", \"filters\": 8, \"kernel_size\": 3, \"activation\": \"relu\"},"
    "{\"type\": \"max_pooling2d\"}, {\"type\": \"flatten\"},"
    "{\"type\": \"dense\", \"units\": 16, \"activation\": \"relu\"}, {\"type\": \"dropout\", \"rate\": 0.1},"
    "{\"type\": \"dense\", \"units\": 4}]}";

/* Trains small_cnn on the quadrant data; returns the parameter checksum. */
static uint32_t train_quadrants(int threads, uint64_t seed, int epochs, dt_fit_result *res,
                                double *test_acc, dt_opt_kind kind, float lr)
{
    dt_image_dataset train, test;
    make_quadrants(&train, 512, 100);
    make_quadrants(&test, 256, 200);
    dt_model_spec spec;
    dt_model *m = NULL;
    dt_pool *pool = NULL;
    dt_optim o;
    dt_optim_init(&o);
    uint32_t crc = 0;
    CHECK_OK(dt_model_spec_from_json(small_cnn, "small_cnn", &spec));
    CHECK_OK(dt_pool_create(threads, &pool));
    CHECK_OK(dt_model_create(&spec, 32, pool, NULL, &m));
    if (!m)
        goto done;
    dt_model_init_params(m, seed);
    dt_optim_config cfg;
    dt_optim_config_default(&cfg, kind);
    cfg.lr = lr;
    CHECK_OK(dt_optim_setup(&o, &cfg, dt_model_params(m)));
    dt_fit_config fc;
    dt_fit_config_default(&fc);
    fc.epochs = epochs;
    fc.batch_size = 32;
    fc.seed = seed;
    dt_status st = dt_fit(m, &o, pool, &train, &test, &fc, res);
    if (st == DT_OK) {
        double loss;
        CHECK_OK(dt_evaluate(m, &test, &loss, test_acc));
        crc = dt_arena_checksum(dt_model_params(m));
    }
done:
    dt_optim_free(&o);
    dt_model_destroy(m);
    dt_pool_destroy(pool);
    dt_image_dataset_free(&train);
    dt_image_dataset_free(&test);
    return crc;
}

TEST(fit_learns_a_separable_task)
{
    dt_fit_result one, many;
    double acc_one, acc_many;
    train_quadrants(1, 1, 1, &one, &acc_one, DT_OPT_ADAM, 0.003f);
    train_quadrants(1, 1, 6, &many, &acc_many, DT_OPT_ADAM, 0.003f);
    CHECK(one.steps == 16 && many.steps == 96 && many.epochs == 6);
    CHECK(many.samples == 96 * 32);
    CHECK_MSG(many.final_loss < 0.5 * one.final_loss, "loss %g after 1 epoch, %g after 6",
              one.final_loss, many.final_loss);
    CHECK_MSG(acc_many > 0.9 && acc_many > acc_one, "test accuracy %g after 1 epoch, %g after 6",
              acc_one, acc_many);
}

TEST(fit_is_bit_reproducible_per_thread_count)
{
    dt_fit_result r;
    double acc;
    for (int threads = 1; threads <= 2; threads++) {
        uint32_t a = train_quadrants(threads, 5, 2, &r, &acc, DT_OPT_MOMENTUM, 0.05f);
        uint32_t b = train_quadrants(threads, 5, 2, &r, &acc, DT_OPT_MOMENTUM, 0.05f);
        CHECK_MSG(a == b && a != 0, "threads %d: checksums %08x and %08x", threads, a, b);
        uint32_t c = train_quadrants(threads, 6, 2, &r, &acc, DT_OPT_MOMENTUM, 0.05f);
        CHECK_MSG(c != a, "seeds 5 and 6 gave the same parameters");
    }
}

TEST(fit_reports_divergence_with_the_step)
{
    dt_fit_result r;
    double acc;
    CHECK(train_quadrants(1, 1, 3, &r, &acc, DT_OPT_SGD, 1e30f) == 0);
    CHECK_MSG(strstr(dt_last_error(), "training diverged") != NULL, "message: %s", dt_last_error());
    CHECK(strstr(dt_last_error(), "step ") != NULL);
}

TEST(fit_rejects_labels_beyond_the_outputs)
{
    dt_image_dataset ds;
    make_quadrants(&ds, 40, 1);
    ds.labels[17] = 9;
    dt_model_spec spec;
    dt_model *m;
    CHECK_OK(dt_model_spec_from_json(small_cnn, "small_cnn", &spec));
    CHECK_OK(dt_model_create(&spec, 8, NULL, NULL, &m));
    CHECK_ERR(dt_check_dataset(m, &ds), DT_ERR_INVALID, "quadrants-labels: offset 25: label 9, but the model has 4 outputs");
    ds.h = 9;
    CHECK_ERR(dt_check_dataset(m, &ds), DT_ERR_INVALID, "images are 9x8x1 but model quad takes 8x8x1");
    dt_model_destroy(m);
    dt_image_dataset_free(&ds);
}

/* Trains 2 epochs of 40 examples in batches of 32 (a partial batch of 8 each epoch). */
static uint32_t train_with_remainder(dt_reduction reduction, bool keep_remainder, int64_t *steps)
{
    dt_image_dataset train;
    make_quadrants(&train, 40, 3);
    dt_model_spec spec;
    dt_model *m = NULL;
    dt_optim o;
    dt_optim_init(&o);
    CHECK_OK(dt_model_spec_from_json(small_cnn, "small_cnn", &spec));
    CHECK_OK(dt_model_create(&spec, 32, NULL, NULL, &m));
    dt_model_init_params(m, 1);
    dt_optim_config cfg;
    dt_optim_config_default(&cfg, DT_OPT_SGD);
    CHECK_OK(dt_optim_setup(&o, &cfg, dt_model_params(m)));
    dt_fit_config fc;
    dt_fit_config_default(&fc);
    fc.epochs = 2;
    fc.batch_size = 32;
    fc.keep_remainder = keep_remainder;
    fc.reduction = reduction;
    dt_fit_result r;
    CHECK_OK(dt_fit(m, &o, NULL, &train, NULL, &fc, &r));
    *steps = r.steps;
    uint32_t crc = dt_arena_checksum(dt_model_params(m));
    dt_optim_free(&o);
    dt_model_destroy(m);
    dt_image_dataset_free(&train);
    return crc;
}

TEST(loss_reduction_differs_only_on_partial_batches)
{
    int64_t s1, s2, s3, s4;
    uint32_t mean_drop = train_with_remainder(DT_REDUCTION_MEAN, false, &s1);
    uint32_t global_drop = train_with_remainder(DT_REDUCTION_SUM_OVER_GLOBAL, false, &s2);
    uint32_t mean_keep = train_with_remainder(DT_REDUCTION_MEAN, true, &s3);
    uint32_t global_keep = train_with_remainder(DT_REDUCTION_SUM_OVER_GLOBAL, true, &s4);
    CHECK(s1 == 2 && s2 == 2 && s3 == 4 && s4 == 4);
    CHECK(mean_drop == global_drop);  /* full batches: 1/B is 1/global batch */
    CHECK(mean_keep != global_keep);  /* the partial batch of 8 is scaled by 1/8 or by 1/32 */
    CHECK(mean_keep != mean_drop);
}

TEST(fit_configuration_is_checked)
{
    dt_fit_config c;
    dt_fit_config_default(&c);
    c.batch_size = 0;
    CHECK_ERR(dt_fit_check(&c, 100), DT_ERR_INVALID, "batch_size: must be in 1..1048576, got 0");
    dt_fit_config_default(&c);
    c.epochs = 0;
    CHECK_ERR(dt_fit_check(&c, 100), DT_ERR_INVALID, "epochs");
    dt_fit_config_default(&c);
    c.batch_size = 2147483647;
    CHECK_ERR(dt_fit_check(&c, 100), DT_ERR_INVALID, "batch_size: must be in 1..1048576");
    c.batch_size = 1000;
    CHECK_ERR(dt_fit_check(&c, 100), DT_ERR_INVALID, "100 examples make no full batch of 1000");
    c.keep_remainder = true;
    CHECK_OK(dt_fit_check(&c, 100));
    dt_fit_config_default(&c);
    c.save_checkpoints_secs = -1;
    CHECK_ERR(dt_fit_check(&c, -1), DT_ERR_INVALID, "save_checkpoints_secs: must not be negative");
    dt_fit_config_default(&c);
    c.eval_throttle_secs = 2e9;
    CHECK_ERR(dt_fit_check(&c, -1), DT_ERR_INVALID, "eval_throttle_secs: must be in 0..1000000000");
}

/* train_and_evaluate on the quadrant data: max_steps 40 over 16-step epochs; returns the
 * parameters' checksum, with the progress text in log (may be NULL). */
static uint32_t train_and_evaluate_quadrants(const dt_fit_config *extra, dt_fit_result *r,
                                             char **log, double *check_loss)
{
    dt_image_dataset train, test;
    make_quadrants(&train, 512, 100);
    make_quadrants(&test, 256, 200);
    dt_model_spec spec;
    dt_model *m = NULL;
    dt_optim o;
    dt_optim_init(&o);
    dt_dataset *train_p = NULL, *test_p = NULL;
    size_t log_len = 0;
    FILE *out = log ? open_memstream(log, &log_len) : NULL;
    uint32_t crc = 0;
    CHECK_OK(dt_model_spec_from_json(small_cnn, "small_cnn", &spec));
    CHECK_OK(dt_model_create(&spec, 32, NULL, NULL, &m));
    CHECK_OK(dt_image_pipeline(&train, 32, true, INT64_MAX, 3, 2, &train_p));
    CHECK_OK(dt_image_pipeline(&test, 32, false, 0, 0, 0, &test_p));
    if (!m || !train_p || !test_p)
        goto done;
    dt_model_init_params(m, 3);
    dt_optim_config oc;
    dt_optim_config_default(&oc, DT_OPT_ADAM);
    CHECK_OK(dt_optim_setup(&o, &oc, dt_model_params(m)));
    dt_fit_config fc = *extra;
    fc.batch_size = 32;
    fc.seed = 3;
    fc.max_steps = 40;
    fc.progress = out;
    dt_status st = dt_train_and_evaluate(m, &o, NULL, train_p, log ? test_p : NULL, &fc, r);
    CHECK_OK(st);
    if (st == DT_OK) {
        crc = dt_arena_checksum(dt_model_params(m));
        double acc;
        CHECK_OK(dt_dataset_reset(test_p));
        CHECK_OK(dt_evaluate_batches(m, test_p, fc.eval_steps, check_loss, &acc));
    }
done:
    if (out)
        fclose(out);
    dt_dataset_destroy(train_p);
    dt_dataset_destroy(test_p);
    dt_optim_free(&o);
    dt_model_destroy(m);
    dt_image_dataset_free(&train);
    dt_image_dataset_free(&test);
    return crc;
}

static int count_lines_starting(const char *text, const char *prefix)
{
    int n = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        n += strncmp(p, prefix, strlen(prefix)) == 0;
    return n;
}

TEST(train_and_evaluate_evaluates_every_n_steps_and_at_the_end)
{
    dt_fit_config c;
    dt_fit_config_default(&c);
    c.eval_every_steps = 15;
    c.eval_steps = 2;
    c.log_step_count_steps = 10;
    dt_fit_result r;
    char *log = NULL;
    double loss_after = 0.0;
    uint32_t with_eval = train_and_evaluate_quadrants(&c, &r, &log, &loss_after);
    CHECK(r.steps == 40 && r.epochs == 3 && r.evaluations == 3 && r.eval_step == 40);
    CHECK_MSG(log && strstr(log, "Saving dict for global step 15: global_step = 15, loss = ") &&
              strstr(log, "Saving dict for global step 30: global_step = 30, loss = ") &&
              strstr(log, "Saving dict for global step 40: global_step = 40, loss = ") &&
              count_lines_starting(log, "Saving dict") == 3, "log:\n%s", log ? log : "");
    CHECK(log && count_lines_starting(log, "loss = ") == 4 && strstr(log, "step = 30 ("));
    /* The last evaluation is of the final parameters, over eval_steps batches. */
    CHECK_MSG(r.val_loss == loss_after, "%.9g vs %.9g", r.val_loss, loss_after);
    free(log);
    /* Evaluating does not change what is trained. */
    dt_fit_config none;
    dt_fit_config_default(&none);
    dt_fit_result r2;
    uint32_t without = train_and_evaluate_quadrants(&none, &r2, NULL, &loss_after);
    CHECK(with_eval == without && with_eval != 0 && r2.evaluations == 0 && r2.steps == 40);
}

TEST(train_and_evaluate_throttles_by_seconds_after_a_start_delay)
{
    dt_fit_config c;
    dt_fit_config_default(&c);
    c.eval_throttle_secs = 1e-9; /* due after every step */
    c.eval_steps = 1;
    dt_fit_result r;
    char *log = NULL;
    double loss;
    train_and_evaluate_quadrants(&c, &r, &log, &loss);
    CHECK_MSG(r.evaluations == 40 && log && count_lines_starting(log, "Saving dict") == 40,
              "%lld evaluations", (long long)r.evaluations);
    free(log);
    c.eval_start_delay_secs = 1e6; /* never due: only the final evaluation */
    log = NULL;
    train_and_evaluate_quadrants(&c, &r, &log, &loss);
    CHECK(r.evaluations == 1 && r.eval_step == 40 && log &&
          count_lines_starting(log, "Saving dict for global step 40:") == 1);
    free(log);
    dt_fit_config bad;
    dt_fit_config_default(&bad);
    bad.eval_throttle_secs = -1.0;
    CHECK_ERR(dt_fit_check(&bad, 100), DT_ERR_INVALID, "eval_throttle_secs");
}

/* Steps of a run whose plain and streaming updates take the given times: how many streamed,
 * and whether the last one did. */
static int streamed_steps(int64_t steps, double plain_s, double streaming_s, bool *last)
{
    dt_store_choice c = {0};
    int streamed = 0;
    for (int64_t i = 0; i < steps; i++) {
        dt_store_choice_for_step(&c);
        streamed += c.now;
        *last = c.now;
        dt_store_choice_record(&c, c.now ? streaming_s : plain_s);
    }
    return streamed;
}

TEST(shared_stores_stream_only_where_plain_ones_are_slow)
{
    const int64_t steps = DT_STORE_TRIAL_START + 3 * DT_STORE_TRIAL_EVERY;
    bool last = false;
    /* Close cores: plain stores cost less; only the trials' streaming steps stream. */
    int n = streamed_steps(steps, 150e-6, 200e-6, &last);
    CHECK_MSG(n == 3 * DT_STORE_TRIAL_STEPS && !last, "%d streamed steps", n);
    /* Far apart: plain stores wait on invalidations; every step after the first trial streams
     * but the trials' plain ones. */
    n = streamed_steps(steps, 750e-6, 200e-6, &last);
    int64_t want = steps - DT_STORE_TRIAL_START - 3 * DT_STORE_TRIAL_STEPS;
    CHECK_MSG(n == want && last, "%d streamed steps, expected %lld", n, (long long)want);
    /* Streaming a little cheaper is not enough: its readers pay for it too. */
    n = streamed_steps(steps, 250e-6, 200e-6, &last);
    CHECK_MSG(n == 3 * DT_STORE_TRIAL_STEPS && !last, "%d streamed steps", n);
    /* Before the first trial, plain stores. */
    n = streamed_steps(DT_STORE_TRIAL_START, 750e-6, 200e-6, &last);
    CHECK_MSG(n == 0, "%d streamed steps before the first trial", n);
}

/* The choice follows the machine: when plain stores turn slow mid-run, the next trial streams. */
TEST(shared_stores_follow_a_change_at_the_next_trial)
{
    dt_store_choice c = {0};
    int64_t first_streamed_after = -1;
    for (int64_t i = 0; i < DT_STORE_TRIAL_START + 2 * DT_STORE_TRIAL_EVERY; i++) {
        dt_store_choice_for_step(&c);
        bool slow = i >= DT_STORE_TRIAL_START + DT_STORE_TRIAL_EVERY / 2;
        if (slow && c.now && first_streamed_after < 0 &&
            i >= DT_STORE_TRIAL_START + DT_STORE_TRIAL_EVERY + 2 * DT_STORE_TRIAL_STEPS)
            first_streamed_after = i;
        dt_store_choice_record(&c, c.now ? 200e-6 : slow ? 750e-6 : 150e-6);
    }
    CHECK_MSG(first_streamed_after == DT_STORE_TRIAL_START + DT_STORE_TRIAL_EVERY +
                                          2 * DT_STORE_TRIAL_STEPS,
              "streaming from step %lld", (long long)first_streamed_after);
}

/* ---- A program's own callbacks (dt_fit_callback) ---- */

typedef struct {
    int begins, steps, epochs, ends;
    int stop_after_epoch, fail_at_step;
    bool steps_in_order, validated_seen;
    double last_epoch_loss;
} probe;

static dt_status probe_begin(void *user, const dt_fit_status *s)
{
    probe *p = user;
    p->begins++;
    p->steps_in_order = s->step == 0;
    return DT_OK;
}

static dt_status probe_step(void *user, const dt_fit_status *s)
{
    probe *p = user;
    p->steps++;
    p->steps_in_order = p->steps_in_order && s->step == p->steps && isfinite(s->batch_loss) &&
                        s->chief;
    if (p->fail_at_step && s->step == p->fail_at_step)
        return dt_error(DT_ERR_INVALID, "the probe refuses step %lld", (long long)s->step);
    return DT_OK;
}

static dt_status probe_epoch(void *user, const dt_fit_status *s)
{
    probe *p = user;
    p->epochs++;
    p->last_epoch_loss = s->epoch_loss;
    p->validated_seen = p->validated_seen || (s->validated && isfinite(s->val_loss));
    return p->stop_after_epoch && s->epoch + 1 == p->stop_after_epoch ? DT_END : DT_OK;
}

static dt_status probe_end(void *user, const dt_fit_status *s)
{
    (void)s;
    ((probe *)user)->ends++;
    return DT_OK;
}

/* Trains small_cnn 5 epochs (16 steps each) on the quadrants with the probe as callback. */
static dt_status train_with_probe(probe *p, dt_fit_result *res)
{
    dt_image_dataset train, test;
    make_quadrants(&train, 512, 100);
    make_quadrants(&test, 128, 200);
    dt_model_spec spec;
    dt_model *m = NULL;
    dt_optim o;
    dt_optim_init(&o);
    dt_status st = dt_model_spec_from_json(small_cnn, "small_cnn", &spec);
    if (st == DT_OK)
        st = dt_model_create(&spec, 32, NULL, NULL, &m);
    dt_optim_config cfg;
    dt_optim_config_default(&cfg, DT_OPT_ADAM);
    if (st == DT_OK) {
        dt_model_init_params(m, 3);
        st = dt_optim_setup(&o, &cfg, dt_model_params(m));
    }
    dt_fit_callback cb = {p, probe_begin, probe_step, probe_epoch, probe_end};
    dt_fit_config fc;
    dt_fit_config_default(&fc);
    fc.epochs = 5, fc.batch_size = 32, fc.validate = true;
    fc.callbacks = &cb, fc.n_callbacks = 1;
    if (st == DT_OK)
        st = dt_fit(m, &o, NULL, &train, &test, &fc, res);
    dt_optim_free(&o);
    dt_model_destroy(m);
    dt_image_dataset_free(&train);
    dt_image_dataset_free(&test);
    return st;
}

TEST(fit_calls_a_programs_callbacks_and_stops_when_asked)
{
    probe p = {.stop_after_epoch = 2};
    dt_fit_result r;
    CHECK_OK(train_with_probe(&p, &r));
    CHECK_MSG(r.epochs == 2 && r.steps == 32, "%d epochs, %lld steps", r.epochs,
              (long long)r.steps);
    CHECK(p.begins == 1 && p.steps == 32 && p.epochs == 2 && p.ends == 1);
    CHECK(p.steps_in_order && p.validated_seen);
    CHECK(p.last_epoch_loss == r.final_loss);
    /* An error of a hook ends fit with it, naming the callback. */
    probe q = {.fail_at_step = 5};
    CHECK_ERR(train_with_probe(&q, &r), DT_ERR_INVALID, "callback 0: the probe refuses step 5");
    CHECK(q.steps == 5);
    dt_fit_config fc;
    dt_fit_config_default(&fc);
    fc.n_callbacks = 1;
    CHECK_ERR(dt_fit_check(&fc, 100), DT_ERR_INVALID, "n_callbacks");
}
