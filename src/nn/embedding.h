/* Embedding lookups of CTR models: each example's F fields are (id, value) pairs; a field's
 * vector is the id's row of a (rows, K) table scaled by the value (the DeepFM sample's
 * embedding_lookup times feat_vals). The gradient is sparse: the unique ids a batch touched and,
 * for each, the sum of value x output gradient over the places it appeared, never a dense
 * gradient the size of the table. Kernels over flat arrays with a naive reference twin each,
 * allocating nothing: the caller gives the scratch. */
#ifndef DTRAIN_EMBEDDING_H
#define DTRAIN_EMBEDDING_H

#include <stddef.h>
#include <stdint.h>

/* ids, vals (n = B x F); table (rows, K); out (n, K): out[i] = table[ids[i]] x vals[i].
 * Every id must be in [0, rows): the layer checks its input before. */
void dt_embedding_forward(const float *table, int K, const int64_t *ids, const float *vals,
                          size_t n, float *out);
void dt_embedding_forward_naive(const float *table, int K, const int64_t *ids,
                                const float *vals, size_t n, float *out);

/* The unique ids of a batch's places: writes them in increasing order to uniq_ids (up to n) and,
 * for each place i, the index of its id there to slot[i]; returns their number. A hash table of
 * first appearances and a radix sort of the unique ids: O(n). scratch holds
 * dt_embedding_scratch_bytes(n) bytes. Ids must not be negative. */
size_t dt_embedding_scratch_bytes(size_t n);
size_t dt_embedding_dedupe(const int64_t *ids, size_t n, void *scratch, int64_t *uniq_ids,
                           uint32_t *slot);
/* Columns [k_lo, k_hi) of the unique ids' gradient rows (n_uniq, K): uniq_rows[u] = the sum, in
 * the order of the places, of vals[i] x grad_out[i] over the places i with slot[i] = u. Column
 * ranges are independent: threads may take one each. */
void dt_embedding_accumulate(const uint32_t *slot, const float *vals, size_t n, int K,
                             const float *grad_out, size_t n_uniq, int k_lo, int k_hi,
                             float *uniq_rows);

/* The places of each unique id, in order: places[offsets[u] .. offsets[u + 1]) are the places
 * i with slot[i] = u, increasing (a counting sort). offsets (n_uniq + 1), places (n). */
void dt_embedding_group(const uint32_t *slot, size_t n, size_t n_uniq, uint32_t *offsets,
                        uint32_t *places);
/* Rows [u_lo, u_hi) of the unique ids' gradient (n_uniq, K) from the grouped places: each row
 * the sum over its places, in order, of vals[i] x grad_out[i], as dt_embedding_accumulate
 * gives it, bit for bit. Row ranges are independent: threads may take one each. */
void dt_embedding_accumulate_grouped(const uint32_t *offsets, const uint32_t *places,
                                     const float *vals, int K, const float *grad_out,
                                     size_t u_lo, size_t u_hi, float *uniq_rows);

/* Both: the unique ids in increasing order and their gradient rows (n_unique, K), each summed
 * in the order of the places; slot (n) receives each place's row. Returns the number. */
size_t dt_embedding_backward(const int64_t *ids, const float *vals, size_t n, int K,
                             const float *grad_out, void *scratch, uint32_t *slot,
                             int64_t *uniq_ids, float *uniq_rows);
/* The same by a linear search of the ids seen so far, then sorted by id. */
size_t dt_embedding_backward_naive(const int64_t *ids, const float *vals, size_t n, int K,
                                   const float *grad_out, int64_t *uniq_ids, float *uniq_rows);

#endif
