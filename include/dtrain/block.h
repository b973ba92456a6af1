/* Splitting n items into contiguous blocks, as evenly as whole items allow: what a rank's share
 * of a buffer, a worker's share of a batch and a thread's share of a loop all are. */
#ifndef DTRAIN_BLOCK_H
#define DTRAIN_BLOCK_H

#include <stddef.h>

/* Block r of n items split over parts: [*off, *off + *len); the first n % parts blocks hold one
 * item more. */
static inline void dt_block(size_t n, int parts, int r, size_t *off, size_t *len)
{
    size_t base = n / (size_t)parts, extra = n % (size_t)parts, ur = (size_t)r;
    *len = base + (ur < extra ? 1 : 0);
    *off = ur * base + (ur < extra ? ur : extra);
}

#endif
