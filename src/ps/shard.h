/* A parameter-server task's variables: its shards of the tables (row ranges, or every n-th row,
 * as the partition strategy places them: partition.h) with their optimizer slots, answering the
 * workers' pulls and applying their pushes itself (internal to the library: the ps service
 * feeds it decoded messages, psmsg.h).
 *
 * A shard's rows start as the whole table's would (each row drawn from (seed, global row)), and
 * a push of rows summed over a step updates them with the same row-wise rule at the same step
 * and rate: a worker that pulls, computes and pushes against the shards trains as one_device
 * does. Requests that do not fit the shard (an unknown table, an id another shard holds, a row
 * width that is not the table's) get an ERROR reply naming what is wrong; they never stop it. */
#ifndef DTRAIN_PS_SHARD_H
#define DTRAIN_PS_SHARD_H

#include <stdint.h>

#include "../net/psmsg.h"
#include "dtrain/partition.h"
#include "dtrain/pool.h"
#include "dtrain/rowopt.h"
#include "dtrain/table.h"

#define DT_PS_MAX_TABLES 16

typedef struct {
    uint32_t id;                     /* the table's number in the messages */
    int64_t rows_total;              /* the whole table's rows */
    int64_t n_shards, shard;         /* this shard among them */
    dt_partition_strategy strategy;
    dt_rowopt_config opt;
    dt_table t;                      /* this shard's rows */
    float init_stddev;               /* as defined */
    uint64_t seed;
    int64_t clock;                   /* pushes applied */
} dt_ps_table_shard;

typedef struct {
    int n_tables;
    dt_ps_table_shard tables[DT_PS_MAX_TABLES];
    dt_pool *pool;                   /* borrowed; may be NULL */
    dt_sparse_rows scratch;          /* a push's rows, by local row */
} dt_ps_shard;

void dt_ps_shard_init(dt_ps_shard *s, dt_pool *pool);
void dt_ps_shard_free(dt_ps_shard *s);

/* Adds this task's shard of table `id` (rows_total x dim over n_shards), initialised as
 * dt_table_init_normal would the whole table (stddev 0: zeros), with opt's slots. */
dt_status dt_ps_shard_add_table(dt_ps_shard *s, uint32_t id, const char *name,
                                int64_t rows_total, int dim, int64_t n_shards, int64_t shard,
                                dt_partition_strategy strategy, const dt_rowopt_config *opt,
                                float init_stddev, uint64_t seed);

/* The TABLE message that defines shard `shard` of a table on its ps (the coordinator sends it;
 * name must outlive m). */
void dt_ps_table_msg(uint32_t id, const char *name, int64_t rows_total, int dim, int64_t n_shards,
                     int64_t shard, dt_partition_strategy strategy, const dt_rowopt_config *opt,
                     float init_stddev, uint64_t seed, dt_psmsg *m);

/* Answers one request (TABLE defines a shard: again with the same definition, it is kept as
 * it is), appending the reply (ROWS, ACK, PONG or ERROR) to reply. Fails only for want of
 * memory. */
dt_status dt_ps_shard_handle(dt_ps_shard *s, const dt_psmsg *request, dt_psbuf *reply);

#endif
