/* The spec of the features to read from tf.train.Example records (see include/dtrain/example.h):
 * parsed from its text (key:length[:scale[:default]], ...), checked, and given the key table
 * (example_int.h) through which every decoder finds a key. */
#include "example_int.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void table_insert(dt_example_spec *spec, int idx)
{
    uint32_t h = key_hash((const uint8_t *)spec_key(spec, idx), spec->key_len[idx]);
    while (spec->slots[h])
        h = (h + 1) & 255;
    spec->slots[h] = (uint8_t)(idx + 1);
}

dt_status dt_example_spec_finalize(dt_example_spec *spec)
{
    spec->ready = 0;
    if (spec->n_features < 0 || spec->n_features > DT_EXAMPLE_MAX_FEATURES)
        return dt_error(DT_ERR_INVALID, "example spec: %d features (0..%d)", spec->n_features,
                        DT_EXAMPLE_MAX_FEATURES);
    size_t label_len = strnlen(spec->label_key, DT_EXAMPLE_KEY_CAP);
    if (label_len == DT_EXAMPLE_KEY_CAP)
        return dt_error(DT_ERR_INVALID, "example spec: the label key is longer than %d bytes",
                        DT_EXAMPLE_KEY_CAP - 1);
    memset(spec->slots, 0, sizeof spec->slots);
    memset(spec->key_len, 0, sizeof spec->key_len);
    long long dense = 0;
    for (int i = 0; i < spec->n_features; i++) {
        dt_feature_spec *f = &spec->features[i];
        size_t n = strnlen(f->key, DT_EXAMPLE_KEY_CAP);
        if (n == 0)
            return dt_error(DT_ERR_INVALID, "example spec: feature %d has an empty key", i);
        if (n == DT_EXAMPLE_KEY_CAP)
            return dt_error(DT_ERR_INVALID, "example spec: feature %d: key '%.20s...' is longer "
                            "than %d bytes", i, f->key, DT_EXAMPLE_KEY_CAP - 1);
        for (int j = 0; j < i; j++)
            if (strcmp(spec->features[j].key, f->key) == 0)
                return dt_error(DT_ERR_INVALID, "example spec: feature '%s' is listed twice",
                                f->key);
        if (label_len && strcmp(spec->label_key, f->key) == 0)
            return dt_error(DT_ERR_INVALID, "example spec: '%s' is both the label and a feature",
                            f->key);
        if (f->length < 0)
            return dt_error(DT_ERR_INVALID, "example spec: feature '%s' has length %d (0 for "
                            "variable length, > 0 for fixed)", f->key, f->length);
        if (f->scale == 0.0f)
            f->scale = 1.0f;
        if (!isfinite(f->divisor) || f->divisor < 0.0f)
            return dt_error(DT_ERR_INVALID, "example spec: feature '%s' has divisor %g", f->key,
                            (double)f->divisor);
        if (!isfinite(f->scale))
            return dt_error(DT_ERR_INVALID, "example spec: feature '%s' has scale %g", f->key,
                            (double)f->scale);
        if (f->has_default && f->length == 0)
            return dt_error(DT_ERR_INVALID, "example spec: feature '%s': a default needs a fixed "
                            "length", f->key);
        spec->dense_off[i] = (int)dense;
        dense += f->length;
        if (dense > DT_EXAMPLE_MAX_DENSE)
            return dt_error(DT_ERR_INVALID, "example spec: more than %d dense values (at feature "
                            "'%s')", DT_EXAMPLE_MAX_DENSE, f->key);
        spec->key_len[i] = (uint8_t)n;
        table_insert(spec, i);
    }
    if (label_len) {
        spec->key_len[LABEL_IDX] = (uint8_t)label_len;
        table_insert(spec, LABEL_IDX);
    }
    spec->n_dense = (int)dense;
    if (spec->ctr_fields < 0 || spec->ctr_max_id < 0 || spec->ctr_hash_buckets < 0)
        return dt_error(DT_ERR_INVALID, "example spec: ctr_fields %d, ctr_max_id %lld, "
                        "ctr_hash_buckets %lld", spec->ctr_fields, (long long)spec->ctr_max_id,
                        (long long)spec->ctr_hash_buckets);
    if (spec->ctr_fields > 0 && (spec->n_features != 2 || spec->features[0].length != 0 ||
                                 spec->features[1].length != 0))
        return dt_error(DT_ERR_INVALID, "example spec: CTR rows take two variable-length "
                        "features, the ids and the values");
    if (spec->ctr_columns &&
        (spec->ctr_fields > 0 || spec->ctr_numeric < 0 || spec->ctr_numeric > spec->n_features ||
         spec->n_features < 1 || spec->n_dense != 0 ||
         (spec->ctr_numeric < spec->n_features && spec->ctr_hash_buckets <= spec->ctr_numeric)))
        return dt_error(DT_ERR_INVALID, "example spec: CTR columns take variable-length "
                        "features, and hash buckets beyond the %d numeric fields' rows",
                        spec->ctr_numeric);
    /* The fast path fills dense rows only: variable-length features take the general one. */
    spec->fast = 1;
    for (int i = 0; i < spec->n_features; i++)
        if (spec->features[i].length == 0)
            spec->fast = 0;
    spec->ctr_fast = spec->ctr_fields > 0; /* its own fast path: ids and values into entries */
    spec->ready = 1;
    return DT_OK;
}

/* A number, or a fraction a/b kept as a scale and a divisor, the whole string. */
static int parse_scale(const char *s, float *out, float *divisor)
{
    char *end;
    double a = strtod(s, &end), b = 0.0;
    if (end == s)
        return 0;
    if (*end == '/') {
        const char *t = end + 1;
        b = strtod(t, &end);
        if (end == t || b == 0.0 || !(fabs(b) <= FLT_MAX))
            return 0;
    }
    /* Out of float's range the conversion would be undefined; below it, the scale would be 0. */
    if (*end != '\0' || !(fabs(a) <= FLT_MAX) || a == 0.0 || (float)a == 0.0f)
        return 0;
    *out = (float)a;
    *divisor = (float)b;
    return 1;
}

dt_status dt_example_spec_parse(const char *features, const char *label_key, dt_example_spec *out)
{
    memset(out, 0, sizeof *out);
    if (!label_key)
        label_key = "";
    if (strlen(label_key) >= DT_EXAMPLE_KEY_CAP)
        return dt_error(DT_ERR_INVALID, "label key '%s' is longer than %d bytes", label_key,
                        DT_EXAMPLE_KEY_CAP - 1);
    strcpy(out->label_key, label_key);
    const char *p = features ? features : "";
    while (*p == ' ')
        p++;
    int item = 0;
    while (*p) {
        char buf[256];
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        item++;
        while (n > 0 && p[n - 1] == ' ')
            n--;
        if (n >= sizeof buf)
            return dt_error(DT_ERR_INVALID, "features item %d ('%.40s...') is too long", item, p);
        memcpy(buf, p, n);
        buf[n] = '\0';
        p = comma ? comma + 1 : p + strlen(p);
        while (*p == ' ')
            p++;
        if (comma && !*p)
            return dt_error(DT_ERR_INVALID, "features: empty item after item %d '%s'", item, buf);
        if (n == 0)
            return dt_error(DT_ERR_INVALID, "features item %d is empty", item);
        if (out->n_features == DT_EXAMPLE_MAX_FEATURES)
            return dt_error(DT_ERR_INVALID, "features item %d '%s': more than %d features", item,
                            buf, DT_EXAMPLE_MAX_FEATURES);
        /* Split at the colons; item_text keeps the item as written, for messages. */
        char item_text[256];
        memcpy(item_text, buf, n + 1);
        char *parts[4] = {buf, NULL, NULL, NULL};
        int n_parts = 1;
        for (char *c = buf; *c; c++) {
            if (*c != ':')
                continue;
            if (n_parts == 4)
                return dt_error(DT_ERR_INVALID, "features item '%s': expected key:length[:scale"
                                "[:default]]", item_text);
            *c = '\0';
            parts[n_parts++] = c + 1;
        }
        dt_feature_spec *f = &out->features[out->n_features];
        if (n_parts < 2)
            return dt_error(DT_ERR_INVALID, "features item '%s': expected key:length[:scale"
                            "[:default]]", item_text);
        size_t klen = strlen(parts[0]);
        if (klen == 0 || klen >= DT_EXAMPLE_KEY_CAP)
            return dt_error(DT_ERR_INVALID, "features item '%s': the key must have 1 to %d bytes",
                            item_text, DT_EXAMPLE_KEY_CAP - 1);
        memcpy(f->key, parts[0], klen + 1);
        char *end;
        long len = strtol(parts[1], &end, 10);
        if (end == parts[1] || *end || len < 0 || len > DT_EXAMPLE_MAX_DENSE)
            return dt_error(DT_ERR_INVALID, "features item '%s': length '%s' is not an integer in "
                            "0..%d (0: variable length)", item_text, parts[1], DT_EXAMPLE_MAX_DENSE);
        f->length = (int)len;
        f->scale = 1.0f;
        if (n_parts > 2 && !parse_scale(parts[2], &f->scale, &f->divisor))
            return dt_error(DT_ERR_INVALID, "features item '%s': scale '%s' is not a non-zero "
                            "number or fraction a/b", item_text, parts[2]);
        if (n_parts > 3) {
            double d = strtod(parts[3], &end);
            if (end == parts[3] || *end || !(fabs(d) <= FLT_MAX))
                return dt_error(DT_ERR_INVALID, "features item '%s': default '%s' is not a finite "
                                "float", item_text, parts[3]);
            if (len == 0)
                return dt_error(DT_ERR_INVALID, "features item '%s': a default needs a fixed "
                                "length", item_text);
            f->has_default = true;
            f->default_value = (float)d;
        }
        out->n_features++;
    }
    return dt_example_spec_finalize(out);
}
