/* Datasets: tf.data-style input pipelines. A source and a chain of transformations, iterated
 * with dt_dataset_next; the training loop consumes the batches.
 *
 * Elements are dt_elem (rows.h): a record or an example (one row) or a batch (several). Each
 * transformation takes its input dataset (the new dataset owns it: destroying the outermost
 * destroys the chain) and follows TensorFlow's semantics:
 *   shard(n, i)      elements whose position mod n == i: range(10).shard(3, 0) = 0, 3, 6, 9
 *   shuffle(b, s, r) a buffer of b elements, a uniform pick whose slot takes the next input
 *                    element; reshuffled each iteration when r
 *   batch(b, drop)   b consecutive elements' rows in one element; a short last batch unless drop
 *   map(fn, k)       fn on each element, k at a time on threads, order kept
 *   cache(path)      the first complete iteration fills a cache (memory, or a file when path is
 *                    given); later iterations read it instead of the input
 *   repeat(c)        c iterations of the input, forever when c < 0
 *   prefetch(n)      up to n elements produced ahead on a background thread
 *   take(n), skip(n)
 * An iteration ends with DT_END; dt_dataset_reset starts the next one (an epoch). */
#ifndef DTRAIN_DATASET_H
#define DTRAIN_DATASET_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/pool.h"
#include "dtrain/rows.h"
#include "dtrain/status.h"

typedef struct dt_dataset dt_dataset;

/* The slots behind every dataset. */
typedef struct {
    const char *name;
    /* The next element (the caller owns it), DT_END after the last, or an error. */
    dt_status (*next)(dt_dataset *ds, dt_elem **out);
    /* Starts a new iteration from the beginning; the iteration count goes up by one. */
    dt_status (*reset)(dt_dataset *ds);
    /* Frees the state and the input datasets. */
    void (*destroy)(dt_dataset *ds);
} dt_dataset_ops;

struct dt_dataset {
    const dt_dataset_ops *ops;
    dt_dataset *input;  /* owned; NULL for a source */
    void *state;
    uint64_t iteration; /* iterations begun before the current one */
    bool started;       /* next() was called in this iteration: a reset before that is a no-op */
};

/* Wraps a new dataset around ops and state (taken: ops->destroy frees it) over input (taken, may
 * be NULL for a source): how sources and transformations, dtrain's and a user's, are made. On
 * failure the state and the input are freed. */
DT_API dt_status dt_dataset_create(const dt_dataset_ops *ops, dt_dataset *input, void *state,
                                   dt_dataset **out);

DT_API dt_status dt_dataset_next(dt_dataset *ds, dt_elem **out);
DT_API dt_status dt_dataset_reset(dt_dataset *ds);
DT_API void dt_dataset_destroy(dt_dataset *ds);

/* ---- Sources ---- */

/* Integers start, start + step, ... before stop, each one row whose label and one dense value
 * equal it (as floats) and whose one sparse entry has it as id (exact): tf.data.Dataset.range. */
DT_API dt_status dt_dataset_range(int64_t start, int64_t stop, int64_t step, dt_dataset **out);

/* The rows of an element array (borrowed, must outlive the dataset), each element once per
 * iteration: tf.data.Dataset.from_tensor_slices over data already in memory. */
DT_API dt_status dt_dataset_from_elems(dt_elem *const *elems, int64_t n, dt_dataset **out);

/* ---- Transformations: each takes `input` (even when it fails: then it destroys it) ---- */

DT_API dt_status dt_dataset_shard(dt_dataset *input, int64_t num_shards, int64_t index,
                                  dt_dataset **out);
DT_API dt_status dt_dataset_shuffle(dt_dataset *input, int64_t buffer_size, uint64_t seed,
                                    bool reshuffle_each_iteration, dt_dataset **out);
DT_API dt_status dt_dataset_batch(dt_dataset *input, int64_t batch_size, bool drop_remainder,
                                  dt_dataset **out);
/* true when ds is a batch transformation, with its parameters: for stages that fuse with it. */
DT_API bool dt_dataset_batch_params(const dt_dataset *ds, int64_t *batch_size, bool *drop_remainder)
    ;

/* fn turns *in (which it may free, or return as is) into *out, or drops it (DT_OK with *out left
 * NULL: tf.data's ignore_errors). It runs on pool threads when
 * num_parallel_calls > 1, so it must be thread-safe; ctx is shared. Errors propagate in order. */
typedef dt_status (*dt_map_fn)(void *ctx, dt_elem *in, dt_elem **out);
DT_API dt_status dt_dataset_map(dt_dataset *input, dt_map_fn fn, void *ctx, int num_parallel_calls,
                                dt_dataset **out);

/* path NULL: in memory. A cache file is dtrain's own format (magic, version, CRC32C per
 * element), written to path.tmp and renamed when the first iteration completes; an existing
 * valid cache file is read from the start. */
DT_API dt_status dt_dataset_cache(dt_dataset *input, const char *path, dt_dataset **out);
DT_API dt_status dt_dataset_repeat(dt_dataset *input, int64_t count, dt_dataset **out);
DT_API dt_status dt_dataset_prefetch(dt_dataset *input, int buffer_size, dt_dataset **out);

/* What a prefetch with a deadline watches: when no element has come for stall_secs (> 0), next()
 * fails with DT_ERR_IO naming the file *reading points at (where the sources note the file they
 * open, dt_source_options.reading), else source. A producer thread stuck in a read is not waited
 * for: destroying the dataset leaves the thread to free it once its read returns, so what the
 * input reads (its file list, the reading slot) must then stay alive. */
typedef struct {
    double stall_secs;        /* 0: wait for ever, as dt_dataset_prefetch */
    const char *const *reading; /* may be NULL */
    const char *source;       /* the input's name for messages (copied); may be NULL */
} dt_prefetch_watch;
DT_API dt_status dt_dataset_prefetch_watched(dt_dataset *input, int buffer_size,
                                             const dt_prefetch_watch *watch, dt_dataset **out);
DT_API dt_status dt_dataset_take(dt_dataset *input, int64_t count, dt_dataset **out);
DT_API dt_status dt_dataset_skip(dt_dataset *input, int64_t count, dt_dataset **out);

/* ---- Distributed input ---- */

typedef enum {
    DT_AUTOSHARD_OFF = 0, /* every worker reads everything */
    DT_AUTOSHARD_AUTO,    /* FILE when there are at least as many files as workers, else DATA */
    DT_AUTOSHARD_FILE,    /* whole files per worker */
    DT_AUTOSHARD_DATA,    /* every worker reads everything and keeps every n-th element */
} dt_autoshard_policy;

DT_API dt_status dt_autoshard_parse(const char *name, dt_autoshard_policy *out);

/* The policy that applies for n_files files and num_workers workers. Where TensorFlow raises an
 * error (FILE with fewer files than workers), dtrain falls back to DATA and says why in *reason
 * (a static string, "" when nothing changed). */
DT_API dt_autoshard_policy dt_autoshard_resolve(dt_autoshard_policy policy, int64_t n_files,
                                                int64_t num_workers, const char **reason);

/* tf.distribute.InputContext. */
typedef struct {
    int num_input_pipelines;   /* workers */
    int input_pipeline_id;     /* this worker */
    int num_replicas_in_sync;  /* replicas over all workers */
} dt_input_context;

/* global_batch / num_replicas_in_sync; an error naming both when it does not divide. */
DT_API dt_status dt_input_context_per_replica_batch(const dt_input_context *c, int64_t global_batch,
                                                    int64_t *out);

#endif
