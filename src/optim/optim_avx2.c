/* AVX2 optimizer updates (see optim_avx2.h). */
#include "optim_avx2.h"

#include <immintrin.h>
#include <math.h>

void dt_adam_avx2(float *p, const float *g, float *m, float *v, size_t lo, size_t hi, float b1,
                  float b2, float eps, float lr_t)
{
    const __m256 vb1 = _mm256_set1_ps(b1), vb2 = _mm256_set1_ps(b2);
    const __m256 vc1 = _mm256_set1_ps(1.0f - b1), vc2 = _mm256_set1_ps(1.0f - b2);
    const __m256 veps = _mm256_set1_ps(eps), vlr = _mm256_set1_ps(lr_t);
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 gi = _mm256_loadu_ps(g + i);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(vc1, gi));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_loadu_ps(v + i)),
                                  _mm256_mul_ps(_mm256_mul_ps(vc2, gi), gi));
        __m256 step = _mm256_div_ps(_mm256_mul_ps(vlr, mi), _mm256_add_ps(_mm256_sqrt_ps(vi), veps));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(p + i, _mm256_sub_ps(_mm256_loadu_ps(p + i), step));
    }
    for (; i < hi; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        p[i] -= lr_t * m[i] / (sqrtf(v[i]) + eps);
    }
}

void dt_momentum_avx2(float *p, const float *g, float *vel, size_t lo, size_t hi, float mu,
                      float lr, int nesterov)
{
    const __m256 vmu = _mm256_set1_ps(mu), vlr = _mm256_set1_ps(lr);
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 lg = _mm256_mul_ps(vlr, _mm256_loadu_ps(g + i));
        __m256 vi = _mm256_sub_ps(_mm256_mul_ps(vmu, _mm256_loadu_ps(vel + i)), lg);
        _mm256_storeu_ps(vel + i, vi);
        __m256 delta = nesterov ? _mm256_sub_ps(_mm256_mul_ps(vmu, vi), lg) : vi;
        _mm256_storeu_ps(p + i, _mm256_add_ps(_mm256_loadu_ps(p + i), delta));
    }
    for (; i < hi; i++) {
        vel[i] = mu * vel[i] - lr * g[i];
        p[i] += nesterov ? mu * vel[i] - lr * g[i] : vel[i];
    }
}

void dt_adagrad_avx2(float *p, const float *g, float *acc, size_t lo, size_t hi, float lr,
                     float eps)
{
    const __m256 vlr = _mm256_set1_ps(lr), veps = _mm256_set1_ps(eps);
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 gi = _mm256_loadu_ps(g + i);
        __m256 ai = _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(gi, gi));
        _mm256_storeu_ps(acc + i, ai);
        __m256 step = _mm256_div_ps(_mm256_mul_ps(vlr, gi), _mm256_add_ps(_mm256_sqrt_ps(ai), veps));
        _mm256_storeu_ps(p + i, _mm256_sub_ps(_mm256_loadu_ps(p + i), step));
    }
    for (; i < hi; i++) {
        acc[i] += g[i] * g[i];
        p[i] -= lr * g[i] / (sqrtf(acc[i]) + eps);
    }
}

void dt_sgd_avx2(float *p, const float *g, size_t lo, size_t hi, float lr)
{
    const __m256 vlr = _mm256_set1_ps(lr);
    size_t i = lo;
    for (; i + 8 <= hi; i += 8)
        _mm256_storeu_ps(p + i, _mm256_sub_ps(_mm256_loadu_ps(p + i),
                                              _mm256_mul_ps(vlr, _mm256_loadu_ps(g + i))));
    for (; i < hi; i++)
        p[i] -= lr * g[i];
}
