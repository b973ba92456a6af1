/* The cluster: who the tasks are, from TF_CONFIG, with TensorFlow's semantics.
 *
 * TF_CONFIG is JSON: {"cluster": {JOB: ["host:port", ...], ...}, "task": {"type": T, "index": I},
 * "rpc_layer": "grpc"}. Jobs are chief, worker, ps and evaluator. No TF_CONFIG, or one without a
 * cluster, is a single local task (a worker of rank 0 in a one-task cluster). The chief is the
 * `chief` task, or worker 0 when there is no chief job. Training ranks: chief = 0, worker i =
 * i + number of chiefs; ps and evaluator tasks have no rank. The evaluator stands outside the
 * training cluster: it is chief of its own one-task cluster.
 *
 * Every invalid config is one DT_ERR_INVALID naming the field: "TF_CONFIG: cluster.worker[1]:
 * 'host' is not host:port". */
#ifndef DTRAIN_CLUSTER_H
#define DTRAIN_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/status.h"

typedef enum { DT_JOB_CHIEF, DT_JOB_WORKER, DT_JOB_PS, DT_JOB_EVALUATOR, DT_JOB_COUNT } dt_job;

#define DT_HOST_CAP 256

typedef struct {
    char host[DT_HOST_CAP]; /* a name, an IPv4 address, or an IPv6 address without brackets */
    uint16_t port;
} dt_addr;

typedef struct {
    bool has_cluster;         /* false: no TF_CONFIG or no cluster in it (single local task) */
    int n_tasks[DT_JOB_COUNT];
    dt_addr *tasks[DT_JOB_COUNT]; /* n_tasks[job] addresses each, in index order */
    dt_job task_type;
    int task_index;
    bool is_chief;
    int rank;       /* this task's training rank, -1 for ps and evaluator */
    int n_workers;  /* training ranks: chiefs + workers (1 for a local task or the evaluator) */
    uint64_t id;    /* a hash of the cluster's jobs and addresses: tasks of another cluster differ */
    bool chief_named_master; /* TF_CONFIG called the chief "master" (TF 1.x, SageMaker) */
    /* TFJob's "sparseCluster" (enableDynamicWorker): a worker knows the ps tasks and itself, a
     * ps task itself; the others' addresses are empty (dt_cluster_known). Its workers train
     * between-graph, as TF 1.x did: each on its own against the ps tasks, worker 0 (is_chief)
     * defining the variables, writing the checkpoints and ending the job; n_workers is not
     * known (task_index + 1 here). */
    bool sparse;
} dt_cluster;

/* A sparse cluster's task indices are below this. */
#define DT_SPARSE_MAX_TASKS 256

DT_API const char *dt_job_name(dt_job job);
/* Whether c holds an address for task job:index (a sparse cluster holds only some). */
DT_API bool dt_cluster_known(const dt_cluster *c, dt_job job, int index);
/* "chief", "worker", "ps", "evaluator" -> job; DT_ERR_INVALID otherwise. */
DT_API dt_status dt_job_parse(const char *s, dt_job *job);

/* Parses TF_CONFIG's text (json may be NULL or "": a single local task). */
DT_API dt_status dt_cluster_parse(const char *json, dt_cluster *out);
/* From the environment: TF_CONFIG, or the cluster the resolver DTRAIN_CLUSTER_RESOLVER names
 * (auto when unset: TF_CONFIG when set, else a detected platform; see dt_cluster_resolve). */
DT_API dt_status dt_cluster_from_env(dt_cluster *out);

/* ---- Cluster resolvers: the cluster a platform describes, as TF's resolvers read it ----
 *   tf_config  TF_CONFIG (Kubeflow's TFJob, an Indexed Job's entry script, dtrain launch);
 *   sagemaker  /opt/ml/input/config/resourceconfig.json and hyperparameters.json (or SM_HOSTS,
 *              SM_CURRENT_HOST, SM_HPS): the master on the first host, workers on the others, a
 *              ps on every host with the ps distribution (DTRAIN_SAGEMAKER_PS=1: this is one);
 *   slurm      SLURM_PROCID, SLURM_STEP_NODELIST (compressed: node[01-04,07]),
 *              SLURM_STEP_TASKS_PER_NODE ("2(x2)"), ports from DTRAIN_PORT_BASE (8888), the jobs
 *              of DTRAIN_JOBS ("worker:4,ps:2", sorted by name) as SlurmClusterResolver gives them;
 *   mpi        mpirun's rank and size on one host (OMPI_COMM_WORLD_*, PMI_*), the same jobs.
 * auto detects slurm (an srun step's variables) and sagemaker (SM_CURRENT_HOST or the resource
 * config); mpi is taken only by name. */
typedef enum {
    DT_RESOLVER_AUTO = 0,
    DT_RESOLVER_TF_CONFIG,
    DT_RESOLVER_SAGEMAKER,
    DT_RESOLVER_SLURM,
    DT_RESOLVER_MPI,
    DT_RESOLVER_COUNT
} dt_resolver;
typedef const char *(*dt_getenv_fn)(const char *name);
DT_API const char *dt_resolver_name(dt_resolver r);
/* "auto", "tf_config", "sagemaker", "slurm", "mpi". */
DT_API dt_status dt_resolver_parse(const char *s, dt_resolver *out);
/* This task's TF_CONFIG as resolver r reads env (NULL: the process's environment): malloc'd text,
 * or NULL for a single local task (tf_config without TF_CONFIG); *used (may be NULL) the resolver
 * taken. DT_ERR_INVALID naming the variable or file at fault. */
DT_API dt_status dt_cluster_resolve(dt_resolver r, dt_getenv_fn env, char **tf_config,
                                    dt_resolver *used);
/* Accepts a zeroed or half-built cluster. */
DT_API void dt_cluster_free(dt_cluster *c);

/* Makes this process the task "TYPE:INDEX" of the parsed cluster (a --task flag overriding
 * TF_CONFIG's task), recomputing rank and chief. DT_ERR_INVALID naming the flag: no cluster, a
 * malformed task, an unknown job, an index out of range. */
DT_API dt_status dt_cluster_set_task(dt_cluster *c, const char *task);

/* The task of a training rank (0 .. n_workers - 1). */
DT_API void dt_cluster_rank_task(const dt_cluster *c, int rank, dt_job *job, int *index);
/* The training rank of task job:index (0 .. n_workers - 1), or -1: a ps or evaluator task, or
 * no such task. */
DT_API int dt_cluster_rank_of(const dt_cluster *c, dt_job job, int index);

/* The cluster of c's workers alone, worker i at its own host and ports[i]: the ring over which
 * the workers of hybrid parameter-server training all-reduce, beside the ports TF_CONFIG gives
 * them. This task (a worker of c) is the same task there; the ring's id is derived from c's, so
 * every worker derives the same one and no other cluster has it. Free out with dt_cluster_free. */
DT_API dt_status dt_cluster_workers_ring(const dt_cluster *c, const uint16_t *ports,
                                         dt_cluster *out);

/* A task's name for messages: "ps:1 (127.0.0.1:4003)"; "(?:0)" for an address the cluster does
 * not have. */
DT_API void dt_cluster_task_name(const dt_cluster *c, dt_job job, int index, char *out, size_t cap);

/* The address of a task; NULL when the cluster has no such task. */
DT_API const dt_addr *dt_cluster_addr(const dt_cluster *c, dt_job job, int index);
/* The address a's host resolves to (IPv4 first), as text into ip; DT_ERR_UNAVAILABLE naming the
 * host when it does not resolve (yet: a Kubernetes pod's name appears once the pod is ready). */
DT_API dt_status dt_addr_resolve(const dt_addr *a, char *ip, size_t cap);
/* True when every address of the cluster is a loopback one (localhost, 127.0.0.0/8, ::1). */
DT_API bool dt_cluster_all_loopback(const dt_cluster *c);

/* The TF_CONFIG of task job:index of c, compact JSON, the inverse of dt_cluster_parse:
 * {"cluster": {"chief": [...], "worker": [...], "ps": [...]}, "task": {"type", "index"}}, the
 * jobs in that order and without the evaluator, which TF lists apart. malloc'd; NULL without
 * memory. What dtrain launch gives each task, and what tests and scripts ask it for. */
DT_API char *dt_cluster_tf_config(const dt_cluster *c, dt_job job, int index);

/* A cluster of n[job] tasks on host (at most one chief), every task but the evaluator at the
 * next of ports in job order (chief, worker, ps), this task its chief (worker 0 without one). */
DT_API dt_status dt_cluster_local(const int n[DT_JOB_COUNT], const char *host,
                                  const uint16_t *ports, dt_cluster *out);

/* The key of the cluster secret every task of a cluster shares: the contents of secret_file if
 * given (a trailing newline dropped, 16..4096 bytes; a file that its group or others may read or
 * write is refused, naming its mode), else env DTRAIN_CLUSTER_SECRET, else none (*secret NULL).
 * A secret of 32 bytes or more is its own key; a shorter one is stretched into a 32-byte key
 * (PBKDF2-HMAC-SHA256, 100,000 rounds, a fixed salt: about 50 ms), so a weak secret costs an
 * offline guesser that much per guess. *secret is malloc'd: free() it. Errors name the file or
 * the variable. */
DT_API dt_status dt_cluster_load_secret(const char *secret_file, uint8_t **secret,
                                        size_t *secret_len);

/* Whether a task of c may run with or without a secret: DT_ERR_AUTH, naming --insecure, when c
 * has more than one task that connects to others (chief, worker, ps) and there is no secret,
 * unless insecure: without a secret anyone who reaches a task's port joins the cluster, on
 * loopback any local user. */
DT_API dt_status dt_cluster_check_secret(const dt_cluster *c, bool have_secret, bool insecure);

/* A fresh cluster secret for tasks that share no other: 32 bytes from the kernel's random
 * source as 64 lowercase hex digits and a NUL (what dtrain launch gives its tasks as
 * DTRAIN_CLUSTER_SECRET, and the handshake then proves knowledge of). */
DT_API dt_status dt_cluster_make_secret(char out[65]);

/* Parses "host:port" or "[v6addr]:port" into a; DT_ERR_INVALID "'s' is not host:port" otherwise
 * (an empty host, a port outside 1..65535 or not a number). */
DT_API dt_status dt_addr_parse(const char *s, dt_addr *a);

#endif
