/* The local backend: size ranks in one process, each driven by its own thread, exchanging data
 * through shared memory (see include/dtrain/comm.h). The group owns a mutex, a condition
 * variable on CLOCK_MONOTONIC, one published slot per rank and a generation-counted barrier;
 * each rank's dt_comm points at the group.
 *
 * A collective publishes the rank's buffers in its slot and meets the others at an entry barrier.
 * The last rank to arrive checks, under the mutex, that every rank called the same collective with
 * the same counts; a mismatch breaks the group instead of corrupting memory. Then the work runs
 * in parallel without the mutex:
 *   all-reduce      each rank reduces its own block (dt_comm_block) of every rank's buffer, in
 *                   rank order, into its own buffer; barrier; each copies the other blocks from
 *                   their owners; barrier (so nobody reuses a buffer another still reads).
 *   reduce-scatter  the first half of all-reduce.
 *   all-gather      each rank copies every send buffer into its recv; barrier.
 *   broadcast       each non-root copies root's buffer; barrier.
 *   barrier         the entry barrier alone.
 * Every element of a result is computed once, by its block's owner, as
 * ((x_0 op x_1) op x_2) ... op x_(size-1) in float32, so the result is the same bits on every rank
 * and from run to run. MEAN divides the sum by size (x / size, not x * (1 / size)).
 *
 * Wire dtypes: nothing travels here, but bf16 and fp16 are applied as the tcp backend applies
 * them, so that a model trained with mirrored replicas sees the same precision: each rank's
 * contribution is rounded to the wire format (round to nearest even) before it is reduced, the
 * reduction runs in float32 in rank order, the reduced value is rounded to the wire format again
 * (it is what would travel in the all-gather), and only then MEAN divides by size, in float32. So
 * result = round(round(x_0) op round(x_1) op ...) [/ size], where tcp rounds every partial sum
 * of its ring as well; the two agree within the 16-bit format's rounding of the partial sums.
 *
 * Deadlines: a rank that does not enter a collective within c->timeout seconds of another makes
 * the waiting ranks fail with DT_ERR_TIMEOUT naming the missing ranks; after c->stall_warn seconds
 * one warning names them on stderr. The deadline covers the entry barrier only: once every rank has
 * entered, the remaining barriers wait for memory copies of the same process that always finish,
 * and leaving one early would let a caller free a buffer another rank still reads. After any
 * failure the group is broken: every later collective on any rank fails at once with the first
 * error. */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain/log.h"
#include "dtrain/comm.h"

#define MSG_CAP 512
/* Elements reduced at a time: three stack arrays of this many stay in L1 with the block. */
#define CHUNK 1024
#define MAX_RANKS 4096

typedef enum { K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_BROADCAST, K_BARRIER } kind;

static const char *kind_name(kind k)
{
    switch (k) {
    case K_ALLREDUCE: return "all-reduce";
    case K_REDUCE_SCATTER: return "reduce-scatter";
    case K_ALLGATHER: return "all-gather";
    case K_BROADCAST: return "broadcast";
    case K_BARRIER: return "barrier";
    }
    return "?";
}

/* What one rank published for the collective in progress. */
typedef struct {
    kind k;
    size_t n;        /* n_elems for reductions, n_bytes otherwise */
    dt_reduce_op op;
    dt_wire_dtype wire;
    int root;
    const void *src; /* the reduction's data, all-gather's send, broadcast's data */
    void *dst;       /* the same as src, or all-gather's recv */
} slot;

struct dt_local_group {
    int size;
    double timeout;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC: signalled when a barrier completes or breaks */
    bool mu_ready, cv_ready;
    /* The barrier: which ranks have arrived at the current one, how many, and how many barriers
     * have completed. */
    bool *arrived;
    int n_arrived;
    unsigned long gen;
    unsigned long warned; /* gen + 1 of the barrier whose stall warning was printed */
    slot *slots;
    bool *taken; /* ranks with a live dt_comm */
    int n_live;
    /* The first failure; DT_OK while the group works. */
    dt_status broken;
    char broken_msg[MSG_CAP];
};

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct timespec mono_abs(double t)
{
    /* An infinite timeout waits in slices of a day; the loop re-checks. */
    double now = mono_now();
    if (!(t < now + 86400.0))
        t = now + 86400.0;
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    if (ts.tv_nsec < 0)
        ts.tv_nsec = 0;
    return ts;
}

/* Breaks the group with this error unless it already is; called with the mutex held. Wakes the
 * waiting ranks, which then fail with the same error. */
static void break_locked(dt_local_group *g, dt_status code, const char *msg)
{
    if (g->broken == DT_OK) {
        g->broken = code;
        snprintf(g->broken_msg, sizeof g->broken_msg, "%s", msg);
    }
    pthread_cond_broadcast(&g->cv);
}

static dt_status broken_error(const dt_local_group *g)
{
    return dt_error(g->broken, "%s", g->broken_msg);
}

/* "2, 3": the ranks that have not arrived at the current barrier. Returns how many. */
static int missing_ranks(const dt_local_group *g, char *buf, size_t cap, int *first)
{
    size_t used = 0;
    int count = 0;
    buf[0] = '\0';
    for (int r = 0; r < g->size; r++) {
        if (g->arrived[r])
            continue;
        if (count++ == 0)
            *first = r;
        if (used < cap) {
            int w = snprintf(buf + used, cap - used, "%s%d", count > 1 ? ", " : "", r);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    if (used >= cap && cap > 4)
        memcpy(buf + cap - 4, "...", 4);
    return count;
}

static void describe(const slot *s, char *buf, size_t cap)
{
    switch (s->k) {
    case K_ALLREDUCE:
    case K_REDUCE_SCATTER:
        snprintf(buf, cap, "%s of %zu elements (%s, %s)", kind_name(s->k), s->n,
                 dt_reduce_op_name(s->op), dt_wire_dtype_name(s->wire));
        return;
    case K_ALLGATHER: snprintf(buf, cap, "all-gather of %zu bytes", s->n); return;
    case K_BROADCAST:
        snprintf(buf, cap, "broadcast of %zu bytes from rank %d", s->n, s->root);
        return;
    case K_BARRIER: snprintf(buf, cap, "barrier"); return;
    }
}

/* Called by the last rank to arrive, with the mutex held: every rank must be in the same
 * collective with the same arguments. Breaks the group and returns false otherwise. */
static bool slots_agree(dt_local_group *g)
{
    const slot *a = &g->slots[0];
    for (int r = 1; r < g->size; r++) {
        const slot *b = &g->slots[r];
        bool reduction = a->k == K_ALLREDUCE || a->k == K_REDUCE_SCATTER;
        if (a->k == b->k && a->n == b->n &&
            (!reduction || (a->op == b->op && a->wire == b->wire)) &&
            (a->k != K_BROADCAST || a->root == b->root))
            continue;
        char da[128], db[128], msg[MSG_CAP];
        describe(a, da, sizeof da);
        describe(b, db, sizeof db);
        snprintf(msg, sizeof msg,
                 "collective mismatch: local rank 0 called %s but local rank %d called %s (every "
                 "rank must call the same collectives in the same order with the same counts)",
                 da, r, db);
        break_locked(g, DT_ERR_INVALID, msg);
        return false;
    }
    return true;
}

static void release_locked(dt_local_group *g)
{
    memset(g->arrived, 0, (size_t)g->size * sizeof *g->arrived);
    g->n_arrived = 0;
    g->gen++;
    pthread_cond_broadcast(&g->cv);
}

/* The entry barrier of a collective: publishes s as this rank's slot and waits, until c->timeout
 * seconds after start, for every rank to arrive. */
static dt_status enter(dt_comm *c, const slot *s, double start)
{
    dt_local_group *g = c->impl;
    const char *what = kind_name(s->k);
    dt_status st = DT_OK;
    pthread_mutex_lock(&g->mu);
    if (g->broken != DT_OK) {
        st = broken_error(g);
        goto out;
    }
    g->slots[c->rank] = *s;
    assert(!g->arrived[c->rank]);
    g->arrived[c->rank] = true;
    if (++g->n_arrived == g->size) {
        if (!slots_agree(g)) {
            st = broken_error(g);
            goto out;
        }
        release_locked(g);
        goto out;
    }
    unsigned long my_gen = g->gen;
    double deadline = start + c->timeout, warn_at = start + c->stall_warn;
    while (g->gen == my_gen && g->broken == DT_OK) {
        double now = mono_now();
        if (now >= deadline) {
            char missing[256], msg[MSG_CAP];
            int first = -1;
            missing_ranks(g, missing, sizeof missing, &first);
            snprintf(msg, sizeof msg,
                     "%s: timed out after %g s waiting for local rank %d (ranks missing: %s)", what,
                     c->timeout, first, missing);
            break_locked(g, DT_ERR_TIMEOUT, msg);
            break;
        }
        if (now >= warn_at && g->warned != my_gen + 1) {
            char missing[256];
            int first = -1;
            int n = missing_ranks(g, missing, sizeof missing, &first);
            dt_log_to(NULL, DT_LOG_WARN, "dtrain: warning: %s: %s %s %s not entered it after %g s",
                      what, n == 1 ? "rank" : "ranks", missing, n == 1 ? "has" : "have",
                      c->stall_warn);
            g->warned = my_gen + 1;
        }
        double until = now < warn_at && g->warned != my_gen + 1 && warn_at < deadline ? warn_at
                                                                                      : deadline;
        struct timespec ts = mono_abs(until);
        int rc = pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        assert(rc == 0 || rc == ETIMEDOUT);
        (void)rc;
    }
    /* The barrier completing wins over a failure raised after it. */
    if (g->gen == my_gen)
        st = broken_error(g);
out:
    pthread_mutex_unlock(&g->mu);
    return st;
}

/* A barrier between the phases of a collective that every rank has entered: no deadline (see the
 * top of the file). */
static void phase_barrier(dt_comm *c)
{
    dt_local_group *g = c->impl;
    pthread_mutex_lock(&g->mu);
    g->arrived[c->rank] = true;
    if (++g->n_arrived == g->size) {
        release_locked(g);
    } else {
        unsigned long my_gen = g->gen;
        while (g->gen == my_gen)
            pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}

/* Rounds x (n_elems) to the wire format and back to float32 into out; h is scratch. */
static void round_wire(const float *x, float *out, uint16_t *h, size_t n_elems, dt_wire_dtype w)
{
    dt_wire_encode(w, x, h, n_elems);
    dt_wire_decode(w, h, out, n_elems);
}

/* Reduces this rank's block of every rank's data into this rank's data, in rank order, chunk by
 * chunk so that the partial result stays in cache while every rank's chunk is added. */
static void reduce_own_block(dt_comm *c, const slot *s)
{
    dt_local_group *g = c->impl;
    size_t off, n;
    dt_comm_block(s->n, g->size, c->rank, &off, &n);
    float acc[CHUNK], in[CHUNK];
    uint16_t h[CHUNK];
    float *own = (float *)g->slots[c->rank].dst;
    for (size_t at = 0; at < n; at += CHUNK) {
        size_t len = n - at < CHUNK ? n - at : CHUNK;
        for (int q = 0; q < g->size; q++) {
            const float *x = (const float *)g->slots[q].src + off + at;
            if (s->wire != DT_WIRE_F32) {
                round_wire(x, in, h, len, s->wire);
                x = in;
            }
            if (q == 0)
                memcpy(acc, x, len * sizeof *acc);
            else
                dt_reduce_f32(acc, x, len, s->op);
        }
        if (s->wire != DT_WIRE_F32)
            round_wire(acc, acc, h, len, s->wire);
        if (s->op == DT_REDUCE_MEAN) {
            float div = (float)g->size;
            for (size_t i = 0; i < len; i++)
                acc[i] /= div;
        }
        memcpy(own + off + at, acc, len * sizeof *acc);
    }
}

static dt_status local_reduce(dt_comm *c, float *data, size_t n_elems, dt_reduce_op op,
                              dt_wire_dtype wire, kind k)
{
    double start = mono_now();
    dt_local_group *g = c->impl;
    assert(data || n_elems == 0);
    slot s = {.k = k, .n = n_elems, .op = op, .wire = wire, .root = 0, .src = data, .dst = data};
    dt_status st = enter(c, &s, start);
    if (st != DT_OK || n_elems == 0)
        return st;
    reduce_own_block(c, &s);
    phase_barrier(c);
    if (k == K_REDUCE_SCATTER)
        return DT_OK;
    for (int q = 0; q < g->size; q++) {
        size_t off, n;
        dt_comm_block(n_elems, g->size, q, &off, &n);
        if (q != c->rank && n)
            memcpy(data + off, (const float *)g->slots[q].dst + off, n * sizeof *data);
    }
    phase_barrier(c);
    return DT_OK;
}

static dt_status local_allreduce(dt_comm *c, float *data, size_t n_elems, dt_reduce_op op,
                                 dt_wire_dtype wire)
{
    return local_reduce(c, data, n_elems, op, wire, K_ALLREDUCE);
}

static dt_status local_reduce_scatter(dt_comm *c, float *data, size_t n_elems, dt_reduce_op op,
                                      dt_wire_dtype wire)
{
    return local_reduce(c, data, n_elems, op, wire, K_REDUCE_SCATTER);
}

static dt_status local_allgather(dt_comm *c, const void *send, size_t n_bytes, void *recv)
{
    double start = mono_now();
    dt_local_group *g = c->impl;
    assert((send && recv) || n_bytes == 0);
    slot s = {.k = K_ALLGATHER, .n = n_bytes, .src = send, .dst = recv};
    dt_status st = enter(c, &s, start);
    if (st != DT_OK || n_bytes == 0)
        return st;
    for (int q = 0; q < g->size; q++) {
        char *to = (char *)recv + (size_t)q * n_bytes;
        /* send may already sit in its place in recv (an in-place all-gather), where the others
         * are reading it: no copy then, not even of the same bytes onto themselves. */
        if (q == c->rank) {
            if (to != send)
                memmove(to, send, n_bytes);
        } else
            memcpy(to, g->slots[q].src, n_bytes);
    }
    phase_barrier(c);
    return DT_OK;
}

static dt_status local_broadcast(dt_comm *c, void *data, size_t n_bytes, int root)
{
    double start = mono_now();
    dt_local_group *g = c->impl;
    assert(data || n_bytes == 0);
    if (root < 0 || root >= g->size) {
        /* The other ranks would wait for this one in vain: break the group for all. */
        char msg[MSG_CAP];
        snprintf(msg, sizeof msg, "broadcast: root %d is not a rank of this %d-rank group", root,
                 g->size);
        pthread_mutex_lock(&g->mu);
        break_locked(g, DT_ERR_INVALID, msg);
        dt_status st = broken_error(g);
        pthread_mutex_unlock(&g->mu);
        return st;
    }
    slot s = {.k = K_BROADCAST, .n = n_bytes, .root = root, .src = data, .dst = data};
    dt_status st = enter(c, &s, start);
    if (st != DT_OK || n_bytes == 0)
        return st;
    const void *from = g->slots[root].src;
    if (c->rank != root && from != data)
        memcpy(data, from, n_bytes);
    phase_barrier(c);
    return DT_OK;
}

static dt_status local_barrier(dt_comm *c)
{
    slot s = {.k = K_BARRIER};
    return enter(c, &s, mono_now());
}

static void local_destroy(dt_comm *c)
{
    dt_local_group *g = c->impl;
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    assert(g->taken[c->rank]);
    g->taken[c->rank] = false;
    g->n_live--;
    pthread_mutex_unlock(&g->mu);
    c->impl = NULL;
}

static const dt_comm_ops local_ops = {
    .name = "local",
    .allreduce = local_allreduce,
    .reduce_scatter = local_reduce_scatter,
    .allgather = local_allgather,
    .broadcast = local_broadcast,
    .barrier = local_barrier,
    .destroy = local_destroy,
};

dt_status dt_local_group_create(int size, double timeout, dt_local_group **out)
{
    *out = NULL;
    if (size < 1 || size > MAX_RANKS)
        return dt_error(DT_ERR_INVALID, "local group: size %d is not in 1..%d", size, MAX_RANKS);
    if (!(timeout > 0))
        return dt_error(DT_ERR_INVALID, "local group: timeout %g s is not positive", timeout);
    dt_status st = DT_OK;
    pthread_condattr_t attr;
    bool attr_ready = false;
    dt_local_group *g = calloc(1, sizeof *g);
    if (!g)
        goto nomem;
    g->size = size;
    g->timeout = timeout;
    g->arrived = calloc((size_t)size, sizeof *g->arrived);
    g->slots = calloc((size_t)size, sizeof *g->slots);
    g->taken = calloc((size_t)size, sizeof *g->taken);
    if (!g->arrived || !g->slots || !g->taken)
        goto nomem;
    if (pthread_mutex_init(&g->mu, NULL) != 0)
        goto nomem;
    g->mu_ready = true;
    if (pthread_condattr_init(&attr) != 0)
        goto nomem;
    attr_ready = true;
    if (pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&g->cv, &attr) != 0)
        goto nomem;
    g->cv_ready = true;
    pthread_condattr_destroy(&attr);
    *out = g;
    return DT_OK;
nomem:
    st = dt_error(DT_ERR_NOMEM, "local group: out of memory for %d ranks", size);
    if (attr_ready)
        pthread_condattr_destroy(&attr);
    dt_local_group_destroy(g);
    return st;
}

dt_status dt_comm_local(dt_local_group *g, int rank, dt_comm **out)
{
    *out = NULL;
    if (rank < 0 || rank >= g->size)
        return dt_error(DT_ERR_INVALID, "local group: rank %d is not in 0..%d", rank, g->size - 1);
    dt_comm *c = calloc(1, sizeof *c);
    if (!c)
        return dt_error(DT_ERR_NOMEM, "local group: out of memory");
    pthread_mutex_lock(&g->mu);
    bool taken = g->taken[rank];
    if (!taken) {
        g->taken[rank] = true;
        g->n_live++;
    }
    pthread_mutex_unlock(&g->mu);
    if (taken) {
        free(c);
        return dt_error(DT_ERR_INVALID, "local group: rank %d already has a communicator", rank);
    }
    c->ops = &local_ops;
    c->rank = rank;
    c->size = g->size;
    c->timeout = g->timeout;
    c->stall_warn = 30;
    c->impl = g;
    *out = c;
    return DT_OK;
}

void dt_local_group_destroy(dt_local_group *g)
{
    if (!g)
        return;
    /* Every rank's communicator goes first: they point at the group. */
    assert(g->n_live == 0);
    if (g->cv_ready)
        pthread_cond_destroy(&g->cv);
    if (g->mu_ready)
        pthread_mutex_destroy(&g->mu);
    free(g->taken);
    free(g->slots);
    free(g->arrived);
    free(g);
}
