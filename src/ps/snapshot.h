/* A ps task's snapshot: every shard it holds, written whole now and then so that a ps that dies
 * and is started again serves what it held at the snapshot, not what the tables started from
 * (internal to the library).
 *
 * The file (little-endian): a header of 40 bytes, magic "DTPSSNAP" | u32 version (1) | u32
 * ps index | i64 latest step applied | i64 unix time of the snapshot | u32 messages that follow
 * | u32 CRC32C of the 36 bytes before; then psmsg messages (psmsg.h: each with its own CRCs):
 *   per table shard: TABLE (its definition), ACK (request id: the table, clock: its pushes
 *     applied), then ROWS messages of at most DT_PS_SNAPSHOT_CHUNK rows, in order, for its
 *     values (request id 0) and then each optimizer slot k (request id k + 1);
 *   per dense slice: VAR (its definition and values), ACK (its clock), then per slot k of the
 *     dense optimizer a DENSE message (request id k + 1) with the slot's values on the slice.
 * It is written beside its path and renamed over it (fileio.h), so a ps killed while it writes
 * leaves the previous snapshot. A load checks everything and names the file and byte of the
 * first thing amiss. */
#ifndef DTRAIN_PS_SNAPSHOT_H
#define DTRAIN_PS_SNAPSHOT_H

#include <stdint.h>

#include "shard.h"

#define DT_PS_SNAPSHOT_CHUNK 65536

typedef struct {
    int64_t last_step;   /* the latest step whose update the snapshot holds */
    int64_t unix_time;   /* when it was taken */
    int n_tables, n_slices;
} dt_ps_snapshot_info;

/* Writes s (held still by the caller) as ps task ps_index's snapshot at path. */
dt_status dt_ps_snapshot_save(const dt_ps_shard *s, int ps_index, const char *path);

/* Fills s, which holds nothing yet, from the snapshot at path of ps task ps_index; on failure
 * s is left holding nothing. DT_END when there is no file. */
dt_status dt_ps_snapshot_load(dt_ps_shard *s, int ps_index, const char *path,
                              dt_ps_snapshot_info *info);

#endif
