/* The all-reduce benchmark of `dtrain bench allreduce` (see comm_bench.h). */
#include "comm_bench.h"

#include <stdlib.h>
#include <string.h>

#include "../core/clock.h"
#include "dtrain/comm_open.h"

/* Exact in float32 in any order of addition, so the check compares bits. */
static float input(int rank, size_t i)
{
    return (float)((rank * 7919 + (long)(i % 100003) * 104729) % 1000) / 8.0f;
}

static long check_result(const float *v, size_t n, int size, dt_reduce_op op)
{
    long wrong = 0;
    for (size_t i = 0; i < n; i++) {
        float acc = input(0, i);
        for (int r = 1; r < size; r++) {
            float x = input(r, i);
            acc = op == DT_REDUCE_MIN ? (x < acc ? x : acc)
                  : op == DT_REDUCE_MAX ? (x > acc ? x : acc) : acc + x;
        }
        if (op == DT_REDUCE_MEAN)
            acc /= (float)size;
        wrong += v[i] != acc;
    }
    return wrong;
}

/* Times one size; *seconds is the slowest rank's mean time per all-reduce. */
static dt_status time_size(dt_comm *c, const dt_allreduce_bench *b, float *buf, size_t n, double *seconds,
                           long *wrong)
{
    dt_status st;
    *wrong = 0;
    if (b->check) {
        for (size_t i = 0; i < n; i++)
            buf[i] = input(c->rank, i);
        if ((st = dt_comm_allreduce(c, buf, n, b->op, DT_WIRE_F32)))
            return st;
        float w = (float)check_result(buf, n, c->size, b->op);
        if ((st = dt_comm_allreduce(c, &w, 1, DT_REDUCE_SUM, DT_WIRE_F32)))
            return st;
        *wrong = (long)w;
    }
    memset(buf, 0, n * sizeof *buf); /* zeros stay finite however often they are summed */
    size_t bytes = n * sizeof *buf;
    int iters = b->iters;
    if (bytes > 0 && (size_t)iters * bytes < ((size_t)256 << 20))
        iters = (int)(((size_t)256 << 20) / bytes) < 1000 ? (int)(((size_t)256 << 20) / bytes) : 1000;
    for (int i = 0; i < b->warmup; i++)
        if ((st = dt_comm_allreduce(c, buf, n, b->op, b->wire)))
            return st;
    if ((st = dt_comm_barrier(c)))
        return st;
    double t0 = dt_clock_now();
    for (int i = 0; i < iters; i++)
        if ((st = dt_comm_allreduce(c, buf, n, b->op, b->wire)))
            return st;
    float t = (float)((dt_clock_now() - t0) / iters);
    if ((st = dt_comm_allreduce(c, &t, 1, DT_REDUCE_MAX, DT_WIRE_F32)))
        return st;
    *seconds = t;
    return DT_OK;
}

dt_status dt_comm_bench_allreduce(dt_comm *c, const dt_allreduce_bench *b, FILE *out,
                                  long *total_wrong)
{
    float *buf = malloc(b->hi > 4 ? b->hi : 4);
    if (!buf)
        return dt_error(DT_ERR_NOMEM, "no memory for %zu bytes", b->hi);
    if (c->rank == 0 && out) {
        fprintf(out, "dtrain bench allreduce: %d ranks (%s), float32, op %s, wire %s\n", c->size,
               dt_comm_describe(c), dt_reduce_op_name(b->op), dt_wire_dtype_name(b->wire));
        fprintf(out, "%12s %12s %12s %12s %12s %8s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
               "busbw(GB/s)", b->check ? "check" : "");
        fflush(out); /* the header says every rank is connected: scripts wait for it */
    }
    dt_status st = DT_OK;
    *total_wrong = 0;
    for (size_t bytes = b->lo;; bytes = bytes ? bytes * (size_t)b->factor : 4) {
        size_t n = bytes / sizeof(float);
        double t;
        long wrong;
        if ((st = time_size(c, b, buf, n, &t, &wrong)))
            break;
        *total_wrong += wrong;
        double algbw = t > 0 ? (double)(n * sizeof(float)) / t / 1e9 : 0.0;
        double busbw = algbw * 2.0 * (c->size - 1) / c->size;
        if (c->rank == 0 && out) {
            fprintf(out, "%12zu %12zu %12.2f %12.3f %12.3f %8s\n", n * sizeof(float), n, t * 1e6,
                   algbw, busbw, !b->check ? "" : wrong ? "WRONG" : "ok");
            fflush(out);
        }
        if (bytes >= b->hi || bytes * (size_t)b->factor > b->hi)
            break;
    }
    free(buf);
    return st;
}

