/* The fast path of tf.train.Example decoding (dt_example_parse_fast): records of the shape TF's
 * writers produce, decoded in a single pass straight into the row; the general decoder
 * (example_decode.c) takes every other record. See FAST_OK in example_int.h for the shape. */
#include "example_int.h"

#include <string.h>

/* A varint of at most 8 bytes (56 bits) starting at p < lim, where the record holds 8 readable
 * bytes from p on (rec_end - p >= 8). Gathers the 7-bit groups of one 8-byte load in three
 * shift-and-merge steps. 0 when it is longer than 8 bytes or ends at or past lim. */
static inline int fast_varint8(const uint8_t **pp, const uint8_t *lim, uint64_t *v)
{
    const uint8_t *p = *pp;
    uint64_t w;
    memcpy(&w, p, 8);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    uint64_t stops = ~w & 0x8080808080808080ull;
    if (!stops)
        return 0;
    int n = __builtin_ctzll(stops) / 8 + 1; /* bytes in the varint */
    if (n > lim - p)
        return 0;
    uint64_t x = n == 8 ? w : w & ((1ull << (8 * n)) - 1);
    x &= 0x7f7f7f7f7f7f7f7full;
    x = ((x & 0x7f007f007f007f00ull) >> 1) | (x & 0x007f007f007f007full);
    x = ((x & 0x3fff00003fff0000ull) >> 2) | (x & 0x00003fff00003fffull);
    x = ((x & 0x0fffffff00000000ull) >> 4) | (x & 0x000000000fffffffull);
    *v = x;
    *pp = p + n;
    return 1;
}

static inline int fast_varint(const uint8_t **pp, const uint8_t *lim, const uint8_t *rec_end,
                              uint64_t *v)
{
    if (rec_end - *pp >= 8)
        return fast_varint8(pp, lim, v);
    return get_varint(pp, lim, v) == 0;
}

/* Decodes one list [l, le) of kind into the n dense slots of a fixed-length feature, as
 * put_floats, put_int64 and put_bytes do. 1 when it holds exactly n values, else 0 (decline). */
static inline int fast_dense(const uint8_t *l, const uint8_t *le, const uint8_t *rec_end, int kind,
                             const dt_feature_spec *f, float *slots)
{
    size_t len, n = (size_t)f->length;
    float scale = f->scale, divisor = f->divisor;
    if (!fast_whole_field(&l, le, &len))
        return 0;
    if (kind == DT_FEATURE_FLOAT) {
        if (len != 4 * n)
            return 0;
        memcpy(slots, l, len);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
        return 0;
#endif
        if (scale != 1.0f || divisor != 0.0f)
            for (size_t i = 0; i < n; i++) {
                float x = slots[i] * scale;
                slots[i] = divisor != 0.0f ? x / divisor : x;
            }
        return 1;
    }
    if (kind == DT_FEATURE_BYTES) { /* one value of exactly n bytes */
        if (len != n)
            return 0;
        for (size_t i = 0; i < n; i++) {
            float x = (float)l[i] * scale;
            slots[i] = divisor != 0.0f ? x / divisor : x;
        }
        return 1;
    }
    size_t count = 0;
    while (l < le) {
        uint64_t u;
        if (count >= n || !fast_varint(&l, le, rec_end, &u))
            return 0;
        float x = (float)(int64_t)u * scale;
        slots[count++] = divisor != 0.0f ? x / divisor : x;
    }
    return count == n;
}

/* The label: a list of one float or one int64. 1 when it is that, else 0 (decline). */
static inline int fast_label(const uint8_t *l, const uint8_t *le, const uint8_t *rec_end, int kind,
                             float *label)
{
    size_t len;
    if (!fast_whole_field(&l, le, &len))
        return 0;
    if (kind == DT_FEATURE_FLOAT) {
        if (len != 4)
            return 0;
        uint32_t u = dt_load_le32(l);
        memcpy(label, &u, 4);
        return 1;
    }
    uint64_t u;
    if (kind != DT_FEATURE_INT64 || !fast_varint(&l, le, rec_end, &u) || l != le)
        return 0;
    *label = (float)(int64_t)u;
    return 1;
}

/* key[0, n) == k[0, n) for a spec key (NUL-padded to DT_EXAMPLE_KEY_CAP bytes): keys of up to 8
 * bytes, the usual case, compare as one 8-byte word when the record has the bytes to load. */
static inline int same_key(const char *key, const uint8_t *k, size_t n, const uint8_t *lim)
{
    if (n <= 8 && lim - k >= 8) {
        uint64_t a, b, mask = n == 8 ? ~0ull : (1ull << (8 * n)) - 1;
        memcpy(&a, key, 8);
        memcpy(&b, k, 8);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
        a = __builtin_bswap64(a), b = __builtin_bswap64(b);
#endif
        return ((a ^ b) & mask) == 0;
    }
    return memcmp(key, k, n) == 0;
}

/* One map entry of a record's Features at *pp, before end: entry = 0x0a len { 0x0a klen key
 * 0x12 vlen { tag llen list } }, the Feature one list. Its feature's spec index (or LABEL_IDX,
 * or -1 for a key the spec lacks) in *idx, its list's kind (DT_FEATURE_*) in *kind and the
 * list's bytes in [*list, *e); *pp moves past the entry. 0 when the bytes are not an entry of
 * that shape (decline). guess: the feature to try first, as records of one file list their keys
 * in one order. */
#define ALWAYS_INLINE inline __attribute__((always_inline))
static ALWAYS_INLINE int fast_entry(const dt_example_spec *spec, const uint8_t **pp,
                                    const uint8_t *end, int guess, int *idx, int *kind,
                                    const uint8_t **list, const uint8_t **e)
{
    const uint8_t *p = *pp, *k;
    size_t len, klen, vlen, llen;
    if (*p++ != 0x0a || !fast_len(&p, end, &len) || len > (size_t)(end - p))
        return 0;
    *e = p + len;
    if (len < 2 || *p++ != 0x0a || !fast_len(&p, *e, &klen) || klen > (size_t)(*e - p))
        return 0;
    k = p;
    p += klen;
    if (p >= *e || *p++ != 0x12 || !fast_len(&p, *e, &vlen) || vlen != (size_t)(*e - p) ||
        p >= *e)
        return 0;
    int tag = *p++;
    if ((tag != 0x12 && tag != 0x1a && tag != 0x0a) || !fast_len(&p, *e, &llen) ||
        llen != (size_t)(*e - p))
        return 0;
    *kind = tag >> 3;
    *list = p;
    *pp = *e;
    if (guess < spec->n_features && spec->key_len[guess] == klen &&
        same_key(spec->features[guess].key, k, klen, *e))
        *idx = guess;
    else
        *idx = lookup(spec, k, klen);
    return 1;
}

/* A fast path's feature: takes the list [l, e) of kind (DT_FEATURE_*) of spec feature idx from
 * a record ending at rec_end, or returns 0 to decline the record. */
typedef int (*fast_feature_fn)(void *ctx, int idx, int kind, const uint8_t *l, const uint8_t *e,
                               const uint8_t *rec_end);

/* Walks a record of the shape TF's writers give for a fast path: one Features message; the label
 * (once, one value) into *label; each spec feature (once) to feature(), in record order; keys the
 * spec lacks skipped. FAST_OK with *label_seen and *seen (a bit per feature met), or
 * FAST_DECLINE. Inlined into each caller with its feature function, so a feature costs no
 * indirect call. */
static ALWAYS_INLINE int walk_entries(const dt_example_spec *spec, const uint8_t *p,
                                      const uint8_t *end, fast_feature_fn feature, void *ctx,
                                      float *label, int *label_seen, uint64_t *seen)
{
    size_t len;
    if (!fast_whole_field(&p, end, &len))
        return FAST_DECLINE;
    int guess = 0;
    *label_seen = 0;
    *seen = 0;
    while (p < end) {
        const uint8_t *l, *e;
        int idx, kind;
        if (!fast_entry(spec, &p, end, guess, &idx, &kind, &l, &e))
            return FAST_DECLINE;
        if (idx < 0)
            continue;
        if (idx == LABEL_IDX) {
            if (*label_seen || !fast_label(l, e, end, kind, label))
                return FAST_DECLINE;
            *label_seen = 1;
            continue;
        }
        if ((*seen >> idx) & 1 || !feature(ctx, idx, kind, l, e, end))
            return FAST_DECLINE;
        *seen |= (uint64_t)1 << idx;
        guess = idx + 1;
    }
    return FAST_OK;
}

struct dense_ctx {
    const dt_example_spec *spec;
    float *dense;
};

static int dense_feature(void *ctx, int idx, int kind, const uint8_t *l, const uint8_t *e,
                         const uint8_t *rec_end)
{
    const struct dense_ctx *c = ctx;
    return fast_dense(l, e, rec_end, kind, &c->spec->features[idx],
                      c->dense + c->spec->dense_off[idx]);
}

int dt_ex_parse_fast(const dt_example_spec *spec, const uint8_t *p, const uint8_t *end,
                     float *dense, float *label)
{
    struct dense_ctx c = {spec, dense};
    uint64_t seen;
    int label_seen;
    if (walk_entries(spec, p, end, dense_feature, &c, label, &label_seen, &seen) != FAST_OK)
        return FAST_DECLINE;
    if (spec->label_key[0] && !label_seen)
        return FAST_DECLINE;
    for (int i = 0; i < spec->n_features; i++) {
        if ((seen >> i) & 1)
            continue;
        const dt_feature_spec *f = &spec->features[i];
        if (!f->has_default)
            return FAST_DECLINE;
        for (int j = 0; j < f->length; j++)
            dense[spec->dense_off[i] + j] = f->default_value;
    }
    return FAST_OK;
}

struct ctr_ctx {
    size_t F;
    int64_t *ids;
    float *vals;
};

/* The ids (spec feature 0): an int64_list of F ids; the values (1): a float_list of F. */
static int ctr_feature(void *ctx, int idx, int kind, const uint8_t *l, const uint8_t *e,
                       const uint8_t *rec_end)
{
    const struct ctr_ctx *c = ctx;
    size_t n;
    if (idx > 1 || !fast_whole_field(&l, e, &n))
        return 0;
    if (idx == 0) {
        size_t count = 0;
        if (kind != DT_FEATURE_INT64)
            return 0;
        for (uint64_t u; l < e; c->ids[count++] = (int64_t)u)
            if (count == c->F || !fast_varint(&l, e, rec_end, &u))
                return 0;
        return count == c->F;
    }
    if (kind != DT_FEATURE_FLOAT || n != 4 * c->F)
        return 0;
    for (size_t f = 0; f < c->F; f++) {
        uint32_t u = dt_load_le32(l + 4 * f);
        memcpy(&c->vals[f], &u, 4);
    }
    return 1;
}

/* The entries of a CTR record of the DeepFM sample's form: the label, an int64_list of F ids
 * (into ids) and a float_list of F values (into vals), each list packed and once; other keys
 * skipped. FAST_DECLINE for any other shape, which the general decoder takes (and reports, if it
 * is an error). */
static int parse_ctr_entries(const dt_example_spec *spec, const uint8_t *p, const uint8_t *end,
                             float *label, int64_t *ids, float *vals)
{
    struct ctr_ctx c = {(size_t)spec->ctr_fields, ids, vals};
    uint64_t seen;
    int label_seen;
    if (walk_entries(spec, p, end, ctr_feature, &c, label, &label_seen, &seen) != FAST_OK)
        return FAST_DECLINE;
    return seen == 3 && (label_seen || !spec->label_key[0]) ? FAST_OK : FAST_DECLINE;
}

/* A CTR record of the sample's form, decoded as the general decoder leaves it before pairing: a
 * row of its F ids then its F values, which dt_ex_zip_ctr_fields pairs and checks as for the
 * general decoder. DT_END, appending nothing, for a record it does not take: any other shape, and
 * every record with an error, for the general decoder to report. */
static dt_status parse_ctr_fast(const dt_example_spec *spec, const uint8_t *data, size_t n_bytes,
                                dt_rowbuf *out)
{
    const dt_feature_spec *fi = &spec->features[0], *fv = &spec->features[1];
    size_t F = (size_t)spec->ctr_fields;
    if (n_bytes == 0 || fi->scale != 1.0f || fi->divisor != 0.0f || fv->scale != 1.0f ||
        fv->divisor != 0.0f)
        return DT_END;
    dt_status st = dt_rowbuf_reserve_sparse(out, 2 * F);
    if (st)
        return st;
    float label = 0.0f;
    if (parse_ctr_entries(spec, data, data + n_bytes, &label, out->sp_ids + out->nnz,
                          out->sp_vals + out->nnz + F) != FAST_OK)
        return DT_END;
    if ((st = dt_rowbuf_add_row(out, NULL)))
        return st;
    dt_rowbuf_set_label(out, label);
    dt_rowbuf_commit_sparse(out, 2 * F);
    const size_t counts[2] = {F, F};
    if (dt_ex_zip_ctr_fields(spec, label, counts, out) != DT_OK) {
        dt_rowbuf_drop_last(out);
        return DT_END;
    }
    return DT_OK;
}

dt_status dt_example_parse_fast(const dt_example_spec *spec, const uint8_t *data, size_t n_bytes,
                                dt_rowbuf *out)
{
    if (spec->ready && spec->ctr_fast && out->n_dense == 0)
        return parse_ctr_fast(spec, data, n_bytes, out);
    if (!spec->ready || !spec->fast || out->n_dense != spec->n_dense || n_bytes == 0)
        return DT_END;
    float *dense, label = 0.0f;
    dt_status st = dt_rowbuf_add_row(out, &dense);
    if (st)
        return st;
    if (dt_ex_parse_fast(spec, data, data + n_bytes, dense, &label) == FAST_OK) {
        dt_rowbuf_set_label(out, label);
        return DT_OK;
    }
    dt_rowbuf_drop_last(out);
    return DT_END;
}
