/* fit / evaluate on an in-memory image dataset (see include/dtrain/fit.h). */
#include "dtrain/fit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/clock.h"
#include "dtrain/progress.h"
#include "dtrain/rng.h"

void dt_fit_config_default(dt_fit_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->epochs = 1;
    cfg->batch_size = 64;
    cfg->seed = 1;
    cfg->shuffle_buffer = INT64_MAX;
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

void dt_epoch_order(uint32_t *order, uint32_t *buffer, uint32_t n, int64_t shuffle_buffer,
                    uint64_t seed, int epoch)
{
    if (shuffle_buffer <= 1) {
        for (uint32_t i = 0; i < n; i++)
            order[i] = i;
        return;
    }
    dt_rng rng;
    dt_rng_derive(&rng, seed, 0x5348554646ull /* "SHUFF" */, (uint64_t)epoch);
    if (shuffle_buffer >= (int64_t)n) {
        for (uint32_t i = 0; i < n; i++)
            order[i] = i;
        dt_rng_shuffle_u32(&rng, order, n);
        return;
    }
    /* tf.data's shuffle: fill the buffer, emit a uniformly chosen element and put the next input
     * element in its place; once the input is exhausted, drain the buffer the same way. */
    uint32_t cap = (uint32_t)shuffle_buffer, count = 0, next = 0;
    while (count < cap && next < n)
        buffer[count++] = next++;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = (uint32_t)dt_rng_below(&rng, count);
        order[i] = buffer[j];
        if (next < n)
            buffer[j] = next++;
        else
            buffer[j] = buffer[--count];
    }
}

void dt_gather_batch(const dt_image_dataset *ds, const uint32_t *idx, int B, float *x,
                     int32_t *labels)
{
    /* v / 255 for each byte value, computed by division so the floats equal the tutorial's
     * `tf.cast(x, tf.float32) / 255`. */
    static float scale[256];
    static int ready;
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        for (int v = 0; v < 256; v++)
            scale[v] = (float)v / 255.0f;
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    size_t item = (size_t)ds->h * ds->w * ds->c;
    for (int b = 0; b < B; b++) {
        const uint8_t *src = ds->images + (size_t)idx[b] * item;
        float *dst = x + (size_t)b * item;
        for (size_t k = 0; k < item; k++)
            dst[k] = scale[src[k]];
        labels[b] = ds->labels[idx[b]];
    }
}

dt_status dt_evaluate(dt_model *m, const dt_image_dataset *ds, double *loss, double *accuracy)
{
    dt_status st = dt_check_dataset(m, ds);
    if (st)
        return st;
    int max_b = dt_model_max_batch(m);
    size_t item = dt_model_input_elems(m);
    float *x = malloc((size_t)max_b * item * sizeof *x);
    int32_t *labels = malloc((size_t)max_b * sizeof *labels);
    uint32_t *idx = malloc((size_t)max_b * sizeof *idx);
    if (!x || !labels || !idx) {
        st = dt_error(DT_ERR_NOMEM, "no memory for evaluation buffers");
        goto fail;
    }
    double loss_sum = 0.0;
    long correct = 0;
    for (int start = 0; start < ds->n; start += max_b) {
        int B = ds->n - start < max_b ? ds->n - start : max_b;
        for (int i = 0; i < B; i++)
            idx[i] = (uint32_t)(start + i);
        dt_gather_batch(ds, idx, B, x, labels);
        dt_model_forward(m, B, x, false);
        int c = 0;
        loss_sum += dt_model_loss(m, B, labels, 0.0f, false, &c);
        correct += c;
    }
    *loss = loss_sum / ds->n;
    *accuracy = (double)correct / ds->n;
fail:
    free(x);
    free(labels);
    free(idx);
    return st;
}

/* Asks the memory system for the images of the next batch, which sit at random places in an
 * array larger than the caches, so that they arrive while the current step computes. */
static void prefetch_images(const dt_image_dataset *ds, const uint32_t *idx, int B)
{
    size_t item = (size_t)ds->h * ds->w * ds->c;
    for (int b = 0; b < B; b++) {
        const uint8_t *src = ds->images + (size_t)idx[b] * item;
        for (size_t off = 0; off < item; off += 64)
            __builtin_prefetch(src + off);
    }
}

struct fit_state {
    float *x;
    int32_t *labels;
    uint32_t *order, *shuffle_buf;
};

static void fit_state_free(struct fit_state *s)
{
    free(s->x);
    free(s->labels);
    free(s->order);
    free(s->shuffle_buf);
}

/* One synchronous step on B examples; returns the batch's summed loss via *loss_sum. */
static dt_status train_step(dt_model *m, dt_optim *o, dt_pool *pool, int B, float grad_scale,
                            struct fit_state *s, int64_t step, double *loss_sum, int *n_correct)
{
    dt_model_forward(m, B, s->x, true);
    double loss = dt_model_loss(m, B, s->labels, grad_scale, true, n_correct);
    if (!isfinite(loss))
        return dt_error(DT_ERR_NUMERIC, "step %lld: the loss is %g: training diverged (try a "
                        "lower --lr)", (long long)step, loss);
    dt_model_zero_grads(m);
    dt_model_backward(m, B);
    dt_arena *params = dt_model_params(m);
    dt_optim_step(o, pool, params->data, dt_model_grads(m)->data, params->n_elems);
    *loss_sum = loss;
    return DT_OK;
}

static int64_t steps_in_epoch(const dt_fit_config *cfg, int n)
{
    int64_t b = cfg->batch_size;
    int64_t full = cfg->keep_remainder ? ((int64_t)n + b - 1) / b : (int64_t)n / b;
    if (cfg->steps_per_epoch > 0 && cfg->steps_per_epoch < full)
        full = cfg->steps_per_epoch;
    return full;
}

dt_status dt_fit_check(const dt_fit_config *cfg, int n_examples)
{
    if (cfg->epochs < 1)
        return dt_error(DT_ERR_INVALID, "epochs: must be at least 1, got %d", cfg->epochs);
    if (cfg->batch_size < 1)
        return dt_error(DT_ERR_INVALID, "batch_size: must be at least 1, got %d", cfg->batch_size);
    if (cfg->steps_per_epoch < 0 || cfg->max_steps < 0 || cfg->shuffle_buffer < 0)
        return dt_error(DT_ERR_INVALID, "steps_per_epoch, max_steps and shuffle_buffer must not be "
                        "negative");
    if (!cfg->keep_remainder && n_examples < cfg->batch_size)
        return dt_error(DT_ERR_INVALID, "%d examples make no full batch of %d (keep the remainder "
                        "or lower the batch size)", n_examples, cfg->batch_size);
    return DT_OK;
}

dt_status dt_fit(dt_model *m, dt_optim *o, dt_pool *pool, const dt_image_dataset *train,
                 const dt_image_dataset *test, const dt_fit_config *cfg, dt_fit_result *result)
{
    memset(result, 0, sizeof *result);
    struct fit_state s = {0};
    dt_status st = dt_check_dataset(m, train);
    if (st)
        return st;
    if (test && (st = dt_check_dataset(m, test)))
        return st;
    if ((st = dt_fit_check(cfg, train->n)))
        return st;
    int largest = cfg->batch_size < train->n ? cfg->batch_size : train->n;
    if (largest > dt_model_max_batch(m))
        return dt_error(DT_ERR_INVALID, "batches of %d exceed the model's maximum batch %d",
                        largest, dt_model_max_batch(m));
    int64_t per_epoch = steps_in_epoch(cfg, train->n);
    size_t item = dt_model_input_elems(m);
    s.x = malloc((size_t)cfg->batch_size * item * sizeof *s.x);
    s.labels = malloc((size_t)cfg->batch_size * sizeof *s.labels);
    s.order = malloc((size_t)train->n * sizeof *s.order);
    s.shuffle_buf = malloc((size_t)train->n * sizeof *s.shuffle_buf);
    if (!s.x || !s.labels || !s.order || !s.shuffle_buf) {
        st = dt_error(DT_ERR_NOMEM, "no memory for training buffers");
        goto fail;
    }
    dt_model_set_dropout_seed(m, cfg->seed);
    dt_progress prog;
    if (cfg->progress)
        dt_progress_init(&prog, cfg->progress, cfg->progress_bar);
    int64_t step = 0;
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        if (cfg->max_steps > 0 && step >= cfg->max_steps)
            break;
        int64_t total = per_epoch;
        if (cfg->max_steps > 0 && cfg->max_steps - step < total)
            total = cfg->max_steps - step;
        dt_epoch_order(s.order, s.shuffle_buf, (uint32_t)train->n, cfg->shuffle_buffer, cfg->seed,
                       epoch);
        if (cfg->progress)
            dt_progress_epoch_begin(&prog, epoch + 1, cfg->epochs, total);
        result->epochs = epoch + 1;
        double epoch_loss = 0.0, t0 = dt_clock_now();
        int64_t epoch_correct = 0, epoch_samples = 0;
        for (int64_t i = 0; i < total; i++) {
            int64_t start = i * cfg->batch_size;
            int B = (int)(train->n - start < cfg->batch_size ? train->n - start : cfg->batch_size);
            dt_gather_batch(train, s.order + start, B, s.x, s.labels);
            if (i + 1 < total) {
                int64_t next = start + cfg->batch_size;
                int nb = (int)(train->n - next < cfg->batch_size ? train->n - next : cfg->batch_size);
                prefetch_images(train, s.order + next, nb);
            }
            double loss_sum = 0.0;
            int correct = 0;
            float scale = 1.0f / (float)(cfg->reduction == DT_REDUCTION_MEAN ? B : cfg->batch_size);
            if ((st = train_step(m, o, pool, B, scale, &s, step, &loss_sum, &correct)))
                goto fail;
            step++;
            epoch_loss += loss_sum;
            epoch_correct += correct;
            epoch_samples += B;
            if (cfg->progress)
                dt_progress_step(&prog, i + 1, epoch_loss / epoch_samples,
                                 (double)epoch_correct / epoch_samples);
        }
        result->train_seconds += dt_clock_now() - t0;
        result->samples += epoch_samples;
        result->steps = step;
        result->final_loss = epoch_loss / epoch_samples;
        result->final_accuracy = (double)epoch_correct / epoch_samples;
        char extra[128] = "";
        if (cfg->validate && test) {
            if ((st = dt_evaluate(m, test, &result->val_loss, &result->val_accuracy)))
                goto fail;
            result->validated = true;
            snprintf(extra, sizeof extra, " - val_loss: %.4f - val_accuracy: %.4f",
                     result->val_loss, result->val_accuracy);
        }
        if (cfg->progress)
            dt_progress_epoch_end(&prog, total, result->final_loss, result->final_accuracy, extra);
    }
fail:
    fit_state_free(&s);
    return st;
}
