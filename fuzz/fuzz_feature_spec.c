/* Fuzz target: feature specs (src/features) on arbitrary bytes. The input is a spec, a line
 * "%%", and data (so seeds are readable files):
 *     {"columns": [...]}
 *     %%
 *     39,Bachelors,...
 * The spec goes to dt_features_parse; when it parses, a CSV header naming the spec's keys in
 * order and the data's first line go through dt_feature_text_new and dt_feature_text_parse (and
 * the line as Criteo TSV, when the keys are Criteo's), and the whole data as a tf.Example record
 * through dt_features_transform_example. Checked, beyond the sanitizers:
 *   - a parse error is DT_ERR_INVALID, DT_ERR_IO or DT_ERR_NOMEM, leaves *out NULL and names the
 *     spec ("fuzz.json: ...");
 *   - the spec written back as JSON parses again, to the same keys, columns, slots and dense
 *     width, and is written the same way again;
 *   - a transform adds exactly one row on success and none otherwise, the same row when repeated
 *     with the same scratch; every sparse entry carries a slot of the spec, in slot order, and an
 *     id within its column's buckets; labels and weights are finite, dense values not NaN (once
 *     nothing is left to adapt); the row's JSON line is JSON.
 * Vocabulary files: a spec is only parsed when every "vocabulary_file" it names is a regular file
 * of at most 64 KiB (not /dev/zero, a FIFO or /proc), so that no input hangs the fuzzer. The
 * seed vocab_tokens.txt is one (named by the seeds from the repository's root, where
 * tests/fuzz.sh runs). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dtrain/features.h"
#include "dtrain/log.h"
#include "fuzz.h"

/* Whether every "vocabulary_file" anywhere in the JSON is a small regular file. */
static int files_are_safe(const cJSON *j)
{
    for (const cJSON *it = j ? j->child : NULL; it; it = it->next) {
        if (it->string && strcmp(it->string, "vocabulary_file") == 0 && cJSON_IsString(it)) {
            struct stat st;
            const char *p = it->valuestring;
            if (strstr(p, "proc") || stat(p, &st) != 0 || !S_ISREG(st.st_mode) ||
                st.st_size > 65536)
                return 0;
        }
        if (!files_are_safe(it))
            return 0;
    }
    return 1;
}

/* The last row of b, just added: entries, ids, labels, weights and its JSON line. */
static void check_row(const dt_features *f, dt_rowbuf *b)
{
    REQUIRE(b->n == 1);
    REQUIRE(isfinite(b->labels[0]));
    int last = 0;
    for (int64_t j = b->sp_row[0]; j < b->sp_row[1]; j++) {
        int64_t e = b->sp_ids[j];
        REQUIRE(e >= 0);
        int slot = dt_feature_entry_slot(e);
        REQUIRE(slot >= last && slot < dt_features_num_slots(f));
        last = slot;
        int col = dt_features_slot_column(f, slot);
        int64_t id = dt_feature_entry_id(e);
        REQUIRE(id >= 0 && id < dt_features_column_buckets(f, col));
        REQUIRE(isfinite(b->sp_vals[j]));
    }
    REQUIRE((size_t)b->sp_row[1] == b->nnz);
    if (!dt_features_needs_adapt(f))
        for (int i = 0; i < b->n_dense; i++)
            REQUIRE(!isnan(b->dense[i]));
}

static void check_json_line(const dt_features *f, dt_rowbuf *b)
{
    dt_elem *e = dt_rowbuf_take(b);
    if (!e)
        return;
    char *line = dt_features_row_json(f, e, 0);
    if (line) {
        cJSON *j = cJSON_Parse(line);
        REQUIRE(j != NULL);
        cJSON_Delete(j);
    }
    free(line);
    dt_elem_free(e);
}

static int same_rows(const dt_rowbuf *a, const dt_rowbuf *b)
{
    size_t nd = (size_t)a->n * (size_t)a->n_dense;
    return a->n == b->n && a->nnz == b->nnz &&
           (nd == 0 || memcmp(a->dense, b->dense, nd * sizeof(float)) == 0) &&
           (a->n == 0 || memcmp(a->labels, b->labels, (size_t)a->n * sizeof(float)) == 0) &&
           (a->nnz == 0 || (memcmp(a->sp_ids, b->sp_ids, a->nnz * sizeof(int64_t)) == 0 &&
                            memcmp(a->sp_vals, b->sp_vals, a->nnz * sizeof(float)) == 0));
}

/* A transform's outcome: a row on success, none otherwise; the same twice. */
typedef dt_status (*transform_fn)(const dt_features *f, const void *ctx, dt_feature_scratch *s,
                                  const uint8_t *data, size_t n, dt_rowbuf *out);

static void check_transform(const dt_features *f, transform_fn fn, const void *ctx,
                            const uint8_t *data, size_t n, int may_end)
{
    dt_feature_scratch *s = NULL;
    if (dt_feature_scratch_new(f, &s) != DT_OK)
        return;
    dt_rowbuf a, b;
    dt_rowbuf_init(&a, dt_features_dense_width(f));
    dt_rowbuf_init(&b, dt_features_dense_width(f));
    dt_status st = fn(f, ctx, s, data, n, &a);
    REQUIRE(st == DT_OK || st == DT_ERR_FORMAT || st == DT_ERR_NOMEM || (may_end && st == DT_END));
    REQUIRE(a.n == (st == DT_OK));
    if (st == DT_OK)
        check_row(f, &a);
    else if (st == DT_ERR_FORMAT)
        REQUIRE(a.nnz == 0);
    dt_status st2 = fn(f, ctx, s, data, n, &b);
    REQUIRE(st2 == st || st == DT_ERR_NOMEM || st2 == DT_ERR_NOMEM);
    if (st == DT_OK && st2 == DT_OK)
        REQUIRE(same_rows(&a, &b));
    if (st == DT_OK)
        check_json_line(f, &a);
    dt_rowbuf_free(&a);
    dt_rowbuf_free(&b);
    dt_feature_scratch_free(s);
}

static dt_status text_fn(const dt_features *f, const void *ctx, dt_feature_scratch *s,
                         const uint8_t *data, size_t n, dt_rowbuf *out)
{
    return dt_feature_text_parse(f, ctx, s, (const char *)data, n, out);
}

static dt_status example_fn(const dt_features *f, const void *ctx, dt_feature_scratch *s,
                            const uint8_t *data, size_t n, dt_rowbuf *out)
{
    (void)ctx;
    return dt_features_transform_example(f, s, data, n, out);
}

static void check_text(const dt_features *f, const uint8_t *rest, size_t rest_len)
{
    const uint8_t *nl = memchr(rest, '\n', rest_len);
    size_t line_len = nl ? (size_t)(nl - rest) : rest_len;
    size_t cap = 1;
    for (int k = 0; k < dt_features_num_keys(f); k++)
        cap += strlen(dt_features_key(f, k)) + 1;
    char *header = malloc(cap);
    if (!header)
        return;
    header[0] = '\0';
    for (int k = 0; k < dt_features_num_keys(f); k++) {
        if (k)
            strcat(header, ",");
        strcat(header, dt_features_key(f, k));
    }
    for (int criteo = 0; criteo < 2; criteo++) {
        dt_feature_text *t = (dt_feature_text *)header;
        dt_status st = criteo ? dt_feature_text_new(f, NULL, 0, '\t', &t)
                              : dt_feature_text_new(f, header, strlen(header), ',', &t);
        REQUIRE(st == DT_OK || st == DT_ERR_INVALID || st == DT_ERR_FORMAT || st == DT_ERR_NOMEM);
        REQUIRE((st == DT_OK) == (t != NULL));
        if (t)
            check_transform(f, text_fn, t, rest, line_len, 1);
        dt_feature_text_free(t);
    }
    free(header);
}

static void check_round_trip(const dt_features *f)
{
    char *text = dt_features_to_json(f);
    if (!text)
        return; /* no memory */
    dt_features *g = NULL;
    dt_status st = dt_features_parse(text, "written.json", NULL, &g);
    if (st == DT_ERR_NOMEM) {
        free(text);
        return;
    }
    if (st != DT_OK)
        fprintf(stderr, "the written spec does not parse:\n%s\n", text);
    REQUIRE(st == DT_OK);
    REQUIRE(dt_features_num_keys(g) == dt_features_num_keys(f) &&
            dt_features_num_columns(g) == dt_features_num_columns(f) &&
            dt_features_num_slots(g) == dt_features_num_slots(f) &&
            dt_features_dense_width(g) == dt_features_dense_width(f) &&
            dt_features_label_key(g) == dt_features_label_key(f) &&
            dt_features_needs_adapt(g) == dt_features_needs_adapt(f));
    for (int k = 0; k < dt_features_num_keys(f); k++)
        REQUIRE(strcmp(dt_features_key(f, k), dt_features_key(g, k)) == 0);
    for (int i = 0; i < dt_features_num_columns(f); i++)
        REQUIRE(dt_features_column_type(f, i) == dt_features_column_type(g, i) &&
                dt_features_column_buckets(f, i) == dt_features_column_buckets(g, i) &&
                dt_features_column_slot(f, i) == dt_features_column_slot(g, i));
    char *again = dt_features_to_json(g);
    if (again && strcmp(text, again) != 0)
        fprintf(stderr, "written twice differently:\n%s\n---\n%s\n", text, again);
    REQUIRE(!again || strcmp(text, again) == 0);
    free(again);
    free(text);
    dt_features_destroy(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        dt_log_set_level(DT_LOG_OFF); /* "column 'x' is in no part of the model" */
        ready = 1;
    }
    const uint8_t *sep = size >= 4 ? memmem(data, size, "\n%%\n", 4) : NULL;
    size_t spec_len = sep ? (size_t)(sep - data) : size;
    const uint8_t *rest = sep ? sep + 4 : data + size;
    size_t rest_len = size - (size_t)(rest - data);
    char *spec = malloc(spec_len + 1);
    if (!spec)
        return 0;
    if (spec_len)
        memcpy(spec, data, spec_len);
    spec[spec_len] = '\0';
    cJSON *j = cJSON_ParseWithOpts(spec, NULL, 1);
    int safe = files_are_safe(j);
    cJSON_Delete(j);
    if (!safe) {
        free(spec);
        return 0;
    }
    dt_features *f = (dt_features *)spec; /* must come back NULL on error */
    dt_status st = dt_features_parse(spec, "fuzz.json", NULL, &f);
    REQUIRE(st == DT_OK || st == DT_ERR_INVALID || st == DT_ERR_IO || st == DT_ERR_NOMEM);
    if (st != DT_OK) {
        REQUIRE(f == NULL);
        REQUIRE(st == DT_ERR_NOMEM || strncmp(dt_last_error(), "fuzz.json: ", 11) == 0);
        free(spec);
        return 0;
    }
    REQUIRE(f != NULL);
    check_round_trip(f);
    check_text(f, rest, rest_len);
    check_transform(f, example_fn, NULL, rest, rest_len, 0);
    dt_features_destroy(f);
    free(spec);
    return 0;
}
