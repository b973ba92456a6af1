/* Parameter-server training: the coordinator (see ps_train.h). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/clock.h"
#include "dtrain/log.h"
#include "dtrain/summary.h"
#include "ps_ckpt.h"
#include "ps_task.h"
#include "ps_train.h"

/* The checkpoint to start from: the model directory's latest (a coordinator started again
 * resumes from it, as Estimator does), else --restore-checkpoint. Its variables and their
 * optimizer slots go to the ps tasks, however many there are now; *step: where the steps go on
 * from (0: no checkpoint). */
static dt_status restore_start(const dt_train_config *c, dt_ps_client *ps, dt_model *m,
                               int n_ps, int64_t *step)
{
    *step = 0;
    dt_ckpt *ck = NULL;
    dt_status st = DT_END;
    if (c->fit.model_dir)
        st = dt_ckpt_open_latest(c->fit.model_dir, c->fit.log, &ck);
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
        st = dt_ps_client_assign_table(ps, (uint32_t)t, dt_model_table(m, t));
    if (st == DT_OK)
        st = dt_ps_client_assign_dense(ps, dt_model_params(m), &o);
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

typedef struct coordinator coordinator;

typedef struct {
    coordinator *co;
    int index;                 /* worker:index */
    char name[DT_HOST_CAP + 48];
    char endpoint[DT_HOST_CAP + 32];
    pthread_t thread;
    int64_t completed;         /* steps this worker has taken (its clock) */
    int64_t dispatched;        /* hybrid: steps given to this worker (to every worker alike) */
    int shard;                 /* the data shard it reads (its own at first; -1: none) */
    bool active;               /* taking functions (not lost, not finished) */
    bool lost;                 /* its connection closed or fell silent: it may rejoin */
} worker_link;

/* A worker's shard of the data: the batches of it whose steps were completed, whether it is
 * used up, and which worker reads it (-1: its worker was lost, another may take it over). */
typedef struct {
    int64_t position;
    bool done;
    int owner;
} data_shard;

/* A function given back by a worker that was lost with it, for the others to take. */
typedef struct {
    int64_t first;
    uint32_t n;
} function;

struct coordinator {
    const dt_train_config *c;
    const ps_cluster *pc;
    dt_model *m;               /* hybrid: receives the dense variables from worker 0 */
    bool hybrid;
    uint16_t *ring_ports;      /* hybrid: each worker's ring port, once it told it */
    int ports_known;
    pthread_mutex_t mu;
    pthread_cond_t changed;    /* a clock moved, or a worker stopped */
    worker_link *links;
    int n_links;
    int64_t dispatched;        /* steps given out */
    int64_t limit;             /* steps to give out at most */
    int64_t steps, rows, correct;
    double loss;
    double t0;
    int64_t next_log;          /* the step count of the next progress line */
    bool failed;               /* a worker failed: the others stop taking functions */
    int n_active, n_lost;      /* links taking functions; links lost and not back */
    int n_finished;            /* links whose worker is done, or had nothing left to take */
    double all_lost_at;        /* when the last active worker was lost (0: one is active) */
    data_shard *shards;        /* one per worker */
    function *requeued;        /* functions of lost workers, taken before new ones */
    int n_requeued, requeued_cap;
    int in_flight;             /* functions given out and not answered yet */
    bool pausing;              /* a checkpoint is being taken: no function is given out */
    /* Checkpoints (--model-dir): sharded, each ps writing its own shards. */
    bool checkpoints;
    dt_ckpt_manager mgr;
    int64_t saved_step;
    double saved_at;
    int first_failed;          /* the worker whose failure came first (-1: none), and why */
    dt_status first_status;
    char first_error[DT_PSMSG_MAX_TEXT];
    /* The last epoch's worth of results, for the final loss. */
    double window_loss;
    int64_t window_rows;
    /* TensorBoard (--model-dir, every save_summary_steps steps): the figures since the last. */
    dt_summary_writer *summary;
    int64_t next_summary, summary_rows, summary_correct, summary_step;
    double summary_loss, summary_t;
};

/* The steps worker l may take now under bounded staleness: a worker at clock c must see every
 * update from clocks <= c - S - 1, so every other active worker must have taken c - S steps.
 * Unbounded when asynchronous. */
static int64_t steps_allowed(const coordinator *co, const worker_link *l)
{
    if (co->hybrid) /* the workers' ring keeps them in step */
        return INT64_MAX;
    if (co->c->ps.mode != DT_PS_SSP)
        return INT64_MAX;
    int64_t slowest = INT64_MAX;
    for (int i = 0; i < co->n_links; i++)
        if (co->links[i].active && co->links[i].completed < slowest)
            slowest = co->links[i].completed;
    return slowest + co->c->ps.staleness - l->completed + 1;
}

/* Whether worker l has data to read (the caller holds co->mu): its shard, or, once that is
 * used up, a lost worker's that no one reads, which it takes over (*adopted: its index), so
 * that the data of a worker that never comes back is still trained on. */
static bool has_data(coordinator *co, worker_link *l, int *adopted)
{
    if (co->hybrid || (l->shard >= 0 && !co->shards[l->shard].done))
        return true;
    for (int j = 0; j < co->n_links; j++)
        if (co->shards[j].owner < 0 && !co->shards[j].done) {
            co->shards[j].owner = l->index;
            l->shard = *adopted = j;
            return true;
        }
    return false;
}

/* The next function's first step and step count for worker l, once its clock allows one: a
 * lost worker's function first (*again set), else new steps; false when every step is given
 * out, l has no data left, or a worker failed. *position: the batches of l's data shard
 * already trained on. */
static bool take_function(coordinator *co, worker_link *l, int64_t *first, uint32_t *n,
                          bool *again, int64_t *position)
{
    pthread_mutex_lock(&co->mu);
    bool go;
    int64_t allowed;
    int adopted = -1;
    *again = false;
    if (!has_data(co, l, &adopted)) {
        pthread_mutex_unlock(&co->mu);
        return false;
    }
    *position = co->shards[l->shard].position;
    if (adopted >= 0)
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s takes over the data of worker:%d, lost, from "
                  "its batch %lld", l->name, adopted, (long long)*position);
    while ((go = !co->failed &&
                 (co->hybrid || co->n_requeued > 0 || co->dispatched < co->limit)) &&
           (co->pausing || (allowed = steps_allowed(co, l)) < 1))
        pthread_cond_wait(&co->changed, &co->mu);
    if (go && co->n_requeued > 0) {
        function f = co->requeued[--co->n_requeued];
        *first = f.first, *n = f.n, *again = true;
        co->in_flight++;
        pthread_mutex_unlock(&co->mu);
        return true;
    }
    /* Hybrid: every worker takes every step (a step is one batch from each), so each gets the
     * same functions. */
    int64_t *given = co->hybrid ? &l->dispatched : &co->dispatched;
    go = go && *given < co->limit;
    if (go) {
        int64_t k = co->c->ps.steps_per_execution;
        if (k > allowed)
            k = allowed;
        if (k > co->limit - *given)
            k = co->limit - *given;
        *first = *given + 1, *n = (uint32_t)k;
        *given += k;
        co->in_flight++;
    }
    pthread_mutex_unlock(&co->mu);
    return go;
}

/* A function given out was answered (or its worker lost, or failed). */
static void function_done(coordinator *co)
{
    pthread_mutex_lock(&co->mu);
    co->in_flight--;
    pthread_cond_broadcast(&co->changed);
    pthread_mutex_unlock(&co->mu);
}

/* Worker l takes no more functions (done, failed, or nothing left): the others stop waiting
 * for its clock. */
static void retire(coordinator *co, worker_link *l, bool failed)
{
    pthread_mutex_lock(&co->mu);
    if (l->active) {
        co->n_active--;
        co->n_finished += !failed;
    }
    if (l->lost)
        co->n_lost--;
    l->active = l->lost = false;
    co->failed = co->failed || failed;
    pthread_cond_broadcast(&co->changed);
    pthread_mutex_unlock(&co->mu);
}

/* The training scalars one_device writes (loss, accuracy, learning_rate, global_step/sec) from
 * the results since the last ones, every save_summary_steps steps; the caller holds co->mu. A
 * failure to write is logged once, and the job goes on. */
static void summarize(coordinator *co, const dt_psmsg *r)
{
    if (!co->summary)
        return;
    co->summary_loss += r->loss, co->summary_rows += r->rows, co->summary_correct += r->correct;
    if (co->steps < co->next_summary || co->summary_rows == 0)
        return;
    const dt_optim_config *oc = &co->c->optim;
    double now = dt_clock_now(), secs = now - co->summary_t;
    double rate = secs > 0 ? (double)(co->steps - co->summary_step) / secs : 0.0;
    dt_status st;
    if ((st = dt_summary_scalar(co->summary, "loss", co->steps,
                                (float)(co->summary_loss / (double)co->summary_rows))) ||
        (st = dt_summary_scalar(co->summary, "accuracy", co->steps,
                                (float)co->summary_correct / (float)co->summary_rows)) ||
        (st = dt_summary_scalar(co->summary, "learning_rate", co->steps,
                                dt_lr_schedule_at(oc, co->steps))) ||
        (st = dt_summary_scalar(co->summary, "global_step/sec", co->steps, (float)rate)) ||
        (st = dt_summary_flush(co->summary))) {
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: warning: TensorBoard summaries stop: %s",
                  dt_last_error());
        dt_summary_close(co->summary);
        co->summary = NULL;
        return;
    }
    int64_t every = co->c->fit.save_summary_steps;
    co->next_summary = (co->steps / every + 1) * every;
    co->summary_loss = 0, co->summary_rows = co->summary_correct = 0;
    co->summary_step = co->steps, co->summary_t = now;
}

static void add_result(coordinator *co, worker_link *l, const dt_psmsg *r)
{
    pthread_mutex_lock(&co->mu);
    l->completed += r->n;
    co->shards[l->shard].position += r->n;
    co->shards[l->shard].done = co->shards[l->shard].done || r->done;
    pthread_cond_broadcast(&co->changed);
    /* Hybrid: a step is every worker's batch at once, counted with worker 0's. */
    if (!co->hybrid || l->index == 0)
        co->steps += r->n;
    co->rows += r->rows, co->correct += r->correct, co->loss += r->loss;
    co->window_loss += r->loss, co->window_rows += r->rows;
    summarize(co, r);
    FILE *p = co->c->fit.progress;
    if (p && co->steps >= co->next_log) {
        double secs = dt_clock_now() - co->t0;
        fprintf(p, "step %lld: loss %.4f, %.0f samples/s\n", (long long)co->steps,
                co->window_rows > 0 ? co->window_loss / (double)co->window_rows : 0.0,
                secs > 0 ? (double)co->rows / secs : 0.0);
        fflush(p);
        co->next_log += 100;
        co->window_loss = 0, co->window_rows = 0;
    }
    pthread_mutex_unlock(&co->mu);
}

/* m to a worker and its reply within timeout seconds. A late reply to an earlier request (one
 * given up on) is dropped. *unheard (may be NULL) tells a failure of the link itself (closed,
 * silent, or no reply in time) from a reply that is an error. */
static dt_status request_or_unheard(dt_zlink *z, const dt_psmsg *m, double timeout,
                                    dt_psbuf *out, dt_psbuf *in, const char *who,
                                    dt_psmsg_type want, dt_psmsg *reply, bool *unheard)
{
    out->len = 0;
    bool link_failed = false;
    double deadline = dt_clock_now() + timeout;
    dt_status st = dt_psmsg_encode(m, NULL, NULL, out);
    if (st == DT_OK)
        link_failed = (st = dt_zlink_send(z, out, timeout)) != DT_OK;
    while (st == DT_OK) {
        double left = deadline - dt_clock_now();
        if ((st = dt_zlink_await(z, left > 0 ? left : 0, in))) {
            link_failed = true;
            break;
        }
        if ((st = dt_psmsg_decode(in->data, in->len, who, reply)) ||
            reply->request_id == m->request_id)
            break;
    }
    if (unheard)
        *unheard = link_failed;
    if (st == DT_OK && reply->type == DT_PSMSG_ERROR)
        st = dt_error(dt_psmsg_status(reply), "%s: %.*s",
                      who, (int)reply->text_len, reply->text);
    else if (st == DT_OK && reply->type != want)
        st = dt_error(DT_ERR_PEER, "%s: a %s reply where %s was due", who,
                      dt_psmsg_type_name(reply->type), dt_psmsg_type_name(want));
    return st;
}

static dt_status request(dt_zlink *z, const dt_psmsg *m, double timeout, dt_psbuf *out,
                         dt_psbuf *in, const char *who, dt_psmsg_type want, dt_psmsg *reply)
{
    return request_or_unheard(z, m, timeout, out, in, who, want, reply, NULL);
}

/* Hybrid, before the first function: every worker's ring port, then the ring they all join at
 * once. DT_END when another worker failed first. */
static dt_status join_ring(coordinator *co, worker_link *l, dt_zlink *z, uint64_t *id,
                           dt_psbuf *out, dt_psbuf *in)
{
    const dt_train_config *c = co->c;
    dt_psmsg ask = {.type = DT_PSMSG_RING, .request_id = ++*id}, reply;
    dt_status st = request(z, &ask, c->comm.connect_timeout, out, in, l->name, DT_PSMSG_RING,
                           &reply);
    if (st == DT_OK && reply.n != 1)
        st = dt_error(DT_ERR_PEER, "%s: %u ring ports where its own was due", l->name, reply.n);
    if (st)
        return st;
    pthread_mutex_lock(&co->mu);
    co->ring_ports[l->index] = dt_psmsg_port(&reply, 0);
    co->ports_known++;
    pthread_cond_broadcast(&co->changed);
    while (co->ports_known < co->n_links && !co->failed)
        pthread_cond_wait(&co->changed, &co->mu);
    bool go = !co->failed;
    pthread_mutex_unlock(&co->mu);
    if (!go)
        return DT_END;
    dt_psmsg ring = {.type = DT_PSMSG_RING, .request_id = ++*id, .n = (uint32_t)co->n_links,
                     .ports_host = co->ring_ports};
    /* The worker answers once every worker is in the ring, within its connect timeout. */
    return request(z, &ring, c->comm.connect_timeout + 10.0, out, in, l->name, DT_PSMSG_ACK,
                   &reply);
}

/* Hybrid, at the end: worker 0's dense variables (every worker holds the same) into m. */
static dt_status read_dense(coordinator *co, worker_link *l, dt_zlink *z, uint64_t *id,
                            dt_psbuf *out, dt_psbuf *in)
{
    dt_arena *p = dt_model_params(co->m);
    dt_psmsg ask = {.type = DT_PSMSG_PULL_DENSE, .request_id = ++*id, .count = p->n_elems},
             reply;
    dt_status st = request(z, &ask, co->c->ps.worker_timeout, out, in, l->name, DT_PSMSG_DENSE,
                           &reply);
    if (st == DT_OK && (reply.offset != 0 || reply.count != p->n_elems))
        st = dt_error(DT_ERR_PEER, "%s: %llu dense values from %llu where %zu from 0 were due",
                      l->name, (unsigned long long)reply.count,
                      (unsigned long long)reply.offset, p->n_elems);
    if (st == DT_OK)
        dt_psmsg_values(&reply, 0, p->n_elems, p->data);
    return st;
}

/* Worker l was lost (why: the last error) with the function [first, first + n) unfinished: the
 * function goes back to the queue, for the other workers, and l stops counting among the
 * active ones (bounded staleness no longer waits for its clock). */
static dt_status lose_worker(coordinator *co, worker_link *l, int64_t first, uint32_t n)
{
    char why[DT_PSMSG_MAX_TEXT];
    snprintf(why, sizeof why, "%s", dt_last_error());
    pthread_mutex_lock(&co->mu);
    if (co->n_requeued == co->requeued_cap) {
        int cap = co->requeued_cap ? 2 * co->requeued_cap : 16;
        function *f = realloc(co->requeued, (size_t)cap * sizeof *f);
        if (!f) {
            pthread_mutex_unlock(&co->mu);
            return dt_error(DT_ERR_NOMEM, "%s lost (%s), and no memory to queue its steps", l->name,
                            why);
        }
        co->requeued = f, co->requeued_cap = cap;
    }
    co->requeued[co->n_requeued++] = (function){first, n};
    if (l->shard >= 0)
        co->shards[l->shard].owner = -1; /* another worker may take its data over */
    l->shard = -1;
    l->active = false, l->lost = true;
    co->n_active--, co->n_lost++;
    if (co->n_active == 0)
        co->all_lost_at = dt_clock_now();
    pthread_cond_broadcast(&co->changed);
    pthread_mutex_unlock(&co->mu);
    dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s lost: %s; its steps %lld-%lld go back to the queue "
              "for the other workers", l->name, why, (long long)first,
              (long long)(first + n - 1));
    return DT_OK;
}

/* Lost worker l back (it answered): it counts as active again, its clock at the slowest
 * active worker's so bounded staleness neither waits for it nor lets it run ahead. */
static void rejoin(coordinator *co, worker_link *l)
{
    pthread_mutex_lock(&co->mu);
    int64_t slowest = -1;
    for (int i = 0; i < co->n_links; i++)
        if (co->links[i].active && (slowest < 0 || co->links[i].completed < slowest))
            slowest = co->links[i].completed;
    if (slowest >= 0)
        l->completed = slowest;
    /* Its own data again, unless another worker took it over meanwhile. */
    data_shard *own = &co->shards[l->index];
    if (own->owner < 0 && !own->done)
        own->owner = l->index, l->shard = l->index;
    l->lost = false, l->active = true;
    co->n_lost--, co->n_active++;
    co->all_lost_at = 0;
    pthread_cond_broadcast(&co->changed);
    pthread_mutex_unlock(&co->mu);
    dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s rejoined: it takes steps again", l->name);
}

/* While training goes on, pings lost worker l every second until it answers (restarted, or
 * reachable again): DT_OK when it is back, DT_END when training ended without it, an error
 * when every worker has been lost for worker_timeout seconds. */
static dt_status await_rejoin(coordinator *co, worker_link *l, dt_zlink *z, uint64_t *id,
                              dt_psbuf *out, dt_psbuf *in)
{
    const double timeout = co->c->ps.worker_timeout;
    for (;;) {
        pthread_mutex_lock(&co->mu);
        bool over = co->failed || (co->n_active == 0 && co->n_finished > 0);
        double all_lost_at = co->n_active == 0 ? co->all_lost_at : 0;
        pthread_mutex_unlock(&co->mu);
        if (over)
            return DT_END;
        double t0 = dt_clock_now();
        if (all_lost_at > 0 && t0 - all_lost_at > timeout)
            return dt_error(DT_ERR_TIMEOUT, "every worker has been lost for %.0f s "
                            "(--worker-timeout): training cannot go on", timeout);
        dt_psmsg ping = {.type = DT_PSMSG_PING, .request_id = ++*id}, reply;
        if (request(z, &ping, 1.0, out, in, l->name, DT_PSMSG_PONG, &reply) == DT_OK) {
            rejoin(co, l);
            return DT_OK;
        }
        double left = 1.0 - (dt_clock_now() - t0);
        if (left > 0)
            dt_sleep(left);
    }
}

/* A failure that ends the job (of worker `index`, or -2: a ps task's): logged, kept when it is
 * the first, and every worker stops taking functions. */
static void record_failure(coordinator *co, int index, dt_status st)
{
    dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s", dt_last_error());
    pthread_mutex_lock(&co->mu);
    if (co->first_failed == -1) {
        co->first_failed = index, co->first_status = st;
        snprintf(co->first_error, sizeof co->first_error, "%s", dt_last_error());
    }
    co->failed = true;
    pthread_cond_broadcast(&co->changed);
    pthread_mutex_unlock(&co->mu);
}

/* One worker's thread: it waits for the worker, then takes functions until none is left or
 * the worker's data is used up. A worker whose link closes or falls silent mid-function is
 * lost, not failed (but in hybrid mode, whose ring cannot go on without it): its function goes
 * to the others, and it may come back. */
static void *drive_worker(void *arg)
{
    worker_link *l = arg;
    coordinator *co = l->co;
    const dt_train_config *c = co->c;
    dt_zlink *z = NULL;
    dt_psbuf out = {0}, in = {0};
    dt_psmsg reply;
    uint64_t id = 0;
    dt_status st = dt_zlink_client(l->endpoint, l->name, co->pc->secret, co->pc->secret_len,
                                   c->ps.heartbeat_timeout, &z);
    if (st == DT_OK) {
        dt_psmsg ping = {.type = DT_PSMSG_PING, .request_id = ++id};
        st = request(z, &ping, c->comm.connect_timeout, &out, &in, l->name, DT_PSMSG_PONG,
                     &reply);
    }
    bool cancelled = false, back = false;
    if (st == DT_OK && co->hybrid && (st = join_ring(co, l, z, &id, &out, &in)) == DT_END)
        st = DT_OK, cancelled = true;
    int64_t first, position;
    uint32_t n;
    bool again;
    while (st == DT_OK && !cancelled && take_function(co, l, &first, &n, &again, &position)) {
        if (again)
            dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s takes steps %lld-%lld again (a lost "
                      "worker's)", l->name, (long long)first, (long long)(first + n - 1));
        dt_psmsg run = {.type = DT_PSMSG_RUN, .request_id = ++id, .step = first, .n = n,
                        .position = position, .shard = co->hybrid ? l->index : l->shard};
        bool unheard;
        st = request_or_unheard(z, &run, c->ps.worker_timeout, &out, &in, l->name,
                                DT_PSMSG_RESULT, &reply, &unheard);
        if (st == DT_OK)
            add_result(co, l, &reply);
        function_done(co);
        if (st == DT_OK) {
            if (back)
                dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s took steps %lld-%lld after rejoining",
                          l->name, (long long)first, (long long)(first + reply.n - 1));
            back = false;
            /* Its data used up: hybrid's workers end together; another may take over a lost
             * worker's data. */
            if (reply.done && co->hybrid)
                break;
            continue;
        }
        if (!unheard || co->hybrid || (st = lose_worker(co, l, first, n)))
            break;
        st = await_rejoin(co, l, z, &id, &out, &in);
        if (st == DT_END)
            st = DT_OK, cancelled = true; /* training ended without it */
        back = st == DT_OK;
    }
    if (st == DT_OK && !cancelled && co->hybrid && l->index == 0)
        st = read_dense(co, l, z, &id, &out, &in);
    if (st)
        record_failure(co, l->index, st);
    retire(co, l, st != DT_OK);
    /* Every worker is stopped, the failed and lost ones too if they can still hear it. */
    if (z) {
        dt_psmsg stop = {.type = DT_PSMSG_STOP, .request_id = ++id};
        request(z, &stop, st || cancelled ? 1.0 : 10.0, &out, &in, l->name, DT_PSMSG_ACK,
                &reply);
    }
    dt_zlink_close(z);
    dt_psbuf_free(&out);
    dt_psbuf_free(&in);
    return NULL;
}

/* Best effort, a second each: tells every worker to stop, when training could not begin. */
static void stop_workers(const coordinator *co, int n)
{
    for (int i = 0; i < n; i++) {
        char name[DT_HOST_CAP + 48], endpoint[DT_HOST_CAP + 32];
        dt_cluster_task_name(&co->pc->cl, DT_JOB_WORKER, i, name, sizeof name);
        ps_endpoint_of(dt_cluster_addr(&co->pc->cl, DT_JOB_WORKER, i), endpoint, sizeof endpoint);
        dt_zlink *z = NULL;
        dt_psbuf out = {0}, in = {0};
        dt_psmsg stop = {.type = DT_PSMSG_STOP, .request_id = 1}, reply;
        if (dt_zlink_client(endpoint, name, co->pc->secret, co->pc->secret_len, 0, &z) == DT_OK)
            request(z, &stop, 1.0, &out, &in, name, DT_PSMSG_ACK, &reply);
        dt_zlink_close(z);
        dt_psbuf_free(&out);
        dt_psbuf_free(&in);
    }
}

/* Reads every variable back from the ps tasks into m: dense, then the tables a million rows at
 * a time. */
static dt_status read_back(dt_ps_client *ps, dt_model *m, bool dense)
{
    dt_status st = dense ? dt_ps_client_pull_dense(ps, dt_model_params(m)->data) : DT_OK;
    const size_t chunk = (size_t)1 << 20;
    int64_t *ids = NULL;
    for (int t = 0; t < dt_model_num_tables(m) && st == DT_OK; t++) {
        dt_table *tab = dt_model_table(m, t);
        if (!ids && !(ids = malloc(chunk * sizeof *ids)))
            return dt_error(DT_ERR_NOMEM, "no memory to read the tables back");
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

static dt_status drive_workers(coordinator *co, int n)
{
    worker_link *links = calloc((size_t)n, sizeof *links);
    co->ring_ports = calloc((size_t)n, sizeof *co->ring_ports);
    co->shards = calloc((size_t)n, sizeof *co->shards);
    if (!links || !co->ring_ports || !co->shards) {
        free(links), free(co->ring_ports), free(co->shards);
        co->ring_ports = NULL, co->shards = NULL;
        return dt_error(DT_ERR_NOMEM, "no memory for %d workers", n);
    }
    int started = 0;
    dt_status st = DT_OK;
    pthread_mutex_lock(&co->mu);
    co->links = links, co->n_links = n, co->n_active = n;
    for (int i = 0; i < n; i++) {
        links[i].active = true, links[i].shard = i;
        co->shards[i].owner = i;
    }
    pthread_mutex_unlock(&co->mu);
    for (int i = 0; i < n; i++) {
        worker_link *l = &links[i];
        l->co = co, l->index = i;
        dt_cluster_task_name(&co->pc->cl, DT_JOB_WORKER, i, l->name, sizeof l->name);
        ps_endpoint_of(dt_cluster_addr(&co->pc->cl, DT_JOB_WORKER, i), l->endpoint,
                    sizeof l->endpoint);
        if (pthread_create(&l->thread, NULL, drive_worker, l) != 0) {
            st = dt_error(DT_ERR_IO, "cannot start the thread of %s", l->name);
            for (int k = i; k < n; k++)
                retire(co, &links[k], true);
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(links[i].thread, NULL);
    /* The first failure is the cause; the others' may only be its echo (hybrid's ring). */
    if (st == DT_OK && co->first_failed != -1)
        st = dt_error(co->first_status, "%s; training stopped", co->first_error);
    pthread_mutex_lock(&co->mu);
    co->links = NULL, co->n_links = 0;
    pthread_mutex_unlock(&co->mu);
    free(links);
    free(co->ring_ports), free(co->shards);
    co->ring_ports = NULL, co->shards = NULL;
    free(co->requeued);
    co->requeued = NULL, co->n_requeued = co->requeued_cap = 0;
    return st;
}

/* The ps tasks watched while the workers train. */
typedef struct {
    coordinator *co;
    dt_ps_client *ps;
    dt_model *m;
    int n_ps;
    pthread_t thread;
    int over;          /* set (atomically) when training is over */
} ps_watch;

static bool watch_over(ps_watch *pw) { return __atomic_load_n(&pw->over, __ATOMIC_ACQUIRE); }

/* Whether a checkpoint is due: every save_checkpoints_steps steps, else every
 * save_checkpoints_secs seconds. */
static bool checkpoint_due(coordinator *co)
{
    const dt_fit_config *f = &co->c->fit;
    if (!co->checkpoints)
        return false;
    pthread_mutex_lock(&co->mu);
    int64_t steps = co->steps;
    pthread_mutex_unlock(&co->mu);
    if (f->save_checkpoints_steps > 0)
        return steps >= co->saved_step + f->save_checkpoints_steps;
    return f->save_checkpoints_secs > 0 && steps > co->saved_step &&
           dt_clock_now() - co->saved_at >= f->save_checkpoints_secs;
}

/* A checkpoint of the steps completed: no function is given out until every one in flight is
 * answered, so every update of those steps is in and none of a later one; then every ps task
 * writes its shards, and the manifest (with the dense variables, read back) follows. */
static dt_status save_checkpoint(coordinator *co, dt_ps_client *ps, dt_model *m, int n_ps,
                                 bool final)
{
    const dt_train_config *c = co->c;
    pthread_mutex_lock(&co->mu);
    co->pausing = true;
    while (co->in_flight > 0 && !co->failed)
        pthread_cond_wait(&co->changed, &co->mu);
    int64_t step = co->steps;
    pthread_mutex_unlock(&co->mu);
    dt_status st = DT_OK;
    if (step > co->saved_step || (final && step > 0)) {
        double t0 = dt_clock_now();
        st = dt_ps_client_pull_dense(ps, dt_model_params(m)->data);
        if (st == DT_OK)
            st = dt_ps_ckpt_save(&co->mgr, ps, n_ps, &c->fit, m, &c->optim, step,
                                 co->pc->cl.n_tasks[DT_JOB_WORKER], final);
        if (st == DT_OK) {
            co->saved_step = step;
            if (c->fit.log)
                dt_log_to(c->fit.log, DT_LOG_INFO, "Saving checkpoints for %lld into %s "
                          "(%d ps shard files, %.2f s).", (long long)step, co->mgr.dir, n_ps,
                          dt_clock_now() - t0);
        }
    }
    co->saved_at = dt_clock_now();
    pthread_mutex_lock(&co->mu);
    co->pausing = false;
    pthread_cond_broadcast(&co->changed);
    pthread_mutex_unlock(&co->mu);
    return st;
}

/* Every second a PING to every ps task. A lost one is waited for up to --ps-recovery-timeout
 * (started again by its operator or by dtrain launch, its shards restored from its snapshot);
 * back, it gets the variables' definitions again: a no-op for the shards it restored, the
 * initial values for what it lost. Not back in time: the job fails, naming it. */
static void *watch_ps(void *arg)
{
    ps_watch *pw = arg;
    coordinator *co = pw->co;
    const dt_train_config *c = co->c;
    while (!watch_over(pw)) {
        for (int i = 0; i < 10 && !watch_over(pw); i++)
            dt_sleep(0.1);
        if (watch_over(pw))
            continue;
        dt_status ok = dt_ps_client_ping(pw->ps);
        if (ok == DT_OK && checkpoint_due(co) &&
            (ok = save_checkpoint(co, pw->ps, pw->m, pw->n_ps, false)) &&
            !dt_ps_client_broken(pw->ps)) {
            record_failure(co, -2, ok);
            break;
        }
        if (ok == DT_OK)
            continue;
        char why[DT_PSMSG_MAX_TEXT];
        snprintf(why, sizeof why, "%s", dt_last_error());
        pthread_mutex_lock(&co->mu);
        int64_t steps = co->steps;
        pthread_mutex_unlock(&co->mu);
        double t0 = dt_clock_now();
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: a ps task is lost after %lld steps (%s): waiting up "
                  "to %.0f s for it (--ps-recovery-timeout)", (long long)steps, why,
                  c->ps.recovery_timeout);
        dt_status st = dt_ps_client_reconnect(pw->ps, c->ps.recovery_timeout);
        if (st == DT_OK)
            st = ps_place_variables(c, pw->m, pw->ps, pw->n_ps, true, 0);
        if (st) {
            dt_error(st, "%s, and not back within %.0f s (--ps-recovery-timeout): %s", why,
                     c->ps.recovery_timeout, dt_last_error());
            record_failure(co, -2, st);
            break;
        }
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: the ps tasks are back %.1f s after the loss was "
                  "seen; a ps task started again holds its last snapshot (its log names the "
                  "step), the updates after it up to step %lld are lost", dt_clock_now() - t0,
                  (long long)steps);
    }
    return NULL;
}

dt_status dt_ps_coordinate(const dt_train_config *c, dt_model *m, dt_fit_result *res)
{
    memset(res, 0, sizeof *res);
    ps_cluster pc;
    dt_status st = ps_open_cluster(c, &pc);
    if (st)
        return st;
    dt_ps_client *ps = NULL;
    coordinator co = {.c = c, .pc = &pc, .m = m, .hybrid = c->ps.mode == DT_PS_HYBRID,
                      .limit = c->fit.max_steps > 0 ? c->fit.max_steps : INT64_MAX,
                      .next_log = 100, .first_failed = -1};
    pthread_mutex_init(&co.mu, NULL);
    pthread_cond_init(&co.changed, NULL);
    int n_workers = pc.cl.n_tasks[DT_JOB_WORKER];
    if (n_workers < 1)
        st = dt_error(DT_ERR_INVALID, "TF_CONFIG: cluster.worker: parameter_server training "
                      "needs at least one worker task");
    if (st == DT_OK)
        st = dt_ps_client_open(&pc.me, &pc.cl, c->comm.connect_timeout, c->ps.worker_timeout,
                               &ps);
    if (st == DT_OK)
        st = ps_place_variables(c, m, ps, pc.cl.n_tasks[DT_JOB_PS], true, 0);
    /* A ps lost while the variables were being placed: waited for as during training. */
    if (st && ps && dt_ps_client_broken(ps)) {
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s: waiting up to %.0f s for the ps task "
                  "(--ps-recovery-timeout)", dt_last_error(), c->ps.recovery_timeout);
        if ((st = dt_ps_client_reconnect(ps, c->ps.recovery_timeout)) == DT_OK)
            st = ps_place_variables(c, m, ps, pc.cl.n_tasks[DT_JOB_PS], true, 0);
    }
    int64_t start = 0;
    if (st == DT_OK && (st = restore_start(c, ps, m, pc.cl.n_tasks[DT_JOB_PS], &start)) == DT_OK)
        co.dispatched = co.steps = co.saved_step = start;
    co.next_log = (start / 100 + 1) * 100;
    if (st == DT_OK && c->fit.model_dir && co.hybrid)
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: warning: --ps-mode hybrid writes no checkpoints "
                  "(its dense variables live on the workers)");
    else if (st == DT_OK && c->fit.model_dir) {
        st = dt_ckpt_manager_open(&co.mgr, c->fit.model_dir, c->fit.keep_checkpoint_max,
                                  c->fit.keep_checkpoint_every_n_hours, c->fit.log);
        co.checkpoints = st == DT_OK;
        co.saved_at = dt_clock_now();
    }
    /* TensorBoard, as one_device writes it into the model directory. */
    if (st == DT_OK && c->fit.model_dir && c->fit.save_summary_steps > 0) {
        st = dt_summary_open(c->fit.model_dir, &co.summary);
        int64_t every = c->fit.save_summary_steps;
        co.next_summary = (co.steps / every + 1) * every;
        co.summary_step = co.steps, co.summary_t = dt_clock_now();
    }
    co.t0 = dt_clock_now();
    ps_watch pw = {.co = &co, .ps = ps, .m = m, .n_ps = pc.cl.n_tasks[DT_JOB_PS]};
    bool watching = st == DT_OK && pthread_create(&pw.thread, NULL, watch_ps, &pw) == 0;
    dt_status run = st ? st : drive_workers(&co, n_workers);
    if (watching) {
        __atomic_store_n(&pw.over, 1, __ATOMIC_RELEASE);
        pthread_join(pw.thread, NULL);
        /* A ps lost at the very end: the reading back waits for it as the steps would have. */
        if (run == DT_OK && dt_ps_client_broken(ps) &&
            (run = dt_ps_client_reconnect(ps, c->ps.recovery_timeout)) == DT_OK)
            run = ps_place_variables(c, m, ps, pc.cl.n_tasks[DT_JOB_PS], true, 0);
    }
    if (run == DT_OK && co.checkpoints)
        run = save_checkpoint(&co, ps, m, pc.cl.n_tasks[DT_JOB_PS], true);
    /* The first error is the one reported, whatever stopping the others says. */
    char first[DT_PSMSG_MAX_TEXT];
    snprintf(first, sizeof first, "%s", run ? dt_last_error() : "");
    if (st)
        stop_workers(&co, n_workers); /* they waited for functions that will not come */
    res->train_seconds = dt_clock_now() - co.t0;
    res->steps = co.steps, res->samples = co.rows;
    res->epochs = c->fit.epochs;
    res->final_loss = co.rows > 0 ? co.loss / (double)co.rows : NAN;
    res->final_accuracy = co.rows > 0 ? (double)co.correct / (double)co.rows : NAN;
    res->val_auc = NAN;
    if (run == DT_OK)
        st = read_back(ps, m, !co.hybrid); /* hybrid: worker 0 gave the dense ones */
    else
        st = run;
    /* The ps tasks stop whatever happened: none outlives the job. */
    if (ps) {
        dt_status stop = dt_ps_client_stop(ps);
        if (st == DT_OK)
            st = stop;
    }
    if (run)
        dt_error(run, "%s", first);
    dt_ps_client_close(ps);
    if (co.checkpoints)
        dt_ckpt_manager_close(&co.mgr);
    dt_summary_close(co.summary);
    pthread_cond_destroy(&co.changed);
    pthread_mutex_destroy(&co.mu);
    ps_close_cluster(&pc);
    return st;
}
