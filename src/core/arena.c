/* Arenas: one aligned float allocation carved into named views (see include/dtrain/arena.h). */
#include "dtrain/arena.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"

/* 16 floats = 64 bytes: every view starts on a cache line, and AVX-512 loads are aligned. */
#define DT_VIEW_ALIGN_ELEMS 16

void dt_arena_init(dt_arena *a) { memset(a, 0, sizeof *a); }

void dt_arena_free(dt_arena *a)
{
    if (!a)
        return;
    free(a->data);
    free(a->views);
    dt_arena_init(a);
}

dt_status dt_arena_add(dt_arena *a, const char *name, int n_dims, const int *dims, int *index_out)
{
    if (a->data)
        return dt_error(DT_ERR_INVALID, "arena: view '%s' added after commit", name);
    if (n_dims < 1 || n_dims > DT_VIEW_MAX_DIMS)
        return dt_error(DT_ERR_INVALID, "arena: view '%s' has %d dimensions (1..%d allowed)", name,
                        n_dims, DT_VIEW_MAX_DIMS);
    if (strlen(name) >= DT_VIEW_NAME_CAP)
        return dt_error(DT_ERR_INVALID, "arena: view name '%s' is longer than %d bytes", name,
                        DT_VIEW_NAME_CAP - 1);
    size_t n_elems = 1;
    for (int i = 0; i < n_dims; i++) {
        if (dims[i] <= 0)
            return dt_error(DT_ERR_INVALID, "arena: view '%s' dimension %d is %d", name, i, dims[i]);
        if (n_elems > ((size_t)1 << 40) / (size_t)dims[i])
            return dt_error(DT_ERR_INVALID, "arena: view '%s' is too large", name);
        n_elems *= (size_t)dims[i];
    }
    if (a->n_views == a->views_cap) {
        int cap = a->views_cap ? a->views_cap * 2 : 16;
        dt_view *grown = realloc(a->views, (size_t)cap * sizeof *grown);
        if (!grown)
            return dt_error(DT_ERR_NOMEM, "arena: no memory for view '%s'", name);
        a->views = grown;
        a->views_cap = cap;
    }
    dt_view *v = &a->views[a->n_views];
    memset(v, 0, sizeof *v);
    strcpy(v->name, name);
    v->offset = a->n_elems;
    v->n_elems = n_elems;
    v->n_dims = n_dims;
    memcpy(v->dims, dims, (size_t)n_dims * sizeof *dims);
    a->n_elems += (n_elems + DT_VIEW_ALIGN_ELEMS - 1) / DT_VIEW_ALIGN_ELEMS * DT_VIEW_ALIGN_ELEMS;
    if (index_out)
        *index_out = a->n_views;
    a->n_views++;
    return DT_OK;
}

dt_status dt_arena_commit(dt_arena *a)
{
    size_t n_bytes = (a->n_elems ? a->n_elems : DT_VIEW_ALIGN_ELEMS) * sizeof(float);
    float *data = aligned_alloc(64, n_bytes);
    if (!data)
        return dt_error(DT_ERR_NOMEM, "arena: cannot allocate %zu bytes", n_bytes);
    memset(data, 0, n_bytes);
    a->data = data;
    return DT_OK;
}

dt_status dt_arena_mirror(dt_arena *dst, const dt_arena *src, const char *prefix)
{
    char name[DT_VIEW_NAME_CAP + 64];
    for (int i = 0; i < src->n_views; i++) {
        const dt_view *v = &src->views[i];
        snprintf(name, sizeof name, "%s%s", prefix, v->name);
        dt_status st = dt_arena_add(dst, name, v->n_dims, v->dims, NULL);
        if (st)
            return st;
    }
    return dt_arena_commit(dst);
}

int dt_arena_find(const dt_arena *a, const char *name)
{
    for (int i = 0; i < a->n_views; i++)
        if (strcmp(a->views[i].name, name) == 0)
            return i;
    return -1;
}

size_t dt_arena_payload_elems(const dt_arena *a)
{
    size_t n = 0;
    for (int i = 0; i < a->n_views; i++)
        n += a->views[i].n_elems;
    return n;
}

uint32_t dt_arena_checksum(const dt_arena *a)
{
    uint32_t crc = 0;
    for (int i = 0; i < a->n_views; i++)
        crc = dt_crc32c_extend(crc, dt_arena_view_data(a, i), a->views[i].n_elems * sizeof(float));
    return crc;
}
