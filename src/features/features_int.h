/* The feature spec as the features layer holds it (private to src/features): the raw keys the
 * columns read, the columns in spec order with what each computes, the label, and the order in
 * which a row's columns are computed (every column after the columns it reads).
 *
 * A transformed row (features.h) keeps numeric values in its dense part, at each numeric
 * column's dense_off, and categorical ids in its sparse part, each entry's id carrying its
 * column's slot in the bits from DT_FEATURE_SLOT_SHIFT up, its value the weight. */
#ifndef DTRAIN_FEATURES_INT_H
#define DTRAIN_FEATURES_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/features.h"
#include "dtrain/keymap.h"

typedef struct cJSON cJSON;

/* A string -> index table: the tokens of a vocabulary in one blob, found by Fingerprint64 with
 * open addressing. */
typedef struct {
    int64_t n;          /* tokens */
    char *blob;         /* the tokens, each NUL-terminated, in index order */
    size_t blob_bytes;
    size_t *offset;     /* (n): token i starts at blob + offset[i] */
    uint32_t *len;      /* (n) */
    int64_t *slots;     /* (cap): token index + 1, 0 empty */
    uint64_t cap;       /* a power of two */
} dt_vocab;

typedef enum {
    DT_NORM_NONE = 0,
    DT_NORM_STANDARDIZE, /* (x - mean) / std, both adapted */
    DT_NORM_LOG1P,       /* log(1 + max(x, 0)) */
    DT_NORM_FIXED,       /* (x - mean) / std as given */
} dt_normalizer;

/* One of a crossed column's keys: a raw key (its values hashed) or a categorical column (its
 * ids as they are). */
typedef struct {
    int key;     /* >= 0: a raw key */
    int column;  /* >= 0: a column */
} dt_cross_ref;

#define DT_FEATURE_MAX_CROSS 8

typedef struct {
    char name[DT_FEATURE_NAME_CAP];
    dt_feature_column_type type;
    int key;                /* the raw key read; -1: none (bucketized, crossed, weighted) */
    char separator;         /* a text cell split into values at it; 0: one value */
    /* numeric */
    int shape;              /* values per example */
    bool has_default;
    float default_value;
    dt_normalizer norm;
    double mean, std;
    /* bucketized */
    int source;             /* the numeric column */
    double *boundaries;
    int n_boundaries;
    int num_bins;           /* > 0: boundaries adapted (quantiles) */
    /* vocabularies */
    dt_vocab vocab;
    char vocab_path[4096];  /* vocabulary_file, resolved against the spec's directory */
    int64_t vocab_size;     /* vocabulary_file: the first lines only; 0: all */
    int64_t num_oov;
    int64_t cat_default;    /* vocabularies, identity: -1 drops the value */
    bool has_cat_default;   /* identity: without one an id out of range is an error */
    int64_t adapt_min_count, adapt_max_tokens; /* vocabulary: max_tokens 0 = no bound */
    /* hash_bucket, identity, crossed: "dynamic": true keys a table by the value (its key below)
     * under this admission and eviction, instead of a bucket; weighted: its column's */
    bool dynamic;
    dt_keymap_policy policy;
    /* hash_bucket, crossed */
    int64_t hash_bucket_size;
    /* identity */
    int64_t num_buckets;
    /* crossed */
    dt_cross_ref cross[DT_FEATURE_MAX_CROSS];
    int n_cross;
    uint64_t hash_key;
    /* weighted */
    int categorical;        /* the categorical column weighted */
    int weight_key;         /* the raw key of the weights */
    /* Derived. */
    bool adapted;           /* statistics or vocabulary present (or nothing to adapt) */
    int64_t buckets;        /* categorical: ids lie in [0, buckets) */
    int slot;               /* categorical: its slot in transformed rows; -1 numeric */
    int dense_off;          /* numeric: its first value in the dense part; -1 categorical */
    bool used;              /* named by a part of the model */
} dt_feature_column;

struct dt_features {
    char source[4096];      /* the spec file (or the name given), for messages */
    char dir[4096];         /* where relative vocabulary files are found */
    char (*keys)[DT_FEATURE_NAME_CAP];
    int n_keys;
    dt_feature_column *cols;
    int n_cols;
    int *order;             /* (n_cols): columns in the order a row computes them */
    int n_dense, n_slots;
    int *slot_column;       /* (n_slots): the column of each slot */
    /* The label: its raw key, and its vocabulary (labels are indices in it), if any. */
    int label_key;
    dt_vocab label_vocab;
    bool has_label_vocab;
    /* Rows may lack the label (scoring): a missing one reads 0 (dt_features_set_unlabeled). */
    bool unlabeled;
    cJSON *model;           /* the "model" object as given, for the model builder; may be NULL */
    dt_columns_spec *columns; /* the model builder's, or NULL */
};

/* ---- Vocabularies (vocab.c) ---- */
void dt_vocab_init(dt_vocab *v);
void dt_vocab_free(dt_vocab *v);
/* Builds the table over n tokens (pointers and lengths); a token given twice is DT_ERR_INVALID
 * naming it and its two places. */
dt_status dt_vocab_build(dt_vocab *v, const char *const *tokens, const uint32_t *lens, int64_t n);
/* The index of the token, or -1. */
int64_t dt_vocab_find(const dt_vocab *v, const char *token, size_t len);
/* The same given the token's Fingerprint64. */
int64_t dt_vocab_find_hashed(const dt_vocab *v, const char *token, size_t len, uint64_t fp);
static inline const char *dt_vocab_token(const dt_vocab *v, int64_t i) { return v->blob + v->offset[i]; }

/* ---- Columns (spec.c) ---- */
/* DT_ERR_INVALID for a spec's content, as its parser and the model builder name it:
 * "SOURCE: WHERE: message" ("columns[3] 'age'", "model.dnn_hidden_units"), or
 * "SOURCE: message" when where is empty. */
dt_status dt_features_verror(const dt_features *f, const char *where, const char *fmt,
                             va_list ap) __attribute__((format(printf, 3, 0)));
/* The column called name, or -1. */
int dt_features_find_column(const dt_features *f, const char *name);
/* Whether a column's output is ids (categorical) rather than values. */
static inline bool dt_feature_is_categorical(const dt_feature_column *c)
{
    return c->type != DT_FCOL_NUMERIC;
}
/* Computes buckets, slots and dense offsets once every vocabulary and boundary is known. */
void dt_features_layout(dt_features *f);

/* ---- Raw values (transform.c), for the adapt passes ---- */
/* The raw values of a line or record, one per key, valid until the scratch's next use; DT_END
 * for a blank line. */
dt_status dt_feature_text_values(const dt_features *f, const dt_feature_text *t,
                                 dt_feature_scratch *s, const char *line, size_t len,
                                 const dt_raw_value **values);
dt_status dt_features_example_values(const dt_features *f, dt_feature_scratch *s,
                                     const uint8_t *data, size_t n_bytes,
                                     const dt_raw_value **values);
/* A categorical column's raw value as tokens, as its transform reads them. */
dt_status dt_feature_tokens(const dt_features *f, const dt_feature_column *c,
                            const dt_raw_value *v, dt_feature_scratch *s,
                            const dt_bytes_ref **tokens, size_t *n);
/* A numeric column's raw values before its normalizer; *n = 0 when missing. */
dt_status dt_feature_numbers(const dt_features *f, const dt_feature_column *c,
                             const dt_raw_value *v, dt_feature_scratch *s, const float **values,
                             int *n);

#endif
