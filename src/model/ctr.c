/* The CTR front of a model (see ctr.h). Per batch of B examples with F fields each:
 *   lin (B, F)     fm_w[id] x            the first-order terms
 *   emb (B, F, K)  fm_v[id] x            the field vectors (the MLP's input)
 *   sums (B, K)    sum over fields of emb, kept for the FM gradient
 * and backward turns the logits' gradient into dlin and demb, then into sparse rows. */
#include "ctr.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/lines.h"
#include "../nn/embedding.h"
#include "../nn/fm.h"

/* Tasks per pool thread: examples, and the unique ids, are split in this many ranges per thread,
 * so that a thread held up for a while leaves its share to the others. The training forward's
 * dedupe is one more task, about a fifth of that pass, on one thread: with 8 ranges per thread
 * rather than 4, the other thread takes over smaller pieces and waits less for the last one
 * (2-thread DeepFM about 3% faster, 6 of 6 interleaved pairs; the same bits). */
#define TASKS_PER_THREAD 8
/* Examples per task below which a thread costs more than it saves. */
#define MIN_EXAMPLES_PER_TASK 64

/* example_tasks never gives more tasks than this, whatever the pool. */
static int max_example_tasks(int max_batch)
{
    return max_batch / MIN_EXAMPLES_PER_TASK > 0 ? max_batch / MIN_EXAMPLES_PER_TASK : 1;
}

/* The first place (example x F + field) a forward task found with an id outside the tables
 * or a value that is not finite; -1: none. */
typedef int64_t bad_field;

struct dt_ctr {
    dt_arch arch;
    int F, K, max_batch;
    float init_stddev;
    dt_table w, v;
    dt_sparse_rows gw, gv;
    int B;           /* rows of the last forward */
    int64_t *ids;    /* (B, F) */
    float *vals;     /* (B, F) */
    float *lin;      /* (B, F), then its gradient */
    float *emb;      /* (B, F, K) */
    float *demb;     /* (B, F, K) */
    float *sums;     /* (B, K) */
    float *fm;       /* (B) */
    uint32_t *slot;  /* (B, F): each place's row among the unique ids */
    uint32_t *offsets, *places; /* (B F + 1), (B F): the places grouped by unique id */
    float *dgrad;    /* demb of the backward under way: the MLP's input gradient, or c->demb */
    int64_t *uniq;   /* (B, F) */
    void *scratch;   /* dt_embedding_scratch_bytes(B F) */
    dt_pool *pool;   /* of the last call */
    const dt_elem *batch; /* of the forward under way: its ids and values are copied by the tasks */
    bad_field *bad;  /* (max tasks): the first bad field each forward task found, if any */
    bool deduped;    /* uniq, n_uniq, slot, offsets and places are the last forward's */
    /* Dynamic tables: both tables' rows are the key map's, a batch's ids its keys, turned into
     * rows (keyrows) before the lookups, which read them through `view`. */
    dt_keymap *keys;
    bool keys_borrowed; /* another model's map, read only (dt_ctr_share_keys) */
    int64_t *keyrows;   /* (B, F) */
    int64_t *view_row;  /* (B + 1) */
    dt_elem view;
    int64_t step;       /* of the last update */
    size_t n_uniq;
    const float *dlogits;         /* of the backward under way */
    const float *ddeep;
};

static bool has_v(const dt_ctr *c) { return c->arch != DT_ARCH_LR; }

dt_status dt_ctr_create(const dt_model_spec *spec, int max_batch, int dynamic_shards,
                        dt_ctr **out)
{
    *out = NULL;
    dt_ctr *c = calloc(1, sizeof *c);
    if (!c)
        return dt_error(DT_ERR_NOMEM, "no memory for a CTR model");
    c->arch = spec->arch;
    c->F = spec->ctr.field_size;
    c->K = has_v(c) ? spec->ctr.embedding_size : 0;
    c->max_batch = max_batch;
    c->init_stddev = spec->ctr.init_stddev;
    size_t n = (size_t)max_batch * (size_t)c->F, nk = n * (size_t)(c->K ? c->K : 1);
    dt_sparse_rows_init(&c->gw, 1);
    dt_sparse_rows_init(&c->gv, c->K ? c->K : 1);
    int64_t rows = spec->ctr.feature_size;
    dt_status st = DT_OK;
    if (spec->ctr.dynamic) {
        /* A row's values in both tables, its slots not counted: the capacity is address space,
         * and the map's memory check, which counts them, stops the tables first. */
        size_t row_bytes = (size_t)(1 + c->K) * sizeof(float);
        dt_keymap_policy room = spec->ctr.dynamic_policy;
        if (room.max_rows > 0 && dynamic_shards > 1)
            room.max_rows = room.max_rows * dynamic_shards + dynamic_shards - 1;
        rows = dt_keymap_capacity(&room, row_bytes);
        st = dt_keymap_create(has_v(c) ? "fm_v" : "fm_w", &spec->ctr.dynamic_policy, rows, &c->keys);
        c->keyrows = malloc(n * sizeof *c->keyrows);
        c->view_row = malloc(((size_t)max_batch + 1) * sizeof *c->view_row);
        if (st == DT_OK && (!c->keyrows || !c->view_row))
            st = dt_error(DT_ERR_NOMEM, "no memory for a batch of %zu keys", n);
    }
    if (st == DT_OK)
        st = dt_table_create(&c->w, "fm_w", rows, 1);
    if (st == DT_OK && has_v(c))
        st = dt_table_create(&c->v, "fm_v", rows, c->K);
    if (st == DT_OK && c->keys)
        st = dt_keymap_attach(c->keys, &c->w, 0.0f, 0);
    if (st == DT_OK && c->keys && has_v(c))
        st = dt_keymap_attach(c->keys, &c->v, c->init_stddev, 0);
    if (st == DT_OK && (st = dt_sparse_rows_reserve(&c->gw, n)) == DT_OK && has_v(c))
        st = dt_sparse_rows_reserve(&c->gv, n);
    if (st)
        goto fail;
    c->ids = malloc(n * sizeof *c->ids);
    c->vals = malloc(n * sizeof *c->vals);
    c->lin = malloc(n * sizeof *c->lin);
    c->slot = malloc(n * sizeof *c->slot);
    c->uniq = malloc(n * sizeof *c->uniq);
    c->offsets = malloc((n + 1) * sizeof *c->offsets);
    c->places = malloc(n * sizeof *c->places);
    c->scratch = malloc(dt_embedding_scratch_bytes(n));
    c->fm = calloc((size_t)max_batch, sizeof *c->fm);
    c->bad = malloc((size_t)max_example_tasks(max_batch) * sizeof *c->bad);
    if (has_v(c)) {
        c->emb = dt_lines_floats(nk);
        c->demb = dt_lines_floats(nk);
        c->sums = dt_lines_floats((size_t)max_batch * (size_t)c->K);
    }
    if (!c->ids || !c->vals || !c->lin || !c->slot || !c->uniq || !c->scratch || !c->fm || !c->bad ||
        !c->offsets || !c->places ||
        (has_v(c) && (!c->emb || !c->demb || !c->sums))) {
        st = dt_error(DT_ERR_NOMEM, "no memory for the CTR model's buffers at batch %d", max_batch);
        goto fail;
    }
    *out = c;
    return DT_OK;
fail:
    dt_ctr_destroy(c);
    return st;
}

void dt_ctr_destroy(dt_ctr *c)
{
    if (!c)
        return;
    dt_table_free(&c->w);
    dt_table_free(&c->v);
    dt_sparse_rows_free(&c->gw);
    dt_sparse_rows_free(&c->gv);
    free(c->ids), free(c->vals), free(c->lin), free(c->slot), free(c->uniq), free(c->scratch), free(c->fm);
    free(c->offsets), free(c->places), free(c->bad);
    free(c->emb), free(c->demb), free(c->sums);
    free(c->keyrows), free(c->view_row);
    if (!c->keys_borrowed)
        dt_keymap_destroy(c->keys);
    free(c);
}

void dt_ctr_init(dt_ctr *c, uint64_t seed, dt_pool *pool)
{
    if (c->keys) { /* rows are drawn as keys are admitted */
        if (has_v(c))
            dt_keymap_set_seed(c->keys, 1, seed);
        return;
    }
    memset(c->w.data, 0, (size_t)c->w.rows * sizeof(float));
    if (has_v(c))
        dt_table_init_normal(&c->v, c->init_stddev, seed, pool);
}

/* Every row has F entries, so that the tasks find example a's fields at a x F. */
static dt_status check_field_counts(const dt_ctr *c, const dt_elem *e)
{
    for (int r = 0; r < e->n; r++) {
        int64_t lo = e->sp_row[r], hi = e->sp_row[r + 1];
        if (hi - lo != c->F)
            return dt_error(DT_ERR_INVALID, "example %d of the batch has %lld fields, the model "
                            "takes %d (--field-size)", r, (long long)(hi - lo), c->F);
    }
    return DT_OK;
}

/* Copies n places' ids and values from the batch to ids and vals; returns the first place
 * whose id is outside [0, rows) or whose value is not finite, or -1. The copy is the check's
 * pass over the data: one loop with no branch per place. */
static int64_t copy_checked(const int64_t *src_ids, const float *src_vals, size_t n, int64_t rows,
                            int64_t *ids, float *vals)
{
    uint64_t bad = 0;
    for (size_t j = 0; j < n; j++) {
        int64_t id = src_ids[j];
        float v = src_vals[j];
        ids[j] = id, vals[j] = v;
        bad |= (uint64_t)((uint64_t)id >= (uint64_t)rows) | (uint64_t)(v - v != 0.0f);
    }
    if (!bad)
        return -1;
    for (size_t j = 0; j < n; j++)
        if ((uint64_t)src_ids[j] >= (uint64_t)rows || !isfinite(src_vals[j]))
            return (int64_t)j;
    return -1;
}

/* The error for place p of the batch, the first bad one. */
static dt_status bad_field_error(const dt_ctr *c, const dt_elem *e, int64_t p)
{
    int r = (int)(p / c->F);
    long long field = (long long)(p % c->F) + 1;
    int64_t id = e->sp_ids[e->sp_row[0] + p];
    float v = e->sp_vals[e->sp_row[0] + p];
    if (id < 0 || id >= c->w.rows)
        return dt_error(DT_ERR_INVALID, "example %d of the batch, field %lld: id %lld outside "
                        "the table's %lld rows (--feature-size, or hash the ids)", r, field,
                        (long long)id, (long long)c->w.rows);
    return dt_error(DT_ERR_INVALID, "example %d of the batch, field %lld: value %g", r, field,
                    (double)v);
}

static int example_tasks(const dt_ctr *c, int B)
{
    int tasks = dt_pool_size(c->pool) * TASKS_PER_THREAD;
    if (tasks * MIN_EXAMPLES_PER_TASK > B)
        tasks = B / MIN_EXAMPLES_PER_TASK > 0 ? B / MIN_EXAMPLES_PER_TASK : 1;
    return tasks;
}

/* Examples [lo, hi) of the batch: their ids and values copied and checked, then their lookups
 * and FM terms, in one pass. A task that finds a bad field records it and looks nothing up. */
static void forward_examples(void *ctx, int task, int n_tasks)
{
    dt_ctr *c = ctx;
    long lo, hi;
    dt_pool_slice(c->B, task, n_tasks, &lo, &hi);
    size_t F = (size_t)c->F, first = (size_t)lo * F;
    const dt_elem *e = c->batch;
    int64_t bad = copy_checked(e->sp_ids + e->sp_row[0] + first, e->sp_vals + e->sp_row[0] + first,
                               (size_t)(hi - lo) * F, c->w.rows, c->ids + first, c->vals + first);
    c->bad[task] = bad < 0 ? -1 : (int64_t)first + bad;
    if (bad >= 0)
        return;
    size_t p0 = (size_t)lo * F, np = (size_t)(hi - lo) * F;
    if (has_v(c))
        dt_fm_forward_lookup(c->w.data, c->v.data, (int)(hi - lo), c->F, c->K, c->ids + p0,
                             c->vals + p0, c->lin + p0, c->emb + p0 * (size_t)c->K,
                             c->sums + (size_t)lo * (size_t)c->K, c->fm + lo);
    else
        dt_embedding_forward(c->w.data, 1, c->ids + p0, c->vals + p0, np, c->lin + p0);
}

/* The batch's unique ids (both tables are looked up by the same ids) and each one's places,
 * for the backward pass. */
static void dedupe_ids(dt_ctr *c, const int64_t *ids)
{
    size_t n = (size_t)c->B * (size_t)c->F;
    c->n_uniq = dt_embedding_dedupe(ids, n, c->scratch, c->uniq, c->slot);
    dt_embedding_group(c->slot, n, c->n_uniq, c->offsets, c->places);
}

/* Training: task 0 deduplicates the ids (read from the batch, as the other tasks copy them)
 * while the other tasks look rows up (on one thread, one after the other), so no thread waits
 * for it at the start of the backward pass. */
static void forward_training(void *ctx, int task, int n_tasks)
{
    dt_ctr *c = ctx;
    if (task == 0)
        dedupe_ids(c, c->batch->sp_ids + c->batch->sp_row[0]);
    else
        forward_examples(ctx, task - 1, n_tasks - 1);
}

/* The batch's keys turned into the key map's rows (counted and admitted when training), in a
 * view of e whose ids are those rows. */
static dt_status keys_to_rows(dt_ctr *c, const dt_elem *e, bool training, const dt_elem **out)
{
    size_t n = (size_t)(e->sp_row[e->n] - e->sp_row[0]);
    const int64_t *keys = e->sp_ids + e->sp_row[0];
    dt_status st = DT_OK;
    if (training)
        st = dt_keymap_resolve(c->keys, keys, n, c->step + 1, c->keyrows);
    else
        dt_keymap_find(c->keys, keys, n, c->keyrows);
    if (st)
        return st;
    for (int r = 0; r <= e->n; r++)
        c->view_row[r] = e->sp_row[r] - e->sp_row[0];
    c->view = *e;
    c->view.sp_row = c->view_row;
    c->view.sp_ids = c->keyrows;
    c->view.sp_vals = e->sp_vals + e->sp_row[0];
    *out = &c->view;
    return DT_OK;
}

dt_status dt_ctr_forward(dt_ctr *c, const dt_elem *e, bool training, dt_pool *pool)
{
    dt_status st = check_field_counts(c, e);
    if (st)
        return st;
    if (c->keys && (st = keys_to_rows(c, e, training, &e)))
        return st;
    c->B = e->n;
    c->pool = pool;
    c->batch = e;
    int tasks = example_tasks(c, e->n);
    if (training)
        dt_pool_run(pool, forward_training, c, tasks + 1);
    else
        dt_pool_run(tasks > 1 ? pool : NULL, forward_examples, c, tasks);
    c->batch = NULL;
    c->deduped = false;
    /* Tasks cover the examples in order: the first task with a bad field has the first one. */
    for (int t = 0; t < tasks; t++)
        if (c->bad[t] >= 0)
            return bad_field_error(c, e, c->bad[t]);
    c->deduped = training;
    return DT_OK;
}

const float *dt_ctr_deep_input(const dt_ctr *c) { return c->emb; }

void dt_ctr_logits(dt_ctr *c, int B, float bias, const float *deep, float *logits)
{
    for (int i = 0; i < B; i++) {
        const float *l = c->lin + (size_t)i * (size_t)c->F;
        float z = 0.0f;
        for (int f = 0; f < c->F; f++)
            z += l[f];
        z += bias;
        if (has_v(c))
            z += c->fm[i];
        if (deep)
            z += deep[i];
        logits[i] = z;
    }
}

/* Examples [lo, hi): the gradients of their places' scaled rows, dlin and demb. */
static void backward_examples(void *ctx, int task, int n_tasks)
{
    dt_ctr *c = ctx;
    long lo, hi;
    dt_pool_slice(c->B, task, n_tasks, &lo, &hi);
    for (long i = lo; i < hi; i++)
        for (int f = 0; f < c->F; f++)
            c->lin[(size_t)i * (size_t)c->F + (size_t)f] = c->dlogits[i];
    if (!has_v(c))
        return;
    size_t K = (size_t)c->K, p0 = (size_t)lo * (size_t)c->F * K;
    size_t nk = (size_t)(hi - lo) * (size_t)c->F * K;
    if (!c->ddeep)
        memset(c->dgrad + p0, 0, nk * sizeof *c->dgrad);
    dt_fm_backward((int)(hi - lo), c->F, c->K, c->emb + p0, c->sums + (size_t)lo * K,
                   c->dlogits + lo, c->dgrad + p0);
}

/* The first place of task `task`'s share when the batch's places are split evenly. */
static size_t place_share(const dt_ctr *c, int task, int n_tasks)
{
    return (size_t)c->B * (size_t)c->F * (size_t)task / (size_t)n_tasks;
}

/* The first unique id (group) whose places start at or after place p: offsets ascend. */
static size_t first_group_from(const uint32_t *offsets, size_t n_groups, size_t p)
{
    size_t lo = 0, hi = n_groups;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (offsets[mid] < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A range of the unique ids, split by their places rather than their count (a few ids of a
 * Zipf-like field hold most places): their rows of both tables' gradients, each summed over its
 * places in order whatever the split, so the rows are the same bit for bit. */
static void accumulate_rows(void *ctx, int task, int n_tasks)
{
    dt_ctr *c = ctx;
    size_t lo = first_group_from(c->offsets, c->gw.n, place_share(c, task, n_tasks));
    size_t hi = first_group_from(c->offsets, c->gw.n, place_share(c, task + 1, n_tasks));
    if (lo == hi)
        return;
    dt_embedding_accumulate_grouped(c->offsets, c->places, c->vals, 1, c->lin, lo, hi,
                                    c->gw.rows);
    if (has_v(c))
        dt_embedding_accumulate_grouped(c->offsets, c->places, c->vals, c->K, c->dgrad,
                                        (size_t)lo, (size_t)hi, c->gv.rows);
}

/* Dynamic tables: the zero row, which keys not admitted read, takes no update. Ids increase, so
 * it is the first. */
static void drop_first_row(dt_sparse_rows *g)
{
    g->n--;
    memmove(g->ids, g->ids + 1, g->n * sizeof *g->ids);
    memmove(g->rows, g->rows + g->dim, g->n * (size_t)g->dim * sizeof *g->rows);
}

float dt_ctr_backward(dt_ctr *c, int B, const float *dlogits, float *ddeep, dt_pool *pool)
{
    c->pool = pool;
    c->dlogits = dlogits, c->ddeep = ddeep;
    /* The FM gradient adds into the MLP's input gradient where there is one (the model's
     * scratch, not needed after): no copy of it. */
    c->dgrad = ddeep ? ddeep : c->demb;
    double dbias = 0.0;
    for (int i = 0; i < B; i++)
        dbias += dlogits[i];
    int tasks = example_tasks(c, B);
    dt_pool_run(tasks > 1 ? pool : NULL, backward_examples, c, tasks);
    if (!c->deduped) /* after a forward pass not for training */
        dedupe_ids(c, c->ids);
    c->deduped = false;
    size_t u = c->n_uniq;
    c->gw.n = u;
    memcpy(c->gw.ids, c->uniq, u * sizeof *c->uniq);
    if (has_v(c)) {
        c->gv.n = u;
        memcpy(c->gv.ids, c->uniq, u * sizeof *c->uniq);
    }
    int tasks_u = dt_pool_size(pool) * TASKS_PER_THREAD;
    tasks_u = (int)(u / 256) < tasks_u ? (int)(u / 256) : tasks_u;
    tasks_u = tasks_u < 1 ? 1 : tasks_u;
    dt_pool_run(tasks_u > 1 ? pool : NULL, accumulate_rows, c, tasks_u);
    if (c->keys && u > 0 && c->uniq[0] == 0) {
        drop_first_row(&c->gw);
        if (has_v(c))
            drop_first_row(&c->gv);
    }
    return (float)dbias;
}

void dt_ctr_tables_updated(dt_ctr *c, int64_t step)
{
    c->step = step;
    if (c->keys)
        dt_keymap_evict_step(c->keys, step, false);
}

void dt_ctr_set_step(dt_ctr *c, int64_t step)
{
    c->step = step;
    if (c->keys) /* the save at that step ran a whole eviction pass */
        dt_keymap_set_pass_step(c->keys, step);
}
dt_keymap *dt_ctr_keymap(dt_ctr *c) { return c->keys; }

void dt_ctr_share_keys(dt_ctr *c, dt_keymap *owner)
{
    if (!c->keys || c->keys == owner)
        return;
    if (!c->keys_borrowed)
        dt_keymap_destroy(c->keys);
    c->keys = owner;
    c->keys_borrowed = true;
}

int dt_ctr_num_tables(const dt_ctr *c) { return has_v(c) ? 2 : 1; }
dt_table *dt_ctr_table(dt_ctr *c, int i) { return i == 0 ? &c->w : &c->v; }
dt_sparse_rows *dt_ctr_table_grad(dt_ctr *c, int i) { return i == 0 ? &c->gw : &c->gv; }
