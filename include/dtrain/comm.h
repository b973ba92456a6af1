/* Communicators: the collectives synchronous training rests on, over one of three backends.
 *
 *   tcp    ours: one authenticated TCP connection per pair of ranks (net/transport), a segmented
 *          pipelined ring for large tensors and recursive doubling for small ones
 *   mpi    Open MPI (launched by mpirun or srun), loaded as a plugin so that builds and runs
 *          without MPI never load libmpi
 *   local  threads of one process sharing memory, for mirrored replicas and tests
 *
 * Every operation is collective: all ranks call it in the same order with the same counts. Every
 * operation has a deadline (the communicator's timeout): a peer that dies or stops answering makes
 * it fail with DT_ERR_PEER or DT_ERR_TIMEOUT and a message naming the peer (task type:index,
 * host:port) and the operation in flight, never hang. After a failure the communicator is broken:
 * every later operation fails at once with the first error.
 *
 * Counts split over ranks as MPI's do when they do not divide: dt_comm_block gives rank r the
 * elements [off, off + n) with the first n_elems % size ranks one element more. */
#ifndef DTRAIN_COMM_H
#define DTRAIN_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/block.h"
#include "dtrain/status.h"

typedef enum { DT_REDUCE_SUM, DT_REDUCE_MEAN, DT_REDUCE_MIN, DT_REDUCE_MAX } dt_reduce_op;

/* How float32 tensors travel: as they are, or rounded to bfloat16 or IEEE half (round to nearest
 * even; reduction still adds in float32), halving the bytes on the wire. */
typedef enum { DT_WIRE_F32, DT_WIRE_BF16, DT_WIRE_F16 } dt_wire_dtype;

typedef struct dt_comm dt_comm;

/* An owner's update in dt_comm_allreduce_update: sum[0, hi - lo) holds the sum over the ranks of
 * elements [lo, hi), and it updates params[lo, hi) from them (with whatever state it keeps for
 * those elements). */
typedef void (*dt_update_fn)(void *ctx, size_t lo, size_t hi, const float *sum);

/* A backend. Each slot is a collective over the communicator's ranks. */
typedef struct {
    const char *name;
    /* data (n_elems) on every rank becomes op over the ranks' data. MEAN divides the sum by size. */
    dt_status (*allreduce)(dt_comm *c, float *data, size_t n_elems, dt_reduce_op op,
                           dt_wire_dtype wire);
    /* In place: afterwards rank r's block (dt_comm_block) of data holds op over the ranks' data;
     * the rest of data is unspecified. */
    dt_status (*reduce_scatter)(dt_comm *c, float *data, size_t n_elems, dt_reduce_op op,
                                dt_wire_dtype wire);
    /* recv (size * n_bytes) receives every rank's send (n_bytes), in rank order. */
    dt_status (*allgather)(dt_comm *c, const void *send, size_t n_bytes, void *recv);
    /* data (n_bytes) on every rank becomes root's. */
    dt_status (*broadcast)(dt_comm *c, void *data, size_t n_bytes, int root);
    /* Returns when every rank has entered it. */
    dt_status (*barrier)(dt_comm *c);
    /* Frees the backend's state (impl); closes connections. */
    void (*destroy)(dt_comm *c);
    /* Optional (NULL: every rank updates everything; see dt_comm_allreduce_update). */
    dt_status (*allreduce_update)(dt_comm *c, float *grads, float *params, size_t n_elems,
                                  dt_update_fn update, void *ctx);
    /* Optional, with allreduce_update (NULL: nothing to do). */
    dt_status (*share_owned)(dt_comm *c, float *data, size_t n_elems);
    /* Optional (NULL: no shared tensors; see dt_comm_share_tensors). */
    dt_status (*share_tensors)(dt_comm *c, const float *params, size_t n_params, size_t n_grads,
                               float **shared_params, float **shared_grads);
} dt_comm_ops;

struct dt_comm {
    const dt_comm_ops *ops;
    int rank, size;
    double timeout;   /* seconds each operation may take before it fails (default 60) */
    double stall_warn; /* seconds a rank waits before it logs which ranks are missing (default 30) */
    void *impl;       /* the backend's state */
};

/* Rank r's share of n_elems split over size ranks: [*off, *off + *n) (block.h). */
static inline void dt_comm_block(size_t n_elems, int size, int r, size_t *off, size_t *n)
{
    dt_block(n_elems, size, r, off, n);
}

static inline dt_status dt_comm_allreduce(dt_comm *c, float *data, size_t n_elems, dt_reduce_op op,
                                          dt_wire_dtype wire)
{
    return c->ops->allreduce(c, data, n_elems, op, wire);
}
static inline dt_status dt_comm_reduce_scatter(dt_comm *c, float *data, size_t n_elems,
                                               dt_reduce_op op, dt_wire_dtype wire)
{
    return c->ops->reduce_scatter(c, data, n_elems, op, wire);
}
static inline dt_status dt_comm_allgather(dt_comm *c, const void *send, size_t n_bytes, void *recv)
{
    return c->ops->allgather(c, send, n_bytes, recv);
}
static inline dt_status dt_comm_broadcast(dt_comm *c, void *data, size_t n_bytes, int root)
{
    return c->ops->broadcast(c, data, n_bytes, root);
}
static inline dt_status dt_comm_barrier(dt_comm *c) { return c->ops->barrier(c); }

/* A synchronous step with its update sharded over the ranks, as ZeRO's first stage: grads
 * (n_elems) are summed over the ranks in float32; each element is then updated by one rank only,
 * its owner, which calls update on the ranges it owns (grads summed there); and every rank ends
 * with every owner's params. Each rank so pays for 1 / size of the update, and reads and writes
 * 1 / size of the update's state. grads is left unspecified. A backend that does not shard
 * (no allreduce_update slot) all-reduces and lets every rank update everything: the same params
 * either way. */
DT_API dt_status dt_comm_allreduce_update(dt_comm *c, float *grads, float *params, size_t n_elems,
                                          dt_update_fn update, void *ctx);
/* After sharded updates, the state an owner keeps per element (an optimizer's slots, n_elems
 * aligned with the params) is current only on the owner: this makes every rank's data the
 * owners', as before a checkpoint. Collective; nothing to do where updates are not sharded. */
DT_API dt_status dt_comm_share_owned(dt_comm *c, float *data, size_t n_elems);
/* Where the ranks share memory: storage for the parameters that every rank reads, one copy
 * starting as rank 0's params (n_params floats), and for this rank's gradients (n_grads floats,
 * zero), that the others can read. dt_comm_allreduce_update given exactly these arrays then
 * moves nothing: each owner sums the peers' gradients where they are and updates the one copy.
 * Collective. Both NULL (and DT_OK) where the backend cannot share them: the caller keeps its
 * own. The memory lives as long as the communicator. */
DT_API dt_status dt_comm_share_tensors(dt_comm *c, const float *params, size_t n_params,
                                       size_t n_grads, float **shared_params, float **shared_grads);
/* Accepts NULL. */
DT_API void dt_comm_destroy(dt_comm *c);

DT_API const char *dt_reduce_op_name(dt_reduce_op op);
/* "sum", "mean", "min", "max" -> op; DT_ERR_INVALID otherwise. */
DT_API dt_status dt_reduce_op_parse(const char *s, dt_reduce_op *op);
DT_API const char *dt_wire_dtype_name(dt_wire_dtype w);
DT_API dt_status dt_wire_dtype_parse(const char *s, dt_wire_dtype *w);

/* Reduction kernels shared by the backends: dst[i] = op(dst[i], src[i]) (MEAN adds, as SUM). */
DT_API void dt_reduce_f32(float *dst, const float *src, size_t n_elems, dt_reduce_op op);
/* float32 <-> 16-bit wire formats, round to nearest even; NaN stays NaN. */
DT_API void dt_f32_to_bf16(const float *src, uint16_t *dst, size_t n_elems);
DT_API void dt_bf16_to_f32(const uint16_t *src, float *dst, size_t n_elems);
DT_API void dt_f32_to_f16(const float *src, uint16_t *dst, size_t n_elems);
DT_API void dt_f16_to_f32(const uint16_t *src, float *dst, size_t n_elems);
/* The conversion for a 16-bit wire (DT_WIRE_BF16 or DT_WIRE_F16). */
DT_API void dt_wire_encode(dt_wire_dtype w, const float *src, uint16_t *dst, size_t n_elems);
DT_API void dt_wire_decode(dt_wire_dtype w, const uint16_t *src, float *dst, size_t n_elems);

/* ---- the local backend ---- */

/* A group of size ranks, each to be driven by its own thread of this process. */
typedef struct dt_local_group dt_local_group;
DT_API dt_status dt_local_group_create(int size, double timeout, dt_local_group **out);
/* Rank r's communicator; call once per rank; destroy each before the group. */
DT_API dt_status dt_comm_local(dt_local_group *g, int rank, dt_comm **out);
DT_API void dt_local_group_destroy(dt_local_group *g);

/* ---- the mpi backend ---- */

/* The interface between libdtrain and its MPI plugin: the layout of dt_comm and dt_comm_ops and
 * the two entry points. Raised whenever any of them changes; the plugin reports the version and
 * the sizes it was built with (dt_mpi_plugin_abi), and dt_comm_mpi refuses a plugin that differs,
 * rather than call through a table of another shape. */
#define DT_MPI_PLUGIN_ABI 1

/* Loads the MPI plugin (libdtrain_mpi.so beside the library or the program, or $DTRAIN_MPI_PLUGIN),
 * initializes MPI and returns a communicator over MPI_COMM_WORLD. DT_ERR_UNSUPPORTED naming the
 * plugin path when it cannot be loaded. */
DT_API dt_status dt_comm_mpi(double timeout, dt_comm **out);

#endif
