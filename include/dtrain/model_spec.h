/* Model specs: the layers of a sequential model as Keras describes them, from a built-in name
 * (mnist_cnn: the model of TensorFlow's multi-worker tutorial; mlp: TensorFlow's beginner
 * quickstart) or from a JSON file parsed with cJSON. */
#ifndef DTRAIN_MODEL_SPEC_H
#define DTRAIN_MODEL_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/keymap.h"
#include "dtrain/status.h"

#define DT_MAX_LAYERS 64
#define DT_LAYER_NAME_CAP 48

/* A dense or conv2d layer's activation, applied to its output. */
typedef enum { DT_ACT_NONE = 0, DT_ACT_RELU, DT_ACT_SIGMOID, DT_ACT_TANH } dt_activation;

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
typedef enum {
    DT_ARCH_SEQUENTIAL = 0,
    DT_ARCH_LR,
    DT_ARCH_FM,
    DT_ARCH_DEEPFM,
    DT_ARCH_COLUMNS, /* a model over a feature spec's columns (features.h): dt_columns_spec */
} dt_arch;

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
    /* Dynamic tables (keymap.h): fm_w and fm_v keyed by the raw id, any int64, growing as ids
     * arrive under the policy's admission and eviction; feature_size is then unused. */
    bool dynamic;
    dt_keymap_policy dynamic_policy;
} dt_ctr_spec;

/* A model over the columns of a feature spec, as TensorFlow's canned estimators and TF
 * Recommenders build it from feature columns. Rows come transformed (features.h): n_dense
 * numeric values, and categorical ids tagged with their column's slot, each with a weight.
 *   linear  logits (N) = the bias table's row + numeric values x rows of the numeric kernel
 *           table + for each categorical input, weight x its table's row per id (N wide):
 *           LinearClassifier with the sum combiner; every linear variable is a table, so that
 *           the linear part's row-wise optimizer (FTRL by default) trains all of it;
 *   deep    x0, the concatenation of its inputs (numeric values, embeddings combined per
 *           example, numeric values times an embedding row, indicators as multi-hot counts),
 *           through the model's layers, which end in N units;
 *   fm      DeepFM's pairwise term over the deep inputs as fields of one width;
 *   cross   n_cross DCN-v2 layers x_{l+1} = x0 * (W_l x_l + b_l) + x_l (W_l = U_l V_l when
 *           projection_dim > 0): stacked, the layers read x_L; parallel, they read x0 and
 *           x_L . cross/logits/kernel joins the logits.
 * The logits are the sum of the parts there are. */
#define DT_MAX_COLUMN_INPUTS 256
#define DT_MAX_COLUMN_TABLES 256
#define DT_MAX_CROSS_LAYERS 16
#define DT_COLUMN_TABLE_NAME_CAP 96

/* A transformed row's sparse entry: the slot of its column in the high bits, the id below. Ids
 * stay below 2^48; slots below 2^15. */
#define DT_FEATURE_SLOT_SHIFT 48
#define DT_FEATURE_MAX_BUCKETS ((int64_t)1 << DT_FEATURE_SLOT_SHIFT)
static inline int dt_feature_entry_slot(int64_t entry) { return (int)(entry >> DT_FEATURE_SLOT_SHIFT); }
static inline int64_t dt_feature_entry_id(int64_t entry)
{
    return entry & (DT_FEATURE_MAX_BUCKETS - 1);
}
static inline int64_t dt_feature_entry(int slot, int64_t id)
{
    return ((int64_t)slot << DT_FEATURE_SLOT_SHIFT) | id;
}
/* A dynamic column's id is a key of its table (keymap.h: 0 .. 2^63 - 1), too wide to stand
 * beside a slot: it takes two entries of its slot, the key's high 31 bits, then its low 32. */
static inline int64_t dt_feature_key_hi(int slot, int64_t key)
{
    return dt_feature_entry(slot, (int64_t)((uint64_t)key >> 32));
}
static inline int64_t dt_feature_key_lo(int slot, int64_t key)
{
    return dt_feature_entry(slot, key & 0xffffffff);
}
/* The key of such a pair, or -1 when the two are not one (a half past its bits). */
static inline int64_t dt_feature_entry_key(int64_t hi, int64_t lo)
{
    int64_t h = dt_feature_entry_id(hi), l = dt_feature_entry_id(lo);
    return h >> 31 || l >> 32 ? -1 : h << 32 | l;
}

typedef enum { DT_COMBINER_SUM = 0, DT_COMBINER_MEAN, DT_COMBINER_SQRTN } dt_combiner;
typedef enum {
    DT_INPUT_NUMERIC = 0, /* dense values [dense_off, dense_off + width); linear: times rows
                             row0 .. row0 + width of its table */
    DT_INPUT_EMBEDDING,   /* a slot's ids through a table, combined */
    DT_INPUT_INDICATOR,   /* a slot's ids as a multi-hot vector of `buckets` weights */
    DT_INPUT_WEIGHTS,     /* linear: a slot's ids through a table of N-wide rows, summed */
    DT_INPUT_BIAS,        /* linear: row 0 of its table */
    DT_INPUT_NUMERIC_EMBEDDING, /* deep: one dense value times row 0 of its table */
} dt_column_input_kind;

typedef struct {
    dt_column_input_kind kind;
    int dense_off, width;  /* numeric */
    int slot;              /* categorical: the slot of its ids */
    int table;             /* embedding, weights, bias, linear numeric */
    int64_t row0;          /* linear numeric: its first row in the table */
    dt_combiner combiner;  /* embedding */
    int64_t buckets;       /* indicator */
} dt_column_input;

typedef struct {
    char name[DT_COLUMN_TABLE_NAME_CAP];
    int64_t rows;
    int dim;
    bool linear;           /* of the linear part (its optimizer), else the deep part's */
    float init_stddev;     /* 0: zeros (linear); embeddings: 1 / sqrt(dim) */
    /* Keyed by its slots' keys (keymap.h) under this policy, rows unused: tables read through
     * the same slots share one key map, so that a key has one row in all of them. */
    bool dynamic;
    dt_keymap_policy policy;
} dt_column_table;

typedef struct {
    int n_dense, n_slots;  /* the transformed rows' widths */
    int n_outputs;         /* N: 1 for a binary or regression head, classes for multiclass */
    int n_linear, n_deep, n_tables;
    dt_column_input linear[DT_MAX_COLUMN_INPUTS];
    dt_column_input deep[DT_MAX_COLUMN_INPUTS];
    dt_column_table tables[DT_MAX_COLUMN_TABLES];
    bool fm;               /* DeepFM's term over the deep inputs (all of one width) */
    int n_cross;           /* DCN-v2 cross layers over x0 */
    int projection_dim;    /* 0: full-rank W */
    bool cross_stacked;    /* the layers read x_L; else (parallel) x0 */
} dt_columns_spec;

typedef struct {
    char name[DT_LAYER_NAME_CAP];
    dt_arch arch;
    dt_ctr_spec ctr;    /* arch LR, FM, DEEPFM */
    dt_columns_spec *columns; /* arch COLUMNS: owned by whoever built the spec, borrowed here
                                 and by the model, which keeps its own copy */
    int input_shape[3]; /* H, W, C; zeros: take the data's shape */
    int n_layers;
    dt_layer_spec layers[DT_MAX_LAYERS];
    dt_loss_kind loss;
} dt_model_spec;

/* "mnist_cnn" or "mlp". */
DT_API dt_status dt_model_spec_builtin(const char *name, dt_model_spec *out);

/* The sample's defaults: F 39, K 32, deep layers 128, 64, 32 with keep 0.5, init stddev 0.01;
 * feature_size 0, which the caller must set. */
DT_API void dt_ctr_spec_default(dt_ctr_spec *c);
/* The sizes' ranges whatever the architecture (feature_size 0 while it is still to be learnt
 * from the data); errors name the field first ("dropout_keep: ..."). */
DT_API dt_status dt_ctr_spec_check(const dt_ctr_spec *c);
/* The spec of a CTR model of architecture arch (not sequential): checks the sizes, naming the
 * flag-like field ("field_size"), and builds the MLP's layers for DeepFM. */
DT_API dt_status dt_model_spec_ctr(dt_arch arch, const dt_ctr_spec *c, dt_model_spec *out);
/* Whether the model has dynamic tables (keymap.h): a CTR model's (ctr.dynamic), or a feature
 * spec's dynamic columns' (dt_column_table.dynamic). */
DT_API bool dt_model_spec_dynamic(const dt_model_spec *spec);
/* "lr" | "fm" | "deepfm" (and "sequential"). */
DT_API dt_status dt_arch_parse(const char *name, dt_arch *out);
DT_API const char *dt_arch_name(dt_arch arch);

/* Parses a JSON model description; errors name the file and the field ("layers[2].units"), or the
 * line and column of a syntax error. See README.md for the format. */
DT_API dt_status dt_model_spec_from_json_file(const char *path, dt_model_spec *out);
DT_API dt_status dt_model_spec_from_json(const char *text, const char *source, dt_model_spec *out);

DT_API const char *dt_loss_name(dt_loss_kind loss);

/* The spec as JSON in the form dt_model_spec_from_json reads (every field explicit, names
 * included), so the same model can be rebuilt from a checkpoint; malloc'd, NULL without memory. */
DT_API char *dt_model_spec_to_json(const dt_model_spec *spec);

#endif
