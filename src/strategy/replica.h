/* What the training loop asks of a replica's strategy, step by step (internal to the library:
 * src/train calls these, src/strategy implements them).
 *
 * The loop is the same for every strategy; what differs is behind these calls: how the replicas
 * start from the same variables, how a restored checkpoint reaches every replica, where the
 * variables are stored, whether the replicas agree on a step before it, how gradients become
 * one update, and how the optimizer's state is made whole before a save. A replica that trains
 * alone (one_device, or any strategy with one replica in sync) does none of the collective work. */
#ifndef DTRAIN_STRATEGY_REPLICA_H
#define DTRAIN_STRATEGY_REPLICA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/model.h"
#include "dtrain/optim.h"
#include "dtrain/pool.h"
#include "dtrain/strategy.h"

/* One training step as the strategy sees it. The loop fills the inputs and this replica's own
 * figures; the strategy turns them into the step's figures over every replica in sync. */
typedef struct {
    int64_t step;          /* the global step being taken, counted from 0 */
    int64_t batch_size;    /* the configured global batch */
    bool mean;             /* the loss is the batch's mean (else sum x 1 / batch_size) */
    /* This replica's on entry; summed over the replicas once the step is applied. */
    double loss;           /* the batch's summed loss */
    int64_t correct;       /* its correct predictions */
    int64_t rows;          /* its examples (after begin: the global batch, when agreed before) */
    bool ended;            /* this replica's data ended; once applied: some replica's did (or the
                            * batch is empty everywhere), and the step was not taken */
    bool state_wanted;     /* this replica needs the optimizer state whole after the step (to
                            * save it); once applied: some replica does */
    /* Set by begin: the rows the gradients are scaled for (1 / scaled_rows each example). */
    int64_t scaled_rows;
    double comm_seconds;   /* added to by the strategy: time waiting on the other replicas */
    int64_t table_bytes;   /* added to by the strategy: bytes of table gradients this replica
                            * sent (ids and rows) */
    bool dense_only;       /* the tables' rows are updated elsewhere (on the parameter server's
                            * ps tasks): the step updates the dense variables only */
} dt_step;

/* A replica of one_device, for a loop that is given none. */
dt_status dt_replica_alone(dt_replica **out);
/* Frees what dt_replica_alone made; accepts NULL. */
void dt_replica_free_alone(dt_replica *r);
/* A replica of multi_worker_mirrored over comm (one_device's when comm has one rank), for a
 * process that joins its ring outside a strategy's run: the parameter server's hybrid workers,
 * whose dense variables take the all-reduce step and whose tables live on the ps tasks. */
dt_status dt_replica_over(dt_comm *comm, dt_replica **out);
/* Frees what dt_replica_over made (before comm); accepts NULL. */
void dt_replica_free_over(dt_replica *r);

/* Rank 0 of the replicas: it reports, and writes and reads checkpoints. */
bool dt_replica_is_chief(const dt_replica *r);
/* Whether the replica trains with others (collectives happen). */
bool dt_replica_distributed(const dt_replica *r);

/* Before training: the variables of m start as the chief's, and gradients are set to travel
 * as the strategy wants (buckets during backward). */
dt_status dt_replica_start(dt_replica *r, dt_model *m);
/* After the chief restored a checkpoint into m and o: every replica gets its variables and
 * slots. */
dt_status dt_replica_restored(dt_replica *r, dt_model *m, dt_optim *o);
/* After restoring, before the first step: where the variables are kept for training (shared
 * storage on one host). */
dt_status dt_replica_place(dt_replica *r, dt_model *m);
/* Before computing a step: the replicas may agree on it (s->rows becomes the global batch), the
 * gradients are cleared, and s->scaled_rows is set. *go_on false: the step is not taken, and
 * the epoch ends for every replica. */
dt_status dt_replica_begin_step(dt_replica *r, dt_model *m, dt_step *s, bool *go_on);
/* After backward: the gradients of every replica become one update of the variables. When
 * s->ended on return, the step was not taken. Fails with DT_ERR_NUMERIC when the loss is not
 * finite on some replica. */
dt_status dt_replica_apply(dt_replica *r, dt_model *m, dt_optim *o, dt_pool *pool, dt_step *s);
/* Before a save: every replica's optimizer slots whole. */
dt_status dt_replica_whole_state(dt_replica *r, dt_model *m, dt_optim *o);
/* data (n_bytes) on every replica becomes the chief's; alone, nothing to do. */
dt_status dt_replica_broadcast(dt_replica *r, void *data, size_t n_bytes);
/* *flag on every replica becomes the chief's verdict; alone, nothing to do. */
dt_status dt_replica_decide(dt_replica *r, bool *flag);
/* ints (n_ints) and reals (n_reals) on every replica become the chief's, as a typed message
 * (a restored position); alone, nothing to do. */
dt_status dt_replica_share_fields(dt_replica *r, int64_t *ints, int n_ints, double *reals,
                                  int n_reals);
/* The tables' rows of the step's sparse gradients (summed over the replicas already, when they
 * train together), updated at the step the optimizer is about to take, with its schedule's
 * rate: before the dense update, which counts the step. */
void dt_replica_update_tables(dt_model *m, const dt_optim *o, dt_pool *pool);

/* After training, failed or not: the variables back in m's own storage, buckets stopped. */
void dt_replica_end(dt_replica *r, dt_model *m);

#endif
