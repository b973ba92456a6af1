/* Binary-classification metrics of CTR models, over a whole evaluation set.
 *
 * AUC is exact: the probability that a random positive scores above a random negative, ties
 * counted half (the Mann-Whitney U statistic over average ranks), from one sort of the scores;
 * not the bucketed approximation of tf.keras.metrics.AUC (200 thresholds), whose value depends
 * on the bucketing. Logloss is the mean sigmoid cross-entropy computed from logits in the stable
 * form max(x, 0) - x y + log(1 + e^-|x|), as tf.nn.sigmoid_cross_entropy_with_logits. */
#ifndef DTRAIN_METRICS_H
#define DTRAIN_METRICS_H

#include <stddef.h>

#include "dtrain/api.h"
#include "dtrain/status.h"

/* scores (n): any real numbers (logits or probabilities: only their order matters); labels (n):
 * 0 or 1. DT_ERR_INVALID when a label is neither, a score is NaN, or a class is absent (the AUC
 * is undefined then). */
DT_API dt_status dt_auc(const float *scores, const float *labels, size_t n, double *auc);

/* The naive reference: every positive against every negative, O(n^2), for tests. */
DT_API double dt_auc_naive(const float *scores, const float *labels, size_t n);

/* Mean sigmoid cross-entropy of logits (n) against labels (n) in [0, 1]; DT_ERR_INVALID for
 * n = 0 or a label outside [0, 1]. */
DT_API dt_status dt_logloss_from_logits(const float *logits, const float *labels, size_t n,
                                        double *logloss);

#endif
