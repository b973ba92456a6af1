/* Partitioners and partition strategies (see include/dtrain/partition.h). */
#include "dtrain/partition.h"

#include "dtrain/keymap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A count of bytes with an optional K, M or G suffix; false when it is not one. */
static bool parse_bytes(const char *s, const char *end, int64_t *out)
{
    char *stop;
    errno = 0;
    long long v = strtoll(s, &stop, 10);
    if (stop == s || errno || v < 1)
        return false;
    int shift = 0;
    if (stop < end && (*stop == 'K' || *stop == 'M' || *stop == 'G')) {
        shift = *stop == 'K' ? 10 : *stop == 'M' ? 20 : 30;
        stop++;
    }
    if (stop != end || v > (INT64_MAX >> shift))
        return false;
    *out = (int64_t)v << shift;
    return true;
}

dt_status dt_partitioner_parse(const char *text, dt_partitioner *out)
{
    memset(out, 0, sizeof *out);
    const char *colon = strchr(text, ':');
    size_t klen = colon ? (size_t)(colon - text) : strlen(text);
    bool ok = colon != NULL;
    if (ok && klen == 5 && memcmp(text, "fixed", 5) == 0) {
        out->kind = DT_PARTITION_FIXED;
        ok = parse_bytes(colon + 1, colon + 1 + strlen(colon + 1), &out->num_shards);
    } else if (ok && ((klen == 8 && memcmp(text, "min_size", 8) == 0) ||
                      (klen == 8 && memcmp(text, "max_size", 8) == 0))) {
        out->kind = text[1] == 'i' ? DT_PARTITION_MIN_SIZE : DT_PARTITION_MAX_SIZE;
        const char *second = strchr(colon + 1, ':');
        const char *bytes_end = second ? second : colon + 1 + strlen(colon + 1);
        ok = parse_bytes(colon + 1, bytes_end, &out->shard_bytes);
        out->max_shards = out->kind == DT_PARTITION_MIN_SIZE ? 1 : 0;
        if (ok && second) {
            char *stop;
            errno = 0;
            long long m = strtoll(second + 1, &stop, 10);
            ok = stop != second + 1 && *stop == '\0' && !errno && m >= 1;
            out->max_shards = m;
        }
    } else {
        ok = false;
    }
    if (!ok)
        return dt_error(DT_ERR_INVALID, "partitioner '%s': expected fixed:N, "
                        "min_size:BYTES[:MAX_SHARDS] or max_size:BYTES[:MAX_SHARDS] (BYTES may "
                        "end in K, M or G; counts at least 1)", text);
    return DT_OK;
}

dt_status dt_partition_strategy_parse(const char *text, dt_partition_strategy *out)
{
    if (strcmp(text, "div") == 0)
        *out = DT_PARTITION_DIV;
    else if (strcmp(text, "mod") == 0)
        *out = DT_PARTITION_MOD;
    else
        return dt_error(DT_ERR_INVALID, "partition strategy '%s': expected div or mod", text);
    return DT_OK;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

int64_t dt_partition_shards(const dt_partitioner *p, int64_t rows, int64_t bytes_per_row)
{
    int64_t n = 1;
    switch (p->kind) {
    case DT_PARTITION_FIXED:
        n = min64(p->num_shards, rows);
        break;
    case DT_PARTITION_MIN_SIZE: {
        /* ceil(total bytes / min bytes), exact: rows x bytes_per_row may not fit 64 bits. */
        unsigned __int128 total = (unsigned __int128)rows * (unsigned __int128)bytes_per_row;
        unsigned __int128 want = (total + (unsigned __int128)p->shard_bytes - 1) /
                                 (unsigned __int128)p->shard_bytes;
        int64_t cap = min64(rows, p->max_shards);
        n = want < (unsigned __int128)cap ? (int64_t)want : cap;
        break;
    }
    case DT_PARTITION_MAX_SIZE: {
        int64_t per = p->shard_bytes / bytes_per_row;
        per = per < 1 ? 1 : per;
        n = rows / per + (rows % per != 0);
        if (p->max_shards > 0)
            n = min64(n, p->max_shards);
        break;
    }
    }
    return n < 1 ? 1 : n;
}

void dt_partition_range(int64_t rows, int64_t n, int64_t k, int64_t *lo, int64_t *hi)
{
    int64_t base = rows / n, extra = rows % n;
    *lo = k * base + (k < extra ? k : extra);
    *hi = *lo + base + (k < extra ? 1 : 0);
}

void dt_partition_locate(dt_partition_strategy s, int64_t rows, int64_t n, int64_t id,
                         int64_t *shard, int64_t *row)
{
    if (n == 1 || s == DT_PARTITION_HASH) { /* one ps task, or a key kept as it is */
        *shard = n == 1 ? 0 : dt_keymap_shard(id, (int)n);
        *row = id;
        return;
    }
    if (s == DT_PARTITION_MOD) {
        *shard = id % n;
        *row = id / n;
        return;
    }
    /* The first `extra` shards hold base + 1 rows, the others base. */
    int64_t base = rows / n, extra = rows % n, big = extra * (base + 1);
    if (id < big) {
        *shard = id / (base + 1);
        *row = id % (base + 1);
    } else {
        *shard = extra + (id - big) / base;
        *row = (id - big) % base;
    }
}

int64_t dt_partition_shard_rows(dt_partition_strategy s, int64_t rows, int64_t n, int64_t k)
{
    if (s == DT_PARTITION_HASH)
        return 0;
    if (s == DT_PARTITION_MOD)
        return rows / n + (k < rows % n ? 1 : 0);
    int64_t lo, hi;
    dt_partition_range(rows, n, k, &lo, &hi);
    return hi - lo;
}
