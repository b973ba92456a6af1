/* The model a feature spec describes (features.h): its "model" object turned into a columns
 * model (model_spec.h's dt_columns_spec) and the optimizers of its parts, with TensorFlow's
 * canned estimators' defaults where the spec gives none.
 *
 *   linear     LinearClassifier: a weight row per id of each categorical column, a kernel row
 *              per numeric value, a bias; FTRL at min(0.2, 1 / sqrt(columns)).
 *   dnn        DNNClassifier: the deep inputs through dnn_hidden_units (relu, dropout);
 *              Adagrad at 0.05.
 *   wide_deep  DNNLinearCombinedClassifier: both, their logits added, each part its optimizer.
 *   deepfm     each dnn_feature_columns entry one field of one width K: categorical columns
 *              embedded, numeric ones times an embedding row; first-order weights, the FM term
 *              and the MLP, as the DeepFM sample computes them (embeddings from N(0, 0.01^2)
 *              as there, not embedding_column's 1/sqrt(K)); Adam at 0.001.
 *   dcn_v2     TF Recommenders' DCN-v2: x0 the deep inputs, num_cross_layers cross layers
 *              (low rank with projection_dim), stacked or parallel with the MLP; Adam at 0.001.
 * Every table is named as TF names the variable it stands for, shortened:
 * "linear/<column>/weights", "dnn/<column>_embedding/embedding_weights". */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/json.h"
#include "dtrain/table.h"
#include "features_int.h"

#define MAX_HIDDEN DT_MAX_DEEP_LAYERS

typedef struct {
    const dt_features *f;
    dt_columns_spec *cs;
    char where[96];
    float emb_stddev;  /* > 0: the embeddings' initial deviation (deepfm's 0.01) */
} mctx;

static dt_status model_error(const mctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static dt_status model_error(const mctx *c, const char *fmt, ...)
{
    char where[sizeof c->where + 8];
    snprintf(where, sizeof where, "model%s%s", c->where[0] ? "." : "", c->where);
    va_list ap;
    va_start(ap, fmt);
    dt_status st = dt_features_verror(c->f, where, fmt, ap);
    va_end(ap);
    return st;
}

static dt_status add_table(mctx *c, const char *name, int64_t rows, int dim, bool linear,
                           int *out)
{
    dt_columns_spec *cs = c->cs;
    for (int t = 0; t < cs->n_tables; t++)
        if (strcmp(cs->tables[t].name, name) == 0) {
            if (cs->tables[t].rows != rows || cs->tables[t].dim != dim)
                return model_error(c, "table %s is named twice with other sizes", name);
            *out = t;
            return DT_OK;
        }
    if (cs->n_tables == DT_MAX_COLUMN_TABLES)
        return model_error(c, "more than %d tables", DT_MAX_COLUMN_TABLES);
    if (rows > DT_TABLE_MAX_ROWS)
        return model_error(c, "table %s: %lld rows, more than a table holds", name,
                           (long long)rows);
    dt_column_table *t = &cs->tables[cs->n_tables];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows, t->dim = dim, t->linear = linear;
    t->init_stddev = linear ? 0.0f : c->emb_stddev > 0 ? c->emb_stddev
                                                       : (float)(1.0 / sqrt((double)dim));
    dt_keymap_policy_default(&t->policy);
    *out = cs->n_tables++;
    return DT_OK;
}

/* The table of a categorical column's ids: a dynamic column's keyed by them under its policy
 * (rows then come from the key map), which every column sharing the table must have too. */
static dt_status column_table(mctx *c, const dt_feature_column *col, const char *name, int dim,
                              bool linear, int *out)
{
    for (int t = 0; t < c->cs->n_tables; t++) {
        const dt_column_table *had = &c->cs->tables[t];
        if (strcmp(had->name, name) == 0 &&
            (had->dynamic != col->dynamic ||
             (col->dynamic && !dt_keymap_policy_equal(&had->policy, &col->policy))))
            return model_error(c, "table %s: '%s' %s: the columns of a shared table are all "
                               "dynamic with one admission and eviction, or none is", name,
                               col->name, col->dynamic ? "is dynamic under another policy or "
                                                         "beside a fixed column"
                                                       : "is fixed beside a dynamic column");
    }
    int before = c->cs->n_tables;
    dt_status st = add_table(c, name, col->dynamic ? 1 : col->buckets, dim, linear, out);
    if (st == DT_OK && *out == before) {
        c->cs->tables[*out].dynamic = col->dynamic;
        c->cs->tables[*out].policy = col->policy;
    }
    return st;
}

static dt_status add_input(mctx *c, bool linear, dt_column_input in)
{
    dt_columns_spec *cs = c->cs;
    int *n = linear ? &cs->n_linear : &cs->n_deep;
    if (*n == DT_MAX_COLUMN_INPUTS)
        return model_error(c, "more than %d inputs", DT_MAX_COLUMN_INPUTS);
    (linear ? cs->linear : cs->deep)[(*n)++] = in;
    return DT_OK;
}

static const dt_feature_column *column_named(mctx *c, const cJSON *name, const char *what)
{
    int i = cJSON_IsString(name) ? dt_features_find_column(c->f, name->valuestring) : -1;
    if (i < 0) {
        if (cJSON_IsString(name))
            model_error(c, "%s: no column is called '%s'", what, name->valuestring);
        else
            model_error(c, "%s: expected a column name", what);
        return NULL;
    }
    return &c->f->cols[i];
}

/* ---- The linear part ---- */

/* The bias and numeric kernel tables, then a weights table per categorical column. */
static dt_status linear_part(mctx *c, const cJSON *list, int N)
{
    int bias, kernel = -1, width = 0;
    dt_status st = add_table(c, "linear/bias", 1, N, true, &bias);
    if (st || (st = add_input(c, true, (dt_column_input){.kind = DT_INPUT_BIAS, .table = bias})))
        return st;
    for (const cJSON *e = list ? list->child : NULL; e; e = e->next)
        if (cJSON_IsString(e)) {
            int i = dt_features_find_column(c->f, e->valuestring);
            if (i >= 0 && c->f->cols[i].type == DT_FCOL_NUMERIC)
                width += c->f->cols[i].shape;
        }
    if (width > 0 && (st = add_table(c, "linear/numeric/kernel", width, N, true, &kernel)))
        return st;
    int i = 0, row = 0;
    for (const cJSON *e = list ? list->child : NULL; e; e = e->next, i++) {
        snprintf(c->where, sizeof c->where, "linear_feature_columns[%d]", i);
        const dt_feature_column *col = column_named(c, e, "entry");
        if (!col)
            return DT_ERR_INVALID;
        if (col->type == DT_FCOL_NUMERIC) {
            st = add_input(c, true, (dt_column_input){.kind = DT_INPUT_NUMERIC,
                                                     .dense_off = col->dense_off,
                                                     .width = col->shape, .table = kernel,
                                                     .row0 = row});
            row += col->shape;
        } else {
            char name[DT_COLUMN_TABLE_NAME_CAP];
            int t;
            snprintf(name, sizeof name, "linear/%s/weights", col->name);
            if ((st = column_table(c, col, name, N, true, &t)) == DT_OK)
                st = add_input(c, true, (dt_column_input){.kind = DT_INPUT_WEIGHTS,
                                                         .slot = col->slot, .table = t});
        }
        if (st)
            return st;
    }
    c->where[0] = '\0';
    return DT_OK;
}

/* ---- The deep part ---- */

static dt_status get_int_field(mctx *c, const cJSON *o, const char *field, int lo, int hi,
                               int dflt, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    *out = dflt;
    if (!v || cJSON_IsNull(v))
        return DT_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return model_error(c, "%s: expected an integer in [%d, %d]", field, lo, hi);
    *out = (int)v->valuedouble;
    return DT_OK;
}

static dt_status get_combiner(mctx *c, const cJSON *o, dt_combiner *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "combiner");
    *out = DT_COMBINER_MEAN; /* embedding_column's default */
    if (!v)
        return DT_OK;
    static const char *const names[] = {"sum", "mean", "sqrtn"};
    for (int k = 0; k < 3; k++)
        if (cJSON_IsString(v) && strcmp(v->valuestring, names[k]) == 0) {
            *out = (dt_combiner)k;
            return DT_OK;
        }
    return model_error(c, "combiner: expected \"sum\", \"mean\" or \"sqrtn\"");
}

static dt_status check_entry_fields(mctx *c, const cJSON *o, const char *const *allowed)
{
    const char *bad = dt_json_unknown_field(o, allowed);
    return bad ? model_error(c, "unknown field \"%s\"", bad) : DT_OK;
}

static dt_status embedding_input(mctx *c, const dt_feature_column *col, int dim,
                                 dt_combiner comb, const char *table_name)
{
    if (!dt_feature_is_categorical(col))
        return model_error(c, "'%s' is a numeric column: an embedding takes a categorical one",
                           col->name);
    char name[DT_COLUMN_TABLE_NAME_CAP];
    if (table_name)
        snprintf(name, sizeof name, "%s", table_name);
    else
        snprintf(name, sizeof name, "dnn/%s_embedding/embedding_weights", col->name);
    int t;
    dt_status st = column_table(c, col, name, dim, false, &t);
    return st ? st : add_input(c, false, (dt_column_input){.kind = DT_INPUT_EMBEDDING,
                                                          .slot = col->slot, .table = t,
                                                          .combiner = comb});
}

/* One dnn_feature_columns entry; field_dim > 0 for deepfm, whose numeric columns are fields
 * of that width too. */
static dt_status deep_entry(mctx *c, const cJSON *e, int field_dim)
{
    if (cJSON_IsString(e)) {
        const dt_feature_column *col = column_named(c, e, "entry");
        if (!col)
            return DT_ERR_INVALID;
        if (col->type != DT_FCOL_NUMERIC)
            return model_error(c, "'%s' is categorical: give {\"embedding\": \"%s\", "
                               "\"dimension\": d} or {\"indicator\": \"%s\"}", col->name,
                               col->name, col->name);
        if (field_dim > 0) {
            char name[DT_COLUMN_TABLE_NAME_CAP];
            int t;
            if (col->shape != 1)
                return model_error(c, "'%s': a deepfm field holds one value", col->name);
            snprintf(name, sizeof name, "dnn/%s_embedding/embedding_weights", col->name);
            dt_status st = add_table(c, name, 1, field_dim, false, &t);
            return st ? st : add_input(c, false, (dt_column_input){
                                                    .kind = DT_INPUT_NUMERIC_EMBEDDING,
                                                    .dense_off = col->dense_off, .width = 1,
                                                    .table = t});
        }
        return add_input(c, false, (dt_column_input){.kind = DT_INPUT_NUMERIC,
                                                    .dense_off = col->dense_off,
                                                    .width = col->shape});
    }
    if (!cJSON_IsObject(e))
        return model_error(c, "expected a column name or an object");
    const cJSON *emb = cJSON_GetObjectItemCaseSensitive(e, "embedding");
    const cJSON *ind = cJSON_GetObjectItemCaseSensitive(e, "indicator");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shared_embedding");
    dt_combiner comb;
    int dim;
    dt_status st;
    if (ind) {
        static const char *const fields[] = {"indicator", NULL};
        const dt_feature_column *col = column_named(c, ind, "indicator");
        if ((st = check_entry_fields(c, e, fields)) || !col)
            return col ? st : DT_ERR_INVALID;
        if (field_dim > 0)
            return model_error(c, "deepfm fields are embeddings, not indicators");
        if (col->dynamic)
            return model_error(c, "indicator '%s': a dynamic column has no buckets to count: "
                               "embed it", col->name);
        if (!dt_feature_is_categorical(col) || col->buckets > (1 << 20))
            return model_error(c, "indicator '%s': a categorical column of at most %d buckets",
                               col->name, 1 << 20);
        return add_input(c, false, (dt_column_input){.kind = DT_INPUT_INDICATOR,
                                                    .slot = col->slot, .buckets = col->buckets});
    }
    static const char *const fields[] = {"embedding", "shared_embedding", "dimension", "combiner",
                                         NULL};
    if ((st = check_entry_fields(c, e, fields)) || (st = get_combiner(c, e, &comb)) ||
        (st = get_int_field(c, e, "dimension", 1, 1 << 16, 0, &dim)))
        return st;
    if (dim == 0)
        return model_error(c, "dimension: an embedding needs a dimension of at least 1");
    if (field_dim > 0 && dim != field_dim)
        return model_error(c, "dimension %d: every deepfm field has the first one's width, %d",
                           dim, field_dim);
    if (emb) {
        const dt_feature_column *col = column_named(c, emb, "embedding");
        return col ? embedding_input(c, col, dim, comb, NULL) : DT_ERR_INVALID;
    }
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) < 1)
        return model_error(c, "expected \"embedding\", \"indicator\" or \"shared_embedding\"");
    /* One table for every column of the list, named after them, as shared_embeddings does. */
    char name[DT_COLUMN_TABLE_NAME_CAP] = "dnn/";
    int64_t buckets = -1;
    for (const cJSON *it = sh->child; it; it = it->next) {
        const dt_feature_column *col = column_named(c, it, "shared_embedding");
        if (!col)
            return DT_ERR_INVALID;
        if (buckets > 0 && col->buckets != buckets && !col->dynamic)
            return model_error(c, "shared_embedding: '%s' has %lld buckets, the first column "
                               "%lld: shared columns need the same number", col->name,
                               (long long)col->buckets, (long long)buckets);
        buckets = col->buckets;
        size_t at = strlen(name);
        snprintf(name + at, sizeof name - at, "%s%s", at > 4 ? "_" : "", col->name);
    }
    size_t at = strlen(name);
    snprintf(name + at, sizeof name - at, "_shared_embedding/embedding_weights");
    for (const cJSON *it = sh->child; it; it = it->next)
        if ((st = embedding_input(c, column_named(c, it, "shared_embedding"), dim, comb, name)))
            return st;
    return DT_OK;
}

static dt_status deep_part(mctx *c, const cJSON *list, int field_dim)
{
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) < 1)
        return model_error(c, "dnn_feature_columns: expected a list of at least one column");
    int i = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        snprintf(c->where, sizeof c->where, "dnn_feature_columns[%d]", i);
        dt_status st = deep_entry(c, e, field_dim);
        if (st)
            return st;
    }
    c->where[0] = '\0';
    return DT_OK;
}

/* deepfm: the first entry's dimension is every field's. */
static int deepfm_dimension(const cJSON *list)
{
    for (const cJSON *e = list ? list->child : NULL; e; e = e->next)
        if (cJSON_IsObject(e)) {
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(e, "dimension");
            if (cJSON_IsNumber(d) && d->valuedouble >= 1)
                return (int)d->valuedouble;
        }
    return 0;
}

/* The first-order part of deepfm: the linear part over its fields' columns. */
static dt_status deepfm_first_order(mctx *c, const cJSON *list, int N)
{
    cJSON *names = cJSON_CreateArray();
    if (!names)
        return dt_error(DT_ERR_NOMEM, "no memory for a model");
    for (const cJSON *e = list->child; e; e = e->next) {
        const cJSON *n = cJSON_IsString(e) ? e : cJSON_GetObjectItemCaseSensitive(e, "embedding");
        if (cJSON_IsString(n))
            cJSON_AddItemToArray(names, cJSON_CreateString(n->valuestring));
    }
    dt_status st = linear_part(c, names, N);
    cJSON_Delete(names);
    return st;
}

/* ---- Layers, head, optimizers ---- */

static dt_status hidden_layers(mctx *c, const cJSON *m, int N, dt_model_spec *out)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(m, "dnn_hidden_units");
    const cJSON *dr = cJSON_GetObjectItemCaseSensitive(m, "dnn_dropout");
    double rate = 0;
    if (dr && !cJSON_IsNull(dr)) {
        if (!cJSON_IsNumber(dr) || dr->valuedouble < 0 || dr->valuedouble >= 1)
            return model_error(c, "dnn_dropout: a drop rate in [0, 1)");
        rate = dr->valuedouble;
    }
    if (h && !cJSON_IsArray(h))
        return model_error(c, "dnn_hidden_units: expected a list of layer widths");
    int n = 0;
    for (const cJSON *u = h ? h->child : NULL; u; u = u->next) {
        if (!cJSON_IsNumber(u) || u->valuedouble < 1 || u->valuedouble > (1 << 20) ||
            u->valuedouble != floor(u->valuedouble))
            return model_error(c, "dnn_hidden_units: widths of 1 or more");
        if (out->n_layers + 3 > DT_MAX_LAYERS || n == MAX_HIDDEN)
            return model_error(c, "dnn_hidden_units: more than %d layers", MAX_HIDDEN);
        dt_layer_spec *L = &out->layers[out->n_layers++];
        memset(L, 0, sizeof *L);
        L->kind = DT_LAYER_DENSE, L->units = (int)u->valuedouble, L->activation = DT_ACT_RELU;
        snprintf(L->name, sizeof L->name, "dnn/hiddenlayer_%d", n);
        if (rate > 0) {
            L = &out->layers[out->n_layers++];
            memset(L, 0, sizeof *L);
            L->kind = DT_LAYER_DROPOUT, L->rate = (float)rate;
            snprintf(L->name, sizeof L->name, "dnn/dropout_%d", n);
        }
        n++;
    }
    dt_layer_spec *L = &out->layers[out->n_layers++];
    memset(L, 0, sizeof *L);
    L->kind = DT_LAYER_DENSE, L->units = N, L->activation = DT_ACT_NONE;
    snprintf(L->name, sizeof L->name, "dnn/logits");
    return DT_OK;
}

static dt_status parse_head(mctx *c, const cJSON *m, int *N, dt_loss_kind *loss)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(m, "head");
    *N = 1, *loss = DT_LOSS_BINARY_CROSSENTROPY;
    if (!h || (cJSON_IsString(h) && strcmp(h->valuestring, "binary") == 0))
        return DT_OK;
    if (cJSON_IsString(h) && strcmp(h->valuestring, "regression") == 0) {
        *loss = DT_LOSS_MEAN_SQUARED_ERROR;
        return DT_OK;
    }
    int n = 0;
    char tail;
    if (cJSON_IsString(h) && sscanf(h->valuestring, "multiclass:%d%c", &n, &tail) == 1 &&
        n >= 2 && n <= (1 << 16)) {
        *N = n, *loss = DT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
        return DT_OK;
    }
    return model_error(c, "head: expected \"binary\", \"multiclass:N\" (N >= 2) or "
                       "\"regression\"");
}

/* An optimizer object: {"type": t, "learning_rate": lr, ...} in Keras's names. */
static dt_status parse_optimizer(mctx *c, const cJSON *o, const char *field, bool dense,
                                 dt_feature_optimizer *out)
{
    static const char *const fields[] = {"type", "learning_rate", "beta_1", "beta_2", "epsilon",
                                         "initial_accumulator_value", "momentum",
                                         "l1_regularization_strength",
                                         "l2_regularization_strength", NULL};
    snprintf(c->where, sizeof c->where, "%s", field);
    if (!cJSON_IsObject(o))
        return model_error(c, "expected {\"type\": ..., \"learning_rate\": ...}");
    dt_status st = check_entry_fields(c, o, fields);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    if (st)
        return st;
    if (!cJSON_IsString(t))
        return model_error(c, "type: sgd, momentum, adam, adagrad or ftrl");
    snprintf(out->type, sizeof out->type, "%s", t->valuestring);
    bool ftrl = strcmp(out->type, "ftrl") == 0;
    if (!ftrl && strcmp(out->type, "sgd") && strcmp(out->type, "momentum") &&
        strcmp(out->type, "adam") && strcmp(out->type, "adagrad"))
        return model_error(c, "type: \"%s\" is not one of sgd, momentum, adam, adagrad, ftrl",
                           out->type);
    if (ftrl && dense)
        return model_error(c, "type: ftrl trains tables row by row; the deep part's dense "
                           "variables take sgd, momentum, adam or adagrad");
    /* An optimizer named without a rate takes Keras's default rate for it, not the rate of the
     * default optimizer it replaces. */
    char type[sizeof out->type];
    snprintf(type, sizeof type, "%s", out->type);
    memset(out, 0, sizeof *out);
    snprintf(out->type, sizeof out->type, "%s", type);
    out->learning_rate = strcmp(type, "sgd") == 0 || strcmp(type, "momentum") == 0 ? 0.01f
                                                                                  : 0.001f;
    const struct {
        const char *name;
        float *dst;
    } nums[] = {{"learning_rate", &out->learning_rate}, {"beta_1", &out->beta_1},
                {"beta_2", &out->beta_2},               {"epsilon", &out->epsilon},
                {"initial_accumulator_value", &out->initial_accumulator},
                {"momentum", &out->momentum},
                {"l1_regularization_strength", &out->l1},
                {"l2_regularization_strength", &out->l2}};
    for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, nums[k].name);
        if (!v)
            continue;
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0)
            return model_error(c, "%s: a number of 0 or more", nums[k].name);
        *nums[k].dst = (float)v->valuedouble;
    }
    c->where[0] = '\0';
    return DT_OK;
}

static void default_optimizer(dt_feature_optimizer *o, const char *type, float lr)
{
    memset(o, 0, sizeof *o);
    snprintf(o->type, sizeof o->type, "%s", type);
    o->learning_rate = lr;
}

static dt_status optimizers(mctx *c, const cJSON *m, bool has_linear, bool has_deep,
                            int n_linear_columns, bool one_part, dt_feature_model *out)
{
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(m, "optimizer");
    const cJSON *lin = cJSON_GetObjectItemCaseSensitive(m, "linear_optimizer");
    const cJSON *dnn = cJSON_GetObjectItemCaseSensitive(m, "dnn_optimizer");
    dt_status st = DT_OK;
    /* TF's canned defaults: FTRL at min(0.2, 1/sqrt(columns)) for a linear part, Adagrad at
     * 0.05 for a DNN; the models of one part (deepfm, dcn_v2) Adam at 0.001 as TFRS's. */
    double lr = n_linear_columns > 0 ? 1.0 / sqrt((double)n_linear_columns) : 0.2;
    default_optimizer(&out->linear, "ftrl", (float)(lr < 0.2 ? lr : 0.2));
    default_optimizer(&out->dnn, "adagrad", 0.05f);
    if (one_part) {
        default_optimizer(&out->dnn, "adam", 0.001f);
        out->linear = out->dnn;
    }
    if (one && (lin || dnn))
        return model_error(c, "give \"optimizer\" or \"linear_optimizer\" and "
                           "\"dnn_optimizer\", not both");
    if (one) {
        /* One optimizer for every part (a linear model's is FTRL-capable: only tables). */
        bool dense = has_deep;
        if ((st = parse_optimizer(c, one, "optimizer", dense, &out->dnn)))
            return st;
        out->linear = out->dnn;
        return DT_OK;
    }
    if (lin && !has_linear)
        return model_error(c, "linear_optimizer: the model has no linear part");
    if (dnn && !has_deep)
        return model_error(c, "dnn_optimizer: the model has no deep part");
    if (lin && (st = parse_optimizer(c, lin, "linear_optimizer", false, &out->linear)))
        return st;
    if (dnn && (st = parse_optimizer(c, dnn, "dnn_optimizer", true, &out->dnn)))
        return st;
    return DT_OK;
}

/* ---- The model ---- */

static dt_status check_model_fields(mctx *c, const cJSON *m)
{
    static const char *const fields[] = {"type", "linear_feature_columns", "dnn_feature_columns",
                                         "dnn_hidden_units", "dnn_dropout", "linear_optimizer",
                                         "dnn_optimizer", "optimizer", "head",
                                         "num_cross_layers", "projection_dim", "structure",
                                         NULL};
    return check_entry_fields(c, m, fields);
}

static dt_status cross_options(mctx *c, const cJSON *m)
{
    dt_columns_spec *cs = c->cs;
    dt_status st = get_int_field(c, m, "num_cross_layers", 1, DT_MAX_CROSS_LAYERS, 3,
                                 &cs->n_cross);
    if (st == DT_OK)
        st = get_int_field(c, m, "projection_dim", 1, 1 << 16, 0, &cs->projection_dim);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(m, "structure");
    if (st == DT_OK && s && !(cJSON_IsString(s) && (strcmp(s->valuestring, "stacked") == 0 ||
                                                    strcmp(s->valuestring, "parallel") == 0)))
        st = model_error(c, "structure: \"stacked\" or \"parallel\"");
    cs->cross_stacked = s && strcmp(s->valuestring, "stacked") == 0;
    return st;
}

static int deep_width(const dt_columns_spec *cs)
{
    int D = 0;
    for (int i = 0; i < cs->n_deep; i++) {
        const dt_column_input *in = &cs->deep[i];
        D += in->kind == DT_INPUT_NUMERIC     ? in->width
             : in->kind == DT_INPUT_INDICATOR ? (int)in->buckets
                                              : cs->tables[in->table].dim;
    }
    return D;
}

dt_status dt_features_model(dt_features *f, dt_feature_model *out)
{
    memset(out, 0, sizeof *out);
    if (!f->model)
        return dt_error(DT_ERR_INVALID, "%s: no \"model\" object: the spec describes columns "
                        "only", f->source);
    if (dt_features_needs_adapt(f))
        return dt_error(DT_ERR_INVALID, "%s: columns still to adapt: run the adapt pass first",
                        f->source);
    free(f->columns);
    if (!(f->columns = calloc(1, sizeof *f->columns)))
        return dt_error(DT_ERR_NOMEM, "no memory for a model");
    mctx c = {.f = f, .cs = f->columns};
    const cJSON *m = f->model;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(m, "type");
    const cJSON *lin = cJSON_GetObjectItemCaseSensitive(m, "linear_feature_columns");
    const cJSON *dnn = cJSON_GetObjectItemCaseSensitive(m, "dnn_feature_columns");
    dt_model_spec *ms = &out->spec;
    int N;
    dt_status st = check_model_fields(&c, m);
    if (st == DT_OK)
        st = parse_head(&c, m, &N, &ms->loss);
    if (st)
        return st;
    static const char *const types[] = {"linear", "dnn", "wide_deep", "deepfm", "dcn_v2"};
    int kind = -1;
    for (int k = 0; k < 5 && cJSON_IsString(type); k++)
        if (strcmp(type->valuestring, types[k]) == 0)
            kind = k;
    if (kind < 0)
        return model_error(&c, "type: expected linear, dnn, wide_deep, deepfm or dcn_v2");
    bool has_linear = kind == 0 || kind == 2 || kind == 3, has_deep = kind != 0;
    if ((kind == 0 || kind == 2) && (!cJSON_IsArray(lin) || cJSON_GetArraySize(lin) < 1))
        return model_error(&c, "linear_feature_columns: a %s model needs at least one",
                           types[kind]);
    if (kind == 1 || kind == 3 || kind == 4) {
        if (lin)
            return model_error(&c, "linear_feature_columns: a %s model reads "
                               "dnn_feature_columns only", types[kind]);
    }
    /* Fields of parts the model has not are refused, as a misspelt field is: they would be
     * silently ignored otherwise. */
    static const char *const deep_only[] = {"dnn_feature_columns", "dnn_hidden_units",
                                            "dnn_dropout"};
    static const char *const cross_only[] = {"num_cross_layers", "projection_dim", "structure"};
    for (int k = 0; k < 3; k++) {
        if (kind == 0 && cJSON_GetObjectItemCaseSensitive(m, deep_only[k]))
            return model_error(&c, "%s: a linear model has no deep part", deep_only[k]);
        if (kind != 4 && cJSON_GetObjectItemCaseSensitive(m, cross_only[k]))
            return model_error(&c, "%s: only a dcn_v2 model has cross layers", cross_only[k]);
    }
    int field_dim = kind == 3 ? deepfm_dimension(dnn) : 0;
    if (kind == 3 && field_dim == 0)
        return model_error(&c, "dnn_feature_columns: deepfm needs embeddings with a dimension");
    /* DeepFM's sample draws its embeddings from N(0, 0.01^2): at embedding_column's
     * 1/sqrt(K) the FM term over 39 fields starts with logits in the tens. */
    if (kind == 3)
        c.emb_stddev = 0.01f;
    c.cs->n_outputs = N;
    c.cs->n_dense = f->n_dense, c.cs->n_slots = f->n_slots;
    if (kind == 0 || kind == 2)
        st = linear_part(&c, lin, N);
    else if (kind == 3)
        st = deepfm_first_order(&c, dnn, N);
    if (st == DT_OK && has_deep)
        st = deep_part(&c, dnn, field_dim);
    if (st == DT_OK && kind == 4)
        st = cross_options(&c, m);
    if (st)
        return st;
    c.cs->fm = kind == 3;
    if (kind == 3 && N != 1)
        return model_error(&c, "head: deepfm's FM term gives one logit: a binary or regression "
                           "head");
    snprintf(ms->name, sizeof ms->name, "%s", types[kind]);
    ms->arch = DT_ARCH_COLUMNS;
    ms->columns = c.cs;
    int D = deep_width(c.cs);
    ms->input_shape[0] = ms->input_shape[1] = 1;
    ms->input_shape[2] = D > 0 ? D : 1;
    if (has_deep && (st = hidden_layers(&c, m, N, ms)))
        return st;
    return optimizers(&c, m, has_linear, has_deep, lin ? cJSON_GetArraySize(lin) : 0,
                      kind >= 3, out);
}
