/* The transport's layers on their own: every task type of a cluster is addressable and named; a
 * ps and an evaluator task complete the handshake with a listener whose policy admits them and
 * are refused by one that does not; a listener kept open admits a task that connects again
 * later, as a restarted task would; a wrong secret and garbage are refused while the listener
 * carries on. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../src/core/clock.h"
#include "dtrain/cluster.h"
#include "../src/net/conn.h"
#include "../src/net/dial.h"
#include "../src/net/handshake.h"
#include "../src/net/listener.h"
#include "../src/net/sock.h"
#include "test.h"

static const char *const tf_config =
    "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\"],"
    " \"ps\": [\"127.0.0.1:3\", \"127.0.0.1:4\"], \"evaluator\": [\"127.0.0.1:5\"]},"
    " \"task\": {\"type\": \"chief\", \"index\": 0}}";

static const uint8_t secret[] = "a cluster secret of 32 bytes....";

TEST(cluster_names_and_ranks_every_task_type)
{
    dt_cluster c;
    CHECK_OK(dt_cluster_parse(tf_config, &c));
    char name[300];
    dt_cluster_task_name(&c, DT_JOB_PS, 1, name, sizeof name);
    CHECK_MSG(strcmp(name, "ps:1 (127.0.0.1:4)") == 0, "%s", name);
    dt_cluster_task_name(&c, DT_JOB_EVALUATOR, 0, name, sizeof name);
    CHECK_MSG(strcmp(name, "evaluator:0 (127.0.0.1:5)") == 0, "%s", name);
    CHECK(dt_cluster_rank_of(&c, DT_JOB_CHIEF, 0) == 0);
    CHECK(dt_cluster_rank_of(&c, DT_JOB_WORKER, 0) == 1);
    CHECK(dt_cluster_rank_of(&c, DT_JOB_PS, 0) == -1);
    CHECK(dt_cluster_rank_of(&c, DT_JOB_EVALUATOR, 0) == -1);
    CHECK(dt_cluster_rank_of(&c, DT_JOB_WORKER, 1) == -1);
    dt_cluster_free(&c);
}

/* Admits ps and evaluator tasks only, and counts the connections it was handed. */
typedef struct {
    pthread_mutex_t mu;
    int admitted;
    dt_job last_job;
    int last_index;
    bool refuse_all;
} server;

static const char *servers_policy(void *ctx, dt_job job, int index, bool authenticated)
{
    server *s = ctx;
    (void)index, (void)authenticated;
    if (s->refuse_all || (job != DT_JOB_PS && job != DT_JOB_EVALUATOR))
        return "is not a task that connects to this one";
    return NULL;
}

static void on_peer(void *ctx, int fd, dt_job job, int index, const dt_session_keys *keys)
{
    (void)keys;
    server *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->admitted++;
    s->last_job = job, s->last_index = index;
    pthread_mutex_unlock(&s->mu);
    dt_sock_close(fd);
}

static dt_handshake_id id_of(const dt_cluster *c, dt_job job, int index, const uint8_t *key)
{
    return (dt_handshake_id){key, key ? sizeof secret - 1 : 0, c->id, job, index};
}

/* One task's connection and handshake to the listener on port. */
static dt_status connect_as(const dt_cluster *c, uint16_t port, dt_job job, int index,
                            const uint8_t *key)
{
    int fd;
    double d = dt_clock_now() + 5.0;
    dt_status st = dt_sock_connect("127.0.0.1", port, d, &fd);
    if (st)
        return st;
    dt_handshake_id me = id_of(c, job, index, key);
    st = dt_handshake_connect(&me, fd, DT_JOB_CHIEF, 0, "chief:0", d, NULL);
    dt_sock_close(fd);
    return st;
}

static int admitted(server *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->admitted;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* The callback runs on the listener's thread right after the client's handshake ends. */
static bool wait_admitted(server *s, int n)
{
    for (int i = 0; i < 200 && admitted(s) < n; i++)
        usleep(10000);
    return admitted(s) == n;
}

TEST(listener_admits_ps_and_evaluator_tasks_its_policy_allows_and_stays_open)
{
    dt_cluster c;
    CHECK_OK(dt_cluster_parse(tf_config, &c));
    server s = {.mu = PTHREAD_MUTEX_INITIALIZER};
    dt_listener_options o = {.me = id_of(&c, DT_JOB_CHIEF, 0, secret),
                             .policy = servers_policy, .policy_ctx = &s,
                             .on_peer = on_peer, .ctx = &s, .handshake_timeout = 5.0};
    char *log_text = NULL;
    size_t log_n = 0;
    o.log = open_memstream(&log_text, &log_n);
    dt_listener *l;
    CHECK_OK(dt_listener_start("127.0.0.1", 0, &o, &l));
    uint16_t port = dt_listener_port(l);
    CHECK(port > 0);
    CHECK_OK(connect_as(&c, port, DT_JOB_PS, 1, secret));
    CHECK(wait_admitted(&s, 1) && s.last_job == DT_JOB_PS && s.last_index == 1);
    CHECK_OK(connect_as(&c, port, DT_JOB_EVALUATOR, 0, secret));
    CHECK(wait_admitted(&s, 2) && s.last_job == DT_JOB_EVALUATOR);
    /* A worker is not admitted by this policy, and is told why. */
    CHECK_ERR(connect_as(&c, port, DT_JOB_WORKER, 0, secret), DT_ERR_AUTH,
              "chief:0 refused this task: it is not a task that connects to this one");
    /* A wrong secret, then garbage: refused, and the listener carries on. */
    static const uint8_t other[] = "another secret of 32 bytes......";
    CHECK_ERR(connect_as(&c, port, DT_JOB_PS, 0, other), DT_ERR_AUTH,
              "chief:0 does not know the cluster secret");
    int fd;
    CHECK_OK(dt_sock_connect("127.0.0.1", port, dt_clock_now() + 5.0, &fd));
    uint8_t junk[64];
    memset(junk, 'x', sizeof junk);
    CHECK_OK(dt_sock_send_all(fd, junk, sizeof junk, dt_clock_now() + 5.0, "listener"));
    dt_sock_close(fd);
    /* Still open after all that: the same ps task connects again, as after a restart. */
    CHECK_OK(connect_as(&c, port, DT_JOB_PS, 1, secret));
    CHECK(wait_admitted(&s, 3));
    char msg[64];
    CHECK(dt_listener_failed(l, msg, sizeof msg) == DT_OK);
    dt_listener_stop(l);
    fclose(o.log);
    CHECK_MSG(log_text && strstr(log_text, "worker:0 is not a task that connects to this one") &&
                  strstr(log_text, "not a dtrain peer"),
              "log: %s", log_text ? log_text : "");
    free(log_text);
    /* Stopped: no one is accepted any more. */
    CHECK(connect_as(&c, port, DT_JOB_PS, 1, secret) != DT_OK);
    dt_cluster_free(&c);
}

/* A connection from source address `from` to 127.0.0.1:port that says nothing; -1 on failure. */
static int silent_connection(const char *from, uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in me = {.sin_family = AF_INET}, to = {.sin_family = AF_INET,
                                                           .sin_port = htons(port)};
    inet_pton(AF_INET, from, &me.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof me) != 0 ||
        connect(fd, (struct sockaddr *)&to, sizeof to) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* 200 connections that never say hello, from another address, with a handshake deadline of a
 * minute: a task still completes its handshake at once, since handshakes run side by side and
 * the strangers' address holds at most its share of them. (A listener that ran handshakes one
 * after the other kept it out for 200 minutes.) */
TEST(listener_admits_a_task_beside_200_silent_connections)
{
    dt_cluster c;
    CHECK_OK(dt_cluster_parse(tf_config, &c));
    server s = {.mu = PTHREAD_MUTEX_INITIALIZER};
    dt_listener_options o = {.me = id_of(&c, DT_JOB_CHIEF, 0, secret),
                             .policy = servers_policy, .policy_ctx = &s,
                             .on_peer = on_peer, .ctx = &s, .handshake_timeout = 60.0};
    char *log_text = NULL;
    size_t log_n = 0;
    o.log = open_memstream(&log_text, &log_n);
    dt_listener *l;
    CHECK_OK(dt_listener_start("127.0.0.1", 0, &o, &l));
    uint16_t port = dt_listener_port(l);
    int silent[200], opened = 0;
    for (int i = 0; i < 200; i++)
        if ((silent[opened] = silent_connection("127.0.0.2", port)) >= 0)
            opened++;
    CHECK_MSG(opened == 200, "%d of 200 silent connections opened", opened);
    usleep(200000); /* the listener has accepted them (or closed those past its bound) */
    double t0 = dt_clock_now();
    CHECK_OK(connect_as(&c, port, DT_JOB_PS, 0, secret));
    CHECK(wait_admitted(&s, 1));
    double took = dt_clock_now() - t0;
    CHECK_MSG(took < 5.0, "admitted after %.1f s", took);
    for (int i = 0; i < opened; i++)
        close(silent[i]);
    /* The stop ends the handshakes still waiting, well before their minute. */
    t0 = dt_clock_now();
    dt_listener_stop(l);
    CHECK_MSG(dt_clock_now() - t0 < 5.0, "stopped after %.1f s", dt_clock_now() - t0);
    fclose(o.log);
    CHECK_MSG(log_text && strstr(log_text, "too many handshakes under way") &&
                  strstr(log_text, "127.0.0.2"),
              "log: %s", log_text ? log_text : "");
    free(log_text);
    dt_cluster_free(&c);
}

/* An impostor holds the chief's port (a local user's listener, bound while the chief restarts):
 * its refusal does not end a task's dial, which tries again until the chief is back. */
typedef struct {
    dt_listener *impostor;
    dt_listener_options real;
    uint16_t port;
    dt_listener *back;
} swap;

static void *chief_comes_back(void *arg)
{
    swap *w = arg;
    usleep(700000);
    dt_listener_stop(w->impostor);
    if (dt_listener_start("127.0.0.1", w->port, &w->real, &w->back) != DT_OK)
        w->back = NULL;
    return NULL;
}

TEST(dial_outlasts_an_impostor_on_the_port)
{
    dt_cluster c;
    CHECK_OK(dt_cluster_parse(tf_config, &c));
    static const uint8_t other[] = "an impostor's secret of 32 byte";
    server fake = {.mu = PTHREAD_MUTEX_INITIALIZER}, real = {.mu = PTHREAD_MUTEX_INITIALIZER};
    FILE *quiet = tmpfile();
    dt_listener_options io = {.me = id_of(&c, DT_JOB_CHIEF, 0, other), .policy = servers_policy,
                              .policy_ctx = &fake, .on_peer = on_peer, .ctx = &fake,
                              .log = quiet};
    swap w = {.real = {.me = id_of(&c, DT_JOB_CHIEF, 0, secret), .policy = servers_policy,
                       .policy_ctx = &real, .on_peer = on_peer, .ctx = &real, .log = quiet}};
    CHECK_OK(dt_listener_start("127.0.0.1", 0, &io, &w.impostor));
    w.port = dt_listener_port(w.impostor);
    pthread_t t;
    pthread_create(&t, NULL, chief_comes_back, &w);
    dt_handshake_id me = id_of(&c, DT_JOB_PS, 0, secret);
    dt_addr a = {.host = "127.0.0.1", .port = w.port};
    int fd = -1;
    dt_status st = dt_dial_task(&me, &a, DT_JOB_CHIEF, 0, "chief:0", 2.0, dt_clock_now() + 10.0,
                                &fd, NULL);
    CHECK_MSG(st == DT_OK, "%s", dt_last_error());
    if (fd >= 0)
        dt_sock_close(fd);
    pthread_join(t, NULL);
    CHECK(w.back && wait_admitted(&real, 1));
    dt_listener_stop(w.back);
    fclose(quiet);
    dt_cluster_free(&c);
}

TEST(conn_frames_round_trip_and_an_abort_names_its_reason)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    dt_frame_hdr h = {DT_FRAME_DATA, 3, 9, 5}, got;
    double d = dt_clock_now() + 5.0;
    CHECK_OK(dt_conn_send_frame(sv[0], "a", &h, "hello", d));
    char buf[16];
    CHECK_OK(dt_conn_recv_frame(sv[1], "b", 64, d, &got, buf, sizeof buf));
    CHECK(got.type == DT_FRAME_DATA && got.op == 3 && got.seq == 9 && got.n_bytes == 5 &&
          memcmp(buf, "hello", 5) == 0);
    /* Larger than the reader takes: refused before it is read. */
    CHECK_OK(dt_conn_send_frame(sv[0], "a", &h, "hello", d));
    CHECK_ERR(dt_conn_recv_frame(sv[1], "b", 4, d, &got, buf, sizeof buf), DT_ERR_PEER,
              "b sent a frame of 5 bytes, more than the 4 expected");
    dt_sock_close(sv[0]);
    dt_sock_close(sv[1]);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    dt_conn_refuse(sv[0], "the chief stopped");
    CHECK_ERR(dt_conn_recv_frame(sv[1], "chief:0", 64, d, &got, buf, sizeof buf), DT_ERR_PEER,
              "chief:0 stopped: the chief stopped");
    dt_sock_close(sv[0]);
    dt_sock_close(sv[1]);
}

/* A peer whose name does not resolve (yet: a pod not scheduled) is asked for again until the
 * deadline, then named as transient (DT_ERR_UNAVAILABLE: the operator's retry may find it). */
TEST(dial_retries_a_name_that_does_not_resolve_until_the_deadline)
{
    dt_cluster c;
    CHECK_OK(dt_cluster_parse("{\"cluster\": {\"worker\": [\"127.0.0.1:1\", \"127.0.0.1:2\"]}, "
                              "\"task\": {\"type\": \"worker\", \"index\": 0}}", &c));
    dt_handshake_id me = id_of(&c, DT_JOB_WORKER, 0, secret);
    dt_addr a = {.host = "no-such-host.invalid", .port = 2222};
    int fd = -1;
    double t0 = dt_clock_now();
    CHECK_ERR(dt_dial_task(&me, &a, DT_JOB_WORKER, 1, "worker:1 (no-such-host.invalid:2222)", 1.0,
                           t0 + 2.0, &fd, NULL),
              DT_ERR_UNAVAILABLE, "could not connect to worker:1 (no-such-host.invalid:2222) "
              "within 2 s: no-such-host.invalid does not resolve");
    CHECK_MSG(dt_clock_now() - t0 >= 1.9, "gave up after %.2f s", dt_clock_now() - t0);
    CHECK(fd == -1);
    dt_cluster_free(&c);
}
