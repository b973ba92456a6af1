/* Rows: the elements that flow through an input pipeline, and the builder parsers fill.
 *
 * An element holds n rows: one for a record or a parsed example, several for a batch. A row has
 * raw bytes (a record not yet parsed), or parsed features: a fixed number of dense floats, a label,
 * and variable-length sparse features as (id, value) pairs, stored CSR-style over the rows. An
 * element is one allocation, so moving it through shuffle buffers, caches and queues moves a
 * pointer. Parsers append rows to a dt_rowbuf (growable arrays) and pack it into an element. */
#ifndef DTRAIN_ROWS_H
#define DTRAIN_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/status.h"

typedef struct dt_elem {
    int n;            /* rows */
    int n_dense;      /* dense floats per row (0 for raw records) */
    size_t nnz;       /* sparse entries over all rows */
    size_t n_bytes;   /* raw bytes over all rows */
    uint64_t index;   /* position of row 0 in its source's order (for shard and errors) */
    uint32_t file;    /* index of row 0's file in its source's file list */
    uint64_t pos;     /* row 0's byte offset (binary formats) or line number (text) in that file */
    float *dense;     /* (n, n_dense) */
    float *labels;    /* (n) */
    int64_t *sp_row;  /* (n + 1): row r's sparse entries are [sp_row[r], sp_row[r + 1]) */
    int64_t *sp_ids;  /* (nnz) */
    float *sp_vals;   /* (nnz) */
    size_t *raw_off;  /* (n + 1): row r's bytes are raw[raw_off[r] .. raw_off[r + 1]) */
    uint8_t *raw;     /* (n_bytes) */
} dt_elem;

/* One allocation holding every array; the counts are fixed, the row offsets zero, the values
 * uninitialised. NULL when out of memory. */
DT_API dt_elem *dt_elem_alloc(int n, int n_dense, size_t nnz, size_t n_bytes);
DT_API void dt_elem_free(dt_elem *e);
/* A copy of e in a new allocation; NULL when out of memory. */
DT_API dt_elem *dt_elem_clone(const dt_elem *e);

/* Growable rows. Append a row with dt_rowbuf_add_row (it returns the row's dense slots, zeroed,
 * and the label defaults to 0), then its sparse entries with dt_rowbuf_add_sparse, or its bytes
 * with dt_rowbuf_add_raw. */
typedef struct {
    int n, n_dense;
    float *dense, *labels;
    int64_t *sp_row, *sp_ids;
    float *sp_vals;
    size_t nnz;
    size_t *raw_off;
    uint8_t *raw;
    size_t n_bytes;
    size_t cap_rows, cap_nnz, cap_bytes;
    uint32_t file;
    uint64_t index, pos; /* of row 0 */
} dt_rowbuf;

DT_API void dt_rowbuf_init(dt_rowbuf *b, int n_dense);
DT_API void dt_rowbuf_free(dt_rowbuf *b);
/* Drops the rows, keeps the capacity (and n_dense). */
DT_API void dt_rowbuf_clear(dt_rowbuf *b);

/* Appends a row; *dense_out (may be NULL) receives its n_dense zeroed floats. */
DT_API dt_status dt_rowbuf_add_row(dt_rowbuf *b, float **dense_out);
/* dt_rowbuf_add_row for a caller that writes every dense value itself: they are left unset. */
DT_API dt_status dt_rowbuf_add_row_unset(dt_rowbuf *b, float **dense_out);
static inline void dt_rowbuf_set_label(dt_rowbuf *b, float label) { b->labels[b->n - 1] = label; }
/* Appends a sparse entry to the last row. */
DT_API dt_status dt_rowbuf_add_sparse(dt_rowbuf *b, int64_t id, float value);
/* Room for n more sparse entries: a parser that knows a bound on a row's entries reserves them
 * once, writes them to sp_ids and sp_vals from index nnz on, then commits them with
 * dt_rowbuf_commit_sparse, with no check or call per entry. */
DT_API dt_status dt_rowbuf_reserve_sparse(dt_rowbuf *b, size_t n);
static inline void dt_rowbuf_commit_sparse(dt_rowbuf *b, size_t n)
{
    b->nnz += n;
    b->sp_row[b->n] = (int64_t)b->nnz;
}
/* Appends bytes to the last row's raw record. */
DT_API dt_status dt_rowbuf_add_raw(dt_rowbuf *b, const void *data, size_t n_bytes);
/* Drops the last row (after a parse error, with --skip-bad-records). */
DT_API void dt_rowbuf_drop_last(dt_rowbuf *b);

/* Packs the rows into a new element and clears the builder. NULL when out of memory. */
DT_API dt_elem *dt_rowbuf_take(dt_rowbuf *b);

/* Appends every row of e (which must have b's n_dense) to b. */
DT_API dt_status dt_rowbuf_append_elem(dt_rowbuf *b, const dt_elem *e);
/* Appends rows [first, first + count) of e. */
DT_API dt_status dt_rowbuf_append_rows(dt_rowbuf *b, const dt_elem *e, int first, int count);

#endif
