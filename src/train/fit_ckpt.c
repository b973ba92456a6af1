/* A fit's state in checkpoints: saved with the position, restored and shared (see fit_ckpt.h). */
#include "fit_ckpt.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/clock.h"
#include "dtrain/log.h"
#include "dtrain/comm.h"
#include "ps_ckpt.h"

/* ---- The tensors ---- */

/* What a checkpoint holds: the parameters, the optimizer's slots (plain SGD has none), and each
 * table with its slots, as arenas over their storage (a feature-spec model has many tables:
 * the arrays are sized for the model). */
typedef struct {
    const dt_arena **list;
    dt_arena *tables;
    int n, n_tables;
    dt_ckpt_tensor *dynamic; /* dynamic tables' tensors (keymap.h) */
    int n_dynamic;
} ckpt_arenas;

static void release_arenas(ckpt_arenas *a)
{
    for (int i = 0; i < a->n_tables; i++)
        dt_table_arena_release(&a->tables[i]);
    free(a->tables);
    free(a->list);
    free(a->dynamic);
    memset(a, 0, sizeof *a);
}

/* Room for 3 arenas and every table's (with its slots). */
static dt_status alloc_arenas(dt_model *m, ckpt_arenas *a)
{
    memset(a, 0, sizeof *a);
    size_t n = 1;
    for (int t = 0; t < dt_model_num_tables(m); t++)
        n += 1 + (size_t)dt_model_table(m, t)->n_slots;
    a->tables = calloc(n, sizeof *a->tables);
    a->list = calloc(n + 3, sizeof *a->list);
    a->dynamic = calloc((size_t)(dt_model_num_tables(m) + 1) * DT_KEYMAP_TENSORS,
                        sizeof *a->dynamic);
    if (!a->tables || !a->list || !a->dynamic) {
        release_arenas(a);
        return dt_error(DT_ERR_NOMEM, "no memory for a checkpoint's tensors");
    }
    return DT_OK;
}

/* The fixed tables' arenas (with their slots when slots) appended to a. */
static dt_status table_arenas(dt_model *m, bool slots, ckpt_arenas *a)
{
    for (int t = 0; t < dt_model_num_tables(m); t++) {
        if (dt_model_keymap(m, t))
            continue;
        const dt_table *tab = dt_model_table(m, t);
        for (int s = -1; s < (slots ? tab->n_slots : 0); s++) {
            dt_arena *ar = &a->tables[a->n_tables];
            dt_status st = dt_table_arena(tab, s, ar);
            if (st)
                return st;
            a->n_tables++;
            a->list[a->n++] = ar;
        }
    }
    return DT_OK;
}

/* At step `step`: each dynamic table's eviction pass run whole and its rows packed, then its
 * tensors appended to a. */
static dt_status dynamic_tensors(dt_model *m, int64_t step, bool slots, ckpt_arenas *a)
{
    dt_keymap *maps[DT_MAX_COLUMN_TABLES];
    int n_maps = dt_model_keymaps(m, maps, DT_MAX_COLUMN_TABLES);
    for (int i = 0; i < n_maps; i++) {
        dt_keymap_evict_all(maps[i], step);
        dt_keymap_compact(maps[i]);
    }
    for (int t = 0; t < dt_model_num_tables(m); t++) {
        dt_keymap *k = dt_model_keymap(m, t);
        if (!k)
            continue;
        int n = 0;
        int i = dt_keymap_table_index(k, dt_model_table(m, t)->name);
        dt_status st = dt_keymap_tensors(k, i, slots, a->dynamic + a->n_dynamic, &n);
        if (st)
            return st;
        a->n_dynamic += n;
    }
    return DT_OK;
}

dt_status dt_ckpt_restore_tables(const dt_ckpt *c, dt_model *m, bool slots)
{
    if (dt_ckpt_is_sharded(c)) /* the tables are in the ps tasks' files */
        return dt_ps_ckpt_restore(c, m, NULL);
    ckpt_arenas a;
    dt_status st = alloc_arenas(m, &a);
    if (st)
        return st;
    st = table_arenas(m, slots, &a);
    for (int i = 0; st == DT_OK && i < a.n_tables; i++)
        st = dt_ckpt_restore_arena(c, &a.tables[i]);
    dt_keymap *maps[DT_MAX_COLUMN_TABLES];
    int n_maps = dt_model_keymaps(m, maps, DT_MAX_COLUMN_TABLES);
    for (int i = 0; st == DT_OK && i < n_maps; i++)
        st = dt_keymap_restore(maps[i], c, slots);
    release_arenas(&a);
    return st;
}

/* ---- Saving ---- */

enum { N_META = 19, META_VALUE_CAP = 48 };

dt_status dt_fit_save(dt_ckpt_manager *mgr, bool announce, const dt_fit_config *cfg, int replicas,
                      dt_model *m, dt_optim *o, const dt_fit_position *p, bool final,
                      dt_fit_result *r)
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
    META_F("learning_rate", "%.9g", (double)dt_lr_schedule_at(&o->cfg, o->iterations));
    META_F("seed", "%" PRIu64, cfg->seed);
    META_F("dropout_position", "%" PRIu64, dt_model_dropout_position(m));
    META_F("batch_size", "%d", cfg->batch_size);
    META_F("workers", "%d", replicas);
    META_F("final", "%d", final ? 1 : 0);
    META_F("input_position", "{\"iteration\": %" PRId64, p->epoch);
    /* The input's position: the iteration of the dataset (the epoch) and the batches of it read. */
    snprintf(v[n - 1] + strlen(v[n - 1]), META_VALUE_CAP - strlen(v[n - 1]),
             ", \"batches\": %" PRId64 "}", p->in_epoch);
#undef META_F
    meta[n++] = (dt_ckpt_meta){"model_spec", spec};
    ckpt_arenas a;
    char path[4400];
    dt_status st = alloc_arenas(m, &a);
    if (st) {
        free(spec);
        return st;
    }
    a.list[a.n++] = dt_model_params(m);
    if (o->state.n_views > 0) /* plain SGD has no slots */
        a.list[a.n++] = &o->state;
    if (dt_model_state(m)->n_views > 0) /* batch normalisation's moving averages */
        a.list[a.n++] = dt_model_state(m);
    st = table_arenas(m, true, &a);
    if (st == DT_OK)
        st = dynamic_tensors(m, p->step, true, &a);
    if (st == DT_OK)
        st = dt_ckpt_manager_save_ex(mgr, p->step, a.list, a.n, a.dynamic, a.n_dynamic, meta, n,
                                     path, sizeof path);
    release_arenas(&a);
    free(spec);
    if (st)
        return st;
    r->checkpoints++;
    r->checkpoint_seconds += dt_clock_now() - t0;
    if (announce && cfg->log)
        dt_log_to(cfg->log, DT_LOG_INFO, "Saving checkpoints for %" PRId64 " into %s.", p->step,
                  path);
    dt_keymap_stats k;
    if (announce && cfg->log && dt_model_dynamic_stats(m, &k))
        dt_log_to(cfg->log, DT_LOG_INFO, "Dynamic tables at step %" PRId64 ": %lld live keys, "
                  "%lld admitted, %lld evicted, %lld being counted, %.1f bytes per live key",
                  p->step, (long long)k.live, (long long)k.admitted, (long long)k.evicted,
                  (long long)k.counting, dt_keymap_bytes_per_key(&k));
    return DT_OK;
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
static dt_status apply_checkpoint(const dt_ckpt *c, const dt_fit_config *cfg, int here,
                                  dt_model *m, dt_optim *o, restore_msg *msg)
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
    if (st == DT_OK && (batch != cfg->batch_size || workers != here))
        st = dt_error(DT_ERR_INVALID, "%s: written at global batch %" PRId64 " over %" PRId64
                      " worker(s), this run has %d over %d: its input position would not match",
                      dt_ckpt_path(c), batch, workers, cfg->batch_size, here);
    if (st == DT_OK)
        st = read_position(c, msg);
    if (st || (st = dt_ckpt_restore_arena(c, dt_model_params(m))))
        return st;
    /* A sharded checkpoint (parameter-server training) keeps the tables and the optimizer's
     * slots in its ps tasks' files. */
    bool sharded = dt_ckpt_is_sharded(c);
    if (o->state.n_views > 0 && !sharded && (st = dt_ckpt_restore_arena(c, &o->state)))
        return st;
    if ((dt_model_state(m)->n_views > 0 && (st = dt_ckpt_restore_arena(c, dt_model_state(m)))) ||
        (st = sharded ? dt_ps_ckpt_restore(c, m, o) : dt_ckpt_restore_tables(c, m, true)))
        return st;
    const char *seed = dt_ckpt_meta_get(c, "seed");
    char mine[32];
    snprintf(mine, sizeof mine, "%" PRIu64, cfg->seed);
    if (cfg->log && (!seed || strcmp(seed, mine) != 0))
        dt_log_to(cfg->log, DT_LOG_WARN, "dtrain: warning: %s was written with seed %s, this run "
                  "has %s: the data order will differ from the interrupted run's",
                  dt_ckpt_path(c), seed ? seed : "(none)", mine);
    msg->found = 1;
    return DT_OK;
}

static dt_status read_latest(const dt_fit_config *cfg, int replicas, dt_model *m, dt_optim *o,
                             restore_msg *msg)
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
        st = apply_checkpoint(c, cfg, replicas, m, o, msg);
        if (st == DT_OK && cfg->log)
            dt_log_to(cfg->log, DT_LOG_INFO, "Restoring parameters from %s (global step %" PRId64
                      ")", dt_ckpt_path(c), msg->pos.step);
        dt_ckpt_close(c);
        return st;
    }
    if (cfg->restore_path) {
        dt_ckpt *c = NULL;
        dt_status st = dt_ckpt_open(cfg->restore_path, &c);
        if (st == DT_OK && (st = apply_checkpoint(c, cfg, replicas, m, o, msg)) == DT_OK && cfg->log)
            dt_log_to(cfg->log, DT_LOG_INFO, "Restoring parameters from %s (global step %" PRId64
                      ")", dt_ckpt_path(c), msg->pos.step);
        dt_ckpt_close(c);
        return st;
    }
    return DT_OK;
}

/* What the chief read, to every replica: its fields as a typed message, then its error's text
 * when it failed. */
static dt_status share_restore(dt_replica *r, restore_msg *m)
{
    dt_fit_position *p = &m->pos;
    int64_t ints[11] = {m->failed, m->found, p->step, p->epoch, p->in_epoch, p->epoch_correct,
                        p->epoch_samples, p->samples, p->waited, m->optimizer_iterations,
                        (int64_t)m->dropout_position};
    double reals[2] = {p->epoch_loss, p->best};
    dt_status st = dt_replica_share_fields(r, ints, 11, reals, 2);
    if (st)
        return st;
    m->failed = ints[0], m->found = ints[1], p->step = ints[2], p->epoch = ints[3];
    p->in_epoch = ints[4], p->epoch_correct = ints[5], p->epoch_samples = ints[6];
    p->samples = ints[7], p->waited = ints[8], m->optimizer_iterations = ints[9];
    m->dropout_position = (uint64_t)ints[10];
    p->epoch_loss = reals[0], p->best = reals[1];
    if (m->failed && (st = dt_replica_broadcast(r, m->error, sizeof m->error)) == DT_OK)
        m->error[sizeof m->error - 1] = '\0';
    return st;
}

dt_status dt_fit_restore(dt_replica *r, const dt_fit_config *cfg, dt_model *m, dt_optim *o,
                         dt_fit_position *pos, bool *resumed)
{
    *resumed = false;
    if (!cfg->backup_dir && !cfg->model_dir && !cfg->restore_path)
        return DT_OK;
    restore_msg msg;
    memset(&msg, 0, sizeof msg);
    dt_status st = dt_replica_is_chief(r) ? read_latest(cfg, dt_replica_count(r), m, o, &msg)
                                          : DT_OK;
    if (st && !dt_replica_distributed(r))
        return st;
    if (st) {
        msg.failed = st;
        snprintf(msg.error, sizeof msg.error, "%s", dt_last_error());
    }
    if (dt_replica_distributed(r)) {
        dt_status sent = share_restore(r, &msg);
        if (st)
            return dt_error((dt_status)msg.failed, "%s", msg.error);
        if ((st = sent))
            return dt_error_prefix(st, "sharing the restored position");
        if (msg.failed)
            return dt_error((dt_status)msg.failed, "worker 0 could not restore a checkpoint: %s",
                            msg.error);
        if (msg.found && (st = dt_replica_restored(r, m, o)))
            return st;
    }
    if (!msg.found)
        return DT_OK;
    *pos = msg.pos;
    o->iterations = msg.optimizer_iterations;
    dt_model_set_tables_step(m, msg.optimizer_iterations);
    dt_model_set_dropout_position(m, msg.dropout_position);
    *resumed = true;
    return DT_OK;
}
