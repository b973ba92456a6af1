/* Estimator's training log: `loss = L, step = N (T sec)` and `global_step/sec: R` every
 * log_step_count_steps steps, and the loss at step 0 (steps counted from 0, as its hooks
 * count them). */
#include <stdio.h>
#include <stdlib.h>

#include "callback.h"
#include "../core/clock.h"

typedef struct {
    double t0;       /* the clock at the last line */
    int64_t logged;  /* the step of the last line (-1: none yet) */
} estimator_log;

static dt_status train_begin(void *self, dt_fit_ctx *c)
{
    (void)c;
    estimator_log *l = self;
    l->t0 = dt_clock_now();
    l->logged = -1;
    return DT_OK;
}

/* A line when the steps just taken, [first, last] counted from 0, hold step 0 or a multiple of
 * log_step_count_steps; it names the last of them (one step at a time in fit: that step). */
static dt_status step_end(void *self, dt_fit_ctx *c)
{
    estimator_log *l = self;
    int64_t every = c->cfg->log_step_count_steps, last = c->pos.step - 1;
    int64_t first = c->pos.step - c->step_count;
    if (first != 0 && last / every == (first - 1) / every)
        return DT_OK;
    FILE *out = c->cfg->progress;
    double now = dt_clock_now(), dt = now - l->t0;
    if (first == 0 && last == 0) {
        fprintf(out, "loss = %.6g, step = 0\n", c->batch_loss);
    } else {
        /* Since the last line; a resumed run's first line counts a whole interval, as
         * Estimator's does. */
        int64_t steps = l->logged >= 0 ? last - l->logged : first == 0 ? last : every;
        fprintf(out, "global_step/sec: %.6g\n", (double)steps / dt);
        fprintf(out, "loss = %.6g, step = %lld (%.3f sec)\n", c->batch_loss, (long long)last, dt);
    }
    fflush(out);
    l->t0 = now;
    l->logged = last;
    return DT_OK;
}

static const dt_callback_ops ops = {.name = "estimator_log", .train_begin = train_begin,
                                    .step_end = step_end, .close = dt_callback_free_self};

dt_status dt_estimator_log_callback(const dt_fit_ctx *c, dt_callback *out)
{
    *out = (dt_callback){0};
    if (!c->cfg->progress || c->cfg->log_step_count_steps <= 0)
        return DT_OK;
    estimator_log *l = calloc(1, sizeof *l);
    if (!l)
        return dt_error(DT_ERR_NOMEM, "no memory for the training log");
    *out = (dt_callback){&ops, l};
    return DT_OK;
}
