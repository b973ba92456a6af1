/* Feature hashing: raw categorical values (the bytes of a token as the file holds it) to table
 * rows without a vocabulary pass, as TensorFlow's categorical_column_with_hash_bucket does.
 * TensorFlow takes Fingerprint64 (FarmHash) of the value; dtrain takes its own well-mixed 64-bit
 * hash, below, so bucket numbers differ from TensorFlow's while their statistics are the same.
 * The hash is fixed: data hashed by one version of dtrain lands in the same buckets in every
 * other, and on every platform (bytes are read little-endian).
 *
 *   h = mix(seed ^ n * 0x9e3779b97f4a7c15); for each 8-byte word w: h = mix(h ^ w);
 *   a last partial word is zero-padded and h = mix(h ^ w ^ n << 56)
 * with mix the SplitMix64 finaliser. The seed is the field's position, so one value in two
 * fields falls in different buckets of a shared table. */
#ifndef DTRAIN_HASH_H
#define DTRAIN_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"

DT_API uint64_t dt_hash_bytes(uint64_t seed, const void *bytes, size_t n);

/* The SplitMix64 finaliser. */
static inline uint64_t dt_hash_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* dt_hash_bytes of n words as their 8 n little-endian bytes, for keys made of integers: inline,
 * so that a loop over many keys runs their multiplications side by side. */
static inline uint64_t dt_hash_words(uint64_t seed, const uint64_t *words, size_t n)
{
    uint64_t h = dt_hash_mix(seed ^ (uint64_t)(8 * n) * 0x9e3779b97f4a7c15ULL);
    for (size_t i = 0; i < n; i++)
        h = dt_hash_mix(h ^ words[i]);
    return h;
}

/* The bucket of a field's raw value among `buckets`. */
static inline int64_t dt_hash_bucket(int field, const void *bytes, size_t n, int64_t buckets)
{
    return (int64_t)(dt_hash_bytes((uint64_t)field, bytes, n) % (uint64_t)buckets);
}

#endif
