/* Single-precision matrix multiply: OpenBLAS's cblas_sgemm, split over a dt_pool, beside a naive
 * reference kernel that the tests compare it with.
 *
 * Intra-op parallelism comes from dt_pool: each thread's share of a product is one OpenBLAS call.
 * A program that trains only through dtrain should make OpenBLAS single-threaded
 * (dt_gemm_setup, as the dtrain command does at start), so that OpenBLAS's own threads never spin
 * against the pool's on a small machine; the library does not do it on its own, as the setting
 * is the whole process's and the program may use OpenBLAS elsewhere. */
#ifndef DTRAIN_GEMM_H
#define DTRAIN_GEMM_H

#include <stdbool.h>

#include "dtrain/pool.h"

/* Makes OpenBLAS single-threaded and stops its server threads, for the whole process.
 * Idempotent. The library never calls it: the program decides. */
void dt_gemm_setup(void);

/* C (M, N) = alpha * op(A) (M, K) . op(B) (K, N) + beta * C, all row-major. op(A) is A (M, K)
 * with leading dimension lda, or A^T when trans_a, stored (K, M); likewise B. Splits the rows of
 * C (or its columns when N > M) over the pool. */
void dt_gemm(dt_pool *pool, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
             const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* The same product by three loops with a double accumulator. */
void dt_gemm_ref(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc);

#endif
