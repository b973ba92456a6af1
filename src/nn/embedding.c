/* Embedding lookups and their sparse gradient (see embedding.h). */
#include "embedding.h"

#include <stdlib.h>
#include <string.h>

#include "../core/cpu.h"
#include "../core/prefetch.h"
#include "../core/radix.h"

/* Rows are fetched this many lookups ahead: a table row is a cache miss more often than not
 * (ids spread over a table far larger than the caches), and the loads of one row do not start
 * until the previous row's arithmetic has, so without a prefetch each miss is waited for. */
#define PREFETCH_AHEAD 12

/* Starts loading the cache lines of row id (K floats) of table. */
static inline void prefetch_row(const float *table, int64_t id, int K)
{
    dt_prefetch_read(table + (size_t)id * (size_t)K, (size_t)K * sizeof(float));
}

// ids, vals (n); table (rows, K); out (n, K)
DT_MULTI_ISA
void dt_embedding_forward(const float *table, int K, const int64_t *ids, const float *vals,
                          size_t n, float *out)
{
    for (size_t i = 0; i < n && i < PREFETCH_AHEAD; i++)
        prefetch_row(table, ids[i], K);
    for (size_t i = 0; i < n; i++) {
        if (i + PREFETCH_AHEAD < n)
            prefetch_row(table, ids[i + PREFETCH_AHEAD], K);
        const float *row = table + (size_t)ids[i] * (size_t)K;
        float v = vals[i], *o = out + i * (size_t)K;
        for (int k = 0; k < K; k++)
            o[k] = row[k] * v;
    }
}
DT_MULTI_ISA_HIDE(dt_embedding_forward)

void dt_embedding_forward_naive(const float *table, int K, const int64_t *ids,
                                const float *vals, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < K; k++)
            out[i * (size_t)K + (size_t)k] = table[(size_t)ids[i] * (size_t)K + (size_t)k] * vals[i];
}

/* ---- Deduplication: a hash table of first appearances, then a radix sort of the unique ids ---- */

/* Fibonacci hashing of an id into a table of 2^bits slots. */
static inline size_t slot_of(int64_t id, int bits)
{
    return (size_t)(((uint64_t)id * 0x9e3779b97f4a7c15ULL) >> (64 - bits));
}

/* The table: 2^bits slots for n places, at most half full. */
static int table_bits(size_t n)
{
    int bits = 4;
    while (((size_t)1 << bits) < 2 * n)
        bits++;
    return bits;
}

size_t dt_embedding_scratch_bytes(size_t n)
{
    size_t slots = (size_t)1 << table_bits(n);
    /* table, first-appearance ids, their ranks, two radix buffers of (id, index) pairs, the
     * place-to-first-appearance map */
    return slots * sizeof(uint32_t) + n * (sizeof(int64_t) + sizeof(uint32_t)) +
           2 * n * (sizeof(int64_t) + sizeof(uint32_t)) + n * sizeof(uint32_t) + 64;
}

// ids (n); scratch (dt_embedding_scratch_bytes(n)); uniq_ids (n); slot (n)
size_t dt_embedding_dedupe(const int64_t *ids, size_t n, void *scratch, int64_t *uniq_ids,
                           uint32_t *slot)
{
    int bits = table_bits(n);
    size_t slots = (size_t)1 << bits, mask = slots - 1;
    uint8_t *p = scratch;
    uint32_t *table = (uint32_t *)p;
    p += slots * sizeof(uint32_t);
    int64_t *first = (int64_t *)(((uintptr_t)p + 7) & ~(uintptr_t)7);
    int64_t *tk = first + n, *keys = tk + n;
    uint32_t *tv = (uint32_t *)(keys + n), *vals = tv + n, *rank = vals + n, *which = rank + n;
    memset(table, 0, slots * sizeof(uint32_t));
    size_t u = 0;
    int64_t max_id = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t id = ids[i];
        size_t h = slot_of(id, bits);
        for (;;) {
            uint32_t e = table[h];
            if (e == 0) {
                table[h] = (uint32_t)u + 1;
                first[u] = id;
                which[i] = (uint32_t)u++;
                max_id = id > max_id ? id : max_id;
                break;
            }
            if (first[e - 1] == id) {
                which[i] = e - 1;
                break;
            }
            h = (h + 1) & mask;
        }
    }
    for (size_t a = 0; a < u; a++)
        keys[a] = first[a], vals[a] = (uint32_t)a;
    dt_radix_sort_pairs(keys, vals, tk, tv, u, max_id);
    for (size_t r = 0; r < u; r++) {
        uniq_ids[r] = keys[r];
        rank[vals[r]] = (uint32_t)r;
    }
    for (size_t i = 0; i < n; i++)
        slot[i] = rank[which[i]];
    return u;
}

// slot, vals (n); grad_out (n, K); uniq_rows (n_uniq, K)
DT_MULTI_ISA
void dt_embedding_accumulate(const uint32_t *slot, const float *vals, size_t n, int K,
                             const float *grad_out, size_t n_uniq, int k_lo, int k_hi,
                             float *uniq_rows)
{
    for (size_t u = 0; u < n_uniq; u++)
        memset(uniq_rows + u * (size_t)K + k_lo, 0, (size_t)(k_hi - k_lo) * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float *row = uniq_rows + (size_t)slot[i] * (size_t)K;
        const float *g = grad_out + i * (size_t)K;
        float v = vals[i];
        for (int k = k_lo; k < k_hi; k++)
            row[k] += v * g[k];
    }
}
DT_MULTI_ISA_HIDE(dt_embedding_accumulate)

// slot (n); offsets (n_uniq + 1); places (n)
void dt_embedding_group(const uint32_t *slot, size_t n, size_t n_uniq, uint32_t *offsets,
                        uint32_t *places)
{
    memset(offsets, 0, (n_uniq + 1) * sizeof *offsets);
    for (size_t i = 0; i < n; i++)
        offsets[slot[i] + 1]++;
    for (size_t u = 0; u < n_uniq; u++)
        offsets[u + 1] += offsets[u];
    /* Placed in increasing i, so each group keeps the places' order; offsets[u] moves to the
     * group's end and is put back after. */
    for (size_t i = 0; i < n; i++)
        places[offsets[slot[i]]++] = (uint32_t)i;
    for (size_t u = n_uniq; u > 0; u--)
        offsets[u] = offsets[u - 1];
    offsets[0] = 0;
}

// offsets (n_uniq + 1), places (n); vals (n); grad_out (n, K); uniq_rows (n_uniq, K)
DT_MULTI_ISA
void dt_embedding_accumulate_grouped(const uint32_t *offsets, const uint32_t *places,
                                     const float *vals, int K, const float *grad_out,
                                     size_t u_lo, size_t u_hi, float *uniq_rows)
{
    uint32_t end = offsets[u_hi];
    for (size_t u = u_lo; u < u_hi; u++) {
        float *row = uniq_rows + u * (size_t)K;
        for (int k = 0; k < K; k++)
            row[k] = 0.0f;
        for (uint32_t a = offsets[u]; a < offsets[u + 1]; a++) {
            /* The places' gradient rows lie anywhere in the batch's (B x F x K) array. */
            if (a + PREFETCH_AHEAD < end)
                prefetch_row(grad_out, places[a + PREFETCH_AHEAD], K);
            uint32_t i = places[a];
            const float *g = grad_out + (size_t)i * (size_t)K;
            float v = vals[i];
            for (int k = 0; k < K; k++)
                row[k] += v * g[k];
        }
    }
}
DT_MULTI_ISA_HIDE(dt_embedding_accumulate_grouped)

// ids, vals (n); grad_out (n, K); scratch; slot (n); uniq_ids (n); uniq_rows (n, K)
size_t dt_embedding_backward(const int64_t *ids, const float *vals, size_t n, int K,
                             const float *grad_out, void *scratch, uint32_t *slot,
                             int64_t *uniq_ids, float *uniq_rows)
{
    size_t u = dt_embedding_dedupe(ids, n, scratch, uniq_ids, slot);
    dt_embedding_accumulate(slot, vals, n, K, grad_out, u, 0, K, uniq_rows);
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
