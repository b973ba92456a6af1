/* A training run's feature spec (internal to src/train): the spec as the run uses it, its row
 * parser for the input pipelines, the model it describes and the optimizers of its parts. */
#ifndef DTRAIN_TRAIN_SPEC_RUN_H
#define DTRAIN_TRAIN_SPEC_RUN_H

#include "dtrain/features.h"
#include "dtrain/optim.h"
#include "dtrain/saved_model.h"
#include "dtrain/train.h"

typedef struct {
    dt_features *f;
    dt_feature_parser *parser;
    dt_feature_model model;
    dt_optim_config optim;   /* the deep part's, with the linear tables' rule set */
    bool from_model_dir;     /* the model directory's adapted copy was read */
} dt_spec_run;

/* Reads the spec: the model directory's adapted copy (feature_spec.json) when there is one, so
 * that a restore never adapts again; else c->feature_spec, adapted over the training data
 * and, by the chief, saved to the model directory. */
dt_status dt_spec_run_open(const dt_train_config *c, bool chief, dt_spec_run *out);
void dt_spec_run_close(dt_spec_run *r);

#endif
