/* AVX2 + FMA kernels for the fused 3x3 conv + ReLU + 2x2 max pool (see convpool.h).
 *
 * Work unit: one pooled position and 8 output channels (one ymm vector). The 2x2 window of conv
 * outputs under it reads a 4x4 patch of input; each of the 16 input pixels is broadcast once and
 * feeds the (up to four) conv outputs whose 3x3 footprint covers it: 16 broadcasts and 36 FMAs
 * per unit, with the nine weight vectors of the channel group held in registers throughout. */
#include "convpool_avx2.h"

#include <immintrin.h>

/* Input pixel (i, j) of the 4x4 patch feeds conv output (dy, dx) of the window through tap
 * (i - dy, j - dx) when that lies in the 3x3 kernel. The conditions fold at compile time. */
#define TAP_OK(i, j, dy, dx) ((i) - (dy) >= 0 && (i) - (dy) <= 2 && (j) - (dx) >= 0 && (j) - (dx) <= 2)
#define TAP(i, j, dy, dx) (((i) - (dy)) * 3 + (j) - (dx))

#define FWD_PIXEL(i, j)                                                                            \
    do {                                                                                           \
        __m256 v = _mm256_broadcast_ss(patch + (i) * W + (j));                                     \
        if (TAP_OK(i, j, 0, 0)) a00 = _mm256_fmadd_ps(v, wv[TAP(i, j, 0, 0)], a00);                \
        if (TAP_OK(i, j, 0, 1)) a01 = _mm256_fmadd_ps(v, wv[TAP(i, j, 0, 1)], a01);                \
        if (TAP_OK(i, j, 1, 0)) a10 = _mm256_fmadd_ps(v, wv[TAP(i, j, 1, 0)], a10);                \
        if (TAP_OK(i, j, 1, 1)) a11 = _mm256_fmadd_ps(v, wv[TAP(i, j, 1, 1)], a11);                \
    } while (0)

#define FWD_ROW(i) FWD_PIXEL(i, 0); FWD_PIXEL(i, 1); FWD_PIXEL(i, 2); FWD_PIXEL(i, 3)

void dt_convpool_forward_avx2(long n_begin, long n_end, int H, int W, int PH, int PW, int OC,
                              const float *x, const float *w, const float *b, float *y,
                              uint32_t *mask)
{
    const int groups = OC / 8;
    const __m256 zero = _mm256_setzero_ps();
    for (long n = n_begin; n < n_end; n++) {
        const float *xn = x + (size_t)n * H * W;
        for (int g = 0; g < groups; g++) {
            __m256 wv[9];
            for (int t = 0; t < 9; t++)
                wv[t] = _mm256_loadu_ps(w + (size_t)t * OC + g * 8);
            const __m256 bias = _mm256_loadu_ps(b + g * 8);
            for (int pr = 0; pr < PH; pr++)
                for (int pc = 0; pc < PW; pc++) {
                    const float *patch = xn + (size_t)(2 * pr) * W + 2 * pc;
                    __m256 a00 = zero, a01 = zero, a10 = zero, a11 = zero;
                    FWD_ROW(0);
                    FWD_ROW(1);
                    FWD_ROW(2);
                    FWD_ROW(3);
                    __m256 m = _mm256_max_ps(_mm256_max_ps(a00, a01), _mm256_max_ps(a10, a11));
                    /* First maximum in row-major window order, as TensorFlow and PyTorch pick. */
                    __m256 e0 = _mm256_cmp_ps(a00, m, _CMP_EQ_OQ);
                    __m256 e1 = _mm256_andnot_ps(e0, _mm256_cmp_ps(a01, m, _CMP_EQ_OQ));
                    __m256 e2 = _mm256_andnot_ps(_mm256_or_ps(e0, e1),
                                                 _mm256_cmp_ps(a10, m, _CMP_EQ_OQ));
                    size_t o = ((size_t)n * PH + pr) * PW + pc;
                    mask[o * groups + g] = (uint32_t)_mm256_movemask_ps(e0) |
                                           (uint32_t)_mm256_movemask_ps(e1) << 8 |
                                           (uint32_t)_mm256_movemask_ps(e2) << 16;
                    _mm256_storeu_ps(y + o * OC + g * 8,
                                     _mm256_max_ps(_mm256_add_ps(m, bias), zero));
                }
        }
    }
}

static inline __m256 lanes_of_byte(uint32_t byte)
{
    const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256i v = _mm256_and_si256(_mm256_set1_epi32((int)byte), bits);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(v, bits));
}

#define BWD_PIXEL(i, j)                                                                            \
    do {                                                                                           \
        __m256 v = _mm256_broadcast_ss(patch + (i) * W + (j));                                     \
        if (TAP_OK(i, j, 0, 0)) acc[TAP(i, j, 0, 0)] = _mm256_fmadd_ps(v, g00, acc[TAP(i, j, 0, 0)]); \
        if (TAP_OK(i, j, 0, 1)) acc[TAP(i, j, 0, 1)] = _mm256_fmadd_ps(v, g01, acc[TAP(i, j, 0, 1)]); \
        if (TAP_OK(i, j, 1, 0)) acc[TAP(i, j, 1, 0)] = _mm256_fmadd_ps(v, g10, acc[TAP(i, j, 1, 0)]); \
        if (TAP_OK(i, j, 1, 1)) acc[TAP(i, j, 1, 1)] = _mm256_fmadd_ps(v, g11, acc[TAP(i, j, 1, 1)]); \
    } while (0)

#define BWD_ROW(i) BWD_PIXEL(i, 0); BWD_PIXEL(i, 1); BWD_PIXEL(i, 2); BWD_PIXEL(i, 3)

void dt_convpool_backward_avx2(long n_begin, long n_end, int H, int W, int PH, int PW, int OC,
                               const float *x, const float *y, const uint32_t *mask,
                               const float *dy, float *dw_part, float *db_part)
{
    const int groups = OC / 8;
    const __m256 zero = _mm256_setzero_ps();
    for (int g = 0; g < groups; g++) {
        __m256 acc[9];
        for (int t = 0; t < 9; t++)
            acc[t] = zero;
        __m256 accb = zero;
        for (long n = n_begin; n < n_end; n++) {
            const float *xn = x + (size_t)n * H * W;
            for (int pr = 0; pr < PH; pr++)
                for (int pc = 0; pc < PW; pc++) {
                    size_t o = ((size_t)n * PH + pr) * PW + pc;
                    /* The ReLU passes gradient only where the pooled output is positive. */
                    __m256 yv = _mm256_loadu_ps(y + o * OC + g * 8);
                    __m256 gv = _mm256_and_ps(_mm256_loadu_ps(dy + o * OC + g * 8),
                                              _mm256_cmp_ps(yv, zero, _CMP_GT_OQ));
                    uint32_t mw = mask[o * groups + g];
                    __m256 e0 = lanes_of_byte(mw & 0xff);
                    __m256 e1 = lanes_of_byte((mw >> 8) & 0xff);
                    __m256 e2 = lanes_of_byte((mw >> 16) & 0xff);
                    __m256 g00 = _mm256_and_ps(gv, e0);
                    __m256 g01 = _mm256_and_ps(gv, e1);
                    __m256 g10 = _mm256_and_ps(gv, e2);
                    __m256 g11 = _mm256_andnot_ps(_mm256_or_ps(_mm256_or_ps(e0, e1), e2), gv);
                    accb = _mm256_add_ps(accb, gv);
                    const float *patch = xn + (size_t)(2 * pr) * W + 2 * pc;
                    BWD_ROW(0);
                    BWD_ROW(1);
                    BWD_ROW(2);
                    BWD_ROW(3);
                }
        }
        for (int t = 0; t < 9; t++)
            _mm256_storeu_ps(dw_part + (size_t)t * OC + g * 8, acc[t]);
        _mm256_storeu_ps(db_part + g * 8, accb);
    }
}
