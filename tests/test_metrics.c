/* AUC and logloss: the sorted, tie-averaged AUC equals the pairwise reference on random scores
 * with many ties, known small cases, undefined cases refused; logloss matches the direct formula
 * where it is stable and stays finite where it is not. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/metrics.h"
#include "dtrain/rng.h"
#include "test.h"

TEST(auc_equals_the_pairwise_reference_with_ties)
{
    dt_rng r;
    dt_rng_seed(&r, 11);
    for (int trial = 0; trial < 20; trial++) {
        size_t n = 50 + (size_t)dt_rng_below(&r, 400);
        float *s = malloc(n * sizeof *s), *y = malloc(n * sizeof *y);
        for (size_t i = 0; i < n; i++) {
            y[i] = (float)dt_rng_below(&r, 2);
            /* Few distinct scores, skewed by the label: many ties, an AUC away from 0.5. */
            s[i] = (float)dt_rng_below(&r, trial % 2 ? 7 : 1000) + (y[i] ? 2.0f : 0.0f);
        }
        y[0] = 1.0f, y[1] = 0.0f; /* both classes present */
        double auc = 0.0;
        CHECK_OK(dt_auc(s, y, n, &auc));
        double want = dt_auc_naive(s, y, n);
        CHECK_MSG(fabs(auc - want) < 1e-12, "trial %d: %.15f against %.15f", trial, auc, want);
        free(s);
        free(y);
    }
}

/* Scores of every sign and size (random bits but NaN, +-0, +-infinity, denormals), repeated
 * so that ties cross the sort's bytes: the radix order must be the floats' order, with -0 tied
 * to +0. */
TEST(auc_orders_every_kind_of_float_as_the_reference)
{
    dt_rng r;
    dt_rng_seed(&r, 12);
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-45f, -1e-45f, 1.0f, -1.0f};
    for (int trial = 0; trial < 12; trial++) {
        size_t n = 200 + (size_t)dt_rng_below(&r, 2500);
        float *s = malloc(n * sizeof *s), *y = malloc(n * sizeof *y);
        for (size_t i = 0; i < n; i++) {
            uint32_t bits = (uint32_t)dt_rng_next(&r);
            float f;
            memcpy(&f, &bits, sizeof f);
            uint64_t pick = dt_rng_below(&r, 8);
            if (isnan(f) || pick == 0)
                f = special[dt_rng_below(&r, 8)];
            else if (pick == 1 && i > 0)
                f = s[dt_rng_below(&r, i)]; /* a tie with an earlier score */
            s[i] = f;
            /* Labels leaning to the larger scores, so that order errors move the AUC. */
            y[i] = (float)(dt_rng_below(&r, 4) == 0 ? dt_rng_below(&r, 2) : f > 0.0f);
        }
        y[0] = 1.0f, y[1] = 0.0f;
        double auc = 0.0;
        CHECK_OK(dt_auc(s, y, n, &auc));
        double want = dt_auc_naive(s, y, n);
        CHECK_MSG(fabs(auc - want) < 1e-12, "trial %d, n %zu: %.15f against %.15f", trial, n, auc,
                  want);
        free(s);
        free(y);
    }
    /* -0 and +0 are one score: a tie, whatever the labels' order. */
    float zeros[4] = {-0.0f, 0.0f, 0.0f, -0.0f}, y[4] = {1, 0, 1, 0};
    double auc = 0.0;
    CHECK_OK(dt_auc(zeros, y, 4, &auc));
    CHECK_NEAR(auc, 0.5, 1e-15);
}

TEST(auc_known_cases_and_undefined_ones)
{
    float s[4] = {0.1f, 0.4f, 0.35f, 0.8f}, y[4] = {0, 0, 1, 1};
    double auc;
    CHECK_OK(dt_auc(s, y, 4, &auc));
    CHECK_NEAR(auc, 0.75, 1e-15); /* the scikit-learn documentation's example */
    float tied[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    CHECK_OK(dt_auc(tied, y, 4, &auc));
    CHECK_NEAR(auc, 0.5, 1e-15);
    float ones[3] = {1, 1, 1};
    CHECK_ERR(dt_auc(s, ones, 3, &auc), DT_ERR_INVALID, "have a positive and no negative");
    float bad[2] = {0, 2};
    CHECK_ERR(dt_auc(s, bad, 2, &auc), DT_ERR_INVALID, "example 1 has label 2");
    float nan_score[2] = {0.0f, NAN};
    CHECK_ERR(dt_auc(nan_score, y + 1, 2, &auc), DT_ERR_INVALID, "example 1 has a NaN score");
}

TEST(logloss_from_logits_is_stable)
{
    float x[3] = {-2.0f, 0.5f, 3.0f}, y[3] = {0, 1, 1};
    double got, want = 0.0;
    CHECK_OK(dt_logloss_from_logits(x, y, 3, &got));
    for (int i = 0; i < 3; i++) {
        double p = 1.0 / (1.0 + exp(-(double)x[i]));
        want -= y[i] ? log(p) : log(1.0 - p);
    }
    CHECK_NEAR(got, want / 3.0, 1e-12);
    /* A logit of 100 on a negative: the direct formula would take log(0). */
    float big[1] = {100.0f}, zero[1] = {0.0f};
    CHECK_OK(dt_logloss_from_logits(big, zero, 1, &got));
    CHECK_NEAR(got, 100.0, 1e-9);
    CHECK_ERR(dt_logloss_from_logits(big, zero, 0, &got), DT_ERR_INVALID, "no examples");
}
