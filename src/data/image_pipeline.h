/* The input pipeline of in-memory images (IDX, Fashion-MNIST): range(0, n) -> shuffle(buffer,
 * seed, reshuffle_each_iteration=True) -> batch -> the images of each batch, scaled to [0, 1] as
 * the tutorial's x / 255, with their labels -> prefetch, as one stage over an array of indices
 * (the same batches as those datasets chained). Shuffling indices rather than images keeps the
 * shuffle buffer small. */
#ifndef DTRAIN_IMAGE_PIPELINE_H
#define DTRAIN_IMAGE_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/dataset.h"
#include "dtrain/idx.h"

/* The image pipeline of dt_fit: batches of images scaled to [0, 1] with their labels. A shuffle
 * buffer of 0 or 1 keeps file order; prefetch 0 adds no background thread. */
dt_status dt_image_pipeline(const dt_image_dataset *ds, int batch_size, bool drop_remainder,
                            int64_t shuffle_buffer, uint64_t seed, int prefetch, dt_dataset **out);

/* The same pipeline for one of n_workers workers: every worker shuffles and batches the same way
 * (the same seed), with global batches of batch_size, and gathers only its own block of each
 * batch's rows (dt_comm_block's split: equal blocks, the first ones a row larger). So the workers'
 * batches together are exactly the single-worker batch of the same step, which is what makes
 * k workers equal one worker at the same global batch. A short last batch can leave a worker an
 * empty block; it still takes the step. */
dt_status dt_image_pipeline_sharded(const dt_image_dataset *ds, int batch_size,
                                    bool drop_remainder, int64_t shuffle_buffer, uint64_t seed,
                                    int prefetch, int n_workers, int worker, dt_dataset **out);

/* Scales images[idx[i]] (uint8) into x (B, H, W, C) float as v / 255, and gathers labels. */
void dt_gather_batch(const dt_image_dataset *ds, const uint32_t *idx, int B, float *x,
                     int32_t *labels);

#endif
