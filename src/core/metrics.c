/* Binary-classification metrics (see include/dtrain/metrics.h). */
#include "dtrain/metrics.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    float score;
    float label;
} scored;

static int by_score(const void *a, const void *b)
{
    float x = ((const scored *)a)->score, y = ((const scored *)b)->score;
    return (x > y) - (x < y);
}

dt_status dt_auc(const float *scores, const float *labels, size_t n, double *auc)
{
    scored *v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return dt_error(DT_ERR_NOMEM, "no memory for the AUC of %zu examples", n);
    double positives = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (labels[i] != 0.0f && labels[i] != 1.0f) {
            free(v);
            return dt_error(DT_ERR_INVALID, "AUC: example %zu has label %g (0 or 1)", i,
                            (double)labels[i]);
        }
        if (isnan(scores[i])) {
            free(v);
            return dt_error(DT_ERR_INVALID, "AUC: example %zu has a NaN score", i);
        }
        v[i] = (scored){scores[i], labels[i]};
        positives += labels[i];
    }
    double negatives = (double)n - positives;
    if (positives == 0.0 || negatives == 0.0) {
        free(v);
        return dt_error(DT_ERR_INVALID, "AUC: the %zu examples have %s positive and %s negative: "
                        "the AUC is undefined", n, positives ? "a" : "no",
                        negatives ? "a" : "no");
    }
    qsort(v, n, sizeof *v, by_score);
    /* Ranks from 1; a run of equal scores shares the mean of its ranks. */
    double positive_ranks = 0.0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        double in_run = 0.0;
        while (j < n && v[j].score == v[i].score)
            in_run += v[j++].label;
        positive_ranks += in_run * ((double)(i + 1) + (double)j) / 2.0;
        i = j;
    }
    free(v);
    *auc = (positive_ranks - positives * (positives + 1.0) / 2.0) / (positives * negatives);
    return DT_OK;
}

double dt_auc_naive(const float *scores, const float *labels, size_t n)
{
    double wins = 0.0, pairs = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (labels[i] != 1.0f)
            continue;
        for (size_t j = 0; j < n; j++) {
            if (labels[j] != 0.0f)
                continue;
            pairs += 1.0;
            wins += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0.0;
        }
    }
    return pairs > 0.0 ? wins / pairs : NAN;
}

dt_status dt_logloss_from_logits(const float *logits, const float *labels, size_t n,
                                 double *logloss)
{
    if (n == 0)
        return dt_error(DT_ERR_INVALID, "logloss: no examples");
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = logits[i], y = labels[i];
        if (!(y >= 0.0 && y <= 1.0))
            return dt_error(DT_ERR_INVALID, "logloss: example %zu has label %g (0..1)", i, y);
        sum += (x > 0.0 ? x : 0.0) - x * y + log1p(exp(-fabs(x)));
    }
    *logloss = sum / (double)n;
    return DT_OK;
}
