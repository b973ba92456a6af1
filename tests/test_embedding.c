/* Embedding lookups: the forward equals its reference bit for bit; the sparse gradient has the
 * reference's unique ids and rows, bit for bit (both sum each id's places in order), and equals
 * the dense gradient a table-sized array would hold. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/embedding.h"
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
    uint32_t *order = malloc(sizeof(uint32_t) * N);
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
    size_t u = dt_embedding_backward(ids, vals, N, K, grad, order, uniq, rows);
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
    free(dense), free(ids), free(uniq), free(uniq_ref), free(order);
}
