/* File sources for datasets: TFRecord files (raw records, parsed by dt_dataset_parse_examples),
 * LibSVM and CSV text (parsed rows), from files named by globs, or from a stream read once (a
 * named pipe, or stdin as "-"), in the manner of SageMaker's Pipe mode.
 *
 * Elements carry the index of their file in the list and their byte offset (TFRecord) or line
 * (text), so errors further down the pipeline can name where a bad record came from. With
 * skip_bad_records a bad record or line is counted in *bad_records and skipped; otherwise the
 * first one ends the iteration with an error naming the file and the offset or line. */
#ifndef DTRAIN_SOURCES_H
#define DTRAIN_SOURCES_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "dtrain/api.h"
#include "dtrain/csv.h"
#include "dtrain/dataset.h"
#include "dtrain/example.h"
#include "dtrain/libsvm.h"
#include "dtrain/tfrecord.h"

typedef struct {
    char **paths;
    int n;
} dt_file_list;

/* Expands comma-separated glob patterns, each sorted, in the order given. A pattern matching
 * nothing is an error naming it; "-" is stdin; a path without wildcards must exist. */
DT_API dt_status dt_file_list_glob(const char *patterns, dt_file_list *out);
DT_API void dt_file_list_free(dt_file_list *l);
/* Keeps files index, index + n, ...: auto-sharding by FILE. Fails when none would be left. */
DT_API dt_status dt_file_list_shard(dt_file_list *l, int num_shards, int index);

typedef struct {
    dt_compression compression; /* TFRecord */
    size_t max_record_bytes;    /* TFRecord; 0: the reader's default */
    int num_parallel_reads;     /* files read in turn, one element from each (tf.data's
                                   interleave with cycle_length = this, block_length = 1) */
    bool skip_bad_records;
    int64_t *bad_records;       /* counts what was skipped; may be NULL */
    bool fuse;                  /* tfrecord -> batch -> parse over plain files runs as one stage
                                   with the same elements (default true; false for tests) */
    size_t buffer_bytes;        /* TFRecord in that stage: the bytes of a file each reader
                                   thread takes at a time (tf.data's buffer_size); 0: 8 MiB */
    /* Seconds a read may wait for data before the input counts as stalled, an error naming the
     * file (a FIFO nobody writes, a hung network file system); 0: no limit. Streams are polled;
     * the fused TFRecord stage's reader threads are waited for with this deadline. */
    double stall_secs;
    /* Where each source notes the path of the file it opens (an atomic store), so a stall seen
     * further down the pipeline can name it; may be NULL. The slot must outlive the dataset. */
    const char **reading;
} dt_source_options;

DT_API void dt_source_options_default(dt_source_options *o);

/* Records of TFRecord files as raw rows. The list is borrowed (must outlive the dataset). */
DT_API dt_status dt_dataset_tfrecord(const dt_file_list *files, const dt_source_options *o,
                                     dt_dataset **out);

/* Parses the raw rows of each element (single records, or batches of them: batch then map
 * parses a whole batch per call) into Examples' features; num_parallel_calls elements at a time.
 * spec and files are borrowed; files names the sources in messages. Over batch(tfrecord(files))
 * with one file read at a time, all of them plain (uncompressed, regular) files, the three run as
 * one stage: num_parallel_calls threads read, check and parse whole batches, and the elements and
 * errors are the same. */
DT_API dt_status dt_dataset_parse_examples(dt_dataset *input, const dt_example_spec *spec,
                                           const dt_file_list *files, int num_parallel_calls,
                                           const dt_source_options *o, dt_dataset **out);

/* LibSVM lines as parsed rows. */
DT_API dt_status dt_dataset_libsvm(const dt_file_list *files, const dt_libsvm_options *lo,
                                   const dt_source_options *o, dt_dataset **out);

/* Criteo TSV lines as CTR rows (criteo.h), ids hashed into hash_buckets rows. */
DT_API dt_status dt_dataset_criteo(const dt_file_list *files, int64_t hash_buckets,
                                   const dt_source_options *o, dt_dataset **out);

/* CSV for CTR models (ctr_csv.h): each file opens with a header naming the columns. */
typedef struct {
    const char *numeric, *categorical; /* comma-separated column names */
    const char *label;                 /* the label column's name */
    char delimiter;
    bool log1p;
    int64_t hash_buckets;
} dt_ctr_csv_options;
DT_API dt_status dt_dataset_ctr_csv(const dt_file_list *files, const dt_ctr_csv_options *co,
                                    const dt_source_options *o, dt_dataset **out);

/* CSV lines as parsed rows: the first file sets the width (its header, or its first line). */
DT_API dt_status dt_dataset_csv(const dt_file_list *files, const dt_csv_options *co,
                                const char *label_name, const dt_source_options *o,
                                dt_dataset **out);

/* ---- Raw records parsed after batching ---- */

/* The first line of text files that open with a header: the first file's, which every other
 * file must repeat (an error names the file that does not). */
typedef struct {
    bool set;
    char *line;       /* NUL-terminated, without its line end */
    size_t len;
    uint32_t file;    /* the file it came from */
} dt_text_header;
DT_API void dt_text_header_free(dt_text_header *h);

/* Each raw line starts with where it came from: its file's index (u32) and line number (u64),
 * native byte order (lines never leave the process but through a cache file of this machine). */
#define DT_TEXT_LINE_PREFIX 12
static inline void dt_text_line_where(uint8_t *p, uint32_t file, uint64_t line)
{
    memcpy(p, &file, 4);
    memcpy(p + 4, &line, 8);
}

/* Lines of text files as raw rows (blank lines dropped), each with the prefix above. With a
 * header (not NULL), each file's first non-blank line is its header: kept in *header, which
 * must outlive the dataset and the stages after it, and not a row. */
DT_API dt_status dt_dataset_text_lines(const dt_file_list *files, dt_text_header *header,
                                       const dt_source_options *o, dt_dataset **out);

/* A parser of raw records, for pipelines whose source hands them over unparsed (lines of text,
 * tf.Example records) to be parsed after batching, a batch per call on several threads: how a
 * feature spec (features.h) reads raw data without this layer knowing about it. */
typedef struct dt_row_parser_s {
    void *ctx;
    int n_dense;          /* dense values per parsed row */
    /* A thread's working memory, and its end; scratch_new returns NULL without memory. */
    void *(*scratch_new)(void *ctx);
    void (*scratch_free)(void *ctx, void *scratch);
    /* Each appends the row of one record, or nothing and DT_END for a record that holds no row:
     * parse_line a line of text without its end (header: the files' header line, NULL when they
     * have none), parse_record a serialized tf.Example. DT_ERR_FORMAT for a bad record (its
     * message says what is wrong; the stage prefixes the file and line or record), which
     * skip_bad_records skips. */
    dt_status (*parse_line)(void *ctx, void *scratch, const dt_text_header *header,
                            const char *line, size_t len, dt_rowbuf *out);
    dt_status (*parse_record)(void *ctx, void *scratch, const uint8_t *record, size_t n_bytes,
                              dt_rowbuf *out);
} dt_row_parser;

/* Parses every raw row of each element of input with p, num_parallel_calls elements at a time,
 * order kept. lines: the rows are dt_dataset_text_lines' (errors name the file and line; header
 * as that source's); otherwise records of tfrecord (errors name the file and offset). p is
 * copied; its ctx, and files, are borrowed and must outlive the dataset. */
DT_API dt_status dt_dataset_parse_rows(dt_dataset *input, const dt_row_parser *p, bool lines,
                                       const dt_text_header *header, const dt_file_list *files,
                                       int num_parallel_calls, const dt_source_options *o,
                                       dt_dataset **out);

#endif
