/* The sidecar evaluator (TF's SidecarEvaluator) and the evaluation of one checkpoint: the model
 * is built from a checkpoint's model_spec metadata, its parameters restored, and evaluated on the
 * test data, reported as Estimator reports (see include/dtrain/evaluator.h). */
#include "dtrain/evaluator.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "dtrain/checkpoint.h"
#include "../core/fileio.h"
#include "../core/clock.h"
#include "dtrain/fit.h"
#include "dtrain/features.h"
#include "dtrain/saved_model.h"
#include "dtrain/input.h"
#include "fit_ckpt.h"
#include "../data/input_int.h"
#include "dtrain/model.h"
#include "dtrain/pool.h"
#include "dtrain/summary.h"

/* One pass over the test data: images in memory are checked whole first, so a bad label is
 * named by its file and offset; the width of file data's rows before any batch. */
static dt_status evaluate_input(dt_model *m, dt_input *test, dt_eval_metrics *r)
{
    size_t values = (size_t)test->shape[0] * test->shape[1] * test->shape[2];
    bool ctr = dt_model_spec_of(m)->arch != DT_ARCH_SEQUENTIAL;
    dt_status st = DT_OK;
    if (test->test_images.n > 0)
        st = dt_check_dataset(m, &test->test_images);
    else if (!ctr && values != dt_model_input_elems(m))
        st = dt_error(DT_ERR_INVALID, "test_data: %s gives %zu values per example; the "
                      "checkpoint's model %s takes %zu", test->source, values,
                      dt_model_spec_of(m)->name, dt_model_input_elems(m));
    if (st == DT_OK)
        st = dt_dataset_reset(test->test);
    if (st == DT_OK)
        st = dt_evaluate_metrics(m, test->test, 0, r);
    return st;
}

/* The evaluation's scalars for TensorBoard: loss and accuracy, and a binary model's AUC. */
static dt_status write_summaries(dt_summary_writer *sw, int64_t step, const dt_eval_metrics *r)
{
    dt_status st = dt_summary_scalar(sw, "loss", step, (float)r->loss);
    if (st == DT_OK)
        st = dt_summary_scalar(sw, "accuracy", step, (float)r->accuracy);
    if (st == DT_OK && isfinite(r->auc))
        st = dt_summary_scalar(sw, "auc", step, (float)r->auc);
    return st == DT_OK ? dt_summary_flush(sw) : st;
}

/* Evaluates c on test and reports as Estimator's evaluation does. */
static dt_status evaluate_one(const dt_evaluator_options *o, const dt_ckpt *c, dt_input *test,
                              const dt_saved_spec *sm, dt_pool *pool, dt_summary_writer *sw)
{
    dt_model *m;
    dt_status st = dt_saved_model_build(c, sm, o->batch_size, pool, &m);
    if (st)
        return st;
    dt_eval_metrics r;
    int64_t step = dt_saved_model_step(c);
    if ((st = evaluate_input(m, test, &r)) == DT_OK) {
        if (o->out) {
            fprintf(o->out, "Saving dict for global step %" PRId64 ": global_step = %" PRId64
                    ", loss = %.7g, accuracy = %.7g", step, step, r.loss, r.accuracy);
            if (isfinite(r.auc))
                fprintf(o->out, ", auc = %.7g, logloss = %.7g", r.auc, r.logloss);
            fputc('\n', o->out);
            fflush(o->out);
        }
        if (sw)
            st = write_summaries(sw, step, &r);
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
static dt_status watch(const dt_evaluator_options *o, dt_input *test, const dt_saved_spec *sm,
                       dt_pool *pool, dt_summary_writer *sw)
{
    const char *dir = o->model_dir;
    double poll_secs = o->poll_secs, idle_timeout = o->idle_timeout;
    int64_t last = -1;
    double last_news = dt_clock_now();
    for (;;) {
        dt_ckpt *c = NULL;
        dt_status st = dt_ckpt_open_latest(dir, NULL, &c);
        if (st != DT_OK && st != DT_END)
            return st;
        /* The final checkpoint may repeat the last step saved, with final = 1 added. */
        if (c && dt_saved_model_step(c) == last && is_final(c)) {
            dt_ckpt_close(c);
            return DT_OK;
        }
        if (c && dt_saved_model_step(c) > last) {
            last = dt_saved_model_step(c);
            last_news = dt_clock_now();
            st = evaluate_one(o, c, test, sm, pool, sw);
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

void dt_evaluator_options_default(dt_evaluator_options *o)
{
    memset(o, 0, sizeof *o);
    o->test_data = "fashion-mnist";
    o->batch_size = 1000;
    o->poll_secs = 1.0;
    o->idle_timeout = 3600.0;
}

dt_status dt_evaluator_options_check(const dt_evaluator_options *o)
{
    if (!o->model_dir && !o->checkpoint)
        return dt_error(DT_ERR_INVALID, "evaluate: give a model directory or a checkpoint");
    if (o->watch && (!o->model_dir || o->checkpoint))
        return dt_error(DT_ERR_INVALID, "evaluate: watching needs a model directory and no "
                        "checkpoint");
    if (o->batch_size < 1 || o->batch_size > 65536)
        return dt_error(DT_ERR_INVALID, "batch_size: must be in 1..65536, got %d", o->batch_size);
    if (!(o->poll_secs > 0.0 && o->poll_secs <= 3600.0))
        return dt_error(DT_ERR_INVALID, "poll_secs: must be in (0, 3600], got %g", o->poll_secs);
    if (!(o->idle_timeout >= 0.0))
        return dt_error(DT_ERR_INVALID, "idle_timeout: must not be negative, got %g",
                        o->idle_timeout);
    return o->input ? dt_input_options_check(o->input) : DT_OK;
}

/* The test pipeline: the data's own options (o->input) with the evaluation's batch. */
static dt_status open_test(const dt_evaluator_options *o, const dt_saved_spec *sm, dt_input *test)
{
    dt_input_options io;
    dt_input_options_for_batch(&io, o->input, o->batch_size);
    if (sm->parser)
        io.row_parser = dt_feature_parser_rows(sm->parser);
    dt_input_spec spec;
    dt_status st = dt_input_spec_parse(o->test_data, "test_data", &spec);
    if (st == DT_OK && sm->parser && !dt_input_spec_is_files(&spec))
        return dt_error(DT_ERR_INVALID, "test_data: a feature-spec model reads csv:, criteo: or "
                        "tfrecord: test data, not '%s'", o->test_data);
    return st ? st : dt_input_open_test(&spec, &io, test);
}

/* A watch started before the training: until its first checkpoint, or the adapted feature
 * spec its chief writes before that, there is nothing to tell what the model is. */
static dt_status await_first_output(const dt_evaluator_options *o)
{
    char spec[4400];
    snprintf(spec, sizeof spec, "%s/%s", o->model_dir, DT_FEATURE_SPEC_FILE);
    double start = dt_clock_now();
    for (;;) {
        dt_ckpt *c = NULL;
        dt_status st = dt_ckpt_open_latest(o->model_dir, NULL, &c);
        dt_ckpt_close(c);
        if (st == DT_OK || access(spec, F_OK) == 0)
            return DT_OK;
        if (st != DT_END)
            return st;
        if (o->idle_timeout > 0 && dt_clock_now() - start > o->idle_timeout)
            return dt_error(DT_ERR_TIMEOUT, "%s: no checkpoint for %.0f s (--watch-timeout)",
                            o->model_dir, o->idle_timeout);
        dt_sleep(o->poll_secs);
    }
}

dt_status dt_evaluate_checkpoints(const dt_evaluator_options *o)
{
    dt_input test;
    memset(&test, 0, sizeof test);
    dt_summary_writer *sw = NULL;
    dt_pool *pool = NULL;
    dt_ckpt *c = NULL;
    char eval_dir[4200], ckpt_dir[4200];
    dt_saved_spec sm;
    memset(&sm, 0, sizeof sm);
    dt_status st = dt_evaluator_options_check(o);
    /* Without a model directory, the checkpoint's own directory may hold the spec. */
    if (st == DT_OK && !o->model_dir)
        dt_path_dir(o->checkpoint, ckpt_dir, sizeof ckpt_dir);
    if (st == DT_OK && o->watch)
        st = await_first_output(o);
    if (st || (st = dt_saved_spec_open(o->model_dir ? o->model_dir : ckpt_dir, &sm)) ||
        (st = open_test(o, &sm, &test)) || (st = dt_pool_create(dt_cpu_count(), &pool)))
        goto fail;
    if (o->model_dir) {
        snprintf(eval_dir, sizeof eval_dir, "%s/eval", o->model_dir);
        if ((st = dt_summary_open(eval_dir, &sw)))
            goto fail;
    }
    if (o->watch) {
        st = watch(o, &test, &sm, pool, sw);
    } else {
        st = o->checkpoint ? dt_ckpt_open(o->checkpoint, &c)
                           : dt_ckpt_open_latest(o->model_dir, o->log, &c);
        if (st == DT_OK)
            st = evaluate_one(o, c, &test, &sm, pool, sw);
    }
fail:;
    dt_status close_st = dt_summary_close(sw);
    dt_ckpt_close(c);
    dt_pool_destroy(pool);
    dt_input_free(&test);
    dt_saved_spec_close(&sm);
    return st ? st : close_st;
}
