/* A dense layer's backward over the non-zeros of its output gradient (internal to the library;
 * the entry point is dt_dense_backward_sparse in nn.h).
 *
 * After ReLU and dropout most of dy is zero: in DeepFM's first hidden layer (ReLU, keep 0.5)
 * about 29% of it is not. Both products of the backward, dx = dy . w^T and dw += x^T . dy, then
 * need only those entries, so dy is listed twice, by rows (for dx) and by columns (for dw), and
 * each product runs over the list in chunks of DT_SPARSE_NC inputs:
 *   dx[b, chunk] = sum over dy[b, j] != 0 of dy[b, j] w[chunk, j]
 *   dw[chunk, j] += sum over dy[b, j] != 0 of dy[b, j] x[b, chunk].
 * A chunk's rows of w, transposed, fit in L1 while every example passes over them; for dw the
 * examples come in blocks of DT_SPARSE_KB, whose chunk of x fits in L1 beside the chunk's
 * partial sums.
 *
 * Rounding: each element of dx sums its terms in list order, even-numbered terms in one chain
 * and odd-numbered in another, one fused multiply-add each, and adds the two chains. Each element
 * of dw's chunk starts a running sum at zero; per example block the even chain continues it and
 * the odd chain is added to it; the sum is then added to dw. Chunks are fixed, not cut by the
 * thread count, so the bits are the same on any number of threads, and the two kernels (portable
 * and AVX-512) give the same bits. */
#ifndef DTRAIN_NN_DENSE_SPARSE_H
#define DTRAIN_NN_DENSE_SPARSE_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/pool.h"

enum { DT_SPARSE_NC = 64, DT_SPARSE_KB = 128 };

/* dy (B, OUT) listed by rows and by columns. */
typedef struct {
    int B, IN, OUT, n_kb; /* n_kb: blocks of DT_SPARSE_KB examples */
    int32_t *row_n;       /* (B): row b's non-zeros */
    int32_t *row_j;       /* (B, OUT): their columns, row b's from b x OUT, ascending */
    float *row_v;         /* (B, OUT): their values */
    int32_t *col_start;   /* (OUT, n_kb + 1): column j's first entry of example block kb,
                             counted from j x col_stride; [n_kb] is one past its last */
    int col_stride;       /* B and some: columns B apart would all fall in one set of L1 */
    int32_t *col_b;       /* (OUT, col_stride): the examples of column j's non-zeros, ascending */
    float *col_v;         /* (OUT, col_stride): their values */
} dt_sparse_dy;

/* Column j's entries in example block kb: indexes [*e, *end) of *b (examples) and *v (values). */
static inline void dt_sparse_column(const dt_sparse_dy *s, int j, int kb, const int32_t **b,
                                    const float **v, int *e, int *end)
{
    const int32_t *start = s->col_start + (size_t)j * (size_t)(s->n_kb + 1);
    *e = start[kb];
    *end = start[kb + 1];
    *b = s->col_b + (size_t)j * (size_t)s->col_stride;
    *v = s->col_v + (size_t)j * (size_t)s->col_stride;
}

/* dx[:, i0 .. i0 + nc) = dy . w[i0 .. i0 + nc, :]^T. wt (OUT, DT_SPARSE_NC) holds those rows of
 * w transposed, zero beyond nc. dx (B, IN). */
typedef void (*dt_sparse_dx_fn)(const dt_sparse_dy *s, const float *wt, int i0, int nc, float *dx);
/* dwt (OUT, DT_SPARSE_NC) += (x[:, i0 .. i0 + nc)^T . dy)^T, lanes beyond nc left as they are.
 * x (B, IN). */
typedef void (*dt_sparse_dw_fn)(const dt_sparse_dy *s, const float *x, int i0, int nc, float *dwt);

/* Rows [lo, hi) of dy listed (row_n, row_j, row_v); returns their non-zeros. NaN counts as
 * non-zero, -0 as zero. */
typedef long (*dt_sparse_list_rows_fn)(const dt_sparse_dy *s, const float *dy, long lo, long hi);
/* Columns [lo, hi) of dy listed (col_start, col_b, col_v), and db[lo, hi) += their sums over the
 * rows in order: the adds of dt_dense_backward's bias gradient, in the same order. */
typedef void (*dt_sparse_list_cols_fn)(const dt_sparse_dy *s, const float *dy, long lo, long hi,
                                       float *db);

/* wt (OUT, DT_SPARSE_NC) = rows [i0, i0 + nc) of w (IN, OUT) transposed, zero beyond nc. wt is
 * 64-byte aligned. */
typedef void (*dt_sparse_transpose_fn)(const float *w, int OUT, int i0, int nc, float *wt);
/* Rows [i0, i0 + nc) of dw (IN, OUT) += dwt (OUT, DT_SPARSE_NC) transposed: one add per element,
 * so every kernel gives the same bits. dwt is 64-byte aligned. */
typedef void (*dt_sparse_add_transposed_fn)(const float *dwt, int OUT, int i0, int nc, float *dw);

typedef struct {
    const char *name;
    dt_sparse_list_rows_fn list_rows;
    dt_sparse_list_cols_fn list_cols;
    dt_sparse_dx_fn dx;
    dt_sparse_dw_fn dw;
    dt_sparse_transpose_fn transpose;
    dt_sparse_add_transposed_fn add_transposed;
} dt_sparse_kernels;

extern const dt_sparse_kernels dt_sparse_kernels_portable; /* dense_sparse.c: fmaf, any CPU */
extern const dt_sparse_kernels dt_sparse_kernels_avx512;   /* dense_sparse_avx512.c */

/* dt_dense_backward_sparse with the given kernels (the tests compare the two). */
void dt_dense_backward_sparse_with(const dt_sparse_kernels *k, dt_pool *pool, int B, int IN,
                                   int OUT, const float *x, const float *w, const float *dy,
                                   float *dw, float *db, float *dx, float *scratch);

#endif
