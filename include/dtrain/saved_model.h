/* A trained model read back from what training left: a checkpoint (one file, or a
 * parameter-server checkpoint's manifest and shard files) and, for a feature-spec model, the
 * adapted spec the chief saved beside it (feature_spec.json). What evaluation, prediction and
 * export build their model from, so that all three score exactly what training trained. */
#ifndef DTRAIN_SAVED_MODEL_H
#define DTRAIN_SAVED_MODEL_H

#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/checkpoint.h"
#include "dtrain/features.h"
#include "dtrain/model.h"
#include "dtrain/pool.h"

/* The name of the adapted feature spec in a model directory. */
#define DT_FEATURE_SPEC_FILE "feature_spec.json"

/* A model directory's feature spec, its row parser and its model; all NULL (and no error) when
 * the directory has no feature_spec.json: a built-in or JSON model's checkpoints. */
typedef struct {
    dt_features *features;
    dt_feature_parser *parser;
    dt_feature_model model;
} dt_saved_spec;

/* Reads dir/feature_spec.json when there is one. Errors name the file and the field. */
DT_API dt_status dt_saved_spec_open(const char *dir, dt_saved_spec *out);
DT_API void dt_saved_spec_close(dt_saved_spec *s);

/* The model a checkpoint was written for: its model_spec metadata, which must be the saved
 * spec's model when there is one (DT_ERR_INVALID otherwise: a spec of another model), and must
 * give the input shape. DT_ERR_FORMAT naming the file when the metadata is missing or bad. */
DT_API dt_status dt_saved_model_spec(const dt_ckpt *c, const dt_saved_spec *s, dt_model_spec *out);

/* Builds that model for batches of up to max_batch (pool borrowed, may be NULL) and restores
 * its parameters, its state (moving averages) and its tables, from the shard files of a
 * parameter-server checkpoint whatever their placement. */
DT_API dt_status dt_saved_model_build(const dt_ckpt *c, const dt_saved_spec *s, int max_batch,
                                      dt_pool *pool, dt_model **out);

/* The same for a model that only runs forwards, with its tables read where they lie in c's
 * data (a mapped checkpoint's file: dt_ckpt_map), never copied, and only its dense variables
 * copied: c must stay open while the model is used. A parameter-server checkpoint's tables,
 * spread over its shard files, are assembled in the model's memory as dt_saved_model_build
 * does. DT_ERR_FORMAT naming the file and tensor for a table missing or of another shape. */
DT_API dt_status dt_saved_model_map(const dt_ckpt *c, const dt_saved_spec *s, int max_batch,
                                    dt_model **out);

/* The global step of a checkpoint: its global_step metadata, else the step in its file name,
 * else -1. */
DT_API int64_t dt_saved_model_step(const dt_ckpt *c);

#endif
