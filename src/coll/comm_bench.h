/* The all-reduce benchmark of `dtrain bench allreduce`: per size, the time of one all-reduce (the
 * slowest rank's mean), the algorithm bandwidth and the bus bandwidth as nccl-tests print them
 * (algbw = bytes / time; busbw = algbw x 2(n-1)/n, what each rank's links carry), with an
 * optional exact check of the result. Every rank of the communicator runs it; rank 0 prints. */
#ifndef DTRAIN_COMM_BENCH_H
#define DTRAIN_COMM_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "dtrain/comm.h"

typedef struct {
    size_t lo, hi;       /* the sizes in bytes, lo, lo x factor, ... up to hi */
    int factor;          /* at least 2 */
    int iters, warmup;   /* timed and untimed all-reduces per size (more for small sizes) */
    dt_reduce_op op;
    dt_wire_dtype wire;
    bool check;          /* check each size's result, bit for bit */
} dt_allreduce_bench;

/* Runs the sizes on every rank; rank 0 writes the table to out (NULL: nowhere). *wrong counts
 * the values the check found wrong over every rank. */
dt_status dt_comm_bench_allreduce(dt_comm *c, const dt_allreduce_bench *b, FILE *out,
                                  long *wrong);

#endif
