/* TensorBoard event files: scalar summaries TensorBoard, tf.summary readers and
 * tf.compat.v1.train.summary_iterator read.
 *
 * A writer creates <logdir>/events.out.tfevents.<10-digit unix seconds>.<hostname> (a ".<pid>"
 * suffix is added should that name exist already), TFRecord-framed (tfrecord.h). Its first
 * record is Event{wall_time, file_version = "brain.Event:2"}; each scalar is then one
 * Event{wall_time = 1 (double), step = 2 (int64), summary = 5} whose Summary holds one
 * Value{tag = 1 (string), simple_value = 2 (float)}, the messages of TF's event.proto and
 * summary.proto, encoded by hand here. Records are flushed to the file by dt_summary_flush and at
 * close, so TensorBoard sees a running job's figures. */
#ifndef DTRAIN_SUMMARY_H
#define DTRAIN_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/status.h"

typedef struct dt_summary_writer dt_summary_writer;

/* Creates logdir (and its parents) when missing and a new event file in it, and writes the
 * file_version event. Errors name the path. */
DT_API dt_status dt_summary_open(const char *logdir, dt_summary_writer **out);

/* The event file's path. */
DT_API const char *dt_summary_path(const dt_summary_writer *w);

/* Appends one scalar event (wall time now). tag is at most 255 bytes. */
DT_API dt_status dt_summary_scalar(dt_summary_writer *w, const char *tag, int64_t step, float value)
    ;

/* Writes buffered events to the file (no fsync). */
DT_API dt_status dt_summary_flush(dt_summary_writer *w);

/* Flushes, closes and frees; returns the first error of the writer's life. NULL is fine. */
DT_API dt_status dt_summary_close(dt_summary_writer *w);

/* The Event message bytes of one scalar (for tests and for writers of other streams): returns
 * the length, or 0 when cap is too small. */
DT_API size_t dt_event_encode_scalar(uint8_t *buf, size_t cap, double wall_time, int64_t step,
                                     const char *tag, float value);

/* The Event message bytes of the file_version event. */
DT_API size_t dt_event_encode_file_version(uint8_t *buf, size_t cap, double wall_time);

#endif
