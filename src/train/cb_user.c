/* A program's own callbacks (dt_fit_callback, fit.h): one adapter that calls their hooks with
 * the status of training, after the built-in callbacks. A hook's DT_END is a request to stop
 * after the epoch: the chief's request goes to every replica (dt_replica_decide), so all stop
 * after the same epoch, as early stopping's decision does. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "callback.h"

typedef struct {
    const dt_fit_callback *cbs;
    int n;
    bool stop_asked;      /* a hook returned DT_END during this epoch */
} user_cbs;

static dt_fit_status status_of(const dt_fit_ctx *c, bool epoch_end)
{
    const dt_fit_position *p = &c->pos;
    dt_fit_status s = {.step = p->step, .epoch = p->epoch, .batch_loss = c->batch_loss,
                       .batch_accuracy = c->batch_accuracy, .epoch_loss = NAN,
                       .epoch_accuracy = NAN, .val_loss = NAN, .val_accuracy = NAN,
                       .chief = dt_replica_is_chief(c->replica)};
    if (epoch_end) {
        s.epoch_loss = c->result->final_loss, s.epoch_accuracy = c->result->final_accuracy;
        s.validated = c->result->validated && c->evaluated;
        if (s.validated)
            s.val_loss = c->result->val_loss, s.val_accuracy = c->result->val_accuracy;
    }
    return s;
}

typedef dt_status (*hook_fn)(void *user, const dt_fit_status *s);

/* Calls one hook of every callback; DT_END marks a stop request and goes on. */
static dt_status call_each(user_cbs *u, size_t hook_offset, const dt_fit_status *s)
{
    for (int i = 0; i < u->n; i++) {
        hook_fn fn = *(const hook_fn *)((const char *)&u->cbs[i] + hook_offset);
        if (!fn)
            continue;
        dt_status st = fn(u->cbs[i].user, s);
        if (st == DT_END)
            u->stop_asked = true;
        else if (st)
            return dt_error_prefix(st, "callback %d", i);
    }
    return DT_OK;
}

#define CALL(u, hook, s) call_each((u), offsetof(dt_fit_callback, hook), (s))

static dt_status train_begin(void *self, dt_fit_ctx *c)
{
    dt_fit_status s = status_of(c, false);
    return CALL(self, on_train_begin, &s);
}

static dt_status step_end(void *self, dt_fit_ctx *c)
{
    dt_fit_status s = status_of(c, false);
    return CALL(self, on_step_end, &s);
}

static dt_status epoch_end(void *self, dt_fit_ctx *c)
{
    user_cbs *u = self;
    dt_fit_status s = status_of(c, true);
    dt_status st = CALL(u, on_epoch_end, &s);
    if (st)
        return st;
    bool stop = u->stop_asked;
    u->stop_asked = false;
    /* Every replica asks, so that all of them stop after the same epoch. */
    if ((st = dt_replica_decide(c->replica, &stop)))
        return dt_error_prefix(st, "a callback's request to stop");
    if (stop)
        c->stop = true;
    return DT_OK;
}

static dt_status train_end(void *self, dt_fit_ctx *c)
{
    dt_fit_status s = status_of(c, true);
    return CALL(self, on_train_end, &s);
}

static const dt_callback_ops ops = {.name = "user", .train_begin = train_begin,
                                    .step_end = step_end, .epoch_end = epoch_end,
                                    .train_end = train_end, .close = dt_callback_free_self};

dt_status dt_user_callbacks(const dt_fit_ctx *c, dt_callback *out)
{
    *out = (dt_callback){0};
    if (c->cfg->n_callbacks == 0)
        return DT_OK;
    user_cbs *u = calloc(1, sizeof *u);
    if (!u)
        return dt_error(DT_ERR_NOMEM, "no memory for the callbacks");
    u->cbs = c->cfg->callbacks, u->n = c->cfg->n_callbacks;
    *out = (dt_callback){&ops, u};
    return DT_OK;
}
