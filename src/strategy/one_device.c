/* one_device: one replica on the calling thread, and the behaviour of any replica that trains
 * alone. Its variables are its own, its gradients its own update: nothing to agree on. */
#include <math.h>

#include "strategy_impl.h"

static dt_status check(const dt_strategy_options *o)
{
    (void)o;
    return DT_OK;
}

static int one(const dt_strategy *s)
{
    (void)s;
    return 1;
}

static dt_status run(dt_strategy *s, dt_replica_fn fn, void *ctx)
{
    dt_replica r;
    dt_replica_setup(&r, s, 0, 1, NULL);
    return fn(ctx, &r);
}

static dt_status nothing_to_share(dt_replica *r, dt_model *m)
{
    (void)r, (void)m;
    return DT_OK;
}

static dt_status nothing_restored(dt_replica *r, dt_model *m, dt_optim *o)
{
    (void)r, (void)m, (void)o;
    return DT_OK;
}

static dt_status begin_step(dt_replica *r, dt_model *m, dt_step *s, bool *go_on)
{
    (void)r;
    *go_on = !s->ended;
    s->scaled_rows = s->rows;
    if (*go_on)
        dt_model_zero_grads(m);
    return DT_OK;
}

static dt_status apply(dt_replica *r, dt_model *m, dt_optim *o, dt_pool *pool, dt_step *s)
{
    (void)r;
    if (!isfinite(s->loss))
        return dt_error(DT_ERR_NUMERIC, "step %lld: the loss is %g: training diverged (try a "
                        "lower --lr)", (long long)s->step, s->loss);
    if (!s->dense_only)
        dt_replica_update_tables(m, o, pool);
    dt_arena *params = dt_model_params(m), *grads = dt_model_grads(m);
    dt_optim_step(o, pool, params->data, grads->data, params->n_elems);
    return DT_OK;
}

static void end(dt_replica *r, dt_model *m) { (void)r, (void)m; }

const dt_strategy_ops dt_one_device_ops = {
    .name = "one_device",
    .check = check,
    .replicas_in_sync = one,
    .local_replicas = one,
    .run = run,
    .variables = dt_own_variables,
    .start = nothing_to_share,
    .restored = nothing_restored,
    .place = nothing_to_share,
    .begin_step = begin_step,
    .apply = apply,
    .whole_state = nothing_restored,
    .end = end,
};
