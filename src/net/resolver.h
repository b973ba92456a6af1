/* Cluster resolvers (internal to src/net): the TF_CONFIG of this process's task as a platform
 * describes its cluster, one entry per platform (resolver_slurm.c, resolver_sagemaker.c,
 * resolver_mpi.c), chosen by name or detected (resolver.c, dt_cluster_resolve in cluster.h).
 * Each writes the TF_CONFIG TensorFlow's own resolver for the platform would give, which
 * dt_cluster_parse then checks like any other. */
#ifndef DTRAIN_NET_RESOLVER_H
#define DTRAIN_NET_RESOLVER_H

#include <stdbool.h>

#include "dtrain/cluster.h"

typedef struct {
    dt_resolver kind;
    /* Whether env looks like this platform's (NULL: chosen by name only). */
    bool (*detect)(dt_getenv_fn env);
    /* This task's TF_CONFIG, malloc'd; errors name the variable or file at fault. */
    dt_status (*resolve)(dt_getenv_fn env, char **tf_config);
} dt_resolver_ops;

extern const dt_resolver_ops dt_resolver_slurm_ops, dt_resolver_sagemaker_ops, dt_resolver_mpi_ops;

/* ---- Shared by the resolvers ---- */

#define DT_RESOLVER_MAX_JOBS 8

/* Jobs as "worker:4,ps:2" (DTRAIN_JOBS, --jobs): names and counts, sorted by name as TF's
 * SlurmClusterResolver sorts them (so a chief, then an evaluator, the ps and the workers take
 * the ranks in that order); NULL or "": every one of n_tasks a worker. The counts must add up
 * to n_tasks. */
typedef struct {
    int n;
    char name[DT_RESOLVER_MAX_JOBS][16];
    int count[DT_RESOLVER_MAX_JOBS];
} dt_resolver_jobs;
dt_status dt_resolver_parse_jobs(const char *spec, int n_tasks, dt_resolver_jobs *out);

/* A non-negative integer from variable `name` of env; DT_ERR_INVALID naming it when it is not
 * one, DT_END when it is not set. */
dt_status dt_resolver_env_int(dt_getenv_fn env, const char *name, long long max, long long *out);

/* TF_CONFIG of tasks addrs[0..n) (as "host:port") given to jobs in order, this task the one at
 * `rank`; "environment": "cloud" when cloud. malloc'd, or NULL without memory. */
char *dt_resolver_tf_config(const dt_resolver_jobs *jobs, char (*addrs)[DT_HOST_CAP + 8],
                            int rank, bool cloud);

#endif
