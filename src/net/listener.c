/* A task's listener (see listener.h).
 *
 * The accepting thread never runs a handshake itself: each accepted connection gets a thread of
 * its own for the handshake, so a peer that connects and says nothing holds only its own slot,
 * for at most the handshake deadline, and a task that restarts is admitted at once beside
 * however many strangers wait. Slots are bounded in all (MAX_PENDING) and per address
 * (MAX_PENDING_PER_ADDRESS): past either, a connection is closed as soon as it is accepted, and
 * the peer, if it is one of the cluster's tasks, dials again (dial.c). Authenticated
 * connections reach the callback one at a time, as they always have. */
#include "listener.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../core/clock.h"
#include "dtrain/log.h"
#include "sock.h"

/* Connections in their handshake at once, and from one address (the host part of "ip:port"). */
#define MAX_PENDING 128
#define MAX_PENDING_PER_ADDRESS 32
/* Refusals for lack of a slot are logged at most this often. */
#define FULL_LOG_SECONDS 5.0

typedef enum { SLOT_FREE, SLOT_BUSY, SLOT_DONE } slot_state;

typedef struct {
    struct dt_listener *l;
    slot_state state;   /* BUSY: its thread runs; DONE: it ended and waits to be joined */
    int fd;             /* the connection while its handshake runs; -1 once handed on or closed */
    char from[128];     /* "ip:port" */
    char addr[128];     /* "ip" */
    pthread_t thread;
} slot;

struct dt_listener {
    dt_listener_options o;
    int fd;
    uint16_t port;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t ended;   /* a slot became DONE */
    pthread_mutex_t peer_mu; /* on_peer runs one call at a time */
    bool stop;
    dt_status failed;
    char failed_msg[512];
    slot slots[MAX_PENDING];
    int n_busy;             /* slots BUSY or DONE */
    double full_logged_at;  /* when a refusal for lack of a slot was last logged */
    long full_refused;      /* refusals since then */
};

static bool stopping(dt_listener *l)
{
    pthread_mutex_lock(&l->mu);
    bool stop = l->stop;
    pthread_mutex_unlock(&l->mu);
    return stop;
}

/* The connection leaves the slot (handed on, or about to be closed): a stop no longer shuts it
 * down, since its descriptor may be reused from then on. */
static void release_fd(slot *s)
{
    pthread_mutex_lock(&s->l->mu);
    s->fd = -1;
    pthread_mutex_unlock(&s->l->mu);
}

static void *handshake_main(void *arg)
{
    slot *s = arg;
    dt_listener *l = s->l;
    int fd = s->fd;
    dt_job job;
    int index;
    dt_session_keys keys;
    dt_status st = dt_handshake_serve(&l->o.me, fd, s->from,
                                      dt_clock_now() + l->o.handshake_timeout, l->o.policy,
                                      l->o.policy_ctx, &job, &index, &keys);
    release_fd(s);
    if (st) {
        if (!stopping(l))
            dt_log_to(l->o.log, DT_LOG_WARN, "dtrain: warning: refused the connection from %s: "
                      "%s", s->from, dt_last_error());
        dt_sock_close(fd);
    } else {
        pthread_mutex_lock(&l->peer_mu);
        l->o.on_peer(l->o.ctx, fd, job, index, &keys);
        pthread_mutex_unlock(&l->peer_mu);
    }
    pthread_mutex_lock(&l->mu);
    s->state = SLOT_DONE;
    pthread_cond_broadcast(&l->ended);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Joins the slots whose handshake ended; the caller holds l->mu. */
static void reap(dt_listener *l)
{
    for (int i = 0; i < MAX_PENDING; i++)
        if (l->slots[i].state == SLOT_DONE) {
            pthread_join(l->slots[i].thread, NULL);
            l->slots[i].state = SLOT_FREE;
            l->n_busy--;
        }
}

/* A free slot for a connection from addr, or NULL when the listener or that address has as
 * many handshakes running as it allows; the caller holds l->mu. */
static slot *free_slot(dt_listener *l, const char *addr)
{
    slot *empty = NULL;
    int same = 0;
    for (int i = 0; i < MAX_PENDING; i++) {
        slot *s = &l->slots[i];
        if (s->state == SLOT_FREE)
            empty = empty ? empty : s;
        else if (strcmp(s->addr, addr) == 0)
            same++;
    }
    return same < MAX_PENDING_PER_ADDRESS ? empty : NULL;
}

static void refuse_full(dt_listener *l, const char *from)
{
    double now = dt_clock_now();
    l->full_refused++;
    if (now - l->full_logged_at < FULL_LOG_SECONDS)
        return;
    dt_log_to(l->o.log, DT_LOG_WARN, "dtrain: warning: closed %ld connection%s (the last from "
              "%s): too many handshakes under way (%d at most, %d from one address)",
              l->full_refused, l->full_refused == 1 ? "" : "s", from, MAX_PENDING,
              MAX_PENDING_PER_ADDRESS);
    l->full_logged_at = now;
    l->full_refused = 0;
}

/* The handshake of fd, accepted from `from`, on a thread of its own. */
static void start_handshake(dt_listener *l, int fd, const char *from)
{
    char addr[128];
    snprintf(addr, sizeof addr, "%s", from);
    char *colon = strrchr(addr, ':');
    if (colon)
        *colon = '\0';
    pthread_mutex_lock(&l->mu);
    reap(l);
    slot *s = free_slot(l, addr);
    if (s) {
        *s = (slot){.l = l, .state = SLOT_BUSY, .fd = fd};
        snprintf(s->from, sizeof s->from, "%s", from);
        snprintf(s->addr, sizeof s->addr, "%s", addr);
        if (pthread_create(&s->thread, NULL, handshake_main, s) == 0)
            l->n_busy++;
        else
            s->state = SLOT_FREE, s = NULL;
    }
    if (!s)
        refuse_full(l, from);
    pthread_mutex_unlock(&l->mu);
    if (!s)
        dt_sock_close(fd);
}

static void *accept_loop(void *arg)
{
    dt_listener *l = arg;
    while (!stopping(l)) {
        int fd;
        char from[128];
        /* Short waits, so a stop request is seen soon. */
        dt_status st = dt_sock_accept(l->fd, dt_clock_now() + 0.2, &fd, from, sizeof from);
        if (st == DT_END)
            continue;
        if (st) {
            pthread_mutex_lock(&l->mu);
            l->failed = st;
            snprintf(l->failed_msg, sizeof l->failed_msg, "%s", dt_last_error());
            pthread_mutex_unlock(&l->mu);
            return NULL;
        }
        start_handshake(l, fd, from);
    }
    return NULL;
}

dt_status dt_listener_start(const char *host, uint16_t port, const dt_listener_options *o,
                            dt_listener **out)
{
    *out = NULL;
    int fd = -1;
    uint16_t bound;
    dt_status st = dt_sock_listen(host, port, &fd, &bound);
    return st ? st : dt_listener_adopt(fd, o, out);
}

dt_status dt_listener_adopt(int fd, const dt_listener_options *o, dt_listener **out)
{
    *out = NULL;
    dt_listener *l = calloc(1, sizeof *l);
    if (!l) {
        dt_sock_close(fd);
        return dt_error(DT_ERR_NOMEM, "no memory for a listener");
    }
    l->o = *o;
    if (l->o.handshake_timeout <= 0)
        l->o.handshake_timeout = DT_LISTENER_HANDSHAKE_SECONDS;
    l->fd = fd;
    dt_status st = dt_sock_local_port(fd, &l->port);
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->peer_mu, NULL);
    pthread_cond_init(&l->ended, NULL);
    if (st == DT_OK && pthread_create(&l->thread, NULL, accept_loop, l) != 0)
        st = dt_error(DT_ERR_IO, "cannot start the thread that accepts peers");
    if (st) {
        dt_sock_close(l->fd);
        pthread_cond_destroy(&l->ended);
        pthread_mutex_destroy(&l->peer_mu);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return st;
    }
    *out = l;
    return DT_OK;
}

uint16_t dt_listener_port(const dt_listener *l) { return l->port; }

dt_status dt_listener_failed(dt_listener *l, char *msg, size_t cap)
{
    pthread_mutex_lock(&l->mu);
    dt_status st = l->failed;
    if (st && cap)
        snprintf(msg, cap, "%s", l->failed_msg);
    pthread_mutex_unlock(&l->mu);
    return st;
}

void dt_listener_stop(dt_listener *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    /* Handshakes under way end at once: their connections are shut down under them. */
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < MAX_PENDING; i++)
        if (l->slots[i].state == SLOT_BUSY && l->slots[i].fd >= 0)
            shutdown(l->slots[i].fd, SHUT_RDWR);
    for (reap(l); l->n_busy > 0; reap(l))
        pthread_cond_wait(&l->ended, &l->mu);
    pthread_mutex_unlock(&l->mu);
    dt_sock_close(l->fd);
    pthread_cond_destroy(&l->ended);
    pthread_mutex_destroy(&l->peer_mu);
    pthread_mutex_destroy(&l->mu);
    free(l);
}
