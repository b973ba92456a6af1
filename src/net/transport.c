/* The cluster transport (see transport.h): connection set-up with the handshake,
 * and the framed full-duplex exchange the collectives are built from. */
#include "transport.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "dial.h"
#include "../core/clock.h"
#include "dtrain/log.h"
#include "handshake.h"
#include "listener.h"
#include "sock.h"
#include "wire.h"


void dt_transport_options_default(dt_transport_options *o)
{
    memset(o, 0, sizeof *o);
    o->connect_timeout = 300.0;
    o->handshake_timeout = 10.0;
    o->max_frame_bytes = (uint64_t)64 << 20;
    o->listen_fd = -1;
}

dt_status dt_transport_listen_any(const char *host, int *fd, uint16_t *port)
{
    return dt_sock_listen(host, 0, fd, port);
}

/* ---- set-up: the rank mesh ---- */

/* Each rank connects to every lower rank and is connected to by every higher one, through its
 * listener (listener.h), whose policy admits only the higher training ranks, once each. */
typedef struct {
    const dt_cluster *cl;
    const dt_transport_options *o;
    dt_transport *t;
    dt_handshake_id me;
    double deadline;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int missing; /* higher ranks not yet connected */
} setup;

static const char *mesh_policy(void *ctx, dt_job job, int index, bool authenticated)
{
    setup *s = ctx;
    int r = dt_cluster_rank_of(s->cl, job, index);
    if (!authenticated)
        return r <= s->t->rank ? "is not a task that connects to this one" : NULL;
    pthread_mutex_lock(&s->mu);
    bool taken = s->t->peers[r].fd >= 0;
    pthread_mutex_unlock(&s->mu);
    return taken ? "is connected already" : NULL;
}

static void mesh_on_peer(void *ctx, int fd, dt_job job, int index, const dt_session_keys *keys)
{
    (void)keys; /* the mesh's frames carry a CRC32C only (docs/SECURITY.md) */
    setup *s = ctx;
    int r = dt_cluster_rank_of(s->cl, job, index);
    pthread_mutex_lock(&s->mu);
    if (s->t->peers[r].fd >= 0) {
        dt_sock_close(fd); /* admitted twice at once: the first stays */
    } else {
        s->t->peers[r].fd = fd;
        s->missing--;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

/* Connects to rank r, retrying with backoff while it is not listening yet. */
static dt_status connect_rank(setup *s, int r)
{
    dt_job job;
    int index;
    dt_cluster_rank_task(s->cl, r, &job, &index);
    dt_status st = dt_dial_task(&s->me, dt_cluster_addr(s->cl, job, index), job, index,
                                s->t->peers[r].name, s->o->handshake_timeout, s->deadline,
                                &s->t->peers[r].fd, NULL);
    if (st == DT_ERR_TIMEOUT)
        return dt_error(st, "could not connect to %s within %.0f s", s->t->peers[r].name,
                        s->o->connect_timeout);
    return st;
}

/* Waits until every higher rank is in, the deadline passes or the listener fails. */
static dt_status wait_for_higher_ranks(setup *s, dt_listener *l)
{
    char msg[512];
    pthread_mutex_lock(&s->mu);
    for (;;) {
        dt_status failed = dt_listener_failed(l, msg, sizeof msg);
        if (failed) {
            pthread_mutex_unlock(&s->mu);
            return dt_error(failed, "%s", msg);
        }
        double now = dt_clock_now();
        if (s->missing == 0 || now >= s->deadline)
            break;
        double until = now + 0.1 < s->deadline ? now + 0.1 : s->deadline;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double wake = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + (until - now);
        ts.tv_sec = (time_t)wake;
        ts.tv_nsec = (long)((wake - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return DT_OK;
}

static dt_status check_security(const dt_cluster *cl, const dt_transport_options *o, FILE *log)
{
    if (o->secret && o->secret_len > 0)
        return DT_OK;
    dt_status st = dt_cluster_check_secret(cl, false, o->insecure);
    if (st)
        return st;
    if (cl->n_workers > 1) {
        dt_log_to(log, DT_LOG_WARN, "dtrain: warning: no cluster secret: traffic between the "
                  "tasks is unauthenticated");
    }
    return DT_OK;
}

/* Lists the ranks still missing after the deadline, for the error message. */
static dt_status missing_error(const dt_transport *t, double timeout)
{
    char list[1024] = "";
    size_t n = 0;
    for (int r = 0; r < t->size && n < sizeof list - 1; r++)
        if (r != t->rank && t->peers[r].fd < 0)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n ? ", " : "",
                                  t->peers[r].name);
    return dt_error(DT_ERR_TIMEOUT, "within %.0f s these tasks never connected: %s", timeout, list);
}

dt_status dt_transport_open(const dt_cluster *cl, const dt_transport_options *o,
                            dt_transport **out)
{
    *out = NULL;
    FILE *log = o->log; /* NULL: the library's log (log.h) */
    int listen_fd = o->listen_fd;
    dt_status st;
    if (cl->rank < 0) {
        dt_sock_close(listen_fd);
        return dt_error(DT_ERR_INVALID, "%s:%d is not a training task: it has no rank",
                        dt_job_name(cl->task_type), cl->task_index);
    }
    if ((st = check_security(cl, o, log))) {
        dt_sock_close(listen_fd);
        return st;
    }
    setup s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    dt_listener *listener = NULL;
    dt_transport *t = calloc(1, sizeof *t);
    if (!t || !(t->peers = calloc((size_t)cl->n_workers, sizeof *t->peers))) {
        st = dt_error(DT_ERR_NOMEM, "no memory for the transport");
        goto fail;
    }
    t->rank = cl->rank, t->size = cl->n_workers, t->log = log;
    t->max_frame_bytes = o->max_frame_bytes;
    for (int r = 0; r < t->size; r++) {
        dt_job job;
        int index;
        t->peers[r].fd = -1;
        dt_cluster_rank_task(cl, r, &job, &index);
        dt_cluster_task_name(cl, job, index, t->peers[r].name, sizeof t->peers[r].name);
    }
    s.cl = cl, s.o = o, s.t = t;
    s.me = (dt_handshake_id){o->secret, o->secret_len, cl->id, cl->task_type, cl->task_index};
    s.deadline = dt_clock_now() + o->connect_timeout;
    s.missing = t->size - 1 - t->rank;
    if (s.missing > 0) {
        const dt_addr *me = dt_cluster_addr(cl, cl->task_type, cl->task_index);
        dt_listener_options lo = {.me = s.me, .policy = mesh_policy, .policy_ctx = &s,
                                  .on_peer = mesh_on_peer, .ctx = &s,
                                  .handshake_timeout = o->handshake_timeout, .log = log};
        st = listen_fd >= 0 ? dt_listener_adopt(listen_fd, &lo, &listener)
                            : dt_listener_start(me->host, me->port, &lo, &listener);
        listen_fd = -1;
        if (st)
            goto fail;
    }
    /* Lower ranks, nearest first: the ring's neighbour is ready soonest. */
    for (int r = t->rank - 1; r >= 0; r--)
        if ((st = connect_rank(&s, r)))
            goto fail;
    if (listener) {
        if ((st = wait_for_higher_ranks(&s, listener)))
            goto fail;
        /* Every rank is in: the mesh admits no one else. */
        dt_listener_stop(listener);
        listener = NULL;
        if (s.missing > 0) {
            st = missing_error(t, o->connect_timeout);
            goto fail;
        }
    }
    dt_sock_close(listen_fd); /* the highest rank is connected to by no one */
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    *out = t;
    return DT_OK;
fail:
    dt_sock_close(listen_fd);
    dt_listener_stop(listener);
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    dt_transport_close(t);
    return st;
}

void dt_transport_close(dt_transport *t)
{
    if (!t)
        return;
    if (t->peers)
        for (int r = 0; r < t->size; r++)
            dt_sock_close(t->peers[r].fd);
    free(t->peers);
    free(t);
}

/* ---- exchange ---- */

/* Checks a received header against what the collective expects. */
static dt_status check_header(dt_transport *t, dt_xfer *x, int from, const uint8_t *raw,
                              size_t rn)
{
    const char *who = t->peers[from].name;
    dt_frame_hdr h;
    dt_status st = dt_frame_decode(raw, t->max_frame_bytes, &h);
    if (st)
        return dt_error_prefix(st, "%s #%u: %s", x->name, x->seq, who);
    if (h.type == DT_FRAME_ABORT) {
        char why[DT_ABORT_MSG_CAP];
        dt_conn_read_abort_reason(t->peers[from].fd, h.n_bytes, why, sizeof why, who);
        return dt_error(DT_ERR_PEER, "%s #%u: %s stopped: %s", x->name, x->seq, who, why);
    }
    if (h.type != DT_FRAME_DATA || h.op != x->op || h.seq != x->seq || h.n_bytes != rn)
        return dt_error(DT_ERR_PEER, "%s #%u: %s is out of step: it sent frame type %u of "
                        "collective %u #%u with %llu bytes where %zu were expected",
                        x->name, x->seq, who, h.type, h.op, h.seq,
                        (unsigned long long)h.n_bytes, rn);
    return DT_OK;
}

static dt_status io_error(dt_transport *t, dt_xfer *x, int peer, int err, bool sending)
{
    const char *who = t->peers[peer].name;
    if (err == EPIPE || err == ECONNRESET || err == 0)
        return dt_error(DT_ERR_PEER, "%s #%u: %s closed the connection", x->name, x->seq, who);
    return dt_error(DT_ERR_IO, "%s #%u: %s %s: %s", x->name, x->seq,
                    sending ? "sending to" : "receiving from", who, strerror(err));
}

/* Logs, once per collective, whom a long wait is for. */
static void maybe_warn_stall(dt_transport *t, dt_xfer *x, int to, bool send_left, int from,
                             bool recv_left)
{
    if (x->stall_warn <= 0 || x->stall_logged || dt_clock_now() - x->start < x->stall_warn)
        return;
    x->stall_logged = true;
    dt_log_to(t->log, DT_LOG_WARN, "dtrain: warning: %s #%u has waited %.0f s for %s%s%s",
              x->name, x->seq, dt_clock_now() - x->start, recv_left ? t->peers[from].name : "",
              recv_left && send_left ? " and " : "", send_left ? t->peers[to].name : "");
}

dt_status dt_transport_exchange(dt_transport *t, dt_xfer *x, int to, const void *sbuf,
                                size_t sn, int from, void *rbuf, size_t rn)
{
    uint8_t shdr[DT_FRAME_HDR_BYTES], rhdr[DT_FRAME_HDR_BYTES];
    size_t s_total = DT_FRAME_HDR_BYTES + sn, r_total = DT_FRAME_HDR_BYTES + rn;
    size_t s_done = to >= 0 ? 0 : s_total, r_done = from >= 0 ? 0 : r_total;
    if (to >= 0) {
        dt_frame_hdr h = {DT_FRAME_DATA, x->op, x->seq, sn};
        dt_frame_encode(&h, shdr);
        t->peers[to].mid_frame = true;
    }
    int sfd = to >= 0 ? t->peers[to].fd : -1, rfd = from >= 0 ? t->peers[from].fd : -1;
    while (s_done < s_total || r_done < r_total) {
        bool progressed = false;
        if (s_done < s_total) {
            struct iovec iov[2];
            int n_iov = 0;
            if (s_done < DT_FRAME_HDR_BYTES)
                iov[n_iov++] = (struct iovec){shdr + s_done, DT_FRAME_HDR_BYTES - s_done};
            size_t body = s_done > DT_FRAME_HDR_BYTES ? s_done - DT_FRAME_HDR_BYTES : 0;
            if (sn > body)
                iov[n_iov++] = (struct iovec){(uint8_t *)sbuf + body, sn - body};
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n_iov};
            ssize_t k = sendmsg(sfd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0) {
                s_done += (size_t)k;
                progressed = true;
                if (s_done == s_total)
                    t->peers[to].mid_frame = false;
            } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                return io_error(t, x, to, errno, true);
            }
        }
        if (r_done < r_total) {
            ssize_t k;
            if (r_done < DT_FRAME_HDR_BYTES)
                k = recv(rfd, rhdr + r_done, DT_FRAME_HDR_BYTES - r_done, MSG_DONTWAIT);
            else
                k = recv(rfd, (uint8_t *)rbuf + (r_done - DT_FRAME_HDR_BYTES), r_total - r_done,
                         MSG_DONTWAIT);
            if (k > 0) {
                size_t before = r_done;
                r_done += (size_t)k;
                progressed = true;
                if (before < DT_FRAME_HDR_BYTES && r_done >= DT_FRAME_HDR_BYTES) {
                    dt_status st = check_header(t, x, from, rhdr, rn);
                    if (st)
                        return st;
                }
            } else if (k == 0) {
                return io_error(t, x, from, 0, false);
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                return io_error(t, x, from, errno, false);
            }
        }
        if (progressed)
            continue;
        /* Neither side can move: wait for either, until the deadline. */
        double now = dt_clock_now();
        if (now >= x->deadline) {
            int peer = r_done < r_total ? from : to;
            return dt_error(DT_ERR_TIMEOUT, "%s #%u: timed out after %.0f s waiting for %s",
                            x->name, x->seq, now - x->start, t->peers[peer].name);
        }
        maybe_warn_stall(t, x, to, s_done < s_total, from, r_done < r_total);
        struct pollfd p[2];
        int n = 0;
        if (s_done < s_total)
            p[n++] = (struct pollfd){sfd, POLLOUT, 0};
        if (r_done < r_total) {
            if (n == 1 && sfd == rfd)
                p[0].events |= POLLIN;
            else
                p[n++] = (struct pollfd){rfd, POLLIN, 0};
        }
        double wait = x->deadline - now;
        if (x->stall_warn > 0 && !x->stall_logged && x->start + x->stall_warn - now < wait)
            wait = x->start + x->stall_warn - now;
        int ms = (int)(wait * 1000.0) + 1;
        if (poll(p, (nfds_t)n, ms) < 0 && errno != EINTR)
            return dt_error(DT_ERR_IO, "%s: poll: %s", x->name, strerror(errno));
    }
    return DT_OK;
}

dt_status dt_transport_check_peer(dt_transport *t, dt_xfer *x, int peer)
{
    uint8_t raw[DT_FRAME_HDR_BYTES];
    int fd = t->peers[peer].fd;
    ssize_t k = recv(fd, raw, sizeof raw, MSG_PEEK | MSG_DONTWAIT);
    if (k == 0)
        return io_error(t, x, peer, 0, false);
    if (k < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
                   ? DT_OK : io_error(t, x, peer, errno, false);
    dt_frame_hdr h;
    if ((size_t)k < sizeof raw || dt_frame_decode(raw, t->max_frame_bytes, &h) != DT_OK ||
        h.type != DT_FRAME_ABORT)
        return DT_OK; /* a frame of a later collective, or one not yet whole: not for this wait */
    if (recv(fd, raw, sizeof raw, MSG_DONTWAIT) != (ssize_t)sizeof raw)
        return io_error(t, x, peer, errno, false);
    char why[DT_ABORT_MSG_CAP];
    dt_conn_read_abort_reason(fd, h.n_bytes, why, sizeof why, t->peers[peer].name);
    return dt_error(DT_ERR_PEER, "%s #%u: %s stopped: %s", x->name, x->seq, t->peers[peer].name,
                    why);
}

void dt_transport_abort(dt_transport *t, const char *message)
{
    if (!t)
        return;
    size_t n = strlen(message);
    if (n > DT_ABORT_MSG_CAP - 1)
        n = DT_ABORT_MSG_CAP - 1;
    uint8_t hdr[DT_FRAME_HDR_BYTES];
    dt_frame_hdr h = {DT_FRAME_ABORT, 0, 0, n};
    dt_frame_encode(&h, hdr);
    double d = dt_clock_now() + 0.5;
    for (int r = 0; r < t->size; r++) {
        dt_peer *p = &t->peers[r];
        /* Inside a half-sent frame an ABORT would be read as data: closing says enough. */
        if (p->fd < 0 || p->mid_frame)
            continue;
        if (dt_sock_send_all(p->fd, hdr, sizeof hdr, d, p->name) == DT_OK)
            dt_sock_send_all(p->fd, message, n, d, p->name);
    }
}
