/* What the file sources share inside src/data: opening inputs, naming them, counting skipped
 * records, and the fused TFRecord + batch + parse stage. Not part of the public API. */
#ifndef DTRAIN_SOURCES_INT_H
#define DTRAIN_SOURCES_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/sources.h"

/* Opens a file of the list: "-" is stdin (not ours to close). *stream says it can be read once
 * only (stdin, a FIFO, a character device); with streams_used a stream is refused, naming it. */
dt_status dt_src_open_input(const char *path, bool streams_used, int *fd, bool *own, bool *stream);
/* The same for pass `epoch` (0 first) over the data: a path with "{epoch}" names a file of each
 * pass (SageMaker's Pipe mode: the FIFO /opt/ml/input/data/CHANNEL_0, then _1, ...), which is a
 * new stream each time. */
dt_status dt_src_open_epoch(const char *path, int epoch, bool streams_used, int *fd, bool *own,
                            bool *stream);
/* The file's name for messages ("stdin" for "-"). */
const char *dt_src_name_of(const dt_file_list *files, uint32_t file);
void dt_src_count_bad(const dt_source_options *o);
/* Notes in o->reading that path is being read (for a stall's message). */
void dt_src_note_reading(const dt_source_options *o, const char *path);
/* Waits until the stream fd has data or has ended, for at most o->stall_secs (no limit when 0):
 * past it, an error naming the file and what was read of it (`where`, e.g. "line 12"). */
dt_status dt_src_await_data(const dt_source_options *o, int fd, const char *name,
                            const char *where);

/* tfrecord(files, o) -> batch(batch_size, drop_remainder) -> parse_examples(spec, threads) as one
 * stage with the same elements and errors (tfr_batch.c). Every file must be a regular file
 * holding uncompressed records. */
dt_status dt_src_tfrecord_batches(const dt_file_list *files, const dt_source_options *o,
                                  const dt_example_spec *spec, int64_t batch_size,
                                  bool drop_remainder, int threads, dt_dataset **out);

#endif
