/* Parameter-server training: the coordinator's loop (see ps_coord.h, ps_train.h). It places the
 * variables on the ps tasks, restores the latest checkpoint, starts a thread per worker, and then
 * follows the job: each result the workers' threads hand over goes through fit's callbacks
 * (callback.h) as a step of the global count, so progress, Estimator's log, validation and
 * periodic evaluation (on the variables read back from the ps tasks), TensorBoard summaries,
 * checkpoints, early stopping and a program's own callbacks behave and take the flags they
 * take in fit; and every second it pings the ps tasks, waiting for a lost one. An
 * epoch here is a pass's worth of global steps (steps_per_epoch, else the training set over the
 * batch size), as Keras counts the epochs of a parameter-server fit. Files and events are
 * written by this loop alone, never under the lock the workers' threads take. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callback.h"
#include "../core/clock.h"
#include "dtrain/log.h"
#include "ps_ckpt.h"
#include "ps_coord.h"
#include "ps_train.h"

/* Whether a sharded checkpoint's shard files are all there and intact (each is read and its
 * checksum checked; the restore then reads them again, from the page cache). */
static dt_status shards_whole(const dt_ckpt *ck)
{
    if (!dt_ckpt_is_sharded(ck))
        return DT_OK;
    dt_ckpt **files;
    int n;
    dt_status st = dt_ckpt_open_shards(ck, &files, &n);
    if (st == DT_OK)
        dt_ckpt_close_shards(files, n);
    return st;
}

/* The model directory's newest checkpoint that is whole: a sharded one with a shard file missing
 * or damaged (a disk that lost it, a copy cut short) is passed over, saying what was wrong, for
 * the one before it. DT_END when there is none. */
static dt_status open_whole_latest(const char *dir, FILE *log, dt_ckpt **out)
{
    int64_t before = INT64_MAX;
    for (;;) {
        dt_status st = dt_ckpt_open_latest_before(dir, before, log, out);
        if (st)
            return st;
        if ((st = shards_whole(*out)) == DT_OK || st == DT_ERR_NOMEM)
            return st;
        const char *path = dt_ckpt_path(*out), *slash = strrchr(path, '/');
        int64_t step = dt_ckpt_step_of_name(slash ? slash + 1 : path);
        dt_log_to(log, DT_LOG_WARN, "dtrain: warning: %s; restoring the checkpoint before it",
                  dt_last_error());
        dt_ckpt_close(*out);
        *out = NULL;
        if (step <= 0)
            return dt_error(DT_END, "%s: no whole checkpoint", dir);
        before = step;
    }
}

/* A part of a sharded checkpoint's dynamic table to the ps tasks its keys belong on. */
static dt_status assign_part(void *arg, const dt_ps_ckpt_part *p)
{
    dt_ps_client *ps = arg;
    dt_status st = DT_OK;
    if (p->rows)
        return dt_ps_client_assign_keyed(ps, (uint32_t)p->table, p->keys, p->counts,
                                         p->last_seen, p->n, p->dim, p->rows, p->slots,
                                         p->n_slots);
    if (p->counting_keys)
        st = dt_ps_client_assign_keyed(ps, (uint32_t)p->table, p->counting_keys,
                                       p->counting_counts, p->counting_last_seen, p->n_counting,
                                       0, NULL, NULL, 0);
    if (st == DT_OK && p->bloom)
        st = dt_ps_client_assign_bloom(ps, (uint32_t)p->table, p->bloom, p->bloom_bytes);
    return st;
}

/* The dynamic tables of checkpoint c onto the ps tasks: a sharded one's parts as they are, each
 * table's keys with its own counts and steps (the ps keeps each table's keys apart), else the
 * key map one_device wrote (loaded into m). */
static dt_status assign_dynamic(const dt_ckpt *c, dt_ps_client *ps, dt_model *m, int64_t step)
{
    bool any = false;
    for (int t = 0; t < dt_model_num_tables(m); t++)
        any = any || dt_model_keymap(m, t);
    if (!any)
        return DT_OK;
    dt_status st = DT_OK;
    if (dt_ckpt_is_sharded(c))
        st = dt_ps_ckpt_dynamic_parts(c, m, assign_part, ps);
    for (int t = 0; t < dt_model_num_tables(m) && st == DT_OK; t++) {
        dt_keymap *km = dt_model_keymap(m, t);
        if (km && dt_ckpt_is_sharded(c))
            st = dt_ps_client_assign_keyed_end(ps, (uint32_t)t, step);
        else if (km)
            st = dt_ps_client_assign_keys(ps, (uint32_t)t, km, dt_model_table(m, t), step);
    }
    return st;
}

/* The checkpoint to start from: the model directory's latest whole one (a coordinator started
 * again resumes from it, as Estimator does), else --restore-checkpoint. Its variables and their
 * optimizer slots go to the ps tasks, however many there are now; *step: where the steps go on
 * from (0: no checkpoint). */
static dt_status restore_start(const dt_train_config *c, dt_ps_client *ps, dt_model *m,
                               int n_ps, int64_t *step, int workers, int64_t *positions,
                               bool *have_positions)
{
    *step = 0;
    *have_positions = false;
    dt_ckpt *ck = NULL;
    dt_status st = DT_END;
    if (c->fit.model_dir)
        st = open_whole_latest(c->fit.model_dir, c->fit.log, &ck);
    if (st == DT_END && c->fit.restore_path)
        st = dt_ckpt_open(c->fit.restore_path, &ck);
    if (st == DT_END)
        return DT_OK;
    if (st)
        return st;
    if (c->ps.mode == DT_PS_HYBRID) {
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: warning: --ps-mode hybrid does not restore %s "
                  "(its dense variables live on the workers): training starts afresh",
                  dt_ckpt_path(ck));
        dt_ckpt_close(ck);
        return DT_OK;
    }
    double t0 = dt_clock_now();
    dt_optim o;
    dt_optim_init(&o);
    st = dt_optim_setup(&o, &c->optim, dt_model_params(m));
    if (st == DT_OK)
        st = dt_ps_ckpt_load(ck, m, &o, step);
    for (int t = 0; t < dt_model_num_tables(m) && st == DT_OK; t++)
        if (!dt_model_keymap(m, t))
            st = dt_ps_client_assign_table(ps, (uint32_t)t, dt_model_table(m, t));
    if (st == DT_OK)
        st = assign_dynamic(ck, ps, m, *step);
    if (st == DT_OK)
        st = dt_ps_client_assign_dense(ps, dt_model_params(m), &o);
    /* Each worker reads on from where its data stood, when as many workers read it. */
    dt_status pos = st ? DT_OK : dt_ps_ckpt_positions(ck, workers, positions);
    if (pos == DT_OK)
        *have_positions = st == DT_OK;
    else if (pos != DT_END)
        st = pos;
    if (st == DT_OK && c->fit.log)
        dt_log_to(c->fit.log, DT_LOG_INFO, "Restoring parameters from %s (global step %lld) onto "
                  "%d ps task%s (%.2f s)", dt_ckpt_path(ck), (long long)*step, n_ps,
                  n_ps == 1 ? "" : "s", dt_clock_now() - t0);
    if (st)
        dt_error_prefix(st, "restoring %s", dt_ckpt_path(ck));
    dt_optim_free(&o);
    dt_ckpt_close(ck);
    return st;
}


/* A read back's request: at most this many rows, of at most this many bytes. */
#define READ_BACK_MAX_ROWS ((size_t)1 << 20)
#define READ_BACK_BYTES ((size_t)64 << 20)

/* A model's dynamic tables read back: each map emptied, then every table's live keys merged
 * in from the ps tasks (their rows; a key one table holds and another not gets the other's
 * initial row). */
static dt_status read_back_dynamic(dt_ps_client *ps, dt_model *m)
{
    dt_keymap *maps[DT_MAX_COLUMN_TABLES];
    int n_maps = dt_model_keymaps(m, maps, DT_MAX_COLUMN_TABLES);
    for (int i = 0; i < n_maps; i++)
        dt_keymap_clear(maps[i]);
    dt_status st = DT_OK;
    for (int t = 0; t < dt_model_num_tables(m) && st == DT_OK; t++) {
        dt_keymap *km = dt_model_keymap(m, t);
        const char *name = dt_model_table(m, t)->name;
        if (km)
            st = dt_ps_client_read_keys(ps, (uint32_t)t, km, dt_keymap_table_index(km, name),
                                        false, name);
    }
    for (int i = 0; i < n_maps; i++)
        dt_keymap_merge_end(maps[i]);
    return st;
}

/* Reads every variable back from the ps tasks into m: dense, then the tables, 64 MiB of rows
 * at a time. */
static dt_status read_back(dt_ps_client *ps, dt_model *m, bool dense)
{
    dt_status st = dense ? dt_ps_client_pull_dense(ps, dt_model_params(m)->data) : DT_OK;
    if (st == DT_OK)
        st = read_back_dynamic(ps, m);
    size_t cap = READ_BACK_MAX_ROWS;
    int64_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return dt_error(DT_ERR_NOMEM, "no memory to read the tables back");
    for (int t = 0; t < dt_model_num_tables(m) && st == DT_OK; t++) {
        dt_table *tab = dt_model_table(m, t);
        if (dt_model_keymap(m, t))
            continue;
        /* Rows by bytes: one reply stays far below a message's limit, however wide a row. */
        size_t chunk = READ_BACK_BYTES / ((size_t)tab->dim * sizeof(float));
        chunk = chunk < 1 ? 1 : chunk > cap ? cap : chunk;
        for (int64_t lo = 0; lo < tab->rows && st == DT_OK; lo += (int64_t)chunk) {
            size_t n = (size_t)(tab->rows - lo) < chunk ? (size_t)(tab->rows - lo) : chunk;
            for (size_t i = 0; i < n; i++)
                ids[i] = lo + (int64_t)i;
            st = dt_ps_client_pull(ps, (uint32_t)t, ids, n, dt_table_row(tab, lo));
        }
    }
    free(ids);
    return st;
}

/* A PING to every ps task each second, over connections of its own, whatever the loop is doing
 * (a long evaluation, a save): the ps tasks know the coordinator by its messages, and give up
 * after --coordinator-timeout seconds without one. A failed PING is left for the loop to act
 * on (lost), and the connections made again for the next. */
typedef struct {
    dt_ps_client *client;
    pthread_t thread;
    bool running;
    int over; /* atomic: the loop has ended */
    int lost; /* atomic: a PING failed since the loop last looked */
} heartbeat;

static void *beat(void *arg)
{
    heartbeat *h = arg;
    while (!__atomic_load_n(&h->over, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < 10 && !__atomic_load_n(&h->over, __ATOMIC_ACQUIRE); i++)
            dt_sleep(0.1);
        if (__atomic_load_n(&h->over, __ATOMIC_ACQUIRE))
            break;
        if (dt_ps_client_broken(h->client))
            dt_ps_client_reconnect(h->client, 1.0);
        else if (dt_ps_client_ping(h->client) != DT_OK)
            __atomic_store_n(&h->lost, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static dt_status heartbeat_start(heartbeat *h, const ps_cluster *pc, const dt_train_config *c)
{
    dt_status st = dt_ps_client_open(&pc->me, &pc->cl, c->comm.connect_timeout, 5.0, &h->client);
    if (st)
        return dt_error_prefix(st, "the coordinator's heartbeat to the ps tasks");
    if (pthread_create(&h->thread, NULL, beat, h) != 0)
        return dt_error(DT_ERR_IO, "cannot start the coordinator's heartbeat thread");
    h->running = true;
    return DT_OK;
}

static void heartbeat_stop(heartbeat *h)
{
    __atomic_store_n(&h->over, 1, __ATOMIC_RELEASE);
    if (h->running)
        pthread_join(h->thread, NULL);
    dt_ps_client_close(h->client);
}

typedef struct {
    const dt_train_config *c;
    dt_model *m;
    ps_cluster pc;
    dt_ps_client *ps;
    heartbeat beat;
    int n_ps;
    ps_coord co;
    bool co_ready;
    /* fit's callbacks, as the coordinator runs them */
    dt_fit_config cfg;
    dt_fit_ctx ctx;
    dt_callbacks cbs;
    dt_replica *alone;
    dt_optim o;             /* the optimizer's configuration and step count, for the schedule */
    dt_fit_remote remote;   /* the variables on the ps tasks, as the callbacks reach them */
    int64_t *positions;     /* the restored checkpoint's data positions, one per worker */
    bool have_positions;
    int64_t epoch_steps;    /* the global steps of an epoch (0: unknown, one epoch throughout) */
    bool in_epoch;          /* an epoch begun and not ended */
    bool callbacks_failed;  /* a callback failed: the job is failing, no more are run */
} ps_run;

/* A sparse cluster's worker coordinates itself: worker 0 leads (it defines the variables,
 * writes the checkpoints, reads the model back and stops the ps tasks), the others follow. */
static bool follows(const ps_run *r) { return r->pc.cl.sparse && !r->pc.cl.is_chief; }

/* How often a sparse cluster's worker looks at ps 0 while it waits, and says it waits. */
#define SPARSE_POLL_SECONDS 0.5
#define SPARSE_SAY_SECONDS 10.0

/* A following worker: until worker 0 has made the variables ready on the ps tasks (defined,
 * or restored from its checkpoint), within --connect-timeout (the cluster forming), as TF
 * 1.x's workers wait for the chief to initialise the model. */
static dt_status await_ready(ps_run *r)
{
    const dt_train_config *c = r->c;
    double t0 = dt_clock_now(), said = t0;
    for (;;) {
        dt_ps_steps g;
        dt_status st = dt_ps_client_take_steps(r->ps, 0, &g);
        if (st)
            return dt_error_prefix(st, "asking ps:0 for the job's state");
        if (g.ready)
            return DT_OK;
        double now = dt_clock_now();
        if (now - t0 >= c->comm.connect_timeout)
            return dt_error(DT_ERR_TIMEOUT, "worker:0 has not made the variables ready on the ps "
                            "tasks within %.0f s (--connect-timeout): a sparse cluster's "
                            "worker 0 defines them", c->comm.connect_timeout);
        if (now - said >= SPARSE_SAY_SECONDS) {
            dt_log_to(NULL, DT_LOG_WARN, "dtrain: waiting for worker:0 to define the variables "
                      "on the ps tasks (%.0f s, up to %.0f s: --connect-timeout)", now - t0,
                      c->comm.connect_timeout);
            said = now;
        }
        dt_sleep(SPARSE_POLL_SECONDS);
    }
}

/* A sparse cluster's worker at its end: it leaves the job's count; worker 0 then waits until
 * no other worker is training (one silent for --coordinator-timeout no longer counts), so the
 * model it reads back and saves holds every worker's updates. */
static dt_status leave(ps_run *r)
{
    double t0 = dt_clock_now(), said = t0 - SPARSE_SAY_SECONDS;
    for (;;) {
        dt_ps_steps g;
        dt_status st = dt_ps_client_leave(r->ps, &g);
        if (st)
            return dt_error_prefix(st, "telling ps:0 this worker's training ended");
        if (follows(r) || g.active == 0) {
            dt_log_to(NULL, DT_LOG_INFO, "dtrain: %s ends its training; the job's count is at "
                      "step %lld", follows(r) ? "this worker" : "worker:0",
                      (long long)g.total);
            return DT_OK;
        }
        double now = dt_clock_now();
        if (now - said >= SPARSE_SAY_SECONDS) {
            dt_log_to(NULL, DT_LOG_WARN, "dtrain: worker:0 waits for %d other worker%s to end "
                      "(%.0f s; one silent for %.0f s no longer counts: --coordinator-timeout)",
                      g.active, g.active == 1 ? "" : "s", now - t0, r->c->ps.coordinator_timeout);
            said = now;
        }
        dt_sleep(SPARSE_POLL_SECONDS);
    }
}

/* No function is given out until every one in flight is answered: every update of the steps
 * counted is then in the ps tasks and none of a later one. Returns those steps. */
static int64_t pause_at_a_step(ps_coord *co)
{
    pthread_mutex_lock(&co->mu);
    dt_ps_sched_pause(&co->sched, true);
    while (!dt_ps_sched_quiet(&co->sched))
        pthread_cond_wait(&co->changed, &co->mu);
    int64_t steps = co->sched.steps;
    pthread_mutex_unlock(&co->mu);
    return steps;
}

static void resume(ps_coord *co)
{
    pthread_mutex_lock(&co->mu);
    dt_ps_sched_pause(&co->sched, false);
    pthread_cond_broadcast(&co->changed);
    pthread_mutex_unlock(&co->mu);
}

/* A checkpoint for the checkpoint callback, at a step: every ps task writes its shards, and the
 * manifest (with the dense variables, read back) follows. */
static dt_status save_sharded(void *arg, dt_ckpt_manager *mgr, const dt_fit_ctx *fc,
                              bool announce, bool final, int64_t *step)
{
    (void)fc, (void)announce;
    ps_run *r = arg;
    ps_coord *co = &r->co;
    const dt_train_config *c = r->c;
    double t0 = dt_clock_now();
    *step = pause_at_a_step(co);
    dt_status st = DT_OK;
    dt_ps_steps g;
    /* A sparse cluster's checkpoint is of the job's step, every worker's. */
    if (r->pc.cl.sparse && (st = dt_ps_client_take_steps(r->ps, 0, &g)) == DT_OK)
        *step = g.total;
    int workers = r->pc.cl.n_tasks[DT_JOB_WORKER];
    int64_t *positions = calloc((size_t)workers + 1, sizeof *positions);
    if (!positions)
        st = dt_error(DT_ERR_NOMEM, "no memory for %d workers' data positions", workers);
    /* Quiet: no function in flight, every shard's position is that of the steps taken. */
    for (int w = 0; positions && w < workers; w++)
        positions[w] = co->sched.shards[w].position;
    if (*step > 0 && st == DT_OK) {
        st = dt_ps_client_pull_dense(r->ps, dt_model_params(r->m)->data);
        if (st == DT_OK)
            st = dt_ps_ckpt_save(mgr, r->ps, r->n_ps, &c->fit, r->m, &c->optim, *step, workers,
                                 positions, final);
        if (st == DT_OK && c->fit.log)
            dt_log_to(c->fit.log, DT_LOG_INFO, "Saving checkpoints for %lld into %s (%d ps shard "
                      "files, %.2f s).", (long long)*step, mgr->dir, r->n_ps,
                      dt_clock_now() - t0);
    }
    free(positions);
    resume(co);
    r->ctx.result->checkpoint_seconds += dt_clock_now() - t0;
    return st;
}

/* Before an evaluation: the variables at a step, read back from the ps tasks into the
 * coordinator's model; then the steps go on. */
static dt_status refresh_variables(void *arg, dt_fit_ctx *fc)
{
    ps_run *r = arg;
    double t0 = dt_clock_now();
    pause_at_a_step(&r->co);
    dt_status st = read_back(r->ps, r->m, true);
    resume(&r->co);
    fc->result->eval_seconds += dt_clock_now() - t0;
    return st;
}

/* The fit configuration the coordinator's callbacks follow. A job resumes from its sharded
 * checkpoints, not from backups. Hybrid mode's dense variables are on the workers, where no
 * evaluation during training reaches them: the test set is evaluated once, at the end. */
static dt_status callbacks_config(const dt_train_config *c, const dt_fit_config *f,
                                  bool follower, dt_fit_config *p)
{
    *p = *f;
    if (follower) {
        /* A sparse cluster's other workers train and show their progress; worker 0 writes the
         * checkpoints and summaries and evaluates. */
        p->model_dir = NULL, p->restore_path = NULL;
        p->validate = false;
        p->eval_every_steps = 0, p->eval_throttle_secs = 0.0;
    }
    if (p->backup_dir)
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: warning: --backup-dir: parameter_server training "
                  "resumes from its checkpoints in --model-dir, and writes no backup");
    p->backup_dir = NULL;
    if (c->ps.mode != DT_PS_HYBRID)
        return DT_OK;
    if (p->eval_every_steps > 0 || p->eval_throttle_secs > 0.0)
        return dt_error(DT_ERR_INVALID, "fit.eval_every_steps, fit.eval_throttle_secs: "
                        "`ps.mode` hybrid keeps the dense variables on the workers, out of an "
                        "evaluation's reach during training (the sidecar evaluator reads the "
                        "checkpoints of the other modes)");
    p->validate = false;
    return DT_OK;
}

static dt_status open_callbacks(ps_run *r, const dt_fit_config *fcfg, dt_dataset *test,
                                dt_fit_result *res, int64_t start)
{
    dt_status st = callbacks_config(r->c, fcfg, follows(r), &r->cfg);
    if (st)
        return st;
    r->epoch_steps = r->cfg.steps_per_epoch > 0 ? r->cfg.steps_per_epoch
                                                : r->cfg.expected_steps_per_epoch;
    /* An input of unknown length: the workers' passes over it are theirs, and the coordinator
     * shows the run as one epoch. */
    if (r->epoch_steps <= 0)
        r->cfg.epochs = 1;
    dt_optim_init(&r->o);
    r->o.cfg = r->c->optim;
    r->o.iterations = start;
    /* Hybrid mode's dense variables live on the workers: no checkpoint holds them. */
    bool hybrid = r->c->ps.mode == DT_PS_HYBRID;
    r->remote = (dt_fit_remote){.save = hybrid ? NULL : save_sharded,
                                .refresh = hybrid ? NULL : refresh_variables, .arg = r};
    st = dt_replica_alone(&r->alone);
    if (st)
        return st;
    dt_fit_ctx *c = &r->ctx;
    *c = (dt_fit_ctx){.replica = r->alone, .m = r->m, .o = &r->o, .cfg = &r->cfg, .test = test,
                      .result = res, .pos = {.best = INFINITY, .step = start},
                      .resumed = start > 0, .step_count = 1, .remote = &r->remote};
    if (r->epoch_steps > 0)
        c->pos.epoch = start / r->epoch_steps, c->pos.in_epoch = start % r->epoch_steps;
    res->resumed_step = start;
    if ((st = dt_callbacks_open(c, &r->cbs)))
        return st;
    c->train_t0 = dt_clock_now();
    DT_EACH_CALLBACK(&r->cbs, train_begin, c);
    return st;
}

static dt_status begin_epoch(ps_run *r)
{
    dt_fit_ctx *c = &r->ctx;
    dt_fit_position *p = &c->pos;
    if (p->in_epoch == 0)
        p->epoch_correct = p->epoch_samples = 0, p->epoch_loss = 0.0;
    c->epoch_limit = r->epoch_steps;
    c->result->epochs = (int)p->epoch + 1;
    r->in_epoch = true;
    dt_status st = DT_OK;
    DT_EACH_CALLBACK(&r->cbs, epoch_begin, c);
    return st;
}

/* The epoch's figures and its end's callbacks; a callback's stop (early stopping, a program's
 * own) gives out no more steps. */
static dt_status end_epoch(ps_run *r)
{
    dt_fit_ctx *c = &r->ctx;
    dt_fit_position *p = &c->pos;
    dt_fit_result *res = c->result;
    r->in_epoch = false;
    if (p->epoch_samples == 0)
        return DT_OK;
    c->epoch_cut = r->cfg.max_steps > 0 && p->step >= r->cfg.max_steps;
    res->steps = p->step;
    res->final_loss = p->epoch_loss / (double)p->epoch_samples;
    res->final_accuracy = (double)p->epoch_correct / (double)p->epoch_samples;
    c->epoch_extra[0] = '\0';
    c->evaluated = false;
    dt_status st = DT_OK;
    DT_EACH_CALLBACK(&r->cbs, epoch_end, c);
    p->samples += p->epoch_samples;
    p->epoch++;
    p->in_epoch = p->epoch_correct = p->epoch_samples = 0;
    p->epoch_loss = 0.0;
    if (st == DT_OK && c->stop) {
        pthread_mutex_lock(&r->co.mu);
        dt_ps_sched_end(&r->co.sched);
        pthread_cond_broadcast(&r->co.changed);
        pthread_mutex_unlock(&r->co.mu);
    }
    return st;
}

/* One function's result as steps of the global count: the callbacks of a step around it. */
static dt_status on_result(ps_run *r, const ps_result *x)
{
    dt_fit_ctx *c = &r->ctx;
    dt_fit_position *p = &c->pos;
    dt_status st = DT_OK;
    if (!r->in_epoch && (st = begin_epoch(r)))
        return st;
    p->epoch_loss += x->loss;
    p->epoch_correct += x->correct;
    p->epoch_samples += x->rows;
    c->result->samples += x->rows;
    if (x->steps == 0)
        return DT_OK; /* hybrid: another worker's share of a step */
    r->o.iterations = p->step;
    DT_EACH_CALLBACK(&r->cbs, step_begin, c);
    p->step += x->steps;
    p->in_epoch += x->steps;
    c->step_count = x->steps;
    c->batch_loss = x->rows > 0 ? x->loss / (double)x->rows : 0.0;
    c->batch_accuracy = x->rows > 0 ? (double)x->correct / (double)x->rows : 0.0;
    c->evaluated = false;
    if (st == DT_OK) {
        dt_callbacks_saves_after(&r->cbs, c, p->step);
        DT_EACH_CALLBACK(&r->cbs, step_end, c);
    }
    r->o.iterations = p->step;
    c->result->steps = p->step;
    if (st == DT_OK && r->epoch_steps > 0 && p->in_epoch >= r->epoch_steps)
        st = end_epoch(r);
    return st;
}

/* A ps task was lost (why: the last error): it is waited for up to --ps-recovery-timeout
 * (started again by its operator or by dtrain launch, its shards restored from its snapshot);
 * back, it gets the variables' definitions again: a no-op for the shards it restored, the
 * initial values for what it lost. Not back in time: the job fails, naming it. */
static void recover_ps(ps_run *r)
{
    const dt_train_config *c = r->c;
    char why[DT_JOB_MAX_TEXT];
    snprintf(why, sizeof why, "%s", dt_last_error());
    pthread_mutex_lock(&r->co.mu);
    int64_t steps = r->co.sched.steps;
    pthread_mutex_unlock(&r->co.mu);
    double t0 = dt_clock_now();
    dt_log_to(NULL, DT_LOG_WARN, "dtrain: a ps task is lost after %lld steps (%s): waiting up "
              "to %.0f s for it (--ps-recovery-timeout)", (long long)steps, why,
              c->ps.recovery_timeout);
    dt_status st = dt_ps_client_reconnect(r->ps, c->ps.recovery_timeout);
    if (st == DT_OK && !follows(r)) /* worker 0 defines them again, in a sparse cluster */
        st = ps_place_variables(c, r->m, r->ps, r->n_ps, true, 0);
    /* A sparse cluster's ps:0 started again has lost the job's count: worker 0 raises it to its
     * own steps at least, and says the variables are ready again. */
    dt_ps_steps g;
    if (st == DT_OK && r->pc.cl.sparse && !follows(r))
        st = dt_ps_client_ready(r->ps, steps, &g);
    if (st) {
        dt_error(st, "%s, and not back within %.0f s (--ps-recovery-timeout): %s", why,
                 c->ps.recovery_timeout, dt_last_error());
        ps_coord_fail(&r->co, -2, st);
        return;
    }
    dt_log_to(NULL, DT_LOG_WARN, "dtrain: the ps tasks are back %.1f s after the loss was "
              "seen; a ps task started again holds its last snapshot (its log names the "
              "step), the updates after it up to step %lld are lost", dt_clock_now() - t0,
              (long long)steps);
}

/* A callback failed: a lost ps task is waited for, anything else ends the job. */
static void callback_failed(ps_run *r, dt_status st)
{
    if (dt_ps_client_broken(r->ps)) {
        recover_ps(r);
        return;
    }
    ps_coord_fail(&r->co, -2, st);
    r->callbacks_failed = true;
}

/* Until every worker's thread has ended: the results through the callbacks, and, each second,
 * a look at the heartbeat: a ps task it lost is waited for. */
static void follow(ps_run *r)
{
    ps_coord *co = &r->co;
    ps_result *mine = NULL;
    int mine_cap = 0;
    double next_look = dt_clock_now() + 1.0;
    for (;;) {
        pthread_mutex_lock(&co->mu);
        while (co->n_results == 0 && co->n_running > 0 && dt_clock_now() < next_look)
            ps_coord_wait(co, next_look);
        /* The results change hands: the workers' threads queue into the other buffer. */
        ps_result *got = co->results;
        int n = co->n_results, got_cap = co->results_cap;
        co->results = mine, co->results_cap = mine_cap, co->n_results = 0;
        bool running = co->n_running > 0, failed = co->sched.failed;
        pthread_mutex_unlock(&co->mu);
        mine = got, mine_cap = got_cap;
        for (int i = 0; i < n && !r->callbacks_failed; i++) {
            dt_status st = on_result(r, &mine[i]);
            if (st)
                callback_failed(r, st);
        }
        if (!running && n == 0)
            break;
        if (!failed && dt_clock_now() >= next_look) {
            /* The heartbeat's loss, seen again on the loop's own connections first. */
            if (__atomic_exchange_n(&r->beat.lost, 0, __ATOMIC_ACQ_REL) &&
                dt_ps_client_ping(r->ps) != DT_OK)
                recover_ps(r);
            next_look = dt_clock_now() + 1.0;
        }
    }
    free(mine);
}

/* After the last step: the last epoch's end, the final checkpoint and the other callbacks'
 * ends. */
static dt_status finish_callbacks(ps_run *r)
{
    dt_status st = r->in_epoch ? end_epoch(r) : DT_OK;
    r->ctx.evaluated = false;
    DT_EACH_CALLBACK(&r->cbs, train_end, &r->ctx);
    return st;
}

/* The ps tasks ready: the variables placed (a ps lost meanwhile waited for), the latest
 * checkpoint restored (*start: its step). */
static dt_status prepare(ps_run *r, int64_t *start)
{
    const dt_train_config *c = r->c;
    *start = 0;
    if (r->pc.cl.n_tasks[DT_JOB_WORKER] < 1)
        return dt_error(DT_ERR_INVALID, "TF_CONFIG: cluster.worker: parameter_server training "
                        "needs at least one worker task");
    dt_status st = dt_ps_client_open(&r->pc.me, &r->pc.cl, c->comm.connect_timeout,
                                     c->ps.ps_timeout, &r->ps);
    if (follows(r))
        return st ? st : await_ready(r);
    if (st == DT_OK)
        st = ps_place_variables(c, r->m, r->ps, r->n_ps, true, 0);
    if (st && r->ps && dt_ps_client_broken(r->ps)) {
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s: waiting up to %.0f s for the ps task "
                  "(--ps-recovery-timeout)", dt_last_error(), c->ps.recovery_timeout);
        if ((st = dt_ps_client_reconnect(r->ps, c->ps.recovery_timeout)) == DT_OK)
            st = ps_place_variables(c, r->m, r->ps, r->n_ps, true, 0);
    }
    if (st == DT_OK)
        st = restore_start(c, r->ps, r->m, r->n_ps, start, r->pc.cl.n_tasks[DT_JOB_WORKER],
                           r->positions, &r->have_positions);
    if (st == DT_OK && c->fit.model_dir && c->ps.mode == DT_PS_HYBRID)
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: warning: --ps-mode hybrid writes no checkpoints "
                  "(its dense variables live on the workers)");
    dt_ps_steps g;
    if (st == DT_OK && r->pc.cl.sparse && (st = dt_ps_client_ready(r->ps, *start, &g)) == DT_OK)
        dt_log_to(NULL, DT_LOG_INFO, "dtrain: worker:0 made the variables ready on %d ps task%s: "
                  "the job's count starts at step %lld", r->n_ps, r->n_ps == 1 ? "" : "s",
                  (long long)g.total);
    return st;
}

/* A sparse cluster's worker schedules itself alone; its worker keeps to --max-steps by the
 * job's count, which ps 0 keeps. */
static dt_ps_sched_config schedule_of(const dt_train_config *c, int n_workers, int64_t start,
                                      bool sparse)
{
    return (dt_ps_sched_config){
        .n_workers = n_workers, .hybrid = c->ps.mode == DT_PS_HYBRID,
        .ssp = c->ps.mode == DT_PS_SSP, .staleness = c->ps.staleness,
        .steps_per_execution = c->ps.steps_per_execution,
        .limit = c->fit.max_steps > 0 && !sparse ? c->fit.max_steps : INT64_MAX, .start = start};
}

dt_status dt_ps_coordinate(const dt_train_config *c, const dt_fit_config *fcfg, dt_model *m,
                           dt_dataset *test, dt_fit_result *res)
{
    memset(res, 0, sizeof *res);
    res->final_loss = res->final_accuracy = res->val_auc = NAN;
    ps_run r = {.c = c, .m = m};
    dt_status st = ps_open_cluster(c, &r.pc);
    if (st)
        return st;
    r.n_ps = r.pc.cl.n_tasks[DT_JOB_PS];
    bool sparse = r.pc.cl.sparse;
    int n_workers = sparse ? 1 : r.pc.cl.n_tasks[DT_JOB_WORKER];
    int64_t start = 0;
    if (!(r.positions = calloc((size_t)n_workers + 1, sizeof *r.positions)))
        st = dt_error(DT_ERR_NOMEM, "no memory for %d workers", n_workers);
    ps_roll_call *roll = NULL;
    if (st == DT_OK)
        st = ps_roll_call_start(&r.pc, &roll);
    if (st == DT_OK && (st = prepare(&r, &start)) == DT_OK) {
        dt_ps_sched_config sc = schedule_of(c, n_workers, start, sparse);
        r.co_ready = (st = ps_coord_init(&r.co, c, &r.pc, m, &sc)) == DT_OK;
    }
    for (int w = 0; st == DT_OK && r.have_positions && w < n_workers; w++)
        r.co.sched.shards[w].position = r.positions[w];
    double t0 = dt_clock_now();
    if (st == DT_OK)
        st = heartbeat_start(&r.beat, &r.pc, c);
    if (st == DT_OK)
        st = open_callbacks(&r, fcfg, test, res, start);
    ps_roll_call_stop(roll);
    dt_status run = st;
    if (run == DT_OK && (run = ps_coord_start(&r.co)) == DT_OK)
        follow(&r);
    if (r.co_ready) {
        dt_status joined = ps_coord_join(&r.co);
        if (run == DT_OK)
            run = joined;
    }
    /* A ps lost at the very end: the reading back waits for it as the steps would have. */
    if (run == DT_OK && dt_ps_client_broken(r.ps) &&
        (run = dt_ps_client_reconnect(r.ps, c->ps.recovery_timeout)) == DT_OK && !follows(&r))
        run = ps_place_variables(c, m, r.ps, r.n_ps, true, 0);
    if (run == DT_OK && sparse)
        run = leave(&r);
    if (run == DT_OK)
        run = finish_callbacks(&r);
    /* The first error is the one reported, whatever stopping the others says. */
    char first[DT_JOB_MAX_TEXT];
    snprintf(first, sizeof first, "%s", run ? dt_last_error() : "");
    if (st)
        ps_coord_stop_workers(&r.pc); /* they waited for functions that will not come */
    res->train_seconds = dt_clock_now() - t0 - dt_fit_side_seconds(res);
    res->steps = r.ctx.pos.step;
    st = run != DT_OK  ? run
         : follows(&r) ? DT_OK /* worker 0 reads the model back */
                       : read_back(r.ps, m, c->ps.mode != DT_PS_HYBRID);
    if (st && run == DT_OK) { /* the read-back's failure is the one reported */
        snprintf(first, sizeof first, "%s", dt_last_error());
        run = st;
    }
    /* The ps tasks stop whatever happened: none outlives the job (a sparse cluster's other
     * workers leave them running for worker 0). */
    heartbeat_stop(&r.beat);
    if (r.ps && !follows(&r)) {
        dt_status stop = dt_ps_client_stop(r.ps);
        if (st == DT_OK)
            st = stop;
    }
    dt_status closed = dt_callbacks_close(&r.cbs, run == DT_OK);
    if (st == DT_OK)
        st = closed;
    if (run)
        dt_error(run, "%s", first);
    dt_replica_free_alone(r.alone);
    free(r.positions);
    dt_optim_free(&r.o);
    dt_ps_client_close(r.ps);
    if (r.co_ready)
        ps_coord_free(&r.co);
    ps_close_cluster(&r.pc);
    return st;
}
