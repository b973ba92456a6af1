/* conv_bench: the tutorial CNN's first block, generic kernels against the fused AVX2 kernel.
 *
 * Shapes: batch 64 of 28x28x1 NHWC floats -> Conv2D(32, 3x3, valid, stride 1) + ReLU ->
 * MaxPool2D(2x2, stride 2), i.e. (64, 26, 26, 32) conv outputs pooled to (64, 13, 13, 32).
 *
 *   generic  forward:  dt_conv2d_forward (im2col + OpenBLAS sgemm) + dt_act_forward(RELU)
 *                      + dt_maxpool_forward
 *            backward: dt_maxpool_backward + dt_act_backward + dt_conv2d_backward (dx = NULL)
 *   fused    forward:  dt_convpool_forward;  backward: dt_convpool_backward
 *
 * Both paths do the same work (checked once: equal pooled outputs and weight gradients), for 1 and
 * 2 threads of a dt_pool, OpenBLAS single-threaded (dt_gemm_setup) as inside dtrain. Each case is
 * warmed up, then timed in repetitions of at least --rep-s seconds each (--reps of them, so at
 * least reps * rep-s seconds per case); the best repetition counts. Within a thread count the
 * repetitions of the two paths alternate, so a burst of load from another process hits both and
 * the speed-up, a ratio taken in one run, stays meaningful on a shared machine.
 *
 * usage: conv_bench [--reps N] [--rep-s SECONDS]      (defaults: 5 and 0.15)
 * GFLOP/s counts the conv's multiply-adds only (forward 2*26*26*32*9 per example, backward the
 * same again for dW), so it is comparable across paths; a last line splits the generic path's
 * 1-thread time by stage.
 * Exits 1 if the fused kernel is not supported here or the paths disagree, 2 on a bad flag. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/clock.h"
#include "../src/nn/convpool.h"
#include "../src/nn/gemm.h"
#include "../src/nn/nn.h"
#include "dtrain/pool.h"
#include "dtrain/rng.h"

enum { BATCH = 64, IMG = 28, FILTERS = 32 };

struct bench {
    dt_conv_geom cg;
    dt_pool_geom pg;
    dt_pool *pool;
    float *x, *w, *b, *dy;             /* inputs: images, weights, bias, gradient of pooled out */
    float *conv, *pooled, *dconv;      /* generic: conv out (B,26,26,32), pooled, conv-out grad */
    int32_t *arg;                      /* generic: argmax of each pooled element */
    float *f_pooled;                   /* fused: pooled output */
    uint32_t *mask;                    /* fused: window masks */
    float *dw, *db, *f_dw, *f_db;      /* weight and bias gradients (accumulated) */
    float *scratch, *f_scratch;
};

static void *xalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "conv_bench: out of memory\n");
        exit(1);
    }
    return p;
}

static void fill(dt_rng *r, float *a, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        a[i] = lo + (hi - lo) * dt_rng_uniform(r);
}

static void generic_forward(struct bench *k)
{
    dt_conv2d_forward(k->pool, &k->cg, BATCH, k->x, k->w, k->b, k->conv, k->scratch);
    dt_act_forward(DT_ACT_RELU, (size_t)BATCH * k->cg.OH * k->cg.OW * k->cg.OC, k->conv);
    dt_maxpool_forward(&k->pg, BATCH, k->conv, k->pooled, k->arg);
}

static void generic_backward(struct bench *k)
{
    dt_maxpool_backward(&k->pg, BATCH, k->dy, k->arg, k->dconv);
    dt_act_backward(DT_ACT_RELU, (size_t)BATCH * k->cg.OH * k->cg.OW * k->cg.OC, k->conv,
                    k->dconv);
    dt_conv2d_backward(k->pool, &k->cg, BATCH, k->x, k->w, k->dconv, k->dw, k->db, NULL,
                       k->scratch);
}

static void fused_forward(struct bench *k)
{
    dt_convpool_forward(k->pool, &k->cg, &k->pg, BATCH, k->x, k->w, k->b, k->f_pooled, k->mask);
}

static void fused_backward(struct bench *k)
{
    dt_convpool_backward(k->pool, &k->cg, &k->pg, BATCH, k->x, k->f_pooled, k->mask, k->dy,
                         k->f_dw, k->f_db, k->f_scratch);
}

static void generic_step(struct bench *k)
{
    generic_forward(k);
    generic_backward(k);
}

static void fused_step(struct bench *k)
{
    fused_forward(k);
    fused_backward(k);
}

typedef void (*step_fn)(struct bench *);

/* The generic path stage by stage, for the breakdown line. */
static size_t conv_elems(const struct bench *k)
{
    return (size_t)BATCH * k->cg.OH * k->cg.OW * k->cg.OC;
}
static void st_conv_fwd(struct bench *k)
{
    dt_conv2d_forward(k->pool, &k->cg, BATCH, k->x, k->w, k->b, k->conv, k->scratch);
}
static void st_relu_fwd(struct bench *k) { dt_act_forward(DT_ACT_RELU, conv_elems(k), k->conv); }
static void st_pool_fwd(struct bench *k)
{
    dt_maxpool_forward(&k->pg, BATCH, k->conv, k->pooled, k->arg);
}
static void st_pool_bwd(struct bench *k)
{
    dt_maxpool_backward(&k->pg, BATCH, k->dy, k->arg, k->dconv);
}
static void st_relu_bwd(struct bench *k)
{
    dt_act_backward(DT_ACT_RELU, conv_elems(k), k->conv, k->dconv);
}
static void st_conv_bwd(struct bench *k)
{
    dt_conv2d_backward(k->pool, &k->cg, BATCH, k->x, k->w, k->dconv, k->dw, k->db, NULL,
                       k->scratch);
}

/* Seconds per call of fn, averaged over one repetition of at least min_s seconds. */
static double time_rep(step_fn fn, struct bench *k, double min_s)
{
    long iters = 0;
    double t0 = dt_clock_now(), t;
    do {
        fn(k);
        iters++;
        t = dt_clock_now();
    } while (t - t0 < min_s);
    return (t - t0) / (double)iters;
}

static double max_abs_diff(const float *a, const float *b, size_t n, double *max_abs_a)
{
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        d = e > d ? e : d;
        m = fabs(a[i]) > m ? fabs(a[i]) : m;
    }
    if (max_abs_a)
        *max_abs_a = m;
    return d;
}

static int parse_args(int argc, char **argv, int *reps, double *rep_s)
{
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 1000)
                return -1;
            *reps = (int)v;
        } else if (strcmp(argv[i], "--rep-s") == 0 && i + 1 < argc) {
            double v = strtod(argv[++i], &end);
            if (*end || !(v > 0.0) || v > 60.0)
                return -1;
            *rep_s = v;
        } else {
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    int reps = 5;
    double rep_s = 0.15;
    if (parse_args(argc, argv, &reps, &rep_s) != 0) {
        fprintf(stderr, "usage: conv_bench [--reps N (1..1000)] [--rep-s SECONDS (0..60)]\n");
        return 2;
    }
    dt_gemm_setup();

    struct bench k = {0};
    if (!dt_conv_geom_init(&k.cg, IMG, IMG, 1, 3, 3, FILTERS, 1, 1, false) ||
        !dt_pool_geom_init(&k.pg, k.cg.OH, k.cg.OW, FILTERS, 2, 2, 2, 2, false)) {
        fprintf(stderr, "conv_bench: geometry rejected\n");
        return 1;
    }
    if (!dt_convpool_supported(&k.cg, &k.pg)) {
        fprintf(stderr, "conv_bench: the fused kernel is not supported here: it needs a CPU with "
                        "AVX2 and FMA (and 3x3/C=1/stride-1 conv + 2x2/2 pool shapes, which these "
                        "are), so there is nothing to compare the generic path with\n");
        return 1;
    }

    const int max_threads = 2;
    size_t n_x = (size_t)BATCH * IMG * IMG, n_w = (size_t)9 * FILTERS;
    size_t n_conv = (size_t)BATCH * k.cg.OH * k.cg.OW * FILTERS;
    size_t n_pool = (size_t)BATCH * k.pg.OH * k.pg.OW * FILTERS;
    k.x = xalloc(n_x, sizeof *k.x);
    k.w = xalloc(n_w, sizeof *k.w);
    k.b = xalloc(FILTERS, sizeof *k.b);
    k.dy = xalloc(n_pool, sizeof *k.dy);
    k.conv = xalloc(n_conv, sizeof *k.conv);
    k.dconv = xalloc(n_conv, sizeof *k.dconv);
    k.pooled = xalloc(n_pool, sizeof *k.pooled);
    k.arg = xalloc(n_pool, sizeof *k.arg);
    k.f_pooled = xalloc(n_pool, sizeof *k.f_pooled);
    k.mask = xalloc(dt_convpool_mask_words(&k.pg, BATCH), sizeof *k.mask);
    k.dw = xalloc(n_w, sizeof *k.dw);
    k.db = xalloc(FILTERS, sizeof *k.db);
    k.f_dw = xalloc(n_w, sizeof *k.f_dw);
    k.f_db = xalloc(FILTERS, sizeof *k.f_db);
    k.scratch = xalloc(dt_conv2d_scratch_elems(&k.cg, max_threads), sizeof *k.scratch);
    k.f_scratch = xalloc(dt_convpool_scratch_elems(&k.cg, max_threads), sizeof *k.f_scratch);

    /* Pixels in [0, 1) as the data loader gives them; Glorot-uniform weights as Keras draws them
     * (limit sqrt(6 / (fan_in + fan_out)) = sqrt(6 / (9 + 288))); small biases so the ReLU and
     * the max both matter; a gradient in [-1, 1). */
    dt_rng rng;
    dt_rng_seed(&rng, 1);
    fill(&rng, k.x, n_x, 0.0f, 1.0f);
    float lim = sqrtf(6.0f / (9.0f + 9.0f * FILTERS));
    fill(&rng, k.w, n_w, -lim, lim);
    fill(&rng, k.b, FILTERS, -0.05f, 0.05f);
    fill(&rng, k.dy, n_pool, -1.0f, 1.0f);

    /* Equal work: one step of each path from zeroed gradients, 1 thread. */
    generic_step(&k);
    fused_step(&k);
    double max_pooled, max_dw, max_db;
    double d_pooled = max_abs_diff(k.pooled, k.f_pooled, n_pool, &max_pooled);
    double d_dw = max_abs_diff(k.dw, k.f_dw, n_w, &max_dw);
    double d_db = max_abs_diff(k.db, k.f_db, FILTERS, &max_db);
    double rel_dw = d_dw / (max_dw > 0 ? max_dw : 1.0), rel_db = d_db / (max_db > 0 ? max_db : 1.0);
    bool ok = d_pooled <= 1e-4 && rel_dw <= 1e-4 && rel_db <= 1e-4;

    printf("conv_bench: batch %d of %dx%dx1 -> Conv2D(%d, 3x3, valid) + ReLU -> MaxPool(2x2/2): "
           "(%d, %d, %d, %d) -> (%d, %d, %d, %d)\n",
           BATCH, IMG, IMG, FILTERS, BATCH, k.cg.OH, k.cg.OW, FILTERS, BATCH, k.pg.OH, k.pg.OW,
           FILTERS);
    printf("check (1 step, 1 thread): pooled output max |generic - fused| = %.3g (max |y| %.3g), "
           "dW max rel diff %.3g, db max rel diff %.3g: %s\n",
           d_pooled, max_pooled, rel_dw, rel_db, ok ? "ok" : "MISMATCH");
    if (!ok) {
        fprintf(stderr, "conv_bench: the generic and fused paths disagree (limit 1e-4): the timings "
                        "would not compare equal work\n");
        return 1;
    }

    /* The conv's useful arithmetic: forward 2*26*26*32*9 per example; backward the same again for
     * dW (no input gradient). Pooling, ReLU and bias are not counted. */
    double conv_flop = 2.0 * k.cg.OH * k.cg.OW * FILTERS * 9 * BATCH;
    printf("timing: best of %d repetitions of >= %.2f s per case, generic and fused alternating\n",
           reps, rep_s);
    printf("%-8s %7s %13s %17s %12s %16s\n", "path", "threads", "fwd ms/batch", "fwd+bwd ms/batch",
           "fwd GFLOP/s", "fwd+bwd GFLOP/s");

    char *breakdown = NULL;
    double best[2][2][2]; /* [threads-1][path: 0 generic, 1 fused][0 fwd, 1 fwd+bwd] */
    for (int nt = 1; nt <= max_threads; nt++) {
        dt_pool *pool = NULL;
        dt_status st = dt_pool_create(nt, &pool);
        if (st != DT_OK) {
            fprintf(stderr, "conv_bench: dt_pool_create(%d): %s\n", nt, dt_last_error());
            return 1;
        }
        k.pool = pool;
        step_fn fns[2][2] = {{generic_forward, generic_step}, {fused_forward, fused_step}};
        for (int p = 0; p < 2; p++)
            for (int m = 0; m < 2; m++) {
                for (int i = 0; i < 5; i++) /* warm up: pages, caches, the pool's threads */
                    fns[p][m](&k);
                best[nt - 1][p][m] = INFINITY;
            }
        for (int r = 0; r < reps; r++)
            for (int m = 0; m < 2; m++)
                for (int p = 0; p < 2; p++) {
                    double t = time_rep(fns[p][m], &k, rep_s);
                    if (t < best[nt - 1][p][m])
                        best[nt - 1][p][m] = t;
                }
        if (nt == 1) {
            /* Where the generic path's time goes (1 thread; best of 3 short repetitions). */
            static const struct { const char *name; step_fn fn; } stages[] = {
                {"conv fwd", st_conv_fwd}, {"relu fwd", st_relu_fwd}, {"pool fwd", st_pool_fwd},
                {"pool bwd", st_pool_bwd}, {"relu bwd", st_relu_bwd}, {"conv bwd", st_conv_bwd}};
            generic_forward(&k);
            char line[512];
            int len = snprintf(line, sizeof line, "generic, 1 thread, ms/batch by stage:");
            for (size_t s = 0; s < sizeof stages / sizeof stages[0]; s++) {
                double t = INFINITY;
                for (int r = 0; r < 3; r++) {
                    double u = time_rep(stages[s].fn, &k, rep_s / 3);
                    t = u < t ? u : t;
                }
                len += snprintf(line + len, sizeof line - (size_t)len, " %s %.3f%s",
                                stages[s].name, t * 1e3, s + 1 < 6 ? "," : "");
            }
            breakdown = strdup(line);
        }
        dt_pool_destroy(pool);
        k.pool = NULL;
        for (int p = 0; p < 2; p++) {
            const double *b = best[nt - 1][p];
            printf("%-8s %7d %13.3f %17.3f %12.1f %16.1f\n", p ? "fused" : "generic", nt,
                   b[0] * 1e3, b[1] * 1e3, conv_flop / b[0] / 1e9, 2.0 * conv_flop / b[1] / 1e9);
        }
    }
    for (int nt = 1; nt <= max_threads; nt++) {
        const double (*b)[2] = best[nt - 1];
        printf("speed-up fused/generic, %d thread%s: forward x%.2f, fwd+bwd x%.2f\n", nt,
               nt > 1 ? "s" : "", b[0][0] / b[1][0], b[0][1] / b[1][1]);
    }
    printf("speed-up 2 threads/1 thread: generic fwd+bwd x%.2f, fused fwd+bwd x%.2f\n",
           best[0][0][1] / best[1][0][1], best[0][1][1] / best[1][1][1]);
    if (breakdown)
        printf("%s\n", breakdown);
    free(breakdown);

    free(k.x); free(k.w); free(k.b); free(k.dy); free(k.conv); free(k.dconv); free(k.pooled);
    free(k.arg); free(k.f_pooled); free(k.mask); free(k.dw); free(k.db); free(k.f_dw);
    free(k.f_db); free(k.scratch); free(k.f_scratch);
    return 0;
}
