/* A parameter-server job's control links: questions and answers as ps messages over ZeroMQ
 * (see joblink.h). */
#include "joblink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/clock.h"
#include "dtrain/log.h"
#include "psmsg.h"
#include "zlink.h"

_Static_assert(DT_JOB_MAX_TEXT == DT_PSMSG_MAX_TEXT, "an error's text is a ps message's");

struct dt_job_link {
    dt_zlink *z;
    char *peer;
    uint64_t id;          /* the last question's */
    dt_psbuf out, in;
    dt_psmsg reply;       /* the last answer, its views into in */
};

dt_status dt_job_link_open(const char *endpoint, const char *peer, const void *secret,
                           size_t secret_len, double heartbeat, dt_job_link **out)
{
    *out = NULL;
    dt_job_link *l = calloc(1, sizeof *l);
    if (!l || !(l->peer = strdup(peer))) {
        free(l);
        return dt_error(DT_ERR_NOMEM, "no memory for the link to %s", peer);
    }
    dt_status st = dt_zlink_client(endpoint, peer, secret, secret_len, heartbeat, &l->z);
    if (st) {
        dt_job_link_close(l);
        return st;
    }
    *out = l;
    return DT_OK;
}

void dt_job_link_close(dt_job_link *l)
{
    if (!l)
        return;
    dt_zlink_close(l->z);
    dt_psbuf_free(&l->out);
    dt_psbuf_free(&l->in);
    free(l->peer);
    free(l);
}

/* Awaits the reply to the question with l->id until deadline, into l->reply: late replies to
 * questions given up on, and messages that do not decode (logged, naming the worker: a broken
 * message must not end the job), are dropped. A failure here is the link's. */
static dt_status await_reply(dt_job_link *l, double deadline)
{
    for (;;) {
        double left = deadline - dt_clock_now();
        dt_status st = dt_zlink_await(l->z, left > 0 ? left : 0, &l->in);
        if (st)
            return st;
        if (dt_psmsg_decode(l->in.data, l->in.len, l->peer, &l->reply) != DT_OK) {
            dt_log_to(NULL, DT_LOG_WARN, "dtrain: warning: dropped a message from %s: %s",
                      l->peer, dt_last_error());
            continue;
        }
        if (l->reply.request_id == l->id)
            return DT_OK;
    }
}

/* m (its request id set here) to the worker, and its reply of type want within timeout, in
 * l->reply. *unheard (may be NULL): the link itself failed. */
static dt_status ask(dt_job_link *l, dt_psmsg *m, dt_psmsg_type want, double timeout,
                     bool *unheard)
{
    double deadline = dt_clock_now() + timeout;
    bool link_failed = false;
    m->request_id = ++l->id;
    l->out.len = 0;
    dt_status st = dt_psmsg_encode(m, NULL, NULL, &l->out);
    if (st == DT_OK) {
        if ((st = dt_zlink_send(l->z, &l->out, timeout)) == DT_OK)
            st = await_reply(l, deadline);
        link_failed = st != DT_OK;
    }
    if (unheard)
        *unheard = link_failed;
    const dt_psmsg *r = &l->reply;
    if (st == DT_OK && r->type == DT_PSMSG_ERROR)
        st = dt_error(dt_psmsg_status(r), "%s: %.*s", l->peer, (int)r->text_len, r->text);
    else if (st == DT_OK && r->type != want)
        st = dt_error(DT_ERR_PEER, "%s: a %s reply where %s was due", l->peer,
                      dt_psmsg_type_name(r->type), dt_psmsg_type_name(want));
    return st;
}

dt_status dt_job_link_ping(dt_job_link *l, double timeout)
{
    dt_psmsg m = {.type = DT_PSMSG_PING};
    return ask(l, &m, DT_PSMSG_PONG, timeout, NULL);
}

dt_status dt_job_link_stop(dt_job_link *l, double timeout)
{
    dt_psmsg m = {.type = DT_PSMSG_STOP};
    return ask(l, &m, DT_PSMSG_ACK, timeout, NULL);
}

dt_status dt_job_link_run(dt_job_link *l, const dt_job_run *run, double timeout,
                          dt_job_result *result, bool *unheard)
{
    dt_psmsg m = {.type = DT_PSMSG_RUN, .step = run->first, .n = run->steps,
                  .position = run->position, .shard = run->shard};
    dt_status st = ask(l, &m, DT_PSMSG_RESULT, timeout, unheard);
    if (st)
        return st;
    const dt_psmsg *r = &l->reply;
    *result = (dt_job_result){.steps = r->n, .done = r->done != 0, .rows = r->rows,
                              .correct = r->correct, .loss = r->loss};
    return DT_OK;
}

dt_status dt_job_link_ring_port(dt_job_link *l, double timeout, uint16_t *port)
{
    dt_psmsg m = {.type = DT_PSMSG_RING};
    dt_status st = ask(l, &m, DT_PSMSG_RING, timeout, NULL);
    if (st == DT_OK && l->reply.n != 1)
        st = dt_error(DT_ERR_PEER, "%s: %u ring ports where its own was due", l->peer,
                      l->reply.n);
    if (st == DT_OK)
        *port = dt_psmsg_port(&l->reply, 0);
    return st;
}

dt_status dt_job_link_ring(dt_job_link *l, const uint16_t *ports, uint32_t n, double timeout)
{
    dt_psmsg m = {.type = DT_PSMSG_RING, .n = n, .ports_host = ports};
    return ask(l, &m, DT_PSMSG_ACK, timeout, NULL);
}

dt_status dt_job_link_pull_dense(dt_job_link *l, float *values, uint64_t n, double timeout)
{
    dt_psmsg m = {.type = DT_PSMSG_PULL_DENSE, .count = n};
    dt_status st = ask(l, &m, DT_PSMSG_DENSE, timeout, NULL);
    const dt_psmsg *r = &l->reply;
    if (st == DT_OK && (r->offset != 0 || r->count != n))
        st = dt_error(DT_ERR_PEER, "%s: %llu dense values from %llu where %llu from 0 were due",
                      l->peer, (unsigned long long)r->count, (unsigned long long)r->offset,
                      (unsigned long long)n);
    if (st == DT_OK)
        dt_psmsg_values(r, 0, (size_t)n, values);
    return st;
}

struct dt_job_server {
    dt_zlink *z;
    dt_psbuf in, out;
    dt_zpeer from;        /* who asked the last question */
    dt_psmsg req;         /* the last question, its views into in */
};

uint16_t dt_job_ask_port(const dt_job_ask *a, uint32_t i)
{
    const dt_psmsg ring = {.type = DT_PSMSG_RING, .n = a->n_ports, .ports = a->ports};
    return dt_psmsg_port(&ring, i);
}

dt_status dt_job_server_open(const char *endpoint, const void *secret, size_t secret_len,
                             dt_job_server **out)
{
    *out = NULL;
    dt_job_server *s = calloc(1, sizeof *s);
    if (!s)
        return dt_error(DT_ERR_NOMEM, "no memory for this worker's control link");
    dt_status st = dt_zlink_server(endpoint, secret, secret_len, &s->z);
    if (st) {
        free(s);
        return st;
    }
    *out = s;
    return DT_OK;
}

void dt_job_server_close(dt_job_server *s)
{
    if (!s)
        return;
    dt_zlink_close(s->z);
    dt_psbuf_free(&s->in);
    dt_psbuf_free(&s->out);
    free(s);
}

const char *dt_job_server_endpoint(const dt_job_server *s)
{
    return dt_zlink_endpoint(s->z);
}

/* m, answering the last question, to its sender. */
static dt_status answer(dt_job_server *s, dt_psmsg *m, const float *values)
{
    m->request_id = s->req.request_id;
    s->out.len = 0;
    dt_status st = dt_psmsg_encode(m, NULL, values, &s->out);
    return st ? st : dt_zlink_reply(s->z, &s->from, &s->out);
}

static dt_status answer_error(dt_job_server *s, dt_status status, const char *text)
{
    size_t n = strlen(text);
    dt_psmsg m = {.type = DT_PSMSG_ERROR, .status = status, .text = text,
                  .text_len = (uint32_t)(n < DT_JOB_MAX_TEXT ? n : DT_JOB_MAX_TEXT - 1)};
    return answer(s, &m, NULL);
}

/* A message on the control socket that is not the coordinator's question (it does not decode,
 * or is not shaped as one): logged, naming where it came from, and dropped. A peer that holds
 * the secret but is broken or hostile must not end a worker, nor count as the coordinator's
 * word. */
static void drop_message(const char *addr, const char *coordinator)
{
    dt_log_to(NULL, DT_LOG_WARN, "dtrain: warning: dropped a message from %s on this worker's "
              "control socket (only the coordinator, %s, sends there): %s", addr, coordinator,
              dt_last_error());
}

static bool ask_kind(dt_psmsg_type type, dt_job_ask_kind *kind)
{
    switch (type) {
    case DT_PSMSG_PING: *kind = DT_JOB_ASK_PING; return true;
    case DT_PSMSG_STOP: *kind = DT_JOB_ASK_STOP; return true;
    case DT_PSMSG_RUN: *kind = DT_JOB_ASK_RUN; return true;
    case DT_PSMSG_RING: *kind = DT_JOB_ASK_RING; return true;
    case DT_PSMSG_PULL_DENSE: *kind = DT_JOB_ASK_DENSE; return true;
    default: return false;
    }
}

dt_status dt_job_server_next(dt_job_server *s, double timeout, const char *coordinator,
                             dt_job_ask *ask)
{
    dt_psmsg *q = &s->req;
    dt_status st = dt_zlink_receive(s->z, timeout, &s->from, &s->in);
    if (st == DT_OK)
        st = dt_psmsg_decode(s->in.data, s->in.len, s->from.addr, q);
    if (st == DT_ERR_PEER || st == DT_ERR_FORMAT) {
        drop_message(s->from.addr, coordinator);
        return DT_END;
    }
    if (st)
        return st;
    *ask = (dt_job_ask){0};
    if (!ask_kind(q->type, &ask->kind)) {
        /* Answered with an error, so its sender is not left waiting; the worker goes on. */
        dt_error(DT_ERR_PEER, "a %s request, a worker takes RUN, RING, PULL_DENSE, PING and "
                 "STOP", dt_psmsg_type_name(q->type));
        drop_message(s->from.addr, coordinator);
        st = answer_error(s, DT_ERR_INVALID, dt_last_error());
        return st ? st : DT_END;
    }
    ask->run = (dt_job_run){.first = q->step, .steps = q->n, .position = q->position,
                            .shard = q->shard};
    ask->n_ports = q->type == DT_PSMSG_RING ? q->n : 0;
    ask->ports = q->ports;
    ask->offset = q->offset, ask->count = q->count;
    return DT_OK;
}

dt_status dt_job_server_ok(dt_job_server *s)
{
    dt_psmsg m = {.type = s->req.type == DT_PSMSG_PING ? DT_PSMSG_PONG : DT_PSMSG_ACK};
    return answer(s, &m, NULL);
}

dt_status dt_job_server_port(dt_job_server *s, uint16_t port)
{
    dt_psmsg m = {.type = DT_PSMSG_RING, .n = 1, .ports_host = &port};
    return answer(s, &m, NULL);
}

dt_status dt_job_server_result(dt_job_server *s, const dt_job_result *r)
{
    dt_psmsg m = {.type = DT_PSMSG_RESULT, .n = r->steps, .done = r->done, .rows = r->rows,
                  .correct = r->correct, .loss = r->loss};
    return answer(s, &m, NULL);
}

dt_status dt_job_server_dense(dt_job_server *s, const float *values, uint64_t count)
{
    dt_psmsg m = {.type = DT_PSMSG_DENSE, .table = s->req.table, .offset = 0, .count = count};
    return answer(s, &m, values);
}

void dt_job_server_fail(dt_job_server *s, dt_status st, const char *text,
                        const char *coordinator, double timeout)
{
    char why[DT_JOB_MAX_TEXT];
    snprintf(why, sizeof why, "%s", text);
    if (answer_error(s, st, why))
        return;
    double deadline = dt_clock_now() + timeout;
    for (double left = timeout; left > 0; left = deadline - dt_clock_now()) {
        dt_job_ask a;
        dt_status got = dt_job_server_next(s, left, coordinator, &a);
        if (got == DT_END)
            continue;
        if (got)
            return;
        bool control = a.kind == DT_JOB_ASK_PING || a.kind == DT_JOB_ASK_STOP;
        if ((control ? dt_job_server_ok(s) : answer_error(s, st, why)) ||
            a.kind == DT_JOB_ASK_STOP)
            return;
    }
}
