/* dtrain train: the flags set a dt_train_config (train.h) directly, one table row each; dt_train
 * checks it and trains; the chief's report and --metrics-out are printed here. */
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
#include "../src/train/progress.h"
#include "config_flags.h"
#include "sagemaker.h"
#include "dtrain/process.h"
#include "dtrain/train.h"
#include "flags.h"

/* The flags that are the command's own rather than a field of the library's config. */
struct cli_only {
    const char *metrics_out, *progress;
    cli_resolver resolver;
    flag_ctr_lists ctr_lists;
    bool help;
};

static dt_status progress_parse(const char *text, void *dst)
{
    static const char *const modes[] = {"auto", "bar", "lines", "none", "estimator"};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(text, modes[i]) == 0) {
            *(const char **)dst = modes[i];
            return DT_OK;
        }
    return dt_error(DT_ERR_INVALID, "expected auto, bar, lines, estimator or none, got '%s'", text);
}
static const flag_custom progress_kind = {progress_parse, NULL, NULL, 0, " S"};

/* The flag table. A row whose value is a field of c names it once: FIELD(name, kind, member,
 * help) points at c->member, takes its default from dt_train_config_default, and reports errors
 * about "member" as --name. OWN rows are the command's, with their defaults as text. */
static int define_flags(flag_table *t, dt_train_config *c, struct cli_only *o)
{
#define ROW(name_, kind_, def_, member_, help_, ...)                                             \
    flags_add_ext(t, ((flag_def){.name = name_, .kind = kind_, .def = def_, .help = help_,       \
                                 .dst = &c->member_}),                                           \
                  ((flag_ext){__VA_ARGS__}))
#define FIELD(name_, kind_, member_, help_) flags_add_field(t, *c, name_, kind_, member_, help_)
#define CUSTOM(name_, custom_, member_, help_) \
    flags_add_field(t, *c, name_, FLAG_CUSTOM, member_, help_, .custom = &(custom_))
#define OWN(name_, kind_, def_, help_, dst_) \
    flags_add(t, (flag_def){.name = name_, .kind = kind_, .def = def_, .help = help_, .dst = dst_})
    FIELD("model", FLAG_STRING, model, "built-in model: mnist_cnn, mlp, or a CTR model: lr "
          "(logistic regression), fm (factorization machine), deepfm");
    FIELD("field-size", FLAG_INT, ctr.field_size, "CTR models: fields per example; libsvm data is "
          "then field-positional, `label id:value` x F, ids 0-based");
    FIELD("feature-size", FLAG_LLONG, ctr.feature_size, "CTR models: distinct feature ids, the "
          "tables' rows");
    FIELD("hash-buckets", FLAG_INT64, hash_buckets, "CTR models: hash each raw id with its field "
          "into this many rows (as categorical_column_with_hash_bucket; no vocabulary pass)");
    FIELD("embedding-size", FLAG_INT, ctr.embedding_size, "fm, deepfm: K, the factors per feature");
    FIELD("dynamic-tables", FLAG_BOOL, ctr.dynamic, "CTR models: key the tables by the raw id "
          "(any int64; no --feature-size): rows are made as ids arrive, never shared by two ids");
    FIELD("admit-min-count", FLAG_INT64, ctr.dynamic_policy.min_count, "dynamic tables: an id "
          "gets a row once seen this many times; before, it reads zeros and is not updated");
    FIELD("admit-bloom-bits", FLAG_INT64, ctr.dynamic_policy.bloom_bits, "dynamic tables: count "
          "sightings in a counting Bloom filter of this many bits (4-bit counters) instead of "
          "exactly");
    FIELD("admit-bloom-hashes", FLAG_INT, ctr.dynamic_policy.bloom_hashes, "dynamic tables: the "
          "filter's counters per id");
    FIELD("evict-steps-to-live", FLAG_INT64, ctr.dynamic_policy.steps_to_live, "dynamic tables: "
          "drop ids not seen in this many steps (0: never)");
    FIELD("evict-l2-below", FLAG_FLOAT32, ctr.dynamic_policy.l2_below, "dynamic tables: drop rows "
          "whose L2 norm is below this (0: never)");
    FIELD("evict-max-rows", FLAG_INT64, ctr.dynamic_policy.max_rows, "dynamic tables: at most "
          "this many rows, the least recently seen dropped (0: as memory allows)");
    FIELD("evict-every-steps", FLAG_INT64, ctr.dynamic_policy.evict_every_steps, "dynamic "
          "tables: an eviction pass every this many steps, a page of rows per step (0: before "
          "checkpoints only)");
    FIELD("dynamic-memory-limit", FLAG_INT64, ctr.dynamic_policy.memory_limit, "dynamic tables: "
          "bytes the tables may take before training stops with an error naming the table "
          "(0: what the machine has, less a margin)");
    o->ctr_lists = (flag_ctr_lists){&c->ctr, 0};
    flags_add_ext(t, ((flag_def){.name = "deep-layers", .kind = FLAG_CUSTOM, .def = FLAG_IN_DST,
                                 .help = "deepfm: units of the MLP's layers",
                                 .dst = &o->ctr_lists}),
                  ((flag_ext){.field = "ctr.deep_layers", .custom = &flag_deep_layers}));
    flags_add_ext(t, ((flag_def){.name = "dropout-keep", .kind = FLAG_CUSTOM, .def = FLAG_IN_DST,
                                 .help = "deepfm: KEEP probability after each deep layer, as the "
                                 "DeepFM sample (1: no dropout); one value, or one per layer",
                                 .dst = &o->ctr_lists}),
                  ((flag_ext){.field = "ctr.dropout_keep", .custom = &flag_dropout_keep}));
    FIELD("batch-norm", FLAG_BOOL, ctr.batch_norm, "deepfm: batch normalisation after each deep "
          "layer's ReLU, before its dropout, as the DeepFM sample's batch_norm");
    FIELD("batch-norm-decay", FLAG_FLOAT32, ctr.bn_decay, "deepfm: the moving averages' decay "
          "(the sample's 0.9; Keras's momentum)");
    FIELD("l2-reg", FLAG_FLOAT32, optim.l2_reg, "CTR models: L2 on the table rows each step "
          "touches (adds l2-reg x row to their gradient)");
    ROW("table-optimizer", FLAG_CUSTOM, FLAG_IN_DST, optim, "CTR models: the tables' row-wise "
        "rule: sgd, adagrad, adam (lazy: only touched rows' moments move), ftrl (default: "
        "--optimizer's)", .field = "optim.table_kind", .custom = &flag_table_optimizer);
    FIELD("table-lr", FLAG_FLOAT32, optim.table_lr, "CTR models: the tables' learning rate (0: "
          "--lr)");
    FIELD("ftrl-l1", FLAG_FLOAT32, optim.ftrl_l1, "--table-optimizer ftrl: l1 regularisation");
    FIELD("ftrl-l2", FLAG_FLOAT32, optim.ftrl_l2, "--table-optimizer ftrl: l2 regularisation");
    FIELD("model-file", FLAG_STRING, model_file, "model described in a JSON file (instead of "
          "--model)");
    FIELD("feature-spec", FLAG_STRING, feature_spec, "columns and model in TF feature-column JSON "
          "(docs/FEATURES.md) over raw csv:, criteo: or tfrecord: data (instead of --model)");
    FIELD("data", FLAG_STRING, data, "training data: fashion-mnist[:DIR], mnist:DIR, "
          "idx:IMAGES,LABELS, tfrecord:GLOB, libsvm:GLOB, csv:GLOB (GLOB: comma-separated "
          "patterns; - is stdin)");
    FIELD("test-data", FLAG_STRING, test_data, "test data, same forms, or none (default: the t10k "
          "files beside fashion-mnist/mnist data)");
    FIELD("features", FLAG_STRING, input.features, "tfrecord: the Example features to read, "
          "KEY:LENGTH[:SCALE[:DEFAULT]],... (LENGTH 0: variable length, sparse), e.g. "
          "image:784:1/255");
    FIELD("label-key", FLAG_STRING, input.label_key, "tfrecord: the feature holding the label");
    FIELD("ids-key", FLAG_STRING, input.ids_key, "tfrecord, CTR models: the int64 feature ids");
    FIELD("values-key", FLAG_STRING, input.values_key, "tfrecord, CTR models: the float feature "
          "values");
    FIELD("numeric-columns", FLAG_STRING, input.numeric_columns, "tfrecord or csv, CTR models: "
          "columns holding one number each, fields 0.. (e.g. I1,I2,...,I13)");
    FIELD("categorical-columns", FLAG_STRING, input.categorical_columns, "tfrecord or csv, CTR "
          "models: columns holding one category each (int64 or bytes), hashed into --hash-buckets "
          "rows after the numeric fields' (e.g. C1,...,C26)");
    FIELD("log1p-numeric", FLAG_BOOL, input.log1p_numeric, "CTR columns: numeric values as log(1 "
          "+ max(x, 0)), Criteo's usual preprocessing");
    CUSTOM("compression", flag_compression, input.compression, "tfrecord: none, gzip, zlib or "
           "auto (gzip by magic)");
    FIELD("num-features", FLAG_INT, input.num_features, "libsvm: dense features per example "
          "(indices 1..N)");
    FIELD("index-base", FLAG_INT, input.index_base, "libsvm: the first feature index");
    FIELD("csv-header", FLAG_BOOL, input.csv_header, "csv: the first line names the columns");
    FIELD("label-column", FLAG_STRING, input.label_column, "csv: the label's column, by name or "
          "0-based index");
    FIELD("input-shape", FLAG_STRING, input.input_shape, "H,W,C of the model's input for file "
          "data (default: 1,1,features)");
    CUSTOM("auto-shard", flag_autoshard, input.autoshard, "file data over several workers: data "
           "(each keeps every n-th example), file (whole files each; data when there are fewer "
           "files than workers), auto (file when there are enough files, else data, as tf.data's "
           "AUTO), or off (every worker reads everything)");
    FIELD("num-parallel-reads", FLAG_INT, input.num_parallel_reads, "files read in turn "
          "(interleave)");
    FIELD("num-parallel-calls", FLAG_INT, input.num_parallel_calls, "batches parsed at once on "
          "threads");
    FIELD("cache", FLAG_STRING, input.cache, "cache file data after the first epoch: memory or a "
          "file path");
    FIELD("prefetch", FLAG_INT, fit.prefetch, "batches prepared ahead on a background thread (0: "
          "none; 0 too when this machine's workers have a thread on every core)");
    FIELD("input-timeout", FLAG_FLOAT, input.input_timeout, "file data: seconds the input may "
          "give nothing (a FIFO nobody writes, a hung network file system) before the worker "
          "fails, naming the file (0: no limit)");
    FIELD("skip-bad-records", FLAG_BOOL, input.skip_bad_records, "skip and count corrupt records "
          "or lines instead of stopping");
    FIELD("epochs", FLAG_INT, fit.epochs, "passes over the training data (with --max-steps and no "
          "--epochs: as many as the steps take)");
    FIELD("steps-per-epoch", FLAG_INT64, fit.steps_per_epoch, "steps per epoch, 0 for the whole "
          "dataset");
    FIELD("max-steps", FLAG_INT64, fit.max_steps, "stop after this many steps in all, 0 for no "
          "limit");
    FIELD("batch-size", FLAG_INT, fit.batch_size, "global batch size");
    FIELD("keep-remainder", FLAG_BOOL, fit.keep_remainder, "also train on each epoch's last "
          "partial batch (default: drop it, as the tutorial)");
    CUSTOM("loss-reduction", flag_reduction, fit.reduction, "mean (over the batch) or "
           "sum_over_global_batch (sum x 1/--batch-size, the tutorial's)");
    CUSTOM("shuffle-buffer", flag_shuffle_buffer, fit.shuffle_buffer, "tf.data shuffle buffer in "
           "examples; 0 keeps file order, all shuffles fully");
    CUSTOM("optimizer", flag_optimizer, optim.kind, "sgd, momentum, adam, adagrad");
    /* Unset, the optimizer's own rate: cmd_train sets it once the optimizer is known. */
    ROW("lr", FLAG_FLOAT32, NULL, optim.lr, "learning rate (default: Keras's for the optimizer: "
        "sgd and momentum 0.01, adam and adagrad 0.001)", .field = "optim.lr");
    FIELD("momentum", FLAG_FLOAT32, optim.momentum, "momentum of --optimizer momentum");
    FIELD("nesterov", FLAG_BOOL, optim.nesterov, "Nesterov momentum");
    FIELD("beta1", FLAG_FLOAT32, optim.beta1, "Adam's beta_1");
    FIELD("beta2", FLAG_FLOAT32, optim.beta2, "Adam's beta_2");
    FIELD("epsilon", FLAG_FLOAT32, optim.epsilon, "Adam's and Adagrad's epsilon");
    CUSTOM("lr-schedule", flag_lr_schedule, optim.schedule, "constant, step (staircase "
           "exponential decay), cosine");
    FIELD("lr-decay-steps", FLAG_INT64, optim.decay_steps, "steps per decay (step) or to the "
          "floor (cosine)");
    FIELD("lr-decay-rate", FLAG_FLOAT32, optim.decay_rate, "factor per decay of the step "
          "schedule");
    FIELD("lr-alpha", FLAG_FLOAT32, optim.alpha, "floor of the cosine schedule as a fraction of "
          "--lr");
    ROW("threads", FLAG_INT, NULL, threads, "threads for intra-op parallelism (default: all cores, "
        "shared out among the replicas, or the workers on this machine)", .field = "threads",
        .min = 1, .max = 1024);
    FIELD("seed", FLAG_UINT64, fit.seed, "seed of initial weights, shuffling and dropout");
    ROW("strategy", FLAG_STRING, NULL, strategy, "distribution strategy: one_device; mirrored (--replicas copies of the model on threads of this "
        "process); central_storage (replicas on threads sharing one copy of the variables); "
        "multi_worker_mirrored (the default when TF_CONFIG names a cluster of several workers); "
        "parameter_server (the default when TF_CONFIG names ps tasks: variables on ps tasks, "
        "steps scheduled on workers by the chief)", .field = "strategy", .shown = "one_device");
    ROW("ps-mode", FLAG_CUSTOM, FLAG_IN_DST, ps, "parameter_server: how workers see each other's updates: async (TensorFlow's), or ssp:S "
        "(bounded staleness: a worker at step c of its own sees every update of steps <= c - S - "
        "1 of every worker; ssp:0 is lockstep), or hybrid (tables on the ps tasks, dense "
        "variables all-reduced among the workers, synchronously)", .field = "ps.mode",
        .custom = &flag_ps_mode);
    FIELD("steps-per-execution", FLAG_INT, ps.steps_per_execution, "parameter_server: steps per "
          "function the coordinator schedules on a worker");
    ROW("partitioner", FLAG_CUSTOM, FLAG_IN_DST, ps, "parameter_server: tables' shards, fixed:N, "
        "min_size:BYTES[:MAX_SHARDS] or max_size:BYTES[:MAX_SHARDS] as TensorFlow's partitioners "
        "(default: one shard per ps task)", .field = "ps.partitioner", .custom = &flag_partitioner);
    CUSTOM("partition-strategy", flag_partition_strategy, ps.partition_strategy,
           "parameter_server: rows over a table's shards, div (contiguous ranges) or mod (id % "
           "shards)");
    FIELD("coordinator-timeout", FLAG_FLOAT, ps.coordinator_timeout, "parameter_server workers "
          "and ps: seconds without the coordinator (the chief) before giving up");
    FIELD("num-workers", FLAG_INT, ps.num_workers, "parameter_server with TF_CONFIG's "
          "sparseCluster (TFJob's enableDynamicWorker), whose workers do not know each other: "
          "worker i reads shard i of N of the data (0: every worker reads all the data it is "
          "given)");
    FIELD("worker-timeout", FLAG_FLOAT, ps.worker_timeout, "parameter_server coordinator: "
          "seconds a worker may take over one scheduled function");
    FIELD("heartbeat-timeout", FLAG_FLOAT, ps.heartbeat_timeout, "parameter_server coordinator: "
          "seconds of silence (ZeroMQ heartbeats unanswered) after which a worker counts as "
          "lost: its function goes to the other workers, and it may rejoin; a closed connection "
          "counts at once");
    FIELD("ps-snapshot-secs", FLAG_FLOAT, ps.snapshot_secs, "parameter_server ps tasks with "
          "--model-dir: seconds between snapshots of their shards (in --model-dir/ps; 0: none), "
          "which a ps task started again restores");
    FIELD("ps-timeout", FLAG_FLOAT, ps.ps_timeout, "parameter_server workers and coordinator: "
          "seconds a ps task may take to answer a pull, a push or a ping before it counts as "
          "lost (a save or a restore may take longer)");
    FIELD("ps-recovery-timeout", FLAG_FLOAT, ps.recovery_timeout, "parameter_server: seconds the "
          "workers and the coordinator wait for a lost ps task to be back before the job fails");
    CUSTOM("gradient-wire", flag_wire, wire, "multi-worker: gradients on the wire as f32, or "
           "compressed to bf16 or fp16 (as DDP's compression hooks; summed in float32)");
    CUSTOM("bucket-mb", flag_mib, bucket_bytes, "multi-worker: MiB of gradients per all-reduce, "
           "issued on a communication thread during backward as each bucket completes (the first "
           "at most 1 MiB), which pays when the network rather than the CPU is the bottleneck; 0: "
           "one all-reduce after backward");
    ROW("replicas", FLAG_INT, NULL, replicas, "mirrored, central_storage: replicas, each on its own "
        "threads (default: one per core)", .field = "replicas", .min = 1, .max = 256);
    FIELD("validate", FLAG_BOOL, fit.validate, "evaluate on the test data at each epoch end");
    FIELD("early-stopping-patience", FLAG_INT, fit.early_stopping_patience, "stop when the loss "
          "(val_loss with --validate) has not improved for this many epochs; 0: never");
    FIELD("early-stopping-min-delta", FLAG_FLOAT, fit.early_stopping_min_delta, "the least fall "
          "of the loss that counts as an improvement");
    flags_add_ext(t, ((flag_def){.name = "progress", .kind = FLAG_CUSTOM, .def = "auto", .help =
                                 "auto (a bar on a terminal, a line per epoch otherwise), bar, "
                                 "lines, none, or estimator (Estimator's `loss = ..., step = N (T "
                                 "sec)` and `global_step/sec` lines)", .dst = &o->progress}),
                  ((flag_ext){.custom = &progress_kind}));
    /* Estimator's logging is on only with --progress estimator: fit's 0 means off, so the
     * flag's default (Estimator's 100) is the command's. */
    ROW("log-step-count-steps", FLAG_INT64, "100", fit.log_step_count_steps, "--progress "
        "estimator: steps between log lines", .field = "fit.log_step_count_steps", .min = 1,
        .max = INT64_MAX);
    FIELD("eval-every-steps", FLAG_INT64, fit.eval_every_steps, "train_and_evaluate: evaluate on "
          "the test data every this many steps and after the last, printing Estimator's `Saving "
          "dict for global step N: ...` line; 0: not by steps");
    FIELD("eval-throttle-secs", FLAG_FLOAT, fit.eval_throttle_secs, "train_and_evaluate: "
          "evaluate when this many seconds have passed since the last evaluation (Estimator's "
          "throttle_secs), and after the last step; 0: not by time");
    FIELD("eval-start-delay-secs", FLAG_FLOAT, fit.eval_start_delay_secs, "train_and_evaluate: "
          "no evaluation before this many seconds of training");
    FIELD("eval-steps", FLAG_INT64, fit.eval_steps, "train_and_evaluate: batches per evaluation "
          "(0: the whole test data)");
    FIELD("model-dir", FLAG_STRING, fit.model_dir, "checkpoints (ckpt-N.safetensors) and "
          "TensorBoard summaries go here, and training resumes from its latest checkpoint");
    /* Estimator's RunConfig defaults (600 s, 5 kept, summaries every 100 steps) are the
     * command's; a C program's fit saves only what it asks for. */
    FIELD("save-checkpoints-steps", FLAG_INT64, fit.save_checkpoints_steps, "--model-dir: a "
          "checkpoint every this many steps (0: by --save-checkpoints-secs)");
    ROW("save-checkpoints-secs", FLAG_FLOAT, "600", fit.save_checkpoints_secs, "--model-dir: a "
        "checkpoint every this many seconds, and one after the last step",
        .field = "fit.save_checkpoints_secs");
    ROW("keep-checkpoint-max", FLAG_INT, "5", fit.keep_checkpoint_max, "--model-dir: checkpoints "
        "kept (0: all)", .field = "fit.keep_checkpoint_max");
    FIELD("keep-checkpoint-every-n-hours", FLAG_FLOAT, fit.keep_checkpoint_every_n_hours,
          "--model-dir: besides those, keep one checkpoint for good per this many hours (0: "
          "none)");
    ROW("save-summary-steps", FLAG_INT64, "100", fit.save_summary_steps, "--model-dir: "
        "TensorBoard scalars every this many steps (0: none)", .field = "fit.save_summary_steps");
    FIELD("restore-checkpoint", FLAG_STRING, fit.restore_path, "start from this checkpoint file "
          "(variables, optimizer state and step) rather than the latest in --model-dir");
    FIELD("backup-dir", FLAG_STRING, fit.backup_dir, "BackupAndRestore: back up here, and on a "
          "rerun after a crash resume exactly where the backup was taken; removed when training "
          "completes");
    CUSTOM("backup-freq", flag_backup_freq, fit.backup_freq, "--backup-dir: epoch (at each epoch "
           "end) or N (every N steps)");
    FIELD("summary", FLAG_BOOL, summary, "print the model's layers and parameter counts");
    OWN("metrics-out", FLAG_STRING, NULL, "write the run's figures to this file as one JSON "
        "object", &o->metrics_out);
    FIELD("no-fuse", FLAG_BOOL, no_fuse, "use the generic kernels only (no fused conv+pool)");
    cli_comm_flags_add(t, &c->comm);
    cli_resolver_flags_add(t, &o->resolver);
    OWN("help", FLAG_BOOL, "false", "this text", &o->help);
#undef OWN
#undef CUSTOM
#undef FIELD
#undef ROW
    return t->n;
}

static int usage_error(const flag_def *flags, int n_flags)
{
    return cli_fail(2, flags_name_fields(flags, n_flags, dt_last_error()));
}

/* What the flags mean together, beyond one field each. */
static dt_status settle(const flag_def *flags, int n_flags, const struct cli_only *o,
                        dt_train_config *c)
{
    if (flags_given(flags, n_flags, "model") && flags_given(flags, n_flags, "model-file"))
        return dt_error(DT_ERR_INVALID, "--model and --model-file: give one, not both");
    dt_status st = flag_ctr_lists_finish((flag_ctr_lists *)&o->ctr_lists);
    if (st)
        return st;
    if (!flags_given(flags, n_flags, "lr")) {
        dt_optim_config keras;
        dt_optim_config_default(&keras, c->optim.kind);
        c->optim.lr = keras.lr;
    }
    /* --max-steps alone trains for that many steps, as Estimator's max_steps, over as many
     * passes of the data as it takes. */
    if (c->fit.max_steps > 0 && !flags_given(flags, n_flags, "epochs"))
        c->fit.epochs = INT32_MAX;
    c->prefetch_given = flags_given(flags, n_flags, "prefetch");
    if (strcmp(o->progress, "estimator") != 0)
        c->fit.log_step_count_steps = 0;
    c->fit.progress = strcmp(o->progress, "none") == 0 ? NULL : stdout;
    c->fit.progress_bar = strcmp(o->progress, "bar") == 0 ||
                          (strcmp(o->progress, "auto") == 0 && dt_progress_bar_wanted(stdout));
    c->fit.log = stdout;
    c->out = stdout;
    return dt_train_config_check(c);
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

static dt_status write_metrics(const char *path, const dt_train_config *c,
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
    cJSON_AddNumberToObject(j, "batch_size", c->fit.batch_size);
    cJSON_AddStringToObject(j, "model", rep->model);
    cJSON_AddStringToObject(j, "strategy", rep->strategy);
    cJSON_AddNumberToObject(j, "workers", rep->workers);
    cJSON_AddBoolToObject(j, "stopped_early", r->stopped_early);
    cJSON_AddNumberToObject(j, "resumed_step", (double)r->resumed_step);
    cJSON_AddNumberToObject(j, "checkpoints", (double)r->checkpoints);
    cJSON_AddNumberToObject(j, "checkpoint_seconds", r->checkpoint_seconds);
    cJSON_AddNumberToObject(j, "checkpoints_failed", (double)r->checkpoints_failed);
    cJSON_AddNumberToObject(j, "param_count", (double)rep->param_count);
    if (rep->dynamic) {
        const dt_keymap_stats *k = &rep->dynamic_stats;
        cJSON_AddNumberToObject(j, "dynamic_live_keys", (double)k->live);
        cJSON_AddNumberToObject(j, "dynamic_admitted", (double)k->admitted);
        cJSON_AddNumberToObject(j, "dynamic_evicted", (double)k->evicted);
        cJSON_AddNumberToObject(j, "dynamic_counting", (double)k->counting);
        cJSON_AddNumberToObject(j, "dynamic_waiting_full", (double)k->waiting_full);
        cJSON_AddNumberToObject(j, "dynamic_bytes", (double)k->bytes);
        cJSON_AddNumberToObject(j, "dynamic_bytes_per_key", dt_keymap_bytes_per_key(k));
        cJSON_AddNumberToObject(j, "dynamic_key_overhead_bytes",
                                k->live ? (double)k->key_bytes / (double)k->live : 0.0);
        cJSON_AddNumberToObject(j, "dynamic_bloom_bytes", (double)k->bloom_bytes);
    }
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

/* The chief's report: the run's figures, the test set's, skipped records, the metrics file. */
static dt_status report(const dt_train_config *c, const char *metrics_out,
                        const dt_train_report *r)
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
    if (r->dynamic) {
        const dt_keymap_stats *k = &r->dynamic_stats;
        printf("Dynamic tables: %lld live keys (%lld admitted, %lld evicted, %lld being counted), "
               "%.1f bytes per live key, %.1f MB\n", (long long)k->live, (long long)k->admitted,
               (long long)k->evicted, (long long)k->counting, dt_keymap_bytes_per_key(k),
               (double)k->bytes / 1e6);
    }
    fflush(stdout); /* the report first, should the metrics go to stdout too */
    dt_status st = metrics_out ? write_metrics(metrics_out, c, r) : DT_OK;
    /* A full disk or a closed pipe on stdout is a failure, not a success with lost output. */
    if (st == DT_OK && (fflush(stdout) != 0 || ferror(stdout)))
        st = dt_error(DT_ERR_IO, "stdout: write failed: %s", strerror(errno));
    return st;
}

static int train_with(int argc, char **argv)
{
    dt_train_config c;
    dt_train_config_default(&c);
    struct cli_only cli;
    flag_def flags[128];
    flag_ext exts[128];
    flag_table t = {flags, 0, (int)(sizeof flags / sizeof flags[0]), exts};
    int n_flags = define_flags(&t, &c, &cli);
    if (flags_parse(flags, n_flags, argc, argv))
        return usage_error(flags, n_flags);
    if (cli.help) {
        /* The defaults as the library has them, whatever else the command line said. */
        dt_train_config_default(&c);
        t.n = 0;
        n_flags = define_flags(&t, &c, &cli);
        printf("usage: dtrain train [flags]\n\nTrains a model in this process, or as one task "
               "of a cluster (TF_CONFIG, or mpirun with --comm mpi).\n\nflags:\n");
        flags_print_help(flags, n_flags, stdout);
        return 0;
    }
    if (settle(flags, n_flags, &cli, &c))
        return usage_error(flags, n_flags);
    int resolved = cli_resolver_apply(&cli.resolver);
    if (resolved)
        return resolved;
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
        st = report(&c, cli.metrics_out, &r);
    return st ? cli_fail_status(st, flags_name_fields(flags, n_flags, dt_last_error())) : 0;
}

int cmd_train(int argc, char **argv)
{
    int n;
    char **args;
    if (cli_sagemaker_args(argc, argv, &n, &args))
        return cli_fail(CLI_EXIT_FAILED, dt_last_error());
    int status = train_with(args ? n : argc, args ? args : argv);
    cli_sagemaker_free(n, args);
    return status;
}
