/* The C predictor's speed and memory, for bench/predict.sh.
 *
 *   predict_bench make-ckpt PATH ROWS [F K]   a DeepFM checkpoint (F fields, K dims, deep
 *                                              128,64,32) of ROWS table rows, variables drawn
 *   predict_bench throughput PATH BATCH SECONDS
 *                                             rows/s scoring batches of drawn ids and values
 *   predict_bench latency PATH ITERS          one row per call: p50, p99 and mean in us
 *   predict_bench hold PATH                   opens, scores rows touching every page of the
 *                                             tables, prints "ready", waits for stdin to close
 *   predict_bench rows PATH FILE BATCH        scores a field-positional LibSVM file parsed
 *                                             first: the scoring's own rows/s
 * Ids and values are drawn from a fixed seed, uniform over the rows, the same for every run.
 * One line of results as key=value pairs. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain/checkpoint.h"
#include "../src/core/clock.h"
#include "../src/nn/gemm.h"
#include "dtrain/libsvm.h"
#include "dtrain/model.h"
#include "dtrain/predict.h"
#include "dtrain/rng.h"

static int fail(const char *what)
{
    fprintf(stderr, "predict_bench: %s: %s\n", what, dt_last_error());
    return 1;
}

static int make_ckpt(const char *path, int64_t rows, int F, int K)
{
    dt_ctr_spec c;
    dt_ctr_spec_default(&c);
    c.field_size = F, c.feature_size = rows, c.embedding_size = K;
    dt_model_spec spec;
    dt_model *m;
    if (dt_model_spec_ctr(DT_ARCH_DEEPFM, &c, &spec) || dt_model_create(&spec, 8, NULL, NULL, &m))
        return fail("model");
    dt_model_init_params(m, 1);
    /* Nonzero first-order weights: every row of both tables is data to map. */
    dt_table *w = dt_model_find_table(m, "fm_w");
    dt_rng r;
    dt_rng_seed(&r, 2);
    for (int64_t i = 0; i < w->rows; i++)
        w->data[i] = 0.01f * (dt_rng_uniform(&r) - 0.5f);
    dt_arena tabs[2];
    const dt_arena *list[3] = {dt_model_params(m)};
    for (int t = 0; t < 2; t++) {
        if (dt_table_arena(dt_model_table(m, t), -1, &tabs[t]))
            return fail("table");
        list[1 + t] = &tabs[t];
    }
    char *json = dt_model_spec_to_json(&spec);
    dt_ckpt_meta meta[] = {{"model_spec", json}, {"global_step", "1"}};
    if (dt_ckpt_save(path, list, 3, meta, 2))
        return fail(path);
    for (int t = 0; t < 2; t++)
        dt_table_arena_release(&tabs[t]);
    free(json);
    dt_model_destroy(m);
    printf("checkpoint=%s rows=%" PRId64 " F=%d K=%d\n", path, rows, F, K);
    return 0;
}

typedef struct {
    dt_predictor *p;
    dt_predict_ctx *ctx;
    int F;
    int64_t rows;
} bench;

static int open_bench(const char *path, int max_batch, bool populate, bench *b)
{
    dt_predictor_options o;
    dt_predictor_options_default(&o);
    o.max_batch = max_batch;
    o.populate = populate;
    o.private_tables = getenv("PREDICT_PRIVATE_TABLES") != NULL;
    if (dt_predictor_open(path, &o, &b->p) || dt_predict_ctx_new(b->p, &b->ctx))
        return fail(path);
    b->F = dt_predictor_field_size(b->p);
    b->rows = dt_predictor_model_spec(b->p)->ctr.feature_size;
    return b->F > 0 ? 0 : (fprintf(stderr, "predict_bench: not a CTR model\n"), 1);
}

static void close_bench(bench *b)
{
    dt_predict_ctx_free(b->ctx);
    dt_predictor_close(b->p);
}

/* n rows of drawn ids (uniform over the table) and values. */
static void draw(dt_rng *r, const bench *b, int n, int64_t *ids, float *vals)
{
    for (size_t i = 0; i < (size_t)n * b->F; i++) {
        ids[i] = (int64_t)dt_rng_below(r, (uint64_t)b->rows);
        vals[i] = dt_rng_uniform(r);
    }
}

enum { POOL = 64 }; /* batches drawn ahead, cycled through */

static int throughput(const char *path, int B, double seconds)
{
    bench b;
    if (open_bench(path, B, false, &b))
        return 1;
    int64_t *ids = malloc((size_t)POOL * B * b.F * sizeof *ids);
    float *vals = malloc((size_t)POOL * B * b.F * sizeof *vals), *out = malloc((size_t)B * 4);
    dt_rng r;
    dt_rng_seed(&r, 7);
    draw(&r, &b, POOL * B, ids, vals);
    int64_t done = 0;
    double t0 = dt_clock_now(), t;
    for (int k = 0; (t = dt_clock_now()) - t0 < seconds || k < POOL; k++) {
        size_t at = (size_t)(k % POOL) * B * b.F;
        if (dt_predict_ids(b.ctx, B, ids + at, vals + at, DT_PREDICT_SCORES, out))
            return fail("predict");
        done += B;
    }
    printf("predictor batch=%d rows=%" PRId64 " seconds=%.3f rows_per_s=%.0f gemm=%s\n", B, done,
           t - t0, (double)done / (t - t0), dt_gemm_kernel_name());
    free(ids), free(vals), free(out);
    close_bench(&b);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int latency(const char *path, int iters)
{
    bench b;
    if (open_bench(path, 1, false, &b))
        return 1;
    int64_t *ids = malloc((size_t)POOL * b.F * sizeof *ids);
    float *vals = malloc((size_t)POOL * b.F * sizeof *vals), out;
    double *us = malloc((size_t)iters * sizeof *us);
    dt_rng r;
    dt_rng_seed(&r, 8);
    draw(&r, &b, POOL, ids, vals);
    for (int k = 0; k < iters + 100; k++) { /* 100 warm-up calls */
        size_t at = (size_t)(k % POOL) * b.F;
        double t0 = dt_clock_now();
        if (dt_predict_ids(b.ctx, 1, ids + at, vals + at, DT_PREDICT_SCORES, &out))
            return fail("predict");
        if (k >= 100)
            us[k - 100] = (dt_clock_now() - t0) * 1e6;
    }
    double sum = 0;
    for (int k = 0; k < iters; k++)
        sum += us[k];
    qsort(us, (size_t)iters, sizeof *us, cmp_double);
    printf("predictor batch=1 calls=%d p50_us=%.2f p99_us=%.2f mean_us=%.2f\n", iters,
           us[iters / 2], us[(int)(iters * 0.99)], sum / iters);
    free(ids), free(vals), free(us);
    close_bench(&b);
    return 0;
}

/* Scores rows whose ids sweep every table row, so every page of the mapping is read. */
static int hold(const char *path)
{
    enum { B = 256 };
    bench b;
    if (open_bench(path, B, true, &b))
        return 1;
    int64_t *ids = malloc((size_t)B * b.F * sizeof *ids);
    float *vals = malloc((size_t)B * b.F * sizeof *vals), out[B];
    for (size_t i = 0; i < (size_t)B * b.F; i++)
        vals[i] = 1.0f;
    for (int64_t next = 0; next < b.rows;) {
        for (size_t i = 0; i < (size_t)B * b.F; i++, next += 16) /* a row per 64 bytes of fm_w */
            ids[i] = next < b.rows ? next : b.rows - 1;
        if (dt_predict_ids(b.ctx, B, ids, vals, DT_PREDICT_SCORES, out))
            return fail("predict");
    }
    /* fm_v: every row (its rows are K floats, several per page). */
    for (int64_t next = 0; next < b.rows;) {
        for (size_t i = 0; i < (size_t)B * b.F; i++, next++)
            ids[i] = next < b.rows ? next : b.rows - 1;
        if (dt_predict_ids(b.ctx, B, ids, vals, DT_PREDICT_SCORES, out))
            return fail("predict");
    }
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (fread(buf, 1, sizeof buf, stdin) > 0)
        ;
    free(ids), free(vals);
    close_bench(&b);
    return 0;
}

static int rows_of_file(const char *path, const char *file, int B)
{
    bench b;
    if (open_bench(path, B, false, &b))
        return 1;
    FILE *f = fopen(file, "rb");
    if (!f)
        return perror(file), 1;
    dt_libsvm_options lo;
    dt_libsvm_options_default(&lo);
    lo.field_size = b.F, lo.index_base = 0;
    size_t cap = 1 << 20, n = 0;
    int64_t *ids = malloc(cap * sizeof *ids);
    float *vals = malloc(cap * sizeof *vals), *out = malloc((size_t)B * 4);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    dt_rowbuf rb;
    dt_rowbuf_init(&rb, 0);
    while ((len = getline(&line, &lcap, f)) > 0) {
        dt_rowbuf_clear(&rb);
        if (dt_libsvm_parse_line(line, (size_t)len - (line[len - 1] == '\n'), &lo, &rb))
            return fail(file);
        if (n + (size_t)b.F > cap) {
            cap *= 2;
            ids = realloc(ids, cap * sizeof *ids), vals = realloc(vals, cap * sizeof *vals);
        }
        memcpy(ids + n, rb.sp_ids, (size_t)b.F * sizeof *ids);
        memcpy(vals + n, rb.sp_vals, (size_t)b.F * sizeof *vals);
        n += (size_t)b.F;
    }
    fclose(f);
    int64_t total = (int64_t)(n / (size_t)b.F);
    double t0 = dt_clock_now();
    for (int64_t at = 0; at < total; at += B) {
        int k = total - at < B ? (int)(total - at) : B;
        if (dt_predict_ids(b.ctx, k, ids + at * b.F, vals + at * b.F, DT_PREDICT_SCORES, out))
            return fail("predict");
    }
    double t = dt_clock_now() - t0;
    printf("scoring_only rows=%" PRId64 " seconds=%.3f rows_per_s=%.0f\n", total, t,
           (double)total / t);
    dt_rowbuf_free(&rb);
    free(line), free(ids), free(vals), free(out);
    close_bench(&b);
    return 0;
}

int main(int argc, char **argv)
{
    dt_gemm_setup();
    if (argc >= 4 && strcmp(argv[1], "make-ckpt") == 0)
        return make_ckpt(argv[2], atoll(argv[3]), argc > 4 ? atoi(argv[4]) : 39,
                         argc > 5 ? atoi(argv[5]) : 32);
    if (argc == 5 && strcmp(argv[1], "throughput") == 0)
        return throughput(argv[2], atoi(argv[3]), atof(argv[4]));
    if (argc == 4 && strcmp(argv[1], "latency") == 0)
        return latency(argv[2], atoi(argv[3]));
    if (argc == 3 && strcmp(argv[1], "hold") == 0)
        return hold(argv[2]);
    if (argc == 5 && strcmp(argv[1], "rows") == 0)
        return rows_of_file(argv[2], argv[3], atoi(argv[4]));
    fprintf(stderr, "usage: predict_bench make-ckpt PATH ROWS [F K] | throughput PATH BATCH SECS "
                    "| latency PATH ITERS | hold PATH | rows PATH LIBSVM BATCH\n");
    return 2;
}
