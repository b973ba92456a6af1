/* Sorting (key, value) pairs by key, for non-negative keys (internal to the library): a stable
 * LSD radix sort, linear in the pairs, where a comparison sort costs a log factor and a call per
 * comparison. The embedding's dedupe sorts a batch's unique ids with it, the AUC its scores'
 * order keys. */
#ifndef DTRAIN_CORE_RADIX_H
#define DTRAIN_CORE_RADIX_H

#include <stddef.h>
#include <stdint.h>

/* Sorts keys (n, each in [0, max_key]) with vals along, by 11-bit passes, as many as max_key
 * needs; tk and tv (n each) are the other buffers. The result is in keys and vals. */
void dt_radix_sort_pairs(int64_t *keys, uint32_t *vals, int64_t *tk, uint32_t *tv, size_t n,
                         int64_t max_key);

#endif
