/* Sharded checkpoints of parameter-server training (internal to src/train).
 *
 * A save: every ps task writes its shards at once (src/ps/shard_ckpt.h: one safetensors file
 * each), then the coordinator writes the manifest ckpt-<step>.safetensors through the checkpoint
 * manager: the dense variables as they stand, the metadata a restore needs (as a one_device
 * checkpoint's: model_spec, optimizer, global_step, ...), and "ps_shards", the shard files'
 * names, comma-separated. The state file names a checkpoint only once its manifest is in, and
 * the manifest comes after every shard file: a crash at any moment leaves the previous
 * checkpoint the latest, whole.
 *
 * A restore reassembles each table, and its optimizer slots, row by row from whichever shards
 * held them (whatever the number of ps tasks that wrote them and the partition strategy), and
 * the dense optimizer's slots from the ps files (dense variable v is the parameters' view v):
 * into one_device's model and optimizer (serving, fine-tuning), or into a coordinator that
 * places them on any number of ps tasks. */
#ifndef DTRAIN_TRAIN_PS_CKPT_H
#define DTRAIN_TRAIN_PS_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "../ps/client.h"
#include "dtrain/checkpoint.h"
#include "dtrain/fit.h"
#include "dtrain/model.h"
#include "dtrain/optim.h"

/* Saves checkpoint `step`: every ps task's shards into mgr's directory, then the manifest with
 * m's dense variables (the caller's current values) and cfg's, o's and m's metadata. n_ps: the
 * ps tasks. final marks the run's last. positions[w]: the batches of worker w's data shard
 * whose steps are in (metadata "ps_data_positions", comma-separated), where a job of as many
 * workers resumes reading. */
dt_status dt_ps_ckpt_save(dt_ckpt_manager *mgr, dt_ps_client *ps, int n_ps,
                          const dt_fit_config *cfg, dt_model *m, const dt_optim_config *o,
                          int64_t step, int workers, const int64_t *positions, bool final);

/* The data positions c names for `workers` workers (ps_data_positions): DT_OK with positions
 * filled, DT_END when c has none or has another number of workers' (the data then starts
 * over), DT_ERR_FORMAT naming the field when it is not a list of batch counts. */
dt_status dt_ps_ckpt_positions(const dt_ckpt *c, int workers, int64_t *positions);

/* From sharded checkpoint c: m's tables with their slots, and o's slots (o set up over m's
 * parameters with the optimizer c was written with; NULL: not restored). The dense values are
 * c's own tensors (dt_ckpt_restore_arena). Every shard file is checked as a checkpoint is;
 * errors name the file and the tensor. */
dt_status dt_ps_ckpt_restore(const dt_ckpt *c, dt_model *m, dt_optim *o);

/* Any checkpoint of this model (sharded, or one_device's) into m (its tables given slots of
 * o's table rule) and o (set up over m's parameters with the run's optimizer): what a
 * coordinator places on its ps tasks, however many. DT_ERR_INVALID naming the file when it was
 * written for another model or optimizer. *step: its global step. */
dt_status dt_ps_ckpt_load(const dt_ckpt *c, dt_model *m, dt_optim *o, int64_t *step);

/* One shard's part of a dynamic table in a sharded checkpoint, as read (its keys copied, the rest
 * in the file): its rows pass (rows set), or its admission pass (rows NULL). */
typedef struct {
    const char *what;          /* "file: tensor", for errors */
    int table;                 /* the model's table */
    const int64_t *keys;
    const uint32_t *counts, *last_seen;
    int64_t n;
    const float *rows;         /* n x dim, and each slot's */
    const float *slots[DT_TABLE_MAX_SLOTS];
    int n_slots, dim;
    const int64_t *counting_keys; /* keys counted, not admitted */
    const uint32_t *counting_counts, *counting_last_seen;
    int64_t n_counting;
    const uint8_t *bloom;
    size_t bloom_bytes;
} dt_ps_ckpt_part;

typedef dt_status (*dt_ps_part_fn)(void *arg, const dt_ps_ckpt_part *p);

/* Every part of m's dynamic tables in sharded checkpoint c's files, to fn: every part's rows
 * first, then every part's keys counted and filter. Each shard once, every one of them; errors
 * name the file and the tensor. */
dt_status dt_ps_ckpt_dynamic_parts(const dt_ckpt *c, dt_model *m, dt_ps_part_fn fn, void *arg);

#endif
