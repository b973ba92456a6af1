/* central_storage: replicas on threads of this process sharing one copy of the variables (the
 * chief's, dt_model_share_params); compute is replicated, the update central. The gradients are
 * summed as mirrored sums them, then replica 0 alone applies the update, and no replica computes
 * the next step before it is done. Only the chief keeps optimizer state. */
#include "strategy_impl.h"

static dt_status check(const dt_strategy_options *o)
{
    if (o->replicas < 1 || o->replicas > 256)
        return dt_error(DT_ERR_INVALID, "central_storage: %d replicas (1..256)", o->replicas);
    return dt_allreduce_check(o);
}

static int replicas(const dt_strategy *s) { return s->opts.replicas; }

/* One copy of the variables: nothing to broadcast at the start or after a restore, nowhere else
 * to keep them, and no slots but the chief's. */
static dt_status nothing_restored(dt_replica *r, dt_model *m, dt_optim *o)
{
    (void)r, (void)m, (void)o;
    return DT_OK;
}

static dt_status nowhere_else(dt_replica *r, dt_model *m)
{
    (void)r, (void)m;
    return DT_OK;
}

static dt_status shared_variables(dt_replica *r, dt_model *m, const dt_model *chief,
                                 dt_optim *o, const dt_optim_config *ocfg, uint64_t seed)
{
    (void)r, (void)o, (void)ocfg, (void)seed;
    return dt_model_share_params(m, chief);
}

static dt_status apply(dt_replica *r, dt_model *m, dt_optim *o, dt_pool *pool, dt_step *s)
{
    dt_status st = dt_allreduce_sum(r, m, s);
    if (st || s->ended)
        return st;
    dt_arena *params = dt_model_params(m), *grads = dt_model_grads(m);
    if (r->id == 0)
        dt_optim_step(o, pool, params->data, grads->data, params->n_elems);
    if ((st = dt_comm_barrier(r->comm)))
        return dt_error_prefix(st, "step %lld", (long long)s->step);
    return DT_OK;
}

const dt_strategy_ops dt_central_storage_ops = {
    .name = "central_storage",
    .check = check,
    .replicas_in_sync = replicas,
    .local_replicas = replicas,
    .run = dt_strategy_run_on_threads,
    .variables = shared_variables,
    .start = dt_allreduce_start_buckets,
    .restored = nothing_restored,
    .place = nowhere_else,
    .begin_step = dt_allreduce_begin_step,
    .apply = apply,
    .whole_state = nothing_restored,
    .end = dt_allreduce_end,
};
