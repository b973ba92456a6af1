/* Estimator's train_and_evaluate: evaluation on the test dataset every eval_every_steps steps
 * and/or whenever eval_throttle_secs have passed since the last one (not before
 * eval_start_delay_secs of training), and once more after the last step, each reported as
 * Estimator reports it. Only the replica given a test dataset evaluates (the chief); the others
 * wait for it in the next step's collectives. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "callback.h"
#include "../core/clock.h"

typedef struct {
    double last_t; /* the clock at the last evaluation's end, or the start of training */
} periodic;

static dt_status train_begin(void *self, dt_fit_ctx *c)
{
    ((periodic *)self)->last_t = c->train_t0;
    return DT_OK;
}

/* Whether an evaluation is due after the step c just took, `elapsed` seconds of training in and
 * `since_last` seconds after the previous evaluation (or the start). */
static bool due(const dt_fit_ctx *c, double elapsed, double since_last)
{
    const dt_fit_config *cfg = c->cfg;
    if (elapsed < cfg->eval_start_delay_secs)
        return false;
    if (dt_fit_step_reached(c, cfg->eval_every_steps))
        return true;
    return cfg->eval_throttle_secs > 0.0 && since_last >= cfg->eval_throttle_secs;
}

static dt_status evaluate(periodic *p, dt_fit_ctx *c)
{
    const dt_fit_config *cfg = c->cfg;
    dt_fit_result *r = c->result;
    int64_t step = c->pos.step;
    dt_status st = dt_fit_refresh(c);
    double t0 = dt_clock_now();
    if (st == DT_OK)
        st = dt_dataset_reset(c->test);
    dt_eval_metrics e;
    if (st || (st = dt_evaluate_metrics(c->m, c->test, cfg->eval_steps, &e)))
        return dt_error_prefix(st, "evaluation at global step %lld", (long long)step);
    r->val_loss = e.loss, r->val_accuracy = e.accuracy, r->val_auc = e.auc;
    r->validated = true;
    r->evaluations++;
    r->eval_step = step;
    r->eval_seconds += dt_clock_now() - t0;
    c->evaluated = true;
    if (cfg->progress) {
        fprintf(cfg->progress, "Saving dict for global step %lld: global_step = %lld, "
                "loss = %.7g, accuracy = %.7g", (long long)step, (long long)step, r->val_loss,
                r->val_accuracy);
        if (isfinite(e.auc))
            fprintf(cfg->progress, ", auc = %.7g, logloss = %.7g", e.auc, e.logloss);
        fputc('\n', cfg->progress);
        fflush(cfg->progress);
    }
    p->last_t = dt_clock_now();
    return DT_OK;
}

static dt_status step_end(void *self, dt_fit_ctx *c)
{
    periodic *p = self;
    double now = dt_clock_now();
    double elapsed = now - c->train_t0 - dt_fit_side_seconds(c->result);
    if (!due(c, elapsed, now - p->last_t))
        return DT_OK;
    return evaluate(p, c);
}

/* As Estimator, the last step is always evaluated. */
static dt_status train_end(void *self, dt_fit_ctx *c)
{
    return c->result->eval_step != c->pos.step ? evaluate(self, c) : DT_OK;
}

static const dt_callback_ops ops = {.name = "periodic_evaluation", .train_begin = train_begin,
                                    .step_end = step_end, .train_end = train_end,
                                    .close = dt_callback_free_self};

dt_status dt_periodic_evaluation_callback(const dt_fit_ctx *c, dt_callback *out)
{
    *out = (dt_callback){0};
    if (!c->test || (c->cfg->eval_every_steps <= 0 && !(c->cfg->eval_throttle_secs > 0.0)))
        return DT_OK;
    periodic *p = calloc(1, sizeof *p);
    if (!p)
        return dt_error(DT_ERR_NOMEM, "no memory for the evaluation");
    *out = (dt_callback){&ops, p};
    return DT_OK;
}
