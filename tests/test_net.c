/* The transport and the tcp communicator: wire formats, collectives between ranks on threads of
 * this process over real loopback sockets, handshake refusals, and failures named. The same
 * paths across real processes (and kill -9) are in tests/net.sh. */
#include <arpa/inet.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../src/core/clock.h"
#include "../src/coll/comm_tcp.h"
#include "../src/net/sock.h"
#include "../src/net/wire.h"
#include "test.h"

/* ---- wire ---- */

static void example_hellos(uint8_t hc[DT_HELLO_BYTES], uint8_t hs[DT_HELLO_BYTES])
{
    dt_hello c = {DT_WIRE_VERSION, 0x0102030405060708ull, 1, 2, {0}};
    dt_hello s = {DT_WIRE_VERSION, 0x0102030405060708ull, 0, 0, {0}};
    for (int i = 0; i < DT_NONCE_BYTES; i++)
        c.nonce[i] = (uint8_t)i, s.nonce[i] = (uint8_t)(32 + i);
    dt_hello_encode(&c, hc);
    dt_hello_encode(&s, hs);
}

static void hex(const uint8_t *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
}

TEST(wire_hello_round_trip_and_refusals)
{
    uint8_t hc[DT_HELLO_BYTES], hs[DT_HELLO_BYTES], b[DT_HELLO_BYTES];
    example_hellos(hc, hs);
    dt_hello h;
    CHECK_OK(dt_hello_decode(hc, &h));
    CHECK(h.task_type == 1 && h.task_index == 2 && h.cluster_id == 0x0102030405060708ull);
    dt_hello_encode(&h, b);
    CHECK(memcmp(b, hc, sizeof b) == 0);
    memcpy(b, hc, sizeof b);
    b[0] = 'X';
    CHECK_ERR(dt_hello_decode(b, &h), DT_ERR_AUTH, "not a dtrain peer");
    memcpy(b, hc, sizeof b);
    b[8] = 1;
    CHECK_ERR(dt_hello_decode(b, &h), DT_ERR_AUTH, "protocol version 1, this dtrain speaks 2");
    memcpy(b, hc, sizeof b);
    b[24] = 9;
    CHECK_ERR(dt_hello_decode(b, &h), DT_ERR_AUTH, "task type 9");
    memcpy(b, hc, sizeof b);
    b[27] = 1;
    CHECK_ERR(dt_hello_decode(b, &h), DT_ERR_AUTH, "reserved handshake byte 27");
}

TEST(wire_mac_known_answers)
{
    /* HMAC-SHA256 computed independently (Python's hmac module) over "S" hello_c hello_s, the
     * hellos of protocol version 2. */
    uint8_t hc[DT_HELLO_BYTES], hs[DT_HELLO_BYTES], mac[DT_MAC_BYTES], other[DT_MAC_BYTES];
    char text[2 * DT_MAC_BYTES + 1];
    example_hellos(hc, hs);
    dt_hello_mac((const uint8_t *)"0123456789abcdef", 16, 'S', hc, hs, mac);
    hex(mac, sizeof mac, text);
    CHECK_MSG(strcmp(text, "08f55eec621f25763d47da5ceeb79974a8fa6dbf4ea691c57542c00b46277caa") == 0,
              "%s", text);
    dt_hello_mac(NULL, 0, 'C', hc, hs, mac);
    hex(mac, sizeof mac, text);
    CHECK_MSG(strcmp(text, "96193b7371f27f5fb77dbbd07fde9923fc4258f45b9b17b78c349d1f480a4dcb") == 0,
              "%s", text);
    memcpy(other, mac, sizeof mac);
    CHECK(dt_mac_equal(mac, other));
    other[31] ^= 1;
    CHECK(!dt_mac_equal(mac, other));
}

TEST(wire_frames_round_trip_and_refusals)
{
    uint8_t b[DT_FRAME_HDR_BYTES];
    dt_frame_hdr h = {DT_FRAME_DATA, 3, 77, 4096}, g;
    dt_frame_encode(&h, b);
    CHECK_OK(dt_frame_decode(b, 1 << 20, &g));
    CHECK(g.type == DT_FRAME_DATA && g.op == 3 && g.seq == 77 && g.n_bytes == 4096);
    CHECK_ERR(dt_frame_decode(b, 4095, &g), DT_ERR_PEER, "frame of 4096 bytes, above the limit");
    b[9] ^= 1;
    CHECK_ERR(dt_frame_decode(b, 1 << 20, &g), DT_ERR_PEER, "bad checksum");
    memset(b, 'A', sizeof b);
    CHECK_ERR(dt_frame_decode(b, 1 << 20, &g), DT_ERR_PEER, "not a frame");
    h.type = 9;
    dt_frame_encode(&h, b);
    CHECK_ERR(dt_frame_decode(b, 1 << 20, &g), DT_ERR_PEER, "unknown type 9");
}

/* ---- clusters of threads ---- */

#define MAX_RANKS 5

/* n distinct free loopback ports. */
static void free_ports(int n, uint16_t *ports)
{
    int fds[MAX_RANKS + 1];
    for (int i = 0; i < n; i++)
        if (dt_sock_listen("127.0.0.1", 0, &fds[i], &ports[i]) != DT_OK)
            ports[i] = 0;
    for (int i = 0; i < n; i++)
        dt_sock_close(fds[i]);
}

static void cluster_json(int n, const uint16_t *ports, int index, char *out, size_t cap)
{
    size_t k = (size_t)snprintf(out, cap, "{\"cluster\": {\"worker\": [");
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s\"127.0.0.1:%u\"", i ? ", " : "", ports[i]);
    snprintf(out + k, cap - k, "]}, \"task\": {\"type\": \"worker\", \"index\": %d}}", index);
}

typedef struct rank_ctx rank_ctx;
typedef dt_status (*scenario_fn)(rank_ctx *r, dt_comm *c);

struct rank_ctx {
    int n, index;
    const uint16_t *ports;
    const char *secret;   /* NULL: none, and insecure given (most tests are not of the secret) */
    bool demand_secret;   /* with no secret, insecure is not given: the start must be refused */
    double timeout, connect_timeout;
    size_t segment_bytes, small_bytes;
    bool tcp_only;  /* no shared memory, though the ranks share a host */
    FILE *log;
    scenario_fn run;
    void *arg;
    /* results */
    dt_status st;
    char msg[1024];
    uint64_t digest; /* of the results, equal on every rank when they agree bitwise */
    long mismatches;
    double seconds;
};

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Whether this machine has a /dev/shm the ranks can meet in (a container may lack one, or have
 * too little room): the ranks then keep to TCP, as they should, and the tests say so. */
static bool shm_usable(void)
{
    struct statvfs sv;
    return access("/dev/shm", W_OK) == 0 && statvfs("/dev/shm", &sv) == 0 &&
           (uint64_t)sv.f_bavail * sv.f_frsize >= ((uint64_t)64 << 20);
}

static void *rank_main(void *arg)
{
    rank_ctx *r = arg;
    char json[1024];
    cluster_json(r->n, r->ports, r->index, json, sizeof json);
    dt_cluster cl;
    dt_comm *c = NULL;
    double t0 = dt_clock_now();
    dt_tcp_options o;
    dt_tcp_options_default(&o);
    o.timeout = r->timeout > 0 ? r->timeout : 20.0;
    o.transport.connect_timeout = r->connect_timeout > 0 ? r->connect_timeout : 20.0;
    o.transport.secret = (const uint8_t *)r->secret;
    o.transport.secret_len = r->secret ? strlen(r->secret) : 0;
    o.transport.insecure = !r->secret && !r->demand_secret;
    o.transport.log = r->log;
    if (r->segment_bytes)
        o.segment_bytes = r->segment_bytes;
    if (r->small_bytes)
        o.small_bytes = r->small_bytes;
    o.shm = !r->tcp_only;
    r->st = dt_cluster_parse(json, &cl);
    if (r->st == DT_OK) {
        r->st = dt_comm_tcp(&cl, &o, &c);
        if (r->st == DT_OK && dt_comm_tcp_uses_shm(c) != (!r->tcp_only && shm_usable()))
            r->st = dt_error(DT_ERR_INVALID, "shared memory is %s, though it was %s",
                             r->tcp_only ? "in use" : "not in use",
                             r->tcp_only ? "turned off" : "asked for on one host with a /dev/shm");
        if (r->st == DT_OK)
            r->st = r->run(r, c);
    }
    snprintf(r->msg, sizeof r->msg, "%s", r->st ? dt_last_error() : "");
    r->seconds = dt_clock_now() - t0;
    dt_comm_destroy(c);
    dt_cluster_free(&cl);
    return NULL;
}

/* Runs scenario on n ranks, one thread each; ctx[i] get the results. */
static void run_cluster(int n, rank_ctx *proto, rank_ctx *ctx)
{
    static uint16_t ports[MAX_RANKS];
    free_ports(n, ports);
    pthread_t th[MAX_RANKS];
    for (int i = 0; i < n; i++) {
        ctx[i] = *proto;
        ctx[i].n = n, ctx[i].index = i, ctx[i].ports = ports;
        pthread_create(&th[i], NULL, rank_main, &ctx[i]);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

/* Exact in float32 whatever the order of addition: multiples of 1/8 below 2^10. Every 11th
 * element is zero, negative on odd ranks, so min and max meet +0 against -0, where only a fixed
 * order of operands gives every rank the same bits. */
static float input(int rank, size_t i)
{
    if (i % 11 == 0)
        return rank % 2 ? -0.0f : 0.0f;
    return (float)((rank * 7919 + (long)i * 104729) % 1000) / 8.0f - 60.0f;
}

static float expect(int n, size_t i, dt_reduce_op op)
{
    float acc = input(0, i);
    for (int r = 1; r < n; r++) {
        float v = input(r, i);
        if (op == DT_REDUCE_MIN)
            acc = v < acc ? v : acc;
        else if (op == DT_REDUCE_MAX)
            acc = v > acc ? v : acc;
        else
            acc += v;
    }
    return op == DT_REDUCE_MEAN ? acc / (float)n : acc;
}

static const size_t counts[] = {0, 1, 2, 7, 13, 97, 1000, 100003};

static dt_status all_collectives(rank_ctx *r, dt_comm *c)
{
    dt_status st = DT_OK;
    int n = c->size;
    float *buf = malloc(100003 * sizeof *buf), *all = malloc(100003 * MAX_RANKS * sizeof *all);
    r->digest = 1469598103934665603ull;
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0] && !st; ci++) {
        size_t cnt = counts[ci];
        for (int op = DT_REDUCE_SUM; op <= DT_REDUCE_MAX && !st; op++) {
            for (int w = DT_WIRE_F32; w <= DT_WIRE_F16 && !st; w++) {
                for (size_t i = 0; i < cnt; i++)
                    buf[i] = input(c->rank, i);
                if ((st = dt_comm_allreduce(c, buf, cnt, (dt_reduce_op)op, (dt_wire_dtype)w)))
                    break;
                r->digest = fnv(r->digest, buf, cnt * sizeof *buf);
                for (size_t i = 0; i < cnt; i++) {
                    float e = expect(n, i, (dt_reduce_op)op);
                    /* 16-bit wires keep 8 (bf16) or 11 (fp16) significant bits per hop. */
                    float tol = w == DT_WIRE_F32 ? 0.0f : fabsf(e) * 0.03f + 0.6f;
                    r->mismatches += !(fabsf(buf[i] - e) <= tol);
                }
            }
            /* reduce-scatter: this rank's block only */
            for (size_t i = 0; i < cnt; i++)
                buf[i] = input(c->rank, i);
            if ((st = dt_comm_reduce_scatter(c, buf, cnt, (dt_reduce_op)op, DT_WIRE_F32)))
                break;
            size_t off, k;
            dt_comm_block(cnt, n, c->rank, &off, &k);
            for (size_t i = off; i < off + k; i++)
                r->mismatches += buf[i] != expect(n, i, (dt_reduce_op)op);
        }
        if (st)
            break;
        /* all-gather of cnt bytes per rank */
        uint8_t *mine = (uint8_t *)buf;
        for (size_t i = 0; i < cnt; i++)
            mine[i] = (uint8_t)(c->rank * 31 + i);
        if ((st = dt_comm_allgather(c, mine, cnt, all)))
            break;
        for (int q = 0; q < n; q++)
            for (size_t i = 0; i < cnt; i++)
                r->mismatches += ((uint8_t *)all)[(size_t)q * cnt + i] != (uint8_t)(q * 31 + i);
        /* broadcast from every root */
        for (int root = 0; root < n && !st; root++) {
            for (size_t i = 0; i < cnt; i++)
                buf[i] = c->rank == root ? input(root, i) : -1.0f;
            if ((st = dt_comm_broadcast(c, buf, cnt * sizeof *buf, root)))
                break;
            for (size_t i = 0; i < cnt; i++)
                r->mismatches += buf[i] != input(root, i);
        }
        if (!st)
            st = dt_comm_barrier(c);
    }
    /* More than one round of the shared segment (1 Mi floats per rank), and a last round of
     * 5: sums of integers, exact in float32. */
    size_t big_n = ((size_t)2 << 20) + 5;
    float *big = st ? NULL : malloc(big_n * sizeof *big);
    if (big) {
        for (size_t i = 0; i < big_n; i++)
            big[i] = (float)((i * 7 + (size_t)c->rank * 13) % 1000);
        if ((st = dt_comm_allreduce(c, big, big_n, DT_REDUCE_SUM, DT_WIRE_F32)) == DT_OK) {
            for (size_t i = 0; i < big_n; i++) {
                float e = 0.0f;
                for (int q = 0; q < n; q++)
                    e += (float)((i * 7 + (size_t)q * 13) % 1000);
                r->mismatches += big[i] != e;
            }
        }
        free(big);
    }
    free(buf);
    free(all);
    return st;
}

TEST(net_tcp_collectives_with_2_to_5_ranks)
{
    if (!shm_usable())
        printf("  note: no writable /dev/shm with 64 MiB free: the shared-memory runs keep to TCP\n");
    for (int k = 0; k < 2 * (MAX_RANKS - 1); k++) {
        int n = 2 + k / 2;
        rank_ctx proto = {0}, ctx[MAX_RANKS];
        proto.tcp_only = k % 2; /* all-reduce and barrier through shared memory, or not */
        proto.run = all_collectives;
        proto.secret = "a test secret of some length";
        proto.log = tmpfile();
        /* Small segments and a small threshold so both all-reduce algorithms and many segments
         * run at these counts. */
        proto.segment_bytes = 4096;
        proto.small_bytes = 256;
        run_cluster(n, &proto, ctx);
        for (int i = 0; i < n; i++) {
            CHECK_MSG(ctx[i].st == DT_OK, "%d ranks, tcp only %d, rank %d: %s", n,
                      proto.tcp_only, i, ctx[i].msg);
            CHECK_MSG(ctx[i].mismatches == 0, "%d ranks, tcp only %d, rank %d: %ld wrong values",
                      n, proto.tcp_only, i, ctx[i].mismatches);
            CHECK_MSG(ctx[i].digest == ctx[0].digest, "%d ranks, tcp only %d: rank %d's results "
                      "differ bitwise from rank 0's", n, proto.tcp_only, i);
        }
        fclose(proto.log);
    }
}

/* ---- strangers ---- */

static int connect_retry(uint16_t port)
{
    for (int i = 0; i < 200; i++) {
        int fd;
        if (dt_sock_connect("127.0.0.1", port, dt_clock_now() + 1.0, &fd) == DT_OK)
            return fd;
        usleep(10000);
    }
    return -1;
}

/* Reads what the server answers until it closes; true when it sent an ABORT naming why. */
static int answer_mentions(int fd, const char *needle)
{
    char buf[4096];
    size_t n = 0;
    double end = dt_clock_now() + 3.0;
    while (n < sizeof buf - 1 && dt_clock_now() < end) {
        ssize_t k = recv(fd, buf + n, sizeof buf - 1 - n, MSG_DONTWAIT);
        if (k == 0)
            break;
        if (k > 0)
            n += (size_t)k;
        else
            usleep(2000);
    }
    for (size_t i = 0; i < n; i++)
        if (buf[i] == 0)
            buf[i] = ' ';
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

typedef struct {
    uint16_t port;
    uint64_t cluster_id;
    int answered; /* how many refusals carried the expected reason */
} stranger_ctx;

static void *stranger(void *arg)
{
    stranger_ctx *s = arg;
    uint8_t hc[DT_HELLO_BYTES], reply[DT_HELLO_BYTES + DT_MAC_BYTES], mac[DT_MAC_BYTES];
    dt_hello h = {DT_WIRE_VERSION, s->cluster_id, 1, 1, {0}};
    int fd;
    /* A port scan: connect and close. */
    if ((fd = connect_retry(s->port)) >= 0)
        dt_sock_close(fd);
    /* Garbage. */
    if ((fd = connect_retry(s->port)) >= 0) {
        char junk[DT_HELLO_BYTES];
        memset(junk, 'G', sizeof junk);
        dt_sock_send_all(fd, junk, sizeof junk, dt_clock_now() + 1, "server");
        s->answered += answer_mentions(fd, "not a dtrain peer");
        dt_sock_close(fd);
    }
    /* Another protocol version. */
    if ((fd = connect_retry(s->port)) >= 0) {
        dt_hello_encode(&h, hc);
        hc[8] = 7;
        dt_sock_send_all(fd, hc, sizeof hc, dt_clock_now() + 1, "server");
        s->answered += answer_mentions(fd, "protocol version 7");
        dt_sock_close(fd);
    }
    /* Another cluster. */
    if ((fd = connect_retry(s->port)) >= 0) {
        dt_hello other = h;
        other.cluster_id ^= 1;
        dt_hello_encode(&other, hc);
        dt_sock_send_all(fd, hc, sizeof hc, dt_clock_now() + 1, "server");
        s->answered += answer_mentions(fd, "another cluster");
        dt_sock_close(fd);
    }
    /* The right hello, the wrong secret. */
    if ((fd = connect_retry(s->port)) >= 0) {
        dt_hello_encode(&h, hc);
        dt_sock_send_all(fd, hc, sizeof hc, dt_clock_now() + 1, "server");
        if (dt_sock_recv_all(fd, reply, sizeof reply, dt_clock_now() + 2, "server") == DT_OK) {
            dt_hello_mac((const uint8_t *)"not the secret!!", 16, 'C', hc, reply, mac);
            dt_sock_send_all(fd, mac, sizeof mac, dt_clock_now() + 1, "server");
            s->answered += answer_mentions(fd, "wrong cluster secret");
        }
        dt_sock_close(fd);
    }
    /* An oversized claim: a frame header announcing 1 TiB where the hello belongs. */
    if ((fd = connect_retry(s->port)) >= 0) {
        uint8_t fh[DT_HELLO_BYTES] = {0};
        dt_frame_hdr big = {DT_FRAME_DATA, 1, 1, (uint64_t)1 << 40};
        dt_frame_encode(&big, fh);
        dt_sock_send_all(fd, fh, sizeof fh, dt_clock_now() + 1, "server");
        s->answered += answer_mentions(fd, "not a dtrain peer");
        dt_sock_close(fd);
    }
    return NULL;
}

static dt_status one_allreduce(rank_ctx *r, dt_comm *c)
{
    float v[3] = {1, 2, (float)c->rank};
    dt_status st = dt_comm_allreduce(c, v, 3, DT_REDUCE_SUM, DT_WIRE_F32);
    r->mismatches = st == DT_OK && !(v[0] == (float)c->size && v[2] == (float)(c->size * (c->size - 1) / 2));
    return st;
}

/* Rank 0 waits for its peers while a stranger tries every wrong way in; then the others start.
 * Each stranger is refused with its reason logged, and the cluster still completes its work. */
TEST(net_handshake_refusals_keep_the_cluster_running)
{
    static uint16_t ports[3];
    free_ports(3, ports);
    rank_ctx ctx[3];
    FILE *log = tmpfile();
    for (int i = 0; i < 3; i++) {
        memset(&ctx[i], 0, sizeof ctx[i]);
        ctx[i].n = 3, ctx[i].index = i, ctx[i].ports = ports, ctx[i].log = log;
        ctx[i].secret = "the right secret, long enough";
        ctx[i].run = one_allreduce;
    }
    char json[1024];
    cluster_json(3, ports, 0, json, sizeof json);
    dt_cluster cl;
    CHECK_OK(dt_cluster_parse(json, &cl));
    stranger_ctx sc = {ports[0], cl.id, 0};
    dt_cluster_free(&cl);
    pthread_t th[3], st;
    pthread_create(&th[0], NULL, rank_main, &ctx[0]);
    pthread_create(&st, NULL, stranger, &sc);
    pthread_join(st, NULL);
    for (int i = 1; i < 3; i++)
        pthread_create(&th[i], NULL, rank_main, &ctx[i]);
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(ctx[i].st == DT_OK && ctx[i].mismatches == 0, "rank %d: %s", i, ctx[i].msg);
    }
    CHECK_MSG(sc.answered == 5, "%d of 5 refusals said why", sc.answered);
    /* The log names each refused connection. */
    char text[8192] = "";
    rewind(log);
    size_t n = fread(text, 1, sizeof text - 1, log);
    text[n] = '\0';
    int refused = 0;
    for (const char *p = text; (p = strstr(p, "refused the connection from 127.0.0.1:")); p++)
        refused++;
    CHECK_MSG(refused == 6, "%d refusals logged:\n%s", refused, text);
    CHECK(strstr(text, "does not know the cluster secret") != NULL);
    CHECK(strstr(text, "belongs to another cluster") != NULL);
    CHECK(strstr(text, "closed the connection") != NULL);
    fclose(log);
}

static dt_status nothing(rank_ctx *r, dt_comm *c)
{
    (void)r, (void)c;
    return DT_OK;
}

/* A task with the wrong secret is refused and says so; the others time out naming it. */
TEST(net_wrong_secret_is_named_on_both_sides)
{
    rank_ctx proto = {0}, ctx[3];
    proto.secret = "the right secret, long enough";
    proto.connect_timeout = 2.0;
    proto.log = tmpfile();
    proto.run = nothing;
    static uint16_t ports[3];
    free_ports(3, ports);
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        ctx[i] = proto;
        ctx[i].n = 3, ctx[i].index = i, ctx[i].ports = ports;
        if (i == 2)
            ctx[i].secret = "a different secret, also long";
        pthread_create(&th[i], NULL, rank_main, &ctx[i]);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    CHECK(ctx[2].st == DT_ERR_AUTH);
    CHECK_MSG(strstr(ctx[2].msg, "does not know the cluster secret") ||
              strstr(ctx[2].msg, "refused this task"), "%s", ctx[2].msg);
    for (int i = 0; i < 2; i++) {
        CHECK_MSG(ctx[i].st == DT_ERR_TIMEOUT && strstr(ctx[i].msg, "worker:2 (127.0.0.1:"),
                  "rank %d: %s", i, ctx[i].msg);
        CHECK(ctx[i].seconds < 10.0);
    }
    fclose(proto.log);
}

static dt_status silent_rank_1(rank_ctx *r, dt_comm *c)
{
    if (c->rank == 1) {
        usleep(1500000); /* never enters the all-reduce */
        return DT_OK;
    }
    return one_allreduce(r, c);
}

TEST(net_timeout_names_the_silent_peer)
{
    for (int tcp_only = 0; tcp_only < 2; tcp_only++) {
        rank_ctx proto = {0}, ctx[2];
        proto.timeout = 0.5;
        proto.tcp_only = tcp_only;
        proto.log = tmpfile();
        proto.run = silent_rank_1;
        run_cluster(2, &proto, ctx);
        CHECK_MSG(ctx[0].st == DT_ERR_TIMEOUT, "tcp only %d: %s", tcp_only, ctx[0].msg);
        CHECK_MSG(strstr(ctx[0].msg, "all-reduce #1: timed out after") &&
                  strstr(ctx[0].msg, "waiting for worker:1 (127.0.0.1:"), "tcp only %d: %s",
                  tcp_only, ctx[0].msg);
        fclose(proto.log);
    }
}

static dt_status rank_2_leaves(rank_ctx *r, dt_comm *c)
{
    dt_status st = one_allreduce(r, c);
    if (st || c->rank == 2)
        return st; /* rank 2 returns: its connections close */
    /* A large all-reduce takes the ring: rank 1 waits on rank 0, which waits on rank 2. */
    static float big[MAX_RANKS][1 << 16];
    st = dt_comm_allreduce(c, big[c->rank], 1 << 16, DT_REDUCE_SUM, DT_WIRE_F32);
    if (st == DT_OK)
        return dt_error(DT_ERR_INVALID, "the all-reduce succeeded without rank 2");
    /* Broken after the failure: the next call fails at once with the same error. */
    char first[1024];
    snprintf(first, sizeof first, "%s", dt_last_error());
    dt_status again = dt_comm_barrier(c);
    r->mismatches += again != st || strcmp(first, dt_last_error()) != 0;
    return st;
}

TEST(net_a_departed_peer_is_named_by_every_rank)
{
    for (int tcp_only = 0; tcp_only < 2; tcp_only++) {
        rank_ctx proto = {0}, ctx[3];
        proto.timeout = 30.0;
        proto.tcp_only = tcp_only;
        proto.log = tmpfile();
        proto.run = rank_2_leaves;
        run_cluster(3, &proto, ctx);
        CHECK_MSG(ctx[2].st == DT_OK, "%s", ctx[2].msg);
        for (int i = 0; i < 2; i++) {
            CHECK_MSG(ctx[i].st == DT_ERR_PEER && strstr(ctx[i].msg, "worker:2 (127.0.0.1:"),
                      "tcp only %d, rank %d: %s", tcp_only, i, ctx[i].msg);
            CHECK_MSG(ctx[i].seconds < 10.0, "tcp only %d, rank %d took %.1f s", tcp_only, i,
                      ctx[i].seconds);
            CHECK(ctx[i].mismatches == 0);
        }
        fclose(proto.log);
    }
}

TEST(net_non_loopback_cluster_needs_a_secret)
{
    dt_cluster cl;
    CHECK_OK(dt_cluster_parse("{\"cluster\": {\"worker\": [\"10.1.2.3:2222\", \"10.1.2.4:2222\"]}, "
                              "\"task\": {\"type\": \"worker\", \"index\": 0}}", &cl));
    dt_tcp_options o;
    dt_tcp_options_default(&o);
    dt_comm *c;
    CHECK_ERR(dt_comm_tcp(&cl, &o, &c), DT_ERR_AUTH, "--insecure");
    dt_cluster_free(&cl);
}

/* Without a secret a loopback cluster is refused too (any local user could join it), naming
 * --insecure; with insecure it runs, and says its traffic is unauthenticated. */
TEST(net_loopback_cluster_without_secret_needs_insecure)
{
    rank_ctx proto = {0}, ctx[2];
    proto.run = one_allreduce;
    proto.demand_secret = true;
    proto.connect_timeout = 2;
    run_cluster(2, &proto, ctx);
    for (int i = 0; i < 2; i++)
        CHECK_MSG(ctx[i].st == DT_ERR_AUTH && strstr(ctx[i].msg, "no secret") &&
                  strstr(ctx[i].msg, "--insecure"), "rank %d: %d %s", i, (int)ctx[i].st,
                  ctx[i].msg);
    proto.demand_secret = false;
    proto.log = tmpfile();
    run_cluster(2, &proto, ctx);
    for (int i = 0; i < 2; i++)
        CHECK_MSG(ctx[i].st == DT_OK && ctx[i].mismatches == 0, "rank %d: %s", i, ctx[i].msg);
    char text[4096] = "";
    rewind(proto.log);
    text[fread(text, 1, sizeof text - 1, proto.log)] = '\0';
    CHECK_MSG(strstr(text, "no cluster secret: traffic between the tasks is unauthenticated"), "%s",
              text);
    fclose(proto.log);
}
