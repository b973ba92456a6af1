/* dtrain's own scores of a model directory's latest checkpoint on test data, one line per
 * example: the probability (binary), each class's probability (multiclass, tab-separated) or
 * the value (regression), as the exported ONNX model's head gives them, for tests/onnx.sh to
 * compare with ONNX Runtime's. The model is built as evaluation builds it (saved_model.h) and run
 * with dt_model_forward_batch, not for training.
 * usage: ref_scores MODEL_DIR DATA_SPEC */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/input.h"
#include "dtrain/model.h"
#include "dtrain/saved_model.h"

static int fail(const char *what)
{
    fprintf(stderr, "ref_scores: %s: %s\n", what, dt_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return fprintf(stderr, "usage: ref_scores MODEL_DIR DATA_SPEC\n"), 2;
    dt_saved_spec sm;
    dt_ckpt *c;
    dt_model *m;
    if (dt_saved_spec_open(argv[1], &sm) || dt_ckpt_open_latest(argv[1], stderr, &c) ||
        dt_saved_model_build(c, &sm, 1000, NULL, &m))
        return fail(argv[1]);
    const dt_model_spec *spec = dt_model_spec_of(m);
    dt_input_options io;
    dt_input_options_default(&io);
    io.batch_size = 1000;
    io.prefetch = 0;
    if (sm.parser)
        io.row_parser = dt_feature_parser_rows(sm.parser);
    if (spec->arch >= DT_ARCH_LR && spec->arch <= DT_ARCH_DEEPFM)
        io.field_size = spec->ctr.field_size;
    dt_input_spec data;
    dt_input in;
    memset(&in, 0, sizeof in);
    if (dt_input_spec_parse(argv[2], "data", &data) || dt_input_open_test(&data, &io, &in))
        return fail(argv[2]);
    int K = dt_model_num_outputs(m);
    dt_elem *e;
    dt_status st;
    while ((st = dt_dataset_next(in.test, &e)) == DT_OK) {
        const float *z;
        if (dt_model_forward_batch(m, e, false, &z))
            return fail("forward");
        for (int i = 0; i < e->n; i++) {
            const float *zi = z + (size_t)i * K;
            if (spec->loss == DT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY) {
                double mx = zi[0], sum = 0;
                for (int k = 1; k < K; k++)
                    mx = zi[k] > mx ? zi[k] : mx;
                for (int k = 0; k < K; k++)
                    sum += exp(zi[k] - mx);
                for (int k = 0; k < K; k++)
                    printf("%s%.9g", k ? "\t" : "", exp(zi[k] - mx) / sum);
            } else {
                for (int k = 0; k < K; k++) {
                    double v = spec->loss == DT_LOSS_BINARY_CROSSENTROPY
                                   ? 1.0 / (1.0 + exp(-(double)zi[k]))
                                   : zi[k];
                    printf("%s%.9g", k ? "\t" : "", v);
                }
            }
            putchar('\n');
        }
        dt_elem_free(e);
    }
    if (st != DT_END)
        return fail("data");
    dt_input_free(&in);
    dt_model_destroy(m);
    dt_ckpt_close(c);
    dt_saved_spec_close(&sm);
    return 0;
}
