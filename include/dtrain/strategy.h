/* Distribution strategies for a custom training loop, as tf.distribute offers them: how many
 * replicas train in sync, running the user's step function on each, reducing values across
 * them, and splitting a global batch.
 *
 *   one_device             one replica, on the calling thread
 *   mirrored               n replicas on threads of this process, each with its own copy of the
 *                          model, in lock-step through the local communicator
 *   central_storage        n replicas on threads of this process sharing one copy of the
 *                          variables (dt_model_share_params); replica 0 applies the updates
 *   multi_worker_mirrored  one replica per process of a cluster, through the communicator given
 *                          (tcp or mpi); every process calls dt_strategy_run itself
 *
 * dt_strategy_run calls fn once per local replica, with the replica's id (0 .. replicas in sync)
 * and its communicator (NULL for one_device): fn builds or finds its replica's model and data and
 * runs its steps, calling dt_strategy_reduce to agree with the others (dt_fit_dataset with
 * cfg->comm set is such a step loop). After every local replica has returned, it returns the
 * failure of the first replica that failed on its own (before those that timed out waiting for
 * it). */
#ifndef DTRAIN_STRATEGY_H
#define DTRAIN_STRATEGY_H

#include <stdint.h>

#include "dtrain/comm.h"

typedef enum {
    DT_STRATEGY_ONE_DEVICE,
    DT_STRATEGY_MIRRORED,
    DT_STRATEGY_MULTI_WORKER_MIRRORED,
    DT_STRATEGY_CENTRAL_STORAGE,
} dt_strategy_kind;

typedef struct dt_strategy dt_strategy;

/* replicas: mirrored's and central_storage's local replicas (>= 1; ignored otherwise). comm: multi_worker_mirrored's
 * communicator (borrowed; required), NULL otherwise. timeout: seconds a mirrored replica waits
 * for the others in a collective. */
dt_status dt_strategy_create(dt_strategy_kind kind, int replicas, dt_comm *comm, double timeout,
                             dt_strategy **out);
/* Accepts NULL. */
void dt_strategy_destroy(dt_strategy *s);

const char *dt_strategy_name(dt_strategy_kind kind);
/* "one_device", "mirrored", "multi_worker_mirrored", "central_storage" -> kind;
 * DT_ERR_INVALID otherwise. */
dt_status dt_strategy_parse(const char *name, dt_strategy_kind *kind);

/* Replicas training in sync, over every process of the cluster. */
int dt_strategy_num_replicas_in_sync(const dt_strategy *s);

/* The per-replica batch of a global batch: global / replicas; DT_ERR_INVALID when it does not
 * divide, as tf.distribute refuses it. */
dt_status dt_strategy_per_replica_batch(const dt_strategy *s, int64_t global_batch,
                                        int64_t *per_replica);

typedef dt_status (*dt_replica_fn)(void *ctx, int replica_id, dt_comm *comm);

/* Runs fn on every local replica (mirrored: each on its own thread, replica 0 on the caller's). */
dt_status dt_strategy_run(dt_strategy *s, dt_replica_fn fn, void *ctx);

/* Inside fn: values (n_elems) become their SUM or MEAN over every replica in sync (MIN and MAX
 * too). comm is fn's; NULL (one_device) leaves values as they are. */
dt_status dt_strategy_reduce(dt_comm *comm, dt_reduce_op op, float *values, size_t n_elems);

#endif
