/* Evaluation: mean loss and accuracy over batches (see include/dtrain/fit.h), and the checks a
 * batch passes before a model sees it, shared with the training step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/grow.h"
#include "batch.h"
#include "dtrain/fit.h"
#include "dtrain/metrics.h"

#include "../data/image_pipeline.h"

/* Labels of a batch as class indices, checked against the model's outputs. */
dt_status dt_batch_labels(const dt_model *m, const dt_elem *e, int32_t *labels)
{
    int K = dt_model_num_outputs(m), limit = K == 1 ? 2 : K;
    bool values = dt_model_float_targets(m);
    for (int r = 0; r < e->n; r++) {
        float v = e->labels[r];
        if (values) { /* the loss reads e's labels itself */
            if (!isfinite(v))
                return dt_error(DT_ERR_INVALID, "row %llu of the input: label %g is not a finite "
                                "number", (unsigned long long)(e->index + (uint64_t)r), v);
            labels[r] = 0;
            continue;
        }
        if (!(v >= 0.0f && v < (float)limit) || v != (float)(int32_t)v)
            return dt_error(DT_ERR_INVALID, "row %llu of the input: label %g, but the model takes "
                            "classes 0..%d", (unsigned long long)(e->index + (uint64_t)r), v,
                            limit - 1);
        labels[r] = (int32_t)v;
    }
    return DT_OK;
}

dt_status dt_check_batch(const dt_model *m, const dt_elem *e)
{
    /* A CTR model checks its fields itself, naming the example and the field. */
    if (dt_model_spec_of(m)->arch == DT_ARCH_SEQUENTIAL &&
        (size_t)e->n_dense != dt_model_input_elems(m))
        return dt_error(DT_ERR_INVALID, "the input gives %d values per example, model %s takes "
                        "%zu", e->n_dense, dt_model_spec_of(m)->name, dt_model_input_elems(m));
    if (e->n > dt_model_max_batch(m))
        return dt_error(DT_ERR_INVALID, "a batch of %d examples exceeds the model's maximum batch "
                        "%d", e->n, dt_model_max_batch(m));
    return DT_OK;
}

dt_status dt_evaluate_dataset(dt_model *m, dt_dataset *batches, double *loss, double *accuracy)
{
    return dt_evaluate_batches(m, batches, 0, loss, accuracy);
}

dt_status dt_evaluate_batches(dt_model *m, dt_dataset *batches, int64_t max_batches, double *loss,
                              double *accuracy)
{
    dt_eval_metrics r;
    dt_status st = dt_evaluate_metrics(m, batches, max_batches, &r);
    if (st == DT_OK)
        *loss = r.loss, *accuracy = r.accuracy;
    return st;
}

/* The logits and labels of every example seen, for AUC, which needs them all at once. */
typedef struct {
    float *scores, *labels;
    size_t n, cap;
} score_log;

static dt_status log_scores(score_log *s, const float *logits, const dt_elem *e)
{
    if (s->n + (size_t)e->n > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 65536;
        while (cap < s->n + (size_t)e->n)
            cap *= 2;
        if (!dt_grow_together((dt_grow_item[]){{&s->scores, sizeof *s->scores},
                                               {&s->labels, sizeof *s->labels}}, 2, cap))
            return dt_error(DT_ERR_NOMEM, "no memory for %zu evaluation scores", cap);
        s->cap = cap;
    }
    memcpy(s->scores + s->n, logits, (size_t)e->n * sizeof *logits);
    memcpy(s->labels + s->n, e->labels, (size_t)e->n * sizeof *e->labels);
    s->n += (size_t)e->n;
    return DT_OK;
}

/* A binary model's AUC, and its logloss (= its loss when that is binary cross-entropy). */
static bool is_binary(const dt_model *m)
{
    return dt_model_num_outputs(m) == 1 && dt_model_spec_of(m)->loss == DT_LOSS_BINARY_CROSSENTROPY;
}

dt_status dt_evaluate_metrics(dt_model *m, dt_dataset *batches, int64_t max_batches,
                              dt_eval_metrics *out)
{
    memset(out, 0, sizeof *out);
    out->auc = out->logloss = NAN;
    int32_t *labels = malloc((size_t)dt_model_max_batch(m) * sizeof *labels);
    if (!labels)
        return dt_error(DT_ERR_NOMEM, "no memory for evaluation");
    score_log log = {0};
    bool binary = is_binary(m);
    double loss_sum = 0.0;
    int64_t correct = 0, seen = 0;
    dt_status st = DT_OK;
    for (int64_t b = 0; max_batches <= 0 || b < max_batches; b++) {
        dt_elem *e;
        st = dt_dataset_next(batches, &e);
        if (st == DT_END) {
            st = DT_OK;
            break;
        }
        if (st)
            break;
        const float *logits = NULL;
        if (e->n > 0 && ((st = dt_check_batch(m, e)) || (st = dt_batch_labels(m, e, labels)) ||
                         (st = dt_model_forward_batch(m, e, false, &logits)) ||
                         (binary && (st = log_scores(&log, logits, e))))) {
            dt_elem_free(e);
            break;
        }
        if (e->n > 0) {
            int c = 0;
            loss_sum += dt_model_loss(m, e->n, labels, 0.0f, false, &c);
            correct += c;
            seen += e->n;
        }
        dt_elem_free(e);
    }
    free(labels);
    if (st == DT_OK && seen == 0)
        st = dt_error(DT_ERR_INVALID, "evaluation: the input has no examples");
    if (st == DT_OK) {
        out->loss = loss_sum / (double)seen;
        out->accuracy = (double)correct / (double)seen;
        out->examples = seen;
    }
    if (st == DT_OK && binary) {
        out->logloss = out->loss;
        /* One class only (a tiny evaluation set): AUC is undefined, and stays NaN. */
        double auc;
        if (dt_auc(log.scores, log.labels, log.n, &auc) == DT_OK)
            out->auc = auc;
        dt_error_clear();
    }
    free(log.scores);
    free(log.labels);
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

