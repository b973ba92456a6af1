/* Optimizers and learning-rate schedules, with Keras's update rules and defaults.
 *
 * An optimizer updates a whole parameter arena in one pass over (params, grads, slots), where
 * its slots (momentum, Adam's m and v, Adagrad's accumulator) live in one state arena that mirrors
 * the parameters' layout, each view named "<optimizer>/<slot>/<parameter>".
 *
 *   sgd:      p -= lr g
 *   momentum: v = mu v - lr g; p += v            (nesterov: p += mu v - lr g)
 *   adam:     m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 *             p -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps)
 *   adagrad:  a += g^2; p -= lr g / (sqrt(a) + eps), a starting at 0.1
 *
 * Schedules, as a function of the number of steps already taken:
 *   constant; step (ExponentialDecay, staircase): lr rate^floor(step / decay_steps);
 *   cosine (CosineDecay): lr ((1 - alpha) (1 + cos(pi min(step, decay_steps) / decay_steps)) / 2 + alpha). */
#ifndef DTRAIN_OPTIM_H
#define DTRAIN_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/arena.h"
#include "dtrain/pool.h"
#include "dtrain/rowopt.h"

typedef enum { DT_OPT_SGD = 0, DT_OPT_MOMENTUM, DT_OPT_ADAM, DT_OPT_ADAGRAD } dt_opt_kind;
typedef enum { DT_LR_CONSTANT = 0, DT_LR_STEP, DT_LR_COSINE } dt_lr_kind;

typedef struct {
    dt_opt_kind kind;
    float lr;
    float momentum;          /* momentum; default 0.9 */
    bool nesterov;
    float beta1, beta2;      /* adam; defaults 0.9, 0.999 */
    float epsilon;           /* adam, adagrad; default 1e-7 */
    float initial_accumulator; /* adagrad; default 0.1 */
    dt_lr_kind schedule;
    int64_t decay_steps;     /* step, cosine */
    float decay_rate;        /* step; default 0.5 */
    float alpha;             /* cosine: the floor as a fraction of lr; default 0 */
    /* Embedding tables (CTR models) take a row-wise rule (rowopt.h). Unless table_kind_set, the
     * dense rule's counterpart: adam -> lazy adam, adagrad -> adagrad, sgd and momentum -> sgd
     * (no row-wise momentum). table_lr 0: the dense lr. Betas, epsilon and the initial
     * accumulator are the dense ones. */
    bool table_kind_set;
    dt_rowopt_kind table_kind;
    float table_lr;
    float ftrl_l1, ftrl_l2, ftrl_lr_power, ftrl_beta; /* defaults 0, 0, -0.5, 0 */
    float l2_reg;            /* on the table rows a step touches (rowopt.h); default 0 */
    /* A feature-spec model's linear tables (and only they) take this rule instead, when set:
     * the linear part's own optimizer (FTRL in TF's canned wide & deep). */
    bool linear_rule_set;
    dt_rowopt_config linear_rule;
} dt_optim_config;

/* The tables' rule that cfg describes. */
DT_API void dt_optim_table_rule(const dt_optim_config *cfg, dt_rowopt_config *out);

typedef struct {
    dt_optim_config cfg;
    dt_arena state; /* slots, mirroring the parameters */
    int n_slots;
    int64_t iterations; /* steps taken */
    bool scalar_only;   /* skip the vector kernels (for tests comparing the two) */
    /* The rate of the next step as a learning-rate callback set it (fit's: the schedule's value
     * at this step); 0: none set, the config's schedule applies. */
    float lr_now;
} dt_optim;

/* Keras's defaults for kind, learning rate included (sgd 0.01, momentum 0.01, adam 0.001,
 * adagrad 0.001). */
DT_API void dt_optim_config_default(dt_optim_config *cfg, dt_opt_kind kind);

/* Parses "sgd" | "momentum" | "adam" | "adagrad"; and "constant" | "step" | "cosine". */
DT_API dt_status dt_opt_kind_parse(const char *name, dt_opt_kind *out);
DT_API dt_status dt_lr_kind_parse(const char *name, dt_lr_kind *out);
DT_API const char *dt_opt_kind_name(dt_opt_kind kind);

/* Checks the configuration (positive lr, betas in [0, 1), decay steps when a schedule needs
 * them), naming the offending field. */
DT_API dt_status dt_optim_config_check(const dt_optim_config *cfg);

DT_API void dt_optim_init(dt_optim *o);
/* Creates the slots for params' layout; on failure o is left freeable. */
DT_API dt_status dt_optim_setup(dt_optim *o, const dt_optim_config *cfg, const dt_arena *params);
DT_API void dt_optim_free(dt_optim *o);

/* The learning rate the next step will use: lr_now when a callback set it, else the schedule's. */
DT_API float dt_optim_current_lr(const dt_optim *o);

/* The config's schedule at a step (a count of steps taken): Keras's LearningRateSchedule. */
DT_API float dt_lr_schedule_at(const dt_optim_config *c, int64_t step);

/* One update of params (n_elems floats) from grads, split over the pool. grads is read only. */
DT_API void dt_optim_step(dt_optim *o, dt_pool *pool, float *params, const float *grads,
                          size_t n_elems);

/* A step taken in parts, as when each rank of a cluster updates the parameters it owns
 * (dt_comm_allreduce_update): each part updates [lo, hi) of params and the slots from the
 * range's gradients (grads[0] is element lo's), with the rates of the step to come (split over
 * pool when large); dt_optim_count_step then counts the step, once. The parts together give
 * dt_optim_step's values bit for bit. */
DT_API void dt_optim_update_range(const dt_optim *o, dt_pool *pool, float *params,
                                  const float *grads, size_t lo, size_t hi);
/* The same with the range's parameters wherever they are (params_lo[0] is element lo's, as in
 * a private copy of a slice of shared parameters); lo and hi place the optimizer's slots. */
DT_API void dt_optim_update_slice(const dt_optim *o, dt_pool *pool, float *params_lo,
                                  const float *grads_lo, size_t lo, size_t hi);
DT_API void dt_optim_count_step(dt_optim *o);

#endif
