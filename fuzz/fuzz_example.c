/* Fuzz target: the tf.train.Example decoder and the JSON listing on arbitrary bytes, with a spec
 * covering fixed-length float, int64 and bytes features, a default, variable-length features and
 * a label (the keys of the seed corpus, from tests/fixtures/example_python.tfrecord). Any status
 * is fine; a crash, a sanitizer report, or a row buffer left inconsistent is not: a success adds
 * exactly one row, a failure none and no sparse entries. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/example.h"

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
