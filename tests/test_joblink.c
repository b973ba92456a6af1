/* The parameter-server job's control links on loopback: a worker thread serving the
 * coordinator's questions through dt_job_server, the coordinator asking through dt_job_link.
 * Every question and its typed answer; a worker's failure reaching the coordinator with its
 * status and text, then the link kept until STOP; a request that is no question of a worker's
 * answered with an error while the worker goes on; an absent worker unheard within the
 * deadline. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../src/core/clock.h"
#include "../src/ps/joblink.h"
#include "../src/ps/psmsg.h"
#include "../src/ps/zlink.h"
#include "test.h"

static const char secret[] = "the job's secret";

typedef struct {
    dt_job_server *s;
    bool fail_runs;          /* answer a RUN with an error */
    int asked[5];            /* questions seen, by kind */
    dt_job_run last_run;
    uint16_t ports[3];
    uint32_t n_ports;
    dt_status ended;         /* how serving ended */
} worker_ctx;

static const float dense[5] = {0.5f, -1.0f, 2.25f, 3.0f, -0.125f};

/* A worker: answers until STOP (or 10 s of silence). */
static void *serve(void *arg)
{
    worker_ctx *w = arg;
    double until = dt_clock_now() + 10.0;
    while (dt_clock_now() < until) {
        dt_job_ask a;
        dt_status st = dt_job_server_next(w->s, 0.2, "chief:0", &a);
        if (st == DT_END)
            continue;
        if (st) {
            w->ended = st;
            return NULL;
        }
        w->asked[a.kind]++;
        switch (a.kind) {
        case DT_JOB_ASK_PING:
            st = dt_job_server_ok(w->s);
            break;
        case DT_JOB_ASK_STOP:
            w->ended = dt_job_server_ok(w->s);
            return NULL;
        case DT_JOB_ASK_RUN:
            w->last_run = a.run;
            if (w->fail_runs) {
                dt_job_server_fail(w->s, DT_ERR_NUMERIC, "step 7: the loss is nan", "chief:0",
                                   10.0);
                w->ended = DT_ERR_NUMERIC;
                return NULL;
            }
            st = dt_job_server_result(w->s, &(dt_job_result){.steps = a.run.steps, .done = true,
                                      .rows = 64, .correct = 40, .loss = 12.5});
            break;
        case DT_JOB_ASK_RING:
            if (a.n_ports == 0) {
                st = dt_job_server_port(w->s, 40123);
                break;
            }
            w->n_ports = a.n_ports;
            for (uint32_t i = 0; i < a.n_ports && i < 3; i++)
                w->ports[i] = dt_job_ask_port(&a, i);
            st = dt_job_server_ok(w->s);
            break;
        case DT_JOB_ASK_DENSE:
            st = dt_job_server_dense(w->s, dense, 5); /* all it has, whatever was asked */
            break;
        }
        if (st) {
            w->ended = st;
            return NULL;
        }
    }
    w->ended = DT_ERR_TIMEOUT;
    return NULL;
}

/* A worker serving on a free loopback port, on its own thread t. */
static bool start_worker(worker_ctx *w, pthread_t *t)
{
    if (dt_job_server_open("tcp://127.0.0.1:*", secret, sizeof secret - 1, &w->s) != DT_OK)
        return false;
    pthread_create(t, NULL, serve, w);
    return true;
}

TEST(joblink_every_question_and_its_answer)
{
    worker_ctx w = {0};
    pthread_t t;
    CHECK_MSG(start_worker(&w, &t), "%s", dt_last_error());
    if (!w.s)
        return;
    dt_job_link *l = NULL;
    CHECK_OK(dt_job_link_open(dt_job_server_endpoint(w.s), "worker:1", secret, sizeof secret - 1,
                              0, &l));
    CHECK_OK(dt_job_link_ping(l, 5.0));
    dt_job_result r = {0};
    bool unheard = true;
    CHECK_OK(dt_job_link_run(l, &(dt_job_run){.first = 101, .steps = 4, .position = 33,
                             .shard = 2}, 5.0, &r, &unheard));
    CHECK(!unheard);
    CHECK(r.steps == 4 && r.done && r.rows == 64 && r.correct == 40 && r.loss == 12.5);
    uint16_t port = 0;
    CHECK_OK(dt_job_link_ring_port(l, 5.0, &port));
    CHECK(port == 40123);
    CHECK_OK(dt_job_link_ring(l, (const uint16_t[]){40123, 40124, 1}, 3, 5.0));
    float got[5] = {0};
    CHECK_OK(dt_job_link_pull_dense(l, got, 5, 5.0));
    CHECK(memcmp(got, dense, sizeof dense) == 0);
    /* The worker answers with more values than were asked for: named. */
    CHECK_ERR(dt_job_link_pull_dense(l, got, 4, 5.0), DT_ERR_PEER, "worker:1");
    CHECK_OK(dt_job_link_stop(l, 5.0));
    pthread_join(t, NULL);
    CHECK(w.ended == DT_OK);
    CHECK(w.last_run.first == 101 && w.last_run.steps == 4 && w.last_run.position == 33 &&
          w.last_run.shard == 2);
    CHECK(w.n_ports == 3 && w.ports[0] == 40123 && w.ports[1] == 40124 && w.ports[2] == 1);
    CHECK(w.asked[DT_JOB_ASK_PING] == 1 && w.asked[DT_JOB_ASK_RUN] == 1 &&
          w.asked[DT_JOB_ASK_RING] == 2 && w.asked[DT_JOB_ASK_DENSE] == 2 &&
          w.asked[DT_JOB_ASK_STOP] == 1);
    dt_job_link_close(l);
    dt_job_server_close(w.s);
}

/* A worker whose RUN fails: the coordinator hears its status and text (the worker answered: not
 * unheard), and the worker keeps the link, answering PING and repeating its error, until STOP. */
TEST(joblink_a_failed_run_reaches_the_coordinator_and_waits_for_stop)
{
    worker_ctx w = {.fail_runs = true};
    pthread_t t;
    CHECK_MSG(start_worker(&w, &t), "%s", dt_last_error());
    if (!w.s)
        return;
    dt_job_link *l = NULL;
    CHECK_OK(dt_job_link_open(dt_job_server_endpoint(w.s), "worker:0", secret, sizeof secret - 1,
                              0, &l));
    dt_job_result r;
    bool unheard = true;
    CHECK_ERR(dt_job_link_run(l, &(dt_job_run){.first = 1, .steps = 10}, 5.0, &r, &unheard),
              DT_ERR_NUMERIC, "worker:0: step 7: the loss is nan");
    CHECK(!unheard);
    CHECK_OK(dt_job_link_ping(l, 5.0));
    CHECK_ERR(dt_job_link_run(l, &(dt_job_run){.first = 11, .steps = 10}, 5.0, &r, &unheard),
              DT_ERR_NUMERIC, "the loss is nan");
    CHECK_OK(dt_job_link_stop(l, 5.0));
    pthread_join(t, NULL);
    CHECK(w.ended == DT_ERR_NUMERIC && w.asked[DT_JOB_ASK_RUN] == 1);
    dt_job_link_close(l);
    dt_job_server_close(w.s);
}

/* A peer holding the secret that sends a ps request (PULL_ROWS) or bytes that do not decode to
 * a worker's control socket: the first is answered with an error naming what a worker takes,
 * both are dropped, and the worker goes on answering the coordinator. */
TEST(joblink_a_request_that_is_no_question_is_refused_and_the_worker_goes_on)
{
    worker_ctx w = {0};
    pthread_t t;
    CHECK_MSG(start_worker(&w, &t), "%s", dt_last_error());
    if (!w.s)
        return;
    const char *ep = dt_job_server_endpoint(w.s);
    dt_zlink *odd = NULL;
    CHECK_OK(dt_zlink_client(ep, "worker:0", secret, sizeof secret - 1, 0, &odd));
    dt_psbuf req = {0}, rep = {0};
    int64_t id = 5;
    dt_psmsg pull = {.type = DT_PSMSG_PULL_ROWS, .request_id = 9, .table = 0, .n = 1};
    CHECK_OK(dt_psmsg_encode(&pull, &id, NULL, &req));
    CHECK_OK(dt_zlink_request(odd, &req, 5.0, &rep));
    dt_psmsg r;
    CHECK_OK(dt_psmsg_decode(rep.data, rep.len, "worker:0", &r));
    CHECK(r.type == DT_PSMSG_ERROR && r.request_id == 9 && r.status == DT_ERR_INVALID);
    CHECK(r.type == DT_PSMSG_ERROR && memmem(r.text, r.text_len, "a worker takes RUN", 18));
    dt_psbuf junk = {.data = (uint8_t *)"not a ps message at all", .len = 23};
    CHECK_OK(dt_zlink_send(odd, &junk, 5.0));
    dt_job_link *l = NULL;
    CHECK_OK(dt_job_link_open(ep, "worker:0", secret, sizeof secret - 1, 0, &l));
    CHECK_OK(dt_job_link_ping(l, 5.0));
    CHECK_OK(dt_job_link_stop(l, 5.0));
    pthread_join(t, NULL);
    CHECK(w.ended == DT_OK && w.asked[DT_JOB_ASK_PING] == 1);
    dt_psbuf_free(&req), dt_psbuf_free(&rep);
    dt_zlink_close(odd);
    dt_job_link_close(l);
    dt_job_server_close(w.s);
}

/* No worker at the endpoint, or a link with another secret: the coordinator's question is
 * unheard, named, within its deadline. */
TEST(joblink_an_absent_worker_is_unheard_within_the_deadline)
{
    dt_job_server *s = NULL;
    CHECK_OK(dt_job_server_open("tcp://127.0.0.1:*", secret, sizeof secret - 1, &s));
    if (!s)
        return;
    char ep[128];
    snprintf(ep, sizeof ep, "%s", dt_job_server_endpoint(s));
    dt_job_link *wrong = NULL;
    CHECK_OK(dt_job_link_open(ep, "worker:2", "another secret", 14, 0, &wrong));
    dt_job_result r;
    bool unheard = false;
    double t0 = dt_clock_now();
    CHECK_ERR(dt_job_link_run(wrong, &(dt_job_run){.first = 1, .steps = 1}, 0.5, &r, &unheard),
              DT_ERR_TIMEOUT, "worker:2");
    CHECK(unheard && dt_clock_now() - t0 < 3.0);
    dt_job_link_close(wrong);
    dt_job_server_close(s);
    dt_job_link *l = NULL;
    CHECK_OK(dt_job_link_open(ep, "worker:2", secret, sizeof secret - 1, 0, &l));
    unheard = false;
    t0 = dt_clock_now();
    CHECK_ERR(dt_job_link_run(l, &(dt_job_run){.first = 1, .steps = 1}, 0.5, &r, &unheard),
              DT_ERR_TIMEOUT, "worker:2");
    CHECK(unheard && dt_clock_now() - t0 < 3.0);
    dt_job_link_close(l);
}
