/* Single-precision matrix multiply for CPUs with AVX-512 (see gemm_kernels.h).
 *
 * C is row-major, so a row of C is the vector direction: the micro-kernel keeps a block of C in
 * 24 zmm registers, 6 rows x 64 columns, and for each k loads one 64-wide row of op(B) (4
 * registers) and broadcasts 6 values of op(A) from memory: 24 FMAs for 10 loads, two FMA pipes
 * busy. Narrow products take narrower, taller blocks of the same 24 registers, 12 x 32 or
 * 24 x 16, so that a layer of 32 units or a single logit does not compute 64 columns to keep
 * 32 or 1: C's columns are covered by 64-wide panels, then one 32- or 16-wide panel for what is
 * left. op(B) is packed, KC x width at a time, into a panel that stays in cache while every tile
 * of C passes over it; op(A) is read where it lies (a row of A, or a column when transposed, is
 * a fixed stride), which costs no packing and suits the tall-and-thin products of training
 * (M = the batch). Each C element accumulates its k terms in order, one FMA each, in blocks of
 * KC added to C in order, whatever the tile it falls in: the result does not depend on how the
 * caller splits M or N over threads. */
#include "gemm_kernels.h"

#include <immintrin.h>
#include <stdint.h>

enum { NR = 64, KC = 192 };
/* Rows of C split over threads in multiples of the tiles' heights: 6 where 64-wide panels
 * cover C, 24 (for 12 and 24) where it is 32 columns wide or less. */
enum { ROW_UNIT = 6, NARROW_COLS = 32, NARROW_ROW_UNIT = 24 };

/* Lanes of the 16-wide vector v (0..3) of a panel that hold one of its nr columns. */
static __mmask16 lanes(int nr, int v)
{
    int n = nr - 16 * v;
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* panel (kc, 16 nv) = op(B)[pc .. pc + kc, jr .. jr + nr), zero beyond nr. */
static void pack_b(float *restrict panel, int nv, bool tb, const float *B, int ldb, int pc, int kc,
                   int jr, int nr)
{
    int width = 16 * nv;
    if (!tb) {
        __mmask16 m[4] = {lanes(nr, 0), lanes(nr, 1), lanes(nr, 2), lanes(nr, 3)};
        for (int k = 0; k < kc; k++) {
            const float *src = B + (size_t)(pc + k) * (size_t)ldb + jr;
            for (int v = 0; v < nv; v++)
                _mm512_store_ps(panel + k * width + 16 * v,
                                _mm512_maskz_loadu_ps(m[v], src + 16 * v));
        }
        return;
    }
    /* op(B)[k][n] = B[n][k]: row n of B is column n of the panel. */
    for (int n = 0; n < nr; n++) {
        const float *src = B + (size_t)(jr + n) * (size_t)ldb + pc;
        for (int k = 0; k < kc; k++)
            panel[k * width + n] = src[k];
    }
    for (int n = nr; n < width; n++)
        for (int k = 0; k < kc; k++)
            panel[k * width + n] = 0.0f;
}

/* C's vector v of a tile row += alpha * acc (beta applied first on the first k block; C not read
 * when it is 0). */
static inline __attribute__((always_inline)) void store_vec(float *c, __m512 acc, __mmask16 m,
                                                            __m512 alpha, __m512 beta, bool first,
                                                            bool beta0)
{
    if (!m)
        return;
    __m512 r = _mm512_mul_ps(alpha, acc);
    if (!first)
        r = _mm512_add_ps(_mm512_maskz_loadu_ps(m, c), r);
    else if (!beta0)
        r = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m, c), r);
    _mm512_mask_storeu_ps(c, m, r);
}

/* One tile row's accumulators, c<r>_<v>, for a tile of nv vectors (the macros name them: GCC
 * keeps an array of __m512 on the stack inside the loop). */
#define ROW_ZERO_1(r) __m512 c##r##_0 = _mm512_setzero_ps()
#define ROW_ZERO_2(r) ROW_ZERO_1(r), c##r##_1 = _mm512_setzero_ps()
#define ROW_ZERO_4(r) ROW_ZERO_2(r), c##r##_2 = _mm512_setzero_ps(), c##r##_3 = _mm512_setzero_ps()

/* Row r of the tile += op(A)[r][k] x the panel's row k (in b0 ..). */
#define ROW_FMA_1(r)                                                                               \
    __m512 av##r = _mm512_set1_ps(a0[(r) * rs + k * cs]);                                         \
    c##r##_0 = _mm512_fmadd_ps(av##r, b0, c##r##_0)
#define ROW_FMA_2(r)                                                                               \
    ROW_FMA_1(r);                                                                                  \
    c##r##_1 = _mm512_fmadd_ps(av##r, b1, c##r##_1)
#define ROW_FMA_4(r)                                                                               \
    ROW_FMA_2(r);                                                                                  \
    c##r##_2 = _mm512_fmadd_ps(av##r, b2, c##r##_2);                                               \
    c##r##_3 = _mm512_fmadd_ps(av##r, b3, c##r##_3)

#define ROW_STORE_1(r)                                                                             \
    store_vec(c + (r) * ldc, c##r##_0, m[0], alpha, beta, first, beta0)
#define ROW_STORE_2(r)                                                                             \
    ROW_STORE_1(r);                                                                                \
    store_vec(c + (r) * ldc + 16, c##r##_1, m[1], alpha, beta, first, beta0)
#define ROW_STORE_4(r)                                                                             \
    ROW_STORE_2(r);                                                                                \
    store_vec(c + (r) * ldc + 32, c##r##_2, m[2], alpha, beta, first, beta0);                    \
    store_vec(c + (r) * ldc + 48, c##r##_3, m[3], alpha, beta, first, beta0)

/* Row k of the packed panel: 16 nv floats of op(B) in b0 ... */
#define LOAD_PANEL_1(k)                                                                            \
    const float *b = panel + (k) * 16;                                                             \
    __m512 b0 = _mm512_load_ps(b)
#define LOAD_PANEL_2(k)                                                                            \
    const float *b = panel + (k) * 32;                                                             \
    __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16)
#define LOAD_PANEL_4(k)                                                                            \
    const float *b = panel + (k) * 64;                                                             \
    __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);                                    \
    __m512 b2 = _mm512_load_ps(b + 32), b3 = _mm512_load_ps(b + 48)

/* The arguments every tile takes: C[0.., 0..16 nv) (row stride ldc) and a block of op(A) of kc
 * columns, element (r, k) at a0[r*rs + k*cs]. Inlined with rs or cs the constant 1, so each A
 * access is a plain base + offset. */
#define TILE_PARAMS                                                                                \
    int kc, const float *a0, long rs, long cs, const float *panel, float *c, long ldc,             \
        const __mmask16 *m, __m512 alpha, __m512 beta, bool first, bool beta0
#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE void tile_6x64(TILE_PARAMS)
{
    ROW_ZERO_4(0); ROW_ZERO_4(1); ROW_ZERO_4(2); ROW_ZERO_4(3); ROW_ZERO_4(4); ROW_ZERO_4(5);
    for (long k = 0; k < kc; k++) {
        LOAD_PANEL_4(k);
        ROW_FMA_4(0); ROW_FMA_4(1); ROW_FMA_4(2); ROW_FMA_4(3); ROW_FMA_4(4); ROW_FMA_4(5);
    }
    ROW_STORE_4(0); ROW_STORE_4(1); ROW_STORE_4(2); ROW_STORE_4(3); ROW_STORE_4(4); ROW_STORE_4(5);
}

ALWAYS_INLINE void tile_12x32(TILE_PARAMS)
{
    ROW_ZERO_2(0); ROW_ZERO_2(1); ROW_ZERO_2(2); ROW_ZERO_2(3); ROW_ZERO_2(4); ROW_ZERO_2(5);
    ROW_ZERO_2(6); ROW_ZERO_2(7); ROW_ZERO_2(8); ROW_ZERO_2(9); ROW_ZERO_2(10); ROW_ZERO_2(11);
    for (long k = 0; k < kc; k++) {
        LOAD_PANEL_2(k);
        ROW_FMA_2(0); ROW_FMA_2(1); ROW_FMA_2(2); ROW_FMA_2(3); ROW_FMA_2(4); ROW_FMA_2(5);
        ROW_FMA_2(6); ROW_FMA_2(7); ROW_FMA_2(8); ROW_FMA_2(9); ROW_FMA_2(10); ROW_FMA_2(11);
    }
    ROW_STORE_2(0); ROW_STORE_2(1); ROW_STORE_2(2); ROW_STORE_2(3); ROW_STORE_2(4); ROW_STORE_2(5);
    ROW_STORE_2(6); ROW_STORE_2(7); ROW_STORE_2(8); ROW_STORE_2(9); ROW_STORE_2(10);
    ROW_STORE_2(11);
}

ALWAYS_INLINE void tile_24x16(TILE_PARAMS)
{
    ROW_ZERO_1(0); ROW_ZERO_1(1); ROW_ZERO_1(2); ROW_ZERO_1(3); ROW_ZERO_1(4); ROW_ZERO_1(5);
    ROW_ZERO_1(6); ROW_ZERO_1(7); ROW_ZERO_1(8); ROW_ZERO_1(9); ROW_ZERO_1(10); ROW_ZERO_1(11);
    ROW_ZERO_1(12); ROW_ZERO_1(13); ROW_ZERO_1(14); ROW_ZERO_1(15); ROW_ZERO_1(16); ROW_ZERO_1(17);
    ROW_ZERO_1(18); ROW_ZERO_1(19); ROW_ZERO_1(20); ROW_ZERO_1(21); ROW_ZERO_1(22); ROW_ZERO_1(23);
    for (long k = 0; k < kc; k++) {
        LOAD_PANEL_1(k);
        ROW_FMA_1(0); ROW_FMA_1(1); ROW_FMA_1(2); ROW_FMA_1(3); ROW_FMA_1(4); ROW_FMA_1(5);
        ROW_FMA_1(6); ROW_FMA_1(7); ROW_FMA_1(8); ROW_FMA_1(9); ROW_FMA_1(10); ROW_FMA_1(11);
        ROW_FMA_1(12); ROW_FMA_1(13); ROW_FMA_1(14); ROW_FMA_1(15); ROW_FMA_1(16); ROW_FMA_1(17);
        ROW_FMA_1(18); ROW_FMA_1(19); ROW_FMA_1(20); ROW_FMA_1(21); ROW_FMA_1(22); ROW_FMA_1(23);
    }
    ROW_STORE_1(0); ROW_STORE_1(1); ROW_STORE_1(2); ROW_STORE_1(3); ROW_STORE_1(4); ROW_STORE_1(5);
    ROW_STORE_1(6); ROW_STORE_1(7); ROW_STORE_1(8); ROW_STORE_1(9); ROW_STORE_1(10);
    ROW_STORE_1(11);
    ROW_STORE_1(12); ROW_STORE_1(13); ROW_STORE_1(14); ROW_STORE_1(15); ROW_STORE_1(16);
    ROW_STORE_1(17); ROW_STORE_1(18); ROW_STORE_1(19); ROW_STORE_1(20); ROW_STORE_1(21);
    ROW_STORE_1(22); ROW_STORE_1(23);
}

/* The rows below the last whole tile, one at a time, with the same order of operations per
 * element. */
ALWAYS_INLINE void row_by_row(int nv, int mr, TILE_PARAMS)
{
    for (int i = 0; i < mr; i++) {
        if (nv == 4) {
            ROW_ZERO_4(0);
            for (long k = 0; k < kc; k++) {
                LOAD_PANEL_4(k);
                ROW_FMA_4(0);
            }
            ROW_STORE_4(0);
        } else if (nv == 2) {
            ROW_ZERO_2(0);
            for (long k = 0; k < kc; k++) {
                LOAD_PANEL_2(k);
                ROW_FMA_2(0);
            }
            ROW_STORE_2(0);
        } else {
            ROW_ZERO_1(0);
            for (long k = 0; k < kc; k++) {
                LOAD_PANEL_1(k);
                ROW_FMA_1(0);
            }
            ROW_STORE_1(0);
        }
        a0 += rs;
        c += ldc;
    }
}

/* Every tile of C's columns jr .. jr + nr against one packed panel of op(B) 16 nv wide, op(A)'s
 * element (i, k) at a[i*rs + k*cs]. */
ALWAYS_INLINE void panel_tiles(int nv, int M, const float *a, long rs, long cs, int kc,
                               const float *panel, float *c, long ldc, const __mmask16 *m,
                               __m512 alpha, __m512 beta, bool first, bool beta0)
{
    int mr = 24 / nv, i = 0;
    for (; i + mr <= M; i += mr) {
        const float *ai = a + (size_t)i * (size_t)rs;
        float *ci = c + (size_t)i * (size_t)ldc;
        if (nv == 4)
            tile_6x64(kc, ai, rs, cs, panel, ci, ldc, m, alpha, beta, first, beta0);
        else if (nv == 2)
            tile_12x32(kc, ai, rs, cs, panel, ci, ldc, m, alpha, beta, first, beta0);
        else
            tile_24x16(kc, ai, rs, cs, panel, ci, ldc, m, alpha, beta, first, beta0);
    }
    if (i < M)
        row_by_row(nv, M - i, kc, a + (size_t)i * (size_t)rs, rs, cs, panel,
                   c + (size_t)i * (size_t)ldc, ldc, m, alpha, beta, first, beta0);
}

/* The A layouts as separate instances, so that the stride that is 1 is a constant in each. */
static void panel_pass(bool ta, int nv, int M, int kc, const float *A, int lda, int pc,
                       const float *panel, float *C, int ldc, int jr, int nr, float alpha,
                       float beta, bool first)
{
    __mmask16 m[4] = {lanes(nr, 0), lanes(nr, 1), lanes(nr, 2), lanes(nr, 3)};
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    bool beta0 = beta == 0.0f;
    float *c = C + jr;
    /* op(A)[i][k] is A[i][k] (row stride lda) or A[k][i] (k stride lda). */
    if (ta) {
        const float *a = A + (size_t)pc * (size_t)lda;
        if (nv == 4)
            panel_tiles(4, M, a, 1, lda, kc, panel, c, ldc, m, va, vb, first, beta0);
        else if (nv == 2)
            panel_tiles(2, M, a, 1, lda, kc, panel, c, ldc, m, va, vb, first, beta0);
        else
            panel_tiles(1, M, a, 1, lda, kc, panel, c, ldc, m, va, vb, first, beta0);
    } else {
        const float *a = A + pc;
        if (nv == 4)
            panel_tiles(4, M, a, lda, 1, kc, panel, c, ldc, m, va, vb, first, beta0);
        else if (nv == 2)
            panel_tiles(2, M, a, lda, 1, kc, panel, c, ldc, m, va, vb, first, beta0);
        else
            panel_tiles(1, M, a, lda, 1, kc, panel, c, ldc, m, va, vb, first, beta0);
    }
}

/* The panel width for the nr columns left: 64 while more than 32 are, else the narrowest that
 * holds them. */
static int panel_vectors(int nr) { return nr > 32 ? 4 : nr > 16 ? 2 : 1; }

/* C = beta * C when there is nothing to multiply (K = 0): 0 when beta is, whatever C held. */
static void scale_c(int M, int N, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            C[(size_t)i * (size_t)ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * (size_t)ldc + j];
}

/* A product of a few rows (a forward of one example: serving), where packing op(B) would cost
 * more than the product itself: each row of C, 64 columns at a time, reads op(B)'s rows where
 * they lie. The same FMAs in the same order as the tiles' (a KC block's terms from zero, the
 * blocks added to C in order), so the same bits. */
enum { FEW_ROWS = 3 };

static void few_rows(bool ta, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc)
{
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    bool beta0 = beta == 0.0f;
    for (int i = 0; i < M; i++)
        for (int jr = 0; jr < N; jr += 64) {
            int nr = N - jr < 64 ? N - jr : 64;
            __mmask16 m[4] = {lanes(nr, 0), lanes(nr, 1), lanes(nr, 2), lanes(nr, 3)};
            float *c = C + (size_t)i * (size_t)ldc + jr;
            for (int pc = 0; pc < K; pc += KC) {
                int kc = K - pc < KC ? K - pc : KC;
                __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                                 _mm512_setzero_ps()};
                for (int k = pc; k < pc + kc; k++) {
                    __m512 a = _mm512_set1_ps(ta ? A[(size_t)k * (size_t)lda + i]
                                                 : A[(size_t)i * (size_t)lda + k]);
                    const float *b = B + (size_t)k * (size_t)ldb + jr;
                    for (int v = 0; v < 4; v++)
                        acc[v] = _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(m[v], b + 16 * v),
                                                 acc[v]);
                }
                for (int v = 0; v < 4; v++)
                    store_vec(c + 16 * v, acc[v], m[v], va, vb, pc == 0, beta0);
            }
        }
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
    if (M <= FEW_ROWS && !tb) {
        few_rows(ta, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    float panel[KC * NR] __attribute__((aligned(64)));
    for (int pc = 0; pc < K; pc += KC) {
        int kc = K - pc < KC ? K - pc : KC;
        for (int jr = 0, nv; jr < N; jr += 16 * nv) {
            nv = panel_vectors(N - jr);
            int nr = N - jr < 16 * nv ? N - jr : 16 * nv;
            pack_b(panel, nv, tb, B, ldb, pc, kc, jr, nr);
            panel_pass(ta, nv, M, kc, A, lda, pc, panel, C, ldc, jr, nr, alpha, beta, pc == 0);
        }
    }
}

/* Split on tile boundaries, where no tile is cut short; the result is the same for any split. */
const dt_gemm_kernel dt_gemm_kernel_avx512 = {
    "avx512", DT_CPU_AVX512F, gemm_avx512, ROW_UNIT, NR, 4, NARROW_COLS, NARROW_ROW_UNIT};
