/* Partitioners: TensorFlow's documented examples and rules (shard counts for Fixed, MinSize and
 * MaxSize; 13 rows over 5 shards are 3, 3, 3, 2, 2), and div and mod placing every row once. */
#include <string.h>

#include "dtrain/partition.h"
#include "test.h"

static int64_t shards(const char *spec, int64_t rows, int64_t bytes_per_row)
{
    dt_partitioner p;
    CHECK_OK(dt_partitioner_parse(spec, &p));
    return dt_partition_shards(&p, rows, bytes_per_row);
}

TEST(partition_shard_counts_follow_tensorflow)
{
    /* The examples of TensorFlow's API docs: a (6, 1) float32 variable, 4 bytes a row. */
    CHECK(shards("min_size:4:2", 6, 4) == 2);
    CHECK(shards("min_size:4:10", 6, 4) == 6);
    CHECK(shards("max_size:4", 6, 4) == 6);
    CHECK(shards("max_size:4:2", 6, 4) == 2);
    CHECK(shards("max_size:1024", 6, 4) == 1);
    CHECK(shards("fixed:2", 10, 12) == 2);
    /* The rules: fixed is capped by the rows; min_size's default max_shards is 1; min_size
     * rounds the count up, max_size the rows per shard down. */
    CHECK(shards("fixed:5", 3, 4) == 3);
    CHECK(shards("min_size:256K", 1000000, 128) == 1);
    CHECK(shards("min_size:256K:100", 1000000, 128) == 100); /* 128 MB / 256 KiB = 489 */
    CHECK(shards("min_size:1M:1000", 1000000, 128) == 123);  /* ceil(128e6 / 1048576) */
    CHECK(shards("max_size:1M", 1000000, 128) == 123);       /* 8192 rows per shard */
    CHECK(shards("max_size:100", 10, 128) == 10);            /* a row is more than a shard */
    /* A table of 2^40 rows of 4 KiB: the byte count overflows 64 bits, the shard count not. */
    CHECK(shards("min_size:1G:1000000", (int64_t)1 << 40, 4096) == 1000000);
}

TEST(partition_rows_13_over_5_and_every_row_once)
{
    int64_t want[5] = {3, 3, 3, 2, 2}, at = 0;
    for (int k = 0; k < 5; k++) {
        int64_t lo, hi;
        dt_partition_range(13, 5, k, &lo, &hi);
        CHECK(lo == at && hi - lo == want[k]);
        CHECK(dt_partition_shard_rows(DT_PARTITION_DIV, 13, 5, k) == want[k]);
        at = hi;
    }
    for (int s = 0; s < 2; s++) {
        dt_partition_strategy st = s ? DT_PARTITION_MOD : DT_PARTITION_DIV;
        for (int64_t rows = 1; rows <= 40; rows++)
            for (int64_t n = 1; n <= rows && n <= 7; n++) {
                int64_t seen[7] = {0};
                for (int64_t id = 0; id < rows; id++) {
                    int64_t shard, row;
                    dt_partition_locate(st, rows, n, id, &shard, &row);
                    CHECK(shard >= 0 && shard < n && row >= 0 &&
                          row < dt_partition_shard_rows(st, rows, n, shard));
                    if (st == DT_PARTITION_DIV) {
                        int64_t lo, hi;
                        dt_partition_range(rows, n, shard, &lo, &hi);
                        CHECK(id == lo + row);
                    } else {
                        CHECK(id == row * n + shard);
                    }
                    seen[shard]++;
                }
                for (int64_t k = 0; k < n; k++)
                    CHECK(seen[k] == dt_partition_shard_rows(st, rows, n, k));
            }
    }
}

TEST(partition_specs_errors_quote_the_text)
{
    dt_partitioner p;
    const char *bad[] = {"fixed", "fixed:0", "fixed:x", "min_size:", "min_size:1Q",
                         "max_size:4:0", "max_size:4:", "sharded:3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(dt_partitioner_parse(bad[i], &p) == DT_ERR_INVALID &&
                  strstr(dt_last_error(), bad[i]), "'%s': %s", bad[i], dt_last_error());
    dt_partition_strategy s;
    CHECK(dt_partition_strategy_parse("mod", &s) == DT_OK && s == DT_PARTITION_MOD);
    CHECK(dt_partition_strategy_parse("hash", &s) == DT_ERR_INVALID);
}
