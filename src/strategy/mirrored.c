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
    .variables = dt_own_variables,
    .start = dt_allreduce_start,
    .restored = dt_allreduce_restored,
    .place = dt_allreduce_place,
    .begin_step = dt_allreduce_begin_step,
    .apply = dt_allreduce_apply,
    .whole_state = dt_allreduce_whole_state,
    .end = dt_allreduce_end,
};
