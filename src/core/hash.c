/* Feature hashing (see include/dtrain/hash.h). */
#include "dtrain/hash.h"

static inline uint64_t load_le(const unsigned char *p, size_t n)
{
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++)
        w |= (uint64_t)p[i] << (8 * i);
    return w;
}

uint64_t dt_hash_bytes(uint64_t seed, const void *bytes, size_t n)
{
    const unsigned char *p = bytes;
    uint64_t h = dt_hash_mix(seed ^ (uint64_t)n * 0x9e3779b97f4a7c15ULL);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        h = dt_hash_mix(h ^ load_le(p + i, 8));
    if (i < n)
        h = dt_hash_mix(h ^ load_le(p + i, n - i) ^ (uint64_t)n << 56);
    return h;
}
