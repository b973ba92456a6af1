/* tf.data's shuffle buffer, the one algorithm behind both the shuffle dataset (dataset.c) and
 * the image pipeline's shuffle of indices (image_pipeline.c), so the two give the same order for
 * the same seed (internal to src/data).
 *
 * The buffer holds up to a capacity of elements; each output is a uniform pick among those held,
 * and the input's next element takes the picked one's slot, or, once the input has ended, the
 * last slot moves there. Each iteration draws from its own stream, derived from the seed and the
 * iteration ("SHUFF"), or from iteration 0's every time when it does not reshuffle. Slots are
 * slot_bytes each: pointers for datasets, uint32 indices for images. */
#ifndef DTRAIN_DATA_SHUFFLE_H
#define DTRAIN_DATA_SHUFFLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dtrain/rng.h"

typedef struct {
    void *slots;       /* count elements of slot_bytes held */
    size_t slot_bytes;
    int64_t count;
    dt_rng rng;
} dt_shuffle_buf;

/* The random stream of an iteration. */
static inline void dt_shuffle_seed(dt_shuffle_buf *b, uint64_t seed, int64_t iteration)
{
    dt_rng_derive(&b->rng, seed, 0x5348554646ull /* "SHUFF" */, (uint64_t)iteration);
}

/* Copies a uniformly picked element into out (count > 0); next, the input's next element, takes
 * its slot, or with next NULL (the input ended) the last slot moves there. */
static inline void dt_shuffle_take(dt_shuffle_buf *b, void *out, const void *next)
{
    int64_t j = (int64_t)dt_rng_below(&b->rng, (uint64_t)b->count);
    uint8_t *slot = (uint8_t *)b->slots + (size_t)j * b->slot_bytes;
    memcpy(out, slot, b->slot_bytes);
    const void *from = next;
    if (!from)
        from = (uint8_t *)b->slots + (size_t)--b->count * b->slot_bytes;
    memmove(slot, from, b->slot_bytes);
}

#endif
