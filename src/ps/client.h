/* The chief's and the workers' side of the ps tasks: one authenticated connection per ps task,
 * tables defined shard by shard, and pulls and pushes whose ids are grouped by the shard that
 * holds them, sent to every shard before any reply is read, so the shards work in parallel
 * (internal to the library). Table t's shard k lives on ps task k mod (ps tasks). */
#ifndef DTRAIN_PS_CLIENT_H
#define DTRAIN_PS_CLIENT_H

#include "../net/handshake.h"
#include "dtrain/cluster.h"
#include "dtrain/arena.h"
#include "dtrain/optim.h"
#include "dtrain/partition.h"
#include "dtrain/rowopt.h"
#include "dtrain/keymap.h"
#include "dtrain/table.h"

typedef struct dt_ps_client dt_ps_client;

/* Connects to every ps task of cl as me, waiting up to connect_timeout seconds for each. A ps
 * task that does not answer a pull, a push, a ping or a stop within request_timeout seconds
 * fails the round (DT_ERR_TIMEOUT naming it); defining a table and saving a checkpoint, whose
 * time grows with the shard, may take up to an hour. */
dt_status dt_ps_client_open(const dt_handshake_id *me, const dt_cluster *cl,
                            double connect_timeout, double request_timeout, dt_ps_client **out);
void dt_ps_client_close(dt_ps_client *c);

/* After a ps task was lost: a link that fails mid-round leaves every link out of step, and the
 * client broken (dt_ps_client_broken) until dt_ps_client_reconnect closes them all and
 * connects to every ps task again, waiting up to timeout seconds for one started again. me
 * and cl, given to open, must outlive the client. */
dt_status dt_ps_client_reconnect(dt_ps_client *c, double timeout);
bool dt_ps_client_broken(const dt_ps_client *c);
/* Restoring a checkpoint: table id's rows and optimizer slots set to t's (a whole table, its
 * slots as the ps tasks' shards hold them), shard by shard; every dense variable and the dense
 * optimizer's slots over it set to params' and o's (o over params' layout). */
dt_status dt_ps_client_assign_table(dt_ps_client *c, uint32_t id, const dt_table *t);
/* The same for a dynamic table, in parts: keys[0..n) with their counts and last-seen steps and
 * (rows given) their rows and each slot's (n x dim each), or (rows NULL) keys being counted,
 * each to the ps its key's hash places it on, merged into its shard (dt_keymap_merge_rows and the
 * like); a Bloom filter's bytes to every ps, merged into each; then every shard told the restore
 * ended at checkpoint step `step` (its next eviction pass due as after one then). */
dt_status dt_ps_client_assign_keyed(dt_ps_client *c, uint32_t id, const int64_t *keys,
                                    const uint32_t *counts, const uint32_t *last, int64_t n,
                                    int dim, const float *rows, const float *const *slots,
                                    int n_slots);
dt_status dt_ps_client_assign_bloom(dt_ps_client *c, uint32_t id, const uint8_t *bytes,
                                    size_t n_bytes);
dt_status dt_ps_client_assign_keyed_end(dt_ps_client *c, uint32_t id, int64_t step);
/* All of it from a key map: t's live rows (t attached to km) with their slots, the keys km
 * counts, its filter, and the end at `step`. */
dt_status dt_ps_client_assign_keys(dt_ps_client *c, uint32_t id, const dt_keymap *km,
                                   const dt_table *t, int64_t step);
/* Reads dynamic table id's live rows (with their slots when slots) back from every ps, merged
 * into attached table i of km (dt_keymap_merge_rows, errors naming what): the caller empties
 * km first and ends the merge after its last table. */
dt_status dt_ps_client_read_keys(dt_ps_client *c, uint32_t id, dt_keymap *km, int i,
                                 bool slots, const char *what);
dt_status dt_ps_client_assign_dense(dt_ps_client *c, const dt_arena *params, const dt_optim *o);
/* Every ps task writes its shards of checkpoint step into dir (a directory they all reach), at
 * once; DT_OK when every one has. */
dt_status dt_ps_client_save(dt_ps_client *c, int64_t step, const char *dir);
/* A PING to every ps task, and their PONGs. */
dt_status dt_ps_client_ping(dt_ps_client *c);

/* Defines table id (rows x dim, n_shards shards placed as strategy says) on the ps tasks; again
 * (the same shape) after a ps was started again: a shard held already is left as it is. */
dt_status dt_ps_client_define(dt_ps_client *c, uint32_t id, const char *name, int64_t rows,
                              int dim, int64_t n_shards, dt_partition_strategy strategy,
                              const dt_rowopt_config *opt, float init_stddev, uint64_t seed);
/* The same for a dynamic table (strategy DT_PARTITION_HASH, rows DT_PARTITION_HASH_ROWS) with
 * its policy; policy NULL for a fixed one. */
dt_status dt_ps_client_define_ex(dt_ps_client *c, uint32_t id, const char *name, int64_t rows,
                                 int dim, int64_t n_shards, dt_partition_strategy strategy,
                                 const dt_rowopt_config *opt, float init_stddev, uint64_t seed,
                                 const dt_keymap_policy *policy);
/* Table id as the chief defined it, for a worker that did not define it. */
dt_status dt_ps_client_use_table(dt_ps_client *c, uint32_t id, int64_t rows, int dim,
                                 int64_t n_shards, dt_partition_strategy strategy);
/* rows (n x dim) = the table's rows of ids (any order, repeats allowed). */
dt_status dt_ps_client_pull(dt_ps_client *c, uint32_t id, const int64_t *ids, size_t n,
                            float *rows);
/* Applies one step's summed gradient rows (ids unique and increasing) at step and lr_scale. */
dt_status dt_ps_client_push(dt_ps_client *c, uint32_t id, const int64_t *ids, size_t n,
                            const float *rows, int64_t step, float lr_scale);
/* Places the dense variables (params' views; the layout's size is params->n_elems) round-robin
 * over the ps tasks, view i on ps i mod P as TensorFlow places variables, with their values
 * now and the dense optimizer that will update them. */
dt_status dt_ps_client_define_dense(dt_ps_client *c, const dt_arena *params,
                                    const dt_optim_config *opt);
/* Reads every dense variable into params (the layout's data); the padding is left alone. */
dt_status dt_ps_client_pull_dense(dt_ps_client *c, float *params);
/* Pushes every dense variable's gradient (grads laid out as the variables) for step. */
dt_status dt_ps_client_push_dense(dt_ps_client *c, const float *grads, int64_t step,
                                  float lr_scale);
/* The dense layout as the chief defined it, for a worker that did not: the same params. */
dt_status dt_ps_client_use_dense(dt_ps_client *c, const dt_arena *params);

/* A worker's step in one round each way, every shard of every ps at once: the rows of ids (n)
 * of every table t into rows[t] (n x dim, in the order of ids; rows[t] NULL: not pulled) and
 * the dense variables into dense (NULL: not pulled); then each table's gradient (grads[t], NULL
 * or empty: none) at table_scale times its rate, and the dense gradients (NULL: none), for
 * step. */
dt_status dt_ps_client_pull_step(dt_ps_client *c, const int64_t *ids, size_t n,
                                 float *const *rows, float *dense);
/* dt_ps_client_pull_step for a training step: the dynamic tables' keys go with times[i] (their
 * sightings in the batch) as PULL_KEYS at global step `step`, the others as PULL_ROWS. */
dt_status dt_ps_client_pull_keys_step(dt_ps_client *c, const int64_t *ids,
                                      const uint32_t *times, size_t n, int64_t step,
                                      float *const *rows, float *dense);
/* Each table's own ids for a training step: ids[t] (n[t]) into rows[t] (n[t] x dim); a dynamic
 * table's keys with times[t] (their sightings) as PULL_KEYS at `step`. times NULL: every table's
 * as PULL_ROWS. */
dt_status dt_ps_client_pull_tables_step(dt_ps_client *c, const int64_t *const *ids,
                                        const uint32_t *const *times, const size_t *n,
                                        int64_t step, float *const *rows, float *dense);
/* The same with each table's own ids: ids[t] (n[t]) into rows[t] (n[t] x dim). */
dt_status dt_ps_client_pull_tables(dt_ps_client *c, const int64_t *const *ids, const size_t *n,
                                   float *const *rows, float *dense);
dt_status dt_ps_client_push_step(dt_ps_client *c, const dt_sparse_rows *const *grads,
                                 const float *dense, int64_t step, float table_scale);

/* Bytes sent to and received from the ps tasks so far (messages, headers included). */
void dt_ps_client_traffic(const dt_ps_client *c, uint64_t *sent, uint64_t *received);

/* Tells every ps task to stop (the chief, or a sparse cluster's worker 0). */
dt_status dt_ps_client_stop(dt_ps_client *c);

/* A sparse cluster's global step, as ps 0 keeps it (stepboard.h). */
typedef struct {
    int64_t total;  /* after the request: a take's n steps are the last n of it */
    bool ready;     /* worker 0 has made the variables ready */
    int active;     /* other workers training */
} dt_ps_steps;
/* Of ps 0: n steps of the job's count (0: only how the job stands); the variables made ready
 * (worker 0, the count raised to floor, a restored checkpoint's step); this worker leaving. */
dt_status dt_ps_client_take_steps(dt_ps_client *c, uint32_t n, dt_ps_steps *out);
dt_status dt_ps_client_ready(dt_ps_client *c, int64_t floor, dt_ps_steps *out);
dt_status dt_ps_client_leave(dt_ps_client *c, dt_ps_steps *out);
/* n steps taken are given back: the data ended before they were trained. */
dt_status dt_ps_client_return_steps(dt_ps_client *c, uint32_t n, dt_ps_steps *out);

#endif
