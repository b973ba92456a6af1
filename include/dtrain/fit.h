/* Training and evaluation of a model on an in-memory image dataset, in one process: Keras's
 * fit / evaluate for the one_device case.
 *
 * Each step scales a batch of uint8 images to [0, 1] floats (x / 255, as the tutorial's
 * preprocessing), runs forward, the loss (mean over the batch), backward and one optimizer step.
 * The order of examples per epoch follows tf.data's shuffle(buffer, seed,
 * reshuffle_each_iteration=True): buffer 0 keeps file order; a buffer at least the dataset's size
 * is a full shuffle. The last partial batch of an epoch is dropped by default (the tutorial's
 * 937 steps of 64 over 60,000 examples); keep_remainder trains on it too. */
#ifndef DTRAIN_FIT_H
#define DTRAIN_FIT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/idx.h"
#include "dtrain/model.h"
#include "dtrain/optim.h"
#include "dtrain/pool.h"

/* How per-example losses become the batch's loss (and its gradient). */
typedef enum {
    DT_REDUCTION_MEAN = 0,          /* mean over the examples of the batch (Keras's default) */
    DT_REDUCTION_SUM_OVER_GLOBAL,   /* sum x 1 / global batch size: the tutorial's
                                       reduce_sum(loss) * (1. / BATCH_SIZE), which keeps the
                                       gradients of replicas summable in distributed training */
} dt_reduction;

typedef struct {
    int epochs;
    int64_t steps_per_epoch; /* 0: the whole dataset */
    int64_t max_steps;       /* 0: no limit */
    int batch_size;
    uint64_t seed;
    int64_t shuffle_buffer;  /* 0: file order */
    bool keep_remainder;
    dt_reduction reduction;  /* differs from the mean only on a partial batch */
    bool validate;           /* evaluate on the test set at each epoch end */
    FILE *progress;          /* NULL: silent */
    bool progress_bar;
} dt_fit_config;

typedef struct {
    int64_t steps;
    int epochs;              /* epochs begun */
    int64_t samples;
    double train_seconds;    /* the steps alone: no evaluation, no printing */
    double final_loss;       /* mean training loss over the last epoch */
    double final_accuracy;
    bool validated;          /* val_* hold the test set's figures after the last epoch */
    double val_loss, val_accuracy;
} dt_fit_result;

void dt_fit_config_default(dt_fit_config *cfg);

/* Trains m with o. test may be NULL (no validation). Fails with DT_ERR_NUMERIC, naming the step,
 * if the loss stops being finite; with DT_ERR_INVALID if the configuration is out of range or the
 * data does not fit the model (shape, a label beyond the model's outputs, no full batch), naming
 * the field or the file. Batches hold min(batch_size, examples) at most: the model's maximum
 * batch must cover that. */
dt_status dt_fit(dt_model *m, dt_optim *o, dt_pool *pool, const dt_image_dataset *train,
                 const dt_image_dataset *test, const dt_fit_config *cfg, dt_fit_result *result);

/* Checks cfg against a training set of n_examples, naming the field. */
dt_status dt_fit_check(const dt_fit_config *cfg, int n_examples);

/* Mean loss and accuracy over the whole dataset, in batches of the model's maximum batch. */
dt_status dt_evaluate(dt_model *m, const dt_image_dataset *ds, double *loss, double *accuracy);

/* Checks that ds's images and labels fit m. */
dt_status dt_check_dataset(const dt_model *m, const dt_image_dataset *ds);

/* The order of n examples for one epoch: tf.data's shuffle with this buffer over 0..n-1, from a
 * generator derived from (seed, epoch). */
void dt_epoch_order(uint32_t *order, uint32_t *buffer, uint32_t n, int64_t shuffle_buffer,
                    uint64_t seed, int epoch);

/* Scales images[idx[i]] (uint8) into x (B, H, W, C) float as v / 255, and gathers labels. */
void dt_gather_batch(const dt_image_dataset *ds, const uint32_t *idx, int B, float *x,
                     int32_t *labels);

#endif
