/* Training and evaluation in one process: Keras's fit / evaluate for the one_device case.
 *
 * dt_fit_dataset consumes any dataset of batches (dataset.h); each step runs forward, the loss,
 * backward and one optimizer step, and each epoch starts a new iteration of the dataset. dt_fit
 * does the same for an in-memory image dataset through the library's image pipeline:
 * indices -> shuffle(buffer, seed, reshuffle_each_iteration=True) -> batch -> gather the images,
 * scaled to [0, 1] as the tutorial's x / 255 -> prefetch. Shuffling indices rather than images
 * keeps the shuffle buffer small. The last partial batch of an epoch is dropped by default (the
 * tutorial's 937 steps of 64 over 60,000 examples); keep_remainder trains on it too. */
#ifndef DTRAIN_FIT_H
#define DTRAIN_FIT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/api.h"
#include "dtrain/dataset.h"
#include "dtrain/idx.h"
#include "dtrain/model.h"
#include "dtrain/optim.h"
#include "dtrain/pool.h"
#include "dtrain/strategy.h"

/* How per-example losses become the batch's loss (and its gradient). */
typedef enum {
    DT_REDUCTION_MEAN = 0,          /* mean over the examples of the batch (Keras's default) */
    DT_REDUCTION_SUM_OVER_GLOBAL,   /* sum x 1 / global batch size: the tutorial's
                                       reduce_sum(loss) * (1. / BATCH_SIZE), which keeps the
                                       gradients of replicas summable in distributed training */
} dt_reduction;

/* What a program's own callback sees of training, read only. */
typedef struct {
    int64_t step;            /* global steps done */
    int64_t epoch;           /* the epoch under way (0-based), or just ended */
    double batch_loss, batch_accuracy; /* the last step's (its global batch's) */
    double epoch_loss, epoch_accuracy; /* on_epoch_end: the epoch's means */
    bool validated;          /* on_epoch_end: val_loss and val_accuracy hold this epoch's */
    double val_loss, val_accuracy;
    bool chief;              /* this replica is the chief (the one that prints and saves) */
} dt_fit_status;

/* A program's own callback, as Keras's Callback: fit calls its hooks after its built-in
 * callbacks (validation, progress, early stopping, checkpoints, summaries) have run theirs, on
 * every replica. Any hook may be NULL. A hook that returns DT_END asks training to stop after
 * the current epoch, as Keras's model.stop_training does (with several replicas, the chief's
 * request is the one that counts, as early stopping's); any other error ends fit with it. */
typedef struct {
    void *user;
    dt_status (*on_train_begin)(void *user, const dt_fit_status *s);
    dt_status (*on_step_end)(void *user, const dt_fit_status *s);
    dt_status (*on_epoch_end)(void *user, const dt_fit_status *s);
    dt_status (*on_train_end)(void *user, const dt_fit_status *s);
} dt_fit_callback;

#define DT_FIT_MAX_CALLBACKS 16

typedef struct {
    int epochs;
    int64_t steps_per_epoch; /* 0: the whole dataset */
    int64_t max_steps;       /* 0: no limit */
    int batch_size;
    uint64_t seed;
    int64_t shuffle_buffer;  /* 0: file order */
    int prefetch;            /* batches prepared ahead on a background thread; 0: none */
    bool keep_remainder;
    dt_reduction reduction;  /* differs from the mean only on a partial batch */
    bool validate;           /* evaluate on the test set at each epoch end */
    FILE *progress;          /* NULL: silent */
    bool progress_bar;
    int64_t expected_steps_per_epoch; /* for the progress bar when the dataset's size is known */
    /* Keras's EarlyStopping: stop when the monitored loss (val_loss when validating, else the
     * epoch's training loss) has not fallen by more than min_delta for `patience` epochs in a
     * row; 0: never. Across workers the chief decides and tells the others. */
    int early_stopping_patience;
    /* Estimator's logging instead of Keras's progress: `loss = 2.29561, step = 100 (0.579 sec)`
     * and `global_step/sec: 173.275` every this many steps (and the loss at step 0); 0: off. */
    int64_t log_step_count_steps;
    double early_stopping_min_delta;
    /* Estimator's train_and_evaluate: evaluate on the test dataset every eval_every_steps steps
     * and/or whenever eval_throttle_secs have passed since the last evaluation (checked after
     * each step, not before eval_start_delay_secs into training), and once more after the last
     * step; eval_steps batches each time from the start of the test dataset (0: all of it). Each
     * prints `Saving dict for global step N: global_step = N, loss = L, accuracy = A` on
     * progress. Across workers only the rank given a test dataset evaluates (the chief), and
     * the others wait for it in the next step's collectives: the time counts against their
     * timeout. 0 and 0: no periodic evaluation. */
    int64_t eval_every_steps;
    double eval_throttle_secs;
    double eval_start_delay_secs;
    int64_t eval_steps;
    /* Checkpoints and summaries, Estimator's RunConfig (NULL: none). model_dir receives
     * ckpt-<step>.safetensors through a checkpoint manager (checkpoint.h) every
     * save_checkpoints_steps steps, or every save_checkpoints_secs seconds when that is 0, and
     * after the last step (with metadata final = 1); and TensorBoard scalars (summary.h): loss,
     * accuracy, learning_rate and global_step/sec every save_summary_steps (0: none), the
     * evaluations' loss and accuracy in model_dir/eval. Training resumes from model_dir's latest
     * checkpoint when it has one, as Estimator's does. Every rank is given the same directories;
     * only rank 0 writes or reads them, and it broadcasts what it restores. */
    const char *model_dir;
    int64_t save_checkpoints_steps;
    double save_checkpoints_secs;
    int keep_checkpoint_max;                  /* 0: keep all */
    double keep_checkpoint_every_n_hours;     /* 0: off */
    int64_t save_summary_steps;
    /* Keras's BackupAndRestore: a checkpoint in backup_dir at each epoch end (backup_freq 0) or
     * every backup_freq steps, from which a rerun resumes exactly: the same parameters, optimizer
     * slots and step count, the same input position (epoch and batch) and dropout sequence, so
     * its final parameters equal an uninterrupted run's bit for bit. Removed when training
     * completes. It takes precedence over model_dir for resuming. */
    const char *backup_dir;
    int64_t backup_freq;
    /* A checkpoint file to start from (its parameters, slots and position) instead of the
     * directories' latest; NULL: none. */
    const char *restore_path;
    FILE *log;                                /* "Saving checkpoints ..." and warnings; may be NULL */
    /* The program's own callbacks (borrowed), run in this order after the built-in ones. */
    const dt_fit_callback *callbacks;
    int n_callbacks;                          /* 0..DT_FIT_MAX_CALLBACKS */
} dt_fit_config;

typedef struct {
    int64_t steps;
    int epochs;              /* epochs begun */
    int64_t samples;
    double train_seconds;    /* the steps alone: no evaluation, no printing */
    int64_t table_bytes;     /* table gradients this replica sent to the others (ids and rows) */
    double comm_seconds;     /* of which waiting on collectives: the other workers, and the
                                gradient all-reduce backward did not hide */
    double final_loss;       /* mean training loss over the last epoch */
    double final_accuracy;
    bool validated;          /* val_* hold the test set's figures after the last epoch */
    bool stopped_early;      /* early stopping ended the run before its epochs */
    double val_loss, val_accuracy;
    double val_auc;          /* a binary model's (CTR models), NaN otherwise (metrics: dt_evaluate_metrics) */
    int64_t evaluations;     /* periodic evaluations done (train_and_evaluate) */
    int64_t eval_step;       /* the global step of the last of them */
    double eval_seconds;     /* their time, which train_seconds leaves out */
    int64_t resumed_step;    /* the global step a checkpoint resumed training from; 0: none */
    int64_t checkpoints;     /* checkpoints and backups written */
    double checkpoint_seconds; /* their time, which train_seconds leaves out */
    int64_t checkpoints_failed; /* periodic checkpoints the storage refused (a full disk):
                                   reported, and training went on */
} dt_fit_result;

DT_API void dt_fit_config_default(dt_fit_config *cfg);

/* Trains m with o on the batches of train as one replica of a strategy, inside the function
 * dt_strategy_run calls on each replica (strategy.h): train holds this replica's share of every
 * global batch (cfg->batch_size is the global batch); the strategy makes every replica start
 * from the chief's variables and turns their gradients into one update (all-reduced, sharded,
 * applied centrally, as the strategy does), and the replicas agree on the end of each epoch.
 * Losses and accuracies are the global batch's. Only the chief (replica 0) prints progress,
 * evaluates on test (give the others NULL), and writes and reads cfg->model_dir and
 * cfg->backup_dir; what it restores reaches the others. */
DT_API dt_status dt_fit_replica(dt_replica *r, dt_model *m, dt_optim *o, dt_pool *pool,
                                dt_dataset *train, dt_dataset *test, const dt_fit_config *cfg,
                                dt_fit_result *result);

/* dt_fit_replica alone (one_device): trains m with o on the batches of train (an epoch is one iteration of it, or steps_per_epoch
 * batches), validating on test (may be NULL) after each epoch when cfg->validate. Fails with
 * DT_ERR_NUMERIC, naming the step, if the loss stops being finite; with DT_ERR_INVALID if the
 * configuration is out of range or a batch does not fit the model (its width, a label that is not
 * a class of the model), or with the dataset's own error. */
DT_API dt_status dt_fit_dataset(dt_model *m, dt_optim *o, dt_pool *pool, dt_dataset *train,
                                dt_dataset *test, const dt_fit_config *cfg, dt_fit_result *result);

/* Estimator's train_and_evaluate on datasets: cfg with its epochs unbounded, so training runs to
 * cfg->max_steps (which must be set) over as many passes of train as it takes, logging as
 * Estimator does every cfg->log_step_count_steps (100 when 0), and evaluating on eval (may be
 * NULL on the workers that do not evaluate) as cfg's eval_* fields say. */
DT_API dt_status dt_train_and_evaluate(dt_model *m, dt_optim *o, dt_pool *pool, dt_dataset *train,
                                       dt_dataset *eval, const dt_fit_config *cfg,
                                       dt_fit_result *result);

/* dt_fit_dataset over the image pipeline of train. Batches hold min(batch_size, examples) at
 * most: the model's maximum batch must cover that. */
DT_API dt_status dt_fit(dt_model *m, dt_optim *o, dt_pool *pool, const dt_image_dataset *train,
                        const dt_image_dataset *test, const dt_fit_config *cfg,
                        dt_fit_result *result);

/* Batches in one pass over n_examples: the last partial one counts only with keep_remainder. */
DT_API int64_t dt_fit_batches_per_epoch(const dt_fit_config *cfg, int64_t n_examples);

/* Checks cfg against a training set of n_examples (-1: unknown), naming the field. */
DT_API dt_status dt_fit_check(const dt_fit_config *cfg, int64_t n_examples);

/* What an evaluation measures. A binary model (one output, binary cross-entropy: CTR models)
 * also gets its exact AUC (ties counted half: include/dtrain/metrics.h) and logloss; NaN
 * otherwise, and AUC NaN too when the set holds one class only. */
typedef struct {
    double loss, accuracy;
    double auc, logloss;
    int64_t examples;
} dt_eval_metrics;

/* Over the first max_batches batches (0: all) of one iteration of a dataset of batches. */
DT_API dt_status dt_evaluate_metrics(dt_model *m, dt_dataset *batches, int64_t max_batches,
                                     dt_eval_metrics *out);

/* Mean loss and accuracy over one iteration of a dataset of batches. */
DT_API dt_status dt_evaluate_dataset(dt_model *m, dt_dataset *batches, double *loss,
                                     double *accuracy);

/* The same over its first max_batches batches at most (0: all of them). */
DT_API dt_status dt_evaluate_batches(dt_model *m, dt_dataset *batches, int64_t max_batches,
                                     double *loss, double *accuracy);

/* Mean loss and accuracy over the whole dataset, in batches of the model's maximum batch. */
DT_API dt_status dt_evaluate(dt_model *m, const dt_image_dataset *ds, double *loss,
                             double *accuracy);

/* Checks that ds's images and labels fit m. */
DT_API dt_status dt_check_dataset(const dt_model *m, const dt_image_dataset *ds);

#endif
