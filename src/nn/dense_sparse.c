/* A dense layer's backward over the non-zeros of dy (see dense_sparse.h): listing dy, the split
 * over threads, the fall-back to dense products, and the portable kernels. */
#include "dense_sparse.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "gemm.h"
#include "nn.h"
#include "../core/cpu.h"

enum { NC = DT_SPARSE_NC, KB = DT_SPARSE_KB };

/* Inputs below this go through the dense products: too few chunks to split, and little to save. */
enum { MIN_IN = 4 * NC };

static size_t up16(size_t n) { return (n + 15) / 16 * 16; }

/* Column lists one cache line longer than a multiple of 16 floats, so that the columns a row's
 * entries go to fall in different sets of L1. */
static int col_stride_of(int B) { return (int)up16((size_t)B) + 16; }

/* Where each array lies in the scratch, in floats (each 64-byte aligned if the scratch is). */
struct layout {
    size_t row_n, row_j, row_v, col_start, col_b, col_v, nnz, panels, total;
};

static struct layout layout_of(int B, int IN, int OUT, int n_threads)
{
    size_t cells = (size_t)B * OUT, n_kb = ((size_t)B + KB - 1) / KB;
    size_t col_cells = (size_t)col_stride_of(B) * OUT;
    size_t chunks = ((size_t)IN + NC - 1) / NC;
    struct layout l;
    size_t at = 0;
    l.row_n = at, at += up16((size_t)B);
    l.row_j = at, at += up16(cells);
    l.row_v = at, at += up16(cells);
    l.col_start = at, at += up16((size_t)OUT * (n_kb + 1));
    l.col_b = at, at += col_cells;
    l.col_v = at, at += col_cells;
    l.nnz = at, at += up16((size_t)n_threads);
    l.panels = at, at += chunks * 2 * (size_t)OUT * NC; /* per chunk: wt and dwt */
    l.total = at;
    return l;
}

/* Layers the lists serve: enough inputs, and entries that int32 counts. */
static bool lists_serve(int B, int IN, int OUT)
{
    return IN >= MIN_IN && (size_t)B * (size_t)OUT <= INT32_MAX / 2;
}

size_t dt_dense_sparse_scratch_elems(int B, int IN, int OUT, int n_threads)
{
    return lists_serve(B, IN, OUT) ? layout_of(B, IN, OUT, n_threads).total : 0;
}

struct sparse_job {
    const dt_sparse_kernels *k;
    dt_sparse_dy s;
    const float *x, *w, *dy;
    float *dw, *db, *dx;
    int32_t *nnz; /* per listing task */
    float *panels;
};

static void list_task(void *ctx, int task, int n_tasks)
{
    struct sparse_job *j = ctx;
    long lo, hi;
    dt_pool_slice(j->s.B, task, n_tasks, &lo, &hi);
    j->nnz[task] = (int32_t)j->k->list_rows(&j->s, j->dy, lo, hi);
    dt_pool_slice(j->s.OUT, task, n_tasks, &lo, &hi);
    j->k->list_cols(&j->s, j->dy, lo, hi, j->db);
}

static void chunk_task(void *ctx, int task, int n_tasks)
{
    (void)n_tasks;
    const struct sparse_job *j = ctx;
    int OUT = j->s.OUT, i0 = task * NC, nc = j->s.IN - i0 < NC ? j->s.IN - i0 : NC;
    float *wt = j->panels + (size_t)task * 2 * OUT * NC, *dwt = wt + (size_t)OUT * NC;
    if (j->dx) {
        j->k->transpose(j->w, OUT, i0, nc, wt);
        j->k->dx(&j->s, wt, i0, nc, j->dx);
    }
    memset(dwt, 0, (size_t)OUT * NC * sizeof *dwt);
    j->k->dw(&j->s, j->x, i0, nc, dwt);
    j->k->add_transposed(dwt, OUT, i0, nc, j->dw);
}

void dt_dense_backward_sparse_with(const dt_sparse_kernels *k, dt_pool *pool, int B, int IN,
                                   int OUT, const float *x, const float *w, const float *dy,
                                   float *dw, float *db, float *dx, float *scratch)
{
    int threads = dt_pool_size(pool);
    struct layout l = layout_of(B, IN, OUT, threads);
    struct sparse_job j = {
        .k = k,
        .s = {B, IN, OUT, (B + KB - 1) / KB, (int32_t *)(scratch + l.row_n),
              (int32_t *)(scratch + l.row_j), scratch + l.row_v,
              (int32_t *)(scratch + l.col_start), col_stride_of(B), (int32_t *)(scratch + l.col_b),
              scratch + l.col_v},
        .x = x, .w = w, .dy = dy, .dw = dw, .db = db, .dx = dx,
        .nnz = (int32_t *)(scratch + l.nnz), .panels = scratch + l.panels,
    };
    dt_pool_run(pool, list_task, &j, threads);
    long nnz = 0;
    for (int t = 0; t < threads; t++)
        nnz += j.nnz[t];
    /* Above a third of the entries the dense products are as fast or faster: measured at
     * batch 64 (1.1x for the lists at 30%, 0.98x at 40%, 0.9x at 50%: the tutorial CNN's dense
     * layer has 49%) and faster still at larger batches. db is summed already. */
    if (3 * nnz > (long)B * OUT) {
        dt_gemm(pool, true, false, IN, OUT, B, 1.0f, x, IN, dy, OUT, 1.0f, dw, OUT);
        if (dx)
            dt_gemm(pool, false, true, B, IN, OUT, 1.0f, dy, OUT, w, OUT, 0.0f, dx, IN);
        return;
    }
    dt_pool_run(pool, chunk_task, &j, (IN + NC - 1) / NC);
}

void dt_dense_backward_sparse(dt_pool *pool, int B, int IN, int OUT, const float *x,
                              const float *w, const float *dy, float *dw, float *db, float *dx,
                              float *scratch)
{
    /* The list kernels are dtrain's own, beside its own matrix multiply: with OpenBLAS chosen,
     * or on a CPU without AVX-512, the products stay dense. */
#if DT_X86
    if (scratch && lists_serve(B, IN, OUT) && strcmp(dt_gemm_kernel_name(), "avx512") == 0 &&
        dt_cpu_has(DT_CPU_AVX512F)) {
        dt_dense_backward_sparse_with(&dt_sparse_kernels_avx512, pool, B, IN, OUT, x, w, dy, dw,
                                      db, dx, scratch);
        return;
    }
#else
    (void)scratch;
#endif
    dt_dense_backward(pool, B, IN, OUT, x, w, dy, dw, db, dx);
}

/* ---- Portable kernels: what the AVX-512 ones compute, lane by lane ---- */

static long list_rows_portable(const dt_sparse_dy *s, const float *dy, long lo, long hi)
{
    long total = 0;
    for (long b = lo; b < hi; b++) {
        const float *row = dy + b * s->OUT;
        int32_t *jj = s->row_j + b * s->OUT;
        float *vv = s->row_v + b * s->OUT;
        int n = 0;
        for (int j = 0; j < s->OUT; j++) { /* no branch: a third of the values are kept */
            jj[n] = j;
            vv[n] = row[j];
            n += row[j] != 0.0f;
        }
        s->row_n[b] = n;
        total += n;
    }
    return total;
}

static void list_cols_portable(const dt_sparse_dy *s, const float *dy, long lo, long hi, float *db)
{
    enum { G = 64 };
    int B = s->B, OUT = s->OUT, stride = s->n_kb + 1;
    for (long j0 = lo; j0 < hi; j0 += G) {
        int g = hi - j0 < G ? (int)(hi - j0) : G;
        int32_t n[G] = {0};
        float sum[G];
        memcpy(sum, db + j0, (size_t)g * sizeof *sum);
        for (int b = 0; b < B; b++) {
            if (b % KB == 0)
                for (int q = 0; q < g; q++)
                    s->col_start[(j0 + q) * stride + b / KB] = n[q];
            const float *row = dy + (size_t)b * OUT + j0;
            for (int q = 0; q < g; q++) {
                size_t at = (size_t)(j0 + q) * s->col_stride + (size_t)n[q];
                s->col_b[at] = b;
                s->col_v[at] = row[q];
                n[q] += row[q] != 0.0f;
                sum[q] += row[q];
            }
        }
        for (int q = 0; q < g; q++)
            s->col_start[(j0 + q) * stride + s->n_kb] = n[q];
        memcpy(db + j0, sum, (size_t)g * sizeof *sum);
    }
}

static void dx_portable(const dt_sparse_dy *s, const float *wt, int i0, int nc, float *dx)
{
    for (int b = 0; b < s->B; b++) {
        const int32_t *jj = s->row_j + (size_t)b * s->OUT;
        const float *vv = s->row_v + (size_t)b * s->OUT;
        int n = s->row_n[b], e = 0;
        float even[NC] = {0}, odd[NC] = {0};
        for (; e + 2 <= n; e += 2) {
            const float *p = wt + (size_t)jj[e] * NC, *r = wt + (size_t)jj[e + 1] * NC;
            for (int q = 0; q < NC; q++) {
                even[q] = fmaf(vv[e], p[q], even[q]);
                odd[q] = fmaf(vv[e + 1], r[q], odd[q]);
            }
        }
        if (e < n) {
            const float *p = wt + (size_t)jj[e] * NC;
            for (int q = 0; q < NC; q++)
                even[q] = fmaf(vv[e], p[q], even[q]);
        }
        float *out = dx + (size_t)b * s->IN + i0;
        for (int q = 0; q < nc; q++)
            out[q] = even[q] + odd[q];
    }
}

static void dw_portable(const dt_sparse_dy *s, const float *x, int i0, int nc, float *dwt)
{
    for (int kb = 0; kb < s->n_kb; kb++) {
        for (int j = 0; j < s->OUT; j++) {
            const int32_t *bb;
            const float *vv;
            int e, end;
            dt_sparse_column(s, j, kb, &bb, &vv, &e, &end);
            if (e == end)
                continue;
            float *even = dwt + (size_t)j * NC, odd[NC] = {0};
            for (; e + 2 <= end; e += 2) {
                const float *p = x + (size_t)bb[e] * s->IN + i0;
                const float *r = x + (size_t)bb[e + 1] * s->IN + i0;
                for (int q = 0; q < nc; q++) {
                    even[q] = fmaf(vv[e], p[q], even[q]);
                    odd[q] = fmaf(vv[e + 1], r[q], odd[q]);
                }
            }
            if (e < end) {
                const float *p = x + (size_t)bb[e] * s->IN + i0;
                for (int q = 0; q < nc; q++)
                    even[q] = fmaf(vv[e], p[q], even[q]);
            }
            for (int q = 0; q < nc; q++)
                even[q] += odd[q];
        }
    }
}

static void transpose_portable(const float *w, int OUT, int i0, int nc, float *wt)
{
    for (int q = 0; q < nc; q++) {
        const float *row = w + (size_t)(i0 + q) * OUT;
        for (int j = 0; j < OUT; j++)
            wt[(size_t)j * NC + q] = row[j];
    }
    for (int j = 0; j < OUT && nc < NC; j++)
        memset(wt + (size_t)j * NC + nc, 0, (size_t)(NC - nc) * sizeof *wt);
}

static void add_transposed_portable(const float *dwt, int OUT, int i0, int nc, float *dw)
{
    for (int q = 0; q < nc; q++) {
        float *row = dw + (size_t)(i0 + q) * OUT;
        for (int j = 0; j < OUT; j++)
            row[j] += dwt[(size_t)j * NC + q];
    }
}

const dt_sparse_kernels dt_sparse_kernels_portable = {"portable", list_rows_portable,
                                                       list_cols_portable, dx_portable,
                                                       dw_portable, transpose_portable,
                                                       add_transposed_portable};
