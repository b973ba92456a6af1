/* The parameter-server coordinator's two halves (internal to src/train): its worker threads
 * (ps_coordinator.c), one per worker task, each asking the scheduler (ps_schedule.h) for the
 * next function, running it over the worker's link and handing the result over; and its loop
 * (ps_loop.c), which turns the results into fit's callbacks (progress, summaries, checkpoints)
 * and watches the ps tasks. The workers' threads hold the lock only to change the scheduler or
 * queue a result: no file or event is written under it. */
#ifndef DTRAIN_TRAIN_PS_COORD_H
#define DTRAIN_TRAIN_PS_COORD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ps_schedule.h"
#include "ps_task.h"

typedef struct ps_coord ps_coord;

/* One function's result as the callbacks see it. */
typedef struct {
    int64_t steps;          /* the steps it moved the job's count by (hybrid: 0 but worker 0's) */
    double loss;            /* summed over its rows */
    int64_t rows, correct;
} ps_result;

typedef struct {
    ps_coord *co;
    int index;              /* worker:index */
    char name[DT_HOST_CAP + 48];
    char endpoint[DT_HOST_CAP + 32];
    pthread_t thread;
} ps_worker_link;

struct ps_coord {
    const dt_train_config *c;
    const ps_cluster *pc;
    dt_model *m;            /* hybrid: receives the dense variables from worker 0 */
    bool hybrid;
    pthread_mutex_t mu;
    pthread_cond_t changed; /* on CLOCK_MONOTONIC: the scheduler or the results changed */
    dt_ps_sched sched;
    ps_worker_link *links;
    int n_links;
    int n_started;          /* worker threads started */
    int n_running;          /* worker threads not ended */
    uint16_t *ring_ports;   /* hybrid: each worker's ring port, once it told it */
    int ports_known;
    double all_lost_at;     /* when every worker was lost (0: one is active) */
    int first_failed;       /* the worker whose failure came first (-1: none; -2: a ps task) */
    dt_status first_status;
    char first_error[DT_JOB_MAX_TEXT];
    ps_result *results;     /* handed over, not yet seen by the loop */
    int n_results, results_cap;
};

/* co's lock, condition variable and scheduler for the workers of pc (cfg: the scheduler's). */
dt_status ps_coord_init(ps_coord *co, const dt_train_config *c, const ps_cluster *pc,
                        dt_model *m, const dt_ps_sched_config *cfg);
void ps_coord_free(ps_coord *co);
/* A thread per worker. */
dt_status ps_coord_start(ps_coord *co);
/* Waits for every worker's thread: the first failure, if one ended the job. */
dt_status ps_coord_join(ps_coord *co);
/* A failure that ends the job (of worker `index`, or -2: a ps task's or the loop's): logged,
 * kept when it is the first, and no worker takes another function. */
void ps_coord_fail(ps_coord *co, int index, dt_status st);
/* Best effort, a second each: tells every worker to stop, when training could not begin. */
void ps_coord_stop_workers(const ps_cluster *pc);
/* While the coordinator prepares the ps tasks (defining large tables, restoring a checkpoint:
 * minutes, on a large model), before its worker threads start, a thread pings every worker of
 * pc each second, so that a worker's --coordinator-timeout counts the coordinator's silence,
 * not the time the ps tasks take. Best effort: a worker that does not answer is not the roll
 * call's to judge. */
typedef struct ps_roll_call ps_roll_call;
dt_status ps_roll_call_start(const ps_cluster *pc, ps_roll_call **out);
void ps_roll_call_stop(ps_roll_call *r);
/* Until the absolute monotonic time `until`, or a change; the caller holds co->mu. */
void ps_coord_wait(ps_coord *co, double until);

#endif
