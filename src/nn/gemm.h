/* Single-precision matrix multiply: dtrain's own AVX-512 kernel or OpenBLAS's cblas_sgemm,
 * split over a dt_pool, beside a naive reference kernel that the tests compare them with.
 * Private to the library (the layers' kernels, the models, the tests and benchmarks).
 *
 * Intra-op parallelism comes from dt_pool: each thread's share of a product is one kernel call.
 * Which kernel runs, and OpenBLAS's own threads, are the process's settings: the program chooses
 * them through include/dtrain/process.h (dt_gemm_setup, dt_gemm_use), which this header brings
 * in for the library's code that asks which kernel is in use. */
#ifndef DTRAIN_GEMM_H
#define DTRAIN_GEMM_H

#include <stdbool.h>

#include "dtrain/pool.h"
#include "dtrain/process.h"
#include "dtrain/status.h"

/* C (M, N) = alpha * op(A) (M, K) . op(B) (K, N) + beta * C, all row-major. op(A) is A (M, K)
 * with leading dimension lda, or A^T when trans_a, stored (K, M); likewise B. Splits the rows of
 * C (or its columns when N > M) over the pool. */
void dt_gemm(dt_pool *pool, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
             const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* The same product by three loops with a double accumulator. */
void dt_gemm_naive(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc);

#endif
