/* Fuzz target: dt_example_read, the reader of every feature of a tf.train.Example, on arbitrary
 * bytes (the seeds are the fixture's records and a few by hand: a key given twice, two Features
 * messages, empty and unset lists, an entry without a key). Any status is fine; a crash, a
 * sanitizer report or a broken invariant is not:
 *   - the status is the JSON listing's, which decodes every value of every entry too (both fail
 *     on exactly the malformed records), and a failure gives no features;
 *   - a success gives features with the kind's pointer set and the others NULL, no values without
 *     a list, distinct keys, and keys and bytes values inside the input;
 *   - a reader kept across inputs (its buffers and key table grown by earlier ones) reads what a
 *     fresh one reads;
 *   - the general decoder, with a spec naming the seeds' keys as variable-length features, finds
 *     the same values: each int64 an entry with that id, each float an entry (position, value),
 *     and fails on a key whose list is a bytes_list. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/example.h"
#include "fuzz.h"

static int sane(const dt_example_feature *fs, size_t n, const uint8_t *data, size_t size)
{
    const char *lo = (const char *)data, *hi = lo + size;
    if (n > size / 2) /* a map entry takes two bytes at least */
        return 0;
    for (size_t i = 0; i < n; i++) {
        const dt_example_feature *f = &fs[i];
        if (!f->key || (f->key_len && (f->key < lo || f->key_len > (size_t)(hi - f->key))))
            return 0;
        if ((f->ints != NULL) != (f->kind == DT_FEATURE_INT64) ||
            (f->floats != NULL) != (f->kind == DT_FEATURE_FLOAT) ||
            (f->bytes != NULL) != (f->kind == DT_FEATURE_BYTES) ||
            (f->bytes_len != NULL) != (f->kind == DT_FEATURE_BYTES) || (!f->kind && f->n))
            return 0;
        for (size_t k = 0; f->kind == DT_FEATURE_BYTES && k < f->n; k++)
            if (f->bytes[k] < data || f->bytes_len[k] > (size_t)(data + size - f->bytes[k]))
                return 0;
        for (size_t j = 0; j < i; j++)
            if (fs[j].key_len == f->key_len && memcmp(fs[j].key, f->key, f->key_len) == 0)
                return 0;
    }
    return 1;
}

/* Copies of a read's features (the reader's buffers change with its next read). */
typedef struct {
    dt_example_feature *f;
    size_t n;
    void **values; /* each feature's values, copied */
} copy;

static void copy_free(copy *c)
{
    for (size_t i = 0; c->values && i < c->n; i++)
        free(c->values[i]);
    free(c->values);
    free(c->f);
}

static size_t value_bytes(const dt_example_feature *f)
{
    return f->kind == DT_FEATURE_INT64   ? f->n * sizeof(int64_t)
           : f->kind == DT_FEATURE_FLOAT ? f->n * sizeof(float)
                                         : f->n * (sizeof(const uint8_t *) + sizeof(size_t));
}

static void copy_take(copy *c, const dt_example_feature *fs, size_t n)
{
    c->n = n;
    c->f = malloc((n ? n : 1) * sizeof *c->f);
    c->values = calloc(n ? n : 1, sizeof *c->values);
    REQUIRE(c->f && c->values);
    memcpy(c->f, fs, n * sizeof *fs);
    for (size_t i = 0; i < n; i++) {
        const dt_example_feature *f = &fs[i];
        uint8_t *v = malloc(value_bytes(f) + 1);
        REQUIRE(v);
        if (f->kind == DT_FEATURE_INT64)
            memcpy(v, f->ints, value_bytes(f));
        else if (f->kind == DT_FEATURE_FLOAT)
            memcpy(v, f->floats, value_bytes(f));
        else if (f->kind == DT_FEATURE_BYTES) {
            memcpy(v, f->bytes, f->n * sizeof(const uint8_t *));
            memcpy(v + f->n * sizeof(const uint8_t *), f->bytes_len, f->n * sizeof(size_t));
        }
        c->values[i] = v;
    }
}

static int same_as_copy(const copy *c, const dt_example_feature *fs, size_t n)
{
    if (n != c->n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const dt_example_feature *a = &c->f[i], *b = &fs[i];
        if (a->key != b->key || a->key_len != b->key_len || a->kind != b->kind || a->n != b->n)
            return 0;
        const uint8_t *v = c->values[i];
        if (b->kind == DT_FEATURE_INT64 && memcmp(v, b->ints, value_bytes(b)) != 0)
            return 0;
        if (b->kind == DT_FEATURE_FLOAT && memcmp(v, b->floats, value_bytes(b)) != 0)
            return 0;
        if (b->kind == DT_FEATURE_BYTES &&
            (memcmp(v, b->bytes, b->n * sizeof(const uint8_t *)) != 0 ||
             memcmp(v + b->n * sizeof(const uint8_t *), b->bytes_len, b->n * sizeof(size_t)) != 0))
            return 0;
    }
    return 1;
}

/* The features the spec names, through the general decoder: the same values in the row's
 * sparse entries, spec feature after spec feature. */
static void same_as_general_decoder(const dt_example_feature *fs, size_t n, const uint8_t *data,
                                    size_t size)
{
    static dt_example_spec spec;
    static int ready;
    if (!ready) {
        REQUIRE(dt_example_spec_parse("floats:0,ids:0,ints:0,w:0,opt:0,label:0,values:0", "",
                                      &spec) == DT_OK);
        ready = 1;
    }
    dt_rowbuf rb;
    dt_rowbuf_init(&rb, 0);
    dt_status st = dt_example_parse(&spec, data, size, &rb);
    int has_bytes = 0;
    size_t at = 0;
    for (int s = 0; s < spec.n_features; s++) {
        const char *key = spec.features[s].key;
        size_t klen = strlen(key);
        const dt_example_feature *f = NULL;
        for (size_t i = 0; i < n && !f; i++)
            if (fs[i].key_len == klen && memcmp(fs[i].key, key, klen) == 0)
                f = &fs[i];
        if (!f || !f->kind)
            continue;
        if (f->kind == DT_FEATURE_BYTES) {
            has_bytes = 1;
            continue;
        }
        for (size_t k = 0; st == DT_OK && k < f->n; k++, at++) {
            REQUIRE(at < rb.nnz);
            if (f->kind == DT_FEATURE_INT64) {
                REQUIRE(rb.sp_ids[at] == f->ints[k] && rb.sp_vals[at] == 1.0f);
            } else {
                float v = f->floats[k], w = rb.sp_vals[at];
                REQUIRE(rb.sp_ids[at] == (int64_t)k &&
                        (memcmp(&v, &w, sizeof v) == 0 || (isnan(v) && isnan(w))));
            }
        }
    }
    if (has_bytes)
        REQUIRE(st == DT_ERR_FORMAT || st == DT_ERR_NOMEM);
    else if (st != DT_ERR_NOMEM)
        REQUIRE(st == DT_OK && rb.n == 1 && rb.nnz == at);
    dt_rowbuf_free(&rb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static dt_example_reader *kept;
    if (!kept)
        REQUIRE(dt_example_reader_new(&kept) == DT_OK);
    dt_example_reader *fresh;
    REQUIRE(dt_example_reader_new(&fresh) == DT_OK);
    const dt_example_feature *fs = NULL;
    size_t n = 1;
    dt_status st = dt_example_read(fresh, data, size, &fs, &n);
    char *text = NULL;
    dt_status sj = dt_example_to_json(data, size, &text);
    free(text);
    if (st != DT_ERR_NOMEM && sj != DT_ERR_NOMEM)
        REQUIRE(st == sj);
    if (st != DT_OK) {
        REQUIRE((st == DT_ERR_FORMAT || st == DT_ERR_NOMEM) && fs == NULL && n == 0);
        REQUIRE(st != DT_ERR_FORMAT || strncmp(dt_last_error(), "byte ", 5) == 0);
        REQUIRE(dt_example_read(kept, data, size, &fs, &n) == st && fs == NULL && n == 0);
        dt_example_reader_free(fresh);
        return 0;
    }
    REQUIRE(sane(fs, n, data, size));
    copy c;
    copy_take(&c, fs, n);
    REQUIRE(dt_example_read(kept, data, size, &fs, &n) == DT_OK && same_as_copy(&c, fs, n));
    same_as_general_decoder(fs, n, data, size);
    /* Read again by the fresh reader, its buffers now grown: the same. */
    REQUIRE(dt_example_read(fresh, data, size, &fs, &n) == DT_OK && same_as_copy(&c, fs, n));
    copy_free(&c);
    dt_example_reader_free(fresh);
    return 0;
}
