/* Keras's EarlyStopping (mode min): training stops when the monitored loss (val_loss when
 * validating, else the epoch's training loss) has not fallen by more than min_delta for
 * `patience` epochs in a row. Its best loss and wait are part of the position, so a resumed run
 * goes on counting. Only the chief may have validated: its decision goes to every replica, so
 * all stop after the same epoch. */
#include <stdio.h>

#include "callback.h"

static dt_status epoch_end(void *self, dt_fit_ctx *c)
{
    (void)self;
    /* An epoch cut short by max_steps is not judged: training ends there, and a run resumed
     * from it must judge the whole epoch once. The monitored loss is this epoch's own (a
     * periodic evaluation's would not be in a checkpoint). */
    if (c->epoch_cut)
        return DT_OK;
    const dt_fit_config *cfg = c->cfg;
    dt_fit_position *p = &c->pos;
    bool validated = cfg->validate && c->test;
    double current = validated ? c->result->val_loss : c->result->final_loss;
    if (current < p->best - cfg->early_stopping_min_delta) {
        p->best = current;
        p->waited = 0;
    } else {
        p->waited++;
    }
    bool stop = p->waited >= cfg->early_stopping_patience;
    dt_status st = dt_replica_decide(c->replica, &stop);
    if (st)
        return dt_error_prefix(st, "early stopping");
    if (!stop)
        return DT_OK;
    c->stop = true;
    c->result->stopped_early = true;
    if (cfg->progress)
        fprintf(cfg->progress, "Epoch %lld: early stopping\n", (long long)p->epoch + 1);
    return DT_OK;
}

static const dt_callback_ops ops = {.name = "early_stopping", .epoch_end = epoch_end};

dt_status dt_early_stopping_callback(const dt_fit_ctx *c, dt_callback *out)
{
    *out = (dt_callback){0};
    if (c->cfg->early_stopping_patience > 0)
        *out = (dt_callback){&ops, NULL};
    return DT_OK;
}
