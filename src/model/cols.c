/* The columns front of a feature-spec model (see cols.h and model_spec.h). Per batch of B rows:
 *   slot_lo (B, S + 1)   where each slot's entries start in each row (entries come in slot
 *                        order from the transform)
 *   slot_col (S + 1, B)  the same transposed, for the walks of one slot over the batch
 *   x0 (B, D)            the deep inputs side by side: numeric values, combined embeddings,
 *                        numeric values times an embedding row, indicator weights
 *   comb (B, I)          each embedding input's combiner factor per row (1, 1 / sum w or
 *                        1 / sqrt(sum w^2)), by which backward scales its rows' gradients
 *   fm_sums, fm_out      DeepFM: each row's per-k sums over its fields and its pairwise term,
 *                        taken as x0 is written
 *   xs[l], us[l], ts[l]  the cross layers' outputs and products (B, D), (B, D), (B, R)
 * and per table, the places that read it and their unique ids, found once in forward (the
 * embedding's dedupe). Backward turns dlogits and the layers' input gradient into dx0, the
 * cross variables' gradients and, per table, one summed row per unique id. */
#include "cols.h"
#include "cols_keys.h"

#include "../core/cpu.h"
#include "../core/lines.h"
#include "../core/prefetch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../nn/cross.h"
#include "../nn/embedding.h"
#include "../nn/gemm.h"

/* A table's places in the batch: each id an input reads, and the index of its unique id. */
typedef struct {
    size_t n, cap;
    uint32_t *offsets;       /* (n_unique + 1): each unique id's places, grouped (places) */
    uint32_t *grouped;       /* (cap) */
    const float **g;         /* (cap) backward: each place's gradient row... */
    float *scale;            /* (cap) ...and its factor */
    size_t n_unique; /* the batch's unique ids, which forward writes to the gradient's ids */
    int64_t *ids;
    uint32_t *slot;
    void *scratch;   /* dt_embedding_dedupe's */
} table_places;

struct dt_cols {
    dt_columns_spec spec;
    int N, S, D, R, L, max_batch;
    dt_pool *pool;
    int cross_w[DT_MAX_CROSS_LAYERS], cross_u[DT_MAX_CROSS_LAYERS],
        cross_v[DT_MAX_CROSS_LAYERS], cross_b[DT_MAX_CROSS_LAYERS]; /* views; -1 unused */
    int cross_out;              /* parallel: cross/logits/kernel (D, N); -1 otherwise */
    dt_table *tables;
    dt_sparse_rows *grads;
    int B;
    const dt_elem *batch;
    const dt_elem *prepared;    /* dt_cols_prepare's batch, which forward need not read again */
    int64_t *slot_lo;           /* (max_batch, S + 1) */
    int64_t *slot_col;          /* (S + 1, col_stride): slot_lo transposed, so that a walk of
                                   one slot over the rows reads two arrays in order instead of
                                   a line per row */
    size_t col_stride;          /* max_batch and a line: columns a power of two apart would
                                   share the L1 sets that the transposition writes */
    float *deep;                /* x0 (max_batch, D) */
    float *comb;                /* (max_batch, n_deep) */
    int *deep_off;              /* (n_deep) */
    const float **fm_rows;      /* DeepFM of fields K wide: (max_batch, n_deep) each field's
                                   row... */
    float *fm_weights;          /* ...and its factor (fm_fields_of_batch); NULL: not such */
    float *fm_zeros;            /* (K): the row of a field with no id */
    float *fm_sums;             /* fm: (max_batch, K) */
    float *fm_sq;               /* fm: (K), scratch */
    float *fm_out;              /* fm: (max_batch), each row's pairwise term */
    float *xs[DT_MAX_CROSS_LAYERS + 1], *us[DT_MAX_CROSS_LAYERS], *ts[DT_MAX_CROSS_LAYERS];
    float *dx0, *dcur, *dnext, *du, *dtt; /* backward (max_batch, D) each, dtt (max_batch, R) */
    table_places *places;       /* (n_tables) */
    int *same_places;           /* (n_tables): an earlier table whose places are this one's, or
                                   -1 */
    int64_t *slot_limit;        /* (S): the ids a slot may hold: the fewest rows of what reads it */
    size_t *slot_total;         /* (S + 1): the batch's entries of each slot */
    dt_col_keys *keys;          /* the dynamic tables' key maps; NULL without */
    int64_t step;               /* of the last update (keys are counted at the next) */
};

static const dt_column_input *deep_in(const dt_cols *c, int i) { return &c->spec.deep[i]; }
static const dt_column_input *lin_in(const dt_cols *c, int i) { return &c->spec.linear[i]; }
static inline int64_t entry_id(int64_t v) { return v & (((int64_t)1 << 48) - 1); }

static bool fields_of_one_width(const dt_cols *c);

static int input_width(const dt_cols *c, const dt_column_input *in)
{
    switch (in->kind) {
    case DT_INPUT_NUMERIC: return in->width;
    case DT_INPUT_EMBEDDING:
    case DT_INPUT_NUMERIC_EMBEDDING: return c->spec.tables[in->table].dim;
    case DT_INPUT_INDICATOR: return (int)in->buckets;
    case DT_INPUT_WEIGHTS:
    case DT_INPUT_BIAS: return c->N;
    }
    return 0;
}

static float *floats(size_t n) { return dt_lines_floats(n); }

/* The cross layers' variables, in layer order, after the linear part's (none: all tables). */
static dt_status declare_cross(dt_cols *c, dt_arena *params)
{
    char name[DT_VIEW_NAME_CAP];
    dt_status st = DT_OK;
    for (int l = 0; l < c->L && st == DT_OK; l++) {
        c->cross_w[l] = c->cross_u[l] = c->cross_v[l] = -1;
        if (c->R == 0) {
            snprintf(name, sizeof name, "cross/layer_%d/kernel", l);
            st = dt_arena_add(params, name, 2, (int[]){c->D, c->D}, &c->cross_w[l]);
        } else {
            snprintf(name, sizeof name, "cross/layer_%d/u", l);
            st = dt_arena_add(params, name, 2, (int[]){c->D, c->R}, &c->cross_u[l]);
            snprintf(name, sizeof name, "cross/layer_%d/v", l);
            if (st == DT_OK)
                st = dt_arena_add(params, name, 2, (int[]){c->R, c->D}, &c->cross_v[l]);
        }
        snprintf(name, sizeof name, "cross/layer_%d/bias", l);
        if (st == DT_OK)
            st = dt_arena_add(params, name, 1, (int[]){c->D}, &c->cross_b[l]);
    }
    c->cross_out = -1;
    if (st == DT_OK && c->L > 0 && !c->spec.cross_stacked)
        st = dt_arena_add(params, "cross/logits/kernel", 2, (int[]){c->D, c->N}, &c->cross_out);
    return st;
}

static dt_status check_spec(const dt_columns_spec *s)
{
    if (s->n_outputs < 1 || s->n_slots < 0 || s->n_dense < 0 || s->n_tables < 0 ||
        s->n_tables > DT_MAX_COLUMN_TABLES || s->n_linear < 0 ||
        s->n_linear > DT_MAX_COLUMN_INPUTS || s->n_deep < 0 || s->n_deep > DT_MAX_COLUMN_INPUTS ||
        s->n_cross < 0 || s->n_cross > DT_MAX_CROSS_LAYERS || s->projection_dim < 0)
        return dt_error(DT_ERR_INVALID, "a columns model's sizes are out of range");
    for (int t = 0; t < s->n_tables; t++)
        if (s->tables[t].rows < 1 || s->tables[t].dim < 1)
            return dt_error(DT_ERR_INVALID, "table %s: %lld rows of %d", s->tables[t].name,
                            (long long)s->tables[t].rows, s->tables[t].dim);
    return DT_OK;
}

/* The slot table t reads, when its only reader is one embedding or weights input (its places
 * are then that slot's entries in row order); -1 otherwise. */
static int only_slot(const dt_cols *c, int t)
{
    int slot = -1, readers = 0;
    const dt_column_input *lists[2] = {c->spec.deep, c->spec.linear};
    int counts[2] = {c->spec.n_deep, c->spec.n_linear};
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < counts[l]; i++) {
            const dt_column_input *in = &lists[l][i];
            bool no_table = l == 0 && (in->kind == DT_INPUT_NUMERIC ||
                                       in->kind == DT_INPUT_INDICATOR);
            if (in->table != t || no_table)
                continue;
            readers++;
            bool by_slot = in->kind == DT_INPUT_EMBEDDING || in->kind == DT_INPUT_WEIGHTS;
            slot = by_slot ? in->slot : -2;
        }
    return readers == 1 && slot >= 0 ? slot : -1;
}

/* Tables read through one slot each share the places of the first table read through it. */
static void find_same_places(dt_cols *c)
{
    for (int t = 0; t < c->spec.n_tables; t++) {
        c->same_places[t] = -1;
        int s = only_slot(c, t);
        for (int u = 0; s >= 0 && u < t && c->same_places[t] < 0; u++)
            if (c->same_places[u] < 0 && c->spec.tables[u].rows > 1 && only_slot(c, u) == s)
                c->same_places[t] = u;
    }
}

/* Each slot's bound on its ids: the rows of every table an input reads it through, and an
 * indicator's buckets (a slot read by nothing takes any id below 2^48). */
static void set_slot_limits(dt_cols *c)
{
    for (int s = 0; s < c->S; s++)
        c->slot_limit[s] = (int64_t)1 << 48;
    const dt_column_input *lists[2] = {c->spec.deep, c->spec.linear};
    int counts[2] = {c->spec.n_deep, c->spec.n_linear};
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < counts[l]; i++) {
            const dt_column_input *in = &lists[l][i];
            int64_t rows = in->kind == DT_INPUT_INDICATOR ? in->buckets
                           : in->kind == DT_INPUT_EMBEDDING || in->kind == DT_INPUT_WEIGHTS
                               ? c->spec.tables[in->table].rows
                               : -1;
            if (rows >= 0 && in->slot >= 0 && in->slot < c->S && rows < c->slot_limit[in->slot])
                c->slot_limit[in->slot] = rows;
        }
}

dt_status dt_cols_create(const dt_columns_spec *spec, int max_batch, dt_arena *params,
                         dt_pool *pool, const dt_model_options *opts, dt_cols **out)
{
    *out = NULL;
    dt_status st = check_spec(spec);
    if (st)
        return st;
    dt_cols *c = calloc(1, sizeof *c);
    if (!c)
        return dt_error(DT_ERR_NOMEM, "no memory for a columns model");
    c->spec = *spec;
    c->N = spec->n_outputs, c->S = spec->n_slots, c->max_batch = max_batch, c->pool = pool;
    c->L = spec->n_cross, c->R = spec->projection_dim;
    int D = 0;
    c->deep_off = calloc((size_t)spec->n_deep + 1, sizeof *c->deep_off);
    for (int i = 0; c->deep_off && i < spec->n_deep; i++) {
        c->deep_off[i] = D;
        D += input_width(c, &spec->deep[i]);
    }
    c->D = D;
    size_t BD = (size_t)max_batch * (size_t)D;
    c->tables = calloc((size_t)spec->n_tables + 1, sizeof *c->tables);
    c->grads = calloc((size_t)spec->n_tables + 1, sizeof *c->grads);
    c->places = calloc((size_t)spec->n_tables + 1, sizeof *c->places);
    c->same_places = malloc(((size_t)spec->n_tables + 1) * sizeof *c->same_places);
    c->slot_limit = malloc((size_t)(c->S + 1) * sizeof *c->slot_limit);
    c->slot_total = calloc((size_t)(c->S + 1), sizeof *c->slot_total);
    c->slot_lo = malloc((size_t)max_batch * (size_t)(c->S + 1) * sizeof *c->slot_lo);
    c->col_stride = (size_t)max_batch + 8;
    c->slot_col = malloc(c->col_stride * (size_t)(c->S + 1) * sizeof *c->slot_col);
    c->deep = floats(BD);
    c->comb = floats((size_t)max_batch * (size_t)spec->n_deep);
    c->dx0 = floats(BD), c->dcur = floats(BD), c->dnext = floats(BD), c->du = floats(BD);
    c->dtt = floats((size_t)max_batch * (size_t)c->R);
    bool ok = c->deep_off && c->tables && c->grads && c->places && c->same_places &&
              c->slot_limit &&
              c->slot_total && c->slot_lo && c->slot_col && c->deep && c->comb &&
              c->dx0 && c->dcur && c->dnext && c->du && c->dtt;
    if (ok && spec->fm && spec->n_deep > 0)
        ok = (c->fm_sums = floats((size_t)max_batch * input_width(c, &spec->deep[0]))) &&
             (c->fm_sq = floats((size_t)input_width(c, &spec->deep[0]))) &&
             (c->fm_out = floats((size_t)max_batch));
    size_t fields = (size_t)max_batch * (size_t)spec->n_deep;
    if (ok && fields_of_one_width(c))
        ok = (c->fm_rows = malloc(fields * sizeof *c->fm_rows)) &&
             (c->fm_weights = floats(fields)) &&
             (c->fm_zeros = calloc((size_t)input_width(c, &spec->deep[0]), sizeof(float)));
    c->xs[0] = c->deep;
    for (int l = 0; ok && l < c->L; l++)
        ok = (c->xs[l + 1] = floats(BD)) && (c->us[l] = floats(BD)) &&
             (c->ts[l] = floats((size_t)max_batch * (size_t)c->R));
    if (!ok) {
        st = dt_error(DT_ERR_NOMEM, "no memory for a columns model");
        goto fail;
    }
    for (int t = 0; t < spec->n_tables; t++)
        dt_sparse_rows_init(&c->grads[t], spec->tables[t].dim);
    /* sets the dynamic tables' rows */
    st = dt_col_keys_create(&c->spec, opts ? opts->dynamic_shards : 1, opts && opts->keys_local,
                            &c->keys);
    for (int t = 0; t < spec->n_tables && st == DT_OK; t++)
        st = dt_table_create(&c->tables[t], c->spec.tables[t].name, c->spec.tables[t].rows,
                             c->spec.tables[t].dim);
    if (st == DT_OK && c->keys)
        st = dt_col_keys_attach(c->keys, c->tables);
    if (st == DT_OK) {
        set_slot_limits(c);
        find_same_places(c);
    }
    if (st == DT_OK)
        st = declare_cross(c, params);
    if (st)
        goto fail;
    *out = c;
    return DT_OK;
fail:
    dt_cols_destroy(c);
    return st;
}

void dt_cols_destroy(dt_cols *c)
{
    if (!c)
        return;
    dt_col_keys_destroy(c->keys);
    for (int t = 0; c->tables && t < c->spec.n_tables; t++)
        dt_table_free(&c->tables[t]);
    for (int t = 0; c->grads && t < c->spec.n_tables; t++)
        dt_sparse_rows_free(&c->grads[t]);
    for (int l = 0; l < c->L; l++)
        free(c->xs[l + 1]), free(c->us[l]), free(c->ts[l]);
    free(c->tables), free(c->grads), free(c->slot_lo), free(c->slot_col), free(c->deep);
    free(c->comb);
    for (int t = 0; c->places && t < c->spec.n_tables; t++)
        free(c->places[t].ids), free(c->places[t].slot), free(c->places[t].scratch),
            free(c->places[t].offsets), free(c->places[t].grouped), free(c->places[t].g),
            free(c->places[t].scale);
    free(c->places), free(c->same_places), free(c->slot_limit), free(c->slot_total);
    free(c->deep_off), free(c->fm_rows), free(c->fm_weights), free(c->fm_zeros);
    free(c->fm_sums), free(c->fm_sq), free(c->fm_out);
    free(c->dx0), free(c->dcur), free(c->dnext), free(c->du), free(c->dtt);
    free(c);
}

void dt_cols_init(dt_cols *c, uint64_t seed, dt_pool *pool)
{
    for (int t = 0; t < c->spec.n_tables; t++) {
        float sd;
        uint64_t off;
        dt_cols_table_init(c, t, &sd, &off);
        if (dt_col_keys_dynamic(c->keys, t)) /* rows are drawn as keys are admitted */
            dt_col_keys_set_seed(c->keys, t, seed + off);
        else if (sd > 0) /* each table its own stream: the seed moved by the table's index */
            dt_table_init_normal(&c->tables[t], sd, seed + off, pool);
    }
}

int dt_cols_kernel_views(const dt_cols *c, int *views, int max)
{
    int n = 0;
    for (int l = 0; l < c->L; l++) {
        int v[2] = {c->R ? c->cross_u[l] : c->cross_w[l], c->R ? c->cross_v[l] : -1};
        for (int k = 0; k < 2; k++)
            if (v[k] >= 0 && n < max)
                views[n++] = v[k];
    }
    if (c->cross_out >= 0 && n < max)
        views[n++] = c->cross_out;
    return n;
}

int dt_cols_num_tables(const dt_cols *c) { return c->spec.n_tables; }
dt_table *dt_cols_table(dt_cols *c, int i) { return &c->tables[i]; }
dt_sparse_rows *dt_cols_table_grad(dt_cols *c, int i) { return &c->grads[i]; }
bool dt_cols_table_linear(const dt_cols *c, int i) { return c->spec.tables[i].linear; }
int dt_cols_layers_width(const dt_cols *c) { return c->D; }
dt_keymap *dt_cols_keymap(const dt_cols *c, int t) { return dt_col_keys_map(c->keys, t); }
bool dt_cols_table_dynamic(const dt_cols *c, int t) { return dt_col_keys_dynamic(c->keys, t); }
const int64_t *dt_cols_local_keys(const dt_cols *c, int t) { return dt_col_keys_local(c->keys, t); }

void dt_cols_table_counts(const dt_cols *c, int t, uint32_t *times)
{
    const table_places *tp = &c->places[t];
    for (size_t u = 0; u < tp->n_unique; u++)
        times[u] = tp->offsets[u + 1] - tp->offsets[u];
}

void dt_cols_share_keys(dt_cols *c, const dt_cols *owner)
{
    if (c->keys && owner->keys)
        dt_col_keys_share(c->keys, owner->keys);
}

void dt_cols_tables_updated(dt_cols *c, int64_t step)
{
    c->step = step;
    if (c->keys)
        dt_col_keys_updated(c->keys, step);
}

void dt_cols_set_step(dt_cols *c, int64_t step)
{
    c->step = step;
    if (c->keys) /* the save at that step ran a whole eviction pass */
        dt_col_keys_set_pass_step(c->keys, step);
}

const float *dt_cols_labels(const dt_cols *c) { return c->batch->labels; }

const float *dt_cols_deep_input(const dt_cols *c)
{
    return c->L > 0 && c->spec.cross_stacked ? c->xs[c->L] : c->deep;
}

/* ---- Forward ---- */

static dt_status find_places(dt_cols *c);

static int64_t *slots_of(const dt_cols *c, int b) { return c->slot_lo + (size_t)b * (c->S + 1); }

/* Where slot s's entries start in each row of the batch (slot s + 1's end them). */
static const int64_t *slot_starts(const dt_cols *c, int s)
{
    return c->slot_col + (size_t)s * c->col_stride;
}

/* Where each slot's entries of row b start; DT_ERR_INVALID for an entry out of order, of an
 * unknown slot, or with a weight that is not finite. */
static dt_status index_row(dt_cols *c, const dt_elem *e, int b)
{
    int64_t *lo = slots_of(c, b);
    int64_t j = e->sp_row[b], end = e->sp_row[b + 1];
    for (int s = 0; s <= c->S; s++) {
        lo[s] = j;
        while (s < c->S && j < end && (e->sp_ids[j] >> 48) == s) {
            if (!isfinite(e->sp_vals[j]))
                return dt_error(DT_ERR_INVALID, "example %d: slot %d: a weight that is not finite",
                                b, s);
            if (entry_id(e->sp_ids[j]) >= c->slot_limit[s])
                return dt_error(DT_ERR_INVALID, "example %d: slot %d: id %lld is outside the "
                                "%lld rows", b, s, (long long)entry_id(e->sp_ids[j]),
                                (long long)c->slot_limit[s]);
            j++;
        }
        if (s < c->S)
            c->slot_total[s] += (size_t)(j - lo[s]);
    }
    if (j != end)
        return dt_error(DT_ERR_INVALID, "example %d: entry %lld: slot %lld is not one of the %d "
                        "of the model, or the entries are out of slot order", b,
                        (long long)(j - e->sp_row[b]), (long long)(e->sp_ids[j] >> 48), c->S);
    return DT_OK;
}

static void transpose_slots(dt_cols *c)
{
    size_t stride = (size_t)c->S + 1;
    const int64_t *lo = c->slot_lo;
    for (int b = 0; b < c->B; b++, lo += stride)
        for (size_t s = 0; s < stride; s++)
            c->slot_col[s * c->col_stride + (size_t)b] = lo[s];
}

static float combiner_factor(dt_combiner k, const dt_elem *e, int64_t lo, int64_t hi)
{
    if (k == DT_COMBINER_SUM)
        return 1.0f;
    double s = 0;
    for (int64_t j = lo; j < hi; j++)
        s += k == DT_COMBINER_SQRTN ? (double)e->sp_vals[j] * e->sp_vals[j] : e->sp_vals[j];
    if (k == DT_COMBINER_SUM || s <= 0)
        return 1.0f;
    return (float)(k == DT_COMBINER_MEAN ? 1.0 / s : 1.0 / sqrt(s));
}

static const float *dense_of(const dt_elem *e, int b, int off)
{
    return e->dense + (size_t)b * e->n_dense + off;
}

/* Deep input i of row b into o (its width). */
static inline __attribute__((always_inline)) void deep_input(dt_cols *c, const dt_elem *e, int b,
                                                             const int64_t *lo, int i, float *o)
{
    const dt_column_input *in = deep_in(c, i);
    if (in->kind == DT_INPUT_NUMERIC) {
        memcpy(o, dense_of(e, b, in->dense_off), (size_t)in->width * sizeof *o);
        return;
    }
    if (in->kind == DT_INPUT_NUMERIC_EMBEDDING) {
        const dt_table *t = &c->tables[in->table];
        float x = dense_of(e, b, in->dense_off)[0];
        for (int k = 0; k < t->dim; k++)
            o[k] = x * t->data[k];
        return;
    }
    int64_t j0 = lo[in->slot], j1 = lo[in->slot + 1];
    if (in->kind == DT_INPUT_INDICATOR) {
        memset(o, 0, (size_t)in->buckets * sizeof *o);
        for (int64_t j = j0; j < j1; j++)
            o[entry_id(e->sp_ids[j])] += e->sp_vals[j];
        return;
    }
    const dt_table *t = &c->tables[in->table];
    float f = combiner_factor(in->combiner, e, j0, j1);
    c->comb[(size_t)b * c->spec.n_deep + i] = f;
    if (j1 - j0 == 1) { /* one id, the usual case: its scaled row, written once */
        const float *r = dt_table_row(t, entry_id(e->sp_ids[j0]));
        float w = e->sp_vals[j0] * f;
        for (int k = 0; k < t->dim; k++)
            o[k] = w * r[k];
        return;
    }
    memset(o, 0, (size_t)t->dim * sizeof *o);
    for (int64_t j = j0; j < j1; j++) {
        const float *r = dt_table_row(t, entry_id(e->sp_ids[j]));
        float w = e->sp_vals[j] * f;
        for (int k = 0; k < t->dim; k++)
            o[k] += w * r[k];
    }
}

/* Starts loading the table rows that input `in` reads in the row whose slots start at lo:
 * rows of tables far larger than the caches are misses more often than not, and without a
 * prefetch each is waited for in turn. (Inlined: GCC drops the calls to a function that does
 * nothing but prefetch.) */
static inline __attribute__((always_inline)) void prefetch_input(const dt_cols *c,
                                                                 const dt_elem *e,
                                                                 const dt_column_input *in,
                                                                 const int64_t *lo)
{
    const dt_table *t = &c->tables[in->table];
    for (int64_t j = lo[in->slot]; j < lo[in->slot + 1]; j++)
        dt_prefetch_read(dt_table_row(t, entry_id(e->sp_ids[j])), (size_t)t->dim * sizeof(float));
}

/* DeepFM's pairwise term from a row's per-k sums and sums of squares over its fields:
 * 1/2 sum_k (sum_k^2 - sq_k), the k's added last. */
static float fm_of_sums(const float *sum, const float *sq, int K)
{
    double tot = 0;
    for (int k = 0; k < K; k++)
        tot += (double)sum[k] * sum[k] - sq[k];
    return (float)(0.5 * tot);
}

/* DeepFM's usual field, K wide: an embedding of one id or a numeric times its row. Written to o
 * as deep_input writes it and added to the row's sums in the same pass, with the same
 * operations in the same order as the general way (deep_input, then the sums), which a field
 * of any other form takes: returns false for it. One pass instead of two and no branch per
 * element make this the half of forward that DeepFM's lookups are. */
static inline __attribute__((always_inline)) bool fm_field(dt_cols *c, const dt_elem *e, int b,
                                                           const int64_t *lo, int i, int K,
                                                           float *o, float *sum, float *sq)
{
    const dt_column_input *in = deep_in(c, i);
    const dt_table *t = &c->tables[in->table];
    const float *r;
    float w;
    if (t->dim != K)
        return false;
    if (in->kind == DT_INPUT_EMBEDDING && lo[in->slot + 1] - lo[in->slot] == 1) {
        int64_t j = lo[in->slot];
        float f = combiner_factor(in->combiner, e, j, j + 1);
        c->comb[(size_t)b * c->spec.n_deep + i] = f;
        r = dt_table_row(t, entry_id(e->sp_ids[j]));
        w = e->sp_vals[j] * f;
    } else if (in->kind == DT_INPUT_NUMERIC_EMBEDDING) {
        r = t->data;
        w = dense_of(e, b, in->dense_off)[0];
    } else {
        return false;
    }
    for (int k = 0; k < K; k++) {
        float x = w * r[k];
        o[k] = x;
        sum[k] += x;
        sq[k] += x * x;
    }
    return true;
}

/* Inputs whose rows are in flight ahead of the one being written (dt_fm_forward_lookup's
 * distance): a whole row's (39 for Criteo) filled the load queue, so that the prefetches
 * themselves stalled. */
#define LOOKUP_AHEAD 12

/* Rows ahead whose linear weight is fetched while one input is added over the batch. */
#define LINEAR_AHEAD 32

/* Row b's deep inputs, x0; with DeepFM's term, its per-k sums over the fields (K wide each)
 * taken as each field is written, in field order, and the row's term. The embedding rows of the
 * input LOOKUP_AHEAD on (in this row, or the next from its slots `next`; NULL: none) are
 * prefetched as each input is written. */
DT_MULTI_ISA
static void deep_row(dt_cols *c, const dt_elem *e, int b, const int64_t *next)
{
    float *out = c->deep + (size_t)b * c->D;
    const int64_t *lo = slots_of(c, b);
    bool fm = c->spec.fm && c->spec.n_deep > 0;
    int K = fm ? c->spec.tables[deep_in(c, 0)->table].dim : 0;
    float *sum = fm ? c->fm_sums + (size_t)b * K : NULL, *sq = c->fm_sq;
    for (int k = 0; k < K; k++)
        sum[k] = 0, sq[k] = 0;
    int n = c->spec.n_deep, ahead = n < LOOKUP_AHEAD ? n : LOOKUP_AHEAD;
    for (int i = 0; i < n; i++) {
        float *o = out + c->deep_off[i];
        int a = i + ahead; /* the input `ahead` on, in this row or the next */
        const int64_t *at = a < n ? lo : next;
        if (a >= n)
            a -= n;
        if (at && deep_in(c, a)->kind == DT_INPUT_EMBEDDING)
            prefetch_input(c, e, deep_in(c, a), at);
        if (fm && fm_field(c, e, b, lo, i, K, o, sum, sq))
            continue;
        deep_input(c, e, b, lo, i, o);
        for (int k = 0; k < K; k++) {
            sum[k] += o[k];
            sq[k] += o[k] * o[k];
        }
    }
    if (fm)
        c->fm_out[b] = fm_of_sums(sum, sq, K);
}

/* DeepFM whose fields are all embeddings or numeric embeddings K wide (the usual spec, and
 * today's --model deepfm as one): then a batch of one id per field is read as
 * dt_fm_forward_lookup reads it, a flat run of rows. */
static bool fields_of_one_width(const dt_cols *c)
{
    if (!c->spec.fm || c->spec.n_deep == 0)
        return false;
    int K = c->spec.tables[deep_in(c, 0)->table].dim;
    for (int i = 0; i < c->spec.n_deep; i++) {
        const dt_column_input *in = deep_in(c, i);
        if ((in->kind != DT_INPUT_EMBEDDING && in->kind != DT_INPUT_NUMERIC_EMBEDDING) ||
            c->spec.tables[in->table].dim != K)
            return false;
    }
    return true;
}

/* Each field's row and factor over the batch, as deep_input takes them (the combiner's factor
 * to comb): false when a field of some row has other than one id (deep_row then writes it). */
static bool fm_fields_of_batch(dt_cols *c, const dt_elem *e)
{
    int n = c->spec.n_deep;
    for (int b = 0; b < e->n; b++) {
        const int64_t *lo = slots_of(c, b);
        size_t p = (size_t)b * (size_t)n;
        for (int i = 0; i < n; i++, p++) {
            const dt_column_input *in = deep_in(c, i);
            const dt_table *t = &c->tables[in->table];
            if (in->kind == DT_INPUT_NUMERIC_EMBEDDING) {
                c->fm_rows[p] = t->data;
                c->fm_weights[p] = dense_of(e, b, in->dense_off)[0];
                continue;
            }
            int64_t j = lo[in->slot], ids = lo[in->slot + 1] - j;
            if (ids > 1)
                return false;
            float f = combiner_factor(in->combiner, e, j, j + ids);
            c->comb[p] = f;
            /* A missing value: a row of zeros, as deep_input writes it. */
            c->fm_rows[p] = ids ? dt_table_row(t, entry_id(e->sp_ids[j])) : c->fm_zeros;
            c->fm_weights[p] = ids ? e->sp_vals[j] * f : 0.0f;
        }
    }
    return true;
}

/* x0 and DeepFM's sums and term from fm_fields_of_batch's rows, each field's written and summed
 * in one pass (deep_row's operations in its order), the rows prefetched LOOKUP_AHEAD fields
 * ahead. */
DT_MULTI_ISA
static void fm_fields_forward(dt_cols *c, int B)
{
    int n = c->spec.n_deep, K = c->spec.tables[deep_in(c, 0)->table].dim;
    size_t N = (size_t)B * (size_t)n, bytes = (size_t)K * sizeof(float);
    for (size_t p = 0; p < N && p < LOOKUP_AHEAD; p++)
        dt_prefetch_read(c->fm_rows[p], bytes);
    float *sq = c->fm_sq;
    for (int b = 0; b < B; b++) {
        float *o = c->deep + (size_t)b * c->D, *sum = c->fm_sums + (size_t)b * K;
        for (int k = 0; k < K; k++)
            sum[k] = 0, sq[k] = 0;
        for (size_t p = (size_t)b * n; p < (size_t)(b + 1) * n; p++, o += K) {
            if (p + LOOKUP_AHEAD < N)
                dt_prefetch_read(c->fm_rows[p + LOOKUP_AHEAD], bytes);
            const float *r = c->fm_rows[p];
            float w = c->fm_weights[p];
            for (int k = 0; k < K; k++) {
                float x = w * r[k];
                o[k] = x;
                sum[k] += x;
                sq[k] += x * x;
            }
        }
        c->fm_out[b] = fm_of_sums(sum, sq, K);
    }
}

static void cross_forward(dt_cols *c, int B, const dt_arena *params)
{
    for (int l = 0; l < c->L; l++) {
        const float *W = c->cross_w[l] >= 0 ? dt_arena_view_data(params, c->cross_w[l]) : NULL;
        const float *U = c->cross_u[l] >= 0 ? dt_arena_view_data(params, c->cross_u[l]) : NULL;
        const float *V = c->cross_v[l] >= 0 ? dt_arena_view_data(params, c->cross_v[l]) : NULL;
        dt_cross_forward(c->pool, B, c->D, c->R, c->deep, c->xs[l], W, U, V,
                         dt_arena_view_data(params, c->cross_b[l]), c->ts[l], c->us[l],
                         c->xs[l + 1]);
    }
}

dt_status dt_cols_prepare(dt_cols *c, const dt_elem *e, bool training)
{
    if (e->n_dense != c->spec.n_dense)
        return dt_error(DT_ERR_INVALID, "rows of %d dense values for a model over %d", e->n_dense,
                        c->spec.n_dense);
    const dt_elem *given = e;
    c->prepared = NULL;
    if (c->keys) {
        dt_status st = dt_col_keys_view(c->keys, e, training, c->step + 1, &e);
        if (st)
            return st;
    }
    c->B = e->n;
    c->batch = e;
    memset(c->slot_total, 0, (size_t)(c->S + 1) * sizeof *c->slot_total);
    for (int b = 0; b < e->n; b++) {
        dt_status st = index_row(c, e, b);
        if (st)
            return st;
    }
    transpose_slots(c);
    dt_status st = find_places(c);
    if (st == DT_OK)
        c->prepared = given;
    return st;
}

dt_status dt_cols_forward(dt_cols *c, const dt_elem *e, const dt_arena *params, bool training)
{
    dt_status st = c->prepared == e ? DT_OK : dt_cols_prepare(c, e, training);
    c->prepared = NULL;
    if (st)
        return st;
    e = c->batch; /* dynamic tables: the view whose ids are rows */
    bool fields = c->fm_rows && fm_fields_of_batch(c, e);
    if (fields)
        fm_fields_forward(c, e->n);
    else
        for (int b = 0; b < e->n; b++)
            deep_row(c, e, b, b + 1 < e->n ? slots_of(c, b + 1) : NULL);
    cross_forward(c, e->n, params);
    return DT_OK;
}

void dt_cols_table_ids(const dt_cols *c, int t, const int64_t **ids, size_t *n)
{
    *ids = c->grads[t].ids;
    *n = c->places[t].n_unique;
}

void dt_cols_table_init(const dt_cols *c, int t, float *stddev, uint64_t *seed_offset)
{
    *stddev = c->spec.tables[t].init_stddev;
    *seed_offset = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1);
}

/* Linear input in's terms added to every row's logits z (B, N). */
static void add_linear_input(const dt_cols *c, const dt_column_input *in, int B, float *z)
{
    const dt_elem *e = c->batch;
    const dt_table *t = &c->tables[in->table];
    int N = c->N;
    if (in->kind == DT_INPUT_BIAS) {
        for (int b = 0; b < B; b++, z += N)
            for (int n = 0; n < N; n++)
                z[n] += t->data[n];
    } else if (in->kind == DT_INPUT_NUMERIC) {
        for (int b = 0; b < B; b++, z += N) {
            const float *x = dense_of(e, b, in->dense_off);
            for (int k = 0; k < in->width; k++)
                for (int n = 0; n < N; n++)
                    z[n] += x[k] * dt_table_row(t, in->row0 + k)[n];
        }
    } else {
        const int64_t *lo = slot_starts(c, in->slot), *hi = slot_starts(c, in->slot + 1);
        const int64_t *sp_ids = e->sp_ids;
        const float *sp_vals = e->sp_vals;
        for (int b = 0; b < B; b++, z += N) {
            if (b + LINEAR_AHEAD < B && lo[b + LINEAR_AHEAD] < hi[b + LINEAR_AHEAD])
                dt_prefetch_read(dt_table_row(t, entry_id(sp_ids[lo[b + LINEAR_AHEAD]])),
                                 (size_t)N * sizeof(float));
            for (int64_t j = lo[b]; j < hi[b]; j++) {
                const float *r = dt_table_row(t, entry_id(sp_ids[j]));
                for (int n = 0; n < N; n++)
                    z[n] += sp_vals[j] * r[n];
            }
        }
    }
}

/* Rows whose cross output terms are summed side by side: one row's sum is a chain of D
 * dependent additions, which a block of rows runs in parallel, each row's in its own order. */
#define CROSS_ROWS 16

/* The parallel structure's output layer: z (B, N) += x_L (B, D) Wout (D, N), each row's terms
 * added in order of d. */
static void add_cross_output(const dt_cols *c, int B, const float *wout, float *z)
{
    int N = c->N, D = c->D, b = 0;
    const float *xl = c->xs[c->L];
    for (; N == 1 && b + CROSS_ROWS <= B; b += CROSS_ROWS) {
        float acc[CROSS_ROWS];
        for (int i = 0; i < CROSS_ROWS; i++)
            acc[i] = z[b + i];
        for (int d = 0; d < D; d++)
            for (int i = 0; i < CROSS_ROWS; i++)
                acc[i] += xl[(size_t)(b + i) * D + d] * wout[d];
        for (int i = 0; i < CROSS_ROWS; i++)
            z[b + i] = acc[i];
    }
    for (; b < B; b++) {
        float *zb = z + (size_t)b * N;
        const float *x = xl + (size_t)b * D;
        for (int d = 0; d < D; d++)
            for (int n = 0; n < N; n++)
                zb[n] += x[d] * wout[(size_t)d * N + n];
    }
}

/* Input by input over the batch, each row's logits taking the same additions in the same order
 * as a row at a time would: one input's table is read while it stays in cache, where a row's
 * inputs would read a line of every table in turn. */
void dt_cols_logits(dt_cols *c, int B, const dt_arena *params, const float *deep, float *logits)
{
    int N = c->N;
    size_t BN = (size_t)B * (size_t)N;
    for (size_t k = 0; k < BN; k++)
        logits[k] = deep ? deep[k] : 0.0f;
    for (int i = 0; i < c->spec.n_linear; i++)
        add_linear_input(c, lin_in(c, i), B, logits);
    if (c->spec.fm && c->spec.n_deep > 0)
        for (int b = 0; b < B; b++)
            logits[(size_t)b * N] += c->fm_out[b];
    if (c->cross_out >= 0)
        add_cross_output(c, B, dt_arena_view_data(params, c->cross_out), logits);
}

/* ---- Backward ---- */

/* Every place (an id read by an input) of table t in the batch, in one fixed order: its deep
 * inputs, then its linear ones, each over the rows. Forward lists the places' ids and finds
 * the batch's unique ids once (list_places); backward lists each place's gradient row and
 * factor in the same order (grad_places) and sums them per unique id, so that the sums depend
 * on nothing but the batch. */

/* Input k of that order (k < n_deep + n_linear), *deep saying which of the two it is (a deep
 * input's index is k); NULL when it reads another table than t. */
static const dt_column_input *place_input(const dt_cols *c, int t, int k, bool *deep)
{
    *deep = k < c->spec.n_deep;
    const dt_column_input *in = *deep ? deep_in(c, k) : lin_in(c, k - c->spec.n_deep);
    return in->table == t ? in : NULL;
}

/* Appends the ids of input in's slot over the batch to ids from at; returns the new end. */
static size_t slot_ids(const dt_cols *c, const dt_column_input *in, int64_t *ids, size_t at)
{
    const int64_t *sp_ids = c->batch->sp_ids;
    const int64_t *lo = slot_starts(c, in->slot), *hi = slot_starts(c, in->slot + 1);
    for (int b = 0; b < c->B; b++)
        for (int64_t j = lo[b]; j < hi[b]; j++)
            ids[at++] = entry_id(sp_ids[j]);
    return at;
}

static void list_places(dt_cols *c, int t)
{
    table_places *tp = &c->places[t];
    size_t at = 0;
    for (int i = 0; i < c->spec.n_deep + c->spec.n_linear; i++) {
        bool deep;
        const dt_column_input *in = place_input(c, t, i, &deep);
        if (!in)
            continue;
        if (deep) {
            if (in->kind == DT_INPUT_EMBEDDING)
                at = slot_ids(c, in, tp->ids, at);
            else if (in->kind == DT_INPUT_NUMERIC_EMBEDDING)
                for (int b = 0; b < c->B; b++)
                    tp->ids[at++] = 0;
        } else if (in->kind == DT_INPUT_BIAS)
            for (int b = 0; b < c->B; b++)
                tp->ids[at++] = 0;
        else if (in->kind == DT_INPUT_NUMERIC)
            for (int b = 0; b < c->B; b++)
                for (int k = 0; k < in->width; k++)
                    tp->ids[at++] = in->row0 + k;
        else
            at = slot_ids(c, in, tp->ids, at);
    }
}

/* The gradient rows and factors of input in's places: per row, g_of(b) times each entry's
 * weight and row factor scale[b * scale_stride] (scale NULL: 1). */
static size_t slot_grads(const dt_cols *c, const dt_column_input *in, const float *g0,
                         size_t g_stride, const float *scale, size_t scale_stride,
                         table_places *tp, size_t at)
{
    const float *sp_vals = c->batch->sp_vals;
    const int64_t *lo = slot_starts(c, in->slot), *hi = slot_starts(c, in->slot + 1);
    const float **places_g = tp->g;
    float *places_scale = tp->scale;
    for (int b = 0; b < c->B; b++) {
        const float *g = g0 + (size_t)b * g_stride;
        float f = scale ? scale[(size_t)b * scale_stride] : 1.0f;
        for (int64_t j = lo[b]; j < hi[b]; j++, at++) {
            places_g[at] = g;
            places_scale[at] = sp_vals[j] * f;
        }
    }
    return at;
}

static void grad_places(dt_cols *c, int t, const float *dlogits, const float *dx0)
{
    const dt_elem *e = c->batch;
    table_places *tp = &c->places[t];
    size_t at = 0;
    for (int i = 0; i < c->spec.n_deep + c->spec.n_linear; i++) {
        bool deep;
        const dt_column_input *in = place_input(c, t, i, &deep);
        if (!in)
            continue;
        if (deep) {
            if (in->kind == DT_INPUT_EMBEDDING) {
                at = slot_grads(c, in, dx0 + c->deep_off[i], (size_t)c->D, c->comb + i,
                                (size_t)c->spec.n_deep, tp, at);
            } else if (in->kind == DT_INPUT_NUMERIC_EMBEDDING) {
                for (int b = 0; b < c->B; b++, at++) {
                    tp->g[at] = dx0 + (size_t)b * c->D + c->deep_off[i];
                    tp->scale[at] = dense_of(e, b, in->dense_off)[0];
                }
            }
        } else if (in->kind == DT_INPUT_BIAS) {
            for (int b = 0; b < c->B; b++, at++) {
                tp->g[at] = dlogits + (size_t)b * c->N;
                tp->scale[at] = 1.0f;
            }
        } else if (in->kind == DT_INPUT_NUMERIC) {
            for (int b = 0; b < c->B; b++) {
                const float *x = dense_of(e, b, in->dense_off);
                for (int k = 0; k < in->width; k++, at++) {
                    tp->g[at] = dlogits + (size_t)b * c->N;
                    tp->scale[at] = x[k];
                }
            }
        } else {
            at = slot_grads(c, in, dlogits, (size_t)c->N, NULL, 0, tp, at);
        }
    }
}

/* The places an input has in the batch: its slot's entries, or one per row (a bias, a numeric
 * field's embedding), or one per row and value (the linear numeric kernel). */
static size_t input_places(const dt_cols *c, const dt_column_input *in)
{
    switch (in->kind) {
    case DT_INPUT_EMBEDDING:
    case DT_INPUT_WEIGHTS: return c->slot_total[in->slot];
    case DT_INPUT_NUMERIC_EMBEDDING:
    case DT_INPUT_BIAS: return (size_t)c->B;
    case DT_INPUT_NUMERIC: return (size_t)c->B * (size_t)in->width;
    case DT_INPUT_INDICATOR: return 0;
    }
    return 0;
}

/* The places of table t in the batch. A deep numeric input reads no table (its table is 0,
 * unused), so only a linear one counts. */
static size_t count_places(const dt_cols *c, int t)
{
    size_t n = 0;
    for (int i = 0; i < c->spec.n_deep + c->spec.n_linear; i++) {
        bool deep;
        const dt_column_input *in = place_input(c, t, i, &deep);
        if (in && !(deep && (in->kind == DT_INPUT_NUMERIC || in->kind == DT_INPUT_INDICATOR)))
            n += input_places(c, in);
    }
    return n;
}

static dt_status grow_places(table_places *tp, size_t n)
{
    if (n <= tp->cap)
        return DT_OK;
    size_t cap = n + n / 2;
    free(tp->ids), free(tp->slot), free(tp->scratch), free(tp->offsets), free(tp->grouped);
    free(tp->g), free(tp->scale);
    tp->ids = malloc(cap * sizeof *tp->ids);
    tp->slot = malloc(cap * sizeof *tp->slot);
    tp->scratch = malloc(dt_embedding_scratch_bytes(cap));
    tp->offsets = malloc((cap + 1) * sizeof *tp->offsets);
    tp->grouped = malloc(cap * sizeof *tp->grouped);
    tp->g = malloc(cap * sizeof *tp->g);
    tp->scale = malloc(cap * sizeof *tp->scale);
    tp->cap = tp->ids && tp->slot && tp->scratch && tp->offsets && tp->grouped && tp->g &&
                      tp->scale
                  ? cap
                  : 0;
    return tp->cap ? DT_OK : dt_error(DT_ERR_NOMEM, "no memory for %zu table places", cap);
}

/* Each table's places and unique ids of the batch: its gradient's ids, in forward, which can
 * fail for memory (backward cannot). */
/* A table of one row (a bias, a numeric field's embedding): every place is row 0's. */
static void one_row_places(table_places *tp, dt_sparse_rows *gr, size_t n)
{
    tp->n_unique = n ? 1 : 0;
    gr->ids[0] = 0;
    tp->offsets[0] = 0;
    tp->offsets[1] = (uint32_t)n;
    for (size_t p = 0; p < n; p++)
        tp->grouped[p] = (uint32_t)p;
}

/* Table t's places as table `from` found them: the same slot read once each, so the same ids
 * in the same order (a column's first-order weights and its embedding). */
static void copy_places(dt_cols *c, int t, int from)
{
    const table_places *src = &c->places[from];
    table_places *tp = &c->places[t];
    tp->n_unique = src->n_unique;
    memcpy(c->grads[t].ids, c->grads[from].ids, src->n_unique * sizeof(int64_t));
    memcpy(tp->offsets, src->offsets, (src->n_unique + 1) * sizeof *tp->offsets);
    memcpy(tp->grouped, src->grouped, src->n * sizeof *tp->grouped);
}

static dt_status find_places(dt_cols *c)
{
    for (int t = 0; t < c->spec.n_tables; t++) {
        table_places *tp = &c->places[t];
        dt_sparse_rows *gr = &c->grads[t];
        size_t n = count_places(c, t);
        dt_status st = grow_places(tp, n);
        if (st == DT_OK && dt_sparse_rows_reserve(gr, n ? n : 1))
            st = dt_error(DT_ERR_NOMEM, "no memory for table %s's gradient", c->tables[t].name);
        if (st)
            return st;
        tp->n = n;
        if (c->spec.tables[t].rows == 1) {
            one_row_places(tp, gr, n);
        } else if (c->same_places[t] >= 0) {
            copy_places(c, t, c->same_places[t]);
        } else {
            list_places(c, t);
            tp->n_unique = n ? dt_embedding_dedupe(tp->ids, n, tp->scratch, gr->ids, tp->slot)
                             : 0;
            if (n)
                dt_embedding_group(tp->slot, n, tp->n_unique, tp->offsets, tp->grouped);
        }
        gr->n = tp->n_unique;
    }
    return DT_OK;
}

/* Places' gradient rows are fetched this many places ahead: they lie anywhere in the batch's
 * (B, D) gradient, as in dt_embedding_accumulate_grouped. */
#define GRAD_AHEAD 12

/* Each unique id's row: the sum over its places, in place order, of scale x the place's
 * gradient row, in registers, stored once. */
DT_MULTI_ISA
static void accumulate_groups(const uint32_t *offsets, const uint32_t *grouped,
                              const float *const *g, const float *scale, int K, size_t n_uniq,
                              float *rows)
{
    uint32_t end = offsets[n_uniq];
    for (size_t u = 0; u < n_uniq; u++) {
        float *dst = rows + u * (size_t)K;
        for (int k = 0; k < K; k++)
            dst[k] = 0.0f;
        for (uint32_t q = offsets[u]; q < offsets[u + 1]; q++) {
            if (q + GRAD_AHEAD < end)
                dt_prefetch_read(g[grouped[q + GRAD_AHEAD]], (size_t)K * sizeof(float));
            uint32_t p = grouped[q];
            const float *src = g[p];
            float s = scale[p];
            for (int k = 0; k < K; k++)
                dst[k] += s * src[k];
        }
    }
}

/* Table t's gradient from dlogits and dx0, over the unique ids forward found: the places'
 * gradients listed in place order, then summed per unique id. */
static void table_grad(dt_cols *c, int t, const float *dlogits, const float *dx0)
{
    dt_sparse_rows *gr = &c->grads[t];
    table_places *tp = &c->places[t];
    /* The rows of forward's unique ids, even when dt_model_zero_grads emptied them since. */
    gr->n = tp->n_unique;
    if (tp->n == 0)
        return;
    grad_places(c, t, dlogits, dx0);
    accumulate_groups(tp->offsets, tp->grouped, tp->g, tp->scale, gr->dim, gr->n, gr->rows);
    if (dt_col_keys_map(c->keys, t) && gr->n > 0 && gr->ids[0] == 0) {
        /* the zero row of keys not admitted: it takes no update */
        gr->n--;
        memmove(gr->ids, gr->ids + 1, gr->n * sizeof *gr->ids);
        memmove(gr->rows, gr->rows + gr->dim, gr->n * (size_t)gr->dim * sizeof *gr->rows);
    }
}

/* dx0 += DeepFM's term's gradient: dz (S_k - v_fk) per field f and k. */
DT_MULTI_ISA
static void fm_backward(dt_cols *c, int B, const float *dlogits, float *dx0)
{
    int K = c->spec.tables[deep_in(c, 0)->table].dim, F = c->spec.n_deep;
    for (int b = 0; b < B; b++) {
        float dz = dlogits[(size_t)b * c->N];
        const float *x = c->deep + (size_t)b * c->D, *sum = c->fm_sums + (size_t)b * K;
        float *g = dx0 + (size_t)b * c->D;
        for (int f = 0; f < F; f++)
            for (int k = 0; k < K; k++)
                g[(size_t)f * K + k] += dz * (sum[k] - x[(size_t)f * K + k]);
    }
}

/* The cross layers backward from dx_L (in c->dcur), adding into dx0 and the grads. */
static void cross_backward(dt_cols *c, int B, const dt_arena *params, dt_arena *grads,
                           float *dx0)
{
    for (int l = c->L - 1; l >= 0; l--) {
        const float *W = c->cross_w[l] >= 0 ? dt_arena_view_data(params, c->cross_w[l]) : NULL;
        const float *U = c->cross_u[l] >= 0 ? dt_arena_view_data(params, c->cross_u[l]) : NULL;
        const float *V = c->cross_v[l] >= 0 ? dt_arena_view_data(params, c->cross_v[l]) : NULL;
        float *dW = c->cross_w[l] >= 0 ? dt_arena_view_data(grads, c->cross_w[l]) : NULL;
        float *dU = c->cross_u[l] >= 0 ? dt_arena_view_data(grads, c->cross_u[l]) : NULL;
        float *dV = c->cross_v[l] >= 0 ? dt_arena_view_data(grads, c->cross_v[l]) : NULL;
        dt_cross_backward(c->pool, B, c->D, c->R, c->deep, c->xs[l], W, U, V, c->ts[l],
                          c->us[l], c->dcur, dx0, c->dnext, dW, dU, dV,
                          dt_arena_view_data(grads, c->cross_b[l]), c->du, c->dtt);
        float *tmp = c->dcur;
        c->dcur = c->dnext;
        c->dnext = tmp;
    }
    /* dx of layer 0's input: x_0 is x0 itself. */
    size_t n = (size_t)B * c->D;
    for (size_t k = 0; k < n; k++)
        dx0[k] += c->dcur[k];
}

void dt_cols_backward(dt_cols *c, int B, const dt_arena *params, dt_arena *grads,
                      const float *dlogits, float *dlayers)
{
    size_t n = (size_t)B * c->D;
    bool stacked = c->L > 0 && c->spec.cross_stacked;
    /* The layers' input gradient is dx0's share (x0 feeds them), the rest added to it in
     * place; or dx_L's (stacked), and dx0 starts at 0. */
    float *dx0 = dlayers && !stacked ? dlayers : c->dx0;
    if (dx0 == c->dx0)
        memset(dx0, 0, n * sizeof *dx0);
    if (c->spec.fm && c->spec.n_deep > 0)
        fm_backward(c, B, dlogits, dx0);
    if (c->L > 0) {
        if (stacked) {
            if (dlayers)
                memcpy(c->dcur, dlayers, n * sizeof *c->dcur);
            else
                memset(c->dcur, 0, n * sizeof *c->dcur);
        } else {
            /* dx_L = dlogits . Wout^T, and dWout += x_L^T dlogits. */
            const float *wout = dt_arena_view_data(params, c->cross_out);
            dt_gemm(c->pool, false, true, B, c->D, c->N, 1.0f, dlogits, c->N, wout, c->N, 0.0f,
                    c->dcur, c->D);
            dt_gemm(c->pool, true, false, c->D, c->N, B, 1.0f, c->xs[c->L], c->D, dlogits, c->N,
                    1.0f, dt_arena_view_data(grads, c->cross_out), c->N);
        }
        cross_backward(c, B, params, grads, dx0);
    }
    for (int t = 0; t < c->spec.n_tables; t++)
        table_grad(c, t, dlogits, dx0);
}
