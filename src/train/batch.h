/* The checks a batch passes before a model sees it, in training and evaluation alike (internal
 * to src/train). */
#ifndef DTRAIN_TRAIN_BATCH_H
#define DTRAIN_TRAIN_BATCH_H

#include "dtrain/dataset.h"
#include "dtrain/model.h"

/* The batch's width and size fit the model: DT_ERR_INVALID naming both otherwise. */
dt_status dt_check_batch(const dt_model *m, const dt_elem *e);
/* Its labels as class indices (labels: e->n), each checked against the model's outputs. */
dt_status dt_batch_labels(const dt_model *m, const dt_elem *e, int32_t *labels);

#endif
