/* Embedding tables: (rows, dim) float32 variables that a step touches a few rows at a time, and
 * the sparse gradients that update them.
 *
 * A table's storage and its optimizer's slots (the same shape each: Adam's m and v, Adagrad's
 * accumulator, FTRL's z and n) are allocated together with it, in anonymous mappings, so a
 * table's memory is rows x dim x (1 + slots) x 4 bytes, and pages no row has touched cost
 * nothing until then (zero-initialised tables, slots starting at 0). Random initial values are
 * drawn per row from (seed, row): the same whatever the threads, the order, or which rows
 * exist, which is what lets a parameter server initialise just the row range it holds. */
#ifndef DTRAIN_TABLE_H
#define DTRAIN_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/arena.h"
#include "dtrain/pool.h"
#include "dtrain/status.h"

#define DT_TABLE_MAX_SLOTS 2

typedef struct {
    char name[DT_VIEW_NAME_CAP];   /* "fm_v" */
    int64_t rows;
    int dim;
    float *data;                   /* (rows, dim) */
    int n_slots;
    float *slots[DT_TABLE_MAX_SLOTS];               /* (rows, dim) each */
    char slot_names[DT_TABLE_MAX_SLOTS][DT_VIEW_NAME_CAP]; /* "adam/m/fm_v" */
    /* Per slot starting at 0, a bit per 4 KB page that an update has written (see
     * dt_table_claim_slot); NULL for a slot filled at creation. */
    uint64_t *slot_pages[DT_TABLE_MAX_SLOTS];
    bool borrowed; /* data is someone else's (dt_table_borrow), read only, not freed */
    /* Rows set one at a time by their owner (a key map, keymap.h): slots are not filled at
     * creation but given slot_init[s] per row as the row is first used. */
    bool lazy;
    float slot_init[DT_TABLE_MAX_SLOTS];
} dt_table;

/* Table names leave room in a slot's name for "<optimizer>/<slot>/". */
#define DT_TABLE_NAME_MAX 96

/* Rows past this are refused: ids travel as int64, but a row index times dim must stay well
 * inside size_t on every platform dtrain builds on. */
#define DT_TABLE_MAX_ROWS ((int64_t)1 << 40)

/* A zeroed table; DT_ERR_INVALID for bad sizes, DT_ERR_NOMEM (naming the table and the bytes)
 * when the mapping fails. On failure t is left freeable. */
DT_API dt_status dt_table_create(dt_table *t, const char *name, int64_t rows, int dim);
/* Adds n_slots slots named "<optimizer>/<slot_name[i]>/<table>", each filled with init[i]
 * (0 costs nothing until touched). Replaces slots added before. */
DT_API dt_status dt_table_set_slots(dt_table *t, const char *optimizer, int n_slots,
                                    const char *const *slot_names, const float *init);
DT_API void dt_table_free(dt_table *t);

/* Makes t read its (rows, dim) values from data, which the caller owns, keeps alive and may have
 * mapped read only (a checkpoint file), instead of its own storage, which is released: a table
 * that only forwards read, as a predictor's do. Its slots are released too. */
DT_API void dt_table_borrow(dt_table *t, const float *data);

/* Called by an update before it reads elements [off, off + n) of slot s: the first time, each
 * page they lie on is written (an atomic OR of 0, which changes nothing) before it is read.
 * A page first read is mapped to the shared zero page and copied on the first write, and that
 * copy flushes the page from every other thread's TLB, an interrupt to each core: on a zero
 * slot of a large table, touched a few rows at a time by several threads, those flushes cost
 * more than the updates. Thread-safe; a page that something else wrote first is just written
 * again. */
DT_API void dt_table_claim_slot(dt_table *t, int s, size_t off, size_t n);

/* Bytes of storage the table and its slots map. */
DT_API size_t dt_table_bytes(const dt_table *t);

/* Every row r gets dim values drawn from a normal of the given stddev by a generator seeded from
 * (seed, r); split over pool. */
DT_API void dt_table_init_normal(dt_table *t, float stddev, uint64_t seed, dt_pool *pool);
/* Row `global`'s draw into row (dim values): what dt_table_init_normal writes to row `global`. */
DT_API void dt_table_draw_row(float *row, int dim, float stddev, uint64_t seed, uint64_t global);
/* Makes t lazy: its owner sets each row and its slots as it first uses it. */
DT_API void dt_table_make_lazy(dt_table *t);
/* Releases the pages of rows [from, rows) of the values and slots (they read as zero again). */
DT_API void dt_table_release_rows(dt_table *t, int64_t from);
/* The same for a table holding some rows of a larger one: its row r is the larger table's row
 * first + r x stride (a div shard: its first row and 1; a mod shard: its index and the shard
 * count), and gets that row's values. */
DT_API void dt_table_init_normal_rows(dt_table *t, float stddev, uint64_t seed, int64_t first,
                                      int64_t stride, dt_pool *pool);

static inline float *dt_table_row(const dt_table *t, int64_t r)
{
    return t->data + (size_t)r * (size_t)t->dim;
}

/* A one-view arena over the table's values (slot -1) or slot `slot`'s, named as they are and
 * sharing their storage: what checkpoints read and write. Release it with
 * dt_table_arena_release, never dt_arena_free. DT_ERR_UNSUPPORTED for a table of more than
 * 2^31 - 1 rows, which a view's dimensions cannot hold. */
DT_API dt_status dt_table_arena(const dt_table *t, int slot, dt_arena *out);
/* The same over rows [lo, hi) only, the view named "<name>/part_<lo>_<hi>": what a parameter
 * server holding that row range of the table saves, and a partitioned checkpoint reads back. */
DT_API dt_status dt_table_arena_rows(const dt_table *t, int slot, int64_t lo, int64_t hi,
                                     dt_arena *out);
DT_API void dt_table_arena_release(dt_arena *a);

/* A table's gradient: unique ids (increasing) and one summed row for each. */
typedef struct {
    int dim;
    size_t n;         /* rows held */
    size_t cap;       /* rows allocated */
    int64_t *ids;     /* (cap) */
    float *rows;      /* (cap, dim) */
} dt_sparse_rows;

DT_API void dt_sparse_rows_init(dt_sparse_rows *s, int dim);
/* Room for cap rows (keeps the rows held). */
DT_API dt_status dt_sparse_rows_reserve(dt_sparse_rows *s, size_t cap);
DT_API void dt_sparse_rows_free(dt_sparse_rows *s);

#endif
