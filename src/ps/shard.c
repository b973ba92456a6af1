/* A parameter-server task's shards of the tables (see shard.h). */
#include "shard.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The memory this process may use: the host's, or its cgroup's (v2) limit when lower. */
static uint64_t host_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    unsigned long long limit;
    if (f && fscanf(f, "%llu", &limit) == 1 && limit < bytes)
        bytes = limit;
    if (f)
        fclose(f);
    return bytes;
}

void dt_ps_shard_init(dt_ps_shard *s, dt_pool *pool)
{
    memset(s, 0, sizeof *s);
    s->pool = pool;
    uint64_t host = host_memory();
    s->max_bytes = host - host / 10;
    dt_optim_init(&s->dense_opt);
}

/* Slots a row-wise optimizer keeps beside each row (dt_rowopt_setup's). */
static int rowopt_slots(dt_rowopt_kind kind)
{
    return kind == DT_ROWOPT_SGD ? 0 : kind == DT_ROWOPT_ADAGRAD ? 1 : 2;
}

static double table_bytes(int64_t rows, int dim, dt_rowopt_kind kind)
{
    return (double)rows * (double)dim * sizeof(float) * (double)(1 + rowopt_slots(kind));
}

/* A shard of rows x dim (and its slots) next to what s holds, against s->max_bytes. A dynamic
 * table holds the rows in use (its capacity is address space, bounded by its key map's own
 * memory check). */
static dt_status check_room(const dt_ps_shard *s, const char *name, int64_t rows, int dim,
                            dt_rowopt_kind kind)
{
    double held = 0, want = table_bytes(rows, dim, kind);
    for (int i = 0; i < s->n_tables; i++) {
        int64_t n = s->tables[i].t.rows;
        if (s->tables[i].keys) {
            dt_keymap_stats k;
            dt_keymap_stats_get(s->tables[i].keys, &k);
            n = k.rows_used;
        }
        held += table_bytes(n, s->tables[i].t.dim, s->tables[i].opt.kind);
    }
    if (held + want <= (double)s->max_bytes)
        return DT_OK;
    return dt_error(DT_ERR_INVALID, "ps: table %s: a shard of %lld rows of %d values with %d "
                    "optimizer slots takes %.3g GB; with the %.3g GB of tables this task holds, "
                    "more than the %.3g GB it may use (this host's memory, less a tenth)", name,
                    (long long)rows, dim, rowopt_slots(kind), want / 1e9, held / 1e9,
                    (double)s->max_bytes / 1e9);
}

/* A shard's initial values, drawn on every core: each row is seeded by its own index, so the
 * values are the same however many threads draw them, and a large table's definition (the
 * workers wait for it) takes 1/cores of the time the task's --threads pool alone would (2.7M
 * rows of 33 floats: 11 s on one core of a 2-core Xeon). */
static void draw_rows(dt_ps_shard *s, dt_table *t, float stddev, uint64_t seed, int64_t first,
                      int64_t stride)
{
    dt_pool *all = NULL;
    int cores = dt_cpu_count();
    if (cores > dt_pool_size(s->pool) && dt_pool_create(cores, &all) != DT_OK)
        all = NULL; /* the task's own pool then */
    dt_table_init_normal_rows(t, stddev, seed, first, stride, all ? all : s->pool);
    dt_pool_destroy(all);
}

void dt_ps_shard_free(dt_ps_shard *s)
{
    for (int i = 0; i < s->n_tables; i++) {
        dt_table_free(&s->tables[i].t);
        dt_keymap_destroy(s->tables[i].keys);
    }
    dt_sparse_rows_free(&s->scratch);
    s->n_tables = 0;
    free(s->dense);
    free(s->dense_grad);
    if (s->dense_total)
        dt_optim_free(&s->dense_opt);
    s->dense = s->dense_grad = NULL;
    s->dense_total = 0;
    s->n_slices = 0;
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
    dt_status st = check_room(s, name, rows, dim, opt->kind);
    if (st)
        return st;
    st = dt_table_create(&ts->t, name, rows, dim);
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
        draw_rows(s, &ts->t, init_stddev, seed, lo, stride);
    }
    s->n_tables++;
    return DT_OK;
}

dt_status dt_ps_shard_add_dynamic(dt_ps_shard *s, uint32_t id, const char *name, int dim,
                                  int64_t n_shards, int64_t shard, const dt_rowopt_config *opt,
                                  float init_stddev, uint64_t seed, const dt_keymap_policy *policy)
{
    if (s->n_tables == DT_PS_MAX_TABLES)
        return dt_error(DT_ERR_INVALID, "ps: more than %d tables", DT_PS_MAX_TABLES);
    if (n_shards < 1 || shard < 0 || shard >= n_shards || n_shards > 65536)
        return dt_error(DT_ERR_INVALID, "ps: dynamic table %s: shard %lld of %lld", name,
                        (long long)shard, (long long)n_shards);
    for (int i = 0; i < s->n_tables; i++)
        if (s->tables[i].id == id)
            return dt_error(DT_ERR_INVALID, "ps: table %u is already held", id);
    dt_ps_table_shard *ts = &s->tables[s->n_tables];
    memset(ts, 0, sizeof *ts);
    ts->id = id, ts->rows_total = DT_PARTITION_HASH_ROWS, ts->n_shards = n_shards;
    ts->shard = shard, ts->strategy = DT_PARTITION_HASH, ts->opt = *opt;
    ts->init_stddev = init_stddev, ts->seed = seed, ts->policy = *policy;
    /* The capacity is address space; the map's memory check stops the shard first. */
    int64_t cap = dt_keymap_capacity(policy, (size_t)dim * sizeof(float));
    dt_status st = dt_keymap_create(name, policy, cap, &ts->keys);
    if (st == DT_OK)
        st = dt_table_create(&ts->t, name, cap, dim);
    if (st == DT_OK)
        st = dt_keymap_attach(ts->keys, &ts->t, init_stddev, seed);
    if (st == DT_OK)
        st = dt_rowopt_setup(opt, &ts->t);
    if (st) {
        dt_table_free(&ts->t);
        dt_keymap_destroy(ts->keys);
        ts->keys = NULL;
        return st;
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
        if (ts->keys) { /* a key: this shard's when it hashes here */
            if (ts->n_shards > 1 && dt_keymap_shard(id, (int)ts->n_shards) != ts->shard) {
                *bad = id;
                return false;
            }
            local[i] = id;
            continue;
        }
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

/* The payload of a ROWS reply of n rows of dim values (psmsg.h). */
static uint64_t rows_reply_bytes(uint32_t n, int dim)
{
    return 12 + (uint64_t)n * (uint64_t)dim * sizeof(float);
}

/* A pull's reply is sized by the request (n ids) times the table's row: checked against what a
 * reply may hold, and the ids against the shard, before the rows are allocated, so a request
 * never makes the ps allocate more than it can send. */
static dt_status pull(dt_ps_shard *s, dt_ps_table_shard *ts, const dt_psmsg *req, dt_psbuf *reply)
{
    uint64_t bytes = rows_reply_bytes(req->n, ts->t.dim);
    if (bytes > DT_PSMSG_MAX_PAYLOAD)
        return reply_error(req, DT_ERR_INVALID, reply, "table %u: a pull of %u rows of %d values "
                           "needs a reply of %llu bytes, more than a message holds (%llu): pull "
                           "fewer ids at once", ts->id, req->n, ts->t.dim,
                           (unsigned long long)bytes, (unsigned long long)DT_PSMSG_MAX_PAYLOAD);
    int64_t *local = malloc(((size_t)req->n + 1) * sizeof *local);
    float *rows = NULL;
    dt_status st = DT_OK;
    int64_t bad = 0;
    if (!local) {
        st = dt_error(DT_ERR_NOMEM, "ps: no memory for a pull of %u rows", req->n);
    } else if (!local_rows(ts, req, local, &bad)) {
        st = reply_error(req, DT_ERR_INVALID, reply, "table %u: id %lld is not held by shard "
                         "%lld of %lld", ts->id, (long long)bad, (long long)ts->shard,
                         (long long)ts->n_shards);
    } else if (!(rows = malloc(((size_t)req->n * (size_t)ts->t.dim + 1) * sizeof *rows))) {
        st = dt_error(DT_ERR_NOMEM, "ps: no memory for a pull of %u rows of %d values", req->n,
                      ts->t.dim);
    } else {
        /* A dynamic table's keys: their rows, the zero row for a key without one (a lookup
         * that counts nothing: scoring, or a coordinator reading the table). */
        if (ts->keys)
            dt_keymap_find(ts->keys, local, req->n, local);
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

/* A training pull of a dynamic table: each key counted as many times as the batch saw it and
 * stamped with the step, admitted at its count; the rows of the keys admitted, zeros for the
 * others. */
static dt_status pull_keys(dt_ps_shard *s, dt_ps_table_shard *ts, const dt_psmsg *req,
                           dt_psbuf *reply)
{
    (void)s;
    if (!ts->keys)
        return reply_error(req, DT_ERR_INVALID, reply, "table %u is not dynamic: PULL_KEYS is "
                           "for keys", ts->id);
    uint64_t bytes = rows_reply_bytes(req->n, ts->t.dim);
    if (bytes > DT_PSMSG_MAX_PAYLOAD)
        return reply_error(req, DT_ERR_INVALID, reply, "table %u: a pull of %u keys needs a "
                           "reply of %llu bytes, more than a message holds", ts->id, req->n,
                           (unsigned long long)bytes);
    int64_t *keys = malloc(((size_t)req->n + 1) * sizeof *keys);
    int64_t *rows = malloc(((size_t)req->n + 1) * sizeof *rows);
    uint32_t *times = malloc(((size_t)req->n + 1) * sizeof *times);
    float *values = NULL;
    int64_t bad = 0;
    dt_status st = DT_OK;
    if (!keys || !rows || !times) {
        st = dt_error(DT_ERR_NOMEM, "ps: no memory for a pull of %u keys", req->n);
    } else if (!local_rows(ts, req, keys, &bad)) {
        st = reply_error(req, DT_ERR_INVALID, reply, "table %u: key %lld is not held by shard "
                         "%lld of %lld", ts->id, (long long)bad, (long long)ts->shard,
                         (long long)ts->n_shards);
    } else {
        for (uint32_t i = 0; i < req->n; i++)
            times[i] = dt_psmsg_times(req, i);
        st = dt_keymap_resolve_counted(ts->keys, keys, times, req->n, req->step, rows);
        /* Past the table's memory: the worker hears why; the ps keeps what it holds. */
        if (st == DT_ERR_NOMEM)
            st = reply_error(req, DT_ERR_NOMEM, reply, "%s", dt_last_error());
        else if (!(values = malloc(((size_t)req->n * (size_t)ts->t.dim + 1) * sizeof *values)))
            st = dt_error(DT_ERR_NOMEM, "ps: no memory for a pull of %u rows", req->n);
        else {
            for (uint32_t i = 0; i < req->n; i++)
                memcpy(values + (size_t)i * (size_t)ts->t.dim, dt_table_row(&ts->t, rows[i]),
                       (size_t)ts->t.dim * sizeof *values);
            dt_psmsg m = {.type = DT_PSMSG_ROWS, .request_id = req->request_id, .table = ts->id,
                          .n = req->n, .dim = (uint32_t)ts->t.dim};
            st = dt_psmsg_encode(&m, NULL, values, reply);
        }
    }
    free(keys), free(rows), free(times), free(values);
    return st;
}

/* A dynamic table's pushed keys turned into their rows: the keys without one (not admitted, or
 * evicted since the pull) are dropped with their gradient rows. */
static void keys_to_pushed_rows(dt_ps_table_shard *ts, dt_sparse_rows *g)
{
    dt_keymap_find(ts->keys, g->ids, g->n, g->ids);
    size_t kept = 0, dim = (size_t)g->dim;
    for (size_t i = 0; i < g->n; i++) {
        if (!g->ids[i])
            continue;
        if (kept != i) {
            g->ids[kept] = g->ids[i];
            memmove(g->rows + kept * dim, g->rows + i * dim, dim * sizeof *g->rows);
        }
        kept++;
    }
    g->n = kept;
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
    dt_psmsg_values(req, 0, nv, g->rows);
    g->n = req->n;
    if (req->step < 1)
        return reply_error(req, DT_ERR_INVALID, reply, "table %u: a push at step %lld (from 1)",
                           ts->id, (long long)req->step);
    if (ts->keys)
        keys_to_pushed_rows(ts, g);
    dt_rowopt_update(&ts->opt, ts->opt.lr * req->lr_scale, req->step, &ts->t, g, s->pool);
    if (ts->keys) /* a page of the eviction pass under way or due */
        dt_keymap_evict_step(ts->keys, req->step, false);
    ts->clock++;
    if (req->step > s->last_step)
        s->last_step = req->step;
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
           memcmp(ts->t.name, req->text, req->text_len) == 0 &&
           (req->strategy != DT_PARTITION_HASH || dt_keymap_policy_equal(&ts->policy, &req->policy));
}

static dt_status define(dt_ps_shard *s, const dt_psmsg *req, dt_psbuf *reply)
{
    dt_ps_table_shard *ts = find(s, req->table);
    if (ts && !same_definition(ts, req))
        return reply_error(req, DT_ERR_INVALID, reply, "table %u is already held with another "
                           "definition", req->table);
    if (!ts) {
        if (req->strategy > DT_PARTITION_HASH || req->optimizer > DT_ROWOPT_FTRL)
            return reply_error(req, DT_ERR_INVALID, reply, "table %u: partition strategy %u or "
                               "optimizer %u unknown", req->table, req->strategy, req->optimizer);
        const float *p = req->params;
        dt_rowopt_config c = {(dt_rowopt_kind)req->optimizer, p[0], p[1], p[2], p[3], p[4], p[5],
                              p[6], p[7], p[8], p[9]};
        char name[DT_PSMSG_MAX_NAME + 1];
        memcpy(name, req->text, req->text_len);
        name[req->text_len] = '\0';
        dt_status st =
            req->strategy == DT_PARTITION_HASH
                ? dt_ps_shard_add_dynamic(s, req->table, name, (int)req->dim, req->n_shards,
                                          req->shard, &c, req->init_stddev, req->seed, &req->policy)
                : dt_ps_shard_add_table(s, req->table, name, req->rows_total, (int)req->dim,
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

/* ---- Dense slices ---- */

/* The dense optimizer's numbers in a VAR message, in this order. */
static void dense_params(const dt_optim_config *c, float p[DT_PSMSG_TABLE_PARAMS])
{
    const float v[DT_PSMSG_TABLE_PARAMS] = {c->lr, c->momentum, c->nesterov ? 1.0f : 0.0f,
                                            c->beta1, c->beta2, c->epsilon,
                                            c->initial_accumulator, c->decay_rate, c->alpha,
                                            0.0f};
    memcpy(p, v, sizeof v);
}

void dt_ps_var_msg(uint32_t id, uint64_t offset, uint64_t count, uint64_t total,
                   const dt_optim_config *opt, dt_psmsg *m)
{
    memset(m, 0, sizeof *m);
    m->type = DT_PSMSG_VAR, m->table = id, m->offset = offset, m->count = count;
    m->total = total, m->optimizer = (uint32_t)opt->kind, m->schedule = (uint32_t)opt->schedule;
    m->decay_steps = opt->decay_steps;
    dense_params(opt, m->params);
}

static dt_status dense_config_of(const dt_psmsg *req, dt_optim_config *c)
{
    if (req->optimizer > DT_OPT_ADAGRAD || req->schedule > DT_LR_COSINE)
        return dt_error(DT_ERR_INVALID, "dense optimizer %u or schedule %u unknown",
                        req->optimizer, req->schedule);
    const float *p = req->params;
    dt_optim_config_default(c, (dt_opt_kind)req->optimizer);
    c->lr = p[0], c->momentum = p[1], c->nesterov = p[2] != 0.0f, c->beta1 = p[3];
    c->beta2 = p[4], c->epsilon = p[5], c->initial_accumulator = p[6], c->decay_rate = p[7];
    c->alpha = p[8], c->schedule = (dt_lr_kind)req->schedule, c->decay_steps = req->decay_steps;
    return dt_optim_config_check(c);
}

/* The dense store and its optimizer, made by the first slice for the whole layout. */
static dt_status setup_dense(dt_ps_shard *s, const dt_psmsg *req, const dt_optim_config *cfg)
{
    if (req->total > 2147483647u)
        return dt_error(DT_ERR_INVALID, "%llu dense floats: more than one view holds",
                        (unsigned long long)req->total);
    dt_arena layout;
    dt_arena_init(&layout);
    int dims[1] = {(int)req->total};
    dt_status st = dt_arena_add(&layout, "dense", 1, dims, NULL);
    if (st == DT_OK)
        st = dt_optim_setup(&s->dense_opt, cfg, &layout);
    dt_arena_free(&layout);
    if (st == DT_OK && (!(s->dense = calloc(req->total, sizeof *s->dense)) ||
                        !(s->dense_grad = calloc(req->total, sizeof *s->dense_grad))))
        st = dt_error(DT_ERR_NOMEM, "no memory for %llu dense floats",
                      (unsigned long long)req->total);
    if (st) {
        dt_optim_free(&s->dense_opt);
        dt_optim_init(&s->dense_opt);
        free(s->dense), free(s->dense_grad);
        s->dense = s->dense_grad = NULL;
        return st;
    }
    s->dense_total = req->total;
    return DT_OK;
}

static dt_ps_dense_slice *find_slice(dt_ps_shard *s, uint32_t id)
{
    for (int i = 0; i < s->n_slices; i++)
        if (s->slices[i].id == id)
            return &s->slices[i];
    return NULL;
}

static bool same_dense_config(const dt_optim_config *a, const dt_optim_config *b)
{
    float pa[DT_PSMSG_TABLE_PARAMS], pb[DT_PSMSG_TABLE_PARAMS];
    dense_params(a, pa), dense_params(b, pb);
    return a->kind == b->kind && a->schedule == b->schedule &&
           a->decay_steps == b->decay_steps && memcmp(pa, pb, sizeof pa) == 0;
}

static dt_status define_slice(dt_ps_shard *s, const dt_psmsg *req, dt_psbuf *reply)
{
    dt_optim_config cfg;
    dt_status st = dense_config_of(req, &cfg);
    if (st)
        return reply_error(req, st, reply, "variable %u: %s", req->table, dt_last_error());
    if (s->dense_total == 0 && (st = setup_dense(s, req, &cfg)))
        return st == DT_ERR_NOMEM ? st : reply_error(req, st, reply, "%s", dt_last_error());
    if (req->total != s->dense_total || !same_dense_config(&cfg, &s->dense_opt.cfg))
        return reply_error(req, DT_ERR_INVALID, reply, "variable %u: another dense layout or "
                           "optimizer than the first variable's", req->table);
    dt_ps_dense_slice *v = find_slice(s, req->table);
    if (v && (v->offset != req->offset || v->count != req->count))
        return reply_error(req, DT_ERR_INVALID, reply, "variable %u is already held as another "
                           "slice", req->table);
    if (!v) {
        for (int i = 0; i < s->n_slices; i++)
            if (req->offset < s->slices[i].offset + s->slices[i].count &&
                s->slices[i].offset < req->offset + req->count)
                return reply_error(req, DT_ERR_INVALID, reply, "variable %u overlaps variable %u",
                                   req->table, s->slices[i].id);
        if (s->n_slices == DT_PS_MAX_SLICES)
            return reply_error(req, DT_ERR_INVALID, reply, "more than %d variables on one ps",
                               DT_PS_MAX_SLICES);
        v = &s->slices[s->n_slices++];
        *v = (dt_ps_dense_slice){req->table, req->offset, req->count, 0};
        dt_psmsg_values(req, 0, req->count, s->dense + req->offset);
    }
    dt_psmsg ack = {.type = DT_PSMSG_ACK, .request_id = req->request_id, .clock = v->clock};
    return dt_psmsg_encode(&ack, NULL, NULL, reply);
}

/* The slice a dense request names, or an ERROR reply. */
static dt_ps_dense_slice *slice_of(dt_ps_shard *s, const dt_psmsg *req, dt_psbuf *reply,
                                   dt_status *st)
{
    dt_ps_dense_slice *v = find_slice(s, req->table);
    if (!v)
        *st = reply_error(req, DT_ERR_UNAVAILABLE, reply, "no variable %u on this ps (yet)",
                          req->table);
    else if (v->offset != req->offset || v->count != req->count)
        *st = reply_error(req, DT_ERR_INVALID, reply, "variable %u is [%llu, +%llu), not [%llu, "
                          "+%llu)", v->id, (unsigned long long)v->offset,
                          (unsigned long long)v->count, (unsigned long long)req->offset,
                          (unsigned long long)req->count);
    else
        return v;
    return NULL;
}

static dt_status pull_dense(dt_ps_shard *s, const dt_psmsg *req, dt_psbuf *reply)
{
    dt_status st = DT_OK;
    dt_ps_dense_slice *v = slice_of(s, req, reply, &st);
    if (!v)
        return st;
    dt_psmsg m = {.type = DT_PSMSG_DENSE, .request_id = req->request_id, .table = v->id,
                  .offset = v->offset, .count = v->count};
    return dt_psmsg_encode(&m, NULL, s->dense + v->offset, reply);
}

static dt_status push_dense(dt_ps_shard *s, const dt_psmsg *req, dt_psbuf *reply)
{
    dt_status st = DT_OK;
    dt_ps_dense_slice *v = slice_of(s, req, reply, &st);
    if (!v)
        return st;
    if (req->step < 1)
        return reply_error(req, DT_ERR_INVALID, reply, "variable %u: a push at step %lld (from "
                           "1)", v->id, (long long)req->step);
    float *g = s->dense_grad + v->offset;
    dt_psmsg_values(req, 0, v->count, g);
    /* The update of the push's step: its bias correction and scheduled rate. */
    dt_optim *o = &s->dense_opt;
    o->iterations = req->step - 1;
    o->lr_now = req->lr_scale == 1.0f ? 0.0f
                                      : dt_lr_schedule_at(&o->cfg, o->iterations) * req->lr_scale;
    dt_optim_update_slice(o, s->pool, s->dense + v->offset, g, v->offset, v->offset + v->count);
    v->clock++;
    if (req->step > s->last_step)
        s->last_step = req->step;
    dt_psmsg ack = {.type = DT_PSMSG_ACK, .request_id = req->request_id, .clock = v->clock};
    return dt_psmsg_encode(&ack, NULL, NULL, reply);
}

/* ---- Restoring a checkpoint ---- */

/* ASSIGN: values (and slots) set where the coordinator restores them. */
static dt_status assign(dt_ps_shard *s, const dt_psmsg *req, dt_psbuf *reply)
{
    float *values, *slot[DT_PSMSG_MAX_SLOTS];
    uint64_t room;
    int n_slots;
    if (req->target == 0) {
        dt_ps_table_shard *ts = find(s, req->table);
        if (!ts)
            return reply_error(req, DT_ERR_UNAVAILABLE, reply, "no table %u on this ps (yet)",
                               req->table);
        room = (uint64_t)ts->t.rows * (uint64_t)ts->t.dim;
        n_slots = ts->t.n_slots;
        values = ts->t.data;
        for (int k = 0; k < n_slots; k++)
            slot[k] = ts->t.slots[k];
    } else {
        dt_ps_dense_slice *v = find_slice(s, req->table);
        if (!v)
            return reply_error(req, DT_ERR_UNAVAILABLE, reply, "no variable %u on this ps (yet)",
                               req->table);
        if (req->offset != v->offset || req->count != v->count)
            return reply_error(req, DT_ERR_INVALID, reply, "variable %u is [%llu, +%llu), not "
                               "[%llu, +%llu)", v->id, (unsigned long long)v->offset,
                               (unsigned long long)v->count,
                               (unsigned long long)req->offset, (unsigned long long)req->count);
        room = s->dense_total;
        n_slots = s->dense_opt.n_slots;
        values = s->dense;
        size_t stride = n_slots ? s->dense_opt.state.n_elems / (size_t)n_slots : 0;
        for (int k = 0; k < n_slots; k++)
            slot[k] = s->dense_opt.state.data + (size_t)k * stride;
    }
    if (req->offset > room || req->count > room - req->offset || req->slots != (uint32_t)n_slots)
        return reply_error(req, DT_ERR_INVALID, reply, "%s %u: %llu values from %llu with %u "
                           "slots, it holds %llu with %d", req->target ? "variable" : "table",
                           req->table, (unsigned long long)req->count,
                           (unsigned long long)req->offset, req->slots,
                           (unsigned long long)room, n_slots);
    dt_psmsg_values(req, 0, req->count, values + req->offset);
    for (int k = 0; k < n_slots; k++)
        dt_psmsg_values(req, (size_t)req->count * (size_t)(k + 1), req->count,
                        slot[k] + req->offset);
    dt_psmsg ack = {.type = DT_PSMSG_ACK, .request_id = req->request_id};
    return dt_psmsg_encode(&ack, NULL, NULL, reply);
}

/* ---- A dynamic table's state, keyed: restored, read, settled for a checkpoint ---- */

/* The keys a KEYED message carries at most: its rows and slots within 64 MiB (the filter:
 * 8 MiB of it). */
static uint32_t keyed_max(const dt_ps_table_shard *ts, uint32_t kind, bool slots)
{
    if (kind == DT_PSMSG_KEYED_BLOOM)
        return (uint32_t)1 << 23;
    uint64_t per = 16 + (kind == DT_PSMSG_KEYED_ROWS
                             ? 4ull * (uint64_t)ts->t.dim * (1 + (slots ? ts->t.n_slots : 0))
                             : 0);
    uint64_t n = ((uint64_t)64 << 20) / per;
    return n < 1 ? 1 : n > DT_PSMSG_MAX_ROWS ? DT_PSMSG_MAX_ROWS : (uint32_t)n;
}

/* The filter's bytes from *cursor as one KEYED message. */
static dt_status keyed_bloom(const dt_ps_table_shard *ts, dt_psmsg *m, int64_t *cursor,
                             size_t n, dt_psbuf *out)
{
    size_t have = 0;
    const uint8_t *b = dt_keymap_bloom(ts->keys, &have);
    size_t at = *cursor < 0 ? 0 : (size_t)*cursor;
    n = at >= have ? 0 : have - at < n ? have - at : n;
    m->n = (uint32_t)n, m->text = (const char *)(b ? b + at : NULL);
    m->offset = (uint64_t)at;
    *cursor = (int64_t)(at + n);
    return dt_psmsg_encode(m, NULL, NULL, out);
}

dt_status dt_ps_shard_keyed(const dt_ps_table_shard *ts, uint32_t kind, int64_t *cursor,
                            uint32_t max, bool slots, uint64_t request_id, dt_psbuf *out,
                            uint32_t *n_out)
{
    uint32_t cap = keyed_max(ts, kind, slots);
    size_t n = max < cap ? max : cap;
    dt_psmsg m = {.type = DT_PSMSG_KEYED, .request_id = request_id, .table = ts->id,
                  .target = kind};
    if (kind == DT_PSMSG_KEYED_BLOOM) {
        dt_status st = keyed_bloom(ts, &m, cursor, n, out);
        *n_out = m.n;
        return st;
    }
    bool rows = kind == DT_PSMSG_KEYED_ROWS;
    int n_slots = rows && slots ? ts->t.n_slots : 0;
    size_t d = rows ? (size_t)ts->t.dim : 0;
    int64_t *keys = malloc((n + 1) * sizeof *keys), *at = malloc((n + 1) * sizeof *at);
    uint32_t *counts = malloc((n + 1) * sizeof *counts), *last = malloc((n + 1) * sizeof *last);
    float *values = rows ? malloc((n * d * (size_t)(1 + n_slots) + 1) * sizeof *values) : NULL;
    dt_status st = DT_OK;
    *n_out = 0;
    if (!keys || !at || !counts || !last || (rows && !values)) {
        st = dt_error(DT_ERR_NOMEM, "ps: table %s: no memory to read %zu keys", ts->t.name, n);
        goto done;
    }
    n = rows ? dt_keymap_next_live(ts->keys, cursor, n, at, keys, counts, last)
             : dt_keymap_next_counting(ts->keys, cursor, n, keys, counts, last);
    /* Rows first, then each slot, each n x dim. */
    for (size_t i = 0; rows && i < n; i++) {
        memcpy(values + i * d, dt_table_row(&ts->t, at[i]), d * sizeof(float));
        for (int k = 0; k < n_slots; k++)
            memcpy(values + ((size_t)(k + 1) * n + i) * d, ts->t.slots[k] + (size_t)at[i] * d,
                   d * sizeof(float));
    }
    m.n = (uint32_t)n, m.dim = n ? (uint32_t)d : 0, m.slots = n ? (uint32_t)n_slots : 0;
    m.offset = (uint64_t)*cursor;
    m.times_host = counts, m.last_host = last;
    *n_out = m.n;
    st = dt_psmsg_encode(&m, keys, values, out);
done:
    free(keys), free(at), free(counts), free(last), free(values);
    return st;
}

static dt_status read_keys(dt_ps_table_shard *ts, const dt_psmsg *req, dt_psbuf *reply)
{
    if (!ts->keys)
        return reply_error(req, DT_ERR_INVALID, reply, "table %u is not dynamic: READ_KEYS is "
                           "for keys", ts->id);
    int64_t cursor = req->offset > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)req->offset;
    uint32_t n;
    return dt_ps_shard_keyed(ts, req->target, &cursor, req->n, req->slots != 0,
                             req->request_id, reply, &n);
}

/* KEYED: a dynamic table's rows (with every slot), counted keys or filter bytes merged in (a
 * restore, or a snapshot read back): keys must be this shard's. */
static dt_status keyed(dt_ps_table_shard *ts, const dt_psmsg *req, dt_psbuf *reply)
{
    if (!ts->keys)
        return reply_error(req, DT_ERR_INVALID, reply, "table %u is not dynamic: KEYED is for "
                           "keys", ts->id);
    char what[96];
    snprintf(what, sizeof what, "table %s: keyed state", ts->t.name);
    dt_status st = DT_OK;
    if (req->target == DT_PSMSG_KEYED_BLOOM) {
        st = dt_keymap_merge_bloom(ts->keys, (const uint8_t *)req->text, req->n,
                                   (size_t)req->offset, what);
        goto reply;
    }
    bool rows = req->target == DT_PSMSG_KEYED_ROWS;
    /* An empty message of rows ends a restore: its cursor is the checkpoint's step, where the
     * checkpoint's whole eviction pass ran. */
    if (rows && req->n == 0) {
        dt_keymap_set_pass_step(ts->keys, (int64_t)(req->offset > INT64_MAX ? 0 : req->offset));
        goto reply;
    }
    if (rows && req->n && (req->dim != (uint32_t)ts->t.dim || req->slots != (uint32_t)ts->t.n_slots))
        return reply_error(req, DT_ERR_INVALID, reply, "table %u: rows of %u values with %u "
                           "slots, the table's are %d with %d", ts->id, req->dim, req->slots,
                           ts->t.dim, ts->t.n_slots);
    size_t n = req->n, d = (size_t)ts->t.dim;
    int64_t *keys = malloc((n + 1) * sizeof *keys);
    uint32_t *counts = malloc((n + 1) * sizeof *counts), *last = malloc((n + 1) * sizeof *last);
    float *values = rows ? malloc((n * d * (1 + (size_t)ts->t.n_slots) + 1) * sizeof *values)
                         : NULL;
    if (!keys || !counts || !last || (rows && !values)) {
        free(keys), free(counts), free(last), free(values);
        return dt_error(DT_ERR_NOMEM, "ps: no memory for %zu keys", n);
    }
    for (size_t i = 0; i < n && st == DT_OK; i++) {
        keys[i] = dt_psmsg_id(req, i), counts[i] = dt_psmsg_times(req, i);
        last[i] = dt_psmsg_last(req, i);
        if (ts->n_shards > 1 && dt_keymap_shard(keys[i], (int)ts->n_shards) != ts->shard)
            st = dt_error(DT_ERR_INVALID, "%s: key %lld is not held by shard %lld of %lld",
                          what, (long long)keys[i], (long long)ts->shard,
                          (long long)ts->n_shards);
    }
    if (st == DT_OK && rows) {
        dt_psmsg_values(req, 0, n * d * (1 + (size_t)ts->t.n_slots), values);
        const float *slots[DT_TABLE_MAX_SLOTS];
        for (int k = 0; k < ts->t.n_slots; k++)
            slots[k] = values + (size_t)(k + 1) * n * d;
        st = dt_keymap_merge_rows(ts->keys, 0, keys, counts, last, (int64_t)n, values, slots,
                                  what);
        dt_keymap_merge_end(ts->keys);
    } else if (st == DT_OK) {
        st = dt_keymap_merge_counting(ts->keys, keys, counts, last, (int64_t)n, what);
    }
    free(keys), free(counts), free(last), free(values);
reply:
    /* What the merge refused (a key twice, another shard's, the table full) goes back to the
     * sender; the shard keeps what it holds. */
    if (st)
        return reply_error(req, st, reply, "%s", dt_last_error());
    dt_psmsg ack = {.type = DT_PSMSG_ACK, .request_id = req->request_id};
    return dt_psmsg_encode(&ack, NULL, NULL, reply);
}

void dt_ps_shard_settle(dt_ps_shard *s, int64_t step)
{
    for (int i = 0; i < s->n_tables; i++)
        if (s->tables[i].keys) {
            dt_keymap_evict_all(s->tables[i].keys, step);
            dt_keymap_compact(s->tables[i].keys);
        }
}

dt_status dt_ps_shard_handle(dt_ps_shard *s, const dt_psmsg *req, dt_psbuf *reply)
{
    switch (req->type) {
    case DT_PSMSG_PING: {
        dt_psmsg pong = {.type = DT_PSMSG_PONG, .request_id = req->request_id};
        return dt_psmsg_encode(&pong, NULL, NULL, reply);
    }
    case DT_PSMSG_KEYED:
    case DT_PSMSG_READ_KEYS: {
        dt_ps_table_shard *ts = find(s, req->table);
        if (!ts)
            return reply_error(req, DT_ERR_UNAVAILABLE, reply, "no table %u on this ps (yet)",
                               req->table);
        return req->type == DT_PSMSG_KEYED ? keyed(ts, req, reply) : read_keys(ts, req, reply);
    }
    case DT_PSMSG_PULL_ROWS:
    case DT_PSMSG_PULL_KEYS:
    case DT_PSMSG_PUSH_ROWS: {
        dt_ps_table_shard *ts = find(s, req->table);
        if (!ts)
            return reply_error(req, DT_ERR_UNAVAILABLE, reply, "no table %u on this ps (yet)",
                               req->table);
        return req->type == DT_PSMSG_PULL_ROWS ? pull(s, ts, req, reply)
               : req->type == DT_PSMSG_PULL_KEYS ? pull_keys(s, ts, req, reply)
                                                 : push(s, ts, req, reply);
    }
    case DT_PSMSG_TABLE:
        return define(s, req, reply);
    case DT_PSMSG_VAR:
        return define_slice(s, req, reply);
    case DT_PSMSG_PULL_DENSE:
        return pull_dense(s, req, reply);
    case DT_PSMSG_PUSH_DENSE:
        return push_dense(s, req, reply);
    case DT_PSMSG_ASSIGN:
        return assign(s, req, reply);
    default:
        return reply_error(req, DT_ERR_UNSUPPORTED, reply, "a ps does not answer %s",
                           dt_psmsg_type_name(req->type));
    }
}
