/* All-reduce through shared memory for ranks on one host (used by the tcp communicator).
 *
 * When every rank of a cluster runs on the same machine, moving gradients through loopback TCP
 * costs two copies through the kernel, system calls and wakeups per segment. Instead the ranks
 * share one memory segment: each copies its data in, reduces its own block of every rank's copy
 * (in rank order, so every rank gets the same bits), and copies the other blocks out; ranks meet
 * at counters in the segment, spinning briefly, then sleeping on a futex. The same rounds can
 * also update what a rank owns between reducing and copying out (a sharded optimizer step); and
 * when the parameters and the gradients themselves live in shared memory (a second segment, set
 * up the same way), that step reads the peers' gradients and writes the one copy of the
 * parameters in place, with no copy at all.
 *
 * Setup runs over the authenticated connections: rank 0 creates the segment under a random name
 * in /dev/shm (mode 0600) with a random nonce inside, and sends name, nonce and its boot id to
 * every rank; each maps it and answers whether it could and found the nonce; rank 0 tells all
 * the outcome and removes the name. Ranks on other hosts (another boot id, or the name not
 * found) make every rank keep to TCP. So no one outside the cluster learns the name, and after
 * setup there is no name left to open.
 *
 * Failure: while waiting, a rank checks every peer it waits for through its TCP connection (a
 * closed connection or an ABORT frame fails the wait, naming the peer) and the collective's
 * deadline (which names the ranks that have not arrived). */
#ifndef DTRAIN_COLL_SHM_H
#define DTRAIN_COLL_SHM_H

#include <stddef.h>

#include "dtrain/comm.h"
#include "../net/transport.h"

typedef struct dt_shm_group dt_shm_group;

/* Sets up the segment among all ranks of t, or leaves *out NULL when they are not all on this
 * host (that is no error: the caller keeps to TCP). Errors: the connections failed. */
dt_status dt_shm_group_open(dt_transport *t, double timeout, dt_shm_group **out);

/* In place: data becomes op over every rank's data (MEAN: the sum divided by the ranks), the
 * same bits on every rank. x names the collective and holds its deadline. */
dt_status dt_shm_allreduce(dt_shm_group *g, dt_xfer *x, float *data, size_t n, dt_reduce_op op);

/* dt_comm_allreduce_update's sharded step: grads summed; each rank calls update on its own
 * block of every round, slice by slice, and copies the updated params into the segment; every
 * rank then copies the other blocks of params out. */
dt_status dt_shm_allreduce_update(dt_shm_group *g, dt_xfer *x, float *grads, float *params,
                                  size_t n, dt_update_fn update, void *ctx);

/* dt_comm_share_tensors: maps (once) a segment holding one copy of the parameters (n_params
 * floats, rank 0's params copied in) and each rank's gradients (n_grads floats), and returns
 * the copy and this rank's gradients; both NULL when the segment cannot be had, or a segment of
 * other sizes is mapped already. dt_shm_allreduce_update on exactly these then works in place. */
dt_status dt_shm_map_tensors(dt_shm_group *g, dt_xfer *x, const float *params, size_t n_params,
                             size_t n_grads, float **shared_params, float **shared_grads);

/* dt_comm_share_owned: each rank's blocks of data (those it owns in dt_shm_allreduce_update)
 * copied to every rank. */
dt_status dt_shm_share_owned(dt_shm_group *g, dt_xfer *x, float *data, size_t n);

/* recv (size x n_bytes) receives every rank's send, in rank order, through the segment:
 * DT_ERR_UNSUPPORTED, with no message and nothing done, unless n_bytes is a multiple of 4 and
 * all of them fit one round (4 MiB); the caller then goes over TCP. */
dt_status dt_shm_allgather(dt_shm_group *g, dt_xfer *x, const void *send, size_t n_bytes,
                           void *recv);

/* Accepts NULL. */
void dt_shm_group_close(dt_shm_group *g);

#endif
