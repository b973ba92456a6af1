/* Rows and the row builder (see include/dtrain/rows.h). */
#include "dtrain/rows.h"

#include <stdlib.h>
#include <string.h>

static size_t align16(size_t n) { return (n + 15) / 16 * 16; }

dt_elem *dt_elem_alloc(int n, int n_dense, size_t nnz, size_t n_bytes)
{
    size_t rows = (size_t)n;
    size_t sizes[] = {
        align16(sizeof(dt_elem)),
        align16(rows * (size_t)n_dense * sizeof(float)),
        align16(rows * sizeof(float)),
        align16((rows + 1) * sizeof(int64_t)),
        align16(nnz * sizeof(int64_t)),
        align16(nnz * sizeof(float)),
        align16((rows + 1) * sizeof(size_t)),
        align16(n_bytes),
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += sizes[i];
    uint8_t *block = malloc(total);
    if (!block)
        return NULL;
    dt_elem *e = (dt_elem *)block;
    memset(e, 0, sizeof *e);
    e->n = n, e->n_dense = n_dense, e->nnz = nnz, e->n_bytes = n_bytes;
    uint8_t *p = block + sizes[0];
    e->dense = (float *)p, p += sizes[1];
    e->labels = (float *)p, p += sizes[2];
    e->sp_row = (int64_t *)p, p += sizes[3];
    e->sp_ids = (int64_t *)p, p += sizes[4];
    e->sp_vals = (float *)p, p += sizes[5];
    e->raw_off = (size_t *)p, p += sizes[6];
    e->raw = p;
    /* Offsets all zero: a valid element with no sparse entries and no bytes, so a source that
     * fills only dense values and labels needs to touch nothing else. */
    memset(e->sp_row, 0, (rows + 1) * sizeof *e->sp_row);
    memset(e->raw_off, 0, (rows + 1) * sizeof *e->raw_off);
    return e;
}

void dt_elem_free(dt_elem *e) { free(e); }

dt_elem *dt_elem_clone(const dt_elem *e)
{
    dt_elem *c = dt_elem_alloc(e->n, e->n_dense, e->nnz, e->n_bytes);
    if (!c)
        return NULL;
    size_t rows = (size_t)e->n;
    memcpy(c->dense, e->dense, rows * (size_t)e->n_dense * sizeof(float));
    memcpy(c->labels, e->labels, rows * sizeof(float));
    memcpy(c->sp_row, e->sp_row, (rows + 1) * sizeof(int64_t));
    memcpy(c->sp_ids, e->sp_ids, e->nnz * sizeof(int64_t));
    memcpy(c->sp_vals, e->sp_vals, e->nnz * sizeof(float));
    memcpy(c->raw_off, e->raw_off, (rows + 1) * sizeof(size_t));
    memcpy(c->raw, e->raw, e->n_bytes);
    c->index = e->index, c->file = e->file, c->pos = e->pos;
    return c;
}

void dt_rowbuf_init(dt_rowbuf *b, int n_dense)
{
    memset(b, 0, sizeof *b);
    b->n_dense = n_dense;
}

void dt_rowbuf_free(dt_rowbuf *b)
{
    if (!b)
        return;
    free(b->dense), free(b->labels), free(b->sp_row), free(b->sp_ids), free(b->sp_vals);
    free(b->raw_off), free(b->raw);
    dt_rowbuf_init(b, 0);
}

void dt_rowbuf_clear(dt_rowbuf *b)
{
    b->n = 0;
    b->nnz = 0;
    b->n_bytes = 0;
    b->index = b->pos = 0;
    b->file = 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem_size, size_t first)
{
    if (need <= *cap)
        return 1;
    size_t cap2 = *cap ? *cap : first;
    while (cap2 < need)
        cap2 *= 2;
    void *q = realloc(*p, cap2 * elem_size);
    if (!q)
        return 0;
    *p = q;
    *cap = cap2;
    return 1;
}

/* Room for need rows in every per-row array. */
static dt_status reserve_rows(dt_rowbuf *b, size_t need)
{
    if (need <= b->cap_rows)
        return DT_OK;
    size_t cap = b->cap_rows, c1 = cap, c2 = cap, c3 = cap, c4 = cap * (size_t)b->n_dense;
    int ok = grow((void **)&b->labels, &c1, need, sizeof(float), 64) &&
             grow((void **)&b->sp_row, &c2, need + 1, sizeof(int64_t), 64) &&
             grow((void **)&b->raw_off, &c3, need + 1, sizeof(size_t), 64);
    if (ok && b->n_dense > 0)
        ok = grow((void **)&b->dense, &c4, need * (size_t)b->n_dense, sizeof(float), 64 * (size_t)b->n_dense);
    if (!ok)
        return dt_error(DT_ERR_NOMEM, "no memory for %zu rows", need);
    b->cap_rows = c1 < c2 - 1 ? c1 : c2 - 1;
    if (b->cap_rows > c3 - 1)
        b->cap_rows = c3 - 1;
    if (b->n_dense > 0 && b->cap_rows > c4 / (size_t)b->n_dense)
        b->cap_rows = c4 / (size_t)b->n_dense;
    return DT_OK;
}

dt_status dt_rowbuf_add_row(dt_rowbuf *b, float **dense_out)
{
    float *d;
    dt_status st = dt_rowbuf_add_row_unset(b, &d);
    if (st == DT_OK && d)
        memset(d, 0, (size_t)b->n_dense * sizeof *d);
    if (dense_out)
        *dense_out = d;
    return st;
}

dt_status dt_rowbuf_add_row_unset(dt_rowbuf *b, float **dense_out)
{
    dt_status st = reserve_rows(b, (size_t)b->n + 1);
    if (st)
        return st;
    if (b->n == 0) {
        b->sp_row[0] = 0;
        b->raw_off[0] = 0;
    }
    float *d = b->dense ? b->dense + (size_t)b->n * b->n_dense : NULL;
    b->labels[b->n] = 0.0f;
    b->n++;
    b->sp_row[b->n] = (int64_t)b->nnz;
    b->raw_off[b->n] = b->n_bytes;
    if (dense_out)
        *dense_out = d;
    return DT_OK;
}

dt_status dt_rowbuf_reserve_sparse(dt_rowbuf *b, size_t n)
{
    size_t need = b->nnz + n;
    if (need > b->cap_nnz) {
        size_t c1 = b->cap_nnz, c2 = b->cap_nnz;
        if (!grow((void **)&b->sp_ids, &c1, need, sizeof(int64_t), 256) ||
            !grow((void **)&b->sp_vals, &c2, need, sizeof(float), 256))
            return dt_error(DT_ERR_NOMEM, "no memory for %zu sparse entries", need);
        b->cap_nnz = c1 < c2 ? c1 : c2;
    }
    return DT_OK;
}

dt_status dt_rowbuf_add_sparse(dt_rowbuf *b, int64_t id, float value)
{
    dt_status st = dt_rowbuf_reserve_sparse(b, 1);
    if (st)
        return st;
    b->sp_ids[b->nnz] = id;
    b->sp_vals[b->nnz] = value;
    b->nnz++;
    b->sp_row[b->n] = (int64_t)b->nnz;
    return DT_OK;
}

dt_status dt_rowbuf_add_raw(dt_rowbuf *b, const void *data, size_t n_bytes)
{
    if (!grow((void **)&b->raw, &b->cap_bytes, b->n_bytes + n_bytes, 1, 4096))
        return dt_error(DT_ERR_NOMEM, "no memory for %zu bytes of records", b->n_bytes + n_bytes);
    memcpy(b->raw + b->n_bytes, data, n_bytes);
    b->n_bytes += n_bytes;
    b->raw_off[b->n] = b->n_bytes;
    return DT_OK;
}

void dt_rowbuf_drop_last(dt_rowbuf *b)
{
    if (b->n == 0)
        return;
    b->n--;
    b->nnz = (size_t)b->sp_row[b->n];
    b->n_bytes = b->raw_off[b->n];
}

dt_elem *dt_rowbuf_take(dt_rowbuf *b)
{
    dt_elem *e = dt_elem_alloc(b->n, b->n_dense, b->nnz, b->n_bytes);
    if (!e)
        return NULL;
    size_t rows = (size_t)b->n;
    if (rows) {
        if (b->n_dense)
            memcpy(e->dense, b->dense, rows * (size_t)b->n_dense * sizeof(float));
        memcpy(e->labels, b->labels, rows * sizeof(float));
        memcpy(e->sp_row, b->sp_row, (rows + 1) * sizeof(int64_t));
        memcpy(e->raw_off, b->raw_off, (rows + 1) * sizeof(size_t));
    }
    if (b->nnz) {
        memcpy(e->sp_ids, b->sp_ids, b->nnz * sizeof(int64_t));
        memcpy(e->sp_vals, b->sp_vals, b->nnz * sizeof(float));
    }
    if (b->n_bytes)
        memcpy(e->raw, b->raw, b->n_bytes);
    e->index = b->index, e->file = b->file, e->pos = b->pos;
    dt_rowbuf_clear(b);
    return e;
}

/* Rows [first, first + count) of e hold their sparse entries and bytes in one run each: every
 * array is copied in bulk and the row offsets are shifted to where the runs land in b. */
dt_status dt_rowbuf_append_rows(dt_rowbuf *b, const dt_elem *e, int first, int count)
{
    if (e->n_dense != b->n_dense)
        return dt_error(DT_ERR_INVALID, "rows of %d dense values cannot join a batch of %d",
                        e->n_dense, b->n_dense);
    if (count <= 0)
        return DT_OK;
    size_t n = (size_t)b->n, k = (size_t)count, nd = (size_t)b->n_dense;
    int64_t s0 = e->sp_row[first], s1 = e->sp_row[first + count];
    size_t r0 = e->raw_off[first], r1 = e->raw_off[first + count];
    dt_status st = reserve_rows(b, n + k);
    if (st == DT_OK)
        st = dt_rowbuf_reserve_sparse(b, (size_t)(s1 - s0));
    if (st == DT_OK && !grow((void **)&b->raw, &b->cap_bytes, b->n_bytes + (r1 - r0), 1, 4096))
        st = dt_error(DT_ERR_NOMEM, "no memory for %zu bytes of records", b->n_bytes + (r1 - r0));
    if (st)
        return st;
    if (n == 0) {
        b->sp_row[0] = 0, b->raw_off[0] = 0;
        b->index = e->index, b->file = e->file, b->pos = e->pos;
    }
    if (nd)
        memcpy(b->dense + n * nd, e->dense + (size_t)first * nd, k * nd * sizeof(float));
    memcpy(b->labels + n, e->labels + first, k * sizeof(float));
    if (s1 > s0) {
        memcpy(b->sp_ids + b->nnz, e->sp_ids + s0, (size_t)(s1 - s0) * sizeof(int64_t));
        memcpy(b->sp_vals + b->nnz, e->sp_vals + s0, (size_t)(s1 - s0) * sizeof(float));
    }
    if (r1 > r0)
        memcpy(b->raw + b->n_bytes, e->raw + r0, r1 - r0);
    int64_t sp_shift = (int64_t)b->nnz - s0;
    size_t raw_at = b->n_bytes;
    for (size_t r = 1; r <= k; r++) {
        b->sp_row[n + r] = e->sp_row[(size_t)first + r] + sp_shift;
        b->raw_off[n + r] = raw_at + (e->raw_off[(size_t)first + r] - r0);
    }
    b->nnz += (size_t)(s1 - s0);
    b->n_bytes += r1 - r0;
    b->n += count;
    return DT_OK;
}

dt_status dt_rowbuf_append_elem(dt_rowbuf *b, const dt_elem *e)
{
    return dt_rowbuf_append_rows(b, e, 0, e->n);
}
