/* A fit's state in a checkpoint: the position beside the tensors, saved and restored (internal
 * to src/train; the checkpoint and backup callbacks save through it, the loop restores). */
#ifndef DTRAIN_FIT_CKPT_H
#define DTRAIN_FIT_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/checkpoint.h"
#include "dtrain/fit.h"
#include "../strategy/replica.h"

/* Where training stands: what a checkpoint must hold beyond the tensors for a resumed run to
 * continue exactly as the interrupted one would have. */
typedef struct {
    int64_t step;          /* global steps done */
    int64_t epoch;         /* the epoch under way (0-based) */
    int64_t in_epoch;      /* batches of it done */
    double epoch_loss;     /* its running sums, for the epoch's reported loss and accuracy */
    int64_t epoch_correct, epoch_samples;
    int64_t samples;       /* examples of the epochs before it */
    double best;           /* early stopping */
    int64_t waited;
} dt_fit_position;

/* Saves m's variables, o's slots and the position p as ckpt-<step> through mgr (its metadata
 * holds what a resumed run needs: position, optimizer, seed, dropout position, global batch and
 * the replicas in sync). announce prints Estimator's "Saving checkpoints ..." line on cfg->log;
 * final marks the last checkpoint of a run. Counts the save and its time in r. */
dt_status dt_fit_save(dt_ckpt_manager *mgr, bool announce, const dt_fit_config *cfg, int replicas,
                      dt_model *m, dt_optim *o, const dt_fit_position *p, bool final,
                      dt_fit_result *r);

/* Restores a CTR model's tables from checkpoint c, with their optimizer slots when slots (a
 * model set up with the optimizer the checkpoint was written with): DT_ERR_INVALID naming the
 * tensor when one is missing or of another shape. Nothing to do for a model without tables. */
dt_status dt_ckpt_restore_tables(const dt_ckpt *c, dt_model *m, bool slots);

/* Restores m, o and *pos from the newest checkpoint of backup_dir, else model_dir, else
 * restore_path, when there is one: the chief reads it and the strategy shares it with the other
 * replicas (a failure too, so they stop with its reason). *resumed tells whether it did. */
dt_status dt_fit_restore(dt_replica *r, const dt_fit_config *cfg, dt_model *m, dt_optim *o,
                         dt_fit_position *pos, bool *resumed);

#endif
