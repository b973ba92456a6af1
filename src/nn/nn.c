/* Layer kernels (see nn.h): dense, activations, conv2d by im2col + GEMM, max
 * pooling, dropout and losses, each beside its naive reference. */
#include "nn.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "gemm.h"
#include "../core/cpu.h"

/* ---- Dense ---- */

static void add_bias_rows(int B, int OUT, const float *b, float *y)
{
    for (int i = 0; i < B; i++)
        memcpy(y + (size_t)i * OUT, b, (size_t)OUT * sizeof *y);
}

static void sum_rows_into(int B, int OUT, const float *dy, float *db)
{
    for (int i = 0; i < B; i++)
        for (int o = 0; o < OUT; o++)
            db[o] += dy[(size_t)i * OUT + o];
}

void dt_dense_forward(dt_pool *pool, int B, int IN, int OUT, const float *x, const float *w,
                      const float *b, float *y)
{
    add_bias_rows(B, OUT, b, y);
    dt_gemm(pool, false, false, B, OUT, IN, 1.0f, x, IN, w, OUT, 1.0f, y, OUT);
}

struct bias_job {
    int B, OUT;
    const float *dy;
    float *db;
};

/* Columns [lo, hi) of the bias gradient, each summed over the rows in order. */
DT_MULTI_ISA
static void bias_task(void *ctx, int task, int n_tasks)
{
    const struct bias_job *j = ctx;
    long lo, hi;
    dt_pool_slice(j->OUT, task, n_tasks, &lo, &hi);
    for (int i = 0; i < j->B; i++)
        for (long o = lo; o < hi; o++)
            j->db[o] += j->dy[(size_t)i * j->OUT + o];
}

void dt_dense_backward(dt_pool *pool, int B, int IN, int OUT, const float *x, const float *w,
                       const float *dy, float *dw, float *db, float *dx)
{
    dt_gemm(pool, true, false, IN, OUT, B, 1.0f, x, IN, dy, OUT, 1.0f, dw, OUT);
    /* Split by columns where there are 64 or more (the same sums in the same order). */
    struct bias_job bj = {B, OUT, dy, db};
    dt_pool_run(OUT >= 64 ? pool : NULL, bias_task, &bj, OUT >= 64 ? dt_pool_size(pool) : 1);
    if (dx)
        dt_gemm(pool, false, true, B, IN, OUT, 1.0f, dy, OUT, w, OUT, 0.0f, dx, IN);
}

void dt_dense_forward_naive(int B, int IN, int OUT, const float *x, const float *w, const float *b,
                          float *y)
{
    add_bias_rows(B, OUT, b, y);
    dt_gemm_naive(false, false, B, OUT, IN, 1.0f, x, IN, w, OUT, 1.0f, y, OUT);
}

void dt_dense_backward_naive(int B, int IN, int OUT, const float *x, const float *w, const float *dy,
                           float *dw, float *db, float *dx)
{
    dt_gemm_naive(true, false, IN, OUT, B, 1.0f, x, IN, dy, OUT, 1.0f, dw, OUT);
    sum_rows_into(B, OUT, dy, db);
    if (dx)
        dt_gemm_naive(false, true, B, IN, OUT, 1.0f, dy, OUT, w, OUT, 0.0f, dx, IN);
}

/* ---- Activations ---- */

static float sigmoidf(float v)
{
    /* Two branches so that exp never overflows. */
    if (v >= 0.0f)
        return 1.0f / (1.0f + expf(-v));
    float e = expf(v);
    return e / (1.0f + e);
}

/* x[i] where y[i] > 0, else +0.0: relu's forward (x = y) and backward (x = dy), as the
 * expression y[i] > 0 ? x[i] : 0 gives it, NaN included, but by a bit mask rather than a branch,
 * which mispredicts on half the units and keeps the loop from vectorising. */
static void relu_mask(size_t n, const float *y, float *x)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t bits, keep = -(uint32_t)(y[i] > 0.0f);
        memcpy(&bits, &x[i], sizeof bits);
        bits &= keep;
        memcpy(&x[i], &bits, sizeof bits);
    }
}

DT_MULTI_ISA
void dt_act_forward(dt_activation act, size_t n, float *y)
{
    switch (act) {
    case DT_ACT_NONE:
        break;
    case DT_ACT_RELU:
        relu_mask(n, y, y);
        break;
    case DT_ACT_SIGMOID:
        for (size_t i = 0; i < n; i++)
            y[i] = sigmoidf(y[i]);
        break;
    case DT_ACT_TANH:
        for (size_t i = 0; i < n; i++)
            y[i] = tanhf(y[i]);
        break;
    }
}
DT_MULTI_ISA_HIDE(dt_act_forward)

DT_MULTI_ISA
void dt_act_backward(dt_activation act, size_t n, const float *y, float *dy)
{
    switch (act) {
    case DT_ACT_NONE:
        break;
    case DT_ACT_RELU:
        /* Zero gradient at 0, as TensorFlow and PyTorch do. */
        relu_mask(n, y, dy);
        break;
    case DT_ACT_SIGMOID:
        for (size_t i = 0; i < n; i++)
            dy[i] *= y[i] * (1.0f - y[i]);
        break;
    case DT_ACT_TANH:
        for (size_t i = 0; i < n; i++)
            dy[i] *= 1.0f - y[i] * y[i];
        break;
    }
}
DT_MULTI_ISA_HIDE(dt_act_backward)

/* Elements per task of the pooled element-wise kernels: a few tens of microseconds of work, more
 * than a hand-off costs; a multiple of 16 floats, so tasks never share a cache line. */
#define ELEMS_PER_TASK 32768

struct elementwise_job {
    dt_activation act;
    size_t n;
    const float *y; /* forward output (backward) */
    const float *in; /* dropout forward's input (may be out) */
    float *act_y;   /* act_dropout: the activation's values, in place, then dropout's input */
    float *out;     /* in place */
    const float *mask; /* dropout backward's */
    float *mask_out;   /* dropout forward's */
    float rate;
    uint64_t seed, key1, key2;
};

static int elementwise_tasks(size_t n, size_t per_task)
{
    size_t t = (n + per_task - 1) / per_task;
    return t > 4096 ? 4096 : (int)t;
}

static void elementwise_range(const struct elementwise_job *j, int task, int n_tasks, size_t *lo,
                              size_t *hi)
{
    /* Slices in units of 16 floats (64 bytes); the last takes the rest. */
    long u_lo, u_hi;
    dt_pool_slice((long)((j->n + 15) / 16), task, n_tasks, &u_lo, &u_hi);
    *lo = (size_t)u_lo * 16;
    *hi = (size_t)u_hi * 16 < j->n ? (size_t)u_hi * 16 : j->n;
}

static void act_forward_task(void *ctx, int task, int n_tasks)
{
    const struct elementwise_job *j = ctx;
    size_t lo, hi;
    elementwise_range(j, task, n_tasks, &lo, &hi);
    if (lo < hi)
        dt_act_forward(j->act, hi - lo, j->out + lo);
}

static void act_backward_task(void *ctx, int task, int n_tasks)
{
    const struct elementwise_job *j = ctx;
    size_t lo, hi;
    elementwise_range(j, task, n_tasks, &lo, &hi);
    if (lo < hi)
        dt_act_backward(j->act, hi - lo, j->y + lo, j->out + lo);
}

void dt_act_forward_pool(dt_pool *pool, dt_activation act, size_t n, float *y)
{
    if (act == DT_ACT_NONE)
        return;
    struct elementwise_job j = {.act = act, .n = n, .out = y};
    dt_pool_run(pool, act_forward_task, &j, elementwise_tasks(n, ELEMS_PER_TASK));
}

void dt_act_backward_pool(dt_pool *pool, dt_activation act, size_t n, const float *y, float *dy)
{
    if (act == DT_ACT_NONE)
        return;
    struct elementwise_job j = {.act = act, .n = n, .y = y, .out = dy};
    dt_pool_run(pool, act_backward_task, &j, elementwise_tasks(n, ELEMS_PER_TASK));
}

/* ---- Conv2D ---- */

static void same_padding(int in, int k, int s, int *out, int *pad_before)
{
    *out = (in + s - 1) / s;
    int total = (*out - 1) * s + k - in;
    if (total < 0)
        total = 0;
    *pad_before = total / 2;
}

bool dt_conv_geom_init(dt_conv_geom *g, int H, int W, int C, int KH, int KW, int OC, int SH, int SW,
                       bool same)
{
    memset(g, 0, sizeof *g);
    if (H <= 0 || W <= 0 || C <= 0 || KH <= 0 || KW <= 0 || OC <= 0 || SH <= 0 || SW <= 0)
        return false;
    g->H = H, g->W = W, g->C = C, g->KH = KH, g->KW = KW, g->OC = OC, g->SH = SH, g->SW = SW;
    if (same) {
        same_padding(H, KH, SH, &g->OH, &g->pad_top);
        same_padding(W, KW, SW, &g->OW, &g->pad_left);
    } else {
        g->OH = H >= KH ? (H - KH) / SH + 1 : 0;
        g->OW = W >= KW ? (W - KW) / SW + 1 : 0;
    }
    return g->OH > 0 && g->OW > 0;
}

void dt_conv2d_forward_naive(const dt_conv_geom *g, int B, const float *x, const float *w,
                           const float *b, float *y)
{
    for (int n = 0; n < B; n++)
        for (int oh = 0; oh < g->OH; oh++)
            for (int ow = 0; ow < g->OW; ow++)
                for (int oc = 0; oc < g->OC; oc++) {
                    double acc = b[oc];
                    for (int kh = 0; kh < g->KH; kh++) {
                        int ih = oh * g->SH - g->pad_top + kh;
                        if (ih < 0 || ih >= g->H)
                            continue;
                        for (int kw = 0; kw < g->KW; kw++) {
                            int iw = ow * g->SW - g->pad_left + kw;
                            if (iw < 0 || iw >= g->W)
                                continue;
                            for (int c = 0; c < g->C; c++)
                                acc += (double)x[(((size_t)n * g->H + ih) * g->W + iw) * g->C + c] *
                                       w[((size_t)(kh * g->KW + kw) * g->C + c) * g->OC + oc];
                        }
                    }
                    y[(((size_t)n * g->OH + oh) * g->OW + ow) * g->OC + oc] = (float)acc;
                }
}

/* Each gradient element is summed in double over everything that feeds it, so the reference is
 * more precise than any float kernel it checks. */
void dt_conv2d_backward_naive(const dt_conv_geom *g, int B, const float *x, const float *w,
                            const float *dy, float *dw, float *db, float *dx)
{
    for (int oc = 0; oc < g->OC; oc++) {
        double acc = 0.0;
        for (size_t p = 0; p < (size_t)B * g->OH * g->OW; p++)
            acc += dy[p * g->OC + oc];
        db[oc] += (float)acc;
    }
    for (int kh = 0; kh < g->KH; kh++)
        for (int kw = 0; kw < g->KW; kw++)
            for (int c = 0; c < g->C; c++)
                for (int oc = 0; oc < g->OC; oc++) {
                    double acc = 0.0;
                    for (int n = 0; n < B; n++)
                        for (int oh = 0; oh < g->OH; oh++) {
                            int ih = oh * g->SH - g->pad_top + kh;
                            if (ih < 0 || ih >= g->H)
                                continue;
                            for (int ow = 0; ow < g->OW; ow++) {
                                int iw = ow * g->SW - g->pad_left + kw;
                                if (iw < 0 || iw >= g->W)
                                    continue;
                                acc += (double)x[(((size_t)n * g->H + ih) * g->W + iw) * g->C + c] *
                                       dy[(((size_t)n * g->OH + oh) * g->OW + ow) * g->OC + oc];
                            }
                        }
                    dw[((size_t)(kh * g->KW + kw) * g->C + c) * g->OC + oc] += (float)acc;
                }
    if (!dx)
        return;
    for (int n = 0; n < B; n++)
        for (int ih = 0; ih < g->H; ih++)
            for (int iw = 0; iw < g->W; iw++)
                for (int c = 0; c < g->C; c++) {
                    double acc = 0.0;
                    for (int kh = 0; kh < g->KH; kh++) {
                        /* Output rows whose window puts tap kh on input row ih. */
                        int t = ih + g->pad_top - kh;
                        if (t < 0 || t % g->SH)
                            continue;
                        int oh = t / g->SH;
                        if (oh >= g->OH)
                            continue;
                        for (int kw = 0; kw < g->KW; kw++) {
                            int u = iw + g->pad_left - kw;
                            if (u < 0 || u % g->SW)
                                continue;
                            int ow = u / g->SW;
                            if (ow >= g->OW)
                                continue;
                            for (int oc = 0; oc < g->OC; oc++)
                                acc += (double)w[((size_t)(kh * g->KW + kw) * g->C + c) * g->OC + oc] *
                                       dy[(((size_t)n * g->OH + oh) * g->OW + ow) * g->OC + oc];
                        }
                    }
                    dx[(((size_t)n * g->H + ih) * g->W + iw) * g->C + c] = (float)acc;
                }
}

/* Per-thread scratch for the GEMM path: the im2col matrix of one example, then a partial weight
 * gradient and bias gradient, so threads never add into shared memory. */
static size_t cols_elems(const dt_conv_geom *g)
{
    return (size_t)g->OH * g->OW * g->KH * g->KW * g->C;
}

static size_t thread_scratch_elems(const dt_conv_geom *g)
{
    size_t kkc = (size_t)g->KH * g->KW * g->C;
    size_t n = cols_elems(g) + kkc * g->OC + g->OC;
    return (n + 15) / 16 * 16;
}

size_t dt_conv2d_scratch_elems(const dt_conv_geom *g, int n_threads)
{
    return thread_scratch_elems(g) * (size_t)n_threads;
}

/* x (H, W, C) of one example -> cols (OH * OW, KH * KW * C), zeros where the window hangs over the
 * padding. */
static void im2col(const dt_conv_geom *g, const float *x, float *cols)
{
    int KC = g->KW * g->C;
    for (int oh = 0; oh < g->OH; oh++)
        for (int ow = 0; ow < g->OW; ow++) {
            float *row = cols + ((size_t)oh * g->OW + ow) * g->KH * KC;
            for (int kh = 0; kh < g->KH; kh++) {
                int ih = oh * g->SH - g->pad_top + kh;
                float *dst = row + (size_t)kh * KC;
                if (ih < 0 || ih >= g->H) {
                    memset(dst, 0, (size_t)KC * sizeof *dst);
                    continue;
                }
                for (int kw = 0; kw < g->KW; kw++) {
                    int iw = ow * g->SW - g->pad_left + kw;
                    if (iw < 0 || iw >= g->W)
                        memset(dst + kw * g->C, 0, (size_t)g->C * sizeof *dst);
                    else
                        memcpy(dst + kw * g->C, x + ((size_t)ih * g->W + iw) * g->C,
                               (size_t)g->C * sizeof *dst);
                }
            }
        }
}

/* The adjoint of im2col: adds cols back into dx (H, W, C) of one example. */
static void col2im_add(const dt_conv_geom *g, const float *cols, float *dx)
{
    int KC = g->KW * g->C;
    for (int oh = 0; oh < g->OH; oh++)
        for (int ow = 0; ow < g->OW; ow++) {
            const float *row = cols + ((size_t)oh * g->OW + ow) * g->KH * KC;
            for (int kh = 0; kh < g->KH; kh++) {
                int ih = oh * g->SH - g->pad_top + kh;
                if (ih < 0 || ih >= g->H)
                    continue;
                for (int kw = 0; kw < g->KW; kw++) {
                    int iw = ow * g->SW - g->pad_left + kw;
                    if (iw < 0 || iw >= g->W)
                        continue;
                    const float *src = row + (size_t)kh * KC + kw * g->C;
                    float *dst = dx + ((size_t)ih * g->W + iw) * g->C;
                    for (int c = 0; c < g->C; c++)
                        dst[c] += src[c];
                }
            }
        }
}

struct conv_job {
    const dt_conv_geom *g;
    int B;
    const float *x, *w, *b, *dy;
    float *y, *dx, *scratch;
};

static void conv_forward_task(void *ctx, int task, int n_tasks)
{
    const struct conv_job *j = ctx;
    const dt_conv_geom *g = j->g;
    float *cols = j->scratch + thread_scratch_elems(g) * task;
    size_t in_elems = (size_t)g->H * g->W * g->C, out_pix = (size_t)g->OH * g->OW;
    int KKC = g->KH * g->KW * g->C;
    long lo, hi;
    dt_pool_slice(j->B, task, n_tasks, &lo, &hi);
    for (long n = lo; n < hi; n++) {
        im2col(g, j->x + n * in_elems, cols);
        float *y = j->y + n * out_pix * g->OC;
        add_bias_rows((int)out_pix, g->OC, j->b, y);
        dt_gemm(NULL, false, false, (int)out_pix, g->OC, KKC, 1.0f, cols, KKC, j->w, g->OC, 1.0f,
                y, g->OC);
    }
}

void dt_conv2d_forward(dt_pool *pool, const dt_conv_geom *g, int B, const float *x, const float *w,
                       const float *b, float *y, float *scratch)
{
    struct conv_job j = {g, B, x, w, b, NULL, y, NULL, scratch};
    dt_pool_run(pool, conv_forward_task, &j, dt_pool_size(pool));
}

static void conv_backward_task(void *ctx, int task, int n_tasks)
{
    const struct conv_job *j = ctx;
    const dt_conv_geom *g = j->g;
    float *cols = j->scratch + thread_scratch_elems(g) * task;
    int KKC = g->KH * g->KW * g->C;
    float *dw_part = cols + cols_elems(g);
    float *db_part = dw_part + (size_t)KKC * g->OC;
    size_t in_elems = (size_t)g->H * g->W * g->C, out_pix = (size_t)g->OH * g->OW;
    memset(dw_part, 0, ((size_t)KKC * g->OC + g->OC) * sizeof *dw_part);
    long lo, hi;
    dt_pool_slice(j->B, task, n_tasks, &lo, &hi);
    for (long n = lo; n < hi; n++) {
        const float *dy = j->dy + n * out_pix * g->OC;
        im2col(g, j->x + n * in_elems, cols);
        dt_gemm(NULL, true, false, KKC, g->OC, (int)out_pix, 1.0f, cols, KKC, dy, g->OC, 1.0f,
                dw_part, g->OC);
        sum_rows_into((int)out_pix, g->OC, dy, db_part);
        if (j->dx) {
            /* cols is free again: reuse it for the gradient of the patches. */
            dt_gemm(NULL, false, true, (int)out_pix, KKC, g->OC, 1.0f, dy, g->OC, j->w, g->OC,
                    0.0f, cols, KKC);
            float *dx = j->dx + n * in_elems;
            memset(dx, 0, in_elems * sizeof *dx);
            col2im_add(g, cols, dx);
        }
    }
}

void dt_conv2d_backward(dt_pool *pool, const dt_conv_geom *g, int B, const float *x,
                        const float *w, const float *dy, float *dw, float *db, float *dx,
                        float *scratch)
{
    int n_tasks = dt_pool_size(pool);
    struct conv_job j = {g, B, x, w, NULL, dy, NULL, dx, scratch};
    dt_pool_run(pool, conv_backward_task, &j, n_tasks);
    /* Partials are added in task order, so the sum depends only on the thread count. */
    size_t n_w = (size_t)g->KH * g->KW * g->C * g->OC;
    for (int t = 0; t < n_tasks; t++) {
        const float *dw_part = scratch + thread_scratch_elems(g) * t + cols_elems(g);
        for (size_t i = 0; i < n_w; i++)
            dw[i] += dw_part[i];
        for (int oc = 0; oc < g->OC; oc++)
            db[oc] += dw_part[n_w + oc];
    }
}

/* ---- MaxPool2D ---- */

bool dt_pool_geom_init(dt_pool_geom *g, int H, int W, int C, int PH, int PW, int SH, int SW,
                       bool same)
{
    memset(g, 0, sizeof *g);
    if (H <= 0 || W <= 0 || C <= 0 || PH <= 0 || PW <= 0 || SH <= 0 || SW <= 0)
        return false;
    g->H = H, g->W = W, g->C = C, g->PH = PH, g->PW = PW, g->SH = SH, g->SW = SW;
    if (same) {
        same_padding(H, PH, SH, &g->OH, &g->pad_top);
        same_padding(W, PW, SW, &g->OW, &g->pad_left);
    } else {
        g->OH = H >= PH ? (H - PH) / SH + 1 : 0;
        g->OW = W >= PW ? (W - PW) / SW + 1 : 0;
    }
    return g->OH > 0 && g->OW > 0;
}

void dt_maxpool_forward(const dt_pool_geom *g, int B, const float *x, float *y, int32_t *arg)
{
    size_t in_elems = (size_t)g->H * g->W * g->C;
    for (int n = 0; n < B; n++) {
        const float *xn = x + n * in_elems;
        for (int oh = 0; oh < g->OH; oh++)
            for (int ow = 0; ow < g->OW; ow++) {
                size_t o = (((size_t)n * g->OH + oh) * g->OW + ow) * g->C;
                bool first = true;
                for (int ph = 0; ph < g->PH; ph++) {
                    int ih = oh * g->SH - g->pad_top + ph;
                    if (ih < 0 || ih >= g->H)
                        continue;
                    for (int pw = 0; pw < g->PW; pw++) {
                        int iw = ow * g->SW - g->pad_left + pw;
                        if (iw < 0 || iw >= g->W)
                            continue;
                        int32_t base = (int32_t)(((size_t)ih * g->W + iw) * g->C);
                        for (int c = 0; c < g->C; c++) {
                            float v = xn[base + c];
                            if (first || v > y[o + c]) {
                                y[o + c] = v;
                                arg[o + c] = base + c;
                            }
                        }
                        first = false;
                    }
                }
            }
    }
}

void dt_maxpool_backward(const dt_pool_geom *g, int B, const float *dy, const int32_t *arg,
                         float *dx)
{
    size_t in_elems = (size_t)g->H * g->W * g->C, out_elems = (size_t)g->OH * g->OW * g->C;
    memset(dx, 0, (size_t)B * in_elems * sizeof *dx);
    for (int n = 0; n < B; n++)
        for (size_t i = 0; i < out_elems; i++)
            dx[n * in_elems + arg[n * out_elems + i]] += dy[n * out_elems + i];
}

/* ---- Dropout ---- */

DT_MULTI_ISA
void dt_dropout_forward(size_t n, float rate, dt_rng *rng, const float *x, float *y, float *mask)
{
    float keep = 1.0f - rate, scale = 1.0f / keep;
    /* Four 16-bit uniforms per draw, low bits first: value i keeps when k / 2^16 < keep, k the
     * i-th 16 bits. A keep probability is honoured to 2^-16, and the generator, which took most
     * of dropout's time at one draw per value, does a quarter of the work. The draws of 64
     * values are taken first, so that the loop over the values has no call in it and
     * vectorises. */
    enum { BLOCK = 64 };
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        uint16_t k[BLOCK];
        for (size_t d = 0; d < (m + 3) / 4; d++) {
            uint64_t r = dt_rng_next(rng);
            for (int q = 0; q < 4; q++)
                k[4 * d + (size_t)q] = (uint16_t)(r >> (16 * q));
        }
        for (size_t j = 0; j < m; j++) {
            float u = (float)k[j] * (1.0f / 65536.0f);
            mask[i + j] = u < keep ? scale : 0.0f;
            y[i + j] = x[i + j] * mask[i + j];
        }
    }
}
DT_MULTI_ISA_HIDE(dt_dropout_forward)

DT_MULTI_ISA
void dt_dropout_backward(size_t n, const float *mask, float *dy)
{
    for (size_t i = 0; i < n; i++)
        dy[i] *= mask[i];
}
DT_MULTI_ISA_HIDE(dt_dropout_backward)

/* Task t draws chunk t: the chunk, not the thread count, fixes the split. */
static void dropout_forward_task(void *ctx, int task, int n_tasks)
{
    (void)n_tasks;
    const struct elementwise_job *j = ctx;
    size_t lo = (size_t)task * DT_DROPOUT_CHUNK;
    size_t len = j->n - lo < DT_DROPOUT_CHUNK ? j->n - lo : DT_DROPOUT_CHUNK;
    dt_rng rng;
    dt_rng_derive(&rng, j->seed, j->key1, j->key2 + ((uint64_t)task << 16));
    dt_dropout_forward(len, j->rate, &rng, j->in + lo, j->out + lo, j->mask_out + lo);
}

static void dropout_backward_task(void *ctx, int task, int n_tasks)
{
    const struct elementwise_job *j = ctx;
    size_t lo, hi;
    elementwise_range(j, task, n_tasks, &lo, &hi);
    if (lo < hi)
        dt_dropout_backward(hi - lo, j->mask + lo, j->out + lo);
}

void dt_dropout_forward_pool(dt_pool *pool, size_t n, float rate, uint64_t seed, uint64_t key1,
                             uint64_t key2, const float *x, float *y, float *mask)
{
    struct elementwise_job j = {.n = n, .in = x, .out = y, .mask_out = mask, .rate = rate,
                                .seed = seed, .key1 = key1, .key2 = key2};
    size_t chunks = (n + DT_DROPOUT_CHUNK - 1) / DT_DROPOUT_CHUNK;
    /* Chunks beyond INT_MAX would need 2^31 x 16384 values: no batch holds them. */
    dt_pool_run(pool, dropout_forward_task, &j, (int)chunks);
}

/* Chunk t of y through the activation, then chunk t's dropout: a chunk is still in this core's
 * cache for the second step, and the values are those of the two pooled calls one after the
 * other. */
static void act_dropout_forward_task(void *ctx, int task, int n_tasks)
{
    const struct elementwise_job *j = ctx;
    size_t lo = (size_t)task * DT_DROPOUT_CHUNK;
    size_t len = j->n - lo < DT_DROPOUT_CHUNK ? j->n - lo : DT_DROPOUT_CHUNK;
    if (j->act != DT_ACT_NONE)
        dt_act_forward(j->act, len, j->act_y + lo);
    dropout_forward_task(ctx, task, n_tasks);
}

void dt_act_dropout_forward_pool(dt_pool *pool, dt_activation act, size_t n, float rate,
                                 uint64_t seed, uint64_t key1, uint64_t key2, float *y,
                                 float *out, float *mask)
{
    struct elementwise_job j = {.act = act, .n = n, .act_y = y, .in = y, .out = out,
                                .mask_out = mask, .rate = rate, .seed = seed, .key1 = key1,
                                .key2 = key2};
    size_t chunks = (n + DT_DROPOUT_CHUNK - 1) / DT_DROPOUT_CHUNK;
    dt_pool_run(pool, act_dropout_forward_task, &j, (int)chunks);
}

static void dropout_act_backward_task(void *ctx, int task, int n_tasks)
{
    const struct elementwise_job *j = ctx;
    size_t lo, hi;
    elementwise_range(j, task, n_tasks, &lo, &hi);
    if (lo >= hi)
        return;
    dt_dropout_backward(hi - lo, j->mask + lo, j->out + lo);
    if (j->act != DT_ACT_NONE)
        dt_act_backward(j->act, hi - lo, j->y + lo, j->out + lo);
}

void dt_dropout_act_backward_pool(dt_pool *pool, dt_activation act, size_t n, const float *mask,
                                  const float *y, float *dy)
{
    struct elementwise_job j = {.act = act, .n = n, .y = y, .out = dy, .mask = mask};
    dt_pool_run(pool, dropout_act_backward_task, &j, elementwise_tasks(n, ELEMS_PER_TASK));
}

void dt_dropout_backward_pool(dt_pool *pool, size_t n, const float *mask, float *dy)
{
    struct elementwise_job j = {.n = n, .out = dy, .mask = mask};
    dt_pool_run(pool, dropout_backward_task, &j, elementwise_tasks(n, ELEMS_PER_TASK));
}

/* ---- Losses ---- */

void dt_softmax_xent_forward(int B, int K, const float *logits, const int32_t *labels, float *prob,
                             float *loss)
{
    for (int i = 0; i < B; i++) {
        const float *z = logits + (size_t)i * K;
        float *p = prob + (size_t)i * K;
        float m = z[0];
        for (int k = 1; k < K; k++)
            m = z[k] > m ? z[k] : m;
        double sum = 0.0;
        for (int k = 0; k < K; k++) {
            p[k] = expf(z[k] - m);
            sum += p[k];
        }
        float inv = (float)(1.0 / sum);
        for (int k = 0; k < K; k++)
            p[k] *= inv;
        /* log-sum-exp minus the true logit, computed from the logits rather than log(p) so that
         * a confident wrong answer gives a large finite loss instead of -log(0). */
        loss[i] = (float)(log(sum) + m - z[labels[i]]);
    }
}

void dt_softmax_xent_backward(int B, int K, const float *prob, const int32_t *labels, float scale,
                              float *dlogits)
{
    for (int i = 0; i < B; i++) {
        for (int k = 0; k < K; k++)
            dlogits[(size_t)i * K + k] = scale * prob[(size_t)i * K + k];
        dlogits[(size_t)i * K + labels[i]] -= scale;
    }
}

void dt_bce_logits_forward(int B, int K, const float *logits, const float *targets, float *loss)
{
    for (int i = 0; i < B; i++) {
        double acc = 0.0;
        for (int k = 0; k < K; k++) {
            float z = logits[(size_t)i * K + k], t = targets[(size_t)i * K + k];
            /* max(z, 0) - z t + log(1 + exp(-|z|)): TensorFlow's stable form. */
            acc += (z > 0.0f ? z : 0.0f) - z * t + log1pf(expf(-fabsf(z)));
        }
        loss[i] = (float)(acc / K);
    }
}

void dt_bce_logits_backward(int B, int K, const float *logits, const float *targets, float scale,
                            float *dlogits)
{
    float s = scale / (float)K;
    for (size_t i = 0; i < (size_t)B * K; i++)
        dlogits[i] = s * (sigmoidf(logits[i]) - targets[i]);
}

void dt_mse_forward(int B, int K, const float *pred, const float *targets, float *loss)
{
    for (int i = 0; i < B; i++) {
        double acc = 0.0;
        for (int k = 0; k < K; k++) {
            double d = (double)pred[(size_t)i * K + k] - targets[(size_t)i * K + k];
            acc += d * d;
        }
        loss[i] = (float)(acc / K);
    }
}

void dt_mse_backward(int B, int K, const float *pred, const float *targets, float scale,
                     float *dpred)
{
    float s = 2.0f * scale / (float)K;
    for (size_t i = 0; i < (size_t)B * K; i++)
        dpred[i] = s * (pred[i] - targets[i]);
}

/* ---- Batch normalisation ---- */

// x, y, xhat (B, C); gamma, beta, moving_mean, moving_var, istd (C)
void dt_batchnorm_forward_train(int B, int C, const float *x, const float *gamma,
                                const float *beta, float eps, float momentum, float *moving_mean,
                                float *moving_var, float *y, float *xhat, float *istd)
{
    for (int c = 0; c < C; c++) {
        double sum = 0.0, sq = 0.0;
        for (int i = 0; i < B; i++)
            sum += x[(size_t)i * C + c];
        double mean = sum / B;
        for (int i = 0; i < B; i++) {
            double d = x[(size_t)i * C + c] - mean;
            sq += d * d;
        }
        double var = sq / B;
        float is = (float)(1.0 / sqrt(var + eps));
        istd[c] = is;
        for (int i = 0; i < B; i++) {
            size_t at = (size_t)i * C + c;
            xhat[at] = (float)(x[at] - mean) * is;
            y[at] = gamma[c] * xhat[at] + beta[c];
        }
        moving_mean[c] = momentum * moving_mean[c] + (1.0f - momentum) * (float)mean;
        moving_var[c] = momentum * moving_var[c] + (1.0f - momentum) * (float)var;
    }
}

void dt_batchnorm_forward_infer(int B, int C, const float *x, const float *gamma,
                                const float *beta, float eps, const float *moving_mean,
                                const float *moving_var, float *y)
{
    for (int c = 0; c < C; c++) {
        float is = 1.0f / sqrtf(moving_var[c] + eps), m = moving_mean[c];
        for (int i = 0; i < B; i++) {
            size_t at = (size_t)i * C + c;
            y[at] = gamma[c] * ((x[at] - m) * is) + beta[c];
        }
    }
}

void dt_batchnorm_backward(int B, int C, const float *dy, const float *xhat, const float *istd,
                           const float *gamma, float *dgamma, float *dbeta, float *dx)
{
    for (int c = 0; c < C; c++) {
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (int i = 0; i < B; i++) {
            size_t at = (size_t)i * C + c;
            sum_dy += dy[at];
            sum_dy_xhat += (double)dy[at] * xhat[at];
        }
        dgamma[c] += (float)sum_dy_xhat;
        dbeta[c] += (float)sum_dy;
        if (!dx)
            continue;
        double k = (double)gamma[c] * istd[c] / B;
        for (int i = 0; i < B; i++) {
            size_t at = (size_t)i * C + c;
            dx[at] = (float)(k * (B * (double)dy[at] - sum_dy - xhat[at] * sum_dy_xhat));
        }
    }
}
