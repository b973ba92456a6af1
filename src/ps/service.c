/* A parameter-server task's service (see service.h).
 *
 * The listener hands each authenticated connection to a thread of its own. A connection thread
 * waits for a message in short slices (so that it sees the service stopping), then reads it whole
 * before the request timeout, answers it (under the shards' lock, but for a PING; a SAVE or a
 * snapshot is written by a copy-on-write child, cow_write.h) and sends the reply. The main
 * thread waits for STOP or for the coordinator timeout (the chief silent that long: it pings
 * every second, and a request it waits on counts as heard), then stops the listener, shuts
 * every connection down and joins the threads. A task (the chief or a worker) holds at most
 * CONNS_PER_TASK connections: a newer one closes its oldest, so no peer holds more of the
 * ps's threads than that, and the ps holds at most that many per task of its cluster. */
#include "service.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../net/listener.h"
#include "cow_write.h"
#include "psconn.h"
#include "../net/sock.h"
#include "dtrain/checkpoint.h"
#include "../core/clock.h"
#include "../core/fileio.h"
#include "dtrain/log.h"
#include "shard.h"
#include "shard_ckpt.h"
#include "snapshot.h"
#include "stepboard.h"
#include "sweep.h"

/* Connections a task (the chief or a worker) holds to a ps at once: the chief's two clients (its
 * requests, its pings) and a reconnection each while the old connection is still being closed.
 * A task's connection past these closes its oldest: a restarted task is never kept out by its
 * own stale connections, and no task holds more threads of the ps than these. */
#define CONNS_PER_TASK 4
/* A sparse cluster's ps knows no worker: it takes this many at most, each with CONNS_PER_TASK
 * (a sparse worker's process coordinates itself: three clients of its own). */
#define SPARSE_WORKERS DT_SPARSE_MAX_TASKS
_Static_assert(SPARSE_WORKERS == 256, "ps_policy's refusal names the bound");
/* Connections past every task's share: ones closed whose threads are still ending. */
#define CONNS_MARGIN 8
/* How often waiting threads look at the service's state, in milliseconds. */
#define SLICE_MS 200

typedef struct service service;

typedef struct {
    service *sv;
    pthread_t thread;
    int fd;
    dt_job job;
    int index;
    char name[DT_HOST_CAP + 48];
    dt_session session; /* every request's MAC checked, every reply sealed */
    volatile int done; /* the thread has finished */
    int closing;       /* shut down for a newer connection of its task (service.mu) */
} conn;

struct service {
    const dt_ps_service_options *o;
    FILE *log;
    dt_ps_shard shard;
    dt_pool *pool;
    pthread_mutex_t shard_mu;
    pthread_mutex_t mu; /* what follows */
    pthread_cond_t changed;
    int stop;
    int chief_busy;     /* the chief's requests being answered */
    double chief_heard; /* the chief's last message or connection (or the service's start); in
                         * a sparse cluster, any worker's */
    bool sparse;        /* TFJob's sparse form: the workers lead themselves, worker 0 first */
    dt_step_board board; /* sparse, on ps 0: the global step */
    conn **conns;       /* max_conns of them: CONNS_PER_TASK per chief and worker, and a margin */
    int n_conns, max_conns;
    dt_ps_service_stats stats;
    double started;
    bool first_update_logged;
};

static const char *ps_policy(void *ctx, dt_job job, int index, bool authenticated)
{
    const service *sv = ctx;
    (void)authenticated;
    if (sv->sparse)
        return job != DT_JOB_WORKER ? "a sparse cluster's ps task takes requests from its "
                                      "workers only"
               : index >= SPARSE_WORKERS ? "a sparse cluster's ps task takes workers numbered "
                                           "below 256"
                                         : NULL;
    if (job == DT_JOB_CHIEF || job == DT_JOB_WORKER)
        return NULL;
    return "a ps task takes requests from the chief and the workers only";
}

/* Whether c's task leads the job: the chief, or a sparse cluster's worker 0. */
static bool leads(const conn *c)
{
    return c->sv->sparse ? c->job == DT_JOB_WORKER && c->index == 0 : c->job == DT_JOB_CHIEF;
}

/* A sparse cluster's STEP: the global step, its readiness and its other workers (stepboard.h),
 * kept by ps 0 (any ps answers, the workers ask ps 0). */
static dt_status answer_step(conn *c, const dt_psmsg *req, dt_psbuf *reply)
{
    service *sv = c->sv;
    if (!sv->sparse)
        return dt_error(DT_ERR_INVALID, "STEP from %s: this ps is not of a sparse cluster (its "
                        "chief keeps the step)", c->name);
    dt_step_reply r;
    pthread_mutex_lock(&sv->mu);
    dt_status st = dt_step_board_ask(&sv->board, c->index, req->target, req->n, req->step,
                                     dt_clock_now(), sv->o->coordinator_timeout, &r);
    pthread_mutex_unlock(&sv->mu);
    if (st)
        return st;
    dt_psmsg m = {.type = DT_PSMSG_STEPS, .request_id = req->request_id, .clock = r.total,
                  .done = r.ready, .rows = r.active};
    return dt_psmsg_encode(&m, NULL, NULL, reply);
}

/* Waits until fd is readable: 1 readable (or closed), 0 the service is stopping, -1 an error. */
static int wait_request(conn *c)
{
    for (;;) {
        pthread_mutex_lock(&c->sv->mu);
        int stop = c->sv->stop;
        pthread_mutex_unlock(&c->sv->mu);
        if (stop)
            return 0;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int k = poll(&p, 1, SLICE_MS);
        if (k > 0)
            return 1;
        if (k < 0)
            return -1;
    }
}

static void count(service *sv, const dt_psmsg *req)
{
    pthread_mutex_lock(&sv->mu);
    sv->stats.requests++;
    /* A restored ps tells when it applies an update again: the end of its recovery. */
    if (sv->stats.restored && !sv->first_update_logged &&
        (req->type == DT_PSMSG_PUSH_ROWS || req->type == DT_PSMSG_PUSH_DENSE)) {
        sv->first_update_logged = true;
        dt_log_to(sv->log, DT_LOG_WARN, "dtrain server: restored shards updated again (step "
                  "%lld), %.2f s after this task started", (long long)req->step,
                  dt_clock_now() - sv->started);
    }
    if (req->type == DT_PSMSG_PULL_ROWS)
        sv->stats.rows_pulled += req->n;
    else if (req->type == DT_PSMSG_PUSH_ROWS)
        sv->stats.rows_pushed += req->n;
    pthread_mutex_unlock(&sv->mu);
}

/* reply becomes an ERROR answering req, with st and the last error's message. */
static dt_status error_reply(const dt_psmsg *req, dt_status st, dt_psbuf *reply)
{
    char text[DT_PSMSG_MAX_TEXT];
    int n = snprintf(text, sizeof text, "%s", dt_last_error());
    dt_psmsg e = {.type = DT_PSMSG_ERROR, .request_id = req->request_id, .status = st,
                  .text = text,
                  .text_len = (uint32_t)(n < (int)sizeof text ? n : (int)sizeof text - 1)};
    reply->len = 0;
    return dt_psmsg_encode(&e, NULL, NULL, reply);
}

/* What a child writes: this task's shards, as a checkpoint's file or as its snapshot. */
typedef struct {
    service *sv;
    const char *path;
    int64_t step;
} shard_write;

static dt_status write_ckpt_file(void *arg)
{
    shard_write *w = arg;
    const dt_ps_service_options *o = w->sv->o;
    return dt_ps_shard_save_ckpt(&w->sv->shard, w->path, w->step, o->me.index,
                                 o->cluster->n_tasks[DT_JOB_PS]);
}

static dt_status write_snapshot(void *arg)
{
    shard_write *w = arg;
    return dt_ps_snapshot_save(&w->sv->shard, w->sv->o->me.index, w->sv->o->job, w->path);
}

/* The temporaries this task's failed writes left in the directory of path (sweep.h). */
static void sweep_beside(service *sv, const char *path)
{
    char dir[DT_PATH_CAP];
    dt_path_dir(path, dir, sizeof dir);
    dt_ps_sweep_temps(dir, sv->o->me.index, sv->log);
}

/* A write's child waited for until it ends, its deadline passes, or the service stops (it is
 * killed then: a ps task never outlives its job for a write). */
static dt_status wait_write(service *sv, dt_cow_write *child)
{
    dt_status st;
    while ((st = dt_cow_poll(child)) == DT_END) {
        pthread_mutex_lock(&sv->mu);
        int stop = sv->stop;
        pthread_mutex_unlock(&sv->mu);
        if (stop) {
            dt_cow_kill(child);
            return dt_error(DT_ERR_UNAVAILABLE, "%s: not written: the ps task is stopping",
                            child->what);
        }
        poll(NULL, 0, 50);
    }
    return st;
}

/* How long a SAVE's write may take: a large shard on a slow disk takes minutes, and a hung write
 * holds only the chief's connection that waits for it (the chief gives up on it sooner, after
 * its own request timeout). */
#define SAVE_MAX_SECONDS 3600.0

/* Whether dir (a SAVE's) is the job's model directory or lies within it, ".." and symbolic
 * links resolved, as the write would resolve them: real gets the resolved directory, which the
 * write then uses. A SAVE is the only request that names a path, and no one, the chief
 * included, has a ps write elsewhere. */
static dt_status dir_within_model_dir(const char *model_dir, const char *dir, char real[PATH_MAX])
{
    char root[PATH_MAX];
    if (!model_dir)
        return dt_error(DT_ERR_INVALID, "SAVE to %s refused: this ps task was given no model "
                        "directory (--model-dir)", dir);
    if (!realpath(model_dir, root))
        return dt_error(DT_ERR_IO, "SAVE to %s refused: the model directory %s: %s", dir,
                        model_dir, strerror(errno));
    if (!realpath(dir, real))
        return dt_error(DT_ERR_IO, "SAVE to %s refused: %s", dir, strerror(errno));
    size_t n = strlen(root);
    bool within = strncmp(real, root, n) == 0 &&
                  (real[n] == '\0' || real[n] == '/' || (n == 1 && root[0] == '/'));
    if (!within)
        return dt_error(DT_ERR_INVALID, "SAVE to %s refused: it is %s, outside the job's model "
                        "directory %s", dir, real, root);
    return DT_OK;
}

/* SAVE from the chief: this task's shards as its file of the checkpoint, written by a child from
 * a copy-on-write image taken under the shards' lock (held only for the fork), so requests and
 * PINGs go on being answered however slow the write. A failure goes back as an ERROR: the chief
 * then writes no manifest, and the previous checkpoint stays the latest. */
static dt_status save(conn *c, const dt_psmsg *req, dt_psbuf *reply)
{
    service *sv = c->sv;
    char dir[DT_PSMSG_MAX_TEXT + 1], real[PATH_MAX], name[96], path[PATH_MAX + 100];
    memcpy(dir, req->text, req->text_len);
    dir[req->text_len] = '\0';
    /* A sparse cluster's ps knows its index alone: the leader tells the count. */
    int n_ps = sv->sparse ? (int)req->n_shards : sv->o->cluster->n_tasks[DT_JOB_PS];
    dt_ckpt_shard_name(name, sizeof name, req->step, sv->o->me.index, n_ps);
    dt_status st = !leads(c) ? dt_error(DT_ERR_INVALID, sv->sparse ? "only worker 0 saves"
                                                                   : "only the chief saves")
                   : req->n_shards != n_ps || sv->o->me.index >= n_ps
                       ? dt_error(DT_ERR_INVALID, "a checkpoint of %lld ps tasks, where this is "
                                  "ps:%d of %d", (long long)req->n_shards, sv->o->me.index, n_ps)
                       : DT_OK;
    if (st == DT_OK && (st = dir_within_model_dir(sv->o->model_dir, dir, real)) != DT_OK)
        dt_log_to(sv->log, DT_LOG_WARN, "dtrain server: %s: %s", c->name, dt_last_error());
    if (st == DT_OK) {
        snprintf(path, sizeof path, "%s/%s", real, name);
        /* A save of this task that a kill cut short (it, or the task) left its temporary: the
         * chief sweeps the directory on its own host only. A directory read is cheap beside the
         * shard's write. */
        sweep_beside(sv, path);
        shard_write w = {sv, path, req->step};
        dt_cow_write child;
        /* Dynamic tables run their eviction pass and pack their rows first, under the same
         * hold as the fork: the file is of one instant. */
        pthread_mutex_lock(&sv->shard_mu);
        dt_ps_shard_settle(&sv->shard, req->step);
        st = dt_cow_start(&child, write_ckpt_file, &w, NULL, SAVE_MAX_SECONDS, path);
        pthread_mutex_unlock(&sv->shard_mu);
        if (st == DT_OK)
            st = wait_write(sv, &child);
        if (st) /* a child killed at its deadline, or stopped, left its temporary */
            sweep_beside(sv, path);
    }
    if (st)
        return error_reply(req, st, reply);
    dt_psmsg ack = {.type = DT_PSMSG_ACK, .request_id = req->request_id};
    return dt_psmsg_encode(&ack, NULL, NULL, reply);
}

/* Answers one request into reply: STOP from the chief stops the service, SAVE writes the
 * shards, the rest goes to the shard. */
static dt_status answer(conn *c, const dt_psmsg *req, dt_psbuf *reply)
{
    service *sv = c->sv;
    if (req->type == DT_PSMSG_STOP) {
        if (!leads(c)) {
            const char *why = sv->sparse ? "only worker 0 stops a sparse cluster's ps"
                                         : "only the chief stops a ps";
            dt_psmsg e = {.type = DT_PSMSG_ERROR, .request_id = req->request_id,
                          .status = DT_ERR_INVALID, .text = why,
                          .text_len = (uint32_t)strlen(why)};
            return dt_psmsg_encode(&e, NULL, NULL, reply);
        }
        pthread_mutex_lock(&sv->mu);
        sv->stop = 1;
        pthread_cond_broadcast(&sv->changed);
        pthread_mutex_unlock(&sv->mu);
        dt_psmsg ack = {.type = DT_PSMSG_ACK, .request_id = req->request_id};
        return dt_psmsg_encode(&ack, NULL, NULL, reply);
    }
    if (req->type == DT_PSMSG_SAVE)
        return save(c, req, reply);
    if (req->type == DT_PSMSG_STEP)
        return answer_step(c, req, reply);
    /* A PING is answered without the shards' lock: a ps whose lock is taken (a long request, the
     * fork of a write) is alive, and its coordinator hears so at once. */
    if (req->type == DT_PSMSG_PING) {
        dt_psmsg pong = {.type = DT_PSMSG_PONG, .request_id = req->request_id};
        return dt_psmsg_encode(&pong, NULL, NULL, reply);
    }
    pthread_mutex_lock(&sv->shard_mu);
    dt_status st = dt_ps_shard_handle(&sv->shard, req, reply);
    pthread_mutex_unlock(&sv->shard_mu);
    count(sv, req);
    return st;
}

/* The chief was heard from: a request arrived (busy +1) or was answered (busy -1), or it
 * connected (0). A long request (a SAVE) is a sign of life for as long as it runs. */
static void chief_heard(conn *c, int busy)
{
    if (c->job != DT_JOB_CHIEF && !c->sv->sparse)
        return;
    pthread_mutex_lock(&c->sv->mu);
    c->sv->chief_busy += busy;
    c->sv->chief_heard = dt_clock_now();
    pthread_mutex_unlock(&c->sv->mu);
}

static void *conn_main(void *arg)
{
    conn *c = arg;
    service *sv = c->sv;
    dt_psbuf in = {0}, reply = {0};
    for (;;) {
        int ready = wait_request(c);
        if (ready <= 0)
            break;
        char probe;
        if (recv(c->fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
            break; /* the peer closed between requests: its work is done */
        dt_psmsg req;
        double deadline = dt_clock_now() + sv->o->request_timeout;
        dt_status st = dt_psconn_recv(c->fd, &c->session, c->name, deadline, &in, &req);
        if (st) {
            /* A request that does not decode or fails its MAC: its sender is broken or
             * hostile, or someone on the path altered it; nothing of it was applied. */
            dt_log_to(sv->log, DT_LOG_WARN, "dtrain server: dropping %s: %s", c->name,
                      dt_last_error());
            break;
        }
        reply.len = 0;
        chief_heard(c, 1);
        /* A request that cannot be answered (its reply too large to encode, no memory) gets an
         * ERROR naming why: the link stays in step, and the requester reports the cause. */
        if ((st = answer(c, &req, &reply)) != DT_OK)
            st = error_reply(&req, st, &reply);
        if (st == DT_OK && (st = dt_psconn_seal(&c->session, &reply, 0)) == DT_OK)
            st = dt_psconn_send(c->fd, &reply, c->name, dt_clock_now() + sv->o->request_timeout);
        chief_heard(c, -1);
        if (st) {
            dt_log_to(sv->log, DT_LOG_WARN, "dtrain server: dropping %s: %s", c->name,
                      dt_last_error());
            break;
        }
    }
    dt_psbuf_free(&in);
    dt_psbuf_free(&reply);
    pthread_mutex_lock(&sv->mu);
    c->done = 1;
    pthread_cond_broadcast(&sv->changed);
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

/* Joins and frees the connections whose threads have finished; sv->mu held. */
static void reap(service *sv)
{
    int kept = 0;
    for (int i = 0; i < sv->n_conns; i++) {
        conn *c = sv->conns[i];
        if (c->done) {
            pthread_join(c->thread, NULL);
            dt_sock_close(c->fd);
            dt_session_close(&c->session);
            free(c);
        } else {
            sv->conns[kept++] = c;
        }
    }
    sv->n_conns = kept;
}

/* A task that already holds CONNS_PER_TASK connections has its oldest closed (its thread sees
 * the shutdown and ends; reap frees it); sv->mu held. */
static void close_oldest_of(service *sv, dt_job job, int index, const char *name)
{
    int held = 0, oldest = -1;
    for (int i = 0; i < sv->n_conns; i++) {
        conn *o = sv->conns[i];
        if (o->done || o->closing || o->job != job || o->index != index)
            continue;
        held++;
        if (oldest < 0)
            oldest = i;
    }
    if (held < CONNS_PER_TASK)
        return;
    sv->conns[oldest]->closing = 1;
    shutdown(sv->conns[oldest]->fd, SHUT_RDWR);
    dt_log_to(sv->log, DT_LOG_WARN, "dtrain server: %s opened connection %d: its oldest is "
              "closed (a task holds at most %d)", name, held + 1, CONNS_PER_TASK);
}

static void on_peer(void *ctx, int fd, dt_job job, int index, const dt_session_keys *keys)
{
    service *sv = ctx;
    conn *c = calloc(1, sizeof *c);
    if (c && dt_session_open(&c->session, keys, false) != DT_OK) {
        dt_log_to(sv->log, DT_LOG_WARN, "dtrain server: dropping a connection: %s",
                  dt_last_error());
        free(c);
        dt_sock_close(fd);
        return;
    }
    char name[DT_HOST_CAP + 48];
    dt_cluster_task_name(sv->o->cluster, job, index, name, sizeof name);
    pthread_mutex_lock(&sv->mu);
    reap(sv);
    if (!c || sv->stop || sv->n_conns == sv->max_conns) {
        if (c && !sv->stop)
            dt_log_to(sv->log, DT_LOG_WARN, "dtrain server: refused a connection from %s: %d "
                      "connections are open, the most this ps takes (%d per chief and worker "
                      "task, and %d more)", name, sv->n_conns, CONNS_PER_TASK, CONNS_MARGIN);
        pthread_mutex_unlock(&sv->mu);
        dt_sock_close(fd); /* stopping, full, or out of memory: the peer sees it closed */
        if (c)
            dt_session_close(&c->session);
        free(c);
        return;
    }
    close_oldest_of(sv, job, index, name);
    c->sv = sv, c->fd = fd, c->job = job, c->index = index;
    snprintf(c->name, sizeof c->name, "%s", name);
    if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
        pthread_mutex_unlock(&sv->mu);
        dt_sock_close(fd);
        dt_session_close(&c->session);
        free(c);
        return;
    }
    sv->conns[sv->n_conns++] = c;
    if (job == DT_JOB_CHIEF || sv->sparse)
        sv->chief_heard = dt_clock_now();
    pthread_mutex_unlock(&sv->mu);
}

/* A snapshot's write may take this long (at least SNAPSHOT_MIN_SECONDS, else two periods)
 * before it is stopped. */
#define SNAPSHOT_MIN_SECONDS 300.0

/* The shards' snapshot starts: a child writes it from the instant's memory while the service
 * goes on. */
static void start_snapshot(service *sv, dt_cow_write *child)
{
    shard_write w = {sv, sv->o->snapshot_path, 0};
    double limit = 2 * sv->o->snapshot_secs;
    dt_status st = dt_cow_start(child, write_snapshot, &w, &sv->shard_mu,
                                limit > SNAPSHOT_MIN_SECONDS ? limit : SNAPSHOT_MIN_SECONDS,
                                sv->o->snapshot_path);
    if (st)
        dt_log_to(sv->log, DT_LOG_WARN, "dtrain server: warning: snapshot not written (the "
                  "previous one stays): %s", dt_last_error());
}

/* A snapshot's write ended (st): a failure is logged, and serving goes on, the previous
 * snapshot kept. */
static void snapshot_ended(service *sv, double started, dt_status st)
{
    if (st) {
        dt_log_to(sv->log, DT_LOG_WARN, "dtrain server: warning: snapshot not written (the "
                  "previous one stays): %s", dt_last_error());
        sweep_beside(sv, sv->o->snapshot_path);
    }
    else if (sv->stats.snapshots++ == 0)
        dt_log_to(sv->log, DT_LOG_WARN, "dtrain server: snapshots of this ps go to %s every "
                  "%g s (the first took %.2f s)", sv->o->snapshot_path, sv->o->snapshot_secs,
                  dt_clock_now() - started);
}

static void wait_until_done(service *sv, dt_status *st)
{
    char task[DT_HOST_CAP + 48];
    dt_cluster_task_name(sv->o->cluster, DT_JOB_CHIEF, 0, task, sizeof task);
    double next_snapshot = dt_clock_now() + sv->o->snapshot_secs, snapshot_started = 0;
    dt_cow_write child = {.fd = -1};
    pthread_mutex_lock(&sv->mu);
    while (!sv->stop) {
        double now = dt_clock_now();
        if (dt_cow_running(&child)) {
            dt_status done = dt_cow_poll(&child);
            if (done != DT_END)
                snapshot_ended(sv, snapshot_started, done);
        } else if (sv->o->snapshot_path && sv->o->snapshot_secs > 0 && now >= next_snapshot) {
            pthread_mutex_unlock(&sv->mu);
            snapshot_started = dt_clock_now();
            start_snapshot(sv, &child);
            pthread_mutex_lock(&sv->mu);
            next_snapshot = snapshot_started + sv->o->snapshot_secs;
            continue;
        }
        /* Silence, not a closed connection, is what counts: a stopped or cut-off chief's
         * connection stays open. */
        if (sv->chief_busy == 0 && now - sv->chief_heard >= sv->o->coordinator_timeout) {
            if (sv->sparse)
                *st = dt_error(DT_ERR_TIMEOUT, "no worker has been heard from for %.0f s "
                               "(--coordinator-timeout; a sparse cluster's workers lead "
                               "themselves, worker 0 ends the job): giving up",
                               sv->o->coordinator_timeout);
            else
                *st = dt_error(DT_ERR_TIMEOUT, "the coordinator (%s) has not been heard from "
                               "for %.0f s (--coordinator-timeout): giving up", task,
                               sv->o->coordinator_timeout);
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += SLICE_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L)
            ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&sv->changed, &sv->mu, &ts);
        reap(sv);
    }
    sv->stop = 1;
    pthread_mutex_unlock(&sv->mu);
    if (dt_cow_running(&child)) {
        dt_log_to(sv->log, DT_LOG_WARN, "dtrain server: warning: a snapshot still being written "
                  "is stopped: the previous one stays");
        dt_cow_kill(&child);
        sweep_beside(sv, sv->o->snapshot_path);
    }
}

/* Every connection thread sees the stop within a slice and ends (the one that took STOP after
 * its reply is sent); one still in the middle of a message after a grace second is woken by a
 * shutdown. */
static void end_connections(service *sv)
{
    double grace = dt_clock_now() + 1.0;
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        int running = 0;
        for (int i = 0; i < sv->n_conns; i++)
            running += !sv->conns[i]->done;
        if (running == 0 || dt_clock_now() >= grace)
            break;
        pthread_mutex_unlock(&sv->mu);
        poll(NULL, 0, 10);
        pthread_mutex_lock(&sv->mu);
    }
    for (int i = 0; i < sv->n_conns; i++)
        if (!sv->conns[i]->done)
            shutdown(sv->conns[i]->fd, SHUT_RDWR);
    pthread_mutex_unlock(&sv->mu);
    for (int i = 0; i < sv->n_conns; i++) {
        pthread_join(sv->conns[i]->thread, NULL);
        dt_sock_close(sv->conns[i]->fd);
        dt_session_close(&sv->conns[i]->session);
        free(sv->conns[i]);
    }
    sv->n_conns = 0;
}

static bool has_dynamic(const dt_ps_shard *s)
{
    for (int i = 0; i < s->n_tables; i++)
        if (s->tables[i].keys)
            return true;
    return false;
}

/* A ps started again holds what its snapshot holds: the updates after it are lost, and said. */
static dt_status restore(service *sv)
{
    if (!sv->o->snapshot_path)
        return DT_OK;
    /* What this task left when it was killed in the middle of a snapshot. */
    sweep_beside(sv, sv->o->snapshot_path);
    dt_ps_snapshot_info info;
    dt_status st = dt_ps_snapshot_load(&sv->shard, sv->o->me.index, sv->o->job,
                                       sv->o->snapshot_path, &info);
    if (st == DT_END)
        return DT_OK;
    if (st && info.other_job) {
        /* Left by a job that ended without removing it: this job's own snapshots replace it. */
        dt_log_to(sv->log, DT_LOG_WARN, "dtrain server: warning: not restored: %s: this task "
                  "starts from the coordinator's definitions", dt_last_error());
        return DT_OK;
    }
    if (st)
        return dt_error_prefix(st, "restoring this ps task's shards");
    sv->stats.restored = true, sv->stats.restored_step = info.last_step;
    char when[32] = "?";
    time_t t = (time_t)info.unix_time;
    struct tm tm;
    if (gmtime_r(&t, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    dt_log_to(sv->log, DT_LOG_WARN, "dtrain server: restored %d table shards and %d dense "
              "variables from %s (taken %s, updates up to step %lld): the updates after it are "
              "lost", info.n_tables, info.n_slices, sv->o->snapshot_path, when,
              (long long)info.last_step);
    if (has_dynamic(&sv->shard))
        dt_log_to(sv->log, DT_LOG_WARN, "dtrain server: its dynamic tables hold the %lld keys "
                  "they had then: keys admitted after step %lld are lost (they are counted and "
                  "admitted again as they come)", (long long)info.dynamic_keys,
                  (long long)info.last_step);
    return DT_OK;
}

dt_status dt_ps_serve(const dt_ps_service_options *o, dt_ps_service_stats *stats)
{
    service *sv = calloc(1, sizeof *sv);
    if (!sv)
        return dt_error(DT_ERR_NOMEM, "no memory for the ps service");
    sv->o = o, sv->log = o->log, sv->sparse = o->cluster->sparse;
    int tasks = sv->sparse ? SPARSE_WORKERS
                           : o->cluster->n_tasks[DT_JOB_CHIEF] + o->cluster->n_tasks[DT_JOB_WORKER];
    sv->max_conns = CONNS_PER_TASK * tasks + CONNS_MARGIN;
    if (!(sv->conns = calloc((size_t)sv->max_conns, sizeof *sv->conns)) ||
        (sv->sparse && dt_step_board_init(&sv->board, SPARSE_WORKERS) != DT_OK)) {
        free(sv->conns);
        free(sv);
        return dt_error(DT_ERR_NOMEM, "no memory for the ps service's connections");
    }
    sv->chief_heard = sv->started = dt_clock_now();
    pthread_mutex_init(&sv->shard_mu, NULL);
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->changed, NULL);
    dt_listener *l = NULL;
    dt_status st = dt_pool_create(o->threads > 0 ? o->threads : 1, &sv->pool);
    if (st == DT_OK) {
        dt_ps_shard_init(&sv->shard, sv->pool);
        st = restore(sv);
    }
    if (st == DT_OK) {
        const dt_addr *a = dt_cluster_addr(o->cluster, o->me.job, o->me.index);
        dt_listener_options lo = {.me = o->me, .policy = ps_policy, .policy_ctx = sv,
                                  .on_peer = on_peer,
                                  .ctx = sv, .handshake_timeout = o->handshake_timeout,
                                  .log = o->log};
        st = dt_listener_start(a->host, a->port, &lo, &l);
    }
    if (st == DT_OK) {
        wait_until_done(sv, &st);
        dt_listener_stop(l);
        end_connections(sv);
        /* The job is over: its snapshot must not come back in another one. */
        if (st == DT_OK && o->snapshot_path)
            unlink(o->snapshot_path);
    }
    if (stats)
        *stats = sv->stats;
    dt_ps_shard_free(&sv->shard);
    dt_pool_destroy(sv->pool);
    pthread_cond_destroy(&sv->changed);
    pthread_mutex_destroy(&sv->mu);
    pthread_mutex_destroy(&sv->shard_mu);
    dt_step_board_free(&sv->board);
    free(sv->conns);
    free(sv);
    return st;
}
