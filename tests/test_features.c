/* Feature specs (src/features): every spec error naming the file and the column or field, the
 * transform of each column type from hand-built raw values against TensorFlow's semantics (the
 * published hashed-cross figure, OOV buckets, bucket edges, weights kept aligned when values are
 * dropped), the sparse entries' slot encoding, the spec written back as JSON and read again, the
 * adapt passes over CSV and TFRecord data (exact statistics, quantiles and vocabulary order,
 * several threads alike), and tf.Example records. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/example.h"
#include "dtrain/features.h"
#include "dtrain/input.h"
#include "dtrain/log.h"
#include "dtrain/tfrecord.h"
#include "../src/features/features_int.h"
#include "../src/features/fingerprint.h"
#include "test.h"

/* ---- Helpers ---- */

/* JSON written with single quotes (no token here has one): the text with ' as ". */
static const char *J(const char *s)
{
    static char buf[8][16384];
    static int next;
    char *p = buf[next++ % 8];
    size_t n = strlen(s);
    if (n >= sizeof buf[0]) {
        test_fail(__FILE__, __LINE__, "J: spec too long");
        n = sizeof buf[0] - 1;
    }
    for (size_t i = 0; i < n; i++)
        p[i] = s[i] == '\'' ? '"' : s[i];
    p[n] = '\0';
    return p;
}

/* Parses a spec (named spec.json in messages); the status, the spec freed. */
static dt_status parse_spec(const char *json)
{
    dt_features *f = (dt_features *)&f; /* must come back NULL on error */
    dt_status st = dt_features_parse(json, "spec.json", NULL, &f);
    if (st == DT_OK)
        dt_features_destroy(f);
    else if (f != NULL)
        test_fail(__FILE__, __LINE__, "a failed parse left *out set");
    return st;
}

static dt_features *parse_ok(const char *json, int line)
{
    dt_features *f = NULL;
    dt_status st = dt_features_parse(json, "spec.json", NULL, &f);
    if (st != DT_OK) {
        test_fail(__FILE__, line, "parse failed: %s", dt_last_error());
        return NULL;
    }
    return f;
}
#define PARSE(json) parse_ok(json, __LINE__)

static int key_index(const dt_features *f, const char *name)
{
    for (int i = 0; i < dt_features_num_keys(f); i++)
        if (strcmp(dt_features_key(f, i), name) == 0)
            return i;
    return -1;
}

static int column_index(const dt_features *f, const char *name)
{
    for (int i = 0; i < dt_features_num_columns(f); i++)
        if (strcmp(dt_features_column_name(f, i), name) == 0)
            return i;
    return -1;
}

/* One raw row: a value per key of the spec, missing until set. */
#define MAX_KEYS 24
#define MAX_VALS 8
typedef struct {
    const dt_features *f;
    dt_raw_value v[MAX_KEYS];
    dt_bytes_ref b[MAX_KEYS][MAX_VALS];
    int64_t ints[MAX_KEYS][MAX_VALS];
    float floats[MAX_KEYS][MAX_VALS];
} raw_row;

static void row_init(raw_row *r, const dt_features *f)
{
    memset(r, 0, sizeof *r);
    r->f = f;
    if (dt_features_num_keys(f) > MAX_KEYS)
        test_fail(__FILE__, __LINE__, "too many keys for raw_row");
}

static int row_key(raw_row *r, const char *k, int line)
{
    int i = key_index(r->f, k);
    if (i < 0)
        test_fail(__FILE__, line, "the spec has no key '%s'", k);
    return i;
}

static void put_text_(raw_row *r, const char *k, const char *s, int line)
{
    int i = row_key(r, k, line);
    if (i < 0)
        return;
    r->b[i][0] = (dt_bytes_ref){s, strlen(s)};
    r->v[i] = (dt_raw_value){DT_RAW_TEXT, 1, r->b[i], NULL, NULL};
}
#define PUT_TEXT(r, k, s) put_text_(r, k, s, __LINE__)

static void put_bytes_(raw_row *r, const char *k, const char *const *s, int n, int line)
{
    int i = row_key(r, k, line);
    if (i < 0)
        return;
    for (int j = 0; j < n; j++)
        r->b[i][j] = (dt_bytes_ref){s[j], strlen(s[j])};
    r->v[i] = (dt_raw_value){DT_RAW_BYTES, (size_t)n, r->b[i], NULL, NULL};
}
#define PUT_BYTES(r, k, ...)                                                                       \
    do {                                                                                           \
        const char *const s_[] = {__VA_ARGS__};                                                    \
        put_bytes_(r, k, s_, (int)(sizeof s_ / sizeof s_[0]), __LINE__);                           \
    } while (0)

static void put_ints_(raw_row *r, const char *k, const int64_t *v, int n, int line)
{
    int i = row_key(r, k, line);
    if (i < 0)
        return;
    memcpy(r->ints[i], v, (size_t)n * sizeof *v);
    r->v[i] = (dt_raw_value){DT_RAW_INT64, (size_t)n, NULL, r->ints[i], NULL};
}
#define PUT_INTS(r, k, ...)                                                                        \
    do {                                                                                           \
        const int64_t v_[] = {__VA_ARGS__};                                                        \
        put_ints_(r, k, v_, (int)(sizeof v_ / sizeof v_[0]), __LINE__);                            \
    } while (0)

static void put_floats_(raw_row *r, const char *k, const float *v, int n, int line)
{
    int i = row_key(r, k, line);
    if (i < 0)
        return;
    memcpy(r->floats[i], v, (size_t)n * sizeof *v);
    r->v[i] = (dt_raw_value){DT_RAW_FLOAT, (size_t)n, NULL, NULL, r->floats[i]};
}
#define PUT_FLOATS(r, k, ...)                                                                      \
    do {                                                                                           \
        const float v_[] = {__VA_ARGS__};                                                          \
        put_floats_(r, k, v_, (int)(sizeof v_ / sizeof v_[0]), __LINE__);                          \
    } while (0)

static void put_missing(raw_row *r, const char *k)
{
    int i = row_key(r, k, __LINE__);
    if (i >= 0)
        r->v[i] = (dt_raw_value){DT_RAW_MISSING, 0, NULL, NULL, NULL};
}

/* Transforms the row, appending to b (with a fresh scratch each time). */
static dt_status xform(const raw_row *r, dt_rowbuf *b)
{
    dt_feature_scratch *s = NULL;
    dt_status st = dt_feature_scratch_new(r->f, &s);
    if (st)
        return st;
    st = dt_features_transform(r->f, s, r->v, b);
    dt_feature_scratch_free(s);
    return st;
}

/* The ids and weights of column `col` in row `row`. */
static int col_ids(const dt_features *f, const dt_rowbuf *b, int row, const char *col,
                   int64_t *ids, float *w, int max)
{
    int c = column_index(f, col);
    if (c < 0 || row >= b->n) {
        test_fail(__FILE__, __LINE__, "no column '%s' or no row %d", col, row);
        return -1;
    }
    int slot = dt_features_column_slot(f, c), n = 0;
    for (int64_t j = b->sp_row[row]; j < b->sp_row[row + 1]; j++)
        if (dt_feature_entry_slot(b->sp_ids[j]) == slot) {
            if (n < max) {
                if (ids)
                    ids[n] = dt_feature_entry_id(b->sp_ids[j]);
                if (w)
                    w[n] = b->sp_vals[j];
            }
            n++;
        }
    return n;
}

static void check_ids(const dt_features *f, const dt_rowbuf *b, int row, const char *col,
                      const int64_t *want, int n_want, int line)
{
    int64_t ids[64];
    float w[64];
    int n = col_ids(f, b, row, col, ids, w, 64);
    bool same = n == n_want;
    for (int i = 0; same && i < n; i++)
        same = ids[i] == want[i] && w[i] == 1.0f;
    if (!same) {
        char got[512] = "", exp[512] = "";
        for (int i = 0; i < n && i < 16; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), " %lld(w %g)", (long long)ids[i],
                     (double)w[i]);
        for (int i = 0; i < n_want && i < 16; i++)
            snprintf(exp + strlen(exp), sizeof exp - strlen(exp), " %lld", (long long)want[i]);
        test_fail(__FILE__, line, "row %d column '%s': ids [%s ], expected [%s ] (weights 1)", row,
                  col, got, exp);
    }
}
#define CHECK_IDS(f, b, row, col, ...)                                                             \
    do {                                                                                           \
        const int64_t w_[] = {__VA_ARGS__};                                                        \
        check_ids(f, b, row, col, w_, (int)(sizeof w_ / sizeof w_[0]), __LINE__);                  \
    } while (0)
#define CHECK_NO_IDS(f, b, row, col) CHECK(col_ids(f, b, row, col, NULL, NULL, 0) == 0)

/* Column col's dense value i in row `row`. */
static float dense_of(const dt_features *f, const dt_rowbuf *b, int row, const char *col, int i)
{
    int c = column_index(f, col), width = 0;
    int off = c >= 0 ? dt_features_column_dense(f, c, &width) : -1;
    if (off < 0 || i >= width || row >= b->n) {
        test_fail(__FILE__, __LINE__, "no dense value %d of '%s' in row %d", i, col, row);
        return NAN;
    }
    return b->dense[(size_t)row * (size_t)b->n_dense + (size_t)off + (size_t)i];
}

static uint64_t fp(const char *s) { return dt_fingerprint64(s, strlen(s)); }

/* FingerprintCat64 written out again from its definition (SEMANTICS.md), not the library's. */
static uint64_t shift_mix(uint64_t v) { return v ^ (v >> 47); }
static uint64_t cat64(uint64_t a, uint64_t b)
{
    const uint64_t k = 0xc6a4a7935bd1e995ULL;
    uint64_t r = a ^ k;
    r ^= shift_mix(b * k) * k;
    r *= k;
    r = shift_mix(r) * k;
    return shift_mix(r);
}
#define CROSS_KEY 0xDECAFCAFFEULL

/* Two rowbufs hold the same rows, bit for bit. */
static bool same_rows(const dt_rowbuf *a, const dt_rowbuf *b)
{
    if (a->n != b->n || a->n_dense != b->n_dense || a->nnz != b->nnz)
        return false;
    size_t nd = (size_t)a->n * (size_t)a->n_dense;
    if (nd && memcmp(a->dense, b->dense, nd * sizeof(float)) != 0)
        return false;
    if (a->n && memcmp(a->labels, b->labels, (size_t)a->n * sizeof(float)) != 0)
        return false;
    if (memcmp(a->sp_row, b->sp_row, (size_t)(a->n + 1) * sizeof(int64_t)) != 0)
        return false;
    return a->nnz == 0 || (memcmp(a->sp_ids, b->sp_ids, a->nnz * sizeof(int64_t)) == 0 &&
                           memcmp(a->sp_vals, b->sp_vals, a->nnz * sizeof(float)) == 0);
}

/* Every line of a CSV text after its header, through the spec, into b. */
static dt_status csv_rows(const dt_features *f, const char *csv, dt_rowbuf *b)
{
    const char *nl = strchr(csv, '\n');
    dt_feature_text *t = NULL;
    dt_feature_scratch *s = NULL;
    dt_status st = dt_feature_text_new(f, csv, nl ? (size_t)(nl - csv) : strlen(csv), ',', &t);
    if (st == DT_OK)
        st = dt_feature_scratch_new(f, &s);
    for (const char *p = nl ? nl + 1 : NULL; st == DT_OK && p && *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        st = dt_feature_text_parse(f, t, s, p, len, b);
        if (st == DT_END)
            st = DT_OK;
        p = e ? e + 1 : p + len;
    }
    dt_feature_scratch_free(s);
    dt_feature_text_free(t);
    return st;
}

static void write_text(const char *path, const char *text)
{
    test_write_file(path, text, strlen(text));
}

static dt_status adapt_on(dt_features *f, const char *kind, const char *path, int threads,
                          bool skip, int64_t *bad)
{
    char text[4200];
    snprintf(text, sizeof text, "%s:%s", kind, path);
    dt_input_spec ds;
    dt_status st = dt_input_spec_parse(text, "--data", &ds);
    return st ? st : dt_features_adapt(f, &ds, threads, skip, bad);
}

/* ---- Spec errors ---- */

TEST(features_spec_errors_name_file_and_column)
{
    /* Unknown type, unknown field (of a column, of the root, of a normalizer). */
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'numerik'}]}")), DT_ERR_INVALID,
              "spec.json: columns[0] 'a': unknown type \"numerik\"");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'numeric','defualt_value':0}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'a': unknown field \"defualt_value\"");
    CHECK_ERR(parse_spec(J("{'colums':[{'name':'a','type':'numeric'}]}")), DT_ERR_INVALID,
              "spec.json: unknown field \"colums\"");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'numeric','normalizer':"
                           "{'mean':1,'std':2,'sd':3}}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'a': unknown field \"sd\"");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'hash_bucket','hash_bucket_size':9,"
                           "'boundaries':[1]}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'a': unknown field \"boundaries\"");
    /* A numeric default beyond a float's range (it would be inf). */
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'numeric','default_value':1e39}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'a': default_value: 1e+39 is beyond a float's "
                              "range");
    /* Missing name, or a type. */
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'numeric'},{'type':'numeric'}]}")),
              DT_ERR_INVALID, "spec.json: columns[1]: name: expected a name");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'','type':'numeric'}]}")), DT_ERR_INVALID,
              "spec.json: columns[0]: name: expected a name");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a'}]}")), DT_ERR_INVALID,
              "spec.json: columns[0] 'a': type: missing");
    /* A name given twice. */
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'numeric'},"
                           "{'name':'a','type':'hash_bucket','key':'k','hash_bucket_size':5}]}")),
              DT_ERR_INVALID, "spec.json: columns[1] 'a': a second column of this name");
    /* Bucketized: boundaries that repeat or descend; a source that is not numeric, or unknown. */
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'numeric'},{'name':'ab','type':"
                           "'bucketized','source':'a','boundaries':[1,5,5]}]}")),
              DT_ERR_INVALID, "spec.json: columns[1] 'ab': boundaries must ascend: boundaries[2]");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'numeric'},{'name':'ab','type':"
                           "'bucketized','source':'a','boundaries':[3,2]}]}")),
              DT_ERR_INVALID, "spec.json: columns[1] 'ab': boundaries must ascend");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'h','type':'hash_bucket','hash_bucket_size':5},"
                           "{'name':'hb','type':'bucketized','source':'h','boundaries':[1]}]}")),
              DT_ERR_INVALID, "spec.json: columns[1] 'hb': source: 'h' is not a numeric column");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'numeric','shape':2},{'name':'ab',"
                           "'type':'bucketized','source':'a','boundaries':[1]}]}")),
              DT_ERR_INVALID, "spec.json: columns[1] 'ab': source: 'a' is not a numeric column");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'numeric'},{'name':'ab','type':"
                           "'bucketized','source':'zz','boundaries':[1]}]}")),
              DT_ERR_INVALID, "spec.json: columns[1] 'ab': source: no column is called 'zz'");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'numeric'},{'name':'ab','type':"
                           "'bucketized','boundaries':[1]}]}")),
              DT_ERR_INVALID, "spec.json: columns[1] 'ab': source:");
    /* Crossed over a numeric column, by its name and through its raw key (a key only numeric
     * columns read, as a string or as {"key": k}). */
    const char *cols = "{'name':'agen','type':'numeric','key':'age'},"
                       "{'name':'edu','type':'vocabulary_list','key':'education',"
                       "'vocabulary':['a','b']},"
                       "{'name':'occ','type':'hash_bucket','key':'occupation',"
                       "'hash_bucket_size':50}";
    char spec[2048];
    snprintf(spec, sizeof spec, "{'columns':[%s,{'name':'x','type':'crossed','keys':%s,"
             "'hash_bucket_size':10}]}", cols, "['agen','education']");
    CHECK_ERR(parse_spec(J(spec)), DT_ERR_INVALID,
              "spec.json: columns[3] 'x': keys[0]: 'agen' is a numeric column");
    snprintf(spec, sizeof spec, "{'columns':[%s,{'name':'x','type':'crossed','keys':%s,"
             "'hash_bucket_size':10}]}", cols, "['education',{'key':'age'}]");
    CHECK_ERR(parse_spec(J(spec)), DT_ERR_INVALID,
              "spec.json: columns[3] 'x': keys[1]: 'age' is a numeric key");
    snprintf(spec, sizeof spec, "{'columns':[%s,{'name':'x','type':'crossed','keys':%s,"
             "'hash_bucket_size':10}]}", cols, "['age','education']");
    CHECK_ERR(parse_spec(J(spec)), DT_ERR_INVALID,
              "spec.json: columns[3] 'x': keys[0]: 'age' is a numeric key");
    snprintf(spec, sizeof spec, "{'columns':[%s,{'name':'x','type':'crossed','keys':%s,"
             "'hash_bucket_size':10}]}", cols, "[{'column':'agen'},'education']");
    CHECK_ERR(parse_spec(J(spec)), DT_ERR_INVALID,
              "spec.json: columns[3] 'x': keys[0]: 'agen' is a numeric column");
    /* Crossed over a hash_bucket column (TF: cross its raw key instead), by name or object. */
    snprintf(spec, sizeof spec, "{'columns':[%s,{'name':'x','type':'crossed','keys':%s,"
             "'hash_bucket_size':10}]}", cols, "['education',{'column':'occ'}]");
    CHECK_ERR(parse_spec(J(spec)), DT_ERR_INVALID,
              "spec.json: columns[3] 'x': keys[1]: 'occ' is a hash_bucket column");
    snprintf(spec, sizeof spec, "{'columns':[%s,{'name':'x','type':'crossed','keys':%s,"
             "'hash_bucket_size':10}]}", cols, "['occ','education']");
    CHECK_ERR(parse_spec(J(spec)), DT_ERR_INVALID,
              "spec.json: columns[3] 'x': keys[0]: 'occ' is a hash_bucket column");
    /* Fewer than two keys; an unknown name. */
    snprintf(spec, sizeof spec, "{'columns':[%s,{'name':'x','type':'crossed','keys':%s,"
             "'hash_bucket_size':10}]}", cols, "['education']");
    CHECK_ERR(parse_spec(J(spec)), DT_ERR_INVALID,
              "spec.json: columns[3] 'x': keys: expected a list of 2..");
    snprintf(spec, sizeof spec, "{'columns':[%s,{'name':'x','type':'crossed','keys':%s,"
             "'hash_bucket_size':10}]}", cols, "[]");
    CHECK_ERR(parse_spec(J(spec)), DT_ERR_INVALID, "spec.json: columns[3] 'x': keys:");
    snprintf(spec, sizeof spec, "{'columns':[%s,{'name':'x','type':'crossed','keys':%s,"
             "'hash_bucket_size':10}]}", cols, "['education','nosuch']");
    CHECK_ERR(parse_spec(J(spec)), DT_ERR_INVALID,
              "spec.json: columns[3] 'x': keys[1]: no column and no key is called 'nosuch'");
    /* A crossed key a valid spec takes, for contrast: the raw keys of the categorical columns. */
    snprintf(spec, sizeof spec, "{'columns':[%s,{'name':'x','type':'crossed','keys':%s,"
             "'hash_bucket_size':10}]}", cols, "['education','occupation']");
    CHECK_OK(parse_spec(J(spec)));
    /* Weighted over a numeric column, or without its weight key. */
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'numeric'},{'name':'wa','type':"
                           "'weighted','categorical':'a','weight_key':'w'}]}")),
              DT_ERR_INVALID, "spec.json: columns[1] 'wa': categorical: 'a' is a numeric column");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'h','type':'hash_bucket','hash_bucket_size':5},"
                           "{'name':'wh','type':'weighted','categorical':'h'}]}")),
              DT_ERR_INVALID, "spec.json: columns[1] 'wh': weight_key: missing");
    /* hash_bucket_size 0 (and missing). */
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'h','type':'hash_bucket','hash_bucket_size':0}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'h': hash_bucket_size: expected an integer in [1,");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'h','type':'hash_bucket'}]}")), DT_ERR_INVALID,
              "spec.json: columns[0] 'h': hash_bucket_size: missing");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'hash_bucket','key':'k','hash_bucket_size':"
                           "4},{'name':'b','type':'hash_bucket','key':'j','hash_bucket_size':4},"
                           "{'name':'x','type':'crossed','keys':['k','j'],'hash_bucket_size':0}]}")),
              DT_ERR_INVALID, "spec.json: columns[2] 'x': hash_bucket_size: expected an integer");
    /* identity: default_value outside [-1, num_buckets). */
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'i','type':'identity','num_buckets':10,"
                           "'default_value':10}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'i': default_value: expected an integer in "
                              "[-1, 9]");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'i','type':'identity','num_buckets':10,"
                           "'default_value':-2}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'i': default_value");
    CHECK_OK(parse_spec(J("{'columns':[{'name':'i','type':'identity','num_buckets':10,"
                          "'default_value':9}]}")));
    /* default_value together with num_oov_buckets (whichever comes first). */
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'v','type':'vocabulary_list','vocabulary':['a'],"
                           "'num_oov_buckets':2,'default_value':0}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'v': default_value and num_oov_buckets");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'v','type':'vocabulary','default_value':0,"
                           "'num_oov_buckets':1}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'v': default_value and num_oov_buckets");
    /* A vocabulary file that is missing. */
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'v','type':'vocabulary_file','key':'k',"
                           "'vocabulary_file':'/nonexistent-dir/vocab.txt'}]}")),
              DT_ERR_IO, "spec.json: columns[0] 'v': vocabulary_file: /nonexistent-dir/vocab.txt");
    /* A token given twice: in a list (also as a number and its digits), in a file, in the
     * label's vocabulary. */
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'v','type':'vocabulary_list','vocabulary':"
                           "['a','b','a']}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'v': vocabulary: token 'a' is given twice "
                              "(entries 0 and 2)");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'v','type':'vocabulary_list','vocabulary':"
                           "[7,'7']}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'v': vocabulary: token '7' is given twice");
    write_text(test_path("feat_dup_vocab.txt"), "x\ny\nx\n");
    snprintf(spec, sizeof spec, "{'columns':[{'name':'vf','type':'vocabulary_file','key':'k',"
             "'vocabulary_file':'%s'}]}", test_path("feat_dup_vocab.txt"));
    CHECK_ERR(parse_spec(J(spec)), DT_ERR_INVALID, "spec.json: columns[0] 'vf': ");
    CHECK_ERR(parse_spec(J(spec)), DT_ERR_INVALID, "token 'x' is given twice (entries 0 and 2)");
    CHECK_ERR(parse_spec(J("{'label':{'key':'y','vocabulary':['no','yes','no']},'columns':[{'name':"
                           "'a','type':'numeric'}]}")),
              DT_ERR_INVALID, "spec.json: label: vocabulary: token 'no' is given twice");
    /* The label's key read by a column: as its key, crossed, as weights. */
    CHECK_ERR(parse_spec(J("{'label':'y','columns':[{'name':'a','type':'numeric','key':'y'}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'a' reads the label's key 'y'");
    CHECK_ERR(parse_spec(J("{'label':'y','columns':[{'name':'h','type':'hash_bucket','key':'k',"
                           "'hash_bucket_size':5},{'name':'x','type':'crossed','keys':['k',"
                           "{'key':'y'}],'hash_bucket_size':10}]}")),
              DT_ERR_INVALID, "spec.json: columns[1] 'x' reads the label's key 'y'");
    CHECK_ERR(parse_spec(J("{'label':'y','columns':[{'name':'h','type':'hash_bucket','key':'k',"
                           "'hash_bucket_size':5},{'name':'w','type':'weighted','categorical':'h',"
                           "'weight_key':'y'}]}")),
              DT_ERR_INVALID, "spec.json: columns[1] 'w' reads the label's key 'y'");
    /* A model part naming no column. */
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'numeric'}],'model':{'type':'linear',"
                           "'linear_feature_columns':['a','zz']}}")),
              DT_ERR_INVALID, "spec.json: model: linear_feature_columns[1]: no column is called 'zz'");
}

TEST(features_spec_invalid_json_names_line_and_column)
{
    /* line 3: `    {"name": "a" "type": "numeric"}`, a comma missing before "type" (column 18). */
    CHECK_ERR(parse_spec("{\n  \"columns\": [\n    {\"name\": \"a\" \"type\": \"numeric\"}\n  ]\n}"),
              DT_ERR_INVALID, "spec.json: line 3, column 18: not valid JSON");
    /* Text after the object. */
    CHECK_ERR(parse_spec("{\"columns\": [{\"name\": \"a\", \"type\": \"numeric\"}]}\n x"),
              DT_ERR_INVALID, "spec.json: line 2, column 2: not valid JSON");
    CHECK_ERR(parse_spec(""), DT_ERR_INVALID, "spec.json: line 1, column 1: not valid JSON");
    CHECK_ERR(parse_spec("[1, 2]"), DT_ERR_INVALID, "spec.json: expected a JSON object");
    /* dt_features_load names the file it read. */
    const char *path = test_path("feat_bad.json");
    write_text(path, "{\"columns\": [\n,]}");
    dt_features *f = NULL;
    CHECK_ERR(dt_features_load(path, &f), DT_ERR_INVALID, "feat_bad.json: line 2, column 1");
    CHECK(f == NULL);
    CHECK_ERR(dt_features_load(test_path("feat_no_such.json"), &f), DT_ERR_IO, "feat_no_such.json");
}

TEST(features_spec_unused_column_is_only_a_warning)
{
    dt_log_level before = dt_log_level_now();
    char *text = NULL;
    size_t n = 0;
    FILE *sink = open_memstream(&text, &n);
    CHECK(sink != NULL);
    dt_log_set_sink(sink);
    dt_log_set_level(DT_LOG_WARN);
    dt_features *f = NULL;
    dt_status st = dt_features_parse(
        J("{'columns':[{'name':'a','type':'numeric'},{'name':'b','type':'hash_bucket','key':'kb',"
          "'hash_bucket_size':10},{'name':'c','type':'numeric','key':'kc'},{'name':'cb','type':"
          "'bucketized','source':'c','boundaries':[1]}],"
          "'model':{'type':'dnn','dnn_feature_columns':['a',{'embedding':'cb','dimension':4}]}}"),
        "spec.json", NULL, &f);
    dt_log_set_sink(NULL);
    fclose(sink);
    dt_log_set_level(before);
    CHECK_OK(st);
    /* b is in no part; c is read by cb, which is. */
    CHECK_MSG(text && strstr(text, "spec.json: column 'b' is in no part of the model"),
              "log: '%s'", text ? text : "");
    CHECK_MSG(text && !strstr(text, "column 'c'") && !strstr(text, "column 'a'"), "log: '%s'",
              text ? text : "");
    free(text);
    if (f) {
        /* An unused column keeps its slot but gives nothing. */
        raw_row r;
        row_init(&r, f);
        PUT_TEXT(&r, "a", "1");
        PUT_TEXT(&r, "kb", "x");
        PUT_TEXT(&r, "kc", "2");
        dt_rowbuf b;
        dt_rowbuf_init(&b, dt_features_dense_width(f));
        CHECK_OK(xform(&r, &b));
        CHECK_NO_IDS(f, &b, 0, "b");
        CHECK_IDS(f, &b, 0, "cb", 1);
        dt_rowbuf_free(&b);
    }
    dt_features_destroy(f);
}

/* A model that names a cross of a bucketized column computes the bucketized column and its
 * numeric source too, in whatever order the spec lists them. */
static void check_read_through(const char *spec, int line)
{
    dt_log_level before = dt_log_level_now();
    char *text = NULL;
    size_t n = 0;
    FILE *sink = open_memstream(&text, &n);
    dt_log_set_sink(sink);
    dt_log_set_level(DT_LOG_WARN);
    dt_features *f = NULL;
    dt_status st = dt_features_parse(spec, "spec.json", NULL, &f);
    dt_log_set_sink(NULL);
    fclose(sink);
    dt_log_set_level(before);
    if (st) {
        test_fail(__FILE__, line, "parse: %s", dt_last_error());
        free(text);
        return;
    }
    CHECK_MSG(text && strstr(text, "column 'v' is in no part") && !strstr(text, "column 'n'") &&
                  !strstr(text, "column 'nb'"),
              "line %d: log '%s'", line, text ? text : "");
    free(text);
    dt_rowbuf b;
    dt_rowbuf_init(&b, dt_features_dense_width(f));
    raw_row r;
    row_init(&r, f);
    PUT_TEXT(&r, "k", "a");
    const char *xs[] = {"50", "5", "10", "-3"};
    const int64_t bucket[] = {1, 0, 1, 0};
    for (int i = 0; i < 4; i++) {
        PUT_TEXT(&r, "n", xs[i]);
        CHECK_OK(xform(&r, &b));
        int64_t id = -1, nb = -1;
        CHECK_MSG(col_ids(f, &b, i, "x", &id, NULL, 1) == 1 &&
                      id == (int64_t)(cat64(cat64(CROSS_KEY, (uint64_t)bucket[i]), fp("a")) % 1000),
                  "line %d: n = %s: cross id %lld", line, xs[i], (long long)id);
        CHECK_MSG(col_ids(f, &b, i, "nb", &nb, NULL, 1) == 1 && nb == bucket[i],
                  "line %d: n = %s: bucket %lld", line, xs[i], (long long)nb);
    }
    dt_rowbuf_free(&b);
    dt_features_destroy(f);
}

TEST(features_model_computes_what_its_columns_read)
{
    const char *n = "{'name':'n','type':'numeric'}";
    const char *nb = "{'name':'nb','type':'bucketized','source':'n','boundaries':[10]}";
    const char *v = "{'name':'v','type':'hash_bucket','key':'k','hash_bucket_size':100}";
    const char *x = "{'name':'x','type':'crossed','keys':['nb','k'],'hash_bucket_size':1000}";
    const char *model = "'model':{'type':'linear','linear_feature_columns':['x']}";
    char spec[2048];
    snprintf(spec, sizeof spec, "{'columns':[%s,%s,%s,%s],%s}", n, nb, v, x, model);
    check_read_through(J(spec), __LINE__);
    snprintf(spec, sizeof spec, "{'columns':[%s,%s,%s,%s],%s}", x, v, nb, n, model);
    check_read_through(J(spec), __LINE__);
    /* Through a weighted column of a bucketized one too. */
    dt_features *f = PARSE(J("{'columns':[{'name':'n','type':'numeric'},{'name':'nb','type':"
                             "'bucketized','source':'n','boundaries':[10]},{'name':'w','type':"
                             "'weighted','categorical':'nb','weight_key':'kw'}],'model':{'type':"
                             "'linear','linear_feature_columns':['w']}}"));
    if (f) {
        dt_rowbuf b;
        dt_rowbuf_init(&b, dt_features_dense_width(f));
        raw_row r;
        row_init(&r, f);
        PUT_TEXT(&r, "n", "12");
        PUT_TEXT(&r, "kw", "0.5");
        CHECK_OK(xform(&r, &b));
        int64_t id = -1;
        float w = 0;
        CHECK(col_ids(f, &b, 0, "w", &id, &w, 1) == 1 && id == 1 && w == 0.5f);
        dt_rowbuf_free(&b);
        dt_features_destroy(f);
    }
}

/* ---- Transforms, column by column ---- */

TEST(features_numeric_columns)
{
    dt_features *f = PARSE(J(
        "{'label':'y','columns':["
        "{'name':'a','type':'numeric','default_value':-1.5},"
        "{'name':'b','type':'numeric','key':'kb'},"
        "{'name':'c','type':'numeric','key':'kc','normalizer':'log1p'},"
        "{'name':'d','type':'numeric','key':'kd','normalizer':{'mean':2,'std':4}},"
        "{'name':'e','type':'numeric','key':'ke','shape':2,'default_value':7}]}"));
    if (!f)
        return;
    CHECK(dt_features_dense_width(f) == 6 && dt_features_num_slots(f) == 0);
    CHECK(!dt_features_needs_adapt(f));
    int w = -1;
    CHECK(dt_features_column_dense(f, 0, &w) == 0 && w == 1);
    CHECK(dt_features_column_dense(f, 3, &w) == 3 && w == 1);
    CHECK(dt_features_column_dense(f, 4, &w) == 4 && w == 2);
    CHECK(dt_features_column_slot(f, 4) == -1 && dt_features_column_buckets(f, 4) == 0);
    CHECK(dt_features_label_key(f) == key_index(f, "y"));
    dt_rowbuf b;
    dt_rowbuf_init(&b, dt_features_dense_width(f));
    raw_row r;
    row_init(&r, f);
    PUT_TEXT(&r, "a", " 3.25 ");
    PUT_INTS(&r, "kb", 5);
    PUT_FLOATS(&r, "kc", 3.0f);
    PUT_TEXT(&r, "kd", "10");
    PUT_INTS(&r, "ke", 3, 4);
    PUT_TEXT(&r, "y", "1");
    CHECK_OK(xform(&r, &b));
    CHECK(b.n == 1 && b.nnz == 0);
    CHECK(dense_of(f, &b, 0, "a", 0) == 3.25f);
    CHECK(dense_of(f, &b, 0, "b", 0) == 5.0f);
    CHECK_NEAR(dense_of(f, &b, 0, "c", 0), log1p(3.0), 1e-6);
    CHECK(dense_of(f, &b, 0, "d", 0) == 2.0f);
    CHECK(dense_of(f, &b, 0, "e", 0) == 3.0f && dense_of(f, &b, 0, "e", 1) == 4.0f);
    CHECK(b.labels[0] == 1.0f);
    /* Missing values take the default (an empty cell is missing); log1p of a negative is 0. */
    put_missing(&r, "a");
    PUT_FLOATS(&r, "kb", 0.5f);
    PUT_TEXT(&r, "kc", "-5");
    PUT_TEXT(&r, "kd", "2");
    put_missing(&r, "ke");
    CHECK_OK(xform(&r, &b));
    PUT_TEXT(&r, "a", "");
    PUT_TEXT(&r, "ke", "");
    CHECK_OK(xform(&r, &b));
    CHECK(b.n == 3);
    for (int row = 1; row <= 2 && b.n == 3; row++) {
        CHECK(dense_of(f, &b, row, "a", 0) == -1.5f);
        CHECK(dense_of(f, &b, row, "b", 0) == 0.5f);
        CHECK(dense_of(f, &b, row, "c", 0) == 0.0f);
        CHECK(dense_of(f, &b, row, "d", 0) == 0.0f);
        CHECK(dense_of(f, &b, row, "e", 0) == 7.0f && dense_of(f, &b, row, "e", 1) == 7.0f);
    }
    /* Errors name the column and its key, and append nothing. */
    put_missing(&r, "kb");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT,
              "column 'b' (key 'kb'): the value is missing and the column has no default_value");
    PUT_TEXT(&r, "kb", "");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'b' (key 'kb'): the value is missing");
    PUT_TEXT(&r, "kb", "x1");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'b' (key 'kb'): 'x1' is not a number");
    PUT_TEXT(&r, "kb", "1e999");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'b' (key 'kb'): '1e999' is not a number");
    /* Finite as a double, but not as the float the row keeps. */
    PUT_TEXT(&r, "kb", "1e39");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'b' (key 'kb'): '1e39' is not a number");
    PUT_TEXT(&r, "kb", "-3.4e38");
    PUT_TEXT(&r, "y", "1e39");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "label 'y': '1e39' is not a number");
    PUT_TEXT(&r, "y", "1");
    PUT_BYTES(&r, "kb", "1");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'b' (key 'kb'): a bytes feature");
    PUT_FLOATS(&r, "kb", NAN);
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'b' (key 'kb'): value 0 is not finite");
    PUT_INTS(&r, "kb", 1);
    PUT_INTS(&r, "ke", 1);
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'e' (key 'ke'): 1 values, the column's shape is 2");
    PUT_FLOATS(&r, "ke", 1, 2, 3);
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'e' (key 'ke'): 3 values");
    PUT_FLOATS(&r, "ke", 1, 2);
    put_missing(&r, "y");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "label 'y': expected one value, got 0");
    CHECK(b.n == 3);
    PUT_TEXT(&r, "y", "0");
    CHECK_OK(xform(&r, &b));
    CHECK(b.n == 4);
    /* Rows of the wrong width are refused. */
    dt_rowbuf narrow;
    dt_rowbuf_init(&narrow, 2);
    CHECK_ERR(xform(&r, &narrow), DT_ERR_INVALID, "rows of 2 dense values for a spec of 6");
    dt_rowbuf_free(&narrow);
    dt_rowbuf_free(&b);
    dt_features_destroy(f);
}

TEST(features_bucketized_edges_go_up)
{
    dt_features *f = PARSE(J("{'columns':[{'name':'x','type':'numeric'},"
                             "{'name':'xb','type':'bucketized','source':'x','boundaries':[0,10,20]},"
                             "{'name':'l','type':'numeric','key':'kl','normalizer':'log1p'},"
                             "{'name':'lb','type':'bucketized','source':'l','boundaries':[5]}]}"));
    if (!f)
        return;
    int xb = column_index(f, "xb");
    CHECK(dt_features_column_buckets(f, xb) == 4 && dt_features_column_slot(f, xb) == 0);
    CHECK(dt_features_column_type(f, xb) == DT_FCOL_BUCKETIZED);
    static const struct {
        const char *x;
        int64_t id;
    } cases[] = {{"-1", 0}, {"-0.0001", 0}, {"0", 1}, {"5", 1}, {"9.999", 1}, {"10", 2},
                 {"19.99", 2}, {"20", 3}, {"1e9", 3}};
    dt_rowbuf b;
    dt_rowbuf_init(&b, dt_features_dense_width(f));
    raw_row r;
    row_init(&r, f);
    PUT_TEXT(&r, "kl", "1");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        PUT_TEXT(&r, "x", cases[i].x);
        CHECK_OK(xform(&r, &b));
        int64_t id = -1;
        CHECK_MSG(col_ids(f, &b, b.n - 1, "xb", &id, NULL, 1) == 1 && id == cases[i].id,
                  "x = %s: bucket %lld, expected %lld", cases[i].x, (long long)id,
                  (long long)cases[i].id);
    }
    /* Floats and integers alike. */
    PUT_FLOATS(&r, "x", 10.0f);
    CHECK_OK(xform(&r, &b));
    CHECK_IDS(f, &b, b.n - 1, "xb", 2);
    PUT_INTS(&r, "x", 20);
    CHECK_OK(xform(&r, &b));
    CHECK_IDS(f, &b, b.n - 1, "xb", 3);
    /* The boundaries are in the source's raw units, before its normalizer: log1p(7) < 5 but
     * 7 >= 5. (TensorFlow bucketizes normalizer_fn's output; dtrain's normalizer is its own.) */
    PUT_TEXT(&r, "kl", "7");
    CHECK_OK(xform(&r, &b));
    CHECK_IDS(f, &b, b.n - 1, "lb", 1);
    dt_rowbuf_free(&b);
    dt_features_destroy(f);
}

TEST(features_vocabulary_list_oov_and_default)
{
    dt_features *f = PARSE(J("{'columns':["
                             "{'name':'v','type':'vocabulary_list','key':'kv','vocabulary':"
                             "['a','b','c'],'num_oov_buckets':3},"
                             "{'name':'vd','type':'vocabulary_list','key':'kvd','vocabulary':"
                             "['a','b']},"
                             "{'name':'vz','type':'vocabulary_list','key':'kvz','vocabulary':"
                             "['a','b'],'default_value':1},"
                             "{'name':'vi','type':'vocabulary_list','key':'kvi','vocabulary':"
                             "[10,20,30]}]}"));
    if (!f)
        return;
    CHECK(dt_features_column_buckets(f, 0) == 6 && dt_features_column_buckets(f, 1) == 2);
    CHECK(dt_features_column_buckets(f, 3) == 3);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    raw_row r;
    row_init(&r, f);
    PUT_BYTES(&r, "kv", "b", "zz", "c", "yy", "a", "xx", "");
    PUT_BYTES(&r, "kvd", "b", "zz", "a");
    PUT_BYTES(&r, "kvz", "zz", "a");
    PUT_INTS(&r, "kvi", 20, 40, 10);
    CHECK_OK(xform(&r, &b));
    CHECK_IDS(f, &b, 0, "v", 1, (int64_t)(3 + fp("zz") % 3), 2, (int64_t)(3 + fp("yy") % 3), 0,
              (int64_t)(3 + fp("xx") % 3), (int64_t)(3 + fp("") % 3));
    /* The OOV formula is not a constant: three values fall in at least two buckets. */
    CHECK(fp("zz") % 3 != fp("yy") % 3 || fp("zz") % 3 != fp("xx") % 3);
    CHECK_IDS(f, &b, 0, "vd", 1, 0); /* default_value -1: "zz" dropped */
    CHECK_IDS(f, &b, 0, "vz", 1, 0);
    CHECK_IDS(f, &b, 0, "vi", 1, 0); /* integers through their digits; 40 dropped */
    PUT_TEXT(&r, "kvi", "30");
    PUT_TEXT(&r, "kv", "c");
    CHECK_OK(xform(&r, &b));
    CHECK_IDS(f, &b, 1, "vi", 2);
    CHECK_IDS(f, &b, 1, "v", 2);
    /* A float feature is not a categorical value. */
    PUT_FLOATS(&r, "kv", 1.0f);
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'v' (key 'kv'): a float feature");
    dt_rowbuf_free(&b);
    dt_features_destroy(f);

    /* vocabulary_file: one token per line, a CRLF's '\r' and a last empty line dropped, the
     * first vocabulary_size lines only. */
    write_text(test_path("feat_vocab.txt"), "x\r\ny\nz\n");
    char spec[1024];
    snprintf(spec, sizeof spec, "{'columns':[{'name':'vf','type':'vocabulary_file','key':'k',"
             "'vocabulary_file':'%s','num_oov_buckets':1},{'name':'vs','type':'vocabulary_file',"
             "'key':'k2','vocabulary_file':'%s','vocabulary_size':2}]}", test_path("feat_vocab.txt"),
             test_path("feat_vocab.txt"));
    f = PARSE(J(spec));
    if (!f)
        return;
    CHECK(dt_features_column_buckets(f, 0) == 4 && dt_features_column_buckets(f, 1) == 2);
    dt_rowbuf_init(&b, 0);
    row_init(&r, f);
    PUT_BYTES(&r, "k", "y", "x", "w", "z");
    PUT_BYTES(&r, "k2", "z", "y");
    CHECK_OK(xform(&r, &b));
    CHECK_IDS(f, &b, 0, "vf", 1, 0, 3, 2);
    CHECK_IDS(f, &b, 0, "vs", 1);
    dt_rowbuf_free(&b);
    dt_features_destroy(f);
    snprintf(spec, sizeof spec, "{'columns':[{'name':'vs','type':'vocabulary_file','key':'k2',"
             "'vocabulary_file':'%s','vocabulary_size':4}]}", test_path("feat_vocab.txt"));
    CHECK_ERR(parse_spec(J(spec)), DT_ERR_INVALID, "columns[0] 'vs': vocabulary_size 4");
}

/* Every id a transform gives lies in [0, buckets): a default_value outside the vocabulary would
 * index past the column's embedding table. */
TEST(features_vocabulary_default_value_within_buckets)
{
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'v','type':'vocabulary_list','vocabulary':"
                           "['a','b'],'default_value':2}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'v': default_value");
    CHECK_OK(parse_spec(J("{'columns':[{'name':'v','type':'vocabulary_list','vocabulary':"
                          "['a','b'],'default_value':1}]}")));
    write_text(test_path("feat_vocab2.txt"), "x\ny\n");
    char spec[1024];
    snprintf(spec, sizeof spec, "{'columns':[{'name':'vf','type':'vocabulary_file',"
             "'vocabulary_file':'%s','default_value':5}]}", test_path("feat_vocab2.txt"));
    CHECK_ERR(parse_spec(J(spec)), DT_ERR_INVALID, "spec.json: columns[0] 'vf': default_value");
    /* An adapted vocabulary: known once the pass is over. */
    write_text(test_path("feat_vdef.csv"), "t\na\nb\na\n");
    dt_features *f = PARSE(J("{'columns':[{'name':'v','type':'vocabulary','key':'t',"
                             "'default_value':3}]}"));
    if (f) {
        dt_status st = adapt_on(f, "csv", test_path("feat_vdef.csv"), 1, false, NULL);
        if (st == DT_OK) {
            /* If the pass accepts it, the ids must still be within the buckets. */
            dt_rowbuf b;
            dt_rowbuf_init(&b, 0);
            raw_row r;
            row_init(&r, f);
            PUT_TEXT(&r, "t", "zz");
            CHECK_OK(xform(&r, &b));
            int64_t id = -1;
            int n = col_ids(f, &b, 0, "v", &id, NULL, 1);
            CHECK_MSG(n == 0 || (id >= 0 && id < dt_features_column_buckets(f, 0)),
                      "id %lld of %lld buckets", (long long)id,
                      (long long)dt_features_column_buckets(f, 0));
            dt_rowbuf_free(&b);
        } else {
            CHECK_MSG(st == DT_ERR_INVALID && strstr(dt_last_error(), "default_value"), "%s",
                      dt_last_error());
        }
        dt_features_destroy(f);
    }
}

TEST(features_hash_bucket_fingerprints)
{
    dt_features *f = PARSE(J("{'columns':["
                             "{'name':'h3','type':'hash_bucket','key':'k3','hash_bucket_size':3},"
                             "{'name':'h','type':'hash_bucket','key':'k','hash_bucket_size':1000},"
                             "{'name':'hi','type':'hash_bucket','key':'ki','hash_bucket_size':1000}"
                             "]}"));
    if (!f)
        return;
    CHECK(dt_features_column_buckets(f, 1) == 1000);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    raw_row r;
    row_init(&r, f);
    /* tf.strings.to_hash_bucket_fast(["Hello", "TensorFlow", "2.x"], 3) = [0, 2, 2]. */
    PUT_BYTES(&r, "k3", "Hello", "TensorFlow", "2.x");
    /* Fingerprint64("Hello") = 15404698994557526151. */
    PUT_TEXT(&r, "k", "Hello");
    PUT_INTS(&r, "ki", 42, -7, 0);
    CHECK_OK(xform(&r, &b));
    CHECK_IDS(f, &b, 0, "h3", 0, 2, 2);
    CHECK_IDS(f, &b, 0, "h", (int64_t)(15404698994557526151ULL % 1000));
    CHECK_IDS(f, &b, 0, "hi", (int64_t)(fp("42") % 1000), (int64_t)(fp("-7") % 1000),
              (int64_t)(fp("0") % 1000));
    /* An int64 42 and the text "42" fall in the same bucket. */
    PUT_TEXT(&r, "ki", "42");
    PUT_BYTES(&r, "k", "42");
    CHECK_OK(xform(&r, &b));
    int64_t a = -1, c = -2, d = -3;
    CHECK(col_ids(f, &b, 0, "hi", &a, NULL, 1) == 3);
    CHECK(col_ids(f, &b, 1, "hi", &c, NULL, 1) == 1);
    CHECK(col_ids(f, &b, 1, "h", &d, NULL, 1) == 1);
    CHECK(a == c && c == d);
    /* Missing: no ids. */
    put_missing(&r, "k");
    PUT_TEXT(&r, "k3", "");
    CHECK_OK(xform(&r, &b));
    CHECK_NO_IDS(f, &b, 2, "h");
    CHECK_NO_IDS(f, &b, 2, "h3");
    dt_rowbuf_free(&b);
    dt_features_destroy(f);
}

TEST(features_identity_columns)
{
    dt_features *f = PARSE(J("{'columns':["
                             "{'name':'i','type':'identity','key':'ki','num_buckets':10},"
                             "{'name':'id','type':'identity','key':'kd','num_buckets':10,"
                             "'default_value':0},"
                             "{'name':'ix','type':'identity','key':'kx','num_buckets':10,"
                             "'default_value':-1}]}"));
    if (!f)
        return;
    CHECK(dt_features_column_buckets(f, 0) == 10);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    raw_row r;
    row_init(&r, f);
    PUT_INTS(&r, "ki", 3, 9, 0);
    PUT_INTS(&r, "kd", 10, 4, -1);
    PUT_BYTES(&r, "kx", "2", "12", " 5 ");
    CHECK_OK(xform(&r, &b));
    CHECK_IDS(f, &b, 0, "i", 3, 9, 0);
    CHECK_IDS(f, &b, 0, "id", 0, 4, 0);
    CHECK_IDS(f, &b, 0, "ix", 2, 5);
    PUT_TEXT(&r, "ki", "7");
    PUT_TEXT(&r, "kd", "70");
    CHECK_OK(xform(&r, &b));
    CHECK_IDS(f, &b, 1, "i", 7);
    CHECK_IDS(f, &b, 1, "id", 0);
    /* Out of range without a default; not an integer; a float feature. */
    PUT_INTS(&r, "ki", 10);
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'i' (key 'ki'): id 10 is outside [0, 10)");
    PUT_INTS(&r, "ki", -1);
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'i' (key 'ki'): id -1 is outside [0, 10)");
    PUT_TEXT(&r, "ki", "11");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'i' (key 'ki'): id 11 is outside [0, 10)");
    PUT_TEXT(&r, "ki", "x");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'i' (key 'ki'): 'x' is not an integer id");
    PUT_TEXT(&r, "ki", "1.5");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'i' (key 'ki'): '1.5' is not an integer id");
    PUT_FLOATS(&r, "ki", 1.0f);
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'i' (key 'ki'): a float feature");
    CHECK(b.n == 2);
    dt_rowbuf_free(&b);
    dt_features_destroy(f);
}

TEST(features_crossed_matches_tensorflow)
{
    /* TensorFlow's sparse_cross_op test: one value per key, hash_bucket_size 100 -> 83. */
    dt_features *f = PARSE(J(
        "{'columns':["
        "{'name':'h1','type':'hash_bucket','key':'k1','hash_bucket_size':1000},"
        "{'name':'h2','type':'hash_bucket','key':'k2','hash_bucket_size':1000},"
        "{'name':'h3','type':'hash_bucket','key':'k3','hash_bucket_size':1000},"
        "{'name':'x','type':'crossed','keys':[{'key':'k1'},{'key':'k2'},{'key':'k3'}],"
        "'hash_bucket_size':100},"
        "{'name':'xs','type':'crossed','keys':['k1','k2'],'hash_bucket_size':1000000,"
        "'hash_key':12345},"
        "{'name':'n','type':'numeric','key':'kn'},"
        "{'name':'nb','type':'bucketized','source':'n','boundaries':[10,20]},"
        "{'name':'v','type':'vocabulary_list','key':'kv','vocabulary':['p','q'],"
        "'num_oov_buckets':2},"
        "{'name':'nx','type':'crossed','keys':[{'column':'nb'},{'key':'k1'},'v'],"
        "'hash_bucket_size':1000}]}"));
    if (!f)
        return;
    CHECK(dt_features_column_buckets(f, column_index(f, "x")) == 100);
    dt_rowbuf b;
    dt_rowbuf_init(&b, dt_features_dense_width(f));
    raw_row r;
    row_init(&r, f);
    PUT_TEXT(&r, "k1", "batch1-FC1-F1");
    PUT_TEXT(&r, "k2", "batch1-FC2-F1");
    PUT_TEXT(&r, "k3", "batch1-FC3-F1");
    PUT_TEXT(&r, "kn", "15");
    PUT_TEXT(&r, "kv", "q");
    CHECK_OK(xform(&r, &b));
    CHECK_IDS(f, &b, 0, "x", 83);
    uint64_t h = cat64(cat64(cat64(CROSS_KEY, fp("batch1-FC1-F1")), fp("batch1-FC2-F1")),
                       fp("batch1-FC3-F1"));
    CHECK(h % 0x7fffffffffffffffULL == 1971693436396284976ULL);
    CHECK_IDS(f, &b, 0, "xs",
              (int64_t)(cat64(cat64(12345, fp("batch1-FC1-F1")), fp("batch1-FC2-F1")) % 1000000));
    /* A column key enters as its id: bucket 1 of nb, id 1 of v. */
    CHECK_IDS(f, &b, 0, "nx", (int64_t)(cat64(cat64(cat64(CROSS_KEY, 1), fp("batch1-FC1-F1")), 1) %
                                        1000));
    /* Multivalent keys: the Cartesian product, the last key fastest. */
    PUT_BYTES(&r, "k1", "a", "b");
    PUT_BYTES(&r, "k2", "x", "y", "z");
    PUT_BYTES(&r, "k3", "q");
    PUT_BYTES(&r, "kv", "p", "zz");
    CHECK_OK(xform(&r, &b));
    int64_t want[6];
    const char *k1[] = {"a", "b"}, *k2[] = {"x", "y", "z"};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            want[i * 3 + j] =
                (int64_t)(cat64(cat64(cat64(CROSS_KEY, fp(k1[i])), fp(k2[j])), fp("q")) % 100);
    check_ids(f, &b, 1, "x", want, 6, __LINE__);
    int64_t oov = (int64_t)(2 + fp("zz") % 2);
    int64_t want_nx[4];
    for (int i = 0; i < 2; i++) {
        want_nx[i * 2] = (int64_t)(cat64(cat64(cat64(CROSS_KEY, 1), fp(k1[i])), 0) % 1000);
        want_nx[i * 2 + 1] = (int64_t)(cat64(cat64(cat64(CROSS_KEY, 1), fp(k1[i])),
                                             (uint64_t)oov) % 1000);
    }
    check_ids(f, &b, 1, "nx", want_nx, 4, __LINE__);
    /* A raw int64 key enters as its value, not its digits (as TF crosses int64 features). */
    PUT_INTS(&r, "k3", 77);
    CHECK_OK(xform(&r, &b));
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            want[i * 3 + j] = (int64_t)(cat64(cat64(cat64(CROSS_KEY, fp(k1[i])), fp(k2[j])), 77) %
                                        100);
    check_ids(f, &b, 2, "x", want, 6, __LINE__);
    /* A key without values: no combinations. */
    put_missing(&r, "k2");
    CHECK_OK(xform(&r, &b));
    CHECK_NO_IDS(f, &b, 3, "x");
    CHECK_NO_IDS(f, &b, 3, "xs");
    /* A float raw key cannot be crossed. */
    PUT_TEXT(&r, "k2", "x");
    PUT_FLOATS(&r, "k3", 1.0f);
    dt_status st = xform(&r, &b);
    CHECK(st == DT_ERR_FORMAT);
    dt_rowbuf_free(&b);
    dt_features_destroy(f);
}

TEST(features_weighted_keeps_weights_aligned)
{
    dt_features *f = PARSE(J("{'columns':["
                             "{'name':'g','type':'vocabulary_list','key':'genres','vocabulary':"
                             "['a','b','c'],'separator':'|'},"
                             "{'name':'gw','type':'weighted','categorical':'g','weight_key':'w'},"
                             "{'name':'i','type':'identity','key':'ki','num_buckets':5,"
                             "'default_value':-1},"
                             "{'name':'iw','type':'weighted','categorical':'i','weight_key':'wi'}]}"));
    if (!f)
        return;
    int gw = column_index(f, "gw");
    CHECK(dt_features_column_buckets(f, gw) == 3 && dt_features_column_type(f, gw) == DT_FCOL_WEIGHTED);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    raw_row r;
    row_init(&r, f);
    /* "zz" is dropped (default_value -1): its weight 2 goes with it, c keeps 3. */
    PUT_TEXT(&r, "genres", "a|zz|c");
    PUT_TEXT(&r, "w", "0.5|2|3");
    PUT_INTS(&r, "ki", 4, 9, 1);
    PUT_FLOATS(&r, "wi", 1.5f, 2.5f, 3.5f);
    CHECK_OK(xform(&r, &b));
    int64_t ids[8];
    float w[8];
    CHECK(col_ids(f, &b, 0, "gw", ids, w, 8) == 2 && ids[0] == 0 && ids[1] == 2 && w[0] == 0.5f &&
          w[1] == 3.0f);
    CHECK_IDS(f, &b, 0, "g", 0, 2); /* the categorical column itself weighs 1 */
    CHECK(col_ids(f, &b, 0, "iw", ids, w, 8) == 2 && ids[0] == 4 && ids[1] == 1 && w[0] == 1.5f &&
          w[1] == 3.5f);
    /* Byte strings with float weights; empty pieces of a text cell are no values, on both sides. */
    PUT_BYTES(&r, "genres", "zz", "b");
    PUT_FLOATS(&r, "w", 4, 5);
    PUT_INTS(&r, "ki", 2);
    PUT_INTS(&r, "wi", 3);
    CHECK_OK(xform(&r, &b));
    CHECK(col_ids(f, &b, 1, "gw", ids, w, 8) == 1 && ids[0] == 1 && w[0] == 5.0f);
    CHECK(col_ids(f, &b, 1, "iw", ids, w, 8) == 1 && ids[0] == 2 && w[0] == 3.0f);
    PUT_TEXT(&r, "genres", "|a||b|");
    PUT_TEXT(&r, "w", "1||2");
    CHECK_OK(xform(&r, &b));
    CHECK(col_ids(f, &b, 2, "gw", ids, w, 8) == 2 && ids[0] == 0 && ids[1] == 1 && w[0] == 1.0f &&
          w[1] == 2.0f);
    /* Both missing: nothing. */
    put_missing(&r, "genres");
    put_missing(&r, "w");
    CHECK_OK(xform(&r, &b));
    CHECK_NO_IDS(f, &b, 3, "gw");
    /* Counts that differ, and weights that are not numbers. */
    PUT_TEXT(&r, "genres", "a|b");
    PUT_TEXT(&r, "w", "1");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'gw' (key 'w'): 1 weights for 2 values of 'g'");
    put_missing(&r, "w");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'gw' (key 'w'): 0 weights for 2 values");
    PUT_TEXT(&r, "w", "1|x");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'gw' (key 'w'): weight 'x' is not a number");
    PUT_TEXT(&r, "w", "1|1e39");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'gw' (key 'w'): weight '1e39' is not a number");
    PUT_BYTES(&r, "w", "1", "2");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'gw' (key 'w'): weights are bytes");
    CHECK(b.n == 4);
    dt_rowbuf_free(&b);
    dt_features_destroy(f);
}

TEST(features_separators_drop_empty_pieces)
{
    dt_features *f = PARSE(J("{'columns':["
                             "{'name':'h','type':'hash_bucket','key':'k','hash_bucket_size':100,"
                             "'separator':' '},"
                             "{'name':'v','type':'vocabulary_list','key':'kv','vocabulary':"
                             "['a','b'],'separator':';','num_oov_buckets':1},"
                             "{'name':'i','type':'identity','key':'ki','num_buckets':10,"
                             "'separator':':'}]}"));
    if (!f)
        return;
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    raw_row r;
    row_init(&r, f);
    PUT_TEXT(&r, "k", "  x  y ");
    PUT_TEXT(&r, "kv", ";b;;a;zz;");
    PUT_TEXT(&r, "ki", "3::4:");
    CHECK_OK(xform(&r, &b));
    CHECK_IDS(f, &b, 0, "h", (int64_t)(fp("x") % 100), (int64_t)(fp("y") % 100));
    CHECK_IDS(f, &b, 0, "v", 1, 0, 2);
    CHECK_IDS(f, &b, 0, "i", 3, 4);
    PUT_TEXT(&r, "kv", ";;;");
    PUT_TEXT(&r, "k", " ");
    PUT_TEXT(&r, "ki", ":");
    CHECK_OK(xform(&r, &b));
    CHECK_NO_IDS(f, &b, 1, "v");
    CHECK_NO_IDS(f, &b, 1, "h");
    CHECK_NO_IDS(f, &b, 1, "i");
    /* Byte strings are values already: not split. */
    PUT_BYTES(&r, "kv", "a;b");
    CHECK_OK(xform(&r, &b));
    CHECK_IDS(f, &b, 2, "v", 2);
    dt_rowbuf_free(&b);
    dt_features_destroy(f);
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'h','type':'hash_bucket','hash_bucket_size':5,"
                           "'separator':'ab'}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'h': separator: expected one character");
}

TEST(features_labels_vocabulary_and_numeric)
{
    dt_features *f = PARSE(J("{'label':{'key':'income','vocabulary':['<=50K','>50K']},"
                             "'columns':[{'name':'a','type':'numeric','default_value':0}]}"));
    if (!f)
        return;
    dt_rowbuf b;
    dt_rowbuf_init(&b, 1);
    raw_row r;
    row_init(&r, f);
    PUT_TEXT(&r, "income", " >50K ");
    CHECK_OK(xform(&r, &b));
    PUT_TEXT(&r, "income", "<=50K");
    CHECK_OK(xform(&r, &b));
    PUT_TEXT(&r, "income", "\t<=50K \r");
    CHECK_OK(xform(&r, &b));
    PUT_BYTES(&r, "income", ">50K");
    CHECK_OK(xform(&r, &b));
    CHECK(b.n == 4 && b.labels[0] == 1 && b.labels[1] == 0 && b.labels[2] == 0 && b.labels[3] == 1);
    PUT_TEXT(&r, "income", ">60K");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "label 'income': '>60K' is not in its vocabulary");
    PUT_BYTES(&r, "income", " >50K");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "label 'income': ' >50K' is not in its vocabulary");
    PUT_FLOATS(&r, "income", 1.0f);
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "label 'income': a float");
    put_missing(&r, "income");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "label 'income': expected one value, got 0");
    CHECK(b.n == 4);
    dt_rowbuf_free(&b);
    dt_features_destroy(f);

    f = PARSE(J("{'label':{'key':'y','vocabulary':[0,1]},'columns':[{'name':'a','type':'numeric',"
                "'default_value':0}]}"));
    if (f) {
        dt_rowbuf_init(&b, 1);
        row_init(&r, f);
        PUT_INTS(&r, "y", 1);
        CHECK_OK(xform(&r, &b));
        PUT_TEXT(&r, "y", "0");
        CHECK_OK(xform(&r, &b));
        CHECK(b.n == 2 && b.labels[0] == 1 && b.labels[1] == 0);
        dt_rowbuf_free(&b);
        dt_features_destroy(f);
    }

    f = PARSE(J("{'label':'y','columns':[{'name':'a','type':'numeric','default_value':0}]}"));
    if (!f)
        return;
    dt_rowbuf_init(&b, 1);
    row_init(&r, f);
    PUT_TEXT(&r, "y", " 0.25 ");
    CHECK_OK(xform(&r, &b));
    PUT_INTS(&r, "y", 1);
    CHECK_OK(xform(&r, &b));
    PUT_FLOATS(&r, "y", 2.5f);
    CHECK_OK(xform(&r, &b));
    CHECK(b.n == 3 && b.labels[0] == 0.25f && b.labels[1] == 1 && b.labels[2] == 2.5f);
    PUT_TEXT(&r, "y", "x");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "label 'y': 'x' is not a number");
    PUT_INTS(&r, "y", 1, 2);
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "label 'y': expected one value, got 2");
    PUT_BYTES(&r, "y", "1");
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "label 'y': bytes, but the label has no vocabulary");
    PUT_FLOATS(&r, "y", INFINITY);
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "label 'y': not finite");
    CHECK(b.n == 3);
    dt_rowbuf_free(&b);
    dt_features_destroy(f);
    /* Without a label, rows are labelled 0. */
    f = PARSE(J("{'columns':[{'name':'a','type':'numeric','default_value':0}]}"));
    if (f) {
        CHECK(dt_features_label_key(f) == -1);
        dt_rowbuf_init(&b, 1);
        row_init(&r, f);
        CHECK_OK(xform(&r, &b));
        CHECK(b.n == 1 && b.labels[0] == 0);
        dt_rowbuf_free(&b);
        dt_features_destroy(f);
    }
}

/* ---- The sparse entries ---- */

TEST(features_entries_carry_slot_in_column_order)
{
    CHECK(dt_feature_entry_slot(dt_feature_entry(5, 123)) == 5);
    CHECK(dt_feature_entry_id(dt_feature_entry(5, 123)) == 123);
    int64_t e = dt_feature_entry(32767, DT_FEATURE_MAX_BUCKETS - 1);
    CHECK(e > 0 && dt_feature_entry_slot(e) == 32767 &&
          dt_feature_entry_id(e) == DT_FEATURE_MAX_BUCKETS - 1);
    CHECK(dt_feature_entry(0, 7) == 7);

    /* The weighted column comes first in the spec and is computed after its source; slots follow
     * the spec's order among the categorical columns all the same. */
    dt_features *f = PARSE(J("{'columns':["
                             "{'name':'n0','type':'numeric','default_value':0},"
                             "{'name':'hw','type':'weighted','categorical':'h','weight_key':'w'},"
                             "{'name':'h','type':'hash_bucket','key':'kh','hash_bucket_size':50},"
                             "{'name':'n1','type':'numeric','key':'kn','default_value':0},"
                             "{'name':'x','type':'crossed','keys':['kh','kv'],'hash_bucket_size':7},"
                             "{'name':'v','type':'vocabulary_list','key':'kv','vocabulary':['a']},"
                             "{'name':'nb','type':'bucketized','source':'n1','boundaries':[0]}]}"));
    if (!f)
        return;
    CHECK(dt_features_num_slots(f) == 5 && dt_features_dense_width(f) == 2);
    const char *order[] = {"hw", "h", "x", "v", "nb"};
    for (int s = 0; s < 5; s++) {
        int c = column_index(f, order[s]);
        CHECK_MSG(dt_features_column_slot(f, c) == s && dt_features_slot_column(f, s) == c,
                  "slot %d: column %d '%s' has slot %d", s, dt_features_slot_column(f, s),
                  order[s], dt_features_column_slot(f, c));
    }
    int w;
    CHECK(dt_features_column_dense(f, column_index(f, "n0"), &w) == 0 && w == 1);
    CHECK(dt_features_column_dense(f, column_index(f, "n1"), &w) == 1 && w == 1);
    CHECK(dt_features_column_dense(f, column_index(f, "h"), &w) == -1 && w == 0);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 2);
    raw_row r;
    row_init(&r, f);
    PUT_BYTES(&r, "kh", "p", "q");
    PUT_FLOATS(&r, "w", 0.25f, 4.0f);
    PUT_TEXT(&r, "kv", "a");
    PUT_TEXT(&r, "kn", "3");
    CHECK_OK(xform(&r, &b));
    /* Entries in slot order, each id below its column's buckets. */
    CHECK(b.nnz == 2 + 2 + 2 + 1 + 1);
    int last = -1;
    for (int64_t j = b.sp_row[0]; j < b.sp_row[1]; j++) {
        int s = dt_feature_entry_slot(b.sp_ids[j]);
        int64_t id = dt_feature_entry_id(b.sp_ids[j]);
        CHECK(s >= last && s < 5);
        CHECK(id >= 0 && id < dt_features_column_buckets(f, dt_features_slot_column(f, s)));
        last = s;
    }
    int64_t ph = (int64_t)(fp("p") % 50), qh = (int64_t)(fp("q") % 50);
    CHECK(b.sp_ids[0] == dt_feature_entry(0, ph) && b.sp_vals[0] == 0.25f);
    CHECK(b.sp_ids[1] == dt_feature_entry(0, qh) && b.sp_vals[1] == 4.0f);
    CHECK(b.sp_ids[2] == dt_feature_entry(1, ph) && b.sp_vals[2] == 1.0f);
    CHECK(b.sp_ids[3] == dt_feature_entry(1, qh));
    CHECK(b.sp_ids[4] == dt_feature_entry(2, (int64_t)(cat64(cat64(CROSS_KEY, fp("p")), fp("a")) % 7)));
    CHECK(b.sp_ids[6] == dt_feature_entry(3, 0));
    CHECK(b.sp_ids[7] == dt_feature_entry(4, 1));
    /* The JSON line of the row. */
    dt_elem *el = dt_rowbuf_take(&b);
    CHECK(el != NULL);
    if (el) {
        char *line = dt_features_row_json(f, el, 0);
        char want[512];
        snprintf(want, sizeof want, "{\"n0\":[0],\"hw\":{\"ids\":[%lld,%lld],\"weights\":[0.25,4]},"
                 "\"h\":{\"ids\":[%lld,%lld]},\"n1\":[3],", (long long)ph, (long long)qh,
                 (long long)ph, (long long)qh);
        CHECK_MSG(line && strncmp(line, want, strlen(want)) == 0, "'%s' does not start '%s'",
                  line ? line : "(null)", want);
        CHECK(line && strstr(line, "\"v\":{\"ids\":[0]},\"nb\":{\"ids\":[1]}}"));
        free(line);
        dt_elem_free(el);
    }
    dt_rowbuf_free(&b);
    dt_features_destroy(f);
}

/* ---- Delimited text ---- */

TEST(features_text_lines_through_a_header)
{
    dt_features *f = PARSE(J("{'label':{'key':'income','vocabulary':['<=50K','>50K']},'columns':["
                             "{'name':'age','type':'numeric'},"
                             "{'name':'occ','type':'hash_bucket','key':'occupation',"
                             "'hash_bucket_size':100}]}"));
    if (!f)
        return;
    const char *hdr = "id,occupation, age ,income\r";
    dt_feature_text *t = NULL;
    CHECK_OK(dt_feature_text_new(f, hdr, strlen(hdr), ',', &t));
    dt_feature_scratch *s = NULL;
    CHECK_OK(dt_feature_scratch_new(f, &s));
    dt_rowbuf b;
    dt_rowbuf_init(&b, 1);
    const char *l1 = "7,\"Craft, repair\", 39 , >50K\r";
    if (t && s) {
        CHECK_OK(dt_feature_text_parse(f, t, s, l1, strlen(l1), &b));
        CHECK(dt_feature_text_parse(f, t, s, " \t", 2, &b) == DT_END);
        CHECK_ERR(dt_feature_text_parse(f, t, s, "1,2,3", 5, &b), DT_ERR_FORMAT,
                  "the line has 3 fields, the header 4");
        CHECK_ERR(dt_feature_text_parse(f, t, s, "1,x,abc,<=50K", 13, &b), DT_ERR_FORMAT,
                  "column 'age' (key 'age'): 'abc' is not a number");
        CHECK_ERR(dt_feature_text_parse(f, t, s, "1,x,3,maybe", 11, &b), DT_ERR_FORMAT,
                  "label 'income': 'maybe' is not in its vocabulary");
        CHECK_ERR(dt_feature_text_parse(f, t, s, "1,\"x,3,4", 8, &b), DT_ERR_FORMAT,
                  "a quote that does not close");
    }
    CHECK(b.n == 1 && b.labels[0] == 1 && b.dense[0] == 39.0f);
    CHECK_IDS(f, &b, 0, "occ", (int64_t)(fp("Craft, repair") % 100));
    dt_rowbuf_free(&b);
    dt_feature_scratch_free(s);
    dt_feature_text_free(t);
    /* A key the header lacks; a header naming a key twice. */
    CHECK_ERR(dt_feature_text_new(f, "age,income", 10, ',', &t), DT_ERR_INVALID,
              "spec.json: the spec reads key 'occupation', which the header does not name");
    CHECK(t == NULL);
    CHECK_ERR(dt_feature_text_new(f, "age,occupation,age,income", 25, ',', &t), DT_ERR_FORMAT,
              "the header names 'age' twice (fields 1 and 3)");
    /* Criteo's TSV: no header, the columns label, I1..I13, C1..C26. */
    CHECK_ERR(dt_feature_text_new(f, NULL, 0, '\t', &t), DT_ERR_INVALID,
              "the spec reads key 'income', which Criteo's columns (label, I1..I13, C1..C26) do "
              "not include");
    dt_features_destroy(f);
    f = PARSE(J("{'label':'label','columns':[{'name':'I2','type':'numeric','default_value':0},"
                "{'name':'C26','type':'hash_bucket','hash_bucket_size':10}]}"));
    if (!f)
        return;
    CHECK_OK(dt_feature_text_new(f, NULL, 0, '\t', &t));
    CHECK_OK(dt_feature_scratch_new(f, &s));
    dt_rowbuf_init(&b, 1);
    char line[512] = "1\t5\t-3";
    for (int i = 3; i <= 13; i++)
        strcat(line, "\t");
    for (int i = 1; i <= 26; i++)
        strcat(line, i == 26 ? "\tab12cd34" : "\t");
    if (t && s) {
        CHECK_OK(dt_feature_text_parse(f, t, s, line, strlen(line), &b));
        CHECK_ERR(dt_feature_text_parse(f, t, s, "1\t2", 3, &b), DT_ERR_FORMAT,
                  "the line has 2 fields, Criteo's rows 40");
    }
    CHECK(b.n == 1 && b.labels[0] == 1 && b.dense[0] == -3.0f);
    CHECK_IDS(f, &b, 0, "C26", (int64_t)(fp("ab12cd34") % 10));
    dt_rowbuf_free(&b);
    dt_feature_scratch_free(s);
    dt_feature_text_free(t);
    dt_features_destroy(f);
}

/* ---- The spec as JSON ---- */

static const char census_csv[] =
    "age,workclass,education,occupation,genres,w,item,hours,income\n"
    "39,State-gov,Bachelors,Adm-clerical,a|b,0.5|2,5,40,<=50K\n"
    "50,Self-emp,HS-grad,Exec-managerial,,,9,13,>50K\n"
    "38,Private,Masters,Handlers-cleaners,c,1.5,3,40,<=50K\n"
    "53,Private,11th,Handlers-cleaners,b|zz|c,1|2|3,77,40, <=50K\n"
    "28,Private,Bachelors,Prof-specialty,a,4,0,40,>50K\n"
    "37,Private,Masters,Exec-managerial,,,2,40,<=50K\n"
    "49,Private,9th,Other-service,c|a,2|2,1,16,<=50K\n"
    "52,Self-emp,HS-grad,Exec-managerial,b,1,4,45,>50K\n"
    "31,Private,Masters,Prof-specialty,a|b|c,1|1|1,6,50,>50K\n"
    "42,Private,Bachelors,Exec-managerial,,,8,40,>50K\n";

/* A spec using every column type, adapted parts included. */
static void census_spec(char *out, size_t cap, const char *vocab_path)
{
    snprintf(out, cap,
             "{'label':{'key':'income','vocabulary':['<=50K','>50K']},'columns':["
             "{'name':'age','type':'numeric','normalizer':'standardize'},"
             "{'name':'hours','type':'numeric','normalizer':{'mean':40,'std':10},"
             "'default_value':40},"
             "{'name':'hours_log','type':'numeric','key':'hours','normalizer':'log1p'},"
             "{'name':'age_buckets','type':'bucketized','source':'age','boundaries':[18,25,30,35,"
             "40,45,50,55,60,65]},"
             "{'name':'age_q','type':'bucketized','source':'age','boundaries':{'num_bins':4}},"
             "{'name':'education','type':'vocabulary_list','key':'education','vocabulary':"
             "['Bachelors','HS-grad','Masters'],'num_oov_buckets':2},"
             "{'name':'workclass','type':'vocabulary','adapt':{'min_count':2,'max_tokens':10},"
             "'num_oov_buckets':1},"
             "{'name':'occ','type':'hash_bucket','key':'occupation','hash_bucket_size':1000},"
             "{'name':'edu_file','type':'vocabulary_file','key':'education','vocabulary_file':'%s',"
             "'default_value':-1},"
             "{'name':'genres','type':'vocabulary_list','key':'genres','vocabulary':['a','b','c'],"
             "'separator':'|'},"
             "{'name':'genres_w','type':'weighted','categorical':'genres','weight_key':'w'},"
             "{'name':'item','type':'identity','key':'item','num_buckets':10,'default_value':0},"
             "{'name':'edu_x_occ','type':'crossed','keys':['education','occupation'],"
             "'hash_bucket_size':1000},"
             "{'name':'age_x_edu','type':'crossed','keys':['age_buckets','education'],"
             "'hash_bucket_size':500,'hash_key':99}],"
             "'model':{'type':'wide_deep','linear_feature_columns':['age_x_edu','edu_x_occ',"
             "'occ'],'dnn_feature_columns':['age','hours','hours_log','age_q',{'embedding':"
             "'workclass','dimension':4},{'indicator':'edu_file'},{'embedding':'genres_w',"
             "'dimension':3},{'shared_embedding':['education','item'],'dimension':2}]}}",
             vocab_path);
}

/* parse(to_json(f)) gives the same rows, and writes the same JSON again. */
static void check_round_trip(const dt_features *f, const char *csv, int line)
{
    char *text = dt_features_to_json(f);
    if (!text) {
        test_fail(__FILE__, line, "to_json failed");
        return;
    }
    dt_features *g = NULL;
    dt_status st = dt_features_parse(text, "written.json", NULL, &g);
    if (st) {
        test_fail(__FILE__, line, "the written spec does not parse: %s\n%s", dt_last_error(), text);
        free(text);
        return;
    }
    CHECK_MSG(dt_features_needs_adapt(f) == dt_features_needs_adapt(g), "line %d", line);
    CHECK_MSG(dt_features_num_keys(f) == dt_features_num_keys(g) &&
                  dt_features_num_columns(f) == dt_features_num_columns(g) &&
                  dt_features_num_slots(f) == dt_features_num_slots(g) &&
                  dt_features_dense_width(f) == dt_features_dense_width(g) &&
                  dt_features_label_key(f) == dt_features_label_key(g),
              "line %d: the layout changed", line);
    for (int i = 0; i < dt_features_num_columns(f) && i < dt_features_num_columns(g); i++)
        CHECK_MSG(dt_features_column_buckets(f, i) == dt_features_column_buckets(g, i) &&
                      dt_features_column_type(f, i) == dt_features_column_type(g, i) &&
                      strcmp(dt_features_column_name(f, i), dt_features_column_name(g, i)) == 0,
                  "line %d: column %d differs", line, i);
    char *again = dt_features_to_json(g);
    CHECK_MSG(again && strcmp(text, again) == 0, "line %d: not a fixed point:\n%s\n---\n%s", line,
              text, again ? again : "(null)");
    if (!dt_features_needs_adapt(f)) {
        dt_rowbuf a, b;
        dt_rowbuf_init(&a, dt_features_dense_width(f));
        dt_rowbuf_init(&b, dt_features_dense_width(g));
        CHECK_OK(csv_rows(f, csv, &a));
        CHECK_OK(csv_rows(g, csv, &b));
        CHECK_MSG(a.n > 0 && same_rows(&a, &b), "line %d: rows differ after the round trip "
                  "(%d and %d rows)", line, a.n, b.n);
        dt_rowbuf_free(&a);
        dt_rowbuf_free(&b);
    }
    free(again);
    free(text);
    dt_features_destroy(g);
}

TEST(features_to_json_round_trip)
{
    write_text(test_path("feat_edu.txt"), "HS-grad\nBachelors\nMasters\n11th\n");
    write_text(test_path("feat_census.csv"), census_csv);
    char spec[8192];
    census_spec(spec, sizeof spec, test_path("feat_edu.txt"));
    dt_features *f = PARSE(J(spec));
    if (!f)
        return;
    CHECK(dt_features_needs_adapt(f));
    check_round_trip(f, census_csv, __LINE__); /* before the pass: still to adapt */
    int64_t bad = -1;
    CHECK_OK(adapt_on(f, "csv", test_path("feat_census.csv"), 2, false, &bad));
    CHECK(bad == 0);
    CHECK(!dt_features_needs_adapt(f));
    check_round_trip(f, census_csv, __LINE__);
    /* Everything adapted is in the text. */
    char *text = dt_features_to_json(f);
    CHECK(text && strstr(text, "\"adapted\":\ttrue") && strstr(text, "\"Private\"") &&
          !strstr(text, "num_bins"));
    free(text);
    /* Another pass over the same data is nothing to do. */
    CHECK_OK(adapt_on(f, "csv", test_path("no-such-file-*.csv"), 1, false, NULL));
    dt_features_destroy(f);

    /* Smaller specs: every option a column can have, written and read. */
    const char *specs[] = {
        "{'columns':[{'name':'a','type':'numeric','shape':3,'default_value':0.1},"
        "{'name':'b','type':'numeric','key':'kb','normalizer':'log1p'}]}",
        "{'label':'y','columns':[{'name':'h','type':'hash_bucket','key':'k','hash_bucket_size':9,"
        "'separator':';'},{'name':'i','type':'identity','key':'j','num_buckets':4,'separator':' '},"
        "{'name':'x','type':'crossed','keys':[{'key':'k'},{'key':'j'}],'hash_bucket_size':5}]}",
        "{'columns':[{'name':'v','type':'vocabulary_list','vocabulary':[1,2,'x y'],"
        "'default_value':0},{'name':'vw','type':'weighted','categorical':'v','weight_key':'w'}]}",
    };
    const char *csv[] = {"a,kb\n,1\n,2\n", "k,j,y\na;b,1 3,1\n;,,0\n", "v,w\n1,2\nx y,3\n"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        dt_features *g = PARSE(J(specs[i]));
        if (g)
            check_round_trip(g, csv[i], __LINE__);
        dt_features_destroy(g);
    }
}

/* A spec loaded from a relative directory names its vocabulary file relative to that directory;
 * written back and loaded from the same place, it still finds the file. */
/* abs (absolute) as a path relative to the working directory: "../../tmp/...". */
static void relative_path(const char *abs, char *out, size_t cap)
{
    char cwd[4096];
    snprintf(out, cap, "%s", abs);
    if (!getcwd(cwd, sizeof cwd) || abs[0] != '/')
        return;
    size_t n = 0;
    out[0] = '\0';
    for (const char *p = cwd; *p; p++)
        if (*p == '/' && p[1] && n + 4 < cap) {
            memcpy(out + n, "../", 4);
            n += 3;
        }
    snprintf(out + n, cap - n, "%s", abs + 1);
}

TEST(features_to_json_keeps_vocabulary_file_findable)
{
    char dir[600];
    relative_path(test_path("feat_rel"), dir, sizeof dir);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0);
    char path[700];
    snprintf(path, sizeof path, "%s/v.txt", dir);
    write_text(path, "p\nq\n");
    /* As dt_features_load("DIR/spec.json") parses it: relative file names are under DIR. */
    dt_features *f = NULL;
    CHECK_OK(dt_features_parse(J("{'columns':[{'name':'v','type':'vocabulary_file',"
                                 "'vocabulary_file':'v.txt'}]}"),
                               "spec.json", dir, &f));
    if (!f)
        return;
    char *text = dt_features_to_json(f);
    dt_features *g = NULL;
    CHECK_OK(dt_features_parse(text ? text : "", "written.json", dir, &g));
    if (g)
        CHECK(dt_features_column_buckets(g, 0) == 2);
    dt_features_destroy(g);
    free(text);
    dt_features_destroy(f);
}

/* ---- Adapt passes ---- */

/* Rows for the adapt checks: x = 1..10 shuffled, d with repeats, tok with several tokens per
 * cell (a, b, ab three times each; B, c twice; e once), two rows without tokens. */
static const struct {
    float x;
    int64_t d;
    const char *tok;
} adapt_rows[] = {
    {7, 1, "a b"}, {3, 1, "ab a"}, {10, 1, "b ab"}, {1, 1, "B c"}, {5, 1, "a"},
    {2, 1, "ab"},  {9, 2, "b B"},  {4, 3, "c e"},   {8, 4, ""},    {6, 5, ""},
};
#define N_ADAPT_ROWS (sizeof adapt_rows / sizeof adapt_rows[0])

static const char adapt_spec[] =
    "{'columns':["
    "{'name':'x','type':'numeric','normalizer':'standardize'},"
    "{'name':'xq','type':'bucketized','source':'x','boundaries':{'num_bins':4}},"
    "{'name':'d','type':'numeric','default_value':0},"
    "{'name':'dq','type':'bucketized','source':'d','boundaries':{'num_bins':4}},"
    "{'name':'t4','type':'vocabulary','key':'tok','separator':' ','adapt':{'min_count':2,"
    "'max_tokens':4},'num_oov_buckets':1},"
    "{'name':'t2','type':'vocabulary','key':'tok','separator':' ','adapt':{'min_count':2}},"
    "{'name':'t1','type':'vocabulary','key':'tok','separator':' '}]}";

static void check_vocab(const dt_features *f, const char *col, const char *const *want, int n,
                        int line)
{
    int c = column_index(f, col);
    if (c < 0) {
        test_fail(__FILE__, line, "no column '%s'", col);
        return;
    }
    const dt_vocab *v = &f->cols[c].vocab;
    bool same = v->n == n;
    for (int i = 0; same && i < n; i++)
        same = strcmp(dt_vocab_token(v, i), want[i]) == 0;
    if (!same) {
        char got[512] = "";
        for (int64_t i = 0; i < v->n && i < 20; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), " '%s'", dt_vocab_token(v, i));
        test_fail(__FILE__, line, "column '%s': vocabulary [%s ], %d tokens expected", col, got, n);
    }
}

static void check_adapted(const dt_features *f, int line)
{
    int x = column_index(f, "x");
    CHECK_MSG(f->cols[x].mean == 5.5 && f->cols[x].std == sqrt(8.25),
              "line %d: mean %.17g std %.17g, expected 5.5 and %.17g", line, f->cols[x].mean,
              f->cols[x].std, sqrt(8.25));
    /* 10 values, 4 bins: ranks floor(i * 10 / 4) = 2, 5, 7. */
    const dt_feature_column *xq = &f->cols[column_index(f, "xq")];
    CHECK_MSG(xq->n_boundaries == 3 && xq->boundaries[0] == 3 && xq->boundaries[1] == 6 &&
                  xq->boundaries[2] == 8,
              "line %d: xq boundaries (%d)", line, xq->n_boundaries);
    CHECK(dt_features_column_buckets(f, column_index(f, "xq")) == 4);
    /* d sorted: 1 1 1 1 1 1 2 3 4 5; ranks 2, 5, 7 -> 1, 1, 3: the repeat dropped. */
    const dt_feature_column *dq = &f->cols[column_index(f, "dq")];
    CHECK_MSG(dq->n_boundaries == 2 && dq->boundaries[0] == 1 && dq->boundaries[1] == 3,
              "line %d: dq boundaries (%d)", line, dq->n_boundaries);
    CHECK(dt_features_column_buckets(f, column_index(f, "dq")) == 3);
    /* Count descending, ties in byte order ("B" < "a" < "ab" < "b"). */
    const char *t4[] = {"a", "ab", "b", "B"};
    const char *t2[] = {"a", "ab", "b", "B", "c"};
    const char *t1[] = {"a", "ab", "b", "B", "c", "e"};
    check_vocab(f, "t4", t4, 4, line);
    check_vocab(f, "t2", t2, 5, line);
    check_vocab(f, "t1", t1, 6, line);
    CHECK(dt_features_column_buckets(f, column_index(f, "t4")) == 5);
    CHECK(dt_features_column_buckets(f, column_index(f, "t1")) == 6);
}

static void write_adapt_csv(const char *path)
{
    char csv[2048] = "x,d,tok\n";
    for (size_t i = 0; i < N_ADAPT_ROWS; i++)
        snprintf(csv + strlen(csv), sizeof csv - strlen(csv), "%g,%lld,%s\n",
                 (double)adapt_rows[i].x, (long long)adapt_rows[i].d, adapt_rows[i].tok);
    write_text(path, csv);
}

TEST(features_adapt_csv_exact)
{
    write_adapt_csv(test_path("feat_adapt.csv"));
    dt_features *f = PARSE(J(adapt_spec));
    if (!f)
        return;
    CHECK(dt_features_needs_adapt(f));
    int64_t bad = -1;
    CHECK_OK(adapt_on(f, "csv", test_path("feat_adapt.csv"), 1, false, &bad));
    CHECK(bad == 0 && !dt_features_needs_adapt(f));
    check_adapted(f, __LINE__);
    /* The adapted statistics in use: x = 5.5 standardizes to 0, 8 lands in bucket 3; an OOV
     * token in t4's one OOV bucket, t1 drops it. */
    dt_rowbuf b;
    dt_rowbuf_init(&b, dt_features_dense_width(f));
    raw_row r;
    row_init(&r, f);
    PUT_TEXT(&r, "x", "5.5");
    PUT_TEXT(&r, "tok", "zz B e");
    CHECK_OK(xform(&r, &b));
    PUT_TEXT(&r, "x", "8");
    CHECK_OK(xform(&r, &b));
    CHECK(b.n == 2 && dense_of(f, &b, 0, "x", 0) == 0.0f);
    CHECK_NEAR(dense_of(f, &b, 1, "x", 0), 2.5 / sqrt(8.25), 1e-6);
    CHECK_IDS(f, &b, 0, "xq", 1); /* 3 <= 5.5 < 6 */
    CHECK_IDS(f, &b, 1, "xq", 3); /* on the last boundary: the upper bucket */
    CHECK_IDS(f, &b, 0, "t4", 4, 3, 4);
    CHECK_IDS(f, &b, 0, "t1", 3, 5);
    dt_rowbuf_free(&b);
    dt_features_destroy(f);
}

/* The standardize statistics skip missing values; a constant column gets the smallest std. */
TEST(features_adapt_standardize_values_present)
{
    write_text(test_path("feat_std.csv"), "x,c\n1,4\n,4\n2,4\n3,4\n\n4,4\n");
    dt_features *f = PARSE(J("{'columns':[{'name':'x','type':'numeric','default_value':0,"
                             "'normalizer':'standardize'},{'name':'c','type':'numeric',"
                             "'normalizer':'standardize'}]}"));
    if (!f)
        return;
    CHECK_OK(adapt_on(f, "csv", test_path("feat_std.csv"), 1, false, NULL));
    CHECK_MSG(f->cols[0].mean == 2.5 && f->cols[0].std == sqrt(1.25), "mean %.17g std %.17g",
              f->cols[0].mean, f->cols[0].std);
    CHECK(f->cols[1].mean == 4 && f->cols[1].std == 1e-7);
    dt_features_destroy(f);
}

/* Bad rows during a pass: an error naming the file and line, or skipped and counted. */
static void check_bad_rows(const char *spec, int line)
{
    dt_features *f = parse_ok(spec, line);
    if (!f)
        return;
    CHECK_ERR(adapt_on(f, "csv", test_path("feat_adapt_bad.csv"), 1, false, NULL), DT_ERR_FORMAT,
              "column 'x' (key 'x'): 'abc' is not a number");
    CHECK(strstr(dt_last_error(), "feat_adapt_bad.csv") && strstr(dt_last_error(), "line 4"));
    CHECK(dt_features_needs_adapt(f));
    int64_t bad = -1;
    CHECK_OK(adapt_on(f, "csv", test_path("feat_adapt_bad.csv"), 1, true, &bad));
    CHECK(bad == 1);
    /* A skipped row adds nothing to any column, whichever column found it bad. */
    const dt_feature_column *x = &f->cols[column_index(f, "x")];
    CHECK_MSG(fabs(x->mean - 7.0 / 3) < 1e-15, "line %d: mean %.17g", line, x->mean);
    const char *want[] = {"a", "b", "d"};
    check_vocab(f, "t", want, 3, line);
    dt_features_destroy(f);
}

TEST(features_adapt_bad_rows)
{
    write_text(test_path("feat_adapt_bad.csv"), "x,tok\n1,a\n2,b\nabc,c\n4,d\n");
    check_bad_rows(J("{'columns':[{'name':'x','type':'numeric','normalizer':'standardize'},"
                     "{'name':'t','type':'vocabulary','key':'tok'}]}"), __LINE__);
    check_bad_rows(J("{'columns':[{'name':'t','type':'vocabulary','key':'tok'},"
                     "{'name':'x','type':'numeric','normalizer':'standardize'}]}"), __LINE__);
    dt_features *f;
    /* A header that lacks a key. */
    f = PARSE(J("{'columns':[{'name':'x','type':'numeric','normalizer':'standardize'},"
                "{'name':'y','type':'numeric','key':'nokey','normalizer':'standardize'}]}"));
    if (f) {
        CHECK_ERR(adapt_on(f, "csv", test_path("feat_adapt_bad.csv"), 1, true, NULL),
                  DT_ERR_INVALID, "the spec reads key 'nokey', which the header does not name");
        dt_features_destroy(f);
    }
}

/* A serialized Example with one bytes_list of several values, written by hand (every length
 * below 128); appended to another Example's bytes it merges into its features. */
static size_t bytes_list_example_k(uint8_t *out, const char *key, size_t klen,
                                   const char *const *vals, int n)
{
    uint8_t list[256], entry[300], feature[300];
    size_t nl = 0, nf = 0, ne = 0;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(vals[i]);
        list[nl++] = 0x0a;
        list[nl++] = (uint8_t)l;
        memcpy(list + nl, vals[i], l), nl += l;
    }
    feature[nf++] = 0x0a; /* Feature.bytes_list */
    feature[nf++] = (uint8_t)nl;
    memcpy(feature + nf, list, nl), nf += nl;
    entry[ne++] = 0x0a;
    entry[ne++] = (uint8_t)klen;
    memcpy(entry + ne, key, klen), ne += klen;
    entry[ne++] = 0x12;
    entry[ne++] = (uint8_t)nf;
    memcpy(entry + ne, feature, nf), ne += nf;
    size_t k = 0;
    out[k++] = 0x0a; /* Example.features */
    out[k++] = (uint8_t)(ne + 2);
    out[k++] = 0x0a; /* Features.feature */
    out[k++] = (uint8_t)ne;
    memcpy(out + k, entry, ne);
    return k + ne;
}

static size_t bytes_list_example(uint8_t *out, const char *key, const char *const *vals, int n)
{
    return bytes_list_example_k(out, key, strlen(key), vals, n);
}

/* The adapt rows as Examples: x a float_list, d an int64_list, tok a bytes_list (empty for the
 * rows without tokens). */
static void write_adapt_tfrecord(const char *path)
{
    dt_tfrecord_writer *w = NULL;
    CHECK_OK(dt_tfrecord_writer_open(path, DT_COMPRESSION_NONE, &w));
    if (!w)
        return;
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < N_ADAPT_ROWS; i++) {
        const dt_feature_value fv[] = {
            {"x", DT_FEATURE_FLOAT, 1, &adapt_rows[i].x, NULL, NULL},
            {"d", DT_FEATURE_INT64, 1, NULL, &adapt_rows[i].d, NULL},
        };
        CHECK_OK(dt_example_encode(fv, 2, &buf, &n, &cap));
        const char *toks[4];
        int nt = 0;
        char copy[32];
        snprintf(copy, sizeof copy, "%s", adapt_rows[i].tok);
        for (char *save = NULL, *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save))
            toks[nt++] = t;
        uint8_t rec[1024];
        memcpy(rec, buf, n);
        size_t m = n + bytes_list_example(rec + n, "tok", toks, nt);
        CHECK_OK(dt_tfrecord_write(w, rec, m));
    }
    free(buf);
    CHECK_OK(dt_tfrecord_writer_close(w));
}

TEST(features_adapt_tfrecord_like_csv)
{
    write_adapt_tfrecord(test_path("feat_adapt.tfrecord"));
    dt_features *f = PARSE(J(adapt_spec));
    if (!f)
        return;
    int64_t bad = -1;
    CHECK_OK(adapt_on(f, "tfrecord", test_path("feat_adapt.tfrecord"), 1, false, &bad));
    CHECK(bad == 0);
    check_adapted(f, __LINE__);
    /* And the written specs of both passes are the same text. */
    write_adapt_csv(test_path("feat_adapt2.csv"));
    dt_features *g = PARSE(J(adapt_spec));
    if (g) {
        CHECK_OK(adapt_on(g, "csv", test_path("feat_adapt2.csv"), 1, false, NULL));
        char *a = dt_features_to_json(f), *c = dt_features_to_json(g);
        CHECK(a && c && strcmp(a, c) == 0);
        free(a);
        free(c);
        dt_features_destroy(g);
    }
    dt_features_destroy(f);
}

/* Enough rows for several parse threads (batches of 1024): the statistics merge to what one
 * thread computes. */
TEST(features_adapt_threads_agree)
{
    const char *path = test_path("feat_adapt_big.csv");
    FILE *out = fopen(path, "w");
    CHECK(out != NULL);
    if (!out)
        return;
    fprintf(out, "x,y,tok\n");
    uint64_t s = 12345;
    for (int i = 0; i < 9000; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        int tok = (int)((s >> 33) % 300);
        /* x in eighths (exact sums), y a general decimal. */
        fprintf(out, "%g,%.6f,t%d t%d\n", (double)((s >> 20) % 8000) / 8.0,
                (double)((s >> 40) % 100000) / 977.0, tok, tok % 17);
    }
    fclose(out);
    const char *spec = "{'columns':[{'name':'x','type':'numeric','normalizer':'standardize'},"
                       "{'name':'y','type':'numeric','normalizer':'standardize'},"
                       "{'name':'yq','type':'bucketized','source':'y','boundaries':{'num_bins':10}},"
                       "{'name':'t','type':'vocabulary','key':'tok','separator':' ','adapt':"
                       "{'min_count':3,'max_tokens':200}}]}";
    dt_features *one = PARSE(J(spec)), *many = PARSE(J(spec));
    if (one && many) {
        CHECK_OK(adapt_on(one, "csv", path, 1, false, NULL));
        CHECK_OK(adapt_on(many, "csv", path, 4, false, NULL));
        /* Everything agrees bit for bit: the sums are double-double, whose rounded values do
         * not depend on the order the threads' rows and sums come in. */
        CHECK(one->cols[0].mean == many->cols[0].mean && one->cols[0].std == many->cols[0].std);
        CHECK(one->cols[1].mean == many->cols[1].mean && one->cols[1].std == many->cols[1].std);
        const dt_feature_column *a = &one->cols[2], *b = &many->cols[2];
        CHECK(a->n_boundaries == 9 && a->n_boundaries == b->n_boundaries &&
              memcmp(a->boundaries, b->boundaries, (size_t)a->n_boundaries * sizeof(double)) == 0);
        const dt_vocab *va = &one->cols[3].vocab, *vb = &many->cols[3].vocab;
        CHECK(va->n == 200 && va->n == vb->n && va->blob_bytes == vb->blob_bytes &&
              memcmp(va->blob, vb->blob, va->blob_bytes) == 0);
    }
    dt_features_destroy(one);
    dt_features_destroy(many);
}

/* ---- tf.Example records ---- */

TEST(features_transform_example_lists)
{
    dt_features *f = PARSE(J("{'label':'y','columns':["
                             "{'name':'h','type':'hash_bucket','key':'hb','hash_bucket_size':3},"
                             "{'name':'i','type':'identity','key':'ii','num_buckets':100},"
                             "{'name':'fl','type':'numeric','key':'ff','shape':2},"
                             "{'name':'g','type':'numeric','key':'gg','default_value':9},"
                             "{'name':'v','type':'vocabulary_list','key':'vv','vocabulary':"
                             "['x','y'],'num_oov_buckets':1}]}"));
    if (!f)
        return;
    dt_feature_scratch *s = NULL;
    CHECK_OK(dt_feature_scratch_new(f, &s));
    if (!s) {
        dt_features_destroy(f);
        return;
    }
    dt_rowbuf b;
    dt_rowbuf_init(&b, dt_features_dense_width(f));
    const int64_t ii[] = {3, 4}, y[] = {1};
    const float ff[] = {0.5f, 1.5f};
    uint8_t *buf = NULL, rec[1024];
    size_t n = 0, cap = 0;
    /* gg an empty float list, vv one bytes value, hb a bytes list of three. */
    const dt_feature_value fv[] = {
        {"ii", DT_FEATURE_INT64, 2, NULL, ii, NULL},
        {"ff", DT_FEATURE_FLOAT, 2, ff, NULL, NULL},
        {"gg", DT_FEATURE_FLOAT, 0, NULL, NULL, NULL},
        {"y", DT_FEATURE_INT64, 1, NULL, y, NULL},
        {"vv", DT_FEATURE_BYTES, 1, NULL, NULL, (const uint8_t *)"y"},
        {"other", DT_FEATURE_BYTES, 3, NULL, NULL, (const uint8_t *)"abc"},
    };
    CHECK_OK(dt_example_encode(fv, 6, &buf, &n, &cap));
    memcpy(rec, buf, n);
    const char *hb[] = {"Hello", "TensorFlow", "2.x"};
    size_t m = n + bytes_list_example(rec + n, "hb", hb, 3);
    CHECK_OK(dt_features_transform_example(f, s, rec, m, &b));
    CHECK(b.n == 1 && b.labels[0] == 1);
    CHECK_IDS(f, &b, 0, "h", 0, 2, 2);
    CHECK_IDS(f, &b, 0, "i", 3, 4);
    CHECK_IDS(f, &b, 0, "v", 1);
    CHECK(dense_of(f, &b, 0, "fl", 0) == 0.5f && dense_of(f, &b, 0, "fl", 1) == 1.5f);
    CHECK(dense_of(f, &b, 0, "g", 0) == 9.0f);
    /* gg absent, an empty int64 list for ii and an empty bytes list for hb: missing. */
    const float g1[] = {2.0f};
    const dt_feature_value fv2[] = {
        {"y", DT_FEATURE_INT64, 1, NULL, y, NULL},
        {"ii", DT_FEATURE_INT64, 0, NULL, NULL, NULL},
        {"ff", DT_FEATURE_FLOAT, 2, ff, NULL, NULL},
        {"vv", DT_FEATURE_BYTES, 2, NULL, NULL, (const uint8_t *)"zz"},
    };
    CHECK_OK(dt_example_encode(fv2, 4, &buf, &n, &cap));
    memcpy(rec, buf, n);
    m = n + bytes_list_example(rec + n, "hb", hb, 0);
    CHECK_OK(dt_features_transform_example(f, s, rec, m, &b));
    CHECK(b.n == 2);
    CHECK_NO_IDS(f, &b, 1, "h");
    CHECK_NO_IDS(f, &b, 1, "i");
    CHECK_IDS(f, &b, 1, "v", 2);
    CHECK(dense_of(f, &b, 1, "g", 0) == 9.0f);
    const dt_feature_value fv3[] = {
        {"y", DT_FEATURE_INT64, 1, NULL, y, NULL},
        {"ff", DT_FEATURE_FLOAT, 2, ff, NULL, NULL},
        {"gg", DT_FEATURE_FLOAT, 1, g1, NULL, NULL},
    };
    CHECK_OK(dt_example_encode(fv3, 3, &buf, &n, &cap));
    CHECK_OK(dt_features_transform_example(f, s, buf, n, &b));
    CHECK(b.n == 3 && dense_of(f, &b, 2, "g", 0) == 2.0f);
    /* The only bytes list of a record empty (no references to make at all). */
    const dt_feature_value fv4[] = {{"y", DT_FEATURE_INT64, 1, NULL, y, NULL},
                                    {"ff", DT_FEATURE_FLOAT, 2, ff, NULL, NULL}};
    CHECK_OK(dt_example_encode(fv4, 2, &buf, &n, &cap));
    memcpy(rec, buf, n);
    m = n + bytes_list_example(rec + n, "vv", hb, 0);
    dt_feature_scratch *fresh = NULL;
    CHECK_OK(dt_feature_scratch_new(f, &fresh));
    if (fresh) {
        CHECK_OK(dt_features_transform_example(f, fresh, rec, m, &b));
        CHECK(b.n == 4);
        CHECK_NO_IDS(f, &b, 3, "v");
        dt_rowbuf_drop_last(&b);
        dt_feature_scratch_free(fresh);
    }
    /* Errors: a column's (naming it), the label's, and a malformed record's. */
    const dt_feature_value bad1[] = {
        {"y", DT_FEATURE_INT64, 1, NULL, y, NULL},
        {"ff", DT_FEATURE_FLOAT, 1, ff, NULL, NULL},
    };
    CHECK_OK(dt_example_encode(bad1, 2, &buf, &n, &cap));
    CHECK_ERR(dt_features_transform_example(f, s, buf, n, &b), DT_ERR_FORMAT,
              "column 'fl' (key 'ff'): 1 values, the column's shape is 2");
    const dt_feature_value bad2[] = {{"ff", DT_FEATURE_FLOAT, 2, ff, NULL, NULL}};
    CHECK_OK(dt_example_encode(bad2, 1, &buf, &n, &cap));
    CHECK_ERR(dt_features_transform_example(f, s, buf, n, &b), DT_ERR_FORMAT,
              "label 'y': expected one value, got 0");
    const dt_feature_value bad3[] = {{"y", DT_FEATURE_INT64, 1, NULL, y, NULL},
                                     {"ff", DT_FEATURE_FLOAT, 2, ff, NULL, NULL},
                                     {"ii", DT_FEATURE_FLOAT, 1, ff, NULL, NULL}};
    CHECK_OK(dt_example_encode(bad3, 3, &buf, &n, &cap));
    CHECK_ERR(dt_features_transform_example(f, s, buf, n, &b), DT_ERR_FORMAT,
              "column 'i' (key 'ii'): a float feature");
    /* A key that starts as a spec's key does, then a NUL and more bytes, is another key (vv,
     * the spec's last key, stays missing); long enough to read past the spec's keys if compared
     * as a C string. */
    static const char nul_key[] = "vv\0padding-padding-padding-padding-padding-padding-padding-"
                                  "padding-padding";
    const dt_feature_value ok3[] = {{"y", DT_FEATURE_INT64, 1, NULL, y, NULL},
                                    {"ff", DT_FEATURE_FLOAT, 2, ff, NULL, NULL}};
    CHECK_OK(dt_example_encode(ok3, 2, &buf, &n, &cap));
    memcpy(rec, buf, n);
    m = n + bytes_list_example_k(rec + n, nul_key, sizeof nul_key - 1, hb, 2);
    CHECK_OK(dt_features_transform_example(f, s, rec, m, &b));
    CHECK(b.n == 4);
    CHECK_NO_IDS(f, &b, 3, "v");
    const uint8_t junk[] = {0x0a, 0x05, 0x0a, 0x09, 0x01};
    CHECK_ERR(dt_features_transform_example(f, s, junk, sizeof junk, &b), DT_ERR_FORMAT, "byte ");
    CHECK(b.n == 4);
    free(buf);
    dt_rowbuf_free(&b);
    dt_feature_scratch_free(s);
    dt_features_destroy(f);
}

/* Parses a spec and builds its model: the status. */
static dt_status model_of(const char *json)
{
    dt_features *f = NULL;
    dt_feature_model fm;
    dt_status st = dt_features_parse(json, "spec.json", NULL, &f);
    if (st == DT_OK)
        st = dt_features_model(f, &fm);
    dt_features_destroy(f);
    return st;
}

/* A dynamic column's ids in a row: each key from its pair of entries. */
static int col_keys(const dt_features *f, const dt_rowbuf *b, int row, const char *col,
                    int64_t *keys, float *w, int max)
{
    int c = column_index(f, col), slot = c >= 0 ? dt_features_column_slot(f, c) : -1, n = 0;
    for (int64_t j = b->sp_row[row]; slot >= 0 && j + 1 < b->sp_row[row + 1]; j++)
        if (dt_feature_entry_slot(b->sp_ids[j]) == slot) {
            CHECK(dt_feature_entry_slot(b->sp_ids[j + 1]) == slot);
            if (n < max) {
                keys[n] = dt_feature_entry_key(b->sp_ids[j], b->sp_ids[j + 1]);
                w[n] = b->sp_vals[j];
            }
            n++, j++;
        }
    return n;
}

TEST(features_dynamic_columns_key_by_the_value)
{
    dt_features *f = PARSE(J("{'columns':["
                             "{'name':'h','type':'hash_bucket','key':'k','dynamic':true,"
                             "'admit':{'min_count':3},'evict':{'steps_to_live':100}},"
                             "{'name':'i','type':'identity','key':'ki','dynamic':true},"
                             "{'name':'x','type':'crossed','keys':['k','ki'],'dynamic':true},"
                             "{'name':'w','type':'weighted','categorical':'h','weight_key':'kw'},"
                             "{'name':'f','type':'hash_bucket','key':'k','hash_bucket_size':10}]}"));
    if (!f)
        return;
    CHECK(dt_features_column_dynamic(f, 0) && dt_features_column_dynamic(f, 3) &&
          !dt_features_column_dynamic(f, 4));
    CHECK(dt_features_column_buckets(f, 0) == 0);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    raw_row r;
    row_init(&r, f);
    /* Fingerprint64("Hello") = 15404698994557526151: the key is it less its top bit. */
    PUT_BYTES(&r, "k", "Hello", "x");
    PUT_INTS(&r, "ki", (int64_t)1 << 62, 7);
    PUT_FLOATS(&r, "kw", 0.5f, 2.0f);
    CHECK_OK(xform(&r, &b));
    int64_t keys[8];
    float w[8];
    CHECK(col_keys(f, &b, 0, "h", keys, w, 8) == 2);
    CHECK(keys[0] == (int64_t)(15404698994557526151ULL - (1ULL << 63)));
    CHECK(keys[1] == (int64_t)(fp("x") & (UINT64_MAX >> 1)));
    CHECK(col_keys(f, &b, 0, "i", keys, w, 8) == 2);
    CHECK(keys[0] == (int64_t)1 << 62 && keys[1] == 7);
    CHECK(col_keys(f, &b, 0, "x", keys, w, 8) == 4);
    CHECK(keys[1] == (int64_t)(cat64(cat64(CROSS_KEY, fp("Hello")), 7) & (UINT64_MAX >> 1)));
    CHECK(col_keys(f, &b, 0, "w", keys, w, 8) == 2);
    CHECK(keys[1] == (int64_t)(fp("x") & (UINT64_MAX >> 1)) && w[0] == 0.5f && w[1] == 2.0f);
    CHECK_IDS(f, &b, 0, "f", (int64_t)(15404698994557526151ULL % 10), (int64_t)(fp("x") % 10));
    /* A negative id is no key. */
    PUT_INTS(&r, "ki", -3);
    CHECK_ERR(xform(&r, &b), DT_ERR_FORMAT, "column 'i' (key 'ki'): id -3 is negative");
    /* The spec written back keeps the columns dynamic, with their policy. */
    char *json = dt_features_to_json(f);
    CHECK(json && strstr(json, "\"dynamic\":\ttrue") && strstr(json, "\"steps_to_live\":\t100"));
    dt_features *g = NULL;
    CHECK_OK(dt_features_parse(json ? json : "", "again", NULL, &g));
    CHECK(g && dt_features_column_dynamic(g, 2) && dt_features_column_buckets(g, 2) == 0);
    free(json);
    dt_features_destroy(g);
    dt_rowbuf_free(&b);
    dt_features_destroy(f);
    /* What a dynamic column does not take, and what only it takes. */
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'hash_bucket','dynamic':true,"
                           "'hash_bucket_size':9}]}")),
              DT_ERR_INVALID, "columns[0] 'a': hash_bucket_size: a dynamic column has no buckets");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'identity','num_buckets':9,"
                           "'admit':{'min_count':2}}]}")),
              DT_ERR_INVALID, "columns[0] 'a': admit: applies to a dynamic column");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'identity','dynamic':1}]}")),
              DT_ERR_INVALID, "columns[0] 'a': dynamic: expected true or false");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'vocabulary_list','vocabulary':['p'],"
                           "'dynamic':true}]}")),
              DT_ERR_INVALID, "columns[0] 'a': unknown field \"dynamic\"");
    CHECK_ERR(parse_spec(J("{'columns':[{'name':'a','type':'hash_bucket','dynamic':true,"
                           "'evict':{'steps_to_live':-1}}]}")),
              DT_ERR_INVALID, "spec.json: columns[0] 'a': evict.steps_to_live");
    CHECK_ERR(model_of(J("{'columns':[{'name':'a','type':'hash_bucket','dynamic':true}],"
                         "'model':{'type':'dnn','dnn_feature_columns':[{'indicator':'a'}]}}")),
              DT_ERR_INVALID, "indicator 'a': a dynamic column has no buckets to count");
    CHECK_ERR(model_of(J("{'columns':[{'name':'a','type':'identity','dynamic':true},"
                         "{'name':'b','type':'identity','num_buckets':5}],"
                         "'model':{'type':'dnn','dnn_feature_columns':"
                         "[{'shared_embedding':['a','b'],'dimension':2}]}}")),
              DT_ERR_INVALID, "the columns of a shared table are all dynamic");
}
