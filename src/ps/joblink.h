/* A parameter-server job's control links (internal to the library): the coordinator (the
 * chief) holds a link to each worker and asks; the worker serves its link and answers. The
 * questions: PING and STOP, RUN (a function: steps of a data shard, answered with what they
 * did), RING (hybrid: the worker's ring port, then every worker's, for it to join the ring)
 * and DENSE (hybrid: the dense variables the workers hold). The messages are the ps codec's
 * (psmsg.h) over ZeroMQ links whose CURVE keys come from the cluster secret (zlink.h); neither
 * is seen through this interface, so src/train speaks of functions and results, not bytes.
 *
 * Every wait has a deadline. A reply that does not decode, or answers an earlier question
 * given up on, is dropped; a request that is not the coordinator's is dropped, logged naming
 * its sender, and the worker goes on. */
#ifndef DTRAIN_PS_JOBLINK_H
#define DTRAIN_PS_JOBLINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/status.h"

/* The longest error text that crosses a link (a longer one is cut). */
#define DT_JOB_MAX_TEXT 1024u

/* A function: steps first .. first + steps - 1 on data shard `shard` (the worker's own, or a
 * lost worker's it takes over), of which the coordinator has seen `position` batches trained
 * on (the worker skips those when it has not read them). */
typedef struct {
    int64_t first;
    uint32_t steps;
    int64_t position;
    uint32_t shard;
} dt_job_run;

/* What a RUN did: the steps taken, whether the worker's data is used up (every epoch of it),
 * and the rows, correct predictions and summed loss of its steps. */
typedef struct {
    uint32_t steps;
    bool done;
    int64_t rows, correct;
    double loss;
} dt_job_result;

/* The coordinator's side: one link per worker. */
typedef struct dt_job_link dt_job_link;

/* A link to the worker serving at endpoint ("tcp://HOST:PORT"), named peer in errors
 * ("worker:1"); heartbeat > 0: a silent connection is found closed after that many seconds. */
dt_status dt_job_link_open(const char *endpoint, const char *peer, const void *secret,
                           size_t secret_len, double heartbeat, dt_job_link **out);
void dt_job_link_close(dt_job_link *l);

/* Each question and its answer within timeout seconds: DT_ERR_TIMEOUT or DT_ERR_PEER naming the
 * worker when none comes or the link closed; the worker's own error (its status and text) when
 * it answers with one. */
dt_status dt_job_link_ping(dt_job_link *l, double timeout);
dt_status dt_job_link_stop(dt_job_link *l, double timeout);
/* *unheard (may be NULL) tells a failure of the link itself (closed, silent, or no answer in
 * time: the worker is lost) from an answer that is an error (the worker failed). */
dt_status dt_job_link_run(dt_job_link *l, const dt_job_run *run, double timeout,
                          dt_job_result *result, bool *unheard);
/* Hybrid: the port the worker's ring listens on; then every worker's (n, worker i's at i),
 * answered once the worker has joined the ring. */
dt_status dt_job_link_ring_port(dt_job_link *l, double timeout, uint16_t *port);
dt_status dt_job_link_ring(dt_job_link *l, const uint16_t *ports, uint32_t n, double timeout);
/* Hybrid: the worker's n dense values into values. */
dt_status dt_job_link_pull_dense(dt_job_link *l, float *values, uint64_t n, double timeout);

/* The worker's side. */
typedef struct dt_job_server dt_job_server;

typedef enum {
    DT_JOB_ASK_PING,
    DT_JOB_ASK_STOP,
    DT_JOB_ASK_RUN,
    DT_JOB_ASK_RING,
    DT_JOB_ASK_DENSE,
} dt_job_ask_kind;

/* A question from the coordinator; its views stay valid until the server's next receive. */
typedef struct {
    dt_job_ask_kind kind;
    dt_job_run run;          /* RUN */
    uint32_t n_ports;        /* RING: 0 asks this worker's port, else every worker's */
    const uint8_t *ports;    /* RING: n_ports, read with dt_job_ask_port */
    uint64_t offset, count;  /* DENSE: the values asked for */
} dt_job_ask;

uint16_t dt_job_ask_port(const dt_job_ask *a, uint32_t i);

/* Serves at endpoint ("tcp://HOST:PORT"); DT_ERR_UNAVAILABLE while HOST does not resolve to
 * an address of this machine (the caller may try again). */
dt_status dt_job_server_open(const char *endpoint, const void *secret, size_t secret_len,
                             dt_job_server **out);
void dt_job_server_close(dt_job_server *s);
/* The endpoint it is bound to, its port resolved. */
const char *dt_job_server_endpoint(const dt_job_server *s);

/* The next question within timeout seconds: DT_END when none came, or only messages dropped
 * (logged, naming their sender and the coordinator, the only one who asks here); a request
 * that is not a question for a worker is answered with an error and dropped so. Other errors
 * are the socket's. */
dt_status dt_job_server_next(dt_job_server *s, double timeout, const char *coordinator,
                             dt_job_ask *ask);

/* The answer to the last question: PONG to a PING, and an acknowledgement to a STOP or to a
 * RING of every worker's port (dt_job_server_ok); a RING's port; a RUN's result; DENSE's
 * values (count of them, as asked). */
dt_status dt_job_server_ok(dt_job_server *s);
dt_status dt_job_server_port(dt_job_server *s, uint16_t port);
dt_status dt_job_server_result(dt_job_server *s, const dt_job_result *r);
dt_status dt_job_server_dense(dt_job_server *s, const float *values, uint64_t count);

/* The last question answered with error st and its text, and the link kept until the
 * coordinator's STOP or timeout seconds: PINGs and STOP answered, any other question with the
 * same error. Closed at once, the socket (linger 0) would drop the error before it is sent,
 * and the coordinator would blame this worker's closed connection instead of its reason. */
void dt_job_server_fail(dt_job_server *s, dt_status st, const char *text,
                        const char *coordinator, double timeout);

#endif
