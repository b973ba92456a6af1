/* Fuzz target: the tf.train.Example decoder and the JSON listing on arbitrary bytes, with a spec
 * covering fixed-length float, int64 and bytes features, a default, variable-length features and
 * a label (the keys of the seed corpus, from tests/fixtures/example_python.tfrecord). Any status
 * is fine; a crash, a sanitizer report, or a row buffer left inconsistent is not: a success adds
 * exactly one row, a failure none and no sparse entries; and the fast path for fixed-length specs,
 * the layout learned from records (this one, and the inputs before it), and the fast path for
 * CTR records decode exactly as the general decoder does. */
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/example.h"

/* With a spec of fixed-length features only, dt_example_parse tries its fast path first: the
 * outcome must be the general decoder's, the same status and the same row bit for bit. */
static int same_both_ways(const uint8_t *data, size_t size)
{
    static dt_example_spec fast, slow;
    static int ready;
    if (!ready) {
        if (dt_example_spec_parse("floats:3,ints:3,img:4:1/255,opt:2:1:7", "label", &fast) != DT_OK ||
            !fast.fast)
            __builtin_trap();
        slow = fast;
        slow.fast = 0;
        ready = 1;
    }
    dt_rowbuf a, b;
    dt_rowbuf_init(&a, fast.n_dense);
    dt_rowbuf_init(&b, slow.n_dense);
    dt_status sa = dt_example_parse(&fast, data, size, &a);
    dt_status sb = dt_example_parse(&slow, data, size, &b);
    int same = sa == sb && a.n == b.n;
    if (same && sa == DT_OK)
        same = memcmp(a.dense, b.dense, (size_t)fast.n_dense * sizeof(float)) == 0 &&
               memcmp(a.labels, b.labels, sizeof(float)) == 0;
    dt_rowbuf_free(&a);
    dt_rowbuf_free(&b);
    return same;
}

/* dt_example_parse_learned against the general decoder: a layout learned from this input and
 * then used on it, and one kept across inputs; each with the vector decoder (where the CPU has
 * it) and the portable one. */
static int same_with_layout(const uint8_t *data, size_t size)
{
    static dt_example_spec spec, slow;
    static dt_example_layout *kept;
    static int ready;
    if (!ready) {
        if (dt_example_spec_parse("floats:3,ints:3,img:4,opt:2:1:7", "label", &spec) != DT_OK ||
            dt_example_layout_new(&kept) != DT_OK)
            __builtin_trap();
        slow = spec;
        slow.fast = 0;
        ready = 1;
    }
    uint8_t *padded = malloc(size + DT_EXAMPLE_LAYOUT_SLACK);
    dt_example_layout *fresh;
    if (!padded || dt_example_layout_new(&fresh) != DT_OK)
        __builtin_trap();
    memcpy(padded, data, size);
    memset(padded + size, 0x80, DT_EXAMPLE_LAYOUT_SLACK);
    dt_rowbuf want, got;
    dt_rowbuf_init(&want, spec.n_dense);
    dt_rowbuf_init(&got, spec.n_dense);
    dt_status sw = dt_example_parse(&slow, data, size, &want);
    int same = 1;
    dt_example_layout *layouts[3] = {fresh, fresh, kept};
    for (int i = 0; i < 6 && same; i++) {
        dt_example_layout_use_vector(layouts[i % 3], i < 3);
        dt_rowbuf_clear(&got);
        dt_status sg = dt_example_parse_learned(&spec, layouts[i % 3], padded, size, &got);
        same = sg == sw && got.n == want.n;
        if (same && sg == DT_OK)
            same = memcmp(got.dense, want.dense, (size_t)spec.n_dense * sizeof(float)) == 0 &&
                   memcmp(got.labels, want.labels, sizeof(float)) == 0;
    }
    dt_rowbuf_free(&want);
    dt_rowbuf_free(&got);
    dt_example_layout_free(fresh);
    free(padded);
    return same;
}

/* CTR Examples (ids and values zipped): a success is one row of exactly 4 fields with ids in
 * the table (or the hash buckets), finite values and a 0/1 label; a failure leaves nothing; and
 * the CTR fast path decodes as the general decoder does, status and row. */
static int ctr_rows_hold(const uint8_t *data, size_t size)
{
    static dt_example_spec spec[2], slow[2];
    static int ready;
    if (!ready) {
        for (int k = 0; k < 2; k++) {
            snprintf(spec[k].features[0].key, DT_EXAMPLE_KEY_CAP, "ids");
            snprintf(spec[k].features[1].key, DT_EXAMPLE_KEY_CAP, "values");
            snprintf(spec[k].label_key, DT_EXAMPLE_KEY_CAP, "label");
            spec[k].n_features = 2;
            spec[k].ctr_fields = 4;
            spec[k].ctr_max_id = k ? 0 : 1000;
            spec[k].ctr_hash_buckets = k ? 97 : 0;
            if (dt_example_spec_finalize(&spec[k]) != DT_OK || !spec[k].ctr_fast)
                return 0;
            slow[k] = spec[k];
            slow[k].ctr_fast = 0;
        }
        ready = 1;
    }
    for (int k = 0; k < 2; k++) {
        dt_rowbuf rb, general;
        dt_rowbuf_init(&rb, 0);
        dt_rowbuf_init(&general, 0);
        dt_status st = dt_example_parse(&spec[k], data, size, &rb);
        dt_status sg = dt_example_parse(&slow[k], data, size, &general);
        int fine = st == DT_OK ? rb.n == 1 && rb.nnz == 4 && rb.sp_row[1] == 4 &&
                                     (rb.labels[0] == 0.0f || rb.labels[0] == 1.0f)
                               : (st == DT_ERR_FORMAT || st == DT_ERR_NOMEM) && rb.n == 0;
        for (size_t f = 0; fine && st == DT_OK && f < 4; f++)
            fine = rb.sp_ids[f] >= 0 && rb.sp_ids[f] < (k ? 97 : 1000) && isfinite(rb.sp_vals[f]);
        fine = fine && st == sg && rb.n == general.n;
        if (fine && st == DT_OK)
            fine = rb.labels[0] == general.labels[0] &&
                   memcmp(rb.sp_ids, general.sp_ids, 4 * sizeof(int64_t)) == 0 &&
                   memcmp(rb.sp_vals, general.sp_vals, 4 * sizeof(float)) == 0;
        dt_rowbuf_free(&rb);
        dt_rowbuf_free(&general);
        if (!fine)
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static dt_example_spec spec;
    static int ready;
    if (!ready) {
        if (dt_example_spec_parse("floats:3,ints:3,img:4:1/255,ids:0,w:0:0.5,opt:2:1:7", "label",
                                  &spec) != DT_OK)
            __builtin_trap();
        ready = 1;
    }
    dt_rowbuf rb;
    dt_rowbuf_init(&rb, spec.n_dense);
    /* A row already in the buffer: a failed parse must leave it exactly as it was. */
    float *dense;
    if (dt_rowbuf_add_row(&rb, &dense) != DT_OK || dt_rowbuf_add_sparse(&rb, 1, 2.0f) != DT_OK)
        __builtin_trap();
    dt_status st = dt_example_parse(&spec, data, size, &rb);
    if (st == DT_OK) {
        if (rb.n != 2 || rb.sp_row[1] != 1 || (size_t)rb.sp_row[2] != rb.nnz)
            __builtin_trap();
    } else {
        if (st != DT_ERR_FORMAT && st != DT_ERR_NOMEM)
            __builtin_trap();
        if (rb.n != 1 || rb.nnz != 1 || rb.sp_row[1] != 1)
            __builtin_trap();
    }
    dt_rowbuf_free(&rb);
    if (!same_both_ways(data, size) || !same_with_layout(data, size))
        __builtin_trap();
    if (!ctr_rows_hold(data, size))
        __builtin_trap();
    char *text = NULL;
    st = dt_example_to_json(data, size, &text);
    if (st == DT_OK) {
        size_t n = strlen(text);
        if (n < 2 || text[0] != '{' || text[n - 1] != '}')
            __builtin_trap();
        free(text);
    } else if (text) {
        __builtin_trap();
    }
    return 0;
}
