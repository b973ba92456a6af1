/* Conv2D + ReLU + MaxPool2D fused into one pass, for the block that opens the MNIST-style CNNs:
 * a 3x3 kernel over a single input channel, stride 1, valid padding, followed by 2x2 max pooling
 * with stride 2 (TensorFlow's multi-worker tutorial model: Conv2D(32, 3, relu), MaxPool2D()).
 *
 * The unfused path writes the full conv output (26 x 26 x 32 floats per example, 5.5 MB per batch
 * of 64), reads it back for the ReLU and the pooling, and again in backward. Fused, each 2x2 window
 * of conv outputs lives in registers: the kernel writes only the pooled values and, for backward,
 * which window position held each maximum, as bit masks (half a byte per pooled element).
 * Measured against im2col + GEMM on the tutorial shapes: see bench/conv_bench.c.
 *
 * The kernels need AVX2 and FMA; dt_convpool_supported says whether this machine and these shapes
 * qualify. The composition of dt_conv2d_*_ref, dt_act_* and dt_maxpool_* is the reference. */
#ifndef DTRAIN_CONVPOOL_H
#define DTRAIN_CONVPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nn.h"
#include "dtrain/pool.h"

/* True when cg is 3x3, C = 1, stride 1, valid, OC a multiple of 8; pg is 2x2, stride 2, valid,
 * over cg's output; and the CPU has AVX2 and FMA. */
bool dt_convpool_supported(const dt_conv_geom *cg, const dt_pool_geom *pg);

/* 32-bit words of window masks for a batch: B * OH * OW * OC / 8 of pg. */
size_t dt_convpool_mask_words(const dt_pool_geom *pg, int B);

/* Floats of scratch that backward needs. */
size_t dt_convpool_scratch_elems(const dt_conv_geom *cg, int n_threads);

/* x (B, H, W, 1); w (3, 3, 1, OC); b (OC); y (B, OH, OW, OC) pooled, of pg;
 * mask (B, OH, OW, OC / 8): byte q of a word has bit l set when lane l's max sits at window
 * position q (row-major, first on ties); position 3 is implied by the others being clear. */
void dt_convpool_forward(dt_pool *pool, const dt_conv_geom *cg, const dt_pool_geom *pg, int B,
                         const float *x, const float *w, const float *b, float *y, uint32_t *mask);

/* x, y, mask as forward; dy (B, OH, OW, OC); dw (3, 3, 1, OC) +=; db (OC) +=. No input gradient:
 * this block only ever opens a network. */
void dt_convpool_backward(dt_pool *pool, const dt_conv_geom *cg, const dt_pool_geom *pg, int B,
                          const float *x, const float *y, const uint32_t *mask, const float *dy,
                          float *dw, float *db, float *scratch);

#endif
