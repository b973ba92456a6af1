/* Distribution strategies for custom training loops (see include/dtrain/strategy.h). */
#include "dtrain/strategy.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dt_strategy {
    dt_strategy_kind kind;
    int replicas;    /* local ones */
    dt_comm *comm;   /* multi_worker_mirrored's (borrowed) */
    double timeout;
};

static const char *const names[] = {"one_device", "mirrored", "multi_worker_mirrored",
                                    "central_storage"};
#define N_KINDS 4

/* Replicas on threads of this process. */
static bool local_replicas(dt_strategy_kind k)
{
    return k == DT_STRATEGY_MIRRORED || k == DT_STRATEGY_CENTRAL_STORAGE;
}

const char *dt_strategy_name(dt_strategy_kind kind)
{
    return (unsigned)kind < N_KINDS ? names[kind] : "?";
}

dt_status dt_strategy_parse(const char *name, dt_strategy_kind *kind)
{
    for (int i = 0; i < N_KINDS; i++)
        if (strcmp(name, names[i]) == 0) {
            *kind = (dt_strategy_kind)i;
            return DT_OK;
        }
    return dt_error(DT_ERR_INVALID, "unknown strategy '%s' (one_device, mirrored, "
                    "multi_worker_mirrored, central_storage)", name);
}

dt_status dt_strategy_create(dt_strategy_kind kind, int replicas, dt_comm *comm, double timeout,
                             dt_strategy **out)
{
    *out = NULL;
    if (local_replicas(kind) && (replicas < 1 || replicas > 256))
        return dt_error(DT_ERR_INVALID, "%s: %d replicas (1..256)", dt_strategy_name(kind),
                        replicas);
    if (kind == DT_STRATEGY_MULTI_WORKER_MIRRORED && !comm)
        return dt_error(DT_ERR_INVALID, "multi_worker_mirrored needs a communicator");
    if ((unsigned)kind >= N_KINDS)
        return dt_error(DT_ERR_INVALID, "strategy kind %d", (int)kind);
    dt_strategy *s = calloc(1, sizeof *s);
    if (!s)
        return dt_error(DT_ERR_NOMEM, "no memory for a strategy");
    s->kind = kind;
    s->replicas = local_replicas(kind) ? replicas : 1;
    s->comm = kind == DT_STRATEGY_MULTI_WORKER_MIRRORED ? comm : NULL;
    s->timeout = timeout > 0 ? timeout : 60.0;
    *out = s;
    return DT_OK;
}

void dt_strategy_destroy(dt_strategy *s) { free(s); }

int dt_strategy_num_replicas_in_sync(const dt_strategy *s)
{
    return s->kind == DT_STRATEGY_MULTI_WORKER_MIRRORED ? s->comm->size : s->replicas;
}

dt_status dt_strategy_per_replica_batch(const dt_strategy *s, int64_t global_batch,
                                        int64_t *per_replica)
{
    int n = dt_strategy_num_replicas_in_sync(s);
    if (global_batch < 1 || global_batch % n != 0)
        return dt_error(DT_ERR_INVALID, "the global batch %lld is not divisible by the %d "
                        "replicas in sync", (long long)global_batch, n);
    *per_replica = global_batch / n;
    return DT_OK;
}

dt_status dt_strategy_reduce(dt_comm *comm, dt_reduce_op op, float *values, size_t n_elems)
{
    if (!comm)
        return DT_OK;
    return dt_comm_allreduce(comm, values, n_elems, op, DT_WIRE_F32);
}

typedef struct {
    dt_replica_fn fn;
    void *ctx;
    int id;
    dt_comm *comm;
    pthread_t thread;
    dt_status st;
    char msg[1024];
} replica_run;

static void *replica_thread(void *arg)
{
    replica_run *r = arg;
    r->st = r->fn(r->ctx, r->id, r->comm);
    if (r->st)
        snprintf(r->msg, sizeof r->msg, "%s", dt_last_error());
    return NULL;
}

static dt_status run_mirrored(dt_strategy *s, dt_replica_fn fn, void *ctx)
{
    int n = s->replicas, started = 0;
    dt_local_group *g = NULL;
    replica_run *runs = calloc((size_t)n, sizeof *runs);
    dt_status st = runs ? dt_local_group_create(n, s->timeout, &g)
                        : dt_error(DT_ERR_NOMEM, "no memory for %d replicas", n);
    for (int r = 0; st == DT_OK && r < n; r++) {
        runs[r] = (replica_run){fn, ctx, r, NULL, 0, DT_OK, ""};
        st = dt_comm_local(g, r, &runs[r].comm);
    }
    /* Replicas 1.. on threads, replica 0 on this one. */
    for (int r = 1; st == DT_OK && r < n; r++) {
        if (pthread_create(&runs[r].thread, NULL, replica_thread, &runs[r]) != 0)
            st = dt_error(DT_ERR_IO, "cannot start the thread of replica %d", r);
        else
            started++;
    }
    if (st == DT_OK)
        replica_thread(&runs[0]);
    for (int r = 1; r <= started; r++)
        pthread_join(runs[r].thread, NULL);
    /* The cause, not its echo: a replica that failed on its own is named before those that
     * then timed out waiting for it. */
    for (int pass = 0; pass < 2 && st == DT_OK; pass++)
        for (int r = 0; st == DT_OK && r < n; r++)
            if (runs[r].st && (pass == 1 || runs[r].st != DT_ERR_TIMEOUT))
                st = dt_error(runs[r].st, "replica %d: %s", r, runs[r].msg);
    for (int r = 0; runs && r < n; r++)
        dt_comm_destroy(runs[r].comm);
    dt_local_group_destroy(g);
    free(runs);
    return st;
}

dt_status dt_strategy_run(dt_strategy *s, dt_replica_fn fn, void *ctx)
{
    switch (s->kind) {
    case DT_STRATEGY_MIRRORED:
    case DT_STRATEGY_CENTRAL_STORAGE:
        return run_mirrored(s, fn, ctx);
    case DT_STRATEGY_MULTI_WORKER_MIRRORED:
        return fn(ctx, s->comm->rank, s->comm);
    default:
        return fn(ctx, 0, NULL);
    }
}
