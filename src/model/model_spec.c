/* Model specs: built-ins and the JSON format (see include/dtrain/model_spec.h).
 *
 * JSON format, one object:
 *   {"name": "cnn", "input_shape": [28, 28, 1], "loss": "sparse_categorical_crossentropy",
 *    "layers": [{"type": "conv2d", "filters": 32, "kernel_size": 3, "activation": "relu"},
 *               {"type": "max_pooling2d", "pool_size": 2}, {"type": "flatten"},
 *               {"type": "dense", "units": 64, "activation": "relu"},
 *               {"type": "dropout", "rate": 0.2}, {"type": "dense", "units": 10}]}
 * Layer types take Keras's snake-case or class names. Unknown keys are errors, so a misspelt
 * option is reported rather than silently ignored. */
#include "dtrain/model_spec.h"
#include "../core/fileio.h"
#include "../core/json.h"
#include "dynamic_json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const loss_names[] = {"sparse_categorical_crossentropy", "binary_crossentropy",
                                         "mean_squared_error"};

const char *dt_loss_name(dt_loss_kind loss) { return loss_names[loss]; }

static const char *auto_name_base(dt_layer_kind kind)
{
    switch (kind) {
    case DT_LAYER_DENSE: return "dense";
    case DT_LAYER_CONV2D: return "conv2d";
    case DT_LAYER_MAXPOOL2D: return "max_pooling2d";
    case DT_LAYER_FLATTEN: return "flatten";
    case DT_LAYER_RELU: return "re_lu";
    case DT_LAYER_SIGMOID:
    case DT_LAYER_TANH: return "activation";
    case DT_LAYER_DROPOUT: return "dropout";
    case DT_LAYER_BATCHNORM: return "batch_normalization";
    }
    return "layer";
}

/* Gives unnamed layers Keras's names (dense, dense_1, ...) and rejects duplicates, which would
 * make two variables share a name in checkpoints. */
static dt_status assign_names(dt_model_spec *s, const char *source)
{
    for (int i = 0; i < s->n_layers; i++) {
        dt_layer_spec *l = &s->layers[i];
        if (l->name[0])
            continue;
        const char *base = auto_name_base(l->kind);
        int seen = 0;
        for (int j = 0; j < i; j++)
            if (s->layers[j].kind == l->kind ||
                strcmp(auto_name_base(s->layers[j].kind), base) == 0)
                seen++;
        if (seen == 0)
            snprintf(l->name, sizeof l->name, "%s", base);
        else
            snprintf(l->name, sizeof l->name, "%s_%d", base, seen);
    }
    for (int i = 0; i < s->n_layers; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(s->layers[i].name, s->layers[j].name) == 0)
                return dt_error(DT_ERR_INVALID, "%s: layers[%d].name: '%s' is already used by layers[%d]",
                                source, i, s->layers[i].name, j);
    return DT_OK;
}

static dt_layer_spec conv_layer(int filters, int k, dt_activation act)
{
    dt_layer_spec l = {.kind = DT_LAYER_CONV2D, .filters = filters, .kernel = {k, k},
                       .strides = {1, 1}, .activation = act};
    return l;
}

static dt_layer_spec pool_layer(int p)
{
    dt_layer_spec l = {.kind = DT_LAYER_MAXPOOL2D, .pool = {p, p}, .strides = {p, p}};
    return l;
}

static dt_layer_spec dense_layer(int units, dt_activation act)
{
    dt_layer_spec l = {.kind = DT_LAYER_DENSE, .units = units, .activation = act};
    return l;
}

dt_status dt_model_spec_builtin(const char *name, dt_model_spec *out)
{
    memset(out, 0, sizeof *out);
    out->loss = DT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    snprintf(out->name, sizeof out->name, "%s", name);
    dt_layer_spec *L = out->layers;
    if (strcmp(name, "mnist_cnn") == 0) {
        /* TensorFlow's multi-worker tutorial: Conv2D(32, 3, relu), MaxPooling2D(), Flatten(),
         * Dense(64, relu), Dense(10). */
        L[0] = conv_layer(32, 3, DT_ACT_RELU);
        L[1] = pool_layer(2);
        L[2] = (dt_layer_spec){.kind = DT_LAYER_FLATTEN};
        L[3] = dense_layer(64, DT_ACT_RELU);
        L[4] = dense_layer(10, DT_ACT_NONE);
        out->n_layers = 5;
    } else if (strcmp(name, "mlp") == 0) {
        /* TensorFlow's beginner quickstart: Flatten(), Dense(128, relu), Dropout(0.2), Dense(10). */
        L[0] = (dt_layer_spec){.kind = DT_LAYER_FLATTEN};
        L[1] = dense_layer(128, DT_ACT_RELU);
        L[2] = (dt_layer_spec){.kind = DT_LAYER_DROPOUT, .rate = 0.2f};
        L[3] = dense_layer(10, DT_ACT_NONE);
        out->n_layers = 4;
    } else {
        return dt_error(DT_ERR_INVALID, "unknown model '%s' (built-in models: mnist_cnn, mlp)", name);
    }
    return assign_names(out, name);
}

/* ---- CTR models ---- */

static const char *const arch_names[] = {"sequential", "lr", "fm", "deepfm", "columns"};

const char *dt_arch_name(dt_arch arch)
{
    return (unsigned)arch < sizeof arch_names / sizeof arch_names[0] ? arch_names[arch] : "?";
}

dt_status dt_arch_parse(const char *name, dt_arch *out)
{
    /* "columns" is not a name to give: a feature spec builds such a model. */
    for (int a = 0; a <= DT_ARCH_DEEPFM; a++)
        if (strcmp(name, arch_names[a]) == 0) {
            *out = (dt_arch)a;
            return DT_OK;
        }
    return dt_error(DT_ERR_INVALID, "unknown model type '%s' (sequential, lr, fm, deepfm)", name);
}

void dt_ctr_spec_default(dt_ctr_spec *c)
{
    memset(c, 0, sizeof *c);
    c->field_size = 39;
    c->embedding_size = 32;
    c->n_deep = 3;
    const int deep[3] = {128, 64, 32};
    for (int i = 0; i < 3; i++) {
        c->deep_layers[i] = deep[i];
        c->dropout_keep[i] = 0.5f;
    }
    c->init_stddev = 0.01f;
    c->bn_decay = 0.9f;
    dt_keymap_policy_default(&c->dynamic_policy);
}

dt_status dt_ctr_spec_check(const dt_ctr_spec *c)
{
    if (c->feature_size < 0)
        return dt_error(DT_ERR_INVALID, "feature_size: must not be negative, got %lld",
                        c->feature_size);
    if (c->n_deep < 1 || c->n_deep > DT_MAX_DEEP_LAYERS)
        return dt_error(DT_ERR_INVALID, "deep_layers: 1..%d layers, got %d", DT_MAX_DEEP_LAYERS,
                        c->n_deep);
    for (int i = 0; i < c->n_deep; i++) {
        if (c->deep_layers[i] < 1 || c->deep_layers[i] > (1 << 16))
            return dt_error(DT_ERR_INVALID, "deep_layers: units in 1..65536, got %d",
                            c->deep_layers[i]);
        if (!(c->dropout_keep[i] > 0.0f && c->dropout_keep[i] <= 1.0f))
            return dt_error(DT_ERR_INVALID, "dropout_keep: keep probabilities in (0, 1], got %g",
                            c->dropout_keep[i]);
    }
    if (!(c->init_stddev >= 0.0f && c->init_stddev < 10.0f))
        return dt_error(DT_ERR_INVALID, "init_stddev: must be in [0, 10), got %g", c->init_stddev);
    if (!(c->bn_decay >= 0.0f && c->bn_decay < 1.0f))
        return dt_error(DT_ERR_INVALID, "bn_decay: a decay in [0, 1), got %g", c->bn_decay);
    return DT_OK;
}

/* The largest sizes a CTR model takes: F x K must stay a dense layer's input, rows a table's. */
#define DT_MAX_FIELDS 4096
#define DT_MAX_EMBEDDING 1024

static dt_status check_ctr(dt_arch arch, const dt_ctr_spec *c)
{
    const char *field = NULL, *why = "";
    if (c->field_size < 1 || c->field_size > DT_MAX_FIELDS)
        field = "field_size", why = "1..4096 fields";
    else if ((!c->dynamic || c->feature_size != 0) &&
             (c->feature_size < 1 || c->feature_size > ((long long)1 << 40)))
        field = "feature_size", why = "1..2^40 rows: the number of distinct feature ids";
    else if (arch != DT_ARCH_LR && (c->embedding_size < 1 || c->embedding_size > DT_MAX_EMBEDDING))
        field = "embedding_size", why = "1..1024";
    else if (arch == DT_ARCH_DEEPFM && (c->n_deep < 1 || c->n_deep > DT_MAX_DEEP_LAYERS))
        field = "deep_layers", why = "1..16 layers";
    else if (!(c->init_stddev >= 0.0f && c->init_stddev < 10.0f))
        field = "init_stddev", why = "in [0, 10)";
    else if (c->batch_norm && !(c->bn_decay >= 0.0f && c->bn_decay < 1.0f))
        field = "bn_decay", why = "a decay in [0, 1)";
    for (int i = 0; !field && arch == DT_ARCH_DEEPFM && i < c->n_deep; i++) {
        if (c->deep_layers[i] < 1 || c->deep_layers[i] > (1 << 16))
            field = "deep_layers", why = "units in 1..65536";
        else if (!(c->dropout_keep[i] > 0.0f && c->dropout_keep[i] <= 1.0f))
            field = "dropout_keep", why = "keep probabilities in (0, 1]";
    }
    if (field)
        return dt_error(DT_ERR_INVALID, "%s model: %s: expected %s", dt_arch_name(arch), field, why);
    if (!c->dynamic && !dt_keymap_policy_is_default(&c->dynamic_policy))
        return dt_error(DT_ERR_INVALID, "%s model: admission and eviction are for dynamic "
                        "tables (`ctr.dynamic`)", dt_arch_name(arch));
    return c->dynamic ? dt_keymap_policy_check(&c->dynamic_policy) : DT_OK;
}

dt_status dt_model_spec_ctr(dt_arch arch, const dt_ctr_spec *c, dt_model_spec *out)
{
    memset(out, 0, sizeof *out);
    if (arch == DT_ARCH_SEQUENTIAL || (unsigned)arch > DT_ARCH_DEEPFM)
        return dt_error(DT_ERR_INVALID, "not a CTR model type: %d", (int)arch);
    dt_status st = check_ctr(arch, c);
    if (st)
        return st;
    out->arch = arch;
    out->ctr = *c;
    out->loss = DT_LOSS_BINARY_CROSSENTROPY;
    snprintf(out->name, sizeof out->name, "%s", dt_arch_name(arch));
    int K = arch == DT_ARCH_LR ? 1 : c->embedding_size;
    if (arch == DT_ARCH_LR)
        out->ctr.embedding_size = 0;
    out->input_shape[0] = out->input_shape[1] = 1;
    out->input_shape[2] = c->field_size * K;
    if (arch != DT_ARCH_DEEPFM) {
        out->ctr.n_deep = 0;
        return DT_OK;
    }
    dt_layer_spec *L = out->layers;
    int n = 0;
    for (int i = 0; i < c->n_deep; i++) {
        L[n++] = dense_layer(c->deep_layers[i], DT_ACT_RELU);
        if (c->batch_norm)
            L[n++] = (dt_layer_spec){.kind = DT_LAYER_BATCHNORM, .momentum = c->bn_decay,
                                     .epsilon = 0.001f};
        if (c->dropout_keep[i] < 1.0f)
            L[n++] = (dt_layer_spec){.kind = DT_LAYER_DROPOUT, .rate = 1.0f - c->dropout_keep[i]};
    }
    L[n++] = dense_layer(1, DT_ACT_NONE);
    out->n_layers = n;
    return assign_names(out, out->name);
}

/* ---- JSON ---- */

struct json_ctx {
    const char *source;
    char field[128]; /* "layers[2].units" */
};

static dt_status field_error(const struct json_ctx *c, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static dt_status field_error(const struct json_ctx *c, const char *key, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dt_error(DT_ERR_INVALID, "%s: %s%s%s: %s", c->source, c->field, c->field[0] ? "." : "",
                    key, msg);
}

static dt_status get_positive_int(const struct json_ctx *c, const cJSON *item, const char *key,
                                  int max, int *out)
{
    if (!cJSON_IsNumber(item) || item->valuedouble != floor(item->valuedouble) ||
        item->valuedouble < 1 || item->valuedouble > max)
        return field_error(c, key, "expected an integer in 1..%d", max);
    *out = (int)item->valuedouble;
    return DT_OK;
}

/* An integer or a list of two, as Keras's kernel_size, pool_size and strides take. */
static dt_status get_pair(const struct json_ctx *c, const cJSON *item, const char *key, int max,
                          int out[2])
{
    if (cJSON_IsArray(item)) {
        if (cJSON_GetArraySize(item) != 2)
            return field_error(c, key, "expected an integer or a list of two integers");
        for (int i = 0; i < 2; i++) {
            char sub[64];
            snprintf(sub, sizeof sub, "%s[%d]", key, i);
            dt_status st = get_positive_int(c, cJSON_GetArrayItem(item, i), sub, max, &out[i]);
            if (st)
                return st;
        }
        return DT_OK;
    }
    dt_status st = get_positive_int(c, item, key, max, &out[0]);
    out[1] = out[0];
    return st;
}

static dt_status get_activation(const struct json_ctx *c, const cJSON *item, dt_activation *out)
{
    static const char *const names[] = {"linear", "relu", "sigmoid", "tanh"};
    if (cJSON_IsNull(item)) {
        *out = DT_ACT_NONE;
        return DT_OK;
    }
    if (cJSON_IsString(item))
        for (int i = 0; i < 4; i++)
            if (strcmp(item->valuestring, names[i]) == 0) {
                *out = (dt_activation)i;
                return DT_OK;
            }
    return field_error(c, "activation", "expected one of \"linear\", \"relu\", \"sigmoid\", \"tanh\"");
}

static dt_status get_padding(const struct json_ctx *c, const cJSON *item, bool *same)
{
    if (cJSON_IsString(item) && strcmp(item->valuestring, "valid") == 0)
        *same = false;
    else if (cJSON_IsString(item) && strcmp(item->valuestring, "same") == 0)
        *same = true;
    else
        return field_error(c, "padding", "expected \"valid\" or \"same\"");
    return DT_OK;
}

static dt_status parse_layer_type(const struct json_ctx *c, const cJSON *item, dt_layer_kind *out)
{
    static const struct {
        const char *name;
        dt_layer_kind kind;
    } types[] = {
        {"dense", DT_LAYER_DENSE},           {"Dense", DT_LAYER_DENSE},
        {"conv2d", DT_LAYER_CONV2D},         {"Conv2D", DT_LAYER_CONV2D},
        {"max_pooling2d", DT_LAYER_MAXPOOL2D}, {"MaxPooling2D", DT_LAYER_MAXPOOL2D},
        {"MaxPool2D", DT_LAYER_MAXPOOL2D},   {"flatten", DT_LAYER_FLATTEN},
        {"Flatten", DT_LAYER_FLATTEN},       {"relu", DT_LAYER_RELU},
        {"ReLU", DT_LAYER_RELU},             {"sigmoid", DT_LAYER_SIGMOID},
        {"tanh", DT_LAYER_TANH},             {"dropout", DT_LAYER_DROPOUT},
        {"Dropout", DT_LAYER_DROPOUT},       {"batch_normalization", DT_LAYER_BATCHNORM},
        {"BatchNormalization", DT_LAYER_BATCHNORM},
    };
    if (!cJSON_IsString(item))
        return field_error(c, "type", item ? "expected a string" : "missing");
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(item->valuestring, types[i].name) == 0) {
            *out = types[i].kind;
            return DT_OK;
        }
    return field_error(c, "type",
                       "unknown layer type '%s' (dense, conv2d, max_pooling2d, flatten, relu, "
                       "sigmoid, tanh, dropout)",
                       item->valuestring);
}

/* Which keys each layer type takes; any other key is an error. */
static bool key_allowed(dt_layer_kind kind, const char *key)
{
    if (strcmp(key, "type") == 0 || strcmp(key, "name") == 0)
        return true;
    static const char *const dense[] = {"units", "activation", NULL};
    static const char *const conv[] = {"filters", "kernel_size", "strides", "padding", "activation",
                                       NULL};
    static const char *const pool[] = {"pool_size", "strides", "padding", NULL};
    static const char *const dropout[] = {"rate", NULL};
    static const char *const batchnorm[] = {"momentum", "epsilon", NULL};
    static const char *const none[] = {NULL};
    const char *const *list = none;
    switch (kind) {
    case DT_LAYER_DENSE: list = dense; break;
    case DT_LAYER_CONV2D: list = conv; break;
    case DT_LAYER_MAXPOOL2D: list = pool; break;
    case DT_LAYER_DROPOUT: list = dropout; break;
    case DT_LAYER_BATCHNORM: list = batchnorm; break;
    default: break;
    }
    for (; *list; list++)
        if (strcmp(*list, key) == 0)
            return true;
    return false;
}

static dt_status parse_layer(struct json_ctx *c, const cJSON *obj, dt_layer_spec *l)
{
    memset(l, 0, sizeof *l);
    if (!cJSON_IsObject(obj))
        return dt_error(DT_ERR_INVALID, "%s: %s: expected an object", c->source, c->field);
    dt_status st = parse_layer_type(c, cJSON_GetObjectItemCaseSensitive(obj, "type"), &l->kind);
    if (st)
        return st;
    const cJSON *item;
    cJSON_ArrayForEach(item, obj)
    {
        if (!key_allowed(l->kind, item->string))
            return field_error(c, item->string, "not an option of a %s layer",
                               auto_name_base(l->kind));
    }
    l->strides[0] = l->strides[1] = 0;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(obj, "name");
    if (name) {
        if (!cJSON_IsString(name) || !name->valuestring[0] ||
            strlen(name->valuestring) >= DT_LAYER_NAME_CAP || strchr(name->valuestring, '/'))
            return field_error(c, "name", "expected a non-empty string of at most %d characters "
                                          "without '/'", DT_LAYER_NAME_CAP - 1);
        snprintf(l->name, sizeof l->name, "%s", name->valuestring);
    }
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(obj, "activation");
    if (act && (st = get_activation(c, act, &l->activation)))
        return st;
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(obj, "padding");
    if (pad && (st = get_padding(c, pad, &l->same)))
        return st;
    const cJSON *strides = cJSON_GetObjectItemCaseSensitive(obj, "strides");
    if (strides && (st = get_pair(c, strides, "strides", 1 << 16, l->strides)))
        return st;
    switch (l->kind) {
    case DT_LAYER_DENSE:
        return get_positive_int(c, cJSON_GetObjectItemCaseSensitive(obj, "units"), "units", 1 << 24,
                                &l->units);
    case DT_LAYER_CONV2D:
        if ((st = get_positive_int(c, cJSON_GetObjectItemCaseSensitive(obj, "filters"), "filters",
                                   1 << 16, &l->filters)))
            return st;
        if ((st = get_pair(c, cJSON_GetObjectItemCaseSensitive(obj, "kernel_size"), "kernel_size",
                           1 << 12, l->kernel)))
            return st;
        if (!strides)
            l->strides[0] = l->strides[1] = 1;
        return DT_OK;
    case DT_LAYER_MAXPOOL2D: {
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(obj, "pool_size");
        if (ps) {
            if ((st = get_pair(c, ps, "pool_size", 1 << 12, l->pool)))
                return st;
        } else {
            l->pool[0] = l->pool[1] = 2; /* Keras's default */
        }
        if (!strides)
            l->strides[0] = l->pool[0], l->strides[1] = l->pool[1];
        return DT_OK;
    }
    case DT_LAYER_DROPOUT: {
        const cJSON *rate = cJSON_GetObjectItemCaseSensitive(obj, "rate");
        /* Checked as the float it becomes: 0.99999999 rounds to 1.0f, which would drop all. */
        if (!cJSON_IsNumber(rate) || !((float)rate->valuedouble >= 0.0f && (float)rate->valuedouble < 1.0f))
            return field_error(c, "rate", "expected a number in [0, 1)");
        l->rate = (float)rate->valuedouble;
        return DT_OK;
    }
    case DT_LAYER_BATCHNORM: {
        const cJSON *mom = cJSON_GetObjectItemCaseSensitive(obj, "momentum");
        const cJSON *eps = cJSON_GetObjectItemCaseSensitive(obj, "epsilon");
        l->momentum = 0.99f, l->epsilon = 0.001f; /* Keras's defaults */
        if (mom && (!cJSON_IsNumber(mom) || !(mom->valuedouble >= 0.0 && mom->valuedouble < 1.0)))
            return field_error(c, "momentum", "expected a number in [0, 1)");
        if (eps && (!cJSON_IsNumber(eps) || !(eps->valuedouble > 0.0 && eps->valuedouble < 1.0)))
            return field_error(c, "epsilon", "expected a number in (0, 1)");
        if (mom)
            l->momentum = (float)mom->valuedouble;
        if (eps)
            l->epsilon = (float)eps->valuedouble;
        return DT_OK;
    }
    default:
        return DT_OK;
    }
}

/* A list of up to DT_MAX_DEEP_LAYERS numbers. */
static dt_status get_number_list(const struct json_ctx *c, const cJSON *item, const char *key,
                                 double *out, int *n)
{
    if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) < 1 ||
        cJSON_GetArraySize(item) > DT_MAX_DEEP_LAYERS)
        return field_error(c, key, "expected a list of 1..%d numbers", DT_MAX_DEEP_LAYERS);
    *n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, item)
    {
        if (!cJSON_IsNumber(v))
            return field_error(c, key, "expected numbers");
        out[(*n)++] = v->valuedouble;
    }
    return DT_OK;
}

/* "dynamic": true and its policy (dynamic_json.h); admit, evict and memory_limit only with it. */
static dt_status parse_dynamic(struct json_ctx *c, const cJSON *root, dt_ctr_spec *ctr)
{
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "dynamic");
    if (d && !cJSON_IsBool(d))
        return field_error(c, "dynamic", "expected true or false");
    ctr->dynamic = d && cJSON_IsTrue(d);
    if (!ctr->dynamic) {
        static const char *const policy[] = {"admit", "evict", "memory_limit"};
        for (int i = 0; i < 3; i++)
            if (cJSON_GetObjectItemCaseSensitive(root, policy[i]))
                return field_error(c, policy[i], "only for dynamic tables (\"dynamic\": true)");
        return DT_OK;
    }
    char where[300];
    snprintf(where, sizeof where, "%s%s%s", c->source, c->field[0] ? ": " : "", c->field);
    return dt_dynamic_policy_from_json(root, where, &ctr->dynamic_policy);
}

/* A CTR model: {"type": "lr" | "fm" | "deepfm", "field_size", "feature_size", "embedding_size",
 * "deep_layers": [units...], "dropout_keep": [KEEP probabilities, as the DeepFM sample] or
 * "dropout_rate": [Keras's drop rates], "init_stddev", "name"}. Unset sizes take
 * dt_ctr_spec_default's values; feature_size is required. */
static dt_status parse_ctr_object(struct json_ctx *c, const cJSON *root, dt_model_spec *out)
{
    static const char *const keys[] = {"type", "name", "field_size", "feature_size",
                                       "embedding_size", "deep_layers", "dropout_keep",
                                       "dropout_rate", "init_stddev", "batch_norm",
                                       "bn_decay", "dynamic", "admit", "evict", "memory_limit",
                                       NULL};
    const cJSON *item;
    const char *bad = dt_json_unknown_field(root, keys);
    if (bad)
        return field_error(c, bad, "unknown key of a CTR model (type, name, field_size, "
                           "feature_size, embedding_size, deep_layers, dropout_keep, "
                           "dropout_rate, init_stddev, batch_norm, bn_decay, dynamic, admit, "
                           "evict, memory_limit)");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "type");
    dt_arch arch;
    if (!cJSON_IsString(type) || dt_arch_parse(type->valuestring, &arch) ||
        arch == DT_ARCH_SEQUENTIAL)
        return field_error(c, "type", "expected \"lr\", \"fm\" or \"deepfm\"");
    dt_ctr_spec ctr;
    dt_ctr_spec_default(&ctr);
    dt_status st = DT_OK;
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "field_size")))
        st = get_positive_int(c, item, "field_size", DT_MAX_FIELDS, &ctr.field_size);
    if (st == DT_OK && (item = cJSON_GetObjectItemCaseSensitive(root, "embedding_size")))
        st = get_positive_int(c, item, "embedding_size", DT_MAX_EMBEDDING, &ctr.embedding_size);
    if (st)
        return st;
    if ((st = parse_dynamic(c, root, &ctr)))
        return st;
    item = cJSON_GetObjectItemCaseSensitive(root, "feature_size");
    if (ctr.dynamic && (!item || (cJSON_IsNumber(item) && item->valuedouble == 0)))
        ctr.feature_size = 0; /* keys, not rows */
    else if (!cJSON_IsNumber(item) || item->valuedouble != floor(item->valuedouble) ||
             item->valuedouble < 1 || item->valuedouble > 1099511627776.0)
        return field_error(c, "feature_size", item ? "expected an integer in 1..2^40"
                                                   : "missing: the tables' rows");
    else
        ctr.feature_size = (long long)item->valuedouble;
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "init_stddev"))) {
        if (!cJSON_IsNumber(item) || !(item->valuedouble >= 0 && item->valuedouble < 10))
            return field_error(c, "init_stddev", "expected a number in [0, 10)");
        ctr.init_stddev = (float)item->valuedouble;
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "batch_norm"))) {
        if (!cJSON_IsBool(item))
            return field_error(c, "batch_norm", "expected true or false");
        ctr.batch_norm = cJSON_IsTrue(item);
    }
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "bn_decay"))) {
        if (!cJSON_IsNumber(item) || !(item->valuedouble >= 0 && item->valuedouble < 1))
            return field_error(c, "bn_decay", "expected a number in [0, 1)");
        ctr.bn_decay = (float)item->valuedouble;
    }
    double units[DT_MAX_DEEP_LAYERS], drop[DT_MAX_DEEP_LAYERS];
    int n_units = ctr.n_deep, n_drop = 0;
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "deep_layers"))) {
        if ((st = get_number_list(c, item, "deep_layers", units, &n_units)))
            return st;
        ctr.n_deep = n_units;
        for (int i = 0; i < n_units; i++) {
            if (units[i] != floor(units[i]) || units[i] < 1 || units[i] > 65536)
                return field_error(c, "deep_layers", "expected units in 1..65536");
            ctr.deep_layers[i] = (int)units[i];
        }
    }
    const cJSON *keep = cJSON_GetObjectItemCaseSensitive(root, "dropout_keep");
    const cJSON *rate = cJSON_GetObjectItemCaseSensitive(root, "dropout_rate");
    if (keep && rate)
        return field_error(c, "dropout_rate", "give dropout_keep (keep probabilities) or "
                           "dropout_rate (drop rates), not both");
    if (keep || rate) {
        const char *key = keep ? "dropout_keep" : "dropout_rate";
        if ((st = get_number_list(c, keep ? keep : rate, key, drop, &n_drop)))
            return st;
        if (n_drop != 1 && n_drop != ctr.n_deep)
            return field_error(c, key, "expected one value or one per deep layer (%d)",
                               ctr.n_deep);
        for (int i = 0; i < ctr.n_deep; i++) {
            double v = drop[n_drop == 1 ? 0 : i];
            if (!(keep ? v > 0 && v <= 1 : v >= 0 && v < 1))
                return field_error(c, key, keep ? "expected keep probabilities in (0, 1]"
                                                : "expected drop rates in [0, 1)");
            ctr.dropout_keep[i] = (float)(keep ? v : 1.0 - v);
        }
    } else {
        for (int i = 0; i < ctr.n_deep; i++)
            ctr.dropout_keep[i] = 0.5f;
    }
    if ((st = dt_model_spec_ctr(arch, &ctr, out)))
        return dt_error_prefix(st, "%s", c->source);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (name && (!cJSON_IsString(name) || !name->valuestring[0] ||
                 strlen(name->valuestring) >= sizeof out->name))
        return field_error(c, "name", "expected a non-empty string of at most %d characters",
                           (int)sizeof out->name - 1);
    if (name)
        snprintf(out->name, sizeof out->name, "%s", name->valuestring);
    return DT_OK;
}

static dt_status parse_model_object(struct json_ctx *c, const cJSON *root, dt_model_spec *out)
{
    static const char *const keys[] = {"name", "input_shape", "loss", "layers", NULL};
    const cJSON *item;
    const char *bad = dt_json_unknown_field(root, keys);
    if (bad)
        return field_error(c, bad, "unknown key (name, input_shape, loss, layers)");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (name && (!cJSON_IsString(name) || strlen(name->valuestring) >= sizeof out->name))
        return field_error(c, "name", "expected a string of at most %d characters",
                           (int)sizeof out->name - 1);
    snprintf(out->name, sizeof out->name, "%s", name ? name->valuestring : "model");

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(root, "input_shape");
    if (shape) {
        if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 3)
            return field_error(c, "input_shape", "expected [height, width, channels]");
        for (int i = 0; i < 3; i++) {
            char key[32];
            snprintf(key, sizeof key, "input_shape[%d]", i);
            dt_status st = get_positive_int(c, cJSON_GetArrayItem(shape, i), key, 1 << 16,
                                            &out->input_shape[i]);
            if (st)
                return st;
        }
    }
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(root, "loss");
    out->loss = DT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    if (loss) {
        bool ok = false;
        if (cJSON_IsString(loss)) {
            const char *v = loss->valuestring;
            for (int i = 0; i < 3; i++)
                if (strcmp(v, loss_names[i]) == 0)
                    out->loss = (dt_loss_kind)i, ok = true;
            if (strcmp(v, "mse") == 0)
                out->loss = DT_LOSS_MEAN_SQUARED_ERROR, ok = true;
        }
        if (!ok)
            return field_error(c, "loss", "expected \"sparse_categorical_crossentropy\", "
                                          "\"binary_crossentropy\" or \"mean_squared_error\"");
    }
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) == 0)
        return field_error(c, "layers", layers ? "expected a non-empty list" : "missing");
    if (cJSON_GetArraySize(layers) > DT_MAX_LAYERS)
        return field_error(c, "layers", "at most %d layers", DT_MAX_LAYERS);
    int i = 0;
    cJSON_ArrayForEach(item, layers)
    {
        snprintf(c->field, sizeof c->field, "layers[%d]", i);
        dt_status st = parse_layer(c, item, &out->layers[i]);
        if (st)
            return st;
        i++;
    }
    out->n_layers = i;
    c->field[0] = '\0';
    return assign_names(out, c->source);
}

dt_status dt_model_spec_from_json(const char *text, const char *source, dt_model_spec *out)
{
    memset(out, 0, sizeof *out);
    struct json_ctx c = {.source = source};
    cJSON *root;
    dt_status st = dt_json_parse(text, source, &root);
    if (st)
        return st;
    if (!cJSON_IsObject(root))
        st = dt_error(DT_ERR_INVALID, "%s: expected a JSON object describing the model", source);
    else if (cJSON_GetObjectItemCaseSensitive(root, "type"))
        st = parse_ctr_object(&c, root, out);
    else
        st = parse_model_object(&c, root, out);
    cJSON_Delete(root);
    return st;
}

/* Model files are small; anything past 16 MiB is not one. */
#define DT_MODEL_FILE_MAX (16u << 20)

dt_status dt_model_spec_from_json_file(const char *path, dt_model_spec *out)
{
    char *text = NULL;
    dt_status st = dt_file_read_text(path, DT_MODEL_FILE_MAX, "a model file", &text, NULL);
    if (st == DT_OK)
        st = dt_model_spec_from_json(text, path, out);
    free(text);
    return st;
}

/* ---- Back to JSON ---- */

static const char *layer_type_name(dt_layer_kind kind)
{
    switch (kind) {
    case DT_LAYER_DENSE: return "dense";
    case DT_LAYER_CONV2D: return "conv2d";
    case DT_LAYER_MAXPOOL2D: return "max_pooling2d";
    case DT_LAYER_FLATTEN: return "flatten";
    case DT_LAYER_RELU: return "relu";
    case DT_LAYER_SIGMOID: return "sigmoid";
    case DT_LAYER_TANH: return "tanh";
    case DT_LAYER_DROPOUT: return "dropout";
    case DT_LAYER_BATCHNORM: return "batch_normalization";
    }
    return "?";
}

static bool add_pair(cJSON *o, const char *key, const int v[2])
{
    cJSON *a = cJSON_CreateIntArray(v, 2);
    return a && cJSON_AddItemToObject(o, key, a);
}

static bool add_layer_json(cJSON *layers, const dt_layer_spec *l)
{
    static const char *const acts[] = {"linear", "relu", "sigmoid", "tanh"};
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(layers, o))
        return false;
    bool ok = cJSON_AddStringToObject(o, "type", layer_type_name(l->kind)) &&
              cJSON_AddStringToObject(o, "name", l->name);
    switch (l->kind) {
    case DT_LAYER_DENSE:
        ok = ok && cJSON_AddNumberToObject(o, "units", l->units) &&
             cJSON_AddStringToObject(o, "activation", acts[l->activation]);
        break;
    case DT_LAYER_CONV2D:
        ok = ok && cJSON_AddNumberToObject(o, "filters", l->filters) &&
             add_pair(o, "kernel_size", l->kernel) && add_pair(o, "strides", l->strides) &&
             cJSON_AddStringToObject(o, "padding", l->same ? "same" : "valid") &&
             cJSON_AddStringToObject(o, "activation", acts[l->activation]);
        break;
    case DT_LAYER_MAXPOOL2D:
        ok = ok && add_pair(o, "pool_size", l->pool) && add_pair(o, "strides", l->strides) &&
             cJSON_AddStringToObject(o, "padding", l->same ? "same" : "valid");
        break;
    case DT_LAYER_DROPOUT:
        ok = ok && cJSON_AddNumberToObject(o, "rate", l->rate);
        break;
    case DT_LAYER_BATCHNORM:
        ok = ok && cJSON_AddNumberToObject(o, "momentum", l->momentum) &&
             cJSON_AddNumberToObject(o, "epsilon", l->epsilon);
        break;
    default:
        break;
    }
    return ok;
}

/* A CTR model's spec in the form parse_ctr_object reads. */
/* A feature-spec model: what checkpoints compare (its tables, layers and loss); the model is
 * rebuilt from the feature spec saved beside them, not from this. */
static bool add_columns_json(cJSON *j, const dt_model_spec *spec)
{
    const dt_columns_spec *c = spec->columns;
    cJSON *tables = NULL, *layers = NULL;
    bool ok = cJSON_AddStringToObject(j, "type", "columns") &&
              cJSON_AddStringToObject(j, "name", spec->name) &&
              cJSON_AddStringToObject(j, "loss", dt_loss_name(spec->loss)) &&
              cJSON_AddNumberToObject(j, "outputs", c->n_outputs) &&
              cJSON_AddNumberToObject(j, "cross_layers", c->n_cross) &&
              (tables = cJSON_AddArrayToObject(j, "tables")) &&
              (layers = cJSON_AddArrayToObject(j, "layers"));
    for (int t = 0; ok && t < c->n_tables; t++) {
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(tables, o) &&
             cJSON_AddStringToObject(o, "name", c->tables[t].name) &&
             cJSON_AddNumberToObject(o, "rows", (double)c->tables[t].rows) &&
             cJSON_AddNumberToObject(o, "dim", c->tables[t].dim) &&
             (!c->tables[t].dynamic || cJSON_AddBoolToObject(o, "dynamic", 1));
    }
    for (int i = 0; ok && i < spec->n_layers; i++)
        ok = add_layer_json(layers, &spec->layers[i]);
    return ok;
}

bool dt_model_spec_dynamic(const dt_model_spec *spec)
{
    if (spec->arch == DT_ARCH_SEQUENTIAL)
        return false;
    if (spec->arch != DT_ARCH_COLUMNS)
        return spec->ctr.dynamic;
    for (int t = 0; spec->columns && t < spec->columns->n_tables; t++)
        if (spec->columns->tables[t].dynamic)
            return true;
    return false;
}

static bool add_ctr_json(cJSON *j, const dt_model_spec *spec)
{
    if (spec->arch == DT_ARCH_COLUMNS)
        return add_columns_json(j, spec);
    const dt_ctr_spec *c = &spec->ctr;
    bool ok = cJSON_AddStringToObject(j, "type", dt_arch_name(spec->arch)) &&
              cJSON_AddStringToObject(j, "name", spec->name) &&
              cJSON_AddNumberToObject(j, "field_size", c->field_size) &&
              cJSON_AddNumberToObject(j, "feature_size", (double)c->feature_size) &&
              cJSON_AddNumberToObject(j, "init_stddev", (double)c->init_stddev);
    if (ok && spec->arch != DT_ARCH_LR)
        ok = cJSON_AddNumberToObject(j, "embedding_size", c->embedding_size) != NULL;
    if (ok && c->dynamic)
        ok = cJSON_AddTrueToObject(j, "dynamic") && dt_dynamic_policy_to_json(j, &c->dynamic_policy);
    if (ok && spec->arch == DT_ARCH_DEEPFM) {
        double keep[DT_MAX_DEEP_LAYERS];
        for (int i = 0; i < c->n_deep; i++)
            keep[i] = c->dropout_keep[i];
        cJSON *units = cJSON_CreateIntArray(c->deep_layers, c->n_deep);
        ok = units && cJSON_AddItemToObject(j, "deep_layers", units);
        cJSON *k = ok ? cJSON_CreateDoubleArray(keep, c->n_deep) : NULL;
        ok = k && cJSON_AddItemToObject(j, "dropout_keep", k);
        if (ok && c->batch_norm)
            ok = cJSON_AddTrueToObject(j, "batch_norm") &&
                 cJSON_AddNumberToObject(j, "bn_decay", (double)c->bn_decay);
    }
    return ok;
}

char *dt_model_spec_to_json(const dt_model_spec *spec)
{
    cJSON *j = cJSON_CreateObject();
    char *text = NULL;
    if (!j)
        return NULL;
    if (spec->arch != DT_ARCH_SEQUENTIAL) {
        if (add_ctr_json(j, spec))
            text = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        return text;
    }
    cJSON *layers = NULL;
    bool ok = cJSON_AddStringToObject(j, "name", spec->name) != NULL;
    if (ok && spec->input_shape[0] > 0) {
        cJSON *shape = cJSON_CreateIntArray(spec->input_shape, 3);
        ok = shape && cJSON_AddItemToObject(j, "input_shape", shape);
    }
    ok = ok && cJSON_AddStringToObject(j, "loss", dt_loss_name(spec->loss)) &&
         (layers = cJSON_AddArrayToObject(j, "layers")) != NULL;
    for (int i = 0; ok && i < spec->n_layers; i++)
        ok = add_layer_json(layers, &spec->layers[i]);
    if (ok)
        text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return text;
}
