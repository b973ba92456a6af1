/* Evaluating checkpoints: one (Estimator's evaluate), or each newer one of a model directory as
 * it appears, until the final one (TF's SidecarEvaluator, the evaluator task of a cluster). The
 * model comes from the checkpoint's model_spec metadata; each evaluation prints Estimator's line
 * `Saving dict for global step N: global_step = N, loss = L, accuracy = A` and, with a model
 * directory, writes loss and accuracy to its eval/ summaries for TensorBoard. */
#ifndef DTRAIN_EVALUATOR_H
#define DTRAIN_EVALUATOR_H

#include <stdbool.h>
#include <stdio.h>

#include "dtrain/api.h"
#include "dtrain/input.h"
#include "dtrain/status.h"

typedef struct {
    const char *model_dir;   /* its latest checkpoint, or watched; NULL with checkpoint */
    const char *checkpoint;  /* this file instead of the directory's latest */
    bool watch;              /* evaluate each newer checkpoint until the final one */
    const char *test_data;   /* a data spec (input.h): fashion-mnist[:DIR] or mnist:DIR (their
                                t10k files), idx:IMAGES,LABELS, tfrecord:, libsvm: or csv: */
    const dt_input_options *input; /* how file data is read (features, label key, number of
                                      features, CSV columns, compression); NULL: the defaults */
    int batch_size;          /* examples per forward, 1..65536 */
    double poll_secs;        /* watch: seconds between looks at the directory */
    double idle_timeout;     /* watch: give up after this long without a new checkpoint (0:
                                never) */
    FILE *out;               /* the evaluation lines; NULL: none */
    FILE *log;               /* warnings (a damaged checkpoint passed over); NULL: none */
} dt_evaluator_options;

/* fashion-mnist, batch 1000, a look every second, an hour's patience. */
DT_API void dt_evaluator_options_default(dt_evaluator_options *o);
/* The options' ranges (and o->input's), each error naming the field first ("poll_secs: ..."). */
DT_API dt_status dt_evaluator_options_check(const dt_evaluator_options *o);

/* DT_ERR_INVALID naming the option; the checkpoint's, the data's or the summary's errors. */
DT_API dt_status dt_evaluate_checkpoints(const dt_evaluator_options *o);

#endif
