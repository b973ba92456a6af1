/* Single-precision matrix multiply for CPUs with AVX-512 (see gemm_kernels.h).
 *
 * C is row-major, so a row of C is the vector direction: the micro-kernel keeps a 6 x 64 block of
 * C in 24 zmm registers and, for each k, loads one 64-wide row of op(B) (4 registers) and
 * broadcasts 6 values of op(A) from memory: 24 FMAs for 10 loads, two FMA pipes busy. op(B) is
 * packed, KC x 64 at a time, into a panel that stays in L1 while every 6-row tile of C passes
 * over it; op(A) is read where it lies (a row of A, or a column when transposed, is a fixed
 * stride), which costs no packing and suits the tall-and-thin products of training (M = the
 * batch). Each C element accumulates its k terms in order, one FMA each, in blocks of KC added
 * to C in order: the result does not depend on how the caller splits M or N over threads. */
#include "gemm_kernels.h"

#include <immintrin.h>
#include <stdint.h>

enum { MR = 6, NR = 64, KC = 192 };

/* Lanes of the 16-wide vector v (0..3) of a 64-wide panel that hold one of its nr columns. */
static __mmask16 lanes(int nr, int v)
{
    int n = nr - 16 * v;
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* panel (kc, 64) = op(B)[pc .. pc + kc, jr .. jr + nr), zero beyond nr. */
static void pack_b(float *restrict panel, bool tb, const float *B, int ldb, int pc, int kc, int jr,
                   int nr)
{
    if (!tb) {
        __mmask16 m[4] = {lanes(nr, 0), lanes(nr, 1), lanes(nr, 2), lanes(nr, 3)};
        for (int k = 0; k < kc; k++) {
            const float *src = B + (size_t)(pc + k) * (size_t)ldb + jr;
            for (int v = 0; v < 4; v++)
                _mm512_store_ps(panel + k * NR + 16 * v, _mm512_maskz_loadu_ps(m[v], src + 16 * v));
        }
        return;
    }
    /* op(B)[k][n] = B[n][k]: row n of B is column n of the panel. */
    for (int n = 0; n < nr; n++) {
        const float *src = B + (size_t)(jr + n) * (size_t)ldb + pc;
        for (int k = 0; k < kc; k++)
            panel[k * NR + n] = src[k];
    }
    for (int n = nr; n < NR; n++)
        for (int k = 0; k < kc; k++)
            panel[k * NR + n] = 0.0f;
}

/* C tile row += alpha * acc (beta applied first on the first k block; C not read when it is 0). */
static inline __attribute__((always_inline)) void store_row(float *c, __m512 a0, __m512 a1,
                                                            __m512 a2, __m512 a3,
                                                            const __mmask16 *m, __m512 alpha,
                                                            __m512 beta, bool first, bool beta0)
{
    __m512 acc[4] = {a0, a1, a2, a3};
    for (int v = 0; v < 4; v++) {
        if (!m[v])
            continue;
        __m512 r = _mm512_mul_ps(alpha, acc[v]);
        if (!first)
            r = _mm512_add_ps(_mm512_maskz_loadu_ps(m[v], c + 16 * v), r);
        else if (!beta0)
            r = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m[v], c + 16 * v), r);
        _mm512_mask_storeu_ps(c + 16 * v, m[v], r);
    }
}

#define ROW_FMA(r)                                                                                 \
    do {                                                                                           \
        __m512 a = _mm512_set1_ps(a0[(r) * rs + k * cs]);                                          \
        c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0);                                                 \
        c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1);                                                 \
        c##r##2 = _mm512_fmadd_ps(a, b2, c##r##2);                                                 \
        c##r##3 = _mm512_fmadd_ps(a, b3, c##r##3);                                                 \
    } while (0)

/* Row k of the packed panel: 64 floats of op(B) in b0..b3. */
#define LOAD_PANEL_ROW(k)                                                                          \
    const float *b = panel + (k) * NR;                                                             \
    __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);                                    \
    __m512 b2 = _mm512_load_ps(b + 32), b3 = _mm512_load_ps(b + 48)

#define ROW_ZERO(r)                                                                                \
    __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps(),                           \
           c##r##2 = _mm512_setzero_ps(), c##r##3 = _mm512_setzero_ps()

/* C[0..6, 0..nr) (row stride ldc) and a 6 x kc block of op(A): element (r, k) at a0[r*rs + k*cs].
 * Inlined with rs or cs the constant 1, so each A access is a plain base + offset. */
static inline __attribute__((always_inline)) void tile_6x64(int kc, const float *a0, long rs,
                                                            long cs, const float *panel, float *c,
                                                            long ldc, const __mmask16 *m,
                                                            __m512 alpha, __m512 beta, bool first,
                                                            bool beta0)
{
    ROW_ZERO(0);
    ROW_ZERO(1);
    ROW_ZERO(2);
    ROW_ZERO(3);
    ROW_ZERO(4);
    ROW_ZERO(5);
    for (long k = 0; k < kc; k++) {
        LOAD_PANEL_ROW(k);
        ROW_FMA(0);
        ROW_FMA(1);
        ROW_FMA(2);
        ROW_FMA(3);
        ROW_FMA(4);
        ROW_FMA(5);
    }
    store_row(c, c00, c01, c02, c03, m, alpha, beta, first, beta0);
    store_row(c + ldc, c10, c11, c12, c13, m, alpha, beta, first, beta0);
    store_row(c + 2 * ldc, c20, c21, c22, c23, m, alpha, beta, first, beta0);
    store_row(c + 3 * ldc, c30, c31, c32, c33, m, alpha, beta, first, beta0);
    store_row(c + 4 * ldc, c40, c41, c42, c43, m, alpha, beta, first, beta0);
    store_row(c + 5 * ldc, c50, c51, c52, c53, m, alpha, beta, first, beta0);
}

/* The last M % 6 rows, one at a time, with the same order of operations per element. */
static void tile_rows(int mr, int kc, const float *a0, long rs, long cs, const float *panel,
                      float *c, long ldc, const __mmask16 *m, __m512 alpha, __m512 beta,
                      bool first, bool beta0)
{
    for (int r = 0; r < mr; r++) {
        ROW_ZERO(0);
        for (long k = 0; k < kc; k++) {
            LOAD_PANEL_ROW(k);
            ROW_FMA(0);
        }
        store_row(c, c00, c01, c02, c03, m, alpha, beta, first, beta0);
        a0 += rs;
        c += ldc;
    }
}

/* Every tile of C's columns jr .. jr + nr against one packed panel of op(B). */
static void panel_pass(bool ta, int M, int kc, const float *A, int lda, int pc,
                       const float *panel, float *C, int ldc, int jr, int nr, float alpha,
                       float beta, bool first)
{
    __mmask16 m[4] = {lanes(nr, 0), lanes(nr, 1), lanes(nr, 2), lanes(nr, 3)};
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    bool beta0 = beta == 0.0f;
    /* op(A)[i][k] is A[i][k] (row stride lda) or A[k][i] (k stride lda). */
    long rs = ta ? 1 : lda, cs = ta ? lda : 1;
    const float *a = ta ? A + (size_t)pc * (size_t)lda : A + pc;
    int i = 0;
    for (; i + MR <= M; i += MR) {
        float *c = C + (size_t)i * (size_t)ldc + jr;
        if (ta)
            tile_6x64(kc, a + i, 1, cs, panel, c, ldc, m, va, vb, first, beta0);
        else
            tile_6x64(kc, a + (size_t)i * (size_t)lda, rs, 1, panel, c, ldc, m, va, vb, first,
                      beta0);
    }
    if (i < M)
        tile_rows(M - i, kc, a + (size_t)i * (size_t)rs, rs, cs, panel,
                  C + (size_t)i * (size_t)ldc + jr, ldc, m, va, vb, first, beta0);
}

/* C = beta * C when there is nothing to multiply (K = 0): 0 when beta is, whatever C held. */
static void scale_c(int M, int N, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            C[(size_t)i * (size_t)ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * (size_t)ldc + j];
}

static void gemm_avx512(bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
    float panel[KC * NR] __attribute__((aligned(64)));
    for (int pc = 0; pc < K; pc += KC) {
        int kc = K - pc < KC ? K - pc : KC;
        for (int jr = 0; jr < N; jr += NR) {
            int nr = N - jr < NR ? N - jr : NR;
            pack_b(panel, tb, B, ldb, pc, kc, jr, nr);
            panel_pass(ta, M, kc, A, lda, pc, panel, C, ldc, jr, nr, alpha, beta, pc == 0);
        }
    }
}

/* Split on tile boundaries, where no tile is cut short; the result is the same for any split. */
const dt_gemm_kernel dt_gemm_kernel_avx512 = {"avx512", DT_CPU_AVX512F, gemm_avx512, MR, NR, 4};
