/* Feature specs and transformed rows as JSON (features.h): the spec written back with what a
 * pass over the data adapted (so that every later reader of a model directory, evaluation,
 * restore, predict, reads the same vocabularies and statistics), and rows as `dtrain data
 * transform` prints them. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/dynamic_json.h"
#include "features_int.h"

static bool add_tokens(cJSON *o, const char *field, const dt_vocab *v)
{
    cJSON *arr = cJSON_AddArrayToObject(o, field);
    for (int64_t i = 0; arr && i < v->n; i++) {
        cJSON *t = cJSON_CreateString(dt_vocab_token(v, i));
        if (!t || !cJSON_AddItemToArray(arr, t))
            return false;
    }
    return arr != NULL;
}

static bool add_name(cJSON *o, const char *field, const char *name)
{
    return cJSON_AddStringToObject(o, field, name) != NULL;
}

static bool add_oov(cJSON *o, const dt_feature_column *c)
{
    if (c->num_oov > 0)
        return cJSON_AddNumberToObject(o, "num_oov_buckets", (double)c->num_oov) != NULL;
    if (c->has_cat_default)
        return cJSON_AddNumberToObject(o, "default_value", (double)c->cat_default) != NULL;
    return true;
}

static bool add_separator(cJSON *o, const dt_feature_column *c)
{
    char sep[2] = {c->separator, '\0'};
    return !c->separator || cJSON_AddStringToObject(o, "separator", sep) != NULL;
}

static bool numeric_json(cJSON *o, const dt_features *f, const dt_feature_column *c)
{
    bool ok = add_name(o, "key", f->keys[c->key]);
    if (c->shape != 1)
        ok = ok && cJSON_AddNumberToObject(o, "shape", c->shape);
    if (c->has_default)
        ok = ok && cJSON_AddNumberToObject(o, "default_value", c->default_value);
    if (c->norm == DT_NORM_LOG1P)
        return ok && cJSON_AddStringToObject(o, "normalizer", "log1p");
    if (c->norm == DT_NORM_STANDARDIZE && !c->adapted)
        return ok && cJSON_AddStringToObject(o, "normalizer", "standardize");
    if (c->norm == DT_NORM_STANDARDIZE || c->norm == DT_NORM_FIXED) {
        cJSON *n = cJSON_AddObjectToObject(o, "normalizer");
        ok = ok && n && cJSON_AddNumberToObject(n, "mean", c->mean) &&
             cJSON_AddNumberToObject(n, "std", c->std);
        if (c->norm == DT_NORM_STANDARDIZE)
            ok = ok && cJSON_AddTrueToObject(n, "adapted");
    }
    return ok;
}

static bool bucketized_json(cJSON *o, const dt_features *f, const dt_feature_column *c)
{
    bool ok = add_name(o, "source", f->cols[c->source].name);
    if (c->n_boundaries == 0) {
        cJSON *b = cJSON_AddObjectToObject(o, "boundaries");
        return ok && b && cJSON_AddNumberToObject(b, "num_bins", c->num_bins);
    }
    cJSON *arr = cJSON_CreateDoubleArray(c->boundaries, c->n_boundaries);
    return ok && arr && cJSON_AddItemToObject(o, "boundaries", arr);
}

static bool vocab_json(cJSON *o, const dt_features *f, const dt_feature_column *c)
{
    bool ok = add_name(o, "key", f->keys[c->key]) && add_separator(o, c) && add_oov(o, c);
    if (c->type == DT_FCOL_VOCAB_FILE) {
        /* The file as an absolute path: vocab_path is already resolved against the spec's
         * directory, and the spec written may be read from another one (a model directory), or
         * from the same one, which a relative path would name twice. */
        char *abs = realpath(c->vocab_path, NULL);
        ok = ok && add_name(o, "vocabulary_file", abs ? abs : c->vocab_path);
        free(abs);
        if (c->vocab_size > 0)
            ok = ok && cJSON_AddNumberToObject(o, "vocabulary_size", (double)c->vocab_size);
        return ok;
    }
    if (c->type == DT_FCOL_VOCAB) {
        cJSON *a = cJSON_AddObjectToObject(o, "adapt");
        ok = ok && a && cJSON_AddNumberToObject(a, "min_count", (double)c->adapt_min_count);
        if (c->adapt_max_tokens > 0)
            ok = ok && cJSON_AddNumberToObject(a, "max_tokens", (double)c->adapt_max_tokens);
        if (!c->adapted)
            return ok;
    }
    return ok && add_tokens(o, "vocabulary", &c->vocab);
}

/* A dynamic column's "dynamic": true and policy, or a fixed one's bucket count. */
static bool add_buckets(cJSON *o, const dt_feature_column *c, const char *field, int64_t n)
{
    if (!c->dynamic)
        return cJSON_AddNumberToObject(o, field, (double)n) != NULL;
    return cJSON_AddBoolToObject(o, "dynamic", 1) && dt_dynamic_policy_to_json(o, &c->policy);
}

static bool crossed_json(cJSON *o, const dt_features *f, const dt_feature_column *c)
{
    cJSON *keys = cJSON_AddArrayToObject(o, "keys");
    bool ok = keys && add_buckets(o, c, "hash_bucket_size", c->hash_bucket_size);
    if (c->hash_key != 0xDECAFCAFFEull)
        ok = ok && cJSON_AddNumberToObject(o, "hash_key", (double)c->hash_key);
    for (int k = 0; ok && k < c->n_cross; k++) {
        cJSON *ref = cJSON_CreateObject();
        ok = ref && cJSON_AddItemToArray(keys, ref);
        if (ok && c->cross[k].key >= 0)
            ok = add_name(ref, "key", f->keys[c->cross[k].key]);
        else if (ok)
            ok = add_name(ref, "column", f->cols[c->cross[k].column].name);
    }
    return ok;
}

static bool column_json(cJSON *o, const dt_features *f, const dt_feature_column *c)
{
    if (!add_name(o, "name", c->name) || !add_name(o, "type", dt_feature_column_type_name(c->type)))
        return false;
    switch (c->type) {
    case DT_FCOL_NUMERIC: return numeric_json(o, f, c);
    case DT_FCOL_BUCKETIZED: return bucketized_json(o, f, c);
    case DT_FCOL_VOCAB_LIST:
    case DT_FCOL_VOCAB_FILE:
    case DT_FCOL_VOCAB: return vocab_json(o, f, c);
    case DT_FCOL_HASH:
        return add_name(o, "key", f->keys[c->key]) && add_separator(o, c) &&
               add_buckets(o, c, "hash_bucket_size", c->hash_bucket_size);
    case DT_FCOL_IDENTITY:
        return add_name(o, "key", f->keys[c->key]) && add_separator(o, c) &&
               add_buckets(o, c, "num_buckets", c->num_buckets) &&
               (!c->has_cat_default ||
                cJSON_AddNumberToObject(o, "default_value", (double)c->cat_default));
    case DT_FCOL_CROSSED: return crossed_json(o, f, c);
    case DT_FCOL_WEIGHTED:
        return add_name(o, "categorical", f->cols[c->categorical].name) &&
               add_name(o, "weight_key", f->keys[c->weight_key]);
    }
    return false;
}

char *dt_features_to_json(const dt_features *f)
{
    cJSON *root = cJSON_CreateObject();
    bool ok = root != NULL;
    if (ok && f->label_key >= 0) {
        cJSON *l = cJSON_AddObjectToObject(root, "label");
        ok = l && add_name(l, "key", f->keys[f->label_key]);
        if (ok && f->has_label_vocab)
            ok = add_tokens(l, "vocabulary", &f->label_vocab);
    }
    cJSON *cols = ok ? cJSON_AddArrayToObject(root, "columns") : NULL;
    ok = ok && cols;
    for (int i = 0; ok && i < f->n_cols; i++) {
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(cols, o) && column_json(o, f, &f->cols[i]);
    }
    if (ok && f->model) {
        cJSON *m = cJSON_Duplicate(f->model, 1);
        ok = m && cJSON_AddItemToObject(root, "model", m);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* ---- Rows ---- */

/* The shortest decimal that reads back as the same float, as a double: 0.1f prints as 0.1,
 * not 0.10000000149011612. */
static double short_float(float x)
{
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)x);
        if ((float)strtod(buf, NULL) == x)
            break;
    }
    return strtod(buf, NULL);
}

static cJSON *float_array(const float *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        if (!cJSON_AddItemToArray(a, cJSON_CreateNumber(short_float(v[i])))) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

/* An id in exact decimal digits: a dynamic column's key passes 2^53, where a double rounds. */
static cJSON *json_id(int64_t id)
{
    char text[24];
    snprintf(text, sizeof text, "%lld", (long long)id);
    return cJSON_CreateRaw(text);
}

char *dt_features_row_json(const dt_features *f, const dt_elem *e, int r)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL;
    if (ok && f->label_key >= 0)
        ok = cJSON_AddNumberToObject(o, "label", short_float(e->labels[r])) != NULL;
    int64_t lo = e->sp_row[r], hi = e->sp_row[r + 1];
    for (int i = 0; ok && i < f->n_cols; i++) {
        const dt_feature_column *c = &f->cols[i];
        if (!c->used)
            continue;
        if (c->type == DT_FCOL_NUMERIC) {
            cJSON *v = float_array(e->dense + (size_t)r * e->n_dense + c->dense_off, c->shape);
            ok = v && cJSON_AddItemToObject(o, c->name, v);
            continue;
        }
        cJSON *col = cJSON_AddObjectToObject(o, c->name);
        cJSON *ids = col ? cJSON_AddArrayToObject(col, "ids") : NULL;
        ok = ids != NULL;
        bool weighted = c->type == DT_FCOL_WEIGHTED;
        /* A dynamic column's key takes two entries, read as one. */
        int step = c->dynamic ? 2 : 1;
        cJSON *ws = ok && weighted ? cJSON_AddArrayToObject(col, "weights") : NULL;
        ok = ok && (ws || !weighted);
        for (int64_t j = lo; ok && j + step <= hi; j++) {
            if (dt_feature_entry_slot(e->sp_ids[j]) != c->slot)
                continue;
            int64_t id = c->dynamic ? dt_feature_entry_key(e->sp_ids[j], e->sp_ids[j + 1])
                                    : dt_feature_entry_id(e->sp_ids[j]);
            ok = cJSON_AddItemToArray(ids, json_id(id)) &&
                 (!ws || cJSON_AddItemToArray(ws, cJSON_CreateNumber(short_float(e->sp_vals[j]))));
            j += step - 1;
        }
    }
    char *text = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return text;
}
