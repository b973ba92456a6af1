/* The client side of the ps tasks (see client.h). */
#include "client.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../net/dial.h"
#include "psconn.h"
#include "../net/sock.h"
#include "../core/clock.h"
#include "shard.h"

#define MAX_TABLES DT_PS_MAX_TABLES

typedef struct {
    int fd;
    char name[DT_HOST_CAP + 48];
    dt_psbuf out, in;
    size_t sent;             /* bytes of out on their way */
    dt_psconn_ahead ahead;   /* replies read while out was still being sent */
    dt_session session;      /* the connection's MACs: every message out sealed, every reply
                                checked */
} ps_link;

/* A table as the chief placed it, and the plan of the round under way: its ids grouped by
 * shard (shard s's are ids[count[s] .. count[s + 1]), taken from places places[...] of the
 * caller's list), and where pulled rows go. */
typedef struct {
    uint32_t id;
    int64_t rows, n_shards;
    int dim;
    dt_partition_strategy strategy;
    int64_t *ids, *shard_of;
    size_t *places, *count, *fill; /* count and fill: n_shards + 1 */
    size_t cap;
    float *dest_rows;   /* by place */
    /* A dynamic table (the hash placement): keys of any int64 >= 0, and in a training pull each
     * key's sightings, grouped as ids are. */
    dt_keymap_policy policy;
    uint32_t *times;
} table_info;

/* What the reply to a queued message is, in the order the messages were queued. */
typedef enum {
    REPLY_ACK, REPLY_ROWS, REPLY_DENSE, REPLY_PONG, REPLY_KEYED, REPLY_STEPS
} reply_kind;

typedef struct {
    int to;            /* the ps */
    reply_kind kind;
    int table;         /* ROWS: index in tables */
    int64_t shard;
    int var;           /* DENSE */
    uint64_t request;  /* the id its reply must carry (set by queue) */
} pending;

struct dt_ps_client {
    int n_ps;
    ps_link *ps;
    dt_handshake_id me;        /* for connecting again */
    const dt_cluster *cl;
    bool broken;               /* a link failed mid-round: every link is out of step */
    dt_ps_steps steps;         /* the last STEPS reply */
    double request_timeout;    /* a pull, a push, a ping: how long a live ps may take */
    uint64_t next_request;
    table_info tables[MAX_TABLES];
    int n_tables;
    /* The dense variables: view i at [offset[i], + count[i]) on ps i mod P. */
    int n_vars;
    uint64_t *var_offset, *var_count;
    int *var_to;
    /* The round under way: messages queued in the links' out buffers, their replies due. */
    pending *due;
    size_t n_due, due_cap;
    float *dense_dest;
    float *grouped;   /* a push's rows, in shard order */
    size_t grouped_cap;
    /* A dynamic table read back: where its KEYED replies are merged, and the last one's */
    struct {
        dt_keymap *map;
        int table;           /* the attached table's index in map */
        const char *what;
        int64_t cursor;      /* where the next read starts */
        uint32_t n;          /* keys the last reply carried */
    } keyed;
    uint64_t bytes_sent, bytes_received;
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
    c->n_ps = n, c->request_timeout = request_timeout, c->me = *me, c->cl = cl;
    for (int k = 0; k < n; k++) {
        c->ps[k].fd = -1;
        dt_cluster_task_name(cl, DT_JOB_PS, k, c->ps[k].name, sizeof c->ps[k].name);
    }
    dt_status st = dt_ps_client_reconnect(c, connect_timeout);
    if (st) {
        dt_ps_client_close(c);
        return st;
    }
    *out = c;
    return DT_OK;
}

dt_status dt_ps_client_reconnect(dt_ps_client *c, double timeout)
{
    double deadline = dt_clock_now() + timeout;
    for (int k = 0; k < c->n_ps; k++) {
        dt_sock_close(c->ps[k].fd);
        c->ps[k].fd = -1;
        c->ps[k].out.len = c->ps[k].in.len = c->ps[k].sent = 0;
        dt_psconn_ahead_clear(&c->ps[k].ahead);
        dt_session_close(&c->ps[k].session);
    }
    c->n_due = 0;
    for (int k = 0; k < c->n_ps; k++) {
        ps_link *p = &c->ps[k];
        dt_session_keys keys;
        dt_status st = dt_dial_task(&c->me, dt_cluster_addr(c->cl, DT_JOB_PS, k), DT_JOB_PS, k,
                                    p->name, 10.0, deadline, &p->fd, &keys);
        if (st == DT_OK)
            st = dt_session_open(&p->session, &keys, true);
        OPENSSL_cleanse(&keys, sizeof keys);
        if (st) {
            c->broken = true;
            return st;
        }
    }
    c->broken = false;
    return DT_OK;
}

bool dt_ps_client_broken(const dt_ps_client *c) { return c->broken; }

void dt_ps_client_close(dt_ps_client *c)
{
    if (!c)
        return;
    for (int k = 0; k < c->n_ps; k++) {
        dt_sock_close(c->ps[k].fd);
        dt_psbuf_free(&c->ps[k].out);
        dt_psbuf_free(&c->ps[k].in);
        dt_psconn_ahead_free(&c->ps[k].ahead);
        dt_session_close(&c->ps[k].session);
    }
    free(c->ps);
    free(c->var_offset), free(c->var_count), free(c->var_to);
    for (int t = 0; t < c->n_tables; t++) {
        table_info *ti = &c->tables[t];
        free(ti->ids), free(ti->shard_of), free(ti->places), free(ti->count), free(ti->fill);
        free(ti->times);
    }
    free(c->due);
    free(c->grouped);
    free(c);
}

static int find(const dt_ps_client *c, uint32_t id)
{
    for (int i = 0; i < c->n_tables; i++)
        if (c->tables[i].id == id)
            return i;
    return -1;
}

/* Shard s of table id travels as table (id << 16 | s): a ps holding several shards of one table
 * keeps them apart. */
static uint32_t wire_table(uint32_t id, int64_t shard) { return id << 16 | (uint32_t)shard; }

static int ps_of_shard(const dt_ps_client *c, int64_t shard) { return (int)(shard % c->n_ps); }

/* ---- Rounds: every message queued, then sent, then every reply read ---- */

static dt_status queue(dt_ps_client *c, pending p, dt_psmsg *m, const int64_t *ids,
                       const float *values)
{
    if (c->n_due == c->due_cap) {
        size_t cap = c->due_cap ? 2 * c->due_cap : 64;
        pending *d = realloc(c->due, cap * sizeof *d);
        if (!d)
            return dt_error(DT_ERR_NOMEM, "no memory for %zu ps requests", cap);
        c->due = d, c->due_cap = cap;
    }
    ps_link *l = &c->ps[p.to];
    size_t start = l->out.len;
    m->request_id = p.request = ++c->next_request;
    dt_status st = dt_psmsg_encode(m, ids, values, &l->out);
    if (st == DT_OK && (st = dt_psconn_seal(&l->session, &l->out, start)))
        l->out.len = start; /* no message goes out without its MAC */
    if (st == DT_OK)
        c->due[c->n_due++] = p;
    return st;
}

static dt_status take_rows(dt_ps_client *c, const pending *p, const dt_psmsg *r)
{
    table_info *t = &c->tables[p->table];
    size_t lo = t->count[p->shard], n = t->count[p->shard + 1] - lo, dim = (size_t)t->dim;
    if (r->n != n || r->dim != (uint32_t)t->dim)
        return dt_error(DT_ERR_PEER, "%s: %u rows of %u for a pull of %zu rows of %d",
                        c->ps[p->to].name, r->n, r->dim, n, t->dim);
    if (t->n_shards == 1) /* the places are in order: one copy */
        dt_psmsg_values(r, 0, n * dim, t->dest_rows);
    else
        for (size_t i = 0; i < n; i++)
            dt_psmsg_values(r, i * dim, dim, t->dest_rows + t->places[lo + i] * dim);
    return DT_OK;
}

static dt_status take_dense(dt_ps_client *c, const pending *p, const dt_psmsg *r)
{
    if (r->offset != c->var_offset[p->var] || r->count != c->var_count[p->var])
        return dt_error(DT_ERR_PEER, "%s: variable %d came back as [%llu, +%llu)",
                        c->ps[p->to].name, p->var, (unsigned long long)r->offset,
                        (unsigned long long)r->count);
    dt_psmsg_values(r, 0, r->count, c->dense_dest + r->offset);
    return DT_OK;
}

/* A READ_KEYS reply: its live rows (and slots) merged into the map being read back into. */
static dt_status take_keyed(dt_ps_client *c, const pending *p, const dt_psmsg *r)
{
    table_info *t = &c->tables[p->table];
    size_t n = r->n, d = (size_t)t->dim;
    if (r->target != DT_PSMSG_KEYED_ROWS || (n && r->dim != (uint32_t)t->dim))
        return dt_error(DT_ERR_PEER, "%s: keyed state of kind %u and width %u for a read of "
                        "table %u's rows of %d", c->ps[p->to].name, r->target, r->dim, t->id,
                        t->dim);
    c->keyed.n = r->n;
    c->keyed.cursor = r->offset > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)r->offset;
    if (n == 0)
        return DT_OK;
    int64_t *keys = malloc(n * sizeof *keys);
    uint32_t *counts = malloc(n * sizeof *counts), *last = malloc(n * sizeof *last);
    size_t nv = n * d * (1 + (size_t)r->slots);
    float *values = malloc(nv * sizeof *values);
    dt_status st = keys && counts && last && values
                       ? DT_OK
                       : dt_error(DT_ERR_NOMEM, "no memory to read %zu keys back", n);
    for (size_t i = 0; i < n && st == DT_OK; i++) {
        keys[i] = dt_psmsg_id(r, i), counts[i] = dt_psmsg_times(r, i);
        last[i] = dt_psmsg_last(r, i);
        if (dt_keymap_shard(keys[i], (int)t->n_shards) != p->shard)
            st = dt_error(DT_ERR_PEER, "%s: key %lld of table %u, which shard %lld does not "
                          "hold", c->ps[p->to].name, (long long)keys[i], t->id,
                          (long long)p->shard);
    }
    if (st == DT_OK) {
        dt_psmsg_values(r, 0, nv, values);
        const float *slots[DT_PSMSG_MAX_SLOTS];
        for (uint32_t k = 0; k < r->slots; k++)
            slots[k] = values + (size_t)(k + 1) * n * d;
        st = dt_keymap_merge_rows(c->keyed.map, c->keyed.table, keys, counts, last,
                                  (int64_t)n, values, r->slots ? slots : NULL, c->keyed.what);
    }
    free(keys), free(counts), free(last), free(values);
    return st;
}

/* Sends what is queued and reads every reply in the order the messages were queued (each ps
 * answers its own in order), handing rows and values to their destinations. */
/* Some of link l's out, as much as its socket takes now. */
static dt_status send_some(ps_link *l)
{
    while (l->sent < l->out.len) {
        ssize_t k = send(l->fd, l->out.data + l->sent, l->out.len - l->sent,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k > 0) {
            l->sent += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return DT_OK;
        if (k < 0 && (errno == EPIPE || errno == ECONNRESET))
            return dt_error(DT_ERR_PEER, "%s closed the connection", l->name);
        return dt_error(DT_ERR_IO, "sending to %s: %s", l->name, strerror(errno));
    }
    return DT_OK;
}

/* Every link's requests sent, the replies that come back meanwhile read ahead: a ps answers its
 * requests one after the other, so a large reply to the first would otherwise fill both
 * sockets' buffers while the client still sends the second, each waiting on the other. */
static dt_status send_draining(dt_ps_client *c, double deadline)
{
    struct pollfd fds[c->n_ps > 0 ? c->n_ps : 1];
    int who[c->n_ps > 0 ? c->n_ps : 1];
    /* Most rounds fit in the sockets' buffers: sent at once, with no poll. */
    for (int k = 0; k < c->n_ps; k++) {
        dt_status st = send_some(&c->ps[k]);
        if (st)
            return st;
    }
    for (;;) {
        int n = 0;
        for (int k = 0; k < c->n_ps; k++)
            if (c->ps[k].sent < c->ps[k].out.len) {
                fds[n] = (struct pollfd){.fd = c->ps[k].fd, .events = POLLOUT | POLLIN};
                who[n++] = k;
            }
        if (n == 0)
            return DT_OK;
        double left = deadline - dt_clock_now();
        if (left <= 0)
            return dt_error(DT_ERR_TIMEOUT, "sending to %s: no progress before the deadline",
                            c->ps[who[0]].name);
        int ready = poll(fds, (nfds_t)n, (int)(left * 1000.0) + 1);
        if (ready < 0 && errno != EINTR)
            return dt_error(DT_ERR_IO, "poll: %s", strerror(errno));
        for (int i = 0; i < n && ready > 0; i++) {
            ps_link *l = &c->ps[who[i]];
            dt_status st = DT_OK;
            if (fds[i].revents & POLLIN)
                st = dt_psconn_read_ahead(l->fd, &l->ahead, l->name);
            if (st == DT_OK && (fds[i].revents & (POLLOUT | POLLERR | POLLHUP)))
                st = send_some(l);
            if (st)
                return st;
        }
    }
}

/* What a ps may take over a request that allocates or writes a whole shard (defining a table,
 * saving a checkpoint), whose time grows with the shard: the ps's own bound on a save's write. */
#define SHARD_WORK_TIMEOUT 3660.0

static dt_status run_round_within(dt_ps_client *c, double timeout)
{
    static const dt_psmsg_type want[] = {DT_PSMSG_ACK, DT_PSMSG_ROWS, DT_PSMSG_DENSE,
                                         DT_PSMSG_PONG, DT_PSMSG_KEYED, DT_PSMSG_STEPS};
    double deadline = dt_clock_now() + timeout;
    dt_status st = c->broken ? dt_error(DT_ERR_PEER, "the links to the ps tasks are broken: "
                                        "connect again first")
                             : DT_OK;
    if (st == DT_OK) {
        for (int k = 0; k < c->n_ps; k++)
            c->ps[k].sent = 0, c->bytes_sent += c->ps[k].out.len;
        st = send_draining(c, deadline);
        c->broken = st != DT_OK;
    }
    /* A refusal (an ERROR reply) is kept, and the other replies are still read, so that every
     * link stays in step for the next round; anything else leaves the links broken. */
    dt_status refused = DT_OK;
    char why[DT_PSMSG_MAX_TEXT + DT_HOST_CAP + 64];
    for (size_t m = 0; m < c->n_due && st == DT_OK; m++) {
        const pending *p = &c->due[m];
        ps_link *l = &c->ps[p->to];
        dt_psmsg r;
        if ((st = dt_psconn_recv_ahead(l->fd, &l->ahead, &l->session, l->name, deadline, &l->in,
                                       &r))) {
            c->broken = true;
            break;
        }
        c->bytes_received += l->in.len + DT_FRAME_TAG_BYTES;
        /* Each ps answers its requests in order: a reply to another request means the link is
         * out of step (or someone answers for the ps), and nothing in it may be taken. */
        if (r.request_id != p->request) {
            st = dt_error(DT_ERR_PEER, "%s: a reply to request %llu where %llu's was due",
                          l->name, (unsigned long long)r.request_id,
                          (unsigned long long)p->request);
            c->broken = true;
            break;
        }
        if (r.type == DT_PSMSG_ERROR) {
            if (refused == DT_OK) {
                refused = dt_psmsg_status(&r);
                snprintf(why, sizeof why, "%s: %.*s", l->name, (int)r.text_len, r.text);
            }
            continue;
        }
        if (r.type != want[p->kind])
            st = dt_error(DT_ERR_PEER, "%s: a %s reply where %s was due", l->name,
                          dt_psmsg_type_name(r.type), dt_psmsg_type_name(want[p->kind]));
        else if (p->kind == REPLY_ROWS)
            st = take_rows(c, p, &r);
        else if (p->kind == REPLY_DENSE)
            st = take_dense(c, p, &r);
        else if (p->kind == REPLY_KEYED)
            st = take_keyed(c, p, &r);
        else if (p->kind == REPLY_STEPS)
            c->steps = (dt_ps_steps){.total = r.clock, .ready = r.done != 0,
                                     .active = (int)r.rows};
        c->broken = st != DT_OK;
    }
    for (int k = 0; k < c->n_ps; k++)
        c->ps[k].out.len = 0;
    c->n_due = 0;
    if (st == DT_OK && refused)
        st = dt_error(refused, "%s", why);
    return st;
}

static dt_status run_round(dt_ps_client *c) { return run_round_within(c, c->request_timeout); }

/* Groups ids by the shard that holds each (a counting sort, stable, so ids that ascend ascend
 * within each shard too). */
static dt_status plan_counted(table_info *t, const int64_t *ids, const uint32_t *times, size_t n)
{
    if (n > t->cap || !t->ids) {
        size_t cap = n > 1 ? n : 1;
        free(t->ids), free(t->places), free(t->shard_of), free(t->times);
        t->ids = malloc(cap * sizeof *t->ids);
        t->places = malloc(cap * sizeof *t->places);
        t->shard_of = malloc(cap * sizeof *t->shard_of);
        t->times = malloc(cap * sizeof *t->times);
        t->cap = t->ids && t->places && t->shard_of && t->times ? cap : 0;
        if (!t->cap)
            return dt_error(DT_ERR_NOMEM, "no memory for a ps request of %zu ids", n);
    }
    size_t *count = t->count, *fill = t->fill;
    memset(count, 0, ((size_t)t->n_shards + 1) * sizeof *count);
    for (size_t i = 0; i < n; i++) {
        int64_t shard, row;
        bool keyed = t->strategy == DT_PARTITION_HASH;
        if (ids[i] < 0 || (!keyed && ids[i] >= t->rows))
            return dt_error(DT_ERR_INVALID, "ps: table %u: id %lld outside its %lld rows", t->id,
                            (long long)ids[i], (long long)t->rows);
        dt_partition_locate(t->strategy, t->rows, t->n_shards, ids[i], &shard, &row);
        t->shard_of[i] = shard;
        count[shard + 1]++;
    }
    for (int64_t s = 0; s < t->n_shards; s++)
        count[s + 1] += count[s];
    memcpy(fill, count, (size_t)t->n_shards * sizeof *fill);
    for (size_t i = 0; i < n; i++) {
        size_t at = fill[t->shard_of[i]]++;
        t->ids[at] = ids[i], t->places[at] = i;
        if (times)
            t->times[at] = times[i];
    }
    return DT_OK;
}

static dt_status plan(table_info *t, const int64_t *ids, size_t n)
{
    return plan_counted(t, ids, NULL, n);
}

/* One message like m per shard of table ti with ids, for the shard's table and with its ids;
 * rows (grouped by shard, dim floats an id) go with them unless NULL. */
static dt_status queue_rows(dt_ps_client *c, int ti, dt_psmsg m, reply_kind reply,
                            const float *rows)
{
    table_info *t = &c->tables[ti];
    dt_status st = DT_OK;
    for (int64_t s = 0; s < t->n_shards && st == DT_OK; s++) {
        size_t lo = t->count[s], n = t->count[s + 1] - lo;
        if (n == 0)
            continue;
        m.table = wire_table(t->id, s), m.n = (uint32_t)n;
        if (m.type == DT_PSMSG_PULL_KEYS)
            m.times_host = t->times + lo;
        st = queue(c, (pending){ps_of_shard(c, s), reply, ti, s, 0, 0}, &m, t->ids + lo,
                   rows ? rows + lo * (size_t)t->dim : NULL);
    }
    return st;
}

/* One PULL_ROWS per shard with ids (a training pull of a dynamic table: PULL_KEYS at step
 * `step`, with each key's sightings); rows go to t's destination. */
static dt_status queue_pull(dt_ps_client *c, int ti, int64_t step)
{
    dt_psmsg m = {.type = step > 0 ? DT_PSMSG_PULL_KEYS : DT_PSMSG_PULL_ROWS, .step = step};
    return queue_rows(c, ti, m, REPLY_ROWS, NULL);
}

/* One PUSH_ROWS per shard with ids, their rows taken from rows (by place). */
static dt_status queue_push(dt_ps_client *c, int ti, const float *rows, int64_t step,
                            float lr_scale)
{
    table_info *t = &c->tables[ti];
    size_t dim = (size_t)t->dim, total = t->count[t->n_shards];
    /* With one shard the places are in order: the rows go out as they are. */
    const float *grouped = rows;
    if (t->n_shards > 1) {
        if (total * dim > c->grouped_cap) {
            float *g = realloc(c->grouped, total * dim * sizeof *g);
            if (!g)
                return dt_error(DT_ERR_NOMEM, "no memory for a push of %zu rows", total);
            c->grouped = g, c->grouped_cap = total * dim;
        }
        for (size_t i = 0; i < total; i++)
            memcpy(c->grouped + i * dim, rows + t->places[i] * dim, dim * sizeof *rows);
        grouped = c->grouped;
    }
    dt_psmsg m = {.type = DT_PSMSG_PUSH_ROWS, .dim = (uint32_t)dim, .step = step,
                  .lr_scale = lr_scale};
    return queue_rows(c, ti, m, REPLY_ACK, grouped);
}

/* One PULL_DENSE (values NULL) or PUSH_DENSE per dense variable. */
static dt_status queue_dense(dt_ps_client *c, const float *grads, int64_t step, float lr_scale)
{
    dt_status st = DT_OK;
    for (int i = 0; i < c->n_vars && st == DT_OK; i++) {
        dt_psmsg m = {.type = grads ? DT_PSMSG_PUSH_DENSE : DT_PSMSG_PULL_DENSE,
                      .table = (uint32_t)i, .offset = c->var_offset[i],
                      .count = c->var_count[i], .step = step, .lr_scale = lr_scale};
        st = queue(c, (pending){c->var_to[i], grads ? REPLY_ACK : REPLY_DENSE, 0, 0, i, 0}, &m,
                   NULL, grads ? grads + c->var_offset[i] : NULL);
    }
    return st;
}

/* ---- Tables ---- */

dt_status dt_ps_client_define(dt_ps_client *c, uint32_t id, const char *name, int64_t rows,
                              int dim, int64_t n_shards, dt_partition_strategy strategy,
                              const dt_rowopt_config *opt, float init_stddev, uint64_t seed)
{
    return dt_ps_client_define_ex(c, id, name, rows, dim, n_shards, strategy, opt, init_stddev,
                                  seed, NULL);
}

dt_status dt_ps_client_define_ex(dt_ps_client *c, uint32_t id, const char *name, int64_t rows,
                                 int dim, int64_t n_shards, dt_partition_strategy strategy,
                                 const dt_rowopt_config *opt, float init_stddev, uint64_t seed,
                                 const dt_keymap_policy *policy)
{
    if ((strategy == DT_PARTITION_HASH) != (policy != NULL))
        return dt_error(DT_ERR_INVALID, "ps: table %s: a dynamic table takes the hash placement "
                        "and a policy, a fixed one neither", name);
    /* Defined again (a ps started again): the ps tasks that hold it already take it as a
     * no-op, one that lost it starts it afresh. */
    int known = find(c, id);
    dt_status st = known >= 0 && (c->tables[known].rows != rows || c->tables[known].dim != dim ||
                                  c->tables[known].n_shards != n_shards ||
                                  c->tables[known].strategy != strategy)
                       ? dt_error(DT_ERR_INVALID, "ps: table %u defined again with another shape",
                                  id)
                   : known >= 0 ? DT_OK
                                : dt_ps_client_use_table(c, id, rows, dim, n_shards, strategy);
    for (int64_t s = 0; s < n_shards && st == DT_OK; s++) {
        dt_psmsg m;
        dt_ps_table_msg(wire_table(id, s), name, rows, dim, n_shards, s, strategy, opt,
                        init_stddev, seed, &m);
        if (policy)
            m.policy = *policy;
        st = queue(c, (pending){ps_of_shard(c, s), REPLY_ACK, 0, 0, 0, 0}, &m, NULL, NULL);
    }
    return st ? st : run_round_within(c, SHARD_WORK_TIMEOUT);
}

dt_status dt_ps_client_use_table(dt_ps_client *c, uint32_t id, int64_t rows, int dim,
                                 int64_t n_shards, dt_partition_strategy strategy)
{
    if (c->n_tables == MAX_TABLES || find(c, id) >= 0 || id >= 65536 || n_shards > 65536 ||
        n_shards < 1 || n_shards > rows || dim < 1)
        return dt_error(DT_ERR_INVALID, "ps: table %u: given twice, more than %d tables, or an "
                        "id, width or shard count out of range", id, MAX_TABLES);
    table_info *t = &c->tables[c->n_tables];
    *t = (table_info){.id = id, .rows = rows, .n_shards = n_shards, .dim = dim,
                      .strategy = strategy};
    t->count = calloc((size_t)n_shards + 1, sizeof *t->count);
    t->fill = calloc((size_t)n_shards + 1, sizeof *t->fill);
    if (!t->count || !t->fill) {
        free(t->count), free(t->fill);
        return dt_error(DT_ERR_NOMEM, "no memory for %lld shards", (long long)n_shards);
    }
    c->n_tables++;
    return DT_OK;
}

static dt_status table_of(const dt_ps_client *c, uint32_t id, size_t n, int *ti)
{
    if ((*ti = find(c, id)) < 0)
        return dt_error(DT_ERR_INVALID, "ps: no table %u defined", id);
    if (n > DT_PSMSG_MAX_ROWS)
        return dt_error(DT_ERR_INVALID, "ps: %zu ids in one request (at most %u)", n,
                        DT_PSMSG_MAX_ROWS);
    return DT_OK;
}

dt_status dt_ps_client_pull(dt_ps_client *c, uint32_t id, const int64_t *ids, size_t n,
                            float *rows)
{
    int ti;
    dt_status st = table_of(c, id, n, &ti);
    if (st == DT_OK && (st = plan(&c->tables[ti], ids, n)) == DT_OK) {
        c->tables[ti].dest_rows = rows;
        st = queue_pull(c, ti, 0);
    }
    return st ? (run_round(c), st) : run_round(c);
}

dt_status dt_ps_client_push(dt_ps_client *c, uint32_t id, const int64_t *ids, size_t n,
                            const float *rows, int64_t step, float lr_scale)
{
    int ti;
    dt_status st = table_of(c, id, n, &ti);
    if (st == DT_OK && (st = plan(&c->tables[ti], ids, n)) == DT_OK)
        st = queue_push(c, ti, rows, step, lr_scale);
    return st ? (run_round(c), st) : run_round(c);
}

dt_status dt_ps_client_pull_step(dt_ps_client *c, const int64_t *ids, size_t n,
                                 float *const *rows, float *dense)
{
    const int64_t *each_ids[DT_PS_MAX_TABLES];
    size_t each_n[DT_PS_MAX_TABLES];
    for (int ti = 0; ti < c->n_tables; ti++)
        each_ids[ti] = ids, each_n[ti] = n;
    return dt_ps_client_pull_tables(c, each_ids, each_n, rows, dense);
}

dt_status dt_ps_client_pull_keys_step(dt_ps_client *c, const int64_t *ids,
                                      const uint32_t *times, size_t n, int64_t step,
                                      float *const *rows, float *dense)
{
    const int64_t *each_ids[DT_PS_MAX_TABLES];
    const uint32_t *each_times[DT_PS_MAX_TABLES];
    size_t each_n[DT_PS_MAX_TABLES];
    for (int ti = 0; ti < c->n_tables; ti++)
        each_ids[ti] = ids, each_times[ti] = times, each_n[ti] = n;
    return dt_ps_client_pull_tables_step(c, each_ids, each_times, each_n, step, rows, dense);
}

dt_status dt_ps_client_pull_tables(dt_ps_client *c, const int64_t *const *ids, const size_t *n,
                                   float *const *rows, float *dense)
{
    return dt_ps_client_pull_tables_step(c, ids, NULL, n, 0, rows, dense);
}

dt_status dt_ps_client_pull_tables_step(dt_ps_client *c, const int64_t *const *ids,
                                        const uint32_t *const *times, const size_t *n,
                                        int64_t step, float *const *rows, float *dense)
{
    dt_status st = DT_OK;
    for (int ti = 0; ti < c->n_tables && st == DT_OK; ti++) {
        table_info *t = &c->tables[ti];
        if (!rows[ti])
            continue;
        bool keyed = t->strategy == DT_PARTITION_HASH && times;
        if ((st = plan_counted(t, ids[ti], keyed ? times[ti] : NULL, n[ti])))
            break;
        t->dest_rows = rows[ti];
        st = queue_pull(c, ti, keyed ? (step > 0 ? step : 1) : 0);
    }
    if (st == DT_OK && dense) {
        c->dense_dest = dense;
        st = queue_dense(c, NULL, 0, 0.0f);
    }
    return st ? (run_round(c), st) : run_round(c);
}

dt_status dt_ps_client_push_step(dt_ps_client *c, const dt_sparse_rows *const *grads,
                                 const float *dense, int64_t step, float table_scale)
{
    dt_status st = DT_OK;
    for (int ti = 0; ti < c->n_tables && st == DT_OK; ti++) {
        const dt_sparse_rows *g = grads[ti];
        if (!g || g->n == 0)
            continue;
        if ((st = plan(&c->tables[ti], g->ids, g->n)))
            break;
        st = queue_push(c, ti, g->rows, step, table_scale);
    }
    if (st == DT_OK && dense)
        st = queue_dense(c, dense, step, 1.0f);
    return st ? (run_round(c), st) : run_round(c);
}

/* ---- Restoring a checkpoint ---- */

/* An ASSIGN's rows with their slots: at most 64 MiB, far below a message's limit however wide
 * a row and however many slots it has. */
#define ASSIGN_CHUNK_BYTES ((size_t)64 << 20)

dt_status dt_ps_client_assign_table(dt_ps_client *c, uint32_t id, const dt_table *t)
{
    int ti = find(c, id);
    if (ti < 0)
        return dt_error(DT_ERR_INVALID, "ps: no table %u defined", id);
    const table_info *info = &c->tables[ti];
    if (info->rows != t->rows || info->dim != t->dim || t->n_slots > (int)DT_PSMSG_MAX_SLOTS)
        return dt_error(DT_ERR_INVALID, "ps: table %u is %lld x %d, not %lld x %d", id,
                        (long long)info->rows, info->dim, (long long)t->rows, t->dim);
    size_t dim = (size_t)t->dim, per = (size_t)(1 + t->n_slots);
    size_t row_bytes = dim * per * sizeof(float);
    int64_t chunk = row_bytes < ASSIGN_CHUNK_BYTES ? (int64_t)(ASSIGN_CHUNK_BYTES / row_bytes) : 1;
    float *buf = malloc((size_t)chunk * row_bytes);
    if (!buf)
        return dt_error(DT_ERR_NOMEM, "no memory to restore table %u", id);
    dt_status st = DT_OK;
    for (int64_t s = 0; s < info->n_shards && st == DT_OK; s++) {
        int64_t rows = dt_partition_shard_rows(info->strategy, info->rows, info->n_shards, s);
        int64_t first = s, hi, stride = info->n_shards;
        if (info->strategy == DT_PARTITION_DIV)
            dt_partition_range(info->rows, info->n_shards, s, &first, &hi), stride = 1;
        for (int64_t lo = 0; lo < rows && st == DT_OK; lo += chunk) {
            size_t n = (size_t)(rows - lo < chunk ? rows - lo : chunk);
            /* The shard's local rows lo .. lo + n in its own order: values, then each slot. */
            for (size_t i = 0; i < n; i++) {
                size_t g = (size_t)(first + (lo + (int64_t)i) * stride);
                memcpy(buf + i * dim, t->data + g * dim, dim * sizeof *buf);
                for (int k = 0; k < t->n_slots; k++)
                    memcpy(buf + ((size_t)(k + 1) * n + i) * dim, t->slots[k] + g * dim,
                           dim * sizeof *buf);
            }
            dt_psmsg m = {.type = DT_PSMSG_ASSIGN, .target = 0, .table = wire_table(id, s),
                          .offset = (uint64_t)lo * dim, .count = n * dim,
                          .slots = (uint32_t)t->n_slots};
            st = queue(c, (pending){ps_of_shard(c, s), REPLY_ACK, 0, 0, 0, 0}, &m, NULL, buf);
            st = st ? (run_round(c), st) : run_round(c);
        }
    }
    free(buf);
    return st;
}

dt_status dt_ps_client_assign_dense(dt_ps_client *c, const dt_arena *params, const dt_optim *o)
{
    if (o->n_slots > (int)DT_PSMSG_MAX_SLOTS)
        return dt_error(DT_ERR_INVALID, "ps: %d optimizer slots", o->n_slots);
    size_t stride = o->n_slots ? o->state.n_elems / (size_t)o->n_slots : 0, most = 0;
    for (int i = 0; i < c->n_vars; i++)
        most = c->var_count[i] > most ? c->var_count[i] : most;
    float *buf = malloc((most * (size_t)(1 + o->n_slots) + 1) * sizeof *buf);
    if (!buf)
        return dt_error(DT_ERR_NOMEM, "no memory to restore the dense variables");
    dt_status st = DT_OK;
    for (int i = 0; i < c->n_vars && st == DT_OK; i++) {
        size_t off = c->var_offset[i], n = c->var_count[i];
        memcpy(buf, params->data + off, n * sizeof *buf);
        for (int k = 0; k < o->n_slots; k++)
            memcpy(buf + (size_t)(k + 1) * n, o->state.data + (size_t)k * stride + off,
                   n * sizeof *buf);
        dt_psmsg m = {.type = DT_PSMSG_ASSIGN, .target = 1, .table = (uint32_t)i, .offset = off,
                      .count = n, .slots = (uint32_t)o->n_slots};
        /* Each in a round of its own: queue copies the values, buf is refilled. */
        st = queue(c, (pending){c->var_to[i], REPLY_ACK, 0, 0, i, 0}, &m, NULL, buf);
        st = st ? (run_round(c), st) : run_round(c);
    }
    free(buf);
    return st;
}

/* One round of the same message to every ps task, each answering with `kind` within timeout. */
static dt_status to_every_ps(dt_ps_client *c, const dt_psmsg *m, reply_kind kind,
                             double timeout)
{
    for (int k = 0; k < c->n_ps; k++) {
        dt_psmsg mk = *m;
        dt_status st = queue(c, (pending){k, kind, 0, 0, 0, 0}, &mk, NULL, NULL);
        if (st)
            return run_round(c), st;
    }
    return run_round_within(c, timeout);
}

dt_status dt_ps_client_save(dt_ps_client *c, int64_t step, const char *dir)
{
    dt_psmsg m = {.type = DT_PSMSG_SAVE, .step = step, .n_shards = c->n_ps, .text = dir,
                  .text_len = (uint32_t)strlen(dir)};
    return to_every_ps(c, &m, REPLY_ACK, SHARD_WORK_TIMEOUT);
}

dt_status dt_ps_client_ping(dt_ps_client *c)
{
    dt_psmsg m = {.type = DT_PSMSG_PING};
    return to_every_ps(c, &m, REPLY_PONG, c->request_timeout);
}

static dt_status step_request(dt_ps_client *c, uint32_t kind, uint32_t n, int64_t floor,
                              dt_ps_steps *out)
{
    dt_psmsg m = {.type = DT_PSMSG_STEP, .target = kind, .n = n, .step = floor};
    dt_status st = queue(c, (pending){0, REPLY_STEPS, 0, 0, 0, 0}, &m, NULL, NULL);
    if (st)
        return run_round(c), st;
    if ((st = run_round(c)) == DT_OK)
        *out = c->steps;
    return st;
}

dt_status dt_ps_client_take_steps(dt_ps_client *c, uint32_t n, dt_ps_steps *out)
{
    return step_request(c, DT_PSMSG_STEP_TAKE, n, 0, out);
}

dt_status dt_ps_client_ready(dt_ps_client *c, int64_t floor, dt_ps_steps *out)
{
    return step_request(c, DT_PSMSG_STEP_READY, 0, floor, out);
}

dt_status dt_ps_client_leave(dt_ps_client *c, dt_ps_steps *out)
{
    return step_request(c, DT_PSMSG_STEP_LEAVE, 0, 0, out);
}

dt_status dt_ps_client_return_steps(dt_ps_client *c, uint32_t n, dt_ps_steps *out)
{
    return step_request(c, DT_PSMSG_STEP_RETURN, n, 0, out);
}

dt_status dt_ps_client_stop(dt_ps_client *c)
{
    dt_psmsg m = {.type = DT_PSMSG_STOP};
    return to_every_ps(c, &m, REPLY_ACK, c->request_timeout);
}

/* ---- Dense variables ---- */

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
        dt_ps_var_msg((uint32_t)i, c->var_offset[i], c->var_count[i], params->n_elems, opt,
                      &m);
        st = queue(c, (pending){c->var_to[i], REPLY_ACK, 0, 0, i, 0}, &m, NULL,
                   params->data + c->var_offset[i]);
    }
    return st ? (run_round(c), st) : run_round(c);
}

dt_status dt_ps_client_pull_dense(dt_ps_client *c, float *params)
{
    c->dense_dest = params;
    dt_status st = queue_dense(c, NULL, 0, 0.0f);
    return st ? (run_round(c), st) : run_round(c);
}

dt_status dt_ps_client_push_dense(dt_ps_client *c, const float *grads, int64_t step,
                                  float lr_scale)
{
    dt_status st = queue_dense(c, grads, step, lr_scale);
    return st ? (run_round(c), st) : run_round(c);
}

void dt_ps_client_traffic(const dt_ps_client *c, uint64_t *sent, uint64_t *received)
{
    *sent = c->bytes_sent, *received = c->bytes_received;
}

/* ---- Dynamic tables: restored into the ps tasks, read back from them ---- */

/* Keys sent at a time while restoring. */
#define KEYED_CHUNK 4096

/* Entries [lo, hi) of keys whose shard is s, packed into ok/oc/ol and (rows given) their rows
 * then each slot's, k x dim each. Returns k. */
static size_t pack_shard(int64_t s, int64_t n_shards, size_t lo, size_t hi, const int64_t *keys,
                         const uint32_t *counts, const uint32_t *last, int dim,
                         const float *rows, const float *const *slots, int n_slots,
                         int64_t *ok, uint32_t *oc, uint32_t *ol, float *values)
{
    size_t k = 0, d = (size_t)dim;
    for (size_t j = lo; j < hi; j++)
        if (dt_keymap_shard(keys[j], (int)n_shards) == s)
            ok[k] = keys[j], oc[k] = counts[j], ol[k] = last[j], k++;
    for (size_t j = lo, i = 0; rows && j < hi; j++) {
        if (dt_keymap_shard(keys[j], (int)n_shards) != s)
            continue;
        memcpy(values + i * d, rows + j * d, d * sizeof(float));
        for (int q = 0; q < n_slots; q++)
            memcpy(values + ((size_t)(q + 1) * k + i) * d, slots[q] + j * d, d * sizeof(float));
        i++;
    }
    return k;
}

dt_status dt_ps_client_assign_keyed(dt_ps_client *c, uint32_t id, const int64_t *keys,
                                    const uint32_t *counts, const uint32_t *last, int64_t n,
                                    int dim, const float *rows, const float *const *slots,
                                    int n_slots)
{
    int ti = find(c, id);
    if (ti < 0 || c->tables[ti].strategy != DT_PARTITION_HASH)
        return dt_error(DT_ERR_INVALID, "ps: no dynamic table %u defined", id);
    const table_info *info = &c->tables[ti];
    if (rows && (info->dim != dim || n_slots > (int)DT_PSMSG_MAX_SLOTS))
        return dt_error(DT_ERR_INVALID, "ps: table %u has rows of %d, not %d with %d slots", id,
                        info->dim, dim, n_slots);
    size_t cap = KEYED_CHUNK, d = rows ? (size_t)dim : 0;
    int64_t *ok = malloc(cap * sizeof *ok);
    uint32_t *oc = malloc(cap * sizeof *oc), *ol = malloc(cap * sizeof *ol);
    float *values = malloc((cap * d * (1 + (size_t)n_slots) + 1) * sizeof *values);
    dt_status st = ok && oc && ol && values
                       ? DT_OK
                       : dt_error(DT_ERR_NOMEM, "no memory to restore table %u", id);
    for (size_t lo = 0; lo < (size_t)n && st == DT_OK; lo += cap) {
        size_t hi = (size_t)n - lo < cap ? (size_t)n : lo + cap;
        for (int64_t s = 0; s < info->n_shards && st == DT_OK; s++) {
            size_t k = pack_shard(s, info->n_shards, lo, hi, keys, counts, last, dim, rows,
                                  slots, n_slots, ok, oc, ol, values);
            if (k == 0)
                continue;
            dt_psmsg m = {.type = DT_PSMSG_KEYED, .table = wire_table(id, s), .n = (uint32_t)k,
                          .target = rows ? DT_PSMSG_KEYED_ROWS : DT_PSMSG_KEYED_COUNTING,
                          .dim = (uint32_t)d, .slots = rows ? (uint32_t)n_slots : 0,
                          .times_host = oc, .last_host = ol};
            st = queue(c, (pending){ps_of_shard(c, s), REPLY_ACK, 0, 0, 0, 0}, &m, ok, values);
        }
        st = st ? (run_round(c), st) : run_round(c);
    }
    free(ok), free(oc), free(ol), free(values);
    return st;
}

dt_status dt_ps_client_assign_bloom(dt_ps_client *c, uint32_t id, const uint8_t *bytes,
                                    size_t n_bytes)
{
    int ti = find(c, id);
    if (ti < 0 || c->tables[ti].strategy != DT_PARTITION_HASH)
        return dt_error(DT_ERR_INVALID, "ps: no dynamic table %u defined", id);
    const size_t chunk = (size_t)1 << 23;
    dt_status st = DT_OK;
    for (size_t at = 0; at < n_bytes && st == DT_OK; at += chunk) {
        size_t n = n_bytes - at < chunk ? n_bytes - at : chunk;
        for (int64_t s = 0; s < c->tables[ti].n_shards && st == DT_OK; s++) {
            dt_psmsg m = {.type = DT_PSMSG_KEYED, .table = wire_table(id, s),
                          .target = DT_PSMSG_KEYED_BLOOM, .n = (uint32_t)n, .offset = at,
                          .text = (const char *)(bytes + at)};
            st = queue(c, (pending){ps_of_shard(c, s), REPLY_ACK, 0, 0, 0, 0}, &m, NULL, NULL);
        }
        st = st ? (run_round(c), st) : run_round(c);
    }
    return st;
}

dt_status dt_ps_client_assign_keyed_end(dt_ps_client *c, uint32_t id, int64_t step)
{
    int ti = find(c, id);
    if (ti < 0 || c->tables[ti].strategy != DT_PARTITION_HASH)
        return dt_error(DT_ERR_INVALID, "ps: no dynamic table %u defined", id);
    dt_status st = DT_OK;
    for (int64_t s = 0; s < c->tables[ti].n_shards && st == DT_OK; s++) {
        dt_psmsg m = {.type = DT_PSMSG_KEYED, .table = wire_table(id, s),
                      .target = DT_PSMSG_KEYED_ROWS, .offset = (uint64_t)(step > 0 ? step : 0)};
        st = queue(c, (pending){ps_of_shard(c, s), REPLY_ACK, 0, 0, 0, 0}, &m, NULL, NULL);
    }
    return st ? (run_round(c), st) : run_round(c);
}

/* A map's live rows of table t (gathered a chunk at a time), its counted keys and its filter. */
dt_status dt_ps_client_assign_keys(dt_ps_client *c, uint32_t id, const dt_keymap *km,
                                   const dt_table *t, int64_t step)
{
    size_t n = KEYED_CHUNK, d = (size_t)t->dim;
    int64_t *rows = malloc(n * sizeof *rows), *keys = malloc(n * sizeof *keys);
    uint32_t *counts = malloc(n * sizeof *counts), *last = malloc(n * sizeof *last);
    float *values = malloc(n * d * (1 + (size_t)t->n_slots) * sizeof *values);
    dt_status st = rows && keys && counts && last && values
                       ? DT_OK
                       : dt_error(DT_ERR_NOMEM, "no memory to restore table %s", t->name);
    const float *slots[DT_TABLE_MAX_SLOTS];
    for (int q = 0; q < t->n_slots; q++)
        slots[q] = values + (size_t)(q + 1) * n * d;
    int64_t cursor = 0;
    size_t got;
    while (st == DT_OK && (got = dt_keymap_next_live(km, &cursor, n, rows, keys, counts, last))) {
        for (size_t j = 0; j < got; j++) {
            memcpy(values + j * d, dt_table_row(t, rows[j]), d * sizeof(float));
            for (int q = 0; q < t->n_slots; q++)
                memcpy((float *)slots[q] + j * d, t->slots[q] + (size_t)rows[j] * d,
                       d * sizeof(float));
        }
        st = dt_ps_client_assign_keyed(c, id, keys, counts, last, (int64_t)got, t->dim, values,
                                       slots, t->n_slots);
    }
    cursor = 0;
    while (st == DT_OK && (got = dt_keymap_next_counting(km, &cursor, n, keys, counts, last)))
        st = dt_ps_client_assign_keyed(c, id, keys, counts, last, (int64_t)got, 0, NULL, NULL, 0);
    size_t nb = 0;
    const uint8_t *b = dt_keymap_bloom(km, &nb);
    if (st == DT_OK && b)
        st = dt_ps_client_assign_bloom(c, id, b, nb);
    if (st == DT_OK)
        st = dt_ps_client_assign_keyed_end(c, id, step);
    free(rows), free(keys), free(counts), free(last), free(values);
    return st;
}

dt_status dt_ps_client_read_keys(dt_ps_client *c, uint32_t id, dt_keymap *km, int i,
                                 bool slots, const char *what)
{
    int ti = find(c, id);
    if (ti < 0 || c->tables[ti].strategy != DT_PARTITION_HASH)
        return dt_error(DT_ERR_INVALID, "ps: no dynamic table %u defined", id);
    const table_info *info = &c->tables[ti];
    c->keyed.map = km, c->keyed.table = i, c->keyed.what = what;
    dt_status st = DT_OK;
    for (int64_t s = 0; s < info->n_shards && st == DT_OK; s++) {
        c->keyed.cursor = 0;
        do {
            dt_psmsg m = {.type = DT_PSMSG_READ_KEYS, .table = wire_table(info->id, s),
                          .target = DT_PSMSG_KEYED_ROWS, .n = DT_PSMSG_MAX_ROWS,
                          .slots = slots ? 1 : 0, .offset = (uint64_t)c->keyed.cursor};
            st = queue(c, (pending){ps_of_shard(c, s), REPLY_KEYED, ti, s, 0, 0}, &m, NULL,
                       NULL);
            st = st ? (run_round(c), st) : run_round_within(c, SHARD_WORK_TIMEOUT);
        } while (st == DT_OK && c->keyed.n > 0);
    }
    c->keyed.map = NULL;
    return st;
}
