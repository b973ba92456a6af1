/* ONNX export (see include/dtrain/export.h): a trained model as a standard ONNX graph that
 * computes what dtrain's forward computes at inference, and signature.json describing its inputs
 * and outputs.
 *
 * The model is built from the checkpoint mapped read only, as the predictor builds it: its dense
 * variables copied, its tables read where they lie in the file (a parameter-server checkpoint's
 * shards assembled, as evaluation does). Its variables are read from there: the parameter
 * arena's views by name ("dense_1/kernel"), batch normalisation's moving averages from the state
 * arena, the tables from the model, written to the ONNX file without another copy. Each part of
 * dtrain's forward becomes a few standard operators:
 *   a table lookup        Gather(table, ids)
 *   a weighted sum        Mul by the weights, ReduceSum over the list (the combiners scale the
 *                         weights first: 1 / sum w for mean, 1 / sqrt(sum w^2) for sqrtn, where
 *                         that sum is positive, as src/model/cols.c does)
 *   an indicator          OneHot(ids) times the weights, summed over the list
 *   the FM term           1/2 ReduceSum((ReduceSum e)^2 - ReduceSum e^2) over the fields
 *   a dense layer         Gemm(x, kernel, bias) and its activation
 *   conv2d, pooling       Conv and MaxPool in NCHW between two Transposes (dtrain is NHWC)
 *   a cross layer         x0 * Gemm(x, W^T, b) + x, or through the low-rank factors
 *   batch normalisation   BatchNormalization with the moving averages
 *   dropout               nothing (the identity at inference)
 * and the head: Sigmoid (binary), Softmax (multiclass) or the value (regression). */
#include "dtrain/export.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dtrain/checkpoint.h"
#include "../core/fileio.h"
#include "../nn/nn.h"
#include "dtrain/model.h"
#include "dtrain/saved_model.h"
#include "export_int.h"
#include "onnx_graph.h"



typedef struct {
    og_graph *g;
    dt_model *m;
    const dt_model_spec *spec;
    const dt_features *f;       /* feature-spec models; NULL otherwise */
    cJSON *spec_json;           /* the adapted feature spec, parsed (feature-spec models) */
    cJSON *sig;                 /* signature.json's root */
    cJSON *inputs, *outputs;    /* its lists */
    dt_status err;              /* the first failure of the build (the graph keeps its own) */
    /* Feature-spec models: each slot's inputs ("c:ids", "c:weights") once made, and each
     * numeric column's normalized values once made. */
    const char **slot_ids, **slot_weights;
    const char **numeric;
} exporter;

/* Records the first failure; the message is already set. */
static void failed(exporter *x, dt_status st)
{
    if (x->err == DT_OK)
        x->err = st;
}

/* ---- Signature entries ---- */

/* A graph input and its signature entry {"name", "dtype", "shape"}, returned for the caller to
 * complete; dims[i] < 0 is dim_names[i]. */
static cJSON *add_input(exporter *x, const char *name, og_type t, int n_dims,
                        const int64_t *dims, const char *const *dim_names)
{
    og_input(x->g, name, t, n_dims, dims, dim_names);
    cJSON *e = cJSON_CreateObject();
    if (!e || !cJSON_AddItemToArray(x->inputs, e)) {
        cJSON_Delete(e);
        failed(x, dt_error(DT_ERR_NOMEM, "no memory for the signature"));
        return NULL; /* cJSON's adders do nothing with it */
    }
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "dtype", t == OG_FLOAT ? "float32" : "int64");
    cJSON *shape = cJSON_AddArrayToObject(e, "shape");
    for (int i = 0; shape && i < n_dims; i++)
        cJSON_AddItemToArray(shape, dims[i] < 0 ? cJSON_CreateString(dim_names[i])
                                                : cJSON_CreateNumber((double)dims[i]));
    return e;
}

static void add_output(exporter *x, const char *name, const char *value, int64_t width,
                       const char *meaning)
{
    int64_t dims[2] = {-1, width};
    const char *names[2] = {"N", NULL};
    og_node(x->g, "Identity", name, 1, &value);
    og_output(x->g, name, OG_FLOAT, 2, dims, names);
    cJSON *e = cJSON_CreateObject();
    if (!e || !cJSON_AddItemToArray(x->outputs, e)) {
        cJSON_Delete(e);
        failed(x, dt_error(DT_ERR_NOMEM, "no memory for the signature"));
        return;
    }
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "dtype", "float32");
    cJSON *shape = cJSON_AddArrayToObject(e, "shape");
    if (shape) {
        cJSON_AddItemToArray(shape, cJSON_CreateString("N"));
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)width));
    }
    cJSON_AddStringToObject(e, "meaning", meaning);
}

/* The head over logits (N, width): what the loss the model was trained with makes of them. */
static void add_head(exporter *x, const char *logits, int64_t width)
{
    og_scope(x->g, "head");
    switch (x->spec->loss) {
    case DT_LOSS_BINARY_CROSSENTROPY:
        add_output(x, "probability", og_op1(x->g, "Sigmoid", logits), width,
                   "sigmoid(logits): the probability of label 1");
        add_output(x, "logits", logits, width, "the logits, before the sigmoid");
        cJSON_AddStringToObject(x->sig, "head", "binary");
        break;
    case DT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY: {
        const char *p = og_op1(x->g, "Softmax", logits);
        og_attr_int(x->g, "axis", 1);
        add_output(x, "probabilities", p, width, "softmax(logits): each class's probability");
        add_output(x, "logits", logits, width, "the logits, before the softmax");
        char head[32];
        snprintf(head, sizeof head, "multiclass:%" PRId64, width);
        cJSON_AddStringToObject(x->sig, "head", head);
        break;
    }
    case DT_LOSS_MEAN_SQUARED_ERROR:
        add_output(x, "value", logits, width, "the predicted value");
        cJSON_AddStringToObject(x->sig, "head", "regression");
        break;
    }
}

/* ---- Variables ---- */

/* The initializer of the parameter (state: the state variable) called name, as it is; its
 * dims into dims (may be NULL). */
static const char *variable(exporter *x, const char *name, bool state, int64_t *dims)
{
    const dt_arena *a = state ? dt_model_state(x->m) : dt_model_params(x->m);
    int v = dt_arena_find(a, name);
    if (v < 0) {
        failed(x, dt_error(DT_ERR_INVALID, "the model has no variable %s", name));
        return "?";
    }
    int64_t d[DT_VIEW_MAX_DIMS];
    for (int i = 0; i < a->views[v].n_dims; i++)
        d[i] = a->views[v].dims[i];
    if (dims)
        memcpy(dims, d, (size_t)a->views[v].n_dims * sizeof *d);
    return og_tensor_f32(x->g, name, a->views[v].n_dims, d, dt_arena_view_data(a, v));
}

static const char *param(exporter *x, const char *name) { return variable(x, name, false, NULL); }

static const char *layer_param(exporter *x, const char *layer, const char *what, bool state)
{
    char name[DT_VIEW_NAME_CAP];
    snprintf(name, sizeof name, "%s/%s", layer, what);
    return variable(x, name, state, NULL);
}

/* The initializer of a table, straight from its rows (a dynamic table's in use: the zero row
 * and its keys'). */
static const char *table_tensor(exporter *x, const dt_table *t)
{
    int64_t dims[2] = {t->rows, t->dim};
    for (int i = 0; i < dt_model_num_tables(x->m); i++)
        if (dt_model_table(x->m, i) == t && dt_model_keymap(x->m, i))
            dims[0] = dt_model_table_rows_used(x->m, i);
    return og_tensor_f32(x->g, t->name, 2, dims, t->data);
}

/* A dynamic table's keys to its rows: an ai.onnx.ml LabelEncoder from the live keys to their rows
 * (0, the zero row, for any other id), over ids. */
static const char *key_rows(exporter *x, dt_keymap *km, const char *ids)
{
    dt_keymap_stats s;
    dt_keymap_stats_get(km, &s);
    size_t n = (size_t)s.live;
    int64_t *rows = malloc((n + 1) * sizeof *rows), *keys = malloc((n + 1) * sizeof *keys);
    uint32_t *counts = malloc((n + 1) * sizeof *counts), *last = malloc((n + 1) * sizeof *last);
    const char *out = "?";
    if (!rows || !keys || !counts || !last || n > INT_MAX) {
        failed(x, dt_error(DT_ERR_NOMEM, "no memory for the %zu keys of table %s", n,
                           dt_keymap_name(km)));
    } else {
        int64_t cursor = 0;
        size_t got = dt_keymap_next_live(km, &cursor, n, rows, keys, counts, last);
        out = og_node(x->g, "LabelEncoder", NULL, 1, &ids);
        og_ml_domain(x->g);
        og_attr_ints(x->g, "keys_int64s", (int)got, keys);
        og_attr_ints(x->g, "values_int64s", (int)got, rows);
        og_attr_int(x->g, "default_int64", 0);
    }
    free(rows), free(keys), free(counts), free(last);
    return out;
}

static const char *axes(exporter *x, int64_t a) { return og_const_i64(x->g, 1, &a); }

/* ReduceSum over axis (opset 13 takes the axes as an input). */
static const char *reduce_sum(exporter *x, const char *v, int64_t axis, bool keepdims)
{
    const char *r = og_op2(x->g, "ReduceSum", v, axes(x, axis));
    og_attr_int(x->g, "keepdims", keepdims);
    return r;
}

static const char *unsqueeze(exporter *x, const char *v, int64_t axis)
{
    return og_op2(x->g, "Unsqueeze", v, axes(x, axis));
}

/* a + b, where a may be NULL (nothing yet). */
static const char *add_to(exporter *x, const char *a, const char *b)
{
    return a ? og_op2(x->g, "Add", a, b) : b;
}

/* ---- Sequential layers ---- */

typedef enum { LAYOUT_FLAT, LAYOUT_NHWC, LAYOUT_NCHW } layout;

/* A value of the graph with dtrain's shape of one example (H, W, C) and where ONNX holds it. */
typedef struct {
    const char *v;
    layout lay;
    int dims[3];
} value;

static void to_nchw(exporter *x, value *v)
{
    if (v->lay == LAYOUT_NHWC) {
        v->v = og_op1(x->g, "Transpose", v->v);
        og_attr_ints(x->g, "perm", 4, (const int64_t[]){0, 3, 1, 2});
        v->lay = LAYOUT_NCHW;
    }
}

/* (N, H W C) in dtrain's order, which flattens NHWC: a map in NCHW goes back first. */
static void to_flat(exporter *x, value *v)
{
    if (v->lay == LAYOUT_FLAT)
        return;
    if (v->lay == LAYOUT_NCHW) {
        v->v = og_op1(x->g, "Transpose", v->v);
        og_attr_ints(x->g, "perm", 4, (const int64_t[]){0, 2, 3, 1});
    }
    v->v = og_op1(x->g, "Flatten", v->v);
    og_attr_int(x->g, "axis", 1);
    v->dims[2] = v->dims[0] * v->dims[1] * v->dims[2];
    v->dims[0] = v->dims[1] = 1;
    v->lay = LAYOUT_FLAT;
}

static void activation(exporter *x, value *v, dt_activation a)
{
    static const char *const ops[] = {NULL, "Relu", "Sigmoid", "Tanh"};
    if (a != DT_ACT_NONE)
        v->v = og_op1(x->g, ops[a], v->v);
}

/* ONNX's explicit pads for TensorFlow's: the top (left) padding dtrain chose, and what the
 * output's extent needs at the bottom (right). */
static void pads_of(int in, int k, int s, int out, int before, int64_t *lo, int64_t *hi)
{
    int64_t total = (int64_t)(out - 1) * s + k - in;
    *lo = before;
    *hi = total - before > 0 ? total - before : 0;
}

static void conv2d(exporter *x, const dt_layer_spec *L, value *v)
{
    dt_conv_geom cg;
    if (!dt_conv_geom_init(&cg, v->dims[0], v->dims[1], v->dims[2], L->kernel[0], L->kernel[1],
                           L->filters, L->strides[0], L->strides[1], L->same)) {
        failed(x, dt_error(DT_ERR_INVALID, "layer %s: an empty output", L->name));
        return;
    }
    char name[DT_VIEW_NAME_CAP];
    snprintf(name, sizeof name, "%s/kernel", L->name);
    const dt_arena *a = dt_model_params(x->m);
    int kv = dt_arena_find(a, name);
    if (kv < 0) {
        failed(x, dt_error(DT_ERR_INVALID, "the model has no variable %s", name));
        return;
    }
    /* Keras's (KH, KW, C, OC) to ONNX's (OC, C, KH, KW). */
    const float *k = dt_arena_view_data(a, kv);
    size_t KH = (size_t)cg.KH, KW = (size_t)cg.KW, C = (size_t)cg.C, OC = (size_t)cg.OC;
    float *w = og_alloc_f32(x->g, KH * KW * C * OC);
    if (!w)
        return;
    for (size_t kh = 0; kh < KH; kh++)
        for (size_t kw = 0; kw < KW; kw++)
            for (size_t c = 0; c < C; c++)
                for (size_t oc = 0; oc < OC; oc++)
                    w[((oc * C + c) * KH + kh) * KW + kw] = k[((kh * KW + kw) * C + c) * OC + oc];
    int64_t wd[4] = {(int64_t)OC, (int64_t)C, (int64_t)KH, (int64_t)KW};
    const char *wt = og_tensor_f32(x->g, name, 4, wd, w);
    const char *b = layer_param(x, L->name, "bias", false);
    to_nchw(x, v);
    int64_t pads[4];
    pads_of(cg.H, cg.KH, cg.SH, cg.OH, cg.pad_top, &pads[0], &pads[2]);
    pads_of(cg.W, cg.KW, cg.SW, cg.OW, cg.pad_left, &pads[1], &pads[3]);
    v->v = og_node(x->g, "Conv", NULL, 3, (const char *[]){v->v, wt, b});
    og_attr_ints(x->g, "kernel_shape", 2, (const int64_t[]){cg.KH, cg.KW});
    og_attr_ints(x->g, "strides", 2, (const int64_t[]){cg.SH, cg.SW});
    og_attr_ints(x->g, "pads", 4, pads);
    activation(x, v, L->activation);
    v->dims[0] = cg.OH, v->dims[1] = cg.OW, v->dims[2] = cg.OC;
}

static void maxpool(exporter *x, const dt_layer_spec *L, value *v)
{
    dt_pool_geom pg;
    if (!dt_pool_geom_init(&pg, v->dims[0], v->dims[1], v->dims[2], L->pool[0], L->pool[1],
                           L->strides[0], L->strides[1], L->same)) {
        failed(x, dt_error(DT_ERR_INVALID, "layer %s: an empty output", L->name));
        return;
    }
    to_nchw(x, v);
    int64_t pads[4];
    pads_of(pg.H, pg.PH, pg.SH, pg.OH, pg.pad_top, &pads[0], &pads[2]);
    pads_of(pg.W, pg.PW, pg.SW, pg.OW, pg.pad_left, &pads[1], &pads[3]);
    /* ONNX's MaxPool ignores its padding, as dtrain's ("padding never wins"). */
    v->v = og_op1(x->g, "MaxPool", v->v);
    og_attr_ints(x->g, "kernel_shape", 2, (const int64_t[]){pg.PH, pg.PW});
    og_attr_ints(x->g, "strides", 2, (const int64_t[]){pg.SH, pg.SW});
    og_attr_ints(x->g, "pads", 4, pads);
    v->dims[0] = pg.OH, v->dims[1] = pg.OW;
}

/* Layers [0, n) of a sequential stack (a sequential model's, DeepFM's MLP, a spec model's deep
 * part) over v. */
static void emit_layers(exporter *x, const dt_layer_spec *layers, int n, value *v)
{
    for (int i = 0; i < n && x->err == DT_OK; i++) {
        const dt_layer_spec *L = &layers[i];
        og_scope(x->g, L->name);
        switch (L->kind) {
        case DT_LAYER_DENSE: {
            to_flat(x, v);
            const char *in[3] = {v->v, layer_param(x, L->name, "kernel", false),
                                 layer_param(x, L->name, "bias", false)};
            v->v = og_node(x->g, "Gemm", NULL, 3, in);
            v->dims[2] = L->units;
            activation(x, v, L->activation);
            break;
        }
        case DT_LAYER_CONV2D: conv2d(x, L, v); break;
        case DT_LAYER_MAXPOOL2D: maxpool(x, L, v); break;
        case DT_LAYER_FLATTEN: to_flat(x, v); break;
        case DT_LAYER_RELU: activation(x, v, DT_ACT_RELU); break;
        case DT_LAYER_SIGMOID: activation(x, v, DT_ACT_SIGMOID); break;
        case DT_LAYER_TANH: activation(x, v, DT_ACT_TANH); break;
        case DT_LAYER_DROPOUT: break;
        case DT_LAYER_BATCHNORM: {
            to_flat(x, v);
            const char *in[5] = {v->v, layer_param(x, L->name, "gamma", false),
                                 layer_param(x, L->name, "beta", false),
                                 layer_param(x, L->name, "moving_mean", true),
                                 layer_param(x, L->name, "moving_variance", true)};
            v->v = og_node(x->g, "BatchNormalization", NULL, 5, in);
            og_attr_float(x->g, "epsilon", L->epsilon);
            break;
        }
        }
    }
    og_scope(x->g, NULL);
}

static void sequential_graph(exporter *x)
{
    const int *s = x->spec->input_shape;
    int64_t dims[4] = {-1, s[0], s[1], s[2]};
    const char *names[4] = {"N", NULL, NULL, NULL};
    cJSON *e = add_input(x, "input", OG_FLOAT, 4, dims, names);
    cJSON_AddStringToObject(e, "layout", "NHWC");
    cJSON_AddStringToObject(e, "source",
                            "one example's values as dtrain's input pipeline gives them to the "
                            "model: images as pixel / 255 (IDX, Fashion-MNIST), file data's "
                            "features as its reader scales them");
    value v = {.v = "input", .lay = LAYOUT_NHWC, .dims = {s[0], s[1], s[2]}};
    emit_layers(x, x->spec->layers, x->spec->n_layers, &v);
    to_flat(x, &v);
    add_head(x, v.v, dt_model_num_outputs(x->m));
}

/* ---- CTR models: lr, fm, deepfm ---- */

/* DeepFM's pairwise term over emb (N, F, K): 1/2 sum_k ((sum_f e)^2 - sum_f e^2), (N, 1). */
static const char *fm_term(exporter *x, const char *emb)
{
    og_scope(x->g, "fm");
    const char *s = reduce_sum(x, emb, 1, false);
    const char *q = reduce_sum(x, og_op2(x->g, "Mul", emb, emb), 1, false);
    const char *d = og_op2(x->g, "Sub", og_op2(x->g, "Mul", s, s), q);
    const char *r = og_op2(x->g, "Mul", reduce_sum(x, d, 1, true), og_const_f32(x->g, 0.5f));
    og_scope(x->g, NULL);
    return r;
}

static void ctr_graph(exporter *x)
{
    const dt_ctr_spec *c = &x->spec->ctr;
    int64_t F = c->field_size, K = c->embedding_size;
    int64_t dims[2] = {-1, F};
    const char *names[2] = {"N", NULL};
    cJSON *e = add_input(x, "ids", OG_INT64, 2, dims, names);
    cJSON_AddStringToObject(e, "source", "each field's feature id, in field order: the id of "
                            "LibSVM's id:value, or the tfrecord's ids feature (with "
                            "--hash-buckets, after dtrain's field hash)");
    cJSON_AddNumberToObject(e, "min", 0);
    dt_keymap *km = dt_model_num_tables(x->m) > 0 ? dt_model_keymap(x->m, 0) : NULL;
    if (km) /* a dynamic table's keys: any id, those it does not hold read the zero row */
        cJSON_AddStringToObject(e, "keys", "dynamic: the id as it is (int64 >= 0)");
    else
        cJSON_AddNumberToObject(e, "max_exclusive", (double)c->feature_size);
    e = add_input(x, "values", OG_FLOAT, 2, dims, names);
    cJSON_AddStringToObject(e, "source", "each field's value, in field order: the value of "
                            "LibSVM's id:value, or the tfrecord's values feature");
    dt_table *w = dt_model_find_table(x->m, "fm_w");
    if (!w) {
        failed(x, dt_error(DT_ERR_INVALID, "the model has no table fm_w"));
        return;
    }
    og_scope(x->g, "first_order");
    const char *vals = unsqueeze(x, "values", 2); /* (N, F, 1) */
    const char *rows = km ? key_rows(x, km, "ids") : "ids";
    const char *lin = og_op2(x->g, "Mul", og_op2(x->g, "Gather", table_tensor(x, w), rows), vals);
    const char *z = og_op2(x->g, "Add", reduce_sum(x, lin, 1, false), param(x, "fm_b"));
    if (x->spec->arch != DT_ARCH_LR) {
        dt_table *v = dt_model_find_table(x->m, "fm_v");
        if (!v) {
            failed(x, dt_error(DT_ERR_INVALID, "the model has no table fm_v"));
            return;
        }
        og_scope(x->g, "embedding");
        const char *emb = og_op2(x->g, "Mul", og_op2(x->g, "Gather", table_tensor(x, v), rows),
                                 vals); /* (N, F, K) */
        z = og_op2(x->g, "Add", z, fm_term(x, emb));
        if (x->spec->arch == DT_ARCH_DEEPFM) {
            og_scope(x->g, "deep");
            value d = {.v = og_op2(x->g, "Reshape", emb, og_const_i64(x->g, 2,
                                                                      (int64_t[]){0, F * K})),
                       .lay = LAYOUT_FLAT, .dims = {1, 1, (int)(F * K)}};
            emit_layers(x, x->spec->layers, x->spec->n_layers, &d);
            z = og_op2(x->g, "Add", z, d.v);
        }
    }
    og_scope(x->g, NULL);
    add_head(x, z, 1);
}

/* ---- Feature-spec models ---- */

/* The adapted spec's object of column name. */
static cJSON *spec_column(const exporter *x, const char *name)
{
    cJSON *cols = cJSON_GetObjectItemCaseSensitive(x->spec_json, "columns"), *c;
    cJSON_ArrayForEach(c, cols)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return c;
    }
    return NULL;
}

/* The rule of each column type (the vocabulary row stands for vocabulary_list and
 * vocabulary_file too). */
static const struct {
    const char *type;
    const char *rule;
} rules[] = {
    {"hash_bucket",
     "id = Fingerprint64(value) mod hash_bucket_size: FarmHash's Fingerprint64 of the "
     "value's bytes (an integer as its decimal digits), unsigned 64-bit"},
    {"vocabulary",
     "id = the token's index in the vocabulary (for vocabulary_file, the file's first "
     "vocabulary_size lines, one token a line); any other token: vocabulary length + "
     "Fingerprint64(token) mod num_oov_buckets when num_oov_buckets is given, else "
     "default_value, where -1 (also without either) drops the value"},
    {"identity",
     "id = the integer value; outside [0, num_buckets): default_value, where -1 drops "
     "the value (without default_value dtrain stops)"},
    {"bucketized",
     "id = how many boundaries are <= the source column's raw value (its "
     "default_value when missing), before the source's normalizer"},
    {"crossed",
     "h = hash_key (default 0xDECAFCAFFE); for each key in order, h = "
     "FingerprintCat64(h, v) with v = Fingerprint64 of a raw key's string, or a "
     "column's id as it is; id = h mod hash_bucket_size; with several values per key, "
     "one id per element of their Cartesian product, the last key fastest; a key "
     "without values gives no ids"},
    {"weighted",
     "the categorical column's ids, each with the number of weight_key paired with "
     "its value"},
    {"numeric",
     "the raw value (default_value when missing); the normalizer is applied in the "
     "graph"},
};

static const char *rule_of(const char *type)
{
    if (strncmp(type, "vocabulary", 10) == 0)
        type = "vocabulary";
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (strcmp(type, rules[i].type) == 0)
            return rules[i].rule;
    return "";
}

/* A column's definition for the signature: its adapted spec object, the rule that gives its
 * ids or values, and, nested, the columns it reads (a bucketized column's source, a crossed
 * column's column keys, a weighted column's categorical). */
static cJSON *describe_column(const exporter *x, const char *name, int depth)
{
    const cJSON *c = spec_column(x, name);
    cJSON *d = c ? cJSON_Duplicate(c, 1) : cJSON_CreateObject();
    if (!d || !c || depth > 8)
        return d;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
    if (!cJSON_IsString(type))
        return d;
    cJSON_AddStringToObject(d, "rule", rule_of(type->valuestring));
    const char *t = type->valuestring;
    if (strcmp(t, "bucketized") == 0) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "source");
        if (cJSON_IsString(s))
            cJSON_AddItemToObject(d, "source_column", describe_column(x, s->valuestring, depth + 1));
    } else if (strcmp(t, "weighted") == 0) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "categorical");
        if (cJSON_IsString(s))
            cJSON_AddItemToObject(d, "categorical_column",
                                  describe_column(x, s->valuestring, depth + 1));
    } else if (strcmp(t, "crossed") == 0) {
        cJSON *keys = cJSON_GetObjectItemCaseSensitive(d, "keys"), *k;
        cJSON_ArrayForEach(k, keys)
        {
            const cJSON *col = cJSON_GetObjectItemCaseSensitive(k, "column");
            if (cJSON_IsString(col))
                cJSON_AddItemToObject(k, "definition",
                                      describe_column(x, col->valuestring, depth + 1));
        }
        if (!cJSON_GetObjectItemCaseSensitive(d, "hash_key"))
            cJSON_AddNumberToObject(d, "hash_key", (double)0xDECAFCAFFEull);
    }
    return d;
}

/* The inputs of slot s: "c:ids" (int64 [N, c:len]) and "c:weights" (float [N, c:len]). */
static void slot_inputs(exporter *x, int s, const char **ids, const char **weights)
{
    if (!x->slot_ids[s]) {
        int col = dt_features_slot_column(x->f, s);
        const char *cname = dt_features_column_name(x->f, col);
        char n_ids[DT_FEATURE_NAME_CAP + 16], n_w[DT_FEATURE_NAME_CAP + 16];
        char len[DT_FEATURE_NAME_CAP + 16];
        snprintf(n_ids, sizeof n_ids, "%s:ids", cname);
        snprintf(n_w, sizeof n_w, "%s:weights", cname);
        snprintf(len, sizeof len, "%s:len", cname);
        int64_t dims[2] = {-1, -1};
        const char *names[2] = {"N", len};
        cJSON *e = add_input(x, n_ids, OG_INT64, 2, dims, names);
        cJSON_AddStringToObject(e, "column", cname);
        cJSON_AddStringToObject(e, "role", "ids");
        cJSON_AddNumberToObject(e, "min", 0);
        cJSON_AddNumberToObject(e, "max_exclusive",
                                (double)dt_features_column_buckets(x->f, col));
        cJSON_AddStringToObject(e, "padding", "rows with fewer ids than the longest are padded "
                                "with id 0 and weight 0; a row without ids is all padding "
                                "(len >= 1)");
        cJSON_AddItemToObject(e, "transform", describe_column(x, cname, 0));
        e = add_input(x, n_w, OG_FLOAT, 2, dims, names);
        cJSON_AddStringToObject(e, "column", cname);
        cJSON_AddStringToObject(e, "role", "weights");
        bool weighted = dt_features_column_type(x->f, col) == DT_FCOL_WEIGHTED;
        cJSON_AddStringToObject(e, "source", weighted
                                ? "each id's weight (the weight_key's number paired with its "
                                  "value, see the ids' transform); 0 on padding"
                                : "1 for each id, 0 on padding");
        x->slot_ids[s] = og_str(x->g, n_ids);
        x->slot_weights[s] = og_str(x->g, n_w);
    }
    *ids = x->slot_ids[s];
    *weights = x->slot_weights[s];
}

/* A numeric column's normalizer over its raw values v, as the spec's object gives it. */
static const char *normalize(exporter *x, const cJSON *col, const char *v)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(col, "normalizer");
    if (cJSON_IsString(n) && strcmp(n->valuestring, "log1p") == 0) {
        /* log(1 + max(x, 0)) */
        const char *p = og_op2(x->g, "Max", v, og_const_f32(x->g, 0.0f));
        return og_op1(x->g, "Log", og_op2(x->g, "Add", p, og_const_f32(x->g, 1.0f)));
    }
    if (cJSON_IsObject(n)) {
        const cJSON *mean = cJSON_GetObjectItemCaseSensitive(n, "mean");
        const cJSON *std = cJSON_GetObjectItemCaseSensitive(n, "std");
        if (!cJSON_IsNumber(mean) || !cJSON_IsNumber(std) || !(std->valuedouble > 0)) {
            failed(x, dt_error(DT_ERR_FORMAT, "%s: column %s: a normalizer without its mean and "
                               "std", DT_FEATURE_SPEC_FILE, cJSON_GetStringValue(
                                   cJSON_GetObjectItemCaseSensitive(col, "name"))));
            return v;
        }
        const char *d = og_op2(x->g, "Sub", v, og_const_f32(x->g, (float)mean->valuedouble));
        return og_op2(x->g, "Div", d, og_const_f32(x->g, (float)std->valuedouble));
    }
    if (n) {
        failed(x, dt_error(DT_ERR_FORMAT, "%s: column %s: the normalizer was never adapted",
                           DT_FEATURE_SPEC_FILE,
                           cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(col, "name"))));
    }
    return v;
}

/* Dense values [off, off + width) of a transformed row: a numeric column's normalized values
 * (its input "c:values" made on first use), or a slice of them. */
static const char *dense_values(exporter *x, int off, int width)
{
    int n = dt_features_num_columns(x->f);
    for (int i = 0; i < n; i++) {
        int w, d = dt_features_column_dense(x->f, i, &w);
        if (d < 0 || off < d || off + width > d + w)
            continue;
        if (!x->numeric[i]) {
            const char *cname = dt_features_column_name(x->f, i);
            char in_name[DT_FEATURE_NAME_CAP + 16];
            snprintf(in_name, sizeof in_name, "%s:values", cname);
            int64_t dims[2] = {-1, w};
            const char *names[2] = {"N", NULL};
            cJSON *e = add_input(x, in_name, OG_FLOAT, 2, dims, names);
            cJSON_AddStringToObject(e, "column", cname);
            cJSON_AddStringToObject(e, "role", "values");
            cJSON_AddItemToObject(e, "transform", describe_column(x, cname, 0));
            cJSON_AddBoolToObject(e, "normalizer_in_graph", true);
            og_scope(x->g, cname);
            x->numeric[i] = normalize(x, spec_column(x, cname), og_str(x->g, in_name));
            og_scope(x->g, NULL);
        }
        if (off == d && width == w)
            return x->numeric[i];
        const char *in[4] = {x->numeric[i], og_const_i64(x->g, 1, (int64_t[]){off - d}),
                             og_const_i64(x->g, 1, (int64_t[]){off - d + width}),
                             axes(x, 1)};
        return og_node(x->g, "Slice", NULL, 4, in);
    }
    failed(x, dt_error(DT_ERR_INVALID, "%s: no numeric column holds dense values %d..%d",
                       DT_FEATURE_SPEC_FILE, off, off + width));
    return "?";
}

/* sum over the list of w_j * table[id_j], (N, dim), the weights first scaled by the
 * combiner's factor: 1 / sum w (mean) or 1 / sqrt(sum w^2) (sqrtn) where that sum is positive,
 * else 1, as dtrain computes it. */
static const char *weighted_rows(exporter *x, const char *table, const char *ids,
                                 const char *weights, dt_combiner comb)
{
    const char *w = weights;
    if (comb != DT_COMBINER_SUM) {
        const char *s = comb == DT_COMBINER_MEAN
                            ? reduce_sum(x, weights, 1, true)
                            : reduce_sum(x, og_op2(x->g, "Mul", weights, weights), 1, true);
        const char *pos = og_op2(x->g, "Greater", s, og_const_f32(x->g, 0.0f));
        const char *den = comb == DT_COMBINER_MEAN ? s : og_op1(x->g, "Sqrt", s);
        const char *in[3] = {pos, og_op1(x->g, "Reciprocal", den), og_const_f32(x->g, 1.0f)};
        w = og_op2(x->g, "Mul", weights, og_node(x->g, "Where", NULL, 3, in));
    }
    const char *rows = og_op2(x->g, "Gather", table, ids); /* (N, L, dim) */
    return reduce_sum(x, og_op2(x->g, "Mul", rows, unsqueeze(x, w, 2)), 1, false);
}

static const char *table_of(exporter *x, int t)
{
    return table_tensor(x, dt_model_table(x->m, t));
}

/* One deep input, (N, width). Tables are made once each (tables[t]). */
static const char *deep_input(exporter *x, const dt_column_input *in, const char **tables)
{
    const char *ids, *w;
    switch (in->kind) {
    case DT_INPUT_NUMERIC: return dense_values(x, in->dense_off, in->width);
    case DT_INPUT_NUMERIC_EMBEDDING: {
        if (!tables[in->table])
            tables[in->table] = table_of(x, in->table); /* (1, K) */
        return og_op2(x->g, "Mul", dense_values(x, in->dense_off, 1), tables[in->table]);
    }
    case DT_INPUT_EMBEDDING:
        slot_inputs(x, in->slot, &ids, &w);
        if (!tables[in->table])
            tables[in->table] = table_of(x, in->table);
        return weighted_rows(x, tables[in->table], ids, w, in->combiner);
    case DT_INPUT_INDICATOR: {
        /* A multi-hot vector of summed weights: OneHot (N, L, buckets) times the weights. */
        slot_inputs(x, in->slot, &ids, &w);
        const char *oh_in[3] = {ids, og_const_i64(x->g, 1, &in->buckets),
                                og_const_f32s(x->g, 2, (const float[]){0.0f, 1.0f})};
        const char *oh = og_node(x->g, "OneHot", NULL, 3, oh_in);
        og_attr_int(x->g, "axis", -1);
        return reduce_sum(x, og_op2(x->g, "Mul", oh, unsqueeze(x, w, 2)), 1, false);
    }
    default: break;
    }
    failed(x, dt_error(DT_ERR_INVALID, "a deep input of kind %d", (int)in->kind));
    return "?";
}

/* The linear part's logits (N, n_out), or NULL without one. */
static const char *linear_part(exporter *x, const dt_columns_spec *cs, const char **tables)
{
    const char *z = NULL;
    for (int i = 0; i < cs->n_linear && x->err == DT_OK; i++) {
        const dt_column_input *in = &cs->linear[i];
        if (!tables[in->table])
            tables[in->table] = table_of(x, in->table);
        const char *t = tables[in->table], *ids, *w, *term;
        char scope[64];
        snprintf(scope, sizeof scope, "linear_%d", i);
        og_scope(x->g, scope);
        switch (in->kind) {
        case DT_INPUT_BIAS: term = t; break; /* (1, N): broadcast */
        case DT_INPUT_NUMERIC: {
            /* x (N, width) times the table's rows row0 .. row0 + width. */
            int64_t *rows = malloc((size_t)in->width * sizeof *rows);
            if (!rows) {
                failed(x, dt_error(DT_ERR_NOMEM, "no memory"));
                return z;
            }
            for (int k = 0; k < in->width; k++)
                rows[k] = in->row0 + k;
            const char *kern = og_op2(x->g, "Gather", t, og_const_i64(x->g, in->width, rows));
            free(rows);
            term = og_op2(x->g, "MatMul", dense_values(x, in->dense_off, in->width), kern);
            break;
        }
        case DT_INPUT_WEIGHTS:
            slot_inputs(x, in->slot, &ids, &w);
            term = weighted_rows(x, t, ids, w, DT_COMBINER_SUM);
            break;
        default:
            failed(x, dt_error(DT_ERR_INVALID, "a linear input of kind %d", (int)in->kind));
            return z;
        }
        z = add_to(x, z, term);
    }
    og_scope(x->g, NULL);
    return z;
}

/* DCN-v2's cross layers over x0 (N, D): x_{l+1} = x0 * (x_l W^T + b) + x_l, with W = U V in
 * the low-rank case. Returns x_L. */
static const char *cross_layers(exporter *x, const dt_columns_spec *cs, const char *x0)
{
    const char *xl = x0;
    for (int l = 0; l < cs->n_cross && x->err == DT_OK; l++) {
        char scope[64], name[DT_VIEW_NAME_CAP];
        snprintf(scope, sizeof scope, "cross/layer_%d", l);
        og_scope(x->g, scope);
        snprintf(name, sizeof name, "%s/bias", scope);
        const char *b = param(x, name), *u;
        if (cs->projection_dim == 0) {
            snprintf(name, sizeof name, "%s/kernel", scope);
            u = og_node(x->g, "Gemm", NULL, 3, (const char *[]){xl, param(x, name), b});
            og_attr_int(x->g, "transB", 1);
        } else {
            snprintf(name, sizeof name, "%s/v", scope); /* (R, D) */
            const char *t = og_op2(x->g, "Gemm", xl, param(x, name));
            og_attr_int(x->g, "transB", 1);
            snprintf(name, sizeof name, "%s/u", scope); /* (D, R) */
            u = og_node(x->g, "Gemm", NULL, 3, (const char *[]){t, param(x, name), b});
            og_attr_int(x->g, "transB", 1);
        }
        xl = og_op2(x->g, "Add", og_op2(x->g, "Mul", x0, u), xl);
    }
    og_scope(x->g, NULL);
    return xl;
}

static void columns_graph(exporter *x)
{
    const dt_columns_spec *cs = x->spec->columns;
    int S = dt_features_num_slots(x->f), C = dt_features_num_columns(x->f);
    x->slot_ids = calloc((size_t)S + 1, sizeof *x->slot_ids);
    x->slot_weights = calloc((size_t)S + 1, sizeof *x->slot_weights);
    x->numeric = calloc((size_t)C + 1, sizeof *x->numeric);
    const char **tables = calloc((size_t)cs->n_tables + 1, sizeof *tables);
    if (!x->slot_ids || !x->slot_weights || !x->numeric || !tables) {
        free(tables);
        failed(x, dt_error(DT_ERR_NOMEM, "no memory for the export"));
        return;
    }
    const char *z = NULL, *x0 = NULL;
    if (cs->n_deep > 0) {
        const char **parts = calloc((size_t)cs->n_deep, sizeof *parts);
        if (!parts) {
            free(tables);
            failed(x, dt_error(DT_ERR_NOMEM, "no memory for the export"));
            return;
        }
        int D = 0;
        for (int i = 0; i < cs->n_deep && x->err == DT_OK; i++) {
            char scope[64];
            snprintf(scope, sizeof scope, "deep_input_%d", i);
            og_scope(x->g, scope);
            parts[i] = deep_input(x, &cs->deep[i], tables);
            const dt_column_input *in = &cs->deep[i];
            D += in->kind == DT_INPUT_NUMERIC     ? in->width
                 : in->kind == DT_INPUT_INDICATOR ? (int)in->buckets
                                                  : cs->tables[in->table].dim;
        }
        og_scope(x->g, "x0");
        x0 = cs->n_deep == 1 ? parts[0] : og_node(x->g, "Concat", NULL, cs->n_deep, parts);
        if (cs->n_deep > 1)
            og_attr_int(x->g, "axis", 1);
        free(parts);
        const char *xl = cs->n_cross > 0 ? cross_layers(x, cs, x0) : x0;
        if (x->spec->n_layers > 0) {
            value v = {.v = cs->n_cross > 0 && cs->cross_stacked ? xl : x0,
                       .lay = LAYOUT_FLAT, .dims = {1, 1, D}};
            emit_layers(x, x->spec->layers, x->spec->n_layers, &v);
            z = v.v;
        }
        if (cs->fm) {
            int K = cs->tables[cs->deep[0].table].dim;
            og_scope(x->g, "fm");
            const char *f3 = og_op2(x->g, "Reshape", x0,
                                    og_const_i64(x->g, 3, (int64_t[]){0, cs->n_deep, K}));
            z = add_to(x, z, fm_term(x, f3));
        }
        if (cs->n_cross > 0 && !cs->cross_stacked) {
            og_scope(x->g, "cross/logits");
            z = add_to(x, z, og_op2(x->g, "MatMul", xl, param(x, "cross/logits/kernel")));
        }
    }
    const char *lin = linear_part(x, cs, tables);
    free(tables);
    if (lin)
        z = z ? og_op2(x->g, "Add", lin, z) : lin;
    if (!z) {
        failed(x, dt_error(DT_ERR_INVALID, "the model has neither a linear nor a deep part"));
        return;
    }
    add_head(x, z, cs->n_outputs);
}

/* ---- The export ---- */

static void describe_model(exporter *x, const dt_ckpt *c, int64_t step, const char *kind,
                           const char *model_file)
{
    cJSON *s = x->sig;
    cJSON_AddStringToObject(s, "format", "onnx");
    cJSON_AddStringToObject(s, "model_file", model_file);
    cJSON_AddNumberToObject(s, "opset", OG_OPSET);
    cJSON_AddStringToObject(s, "producer", "dtrain");
    cJSON_AddStringToObject(s, "checkpoint", dt_ckpt_path(c));
    cJSON_AddNumberToObject(s, "global_step", (double)step);
    cJSON_AddStringToObject(s, "model", kind);
    cJSON_AddStringToObject(s, "model_name", x->spec->name);
}

/* What the graph computes and what it leaves to the caller. */
static void describe_scope(exporter *x)
{
    cJSON *in = cJSON_AddArrayToObject(x->sig, "in_graph");
    cJSON *out = cJSON_AddArrayToObject(x->sig, "outside_graph");
    if (!in || !out)
        return;
    switch (x->spec->arch) {
    case DT_ARCH_SEQUENTIAL:
        cJSON_AddItemToArray(in, cJSON_CreateString("every layer; NHWC to NCHW around Conv and "
                                                    "MaxPool; dropout is the identity"));
        cJSON_AddItemToArray(out, cJSON_CreateString("decoding and scaling the input (pixel / "
                                                     "255 for IDX images)"));
        break;
    case DT_ARCH_COLUMNS:
        cJSON_AddItemToArray(in, cJSON_CreateString("numeric normalizers (standardize, log1p, "
                                                    "mean/std), in float32"));
        cJSON_AddItemToArray(in, cJSON_CreateString("table lookups, embedding combiners "
                                                    "(sum, mean, sqrtn), indicators, the linear "
                                                    "part, the FM term, cross layers, the deep "
                                                    "layers, the head"));
        cJSON_AddItemToArray(out, cJSON_CreateString("parsing raw data, missing values "
                                                     "(default_value), hashing, vocabularies, "
                                                     "identity ranges, bucketizing, crosses and "
                                                     "weights: each input's transform says how"));
        break;
    default:
        cJSON_AddItemToArray(in, cJSON_CreateString("the first-order term, the FM term, the "
                                                    "MLP (batch normalisation with its moving "
                                                    "averages; dropout is the identity), the "
                                                    "sigmoid"));
        cJSON_AddItemToArray(out, cJSON_CreateString("reading the fields' ids and values from "
                                                     "the data (and --hash-buckets' hash)"));
        break;
    }
}

dt_status dt_export_onnx(const char *model_dir, const char *checkpoint,
                         const dt_export_options *o, dt_export_result *r)
{
    dt_status st = dt_export_check(model_dir, checkpoint, o, "file");
    if (st)
        return st;
    dt_export_result res;
    memset(&res, 0, sizeof res);
    exporter x;
    memset(&x, 0, sizeof x);
    dt_saved_spec sm;
    memset(&sm, 0, sizeof sm);
    dt_ckpt *c = NULL;
    char dir[4096], data_path[4100], sig_path[4200];
    const char *base = dt_export_split_path(o->out, dir, sizeof dir);
    if ((st = dt_export_begin(model_dir, checkpoint, o, dir, &sm, &c, &x.m, &res, true)))
        goto done;
    x.spec = dt_model_spec_of(x.m);
    x.f = sm.features;
    x.sig = cJSON_CreateObject();
    if (!x.sig) {
        st = dt_error(DT_ERR_NOMEM, "no memory for the signature");
        goto done;
    }
    if (x.f && !(x.spec_json = dt_export_features_json(x.f))) {
        st = DT_ERR_NOMEM;
        goto done;
    }
    dt_export_model_kind(x.spec, x.spec_json, res.model_kind, sizeof res.model_kind);
    describe_model(&x, c, res.step, res.model_kind, base);
    snprintf(data_path, sizeof data_path, "%s.data", o->out);
    char location[4100];
    snprintf(location, sizeof location, "%s.data", base);
    if ((st = og_create(x.spec->name, data_path, location, o->external_data_threshold, &x.g)))
        goto done;
    x.inputs = cJSON_AddArrayToObject(x.sig, "inputs");
    x.outputs = cJSON_AddArrayToObject(x.sig, "outputs");
    if (!x.inputs || !x.outputs) {
        st = dt_error(DT_ERR_NOMEM, "no memory for the signature");
        goto done;
    }
    switch (x.spec->arch) {
    case DT_ARCH_SEQUENTIAL: sequential_graph(&x); break;
    case DT_ARCH_LR:
    case DT_ARCH_FM:
    case DT_ARCH_DEEPFM: ctr_graph(&x); break;
    case DT_ARCH_COLUMNS:
        if (!x.f) {
            st = dt_error(DT_ERR_INVALID, "%s: a feature-spec model, but %s/%s is missing",
                          res.checkpoint, model_dir ? model_dir : dir, DT_FEATURE_SPEC_FILE);
            goto done;
        }
        columns_graph(&x);
        break;
    }
    if ((st = x.err))
        goto done;
    describe_scope(&x);
    if (x.spec_json) {
        cJSON *copy = cJSON_Duplicate(x.spec_json, 1);
        if (copy)
            cJSON_AddItemToObject(x.sig, "feature_spec", copy);
    }
    char step[32];
    snprintf(step, sizeof step, "%" PRId64, res.step);
    og_meta(x.g, "dtrain.model", res.model_kind);
    og_meta(x.g, "dtrain.global_step", step);
    og_meta(x.g, "dtrain.signature", DT_EXPORT_SIGNATURE_FILE);
    og_doc(x.g, "Exported by dtrain export --format onnx; signature.json beside this file "
                "describes the inputs and outputs.");
    if ((st = og_write(x.g, o->out)))
        goto done;
    og_stats gs;
    og_get_stats(x.g, &gs);
    res.model_bytes = gs.model_bytes, res.data_bytes = gs.data_bytes;
    res.n_nodes = gs.n_nodes, res.n_initializers = gs.n_initializers;
    res.n_external = gs.n_external;
    if (gs.n_external > 0)
        snprintf(res.data_file, sizeof res.data_file, "%s", data_path);
    cJSON_AddStringToObject(x.sig, "external_data", gs.n_external > 0 ? location : "");
    snprintf(sig_path, sizeof sig_path, "%s/%s", dir, DT_EXPORT_SIGNATURE_FILE);
    st = dt_export_write_json(sig_path, x.sig);
    snprintf(res.signature, sizeof res.signature, "%s", sig_path);
done:
    if (r)
        *r = res;
    cJSON_Delete(x.sig);
    cJSON_Delete(x.spec_json);
    free(x.slot_ids), free(x.slot_weights), free(x.numeric);
    og_destroy(x.g);
    dt_model_destroy(x.m);
    dt_ckpt_close(c);
    dt_saved_spec_close(&sm);
    return st;
}
