/* A ps task's snapshot: every shard it holds, written whole now and then so that a ps that dies
 * and is started again serves what it held at the snapshot, not what the tables started from
 * (internal to the library).
 *
 * A snapshot belongs to one job: its header names the job (dt_ps_job: the id and the nonce the
 * launcher gives every task of a job, the same for a task started again), and a ps task of
 * another job (a new job over the same directory, after one that died without removing its
 * snapshots) does not restore it.
 *
 * The file (little-endian): a header of 120 bytes, magic "DTPSSNAP" | u32 version (2) | u32
 * ps index | i64 latest step applied | i64 unix time of the snapshot | u32 messages that follow
 * | 64 bytes job id (NUL-padded) | 16 bytes job nonce | u32 CRC32C of the 116 bytes before;
 * then psmsg messages (psmsg.h), each followed by a u32 CRC32C of its bytes (a message's
 * payload carries no checksum of its own, its connections authenticate it):
 *   per table shard: TABLE (its definition), ACK (request id: the table, clock: its pushes
 *     applied), then ROWS messages of at most DT_PS_SNAPSHOT_CHUNK rows, in order, for its
 *     values (request id 0) and then each optimizer slot k (request id k + 1); a dynamic
 *     table's shard has instead KEYED messages (psmsg.h): its live rows with every slot, the
 *     keys it counts, its Bloom filter, ended by an empty KEYED;
 *   per dense slice: VAR (its definition and values), ACK (its clock), then per slot k of the
 *     dense optimizer a DENSE message (request id k + 1) with the slot's values on the slice.
 * It is written beside its path and renamed over it (fileio.h), so a ps killed while it writes
 * leaves the previous snapshot. A load checks everything and names the file and byte of the
 * first thing amiss. */
#ifndef DTRAIN_PS_SNAPSHOT_H
#define DTRAIN_PS_SNAPSHOT_H

#include <stdbool.h>
#include <stdint.h>

#include "shard.h"

#define DT_PS_SNAPSHOT_CHUNK 65536

#define DT_PS_JOB_ID_CAP 64
#define DT_PS_JOB_NONCE_BYTES 16

/* Which job a snapshot belongs to. */
typedef struct {
    char id[DT_PS_JOB_ID_CAP + 1];          /* NUL-terminated */
    uint8_t nonce[DT_PS_JOB_NONCE_BYTES];
} dt_ps_job;

typedef struct {
    int64_t last_step;   /* the latest step whose update the snapshot holds */
    int64_t unix_time;   /* when it was taken */
    int n_tables, n_slices;
    int64_t dynamic_keys; /* the dynamic tables' live keys, summed */
    bool other_job;      /* the load failed because the file is another job's (or was written
                            before snapshots named their job): not this job's state, not damage */
} dt_ps_snapshot_info;

/* Writes s (held still by the caller) as job's ps task ps_index's snapshot at path. */
dt_status dt_ps_snapshot_save(const dt_ps_shard *s, int ps_index, const dt_ps_job *job,
                              const char *path);

/* Fills s, which holds nothing yet, from the snapshot at path of job's ps task ps_index; on
 * failure s is left holding nothing. DT_END when there is no file; DT_ERR_INVALID with
 * info->other_job when the file is another job's, naming both jobs. */
dt_status dt_ps_snapshot_load(dt_ps_shard *s, int ps_index, const dt_ps_job *job,
                              const char *path, dt_ps_snapshot_info *info);

/* job->nonce as 32 lowercase hex digits into out (33 bytes). */
void dt_ps_job_nonce_hex(const dt_ps_job *job, char out[2 * DT_PS_JOB_NONCE_BYTES + 1]);

#endif
