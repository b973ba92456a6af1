/* Feature specs: a user's columns and model in one JSON file, with TensorFlow's feature-column
 * names and semantics (docs/FEATURES.md), and the transform that turns raw rows (CSV cells,
 * Criteo TSV, tf.Example lists) into what a model reads.
 *
 * A spec names raw keys (CSV header names, Example feature keys, Criteo's label, I1..I13,
 * C1..C26) and columns over them: numeric, bucketized, vocabulary_list, vocabulary_file,
 * vocabulary (adapted from the training data), hash_bucket, identity, crossed and weighted. A
 * transformed row is a dt_elem row: the numeric columns' values in its dense part (in column
 * order), the categorical columns' ids in its sparse part, each id tagged with its column's
 * slot (dt_feature_entry_*), each value the id's weight (1 unless the column is weighted), and
 * the label as a float (a class index under a label vocabulary). A dynamic column's ids are not
 * reduced to buckets: each is a key (the value's Fingerprint64 with its top bit cleared, an
 * integer id as it is), carried in two entries (dt_feature_key_hi, dt_feature_key_lo).
 *
 * Hashing is TensorFlow's: Fingerprint64 (FarmHash) of a value's bytes, an integer through its
 * decimal digits, modulo the bucket count; crosses fold with FingerprintCat64 from 0xDECAFCAFFE. */
#ifndef DTRAIN_FEATURES_H
#define DTRAIN_FEATURES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/input.h"
#include "dtrain/model_spec.h"
#include "dtrain/rows.h"
#include "dtrain/sources.h"
#include "dtrain/status.h"

#define DT_FEATURE_NAME_CAP 64

/* A transformed row's sparse entries: dt_feature_entry and its kin, in model_spec.h. */

typedef enum {
    DT_FCOL_NUMERIC = 0,
    DT_FCOL_BUCKETIZED,
    DT_FCOL_VOCAB_LIST,
    DT_FCOL_VOCAB_FILE,
    DT_FCOL_VOCAB,      /* "vocabulary": adapted from the training data */
    DT_FCOL_HASH,       /* "hash_bucket" */
    DT_FCOL_IDENTITY,
    DT_FCOL_CROSSED,
    DT_FCOL_WEIGHTED,
} dt_feature_column_type;

/* The spec's name of a type ("hash_bucket"). */
DT_API const char *dt_feature_column_type_name(dt_feature_column_type t);

typedef struct dt_features dt_features;

/* Parses a spec file: errors (DT_ERR_INVALID) name the file and the column or field
 * ("spec.json: columns[3] 'age_buckets': boundaries must ascend"), DT_ERR_IO a file that cannot
 * be read (the spec, a vocabulary file). A column that no part of the model names is logged as
 * a warning. */
DT_API dt_status dt_features_load(const char *path, dt_features **out);
/* The same from text; source names it in messages, dir is where relative vocabulary files are
 * (NULL: the working directory). */
DT_API dt_status dt_features_parse(const char *text, const char *source, const char *dir,
                                   dt_features **out);
DT_API void dt_features_destroy(dt_features *f);

/* The spec again as JSON, with everything adapted written in (vocabularies, boundaries, means
 * and deviations), so that evaluation, restores and predictions read it without a pass over the
 * data; malloc'd, NULL without memory. */
DT_API char *dt_features_to_json(const dt_features *f);

/* Columns whose statistics or vocabulary a pass over the training data must compute first. */
DT_API bool dt_features_needs_adapt(const dt_features *f);

/* That pass: reads the data (csv:, criteo: or tfrecord:) once on `threads` parse threads and
 * fills in every adapted column (docs/FEATURES.md says how each is computed). Bad rows are
 * errors naming the file and line or record, or, with skip_bad_records, skipped and counted in
 * *bad_records (may be NULL). Nothing to adapt: DT_OK at once. */
DT_API dt_status dt_features_adapt(dt_features *f, const dt_input_spec *data, int threads,
                                   bool skip_bad_records, int64_t *bad_records);

/* The raw keys the spec reads, the label's included: a reader hands over one dt_raw_value per
 * key, in this order. */
DT_API int dt_features_num_keys(const dt_features *f);
DT_API const char *dt_features_key(const dt_features *f, int i);
/* The label's key index, or -1 without a label. */
DT_API int dt_features_label_key(const dt_features *f);
/* Rows to score rather than train on: a row may lack the label (a missing cell, an absent
 * feature, a CSV header without its column) and then reads label 0; a label that is there is
 * still checked. */
DT_API void dt_features_set_unlabeled(dt_features *f, bool unlabeled);

DT_API int dt_features_num_columns(const dt_features *f);
DT_API const char *dt_features_column_name(const dt_features *f, int i);
DT_API dt_feature_column_type dt_features_column_type(const dt_features *f, int i);
/* Categorical columns: their slot and bucket count; numeric: slot -1, buckets 0. */
DT_API int dt_features_column_slot(const dt_features *f, int i);
DT_API int64_t dt_features_column_buckets(const dt_features *f, int i);
/* Whether a column's ids are keys of a dynamic table ("dynamic": true, or a weighted column of
 * such a column): unbounded, no buckets, two entries each in a transformed row. */
DT_API bool dt_features_column_dynamic(const dt_features *f, int i);
/* Numeric columns: their dense offset and width; categorical: -1 and 0. */
DT_API int dt_features_column_dense(const dt_features *f, int i, int *width);
/* Dense values and slots of a transformed row. */
DT_API int dt_features_dense_width(const dt_features *f);
DT_API int dt_features_num_slots(const dt_features *f);
/* The column of a slot. */
DT_API int dt_features_slot_column(const dt_features *f, int slot);

/* One raw key's values in one row, as a reader found them. */
typedef enum {
    DT_RAW_MISSING = 0, /* no value (an empty CSV cell, a feature the Example lacks) */
    DT_RAW_TEXT,        /* one text cell: a number, a token, or tokens split by a separator */
    DT_RAW_BYTES,       /* a list of byte strings (a bytes_list) */
    DT_RAW_INT64,
    DT_RAW_FLOAT,
} dt_raw_kind;

typedef struct {
    const char *data;
    size_t len;
} dt_bytes_ref;

typedef struct {
    dt_raw_kind kind;
    size_t n;                   /* values (TEXT: 1) */
    const dt_bytes_ref *bytes;  /* TEXT, BYTES */
    const int64_t *ints;        /* INT64 */
    const float *floats;        /* FLOAT */
} dt_raw_value;

/* A thread's working memory for transforms. */
typedef struct dt_feature_scratch dt_feature_scratch;
DT_API dt_status dt_feature_scratch_new(const dt_features *f, dt_feature_scratch **out);
DT_API void dt_feature_scratch_free(dt_feature_scratch *s);

/* Transforms one raw row, values[dt_features_num_keys(f)], and appends it to out (whose n_dense
 * must be dt_features_dense_width(f)). On error nothing is appended: DT_ERR_FORMAT naming the
 * column and key ("column 'age' (key 'age'): 'x1' is not a number"; "label 'income': '>60K' is
 * not in its vocabulary"), for the caller to prefix with the file and line or record. */
DT_API dt_status dt_features_transform(const dt_features *f, dt_feature_scratch *s,
                                       const dt_raw_value *values, dt_rowbuf *out);

/* The same for one serialized tf.Example: each key's feature (a bytes, int64 or float list; an
 * empty or absent one is a missing value). Errors also as dt_example_parse's ("byte N: ..."). */
DT_API dt_status dt_features_transform_example(const dt_features *f, dt_feature_scratch *s,
                                               const uint8_t *data, size_t n_bytes, dt_rowbuf *out);

/* ---- Delimited text ---- */

/* Where a text file's cells go: the header's columns mapped to the spec's keys. */
typedef struct dt_feature_text dt_feature_text;
/* From a CSV header line (delimiter ','), or with header NULL for Criteo's TSV (tab, columns
 * label, I1..I13, C1..C26). A key of the spec that no column names is DT_ERR_INVALID naming it. */
DT_API dt_status dt_feature_text_new(const dt_features *f, const char *header, size_t len,
                                     char delimiter, dt_feature_text **out);
DT_API void dt_feature_text_free(dt_feature_text *t);
/* Transforms one data line (no '\n'); DT_END for a blank line (nothing appended). Errors as
 * dt_features_transform's, or "the line has M fields, the header K" (or a quote that does not
 * close, "field N: ..."). */
DT_API dt_status dt_feature_text_parse(const dt_features *f, const dt_feature_text *t,
                                       dt_feature_scratch *s, const char *line, size_t len,
                                       dt_rowbuf *out);

/* Row r of a transformed element as one line of JSON: {"label": y, "<numeric column>": [values],
 * "<categorical column>": {"ids": [...]} (and "weights": [...] for a weighted one)}, the
 * columns the model uses in spec order; malloc'd, NULL without memory. */
DT_API char *dt_features_row_json(const dt_features *f, const dt_elem *e, int r);

/* ---- The model ---- */

/* An optimizer as the spec names it, in Keras's terms; zeros where the spec gives nothing
 * (the optimizer's defaults then apply). */
typedef struct {
    char type[16];          /* sgd, momentum, adam, adagrad, ftrl */
    float learning_rate;
    float beta_1, beta_2, epsilon, initial_accumulator, momentum;
    float l1, l2;           /* ftrl */
} dt_feature_optimizer;

typedef struct {
    dt_model_spec spec;     /* arch DT_ARCH_COLUMNS; its columns belong to the dt_features */
    dt_feature_optimizer linear; /* the linear part's tables (row-wise) */
    dt_feature_optimizer dnn;    /* the deep part: dense variables and embedding tables */
} dt_feature_model;

/* The model of the spec's "model" object (docs/FEATURES.md), with TF's canned defaults for the
 * optimizers it does not name. Needs every adapted column done. Errors name the spec and the
 * field ("model.dnn_feature_columns[2]: ..."). The spec's columns live in f until the next call
 * or dt_features_destroy. */
DT_API dt_status dt_features_model(dt_features *f, dt_feature_model *out);

/* ---- Pipelines ---- */

/* A row parser (sources.h) transforming by the spec: CSV lines under a header that names the
 * keys, Criteo TSV lines (no header), tf.Example records. Set dt_input_options.row_parser to
 * dt_feature_parser_rows(p) and the pipeline reads raw data through the spec. f is borrowed. */
typedef struct dt_feature_parser dt_feature_parser;
DT_API dt_status dt_feature_parser_new(const dt_features *f, dt_feature_parser **out);
DT_API void dt_feature_parser_free(dt_feature_parser *p);
DT_API const dt_row_parser *dt_feature_parser_rows(const dt_feature_parser *p);

#endif
