/* The predictor: a trained model scoring rows inside a serving process.
 *
 * dt_predictor_open reads a checkpoint read only: a checkpoint file, the latest checkpoint of a
 * model directory, or a directory `dtrain export --format dtrain` wrote (model.safetensors beside
 * its feature_spec.json). The embedding tables are used where they lie in the file, mapped
 * shared and never copied, so every process serving one checkpoint shares one copy of them in
 * the page cache; only the dense variables are copied. A parameter-server checkpoint (a manifest
 * and its ps tasks' shard files) is the exception: its tables are assembled in memory (export it
 * once with `dtrain export --format dtrain` to serve it mapped).
 *
 * Once open, the predictor is immutable. Each thread that scores takes a context of its own
 * (dt_predict_ctx_new: the model's activations for max_batch rows, the feature spec's scratch),
 * and any number of threads score at once, each through its own context, with no lock and no
 * shared write. The predictor starts no thread, installs no signal handler and keeps no global
 * state; errors are status codes with the thread's message (status.h), as everywhere in dtrain.
 *
 * Scores are what `dtrain predict` prints: for a binary head the probability (the sigmoid of
 * the logit), for a multiclass head the class probabilities (softmax), for a regression head the
 * value; or, asking for DT_PREDICT_LOGITS, the model's raw outputs. A row's score depends on the
 * row alone: not on the batch it came in, its place there, nor the thread. */
#ifndef DTRAIN_PREDICT_H
#define DTRAIN_PREDICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/api.h"
#include "dtrain/features.h"
#include "dtrain/input.h"
#include "dtrain/model_spec.h"
#include "dtrain/rows.h"
#include "dtrain/status.h"

/* What a directory `dtrain export --format dtrain` writes holds: the model's variables. */
#define DT_EXPORT_MODEL_FILE "model.safetensors"

typedef enum {
    DT_HEAD_BINARY = 0, /* one logit: the probability of class 1 */
    DT_HEAD_MULTICLASS, /* K logits: the class probabilities */
    DT_HEAD_REGRESSION, /* K values */
} dt_predict_head;

typedef enum {
    DT_PREDICT_SCORES = 0, /* probabilities, class probabilities or values */
    DT_PREDICT_LOGITS,     /* the model's outputs before the head's sigmoid or softmax */
} dt_predict_output;

typedef struct {
    int max_batch;  /* rows per call, 1..65536; 256 by default */
    bool populate;  /* read the mapped tables into the page cache at open (a first request then
                       waits for no disk); off by default */
    bool private_tables; /* copy the tables into this process's memory instead of mapping them:
                            no sharing between processes, but on huge pages where the kernel
                            gives them, so a lookup in a large table misses the TLB far less
                            often than in the file's 4 KB pages; off by default */
    FILE *log;      /* warnings: a damaged newest checkpoint passed over; may be NULL */
    bool defer_verify; /* open a checkpoint file or an exported directory without its checksum
                          pass, which dt_predictor_verify runs: scoring may start meanwhile, and
                          the caller uses no score before it returns DT_OK (a training's
                          directory is verified at open, to pass over a damaged newest
                          checkpoint); off by default */
} dt_predictor_options;

DT_API void dt_predictor_options_default(dt_predictor_options *o);

typedef struct dt_predictor dt_predictor;

/* Opens path (a checkpoint file or a directory, as above); o may be NULL for the defaults.
 * Errors name the file: one that is not a checkpoint, truncated or damaged (its checksum), of a
 * format version this dtrain does not read, or a feature spec that does not describe the
 * checkpoint's model. */
DT_API dt_status dt_predictor_open(const char *path, const dt_predictor_options *o,
                                   dt_predictor **out);
DT_API void dt_predictor_close(dt_predictor *p);
/* The checksum pass that defer_verify left (DT_OK at once otherwise): DT_ERR_FORMAT naming the
 * file when the checkpoint is damaged, and then every score computed from it is to be dropped.
 * Contexts may score from other threads meanwhile; call it once, from one thread. */
DT_API dt_status dt_predictor_verify(dt_predictor *p);

/* The checkpoint file the variables come from, and its global step (-1 when unknown). */
DT_API const char *dt_predictor_checkpoint(const dt_predictor *p);
DT_API int64_t dt_predictor_step(const dt_predictor *p);
DT_API const dt_model_spec *dt_predictor_model_spec(const dt_predictor *p);
/* The feature spec of a feature-spec model (its vocabularies, normalizers and hashing, as
 * trained), NULL for a built-in or JSON model. */
DT_API const dt_features *dt_predictor_features(const dt_predictor *p);
DT_API dt_predict_head dt_predictor_head(const dt_predictor *p);
/* Scores per row: 1 for binary and regression heads of one output, K for multiclass. */
DT_API int dt_predictor_num_outputs(const dt_predictor *p);
DT_API int dt_predictor_max_batch(const dt_predictor *p);
/* Values per row of a dense model's input (dt_predict_dense), 0 for CTR and spec models; fields
 * per row of a built-in CTR model (dt_predict_ids), else 0. */
DT_API size_t dt_predictor_dense_width(const dt_predictor *p);
DT_API int dt_predictor_field_size(const dt_predictor *p);

/* ---- Scoring: one context per thread ---- */

typedef struct dt_predict_ctx dt_predict_ctx;

DT_API dt_status dt_predict_ctx_new(const dt_predictor *p, dt_predict_ctx **out);
DT_API void dt_predict_ctx_free(dt_predict_ctx *c);

/* Rows as an input pipeline gives them (dtrain's parsed rows: dense values for a dense model,
 * F (id, value) fields for lr/fm/deepfm, a feature spec's transformed rows); at most max_batch.
 * out gets n x dt_predictor_num_outputs floats. DT_ERR_INVALID naming the row and field for an
 * id outside its table, a value that is not finite or a row of the wrong width. */
DT_API dt_status dt_predict_rows(dt_predict_ctx *c, const dt_elem *rows, dt_predict_output what,
                                 float *out);

/* lr, fm, deepfm: n rows of F already-hashed ids (int64 [n, F]) and their values (float [n, F]),
 * the `ids` and `values` of the sample's TFRecords. */
DT_API dt_status dt_predict_ids(dt_predict_ctx *c, int n, const int64_t *ids, const float *values,
                                dt_predict_output what, float *out);

/* A dense model: n rows of dt_predictor_dense_width floats (NHWC images, or features). */
DT_API dt_status dt_predict_dense(dt_predict_ctx *c, int n, const float *x, dt_predict_output what,
                                  float *out);

/* A feature-spec model over raw text: n lines (no line end; lens[i] bytes each) under a CSV
 * header line that names the spec's keys (delimiter ','), or with header NULL, Criteo TSV
 * (label, I1..I13, C1..C26). The spec's vocabularies, hashing, boundaries and normalizers apply
 * as in training; the label column may be absent or empty. An error names the row (0-based in
 * this call) and the column. */
DT_API dt_status dt_predict_lines(dt_predict_ctx *c, const char *header, int n,
                                  const char *const *lines, const size_t *lens,
                                  dt_predict_output what, float *out);

/* A feature-spec model over serialized tf.Examples (records[i], lens[i] bytes). */
DT_API dt_status dt_predict_examples(dt_predict_ctx *c, int n, const uint8_t *const *records,
                                     const size_t *lens, dt_predict_output what, float *out);

/* The scores of logits z (n rows of dt_predictor_num_outputs) as the head gives them: what
 * DT_PREDICT_SCORES returns, from what DT_PREDICT_LOGITS returned. */
DT_API void dt_predict_scores_of_logits(const dt_predictor *p, const float *z, int n, float *out);

/* ---- Batch scoring: dtrain predict ---- */

typedef enum { DT_PREDICT_TSV = 0, DT_PREDICT_JSONL, DT_PREDICT_NPY } dt_predict_format;

/* "tsv", "jsonl" or "npy"; DT_ERR_INVALID naming them otherwise. */
DT_API dt_status dt_predict_format_parse(const char *name, dt_predict_format *out);

typedef struct {
    const char *model_dir;        /* its latest checkpoint, or an exported directory */
    const char *checkpoint;       /* this file instead */
    const char *data;             /* a data spec (input.h); a path of - is stdin */
    const dt_input_options *input; /* how the data is read (NULL: the defaults) */
    const char *out;              /* NULL or "-": stdout */
    dt_predict_format format;
    bool logits;                  /* also the logits (binary and multiclass heads) */
    const char *keep_columns;     /* comma-separated input columns copied beside the scores:
                                     "label" for every input (the row's label), any column of
                                     a feature-spec model's csv, criteo or tfrecord rows */
    int threads;                  /* rows scored on this many threads (and parsed) */
    int batch_size;               /* rows per forward */
    bool private_tables;          /* the predictor's private_tables (faster lookups in large
                                     tables; no sharing with other processes) */
    FILE *log;                    /* warnings; may be NULL */
} dt_predict_run_options;

DT_API void dt_predict_run_options_default(dt_predict_run_options *o);

typedef struct {
    int64_t rows;                 /* scored */
    int64_t bad_records;          /* skipped (skip_bad_records) */
    double seconds;
} dt_predict_run_result;

/* Scores every row of the data in input order and writes the scores:
 *   tsv    one line per row: the kept columns, then the score(s) (with logits: the logit(s)
 *          after them), tab-separated
 *   jsonl  one object per row: the kept columns by name, then "probability" (and "logit"),
 *          "probabilities" (and "logits") or "value"
 *   npy    one float32 array [rows, columns] of the tsv's numbers (no kept columns)
 * Numbers are written with 9 significant digits, which give the float back exactly. A bad row
 * is an error naming the file and line or record (and the column), unless the input options
 * skip bad records, which are then counted. */
DT_API dt_status dt_predict_run(const dt_predict_run_options *o, dt_predict_run_result *r);

#endif
