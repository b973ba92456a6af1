/* The strategy handle and the replica's calls, dispatched to each strategy's table (see
 * include/dtrain/strategy.h, replica.h and strategy_impl.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../coll/agree.h"
#include "strategy_impl.h"

/* Indexed by dt_strategy_kind; NULL where this build has no such strategy. */
static const char *const names[] = {"one_device", "mirrored", "multi_worker_mirrored",
                                    "central_storage", "parameter_server"};
static const dt_strategy_ops *const tables[] = {&dt_one_device_ops, &dt_mirrored_ops,
                                                &dt_multi_worker_mirrored_ops,
                                                &dt_central_storage_ops, NULL};
#define N_KINDS (int)(sizeof names / sizeof names[0])

const char *dt_strategy_name(dt_strategy_kind kind)
{
    return (unsigned)kind < (unsigned)N_KINDS ? names[kind] : "?";
}

dt_status dt_strategy_parse(const char *name, dt_strategy_kind *kind)
{
    for (int i = 0; i < N_KINDS; i++)
        if (strcmp(name, names[i]) == 0) {
            *kind = (dt_strategy_kind)i;
            return DT_OK;
        }
    return dt_error(DT_ERR_INVALID, "unknown strategy '%s' (one_device, mirrored, "
                    "multi_worker_mirrored, central_storage, parameter_server)", name);
}

void dt_strategy_options_default(dt_strategy_options *o)
{
    memset(o, 0, sizeof *o);
    o->replicas = 1;
    o->wire = DT_WIRE_F32;
}

dt_status dt_strategy_create(dt_strategy_kind kind, const dt_strategy_options *o,
                             dt_strategy **out)
{
    *out = NULL;
    if ((unsigned)kind >= (unsigned)N_KINDS)
        return dt_error(DT_ERR_INVALID, "strategy kind %d", (int)kind);
    if (!tables[kind])
        return dt_error(DT_ERR_UNSUPPORTED, "%s is not a strategy of replicas in one loop: "
                        "dt_train runs it (one_device, mirrored, central_storage and "
                        "multi_worker_mirrored are)", names[kind]);
    dt_status st = tables[kind]->check(o);
    if (st)
        return st;
    dt_strategy *s = calloc(1, sizeof *s);
    if (!s)
        return dt_error(DT_ERR_NOMEM, "no memory for a strategy");
    s->kind = kind;
    s->ops = tables[kind];
    s->opts = *o;
    if (s->opts.timeout <= 0.0)
        s->opts.timeout = 60.0;
    *out = s;
    return DT_OK;
}

void dt_strategy_destroy(dt_strategy *s) { free(s); }

dt_strategy_kind dt_strategy_kind_of(const dt_strategy *s) { return s->kind; }

int dt_strategy_num_replicas_in_sync(const dt_strategy *s) { return s->ops->replicas_in_sync(s); }

int dt_strategy_local_replicas(const dt_strategy *s) { return s->ops->local_replicas(s); }

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

dt_status dt_strategy_run(dt_strategy *s, dt_replica_fn fn, void *ctx)
{
    return s->ops->run(s, fn, ctx);
}

/* ---- Replicas on threads ---- */

typedef struct {
    dt_replica_fn fn;
    void *ctx;
    dt_replica replica;
    pthread_t thread;
    dt_status st;
    char msg[1024];
} replica_run;

static void *replica_thread(void *arg)
{
    replica_run *r = arg;
    r->st = r->fn(r->ctx, &r->replica);
    if (r->st)
        snprintf(r->msg, sizeof r->msg, "%s", dt_last_error());
    return NULL;
}

/* The cause, not its echo: a replica that failed on its own is named before those that then
 * timed out waiting for it. */
static dt_status first_failure(const replica_run *runs, int n)
{
    for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < n; r++)
            if (runs[r].st && (pass == 1 || runs[r].st != DT_ERR_TIMEOUT))
                return dt_error(runs[r].st, "replica %d: %s", r, runs[r].msg);
    return DT_OK;
}

dt_status dt_strategy_run_on_threads(dt_strategy *s, dt_replica_fn fn, void *ctx)
{
    int n = s->opts.replicas, started = 0;
    dt_local_group *g = NULL;
    replica_run *runs = calloc((size_t)n, sizeof *runs);
    dt_status st = runs ? dt_local_group_create(n, s->opts.timeout, &g)
                        : dt_error(DT_ERR_NOMEM, "no memory for %d replicas", n);
    for (int r = 0; st == DT_OK && r < n; r++) {
        dt_comm *comm = NULL;
        runs[r] = (replica_run){.fn = fn, .ctx = ctx};
        st = dt_comm_local(g, r, &comm);
        dt_replica_setup(&runs[r].replica, s, r, n, comm);
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
    if (st == DT_OK)
        st = first_failure(runs, n);
    for (int r = 0; runs && r < n; r++)
        dt_comm_destroy(runs[r].replica.comm);
    dt_local_group_destroy(g);
    free(runs);
    return st;
}

/* ---- The replica ---- */

void dt_replica_setup(dt_replica *r, const dt_strategy *s, int id, int count, dt_comm *comm)
{
    memset(r, 0, sizeof *r);
    r->strategy = s;
    r->ops = count > 1 ? s->ops : &dt_one_device_ops;
    r->id = id;
    r->count = count;
    r->comm = comm;
    r->wire = s->opts.wire;
    r->bucket_bytes = s->opts.bucket_bytes;
}

dt_status dt_replica_alone(dt_replica **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return dt_error(DT_ERR_NOMEM, "no memory for a replica");
    (*out)->ops = &dt_one_device_ops;
    (*out)->count = 1;
    return DT_OK;
}

void dt_replica_free_alone(dt_replica *r) { free(r); }

/* The replica first, so that its address is the block's. */
typedef struct {
    dt_replica replica;
    dt_strategy *strategy;
} replica_over;

dt_status dt_replica_over(dt_comm *comm, dt_replica **out)
{
    *out = NULL;
    replica_over *o = calloc(1, sizeof *o);
    if (!o)
        return dt_error(DT_ERR_NOMEM, "no memory for a replica");
    dt_strategy_options so;
    dt_strategy_options_default(&so);
    so.comm = comm;
    dt_status st = dt_strategy_create(DT_STRATEGY_MULTI_WORKER_MIRRORED, &so, &o->strategy);
    if (st) {
        free(o);
        return st;
    }
    dt_replica_setup(&o->replica, o->strategy, comm->rank, comm->size, comm);
    *out = &o->replica;
    return DT_OK;
}

void dt_replica_free_over(dt_replica *r)
{
    if (!r)
        return;
    replica_over *o = (replica_over *)r;
    dt_strategy_destroy(o->strategy);
    free(o);
}

int dt_replica_id(const dt_replica *r) { return r->id; }
int dt_replica_count(const dt_replica *r) { return r->count; }
dt_comm *dt_replica_comm(const dt_replica *r) { return r->comm; }
const dt_strategy *dt_replica_strategy(const dt_replica *r) { return r->strategy; }
bool dt_replica_is_chief(const dt_replica *r) { return r->id == 0; }
bool dt_replica_distributed(const dt_replica *r) { return r->count > 1; }

dt_status dt_strategy_reduce(dt_replica *r, dt_reduce_op op, float *values, size_t n_elems)
{
    if (!dt_replica_distributed(r))
        return DT_OK;
    return dt_comm_allreduce(r->comm, values, n_elems, op, DT_WIRE_F32);
}

dt_status dt_replica_broadcast(dt_replica *r, void *data, size_t n_bytes)
{
    if (!dt_replica_distributed(r))
        return DT_OK;
    return dt_comm_broadcast(r->comm, data, n_bytes, 0);
}

dt_status dt_replica_create_variables(dt_replica *r, dt_model *m, const dt_model *chief,
                                      dt_optim *o, const dt_optim_config *ocfg, uint64_t seed)
{
    /* The strategy's, even for a replica that trains alone: where its variables live is the
     * strategy's choice, not the count's. */
    const dt_strategy_ops *ops = r->strategy ? r->strategy->ops : r->ops;
    return ops->variables(r, m, chief, o, ocfg, seed);
}

dt_status dt_own_variables(dt_replica *r, dt_model *m, const dt_model *chief, dt_optim *o,
                           const dt_optim_config *ocfg, uint64_t seed)
{
    (void)r, (void)chief;
    dt_model_init_params(m, seed);
    return dt_model_setup_optimizer(m, o, ocfg);
}

dt_status dt_replica_decide(dt_replica *r, bool *flag)
{
    if (!dt_replica_distributed(r))
        return DT_OK;
    dt_agree_msg m = {.type = DT_AGREE_DECISION, .n_ints = 1, .ints = {*flag ? 1 : 0}};
    dt_status st = dt_comm_agree_from(r->comm, &m, 0);
    if (st == DT_OK)
        *flag = m.ints[0] != 0;
    return st;
}

dt_status dt_replica_share_fields(dt_replica *r, int64_t *ints, int n_ints, double *reals,
                                  int n_reals)
{
    if (!dt_replica_distributed(r))
        return DT_OK;
    if (n_ints > DT_AGREE_MAX_INTS || n_reals > DT_AGREE_MAX_REALS)
        return dt_error(DT_ERR_INVALID, "%d integers and %d reals do not fit a message", n_ints,
                        n_reals);
    dt_agree_msg m = {.type = DT_AGREE_RESTORE, .n_ints = n_ints, .n_reals = n_reals};
    memcpy(m.ints, ints, (size_t)n_ints * sizeof *ints);
    memcpy(m.reals, reals, (size_t)n_reals * sizeof *reals);
    dt_status st = dt_comm_agree_from(r->comm, &m, 0);
    if (st == DT_OK) {
        memcpy(ints, m.ints, (size_t)n_ints * sizeof *ints);
        memcpy(reals, m.reals, (size_t)n_reals * sizeof *reals);
    }
    return st;
}

dt_status dt_replica_start(dt_replica *r, dt_model *m)
{
    /* central_storage keeps one copy of the dense variables; its replicas' tables would each be
     * updated from their own rows alone. */
    if (dt_model_num_tables(m) > 0 && dt_replica_distributed(r) &&
        r->ops == &dt_central_storage_ops)
        return dt_error(DT_ERR_UNSUPPORTED, "model %s has embedding tables: central_storage does "
                        "not train them (mirrored and multi_worker_mirrored do)",
                        dt_model_spec_of(m)->name);
    return r->ops->start(r, m);
}

dt_status dt_replica_restored(dt_replica *r, dt_model *m, dt_optim *o)
{
    return r->ops->restored(r, m, o);
}

dt_status dt_replica_place(dt_replica *r, dt_model *m) { return r->ops->place(r, m); }

dt_status dt_replica_begin_step(dt_replica *r, dt_model *m, dt_step *s, bool *go_on)
{
    return r->ops->begin_step(r, m, s, go_on);
}

dt_status dt_replica_apply(dt_replica *r, dt_model *m, dt_optim *o, dt_pool *pool, dt_step *s)
{
    return r->ops->apply(r, m, o, pool, s);
}

dt_status dt_replica_whole_state(dt_replica *r, dt_model *m, dt_optim *o)
{
    return r->ops->whole_state(r, m, o);
}

void dt_replica_end(dt_replica *r, dt_model *m) { r->ops->end(r, m); }

void dt_replica_update_tables(dt_model *m, const dt_optim *o, dt_pool *pool)
{
    if (dt_model_num_tables(m) == 0)
        return;
    /* A schedule scales the tables' rate as it scales the dense one. */
    float scale = dt_optim_current_lr(o) / o->cfg.lr;
    dt_model_update_tables(m, scale, o->iterations + 1, pool);
}
