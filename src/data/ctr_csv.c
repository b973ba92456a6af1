/* CSV rows for CTR models (see include/dtrain/ctr_csv.h). */
#include "dtrain/ctr_csv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/hash.h"
#include "dtrain/libsvm.h"

/* The column named name (n bytes) in the header's cells, or -1. */
static int find_column(const char *const *cell, const size_t *cell_len, int n_cells,
                       const char *name, size_t n)
{
    for (int c = 0; c < n_cells; c++)
        if (cell_len[c] == n && memcmp(cell[c], name, n) == 0)
            return c;
    return -1;
}

/* Splits [line, end) at delim into at most cap cells; the count (cap + 1 when there are more). */
static int split(const char *line, const char *end, char delim, const char **cell, size_t *len,
                 int cap)
{
    int n = 0;
    const char *p = line;
    for (;;) {
        const char *d = memchr(p, delim, (size_t)(end - p));
        const char *stop = d ? d : end;
        if (n < cap) {
            cell[n] = p;
            len[n] = (size_t)(stop - p);
        }
        n++;
        if (!d || n > cap)
            return n;
        p = d + 1;
    }
}

static dt_status add_fields(dt_ctr_csv *c, const char *list, const char *flag,
                            const char *const *cell, const size_t *cell_len, int n_cells)
{
    const char *p = list;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n == 0 || n >= sizeof c->names[0] || c->n_fields == DT_CTR_CSV_MAX_FIELDS)
            return dt_error(DT_ERR_INVALID, "%s: column names of 1..63 bytes, at most %d fields",
                            flag, DT_CTR_CSV_MAX_FIELDS);
        int col = find_column(cell, cell_len, n_cells, p, n);
        if (col < 0)
            return dt_error(DT_ERR_INVALID, "%s: the header has no column '%.*s'", flag, (int)n,
                            p);
        for (int f = 0; f < c->n_fields; f++)
            if (c->column_of[f] == col)
                return dt_error(DT_ERR_INVALID, "%s: column '%.*s' is given twice", flag,
                                (int)n, p);
        memcpy(c->names[c->n_fields], p, n);
        c->names[c->n_fields][n] = '\0';
        c->column_of[c->n_fields++] = col;
        p = comma ? comma + 1 : NULL;
    }
    return DT_OK;
}

dt_status dt_ctr_csv_from_header(const char *line, size_t len, const char *numeric,
                                 const char *categorical, const char *label, char delimiter,
                                 bool log1p, int64_t hash_buckets, dt_ctr_csv *out)
{
    memset(out, 0, sizeof *out);
    out->delimiter = delimiter;
    out->log1p = log1p;
    out->hash_buckets = hash_buckets;
    const char *end = line + len;
    if (end > line && end[-1] == '\r')
        end--;
    const char **cell = malloc(DT_CTR_CSV_MAX_COLUMNS * sizeof *cell);
    size_t *cell_len = malloc(DT_CTR_CSV_MAX_COLUMNS * sizeof *cell_len);
    if (!cell || !cell_len) {
        free(cell), free(cell_len);
        return dt_error(DT_ERR_NOMEM, "no memory for a CSV header");
    }
    dt_status st = DT_OK;
    int n = split(line, end, delimiter, cell, cell_len, DT_CTR_CSV_MAX_COLUMNS);
    if (n > DT_CTR_CSV_MAX_COLUMNS)
        st = dt_error(DT_ERR_FORMAT, "the header has more than %d columns", DT_CTR_CSV_MAX_COLUMNS);
    out->n_columns = n;
    if (st == DT_OK &&
        (out->label_column = find_column(cell, cell_len, n, label, strlen(label))) < 0)
        st = dt_error(DT_ERR_INVALID, "--label-column: the header has no column '%s'", label);
    if (st == DT_OK)
        st = add_fields(out, numeric, "--numeric-columns", cell, cell_len, n);
    out->n_numeric = out->n_fields;
    if (st == DT_OK)
        st = add_fields(out, categorical, "--categorical-columns", cell, cell_len, n);
    if (st == DT_OK && out->n_fields > out->n_numeric && hash_buckets <= out->n_numeric)
        st = dt_error(DT_ERR_INVALID, "--hash-buckets: categorical columns are hashed into the "
                      "tables' rows: give their number (more than the %d numeric fields)",
                      out->n_numeric);
    if (st == DT_OK && out->n_fields == 0)
        st = dt_error(DT_ERR_INVALID, "--numeric-columns, --categorical-columns: no field named");
    free(cell), free(cell_len);
    return st;
}

dt_status dt_ctr_csv_parse_line(const dt_ctr_csv *c, const char *line, size_t len,
                                dt_rowbuf *out)
{
    const char *end = line + len;
    if (end > line && end[-1] == '\r')
        end--;
    if (end == line)
        return DT_END;
    const char *cell[DT_CTR_CSV_MAX_COLUMNS];
    size_t n[DT_CTR_CSV_MAX_COLUMNS];
    int cols = split(line, end, c->delimiter, cell, n, c->n_columns);
    if (cols != c->n_columns)
        return dt_error(DT_ERR_FORMAT, "column %d: %d fields, the header has %d",
                        (int)(end - line) + 1, cols, c->n_columns);
    const char *lab = cell[c->label_column];
    size_t lab_n = n[c->label_column];
    float label = -1.0f;
    if (dt_libsvm_parse_float(lab, lab_n, &label) != DT_NUMBER_OK ||
        (label != 0.0f && label != 1.0f))
        return dt_error(DT_ERR_FORMAT, "column %d: label '%.*s' is not 0 or 1",
                        (int)(lab - line) + 1, (int)(lab_n > 40 ? 40 : lab_n), lab);
    float value[DT_CTR_CSV_MAX_FIELDS];
    for (int f = 0; f < c->n_numeric; f++) {
        const char *s = cell[c->column_of[f]];
        size_t k = n[c->column_of[f]];
        float x = 0.0f;
        if (k > 0 && dt_libsvm_parse_float(s, k, &x) != DT_NUMBER_OK)
            return dt_error(DT_ERR_FORMAT, "column %d (%s): '%.*s' is not a finite number",
                            (int)(s - line) + 1, c->names[f], (int)(k > 40 ? 40 : k), s);
        value[f] = c->log1p ? (float)log1p(x > 0.0f ? (double)x : 0.0) : x;
    }
    dt_status st = dt_rowbuf_add_row(out, NULL);
    if (st)
        return st;
    dt_rowbuf_set_label(out, label);
    int64_t buckets = c->hash_buckets - c->n_numeric;
    for (int f = 0; f < c->n_fields && st == DT_OK; f++) {
        if (f < c->n_numeric) {
            st = dt_rowbuf_add_sparse(out, f, value[f]);
        } else {
            int col = c->column_of[f];
            st = dt_rowbuf_add_sparse(out, c->n_numeric + dt_hash_bucket(f - c->n_numeric,
                                                                          cell[col], n[col],
                                                                          buckets),
                                      1.0f);
        }
    }
    if (st)
        dt_rowbuf_drop_last(out);
    return st;
}
