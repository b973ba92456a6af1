/* Keras's validation_data: the test set evaluated at each epoch's end, its figures on the
 * epoch's progress line and in result->val_*. */
#include <math.h>
#include <stdio.h>

#include "callback.h"

static dt_status epoch_end(void *self, dt_fit_ctx *c)
{
    (void)self;
    dt_fit_result *r = c->result;
    dt_status st;
    dt_eval_metrics e;
    if ((st = dt_fit_refresh(c)) || (st = dt_dataset_reset(c->test)) ||
        (st = dt_evaluate_metrics(c->m, c->test, 0, &e)))
        return st;
    r->val_loss = e.loss, r->val_accuracy = e.accuracy, r->val_auc = e.auc;
    r->validated = true;
    c->evaluated = true;
    int n = snprintf(c->epoch_extra, sizeof c->epoch_extra, " - val_loss: %.4f - val_accuracy: %.4f",
                     r->val_loss, r->val_accuracy);
    if (isfinite(e.auc) && n > 0 && (size_t)n < sizeof c->epoch_extra)
        snprintf(c->epoch_extra + n, sizeof c->epoch_extra - (size_t)n, " - val_auc: %.4f",
                 e.auc);
    return DT_OK;
}

static const dt_callback_ops ops = {.name = "validation", .epoch_end = epoch_end};

dt_status dt_validation_callback(const dt_fit_ctx *c, dt_callback *out)
{
    *out = (dt_callback){0};
    if (c->cfg->validate && c->test)
        *out = (dt_callback){&ops, NULL};
    return DT_OK;
}
