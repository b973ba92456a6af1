/* Checkpoints: safetensors files and TF's checkpoint manager.
 *
 * A checkpoint is a safetensors file: a u64 little-endian header length N, N bytes of JSON
 *   {"conv2d/kernel": {"dtype": "F32", "shape": [3, 3, 1, 32], "data_offsets": [0, 1152]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * padded with spaces to a multiple of 8, then the raw little-endian tensor data, tensors in
 * header order, back to back. numpy and PyTorch (safetensors) read it as it is. dtrain writes
 * every view of the arenas it is given (the parameters "conv2d/kernel", the optimizer's slots
 * "adam/m/conv2d/kernel"), padding excluded, and adds to the metadata "format" = "dtrain-ckpt-1"
 * and "checksum" = the CRC32C of the data section as 8 hex digits, which a reader verifies.
 *
 * Saves are atomic: the file is written beside its target under a temporary name, fsynced,
 * renamed over the target, and the directory fsynced; a crash at any moment leaves either the
 * old file or the new one, never a torn one under the final name.
 *
 * The manager keeps a directory as TF's CheckpointManager does: files ckpt-<global step>.safetensors
 * and a text state file "checkpoint":
 *   model_checkpoint_path: "ckpt-938.safetensors"
 *   all_model_checkpoint_paths: "ckpt-500.safetensors"     (oldest first, the latest last)
 *   all_model_checkpoint_paths: "ckpt-938.safetensors"
 *   all_model_checkpoint_timestamps: 1763800000.5           (one per path, unix seconds)
 *   all_model_checkpoint_timestamps: 1763800600.25
 *   last_preserved_timestamp: 1763790000.0
 * itself replaced atomically after each save. Beyond max_to_keep the oldest are deleted, except
 * that with keep_checkpoint_every_n_hours one checkpoint per that many hours is kept for good
 * (and then no longer listed), as TF does. */
#ifndef DTRAIN_CHECKPOINT_H
#define DTRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/api.h"
#include "dtrain/arena.h"
#include "dtrain/status.h"

/* Headers larger than this are refused as corrupt (no huge allocation from a bad length). */
#define DT_CKPT_MAX_HEADER_BYTES ((uint64_t)64 << 20)

typedef struct {
    const char *key, *value;
} dt_ckpt_meta;

/* Writes every view of arenas[0..n_arenas) and the metadata (keys must not be "format" or
 * "checksum", which it adds) to path atomically. Errors name the path and the failing call. */
DT_API dt_status dt_ckpt_save(const char *path, const dt_arena *const *arenas, int n_arenas,
                              const dt_ckpt_meta *meta, int n_meta);

/* A checkpoint read into memory and verified. */
typedef struct dt_ckpt dt_ckpt;

/* A tensor of a checkpoint, or one to write. */
typedef struct {
    const char *name;
    const char *dtype;    /* "F32" for the arenas; "I64", "U32", "U8"... for other tensors */
    int n_dims;
    int64_t dims[8];
    const void *data;     /* little-endian, n_bytes long (inside the checkpoint's buffer) */
    size_t n_bytes;
} dt_ckpt_tensor;

/* dt_ckpt_save with extra tensors of any dtype written after the arenas' views, their data
 * streamed from where it lies (a dynamic table's keys, rows and counts). */
DT_API dt_status dt_ckpt_save_ex(const char *path, const dt_arena *const *arenas, int n_arenas,
                                 const dt_ckpt_tensor *extra, int n_extra,
                                 const dt_ckpt_meta *meta, int n_meta);

/* Reads and checks path: the header length within the file and DT_CKPT_MAX_HEADER_BYTES, valid
 * JSON, known dtypes, shapes whose sizes match their offsets, offsets that tile the data section
 * exactly, and the checksum when the metadata has one. Every failure is DT_ERR_FORMAT (DT_ERR_IO
 * for a file that cannot be read) with a message naming the file and the field or byte offset. */
DT_API dt_status dt_ckpt_open(const char *path, dt_ckpt **out);
/* The same checks over the file mapped read-only and shared instead of read: the tensors' data
 * point into the mapping, so processes that map one checkpoint share one copy of it in the page
 * cache. The checksum pass reads every page once. dtrain replaces checkpoints by renaming a new
 * file over the old one, which leaves a mapping of the old file whole; a file truncated in place
 * under a mapping would fault (SIGBUS) when a tensor past its new end is read. */
DT_API dt_status dt_ckpt_map(const char *path, dt_ckpt **out);
/* dt_ckpt_map's checks but the checksum pass, which dt_ckpt_verify then runs: a reader that
 * overlaps the pass with other work, and trusts no tensor's values (writes nothing computed from
 * them) before dt_ckpt_verify returns DT_OK. */
DT_API dt_status dt_ckpt_map_unverified(const char *path, dt_ckpt **out);
/* The checksum pass of a checkpoint from dt_ckpt_map_unverified (DT_OK at once for one already
 * verified): DT_ERR_FORMAT naming the file on a mismatch. It reads the file, not the tensors, so
 * other threads may read the tensors meanwhile; call it once. */
DT_API dt_status dt_ckpt_verify(dt_ckpt *c);
DT_API void dt_ckpt_close(dt_ckpt *c);

DT_API const char *dt_ckpt_path(const dt_ckpt *c);
/* The metadata value for key, or NULL. */
DT_API const char *dt_ckpt_meta_get(const dt_ckpt *c, const char *key);
/* Every metadata pair, in header order: keys[i], values[i] for i < *n. */
DT_API int dt_ckpt_n_meta(const dt_ckpt *c);
DT_API void dt_ckpt_meta_at(const dt_ckpt *c, int i, const char **key, const char **value);
DT_API int dt_ckpt_n_tensors(const dt_ckpt *c);
DT_API const dt_ckpt_tensor *dt_ckpt_tensor_at(const dt_ckpt *c, int i);
/* The tensor with this name, or NULL. */
DT_API const dt_ckpt_tensor *dt_ckpt_find(const dt_ckpt *c, const char *name);

/* Copies into every view of a the tensor of the same name. A missing tensor, another dtype or
 * another shape is DT_ERR_INVALID naming the tensor, both shapes and the file; a fails whole or
 * is not touched. */
DT_API dt_status dt_ckpt_restore_arena(const dt_ckpt *c, dt_arena *a);

/* ---- The manager ---- */

typedef struct {
    char dir[4096];
    int max_to_keep;                     /* 0: keep every checkpoint */
    double keep_checkpoint_every_n_hours; /* 0: off */
    /* The state file's lists, oldest first. */
    int n_kept;
    int64_t *steps;
    double *timestamps;
    double last_preserved;
    FILE *log; /* warnings (may be NULL) */
} dt_ckpt_manager;

/* Opens dir (created when missing, with its parents), reading its state file when there is one.
 * A state file naming files that are gone is not an error: they are dropped from the lists. */
DT_API dt_status dt_ckpt_manager_open(dt_ckpt_manager *m, const char *dir, int max_to_keep,
                                      double keep_checkpoint_every_n_hours, FILE *log);
DT_API void dt_ckpt_manager_close(dt_ckpt_manager *m);

/* Saves ckpt-<step>.safetensors (replacing one of the same step), rewrites the state file, and
 * deletes what max_to_keep lets go. path_out (may be NULL) receives the file's path. */
DT_API dt_status dt_ckpt_manager_save(dt_ckpt_manager *m, int64_t step,
                                      const dt_arena *const *arenas, int n_arenas,
                                      const dt_ckpt_meta *meta, int n_meta, char *path_out,
                                      size_t path_cap);
/* The same with extra tensors (dt_ckpt_save_ex). */
DT_API dt_status dt_ckpt_manager_save_ex(dt_ckpt_manager *m, int64_t step,
                                         const dt_arena *const *arenas, int n_arenas,
                                         const dt_ckpt_tensor *extra, int n_extra,
                                         const dt_ckpt_meta *meta, int n_meta, char *path_out,
                                         size_t path_cap);

/* Opens the newest valid checkpoint of dir: the state file's latest, else (with a warning on log
 * naming the file and why) the next older one, and so on, then any ckpt-N.safetensors in dir by
 * decreasing N. DT_END when dir has none that opens (a missing dir included). */
DT_API dt_status dt_ckpt_open_latest(const char *dir, FILE *log, dt_ckpt **out);
/* The same, mapped as dt_ckpt_map does. */
DT_API dt_status dt_ckpt_map_latest(const char *dir, FILE *log, dt_ckpt **out);
/* The newest valid checkpoint of dir whose step is below before_step, as dt_ckpt_open_latest
 * finds it: where a restore goes when a newer checkpoint opened but turned out unusable (a
 * sharded one whose shard file is missing or damaged). */
DT_API dt_status dt_ckpt_open_latest_before(const char *dir, int64_t before_step, FILE *log,
                                            dt_ckpt **out);

/* A sharded checkpoint (parameter-server training): each ps task k of n writes its shards to
 * "ckpt-<step>.ps-<k>-of-<n>.safetensors" beside the manifest ckpt-<step>.safetensors, which
 * the coordinator writes once every shard file is in, so a checkpoint the state file names is
 * whole. The manager deletes the shard files with their manifest. */
DT_API void dt_ckpt_shard_name(char *out, size_t cap, int64_t step, int k, int n);

/* Opens the shard files a sharded checkpoint's manifest names (its "ps_shards" metadata), from
 * the manifest's directory: *files (n of them) go to dt_ckpt_close_shards. DT_END for a
 * checkpoint that is not sharded; a missing or damaged shard file is an error naming both. */
/* Whether c is a sharded checkpoint's manifest. */
DT_API bool dt_ckpt_is_sharded(const dt_ckpt *c);
DT_API dt_status dt_ckpt_open_shards(const dt_ckpt *manifest, dt_ckpt ***files, int *n);
DT_API void dt_ckpt_close_shards(dt_ckpt **files, int n);

/* The step in a name of the form ckpt-<step>.safetensors, or -1. */
DT_API int64_t dt_ckpt_step_of_name(const char *name);

#endif
