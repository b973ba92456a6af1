/* Feature specs from JSON (features.h): the columns with TensorFlow's feature-column names, the
 * label, and the model object kept for the model builder. Every error names the spec and the
 * column ("columns[3] 'age_buckets'") or field; an unknown field is an error, since a misspelt
 * option silently left at its default trains another model than the one written. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/json.h"
#include "../core/fileio.h"
#include "../model/dynamic_json.h"
#include "dtrain/log.h"
#include "features_int.h"

#define SPEC_FILE_MAX (64u << 20)
#define VOCAB_FILE_MAX ((size_t)1 << 31)
#define MAX_COLUMNS 4096
#define MAX_BOUNDARIES 65536

static const struct {
    const char *name;
    dt_feature_column_type type;
} type_names[] = {
    {"numeric", DT_FCOL_NUMERIC},         {"bucketized", DT_FCOL_BUCKETIZED},
    {"vocabulary_list", DT_FCOL_VOCAB_LIST}, {"vocabulary_file", DT_FCOL_VOCAB_FILE},
    {"vocabulary", DT_FCOL_VOCAB},        {"hash_bucket", DT_FCOL_HASH},
    {"identity", DT_FCOL_IDENTITY},       {"crossed", DT_FCOL_CROSSED},
    {"weighted", DT_FCOL_WEIGHTED},
};

const char *dt_feature_column_type_name(dt_feature_column_type t)
{
    for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++)
        if (type_names[i].type == t)
            return type_names[i].name;
    return "?";
}

/* The fields each type takes besides name and type. */
static const char *const *fields_of(dt_feature_column_type t)
{
    static const char *const numeric[] = {"key", "shape", "default_value", "normalizer", NULL};
    static const char *const bucketized[] = {"source", "boundaries", NULL};
    static const char *const vlist[] = {"key", "vocabulary", "num_oov_buckets", "default_value",
                                        "separator", NULL};
    static const char *const vfile[] = {"key", "vocabulary_file", "vocabulary_size",
                                        "num_oov_buckets", "default_value", "separator", NULL};
    static const char *const vadapt[] = {"key", "adapt", "vocabulary", "num_oov_buckets",
                                         "default_value", "separator", NULL};
    static const char *const hash[] = {"key", "hash_bucket_size", "separator", "dynamic", "admit",
                                       "evict", "memory_limit", NULL};
    static const char *const identity[] = {"key", "num_buckets", "default_value", "separator",
                                           "dynamic", "admit", "evict", "memory_limit", NULL};
    static const char *const crossed[] = {"keys", "hash_bucket_size", "hash_key", "dynamic",
                                          "admit", "evict", "memory_limit", NULL};
    static const char *const weighted[] = {"categorical", "weight_key", NULL};
    switch (t) {
    case DT_FCOL_NUMERIC: return numeric;
    case DT_FCOL_BUCKETIZED: return bucketized;
    case DT_FCOL_VOCAB_LIST: return vlist;
    case DT_FCOL_VOCAB_FILE: return vfile;
    case DT_FCOL_VOCAB: return vadapt;
    case DT_FCOL_HASH: return hash;
    case DT_FCOL_IDENTITY: return identity;
    case DT_FCOL_CROSSED: return crossed;
    case DT_FCOL_WEIGHTED: return weighted;
    }
    return NULL;
}

/* ---- Errors ---- */

typedef struct {
    dt_features *f;
    char where[160]; /* "columns[3] 'age'" or "label" */
} pctx;

static dt_status spec_error(const pctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static dt_status spec_error(const pctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dt_status st = dt_features_verror(c->f, c->where, fmt, ap);
    va_end(ap);
    return st;
}

dt_status dt_features_verror(const dt_features *f, const char *where, const char *fmt,
                             va_list ap)
{
    char msg[768];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (where[0])
        return dt_error(DT_ERR_INVALID, "%s: %s: %s", f->source, where, msg);
    return dt_error(DT_ERR_INVALID, "%s: %s", f->source, msg);
}

static dt_status check_fields(const pctx *c, const cJSON *obj, const char *const *allowed)
{
    const char *bad = dt_json_unknown_field(obj, allowed);
    return bad ? spec_error(c, "unknown field \"%s\"", bad) : DT_OK;
}

/* ---- Values ---- */

static dt_status get_int(const pctx *c, const cJSON *item, const char *field, int64_t lo,
                         int64_t hi, int64_t *out)
{
    if (!cJSON_IsNumber(item) || item->valuedouble != floor(item->valuedouble) ||
        item->valuedouble < (double)lo || item->valuedouble > (double)hi)
        return spec_error(c, "%s: expected an integer in [%lld, %lld]", field, (long long)lo,
                          (long long)hi);
    *out = (int64_t)item->valuedouble;
    return DT_OK;
}

static dt_status get_number(const pctx *c, const cJSON *item, const char *field, double *out)
{
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble))
        return spec_error(c, "%s: expected a finite number", field);
    *out = item->valuedouble;
    return DT_OK;
}

static dt_status get_name(const pctx *c, const cJSON *item, const char *field, char *out)
{
    if (!cJSON_IsString(item) || !item->valuestring[0] ||
        strlen(item->valuestring) >= DT_FEATURE_NAME_CAP)
        return spec_error(c, "%s: expected a name of 1..%d bytes", field, DT_FEATURE_NAME_CAP - 1);
    snprintf(out, DT_FEATURE_NAME_CAP, "%s", item->valuestring);
    return DT_OK;
}

/* The index of a raw key, added when new. */
static int find_key(const dt_features *f, const char *name);

static dt_status intern_key(const pctx *c, const char *name, int *out)
{
    dt_features *f = c->f;
    if ((*out = find_key(f, name)) >= 0)
        return DT_OK;
    void *k = realloc(f->keys, (size_t)(f->n_keys + 1) * sizeof *f->keys);
    if (!k)
        return dt_error(DT_ERR_NOMEM, "no memory for a feature spec");
    f->keys = k;
    snprintf(f->keys[f->n_keys], DT_FEATURE_NAME_CAP, "%s", name);
    *out = f->n_keys++;
    return DT_OK;
}

static int find_key(const dt_features *f, const char *name)
{
    for (int i = 0; i < f->n_keys; i++)
        if (strcmp(f->keys[i], name) == 0)
            return i;
    return -1;
}

int dt_features_find_column(const dt_features *f, const char *name)
{
    for (int i = 0; i < f->n_cols; i++)
        if (strcmp(f->cols[i].name, name) == 0)
            return i;
    return -1;
}

/* A JSON list of strings or integers as tokens (integers through their decimal digits, as an
 * integer feature is looked up). */
static dt_status tokens_from_json(const pctx *c, const cJSON *arr, const char *field, dt_vocab *v)
{
    int n = cJSON_GetArraySize(arr);
    const char **tok = calloc((size_t)(n ? n : 1), sizeof *tok);
    uint32_t *len = calloc((size_t)(n ? n : 1), sizeof *len);
    char (*digits)[24] = calloc((size_t)(n ? n : 1), sizeof *digits);
    dt_status st = DT_OK;
    if (!tok || !len || !digits) {
        st = dt_error(DT_ERR_NOMEM, "no memory for a vocabulary");
        goto fail;
    }
    int i = 0;
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        if (cJSON_IsString(it)) {
            tok[i] = it->valuestring;
        } else if (cJSON_IsNumber(it) && it->valuedouble == floor(it->valuedouble) &&
                   fabs(it->valuedouble) < 9e15) {
            snprintf(digits[i], sizeof digits[i], "%lld", (long long)it->valuedouble);
            tok[i] = digits[i];
        } else {
            st = spec_error(c, "%s[%d]: expected a string or an integer", field, i);
            goto fail;
        }
        size_t l = strlen(tok[i]);
        if (l > UINT32_MAX) {
            st = spec_error(c, "%s[%d]: too long", field, i);
            goto fail;
        }
        len[i] = (uint32_t)l;
    }
    if ((st = dt_vocab_build(v, tok, len, n)))
        st = dt_error_prefix(st, "%s: %s: %s", c->f->source, c->where, field);
fail:
    free(tok);
    free(len);
    free(digits);
    return st;
}

/* One token per line; a final '\r' is dropped, and so is a last empty line. */
static dt_status tokens_from_file(const pctx *c, dt_feature_column *col)
{
    char *text = NULL;
    size_t n = 0;
    /* dt_file_read_text sets its limit aside before it reads: ask for what a regular file holds,
     * not 2 GiB for every vocabulary. */
    size_t max = VOCAB_FILE_MAX;
    struct stat sb;
    if (stat(col->vocab_path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size >= 0 &&
        (uint64_t)sb.st_size < (uint64_t)max)
        max = (size_t)sb.st_size;
    dt_status st = dt_file_read_text(col->vocab_path, max, "a vocabulary file", &text, &n);
    if (st)
        return dt_error_prefix(st, "%s: %s: vocabulary_file", c->f->source, c->where);
    int64_t lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += text[i] == '\n';
    if (n > 0 && text[n - 1] != '\n')
        lines++;
    const char **tok = malloc((size_t)(lines ? lines : 1) * sizeof *tok);
    uint32_t *len = malloc((size_t)(lines ? lines : 1) * sizeof *len);
    if (!tok || !len) {
        st = dt_error(DT_ERR_NOMEM, "no memory for a vocabulary");
        goto fail;
    }
    int64_t k = 0;
    for (char *p = text; p < text + n && (col->vocab_size == 0 || k < col->vocab_size); k++) {
        char *nl = memchr(p, '\n', (size_t)(text + n - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(text + n - p);
        if (l > 0 && p[l - 1] == '\r')
            l--;
        tok[k] = p;
        len[k] = (uint32_t)l;
        p = nl ? nl + 1 : text + n;
    }
    if (col->vocab_size > k) {
        st = spec_error(c, "vocabulary_size %lld: %s holds %lld tokens", (long long)col->vocab_size,
                        col->vocab_path, (long long)k);
        goto fail;
    }
    if ((st = dt_vocab_build(&col->vocab, tok, len, k)))
        st = dt_error_prefix(st, "%s: %s: %s", c->f->source, c->where, col->vocab_path);
fail:
    free(tok);
    free(len);
    free(text);
    return st;
}

/* ---- Columns ---- */

static dt_status parse_separator(const pctx *c, const cJSON *o, dt_feature_column *col)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "separator");
    if (!s)
        return DT_OK;
    if (!cJSON_IsString(s) || strlen(s->valuestring) != 1 || s->valuestring[0] == '\n' ||
        s->valuestring[0] == '"')
        return spec_error(c, "separator: expected one character (not a quote or a newline)");
    col->separator = s->valuestring[0];
    return DT_OK;
}

static dt_status parse_key(const pctx *c, const cJSON *o, dt_feature_column *col)
{
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "key");
    char name[DT_FEATURE_NAME_CAP];
    dt_status st = k ? get_name(c, k, "key", name) : DT_OK;
    if (st)
        return st;
    /* As TensorFlow's columns read the feature of their own name when the key is the name. */
    return intern_key(c, k ? name : col->name, &col->key);
}

static dt_status parse_normalizer(const pctx *c, const cJSON *n, dt_feature_column *col)
{
    if (cJSON_IsString(n) && strcmp(n->valuestring, "standardize") == 0) {
        col->norm = DT_NORM_STANDARDIZE;
        return DT_OK;
    }
    if (cJSON_IsString(n) && strcmp(n->valuestring, "log1p") == 0) {
        col->norm = DT_NORM_LOG1P;
        return DT_OK;
    }
    if (cJSON_IsObject(n)) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(n, "mean");
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(n, "std");
        /* "adapted" marks statistics a pass computed, so that a saved spec keeps standardize. */
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(n, "adapted");
        static const char *const fields[] = {"mean", "std", "adapted", NULL};
        dt_status st = check_fields(c, n, fields);
        if (st == DT_OK && (!m || !s))
            st = spec_error(c, "normalizer: {\"mean\": m, \"std\": s} needs both");
        if (st == DT_OK && (st = get_number(c, m, "normalizer.mean", &col->mean)) == DT_OK)
            st = get_number(c, s, "normalizer.std", &col->std);
        if (st == DT_OK && !(col->std > 0))
            st = spec_error(c, "normalizer.std: must be > 0");
        col->norm = cJSON_IsTrue(a) ? DT_NORM_STANDARDIZE : DT_NORM_FIXED;
        col->adapted = true;
        return st;
    }
    return spec_error(c, "normalizer: expected \"standardize\", \"log1p\" or {\"mean\": m, "
                      "\"std\": s}");
}

static dt_status parse_numeric(const pctx *c, const cJSON *o, dt_feature_column *col)
{
    dt_status st = parse_key(c, o, col);
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
    const cJSON *def = cJSON_GetObjectItemCaseSensitive(o, "default_value");
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(o, "normalizer");
    int64_t v = 1;
    if (st == DT_OK && shape)
        st = get_int(c, shape, "shape", 1, 1 << 20, &v);
    col->shape = (int)v;
    double d = 0;
    if (st == DT_OK && def && (st = get_number(c, def, "default_value", &d)) == DT_OK) {
        /* Kept as a float: a value beyond a float's range would be inf. */
        if (fabs(d) > FLT_MAX)
            return spec_error(c, "default_value: %g is beyond a float's range", d);
        col->has_default = true;
        col->default_value = (float)d;
    }
    col->adapted = true;
    if (st == DT_OK && norm && !cJSON_IsNull(norm)) {
        col->adapted = false;
        st = parse_normalizer(c, norm, col);
        if (col->norm != DT_NORM_STANDARDIZE)
            col->adapted = true;
    }
    return st;
}

static dt_status parse_boundaries(const pctx *c, const cJSON *b, dt_feature_column *col)
{
    if (cJSON_IsObject(b)) {
        static const char *const fields[] = {"num_bins", NULL};
        const cJSON *nb = cJSON_GetObjectItemCaseSensitive(b, "num_bins");
        int64_t v = 0;
        dt_status st = check_fields(c, b, fields);
        if (st == DT_OK && !nb)
            st = spec_error(c, "boundaries: {\"num_bins\": N} names the number of bins");
        if (st == DT_OK)
            st = get_int(c, nb, "boundaries.num_bins", 2, MAX_BOUNDARIES, &v);
        col->num_bins = (int)v;
        return st;
    }
    if (!cJSON_IsArray(b) || cJSON_GetArraySize(b) < 1 || cJSON_GetArraySize(b) > MAX_BOUNDARIES)
        return spec_error(c, "boundaries: expected a list of 1..%d numbers or {\"num_bins\": N}",
                          MAX_BOUNDARIES);
    int n = cJSON_GetArraySize(b);
    if (!(col->boundaries = malloc((size_t)n * sizeof *col->boundaries)))
        return dt_error(DT_ERR_NOMEM, "no memory for boundaries");
    int i = 0;
    for (const cJSON *it = b->child; it; it = it->next, i++) {
        char field[32];
        snprintf(field, sizeof field, "boundaries[%d]", i);
        dt_status st = get_number(c, it, field, &col->boundaries[i]);
        if (st)
            return st;
        if (i > 0 && !(col->boundaries[i] > col->boundaries[i - 1]))
            return spec_error(c, "boundaries must ascend: boundaries[%d] = %g follows %g", i,
                              col->boundaries[i], col->boundaries[i - 1]);
    }
    col->n_boundaries = n;
    col->adapted = true;
    return DT_OK;
}

static dt_status parse_oov(const pctx *c, const cJSON *o, dt_feature_column *col)
{
    const cJSON *oov = cJSON_GetObjectItemCaseSensitive(o, "num_oov_buckets");
    const cJSON *def = cJSON_GetObjectItemCaseSensitive(o, "default_value");
    dt_status st = DT_OK;
    col->cat_default = -1;
    if (oov)
        st = get_int(c, oov, "num_oov_buckets", 0, (int64_t)1 << 40, &col->num_oov);
    if (st == DT_OK && def) {
        if (col->num_oov > 0)
            return spec_error(c, "default_value and num_oov_buckets: give one of them (as TF)");
        st = get_int(c, def, "default_value", -1, (int64_t)1 << 40, &col->cat_default);
        col->has_cat_default = true;
    }
    return st;
}

/* A vocabulary's default_value is one of its ids, or -1 (as an identity column's is checked):
 * another id would lie outside the column's buckets. */
static dt_status check_vocab_default(const pctx *c, const dt_feature_column *col, dt_status st)
{
    if (st == DT_OK && col->has_cat_default && col->cat_default >= col->vocab.n)
        return spec_error(c, "default_value: %lld is not an id of the vocabulary's %lld tokens "
                          "(expected -1 .. %lld)", (long long)col->cat_default,
                          (long long)col->vocab.n, (long long)col->vocab.n - 1);
    return st;
}

static dt_status parse_vocab(const pctx *c, const cJSON *o, dt_feature_column *col)
{
    dt_status st = parse_key(c, o, col);
    if (st || (st = parse_separator(c, o, col)) || (st = parse_oov(c, o, col)))
        return st;
    const cJSON *voc = cJSON_GetObjectItemCaseSensitive(o, "vocabulary");
    if (col->type == DT_FCOL_VOCAB_LIST) {
        if (!cJSON_IsArray(voc) || cJSON_GetArraySize(voc) < 1)
            return spec_error(c, "vocabulary: expected a list of at least one string");
        col->adapted = true;
        return check_vocab_default(c, col, tokens_from_json(c, voc, "vocabulary", &col->vocab));
    }
    if (col->type == DT_FCOL_VOCAB_FILE) {
        const cJSON *path = cJSON_GetObjectItemCaseSensitive(o, "vocabulary_file");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(o, "vocabulary_size");
        if (!cJSON_IsString(path) || !path->valuestring[0])
            return spec_error(c, "vocabulary_file: expected the path of a file of tokens");
        if (size && (st = get_int(c, size, "vocabulary_size", 1, (int64_t)1 << 40,
                                  &col->vocab_size)))
            return st;
        const char *p = path->valuestring;
        int len = p[0] == '/' || !c->f->dir[0]
                      ? snprintf(col->vocab_path, sizeof col->vocab_path, "%s", p)
                      : snprintf(col->vocab_path, sizeof col->vocab_path, "%s/%s", c->f->dir, p);
        if (len < 0 || (size_t)len >= sizeof col->vocab_path)
            return spec_error(c, "vocabulary_file: path too long");
        col->adapted = true;
        return check_vocab_default(c, col, tokens_from_file(c, col));
    }
    /* "vocabulary" with "adapt": the tokens come from a pass over the training data, or, in a
     * saved spec, are written in. */
    const cJSON *ad = cJSON_GetObjectItemCaseSensitive(o, "adapt");
    col->adapt_min_count = 1;
    if (ad && !cJSON_IsObject(ad))
        return spec_error(c, "adapt: expected {\"min_count\": C, \"max_tokens\": T}");
    if (ad) {
        static const char *const fields[] = {"min_count", "max_tokens", NULL};
        const cJSON *mc = cJSON_GetObjectItemCaseSensitive(ad, "min_count");
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(ad, "max_tokens");
        if ((st = check_fields(c, ad, fields)) ||
            (mc && (st = get_int(c, mc, "adapt.min_count", 1, INT64_MAX / 2,
                                 &col->adapt_min_count))) ||
            (mt && !cJSON_IsNull(mt) &&
             (st = get_int(c, mt, "adapt.max_tokens", 1, (int64_t)1 << 40,
                           &col->adapt_max_tokens))))
            return st;
    }
    if (voc) {
        if (!cJSON_IsArray(voc))
            return spec_error(c, "vocabulary: expected a list of strings");
        col->adapted = true;
        return check_vocab_default(c, col, tokens_from_json(c, voc, "vocabulary", &col->vocab));
    }
    return DT_OK;
}

/* "dynamic": true keys the column's tables by the value itself (keymap.h) instead of a bucket,
 * so the bucket count and default do not apply; "admit", "evict" and "memory_limit" are the
 * tables' policy, as a built-in model's dynamic tables take it. */
static dt_status parse_dynamic(const pctx *c, const cJSON *o, dt_feature_column *col)
{
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "dynamic");
    if (d && !cJSON_IsBool(d))
        return spec_error(c, "dynamic: expected true or false");
    col->dynamic = cJSON_IsTrue(d);
    dt_keymap_policy_default(&col->policy);
    static const char *const policy[] = {"admit", "evict", "memory_limit"};
    static const char *const buckets[] = {"hash_bucket_size", "num_buckets", "default_value"};
    for (int k = 0; k < 3; k++) {
        if (!col->dynamic && cJSON_GetObjectItemCaseSensitive(o, policy[k]))
            return spec_error(c, "%s: applies to a dynamic column (\"dynamic\": true)", policy[k]);
        if (col->dynamic && cJSON_GetObjectItemCaseSensitive(o, buckets[k]))
            return spec_error(c, "%s: a dynamic column has no buckets: its table is keyed by %s",
                              buckets[k], col->type == DT_FCOL_IDENTITY
                                              ? "the id itself"
                                              : "the value's Fingerprint64");
    }
    if (!col->dynamic)
        return DT_OK;
    char where[sizeof c->f->source + sizeof c->where + 2];
    snprintf(where, sizeof where, "%s: %s", c->f->source, c->where);
    return dt_dynamic_policy_from_json(o, where, &col->policy);
}

static dt_status parse_categorical(const pctx *c, const cJSON *o, dt_feature_column *col)
{
    dt_status st = parse_key(c, o, col);
    if (st || (st = parse_separator(c, o, col)) || (st = parse_dynamic(c, o, col)))
        return st;
    col->adapted = true;
    if (col->dynamic)
        return DT_OK;
    if (col->type == DT_FCOL_HASH) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "hash_bucket_size");
        if (!h)
            return spec_error(c, "hash_bucket_size: missing");
        return get_int(c, h, "hash_bucket_size", 1, DT_FEATURE_MAX_BUCKETS - 1,
                       &col->hash_bucket_size);
    }
    const cJSON *nb = cJSON_GetObjectItemCaseSensitive(o, "num_buckets");
    const cJSON *def = cJSON_GetObjectItemCaseSensitive(o, "default_value");
    if (!nb)
        return spec_error(c, "num_buckets: missing");
    if ((st = get_int(c, nb, "num_buckets", 1, DT_FEATURE_MAX_BUCKETS - 1, &col->num_buckets)))
        return st;
    col->cat_default = -1;
    if (def) {
        if ((st = get_int(c, def, "default_value", -1, col->num_buckets - 1, &col->cat_default)))
            return st;
        col->has_cat_default = true;
    }
    return DT_OK;
}

/* Crossed keys and weighted references are resolved once every column is known. */
static dt_status parse_crossed(const pctx *c, const cJSON *o, dt_feature_column *col)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "hash_bucket_size");
    const cJSON *hk = cJSON_GetObjectItemCaseSensitive(o, "hash_key");
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(o, "keys");
    dt_status st = parse_dynamic(c, o, col);
    if (st)
        return st;
    if (!h && !col->dynamic)
        return spec_error(c, "hash_bucket_size: missing");
    if (h && (st = get_int(c, h, "hash_bucket_size", 1, DT_FEATURE_MAX_BUCKETS - 1,
                           &col->hash_bucket_size)))
        return st;
    col->hash_key = 0xDECAFCAFFEull;
    if (hk) {
        int64_t v;
        if ((st = get_int(c, hk, "hash_key", 0, (int64_t)1 << 53, &v)))
            return st;
        col->hash_key = (uint64_t)v;
    }
    if (!cJSON_IsArray(keys) || cJSON_GetArraySize(keys) < 2 ||
        cJSON_GetArraySize(keys) > DT_FEATURE_MAX_CROSS)
        return spec_error(c, "keys: expected a list of 2..%d keys or columns", DT_FEATURE_MAX_CROSS);
    col->adapted = true;
    return DT_OK;
}

static dt_status parse_column(pctx *c, const cJSON *o, int index)
{
    dt_feature_column *col = &c->f->cols[index];
    memset(col, 0, sizeof *col);
    col->key = col->source = col->categorical = col->weight_key = -1;
    col->slot = col->dense_off = -1;
    snprintf(c->where, sizeof c->where, "columns[%d]", index);
    if (!cJSON_IsObject(o))
        return spec_error(c, "expected an object with a name and a type");
    dt_status st = get_name(c, cJSON_GetObjectItemCaseSensitive(o, "name"), "name", col->name);
    if (st)
        return st;
    snprintf(c->where, sizeof c->where, "columns[%d] '%s'", index, col->name);
    if (dt_features_find_column(c->f, col->name) >= 0 &&
        dt_features_find_column(c->f, col->name) < index)
        return spec_error(c, "a second column of this name");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    if (!cJSON_IsString(t))
        return spec_error(c, "type: missing");
    size_t k = 0;
    while (k < sizeof type_names / sizeof type_names[0] && strcmp(type_names[k].name, t->valuestring))
        k++;
    if (k == sizeof type_names / sizeof type_names[0])
        return spec_error(c, "unknown type \"%s\" (numeric, bucketized, vocabulary_list, "
                          "vocabulary_file, vocabulary, hash_bucket, identity, crossed, weighted)",
                          t->valuestring);
    col->type = type_names[k].type;
    const char *const *fields = fields_of(col->type);
    const char *all[16] = {"name", "type"};
    int n = 2;
    for (int i = 0; fields[i]; i++)
        all[n++] = fields[i];
    all[n] = NULL;
    if ((st = check_fields(c, o, all)))
        return st;
    switch (col->type) {
    case DT_FCOL_NUMERIC: return parse_numeric(c, o, col);
    case DT_FCOL_BUCKETIZED: {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "boundaries");
        if (!b)
            return spec_error(c, "boundaries: missing");
        return parse_boundaries(c, b, col);
    }
    case DT_FCOL_VOCAB_LIST:
    case DT_FCOL_VOCAB_FILE:
    case DT_FCOL_VOCAB: return parse_vocab(c, o, col);
    case DT_FCOL_HASH:
    case DT_FCOL_IDENTITY: return parse_categorical(c, o, col);
    case DT_FCOL_CROSSED: return parse_crossed(c, o, col);
    case DT_FCOL_WEIGHTED: col->adapted = true; return DT_OK;
    }
    return DT_OK;
}

/* Which columns read a raw key, by kind: crossing a key that only numeric columns read is
 * crossing a number. */
static bool key_read_as_number_only(const dt_features *f, int key)
{
    bool numeric = false;
    for (int i = 0; i < f->n_cols; i++)
        if (f->cols[i].key == key) {
            if (dt_feature_is_categorical(&f->cols[i]))
                return false;
            numeric = true;
        }
    return numeric;
}

/* A crossed key: {"column": name}, {"key": name}, or a string, which is a raw key when some
 * column reads a key of that name (TensorFlow crosses a string key's raw values, as the census
 * tutorial's crossed_column(['education', 'occupation'])) and a column otherwise
 * (crossed_column([age_buckets, ...]): its ids). */
static dt_status resolve_cross_key(pctx *c, const cJSON *k, int i, dt_cross_ref *ref)
{
    ref->key = ref->column = -1;
    const dt_features *f = c->f;
    const char *name = NULL;
    bool want_column = false, want_key = false;
    if (cJSON_IsString(k)) {
        name = k->valuestring;
    } else if (cJSON_IsObject(k) && cJSON_GetArraySize(k) == 1 &&
               cJSON_IsString(k->child) && (strcmp(k->child->string, "column") == 0 ||
                                            strcmp(k->child->string, "key") == 0)) {
        name = k->child->valuestring;
        want_column = strcmp(k->child->string, "column") == 0;
        want_key = !want_column;
    } else {
        return spec_error(c, "keys[%d]: expected a name, {\"column\": name} or {\"key\": name}", i);
    }
    int key = find_key(f, name), col = dt_features_find_column(f, name);
    if (want_key || (!want_column && key >= 0)) {
        if (key < 0 || want_key) {
            int kk;
            dt_status st = intern_key(c, name, &kk);
            if (st)
                return st;
            key = kk;
        }
        if (key_read_as_number_only(c->f, key))
            return spec_error(c, "keys[%d]: '%s' is a numeric key: cross a bucketized column of "
                              "it instead", i, name);
        ref->key = key;
        return DT_OK;
    }
    if (col < 0)
        return spec_error(c, "keys[%d]: no column and no key is called '%s'", i, name);
    const dt_feature_column *src = &f->cols[col];
    if (src->type == DT_FCOL_NUMERIC)
        return spec_error(c, "keys[%d]: '%s' is a numeric column: cross a bucketized column of "
                          "it instead", i, name);
    if (src->type == DT_FCOL_CROSSED || src->type == DT_FCOL_WEIGHTED || src->type == DT_FCOL_HASH)
        return spec_error(c, "keys[%d]: '%s' is a %s column, which a cross does not take (as "
                          "TF): cross its raw key instead", i, name,
                          dt_feature_column_type_name(src->type));
    ref->column = col;
    return DT_OK;
}

static dt_status resolve_refs(pctx *c, const cJSON *columns)
{
    dt_features *f = c->f;
    int i = 0;
    for (const cJSON *o = columns->child; o; o = o->next, i++) {
        dt_feature_column *col = &f->cols[i];
        snprintf(c->where, sizeof c->where, "columns[%d] '%s'", i, col->name);
        dt_status st = DT_OK;
        if (col->type == DT_FCOL_BUCKETIZED) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "source");
            int src = cJSON_IsString(s) ? dt_features_find_column(f, s->valuestring) : -1;
            if (!cJSON_IsString(s))
                return spec_error(c, "source: the numeric column to bucketize is missing");
            if (src < 0)
                return spec_error(c, "source: no column is called '%s'", s->valuestring);
            if (f->cols[src].type != DT_FCOL_NUMERIC || f->cols[src].shape != 1)
                return spec_error(c, "source: '%s' is not a numeric column of one value",
                                  s->valuestring);
            col->source = src;
        } else if (col->type == DT_FCOL_CROSSED) {
            const cJSON *keys = cJSON_GetObjectItemCaseSensitive(o, "keys");
            int k = 0;
            for (const cJSON *it = keys->child; it && st == DT_OK; it = it->next, k++)
                st = resolve_cross_key(c, it, k, &col->cross[k]);
            col->n_cross = k;
        } else if (col->type == DT_FCOL_WEIGHTED) {
            const cJSON *cat = cJSON_GetObjectItemCaseSensitive(o, "categorical");
            const cJSON *wk = cJSON_GetObjectItemCaseSensitive(o, "weight_key");
            char name[DT_FEATURE_NAME_CAP];
            if (!cJSON_IsString(cat))
                return spec_error(c, "categorical: the column to weight is missing");
            int src = dt_features_find_column(f, cat->valuestring);
            if (src < 0)
                return spec_error(c, "categorical: no column is called '%s'", cat->valuestring);
            if (!dt_feature_is_categorical(&f->cols[src]) || f->cols[src].type == DT_FCOL_WEIGHTED ||
                f->cols[src].type == DT_FCOL_CROSSED)
                return spec_error(c, "categorical: '%s' is a %s column; a weighted column weights "
                                  "a vocabulary, hash_bucket, identity or bucketized column",
                                  cat->valuestring,
                                  dt_feature_column_type_name(f->cols[src].type));
            col->categorical = src;
            if (!wk)
                return spec_error(c, "weight_key: missing");
            if ((st = get_name(c, wk, "weight_key", name)) ||
                (st = intern_key(c, name, &col->weight_key)))
                return st;
        }
        if (st)
            return st;
    }
    c->where[0] = '\0';
    return DT_OK;
}

/* Columns in the order a row computes them: numeric, then the categorical columns over raw
 * keys, then crosses (over those), then weighted columns (over any of them). */
static int rank_of(const dt_feature_column *c)
{
    switch (c->type) {
    case DT_FCOL_NUMERIC: return 0;
    case DT_FCOL_CROSSED: return 2;
    case DT_FCOL_WEIGHTED: return 3;
    default: return 1;
    }
}

static dt_status plan_order(dt_features *f)
{
    if (!(f->order = malloc((size_t)(f->n_cols ? f->n_cols : 1) * sizeof *f->order)))
        return dt_error(DT_ERR_NOMEM, "no memory for a feature spec");
    int n = 0;
    for (int r = 0; r <= 3; r++)
        for (int i = 0; i < f->n_cols; i++)
            if (rank_of(&f->cols[i]) == r)
                f->order[n++] = i;
    return DT_OK;
}

static int64_t buckets_of(const dt_feature_column *c, const dt_features *f)
{
    if (c->dynamic)
        return 0;
    switch (c->type) {
    case DT_FCOL_NUMERIC: return 0;
    case DT_FCOL_BUCKETIZED:
        return (c->n_boundaries ? c->n_boundaries : c->num_bins - 1) + 1;
    case DT_FCOL_VOCAB_LIST:
    case DT_FCOL_VOCAB_FILE:
    case DT_FCOL_VOCAB: return c->vocab.n + c->num_oov;
    case DT_FCOL_HASH:
    case DT_FCOL_CROSSED: return c->hash_bucket_size;
    case DT_FCOL_IDENTITY: return c->num_buckets;
    case DT_FCOL_WEIGHTED: return buckets_of(&f->cols[c->categorical], f);
    }
    return 0;
}

void dt_features_layout(dt_features *f)
{
    f->n_dense = f->n_slots = 0;
    for (int i = 0; i < f->n_cols; i++) {
        dt_feature_column *c = &f->cols[i];
        if (c->type == DT_FCOL_WEIGHTED) { /* its ids are its column's */
            c->dynamic = f->cols[c->categorical].dynamic;
            c->policy = f->cols[c->categorical].policy;
        }
        c->buckets = buckets_of(c, f);
        if (dt_feature_is_categorical(c)) {
            c->slot = f->n_slots++;
            c->dense_off = -1;
        } else {
            c->slot = -1;
            c->dense_off = f->n_dense;
            f->n_dense += c->shape;
        }
    }
    for (int i = 0; i < f->n_cols; i++)
        if (f->cols[i].slot >= 0)
            f->slot_column[f->cols[i].slot] = i;
}

/* ---- Label ---- */

static dt_status parse_label(pctx *c, const cJSON *l)
{
    snprintf(c->where, sizeof c->where, "label");
    dt_features *f = c->f;
    char name[DT_FEATURE_NAME_CAP];
    dt_status st;
    if (cJSON_IsString(l)) {
        if ((st = get_name(c, l, "label", name)))
            return st;
        return intern_key(c, name, &f->label_key);
    }
    static const char *const fields[] = {"key", "vocabulary", NULL};
    if (!cJSON_IsObject(l))
        return spec_error(c, "expected a key, or {\"key\": k, \"vocabulary\": [...]}");
    if ((st = check_fields(c, l, fields)) ||
        (st = get_name(c, cJSON_GetObjectItemCaseSensitive(l, "key"), "key", name)) ||
        (st = intern_key(c, name, &f->label_key)))
        return st;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(l, "vocabulary");
    if (!v)
        return DT_OK;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 2)
        return spec_error(c, "vocabulary: expected a list of at least two labels");
    f->has_label_vocab = true;
    return tokens_from_json(c, v, "vocabulary", &f->label_vocab);
}

/* ---- Model references ---- */

/* The column a model part's entry names: a name, or {"embedding"|"indicator": name, ...}, or
 * {"shared_embedding": [names], ...} (each of them marked). */
static dt_status mark_entry(pctx *c, const cJSON *e, const char *part, int i)
{
    dt_features *f = c->f;
    const char *names[64];
    int n = 0;
    if (cJSON_IsString(e)) {
        names[n++] = e->valuestring;
    } else if (cJSON_IsObject(e)) {
        const cJSON *emb = cJSON_GetObjectItemCaseSensitive(e, "embedding");
        const cJSON *ind = cJSON_GetObjectItemCaseSensitive(e, "indicator");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shared_embedding");
        const cJSON *one = emb ? emb : ind;
        if (one && cJSON_IsString(one))
            names[n++] = one->valuestring;
        else if (sh && cJSON_IsArray(sh) && cJSON_GetArraySize(sh) >= 1 &&
                 cJSON_GetArraySize(sh) <= 64)
            for (const cJSON *it = sh->child; it; it = it->next)
                if (cJSON_IsString(it))
                    names[n++] = it->valuestring;
    }
    if (n == 0)
        return spec_error(c, "%s[%d]: expected a column name, {\"embedding\": name, \"dimension\": "
                          "d}, {\"indicator\": name} or {\"shared_embedding\": [names], "
                          "\"dimension\": d}", part, i);
    for (int k = 0; k < n; k++) {
        int col = dt_features_find_column(f, names[k]);
        if (col < 0)
            return spec_error(c, "%s[%d]: no column is called '%s'", part, i, names[k]);
        f->cols[col].used = true;
    }
    return DT_OK;
}

static dt_status mark_used(pctx *c)
{
    const cJSON *m = c->f->model;
    snprintf(c->where, sizeof c->where, "model");
    static const char *const parts[] = {"linear_feature_columns", "dnn_feature_columns"};
    for (int p = 0; p < 2; p++) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(m, parts[p]);
        if (!list)
            continue;
        if (!cJSON_IsArray(list))
            return spec_error(c, "%s: expected a list of columns", parts[p]);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            dt_status st = mark_entry(c, e, parts[p], i);
            if (st)
                return st;
        }
    }
    /* Columns other columns read are computed too, and are not unused: through every level (a
     * cross of a bucketized column reads its numeric source), whatever the columns' order. */
    for (bool more = true; more;) {
        more = false;
        for (int i = 0; i < c->f->n_cols; i++) {
            const dt_feature_column *col = &c->f->cols[i];
            int reads[DT_FEATURE_MAX_CROSS + 2], n = 0;
            if (!col->used)
                continue;
            if (col->source >= 0)
                reads[n++] = col->source;
            if (col->categorical >= 0)
                reads[n++] = col->categorical;
            for (int k = 0; k < col->n_cross; k++)
                if (col->cross[k].column >= 0)
                    reads[n++] = col->cross[k].column;
            for (int k = 0; k < n; k++)
                if (!c->f->cols[reads[k]].used)
                    c->f->cols[reads[k]].used = more = true;
        }
    }
    for (int i = 0; i < c->f->n_cols; i++)
        if (!c->f->cols[i].used)
            dt_log_to(NULL, DT_LOG_WARN, "%s: column '%s' is in no part of the model",
                      c->f->source, c->f->cols[i].name);
    c->where[0] = '\0';
    return DT_OK;
}

/* ---- The whole spec ---- */

static dt_status parse_root(pctx *c, const cJSON *root)
{
    dt_features *f = c->f;
    static const char *const fields[] = {"label", "columns", "model", NULL};
    if (!cJSON_IsObject(root))
        return spec_error(c, "expected a JSON object with \"columns\"");
    dt_status st = check_fields(c, root, fields);
    if (st)
        return st;
    const cJSON *cols = cJSON_GetObjectItemCaseSensitive(root, "columns");
    if (!cJSON_IsArray(cols) || cJSON_GetArraySize(cols) < 1 ||
        cJSON_GetArraySize(cols) > MAX_COLUMNS)
        return spec_error(c, "columns: expected a list of 1..%d columns", MAX_COLUMNS);
    int n = cJSON_GetArraySize(cols);
    f->cols = calloc((size_t)n, sizeof *f->cols);
    f->slot_column = calloc((size_t)n, sizeof *f->slot_column);
    if (!f->cols || !f->slot_column)
        return dt_error(DT_ERR_NOMEM, "no memory for a feature spec");
    f->label_key = -1;
    const cJSON *label = cJSON_GetObjectItemCaseSensitive(root, "label");
    if (label && (st = parse_label(c, label)))
        return st;
    int i = 0;
    for (const cJSON *o = cols->child; o; o = o->next, i++) {
        f->n_cols = i + 1;
        if ((st = parse_column(c, o, i)))
            return st;
    }
    if ((st = resolve_refs(c, cols)) || (st = plan_order(f)))
        return st;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model) {
        if (!cJSON_IsObject(model))
            return spec_error(c, "model: expected an object with a type");
        if (!(f->model = cJSON_Duplicate(model, 1)))
            return dt_error(DT_ERR_NOMEM, "no memory for a feature spec");
        if ((st = mark_used(c)))
            return st;
    } else {
        for (int k = 0; k < f->n_cols; k++)
            f->cols[k].used = true;
    }
    /* No column reads the label: not as its key, a crossed key or the weights. */
    for (int k = 0; k < f->n_cols && f->label_key >= 0; k++) {
        const dt_feature_column *col = &f->cols[k];
        bool reads = col->key == f->label_key || col->weight_key == f->label_key;
        for (int i = 0; i < col->n_cross; i++)
            reads = reads || col->cross[i].key == f->label_key;
        if (reads)
            return spec_error(c, "columns[%d] '%s' reads the label's key '%s'", k, col->name,
                              f->keys[f->label_key]);
    }
    dt_features_layout(f);
    return DT_OK;
}

dt_status dt_features_parse(const char *text, const char *source, const char *dir,
                            dt_features **out)
{
    *out = NULL;
    dt_features *f = calloc(1, sizeof *f);
    if (!f)
        return dt_error(DT_ERR_NOMEM, "no memory for a feature spec");
    snprintf(f->source, sizeof f->source, "%s", source ? source : "feature spec");
    snprintf(f->dir, sizeof f->dir, "%s", dir ? dir : "");
    f->label_key = -1;
    pctx c = {.f = f};
    cJSON *root;
    dt_status st = dt_json_parse(text, f->source, &root);
    if (st == DT_OK) {
        st = parse_root(&c, root);
        cJSON_Delete(root);
    }
    if (st) {
        dt_features_destroy(f);
        return st;
    }
    *out = f;
    return DT_OK;
}

dt_status dt_features_load(const char *path, dt_features **out)
{
    *out = NULL;
    char *text = NULL;
    dt_status st = dt_file_read_text(path, SPEC_FILE_MAX, "a feature spec", &text, NULL);
    if (st)
        return st;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        dir[0] = '\0';
    st = dt_features_parse(text, path, dir, out);
    free(text);
    return st;
}

void dt_features_set_unlabeled(dt_features *f, bool unlabeled) { f->unlabeled = unlabeled; }

void dt_features_destroy(dt_features *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n_cols; i++) {
        free(f->cols[i].boundaries);
        dt_vocab_free(&f->cols[i].vocab);
    }
    dt_vocab_free(&f->label_vocab);
    cJSON_Delete(f->model);
    free(f->columns);
    free(f->cols);
    free(f->slot_column);
    free(f->order);
    free(f->keys);
    free(f);
}

bool dt_features_needs_adapt(const dt_features *f)
{
    for (int i = 0; i < f->n_cols; i++)
        if (!f->cols[i].adapted)
            return true;
    return false;
}

int dt_features_num_keys(const dt_features *f) { return f->n_keys; }
const char *dt_features_key(const dt_features *f, int i) { return f->keys[i]; }
int dt_features_label_key(const dt_features *f) { return f->label_key; }
int dt_features_num_columns(const dt_features *f) { return f->n_cols; }
const char *dt_features_column_name(const dt_features *f, int i) { return f->cols[i].name; }
dt_feature_column_type dt_features_column_type(const dt_features *f, int i)
{
    return f->cols[i].type;
}
int dt_features_column_slot(const dt_features *f, int i) { return f->cols[i].slot; }
int64_t dt_features_column_buckets(const dt_features *f, int i) { return f->cols[i].buckets; }
bool dt_features_column_dynamic(const dt_features *f, int i) { return f->cols[i].dynamic; }
int dt_features_column_dense(const dt_features *f, int i, int *width)
{
    *width = f->cols[i].type == DT_FCOL_NUMERIC ? f->cols[i].shape : 0;
    return f->cols[i].dense_off;
}
int dt_features_dense_width(const dt_features *f) { return f->n_dense; }
int dt_features_num_slots(const dt_features *f) { return f->n_slots; }
int dt_features_slot_column(const dt_features *f, int slot) { return f->slot_column[slot]; }
