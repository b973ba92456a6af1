/* Partitioning a table's rows over parameter-server shards, with TensorFlow's partitioners
 * (tf.distribute.experimental.partitioners) and TF1's partition strategies.
 *
 * Shard counts, for a table of `rows` rows of `bytes_per_row` bytes:
 *   fixed:N                          min(N, rows)
 *   min_size:BYTES[:MAX_SHARDS]      max(1, min(rows, MAX_SHARDS, ceil(rows x bytes_per_row /
 *                                    BYTES))); MAX_SHARDS defaults to 1, as TensorFlow's
 *   max_size:BYTES[:MAX_SHARDS]      ceil(rows / max(1, floor(BYTES / bytes_per_row))), at most
 *                                    MAX_SHARDS when given (no limit otherwise)
 * Where rows go:
 *   div  contiguous ranges, the first rows % n shards one row longer (13 rows over 5 shards:
 *        3, 3, 3, 2, 2), as TensorFlow splits a partitioned variable
 *   mod  row id on shard id % n, at row id / n there */
#ifndef DTRAIN_PARTITION_H
#define DTRAIN_PARTITION_H

#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/status.h"

typedef enum { DT_PARTITION_FIXED = 0, DT_PARTITION_MIN_SIZE, DT_PARTITION_MAX_SIZE } dt_partitioner_kind;
/* div and mod place rows of a fixed table; hash places a dynamic table's keys (keymap.h): key k
 * on shard dt_keymap_shard(k, n), murmur3's 64-bit finalizer of k mod n, where it stays key k. */
typedef enum { DT_PARTITION_DIV = 0, DT_PARTITION_MOD, DT_PARTITION_HASH } dt_partition_strategy;
/* The rows_total a hash-placed table is described with: keys, not rows. */
#define DT_PARTITION_HASH_ROWS ((int64_t)1 << 40)

typedef struct {
    dt_partitioner_kind kind;
    int64_t num_shards;   /* fixed */
    int64_t shard_bytes;  /* min_size, max_size */
    int64_t max_shards;   /* min_size (default 1), max_size (0: no limit) */
} dt_partitioner;

/* "fixed:N" | "min_size:BYTES[:MAX_SHARDS]" | "max_size:BYTES[:MAX_SHARDS]"; BYTES may end in
 * K, M or G (powers of 1024). DT_ERR_INVALID quoting the text. */
DT_API dt_status dt_partitioner_parse(const char *text, dt_partitioner *out);
/* "div" | "mod". */
DT_API dt_status dt_partition_strategy_parse(const char *text, dt_partition_strategy *out);

/* The number of shards of a table (rows >= 1, bytes_per_row >= 1). */
DT_API int64_t dt_partition_shards(const dt_partitioner *p, int64_t rows, int64_t bytes_per_row);

/* Shard k's rows [*lo, *hi) of rows split contiguously over n shards (div). */
DT_API void dt_partition_range(int64_t rows, int64_t n, int64_t k, int64_t *lo, int64_t *hi);

/* The shard holding row id of a table of rows split over n shards, and its row there. */
DT_API void dt_partition_locate(dt_partition_strategy s, int64_t rows, int64_t n, int64_t id,
                                int64_t *shard, int64_t *row);
/* The rows shard k holds: its range's length (div) or the ids with id % n == k (mod); 0 for hash,
 * whose shards grow as keys arrive. */
DT_API int64_t dt_partition_shard_rows(dt_partition_strategy s, int64_t rows, int64_t n, int64_t k);

#endif
