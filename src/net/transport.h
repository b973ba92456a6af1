/* The cluster transport: one authenticated TCP connection between every pair of training ranks,
 * and framed, deadline-bound data exchange over them.
 *
 * dt_transport_open listens on this task's address from the cluster spec, connects to every lower
 * rank (retrying with backoff until the connect deadline, so tasks may start in any order) and
 * accepts every higher rank, running the handshake of wire.h on each connection.
 * A connection that fails the handshake (a stranger, a wrong secret or version, garbage, a port
 * scan that connects and closes) is dropped and logged with the address it came from; the
 * listener carries on. Once every peer is connected, the listener is closed.
 *
 * Without a secret a cluster of more than one task refuses to start unless insecure is set
 * (dt_cluster_check_secret), even on loopback, where any local user could join it; insecure, it
 * runs with a warning that its traffic is unauthenticated. */
#ifndef DTRAIN_TRANSPORT_H
#define DTRAIN_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/cluster.h"
#include "dtrain/status.h"

typedef struct {
    const uint8_t *secret; /* the cluster secret (borrowed); NULL or secret_len 0: none */
    size_t secret_len;
    bool insecure;            /* allow a cluster without a secret */
    double connect_timeout;   /* seconds to wait for every peer (default 300) */
    double handshake_timeout; /* seconds an incoming connection has to finish it (default 10) */
    uint64_t max_frame_bytes; /* largest payload accepted from an authenticated peer (64 MiB) */
    FILE *log;                /* where refusals and warnings go (NULL: the library's log) */
    int listen_fd;            /* -1 (default): listen on this task's address in the cluster;
                                 else a socket already listening there (dt_sock_listen), which
                                 dt_transport_open takes over, whatever happens: a task whose
                                 port was told to its peers before they connect */
} dt_transport_options;

void dt_transport_options_default(dt_transport_options *o);

/* A socket listening on an ephemeral port of host, for listen_fd: a task that tells its port
 * to its peers before they connect. */
dt_status dt_transport_listen_any(const char *host, int *fd, uint16_t *port);

typedef struct {
    int fd;        /* -1 for this rank itself */
    char name[DT_HOST_CAP + 48]; /* "worker:1 (127.0.0.1:4001)" */
    bool mid_frame; /* a frame to this peer is partly sent: no other frame may start */
} dt_peer;

typedef struct dt_transport {
    int rank, size;
    dt_peer *peers; /* size entries, by rank */
    uint64_t max_frame_bytes;
    FILE *log;
} dt_transport;

dt_status dt_transport_open(const dt_cluster *cl, const dt_transport_options *o,
                            dt_transport **out);
/* Accepts NULL. */
void dt_transport_close(dt_transport *t);

/* What a collective tells the transport about itself, for frame checks and messages. */
typedef struct {
    const char *name; /* "all-reduce" */
    uint16_t op;
    uint32_t seq;
    double start, deadline; /* dt_clock_now() seconds */
    double stall_warn;      /* seconds before a wait logs whom it waits for; 0: never */
    bool stall_logged;
} dt_xfer;

/* Sends one DATA frame of sn bytes from sbuf to rank `to` while receiving one of exactly rn bytes
 * from rank `from` into rbuf, both at once (either may be -1: none). The received frame must
 * belong to the same collective (op and seq) and have exactly rn bytes; an ABORT frame from the
 * peer fails with the peer's own message. */
dt_status dt_transport_exchange(dt_transport *t, dt_xfer *x, int to, const void *sbuf,
                                size_t sn, int from, void *rbuf, size_t rn);

/* For a collective that waits on a peer by other means (shared memory): fails, naming the peer,
 * when it has closed its connection or sent an ABORT frame (whose message is then the error's);
 * any other frame is left where it is. DT_OK while the peer may still come. */
dt_status dt_transport_check_peer(dt_transport *t, dt_xfer *x, int peer);
/* After a failure: tells every peer it can reach at a frame boundary, in an ABORT frame holding
 * message, within a short time, so the ranks that wait on this one learn why it stopped. */
void dt_transport_abort(dt_transport *t, const char *message);

#endif
