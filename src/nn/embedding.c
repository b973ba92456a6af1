/* Embedding lookups and their sparse gradient (see include/dtrain/embedding.h). */
#include "dtrain/embedding.h"

#include <stdlib.h>
#include <string.h>

// ids, vals (n); table (rows, K); out (n, K)
void dt_embedding_forward(const float *table, int K, const int64_t *ids, const float *vals,
                          size_t n, float *out)
{
    for (size_t i = 0; i < n; i++) {
        const float *row = table + (size_t)ids[i] * (size_t)K;
        float v = vals[i], *o = out + i * (size_t)K;
        for (int k = 0; k < K; k++)
            o[k] = row[k] * v;
    }
}

void dt_embedding_forward_naive(const float *table, int K, const int64_t *ids,
                                const float *vals, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < K; k++)
            out[i * (size_t)K + (size_t)k] = table[(size_t)ids[i] * (size_t)K + (size_t)k] * vals[i];
}

/* Positions by id, then by position: the sort gives each id's places in the order they came,
 * so every id's sum is taken in the same order on every run and by the reference. */
static int by_id_then_place(const void *a, const void *b, void *ctx)
{
    const int64_t *ids = ctx;
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    if (ids[i] != ids[j])
        return ids[i] < ids[j] ? -1 : 1;
    return (i > j) - (i < j);
}

// ids, vals (n); grad_out (n, K); order (n); uniq_ids (n); uniq_rows (n, K)
size_t dt_embedding_backward(const int64_t *ids, const float *vals, size_t n, int K,
                             const float *grad_out, uint32_t *order, int64_t *uniq_ids,
                             float *uniq_rows)
{
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    qsort_r(order, n, sizeof *order, by_id_then_place, (void *)ids);
    size_t u = 0;
    for (size_t s = 0; s < n; s++) {
        uint32_t i = order[s];
        float *row;
        if (s == 0 || ids[i] != uniq_ids[u - 1]) {
            uniq_ids[u] = ids[i];
            row = uniq_rows + u * (size_t)K;
            memset(row, 0, (size_t)K * sizeof *row);
            u++;
        } else {
            row = uniq_rows + (u - 1) * (size_t)K;
        }
        const float *g = grad_out + (size_t)i * (size_t)K;
        float v = vals[i];
        for (int k = 0; k < K; k++)
            row[k] += v * g[k];
    }
    return u;
}

size_t dt_embedding_backward_naive(const int64_t *ids, const float *vals, size_t n, int K,
                                   const float *grad_out, int64_t *uniq_ids, float *uniq_rows)
{
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < u && uniq_ids[j] != ids[i])
            j++;
        if (j == u) {
            uniq_ids[u++] = ids[i];
            for (int k = 0; k < K; k++)
                uniq_rows[j * (size_t)K + (size_t)k] = 0.0f;
        }
        for (int k = 0; k < K; k++)
            uniq_rows[j * (size_t)K + (size_t)k] += vals[i] * grad_out[i * (size_t)K + (size_t)k];
    }
    /* Into increasing id order (insertion sort of whole rows: a reference, not fast). */
    for (size_t a = 1; a < u; a++)
        for (size_t b = a; b > 0 && uniq_ids[b - 1] > uniq_ids[b]; b--) {
            int64_t t = uniq_ids[b];
            uniq_ids[b] = uniq_ids[b - 1], uniq_ids[b - 1] = t;
            for (int k = 0; k < K; k++) {
                float *x = uniq_rows + b * (size_t)K + (size_t)k, *y = x - K, r = *x;
                *x = *y, *y = r;
            }
        }
    return u;
}
