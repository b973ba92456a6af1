/* Training input from a data spec: one parser for the spec forms and one function that builds
 * the whole pipeline from a spec, the options and the input context, for the CLI, the sidecar
 * evaluator and C programs alike.
 *
 * Spec forms:
 *   fashion-mnist          the Debian package's files (/usr/share/datasets/fashion-mnist)
 *   fashion-mnist:DIR      MNIST-layout IDX files in DIR (train-* and t10k-*, raw or gzip)
 *   mnist:DIR              the same
 *   idx:IMAGES,LABELS      two IDX files
 *   tfrecord:GLOB          TFRecord files of tf.Example (GLOB: comma-separated patterns; - is
 *   libsvm:GLOB            stdin), LibSVM text, CSV text
 *   csv:GLOB
 *   criteo:GLOB            Criteo's TSV click logs, for CTR models (criteo.h)
 * Images are loaded into memory and batched by the image pipeline (src/data/image_pipeline.h);
 * files are streamed: source -> [shard] -> [cache] -> [shuffle] -> batch -> [parse Examples] ->
 * [prefetch], the order the tf.data guides recommend.
 *
 * Across workers (the input context), images are batched alike on every worker and each gathers
 * its block of every global batch; file data is sharded as tf.data's auto-shard policy says
 * (AUTO: whole files per worker when there are at least as many files as workers, else every
 * n-th element) and each worker batches its share of the global batch.
 *
 * A new source is one more kind: a row of the spec forms and, for file data, a row of the file
 * sources in src/data/input.c (how its records are read, parsed and how wide its rows are). */
#ifndef DTRAIN_INPUT_H
#define DTRAIN_INPUT_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/dataset.h"
#include "dtrain/example.h"
#include "dtrain/idx.h"
#include "dtrain/sources.h"

#define DT_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

typedef enum {
    DT_INPUT_MNIST_DIR, /* fashion-mnist[:DIR], mnist:DIR */
    DT_INPUT_IDX,       /* idx:IMAGES,LABELS */
    DT_INPUT_TFRECORD,
    DT_INPUT_LIBSVM,
    DT_INPUT_CSV,
    DT_INPUT_CRITEO,    /* criteo:GLOB, CTR models only */
} dt_input_kind;

typedef struct {
    dt_input_kind kind;
    char text[4200];    /* the spec as given, for messages */
    char path[4096];    /* MNIST_DIR: the directory; IDX: the images; files: the glob */
    char labels[4096];  /* IDX: the labels */
    bool default_dir;   /* fashion-mnist without a directory: the Debian package's */
} dt_input_spec;

/* Parses text; errors name `what` (a flag such as "--data") and the spec. */
DT_API dt_status dt_input_spec_parse(const char *text, const char *what, dt_input_spec *out);
/* Files streamed (tfrecord, libsvm, csv), rather than images loaded whole. */
DT_API bool dt_input_spec_is_files(const dt_input_spec *s);
/* The test data that goes with train when none is named: the t10k half of a directory spec;
 * *have false for the other forms. */
DT_API void dt_input_spec_default_test(const dt_input_spec *train, dt_input_spec *test, bool *have);

/* The images of a directory or IDX spec, loaded whole (test_half: a directory's t10k files);
 * DT_ERR_INVALID for file specs. Errors name `what` and the path. */
DT_API dt_status dt_input_load_images(const dt_input_spec *s, const char *what, bool test_half,
                                      dt_image_dataset *out);

/* How the pipeline is built. */
typedef struct {
    int batch_size;               /* the global batch */
    bool keep_remainder;          /* also the last partial batch of an epoch */
    int64_t shuffle_buffer;       /* examples; 0 or 1: file order */
    uint64_t seed;
    int prefetch;                 /* batches prepared ahead on a thread; 0: none */
    /* File data: seconds the input may give nothing (a FIFO nobody writes, a hung network file
     * system) before it fails with an error naming the file, so a worker whose heartbeats still
     * answer does not hang; 0: no limit. Streams are polled; other files are watched by the
     * prefetch thread (with prefetch 0, only streams and the fused TFRecord stage's readers). */
    double input_timeout;
    dt_autoshard_policy autoshard;
    /* Files. */
    dt_compression compression;
    int num_parallel_reads;       /* files read in turn (interleave) */
    int num_parallel_calls;       /* batches of Examples parsed at once */
    const char *cache;            /* NULL, "memory" or a file path: kept after the first epoch */
    bool skip_bad_records;
    const char *features;         /* tfrecord: KEY:LENGTH[:SCALE[:DEFAULT]],... */
    const char *label_key;        /* tfrecord: the label's feature */
    int num_features;             /* libsvm: dense features (indices 1..N); csv from a stream */
    int index_base;               /* libsvm: the first feature index */
    /* CTR data (libsvm): > 0, field-positional rows of field_size `id:value` features, ids
     * 0-based as the DeepFM sample writes them (index_base does not apply), labels 0 or 1. */
    int field_size;
    int64_t max_id;               /* CTR data: ids must be below it (the tables' rows); 0: any */
    int64_t hash_buckets;         /* CTR data: > 0, ids hashed with their field into this many */
    const char *ids_key;          /* CTR tfrecord: the int64 ids' feature ("ids") */
    const char *values_key;       /* CTR tfrecord: the float values' feature ("values") */
    /* CTR data with one column per field (tfrecord, csv): the columns' names, comma-separated;
     * numeric ones first as fields 0.., then categorical ones, hashed (example.h). */
    const char *numeric_columns, *categorical_columns;
    bool log1p_numeric;           /* numeric columns as log(1 + max(x, 0)) */
    bool csv_header;              /* csv: the first line names the columns */
    const char *label_column;     /* csv: by name or 0-based index; NULL: the first */
    const char *input_shape;      /* "H,W,C" of file data (NULL: 1,1,features) */
    /* Raw rows through a parser (a feature spec's, features.h) rather than the formats' own
     * parsing: csv (with a header naming the columns), criteo and tfrecord data are read as raw
     * lines or records, batched, and parsed on num_parallel_calls threads. Borrowed. */
    const dt_row_parser *row_parser;
} dt_input_options;

/* Keras's and tf.data's defaults: batch 64, full shuffle, seed 1, prefetch 2, AUTO sharding,
 * compression by magic, one reader and parser, label key "label", index base 1; and an input
 * timeout of 600 s. */
DT_API void dt_input_options_default(dt_input_options *o);

/* The options' ranges, each error naming the field first ("prefetch: must be in 0..4096, got
 * 5000"); the builders check them too. */
DT_API dt_status dt_input_options_check(const dt_input_options *o);

/* A pipeline and what its users need to know of it. */
typedef struct {
    dt_dataset *train, *test;     /* test: NULL when there is none */
    dt_input_spec train_spec, test_spec;
    dt_image_dataset train_images, test_images; /* images in memory (n 0 for file data) */
    dt_file_list train_files, test_files;
    dt_text_header train_header, test_header; /* raw csv lines: the files' header */
    dt_example_spec example_spec; /* tfrecord: the features read */
    int shape[3];                 /* H, W, C of one example */
    int64_t n_train;              /* training examples; -1 when unknown (file data) */
    int eval_batch;               /* the batch of the test pipeline */
    int64_t bad_records;          /* skipped so far (skip_bad_records) */
    dt_autoshard_policy autoshard; /* as applied to file data: OFF (one worker, or every one
                                      reads everything), FILE or DATA; OFF for images, which
                                      are split by blocks of each batch */
    char source[600];             /* names the training data in messages */
    const char *reading;          /* the file the sources opened last, for a stall's message */
} dt_input;

/* Builds train's pipeline for the worker the context names (NULL: one worker), and test's
 * (NULL: none; the test pipeline is not sharded: the chief evaluates on all of it). File data
 * over several workers needs a global batch that the workers divide. The datasets point into
 * *out (its file lists, feature spec and bad-record count): it stays where it is until
 * dt_input_free. */
DT_API dt_status dt_input_open(const dt_input_spec *train, const dt_input_spec *test,
                               const dt_input_options *o, const dt_input_context *ctx,
                               dt_input *out);

/* Test data alone, as an evaluator reads it: out->test over test in batches of o->batch_size
 * (images: at most their number), in file order, from every file; out->shape is one example's
 * (--input-shape or 1,1,width for files), out->test_images the images when they are in memory.
 * Of o, the batch, prefetch and the options of the files' kind count. */
DT_API dt_status dt_input_open_test(const dt_input_spec *test, const dt_input_options *o,
                                    dt_input *out);

/* Another replica's training input over in's data: the block of every global batch that
 * replica ctx->input_pipeline_id trains on. Images in memory are in's, shared and read only
 * (free out before in); file data gets its own pipeline over the same files. */
DT_API dt_status dt_input_open_replica(const dt_input *in, const dt_input_options *o,
                                       const dt_input_context *ctx, dt_input *out);

/* Accepts a zeroed or half-built input. */
DT_API void dt_input_free(dt_input *in);

#endif
