/* fit's callbacks, as Keras's: the training loop (loop.c) calls hooks at the start and end of
 * training, of each epoch and of each step, and everything that is not the step itself is a
 * callback with its own file: the learning-rate schedule, progress (Keras's bar or lines),
 * Estimator's step log, validation
 * at each epoch's end, train_and_evaluate's periodic evaluation, early stopping, model_dir
 * checkpoints,
 * BackupAndRestore's backups, and TensorBoard summaries (internal to src/train).
 *
 * The loop knows callbacks only through this table, and the strategy only through replica.h:
 * it has no branch on either. Callbacks run in the order of the list, which is Keras's order for
 * the built-in ones: an evaluation before the progress line that shows it, the progress line
 * before early stopping's verdict, saves after the step's figures are logged. */
#ifndef DTRAIN_TRAIN_CALLBACK_H
#define DTRAIN_TRAIN_CALLBACK_H

#include <stdbool.h>
#include <stdint.h>

#include "../strategy/replica.h"
#include "dtrain/fit.h"
#include "fit_ckpt.h"

/* What the loop shares with its callbacks. */
typedef struct {
    dt_replica *replica;
    dt_model *m;
    dt_optim *o;
    const dt_fit_config *cfg;
    dt_dataset *test;         /* NULL on replicas that do not evaluate */
    dt_fit_result *result;
    dt_fit_position pos;      /* where training stands (at a step's end: after it) */
    bool resumed;             /* pos came from a checkpoint */
    double train_t0;          /* the clock when the first step began */
    /* The step just taken. */
    double batch_loss, batch_accuracy;
    int64_t step_count;       /* the steps a step_end covers: 1 in fit; a worker's function of
                               * one or more in parameter-server training */
    /* The epoch just ended. */
    int64_t epoch_limit;      /* the steps it was to run (0: until its data ended) */
    bool epoch_cut;           /* max_steps ended it, and training with it */
    char epoch_extra[128];    /* appended to its progress line (the validation's figures) */
    /* Set by a callback. */
    bool evaluated;           /* an evaluation just put its figures in result->val_* */
    bool stop;                /* training ends after this epoch (early stopping) */
    /* NULL: the variables are m's own. Else they live in other processes (a parameter-server
     * job's ps tasks), and this says how to save and read them. */
    const struct dt_fit_remote *remote;
} dt_fit_ctx;

/* Variables held elsewhere, as the callbacks reach them. */
typedef struct dt_fit_remote {
    /* The checkpoint callback's save: the variables as of step c->pos.step or later (*step: the
     * step saved) into mgr; announce: log the save. NULL: no checkpoints (they cannot be saved
     * from here). */
    dt_status (*save)(void *arg, dt_ckpt_manager *mgr, const dt_fit_ctx *c, bool announce,
                      bool final, int64_t *step);
    /* Before a callback evaluates c->m: its variables brought up to date. */
    dt_status (*refresh)(void *arg, dt_fit_ctx *c);
    void *arg;
} dt_fit_remote;

/* c->m's variables up to date for an evaluation (nothing to do when they are its own). */
static inline dt_status dt_fit_refresh(dt_fit_ctx *c)
{
    return c->remote && c->remote->refresh ? c->remote->refresh(c->remote->arg, c) : DT_OK;
}

/* Each slot may be NULL (nothing to do then). self is the callback's own state. */
typedef struct {
    const char *name;
    dt_status (*train_begin)(void *self, dt_fit_ctx *c);
    dt_status (*epoch_begin)(void *self, dt_fit_ctx *c);
    /* Before a step that ends at global step `step`: whether the callback will save the
     * optimizer's state after it (the replicas must then make it whole within the step). */
    bool (*saves_after)(void *self, dt_fit_ctx *c, int64_t step);
    /* Before each step's computation (the learning rate is set here). */
    dt_status (*step_begin)(void *self, dt_fit_ctx *c);
    dt_status (*step_end)(void *self, dt_fit_ctx *c);
    dt_status (*epoch_end)(void *self, dt_fit_ctx *c);
    /* When training goes on into another epoch, with the optimizer's state whole: next is the
     * position at that epoch's start. */
    dt_status (*between_epochs)(void *self, dt_fit_ctx *c, const dt_fit_position *next);
    /* After the last step, the optimizer's state whole. */
    dt_status (*train_end)(void *self, dt_fit_ctx *c);
    /* Always, last; completed tells whether training ran to its end. Frees self. */
    dt_status (*close)(void *self, bool completed);
} dt_callback_ops;

typedef struct {
    const dt_callback_ops *ops;
    void *self;
} dt_callback;

/* The built-in callbacks, each made for cfg (and the replica: only the chief writes files or
 * prints). A constructor that has nothing to do for cfg returns a callback with ops NULL. */
dt_status dt_progress_callback(const dt_fit_ctx *c, dt_callback *out);
dt_status dt_estimator_log_callback(const dt_fit_ctx *c, dt_callback *out);
dt_status dt_validation_callback(const dt_fit_ctx *c, dt_callback *out);
dt_status dt_periodic_evaluation_callback(const dt_fit_ctx *c, dt_callback *out);
dt_status dt_early_stopping_callback(const dt_fit_ctx *c, dt_callback *out);
dt_status dt_backup_callback(const dt_fit_ctx *c, dt_callback *out);
dt_status dt_checkpoint_callback(const dt_fit_ctx *c, dt_callback *out);
dt_status dt_summary_callback(const dt_fit_ctx *c, dt_callback *out);
/* The program's own callbacks (cfg->callbacks), after every built-in one. */
dt_status dt_user_callbacks(const dt_fit_ctx *c, dt_callback *out);
dt_status dt_lr_schedule_callback(const dt_fit_ctx *c, dt_callback *out);

/* The built-in callbacks made for one run, in the order their hooks run (callbacks.c). */
#define DT_MAX_CALLBACKS 16
typedef struct {
    dt_callback cb[DT_MAX_CALLBACKS];
    int n;
} dt_callbacks;

/* Every built-in callback that has something to do for c, and the program's own after them. */
dt_status dt_callbacks_open(const dt_fit_ctx *c, dt_callbacks *cbs);
/* Closes every callback; the first failure. */
dt_status dt_callbacks_close(dt_callbacks *cbs, bool completed);
/* Whether some callback will save the optimizer's state after the step ending at `step`.
 * Every callback is asked: a time-based checkpoint decides once, here. */
bool dt_callbacks_saves_after(dt_callbacks *cbs, dt_fit_ctx *c, int64_t step);

/* Calls one hook of every callback that has it, in order, until one fails (st: the caller's
 * status, DT_OK on entry). */
#define DT_EACH_CALLBACK(cbs, hook, ...)                                                           \
    do {                                                                                           \
        for (int i_ = 0; st == DT_OK && i_ < (cbs)->n; i_++)                                       \
            if ((cbs)->cb[i_].ops->hook)                                                           \
                st = (cbs)->cb[i_].ops->hook((cbs)->cb[i_].self, __VA_ARGS__);                     \
    } while (0)

/* Whether the steps a step_end covers, (pos.step - step_count, pos.step], reach a multiple of
 * every: at each such step when steps come one at a time, as in fit. */
static inline bool dt_fit_step_reached(const dt_fit_ctx *c, int64_t every)
{
    return every > 0 && c->pos.step / every > (c->pos.step - c->step_count) / every;
}

/* The close of a callback whose state is one malloc'd block and nothing else. */
dt_status dt_callback_free_self(void *self, bool completed);

/* Time spent on evaluations and checkpoints, which training time leaves out. */
static inline double dt_fit_side_seconds(const dt_fit_result *r)
{
    return r->eval_seconds + r->checkpoint_seconds;
}

#endif
