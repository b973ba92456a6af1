/* A ps task's part of a sharded checkpoint (see shard_ckpt.h). */
#include "shard_ckpt.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/checkpoint.h"

/* A tensor group's description: a table's fixed fields (at most about 160 bytes) and its slots'
 * names, each up to a view name's length; a description that still does not fit is refused, not
 * cut (a cut one would not be read back). */
enum { DESC_CAP = 256 + DT_TABLE_MAX_SLOTS * DT_VIEW_NAME_CAP };

/* Appends to desc (holding *n bytes) as snprintf would; false when the text does not fit. */
static bool append(char *desc, size_t cap, int *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool append(char *desc, size_t cap, int *n, const char *fmt, ...)
{
    if (*n < 0 || (size_t)*n >= cap)
        return false;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(desc + *n, cap - (size_t)*n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= cap - (size_t)*n)
        return false;
    *n += k;
    return true;
}

/* One tensor: an arena of one view over storage it does not own; a dynamic table's tensors
 * (any dtype) in extra, named in extra_names. */
typedef struct {
    dt_arena *arenas;
    const dt_arena **list;
    dt_ckpt_meta *meta;
    char (*keys)[DT_VIEW_NAME_CAP + 32], (*values)[DESC_CAP];
    int n, n_meta, cap;
    dt_ckpt_tensor *extra;
    char (*extra_names)[DT_VIEW_NAME_CAP + 48];
    int n_extra;
} tensors;

static dt_status add_tensor(tensors *t, const char *name, int n_dims, const int *dims,
                            const float *data)
{
    dt_arena *a = &t->arenas[t->n];
    dt_arena_init(a);
    dt_status st = dt_arena_add(a, name, n_dims, dims, NULL);
    if (st)
        return st;
    a->data = (float *)data; /* borrowed: released without freeing it */
    t->list[t->n++] = a;
    return DT_OK;
}

static void add_meta(tensors *t, const char *key, const char *value)
{
    snprintf(t->keys[t->n_meta], sizeof t->keys[0], "%s", key);
    snprintf(t->values[t->n_meta], sizeof t->values[0], "%s", value);
    t->meta[t->n_meta] = (dt_ckpt_meta){t->keys[t->n_meta], t->values[t->n_meta]};
    t->n_meta++;
}

/* A dynamic table's shard, settled (dt_ps_shard_settle): the key map's tensors (keymap.h) of
 * its live rows in row order, each renamed into the shard's part: "NAME/part_s" (rows),
 * "SLOT/part_s", "NAME/part_s/keys", ".../counts", ".../last_seen", ".../counting_keys",
 * ".../counting_counts", ".../counting_last_seen", ".../bloom". */
static dt_status add_dynamic(tensors *t, const dt_ps_table_shard *ts, char *desc, int *n)
{
    dt_ckpt_tensor got[DT_KEYMAP_TENSORS];
    int k = 0;
    dt_status st = dt_keymap_tensors(ts->keys, 0, true, got, &k);
    size_t len = strlen(ts->t.name);
    for (int j = 0; j < k && st == DT_OK; j++) {
        char *name = t->extra_names[t->n_extra];
        const char *g = got[j].name;
        if (strncmp(g, ts->t.name, len) == 0 && g[len] == '/')
            snprintf(name, sizeof t->extra_names[0], "%s/part_%lld/%s", ts->t.name,
                     (long long)ts->shard, g + len + 1);
        else /* the rows ("NAME") or a slot ("adagrad/accumulator/NAME") */
            snprintf(name, sizeof t->extra_names[0], "%s/part_%lld", g, (long long)ts->shard);
        t->extra[t->n_extra] = got[j];
        t->extra[t->n_extra++].name = name;
    }
    const dt_keymap_policy *p = &ts->policy;
    bool fits = append(desc, DESC_CAP, n, " min_count=%lld bloom_bits=%lld bloom_hashes=%d "
                       "steps_to_live=%lld l2_below=%.9g max_rows=%lld",
                       (long long)p->min_count, (long long)p->bloom_bits, p->bloom_hashes,
                       (long long)p->steps_to_live, (double)p->l2_below, (long long)p->max_rows);
    if (st == DT_OK && !fits)
        return dt_error(DT_ERR_INVALID, "table %s: its shard's description is longer than %d "
                        "bytes", ts->t.name, DESC_CAP - 1);
    return st;
}

static dt_status add_table(tensors *t, const dt_ps_table_shard *ts)
{
    char name[DT_VIEW_NAME_CAP + 32], desc[DESC_CAP];
    int dims[2] = {(int)ts->t.rows, ts->t.dim};
    if (!ts->keys && ts->t.rows > 2147483647)
        return dt_error(DT_ERR_UNSUPPORTED, "table %s: a shard of %lld rows, more than a "
                        "checkpoint tensor holds", ts->t.name, (long long)ts->t.rows);
    snprintf(name, sizeof name, "%s/part_%lld", ts->t.name, (long long)ts->shard);
    dt_status st = ts->keys ? DT_OK : add_tensor(t, name, 2, dims, ts->t.data);
    int n = 0;
    bool fits = append(desc, sizeof desc, &n, "rows_total=%lld dim=%d shards=%lld shard=%lld "
                       "strategy=%s optimizer=%s slots=", (long long)ts->rows_total, ts->t.dim,
                       (long long)ts->n_shards, (long long)ts->shard,
                       ts->keys ? "hash" : ts->strategy == DT_PARTITION_MOD ? "mod" : "div",
                       dt_rowopt_kind_name(ts->opt.kind));
    for (int k = 0; k < ts->t.n_slots && st == DT_OK; k++) {
        char slot[DT_VIEW_NAME_CAP + 32];
        snprintf(slot, sizeof slot, "%s/part_%lld", ts->t.slot_names[k], (long long)ts->shard);
        if (!ts->keys)
            st = add_tensor(t, slot, 2, dims, ts->t.slots[k]);
        fits = fits && append(desc, sizeof desc, &n, "%s%s", k ? "," : "", ts->t.slot_names[k]);
    }
    if (st == DT_OK && fits && ts->keys)
        st = add_dynamic(t, ts, desc, &n);
    if (st == DT_OK && !fits)
        return dt_error(DT_ERR_INVALID, "table %s: its shard's description (its slots' names) "
                        "is longer than %d bytes", ts->t.name, (int)sizeof desc - 1);
    add_meta(t, name, desc);
    return st;
}

static dt_status add_slice(tensors *t, const dt_ps_shard *s, const dt_ps_dense_slice *v)
{
    char name[DT_VIEW_NAME_CAP + 32], desc[DESC_CAP];
    int dims[1] = {(int)v->count};
    int n_slots = s->dense_opt.n_slots;
    snprintf(name, sizeof name, "dense/var_%u", v->id);
    dt_status st = add_tensor(t, name, 1, dims, s->dense + v->offset);
    size_t stride = n_slots ? s->dense_opt.state.n_elems / (size_t)n_slots : 0;
    for (int k = 0; k < n_slots && st == DT_OK; k++) {
        char slot[DT_VIEW_NAME_CAP + 48];
        snprintf(slot, sizeof slot, "dense/var_%u/slot_%d", v->id, k);
        st = add_tensor(t, slot, 1, dims,
                        s->dense_opt.state.data + (size_t)k * stride + v->offset);
    }
    /* The slots' names as the optimizer gives them over the layout ("adam/m/dense"), less the
     * layout's: a reader names slot k of view NAME "adam/m/NAME", as one_device does. */
    int n = 0;
    bool fits = append(desc, sizeof desc, &n, "offset=%llu count=%llu total=%llu slots=%d names=",
                       (unsigned long long)v->offset, (unsigned long long)v->count,
                       (unsigned long long)s->dense_total, n_slots);
    for (int k = 0; k < n_slots && k < s->dense_opt.state.n_views; k++) {
        const char *name_k = s->dense_opt.state.views[k].name;
        const char *cut = strrchr(name_k, '/');
        fits = fits && append(desc, sizeof desc, &n, "%s%.*s", k ? "," : "",
                              cut ? (int)(cut - name_k) : (int)strlen(name_k), name_k);
    }
    if (st == DT_OK && !fits)
        return dt_error(DT_ERR_INVALID, "dense variable %u: its description (its slots' names) "
                        "is longer than %d bytes", v->id, (int)sizeof desc - 1);
    add_meta(t, name, desc);
    return st;
}

dt_status dt_ps_shard_save_ckpt(dt_ps_shard *s, const char *path, int64_t step,
                                int ps_index, int n_ps)
{
    int cap = 0;
    for (int i = 0; i < s->n_tables; i++)
        cap += 1 + s->tables[i].t.n_slots;
    cap += s->n_slices * (1 + s->dense_opt.n_slots);
    int meta_cap = s->n_tables + s->n_slices + 4;
    tensors t = {.cap = cap};
    t.arenas = calloc((size_t)cap + 1, sizeof *t.arenas);
    t.list = calloc((size_t)cap + 1, sizeof *t.list);
    t.meta = calloc((size_t)meta_cap, sizeof *t.meta);
    t.keys = calloc((size_t)meta_cap, sizeof *t.keys);
    t.values = calloc((size_t)meta_cap, sizeof *t.values);
    t.extra = calloc((size_t)s->n_tables * DT_KEYMAP_TENSORS + 1, sizeof *t.extra);
    t.extra_names = calloc((size_t)s->n_tables * DT_KEYMAP_TENSORS + 1, sizeof *t.extra_names);
    dt_status st = t.arenas && t.list && t.meta && t.keys && t.values && t.extra && t.extra_names
                       ? DT_OK
                       : dt_error(DT_ERR_NOMEM, "no memory for a checkpoint of %d tensors", cap);
    if (st == DT_OK) {
        char v[32];
        add_meta(&t, "format_ps", "dtrain-ps-shard-1");
        snprintf(v, sizeof v, "%lld", (long long)step), add_meta(&t, "global_step", v);
        snprintf(v, sizeof v, "%d", ps_index), add_meta(&t, "ps_task", v);
        snprintf(v, sizeof v, "%d", n_ps), add_meta(&t, "ps_tasks", v);
    }
    for (int i = 0; i < s->n_tables && st == DT_OK; i++)
        st = add_table(&t, &s->tables[i]);
    for (int i = 0; i < s->n_slices && st == DT_OK; i++)
        st = add_slice(&t, s, &s->slices[i]);
    if (st == DT_OK)
        st = dt_ckpt_save_ex(path, t.list, t.n, t.extra, t.n_extra, t.meta, t.n_meta);
    for (int i = 0; i < t.n; i++) {
        t.arenas[i].data = NULL; /* borrowed */
        dt_arena_free(&t.arenas[i]);
    }
    free(t.arenas), free(t.list), free(t.meta), free(t.keys), free(t.values);
    free(t.extra), free(t.extra_names);
    return st;
}
