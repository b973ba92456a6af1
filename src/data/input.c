/* Training input from a data spec (see include/dtrain/input.h): the spec forms in one table, the
 * file sources in another, and the builder that puts a pipeline together from them. */
#include "dtrain/input.h"
#include "dtrain/criteo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image_pipeline.h"
#include "dtrain/log.h"
#include "input_int.h"

/* ---- Specs ---- */

/* What follows a spec's prefix. */
typedef enum { FORM_FILES, FORM_DIR, FORM_IDX } spec_form;

/* The spec forms, one row each, in the order usage messages list them. A new source is a new
 * kind, a row here and, for file data, a row of file_sources below. */
static const struct {
    const char *prefix;
    dt_input_kind kind;
    spec_form form;
    const char *usage;
} spec_forms[] = {
    {"fashion-mnist:", DT_INPUT_MNIST_DIR, FORM_DIR, "fashion-mnist[:DIR]"},
    {"mnist:", DT_INPUT_MNIST_DIR, FORM_DIR, "mnist:DIR"},
    {"idx:", DT_INPUT_IDX, FORM_IDX, "idx:IMAGES,LABELS"},
    {"tfrecord:", DT_INPUT_TFRECORD, FORM_FILES, "tfrecord:GLOB"},
    {"libsvm:", DT_INPUT_LIBSVM, FORM_FILES, "libsvm:GLOB"},
    {"csv:", DT_INPUT_CSV, FORM_FILES, "csv:GLOB"},
    {"criteo:", DT_INPUT_CRITEO, FORM_FILES, "criteo:GLOB"},
};
#define N_SPEC_FORMS (sizeof spec_forms / sizeof spec_forms[0])

static dt_status copy_field(char *dst, size_t cap, const char *src, size_t n, const char *what)
{
    if (n >= cap)
        return dt_error(DT_ERR_INVALID, "%s: a path of %zu bytes is too long (at most %zu)", what,
                        n, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
    return DT_OK;
}

/* The rest of a spec after its prefix, by the form's rules. */
static dt_status parse_form(spec_form form, const char *rest, const char *what,
                            dt_input_spec *out)
{
    const char *text = out->text;
    if (form == FORM_FILES) {
        if (!*rest)
            return dt_error(DT_ERR_INVALID, "%s: '%s': the files after ':' are missing", what,
                            text);
        return copy_field(out->path, sizeof out->path, rest, strlen(rest), what);
    }
    if (form == FORM_DIR) {
        if (!*rest)
            return dt_error(DT_ERR_INVALID, "%s: '%s': the directory after ':' is empty", what,
                            text);
        return copy_field(out->path, sizeof out->path, rest, strlen(rest), what);
    }
    const char *comma = strchr(rest, ',');
    if (!comma || comma == rest || !comma[1])
        return dt_error(DT_ERR_INVALID, "%s: expected idx:IMAGES,LABELS, got '%s'", what, text);
    dt_status st = copy_field(out->path, sizeof out->path, rest, (size_t)(comma - rest), what);
    if (st == DT_OK)
        st = copy_field(out->labels, sizeof out->labels, comma + 1, strlen(comma + 1), what);
    return st;
}

static dt_status unknown_spec(const char *text, const char *what)
{
    char forms[256] = "";
    size_t len = 0;
    for (size_t i = 0; i < N_SPEC_FORMS && len < sizeof forms; i++)
        len += (size_t)snprintf(forms + len, sizeof forms - len, "%s%s", i ? ", " : "",
                                spec_forms[i].usage);
    return dt_error(DT_ERR_INVALID, "%s: unknown data '%s' (%s)", what, text, forms);
}

dt_status dt_input_spec_parse(const char *text, const char *what, dt_input_spec *out)
{
    memset(out, 0, sizeof *out);
    dt_status st = copy_field(out->text, sizeof out->text, text, strlen(text), what);
    if (st)
        return st;
    if (strcmp(text, "fashion-mnist") == 0) {
        out->kind = DT_INPUT_MNIST_DIR;
        out->default_dir = true;
        return copy_field(out->path, sizeof out->path, DT_FASHION_MNIST_DIR,
                          strlen(DT_FASHION_MNIST_DIR), what);
    }
    for (size_t i = 0; i < N_SPEC_FORMS; i++) {
        size_t n = strlen(spec_forms[i].prefix);
        if (strncmp(text, spec_forms[i].prefix, n) == 0) {
            out->kind = spec_forms[i].kind;
            return parse_form(spec_forms[i].form, text + n, what, out);
        }
    }
    return unknown_spec(text, what);
}

bool dt_input_spec_is_files(const dt_input_spec *s)
{
    for (size_t i = 0; i < N_SPEC_FORMS; i++)
        if (spec_forms[i].kind == s->kind)
            return spec_forms[i].form == FORM_FILES;
    return false;
}

void dt_input_spec_default_test(const dt_input_spec *train, dt_input_spec *test, bool *have)
{
    *have = train->kind == DT_INPUT_MNIST_DIR;
    if (*have)
        *test = *train;
}

void dt_input_options_default(dt_input_options *o)
{
    memset(o, 0, sizeof *o);
    o->batch_size = 64;
    o->shuffle_buffer = INT64_MAX;
    o->seed = 1;
    o->prefetch = 2;
    o->input_timeout = 600;
    o->autoshard = DT_AUTOSHARD_DATA;
    o->compression = DT_COMPRESSION_AUTO;
    o->num_parallel_reads = 1;
    o->num_parallel_calls = 1;
    o->label_key = "label";
    o->index_base = 1;
    o->ids_key = "ids";
    o->values_key = "values";
}

void dt_input_options_for_batch(dt_input_options *io, const dt_input_options *given,
                                int batch_size)
{
    if (given)
        *io = *given;
    else
        dt_input_options_default(io);
    io->batch_size = batch_size;
}

/* ---- Images ---- */

dt_status dt_input_load_images(const dt_input_spec *s, const char *what, bool test,
                               dt_image_dataset *out)
{
    if (dt_input_spec_is_files(s))
        return dt_error(DT_ERR_INVALID, "%s: '%s': images are read from fashion-mnist[:DIR], "
                        "mnist:DIR or idx:IMAGES,LABELS", what, s->text);
    if (s->kind == DT_INPUT_IDX)
        return dt_image_dataset_load(s->path, s->labels, out);
    if (access(s->path, F_OK) != 0)
        return dt_error(DT_ERR_IO, "%s: %s: %s%s", what, s->path, strerror(errno),
                        s->default_dir ? " (install the Debian package dataset-fashion-mnist)"
                                       : "");
    return dt_image_dataset_load_mnist_dir(s->path, !test, out);
}

/* This worker's image pipeline: every worker batches alike and gathers its own block. */
static dt_status image_train_pipeline(const dt_image_dataset *images, const dt_input_options *o,
                                      const dt_input_context *ctx, dt_dataset **out)
{
    int workers = ctx ? ctx->num_input_pipelines : 1, me = ctx ? ctx->input_pipeline_id : 0;
    /* Each worker's block is its replicas' share of the global batch: the whole batch when the
     * workers' steps are their own (parameter-server training, one replica in sync). */
    int replicas = ctx ? ctx->num_replicas_in_sync : 1;
    int64_t batch = (int64_t)o->batch_size * workers / replicas;
    return dt_image_pipeline_sharded(images, batch, !o->keep_remainder, o->shuffle_buffer,
                                     o->seed, o->prefetch, workers, me, out);
}

static dt_status open_images(dt_input *in, const dt_input_spec *test, const dt_input_options *o,
                             const dt_input_context *ctx)
{
    dt_status st = dt_input_load_images(&in->train_spec, "data", false, &in->train_images);
    if (st || (test && (st = dt_input_load_images(test, "test_data", true, &in->test_images))))
        return st;
    const dt_image_dataset *t = &in->train_images;
    in->shape[0] = t->h, in->shape[1] = t->w, in->shape[2] = t->c;
    in->n_train = t->n;
    in->eval_batch = o->batch_size < t->n ? o->batch_size : t->n;
    snprintf(in->source, sizeof in->source, "%s", t->images_path);
    if ((st = image_train_pipeline(t, o, ctx, &in->train)))
        return st;
    if (test && (st = dt_image_pipeline(&in->test_images, in->eval_batch, false, 0, 0, 0,
                                        &in->test)))
        return st;
    return DT_OK;
}

/* ---- File sources ---- */

/* One kind of file data. prepare (may be NULL) runs once before any pipeline of the kind is
 * built; open gives the dataset of its records over files; after_batch (may be NULL) turns
 * batches of records into batches of rows, for records parsed a batch at a time; width is the
 * number of dense values of a row of files (named by `what` in messages). */
typedef struct {
    dt_input_kind kind;
    const char *name;
    dt_status (*prepare)(dt_input *in, const dt_input_options *o);
    dt_status (*open)(const dt_input_options *o, const dt_file_list *files,
                      const dt_source_options *so, dt_dataset **out);
    dt_status (*after_batch)(dt_input *in, dt_dataset *batches, const dt_input_options *o,
                             const dt_file_list *files, const dt_source_options *so,
                             dt_dataset **out);
    dt_status (*width)(const dt_input *in, const dt_file_list *files, const char *what,
                       const dt_input_options *o, int *n_dense);
} file_source;

/* TFRecord files of tf.Example: raw records, parsed after batching, a batch per call. */
/* The DeepFM sample's Examples: the ids and values features zipped into CTR rows. */
static dt_status ctr_example_spec(const dt_input_options *o, dt_example_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    const char *keys[3] = {o->ids_key, o->values_key, o->label_key};
    const char *flags[3] = {"ids_key", "values_key", "label_key"};
    for (int i = 0; i < 3; i++)
        if (!keys[i] || !keys[i][0] || strlen(keys[i]) >= DT_EXAMPLE_KEY_CAP)
            return dt_error(DT_ERR_INVALID, "%s: a feature key of 1..%d bytes", flags[i],
                            DT_EXAMPLE_KEY_CAP - 1);
    snprintf(spec->features[0].key, DT_EXAMPLE_KEY_CAP, "%s", o->ids_key);
    snprintf(spec->features[1].key, DT_EXAMPLE_KEY_CAP, "%s", o->values_key);
    snprintf(spec->label_key, DT_EXAMPLE_KEY_CAP, "%s", o->label_key);
    spec->n_features = 2;
    spec->ctr_fields = o->field_size;
    spec->ctr_max_id = o->max_id;
    spec->ctr_hash_buckets = o->hash_buckets;
    return dt_example_spec_finalize(spec);
}

/* The names in a comma-separated list (NULL: none). */
static int count_names(const char *list)
{
    int n = list && *list ? 1 : 0;
    for (const char *p = list; p && *p; p++)
        n += *p == ',';
    return n;
}

/* Splits a comma-separated list of column names into spec->features from *at on. */
static dt_status add_columns(const char *list, const char *flag, dt_example_spec *spec)
{
    const char *p = list;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n == 0 || n >= DT_EXAMPLE_KEY_CAP || spec->n_features == DT_EXAMPLE_MAX_FEATURES)
            return dt_error(DT_ERR_INVALID, "%s: column names of 1..%d bytes, at most %d columns "
                            "in all", flag, DT_EXAMPLE_KEY_CAP - 1, DT_EXAMPLE_MAX_FEATURES);
        memcpy(spec->features[spec->n_features].key, p, n);
        spec->features[spec->n_features].key[n] = '\0';
        spec->n_features++;
        p = comma ? comma + 1 : NULL;
    }
    return DT_OK;
}

/* Examples of one feature per column, as feature-column pipelines write them. */
static dt_status ctr_column_spec(const dt_input_options *o, dt_example_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    dt_status st = add_columns(o->numeric_columns, "numeric_columns", spec);
    spec->ctr_numeric = spec->n_features;
    if (st || (st = add_columns(o->categorical_columns, "categorical_columns", spec)))
        return st;
    if (spec->n_features != o->field_size)
        return dt_error(DT_ERR_INVALID, "numeric_columns and categorical_columns: %d columns "
                        "are %d fields, the model takes %d (--field-size)", spec->n_features,
                        spec->n_features, o->field_size);
    if (spec->ctr_numeric < spec->n_features && o->hash_buckets <= spec->ctr_numeric)
        return dt_error(DT_ERR_INVALID, "hash_buckets: categorical columns are hashed into the "
                        "tables' rows: give their number (more than the %d numeric fields)",
                        spec->ctr_numeric);
    snprintf(spec->label_key, DT_EXAMPLE_KEY_CAP, "%s", o->label_key ? o->label_key : "");
    spec->ctr_columns = true;
    spec->ctr_log1p = o->log1p_numeric;
    spec->ctr_hash_buckets = o->hash_buckets;
    return dt_example_spec_finalize(spec);
}

static dt_status tfrecord_prepare(dt_input *in, const dt_input_options *o)
{
    if (o->field_size > 0 && (o->numeric_columns || o->categorical_columns)) {
        if (o->features)
            return dt_error(DT_ERR_INVALID, "features: CTR columns are named by "
                            "--numeric-columns and --categorical-columns, not --features");
        return ctr_column_spec(o, &in->example_spec);
    }
    if (o->field_size > 0) {
        if (o->features)
            return dt_error(DT_ERR_INVALID, "features: CTR models read the ids and values "
                            "features (--ids-key, --values-key), not --features");
        return ctr_example_spec(o, &in->example_spec);
    }
    if (!o->features)
        return dt_error(DT_ERR_INVALID, "features: tfrecord data needs the features to read, "
                        "e.g. --features image:784:1/255 --label-key label");
    dt_status st = dt_example_spec_parse(o->features, o->label_key, &in->example_spec);
    return st ? dt_error_prefix(st, "features") : DT_OK;
}

static dt_status tfrecord_open(const dt_input_options *o, const dt_file_list *files,
                               const dt_source_options *so, dt_dataset **out)
{
    (void)o;
    return dt_dataset_tfrecord(files, so, out);
}

static dt_status tfrecord_parse(dt_input *in, dt_dataset *batches, const dt_input_options *o,
                                const dt_file_list *files, const dt_source_options *so,
                                dt_dataset **out)
{
    return dt_dataset_parse_examples(batches, &in->example_spec, files, o->num_parallel_calls, so,
                                     out);
}

static dt_status tfrecord_width(const dt_input *in, const dt_file_list *files, const char *what,
                                const dt_input_options *o, int *n_dense)
{
    (void)files, (void)what, (void)o;
    *n_dense = in->example_spec.n_dense;
    return DT_OK;
}

/* LibSVM text: index:value pairs into dense rows of --num-features values. */
static dt_status libsvm_open(const dt_input_options *o, const dt_file_list *files,
                             const dt_source_options *so, dt_dataset **out)
{
    dt_libsvm_options lo;
    dt_libsvm_options_default(&lo);
    lo.n_dense = o->num_features;
    lo.index_base = o->index_base;
    if (o->field_size > 0) {
        lo.n_dense = 0;
        lo.index_base = 0;
        lo.field_size = o->field_size;
        lo.max_id = o->max_id;
        lo.hash_buckets = o->hash_buckets;
    }
    return dt_dataset_libsvm(files, &lo, so, out);
}

static dt_status libsvm_width(const dt_input *in, const dt_file_list *files, const char *what,
                              const dt_input_options *o, int *n_dense)
{
    (void)in, (void)files, (void)what;
    if (o->field_size > 0) { /* every field in the sparse part */
        *n_dense = 0;
        return DT_OK;
    }
    if (o->num_features < 1)
        return dt_error(DT_ERR_INVALID, "num_features: libsvm data for a dense model needs "
                        "the number of features");
    *n_dense = o->num_features;
    return DT_OK;
}

/* Criteo's TSV: 39 fields per row, ids hashed into --hash-buckets rows (criteo.h). */
static dt_status criteo_prepare(dt_input *in, const dt_input_options *o)
{
    (void)in;
    if (o->field_size != DT_CRITEO_FIELDS)
        return dt_error(DT_ERR_INVALID, "criteo data: rows of %d fields (13 integers, 26 "
                        "categories), for a CTR model with --field-size %d; the model takes %d",
                        DT_CRITEO_FIELDS, DT_CRITEO_FIELDS, o->field_size);
    if (o->hash_buckets <= DT_CRITEO_NUMERIC)
        return dt_error(DT_ERR_INVALID, "hash_buckets: criteo data hashes its categories into "
                        "the tables' rows: give their number (more than %d)", DT_CRITEO_NUMERIC);
    return DT_OK;
}

static dt_status criteo_open(const dt_input_options *o, const dt_file_list *files,
                             const dt_source_options *so, dt_dataset **out)
{
    return dt_dataset_criteo(files, o->hash_buckets, so, out);
}

static dt_status criteo_width(const dt_input *in, const dt_file_list *files, const char *what,
                              const dt_input_options *o, int *n_dense)
{
    (void)in, (void)files, (void)what, (void)o;
    *n_dense = 0;
    return DT_OK;
}

/* CSV text: a label column (by index, or by name under a header) and dense values. */
static dt_status csv_open(const dt_input_options *o, const dt_file_list *files,
                          const dt_source_options *so, dt_dataset **out)
{
    if (o->field_size > 0) { /* CTR: columns picked by name under each file's header */
        if (!o->numeric_columns && !o->categorical_columns)
            return dt_error(DT_ERR_INVALID, "numeric_columns, categorical_columns: CSV data "
                            "for a CTR model names its fields' columns");
        int named = count_names(o->numeric_columns) + count_names(o->categorical_columns);
        if (named != o->field_size)
            return dt_error(DT_ERR_INVALID, "numeric_columns and categorical_columns: %d "
                            "columns are %d fields, the model takes %d (--field-size)", named,
                            named, o->field_size);
        dt_ctr_csv_options co = {.numeric = o->numeric_columns,
                                 .categorical = o->categorical_columns,
                                 .label = o->label_column ? o->label_column : "label",
                                 .delimiter = ',', .log1p = o->log1p_numeric,
                                 .hash_buckets = o->hash_buckets};
        return dt_dataset_ctr_csv(files, &co, so, out);
    }
    dt_csv_options co;
    dt_csv_options_default(&co);
    co.header = o->csv_header;
    const char *label_name = NULL;
    if (o->label_column) {
        char *end;
        long v = strtol(o->label_column, &end, 10);
        if (*end == '\0' && v >= 0 && v < 1000000)
            co.label_column = (int)v;
        else
            label_name = o->label_column;
        if (label_name && !co.header)
            return dt_error(DT_ERR_INVALID, "label_column: a column name needs `csv_header`");
    }
    return dt_dataset_csv(files, &co, label_name, so, out);
}

/* The width of CSV rows, from the first file's first line (its header, or its first row), read
 * apart from the pipeline, which must not read a stream twice; a stream gives no such look. */
static dt_status csv_width(const dt_input *in, const dt_file_list *files, const char *what,
                           const dt_input_options *o, int *n_dense)
{
    (void)in;
    if (o->field_size > 0) { /* CTR rows: fields, no dense values */
        *n_dense = 0;
        return DT_OK;
    }
    const char *first = files->paths[0];
    FILE *f = strcmp(first, "-") == 0 ? NULL : fopen(first, "r");
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        if (f)
            fclose(f);
        if (o->num_features > 0) {
            *n_dense = o->num_features;
            return DT_OK;
        }
        return dt_error(DT_ERR_INVALID, "num_features: CSV from a stream needs the number of "
                        "feature columns");
    }
    char line[65536];
    int fields = 0;
    dt_csv_options co;
    dt_csv_options_default(&co);
    while (fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\n");
        dt_status st = dt_csv_count_fields(line, len, &co, &fields);
        if (st == DT_END)
            continue;
        fclose(f);
        if (st)
            return dt_error_prefix(st, "%s: line 1", first);
        *n_dense = fields - (o->label_column ? 1 : 0);
        return DT_OK;
    }
    fclose(f);
    return dt_error(DT_ERR_INVALID, "%s: %s holds no rows", what, first);
}

static const file_source file_sources[] = {
    {DT_INPUT_TFRECORD, "tfrecord", tfrecord_prepare, tfrecord_open, tfrecord_parse,
     tfrecord_width},
    {DT_INPUT_LIBSVM, "libsvm", NULL, libsvm_open, NULL, libsvm_width},
    {DT_INPUT_CSV, "csv", NULL, csv_open, NULL, csv_width},
    {DT_INPUT_CRITEO, "criteo", criteo_prepare, criteo_open, NULL, criteo_width},
};

static const file_source *file_source_of(dt_input_kind kind)
{
    for (size_t i = 0; i < sizeof file_sources / sizeof file_sources[0]; i++)
        if (file_sources[i].kind == kind)
            return &file_sources[i];
    return NULL;
}

/* Raw rows for a row parser: lines of csv (under their header) and criteo, tfrecord records. */
static dt_status raw_source(const dt_input_spec *s, const dt_file_list *files,
                            const dt_source_options *so, dt_text_header *header, bool *lines,
                            dt_dataset **out)
{
    *lines = s->kind != DT_INPUT_TFRECORD;
    switch (s->kind) {
    case DT_INPUT_CSV: return dt_dataset_text_lines(files, header, so, out);
    case DT_INPUT_CRITEO: return dt_dataset_text_lines(files, NULL, so, out);
    case DT_INPUT_TFRECORD: return dt_dataset_tfrecord(files, so, out);
    default:
        return dt_error(DT_ERR_INVALID, "'%s': a feature spec reads csv:, criteo: or tfrecord: "
                        "data", s->text);
    }
}

/* ---- File pipelines ---- */

/* Auto-sharding of a worker's files or elements, as tf.data's policy says: FILE keeps whole
 * files (shard the list before the source reads it), DATA every n-th element. */
static dt_status shard_files(const dt_input_options *o, const dt_input_context *ctx,
                             dt_file_list *files, dt_autoshard_policy *applied)
{
    *applied = DT_AUTOSHARD_OFF;
    if (!ctx || ctx->num_input_pipelines <= 1 || o->autoshard == DT_AUTOSHARD_OFF)
        return DT_OK;
    const char *reason = "";
    *applied = dt_autoshard_resolve(o->autoshard, files->n, ctx->num_input_pipelines, &reason);
    /* A FILE policy the files cannot satisfy is a choice the user made that does not hold: said
     * once, by the first worker, rather than by every one. */
    if (*reason && ctx->input_pipeline_id == 0)
        dt_log_to(NULL, o->autoshard == DT_AUTOSHARD_FILE ? DT_LOG_WARN : DT_LOG_INFO,
                  "input: %d file%s over %d workers: %s", files->n, files->n == 1 ? "" : "s",
                  ctx->num_input_pipelines, reason);
    if (*applied != DT_AUTOSHARD_FILE)
        return DT_OK;
    return dt_file_list_shard(files, ctx->num_input_pipelines, ctx->input_pipeline_id);
}

/* source -> [shard] -> [cache] -> [shuffle] -> batch -> [parse] -> [prefetch]. A training
 * pipeline of several workers batches this worker's share of the global batch. */
static dt_status file_pipeline(dt_input *in, const dt_input_spec *s, const char *what,
                               bool training, const dt_input_options *o,
                               const dt_input_context *ctx, dt_file_list *files, dt_dataset **out)
{
    const file_source *src = file_source_of(s->kind);
    dt_source_options so;
    dt_source_options_default(&so);
    so.compression = o->compression;
    so.num_parallel_reads = o->num_parallel_reads;
    so.skip_bad_records = o->skip_bad_records;
    so.bad_records = &in->bad_records;
    so.stall_secs = o->input_timeout;
    so.reading = &in->reading;
    int workers = training && ctx ? ctx->num_input_pipelines : 1;
    /* A pipeline feeds one replica: the global batch over the replicas in sync. */
    int replicas = training && ctx ? ctx->num_replicas_in_sync : 1;
    dt_autoshard_policy applied = DT_AUTOSHARD_OFF;
    dt_dataset *p = NULL;
    dt_status st = dt_file_list_glob(s->path, files);
    if (st)
        return dt_error_prefix(st, "%s", what);
    if (training && (st = shard_files(o, ctx, files, &applied)))
        return dt_error_prefix(st, "%s", what);
    if (training)
        in->autoshard = applied;
    dt_text_header *header = s == &in->test_spec ? &in->test_header : &in->train_header;
    bool lines = false;
    if ((st = o->row_parser ? raw_source(s, files, &so, header, &lines, &p)
                            : src->open(o, files, &so, &p)))
        return st;
    if (applied == DT_AUTOSHARD_DATA)
        st = dt_dataset_shard(p, workers, ctx->input_pipeline_id, &p);
    if (st == DT_OK && training && o->cache)
        st = dt_dataset_cache(p, strcmp(o->cache, "memory") == 0 ? NULL : o->cache, &p);
    if (st == DT_OK && training && o->shuffle_buffer > 1)
        st = dt_dataset_shuffle(p, o->shuffle_buffer, o->seed, true, &p);
    if (st == DT_OK)
        st = dt_dataset_batch(p, o->batch_size / replicas, training && !o->keep_remainder, &p);
    if (st == DT_OK && o->row_parser)
        st = dt_dataset_parse_rows(p, o->row_parser, lines, header, files,
                                   o->num_parallel_calls, &so, &p);
    else if (st == DT_OK && src->after_batch)
        st = src->after_batch(in, p, o, files, &so, &p);
    if (st == DT_OK && o->prefetch > 0) {
        dt_prefetch_watch watch = {o->input_timeout, &in->reading, s->text};
        st = dt_dataset_prefetch_watched(p, o->prefetch, &watch, &p);
    }
    /* A transformation that fails has destroyed its input already (dataset.h). */
    *out = st == DT_OK ? p : NULL;
    return st;
}

static dt_status parse_shape(const char *text, int shape[3])
{
    if (sscanf(text, "%d,%d,%d", &shape[0], &shape[1], &shape[2]) != 3 || shape[0] < 1 ||
        shape[1] < 1 || shape[2] < 1)
        return dt_error(DT_ERR_INVALID, "input_shape: expected H,W,C, got '%s'", text);
    return DT_OK;
}

/* The shape of one example of s's files: --input-shape, checked against the rows' width, or
 * 1,1,width. */
static dt_status set_shape(dt_input *in, const dt_input_spec *s, const dt_file_list *files,
                           const char *what, const dt_input_options *o)
{
    int n_dense = o->row_parser ? o->row_parser->n_dense : 0;
    dt_status st = o->row_parser ? DT_OK : file_source_of(s->kind)->width(in, files, what, o,
                                                                          &n_dense);
    if (st)
        return st;
    if (o->input_shape) {
        if ((st = parse_shape(o->input_shape, in->shape)))
            return st;
        if ((int64_t)in->shape[0] * in->shape[1] * in->shape[2] != n_dense)
            return dt_error(DT_ERR_INVALID, "input_shape: %dx%dx%d is not the %d values per "
                            "example of the data", in->shape[0], in->shape[1], in->shape[2],
                            n_dense);
    } else {
        in->shape[0] = in->shape[1] = 1;
        in->shape[2] = n_dense;
    }
    if (n_dense < 1 && o->field_size < 1 && !o->row_parser) /* CTR rows are all sparse */
        return dt_error(DT_ERR_INVALID, "%s: the examples have no dense features", what);
    return DT_OK;
}

/* The work each kind of file data needs once: the training data's kind, and the test data's
 * when it is another. */
static dt_status prepare_sources(dt_input *in, const dt_input_spec *test,
                                 const dt_input_options *o)
{
    if (o->row_parser) /* the parser needs none of the formats' own preparations */
        return DT_OK;
    const file_source *train = file_source_of(in->train_spec.kind);
    const file_source *other = test ? file_source_of(test->kind) : NULL;
    dt_status st = train->prepare ? train->prepare(in, o) : DT_OK;
    if (st == DT_OK && other && other != train && other->prepare)
        st = other->prepare(in, o);
    return st;
}

static dt_status open_files(dt_input *in, const dt_input_spec *test, const dt_input_options *o,
                            const dt_input_context *ctx)
{
    if (test && !dt_input_spec_is_files(test))
        return dt_error(DT_ERR_INVALID, "test_data: '%s': with %s --data, give tfrecord:, "
                        "libsvm: or csv: test data", test->text,
                        file_source_of(in->train_spec.kind)->name);
    if (ctx && ctx->num_input_pipelines > 1 && o->batch_size % ctx->num_input_pipelines != 0)
        return dt_error(DT_ERR_INVALID, "batch_size: the global batch %d is not divisible by "
                        "the %d workers", o->batch_size, ctx->num_input_pipelines);
    dt_status st = prepare_sources(in, test, o);
    if (st)
        return st;
    in->n_train = -1;
    in->eval_batch = o->batch_size;
    snprintf(in->source, sizeof in->source, "%.590s", in->train_spec.text);
    if ((st = file_pipeline(in, &in->train_spec, "data", true, o, ctx, &in->train_files,
                            &in->train)))
        return st;
    if (test && (st = file_pipeline(in, &in->test_spec, "test_data", false, o, NULL,
                                    &in->test_files, &in->test)))
        return st;
    return set_shape(in, &in->train_spec, &in->train_files, "data", o);
}

/* ---- The input ---- */

dt_status dt_input_options_check(const dt_input_options *o)
{
    if (o->batch_size < 1)
        return dt_error(DT_ERR_INVALID, "batch_size: must be at least 1, got %d", o->batch_size);
    if (o->shuffle_buffer < 0)
        return dt_error(DT_ERR_INVALID, "shuffle_buffer: must not be negative, got %lld",
                        (long long)o->shuffle_buffer);
    if (o->prefetch < 0 || o->prefetch > 4096)
        return dt_error(DT_ERR_INVALID, "prefetch: must be in 0..4096, got %d", o->prefetch);
    if (!(o->input_timeout >= 0 && o->input_timeout <= 1e9))
        return dt_error(DT_ERR_INVALID, "input_timeout: must be in 0..1e9 seconds (0: no "
                        "limit), got %g", o->input_timeout);
    if (o->num_parallel_reads < 1 || o->num_parallel_reads > 1024)
        return dt_error(DT_ERR_INVALID, "num_parallel_reads: must be in 1..1024, got %d",
                        o->num_parallel_reads);
    if (o->num_parallel_calls < 1 || o->num_parallel_calls > 1024)
        return dt_error(DT_ERR_INVALID, "num_parallel_calls: must be in 1..1024, got %d",
                        o->num_parallel_calls);
    if (o->num_features < 0 || o->num_features > (1 << 24))
        return dt_error(DT_ERR_INVALID, "num_features: must be in 0..16777216, got %d",
                        o->num_features);
    if (o->index_base != 0 && o->index_base != 1)
        return dt_error(DT_ERR_INVALID, "index_base: must be 0 or 1, got %d", o->index_base);
    if (o->field_size < 0)
        return dt_error(DT_ERR_INVALID, "field_size: must not be negative, got %d", o->field_size);
    if (o->max_id < 0)
        return dt_error(DT_ERR_INVALID, "max_id: must not be negative, got %lld",
                        (long long)o->max_id);
    if (o->hash_buckets < 0)
        return dt_error(DT_ERR_INVALID, "hash_buckets: must not be negative, got %lld",
                        (long long)o->hash_buckets);
    return DT_OK;
}

static dt_status check_options(const dt_input_options *o, const dt_input_context *ctx)
{
    dt_status st = dt_input_options_check(o);
    if (st)
        return st;
    if (ctx && (ctx->num_input_pipelines < 1 || ctx->input_pipeline_id < 0 ||
                ctx->input_pipeline_id >= ctx->num_input_pipelines))
        return dt_error(DT_ERR_INVALID, "input: worker %d of %d", ctx->input_pipeline_id,
                        ctx->num_input_pipelines);
    return DT_OK;
}

dt_status dt_input_open(const dt_input_spec *train, const dt_input_spec *test,
                        const dt_input_options *o, const dt_input_context *ctx, dt_input *out)
{
    memset(out, 0, sizeof *out);
    dt_status st = check_options(o, ctx);
    if (st)
        return st;
    out->train_spec = *train;
    if (test)
        out->test_spec = *test;
    st = dt_input_spec_is_files(train) ? open_files(out, test, o, ctx)
                                       : open_images(out, test, o, ctx);
    if (st)
        dt_input_free(out);
    return st;
}

/* Test images alone, in batches of at most o->batch_size, in file order. */
static dt_status open_test_images(dt_input *in, const dt_input_options *o)
{
    dt_status st = dt_input_load_images(&in->test_spec, "test_data", true, &in->test_images);
    if (st)
        return st;
    const dt_image_dataset *t = &in->test_images;
    in->shape[0] = t->h, in->shape[1] = t->w, in->shape[2] = t->c;
    in->eval_batch = o->batch_size < t->n ? o->batch_size : t->n;
    snprintf(in->source, sizeof in->source, "%s", t->images_path);
    return dt_image_pipeline(t, in->eval_batch, false, 0, 0, 0, &in->test);
}

static dt_status open_test_files(dt_input *in, const dt_input_options *o)
{
    const file_source *src = file_source_of(in->test_spec.kind);
    dt_status st = src->prepare && !o->row_parser ? src->prepare(in, o) : DT_OK;
    if (st)
        return st;
    in->eval_batch = o->batch_size;
    snprintf(in->source, sizeof in->source, "%.590s", in->test_spec.text);
    if ((st = file_pipeline(in, &in->test_spec, "test_data", false, o, NULL, &in->test_files,
                            &in->test)))
        return st;
    return set_shape(in, &in->test_spec, &in->test_files, "test_data", o);
}

dt_status dt_input_open_test(const dt_input_spec *test, const dt_input_options *o, dt_input *out)
{
    memset(out, 0, sizeof *out);
    dt_status st = check_options(o, NULL);
    if (st)
        return st;
    out->test_spec = *test;
    out->n_train = -1;
    st = dt_input_spec_is_files(test) ? open_test_files(out, o) : open_test_images(out, o);
    if (st)
        dt_input_free(out);
    return st;
}

dt_status dt_input_open_replica(const dt_input *in, const dt_input_options *o,
                                const dt_input_context *ctx, dt_input *out)
{
    memset(out, 0, sizeof *out);
    if (!dt_input_spec_is_files(&in->train_spec)) {
        dt_status st = check_options(o, ctx);
        if (st)
            return st;
        /* The images stay in's: out->train_images is left empty, so freeing out keeps them. */
        out->train_spec = in->train_spec;
        memcpy(out->shape, in->shape, sizeof out->shape);
        out->n_train = in->n_train;
        out->eval_batch = in->eval_batch;
        snprintf(out->source, sizeof out->source, "%s", in->source);
        return image_train_pipeline(&in->train_images, o, ctx, &out->train);
    }
    return dt_input_open(&in->train_spec, NULL, o, ctx, out);
}

void dt_input_free(dt_input *in)
{
    dt_dataset_destroy(in->train);
    dt_dataset_destroy(in->test);
    dt_file_list_free(&in->train_files);
    dt_file_list_free(&in->test_files);
    dt_image_dataset_free(&in->train_images);
    dt_image_dataset_free(&in->test_images);
    dt_text_header_free(&in->train_header);
    dt_text_header_free(&in->test_header);
    in->train = in->test = NULL;
}
