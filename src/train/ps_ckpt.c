/* Sharded checkpoints of parameter-server training (see ps_ckpt.h). */
#include "ps_ckpt.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/partition.h"

enum { VALUE_CAP = 48 };

/* ---- Saving ---- */

/* A save that failed (a ps task's SAVE refused, or the manifest not written: a full disk) leaves
 * the shard files the other tasks wrote, which no manifest will name: removed, unless a
 * checkpoint of the same step that the state file lists names them. */
static void drop_unlisted_shards(const dt_ckpt_manager *mgr, int64_t step, int n_ps)
{
    for (int i = 0; i < mgr->n_kept; i++)
        if (mgr->steps[i] == step)
            return;
    for (int k = 0; k < n_ps; k++) {
        char name[128], path[4400];
        dt_ckpt_shard_name(name, sizeof name, step, k, n_ps);
        snprintf(path, sizeof path, "%s/%s", mgr->dir, name);
        unlink(path);
    }
}

dt_status dt_ps_ckpt_save(dt_ckpt_manager *mgr, dt_ps_client *ps, int n_ps,
                          const dt_fit_config *cfg, dt_model *m, const dt_optim_config *o,
                          int64_t step, int workers, const int64_t *positions, bool final)
{
    dt_status st = dt_ps_client_save(ps, step, mgr->dir);
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", dt_last_error());
        drop_unlisted_shards(mgr, step, n_ps);
        return dt_error(st, "checkpoint %lld: %s", (long long)step, msg);
    }
    char *spec = dt_model_spec_to_json(dt_model_spec_of(m));
    size_t list_cap = (size_t)n_ps * 64 + 1, pos_cap = (size_t)workers * 24 + 1;
    char *list = malloc(list_cap), *pos = malloc(pos_cap);
    if (!spec || !list || !pos) {
        free(spec), free(list), free(pos);
        return dt_error(DT_ERR_NOMEM, "no memory for a checkpoint's metadata");
    }
    size_t pat = 0;
    pos[0] = '\0';
    for (int w = 0; w < workers; w++)
        pat += (size_t)snprintf(pos + pat, pos_cap - pat, "%s%" PRId64, w ? "," : "",
                                positions[w]);
    size_t at = 0;
    for (int k = 0; k < n_ps; k++) {
        char name[96];
        dt_ckpt_shard_name(name, sizeof name, step, k, n_ps);
        at += (size_t)snprintf(list + at, list_cap - at, "%s%s", k ? "," : "", name);
    }
    /* What a one_device checkpoint says, so that one_device restores it: the position is the
     * step alone (each worker read its own shard of the data). */
    char v[20][VALUE_CAP];
    dt_ckpt_meta meta[25];
    int n = 0;
#define META(key, fmt, val)                                                                        \
    (snprintf(v[n], VALUE_CAP, fmt, val), meta[n] = (dt_ckpt_meta){key, v[n]}, n++)
    META("global_step", "%" PRId64, step);
    META("epoch", "%d", 0);
    META("step_in_epoch", "%d", 0);
    META("epoch_loss", "%d", 0);
    META("epoch_correct", "%d", 0);
    META("epoch_samples", "%d", 0);
    META("samples", "%d", 0);
    META("early_stopping_best", "%s", "inf");
    META("early_stopping_waited", "%d", 0);
    META("optimizer", "%s", dt_opt_kind_name(o->kind));
    META("optimizer_iterations", "%" PRId64, step);
    META("learning_rate", "%.9g", (double)dt_lr_schedule_at(o, step));
    META("seed", "%" PRIu64, cfg->seed);
    META("dropout_position", "%d", 0);
    META("batch_size", "%d", cfg->batch_size);
    META("workers", "%d", 1);
    META("final", "%d", final ? 1 : 0);
    META("input_position", "%s", "{\"iteration\": 0, \"batches\": 0}");
    META("ps_tasks", "%d", n_ps);
    META("parameter_server_workers", "%d", workers);
#undef META
    meta[n++] = (dt_ckpt_meta){"model_spec", spec};
    meta[n++] = (dt_ckpt_meta){"ps_shards", list};
    meta[n++] = (dt_ckpt_meta){"ps_data_positions", pos};
    const dt_arena *arenas[1] = {dt_model_params(m)};
    char path[4400];
    st = dt_ckpt_manager_save(mgr, step, arenas, 1, meta, n, path, sizeof path);
    free(spec), free(list), free(pos);
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", dt_last_error());
        drop_unlisted_shards(mgr, step, n_ps);
        return dt_error(st, "%s", msg);
    }
    return DT_OK;
}

/* ---- Restoring ---- */

dt_status dt_ps_ckpt_positions(const dt_ckpt *c, int workers, int64_t *positions)
{
    const char *v = dt_ckpt_meta_get(c, "ps_data_positions");
    if (!v || !*v)
        return DT_END;
    int n = 0;
    for (const char *p = v; *p;) {
        char *end;
        long long x = strtoll(p, &end, 10);
        if (end == p || x < 0 || (*end && *end != ','))
            return dt_error(DT_ERR_FORMAT, "%s: __metadata__.ps_data_positions: '%s' is not a "
                            "list of batch counts", dt_ckpt_path(c), v);
        if (n < workers)
            positions[n] = x;
        n++;
        p = *end ? end + 1 : end;
    }
    return n == workers ? DT_OK : DT_END;
}

typedef struct {
    dt_ckpt **files;
    int n;
} shard_files;

/* A table part's description ("rows_total=R dim=D shards=S shard=s strategy=div ..."). */
typedef struct {
    int64_t rows_total, shards, shard;
    int dim;
    dt_partition_strategy strategy;
} part_desc;

static dt_status parse_part(const dt_ckpt *f, const char *key, part_desc *d)
{
    const char *v = dt_ckpt_meta_get(f, key);
    char strategy[8] = "";
    long long rows, shards, shard;
    if (!v || sscanf(v, "rows_total=%lld dim=%d shards=%lld shard=%lld strategy=%7s", &rows,
                     &d->dim, &shards, &shard, strategy) != 5 || rows < 1 || shards < 1 ||
        shard < 0 || shard >= shards || d->dim < 1 ||
        (strcmp(strategy, "div") != 0 && strcmp(strategy, "mod") != 0 &&
         strcmp(strategy, "hash") != 0))
        return dt_error(DT_ERR_FORMAT, "%s: __metadata__.%s: %s", dt_ckpt_path(f), key,
                        v ? "not a shard's description" : "missing");
    d->rows_total = rows, d->shards = shards, d->shard = shard;
    d->strategy = strcmp(strategy, "mod") == 0    ? DT_PARTITION_MOD
                  : strcmp(strategy, "hash") == 0 ? DT_PARTITION_HASH
                                                  : DT_PARTITION_DIV;
    return DT_OK;
}

/* Copies a shard's rows of one tensor (values or a slot) into the whole table's storage. */
static dt_status copy_part(const dt_ckpt *f, const char *name, const part_desc *d, float *whole,
                           int64_t expect_rows)
{
    const dt_ckpt_tensor *t = dt_ckpt_find(f, name);
    if (!t || strcmp(t->dtype, "F32") != 0 || t->n_dims != 2 || t->dims[0] != expect_rows ||
        t->dims[1] != d->dim)
        return dt_error(DT_ERR_FORMAT, "%s: tensor %s: %s", dt_ckpt_path(f), name,
                        t ? "not F32 [shard rows, dim]" : "missing");
    int64_t lo = d->shard, hi, stride = d->shards;
    if (d->strategy == DT_PARTITION_DIV)
        dt_partition_range(d->rows_total, d->shards, d->shard, &lo, &hi), stride = 1;
    const float *src = t->data;
    for (int64_t i = 0; i < expect_rows; i++)
        memcpy(whole + (size_t)(lo + i * stride) * (size_t)d->dim,
               src + (size_t)i * (size_t)d->dim, (size_t)d->dim * sizeof(float));
    return DT_OK;
}

/* Table tab (with its slots) from every part of it in the files: each shard once, together
 * covering every row. */
/* Every shard of a table exactly once: a shard given twice (two files claiming it) and a shard
 * missing can hold the same number of rows between them, so the shards are counted, not the
 * rows. seen: one byte per shard, allocated at the first part; the first file of each shard in
 * from[]. */
typedef struct {
    uint8_t *seen;
    const dt_ckpt **from;
    int64_t n_shards;
} shard_cover;

static dt_status cover_shard(shard_cover *c, const dt_table *tab, const dt_ckpt *f,
                             const part_desc *d)
{
    if (!c->seen) {
        c->seen = calloc((size_t)d->shards, 1);
        c->from = calloc((size_t)d->shards, sizeof *c->from);
        c->n_shards = d->shards;
        if (!c->seen || !c->from)
            return dt_error(DT_ERR_NOMEM, "table %s: no memory to count %lld shards", tab->name,
                            (long long)d->shards);
    }
    if (c->seen[d->shard])
        return dt_error(DT_ERR_FORMAT, "table %s: shard %lld of %lld is given twice (%s and %s)",
                        tab->name, (long long)d->shard, (long long)d->shards,
                        dt_ckpt_path(c->from[d->shard]), dt_ckpt_path(f));
    c->seen[d->shard] = 1, c->from[d->shard] = f;
    return DT_OK;
}

static dt_status check_covered(const shard_cover *c, const dt_table *tab)
{
    if (!c->seen)
        return dt_error(DT_ERR_FORMAT, "table %s: no shard file holds any of its shards",
                        tab->name);
    for (int64_t s = 0; s < c->n_shards; s++)
        if (!c->seen[s])
            return dt_error(DT_ERR_FORMAT, "table %s: shard %lld of %lld is in none of the shard "
                            "files (a file missing from the manifest)", tab->name, (long long)s,
                            (long long)c->n_shards);
    return DT_OK;
}

static dt_status restore_table(const shard_files *f, dt_table *tab)
{
    char prefix[DT_VIEW_NAME_CAP + 16];
    int plen = snprintf(prefix, sizeof prefix, "%s/part_", tab->name);
    int64_t n_shards = -1;
    shard_cover cover = {0};
    dt_status st = DT_OK;
    for (int i = 0; i < f->n && st == DT_OK; i++) {
        for (int j = 0; j < dt_ckpt_n_tensors(f->files[i]) && st == DT_OK; j++) {
            const char *name = dt_ckpt_tensor_at(f->files[i], j)->name;
            if (strncmp(name, prefix, (size_t)plen) != 0 || strchr(name + plen, '/'))
                continue;
            part_desc d;
            if ((st = parse_part(f->files[i], name, &d)))
                break;
            if (d.strategy == DT_PARTITION_HASH || d.rows_total != tab->rows || d.dim != tab->dim ||
                (n_shards >= 0 && d.shards != n_shards)) {
                st = dt_error(DT_ERR_INVALID, "%s: %s: a shard of a %lld x %d table over %lld "
                              "shards, this model's %s is %lld x %d", dt_ckpt_path(f->files[i]),
                              name, (long long)d.rows_total, d.dim, (long long)d.shards,
                              tab->name, (long long)tab->rows, tab->dim);
                break;
            }
            n_shards = d.shards;
            if ((st = cover_shard(&cover, tab, f->files[i], &d)))
                break;
            int64_t rows = dt_partition_shard_rows(d.strategy, d.rows_total, d.shards, d.shard);
            if ((st = copy_part(f->files[i], name, &d, tab->data, rows)))
                break;
            for (int k = 0; k < tab->n_slots && st == DT_OK; k++) {
                char slot[DT_VIEW_NAME_CAP + 48];
                snprintf(slot, sizeof slot, "%s/part_%lld", tab->slot_names[k],
                         (long long)d.shard);
                st = copy_part(f->files[i], slot, &d, tab->slots[k], rows);
            }
        }
    }
    if (st == DT_OK)
        st = check_covered(&cover, tab);
    free(cover.seen);
    free(cover.from);
    return st;
}

/* ---- Dynamic tables: every shard's keys merged into the model's key map ---- */

/* Tensor name of f, of dtype and n elements (F32: n x dim), or an error naming both. */
static dt_status part_tensor(const dt_ckpt *f, const char *name, const char *dtype, int64_t n,
                             int dim, const dt_ckpt_tensor **out)
{
    const dt_ckpt_tensor *t = dt_ckpt_find(f, name);
    bool ok = t && strcmp(t->dtype, dtype) == 0 && t->n_dims == (dim ? 2 : 1) &&
              (n < 0 || t->dims[0] == n) && (!dim || t->dims[1] == dim);
    if (!ok)
        return dt_error(DT_ERR_FORMAT, "%s: tensor %s: %s", dt_ckpt_path(f), name,
                        !t ? "missing" : dim ? "not F32 [the part's keys, dim]"
                                             : "not a vector of the part's keys");
    *out = t;
    return DT_OK;
}

/* A part's keys, aligned (the file's bytes may not be), each checked to be the part's shard's. */
static dt_status part_keys(const dt_ckpt *f, const char *name, const part_desc *d, int64_t n,
                           int64_t **out)
{
    const dt_ckpt_tensor *t;
    dt_status st = part_tensor(f, name, "I64", n, 0, &t);
    if (st)
        return st;
    n = t->dims[0];
    int64_t *k = malloc((size_t)(n ? n : 1) * sizeof *k);
    if (!k)
        return dt_error(DT_ERR_NOMEM, "%s: no memory for %lld keys", dt_ckpt_path(f),
                        (long long)n);
    memcpy(k, t->data, (size_t)n * sizeof *k);
    for (int64_t i = 0; i < n; i++)
        if (k[i] < 0 || (d->shards > 1 && dt_keymap_shard(k[i], (int)d->shards) != d->shard)) {
            free(k);
            return dt_error(DT_ERR_FORMAT, "%s: tensor %s: key %lld (index %lld) is not shard "
                            "%lld of %lld's", dt_ckpt_path(f), name, (long long)k[i],
                            (long long)i, (long long)d->shard, (long long)d->shards);
        }
    *out = k;
    return DT_OK;
}

/* Part `name` ("NAME/part_s") of dynamic table tab read: its rows, slots, keys' counts and
 * steps (p->keys a copy the caller frees). */
static dt_status read_part_rows(const dt_ckpt *f, const char *name, const part_desc *d,
                                const dt_table *tab, dt_ps_ckpt_part *p)
{
    char key[DT_VIEW_NAME_CAP + 64];
    const dt_ckpt_tensor *rows, *counts, *last, *slot;
    int64_t *keys = NULL;
    dt_status st = part_tensor(f, name, "F32", -1, tab->dim, &rows);
    int64_t n = st ? 0 : rows->dims[0];
    if (st == DT_OK)
        snprintf(key, sizeof key, "%s/keys", name), st = part_keys(f, key, d, n, &keys);
    if (st == DT_OK)
        snprintf(key, sizeof key, "%s/counts", name), st = part_tensor(f, key, "U32", n, 0, &counts);
    if (st == DT_OK)
        snprintf(key, sizeof key, "%s/last_seen", name),
            st = part_tensor(f, key, "U32", n, 0, &last);
    for (int k = 0; k < tab->n_slots && st == DT_OK; k++) {
        snprintf(key, sizeof key, "%s/part_%lld", tab->slot_names[k], (long long)d->shard);
        if ((st = part_tensor(f, key, "F32", n, tab->dim, &slot)) == DT_OK)
            p->slots[k] = slot->data;
    }
    if (st) {
        free(keys);
        return st;
    }
    p->keys = keys, p->counts = counts->data, p->last_seen = last->data, p->n = n;
    p->rows = rows->data, p->n_slots = tab->n_slots, p->dim = tab->dim;
    return DT_OK;
}

/* Part `name`'s keys being counted and its filter (p->counting_keys a copy the caller frees). */
static dt_status read_part_admission(const dt_ckpt *f, const char *name, const part_desc *d,
                                     dt_ps_ckpt_part *p)
{
    char key[DT_VIEW_NAME_CAP + 64];
    snprintf(key, sizeof key, "%s/counting_keys", name);
    dt_status st = DT_OK;
    if (dt_ckpt_find(f, key)) {
        const dt_ckpt_tensor *counts, *last;
        int64_t *keys = NULL;
        st = part_keys(f, key, d, -1, &keys);
        int64_t n = st ? 0 : dt_ckpt_find(f, key)->dims[0];
        if (st == DT_OK)
            snprintf(key, sizeof key, "%s/counting_counts", name),
                st = part_tensor(f, key, "U32", n, 0, &counts);
        if (st == DT_OK)
            snprintf(key, sizeof key, "%s/counting_last_seen", name),
                st = part_tensor(f, key, "U32", n, 0, &last);
        if (st) {
            free(keys);
            return st;
        }
        p->counting_keys = keys, p->n_counting = n;
        p->counting_counts = counts->data, p->counting_last_seen = last->data;
    }
    snprintf(key, sizeof key, "%s/bloom", name);
    const dt_ckpt_tensor *b = dt_ckpt_find(f, key);
    if (b && (strcmp(b->dtype, "U8") != 0 || b->n_dims != 1)) {
        free((void *)p->counting_keys);
        p->counting_keys = NULL;
        return dt_error(DT_ERR_FORMAT, "%s: tensor %s: not a U8 vector", dt_ckpt_path(f), key);
    }
    if (b)
        p->bloom = b->data, p->bloom_bytes = b->n_bytes;
    return DT_OK;
}

/* Every part of dynamic table t in the files (each shard once, all of them) to fn: its rows,
 * or (admission) its keys being counted and its filter. */
static dt_status each_part(const shard_files *f, dt_model *m, int t, bool admission,
                           dt_ps_part_fn fn, void *arg)
{
    dt_table *tab = dt_model_table(m, t);
    char prefix[DT_VIEW_NAME_CAP + 16];
    int plen = snprintf(prefix, sizeof prefix, "%s/part_", tab->name);
    shard_cover cover = {0};
    dt_status st = DT_OK;
    for (int a = 0; a < f->n && st == DT_OK; a++) {
        for (int j = 0; j < dt_ckpt_n_tensors(f->files[a]) && st == DT_OK; j++) {
            const char *name = dt_ckpt_tensor_at(f->files[a], j)->name;
            if (strncmp(name, prefix, (size_t)plen) != 0 || strchr(name + plen, '/'))
                continue;
            part_desc d;
            if ((st = parse_part(f->files[a], name, &d)))
                break;
            if (d.strategy != DT_PARTITION_HASH || d.dim != tab->dim) {
                st = dt_error(DT_ERR_INVALID, "%s: %s: a shard of a %s table of width %d, this "
                              "model's %s is a dynamic table of width %d",
                              dt_ckpt_path(f->files[a]), name,
                              d.strategy == DT_PARTITION_HASH ? "dynamic" : "fixed", d.dim,
                              tab->name, tab->dim);
                break;
            }
            if ((st = cover_shard(&cover, tab, f->files[a], &d)))
                break;
            char what[4400];
            snprintf(what, sizeof what, "%s: %s", dt_ckpt_path(f->files[a]), name);
            dt_ps_ckpt_part p = {.what = what, .table = t};
            st = admission ? read_part_admission(f->files[a], name, &d, &p)
                           : read_part_rows(f->files[a], name, &d, tab, &p);
            if (st == DT_OK)
                st = fn(arg, &p);
            free((void *)p.keys), free((void *)p.counting_keys);
        }
    }
    if (st == DT_OK)
        st = check_covered(&cover, tab);
    free(cover.seen);
    free(cover.from);
    return st;
}

static dt_status dynamic_parts(const shard_files *f, dt_model *m, dt_ps_part_fn fn, void *arg)
{
    dt_status st = DT_OK;
    for (int pass = 0; pass < 2 && st == DT_OK; pass++)
        for (int t = 0; t < dt_model_num_tables(m) && st == DT_OK; t++)
            if (dt_model_keymap(m, t))
                st = each_part(f, m, t, pass == 1, fn, arg);
    return st;
}

dt_status dt_ps_ckpt_dynamic_parts(const dt_ckpt *c, dt_model *m, dt_ps_part_fn fn, void *arg)
{
    shard_files f;
    dt_status st = dt_ckpt_open_shards(c, &f.files, &f.n);
    if (st)
        return st;
    st = dynamic_parts(&f, m, fn, arg);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", st ? dt_last_error() : "");
    dt_ckpt_close_shards(f.files, f.n);
    return st ? dt_error(st, "%s", msg) : DT_OK;
}

/* A part merged into the model's key map of its table. */
static dt_status merge_part(void *arg, const dt_ps_ckpt_part *p)
{
    dt_model *m = arg;
    dt_keymap *km = dt_model_keymap(m, p->table);
    if (p->rows)
        return dt_keymap_merge_rows(km, dt_keymap_table_index(km, dt_model_table(m, p->table)->name),
                                    p->keys, p->counts, p->last_seen, p->n, p->rows,
                                    p->n_slots ? p->slots : NULL, p->what);
    dt_status st = p->counting_keys ? dt_keymap_merge_counting(km, p->counting_keys,
                                                               p->counting_counts,
                                                               p->counting_last_seen,
                                                               p->n_counting, p->what)
                                    : DT_OK;
    if (st == DT_OK && p->bloom)
        st = dt_keymap_merge_bloom(km, p->bloom, p->bloom_bytes, 0, p->what);
    return st;
}

/* The model's dynamic tables from the files: every map emptied, each table's rows merged in,
 * then the keys counted and the filters. */
static dt_status restore_dynamic(const shard_files *f, dt_model *m)
{
    dt_keymap *maps[DT_MAX_COLUMN_TABLES];
    int n_maps = dt_model_keymaps(m, maps, DT_MAX_COLUMN_TABLES);
    for (int i = 0; i < n_maps; i++)
        dt_keymap_clear(maps[i]);
    dt_status st = dynamic_parts(f, m, merge_part, m);
    for (int i = 0; i < n_maps; i++)
        dt_keymap_merge_end(maps[i]);
    return st;
}

/* o's slots over dense variable v (the parameters' view v) from the file that holds it. */
static dt_status restore_dense_slots(const shard_files *f, const dt_arena *params, dt_optim *o)
{
    size_t stride = o->state.n_elems / (size_t)o->n_slots;
    int found = 0;
    for (int i = 0; i < f->n; i++)
        for (int v = 0; v < params->n_views; v++) {
            char key[64];
            snprintf(key, sizeof key, "dense/var_%d", v);
            const char *desc = dt_ckpt_meta_get(f->files[i], key);
            if (!desc)
                continue;
            unsigned long long off, count, total;
            int slots;
            if (sscanf(desc, "offset=%llu count=%llu total=%llu slots=%d", &off, &count, &total,
                       &slots) != 4 || off != params->views[v].offset ||
                count != params->views[v].n_elems || slots != o->n_slots)
                return dt_error(DT_ERR_INVALID, "%s: %s (%s): not this model's view %d (%zu "
                                "values from %zu) with %d optimizer slots",
                                dt_ckpt_path(f->files[i]), key, desc, v,
                                params->views[v].n_elems, params->views[v].offset, o->n_slots);
            for (int k = 0; k < slots; k++) {
                char name[80];
                snprintf(name, sizeof name, "dense/var_%d/slot_%d", v, k);
                const dt_ckpt_tensor *t = dt_ckpt_find(f->files[i], name);
                if (!t || strcmp(t->dtype, "F32") != 0 || t->n_bytes != count * sizeof(float))
                    return dt_error(DT_ERR_FORMAT, "%s: tensor %s: %s",
                                    dt_ckpt_path(f->files[i]), name,
                                    t ? "not F32 of the variable's size" : "missing");
                memcpy(o->state.data + (size_t)k * stride + off, t->data, t->n_bytes);
            }
            found++;
        }
    if (found != params->n_views)
        return dt_error(DT_ERR_FORMAT, "the shard files hold the optimizer slots of %d of the "
                        "%d dense variables", found, params->n_views);
    return DT_OK;
}

dt_status dt_ps_ckpt_load(const dt_ckpt *c, dt_model *m, dt_optim *o, int64_t *step)
{
    char *spec = dt_model_spec_to_json(dt_model_spec_of(m));
    if (!spec)
        return dt_error(DT_ERR_NOMEM, "no memory for the model spec");
    const char *saved = dt_ckpt_meta_get(c, "model_spec"), *opt = dt_ckpt_meta_get(c, "optimizer");
    const char *gs = dt_ckpt_meta_get(c, "global_step");
    bool same = saved && strcmp(saved, spec) == 0;
    free(spec);
    char *end = NULL;
    long long s = gs ? strtoll(gs, &end, 10) : -1;
    if (!same)
        return dt_error(DT_ERR_INVALID, "%s: written for another model (%s)", dt_ckpt_path(c),
                        saved ? saved : "no model_spec in its metadata");
    if (!opt || strcmp(opt, dt_opt_kind_name(o->cfg.kind)) != 0)
        return dt_error(DT_ERR_INVALID, "%s: written with optimizer %s, this run uses %s",
                        dt_ckpt_path(c), opt ? opt : "(none)", dt_opt_kind_name(o->cfg.kind));
    if (!gs || *end || s < 0)
        return dt_error(DT_ERR_FORMAT, "%s: __metadata__.global_step: missing or not a step",
                        dt_ckpt_path(c));
    *step = s;
    dt_status st = dt_model_setup_table_rules(m, &o->cfg);
    if (st == DT_OK)
        st = dt_ckpt_restore_arena(c, dt_model_params(m));
    if (st == DT_OK && dt_ckpt_is_sharded(c))
        return dt_ps_ckpt_restore(c, m, o);
    if (st == DT_OK && o->state.n_views > 0)
        st = dt_ckpt_restore_arena(c, &o->state);
    if (st)
        return st;
    /* One_device's checkpoint: whole tables, with their slots; a dynamic table's key map with
     * its rows. */
    dt_keymap *maps[DT_MAX_COLUMN_TABLES];
    int n_maps = dt_model_keymaps(m, maps, DT_MAX_COLUMN_TABLES);
    for (int i = 0; i < n_maps && st == DT_OK; i++)
        st = dt_keymap_restore(maps[i], c, true);
    for (int t = 0; t < dt_model_num_tables(m) && st == DT_OK; t++) {
        if (dt_model_keymap(m, t))
            continue;
        dt_table *tab = dt_model_table(m, t);
        for (int k = -1; k < tab->n_slots && st == DT_OK; k++) {
            dt_arena a;
            if ((st = dt_table_arena(tab, k, &a)) == DT_OK)
                st = dt_ckpt_restore_arena(c, &a);
            dt_table_arena_release(&a);
        }
    }
    return st;
}

dt_status dt_ps_ckpt_restore(const dt_ckpt *c, dt_model *m, dt_optim *o)
{
    shard_files f;
    dt_status st = dt_ckpt_open_shards(c, &f.files, &f.n);
    if (st)
        return st;
    for (int t = 0; t < dt_model_num_tables(m) && st == DT_OK; t++)
        if (!dt_model_keymap(m, t))
            st = restore_table(&f, dt_model_table(m, t));
    if (st == DT_OK)
        st = restore_dynamic(&f, m);
    if (st == DT_OK && o && o->n_slots > 0)
        st = restore_dense_slots(&f, dt_model_params(m), o);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", st ? dt_last_error() : "");
    dt_ckpt_close_shards(f.files, f.n);
    return st ? dt_error(st, "%s", msg) : DT_OK;
}
