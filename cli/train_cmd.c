/* dtrain train: parse flags, load the data and the model, fit, evaluate, report. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "comm_open.h"
#include "dtrain/clock.h"
#include "dtrain/fileio.h"
#include "dtrain/fit.h"
#include "dtrain/idx.h"
#include "dtrain/input.h"
#include "dtrain/model.h"
#include "dtrain/optim.h"
#include "dtrain/pool.h"
#include "dtrain/progress.h"
#include "dtrain/sources.h"
#include "dtrain/strategy.h"
#include "flags.h"

struct train_opts {
    const char *model, *model_file, *data, *test_data, *optimizer, *lr_schedule, *strategy;
    const char *metrics_out, *shuffle_buffer, *progress, *loss_reduction, *gradient_wire;
    const char *features, *label_key, *input_shape, *compression, *cache, *label_column;
    const char *auto_shard;
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
    /* Set from the strategy and the cluster: this process's worker rank of n_workers. */
    int n_workers, rank;
};

static int define_flags(flag_def *f, int cap, struct train_opts *o)
{
    flag_table t = {f, 0, cap};
#define FLAG(name_, kind_, def_, help_, dst_) flags_add(&t, (flag_def){name_, kind_, def_, help_, dst_, false})
    FLAG("model", FLAG_STRING, "mnist_cnn", "built-in model: mnist_cnn, mlp", &o->model);
    FLAG("model-file", FLAG_STRING, NULL, "model described in a JSON file (instead of --model)",
         &o->model_file);
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
         "several workers)", &o->strategy);
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
    if (strcmp(o->strategy, "parameter_server") == 0)
        return dt_error(DT_ERR_UNSUPPORTED, "--strategy: parameter_server is not available in "
                        "this build (one_device, mirrored, central_storage, "
                        "multi_worker_mirrored)");
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
    if (o->prefetch < 0 || o->prefetch > 4096)
        return dt_error(DT_ERR_INVALID, "--prefetch: must be in 0..4096, got %d", o->prefetch);
    if (o->num_parallel_reads < 1 || o->num_parallel_reads > 1024)
        return dt_error(DT_ERR_INVALID, "--num-parallel-reads: must be in 1..1024, got %d",
                        o->num_parallel_reads);
    if (o->num_parallel_calls < 1 || o->num_parallel_calls > 1024)
        return dt_error(DT_ERR_INVALID, "--num-parallel-calls: must be in 1..1024, got %d",
                        o->num_parallel_calls);
    if (o->num_features < 0 || o->num_features > (1 << 24))
        return dt_error(DT_ERR_INVALID, "--num-features: must be in 0..16777216, got %d",
                        o->num_features);
    if (o->index_base != 0 && o->index_base != 1)
        return dt_error(DT_ERR_INVALID, "--index-base: must be 0 or 1, got %d", o->index_base);
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
    if ((st = dt_optim_config_check(cfg)))
        return dt_error_prefix(st, "optimizer flags");
    return DT_OK;
}

static dt_status load_model_spec(const struct train_opts *o, const int shape[3], const char *source,
                                 dt_model_spec *spec)
{
    dt_status st = o->model_file ? dt_model_spec_from_json_file(o->model_file, spec)
                                 : dt_model_spec_builtin(o->model, spec);
    if (st)
        return o->model_file ? st : dt_error_prefix(st, "--model");
    if (spec->input_shape[0] == 0) {
        memcpy(spec->input_shape, shape, 3 * sizeof *shape);
    } else if (memcmp(spec->input_shape, shape, 3 * sizeof *shape) != 0) {
        return dt_error(DT_ERR_INVALID, "%s: input_shape is [%d, %d, %d] but %s gives %dx%dx%d "
                        "inputs", o->model_file, spec->input_shape[0], spec->input_shape[1],
                        spec->input_shape[2], source, shape[0], shape[1], shape[2]);
    }
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

static dt_status write_metrics(const char *path, const struct train_opts *o, int threads,
                               const dt_fit_result *r, double test_loss, double test_acc,
                               bool have_test, dt_model *m)
{
    dt_status st = DT_OK;
    cJSON *j = cJSON_CreateObject();
    char *text = NULL;
    if (!j)
        return dt_error(DT_ERR_NOMEM, "no memory for metrics");
    double sps = r->train_seconds > 0 ? (double)r->samples / r->train_seconds : 0.0;
    cJSON_AddNumberToObject(j, "samples_per_sec", sps);
    cJSON_AddNumberToObject(j, "epochs", r->epochs);
    cJSON_AddNumberToObject(j, "steps", (double)r->steps);
    cJSON_AddNumberToObject(j, "samples", (double)r->samples);
    cJSON_AddNumberToObject(j, "train_seconds", r->train_seconds);
    cJSON_AddNumberToObject(j, "comm_seconds", r->comm_seconds);
    cJSON_AddNumberToObject(j, "final_loss", r->final_loss);
    cJSON_AddNumberToObject(j, "final_accuracy", r->final_accuracy);
    if (have_test) {
        cJSON_AddNumberToObject(j, "test_loss", test_loss);
        cJSON_AddNumberToObject(j, "test_accuracy", test_acc);
    } else {
        cJSON_AddNullToObject(j, "test_loss");
        cJSON_AddNullToObject(j, "test_accuracy");
    }
    cJSON_AddNumberToObject(j, "peak_rss_mb", dt_peak_rss_mb());
    cJSON_AddNumberToObject(j, "threads", threads);
    cJSON_AddNumberToObject(j, "prefetch", o->prefetch);
    cJSON_AddNumberToObject(j, "batch_size", o->batch_size);
    cJSON_AddStringToObject(j, "model", dt_model_spec_of(m)->name);
    cJSON_AddStringToObject(j, "strategy", o->strategy);
    cJSON_AddNumberToObject(j, "workers", o->n_workers);
    cJSON_AddBoolToObject(j, "stopped_early", r->stopped_early);
    cJSON_AddNumberToObject(j, "resumed_step", (double)r->resumed_step);
    cJSON_AddNumberToObject(j, "checkpoints", (double)r->checkpoints);
    cJSON_AddNumberToObject(j, "checkpoint_seconds", r->checkpoint_seconds);
    cJSON_AddNumberToObject(j, "param_count", (double)dt_arena_payload_elems(dt_model_params(m)));
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", dt_arena_checksum(dt_model_params(m)));
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

/* ---- The input: in-memory images or file pipelines, both as datasets of batches ---- */

/* When the workers on this machine have a thread on every core, a prefetch thread would have
 * no core of its own, and each hand-off wakes it on a core a worker needs (in lock-step, the
 * other workers then wait too). The pipeline then runs on the worker's own thread, between
 * steps, unless --prefetch says otherwise: 2 workers of the tutorial CNN on 2 cores read a batch
 * in 40 us so, against 50 to 120 us from a prefetch thread. */
static void inline_input_when_cores_are_taken(struct train_opts *o, const flag_def *flags,
                                              int n_flags)
{
    if (!flags_find(flags, n_flags, "prefetch")->set)
        o->prefetch = 0;
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
    io->num_features = o->num_features;
    io->index_base = o->index_base;
    io->csv_header = o->csv_header;
    io->label_column = o->label_column;
    io->input_shape = o->input_shape;
    return DT_OK;
}

/* The training and test specs: --test-data, "none", or the t10k half beside directory data. */
static dt_status input_specs(const struct train_opts *o, dt_input_spec *train,
                             dt_input_spec *test, bool *have_test)
{
    *have_test = false;
    dt_status st = dt_input_spec_parse(o->data, "--data", train);
    if (st)
        return st;
    if (o->test_data && strcmp(o->test_data, "none") == 0)
        return DT_OK;
    if (!o->test_data) {
        dt_input_spec_default_test(train, test, have_test);
        return DT_OK;
    }
    *have_test = true;
    return dt_input_spec_parse(o->test_data, "--test-data", test);
}

/* This worker's input (its block of every global batch) and the chief's test input. */
static dt_status open_input(const struct train_opts *o, const dt_input_options *io,
                            dt_input *in)
{
    dt_input_spec train, test;
    bool have_test;
    dt_status st = input_specs(o, &train, &test, &have_test);
    if (st)
        return st;
    dt_input_context ctx = {o->n_workers, o->rank, o->n_workers};
    return dt_input_open(&train, have_test ? &test : NULL, io, &ctx, in);
}

/* ---- The replicas ---- */

/* One replica's training, run by dt_strategy_run on every replica of this process. The
 * process's first replica has the model, data and optimizer cmd_train prepared, and the chief
 * among the replicas reports. Other local replicas (mirrored and central_storage, on threads)
 * build their own model, with the variables their strategy gives them, and their own block of
 * every global batch (the chief's images are shared, read-only). */
struct replica_run {
    struct train_opts o;
    const dt_model_spec *spec;
    const dt_optim_config *ocfg;
    dt_fit_config fcfg;
    dt_input *chief_in;
    dt_input_options io;  /* how the chief's input was built */
    dt_model *chief_model;
    dt_optim *chief_opt;
    dt_pool *chief_pool;
    bool local_replicas;  /* replicas on threads of this process */
    int threads;
    dt_fit_result chief_res;
};

static dt_status other_local_replica(struct replica_run *m, dt_replica *r)
{
    int id = dt_replica_id(r);
    dt_fit_config fcfg = m->fcfg;
    fcfg.progress = NULL;
    fcfg.log = NULL;
    fcfg.validate = false;
    struct train_opts o = m->o;
    o.rank = id;
    dt_input in;
    dt_pool *pool = NULL;
    dt_model *model = NULL;
    dt_optim opt;
    dt_optim_init(&opt);
    dt_input_context ctx = {o.n_workers, id, o.n_workers};
    dt_status st = dt_input_open_replica(m->chief_in, &m->io, &ctx, &in);
    dt_model_options mopts = {.no_fuse = o.no_fuse};
    dt_fit_result res;
    if (st || (st = dt_pool_create(m->threads, &pool)) ||
        (st = dt_model_create(m->spec, m->chief_in->eval_batch, pool, &mopts, &model)) ||
        (st = dt_replica_create_variables(r, model, m->chief_model, &opt, m->ocfg,
                                          (uint64_t)o.seed)))
        goto done;
    st = dt_fit_replica(r, model, &opt, pool, in.train, NULL, &fcfg, &res);
done:
    dt_optim_free(&opt);
    dt_model_destroy(model);
    dt_pool_destroy(pool);
    dt_input_free(&in);
    return st;
}

static dt_status train_replica(void *ctx, dt_replica *r)
{
    struct replica_run *m = ctx;
    if (m->local_replicas && dt_replica_id(r) > 0)
        return other_local_replica(m, r);
    /* Only the chief evaluates: the other workers' fit has no test data. */
    bool chief = dt_replica_id(r) == 0;
    return dt_fit_replica(r, m->chief_model, m->chief_opt, m->chief_pool, m->chief_in->train,
                          chief ? m->chief_in->test : NULL, &m->fcfg, &m->chief_res);
}

/* This task's place in TF_CONFIG's cluster (with --task), read once whatever the flags: a
 * TF_CONFIG that is not valid is an error naming its field, never a silent run alone. Over
 * mpi, mpirun names the cluster and TF_CONFIG is not read. */
typedef struct {
    bool evaluator;    /* this task is the cluster's evaluator */
    bool ps;           /* this task is a ps task */
    bool has_ps;       /* the cluster names ps tasks */
    int n_workers;     /* training tasks */
} task_place;

static dt_status read_task_place(const struct train_opts *o, task_place *p)
{
    memset(p, 0, sizeof *p);
    p->n_workers = 1;
    if (strcmp(o->comm.backend, "tcp") != 0)
        return DT_OK;
    dt_cluster c;
    memset(&c, 0, sizeof c);
    dt_status st = dt_cluster_from_env(&c);
    if (st == DT_OK && o->comm.task)
        st = dt_cluster_set_task(&c, o->comm.task);
    if (st == DT_OK && c.has_cluster) {
        p->evaluator = c.task_type == DT_JOB_EVALUATOR;
        p->ps = c.task_type == DT_JOB_PS;
        p->has_ps = c.n_tasks[DT_JOB_PS] > 0;
        p->n_workers = c.n_workers;
    }
    dt_cluster_free(&c);
    return st;
}

/* The evaluator task of a cluster: TF's sidecar evaluator over the chief's --model-dir. */
static int run_as_evaluator(const struct train_opts *o)
{
    if (!o->model_dir)
        return cli_fail(2, "the evaluator task evaluates the checkpoints of --model-dir: give it");
    const char *test = o->test_data;
    dt_input_spec train;
    if (!test && dt_input_spec_parse(o->data, "--data", &train) == DT_OK &&
        train.kind == DT_INPUT_MNIST_DIR)
        test = o->data; /* the t10k files beside the training data */
    if (!test || strcmp(test, "none") == 0)
        return cli_fail(2, "the evaluator task needs --test-data");
    dt_evaluator_options eo;
    dt_evaluator_options_default(&eo);
    eo.model_dir = o->model_dir, eo.watch = true, eo.test_data = test, eo.out = stdout;
    eo.log = stderr;
    return cli_sidecar_evaluate(&eo);
}

int cmd_train(int argc, char **argv)
{
    struct train_opts o;
    flag_def flags[96];
    int n_flags = define_flags(flags, (int)(sizeof flags / sizeof flags[0]), &o);
    int rc = 1;
    dt_input in;
    memset(&in, 0, sizeof in);
    dt_pool *pool = NULL;
    dt_model *model = NULL;
    dt_optim opt;
    dt_optim_init(&opt);

    if (flags_parse(flags, n_flags, argc, argv))
        return usage_error();
    if (o.help) {
        printf("usage: dtrain train [flags]\n\nTrains a model in this process.\n\nflags:\n");
        flags_print_help(flags, n_flags, stdout);
        return 0;
    }
    dt_optim_config ocfg;
    int64_t shuffle_buffer = 0;
    dt_input_options io;
    if (check_ranges(&o, flags, n_flags) || parse_shuffle_buffer(o.shuffle_buffer, &shuffle_buffer) ||
        build_optim_config(&o, flags, n_flags, &ocfg) || input_options(&o, shuffle_buffer, &io))
        return usage_error();
    int threads = flags_find(flags, n_flags, "threads")->set ? o.threads : dt_cpu_count();
    dt_cluster cluster;
    memset(&cluster, 0, sizeof cluster);
    dt_comm *comm = NULL;
    dt_status st = DT_OK;
    o.n_workers = 1, o.rank = 0;
    task_place place;
    if ((st = read_task_place(&o, &place)))
        goto fail;
    if (place.evaluator)
        return run_as_evaluator(&o);
    if (place.ps || place.has_ps)
        return cli_fail(2, place.ps
                               ? "this task is a ps task of TF_CONFIG's cluster: ps tasks serve "
                                 "--strategy parameter_server, which this build does not have "
                                 "yet (run the cluster without ps tasks)"
                               : "TF_CONFIG's cluster names ps tasks: they serve --strategy "
                                 "parameter_server, which this build does not have yet (run "
                                 "the cluster without ps tasks)");
    /* As TF: a TF_CONFIG cluster of several workers (or MPI) means multi_worker_mirrored. */
    if (!flags_find(flags, n_flags, "strategy")->set &&
        (strcmp(o.comm.backend, "mpi") == 0 || place.n_workers > 1))
        o.strategy = "multi_worker_mirrored";
    if (strcmp(o.strategy, "multi_worker_mirrored") == 0) {
        if ((st = dt_comm_open(&o.comm, &cluster, &comm)))
            goto fail;
        o.n_workers = comm->size, o.rank = comm->rank;
        if (o.batch_size % o.n_workers != 0) {
            st = dt_error(DT_ERR_INVALID, "--batch-size: the global batch %d is not divisible by "
                          "the %d workers", o.batch_size, o.n_workers);
            goto fail;
        }
        /* Workers on one machine share out its cores, as mirrored replicas do: with every core
         * each, their threads would take turns on each core, each waiting on the others. */
        int local = dt_comm_local_ranks(comm);
        if (!flags_find(flags, n_flags, "threads")->set && local > 1)
            threads = threads / local > 0 ? threads / local : 1;
        if (local > 1 && local * threads >= dt_cpu_count())
            inline_input_when_cores_are_taken(&o, flags, n_flags);
    }
    bool on_threads = strcmp(o.strategy, "mirrored") == 0 ||
                      strcmp(o.strategy, "central_storage") == 0;
    if (on_threads) {
        o.n_workers = flags_find(flags, n_flags, "replicas")->set ? o.replicas : dt_cpu_count();
        /* The cores are shared out: each replica's kernels run on its own threads. */
        threads = threads / o.n_workers > 0 ? threads / o.n_workers : 1;
        if (o.batch_size % o.n_workers != 0) {
            st = dt_error(DT_ERR_INVALID, "--batch-size: the global batch %d is not divisible by "
                          "the %d replicas", o.batch_size, o.n_workers);
            goto fail;
        }
    }
    /* Only the chief reports: progress, evaluation, the summary and the metrics. */
    bool chief = o.rank == 0;

    dt_fit_config fcfg;
    dt_fit_config_default(&fcfg);
    fcfg.epochs = o.epochs;
    /* --max-steps alone trains for that many steps, as Estimator's max_steps, over as many
     * passes of the data as it takes. */
    if (o.max_steps > 0 && !flags_find(flags, n_flags, "epochs")->set)
        fcfg.epochs = INT32_MAX;
    fcfg.steps_per_epoch = o.steps_per_epoch;
    fcfg.max_steps = o.max_steps;
    fcfg.batch_size = o.batch_size;
    fcfg.seed = (uint64_t)o.seed;
    fcfg.shuffle_buffer = shuffle_buffer;
    fcfg.prefetch = o.prefetch;
    fcfg.keep_remainder = o.keep_remainder;
    fcfg.reduction = strcmp(o.loss_reduction, "mean") == 0 ? DT_REDUCTION_MEAN : DT_REDUCTION_SUM_OVER_GLOBAL;
    fcfg.progress = strcmp(o.progress, "none") == 0 || !chief ? NULL : stdout;
    fcfg.early_stopping_patience = o.early_stopping_patience;
    if (strcmp(o.progress, "estimator") == 0)
        fcfg.log_step_count_steps = o.log_step_count_steps;
    fcfg.early_stopping_min_delta = o.early_stopping_min_delta;
    fcfg.eval_every_steps = o.eval_every_steps;
    fcfg.eval_throttle_secs = o.eval_throttle_secs;
    fcfg.eval_start_delay_secs = o.eval_start_delay_secs;
    fcfg.eval_steps = o.eval_steps;
    fcfg.model_dir = o.model_dir;
    fcfg.save_checkpoints_steps = o.save_checkpoints_steps;
    fcfg.save_checkpoints_secs = o.save_checkpoints_secs;
    fcfg.keep_checkpoint_max = o.keep_checkpoint_max;
    fcfg.keep_checkpoint_every_n_hours = o.keep_checkpoint_every_n_hours;
    fcfg.save_summary_steps = o.save_summary_steps;
    fcfg.backup_dir = o.backup_dir;
    fcfg.restore_path = o.restore_checkpoint;
    parse_backup_freq(o.backup_freq, &fcfg.backup_freq); /* checked with the other flags */
    fcfg.log = chief ? stdout : NULL;
    fcfg.progress_bar = strcmp(o.progress, "bar") == 0 ||
                        (strcmp(o.progress, "auto") == 0 && dt_progress_bar_wanted(stdout));

    dt_model_spec spec;
    if ((st = input_options(&o, shuffle_buffer, &io)) || /* --prefetch may have changed */
        (st = open_input(&o, &io, &in)) ||
        (st = load_model_spec(&o, in.shape, in.source, &spec)))
        goto fail;
    fcfg.validate = o.validate && in.test && chief;
    bool periodic_eval = o.eval_every_steps > 0 || o.eval_throttle_secs > 0.0;
    if (periodic_eval && !in.test) {
        st = dt_error(DT_ERR_INVALID, "--eval-every-steps, --eval-throttle-secs: there is no test "
                      "data to evaluate on (--test-data)");
        goto fail;
    }
    if (in.n_train >= 0)
        fcfg.expected_steps_per_epoch = dt_fit_batches_per_epoch(&fcfg, in.n_train);
    if ((st = dt_fit_check(&fcfg, in.n_train))) {
        dt_error_prefix(st, "%s", in.source);
        goto fail;
    }
    if ((st = dt_pool_create(threads, &pool)))
        goto fail;
    /* No batch is larger than the training set: size the buffers for what will be used. */
    dt_model_options mopts = {.no_fuse = o.no_fuse};
    if ((st = dt_model_create(&spec, in.eval_batch, pool, &mopts, &model)))
        goto fail;
    /* In-memory images are checked whole before training, so a bad label is named by its file
     * and offset rather than met half-way through an epoch. */
    if (in.train_images.n > 0 && ((st = dt_check_dataset(model, &in.train_images)) ||
                                  (in.test && (st = dt_check_dataset(model, &in.test_images)))))
        goto fail;
    dt_model_init_params(model, (uint64_t)o.seed);
    if ((st = dt_optim_setup(&opt, &ocfg, dt_model_params(model))))
        goto fail;
    if (o.summary && chief)
        dt_model_summary(model, stdout);
    if (o.n_workers > 1 && chief)
        printf("%s: %d %s (%s), %d examples per %s per step\n", o.strategy, o.n_workers,
               on_threads ? "replicas" : "workers", on_threads ? "local" : dt_comm_describe(comm),
               o.batch_size / o.n_workers, on_threads ? "replica" : "worker");

    dt_strategy_options sopts;
    dt_strategy_options_default(&sopts);
    sopts.replicas = on_threads ? o.n_workers : 1;
    sopts.timeout = o.comm.timeout;
    sopts.comm = comm;
    sopts.bucket_bytes = (size_t)(o.bucket_mb * 1048576.0);
    dt_wire_dtype_parse(o.gradient_wire, &sopts.wire); /* checked with the other flags */
    dt_strategy_kind kind = DT_STRATEGY_ONE_DEVICE;
    dt_strategy_parse(o.strategy, &kind); /* checked with the other flags */
    struct replica_run run = {.o = o, .spec = &spec, .ocfg = &ocfg, .fcfg = fcfg,
                              .chief_in = &in, .io = io, .chief_model = model, .chief_opt = &opt,
                              .chief_pool = pool, .local_replicas = on_threads,
                              .threads = threads};
    dt_strategy *strategy = NULL;
    if ((st = dt_strategy_create(kind, &sopts, &strategy)))
        goto fail;
    st = dt_strategy_run(strategy, train_replica, &run);
    dt_strategy_destroy(strategy);
    dt_fit_result res = run.chief_res;
    if (st)
        goto fail;
    if (!chief) {
        rc = 0; /* the chief evaluates and reports for the cluster */
        goto fail;
    }
    double test_loss = res.val_loss, test_acc = res.val_accuracy;
    /* The report's test figures cover the whole test set, which --eval-steps may not have. */
    if (in.test && (!res.validated || o.eval_steps > 0) &&
        ((st = dt_dataset_reset(in.test)) ||
         (st = dt_evaluate_dataset(model, in.test, &test_loss, &test_acc))))
        goto fail;
    double sps = res.train_seconds > 0 ? (double)res.samples / res.train_seconds : 0.0;
    printf("Trained %lld steps (%lld examples) in %.2f s: %.0f samples/s on %d thread%s\n",
           (long long)(res.steps - res.resumed_step), (long long)res.samples, res.train_seconds, sps, threads,
           threads == 1 ? "" : "s");
    if (in.test)
        printf("Test loss: %.4f - test accuracy: %.4f\n", test_loss, test_acc);
    if (in.bad_records)
        printf("Skipped %lld bad records\n", (long long)in.bad_records);
    fflush(stdout); /* the report first, should the metrics go to stdout too */
    if (o.metrics_out && (st = write_metrics(o.metrics_out, &o, threads, &res, test_loss, test_acc,
                                             in.test != NULL, model)))
        goto fail;
    /* A full disk or a closed pipe on stdout is a failure, not a success with lost output. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        st = dt_error(DT_ERR_IO, "stdout: write failed: %s", strerror(errno));
        goto fail;
    }
    rc = 0;
fail:
    if (rc != 0)
        cli_fail(1, dt_last_error());
    dt_optim_free(&opt);
    dt_model_destroy(model);
    dt_pool_destroy(pool);
    dt_input_free(&in);
    dt_comm_destroy(comm);
    dt_cluster_free(&cluster);
    return rc;
}
