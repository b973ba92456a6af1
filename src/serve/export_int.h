/* What the export formats share (internal to src/serve). */
#ifndef DTRAIN_SERVE_EXPORT_INT_H
#define DTRAIN_SERVE_EXPORT_INT_H

#include <stdbool.h>
#include <cjson/cJSON.h>
#include <stddef.h>

#include "dtrain/checkpoint.h"
#include "dtrain/export.h"
#include "dtrain/saved_model.h"

/* What every export writes beside the model: its inputs and outputs. */
#define DT_EXPORT_SIGNATURE_FILE "signature.json"

/* The arguments every format takes: an output (out_kind: "file" or "directory" for the message),
 * and exactly one of model_dir and checkpoint. */
dt_status dt_export_check(const char *model_dir, const char *checkpoint,
                          const dt_export_options *o, const char *out_kind);

/* The feature spec saved with the model (none for a built-in one) and the checkpoint to export,
 * mapped: model_dir's latest, or checkpoint (exactly one of them non-NULL). */
dt_status dt_export_open(const char *model_dir, const char *checkpoint,
                         const dt_export_options *o, dt_saved_spec *sm, dt_ckpt **c);

/* Creates dir and its parents where missing, as a model directory is created. */
dt_status dt_export_make_dirs(const char *dir);

/* What every format starts with, after dt_export_check: the saved feature spec and the
 * checkpoint opened (dt_export_open), the model built from it with its tables read where they
 * lie in the mapped file, out_dir created, and res's step and checkpoint set; dynamic tables
 * refused unless the format looks their keys up (keyed_tables). The caller closes sm, *c and *m,
 * also after a failure. */
dt_status dt_export_begin(const char *model_dir, const char *checkpoint,
                          const dt_export_options *o, const char *out_dir, dt_saved_spec *sm,
                          dt_ckpt **c, dt_model **m, dt_export_result *res, bool keyed_tables);

/* The feature spec f as a JSON object, as it is saved beside a model; NULL (and the error set)
 * without memory. */
cJSON *dt_export_features_json(const dt_features *f);

/* The base name of path, and its directory ("." for none) into dir. */
const char *dt_export_split_path(const char *path, char *dir, size_t cap);

/* "deepfm", "sequential", "columns:wide_deep" (spec_json: the feature spec's JSON, or NULL). */
const char *dt_export_model_kind(const dt_model_spec *s, const cJSON *spec_json, char *buf,
                                 size_t cap);

/* Writes the cJSON object to path atomically, ending in a newline. */
dt_status dt_export_write_json(const char *path, const cJSON *obj);

/* The formats' writers. */
dt_status dt_export_dtrain(const char *model_dir, const char *checkpoint,
                           const dt_export_options *o, dt_export_result *result);

#endif
