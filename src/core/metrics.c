/* Binary-classification metrics (see include/dtrain/metrics.h). */
#include "dtrain/metrics.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "radix.h"

/* A score's bits as a key in the scores' order, in [0, 2^32): negative floats reversed below the
 * positive ones. -0 is taken as +0, which it equals. */
static int64_t order_key(float score)
{
    if (score == 0.0f)
        score = 0.0f;
    uint32_t b;
    memcpy(&b, &score, sizeof b);
    return b & 0x80000000u ? (uint32_t)~b : b | 0x80000000u;
}

dt_status dt_auc(const float *scores, const float *labels, size_t n, double *auc)
{
    /* Each example as its score's order key and its label, and the sort's other buffers. */
    size_t m = n ? n : 1;
    int64_t *keys = malloc(2 * m * sizeof *keys);
    uint32_t *labs = malloc(2 * m * sizeof *labs);
    if (!keys || !labs) {
        free(keys), free(labs);
        return dt_error(DT_ERR_NOMEM, "no memory for the AUC of %zu examples", n);
    }
    double positives = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (labels[i] != 0.0f && labels[i] != 1.0f) {
            free(keys), free(labs);
            return dt_error(DT_ERR_INVALID, "AUC: example %zu has label %g (0 or 1)", i,
                            (double)labels[i]);
        }
        if (isnan(scores[i])) {
            free(keys), free(labs);
            return dt_error(DT_ERR_INVALID, "AUC: example %zu has a NaN score", i);
        }
        keys[i] = order_key(scores[i]);
        labs[i] = labels[i] == 1.0f;
        positives += labels[i];
    }
    double negatives = (double)n - positives;
    if (positives == 0.0 || negatives == 0.0) {
        free(keys), free(labs);
        return dt_error(DT_ERR_INVALID, "AUC: the %zu examples have %s positive and %s negative: "
                        "the AUC is undefined", n, positives ? "a" : "no",
                        negatives ? "a" : "no");
    }
    dt_radix_sort_pairs(keys, labs, keys + n, labs + n, n, UINT32_MAX);
    /* Ranks from 1; a run of equal scores shares the mean of its ranks. */
    double positive_ranks = 0.0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        double in_run = 0.0;
        while (j < n && keys[j] == keys[i])
            in_run += (double)labs[j++];
        positive_ranks += in_run * ((double)(i + 1) + (double)j) / 2.0;
        i = j;
    }
    free(keys), free(labs);
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
