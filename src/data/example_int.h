/* What the tf.train.Example files of src/data share (not part of the public API): the record
 * being decoded and its wire types, the spec's key table, the general decoder's walk and the
 * sinks it decodes values into (example_decode.c), the reader's buffers (example_read.c), the
 * JSON text of values (example_encode.c), and the fast path's shape checks that the learned
 * layout also uses (example_fast.c, example_layout.c). */
#ifndef DTRAIN_EXAMPLE_INT_H
#define DTRAIN_EXAMPLE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dtrain/example.h"
#include "../core/bytes.h"

#define LABEL_IDX DT_EXAMPLE_MAX_FEATURES

enum { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2, WT_FIXED32 = 5 };

/* The record being decoded: offsets in messages count from base. */
typedef struct {
    const uint8_t *base;
    size_t n;
} rec;

/* ---- wire format ---- */

/* Reads a varint at *pp (< end). 0: ok; 1: it runs past end; 2: longer than 10 bytes or beyond
 * 64 bits. */
static inline int get_varint(const uint8_t **pp, const uint8_t *end, uint64_t *v)
{
    const uint8_t *p = *pp;
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end)
            return 1;
        uint8_t b = *p++;
        if (i == 9 && b > 1)
            return 2;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *v = x;
            *pp = p;
            return 0;
        }
    }
    return 2;
}

/* ---- the spec's key table (example_spec.c builds it) ---- */

static inline uint32_t key_hash(const uint8_t *k, size_t n)
{
    uint32_t h = 2166136261u ^ (uint32_t)n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ k[i]) * 16777619u;
    return (h ^ (h >> 8) ^ (h >> 16) ^ (h >> 24)) & 255;
}

static inline const char *spec_key(const dt_example_spec *spec, int idx)
{
    return idx == LABEL_IDX ? spec->label_key : spec->features[idx].key;
}

/* The spec index (or LABEL_IDX) of a key, or -1. */
static inline int lookup(const dt_example_spec *spec, const uint8_t *k, size_t n)
{
    if (n == 0 || n >= DT_EXAMPLE_KEY_CAP)
        return -1;
    uint32_t h = key_hash(k, n);
    for (int s; (s = spec->slots[h]) != 0; h = (h + 1) & 255) {
        int idx = s - 1;
        if (spec->key_len[idx] == n && memcmp(spec_key(spec, idx), k, n) == 0)
            return idx;
    }
    return -1;
}

/* ---- the reader's value buffers (dt_example_read, example_read.c) ---- */

/* The features of the record being read, and the values of all of them in one buffer per kind:
 * a feature's values are a run in the buffer of its kind, found by the offset kept in its
 * read_slot, and the pointers are set once every feature is decoded (the buffers may move while
 * they grow). The key table finds a key given twice; its slots are valid only when their
 * generation is the current record's, so nothing is cleared between records. */
struct table_slot {
    uint32_t gen, idx;
};

struct dt_example_reader {
    dt_example_feature *features; /* the record's features, in record order */
    struct read_slot *slots;      /* beside each feature: its entry, key hash, values' offset */
    size_t n_features, cap_features;
    struct table_slot *table;     /* open addressing, table_cap a power of two, half full at most */
    size_t table_cap;
    uint32_t gen;
    int64_t *ints;
    size_t n_ints, cap_ints;
    float *floats;
    size_t n_floats, cap_floats;
    const uint8_t **bytes;
    size_t *bytes_len;
    size_t n_bvals, cap_bvals;
    int oom; /* a bytes value found no room (put_bytes cannot return a status) */
};

dt_status dt_ex_reader_grow_values(dt_example_reader *rd, int kind, size_t more);

static inline dt_status read_floats(dt_example_reader *rd, const uint8_t *p, size_t n)
{
    dt_status st;
    if (n > rd->cap_floats - rd->n_floats &&
        (st = dt_ex_reader_grow_values(rd, DT_FEATURE_FLOAT, n)))
        return st;
    float *d = rd->floats + rd->n_floats;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(d, p, n * sizeof(float));
#else
    for (size_t i = 0; i < n; i++) {
        uint32_t u = dt_load_le32(p + 4 * i);
        memcpy(d + i, &u, 4);
    }
#endif
    rd->n_floats += n;
    return DT_OK;
}

static inline dt_status read_int64(dt_example_reader *rd, int64_t v)
{
    dt_status st;
    if (rd->n_ints == rd->cap_ints && (st = dt_ex_reader_grow_values(rd, DT_FEATURE_INT64, 1)))
        return st;
    rd->ints[rd->n_ints++] = v;
    return DT_OK;
}

static inline void read_bytes(dt_example_reader *rd, const uint8_t *p, size_t n)
{
    if (rd->oom ||
        (rd->n_bvals == rd->cap_bvals && dt_ex_reader_grow_values(rd, DT_FEATURE_BYTES, 1))) {
        rd->oom = 1;
        return;
    }
    rd->bytes[rd->n_bvals] = p;
    rd->bytes_len[rd->n_bvals++] = n;
}

/* ---- value sinks: where decode_list puts the values it decodes ---- */

enum { SINK_DENSE, SINK_SPARSE, SINK_LABEL, SINK_JSON, SINK_COLUMN, SINK_READ };

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

typedef struct {
    int mode;
    float *slots;    /* DENSE: the feature's slots */
    size_t length;   /* DENSE: how many */
    float scale;     /* DENSE, SPARSE */
    float divisor;   /* DENSE, SPARSE: 0 for none */
    dt_rowbuf *rows; /* SPARSE */
    float label;     /* LABEL: the first value */
    sbuf *sb;        /* JSON */
    size_t count;    /* values seen */
    size_t bytes_len; /* DENSE bytes: the length of the first bytes value */
    int kind;        /* for dt_ex_decode_feature's general path: the list kind to decode */
    double number;   /* COLUMN: the first float or int64 value */
    int64_t integer; /* COLUMN: the first int64 value */
    const uint8_t *bytes; /* COLUMN: the first bytes value */
    const uint8_t *run_start; /* and where its trailing run starts */
    dt_example_reader *rd; /* READ: the buffers the values are appended to */
} sink;

/* The JSON text of values (example_encode.c), for the JSON sink. */
void dt_ex_sb_put(sbuf *b, const char *s, size_t n);
void dt_ex_json_float(sbuf *b, float f);
void dt_ex_json_base64(sbuf *b, const uint8_t *p, size_t n);

/* ---- the general decoder's walk (example_decode.c) ---- */

/* The names of a Feature's lists, by kind (DT_FEATURE_*). */
extern const char *const dt_ex_list_name[4];

/* A map entry the spec wants: its payload, and its value's payload when it has exactly one value
 * field (always, from TF's writers; v0 is NULL when it has none or several). */
typedef struct {
    const uint8_t *e0, *e1, *v0, *v1;
} entry_loc;

/* A Feature's final list kind (0 if no list is set) and its values' place: a oneof keeps the
 * last kind given, and occurrences of one kind merge, so the values are those of the trailing run
 * of occurrences of the final kind, starting at run_start. Almost always that run is one list,
 * [l0, l1) (single = 1), decoded directly; otherwise decode walks the entry again. */
typedef struct {
    int kind, single;
    const uint8_t *run_start, *l0, *l1;
} feature_loc;

/* Finds a map entry's final list kind and where its values lie. */
dt_status dt_ex_analyze_feature(const rec *r, const entry_loc *el, feature_loc *fl);
/* Decodes the values of an analyzed feature into s. */
dt_status dt_ex_decode_feature(const rec *r, const entry_loc *el, const feature_loc *fl, sink *s);

/* Calls fn(ctx, key, key length, entry) for each map entry of the Example, in record order,
 * through repeated Features messages (which merge). */
typedef dt_status (*entry_fn)(void *ctx, const rec *r, const uint8_t *k, size_t klen,
                              const entry_loc *el);
dt_status dt_ex_each_entry(const rec *r, entry_fn fn, void *ctx);

/* A CTR record's row: its n_ids ids (entries (id, 1)) and then its n_vals values (entries
 * (position, value)), as decoded, zipped into its fields' (id, value) entries and checked. */
dt_status dt_ex_zip_ctr_fields(const dt_example_spec *spec, float label, const size_t counts[2],
                               dt_rowbuf *out);

/* ---- the fast path (example_fast.c) ---- */

/* What TF's writers produce: one Features message spanning the record; each map entry exactly
 * {key, value}; each Feature exactly one list; each list exactly one packed run of values; every
 * key at most once. dt_ex_parse_fast decodes such a record in a single pass, straight into the
 * row, and answers FAST_DECLINE at the first byte that departs from that shape (or at any
 * error), after which the general path decodes the record again and writes the exact error. So
 * the fast path needs no error messages, and its result is the general path's on every record it
 * accepts. */
enum { FAST_OK = 0, FAST_DECLINE = 1 };

/* A varint of at most 2 bytes (lengths), ending before end; 0 when it is longer or runs past. */
static inline int fast_len(const uint8_t **pp, const uint8_t *end, size_t *len)
{
    const uint8_t *p = *pp;
    if (p < end && p[0] < 0x80) {
        *len = p[0];
        *pp = p + 1;
        return 1;
    }
    if (end - p >= 2 && p[1] < 0x80) {
        *len = (size_t)(p[0] & 0x7f) | (size_t)p[1] << 7;
        *pp = p + 2;
        return 1;
    }
    return 0;
}

/* Whether the bytes from *pp to end are one field 1, length-delimited, that ends exactly at end
 * (an Example's Features, a Feature's list, a list's packed values): *pp then moves to its
 * payload, of *len bytes. */
static inline int fast_whole_field(const uint8_t **pp, const uint8_t *end, size_t *len)
{
    const uint8_t *p = *pp;
    if (p >= end || *p++ != 0x0a || !fast_len(&p, end, len) || *len != (size_t)(end - p))
        return 0;
    *pp = p;
    return 1;
}

/* A record [p, end) of that shape into a row's dense values (every one written) and *label:
 * FAST_OK; FAST_DECLINE for any other record, the dense values then partly written. */
int dt_ex_parse_fast(const dt_example_spec *spec, const uint8_t *p, const uint8_t *end,
                     float *dense, float *label);

#endif
