/* fit's configuration and its checks, and fit and train_and_evaluate over the training loop
 * (see include/dtrain/fit.h). */
#include "dtrain/fit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../data/image_pipeline.h"

void dt_fit_config_default(dt_fit_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->epochs = 1;
    cfg->batch_size = 64;
    cfg->seed = 1;
    cfg->shuffle_buffer = INT64_MAX;
    cfg->prefetch = 2;
}

dt_status dt_check_dataset(const dt_model *m, const dt_image_dataset *ds)
{
    const int *s = dt_model_spec_of(m)->input_shape;
    if (ds->h != s[0] || ds->w != s[1] || ds->c != s[2])
        return dt_error(DT_ERR_INVALID, "%s: images are %dx%dx%d but model %s takes %dx%dx%d",
                        ds->images_path, ds->h, ds->w, ds->c, dt_model_spec_of(m)->name, s[0],
                        s[1], s[2]);
    int K = dt_model_num_outputs(m), limit = K == 1 ? 2 : K;
    for (int i = 0; i < ds->n; i++)
        if (ds->labels[i] >= limit)
            return dt_error(DT_ERR_INVALID, "%s: offset %d: label %d, but the model has %d "
                            "output%s (labels 0..%d)", ds->labels_path, 8 + i, ds->labels[i], K,
                            K == 1 ? "" : "s", limit - 1);
    if (ds->n == 0)
        return dt_error(DT_ERR_INVALID, "%s: no examples", ds->images_path);
    return DT_OK;
}

int64_t dt_fit_batches_per_epoch(const dt_fit_config *cfg, int64_t n_examples)
{
    int64_t b = cfg->batch_size;
    return cfg->keep_remainder ? (n_examples + b - 1) / b : n_examples / b;
}

dt_status dt_fit_check(const dt_fit_config *cfg, int64_t n_examples)
{
    /* Each error names one field, first, as "field: ...": a program (the dtrain command) can
     * then say which of its own settings it was. */
    if (cfg->n_callbacks < 0 || cfg->n_callbacks > DT_FIT_MAX_CALLBACKS ||
        (cfg->n_callbacks > 0 && !cfg->callbacks))
        return dt_error(DT_ERR_INVALID, "n_callbacks: must be in 0..%d with callbacks set, got %d",
                        DT_FIT_MAX_CALLBACKS, cfg->n_callbacks);
    if (cfg->epochs < 1)
        return dt_error(DT_ERR_INVALID, "epochs: must be at least 1, got %d", cfg->epochs);
    if (cfg->batch_size < 1 || cfg->batch_size > (1 << 20))
        return dt_error(DT_ERR_INVALID, "batch_size: must be in 1..1048576, got %d",
                        cfg->batch_size);
    const struct {
        const char *field;
        int64_t value;
    } counts[] = {
        {"steps_per_epoch", cfg->steps_per_epoch},
        {"max_steps", cfg->max_steps},
        {"shuffle_buffer", cfg->shuffle_buffer},
        {"early_stopping_patience", cfg->early_stopping_patience},
        {"log_step_count_steps", cfg->log_step_count_steps},
        {"eval_every_steps", cfg->eval_every_steps},
        {"eval_steps", cfg->eval_steps},
        {"save_checkpoints_steps", cfg->save_checkpoints_steps},
        {"keep_checkpoint_max", cfg->keep_checkpoint_max},
        {"save_summary_steps", cfg->save_summary_steps},
        {"backup_freq", cfg->backup_freq},
    };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i].value < 0)
            return dt_error(DT_ERR_INVALID, "%s: must not be negative, got %lld", counts[i].field,
                            (long long)counts[i].value);
    if (cfg->prefetch < 0 || cfg->prefetch > 4096)
        return dt_error(DT_ERR_INVALID, "prefetch: must be in 0..4096, got %d", cfg->prefetch);
    const struct {
        const char *field;
        double value, max;
    } seconds[] = {
        {"early_stopping_min_delta", cfg->early_stopping_min_delta, INFINITY},
        {"eval_throttle_secs", cfg->eval_throttle_secs, 1e9},
        {"eval_start_delay_secs", cfg->eval_start_delay_secs, 1e9},
        {"save_checkpoints_secs", cfg->save_checkpoints_secs, INFINITY},
        {"keep_checkpoint_every_n_hours", cfg->keep_checkpoint_every_n_hours, INFINITY},
    };
    for (size_t i = 0; i < sizeof seconds / sizeof seconds[0]; i++) {
        if (!(seconds[i].value >= 0.0 && seconds[i].value <= seconds[i].max) &&
            seconds[i].max < INFINITY)
            return dt_error(DT_ERR_INVALID, "%s: must be in 0..%.0f, got %g", seconds[i].field,
                            seconds[i].max, seconds[i].value);
        if (!(seconds[i].value >= 0.0))
            return dt_error(DT_ERR_INVALID, "%s: must not be negative, got %g", seconds[i].field,
                            seconds[i].value);
    }
    if (n_examples >= 0 && !cfg->keep_remainder && n_examples < cfg->batch_size)
        return dt_error(DT_ERR_INVALID, "%lld examples make no full batch of %d (keep the "
                        "remainder or lower the batch size)", (long long)n_examples,
                        cfg->batch_size);
    return DT_OK;
}

dt_status dt_train_and_evaluate(dt_model *m, dt_optim *o, dt_pool *pool, dt_dataset *train,
                                dt_dataset *eval, const dt_fit_config *cfg, dt_fit_result *result)
{
    memset(result, 0, sizeof *result);
    if (cfg->max_steps <= 0)
        return dt_error(DT_ERR_INVALID, "train_and_evaluate: max_steps must be set (> 0)");
    dt_fit_config c = *cfg;
    c.epochs = INT32_MAX; /* Estimator's input repeats: training ends at max_steps */
    c.validate = false;
    c.early_stopping_patience = 0;
    if (c.log_step_count_steps <= 0)
        c.log_step_count_steps = 100;
    return dt_fit_dataset(m, o, pool, train, eval, &c, result);
}

dt_status dt_fit(dt_model *m, dt_optim *o, dt_pool *pool, const dt_image_dataset *train,
                 const dt_image_dataset *test, const dt_fit_config *cfg, dt_fit_result *result)
{
    memset(result, 0, sizeof *result);
    dt_dataset *train_p = NULL, *test_p = NULL;
    dt_status st = dt_check_dataset(m, train);
    if (st == DT_OK && test)
        st = dt_check_dataset(m, test);
    if (st == DT_OK)
        st = dt_fit_check(cfg, train->n);
    if (st)
        return st;
    int largest = cfg->batch_size < train->n ? cfg->batch_size : train->n;
    if (largest > dt_model_max_batch(m))
        return dt_error(DT_ERR_INVALID, "batches of %d exceed the model's maximum batch %d",
                        largest, dt_model_max_batch(m));
    dt_fit_config c = *cfg;
    c.expected_steps_per_epoch = dt_fit_batches_per_epoch(cfg, train->n);
    if ((st = dt_image_pipeline(train, cfg->batch_size, !cfg->keep_remainder, cfg->shuffle_buffer,
                                cfg->seed, cfg->prefetch, &train_p)))
        return st;
    if (test && (st = dt_image_pipeline(test, dt_model_max_batch(m), false, 0, 0, 0, &test_p)))
        goto fail;
    st = dt_fit_dataset(m, o, pool, train_p, test_p, &c, result);
fail:
    dt_dataset_destroy(train_p);
    dt_dataset_destroy(test_p);
    return st;
}
