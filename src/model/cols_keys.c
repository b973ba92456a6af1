/* The dynamic tables of a columns model (see cols_keys.h). */
#include "cols_keys.h"

#include <stdlib.h>
#include <string.h>

#include "../core/grow.h"
#include "../nn/embedding.h"

/* A parameter-server worker's dynamic tables hold one batch's keys: room for this many. */
#define LOCAL_ROWS ((int64_t)1 << 26)

typedef struct {
    dt_keymap *map;
    bool borrowed;
    int n_tables;
    int tables[DT_KEYMAP_MAX_TABLES]; /* spec's index of each attached table, in attach order */
    int64_t *keys, *rows;   /* the batch's keys of the map's slots, in entry order, and rows */
    size_t n, cap, next;
    int64_t *uniq;          /* local: the batch's distinct keys, increasing (row j's is uniq[j]) */
    uint32_t *slot;         /* local: each key's index in uniq */
    void *scratch;          /* local: dt_embedding_dedupe's */
    size_t uniq_cap;
} key_group;

struct dt_col_keys {
    const dt_columns_spec *spec;
    bool local;
    int n_groups;
    key_group *groups;
    int *table_group;       /* (n_tables): each table's group, -1 fixed */
    int *slot_group;        /* (n_slots): the group of each slot's keys, -1 fixed */
    dt_elem view;
    int64_t *view_row, *view_ids;
    float *view_vals;
    size_t view_cap;
    int view_rows;
};

/* The tables an input reads through its slot's ids. */
static bool reads_slot(const dt_column_input *in)
{
    return in->kind == DT_INPUT_EMBEDDING || in->kind == DT_INPUT_WEIGHTS;
}

/* Joins the groups of tables a and b: b's tables move to a's number. */
static void join(int *group, int n, int a, int b)
{
    int ga = group[a], gb = group[b];
    for (int t = 0; t < n && ga != gb; t++)
        if (group[t] == gb)
            group[t] = ga;
}

/* Each dynamic table's group (the lowest table of those read through a common slot), -1 for a
 * fixed one; each slot's, from its readers. */
static void group_tables(const dt_columns_spec *s, int *group, int *slot_group)
{
    for (int t = 0; t < s->n_tables; t++)
        group[t] = s->tables[t].dynamic ? t : -1;
    for (int slot = 0; slot < s->n_slots; slot++)
        slot_group[slot] = -1;
    const dt_column_input *lists[2] = {s->deep, s->linear};
    int counts[2] = {s->n_deep, s->n_linear};
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < counts[l]; i++) {
            const dt_column_input *in = &lists[l][i];
            if (!reads_slot(in) || group[in->table] < 0 || in->slot < 0 || in->slot >= s->n_slots)
                continue;
            int *sg = &slot_group[in->slot];
            if (*sg < 0)
                *sg = in->table;
            else
                join(group, s->n_tables, *sg, in->table);
        }
    for (int slot = 0; slot < s->n_slots; slot++)
        if (slot_group[slot] >= 0)
            slot_group[slot] = group[slot_group[slot]];
}

/* Numbers the groups 0..n-1 in table order; returns n. */
static int number_groups(int *group, int *slot_group, int n_tables, int n_slots)
{
    int n = 0;
    for (int t = 0; t < n_tables; t++) {
        if (group[t] != t)
            continue;
        for (int u = 0; u < n_tables; u++)
            if (group[u] == t)
                group[u] = -2 - n;
        for (int s = 0; s < n_slots; s++)
            if (slot_group[s] == t)
                slot_group[s] = -2 - n;
        n++;
    }
    for (int t = 0; t < n_tables; t++)
        group[t] = group[t] <= -2 ? -2 - group[t] : -1;
    for (int s = 0; s < n_slots; s++)
        slot_group[s] = slot_group[s] <= -2 ? -2 - slot_group[s] : -1;
    return n;
}

/* Group g's map over its tables, sized for their rows (shards maps of max_rows each); the
 * tables' rows set to its capacity. */
static dt_status create_group(dt_col_keys *k, dt_columns_spec *spec, int g, int shards)
{
    key_group *kg = &k->groups[g];
    const dt_column_table *first = NULL;
    size_t row_bytes = 0;
    for (int t = 0; t < spec->n_tables; t++) {
        if (k->table_group[t] != g)
            continue;
        const dt_column_table *tab = &spec->tables[t];
        if (!first)
            first = tab;
        else if (!dt_keymap_policy_equal(&first->policy, &tab->policy))
            return dt_error(DT_ERR_INVALID, "tables %s and %s read the same keys under different "
                            "admission or eviction", first->name, tab->name);
        if (kg->n_tables == DT_KEYMAP_MAX_TABLES)
            return dt_error(DT_ERR_INVALID, "table %s: more than %d dynamic tables read the same "
                            "keys (those of %s)", tab->name, DT_KEYMAP_MAX_TABLES, first->name);
        kg->tables[kg->n_tables++] = t;
        row_bytes += (size_t)tab->dim * sizeof(float);
    }
    /* A row's values in every table, its slots not counted: the capacity is address space, and
     * the map's memory check, which counts them, stops the tables first. */
    dt_keymap_policy room = first->policy;
    if (room.max_rows > 0 && shards > 1)
        room.max_rows = room.max_rows * shards + shards - 1;
    int64_t rows = k->local ? LOCAL_ROWS : dt_keymap_capacity(&room, row_bytes);
    for (int i = 0; i < kg->n_tables; i++)
        spec->tables[kg->tables[i]].rows = rows;
    return k->local ? DT_OK : dt_keymap_create(first->name, &first->policy, rows, &kg->map);
}

dt_status dt_col_keys_create(dt_columns_spec *spec, int shards, bool local, dt_col_keys **out)
{
    *out = NULL;
    bool any = false;
    for (int t = 0; t < spec->n_tables; t++)
        any = any || spec->tables[t].dynamic;
    if (!any)
        return DT_OK;
    dt_col_keys *k = calloc(1, sizeof *k);
    if (!k)
        return dt_error(DT_ERR_NOMEM, "no memory for dynamic tables");
    k->spec = spec;
    k->local = local;
    k->table_group = malloc((size_t)spec->n_tables * sizeof *k->table_group);
    k->slot_group = malloc(((size_t)spec->n_slots + 1) * sizeof *k->slot_group);
    dt_status st = DT_OK;
    if (!k->table_group || !k->slot_group) {
        st = dt_error(DT_ERR_NOMEM, "no memory for dynamic tables");
        goto fail;
    }
    group_tables(spec, k->table_group, k->slot_group);
    k->n_groups = number_groups(k->table_group, k->slot_group, spec->n_tables, spec->n_slots);
    if (!(k->groups = calloc((size_t)k->n_groups, sizeof *k->groups))) {
        st = dt_error(DT_ERR_NOMEM, "no memory for dynamic tables");
        goto fail;
    }
    for (int g = 0; g < k->n_groups && st == DT_OK; g++)
        st = create_group(k, spec, g, shards);
    if (st)
        goto fail;
    *out = k;
    return DT_OK;
fail:
    dt_col_keys_destroy(k);
    return st;
}

void dt_col_keys_destroy(dt_col_keys *k)
{
    if (!k)
        return;
    for (int g = 0; k->groups && g < k->n_groups; g++) {
        if (!k->groups[g].borrowed)
            dt_keymap_destroy(k->groups[g].map);
        free(k->groups[g].keys), free(k->groups[g].rows);
        free(k->groups[g].uniq), free(k->groups[g].slot), free(k->groups[g].scratch);
    }
    free(k->groups), free(k->table_group), free(k->slot_group);
    free(k->view_row), free(k->view_ids), free(k->view_vals);
    free(k);
}

dt_status dt_col_keys_attach(dt_col_keys *k, dt_table *tables)
{
    for (int g = 0; g < k->n_groups && !k->local; g++) {
        key_group *kg = &k->groups[g];
        for (int i = 0; i < kg->n_tables; i++) {
            int t = kg->tables[i];
            dt_status st = dt_keymap_attach(kg->map, &tables[t], k->spec->tables[t].init_stddev, 0);
            if (st)
                return st;
        }
    }
    return DT_OK;
}

void dt_col_keys_set_seed(dt_col_keys *k, int t, uint64_t seed)
{
    int g = k->table_group[t];
    if (g < 0 || k->local)
        return;
    const key_group *kg = &k->groups[g];
    for (int i = 0; i < kg->n_tables; i++)
        if (kg->tables[i] == t)
            dt_keymap_set_seed(kg->map, i, seed);
}

bool dt_col_keys_dynamic(const dt_col_keys *k, int t) { return k && k->table_group[t] >= 0; }

dt_keymap *dt_col_keys_map(const dt_col_keys *k, int t)
{
    return k && k->table_group[t] >= 0 ? k->groups[k->table_group[t]].map : NULL;
}

const int64_t *dt_col_keys_local(const dt_col_keys *k, int t)
{
    return k && k->local && k->table_group[t] >= 0 ? k->groups[k->table_group[t]].uniq : NULL;
}

void dt_col_keys_share(dt_col_keys *k, const dt_col_keys *owner)
{
    for (int g = 0; g < k->n_groups && g < owner->n_groups; g++) {
        key_group *kg = &k->groups[g];
        if (kg->map == owner->groups[g].map)
            continue;
        if (!kg->borrowed)
            dt_keymap_destroy(kg->map);
        kg->map = owner->groups[g].map;
        kg->borrowed = true;
    }
}

static dt_status grow_view(dt_col_keys *k, size_t entries, int rows)
{
    if (entries > k->view_cap) {
        size_t cap = entries + entries / 2;
        if (!dt_grow_together((dt_grow_item[]){{&k->view_ids, sizeof *k->view_ids},
                                               {&k->view_vals, sizeof *k->view_vals}}, 2, cap))
            return dt_error(DT_ERR_NOMEM, "no memory for a batch of %zu keys", entries);
        k->view_cap = cap;
    }
    if (rows > k->view_rows) {
        int64_t *r = realloc(k->view_row, ((size_t)rows + 1) * sizeof *r);
        if (!r)
            return dt_error(DT_ERR_NOMEM, "no memory for a batch of %d rows", rows);
        k->view_row = r;
        k->view_rows = rows;
    }
    return DT_OK;
}

/* Local: the group's keys numbered by their place among its distinct keys. */
static dt_status number_locally(key_group *kg)
{
    if (kg->n > kg->uniq_cap) {
        free(kg->uniq), free(kg->slot), free(kg->scratch);
        kg->uniq = malloc(kg->n * sizeof *kg->uniq);
        kg->slot = malloc(kg->n * sizeof *kg->slot);
        kg->scratch = malloc(dt_embedding_scratch_bytes(kg->n));
        kg->uniq_cap = kg->uniq && kg->slot && kg->scratch ? kg->n : 0;
        if (!kg->uniq_cap)
            return dt_error(DT_ERR_NOMEM, "no memory for a batch of %zu keys", kg->n);
    }
    size_t u = kg->n ? dt_embedding_dedupe(kg->keys, kg->n, kg->scratch, kg->uniq, kg->slot) : 0;
    if ((int64_t)u > LOCAL_ROWS)
        return dt_error(DT_ERR_INVALID, "a batch of %zu distinct keys, more than a worker's "
                        "%lld rows: use a smaller batch", u, (long long)LOCAL_ROWS);
    for (size_t j = 0; j < kg->n; j++)
        kg->rows[j] = kg->slot[j];
    return DT_OK;
}

static dt_status push_key(key_group *kg, int64_t key)
{
    if (kg->n == kg->cap) {
        size_t cap = kg->cap ? 2 * kg->cap : 1024;
        if (!dt_grow_together((dt_grow_item[]){{&kg->keys, sizeof *kg->keys},
                                               {&kg->rows, sizeof *kg->rows}}, 2, cap))
            return dt_error(DT_ERR_NOMEM, "no memory for a batch of %zu keys", cap);
        kg->cap = cap;
    }
    kg->keys[kg->n++] = key;
    return DT_OK;
}

/* Row b's entries into the view from *at: a fixed slot's as they are, a dynamic slot's pairs as
 * one entry each, their keys listed with their group. */
static dt_status view_row(dt_col_keys *k, const dt_elem *e, int b, size_t *at)
{
    int S = k->spec->n_slots;
    for (int64_t j = e->sp_row[b]; j < e->sp_row[b + 1]; j++, (*at)++) {
        int64_t id = e->sp_ids[j];
        int slot = dt_feature_entry_slot(id);
        int g = slot >= 0 && slot < S ? k->slot_group[slot] : -1;
        k->view_vals[*at] = e->sp_vals[j];
        if (g < 0) {
            k->view_ids[*at] = id;
            continue;
        }
        int64_t key = j + 1 < e->sp_row[b + 1] && dt_feature_entry_slot(e->sp_ids[j + 1]) == slot
                          ? dt_feature_entry_key(id, e->sp_ids[j + 1])
                          : -1;
        if (key < 0)
            return dt_error(DT_ERR_INVALID, "example %d: slot %d: entry %lld is not the first "
                            "half of a dynamic column's key (two entries, 31 and 32 bits)", b,
                            slot, (long long)(j - e->sp_row[b]));
        dt_status st = push_key(&k->groups[g], key);
        if (st)
            return st;
        k->view_ids[*at] = dt_feature_entry(slot, 0);
        j++;
    }
    return DT_OK;
}

dt_status dt_col_keys_view(dt_col_keys *k, const dt_elem *e, bool training, int64_t step,
                           const dt_elem **out)
{
    size_t nnz = (size_t)(e->sp_row[e->n] - e->sp_row[0]);
    dt_status st = grow_view(k, nnz ? nnz : 1, e->n);
    for (int g = 0; g < k->n_groups; g++)
        k->groups[g].n = k->groups[g].next = 0;
    size_t at = 0;
    k->view_row[0] = 0;
    for (int b = 0; b < e->n && st == DT_OK; b++) {
        st = view_row(k, e, b, &at);
        k->view_row[b + 1] = (int64_t)at;
    }
    for (int g = 0; g < k->n_groups && st == DT_OK; g++) {
        key_group *kg = &k->groups[g];
        if (k->local)
            st = number_locally(kg);
        else if (training)
            st = dt_keymap_resolve(kg->map, kg->keys, kg->n, step, kg->rows);
        else
            dt_keymap_find(kg->map, kg->keys, kg->n, kg->rows);
    }
    if (st)
        return st;
    /* The rows in the places the keys held, in the same entry order. */
    for (size_t j = 0; j < at; j++) {
        int slot = dt_feature_entry_slot(k->view_ids[j]);
        int g = slot >= 0 && slot < k->spec->n_slots ? k->slot_group[slot] : -1;
        if (g >= 0)
            k->view_ids[j] |= k->groups[g].rows[k->groups[g].next++];
    }
    k->view = *e;
    k->view.nnz = at;
    k->view.sp_row = k->view_row;
    k->view.sp_ids = k->view_ids;
    k->view.sp_vals = k->view_vals;
    *out = &k->view;
    return DT_OK;
}

void dt_col_keys_updated(dt_col_keys *k, int64_t step)
{
    for (int g = 0; g < k->n_groups && !k->local; g++)
        dt_keymap_evict_step(k->groups[g].map, step, false);
}

void dt_col_keys_set_pass_step(dt_col_keys *k, int64_t step)
{
    for (int g = 0; g < k->n_groups && !k->local; g++)
        dt_keymap_set_pass_step(k->groups[g].map, step);
}

