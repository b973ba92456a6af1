/* The CTR front of a model (internal to src/model): its tables fm_w and fm_v, the lookups of a
 * batch's F (id, value) fields, the first-order and FM terms, and their sparse gradients. The
 * model runs DeepFM's MLP between the lookups and the logits with its ordinary layers. */
#ifndef DTRAIN_MODEL_CTR_H
#define DTRAIN_MODEL_CTR_H

#include "dtrain/keymap.h"
#include "dtrain/model_spec.h"
#include "dtrain/pool.h"
#include "dtrain/rows.h"
#include "dtrain/table.h"

typedef struct dt_ctr dt_ctr;

/* dynamic_shards: a dynamic table under max_rows has room for this many shards' rows. */
dt_status dt_ctr_create(const dt_model_spec *spec, int max_batch, int dynamic_shards,
                        dt_ctr **out);
void dt_ctr_destroy(dt_ctr *c);

/* fm_w zero, fm_v normal of the spec's stddev, each row drawn from (seed, row). */
void dt_ctr_init(dt_ctr *c, uint64_t seed, dt_pool *pool);

/* The lookups of e's rows: the scaled rows of fm_w and fm_v; for training also the batch's
 * unique ids, which the backward pass needs. Every row of e must have F sparse entries with
 * ids in [0, feature_size) and finite values: DT_ERR_INVALID naming the first bad example and
 * field otherwise (the batch's tasks check their examples as they copy them). */
dt_status dt_ctr_forward(dt_ctr *c, const dt_elem *e, bool training, dt_pool *pool);
/* (B, F x K): the concatenated field vectors, DeepFM's MLP input. */
const float *dt_ctr_deep_input(const dt_ctr *c);
/* logits (B) = bias + first-order + FM (+ deep (B), when not NULL). */
void dt_ctr_logits(dt_ctr *c, int B, float bias, const float *deep, float *logits);

/* From dlogits (B) and the MLP's input gradient ddeep (B, F x K; NULL without an MLP), which
 * it overwrites (the FM term's gradient is added into it): the tables' sparse gradients
 * (dt_ctr_table_grad), and the bias's gradient, returned. */
float dt_ctr_backward(dt_ctr *c, int B, const float *dlogits, float *ddeep, dt_pool *pool);

/* Its tables (fm_w, then fm_v unless the model is lr) and their gradients of the last
 * backward. */
/* After the tables' update of global step `step`: the step keys are stamped with next (step +
 * 1), and one page of a dynamic table's eviction pass when one is under way or due. */
void dt_ctr_tables_updated(dt_ctr *c, int64_t step);
/* The step of the last update, as a restore finds it. */
void dt_ctr_set_step(dt_ctr *c, int64_t step);
/* The key map of dynamic tables (both tables share it), or NULL. */
dt_keymap *dt_ctr_keymap(dt_ctr *c);
/* Makes c look its keys up in owner's map, read only (a scoring context of a predictor). */
void dt_ctr_share_keys(dt_ctr *c, dt_keymap *owner);

int dt_ctr_num_tables(const dt_ctr *c);
dt_table *dt_ctr_table(dt_ctr *c, int i);
dt_sparse_rows *dt_ctr_table_grad(dt_ctr *c, int i);

#endif
