/* Numeric CSV records: parsing lines into rows, and reading a header's column names.
 *
 * Each line is one example: fields separated by a delimiter (',' by default), every field a
 * decimal number (the same syntax and float rounding as LibSVM values, see libsvm.h). One column
 * may be the label; the others become the row's dense floats in file order. Fields may be quoted
 * ("1.5", with "" standing for a quote, as RFC 4180 has it) and surrounded by spaces or tabs,
 * which are ignored (unless the delimiter is one). A quoted field cannot span lines: this is a
 * line parser. An empty field is an error, not a default: a silent 0 or NaN for a missing value
 * would train on data nobody wrote. A UTF-8 byte order mark at the start of a line is skipped
 * (spreadsheets write one), and a trailing '\r' is ignored.
 *
 * Errors are DT_ERR_FORMAT, naming the 1-based byte column and field: "column 12 (field 4): 'abc'
 * is not a number", "column 9 (field 4): expected 4 fields, the line has 3". */
#ifndef DTRAIN_CSV_H
#define DTRAIN_CSV_H

#include <stdbool.h>
#include <stddef.h>

#include "dtrain/api.h"
#include "dtrain/rows.h"
#include "dtrain/status.h"

/* Room for a column name and its terminating NUL. */
#define DT_CSV_NAME_CAP 64

typedef struct {
    int label_column; /* 0-based; -1: no label (every column is a feature, labels are 0) */
    bool header;      /* the first line names the columns (for the file reader; the parsers
                         below are told which line is which) */
    char delimiter;   /* any byte but '"', '\r', '\n' and NUL */
} dt_csv_options;

/* label_column -1, header false (a header read as data fails loudly; data read as a header
 * would be lost quietly), delimiter ','. */
DT_API void dt_csv_options_default(dt_csv_options *o);

/* Parses one data line (no '\n') of n_columns_expected fields and appends one row to out: the
 * label column's value as the label, the others as out's n_dense floats, which must number
 * n_columns_expected minus one with a label column, n_columns_expected without. Returns DT_END,
 * appending nothing, for a blank line. On an error appends nothing: DT_ERR_FORMAT with "column N
 * (field K): ..." for a field that is empty or not a finite number, a bad quote, or a wrong
 * number of fields; DT_ERR_INVALID for options that do not fit n_columns_expected or out. */
DT_API dt_status dt_csv_parse_line(const char *line, size_t len, const dt_csv_options *o,
                                   int n_columns_expected, dt_rowbuf *out);

/* Reads a header line's column names into names[0 .. *n), quotes removed and "" unescaped,
 * surrounding spaces trimmed. Errors: more than max fields, a name of DT_CSV_NAME_CAP bytes or
 * more, a bad quote. Returns DT_END for a blank line, with *n = 0. */
DT_API dt_status dt_csv_parse_header(const char *line, size_t len, const dt_csv_options *o,
                                     char names[][DT_CSV_NAME_CAP], int max, int *n);

/* The index of the column called name among names[0 .. n), or -1: how a caller turns a label
 * given by name into label_column. */
DT_API int dt_csv_find_column(const char names[][DT_CSV_NAME_CAP], int n, const char *name);

/* Counts a line's fields (quotes respected), for a headerless file whose width the first line
 * sets. Returns DT_END with *n = 0 for a blank line, DT_ERR_FORMAT for a bad quote. */
DT_API dt_status dt_csv_count_fields(const char *line, size_t len, const dt_csv_options *o, int *n);

#endif
