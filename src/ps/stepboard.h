/* A sparse cluster's global step, kept by ps 0 (internal to src/ps). The workers of TFJob's
 * sparse form train between-graph, none of them knowing the others: each takes its steps'
 * numbers from here (so the learning-rate schedule, Adam's bias correction and --max-steps
 * follow the job's count, as TF 1.x's global_step variable on the ps), the others wait here
 * until worker 0 has made the variables ready, and worker 0, at its end, waits here until no
 * other worker is training. No sockets, no clock of its own, no lock: the service holds its
 * lock around each call. */
#ifndef DTRAIN_PS_STEPBOARD_H
#define DTRAIN_PS_STEPBOARD_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/status.h"

typedef struct {
    int64_t total;      /* steps taken by every worker (from a restored checkpoint's) */
    bool ready;         /* worker 0 defined or restored the variables */
    double *heard;      /* by worker index: its last request (0: never) */
    bool *left;         /* by worker index: it said it leaves */
    int cap;
} dt_step_board;

/* What a request is answered with. */
typedef struct {
    int64_t total;
    bool ready;
    int active;         /* other workers heard within `timeout` and not left */
} dt_step_reply;

dt_status dt_step_board_init(dt_step_board *b, int max_workers);
void dt_step_board_free(dt_step_board *b);
/* Worker `worker`'s request at time now (kind DT_PSMSG_STEP_*; n steps to take; floor: READY's
 * restored step). Errors: an index beyond the board, READY from another worker than 0. */
dt_status dt_step_board_ask(dt_step_board *b, int worker, uint32_t kind, uint32_t n,
                            int64_t floor, double now, double timeout, dt_step_reply *out);

#endif
