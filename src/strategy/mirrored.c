/* mirrored: replicas on threads of this process, each with its own copy of the variables, kept
 * identical by the all-reduce step (allreduce.c) over a local communicator. */
#include "strategy_impl.h"

static dt_status check(const dt_strategy_options *o)
{
    if (o->replicas < 1 || o->replicas > 256)
        return dt_error(DT_ERR_INVALID, "mirrored: %d replicas (1..256)", o->replicas);
    return dt_allreduce_check(o);
}

static int replicas(const dt_strategy *s) { return s->opts.replicas; }

const dt_strategy_ops dt_mirrored_ops = {
    .name = "mirrored",
    .check = check,
    .replicas_in_sync = replicas,
    .local_replicas = replicas,
    .run = dt_strategy_run_on_threads,
    DT_ALLREDUCE_REPLICA_OPS,
};
