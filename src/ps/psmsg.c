/* The parameter server's messages (see psmsg.h): the header, and the payload of each group of
 * message types written by its encoder and read and checked by its decoder. dt_psmsg_encode and
 * dt_psmsg_decode check the header and the limits every type shares and reach a type's pair
 * through the codecs table. */
#include "psmsg.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/bytes.h"
#include "../core/crc32c.h"
#include "dtrain/partition.h"

static const char *const type_names[] = {"?",    "PING",     "PONG",       "STOP",
                                         "PULL_ROWS", "ROWS", "PUSH_ROWS", "PULL_DENSE",
                                         "DENSE", "PUSH_DENSE", "ACK",    "ERROR",
                                         "TABLE", "VAR", "RUN", "RESULT", "RING", "SAVE",
                                         "ASSIGN", "PULL_KEYS", "KEYED", "READ_KEYS",
                                         "STEP", "STEPS"};

const char *dt_psmsg_type_name(dt_psmsg_type type)
{
    return (unsigned)type < sizeof type_names / sizeof type_names[0] ? type_names[type] : "?";
}

dt_status dt_psmsg_status(const dt_psmsg *m)
{
    return m->status <= DT_ERR_INVALID && m->status >= DT_ERR_UNAVAILABLE ? (dt_status)m->status
                                                                          : DT_ERR_PEER;
}

void dt_psbuf_free(dt_psbuf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

static dt_status reserve(dt_psbuf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return DT_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more)
        cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p)
        return dt_error(DT_ERR_NOMEM, "no memory for a %zu-byte ps message", b->len + more);
    b->data = p, b->cap = cap;
    return DT_OK;
}

static void put32(uint8_t *p, uint32_t v) { dt_store_le32(p, v); }
static void put64(uint8_t *p, uint64_t v) { dt_store_le64(p, v); }
static void putf(uint8_t *p, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    put32(p, u);
}

/* n floats (or i64 ids) little-endian at p: one copy on a little-endian host. */
static void put_floats(uint8_t *p, const float *v, size_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n) /* an empty message may come without an array */
        memcpy(p, v, 4 * n);
#else
    for (size_t i = 0; i < n; i++)
        putf(p + 4 * i, v[i]);
#endif
}

static void put_ids(uint8_t *p, const int64_t *ids, size_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n)
        memcpy(p, ids, 8 * n);
#else
    for (size_t i = 0; i < n; i++)
        put64(p + 8 * i, (uint64_t)ids[i]);
#endif
}

/* A TABLE message's payload before its name. */
#define TABLE_FIXED_BYTES (4 + 4 + 8 + 8 + 8 + 4 + 4 + 4 * DT_PSMSG_TABLE_PARAMS + 4 + 8 + 4)

/* A TABLE message's dynamic policy after its name (the hash strategy). */
#define TABLE_POLICY_BYTES (8 + 8 + 4 + 8 + 4 + 8 + 8 + 8)

/* A KEYED message's payload before its arrays. */
#define KEYED_FIXED_BYTES 28
/* A VAR message's payload before its values. */
#define VAR_FIXED_BYTES (4 + 8 + 8 + 8 + 4 + 4 + 8 + 4 * DT_PSMSG_TABLE_PARAMS)

/* The payload's size for m's type, or 0 with *bad set when a count is out of range. */
static uint64_t payload_size(const dt_psmsg *m, bool *bad)
{
    *bad = false;
    switch (m->type) {
    case DT_PSMSG_PING: case DT_PSMSG_PONG: case DT_PSMSG_STOP: return 0;
    case DT_PSMSG_PULL_ROWS: return 8 + 8ull * m->n;
    case DT_PSMSG_ROWS: return 12 + 4ull * m->n * m->dim;
    case DT_PSMSG_PUSH_ROWS: return 24 + 8ull * m->n + 4ull * m->n * m->dim;
    case DT_PSMSG_PULL_DENSE: return 20;
    case DT_PSMSG_DENSE: return 20 + 4 * m->count;
    case DT_PSMSG_PUSH_DENSE: return 32 + 4 * m->count;
    case DT_PSMSG_ACK: return 8;
    case DT_PSMSG_ERROR: return 8 + (uint64_t)m->text_len;
    case DT_PSMSG_TABLE:
        return TABLE_FIXED_BYTES + (uint64_t)m->text_len +
               (m->strategy == DT_PARTITION_HASH ? TABLE_POLICY_BYTES : 0);
    case DT_PSMSG_PULL_KEYS: return 16 + 12ull * m->n;
    case DT_PSMSG_VAR: return VAR_FIXED_BYTES + 4 * m->count;
    case DT_PSMSG_RUN: return 24;
    case DT_PSMSG_RESULT: return 32;
    case DT_PSMSG_RING: return 4 + 2 * (uint64_t)m->n;
    case DT_PSMSG_SAVE: return 16 + (uint64_t)m->text_len;
    case DT_PSMSG_ASSIGN: return 28 + 4 * m->count * (1 + (uint64_t)m->slots);
    case DT_PSMSG_KEYED:
        return KEYED_FIXED_BYTES + (m->target == DT_PSMSG_KEYED_BLOOM
                                        ? (uint64_t)m->n
                                        : 16ull * m->n + 4ull * m->n * m->dim * (1 + m->slots));
    case DT_PSMSG_READ_KEYS: return 24;
    case DT_PSMSG_STEP: case DT_PSMSG_STEPS: return 16;
    }
    *bad = true;
    return 0;
}

static dt_status bad_msg(const char *peer, size_t offset, const char *what)
{
    return dt_error(DT_ERR_FORMAT, "%s: ps message, byte %zu: %s", peer, offset, what);
}

static float loadf(const uint8_t *p)
{
    uint32_t u = dt_load_le32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int64_t dt_psmsg_id(const dt_psmsg *m, size_t i) { return (int64_t)dt_load_le64(m->ids + 8 * i); }

float dt_psmsg_value(const dt_psmsg *m, size_t i) { return loadf(m->values + 4 * i); }

uint32_t dt_psmsg_times(const dt_psmsg *m, size_t i) { return dt_load_le32(m->times + 4 * i); }

uint32_t dt_psmsg_last(const dt_psmsg *m, size_t i) { return dt_load_le32(m->last + 4 * i); }

uint16_t dt_psmsg_port(const dt_psmsg *m, size_t i)
{
    return (uint16_t)(m->ports[2 * i] | m->ports[2 * i + 1] << 8);
}

void dt_psmsg_values(const dt_psmsg *m, size_t first, size_t n, float *out)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(out, m->values + 4 * first, 4 * n);
#else
    for (size_t i = 0; i < n; i++)
        out[i] = loadf(m->values + 4 * (first + i));
#endif
}

/* A push's step and rate scale (12 bytes at p); false when the scale is not a finite number
 * >= 0. */
static bool read_push(const uint8_t *p, dt_psmsg *out)
{
    out->step = (int64_t)dt_load_le64(p);
    out->lr_scale = loadf(p + 8);
    return isfinite(out->lr_scale) && out->lr_scale >= 0.0f;
}

/* The first of n little-endian floats at p whose exponent bits are all set (an infinity or a
 * NaN), or n: a branch-free pass over blocks, then the block that has one is searched. */
static size_t first_not_finite(const uint8_t *p, size_t n)
{
    const size_t block = 256;
    for (size_t lo = 0; lo < n; lo += block) {
        size_t hi = lo + block < n ? lo + block : n;
        uint32_t bad = 0;
        for (size_t i = lo; i < hi; i++)
            bad |= (dt_load_le32(p + 4 * i) & 0x7f800000u) == 0x7f800000u;
        if (bad)
            for (size_t i = lo; i < hi; i++)
                if ((dt_load_le32(p + 4 * i) & 0x7f800000u) == 0x7f800000u)
                    return i;
    }
    return n;
}

/* The floats a message carries after its fields: rows x width (ROWS, PUSH_ROWS), count for
 * every slot and the values (ASSIGN), or count. */
static size_t n_values(const dt_psmsg *m)
{
    return m->type == DT_PSMSG_ROWS || m->type == DT_PSMSG_PUSH_ROWS
               ? (size_t)m->n * m->dim
           : m->type == DT_PSMSG_ASSIGN ? (size_t)m->count * (1 + (size_t)m->slots)
           : m->type == DT_PSMSG_KEYED
               ? (m->target == DT_PSMSG_KEYED_ROWS ? (size_t)m->n * m->dim * (1 + m->slots) : 0)
               : (size_t)m->count;
}

/* Decoders name a byte by its offset in the message: the header, then the payload's offset. */
enum { H = DT_PSMSG_HEADER_BYTES };

/* In a decoder: unless k more bytes of the payload (size bytes) follow at, fails naming at. */
#define NEED(k, what)                                                                              \
    do {                                                                                           \
        if ((uint64_t)size - at < (uint64_t)(k))                                                   \
            return bad_msg(peer, H + at, what);                                                    \
    } while (0)

/* ---- PING, PONG, STOP: no payload ---- */

static void encode_empty(const dt_psmsg *m, const int64_t *ids_host, const float *values_host,
                         uint8_t *at)
{
    (void)m, (void)ids_host, (void)values_host, (void)at;
}

static dt_status decode_empty(const uint8_t *p, uint32_t size, const char *peer, dt_psmsg *out,
                              size_t *used)
{
    (void)p, (void)size, (void)peer, (void)out;
    *used = 0;
    return DT_OK;
}

/* ---- PULL_ROWS, ROWS, PUSH_ROWS: a table's rows looked up, sent and pushed ---- */

static void encode_rows(const dt_psmsg *m, const int64_t *ids_host, const float *values_host,
                        uint8_t *at)
{
    put32(at, m->table), put32(at + 4, m->n), at += 8;
    if (m->type != DT_PSMSG_PULL_ROWS)
        put32(at, m->dim), at += 4;
    if (m->type == DT_PSMSG_PUSH_ROWS)
        put64(at, (uint64_t)m->step), putf(at + 8, m->lr_scale), at += 12;
    if (m->type != DT_PSMSG_ROWS)
        put_ids(at, ids_host, m->n), at += 8 * (size_t)m->n;
    if (m->type != DT_PSMSG_PULL_ROWS)
        put_floats(at, values_host, n_values(m));
}

static dt_status decode_rows(const uint8_t *p, uint32_t size, const char *peer, dt_psmsg *out,
                             size_t *used)
{
    size_t at = 0;
    NEED(8, "truncated table and row count");
    out->table = dt_load_le32(p), out->n = dt_load_le32(p + 4), at = 8;
    if (out->n > DT_PSMSG_MAX_ROWS)
        return bad_msg(peer, H + 4, "more rows than a message carries");
    if (out->type != DT_PSMSG_PULL_ROWS) {
        NEED(4, "truncated row width");
        out->dim = dt_load_le32(p + at), at += 4;
        if (out->dim < 1 || out->dim > DT_PSMSG_MAX_DIM)
            return bad_msg(peer, H + at - 4, "row width outside 1..65536");
    }
    if (out->type == DT_PSMSG_PUSH_ROWS) {
        NEED(12, "truncated step and rate");
        if (!read_push(p + at, out))
            return bad_msg(peer, H + at + 8, "the rate's scale is not a finite number >= 0");
        at += 12;
    }
    if (out->type != DT_PSMSG_ROWS) {
        NEED(8ull * out->n, "truncated ids");
        out->ids = p + at;
        for (uint32_t i = 0; i < out->n; i++)
            if (dt_psmsg_id(out, i) < 0)
                return bad_msg(peer, H + at + 8 * i, "a negative id");
        at += 8ull * out->n;
    }
    if (out->type != DT_PSMSG_PULL_ROWS) {
        NEED(4ull * out->n * out->dim, "truncated rows");
        out->values = p + at;
        at += 4ull * out->n * out->dim;
    }
    *used = at;
    return DT_OK;
}

/* n keys (not negative) at *at_io, then their u32 times (0 refused as zero_times says, unless
 * NULL) and, with last, their u32 last-seen steps (0 refused): PULL_KEYS's and KEYED's. */
static dt_status decode_key_arrays(const uint8_t *p, uint32_t size, const char *peer,
                                   dt_psmsg *out, size_t *at_io, const char *zero_times,
                                   bool last)
{
    size_t at = *at_io;
    NEED((last ? 16ull : 12ull) * out->n, "truncated keys and their counts");
    out->ids = p + at;
    for (uint32_t i = 0; i < out->n; i++)
        if (dt_psmsg_id(out, i) < 0)
            return bad_msg(peer, H + at + 8 * i, "a negative key");
    at += 8ull * out->n;
    out->times = p + at;
    for (uint32_t i = 0; zero_times && i < out->n; i++)
        if (dt_psmsg_times(out, i) == 0)
            return bad_msg(peer, H + at + 4 * i, zero_times);
    at += 4ull * out->n;
    if (last) {
        out->last = p + at;
        for (uint32_t i = 0; i < out->n; i++)
            if (dt_psmsg_last(out, i) == 0)
                return bad_msg(peer, H + at + 4 * i, "a key last seen at step 0");
        at += 4ull * out->n;
    }
    *at_io = at;
    return DT_OK;
}

/* n keys, then their u32 times and (last given) last-seen steps: PULL_KEYS's and KEYED's. */
static uint8_t *put_key_arrays(uint8_t *at, const int64_t *keys, const uint32_t *times,
                               const uint32_t *last, uint32_t n)
{
    put_ids(at, keys, n), at += 8 * (size_t)n;
    for (uint32_t i = 0; i < n; i++)
        put32(at + 4 * (size_t)i, times[i]);
    at += 4 * (size_t)n;
    for (uint32_t i = 0; last && i < n; i++)
        put32(at + 4 * (size_t)i, last[i]);
    return at + (last ? 4 * (size_t)n : 0);
}

/* ---- PULL_KEYS: a training pull of a dynamic table's rows, with each key's sightings ---- */

static void encode_keys(const dt_psmsg *m, const int64_t *ids_host, const float *values_host,
                        uint8_t *at)
{
    (void)values_host;
    put32(at, m->table), put32(at + 4, m->n), put64(at + 8, (uint64_t)m->step), at += 16;
    put_key_arrays(at, ids_host, m->times_host, NULL, m->n);
}

static dt_status decode_keys(const uint8_t *p, uint32_t size, const char *peer, dt_psmsg *out,
                             size_t *used)
{
    size_t at = 0;
    NEED(16, "truncated table, key count and step");
    out->table = dt_load_le32(p), out->n = dt_load_le32(p + 4);
    out->step = (int64_t)dt_load_le64(p + 8), at = 16;
    if (out->n > DT_PSMSG_MAX_ROWS)
        return bad_msg(peer, H + 4, "more keys than a message carries");
    if (out->step < 1)
        return bad_msg(peer, H + 8, "a step below 1");
    dt_status st = decode_key_arrays(p, size, peer, out, &at, "a key seen 0 times", false);
    *used = at;
    return st;
}

/* ---- PULL_DENSE, DENSE, PUSH_DENSE: a slice of the dense variables read, sent and pushed ---- */

static void encode_dense(const dt_psmsg *m, const int64_t *ids_host, const float *values_host,
                         uint8_t *at)
{
    (void)ids_host;
    put32(at, m->table), put64(at + 4, m->offset), put64(at + 12, m->count), at += 20;
    if (m->type == DT_PSMSG_PUSH_DENSE)
        put64(at, (uint64_t)m->step), putf(at + 8, m->lr_scale), at += 12;
    if (m->type != DT_PSMSG_PULL_DENSE)
        put_floats(at, values_host, n_values(m));
}

static dt_status decode_dense(const uint8_t *p, uint32_t size, const char *peer, dt_psmsg *out,
                              size_t *used)
{
    size_t at = 0;
    NEED(20, "truncated variable, offset and count");
    out->table = dt_load_le32(p), out->offset = dt_load_le64(p + 4);
    out->count = dt_load_le64(p + 12), at = 20;
    if (out->count > DT_PSMSG_MAX_PAYLOAD / 4 || out->offset > ((uint64_t)1 << 40))
        return bad_msg(peer, H + 4, "offset or count beyond the limits");
    if (out->type == DT_PSMSG_PUSH_DENSE) {
        NEED(12, "truncated step and rate");
        if (!read_push(p + at, out))
            return bad_msg(peer, H + at + 8, "the rate's scale is not a finite number >= 0");
        at += 12;
    }
    if (out->type != DT_PSMSG_PULL_DENSE) {
        NEED(4 * out->count, "truncated values");
        out->values = p + at;
        at += 4 * out->count;
    }
    *used = at;
    return DT_OK;
}

/* ---- ACK, ERROR: a ps task's replies to pushes and to what it cannot do ---- */

static void encode_reply(const dt_psmsg *m, const int64_t *ids_host, const float *values_host,
                         uint8_t *at)
{
    (void)ids_host, (void)values_host;
    if (m->type == DT_PSMSG_ACK) {
        put64(at, (uint64_t)m->clock);
        return;
    }
    put32(at, (uint32_t)m->status), put32(at + 4, m->text_len), at += 8;
    memcpy(at, m->text, m->text_len);
}

static dt_status decode_reply(const uint8_t *p, uint32_t size, const char *peer, dt_psmsg *out,
                              size_t *used)
{
    size_t at = 0;
    if (out->type == DT_PSMSG_ACK) {
        NEED(8, "truncated clock");
        out->clock = (int64_t)dt_load_le64(p), at = 8;
    } else {
        NEED(8, "truncated status and length");
        out->status = (int32_t)dt_load_le32(p), out->text_len = dt_load_le32(p + 4), at = 8;
        if (out->text_len > DT_PSMSG_MAX_TEXT)
            return bad_msg(peer, H + 4, "an error text longer than 1024 bytes");
        NEED(out->text_len, "truncated error text");
        out->text = (const char *)(p + at);
        at += out->text_len;
    }
    *used = at;
    return DT_OK;
}

/* ---- TABLE, VAR: the coordinator's definitions of a table's shard and a dense slice, with
 * their partition and optimizer parameters ---- */

static void encode_define(const dt_psmsg *m, const int64_t *ids_host, const float *values_host,
                          uint8_t *at)
{
    (void)ids_host;
    if (m->type == DT_PSMSG_TABLE) {
        put32(at, m->table), put32(at + 4, m->dim), put64(at + 8, (uint64_t)m->rows_total);
        put64(at + 16, (uint64_t)m->n_shards), put64(at + 24, (uint64_t)m->shard);
        put32(at + 32, m->strategy), put32(at + 36, m->optimizer), at += 40;
        for (int k = 0; k < DT_PSMSG_TABLE_PARAMS; k++, at += 4)
            putf(at, m->params[k]);
        putf(at, m->init_stddev), put64(at + 4, m->seed), put32(at + 12, m->text_len), at += 16;
        memcpy(at, m->text, m->text_len);
        at += m->text_len;
        if (m->strategy == DT_PARTITION_HASH) {
            const dt_keymap_policy *q = &m->policy;
            put64(at, (uint64_t)q->min_count), put64(at + 8, (uint64_t)q->bloom_bits);
            put32(at + 16, (uint32_t)q->bloom_hashes), put64(at + 20, (uint64_t)q->steps_to_live);
            putf(at + 28, q->l2_below), put64(at + 32, (uint64_t)q->max_rows);
            put64(at + 40, (uint64_t)q->evict_every_steps);
            put64(at + 48, (uint64_t)q->memory_limit);
        }
        return;
    }
    put32(at, m->table), put64(at + 4, m->offset), put64(at + 12, m->count);
    put64(at + 20, m->total), put32(at + 28, m->optimizer), put32(at + 32, m->schedule);
    put64(at + 36, (uint64_t)m->decay_steps), at += 44;
    for (int k = 0; k < DT_PSMSG_TABLE_PARAMS; k++, at += 4)
        putf(at, m->params[k]);
    put_floats(at, values_host, n_values(m));
}

/* A TABLE payload (size bytes at p, at least its fixed part): the shard's numbers in range, the
 * floats finite, the name 1..64 printable bytes. */
static dt_status decode_table(const uint8_t *p, uint32_t size, const char *peer, dt_psmsg *out)
{
    out->table = dt_load_le32(p), out->dim = dt_load_le32(p + 4);
    out->rows_total = (int64_t)dt_load_le64(p + 8), out->n_shards = (int64_t)dt_load_le64(p + 16);
    out->shard = (int64_t)dt_load_le64(p + 24);
    out->strategy = dt_load_le32(p + 32), out->optimizer = dt_load_le32(p + 36);
    if (out->dim < 1 || out->dim > DT_PSMSG_MAX_DIM)
        return bad_msg(peer, H + 4, "row width outside 1..65536");
    if (out->rows_total < 1 || out->rows_total > ((int64_t)1 << 40))
        return bad_msg(peer, H + 8, "table rows outside 1..2^40");
    if (out->n_shards < 1 || out->n_shards > out->rows_total)
        return bad_msg(peer, H + 16, "shards outside 1..the table's rows");
    if (out->shard < 0 || out->shard >= out->n_shards)
        return bad_msg(peer, H + 24, "a shard index outside 0..shards - 1");
    size_t at = 40;
    for (int k = 0; k < DT_PSMSG_TABLE_PARAMS; k++, at += 4)
        if (!isfinite(out->params[k] = loadf(p + at)))
            return bad_msg(peer, H + at, "an optimizer parameter that is not finite");
    out->init_stddev = loadf(p + at);
    if (!isfinite(out->init_stddev) || out->init_stddev < 0.0f)
        return bad_msg(peer, H + at, "an initial stddev that is not a finite number >= 0");
    out->seed = dt_load_le64(p + at + 4);
    out->text_len = dt_load_le32(p + at + 12), at += 16;
    if (out->text_len < 1 || out->text_len > DT_PSMSG_MAX_NAME)
        return bad_msg(peer, H + at - 4, "a table name outside 1..64 bytes");
    if ((uint64_t)size - at < out->text_len)
        return bad_msg(peer, H + at, "truncated table name");
    out->text = (const char *)(p + at);
    for (uint32_t i = 0; i < out->text_len; i++)
        if (p[at + i] < 0x21 || p[at + i] > 0x7e)
            return bad_msg(peer, H + at + i, "a table name byte that is not printable");
    return DT_OK;
}

/* A VAR payload's fixed part (at least VAR_FIXED_BYTES at p): the slice within the whole, the
 * parameters finite. */
static dt_status decode_var(const uint8_t *p, const char *peer, dt_psmsg *out)
{
    out->table = dt_load_le32(p), out->offset = dt_load_le64(p + 4);
    out->count = dt_load_le64(p + 12), out->total = dt_load_le64(p + 20);
    out->optimizer = dt_load_le32(p + 28), out->schedule = dt_load_le32(p + 32);
    out->decay_steps = (int64_t)dt_load_le64(p + 36);
    if (out->total < 1 || out->total > DT_PSMSG_MAX_PAYLOAD / 4)
        return bad_msg(peer, H + 20, "a dense size outside 1..2^28 floats");
    if (out->count < 1 || out->offset >= out->total || out->count > out->total - out->offset)
        return bad_msg(peer, H + 4, "a slice outside the dense variables");
    if (out->decay_steps < 0)
        return bad_msg(peer, H + 36, "negative decay steps");
    size_t at = 44;
    for (int k = 0; k < DT_PSMSG_TABLE_PARAMS; k++, at += 4)
        if (!isfinite(out->params[k] = loadf(p + at)))
            return bad_msg(peer, H + at, "an optimizer parameter that is not finite");
    return DT_OK;
}

static dt_status decode_define(const uint8_t *p, uint32_t size, const char *peer, dt_psmsg *out,
                               size_t *used)
{
    size_t at = 0;
    dt_status st;
    if (out->type == DT_PSMSG_TABLE) {
        NEED(TABLE_FIXED_BYTES, "truncated table definition");
        st = decode_table(p, size, peer, out);
        if (st)
            return st;
        at = TABLE_FIXED_BYTES + out->text_len;
        if (out->strategy == DT_PARTITION_HASH) {
            NEED(TABLE_POLICY_BYTES, "truncated dynamic table policy");
            dt_keymap_policy *q = &out->policy;
            const uint8_t *x = p + at;
            q->min_count = (int64_t)dt_load_le64(x), q->bloom_bits = (int64_t)dt_load_le64(x + 8);
            q->bloom_hashes = (int)dt_load_le32(x + 16);
            q->steps_to_live = (int64_t)dt_load_le64(x + 20), q->l2_below = loadf(x + 28);
            q->max_rows = (int64_t)dt_load_le64(x + 32);
            q->evict_every_steps = (int64_t)dt_load_le64(x + 40);
            q->memory_limit = (int64_t)dt_load_le64(x + 48);
            if (dt_keymap_policy_check(q) != DT_OK) {
                char why[200];
                snprintf(why, sizeof why, "a dynamic table policy out of range (%s)",
                         dt_last_error());
                return bad_msg(peer, H + at, why);
            }
            at += TABLE_POLICY_BYTES;
        }
    } else {
        NEED(VAR_FIXED_BYTES, "truncated variable definition");
        if ((st = decode_var(p, peer, out)))
            return st;
        at = VAR_FIXED_BYTES;
        NEED(4 * out->count, "truncated values");
        out->values = p + at;
        at += 4 * out->count;
    }
    *used = at;
    return DT_OK;
}

/* ---- RUN, RESULT, RING: the coordinator's scheduling of the workers ---- */

static void encode_control(const dt_psmsg *m, const int64_t *ids_host, const float *values_host,
                           uint8_t *at)
{
    (void)ids_host, (void)values_host;
    switch (m->type) {
    case DT_PSMSG_RUN:
        put64(at, (uint64_t)m->step), put32(at + 8, m->n), put64(at + 12, (uint64_t)m->position);
        put32(at + 20, (uint32_t)m->shard);
        break;
    case DT_PSMSG_RESULT: {
        uint64_t loss_bits;
        memcpy(&loss_bits, &m->loss, 8);
        put32(at, m->n), put32(at + 4, m->done), put64(at + 8, (uint64_t)m->rows);
        put64(at + 16, (uint64_t)m->correct), put64(at + 24, loss_bits);
        break;
    }
    default: /* RING */
        put32(at, m->n), at += 4;
        for (uint32_t i = 0; i < m->n; i++, at += 2)
            at[0] = (uint8_t)m->ports_host[i], at[1] = (uint8_t)(m->ports_host[i] >> 8);
        break;
    }
}

static dt_status decode_control(const uint8_t *p, uint32_t size, const char *peer, dt_psmsg *out,
                                size_t *used)
{
    size_t at = 0;
    switch (out->type) {
    case DT_PSMSG_RUN:
        NEED(24, "truncated step, count, position and data shard");
        out->step = (int64_t)dt_load_le64(p), out->n = dt_load_le32(p + 8);
        out->position = (int64_t)dt_load_le64(p + 12), out->shard = (int64_t)dt_load_le32(p + 20);
        at = 24;
        if (out->step < 1 || out->n < 1 || out->n > 1000000 || out->position < 0)
            return bad_msg(peer, H, "a first step below 1, a step count outside 1..10^6 or a "
                           "negative position");
        break;
    case DT_PSMSG_RESULT: {
        NEED(32, "truncated result");
        out->n = dt_load_le32(p), out->done = dt_load_le32(p + 4);
        out->rows = (int64_t)dt_load_le64(p + 8), out->correct = (int64_t)dt_load_le64(p + 16);
        uint64_t loss_bits = dt_load_le64(p + 24);
        memcpy(&out->loss, &loss_bits, 8);
        at = 32;
        if (out->n > 1000000 || out->done > 1 || out->rows < 0 || out->correct < 0 ||
            out->correct > out->rows)
            return bad_msg(peer, H, "a result's steps, flag, rows or correct count out of range");
        if (!isfinite(out->loss))
            return bad_msg(peer, H + 24, "a loss that is not finite");
        break;
    }
    default: /* RING */
        NEED(4, "truncated port count");
        out->n = dt_load_le32(p), at = 4;
        if (out->n > DT_PSMSG_MAX_RING)
            return bad_msg(peer, H, "more ring ports than the limit");
        NEED(2ull * out->n, "truncated ports");
        out->ports = p + at;
        for (uint32_t i = 0; i < out->n; i++)
            if (dt_psmsg_port(out, i) == 0)
                return bad_msg(peer, H + at + 2 * i, "port 0 in the ring");
        at += 2ull * out->n;
        break;
    }
    *used = at;
    return DT_OK;
}

/* ---- SAVE, ASSIGN: a checkpoint's shards saved by the ps tasks, and restored into them ---- */

static void encode_checkpoint(const dt_psmsg *m, const int64_t *ids_host,
                              const float *values_host, uint8_t *at)
{
    (void)ids_host;
    if (m->type == DT_PSMSG_SAVE) {
        put64(at, (uint64_t)m->step), put32(at + 8, (uint32_t)m->n_shards);
        put32(at + 12, m->text_len), at += 16;
        memcpy(at, m->text, m->text_len);
        return;
    }
    put32(at, m->target), put32(at + 4, m->table), put64(at + 8, m->offset);
    put64(at + 16, m->count), put32(at + 24, m->slots), at += 28;
    put_floats(at, values_host, n_values(m));
}

static dt_status decode_checkpoint(const uint8_t *p, uint32_t size, const char *peer,
                                   dt_psmsg *out, size_t *used)
{
    size_t at = 0;
    if (out->type == DT_PSMSG_SAVE) {
        NEED(16, "truncated step, ps count and directory length");
        out->step = (int64_t)dt_load_le64(p), out->n_shards = dt_load_le32(p + 8);
        out->text_len = dt_load_le32(p + 12), at = 16;
        if (out->step < 0 || out->n_shards < 1 || out->n_shards > 65535 || out->text_len < 1 ||
            out->text_len > DT_PSMSG_MAX_TEXT)
            return bad_msg(peer, H, "a negative step, a ps count outside 1..65535, or a "
                           "directory of 0 or more than 1024 bytes");
        NEED(out->text_len, "truncated directory");
        out->text = (const char *)(p + at);
        for (uint32_t i = 0; i < out->text_len; i++)
            if (p[at + i] < 0x20 || p[at + i] == 0x7f)
                return bad_msg(peer, H + at + i, "a directory byte that is not printable");
        at += out->text_len;
    } else {
        NEED(28, "truncated assignment");
        out->target = dt_load_le32(p), out->table = dt_load_le32(p + 4);
        out->offset = dt_load_le64(p + 8), out->count = dt_load_le64(p + 16);
        out->slots = dt_load_le32(p + 24), at = 28;
        if (out->target > 1 || out->slots > DT_PSMSG_MAX_SLOTS ||
            out->count > DT_PSMSG_MAX_PAYLOAD / 4)
            return bad_msg(peer, H, "an assignment's target, slot count or size out of range");
        NEED(4 * out->count * (1 + (uint64_t)out->slots), "truncated values");
        out->values = p + at;
        at += 4 * out->count * (1 + (size_t)out->slots);
    }
    *used = at;
    return DT_OK;
}

/* ---- STEP, STEPS: a sparse cluster's global step, kept by ps 0 ---- */

static void encode_step(const dt_psmsg *m, const int64_t *ids_host, const float *values_host,
                        uint8_t *at)
{
    (void)ids_host, (void)values_host;
    if (m->type == DT_PSMSG_STEP)
        put32(at, m->target), put32(at + 4, m->n), put64(at + 8, (uint64_t)m->step);
    else
        put64(at, (uint64_t)m->clock), put32(at + 8, m->done), put32(at + 12, (uint32_t)m->rows);
}

static dt_status decode_step(const uint8_t *p, uint32_t size, const char *peer, dt_psmsg *out,
                             size_t *used)
{
    size_t at = 0;
    NEED(16, "truncated step request or count");
    if (out->type == DT_PSMSG_STEP) {
        out->target = dt_load_le32(p), out->n = dt_load_le32(p + 4);
        out->step = (int64_t)dt_load_le64(p + 8);
        if (out->target > DT_PSMSG_STEP_RETURN || out->n > 1000000 || out->step < 0)
            return bad_msg(peer, H, "a step request's kind above 3, steps above 10^6 or a "
                           "negative floor");
    } else {
        out->clock = (int64_t)dt_load_le64(p), out->done = dt_load_le32(p + 8);
        out->rows = dt_load_le32(p + 12);
        if (out->clock < 0 || out->done > 1)
            return bad_msg(peer, H, "a negative step count or a ready flag above 1");
    }
    *used = 16;
    return DT_OK;
}

/* ---- KEYED, READ_KEYS: a dynamic table's state, keyed, restored into a ps and read from it ---- */

static void encode_keyed(const dt_psmsg *m, const int64_t *ids_host, const float *values_host,
                         uint8_t *at)
{
    put32(at, m->table), put32(at + 4, m->target), put32(at + 8, m->n);
    if (m->type == DT_PSMSG_READ_KEYS) {
        put32(at + 12, m->slots), put64(at + 16, m->offset);
        return;
    }
    put32(at + 12, m->dim), put32(at + 16, m->slots), put64(at + 20, m->offset);
    at += KEYED_FIXED_BYTES;
    if (m->target == DT_PSMSG_KEYED_BLOOM) {
        if (m->n) /* a map without a filter gives no bytes, and no pointer */
            memcpy(at, m->text, m->n);
        return;
    }
    at = put_key_arrays(at, ids_host, m->times_host, m->last_host, m->n);
    put_floats(at, values_host, n_values(m));
}

static dt_status decode_keyed(const uint8_t *p, uint32_t size, const char *peer, dt_psmsg *out,
                              size_t *used)
{
    size_t at = 0;
    bool read = out->type == DT_PSMSG_READ_KEYS;
    NEED(read ? 24 : KEYED_FIXED_BYTES, "truncated table, kind and counts");
    out->table = dt_load_le32(p), out->target = dt_load_le32(p + 4), out->n = dt_load_le32(p + 8);
    if (out->target > DT_PSMSG_KEYED_BLOOM)
        return bad_msg(peer, H + 4, "an unknown kind of keyed state");
    if (read) {
        out->slots = dt_load_le32(p + 12), out->offset = dt_load_le64(p + 16);
        if (out->slots > 1 || out->n == 0 || out->n > DT_PSMSG_MAX_ROWS)
            return bad_msg(peer, H + 8, "a read of 0 or more than 2^24 keys, or slots not 0 or "
                           "1");
        *used = 24;
        return DT_OK;
    }
    out->dim = dt_load_le32(p + 12), out->slots = dt_load_le32(p + 16);
    out->offset = dt_load_le64(p + 20), at = KEYED_FIXED_BYTES;
    bool rows = out->target == DT_PSMSG_KEYED_ROWS;
    if (out->dim > DT_PSMSG_MAX_DIM || out->slots > DT_PSMSG_MAX_SLOTS ||
        (!rows && (out->dim || out->slots)) || (rows && out->n && !out->dim) ||
        (out->target != DT_PSMSG_KEYED_BLOOM && out->n > DT_PSMSG_MAX_ROWS))
        return bad_msg(peer, H + 8, "a count, width or slot count out of range for the kind");
    if (out->target == DT_PSMSG_KEYED_BLOOM) {
        NEED(out->n, "truncated filter bytes");
        out->text = (const char *)(p + at); /* n bytes (text_len is text's, up to 1 KiB) */
        *used = at + out->n;
        return DT_OK;
    }
    dt_status st = decode_key_arrays(p, size, peer, out, &at,
                                     out->target == DT_PSMSG_KEYED_COUNTING
                                         ? "a counted key seen 0 times"
                                         : NULL,
                                     true);
    if (st)
        return st;
    NEED(4ull * n_values(out), "truncated rows and slots");
    out->values = p + at;
    *used = at + 4ull * n_values(out);
    return DT_OK;
}

#undef NEED

/* Each type's pair, by type. encode writes m's payload from at, the values last (ids_host and
 * values_host in host order, as dt_psmsg_encode takes them), into the room payload_size gave
 * it. decode reads and checks a payload of size bytes at p (its header already checked) into
 * out, whose type is set, and gives the bytes its fields took in *used. finite_values: the
 * values must be numbers (pushed gradients, and the values that define or restore a shard): one
 * NaN would poison a shard for every worker. */
static const struct {
    void (*encode)(const dt_psmsg *m, const int64_t *ids_host, const float *values_host,
                   uint8_t *at);
    dt_status (*decode)(const uint8_t *p, uint32_t size, const char *peer, dt_psmsg *out,
                        size_t *used);
    bool finite_values;
} codecs[] = {
    [DT_PSMSG_PING] = {encode_empty, decode_empty, false},
    [DT_PSMSG_PONG] = {encode_empty, decode_empty, false},
    [DT_PSMSG_STOP] = {encode_empty, decode_empty, false},
    [DT_PSMSG_PULL_ROWS] = {encode_rows, decode_rows, false},
    [DT_PSMSG_ROWS] = {encode_rows, decode_rows, false},
    [DT_PSMSG_PUSH_ROWS] = {encode_rows, decode_rows, true},
    [DT_PSMSG_PULL_DENSE] = {encode_dense, decode_dense, false},
    [DT_PSMSG_DENSE] = {encode_dense, decode_dense, false},
    [DT_PSMSG_PUSH_DENSE] = {encode_dense, decode_dense, true},
    [DT_PSMSG_ACK] = {encode_reply, decode_reply, false},
    [DT_PSMSG_ERROR] = {encode_reply, decode_reply, false},
    [DT_PSMSG_TABLE] = {encode_define, decode_define, false},
    [DT_PSMSG_VAR] = {encode_define, decode_define, true},
    [DT_PSMSG_RUN] = {encode_control, decode_control, false},
    [DT_PSMSG_RESULT] = {encode_control, decode_control, false},
    [DT_PSMSG_RING] = {encode_control, decode_control, false},
    [DT_PSMSG_SAVE] = {encode_checkpoint, decode_checkpoint, false},
    [DT_PSMSG_ASSIGN] = {encode_checkpoint, decode_checkpoint, true},
    [DT_PSMSG_PULL_KEYS] = {encode_keys, decode_keys, false},
    [DT_PSMSG_KEYED] = {encode_keyed, decode_keyed, true},
    [DT_PSMSG_READ_KEYS] = {encode_keyed, decode_keyed, false},
    [DT_PSMSG_STEP] = {encode_step, decode_step, false},
    [DT_PSMSG_STEPS] = {encode_step, decode_step, false},
};
_Static_assert(sizeof codecs / sizeof codecs[0] == DT_PSMSG_STEPS + 1,
               "a codec for every message type");

dt_status dt_psmsg_encode(const dt_psmsg *m, const int64_t *ids_host, const float *values_host,
                          dt_psbuf *out)
{
    bool bad;
    uint64_t size = payload_size(m, &bad);
    if (bad || m->n > DT_PSMSG_MAX_ROWS || m->dim > DT_PSMSG_MAX_DIM ||
        (m->type == DT_PSMSG_RING && m->n > DT_PSMSG_MAX_RING) ||
        (m->type == DT_PSMSG_ASSIGN && (m->slots > DT_PSMSG_MAX_SLOTS || m->target > 1)) ||
        (m->type == DT_PSMSG_KEYED && (m->slots > DT_PSMSG_MAX_SLOTS || m->target > 2)) ||
        m->text_len > DT_PSMSG_MAX_TEXT || size > DT_PSMSG_MAX_PAYLOAD ||
        (m->type == DT_PSMSG_TABLE && m->text_len > DT_PSMSG_MAX_NAME))
        return dt_error(DT_ERR_INVALID, "ps message %s: sizes beyond the limits (%u rows of %u, "
                        "%llu values)", dt_psmsg_type_name(m->type), m->n, m->dim,
                        (unsigned long long)m->count);
    dt_status st = reserve(out, DT_PSMSG_HEADER_BYTES + (size_t)size);
    if (st)
        return st;
    uint8_t *h = out->data + out->len, *p = h + DT_PSMSG_HEADER_BYTES;
    codecs[m->type].encode(m, ids_host, values_host, p);
    memcpy(h, "DTPS", 4);
    h[4] = DT_PSMSG_VERSION & 0xff, h[5] = DT_PSMSG_VERSION >> 8;
    h[6] = (uint8_t)m->type, h[7] = (uint8_t)(m->type >> 8);
    put64(h + 8, m->request_id);
    put32(h + 16, (uint32_t)size);
    put32(h + 20, 0); /* the payload is authenticated by the transport (psmsg.h) */
    put32(h + 24, dt_crc32c(h, 24));
    out->len += DT_PSMSG_HEADER_BYTES + (size_t)size;
    return DT_OK;
}

dt_status dt_psmsg_peek(const uint8_t hdr[DT_PSMSG_HEADER_BYTES], const char *peer,
                        uint32_t *payload_bytes)
{
    if (memcmp(hdr, "DTPS", 4) != 0)
        return bad_msg(peer, 0, "not a dtrain ps message (bad magic)");
    if (dt_crc32c(hdr, 24) != dt_load_le32(hdr + 24))
        return bad_msg(peer, 24, "header checksum mismatch");
    if ((uint16_t)(hdr[4] | hdr[5] << 8) != DT_PSMSG_VERSION)
        return bad_msg(peer, 4, "unsupported version");
    *payload_bytes = dt_load_le32(hdr + 16);
    if (*payload_bytes > DT_PSMSG_MAX_PAYLOAD)
        return bad_msg(peer, 16, "a payload beyond the limit");
    return DT_OK;
}

dt_status dt_psmsg_decode(const uint8_t *buf, size_t n, const char *peer, dt_psmsg *out)
{
    memset(out, 0, sizeof *out);
    if (n < DT_PSMSG_HEADER_BYTES)
        return bad_msg(peer, n, "shorter than a header");
    uint32_t size;
    dt_status st = dt_psmsg_peek(buf, peer, &size);
    if (st)
        return st;
    uint16_t type = (uint16_t)(buf[6] | buf[7] << 8);
    if (type < DT_PSMSG_PING || type > DT_PSMSG_STEPS)
        return bad_msg(peer, 6, "unknown message type");
    out->type = (dt_psmsg_type)type;
    out->request_id = dt_load_le64(buf + 8);
    if ((uint64_t)size != (uint64_t)(n - DT_PSMSG_HEADER_BYTES))
        return bad_msg(peer, 16, "the payload size is not the message's");
    const uint8_t *p = buf + DT_PSMSG_HEADER_BYTES;
    if (dt_load_le32(buf + 20) != 0)
        return bad_msg(peer, 20, "reserved bytes are not zero");
    size_t at; /* within the payload: where the type's fields end */
    if ((st = codecs[type].decode(p, size, peer, out, &at)))
        return st;
    if (at != size)
        return bad_msg(peer, H + at, "bytes after the payload's fields");
    if (codecs[type].finite_values) {
        size_t nv = n_values(out);
        size_t i = first_not_finite(out->values, nv);
        if (i < nv)
            return bad_msg(peer, (size_t)(out->values - buf) + 4 * i, "a value that is not "
                           "finite");
    }
    return DT_OK;
}
