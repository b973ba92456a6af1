/* ZeroMQ links of the parameter server (see zlink.h). */
#include "zlink.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "../core/clock.h"
#include "../net/sock.h"

struct dt_zlink {
    void *ctx, *sock;
    void *monitor;   /* client: the socket's connection events (a PAIR on an inproc monitor) */
    char endpoint[256];
    char peer[64];
    double heartbeat; /* client: seconds of silence after which the connection is dropped */
    bool connected;   /* client: a handshake succeeded, and the connection holds */
    bool lost;        /* client: the connection closed since (until another handshake) */
};

static dt_status zmq_fail(const char *what, const char *where)
{
    return dt_error(DT_ERR_IO, "%s %s: %s", what, where, zmq_strerror(zmq_errno()));
}

/* A CURVE key pair from the secret and a label: the secret key is the HMAC, the public key
 * Curve25519's of it; both in Z85 (40 characters and a NUL). */
static dt_status derive_keys(const void *secret, size_t secret_len, const char *label,
                             char public_z85[41], char secret_z85[41])
{
    uint8_t key[32];
    unsigned len = 0;
    if (!HMAC(EVP_sha256(), secret, (int)secret_len, (const uint8_t *)label, strlen(label), key,
              &len) || len != 32 || !zmq_z85_encode(secret_z85, key, 32) ||
        zmq_curve_public(public_z85, secret_z85) != 0)
        return dt_error(DT_ERR_IO, "deriving the ps link's keys: %s", zmq_strerror(zmq_errno()));
    return DT_OK;
}

static const char *const server_label = "dtrain ps curve server";
static const char *const client_label = "dtrain ps curve client";

/* CURVE on l's socket, its keys derived from the cluster secret (no secret: plain ZeroMQ): a
 * server's own secret key, or a client's key pair and the server's public key. what and where
 * name the step in an error. */
static dt_status set_curve(dt_zlink *l, const void *secret, size_t secret_len, bool server,
                           const char *what, const char *where)
{
    if (secret_len == 0)
        return DT_OK;
    char spub[41], ssec[41], cpub[41], csec[41];
    dt_status st = derive_keys(secret, secret_len, server_label, spub, ssec);
    if (st == DT_OK && !server)
        st = derive_keys(secret, secret_len, client_label, cpub, csec);
    if (st)
        return st;
    int one = 1;
    bool set = server ? zmq_setsockopt(l->sock, ZMQ_CURVE_SERVER, &one, sizeof one) == 0 &&
                            zmq_setsockopt(l->sock, ZMQ_CURVE_SECRETKEY, ssec, 40) == 0
                      : zmq_setsockopt(l->sock, ZMQ_CURVE_SERVERKEY, spub, 40) == 0 &&
                            zmq_setsockopt(l->sock, ZMQ_CURVE_PUBLICKEY, cpub, 40) == 0 &&
                            zmq_setsockopt(l->sock, ZMQ_CURVE_SECRETKEY, csec, 40) == 0;
    return set ? DT_OK : zmq_fail(what, where);
}

/* The largest frame a link's peer may send before ZeroMQ drops its connection instead of
 * allocating the frame (ZMQ_MAXMSGSIZE): a reply to a client can be the whole of a hybrid
 * model's dense variables, so a message at its limit with CURVE's few bytes on top; a request to
 * a server (a worker's control socket: RUN, RING, PULL_DENSE, PING, STOP) is never more than a
 * ring's ports. */
#define CLIENT_MAX_FRAME ((int64_t)DT_PSMSG_HEADER_BYTES + (int64_t)DT_PSMSG_MAX_PAYLOAD + 4096)
#define SERVER_MAX_FRAME ((int64_t)DT_ZLINK_MAX_REQUEST_BYTES + 4096)

static dt_status open_socket(int type, dt_zlink **out)
{
    dt_zlink *l = calloc(1, sizeof *l);
    if (!l)
        return dt_error(DT_ERR_NOMEM, "no memory for a ps link");
    int zero = 0;
    int64_t max_frame = type == ZMQ_ROUTER ? SERVER_MAX_FRAME : CLIENT_MAX_FRAME;
    if (!(l->ctx = zmq_ctx_new()) || !(l->sock = zmq_socket(l->ctx, type)) ||
        zmq_setsockopt(l->sock, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_setsockopt(l->sock, ZMQ_MAXMSGSIZE, &max_frame, sizeof max_frame) != 0) {
        dt_status st = zmq_fail("opening", "a ZeroMQ socket");
        dt_zlink_close(l);
        return st;
    }
    *out = l;
    return DT_OK;
}

/* ZeroMQ binds a TCP endpoint to an interface's name or an address, not to a host name: a task
 * named "job-worker-0.team.svc:2222" in TF_CONFIG (as Kubernetes names pods) binds the address
 * its name resolves to. "tcp://HOST:PORT" with HOST a name becomes "tcp://ADDRESS:PORT" (an IPv6
 * address in brackets, *ipv6 set); anything else stays as it is. */
static dt_status bind_endpoint(const char *endpoint, char *out, size_t cap, bool *ipv6)
{
    *ipv6 = false;
    snprintf(out, cap, "%s", endpoint);
    const char *host = strncmp(endpoint, "tcp://", 6) == 0 ? endpoint + 6 : NULL;
    const char *colon = host ? strrchr(host, ':') : NULL;
    if (host && colon && dt_bind_all()) { /* every interface (--bind-all) */
        snprintf(out, cap, "tcp://*%s", colon);
        return DT_OK;
    }
    if (!host || !colon || host[0] == '[' || host[0] == '*') {
        *ipv6 = host && host[0] == '[';
        return DT_OK;
    }
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(colon - host), host);
    struct in_addr v4;
    if (inet_pton(AF_INET, name, &v4) == 1)
        return DT_OK;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(name, NULL, &hints, &res);
    if (rc != 0)
        return dt_error(DT_ERR_UNAVAILABLE, "binding %s: %s does not resolve: %s", endpoint,
                        name, gai_strerror(rc));
    const struct addrinfo *pick = res;
    for (const struct addrinfo *a = res; a; a = a->ai_next)
        if (a->ai_family == AF_INET) { /* an IPv4 address first, as the peers most likely dial */
            pick = a;
            break;
        }
    char ip[INET6_ADDRSTRLEN] = "";
    if (pick->ai_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)pick->ai_addr)->sin_addr, ip, sizeof ip);
    else
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)pick->ai_addr)->sin6_addr, ip,
                  sizeof ip);
    *ipv6 = pick->ai_family == AF_INET6;
    freeaddrinfo(res);
    snprintf(out, cap, "tcp://%s%s%s%s", *ipv6 ? "[" : "", ip, *ipv6 ? "]" : "", colon);
    return DT_OK;
}

dt_status dt_zlink_server(const char *endpoint, const void *secret, size_t secret_len,
                          dt_zlink **out)
{
    *out = NULL;
    dt_zlink *l;
    char where[512];
    bool ipv6;
    dt_status st = bind_endpoint(endpoint, where, sizeof where, &ipv6);
    if (st || (st = open_socket(ZMQ_ROUTER, &l)))
        return st;
    int on = 1;
    if (ipv6 && zmq_setsockopt(l->sock, ZMQ_IPV6, &on, sizeof on) != 0) {
        st = zmq_fail("enabling IPv6 on", endpoint);
        goto fail;
    }
    if ((st = set_curve(l, secret, secret_len, true, "setting CURVE on", endpoint)))
        goto fail;
    size_t cap = sizeof l->endpoint;
    if (zmq_bind(l->sock, where) != 0 ||
        zmq_getsockopt(l->sock, ZMQ_LAST_ENDPOINT, l->endpoint, &cap) != 0) {
        st = zmq_fail("binding", endpoint);
        goto fail;
    }
    *out = l;
    return DT_OK;
fail:
    dt_zlink_close(l);
    return st;
}

/* A client's view of its connection: ZeroMQ reconnects on its own, so a closed connection is
 * seen only in the socket's events. Heartbeats make silence one too: a peer whose host is gone
 * or cut off stops answering ZMTP PINGs, and the connection is dropped after the timeout. Only
 * completed connections take messages (ZMQ_IMMEDIATE), so none is queued for a dead peer and
 * delivered to its successor. */
static dt_status watch_connection(dt_zlink *l, double heartbeat)
{
    char addr[64];
    snprintf(addr, sizeof addr, "inproc://dtrain-zlink-%p", (void *)l);
    int one = 1;
    if (zmq_setsockopt(l->sock, ZMQ_IMMEDIATE, &one, sizeof one) != 0 ||
        zmq_socket_monitor(l->sock, addr,
                           ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED) != 0 ||
        !(l->monitor = zmq_socket(l->ctx, ZMQ_PAIR)) || zmq_connect(l->monitor, addr) != 0)
        return zmq_fail("watching the connection to", l->peer);
    l->heartbeat = heartbeat;
    if (heartbeat > 0) {
        int timeout = heartbeat * 1000.0 > 6553500.0 ? 6553500 : (int)(heartbeat * 1000.0);
        int ivl = timeout / 4 > 100 ? timeout / 4 : 100;
        if (zmq_setsockopt(l->sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl) != 0 ||
            zmq_setsockopt(l->sock, ZMQ_HEARTBEAT_TIMEOUT, &timeout, sizeof timeout) != 0 ||
            zmq_setsockopt(l->sock, ZMQ_HEARTBEAT_TTL, &timeout, sizeof timeout) != 0)
            return zmq_fail("setting heartbeats for", l->peer);
    }
    return DT_OK;
}

/* Takes in the connection events that came: a handshake done, or the connection closed. */
static void read_events(dt_zlink *l)
{
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, l->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return;
        }
        uint16_t event = 0;
        if (zmq_msg_size(&m) >= 2)
            memcpy(&event, zmq_msg_data(&m), 2); /* host order, as libzmq writes it */
        bool more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        while (more) { /* the endpoint's frame */
            zmq_msg_init(&m);
            more = zmq_msg_recv(&m, l->monitor, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&m);
            zmq_msg_close(&m);
        }
        if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
            l->connected = true, l->lost = false;
        else if (event == ZMQ_EVENT_DISCONNECTED && l->connected)
            l->connected = false, l->lost = true;
    }
}

static dt_status lost_error(const dt_zlink *c)
{
    if (c->heartbeat > 0)
        return dt_error(DT_ERR_PEER, "%s at %s closed the connection, or was silent for %g s "
                        "(--heartbeat-timeout)", c->peer, c->endpoint, c->heartbeat);
    return dt_error(DT_ERR_PEER, "%s at %s closed the connection", c->peer, c->endpoint);
}

bool dt_zlink_lost(dt_zlink *c)
{
    read_events(c);
    return c->lost;
}

dt_status dt_zlink_client(const char *endpoint, const char *peer, const void *secret,
                          size_t secret_len, double heartbeat, dt_zlink **out)
{
    *out = NULL;
    dt_zlink *l;
    dt_status st = open_socket(ZMQ_DEALER, &l);
    if (st)
        return st;
    snprintf(l->peer, sizeof l->peer, "%s", peer);
    snprintf(l->endpoint, sizeof l->endpoint, "%s", endpoint);
    if ((st = watch_connection(l, heartbeat)) ||
        (st = set_curve(l, secret, secret_len, false, "setting CURVE for", peer)))
        goto fail;
    if (zmq_connect(l->sock, endpoint) != 0) {
        st = zmq_fail("connecting to", peer);
        goto fail;
    }
    *out = l;
    return DT_OK;
fail:
    dt_zlink_close(l);
    return st;
}

void dt_zlink_close(dt_zlink *l)
{
    if (!l)
        return;
    if (l->sock)
        zmq_close(l->sock);
    if (l->monitor)
        zmq_close(l->monitor);
    if (l->ctx)
        zmq_ctx_term(l->ctx);
    free(l);
}

const char *dt_zlink_endpoint(const dt_zlink *l) { return l->endpoint; }

/* Waits for a message within timeout seconds: DT_OK when one is there, DT_END when not. */
static dt_status wait_readable(dt_zlink *l, double timeout)
{
    zmq_pollitem_t item = {.socket = l->sock, .events = ZMQ_POLLIN};
    long ms = timeout <= 0 ? 0 : (long)(timeout * 1000.0 + 0.5);
    int n;
    do
        n = zmq_poll(&item, 1, ms);
    while (n < 0 && zmq_errno() == EINTR);
    if (n < 0)
        return zmq_fail("waiting on", l->peer[0] ? l->peer : l->endpoint);
    return n == 0 ? DT_END : DT_OK;
}

/* The next frame into out (replacing its contents); addr (unless NULL) gets the address of the
 * connection it came on, "an unknown address" when ZeroMQ does not tell. */
static dt_status recv_frame_from(dt_zlink *l, dt_psbuf *out, int *more, char *addr, size_t cap)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, l->sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return zmq_fail("receiving from", l->peer[0] ? l->peer : l->endpoint);
    }
    if (addr) {
        const char *a = zmq_msg_gets(&m, "Peer-Address");
        snprintf(addr, cap, "%s", a ? a : "an unknown address");
    }
    size_t n = zmq_msg_size(&m);
    out->len = 0;
    if (n > out->cap) {
        uint8_t *p = realloc(out->data, n);
        if (!p) {
            zmq_msg_close(&m);
            return dt_error(DT_ERR_NOMEM, "no memory for a %zu-byte ps message", n);
        }
        out->data = p, out->cap = n;
    }
    memcpy(out->data, zmq_msg_data(&m), n);
    out->len = n;
    *more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    return DT_OK;
}

static dt_status recv_frame(dt_zlink *l, dt_psbuf *out, int *more)
{
    return recv_frame_from(l, out, more, NULL, 0);
}

static dt_status no_reply(const dt_zlink *c, double timeout)
{
    return dt_error(DT_ERR_TIMEOUT, "%s at %s: no reply in %g s (gone, or it refused this "
                    "task's handshake: is the cluster secret the same?)", c->peer, c->endpoint,
                    timeout);
}

/* Waits until the socket is readable (events: ZMQ_POLLIN) or writable (ZMQ_POLLOUT) before
 * deadline: DT_END when it passed, DT_ERR_PEER when the connection closed meanwhile. */
static dt_status wait_for(dt_zlink *c, short events, double deadline)
{
    for (;;) {
        read_events(c);
        if (c->lost)
            return lost_error(c);
        zmq_pollitem_t items[2] = {{.socket = c->sock, .events = events},
                                   {.socket = c->monitor, .events = ZMQ_POLLIN}};
        double left = deadline - dt_clock_now();
        if (left <= 0)
            return DT_END;
        int n = zmq_poll(items, 2, (long)(left * 1000.0) + 1);
        if (n < 0 && zmq_errno() != EINTR)
            return zmq_fail("waiting on", c->peer);
        if (n > 0 && (items[0].revents & events))
            return DT_OK;
    }
}

dt_status dt_zlink_send(dt_zlink *c, const dt_psbuf *request, double timeout)
{
    double deadline = dt_clock_now() + timeout;
    for (;;) {
        if (zmq_send(c->sock, request->data, request->len, ZMQ_DONTWAIT) >= 0)
            return DT_OK;
        if (zmq_errno() != EAGAIN && zmq_errno() != EINTR)
            return zmq_fail("sending to", c->peer);
        /* No connection yet (or any more): wait for one. */
        dt_status st = wait_for(c, ZMQ_POLLOUT, deadline);
        if (st == DT_END)
            return no_reply(c, timeout);
        if (st)
            return st;
    }
}

dt_status dt_zlink_await(dt_zlink *c, double timeout, dt_psbuf *reply)
{
    /* A reply already in is taken even when the connection closed after it. */
    zmq_pollitem_t item = {.socket = c->sock, .events = ZMQ_POLLIN};
    dt_status st = zmq_poll(&item, 1, 0) > 0 ? DT_OK
                                             : wait_for(c, ZMQ_POLLIN, dt_clock_now() + timeout);
    if (st == DT_END)
        return no_reply(c, timeout);
    int more = 0;
    if (st == DT_OK && (st = recv_frame(c, reply, &more)) == DT_OK && more)
        st = dt_error(DT_ERR_PEER, "%s: a reply of several frames", c->peer);
    return st;
}

dt_status dt_zlink_request(dt_zlink *c, const dt_psbuf *request, double timeout,
                           dt_psbuf *reply)
{
    double t0 = dt_clock_now();
    dt_status st = dt_zlink_send(c, request, timeout);
    double left = timeout - (dt_clock_now() - t0);
    return st ? st : dt_zlink_await(c, left > 0 ? left : 0, reply);
}

dt_status dt_zlink_receive(dt_zlink *s, double timeout, dt_zpeer *from, dt_psbuf *msg)
{
    dt_status st = wait_readable(s, timeout);
    if (st)
        return st;
    dt_psbuf id = {0};
    int more = 0;
    from->len = 0;
    snprintf(from->addr, sizeof from->addr, "an unknown address");
    /* The address comes with a frame the connection delivered (the body), not with the
     * identity frame the ROUTER socket makes. */
    if ((st = recv_frame(s, &id, &more)) == DT_OK && !more)
        st = dt_error(DT_ERR_PEER, "%s: a request without a body from %s", s->endpoint,
                      from->addr);
    if (st == DT_OK && id.len > sizeof from->id)
        st = dt_error(DT_ERR_PEER, "%s: a peer identity of %zu bytes from %s", s->endpoint,
                      id.len, from->addr);
    if (st == DT_OK) {
        memcpy(from->id, id.data, id.len);
        from->len = id.len;
        st = recv_frame_from(s, msg, &more, from->addr, sizeof from->addr);
    }
    /* Frames past the body: drained, the request refused. */
    while (st == DT_OK && more) {
        st = recv_frame(s, &id, &more);
        if (st == DT_OK && !more)
            st = dt_error(DT_ERR_PEER, "%s: a request of several frames from %s", s->endpoint,
                          from->addr);
    }
    dt_psbuf_free(&id);
    return st;
}

dt_status dt_zlink_reply(dt_zlink *s, const dt_zpeer *to, const dt_psbuf *msg)
{
    if (zmq_send(s->sock, to->id, to->len, ZMQ_SNDMORE) < 0 ||
        zmq_send(s->sock, msg->data, msg->len, 0) < 0)
        return zmq_fail("replying on", s->endpoint);
    return DT_OK;
}
