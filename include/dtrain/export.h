/* Exporting a trained model for serving outside dtrain.
 *
 * An export reads a checkpoint (a model directory's latest, or one file; a parameter-server
 * checkpoint's shard files included) with the feature spec saved beside it, builds its model
 * (saved_model.h) with the tables read where they lie in the mapped checkpoint, and writes it in
 * a serving format with a description of its inputs and outputs, signature.json, beside it.
 *
 * ONNX: a standard ONNX model, opset 13, standard operators only
 * (Gather, ReduceSum, Gemm, MatMul, Conv, MaxPool, BatchNormalization, Softmax, ...), that ONNX
 * Runtime and other engines score as dtrain does. What the graph takes and gives, per model:
 *   lr, fm, deepfm       ids (int64 [N, F]) and values (float [N, F]): an example's F fields
 *   sequential models    input (float [N, H, W, C]): NHWC images as dtrain's pipeline gives them
 *   feature-spec models  per categorical column c the model reads, "c:ids" (int64 [N, L]) and
 *                        "c:weights" (float [N, L], 0 on padding); per numeric column c,
 *                        "c:values" (float [N, shape]): raw values, normalized in the graph
 * and "logits" with "probability" (binary: the sigmoid), "probabilities" (multiclass: the
 * softmax) or "value" (regression). Everything a model reads before its ids (hashing,
 * vocabularies, crosses, bucketizing) stays outside the graph and is described, value for
 * value, in signature.json. README.md's "Serving" section has the details. */
#ifndef DTRAIN_EXPORT_H
#define DTRAIN_EXPORT_H

#include <stdint.h>
#include <stdio.h>

#include "dtrain/api.h"
#include "dtrain/status.h"

/* Tensors larger than this go to an external data file beside the model by default: protobuf,
 * and so ONNX's model file, cannot exceed 2 GiB. */
#define DT_EXPORT_EXTERNAL_DEFAULT ((uint64_t)1 << 30)

typedef enum {
    DT_EXPORT_ONNX = 0,
    DT_EXPORT_DTRAIN, /* a directory the C predictor (predict.h) and dtrain predict open: the
                         model's variables without the optimizer's slots (model.safetensors),
                         the adapted feature_spec.json, and signature.json */
} dt_export_format;

typedef struct {
    dt_export_format format;
    const char *out;                   /* onnx: the model file ("model.onnx"), signature.json
                                          written into its directory; dtrain: the directory */
    /* Tensors of more bytes than this are written to "<out>.data" (ONNX external data, each at
     * an offset that is a multiple of 4096) instead of into the model file; so is any tensor
     * that would take the model file's tensors past 1.75 GiB. */
    uint64_t external_data_threshold;
    FILE *log;                         /* warnings (a damaged checkpoint passed over); may be
                                          NULL */
} dt_export_options;

/* What an export wrote. */
typedef struct {
    int64_t step;                      /* the checkpoint's global step (-1: unknown) */
    char model_kind[32];               /* "deepfm", "sequential", "columns:wide_deep", ... */
    char checkpoint[4400];             /* the checkpoint file read */
    char signature[4400];              /* the signature.json written */
    char data_file[4400];              /* the external data file, "" when none was needed */
    uint64_t model_bytes, data_bytes;
    int n_nodes, n_initializers, n_external;
} dt_export_result;

/* The ONNX format, threshold DT_EXPORT_EXTERNAL_DEFAULT; out must be set. */
DT_API void dt_export_options_default(dt_export_options *o);

/* The format called name ("onnx"); DT_ERR_INVALID listing the formats otherwise. */
DT_API dt_status dt_export_format_parse(const char *name, dt_export_format *out);
/* The formats' names, comma-separated, for usage texts. */
DT_API const char *dt_export_format_names(void);

/* Exports model_dir's latest checkpoint, or checkpoint (a file; its directory holds the feature
 * spec when there is one), in o->format. Exactly one of model_dir and checkpoint is non-NULL.
 * result may be NULL. Errors name the file and the field: a missing or damaged checkpoint, a
 * feature spec that is not the checkpoint's model, a file that cannot be written. */
DT_API dt_status dt_export(const char *model_dir, const char *checkpoint,
                           const dt_export_options *o, dt_export_result *result);

/* dt_export in the ONNX format whatever o->format says. */
DT_API dt_status dt_export_onnx(const char *model_dir, const char *checkpoint,
                                const dt_export_options *o, dt_export_result *result);

#endif
