/* fit's checkpoints, backups and summaries (internal to src/train). */
#ifndef DTRAIN_FIT_CKPT_H
#define DTRAIN_FIT_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/checkpoint.h"
#include "dtrain/fit.h"
#include "dtrain/summary.h"

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

typedef struct {
    bool writer;                   /* rank 0: writes and reads the directories */
    dt_ckpt_manager model, backup; /* open when the directory is set (writer only) */
    bool have_model, have_backup;
    dt_summary_writer *train_sw, *eval_sw;
    double last_save;              /* clock of the last model_dir checkpoint */
    int64_t last_saved_step;
    int64_t model_due_step;        /* the step dt_fit_ckpt_saves_after chose to save, or -1 */
    double last_summary_t;
    int64_t last_summary_step;
} dt_fit_ckpt;

/* Opens what cfg asks for (on the writer). */
dt_status dt_fit_ckpt_open(dt_fit_ckpt *k, const dt_fit_config *cfg);
/* Closes the files; with completed, removes the backup (training is over). */
dt_status dt_fit_ckpt_close(dt_fit_ckpt *k, bool completed);

/* Restores m, o and *pos from the newest checkpoint of backup_dir, else model_dir, when there
 * is one: rank 0 reads it and broadcasts to the others. *resumed tells whether it did. */
dt_status dt_fit_ckpt_restore(dt_fit_ckpt *k, const dt_fit_config *cfg, dt_model *m, dt_optim *o,
                              dt_fit_position *pos, bool *resumed);

/* Before a step (step: the count once it is done): whether dt_fit_ckpt_after_step will save a
 * checkpoint or a backup after it. A time-based checkpoint is decided here, once, so the ranks
 * can be told before the step ends (their optimizer state must be whole for the save). */
bool dt_fit_ckpt_saves_after(dt_fit_ckpt *k, const dt_fit_config *cfg, int64_t step);

/* After a step: the model_dir checkpoint when dt_fit_ckpt_saves_after chose it, the backup when due every N steps, the train
 * summaries when due. */
dt_status dt_fit_ckpt_after_step(dt_fit_ckpt *k, const dt_fit_config *cfg, dt_model *m,
                                 dt_optim *o, const dt_fit_position *pos, double batch_loss,
                                 double batch_accuracy, dt_fit_result *r);
/* At an epoch's end (pos already at the next epoch): the per-epoch backup. */
dt_status dt_fit_ckpt_after_epoch(dt_fit_ckpt *k, const dt_fit_config *cfg, dt_model *m,
                                  dt_optim *o, const dt_fit_position *pos, dt_fit_result *r);
/* After the last step: the final model_dir checkpoint (unless that step is saved already). */
dt_status dt_fit_ckpt_final(dt_fit_ckpt *k, const dt_fit_config *cfg, dt_model *m, dt_optim *o,
                            const dt_fit_position *pos, dt_fit_result *r);
/* An evaluation's figures, to model_dir/eval. */
dt_status dt_fit_ckpt_eval_summary(dt_fit_ckpt *k, int64_t step, double loss, double accuracy);

#endif
