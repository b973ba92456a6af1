/* Keras's progress: a bar on a terminal or a line per epoch, `loss` and `accuracy` as running
 * means over the epoch, the validation's figures on the epoch's line. */
#include <stdlib.h>

#include "callback.h"
#include "progress.h"

static dt_status train_begin(void *self, dt_fit_ctx *c)
{
    dt_progress_init(self, c->cfg->progress, c->cfg->progress_bar);
    return DT_OK;
}

static dt_status epoch_begin(void *self, dt_fit_ctx *c)
{
    int64_t steps = c->epoch_limit > 0 ? c->epoch_limit : c->cfg->expected_steps_per_epoch;
    dt_progress_epoch_begin(self, (int)c->pos.epoch + 1, c->cfg->epochs, steps);
    return DT_OK;
}

static dt_status step_end(void *self, dt_fit_ctx *c)
{
    const dt_fit_position *p = &c->pos;
    dt_progress_step(self, p->in_epoch, p->epoch_loss / p->epoch_samples,
                     (double)p->epoch_correct / p->epoch_samples);
    return DT_OK;
}

static dt_status epoch_end(void *self, dt_fit_ctx *c)
{
    dt_progress_epoch_end(self, c->pos.in_epoch, c->result->final_loss,
                          c->result->final_accuracy, c->epoch_extra);
    return DT_OK;
}

static const dt_callback_ops ops = {.name = "progress", .train_begin = train_begin,
                                    .epoch_begin = epoch_begin, .step_end = step_end,
                                    .epoch_end = epoch_end, .close = dt_callback_free_self};

dt_status dt_progress_callback(const dt_fit_ctx *c, dt_callback *out)
{
    *out = (dt_callback){0};
    /* One style or the other: Estimator's log replaces Keras's progress. */
    if (!c->cfg->progress || c->cfg->log_step_count_steps > 0)
        return DT_OK;
    dt_progress *p = calloc(1, sizeof *p);
    if (!p)
        return dt_error(DT_ERR_NOMEM, "no memory for the progress");
    *out = (dt_callback){&ops, p};
    return DT_OK;
}
