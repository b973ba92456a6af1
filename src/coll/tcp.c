/* The tcp communicator (see comm_tcp.h). */
#include "comm_tcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/clock.h"
#include "../core/grow.h"
#include "shm.h"

enum { OP_ALLREDUCE = 1, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_BROADCAST, OP_BARRIER };

typedef struct {
    dt_transport *t;
    dt_shm_group *shm; /* all ranks on this host: all-reduce and barrier through shared memory */
    dt_tcp_options o;
    uint32_t seq;
    dt_status broken; /* the first failure; every later call returns it */
    char broken_msg[1024];
    /* Scratch, grown on demand: a received segment (floats, or 16-bit words before decoding)
     * and an encoded segment to send. */
    float *tmp;
    uint16_t *wire_in, *wire_out;
    size_t tmp_elems;
} tcp_state;

void dt_tcp_options_default(dt_tcp_options *o)
{
    memset(o, 0, sizeof *o);
    dt_transport_options_default(&o->transport);
    o->timeout = 60.0;
    o->stall_warn = 30.0;
    o->segment_bytes = 256 << 10;
    o->small_bytes = 64 << 10;
    o->shm = true;
}

static tcp_state *state_of(dt_comm *c) { return c->impl; }

static size_t wire_bytes(dt_wire_dtype w) { return w == DT_WIRE_F32 ? 4 : 2; }

static dt_status ensure_scratch(tcp_state *s, size_t n_elems)
{
    if (n_elems <= s->tmp_elems)
        return DT_OK;
    if (!dt_grow_together((dt_grow_item[]){{&s->tmp, sizeof *s->tmp},
                                           {&s->wire_in, sizeof *s->wire_in},
                                           {&s->wire_out, sizeof *s->wire_out}}, 3, n_elems))
        return dt_error(DT_ERR_NOMEM, "no memory for %zu elements of collective scratch",
                        n_elems);
    s->tmp_elems = n_elems;
    return DT_OK;
}

/* Starts a collective: its number, its deadline, or the error that broke the communicator. */
static dt_status begin(dt_comm *c, const char *name, uint16_t op, dt_xfer *x)
{
    tcp_state *s = state_of(c);
    if (s->broken)
        return dt_error(s->broken, "%s", s->broken_msg);
    memset(x, 0, sizeof *x);
    x->name = name;
    x->op = op;
    x->seq = ++s->seq;
    x->start = dt_clock_now();
    x->deadline = x->start + c->timeout;
    x->stall_warn = c->stall_warn;
    return DT_OK;
}

/* Breaks the communicator on st, and tells the peers why. */
static dt_status fail(dt_comm *c, dt_status st)
{
    tcp_state *s = state_of(c);
    if (st == DT_OK || s->broken)
        return st;
    s->broken = st;
    snprintf(s->broken_msg, sizeof s->broken_msg, "%s", dt_last_error());
    dt_transport_abort(s->t, s->broken_msg);
    dt_error(st, "%s", s->broken_msg); /* the abort's sends may have replaced the message */
    return st;
}

/* dst = op(dst, src), or op(src, dst) when src_first (src is scratch and is overwritten):
 * partners in recursive doubling both put the lower rank's operand first, so min and max of
 * values that compare equal (+0 and -0) give both the same bits. */
static void reduce_ordered(float *dst, float *src, size_t n, dt_reduce_op op, bool src_first)
{
    if (!src_first || op == DT_REDUCE_SUM || op == DT_REDUCE_MEAN) {
        dt_reduce_f32(dst, src, n, op); /* addition commutes bitwise */
        return;
    }
    dt_reduce_f32(src, dst, n, op);
    memcpy(dst, src, n * sizeof *dst);
}

/* Rounds data to the wire's precision in place (f32 -> 16 bits -> f32), in chunks. */
static void round_to_wire(tcp_state *s, dt_wire_dtype w, float *data, size_t n)
{
    for (size_t i = 0; i < n; i += s->tmp_elems) {
        size_t k = n - i < s->tmp_elems ? n - i : s->tmp_elems;
        dt_wire_encode(w, data + i, s->wire_out, k);
        dt_wire_decode(w, s->wire_out, data + i, k);
    }
}

/* Sends send[0, sn) to `to` while receiving rn floats from `from` into recv, on the wire as w
 * (recv may be s->tmp; with 16-bit wires both go through the scratch words). */
static dt_status xfer_floats(dt_comm *c, dt_xfer *x, dt_wire_dtype w, int to, const float *send,
                             size_t sn, int from, float *recv, size_t rn)
{
    tcp_state *s = state_of(c);
    if (w == DT_WIRE_F32)
        return dt_transport_exchange(s->t, x, to, send, sn * 4, from, recv, rn * 4);
    if (to >= 0)
        dt_wire_encode(w, send, s->wire_out, sn);
    dt_status st = dt_transport_exchange(s->t, x, to, s->wire_out, sn * 2, from, s->wire_in,
                                         rn * 2);
    if (st == DT_OK && from >= 0)
        dt_wire_decode(w, s->wire_in, recv, rn);
    return st;
}

static size_t n_segments(size_t n, size_t seg) { return (n + seg - 1) / seg; }

/* One ring pass over blocks: at step k each rank sends block (r + send_shift - k) and receives
 * block (r + send_shift - 1 - k), segment by segment; with reduce, each received segment is
 * reduced into data, else it lands in data directly. */
static dt_status ring_pass(dt_comm *c, dt_xfer *x, float *data, size_t n, dt_reduce_op op,
                           dt_wire_dtype w, int send_shift, bool reduce)
{
    tcp_state *s = state_of(c);
    int size = c->size, r = c->rank, next = (r + 1) % size, prev = (r + size - 1) % size;
    size_t seg = s->o.segment_bytes / wire_bytes(w);
    if (seg == 0)
        seg = 1;
    dt_status st = ensure_scratch(s, seg);
    if (st)
        return st;
    for (int k = 0; k < size - 1; k++) {
        int sb = ((r + send_shift - k) % size + size) % size;
        int rb = ((r + send_shift - 1 - k) % size + size) % size;
        size_t s_off, s_n, r_off, r_n;
        dt_comm_block(n, size, sb, &s_off, &s_n);
        dt_comm_block(n, size, rb, &r_off, &r_n);
        size_t ns = n_segments(s_n, seg), nr = n_segments(r_n, seg);
        for (size_t j = 0; j < ns || j < nr; j++) {
            size_t sn = j < ns ? (s_n - j * seg < seg ? s_n - j * seg : seg) : 0;
            size_t rn = j < nr ? (r_n - j * seg < seg ? r_n - j * seg : seg) : 0;
            float *dst = data + r_off + j * seg;
            st = xfer_floats(c, x, w, j < ns ? next : -1, data + s_off + j * seg, sn,
                             j < nr ? prev : -1, reduce ? s->tmp : dst, rn);
            if (st)
                return st;
            if (reduce && rn)
                dt_reduce_f32(dst, s->tmp, rn, op);
        }
    }
    return DT_OK;
}

static void divide(float *data, size_t n, int size)
{
    float d = (float)size;
    for (size_t i = 0; i < n; i++)
        data[i] /= d;
}

/* The end of a reduction that ran as st says: the communicator broken on a failure, else MEAN's
 * division of the n values this rank holds reduced (at data) by the group's size. */
static dt_status end_reduction(dt_comm *c, dt_status st, dt_reduce_op op, float *data, size_t n)
{
    if (st)
        return fail(c, st);
    if (op == DT_REDUCE_MEAN)
        divide(data, n, c->size);
    return DT_OK;
}

/* Ring reduce-scatter: afterwards rank r holds block r reduced. Step k sends block r - 1 - k. */
static dt_status ring_reduce_scatter(dt_comm *c, dt_xfer *x, float *data, size_t n,
                                     dt_reduce_op op, dt_wire_dtype w)
{
    return ring_pass(c, x, data, n, op, w, -1, true);
}

/* Ring all-gather of the blocks: rank r starts with block r. Step k sends block r - k. */
static dt_status ring_allgather_blocks(dt_comm *c, dt_xfer *x, float *data, size_t n,
                                       dt_wire_dtype w)
{
    return ring_pass(c, x, data, n, DT_REDUCE_SUM, w, 0, false);
}

/* The ring all-reduce, slice by slice: each slice of 2 x size segments goes through its
 * reduce-scatter and all-gather before the next starts, so a segment is sent on while it is still
 * in cache from its reduction, instead of the whole tensor streaming through memory twice; the
 * time a slice's steps wait on each other is the price, small against a segment's transfer. */
static dt_status ring_allreduce(dt_comm *c, dt_xfer *x, float *data, size_t n, dt_reduce_op op,
                                dt_wire_dtype w)
{
    tcp_state *s = state_of(c);
    size_t seg = s->o.segment_bytes / wire_bytes(w);
    /* Two segments per rank's block: one can be on the wire while the other is reduced. */
    size_t slice = 2 * (size_t)c->size * (seg ? seg : 1);
    for (size_t off = 0; off < n; off += slice) {
        size_t len = n - off < slice ? n - off : slice;
        dt_status st = ring_reduce_scatter(c, x, data + off, len, op, w);
        if (st)
            return st;
        if (w != DT_WIRE_F32) {
            /* The owner rounds its block as the others will receive it. */
            size_t b_off, k;
            dt_comm_block(len, c->size, c->rank, &b_off, &k);
            round_to_wire(s, w, data + off + b_off, k);
        }
        if ((st = ring_allgather_blocks(c, x, data + off, len, w)))
            return st;
    }
    return DT_OK;
}

/* Real rank of a virtual rank in recursive doubling after folding rem pairs. */
static int real_rank(int vr, int rem) { return vr < rem ? 2 * vr + 1 : vr + rem; }

static dt_status rd_allreduce(dt_comm *c, dt_xfer *x, float *data, size_t n, dt_reduce_op op,
                              dt_wire_dtype w)
{
    tcp_state *s = state_of(c);
    int size = c->size, r = c->rank, p = 1;
    while (p * 2 <= size)
        p *= 2;
    int rem = size - p;
    dt_status st = ensure_scratch(s, n ? n : 1);
    if (st)
        return st;
    if (w != DT_WIRE_F32)
        round_to_wire(s, w, data, n);
    /* Fold: the first 2 * rem ranks pair up; the odd one of each pair carries on. */
    int vr;
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            if ((st = xfer_floats(c, x, w, r + 1, data, n, -1, NULL, 0)) ||
                (st = xfer_floats(c, x, w, -1, NULL, 0, r + 1, data, n)))
                return st;
            return DT_OK;
        }
        if ((st = xfer_floats(c, x, w, -1, NULL, 0, r - 1, s->tmp, n)))
            return st;
        reduce_ordered(data, s->tmp, n, op, true);
        vr = r / 2;
    } else {
        vr = r - rem;
    }
    for (int mask = 1; mask < p; mask <<= 1) {
        int partner = real_rank(vr ^ mask, rem);
        if (w != DT_WIRE_F32)
            round_to_wire(s, w, data, n);
        if ((st = xfer_floats(c, x, w, partner, data, n, partner, s->tmp, n)))
            return st;
        reduce_ordered(data, s->tmp, n, op, partner < r);
    }
    if (w != DT_WIRE_F32)
        round_to_wire(s, w, data, n);
    if (r < 2 * rem)
        return xfer_floats(c, x, w, r - 1, data, n, -1, NULL, 0);
    return DT_OK;
}

static dt_status tcp_allreduce(dt_comm *c, float *data, size_t n, dt_reduce_op op,
                               dt_wire_dtype w)
{
    dt_xfer x;
    dt_status st = begin(c, "all-reduce", OP_ALLREDUCE, &x);
    if (st || c->size == 1)
        return st;
    tcp_state *s = state_of(c);
    if (s->shm && w == DT_WIRE_F32) {
        if ((st = dt_shm_allreduce(s->shm, &x, data, n, op)))
            return fail(c, st);
        return DT_OK; /* MEAN divided already */
    }
    if (n * wire_bytes(w) <= s->o.small_bytes)
        st = rd_allreduce(c, &x, data, n, op, w);
    else
        st = ring_allreduce(c, &x, data, n, op, w);
    return end_reduction(c, st, op, data, n);
}

static dt_status tcp_reduce_scatter(dt_comm *c, float *data, size_t n, dt_reduce_op op,
                                    dt_wire_dtype w)
{
    dt_xfer x;
    dt_status st = begin(c, "reduce-scatter", OP_REDUCE_SCATTER, &x);
    if (st || c->size == 1)
        return st;
    size_t off, k; /* this rank's block */
    dt_comm_block(n, c->size, c->rank, &off, &k);
    return end_reduction(c, ring_reduce_scatter(c, &x, data, n, op, w), op, data + off, k);
}

static dt_status tcp_allgather(dt_comm *c, const void *send, size_t n_bytes, void *recv)
{
    dt_xfer x;
    dt_status st = begin(c, "all-gather", OP_ALLGATHER, &x);
    if (st)
        return st;
    tcp_state *s = state_of(c);
    if (s->shm && c->size > 1) {
        st = dt_shm_allgather(s->shm, &x, send, n_bytes, recv);
        if (st != DT_ERR_UNSUPPORTED)
            return st ? fail(c, st) : DT_OK;
    }
    uint8_t *all = recv;
    int size = c->size, r = c->rank, next = (r + 1) % size, prev = (r + size - 1) % size;
    memmove(all + (size_t)r * n_bytes, send, n_bytes);
    size_t seg = s->o.segment_bytes;
    for (int k = 0; k < size - 1; k++) {
        int sb = ((r - k) % size + size) % size, rb = ((r - k - 1) % size + size) % size;
        for (size_t off = 0; off < n_bytes; off += seg) {
            size_t m = n_bytes - off < seg ? n_bytes - off : seg;
            st = dt_transport_exchange(s->t, &x, next, all + (size_t)sb * n_bytes + off, m, prev,
                                       all + (size_t)rb * n_bytes + off, m);
            if (st)
                return fail(c, st);
        }
    }
    return DT_OK;
}

static dt_status tcp_broadcast(dt_comm *c, void *data, size_t n_bytes, int root)
{
    dt_xfer x;
    dt_status st = begin(c, "broadcast", OP_BROADCAST, &x);
    if (st || c->size == 1)
        return st;
    if (root < 0 || root >= c->size)
        return fail(c, dt_error(DT_ERR_INVALID, "broadcast: root %d is not a rank of %d", root,
                                c->size));
    tcp_state *s = state_of(c);
    int size = c->size, vr = (c->rank - root + size) % size, mask = 1;
    size_t seg = s->o.segment_bytes * 4;
    uint8_t *p = data;
    /* Binomial tree over virtual ranks (root = 0): receive from the parent, then send to the
     * children, largest subtree first. */
    while (mask < size) {
        if (vr & mask) {
            int parent = (vr - mask + root) % size;
            for (size_t off = 0; off < n_bytes; off += seg) {
                size_t m = n_bytes - off < seg ? n_bytes - off : seg;
                if ((st = dt_transport_exchange(s->t, &x, -1, NULL, 0, parent, p + off, m)))
                    return fail(c, st);
            }
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (vr + mask >= size)
            continue;
        int child = (vr + mask + root) % size;
        for (size_t off = 0; off < n_bytes; off += seg) {
            size_t m = n_bytes - off < seg ? n_bytes - off : seg;
            if ((st = dt_transport_exchange(s->t, &x, child, p + off, m, -1, NULL, 0)))
                return fail(c, st);
        }
    }
    return DT_OK;
}

static dt_status tcp_barrier(dt_comm *c)
{
    dt_xfer x;
    dt_status st = begin(c, "barrier", OP_BARRIER, &x);
    if (st || c->size == 1)
        return st;
    float one = 1.0f;
    tcp_state *s = state_of(c);
    if ((st = s->shm ? dt_shm_allreduce(s->shm, &x, &one, 1, DT_REDUCE_SUM)
                     : rd_allreduce(c, &x, &one, 1, DT_REDUCE_SUM, DT_WIRE_F32)))
        return fail(c, st);
    return DT_OK;
}

/* Whether the ring serves n floats (as for tcp_allreduce): then updates are sharded over TCP. */
static bool ring_shards(const dt_comm *c, size_t n)
{
    const tcp_state *s = c->impl;
    return c->size > 1 && n * sizeof(float) > s->o.small_bytes;
}

/* The ring's slices (as ring_allreduce's): a rank owns its dt_comm_block of each. */
static size_t ring_slice(const dt_comm *c)
{
    const tcp_state *s = c->impl;
    size_t seg = s->o.segment_bytes / sizeof(float);
    return 2 * (size_t)c->size * (seg ? seg : 1);
}

/* The sharded step over the ring, slice by slice: reduce-scatter the gradients, update this
 * rank's block of the slice while its sums are in cache, all-gather the parameters' blocks. The
 * same sums, in the same order, as the ring all-reduce. */
static dt_status ring_update(dt_comm *c, dt_xfer *x, float *grads, float *params, size_t n,
                             dt_update_fn update, void *ctx)
{
    size_t slice = ring_slice(c);
    for (size_t off = 0; off < n; off += slice) {
        size_t len = n - off < slice ? n - off : slice, b_off, k;
        dt_status st = ring_reduce_scatter(c, x, grads + off, len, DT_REDUCE_SUM, DT_WIRE_F32);
        if (st)
            return st;
        dt_comm_block(len, c->size, c->rank, &b_off, &k);
        if (k > 0)
            update(ctx, off + b_off, off + b_off + k, grads + off + b_off);
        if ((st = ring_allgather_blocks(c, x, params + off, len, DT_WIRE_F32)))
            return st;
    }
    return DT_OK;
}

/* Sharded through shared memory, or over the ring; a tensor small enough for recursive
 * doubling is all-reduced whole and every rank updates all of it. */
static dt_status tcp_allreduce_update(dt_comm *c, float *grads, float *params, size_t n,
                                      dt_update_fn update, void *ctx)
{
    tcp_state *s = state_of(c);
    if (!s->shm && !ring_shards(c, n)) {
        dt_status st = tcp_allreduce(c, grads, n, DT_REDUCE_SUM, DT_WIRE_F32);
        if (st == DT_OK && n > 0)
            update(ctx, 0, n, grads);
        return st;
    }
    dt_xfer x;
    dt_status st = begin(c, "all-reduce and update", OP_ALLREDUCE, &x);
    if (st)
        return st;
    st = s->shm ? dt_shm_allreduce_update(s->shm, &x, grads, params, n, update, ctx)
                : ring_update(c, &x, grads, params, n, update, ctx);
    return st ? fail(c, st) : DT_OK;
}

static dt_status tcp_share_owned(dt_comm *c, float *data, size_t n)
{
    tcp_state *s = state_of(c);
    if (!s->shm && !ring_shards(c, n))
        return DT_OK;
    dt_xfer x;
    dt_status st = begin(c, "share of updated state", OP_ALLREDUCE, &x);
    if (st)
        return st;
    if (s->shm) {
        st = dt_shm_share_owned(s->shm, &x, data, n);
    } else {
        size_t slice = ring_slice(c);
        for (size_t off = 0; off < n && st == DT_OK; off += slice)
            st = ring_allgather_blocks(c, &x, data + off, n - off < slice ? n - off : slice,
                                       DT_WIRE_F32);
    }
    return st ? fail(c, st) : DT_OK;
}

static dt_status tcp_share_tensors(dt_comm *c, const float *params, size_t n_params,
                                   size_t n_grads, float **shared_params, float **shared_grads)
{
    tcp_state *s = state_of(c);
    if (!s->shm)
        return DT_OK;
    dt_xfer x;
    dt_status st = begin(c, "shared tensors setup", OP_ALLREDUCE, &x);
    if (st)
        return st;
    if ((st = dt_shm_map_tensors(s->shm, &x, params, n_params, n_grads, shared_params,
                                 shared_grads)))
        return fail(c, st);
    return DT_OK;
}

static void tcp_destroy(dt_comm *c)
{
    tcp_state *s = state_of(c);
    if (s) {
        dt_shm_group_close(s->shm);
        dt_transport_close(s->t);
        free(s->tmp);
        free(s->wire_in);
        free(s->wire_out);
        free(s);
    }
    c->impl = NULL; /* dt_comm_destroy frees c itself */
}

static const dt_comm_ops tcp_ops = {"tcp",         tcp_allreduce,  tcp_reduce_scatter,
                                    tcp_allgather, tcp_broadcast,  tcp_barrier,
                                    tcp_destroy,   tcp_allreduce_update, tcp_share_owned,
                                    tcp_share_tensors};

bool dt_comm_tcp_uses_shm(const dt_comm *c)
{
    return c && c->ops == &tcp_ops && state_of((dt_comm *)c)->shm != NULL;
}

dt_status dt_comm_tcp(const dt_cluster *cl, const dt_tcp_options *o, dt_comm **out)
{
    *out = NULL;
    if (o->segment_bytes < 64 || o->timeout <= 0)
        return dt_error(DT_ERR_INVALID, "tcp communicator: segment of %zu bytes, timeout %g s",
                        o->segment_bytes, o->timeout);
    dt_comm *c = calloc(1, sizeof *c);
    tcp_state *s = calloc(1, sizeof *s);
    dt_status st;
    if (!c || !s) {
        st = dt_error(DT_ERR_NOMEM, "no memory for a communicator");
        goto fail;
    }
    s->o = *o;
    if ((st = dt_transport_open(cl, &o->transport, &s->t)))
        goto fail;
    if (o->shm && (st = dt_shm_group_open(s->t, o->timeout, &s->shm))) {
        dt_transport_close(s->t);
        goto fail;
    }
    c->ops = &tcp_ops;
    c->rank = s->t->rank;
    c->size = s->t->size;
    c->timeout = o->timeout;
    c->stall_warn = o->stall_warn;
    c->impl = s;
    *out = c;
    return DT_OK;
fail:
    free(s);
    free(c);
    return st;
}
