/* The slurm resolver: the cluster of an srun step, as TF's SlurmClusterResolver builds it.
 *
 * The step's nodes (SLURM_STEP_NODELIST, Slurm's compressed host list such as node[01-04,07])
 * hold SLURM_STEP_TASKS_PER_NODE tasks each ("2(x3),1": two on each of three nodes, then one),
 * task i of a node at port DTRAIN_PORT_BASE + i (8888, TF's); the task list, node by node, goes
 * to the jobs of DTRAIN_JOBS (--jobs worker:4,ps:2; default: every task a worker) sorted by
 * name, and this process is the task at its rank, SLURM_PROCID (OMPI_COMM_WORLD_RANK under
 * mpirun, as TF reads it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resolver.h"

#define MAX_NODES 65536
#define MAX_TASKS 65536

typedef char addr_text[DT_HOST_CAP + 8];

typedef struct {
    char (*names)[DT_HOST_CAP];
    int n, cap;
} host_list;

static dt_status add_host(host_list *h, const char *name, size_t len, const char *list)
{
    if (len == 0 || len >= DT_HOST_CAP)
        return dt_error(DT_ERR_INVALID, "SLURM_STEP_NODELIST '%s': a host name of %zu bytes", list,
                        len);
    if (h->n == MAX_NODES)
        return dt_error(DT_ERR_INVALID, "SLURM_STEP_NODELIST '%s': more than %d nodes", list,
                        MAX_NODES);
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 16;
        void *p = realloc(h->names, (size_t)cap * sizeof *h->names);
        if (!p)
            return dt_error(DT_ERR_NOMEM, "no memory for %d node names", cap);
        h->names = p, h->cap = cap;
    }
    memcpy(h->names[h->n], name, len);
    h->names[h->n++][len] = '\0';
    return DT_OK;
}

/* prefix + every name of item (a host with bracket groups, which may follow one another:
 * rack[1-2]n[1-2] is rack1n1, rack1n2, rack2n1, rack2n2), in order. */
static dt_status expand_item(host_list *h, char *prefix, size_t at, const char *item,
                             const char *end, const char *list)
{
    const char *open = memchr(item, '[', (size_t)(end - item));
    if (!open) {
        size_t len = (size_t)(end - item);
        if (at + len >= DT_HOST_CAP)
            return add_host(h, prefix, DT_HOST_CAP, list);
        memcpy(prefix + at, item, len);
        return add_host(h, prefix, at + len, list);
    }
    const char *close = memchr(open, ']', (size_t)(end - open));
    size_t head = (size_t)(open - item);
    if (!close || at + head >= DT_HOST_CAP)
        return dt_error(DT_ERR_INVALID, "SLURM_STEP_NODELIST '%s': a '[' without its ']'", list);
    memcpy(prefix + at, item, head);
    for (const char *r = open + 1; r < close;) {
        const char *stop = memchr(r, ',', (size_t)(close - r));
        stop = stop ? stop : close;
        char *dash;
        long lo = strtol(r, &dash, 10), hi = lo;
        if (dash < stop && *dash == '-')
            hi = strtol(dash + 1, &dash, 10);
        int width = (int)(strchr("0123456789", *r) ? strspn(r, "0123456789") : 0);
        if (dash != stop || width == 0 || lo < 0 || hi < lo || hi - lo >= MAX_NODES)
            return dt_error(DT_ERR_INVALID, "SLURM_STEP_NODELIST '%s': '%.*s' is not a range "
                            "such as 01-04", list, (int)(stop - r), r);
        for (long v = lo; v <= hi; v++) {
            char num[32];
            int n = snprintf(num, sizeof num, "%0*ld", width, v);
            if (at + head + (size_t)n >= DT_HOST_CAP)
                return add_host(h, prefix, DT_HOST_CAP, list);
            memcpy(prefix + at + head, num, (size_t)n);
            dt_status st = expand_item(h, prefix, at + head + (size_t)n, close + 1, end, list);
            if (st)
                return st;
        }
        r = stop < close ? stop + 1 : close;
    }
    return DT_OK;
}

/* Slurm's compressed host list: names at top-level commas, each with its bracket groups. */
static dt_status expand_hostlist(const char *list, host_list *h)
{
    char prefix[DT_HOST_CAP];
    for (const char *p = list; *p;) {
        const char *q = p;
        int depth = 0;
        while (*q && (*q != ',' || depth > 0)) {
            depth += *q == '[' ? 1 : *q == ']' ? -1 : 0;
            q++;
        }
        dt_status st = expand_item(h, prefix, 0, p, q, list);
        if (st)
            return st;
        p = *q ? q + 1 : q;
    }
    return h->n ? DT_OK
                : dt_error(DT_ERR_INVALID, "SLURM_STEP_NODELIST '%s': no node", list);
}

/* "2(x3),1" into per-node counts, one per node. */
static dt_status expand_tasks(const char *spec, const char *var, int nodes, int *per_node)
{
    int n = 0;
    for (const char *p = spec; *p;) {
        char *end;
        long count = strtol(p, &end, 10), times = 1;
        if (end[0] == '(' && end[1] == 'x') {
            times = strtol(end + 2, &end, 10);
            if (*end++ != ')')
                times = -1;
        }
        if (end == p || count < 1 || count > MAX_TASKS || times < 1 || n + times > nodes ||
            (*end && *end != ','))
            return dt_error(DT_ERR_INVALID, "%s='%s' is not N or N(xM) per node for the step's "
                            "%d nodes", var, spec, nodes);
        for (long i = 0; i < times; i++)
            per_node[n++] = (int)count;
        p = *end ? end + 1 : end;
    }
    if (n != nodes)
        return dt_error(DT_ERR_INVALID, "%s='%s' counts %d nodes; SLURM_STEP_NODELIST has %d", var,
                        spec, n, nodes);
    return DT_OK;
}

static const char *first_set(dt_getenv_fn env, const char *a, const char *b, const char **which)
{
    const char *v = env(a);
    *which = a;
    if (!v || !*v)
        v = env(b), *which = b;
    return v && *v ? v : NULL;
}

static bool slurm_detect(dt_getenv_fn env)
{
    return env("SLURM_PROCID") && env("SLURM_STEP_NODELIST") && env("SLURM_STEP_TASKS_PER_NODE");
}

/* This process's rank and the step's task count. */
static dt_status rank_and_size(dt_getenv_fn env, long long *rank, long long *size)
{
    bool mpi = env("OMPI_COMM_WORLD_RANK") != NULL;
    dt_status st = dt_resolver_env_int(env, mpi ? "OMPI_COMM_WORLD_RANK" : "SLURM_PROCID",
                                       MAX_TASKS - 1, rank);
    if (st == DT_OK)
        st = dt_resolver_env_int(env, mpi ? "OMPI_COMM_WORLD_SIZE" : "SLURM_STEP_NUM_TASKS",
                                 MAX_TASKS, size);
    if (st == DT_END && !mpi)
        st = dt_resolver_env_int(env, "SLURM_NTASKS", MAX_TASKS, size);
    if (st == DT_END)
        return dt_error(DT_ERR_INVALID, "SLURM_PROCID and SLURM_NTASKS (or SLURM_STEP_NUM_TASKS) "
                        "must be set: run under srun");
    if (st == DT_OK && (*size < 1 || *rank >= *size))
        return dt_error(DT_ERR_INVALID, "rank %lld of %lld tasks", *rank, *size);
    return st;
}

static dt_status slurm_resolve(dt_getenv_fn env, char **tf_config)
{
    long long rank = 0, size = 0, base = 8888;
    dt_status st = rank_and_size(env, &rank, &size);
    if (st)
        return st;
    st = dt_resolver_env_int(env, "DTRAIN_PORT_BASE", 65535, &base);
    if (st != DT_OK && st != DT_END)
        return st;
    const char *var, *list = first_set(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", &var);
    if (!list)
        return dt_error(DT_ERR_INVALID, "SLURM_STEP_NODELIST is not set: run under srun");
    host_list h = {0};
    int *per_node = NULL;
    addr_text *addrs = NULL;
    dt_resolver_jobs jobs;
    if ((st = expand_hostlist(list, &h)))
        goto done;
    per_node = calloc((size_t)h.n, sizeof *per_node);
    addrs = calloc((size_t)size, sizeof *addrs);
    if (!per_node || !addrs) {
        st = dt_error(DT_ERR_NOMEM, "no memory for %lld tasks", size);
        goto done;
    }
    const char *tpn = first_set(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", &var);
    if (!tpn) { /* sbatch's --ntasks-per-node: one count for every node */
        tpn = env("SLURM_NTASKS_PER_NODE"), var = "SLURM_NTASKS_PER_NODE";
        if (tpn && !*tpn)
            tpn = NULL;
    }
    if (!tpn) {
        st = dt_error(DT_ERR_INVALID, "SLURM_STEP_TASKS_PER_NODE is not set: run under srun");
        goto done;
    }
    if (strchr(tpn, '(') || strchr(tpn, ','))
        st = expand_tasks(tpn, var, h.n, per_node);
    else /* one count for every node */
        for (int i = 0; i < h.n && st == DT_OK; i++)
            st = expand_tasks(tpn, var, 1, &per_node[i]);
    int n = 0;
    for (int i = 0; i < h.n && st == DT_OK; i++)
        for (int k = 0; k < per_node[i] && st == DT_OK; k++) {
            if (n == size || base + k > 65535)
                st = dt_error(DT_ERR_INVALID, "%s='%s' places more than the %lld tasks of the "
                              "step, or past port 65535", var, tpn, size);
            else
                snprintf(addrs[n++], sizeof addrs[0], "%s:%lld", h.names[i], base + k);
        }
    if (st == DT_OK && n != size)
        st = dt_error(DT_ERR_INVALID, "%s='%s' places %d tasks; the step has %lld", var, tpn, n,
                      size);
    if (st == DT_OK && (st = dt_resolver_parse_jobs(env("DTRAIN_JOBS"), (int)size, &jobs)))
        dt_error_prefix(st, "DTRAIN_JOBS (--jobs)");
    if (st == DT_OK && !(*tf_config = dt_resolver_tf_config(&jobs, addrs, (int)rank, false)))
        st = dt_error(DT_ERR_NOMEM, "no memory for a TF_CONFIG");
done:
    free(h.names), free(per_node), free(addrs);
    return st;
}

const dt_resolver_ops dt_resolver_slurm_ops = {DT_RESOLVER_SLURM, slurm_detect, slurm_resolve};
