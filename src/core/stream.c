/* Streaming stores (see stream.h). memcpy and memset are the reference: the test
 * compares them at every alignment and length up to a few vectors. */
#include "stream.h"

#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(__SSE2__)
/* Elements before dst reaches a 16-byte boundary (a float pointer is 4-byte aligned). */
static size_t head_elems(const float *dst, size_t n)
{
    size_t mis = (uintptr_t)dst % 16;
    size_t head = mis ? (16 - mis) / sizeof(float) : 0;
    return head < n ? head : n;
}
#endif

void dt_stream_copy(float *dst, const float *src, size_t n)
{
#if defined(__SSE2__)
    size_t i = head_elems(dst, n);
    memcpy(dst, src, i * sizeof *dst);
    for (; i + 4 <= n; i += 4)
        _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
    memcpy(dst + i, src + i, (n - i) * sizeof *dst);
    _mm_sfence();
#else
    memcpy(dst, src, n * sizeof *dst);
#endif
}

void dt_stream_zero(float *dst, size_t n)
{
#if defined(__SSE2__)
    size_t i = head_elems(dst, n);
    memset(dst, 0, i * sizeof *dst);
    const __m128 zero = _mm_setzero_ps();
    for (; i + 4 <= n; i += 4)
        _mm_stream_ps(dst + i, zero);
    memset(dst + i, 0, (n - i) * sizeof *dst);
    _mm_sfence();
#else
    memset(dst, 0, n * sizeof *dst);
#endif
}
