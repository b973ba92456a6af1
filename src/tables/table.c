/* Embedding tables and sparse gradients (see include/dtrain/table.h). */
#include "dtrain/table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dtrain/rng.h"
#include "../core/lines.h"

/* Anonymous mappings: zero pages that cost nothing until written. */
static float *map_floats(size_t n)
{
    void *p = mmap(NULL, (n ? n : 1) * sizeof(float), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void unmap_floats(float *p, size_t n)
{
    if (p)
        munmap(p, (n ? n : 1) * sizeof(float));
}

static size_t elems_of(const dt_table *t) { return (size_t)t->rows * (size_t)t->dim; }

dt_status dt_table_create(dt_table *t, const char *name, int64_t rows, int dim)
{
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    if (strlen(name) > DT_TABLE_NAME_MAX)
        return dt_error(DT_ERR_INVALID, "table %s: a name longer than %d bytes", name,
                        DT_TABLE_NAME_MAX);
    if (rows < 1 || rows > DT_TABLE_MAX_ROWS || dim < 1 || dim > 65536)
        return dt_error(DT_ERR_INVALID, "table %s: %lld rows of %d values (1..2^40 rows, 1..65536 "
                        "values)", name, (long long)rows, dim);
    t->rows = rows;
    t->dim = dim;
    if (!(t->data = map_floats(elems_of(t))))
        return dt_error(DT_ERR_NOMEM, "table %s: no memory for %lld rows of %d floats (%.1f MB)",
                        name, (long long)rows, dim, 4.0 * (double)elems_of(t) / 1e6);
    return DT_OK;
}

enum { PAGE_SHIFT = 12 };

static void free_slots(dt_table *t)
{
    for (int i = 0; i < t->n_slots; i++) {
        unmap_floats(t->slots[i], elems_of(t));
        free(t->slot_pages[i]);
    }
    memset(t->slots, 0, sizeof t->slots);
    memset(t->slot_pages, 0, sizeof t->slot_pages);
    t->n_slots = 0;
}

void dt_table_claim_slot(dt_table *t, int s, size_t off, size_t n)
{
    uint64_t *bits = t->slot_pages[s];
    if (!bits || n == 0)
        return;
    char *base = (char *)t->slots[s];
    size_t first = off * sizeof(float), last = (off + n) * sizeof(float) - 1;
    for (size_t page = first >> PAGE_SHIFT; page <= last >> PAGE_SHIFT; page++) {
        uint64_t bit = (uint64_t)1 << (page & 63);
        if (__atomic_load_n(&bits[page >> 6], __ATOMIC_RELAXED) & bit)
            continue;
        size_t at = page << PAGE_SHIFT > first ? page << PAGE_SHIFT : first;
        __atomic_fetch_or((unsigned char *)base + at, 0, __ATOMIC_RELAXED);
        __atomic_fetch_or(&bits[page >> 6], bit, __ATOMIC_RELAXED);
    }
}

dt_status dt_table_set_slots(dt_table *t, const char *optimizer, int n_slots,
                             const char *const *slot_names, const float *init)
{
    free_slots(t);
    if (n_slots < 0 || n_slots > DT_TABLE_MAX_SLOTS)
        return dt_error(DT_ERR_INVALID, "table %s: %d optimizer slots (at most %d)", t->name,
                        n_slots, DT_TABLE_MAX_SLOTS);
    size_t n = elems_of(t);
    for (int i = 0; i < n_slots; i++) {
        if (!(t->slots[i] = map_floats(n))) {
            dt_status st = dt_error(DT_ERR_NOMEM, "table %s: no memory for the %s slot %s (%.1f MB)",
                                    t->name, optimizer, slot_names[i], 4.0 * (double)n / 1e6);
            t->n_slots = i;
            free_slots(t);
            return st;
        }
        t->n_slots = i + 1;
        t->slot_init[i] = init[i];
        /* Within the name's room: table names are at most 96 bytes, optimizers' names short.
         * From a copy of the name: both strings live in *t, which snprintf may not be told. */
        char table_name[sizeof t->name];
        memcpy(table_name, t->name, sizeof table_name);
        snprintf(t->slot_names[i], sizeof t->slot_names[i], "%.12s/%.12s/%.96s", optimizer,
                 slot_names[i], table_name);
        if (t->lazy)
            continue; /* the owner sets each row's slots as it first uses the row */
        if (init[i] != 0.0f)
            for (size_t k = 0; k < n; k++)
                t->slots[i][k] = init[i];
        else if (!(t->slot_pages[i] = calloc(((n * sizeof(float)) >> PAGE_SHIFT) / 64 + 1,
                                             sizeof(uint64_t)))) {
            dt_status st = dt_error(DT_ERR_NOMEM, "table %s: no memory for the %s slot %s",
                                    t->name, optimizer, slot_names[i]);
            free_slots(t);
            return st;
        }
    }
    return DT_OK;
}

void dt_table_free(dt_table *t)
{
    free_slots(t);
    if (!t->borrowed)
        unmap_floats(t->data, elems_of(t));
    t->data = NULL;
}

void dt_table_borrow(dt_table *t, const float *data)
{
    free_slots(t);
    t->n_slots = 0;
    if (!t->borrowed)
        unmap_floats(t->data, elems_of(t));
    /* Never written through: forwards only read a table. */
    t->data = (float *)data;
    t->borrowed = true;
}

size_t dt_table_bytes(const dt_table *t)
{
    return elems_of(t) * sizeof(float) * (size_t)(1 + t->n_slots);
}

typedef struct {
    dt_table *t;
    float stddev;
    uint64_t seed;
    int64_t first, stride; /* local row r is global row first + r x stride */
} init_job;

/* Standard normals by Box-Muller, both of each pair used: two uniforms give two values. */
static void normals(dt_rng *r, float *out, int n, float stddev)
{
    for (int k = 0; k < n; k += 2) {
        double u1 = 1.0 - (double)dt_rng_uniform(r), u2 = (double)dt_rng_uniform(r);
        double rad = sqrt(-2.0 * log(u1)), ang = 6.283185307179586 * u2;
        out[k] = (float)(rad * cos(ang)) * stddev;
        if (k + 1 < n)
            out[k + 1] = (float)(rad * sin(ang)) * stddev;
    }
}

void dt_table_draw_row(float *row, int dim, float stddev, uint64_t seed, uint64_t global)
{
    dt_rng rng;
    dt_rng_derive(&rng, seed, 0x7461626c65ULL /* "table" */, global);
    normals(&rng, row, dim, stddev);
}

/* Whole pages of p's floats [from, n) handed back to the kernel. */
static void release_tail(float *p, size_t from, size_t n)
{
    uintptr_t lo = ((uintptr_t)(p + from) + 4095) & ~(uintptr_t)4095, hi = (uintptr_t)(p + n);
    if (p && hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* Large pages were tried for a key map's tables and measured slower (DeepFM at 1 thread on the
 * wide generated data: 58.5k against 61.2k samples/s; the kernel zeroes each 2 MB page as the
 * table first grows into it): a lazy table keeps small pages. */
void dt_table_make_lazy(dt_table *t) { t->lazy = true; }

void dt_table_release_rows(dt_table *t, int64_t from)
{
    if (t->borrowed || from >= t->rows)
        return;
    size_t at = (size_t)from * (size_t)t->dim;
    release_tail(t->data, at, elems_of(t));
    for (int s = 0; s < t->n_slots; s++)
        release_tail(t->slots[s], at, elems_of(t));
}

static void init_rows(void *ctx, int task, int n_tasks)
{
    init_job *j = ctx;
    long lo, hi;
    dt_pool_slice((long)j->t->rows, task, n_tasks, &lo, &hi);
    for (long r = lo; r < hi; r++)
        dt_table_draw_row(dt_table_row(j->t, r), j->t->dim, j->stddev, j->seed,
                          (uint64_t)(j->first + (int64_t)r * j->stride));
}

void dt_table_init_normal(dt_table *t, float stddev, uint64_t seed, dt_pool *pool)
{
    dt_table_init_normal_rows(t, stddev, seed, 0, 1, pool);
}

void dt_table_init_normal_rows(dt_table *t, float stddev, uint64_t seed, int64_t first,
                               int64_t stride, dt_pool *pool)
{
    init_job j = {t, stddev, seed, first, stride};
    dt_pool_run(pool, init_rows, &j, dt_pool_size(pool) * 4);
}

dt_status dt_table_arena(const dt_table *t, int slot, dt_arena *out)
{
    dt_arena_init(out);
    if (t->rows > 2147483647)
        return dt_error(DT_ERR_UNSUPPORTED, "table %s: %lld rows, more than a checkpoint view "
                        "holds (2^31 - 1)", t->name, (long long)t->rows);
    int dims[2] = {(int)t->rows, t->dim};
    dt_status st = dt_arena_add(out, slot < 0 ? t->name : t->slot_names[slot], 2, dims, NULL);
    if (st)
        return st;
    out->data = slot < 0 ? t->data : t->slots[slot];
    return DT_OK;
}

dt_status dt_table_arena_rows(const dt_table *t, int slot, int64_t lo, int64_t hi, dt_arena *out)
{
    dt_arena_init(out);
    if (lo < 0 || hi > t->rows || lo >= hi || hi - lo > 2147483647)
        return dt_error(DT_ERR_INVALID, "table %s: rows [%lld, %lld) of %lld", t->name,
                        (long long)lo, (long long)hi, (long long)t->rows);
    char name[DT_VIEW_NAME_CAP + 48];
    snprintf(name, sizeof name, "%s/part_%lld_%lld", slot < 0 ? t->name : t->slot_names[slot],
             (long long)lo, (long long)hi);
    int dims[2] = {(int)(hi - lo), t->dim};
    dt_status st = dt_arena_add(out, name, 2, dims, NULL);
    if (st)
        return st;
    out->data = (slot < 0 ? t->data : t->slots[slot]) + (size_t)lo * (size_t)t->dim;
    return DT_OK;
}

void dt_table_arena_release(dt_arena *a)
{
    a->data = NULL; /* the table's */
    dt_arena_free(a);
}

void dt_sparse_rows_init(dt_sparse_rows *s, int dim)
{
    memset(s, 0, sizeof *s);
    s->dim = dim;
}

dt_status dt_sparse_rows_reserve(dt_sparse_rows *s, size_t cap)
{
    if (cap <= s->cap)
        return DT_OK;
    int64_t *ids = realloc(s->ids, cap * sizeof *ids);
    if (ids)
        s->ids = ids;
    /* On whole lines, which realloc does not keep: the rows so far copied over. */
    bool fits = s->dim <= 0 || cap <= SIZE_MAX / (size_t)s->dim;
    float *rows = ids && fits ? dt_lines_floats(cap * (size_t)s->dim) : NULL;
    if (!rows)
        return dt_error(DT_ERR_NOMEM, "no memory for %zu gradient rows of %d", cap, s->dim);
    if (s->rows)
        memcpy(rows, s->rows, s->cap * (size_t)s->dim * sizeof *rows);
    free(s->rows);
    s->rows = rows;
    s->cap = cap;
    return DT_OK;
}

void dt_sparse_rows_free(dt_sparse_rows *s)
{
    free(s->ids);
    free(s->rows);
    memset(s, 0, sizeof *s);
}
