/* How a worker stores into the parameters and gradients the workers of a machine share: with
 * plain stores or with streaming ones (stream.h), chosen by timing both now and then (internal
 * to src/strategy).
 *
 * Plain stores leave the lines in the caches for the next forward, and win where the cores are
 * close. Where they are far apart, each plain store to a line another worker has read waits on
 * its invalidation: a worker's update of its 173k parameters then took 700 to 800 us instead of
 * 150 to 250, for whole runs at a time. The values stored are the same either way. */
#ifndef DTRAIN_STORE_CHOICE_H
#define DTRAIN_STORE_CHOICE_H

#include <stdbool.h>
#include <stdint.h>

enum {
    DT_STORE_TRIAL_START = 16,  /* steps before the first trial (they touch memory first) */
    DT_STORE_TRIAL_STEPS = 4,   /* steps each way in a trial */
    DT_STORE_TRIAL_EVERY = 64,  /* steps from the start of one trial to the next: the machine
                                 * changes within a run, and a trial costs little */
};

typedef struct {
    bool streaming;  /* the stores of the steps between trials */
    bool now;        /* the current step's */
    int64_t step;    /* steps taken */
    double timed[2]; /* the current trial's update time: [plain, streaming] */
} dt_store_choice; /* zeroed to start */

/* Sets c->now for the step to come: plain before the first trial; in a trial, plain then
 * streaming steps; after it, the trial's choice. Streaming must save a third of the time to win,
 * as the readers pay for it too: their next forward takes the lines from memory. */
void dt_store_choice_for_step(dt_store_choice *c);

/* After the step's update, which took seconds: counts the step and times a trial's. */
void dt_store_choice_record(dt_store_choice *c, double seconds);

#endif
