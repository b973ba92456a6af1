/* The factorization machine's pairwise term over one example's F field vectors e_f (K each,
 * already scaled by the fields' values):
 *
 *   y = 1/2 sum_k ((sum_f e_fk)^2 - sum_f e_fk^2)  =  sum_{f < g} <e_f, e_g>
 *
 * in O(F K) rather than O(F^2 K), and its gradient dy/de_fk = s_k - e_fk with s_k = sum_f e_fk.
 * Kernels over flat arrays with a naive reference twin each (the pairwise sum itself). */
#ifndef DTRAIN_FM_H
#define DTRAIN_FM_H

/* The largest K the fast kernels take. */
#define DT_FM_MAX_K 1024

// emb (B, F, K); sums (B, K) out; y (B) out; K <= DT_FM_MAX_K
void dt_fm_forward(int B, int F, int K, const float *emb, float *sums, float *y);
// emb (B, F, K); y (B) out: the sum over pairs of fields of their dot products, in double
void dt_fm_forward_naive(int B, int F, int K, const float *emb, float *y);

// emb (B, F, K); sums (B, K) from the forward; dy (B); demb (B, F, K): demb += dy (s - e)
void dt_fm_backward(int B, int F, int K, const float *emb, const float *sums, const float *dy,
                    float *demb);
// The same from the pairwise form: demb_fk += dy sum_{g != f} e_gk.
void dt_fm_backward_naive(int B, int F, int K, const float *emb, const float *dy, float *demb);

#endif
