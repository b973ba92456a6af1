/* DCN-v2's cross layer (Wang et al. 2021; TF Recommenders' tfrs.layers.dcn.Cross), as a
 * forward/backward pair over flat arrays, beside naive reference twins the tests compare them
 * with:
 *     u = x W^T + b          (full rank, W (D, D))
 *     u = (x V^T) U^T + b    (low rank R: U (D, R), V (R, D); t = x V^T kept)
 *     y = x0 * u + x
 * x0 is the first layer's input, x this layer's. Internal to the library: the columns front
 * (src/model/cols.c) runs them. */
#ifndef DTRAIN_NN_CROSS_H
#define DTRAIN_NN_CROSS_H

#include "dtrain/pool.h"

/* x0, x, y, u (B, D); t (B, R) when R > 0. W used when R == 0, U and V when R > 0. */
void dt_cross_forward(dt_pool *pool, int B, int D, int R, const float *x0, const float *x,
                      const float *W, const float *U, const float *V, const float *b, float *t,
                      float *u, float *y);
/* From dy (B, D): dx0 (B, D) += dy * u; dx (B, D) = dy + du W (or + (du U) V), du = dy * x0;
 * dW (D, D) += du^T x (or dU (D, R) += du^T t, dV (R, D) += (du U)^T x); db (D) += sum du.
 * du (B, D) and dt (B, R) are scratch. */
void dt_cross_backward(dt_pool *pool, int B, int D, int R, const float *x0, const float *x,
                       const float *W, const float *U, const float *V, const float *t,
                       const float *u, const float *dy, float *dx0, float *dx, float *dW,
                       float *dU, float *dV, float *db, float *du, float *dt);

void dt_cross_forward_naive(int B, int D, int R, const float *x0, const float *x, const float *W,
                            const float *U, const float *V, const float *b, float *t, float *u,
                            float *y);
void dt_cross_backward_naive(int B, int D, int R, const float *x0, const float *x,
                             const float *W, const float *U, const float *V, const float *t,
                             const float *u, const float *dy, float *dx0, float *dx, float *dW,
                             float *dU, float *dV, float *db);

#endif
