/* Parameter-server training: the worker (see ps_train.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../strategy/replica.h"
#include "batch.h"
#include "../core/clock.h"
#include "../core/grow.h"
#include "../nn/embedding.h"
#include "dtrain/comm_open.h"
#include "dtrain/log.h"
#include "ps_task.h"
#include "ps_train.h"

/* A CTR model's tables: fm_w and fm_v. */

/* A shard of the data and where this worker is in it: its own, or a lost worker's it took
 * over. */
typedef struct {
    dt_input *in;          /* the worker's own input, or `owned` */
    dt_input owned;
    bool opened;           /* owned holds an input this worker opened */
    int epoch;             /* epochs of it begun */
    int64_t in_epoch;      /* batches taken in this epoch */
    int64_t taken;         /* batches taken, trained on or skipped */
    bool done;             /* every epoch used up */
} reader;

typedef struct {
    const dt_train_config *c;
    const ps_cluster *pc;
    int64_t table_rows;    /* the tables' rows on the ps tasks */
    dt_model *m;
    const dt_input_options *io; /* for opening another worker's shard */
    reader *readers;       /* by data shard (one per worker) */
    int n_readers;
    reader *rd;            /* the one the current function reads */
    dt_ps_client *ps;      /* opened at the first function */
    int32_t *labels;
    int64_t *uniq;       /* the batch's unique ids */
    size_t n_uniq;
    int64_t *gids;       /* the tables' gradient rows' ids, table t's from t x cap */
    bool by_table;       /* a feature-spec model: whole tables, each with its own ids */
    float *rows_buf;     /* by_table: a pull's rows, table after table */
    size_t rows_cap;
    int64_t *keys_buf;   /* by_table: the dynamic tables' keys of a pull and of a push... */
    uint32_t *times_buf; /* ...and their sightings, table after table */
    size_t keys_cap;
    uint32_t *slot;
    uint32_t *times;     /* each unique id's places in the batch: a dynamic table's sightings */
    int64_t step;        /* the global step under way, which a dynamic table's pull stamps */
    void *scratch;
    size_t cap;
    double *pull_ms;       /* each step's pull round */
    size_t n_pulls, pulls_cap;
    int64_t steps, samples;
    /* Hybrid: the dense variables are this worker's, their gradients all-reduced over the
     * workers' ring (its own listener, beside the ZeroMQ one at the TF_CONFIG address), and
     * updated here. */
    dt_pool *pool;
    int ring_fd;           /* the ring's listening socket, until the ring is joined */
    uint16_t ring_port;
    dt_cluster ring_cluster;
    dt_comm *ring;
    dt_replica *replica;   /* over the ring: the strategy layer's all-reduce step */
    dt_optim opt;
} worker;

/* The next batch of the current shard, going on into its next epoch at the end of one; DT_END
 * once its epochs are used up. */
static dt_status next_batch(worker *w, dt_elem **e)
{
    const dt_fit_config *f = &w->c->fit;
    reader *r = w->rd;
    for (;;) {
        dt_status st = DT_END;
        if (f->steps_per_epoch == 0 || r->in_epoch < f->steps_per_epoch)
            st = dt_dataset_next(r->in->train, e);
        if (st == DT_OK && (*e)->n > 0) {
            r->in_epoch++, r->taken++;
            return DT_OK;
        }
        if (st == DT_OK) {
            dt_elem_free(*e);
            continue;
        }
        if (st != DT_END)
            return st;
        if (r->in_epoch == 0 && r->epoch > 0)
            return dt_error(DT_ERR_INVALID, "%s: this shard of the data is empty",
                            r->in->source);
        if (++r->epoch >= f->epochs) {
            r->done = true;
            return DT_END;
        }
        r->in_epoch = 0;
        if ((st = dt_dataset_reset(r->in->train)))
            return st;
    }
}

/* The reader of data shard k (a lost worker's: opened at the first function on it). */
static dt_status use_shard(worker *w, int64_t k)
{
    if (k < 0 || k >= w->n_readers)
        return dt_error(DT_ERR_PEER, "the coordinator asks for data shard %lld of %d",
                        (long long)k, w->n_readers);
    reader *r = &w->readers[k];
    if (!r->in) {
        const dt_input_spec *spec = &w->readers[w->pc->cl.task_index].in->train_spec;
        dt_input_context ctx = {w->n_readers, (int)k, 1};
        dt_status st = dt_input_open(spec, NULL, w->io, &ctx, &r->owned);
        if (st)
            return dt_error_prefix(st, "opening data shard %lld", (long long)k);
        r->in = &r->owned, r->opened = true;
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: takes over data shard %lld (a lost worker's)",
                  (long long)k);
    }
    w->rd = r;
    return DT_OK;
}

static dt_status reserve_ids(worker *w, size_t n)
{
    if (n <= w->cap && w->uniq)
        return DT_OK;
    free(w->uniq), free(w->slot), free(w->scratch), free(w->gids), free(w->times);
    w->uniq = malloc(n * sizeof *w->uniq);
    w->gids = malloc(n * (size_t)dt_model_num_tables(w->m) * sizeof *w->gids);
    w->slot = malloc(n * sizeof *w->slot);
    w->times = malloc(n * sizeof *w->times);
    w->scratch = malloc(dt_embedding_scratch_bytes(n));
    w->cap = w->uniq && w->gids && w->slot && w->scratch && w->times ? n : 0;
    return w->cap ? DT_OK : dt_error(DT_ERR_NOMEM, "no memory for a batch of %zu ids", n);
}

/* The worker's tables hold one batch's rows: the batch's ids become their index among its
 * unique ids (the element is the worker's own), and the pulled rows land there. */
static dt_status renumber_ids(worker *w, dt_elem *e)
{
    w->n_uniq = 0;
    if (dt_model_num_tables(w->m) == 0 || w->by_table)
        return DT_OK;
    size_t n = (size_t)(e->sp_row[e->n] - e->sp_row[0]);
    int64_t *ids = e->sp_ids + e->sp_row[0];
    dt_status st = reserve_ids(w, n);
    if (st)
        return st;
    w->n_uniq = dt_embedding_dedupe(ids, n, w->scratch, w->uniq, w->slot);
    memset(w->times, 0, w->n_uniq * sizeof *w->times);
    for (size_t i = 0; i < n; i++) {
        ids[i] = (int64_t)w->slot[i];
        w->times[w->slot[i]]++;
    }
    return DT_OK;
}

/* A feature-spec model keeps whole tables (anonymous mappings: only the rows a batch pulled
 * take memory), each with its own ids: the batch's rows of table t are pulled into a buffer
 * and placed at their ids. */
static dt_status reserve_rows(worker *w, size_t floats)
{
    if (floats <= w->rows_cap)
        return DT_OK;
    float *p = realloc(w->rows_buf, floats * sizeof *p);
    if (!p)
        return dt_error(DT_ERR_NOMEM, "no memory for %zu pulled values", floats);
    w->rows_buf = p, w->rows_cap = floats;
    return DT_OK;
}

static dt_status reserve_keys(worker *w, size_t n)
{
    if (n <= w->keys_cap)
        return DT_OK;
    if (!dt_grow_together((dt_grow_item[]){{&w->keys_buf, sizeof *w->keys_buf},
                                           {&w->times_buf, sizeof *w->times_buf}}, 2, n))
        return dt_error(DT_ERR_NOMEM, "no memory for a batch of %zu keys", n);
    w->keys_cap = n;
    return DT_OK;
}

/* A dynamic table's rows of the batch by key: table t's ids (its rows here) as the keys they
 * hold, with each key's sightings, into the buffers from *at. */
static void keyed_ids(worker *w, int t, const int64_t *ids, size_t n, const int64_t **keys,
                      const uint32_t **times, size_t *at)
{
    const int64_t *local = dt_model_table_keys(w->m, t);
    int64_t *k = w->keys_buf + *at;
    uint32_t *c = w->times_buf + *at;
    for (size_t j = 0; j < n; j++)
        k[j] = local[ids[j]];
    dt_model_table_counts(w->m, t, c);
    *keys = k, *times = c, *at += n;
}

static dt_status pull_tables(worker *w, const dt_elem *e)
{
    dt_model *m = w->m;
    int T = dt_model_num_tables(m);
    const int64_t *ids[DT_PS_MAX_TABLES], *pulled[DT_PS_MAX_TABLES];
    const uint32_t *times[DT_PS_MAX_TABLES] = {0};
    size_t n[DT_PS_MAX_TABLES], total = 0, keyed = 0;
    float *rows[DT_PS_MAX_TABLES];
    for (int t = 0; t < T; t++) {
        dt_status st = dt_model_table_ids(m, e, t, &ids[t], &n[t]);
        if (st)
            return st;
        total += n[t] * (size_t)dt_model_table(m, t)->dim;
        keyed += dt_model_table_keys(m, t) ? n[t] : 0;
    }
    dt_status st = reserve_rows(w, total ? total : 1);
    if (st || (st = reserve_keys(w, keyed ? keyed : 1)))
        return st;
    size_t at_key = 0;
    for (int t = 0, at = 0; t < T; t++) {
        rows[t] = n[t] ? w->rows_buf + at : NULL;
        at += (int)(n[t] * (size_t)dt_model_table(m, t)->dim);
        pulled[t] = ids[t];
        if (dt_model_table_keys(m, t))
            keyed_ids(w, t, ids[t], n[t], &pulled[t], &times[t], &at_key);
    }
    double t0 = dt_clock_now();
    st = dt_ps_client_pull_tables_step(w->ps, pulled, times, n, w->step, rows,
                                       w->ring ? NULL : dt_model_params(m)->data);
    w->pull_ms[w->n_pulls++] = (dt_clock_now() - t0) * 1e3;
    for (int t = 0; st == DT_OK && t < T; t++) {
        dt_table *tab = dt_model_table(m, t);
        for (size_t k = 0; k < n[t]; k++)
            memcpy(dt_table_row(tab, ids[t][k]), rows[t] + k * (size_t)tab->dim,
                   (size_t)tab->dim * sizeof(float));
    }
    return st;
}

static dt_status record_pull_time_room(worker *w)
{
    if (w->n_pulls < w->pulls_cap)
        return DT_OK;
    size_t cap = w->pulls_cap ? 2 * w->pulls_cap : 1024;
    double *p = realloc(w->pull_ms, cap * sizeof *p);
    if (!p)
        return dt_error(DT_ERR_NOMEM, "no memory for %zu pull times", cap);
    w->pull_ms = p, w->pulls_cap = cap;
    return DT_OK;
}

/* The batch's rows of every table and the dense variables, from the ps tasks in one round. */
static dt_status pull_variables(worker *w, const dt_elem *e)
{
    dt_status st = record_pull_time_room(w);
    if (st)
        return st;
    if (w->by_table)
        return pull_tables(w, e);
    dt_model *m = w->m;
    float *rows[DT_PS_MAX_TABLES] = {0};
    for (int t = 0; t < dt_model_num_tables(m) && w->n_uniq > 0; t++)
        rows[t] = dt_model_table(m, t)->data;
    double t0 = dt_clock_now();
    /* Dynamic tables on the ps count each key's sightings in the batch at this step. */
    st = dt_ps_client_pull_keys_step(w->ps, w->uniq, w->times, w->n_uniq, w->step, rows,
                                     w->ring ? NULL : dt_model_params(m)->data);
    w->pull_ms[w->n_pulls++] = (dt_clock_now() - t0) * 1e3;
    return st;
}

/* The tables' gradients with the batch's ids again (local row k is unique id k: increasing
 * stays increasing), pushed with the dense gradients. */
static dt_status push_gradients(worker *w, int64_t step, float table_scale)
{
    dt_model *m = w->m;
    dt_sparse_rows global[DT_PS_MAX_TABLES];
    const dt_sparse_rows *grads[DT_PS_MAX_TABLES] = {0};
    size_t at_key = 0, keyed = 0;
    for (int t = 0; w->by_table && t < dt_model_num_tables(m); t++)
        keyed += dt_model_table_keys(m, t) ? dt_model_table_grad(m, t)->n : 0;
    dt_status st = reserve_keys(w, keyed ? keyed : 1);
    if (st)
        return st;
    for (int t = 0; t < dt_model_num_tables(m); t++) {
        const dt_sparse_rows *g = dt_model_table_grad(m, t);
        const int64_t *local = w->by_table ? dt_model_table_keys(m, t) : NULL;
        if (w->by_table && !local) { /* the ids are the tables' own already */
            grads[t] = g;
            continue;
        }
        if (local) { /* a dynamic table's rows go back by their keys */
            int64_t *keys = w->keys_buf + at_key;
            for (size_t k = 0; k < g->n; k++)
                keys[k] = local[g->ids[k]];
            at_key += g->n;
            global[t] = *g;
            global[t].ids = keys;
            grads[t] = &global[t];
            continue;
        }
        int64_t *gids = w->gids + (size_t)t * w->cap;
        for (size_t k = 0; k < g->n; k++)
            gids[k] = w->uniq[g->ids[k]];
        global[t] = *g;
        global[t].ids = gids;
        grads[t] = &global[t];
    }
    return dt_ps_client_push_step(w->ps, grads, w->ring ? NULL : dt_model_grads(m)->data, step,
                                  table_scale);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The worker's figures for the report: steps, samples, pull times and traffic. */
static void worker_figures(worker *w, const ps_cluster *pc, dt_train_report *out)
{
    out->ps_worker = true;
    dt_cluster_task_name(&pc->cl, pc->cl.task_type, pc->cl.task_index, out->worker.task,
                         sizeof out->worker.task);
    out->worker.steps = w->steps, out->worker.samples = w->samples;
    if (w->n_pulls > 0) {
        qsort(w->pull_ms, w->n_pulls, sizeof *w->pull_ms, cmp_double);
        out->worker.pull_p50_ms = w->pull_ms[(w->n_pulls - 1) / 2];
        out->worker.pull_p99_ms = w->pull_ms[(w->n_pulls - 1) * 99 / 100];
    }
    if (w->ps)
        dt_ps_client_traffic(w->ps, &out->worker.bytes_sent, &out->worker.bytes_received);
}

/* After an exchange with the ps tasks failed (st): when a link broke (a ps task died), connects
 * again within the recovery deadline (set at the first failure) and returns DT_OK for the
 * exchange to be tried again; a ps task that does not hold a variable yet (started again, its
 * shards not defined again yet: DT_ERR_UNAVAILABLE), and any refusal while recovering, are
 * waited out the same way. Anything else is st. */
static dt_status await_ps(worker *w, dt_status st, double *deadline)
{
    bool broken = dt_ps_client_broken(w->ps);
    if (!broken && *deadline == 0 && st != DT_ERR_UNAVAILABLE)
        return st;
    char why[DT_JOB_MAX_TEXT];
    snprintf(why, sizeof why, "%s", dt_last_error());
    double now = dt_clock_now(), limit = w->c->ps.recovery_timeout;
    if (*deadline == 0) {
        *deadline = now + limit;
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s: waiting up to %.0f s for the ps tasks "
                  "(--ps-recovery-timeout)", why, limit);
    }
    if (now >= *deadline)
        return dt_error(st, "the ps tasks were not back within %.0f s (--ps-recovery-timeout): "
                        "%s", limit, why);
    if (!broken) {
        dt_sleep(0.1);
        return DT_OK;
    }
    st = dt_ps_client_reconnect(w->ps, *deadline - now);
    if (st)
        return dt_error(st, "the ps tasks were not back within %.0f s (--ps-recovery-timeout): "
                        "%s", limit, dt_last_error());
    return DT_OK;
}

/* Hybrid, before a step: the workers' replicas begin it together (they agree on the global
 * batch, and stop together as soon as one worker's data is used up: DT_END then), the
 * gradients cleared. */
static dt_status begin_dense_step(worker *w, dt_step *s)
{
    bool go_on = true;
    dt_status st = dt_replica_begin_step(w->replica, w->m, s, &go_on);
    if (st)
        return dt_error_prefix(st, "step %lld", (long long)s->step + 1);
    if (!go_on) {
        w->rd->done = true;
        return DT_END;
    }
    return DT_OK;
}

/* Hybrid, after backward: the strategy layer's all-reduce step over the workers' ring, for
 * the dense variables only (the tables' rows went to the ps tasks), at global step `step`, as
 * every other worker takes it. */
static dt_status apply_dense_step(worker *w, dt_step *s, double loss, int correct)
{
    s->loss = loss, s->correct = correct;
    w->opt.iterations = s->step;
    dt_status st = dt_replica_apply(w->replica, w->m, &w->opt, w->pool, s);
    if (st == DT_OK && s->ended) /* cannot be: the workers agreed on the step before it */
        st = dt_error(DT_ERR_PEER, "step %lld: the workers' ring ended a step it had begun",
                      (long long)s->step + 1);
    return st;
}

/* One step, global step number `step`: the batch's loss summed into r. */
static dt_status worker_step(worker *w, int64_t step, dt_job_result *r)
{
    dt_model *m = w->m;
    dt_elem *e = NULL;
    dt_status st = next_batch(w, &e);
    dt_step s = {.step = step - 1, .batch_size = w->c->fit.batch_size,
                 .mean = w->c->fit.reduction == DT_REDUCTION_MEAN,
                 .rows = st == DT_OK ? e->n : 0, .ended = st != DT_OK, .dense_only = true};
    if (w->replica && (st == DT_OK || st == DT_END)) {
        dt_status begun = begin_dense_step(w, &s);
        st = begun ? begun : st;
    }
    if (st) {
        dt_elem_free(e);
        return st;
    }
    int correct = 0;
    double recovery = 0; /* the deadline for lost ps tasks to be back, once one was lost */
    w->step = step;
    if ((st = dt_check_batch(m, e)) || (st = dt_batch_labels(m, e, w->labels)) ||
        (st = renumber_ids(w, e)))
        goto done;
    /* Before the pull: a feature-spec model's pull finds the batch's ids of each table, which
     * are its gradients' ids too, and zeroing empties those (hybrid's step began with it). */
    if (!w->replica)
        dt_model_zero_grads(m);
    while ((st = pull_variables(w, e)) && (st = await_ps(w, st, &recovery)) == DT_OK) {
    }
    if (st)
        goto done;
    if ((st = dt_model_forward_batch(m, e, true, NULL)))
        goto done;
    /* Hybrid sums the workers' gradients: each scaled by 1 / global batch, as
     * multi_worker_mirrored's. */
    int64_t global_rows = w->replica ? s.scaled_rows : e->n;
    double loss = dt_model_loss(m, e->n, w->labels, 1.0f / (float)global_rows, true, &correct);
    if (!isfinite(loss)) {
        st = dt_error(DT_ERR_NUMERIC, "step %lld: the loss is %g: training diverged (try a lower "
                      "--lr)", (long long)step, loss);
        goto done;
    }
    dt_model_backward(m, e->n);
    /* The tables' rate follows the dense one's schedule, as dt_replica_update_tables has it. */
    const dt_optim_config *oc = &w->c->optim;
    float scale = dt_lr_schedule_at(oc, step - 1) / oc->lr;
    /* A push lost with a ps is pushed again (to every ps: at least once). */
    while ((st = push_gradients(w, step, scale)) && (st = await_ps(w, st, &recovery)) == DT_OK) {
    }
    if (recovery > 0 && st == DT_OK)
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: the ps tasks are back: step %lld goes on",
                  (long long)step);
    if (st == DT_OK && w->replica)
        st = apply_dense_step(w, &s, loss, correct);
    if (st)
        goto done;
    r->steps++, r->rows += e->n, r->correct += correct, r->loss += loss;
    w->steps++, w->samples += e->n;
done:
    dt_elem_free(e);
    return st;
}

/* A restarted worker picks its data up where the coordinator last heard from its predecessor:
 * the batches whose steps it completed are skipped, not trained on twice. */
static dt_status skip_to(worker *w, int64_t position)
{
    if (w->rd->taken >= position)
        return DT_OK;
    int64_t skipped = position - w->rd->taken;
    while (w->rd->taken < position && !w->rd->done) {
        dt_elem *e = NULL;
        dt_status st = next_batch(w, &e);
        dt_elem_free(e);
        if (st == DT_END)
            break;
        if (st)
            return st;
    }
    /* Each skipped batch had its training forward, and its dropout masks, elsewhere: the
     * masks go on from there, as the uninterrupted worker's would. */
    dt_model_set_dropout_position(w->m, dt_model_dropout_position(w->m) + (uint64_t)skipped);
    dt_log_to(NULL, DT_LOG_WARN, "dtrain: skipped the first %lld batches of data shard %td, "
              "which the coordinator had seen trained on", (long long)skipped,
              w->rd - w->readers);
    return DT_OK;
}

/* The worker's own endpoint bound, its name resolved again at most every second until timeout
 * (a Kubernetes pod's name may resolve only once the pod is ready), saying so every 10 s. */
static dt_status bind_by_name(const char *endpoint, const ps_cluster *pc, double timeout,
                              dt_job_server **z)
{
    double t0 = dt_clock_now(), said = -1e9;
    for (;;) {
        dt_status st = dt_job_server_open(endpoint, pc->secret, pc->secret_len, z);
        double now = dt_clock_now();
        if (st != DT_ERR_UNAVAILABLE || now - t0 >= timeout)
            return st;
        if (now - said >= 10.0) {
            dt_log_to(NULL, DT_LOG_WARN, "dtrain: waiting for this task's own name: %s (up to "
                      "%.0f s, --connect-timeout)", dt_last_error(), timeout);
            said = now;
        }
        dt_sleep(1.0);
    }
}

/* A sparse cluster's worker numbers its steps by the job's count, which ps 0 keeps: *first and
 * *steps become the global numbers of the steps the function takes, fewer (or none) once
 * --max-steps is reached. */
static dt_status global_steps(worker *w, int64_t *first, uint32_t *steps)
{
    dt_ps_steps g;
    dt_status st = dt_ps_client_take_steps(w->ps, *steps, &g);
    if (st)
        return dt_error_prefix(st, "the job's step count (ps:0)");
    *first = g.total - *steps + 1;
    int64_t limit = w->c->fit.max_steps;
    if (limit > 0 && g.total > limit)
        *steps = *first > limit ? 0 : (uint32_t)(limit - *first + 1);
    return DT_OK;
}

/* A RUN: its steps, until they are taken or the data is used up. */
static dt_status run_function(worker *w, const dt_job_run *run, dt_job_result *r)
{
    *r = (dt_job_result){0};
    /* The ps tasks are reached at the first function: until then a worker answers PING and
     * STOP at once (a coordinator that failed to start stops it without waiting). */
    if (!w->ps) {
        const dt_train_config *c = w->c;
        dt_status st = dt_ps_client_open(&w->pc->me, &w->pc->cl, c->comm.connect_timeout,
                                         c->ps.ps_timeout, &w->ps);
        if (st == DT_OK)
            st = ps_place_variables(c, w->m, w->ps, w->pc->cl.n_tasks[DT_JOB_PS], false,
                                    w->table_rows);
        if (st)
            return st;
    }
    if (w->c->ps.mode == DT_PS_HYBRID && !w->ring)
        return dt_error(DT_ERR_PEER, "this worker runs --ps-mode hybrid, and the coordinator "
                        "gives it steps without the workers' ring (does it run another mode?)");
    dt_status st = w->c->ps.mode == DT_PS_HYBRID ? DT_OK : use_shard(w, run->shard);
    if (st == DT_OK)
        st = skip_to(w, run->position);
    int64_t first = run->first;
    uint32_t steps = run->steps;
    if (st == DT_OK && w->pc->cl.sparse)
        st = global_steps(w, &first, &steps);
    if (st)
        return st;
    for (uint32_t k = 0; k < steps && !w->rd->done; k++) {
        dt_status st = worker_step(w, first + k, r);
        if (st == DT_END)
            break;
        if (st)
            return st;
    }
    /* Steps of the job's count the data did not fill go back to it. */
    dt_ps_steps g;
    if (w->pc->cl.sparse && r->steps < steps &&
        (st = dt_ps_client_return_steps(w->ps, steps - (uint32_t)r->steps, &g)))
        return dt_error_prefix(st, "the job's step count (ps:0)");
    r->done = w->rd->done || steps < run->steps;
    return DT_OK;
}

static dt_status check_hybrid(const worker *w)
{
    if (w->c->ps.mode != DT_PS_HYBRID)
        return dt_error(DT_ERR_PEER, "the coordinator asks for the workers' ring, which only "
                        "--ps-mode hybrid has (this worker runs another mode)");
    return DT_OK;
}

/* Hybrid: the port this worker's ring listens on (bound at the first question). */
static dt_status ring_port(worker *w, uint16_t *port)
{
    const dt_cluster *cl = &w->pc->cl;
    if (check_hybrid(w))
        return DT_ERR_PEER;
    const dt_addr *me = dt_cluster_addr(cl, cl->task_type, cl->task_index);
    dt_status st = w->ring_fd >= 0 || w->ring
                       ? DT_OK
                       : dt_comm_listen_any(me->host, &w->ring_fd, &w->ring_port);
    if (st)
        return dt_error_prefix(st, "the workers' ring");
    *port = w->ring_port;
    return DT_OK;
}

/* Hybrid: the ring joined once the coordinator tells every worker's port: the dense variables
 * start as worker 0's everywhere. */
static dt_status join_ring(worker *w, const dt_job_ask *a)
{
    const dt_cluster *cl = &w->pc->cl;
    int n = cl->n_tasks[DT_JOB_WORKER];
    if (check_hybrid(w))
        return DT_ERR_PEER;
    if (w->ring || w->ring_fd < 0 || a->n_ports != (uint32_t)n)
        return dt_error(DT_ERR_PEER, "the coordinator's ring of %u ports: %d workers, and this "
                        "one %s", a->n_ports, n, w->ring ? "has joined it already"
                        : w->ring_fd < 0 ? "was not asked its port" : "is in the cluster");
    uint16_t *ports = malloc((size_t)n * sizeof *ports);
    if (!ports)
        return dt_error(DT_ERR_NOMEM, "no memory for the ring's ports");
    for (int i = 0; i < n; i++)
        ports[i] = dt_job_ask_port(a, (uint32_t)i);
    dt_status st = dt_cluster_workers_ring(cl, ports, &w->ring_cluster);
    free(ports);
    if (st)
        return st;
    int fd = w->ring_fd;
    w->ring_fd = -1; /* the communicator's now, whatever happens */
    /* The dense variables start as worker 0's everywhere. */
    if ((st = dt_comm_open_on(&w->ring_cluster, &w->c->comm, w->pc->secret, w->pc->secret_len,
                              fd, &w->ring)) ||
        (st = dt_replica_over(w->ring, &w->replica)) ||
        (st = dt_replica_start(w->replica, w->m)))
        return dt_error_prefix(st, "the workers' ring");
    return DT_OK;
}

/* Hybrid: the dense variables, which only the workers hold, checked against what the
 * coordinator asks for. */
static dt_status check_dense(worker *w, const dt_job_ask *a)
{
    const dt_arena *p = dt_model_params(w->m);
    if (!w->ring || a->offset != 0 || a->count != p->n_elems)
        return dt_error(DT_ERR_PEER, "the coordinator asks for %llu dense values from %llu: "
                        "this worker %s %zu", (unsigned long long)a->count,
                        (unsigned long long)a->offset,
                        w->ring ? "has" : "holds none of its own (not hybrid), of", p->n_elems);
    return DT_OK;
}

/* The answer to one question that is neither PING nor STOP; an error is this worker's. */
static dt_status answer(worker *w, dt_job_server *z, const dt_job_ask *a, dt_status *sent)
{
    dt_status st = DT_OK;
    *sent = DT_OK;
    if (a->kind == DT_JOB_ASK_RUN) {
        dt_job_result r;
        if ((st = run_function(w, &a->run, &r)) == DT_OK)
            *sent = dt_job_server_result(z, &r);
    } else if (a->kind == DT_JOB_ASK_RING && a->n_ports == 0) {
        uint16_t port = 0;
        if ((st = ring_port(w, &port)) == DT_OK)
            *sent = dt_job_server_port(z, port);
    } else if (a->kind == DT_JOB_ASK_RING) {
        if ((st = join_ring(w, a)) == DT_OK)
            *sent = dt_job_server_ok(z);
    } else {
        const dt_arena *p = dt_model_params(w->m);
        if ((st = check_dense(w, a)) == DT_OK)
            *sent = dt_job_server_dense(z, p->data, p->n_elems);
    }
    return st;
}

/* Answers the coordinator's questions until STOP; a failure goes back to it as an error too. */
static dt_status serve(worker *w, dt_job_server *z, const char *coordinator)
{
    double last = dt_clock_now();
    for (;;) {
        dt_job_ask a;
        dt_status st = dt_job_server_next(z, 0.5, coordinator, &a);
        if (st == DT_END) {
            if (dt_clock_now() - last >= w->c->ps.coordinator_timeout)
                return dt_error(DT_ERR_TIMEOUT, "the coordinator (%s) has not been heard from "
                                "for %.0f s (--coordinator-timeout): giving up", coordinator,
                                w->c->ps.coordinator_timeout);
            continue;
        }
        if (st)
            return st;
        last = dt_clock_now();
        if (a.kind == DT_JOB_ASK_PING || a.kind == DT_JOB_ASK_STOP) {
            if ((st = dt_job_server_ok(z)) || a.kind == DT_JOB_ASK_STOP)
                return st;
            continue;
        }
        dt_status sent, run = answer(w, z, &a, &sent);
        if (run) {
            /* The coordinator hears why, then this worker ends with the same error. */
            char text[DT_JOB_MAX_TEXT];
            snprintf(text, sizeof text, "%s", dt_last_error());
            dt_job_server_fail(z, run, text, coordinator, w->c->ps.coordinator_timeout);
            return dt_error(run, "%s", text);
        }
        if (sent)
            return sent;
        last = dt_clock_now();
    }
}

dt_status dt_ps_work(const dt_train_config *c, dt_model *m, dt_pool *pool, dt_input *in,
                     const dt_input_options *io, int64_t table_rows, dt_train_report *out)
{
    ps_cluster pc;
    dt_status st = ps_open_cluster(c, &pc);
    if (st)
        return st;
    worker w = {.c = c, .m = m, .io = io, .pool = pool, .ring_fd = -1,
                .by_table = dt_model_spec_of(m)->arch == DT_ARCH_COLUMNS};
    dt_optim_init(&w.opt);
    /* One reader per data shard: this worker's own, the others opened if it takes one over (a
     * sparse cluster's worker, coordinating itself, reads its own only). */
    w.n_readers = pc.cl.sparse ? 1 : pc.cl.n_tasks[DT_JOB_WORKER];
    if (!(w.readers = calloc((size_t)w.n_readers, sizeof *w.readers))) {
        ps_close_cluster(&pc);
        return dt_error(DT_ERR_NOMEM, "no memory for %d data shards", w.n_readers);
    }
    w.rd = &w.readers[pc.cl.sparse ? 0 : pc.cl.task_index];
    w.rd->in = in;
    /* Hybrid: the dense variables start as one_device's (worker 0's go to all at the ring). */
    if (c->ps.mode == DT_PS_HYBRID) {
        dt_model_init_dense_params(m, c->fit.seed);
        st = dt_optim_setup(&w.opt, &c->optim, dt_model_params(m));
    }
    dt_job_server *z = NULL;
    char endpoint[DT_HOST_CAP + 32], coordinator[DT_HOST_CAP + 48];
    ps_endpoint_of(dt_cluster_addr(&pc.cl, pc.cl.task_type, pc.cl.task_index), endpoint,
                sizeof endpoint);
    if (pc.cl.sparse)
        snprintf(coordinator, sizeof coordinator, "this worker's own coordinator");
    else
        dt_cluster_task_name(&pc.cl, DT_JOB_CHIEF, 0, coordinator, sizeof coordinator);
    if (st == DT_OK && !(w.labels = malloc((size_t)dt_model_max_batch(m) * sizeof *w.labels)))
        st = dt_error(DT_ERR_NOMEM, "no memory for a batch's labels");
    if (st == DT_OK)
        st = bind_by_name(endpoint, &pc, c->comm.connect_timeout, &z);
    w.pc = &pc, w.table_rows = table_rows;
    dt_model_set_dropout_seed(m, c->fit.seed);
    if (st == DT_OK)
        st = serve(&w, z, coordinator);
    worker_figures(&w, &pc, out);
    dt_job_server_close(z);
    dt_ps_client_close(w.ps);
    if (w.replica)
        dt_replica_end(w.replica, m);
    dt_replica_free_over(w.replica);
    dt_comm_destroy(w.ring);
    dt_cluster_free(&w.ring_cluster);
    if (w.ring_fd >= 0)
        close(w.ring_fd);
    dt_optim_free(&w.opt);
    free(w.labels), free(w.uniq), free(w.gids), free(w.slot), free(w.scratch), free(w.pull_ms);
    free(w.times);
    free(w.rows_buf), free(w.keys_buf), free(w.times_buf);
    for (int k = 0; k < w.n_readers; k++)
        if (w.readers[k].opened)
            dt_input_free(&w.readers[k].owned);
    free(w.readers);
    ps_close_cluster(&pc);
    return st;
}

