/* The parameter server's messaging, measured: request/reply round trips over the ZeroMQ links
 * (src/ps/zlink.c) with CURVE on and off, against plain TCP sockets doing the same exchange
 * (a length-prefixed write, the same bytes back), on loopback, for a small request (a PING) and
 * for replies of 1,000 and 40,000 rows of 33 floats (fm_w + fm_v rows: 40,000 is about the
 * unique rows of a 1,024-example DeepFM batch; 130 KB and 5.3 MB). Prints p50 and p99 round trips
 * and MB/s.
 * usage: build/bench/zlink_bench [--reps N] */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../src/ps/zlink.h"
#include "../src/core/clock.h"

static const char secret[] = "bench secret";

typedef struct {
    dt_zlink *server;
    int tcp_fd;
    size_t reply_bytes;
    int reps;
} server_ctx;

static void *zserver(void *arg)
{
    server_ctx *s = arg;
    dt_psbuf in = {0}, out = {0};
    out.data = calloc(1, s->reply_bytes), out.len = out.cap = s->reply_bytes;
    for (int i = 0; i < s->reps;) {
        dt_zpeer from;
        if (dt_zlink_receive(s->server, 5.0, &from, &in) != DT_OK)
            break;
        dt_zlink_reply(s->server, &from, &out);
        i++;
    }
    dt_psbuf_free(&in), dt_psbuf_free(&out);
    return NULL;
}

static int full_io(int fd, void *buf, size_t n, int writing)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t k = writing ? write(fd, p, n) : read(fd, p, n);
        if (k <= 0)
            return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

static void *tserver(void *arg)
{
    server_ctx *s = arg;
    int fd = accept(s->tcp_fd, NULL, NULL);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    uint8_t *buf = calloc(1, s->reply_bytes + 64);
    for (int i = 0; i < s->reps; i++) {
        uint64_t n;
        if (full_io(fd, &n, 8, 0) || full_io(fd, buf, n, 0))
            break;
        n = s->reply_bytes;
        if (full_io(fd, &n, 8, 1) || full_io(fd, buf, n, 1))
            break;
    }
    free(buf);
    close(fd);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, size_t reply, double *t, int reps)
{
    qsort(t, (size_t)reps, sizeof *t, cmp);
    double sum = 0;
    for (int i = 0; i < reps; i++)
        sum += t[i];
    printf("%-34s %9zu B  p50 %8.1f us  p99 %8.1f us  %8.0f MB/s\n", what, reply,
           t[reps / 2] * 1e6, t[reps * 99 / 100] * 1e6, (double)reply * reps / sum / 1e6);
}

static void bench_zmq(bool curve, size_t reply, int reps)
{
    server_ctx s = {.reply_bytes = reply, .reps = reps};
    size_t slen = curve ? sizeof secret - 1 : 0;
    if (dt_zlink_server("tcp://127.0.0.1:*", secret, slen, &s.server) != DT_OK)
        return;
    pthread_t t;
    pthread_create(&t, NULL, zserver, &s);
    dt_zlink *c = NULL;
    dt_zlink_client(dt_zlink_endpoint(s.server), "ps:0", secret, slen, 0, &c);
    dt_psbuf req = {0}, rep = {0};
    dt_psmsg ping = {.type = DT_PSMSG_PING};
    dt_psmsg_encode(&ping, NULL, NULL, &req);
    double *times = malloc(sizeof(double) * (size_t)reps);
    for (int i = 0; i < reps; i++) {
        double t0 = dt_clock_now();
        if (dt_zlink_request(c, &req, 5.0, &rep) != DT_OK) {
            fprintf(stderr, "%s\n", dt_last_error());
            break;
        }
        times[i] = dt_clock_now() - t0;
    }
    pthread_join(t, NULL);
    report(curve ? "zeromq ROUTER/DEALER, CURVE" : "zeromq ROUTER/DEALER, plain", reply, times,
           reps);
    free(times);
    dt_psbuf_free(&req), dt_psbuf_free(&rep);
    dt_zlink_close(c), dt_zlink_close(s.server);
}

static void bench_tcp(size_t reply, int reps)
{
    server_ctx s = {.reply_bytes = reply, .reps = reps};
    s.tcp_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    bind(s.tcp_fd, (struct sockaddr *)&a, sizeof a);
    listen(s.tcp_fd, 1);
    getsockname(s.tcp_fd, (struct sockaddr *)&a, &al);
    pthread_t t;
    pthread_create(&t, NULL, tserver, &s);
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    connect(fd, (struct sockaddr *)&a, sizeof a);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    uint8_t *buf = calloc(1, reply + 64);
    double *times = malloc(sizeof(double) * (size_t)reps);
    for (int i = 0; i < reps; i++) {
        double t0 = dt_clock_now();
        uint64_t n = 28;
        if (full_io(fd, &n, 8, 1) || full_io(fd, buf, n, 1) || full_io(fd, &n, 8, 0) ||
            full_io(fd, buf, n, 0))
            break;
        times[i] = dt_clock_now() - t0;
    }
    pthread_join(t, NULL);
    report("plain TCP, length-prefixed", reply, times, reps);
    free(times), free(buf);
    close(fd), close(s.tcp_fd);
}

int main(int argc, char **argv)
{
    int reps = 2000;
    if (argc == 3 && strcmp(argv[1], "--reps") == 0)
        reps = atoi(argv[2]);
    if (reps < 100)
        reps = 100;
    const size_t sizes[3] = {28, 28 + 12 + 1000 * 33 * 4, 28 + 12 + 40000 * 33 * 4};
    for (int k = 0; k < 3; k++) {
        int r = k == 2 ? reps / 10 : reps;
        bench_tcp(sizes[k], r);
        bench_zmq(false, sizes[k], r);
        bench_zmq(true, sizes[k], r);
    }
    return 0;
}
