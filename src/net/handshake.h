/* The authenticated handshake between two tasks of a cluster, any of chief, worker, ps and
 * evaluator (internal to src/net; the formats are wire.h's):
 *
 *   client -> server  hello_c
 *   server -> client  hello_s, HMAC-SHA256(secret, "S" hello_c hello_s)
 *   client -> server  HMAC-SHA256(secret, "C" hello_c hello_s)
 *   server -> client  an ACK frame (or an ABORT frame with the reason it refuses)
 *
 * Each side checks the other's hello (magic, version, cluster id, who it is) and MAC before it
 * trusts the connection. The server asks a policy whether the client's task may connect: once on
 * its hello alone (a task that never connects to this one is refused at once) and once more after
 * the MACs (a check that must not be answered to strangers, such as "connected already").
 * Both sides then derive the connection's keys from the secret and both hellos (session.h), for
 * the frames that follow to carry MACs. */
#ifndef DTRAIN_NET_HANDSHAKE_H
#define DTRAIN_NET_HANDSHAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/cluster.h"
#include "dtrain/status.h"
#include "session.h"

/* This task, as it introduces itself. */
typedef struct {
    const uint8_t *secret;  /* NULL or secret_len 0: an unauthenticated cluster */
    size_t secret_len;
    uint64_t cluster_id;
    dt_job job;
    int index;
} dt_handshake_id;

/* Whether the task job:index may connect: NULL to accept, else the reason it is refused (a
 * static string). authenticated: the MACs have been checked. */
typedef const char *(*dt_handshake_policy)(void *ctx, dt_job job, int index, bool authenticated);

/* The server's half on an accepted connection (from: its address, for messages). On success
 * *job and *index name the client, and keys (unless NULL) hold the connection's keys. Errors: DT_ERR_AUTH with the reason (the client was told it
 * in an ABORT frame), or the connection's own (DT_ERR_PEER, DT_ERR_TIMEOUT). */
dt_status dt_handshake_serve(const dt_handshake_id *me, int fd, const char *from,
                             double deadline, dt_handshake_policy policy, void *ctx,
                             dt_job *job, int *index, dt_session_keys *keys);

/* The client's half on a connection to the task job:index (who names it in messages); keys
 * (unless NULL) get the connection's keys.
 * DT_ERR_PEER or DT_ERR_TIMEOUT: the connection broke (worth another attempt); DT_ERR_AUTH: the
 * server refused or failed the handshake. */
dt_status dt_handshake_connect(const dt_handshake_id *me, int fd, dt_job job, int index,
                               const char *who, double deadline, dt_session_keys *keys);

#endif
