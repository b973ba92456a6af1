/* The AVX-512 kernels of a dense layer's backward over dy's non-zeros (see dense_sparse.h),
 * compiled with -mavx512f -mfma and run only after a CPU check.
 *
 * A chunk of 64 inputs is four zmm registers. Per listed entry: one broadcast of dy's value, four
 * loads of a row that sits in L1 (a row of wt, or 64 floats of an example of x), four FMAs.
 * Consecutive entries alternate between two sets of accumulators, so eight independent FMA
 * chains keep both FMA pipes busy through their latency. The lists are made 16 values at a
 * time: a row's non-zeros packed to the front by compress, a column's appended bit by bit. */
#include "dense_sparse.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "../core/prefetch.h"

enum { NC = DT_SPARSE_NC };

/* The lanes of vector v (0..3) of a 64-wide chunk that hold one of its nc inputs. */
static __mmask16 lanes(int nc, int v)
{
    int n = nc - 16 * v;
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* Named registers, not arrays: GCC keeps an array of __m512 on the stack inside the loop. */
#define FMA4(a0, a1, a2, a3, v, p, L)                                                             \
    do {                                                                                          \
        a0 = _mm512_fmadd_ps(v, L(0, p), a0);                                                     \
        a1 = _mm512_fmadd_ps(v, L(1, p), a1);                                                     \
        a2 = _mm512_fmadd_ps(v, L(2, p), a2);                                                     \
        a3 = _mm512_fmadd_ps(v, L(3, p), a3);                                                     \
    } while (0)

/* wt is 64-byte aligned and zero beyond nc: whole loads. */
#define LOAD_WT(k, p) _mm512_load_ps((p) + 16 * (k))
/* x's rows are read only within the chunk: whole loads for a whole chunk, masked for the last. */
#define LOAD_X(k, p)                                                                              \
    (whole ? _mm512_loadu_ps((p) + 16 * (k)) : _mm512_maskz_loadu_ps(m##k, (p) + 16 * (k)))

/* dx larger than this goes to memory by streaming stores. Each example's 64 outputs of a chunk
 * are 4 whole cache lines, written once: an ordinary store first reads each line in, which for
 * DeepFM's 5 MB dx was a quarter of this kernel's time (and its reader, the embeddings'
 * gradient, finds it in L3 or memory either way). A dx that fits in L2 stays in the cache for
 * the layer below. */
#define DX_STREAM_BYTES ((size_t)2 << 20)

/* Row b's 64 outputs of the chunk: streamed when whole and aligned, else stored. */
static inline __attribute__((always_inline)) void store_dx(float *out, bool stream,
                                                           const __mmask16 *m, __m512 v0,
                                                           __m512 v1, __m512 v2, __m512 v3)
{
    if (stream && ((uintptr_t)out & 63) == 0) {
        _mm512_stream_ps(out, v0);
        _mm512_stream_ps(out + 16, v1);
        _mm512_stream_ps(out + 32, v2);
        _mm512_stream_ps(out + 48, v3);
        return;
    }
    _mm512_mask_storeu_ps(out, m[0], v0);
    _mm512_mask_storeu_ps(out + 16, m[1], v1);
    _mm512_mask_storeu_ps(out + 32, m[2], v2);
    _mm512_mask_storeu_ps(out + 48, m[3], v3);
}

static void dx_avx512(const dt_sparse_dy *s, const float *wt, int i0, int nc, float *dx)
{
    const __mmask16 m[4] = {lanes(nc, 0), lanes(nc, 1), lanes(nc, 2), lanes(nc, 3)};
    bool stream = nc == NC && (size_t)s->B * (size_t)s->IN * sizeof *dx > DX_STREAM_BYTES;
    for (int b = 0; b < s->B; b++) {
        const int32_t *jj = s->row_j + (size_t)b * s->OUT;
        const float *vv = s->row_v + (size_t)b * s->OUT;
        int n = s->row_n[b], e = 0;
        __m512 e0 = _mm512_setzero_ps(), e1 = e0, e2 = e0, e3 = e0;
        __m512 o0 = e0, o1 = e0, o2 = e0, o3 = e0;
        for (; e + 2 <= n; e += 2) {
            const float *p = wt + (size_t)jj[e] * NC, *r = wt + (size_t)jj[e + 1] * NC;
            __m512 va = _mm512_set1_ps(vv[e]), vb = _mm512_set1_ps(vv[e + 1]);
            FMA4(e0, e1, e2, e3, va, p, LOAD_WT);
            FMA4(o0, o1, o2, o3, vb, r, LOAD_WT);
        }
        if (e < n) {
            const float *p = wt + (size_t)jj[e] * NC;
            __m512 va = _mm512_set1_ps(vv[e]);
            FMA4(e0, e1, e2, e3, va, p, LOAD_WT);
        }
        store_dx(dx + (size_t)b * s->IN + i0, stream, m, _mm512_add_ps(e0, o0),
                 _mm512_add_ps(e1, o1), _mm512_add_ps(e2, o2), _mm512_add_ps(e3, o3));
    }
    /* Streaming stores are not ordered with the others: all of them are visible before the
     * pool hears that this chunk is done. */
    if (stream)
        _mm_sfence();
}

/* One column's entries of one example block, added to its running sum. */
static inline __attribute__((always_inline)) void dw_column(const float *x, int IN, int i0,
                                                            const int32_t *bb, const float *vv,
                                                            int e, int end, float *sum,
                                                            bool whole, __mmask16 m0,
                                                            __mmask16 m1, __mmask16 m2,
                                                            __mmask16 m3)
{
    __m512 e0 = _mm512_load_ps(sum), e1 = _mm512_load_ps(sum + 16);
    __m512 e2 = _mm512_load_ps(sum + 32), e3 = _mm512_load_ps(sum + 48);
    __m512 o0 = _mm512_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
    for (; e + 2 <= end; e += 2) {
        const float *p = x + (size_t)bb[e] * IN + i0, *r = x + (size_t)bb[e + 1] * IN + i0;
        __m512 va = _mm512_set1_ps(vv[e]), vb = _mm512_set1_ps(vv[e + 1]);
        FMA4(e0, e1, e2, e3, va, p, LOAD_X);
        FMA4(o0, o1, o2, o3, vb, r, LOAD_X);
    }
    if (e < end) {
        const float *p = x + (size_t)bb[e] * IN + i0;
        __m512 va = _mm512_set1_ps(vv[e]);
        FMA4(e0, e1, e2, e3, va, p, LOAD_X);
    }
    /* Lanes beyond nc: zero loaded, zero added. */
    _mm512_store_ps(sum, _mm512_add_ps(e0, o0));
    _mm512_store_ps(sum + 16, _mm512_add_ps(e1, o1));
    _mm512_store_ps(sum + 32, _mm512_add_ps(e2, o2));
    _mm512_store_ps(sum + 48, _mm512_add_ps(e3, o3));
}

static void dw_avx512(const dt_sparse_dy *s, const float *x, int i0, int nc, float *dwt)
{
    const __mmask16 m0 = lanes(nc, 0), m1 = lanes(nc, 1), m2 = lanes(nc, 2), m3 = lanes(nc, 3);
    for (int kb = 0; kb < s->n_kb; kb++) {
        /* The block's rows of x, asked for in order before the columns take them in theirs:
         * about 7% off this kernel in DeepFM, whose x has just come from L3. */
        int bend = (kb + 1) * DT_SPARSE_KB < s->B ? (kb + 1) * DT_SPARSE_KB : s->B;
        for (int b = kb * DT_SPARSE_KB; b < bend; b++)
            dt_prefetch_read(x + (size_t)b * s->IN + i0, (size_t)nc * sizeof(float));
        for (int j = 0; j < s->OUT; j++) {
            const int32_t *bb;
            const float *vv;
            int e, end;
            dt_sparse_column(s, j, kb, &bb, &vv, &e, &end);
            if (e == end)
                continue;
            float *sum = dwt + (size_t)j * NC;
            if (nc == NC)
                dw_column(x, s->IN, i0, bb, vv, e, end, sum, true, m0, m1, m2, m3);
            else
                dw_column(x, s->IN, i0, bb, vv, e, end, sum, false, m0, m1, m2, m3);
        }
    }
}

/* 16 values at a time: the non-zeros' values and columns packed to the front (compress) and
 * stored up to their count. */
static long list_rows_avx512(const dt_sparse_dy *s, const float *dy, long lo, long hi)
{
    long total = 0;
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (long b = lo; b < hi; b++) {
        const float *row = dy + b * s->OUT;
        int32_t *jj = s->row_j + b * s->OUT;
        float *vv = s->row_v + b * s->OUT;
        int n = 0;
        for (int j = 0; j < s->OUT; j += 16) {
            __mmask16 in = lanes(s->OUT - j, 0);
            __m512 v = _mm512_maskz_loadu_ps(in, row + j);
            __mmask16 nz = _mm512_mask_cmp_ps_mask(in, v, _mm512_setzero_ps(), _CMP_NEQ_UQ);
            int c = __builtin_popcount(nz);
            __mmask16 first = (__mmask16)((1u << c) - 1u);
            __m512i cols = _mm512_add_epi32(iota, _mm512_set1_epi32(j));
            _mm512_mask_storeu_ps(vv + n, first, _mm512_maskz_compress_ps(nz, v));
            _mm512_mask_storeu_epi32(jj + n, first, _mm512_maskz_compress_epi32(nz, cols));
            n += c;
        }
        s->row_n[b] = n;
        total += n;
    }
    return total;
}

/* 16 columns at a time: the sums in a register, each non-zero appended by its bit. */
static void list_cols_avx512(const dt_sparse_dy *s, const float *dy, long lo, long hi, float *db)
{
    int stride = s->n_kb + 1;
    for (long j0 = lo; j0 < hi; j0 += 16) {
        __mmask16 in = lanes((int)(hi - j0), 0);
        int32_t n[16] = {0};
        __m512 sum = _mm512_maskz_loadu_ps(in, db + j0);
        for (int b = 0; b < s->B; b++) {
            if (b % DT_SPARSE_KB == 0)
                for (int q = 0; q < 16 && j0 + q < hi; q++)
                    s->col_start[(j0 + q) * stride + b / DT_SPARSE_KB] = n[q];
            const float *row = dy + (size_t)b * s->OUT + j0;
            __m512 v = _mm512_maskz_loadu_ps(in, row);
            sum = _mm512_add_ps(sum, v);
            for (unsigned nz = _mm512_mask_cmp_ps_mask(in, v, _mm512_setzero_ps(), _CMP_NEQ_UQ);
                 nz; nz &= nz - 1) {
                int q = __builtin_ctz(nz);
                size_t at = (size_t)(j0 + q) * s->col_stride + (size_t)n[q]++;
                s->col_b[at] = b;
                s->col_v[at] = row[q];
            }
        }
        for (int q = 0; q < 16 && j0 + q < hi; q++)
            s->col_start[(j0 + q) * stride + s->n_kb] = n[q];
        _mm512_mask_storeu_ps(db + j0, in, sum);
    }
}

/* ---- 16 x 16 blocks between w's rows and the panels' (the transposes of each chunk) ---- */

/* r[0..16) transposed in place: r[j] lane k = r[k] lane j on return. Three rounds, each pairing
 * rows at a distance of 1, then 2 (64-bit pairs), then 4 and 8 (128-bit lanes). */
static inline __attribute__((always_inline)) void transpose16(__m512 r[16])
{
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4i + c], 128-bit lane L: column 4L + c of rows 4i .. 4i + 3. */
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    /* Row 4L + c takes lane L of u[c], u[4 + c], u[8 + c], u[12 + c], in that order. */
    for (int c = 0; c < 4; c++) {
        __m512 a = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);     /* L0, L2 of each */
        __m512 b = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);     /* L1, L3 */
        __m512 a2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        __m512 b2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
        r[c] = _mm512_shuffle_f32x4(a, a2, 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(a, a2, 0xdd);
        r[4 + c] = _mm512_shuffle_f32x4(b, b2, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(b, b2, 0xdd);
    }
}

/* wt's 16 x 16 blocks, each from 16 rows of w (zero rows beyond nc) and up to 16 columns. */
static void transpose_avx512(const float *w, int OUT, int i0, int nc, float *wt)
{
    for (int q0 = 0; q0 < NC; q0 += 16)
        for (int j0 = 0; j0 < OUT; j0 += 16) {
            int nj = OUT - j0 < 16 ? OUT - j0 : 16;
            __mmask16 m = lanes(nj, 0);
            __m512 r[16];
            for (int k = 0; k < 16; k++)
                r[k] = q0 + k < nc ? _mm512_maskz_loadu_ps(m, w + (size_t)(i0 + q0 + k) * OUT + j0)
                                   : _mm512_setzero_ps();
            transpose16(r);
            for (int k = 0; k < nj; k++)
                _mm512_store_ps(wt + (size_t)(j0 + k) * NC + q0, r[k]);
        }
}

/* dw's rows from dwt's 16 x 16 blocks: one add per element, as the portable kernel. */
static void add_transposed_avx512(const float *dwt, int OUT, int i0, int nc, float *dw)
{
    for (int q0 = 0; q0 < nc; q0 += 16)
        for (int j0 = 0; j0 < OUT; j0 += 16) {
            int nj = OUT - j0 < 16 ? OUT - j0 : 16;
            __mmask16 m = lanes(nj, 0);
            __m512 r[16];
            for (int k = 0; k < 16; k++)
                r[k] = k < nj ? _mm512_load_ps(dwt + (size_t)(j0 + k) * NC + q0)
                              : _mm512_setzero_ps();
            transpose16(r);
            for (int k = 0; k < 16 && q0 + k < nc; k++) {
                float *row = dw + (size_t)(i0 + q0 + k) * OUT + j0;
                _mm512_mask_storeu_ps(row, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, row), r[k]));
            }
        }
}

const dt_sparse_kernels dt_sparse_kernels_avx512 = {"avx512",   list_rows_avx512, list_cols_avx512,
                                                     dx_avx512,  dw_avx512,        transpose_avx512,
                                                     add_transposed_avx512};
