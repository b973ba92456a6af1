/* xoshiro256** seeded by splitmix64 (see include/dtrain/rng.h). */
#include "dtrain/rng.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void dt_rng_seed(dt_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t next(uint64_t *s)
{
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

static inline float uniform_of(uint64_t x) { return (float)(x >> 40) * (1.0f / 16777216.0f); }

uint64_t dt_rng_next(dt_rng *r) { return next(r->s); }

float dt_rng_uniform(dt_rng *r) { return uniform_of(next(r->s)); }

uint64_t dt_rng_below(dt_rng *r, uint64_t n)
{
    /* Reject the top partial block so every residue is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = dt_rng_next(r);
    while (x >= limit);
    return x % n;
}

void dt_rng_shuffle_u32(dt_rng *r, uint32_t *idx, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)dt_rng_below(r, i);
        uint32_t t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}

void dt_rng_derive(dt_rng *r, uint64_t seed, uint64_t key1, uint64_t key2)
{
    uint64_t x = seed;
    uint64_t a = splitmix64(&x) ^ key1;
    uint64_t b = splitmix64(&a) ^ key2;
    dt_rng_seed(r, splitmix64(&b));
}
