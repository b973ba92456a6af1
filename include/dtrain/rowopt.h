/* Row-wise optimizers: the updates of embedding tables, where only the rows a step touched move.
 *
 * The gradient of a table is a dt_sparse_rows (unique ids, summed rows). Before the update each
 * touched row's gradient gets l2_reg x its current value (the gradient of l2_reg x |row|^2 / 2,
 * TensorFlow's l2_loss, taken over the rows the step touched: the standard sparse practice, where
 * the DeepFM sample puts it on the whole table). Per coordinate, with g that gradient:
 *
 *   sgd:     w -= lr g
 *   adagrad: a += g^2; w -= lr g / (sqrt(a) + eps)                  (a starts at 0.1, Keras)
 *   adam:    lazy, as TensorFlow's LazyAdam: only touched rows' moments move;
 *            m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 *            w -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps), t the global step
 *   ftrl:    FTRL-Proximal (McMahan et al. 2013; TensorFlow's Ftrl), with p = -lr_power:
 *            n' = n + g^2; sigma = (n'^p - n^p) / lr; z += g - sigma w; n = n';
 *            w = |z| <= l1 ? 0 : -(z - sign(z) l1) / ((beta + n^p) / lr + 2 l2)
 *            (n starts at 0.1; lr_power -0.5 gives square roots)
 *
 * dt_rowopt_update splits the rows over a pool (ids are unique: no two tasks write a row);
 * dt_rowopt_update_naive is its reference, one coordinate at a time, with the same float
 * operations in the same order: the two agree bit for bit. */
#ifndef DTRAIN_ROWOPT_H
#define DTRAIN_ROWOPT_H

#include "dtrain/api.h"
#include "dtrain/pool.h"
#include "dtrain/table.h"

typedef enum { DT_ROWOPT_SGD = 0, DT_ROWOPT_ADAGRAD, DT_ROWOPT_ADAM, DT_ROWOPT_FTRL } dt_rowopt_kind;

typedef struct {
    dt_rowopt_kind kind;
    float lr;
    float beta1, beta2;        /* adam: 0.9, 0.999 */
    float epsilon;             /* adam, adagrad: 1e-7 */
    float initial_accumulator; /* adagrad, ftrl: 0.1 */
    float l1, l2;              /* ftrl's regularisation: 0, 0 */
    float lr_power;            /* ftrl: -0.5 */
    float beta;                /* ftrl: 0 */
    float l2_reg;              /* on the touched rows, any kind: 0 */
} dt_rowopt_config;

/* The defaults above for kind, with lr (sgd 0.01, adagrad 0.001, adam 0.001, ftrl 0.001 as
 * Keras). */
DT_API void dt_rowopt_config_default(dt_rowopt_config *c, dt_rowopt_kind kind);
/* "sgd" | "adagrad" | "adam" | "ftrl". */
DT_API dt_status dt_rowopt_kind_parse(const char *name, dt_rowopt_kind *out);
DT_API const char *dt_rowopt_kind_name(dt_rowopt_kind kind);
/* Ranges of the fields, naming the one that is wrong. */
DT_API dt_status dt_rowopt_config_check(const dt_rowopt_config *c);

/* Gives t the slots of c's kind, at their initial values. */
DT_API dt_status dt_rowopt_setup(const dt_rowopt_config *c, dt_table *t);

/* One update of t's rows g->ids from g's rows, at learning rate lr (the schedule's value this
 * step) and global step `step` (1 for the first update: Adam's bias correction). Every id must be
 * a row of t and appear once. */
DT_API void dt_rowopt_update(const dt_rowopt_config *c, float lr, int64_t step, dt_table *t,
                             const dt_sparse_rows *g, dt_pool *pool);
DT_API void dt_rowopt_update_naive(const dt_rowopt_config *c, float lr, int64_t step, dt_table *t,
                                   const dt_sparse_rows *g);

#endif
