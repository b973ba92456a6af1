/* AVX2 versions of the optimizer updates (see include/dtrain/optim.h), compiled with -mavx2.
 * They use the same operations in the same order as the scalar loops, with no fused multiply-add,
 * so their results are bit-identical to the scalar ones. Each handles [lo, hi); lo and hi are
 * multiples of 8 except a final hi, whose tail runs scalar. */
#ifndef DTRAIN_OPTIM_AVX2_H
#define DTRAIN_OPTIM_AVX2_H

#include <stddef.h>

void dt_adam_avx2(float *p, const float *g, float *m, float *v, size_t lo, size_t hi, float b1,
                  float b2, float eps, float lr_t);
void dt_momentum_avx2(float *p, const float *g, float *vel, size_t lo, size_t hi, float mu,
                      float lr, int nesterov);
void dt_adagrad_avx2(float *p, const float *g, float *acc, size_t lo, size_t hi, float lr,
                     float eps);
void dt_sgd_avx2(float *p, const float *g, size_t lo, size_t hi, float lr);

#endif
