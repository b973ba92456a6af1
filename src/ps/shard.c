/* A parameter-server task's shards of the tables (see shard.h). */
#include "shard.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dt_ps_shard_init(dt_ps_shard *s, dt_pool *pool)
{
    memset(s, 0, sizeof *s);
    s->pool = pool;
}

void dt_ps_shard_free(dt_ps_shard *s)
{
    for (int i = 0; i < s->n_tables; i++)
        dt_table_free(&s->tables[i].t);
    dt_sparse_rows_free(&s->scratch);
    s->n_tables = 0;
}

dt_status dt_ps_shard_add_table(dt_ps_shard *s, uint32_t id, const char *name,
                                int64_t rows_total, int dim, int64_t n_shards, int64_t shard,
                                dt_partition_strategy strategy, const dt_rowopt_config *opt,
                                float init_stddev, uint64_t seed)
{
    if (s->n_tables == DT_PS_MAX_TABLES)
        return dt_error(DT_ERR_INVALID, "ps: more than %d tables", DT_PS_MAX_TABLES);
    if (n_shards < 1 || shard < 0 || shard >= n_shards || n_shards > rows_total)
        return dt_error(DT_ERR_INVALID, "ps: table %s: shard %lld of %lld over %lld rows", name,
                        (long long)shard, (long long)n_shards, (long long)rows_total);
    for (int i = 0; i < s->n_tables; i++)
        if (s->tables[i].id == id)
            return dt_error(DT_ERR_INVALID, "ps: table %u is already held", id);
    dt_ps_table_shard *ts = &s->tables[s->n_tables];
    memset(ts, 0, sizeof *ts);
    ts->id = id, ts->rows_total = rows_total, ts->n_shards = n_shards, ts->shard = shard;
    ts->strategy = strategy, ts->opt = *opt, ts->init_stddev = init_stddev, ts->seed = seed;
    int64_t rows = dt_partition_shard_rows(strategy, rows_total, n_shards, shard);
    dt_status st = dt_table_create(&ts->t, name, rows, dim);
    if (st == DT_OK)
        st = dt_rowopt_setup(opt, &ts->t);
    if (st) {
        dt_table_free(&ts->t);
        return st;
    }
    if (init_stddev > 0.0f) {
        int64_t lo = shard, stride = n_shards, hi;
        if (strategy == DT_PARTITION_DIV)
            dt_partition_range(rows_total, n_shards, shard, &lo, &hi), stride = 1;
        dt_table_init_normal_rows(&ts->t, init_stddev, seed, lo, stride, s->pool);
    }
    s->n_tables++;
    return DT_OK;
}

static dt_ps_table_shard *find(dt_ps_shard *s, uint32_t id)
{
    for (int i = 0; i < s->n_tables; i++)
        if (s->tables[i].id == id)
            return &s->tables[i];
    return NULL;
}

static dt_status reply_error(const dt_psmsg *req, dt_status code, dt_psbuf *reply,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static dt_status reply_error(const dt_psmsg *req, dt_status code, dt_psbuf *reply,
                             const char *fmt, ...)
{
    char text[DT_PSMSG_MAX_TEXT];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    dt_psmsg m = {.type = DT_PSMSG_ERROR, .request_id = req->request_id, .status = code,
                  .text = text, .text_len = (uint32_t)(n < 0 ? 0 : n >= (int)sizeof text
                                                                       ? (int)sizeof text - 1 : n)};
    return dt_psmsg_encode(&m, NULL, NULL, reply);
}

/* Each requested id's row within the shard, or -1 with *bad the first id it does not hold. */
static bool local_rows(const dt_ps_table_shard *ts, const dt_psmsg *req, int64_t *local,
                       int64_t *bad)
{
    for (uint32_t i = 0; i < req->n; i++) {
        int64_t id = dt_psmsg_id(req, i), shard, row;
        if (id >= ts->rows_total) {
            *bad = id;
            return false;
        }
        dt_partition_locate(ts->strategy, ts->rows_total, ts->n_shards, id, &shard, &row);
        if (shard != ts->shard) {
            *bad = id;
            return false;
        }
        local[i] = row;
    }
    return true;
}

static dt_status pull(dt_ps_shard *s, dt_ps_table_shard *ts, const dt_psmsg *req, dt_psbuf *reply)
{
    int64_t *local = malloc(((size_t)req->n + 1) * sizeof *local);
    float *rows = malloc(((size_t)req->n * (size_t)ts->t.dim + 1) * sizeof *rows);
    dt_status st = DT_OK;
    int64_t bad = 0;
    if (!local || !rows) {
        st = dt_error(DT_ERR_NOMEM, "ps: no memory for a pull of %u rows", req->n);
    } else if (!local_rows(ts, req, local, &bad)) {
        st = reply_error(req, DT_ERR_INVALID, reply, "table %u: id %lld is not held by shard "
                         "%lld of %lld", ts->id, (long long)bad, (long long)ts->shard,
                         (long long)ts->n_shards);
    } else {
        for (uint32_t i = 0; i < req->n; i++)
            memcpy(rows + (size_t)i * (size_t)ts->t.dim, dt_table_row(&ts->t, local[i]),
                   (size_t)ts->t.dim * sizeof *rows);
        dt_psmsg m = {.type = DT_PSMSG_ROWS, .request_id = req->request_id, .table = ts->id,
                      .n = req->n, .dim = (uint32_t)ts->t.dim};
        st = dt_psmsg_encode(&m, NULL, rows, reply);
    }
    (void)s;
    free(local);
    free(rows);
    return st;
}

static dt_status push(dt_ps_shard *s, dt_ps_table_shard *ts, const dt_psmsg *req, dt_psbuf *reply)
{
    if (req->dim != (uint32_t)ts->t.dim)
        return reply_error(req, DT_ERR_INVALID, reply, "table %u: rows of %u values pushed, the "
                           "table's are %d", ts->id, req->dim, ts->t.dim);
    dt_sparse_rows *g = &s->scratch;
    if (g->dim != ts->t.dim) {
        dt_sparse_rows_free(g);
        dt_sparse_rows_init(g, ts->t.dim);
    }
    dt_status st = dt_sparse_rows_reserve(g, req->n);
    if (st)
        return st;
    int64_t bad = 0;
    if (!local_rows(ts, req, g->ids, &bad))
        return reply_error(req, DT_ERR_INVALID, reply, "table %u: id %lld is not held by shard "
                           "%lld of %lld", ts->id, (long long)bad, (long long)ts->shard,
                           (long long)ts->n_shards);
    /* The update takes each row once, in increasing order, as a step's summed gradient is. */
    for (uint32_t i = 1; i < req->n; i++)
        if (g->ids[i] <= g->ids[i - 1])
            return reply_error(req, DT_ERR_INVALID, reply, "table %u: pushed ids are not unique "
                               "and increasing", ts->id);
    size_t nv = (size_t)req->n * (size_t)ts->t.dim;
    for (size_t k = 0; k < nv; k++)
        g->rows[k] = dt_psmsg_value(req, k);
    g->n = req->n;
    if (req->step < 1)
        return reply_error(req, DT_ERR_INVALID, reply, "table %u: a push at step %lld (from 1)",
                           ts->id, (long long)req->step);
    dt_rowopt_update(&ts->opt, ts->opt.lr * req->lr_scale, req->step, &ts->t, g, s->pool);
    ts->clock++;
    dt_psmsg ack = {.type = DT_PSMSG_ACK, .request_id = req->request_id, .clock = ts->clock};
    return dt_psmsg_encode(&ack, NULL, NULL, reply);
}

/* The optimizer's numbers in a TABLE message, in this order. */
static void opt_params(const dt_rowopt_config *c, float p[DT_PSMSG_TABLE_PARAMS])
{
    const float v[DT_PSMSG_TABLE_PARAMS] = {c->lr, c->beta1, c->beta2, c->epsilon,
                                            c->initial_accumulator, c->l1, c->l2, c->lr_power,
                                            c->beta, c->l2_reg};
    memcpy(p, v, sizeof v);
}

void dt_ps_table_msg(uint32_t id, const char *name, int64_t rows_total, int dim, int64_t n_shards,
                     int64_t shard, dt_partition_strategy strategy, const dt_rowopt_config *opt,
                     float init_stddev, uint64_t seed, dt_psmsg *m)
{
    memset(m, 0, sizeof *m);
    m->type = DT_PSMSG_TABLE, m->table = id, m->dim = (uint32_t)dim, m->rows_total = rows_total;
    m->n_shards = n_shards, m->shard = shard, m->strategy = (uint32_t)strategy;
    m->optimizer = (uint32_t)opt->kind, m->init_stddev = init_stddev, m->seed = seed;
    opt_params(opt, m->params);
    m->text = name, m->text_len = (uint32_t)strlen(name);
}

static bool same_definition(const dt_ps_table_shard *ts, const dt_psmsg *req)
{
    float p[DT_PSMSG_TABLE_PARAMS];
    opt_params(&ts->opt, p);
    return ts->rows_total == req->rows_total && ts->t.dim == (int)req->dim &&
           ts->n_shards == req->n_shards && ts->shard == req->shard &&
           (uint32_t)ts->strategy == req->strategy && (uint32_t)ts->opt.kind == req->optimizer &&
           memcmp(p, req->params, sizeof p) == 0 && ts->init_stddev == req->init_stddev &&
           ts->seed == req->seed && strlen(ts->t.name) == req->text_len &&
           memcmp(ts->t.name, req->text, req->text_len) == 0;
}

static dt_status define(dt_ps_shard *s, const dt_psmsg *req, dt_psbuf *reply)
{
    dt_ps_table_shard *ts = find(s, req->table);
    if (ts && !same_definition(ts, req))
        return reply_error(req, DT_ERR_INVALID, reply, "table %u is already held with another "
                           "definition", req->table);
    if (!ts) {
        if (req->strategy > DT_PARTITION_MOD || req->optimizer > DT_ROWOPT_FTRL)
            return reply_error(req, DT_ERR_INVALID, reply, "table %u: partition strategy %u or "
                               "optimizer %u unknown", req->table, req->strategy, req->optimizer);
        const float *p = req->params;
        dt_rowopt_config c = {(dt_rowopt_kind)req->optimizer, p[0], p[1], p[2], p[3], p[4], p[5],
                              p[6], p[7], p[8], p[9]};
        char name[DT_PSMSG_MAX_NAME + 1];
        memcpy(name, req->text, req->text_len);
        name[req->text_len] = '\0';
        dt_status st = dt_ps_shard_add_table(s, req->table, name, req->rows_total, (int)req->dim,
                                             req->n_shards, req->shard,
                                             (dt_partition_strategy)req->strategy, &c,
                                             req->init_stddev, req->seed);
        if (st == DT_ERR_NOMEM)
            return st;
        if (st)
            return reply_error(req, st, reply, "%s", dt_last_error());
        ts = find(s, req->table);
    }
    dt_psmsg ack = {.type = DT_PSMSG_ACK, .request_id = req->request_id, .clock = ts->clock};
    return dt_psmsg_encode(&ack, NULL, NULL, reply);
}

dt_status dt_ps_shard_handle(dt_ps_shard *s, const dt_psmsg *req, dt_psbuf *reply)
{
    switch (req->type) {
    case DT_PSMSG_PING: {
        dt_psmsg pong = {.type = DT_PSMSG_PONG, .request_id = req->request_id};
        return dt_psmsg_encode(&pong, NULL, NULL, reply);
    }
    case DT_PSMSG_PULL_ROWS:
    case DT_PSMSG_PUSH_ROWS: {
        dt_ps_table_shard *ts = find(s, req->table);
        if (!ts)
            return reply_error(req, DT_ERR_INVALID, reply, "no table %u on this ps", req->table);
        return req->type == DT_PSMSG_PULL_ROWS ? pull(s, ts, req, reply) : push(s, ts, req, reply);
    }
    case DT_PSMSG_TABLE:
        return define(s, req, reply);
    default:
        return reply_error(req, DT_ERR_UNSUPPORTED, reply, "a ps does not answer %s",
                           dt_psmsg_type_name(req->type));
    }
}
