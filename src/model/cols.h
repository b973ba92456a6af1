/* The columns front of a model (internal to src/model): a feature-spec model's tables, its
 * linear part, and the deep part's input, built from each batch's transformed rows
 * (model_spec.h's dt_columns_spec). The model runs the deep part's layers between
 * dt_cols_forward and dt_cols_logits, as it runs DeepFM's MLP around the CTR front. */
#ifndef DTRAIN_MODEL_COLS_H
#define DTRAIN_MODEL_COLS_H

#include "dtrain/arena.h"
#include "dtrain/keymap.h"
#include "dtrain/model.h"
#include "dtrain/model_spec.h"
#include "dtrain/pool.h"
#include "dtrain/rows.h"
#include "dtrain/table.h"

typedef struct dt_cols dt_cols;

/* Creates the tables and declares the cross layers' variables in params ("cross/layer_l/
 * kernel" or its factors "u" and "v", "cross/layer_l/bias", and for parallel layers
 * "cross/logits/kernel"). pool (may be NULL) runs the cross layers' products. */
dt_status dt_cols_create(const dt_columns_spec *spec, int max_batch, dt_arena *params,
                         dt_pool *pool, const dt_model_options *opts, dt_cols **out);
void dt_cols_destroy(dt_cols *c);

/* Embedding tables drawn from N(0, (1/sqrt(dim))^2) per row from (seed, row); linear tables 0. */
void dt_cols_init(dt_cols *c, uint64_t seed, dt_pool *pool);

/* The cross kernels (and the parallel output kernel), for Glorot initialisation: up to max
 * view indices into views; returns how many. */
int dt_cols_kernel_views(const dt_cols *c, int *views, int max);
/* The width of the layers' input (x0's, or x_L's: the same). */
int dt_cols_layers_width(const dt_cols *c);

/* Reads e's rows: checks every entry (as dt_cols_forward) and finds each table's unique ids
 * of the batch, which dt_cols_table_ids then gives (a parameter-server worker pulls those rows
 * before forward). The forward of the same e right after does not read it again. */
dt_status dt_cols_prepare(dt_cols *c, const dt_elem *e, bool training);
void dt_cols_table_ids(const dt_cols *c, int t, const int64_t **ids, size_t *n);
/* How table t starts: rows drawn from N(0, stddev^2) with seed + seed_offset (stddev 0: 0). */
void dt_cols_table_init(const dt_cols *c, int t, float *stddev, uint64_t *seed_offset);

/* Reads e's rows: checks every entry (a known slot, an id within its table, a finite weight;
 * DT_ERR_INVALID naming the example and slot otherwise), builds x0 and runs the cross layers
 * with params. Dynamic tables' keys are counted and admitted when training (cols_keys.h). */
dt_status dt_cols_forward(dt_cols *c, const dt_elem *e, const dt_arena *params, bool training);
/* The labels of the batch of the last forward (a regression head's targets). */
const float *dt_cols_labels(const dt_cols *c);
/* (B, width): the layers' input: x0, or x_L of stacked cross layers. */
const float *dt_cols_deep_input(const dt_cols *c);
/* logits (B, N) = the linear part + fm + the parallel cross output + deep (B, N: the layers'
 * output; NULL without layers). */
void dt_cols_logits(dt_cols *c, int B, const dt_arena *params, const float *deep,
                    float *logits);
/* From dlogits (B, N) and the layers' input gradient dlayers (B, width; NULL without layers):
 * the cross variables' gradients added into grads, and every table's sparse gradient.
 * dlayers is scratch: unless the cross layers are stacked, x0's whole gradient is summed into
 * it in place. */
void dt_cols_backward(dt_cols *c, int B, const dt_arena *params, dt_arena *grads,
                      const float *dlogits, float *dlayers);

int dt_cols_num_tables(const dt_cols *c);
dt_table *dt_cols_table(dt_cols *c, int i);
dt_sparse_rows *dt_cols_table_grad(dt_cols *c, int i);
/* Whether table i belongs to the linear part (which may take its own optimizer). */
bool dt_cols_table_linear(const dt_cols *c, int i);

/* Dynamic tables: table t's key map (NULL for a fixed table); an evaluation model's maps taken
 * from the model it shares variables with; after an update at step (eviction's page), and the
 * step of a restored checkpoint. */
dt_keymap *dt_cols_keymap(const dt_cols *c, int t);
/* Whether table t is dynamic; a parameter-server worker's (dt_model_options.keys_local): the key
 * of each row of the last batch, NULL for a fixed table; each of table t's unique ids' places
 * in the last batch (dt_cols_table_ids' order), to times. */
bool dt_cols_table_dynamic(const dt_cols *c, int t);
const int64_t *dt_cols_local_keys(const dt_cols *c, int t);
void dt_cols_table_counts(const dt_cols *c, int t, uint32_t *times);
void dt_cols_share_keys(dt_cols *c, const dt_cols *owner);
void dt_cols_tables_updated(dt_cols *c, int64_t step);
void dt_cols_set_step(dt_cols *c, int64_t step);

#endif
