/* The matrix-multiply kernels dt_gemm chooses from (internal to the library): each computes a
 * whole product on the calling thread, C (M, N) = alpha * op(A) . op(B) + beta * C as dt_gemm
 * states it, C not read when beta is 0. One file per kernel; gemm.c picks one at first use. */
#ifndef DTRAIN_NN_GEMM_KERNELS_H
#define DTRAIN_NN_GEMM_KERNELS_H

#include <stdbool.h>

#include "../core/cpu.h"

typedef void (*dt_gemm_fn)(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta, float *C,
                           int ldc);

typedef struct {
    const char *name;
    dt_cpu_feature needs; /* DT_CPU_N_FEATURES: runs on any CPU */
    dt_gemm_fn fn;
    /* dt_gemm splits a product over threads in whole units of rows (or columns) of C, in up
     * to tasks_per_thread tasks per thread; rows in units of narrow_row_unit when C has
     * narrow_cols columns or fewer (0: no such case). */
    int row_unit, col_unit, tasks_per_thread, narrow_cols, narrow_row_unit;
} dt_gemm_kernel;

extern const dt_gemm_kernel dt_gemm_kernel_blas;   /* OpenBLAS's cblas_sgemm */
extern const dt_gemm_kernel dt_gemm_kernel_avx512; /* gemm_avx512.c */

#endif
