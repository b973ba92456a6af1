/* Sequential models at run time, built from a dt_model_spec (model_spec.h).
 *
 * The runtime owns one parameter arena and
 * one gradient arena with views named like Keras variables ("conv2d/kernel", "dense_1/bias"), the
 * activation buffers for a maximum batch, and scratch; it fuses Conv2D(relu) + MaxPool2D into one
 * kernel where dt_convpool_supported allows. Inputs are NHWC float32. */
#ifndef DTRAIN_MODEL_H
#define DTRAIN_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/api.h"
#include "dtrain/arena.h"
#include "dtrain/model_spec.h"
#include "dtrain/optim.h"
#include "dtrain/pool.h"
#include "dtrain/rowopt.h"
#include "dtrain/rows.h"
#include "dtrain/keymap.h"
#include "dtrain/table.h"

typedef struct {
    bool no_fuse; /* use the generic kernels even where a fused one applies (for tests) */
    /* A dynamic table under max_rows holds the keys of this many shards of max_rows each (a
     * parameter-server coordinator's view of its ps tasks' tables; 0 or 1: its own). */
    int dynamic_shards;
    /* A parameter-server worker's model: a feature spec's dynamic tables hold one batch's keys,
     * in key order (dt_model_table_keys), whose rows the worker pulls; no key map. */
    bool keys_local;
} dt_model_options;

typedef struct dt_model dt_model;

/* Builds the runtime for inputs of shape spec->input_shape (which must be set) and batches of up
 * to max_batch examples; pool is borrowed and may be NULL. Parameters start at zero: call
 * dt_model_init_params. Shape errors name the layer. */
DT_API dt_status dt_model_create(const dt_model_spec *spec, int max_batch, dt_pool *pool,
                                 const dt_model_options *opts, dt_model **out);
DT_API void dt_model_destroy(dt_model *m);

/* Keras's default initialisers: Glorot-uniform kernels, zero biases, drawn from seed; a CTR
 * model's tables as model_spec.h says. */
DT_API void dt_model_init_params(dt_model *m, uint64_t seed);
/* The same for the parameter arena alone, the tables left as they are (a parameter-server
 * coordinator, whose ps tasks draw the tables' rows themselves). */
DT_API void dt_model_init_dense_params(dt_model *m, uint64_t seed);

DT_API dt_arena *dt_model_params(dt_model *m);
DT_API dt_arena *dt_model_grads(dt_model *m);
/* Variables no optimizer trains, which training forwards update: batch normalisation's moving
 * means and variances ("<layer>/moving_mean"). Empty without such layers. Checkpoints hold them. */
DT_API dt_arena *dt_model_state(dt_model *m);
DT_API const dt_model_spec *dt_model_spec_of(const dt_model *m);
DT_API int dt_model_num_outputs(const dt_model *m);
/* A feature-spec model with a regression head: its loss reads the batch's labels as values
 * (any finite number), not as classes. */
DT_API bool dt_model_float_targets(const dt_model *m);
DT_API size_t dt_model_input_elems(const dt_model *m);
DT_API int dt_model_max_batch(const dt_model *m);

/* Runs the layers on x (B, H, W, C), B <= max batch, and returns the outputs (B, K), valid until
 * the next forward. training enables dropout, whose masks come from dropout_seed and a counter
 * of training forwards, so a run is reproducible. */
DT_API const float *dt_model_forward(dt_model *m, int B, const float *x, bool training);

/* dt_model_forward on a batch of the input pipeline: its dense values for a sequential model,
 * its F (id, value) fields per example for a CTR model (checked: field count, ids within the
 * tables, finite values; DT_ERR_INVALID naming the example and the field). *logits (may be
 * NULL) gets the outputs (B, K). */
DT_API dt_status dt_model_forward_batch(dt_model *m, const dt_elem *e, bool training,
                                        const float **logits);

/* After a forward of B examples: the sum of their losses against labels (B), and the number
 * predicted right when n_correct is not NULL. With want_grad it also prepares backward, with the
 * loss gradient multiplied by grad_scale (1 / B for the batch mean, 1 / global batch for the
 * distributed sum). Labels must lie in [0, K) (K = 1 for a binary model: labels 0 or 1). */
DT_API double dt_model_loss(dt_model *m, int B, const int32_t *labels, float grad_scale,
                            bool want_grad, int *n_correct);

/* Adds the gradients of the last loss into the gradient arena (zero it first for a fresh step). */
DT_API void dt_model_backward(dt_model *m, int B);

/* Makes m compute with owner's parameters (the same layout: the same spec) instead of its own:
 * central_storage's one copy of the variables. owner must outlive m's use of them; m's own
 * storage is kept and freed with m. DT_ERR_INVALID when the layouts differ. */
DT_API dt_status dt_model_share_params(dt_model *m, const dt_model *owner);

/* Makes table i read its values from data ((rows, dim) floats, read only, owned by the caller and
 * outliving m's use of it: a table of a checkpoint mapped from its file) instead of its own
 * storage, which is released with its slots. For a model that only runs forwards. */
DT_API dt_status dt_model_borrow_table(dt_model *m, int i, const float *data);

/* Makes m compute with owner's variables (the same spec): its parameters, its state and its
 * tables' values, read only; m's own tables are released. The replicas of one model that a
 * predictor's threads run forwards on, each with its own activations. owner must outlive m's
 * use of them. DT_ERR_INVALID when the layouts differ. */
DT_API dt_status dt_model_share_variables(dt_model *m, const dt_model *owner);

/* Makes m keep its parameters and gradients in storage it does not own, of
 * dt_model_params(m)->n_elems floats each (shared memory, say: dt_comm_share_tensors), whose
 * parameters are to be used as they are; with NULL, back to its own storage, into which the
 * current parameters are copied. Not with dt_model_share_params. */
DT_API void dt_model_use_storage(dt_model *m, float *params, float *grads);

/* Called during dt_model_backward each time a layer's parameter gradients are complete, with the
 * arena offset from which every gradient is final: layers run last first and their views lie in
 * layer order, so the final range [ready_from, n_elems) only grows, toward offset 0. This is
 * what lets gradient all-reduce start on the last layers while backward runs on the first. */
typedef void (*dt_grad_ready_fn)(void *ctx, size_t ready_from);
/* fn may be NULL (no calls). */
DT_API void dt_model_set_grad_hook(dt_model *m, dt_grad_ready_fn fn, void *ctx);

/* Zeroes the dense gradients and empties the tables' sparse ones. */
DT_API void dt_model_zero_grads(dt_model *m);

/* ---- Tables (CTR models): variables updated row by row, outside the parameter arena ---- */

/* fm_w, then fm_v (none for a sequential model, one for lr). */
DT_API int dt_model_num_tables(const dt_model *m);
DT_API dt_table *dt_model_table(dt_model *m, int i);
/* The table of that name ("fm_w", "fm_v"), or NULL. */
DT_API dt_table *dt_model_find_table(dt_model *m, const char *name);
/* The table's gradient of the last backward: the rows the batch touched, summed. */
DT_API dt_sparse_rows *dt_model_table_grad(dt_model *m, int i);
/* Gives the tables the slots of optimizer c, which dt_model_update_tables then applies. */
DT_API dt_status dt_model_setup_tables(dt_model *m, const dt_rowopt_config *c);
/* The tables' rules of cfg: its table rule, and its linear rule on a feature-spec model's
 * linear tables when set (dt_model_setup_tables, then dt_model_set_table_rule). */
DT_API dt_status dt_model_setup_table_rules(dt_model *m, const dt_optim_config *cfg);
/* o over the parameter arena, and the tables' slots of cfg's table rules. */
DT_API dt_status dt_model_setup_optimizer(dt_model *m, dt_optim *o, const dt_optim_config *cfg);
/* Gives table i its own rule after dt_model_setup_tables gave every table the same one (a
 * feature-spec model's linear tables take the linear part's optimizer). */
DT_API dt_status dt_model_set_table_rule(dt_model *m, int i, const dt_rowopt_config *c);
/* Table i's rule; NULL before dt_model_setup_tables. */
DT_API const dt_rowopt_config *dt_model_table_rule(const dt_model *m, int i);
/* A feature-spec model: the unique ids (increasing) that batch e reads of table i, which a
 * parameter-server worker pulls before the forward of e (which then does not read e's entries
 * again). Valid until that forward. DT_ERR_INVALID as the forward's for a bad entry. */
DT_API dt_status dt_model_table_ids(dt_model *m, const dt_elem *e, int i, const int64_t **ids,
                                    size_t *n);
/* A feature-spec model's dynamic table i: whether it is one; under keys_local, after
 * dt_model_table_ids, the key of each of its rows (row j holds keys[j]; NULL for a fixed table)
 * and each unique id's places in the batch, its sightings (times, n of them). */
DT_API bool dt_model_table_dynamic(dt_model *m, int i);
DT_API const int64_t *dt_model_table_keys(dt_model *m, int i);
DT_API void dt_model_table_counts(dt_model *m, int i, uint32_t *times);
/* How table i starts, as dt_model_init_params draws it: each row from N(0, stddev^2) with the
 * seed plus *seed_offset (stddev 0: zeros) — what a ps task holding rows of it draws. */
DT_API void dt_model_table_init(const dt_model *m, int i, float *stddev, uint64_t *seed_offset);
/* Whether table i is of a feature-spec model's linear part. */
DT_API bool dt_model_table_linear(const dt_model *m, int i);
/* The tables' optimizer (the rule dt_model_setup_tables gave them all); NULL before it. */
DT_API const dt_rowopt_config *dt_model_table_optimizer(const dt_model *m);
/* Table i's key map when the table is dynamic (keymap.h; tables may share one), else NULL. */
DT_API dt_keymap *dt_model_keymap(dt_model *m, int i);
/* Table i's rows in use: all of a fixed table's, a dynamic one's up to its high-water mark. */
DT_API int64_t dt_model_table_rows_used(dt_model *m, int i);
/* The model's distinct key maps (tables may share one), in table order, at most cap of them
 * into out; how many. */
DT_API int dt_model_keymaps(dt_model *m, dt_keymap **out, int cap);
/* The figures of every key map of the model's dynamic tables together; false when it has none. */
DT_API bool dt_model_dynamic_stats(dt_model *m, dt_keymap_stats *out);
/* The global step of the last update of the tables, which dynamic tables stamp keys with (step
 * + 1 next): what a restore sets. */
DT_API void dt_model_set_tables_step(dt_model *m, int64_t step);
/* Applies the tables' gradients with the optimizer's rate times lr_scale (a schedule's factor)
 * at global step `step` (1 for the first). */
DT_API void dt_model_update_tables(dt_model *m, float lr_scale, int64_t step, dt_pool *pool);

/* Sets the seed of dropout masks and restarts their sequence: the next training forward draws
 * the same masks as the first one after the previous call with this seed. */
DT_API void dt_model_set_dropout_seed(dt_model *m, uint64_t seed);

/* Training forwards since the last dt_model_set_dropout_seed: with the seed, the position in the
 * sequence of dropout masks, which a checkpoint saves so a resumed run draws the same masks. */
DT_API uint64_t dt_model_dropout_position(const dt_model *m);
DT_API void dt_model_set_dropout_position(dt_model *m, uint64_t forwards);

/* A Keras-style table of layers, output shapes and parameter counts. */
DT_API void dt_model_summary(const dt_model *m, FILE *out);

#endif
