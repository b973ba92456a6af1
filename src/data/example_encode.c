/* tf.train.Example encoding (dt_example_encode) and the JSON listing of a record
 * (dt_example_to_json), with the JSON text of values that the general decoder's JSON sink
 * writes. */
#include "example_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- encoding ---- */

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80)
        v >>= 7, n++;
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Bytes of the packed varints of an int64 feature's values. */
static uint64_t int64_body(const dt_feature_value *f)
{
    uint64_t body = 0;
    for (size_t i = 0; i < f->n; i++)
        body += varint_len((uint64_t)f->ints[i]);
    return body;
}

/* Bytes of the list message inside a Feature (its `value` field, packed for numbers). */
static uint64_t list_len(const dt_feature_value *f)
{
    uint64_t body;
    switch (f->type) {
    case DT_FEATURE_FLOAT:
        if (f->n == 0)
            return 0;
        body = 4 * (uint64_t)f->n;
        return 1 + varint_len(body) + body;
    case DT_FEATURE_INT64:
        if (f->n == 0)
            return 0;
        body = int64_body(f);
        return 1 + varint_len(body) + body;
    default: /* one bytes value */
        return 1 + varint_len(f->n) + f->n;
    }
}

static uint64_t entry_len(uint64_t ll, size_t klen)
{
    uint64_t feature = 1 + varint_len(ll) + ll;
    return 1 + varint_len(klen) + klen + 1 + varint_len(feature) + feature;
}

dt_status dt_example_encode(const dt_feature_value *f, int n_features, uint8_t **buf,
                            size_t *n_bytes, size_t *cap)
{
    /* Protobuf's own limit on a message; also keeps every sum below far from overflow. */
    const uint64_t limit = (uint64_t)1 << 31;
    uint64_t features = 0;
    for (int i = 0; i < n_features; i++) {
        if (!f[i].key)
            return dt_error(DT_ERR_INVALID, "example encode: feature %d has no key", i);
        if (f[i].type != DT_FEATURE_FLOAT && f[i].type != DT_FEATURE_INT64 &&
            f[i].type != DT_FEATURE_BYTES)
            return dt_error(DT_ERR_INVALID, "example encode: feature '%s' has unknown type %d",
                            f[i].key, f[i].type);
        const void *vals = f[i].type == DT_FEATURE_FLOAT   ? (const void *)f[i].floats
                           : f[i].type == DT_FEATURE_INT64 ? (const void *)f[i].ints
                                                           : (const void *)f[i].bytes;
        if (f[i].n > 0 && !vals)
            return dt_error(DT_ERR_INVALID, "example encode: feature '%s' has %zu values at NULL",
                            f[i].key, f[i].n);
        size_t klen = strlen(f[i].key);
        if (f[i].n > limit || klen > limit)
            return dt_error(DT_ERR_INVALID, "example encode: feature '%s' is above 2 GiB",
                            f[i].key);
        uint64_t e = entry_len(list_len(&f[i]), klen);
        features += 1 + varint_len(e) + e;
        if (features > limit)
            return dt_error(DT_ERR_INVALID, "example encode: the example is above 2 GiB");
    }
    uint64_t total = 1 + varint_len(features) + features;
    if (total > *cap) {
        size_t want = *cap ? *cap : 256;
        while (want < total)
            want *= 2;
        uint8_t *nb = realloc(*buf, want);
        if (!nb)
            return dt_error(DT_ERR_NOMEM, "example encode: no memory for %llu bytes",
                            (unsigned long long)total);
        *buf = nb;
        *cap = want;
    }
    uint8_t *p = *buf;
    *p++ = 0x0a; /* Example.features */
    p = put_varint(p, features);
    for (int i = 0; i < n_features; i++) {
        size_t klen = strlen(f[i].key);
        uint64_t ll = list_len(&f[i]);
        uint64_t e = entry_len(ll, klen);
        *p++ = 0x0a; /* Features.feature: a map entry */
        p = put_varint(p, e);
        *p++ = 0x0a; /* key */
        p = put_varint(p, klen);
        memcpy(p, f[i].key, klen), p += klen;
        *p++ = 0x12; /* value: a Feature */
        p = put_varint(p, 1 + varint_len(ll) + ll);
        *p++ = (uint8_t)(f[i].type << 3 | WT_LEN); /* the oneof field: its number is the type */
        p = put_varint(p, ll);
        if (f[i].type == DT_FEATURE_FLOAT && f[i].n) {
            *p++ = 0x0a;
            p = put_varint(p, 4 * (uint64_t)f[i].n);
            for (size_t k = 0; k < f[i].n; k++) {
                uint32_t u;
                memcpy(&u, &f[i].floats[k], 4);
                dt_store_le32(p, u);
                p += 4;
            }
        } else if (f[i].type == DT_FEATURE_INT64 && f[i].n) {
            *p++ = 0x0a;
            p = put_varint(p, int64_body(&f[i]));
            for (size_t k = 0; k < f[i].n; k++)
                p = put_varint(p, (uint64_t)f[i].ints[k]);
        } else if (f[i].type == DT_FEATURE_BYTES) {
            *p++ = 0x0a;
            p = put_varint(p, f[i].n);
            if (f[i].n)
                memcpy(p, f[i].bytes, f[i].n), p += f[i].n;
        }
    }
    *n_bytes = (size_t)(p - *buf);
    return DT_OK;
}

/* ---- JSON listing ---- */

static void sb_grow(sbuf *b, size_t more)
{
    if (b->oom || b->n + more + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more + 1)
        cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->oom = 1;
        return;
    }
    b->s = s;
    b->cap = cap;
}

void dt_ex_sb_put(sbuf *b, const char *s, size_t n)
{
    sb_grow(b, n);
    if (b->oom)
        return;
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { dt_ex_sb_put(b, s, strlen(s)); }

void dt_ex_json_float(sbuf *b, float f)
{
    char t[48];
    if (isnan(f)) {
        sb_puts(b, "\"nan\"");
        return;
    }
    if (isinf(f)) {
        sb_puts(b, f > 0 ? "\"inf\"" : "\"-inf\"");
        return;
    }
    int k = snprintf(t, sizeof t - 3, "%.9g", (double)f);
    /* A float always shows as one (1.0, not 1), so floats and int64s differ in the listing. */
    if (!strpbrk(t, ".e"))
        memcpy(t + k, ".0", 3), k += 2;
    dt_ex_sb_put(b, t, (size_t)k);
}

void dt_ex_json_base64(sbuf *b, const uint8_t *p, size_t n)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    sb_grow(b, (n + 2) / 3 * 4 + 2);
    if (b->oom)
        return;
    char *o = b->s + b->n;
    *o++ = '"';
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = al[v >> 18], *o++ = al[(v >> 12) & 63], *o++ = al[(v >> 6) & 63], *o++ = al[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *o++ = al[v >> 18], *o++ = al[(v >> 12) & 63], *o++ = '=', *o++ = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        *o++ = al[v >> 18], *o++ = al[(v >> 12) & 63], *o++ = al[(v >> 6) & 63], *o++ = '=';
    }
    *o++ = '"';
    b->n = (size_t)(o - b->s);
    b->s[b->n] = '\0';
}

/* Length of the well-formed UTF-8 sequence at p (< end), or 0 if it is not one. */
static size_t utf8_seq(const uint8_t *p, const uint8_t *end)
{
    size_t room = (size_t)(end - p);
    uint8_t c = p[0];
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        return room >= 2 && (p[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        if (room < 3 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80)
            return 0;
        if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f)) /* overlong, surrogate */
            return 0;
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (room < 4 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80 || (p[3] & 0xc0) != 0x80)
            return 0;
        if ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] > 0x8f)) /* overlong, > U+10FFFF */
            return 0;
        return 4;
    }
    return 0;
}

/* A JSON string of the bytes; bytes that are not UTF-8 become U+FFFD, as a key must be text. */
static void json_string(sbuf *b, const uint8_t *p, size_t n)
{
    const uint8_t *end = p + n;
    dt_ex_sb_put(b, "\"", 1);
    while (p < end) {
        size_t k = utf8_seq(p, end);
        char esc[8];
        if (k == 0) {
            sb_puts(b, "\\ufffd");
            p++;
        } else if (*p == '"' || *p == '\\') {
            esc[0] = '\\', esc[1] = (char)*p;
            dt_ex_sb_put(b, esc, 2);
            p++;
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            dt_ex_sb_put(b, esc, 6);
            p++;
        } else {
            dt_ex_sb_put(b, (const char *)p, k);
            p += k;
        }
    }
    dt_ex_sb_put(b, "\"", 1);
}

/* Lists one entry: "key": [values]. */
static dt_status json_entry(void *ctx, const rec *r, const uint8_t *k, size_t klen,
                            const entry_loc *el)
{
    sbuf *b = ctx;
    if (b->n > 1)
        dt_ex_sb_put(b, ", ", 2);
    json_string(b, k ? k : r->base, klen);
    dt_ex_sb_put(b, ": [", 3);
    feature_loc fl;
    sink s = {.mode = SINK_JSON, .sb = b};
    dt_status st = dt_ex_analyze_feature(r, el, &fl);
    if (st || (st = dt_ex_decode_feature(r, el, &fl, &s)))
        return st;
    dt_ex_sb_put(b, "]", 1);
    return DT_OK;
}

dt_status dt_example_to_json(const uint8_t *data, size_t n_bytes, char **out_text)
{
    static const uint8_t empty[1];
    *out_text = NULL;
    rec r = {n_bytes ? data : empty, n_bytes};
    sbuf b = {0};
    dt_ex_sb_put(&b, "{", 1);
    dt_status st = dt_ex_each_entry(&r, json_entry, &b);
    if (st)
        goto fail;
    dt_ex_sb_put(&b, "}", 1);
    if (b.oom) {
        st = dt_error(DT_ERR_NOMEM, "no memory for the JSON of an example");
        goto fail;
    }
    *out_text = b.s;
    return DT_OK;
fail:
    free(b.s);
    return st;
}
