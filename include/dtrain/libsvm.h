/* LibSVM text records: parsing lines into rows.
 *
 * A line is `label [qid:N] index:value index:value ... [# comment]`: a decimal label, an optional
 * query id (skipped), then features separated by spaces or tabs with strictly increasing indices.
 * LibSVM counts features from 1, so an options' index_base (default 1) is subtracted from each
 * index. Features go either to a fixed number of dense slots (n_dense > 0: the MNIST-like case) or
 * to the row's sparse part as (index - index_base, value) pairs (n_dense == 0: CTR data with
 * hashed ids up to 2^62).
 *
 * Numbers are decimal only ([+-]digits[.digits][e[+-]digits], also ".5" and "5."): no hex, inf or
 * nan, and every value and label must be finite as a float. The stored float is the one nearest
 * to the decimal, bit for bit what strtof gives in the C locale; a hand-written parser does the
 * common forms and defers to strtof only where it could not be exact.
 *
 * Errors are DT_ERR_FORMAT with a message naming the byte column (1-based) in the line, and for
 * buffers the line number: "line 1234, column 9: expected index:value, got 'abc'". */
#ifndef DTRAIN_LIBSVM_H
#define DTRAIN_LIBSVM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/rows.h"
#include "dtrain/status.h"

/* The longest line accepted, '\n' excluded: past it a file is not LibSVM text, and a reader need
 * not buffer more than this to find a line's end. */
#define DT_LIBSVM_MAX_LINE ((size_t)1 << 20)

/* The largest feature index accepted: any non-negative int64 (dynamic tables key rows by it). */
#define DT_LIBSVM_MAX_INDEX ((uint64_t)INT64_MAX)

typedef struct {
    /* > 0: features fill this many dense slots (index index_base goes to slot 0), and an index
     * past them is an error. 0: every feature goes to the sparse part. The rowbuf parsed into
     * must have the same n_dense. */
    int n_dense;
    /* Subtracted from every index: 1 (the default) for LibSVM's 1-based files, 0 for files
     * written 0-based. An index below it is an error unless zero_based_ok. */
    int index_base;
    /* Accepts index 0 when index_base is 1, for the many "1-based" files that slip a 0 in. In
     * sparse mode index 0 then gets id -1 (ids stay distinct and ordered); in dense mode it has
     * no slot and stays an error. Default false. */
    bool zero_based_ok;
    /* > 0: field-positional CTR rows, as the DeepFM sample writes them: exactly field_size
     * `id:value` features per line, one per field in field order, ids in any order and
     * repeats allowed, and a label of 0 or 1. The ids go to the sparse part (n_dense must be 0).
     * Default 0. */
    int field_size;
    /* Field-positional rows: > 0, every id (after index_base) must be below it: the table's
     * rows (--feature-size). Default 0: unchecked. */
    int64_t max_id;
    /* Field-positional rows: > 0, each id token is hashed with its field (hash.h) into this
     * many rows instead of being used as it is. Default 0. */
    int64_t hash_buckets;
} dt_libsvm_options;

/* n_dense 0 (sparse), index_base 1, zero_based_ok false. */
DT_API void dt_libsvm_options_default(dt_libsvm_options *o);

/* Parses one line (no '\n'; a trailing '\r' is ignored) and appends exactly one row to out:
 * its label, and its features in the dense slots or the sparse part. Returns DT_END, appending
 * nothing, for a blank or comment-only line. On an error appends nothing and sets "column N:
 * <what>"; DT_ERR_INVALID for bad options (or an out->n_dense that differs from o->n_dense),
 * DT_ERR_NOMEM when the rows cannot grow. */
DT_API dt_status dt_libsvm_parse_line(const char *line, size_t len, const dt_libsvm_options *o,
                                      dt_rowbuf *out);

/* Parses the complete lines at the start of buf[0 .. n), appending a row for each that is not
 * blank or a comment; a final line without '\n' counts as complete only when at_eof. first_line
 * is the line number of buf's first line (1-based), for messages, and becomes out->pos when out
 * is empty before the first row is appended. On return *consumed is the bytes of whole lines
 * handled and *lines_done their count (blank lines included); the caller keeps buf[*consumed ..
 * n) for the next call. The first bad line stops the parse: the rows of the lines before it stay
 * appended, *consumed and *lines_done point at the bad line's start, and the message reads
 * "line L, column C: ...". A line longer than DT_LIBSVM_MAX_LINE is an error as soon as
 * that many bytes without a '\n' are in buf, at_eof or not. */
DT_API dt_status dt_libsvm_parse_buffer(const char *buf, size_t n, bool at_eof,
                                        const dt_libsvm_options *o, uint64_t first_line,
                                        dt_rowbuf *out, size_t *consumed, uint64_t *lines_done);

/* What dt_libsvm_parse_float found. */
typedef enum {
    DT_NUMBER_OK = 0,
    DT_NUMBER_SYNTAX,   /* not a decimal number (inf, nan, hex and trailing bytes included) */
    DT_NUMBER_RANGE,    /* a decimal number beyond a float's range */
} dt_number_result;

/* Parses exactly the n bytes at s as a decimal number into the nearest float (strtof's result in
 * the C locale, whatever the process locale). Leading or trailing spaces are syntax errors. Sets
 * no message: callers say where the number was. The text parsers (LibSVM, CSV) share it. */
DT_API dt_number_result dt_libsvm_parse_float(const char *s, size_t n, float *out);

#endif
