/* Layer kernels as forward/backward pairs over flat float arrays, NHWC.
 *
 * Each kernel starts with a shape comment. Backward kernels accumulate (+=) into parameter
 * gradients, so several micro-batches or replicas can add into one gradient arena, and write
 * (=) the gradient with respect to their input, which lands in a scratch activation buffer.
 * Kernels never allocate, log or do I/O: buffers and scratch come from the caller.
 * Every fast kernel has a naive reference (_naive) that the tests compare it with. Private to
 * the library: the models call them, and the tests and benchmarks link the static archive. */
#ifndef DTRAIN_NN_H
#define DTRAIN_NN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/model_spec.h"
#include "dtrain/pool.h"
#include "dtrain/rng.h"

/* dt_activation, the layers' activations, is the model spec's (dtrain/model_spec.h). */

/* ---- Dense: y = x . w + b ---- */

/* x (B, IN); w (IN, OUT); b (OUT); y (B, OUT) */
void dt_dense_forward(dt_pool *pool, int B, int IN, int OUT, const float *x, const float *w,
                      const float *b, float *y);
/* x (B, IN); w (IN, OUT); dy (B, OUT); dw (IN, OUT) +=; db (OUT) +=; dx (B, IN) = (NULL: skip) */
void dt_dense_backward(dt_pool *pool, int B, int IN, int OUT, const float *x, const float *w,
                       const float *dy, float *dw, float *db, float *dx);
/* The same backward when much of dy is zero (after ReLU and dropout): dy listed by rows and by
 * columns, and the two products summed over its non-zeros alone (src/nn/dense_sparse.h). Where
 * over a third of dy is non-zero, or the layer has fewer than 256 inputs, or dtrain's own AVX-512
 * matrix multiply is not the one in use, it computes what dt_dense_backward does. The bias
 * gradient has dt_dense_backward's bits; dw and dx differ from the dense products' in the last
 * bits (another order of sums) but not with the number of threads.
 * scratch: dt_dense_sparse_scratch_elems(B, IN, OUT, dt_pool_size(pool)) floats, 64-byte
 * aligned; NULL runs dt_dense_backward. */
void dt_dense_backward_sparse(dt_pool *pool, int B, int IN, int OUT, const float *x,
                              const float *w, const float *dy, float *dw, float *db, float *dx,
                              float *scratch);
/* 0 for a layer the listed backward never runs. */
size_t dt_dense_sparse_scratch_elems(int B, int IN, int OUT, int n_threads);
void dt_dense_forward_naive(int B, int IN, int OUT, const float *x, const float *w, const float *b,
                          float *y);
void dt_dense_backward_naive(int B, int IN, int OUT, const float *x, const float *w, const float *dy,
                           float *dw, float *db, float *dx);

/* ---- Element-wise activations, in place; backward uses the forward output y ---- */

/* y (n) = act(y) */
void dt_act_forward(dt_activation act, size_t n, float *y);
/* y (n) the forward output; dy (n) *= act'(y) */
void dt_act_backward(dt_activation act, size_t n, const float *y, float *dy);
/* The same over a pool in slices of whole cache lines: the values do not depend on the split. */
void dt_act_forward_pool(dt_pool *pool, dt_activation act, size_t n, float *y);
void dt_act_backward_pool(dt_pool *pool, dt_activation act, size_t n, const float *y, float *dy);

/* ---- Conv2D, NHWC, weights (KH, KW, C, OC) as Keras stores them ---- */

typedef struct {
    int H, W, C;       /* input */
    int KH, KW, OC;    /* kernel */
    int SH, SW;        /* strides */
    int pad_top, pad_left;
    int OH, OW;        /* output */
} dt_conv_geom;

/* TensorFlow's rules: valid gives OH = (H - KH) / SH + 1; same gives OH = ceil(H / SH) with the
 * padding split as evenly as possible, the extra row at the bottom. False if the output is empty. */
bool dt_conv_geom_init(dt_conv_geom *g, int H, int W, int C, int KH, int KW, int OC, int SH, int SW,
                       bool same);

/* x (B, H, W, C); w (KH, KW, C, OC); b (OC); y (B, OH, OW, OC) */
void dt_conv2d_forward_naive(const dt_conv_geom *g, int B, const float *x, const float *w,
                           const float *b, float *y);
/* dy (B, OH, OW, OC); dw (KH, KW, C, OC) +=; db (OC) +=; dx (B, H, W, C) = (NULL: skip) */
void dt_conv2d_backward_naive(const dt_conv_geom *g, int B, const float *x, const float *w,
                            const float *dy, float *dw, float *db, float *dx);

/* The same by im2col + GEMM, examples split over the pool. scratch holds
 * dt_conv2d_scratch_elems(g, pool size) floats. */
size_t dt_conv2d_scratch_elems(const dt_conv_geom *g, int n_threads);
void dt_conv2d_forward(dt_pool *pool, const dt_conv_geom *g, int B, const float *x, const float *w,
                       const float *b, float *y, float *scratch);
void dt_conv2d_backward(dt_pool *pool, const dt_conv_geom *g, int B, const float *x,
                        const float *w, const float *dy, float *dw, float *db, float *dx,
                        float *scratch);

/* ---- MaxPool2D, NHWC ---- */

typedef struct {
    int H, W, C;
    int PH, PW;     /* window */
    int SH, SW;     /* strides */
    int pad_top, pad_left;
    int OH, OW;
} dt_pool_geom;

bool dt_pool_geom_init(dt_pool_geom *g, int H, int W, int C, int PH, int PW, int SH, int SW,
                       bool same);

/* x (B, H, W, C); y (B, OH, OW, C); arg (B, OH, OW, C): index of the max within its example's
 * (H, W, C) block, the first in row-major window order on ties; padding never wins. */
void dt_maxpool_forward(const dt_pool_geom *g, int B, const float *x, float *y, int32_t *arg);
/* dy (B, OH, OW, C); arg as above; dx (B, H, W, C) = the gradient routed to each max */
void dt_maxpool_backward(const dt_pool_geom *g, int B, const float *dy, const int32_t *arg,
                         float *dx);

/* ---- Dropout (Keras): keep with probability 1 - rate, scale kept values by 1 / (1 - rate) ---- */

/* x (n); mask (n) = 0 or 1 / (1 - rate); y (n) = x mask (y may be x). Each dt_rng_next of rng
 * decides four values in turn, by its 16-bit quarters from the low end: value kept when
 * quarter / 2^16 < 1 - rate. */
void dt_dropout_forward(size_t n, float rate, dt_rng *rng, const float *x, float *y, float *mask);
/* mask (n); dy (n) *= mask */
void dt_dropout_backward(size_t n, const float *mask, float *dy);

/* Values per dropout chunk: chunk c (values [c x DT_DROPOUT_CHUNK, ...)) draws its mask from its
 * own stream, dt_rng_derive(seed, key1, key2 + (c << 16)), so the chunks can be drawn on any
 * threads and the mask depends on the keys alone (chunk 0 is the stream dt_dropout_forward would
 * be given). key2 < 2^16 keeps the chunks' streams apart from other keys'. */
#define DT_DROPOUT_CHUNK 16384
void dt_dropout_forward_pool(dt_pool *pool, size_t n, float rate, uint64_t seed, uint64_t key1,
                             uint64_t key2, const float *x, float *y, float *mask);
void dt_dropout_backward_pool(dt_pool *pool, size_t n, const float *mask, float *dy);
/* A dense layer's activation and the dropout after it in one pass over the pool, bit for bit
 * dt_act_forward_pool(y) then dt_dropout_forward_pool(y -> out): y (n) activated in place, out
 * and mask (n) as dropout writes them. */
void dt_act_dropout_forward_pool(dt_pool *pool, dt_activation act, size_t n, float rate,
                                 uint64_t seed, uint64_t key1, uint64_t key2, float *y,
                                 float *out, float *mask);
/* Their backward in one pass, bit for bit dt_dropout_backward_pool then dt_act_backward_pool:
 * dy (n) *= mask, then the activation's derivative at its output y (n). */
void dt_dropout_act_backward_pool(dt_pool *pool, dt_activation act, size_t n, const float *mask,
                                  const float *y, float *dy);

/* Batch normalisation of B examples' C features (Keras's BatchNormalization, axis -1).
 * Training: each feature normalised by the batch's mean and (biased) variance,
 *   xhat = (x - mean) / sqrt(var + eps), y = gamma xhat + beta,
 * and the moving averages updated, moving = momentum moving + (1 - momentum) batch statistic.
 * Inference: the moving averages in place of the batch's. Statistics are summed in double. */
// x, y, xhat (B, C); gamma, beta, moving_mean, moving_var, istd (C)
void dt_batchnorm_forward_train(int B, int C, const float *x, const float *gamma,
                                const float *beta, float eps, float momentum, float *moving_mean,
                                float *moving_var, float *y, float *xhat, float *istd);
void dt_batchnorm_forward_infer(int B, int C, const float *x, const float *gamma,
                                const float *beta, float eps, const float *moving_mean,
                                const float *moving_var, float *y);
/* From dy (B, C) and the training forward's xhat and istd: dgamma += sum dy xhat, dbeta +=
 * sum dy, and dx = gamma istd / B (B dy - sum dy - xhat sum dy xhat) unless dx is NULL. */
void dt_batchnorm_backward(int B, int C, const float *dy, const float *xhat, const float *istd,
                           const float *gamma, float *dgamma, float *dbeta, float *dx);

/* ---- Losses. Forward writes one loss per example; backward writes the gradient scaled by
 * `scale` (1/B for a batch mean, 1/global_batch for the distributed sum) ---- */

/* logits (B, K); labels (B) in [0, K); prob (B, K) = softmax, kept for backward; loss (B) */
void dt_softmax_xent_forward(int B, int K, const float *logits, const int32_t *labels, float *prob,
                             float *loss);
/* prob (B, K); labels (B); dlogits (B, K) = scale * (prob - onehot) */
void dt_softmax_xent_backward(int B, int K, const float *prob, const int32_t *labels, float scale,
                              float *dlogits);
/* logits (B, K); targets (B, K) in [0, 1]; loss (B) = mean over K of the binary cross-entropy */
void dt_bce_logits_forward(int B, int K, const float *logits, const float *targets, float *loss);
/* dlogits (B, K) = scale * (sigmoid(logits) - targets) / K */
void dt_bce_logits_backward(int B, int K, const float *logits, const float *targets, float scale,
                            float *dlogits);
/* pred (B, K); targets (B, K); loss (B) = mean over K of (pred - target)^2 */
void dt_mse_forward(int B, int K, const float *pred, const float *targets, float *loss);
/* dpred (B, K) = scale * 2 (pred - targets) / K */
void dt_mse_backward(int B, int K, const float *pred, const float *targets, float scale,
                     float *dpred);

#endif
