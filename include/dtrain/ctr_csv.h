/* CSV for CTR models: a header names the columns, and --numeric-columns and
 * --categorical-columns pick the fields among them, as feature-column pipelines name them.
 * Numeric column i (in the order given) is field i with id i and its value (empty: 0; with
 * log1p, log(1 + max(x, 0))); categorical column j is field n_numeric + j with id n_numeric +
 * dt_hash_bucket(j, token, hash_buckets - n_numeric) (hash.h) and value 1, an empty token
 * hashed as it is. The label column holds 0 or 1. Other columns are ignored. Fields are split
 * at the delimiter; quotes are not interpreted (CTR logs have none).
 *
 * Errors are DT_ERR_FORMAT naming the 1-based byte column and the column's name. */
#ifndef DTRAIN_CTR_CSV_H
#define DTRAIN_CTR_CSV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/rows.h"
#include "dtrain/status.h"

#define DT_CTR_CSV_MAX_COLUMNS 4096
#define DT_CTR_CSV_MAX_FIELDS 64

typedef struct {
    char delimiter;
    int n_columns;                         /* the header's */
    int label_column;
    int n_numeric, n_fields;
    int column_of[DT_CTR_CSV_MAX_FIELDS];  /* each field's column */
    char names[DT_CTR_CSV_MAX_FIELDS][64]; /* each field's column name, for messages */
    bool log1p;
    int64_t hash_buckets;
} dt_ctr_csv;

/* The layout from a header line: the named columns found, each once. Errors name the column
 * that is missing. */
DT_API dt_status dt_ctr_csv_from_header(const char *line, size_t len, const char *numeric,
                                        const char *categorical, const char *label, char delimiter,
                                        bool log1p, int64_t hash_buckets, dt_ctr_csv *out);

/* One data line into one row of out (n_dense 0). DT_END for a blank line. On an error appends
 * nothing. */
DT_API dt_status dt_ctr_csv_parse_line(const dt_ctr_csv *c, const char *line, size_t len,
                                       dt_rowbuf *out);

#endif
