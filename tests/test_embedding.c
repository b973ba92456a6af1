/* Embedding lookups: the forward equals its reference bit for bit; the sparse gradient has the
 * reference's unique ids and rows, bit for bit (both sum each id's places in order), and equals
 * the dense gradient a table-sized array would hold. */
#include <stdlib.h>
#include <string.h>

#include "../src/nn/embedding.h"
#include "dtrain/rng.h"
#include "test.h"

static float uniform(dt_rng *r) { return (float)dt_rng_below(r, 2001) / 1000.0f - 1.0f; }

TEST(embedding_forward_and_sparse_backward_match_the_references)
{
    dt_rng r;
    dt_rng_seed(&r, 5);
    enum { ROWS = 97, K = 8, B = 64, F = 13, N = B * F };
    float *table = malloc(sizeof(float) * ROWS * K), *vals = malloc(sizeof(float) * N);
    float *out = malloc(sizeof(float) * N * K), *ref = malloc(sizeof(float) * N * K);
    float *grad = malloc(sizeof(float) * N * K), *rows = malloc(sizeof(float) * N * K);
    float *rows_ref = malloc(sizeof(float) * N * K), *dense = calloc(ROWS * K, sizeof(float));
    int64_t *ids = malloc(sizeof(int64_t) * N), *uniq = malloc(sizeof(int64_t) * N);
    int64_t *uniq_ref = malloc(sizeof(int64_t) * N);
    uint32_t *slot = malloc(sizeof(uint32_t) * N);
    void *scratch = malloc(dt_embedding_scratch_bytes(N));
    for (int i = 0; i < ROWS * K; i++)
        table[i] = uniform(&r);
    for (int i = 0; i < N; i++) {
        /* Skewed: small ids come often, so ids repeat within the batch. */
        ids[i] = (int64_t)(dt_rng_below(&r, ROWS) * dt_rng_below(&r, ROWS) / ROWS);
        vals[i] = uniform(&r);
    }
    for (int i = 0; i < N * K; i++)
        grad[i] = uniform(&r);
    dt_embedding_forward(table, K, ids, vals, N, out);
    dt_embedding_forward_naive(table, K, ids, vals, N, ref);
    CHECK(memcmp(out, ref, sizeof(float) * N * K) == 0);
    size_t u = dt_embedding_backward(ids, vals, N, K, grad, scratch, slot, uniq, rows);
    size_t u_ref = dt_embedding_backward_naive(ids, vals, N, K, grad, uniq_ref, rows_ref);
    CHECK_MSG(u == u_ref && u < (size_t)N, "%zu and %zu unique ids of %d", u, u_ref, N);
    CHECK(memcmp(uniq, uniq_ref, u * sizeof *uniq) == 0);
    CHECK(memcmp(rows, rows_ref, u * K * sizeof *rows) == 0);
    for (size_t a = 1; a < u; a++)
        CHECK(uniq[a - 1] < uniq[a]);
    /* The dense gradient of the table, scattered place by place, holds the same rows. */
    for (int i = 0; i < N; i++)
        for (int k = 0; k < K; k++)
            dense[ids[i] * K + k] += vals[i] * grad[i * K + k];
    for (size_t a = 0; a < u; a++)
        CHECK(memcmp(dense + uniq[a] * K, rows + a * K, K * sizeof *rows) == 0);
    free(table), free(vals), free(out), free(ref), free(grad), free(rows), free(rows_ref);
    free(dense), free(ids), free(uniq), free(uniq_ref), free(slot), free(scratch);
}

/* Ids across many radix digits (up to 2^46) deduplicate to the reference's sorted set, each
 * place's slot names its id, and gradient columns taken in two ranges (two threads' shares)
 * equal the whole. */
TEST(embedding_dedupe_of_large_ids_and_column_ranges)
{
    enum { N = 5000, K = 6 };
    dt_rng r;
    dt_rng_seed(&r, 9);
    int64_t *ids = malloc(sizeof(int64_t) * N), *uniq = malloc(sizeof(int64_t) * N);
    int64_t *uniq_ref = malloc(sizeof(int64_t) * N);
    uint32_t *slot = malloc(sizeof(uint32_t) * N);
    float *vals = malloc(sizeof(float) * N), *grad = malloc(sizeof(float) * N * K);
    float *whole = malloc(sizeof(float) * N * K), *split = malloc(sizeof(float) * N * K);
    float *ref = malloc(sizeof(float) * N * K);
    void *scratch = malloc(dt_embedding_scratch_bytes(N));
    for (int i = 0; i < N; i++) {
        ids[i] = i % 7 == 0 ? (int64_t)1 << 46 : (int64_t)(dt_rng_next(&r) >> 20) % 3000 * 977;
        vals[i] = uniform(&r);
    }
    for (int i = 0; i < N * K; i++)
        grad[i] = uniform(&r);
    size_t u = dt_embedding_dedupe(ids, N, scratch, uniq, slot);
    size_t u_ref = dt_embedding_backward_naive(ids, vals, N, K, grad, uniq_ref, ref);
    CHECK(u == u_ref && memcmp(uniq, uniq_ref, u * sizeof *uniq) == 0);
    for (int i = 0; i < N; i++)
        CHECK(slot[i] < u && uniq[slot[i]] == ids[i]);
    dt_embedding_accumulate(slot, vals, N, K, grad, u, 0, K, whole);
    dt_embedding_accumulate(slot, vals, N, K, grad, u, 0, 2, split);
    dt_embedding_accumulate(slot, vals, N, K, grad, u, 2, K, split);
    CHECK(memcmp(whole, ref, u * K * sizeof *whole) == 0);
    CHECK(memcmp(split, whole, u * K * sizeof *whole) == 0);
    free(ids), free(uniq), free(uniq_ref), free(slot), free(vals), free(grad), free(whole);
    free(split), free(ref), free(scratch);
}

/* Places grouped by unique id and accumulated by row ranges equal the place-order sums. */
TEST(embedding_grouped_accumulation_equals_place_order)
{
    enum { N = 3000, K = 5 };
    dt_rng r;
    dt_rng_seed(&r, 17);
    int64_t *ids = malloc(sizeof(int64_t) * N), *uniq = malloc(sizeof(int64_t) * N);
    uint32_t *slot = malloc(sizeof(uint32_t) * N), *offsets = malloc(sizeof(uint32_t) * (N + 1));
    uint32_t *places = malloc(sizeof(uint32_t) * N);
    float *vals = malloc(sizeof(float) * N), *grad = malloc(sizeof(float) * N * K);
    float *a = malloc(sizeof(float) * N * K), *b = malloc(sizeof(float) * N * K);
    void *scratch = malloc(dt_embedding_scratch_bytes(N));
    for (int i = 0; i < N; i++) {
        ids[i] = (int64_t)(dt_rng_below(&r, 400) * dt_rng_below(&r, 400) / 400);
        vals[i] = uniform(&r);
    }
    for (int i = 0; i < N * K; i++)
        grad[i] = uniform(&r);
    size_t u = dt_embedding_dedupe(ids, N, scratch, uniq, slot);
    dt_embedding_accumulate(slot, vals, N, K, grad, u, 0, K, a);
    dt_embedding_group(slot, N, u, offsets, places);
    CHECK(offsets[0] == 0 && offsets[u] == N);
    dt_embedding_accumulate_grouped(offsets, places, vals, K, grad, 0, u / 3, b);
    dt_embedding_accumulate_grouped(offsets, places, vals, K, grad, u / 3, u, b);
    CHECK(memcmp(a, b, u * K * sizeof *a) == 0);
    free(ids), free(uniq), free(slot), free(offsets), free(places), free(vals), free(grad);
    free(a), free(b), free(scratch);
}
