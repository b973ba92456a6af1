/* Request/reply links of the parameter server over ZeroMQ (libzmq, as ps-lite uses it): a
 * server is a ROUTER bound to an endpoint, a client a DEALER connected to one, one message per
 * frame (psmsg.h). Both sides use CURVE with keys derived from the cluster secret: the server's
 * secret key is HMAC-SHA256(secret, "dtrain ps curve server"), every client's HMAC-SHA256(secret,
 * "dtrain ps curve client"), and a client needs the server's public key to begin the handshake.
 * So only a task holding the secret completes it: a stranger's connection, random bytes, a
 * wrong secret or a replayed handshake never delivers a message, and the server goes on. With
 * no secret (a cluster run with --insecure), CURVE is off.
 *
 * Every receive has a deadline; sockets linger 0, so a close never waits on an absent peer. */
#ifndef DTRAIN_PS_ZLINK_H
#define DTRAIN_PS_ZLINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/status.h"
#include "psmsg.h"

typedef struct dt_zlink dt_zlink;

/* The largest request a server takes (RING with every worker's port is the largest, 128 KiB):
 * a peer that sends more has its connection dropped by ZeroMQ before the frame is allocated.
 * A client takes replies up to a ps message's limit (psmsg.h). */
#define DT_ZLINK_MAX_REQUEST_BYTES ((size_t)1 << 20)

/* endpoint: "tcp://HOST:PORT" (PORT 0 or "*": any free port; dt_zlink_endpoint tells which). */
dt_status dt_zlink_server(const char *endpoint, const void *secret, size_t secret_len,
                          dt_zlink **out);
/* peer names the server in errors ("ps:1"). A client sees its connection close (the peer's
 * process ended, or its host was cut off): at once when the peer's kernel closes it, and after
 * heartbeat seconds of silence when heartbeat > 0 (ZMTP heartbeats, answered by the peer's
 * ZeroMQ thread even while it computes). Requests then fail with DT_ERR_PEER naming the peer;
 * ZeroMQ goes on reconnecting, and a new handshake (a restarted peer) makes the link good
 * again. Messages wait only on completed connections, so none is kept for a successor. */
dt_status dt_zlink_client(const char *endpoint, const char *peer, const void *secret,
                          size_t secret_len, double heartbeat, dt_zlink **out);
void dt_zlink_close(dt_zlink *l);

/* The endpoint a server is bound to, its port resolved. */
const char *dt_zlink_endpoint(const dt_zlink *l);

/* A client's request and its reply within timeout seconds: DT_ERR_TIMEOUT naming the peer when
 * none comes (the server is gone, or refused the handshake), DT_ERR_PEER when the connection
 * closed. */
dt_status dt_zlink_request(dt_zlink *c, const dt_psbuf *request, double timeout,
                           dt_psbuf *reply);
/* Its halves: the request sent once a connection takes it, within timeout; the next message
 * from the server within timeout (a late reply to an earlier request is the caller's to tell
 * from the one it waits for). */
dt_status dt_zlink_send(dt_zlink *c, const dt_psbuf *request, double timeout);
dt_status dt_zlink_await(dt_zlink *c, double timeout, dt_psbuf *reply);
/* Whether the client's connection closed since its last handshake. */
bool dt_zlink_lost(dt_zlink *c);

/* Who sent a request to a server, for its reply, and the address it came from, for messages. */
typedef struct {
    uint8_t id[256];
    size_t len;
    char addr[64];
} dt_zpeer;

/* A server's next request within timeout seconds (DT_END when none came). DT_ERR_PEER, naming
 * the sender's address, for a request not shaped as one (no body, several frames): the caller
 * may drop it and go on; any other error is the socket's. */
dt_status dt_zlink_receive(dt_zlink *s, double timeout, dt_zpeer *from, dt_psbuf *msg);
dt_status dt_zlink_reply(dt_zlink *s, const dt_zpeer *to, const dt_psbuf *msg);

#endif
