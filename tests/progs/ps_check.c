/* The chief's side of a ps cluster, for tests/ps.sh: connects to every ps task of TF_CONFIG as
 * chief:0, defines a table split over SHARDS shards, and for STEPS steps pulls the rows of random
 * ids (repeats included) and pushes Adagrad gradients for the unique ones, doing the same to a
 * whole table in this process; every pulled row and, at the end, every row of the table must
 * equal the local one bit for bit. Then it stops the ps tasks (unless --no-stop) and prints
 * "ps_check: ok ...". Exit 0 when all agree, 1 otherwise, with the reason.
 * With --big-round T, T-1 more tables of ROWS x DIM are defined, and every row of every table
 * comes back in one round (every request sent before any reply is read): with 500k rows a ps's
 * first reply is far larger than the sockets' buffers while the later requests are still being
 * sent.
 * With PS_CHECK_VIA=PORT it reaches ps:0 at 127.0.0.1:PORT (someone on the path, such as
 * ps_proxy.py) under the cluster's own identity; a pull or push whose link broke is tried again
 * after connecting again, as a worker does, and "ps_check: connected again after: ..." says why.
 * With --save DIR (repeatable), the ps tasks are asked to save checkpoint STEPS into DIR, and
 * "ps_check: save DIR: ok" or "ps_check: save DIR: refused: WHY" is printed for each.
 * usage: ps_check ROWS DIM SHARDS div|mod STEPS [--no-stop] [--hold SECONDS] [--big-round T]
 *                 [--save DIR]...
 * ps_check --poke worker:N sends worker N's control socket, holding the secret, bytes that are
 * no message and then a request a worker does not take (PULL_ROWS), and prints "ps_check: poke:
 * ERROR: TEXT" when the worker answers the second with an ERROR.
 * ps_check --flood N SECONDS opens N connections to every ps task as worker:0, one after the
 * other, holds them SECONDS, and prints "ps_check: flood: K of N connections answer" (a ping
 * through each, none reconnecting).
 * ps_check --fake-worker worker:N SECONDS takes worker N's place until SECONDS after the first
 * RUN (or 120 s): it answers every request with bytes that are no message first, then PING with
 * PONG and STOP with ACK (and ends), and never a RUN; it prints "ps_check: fake worker: K
 * requests". */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/net/transport.h"
#include "../../src/ps/client.h"
#include "../../src/ps/zlink.h"
#include "../../src/core/clock.h"
#include "../../src/core/crc32c.h"
#include "dtrain/ps.h"
#include "dtrain/rng.h"
#include "dtrain/table.h"

static int fail(const char *what)
{
    fprintf(stderr, "ps_check: %s: %s\n", what, dt_last_error());
    return 1;
}

/* A pull or push that failed because a link broke: connected again, to be tried again (at most
 * 3 times), as a worker does after a lost connection. */
static bool again(dt_ps_client *c, int *tries)
{
    if (!dt_ps_client_broken(c) || ++*tries > 3)
        return false;
    fprintf(stderr, "ps_check: connected again after: %s\n", dt_last_error());
    return dt_ps_client_reconnect(c, 10.0) == DT_OK;
}

static dt_status pull(dt_ps_client *c, const int64_t *ids, size_t n, float *rows)
{
    dt_status st;
    int tries = 0;
    while ((st = dt_ps_client_pull(c, 3, ids, n, rows)) && again(c, &tries)) {
    }
    return st;
}

static dt_status push(dt_ps_client *c, const int64_t *ids, size_t n, const float *rows,
                      int64_t step)
{
    dt_status st;
    int tries = 0;
    while ((st = dt_ps_client_push(c, 3, ids, n, rows, step, 1.0f)) && again(c, &tries)) {
    }
    return st;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Tables 4.. (n - 1 of them) defined beside table 3 (ref's), then every row of all n in one
 * round; each must equal its local twin. */
static bool every_table_in_one_round(dt_ps_client *c, const dt_table *ref, int n, int64_t rows,
                                     int dim, int64_t shards, dt_partition_strategy strategy,
                                     const dt_rowopt_config *opt)
{
    int64_t *all = malloc((size_t)rows * sizeof *all);
    const int64_t *ids[DT_PS_MAX_TABLES];
    size_t counts[DT_PS_MAX_TABLES];
    float *got[DT_PS_MAX_TABLES] = {0};
    dt_table twin;
    bool ok = all && n <= DT_PS_MAX_TABLES && dt_table_create(&twin, "twin", rows, dim) == DT_OK;
    for (int64_t r = 0; ok && r < rows; r++)
        all[r] = r;
    for (int t = 1; ok && t < n; t++)
        ok = dt_ps_client_define(c, (uint32_t)(3 + t), "big", rows, dim, shards, strategy, opt,
                                 0.05f, (uint64_t)(42 + t)) == DT_OK;
    for (int t = 0; ok && t < n; t++) {
        ids[t] = all, counts[t] = (size_t)rows;
        ok = (got[t] = malloc((size_t)rows * (size_t)dim * 4)) != NULL;
    }
    double t0 = dt_clock_now();
    if (ok && dt_ps_client_pull_tables(c, ids, counts, got, NULL) != DT_OK) {
        fail("one round of every table");
        ok = false;
    }
    double secs = dt_clock_now() - t0;
    for (int t = 0; ok && t < n; t++) {
        if (t > 0)
            dt_table_init_normal(&twin, 0.05f, (uint64_t)(42 + t), NULL);
        const float *want = t == 0 ? ref->data : twin.data;
        if (memcmp(got[t], want, (size_t)rows * (size_t)dim * 4) != 0) {
            fprintf(stderr, "ps_check: table %d of the big round differs\n", 3 + t);
            ok = false;
        }
    }
    if (ok)
        printf("ps_check: one round of %d tables of %lld rows x %d: %.2f s\n", n,
               (long long)rows, dim, secs);
    for (int t = 0; t < n; t++)
        free(got[t]);
    dt_table_free(&twin);
    free(all);
    return ok;
}

/* TF_CONFIG's cluster as task (worker:N), the secret, and the task's control endpoint. */
static int task_endpoint(const char *task, dt_cluster *cl, uint8_t **secret, size_t *secret_len,
                         char *endpoint, size_t cap)
{
    if (dt_cluster_from_env(cl) || dt_cluster_set_task(cl, task) ||
        dt_cluster_load_secret(NULL, secret, secret_len))
        return 1;
    const dt_addr *a = dt_cluster_addr(cl, cl->task_type, cl->task_index);
    snprintf(endpoint, cap, "tcp://%s:%u", a->host, a->port);
    return 0;
}

/* --poke worker:N (see the top). */
static int poke(const char *task)
{
    dt_cluster cl = {0};
    uint8_t *secret = NULL;
    size_t secret_len = 0;
    char endpoint[DT_HOST_CAP + 32];
    if (task_endpoint(task, &cl, &secret, &secret_len, endpoint, sizeof endpoint))
        return fail("cluster");
    dt_zlink *z;
    if (dt_zlink_client(endpoint, task, secret, secret_len, 0, &z))
        return fail("poke");
    uint8_t junk[100];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    dt_psbuf garbage = {junk, sizeof junk, sizeof junk}, req = {0}, rep = {0};
    int64_t id = 1;
    dt_psmsg pull = {.type = DT_PSMSG_PULL_ROWS, .request_id = 77, .table = 3, .n = 1}, r;
    if (dt_zlink_send(z, &garbage, 30.0) || dt_psmsg_encode(&pull, &id, NULL, &req) ||
        dt_zlink_request(z, &req, 60.0, &rep) ||
        dt_psmsg_decode(rep.data, rep.len, task, &r))
        return fail("poke");
    if (r.type == DT_PSMSG_ERROR && r.request_id == 77)
        printf("ps_check: poke: ERROR: %.*s\n", (int)r.text_len, r.text);
    else
        printf("ps_check: poke: a %s reply\n", dt_psmsg_type_name(r.type));
    dt_psbuf_free(&req), dt_psbuf_free(&rep);
    dt_zlink_close(z);
    free(secret);
    dt_cluster_free(&cl);
    return 0;
}

/* --flood N SECONDS (see the top). */
static int flood(int n, double seconds)
{
    dt_cluster cl = {0};
    uint8_t *secret = NULL;
    size_t secret_len = 0;
    if (dt_cluster_from_env(&cl) || dt_cluster_set_task(&cl, "worker:0") ||
        dt_cluster_load_secret(NULL, &secret, &secret_len))
        return fail("cluster");
    dt_handshake_id me = {secret, secret_len, cl.id, DT_JOB_WORKER, 0};
    dt_ps_client **c = calloc((size_t)n, sizeof *c);
    int opened = 0, answer = 0;
    for (int i = 0; c && i < n; i++)
        opened += dt_ps_client_open(&me, &cl, 10.0, 10.0, &c[i]) == DT_OK;
    printf("ps_check: flood: %d opened, held %g s\n", opened, seconds);
    fflush(stdout);
    usleep((useconds_t)(seconds * 1e6));
    for (int i = 0; c && i < n; i++)
        answer += c[i] && dt_ps_client_ping(c[i]) == DT_OK;
    printf("ps_check: flood: %d of %d connections answer (%d opened)\n", answer, n, opened);
    for (int i = 0; c && i < n; i++)
        if (c[i])
            dt_ps_client_close(c[i]);
    free(c);
    free(secret);
    dt_cluster_free(&cl);
    return 0;
}

/* --fake-worker worker:N SECONDS (see the top). */
static int fake_worker(const char *task, double seconds)
{
    dt_cluster cl = {0};
    uint8_t *secret = NULL;
    size_t secret_len = 0;
    char endpoint[DT_HOST_CAP + 32];
    if (task_endpoint(task, &cl, &secret, &secret_len, endpoint, sizeof endpoint))
        return fail("cluster");
    dt_zlink *z;
    if (dt_zlink_server(endpoint, secret, secret_len, &z))
        return fail("fake worker");
    uint8_t junk[64];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 53 + 5);
    dt_psbuf garbage = {junk, sizeof junk, sizeof junk}, in = {0}, out = {0};
    int requests = 0;
    /* The coordinator calls the roll while the ps tasks define the tables (however long that
     * takes on this machine): the time counts from the first function it gives. */
    for (double end = dt_clock_now() + 120.0; dt_clock_now() < end;) {
        dt_zpeer from;
        dt_psmsg m;
        if (dt_zlink_receive(z, 0.2, &from, &in) != DT_OK ||
            dt_psmsg_decode(in.data, in.len, "chief", &m) != DT_OK)
            continue;
        requests++;
        dt_zlink_reply(z, &from, &garbage);
        if (m.type == DT_PSMSG_RUN && end > dt_clock_now() + seconds)
            end = dt_clock_now() + seconds;
        if (m.type != DT_PSMSG_PING && m.type != DT_PSMSG_STOP)
            continue;
        dt_psmsg r = {.type = m.type == DT_PSMSG_PING ? DT_PSMSG_PONG : DT_PSMSG_ACK,
                      .request_id = m.request_id};
        out.len = 0;
        if (dt_psmsg_encode(&r, NULL, NULL, &out) == DT_OK)
            dt_zlink_reply(z, &from, &out);
        if (m.type == DT_PSMSG_STOP)
            break;
    }
    printf("ps_check: fake worker: %d requests\n", requests);
    dt_psbuf_free(&in), dt_psbuf_free(&out);
    dt_zlink_close(z);
    free(secret);
    dt_cluster_free(&cl);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--fake-worker") == 0)
        return fake_worker(argv[2], atof(argv[3]));
    if (argc == 4 && strcmp(argv[1], "--flood") == 0)
        return flood(atoi(argv[2]), atof(argv[3]));
    if (argc == 3 && strcmp(argv[1], "--poke") == 0)
        return poke(argv[2]);
    if (argc < 6)
        return fprintf(stderr, "usage: ps_check ROWS DIM SHARDS div|mod STEPS [--no-stop] "
                       "[--hold SECONDS]\n"), 2;
    int64_t rows = atoll(argv[1]), shards = atoll(argv[3]);
    int dim = atoi(argv[2]), steps = atoi(argv[5]), stop = 1;
    double hold = 0;
    int big_round = 0, n_saves = 0;
    const char *saves[8];
    dt_partition_strategy strategy = strcmp(argv[4], "mod") == 0 ? DT_PARTITION_MOD
                                                                : DT_PARTITION_DIV;
    for (int i = 6; i < argc; i++) {
        if (strcmp(argv[i], "--no-stop") == 0)
            stop = 0;
        else if (strcmp(argv[i], "--hold") == 0 && i + 1 < argc)
            hold = atof(argv[++i]);
        else if (strcmp(argv[i], "--big-round") == 0 && i + 1 < argc)
            big_round = atoi(argv[++i]);
        else if (strcmp(argv[i], "--save") == 0 && i + 1 < argc && n_saves < 8)
            saves[n_saves++] = argv[++i];
    }
    dt_cluster cl = {0};
    uint8_t *secret = NULL;
    size_t secret_len = 0;
    if (dt_cluster_from_env(&cl) || dt_cluster_set_task(&cl, "chief:0") ||
        dt_cluster_load_secret(NULL, &secret, &secret_len))
        return fail("cluster");
    dt_handshake_id me = {secret, secret_len, cl.id, DT_JOB_CHIEF, 0};
    const char *via = getenv("PS_CHECK_VIA");
    if (via) /* the id stays the cluster's, computed from TF_CONFIG above */
        cl.tasks[DT_JOB_PS][0].port = (uint16_t)atoi(via);
    dt_ps_client *c;
    /* PS_CHECK_CONNECT_TIMEOUT: a shorter wait for a run meant to be refused (a refusal is
     * tried again until the deadline). */
    const char *wait = getenv("PS_CHECK_CONNECT_TIMEOUT");
    if (dt_ps_client_open(&me, &cl, wait ? atof(wait) : 30.0, 30.0, &c))
        return fail("connect");
    dt_rowopt_config opt;
    dt_rowopt_config_default(&opt, DT_ROWOPT_ADAGRAD);
    opt.lr = 0.1f;
    if (dt_ps_client_define(c, 3, "fm_v", rows, dim, shards, strategy, &opt, 0.05f, 42))
        return fail("define");
    dt_table ref;
    if (dt_table_create(&ref, "fm_v", rows, dim) || dt_rowopt_setup(&opt, &ref))
        return fail("local table");
    dt_table_init_normal(&ref, 0.05f, 42, NULL);
    size_t n = 64;
    int64_t *ids = malloc(n * sizeof *ids), *uniq = malloc(n * sizeof *uniq);
    float *got = malloc(n * (size_t)dim * 4), *g = malloc(n * (size_t)dim * 4);
    dt_sparse_rows grad;
    dt_sparse_rows_init(&grad, dim);
    dt_sparse_rows_reserve(&grad, n);
    dt_rng rng;
    dt_rng_seed(&rng, 9);
    for (int step = 1; step <= steps; step++) {
        for (size_t i = 0; i < n; i++)
            ids[i] = (int64_t)dt_rng_below(&rng, (uint64_t)(rows < 200 ? rows : 200));
        if (pull(c, ids, n, got))
            return fail("pull");
        for (size_t i = 0; i < n; i++)
            if (memcmp(got + i * (size_t)dim, dt_table_row(&ref, ids[i]), (size_t)dim * 4) != 0) {
                fprintf(stderr, "ps_check: step %d: row %lld differs from the local table\n",
                        step, (long long)ids[i]);
                return 1;
            }
        memcpy(uniq, ids, n * sizeof *ids);
        qsort(uniq, n, sizeof *uniq, cmp_i64);
        size_t u = 0;
        for (size_t i = 0; i < n; i++)
            if (u == 0 || uniq[i] != uniq[u - 1])
                uniq[u++] = uniq[i];
        for (size_t i = 0; i < u * (size_t)dim; i++)
            g[i] = dt_rng_uniform(&rng) - 0.5f;
        if (push(c, uniq, u, g, step))
            return fail("push");
        memcpy(grad.ids, uniq, u * sizeof *uniq);
        memcpy(grad.rows, g, u * (size_t)dim * 4);
        grad.n = u;
        dt_rowopt_update(&opt, opt.lr, step, &ref, &grad, NULL);
    }
    /* Every row of the table, in one pull. */
    int64_t *all = malloc((size_t)rows * sizeof *all);
    float *whole = malloc((size_t)rows * (size_t)dim * 4);
    for (int64_t r = 0; r < rows; r++)
        all[r] = r;
    if (pull(c, all, (size_t)rows, whole))
        return fail("final pull");
    if (memcmp(whole, ref.data, (size_t)rows * (size_t)dim * 4) != 0) {
        fprintf(stderr, "ps_check: the table on the ps tasks differs from the local one\n");
        return 1;
    }
    if (big_round > 1 && !every_table_in_one_round(c, &ref, big_round, rows, dim, shards,
                                                   strategy, &opt))
        return 1;
    for (int i = 0; i < n_saves; i++) {
        if (dt_ps_client_save(c, steps, saves[i]) == DT_OK)
            printf("ps_check: save %s: ok\n", saves[i]);
        else
            printf("ps_check: save %s: refused: %s\n", saves[i], dt_last_error());
    }
    if (hold > 0)
        usleep((useconds_t)(hold * 1e6));
    if (stop && dt_ps_client_stop(c))
        return fail("stop");
    printf("ps_check: ok rows=%lld dim=%d shards=%lld steps=%d crc=%08x\n", (long long)rows, dim,
           (long long)shards, steps, dt_crc32c(whole, (size_t)rows * (size_t)dim * 4));
    dt_ps_client_close(c);
    dt_table_free(&ref);
    dt_sparse_rows_free(&grad);
    free(ids), free(uniq), free(got), free(g), free(all), free(whole), free(secret);
    dt_cluster_free(&cl);
    return 0;
}
