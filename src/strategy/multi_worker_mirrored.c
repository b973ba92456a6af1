/* multi_worker_mirrored: one replica per process of a cluster, kept identical by the all-reduce
 * step (allreduce.c) over the cluster's communicator (tcp, with shared memory on one host, or
 * mpi). Every process runs its own replica. */
#include "strategy_impl.h"

static dt_status check(const dt_strategy_options *o)
{
    if (!o->comm)
        return dt_error(DT_ERR_INVALID, "multi_worker_mirrored needs a communicator");
    return dt_allreduce_check(o);
}

static int workers(const dt_strategy *s) { return s->opts.comm->size; }

static int one(const dt_strategy *s)
{
    (void)s;
    return 1;
}

static dt_status run(dt_strategy *s, dt_replica_fn fn, void *ctx)
{
    dt_replica r;
    dt_replica_setup(&r, s, s->opts.comm->rank, s->opts.comm->size, s->opts.comm);
    return fn(ctx, &r);
}

const dt_strategy_ops dt_multi_worker_mirrored_ops = {
    .name = "multi_worker_mirrored",
    .check = check,
    .replicas_in_sync = workers,
    .local_replicas = one,
    .run = run,
    DT_ALLREDUCE_REPLICA_OPS,
};
