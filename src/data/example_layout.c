/* The learned layout of tf.train.Example records (dt_example_parse_learned): the byte layout of
 * one program's records learned from a record the fast path accepted, and records read by it with
 * one compare per entry, in portable code and with AVX2 and BMI2 where the CPU has them. */
#include "example_int.h"

#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "../core/cpu.h"
#define LAYOUT_VECTOR 1 /* an AVX2 + BMI2 layout decoder, chosen at run time */
#endif

/* Records written by one program list the same keys in the same order, each map entry the same
 * bytes around its values: only the values, and with them the varint lengths, change. A layout,
 * learned from a record the fast path accepted, holds each entry's bytes before the values
 * (expected[v] for an int64 of v = 1..10 varint bytes, expected[0] for fixed-size values), so a
 * record is checked with one 32-byte compare per entry and its values read from known places.
 * The check covers every byte that is not a value and the varints' continuation bits, so a
 * record the layout accepts is one the general decoder reads to the same row; anything else is
 * declined, and dt_ex_parse_fast and the general decoder take it. */
#define LAYOUT_PREFIX 32 /* bytes compared per entry: keys of up to 22 bytes */
enum { LK_FLOATS, LK_BYTES, LK_INT64 };

struct layout_entry {
    _Alignas(32) uint8_t expected[11][LAYOUT_PREFIX]; /* by varint length (int64); [0]: fixed */
    /* For the vector decoder: the bits of the 32 bytes that expected fixes, by the same index.
     * Past the prefix they are an int64's continuation bits, expected[v] holding them as the
     * varint's v bytes must have them (up to 8 bytes; longer ones are checked on their own). */
    _Alignas(32) uint8_t fixed_bits[11][LAYOUT_PREFIX];
    uint32_t prefix_mask;               /* bit i: byte i is compared */
    uint8_t prefix, kind, len_pos;
    uint32_t fixed;                     /* value bytes of fixed kinds; 0 for int64 */
    int32_t slot;                       /* first dense slot, or -1 for the label */
    uint32_t n_values;
};

struct dt_example_layout {
    const dt_example_spec *spec; /* learned for this spec */
    int n_entries, valid;
    int vector;                   /* decode with layout_parse_vector (the CPU has it) */
    int vector_fits;              /* every int64 entry's value lies within its 32 compared bytes */
    uint32_t since_learn;         /* records since the last attempt to learn */
    uint64_t hits;                /* records the layout decoded */
    int n_defaults;
    int16_t defaults[DT_EXAMPLE_MAX_FEATURES]; /* features the layout lacks: they take defaults */
    struct layout_entry e[DT_EXAMPLE_MAX_FEATURES + 1];
};

dt_status dt_example_layout_new(dt_example_layout **out)
{
    /* Aligned so the expected prefixes are aligned for the vector compare. */
    void *p = NULL;
    if (posix_memalign(&p, 64, sizeof(dt_example_layout)) != 0)
        return dt_error(DT_ERR_NOMEM, "no memory for a record layout");
    memset(p, 0, sizeof(dt_example_layout));
    *out = p;
    dt_example_layout_use_vector(*out, 1);
    return DT_OK;
}

void dt_example_layout_free(dt_example_layout *l) { free(l); }

uint64_t dt_example_layout_hits(const dt_example_layout *l) { return l->hits; }

static inline float load_le_float(const uint8_t *p)
{
    uint32_t w;
    memcpy(&w, p, 4);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    w = __builtin_bswap32(w);
#endif
    float f;
    memcpy(&f, &w, 4);
    return f;
}

/* The 7-bit groups of a varint's bytes (continuation bits cleared), packed into its value. */
static inline uint64_t squeeze7(uint64_t x)
{
    x = ((x & 0x7f007f007f007f00ull) >> 1) | (x & 0x007f007f007f007full);
    x = ((x & 0x3fff00003fff0000ull) >> 2) | (x & 0x00003fff00003fffull);
    return ((x & 0x0fffffff00000000ull) >> 4) | (x & 0x000000000fffffffull);
}

/* The record's bytes at p equal expected wherever mask has a bit (p has 32 readable bytes). */
static inline int prefix_equal(const uint8_t *p, const uint8_t *expected, uint32_t mask)
{
#if defined(__SSE2__)
    __m128i a0 = _mm_loadu_si128((const __m128i *)p);
    __m128i a1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i b0 = _mm_load_si128((const __m128i *)expected);
    __m128i b1 = _mm_load_si128((const __m128i *)(expected + 16));
    uint32_t eq = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(a0, b0)) |
                  (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(a1, b1)) << 16;
    return (~eq & mask) == 0;
#else
    for (int i = 0; i < LAYOUT_PREFIX; i++)
        if (((mask >> i) & 1) && p[i] != expected[i])
            return 0;
    return 1;
#endif
}

/* Continuation bits of a varint of v bytes (v = 1..8): set in bytes 0..v-2, clear in v-1. */
static inline uint64_t cont_bits(unsigned v) { return 0x8080808080808080ull >> (8 * (8 - v)) >> 8; }
static inline uint64_t varint_bytes(unsigned v) { return ~0ull >> (8 * (8 - v)); }

/* A varint of exactly v = 9 or 10 bytes at p (negative int64s take 10): 0 unless its bytes say
 * so and it fits in 64 bits, as the general decoder requires. */
static inline int long_varint(const uint8_t *p, unsigned v, uint64_t *u)
{
    uint64_t w = dt_load_le64(p);
    if ((w & 0x8080808080808080ull) != 0x8080808080808080ull)
        return 0;
    uint64_t x = squeeze7(w & 0x7f7f7f7f7f7f7f7full) | (uint64_t)(p[8] & 0x7f) << 56;
    if (v == 9) {
        *u = x;
        return p[8] < 0x80;
    }
    *u = x | (uint64_t)p[9] << 63;
    return p[8] >= 0x80 && p[9] <= 1;
}

/* The values of a float or bytes entry, at v, into dst. */
static inline void store_fixed(const struct layout_entry *t, const uint8_t *v, float *dst)
{
    if (t->kind == LK_FLOATS && t->fixed == 4) /* one float: no call to memcpy */
        *dst = load_le_float(v);
    else if (t->kind == LK_FLOATS)
        memcpy(dst, v, t->fixed);
    else
        for (uint32_t j = 0; j < t->n_values; j++)
            dst[j] = (float)v[j];
}

/* After the last entry at p: the record must end there; features the layout lacks take their
 * defaults. */
static inline int finish_layout(const dt_example_layout *L, const uint8_t *p, const uint8_t *end,
                                float *dense)
{
    if (p != end)
        return FAST_DECLINE;
    const dt_example_spec *spec = L->spec;
    for (int i = 0; i < L->n_defaults; i++) {
        const dt_feature_spec *f = &spec->features[L->defaults[i]];
        float *slots = dense + spec->dense_off[L->defaults[i]];
        for (int j = 0; j < f->length; j++)
            slots[j] = f->default_value;
    }
    return FAST_OK;
}

/* One record by the layout: FAST_OK with the row filled, or FAST_DECLINE. p..end is the record;
 * LAYOUT_SLACK readable bytes follow end. */
static int layout_parse(const dt_example_layout *L, const uint8_t *p, const uint8_t *end,
                        float *dense, float *label)
{
    size_t len;
    if (!fast_whole_field(&p, end, &len))
        return FAST_DECLINE;
    for (int i = 0; i < L->n_entries; i++) {
        const struct layout_entry *t = &L->e[i];
        float *dst = t->slot >= 0 ? dense + t->slot : label;
        const uint8_t *v = p + t->prefix, *next;
        /* Branches, not selects, on the kind: the next entry's place then depends on a loaded
         * length only after an int64, and the kinds repeat record after record. */
        if (t->kind == LK_INT64) {
            unsigned row = p[t->len_pos];
            next = v + row;
            if (row > 10 || !prefix_equal(p, t->expected[row], t->prefix_mask) || next > end)
                return FAST_DECLINE;
            uint64_t u;
            if (row <= 8) {
                uint64_t w = dt_load_le64(v) & varint_bytes(row);
                if ((w & 0x8080808080808080ull) != cont_bits(row))
                    return FAST_DECLINE;
                u = squeeze7(w & 0x7f7f7f7f7f7f7f7full);
            } else if (!long_varint(v, row, &u)) {
                return FAST_DECLINE;
            }
            *dst = (float)(int64_t)u;
        } else {
            next = v + t->fixed;
            if (!prefix_equal(p, t->expected[0], t->prefix_mask) || next > end)
                return FAST_DECLINE;
            store_fixed(t, v, dst);
        }
        p = next;
    }
    return finish_layout(L, p, end, dense);
}

#if LAYOUT_VECTOR
/* The 7-bit groups of a varint of v = 0..8 bytes, for pext. */
static const uint64_t varint_groups[9] = {
    0, 0x7full, 0x7f7full, 0x7f7f7full, 0x7f7f7f7full, 0x7f7f7f7f7full, 0x7f7f7f7f7f7full,
    0x7f7f7f7f7f7f7full, 0x7f7f7f7f7f7f7f7full};

/* Whether the 32 bytes a have the bits of expected[v] that fixed_bits[v] selects. */
__attribute__((target("avx2"))) static inline int entry_matches(__m256i a,
                                                                const struct layout_entry *t,
                                                                unsigned v)
{
    __m256i m = _mm256_load_si256((const __m256i *)t->fixed_bits[v]);
    __m256i x = _mm256_load_si256((const __m256i *)t->expected[v]);
    return _mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(a, m), x)) == -1;
}

/* layout_parse with one masked 32-byte compare per entry, which checks an int64's varint
 * continuation bits with its prefix, and pext to gather the varint's 7-bit groups. Needs
 * vector_fits: an int64 entry's prefix and up to 8 varint bytes lie within its 32 bytes. */
__attribute__((target("avx2,bmi2"))) static int layout_parse_vector(const dt_example_layout *L,
                                                                    const uint8_t *p,
                                                                    const uint8_t *end,
                                                                    float *dense, float *label)
{
    size_t len;
    if (!fast_whole_field(&p, end, &len))
        return FAST_DECLINE;
    for (int i = 0; i < L->n_entries; i++) {
        const struct layout_entry *t = &L->e[i];
        float *dst = t->slot >= 0 ? dense + t->slot : label;
        const uint8_t *v = p + t->prefix, *next;
        __m256i a = _mm256_loadu_si256((const __m256i *)p);
        if (t->kind == LK_INT64) {
            unsigned row = p[t->len_pos];
            next = v + row;
            if (row > 10 || next > end || !entry_matches(a, t, row))
                return FAST_DECLINE;
            uint64_t u;
            if (row <= 8)
                u = _pext_u64(dt_load_le64(v), varint_groups[row]);
            else if (!long_varint(v, row, &u))
                return FAST_DECLINE;
            *dst = (float)(int64_t)u;
        } else {
            next = v + t->fixed;
            if (next > end || !entry_matches(a, t, 0))
                return FAST_DECLINE;
            store_fixed(t, v, dst);
        }
        p = next;
    }
    return finish_layout(L, p, end, dense);
}

/* pext is microcoded, tens of cycles, on AMD's families 15h and 17h: cpu.h leaves them out. */
static int vector_supported(void) { return dt_cpu_has(DT_CPU_FAST_PEXT); }
#else
static int vector_supported(void) { return 0; }
#endif

int dt_example_layout_use_vector(dt_example_layout *l, int on)
{
    l->vector = on && vector_supported();
    return l->vector;
}

/* The vector decoder's view of an entry: the prefix's bytes are fixed, and so are the top bits
 * of an int64's varint of 1..8 bytes (set but in its last byte) where they fit in 32 bytes. */
static void set_fixed_bits(struct layout_entry *t)
{
    for (unsigned v = 0; v <= 10; v++) {
        memset(t->fixed_bits[v], 0xff, t->prefix);
        if (t->kind != LK_INT64 || v < 1 || v > 8 || t->prefix + v > LAYOUT_PREFIX)
            continue;
        for (unsigned j = 0; j < v; j++) {
            t->fixed_bits[v][t->prefix + j] = 0x80;
            t->expected[v][t->prefix + j] = j + 1 < v ? 0x80 : 0x00;
        }
    }
}

/* One map entry of a record the fast path accepted, as a layout entry; 0 when the layout cannot
 * describe it (then no layout is used). */
static int learn_entry(const dt_example_spec *spec, const uint8_t *e0, const uint8_t **pp,
                       const uint8_t *end, struct layout_entry *t, int *idx_out)
{
    const uint8_t *p = e0, *k, *e;
    size_t len, klen, vlen, llen, vbytes;
    if (*p++ != 0x0a || !fast_len(&p, end, &len))
        return 0;
    e = p + len;
    if (*p++ != 0x0a || !fast_len(&p, e, &klen))
        return 0;
    k = p;
    p += klen;
    if (*p++ != 0x12 || !fast_len(&p, e, &vlen))
        return 0;
    int kind = *p++ >> 3;
    if (!fast_len(&p, e, &llen) || *p++ != 0x0a || !fast_len(&p, e, &vbytes))
        return 0;
    int idx = lookup(spec, k, klen);
    size_t prefix = (size_t)(p - e0);
    if (idx < 0 || prefix > LAYOUT_PREFIX || p + vbytes != e)
        return 0;
    memset(t, 0, sizeof *t);
    t->prefix = (uint8_t)prefix;
    t->prefix_mask = (uint32_t)(((uint64_t)1 << prefix) - 1);
    t->slot = idx == LABEL_IDX ? -1 : spec->dense_off[idx];
    size_t want = idx == LABEL_IDX ? 1 : (size_t)spec->features[idx].length;
    if (idx != LABEL_IDX &&
        (spec->features[idx].scale != 1.0f || spec->features[idx].divisor != 0.0f))
        return 0;
    if (kind == DT_FEATURE_FLOAT || (kind == DT_FEATURE_BYTES && idx != LABEL_IDX)) {
        if (vbytes != (kind == DT_FEATURE_FLOAT ? 4 * want : want))
            return 0;
        t->kind = kind == DT_FEATURE_FLOAT ? LK_FLOATS : LK_BYTES;
        t->fixed = (uint32_t)vbytes;
        t->n_values = (uint32_t)want;
        memcpy(t->expected[0], e0, prefix);
    } else if (kind == DT_FEATURE_INT64) {
        /* One value, every length one byte: 0a L1 0a KL key 12 L2 1a L3 0a V, with L3 = V + 2,
         * L2 = V + 4 and L1 = KL + 8 + V for a varint of V bytes. */
        if (want != 1 || prefix != klen + 10 || klen + 18 >= 0x80)
            return 0;
        t->kind = LK_INT64;
        t->len_pos = (uint8_t)(prefix - 1);
        for (unsigned v = 0; v <= 10; v++) {
            uint8_t *x = t->expected[v];
            memcpy(x, e0, prefix);
            x[1] = (uint8_t)(klen + 8 + v);
            x[klen + 5] = (uint8_t)(4 + v);
            x[klen + 7] = (uint8_t)(2 + v);
            x[klen + 9] = (uint8_t)v;
        }
        t->expected[0][t->len_pos] = 0xff; /* an empty list is never one value */
    } else {
        return 0;
    }
    set_fixed_bits(t);
    *idx_out = idx;
    *pp = e;
    return 1;
}

static void learn_layout(const dt_example_spec *spec, dt_example_layout *L, const uint8_t *p,
                         const uint8_t *end)
{
    size_t len;
    L->valid = 0;
    L->n_entries = L->n_defaults = 0;
    L->since_learn = 0;
    L->vector_fits = 1;
    L->spec = spec;
    if (!fast_whole_field(&p, end, &len))
        return;
    uint64_t seen = 0;
    while (p < end) {
        int idx;
        if (L->n_entries > DT_EXAMPLE_MAX_FEATURES ||
            !learn_entry(spec, p, &p, end, &L->e[L->n_entries], &idx))
            return;
        const struct layout_entry *t = &L->e[L->n_entries++];
        if (t->kind == LK_INT64 && t->prefix + 8 > LAYOUT_PREFIX)
            L->vector_fits = 0;
        if (idx != LABEL_IDX)
            seen |= (uint64_t)1 << idx;
    }
    for (int i = 0; i < spec->n_features; i++)
        if (!((seen >> i) & 1))
            L->defaults[L->n_defaults++] = (int16_t)i;
    L->valid = 1;
}

/* How many records a layout that stopped matching waits before learning again: a file mixing
 * shapes then costs one learning pass per this many records, not one per record. */
#define RELEARN_EVERY 64

dt_status dt_example_parse_learned(const dt_example_spec *spec, dt_example_layout *L,
                                   const uint8_t *data, size_t n_bytes, dt_rowbuf *out)
{
    if (!spec->ready || !spec->fast || out->n_dense != spec->n_dense || n_bytes == 0)
        return dt_example_parse(spec, data, n_bytes, out);
    if (L->spec != spec) { /* new, or moved to another spec: learn from the next record */
        L->spec = spec;
        L->valid = 0;
        L->since_learn = RELEARN_EVERY - 1;
    }
    /* The layout writes every dense value (the features it lacks take their defaults); the
     * other decoders are given the zeroed row they expect. */
    float *dense, label = 0.0f;
    dt_status st = dt_rowbuf_add_row_unset(out, &dense);
    if (st)
        return st;
    const uint8_t *end = data + n_bytes;
#if LAYOUT_VECTOR
    int by_layout = L->valid && (L->vector && L->vector_fits
                                     ? layout_parse_vector(L, data, end, dense, &label)
                                     : layout_parse(L, data, end, dense, &label)) == FAST_OK;
#else
    int by_layout = L->valid && layout_parse(L, data, end, dense, &label) == FAST_OK;
#endif
    if (by_layout) {
        L->hits++;
        dt_rowbuf_set_label(out, label);
        return DT_OK;
    }
    if (dense)
        memset(dense, 0, (size_t)spec->n_dense * sizeof *dense);
    if (dt_ex_parse_fast(spec, data, end, dense, &label) == FAST_OK) {
        dt_rowbuf_set_label(out, label);
        if (++L->since_learn >= RELEARN_EVERY)
            learn_layout(spec, L, data, end);
        return DT_OK;
    }
    dt_rowbuf_drop_last(out);
    return dt_example_parse(spec, data, n_bytes, out);
}
