/* The transform of one raw row by a feature spec (features.h): every column the model uses, in
 * the spec's order of computation, from the raw values a reader found, into one dt_rowbuf row.
 *
 * A column's raw values are read the way TensorFlow reads a feature of that kind: a categorical
 * column takes strings (an integer through its decimal digits, as tf.strings.as_string writes
 * it), a numeric column numbers; a text cell is either, and a column with a separator splits it
 * into several values first (an empty piece is no value). Each categorical column's ids go to
 * the scratch with, for each id, the place of the raw value it came from, so that a weighted
 * column pairs every id with its own weight even when out-of-vocabulary values were dropped. */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/grow.h"
#include "dtrain/example.h"
#include "features_int.h"
#include "fingerprint.h"

/* One column's output for the row under way. */
typedef struct {
    int64_t *ids;
    float *weights;
    uint32_t *from;   /* the place of the raw value each id came from */
    size_t n, cap;
    float *num;       /* numeric: the raw values before the normalizer */
    int n_num;
} col_out;

struct dt_feature_scratch {
    col_out *cols;    /* (n_cols) */
    int n_cols;
    dt_bytes_ref *tok; /* a column's values as tokens */
    size_t tok_cap;
    char *digits;     /* integers as decimal text: 24 bytes per value */
    size_t digits_cap;
    uint64_t *cross_f; /* a cross's per-key values, then their product */
    size_t cross_cap;
    /* Delimited text: each field of the line, and quoted fields unescaped. */
    dt_raw_value *raw;
    dt_bytes_ref *cells;
    size_t cells_cap;
    char *unq;
    size_t unq_cap;
    /* tf.Example records: the reader, and each key's byte strings as references. */
    dt_example_reader *reader;
    dt_bytes_ref *refs;
    size_t refs_cap;
};

static dt_status grow(void **p, size_t *cap, size_t want, size_t elem)
{
    if (want <= *cap)
        return DT_OK;
    size_t n = *cap ? *cap : 16;
    while (n < want)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q)
        return dt_error(DT_ERR_NOMEM, "no memory to transform a row");
    *p = q;
    *cap = n;
    return DT_OK;
}

dt_status dt_feature_scratch_new(const dt_features *f, dt_feature_scratch **out)
{
    dt_feature_scratch *s = calloc(1, sizeof *s);
    if (s) {
        s->n_cols = f->n_cols;
        s->cols = calloc((size_t)f->n_cols, sizeof *s->cols);
        s->raw = calloc((size_t)(f->n_keys ? f->n_keys : 1), sizeof *s->raw);
    }
    for (int i = 0; s && s->cols && i < f->n_cols; i++)
        if (f->cols[i].type == DT_FCOL_NUMERIC &&
            !(s->cols[i].num = malloc((size_t)f->cols[i].shape * sizeof(float))))
            break;
    bool ok = s && s->cols && s->raw;
    for (int i = 0; ok && i < f->n_cols; i++)
        ok = f->cols[i].type != DT_FCOL_NUMERIC || s->cols[i].num;
    if (!ok) {
        dt_feature_scratch_free(s);
        *out = NULL;
        return dt_error(DT_ERR_NOMEM, "no memory to transform rows");
    }
    *out = s;
    return DT_OK;
}

void dt_feature_scratch_free(dt_feature_scratch *s)
{
    if (!s)
        return;
    for (int i = 0; s->cols && i < s->n_cols; i++) {
        free(s->cols[i].ids);
        free(s->cols[i].weights);
        free(s->cols[i].from);
        free(s->cols[i].num);
    }
    free(s->cols);
    free(s->tok);
    free(s->digits);
    free(s->cross_f);
    free(s->raw);
    free(s->cells);
    free(s->unq);
    dt_example_reader_free(s->reader);
    free(s->refs);
    free(s);
}

/* ---- Errors ---- */

static dt_status col_error(const dt_features *f, const dt_feature_column *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static dt_status col_error(const dt_features *f, const dt_feature_column *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int key = c->key >= 0 ? c->key : c->weight_key;
    if (key >= 0)
        return dt_error(DT_ERR_FORMAT, "column '%s' (key '%s'): %s", c->name, f->keys[key], msg);
    return dt_error(DT_ERR_FORMAT, "column '%s': %s", c->name, msg);
}

/* A value quoted in a message: at most 60 bytes of it. */
#define QUOTE(p, n) (int)((n) > 60 ? 60 : (n)), (p)

/* ---- Raw values as tokens and numbers ---- */

/* The raw value's tokens into s->tok: a text cell split at the separator, byte strings as they
 * are, integers as their decimal digits. */
static dt_status tokens_of(const dt_features *f, const dt_feature_column *c, const dt_raw_value *v,
                           dt_feature_scratch *s, size_t *n)
{
    *n = 0;
    switch (v->kind) {
    case DT_RAW_MISSING: return DT_OK;
    case DT_RAW_TEXT: {
        const char *p = v->bytes[0].data, *end = p + v->bytes[0].len;
        if (p == end)
            return DT_OK;
        if (!c->separator) {
            if (grow((void **)&s->tok, &s->tok_cap, 1, sizeof *s->tok))
                return DT_ERR_NOMEM;
            s->tok[(*n)++] = v->bytes[0];
            return DT_OK;
        }
        while (p <= end) {
            const char *q = memchr(p, c->separator, (size_t)(end - p));
            const char *e = q ? q : end;
            if (e > p) {
                if (grow((void **)&s->tok, &s->tok_cap, *n + 1, sizeof *s->tok))
                    return DT_ERR_NOMEM;
                s->tok[(*n)++] = (dt_bytes_ref){p, (size_t)(e - p)};
            }
            p = e + 1;
        }
        return DT_OK;
    }
    case DT_RAW_BYTES:
        if (grow((void **)&s->tok, &s->tok_cap, v->n, sizeof *s->tok))
            return DT_ERR_NOMEM;
        memcpy(s->tok, v->bytes, v->n * sizeof *s->tok);
        *n = v->n;
        return DT_OK;
    case DT_RAW_INT64:
        if (grow((void **)&s->tok, &s->tok_cap, v->n, sizeof *s->tok) ||
            grow((void **)&s->digits, &s->digits_cap, v->n * 24, 1))
            return DT_ERR_NOMEM;
        for (size_t i = 0; i < v->n; i++) {
            char *d = s->digits + 24 * i;
            int len = snprintf(d, 24, "%" PRId64, v->ints[i]);
            s->tok[i] = (dt_bytes_ref){d, (size_t)len};
        }
        *n = v->n;
        return DT_OK;
    case DT_RAW_FLOAT:
        return col_error(f, c, "a float feature: a categorical column reads strings or integers");
    }
    return DT_OK;
}

/* Spaces and tabs around a token dropped (and a line end's '\r'). */
static void trim(const char **p, size_t *n)
{
    while (*n > 0 && (**p == ' ' || **p == '\t'))
        (*p)++, (*n)--;
    while (*n > 0 && ((*p)[*n - 1] == ' ' || (*p)[*n - 1] == '\t' || (*p)[*n - 1] == '\r'))
        (*n)--;
}

/* A token without the spaces around it, NUL-terminated in buf (cap bytes); false when it is
 * empty or too long to be a number. */
static bool trimmed_token(const char *p, size_t n, char *buf, size_t cap)
{
    trim(&p, &n);
    if (n == 0 || n >= cap)
        return false;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return true;
}

/* How many values a raw value holds: none when it is missing, an empty text cell included. */
static size_t value_count(const dt_raw_value *v)
{
    if (v->kind == DT_RAW_MISSING || (v->kind == DT_RAW_TEXT && v->bytes[0].len == 0))
        return 0;
    return v->kind == DT_RAW_TEXT ? 1 : v->n;
}

/* A token as a finite number; false if it is not one. Values are kept as floats, so a number
 * beyond a float's range ("1e39") is not one either (it would become inf). */
static bool parse_number(const char *p, size_t n, double *out)
{
    char buf[64], *end;
    if (!trimmed_token(p, n, buf, sizeof buf))
        return false;
    double v = strtod(buf, &end);
    if (*end != '\0' || !isfinite(v) || fabs(v) > FLT_MAX)
        return false;
    *out = v;
    return true;
}

static bool parse_integer(const char *p, size_t n, int64_t *out)
{
    char buf[32], *end;
    if (!trimmed_token(p, n, buf, sizeof buf))
        return false;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (*end != '\0' || errno == ERANGE)
        return false;
    *out = v;
    return true;
}

/* ---- Columns ---- */

static dt_status add_id(col_out *o, int64_t id, float w, uint32_t from)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 16;
        if (!dt_grow_together((dt_grow_item[]){{&o->ids, sizeof *o->ids},
                                               {&o->weights, sizeof *o->weights},
                                               {&o->from, sizeof *o->from}}, 3, cap))
            return dt_error(DT_ERR_NOMEM, "no memory to transform a row");
        o->cap = cap;
    }
    o->ids[o->n] = id;
    o->weights[o->n] = w;
    o->from[o->n] = from;
    o->n++;
    return DT_OK;
}

dt_status dt_feature_tokens(const dt_features *f, const dt_feature_column *c,
                            const dt_raw_value *v, dt_feature_scratch *s,
                            const dt_bytes_ref **tokens, size_t *n)
{
    dt_status st = tokens_of(f, c, v, s, n);
    *tokens = s->tok;
    return st;
}

static dt_status numeric_column(const dt_features *f, const dt_feature_column *c,
                                const dt_raw_value *v, col_out *o, float *dense)
{
    size_t n = value_count(v);
    if (n == 0 && !c->has_default)
        return col_error(f, c, "the value is missing and the column has no default_value");
    if (n != 0 && n != (size_t)c->shape)
        return col_error(f, c, "%zu values, the column's shape is %d", n, c->shape);
    for (int i = 0; i < c->shape; i++) {
        double x = c->default_value;
        if (n == 0) {
            /* the default, below */
        } else if (v->kind == DT_RAW_TEXT) {
            if (!parse_number(v->bytes[0].data, v->bytes[0].len, &x))
                return col_error(f, c, "'%.*s' is not a number", QUOTE(v->bytes[0].data,
                                                                      v->bytes[0].len));
        } else if (v->kind == DT_RAW_INT64) {
            x = (double)v->ints[i];
        } else if (v->kind == DT_RAW_FLOAT) {
            x = v->floats[i];
            if (!isfinite(x))
                return col_error(f, c, "value %d is not finite", i);
        } else {
            return col_error(f, c, "a bytes feature: a numeric column reads numbers");
        }
        o->num[i] = (float)x;
        switch (c->norm) {
        case DT_NORM_NONE: break;
        case DT_NORM_LOG1P: x = log1p(x > 0 ? x : 0); break;
        case DT_NORM_STANDARDIZE:
        case DT_NORM_FIXED: x = (x - c->mean) / c->std; break;
        }
        dense[c->dense_off + i] = (float)x;
    }
    o->n_num = c->shape;
    return DT_OK;
}

dt_status dt_feature_numbers(const dt_features *f, const dt_feature_column *c,
                             const dt_raw_value *v, dt_feature_scratch *s, const float **values,
                             int *n)
{
    col_out *o = &s->cols[c - f->cols];
    *n = 0;
    *values = o->num;
    if (value_count(v) == 0)
        return DT_OK; /* a missing value adds nothing to the statistics */
    dt_feature_column raw = *c;
    raw.norm = DT_NORM_NONE;
    raw.dense_off = 0;
    /* numeric_column writes the values to dense too: without a normalizer they are the ones
     * it keeps in o->num, so o->num serves as the row. */
    dt_status st = numeric_column(f, &raw, v, o, o->num);
    if (st == DT_OK)
        *n = c->shape;
    return st;
}

/* The bucket of x among ascending boundaries: how many of them are <= x. */
static int64_t bucket_of(const double *b, int n, double x)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (b[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A token's id in a vocabulary column: its index, or an OOV bucket, or the default (-1: none). */
static int64_t vocab_id(const dt_feature_column *c, const dt_bytes_ref *t)
{
    uint64_t fp = dt_fingerprint64(t->data, t->len);
    int64_t i = dt_vocab_find_hashed(&c->vocab, t->data, t->len, fp);
    if (i >= 0)
        return i;
    if (c->num_oov > 0)
        return c->vocab.n + (int64_t)(fp % (uint64_t)c->num_oov);
    return c->cat_default;
}

/* An identity column's id: itself within [0, num_buckets), else the default (-1: none), or an
 * error without one. */
static dt_status identity_id(const dt_features *f, const dt_feature_column *c, int64_t *id)
{
    if (*id >= 0 && *id < c->num_buckets)
        return DT_OK;
    if (!c->has_cat_default)
        return col_error(f, c, "id %" PRId64 " is outside [0, %" PRId64 ")", *id,
                         c->num_buckets);
    *id = c->cat_default;
    return DT_OK;
}

/* A dynamic column's key of a value hashed to 64 bits: the hash less its top bit, since keys are
 * 0 .. 2^63 - 1 (keymap.h). */
static int64_t key_of_hash(uint64_t h) { return (int64_t)(h & (UINT64_MAX >> 1)); }

/* A dynamic identity column's key: the id itself, which may be any non-negative int64. */
static dt_status identity_key(const dt_features *f, const dt_feature_column *c, int64_t id)
{
    return id >= 0 ? DT_OK : col_error(f, c, "id %" PRId64 " is negative: keys are 0 .. 2^63 - 1", id);
}

static dt_status categorical_column(const dt_features *f, const dt_feature_column *c,
                                    const dt_raw_value *v, dt_feature_scratch *s, col_out *o)
{
    size_t n;
    dt_status st;
    if (c->type == DT_FCOL_IDENTITY && c->dynamic && v->kind == DT_RAW_INT64) {
        for (size_t i = 0; i < v->n; i++)
            if ((st = identity_key(f, c, v->ints[i])) ||
                (st = add_id(o, v->ints[i], 1, (uint32_t)i)))
                return st;
        return DT_OK;
    }
    if (c->type == DT_FCOL_IDENTITY) {
        if (v->kind == DT_RAW_INT64) {
            for (size_t i = 0; i < v->n; i++) {
                int64_t id = v->ints[i];
                if ((st = identity_id(f, c, &id)) ||
                    (id >= 0 && (st = add_id(o, id, 1, (uint32_t)i))))
                    return st;
            }
            return DT_OK;
        }
    }
    if ((st = tokens_of(f, c, v, s, &n)))
        return st;
    for (size_t i = 0; i < n; i++) {
        const dt_bytes_ref *t = &s->tok[i];
        int64_t id = -1;
        switch (c->type) {
        case DT_FCOL_HASH:
            id = c->dynamic ? key_of_hash(dt_fingerprint64(t->data, t->len))
                            : (int64_t)dt_fingerprint_bucket(t->data, t->len,
                                                             (uint64_t)c->hash_bucket_size);
            break;
        case DT_FCOL_VOCAB_LIST:
        case DT_FCOL_VOCAB_FILE:
        case DT_FCOL_VOCAB:
            id = vocab_id(c, t);
            break;
        case DT_FCOL_IDENTITY:
            if (!parse_integer(t->data, t->len, &id))
                return col_error(f, c, "'%.*s' is not an integer id", QUOTE(t->data, t->len));
            if ((st = c->dynamic ? identity_key(f, c, id) : identity_id(f, c, &id)))
                return st;
            break;
        default:
            break;
        }
        if (id >= 0 && (st = add_id(o, id, 1, (uint32_t)i)))
            return st;
    }
    return DT_OK;
}

/* A crossed column: every combination of its keys' values, each folded from hash_key with
 * FingerprintCat64 in key order (a raw string's Fingerprint64, a raw integer or a column's id
 * as it is), modulo hash_bucket_size: sparse_cross_op.cc's HashCrosser. */
static dt_status crossed_column(const dt_features *f, const dt_feature_column *c,
                                const dt_raw_value *values, dt_feature_scratch *s, col_out *o)
{
    size_t count[DT_FEATURE_MAX_CROSS], start[DT_FEATURE_MAX_CROSS], total = 0, combos = 1;
    dt_status st;
    for (int k = 0; k < c->n_cross; k++) {
        const dt_cross_ref *r = &c->cross[k];
        start[k] = total;
        if (r->column >= 0) {
            const col_out *src = &s->cols[r->column];
            count[k] = src->n;
            if ((st = grow((void **)&s->cross_f, &s->cross_cap, total + src->n, sizeof(uint64_t))))
                return st;
            for (size_t i = 0; i < src->n; i++)
                s->cross_f[total + i] = (uint64_t)src->ids[i];
        } else {
            const dt_raw_value *v = &values[r->key];
            if (v->kind == DT_RAW_FLOAT)
                return col_error(f, c, "key '%s' holds floats: cross a bucketized column of it",
                                 f->keys[r->key]);
            size_t n = 0;
            if (v->kind == DT_RAW_INT64) {
                n = v->n;
                if ((st = grow((void **)&s->cross_f, &s->cross_cap, total + n, sizeof(uint64_t))))
                    return st;
                for (size_t i = 0; i < n; i++)
                    s->cross_f[total + i] = (uint64_t)v->ints[i];
            } else {
                /* A raw key is crossed as TF crosses a string feature: whole, unsplit. */
                dt_feature_column whole = *c;
                whole.separator = 0;
                if ((st = tokens_of(f, &whole, v, s, &n)) ||
                    (st = grow((void **)&s->cross_f, &s->cross_cap, total + n, sizeof(uint64_t))))
                    return st;
                for (size_t i = 0; i < n; i++)
                    s->cross_f[total + i] = dt_fingerprint64(s->tok[i].data, s->tok[i].len);
            }
            count[k] = n;
        }
        total += count[k];
        combos *= count[k];
        if (combos == 0)
            return DT_OK;
        if (combos > (1u << 20))
            return col_error(f, c, "the cross has more than %u combinations", 1u << 20);
    }
    size_t idx[DT_FEATURE_MAX_CROSS] = {0};
    for (size_t n = 0; n < combos; n++) {
        uint64_t h = c->hash_key;
        for (int k = 0; k < c->n_cross; k++)
            h = dt_fingerprint_cat64(h, s->cross_f[start[k] + idx[k]]);
        int64_t id = c->dynamic ? key_of_hash(h) : (int64_t)(h % (uint64_t)c->hash_bucket_size);
        if ((st = add_id(o, id, 1, (uint32_t)n)))
            return st;
        /* The next combination, the last key fastest (TF's order). */
        for (int k = c->n_cross - 1; k >= 0; k--) {
            if (++idx[k] < count[k])
                break;
            idx[k] = 0;
        }
    }
    return DT_OK;
}

/* The weights of a weighted column: one number per raw value of its categorical column. */
static dt_status weighted_column(const dt_features *f, const dt_feature_column *c,
                                 const dt_raw_value *values, dt_feature_scratch *s, col_out *o)
{
    const dt_feature_column *cat = &f->cols[c->categorical];
    const col_out *src = &s->cols[c->categorical];
    const dt_raw_value *w = &values[c->weight_key];
    size_t n_cat = 0, n_w = 0;
    dt_status st;
    if (cat->type == DT_FCOL_BUCKETIZED)
        n_cat = 1;
    else if (values[cat->key].kind == DT_RAW_INT64 || values[cat->key].kind == DT_RAW_BYTES)
        n_cat = values[cat->key].n;
    else if ((st = tokens_of(f, cat, &values[cat->key], s, &n_cat)))
        return st;
    /* The weights split as the ids do. */
    const dt_bytes_ref *wt = NULL;
    if (w->kind == DT_RAW_TEXT) {
        dt_feature_column split = *c;
        split.separator = cat->separator;
        if ((st = tokens_of(f, &split, w, s, &n_w)))
            return st;
        wt = s->tok;
    } else if (w->kind == DT_RAW_FLOAT || w->kind == DT_RAW_INT64) {
        n_w = w->n;
    } else if (w->kind == DT_RAW_BYTES) {
        return col_error(f, c, "weights are bytes: a weight_key holds numbers");
    }
    if (n_w != n_cat)
        return col_error(f, c, "%zu weights for %zu values of '%s'", n_w, n_cat, cat->name);
    for (size_t i = 0; i < src->n; i++) {
        uint32_t k = src->from[i];
        double x;
        if (wt) {
            if (!parse_number(wt[k].data, wt[k].len, &x))
                return col_error(f, c, "weight '%.*s' is not a number", QUOTE(wt[k].data,
                                                                             wt[k].len));
        } else {
            x = w->kind == DT_RAW_FLOAT ? (double)w->floats[k] : (double)w->ints[k];
            if (!isfinite(x))
                return col_error(f, c, "weight %u is not finite", k);
        }
        if ((st = add_id(o, src->ids[i], (float)x, k)))
            return st;
    }
    return DT_OK;
}

static dt_status compute_column(const dt_features *f, int i, const dt_raw_value *values,
                                dt_feature_scratch *s, float *dense)
{
    const dt_feature_column *c = &f->cols[i];
    col_out *o = &s->cols[i];
    o->n = 0;
    switch (c->type) {
    case DT_FCOL_NUMERIC: return numeric_column(f, c, &values[c->key], o, dense);
    case DT_FCOL_BUCKETIZED: {
        const col_out *src = &s->cols[c->source];
        return add_id(o, bucket_of(c->boundaries, c->n_boundaries, src->num[0]), 1, 0);
    }
    case DT_FCOL_CROSSED: return crossed_column(f, c, values, s, o);
    case DT_FCOL_WEIGHTED: return weighted_column(f, c, values, s, o);
    default: return categorical_column(f, c, &values[c->key], s, o);
    }
}

static dt_status label_of(const dt_features *f, const dt_raw_value *v, float *out)
{
    const char *key = f->keys[f->label_key];
    if (value_count(v) != 1)
        return dt_error(DT_ERR_FORMAT, "label '%s': expected one value, got %zu", key,
                        value_count(v));
    if (f->has_label_vocab) {
        if (v->kind == DT_RAW_FLOAT)
            return dt_error(DT_ERR_FORMAT, "label '%s': a float, but the label has a vocabulary",
                            key);
        char digits[24];
        dt_bytes_ref t = v->kind == DT_RAW_INT64
                             ? (dt_bytes_ref){digits, (size_t)snprintf(digits, sizeof digits,
                                                                       "%" PRId64, v->ints[0])}
                             : v->bytes[0];
        /* Text cells are compared without the spaces around them (", >50K" in census files). */
        if (v->kind == DT_RAW_TEXT)
            trim(&t.data, &t.len);
        int64_t i = dt_vocab_find(&f->label_vocab, t.data, t.len);
        if (i < 0)
            return dt_error(DT_ERR_FORMAT, "label '%s': '%.*s' is not in its vocabulary", key,
                            QUOTE(t.data, t.len));
        *out = (float)i;
        return DT_OK;
    }
    double x;
    if (v->kind == DT_RAW_TEXT) {
        if (!parse_number(v->bytes[0].data, v->bytes[0].len, &x))
            return dt_error(DT_ERR_FORMAT, "label '%s': '%.*s' is not a number", key,
                            QUOTE(v->bytes[0].data, v->bytes[0].len));
    } else if (v->kind == DT_RAW_INT64) {
        x = (double)v->ints[0];
    } else if (v->kind == DT_RAW_FLOAT) {
        x = v->floats[0];
    } else {
        return dt_error(DT_ERR_FORMAT, "label '%s': bytes, but the label has no vocabulary", key);
    }
    if (!isfinite(x))
        return dt_error(DT_ERR_FORMAT, "label '%s': not finite", key);
    *out = (float)x;
    return DT_OK;
}

dt_status dt_features_transform(const dt_features *f, dt_feature_scratch *s,
                                const dt_raw_value *values, dt_rowbuf *out)
{
    if (out->n_dense != f->n_dense)
        return dt_error(DT_ERR_INVALID, "rows of %d dense values for a spec of %d", out->n_dense,
                        f->n_dense);
    float label = 0;
    bool has_label = f->label_key >= 0 &&
                     !(f->unlabeled && value_count(&values[f->label_key]) == 0);
    dt_status st = has_label ? label_of(f, &values[f->label_key], &label) : DT_OK;
    float *dense;
    if (st || (st = dt_rowbuf_add_row_unset(out, &dense)))
        return st;
    for (int k = 0; k < f->n_cols && st == DT_OK; k++) {
        int i = f->order[k];
        if (f->cols[i].used)
            st = compute_column(f, i, values, s, dense);
        else
            s->cols[i].n = 0;
        if (st == DT_OK && !f->cols[i].used && f->cols[i].type == DT_FCOL_NUMERIC)
            memset(dense + f->cols[i].dense_off, 0, (size_t)f->cols[i].shape * sizeof(float));
    }
    size_t nnz = 0;
    for (int slot = 0; slot < f->n_slots && st == DT_OK; slot++) {
        const dt_feature_column *c = &f->cols[f->slot_column[slot]];
        nnz += s->cols[f->slot_column[slot]].n * (c->dynamic ? 2 : 1);
    }
    if (st == DT_OK)
        st = dt_rowbuf_reserve_sparse(out, nnz);
    if (st) {
        dt_rowbuf_drop_last(out);
        return st;
    }
    dt_rowbuf_set_label(out, label);
    size_t at = out->nnz;
    for (int slot = 0; slot < f->n_slots; slot++) {
        const col_out *o = &s->cols[f->slot_column[slot]];
        bool keyed = f->cols[f->slot_column[slot]].dynamic;
        for (size_t j = 0; j < o->n; j++, at++) {
            if (keyed) {
                out->sp_ids[at] = dt_feature_key_hi(slot, o->ids[j]);
                out->sp_vals[at++] = o->weights[j];
            }
            out->sp_ids[at] = keyed ? dt_feature_key_lo(slot, o->ids[j])
                                    : dt_feature_entry(slot, o->ids[j]);
            out->sp_vals[at] = o->weights[j];
        }
    }
    dt_rowbuf_commit_sparse(out, nnz);
    return DT_OK;
}

/* ---- Delimited text ---- */

struct dt_feature_text {
    char delimiter;
    int n_fields;
    int *field_of_key; /* (n_keys): the field holding each key, -1 none */
};

void dt_feature_text_free(dt_feature_text *t)
{
    if (t)
        free(t->field_of_key);
    free(t);
}

/* Splits a line into s->cells: fields at the delimiter, quoted ones ("a, b", "" for a quote)
 * unescaped into s->unq, unquoted ones without the spaces around them. */
static dt_status split_line(dt_feature_scratch *s, const char *line, size_t len, char delim,
                            int *n_fields)
{
    const char *p = line, *end = line + len;
    if (len >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0)
        p += 3;
    if (end > p && end[-1] == '\r')
        end--;
    int n = 0;
    size_t unq_used = 0;
    if (grow((void **)&s->unq, &s->unq_cap, len + 1, 1))
        return DT_ERR_NOMEM;
    for (;;) {
        if (grow((void **)&s->cells, &s->cells_cap, (size_t)n + 1, sizeof *s->cells))
            return DT_ERR_NOMEM;
        while (p < end && *p != delim && (*p == ' ' || *p == '\t'))
            p++;
        const char *q;
        if (p < end && *p == '"') {
            char *dst = s->unq + unq_used, *d = dst;
            for (q = p + 1;; q++) {
                if (q >= end)
                    return dt_error(DT_ERR_FORMAT, "field %d: a quote that does not close", n + 1);
                if (*q == '"') {
                    if (q + 1 < end && q[1] == '"') {
                        *d++ = '"';
                        q++;
                        continue;
                    }
                    break;
                }
                *d++ = *q;
            }
            s->cells[n] = (dt_bytes_ref){dst, (size_t)(d - dst)};
            unq_used += (size_t)(d - dst);
            q++;
            while (q < end && *q != delim && (*q == ' ' || *q == '\t'))
                q++;
            if (q < end && *q != delim)
                return dt_error(DT_ERR_FORMAT, "field %d: text after a closing quote", n + 1);
        } else {
            q = memchr(p, delim, (size_t)(end - p));
            if (!q)
                q = end;
            const char *e = q;
            while (e > p && (e[-1] == ' ' || (e[-1] == '\t' && delim != '\t')))
                e--;
            s->cells[n] = (dt_bytes_ref){p, (size_t)(e - p)};
        }
        n++;
        if (q >= end)
            break;
        p = q + 1;
    }
    *n_fields = n;
    return DT_OK;
}

static const char *const criteo_names[] = {"label"};

static void criteo_field_name(int i, char *out, size_t cap)
{
    if (i == 0)
        snprintf(out, cap, "%s", criteo_names[0]);
    else if (i <= 13)
        snprintf(out, cap, "I%d", i);
    else
        snprintf(out, cap, "C%d", i - 13);
}

dt_status dt_feature_text_new(const dt_features *f, const char *header, size_t len,
                              char delimiter, dt_feature_text **out)
{
    *out = NULL;
    dt_feature_text *t = calloc(1, sizeof *t);
    dt_feature_scratch *s = NULL;
    dt_status st = DT_OK;
    if (!t || !(t->field_of_key = malloc((size_t)(f->n_keys ? f->n_keys : 1) * sizeof(int)))) {
        st = dt_error(DT_ERR_NOMEM, "no memory for a text layout");
        goto fail;
    }
    for (int k = 0; k < f->n_keys; k++)
        t->field_of_key[k] = -1;
    t->delimiter = header ? delimiter : '\t';
    if (!header) {
        t->n_fields = 40;
        for (int i = 0; i < 40; i++) {
            char name[16];
            criteo_field_name(i, name, sizeof name);
            for (int k = 0; k < f->n_keys; k++)
                if (strcmp(f->keys[k], name) == 0)
                    t->field_of_key[k] = i;
        }
    } else {
        if ((st = dt_feature_scratch_new(f, &s)) ||
            (st = split_line(s, header, len, delimiter, &t->n_fields)))
            goto fail;
        for (int i = 0; i < t->n_fields; i++)
            for (int k = 0; k < f->n_keys; k++)
                if (strlen(f->keys[k]) == s->cells[i].len &&
                    memcmp(f->keys[k], s->cells[i].data, s->cells[i].len) == 0) {
                    if (t->field_of_key[k] >= 0) {
                        st = dt_error(DT_ERR_FORMAT, "the header names '%s' twice (fields %d "
                                      "and %d)", f->keys[k], t->field_of_key[k] + 1, i + 1);
                        goto fail;
                    }
                    t->field_of_key[k] = i;
                }
    }
    for (int k = 0; k < f->n_keys; k++)
        if (t->field_of_key[k] < 0 && !(f->unlabeled && k == f->label_key)) {
            st = dt_error(DT_ERR_INVALID, "%s: the spec reads key '%s', which %s", f->source,
                          f->keys[k], header ? "the header does not name"
                                             : "Criteo's columns (label, I1..I13, C1..C26) "
                                               "do not include");
            goto fail;
        }
    dt_feature_scratch_free(s);
    *out = t;
    return DT_OK;
fail:
    dt_feature_scratch_free(s);
    dt_feature_text_free(t);
    return st;
}

dt_status dt_feature_text_values(const dt_features *f, const dt_feature_text *t,
                                 dt_feature_scratch *s, const char *line, size_t len,
                                 const dt_raw_value **values)
{
    size_t blank = 0;
    while (blank < len && (line[blank] == ' ' || line[blank] == '\t' || line[blank] == '\r'))
        blank++;
    if (blank == len)
        return DT_END;
    int n = 0;
    dt_status st = split_line(s, line, len, t->delimiter, &n);
    if (st)
        return st;
    if (n != t->n_fields)
        return dt_error(DT_ERR_FORMAT, "the line has %d fields, %s %d", n,
                        t->delimiter == '\t' && t->n_fields == 40 ? "Criteo's rows" : "the header",
                        t->n_fields);
    for (int k = 0; k < f->n_keys; k++) {
        const dt_bytes_ref *cell = t->field_of_key[k] >= 0 ? &s->cells[t->field_of_key[k]] : NULL;
        s->raw[k] = cell && cell->len ? (dt_raw_value){DT_RAW_TEXT, 1, cell, NULL, NULL}
                                      : (dt_raw_value){DT_RAW_MISSING, 0, NULL, NULL, NULL};
    }
    *values = s->raw;
    return DT_OK;
}

dt_status dt_feature_text_parse(const dt_features *f, const dt_feature_text *t,
                                dt_feature_scratch *s, const char *line, size_t len,
                                dt_rowbuf *out)
{
    const dt_raw_value *values;
    dt_status st = dt_feature_text_values(f, t, s, line, len, &values);
    return st ? st : dt_features_transform(f, s, values, out);
}

/* ---- tf.Example records ---- */

static int key_index(const dt_features *f, const char *k, size_t n)
{
    for (int i = 0; i < f->n_keys; i++)
        if (strlen(f->keys[i]) == n && memcmp(f->keys[i], k, n) == 0)
            return i;
    return -1;
}

dt_status dt_features_example_values(const dt_features *f, dt_feature_scratch *s,
                                     const uint8_t *data, size_t n_bytes,
                                     const dt_raw_value **values)
{
    dt_status st;
    if (!s->reader && (st = dt_example_reader_new(&s->reader)))
        return st;
    const dt_example_feature *feats;
    size_t n;
    if ((st = dt_example_read(s->reader, data, n_bytes, &feats, &n)))
        return st;
    for (int k = 0; k < f->n_keys; k++)
        s->raw[k] = (dt_raw_value){DT_RAW_MISSING, 0, NULL, NULL, NULL};
    /* Byte strings become references in one array, placed once it has stopped growing. */
    size_t n_refs = 0;
    for (size_t i = 0; i < n; i++)
        if (feats[i].kind == DT_FEATURE_BYTES && key_index(f, feats[i].key, feats[i].key_len) >= 0)
            n_refs += feats[i].n;
    if ((st = grow((void **)&s->refs, &s->refs_cap, n_refs, sizeof *s->refs)))
        return st;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const dt_example_feature *e = &feats[i];
        int k = key_index(f, e->key, e->key_len);
        if (k < 0 || e->kind == 0)
            continue;
        dt_raw_value *v = &s->raw[k];
        v->n = e->n;
        if (e->kind == DT_FEATURE_BYTES) {
            v->kind = DT_RAW_BYTES;
            v->bytes = e->n ? s->refs + at : NULL; /* no refs at all for empty lists only */
            for (size_t j = 0; j < e->n; j++)
                s->refs[at++] = (dt_bytes_ref){(const char *)e->bytes[j], e->bytes_len[j]};
        } else if (e->kind == DT_FEATURE_INT64) {
            v->kind = DT_RAW_INT64;
            v->ints = e->ints;
        } else {
            v->kind = DT_RAW_FLOAT;
            v->floats = e->floats;
        }
        /* An empty list is a missing value, as TF's parsing of a VarLen feature gives none. */
        if (e->n == 0)
            v->kind = DT_RAW_MISSING;
    }
    *values = s->raw;
    return DT_OK;
}

dt_status dt_features_transform_example(const dt_features *f, dt_feature_scratch *s,
                                        const uint8_t *data, size_t n_bytes, dt_rowbuf *out)
{
    const dt_raw_value *values;
    dt_status st = dt_features_example_values(f, s, data, n_bytes, &values);
    return st ? st : dt_features_transform(f, s, values, out);
}
