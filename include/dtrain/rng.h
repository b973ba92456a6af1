/* A seeded pseudo-random generator (xoshiro256**, seeded through splitmix64).
 *
 * Everything random in dtrain (initial weights, shuffling, dropout masks) draws from one of these,
 * so the same seed gives the same run. The state is four words and can be saved and restored. */
#ifndef DTRAIN_RNG_H
#define DTRAIN_RNG_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"

typedef struct {
    uint64_t s[4];
} dt_rng;

DT_API void dt_rng_seed(dt_rng *r, uint64_t seed);

DT_API uint64_t dt_rng_next(dt_rng *r);

/* Uniform in [0, 1) with 24 random bits: every value is an exact float. */
DT_API float dt_rng_uniform(dt_rng *r);

/* Uniform integer in [0, n), without modulo bias; n > 0. */
DT_API uint64_t dt_rng_below(dt_rng *r, uint64_t n);

/* Fisher-Yates shuffle of idx[0..n). */
DT_API void dt_rng_shuffle_u32(dt_rng *r, uint32_t *idx, size_t n);

/* An independent stream for a purpose (e.g. dropout at a given step), derived from a seed and
 * keys without disturbing any other stream. */
DT_API void dt_rng_derive(dt_rng *r, uint64_t seed, uint64_t key1, uint64_t key2);

#endif
