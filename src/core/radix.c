/* Radix sort of (key, value) pairs (see radix.h). */
#include "radix.h"

void dt_radix_sort_pairs(int64_t *keys, uint32_t *vals, int64_t *tk, uint32_t *tv, size_t n,
                         int64_t max_key)
{
    int passes = 0;
    while (passes < 6 && (passes == 0 || (max_key >> (11 * passes)) != 0))
        passes++;
    for (int p = 0; p < passes; p++) {
        size_t count[2049] = {0};
        int shift = 11 * p;
        for (size_t i = 0; i < n; i++)
            count[((uint64_t)keys[i] >> shift & 2047) + 1]++;
        for (int d = 0; d < 2048; d++)
            count[d + 1] += count[d];
        for (size_t i = 0; i < n; i++) {
            size_t at = count[(uint64_t)keys[i] >> shift & 2047]++;
            tk[at] = keys[i], tv[at] = vals[i];
        }
        int64_t *k = keys;
        uint32_t *v = vals;
        keys = tk, vals = tv, tk = k, tv = v;
    }
    if (passes % 2) /* the result is in the other buffer */
        for (size_t i = 0; i < n; i++)
            tk[i] = keys[i], tv[i] = vals[i];
}
