/* Parameter-server tasks (`--strategy parameter_server`, TF_CONFIG with "ps" tasks).
 *
 * dt_ps_server_run is a ps task's whole life: it listens on its TF_CONFIG address, admits only
 * the chief and the workers of its cluster (the cluster secret's handshake), holds the shards of
 * the tables the coordinator defines on it (rows split by TensorFlow's partitioners, partition.h)
 * with their optimizer slots, answers pulls with rows and applies pushed row gradients itself,
 * and returns when the coordinator sends STOP, or with an error naming the coordinator when no
 * chief has been connected for coordinator_timeout seconds. */
#ifndef DTRAIN_PS_H
#define DTRAIN_PS_H

/* Tables a model may have on the parameter server (a feature-spec model has a few per column). */
#define DT_PS_MAX_TABLES 512

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/partition.h"
#include "dtrain/status.h"

/* How the workers of --strategy parameter_server see each other's updates. */
typedef enum { DT_PS_ASYNC = 0, DT_PS_SSP, DT_PS_HYBRID } dt_ps_mode;

typedef struct {
    dt_ps_mode mode;            /* async (TensorFlow's) */
    int staleness;              /* ssp:S */
    int steps_per_execution;    /* steps per function the coordinator schedules (1) */
    double coordinator_timeout; /* workers and ps: seconds without the coordinator (120) */
    double worker_timeout;      /* the coordinator: seconds a scheduled function may take (300) */
    double heartbeat_timeout;   /* the coordinator: seconds of a worker's silence (its host gone,
                                   its network cut) before it counts as lost (10) */
    double snapshot_secs;       /* ps tasks with --model-dir: seconds between snapshots (30) */
    double recovery_timeout;    /* workers and coordinator: seconds to wait for a lost ps to be
                                   back (restarted, its shards restored) (60) */
    double ps_timeout;          /* workers and coordinator: seconds a ps task may take over a
                                   pull, a push or a ping before it counts as lost (60); a
                                   save or a restore has its own, longer deadline */
    bool partitioner_given;     /* else one shard per ps task (fixed:P) */
    dt_partitioner partitioner;
    dt_partition_strategy partition_strategy; /* div */
    /* A sparse cluster (TFJob's enableDynamicWorker) does not tell its worker count: with
     * num_workers > 0 worker i reads shard i of num_workers of the data, with 0 every worker
     * reads all of the data it is given (its own files, as TF 1.x's input_fn). */
    int num_workers;
} dt_ps_options;

DT_API void dt_ps_options_default(dt_ps_options *o);
/* "async" | "ssp:S" | "hybrid" into o's mode and staleness; DT_ERR_INVALID quoting the text. */
DT_API dt_status dt_ps_mode_parse(const char *text, dt_ps_options *o);
/* The ranges of o's fields, each error naming the field first ("worker_timeout: ..."). */
DT_API dt_status dt_ps_options_check(const dt_ps_options *o);

typedef struct {
    const char *task;           /* "ps:0" overrides TF_CONFIG's task; NULL: TF_CONFIG's */
    const char *secret_file;    /* NULL: env DTRAIN_CLUSTER_SECRET, else none */
    bool insecure;              /* allow the cluster to run without a secret */
    double coordinator_timeout; /* seconds without a connected chief before giving up (120) */
    double request_timeout;     /* seconds a started request has to arrive whole (60) */
    int threads;                /* for the row-wise updates (1) */
    /* Snapshots: with a directory, the task's shards go to DIR/ps-<index>.snapshot every
     * snapshot_secs seconds (0: never; 30), a task started again restores them from there
     * (the updates after the snapshot are lost, and said), and a job that ends removes it. */
    const char *snapshot_dir;
    double snapshot_secs;
    /* The job the snapshots belong to: a snapshot is restored only by a task of the job that
     * wrote it. job_id (at most 64 bytes; NULL: env DTRAIN_JOB_ID) names the job, job_nonce (32
     * hex digits; NULL: env DTRAIN_JOB_NONCE) tells apart runs under one name; dtrain launch
     * gives every task of a job both. With neither, the task makes a nonce of its own: its
     * snapshots are then never restored (a task started again cannot tell its job's from
     * another's), which it says when snapshots are on. */
    const char *job_id;
    const char *job_nonce;
    /* The job's model directory: the chief's SAVE writes this task's checkpoint files into it
     * (or a directory within it, symbolic links resolved) and nowhere else; a SAVE naming any
     * other directory gets an ERROR naming it. NULL: every SAVE is refused. */
    const char *model_dir;
} dt_ps_server_config;

typedef struct {
    char task[300];             /* "ps:0 (127.0.0.1:4003)" */
    uint64_t requests;          /* answered */
    uint64_t rows_pulled, rows_pushed;
    int snapshots;              /* written */
} dt_ps_server_report;

DT_API void dt_ps_server_config_default(dt_ps_server_config *c);
/* The ranges of c's fields, each error naming the field first; dt_ps_server_run checks. */
DT_API dt_status dt_ps_server_config_check(const dt_ps_server_config *c);

/* Serves until STOP (DT_OK) or the coordinator timeout (DT_ERR_TIMEOUT); errors in the cluster
 * (not a ps task, no chief) are DT_ERR_INVALID naming TF_CONFIG's field. report may be NULL. */
DT_API dt_status dt_ps_server_run(const dt_ps_server_config *c, dt_ps_server_report *report);

#endif
