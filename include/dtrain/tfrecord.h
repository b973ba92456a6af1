/* TFRecord files: TensorFlow's framing of a sequence of binary records, read and written.
 *
 * Each record is: u64 data length (little endian), u32 masked CRC32C of those 8 length bytes,
 * the data, u32 masked CRC32C of the data (TFRecord's mask of a CRC c: ((c >> 15) | (c << 17)) +
 * 0xa282ead8). A file may be compressed as a whole with gzip (TF's "GZIP") or zlib (TF's "ZLIB":
 * deflate with a zlib header); offsets in messages and returned by the reader are then offsets
 * in the decompressed stream.
 *
 * The reader reads its file descriptor front to back with read() and never seeks, so pipes and
 * stdin work. It checks both CRCs of every record. It keeps one buffer that holds the current
 * record (and what was read past it), grown only as data actually arrives, so a corrupt length
 * costs no memory; in the steady state it allocates nothing. */
#ifndef DTRAIN_TFRECORD_H
#define DTRAIN_TFRECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/status.h"

typedef enum {
    DT_COMPRESSION_AUTO, /* reading only: gzip if the file starts with 1f 8b, none otherwise */
    DT_COMPRESSION_NONE,
    DT_COMPRESSION_GZIP,
    DT_COMPRESSION_ZLIB,
} dt_compression;

/* Accepts dtrain's names "auto", "none", "gzip", "zlib" and TensorFlow's compression_type names
 * "" (none), "GZIP", "ZLIB"; otherwise DT_ERR_INVALID naming the value. */
DT_API dt_status dt_compression_parse(const char *name, dt_compression *out);
/* "auto", "none", "gzip" or "zlib". */
DT_API const char *dt_compression_name(dt_compression c);

/* The record size limit used when dt_tfrecord_open gets max_record_bytes = 0: 256 MiB. A length
 * above the limit is reported as a corrupt header rather than trusted. */
#define DT_TFRECORD_DEFAULT_MAX_RECORD_BYTES ((size_t)256 << 20)

typedef struct dt_tfrecord_reader dt_tfrecord_reader;

/* Opens path for reading. max_record_bytes bounds a record's data length (0: the default above).
 * With DT_COMPRESSION_AUTO this reads the file's first bytes. Errors: the file cannot be opened
 * or is a directory (DT_ERR_IO), an invalid compression (DT_ERR_INVALID). */
DT_API dt_status dt_tfrecord_open(const char *path, dt_compression c, size_t max_record_bytes,
                                  dt_tfrecord_reader **out);

/* The same over an open descriptor (a pipe, stdin, a socket): it is read once from its current
 * position and never seeked; name is used in messages (copied). The descriptor stays the
 * caller's: dt_tfrecord_close does not close it. */
DT_API dt_status dt_tfrecord_open_fd(int fd, const char *name, dt_compression c,
                                     size_t max_record_bytes, dt_tfrecord_reader **out);

/* The next record: DT_OK with *data and *n_bytes (valid until the next call or close) and, if
 * offset is not NULL, the byte offset of the record's header in the (decompressed) stream;
 * DT_END at a clean end of the file (at a record boundary); otherwise an error whose message names
 * the file and the record's offset: DT_ERR_FORMAT for a length CRC mismatch, a data CRC mismatch
 * (stored and computed values), a record truncated in its header, data or footer, a length above
 * the limit, or a corrupt or truncated compressed stream; DT_ERR_IO when read() fails.
 * After a data CRC mismatch the framing is still sound: the reader has moved past the bad record,
 * and the next call returns the record after it (for --skip-bad-records). Every other error is
 * final: later calls return the same code. */
DT_API dt_status dt_tfrecord_next(dt_tfrecord_reader *r, const uint8_t **data, size_t *n_bytes,
                                  uint64_t *offset);

/* Framing for readers that do their own I/O. The record at p (stream offset at) with avail
 * bytes of the stream from there, eof telling whether the stream ends after them: DT_OK when the
 * header is sound and the whole record (12-byte header, data, 4-byte data CRC: *need bytes) is
 * within avail, *data_len its data length; DT_END when more of the stream is needed (never with
 * eof), *need bytes in all when the header is known, else 12; otherwise the DT_ERR_FORMAT error
 * dt_tfrecord_next gives there. The data CRC is not checked: see dt_tfrecord_check_data. */
DT_API dt_status dt_tfrecord_frame(const char *name, uint64_t at, const uint8_t *p, size_t avail,
                                   int eof, size_t max_record_bytes, uint64_t *data_len,
                                   size_t *need);
/* The stored data CRC of a framed record (record: its header) against crc, the CRC32C of its
 * data_len data bytes: DT_OK, or dt_tfrecord_next's data CRC mismatch error. */
DT_API dt_status dt_tfrecord_check_data(const char *name, uint64_t at, const uint8_t *record,
                                        uint64_t data_len, uint32_t crc);
#define DT_TFRECORD_HEADER_BYTES 12
#define DT_TFRECORD_FOOTER_BYTES 4

/* The framing of one record of n_bytes of data, for every writer of TFRecord framing (TFRecord
 * files, TensorBoard event files): the header (u64 length, the masked CRC32C of those 8 bytes)
 * and the footer (the masked CRC32C of the data), little-endian. */
DT_API void dt_tfrecord_encode_frame(const void *data, uint64_t n_bytes,
                                     uint8_t header[DT_TFRECORD_HEADER_BYTES],
                                     uint8_t footer[DT_TFRECORD_FOOTER_BYTES]);
/* Whether the 12 bytes at p are a record header: 8 bytes followed by their masked CRC32C. */
DT_API bool dt_tfrecord_header_ok(const uint8_t *p);

/* After an error from dt_tfrecord_next: 1 if the reader can go on (a data CRC mismatch), 0 if the
 * error was final. Lets --skip-bad-records keep reading a file without matching messages. */
DT_API int dt_tfrecord_can_continue(const dt_tfrecord_reader *r);

/* The file name given to open (for callers adding context to their own messages). */
DT_API const char *dt_tfrecord_name(const dt_tfrecord_reader *r);

/* Frees the reader and closes the file it opened; NULL is fine. */
DT_API void dt_tfrecord_close(dt_tfrecord_reader *r);

typedef struct dt_tfrecord_writer dt_tfrecord_writer;

/* Creates (or truncates) path and writes records to it, compressed with c: NONE, GZIP or ZLIB
 * (AUTO is DT_ERR_INVALID). Output is buffered; nothing is fsync'd. */
DT_API dt_status dt_tfrecord_writer_open(const char *path, dt_compression c,
                                         dt_tfrecord_writer **out);

/* The same over an open descriptor (a pipe, stdout); name is used in messages. The descriptor
 * stays the caller's: dt_tfrecord_writer_close flushes to it but does not close it. */
DT_API dt_status dt_tfrecord_writer_open_fd(int fd, const char *name, dt_compression c,
                                            dt_tfrecord_writer **out);

/* Appends one record of n_bytes (0 is fine). Errors (DT_ERR_IO) name the file and the offset
 * (in the uncompressed stream) of the record; after one, the writer accepts nothing more. */
DT_API dt_status dt_tfrecord_write(dt_tfrecord_writer *w, const void *data, size_t n_bytes);

/* Finishes the compressed stream, flushes, closes the file (if the writer opened it) and frees
 * the writer, even on error. Returns the first error of the writer's life: an earlier write's, or
 * the flush's or close's (a full disk often shows only at close). NULL is fine. */
DT_API dt_status dt_tfrecord_writer_close(dt_tfrecord_writer *w);

#endif
