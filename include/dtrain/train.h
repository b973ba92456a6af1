/* Training as `dtrain train` does it, from one call: the cluster this process belongs to (TF_CONFIG
 * or mpirun), the strategy, the input pipeline, the model and the optimizer, fit, and the final
 * evaluation. The command parses flags into a dt_train_config and prints the report; a C program
 * fills the same config and gets the same training.
 *
 *  - An evaluator task of a TF_CONFIG cluster runs the sidecar evaluator over fit.model_dir
 *    (evaluator.h) instead of training.
 *  - A cluster with ps tasks trains with parameter_server (src/train/ps_train.h): the chief
 *    coordinates, the workers compute, the ps tasks serve the variables (dt_ps_server_run);
 *    other strategies refuse such a cluster. Asynchronous updates only, so far.
 *  - With no strategy named, a cluster of several workers (TF_CONFIG, or the mpi backend) trains
 *    with multi_worker_mirrored, as TensorFlow does; otherwise one_device.
 *  - Workers and replicas on one machine share out its cores when threads is 0; when they have a
 *    thread on every core, the input runs on each worker's own thread unless prefetch_given.
 *  - Only the chief (worker 0) prints (fit.progress, fit.log, out), evaluates and reports. */
#ifndef DTRAIN_TRAIN_H
#define DTRAIN_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/api.h"
#include "dtrain/keymap.h"
#include "dtrain/comm.h"
#include "dtrain/comm_open.h"
#include "dtrain/fit.h"
#include "dtrain/input.h"
#include "dtrain/model_spec.h"
#include "dtrain/optim.h"
#include "dtrain/ps.h"

typedef struct {
    const char *model;        /* a built-in model (mnist_cnn, mlp), when model_file is NULL */
    const char *model_file;   /* a model described in JSON */
    /* A feature spec (features.h): the model and its columns over raw csv, criteo or tfrecord
     * data, instead of model and model_file. */
    const char *feature_spec;
    /* The CTR models' sizes, for model lr, fm or deepfm; their data is field-positional. */
    dt_ctr_spec ctr;
    int64_t hash_buckets;     /* > 0: ids hashed into this many rows (ctr.feature_size's) */
    bool no_fuse;             /* the generic kernels only */
    const char *data;         /* the training data, a spec of input.h */
    const char *test_data;    /* a spec, "none", or NULL: the t10k half beside directory data */
    /* The pipelines' options; their batch size, seed, shuffle buffer, prefetch and remainder are
     * fit's, copied in. */
    dt_input_options input;
    bool prefetch_given;      /* fit.prefetch was chosen: kept when the workers take every core */
    dt_optim_config optim;
    const char *strategy;     /* a strategy's name; NULL: chosen as above */
    int replicas;             /* mirrored, central_storage: 0 for one per core */
    dt_comm_options comm;     /* multi_worker_mirrored: how to join the cluster (parameter_server:
                                 its task, secret and connect timeout) */
    dt_ps_options ps;         /* parameter_server */
    dt_wire_dtype wire;       /* gradients on the wire */
    size_t bucket_bytes;      /* gradient buckets during backward; 0: one all-reduce after it */
    int threads;              /* intra-op threads; 0: every core, shared out */
    dt_fit_config fit;        /* the global batch, epochs, checkpoints, evaluation, output */
    bool summary;             /* the model's layers on out */
    FILE *out;                /* the strategy's line and the summary; NULL: none */
} dt_train_config;

/* A built-in mnist_cnn on fashion-mnist, fit's and the input's defaults, Keras's SGD, tcp. */
DT_API void dt_train_config_default(dt_train_config *c);

/* Every field's range, as dt_train checks before it starts: fit's, the input's (with fit's
 * batching in place), the optimizer's, the CTR sizes', the communicator's and the parameter
 * server's, then its own. An error names the field by its path from c, first:
 * "fit.batch_size: must be in 1..1048576, got 0", "ps.worker_timeout: ...". */
DT_API dt_status dt_train_config_check(const dt_train_config *c);

typedef struct {
    bool chief;               /* this process reported for the cluster; the rest is the chief's */
    bool evaluator;           /* this task ran the sidecar evaluator instead of training */
    bool ps_task;             /* this task served as a ps task; ps holds what it did */
    dt_ps_server_report ps;
    bool ps_worker;           /* this task was a parameter-server worker: */
    struct {
        char task[300];       /* "worker:0 (127.0.0.1:4001)" */
        int64_t steps, samples;
        double pull_p50_ms, pull_p99_ms; /* a step's pull round: rows and dense variables */
        uint64_t bytes_sent, bytes_received; /* to and from the ps tasks */
    } worker;
    dt_fit_result fit;
    bool have_test;           /* test_* hold the whole test set's figures after training */
    double test_loss, test_accuracy;
    double test_auc, test_logloss; /* a binary model's (CTR models); NaN otherwise */
    int threads;              /* intra-op threads of each replica */
    int workers;              /* replicas in sync */
    int prefetch;             /* batches prepared ahead on a thread */
    char strategy[32];
    char model[64];
    int64_t bad_records;      /* skipped input records (skip_bad_records) */
    size_t param_count;
    uint32_t param_checksum;  /* CRC32C of the parameters */
    bool dynamic;             /* the model's tables are dynamic: */
    dt_keymap_stats dynamic_stats; /* their keys and memory at the end */
} dt_train_report;

/* Trains as configured, after dt_train_config_check. Errors name the field (as its check does),
 * the file or the peer, as the layers below report them. */
DT_API dt_status dt_train(const dt_train_config *c, dt_train_report *out);

#endif
