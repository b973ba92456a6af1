/* The mpi communicator: dtrain's collectives over MPI (Open MPI or MPICH), built by mpicc into
 * libdtrain_mpi.so and loaded by src/coll/mpi.c only when a program asks for the mpi backend, so
 * that nothing else in dtrain links libmpi. Built together with src/coll/comm.c (the 16-bit
 * conversions and the reduction kernel) and src/core/status.c (error messages), with hidden
 * visibility: the plugin exports only dt_mpi_plugin_create, dt_mpi_plugin_last_error and
 * dt_mpi_plugin_abi.
 *
 * Each communicator is a duplicate of MPI_COMM_WORLD (so its traffic and error handler are its
 * own) with MPI_ERRORS_RETURN; a failing MPI call becomes DT_ERR_PEER with the operation, the MPI
 * function and MPI_Error_string's text, and breaks the communicator: later calls fail at once with
 * that first error. Rank and size are MPI's.
 *
 *   all-reduce      MPI_Allreduce in place; SUM is MPI_SUM, MIN and MAX are user-defined ops
 *                   running dt_reduce_f32 (see mpi_op); MEAN is SUM, then each rank divides by
 *                   size.
 *   reduce-scatter  MPI_Reduce_scatter in place with dt_comm_block's counts; MPI leaves the
 *                   result at the start of the buffer, and it is moved into the rank's block.
 *   all-gather      MPI_Allgather (MPI_IN_PLACE when send already sits at its place in recv).
 *   broadcast       MPI_Bcast.   barrier  MPI_Barrier.
 * Counts above MPI's int go in pieces (all-reduce, broadcast) or as one derived datatype
 * (all-gather); a reduce-scatter of more than an int's count falls back to an all-reduce.
 *
 * bf16 and fp16 wires: the data is rounded to 16 bits (round to nearest even) into a scratch
 * buffer and reduced as MPI_UINT16_T by a user-defined MPI_Op that widens both operands to
 * float32, reduces them and rounds the result back: every partial result MPI forms travels and is
 * rounded in the 16-bit format, as in the tcp ring. The result is widened to float32 and MEAN then
 * divides it by size.
 *
 * Determinism: MPI chooses the reduction order (it depends on the algorithm, the number of ranks
 * and the count), so sums may differ in their last bits from the local backend's rank order;
 * Open MPI's algorithms give every rank the same bits.
 *
 * Threads: MPI is initialized with MPI_THREAD_SERIALIZED (unless the program initialized it), so
 * that a communication thread other than the main one may drive the communicator; calls must not
 * overlap. MPI_Finalize runs when the last communicator is destroyed, only if this plugin called
 * MPI_Init_thread; MPI cannot be initialized again in the same process afterwards.
 *
 * Timeouts: Open MPI has no per-call deadline, so the timeout given to dt_mpi_plugin_create is
 * kept in the communicator but cannot be enforced inside MPI calls; a dead rank makes mpirun end
 * the job, a hung one hangs its peers (mpirun --timeout bounds the whole job). */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/comm.h"

#define EXPORT __attribute__((visibility("default")))
#define MSG_CAP 768
/* The most elements or bytes one MPI call moves: comfortably inside an int. (Building with a
 * small -DDT_MPI_PIECE runs the paths for large counts on small ones.) */
#ifdef DT_MPI_PIECE
#define PIECE ((size_t)DT_MPI_PIECE)
#else
#define PIECE ((size_t)1 << 30)
#endif
/* Elements widened at a time by the 16-bit reduction. */
#define CHUNK 1024

EXPORT dt_status dt_mpi_plugin_create(double timeout, dt_comm **out);
EXPORT const char *dt_mpi_plugin_last_error(void);
EXPORT void dt_mpi_plugin_abi(uint32_t *version, uint32_t *comm_bytes, uint32_t *ops_bytes);

/* What this plugin was built against, for the loader to check before it calls anything else. */
void dt_mpi_plugin_abi(uint32_t *version, uint32_t *comm_bytes, uint32_t *ops_bytes)
{
    *version = DT_MPI_PLUGIN_ABI;
    *comm_bytes = (uint32_t)sizeof(dt_comm);
    *ops_bytes = (uint32_t)sizeof(dt_comm_ops);
}

enum { N_RED = 3 }; /* sum (and mean), min, max */

typedef struct {
    MPI_Comm comm;
    bool comm_ready;
    MPI_Op op16[2][N_RED]; /* [bf16, fp16][sum, min, max] */
    MPI_Op op32[2];        /* float32 [min, max]; float32 sums use MPI_SUM */
    bool ops_ready;
    uint16_t *scratch;     /* the 16-bit copy of the data */
    size_t scratch_cap;
    dt_status broken;
    char broken_msg[MSG_CAP];
} plugin;

/* Communicators alive, and whether this plugin initialized MPI (then it finalizes it). */
static int n_live;
static bool we_initialized;

const char *dt_mpi_plugin_last_error(void) { return dt_last_error(); }

static int red_index(dt_reduce_op op)
{
    return op == DT_REDUCE_MIN ? 1 : op == DT_REDUCE_MAX ? 2 : 0;
}

/* The float32 reduction: MPI_SUM (IEEE addition commutes to the bit), and dtrain's own min and
 * max (dt_reduce_f32: NaN wins, -0 < +0, commutative to the bit) rather than MPI_MIN and MPI_MAX,
 * whose results on ties and NaN depend on the order of the operands, so that ranks could get
 * different bits. */
static MPI_Op mpi_op(const plugin *p, dt_reduce_op op)
{
    return op == DT_REDUCE_MIN ? p->op32[0] : op == DT_REDUCE_MAX ? p->op32[1] : MPI_SUM;
}

static void mpi_text(int rc, char *buf, int cap)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) == MPI_SUCCESS)
        snprintf(buf, (size_t)cap, "%.*s", len, s);
    else
        snprintf(buf, (size_t)cap, "MPI error %d", rc);
}

/* Breaks the communicator with the first error and returns it. */
static dt_status fail(plugin *p, dt_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static dt_status fail(plugin *p, dt_status code, const char *fmt, ...)
{
    if (p->broken == DT_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->broken_msg, sizeof p->broken_msg, fmt, ap);
        va_end(ap);
        p->broken = code;
    }
    return dt_error(p->broken, "%s", p->broken_msg);
}

static dt_status mpi_fail(plugin *p, const char *what, const char *call, int rc)
{
    char text[MPI_MAX_ERROR_STRING + 16];
    mpi_text(rc, text, (int)sizeof text);
    return fail(p, DT_ERR_PEER, "mpi: %s: %s failed: %s", what, call, text);
}

static dt_status check_broken(plugin *p)
{
    return p->broken == DT_OK ? DT_OK : dt_error(p->broken, "%s", p->broken_msg);
}

/* ---- the 16-bit reductions (MPI_User_function) ---- */

/* inout[i] = in[i] op inout[i], in float32, rounded back to the wire format. */
static void reduce16(dt_wire_dtype w, dt_reduce_op op, const uint16_t *in, uint16_t *inout, int len)
{
    float a[CHUNK], b[CHUNK];
    for (size_t at = 0, n = len > 0 ? (size_t)len : 0; at < n; at += CHUNK) {
        size_t k = n - at < CHUNK ? n - at : CHUNK;
        dt_wire_decode(w, in + at, a, k);
        dt_wire_decode(w, inout + at, b, k);
        dt_reduce_f32(a, b, k, op);
        dt_wire_encode(w, a, inout + at, k);
    }
}

#define USER_OP(name, w, op)                                                                       \
    static void name(void *in, void *inout, int *len, MPI_Datatype *type)                          \
    {                                                                                              \
        (void)type;                                                                                \
        reduce16(w, op, in, inout, *len);                                                          \
    }
USER_OP(sum_bf16, DT_WIRE_BF16, DT_REDUCE_SUM)
USER_OP(min_bf16, DT_WIRE_BF16, DT_REDUCE_MIN)
USER_OP(max_bf16, DT_WIRE_BF16, DT_REDUCE_MAX)
USER_OP(sum_f16, DT_WIRE_F16, DT_REDUCE_SUM)
USER_OP(min_f16, DT_WIRE_F16, DT_REDUCE_MIN)
USER_OP(max_f16, DT_WIRE_F16, DT_REDUCE_MAX)

static void min_f32(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    dt_reduce_f32(inout, in, *len > 0 ? (size_t)*len : 0, DT_REDUCE_MIN);
}

static void max_f32(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    dt_reduce_f32(inout, in, *len > 0 ? (size_t)*len : 0, DT_REDUCE_MAX);
}

static dt_status grow_scratch(plugin *p, const char *what, size_t n_elems)
{
    if (n_elems <= p->scratch_cap)
        return DT_OK;
    uint16_t *s = realloc(p->scratch, n_elems * sizeof *s);
    if (!s)
        return dt_error(DT_ERR_NOMEM, "mpi: %s: out of memory for %zu wire elements", what,
                        n_elems);
    p->scratch = s;
    p->scratch_cap = n_elems;
    return DT_OK;
}

static void divide(float *x, size_t n_elems, int size)
{
    float div = (float)size;
    for (size_t i = 0; i < n_elems; i++)
        x[i] /= div;
}

/* ---- the collectives ---- */

static dt_status plugin_allreduce(dt_comm *c, float *data, size_t n_elems, dt_reduce_op op,
                                  dt_wire_dtype wire)
{
    plugin *p = c->impl;
    const char *what = "all-reduce";
    dt_status st = check_broken(p);
    if (st != DT_OK || n_elems == 0)
        return st;
    if (wire == DT_WIRE_F32) {
        for (size_t at = 0; at < n_elems; at += PIECE) {
            size_t k = n_elems - at < PIECE ? n_elems - at : PIECE;
            int rc = MPI_Allreduce(MPI_IN_PLACE, data + at, (int)k, MPI_FLOAT, mpi_op(p, op),
                                   p->comm);
            if (rc != MPI_SUCCESS)
                return mpi_fail(p, what, "MPI_Allreduce", rc);
        }
    } else {
        if ((st = grow_scratch(p, what, n_elems)) != DT_OK)
            return st;
        dt_wire_encode(wire, data, p->scratch, n_elems);
        MPI_Op mop = p->op16[wire == DT_WIRE_F16][red_index(op)];
        for (size_t at = 0; at < n_elems; at += PIECE) {
            size_t k = n_elems - at < PIECE ? n_elems - at : PIECE;
            int rc = MPI_Allreduce(MPI_IN_PLACE, p->scratch + at, (int)k, MPI_UINT16_T, mop,
                                   p->comm);
            if (rc != MPI_SUCCESS)
                return mpi_fail(p, what, "MPI_Allreduce", rc);
        }
        dt_wire_decode(wire, p->scratch, data, n_elems);
    }
    if (op == DT_REDUCE_MEAN)
        divide(data, n_elems, c->size);
    return DT_OK;
}

static dt_status plugin_reduce_scatter(dt_comm *c, float *data, size_t n_elems, dt_reduce_op op,
                                       dt_wire_dtype wire)
{
    plugin *p = c->impl;
    const char *what = "reduce-scatter";
    dt_status st = check_broken(p);
    if (st != DT_OK || n_elems == 0)
        return st;
    size_t off, n;
    dt_comm_block(n_elems, c->size, c->rank, &off, &n);
    /* MPI implementations sum the counts in an int: beyond that, an all-reduce (in pieces) gives
     * every rank its block, and the rest. */
    if (n_elems > PIECE)
        return plugin_allreduce(c, data, n_elems, op, wire);
    int *counts = malloc((size_t)c->size * sizeof *counts);
    if (!counts)
        return dt_error(DT_ERR_NOMEM, "mpi: %s: out of memory", what);
    for (int q = 0; q < c->size; q++) {
        size_t qoff, qn;
        dt_comm_block(n_elems, c->size, q, &qoff, &qn);
        counts[q] = (int)qn;
    }
    int rc = MPI_SUCCESS;
    if (wire == DT_WIRE_F32) {
        rc = MPI_Reduce_scatter(MPI_IN_PLACE, data, counts, MPI_FLOAT, mpi_op(p, op), p->comm);
        if (rc == MPI_SUCCESS && off)
            memmove(data + off, data, n * sizeof *data);
    } else if ((st = grow_scratch(p, what, n_elems)) == DT_OK) {
        dt_wire_encode(wire, data, p->scratch, n_elems);
        rc = MPI_Reduce_scatter(MPI_IN_PLACE, p->scratch, counts, MPI_UINT16_T,
                                p->op16[wire == DT_WIRE_F16][red_index(op)], p->comm);
        if (rc == MPI_SUCCESS)
            dt_wire_decode(wire, p->scratch, data + off, n);
    }
    free(counts);
    if (st != DT_OK)
        return st;
    if (rc != MPI_SUCCESS)
        return mpi_fail(p, what, "MPI_Reduce_scatter", rc);
    if (op == DT_REDUCE_MEAN)
        divide(data + off, n, c->size);
    return DT_OK;
}

/* A datatype of n_bytes contiguous bytes, for counts beyond an int: whole pieces plus the rest. */
static int bytes_type(size_t n_bytes, MPI_Datatype *t)
{
    MPI_Datatype piece;
    int rc = MPI_Type_contiguous((int)PIECE, MPI_BYTE, &piece);
    if (rc != MPI_SUCCESS)
        return rc;
    int lens[2] = {(int)(n_bytes / PIECE), (int)(n_bytes % PIECE)};
    MPI_Aint displs[2] = {0, (MPI_Aint)(n_bytes / PIECE * PIECE)};
    MPI_Datatype types[2] = {piece, MPI_BYTE};
    rc = MPI_Type_create_struct(2, lens, displs, types, t);
    if (rc == MPI_SUCCESS)
        rc = MPI_Type_commit(t);
    MPI_Type_free(&piece);
    return rc;
}

static dt_status plugin_allgather(dt_comm *c, const void *send, size_t n_bytes, void *recv)
{
    plugin *p = c->impl;
    const char *what = "all-gather";
    dt_status st = check_broken(p);
    if (st != DT_OK || n_bytes == 0)
        return st;
    /* MPI forbids overlapping send and recv buffers; send in its place in recv is MPI_IN_PLACE. */
    const void *from = send == (char *)recv + (size_t)c->rank * n_bytes ? MPI_IN_PLACE : send;
    int rc;
    if (n_bytes <= PIECE) {
        rc = MPI_Allgather(from, (int)n_bytes, MPI_BYTE, recv, (int)n_bytes, MPI_BYTE, p->comm);
    } else {
        MPI_Datatype t;
        rc = bytes_type(n_bytes, &t);
        if (rc != MPI_SUCCESS)
            return mpi_fail(p, what, "MPI_Type_create_struct", rc);
        rc = MPI_Allgather(from, 1, t, recv, 1, t, p->comm);
        MPI_Type_free(&t);
    }
    if (rc != MPI_SUCCESS)
        return mpi_fail(p, what, "MPI_Allgather", rc);
    return DT_OK;
}

static dt_status plugin_broadcast(dt_comm *c, void *data, size_t n_bytes, int root)
{
    plugin *p = c->impl;
    const char *what = "broadcast";
    dt_status st = check_broken(p);
    if (st != DT_OK)
        return st;
    if (root < 0 || root >= c->size)
        return fail(p, DT_ERR_INVALID, "mpi: broadcast: root %d is not a rank of this %d-rank job",
                    root, c->size);
    for (size_t at = 0; at < n_bytes; at += PIECE) {
        size_t k = n_bytes - at < PIECE ? n_bytes - at : PIECE;
        int rc = MPI_Bcast((char *)data + at, (int)k, MPI_BYTE, root, p->comm);
        if (rc != MPI_SUCCESS)
            return mpi_fail(p, what, "MPI_Bcast", rc);
    }
    return DT_OK;
}

static dt_status plugin_barrier(dt_comm *c)
{
    plugin *p = c->impl;
    dt_status st = check_broken(p);
    if (st != DT_OK)
        return st;
    int rc = MPI_Barrier(p->comm);
    return rc == MPI_SUCCESS ? DT_OK : mpi_fail(p, "barrier", "MPI_Barrier", rc);
}

/* Frees what MPI holds for p, then p. Accepts a half-built plugin. */
static void plugin_free(plugin *p)
{
    if (!p)
        return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        for (int w = 0; w < 2 && p->ops_ready; w++) {
            for (int r = 0; r < N_RED; r++)
                if (p->op16[w][r] != MPI_OP_NULL)
                    MPI_Op_free(&p->op16[w][r]);
            if (p->op32[w] != MPI_OP_NULL)
                MPI_Op_free(&p->op32[w]);
        }
        if (p->comm_ready)
            MPI_Comm_free(&p->comm);
    }
    free(p->scratch);
    free(p);
}

static void plugin_destroy(dt_comm *c)
{
    plugin_free(c->impl);
    c->impl = NULL;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (--n_live == 0 && we_initialized && !finalized)
        MPI_Finalize();
}

static const dt_comm_ops plugin_ops = {
    .name = "mpi",
    .allreduce = plugin_allreduce,
    .reduce_scatter = plugin_reduce_scatter,
    .allgather = plugin_allgather,
    .broadcast = plugin_broadcast,
    .barrier = plugin_barrier,
    .destroy = plugin_destroy,
};

dt_status dt_mpi_plugin_create(double timeout, dt_comm **out)
{
    *out = NULL;
    int inited = 0, finalized = 0, rc;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return dt_error(DT_ERR_UNSUPPORTED,
                        "mpi: MPI has been finalized in this process and cannot start again");
    if (!inited) {
        int provided = MPI_THREAD_SINGLE;
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) {
            char text[MPI_MAX_ERROR_STRING + 16];
            mpi_text(rc, text, (int)sizeof text);
            return dt_error(DT_ERR_UNSUPPORTED, "mpi: MPI_Init_thread failed: %s", text);
        }
        we_initialized = true;
        /* Errors of our own calls on the world communicator (MPI_Comm_dup) come back as codes. */
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    }

    dt_status st = DT_OK;
    dt_comm *c = calloc(1, sizeof *c);
    plugin *p = calloc(1, sizeof *p);
    if (!c || !p) {
        st = dt_error(DT_ERR_NOMEM, "mpi: out of memory");
        goto fail;
    }
    for (int w = 0; w < 2; w++) {
        for (int r = 0; r < N_RED; r++)
            p->op16[w][r] = MPI_OP_NULL;
        p->op32[w] = MPI_OP_NULL;
    }
    n_live++; /* from here plugin_destroy's bookkeeping applies */
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &p->comm);
    if (rc != MPI_SUCCESS) {
        st = mpi_fail(p, "creating the communicator", "MPI_Comm_dup", rc);
        goto fail_live;
    }
    p->comm_ready = true;
    MPI_Comm_set_errhandler(p->comm, MPI_ERRORS_RETURN);
    static MPI_User_function *const fns[2][N_RED] = {{sum_bf16, min_bf16, max_bf16},
                                                     {sum_f16, min_f16, max_f16}};
    static MPI_User_function *const fns32[2] = {min_f32, max_f32};
    p->ops_ready = true;
    for (int w = 0; w < 2; w++) {
        for (int r = 0; r < N_RED; r++) {
            rc = MPI_Op_create(fns[w][r], 1, &p->op16[w][r]);
            if (rc == MPI_SUCCESS && r == 0)
                rc = MPI_Op_create(fns32[w], 1, &p->op32[w]);
            if (rc != MPI_SUCCESS) {
                st = mpi_fail(p, "creating the communicator", "MPI_Op_create", rc);
                goto fail_live;
            }
        }
    }
    c->ops = &plugin_ops;
    MPI_Comm_rank(p->comm, &c->rank);
    MPI_Comm_size(p->comm, &c->size);
    c->timeout = timeout;
    c->stall_warn = 30;
    c->impl = p;
    *out = c;
    return DT_OK;
fail_live:
    c->impl = p;
    plugin_destroy(c); /* frees p, finalizes MPI if nothing else uses it */
    free(c);
    return st;
fail:
    free(p);
    free(c);
    if (n_live == 0 && we_initialized)
        MPI_Finalize();
    return st;
}
