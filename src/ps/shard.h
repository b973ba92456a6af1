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

#include <stdbool.h>
#include <stdint.h>

#include "psmsg.h"
#include "dtrain/optim.h"
#include "dtrain/partition.h"
#include "dtrain/keymap.h"
#include "dtrain/pool.h"
#include "dtrain/ps.h"
#include "dtrain/rowopt.h"
#include "dtrain/table.h"


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
    /* A dynamic table (the hash strategy): its keys' map, t its rows (keymap.h). */
    dt_keymap *keys;
    dt_keymap_policy policy;
} dt_ps_table_shard;

#define DT_PS_MAX_SLICES 1024

/* A slice [offset, offset + count) of the model's dense variables (one variable, as the
 * coordinator places them round-robin). */
typedef struct {
    uint32_t id;
    uint64_t offset, count;
    int64_t clock;                   /* pushes applied */
} dt_ps_dense_slice;

typedef struct {
    int n_tables;
    dt_ps_table_shard tables[DT_PS_MAX_TABLES];
    /* Dense slices share one optimizer over the whole dense layout (total floats), so a slice's
     * slots sit where one_device's would and its update is theirs bit for bit. */
    uint64_t dense_total;            /* 0 until the first slice */
    float *dense;                    /* dense_total floats; the slices' ranges hold values */
    float *dense_grad;               /* a push's values */
    dt_optim dense_opt;
    int n_slices;
    dt_ps_dense_slice slices[DT_PS_MAX_SLICES];
    int64_t last_step;               /* the latest step of a push applied */
    dt_pool *pool;                   /* borrowed; may be NULL */
    /* What the tables' shards and their slots may take, in bytes: the host's memory (or its
     * cgroup's limit, when lower), less a tenth. A definition past it is refused before
     * anything is allocated, so a peer's TABLE cannot make the task allocate more than it has
     * (and be ended by the kernel when the rows are initialised). */
    uint64_t max_bytes;
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

/* The same for a dynamic table: its keys placed by dt_keymap_shard, admitted and evicted by the
 * shard's own key map under policy (the hash strategy; rows_total DT_PARTITION_HASH_ROWS). */
dt_status dt_ps_shard_add_dynamic(dt_ps_shard *s, uint32_t id, const char *name, int dim,
                                  int64_t n_shards, int64_t shard, const dt_rowopt_config *opt,
                                  float init_stddev, uint64_t seed, const dt_keymap_policy *policy);

/* The TABLE message that defines shard `shard` of a table on its ps (the coordinator sends it;
 * name must outlive m). A dynamic table's policy goes in m->policy after. */
void dt_ps_table_msg(uint32_t id, const char *name, int64_t rows_total, int dim, int64_t n_shards,
                     int64_t shard, dt_partition_strategy strategy, const dt_rowopt_config *opt,
                     float init_stddev, uint64_t seed, dt_psmsg *m);

/* The VAR message that defines a slice of the dense variables on its ps (its values are given
 * to dt_psmsg_encode). */
void dt_ps_var_msg(uint32_t id, uint64_t offset, uint64_t count, uint64_t total,
                   const dt_optim_config *opt, dt_psmsg *m);

/* A dynamic table's state from *cursor (0 first) as one KEYED message of kind (psmsg.h) appended
 * to out: up to max live rows (their slots too when slots), counted keys, or filter bytes; *cursor
 * moves past them and *n_out says how many (0: none left). A READ_KEYS reply, and a snapshot's
 * records. */
dt_status dt_ps_shard_keyed(const dt_ps_table_shard *ts, uint32_t kind, int64_t *cursor,
                            uint32_t max, bool slots, uint64_t request_id, dt_psbuf *out,
                            uint32_t *n_out);

/* Before a checkpoint at step: every dynamic table's eviction pass run whole and its live rows
 * packed into [1, live] (the rows a checkpoint's file then names in order). Under the shards'
 * lock. */
void dt_ps_shard_settle(dt_ps_shard *s, int64_t step);

/* Answers one request (TABLE defines a shard: again with the same definition, it is kept as
 * it is), appending the reply (ROWS, ACK, PONG or ERROR) to reply. Fails only for want of
 * memory. VAR defines a dense slice, PULL_DENSE and PUSH_DENSE read and update one. */
dt_status dt_ps_shard_handle(dt_ps_shard *s, const dt_psmsg *request, dt_psbuf *reply);

#endif
