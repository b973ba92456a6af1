/* Parameter-server training: the coordinator's worker threads (see ps_coord.h, ps_train.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/clock.h"
#include "dtrain/log.h"
#include "ps_coord.h"

/* Worker i's task name and ZeroMQ endpoint; false for one a sparse cluster does not show. */
static bool worker_address(const ps_cluster *pc, int i, char name[DT_HOST_CAP + 48],
                           char endpoint[DT_HOST_CAP + 32])
{
    if (!dt_cluster_known(&pc->cl, DT_JOB_WORKER, i))
        return false;
    dt_cluster_task_name(&pc->cl, DT_JOB_WORKER, i, name, DT_HOST_CAP + 48);
    ps_endpoint_of(dt_cluster_addr(&pc->cl, DT_JOB_WORKER, i), endpoint, DT_HOST_CAP + 32);
    return true;
}

dt_status ps_coord_init(ps_coord *co, const dt_train_config *c, const ps_cluster *pc,
                        dt_model *m, const dt_ps_sched_config *cfg)
{
    memset(co, 0, sizeof *co);
    co->c = c, co->pc = pc, co->m = m, co->hybrid = cfg->hybrid, co->first_failed = -1;
    dt_status st = dt_ps_sched_init(&co->sched, cfg);
    if (st)
        return st;
    int n = cfg->n_workers;
    co->links = calloc((size_t)n, sizeof *co->links);
    co->ring_ports = calloc((size_t)n, sizeof *co->ring_ports);
    pthread_condattr_t attr;
    bool attr_ok = pthread_condattr_init(&attr) == 0;
    bool cond_ok = attr_ok && pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
                   pthread_cond_init(&co->changed, &attr) == 0;
    if (attr_ok)
        pthread_condattr_destroy(&attr);
    if (!co->links || !co->ring_ports || !cond_ok) {
        if (cond_ok)
            pthread_cond_destroy(&co->changed);
        free(co->links), free(co->ring_ports);
        dt_ps_sched_free(&co->sched);
        return dt_error(DT_ERR_NOMEM, "no memory for %d workers", n);
    }
    pthread_mutex_init(&co->mu, NULL);
    co->n_links = n;
    /* A sparse cluster's worker coordinates itself alone: its one link is to its own task. */
    for (int i = 0; i < n; i++) {
        ps_worker_link *l = &co->links[i];
        l->co = co, l->index = i;
        worker_address(pc, pc->cl.sparse ? pc->cl.task_index : i, l->name, l->endpoint);
    }
    return DT_OK;
}

void ps_coord_free(ps_coord *co)
{
    pthread_cond_destroy(&co->changed);
    pthread_mutex_destroy(&co->mu);
    dt_ps_sched_free(&co->sched);
    free(co->links), free(co->ring_ports), free(co->results);
    memset(co, 0, sizeof *co);
}

void ps_coord_wait(ps_coord *co, double until)
{
    double left = until - dt_clock_now();
    if (left <= 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = ts.tv_nsec + (long long)(left * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_cond_timedwait(&co->changed, &co->mu, &ts);
}

void ps_coord_fail(ps_coord *co, int index, dt_status st)
{
    dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s", dt_last_error());
    pthread_mutex_lock(&co->mu);
    if (co->first_failed == -1) {
        co->first_failed = index, co->first_status = st;
        snprintf(co->first_error, sizeof co->first_error, "%s", dt_last_error());
    }
    dt_ps_sched_fail(&co->sched);
    pthread_cond_broadcast(&co->changed);
    pthread_mutex_unlock(&co->mu);
}

/* The next function for worker l, once the scheduler has one: false when there is none left
 * for it. */
/* A worker kept waiting (a checkpoint or an evaluation holds the steps, or bounded staleness)
 * hears from the coordinator this often, so that its --coordinator-timeout counts silence, not
 * waiting. */
#define IDLE_PING_SECONDS 1.0

typedef enum { TAKEN_RUN, TAKEN_NONE, TAKEN_IDLE } taken;

/* The next function for worker l, once the scheduler has one: TAKEN_NONE when there is none
 * left for it, TAKEN_IDLE when it has waited IDLE_PING_SECONDS (ask again after a PING). */
static taken take_function(ps_coord *co, ps_worker_link *l, dt_ps_function *fn)
{
    double idle_at = dt_clock_now() + IDLE_PING_SECONDS;
    pthread_mutex_lock(&co->mu);
    dt_ps_take t;
    int adopted;
    while ((t = dt_ps_sched_take(&co->sched, l->index, fn, &adopted)) == DT_PS_TAKE_WAIT) {
        if (adopted >= 0 || dt_clock_now() >= idle_at)
            break;
        ps_coord_wait(co, idle_at);
    }
    int64_t position = adopted >= 0 ? co->sched.shards[adopted].position : 0;
    pthread_mutex_unlock(&co->mu);
    if (adopted >= 0)
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s takes over the data of worker:%d, lost, from "
                  "its batch %lld", l->name, adopted, (long long)position);
    return t == DT_PS_TAKE_RUN ? TAKEN_RUN : t == DT_PS_TAKE_NONE ? TAKEN_NONE : TAKEN_IDLE;
}

/* The result of fn from worker l: to the scheduler, and handed to the loop. */
static void add_result(ps_coord *co, ps_worker_link *l, const dt_ps_function *fn,
                       const dt_job_result *r)
{
    pthread_mutex_lock(&co->mu);
    int64_t steps = dt_ps_sched_answered(&co->sched, l->index, fn, r->steps, r->done);
    if (co->n_results == co->results_cap) {
        int cap = co->results_cap ? 2 * co->results_cap : 64;
        ps_result *q = realloc(co->results, (size_t)cap * sizeof *q);
        if (q)
            co->results = q, co->results_cap = cap;
    }
    /* Without memory for the queue, the figures join the last result handed over. */
    ps_result x = {.steps = steps, .loss = r->loss, .rows = r->rows, .correct = r->correct};
    if (co->n_results < co->results_cap)
        co->results[co->n_results++] = x;
    else if (co->n_results > 0) {
        ps_result *last = &co->results[co->n_results - 1];
        last->steps += x.steps, last->loss += x.loss;
        last->rows += x.rows, last->correct += x.correct;
    }
    pthread_cond_broadcast(&co->changed);
    pthread_mutex_unlock(&co->mu);
}

/* Hybrid, before the first function: every worker's ring port, then the ring they all join at
 * once. DT_END when another worker failed first. */
static dt_status join_ring(ps_coord *co, ps_worker_link *l, dt_job_link *jl)
{
    const dt_train_config *c = co->c;
    uint16_t port = 0;
    dt_status st = dt_job_link_ring_port(jl, c->comm.connect_timeout, &port);
    if (st)
        return st;
    pthread_mutex_lock(&co->mu);
    co->ring_ports[l->index] = port;
    co->ports_known++;
    pthread_cond_broadcast(&co->changed);
    while (co->ports_known < co->n_links && !co->sched.failed)
        pthread_cond_wait(&co->changed, &co->mu);
    bool go = !co->sched.failed;
    pthread_mutex_unlock(&co->mu);
    if (!go)
        return DT_END;
    /* The worker answers once every worker is in the ring, within its connect timeout. */
    return dt_job_link_ring(jl, co->ring_ports, (uint32_t)co->n_links,
                            c->comm.connect_timeout + 10.0);
}

/* Hybrid, at the end: worker 0's dense variables (every worker holds the same) into m. */
static dt_status read_dense(ps_coord *co, dt_job_link *jl)
{
    dt_arena *p = dt_model_params(co->m);
    return dt_job_link_pull_dense(jl, p->data, p->n_elems, co->c->ps.worker_timeout);
}

/* Worker l was lost (why: the last error) with fn unfinished: fn goes back to the queue, for
 * the other workers, and l stops counting among the active ones (bounded staleness no longer
 * waits for its clock). */
static dt_status lose_worker(ps_coord *co, ps_worker_link *l, const dt_ps_function *fn)
{
    char why[DT_JOB_MAX_TEXT];
    snprintf(why, sizeof why, "%s", dt_last_error());
    pthread_mutex_lock(&co->mu);
    dt_status st = dt_ps_sched_lose(&co->sched, l->index, fn);
    if (st == DT_OK && dt_ps_sched_all_lost(&co->sched))
        co->all_lost_at = dt_clock_now();
    pthread_cond_broadcast(&co->changed);
    pthread_mutex_unlock(&co->mu);
    if (st)
        return dt_error(st, "%s lost (%s), and no memory to queue its steps", l->name, why);
    dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s lost: %s; its steps %lld-%lld go back to the queue "
              "for the other workers", l->name, why, (long long)fn->first,
              (long long)(fn->first + fn->n - 1));
    return DT_OK;
}

/* Lost worker l back (it answered): it counts as active again. */
static void rejoin(ps_coord *co, ps_worker_link *l)
{
    pthread_mutex_lock(&co->mu);
    dt_ps_sched_rejoin(&co->sched, l->index);
    co->all_lost_at = 0;
    pthread_cond_broadcast(&co->changed);
    pthread_mutex_unlock(&co->mu);
    dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s rejoined: it takes steps again", l->name);
}

/* While training goes on, pings lost worker l every second until it answers (restarted, or
 * reachable again): DT_OK when it is back, DT_END when training ended without it, an error
 * when every worker has been lost for worker_timeout seconds. */
static dt_status await_rejoin(ps_coord *co, ps_worker_link *l, dt_job_link *jl)
{
    const double timeout = co->c->ps.worker_timeout;
    for (;;) {
        pthread_mutex_lock(&co->mu);
        bool over = dt_ps_sched_over(&co->sched);
        double all_lost_at = dt_ps_sched_all_lost(&co->sched) ? co->all_lost_at : 0;
        pthread_mutex_unlock(&co->mu);
        if (over)
            return DT_END;
        double t0 = dt_clock_now();
        if (all_lost_at > 0 && t0 - all_lost_at > timeout)
            return dt_error(DT_ERR_TIMEOUT, "every worker has been lost for %.0f s "
                            "(--worker-timeout): training cannot go on", timeout);
        if (dt_job_link_ping(jl, 1.0) == DT_OK) {
            rejoin(co, l);
            return DT_OK;
        }
        double left = 1.0 - (dt_clock_now() - t0);
        if (left > 0)
            dt_sleep(left);
    }
}

/* Worker l takes no more functions (done, failed, or nothing left): the others stop waiting
 * for its clock. */
static void retire(ps_coord *co, ps_worker_link *l, bool failed)
{
    pthread_mutex_lock(&co->mu);
    dt_ps_sched_retire(&co->sched, l->index, failed);
    co->n_running--;
    pthread_cond_broadcast(&co->changed);
    pthread_mutex_unlock(&co->mu);
}

/* One worker's thread: it waits for the worker, then takes functions until none is left or
 * the worker's data is used up. A worker whose link closes or falls silent mid-function is
 * lost, not failed (but in hybrid mode, whose ring cannot go on without it): its function goes
 * to the others, and it may come back. */
static void *drive_worker(void *arg)
{
    ps_worker_link *l = arg;
    ps_coord *co = l->co;
    const dt_train_config *c = co->c;
    dt_job_link *jl = NULL;
    dt_status st = dt_job_link_open(l->endpoint, l->name, co->pc->secret, co->pc->secret_len,
                                    c->ps.heartbeat_timeout, &jl);
    if (st == DT_OK)
        st = dt_job_link_ping(jl, c->comm.connect_timeout);
    bool cancelled = false, back = false;
    if (st == DT_OK && co->hybrid && (st = join_ring(co, l, jl)) == DT_END)
        st = DT_OK, cancelled = true;
    dt_ps_function fn;
    for (taken k; st == DT_OK && !cancelled && (k = take_function(co, l, &fn)) != TAKEN_NONE;) {
        if (k == TAKEN_IDLE) {
            /* Heard from while it waits; a worker that does not answer is found lost at its
             * next function. */
            dt_job_link_ping(jl, IDLE_PING_SECONDS);
            continue;
        }
        if (fn.again)
            dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s takes steps %lld-%lld again (a lost "
                      "worker's)", l->name, (long long)fn.first, (long long)(fn.first + fn.n - 1));
        dt_job_run run = {.first = fn.first, .steps = fn.n, .position = fn.position,
                          .shard = fn.shard};
        dt_job_result result;
        bool unheard;
        st = dt_job_link_run(jl, &run, c->ps.worker_timeout, &result, &unheard);
        if (st == DT_OK) {
            add_result(co, l, &fn, &result);
            if (back)
                dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s took steps %lld-%lld after rejoining",
                          l->name, (long long)fn.first, (long long)(fn.first + result.steps - 1));
            back = false;
            /* Its data used up: hybrid's workers end together; another may take over a lost
             * worker's data. */
            if (result.done && co->hybrid)
                break;
            continue;
        }
        if (!unheard || co->hybrid) {
            pthread_mutex_lock(&co->mu);
            dt_ps_sched_unanswered(&co->sched, l->index);
            pthread_cond_broadcast(&co->changed);
            pthread_mutex_unlock(&co->mu);
            break;
        }
        if ((st = lose_worker(co, l, &fn)))
            break;
        st = await_rejoin(co, l, jl);
        if (st == DT_END)
            st = DT_OK, cancelled = true; /* training ended without it */
        back = st == DT_OK;
    }
    if (st == DT_OK && !cancelled && co->hybrid && l->index == 0)
        st = read_dense(co, jl);
    if (st)
        ps_coord_fail(co, l->index, st);
    retire(co, l, st != DT_OK);
    /* Every worker is stopped, the failed and lost ones too if they can still hear it. */
    if (jl)
        dt_job_link_stop(jl, st || cancelled ? 1.0 : 10.0);
    dt_job_link_close(jl);
    return NULL;
}

void ps_coord_stop_workers(const ps_cluster *pc)
{
    for (int i = 0; i < pc->cl.n_tasks[DT_JOB_WORKER]; i++) {
        char name[DT_HOST_CAP + 48], endpoint[DT_HOST_CAP + 32];
        if (!worker_address(pc, i, name, endpoint))
            continue;
        dt_job_link *jl = NULL;
        if (dt_job_link_open(endpoint, name, pc->secret, pc->secret_len, 0, &jl) == DT_OK)
            dt_job_link_stop(jl, 1.0);
        dt_job_link_close(jl);
    }
}

dt_status ps_coord_start(ps_coord *co)
{
    pthread_mutex_lock(&co->mu);
    co->n_running = co->n_links;
    pthread_mutex_unlock(&co->mu);
    for (int i = 0; i < co->n_links; i++) {
        ps_worker_link *l = &co->links[i];
        if (pthread_create(&l->thread, NULL, drive_worker, l) != 0) {
            dt_status st = dt_error(DT_ERR_IO, "cannot start the thread of %s", l->name);
            ps_coord_fail(co, l->index, st);
            for (int k = i; k < co->n_links; k++)
                retire(co, &co->links[k], true);
            return st;
        }
        co->n_started++;
    }
    return DT_OK;
}

dt_status ps_coord_join(ps_coord *co)
{
    for (int i = 0; i < co->n_started; i++)
        pthread_join(co->links[i].thread, NULL);
    co->n_started = 0;
    /* The first failure is the cause; the others' may only be its echo (hybrid's ring). */
    if (co->first_failed != -1)
        return dt_error(co->first_status, "%s; training stopped", co->first_error);
    return DT_OK;
}

struct ps_roll_call {
    const ps_cluster *pc;
    int stop;               /* set by ps_roll_call_stop */
    pthread_t thread;
};

static bool roll_call_stopped(ps_roll_call *r)
{
    return __atomic_load_n(&r->stop, __ATOMIC_ACQUIRE) != 0;
}

static void *roll_call(void *arg)
{
    ps_roll_call *r = arg;
    const ps_cluster *pc = r->pc;
    int n = pc->cl.n_tasks[DT_JOB_WORKER];
    dt_job_link **links = calloc((size_t)n, sizeof *links);
    while (links && !roll_call_stopped(r)) {
        double next = dt_clock_now() + IDLE_PING_SECONDS;
        for (int i = 0; i < n && !roll_call_stopped(r); i++) {
            /* A link that could not open (a name that does not resolve yet) is tried again. */
            char name[DT_HOST_CAP + 48], endpoint[DT_HOST_CAP + 32];
            if (!links[i] && worker_address(pc, i, name, endpoint))
                dt_job_link_open(endpoint, name, pc->secret, pc->secret_len, 0, &links[i]);
            if (links[i])
                dt_job_link_ping(links[i], 0.5);
        }
        while (!roll_call_stopped(r) && dt_clock_now() < next)
            dt_sleep(0.05);
    }
    for (int i = 0; links && i < n; i++)
        dt_job_link_close(links[i]);
    free(links);
    return NULL;
}

dt_status ps_roll_call_start(const ps_cluster *pc, ps_roll_call **out)
{
    *out = NULL;
    ps_roll_call *r = calloc(1, sizeof *r);
    if (!r)
        return dt_error(DT_ERR_NOMEM, "no memory for the workers' roll call");
    r->pc = pc;
    int e = pthread_create(&r->thread, NULL, roll_call, r);
    if (e) {
        free(r);
        return dt_error(DT_ERR_NOMEM, "the workers' roll call: no thread (%s)", strerror(e));
    }
    *out = r;
    return DT_OK;
}

void ps_roll_call_stop(ps_roll_call *r)
{
    if (!r)
        return;
    __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
    pthread_join(r->thread, NULL);
    free(r);
}
