/* The tables' gradients of replicas in sync: each replica's unique ids and summed rows are
 * all-gathered (a count first, then every replica's rows padded to the largest count), and
 * every replica merges them the same way, id by id in increasing order, each id's rows added in
 * replica order, so all end with the same sums and apply the same update. What travels is
 * (8 + 4 dim) bytes per row a replica touched: never a table-sized gradient, as TensorFlow's
 * IndexedSlices all-gather. */
#include <stdlib.h>
#include <string.h>

#include "../core/clock.h"
#include "strategy_impl.h"

/* The replica's scratch for the gathered rows, grown as needed and kept between steps. */
static dt_status scratch(dt_replica *r, size_t bytes, void **out)
{
    if (bytes > r->sparse_cap) {
        void *p = realloc(r->sparse_buf, bytes);
        if (!p)
            return dt_error(DT_ERR_NOMEM, "no memory for %zu bytes of gathered table rows", bytes);
        r->sparse_buf = p;
        r->sparse_cap = bytes;
    }
    *out = r->sparse_buf;
    return DT_OK;
}

void dt_sparse_sync_free(dt_replica *r)
{
    free(r->sparse_buf);
    r->sparse_buf = NULL;
    r->sparse_cap = 0;
}

/* One record of the gather: id then dim floats. */
static size_t record_bytes(int dim) { return sizeof(int64_t) + (size_t)dim * sizeof(float); }

/* Merges size replicas' sorted records (counts[k] of them at base + k x stride) into g: every id
 * once, increasing, its rows summed in replica order, times rescale. */
static dt_status merge(const uint8_t *base, size_t stride, const int64_t *counts, int size,
                       int dim, float rescale, dt_sparse_rows *g)
{
    size_t total = 0, at[64] = {0};
    for (int k = 0; k < size; k++)
        total += (size_t)counts[k];
    dt_status st = dt_sparse_rows_reserve(g, total);
    if (st)
        return st;
    size_t rec = record_bytes(dim), n = 0;
    for (;;) {
        int64_t next = INT64_MAX;
        for (int k = 0; k < size; k++)
            if (at[k] < (size_t)counts[k]) {
                int64_t id;
                memcpy(&id, base + (size_t)k * stride + at[k] * rec, sizeof id);
                if (id < next)
                    next = id;
            }
        if (next == INT64_MAX)
            break;
        float *row = g->rows + n * (size_t)dim;
        memset(row, 0, (size_t)dim * sizeof *row);
        for (int k = 0; k < size; k++) {
            if (at[k] >= (size_t)counts[k])
                continue;
            const uint8_t *p = base + (size_t)k * stride + at[k] * rec;
            int64_t id;
            memcpy(&id, p, sizeof id);
            if (id != next)
                continue;
            float v[256];
            for (int d0 = 0; d0 < dim; d0 += 256) {
                int len = dim - d0 < 256 ? dim - d0 : 256;
                memcpy(v, p + sizeof id + (size_t)d0 * sizeof(float), (size_t)len * sizeof(float));
                for (int d = 0; d < len; d++)
                    row[d0 + d] += v[d];
            }
            at[k]++;
        }
        if (rescale != 1.0f)
            for (int d = 0; d < dim; d++)
                row[d] *= rescale;
        g->ids[n++] = next;
    }
    g->n = n;
    return DT_OK;
}

static dt_status sync_table(dt_replica *r, dt_sparse_rows *g, float rescale, dt_step *s)
{
    int size = r->count;
    int64_t counts[64], mine = (int64_t)g->n;
    dt_status st = dt_comm_allgather(r->comm, &mine, sizeof mine, counts);
    if (st)
        return st;
    int64_t most = 0;
    for (int k = 0; k < size; k++)
        most = counts[k] > most ? counts[k] : most;
    if (most == 0) { /* no replica touched a row */
        s->table_bytes += (int64_t)sizeof mine;
        g->n = 0;
        return DT_OK;
    }
    size_t rec = record_bytes(g->dim), stride = (size_t)most * rec;
    void *buf = NULL;
    if ((st = scratch(r, stride * (size_t)(size + 1), &buf)))
        return st;
    /* This replica's records first, at the end of the buffer; then the gather before them. */
    uint8_t *send = (uint8_t *)buf + stride * (size_t)size;
    for (size_t u = 0; u < g->n; u++) {
        memcpy(send + u * rec, &g->ids[u], sizeof(int64_t));
        memcpy(send + u * rec + sizeof(int64_t), g->rows + u * (size_t)g->dim,
               (size_t)g->dim * sizeof(float));
    }
    memset(send + g->n * rec, 0, stride - g->n * rec);
    if (stride > 0 && (st = dt_comm_allgather(r->comm, send, stride, buf)))
        return st;
    s->table_bytes += (int64_t)(sizeof mine + stride);
    return merge(buf, stride, counts, size, g->dim, rescale, g);
}

dt_status dt_sparse_sync_tables(dt_replica *r, dt_model *m, float rescale, dt_step *s)
{
    if (r->count > 64)
        return dt_error(DT_ERR_UNSUPPORTED, "embedding tables over %d replicas: at most 64",
                        r->count);
    double t0 = dt_clock_now();
    dt_status st = DT_OK;
    for (int t = 0; st == DT_OK && t < dt_model_num_tables(m); t++)
        st = sync_table(r, dt_model_table_grad(m, t), rescale, s);
    s->comm_seconds += dt_clock_now() - t0;
    if (st)
        return dt_error_prefix(st, "step %lld: the tables' gradients", (long long)s->step);
    return DT_OK;
}

/* Pieces of a table broadcast at a time: bounded memory in flight on every backend. */
#define BROADCAST_CHUNK ((size_t)64 << 20)

static dt_status broadcast_floats(dt_replica *r, float *data, size_t n)
{
    size_t bytes = n * sizeof(float);
    for (size_t off = 0; off < bytes; off += BROADCAST_CHUNK) {
        size_t len = bytes - off < BROADCAST_CHUNK ? bytes - off : BROADCAST_CHUNK;
        dt_status st = dt_comm_broadcast(r->comm, (uint8_t *)data + off, len, 0);
        if (st)
            return st;
    }
    return DT_OK;
}

dt_status dt_sparse_broadcast_tables(dt_replica *r, dt_model *m, bool slots)
{
    for (int t = 0; t < dt_model_num_tables(m); t++) {
        dt_table *tab = dt_model_table(m, t);
        size_t n = (size_t)tab->rows * (size_t)tab->dim;
        dt_status st = broadcast_floats(r, tab->data, n);
        for (int k = 0; st == DT_OK && slots && k < tab->n_slots; k++)
            st = broadcast_floats(r, tab->slots[k], n);
        if (st)
            return dt_error_prefix(st, "sharing table %s", tab->name);
    }
    return DT_OK;
}
