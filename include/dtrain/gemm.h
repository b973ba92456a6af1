/* Single-precision matrix multiply: dtrain's own AVX-512 kernel or OpenBLAS's cblas_sgemm,
 * split over a dt_pool, beside a naive reference kernel that the tests compare them with.
 *
 * Intra-op parallelism comes from dt_pool: each thread's share of a product is one kernel call.
 * A program that trains only through dtrain should make OpenBLAS single-threaded
 * (dt_gemm_setup, as the dtrain command does at start), so that OpenBLAS's own threads never spin
 * against the pool's on a small machine; the library does not do it on its own, as the setting
 * is the whole process's and the program may use OpenBLAS elsewhere. */
#ifndef DTRAIN_GEMM_H
#define DTRAIN_GEMM_H

#include <stdbool.h>

#include "dtrain/pool.h"
#include "dtrain/status.h"

/* Makes OpenBLAS single-threaded and stops its server threads, for the whole process.
 * Idempotent. The library never calls it: the program decides. */
void dt_gemm_setup(void);

/* C (M, N) = alpha * op(A) (M, K) . op(B) (K, N) + beta * C, all row-major. op(A) is A (M, K)
 * with leading dimension lda, or A^T when trans_a, stored (K, M); likewise B. Splits the rows of
 * C (or its columns when N > M) over the pool. */
void dt_gemm(dt_pool *pool, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
             const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* The kernel dt_gemm runs on each thread's share: "avx512" (dtrain's own, on CPUs with
 * AVX-512F) or "blas" (OpenBLAS). By default the first of these this CPU runs, chosen at first
 * use. dtrain's own gives a product the same bits however dt_gemm splits it over threads;
 * OpenBLAS's last bits depend on the sizes of the shares. */
const char *dt_gemm_kernel_name(void);

/* Makes name ("avx512", "blas", or "auto" for the default) the kernel of every later dt_gemm
 * in the process: DT_ERR_UNSUPPORTED when this CPU cannot run it, DT_ERR_INVALID for another
 * name. Not to be called while another thread multiplies. */
dt_status dt_gemm_use(const char *name);

/* Whether this CPU runs the kernel called name. */
bool dt_gemm_kernel_runs_here(const char *name);

/* The same product by three loops with a double accumulator. */
void dt_gemm_naive(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc);

#endif
