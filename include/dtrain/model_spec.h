/* Model specs: the layers of a sequential model as Keras describes them, from a built-in name
 * (mnist_cnn: the model of TensorFlow's multi-worker tutorial; mlp: TensorFlow's beginner
 * quickstart) or from a JSON file parsed with cJSON. */
#ifndef DTRAIN_MODEL_SPEC_H
#define DTRAIN_MODEL_SPEC_H

#include <stdbool.h>

#include "dtrain/nn.h"
#include "dtrain/status.h"

#define DT_MAX_LAYERS 64
#define DT_LAYER_NAME_CAP 48

typedef enum {
    DT_LAYER_DENSE = 0,
    DT_LAYER_CONV2D,
    DT_LAYER_MAXPOOL2D,
    DT_LAYER_FLATTEN,
    DT_LAYER_RELU,
    DT_LAYER_SIGMOID,
    DT_LAYER_TANH,
    DT_LAYER_DROPOUT,
    DT_LAYER_BATCHNORM, /* Keras's BatchNormalization over a flat input's features */
} dt_layer_kind;

typedef enum {
    DT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY = 0, /* from logits */
    DT_LOSS_BINARY_CROSSENTROPY,                 /* from logits */
    DT_LOSS_MEAN_SQUARED_ERROR,
} dt_loss_kind;

typedef struct {
    dt_layer_kind kind;
    char name[DT_LAYER_NAME_CAP]; /* Keras's automatic name when left empty */
    int units;                    /* dense */
    int filters;                  /* conv2d */
    int kernel[2];                /* conv2d */
    int pool[2];                  /* max_pooling2d */
    int strides[2];               /* conv2d (default 1), max_pooling2d (default: the pool size) */
    bool same;                    /* conv2d, max_pooling2d: padding "same" rather than "valid" */
    dt_activation activation;     /* dense, conv2d */
    float rate;                   /* dropout */
    float momentum, epsilon;      /* batch_normalization: Keras's 0.99 and 0.001 */
} dt_layer_spec;

/* What the model computes: a sequential stack of layers over dense inputs, or a CTR model over
 * F (id, value) fields per example (logistic regression, a factorization machine, DeepFM), whose
 * layers are then DeepFM's MLP. */
typedef enum { DT_ARCH_SEQUENTIAL = 0, DT_ARCH_LR, DT_ARCH_FM, DT_ARCH_DEEPFM } dt_arch;

#define DT_MAX_DEEP_LAYERS 16

/* A CTR model, with the semantics of the DeepFM sample:
 *   logit = fm_b + sum_f fm_w[id_f] x_f                                  (lr)
 *         + 1/2 sum_k ((sum_f fm_v[id_f,k] x_f)^2 - sum_f (fm_v[id_f,k] x_f)^2)   (fm, deepfm)
 *         + MLP(concat_f fm_v[id_f] x_f)                                 (deepfm)
 * fm_w (feature_size, 1) and fm_v (feature_size, K) are tables; fm_b and the MLP dense
 * variables. The MLP is Dense(units, relu) and Dropout per deep layer, then Dense(1). */
typedef struct {
    int field_size;        /* F: fields per example */
    long long feature_size;/* rows of fm_w and fm_v */
    int embedding_size;    /* K */
    int n_deep;
    int deep_layers[DT_MAX_DEEP_LAYERS];
    float dropout_keep[DT_MAX_DEEP_LAYERS]; /* KEEP probabilities, as the sample: 1 = none */
    float init_stddev;     /* fm_v starts N(0, init_stddev^2) per row; fm_w and fm_b at 0 */
    /* Batch normalisation after each deep layer's ReLU, before its dropout, as the sample's
     * batch_norm flag; its moving averages decay by bn_decay (the sample's 0.9). */
    bool batch_norm;
    float bn_decay;
} dt_ctr_spec;

typedef struct {
    char name[DT_LAYER_NAME_CAP];
    dt_arch arch;
    dt_ctr_spec ctr;    /* arch != DT_ARCH_SEQUENTIAL */
    int input_shape[3]; /* H, W, C; zeros: take the data's shape */
    int n_layers;
    dt_layer_spec layers[DT_MAX_LAYERS];
    dt_loss_kind loss;
} dt_model_spec;

/* "mnist_cnn" or "mlp". */
dt_status dt_model_spec_builtin(const char *name, dt_model_spec *out);

/* The sample's defaults: F 39, K 32, deep layers 128, 64, 32 with keep 0.5, init stddev 0.01;
 * feature_size 0, which the caller must set. */
void dt_ctr_spec_default(dt_ctr_spec *c);
/* The spec of a CTR model of architecture arch (not sequential): checks the sizes, naming the
 * flag-like field ("field_size"), and builds the MLP's layers for DeepFM. */
dt_status dt_model_spec_ctr(dt_arch arch, const dt_ctr_spec *c, dt_model_spec *out);
/* "lr" | "fm" | "deepfm" (and "sequential"). */
dt_status dt_arch_parse(const char *name, dt_arch *out);
const char *dt_arch_name(dt_arch arch);

/* Parses a JSON model description; errors name the file and the field ("layers[2].units"), or the
 * line and column of a syntax error. See README.md for the format. */
dt_status dt_model_spec_from_json_file(const char *path, dt_model_spec *out);
dt_status dt_model_spec_from_json(const char *text, const char *source, dt_model_spec *out);

const char *dt_loss_name(dt_loss_kind loss);

/* The spec as JSON in the form dt_model_spec_from_json reads (every field explicit, names
 * included), so the same model can be rebuilt from a checkpoint; malloc'd, NULL without memory. */
char *dt_model_spec_to_json(const dt_model_spec *spec);

#endif
