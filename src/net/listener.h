/* A task's listener: a thread that accepts connections on the task's address, runs the server
 * half of the handshake with a policy saying which tasks may connect, and hands each
 * authenticated connection to a callback (internal to src/net). It stays open until stopped, so
 * a task that restarts, or joins later, can connect while the others run; the rank mesh stops
 * it once every rank is in, a server task keeps it. Handshakes run side by side, each on a
 * thread of its own with a short deadline, bounded in number overall and per address, so
 * connections that say nothing never keep a task out. A connection that fails the handshake (a
 * stranger, a wrong secret, another cluster, garbage, a port scan, silence) is dropped and
 * logged with its address; the listener carries on. Nothing a stranger sends makes it
 * allocate: the handshake reads fixed sizes only. */
#ifndef DTRAIN_NET_LISTENER_H
#define DTRAIN_NET_LISTENER_H

#include <stdint.h>
#include <stdio.h>

#include "handshake.h"

/* Seconds a connection has to finish the server half of the handshake, unless the options say
 * otherwise: a task's first message follows its connect at once. */
#define DT_LISTENER_HANDSHAKE_SECONDS 2.0

/* An authenticated connection from task job:index, with its keys (session.h); the callback owns
 * fd. Called on the connection's handshake thread, one call at a time. */
typedef void (*dt_listener_fn)(void *ctx, int fd, dt_job job, int index,
                               const dt_session_keys *keys);

typedef struct {
    dt_handshake_id me;
    dt_handshake_policy policy;
    void *policy_ctx;
    dt_listener_fn on_peer;
    void *ctx;
    double handshake_timeout; /* seconds a connection has to finish the handshake (<= 0:
                                 DT_LISTENER_HANDSHAKE_SECONDS) */
    FILE *log;                /* refusals; NULL: the library's log */
} dt_listener_options;

typedef struct dt_listener dt_listener;

/* Listens on host:port (0: any free port) and starts accepting. */
dt_status dt_listener_start(const char *host, uint16_t port, const dt_listener_options *o,
                            dt_listener **out);
/* The port it listens on. */
uint16_t dt_listener_port(const dt_listener *l);
/* The same on fd, a socket already listening (dt_sock_listen), which it takes over: closed on
 * failure too. A task that must tell its port before its peers connect binds it first. */
dt_status dt_listener_adopt(int fd, const dt_listener_options *o, dt_listener **out);
/* The first error of the accepting thread itself (not of a refused peer), DT_OK while none;
 * the message in msg. */
dt_status dt_listener_failed(dt_listener *l, char *msg, size_t cap);
/* Stops accepting within a fifth of a second, joins the thread, closes the socket; accepts
 * NULL. */
void dt_listener_stop(dt_listener *l);

#endif
