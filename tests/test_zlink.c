/* The parameter server's ZeroMQ links on loopback: a request and its reply; a client with the
 * wrong secret, a stranger's random bytes and an absent server each end in a named error within
 * the deadline, and the server goes on serving the right client. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../src/ps/zlink.h"
#include "../src/core/clock.h"
#include "test.h"

static const char secret[] = "the cluster's secret";

typedef struct {
    dt_zlink *server;
    int served;      /* requests answered */
    int stop;        /* set by the test */
} echo_ctx;

/* Answers PING with PONG (same request id) until told to stop. */
static void *echo(void *arg)
{
    echo_ctx *e = arg;
    dt_psbuf in = {0}, out = {0};
    while (!__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE)) {
        dt_zpeer from;
        dt_status st = dt_zlink_receive(e->server, 0.05, &from, &in);
        if (st != DT_OK)
            continue;
        dt_psmsg m;
        if (dt_psmsg_decode(in.data, in.len, "client", &m) != DT_OK || m.type != DT_PSMSG_PING)
            continue;
        dt_psmsg pong = {.type = DT_PSMSG_PONG, .request_id = m.request_id};
        out.len = 0;
        if (dt_psmsg_encode(&pong, NULL, NULL, &out) == DT_OK &&
            dt_zlink_reply(e->server, &from, &out) == DT_OK)
            __atomic_add_fetch(&e->served, 1, __ATOMIC_ACQ_REL);
    }
    dt_psbuf_free(&in);
    dt_psbuf_free(&out);
    return NULL;
}

/* A PING with this id through c, and whether its PONG came back. */
static dt_status ping(dt_zlink *c, uint64_t id, double timeout)
{
    dt_psbuf req = {0}, rep = {0};
    dt_psmsg m = {.type = DT_PSMSG_PING, .request_id = id};
    dt_status st = dt_psmsg_encode(&m, NULL, NULL, &req);
    if (st == DT_OK)
        st = dt_zlink_request(c, &req, timeout, &rep);
    dt_psmsg r;
    if (st == DT_OK && (st = dt_psmsg_decode(rep.data, rep.len, "ps:0", &r)) == DT_OK &&
        (r.type != DT_PSMSG_PONG || r.request_id != id))
        st = dt_error(DT_ERR_PEER, "ps:0: a reply of type %d to request %llu", (int)r.type,
                      (unsigned long long)r.request_id);
    dt_psbuf_free(&req);
    dt_psbuf_free(&rep);
    return st;
}

/* The port of an endpoint "tcp://127.0.0.1:PORT". */
static int port_of(const char *endpoint)
{
    const char *colon = strrchr(endpoint, ':');
    return colon ? atoi(colon + 1) : 0;
}

TEST(zlink_request_reply_and_strangers_refused)
{
    echo_ctx e = {0};
    CHECK_OK(dt_zlink_server("tcp://127.0.0.1:*", secret, sizeof secret - 1, &e.server));
    if (!e.server)
        return;
    pthread_t t;
    pthread_create(&t, NULL, echo, &e);
    const char *ep = dt_zlink_endpoint(e.server);

    dt_zlink *good = NULL, *wrong = NULL, *plain = NULL;
    CHECK_OK(dt_zlink_client(ep, "ps:0", secret, sizeof secret - 1, 0, &good));
    CHECK_OK(ping(good, 1, 5.0));

    /* A wrong secret: the handshake never completes, the request times out, named. */
    CHECK_OK(dt_zlink_client(ep, "ps:0", "another secret", 14, 0, &wrong));
    double t0 = dt_clock_now();
    dt_status st = ping(wrong, 2, 0.5);
    CHECK_MSG(st == DT_ERR_TIMEOUT && strstr(dt_last_error(), "ps:0") &&
              strstr(dt_last_error(), "cluster secret"), "%d: %s", st, dt_last_error());
    CHECK(dt_clock_now() - t0 < 3.0);
    /* No secret at all (CURVE off on the client): refused as well. */
    CHECK_OK(dt_zlink_client(ep, "ps:0", NULL, 0, 0, &plain));
    CHECK(ping(plain, 3, 0.5) == DT_ERR_TIMEOUT);

    /* A stranger's random bytes on the port. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port_of(ep))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    uint8_t junk[512];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 131 + 7);
    CHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
    close(fd);

    /* The right client is still served, and only it was. The echo thread counts a reply after
     * sending it, so the count is read once the thread has ended. */
    CHECK_OK(ping(good, 4, 5.0));
    __atomic_store_n(&e.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    CHECK(__atomic_load_n(&e.served, __ATOMIC_ACQUIRE) == 2);
    dt_zlink_close(good), dt_zlink_close(wrong), dt_zlink_close(plain);

    /* The server gone: a timeout naming it, within the deadline. */
    char gone[256];
    snprintf(gone, sizeof gone, "%s", ep);
    dt_zlink_close(e.server);
    dt_zlink *late = NULL;
    CHECK_OK(dt_zlink_client(gone, "ps:3", secret, sizeof secret - 1, 0, &late));
    t0 = dt_clock_now();
    CHECK(ping(late, 5, 0.3) == DT_ERR_TIMEOUT && strstr(dt_last_error(), "ps:3"));
    CHECK(dt_clock_now() - t0 < 2.0);
    dt_zlink_close(late);
}

/* A server bound by its host's name (as TF_CONFIG names a Kubernetes pod) listens on the address
 * the name resolves to, and is reached by the name; a name that does not resolve is named. */
TEST(zlink_server_binds_the_address_its_name_resolves_to)
{
    echo_ctx e = {0};
    CHECK_OK(dt_zlink_server("tcp://localhost:*", secret, sizeof secret - 1, &e.server));
    if (!e.server)
        return;
    const char *ep = dt_zlink_endpoint(e.server);
    CHECK_MSG(strncmp(ep, "tcp://127.0.0.1:", 16) == 0 || strncmp(ep, "tcp://[::1]:", 12) == 0,
              "bound %s", ep);
    pthread_t t;
    pthread_create(&t, NULL, echo, &e);
    char by_name[128];
    snprintf(by_name, sizeof by_name, "tcp://localhost:%d", port_of(ep));
    dt_zlink *c = NULL;
    CHECK_OK(dt_zlink_client(by_name, "worker:0", secret, sizeof secret - 1, 0, &c));
    CHECK_OK(ping(c, 1, 5.0));
    __atomic_store_n(&e.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    dt_zlink_close(c);
    dt_zlink_close(e.server);
    dt_zlink *none = NULL;
    CHECK_ERR(dt_zlink_server("tcp://no-such-host.invalid:2222", secret, sizeof secret - 1, &none),
              DT_ERR_UNAVAILABLE, "no-such-host.invalid does not resolve");
    CHECK(none == NULL);
}

/* A server that goes away after the handshake: the client sees the closed connection at once
 * (DT_ERR_PEER naming the peer, well before the request's timeout), and a server started again
 * at the same endpoint is reached again through the same client. */
TEST(zlink_client_sees_a_closed_connection_and_reconnects)
{
    echo_ctx e = {0};
    CHECK_OK(dt_zlink_server("tcp://127.0.0.1:*", secret, sizeof secret - 1, &e.server));
    if (!e.server)
        return;
    char ep[256];
    snprintf(ep, sizeof ep, "%s", dt_zlink_endpoint(e.server));
    pthread_t t;
    pthread_create(&t, NULL, echo, &e);
    dt_zlink *c = NULL;
    CHECK_OK(dt_zlink_client(ep, "worker:1", secret, sizeof secret - 1, 2.0, &c));
    CHECK_OK(ping(c, 1, 5.0));
    CHECK(!dt_zlink_lost(c));
    __atomic_store_n(&e.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    dt_zlink_close(e.server);
    double t0 = dt_clock_now();
    dt_status st = ping(c, 2, 5.0);
    CHECK_MSG(st == DT_ERR_PEER && strstr(dt_last_error(), "worker:1") &&
              strstr(dt_last_error(), "closed the connection"), "%d: %s", st, dt_last_error());
    CHECK(dt_clock_now() - t0 < 2.0 && dt_zlink_lost(c));
    /* The same endpoint served again: the client's next handshake makes it good. */
    echo_ctx e2 = {0};
    CHECK_OK(dt_zlink_server(ep, secret, sizeof secret - 1, &e2.server));
    if (e2.server) {
        pthread_create(&t, NULL, echo, &e2);
        st = DT_ERR_PEER;
        for (int i = 0; i < 50 && st != DT_OK; i++) {
            st = ping(c, 3 + (uint64_t)i, 0.5);
            if (st != DT_OK) {
                struct timespec ts = {0, 100 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        CHECK_OK(st);
        CHECK(!dt_zlink_lost(c));
        __atomic_store_n(&e2.stop, 1, __ATOMIC_RELEASE);
        pthread_join(t, NULL);
        dt_zlink_close(e2.server);
    }
    dt_zlink_close(c);
}

/* A request larger than a server takes is never allocated or delivered (ZeroMQ drops the
 * sender's connection at the frame's header), and the server goes on taking requests. */
TEST(zlink_server_refuses_oversized_requests)
{
    dt_zlink *server = NULL, *big = NULL, *small = NULL;
    CHECK_OK(dt_zlink_server("tcp://127.0.0.1:*", secret, sizeof secret - 1, &server));
    if (!server)
        return;
    const char *ep = dt_zlink_endpoint(server);
    CHECK_OK(dt_zlink_client(ep, "worker:0", secret, sizeof secret - 1, 0, &big));
    dt_psbuf msg = {0}, in = {0};
    size_t n = 2 * DT_ZLINK_MAX_REQUEST_BYTES;
    msg.data = calloc(n, 1), msg.len = msg.cap = n;
    CHECK(msg.data != NULL);
    CHECK_OK(dt_zlink_send(big, &msg, 5.0));
    dt_zpeer from;
    dt_status st = dt_zlink_receive(server, 1.5, &from, &in);
    CHECK_MSG(st == DT_END, "status %d, %zu bytes delivered", (int)st, in.len);
    /* Another client's request at the limit is delivered. */
    CHECK_OK(dt_zlink_client(ep, "worker:0", secret, sizeof secret - 1, 0, &small));
    msg.len = DT_ZLINK_MAX_REQUEST_BYTES;
    CHECK_OK(dt_zlink_send(small, &msg, 5.0));
    CHECK_OK(dt_zlink_receive(server, 5.0, &from, &in));
    CHECK(in.len == DT_ZLINK_MAX_REQUEST_BYTES);
    dt_psbuf_free(&msg), dt_psbuf_free(&in);
    dt_zlink_close(big), dt_zlink_close(small), dt_zlink_close(server);
}
