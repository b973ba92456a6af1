/* The predictor (see include/dtrain/predict.h).
 *
 * One model, the master, holds the variables: its dense parameters and state copied from the
 * checkpoint, its tables borrowed from the checkpoint's mapping (or, for a parameter-server
 * checkpoint, assembled in its own memory). Each context is a replica of the master's model
 * that shares all of them read only and owns just its activations, so contexts never write
 * anything another one reads. */
#include "dtrain/predict.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain/checkpoint.h"
#include "../core/fileio.h"
#include "dtrain/model.h"
#include "dtrain/saved_model.h"

/* The checkpoint format this predictor reads (the "format" metadata dtrain writes). */
#define CKPT_FORMAT "dtrain-ckpt-1"

struct dt_predictor {
    dt_ckpt *ckpt;        /* mapped; the master's tables may point into it */
    dt_saved_spec spec;   /* a feature-spec model's spec (features NULL otherwise) */
    dt_model *master;
    void **copies;        /* private_tables: each table's own copy (copy_bytes long), or NULL */
    size_t *copy_bytes;
    dt_predictor_options opts;
    dt_predict_head head;
    int K;
    int64_t step;
};

struct dt_predict_ctx {
    const dt_predictor *p;
    dt_model *m;
    int64_t *sp_row;      /* (max_batch + 1): F, 2F, ... for dt_predict_ids */
    float *labels;        /* (max_batch) zeros: rows to score carry no label */
    dt_rowbuf rows;       /* raw rows transformed by the feature spec */
    dt_feature_scratch *scratch;
    dt_feature_text *layout;   /* of the last header seen */
    char *layout_header;       /* a copy of it ("" for Criteo's TSV) */
};

void dt_predictor_options_default(dt_predictor_options *o)
{
    memset(o, 0, sizeof *o);
    o->max_batch = 256;
}

static dt_predict_head head_of(const dt_model_spec *s)
{
    switch (s->loss) {
    case DT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY: return DT_HEAD_MULTICLASS;
    case DT_LOSS_BINARY_CROSSENTROPY: return DT_HEAD_BINARY;
    default: return DT_HEAD_REGRESSION;
    }
}

/* Only what this dtrain writes: another format, or a file from another tool, would be read
 * with a meaning it may not have. */
static dt_status check_format(const dt_ckpt *c)
{
    const char *f = dt_ckpt_meta_get(c, "format");
    if (!f)
        return dt_error(DT_ERR_FORMAT, "%s: __metadata__.format: missing: not a dtrain "
                        "checkpoint", dt_ckpt_path(c));
    if (strcmp(f, CKPT_FORMAT) != 0)
        return dt_error(DT_ERR_FORMAT, "%s: __metadata__.format '%s': written by another version "
                        "of dtrain; this one reads %s", dt_ckpt_path(c), f, CKPT_FORMAT);
    return DT_OK;
}

/* The checkpoint a path names, mapped (its checksum pass left to dt_predictor_verify when
 * defer), and the directory its feature spec would be in. */
static dt_status map_checkpoint(const char *path, FILE *log, bool defer, dt_ckpt **c, char *dir,
                                size_t cap)
{
    dt_status (*map)(const char *, dt_ckpt **) = defer ? dt_ckpt_map_unverified : dt_ckpt_map;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return dt_error(DT_ERR_IO, "%s: no such checkpoint or directory", path);
    if (!S_ISDIR(sb.st_mode)) {
        dt_path_dir(path, dir, cap);
        return map(path, c);
    }
    snprintf(dir, cap, "%s", path);
    char exported[4400];
    snprintf(exported, sizeof exported, "%s/%s", path, DT_EXPORT_MODEL_FILE);
    if (access(exported, F_OK) == 0)
        return map(exported, c);
    return dt_ckpt_map_latest(path, log, c);
}

/* Asks the kernel to read the mapped tables ahead, so a first request waits for no disk. */
static void populate_tables(const dt_predictor *p)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < dt_model_num_tables(p->master); i++) {
        const dt_table *t = dt_model_table(p->master, i);
        uintptr_t a = (uintptr_t)t->data, lo = a & ~(page - 1);
        madvise((void *)lo, (size_t)t->rows * (size_t)t->dim * sizeof(float) + (a - lo),
                MADV_WILLNEED);
    }
}

/* The master's tables copied from the mapping into anonymous memory of their own. */
static dt_status copy_tables(dt_predictor *p)
{
    for (int i = 0; i < dt_model_num_tables(p->master); i++) {
        const dt_table *t = dt_model_table(p->master, i);
        size_t bytes = (size_t)t->rows * (size_t)t->dim * sizeof(float);
        void *copy = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (copy == MAP_FAILED)
            return dt_error(DT_ERR_NOMEM, "table %s: no memory for a private copy of %zu bytes",
                            t->name, bytes);
        madvise(copy, bytes, MADV_HUGEPAGE);
        memcpy(copy, t->data, bytes);
        p->copies[i] = copy, p->copy_bytes[i] = bytes;
        dt_status st = dt_model_borrow_table(p->master, i, copy);
        if (st)
            return st;
    }
    return DT_OK;
}

dt_status dt_predictor_open(const char *path, const dt_predictor_options *o, dt_predictor **out)
{
    *out = NULL;
    dt_predictor *p = calloc(1, sizeof *p);
    if (!p)
        return dt_error(DT_ERR_NOMEM, "%s: no memory for a predictor", path);
    if (o)
        p->opts = *o;
    else
        dt_predictor_options_default(&p->opts);
    dt_status st = DT_OK;
    if (p->opts.max_batch < 1 || p->opts.max_batch > 65536) {
        st = dt_error(DT_ERR_INVALID, "predictor: max_batch %d: must be in 1..65536",
                      p->opts.max_batch);
        goto fail;
    }
    char dir[4400];
    if ((st = map_checkpoint(path, p->opts.log, p->opts.defer_verify, &p->ckpt, dir,
                             sizeof dir)) ||
        (st = check_format(p->ckpt)) || (st = dt_saved_spec_open(dir, &p->spec)) ||
        (st = dt_saved_model_map(p->ckpt, &p->spec, p->opts.max_batch, &p->master)))
        goto fail;
    /* Sharded and dynamic tables are the master's own already (dt_saved_model_map). */
    bool own = dt_ckpt_is_sharded(p->ckpt) || dt_model_spec_dynamic(dt_model_spec_of(p->master));
    if (p->opts.private_tables && !own) {
        int n = dt_model_num_tables(p->master);
        p->copies = calloc((size_t)(n ? n : 1), sizeof *p->copies);
        p->copy_bytes = calloc((size_t)(n ? n : 1), sizeof *p->copy_bytes);
        if (!p->copies || !p->copy_bytes)
            st = dt_error(DT_ERR_NOMEM, "no memory for a predictor");
        if (st || (st = copy_tables(p)))
            goto fail;
    }
    if (p->opts.populate && !own && !p->opts.private_tables)
        populate_tables(p);
    if (p->spec.features)
        dt_features_set_unlabeled(p->spec.features, true);
    p->head = head_of(dt_model_spec_of(p->master));
    p->K = dt_model_num_outputs(p->master);
    p->step = dt_saved_model_step(p->ckpt);
    *out = p;
    return DT_OK;
fail:
    dt_predictor_close(p);
    return st;
}

void dt_predictor_close(dt_predictor *p)
{
    if (!p)
        return;
    int n = p->master ? dt_model_num_tables(p->master) : 0;
    dt_model_destroy(p->master);
    for (int i = 0; p->copies && i < n; i++)
        if (p->copies[i])
            munmap(p->copies[i], p->copy_bytes[i]);
    free(p->copies);
    free(p->copy_bytes);
    dt_saved_spec_close(&p->spec);
    dt_ckpt_close(p->ckpt);
    free(p);
}

dt_status dt_predictor_verify(dt_predictor *p)
{
    return dt_ckpt_verify(p->ckpt);
}

const char *dt_predictor_checkpoint(const dt_predictor *p) { return dt_ckpt_path(p->ckpt); }
int64_t dt_predictor_step(const dt_predictor *p) { return p->step; }
const dt_model_spec *dt_predictor_model_spec(const dt_predictor *p)
{
    return dt_model_spec_of(p->master);
}
const dt_features *dt_predictor_features(const dt_predictor *p) { return p->spec.features; }
dt_predict_head dt_predictor_head(const dt_predictor *p) { return p->head; }
int dt_predictor_num_outputs(const dt_predictor *p) { return p->K; }
int dt_predictor_max_batch(const dt_predictor *p) { return p->opts.max_batch; }

size_t dt_predictor_dense_width(const dt_predictor *p)
{
    const dt_model_spec *s = dt_model_spec_of(p->master);
    return s->arch == DT_ARCH_SEQUENTIAL ? dt_model_input_elems(p->master) : 0;
}

int dt_predictor_field_size(const dt_predictor *p)
{
    const dt_model_spec *s = dt_model_spec_of(p->master);
    bool ctr = s->arch == DT_ARCH_LR || s->arch == DT_ARCH_FM || s->arch == DT_ARCH_DEEPFM;
    return ctr ? s->ctr.field_size : 0;
}

/* ---- Contexts ---- */

dt_status dt_predict_ctx_new(const dt_predictor *p, dt_predict_ctx **out)
{
    *out = NULL;
    int B = p->opts.max_batch;
    dt_predict_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return dt_error(DT_ERR_NOMEM, "no memory for a predictor context");
    c->p = p;
    dt_rowbuf_init(&c->rows, p->spec.features ? dt_features_dense_width(p->spec.features) : 0);
    dt_status st = dt_model_create(dt_model_spec_of(p->master), B, NULL, NULL, &c->m);
    if (st || (st = dt_model_share_variables(c->m, p->master)))
        goto fail;
    c->sp_row = malloc((size_t)(B + 1) * sizeof *c->sp_row);
    c->labels = calloc((size_t)B, sizeof *c->labels);
    if (!c->sp_row || !c->labels) {
        st = dt_error(DT_ERR_NOMEM, "no memory for a predictor context");
        goto fail;
    }
    int F = dt_predictor_field_size(p);
    for (int r = 0; r <= B; r++)
        c->sp_row[r] = (int64_t)r * F;
    if (p->spec.features && (st = dt_feature_scratch_new(p->spec.features, &c->scratch)))
        goto fail;
    *out = c;
    return DT_OK;
fail:
    dt_predict_ctx_free(c);
    return st;
}

void dt_predict_ctx_free(dt_predict_ctx *c)
{
    if (!c)
        return;
    dt_model_destroy(c->m);
    free(c->sp_row);
    free(c->labels);
    dt_rowbuf_free(&c->rows);
    dt_feature_scratch_free(c->scratch);
    dt_feature_text_free(c->layout);
    free(c->layout_header);
    free(c);
}

/* ---- Scoring ---- */

static void sigmoid(const float *z, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = z[i] >= 0 ? 1.0f / (1.0f + expf(-z[i])) : expf(z[i]) / (1.0f + expf(z[i]));
}

/* Softmax of each row, its maximum subtracted first so no exp overflows. */
static void softmax(const float *z, int n, int K, float *out)
{
    for (int i = 0; i < n; i++) {
        const float *zi = z + (size_t)i * K;
        float *oi = out + (size_t)i * K, mx = zi[0], sum = 0;
        for (int k = 1; k < K; k++)
            mx = zi[k] > mx ? zi[k] : mx;
        for (int k = 0; k < K; k++)
            sum += oi[k] = expf(zi[k] - mx);
        for (int k = 0; k < K; k++)
            oi[k] /= sum;
    }
}

static void head_apply(const dt_predictor *p, const float *z, int n, dt_predict_output what,
                       float *out)
{
    size_t count = (size_t)n * p->K;
    if (what == DT_PREDICT_LOGITS || p->head == DT_HEAD_REGRESSION)
        memcpy(out, z, count * sizeof *out);
    else if (p->head == DT_HEAD_BINARY)
        sigmoid(z, count, out);
    else
        softmax(z, n, p->K, out);
}

void dt_predict_scores_of_logits(const dt_predictor *p, const float *z, int n, float *out)
{
    head_apply(p, z, n, DT_PREDICT_SCORES, out);
}

dt_status dt_predict_rows(dt_predict_ctx *c, const dt_elem *rows, dt_predict_output what,
                          float *out)
{
    if (rows->n < 1 || rows->n > c->p->opts.max_batch)
        return dt_error(DT_ERR_INVALID, "predict: %d rows; the predictor takes 1..%d per call",
                        rows->n, c->p->opts.max_batch);
    const float *z;
    dt_status st = dt_model_forward_batch(c->m, rows, false, &z);
    if (st == DT_OK)
        head_apply(c->p, z, rows->n, what, out);
    return st;
}

dt_status dt_predict_ids(dt_predict_ctx *c, int n, const int64_t *ids, const float *values,
                         dt_predict_output what, float *out)
{
    int F = dt_predictor_field_size(c->p);
    if (F == 0)
        return dt_error(DT_ERR_INVALID, "predict: ids and values are the input of lr, fm and "
                        "deepfm; this model is %s", dt_model_spec_of(c->m)->name);
    if (n < 1 || n > c->p->opts.max_batch)
        return dt_error(DT_ERR_INVALID, "predict: %d rows; the predictor takes 1..%d per call",
                        n, c->p->opts.max_batch);
    /* The caller's arrays are the rows: nothing is copied. */
    dt_elem e = {.n = n, .nnz = (size_t)n * F, .labels = c->labels, .sp_row = c->sp_row,
                 .sp_ids = (int64_t *)ids, .sp_vals = (float *)values};
    return dt_predict_rows(c, &e, what, out);
}

dt_status dt_predict_dense(dt_predict_ctx *c, int n, const float *x, dt_predict_output what,
                           float *out)
{
    size_t width = dt_predictor_dense_width(c->p);
    if (width == 0)
        return dt_error(DT_ERR_INVALID, "predict: dense rows are the input of a sequential "
                        "model; this model is %s", dt_model_spec_of(c->m)->name);
    dt_elem e = {.n = n, .n_dense = (int)width, .dense = (float *)x, .labels = c->labels,
                 .sp_row = c->sp_row};
    return dt_predict_rows(c, &e, what, out);
}

/* The transformed rows of the builder, as an element over its arrays. */
static dt_elem rows_of(const dt_rowbuf *b)
{
    return (dt_elem){.n = b->n, .n_dense = b->n_dense, .nnz = b->nnz, .dense = b->dense,
                     .labels = b->labels, .sp_row = b->sp_row, .sp_ids = b->sp_ids,
                     .sp_vals = b->sp_vals};
}

static dt_status need_spec(const dt_predict_ctx *c, int n)
{
    if (!c->p->spec.features)
        return dt_error(DT_ERR_INVALID, "predict: raw rows need a feature-spec model; this "
                        "checkpoint's model (%s) takes parsed rows",
                        dt_model_spec_of(c->m)->name);
    if (n < 1 || n > c->p->opts.max_batch)
        return dt_error(DT_ERR_INVALID, "predict: %d rows; the predictor takes 1..%d per call",
                        n, c->p->opts.max_batch);
    return DT_OK;
}

/* The text layout of header, kept from the last call when the header is the same. */
static dt_status layout_for(dt_predict_ctx *c, const char *header)
{
    const char *key = header ? header : "";
    if (c->layout && strcmp(c->layout_header, key) == 0)
        return DT_OK;
    dt_feature_text_free(c->layout);
    free(c->layout_header);
    c->layout = NULL;
    if (!(c->layout_header = strdup(key)))
        return dt_error(DT_ERR_NOMEM, "no memory for a header");
    dt_status st = dt_feature_text_new(c->p->spec.features, header, header ? strlen(header) : 0,
                                       ',', &c->layout);
    if (st)
        dt_error_prefix(st, "predict: the header");
    return st;
}

dt_status dt_predict_lines(dt_predict_ctx *c, const char *header, int n,
                           const char *const *lines, const size_t *lens, dt_predict_output what,
                           float *out)
{
    dt_status st = need_spec(c, n);
    if (st || (st = layout_for(c, header)))
        return st;
    dt_rowbuf_clear(&c->rows);
    for (int i = 0; i < n; i++) {
        st = dt_feature_text_parse(c->p->spec.features, c->layout, c->scratch, lines[i], lens[i],
                                   &c->rows);
        if (st == DT_END)
            return dt_error(DT_ERR_FORMAT, "predict: row %d: a blank line", i);
        if (st)
            return dt_error_prefix(st, "predict: row %d", i);
    }
    dt_elem e = rows_of(&c->rows);
    return dt_predict_rows(c, &e, what, out);
}

dt_status dt_predict_examples(dt_predict_ctx *c, int n, const uint8_t *const *records,
                              const size_t *lens, dt_predict_output what, float *out)
{
    dt_status st = need_spec(c, n);
    if (st)
        return st;
    dt_rowbuf_clear(&c->rows);
    for (int i = 0; i < n; i++)
        if ((st = dt_features_transform_example(c->p->spec.features, c->scratch, records[i],
                                                lens[i], &c->rows)))
            return dt_error_prefix(st, "predict: record %d", i);
    dt_elem e = rows_of(&c->rows);
    return dt_predict_rows(c, &e, what, out);
}
