/* Keras's LearningRateScheduler: before each step, the optimizer's rate for it is the schedule's
 * value at the steps taken so far (constant, staircase exponential decay or cosine decay, as the
 * optimizer's config names it). The loop knows nothing of rates; a schedule of another shape is
 * another callback setting lr_now. A resumed run continues the schedule where the checkpoint's
 * step count left it. */
#include "callback.h"

static dt_status step_begin(void *self, dt_fit_ctx *c)
{
    (void)self;
    c->o->lr_now = dt_lr_schedule_at(&c->o->cfg, c->o->iterations);
    return DT_OK;
}

/* The optimizer is the caller's: after training it applies its own schedule again. */
static dt_status close_cb(void *self, bool completed)
{
    (void)completed;
    ((dt_optim *)self)->lr_now = 0.0f;
    return DT_OK;
}

static const dt_callback_ops ops = {.name = "lr_schedule", .step_begin = step_begin,
                                    .close = close_cb};

dt_status dt_lr_schedule_callback(const dt_fit_ctx *c, dt_callback *out)
{
    *out = (dt_callback){&ops, c->o};
    return DT_OK;
}
