/* fit's checkpoints, backups and summaries (see fit_ckpt.h and include/dtrain/fit.h). */
#include "fit_ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/clock.h"
#include "dtrain/comm.h"

static bool distributed(const dt_fit_config *cfg) { return cfg->comm && cfg->comm->size > 1; }

dt_status dt_fit_ckpt_open(dt_fit_ckpt *k, const dt_fit_config *cfg)
{
    memset(k, 0, sizeof *k);
    k->writer = !distributed(cfg) || cfg->comm->rank == 0;
    k->last_save = k->last_summary_t = dt_clock_now();
    k->last_saved_step = k->model_due_step = -1;
    if (!k->writer)
        return DT_OK;
    dt_status st = DT_OK;
    if (cfg->backup_dir) {
        /* One backup is enough: a save is atomic, and the previous goes only once the new is
         * listed. */
        if ((st = dt_ckpt_manager_open(&k->backup, cfg->backup_dir, 1, 0.0, cfg->log)))
            return dt_error_prefix(st, "backup");
        k->have_backup = true;
    }
    if (cfg->model_dir) {
        if ((st = dt_ckpt_manager_open(&k->model, cfg->model_dir, cfg->keep_checkpoint_max,
                                       cfg->keep_checkpoint_every_n_hours, cfg->log)))
            return st;
        k->have_model = true;
        if (cfg->save_summary_steps > 0) {
            char eval_dir[4200];
            snprintf(eval_dir, sizeof eval_dir, "%s/eval", cfg->model_dir);
            if ((st = dt_summary_open(cfg->model_dir, &k->train_sw)) ||
                (st = dt_summary_open(eval_dir, &k->eval_sw)))
                return st;
        }
    }
    return DT_OK;
}

/* Removes the backup's files, those a killed run left half-written included, and its directory
 * when nothing else is left in it. */
static void remove_backup(dt_ckpt_manager *b)
{
    char path[4400];
    DIR *d = opendir(b->dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        bool ours = (strncmp(e->d_name, "ckpt-", 5) == 0 && strstr(e->d_name, ".safetensors")) ||
                    strcmp(e->d_name, "checkpoint") == 0 ||
                    strncmp(e->d_name, "checkpoint.tmp.", 15) == 0;
        if (ours) {
            snprintf(path, sizeof path, "%s/%s", b->dir, e->d_name);
            remove(path);
        }
    }
    if (d)
        closedir(d);
    remove(b->dir); /* fails, harmlessly, when the user keeps other files there */
}

dt_status dt_fit_ckpt_close(dt_fit_ckpt *k, bool completed)
{
    dt_status st = dt_summary_close(k->train_sw);
    dt_status st2 = dt_summary_close(k->eval_sw);
    k->train_sw = k->eval_sw = NULL;
    if (k->have_backup) {
        if (completed) /* as Keras: a finished run's backup is of no more use */
            remove_backup(&k->backup);
        dt_ckpt_manager_close(&k->backup);
    }
    if (k->have_model)
        dt_ckpt_manager_close(&k->model);
    k->have_backup = k->have_model = false;
    return st ? st : st2;
}

/* ---- Saving ---- */

enum { N_META = 19, META_VALUE_CAP = 48 };

static dt_status save(dt_ckpt_manager *mgr, bool announce, const dt_fit_config *cfg, dt_model *m,
                      dt_optim *o, const dt_fit_position *p, bool final, dt_fit_result *r)
{
    double t0 = dt_clock_now();
    char *spec = dt_model_spec_to_json(dt_model_spec_of(m));
    if (!spec)
        return dt_error(DT_ERR_NOMEM, "no memory for a checkpoint's metadata");
    char v[N_META][META_VALUE_CAP];
    dt_ckpt_meta meta[N_META + 1];
    int n = 0;
#define META_F(key, fmt, val) (snprintf(v[n], META_VALUE_CAP, fmt, val), meta[n] = (dt_ckpt_meta){key, v[n]}, n++)
    META_F("global_step", "%" PRId64, p->step);
    META_F("epoch", "%" PRId64, p->epoch);
    META_F("step_in_epoch", "%" PRId64, p->in_epoch);
    META_F("epoch_loss", "%.17g", p->epoch_loss);
    META_F("epoch_correct", "%" PRId64, p->epoch_correct);
    META_F("epoch_samples", "%" PRId64, p->epoch_samples);
    META_F("samples", "%" PRId64, p->samples);
    META_F("early_stopping_best", "%.17g", p->best);
    META_F("early_stopping_waited", "%" PRId64, p->waited);
    META_F("optimizer", "%s", dt_opt_kind_name(o->cfg.kind));
    META_F("optimizer_iterations", "%" PRId64, o->iterations);
    META_F("learning_rate", "%.9g", (double)dt_optim_current_lr(o));
    META_F("seed", "%" PRIu64, cfg->seed);
    META_F("dropout_position", "%" PRIu64, dt_model_dropout_position(m));
    META_F("batch_size", "%d", cfg->batch_size);
    META_F("workers", "%d", distributed(cfg) ? cfg->comm->size : 1);
    META_F("final", "%d", final ? 1 : 0);
    META_F("input_position", "{\"iteration\": %" PRId64, p->epoch);
    /* The input's position: the iteration of the dataset (the epoch) and the batches of it read. */
    snprintf(v[n - 1] + strlen(v[n - 1]), META_VALUE_CAP - strlen(v[n - 1]),
             ", \"batches\": %" PRId64 "}", p->in_epoch);
#undef META_F
    meta[n++] = (dt_ckpt_meta){"model_spec", spec};
    const dt_arena *arenas[2] = {dt_model_params(m), &o->state};
    int n_arenas = o->state.n_views > 0 ? 2 : 1; /* plain SGD has no slots */
    char path[4400];
    dt_status st = dt_ckpt_manager_save(mgr, p->step, arenas, n_arenas, meta, n, path, sizeof path);
    free(spec);
    if (st)
        return st;
    r->checkpoints++;
    r->checkpoint_seconds += dt_clock_now() - t0;
    if (announce && cfg->log) {
        fprintf(cfg->log, "Saving checkpoints for %" PRId64 " into %s.\n", p->step, path);
        fflush(cfg->log);
    }
    return DT_OK;
}

static dt_status write_train_summaries(dt_fit_ckpt *k, dt_optim *o, int64_t step, double loss,
                                       double accuracy)
{
    double now = dt_clock_now();
    double rate = (double)(step - k->last_summary_step) / (now - k->last_summary_t);
    k->last_summary_t = now;
    k->last_summary_step = step;
    dt_status st;
    if ((st = dt_summary_scalar(k->train_sw, "loss", step, (float)loss)) ||
        (st = dt_summary_scalar(k->train_sw, "accuracy", step, (float)accuracy)) ||
        (st = dt_summary_scalar(k->train_sw, "learning_rate", step, dt_optim_current_lr(o))) ||
        (st = dt_summary_scalar(k->train_sw, "global_step/sec", step, (float)rate)))
        return st;
    return dt_summary_flush(k->train_sw);
}

bool dt_fit_ckpt_saves_after(dt_fit_ckpt *k, const dt_fit_config *cfg, int64_t step)
{
    k->model_due_step = -1;
    if (!k->writer)
        return false;
    bool backup = k->have_backup && cfg->backup_freq > 0 && step % cfg->backup_freq == 0;
    bool model = k->have_model &&
                 (cfg->save_checkpoints_steps > 0
                      ? step % cfg->save_checkpoints_steps == 0
                      : cfg->save_checkpoints_secs > 0.0 &&
                            dt_clock_now() - k->last_save >= cfg->save_checkpoints_secs);
    if (model)
        k->model_due_step = step;
    return backup || model;
}

dt_status dt_fit_ckpt_after_step(dt_fit_ckpt *k, const dt_fit_config *cfg, dt_model *m,
                                 dt_optim *o, const dt_fit_position *pos, double batch_loss,
                                 double batch_accuracy, dt_fit_result *r)
{
    if (!k->writer)
        return DT_OK;
    dt_status st;
    if (k->have_backup && cfg->backup_freq > 0 && pos->step % cfg->backup_freq == 0 &&
        (st = save(&k->backup, false, cfg, m, o, pos, false, r)))
        return dt_error_prefix(st, "backup at step %" PRId64, pos->step);
    if (k->model_due_step == pos->step) {
        if ((st = save(&k->model, true, cfg, m, o, pos, false, r)))
            return st;
        k->last_save = dt_clock_now();
        k->last_saved_step = pos->step;
    }
    if (k->train_sw && pos->step % cfg->save_summary_steps == 0 &&
        (st = write_train_summaries(k, o, pos->step, batch_loss, batch_accuracy)))
        return st;
    return DT_OK;
}

dt_status dt_fit_ckpt_after_epoch(dt_fit_ckpt *k, const dt_fit_config *cfg, dt_model *m,
                                  dt_optim *o, const dt_fit_position *pos, dt_fit_result *r)
{
    if (!k->writer || !k->have_backup || cfg->backup_freq > 0)
        return DT_OK;
    dt_status st = save(&k->backup, false, cfg, m, o, pos, false, r);
    return st ? dt_error_prefix(st, "backup after epoch %" PRId64, pos->epoch) : DT_OK;
}

dt_status dt_fit_ckpt_final(dt_fit_ckpt *k, const dt_fit_config *cfg, dt_model *m, dt_optim *o,
                            const dt_fit_position *pos, dt_fit_result *r)
{
    if (!k->writer || !k->have_model)
        return DT_OK;
    /* Saved again even at a step already saved, so the last file carries final = 1. */
    dt_status st = save(&k->model, k->last_saved_step != pos->step, cfg, m, o, pos, true, r);
    if (st == DT_OK)
        k->last_saved_step = pos->step;
    return st;
}

dt_status dt_fit_ckpt_eval_summary(dt_fit_ckpt *k, int64_t step, double loss, double accuracy)
{
    if (!k->eval_sw)
        return DT_OK;
    dt_status st;
    if ((st = dt_summary_scalar(k->eval_sw, "loss", step, (float)loss)) ||
        (st = dt_summary_scalar(k->eval_sw, "accuracy", step, (float)accuracy)))
        return st;
    return dt_summary_flush(k->eval_sw);
}

/* ---- Restoring ---- */

/* What rank 0 tells the others after reading a checkpoint: also when it failed, so that they
 * stop at once with its reason instead of waiting for variables that never come. */
typedef struct {
    int64_t failed;        /* rank 0's status, DT_OK when it read the checkpoint or found none */
    char error[768];       /* its message */
    int64_t found;
    dt_fit_position pos;
    int64_t optimizer_iterations;
    uint64_t dropout_position;
} restore_msg;

static dt_status meta_i64(const dt_ckpt *c, const char *key, int64_t *out)
{
    const char *v = dt_ckpt_meta_get(c, key);
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !*v || *end || errno)
        return dt_error(DT_ERR_FORMAT, "%s: __metadata__.%s: %s", dt_ckpt_path(c), key,
                        v ? "not an integer" : "missing");
    *out = x;
    return DT_OK;
}

static dt_status meta_f64(const dt_ckpt *c, const char *key, double *out)
{
    const char *v = dt_ckpt_meta_get(c, key);
    char *end;
    double x = v ? strtod(v, &end) : 0.0;
    if (!v || !*v || *end)
        return dt_error(DT_ERR_FORMAT, "%s: __metadata__.%s: %s", dt_ckpt_path(c), key,
                        v ? "not a number" : "missing");
    *out = x;
    return DT_OK;
}

static dt_status read_position(const dt_ckpt *c, restore_msg *msg)
{
    dt_fit_position *p = &msg->pos;
    int64_t dropout = 0;
    dt_status st;
    if ((st = meta_i64(c, "global_step", &p->step)) || (st = meta_i64(c, "epoch", &p->epoch)) ||
        (st = meta_i64(c, "step_in_epoch", &p->in_epoch)) ||
        (st = meta_f64(c, "epoch_loss", &p->epoch_loss)) ||
        (st = meta_i64(c, "epoch_correct", &p->epoch_correct)) ||
        (st = meta_i64(c, "epoch_samples", &p->epoch_samples)) ||
        (st = meta_i64(c, "samples", &p->samples)) ||
        (st = meta_f64(c, "early_stopping_best", &p->best)) ||
        (st = meta_i64(c, "early_stopping_waited", &p->waited)) ||
        (st = meta_i64(c, "optimizer_iterations", &msg->optimizer_iterations)) ||
        (st = meta_i64(c, "dropout_position", &dropout)))
        return st;
    if (p->step < 0 || p->epoch < 0 || p->in_epoch < 0 || msg->optimizer_iterations < 0 ||
        dropout < 0)
        return dt_error(DT_ERR_FORMAT, "%s: __metadata__: a negative step or position",
                        dt_ckpt_path(c));
    msg->dropout_position = (uint64_t)dropout;
    return DT_OK;
}

/* Checks that c was written for this model and optimizer, then loads it into m and o. */
static dt_status apply_checkpoint(const dt_ckpt *c, const dt_fit_config *cfg, dt_model *m,
                                  dt_optim *o, restore_msg *msg)
{
    char *spec = dt_model_spec_to_json(dt_model_spec_of(m));
    if (!spec)
        return dt_error(DT_ERR_NOMEM, "no memory for the model spec");
    const char *saved = dt_ckpt_meta_get(c, "model_spec");
    bool same = saved && strcmp(saved, spec) == 0;
    free(spec);
    if (!same)
        return dt_error(DT_ERR_INVALID, "%s: written for another model (%s): move it away or "
                        "train this model in another directory", dt_ckpt_path(c),
                        saved ? saved : "no model_spec in its metadata");
    const char *opt = dt_ckpt_meta_get(c, "optimizer");
    if (!opt || strcmp(opt, dt_opt_kind_name(o->cfg.kind)) != 0)
        return dt_error(DT_ERR_INVALID, "%s: written with optimizer %s, this run uses %s",
                        dt_ckpt_path(c), opt ? opt : "(none)", dt_opt_kind_name(o->cfg.kind));
    /* The input position counts batches: it means the same data only at the same global batch
     * over the same number of workers. */
    int64_t batch = 0, workers = 1;
    dt_status st = meta_i64(c, "batch_size", &batch);
    if (st == DT_OK && dt_ckpt_meta_get(c, "workers"))
        st = meta_i64(c, "workers", &workers);
    int here = distributed(cfg) ? cfg->comm->size : 1;
    if (st == DT_OK && (batch != cfg->batch_size || workers != here))
        st = dt_error(DT_ERR_INVALID, "%s: written at global batch %" PRId64 " over %" PRId64
                      " worker(s), this run has %d over %d: its input position would not match",
                      dt_ckpt_path(c), batch, workers, cfg->batch_size, here);
    if (st == DT_OK)
        st = read_position(c, msg);
    if (st || (st = dt_ckpt_restore_arena(c, dt_model_params(m))))
        return st;
    if (o->state.n_views > 0 && (st = dt_ckpt_restore_arena(c, &o->state)))
        return st;
    const char *seed = dt_ckpt_meta_get(c, "seed");
    char mine[32];
    snprintf(mine, sizeof mine, "%" PRIu64, cfg->seed);
    if (cfg->log && (!seed || strcmp(seed, mine) != 0))
        fprintf(cfg->log, "dtrain: warning: %s was written with seed %s, this run has %s: the "
                "data order will differ from the interrupted run's\n", dt_ckpt_path(c),
                seed ? seed : "(none)", mine);
    msg->found = 1;
    return DT_OK;
}

static dt_status read_latest(const dt_fit_config *cfg, dt_model *m, dt_optim *o, restore_msg *msg)
{
    /* A backup, or the model directory's own progress, comes before a named starting point:
     * a rerun after a crash must not start over from it. */
    const char *dirs[2] = {cfg->backup_dir, cfg->model_dir};
    for (int i = 0; i < 2; i++) {
        if (!dirs[i])
            continue;
        dt_ckpt *c = NULL;
        dt_status st = dt_ckpt_open_latest(dirs[i], cfg->log, &c);
        if (st == DT_END)
            continue;
        if (st)
            return st;
        st = apply_checkpoint(c, cfg, m, o, msg);
        if (st == DT_OK && cfg->log) {
            fprintf(cfg->log, "Restoring parameters from %s (global step %" PRId64 ")\n",
                    dt_ckpt_path(c), msg->pos.step);
            fflush(cfg->log);
        }
        dt_ckpt_close(c);
        return st;
    }
    if (cfg->restore_path) {
        dt_ckpt *c = NULL;
        dt_status st = dt_ckpt_open(cfg->restore_path, &c);
        if (st == DT_OK && (st = apply_checkpoint(c, cfg, m, o, msg)) == DT_OK && cfg->log)
            fprintf(cfg->log, "Restoring parameters from %s (global step %" PRId64 ")\n",
                    dt_ckpt_path(c), msg->pos.step);
        dt_ckpt_close(c);
        return st;
    }
    return DT_OK;
}

dt_status dt_fit_ckpt_restore(dt_fit_ckpt *k, const dt_fit_config *cfg, dt_model *m, dt_optim *o,
                              dt_fit_position *pos, bool *resumed)
{
    *resumed = false;
    if (!cfg->backup_dir && !cfg->model_dir && !cfg->restore_path)
        return DT_OK;
    restore_msg msg;
    memset(&msg, 0, sizeof msg);
    dt_status st = k->writer ? read_latest(cfg, m, o, &msg) : DT_OK;
    if (st && !distributed(cfg))
        return st;
    if (st) {
        msg.failed = st;
        snprintf(msg.error, sizeof msg.error, "%s", dt_last_error());
    }
    if (distributed(cfg)) {
        dt_status sent = dt_comm_broadcast(cfg->comm, &msg, sizeof msg, 0);
        if (st)
            return dt_error((dt_status)msg.failed, "%s", msg.error);
        if ((st = sent))
            return dt_error_prefix(st, "sharing the restored position");
        if (msg.failed)
            return dt_error((dt_status)msg.failed, "worker 0 could not restore a checkpoint: %s",
                            msg.error);
        /* central_storage's replicas share rank 0's variables, and only it has slots. */
        if (msg.found && !cfg->central_storage) {
            dt_arena *p = dt_model_params(m);
            if ((st = dt_comm_broadcast(cfg->comm, p->data, p->n_elems * sizeof(float), 0)) ||
                (o->state.n_elems > 0 &&
                 (st = dt_comm_broadcast(cfg->comm, o->state.data,
                                         o->state.n_elems * sizeof(float), 0))))
                return dt_error_prefix(st, "sharing the restored variables");
        }
    }
    if (!msg.found)
        return DT_OK;
    *pos = msg.pos;
    o->iterations = msg.optimizer_iterations;
    dt_model_set_dropout_position(m, msg.dropout_position);
    k->last_saved_step = msg.pos.step;
    k->last_summary_step = msg.pos.step;
    *resumed = true;
    return DT_OK;
}
