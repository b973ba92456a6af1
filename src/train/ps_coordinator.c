/* Parameter-server training: the coordinator's worker threads (see ps_coord.h, ps_train.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/clock.h"
#include "dtrain/log.h"
#include "ps_coord.h"

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
    for (int i = 0; i < n; i++) {
        ps_worker_link *l = &co->links[i];
        l->co = co, l->index = i;
        dt_cluster_task_name(&pc->cl, DT_JOB_WORKER, i, l->name, sizeof l->name);
        ps_endpoint_of(dt_cluster_addr(&pc->cl, DT_JOB_WORKER, i), l->endpoint,
                       sizeof l->endpoint);
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
                       const dt_psmsg *r)
{
    pthread_mutex_lock(&co->mu);
    int64_t steps = dt_ps_sched_answered(&co->sched, l->index, fn, r->n, r->done);
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
/* m to a worker and its reply within timeout seconds. A late reply to an earlier request (one
 * given up on) is dropped, and so is a message that does not decode (logged, naming the worker):
 * a broken message must not end the job; when no good reply follows, the worker goes unheard
 * and is lost as a silent one is. *unheard (may be NULL) tells a failure of the link itself (closed,
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
        if ((st = dt_psmsg_decode(in->data, in->len, who, reply)) != DT_OK) {
            dt_log_to(NULL, DT_LOG_WARN, "dtrain: warning: dropped a message from %s: %s", who,
                      dt_last_error());
            st = DT_OK;
            continue;
        }
        if (reply->request_id == m->request_id)
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
static dt_status join_ring(ps_coord *co, ps_worker_link *l, dt_zlink *z, uint64_t *id,
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
    while (co->ports_known < co->n_links && !co->sched.failed)
        pthread_cond_wait(&co->changed, &co->mu);
    bool go = !co->sched.failed;
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
static dt_status read_dense(ps_coord *co, ps_worker_link *l, dt_zlink *z, uint64_t *id,
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

/* Worker l was lost (why: the last error) with fn unfinished: fn goes back to the queue, for
 * the other workers, and l stops counting among the active ones (bounded staleness no longer
 * waits for its clock). */
static dt_status lose_worker(ps_coord *co, ps_worker_link *l, const dt_ps_function *fn)
{
    char why[DT_PSMSG_MAX_TEXT];
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
static dt_status await_rejoin(ps_coord *co, ps_worker_link *l, dt_zlink *z, uint64_t *id,
                              dt_psbuf *out, dt_psbuf *in)
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
    dt_ps_function fn;
    for (taken k; st == DT_OK && !cancelled && (k = take_function(co, l, &fn)) != TAKEN_NONE;) {
        if (k == TAKEN_IDLE) {
            /* Heard from while it waits; a worker that does not answer is found lost at its
             * next function. */
            dt_psmsg ping = {.type = DT_PSMSG_PING, .request_id = ++id};
            request(z, &ping, IDLE_PING_SECONDS, &out, &in, l->name, DT_PSMSG_PONG, &reply);
            continue;
        }
        if (fn.again)
            dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s takes steps %lld-%lld again (a lost "
                      "worker's)", l->name, (long long)fn.first, (long long)(fn.first + fn.n - 1));
        dt_psmsg run = {.type = DT_PSMSG_RUN, .request_id = ++id, .step = fn.first, .n = fn.n,
                        .position = fn.position, .shard = fn.shard};
        bool unheard;
        st = request_or_unheard(z, &run, c->ps.worker_timeout, &out, &in, l->name,
                                DT_PSMSG_RESULT, &reply, &unheard);
        if (st == DT_OK) {
            add_result(co, l, &fn, &reply);
            if (back)
                dt_log_to(NULL, DT_LOG_WARN, "dtrain: %s took steps %lld-%lld after rejoining",
                          l->name, (long long)fn.first, (long long)(fn.first + reply.n - 1));
            back = false;
            /* Its data used up: hybrid's workers end together; another may take over a lost
             * worker's data. */
            if (reply.done && co->hybrid)
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
        st = await_rejoin(co, l, z, &id, &out, &in);
        if (st == DT_END)
            st = DT_OK, cancelled = true; /* training ended without it */
        back = st == DT_OK;
    }
    if (st == DT_OK && !cancelled && co->hybrid && l->index == 0)
        st = read_dense(co, l, z, &id, &out, &in);
    if (st)
        ps_coord_fail(co, l->index, st);
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

void ps_coord_stop_workers(const ps_cluster *pc)
{
    for (int i = 0; i < pc->cl.n_tasks[DT_JOB_WORKER]; i++) {
        char name[DT_HOST_CAP + 48], endpoint[DT_HOST_CAP + 32];
        dt_cluster_task_name(&pc->cl, DT_JOB_WORKER, i, name, sizeof name);
        ps_endpoint_of(dt_cluster_addr(&pc->cl, DT_JOB_WORKER, i), endpoint, sizeof endpoint);
        dt_zlink *z = NULL;
        dt_psbuf out = {0}, in = {0};
        dt_psmsg stop = {.type = DT_PSMSG_STOP, .request_id = 1}, reply;
        if (dt_zlink_client(endpoint, name, pc->secret, pc->secret_len, 0, &z) == DT_OK)
            request(z, &stop, 1.0, &out, &in, name, DT_PSMSG_ACK, &reply);
        dt_zlink_close(z);
        dt_psbuf_free(&out);
        dt_psbuf_free(&in);
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
