/* The factorization machine's pairwise term (see fm.h). */
#include "fm.h"

#include <stddef.h>
#include <stdlib.h>

#include "../core/cpu.h"
#include "../core/prefetch.h"

/* An example's FM term from its per-k sums s and sums of squares q: both forward kernels end
 * with it, so that they give the same bits. Inlined into each clone of its callers. */
static inline __attribute__((always_inline)) float fm_term(const float *s, const float *q, int K)
{
    float acc = 0.0f;
    for (int k = 0; k < K; k++)
        acc += s[k] * s[k] - q[k];
    return 0.5f * acc;
}

// emb (B, F, K); sums (B, K); y (B)
DT_MULTI_ISA
void dt_fm_forward(int B, int F, int K, const float *emb, float *sums, float *y)
{
    for (int i = 0; i < B; i++) {
        const float *e = emb + (size_t)i * (size_t)F * (size_t)K;
        float *s = sums + (size_t)i * (size_t)K;
        /* Per k: the sum and the sum of squares, accumulated field by field so the inner loops
         * run over K contiguous floats. */
        float q[DT_FM_MAX_K];
        for (int k = 0; k < K; k++)
            s[k] = q[k] = 0.0f;
        for (int f = 0; f < F; f++) {
            const float *ef = e + (size_t)f * (size_t)K;
            for (int k = 0; k < K; k++) {
                s[k] += ef[k];
                q[k] += ef[k] * ef[k];
            }
        }
        y[i] = fm_term(s, q, K);
    }
}
DT_MULTI_ISA_HIDE(dt_fm_forward)

/* Rows are fetched this many fields ahead, as dt_embedding_forward does (see embedding.c). */
#define LOOKUP_AHEAD 12

static inline void prefetch_rows(const float *w, const float *v, int K, int64_t id)
{
    dt_prefetch_read(w + id, sizeof(float));
    dt_prefetch_read(v + (size_t)id * (size_t)K, (size_t)K * sizeof(float));
}

// w (rows, 1); v (rows, K); ids, vals (B, F); lin (B, F); emb (B, F, K); sums (B, K); y (B)
DT_MULTI_ISA
void dt_fm_forward_lookup(const float *w, const float *v, int B, int F, int K, const int64_t *ids,
                          const float *vals, float *lin, float *emb, float *sums, float *y)
{
    size_t n = (size_t)B * (size_t)F;
    for (size_t p = 0; p < n && p < LOOKUP_AHEAD; p++)
        prefetch_rows(w, v, K, ids[p]);
    for (int i = 0; i < B; i++) {
        float *s = sums + (size_t)i * (size_t)K;
        float q[DT_FM_MAX_K];
        for (int k = 0; k < K; k++)
            s[k] = q[k] = 0.0f;
        for (int f = 0; f < F; f++) {
            size_t p = (size_t)i * (size_t)F + (size_t)f;
            if (p + LOOKUP_AHEAD < n)
                prefetch_rows(w, v, K, ids[p + LOOKUP_AHEAD]);
            const float *row = v + (size_t)ids[p] * (size_t)K;
            float x = vals[p], *e = emb + p * (size_t)K;
            lin[p] = w[ids[p]] * x;
            /* dt_fm_forward's sums, on the values dt_embedding_forward stores. */
            for (int k = 0; k < K; k++) {
                float ek = row[k] * x;
                e[k] = ek;
                s[k] += ek;
                q[k] += ek * ek;
            }
        }
        y[i] = fm_term(s, q, K);
    }
}
DT_MULTI_ISA_HIDE(dt_fm_forward_lookup)

void dt_fm_forward_naive(int B, int F, int K, const float *emb, float *y)
{
    for (int i = 0; i < B; i++) {
        const float *e = emb + (size_t)i * (size_t)F * (size_t)K;
        double acc = 0.0;
        for (int f = 0; f < F; f++)
            for (int g = f + 1; g < F; g++)
                for (int k = 0; k < K; k++)
                    acc += (double)e[(size_t)f * K + k] * e[(size_t)g * K + k];
        y[i] = (float)acc;
    }
}

DT_MULTI_ISA
void dt_fm_backward(int B, int F, int K, const float *emb, const float *sums, const float *dy,
                    float *demb)
{
    for (int i = 0; i < B; i++) {
        size_t base = (size_t)i * (size_t)F * (size_t)K;
        const float *s = sums + (size_t)i * (size_t)K;
        float d = dy[i];
        for (int f = 0; f < F; f++) {
            const float *ef = emb + base + (size_t)f * (size_t)K;
            float *df = demb + base + (size_t)f * (size_t)K;
            for (int k = 0; k < K; k++)
                df[k] += d * (s[k] - ef[k]);
        }
    }
}
DT_MULTI_ISA_HIDE(dt_fm_backward)

void dt_fm_backward_naive(int B, int F, int K, const float *emb, const float *dy, float *demb)
{
    for (int i = 0; i < B; i++) {
        const float *e = emb + (size_t)i * (size_t)F * (size_t)K;
        for (int f = 0; f < F; f++)
            for (int k = 0; k < K; k++) {
                double others = 0.0;
                for (int g = 0; g < F; g++)
                    if (g != f)
                        others += e[(size_t)g * K + k];
                demb[((size_t)i * F + f) * K + k] += (float)(dy[i] * others);
            }
    }
}
