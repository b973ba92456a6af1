/* dtrain evaluate (one checkpoint, or a sidecar evaluator watching a model directory) and
 * dtrain inspect (a checkpoint's tensors and metadata). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "dtrain/checkpoint.h"
#include "dtrain/clock.h"
#include "dtrain/crc32c.h"
#include "dtrain/fit.h"
#include "dtrain/idx.h"
#include "dtrain/model.h"
#include "dtrain/pool.h"
#include "dtrain/summary.h"
#include "flags.h"

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* fashion-mnist[:DIR], mnist:DIR (their t10k files) or idx:IMAGES,LABELS. */
static dt_status load_test_images(const char *spec, dt_image_dataset *out)
{
    if (strcmp(spec, "fashion-mnist") == 0)
        return dt_image_dataset_load_mnist_dir(FASHION_MNIST_DIR, 0, out);
    if (strncmp(spec, "fashion-mnist:", 14) == 0 || strncmp(spec, "mnist:", 6) == 0)
        return dt_image_dataset_load_mnist_dir(strchr(spec, ':') + 1, 0, out);
    if (strncmp(spec, "idx:", 4) == 0) {
        const char *images = spec + 4, *comma = strchr(images, ',');
        char path[4096];
        if (!comma || comma == images || !comma[1] || (size_t)(comma - images) >= sizeof path)
            return dt_error(DT_ERR_INVALID, "--test-data: expected idx:IMAGES,LABELS, got '%s'",
                            spec);
        memcpy(path, images, (size_t)(comma - images));
        path[comma - images] = '\0';
        return dt_image_dataset_load(path, comma + 1, out);
    }
    return dt_error(DT_ERR_INVALID, "--test-data: '%s': evaluate reads fashion-mnist[:DIR], "
                    "mnist:DIR or idx:IMAGES,LABELS", spec);
}

/* Builds the checkpoint's model (its model_spec metadata) with its parameters. */
static dt_status model_of_checkpoint(const dt_ckpt *c, int batch, dt_pool *pool, dt_model **out)
{
    *out = NULL;
    const char *json = dt_ckpt_meta_get(c, "model_spec");
    if (!json)
        return dt_error(DT_ERR_FORMAT, "%s: __metadata__.model_spec: missing", dt_ckpt_path(c));
    dt_model_spec spec;
    dt_status st = dt_model_spec_from_json(json, dt_ckpt_path(c), &spec);
    if (st)
        return st;
    if (spec.input_shape[0] == 0)
        return dt_error(DT_ERR_FORMAT, "%s: __metadata__.model_spec: no input_shape",
                        dt_ckpt_path(c));
    dt_model *m;
    if ((st = dt_model_create(&spec, batch, pool, NULL, &m)))
        return st;
    if ((st = dt_ckpt_restore_arena(c, dt_model_params(m)))) {
        dt_model_destroy(m);
        return st;
    }
    *out = m;
    return DT_OK;
}

static int64_t step_of(const dt_ckpt *c)
{
    const char *v = dt_ckpt_meta_get(c, "global_step");
    return v ? strtoll(v, NULL, 10) : dt_ckpt_step_of_name(strrchr(dt_ckpt_path(c), '/')
                                                               ? strrchr(dt_ckpt_path(c), '/') + 1
                                                               : dt_ckpt_path(c));
}

/* Evaluates c on test and reports as Estimator's evaluation does. */
static dt_status evaluate_one(const dt_ckpt *c, const dt_image_dataset *test, int batch,
                              dt_pool *pool, dt_summary_writer *sw)
{
    dt_model *m;
    dt_status st = model_of_checkpoint(c, batch, pool, &m);
    if (st)
        return st;
    double loss = 0.0, acc = 0.0;
    int64_t step = step_of(c);
    if ((st = dt_check_dataset(m, test)) == DT_OK &&
        (st = dt_evaluate(m, test, &loss, &acc)) == DT_OK) {
        printf("Saving dict for global step %" PRId64 ": global_step = %" PRId64 ", loss = %.7g, "
               "accuracy = %.7g\n", step, step, loss, acc);
        fflush(stdout);
        if (sw && ((st = dt_summary_scalar(sw, "loss", step, (float)loss)) == DT_OK) &&
            (st = dt_summary_scalar(sw, "accuracy", step, (float)acc)) == DT_OK)
            st = dt_summary_flush(sw);
    }
    dt_model_destroy(m);
    return st;
}

static bool is_final(const dt_ckpt *c)
{
    const char *f = dt_ckpt_meta_get(c, "final");
    return f && strcmp(f, "1") == 0;
}

/* SidecarEvaluator: polls dir, evaluates the newest checkpoint whenever there is a newer one
 * than the last evaluated (skipping those in between), and stops after the final one. A
 * checkpoint that vanishes or fails to verify while it is read is passed over: the next poll
 * sees what is there then. */
static dt_status watch(const char *dir, const dt_image_dataset *test, int batch, dt_pool *pool,
                       dt_summary_writer *sw, double poll_secs, double idle_timeout)
{
    int64_t last = -1;
    double last_news = dt_clock_now();
    for (;;) {
        dt_ckpt *c = NULL;
        dt_status st = dt_ckpt_open_latest(dir, NULL, &c);
        if (st != DT_OK && st != DT_END)
            return st;
        /* The final checkpoint may repeat the last step saved, with final = 1 added. */
        if (c && step_of(c) == last && is_final(c)) {
            dt_ckpt_close(c);
            return DT_OK;
        }
        if (c && step_of(c) > last) {
            last = step_of(c);
            last_news = dt_clock_now();
            st = evaluate_one(c, test, batch, pool, sw);
            bool done = is_final(c);
            dt_ckpt_close(c);
            if (st)
                return st;
            if (done)
                return DT_OK;
            continue;
        }
        dt_ckpt_close(c);
        if (idle_timeout > 0 && dt_clock_now() - last_news > idle_timeout)
            return dt_error(DT_ERR_TIMEOUT, "%s: no new checkpoint for %.0f s (--watch-timeout)",
                            dir, idle_timeout);
        struct timespec ts = {(time_t)poll_secs, (long)((poll_secs - (double)(time_t)poll_secs) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

int cli_sidecar_evaluate(const char *model_dir, const char *test_spec, const char *checkpoint,
                         bool watch_dir, int batch, double poll_secs, double idle_timeout)
{
    dt_image_dataset test;
    memset(&test, 0, sizeof test);
    dt_summary_writer *sw = NULL;
    dt_pool *pool = NULL;
    dt_ckpt *c = NULL;
    int rc = 1;
    char eval_dir[4200];
    dt_status st = load_test_images(test_spec, &test);
    if (st || (st = dt_pool_create(dt_cpu_count(), &pool)))
        goto fail;
    if (model_dir) {
        snprintf(eval_dir, sizeof eval_dir, "%s/eval", model_dir);
        if ((st = dt_summary_open(eval_dir, &sw)))
            goto fail;
    }
    if (watch_dir) {
        st = watch(model_dir, &test, batch, pool, sw, poll_secs, idle_timeout);
    } else {
        st = checkpoint ? dt_ckpt_open(checkpoint, &c) : dt_ckpt_open_latest(model_dir, stderr, &c);
        if (st == DT_OK)
            st = evaluate_one(c, &test, batch, pool, sw);
    }
    if (st == DT_OK)
        rc = 0;
fail:
    if (st)
        cli_fail(1, dt_last_error());
    dt_status close_st = dt_summary_close(sw);
    if (rc == 0 && close_st) {
        cli_fail(1, dt_last_error());
        rc = 1;
    }
    dt_ckpt_close(c);
    dt_pool_destroy(pool);
    dt_image_dataset_free(&test);
    return rc;
}

int cmd_evaluate(int argc, char **argv)
{
    const char *model_dir, *checkpoint, *test_data;
    int batch;
    double poll, idle;
    bool watch_dir, help;
    flag_def flags[] = {
        {"model-dir", FLAG_STRING, NULL, "the training's --model-dir", &model_dir, false},
        {"checkpoint", FLAG_STRING, NULL, "evaluate this checkpoint file (default: the latest in "
         "--model-dir)", &checkpoint, false},
        {"watch", FLAG_BOOL, "false", "sidecar evaluator: evaluate each newer checkpoint of "
         "--model-dir as it appears, until the final one", &watch_dir, false},
        {"test-data", FLAG_STRING, "fashion-mnist", "fashion-mnist[:DIR], mnist:DIR or "
         "idx:IMAGES,LABELS", &test_data, false},
        {"batch-size", FLAG_INT, "1000", "examples per forward", &batch, false},
        {"poll-secs", FLAG_FLOAT, "1", "--watch: seconds between looks at --model-dir", &poll,
         false},
        {"watch-timeout", FLAG_FLOAT, "3600", "--watch: give up after this many seconds without a "
         "new checkpoint (0: never)", &idle, false},
        {"help", FLAG_BOOL, "false", "this text", &help, false},
    };
    int n_flags = (int)(sizeof flags / sizeof flags[0]);
    if (flags_parse(flags, n_flags, argc, argv))
        return cli_fail(2, dt_last_error());
    if (help) {
        printf("usage: dtrain evaluate --model-dir DIR [--checkpoint FILE] [--watch] [flags]\n\n"
               "Evaluates a checkpoint on the test data and prints Estimator's line\n"
               "`Saving dict for global step N: global_step = N, loss = L, accuracy = A`.\n\n"
               "flags:\n");
        flags_print_help(flags, n_flags, stdout);
        return 0;
    }
    if (!model_dir && !checkpoint)
        return cli_fail(2, "evaluate: give --model-dir DIR or --checkpoint FILE");
    if (watch_dir && (!model_dir || checkpoint))
        return cli_fail(2, "evaluate: --watch needs --model-dir and no --checkpoint");
    if (batch < 1 || batch > 65536)
        return cli_fail(2, "--batch-size: must be in 1..65536");
    if (!(poll > 0.0 && poll <= 3600.0) || !(idle >= 0.0))
        return cli_fail(2, "--poll-secs: must be in (0, 3600]; --watch-timeout: not negative");
    return cli_sidecar_evaluate(model_dir, test_data, checkpoint, watch_dir, batch, poll, idle);
}

/* ---- inspect ---- */

static void print_tensor(const dt_ckpt_tensor *t)
{
    char shape[128] = "[";
    for (int d = 0; d < t->n_dims; d++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%" PRId64,
                 d ? ", " : "", t->dims[d]);
    snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "]");
    printf("%-40s %-20s %-4s %10zu bytes  crc32c %08x\n", t->name, shape, t->dtype, t->n_bytes,
           dt_crc32c(t->data, t->n_bytes));
}

int cmd_inspect(int argc, char **argv)
{
    if (argc == 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        printf("usage: dtrain inspect CHECKPOINT|MODEL_DIR\n\nPrints every tensor's name, "
               "shape, dtype, size and CRC32C, then the metadata.\n");
        return 0;
    }
    if (argc != 1)
        return cli_fail(2, "usage: dtrain inspect CHECKPOINT|MODEL_DIR (dtrain inspect --help)");
    if (argv[0][0] == '-' && argv[0][1] == '-') {
        char msg[300];
        snprintf(msg, sizeof msg, "unknown flag '%.200s' (see dtrain inspect --help)", argv[0]);
        return cli_fail(2, msg);
    }
    struct stat sb;
    dt_ckpt *c = NULL;
    dt_status st = stat(argv[0], &sb) == 0 && S_ISDIR(sb.st_mode)
                       ? dt_ckpt_open_latest(argv[0], stderr, &c)
                       : dt_ckpt_open(argv[0], &c);
    if (st)
        return cli_fail(1, dt_last_error());
    size_t bytes = 0;
    for (int i = 0; i < dt_ckpt_n_tensors(c); i++)
        bytes += dt_ckpt_tensor_at(c, i)->n_bytes;
    printf("%s: %d tensors, %zu bytes of data\n", dt_ckpt_path(c), dt_ckpt_n_tensors(c), bytes);
    for (int i = 0; i < dt_ckpt_n_tensors(c); i++)
        print_tensor(dt_ckpt_tensor_at(c, i));
    printf("metadata:\n");
    for (int i = 0; i < dt_ckpt_n_meta(c); i++) {
        const char *k, *v;
        dt_ckpt_meta_at(c, i, &k, &v);
        printf("  %s = %s\n", k, v);
    }
    dt_ckpt_close(c);
    if (fflush(stdout) != 0 || ferror(stdout))
        return cli_fail(1, "stdout: write failed");
    return 0;
}
