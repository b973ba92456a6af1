/* Export in dtrain's own serving format: a directory that the C predictor and dtrain predict
 * open as they open a model directory, holding only what scoring reads.
 *
 *   model.safetensors   the model's variables (dense parameters, moving averages, tables) and
 *                       its model_spec, without the optimizer's slots: a third of an Adam
 *                       checkpoint's size; a parameter-server checkpoint's tables whole
 *   feature_spec.json   a feature-spec model's adapted spec, as training saved it
 *   signature.json      what the predictor takes and gives */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/model.h"
#include "dtrain/predict.h"
#include "export_int.h"

/* The predictor's inputs: raw rows by the spec's keys, F ids and values, or dense values. */
static void describe_inputs(cJSON *sig, const dt_model *m, const dt_features *f)
{
    const dt_model_spec *s = dt_model_spec_of(m);
    cJSON *in = cJSON_AddArrayToObject(sig, "inputs");
    if (!in)
        return;
    if (f) {
        for (int k = 0; k < dt_features_num_keys(f); k++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "key", dt_features_key(f, k));
            cJSON_AddStringToObject(e, "role", k == dt_features_label_key(f) ? "label (optional)"
                                                                             : "feature");
            cJSON_AddItemToArray(in, e);
        }
        cJSON_AddStringToObject(sig, "rows", "raw rows (CSV under a header naming the keys, "
                                "Criteo TSV, or tf.Examples), transformed by feature_spec.json");
        return;
    }
    cJSON *e = cJSON_CreateObject();
    if (s->arch == DT_ARCH_SEQUENTIAL) {
        cJSON_AddStringToObject(e, "name", "input");
        cJSON_AddStringToObject(e, "dtype", "float32");
        int shape[4] = {-1, s->input_shape[0], s->input_shape[1], s->input_shape[2]};
        cJSON_AddItemToObject(e, "shape", cJSON_CreateIntArray(shape, 4));
        cJSON_AddItemToArray(in, e);
        return;
    }
    int shape[2] = {-1, s->ctr.field_size};
    cJSON_AddStringToObject(e, "name", "ids");
    cJSON_AddStringToObject(e, "dtype", "int64");
    cJSON_AddItemToObject(e, "shape", cJSON_CreateIntArray(shape, 2));
    cJSON_AddItemToArray(in, e);
    e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", "values");
    cJSON_AddStringToObject(e, "dtype", "float32");
    cJSON_AddItemToObject(e, "shape", cJSON_CreateIntArray(shape, 2));
    cJSON_AddItemToArray(in, e);
}

static void describe_outputs(cJSON *sig, const dt_model *m)
{
    const dt_model_spec *s = dt_model_spec_of(m);
    int K = dt_model_num_outputs(m);
    const char *score = s->loss == DT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ? "probabilities"
                        : s->loss == DT_LOSS_BINARY_CROSSENTROPY         ? "probability"
                                                                         : "value";
    cJSON *out = cJSON_AddArrayToObject(sig, "outputs");
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", score);
    cJSON_AddNumberToObject(e, "width", K);
    cJSON_AddItemToArray(out, e);
    if (s->loss != DT_LOSS_MEAN_SQUARED_ERROR) {
        e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", "logits");
        cJSON_AddNumberToObject(e, "width", K);
        cJSON_AddItemToArray(out, e);
    }
}

/* model.safetensors: the model's parameters, state and tables (no slots). */
static dt_status write_variables(const char *path, dt_model *m, const dt_ckpt *c, int64_t step)
{
    int n_tables = dt_model_num_tables(m);
    dt_arena *tables = calloc((size_t)(n_tables ? n_tables : 1), sizeof *tables);
    const dt_arena **list = calloc((size_t)n_tables + 2, sizeof *list);
    char *spec = dt_model_spec_to_json(dt_model_spec_of(m));
    dt_status st = DT_OK;
    if (!tables || !list || !spec) {
        st = dt_error(DT_ERR_NOMEM, "%s: no memory for the export", path);
        goto done;
    }
    int n = 0;
    list[n++] = dt_model_params(m);
    if (dt_model_state(m)->n_views > 0)
        list[n++] = dt_model_state(m);
    int made = 0;
    for (; made < n_tables && st == DT_OK; made++)
        if ((st = dt_table_arena(dt_model_table(m, made), -1, &tables[made])) == DT_OK)
            list[n++] = &tables[made];
    char step_text[32];
    snprintf(step_text, sizeof step_text, "%" PRId64, step);
    dt_ckpt_meta meta[] = {{"model_spec", spec}, {"global_step", step_text},
                           {"exported_from", dt_ckpt_path(c)}};
    if (st == DT_OK)
        st = dt_ckpt_save(path, list, n, meta, 3);
    for (int i = 0; i < made; i++)
        dt_table_arena_release(&tables[i]);
done:
    free(spec);
    free(list);
    free(tables);
    return st;
}

dt_status dt_export_dtrain(const char *model_dir, const char *checkpoint,
                           const dt_export_options *o, dt_export_result *r)
{
    dt_status st = dt_export_check(model_dir, checkpoint, o, "directory");
    if (st)
        return st;
    dt_export_result res;
    memset(&res, 0, sizeof res);
    dt_saved_spec sm;
    memset(&sm, 0, sizeof sm);
    dt_ckpt *c = NULL;
    dt_model *m = NULL;
    cJSON *sig = NULL, *spec_json = NULL;
    char path[4200];
    if ((st = dt_export_begin(model_dir, checkpoint, o, o->out, &sm, &c, &m, &res, false)))
        goto done;
    if (sm.features) {
        if (!(spec_json = dt_export_features_json(sm.features))) {
            st = DT_ERR_NOMEM;
            goto done;
        }
        snprintf(path, sizeof path, "%s/%s", o->out, DT_FEATURE_SPEC_FILE);
        if ((st = dt_export_write_json(path, spec_json)))
            goto done;
    }
    dt_export_model_kind(dt_model_spec_of(m), spec_json, res.model_kind, sizeof res.model_kind);
    snprintf(path, sizeof path, "%s/%s", o->out, DT_EXPORT_MODEL_FILE);
    if ((st = write_variables(path, m, c, res.step)))
        goto done;
    sig = cJSON_CreateObject();
    if (!sig) {
        st = dt_error(DT_ERR_NOMEM, "no memory for the signature");
        goto done;
    }
    cJSON_AddStringToObject(sig, "format", "dtrain");
    cJSON_AddStringToObject(sig, "model_file", DT_EXPORT_MODEL_FILE);
    cJSON_AddStringToObject(sig, "producer", "dtrain");
    cJSON_AddStringToObject(sig, "checkpoint", res.checkpoint);
    cJSON_AddNumberToObject(sig, "global_step", (double)res.step);
    cJSON_AddStringToObject(sig, "model", res.model_kind);
    describe_inputs(sig, m, sm.features);
    describe_outputs(sig, m);
    snprintf(res.signature, sizeof res.signature, "%s/%s", o->out, DT_EXPORT_SIGNATURE_FILE);
    st = dt_export_write_json(res.signature, sig);
done:
    if (r)
        *r = res;
    cJSON_Delete(sig);
    cJSON_Delete(spec_json);
    dt_model_destroy(m);
    dt_ckpt_close(c);
    dt_saved_spec_close(&sm);
    return st;
}
