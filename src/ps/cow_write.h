/* A write of a ps task's variables from a copy-on-write image of the process (internal to
 * src/ps): the caller's lock over the variables is held only while the process forks, and a
 * child writes the file from the instant's memory while the task goes on answering (a PING, a
 * STOP, the next requests). A write that hangs (a stalled disk or network file system) holds
 * nothing: it is waited for with a deadline, then killed. The child's error message comes back
 * through a pipe; the child touches no lock of the parent's (fn must not: no pool, no service
 * mutex), only the C library's, which fork leaves usable. */
#ifndef DTRAIN_PS_COW_WRITE_H
#define DTRAIN_PS_COW_WRITE_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include "dtrain/status.h"

typedef dt_status (*dt_cow_fn)(void *arg);

typedef struct {
    pid_t pid;          /* the child while it runs; 0 when none */
    int fd;             /* the read end of its message pipe */
    double started, deadline;
    char what[160];     /* for messages: "snapshot /path" */
} dt_cow_write;

/* Forks a child running fn(arg), with `hold` locked across the fork (NULL: none); the write
 * has timeout seconds. */
dt_status dt_cow_start(dt_cow_write *w, dt_cow_fn fn, void *arg, pthread_mutex_t *hold,
                       double timeout, const char *what);
/* Whether a child runs. */
bool dt_cow_running(const dt_cow_write *w);
/* DT_END while the child runs and its deadline has not passed; else its result: DT_OK, its
 * error (message included), or DT_ERR_TIMEOUT once the deadline passed (the child is killed
 * and reaped). */
dt_status dt_cow_poll(dt_cow_write *w);
/* dt_cow_poll until the child ends or its deadline passes. */
dt_status dt_cow_wait(dt_cow_write *w);
/* Kills and reaps a child still running (a task stopping); accepts one that is not. */
void dt_cow_kill(dt_cow_write *w);

#endif
