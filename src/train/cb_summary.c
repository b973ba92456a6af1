/* TensorBoard summaries in model_dir: loss, accuracy, learning_rate and global_step/sec every
 * save_summary_steps steps, and each evaluation's loss and accuracy in model_dir/eval. Only the
 * chief writes them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "callback.h"
#include "../core/clock.h"
#include "dtrain/summary.h"

typedef struct {
    dt_summary_writer *train, *eval;
    double last_t;      /* clock of the last train summaries */
    int64_t last_step;  /* and their step */
} summaries;

static dt_status train_begin(void *self, dt_fit_ctx *c)
{
    ((summaries *)self)->last_step = c->pos.step;
    return DT_OK;
}

/* Dynamic tables' keys: live, admitted, evicted, counted, and the bytes per live key. */
static dt_status write_dynamic(summaries *s, dt_fit_ctx *c)
{
    dt_keymap_stats k;
    if (!dt_model_dynamic_stats(c->m, &k))
        return DT_OK;
    int64_t step = c->pos.step;
    dt_status st;
    if ((st = dt_summary_scalar(s->train, "dynamic_tables/live_keys", step, (float)k.live)) ||
        (st = dt_summary_scalar(s->train, "dynamic_tables/admitted", step, (float)k.admitted)) ||
        (st = dt_summary_scalar(s->train, "dynamic_tables/evicted", step, (float)k.evicted)) ||
        (st = dt_summary_scalar(s->train, "dynamic_tables/counting", step, (float)k.counting)))
        return st;
    return dt_summary_scalar(s->train, "dynamic_tables/bytes_per_key", step,
                             (float)dt_keymap_bytes_per_key(&k));
}

static dt_status write_train(summaries *s, dt_fit_ctx *c)
{
    int64_t step = c->pos.step;
    double now = dt_clock_now();
    double rate = (double)(step - s->last_step) / (now - s->last_t);
    s->last_t = now;
    s->last_step = step;
    float lr = dt_lr_schedule_at(&c->o->cfg, c->o->iterations); /* the next step's */
    dt_status st;
    if ((st = dt_summary_scalar(s->train, "loss", step, (float)c->batch_loss)) ||
        (st = dt_summary_scalar(s->train, "accuracy", step, (float)c->batch_accuracy)) ||
        (st = dt_summary_scalar(s->train, "learning_rate", step, lr)) ||
        (st = dt_summary_scalar(s->train, "global_step/sec", step, (float)rate)) ||
        (st = write_dynamic(s, c)))
        return st;
    return dt_summary_flush(s->train);
}

/* An evaluation a callback before this one just made. */
static dt_status write_eval(summaries *s, dt_fit_ctx *c)
{
    if (!c->evaluated)
        return DT_OK;
    int64_t step = c->pos.step;
    dt_status st;
    if ((st = dt_summary_scalar(s->eval, "loss", step, (float)c->result->val_loss)) ||
        (st = dt_summary_scalar(s->eval, "accuracy", step, (float)c->result->val_accuracy)) ||
        (isfinite(c->result->val_auc) &&
         (st = dt_summary_scalar(s->eval, "auc", step, (float)c->result->val_auc))))
        return st;
    return dt_summary_flush(s->eval);
}

static dt_status step_end(void *self, dt_fit_ctx *c)
{
    summaries *s = self;
    dt_status st = write_eval(s, c);
    if (st == DT_OK && dt_fit_step_reached(c, c->cfg->save_summary_steps))
        st = write_train(s, c);
    return st;
}

static dt_status after_evaluation(void *self, dt_fit_ctx *c) { return write_eval(self, c); }

static dt_status close_cb(void *self, bool completed)
{
    (void)completed;
    summaries *s = self;
    dt_status st = dt_summary_close(s->train);
    dt_status st2 = dt_summary_close(s->eval);
    free(s);
    return st ? st : st2;
}

static const dt_callback_ops ops = {.name = "summary", .train_begin = train_begin,
                                    .step_end = step_end, .epoch_end = after_evaluation,
                                    .train_end = after_evaluation, .close = close_cb};

dt_status dt_summary_callback(const dt_fit_ctx *c, dt_callback *out)
{
    *out = (dt_callback){0};
    const dt_fit_config *cfg = c->cfg;
    if (!cfg->model_dir || cfg->save_summary_steps <= 0 || !dt_replica_is_chief(c->replica))
        return DT_OK;
    summaries *s = calloc(1, sizeof *s);
    if (!s)
        return dt_error(DT_ERR_NOMEM, "no memory for the summaries");
    char eval_dir[4200];
    snprintf(eval_dir, sizeof eval_dir, "%s/eval", cfg->model_dir);
    dt_status st;
    if ((st = dt_summary_open(cfg->model_dir, &s->train)) ||
        (st = dt_summary_open(eval_dir, &s->eval))) {
        close_cb(s, false);
        return st;
    }
    s->last_t = dt_clock_now();
    *out = (dt_callback){&ops, s};
    return DT_OK;
}
