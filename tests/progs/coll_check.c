/* coll_check: every collective of a communicator at awkward counts, checked on every rank.
 *
 *   coll_check --comm local [--ranks N]   N threads of this process (default 4)
 *   coll_check --comm mpi                 one rank per process, under mpirun
 *   coll_check --comm tcp                 one rank per process, the cluster from TF_CONFIG
 *                                         (under dtrain launch; DTRAIN_CLUSTER_SECRET)
 *   options: --counts A,B,...  (default 0,1,2,7,13,97,1000003)  --timeout SECONDS (default 60)
 *
 * Each rank fills its input from (rank, index) alone, so every rank can compute the expected
 * result itself whatever the backend's reduction order: the reduction inputs are multiples of 0.5
 * small enough that every partial sum is exact in float32, bfloat16 and half, so the exact
 * expected values hold for every op and wire dtype. Min and max run again over signed zeros,
 * infinities and NaNs, where dtrain's min and max fix every bit whatever the order. A last
 * all-reduce of inexact random values checks that every rank gets the same bits and that the sum
 * is within the wire format's error. The sharded update (dt_comm_allreduce_update) must give the
 * same params on every rank, each element updated by one rank where the backend shards, and
 * dt_comm_share_owned must give every rank the owners' values.
 * After each check the ranks gather their verdicts (with the communicator under test), rank 0
 * prints one line per collective and count ("ok   ..." or "FAIL ...: rank R: why"), and the
 * program exits 0 only if everything matched on every rank. A failed call breaks the
 * communicator, so the first one ends the run. Not part of the unit test binary: tests/mpi.sh runs
 * it under mpirun. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/comm.h"
#include "../../src/coll/comm_tcp.h"

#define MAX_COUNTS 32

static size_t counts[MAX_COUNTS] = {0, 1, 2, 7, 13, 97, 1000003};
static int n_counts = 7;

/* A rank's verdict on one check, gathered by all. */
typedef struct {
    int32_t bad;       /* 0 = matched */
    int32_t pad;
    uint64_t n_wrong;  /* elements or bytes that differ */
    uint64_t first;    /* the first of them */
    double got, want;  /* its values (for float results) */
    uint64_t hash;     /* of the result, for the same-bits check */
} verdict;

typedef struct {
    dt_comm *c;
    int failures;
    int checks;
} run;

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* Rank q's exact input at index i: a multiple of 0.5 with |x| <= m / 2, m = 255 / size, so that
 * any partial sum of up to size of them is k / 2 with |k| <= 255: exact in 8 significant bits. */
static float exact_input(int q, size_t i, int size)
{
    int m = 255 / size;
    uint32_t h = mix((uint32_t)q * 0x9E3779B9U ^ mix((uint32_t)i + 0x1234567U));
    return (float)((int)(h % (uint32_t)(2 * m + 1)) - m) * 0.5f;
}

/* Rank q's inexact input at i: random in [-4, 4), fine enough that rounding shows. */
static float random_input(int q, size_t i)
{
    uint32_t h = mix((uint32_t)q * 0x85EBCA6BU ^ mix((uint32_t)i * 3 + 7));
    return ((float)(h >> 8) * 0x1p-24f - 0.5f) * 8.0f;
}

/* Rank q's input at i for min and max: signed zeros, infinities, NaNs with rank-specific
 * payloads (kept by bfloat16, dropped by half) and a few numbers. */
static float special_input(int q, size_t i)
{
    static const uint32_t table[16] = {0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x3FC00000,
                                       0xBFC00000, 0x40000000, 0xBF000000, 0x00000000, 0x80000000,
                                       0x3F800000, 0xBF800000, 0x42000000, 0xC2000000, 0, 0};
    uint32_t h = mix((uint32_t)q * 0xC2B2AE35U ^ mix((uint32_t)i + 99)), u = table[h % 16];
    if (h % 16 == 14)
        u = 0x7FC00000u | ((uint32_t)(q & 0x3F) << 16);
    else if (h % 16 == 15 && (h >> 8) % 4 == 0)
        u = 0xFFC00000u | ((uint32_t)(q & 0x3F) << 16);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float wire_round(float x, dt_wire_dtype w)
{
    uint16_t h;
    if (w == DT_WIRE_BF16) {
        dt_f32_to_bf16(&x, &h, 1);
        dt_bf16_to_f32(&h, &x, 1);
    } else if (w == DT_WIRE_F16) {
        dt_f32_to_f16(&x, &h, 1);
        dt_f16_to_f32(&h, &x, 1);
    }
    return x;
}

static uint8_t byte_input(int q, size_t i)
{
    return (uint8_t)(mix((uint32_t)q * 131 + (uint32_t)i) >> 3);
}

static uint64_t fnv(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static float exact_expected(size_t i, int size, dt_reduce_op op)
{
    float acc = exact_input(0, i, size);
    for (int q = 1; q < size; q++) {
        float x = exact_input(q, i, size);
        acc = op == DT_REDUCE_MIN ? fminf(acc, x) : op == DT_REDUCE_MAX ? fmaxf(acc, x) : acc + x;
    }
    return op == DT_REDUCE_MEAN ? acc / (float)size : acc;
}

static void compare_floats(const float *got, size_t from, size_t n, int size, dt_reduce_op op,
                           verdict *v)
{
    for (size_t i = from; i < from + n; i++) {
        float want = exact_expected(i, size, op);
        if (memcmp(&got[i], &want, sizeof want) != 0) {
            if (v->n_wrong++ == 0) {
                v->first = i;
                v->got = got[i];
                v->want = want;
            }
        }
    }
    v->bad = v->n_wrong != 0;
}

/* Gathers every rank's verdict; rank 0 prints the line. Returns false when the gather fails. */
static bool report(run *r, const char *what, verdict *mine, bool same_bits)
{
    dt_comm *c = r->c;
    verdict *all = calloc((size_t)c->size, sizeof *all);
    if (!all) {
        fprintf(stderr, "coll_check: out of memory\n");
        exit(2);
    }
    dt_status st = dt_comm_allgather(c, mine, sizeof *mine, all);
    if (st != DT_OK) {
        printf("FAIL %s: rank %d: gathering the verdicts: %s\n", what, c->rank, dt_last_error());
        free(all);
        r->failures++;
        return false;
    }
    int bad_rank = -1;
    for (int q = 0; q < c->size && bad_rank < 0; q++)
        if (all[q].bad)
            bad_rank = q;
    bool differ = false;
    for (int q = 1; q < c->size && same_bits; q++)
        differ |= all[q].hash != all[0].hash;
    r->checks++;
    if (bad_rank >= 0 || differ)
        r->failures++;
    if (c->rank == 0) {
        if (bad_rank >= 0) {
            const verdict *v = &all[bad_rank];
            printf("FAIL %s: rank %d: %" PRIu64 " wrong, the first at [%" PRIu64
                   "] = %.9g, expected %.9g\n",
                   what, bad_rank, v->n_wrong, v->first, v->got, v->want);
        } else if (differ) {
            printf("FAIL %s: the ranks' results differ in their bits\n", what);
        } else {
            printf("ok   %s\n", what);
        }
        fflush(stdout);
    }
    free(all);
    return true;
}

/* A call failed: the communicator is broken, so the run ends here. */
static int call_failed(run *r, const char *what)
{
    printf("FAIL %s: rank %d: %s\n", what, r->c->rank, dt_last_error());
    fflush(stdout);
    r->failures++;
    return -1;
}

static int check_reductions(run *r, size_t n, float *buf)
{
    static const dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_MEAN, DT_REDUCE_MIN, DT_REDUCE_MAX};
    static const dt_wire_dtype wires[] = {DT_WIRE_F32, DT_WIRE_BF16, DT_WIRE_F16};
    dt_comm *c = r->c;
    char what[160];
    for (int scatter = 0; scatter < 2; scatter++) {
        for (size_t o = 0; o < 4; o++) {
            for (size_t w = 0; w < 3; w++) {
                snprintf(what, sizeof what, "%s %s %s n=%zu (%d ranks)",
                         scatter ? "reduce-scatter" : "all-reduce", dt_reduce_op_name(ops[o]),
                         dt_wire_dtype_name(wires[w]), n, c->size);
                for (size_t i = 0; i < n; i++)
                    buf[i] = exact_input(c->rank, i, c->size);
                dt_status st = scatter ? dt_comm_reduce_scatter(c, buf, n, ops[o], wires[w])
                                       : dt_comm_allreduce(c, buf, n, ops[o], wires[w]);
                if (st != DT_OK)
                    return call_failed(r, what);
                size_t off = 0, len = n;
                if (scatter)
                    dt_comm_block(n, c->size, c->rank, &off, &len);
                verdict v = {0};
                compare_floats(buf, off, len, c->size, ops[o], &v);
                if (!report(r, what, &v, false))
                    return -1;
            }
        }
    }
    /* Min and max over signed zeros, infinities and NaNs: dtrain's min and max commute to the
     * bit, so the expected bits do not depend on the backend's order. */
    for (int o = 2; o < 4; o++) {
        for (size_t w = 0; w < 3; w++) {
            snprintf(what, sizeof what, "all-reduce %s %s n=%zu with zeros, infinities and NaN "
                     "(%d ranks)", dt_reduce_op_name(ops[o]), dt_wire_dtype_name(wires[w]), n,
                     c->size);
            for (size_t i = 0; i < n; i++)
                buf[i] = special_input(c->rank, i);
            if (dt_comm_allreduce(c, buf, n, ops[o], wires[w]) != DT_OK)
                return call_failed(r, what);
            verdict v = {0};
            for (size_t i = 0; i < n; i++) {
                float want = wire_round(special_input(0, i), wires[w]);
                for (int q = 1; q < c->size; q++) {
                    float x = wire_round(special_input(q, i), wires[w]);
                    dt_reduce_f32(&want, &x, 1, ops[o]);
                }
                if (memcmp(&buf[i], &want, sizeof want) != 0 && v.n_wrong++ == 0) {
                    v.first = i;
                    v.got = buf[i];
                    v.want = want;
                }
            }
            v.bad = v.n_wrong != 0;
            v.hash = fnv(buf, n * sizeof *buf);
            if (!report(r, what, &v, true))
                return -1;
        }
    }
    /* Inexact values: every rank must get the same bits, near the true sum. */
    for (size_t w = 0; w < 3; w++) {
        snprintf(what, sizeof what, "all-reduce sum %s n=%zu same bits on every rank (%d ranks)",
                 dt_wire_dtype_name(wires[w]), n, c->size);
        for (size_t i = 0; i < n; i++)
            buf[i] = random_input(c->rank, i);
        if (dt_comm_allreduce(c, buf, n, DT_REDUCE_SUM, wires[w]) != DT_OK)
            return call_failed(r, what);
        /* Each contribution and partial sum rounds by at most half an ulp of the format. */
        double unit = wires[w] == DT_WIRE_F32    ? 0x1p-24
                      : wires[w] == DT_WIRE_BF16 ? 0x1p-8
                                                 : 0x1p-11;
        verdict v = {0};
        for (size_t i = 0; i < n; i++) {
            double exact = 0, mag = 0;
            for (int q = 0; q < c->size; q++) {
                exact += random_input(q, i);
                mag += fabs(random_input(q, i));
            }
            if (fabs(buf[i] - exact) > 2.0 * (c->size + 1) * unit * mag && v.n_wrong++ == 0) {
                v.first = i;
                v.got = buf[i];
                v.want = exact;
            }
        }
        v.bad = v.n_wrong != 0;
        v.hash = fnv(buf, n * sizeof *buf);
        if (!report(r, what, &v, true))
            return -1;
    }
    return 0;
}

static int check_allgather(run *r, size_t n, uint8_t *send, uint8_t *recv)
{
    dt_comm *c = r->c;
    char what[160];
    for (int in_place = 0; in_place < 2; in_place++) {
        snprintf(what, sizeof what, "all-gather%s n_bytes=%zu (%d ranks)",
                 in_place ? " in place" : "", n, c->size);
        memset(recv, 0xEE, (size_t)c->size * n);
        uint8_t *from = in_place ? recv + (size_t)c->rank * n : send;
        for (size_t i = 0; i < n; i++)
            from[i] = byte_input(c->rank, i);
        if (dt_comm_allgather(c, from, n, recv) != DT_OK)
            return call_failed(r, what);
        verdict v = {0};
        for (int q = 0; q < c->size; q++) {
            for (size_t i = 0; i < n; i++) {
                uint8_t got = recv[(size_t)q * n + i], want = byte_input(q, i);
                if (got != want && v.n_wrong++ == 0) {
                    v.first = (uint64_t)q * n + i;
                    v.got = got;
                    v.want = want;
                }
            }
        }
        v.bad = v.n_wrong != 0;
        if (!report(r, what, &v, false))
            return -1;
    }
    return 0;
}

static int check_broadcast(run *r, size_t n, uint8_t *buf)
{
    dt_comm *c = r->c;
    int roots[3] = {0, c->size - 1, c->size / 2};
    char what[160];
    for (int k = 0; k < 3; k++) {
        bool seen = false; /* a root already tested at this size */
        for (int j = 0; j < k; j++)
            seen |= roots[j] == roots[k];
        if (seen)
            continue;
        int root = roots[k];
        snprintf(what, sizeof what, "broadcast from rank %d n_bytes=%zu (%d ranks)", root, n,
                 c->size);
        for (size_t i = 0; i < n; i++)
            buf[i] = c->rank == root ? byte_input(root, i) : (uint8_t)~byte_input(root, i);
        if (dt_comm_broadcast(c, buf, n, root) != DT_OK)
            return call_failed(r, what);
        verdict v = {0};
        for (size_t i = 0; i < n; i++) {
            if (buf[i] != byte_input(root, i) && v.n_wrong++ == 0) {
                v.first = i;
                v.got = buf[i];
                v.want = byte_input(root, i);
            }
        }
        v.bad = v.n_wrong != 0;
        if (!report(r, what, &v, false))
            return -1;
    }
    return 0;
}

/* dt_comm_allreduce_update's probe: params[i] = params[i] / 2 + the sum of grads[i], and a
 * record of which elements this rank updated (twice is an error, as is a range out of bounds). */
typedef struct {
    float *params;
    uint8_t *owned;
    size_t n;
    uint64_t updated, bad;
} update_probe;

static void probe_update(void *ctx, size_t lo, size_t hi, const float *sum)
{
    update_probe *u = ctx;
    if (lo > hi || hi > u->n) {
        u->bad++;
        return;
    }
    for (size_t i = lo; i < hi; i++) {
        u->bad += u->owned[i];
        u->owned[i] = 1;
        u->params[i] = u->params[i] * 0.5f + sum[i - lo];
    }
    u->updated += hi - lo;
}

static float start_param(size_t i) { return (float)(i % 64) / 8.0f; }
static float owner_value(size_t i) { return (float)(i % 1000) + 0.25f; }

/* Whether this communicator keeps tensors in shared memory (tcp, every rank on this host). */
static bool shares_tensors(const dt_comm *c)
{
    return strcmp(c->ops->name, "tcp") == 0 && dt_comm_tcp_uses_shm(c);
}

/* Whether it shards the update of n elements or leaves each rank to update everything: tcp does
 * through shared memory, and over its ring, which serves what recursive doubling does not (over
 * 64 KiB, the default that coll_check keeps). */
static bool shards_updates(const dt_comm *c, size_t n)
{
    return shares_tensors(c) ||
           (strcmp(c->ops->name, "tcp") == 0 && c->size > 1 && n * sizeof(float) > 65536);
}

static void *alloc_or_die(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "coll_check: out of memory\n");
        exit(2);
    }
    return p;
}

/* dt_comm_allreduce_update's outcome: params must be (start + base) / 2 + the sum, and the
 * ranks together must have updated every element once (sharded) or once each. The verdict is
 * not reported; -1 when the tally's all-reduce failed. */
static int judge_update(run *r, const char *what, const float *params, size_t n, float base,
                        const update_probe *u, bool sharded, verdict *v)
{
    dt_comm *c = r->c;
    for (size_t i = 0; i < n; i++) {
        float want = (start_param(i) + base) * 0.5f + exact_expected(i, c->size, DT_REDUCE_SUM);
        if (memcmp(&params[i], &want, sizeof want) != 0 && v->n_wrong++ == 0) {
            v->first = i;
            v->got = params[i];
            v->want = want;
        }
    }
    float tally[2] = {(float)u->updated, (float)u->bad};
    if (dt_comm_allreduce(c, tally, 2, DT_REDUCE_SUM, DT_WIRE_F32) != DT_OK)
        return call_failed(r, what);
    double want_updates = sharded ? (double)n : (double)n * c->size;
    if (v->n_wrong == 0 && (tally[0] != want_updates || tally[1] != 0.0f)) {
        v->n_wrong = 1;
        v->first = (uint64_t)tally[1]; /* ranges out of bounds or elements updated twice */
        v->got = tally[0];
        v->want = want_updates;
    }
    v->bad = v->n_wrong != 0;
    v->hash = fnv(params, n * sizeof *params);
    return 0;
}

/* dt_comm_share_owned of a slot holding the owner's value where this rank owned the element in
 * the update (owned) and -1 elsewhere: every rank must end with every owner's values. */
static int check_share_owned(run *r, const char *what, const uint8_t *owned, size_t n)
{
    float *slot = alloc_or_die(n * sizeof *slot);
    for (size_t i = 0; i < n; i++)
        slot[i] = owned[i] ? owner_value(i) : -1.0f;
    if (dt_comm_share_owned(r->c, slot, n) != DT_OK) {
        free(slot);
        return call_failed(r, what);
    }
    verdict v = {0};
    for (size_t i = 0; i < n; i++) {
        if (slot[i] != owner_value(i) && v.n_wrong++ == 0) {
            v.first = i;
            v.got = slot[i];
            v.want = owner_value(i);
        }
    }
    v.bad = v.n_wrong != 0;
    v.hash = fnv(slot, n * sizeof *slot);
    free(slot);
    return report(r, what, &v, true) ? 0 : -1;
}

/* dt_comm_allreduce_update: every rank ends with start / 2 + the sum, each element updated by
 * exactly one rank where the communicator shards (by every rank otherwise); then
 * dt_comm_share_owned gives every rank the owners' values of a slot. */
static int check_update_and_share(run *r, size_t n, float *grads)
{
    dt_comm *c = r->c;
    char what[160];
    float *params = alloc_or_die(n * sizeof *params);
    uint8_t *owned = alloc_or_die(n);
    memset(owned, 0, n);
    for (size_t i = 0; i < n; i++) {
        grads[i] = exact_input(c->rank, i, c->size);
        params[i] = start_param(i);
    }
    update_probe u = {params, owned, n, 0, 0};
    snprintf(what, sizeof what, "all-reduce and update n=%zu (%d ranks, %s)", n, c->size,
             shards_updates(c, n) ? "sharded" : "every rank updates all");
    verdict v = {0};
    int rc = dt_comm_allreduce_update(c, grads, params, n, probe_update, &u) != DT_OK
                 ? call_failed(r, what)
                 : judge_update(r, what, params, n, 0.0f, &u, shards_updates(c, n), &v);
    if (rc == 0 && !report(r, what, &v, true))
        rc = -1;
    snprintf(what, sizeof what, "share of owned state n=%zu (%d ranks)", n, c->size);
    if (rc == 0)
        rc = check_share_owned(r, what, owned, n);
    free(owned);
    free(params);
    return rc;
}

/* One pass of check_shared_tensors. */
static int check_shared_pass(run *r, size_t n, int pass, float *mine, uint8_t *owned)
{
    dt_comm *c = r->c;
    char what[160];
    snprintf(what, sizeof what, "shared tensors, update in place n=%zu (%d ranks, pass %d)", n,
             c->size, pass + 1);
    /* Each rank's own parameters differ: rank 0's must win. */
    for (size_t i = 0; i < n; i++)
        mine[i] = start_param(i) + (float)(c->rank * 1000 + pass);
    float *params = NULL, *grads = NULL;
    if (dt_comm_share_tensors(c, mine, n, n, &params, &grads) != DT_OK)
        return call_failed(r, what);
    bool shared = params != NULL;
    verdict v = {0};
    if (shared != shares_tensors(c) || (shared && params == mine)) {
        v.n_wrong = 1;
        v.got = shared;
        v.want = shares_tensors(c);
    }
    for (size_t i = 0; shared && i < n && v.n_wrong == 0; i++) {
        float want = start_param(i) + (float)pass;
        if (params[i] != want && v.n_wrong++ == 0) {
            v.first = i;
            v.got = params[i];
            v.want = want;
        }
    }
    float *own_grads = NULL;
    if (!shared) {
        params = mine;
        grads = own_grads = alloc_or_die(n * sizeof *grads);
        for (size_t i = 0; i < n; i++)
            params[i] = start_param(i) + (float)pass;
    }
    int rc = 0;
    if (v.n_wrong == 0) {
        for (size_t i = 0; i < n; i++)
            grads[i] = exact_input(c->rank, i, c->size);
        memset(owned, 0, n);
        update_probe u = {params, owned, n, 0, 0};
        rc = dt_comm_allreduce_update(c, grads, params, n, probe_update, &u) != DT_OK
                 ? call_failed(r, what)
                 : judge_update(r, what, params, n, (float)pass, &u, shards_updates(c, n), &v);
    }
    v.bad = v.n_wrong != 0;
    free(own_grads);
    /* The shared parameters are read by every rank: meet before the next pass writes them. */
    if (rc == 0 && (!report(r, what, &v, true) || dt_comm_barrier(c) != DT_OK))
        rc = -1;
    /* What each rank owned in the update is what dt_comm_share_owned gathers from it. */
    snprintf(what, sizeof what, "share of state owned in place n=%zu (%d ranks)", n, c->size);
    if (rc == 0 && !v.bad)
        rc = check_share_owned(r, what, owned, n);
    return rc;
}

/* dt_comm_share_tensors: one copy of the parameters, starting as rank 0's, and each rank's
 * gradients in shared memory where the communicator has it (tcp with every rank on this host);
 * dt_comm_allreduce_update on them updates that copy in place, each element by one rank, and
 * every rank sees the result. Twice, as two trainings on one communicator would: the second
 * starts again from rank 0's parameters. */
static int check_shared_tensors(run *r, size_t n)
{
    float *mine = alloc_or_die(n * sizeof *mine);
    uint8_t *owned = alloc_or_die(n);
    int rc = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++)
        rc = check_shared_pass(r, n, pass, mine, owned);
    free(owned);
    free(mine);
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The last rank arrives 200 ms late: the barrier must hold the others about that long. The ranks
 * leave the first barrier at slightly different times (on a loaded machine a rank may leave it
 * several milliseconds after the last one began to sleep), so a wait of 150 ms passes; a barrier
 * that does not wait gives a few milliseconds. */
static int check_barrier(run *r)
{
    dt_comm *c = r->c;
    char what[160];
    snprintf(what, sizeof what, "barrier waits for the last rank (%d ranks)", c->size);
    if (dt_comm_barrier(c) != DT_OK)
        return call_failed(r, what);
    double t0 = now_s();
    if (c->rank == c->size - 1) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (dt_comm_barrier(c) != DT_OK)
        return call_failed(r, what);
    double waited = now_s() - t0;
    verdict v = {0};
    if (waited < 0.15) {
        v.bad = 1;
        v.n_wrong = 1;
        v.got = waited;
        v.want = 0.2;
    }
    return report(r, what, &v, false) ? 0 : -1;
}

/* Every check on this rank; returns the number of failures (on this rank's view). */
static int check_rank(dt_comm *c)
{
    run r = {.c = c};
    size_t max_n = 0;
    for (int k = 0; k < n_counts; k++)
        max_n = counts[k] > max_n ? counts[k] : max_n;
    float *fbuf = malloc((max_n ? max_n : 1) * sizeof *fbuf);
    uint8_t *send = malloc(max_n ? max_n : 1);
    uint8_t *recv = malloc((max_n ? max_n : 1) * (size_t)c->size);
    if (!fbuf || !send || !recv) {
        fprintf(stderr, "coll_check: out of memory\n");
        exit(2);
    }
    int rc = check_barrier(&r);
    /* First: a communicator maps one set of shared tensors, of the first sizes asked for. */
    if (rc == 0 && n_counts > 0)
        rc = check_shared_tensors(&r, counts[n_counts - 1]);
    for (int k = 0; k < n_counts && rc == 0; k++) {
        size_t n = counts[k];
        rc = check_reductions(&r, n, fbuf);
        if (rc == 0)
            rc = check_allgather(&r, n, send, recv);
        if (rc == 0)
            rc = check_broadcast(&r, n, send);
        if (rc == 0)
            rc = check_update_and_share(&r, n, fbuf);
    }
    if (c->rank == 0 || rc != 0)
        printf("%s: rank %d: %d checks, %d failed%s\n", c->ops->name, c->rank, r.checks,
               r.failures, rc != 0 ? " (stopped at the first failed call)" : "");
    free(recv);
    free(send);
    free(fbuf);
    return r.failures;
}

typedef struct {
    dt_comm *c;
    int failures;
} thread_arg;

static void *local_rank_main(void *p)
{
    thread_arg *a = p;
    a->failures = check_rank(a->c);
    return NULL;
}

static int run_local(int n_ranks, double timeout)
{
    dt_local_group *g = NULL;
    if (dt_local_group_create(n_ranks, timeout, &g) != DT_OK) {
        fprintf(stderr, "coll_check: %s\n", dt_last_error());
        return 2;
    }
    thread_arg *args = calloc((size_t)n_ranks, sizeof *args);
    pthread_t *threads = calloc((size_t)n_ranks, sizeof *threads);
    if (!args || !threads) {
        fprintf(stderr, "coll_check: out of memory\n");
        return 2;
    }
    for (int r = 0; r < n_ranks; r++) {
        if (dt_comm_local(g, r, &args[r].c) != DT_OK) {
            fprintf(stderr, "coll_check: %s\n", dt_last_error());
            return 2;
        }
    }
    for (int r = 0; r < n_ranks; r++)
        pthread_create(&threads[r], NULL, local_rank_main, &args[r]);
    int failures = 0;
    for (int r = 0; r < n_ranks; r++) {
        pthread_join(threads[r], NULL);
        failures += args[r].failures;
        dt_comm_destroy(args[r].c);
    }
    dt_local_group_destroy(g);
    free(threads);
    free(args);
    return failures ? 1 : 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: coll_check --comm local|mpi|tcp [--ranks N] [--counts A,B,...] "
                    "[--timeout SECONDS]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *comm = NULL;
    int n_ranks = 4;
    double timeout = 60;
    int shm = 1;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            return usage();
        const char *flag = argv[i], *val = argv[++i];
        char *end;
        if (strcmp(flag, "--comm") == 0) {
            comm = val;
        } else if (strcmp(flag, "--ranks") == 0) {
            n_ranks = (int)strtol(val, &end, 10);
            if (*end || n_ranks < 1)
                return usage();
        } else if (strcmp(flag, "--timeout") == 0) {
            timeout = strtod(val, &end);
            if (*end || !(timeout > 0))
                return usage();
        } else if (strcmp(flag, "--shm") == 0) {
            shm = strcmp(val, "0") != 0;
        } else if (strcmp(flag, "--counts") == 0) {
            n_counts = 0;
            for (const char *s = val; *s && n_counts < MAX_COUNTS;) {
                counts[n_counts++] = (size_t)strtoull(s, &end, 10);
                if (end == s || (*end && *end != ','))
                    return usage();
                s = *end ? end + 1 : end;
            }
        } else {
            return usage();
        }
    }
    if (!comm)
        return usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(comm, "local") == 0)
        return run_local(n_ranks, timeout);
    dt_comm *c = NULL;
    if (strcmp(comm, "mpi") == 0) {
        if (dt_comm_mpi(timeout, &c) != DT_OK) {
            printf("FAIL creating the mpi communicator: %s\n", dt_last_error());
            return 1;
        }
    } else if (strcmp(comm, "tcp") == 0) {
        static dt_cluster cl;
        dt_tcp_options o;
        dt_tcp_options_default(&o);
        o.timeout = timeout;
        o.shm = shm;
        uint8_t *secret = NULL;
        if (dt_cluster_from_env(&cl) != DT_OK ||
            dt_cluster_load_secret(NULL, &secret, &o.transport.secret_len) != DT_OK) {
            printf("FAIL the tcp cluster: %s\n", dt_last_error());
            return 1;
        }
        o.transport.secret = secret;
        dt_status st = dt_comm_tcp(&cl, &o, &c);
        free(secret);
        if (st != DT_OK) {
            printf("FAIL creating the tcp communicator: %s\n", dt_last_error());
            return 1;
        }
        /* The processes of a test share this host: shared memory is used exactly when asked,
         * if there is a /dev/shm to meet in. */
        struct statvfs sv;
        int usable = access("/dev/shm", W_OK) == 0 && statvfs("/dev/shm", &sv) == 0 &&
                     (uint64_t)sv.f_bavail * sv.f_frsize >= ((uint64_t)64 << 20);
        if (dt_comm_tcp_uses_shm(c) != (shm && usable)) {
            printf("FAIL shared memory is %sin use with --shm %d\n",
                   dt_comm_tcp_uses_shm(c) ? "" : "not ", shm);
            return 1;
        }
        if (shm && !usable && c->rank == 0)
            printf("note: no writable /dev/shm with 64 MiB free: kept to TCP\n");
    } else {
        return usage();
    }
    int failures = check_rank(c);
    dt_comm_destroy(c);
    return failures ? 1 : 0; /* the tcp cluster, if any, is static: the process ends here */
}
