/* The AVX2 + FMA kernels behind convpool.h, compiled with -mavx2 -mfma. Each
 * handles examples [n_begin, n_end). */
#ifndef DTRAIN_CONVPOOL_AVX2_H
#define DTRAIN_CONVPOOL_AVX2_H

#include <stdint.h>

/* x (B, H, W, 1); w (3, 3, 1, OC); b (OC); y (B, PH, PW, OC); mask (B, PH, PW, OC / 8) */
void dt_convpool_forward_avx2(long n_begin, long n_end, int H, int W, int PH, int PW, int OC,
                              const float *x, const float *w, const float *b, float *y,
                              uint32_t *mask);

/* dw_part (3, 3, 1, OC) and db_part (OC) are written (=), not accumulated. */
void dt_convpool_backward_avx2(long n_begin, long n_end, int H, int W, int PH, int PW, int OC,
                               const float *x, const float *y, const uint32_t *mask,
                               const float *dy, float *dw_part, float *db_part);

#endif
