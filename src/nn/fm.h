/* The factorization machine's pairwise term over one example's F field vectors e_f (K each,
 * already scaled by the fields' values):
 *
 *   y = 1/2 sum_k ((sum_f e_fk)^2 - sum_f e_fk^2)  =  sum_{f < g} <e_f, e_g>
 *
 * in O(F K) rather than O(F^2 K), and its gradient dy/de_fk = s_k - e_fk with s_k = sum_f e_fk.
 * Kernels over flat arrays with a naive reference twin each (the pairwise sum itself; for the
 * lookups' fused pass, the lookups then dt_fm_forward). */
#ifndef DTRAIN_FM_H
#define DTRAIN_FM_H

#include <stdint.h>

/* The largest K the fast kernels take. */
#define DT_FM_MAX_K 1024

// emb (B, F, K); sums (B, K) out; y (B) out; K <= DT_FM_MAX_K
void dt_fm_forward(int B, int F, int K, const float *emb, float *sums, float *y);
// emb (B, F, K); y (B) out: the sum over pairs of fields of their dot products, in double
void dt_fm_forward_naive(int B, int F, int K, const float *emb, float *y);

/* A CTR batch's lookups and FM term in one pass over its fields: lin = w[id] x (the first-order
 * terms) and emb = v[id] x, as dt_embedding_forward of each table, with sums and y as
 * dt_fm_forward of emb, bit for bit. The FM reads each field vector from registers as it is
 * made, not back from emb: a batch's emb (5 MB in DeepFM) is written to lines that are rarely
 * still in cache, and reading them back waits for them to arrive.
 * w (rows, 1); v (rows, K); ids, vals (B, F); lin (B, F) out; emb (B, F, K) out; sums (B, K)
 * out; y (B) out; K <= DT_FM_MAX_K */
void dt_fm_forward_lookup(const float *w, const float *v, int B, int F, int K, const int64_t *ids,
                          const float *vals, float *lin, float *emb, float *sums, float *y);

// emb (B, F, K); sums (B, K) from the forward; dy (B); demb (B, F, K): demb += dy (s - e)
void dt_fm_backward(int B, int F, int K, const float *emb, const float *sums, const float *dy,
                    float *demb);
// The same from the pairwise form: demb_fk += dy sum_{g != f} e_gk.
void dt_fm_backward_naive(int B, int F, int K, const float *emb, const float *dy, float *demb);

#endif
