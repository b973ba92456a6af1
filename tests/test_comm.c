/* Communicators: the reduction kernel and the 16-bit conversions against naive references, block
 * splits, and the local backend (every collective, op and wire dtype at awkward counts on 1 to 5
 * ranks, bitwise against a serial reference), its deadlines, and the mpi loader without a plugin.
 * The mpi backend itself runs under mpirun in tests/mpi.sh. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/comm.h"
#include "dtrain/rng.h"
#include "test.h"

/* The naive references beside the fast conversions in src/coll/comm.c (not in comm.h, whose
 * interface the backends share). */
void dt_f32_to_bf16_naive(const float *src, uint16_t *dst, size_t n_elems);
void dt_bf16_to_f32_naive(const uint16_t *src, float *dst, size_t n_elems);
void dt_f32_to_f16_naive(const float *src, uint16_t *dst, size_t n_elems);
void dt_f16_to_f32_naive(const uint16_t *src, float *dst, size_t n_elems);

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- names ---- */

TEST(comm_op_and_wire_names_parse_back)
{
    dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_MEAN, DT_REDUCE_MIN, DT_REDUCE_MAX};
    for (int i = 0; i < 4; i++) {
        dt_reduce_op op = DT_REDUCE_SUM;
        CHECK_OK(dt_reduce_op_parse(dt_reduce_op_name(ops[i]), &op));
        CHECK(op == ops[i]);
    }
    CHECK(strcmp(dt_reduce_op_name(DT_REDUCE_MEAN), "mean") == 0);
    dt_reduce_op op;
    CHECK_ERR(dt_reduce_op_parse("avg", &op), DT_ERR_INVALID, "unknown reduce op 'avg'");
    CHECK_ERR(dt_reduce_op_parse("", &op), DT_ERR_INVALID, "sum, mean, min or max");

    dt_wire_dtype wires[] = {DT_WIRE_F32, DT_WIRE_BF16, DT_WIRE_F16};
    const char *names[] = {"f32", "bf16", "fp16"};
    for (int i = 0; i < 3; i++) {
        dt_wire_dtype w = DT_WIRE_F32;
        CHECK(strcmp(dt_wire_dtype_name(wires[i]), names[i]) == 0);
        CHECK_OK(dt_wire_dtype_parse(names[i], &w));
        CHECK(w == wires[i]);
    }
    dt_wire_dtype w;
    CHECK_ERR(dt_wire_dtype_parse("f16", &w), DT_ERR_INVALID, "unknown wire dtype 'f16'");
}

/* ---- the reduction kernel ---- */

/* IEEE 754-2019 minimum and maximum: NaN wins (of two, the larger bit pattern); -0 < +0. */
static float naive_op(float a, float b, dt_reduce_op op)
{
    if ((op == DT_REDUCE_MIN || op == DT_REDUCE_MAX) && (isnan(a) || isnan(b)))
        return isnan(a) && isnan(b) ? (bits(a) > bits(b) ? a : b) : isnan(a) ? a : b;
    switch (op) {
    case DT_REDUCE_SUM:
    case DT_REDUCE_MEAN: return a + b;
    case DT_REDUCE_MIN: return a == b ? (signbit(a) ? a : b) : a < b ? a : b;
    case DT_REDUCE_MAX: return a == b ? (signbit(a) ? b : a) : a > b ? a : b;
    }
    return NAN;
}

TEST(comm_reduce_kernel_matches_naive_loop)
{
    dt_rng rng;
    dt_rng_seed(&rng, 11);
    size_t cap = 1037 + 3;
    float *a = malloc(cap * sizeof *a), *b = malloc(cap * sizeof *b);
    float *want = malloc(cap * sizeof *want);
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-40f, -3.0f};
    _Static_assert(sizeof specials / sizeof specials[0] == 8, "dt_rng_below(&rng, 8) picks one");
    dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_MEAN, DT_REDUCE_MIN, DT_REDUCE_MAX};
    size_t sizes[] = {0, 1, 2, 3, 15, 16, 17, 31, 33, 64, 100, 1037};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        for (int o = 0; o < 4; o++) {
            for (size_t shift = 0; shift < 3; shift++) { /* unaligned starts too */
                size_t n = sizes[si];
                float *d = a + shift, *s = b + (2 - shift);
                for (size_t i = 0; i < n; i++) {
                    d[i] = (dt_rng_uniform(&rng) - 0.5f) * 100;
                    s[i] = (dt_rng_uniform(&rng) - 0.5f) * 100;
                    if (dt_rng_below(&rng, 8) == 0)
                        d[i] = specials[dt_rng_below(&rng, 8)];
                    if (dt_rng_below(&rng, 8) == 0)
                        s[i] = specials[dt_rng_below(&rng, 8)];
                    if (dt_rng_below(&rng, 16) == 0)
                        s[i] = d[i];
                    want[i] = naive_op(d[i], s[i], ops[o]);
                }
                dt_reduce_f32(d, s, n, ops[o]);
                size_t wrong = 0;
                for (size_t i = 0; i < n; i++)
                    wrong += bits(d[i]) != bits(want[i]);
                CHECK_MSG(wrong == 0, "%s over %zu elements (shift %zu): %zu differ",
                          dt_reduce_op_name(ops[o]), n, shift, wrong);
            }
        }
    }
    free(a), free(b), free(want);
}

TEST(comm_min_max_are_commutative_and_associative_to_the_bit)
{
    /* So that every rank gets the same bits whatever order a backend combines them in. */
    const uint32_t v[] = {0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000,
                          0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FC00123, 0xFFC00001, 0x00000001,
                          0x80000001, 0x7F7FFFFF, 0xFF7FFFFF};
    size_t n = sizeof v / sizeof v[0], bad = 0;
    for (int op = DT_REDUCE_MIN; op <= DT_REDUCE_MAX; op++) {
        for (size_t i = 0; i < n; i++) {
            for (size_t j = 0; j < n; j++) {
                float ab = from_bits(v[i]), ba = from_bits(v[j]);
                dt_reduce_f32(&ab, &(float){from_bits(v[j])}, 1, (dt_reduce_op)op);
                dt_reduce_f32(&ba, &(float){from_bits(v[i])}, 1, (dt_reduce_op)op);
                bad += bits(ab) != bits(ba);
                for (size_t k = 0; k < n; k++) {
                    float l = ab, r = from_bits(v[j]);
                    dt_reduce_f32(&l, &(float){from_bits(v[k])}, 1, (dt_reduce_op)op);
                    dt_reduce_f32(&r, &(float){from_bits(v[k])}, 1, (dt_reduce_op)op);
                    float r2 = from_bits(v[i]);
                    dt_reduce_f32(&r2, &r, 1, (dt_reduce_op)op);
                    bad += bits(l) != bits(r2);
                }
            }
        }
    }
    CHECK_MSG(bad == 0, "%zu orderings differ", bad);
    float d[4] = {0.0f, -0.0f, 2.0f, NAN}, s[4] = {-0.0f, 0.0f, -INFINITY, 1.0f};
    dt_reduce_f32(d, s, 4, DT_REDUCE_MIN);
    CHECK(bits(d[0]) == bits(-0.0f) && bits(d[1]) == bits(-0.0f));
    CHECK(d[2] == -INFINITY && isnan(d[3]));
    float e[2] = {0.0f, -0.0f}, f[2] = {-0.0f, 0.0f};
    dt_reduce_f32(e, f, 2, DT_REDUCE_MAX);
    CHECK(bits(e[0]) == bits(0.0f) && bits(e[1]) == bits(0.0f));
}

/* ---- conversions ---- */

static uint16_t bf16_of(float f)
{
    uint16_t h;
    dt_f32_to_bf16(&f, &h, 1);
    return h;
}

static uint16_t f16_of(float f)
{
    uint16_t h;
    dt_f32_to_f16(&f, &h, 1);
    return h;
}

static uint32_t f32_of_bf16(uint16_t h)
{
    float f;
    dt_bf16_to_f32(&h, &f, 1);
    return bits(f);
}

static uint32_t f32_of_f16(uint16_t h)
{
    float f;
    dt_f16_to_f32(&h, &f, 1);
    return bits(f);
}

TEST(comm_bf16_edge_cases)
{
    struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {0x00000000, 0x0000}, {0x80000000, 0x8000},   /* +-0 */
        {0x3F800000, 0x3F80},                         /* 1 */
        {0x3F808000, 0x3F80}, {0x3F818000, 0x3F82},   /* ties to even, both ways */
        {0x3F808001, 0x3F81}, {0x3F807FFF, 0x3F80},   /* just above and below a tie */
        {0xBF818000, 0xBF82},                         /* negative tie */
        {0x00000001, 0x0000},                         /* the smallest subnormal rounds to 0 */
        {0x00008000, 0x0000}, {0x00018000, 0x0002},   /* subnormal ties */
        {0x00010000, 0x0001}, {0x807FFFFF, 0x8080},   /* subnormal kept; carry into a normal */
        {0x7F7F0000, 0x7F7F},                         /* the largest bf16 */
        {0x7F7F7FFF, 0x7F7F}, {0x7F7F8000, 0x7F80},   /* below the tie; the tie overflows */
        {0x7F7FFFFF, 0x7F80}, {0xFF7FFFFF, 0xFF80},   /* float max to infinity */
        {0x7F800000, 0x7F80}, {0xFF800000, 0xFF80},   /* infinities */
        {0x7FC00000, 0x7FC0}, {0xFFC00000, 0xFFC0},   /* quiet NaNs */
        {0x7F800001, 0x7FC0}, {0x7FFFFFFF, 0x7FFF},   /* a signalling NaN is quieted */
        {0xFF810000, 0xFFC1},                         /* payload and sign kept */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = bf16_of(from_bits(cases[i].in)), ref;
        float x = from_bits(cases[i].in);
        dt_f32_to_bf16_naive(&x, &ref, 1);
        CHECK_MSG(got == cases[i].out, "bf16(%08x) = %04x, expected %04x", cases[i].in, got,
                  cases[i].out);
        CHECK_MSG(ref == cases[i].out, "bf16_ref(%08x) = %04x, expected %04x", cases[i].in, ref,
                  cases[i].out);
    }
    CHECK(f32_of_bf16(0x3F80) == 0x3F800000);
    CHECK(f32_of_bf16(0x8001) == 0x80010000); /* subnormal, exact */
    CHECK(f32_of_bf16(0xFF80) == 0xFF800000);
    CHECK(f32_of_bf16(0x7F81) == 0x7FC10000); /* signalling NaN quieted, payload kept */
}

TEST(comm_f16_edge_cases)
{
    struct {
        float in;
        uint16_t out;
    } cases[] = {
        {0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3C00}, {-2.0f, 0xC000},
        {1.0f + 0x1p-11f, 0x3C00},            /* tie to even (down) */
        {1.0f + 3 * 0x1p-11f, 0x3C02},        /* tie to even (up) */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3C01}, /* just above a tie */
        {65504.0f, 0x7BFF}, {-65504.0f, 0xFBFF},
        {65519.996f, 0x7BFF}, /* below the overflow tie */
        {65520.0f, 0x7C00},   /* the tie rounds to even: infinity */
        {1e6f, 0x7C00}, {-1e6f, 0xFC00}, {3.4e38f, 0x7C00},
        {0x1p-14f, 0x0400},                 /* the smallest normal */
        {0x1p-14f - 0x1p-25f, 0x0400},      /* tie between the largest subnormal and it: even */
        {0x1p-14f - 0x1p-24f, 0x03FF},      /* the largest subnormal */
        {0x1p-24f, 0x0001},                 /* the smallest subnormal */
        {0x1p-25f, 0x0000},                 /* half of it: tie to even, zero */
        {0x1p-25f * 1.0000001f, 0x0001},    /* just above */
        {3 * 0x1p-25f, 0x0002},             /* tie between 1 and 2 units: even */
        {5 * 0x1p-25f, 0x0002},             /* tie between 2 and 3: even */
        {-0x1p-24f, 0x8001}, {1e-30f, 0x0000}, {-1e-45f, 0x8000},
        {INFINITY, 0x7C00}, {-INFINITY, 0xFC00},
        {NAN, 0x7E00}, {-NAN, 0xFE00},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = f16_of(cases[i].in), ref;
        dt_f32_to_f16_naive(&cases[i].in, &ref, 1);
        CHECK_MSG(got == cases[i].out, "f16(%a) = %04x, expected %04x", (double)cases[i].in, got,
                  cases[i].out);
        CHECK_MSG(ref == cases[i].out, "f16_ref(%a) = %04x, expected %04x", (double)cases[i].in,
                  ref, cases[i].out);
    }
    CHECK(f32_of_f16(0x0001) == bits(0x1p-24f));
    CHECK(f32_of_f16(0x03FF) == bits(1023 * 0x1p-24f));
    CHECK(f32_of_f16(0x8200) == bits(-0x1p-15f));
    CHECK(f32_of_f16(0x7BFF) == bits(65504.0f));
    CHECK(f32_of_f16(0x7C00) == bits(INFINITY));
    CHECK(f32_of_f16(0xFC00) == bits(-INFINITY));
    CHECK(f32_of_f16(0x8000) == bits(-0.0f));
    CHECK(f32_of_f16(0x7C01) == 0x7FC02000u); /* signalling NaN quieted, payload kept */
    CHECK(f32_of_f16(0xFE00) == 0xFFC00000u);
}

/* Bit patterns that probe rounding: every sign and exponent, with mantissas around the rounding
 * points of both formats (including the subnormal halves' shifting ones), plus random ones. */
static size_t probe_patterns(uint32_t *out, size_t cap, dt_rng *rng)
{
    size_t n = 0;
    for (uint32_t sign = 0; sign < 2; sign++) {
        for (uint32_t e = 0; e < 256; e++) {
            for (int k = 0; k < 24; k++) {
                uint32_t half = 1u << k; /* a tie at bit k */
                uint32_t ms[] = {half,
                                 half - 1,
                                 half + 1,
                                 half | (half << 1),
                                 (half << 1) - 1,
                                 0x7FFFFFu & ~((half << 1) - 1),
                                 (uint32_t)dt_rng_next(rng) & 0x7FFFFFu};
                for (size_t j = 0; j < sizeof ms / sizeof ms[0] && n < cap; j++)
                    out[n++] = sign << 31 | e << 23 | (ms[j] & 0x7FFFFFu);
            }
        }
    }
    while (n < cap)
        out[n++] = (uint32_t)dt_rng_next(rng);
    return n;
}

TEST(comm_conversions_match_references)
{
    /* src/coll/comm.c's fast conversions equalled the references on all 2^32 floats when they
     * were written (a one-off run); this keeps them honest on the interesting patterns. */
    size_t n = 1 << 20;
    uint32_t *pat = malloc(n * sizeof *pat);
    uint16_t *h = malloc(n * sizeof *h), *h_ref = malloc(n * sizeof *h_ref);
    dt_rng rng;
    dt_rng_seed(&rng, 5);
    n = probe_patterns(pat, n, &rng);
    float *x = malloc(n * sizeof *x);
    memcpy(x, pat, n * sizeof *x);
    size_t wrong = 0, first = 0;
    dt_f32_to_bf16(x, h, n);
    dt_f32_to_bf16_naive(x, h_ref, n);
    for (size_t i = 0; i < n; i++)
        if (h[i] != h_ref[i] && wrong++ == 0)
            first = i;
    CHECK_MSG(wrong == 0, "bf16: %zu of %zu differ, first %08x -> %04x, reference %04x", wrong, n,
              pat[first], h[first], h_ref[first]);
    wrong = 0;
    dt_f32_to_f16(x, h, n);
    dt_f32_to_f16_naive(x, h_ref, n);
    for (size_t i = 0; i < n; i++)
        if (h[i] != h_ref[i] && wrong++ == 0)
            first = i;
    CHECK_MSG(wrong == 0, "f16: %zu of %zu differ, first %08x -> %04x, reference %04x", wrong, n,
              pat[first], h[first], h_ref[first]);

    /* Widening: all 65536 values of each format. */
    uint16_t all[65536];
    float f[65536], f_ref[65536];
    for (uint32_t i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    size_t wrong_bf = 0, wrong_h = 0;
    dt_bf16_to_f32(all, f, 65536);
    dt_bf16_to_f32_naive(all, f_ref, 65536);
    for (uint32_t i = 0; i < 65536; i++)
        wrong_bf += bits(f[i]) != bits(f_ref[i]);
    dt_f16_to_f32(all, f, 65536);
    dt_f16_to_f32_naive(all, f_ref, 65536);
    for (uint32_t i = 0; i < 65536; i++)
        wrong_h += bits(f[i]) != bits(f_ref[i]);
    CHECK_MSG(wrong_bf == 0, "bf16 -> f32: %zu of 65536 differ", wrong_bf);
    CHECK_MSG(wrong_h == 0, "f16 -> f32: %zu of 65536 differ", wrong_h);
    free(pat), free(x), free(h), free(h_ref);
}

TEST(comm_conversions_round_trip)
{
    /* Every 16-bit value survives widening and narrowing; NaNs stay NaN (quieted). */
    static uint16_t all[65536], back[65536];
    static float f[65536];
    for (uint32_t i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    for (int fmt = 0; fmt < 2; fmt++) {
        size_t wrong = 0;
        if (fmt == 0) {
            dt_bf16_to_f32(all, f, 65536);
            dt_f32_to_bf16(f, back, 65536);
        } else {
            dt_f16_to_f32(all, f, 65536);
            dt_f32_to_f16(f, back, 65536);
        }
        for (uint32_t i = 0; i < 65536; i++) {
            bool nan = fmt == 0 ? (i & 0x7F80u) == 0x7F80u && (i & 0x7Fu)
                                : (i & 0x7C00u) == 0x7C00u && (i & 0x3FFu);
            if (nan)
                wrong += !isnan(f[i]) || (bits(f[i]) & 0x00400000u) == 0 ||
                         (fmt == 0 ? (back[i] & 0x7F80u) != 0x7F80u || !(back[i] & 0x40u)
                                   : back[i] != ((i & 0x8000u) | 0x7E00u));
            else
                wrong += back[i] != all[i];
        }
        CHECK_MSG(wrong == 0, "%s: %zu of 65536 values do not round-trip", fmt ? "f16" : "bf16",
                  wrong);
    }
    /* Narrowing is idempotent and within half a unit in the last place. */
    dt_rng rng;
    dt_rng_seed(&rng, 9);
    size_t bad = 0;
    for (int i = 0; i < 100000; i++) {
        float x = (dt_rng_uniform(&rng) - 0.5f) * 60000.0f, y, z;
        uint16_t a = f16_of(x), b;
        dt_f16_to_f32(&a, &y, 1);
        b = f16_of(y);
        bad += a != b;
        uint16_t c = bf16_of(x);
        dt_bf16_to_f32(&c, &z, 1);
        bad += bf16_of(z) != c;
        double ulp16 = fmax(ldexp(1.0, ilogb(x) - 10), 0x1p-24), ulpb = ldexp(1.0, ilogb(x) - 7);
        bad += fabs((double)y - x) > 0.5 * ulp16 || fabs((double)z - x) > 0.5 * ulpb;
    }
    CHECK_MSG(bad == 0, "%zu round-trip failures", bad);
}

TEST(comm_block_splits_awkward_counts)
{
    size_t counts[] = {0, 1, 2, 7, 13, 97, 1000003};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        for (int size = 1; size <= 9; size++) {
            size_t n_elems = counts[ci], next = 0;
            for (int r = 0; r < size; r++) {
                size_t off, n;
                dt_comm_block(n_elems, size, r, &off, &n);
                CHECK_MSG(off == next, "n %zu size %d rank %d: off %zu, expected %zu", n_elems,
                          size, r, off, next);
                size_t want = n_elems / (size_t)size + ((size_t)r < n_elems % (size_t)size);
                CHECK_MSG(n == want, "n %zu size %d rank %d: %zu elements, expected %zu", n_elems,
                          size, r, n, want);
                next = off + n;
            }
            CHECK(next == n_elems);
        }
    }
    size_t off, n, got[5];
    for (int r = 0; r < 5; r++) {
        dt_comm_block(13, 5, r, &off, &n);
        got[r] = n;
    }
    CHECK(got[0] == 3 && got[1] == 3 && got[2] == 3 && got[3] == 2 && got[4] == 2);
}

/* ---- the local backend ---- */

typedef enum { C_ALLREDUCE, C_REDUCE_SCATTER, C_ALLGATHER, C_BROADCAST, C_BARRIER, C_NONE } coll;

/* One rank's part in a collective, run on its own thread. */
typedef struct {
    dt_comm *c;
    coll what;
    float *data;
    const void *send;
    void *recv;
    size_t n;
    dt_reduce_op op;
    dt_wire_dtype wire;
    int root;
    dt_status status;
    char msg[512];
    double seconds;
} rank_job;

static void *rank_main(void *p)
{
    rank_job *j = p;
    double t0 = now_s();
    switch (j->what) {
    case C_ALLREDUCE: j->status = dt_comm_allreduce(j->c, j->data, j->n, j->op, j->wire); break;
    case C_REDUCE_SCATTER:
        j->status = dt_comm_reduce_scatter(j->c, j->data, j->n, j->op, j->wire);
        break;
    case C_ALLGATHER: j->status = dt_comm_allgather(j->c, j->send, j->n, j->recv); break;
    case C_BROADCAST: j->status = dt_comm_broadcast(j->c, j->recv, j->n, j->root); break;
    case C_BARRIER: j->status = dt_comm_barrier(j->c); break;
    case C_NONE: j->status = DT_OK; break;
    }
    j->seconds = now_s() - t0;
    snprintf(j->msg, sizeof j->msg, "%s", j->status == DT_OK ? "" : dt_last_error());
    return NULL;
}

/* Runs each rank's job on its own thread and waits for all. */
static void run_ranks(rank_job *jobs, int size)
{
    pthread_t t[8];
    for (int r = 0; r < size; r++)
        CHECK(pthread_create(&t[r], NULL, rank_main, &jobs[r]) == 0);
    for (int r = 0; r < size; r++)
        pthread_join(t[r], NULL);
}

typedef struct {
    dt_local_group *g;
    dt_comm *c[8];
    int size;
} group;

static void group_open(group *gr, int size, double timeout)
{
    memset(gr, 0, sizeof *gr);
    gr->size = size;
    CHECK_OK(dt_local_group_create(size, timeout, &gr->g));
    for (int r = 0; r < size; r++)
        CHECK_OK(dt_comm_local(gr->g, r, &gr->c[r]));
}

static void group_close(group *gr)
{
    for (int r = 0; r < gr->size; r++)
        dt_comm_destroy(gr->c[r]);
    dt_local_group_destroy(gr->g);
}

/* Round to the wire format and back (the fast conversions; they equal the references). */
static void wire_round(float *x, size_t n, dt_wire_dtype w, uint16_t *tmp)
{
    if (w == DT_WIRE_BF16) {
        dt_f32_to_bf16(x, tmp, n);
        dt_bf16_to_f32(tmp, x, n);
    } else if (w == DT_WIRE_F16) {
        dt_f32_to_f16(x, tmp, n);
        dt_f16_to_f32(tmp, x, n);
    }
}

/* The serial reference of the local backend's documented semantics: contributions rounded to the
 * wire format, reduced in rank order in float32, rounded again, then MEAN divides by size. */
static void serial_reference(float *const *in, int size, size_t n, dt_reduce_op op,
                             dt_wire_dtype w, float *out, float *tmp, uint16_t *tmp16)
{
    for (int q = 0; q < size; q++) {
        memcpy(tmp, in[q], n * sizeof *tmp);
        wire_round(tmp, n, w, tmp16);
        for (size_t i = 0; i < n; i++)
            out[i] = q == 0 ? tmp[i] : naive_op(out[i], tmp[i], op);
    }
    wire_round(out, n, w, tmp16);
    if (op == DT_REDUCE_MEAN)
        for (size_t i = 0; i < n; i++)
            out[i] /= (float)size;
}

static const size_t awkward[] = {0, 1, 2, 7, 13, 97, 1000003};
#define N_AWKWARD (sizeof awkward / sizeof awkward[0])

TEST(comm_local_reductions_match_serial_reference)
{
    static const dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_MEAN, DT_REDUCE_MIN, DT_REDUCE_MAX};
    static const dt_wire_dtype wires[] = {DT_WIRE_F32, DT_WIRE_BF16, DT_WIRE_F16};
    size_t cap = awkward[N_AWKWARD - 1];
    float *in[5], *buf[5];
    float *want = malloc(cap * sizeof *want), *tmp = malloc(cap * sizeof *tmp);
    uint16_t *tmp16 = malloc(cap * sizeof *tmp16);
    for (int q = 0; q < 5; q++) {
        in[q] = malloc(cap * sizeof *in[q]);
        buf[q] = malloc(cap * sizeof *buf[q]);
    }
    dt_rng rng;
    dt_rng_seed(&rng, 21);
    /* Values over a wide range of magnitudes, beyond half's range and into its subnormals, so
     * that the wire rounding and overflow matter. */
    for (int q = 0; q < 5; q++)
        for (size_t i = 0; i < cap; i++)
            in[q][i] = ldexpf(dt_rng_uniform(&rng) - 0.5f, (int)dt_rng_below(&rng, 48) - 28);
    for (int size = 1; size <= 5; size++) {
        group gr;
        group_open(&gr, size, 30);
        for (size_t ci = 0; ci < N_AWKWARD; ci++) {
            size_t n = awkward[ci];
            for (int o = 0; o < 4; o++) {
                for (int w = 0; w < 3; w++) {
                    serial_reference(in, size, n, ops[o], wires[w], want, tmp, tmp16);
                    for (int scatter = 0; scatter < 2; scatter++) {
                        rank_job jobs[5];
                        for (int r = 0; r < size; r++) {
                            memcpy(buf[r], in[r], n * sizeof *buf[r]);
                            jobs[r] = (rank_job){.c = gr.c[r], .data = buf[r], .n = n,
                                                 .op = ops[o], .wire = wires[w],
                                                 .what = scatter ? C_REDUCE_SCATTER : C_ALLREDUCE};
                        }
                        run_ranks(jobs, size);
                        for (int r = 0; r < size; r++) {
                            CHECK_MSG(jobs[r].status == DT_OK, "rank %d: %s", r, jobs[r].msg);
                            size_t off = 0, len = n, wrong = 0, first = 0;
                            if (scatter)
                                dt_comm_block(n, size, r, &off, &len);
                            for (size_t i = off; i < off + len; i++)
                                if (bits(buf[r][i]) != bits(want[i]) && wrong++ == 0)
                                    first = i;
                            CHECK_MSG(wrong == 0,
                                      "%s %s %s, %d ranks, n %zu: rank %d has %zu wrong, "
                                      "first [%zu] = %.9g, expected %.9g",
                                      scatter ? "reduce-scatter" : "all-reduce",
                                      dt_reduce_op_name(ops[o]), dt_wire_dtype_name(wires[w]),
                                      size, n, r, wrong, first, buf[r][first], want[first]);
                        }
                    }
                }
            }
        }
        group_close(&gr);
    }
    for (int q = 0; q < 5; q++)
        free(in[q]), free(buf[q]);
    free(want), free(tmp), free(tmp16);
}

TEST(comm_local_wire_rounding_is_what_the_header_says)
{
    /* Two ranks: 1 + 2^-9 rounds to 1 in bf16 before it is added; the fp16 sum overflows. */
    group gr;
    group_open(&gr, 2, 30);
    float a[3] = {1.0f + 0x1p-9f, 40000.0f, 3.0f}, b[3] = {1.0f, 40000.0f, 1.0f};
    rank_job jobs[2] = {
        {.c = gr.c[0], .what = C_ALLREDUCE, .data = a, .n = 3, .wire = DT_WIRE_BF16},
        {.c = gr.c[1], .what = C_ALLREDUCE, .data = b, .n = 3, .wire = DT_WIRE_BF16},
    };
    run_ranks(jobs, 2);
    CHECK(a[0] == 2.0f && b[0] == 2.0f);
    CHECK(a[1] == 79872.0f); /* each 40000 rounds to 39936 (8 significant bits) first */
    float c[1] = {40000.0f}, d[1] = {40000.0f};
    for (int r = 0; r < 2; r++)
        jobs[r] = (rank_job){.c = gr.c[r], .what = C_ALLREDUCE, .data = r ? d : c, .n = 1,
                             .op = DT_REDUCE_MEAN, .wire = DT_WIRE_F16};
    run_ranks(jobs, 2);
    CHECK(isinf(c[0]) && isinf(d[0])); /* the sum travels in fp16 before the division */
    group_close(&gr);
}

TEST(comm_local_allgather_broadcast_barrier)
{
    size_t cap = awkward[N_AWKWARD - 1];
    for (int size = 1; size <= 5; size++) {
        group gr;
        group_open(&gr, size, 30);
        uint8_t *send[5], *recv[5];
        for (int q = 0; q < size; q++) {
            send[q] = malloc(cap ? cap : 1);
            recv[q] = malloc(cap * (size_t)size);
        }
        for (size_t ci = 0; ci < N_AWKWARD; ci++) {
            size_t n = awkward[ci];
            for (int in_place = 0; in_place < 2; in_place++) {
                rank_job jobs[5];
                for (int r = 0; r < size; r++) {
                    memset(recv[r], 0xEE, n * (size_t)size);
                    uint8_t *from = in_place ? recv[r] + (size_t)r * n : send[r];
                    for (size_t i = 0; i < n; i++)
                        from[i] = (uint8_t)(r * 37 + i * 11 + 1);
                    jobs[r] = (rank_job){.c = gr.c[r], .what = C_ALLGATHER, .send = from,
                                         .recv = recv[r], .n = n};
                }
                run_ranks(jobs, size);
                for (int r = 0; r < size; r++) {
                    CHECK_MSG(jobs[r].status == DT_OK, "rank %d: %s", r, jobs[r].msg);
                    size_t wrong = 0;
                    for (int q = 0; q < size; q++)
                        for (size_t i = 0; i < n; i++)
                            wrong += recv[r][(size_t)q * n + i] != (uint8_t)(q * 37 + i * 11 + 1);
                    CHECK_MSG(wrong == 0, "all-gather%s, %d ranks, n %zu: rank %d: %zu bytes wrong",
                              in_place ? " in place" : "", size, n, r, wrong);
                }
            }
            for (int root = 0; root < size; root += size > 2 ? size - 1 : 1) {
                rank_job jobs[5];
                for (int r = 0; r < size; r++) {
                    for (size_t i = 0; i < n; i++)
                        recv[r][i] = (uint8_t)(r == root ? i * 7 + 3 : 0xAB);
                    jobs[r] = (rank_job){.c = gr.c[r], .what = C_BROADCAST, .recv = recv[r],
                                         .n = n, .root = root};
                }
                run_ranks(jobs, size);
                for (int r = 0; r < size; r++) {
                    CHECK_MSG(jobs[r].status == DT_OK, "rank %d: %s", r, jobs[r].msg);
                    size_t wrong = 0;
                    for (size_t i = 0; i < n; i++)
                        wrong += recv[r][i] != (uint8_t)(i * 7 + 3);
                    CHECK_MSG(wrong == 0, "broadcast from %d, %d ranks, n %zu: rank %d: %zu wrong",
                              root, size, n, r, wrong);
                }
            }
        }
        rank_job jobs[5];
        for (int r = 0; r < size; r++)
            jobs[r] = (rank_job){.c = gr.c[r], .what = C_BARRIER};
        run_ranks(jobs, size);
        for (int r = 0; r < size; r++)
            CHECK_MSG(jobs[r].status == DT_OK, "barrier rank %d: %s", r, jobs[r].msg);
        for (int q = 0; q < size; q++)
            free(send[q]), free(recv[q]);
        group_close(&gr);
    }
}

/* Every rank runs the same long sequence of mixed collectives back to back and checks each
 * result itself: races between one collective's end and the next one's start show here. */
typedef struct {
    dt_comm *c;
    int iters;
    long wrong;
    dt_status status;
    char msg[512];
    int *arrivals; /* shared counter, to check the barrier */
    pthread_mutex_t *mu;
} stress_arg;

static void *stress_main(void *p)
{
    stress_arg *a = p;
    dt_comm *c = a->c;
    int size = c->size, rank = c->rank;
    float x[13];
    uint8_t send[5], recv[5 * 8];
    for (int it = 0; it < a->iters && a->status == DT_OK; it++) {
        size_t n = (size_t)(it % 13) + 1;
        for (size_t i = 0; i < n; i++)
            x[i] = (float)(rank + 1) * (float)(i + (size_t)it);
        a->status = dt_comm_allreduce(c, x, n, DT_REDUCE_SUM, DT_WIRE_F32);
        for (size_t i = 0; i < n && a->status == DT_OK; i++)
            a->wrong += x[i] != (float)(size * (size + 1) / 2) * (float)(i + (size_t)it);
        if (a->status != DT_OK)
            break;
        pthread_mutex_lock(a->mu);
        (*a->arrivals)++;
        pthread_mutex_unlock(a->mu);
        a->status = dt_comm_barrier(c);
        pthread_mutex_lock(a->mu);
        a->wrong += *a->arrivals < (it + 1) * size;
        pthread_mutex_unlock(a->mu);
        if (a->status != DT_OK)
            break;
        for (int i = 0; i < 5; i++)
            send[i] = (uint8_t)(rank * 5 + i + it);
        a->status = dt_comm_allgather(c, send, 5, recv);
        for (int q = 0; q < size && a->status == DT_OK; q++)
            for (int i = 0; i < 5; i++)
                a->wrong += recv[q * 5 + i] != (uint8_t)(q * 5 + i + it);
        if (a->status != DT_OK)
            break;
        int root = it % size;
        uint8_t b[3] = {(uint8_t)rank, (uint8_t)rank, (uint8_t)rank};
        a->status = dt_comm_broadcast(c, b, 3, root);
        a->wrong += b[0] != root || b[2] != root;
        if (a->status != DT_OK)
            break;
        for (size_t i = 0; i < n; i++)
            x[i] = (float)(rank == 0 ? -(int)i : rank);
        a->status = dt_comm_reduce_scatter(c, x, n, DT_REDUCE_MIN, DT_WIRE_F32);
        size_t off, len;
        dt_comm_block(n, size, rank, &off, &len);
        for (size_t i = off; i < off + len && a->status == DT_OK; i++)
            a->wrong += x[i] != -(float)i;
    }
    if (a->status != DT_OK)
        snprintf(a->msg, sizeof a->msg, "%s", dt_last_error());
    return NULL;
}

TEST(comm_local_mixed_sequence_stress)
{
    for (int size = 2; size <= 5; size += 3) {
        group gr;
        group_open(&gr, size, 30);
        int arrivals = 0;
        pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        stress_arg args[5];
        pthread_t t[5];
        for (int r = 0; r < size; r++) {
            args[r] = (stress_arg){.c = gr.c[r], .iters = 400, .arrivals = &arrivals, .mu = &mu};
            pthread_create(&t[r], NULL, stress_main, &args[r]);
        }
        for (int r = 0; r < size; r++) {
            pthread_join(t[r], NULL);
            CHECK_MSG(args[r].status == DT_OK, "%d ranks, rank %d: %s", size, r, args[r].msg);
            CHECK_MSG(args[r].wrong == 0, "%d ranks, rank %d: %ld wrong results", size, r,
                      args[r].wrong);
        }
        group_close(&gr);
    }
}

/* Runs fn with stderr sent to a file and returns what was written (static buffer). */
static const char *capture_stderr_begin(int *saved)
{
    const char *path = test_path("stderr.txt");
    fflush(stderr);
    *saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && *saved >= 0);
    dup2(fd, 2);
    close(fd);
    return path;
}

static const char *capture_stderr_end(int saved, const char *path)
{
    static char text[4096];
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    text[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    return text;
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

TEST(comm_local_timeout_names_the_missing_rank_and_breaks_the_group)
{
    group gr;
    group_open(&gr, 3, 0.3);
    for (int r = 0; r < 3; r++)
        gr.c[r]->stall_warn = 0.1;
    float x0[4] = {1, 2, 3, 4}, x1[4] = {1, 2, 3, 4};
    rank_job jobs[3] = {
        {.c = gr.c[0], .what = C_ALLREDUCE, .data = x0, .n = 4},
        {.c = gr.c[1], .what = C_ALLREDUCE, .data = x1, .n = 4},
        {.c = gr.c[2], .what = C_NONE}, /* rank 2 never enters */
    };
    int saved;
    const char *path = capture_stderr_begin(&saved);
    run_ranks(jobs, 3);
    const char *err = capture_stderr_end(saved, path);
    const char *want =
        "all-reduce: timed out after 0.3 s waiting for local rank 2 (ranks missing: 2)";
    for (int r = 0; r < 2; r++) {
        CHECK_MSG(jobs[r].status == DT_ERR_TIMEOUT, "rank %d: status %d", r, jobs[r].status);
        CHECK_MSG(strstr(jobs[r].msg, want), "rank %d: '%s'", r, jobs[r].msg);
        CHECK_MSG(jobs[r].seconds >= 0.29 && jobs[r].seconds < 1.3, "rank %d waited %.3f s", r,
                  jobs[r].seconds);
    }
    const char *warning = "dtrain: warning: all-reduce: rank 2 has not entered it after 0.1 s\n";
    CHECK_MSG(count_of(err, warning) == 1, "stderr: '%s'", err);
    CHECK_MSG(count_of(err, "dtrain: warning") == 1, "stderr: '%s'", err);
    /* Broken: the late rank and everyone after fail at once with the first error. */
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        CHECK_ERR(dt_comm_barrier(gr.c[r]), DT_ERR_TIMEOUT, want);
        CHECK_ERR(dt_comm_allreduce(gr.c[r], x0, 4, DT_REDUCE_SUM, DT_WIRE_F32), DT_ERR_TIMEOUT,
                  want);
        CHECK(now_s() - t0 < 0.1);
    }
    group_close(&gr);

    /* Two missing ranks, in a broadcast. */
    group_open(&gr, 4, 0.2);
    uint8_t b0[2], b1[2];
    rank_job jobs4[4] = {
        {.c = gr.c[0], .what = C_BROADCAST, .recv = b0, .n = 2, .root = 0},
        {.c = gr.c[1], .what = C_BROADCAST, .recv = b1, .n = 2, .root = 0},
        {.what = C_NONE}, {.what = C_NONE},
    };
    run_ranks(jobs4, 4);
    for (int r = 0; r < 2; r++) {
        CHECK_MSG(jobs4[r].status == DT_ERR_TIMEOUT, "rank %d: status %d", r, jobs4[r].status);
        CHECK_MSG(strstr(jobs4[r].msg, "broadcast: timed out after 0.2 s waiting for local rank 2 "
                                       "(ranks missing: 2, 3)"),
                  "rank %d: '%s'", r, jobs4[r].msg);
    }
    group_close(&gr);
}

TEST(comm_local_stall_warning_names_several_ranks_once)
{
    group gr;
    group_open(&gr, 4, 0.4);
    for (int r = 0; r < 4; r++)
        gr.c[r]->stall_warn = 0.05;
    rank_job jobs[4] = {
        {.c = gr.c[0], .what = C_BARRIER}, {.c = gr.c[1], .what = C_BARRIER},
        {.what = C_NONE}, {.what = C_NONE},
    };
    int saved;
    const char *path = capture_stderr_begin(&saved);
    run_ranks(jobs, 4);
    const char *err = capture_stderr_end(saved, path);
    const char *warning =
        "dtrain: warning: barrier: ranks 2, 3 have not entered it after 0.05 s\n";
    CHECK_MSG(count_of(err, warning) == 1, "stderr: '%s'", err);
    CHECK(count_of(err, "dtrain: warning") == 1);
    CHECK(jobs[0].status == DT_ERR_TIMEOUT && jobs[1].status == DT_ERR_TIMEOUT);
    group_close(&gr);
}

TEST(comm_local_late_rank_within_the_deadline_is_fine)
{
    /* Rank 1 enters 0.1 s after rank 0 with a 1 s timeout: no error, no warning needed. */
    group gr;
    group_open(&gr, 2, 1.0);
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {5, 4, 3, 2, 1};
    rank_job j0 = {.c = gr.c[0], .what = C_ALLREDUCE, .data = a, .n = 5, .op = DT_REDUCE_MAX};
    pthread_t t;
    pthread_create(&t, NULL, rank_main, &j0);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CHECK_OK(dt_comm_allreduce(gr.c[1], b, 5, DT_REDUCE_MAX, DT_WIRE_F32));
    pthread_join(t, NULL);
    CHECK_MSG(j0.status == DT_OK, "%s", j0.msg);
    CHECK(a[0] == 5 && a[2] == 3 && a[4] == 5 && b[1] == 4 && b[3] == 4);
    group_close(&gr);
}

TEST(comm_local_mismatched_collectives_break_the_group)
{
    group gr;
    group_open(&gr, 2, 5);
    float x[13] = {0};
    uint8_t bytes[52] = {0};
    rank_job jobs[2] = {
        {.c = gr.c[0], .what = C_ALLREDUCE, .data = x, .n = 13},
        {.c = gr.c[1], .what = C_BROADCAST, .recv = bytes, .n = 52, .root = 0},
    };
    run_ranks(jobs, 2);
    for (int r = 0; r < 2; r++) {
        CHECK_MSG(jobs[r].status == DT_ERR_INVALID, "rank %d: %d %s", r, jobs[r].status,
                  jobs[r].msg);
        CHECK_MSG(strstr(jobs[r].msg, "collective mismatch: local rank 0 called all-reduce of 13 "
                                      "elements (sum, f32) but local rank 1 called broadcast of "
                                      "52 bytes from rank 0"),
                  "rank %d: '%s'", r, jobs[r].msg);
    }
    CHECK_ERR(dt_comm_barrier(gr.c[0]), DT_ERR_INVALID, "local rank 1 called broadcast");
    group_close(&gr);

    /* Counts that differ. */
    group_open(&gr, 2, 5);
    float y[14] = {0};
    jobs[0] = (rank_job){.c = gr.c[0], .what = C_ALLREDUCE, .data = x, .n = 13};
    jobs[1] = (rank_job){.c = gr.c[1], .what = C_ALLREDUCE, .data = y, .n = 14};
    run_ranks(jobs, 2);
    CHECK(jobs[0].status == DT_ERR_INVALID && jobs[1].status == DT_ERR_INVALID);
    CHECK_MSG(strstr(jobs[1].msg, "all-reduce of 14 elements"), "'%s'", jobs[1].msg);
    group_close(&gr);
}

TEST(comm_local_rejects_bad_arguments)
{
    dt_local_group *g = NULL;
    CHECK_ERR(dt_local_group_create(0, 1, &g), DT_ERR_INVALID, "size 0 is not in 1..");
    CHECK_ERR(dt_local_group_create(2, 0, &g), DT_ERR_INVALID, "timeout 0 s is not positive");
    CHECK_ERR(dt_local_group_create(2, NAN, &g), DT_ERR_INVALID, "not positive");
    CHECK(g == NULL);
    CHECK_OK(dt_local_group_create(2, 1, &g));
    dt_comm *a = NULL, *b = NULL, *c = NULL;
    CHECK_ERR(dt_comm_local(g, 2, &c), DT_ERR_INVALID, "rank 2 is not in 0..1");
    CHECK_OK(dt_comm_local(g, 0, &a));
    CHECK_ERR(dt_comm_local(g, 0, &c), DT_ERR_INVALID, "rank 0 already has a communicator");
    CHECK_OK(dt_comm_local(g, 1, &b));
    CHECK(a->rank == 0 && a->size == 2 && a->timeout == 1 && a->stall_warn == 30);
    CHECK(strcmp(a->ops->name, "local") == 0);
    /* A bad root fails at once and breaks the group, so the other rank does not wait in vain. */
    uint8_t byte = 0;
    CHECK_ERR(dt_comm_broadcast(a, &byte, 1, 2), DT_ERR_INVALID,
              "broadcast: root 2 is not a rank of this 2-rank group");
    CHECK_ERR(dt_comm_barrier(b), DT_ERR_INVALID, "root 2 is not a rank");
    dt_comm_destroy(a);
    dt_comm_destroy(b);
    dt_comm_destroy(NULL);
    dt_local_group_destroy(g);
    dt_local_group_destroy(NULL);

    /* A single rank needs nobody. */
    group gr;
    group_open(&gr, 1, 1);
    float x[3] = {1, 2, 3};
    CHECK_OK(dt_comm_allreduce(gr.c[0], x, 3, DT_REDUCE_MEAN, DT_WIRE_F32));
    CHECK(x[0] == 1 && x[2] == 3);
    CHECK_OK(dt_comm_barrier(gr.c[0]));
    group_close(&gr);
}

/* ---- the mpi loader ---- */

TEST(comm_mpi_without_plugin_is_unsupported)
{
    const char *old = getenv("DTRAIN_MPI_PLUGIN");
    char *saved = old ? strdup(old) : NULL;
    const char *path = test_path("no-such-dir/libdtrain_mpi.so");
    setenv("DTRAIN_MPI_PLUGIN", path, 1);
    dt_comm *c = (dt_comm *)1;
    CHECK_ERR(dt_comm_mpi(60, &c), DT_ERR_UNSUPPORTED, "cannot load the MPI plugin (tried ");
    CHECK_MSG(strstr(dt_last_error(), path), "'%s'", dt_last_error());
    CHECK(c == NULL);

    /* A file that is not a plugin: the loader's own reason is named. */
    const char *junk = test_path("libjunk.so");
    test_write_file(junk, "not an ELF file", 15);
    setenv("DTRAIN_MPI_PLUGIN", junk, 1);
    CHECK_ERR(dt_comm_mpi(60, &c), DT_ERR_UNSUPPORTED, junk);

    /* A library without the plugin's ABI version, checked first (a plain name goes to the
     * loader). */
    setenv("DTRAIN_MPI_PLUGIN", "libm.so.6", 1);
    CHECK_ERR(dt_comm_mpi(60, &c), DT_ERR_UNSUPPORTED, "libm.so.6 has no ABI version");
    if (saved) {
        setenv("DTRAIN_MPI_PLUGIN", saved, 1);
        free(saved);
    } else {
        unsetenv("DTRAIN_MPI_PLUGIN");
    }
}
