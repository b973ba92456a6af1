/* dtrain train as a SageMaker training container, when the sagemaker resolver gives the cluster
 * (named, or detected: SM_CURRENT_HOST or ROOT/input/config/resourceconfig.json, and no
 * TF_CONFIG):
 *   - hyperparameters.json's entries become flags (epochs -> --epochs, batch_size ->
 *     --batch-size), those the command line gives and SageMaker's own (sagemaker_*) excepted;
 *   - without --data (--test-data), the channel SM_CHANNEL_TRAIN or _TRAINING (SM_CHANNEL_TEST,
 *     _EVAL or _VALIDATION) is the data: every file of its directory, in the format the
 *     hyperparameter data_format names (libsvm when none; not a flag);
 *   - without --model-dir, checkpoints go to ROOT/checkpoints when SageMaker syncs that
 *     directory, else to SM_MODEL_DIR, which SageMaker uploads as the model;
 *   - a failure writes its reason's first 1,024 characters to ROOT/output/failure, where
 *     SageMaker reads why a job failed.
 * ROOT is /opt/ml, or DTRAIN_SAGEMAKER_ROOT. */
#ifndef DTRAIN_CLI_SAGEMAKER_H
#define DTRAIN_CLI_SAGEMAKER_H

#include <stdbool.h>

#include "dtrain/status.h"

/* argv with the hyperparameters and the model directory added (*argv_out malloc'd: free it
 * with cli_sagemaker_free), or *argv_out NULL when SageMaker does not give the cluster. */
dt_status cli_sagemaker_args(int argc, char **argv, int *argc_out, char ***argv_out);
void cli_sagemaker_free(int argc, char **argv);
/* Under SageMaker, the reason of a failure into ROOT/output/failure. */
void cli_sagemaker_failure(const char *reason);

#endif
