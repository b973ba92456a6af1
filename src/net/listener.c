/* A task's listener (see listener.h). */
#include "listener.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../core/clock.h"
#include "dtrain/log.h"
#include "sock.h"

struct dt_listener {
    dt_listener_options o;
    int fd;
    uint16_t port;
    pthread_t thread;
    pthread_mutex_t mu;
    bool stop;
    dt_status failed;
    char failed_msg[512];
};

static bool stopping(dt_listener *l)
{
    pthread_mutex_lock(&l->mu);
    bool stop = l->stop;
    pthread_mutex_unlock(&l->mu);
    return stop;
}

static void serve(dt_listener *l, int fd, const char *from)
{
    dt_job job;
    int index;
    dt_status st = dt_handshake_serve(&l->o.me, fd, from,
                                      dt_clock_now() + l->o.handshake_timeout, l->o.policy,
                                      l->o.policy_ctx, &job, &index);
    if (st) {
        dt_log_to(l->o.log, DT_LOG_WARN, "dtrain: warning: refused the connection from %s: %s",
                  from, dt_last_error());
        dt_sock_close(fd);
        return;
    }
    l->o.on_peer(l->o.ctx, fd, job, index);
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
        serve(l, fd, from);
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
        l->o.handshake_timeout = 10.0;
    l->fd = fd;
    dt_status st = dt_sock_local_port(fd, &l->port);
    pthread_mutex_init(&l->mu, NULL);
    if (st == DT_OK && pthread_create(&l->thread, NULL, accept_loop, l) != 0)
        st = dt_error(DT_ERR_IO, "cannot start the thread that accepts peers");
    if (st) {
        dt_sock_close(l->fd);
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
    dt_sock_close(l->fd);
    pthread_mutex_destroy(&l->mu);
    free(l);
}
