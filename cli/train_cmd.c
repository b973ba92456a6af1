/* dtrain train: parses the flags into a dt_train_config (train.h), calls dt_train, and prints the
 * chief's report and --metrics-out. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "comm_open.h"
#include "../src/core/clock.h"
#include "../src/core/fileio.h"
#include "dtrain/process.h"
#include "dtrain/input.h"
#include "dtrain/optim.h"
#include "../src/train/progress.h"
#include "dtrain/strategy.h"
#include "dtrain/train.h"
#include "flags.h"

struct train_opts {
    const char *model, *model_file, *feature_spec, *data, *test_data, *optimizer, *lr_schedule, *strategy;
    const char *metrics_out, *shuffle_buffer, *progress, *loss_reduction, *gradient_wire;
    const char *features, *label_key, *input_shape, *compression, *cache, *label_column;
    const char *auto_shard, *ids_key, *values_key, *numeric_columns, *categorical_columns;
    bool log1p_numeric;
    /* CTR models */
    int field_size, embedding_size;
    int64_t feature_size, hash_buckets;
    const char *deep_layers, *dropout_keep, *table_optimizer;
    double l2_reg, table_lr, ftrl_l1, ftrl_l2, bn_decay;
    bool batch_norm;
    int prefetch, num_parallel_reads, num_parallel_calls, num_features, index_base, replicas;
    int early_stopping_patience;
    double early_stopping_min_delta;
    bool skip_bad_records, csv_header;
    int epochs, batch_size, threads;
    int64_t steps_per_epoch, max_steps, lr_decay_steps, seed, log_step_count_steps;
    int64_t eval_every_steps, eval_steps, save_checkpoints_steps, save_summary_steps;
    const char *model_dir, *backup_dir, *backup_freq, *restore_checkpoint;
    double save_checkpoints_secs, keep_checkpoint_every_n_hours;
    int keep_checkpoint_max;
    double eval_throttle_secs, eval_start_delay_secs;
    double lr, momentum, beta1, beta2, epsilon, lr_decay_rate, lr_alpha, bucket_mb;
    bool nesterov, keep_remainder, validate, summary, no_fuse, help;
    cli_comm_flags comm;
    /* parameter_server */
    const char *ps_mode, *partitioner, *partition_strategy;
    int steps_per_execution;
    double coordinator_timeout, worker_timeout, heartbeat_timeout, ps_snapshot_secs;
    double ps_recovery_timeout;
};

static int define_flags(flag_def *f, int cap, struct train_opts *o)
{
    flag_table t = {f, 0, cap};
#define FLAG(name_, kind_, def_, help_, dst_) flags_add(&t, (flag_def){name_, kind_, def_, help_, dst_, false})
    FLAG("model", FLAG_STRING, "mnist_cnn", "built-in model: mnist_cnn, mlp, or a CTR model: lr "
         "(logistic regression), fm (factorization machine), deepfm", &o->model);
    FLAG("field-size", FLAG_INT, "39", "CTR models: fields per example; libsvm data is then "
         "field-positional, `label id:value` x F, ids 0-based", &o->field_size);
    FLAG("feature-size", FLAG_INT64, "0", "CTR models: distinct feature ids, the tables' rows",
         &o->feature_size);
    FLAG("hash-buckets", FLAG_INT64, "0", "CTR models: hash each raw id with its field into this "
         "many rows (as categorical_column_with_hash_bucket; no vocabulary pass)",
         &o->hash_buckets);
    FLAG("embedding-size", FLAG_INT, "32", "fm, deepfm: K, the factors per feature",
         &o->embedding_size);
    FLAG("deep-layers", FLAG_STRING, "128,64,32", "deepfm: units of the MLP's layers",
         &o->deep_layers);
    FLAG("dropout-keep", FLAG_STRING, "0.5", "deepfm: KEEP probability after each deep layer, "
         "as the DeepFM sample (1: no dropout); one value, or one per layer", &o->dropout_keep);
    FLAG("batch-norm", FLAG_BOOL, "false", "deepfm: batch normalisation after each deep layer's "
         "ReLU, before its dropout, as the DeepFM sample's batch_norm", &o->batch_norm);
    FLAG("batch-norm-decay", FLAG_FLOAT, "0.9", "deepfm: the moving averages' decay (the "
         "sample's 0.9; Keras's momentum)", &o->bn_decay);
    FLAG("l2-reg", FLAG_FLOAT, "0", "CTR models: L2 on the table rows each step touches (adds "
         "l2-reg x row to their gradient)", &o->l2_reg);
    FLAG("table-optimizer", FLAG_STRING, NULL, "CTR models: the tables' row-wise rule: sgd, "
         "adagrad, adam (lazy: only touched rows' moments move), ftrl (default: --optimizer's)",
         &o->table_optimizer);
    FLAG("table-lr", FLAG_FLOAT, "0", "CTR models: the tables' learning rate (0: --lr)",
         &o->table_lr);
    FLAG("ftrl-l1", FLAG_FLOAT, "0", "--table-optimizer ftrl: l1 regularisation", &o->ftrl_l1);
    FLAG("ftrl-l2", FLAG_FLOAT, "0", "--table-optimizer ftrl: l2 regularisation", &o->ftrl_l2);
    FLAG("model-file", FLAG_STRING, NULL, "model described in a JSON file (instead of --model)",
         &o->model_file);
    FLAG("feature-spec", FLAG_STRING, NULL, "columns and model in TF feature-column JSON "
         "(docs/FEATURES.md) over raw csv:, criteo: or tfrecord: data (instead of --model)",
         &o->feature_spec);
    FLAG("data", FLAG_STRING, "fashion-mnist",
         "training data: fashion-mnist[:DIR], mnist:DIR, idx:IMAGES,LABELS, tfrecord:GLOB, "
         "libsvm:GLOB, csv:GLOB (GLOB: comma-separated patterns; - is stdin)", &o->data);
    FLAG("test-data", FLAG_STRING, NULL,
         "test data, same forms, or none (default: the t10k files beside fashion-mnist/mnist data)",
         &o->test_data);
    FLAG("features", FLAG_STRING, NULL,
         "tfrecord: the Example features to read, KEY:LENGTH[:SCALE[:DEFAULT]],... (LENGTH 0: "
         "variable length, sparse), e.g. image:784:1/255", &o->features);
    FLAG("label-key", FLAG_STRING, "label", "tfrecord: the feature holding the label", &o->label_key);
    FLAG("ids-key", FLAG_STRING, "ids", "tfrecord, CTR models: the int64 feature ids",
         &o->ids_key);
    FLAG("values-key", FLAG_STRING, "values", "tfrecord, CTR models: the float feature values",
         &o->values_key);
    FLAG("numeric-columns", FLAG_STRING, NULL, "tfrecord or csv, CTR models: columns holding "
         "one number each, fields 0.. (e.g. I1,I2,...,I13)", &o->numeric_columns);
    FLAG("categorical-columns", FLAG_STRING, NULL, "tfrecord or csv, CTR models: columns "
         "holding one category each (int64 or bytes), hashed into --hash-buckets rows after the "
         "numeric fields' (e.g. C1,...,C26)", &o->categorical_columns);
    FLAG("log1p-numeric", FLAG_BOOL, "false", "CTR columns: numeric values as log(1 + max(x, "
         "0)), Criteo's usual preprocessing", &o->log1p_numeric);
    FLAG("compression", FLAG_STRING, "auto", "tfrecord: none, gzip, zlib or auto (gzip by magic)",
         &o->compression);
    FLAG("num-features", FLAG_INT, "0", "libsvm: dense features per example (indices 1..N)",
         &o->num_features);
    FLAG("index-base", FLAG_INT, "1", "libsvm: the first feature index", &o->index_base);
    FLAG("csv-header", FLAG_BOOL, "false", "csv: the first line names the columns", &o->csv_header);
    FLAG("label-column", FLAG_STRING, NULL, "csv: the label's column, by name or 0-based index",
         &o->label_column);
    FLAG("input-shape", FLAG_STRING, NULL,
         "H,W,C of the model's input for file data (default: 1,1,features)", &o->input_shape);
    FLAG("auto-shard", FLAG_STRING, "data", "file data over several workers: data (each keeps "
         "every n-th example), file (whole files each; data when there are fewer files than "
         "workers), auto (file when there are enough files, else data, as tf.data's AUTO), or "
         "off (every worker reads everything)", &o->auto_shard);
    FLAG("num-parallel-reads", FLAG_INT, "1", "files read in turn (interleave)",
         &o->num_parallel_reads);
    FLAG("num-parallel-calls", FLAG_INT, "1", "batches parsed at once on threads",
         &o->num_parallel_calls);
    FLAG("cache", FLAG_STRING, NULL, "cache file data after the first epoch: memory or a file path",
         &o->cache);
    FLAG("prefetch", FLAG_INT, "2", "batches prepared ahead on a background thread (0: none; "
         "0 too when this machine's workers have a thread on every core)", &o->prefetch);
    FLAG("skip-bad-records", FLAG_BOOL, "false",
         "skip and count corrupt records or lines instead of stopping", &o->skip_bad_records);
    FLAG("epochs", FLAG_INT, "1", "passes over the training data (with --max-steps and no "
         "--epochs: as many as the steps take)", &o->epochs);
    FLAG("steps-per-epoch", FLAG_INT64, "0", "steps per epoch, 0 for the whole dataset",
         &o->steps_per_epoch);
    FLAG("max-steps", FLAG_INT64, "0", "stop after this many steps in all, 0 for no limit",
         &o->max_steps);
    FLAG("batch-size", FLAG_INT, "64", "global batch size", &o->batch_size);
    FLAG("keep-remainder", FLAG_BOOL, "false",
         "also train on each epoch's last partial batch (default: drop it, as the tutorial)",
         &o->keep_remainder);
    FLAG("loss-reduction", FLAG_STRING, "mean",
         "mean (over the batch) or sum_over_global_batch (sum x 1/--batch-size, the tutorial's)",
         &o->loss_reduction);
    FLAG("shuffle-buffer", FLAG_STRING, "all",
         "tf.data shuffle buffer in examples; 0 keeps file order, all shuffles fully",
         &o->shuffle_buffer);
    FLAG("optimizer", FLAG_STRING, "sgd", "sgd, momentum, adam, adagrad", &o->optimizer);
    FLAG("lr", FLAG_FLOAT, NULL,
         "learning rate (default: Keras's for the optimizer: sgd and momentum 0.01, adam and "
         "adagrad 0.001)", &o->lr);
    FLAG("momentum", FLAG_FLOAT, "0.9", "momentum of --optimizer momentum", &o->momentum);
    FLAG("nesterov", FLAG_BOOL, "false", "Nesterov momentum", &o->nesterov);
    FLAG("beta1", FLAG_FLOAT, "0.9", "Adam's beta_1", &o->beta1);
    FLAG("beta2", FLAG_FLOAT, "0.999", "Adam's beta_2", &o->beta2);
    FLAG("epsilon", FLAG_FLOAT, "1e-7", "Adam's and Adagrad's epsilon", &o->epsilon);
    FLAG("lr-schedule", FLAG_STRING, "constant", "constant, step (staircase exponential decay), "
         "cosine", &o->lr_schedule);
    FLAG("lr-decay-steps", FLAG_INT64, "0", "steps per decay (step) or to the floor (cosine)",
         &o->lr_decay_steps);
    FLAG("lr-decay-rate", FLAG_FLOAT, "0.5", "factor per decay of the step schedule",
         &o->lr_decay_rate);
    FLAG("lr-alpha", FLAG_FLOAT, "0", "floor of the cosine schedule as a fraction of --lr",
         &o->lr_alpha);
    FLAG("threads", FLAG_INT, NULL, "threads for intra-op parallelism (default: all cores, "
         "shared out among the replicas, or the workers on this machine)",
         &o->threads);
    FLAG("seed", FLAG_INT64, "1", "seed of initial weights, shuffling and dropout", &o->seed);
    FLAG("strategy", FLAG_STRING, "one_device",
         "distribution strategy: one_device; mirrored (--replicas copies of the model on threads "
         "of this process); central_storage (replicas on threads sharing one copy of the "
         "variables); multi_worker_mirrored (the default when TF_CONFIG names a cluster of "
         "several workers); parameter_server (the default when TF_CONFIG names ps tasks: "
         "variables on ps tasks, steps scheduled on workers by the chief)", &o->strategy);
    FLAG("ps-mode", FLAG_STRING, "async", "parameter_server: how workers see each other's "
         "updates: async (TensorFlow's), or ssp:S (bounded staleness: a worker at step c of its "
         "own sees every update of steps <= c - S - 1 of every worker; ssp:0 is lockstep), or "
         "hybrid (tables on the ps tasks, dense variables all-reduced among the workers, "
         "synchronously)",
         &o->ps_mode);
    FLAG("steps-per-execution", FLAG_INT, "1", "parameter_server: steps per function the "
         "coordinator schedules on a worker", &o->steps_per_execution);
    FLAG("partitioner", FLAG_STRING, NULL, "parameter_server: tables' shards, fixed:N, "
         "min_size:BYTES[:MAX_SHARDS] or max_size:BYTES[:MAX_SHARDS] as TensorFlow's "
         "partitioners (default: one shard per ps task)", &o->partitioner);
    FLAG("partition-strategy", FLAG_STRING, "div", "parameter_server: rows over a table's shards, "
         "div (contiguous ranges) or mod (id % shards)", &o->partition_strategy);
    FLAG("coordinator-timeout", FLAG_FLOAT, "120", "parameter_server workers and ps: seconds "
         "without the coordinator (the chief) before giving up", &o->coordinator_timeout);
    FLAG("worker-timeout", FLAG_FLOAT, "300", "parameter_server coordinator: seconds a worker may "
         "take over one scheduled function", &o->worker_timeout);
    FLAG("heartbeat-timeout", FLAG_FLOAT, "10", "parameter_server coordinator: seconds of "
         "silence (ZeroMQ heartbeats unanswered) after which a worker counts as lost: its "
         "function goes to the other workers, and it may rejoin; a closed connection counts at "
         "once", &o->heartbeat_timeout);
    FLAG("ps-snapshot-secs", FLAG_FLOAT, "30", "parameter_server ps tasks with --model-dir: "
         "seconds between snapshots of their shards (in --model-dir/ps; 0: none), which a ps "
         "task started again restores", &o->ps_snapshot_secs);
    FLAG("ps-recovery-timeout", FLAG_FLOAT, "60", "parameter_server: seconds the workers and "
         "the coordinator wait for a lost ps task to be back before the job fails",
         &o->ps_recovery_timeout);
    FLAG("gradient-wire", FLAG_STRING, "f32", "multi-worker: gradients on the wire as f32, or "
         "compressed to bf16 or fp16 (as DDP's compression hooks; summed in float32)",
         &o->gradient_wire);
    FLAG("bucket-mb", FLAG_FLOAT, "0", "multi-worker: MiB of gradients per all-reduce, issued on "
         "a communication thread during backward as each bucket completes (the first at most "
         "1 MiB), which pays when the network rather than the CPU is the bottleneck; 0: one "
         "all-reduce after backward", &o->bucket_mb);
    FLAG("replicas", FLAG_INT, NULL, "mirrored, central_storage: replicas, each on its own "
         "threads (default: one per core)", &o->replicas);
    FLAG("validate", FLAG_BOOL, "false", "evaluate on the test data at each epoch end",
         &o->validate);
    FLAG("early-stopping-patience", FLAG_INT, "0", "stop when the loss (val_loss with --validate) "
         "has not improved for this many epochs; 0: never", &o->early_stopping_patience);
    FLAG("early-stopping-min-delta", FLAG_FLOAT, "0", "the least fall of the loss that counts as "
         "an improvement", &o->early_stopping_min_delta);
    FLAG("progress", FLAG_STRING, "auto",
         "auto (a bar on a terminal, a line per epoch otherwise), bar, lines, none, or estimator "
         "(Estimator's `loss = ..., step = N (T sec)` and `global_step/sec` lines)", &o->progress);
    FLAG("log-step-count-steps", FLAG_INT64, "100", "--progress estimator: steps between log lines",
         &o->log_step_count_steps);
    FLAG("eval-every-steps", FLAG_INT64, "0", "train_and_evaluate: evaluate on the test data "
         "every this many steps and after the last, printing Estimator's `Saving dict for global "
         "step N: ...` line; 0: not by steps", &o->eval_every_steps);
    FLAG("eval-throttle-secs", FLAG_FLOAT, "0", "train_and_evaluate: evaluate when this many "
         "seconds have passed since the last evaluation (Estimator's throttle_secs), and after "
         "the last step; 0: not by time", &o->eval_throttle_secs);
    FLAG("eval-start-delay-secs", FLAG_FLOAT, "0", "train_and_evaluate: no evaluation before "
         "this many seconds of training", &o->eval_start_delay_secs);
    FLAG("eval-steps", FLAG_INT64, "0", "train_and_evaluate: batches per evaluation (0: the "
         "whole test data)", &o->eval_steps);
    FLAG("model-dir", FLAG_STRING, NULL, "checkpoints (ckpt-N.safetensors) and TensorBoard "
         "summaries go here, and training resumes from its latest checkpoint", &o->model_dir);
    FLAG("save-checkpoints-steps", FLAG_INT64, "0", "--model-dir: a checkpoint every this many "
         "steps (0: by --save-checkpoints-secs)", &o->save_checkpoints_steps);
    FLAG("save-checkpoints-secs", FLAG_FLOAT, "600", "--model-dir: a checkpoint every this many "
         "seconds, and one after the last step", &o->save_checkpoints_secs);
    FLAG("keep-checkpoint-max", FLAG_INT, "5", "--model-dir: checkpoints kept (0: all)",
         &o->keep_checkpoint_max);
    FLAG("keep-checkpoint-every-n-hours", FLAG_FLOAT, "0", "--model-dir: besides those, keep one "
         "checkpoint for good per this many hours (0: none)", &o->keep_checkpoint_every_n_hours);
    FLAG("save-summary-steps", FLAG_INT64, "100", "--model-dir: TensorBoard scalars every this "
         "many steps (0: none)", &o->save_summary_steps);
    FLAG("restore-checkpoint", FLAG_STRING, NULL, "start from this checkpoint file (variables, "
         "optimizer state and step) rather than the latest in --model-dir", &o->restore_checkpoint);
    FLAG("backup-dir", FLAG_STRING, NULL, "BackupAndRestore: back up here, and on a rerun after a "
         "crash resume exactly where the backup was taken; removed when training completes",
         &o->backup_dir);
    FLAG("backup-freq", FLAG_STRING, "epoch", "--backup-dir: epoch (at each epoch end) or N (every "
         "N steps)", &o->backup_freq);
    FLAG("summary", FLAG_BOOL, "false", "print the model's layers and parameter counts",
         &o->summary);
    FLAG("metrics-out", FLAG_STRING, NULL, "write the run's figures to this file as one JSON object",
         &o->metrics_out);
    FLAG("no-fuse", FLAG_BOOL, "false", "use the generic kernels only (no fused conv+pool)",
         &o->no_fuse);
    flag_def comm_rows[] = {CLI_COMM_FLAGS(o->comm)};
    for (size_t i = 0; i < sizeof comm_rows / sizeof comm_rows[0]; i++)
        flags_add(&t, comm_rows[i]);
    FLAG("help", FLAG_BOOL, "false", "this text", &o->help);
#undef FLAG
    return t.n;
}

static int usage_error(void) { return cli_fail(2, dt_last_error()); }

/* "epoch" (0) or a positive step count. */
static dt_status parse_backup_freq(const char *text, int64_t *out)
{
    if (strcmp(text, "epoch") == 0) {
        *out = 0;
        return DT_OK;
    }
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || errno || v < 1)
        return dt_error(DT_ERR_INVALID, "expected epoch or a step count >= 1, got '%s'", text);
    *out = v;
    return DT_OK;
}

static dt_status check_ranges(const struct train_opts *o, const flag_def *flags, int n_flags)
{
    if (o->epochs < 1)
        return dt_error(DT_ERR_INVALID, "--epochs: must be at least 1, got %d", o->epochs);
    if (o->batch_size < 1 || o->batch_size > (1 << 20))
        return dt_error(DT_ERR_INVALID, "--batch-size: must be in 1..1048576, got %d", o->batch_size);
    if (o->steps_per_epoch < 0)
        return dt_error(DT_ERR_INVALID, "--steps-per-epoch: must be 0 or more");
    if (o->max_steps < 0)
        return dt_error(DT_ERR_INVALID, "--max-steps: must be 0 or more");
    if (flags_find(flags, n_flags, "threads")->set && (o->threads < 1 || o->threads > 1024))
        return dt_error(DT_ERR_INVALID, "--threads: must be in 1..1024, got %d", o->threads);
    if (flags_find(flags, n_flags, "lr")->set && !(o->lr > 0.0))
        return dt_error(DT_ERR_INVALID, "--lr: must be positive, got %g", o->lr);
    if (o->model_file && flags_find(flags, n_flags, "model")->set)
        return dt_error(DT_ERR_INVALID, "--model and --model-file: give one, not both");
    if (o->steps_per_execution < 1 || o->steps_per_execution > 1000000)
        return dt_error(DT_ERR_INVALID, "--steps-per-execution: must be in 1..1000000, got %d",
                        o->steps_per_execution);
    if (!(o->coordinator_timeout > 0.0 && o->coordinator_timeout <= 86400.0) ||
        !(o->worker_timeout > 0.0 && o->worker_timeout <= 86400.0) ||
        !(o->heartbeat_timeout >= 0.5 && o->heartbeat_timeout <= 6553.0) ||
        !(o->ps_snapshot_secs >= 0.0 && o->ps_snapshot_secs <= 86400.0) ||
        !(o->ps_recovery_timeout > 0.0 && o->ps_recovery_timeout <= 86400.0))
        return dt_error(DT_ERR_INVALID, "--coordinator-timeout, --worker-timeout, "
                        "--ps-recovery-timeout: must be in (0, 86400] seconds; "
                        "--heartbeat-timeout in [0.5, 6553]; --ps-snapshot-secs in [0, 86400]");
    dt_ps_options pso;
    dt_partition_strategy ps_strategy;
    if (dt_ps_mode_parse(o->ps_mode, &pso))
        return dt_error_prefix(DT_ERR_INVALID, "--ps-mode");
    if (o->partitioner && dt_partitioner_parse(o->partitioner, &pso.partitioner))
        return dt_error_prefix(DT_ERR_INVALID, "--partitioner");
    if (dt_partition_strategy_parse(o->partition_strategy, &ps_strategy))
        return dt_error_prefix(DT_ERR_INVALID, "--partition-strategy");
    dt_strategy_kind kind;
    if (dt_strategy_parse(o->strategy, &kind))
        return dt_error_prefix(DT_ERR_INVALID, "--strategy");
    bool on_threads = kind == DT_STRATEGY_MIRRORED || kind == DT_STRATEGY_CENTRAL_STORAGE;
    if (o->early_stopping_patience < 0 || !(o->early_stopping_min_delta >= 0.0))
        return dt_error(DT_ERR_INVALID, "--early-stopping-patience and --early-stopping-min-delta "
                        "must not be negative");
    dt_wire_dtype wire;
    if (dt_wire_dtype_parse(o->gradient_wire, &wire))
        return dt_error_prefix(DT_ERR_INVALID, "--gradient-wire");
    if (!(o->bucket_mb >= 0.0 && o->bucket_mb <= 4096.0))
        return dt_error(DT_ERR_INVALID, "--bucket-mb: must be in 0..4096, got %g", o->bucket_mb);
    if (flags_find(flags, n_flags, "replicas")->set &&
        (o->replicas < 1 || o->replicas > 256 || !on_threads))
        return dt_error(DT_ERR_INVALID, "--replicas: 1..256 model copies, with --strategy mirrored "
                        "or central_storage");
    if (strcmp(o->loss_reduction, "mean") != 0 && strcmp(o->loss_reduction, "sum_over_global_batch") != 0)
        return dt_error(DT_ERR_INVALID, "--loss-reduction: expected mean or sum_over_global_batch, "
                        "got '%s'", o->loss_reduction);
    static const char *const progress[] = {"auto", "bar", "lines", "none", "estimator"};
    bool ok = false;
    for (int i = 0; i < 5; i++)
        ok |= strcmp(o->progress, progress[i]) == 0;
    if (!ok)
        return dt_error(DT_ERR_INVALID, "--progress: expected auto, bar, lines, estimator or none, "
                        "got '%s'", o->progress);
    if (o->log_step_count_steps < 1)
        return dt_error(DT_ERR_INVALID, "--log-step-count-steps: must be at least 1");
    if (o->save_checkpoints_steps < 0 || o->save_summary_steps < 0 ||
        !(o->save_checkpoints_secs >= 0.0) || o->keep_checkpoint_max < 0 ||
        !(o->keep_checkpoint_every_n_hours >= 0.0))
        return dt_error(DT_ERR_INVALID, "--save-checkpoints-steps, --save-checkpoints-secs, "
                        "--save-summary-steps, --keep-checkpoint-max and "
                        "--keep-checkpoint-every-n-hours must not be negative");
    int64_t freq;
    if (parse_backup_freq(o->backup_freq, &freq))
        return dt_error_prefix(DT_ERR_INVALID, "--backup-freq");
    if (o->eval_every_steps < 0 || o->eval_steps < 0)
        return dt_error(DT_ERR_INVALID, "--eval-every-steps and --eval-steps must not be negative");
    if (!(o->eval_throttle_secs >= 0.0 && o->eval_throttle_secs <= 1e9) ||
        !(o->eval_start_delay_secs >= 0.0 && o->eval_start_delay_secs <= 1e9))
        return dt_error(DT_ERR_INVALID, "--eval-throttle-secs and --eval-start-delay-secs: "
                        "seconds in 0..1e9");
    return DT_OK;
}

static dt_status parse_shuffle_buffer(const char *text, int64_t *out)
{
    if (strcmp(text, "all") == 0) {
        *out = INT64_MAX;
        return DT_OK;
    }
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || errno || v < 0)
        return dt_error(DT_ERR_INVALID, "--shuffle-buffer: expected a count >= 0 or 'all', got '%s'",
                        text);
    *out = v;
    return DT_OK;
}

static dt_status build_optim_config(const struct train_opts *o, const flag_def *flags, int n_flags,
                                    dt_optim_config *cfg)
{
    dt_opt_kind kind;
    dt_status st = dt_opt_kind_parse(o->optimizer, &kind);
    if (st)
        return dt_error_prefix(st, "--optimizer");
    dt_optim_config_default(cfg, kind);
    if (flags_find(flags, n_flags, "lr")->set)
        cfg->lr = (float)o->lr;
    cfg->momentum = (float)o->momentum;
    cfg->nesterov = o->nesterov;
    cfg->beta1 = (float)o->beta1;
    cfg->beta2 = (float)o->beta2;
    cfg->epsilon = (float)o->epsilon;
    if ((st = dt_lr_kind_parse(o->lr_schedule, &cfg->schedule)))
        return dt_error_prefix(st, "--lr-schedule");
    cfg->decay_steps = o->lr_decay_steps;
    cfg->decay_rate = (float)o->lr_decay_rate;
    cfg->alpha = (float)o->lr_alpha;
    if (o->table_optimizer) {
        if ((st = dt_rowopt_kind_parse(o->table_optimizer, &cfg->table_kind)))
            return dt_error_prefix(st, "--table-optimizer");
        cfg->table_kind_set = true;
    }
    cfg->table_lr = (float)o->table_lr;
    cfg->ftrl_l1 = (float)o->ftrl_l1, cfg->ftrl_l2 = (float)o->ftrl_l2;
    cfg->l2_reg = (float)o->l2_reg;
    dt_rowopt_config rule;
    dt_optim_table_rule(cfg, &rule);
    if ((st = dt_rowopt_config_check(&rule)))
        return dt_error_prefix(st, "--table-optimizer, --table-lr, --ftrl-l1, --ftrl-l2, --l2-reg");
    if ((st = dt_optim_config_check(cfg)))
        return dt_error_prefix(st, "optimizer flags");
    return DT_OK;
}

/* Writes text and a newline to path. A regular file (or a new one) is written beside the target
 * and renamed over it, so a reader never sees half a file; anything else (a symlink, a device,
 * a pipe) is written in place, so that --metrics-out /dev/stdout or a link keeps working. */
static dt_status write_file_atomically(const char *path, const char *text)
{
    dt_file_replace r;
    dt_status st = dt_file_replace_begin(&r, path, true);
    if (st)
        return dt_error_prefix(st, "--metrics-out");
    const char *target = dt_file_replace_path(&r);
    FILE *f = fopen(target, "w");
    if (!f)
        return dt_error(DT_ERR_IO, "--metrics-out: %s: %s", target, strerror(errno));
    int failed = fprintf(f, "%s\n", text) < 0;
    failed |= fclose(f) != 0;
    if (failed) {
        int err = errno;
        dt_file_replace_abort(&r);
        return dt_error(DT_ERR_IO, "--metrics-out: %s: write failed: %s", target, strerror(err));
    }
    if ((st = dt_file_replace_commit(&r)))
        return dt_error_prefix(st, "--metrics-out");
    return DT_OK;
}

static dt_status write_metrics(const char *path, const struct train_opts *o,
                               const dt_train_report *rep)
{
    dt_status st = DT_OK;
    cJSON *j = cJSON_CreateObject();
    char *text = NULL;
    if (!j)
        return dt_error(DT_ERR_NOMEM, "no memory for metrics");
    const dt_fit_result *r = &rep->fit;
    double sps = r->train_seconds > 0 ? (double)r->samples / r->train_seconds : 0.0;
    cJSON_AddNumberToObject(j, "samples_per_sec", sps);
    cJSON_AddNumberToObject(j, "epochs", r->epochs);
    cJSON_AddNumberToObject(j, "steps", (double)r->steps);
    cJSON_AddNumberToObject(j, "samples", (double)r->samples);
    cJSON_AddNumberToObject(j, "train_seconds", r->train_seconds);
    cJSON_AddNumberToObject(j, "comm_seconds", r->comm_seconds);
    cJSON_AddNumberToObject(j, "table_grad_bytes", (double)r->table_bytes);
    cJSON_AddNumberToObject(j, "final_loss", r->final_loss);
    cJSON_AddNumberToObject(j, "final_accuracy", r->final_accuracy);
    if (rep->have_test) {
        cJSON_AddNumberToObject(j, "test_loss", rep->test_loss);
        cJSON_AddNumberToObject(j, "test_accuracy", rep->test_accuracy);
        if (isfinite(rep->test_auc))
            cJSON_AddNumberToObject(j, "test_auc", rep->test_auc);
        if (isfinite(rep->test_logloss))
            cJSON_AddNumberToObject(j, "test_logloss", rep->test_logloss);
    } else {
        cJSON_AddNullToObject(j, "test_loss");
        cJSON_AddNullToObject(j, "test_accuracy");
    }
    cJSON_AddNumberToObject(j, "peak_rss_mb", dt_peak_rss_mb());
    cJSON_AddNumberToObject(j, "threads", rep->threads);
    cJSON_AddStringToObject(j, "gemm_kernel", dt_gemm_kernel_name());
    cJSON_AddNumberToObject(j, "prefetch", rep->prefetch);
    cJSON_AddNumberToObject(j, "batch_size", o->batch_size);
    cJSON_AddStringToObject(j, "model", rep->model);
    cJSON_AddStringToObject(j, "strategy", rep->strategy);
    cJSON_AddNumberToObject(j, "workers", rep->workers);
    cJSON_AddBoolToObject(j, "stopped_early", r->stopped_early);
    cJSON_AddNumberToObject(j, "resumed_step", (double)r->resumed_step);
    cJSON_AddNumberToObject(j, "checkpoints", (double)r->checkpoints);
    cJSON_AddNumberToObject(j, "checkpoint_seconds", r->checkpoint_seconds);
    cJSON_AddNumberToObject(j, "param_count", (double)rep->param_count);
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", rep->param_checksum);
    cJSON_AddStringToObject(j, "param_checksum", crc);
    text = cJSON_PrintUnformatted(j);
    if (!text) {
        st = dt_error(DT_ERR_NOMEM, "no memory for metrics");
        goto fail;
    }
    st = write_file_atomically(path, text);
fail:
    free(text);
    cJSON_Delete(j);
    return st;
}

/* The library's input options from the flags (checked with the other flags). */
static dt_status input_options(const struct train_opts *o, int64_t shuffle_buffer,
                               dt_input_options *io)
{
    dt_input_options_default(io);
    io->batch_size = o->batch_size;
    io->keep_remainder = o->keep_remainder;
    io->shuffle_buffer = shuffle_buffer;
    io->seed = (uint64_t)o->seed;
    io->prefetch = o->prefetch;
    dt_status st = dt_autoshard_parse(o->auto_shard, &io->autoshard);
    if (st)
        return dt_error_prefix(st, "--auto-shard");
    if ((st = dt_compression_parse(o->compression, &io->compression)))
        return dt_error_prefix(st, "--compression");
    io->num_parallel_reads = o->num_parallel_reads;
    io->num_parallel_calls = o->num_parallel_calls;
    io->cache = o->cache;
    io->skip_bad_records = o->skip_bad_records;
    io->features = o->features;
    io->label_key = o->label_key;
    io->ids_key = o->ids_key, io->values_key = o->values_key;
    io->numeric_columns = o->numeric_columns, io->categorical_columns = o->categorical_columns;
    io->log1p_numeric = o->log1p_numeric;
    io->num_features = o->num_features;
    io->index_base = o->index_base;
    io->csv_header = o->csv_header;
    io->label_column = o->label_column;
    io->input_shape = o->input_shape;
    return dt_input_options_check(io);
}

/* A comma-separated list of at most cap numbers into out; their count. */
static dt_status parse_list(const char *flag, const char *text, int cap, double *out, int *n)
{
    *n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || (*end && *end != ',') || *n == cap)
            return dt_error(DT_ERR_INVALID, "%s: expected up to %d comma-separated numbers, got "
                            "'%s'", flag, cap, text);
        out[(*n)++] = v;
        p = *end ? end + 1 : end;
    }
    if (*n == 0)
        return dt_error(DT_ERR_INVALID, "%s: empty", flag);
    return DT_OK;
}

/* The CTR models' sizes from their flags. */
static dt_status ctr_config(const struct train_opts *o, dt_ctr_spec *c)
{
    dt_ctr_spec_default(c);
    c->field_size = o->field_size;
    c->feature_size = o->feature_size;
    c->embedding_size = o->embedding_size;
    c->batch_norm = o->batch_norm;
    c->bn_decay = (float)o->bn_decay;
    if (!(o->bn_decay >= 0.0 && o->bn_decay < 1.0))
        return dt_error(DT_ERR_INVALID, "--batch-norm-decay: a decay in [0, 1), got %g",
                        o->bn_decay);
    double units[DT_MAX_DEEP_LAYERS], keep[DT_MAX_DEEP_LAYERS];
    int n_units, n_keep;
    dt_status st = parse_list("--deep-layers", o->deep_layers, DT_MAX_DEEP_LAYERS, units, &n_units);
    if (st || (st = parse_list("--dropout-keep", o->dropout_keep, DT_MAX_DEEP_LAYERS, keep,
                               &n_keep)))
        return st;
    if (n_keep != 1 && n_keep != n_units)
        return dt_error(DT_ERR_INVALID, "--dropout-keep: one value, or one per deep layer (%d), "
                        "got %d", n_units, n_keep);
    c->n_deep = n_units;
    for (int i = 0; i < n_units; i++) {
        if (units[i] != (int)units[i] || units[i] < 1 || units[i] > 65536)
            return dt_error(DT_ERR_INVALID, "--deep-layers: units in 1..65536, got %g", units[i]);
        c->deep_layers[i] = (int)units[i];
        c->dropout_keep[i] = (float)keep[n_keep == 1 ? 0 : i];
        if (!(c->dropout_keep[i] > 0.0f && c->dropout_keep[i] <= 1.0f))
            return dt_error(DT_ERR_INVALID, "--dropout-keep: keep probabilities in (0, 1], got %g",
                            keep[n_keep == 1 ? 0 : i]);
    }
    if (o->hash_buckets < 0 || o->feature_size < 0)
        return dt_error(DT_ERR_INVALID, "--feature-size and --hash-buckets must not be negative");
    return DT_OK;
}

/* The library's configuration from the flags (checked already). */
static void train_config(const struct train_opts *o, const flag_def *flags, int n_flags,
                         int64_t shuffle_buffer, const dt_optim_config *ocfg,
                         const dt_input_options *io, dt_train_config *c)
{
    dt_train_config_default(c);
    c->model = o->model, c->model_file = o->model_file, c->no_fuse = o->no_fuse;
    c->feature_spec = o->feature_spec;
    ctr_config(o, &c->ctr);
    c->hash_buckets = o->hash_buckets;
    c->data = o->data, c->test_data = o->test_data;
    c->input = *io;
    c->prefetch_given = flags_find(flags, n_flags, "prefetch")->set;
    c->optim = *ocfg;
    c->strategy = flags_find(flags, n_flags, "strategy")->set ? o->strategy : NULL;
    c->replicas = flags_find(flags, n_flags, "replicas")->set ? o->replicas : 0;
    dt_ps_mode_parse(o->ps_mode, &c->ps); /* checked */
    if (o->partitioner) {
        dt_partitioner_parse(o->partitioner, &c->ps.partitioner);
        c->ps.partitioner_given = true;
    }
    dt_partition_strategy_parse(o->partition_strategy, &c->ps.partition_strategy);
    c->ps.steps_per_execution = o->steps_per_execution;
    c->ps.coordinator_timeout = o->coordinator_timeout;
    c->ps.worker_timeout = o->worker_timeout;
    c->ps.heartbeat_timeout = o->heartbeat_timeout;
    c->ps.snapshot_secs = o->ps_snapshot_secs;
    c->ps.recovery_timeout = o->ps_recovery_timeout;
    c->comm = o->comm;
    dt_wire_dtype_parse(o->gradient_wire, &c->wire);
    c->bucket_bytes = (size_t)(o->bucket_mb * 1048576.0);
    c->threads = flags_find(flags, n_flags, "threads")->set ? o->threads : 0;
    c->summary = o->summary;
    c->out = stdout;
    dt_fit_config *f = &c->fit;
    f->epochs = o->epochs;
    /* --max-steps alone trains for that many steps, as Estimator's max_steps, over as many
     * passes of the data as it takes. */
    if (o->max_steps > 0 && !flags_find(flags, n_flags, "epochs")->set)
        f->epochs = INT32_MAX;
    f->steps_per_epoch = o->steps_per_epoch;
    f->max_steps = o->max_steps;
    f->batch_size = o->batch_size;
    f->seed = (uint64_t)o->seed;
    f->shuffle_buffer = shuffle_buffer;
    f->prefetch = o->prefetch;
    f->keep_remainder = o->keep_remainder;
    f->reduction = strcmp(o->loss_reduction, "mean") == 0 ? DT_REDUCTION_MEAN
                                                           : DT_REDUCTION_SUM_OVER_GLOBAL;
    f->progress = strcmp(o->progress, "none") == 0 ? NULL : stdout;
    f->validate = o->validate;
    f->early_stopping_patience = o->early_stopping_patience;
    if (strcmp(o->progress, "estimator") == 0)
        f->log_step_count_steps = o->log_step_count_steps;
    f->early_stopping_min_delta = o->early_stopping_min_delta;
    f->eval_every_steps = o->eval_every_steps;
    f->eval_throttle_secs = o->eval_throttle_secs;
    f->eval_start_delay_secs = o->eval_start_delay_secs;
    f->eval_steps = o->eval_steps;
    f->model_dir = o->model_dir;
    f->save_checkpoints_steps = o->save_checkpoints_steps;
    f->save_checkpoints_secs = o->save_checkpoints_secs;
    f->keep_checkpoint_max = o->keep_checkpoint_max;
    f->keep_checkpoint_every_n_hours = o->keep_checkpoint_every_n_hours;
    f->save_summary_steps = o->save_summary_steps;
    f->backup_dir = o->backup_dir;
    f->restore_path = o->restore_checkpoint;
    parse_backup_freq(o->backup_freq, &f->backup_freq);
    f->log = stdout;
    f->progress_bar = strcmp(o->progress, "bar") == 0 ||
                      (strcmp(o->progress, "auto") == 0 && dt_progress_bar_wanted(stdout));
}

/* The chief's report: the run's figures, the test set's, skipped records, the metrics file. */
static dt_status report(const struct train_opts *o, const dt_train_report *r)
{
    const dt_fit_result *f = &r->fit;
    double sps = f->train_seconds > 0 ? (double)f->samples / f->train_seconds : 0.0;
    printf("Trained %lld steps (%lld examples) in %.2f s: %.0f samples/s on %d thread%s\n",
           (long long)(f->steps - f->resumed_step), (long long)f->samples, f->train_seconds, sps,
           r->threads, r->threads == 1 ? "" : "s");
    if (r->have_test && isfinite(r->test_auc))
        printf("Test loss: %.4f - test accuracy: %.4f - test AUC: %.4f - test logloss: %.4f\n",
               r->test_loss, r->test_accuracy, r->test_auc, r->test_logloss);
    else if (r->have_test)
        printf("Test loss: %.4f - test accuracy: %.4f\n", r->test_loss, r->test_accuracy);
    if (r->bad_records)
        printf("Skipped %lld bad records\n", (long long)r->bad_records);
    fflush(stdout); /* the report first, should the metrics go to stdout too */
    dt_status st = o->metrics_out ? write_metrics(o->metrics_out, o, r) : DT_OK;
    /* A full disk or a closed pipe on stdout is a failure, not a success with lost output. */
    if (st == DT_OK && (fflush(stdout) != 0 || ferror(stdout)))
        st = dt_error(DT_ERR_IO, "stdout: write failed: %s", strerror(errno));
    return st;
}

int cmd_train(int argc, char **argv)
{
    struct train_opts o;
    flag_def flags[128];
    int n_flags = define_flags(flags, (int)(sizeof flags / sizeof flags[0]), &o);
    if (flags_parse(flags, n_flags, argc, argv))
        return usage_error();
    if (o.help) {
        printf("usage: dtrain train [flags]\n\nTrains a model in this process, or as one task "
               "of a cluster (TF_CONFIG, or mpirun with --comm mpi).\n\nflags:\n");
        flags_print_help(flags, n_flags, stdout);
        return 0;
    }
    dt_optim_config ocfg;
    int64_t shuffle_buffer = 0;
    dt_input_options io;
    if (check_ranges(&o, flags, n_flags) || parse_shuffle_buffer(o.shuffle_buffer, &shuffle_buffer) ||
        build_optim_config(&o, flags, n_flags, &ocfg) || input_options(&o, shuffle_buffer, &io) ||
        ctr_config(&o, &(dt_ctr_spec){0}))
        return usage_error();
    dt_train_config c;
    train_config(&o, flags, n_flags, shuffle_buffer, &ocfg, &io, &c);
    dt_train_report r;
    dt_status st = dt_train(&c, &r);
    if (st == DT_OK && r.ps_task)
        fprintf(stderr, "dtrain: %s stopped by the coordinator: %llu requests, %llu rows pulled, "
                "%llu rows pushed\n", r.ps.task, (unsigned long long)r.ps.requests,
                (unsigned long long)r.ps.rows_pulled, (unsigned long long)r.ps.rows_pushed);
    if (st == DT_OK && r.ps_worker && r.worker.samples > 0)
        fprintf(stderr, "dtrain: %s: %lld steps, %lld samples; pulls p50 %.2f ms, p99 %.2f ms; "
                "%.0f bytes per sample to the ps tasks, %.0f from them\n", r.worker.task,
                (long long)r.worker.steps, (long long)r.worker.samples, r.worker.pull_p50_ms,
                r.worker.pull_p99_ms, (double)r.worker.bytes_sent / (double)r.worker.samples,
                (double)r.worker.bytes_received / (double)r.worker.samples);
    if (st == DT_OK && r.chief && !r.evaluator)
        st = report(&o, &r);
    return st ? cli_fail(1, dt_last_error()) : 0;
}
