/* The client side of the ps tasks (see client.h). */
#include "client.h"

#include <stdlib.h>
#include <string.h>

#include "../net/dial.h"
#include "../net/psconn.h"
#include "../net/sock.h"
#include "dtrain/clock.h"
#include "shard.h"

#define MAX_TABLES 16

typedef struct {
    int fd;
    char name[DT_HOST_CAP + 48];
    dt_psbuf out, in;
} ps_link;

typedef struct {
    uint32_t id;
    int64_t rows, n_shards;
    int dim;
    dt_partition_strategy strategy;
} table_info;

struct dt_ps_client {
    int n_ps;
    ps_link *ps;
    double request_timeout;
    uint64_t next_request;
    table_info tables[MAX_TABLES];
    int n_tables;
    /* The dense variables: view i at [offset[i], + count[i]) on ps i mod P. */
    int n_vars;
    uint64_t *var_offset, *var_count;
    int *var_to;
    /* Per shard of the call under way: its ids and the places they came from. */
    int64_t *ids;
    size_t *places;
    size_t *count;
    size_t cap;
};

dt_status dt_ps_client_open(const dt_handshake_id *me, const dt_cluster *cl,
                            double connect_timeout, double request_timeout, dt_ps_client **out)
{
    *out = NULL;
    int n = cl->n_tasks[DT_JOB_PS];
    if (n < 1)
        return dt_error(DT_ERR_INVALID, "TF_CONFIG: cluster.ps: no ps task to connect to");
    dt_ps_client *c = calloc(1, sizeof *c);
    if (!c || !(c->ps = calloc((size_t)n, sizeof *c->ps))) {
        free(c);
        return dt_error(DT_ERR_NOMEM, "no memory for the ps connections");
    }
    c->n_ps = n, c->request_timeout = request_timeout;
    for (int k = 0; k < n; k++)
        c->ps[k].fd = -1;
    double deadline = dt_clock_now() + connect_timeout;
    for (int k = 0; k < n; k++) {
        ps_link *p = &c->ps[k];
        dt_cluster_task_name(cl, DT_JOB_PS, k, p->name, sizeof p->name);
        dt_status st = dt_dial_task(me, dt_cluster_addr(cl, DT_JOB_PS, k), DT_JOB_PS, k, p->name,
                                    10.0, deadline, &p->fd);
        if (st) {
            dt_ps_client_close(c);
            return st;
        }
    }
    *out = c;
    return DT_OK;
}

void dt_ps_client_close(dt_ps_client *c)
{
    if (!c)
        return;
    for (int k = 0; k < c->n_ps; k++) {
        dt_sock_close(c->ps[k].fd);
        dt_psbuf_free(&c->ps[k].out);
        dt_psbuf_free(&c->ps[k].in);
    }
    free(c->ps);
    free(c->var_offset), free(c->var_count), free(c->var_to);
    free(c->ids);
    free(c->places);
    free(c->count);
    free(c);
}

static const table_info *find(const dt_ps_client *c, uint32_t id)
{
    for (int i = 0; i < c->n_tables; i++)
        if (c->tables[i].id == id)
            return &c->tables[i];
    return NULL;
}

/* Shard s of table id travels as table (id << 16 | s): a ps holding several shards of one table
 * keeps them apart. */
static uint32_t wire_table(uint32_t id, int64_t shard) { return id << 16 | (uint32_t)shard; }

static int ps_of_shard(const dt_ps_client *c, int64_t shard) { return (int)(shard % c->n_ps); }

typedef dt_status (*reply_fn)(void *ctx, int64_t msg, const dt_psmsg *reply);

/* Sends the messages queued in each ps's buffer, then reads their replies: message k (of n, in
 * the order they were queued) went to ps to[k], or to none when to[k] < 0. Each reply's type is
 * checked, and on_reply (if any) gets it with its message's number. */
static dt_status exchange(dt_ps_client *c, int64_t n, const int *to, dt_psmsg_type want,
                          reply_fn on_reply, void *ctx)
{
    double deadline = dt_clock_now() + c->request_timeout;
    dt_status st = DT_OK;
    for (int k = 0; k < c->n_ps && st == DT_OK; k++)
        if (c->ps[k].out.len > 0)
            st = dt_psconn_send(c->ps[k].fd, &c->ps[k].out, c->ps[k].name, deadline);
    for (int64_t m = 0; m < n && st == DT_OK; m++) {
        if (to[m] < 0)
            continue;
        ps_link *p = &c->ps[to[m]];
        dt_psmsg r;
        if ((st = dt_psconn_recv(p->fd, p->name, deadline, &p->in, &r)))
            break;
        if (r.type == DT_PSMSG_ERROR)
            st = dt_error((dt_status)(r.status > 0 ? r.status : DT_ERR_PEER), "%s: %.*s", p->name,
                          (int)r.text_len, r.text);
        else if (r.type != want)
            st = dt_error(DT_ERR_PEER, "%s: a %s reply where %s was due", p->name,
                          dt_psmsg_type_name(r.type), dt_psmsg_type_name(want));
        else if (on_reply)
            st = on_reply(ctx, m, &r);
    }
    for (int k = 0; k < c->n_ps; k++)
        c->ps[k].out.len = 0;
    return st;
}

static dt_status reserve_plan(dt_ps_client *c, size_t n, int64_t n_shards)
{
    size_t need = n > (size_t)n_shards + 1 ? n : (size_t)n_shards + 1;
    if (need <= c->cap)
        return DT_OK;
    free(c->ids), free(c->places), free(c->count);
    c->ids = malloc(need * sizeof *c->ids);
    c->places = malloc(need * sizeof *c->places);
    c->count = malloc(need * sizeof *c->count);
    c->cap = c->ids && c->places && c->count ? need : 0;
    if (!c->cap)
        return dt_error(DT_ERR_NOMEM, "no memory for a ps request of %zu ids", n);
    return DT_OK;
}

/* Groups ids by shard (a counting sort, stable): shard s's ids are c->ids[count[s] ..
 * count[s + 1]), from places c->places[...]. */
static dt_status plan(dt_ps_client *c, const table_info *t, const int64_t *ids, size_t n)
{
    dt_status st = reserve_plan(c, n, t->n_shards);
    if (st)
        return st;
    int64_t *shard_of = (int64_t *)malloc((n + 1) * sizeof *shard_of);
    if (!shard_of)
        return dt_error(DT_ERR_NOMEM, "no memory for a ps request of %zu ids", n);
    memset(c->count, 0, ((size_t)t->n_shards + 1) * sizeof *c->count);
    for (size_t i = 0; i < n; i++) {
        int64_t row;
        if (ids[i] < 0 || ids[i] >= t->rows) {
            free(shard_of);
            return dt_error(DT_ERR_INVALID, "ps: table %u: id %lld outside its %lld rows", t->id,
                            (long long)ids[i], (long long)t->rows);
        }
        dt_partition_locate(t->strategy, t->rows, t->n_shards, ids[i], &shard_of[i], &row);
        c->count[shard_of[i] + 1]++;
    }
    for (int64_t s = 0; s < t->n_shards; s++)
        c->count[s + 1] += c->count[s];
    size_t *fill = malloc(((size_t)t->n_shards + 1) * sizeof *fill);
    if (!fill) {
        free(shard_of);
        return dt_error(DT_ERR_NOMEM, "no memory for a ps request of %zu ids", n);
    }
    memcpy(fill, c->count, ((size_t)t->n_shards + 1) * sizeof *fill);
    for (size_t i = 0; i < n; i++) {
        size_t at = fill[shard_of[i]]++;
        c->ids[at] = ids[i], c->places[at] = i;
    }
    free(fill);
    free(shard_of);
    return DT_OK;
}

dt_status dt_ps_client_define(dt_ps_client *c, uint32_t id, const char *name, int64_t rows,
                              int dim, int64_t n_shards, dt_partition_strategy strategy,
                              const dt_rowopt_config *opt, float init_stddev, uint64_t seed)
{
    if (c->n_tables == MAX_TABLES || find(c, id) || id >= 65536 || n_shards > 65536 ||
        n_shards < 1 || n_shards > rows)
        return dt_error(DT_ERR_INVALID, "ps: table %u: defined twice, more than %d tables, or "
                        "an id or shard count out of range", id, MAX_TABLES);
    int *to = malloc((size_t)n_shards * sizeof *to);
    if (!to)
        return dt_error(DT_ERR_NOMEM, "no memory for %lld shards", (long long)n_shards);
    dt_status st = DT_OK;
    for (int64_t s = 0; s < n_shards && st == DT_OK; s++) {
        dt_psmsg m;
        dt_ps_table_msg(wire_table(id, s), name, rows, dim, n_shards, s, strategy, opt,
                        init_stddev, seed, &m);
        m.request_id = ++c->next_request;
        to[s] = ps_of_shard(c, s);
        st = dt_psmsg_encode(&m, NULL, NULL, &c->ps[to[s]].out);
    }
    if (st == DT_OK)
        st = exchange(c, n_shards, to, DT_PSMSG_ACK, NULL, NULL);
    free(to);
    if (st == DT_OK)
        st = dt_ps_client_use_table(c, id, rows, dim, n_shards, strategy);
    return st;
}

dt_status dt_ps_client_use_table(dt_ps_client *c, uint32_t id, int64_t rows, int dim,
                                 int64_t n_shards, dt_partition_strategy strategy)
{
    if (c->n_tables == MAX_TABLES || find(c, id) || id >= 65536 || n_shards > 65536 ||
        n_shards < 1 || n_shards > rows)
        return dt_error(DT_ERR_INVALID, "ps: table %u: given twice, more than %d tables, or an "
                        "id or shard count out of range", id, MAX_TABLES);
    c->tables[c->n_tables++] = (table_info){id, rows, n_shards, dim, strategy};
    return DT_OK;
}

typedef struct {
    dt_ps_client *c;
    const table_info *t;
    float *rows;
} pull_ctx;

static dt_status scatter_rows(void *ctx, int64_t shard, const dt_psmsg *r)
{
    pull_ctx *p = ctx;
    size_t lo = p->c->count[shard], n = p->c->count[shard + 1] - lo;
    if (r->n != n || r->dim != (uint32_t)p->t->dim)
        return dt_error(DT_ERR_PEER, "%s: %u rows of %u for a pull of %zu rows of %d",
                        p->c->ps[ps_of_shard(p->c, shard)].name, r->n, r->dim, n, p->t->dim);
    size_t dim = (size_t)p->t->dim;
    for (size_t i = 0; i < n; i++) {
        float *dst = p->rows + p->c->places[lo + i] * dim;
        for (size_t k = 0; k < dim; k++)
            dst[k] = dt_psmsg_value(r, i * dim + k);
    }
    return DT_OK;
}

/* Queues one message per shard with ids: PULL_ROWS, or PUSH_ROWS with the rows at the ids'
 * places in rows. */
static dt_status queue_requests(dt_ps_client *c, const table_info *t, dt_psmsg_type type,
                                const float *rows, int64_t step, float lr_scale, int *to)
{
    float *grouped = NULL;
    size_t dim = (size_t)t->dim;
    dt_status st = DT_OK;
    for (int64_t s = 0; s < t->n_shards && st == DT_OK; s++) {
        size_t lo = c->count[s], n = c->count[s + 1] - lo;
        to[s] = n > 0 ? ps_of_shard(c, s) : -1;
        if (n == 0)
            continue;
        dt_psmsg m = {.type = type, .request_id = ++c->next_request,
                      .table = wire_table(t->id, s), .n = (uint32_t)n, .dim = (uint32_t)dim,
                      .step = step, .lr_scale = lr_scale};
        if (type == DT_PSMSG_PUSH_ROWS) {
            float *g = realloc(grouped, n * dim * sizeof *g);
            if (!g) {
                st = dt_error(DT_ERR_NOMEM, "no memory for a push of %zu rows", n);
                break;
            }
            grouped = g;
            for (size_t i = 0; i < n; i++)
                memcpy(g + i * dim, rows + c->places[lo + i] * dim, dim * sizeof *g);
        }
        st = dt_psmsg_encode(&m, c->ids + lo, grouped, &c->ps[ps_of_shard(c, s)].out);
    }
    free(grouped);
    return st;
}

static dt_status rows_call(dt_ps_client *c, uint32_t id, const int64_t *ids, size_t n,
                           dt_psmsg_type type, float *out, const float *in, int64_t step,
                           float lr_scale)
{
    const table_info *t = find(c, id);
    if (!t)
        return dt_error(DT_ERR_INVALID, "ps: no table %u defined", id);
    if (n > DT_PSMSG_MAX_ROWS)
        return dt_error(DT_ERR_INVALID, "ps: %zu ids in one request (at most %u)", n,
                        DT_PSMSG_MAX_ROWS);
    int *to = malloc((size_t)t->n_shards * sizeof *to);
    if (!to)
        return dt_error(DT_ERR_NOMEM, "no memory for %lld shards", (long long)t->n_shards);
    dt_status st = plan(c, t, ids, n);
    if (st == DT_OK)
        st = queue_requests(c, t, type, in, step, lr_scale, to);
    pull_ctx p = {c, t, out};
    if (st == DT_OK)
        st = exchange(c, t->n_shards, to,
                      type == DT_PSMSG_PULL_ROWS ? DT_PSMSG_ROWS : DT_PSMSG_ACK,
                      type == DT_PSMSG_PULL_ROWS ? scatter_rows : NULL, &p);
    for (int k = 0; k < c->n_ps; k++)
        c->ps[k].out.len = 0;
    free(to);
    return st;
}

dt_status dt_ps_client_pull(dt_ps_client *c, uint32_t id, const int64_t *ids, size_t n,
                            float *rows)
{
    return rows_call(c, id, ids, n, DT_PSMSG_PULL_ROWS, rows, NULL, 0, 0.0f);
}

dt_status dt_ps_client_push(dt_ps_client *c, uint32_t id, const int64_t *ids, size_t n,
                            const float *rows, int64_t step, float lr_scale)
{
    return rows_call(c, id, ids, n, DT_PSMSG_PUSH_ROWS, NULL, rows, step, lr_scale);
}

dt_status dt_ps_client_stop(dt_ps_client *c)
{
    int to[c->n_ps];
    for (int k = 0; k < c->n_ps; k++) {
        dt_psmsg m = {.type = DT_PSMSG_STOP, .request_id = ++c->next_request};
        dt_status st = dt_psmsg_encode(&m, NULL, NULL, &c->ps[k].out);
        if (st)
            return st;
        to[k] = k;
    }
    return exchange(c, c->n_ps, to, DT_PSMSG_ACK, NULL, NULL);
}

dt_status dt_ps_client_use_dense(dt_ps_client *c, const dt_arena *params)
{
    free(c->var_offset), free(c->var_count), free(c->var_to);
    int n = params->n_views;
    c->var_offset = malloc(((size_t)n + 1) * sizeof *c->var_offset);
    c->var_count = malloc(((size_t)n + 1) * sizeof *c->var_count);
    c->var_to = malloc(((size_t)n + 1) * sizeof *c->var_to);
    c->n_vars = 0;
    if (!c->var_offset || !c->var_count || !c->var_to)
        return dt_error(DT_ERR_NOMEM, "no memory for %d dense variables", n);
    for (int i = 0; i < n; i++) {
        c->var_offset[i] = params->views[i].offset, c->var_count[i] = params->views[i].n_elems;
        c->var_to[i] = i % c->n_ps;
    }
    c->n_vars = n;
    return DT_OK;
}

dt_status dt_ps_client_define_dense(dt_ps_client *c, const dt_arena *params,
                                    const dt_optim_config *opt)
{
    dt_status st = dt_ps_client_use_dense(c, params);
    for (int i = 0; i < c->n_vars && st == DT_OK; i++) {
        dt_psmsg m;
        dt_ps_var_msg((uint32_t)i, c->var_offset[i], c->var_count[i], params->n_elems, opt, NULL,
                      &m);
        m.request_id = ++c->next_request;
        st = dt_psmsg_encode(&m, NULL, params->data + c->var_offset[i], &c->ps[c->var_to[i]].out);
    }
    if (st == DT_OK)
        st = exchange(c, c->n_vars, c->var_to, DT_PSMSG_ACK, NULL, NULL);
    return st;
}

typedef struct {
    dt_ps_client *c;
    float *params;
} dense_ctx;

static dt_status copy_dense(void *ctx, int64_t var, const dt_psmsg *r)
{
    dense_ctx *d = ctx;
    if (r->offset != d->c->var_offset[var] || r->count != d->c->var_count[var])
        return dt_error(DT_ERR_PEER, "%s: variable %lld came back as [%llu, +%llu)",
                        d->c->ps[d->c->var_to[var]].name, (long long)var,
                        (unsigned long long)r->offset, (unsigned long long)r->count);
    for (uint64_t i = 0; i < r->count; i++)
        d->params[r->offset + i] = dt_psmsg_value(r, i);
    return DT_OK;
}

/* Queues one dense message per variable: PULL_DENSE, or PUSH_DENSE with grads. */
static dt_status dense_call(dt_ps_client *c, dt_psmsg_type type, float *params,
                            const float *grads, int64_t step, float lr_scale)
{
    dt_status st = DT_OK;
    for (int i = 0; i < c->n_vars && st == DT_OK; i++) {
        dt_psmsg m = {.type = type, .request_id = ++c->next_request, .table = (uint32_t)i,
                      .offset = c->var_offset[i], .count = c->var_count[i], .step = step,
                      .lr_scale = lr_scale};
        st = dt_psmsg_encode(&m, NULL, grads ? grads + c->var_offset[i] : NULL,
                             &c->ps[c->var_to[i]].out);
    }
    dense_ctx d = {c, params};
    if (st == DT_OK)
        st = exchange(c, c->n_vars, c->var_to,
                      type == DT_PSMSG_PULL_DENSE ? DT_PSMSG_DENSE : DT_PSMSG_ACK,
                      type == DT_PSMSG_PULL_DENSE ? copy_dense : NULL, &d);
    for (int k = 0; k < c->n_ps; k++)
        c->ps[k].out.len = 0;
    return st;
}

dt_status dt_ps_client_pull_dense(dt_ps_client *c, float *params)
{
    return dense_call(c, DT_PSMSG_PULL_DENSE, params, NULL, 0, 0.0f);
}

dt_status dt_ps_client_push_dense(dt_ps_client *c, const float *grads, int64_t step,
                                  float lr_scale)
{
    return dense_call(c, DT_PSMSG_PUSH_DENSE, NULL, grads, step, lr_scale);
}
