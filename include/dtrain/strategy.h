/* Distribution strategies, as tf.distribute offers them: how many replicas train in sync, where
 * the variables live, and how gradients become one update.
 *
 *   one_device             one replica, on the calling thread
 *   mirrored               n replicas on threads of this process, each with its own copy of the
 *                          model, kept identical by all-reduce through the local communicator
 *   central_storage        n replicas on threads of this process sharing one copy of the
 *                          variables (dt_model_share_params); replica 0 applies the updates
 *   multi_worker_mirrored  one replica per process of a cluster, through the communicator given
 *                          (tcp or mpi); every process calls dt_strategy_run itself
 *   parameter_server       variables on ps tasks, steps scheduled by a coordinator on worker
 *                          processes: dt_train runs it (train.h), whose processes are not
 *                          replicas of one loop, so dt_strategy_create refuses it
 *
 * dt_strategy_run calls fn once per local replica with that replica's handle: fn builds or finds
 * its replica's model and data and trains, with dt_fit_replica (fit.h) or its own step loop that
 * calls dt_strategy_reduce to agree with the others. After every local replica has returned, it
 * returns the failure of the first replica that failed on its own (before those that timed out
 * waiting for it). Each strategy is one file of src/strategy/ behind one table of functions. */
#ifndef DTRAIN_STRATEGY_H
#define DTRAIN_STRATEGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/comm.h"
#include "dtrain/model.h"
#include "dtrain/optim.h"

typedef enum {
    DT_STRATEGY_ONE_DEVICE,
    DT_STRATEGY_MIRRORED,
    DT_STRATEGY_MULTI_WORKER_MIRRORED,
    DT_STRATEGY_CENTRAL_STORAGE,
    DT_STRATEGY_PARAMETER_SERVER,
} dt_strategy_kind;

/* Each strategy reads the options that concern it and ignores the others. */
typedef struct {
    int replicas;          /* mirrored, central_storage: local replicas, 1..256 */
    double timeout;        /* mirrored, central_storage: seconds a replica waits for the others
                              in a collective (<= 0: 60) */
    dt_comm *comm;         /* multi_worker_mirrored: the cluster's communicator (borrowed,
                              required) */
    dt_wire_dtype wire;    /* mirrored, multi_worker_mirrored: gradients on the wire */
    size_t bucket_bytes;   /* mirrored, central_storage, multi_worker_mirrored: gradient buckets
                              all-reduced during backward (the first at most 1 MiB); 0: one
                              all-reduce after backward */
} dt_strategy_options;

typedef struct dt_strategy dt_strategy;
typedef struct dt_replica dt_replica;

/* One replica, float32 on the wire, no buckets. */
DT_API void dt_strategy_options_default(dt_strategy_options *o);

/* DT_ERR_INVALID naming the option when o does not suit kind; DT_ERR_UNSUPPORTED for
 * parameter_server. o is copied (its communicator stays borrowed). */
DT_API dt_status dt_strategy_create(dt_strategy_kind kind, const dt_strategy_options *o,
                                    dt_strategy **out);
/* Accepts NULL. */
DT_API void dt_strategy_destroy(dt_strategy *s);

DT_API const char *dt_strategy_name(dt_strategy_kind kind);
/* "one_device", "mirrored", "multi_worker_mirrored", "central_storage", "parameter_server" ->
 * kind; DT_ERR_INVALID otherwise. */
DT_API dt_status dt_strategy_parse(const char *name, dt_strategy_kind *kind);
DT_API dt_strategy_kind dt_strategy_kind_of(const dt_strategy *s);

/* Replicas training in sync, over every process of the cluster. */
DT_API int dt_strategy_num_replicas_in_sync(const dt_strategy *s);
/* Replicas of this process (threads): mirrored's and central_storage's count, else 1. */
DT_API int dt_strategy_local_replicas(const dt_strategy *s);

/* The per-replica batch of a global batch: global / replicas; DT_ERR_INVALID when it does not
 * divide, as tf.distribute refuses it. */
DT_API dt_status dt_strategy_per_replica_batch(const dt_strategy *s, int64_t global_batch,
                                               int64_t *per_replica);

typedef dt_status (*dt_replica_fn)(void *ctx, dt_replica *r);

/* Runs fn on every local replica (mirrored: each on its own thread, replica 0 on the caller's). */
DT_API dt_status dt_strategy_run(dt_strategy *s, dt_replica_fn fn, void *ctx);

/* Inside fn: this replica's id (0 .. replicas in sync - 1; 0 is the chief, which reports and
 * writes checkpoints), the replicas in sync, and the communicator among them (NULL when it
 * trains alone). */
DT_API int dt_replica_id(const dt_replica *r);
DT_API int dt_replica_count(const dt_replica *r);
DT_API dt_comm *dt_replica_comm(const dt_replica *r);
DT_API const dt_strategy *dt_replica_strategy(const dt_replica *r);

/* Inside fn, for a replica other than the process's first: its variables, made beside the
 * chief's model (built from the same spec). central_storage shares the chief's one copy and
 * gives the replica no optimizer state; the others give it its own copy, initialised from seed
 * (the chief's values reach it when training starts), and its own slots as ocfg says. */
DT_API dt_status dt_replica_create_variables(dt_replica *r, dt_model *m, const dt_model *chief,
                                             dt_optim *o, const dt_optim_config *ocfg,
                                             uint64_t seed);

/* Inside fn: values (n_elems) become their SUM or MEAN over every replica in sync (MIN and MAX
 * too); alone, they stay as they are. */
DT_API dt_status dt_strategy_reduce(dt_replica *r, dt_reduce_op op, float *values, size_t n_elems);

#endif
