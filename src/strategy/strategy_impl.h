/* The strategy table and the state behind dt_strategy and dt_replica (internal to src/strategy).
 *
 * A strategy is one table of functions: what it checks in its options, how many replicas it
 * runs and where, and what each replica does at each point of the training loop (replica.h).
 * Each strategy is one file that defines its table; strategy.c dispatches. A new strategy (the
 * parameter server's coordinator, whose variables live in other processes, or one that sends
 * row-wise gradients) is one more table. */
#ifndef DTRAIN_STRATEGY_IMPL_H
#define DTRAIN_STRATEGY_IMPL_H

#include "dtrain/strategy.h"
#include "gradsync.h"
#include "replica.h"
#include "store_choice.h"

typedef struct dt_strategy_ops {
    const char *name;
    /* The options' check at create: DT_ERR_INVALID naming the option. */
    dt_status (*check)(const dt_strategy_options *o);
    /* Replicas in sync over the cluster, and those of this process. */
    int (*replicas_in_sync)(const dt_strategy *s);
    int (*local_replicas)(const dt_strategy *s);
    /* Runs fn on each local replica (see dt_strategy_run). */
    dt_status (*run)(dt_strategy *s, dt_replica_fn fn, void *ctx);
    /* A local replica's variables beside the chief's (dt_replica_create_variables). */
    dt_status (*variables)(dt_replica *r, dt_model *m, const dt_model *chief, dt_optim *o,
                           const dt_optim_config *ocfg, uint64_t seed);
    /* The replica's part of the training loop, as replica.h describes each. Called only for a
     * replica that trains with others: one alone uses one_device's. */
    dt_status (*start)(dt_replica *r, dt_model *m);
    dt_status (*restored)(dt_replica *r, dt_model *m, dt_optim *o);
    dt_status (*place)(dt_replica *r, dt_model *m);
    dt_status (*begin_step)(dt_replica *r, dt_model *m, dt_step *s, bool *go_on);
    dt_status (*apply)(dt_replica *r, dt_model *m, dt_optim *o, dt_pool *pool, dt_step *s);
    dt_status (*whole_state)(dt_replica *r, dt_model *m, dt_optim *o);
    void (*end)(dt_replica *r, dt_model *m);
} dt_strategy_ops;

struct dt_strategy {
    dt_strategy_kind kind;
    const dt_strategy_ops *ops;
    dt_strategy_options opts;
};

struct dt_replica {
    const dt_strategy_ops *ops; /* the strategy's, or one_device's when it trains alone */
    const dt_strategy *strategy;/* NULL for a replica made by dt_replica_alone */
    int id, count;              /* its rank among the replicas in sync, and their number */
    dt_comm *comm;              /* among them; NULL alone */
    dt_wire_dtype wire;
    size_t bucket_bytes;
    /* During a fit. */
    dt_gradsync *gs;            /* gradient buckets, when they travel during backward */
    bool shared_storage;        /* the variables are in memory the replicas share */
    dt_store_choice stores;     /* plain or streaming stores into that memory */
    void *sparse_buf;           /* gathered table rows (sparse_sync.c) */
    size_t sparse_cap;
};

/* A replica's handle, for the run functions: alone (count 1) it takes one_device's table. */
void dt_replica_setup(dt_replica *r, const dt_strategy *s, int id, int count, dt_comm *comm);

/* Replicas on threads of this process through a local communicator (mirrored and
 * central_storage's run). */
dt_status dt_strategy_run_on_threads(dt_strategy *s, dt_replica_fn fn, void *ctx);

extern const dt_strategy_ops dt_one_device_ops;
extern const dt_strategy_ops dt_mirrored_ops;
extern const dt_strategy_ops dt_central_storage_ops;
extern const dt_strategy_ops dt_multi_worker_mirrored_ops;

/* The all-reduce step that mirrored and multi_worker_mirrored share (allreduce.c), and that
 * central_storage takes parts of. */
dt_status dt_allreduce_start(dt_replica *r, dt_model *m);
dt_status dt_allreduce_start_buckets(dt_replica *r, dt_model *m);
dt_status dt_allreduce_restored(dt_replica *r, dt_model *m, dt_optim *o);
dt_status dt_allreduce_place(dt_replica *r, dt_model *m);
dt_status dt_allreduce_begin_step(dt_replica *r, dt_model *m, dt_step *s, bool *go_on);
dt_status dt_allreduce_apply(dt_replica *r, dt_model *m, dt_optim *o, dt_pool *pool, dt_step *s);
/* The step's figures summed, and the gradients summed (not applied); s->ended stops before. */
dt_status dt_allreduce_sum(dt_replica *r, dt_model *m, dt_step *s);
dt_status dt_allreduce_whole_state(dt_replica *r, dt_model *m, dt_optim *o);
void dt_allreduce_end(dt_replica *r, dt_model *m);
dt_status dt_allreduce_check(const dt_strategy_options *o);
/* The replica's rows of a table for the all-reduce step (mirrored, multi_worker_mirrored). */
#define DT_ALLREDUCE_REPLICA_OPS                                                                   \
    .variables = dt_own_variables, .start = dt_allreduce_start,                                   \
    .restored = dt_allreduce_restored, .place = dt_allreduce_place,                               \
    .begin_step = dt_allreduce_begin_step, .apply = dt_allreduce_apply,                           \
    .whole_state = dt_allreduce_whole_state, .end = dt_allreduce_end

/* The tables' sparse gradients summed over the replicas in sync, times rescale (sparse_sync.c);
 * the bytes this replica sent go to s->table_bytes. */
dt_status dt_sparse_sync_tables(dt_replica *r, dt_model *m, float rescale, dt_step *s);
/* The chief's tables (and their slots when slots) to every replica. */
dt_status dt_sparse_broadcast_tables(dt_replica *r, dt_model *m, bool slots);
void dt_sparse_sync_free(dt_replica *r);

/* Variables of a replica's own: its copy, its slots. */
dt_status dt_own_variables(dt_replica *r, dt_model *m, const dt_model *chief, dt_optim *o,
                           const dt_optim_config *ocfg, uint64_t seed);

#endif
