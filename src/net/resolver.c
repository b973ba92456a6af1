/* Cluster resolvers: the table, detection, and what the platforms' entries share (resolver.h). */
#include "resolver.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[DT_RESOLVER_COUNT] = {"auto", "tf_config", "sagemaker", "slurm",
                                                     "mpi"};

/* The platforms, in the order detection tries them (after TF_CONFIG, which any platform may
 * set and then wins). */
static const dt_resolver_ops *const platforms[] = {&dt_resolver_slurm_ops,
                                                   &dt_resolver_sagemaker_ops,
                                                   &dt_resolver_mpi_ops};
#define N_PLATFORMS (sizeof platforms / sizeof platforms[0])

const char *dt_resolver_name(dt_resolver r)
{
    return r >= 0 && r < DT_RESOLVER_COUNT ? names[r] : "?";
}

dt_status dt_resolver_parse(const char *s, dt_resolver *out)
{
    for (int r = 0; s && r < DT_RESOLVER_COUNT; r++)
        if (strcmp(s, names[r]) == 0) {
            *out = (dt_resolver)r;
            return DT_OK;
        }
    return dt_error(DT_ERR_INVALID, "'%s' is not a cluster resolver (auto, tf_config, sagemaker, "
                    "slurm, mpi)", s ? s : "");
}

static const char *plain_getenv(const char *name) { return getenv(name); }

dt_status dt_cluster_resolve(dt_resolver r, dt_getenv_fn env, char **tf_config, dt_resolver *used)
{
    *tf_config = NULL;
    env = env ? env : plain_getenv;
    const char *given = env("TF_CONFIG");
    if (r == DT_RESOLVER_AUTO) {
        r = DT_RESOLVER_TF_CONFIG;
        for (size_t i = 0; (!given || !*given) && i < N_PLATFORMS; i++)
            if (platforms[i]->detect && platforms[i]->detect(env)) {
                r = platforms[i]->kind;
                break;
            }
    }
    if (used)
        *used = r;
    if (r == DT_RESOLVER_TF_CONFIG) {
        if (given && *given && !(*tf_config = strdup(given)))
            return dt_error(DT_ERR_NOMEM, "no memory for TF_CONFIG");
        return DT_OK;
    }
    for (size_t i = 0; i < N_PLATFORMS; i++)
        if (platforms[i]->kind == r) {
            dt_status st = platforms[i]->resolve(env, tf_config);
            return st ? dt_error_prefix(st, "cluster resolver %s", names[r]) : DT_OK;
        }
    return dt_error(DT_ERR_INVALID, "no cluster resolver %d", (int)r);
}

/* ---- Shared ---- */

dt_status dt_resolver_env_int(dt_getenv_fn env, const char *name, long long max, long long *out)
{
    const char *s = env(name);
    if (!s || !*s)
        return DT_END;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < 0 || v > max)
        return dt_error(DT_ERR_INVALID, "%s='%s' is not an integer in 0..%lld", name, s, max);
    *out = v;
    return DT_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

dt_status dt_resolver_parse_jobs(const char *spec, int n_tasks, dt_resolver_jobs *out)
{
    memset(out, 0, sizeof *out);
    if (!spec || !*spec) {
        snprintf(out->name[0], sizeof out->name[0], "worker");
        out->count[0] = n_tasks, out->n = 1;
        return DT_OK;
    }
    int total = 0;
    for (const char *p = spec; *p;) {
        const char *colon = strchr(p, ':'), *comma = strchr(p, ',');
        if (!comma)
            comma = p + strlen(p);
        char *end;
        long n = colon && colon < comma ? strtol(colon + 1, &end, 10) : -1;
        size_t len = colon ? (size_t)(colon - p) : 0;
        if (!colon || colon > comma || end != comma || n < 1 || n > 65536 || len == 0 ||
            len >= sizeof out->name[0] || out->n == DT_RESOLVER_MAX_JOBS)
            return dt_error(DT_ERR_INVALID, "jobs '%s': expected JOB:COUNT,... (such as "
                            "worker:4,ps:2), at most %d jobs", spec, DT_RESOLVER_MAX_JOBS);
        memcpy(out->name[out->n], p, len);
        dt_job job;
        if (strcmp(out->name[out->n], "master") != 0 && dt_job_parse(out->name[out->n], &job))
            return dt_error(DT_ERR_INVALID, "jobs '%s': '%s' is not a job (chief, master, worker, "
                            "ps, evaluator)", spec, out->name[out->n]);
        for (int i = 0; i < out->n; i++)
            if (strcmp(out->name[i], out->name[out->n]) == 0)
                return dt_error(DT_ERR_INVALID, "jobs '%s': '%s' given twice", spec,
                                out->name[i]);
        out->count[out->n++] = (int)n;
        total += (int)n;
        p = *comma ? comma + 1 : comma;
    }
    if (total != n_tasks)
        return dt_error(DT_ERR_INVALID, "jobs '%s' make %d tasks; the platform started %d", spec,
                        total, n_tasks);
    /* Sorted by name, counts alongside: TF's SlurmClusterResolver takes the jobs so. */
    struct {
        char name[16];
        int count;
    } sorted[DT_RESOLVER_MAX_JOBS];
    for (int i = 0; i < out->n; i++) {
        memcpy(sorted[i].name, out->name[i], sizeof sorted[i].name);
        sorted[i].count = out->count[i];
    }
    qsort(sorted, (size_t)out->n, sizeof sorted[0], by_name);
    for (int i = 0; i < out->n; i++) {
        memcpy(out->name[i], sorted[i].name, sizeof out->name[i]);
        out->count[i] = sorted[i].count;
    }
    return DT_OK;
}

char *dt_resolver_tf_config(const dt_resolver_jobs *jobs, char (*addrs)[DT_HOST_CAP + 8],
                            int rank, bool cloud)
{
    cJSON *root = cJSON_CreateObject(), *cluster = cJSON_AddObjectToObject(root, "cluster");
    bool ok = root && cluster;
    const char *type = NULL;
    int index = 0;
    for (int j = 0, at = 0; ok && j < jobs->n; j++) {
        cJSON *list = cJSON_AddArrayToObject(cluster, jobs->name[j]);
        ok = list != NULL;
        for (int i = 0; ok && i < jobs->count[j]; i++, at++) {
            ok = cJSON_AddItemToArray(list, cJSON_CreateString(addrs[at]));
            if (at == rank)
                type = jobs->name[j], index = i;
        }
    }
    cJSON *task = ok && type ? cJSON_AddObjectToObject(root, "task") : NULL;
    ok = task && cJSON_AddStringToObject(task, "type", type) &&
         cJSON_AddNumberToObject(task, "index", index) &&
         (!cloud || cJSON_AddStringToObject(root, "environment", "cloud"));
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}
