/* The parameter-server coordinator's scheduling as a state machine (internal to src/train): no
 * sockets, no threads, no clock. The coordinator (ps_coordinator.c) feeds it what its workers
 * say and asks it what each may do next; it holds the one lock around every call.
 *
 * Steps are numbered globally and given out in functions of at most steps_per_execution steps.
 * A worker takes one function at a time: a lost worker's function first (the queue), else new
 * steps, while the step limit is not reached, its data not used up, no checkpoint pause is on
 * and, under bounded staleness (ssp:S), no active worker is more than S steps behind it. Each
 * worker reads its own shard of the data; once that is used up it takes over the shard of a lost
 * worker that no one reads. A lost worker's function goes back to the queue; a worker that
 * comes back rejoins with its clock at the slowest active worker's. In hybrid mode every worker
 * takes every step (a step is one batch of each, their ring keeps them in step), and a step is
 * counted once, with worker 0's result. */
#ifndef DTRAIN_TRAIN_PS_SCHEDULE_H
#define DTRAIN_TRAIN_PS_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/status.h"

typedef struct {
    int n_workers;
    bool hybrid;
    bool ssp;                   /* bounded staleness, at most `staleness` steps */
    int64_t staleness;
    int64_t steps_per_execution;
    int64_t limit;              /* the step to stop at (INT64_MAX: when the data ends) */
    int64_t start;              /* the steps already taken (a restored checkpoint's) */
} dt_ps_sched_config;

/* One function given to a worker: its steps [first, first + n), where its data shard stands. */
typedef struct {
    int64_t first;
    uint32_t n;
    int shard;                  /* the data shard it reads */
    int64_t position;           /* the batches of that shard already trained on */
    bool again;                 /* a lost worker's function, taken again */
} dt_ps_function;

typedef enum {
    DT_PS_TAKE_RUN,             /* run the function */
    DT_PS_TAKE_WAIT,            /* nothing yet: ask again once something changed */
    DT_PS_TAKE_NONE,            /* nothing more for this worker: it retires */
} dt_ps_take;

typedef struct {
    int64_t completed;          /* steps this worker has taken (its clock) */
    int64_t dispatched;         /* hybrid: steps given to this worker */
    int shard;                  /* the data shard it reads (-1: none) */
    bool active;                /* taking functions (not lost, not finished) */
    bool lost;                  /* its link closed or fell silent: it may rejoin */
} dt_ps_sched_worker;

typedef struct {
    int64_t position;           /* batches of it whose steps were completed */
    bool done;                  /* used up */
    int owner;                  /* the worker reading it (-1: its worker was lost) */
} dt_ps_sched_shard;

typedef struct {
    dt_ps_sched_config cfg;
    dt_ps_sched_worker *workers;
    dt_ps_sched_shard *shards;  /* one per worker */
    dt_ps_function *queue;      /* lost workers' functions, taken before new ones */
    int n_queued, queue_cap;
    int64_t dispatched;         /* steps given out (not in hybrid mode: per worker) */
    int64_t steps;              /* steps completed */
    int in_flight;              /* functions given out and not answered */
    int n_active, n_lost, n_finished;
    bool failed;                /* a failure ends the job: no function is given out */
    bool pausing;               /* a checkpoint is being taken: no function is given out */
} dt_ps_sched;

dt_status dt_ps_sched_init(dt_ps_sched *s, const dt_ps_sched_config *cfg);
void dt_ps_sched_free(dt_ps_sched *s);

/* What worker w may do now; on DT_PS_TAKE_RUN, *fn is its function (counted in flight until
 * dt_ps_sched_answered or dt_ps_sched_lose). *adopted: a lost worker's shard w takes over with
 * this call (-1: none). */
dt_ps_take dt_ps_sched_take(dt_ps_sched *s, int w, dt_ps_function *fn, int *adopted);
/* Worker w answered fn having taken n steps (done: its data shard is used up). Returns the
 * steps the job's count moved by (hybrid: only worker 0's count). */
int64_t dt_ps_sched_answered(dt_ps_sched *s, int w, const dt_ps_function *fn, uint32_t n,
                             bool done);
/* Worker w's function failed without an answer that counts (the job fails). */
void dt_ps_sched_unanswered(dt_ps_sched *s, int w);
/* Worker w was lost running fn: fn goes back to the queue, w's shard is free to take over, w
 * stops counting among the active workers. DT_ERR_NOMEM when the queue cannot grow. */
dt_status dt_ps_sched_lose(dt_ps_sched *s, int w, const dt_ps_function *fn);
/* Lost worker w answered again: active, its clock at the slowest active worker's, its own shard
 * again unless another worker took it over. */
void dt_ps_sched_rejoin(dt_ps_sched *s, int w);
/* Worker w takes no more functions (finished, or failed). */
void dt_ps_sched_retire(dt_ps_sched *s, int w, bool failed);
/* The job fails: no more functions for anyone. */
void dt_ps_sched_fail(dt_ps_sched *s);
/* No new steps are given out (a callback stopped training); a lost worker's still are. */
void dt_ps_sched_end(dt_ps_sched *s);
/* A checkpoint pause on or off. */
void dt_ps_sched_pause(dt_ps_sched *s, bool on);
/* No function in flight (or the job failed): a paused job's state is a step boundary. */
bool dt_ps_sched_quiet(const dt_ps_sched *s);
/* Training is over for a lost worker waiting to rejoin: it failed, or every active worker
 * finished. */
bool dt_ps_sched_over(const dt_ps_sched *s);
/* Every worker lost, none finished: the job waits for one to come back. */
bool dt_ps_sched_all_lost(const dt_ps_sched *s);

#endif
