/* Arenas: one aligned float allocation carved into named views.
 *
 * A model's parameters, its gradients and its optimizer state each live in one arena, so that
 * all-reduce, broadcast, the optimizer step and checkpoints each run once over (data, n_elems)
 * instead of once per tensor. Views are laid out in the order they are added, each starting on a
 * 64-byte boundary; the padding between them stays zero in every arena that shares the layout,
 * so whole-arena updates (an optimizer step, a sum) leave it zero. */
#ifndef DTRAIN_ARENA_H
#define DTRAIN_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/status.h"

/* Room for an optimizer slot prefix ("adagrad/accumulator/") before a layer name (up to 47
 * bytes) and "/kernel". */
#define DT_VIEW_NAME_CAP 128
#define DT_VIEW_MAX_DIMS 4

typedef struct {
    char name[DT_VIEW_NAME_CAP]; /* e.g. "conv2d/kernel", "adam/m/dense/bias" */
    size_t offset;               /* in floats from the arena's start; a multiple of 16 */
    size_t n_elems;
    int n_dims;
    int dims[DT_VIEW_MAX_DIMS];
} dt_view;

typedef struct {
    float *data;     /* NULL until dt_arena_commit */
    size_t n_elems;  /* the whole arena, padding included */
    dt_view *views;
    int n_views;
    int views_cap;
} dt_arena;

DT_API void dt_arena_init(dt_arena *a);
DT_API void dt_arena_free(dt_arena *a);

/* Declares a view; dims has n_dims entries (1..4), each > 0. Its index is written to *index_out
 * when that is not NULL. Only before commit. */
DT_API dt_status dt_arena_add(dt_arena *a, const char *name, int n_dims, const int *dims,
                              int *index_out);

/* Allocates the zeroed, 64-byte aligned storage for every declared view. */
DT_API dt_status dt_arena_commit(dt_arena *a);

/* Declares in dst (empty, uncommitted) every view of src, each name prefixed by prefix (may be
 * ""), and commits it: the same layout, so offsets match view for view. */
DT_API dt_status dt_arena_mirror(dt_arena *dst, const dt_arena *src, const char *prefix);

static inline float *dt_arena_view_data(const dt_arena *a, int index)
{
    return a->data + a->views[index].offset;
}

/* The index of the view with this name, or -1. */
DT_API int dt_arena_find(const dt_arena *a, const char *name);

/* Number of elements in views, padding excluded. */
DT_API size_t dt_arena_payload_elems(const dt_arena *a);

/* CRC32C (Castagnoli) over the bytes of every view, in order, padding excluded: a fingerprint
 * for comparing parameters run to run. */
DT_API uint32_t dt_arena_checksum(const dt_arena *a);

#endif
