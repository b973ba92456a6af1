/* Synthetic Criteo-like click data with a known teacher, for judging CTR trainers.
 *
 * Each row has 13 numeric fields (heavy-tailed counts: log-normal, 10% missing) and 26
 * categorical fields whose values follow a power law (Zipf-like) over cardinalities spaced
 * log-uniformly from 10 to 1,000,000 (3% missing). The label is drawn from a fixed logistic
 * teacher: a bias set for a click rate near 25%, a weight per numeric field, a weight per
 * categorical value, and pairwise interactions (dot products of 4-factor vectors) between ten
 * pairs of categorical fields and three numeric-categorical pairs, so FM and DeepFM can beat
 * logistic regression. Every weight is a hash of (field, value): the teacher needs no tables
 * and is the same for every seed; the seed picks the rows, so two seeds give a training and a
 * test set from one distribution.
 *
 * Formats:
 *   libsvm  field-positional, as the DeepFM sample writes it: `label id:value` x 39 in field
 *           order, ids 0-based. Numeric field i has id i and value log(1 + x) / 4 (0 when
 *           missing); categorical field j's value rank r has id offset_j + r and value 1, its
 *           missing value id offset_j + cardinality_j. feature_size is every id's count.
 *   criteo  Criteo's TSV: label, 13 integer columns, 26 categorical columns of 8 hex digits (a
 *           hash of field and rank); a missing value is an empty column.
 *   tfrecord  Examples {"label": float, "ids": int64 x 39, "values": float x 39}, the libsvm
 *           form's ids and values, as the sample's TFRecord files hold them.
 *   tfrecord-columns  Examples of one feature per Criteo column, as feature-column pipelines
 *           write them: "label" (float), "I1".."I13" (float, the raw count) and "C1".."C26"
 *           (bytes, the criteo form's 8 hex digits), a missing value an absent feature: the
 *           criteo form's rows, field for field.
 *   csv     the criteo form as CSV under a header "label,I1,..,I13,C1,..,C26".
 *   census  not Criteo-like: census rows in the UCI Adult layout (adult.data's 15 columns, the
 *           label income_bracket "<=50K" or ">50K", about 24% ">50K"), as CSV under the header
 *           "age,workclass,fnlwgt,...,native_country,income_bracket", with adult.data's value
 *           lists, plausible marginals, "?" for missing workclass, occupation and
 *           native_country, and a teacher of its own (src/data/gen_census.c): main effects and
 *           education x occupation and age x education x occupation interactions, for the
 *           census wide & deep model's crosses. Its rows are drawn in blocks as the others'. */
#ifndef DTRAIN_GEN_CTR_H
#define DTRAIN_GEN_CTR_H

#include <stdint.h>
#include <stdio.h>

#include "dtrain/api.h"
#include "dtrain/pool.h"
#include "dtrain/rng.h"
#include "dtrain/status.h"

#define DT_GEN_NUMERIC 13
#define DT_GEN_CATEGORICAL 26
#define DT_GEN_FIELDS (DT_GEN_NUMERIC + DT_GEN_CATEGORICAL)

typedef enum {
    DT_GEN_LIBSVM = 0,
    DT_GEN_CRITEO,
    DT_GEN_TFRECORD,
    DT_GEN_TFRECORD_COLUMNS,
    DT_GEN_CSV,
    DT_GEN_CENSUS,
} dt_gen_format;

DT_API dt_status dt_gen_format_parse(const char *name, dt_gen_format *out);

typedef struct {
    int64_t rows;
    double teacher_auc; /* the teacher's AUC on the rows written */
    double ctr;         /* their click rate (census: their share of ">50K") */
    int64_t feature_size; /* rows a table needs for the libsvm ids (census: 0) */
} dt_gen_result;

/* The ids' count of the libsvm form (the same for every seed). */
DT_API int64_t dt_gen_ctr_feature_size(void);

/* Writes rows rows drawn with seed to path in format, split over pool. Errors name the path. */
DT_API dt_status dt_gen_ctr(const char *path, dt_gen_format format, int64_t rows, uint64_t seed,
                            dt_pool *pool, dt_gen_result *out);

/* The wide form, for dynamic tables: with id_space > 0, every categorical field draws its values
 * from [0, id_space) (10^8 and more), ranks by the same power laws over the whole space, so the
 * tail is long; and the values drift: every 20,000 rows field j's ranks slide 1 + 63 j / 25
 * places along a hashed sequence of values, so values appear in the tail, grow popular, lead,
 * and are never drawn again. The teacher's weights are hashes of (field, value), as before; row
 * positions count from first_row, so a test set written with first_row = the training rows
 * continues the training set in time. In the libsvm form field j's value v has id 13 + j x
 * (id_space + 1) + v. */
typedef struct {
    dt_gen_format format;
    int64_t rows;
    uint64_t seed;
    int64_t id_space;   /* 0: the classic cardinalities, 10 .. 10^6 */
    int64_t first_row;  /* the position of the first row written, for the drift */
} dt_gen_options;

DT_API dt_status dt_gen_ctr_ex(const char *path, const dt_gen_options *o, dt_pool *pool,
                               dt_gen_result *out);

/* The census format's rows, for dt_gen_ctr's blocks (src/data/gen_census.c). */
#define DT_GEN_CENSUS_LINE_MAX 256
/* The CSV header line, '\n' included. */
extern DT_API const char dt_gen_census_header[];
/* The teacher's bias (the same on every call; NAN without memory). */
DT_API double dt_gen_census_bias(void);
/* Draws one row from r and writes it to out (DT_GEN_CENSUS_LINE_MAX bytes) as a CSV line ending
 * in '\n'; returns its length. *logit is the teacher's logit, *label 1 for ">50K". */
DT_API size_t dt_gen_census_row(double bias, dt_rng *r, char *out, float *logit, float *label);

#endif
