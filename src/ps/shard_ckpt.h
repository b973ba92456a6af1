/* A ps task's part of a sharded checkpoint (internal to the library): its shards as one
 * safetensors file (checkpoint.h names it), which numpy and PyTorch read as they are.
 *
 * Tensors: per table shard s of table NAME, "NAME/part_s" (its rows, in the shard's order) and
 * each optimizer slot "SLOT/part_s" ("adagrad/accumulator/fm_v/part_1"); per dense variable v
 * held here, "dense/var_v" (its values) and "dense/var_v/slot_k" (the dense optimizer's slot k
 * over them). Metadata, beside "format" and "checksum": "format_ps" = "dtrain-ps-shard-1",
 * "global_step", "ps_task", "ps_tasks", and per tensor group a description:
 *   "NAME/part_s": "rows_total=R dim=D shards=S shard=s strategy=div|mod optimizer=adagrad
 *                   slots=adagrad/accumulator/fm_v"  (the row a shard's local row i is: div,
 *                   the s-th of TF's even split, from its first row; mod, s + i x S)
 *   "dense/var_v": "offset=O count=C total=T slots=K names=adam/m,adam/v" (slot k of the
 *                   parameters' view NAME is one_device's "adam/m/NAME")
 *   A dynamic table's shard (strategy=hash) holds its live keys' rows instead, in the order of
 *   "NAME/part_s/keys" (I64), with "NAME/part_s/counts" and "NAME/part_s/last_seen" (U32), the
 *   keys counted and not admitted ("NAME/part_s/counting_keys", "..._counts", "..._last_seen")
 *   and the counting Bloom filter ("NAME/part_s/bloom", U8), and its description adds the
 *   admission and eviction ("min_count=2 bloom_bits=0 ... max_rows=0").
 * The coordinator's manifest (the checkpoint's ckpt-<step>.safetensors) lists these files; the
 * readers (src/train/ps_ckpt.c) reassemble whole tables from them for any other placement. */
#ifndef DTRAIN_PS_SHARD_CKPT_H
#define DTRAIN_PS_SHARD_CKPT_H

#include <stdint.h>

#include "shard.h"

/* Writes s (held still by the caller, its dynamic tables settled: dt_ps_shard_settle) as ps
 * task ps_index of n_ps's file of checkpoint step, atomically, at path. */
dt_status dt_ps_shard_save_ckpt(dt_ps_shard *s, const char *path, int64_t step,
                                int ps_index, int n_ps);

#endif
