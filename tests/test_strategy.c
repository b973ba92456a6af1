/* Strategies for custom training loops: replicas in sync, per-replica batches, a step function
 * run on every replica with values reduced across them, and failures named by replica. */
#include <string.h>

#include "dtrain/model.h"
#include "dtrain/model_spec.h"
#include "dtrain/strategy.h"
#include "test.h"

/* A strategy of kind with `replicas` local replicas and a collective timeout. */
static dt_status make(dt_strategy_kind kind, int replicas, double timeout, dt_strategy **out)
{
    dt_strategy_options o;
    dt_strategy_options_default(&o);
    o.replicas = replicas;
    o.timeout = timeout;
    return dt_strategy_create(kind, &o, out);
}

TEST(strategy_names_and_per_replica_batches)
{
    dt_strategy_kind k;
    CHECK_OK(dt_strategy_parse("mirrored", &k));
    CHECK(k == DT_STRATEGY_MIRRORED && strcmp(dt_strategy_name(k), "mirrored") == 0);
    CHECK_ERR(dt_strategy_parse("central", &k), DT_ERR_INVALID, "unknown strategy 'central'");
    dt_strategy *s;
    CHECK_OK(make(DT_STRATEGY_MIRRORED, 4, 5.0, &s));
    CHECK(dt_strategy_num_replicas_in_sync(s) == 4);
    int64_t b;
    CHECK_OK(dt_strategy_per_replica_batch(s, 64, &b));
    CHECK(b == 16);
    CHECK_ERR(dt_strategy_per_replica_batch(s, 66, &b), DT_ERR_INVALID,
              "the global batch 66 is not divisible by the 4 replicas in sync");
    dt_strategy_destroy(s);
    CHECK_ERR(make(DT_STRATEGY_MULTI_WORKER_MIRRORED, 1, 5.0, &s),
              DT_ERR_INVALID, "needs a communicator");
    CHECK_OK(make(DT_STRATEGY_ONE_DEVICE, 9, 5.0, &s));
    CHECK(dt_strategy_num_replicas_in_sync(s) == 1);
    dt_strategy_destroy(s);
    CHECK_ERR(make(DT_STRATEGY_MIRRORED, 0, 5.0, &s), DT_ERR_INVALID, "mirrored: 0 replicas");
    CHECK_ERR(make(DT_STRATEGY_CENTRAL_STORAGE, 257, 5.0, &s), DT_ERR_INVALID,
              "central_storage: 257 replicas");
    /* Named, and run by dt_train rather than as replicas of one loop. */
    CHECK_OK(dt_strategy_parse("parameter_server", &k));
    CHECK_ERR(make(k, 1, 5.0, &s), DT_ERR_UNSUPPORTED, "dt_train runs it");
}

typedef struct {
    float sums[8], means[8];
    int ranks[8], calls;
    int fail_replica; /* -1: none */
} run_ctx;

/* A step function: replica i contributes i + 1; the reduction must be the same on all. */
static dt_status step(void *arg, dt_replica *r)
{
    run_ctx *c = arg;
    int id = dt_replica_id(r);
    dt_comm *comm = dt_replica_comm(r);
    __atomic_add_fetch(&c->calls, 1, __ATOMIC_RELAXED);
    if (id == c->fail_replica)
        return dt_error(DT_ERR_NUMERIC, "step 7: the loss is nan");
    c->ranks[id] = comm ? comm->rank : 0;
    float v[2] = {(float)(id + 1), (float)(id + 1)};
    dt_status st = dt_strategy_reduce(r, DT_REDUCE_SUM, &v[0], 1);
    if (st == DT_OK)
        st = dt_strategy_reduce(r, DT_REDUCE_MEAN, &v[1], 1);
    c->sums[id] = v[0];
    c->means[id] = v[1];
    return st;
}

TEST(strategy_runs_the_step_on_every_replica_and_reduces)
{
    dt_strategy *s;
    run_ctx c;
    memset(&c, 0, sizeof c);
    c.fail_replica = -1;
    CHECK_OK(make(DT_STRATEGY_MIRRORED, 3, 5.0, &s));
    CHECK_OK(dt_strategy_run(s, step, &c));
    CHECK(c.calls == 3);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(c.sums[i] == 6.0f && c.means[i] == 2.0f && c.ranks[i] == i,
                  "replica %d: sum %g mean %g rank %d", i, c.sums[i], c.means[i], c.ranks[i]);
    dt_strategy_destroy(s);
    /* one_device: the step once, reductions leave the value. */
    memset(&c, 0, sizeof c);
    c.fail_replica = -1;
    CHECK_OK(make(DT_STRATEGY_ONE_DEVICE, 1, 5.0, &s));
    CHECK_OK(dt_strategy_run(s, step, &c));
    CHECK(c.calls == 1 && c.sums[0] == 1.0f && c.means[0] == 1.0f);
    dt_strategy_destroy(s);
}

TEST(strategy_names_the_replica_that_failed)
{
    dt_strategy *s;
    run_ctx c;
    memset(&c, 0, sizeof c);
    c.fail_replica = 2;
    /* The others wait for replica 2 in their reduction and time out; the cause is named. */
    CHECK_OK(make(DT_STRATEGY_MIRRORED, 3, 0.3, &s));
    CHECK_ERR(dt_strategy_run(s, step, &c), DT_ERR_NUMERIC, "replica 2: step 7: the loss is nan");
    dt_strategy_destroy(s);
}

TEST(central_storage_shares_one_copy_of_the_variables)
{
    dt_strategy_kind k;
    CHECK_OK(dt_strategy_parse("central_storage", &k));
    CHECK(k == DT_STRATEGY_CENTRAL_STORAGE);
    dt_model_spec a, b;
    CHECK_OK(dt_model_spec_builtin("mlp", &a));
    b = a;
    a.input_shape[0] = 4, a.input_shape[1] = 4, a.input_shape[2] = 1;
    b.input_shape[0] = 5, b.input_shape[1] = 5, b.input_shape[2] = 1;
    dt_model *owner, *same, *other;
    CHECK_OK(dt_model_create(&a, 4, NULL, NULL, &owner));
    CHECK_OK(dt_model_create(&a, 4, NULL, NULL, &same));
    CHECK_OK(dt_model_create(&b, 4, NULL, NULL, &other));
    dt_model_init_params(owner, 1);
    CHECK_OK(dt_model_share_params(same, owner));
    CHECK(dt_model_params(same)->data == dt_model_params(owner)->data);
    CHECK_ERR(dt_model_share_params(other, owner), DT_ERR_INVALID, "layouts differ");
    /* Each frees its own storage only (ASan checks). */
    dt_model_destroy(same);
    dt_model_destroy(other);
    dt_model_destroy(owner);
}
