/* tf.train.Example's general decoder: records into rows by a spec (see
 * include/dtrain/example.h), with the walk over a record's map entries and the value sinks that
 * the JSON listing (example_encode.c) and the reader (example_read.c) decode through. Records of
 * TF's writers' shape take the fast path first (example_fast.c); this decoder takes the rest and
 * writes every error message.
 *
 * Decoding runs in two passes over the record, both in place. The first walks Example, Features
 * and the map entries, and for each entry whose key the spec names remembers where the entry is
 * (a later entry with the same key replaces it, as protobuf's map parsing does); values of other
 * keys are never looked at. The second pass decodes the remembered entries in spec order, so the
 * dense slots and the sparse entries come out in the spec's order whatever order the record uses.
 *
 * A Feature is a oneof of three lists, and protobuf merges repeated occurrences of a message
 * field: a Feature (or a map entry's value given twice) holding float_list twice holds the two
 * lists' values concatenated, while a different list appearing later replaces the earlier kind.
 * dt_ex_analyze_feature finds the final kind and where its trailing run of occurrences starts
 * before dt_ex_decode_feature decodes only those, so nothing has to be undone. From TF's writers
 * that run is one list, decoded directly; the general walk is there for the rest of what
 * protobuf allows.
 *
 * Speed: the one-byte cases of tags, varints and lengths are inlined with the error paths out of
 * line, keys are found through the spec's hash table (lengths compared before bytes), packed
 * floats are copied with memcpy, and nothing is allocated but the rows' own growth. On 100k
 * CTR-like records (39 one-value features and a label, 683 bytes each) this decodes about 4.5
 * times as fast as protobuf-c's generated unpacker walking into the same rows.
 *
 * Every read is bounds-checked against the end of the enclosing message, lengths are compared
 * before any pointer is formed from them, and varints are limited to 10 bytes. */
#include "example_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/hash.h"

static dt_status bad(const rec *r, const uint8_t *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), cold, noinline));

static dt_status bad(const rec *r, const uint8_t *at, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dt_error(DT_ERR_FORMAT, "byte %zu: %s", (size_t)(at - r->base), msg);
}

/* ---- wire format ---- */

/* The helpers below have an inline fast path for the common one-byte case and an out-of-line
 * path that handles the rest and writes the error messages, so the decoding loops stay small
 * (get_varint, which the fast path also uses, is in example_int.h). */

static dt_status varint_slow(const rec *r, const uint8_t **pp, const uint8_t *end,
                             const char *where, uint64_t *v)
{
    const uint8_t *at = *pp;
    int e = get_varint(pp, end, v);
    if (e == 1)
        return bad(r, at, "varint runs past the end of the %s", where);
    if (e == 2)
        return bad(r, at, "varint longer than 10 bytes or beyond 64 bits");
    return DT_OK;
}

static inline dt_status varint(const rec *r, const uint8_t **pp, const uint8_t *end,
                               const char *where, uint64_t *v)
{
    const uint8_t *p = *pp;
    if (__builtin_expect(p < end && *p < 0x80, 1)) {
        *v = *p;
        *pp = p + 1;
        return DT_OK;
    }
    return varint_slow(r, pp, end, where, v);
}

/* Reads a field's tag. Field 0, groups (wire types 3 and 4) and wire types 6 and 7 are errors. */
static dt_status tag_slow(const rec *r, const uint8_t **pp, const uint8_t *end,
                          const char *where, uint32_t *field, int *wt)
{
    const uint8_t *at = *pp;
    uint64_t t;
    dt_status st = varint_slow(r, pp, end, where, &t);
    if (st)
        return st;
    if (t >> 32)
        return bad(r, at, "field tag %llu out of range in the %s", (unsigned long long)t, where);
    *field = (uint32_t)(t >> 3);
    *wt = (int)(t & 7);
    if (*field == 0)
        return bad(r, at, "field number 0 in the %s", where);
    if (*wt == 3 || *wt == 4)
        return bad(r, at, "field %u of the %s is a group (wire type %d): groups are not supported",
                   *field, where, *wt);
    if (*wt > 5)
        return bad(r, at, "field %u of the %s has invalid wire type %d", *field, where, *wt);
    return DT_OK;
}

static inline dt_status tag(const rec *r, const uint8_t **pp, const uint8_t *end,
                            const char *where, uint32_t *field, int *wt)
{
    const uint8_t *p = *pp;
    /* One byte, field >= 1, wire type 0, 1, 2 or 5 (mask 0x27). */
    if (__builtin_expect(p < end && *p < 0x80 && *p >= 8 && ((0x27 >> (*p & 7)) & 1), 1)) {
        *field = *p >> 3;
        *wt = *p & 7;
        *pp = p + 1;
        return DT_OK;
    }
    return tag_slow(r, pp, end, where, field, wt);
}

/* Reads a length and returns the payload [*q, *q + *len), checked to end within end. */
static dt_status payload_slow(const rec *r, const uint8_t **pp, const uint8_t *end,
                              const char *where, const uint8_t **q, size_t *len)
{
    const uint8_t *at = *pp;
    uint64_t v;
    dt_status st = varint_slow(r, pp, end, where, &v);
    if (st)
        return st;
    size_t room = (size_t)(end - *pp);
    if (v > room) {
        size_t rec_room = r->n - (size_t)(*pp - r->base);
        if (v > rec_room)
            return bad(r, at, "length %llu runs past the end of the record (%zu bytes)",
                       (unsigned long long)v, r->n);
        return bad(r, at, "length %llu runs past the end of the %s (at byte %zu)",
                   (unsigned long long)v, where, (size_t)(end - r->base));
    }
    *q = *pp;
    *len = (size_t)v;
    *pp += v;
    return DT_OK;
}

static inline dt_status payload(const rec *r, const uint8_t **pp, const uint8_t *end,
                                const char *where, const uint8_t **q, size_t *len)
{
    const uint8_t *p = *pp;
    if (__builtin_expect(p < end && *p < 0x80 && *p <= (size_t)(end - p - 1), 1)) {
        *q = p + 1;
        *len = *p;
        *pp = p + 1 + *p;
        return DT_OK;
    }
    return payload_slow(r, pp, end, where, q, len);
}

static dt_status skip(const rec *r, const uint8_t **pp, const uint8_t *end, const char *where,
                      int wt)
{
    uint64_t v;
    const uint8_t *q;
    size_t len;
    switch (wt) {
    case WT_VARINT:
        return varint(r, pp, end, where, &v);
    case WT_FIXED64:
    case WT_FIXED32: {
        size_t k = wt == WT_FIXED64 ? 8 : 4;
        if ((size_t)(end - *pp) < k)
            return bad(r, *pp, "a %zu-byte value runs past the end of the %s", k, where);
        *pp += k;
        return DT_OK;
    }
    default: /* WT_LEN; tag() has rejected the rest */
        return payload(r, pp, end, where, &q, &len);
    }
}

static dt_status wrong_type(const rec *r, const uint8_t *at, const char *what, int wt, int want)
{
    return bad(r, at, "%s has wire type %d, expected %d", what, wt, want);
}

/* Moves *pp to the next field number `want` of [*pp, end), skipping every other field, and reads
 * its length-delimited payload into [*f, *f + *len). DT_END when no such field is left. `where`
 * names the message, `what` the field, for errors. */
static dt_status next_len_field(const rec *r, const uint8_t **pp, const uint8_t *end,
                                const char *where, uint32_t want, const char *what,
                                const uint8_t **f, size_t *len)
{
    while (*pp < end) {
        const uint8_t *at = *pp;
        uint32_t field;
        int wt;
        dt_status st = tag(r, pp, end, where, &field, &wt);
        if (st)
            return st;
        if (field != want) {
            if ((st = skip(r, pp, end, where, wt)))
                return st;
            continue;
        }
        if (wt != WT_LEN)
            return wrong_type(r, at, what, wt, WT_LEN);
        return payload(r, pp, end, where, f, len);
    }
    return DT_END;
}

/* ---- value sinks: where decode_list puts the values it decodes (the types: example_int.h) ---- */

/* v * scale, then divided by the divisor when there is one: the division rounds once, as
 * x / 255 does in TensorFlow's preprocessing. */
static inline float scaled(const sink *s, float v)
{
    float x = v * s->scale;
    return s->divisor != 0.0f ? x / s->divisor : x;
}

static void sb_sep(sink *s)
{
    if (s->count)
        dt_ex_sb_put(s->sb, ", ", 2);
}

static dt_status put_floats(sink *s, const uint8_t *p, size_t n)
{
    switch (s->mode) {
    case SINK_DENSE:
        if (s->count < s->length) {
            size_t fit = s->length - s->count < n ? s->length - s->count : n;
            float *d = s->slots + s->count;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            memcpy(d, p, fit * sizeof(float));
#else
            for (size_t i = 0; i < fit; i++) {
                uint32_t u = dt_load_le32(p + 4 * i);
                memcpy(d + i, &u, 4);
            }
#endif
            if (s->scale != 1.0f || s->divisor != 0.0f)
                for (size_t i = 0; i < fit; i++)
                    d[i] = scaled(s, d[i]);
        }
        s->count += n;
        return DT_OK;
    case SINK_READ:
        s->count += n;
        return read_floats(s->rd, p, n);
    default:
        for (size_t i = 0; i < n; i++, s->count++) {
            uint32_t u = dt_load_le32(p + 4 * i);
            float f;
            memcpy(&f, &u, 4);
            if (s->mode == SINK_SPARSE) {
                dt_status st = dt_rowbuf_add_sparse(s->rows, (int64_t)s->count, scaled(s, f));
                if (st)
                    return st;
            } else if (s->mode == SINK_LABEL) {
                if (s->count == 0)
                    s->label = f;
            } else if (s->mode == SINK_COLUMN) {
                if (s->count == 0)
                    s->number = f;
            } else {
                sb_sep(s);
                dt_ex_json_float(s->sb, f);
            }
        }
        return DT_OK;
    }
}

static dt_status put_int64(sink *s, int64_t v)
{
    switch (s->mode) {
    case SINK_DENSE:
        if (s->count < s->length)
            s->slots[s->count] = scaled(s, (float)v);
        break;
    case SINK_SPARSE: {
        dt_status st = dt_rowbuf_add_sparse(s->rows, v, scaled(s, 1.0f));
        if (st)
            return st;
        break;
    }
    case SINK_LABEL:
        if (s->count == 0)
            s->label = (float)v;
        break;
    case SINK_COLUMN:
        if (s->count == 0)
            s->number = (double)v, s->integer = v;
        break;
    case SINK_READ: {
        dt_status st = read_int64(s->rd, v);
        if (st)
            return st;
        break;
    }
    default: {
        char t[32];
        int k = snprintf(t, sizeof t, "%lld", (long long)v);
        sb_sep(s);
        dt_ex_sb_put(s->sb, t, (size_t)k);
    }
    }
    s->count++;
    return DT_OK;
}

static void put_bytes(sink *s, const uint8_t *p, size_t n)
{
    if (s->mode == SINK_DENSE) {
        if (s->count == 0) {
            s->bytes_len = n;
            if (n == s->length)
                for (size_t i = 0; i < n; i++)
                    s->slots[i] = scaled(s, (float)p[i]);
        }
    } else if (s->mode == SINK_JSON) {
        sb_sep(s);
        dt_ex_json_base64(s->sb, p, n);
    } else if (s->mode == SINK_COLUMN && s->count == 0) {
        s->bytes = p;
        s->bytes_len = n;
    } else if (s->mode == SINK_READ) {
        read_bytes(s->rd, p, n);
    }
    s->count++;
}

/* ---- Feature decoding ---- */

const char *const dt_ex_list_name[4] = {"", "bytes_list", "float_list", "int64_list"};

/* Decodes one list message of the given kind (a Feature's oneof field number) into s. */
static dt_status decode_list(const rec *r, const uint8_t *q, const uint8_t *e, int kind, sink *s)
{
    const char *where = dt_ex_list_name[kind];
    while (q < e) {
        const uint8_t *at = q;
        uint32_t field;
        int wt;
        dt_status st = tag(r, &q, e, where, &field, &wt);
        if (st)
            return st;
        if (field != 1) {
            if ((st = skip(r, &q, e, where, wt)))
                return st;
            continue;
        }
        const uint8_t *v;
        size_t len;
        if (kind == DT_FEATURE_FLOAT) {
            if (wt == WT_LEN) { /* packed */
                if ((st = payload(r, &q, e, where, &v, &len)))
                    return st;
                if (len % 4)
                    return bad(r, at, "packed float_list of %zu bytes, not a multiple of 4", len);
                if ((st = put_floats(s, v, len / 4)))
                    return st;
            } else if (wt == WT_FIXED32) {
                if (e - q < 4)
                    return bad(r, q, "a 4-byte float runs past the end of the float_list");
                if ((st = put_floats(s, q, 1)))
                    return st;
                q += 4;
            } else {
                return wrong_type(r, at, "a float_list value", wt, WT_FIXED32);
            }
        } else if (kind == DT_FEATURE_INT64) {
            uint64_t u;
            if (wt == WT_LEN) { /* packed */
                if ((st = payload(r, &q, e, where, &v, &len)))
                    return st;
                const uint8_t *ve = v + len;
                while (v < ve) {
                    if ((st = varint(r, &v, ve, "packed int64_list", &u)) ||
                        (st = put_int64(s, (int64_t)u)))
                        return st;
                }
            } else if (wt == WT_VARINT) {
                if ((st = varint(r, &q, e, where, &u)) || (st = put_int64(s, (int64_t)u)))
                    return st;
            } else {
                return wrong_type(r, at, "an int64_list value", wt, WT_VARINT);
            }
        } else {
            if (wt != WT_LEN)
                return wrong_type(r, at, "a bytes_list value", wt, WT_LEN);
            if ((st = payload(r, &q, e, where, &v, &len)))
                return st;
            put_bytes(s, v, len);
        }
    }
    return DT_OK;
}

/* Reads the fields of one Feature payload [f, fe) into fl. */
static dt_status scan_feature(const rec *r, const uint8_t *f, const uint8_t *fe, feature_loc *fl,
                              int *run_count)
{
    while (f < fe) {
        const uint8_t *fat = f, *l;
        uint32_t field;
        int wt;
        size_t llen;
        dt_status st = tag(r, &f, fe, "Feature", &field, &wt);
        if (st)
            return st;
        if (field < 1 || field > 3) {
            if ((st = skip(r, &f, fe, "Feature", wt)))
                return st;
            continue;
        }
        if (wt != WT_LEN)
            return bad(r, fat, "the Feature's %s has wire type %d, expected 2",
                       dt_ex_list_name[field], wt);
        if ((st = payload(r, &f, fe, "Feature", &l, &llen)))
            return st;
        if ((int)field != fl->kind) {
            fl->kind = (int)field;
            fl->run_start = fat;
            *run_count = 0;
        }
        ++*run_count;
        fl->l0 = l;
        fl->l1 = l + llen;
    }
    return DT_OK;
}

/* Calls scan_feature (fl) or decodes the final kind's lists from run_start on (s) for every
 * value field of the entry, in order: protobuf merges a message field given twice. */
static dt_status each_value(const rec *r, const entry_loc *el, feature_loc *fl, int *run_count,
                            sink *s)
{
    const uint8_t *q = el->e0, *e = el->e1, *f;
    size_t len;
    dt_status st;
    while ((st = next_len_field(r, &q, e, "map entry", 2, "a map entry's value", &f, &len)) ==
           DT_OK) {
        if (fl) {
            if ((st = scan_feature(r, f, f + len, fl, run_count)))
                return st;
            continue;
        }
        const uint8_t *fe = f + len;
        /* Decode the lists of the final kind that lie in the trailing run. */
        while (f < fe) {
            const uint8_t *fat = f, *l;
            size_t llen;
            uint32_t field;
            int wt;
            if ((st = tag(r, &f, fe, "Feature", &field, &wt)))
                return st;
            if (field < 1 || field > 3 || wt != WT_LEN) {
                if ((st = skip(r, &f, fe, "Feature", wt)))
                    return st;
                continue;
            }
            if ((st = payload(r, &f, fe, "Feature", &l, &llen)))
                return st;
            if ((int)field == s->kind && fat >= s->run_start &&
                (st = decode_list(r, l, l + llen, s->kind, s)))
                return st;
        }
    }
    return st == DT_END ? DT_OK : st;
}

dt_status dt_ex_analyze_feature(const rec *r, const entry_loc *el, feature_loc *fl)
{
    int run_count = 0;
    dt_status st;
    memset(fl, 0, sizeof *fl);
    if (el->v0)
        st = scan_feature(r, el->v0, el->v1, fl, &run_count);
    else
        st = each_value(r, el, fl, &run_count, NULL);
    fl->single = run_count == 1;
    return st;
}

/* Decodes the values of an analyzed feature into s. */
dt_status dt_ex_decode_feature(const rec *r, const entry_loc *el, const feature_loc *fl,
                               sink *s)
{
    if (!fl->kind)
        return DT_OK;
    if (fl->single)
        return decode_list(r, fl->l0, fl->l1, fl->kind, s);
    s->kind = fl->kind;
    s->run_start = fl->run_start;
    return each_value(r, el, NULL, NULL, s);
}

/* ---- decoding into rows ---- */

/* Reads a map entry's payload [q, qe): its key (the last, if given twice; NULL if none) and its
 * value's payload if it has exactly one value field. */
static dt_status read_entry(const rec *r, const uint8_t *q, const uint8_t *qe, const uint8_t **k,
                            size_t *klen, entry_loc *el)
{
    int n_values = 0;
    *k = NULL;
    *klen = 0;
    el->e0 = q;
    el->e1 = qe;
    el->v0 = el->v1 = NULL;
    while (q < qe) {
        const uint8_t *at = q, *v;
        size_t vlen;
        uint32_t field;
        int wt;
        dt_status st = tag(r, &q, qe, "map entry", &field, &wt);
        if (st)
            return st;
        if (field == 1 || field == 2) {
            if (wt != WT_LEN)
                return wrong_type(r, at, field == 1 ? "a map entry's key" : "a map entry's value",
                                  wt, WT_LEN);
            if ((st = payload(r, &q, qe, "map entry", &v, &vlen)))
                return st;
            if (field == 1) {
                *k = v;
                *klen = vlen;
            } else {
                el->v0 = v;
                el->v1 = v + vlen;
                n_values++;
            }
        } else if ((st = skip(r, &q, qe, "map entry", wt))) {
            return st;
        }
    }
    if (n_values != 1)
        el->v0 = el->v1 = NULL;
    return DT_OK;
}

dt_status dt_ex_each_entry(const rec *r, entry_fn fn, void *ctx)
{
    const uint8_t *p = r->base, *end = r->base + r->n, *fs, *q, *k;
    size_t len, klen;
    dt_status st;
    while ((st = next_len_field(r, &p, end, "Example", 1, "Example.features", &fs, &len)) ==
           DT_OK) {
        const uint8_t *fe = fs + len;
        while ((st = next_len_field(r, &fs, fe, "Features", 1, "a Features map entry", &q,
                                    &len)) == DT_OK) {
            entry_loc el;
            if ((st = read_entry(r, q, q + len, &k, &klen, &el)) ||
                (st = fn(ctx, r, k, klen, &el)))
                return st;
        }
        if (st != DT_END)
            return st;
    }
    return st == DT_END ? DT_OK : st;
}

/* The first pass: the last entry of each key the spec names (a later entry of a key replaces an
 * earlier one, as protobuf's map parsing does). Values are not looked at. */
typedef struct {
    const dt_example_spec *spec;
    entry_loc entry[DT_EXAMPLE_MAX_FEATURES + 1];
    uint64_t seen;
    int label_seen;
} wanted;

static dt_status want_entry(void *ctx, const rec *r, const uint8_t *k, size_t klen,
                            const entry_loc *el)
{
    (void)r;
    wanted *w = ctx;
    int idx = k ? lookup(w->spec, k, klen) : -1;
    if (idx < 0)
        return DT_OK;
    w->entry[idx] = *el;
    if (idx == LABEL_IDX)
        w->label_seen = 1;
    else
        w->seen |= (uint64_t)1 << idx;
    return DT_OK;
}

static dt_status decode_fixed(const rec *r, const dt_feature_spec *f, const entry_loc *el,
                              float *slots)
{
    sink s = {.mode = SINK_DENSE, .slots = slots, .length = (size_t)f->length, .scale = f->scale,
              .divisor = f->divisor};
    feature_loc fl;
    dt_status st = dt_ex_analyze_feature(r, el, &fl);
    if (st || (st = dt_ex_decode_feature(r, el, &fl, &s)))
        return st;
    if (fl.kind == DT_FEATURE_BYTES) {
        if (s.count != 1)
            return bad(r, el->e0, "feature '%s' has %zu bytes values, expected one of %d bytes",
                       f->key, s.count, f->length);
        if (s.bytes_len != (size_t)f->length)
            return bad(r, el->e0, "feature '%s' has a bytes value of %zu bytes, expected %d",
                       f->key, s.bytes_len, f->length);
        return DT_OK;
    }
    if (s.count != (size_t)f->length)
        return bad(r, el->e0, "feature '%s' has %zu values, expected %d", f->key, s.count,
                   f->length);
    return DT_OK;
}

static dt_status decode_sparse(const rec *r, const dt_feature_spec *f, const entry_loc *el,
                               dt_rowbuf *out)
{
    feature_loc fl;
    dt_status st = dt_ex_analyze_feature(r, el, &fl);
    if (st)
        return st;
    /* The kind is known before any entry is added. */
    if (fl.kind == DT_FEATURE_BYTES)
        return bad(r, el->e0, "feature '%s' is a bytes_list: a variable-length feature needs an "
                   "int64_list or a float_list", f->key);
    sink s = {.mode = SINK_SPARSE, .rows = out, .scale = f->scale, .divisor = f->divisor};
    return dt_ex_decode_feature(r, el, &fl, &s);
}

static dt_status decode_label(const rec *r, const dt_example_spec *spec, const entry_loc *el,
                              float *label)
{
    feature_loc fl;
    dt_status st = dt_ex_analyze_feature(r, el, &fl);
    if (st)
        return st;
    if (fl.kind == DT_FEATURE_BYTES)
        return bad(r, el->e0, "label '%s' is a bytes_list, expected one int64 or float",
                   spec->label_key);
    sink s = {.mode = SINK_LABEL};
    if ((st = dt_ex_decode_feature(r, el, &fl, &s)))
        return st;
    if (s.count != 1)
        return bad(r, el->e0, "label '%s' has %zu values, expected 1", spec->label_key, s.count);
    *label = s.label;
    return DT_OK;
}

/* One column's value: *missing when the record lacks it or its list is empty. */
static dt_status column_value(const rec *r, const dt_feature_spec *f, const entry_loc *el,
                              bool have, sink *s, bool *missing)
{
    memset(s, 0, sizeof *s);
    s->mode = SINK_COLUMN;
    *missing = !have;
    if (!have)
        return DT_OK;
    feature_loc fl;
    dt_status st = dt_ex_analyze_feature(r, el, &fl);
    if (st || (st = dt_ex_decode_feature(r, el, &fl, s)))
        return st;
    if (s->count > 1)
        return bad(r, el->e0, "feature '%s' has %zu values: a column holds one", f->key,
                   s->count);
    s->kind = fl.kind;
    *missing = s->count == 0;
    return DT_OK;
}

/* A record of CTR columns into one row of its fields (see ctr_columns in example.h). */
static dt_status parse_ctr_columns(const dt_example_spec *spec, const rec *r, const wanted *w,
                                   float label, dt_rowbuf *out)
{
    if (label != 0.0f && label != 1.0f)
        return dt_error(DT_ERR_FORMAT, "feature '%s': label %g is not 0 or 1", spec->label_key,
                        (double)label);
    dt_status st = dt_rowbuf_add_row(out, NULL);
    if (st)
        return st;
    dt_rowbuf_set_label(out, label);
    int64_t buckets = spec->ctr_hash_buckets - spec->ctr_numeric;
    for (int i = 0; st == DT_OK && i < spec->n_features; i++) {
        const dt_feature_spec *f = &spec->features[i];
        sink s;
        bool missing;
        if ((st = column_value(r, f, &w->entry[i], (w->seen >> i) & 1, &s, &missing)))
            break;
        if (i < spec->ctr_numeric) {
            if (!missing && s.kind == DT_FEATURE_BYTES) {
                st = bad(r, w->entry[i].e0, "feature '%s' is a bytes_list: a numeric column "
                         "holds a float or an int64", f->key);
                break;
            }
            double x = missing ? 0.0 : s.number;
            float v = (float)(spec->ctr_log1p ? log1p(x > 0.0 ? x : 0.0) : x);
            if (!isfinite(v)) {
                st = dt_error(DT_ERR_FORMAT, "feature '%s': value %g", f->key, (double)v);
                break;
            }
            st = dt_rowbuf_add_sparse(out, i, v);
            continue;
        }
        int j = i - spec->ctr_numeric;
        char digits[24];
        const void *tok = "";
        size_t n = 0;
        if (!missing && s.kind == DT_FEATURE_FLOAT) {
            st = bad(r, w->entry[i].e0, "feature '%s' is a float_list: a categorical column "
                     "holds an int64 or bytes", f->key);
            break;
        } else if (!missing && s.kind == DT_FEATURE_INT64) {
            n = (size_t)snprintf(digits, sizeof digits, "%lld", (long long)s.integer);
            tok = digits;
        } else if (!missing) {
            tok = s.bytes, n = s.bytes_len;
        }
        st = dt_rowbuf_add_sparse(out, spec->ctr_numeric + dt_hash_bucket(j, tok, n, buckets),
                                  1.0f);
    }
    if (st)
        dt_rowbuf_drop_last(out);
    return st;
}

/* A CTR record's ids must be an int64_list and its values a float_list: the sparse decoder
 * would take either kind, and read positions for ids or ones for values. */
static dt_status check_ctr_kind(const rec *r, const dt_example_spec *spec, int i,
                                const entry_loc *el)
{
    feature_loc fl;
    dt_status st = dt_ex_analyze_feature(r, el, &fl);
    int want = i == 0 ? DT_FEATURE_INT64 : DT_FEATURE_FLOAT;
    if (st || fl.kind == 0 || fl.kind == want)
        return st;
    return bad(r, el->e0, "feature '%s' is %s %s: CTR %s are %s", spec->features[i].key,
               fl.kind == DT_FEATURE_INT64 ? "an" : "a", dt_ex_list_name[fl.kind],
               i == 0 ? "ids" : "values", i == 0 ? "an int64_list" : "a float_list");
}

dt_status dt_ex_zip_ctr_fields(const dt_example_spec *spec, float label, const size_t counts[2],
                               dt_rowbuf *out)
{
    const char *ids_key = spec->features[0].key, *vals_key = spec->features[1].key;
    size_t F = (size_t)spec->ctr_fields, base = out->nnz - counts[0] - counts[1];
    if (label != 0.0f && label != 1.0f)
        return dt_error(DT_ERR_FORMAT, "feature '%s': label %g is not 0 or 1", spec->label_key,
                        (double)label);
    if (counts[0] == 0)
        return dt_error(DT_ERR_FORMAT, "feature '%s': no ids (missing or empty)", ids_key);
    if (counts[0] != counts[1])
        return dt_error(DT_ERR_FORMAT, "features '%s' and '%s': %zu ids but %zu values",
                        ids_key, vals_key, counts[0], counts[1]);
    if (counts[0] != F)
        return dt_error(DT_ERR_FORMAT, "feature '%s': %zu fields, the model takes %zu "
                        "(--field-size)", ids_key, counts[0], F);
    int64_t *ids = out->sp_ids + base;
    float *vals = out->sp_vals + base;
    for (size_t f = 0; f < F; f++) {
        int64_t id = ids[f];
        float v = vals[F + f];
        if (id < 0)
            return dt_error(DT_ERR_FORMAT, "feature '%s': field %zu: id %lld is negative",
                            ids_key, f + 1, (long long)id);
        if (!isfinite(v))
            return dt_error(DT_ERR_FORMAT, "feature '%s': field %zu: value %g", vals_key, f + 1,
                            (double)v);
        if (spec->ctr_hash_buckets > 0) {
            char digits[24];
            int n = snprintf(digits, sizeof digits, "%lld", (long long)id);
            id = dt_hash_bucket((int)f, digits, (size_t)n, spec->ctr_hash_buckets);
        } else if (spec->ctr_max_id > 0 && id >= spec->ctr_max_id) {
            return dt_error(DT_ERR_FORMAT, "feature '%s': field %zu: id %lld is outside the "
                            "table's %lld rows (--feature-size, or --hash-buckets)", ids_key,
                            f + 1, (long long)id, (long long)spec->ctr_max_id);
        }
        ids[f] = id;
        vals[f] = v;
    }
    out->nnz = base + F;
    out->sp_row[out->n] = (int64_t)out->nnz;
    return DT_OK;
}

dt_status dt_example_parse(const dt_example_spec *spec, const uint8_t *data, size_t n_bytes,
                           dt_rowbuf *out)
{
    static const uint8_t empty[1];
    if (!spec->ready)
        return dt_error(DT_ERR_INVALID, "example spec used before dt_example_spec_finalize");
    if (out->n_dense != spec->n_dense)
        return dt_error(DT_ERR_INVALID, "rows of %d dense values cannot hold examples of %d",
                        out->n_dense, spec->n_dense);
    if (spec->fast || spec->ctr_fast) {
        dt_status st = dt_example_parse_fast(spec, data, n_bytes, out);
        if (st != DT_END)
            return st;
    }
    rec r = {n_bytes ? data : empty, n_bytes};
    wanted w;
    w.spec = spec;
    w.seen = 0;
    w.label_seen = 0;
    dt_status st = dt_ex_each_entry(&r, want_entry, &w);
    if (st)
        return st;
    float label = 0.0f;
    if (spec->label_key[0]) {
        if (!w.label_seen)
            return dt_error(DT_ERR_FORMAT, "feature '%s' missing", spec->label_key);
        if ((st = decode_label(&r, spec, &w.entry[LABEL_IDX], &label)))
            return st;
    }
    if (spec->ctr_columns)
        return parse_ctr_columns(spec, &r, &w, label, out);
    float *dense;
    if ((st = dt_rowbuf_add_row(out, &dense)))
        return st;
    dt_rowbuf_set_label(out, label);
    size_t before = out->nnz, counts[2] = {0, 0};
    for (int i = 0; i < spec->n_features; i++) {
        const dt_feature_spec *f = &spec->features[i];
        int have = (int)((w.seen >> i) & 1);
        if (f->length > 0) {
            float *slots = dense + spec->dense_off[i];
            if (have) {
                st = decode_fixed(&r, f, &w.entry[i], slots);
            } else if (f->has_default) {
                for (int k = 0; k < f->length; k++)
                    slots[k] = f->default_value;
            } else {
                st = dt_error(DT_ERR_FORMAT, "feature '%s' missing", f->key);
            }
        } else if (have) {
            if (spec->ctr_fields > 0 && (st = check_ctr_kind(&r, spec, i, &w.entry[i])))
                goto fail;
            st = decode_sparse(&r, f, &w.entry[i], out);
        }
        if (st)
            goto fail;
        counts[i < 2 ? i : 1] = out->nnz - before;
        before = out->nnz;
    }
    if (spec->ctr_fields > 0 && (st = dt_ex_zip_ctr_fields(spec, label, counts, out)))
        goto fail;
    return DT_OK;
fail:
    dt_rowbuf_drop_last(out);
    return st;
}
