/* Binary-classification metrics (see include/dtrain/metrics.h). */
#include "dtrain/metrics.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A score's bits as an unsigned key in the scores' order: negative floats reversed below the
 * positive ones. -0 is taken as +0, which it equals. */
static uint64_t order_key(float score)
{
    if (score == 0.0f)
        score = 0.0f;
    uint32_t b;
    memcpy(&b, &score, sizeof b);
    return b & 0x80000000u ? (uint32_t)~b : b | 0x80000000u;
}

/* keys (n) sorted by their high 32 bits into order, a byte at a time from the lowest (radix
 * sort: linear, where a comparison sort of a million scores took most of an evaluation's AUC),
 * with tmp (n) as the other buffer. A byte that all keys share costs its count alone. Returns
 * the buffer that holds the sorted keys. */
static uint64_t *sort_by_high_word(uint64_t *keys, uint64_t *tmp, size_t n)
{
    size_t counts[4][256] = {{0}};
    for (size_t i = 0; i < n; i++)
        for (int d = 0; d < 4; d++)
            counts[d][(keys[i] >> (32 + 8 * d)) & 255]++;
    for (int d = 0; d < 4; d++) {
        if (counts[d][(keys[0] >> (32 + 8 * d)) & 255] == n)
            continue;
        size_t at = 0;
        for (int b = 0; b < 256; b++) {
            size_t c = counts[d][b];
            counts[d][b] = at;
            at += c;
        }
        for (size_t i = 0; i < n; i++)
            tmp[counts[d][(keys[i] >> (32 + 8 * d)) & 255]++] = keys[i];
        uint64_t *t = keys;
        keys = tmp, tmp = t;
    }
    return keys;
}

dt_status dt_auc(const float *scores, const float *labels, size_t n, double *auc)
{
    /* Each example as its score's order key over its label in bit 0. */
    uint64_t *v = malloc(2 * (n ? n : 1) * sizeof *v);
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
        v[i] = order_key(scores[i]) << 32 | (labels[i] == 1.0f);
        positives += labels[i];
    }
    double negatives = (double)n - positives;
    if (positives == 0.0 || negatives == 0.0) {
        free(v);
        return dt_error(DT_ERR_INVALID, "AUC: the %zu examples have %s positive and %s negative: "
                        "the AUC is undefined", n, positives ? "a" : "no",
                        negatives ? "a" : "no");
    }
    const uint64_t *sorted = sort_by_high_word(v, v + n, n);
    /* Ranks from 1; a run of equal scores shares the mean of its ranks. */
    double positive_ranks = 0.0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        double in_run = 0.0;
        while (j < n && sorted[j] >> 32 == sorted[i] >> 32)
            in_run += (double)(sorted[j++] & 1);
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
