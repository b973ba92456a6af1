/* The cluster spec: TF_CONFIG parsed with TensorFlow's semantics (see include/dtrain/cluster.h).
 *
 * This module turns the TF_CONFIG text into a dt_cluster: the addresses of every task of every
 * job, this task's job and index, its training rank, whether it is the chief, and an id that all
 * tasks of one cluster share. It owns the address arrays of the dt_cluster it fills (freed by
 * dt_cluster_free) and nothing else; it never resolves names or opens sockets.
 *
 * TensorFlow accepts much that it later trips over, or raises generic ValueErrors; here every
 * invalid config is one DT_ERR_INVALID whose message starts "TF_CONFIG: " and names the field.
 * Choices beyond what TensorFlow specifies, each made so a launch mistake is caught at start-up
 * instead of two tasks silently believing they are the same one:
 *   - Unknown keys are errors (top level: cluster, task, rpc_layer, environment; task: type,
 *     index), as are keys given twice. rpc_layer and environment must be strings and are ignored.
 *   - "master" is the chief, as TF 1.x's Estimator has it (SageMaker and Kubeflow's TFJob write
 *     it): a job of one task and a task type; a cluster naming both chief and master is an
 *     error.
 *   - task.index is required when there is a cluster (TensorFlow's estimator defaults it to 0,
 *     which makes every task that forgot it worker 0), and must be a JSON integer, not "1".
 *   - An empty cluster ({}) is a single local task, as TensorFlow's empty ClusterSpec is; a
 *     non-empty one needs at least one chief or worker. A cluster without "task" is an error.
 *   - The evaluator may be left out of the cluster; its index is then not checked (TensorFlow
 *     checks it only against a listed job). Its rank is -1 and it is chief of itself.
 *   - Two tasks may not share an address (host compared without case, IPv6 by value).
 *   - A host is a name or IPv4 address of [A-Za-z0-9._-], or an IPv6 address in brackets
 *     (optionally with a %zone); "::1:80" without brackets is rejected as ambiguous. */
#include "dtrain/cluster.h"

#include <arpa/inet.h>
#include <assert.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "wire.h"

#define TFC "TF_CONFIG: "
#define JOB_LIST "chief, worker, ps, evaluator"

static const char *const job_names[DT_JOB_COUNT] = {"chief", "worker", "ps", "evaluator"};

const char *dt_job_name(dt_job job)
{
    return (unsigned)job < DT_JOB_COUNT ? job_names[job] : "unknown";
}

dt_status dt_job_parse(const char *s, dt_job *job)
{
    for (int j = 0; j < DT_JOB_COUNT; j++)
        if (strcmp(s, job_names[j]) == 0) {
            *job = (dt_job)j;
            return DT_OK;
        }
    return dt_error(DT_ERR_INVALID, "unknown job '%s' (jobs are " JOB_LIST ")", s);
}

/* ---- Addresses ---- */

/* ASCII only: isalnum() would follow the locale, and a host must mean the same on every task. */
static bool is_name_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '-' || ch == '_';
}

static bool is_name(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!is_name_char(*s))
            return false;
    return true;
}

/* An IPv6 address, optionally with a "%zone" (link-local addresses need one to be reachable). */
static bool is_ipv6(const char *host)
{
    char addr[DT_HOST_CAP];
    unsigned char bytes[16];
    snprintf(addr, sizeof addr, "%s", host);
    char *zone = strchr(addr, '%');
    if (zone) {
        *zone++ = '\0';
        if (!is_name(zone))
            return false;
    }
    return inet_pton(AF_INET6, addr, bytes) == 1;
}

/* The port after the last colon: digits only (strtol would take "+80", " 80" and "0x50"). */
static const char *parse_port(const char *s, uint16_t *port)
{
    size_t n = strlen(s);
    if (n == 0)
        return "no port after ':'";
    if (n > 5)
        return "the port must be 1..65535";
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return "the port must be a number";
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v < 1 || v > 65535)
        return "the port must be 1..65535";
    *port = (uint16_t)v;
    return NULL;
}

/* Splits s into a->host and a->port; returns why s is not host:port, or NULL. */
static const char *split_addr(const char *s, dt_addr *a)
{
    const char *colon = strrchr(s, ':');
    if (!colon)
        return "no ':port'";
    const char *host = s;
    size_t n = (size_t)(colon - s);
    bool bracketed = s[0] == '[';
    if (bracketed) {
        if (n < 2 || s[n - 1] != ']')
            return "an IPv6 address is written [addr]:port";
        host++;
        n -= 2;
    }
    if (n == 0)
        return "empty host";
    if (n >= DT_HOST_CAP)
        return "the host is too long";
    memcpy(a->host, host, n);
    a->host[n] = '\0';
    if (bracketed && !is_ipv6(a->host))
        return "not an IPv6 address in the brackets";
    if (!bracketed && strchr(a->host, ':'))
        return "a host has no ':'; an IPv6 address is written [addr]:port";
    if (!bracketed && !is_name(a->host))
        return "a host is letters, digits, '.', '-' and '_'";
    return parse_port(colon + 1, &a->port);
}

dt_status dt_addr_parse(const char *s, dt_addr *a)
{
    memset(a, 0, sizeof *a);
    const char *why = split_addr(s, a);
    if (!why)
        return DT_OK;
    memset(a, 0, sizeof *a);
    /* Cut a very long address so the reason still fits in the message. */
    return dt_error(DT_ERR_INVALID, "'%.300s' is not host:port (%s)", s, why);
}

/* "host:port", or "[v6]:port": how users wrote it, for messages. */
static void format_addr(const dt_addr *a, char *buf, size_t cap)
{
    bool v6 = strchr(a->host, ':') != NULL;
    snprintf(buf, cap, "%s%s%s:%u", v6 ? "[" : "", a->host, v6 ? "]" : "", (unsigned)a->port);
}

/* Host names are case-insensitive, and one IPv6 address has many spellings ("::1", "0::1"). */
static bool same_addr(const dt_addr *a, const dt_addr *b)
{
    unsigned char x[16], y[16];
    if (a->port != b->port)
        return false;
    if (strcasecmp(a->host, b->host) == 0)
        return true;
    return inet_pton(AF_INET6, a->host, x) == 1 && inet_pton(AF_INET6, b->host, y) == 1 &&
           memcmp(x, y, sizeof x) == 0;
}

static bool is_loopback(const char *host)
{
    struct in_addr v4;
    struct in6_addr v6;
    if (strcasecmp(host, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, host, &v4) == 1)
        return (ntohl(v4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &v6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
    return false;
}

/* ---- JSON helpers ---- */

/* Finds the members of obj named by keys (found[i] NULL when absent). Unknown keys are errors so
 * that a misspelt one is reported rather than ignored, and so are repeated ones: cJSON keeps both
 * copies where Python's json keeps the last, and silently picking one would hide the mistake.
 * field is the object's path ("" at the top level); what names a key in messages ("key", "job"). */
static dt_status get_members(const cJSON *obj, const char *field, const char *what,
                             const char *const *keys, int n_keys, const char *key_list,
                             const cJSON **found)
{
    const char *sep = field[0] ? ": " : "";
    const char *dot = field[0] ? "." : "";
    for (int k = 0; k < n_keys; k++)
        found[k] = NULL;
    for (const cJSON *m = obj->child; m; m = m->next) {
        int k = 0;
        while (k < n_keys && strcmp(m->string, keys[k]) != 0)
            k++;
        if (k == n_keys)
            return dt_error(DT_ERR_INVALID, TFC "%s%sunknown %s '%s' (%ss are %s)", field, sep,
                            what, m->string, what, key_list);
        if (found[k])
            return dt_error(DT_ERR_INVALID, TFC "%s%s%s: given twice", field, dot, keys[k]);
        found[k] = m;
    }
    return DT_OK;
}

/* A JSON integer in 0..INT_MAX; TensorFlow's int() would also take "1" and 1.9. */
static bool get_index(const cJSON *item, int *out)
{
    if (!cJSON_IsNumber(item))
        return false;
    double v = item->valuedouble;
    if (!(v >= 0 && v <= INT_MAX) || v != floor(v))
        return false;
    *out = (int)v;
    return true;
}

/* ---- The cluster ---- */

static dt_status parse_job(const cJSON *list, dt_job job, dt_cluster *out)
{
    const char *name = job_names[job];
    if (!cJSON_IsArray(list))
        return dt_error(DT_ERR_INVALID, TFC "cluster.%s: not a list of \"host:port\" strings", name);
    int n = cJSON_GetArraySize(list);
    if ((job == DT_JOB_CHIEF || job == DT_JOB_EVALUATOR) && n > 1)
        return dt_error(DT_ERR_INVALID, TFC "cluster.%s: %d tasks, at most one %s", name, n, name);
    if (n == 0)
        return DT_OK;
    out->tasks[job] = calloc((size_t)n, sizeof(dt_addr));
    if (!out->tasks[job])
        return dt_error(DT_ERR_NOMEM, TFC "cluster.%s: no memory for %d addresses", name, n);
    out->n_tasks[job] = n;
    int i = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e))
            return dt_error(DT_ERR_INVALID, TFC "cluster.%s[%d]: not a \"host:port\" string", name, i);
        dt_status st = dt_addr_parse(e->valuestring, &out->tasks[job][i]);
        if (st)
            return dt_error_prefix(st, TFC "cluster.%s[%d]", name, i);
    }
    return DT_OK;
}

/* Two tasks on one address would both bind it, or one would talk to itself thinking it talks to a
 * peer. Names the later task and the earlier one it repeats, jobs in dt_job order. */
static dt_status check_unique_addrs(const dt_cluster *c)
{
    for (int j = 0; j < DT_JOB_COUNT; j++)
        for (int i = 0; i < c->n_tasks[j]; i++)
            for (int pj = 0; pj <= j; pj++)
                for (int pi = 0; pi < (pj == j ? i : c->n_tasks[pj]); pi++) {
                    if (!c->tasks[j][i].host[0]) /* a sparse cluster's unknown task */
                        break;
                    if (!same_addr(&c->tasks[j][i], &c->tasks[pj][pi]))
                        continue;
                    char text[DT_HOST_CAP + 16];
                    format_addr(&c->tasks[j][i], text, sizeof text);
                    return dt_error(DT_ERR_INVALID, TFC "cluster.%s[%d]: '%s' is also cluster.%s[%d]",
                                    job_names[j], i, text, job_names[pj], pi);
                }
    return DT_OK;
}

/* The jobs TF_CONFIG may list: dtrain's, and "master", TF 1.x's name of the chief (SageMaker's
 * and Kubeflow's TFJob write it). */
static const char *const config_jobs[DT_JOB_COUNT + 1] = {"chief", "worker", "ps", "evaluator",
                                                          "master"};
#define CONFIG_JOB_LIST JOB_LIST ", master"
#define MASTER DT_JOB_COUNT

static dt_status parse_cluster(const cJSON *cluster, dt_cluster *out)
{
    const cJSON *jobs[DT_JOB_COUNT + 1];
    dt_status st = get_members(cluster, "cluster", "job", config_jobs, DT_JOB_COUNT + 1,
                               CONFIG_JOB_LIST, jobs);
    if (!st && jobs[DT_JOB_CHIEF] && jobs[MASTER])
        return dt_error(DT_ERR_INVALID, TFC "cluster: both 'chief' and 'master' (TF 1.x's name "
                        "of the chief): one chief");
    if (!st && jobs[MASTER])
        jobs[DT_JOB_CHIEF] = jobs[MASTER], out->chief_named_master = true;
    for (int j = 0; j < DT_JOB_COUNT && !st; j++)
        if (jobs[j])
            st = parse_job(jobs[j], (dt_job)j, out);
    if (st)
        return st;
    if (out->n_tasks[DT_JOB_CHIEF] + out->n_tasks[DT_JOB_WORKER] == 0)
        return dt_error(DT_ERR_INVALID,
                        TFC "cluster: no chief and no worker (training needs at least one)");
    return check_unique_addrs(out);
}

static dt_status parse_task(const cJSON *task, dt_cluster *out)
{
    static const char *const keys[] = {"type", "index"};
    const cJSON *m[2];
    if (!task)
        return dt_error(DT_ERR_INVALID, TFC "task: missing (a cluster needs this task's type and index)");
    if (!cJSON_IsObject(task))
        return dt_error(DT_ERR_INVALID, TFC "task: not an object");
    dt_status st = get_members(task, "task", "key", keys, 2, "type, index", m);
    if (st)
        return st;
    if (!m[0])
        return dt_error(DT_ERR_INVALID, TFC "task.type: missing");
    if (!cJSON_IsString(m[0]))
        return dt_error(DT_ERR_INVALID, TFC "task.type: not a string");
    if (strcmp(m[0]->valuestring, "master") == 0)
        out->task_type = DT_JOB_CHIEF; /* TF 1.x's chief */
    else if (dt_job_parse(m[0]->valuestring, &out->task_type))
        return dt_error(DT_ERR_INVALID, TFC "task.type: unknown job '%s' (jobs are "
                        CONFIG_JOB_LIST ")", m[0]->valuestring);
    int n = out->n_tasks[out->task_type];
    const char *name = job_names[out->task_type];
    /* The evaluator alone may stand outside the cluster it evaluates. */
    if (n == 0 && out->task_type != DT_JOB_EVALUATOR)
        return dt_error(DT_ERR_INVALID, TFC "task.type: job '%s' is not in the cluster",
                        m[0]->valuestring);
    if (!m[1])
        return dt_error(DT_ERR_INVALID, TFC "task.index: missing");
    if (!get_index(m[1], &out->task_index))
        return dt_error(DT_ERR_INVALID, TFC "task.index: not a non-negative integer");
    if (n > 0 && out->task_index >= n)
        return dt_error(DT_ERR_INVALID, TFC "task.index: %d is out of range: job '%s' has %d task%s",
                        out->task_index, name, n, n == 1 ? "" : "s");
    return DT_OK;
}

/* Ranks and the chief, as TensorFlow's multi_worker_util computes them. */
static void assign_roles(dt_cluster *c)
{
    int chiefs = c->n_tasks[DT_JOB_CHIEF];
    c->n_workers = chiefs + c->n_tasks[DT_JOB_WORKER];
    switch (c->task_type) {
    case DT_JOB_CHIEF:
        c->rank = 0;
        c->is_chief = true;
        break;
    case DT_JOB_WORKER:
        c->rank = c->task_index + chiefs;
        c->is_chief = chiefs == 0 && c->task_index == 0;
        break;
    case DT_JOB_PS:
        c->rank = -1;
        c->is_chief = false;
        break;
    case DT_JOB_EVALUATOR:
        c->rank = -1;
        c->is_chief = true;
        c->n_workers = 1;
        break;
    case DT_JOB_COUNT:
        assert(!"DT_JOB_COUNT is not a job");
        break;
    }
}

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* FNV-1a of a canonical text: per job in dt_job order "name=count\n", then per task
 * "host port\n" with the host in lower case. Hosts hold no spaces or newlines, so two different
 * clusters never share a text; task and rpc_layer are left out so every task gets the same id. */
static uint64_t cluster_id(const dt_cluster *c)
{
    uint64_t h = 0xcbf29ce484222325ull;
    char line[DT_HOST_CAP + 32];
    for (int j = 0; j < DT_JOB_COUNT; j++) {
        snprintf(line, sizeof line, "%s=%d\n", job_names[j], c->n_tasks[j]);
        h = fnv1a(h, line);
        for (int i = 0; i < c->n_tasks[j]; i++) {
            const dt_addr *a = &c->tasks[j][i];
            int n = snprintf(line, sizeof line, "%s %u\n", a->host, (unsigned)a->port);
            for (int k = 0; k < n && line[k] != ' '; k++)
                if (line[k] >= 'A' && line[k] <= 'Z')
                    line[k] = (char)(line[k] - 'A' + 'a');
            h = fnv1a(h, line);
        }
    }
    return h;
}

static void set_local(dt_cluster *c)
{
    memset(c, 0, sizeof *c);
    c->task_type = DT_JOB_WORKER;
    c->is_chief = true;
    c->n_workers = 1;
    c->id = cluster_id(c);
}

/* The top level: which keys are there and whether they make a cluster. Leaves *cluster NULL
 * for a single local task. */
static dt_status parse_top(const cJSON *root, const cJSON **cluster, const cJSON **task)
{
    static const char *const keys[] = {"cluster", "task", "rpc_layer", "environment"};
    const cJSON *m[4];
    if (!cJSON_IsObject(root))
        return dt_error(DT_ERR_INVALID, TFC "not a JSON object");
    dt_status st = get_members(root, "", "key", keys, 4, "cluster, task, rpc_layer, environment", m);
    if (st)
        return st;
    for (int k = 2; k < 4; k++)
        if (m[k] && !cJSON_IsString(m[k]))
            return dt_error(DT_ERR_INVALID, TFC "%s: not a string", keys[k]);
    if (m[0] && !cJSON_IsObject(m[0]))
        return dt_error(DT_ERR_INVALID, TFC "cluster: not an object of job: [\"host:port\", ...]");
    /* An empty cluster is TensorFlow's empty ClusterSpec: a local task. */
    *cluster = m[0] && m[0]->child ? m[0] : NULL;
    *task = m[1];
    return DT_OK;
}

/* The sparse form's top level: its keys, and not a "cluster" beside it. */
static dt_status parse_sparse_top(const cJSON *root, const cJSON **task)
{
    static const char *const keys[] = {"sparseCluster", "task", "rpc_layer", "environment",
                                       "cluster"};
    const cJSON *m[5];
    dt_status st = get_members(root, "", "key", keys, 5,
                               "sparseCluster, task, rpc_layer, environment", m);
    if (st)
        return st;
    if (m[4])
        return dt_error(DT_ERR_INVALID, TFC "both cluster and sparseCluster: one form");
    for (int k = 2; k < 4; k++)
        if (m[k] && !cJSON_IsString(m[k]))
            return dt_error(DT_ERR_INVALID, TFC "%s: not a string", keys[k]);
    *task = m[1];
    return DT_OK;
}

/* A cluster was given: its jobs, this task, and what follows from them. */
static dt_status build_cluster(const cJSON *cluster, const cJSON *task, dt_cluster *out)
{
    out->has_cluster = true;
    dt_status st = parse_cluster(cluster, out);
    if (st)
        return st;
    st = parse_task(task, out);
    if (st)
        return st;
    assign_roles(out);
    out->id = cluster_id(out);
    return DT_OK;
}

/* ---- TFJob's sparse form (enableDynamicWorker) ----
 * {"sparseCluster": {"worker": {"3": "host:port"}, "ps": ["host:port", ...]}, "task": {...}}: a
 * worker knows every ps task and itself, a ps task only its own address (the list's one entry,
 * whatever its index), a chief or an evaluator nothing. The cluster keeps the known addresses at
 * their indices, the others empty (dt_cluster_known), and is marked sparse: its workers train
 * between-graph, worker 0 leading (see dtrain/cluster.h). */

static dt_status sparse_task(const cJSON *task, dt_cluster *out)
{
    if (!task)
        return dt_error(DT_ERR_INVALID, TFC "task: missing (sparseCluster needs this task's type "
                        "and index)");
    /* parse_task looks the index up among n_tasks: the job's count is not known here, so the
     * task is read against a count it cannot exceed. */
    for (int j = 0; j < DT_JOB_COUNT; j++)
        out->n_tasks[j] = INT_MAX;
    dt_status st = parse_task(task, out);
    for (int j = 0; j < DT_JOB_COUNT; j++)
        out->n_tasks[j] = 0;
    if (st)
        return st;
    if (out->task_type == DT_JOB_CHIEF)
        return dt_error(DT_ERR_INVALID, TFC "sparseCluster (TFJob's enableDynamicWorker) gives a "
                        "chief task no cluster: dtrain trains that form between-graph, the "
                        "workers on their own against the ps tasks, worker 0 leading; run it "
                        "with worker and ps replicas (and an evaluator), no chief or master");
    if (out->task_index >= DT_SPARSE_MAX_TASKS)
        return dt_error(DT_ERR_INVALID, TFC "task.index: %d: a sparse cluster's tasks are "
                        "numbered below %d", out->task_index, DT_SPARSE_MAX_TASKS);
    return DT_OK;
}

/* Slot `index` of job j, the ones below it unknown. */
static dt_status sparse_put(dt_cluster *c, dt_job j, int index, const cJSON *e, const char *field)
{
    if (!cJSON_IsString(e))
        return dt_error(DT_ERR_INVALID, TFC "%s: not a \"host:port\" string", field);
    if (!(c->tasks[j] = calloc((size_t)index + 1, sizeof(dt_addr))))
        return dt_error(DT_ERR_NOMEM, TFC "%s: no memory", field);
    c->n_tasks[j] = index + 1;
    dt_status st = dt_addr_parse(e->valuestring, &c->tasks[j][index]);
    return st ? dt_error_prefix(st, TFC "%s", field) : DT_OK;
}

static dt_status sparse_cluster(const cJSON *sparse, const cJSON *task, dt_cluster *out)
{
    static const char *const keys[] = {"worker", "ps"};
    const cJSON *m[2];
    if (!cJSON_IsObject(sparse))
        return dt_error(DT_ERR_INVALID, TFC "sparseCluster: not an object");
    dt_status st = get_members(sparse, "sparseCluster", "job", keys, 2, "worker, ps", m);
    if (st || (st = sparse_task(task, out)))
        return st;
    const cJSON *workers = m[0], *ps = m[1];
    if (workers && !cJSON_IsNull(workers) && !cJSON_IsObject(workers))
        return dt_error(DT_ERR_INVALID, TFC "sparseCluster.worker: not an object of "
                        "index: \"host:port\"");
    if (ps && !cJSON_IsNull(ps) && !cJSON_IsArray(ps))
        return dt_error(DT_ERR_INVALID, TFC "sparseCluster.ps: not a list of \"host:port\" "
                        "strings");
    int n_workers = workers ? cJSON_GetArraySize(workers) : 0;
    int n_ps = ps ? cJSON_GetArraySize(ps) : 0;
    out->has_cluster = out->sparse = true;
    if (out->task_type == DT_JOB_EVALUATOR) {
        /* The evaluator reads the model directory's checkpoints: it needs no peer. */
        if (n_ps != 0 || n_workers != 0)
            return dt_error(DT_ERR_INVALID, TFC "sparseCluster: an evaluator's is empty, found "
                            "%d ps and %d worker entries", n_ps, n_workers);
    } else if (out->task_type == DT_JOB_PS) {
        if (n_ps != 1 || n_workers != 0)
            return dt_error(DT_ERR_INVALID, TFC "sparseCluster: a ps task's holds its own address "
                            "alone (ps: [\"host:port\"], no worker), found %d ps and %d worker "
                            "entries", n_ps, n_workers);
        st = sparse_put(out, DT_JOB_PS, out->task_index, ps->child, "sparseCluster.ps[0]");
    } else {
        char key[16];
        snprintf(key, sizeof key, "%d", out->task_index);
        if (n_workers != 1 || strcmp(workers->child->string, key) != 0)
            return dt_error(DT_ERR_INVALID, TFC "sparseCluster.worker: a worker's holds itself "
                            "alone ({\"%d\": \"host:port\"}, task.index %d)", out->task_index,
                            out->task_index);
        if (n_ps < 1)
            return dt_error(DT_ERR_INVALID, TFC "sparseCluster.ps: no ps task (a sparse cluster "
                            "trains against its ps tasks)");
        st = parse_job(ps, DT_JOB_PS, out);
        if (st == DT_OK)
            st = sparse_put(out, DT_JOB_WORKER, out->task_index, workers->child,
                            "sparseCluster.worker");
        if (st == DT_OK)
            st = check_unique_addrs(out);
    }
    if (st)
        return st;
    out->rank = out->task_type == DT_JOB_WORKER ? out->task_index : -1;
    out->is_chief = (out->task_type == DT_JOB_WORKER && out->task_index == 0) ||
                    out->task_type == DT_JOB_EVALUATOR;
    out->n_workers = out->task_type == DT_JOB_WORKER ? out->task_index + 1 : 1;
    /* Every task of the form sees another part of the cluster: the secret, not the addresses,
     * is what tells a stranger apart. */
    out->id = fnv1a(0xcbf29ce484222325ull, "sparseCluster\n");
    return DT_OK;
}

dt_status dt_cluster_parse(const char *json, dt_cluster *out)
{
    cJSON *root = NULL;
    const cJSON *cluster = NULL, *task = NULL;
    dt_status st = DT_OK;
    set_local(out);
    if (!json || !json[0])
        return DT_OK;
    const char *end = NULL;
    root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        /* cJSON sets end on failure too; its global error pointer is not thread-safe. */
        st = dt_error(DT_ERR_INVALID, TFC "not valid JSON near byte %zu",
                      end ? (size_t)(end - json) : (size_t)0);
        goto fail;
    }
    const cJSON *sparse = cJSON_GetObjectItemCaseSensitive(root, "sparseCluster");
    if (sparse) {
        if ((st = parse_sparse_top(root, &task)) || (st = sparse_cluster(sparse, task, out)))
            goto fail;
        cJSON_Delete(root);
        return DT_OK;
    }
    st = parse_top(root, &cluster, &task);
    if (st)
        goto fail;
    if (cluster) {
        st = build_cluster(cluster, task, out);
        if (st)
            goto fail;
    }
    cJSON_Delete(root);
    return DT_OK;
fail:
    cJSON_Delete(root);
    dt_cluster_free(out);
    return st;
}

dt_status dt_cluster_from_env(dt_cluster *out)
{
    memset(out, 0, sizeof *out);
    dt_resolver r = DT_RESOLVER_AUTO;
    const char *name = getenv("DTRAIN_CLUSTER_RESOLVER");
    dt_status st = name && *name ? dt_resolver_parse(name, &r) : DT_OK;
    if (st)
        return dt_error_prefix(st, "DTRAIN_CLUSTER_RESOLVER (--cluster-resolver)");
    char *json = NULL;
    if ((st = dt_cluster_resolve(r, NULL, &json, NULL)))
        return st;
    st = dt_cluster_parse(json, out);
    free(json);
    return st;
}

void dt_cluster_free(dt_cluster *c)
{
    for (int j = 0; j < DT_JOB_COUNT; j++)
        free(c->tasks[j]);
    memset(c, 0, sizeof *c);
}

void dt_cluster_rank_task(const dt_cluster *c, int rank, dt_job *job, int *index)
{
    assert(rank >= 0 && rank < c->n_workers);
    /* The evaluator's one-task cluster is itself. */
    if (c->task_type == DT_JOB_EVALUATOR) {
        *job = DT_JOB_EVALUATOR;
        *index = c->task_index;
        return;
    }
    int chiefs = c->n_tasks[DT_JOB_CHIEF];
    *job = rank < chiefs ? DT_JOB_CHIEF : DT_JOB_WORKER;
    *index = rank < chiefs ? rank : rank - chiefs;
}

bool dt_cluster_known(const dt_cluster *c, dt_job job, int index)
{
    const dt_addr *a = dt_cluster_addr(c, job, index);
    return a && a->host[0];
}

const dt_addr *dt_cluster_addr(const dt_cluster *c, dt_job job, int index)
{
    if ((unsigned)job >= DT_JOB_COUNT || index < 0 || index >= c->n_tasks[job])
        return NULL;
    return &c->tasks[job][index];
}

bool dt_cluster_all_loopback(const dt_cluster *c)
{
    for (int j = 0; j < DT_JOB_COUNT; j++)
        for (int i = 0; i < c->n_tasks[j]; i++)
            if (!is_loopback(c->tasks[j][i].host))
                return false;
    return true;
}

dt_status dt_cluster_set_task(dt_cluster *c, const char *task)
{
    if (c->sparse)
        return dt_error(DT_ERR_INVALID, "--task %s: a sparseCluster is its own task's view of "
                        "the cluster (TF_CONFIG's task stands)", task);
    if (!c->has_cluster)
        return dt_error(DT_ERR_INVALID, "--task %s: there is no cluster (TF_CONFIG) to be a task of",
                        task);
    const char *colon = strrchr(task, ':');
    char job_text[32];
    if (!colon || colon == task || (size_t)(colon - task) >= sizeof job_text)
        return dt_error(DT_ERR_INVALID, "--task: '%s' is not TYPE:INDEX (e.g. worker:1)", task);
    snprintf(job_text, sizeof job_text, "%.*s", (int)(colon - task), task);
    dt_job job;
    if (dt_job_parse(job_text, &job))
        return dt_error_prefix(DT_ERR_INVALID, "--task %s", task);
    char *end;
    long index = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end != '\0' || index < 0)
        return dt_error(DT_ERR_INVALID, "--task: '%s' is not TYPE:INDEX (e.g. worker:1)", task);
    int n = c->n_tasks[job];
    if (job != DT_JOB_EVALUATOR && index >= n)
        return dt_error(DT_ERR_INVALID, "--task %s: job '%s' has %d task%s in the cluster", task,
                        job_names[job], n, n == 1 ? "" : "s");
    c->task_type = job;
    c->task_index = (int)index;
    assign_roles(c);
    return DT_OK;
}

dt_status dt_cluster_workers_ring(const dt_cluster *c, const uint16_t *ports, dt_cluster *out)
{
    memset(out, 0, sizeof *out);
    int n = c->n_tasks[DT_JOB_WORKER];
    if (c->task_type != DT_JOB_WORKER || n < 1)
        return dt_error(DT_ERR_INVALID, "the workers' ring: %s:%d is not a worker",
                        dt_job_name(c->task_type), c->task_index);
    if (!(out->tasks[DT_JOB_WORKER] = malloc((size_t)n * sizeof(dt_addr))))
        return dt_error(DT_ERR_NOMEM, "no memory for the workers' ring");
    for (int i = 0; i < n; i++) {
        out->tasks[DT_JOB_WORKER][i] = c->tasks[DT_JOB_WORKER][i];
        out->tasks[DT_JOB_WORKER][i].port = ports[i];
    }
    out->has_cluster = true;
    out->n_tasks[DT_JOB_WORKER] = n;
    out->task_type = DT_JOB_WORKER, out->task_index = c->task_index;
    assign_roles(out);
    char salt[64];
    snprintf(salt, sizeof salt, "workers' ring of %016llx\n", (unsigned long long)c->id);
    out->id = fnv1a(cluster_id(out), salt);
    return DT_OK;
}

int dt_cluster_rank_of(const dt_cluster *c, dt_job job, int index)
{
    int chiefs = c->n_tasks[DT_JOB_CHIEF];
    if (job == DT_JOB_CHIEF && index >= 0 && index < chiefs)
        return 0;
    if (job == DT_JOB_WORKER && index >= 0 && index < c->n_tasks[DT_JOB_WORKER])
        return index + chiefs;
    return -1;
}

void dt_cluster_task_name(const dt_cluster *c, dt_job job, int index, char *out, size_t cap)
{
    const dt_addr *a = (unsigned)job < DT_JOB_COUNT ? dt_cluster_addr(c, job, index) : NULL;
    if (c->sparse && (!a || !a->host[0])) { /* a task a sparse cluster does not show */
        snprintf(out, cap, "%s:%d", (unsigned)job < DT_JOB_COUNT ? dt_job_name(job) : "?", index);
        return;
    }
    snprintf(out, cap, "%s:%d (%s:%u)", (unsigned)job < DT_JOB_COUNT ? dt_job_name(job) : "?",
             index, a ? a->host : "?", a ? (unsigned)a->port : 0u);
}

/* ---- Writing TF_CONFIG: the inverse of the parser ---- */

/* An address as TF_CONFIG writes it: host:port, an IPv6 host in brackets. */
static void addr_text(const dt_addr *a, char *out, size_t cap)
{
    if (strchr(a->host, ':'))
        snprintf(out, cap, "[%s]:%u", a->host, (unsigned)a->port);
    else
        snprintf(out, cap, "%s:%u", a->host, (unsigned)a->port);
}

char *dt_cluster_tf_config(const dt_cluster *c, dt_job job, int index)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *cluster = cJSON_AddObjectToObject(root, "cluster");
    cJSON *task = cJSON_AddObjectToObject(root, "task");
    char *text = NULL;
    bool ok = cluster && task;
    /* TF lists the evaluator apart from the cluster: only its own TF_CONFIG names it. */
    for (int j = 0; ok && j < DT_JOB_EVALUATOR; j++) {
        if (c->n_tasks[j] == 0)
            continue;
        cJSON *list = cJSON_AddArrayToObject(cluster, dt_job_name((dt_job)j));
        for (int i = 0; ok && list && i < c->n_tasks[j]; i++) {
            char addr[DT_HOST_CAP + 16];
            addr_text(&c->tasks[j][i], addr, sizeof addr);
            cJSON *s = cJSON_CreateString(addr);
            ok = s && cJSON_AddItemToArray(list, s);
            if (!ok)
                cJSON_Delete(s);
        }
        ok = ok && list;
    }
    if (ok && cJSON_AddStringToObject(task, "type", dt_job_name(job)) &&
        cJSON_AddNumberToObject(task, "index", index))
        text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

dt_status dt_cluster_local(const int n[DT_JOB_COUNT], const char *host, const uint16_t *ports,
                           dt_cluster *out)
{
    memset(out, 0, sizeof *out);
    out->has_cluster = true;
    int slot = 0;
    for (int j = 0; j < DT_JOB_COUNT; j++) {
        if (n[j] < 0 || (j == DT_JOB_CHIEF && n[j] > 1))
            return dt_error(DT_ERR_INVALID, "a local cluster of %d %s tasks", n[j],
                            dt_job_name((dt_job)j));
        if (n[j] == 0)
            continue;
        if (!(out->tasks[j] = calloc((size_t)n[j], sizeof *out->tasks[j]))) {
            dt_cluster_free(out);
            return dt_error(DT_ERR_NOMEM, "no memory for a cluster");
        }
        out->n_tasks[j] = n[j];
        for (int i = 0; i < n[j]; i++) {
            snprintf(out->tasks[j][i].host, DT_HOST_CAP, "%s", host);
            out->tasks[j][i].port = j == DT_JOB_EVALUATOR ? 0 : ports[slot++];
        }
    }
    out->task_type = n[DT_JOB_CHIEF] ? DT_JOB_CHIEF : DT_JOB_WORKER;
    assign_roles(out);
    out->id = cluster_id(out);
    return DT_OK;
}

/* ---- The cluster secret ---- */

/* A secret shorter than this is stretched before it is used as a key (see cluster.h). */
#define SECRET_KEY_BYTES 32
#define SECRET_STRETCH_ROUNDS 100000
static const char secret_salt[] = "dtrain cluster secret v1";

/* The key a short secret stands for: PBKDF2-HMAC-SHA256 of it, SECRET_STRETCH_ROUNDS rounds
 * under a fixed salt, so every task derives the same key and each guess at a weak secret costs
 * an attacker who recorded a handshake those rounds. */
static dt_status stretch_secret(const uint8_t *raw, size_t n, const char *source,
                                uint8_t **secret, size_t *secret_len)
{
    uint8_t *key = malloc(SECRET_KEY_BYTES);
    if (!key)
        return dt_error(DT_ERR_NOMEM, "no memory for the secret");
    if (PKCS5_PBKDF2_HMAC((const char *)raw, (int)n, (const unsigned char *)secret_salt,
                          (int)sizeof secret_salt - 1, SECRET_STRETCH_ROUNDS, EVP_sha256(),
                          SECRET_KEY_BYTES, key) != 1) {
        free(key);
        return dt_error(DT_ERR_NOMEM, "%s: stretching the secret failed (OpenSSL's PBKDF2)",
                        source);
    }
    *secret = key, *secret_len = SECRET_KEY_BYTES;
    return DT_OK;
}

/* The secret's key from its n raw bytes: itself when long enough, else stretched. */
static dt_status secret_key(const uint8_t *raw, size_t n, const char *source, uint8_t **secret,
                            size_t *secret_len)
{
    if (n < 16)
        return dt_error(DT_ERR_INVALID, "%s: a secret of %zu bytes is too short (16 at least, "
                        "32 or more to be used as it is)", source, n);
    if (n < SECRET_KEY_BYTES)
        return stretch_secret(raw, n, source, secret, secret_len);
    if (!(*secret = malloc(n)))
        return dt_error(DT_ERR_NOMEM, "no memory for the secret");
    memcpy(*secret, raw, n);
    *secret_len = n;
    return DT_OK;
}

/* A secret file others may read or change gives the cluster away: refused, as ssh refuses such
 * a private key. Checked on the open file, so the file checked is the file read. */
static dt_status check_secret_mode(FILE *f, const char *secret_file)
{
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0)
        return dt_error(DT_ERR_IO, "%s: %s", secret_file, strerror(errno));
    if (sb.st_mode & (S_IRWXG | S_IRWXO))
        return dt_error(DT_ERR_INVALID, "%s: mode %04o lets other users read or change the "
                        "cluster secret: chmod 600 it", secret_file,
                        (unsigned)(sb.st_mode & 07777));
    return DT_OK;
}

dt_status dt_cluster_load_secret(const char *secret_file, uint8_t **secret, size_t *secret_len)
{
    *secret = NULL;
    *secret_len = 0;
    if (secret_file) {
        FILE *f = fopen(secret_file, "rb");
        if (!f)
            return dt_error(DT_ERR_IO, "%s: %s", secret_file, strerror(errno));
        dt_status st = check_secret_mode(f, secret_file);
        if (st) {
            fclose(f);
            return st;
        }
        uint8_t buf[4097];
        size_t n = fread(buf, 1, sizeof buf, f);
        int err = ferror(f);
        fclose(f);
        if (err)
            st = dt_error(DT_ERR_IO, "%s: cannot read it", secret_file);
        else if (n == sizeof buf)
            st = dt_error(DT_ERR_INVALID, "%s: a secret of more than 4096 bytes", secret_file);
        while (st == DT_OK && n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
            n--;
        if (st == DT_OK)
            st = secret_key(buf, n, secret_file, secret, secret_len);
        OPENSSL_cleanse(buf, sizeof buf);
        return st;
    }
    const char *env = getenv("DTRAIN_CLUSTER_SECRET");
    if (!env || !*env)
        return DT_OK;
    return secret_key((const uint8_t *)env, strlen(env), "DTRAIN_CLUSTER_SECRET", secret,
                      secret_len);
}

/* Tasks that may talk to each other: the chief, the workers and the ps tasks (an evaluator
 * only reads checkpoints). */
static int connected_tasks(const dt_cluster *c)
{
    return c->n_tasks[DT_JOB_CHIEF] + c->n_tasks[DT_JOB_WORKER] + c->n_tasks[DT_JOB_PS];
}

dt_status dt_cluster_check_secret(const dt_cluster *c, bool have_secret, bool insecure)
{
    if (have_secret || insecure || connected_tasks(c) <= 1)
        return DT_OK;
    return dt_error(DT_ERR_AUTH, "a cluster of %d tasks and no secret: set DTRAIN_CLUSTER_SECRET "
                    "or give --secret-file (dtrain launch makes one), or give --insecure to let "
                    "anyone who reaches the tasks' ports (on loopback, any local user) join it",
                    connected_tasks(c));
}

dt_status dt_cluster_make_secret(char out[65])
{
    unsigned char raw[32];
    dt_status st = dt_random_bytes(raw, sizeof raw);
    if (st)
        return st;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[64] = '\0';
    return DT_OK;
}
