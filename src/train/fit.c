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

/* ---- The image pipeline: indices, shuffled and batched, then gathered into pixels ---- */

/* in: a batch of index rows (range's exact ids); out: their images scaled to [0, 1] and their
 * class labels. */
static dt_status gather_images(void *ctx, dt_elem *in, dt_elem **out)
{
    const dt_image_dataset *ds = ctx;
    int item = ds->h * ds->w * ds->c;
    dt_elem *e = dt_elem_alloc(in->n, item, 0, 0);
    if (!e) {
        dt_elem_free(in);
        return dt_error(DT_ERR_NOMEM, "no memory for a batch of %d images", in->n);
    }
    uint32_t idx[256];
    int32_t labels[256];
    for (int done = 0; done < in->n; done += 256) {
        int chunk = in->n - done < 256 ? in->n - done : 256;
        for (int r = 0; r < chunk; r++)
            idx[r] = (uint32_t)in->sp_ids[in->sp_row[done + r]];
        dt_gather_batch(ds, idx, chunk, e->dense + (size_t)done * item, labels);
        for (int r = 0; r < chunk; r++)
            e->labels[done + r] = (float)labels[r];
    }
    e->index = in->index;
    dt_elem_free(in);
    *out = e;
    return DT_OK;
}

dt_status dt_image_pipeline(const dt_image_dataset *ds, int batch_size, bool drop_remainder,
                            int64_t shuffle_buffer, uint64_t seed, int prefetch, dt_dataset **out)
{
    dt_dataset *p;
    dt_status st = dt_dataset_range(0, ds->n, 1, &p);
    if (st == DT_OK && shuffle_buffer > 1)
        st = dt_dataset_shuffle(p, shuffle_buffer < ds->n ? shuffle_buffer : ds->n, seed, true, &p);
    if (st == DT_OK)
        st = dt_dataset_batch(p, batch_size, drop_remainder, &p);
    if (st == DT_OK)
        st = dt_dataset_map(p, gather_images, (void *)ds, 1, &p);
    if (st == DT_OK && prefetch > 0)
        st = dt_dataset_prefetch(p, prefetch, &p);
    *out = st == DT_OK ? p : NULL;
    return st;
}

/* ---- Evaluation ---- */

/* Labels of a batch as class indices, checked against the model's outputs. */
static dt_status batch_labels(const dt_model *m, const dt_elem *e, int32_t *labels)
{
    int K = dt_model_num_outputs(m), limit = K == 1 ? 2 : K;
    for (int r = 0; r < e->n; r++) {
        float v = e->labels[r];
        if (!(v >= 0.0f && v < (float)limit) || v != (float)(int32_t)v)
            return dt_error(DT_ERR_INVALID, "row %llu of the input: label %g, but the model takes "
                            "classes 0..%d", (unsigned long long)(e->index + (uint64_t)r), v,
                            limit - 1);
        labels[r] = (int32_t)v;
    }
    return DT_OK;
}

static dt_status check_batch(const dt_model *m, const dt_elem *e)
{
    if ((size_t)e->n_dense != dt_model_input_elems(m))
        return dt_error(DT_ERR_INVALID, "the input gives %d values per example, model %s takes "
                        "%zu", e->n_dense, dt_model_spec_of(m)->name, dt_model_input_elems(m));
    if (e->n > dt_model_max_batch(m))
        return dt_error(DT_ERR_INVALID, "a batch of %d examples exceeds the model's maximum batch "
                        "%d", e->n, dt_model_max_batch(m));
    return DT_OK;
}

dt_status dt_evaluate_dataset(dt_model *m, dt_dataset *batches, double *loss, double *accuracy)
{
    int32_t *labels = malloc((size_t)dt_model_max_batch(m) * sizeof *labels);
    if (!labels)
        return dt_error(DT_ERR_NOMEM, "no memory for evaluation");
    double loss_sum = 0.0;
    int64_t correct = 0, seen = 0;
    dt_status st;
    for (;;) {
        dt_elem *e;
        st = dt_dataset_next(batches, &e);
        if (st == DT_END) {
            st = DT_OK;
            break;
        }
        if (st)
            break;
        if ((st = check_batch(m, e)) || (st = batch_labels(m, e, labels))) {
            dt_elem_free(e);
            break;
        }
        dt_model_forward(m, e->n, e->dense, false);
        int c = 0;
        loss_sum += dt_model_loss(m, e->n, labels, 0.0f, false, &c);
        correct += c;
        seen += e->n;
        dt_elem_free(e);
    }
    free(labels);
    if (st == DT_OK && seen == 0)
        st = dt_error(DT_ERR_INVALID, "evaluation: the input has no examples");
    if (st == DT_OK) {
        *loss = loss_sum / (double)seen;
        *accuracy = (double)correct / (double)seen;
    }
    return st;
}

dt_status dt_evaluate(dt_model *m, const dt_image_dataset *ds, double *loss, double *accuracy)
{
    dt_status st = dt_check_dataset(m, ds);
    if (st)
        return st;
    dt_dataset *p;
    if ((st = dt_image_pipeline(ds, dt_model_max_batch(m), false, 0, 0, 0, &p)))
        return st;
    st = dt_evaluate_dataset(m, p, loss, accuracy);
    dt_dataset_destroy(p);
    return st;
}

/* ---- Training ---- */

/* One synchronous step on the batch e; returns the batch's summed loss via *loss_sum. */
static dt_status train_step(dt_model *m, dt_optim *o, dt_pool *pool, const dt_elem *e,
                            const int32_t *labels, float grad_scale, int64_t step,
                            double *loss_sum, int *n_correct)
{
    dt_model_forward(m, e->n, e->dense, true);
    double loss = dt_model_loss(m, e->n, labels, grad_scale, true, n_correct);
    if (!isfinite(loss))
        return dt_error(DT_ERR_NUMERIC, "step %lld: the loss is %g: training diverged (try a "
                        "lower --lr)", (long long)step, loss);
    dt_model_zero_grads(m);
    dt_model_backward(m, e->n);
    dt_arena *params = dt_model_params(m);
    dt_optim_step(o, pool, params->data, dt_model_grads(m)->data, params->n_elems);
    *loss_sum = loss;
    return DT_OK;
}

int64_t dt_fit_batches_per_epoch(const dt_fit_config *cfg, int64_t n_examples)
{
    int64_t b = cfg->batch_size;
    return cfg->keep_remainder ? (n_examples + b - 1) / b : n_examples / b;
}

dt_status dt_fit_check(const dt_fit_config *cfg, int64_t n_examples)
{
    if (cfg->epochs < 1)
        return dt_error(DT_ERR_INVALID, "epochs: must be at least 1, got %d", cfg->epochs);
    if (cfg->batch_size < 1)
        return dt_error(DT_ERR_INVALID, "batch_size: must be at least 1, got %d", cfg->batch_size);
    if (cfg->steps_per_epoch < 0 || cfg->max_steps < 0 || cfg->shuffle_buffer < 0 ||
        cfg->prefetch < 0)
        return dt_error(DT_ERR_INVALID, "steps_per_epoch, max_steps, shuffle_buffer and prefetch "
                        "must not be negative");
    if (n_examples >= 0 && !cfg->keep_remainder && n_examples < cfg->batch_size)
        return dt_error(DT_ERR_INVALID, "%lld examples make no full batch of %d (keep the "
                        "remainder or lower the batch size)", (long long)n_examples,
                        cfg->batch_size);
    return DT_OK;
}

dt_status dt_fit_dataset(dt_model *m, dt_optim *o, dt_pool *pool, dt_dataset *train,
                         dt_dataset *test, const dt_fit_config *cfg, dt_fit_result *result)
{
    memset(result, 0, sizeof *result);
    dt_status st = dt_fit_check(cfg, -1);
    if (st)
        return st;
    int32_t *labels = malloc((size_t)dt_model_max_batch(m) * sizeof *labels);
    if (!labels)
        return dt_error(DT_ERR_NOMEM, "no memory for training");
    dt_model_set_dropout_seed(m, cfg->seed);
    dt_progress prog;
    if (cfg->progress)
        dt_progress_init(&prog, cfg->progress, cfg->progress_bar);
    int64_t step = 0;
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        if (cfg->max_steps > 0 && step >= cfg->max_steps)
            break;
        if (epoch > 0 && (st = dt_dataset_reset(train)))
            goto fail;
        int64_t total = cfg->steps_per_epoch;
        if (cfg->max_steps > 0 && (total == 0 || cfg->max_steps - step < total))
            total = cfg->max_steps - step;
        if (cfg->progress)
            dt_progress_epoch_begin(&prog, epoch + 1, cfg->epochs,
                                    total > 0 ? total : cfg->expected_steps_per_epoch);
        result->epochs = epoch + 1;
        double epoch_loss = 0.0, t0 = dt_clock_now();
        int64_t epoch_correct = 0, epoch_samples = 0, i = 0;
        for (; total == 0 || i < total; i++) {
            dt_elem *e;
            st = dt_dataset_next(train, &e);
            if (st == DT_END)
                break;
            if (st)
                goto fail;
            double loss_sum = 0.0;
            int correct = 0;
            float scale = 1.0f / (float)(cfg->reduction == DT_REDUCTION_MEAN ? e->n : cfg->batch_size);
            if ((st = check_batch(m, e)) || (st = batch_labels(m, e, labels)) ||
                (st = train_step(m, o, pool, e, labels, scale, step, &loss_sum, &correct))) {
                dt_elem_free(e);
                goto fail;
            }
            step++;
            epoch_loss += loss_sum;
            epoch_correct += correct;
            epoch_samples += e->n;
            dt_elem_free(e);
            if (cfg->progress)
                dt_progress_step(&prog, i + 1, epoch_loss / epoch_samples,
                                 (double)epoch_correct / epoch_samples);
        }
        st = DT_OK;
        result->train_seconds += dt_clock_now() - t0;
        if (epoch_samples == 0) {
            st = dt_error(DT_ERR_INVALID, "epoch %d: the input gave no batch", epoch + 1);
            goto fail;
        }
        result->samples += epoch_samples;
        result->steps = step;
        result->final_loss = epoch_loss / epoch_samples;
        result->final_accuracy = (double)epoch_correct / epoch_samples;
        char extra[128] = "";
        if (cfg->validate && test) {
            if ((st = dt_dataset_reset(test)) ||
                (st = dt_evaluate_dataset(m, test, &result->val_loss, &result->val_accuracy)))
                goto fail;
            result->validated = true;
            snprintf(extra, sizeof extra, " - val_loss: %.4f - val_accuracy: %.4f",
                     result->val_loss, result->val_accuracy);
        }
        if (cfg->progress)
            dt_progress_epoch_end(&prog, i, result->final_loss, result->final_accuracy, extra);
    }
fail:
    free(labels);
    return st;
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
