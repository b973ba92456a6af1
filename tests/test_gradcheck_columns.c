/* Finite-difference gradient checks of feature-spec models (model_spec.h's dt_columns_spec)
 * through the whole public path: a JSON spec parsed with dt_features_parse, its model built with
 * dt_features_model and dt_model_create, raw text cells transformed with dt_features_transform
 * into a batch, then dt_model_forward_batch, dt_model_loss and dt_model_backward. Every dense
 * variable (dt_model_grads) and every element of every table (dt_model_table_grad, scattered)
 * is compared with central differences of the mean loss, for each model type (linear, dnn,
 * wide_deep, deepfm, dcn_v2 stacked and parallel, full and low rank) and head (binary,
 * multiclass:3, regression).
 *
 * The columns cover every kind the deep and linear parts read: numeric (normalized, with a
 * default for a missing cell), bucketized, vocabulary_list with OOV buckets, hash_bucket,
 * multivalent hash_bucket with a separator, weighted (negative and fractional weights),
 * crossed; the deep part takes them as numeric values, embeddings with each combiner,
 * indicators (of a weighted column too) and a shared embedding.
 *
 * Regression: dt_model_loss takes int32 labels, which dt_batch_labels (src/train/evaluate.c)
 * also restricts to 0 and 1 for a one-output model, so a regression head is checked here
 * against targets 0 and 1 only: real-valued regression targets cannot reach the loss. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/features.h"
#include "dtrain/model.h"
#include "dtrain/rng.h"
#include "test.h"

#define B 6

static const char *const spec_columns =
    "\"label\": \"y\", \"columns\": ["
    "{\"name\": \"age\", \"type\": \"numeric\", \"default_value\": 30,"
    " \"normalizer\": {\"mean\": 40, \"std\": 12}},"
    "{\"name\": \"hours\", \"type\": \"numeric\", \"default_value\": 0,"
    " \"normalizer\": {\"mean\": 5, \"std\": 20}},"
    "{\"name\": \"age_b\", \"type\": \"bucketized\", \"source\": \"age\","
    " \"boundaries\": [25, 35, 50]},"
    "{\"name\": \"color\", \"type\": \"vocabulary_list\","
    " \"vocabulary\": [\"red\", \"green\", \"blue\"], \"num_oov_buckets\": 2},"
    "{\"name\": \"user\", \"type\": \"hash_bucket\", \"hash_bucket_size\": 10},"
    "{\"name\": \"item\", \"type\": \"hash_bucket\", \"hash_bucket_size\": 10},"
    "{\"name\": \"tags\", \"type\": \"hash_bucket\", \"hash_bucket_size\": 7, \"separator\": \"|\"},"
    "{\"name\": \"tagw\", \"type\": \"weighted\", \"categorical\": \"tags\", \"weight_key\": \"tw\"},"
    "{\"name\": \"color_x_age\", \"type\": \"crossed\", \"keys\": [\"color\", \"age_b\"],"
    " \"hash_bucket_size\": 11}]";

/* The raw keys and B rows of text cells; "" is a missing cell. The label cell is the head's. */
static const char *const keys[] = {"age", "hours", "color", "user", "item", "tags", "tw"};
enum { N_KEYS = sizeof keys / sizeof keys[0] };
static const char *const cells[B][N_KEYS] = {
    {"23", "40", "red", "alice", "x", "a|b|c", "0.5|2|1.5"},
    {"", "12.5", "purple", "bob", "y", "b", "3"},
    {"61", "0", "blue", "alice", "alice", "", ""},
    {"35", "-3", "", "carol", "x", "c||c|d", "1|0.25|2"},
    {"47", "8", "green", "bob", "z", "e|a", "-0.5|1"},
    {"50", "1", "red", "dave", "w", "a|zz|b|a", "1|1|1|0.5"},
};

/* The same rows with at most one value in each list: a DeepFM batch of them is read a field at
 * a time as one run of rows (cols.c's fm_fields_forward), where `cells` takes the general way;
 * row 2's tags are missing, as are some of each. */
static const char *const one_value_cells[B][N_KEYS] = {
    {"23", "40", "red", "alice", "x", "a", "0.5"},
    {"", "12.5", "purple", "bob", "y", "b", "3"},
    {"61", "0", "blue", "alice", "alice", "", ""},
    {"35", "-3", "", "carol", "x", "c", "2"},
    {"47", "8", "green", "bob", "z", "e", "-0.5"},
    {"50", "1", "red", "dave", "w", "zz", "1"},
};

/* The rows make_batch reads. */
static const char *const (*rows_now)[N_KEYS] = cells;

/* Deep inputs of every kind; D = 1 + 1 + 3 + 2 + 3 + 4 + 7 + 2 + 2 + 2 = 27. */
static const char *const deep_columns =
    "[\"age\", \"hours\", {\"embedding\": \"color\", \"dimension\": 3, \"combiner\": \"sum\"},"
    " {\"embedding\": \"tags\", \"dimension\": 2, \"combiner\": \"mean\"},"
    " {\"embedding\": \"tagw\", \"dimension\": 3, \"combiner\": \"sqrtn\"},"
    " {\"indicator\": \"age_b\"}, {\"indicator\": \"tagw\"},"
    " {\"shared_embedding\": [\"user\", \"item\"], \"dimension\": 2, \"combiner\": \"sum\"},"
    " {\"embedding\": \"color_x_age\", \"dimension\": 2}]";

static const char *const linear_columns =
    "[\"age\", \"hours\", \"age_b\", \"color\", \"user\", \"item\", \"tags\", \"tagw\","
    " \"color_x_age\"]";

/* deepfm's fields: numeric columns and embeddings, all of dimension 3. */
static const char *const deepfm_columns =
    "[\"age\", {\"embedding\": \"color\", \"dimension\": 3, \"combiner\": \"sum\"}, \"hours\","
    " {\"embedding\": \"tags\", \"dimension\": 3, \"combiner\": \"mean\"},"
    " {\"embedding\": \"tagw\", \"dimension\": 3, \"combiner\": \"sqrtn\"},"
    " {\"shared_embedding\": [\"user\", \"item\"], \"dimension\": 3},"
    " {\"embedding\": \"color_x_age\", \"dimension\": 3}]";

static char *spec_text(const char *model)
{
    size_t n = strlen(spec_columns) + strlen(model) + 64;
    char *s = malloc(n);
    snprintf(s, n, "{%s, \"model\": %s}", spec_columns, model);
    return s;
}

static dt_features *parse(const char *model)
{
    char *text = spec_text(model);
    dt_features *f = NULL;
    CHECK_OK(dt_features_parse(text, "columns.json", NULL, &f));
    free(text);
    return f;
}

/* The batch: each row's cells through the spec's transform, the label cell labels[b]. */
static dt_elem *make_batch(const dt_features *f, const int32_t *labels)
{
    dt_feature_scratch *s = NULL;
    CHECK_OK(dt_feature_scratch_new(f, &s));
    if (!s)
        return NULL;
    int nk = dt_features_num_keys(f);
    dt_raw_value *v = calloc((size_t)nk, sizeof *v);
    dt_bytes_ref *refs = calloc((size_t)nk, sizeof *refs);
    dt_rowbuf rb;
    dt_rowbuf_init(&rb, dt_features_dense_width(f));
    char label[16];
    for (int b = 0; b < B; b++) {
        snprintf(label, sizeof label, "%d", labels[b]);
        for (int k = 0; k < nk; k++) {
            const char *key = dt_features_key(f, k), *text = NULL;
            if (strcmp(key, "y") == 0)
                text = label;
            for (int j = 0; j < N_KEYS && !text; j++)
                if (strcmp(key, keys[j]) == 0)
                    text = rows_now[b][j];
            CHECK_MSG(text != NULL, "the spec reads key '%s', which the rows lack", key);
            if (!text || !*text) {
                v[k] = (dt_raw_value){DT_RAW_MISSING, 0, NULL, NULL, NULL};
            } else {
                refs[k] = (dt_bytes_ref){text, strlen(text)};
                v[k] = (dt_raw_value){DT_RAW_TEXT, 1, &refs[k], NULL, NULL};
            }
        }
        CHECK_OK(dt_features_transform(f, s, v, &rb));
    }
    dt_elem *e = rb.n == B ? dt_rowbuf_take(&rb) : NULL;
    dt_rowbuf_free(&rb);
    free(v), free(refs);
    dt_feature_scratch_free(s);
    return e;
}

static double mean_loss(dt_model *m, const dt_elem *e, const int32_t *labels)
{
    const float *logits = NULL;
    dt_status st = dt_model_forward_batch(m, e, true, &logits);
    if (st != DT_OK) {
        test_fail(__FILE__, __LINE__, "forward: %s", dt_last_error());
        return NAN;
    }
    return dt_model_loss(m, B, labels, 1.0f / B, false, NULL) / B;
}

typedef struct {
    const char *what;
    int n_bad;
    double worst; /* the largest |fd - g| / (scale) seen, for the report */
} gc_ctx;

/* (L(w + h) - L(w - h)) / 2h, or one-sided with side +1 (L(w + h) - L(w)) / h and -1
 * (L(w) - L(w - h)) / h. */
static double difference(dt_model *m, const dt_elem *e, const int32_t *labels, float *w,
                         float eps, int side)
{
    float saved = *w, hi = side >= 0 ? saved + eps : saved, lo = side <= 0 ? saved - eps : saved;
    *w = hi;
    double up = mean_loss(m, e, labels);
    *w = lo;
    double down = mean_loss(m, e, labels);
    *w = saved;
    return (up - down) / ((double)hi - (double)lo);
}

/* One element: central differences of the mean loss against the backward's g, at a step of
 * 1e-3. When they differ, a ReLU's input may lie within the step of 0, bending the loss
 * between the two points: again at 2.5e-4, and if the slopes on either side of w still differ
 * (a kink, then), g must be the slope of one side. */
static void check_element(gc_ctx *c, dt_model *m, const dt_elem *e, const int32_t *labels,
                          float *w, double g, double scale, const char *name, size_t k)
{
    double tol = 5e-3 * scale + 5e-5;
    double fd = difference(m, e, labels, w, 1e-3f, 0), err = fabs(fd - g);
    if (!(err <= tol)) {
        double fd2 = difference(m, e, labels, w, 2.5e-4f, 0);
        double right = difference(m, e, labels, w, 2.5e-4f, 1);
        double left = difference(m, e, labels, w, 2.5e-4f, -1);
        bool kink = fabs(right - left) > tol;
        if (getenv("DT_GRADCHECK_VERBOSE"))
            printf("    %s: %s[%zu]: backward %.7g, finite differences %.7g then %.7g "
                   "(left %.7g, right %.7g)\n", c->what, name, k, g, fd, fd2, left, right);
        err = fabs(fd2 - g);
        if (kink)
            err = fmin(err, fmin(fabs(left - g), fabs(right - g)));
        fd = fd2;
    }
    c->worst = fmax(c->worst, err / tol);
    if (!(err <= tol) && c->n_bad++ < 6)
        test_fail(__FILE__, __LINE__, "%s: %s[%zu]: backward %.7g, finite difference %.7g",
                  c->what, name, k, g, fd);
}

/* Checks every dense variable (up to 48 elements each) and every table element. */
static void gradcheck(const char *what, const char *model_json, int n_classes, uint64_t seed,
                      int threads)
{
    gc_ctx c = {what, 0, 0.0};
    dt_features *f = parse(model_json);
    if (!f)
        return;
    dt_feature_model fm;
    CHECK_OK(dt_features_model(f, &fm));
    dt_pool *pool = NULL;
    if (threads > 1)
        CHECK_OK(dt_pool_create(threads, &pool));
    dt_model *m = NULL;
    CHECK_OK(dt_model_create(&fm.spec, B, pool, NULL, &m));
    if (!m) {
        dt_pool_destroy(pool);
        dt_features_destroy(f);
        return;
    }
    int K = dt_model_num_outputs(m);
    CHECK(K == (n_classes > 2 ? n_classes : 1));
    int32_t labels[B];
    for (int b = 0; b < B; b++)
        labels[b] = (int32_t)((b * 7 + 1) % n_classes);
    dt_elem *e = make_batch(f, labels);
    if (!e) {
        dt_model_destroy(m);
        dt_pool_destroy(pool);
        dt_features_destroy(f);
        return;
    }
    for (int b = 0; b < B; b++)
        CHECK(e->labels[b] == (float)labels[b]);

    /* Keras's initialisers, then non-zero biases and linear weights (zeros otherwise), so that
     * every path carries a gradient and the ReLUs are not all on one side. */
    dt_model_init_params(m, seed);
    dt_rng r;
    dt_rng_seed(&r, seed * 31 + 7);
    dt_arena *p = dt_model_params(m), *g = dt_model_grads(m);
    for (int v = 0; v < p->n_views; v++)
        if (strstr(p->views[v].name, "bias"))
            for (size_t k = 0; k < p->views[v].n_elems; k++)
                dt_arena_view_data(p, v)[k] = 0.4f * (dt_rng_uniform(&r) - 0.5f);
    int n_tables = dt_model_num_tables(m);
    for (int t = 0; t < n_tables; t++) {
        dt_table *tab = dt_model_table(m, t);
        if (dt_model_table_linear(m, t))
            for (size_t k = 0; k < (size_t)tab->rows * (size_t)tab->dim; k++)
                tab->data[k] = 0.6f * (dt_rng_uniform(&r) - 0.5f);
    }

    const float *logits = NULL;
    CHECK_OK(dt_model_forward_batch(m, e, true, &logits));
    double loss = dt_model_loss(m, B, labels, 1.0f / B, true, NULL) / B;
    CHECK(isfinite(loss) && loss > 0);
    dt_model_zero_grads(m);
    dt_model_backward(m, B);

    /* The tables' sparse gradients: ids ascending and unique, within the table; then dense. */
    float **tg = calloc((size_t)n_tables + 1, sizeof *tg);
    for (int t = 0; t < n_tables; t++) {
        const dt_table *tab = dt_model_table(m, t);
        const dt_sparse_rows *s = dt_model_table_grad(m, t);
        tg[t] = calloc((size_t)tab->rows * (size_t)tab->dim, sizeof **tg);
        CHECK_MSG(s->dim == tab->dim, "%s: table %s: gradient rows of %d, table rows of %d",
                  what, tab->name, s->dim, tab->dim);
        CHECK_MSG(s->n > 0, "%s: table %s: no gradient rows", what, tab->name);
        for (size_t u = 0; u < s->n && s->dim == tab->dim; u++) {
            bool ok = s->ids[u] >= 0 && s->ids[u] < tab->rows && (u == 0 || s->ids[u] > s->ids[u - 1]);
            CHECK_MSG(ok, "%s: table %s: gradient row %zu has id %lld", what, tab->name, u,
                      (long long)s->ids[u]);
            if (ok)
                memcpy(tg[t] + (size_t)s->ids[u] * tab->dim, s->rows + u * (size_t)s->dim,
                       (size_t)tab->dim * sizeof **tg);
        }
    }
    /* The dense gradients, copied before the finite differences run forwards. */
    float *dense = malloc(g->n_elems * sizeof *dense);
    memcpy(dense, g->data, g->n_elems * sizeof *dense);
    CHECK(p->n_views > 0 || n_tables > 0);

    for (int v = 0; v < p->n_views; v++) {
        float *w = dt_arena_view_data(p, v);
        const float *gw = dense + g->views[v].offset;
        size_t n = p->views[v].n_elems, step = n > 48 ? n / 48 : 1;
        double scale = 1e-3;
        for (size_t k = 0; k < n; k++)
            scale = fmax(scale, fabs(gw[k]));
        for (size_t k = 0; k < n; k += step)
            check_element(&c, m, e, labels, &w[k], gw[k], scale, p->views[v].name, k);
    }
    for (int t = 0; t < n_tables; t++) {
        dt_table *tab = dt_model_table(m, t);
        size_t n = (size_t)tab->rows * (size_t)tab->dim;
        double scale = 1e-3;
        for (size_t k = 0; k < n; k++)
            scale = fmax(scale, fabs(tg[t][k]));
        for (size_t k = 0; k < n; k++)
            check_element(&c, m, e, labels, &tab->data[k], tg[t][k], scale, tab->name, k);
    }
    /* The training loop's order, the gradients zeroed before the forward rather than between
     * the loss and backward, gives the same gradients, bit for bit. */
    dt_model_zero_grads(m);
    CHECK_OK(dt_model_forward_batch(m, e, true, NULL));
    dt_model_loss(m, B, labels, 1.0f / B, true, NULL);
    dt_model_backward(m, B);
    CHECK_MSG(memcmp(dense, g->data, g->n_elems * sizeof *dense) == 0,
              "%s: dense gradients differ with zero_grads before the forward", what);
    for (int t = 0; t < n_tables; t++) {
        const dt_table *tab = dt_model_table(m, t);
        const dt_sparse_rows *s = dt_model_table_grad(m, t);
        size_t same = 0;
        for (size_t u = 0; u < s->n && s->dim == tab->dim; u++)
            same += s->ids[u] >= 0 && s->ids[u] < tab->rows &&
                    memcmp(tg[t] + (size_t)s->ids[u] * tab->dim, s->rows + u * (size_t)s->dim,
                           (size_t)tab->dim * sizeof **tg) == 0;
        CHECK_MSG(s->n > 0 && same == s->n, "%s: table %s: %zu of %zu gradient rows differ with "
                  "zero_grads before the forward", what, tab->name, s->n - same, s->n);
        free(tg[t]);
    }
    if (getenv("DT_GRADCHECK_VERBOSE"))
        printf("    %s: loss %.6f, worst error %.3f of the tolerance\n", what, loss, c.worst);
    free(tg);
    free(dense);
    dt_elem_free(e);
    dt_model_destroy(m);
    dt_pool_destroy(pool);
    dt_features_destroy(f);
}

static char *model_json(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *model_json(const char *fmt, ...)
{
    static char buf[4][4096];
    static int next;
    char *s = buf[next++ % 4];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof buf[0], fmt, ap);
    va_end(ap);
    return s;
}

static const struct {
    const char *head;
    int classes;
} heads[] = {{"binary", 2}, {"multiclass:3", 3}, {"regression", 2}};

TEST(gradcheck_columns_linear)
{
    for (int h = 0; h < 3; h++)
        gradcheck(model_json("linear, %s", heads[h].head),
                  model_json("{\"type\": \"linear\", \"linear_feature_columns\": %s, "
                             "\"head\": \"%s\"}", linear_columns, heads[h].head),
                  heads[h].classes, 11 + (uint64_t)h, 1);
}

TEST(gradcheck_columns_dnn)
{
    for (int h = 0; h < 3; h++)
        gradcheck(model_json("dnn, %s", heads[h].head),
                  model_json("{\"type\": \"dnn\", \"dnn_feature_columns\": %s, "
                             "\"dnn_hidden_units\": [6, 5], \"dnn_dropout\": 0, "
                             "\"head\": \"%s\"}", deep_columns, heads[h].head),
                  heads[h].classes, 21 + (uint64_t)h, h == 1 ? 3 : 1);
}

TEST(gradcheck_columns_wide_deep)
{
    for (int h = 0; h < 3; h++)
        gradcheck(model_json("wide_deep, %s", heads[h].head),
                  model_json("{\"type\": \"wide_deep\", \"linear_feature_columns\": %s, "
                             "\"dnn_feature_columns\": %s, \"dnn_hidden_units\": [5], "
                             "\"head\": \"%s\"}", linear_columns, deep_columns, heads[h].head),
                  heads[h].classes, 31 + (uint64_t)h, 1);
}

TEST(gradcheck_columns_deepfm)
{
    /* The FM term gives one logit: binary and regression heads only. */
    for (int h = 0; h < 3; h += 2)
        gradcheck(model_json("deepfm, %s", heads[h].head),
                  model_json("{\"type\": \"deepfm\", \"dnn_feature_columns\": %s, "
                             "\"dnn_hidden_units\": [5, 4], \"head\": \"%s\"}", deepfm_columns,
                             heads[h].head),
                  heads[h].classes, 41 + (uint64_t)h, 1);
    dt_features *f = parse(model_json("{\"type\": \"deepfm\", \"dnn_feature_columns\": %s, "
                                      "\"head\": \"multiclass:3\"}", deepfm_columns));
    dt_feature_model fm;
    if (f)
        CHECK_ERR(dt_features_model(f, &fm), DT_ERR_INVALID, "a binary or regression head");
    dt_features_destroy(f);
}

/* DeepFM over rows of one id per field (or none): the same gradients by finite differences. */
TEST(gradcheck_columns_deepfm_one_id_per_field)
{
    rows_now = one_value_cells;
    gradcheck("deepfm, one id per field",
              model_json("{\"type\": \"deepfm\", \"dnn_feature_columns\": %s, "
                         "\"dnn_hidden_units\": [5, 4], \"head\": \"binary\"}", deepfm_columns),
              2, 47, 1);
    rows_now = cells;
}

/* The rows of one id per field score alike, bit for bit, read as one run (a batch of them
 * alone) and the general way (beside a row of several tags). */
TEST(deepfm_one_id_per_field_scores_as_the_general_way)
{
    dt_features *f = parse(model_json("{\"type\": \"deepfm\", \"dnn_feature_columns\": %s, "
                                      "\"dnn_hidden_units\": [5, 4]}", deepfm_columns));
    dt_feature_model fm;
    dt_model *m = NULL;
    if (f && dt_features_model(f, &fm) == DT_OK)
        CHECK_OK(dt_model_create(&fm.spec, B, NULL, NULL, &m));
    if (!m) {
        dt_features_destroy(f);
        return;
    }
    dt_model_init_params(m, 5);
    int32_t labels[B] = {0, 1, 0, 1, 1, 0};
    /* All rows of one value each, then row 0 of three tags in their place. */
    rows_now = one_value_cells;
    dt_elem *flat = make_batch(f, labels);
    const char *mixed[B][N_KEYS];
    memcpy(mixed, one_value_cells, sizeof mixed);
    mixed[0][5] = "a|b|c", mixed[0][6] = "0.5|2|1.5";
    rows_now = (const char *const (*)[N_KEYS])mixed;
    dt_elem *general = make_batch(f, labels);
    rows_now = cells;
    const float *z = NULL;
    float a[B], b[B];
    if (flat && general) {
        CHECK_OK(dt_model_forward_batch(m, flat, false, &z));
        memcpy(a, z, sizeof a);
        CHECK_OK(dt_model_forward_batch(m, general, false, &z));
        memcpy(b, z, sizeof b);
        for (int r = 1; r < B; r++)
            CHECK_MSG(memcmp(&a[r], &b[r], sizeof a[r]) == 0, "row %d: logit %.9g as one run, "
                      "%.9g the general way", r, a[r], b[r]);
        CHECK(a[0] != b[0]); /* row 0 did change */
    }
    dt_elem_free(flat), dt_elem_free(general);
    dt_model_destroy(m);
    dt_features_destroy(f);
}

TEST(gradcheck_columns_dcn_v2)
{
    static const struct {
        const char *structure, *extra;
        int threads;
    } v[] = {
        {"stacked", "", 1},
        {"parallel", "", 3},
        {"stacked", ", \"projection_dim\": 4", 3},
        {"parallel", ", \"projection_dim\": 2", 1},
        {"parallel", ", \"num_cross_layers\": 1, \"dnn_hidden_units\": []", 1},
        {"stacked", ", \"num_cross_layers\": 3, \"projection_dim\": 30", 2},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        for (int h = 0; h < 3; h++) {
            char what[96];
            snprintf(what, sizeof what, "dcn_v2 %s%s, %s", v[i].structure, v[i].extra,
                     heads[h].head);
            bool layers = strstr(v[i].extra, "num_cross_layers") != NULL;
            gradcheck(what,
                      model_json("{\"type\": \"dcn_v2\", \"dnn_feature_columns\": %s, "
                                 "%s\"structure\": \"%s\"%s, \"head\": \"%s\"}", deep_columns,
                                 strstr(v[i].extra, "dnn_hidden_units") ? ""
                                                                        : "\"dnn_hidden_units\": [6], ",
                                 v[i].structure, layers ? v[i].extra : model_json(
                                     "%s, \"num_cross_layers\": 2", v[i].extra),
                                 heads[h].head),
                      heads[h].classes, 51 + 5 * i + (uint64_t)h, v[i].threads);
        }
}

/* dt_model_forward_batch checks a columns model's rows (cols.h): every entry of a known slot,
 * in slot order, with an id inside its table and a finite weight, and the dense width. */
TEST(columns_forward_rejects_bad_entries)
{
    dt_features *f = parse(model_json("{\"type\": \"wide_deep\", \"linear_feature_columns\": %s, "
                                      "\"dnn_feature_columns\": %s, \"dnn_hidden_units\": [4]}",
                                      linear_columns, deep_columns));
    if (!f)
        return;
    dt_feature_model fm;
    dt_model *m = NULL;
    CHECK_OK(dt_features_model(f, &fm));
    CHECK_OK(dt_model_create(&fm.spec, B, NULL, NULL, &m));
    int32_t labels[B] = {0, 1, 0, 1, 1, 0};
    dt_elem *e = m ? make_batch(f, labels) : NULL;
    if (!e) {
        dt_model_destroy(m);
        dt_features_destroy(f);
        return;
    }
    dt_model_init_params(m, 5);
    int S = dt_features_num_slots(f);
    CHECK_OK(dt_model_forward_batch(m, e, false, NULL));
    /* Row 2's last entry (of the last slot the row has) moved to each bad value in turn. */
    int64_t j = e->sp_row[3] - 1, saved = e->sp_ids[j];
    int slot = dt_feature_entry_slot(saved);
    CHECK(slot >= 0 && slot < S && e->sp_row[3] > e->sp_row[2]);
    e->sp_ids[j] = dt_feature_entry(S, 0); /* one past the last slot */
    CHECK_ERR(dt_model_forward_batch(m, e, false, NULL), DT_ERR_INVALID, "example 2");
    e->sp_ids[j] = dt_feature_entry(S + 3, 0);
    CHECK_ERR(dt_model_forward_batch(m, e, false, NULL), DT_ERR_INVALID, "example 2");
    e->sp_ids[j] = dt_feature_entry(0, 0); /* slot 0 after a later slot: out of order */
    if (slot > 0)
        CHECK_ERR(dt_model_forward_batch(m, e, false, NULL), DT_ERR_INVALID, "example 2");
    e->sp_ids[j] = dt_feature_entry(slot, dt_features_column_buckets(f, dt_features_slot_column(f, slot)));
    CHECK_ERR(dt_model_forward_batch(m, e, false, NULL), DT_ERR_INVALID, "is outside the");
    e->sp_ids[j] = saved;
    float w = e->sp_vals[j];
    e->sp_vals[j] = NAN;
    CHECK_ERR(dt_model_forward_batch(m, e, false, NULL), DT_ERR_INVALID, "not finite");
    e->sp_vals[j] = w;
    CHECK_OK(dt_model_forward_batch(m, e, false, NULL));
    e->n_dense--;
    CHECK_ERR(dt_model_forward_batch(m, e, false, NULL), DT_ERR_INVALID, "dense values");
    e->n_dense++;
    dt_elem_free(e);
    dt_model_destroy(m);
    dt_features_destroy(f);
}
