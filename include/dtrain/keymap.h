/* Dynamic embedding tables: int64 keys mapped to rows of tables that grow as keys arrive.
 *
 * A key map owns the rows of one or more tables (dt_table, created with the map's row capacity
 * and attached to it): the built-in CTR models' fm_w and fm_v share one map, since every id
 * looks both up. A key is the raw id (any int64), never reduced modulo a size, so two keys never
 * share a row. Row 0 of every attached table is the zero row: a key not admitted (or not known,
 * when scoring) reads it, and its gradient is dropped, so it stays zero.
 *
 * Storage: the index is buckets of one cache line (12 32-bit entries, each a row or a key still
 * being counted, and a tag byte each from a 64-bit mix of the key, so a lookup compares a key
 * only where its tag matches), probed bucket by bucket from the key's own, kept 3/5 to 9/10
 * full (removed entries marked, and cleared by a rebuild in row order), grown by half. Per row:
 * its key (8 bytes), times seen (4, saturating), the last global step it was seen at (4; 0 marks
 * a free row). So a live key costs 16 bytes and 6 to 9 of the index besides its rows of the
 * tables and their optimizer slots. The tables reserve the map's capacity of rows as address
 * space; pages take memory as rows are first used, rows freed by eviction are used again, and
 * dt_keymap_compact packs the live rows into [1, live] and gives the pages after them back.
 *
 * Admission: with min_count C > 1 a key is admitted on the sighting that makes its count C, and
 * only then gets a row; until then it reads the zero row and its gradient is dropped. Counting
 * is exact (a key being counted takes an index entry and 16 bytes), or a counting Bloom filter:
 * bloom_bits of memory as 4-bit saturating counters, bloom_hashes of them per key, a key's count
 * the least of its counters. The filter never counts low, so a key is never admitted late; a key
 * whose counters other keys share may be admitted early (the false positive rate of a Bloom
 * filter of that many counters and hashes at the number of keys counted), and a key evicted
 * after admission is admitted again at its next sighting, since counters are never lowered.
 *
 * Initialisation: a new key's row of a table is drawn from N(0, stddev^2) by the generator
 * seeded from (the table's seed, the key), the same draw dt_table_init_normal makes for row
 * `key` of a fixed table: the same key starts with the same row on any process and after any
 * restore. Slots start at their optimizer's initial value.
 *
 * Eviction: keys not seen in the last steps_to_live global steps, rows whose L2 norm over every
 * attached table is below l2_below, and, past max_rows live rows, the least recently seen down to
 * max_rows less a sixteenth, so that new keys find room until the next pass. While max_rows rows
 * are live, a key that reaches its count waits (reading the zero row) until eviction makes room:
 * the map never holds more than max_rows rows. A pass runs page by page (DT_KEYMAP_PAGE_ROWS rows
 * per call of dt_keymap_evict_step) so that a step waits for one page at most; dt_keymap_evict_all
 * runs a whole pass (before a checkpoint). Evicted keys' rows are zeroed and come back, when the
 * key does, with its initial row.
 *
 * Memory: before the rows in use pass what the map may take (memory_limit, or what the machine
 * has available less a margin), admission stops with DT_ERR_NOMEM naming the table and its row
 * count, instead of the machine swapping. Not thread-safe: one caller at a time (the parameter
 * server's shard lock, or the training thread). */
#ifndef DTRAIN_KEYMAP_H
#define DTRAIN_KEYMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/checkpoint.h"
#include "dtrain/status.h"
#include "dtrain/table.h"

#define DT_KEYMAP_MAX_TABLES 4
#define DT_KEYMAP_PAGE_ROWS 65536
/* Rows of a map, the zero row included: row numbers are 32-bit, with one bit for keys counted. */
#define DT_KEYMAP_MAX_ROWS ((int64_t)1 << 31)

typedef struct {
    int64_t min_count;          /* sightings before admission; 0 or 1: at the first */
    int64_t bloom_bits;         /* 0: exact counts; else the counting Bloom filter's bits */
    int bloom_hashes;           /* counters per key (1..16) with the filter */
    int64_t steps_to_live;      /* evict keys not seen in this many steps; 0: never */
    float l2_below;             /* evict rows whose L2 norm is below this; 0: never */
    int64_t max_rows;           /* live rows at most; 0: as memory allows */
    int64_t evict_every_steps;  /* a pass every this many steps; 0: before checkpoints only */
    int64_t memory_limit;       /* bytes of the map and its tables' used rows; 0: the machine's */
} dt_keymap_policy;

/* Everything off: every key admitted at first sight, nothing evicted. */
DT_API void dt_keymap_policy_default(dt_keymap_policy *p);
/* Ranges, naming the field: min_count <= 15 with the filter (4-bit counters), hashes 1..16,
 * bits 64..2^40, non-negative steps and rows, l2_below finite and >= 0. */
DT_API dt_status dt_keymap_policy_check(const dt_keymap_policy *p);
/* Whether a and b admit and evict alike, field by field (min_count 0 and 1 alike). */
DT_API bool dt_keymap_policy_equal(const dt_keymap_policy *a, const dt_keymap_policy *b);
/* Whether p is dt_keymap_policy_default's (min_count 0 and 1 alike). */
DT_API bool dt_keymap_policy_is_default(const dt_keymap_policy *p);
/* Whether p evicts anything. */
DT_API bool dt_keymap_policy_evicts(const dt_keymap_policy *p);

typedef struct dt_keymap dt_keymap;

/* The rows a map of policy p, whose rows cost row_bytes (every attached table's values and
 * slots), may have, the zero row included: max_rows + 1 when set, else what memory allows (at
 * least 2, at most DT_KEYMAP_MAX_ROWS). What the tables are created with. */
DT_API int64_t dt_keymap_capacity(const dt_keymap_policy *p, size_t row_bytes);

/* A map named name (its first table's, in messages) of capacity rows (dt_keymap_capacity). */
DT_API dt_status dt_keymap_create(const char *name, const dt_keymap_policy *p, int64_t capacity,
                                  dt_keymap **out);
DT_API void dt_keymap_destroy(dt_keymap *m);
/* Attaches t (rows == the map's capacity): its new rows drawn from N(0, stddev^2) by (seed, key)
 * (0: zero rows). The table becomes lazy: its optimizer's slots (dt_table_set_slots, before or
 * after) are set per row as rows are admitted. */
DT_API dt_status dt_keymap_attach(dt_keymap *m, dt_table *t, float stddev, uint64_t seed);

/* Sets the seed of attached table i's draws (its stddev kept). */
DT_API void dt_keymap_set_seed(dt_keymap *m, int i, uint64_t seed);

/* Training: the rows of keys[0..n) (a place each, repeats allowed), written to rows; every
 * sighting counted and stamped with step; keys admitted as their count reaches min_count (every
 * place of such a key gets its row). The places are grouped by key first, so each distinct key
 * is looked up once. DT_ERR_NOMEM when admission would pass the memory the map may take (rows
 * then all 0; the keys admitted before it stay). */
DT_API dt_status dt_keymap_resolve(dt_keymap *m, const int64_t *keys, size_t n, int64_t step,
                                   int64_t *rows);
/* dt_keymap_resolve of keys already distinct: uniq[0..nu) seen times[j] times each (0 counts as
 * 1), their rows to urows (a parameter-server shard's pull, whose worker grouped the places). */
DT_API dt_status dt_keymap_resolve_counted(dt_keymap *m, const int64_t *uniq,
                                           const uint32_t *times, size_t nu, int64_t step,
                                           int64_t *urows);
/* Scoring: the rows of keys, 0 for a key without one; nothing counted. */
DT_API void dt_keymap_find(const dt_keymap *m, const int64_t *keys, size_t n, int64_t *rows);
/* The row of key, or 0. */
DT_API int64_t dt_keymap_row(const dt_keymap *m, int64_t key);

/* Eviction at global step `step`. dt_keymap_evict_step scans one page of rows of the pass under
 * way, starting a pass when none is and one is due (every evict_every_steps steps, or `force`);
 * it returns whether a pass is still under way. dt_keymap_evict_all finishes the pass under way
 * and runs a whole new one. Both do nothing for a policy that evicts nothing. */
DT_API bool dt_keymap_evict_step(dt_keymap *m, int64_t step, bool force);
DT_API void dt_keymap_evict_all(dt_keymap *m, int64_t step);
/* The step of the last whole pass (a checkpoint's, after a restore): the next is due
 * evict_every_steps after it. */
DT_API void dt_keymap_set_pass_step(dt_keymap *m, int64_t step);
/* Packs the live rows into [1, live] (moving each attached table's row and slots), so that the
 * tables' first live + 1 rows are the map's whole state, and releases the pages after them. */
DT_API void dt_keymap_compact(dt_keymap *m);

typedef struct {
    int64_t live;            /* keys with a row */
    int64_t counting;        /* keys counted, not yet admitted (exact counting) */
    int64_t admitted, evicted; /* since creation (or the restore) */
    int64_t waiting_full;    /* sightings of keys at their count that found max_rows live */
    int64_t rows_used;       /* rows [0, rows_used) in use or free: the high-water mark */
    uint64_t row_bytes;      /* one row of every attached table, values and slots */
    uint64_t rows_bytes;     /* rows_used x row_bytes (summed over maps by stats_add) */
    uint64_t key_bytes;      /* the index and the per-row key, count and step */
    uint64_t counting_bytes; /* the records of keys counted */
    uint64_t bloom_bytes;    /* the filter */
    uint64_t bytes;          /* all of it: key_bytes + rows_bytes + the rest */
} dt_keymap_stats;

/* Bytes per live key: the rows in use and the key overhead over the live keys (0 for none). */
DT_API double dt_keymap_bytes_per_key(const dt_keymap_stats *s);
/* Adds b's counts and bytes to a (a model's or a ps task's maps together). */
DT_API void dt_keymap_stats_add(dt_keymap_stats *a, const dt_keymap_stats *b);
DT_API void dt_keymap_stats_get(const dt_keymap *m, dt_keymap_stats *out);
DT_API const dt_keymap_policy *dt_keymap_policy_of(const dt_keymap *m);
DT_API const char *dt_keymap_name(const dt_keymap *m);

/* ---- State, for checkpoints ---- */

/* After dt_keymap_compact: the live keys in row order (row i + 1 holds keys[i]), their counts and
 * last-seen steps, packed into arrays the map owns until its next call of this; n live. */
DT_API dt_status dt_keymap_rows(dt_keymap *m, const int64_t **keys, const uint32_t **counts,
                                const uint32_t **last_seen, int64_t *n);
/* The keys being counted (exact counting), packed into arrays the map owns until its next
 * change; n of them. */
DT_API dt_status dt_keymap_counting(dt_keymap *m, const int64_t **keys, const uint32_t **counts,
                                    const uint32_t **last_seen, int64_t *n);
/* The Bloom filter's counters (two per byte, the low nibble first), or NULL. */
DT_API const uint8_t *dt_keymap_bloom(const dt_keymap *m, size_t *n_bytes);

/* Empties the map: no key, no count, the filter zero. */
DT_API void dt_keymap_clear(dt_keymap *m);
/* Restores the map, emptied first: key i gets row i + 1, its count and last-seen step; the caller then
 * fills the attached tables' rows [1, n] (values and slots). DT_ERR_INVALID naming `what` (the
 * file and tensor) and the index for a key given twice or a last-seen step of 0; DT_ERR_NOMEM
 * past the capacity or memory. */
DT_API dt_status dt_keymap_restore_rows(dt_keymap *m, const int64_t *keys, const uint32_t *counts,
                                        const uint32_t *last_seen, int64_t n, const char *what);
/* Restores keys being counted (after the rows): a key that has a row is DT_ERR_INVALID. */
DT_API dt_status dt_keymap_restore_counting(dt_keymap *m, const int64_t *keys,
                                            const uint32_t *counts, const uint32_t *last_seen,
                                            int64_t n, const char *what);
/* Restores the filter's counters: n_bytes must match. */
DT_API dt_status dt_keymap_restore_bloom(dt_keymap *m, const uint8_t *bytes, size_t n_bytes,
                                         const char *what);

/* ---- Merging parts: a map restored from a parameter server's shards ---- */
/* Adds attached table i's rows of keys[0..n) (rows and, when slots, each slot: n x dim each, in
 * key order): a key the map has not got gets a row (every attached table's initial row, so a
 * table whose parts lack the key holds the row it would be admitted with; a counting record of
 * the key is dropped); a key it has keeps its row, with the greater count and last-seen step. A
 * key given twice for one table since the map was cleared (or since dt_keymap_merge_end) is
 * DT_ERR_INVALID naming `what` and its index; past the capacity or memory, DT_ERR_NOMEM. The
 * parameter server keeps each table's keys apart, and they may differ (l2_below looks at one
 * table's rows there): merged, the map holds their union. */
DT_API dt_status dt_keymap_merge_rows(dt_keymap *m, int i, const int64_t *keys,
                                      const uint32_t *counts, const uint32_t *last_seen,
                                      int64_t n, const float *rows, const float *const *slots,
                                      const char *what);
/* Adds keys being counted (exact counting only; after the rows): a key with a row is left as it
 * is, one counted already takes the greater count and step. */
DT_API dt_status dt_keymap_merge_counting(dt_keymap *m, const int64_t *keys,
                                          const uint32_t *counts, const uint32_t *last_seen,
                                          int64_t n, const char *what);
/* Merges bytes [at, at + n_bytes) of a Bloom filter of the map's size into its own, each 4-bit
 * counter the greater of the two: the filters of several shards merged never count a key low
 * (they may count it high: admitted early, as a false positive is). */
DT_API dt_status dt_keymap_merge_bloom(dt_keymap *m, const uint8_t *bytes, size_t n_bytes,
                                       size_t at, const char *what);
/* Forgets which keys the merges gave (frees their marks). */
DT_API void dt_keymap_merge_end(dt_keymap *m);
/* Walks the live rows in row order, from *cursor (0 at first): up to max of them, their row
 * numbers, keys, counts and last-seen steps; *cursor moves past them. Returns how many; 0 once
 * every row was given. dt_keymap_next_counting walks the keys being counted alike. */
DT_API size_t dt_keymap_next_live(const dt_keymap *m, int64_t *cursor, size_t max, int64_t *rows,
                                  int64_t *keys, uint32_t *counts, uint32_t *last_seen);
DT_API size_t dt_keymap_next_counting(const dt_keymap *m, int64_t *cursor, size_t max,
                                      int64_t *keys, uint32_t *counts, uint32_t *last_seen);
/* ---- Checkpoints ---- */

/* Tensors a table of a map adds to a checkpoint, at most. */
#define DT_KEYMAP_TENSORS (3 + DT_TABLE_MAX_SLOTS + 4)

/* The tensors of attached table i, after dt_keymap_compact, appended at out (room for
 * DT_KEYMAP_TENSORS); returns how many. With n live keys and the table's dim:
 *   "<table>"                 F32 (n, dim)   the rows, in key order of "<table>/keys"
 *   "<slot name>"             F32 (n, dim)   each optimizer slot, when slots
 *   "<table>/keys"            I64 (n)        the keys
 *   "<table>/counts"          U32 (n)        times seen (saturating)
 *   "<table>/last_seen"       U32 (n)        the global step each was last seen at
 * and for the map's first table only, the admission's state:
 *   "<table>/counting_keys", "<table>/counting_counts", "<table>/counting_last_seen"
 *                                            keys counted and not admitted (exact counting)
 *   "<table>/bloom"           U8 (bytes)     the counting Bloom filter's counters
 * Data and names point into the map and the table (valid until either changes). */
DT_API dt_status dt_keymap_tensors(dt_keymap *m, int i, bool slots, dt_ckpt_tensor *out, int *n);
/* Restores the map (emptied first) and its tables from those tensors of c (the slots when slots): every
 * table's keys must be the first's; a tensor missing, of another dtype or shape, or a key given
 * twice is DT_ERR_INVALID naming the file and the tensor. */
DT_API dt_status dt_keymap_restore(dt_keymap *m, const dt_ckpt *c, bool slots);
/* The attached table of this name's index, or -1. */
DT_API int dt_keymap_table_index(const dt_keymap *m, const char *table);

/* The 64-bit mix of a key that places it on a parameter-server shard (key_shard) and, with
 * another seed, in a map's index: murmur3's 64-bit finalizer of key XOR seed. */
DT_API uint64_t dt_keymap_hash(int64_t key, uint64_t seed);
/* The shard of key among n: dt_keymap_hash(key, 0) mod n. */
DT_API int dt_keymap_shard(int64_t key, int n);

#endif
