/* tf.train.Example records: decoding into rows, encoding, and a JSON listing.
 *
 * The wire format (protobuf): Example{Features features = 1}; Features{map<string, Feature>
 * feature = 1}, each map entry a message {string key = 1; Feature value = 2}; Feature{oneof kind:
 * BytesList bytes_list = 1, FloatList float_list = 2, Int64List int64_list = 3}; each list holds
 * `repeated value = 1` (floats and int64s packed when TF writes them, unpacked also accepted).
 *
 * The decoder is written by hand against that wire format, not generated: it reads a record in
 * place, looks a key up in the spec with a small hash table, and writes values straight into a
 * dt_rowbuf, with no allocation per record. Protobuf semantics are kept where a record could
 * differ from TF's writer: fields in any order, unknown fields skipped, repeated occurrences of
 * Features merged, a map key given twice takes its last value, a Feature's last list wins.
 * Groups (wire types 3 and 4) are rejected. Messages nest three levels at most (no recursion), so
 * no input can exhaust the stack. */
#ifndef DTRAIN_EXAMPLE_H
#define DTRAIN_EXAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/rows.h"
#include "dtrain/status.h"

#define DT_EXAMPLE_MAX_FEATURES 64
#define DT_EXAMPLE_KEY_CAP 64 /* bytes of a key, its terminating NUL included */
/* Bounds that keep a row's dense part within int and a sane size. */
#define DT_EXAMPLE_MAX_DENSE (1 << 26)

/* One feature to read from each Example.
 * length > 0: fixed length. The row gets `length` dense slots from a float_list, an int64_list
 *   (converted to float) or a bytes_list holding ONE value of exactly `length` bytes (each byte
 *   0..255 as a float, e.g. an image's pixels); each value is multiplied by scale. A missing
 *   feature takes default_value in every slot (not scaled) if has_default, and is an error
 *   otherwise. A different number of values is an error (a Feature with no list set has 0
 *   values, as in TF).
 * length == 0: variable length, into the row's sparse part: each int64_list value v becomes the
 *   entry (v, scale); the float_list value at position k becomes (k, value * scale). A missing
 *   feature adds nothing; a bytes_list is an error.
 * scale: 0 (as a zeroed spec leaves it) means 1; dt_example_spec_finalize writes the 1. */
typedef struct {
    char key[DT_EXAMPLE_KEY_CAP];
    int length;
    float scale;
    float divisor;  /* 0: none; else values are (v * scale) / divisor, so a scale of 1/255 divides
                       exactly as the tutorial's x / 255 does */
    bool has_default;
    float default_value;
} dt_feature_spec;

/* The features of a row, in order: the dense slots of the fixed-length features in spec order,
 * then the label, then the sparse entries of the variable-length features in spec order.
 * label_key names a feature holding exactly one int64 or float value (an error if missing or of
 * another count); "" means no label (every row's label is 0). Fill features, n_features and
 * label_key, then call dt_example_spec_finalize; the fields after n_dense are its working tables. */
typedef struct {
    dt_feature_spec features[DT_EXAMPLE_MAX_FEATURES];
    int n_features;
    char label_key[DT_EXAMPLE_KEY_CAP];
    /* CTR rows (ctr_fields > 0, set before finalize): features[0] and features[1], the only
     * ones, are the variable-length ids (an int64_list) and values (a float_list) of the DeepFM
     * sample's Examples. Each record's ids and values, exactly ctr_fields of each, are zipped
     * into the row's ctr_fields (id, value) sparse entries, in order. Checked per record: the
     * counts, a label of 0 or 1, ids >= 0 and below ctr_max_id (when > 0), finite values. With
     * ctr_hash_buckets > 0 each id's decimal digits are hashed with its position into that
     * many rows (hash.h), as field-positional LibSVM hashes its id tokens. */
    int ctr_fields;
    int64_t ctr_max_id, ctr_hash_buckets;
    /* CTR columns (ctr_columns set before finalize): one feature per field, as feature-column
     * pipelines write Criteo (I1..I13 floats, C1..C26 int64s or bytes). features[0 ..
     * ctr_numeric) are numeric fields: field i gets id i and the column's one float or int64
     * value (log(1 + max(x, 0)) with ctr_log1p); the rest are categorical: field j gets id
     * ctr_numeric + dt_hash_bucket(j, value, ctr_hash_buckets - ctr_numeric) of its one int64
     * (its decimal digits) or bytes value, value 1. A missing column or an empty list is a
     * missing value: 0 for a numeric field, the empty token hashed for a categorical one. Every
     * feature's length must be 0 (the spec's own lengths do not apply). */
    bool ctr_columns;
    int ctr_numeric;
    bool ctr_log1p;
    int n_dense; /* sum of the fixed lengths: set by dt_example_spec_finalize */
    /* Set by dt_example_spec_finalize; private to example.c. */
    int ready;
    int fast; /* every feature has a fixed length: parse_fast may take the record */
    int ctr_fast; /* ctr_fields > 0: the CTR fast path may take the record */
    int dense_off[DT_EXAMPLE_MAX_FEATURES];
    uint8_t key_len[DT_EXAMPLE_MAX_FEATURES + 1]; /* features, then the label */
    uint8_t slots[256];                           /* hash table: 0 empty, else feature index + 1 */
} dt_example_spec;

/* Checks the spec and computes n_dense and the lookup tables. DT_ERR_INVALID naming the feature:
 * an empty or too long key, a duplicate key (the label's key included), a negative length, more
 * than DT_EXAMPLE_MAX_DENSE dense slots, a non-finite scale, a default on a variable-length
 * feature. */
DT_API dt_status dt_example_spec_finalize(dt_example_spec *spec);

/* Parses a command-line list of features, "key:length[:scale[:default]]" separated by commas,
 * e.g. "image:784:1/255,label_ids:0,price:1:1:0": scale is a number or a fraction a/b (applied as
 * v * a / b, b the divisor); with a
 * default the feature may be missing. label_key may be NULL or "" (no label). The result is
 * finalized. Errors (DT_ERR_INVALID) quote the item at fault. */
DT_API dt_status dt_example_spec_parse(const char *features, const char *label_key,
                                       dt_example_spec *out);

/* Decodes one serialized Example (data, n_bytes) by spec (finalized) and appends exactly one
 * row to out, whose n_dense must equal spec->n_dense. On error nothing is appended and the message
 * reads "byte N: <what is wrong>" (N counts from the record's start) or "feature 'k' missing":
 * the caller prefixes the file and the record's offset. DT_ERR_FORMAT for a malformed record or
 * one that does not match the spec, DT_ERR_INVALID for an unfinalized spec or a row buffer of
 * another width, DT_ERR_NOMEM. */
DT_API dt_status dt_example_parse(const dt_example_spec *spec, const uint8_t *data, size_t n_bytes,
                                  dt_rowbuf *out);

/* The single-pass decoder dt_example_parse tries first, for specs whose features all have a
 * fixed length, and for CTR specs (ctr_fields: the ids and values go straight into the row's
 * entries). It takes records of the shape TF's writers give (one Features message, each map
 * entry exactly a key and a value, each Feature one list, values packed, no key twice) and decodes
 * them into the same row dt_example_parse would; at anything else, an error included, it appends
 * nothing and returns DT_END, and dt_example_parse goes on with its general decoder. Exposed so
 * tests can hold the two decoders to the same results. DT_ERR_NOMEM when the row cannot grow. */
DT_API dt_status dt_example_parse_fast(const dt_example_spec *spec, const uint8_t *data,
                                       size_t n_bytes, dt_rowbuf *out);

/* A record layout learned from earlier records, for dt_example_parse_learned: one per thread. */
typedef struct dt_example_layout dt_example_layout;
DT_API dt_status dt_example_layout_new(dt_example_layout **out);
DT_API void dt_example_layout_free(dt_example_layout *l);
/* Records the layout itself decoded (the rest went to the other decoders). */
DT_API uint64_t dt_example_layout_hits(const dt_example_layout *l);
/* Whether the layout decodes with vector instructions (AVX2 and BMI2), where the CPU has them,
 * or with the portable decoder; the results are the same. On by default. Returns whether the
 * vector decoder is now in use: tests run both. */
DT_API int dt_example_layout_use_vector(dt_example_layout *l, int on);

/* Bytes that must be readable after a record given to dt_example_parse_learned. */
#define DT_EXAMPLE_LAYOUT_SLACK 32

/* dt_example_parse for a stream of records of one shape, as one file's records are: the same
 * row, error and message on every record. The layout remembers the first record's keys and the
 * bytes around its values, and later records of that shape are checked against it and decoded
 * with one compare per feature; a record of another shape goes to dt_example_parse_fast and
 * dt_example_parse, and the layout is learned again after a run of such records. data must be
 * followed by DT_EXAMPLE_LAYOUT_SLACK readable bytes (their values do not matter). */
DT_API dt_status dt_example_parse_learned(const dt_example_spec *spec, dt_example_layout *layout,
                                          const uint8_t *data, size_t n_bytes, dt_rowbuf *out);

/* The kinds of a Feature, numbered as its oneof fields are. */
enum { DT_FEATURE_BYTES = 1, DT_FEATURE_FLOAT = 2, DT_FEATURE_INT64 = 3 };

/* One feature to encode. FLOAT: n values at floats; INT64: n values at ints; BYTES: a bytes_list
 * holding one value, the n bytes at bytes. n may be 0 (an empty list). */
typedef struct {
    const char *key;
    int type;
    size_t n;
    const float *floats;
    const int64_t *ints;
    const uint8_t *bytes;
} dt_feature_value;

/* Serializes an Example of n_features features, in the given order, as TF writes it (floats
 * and int64s packed) into *buf, a malloc'd buffer of *cap bytes (NULL and 0 at first) that grows
 * with realloc as needed and stays the caller's to free; *n_bytes receives the length. Errors
 * (DT_ERR_INVALID): a NULL key, an unknown type, NULL values with n > 0, a size past 2 GiB. */
DT_API dt_status dt_example_encode(const dt_feature_value *f, int n_features, uint8_t **buf,
                                   size_t *n_bytes, size_t *cap);

/* One feature of an Example as dt_example_read decoded it. kind: DT_FEATURE_BYTES,
 * DT_FEATURE_FLOAT, DT_FEATURE_INT64, or 0 for a Feature with no list set (n = 0). Pointers valid
 * until the reader's next read. The pointer of the feature's kind is never NULL, even when n is 0
 * (an empty list); the other kinds' pointers are NULL. */
typedef struct {
    const char *key;      /* not NUL-terminated; a map entry with no key has the key "" */
    size_t key_len;
    int kind;
    size_t n;             /* values */
    const int64_t *ints;  /* INT64 */
    const float *floats;  /* FLOAT */
    const uint8_t *const *bytes; /* BYTES: n pointers into the record */
    const size_t *bytes_len;     /* BYTES: n lengths */
} dt_example_feature;

/* A thread's buffers for dt_example_read; reused across records. */
typedef struct dt_example_reader dt_example_reader;
DT_API dt_status dt_example_reader_new(dt_example_reader **out);
/* Accepts NULL. */
DT_API void dt_example_reader_free(dt_example_reader *r);

/* Decodes every feature of the record (data, n_bytes): *features gets an array of *n_features
 * entries in record order (through repeated Features messages, which merge). A map key given
 * twice appears once, with its LAST value (protobuf map semantics, as dt_example_parse uses), at
 * the place of its first appearance; the earlier values must still be well formed, as protobuf's
 * parser requires. Ints stay int64 exactly, floats are as stored, bytes values point into the
 * record (which must outlive the use of the features). No allocation per record once the
 * buffers have grown. Errors as dt_example_parse's ("byte N: <what is wrong>", DT_ERR_FORMAT for
 * a malformed record) and DT_ERR_NOMEM; on error *features is NULL and *n_features 0. */
DT_API dt_status dt_example_read(dt_example_reader *r, const uint8_t *data, size_t n_bytes,
                                 const dt_example_feature **features, size_t *n_features);

/* One line of JSON listing every feature of a serialized Example in record order:
 * {"key": [values...], ...}. int64 values print as integers, floats with %.9g and always with a
 * '.' or an exponent (1.0, not 1; "nan", "inf" and "-inf" as strings), bytes values as base64
 * strings; a feature with no list set prints []. A key given twice prints twice (its last value is
 * the one parsing uses). *out_text is malloc'd: free() it. Errors as dt_example_parse's. */
DT_API dt_status dt_example_to_json(const uint8_t *data, size_t n_bytes, char **out_text);

#endif
