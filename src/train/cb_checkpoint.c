/* Estimator's checkpoints in model_dir: ckpt-<step>.safetensors (or the remote variables' own, ctx->remote)
 * every save_checkpoints_steps steps, or every save_checkpoints_secs seconds when that is 0, and after the last step (with
 * metadata final = 1), kept as keep_checkpoint_max and keep_checkpoint_every_n_hours say. Only
 * the chief writes them. */
#include <stdlib.h>

#include "callback.h"
#include "../core/clock.h"
#include "dtrain/log.h"

typedef struct {
    dt_ckpt_manager mgr;
    double last_save;        /* clock of the last save */
    int64_t last_saved_step; /* -1: none */
    int64_t due_step;        /* the step saves_after chose to save after, or -1 */
} checkpoint;

static dt_status train_begin(void *self, dt_fit_ctx *c)
{
    /* A resumed run's starting point is saved already. */
    ((checkpoint *)self)->last_saved_step = c->resumed ? c->pos.step : -1;
    return DT_OK;
}

/* A time-based save is decided here, once, before the step, so the replicas can be told before
 * it ends (their optimizer state must be whole for the save). */
static bool saves_after(void *self, dt_fit_ctx *c, int64_t step)
{
    checkpoint *k = self;
    const dt_fit_config *cfg = c->cfg;
    int64_t every = cfg->save_checkpoints_steps;
    bool due = every > 0
                   ? step / every > (step - c->step_count) / every
                   : cfg->save_checkpoints_secs > 0.0 &&
                         dt_clock_now() - k->last_save >= cfg->save_checkpoints_secs;
    k->due_step = due ? step : -1;
    return due;
}

static dt_status save(checkpoint *k, dt_fit_ctx *c, bool announce, bool final)
{
    int64_t step = c->pos.step;
    dt_status st = c->remote ? c->remote->save(c->remote->arg, &k->mgr, c, announce, final, &step)
                             : dt_fit_save(&k->mgr, announce, c->cfg, dt_replica_count(c->replica),
                                           c->m, c->o, &c->pos, final, c->result);
    if (st == DT_OK)
        k->last_saved_step = step;
    return st;
}

/* Whether a periodic save that failed with st can be given up while training goes on: the
 * storage refused (a full disk, a quota, a lost mount), here or on a ps task. Nothing of the
 * failed save is named by the state file, so the last good checkpoint stays the latest. */
static bool storage_failure(dt_status st) { return st == DT_ERR_IO; }

static dt_status step_end(void *self, dt_fit_ctx *c)
{
    checkpoint *k = self;
    if (k->due_step != c->pos.step)
        return DT_OK;
    dt_status st = save(k, c, true, false);
    k->last_save = dt_clock_now();
    if (st && storage_failure(st)) {
        char last[64] = "none yet";
        if (k->mgr.n_kept > 0)
            snprintf(last, sizeof last, "ckpt-%lld", (long long)k->mgr.steps[k->mgr.n_kept - 1]);
        dt_log_to(c->cfg->log, DT_LOG_WARN, "dtrain: warning: checkpoint at step %lld not "
                  "saved: %s; training goes on, and the latest checkpoint stays %s",
                  (long long)c->pos.step, dt_last_error(), last);
        c->result->checkpoints_failed++;
        return DT_OK;
    }
    return st;
}

/* Saved again even at a step already saved, so the last file carries final = 1. */
static dt_status train_end(void *self, dt_fit_ctx *c)
{
    checkpoint *k = self;
    return save(k, c, k->last_saved_step != c->pos.step, true);
}

static dt_status close_cb(void *self, bool completed)
{
    (void)completed;
    checkpoint *k = self;
    dt_ckpt_manager_close(&k->mgr);
    free(k);
    return DT_OK;
}

static const dt_callback_ops ops = {.name = "checkpoint", .train_begin = train_begin,
                                    .saves_after = saves_after, .step_end = step_end,
                                    .train_end = train_end, .close = close_cb};

dt_status dt_checkpoint_callback(const dt_fit_ctx *c, dt_callback *out)
{
    *out = (dt_callback){0};
    const dt_fit_config *cfg = c->cfg;
    if (!cfg->model_dir || !dt_replica_is_chief(c->replica) || (c->remote && !c->remote->save))
        return DT_OK;
    checkpoint *k = calloc(1, sizeof *k);
    if (!k)
        return dt_error(DT_ERR_NOMEM, "no memory for the checkpoints");
    dt_status st = dt_ckpt_manager_open(&k->mgr, cfg->model_dir, cfg->keep_checkpoint_max,
                                        cfg->keep_checkpoint_every_n_hours, cfg->log);
    if (st) {
        free(k);
        return st;
    }
    k->last_save = dt_clock_now();
    k->last_saved_step = k->due_step = -1;
    *out = (dt_callback){&ops, k};
    return DT_OK;
}
