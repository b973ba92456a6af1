/* tf.train.Example: the decoder against records that Google's protobuf library wrote
 * (tests/fixtures/example_python.tfrecord, by scripts/make_example_fixture.py, with the values
 * protobuf itself reads back in example_python.expected), the encoder byte for byte against the
 * same library, encoder -> decoder round trips, the spec parser, the JSON listing, and malformed
 * records, each error naming the byte at fault. */
#include <float.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/example.h"
#include "dtrain/hash.h"
#include "dtrain/rng.h"
#include "dtrain/tfrecord.h"
#include "test.h"

#define FIXTURE "tests/fixtures/example_python.tfrecord"
#define FIXTURE_EXPECTED "tests/fixtures/example_python.expected"
#define N_FIXTURE 7

/* ---- the fixture ---- */

typedef struct {
    uint8_t *p[N_FIXTURE];
    size_t n[N_FIXTURE];
    int count;
} fixture;

static int load_fixture(fixture *fx)
{
    memset(fx, 0, sizeof *fx);
    dt_tfrecord_reader *r;
    dt_status st = dt_tfrecord_open(FIXTURE, DT_COMPRESSION_AUTO, 0, &r);
    CHECK_OK(st);
    if (st)
        return 0;
    const uint8_t *d;
    size_t n;
    while (fx->count < N_FIXTURE && (st = dt_tfrecord_next(r, &d, &n, NULL)) == DT_OK) {
        fx->p[fx->count] = malloc(n ? n : 1);
        memcpy(fx->p[fx->count], d, n);
        fx->n[fx->count++] = n;
    }
    CHECK(fx->count == N_FIXTURE);
    CHECK(dt_tfrecord_next(r, &d, &n, NULL) == DT_END);
    dt_tfrecord_close(r);
    return fx->count == N_FIXTURE;
}

static void free_fixture(fixture *fx)
{
    for (int i = 0; i < fx->count; i++)
        free(fx->p[i]);
}

/* One feature as protobuf read it. */
typedef struct {
    char key[80];
    int kind; /* 0: no list set, else DT_FEATURE_* */
    int n;
    uint32_t fbits[8];
    int64_t ints[8];
    uint8_t bytes[4][256];
    size_t blen[4];
} exp_feature;

typedef struct {
    int n;
    exp_feature f[12];
} exp_record;

static int hexval(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

static int load_expected(exp_record *recs)
{
    FILE *f = fopen(FIXTURE_EXPECTED, "r");
    CHECK_MSG(f != NULL, "cannot open %s", FIXTURE_EXPECTED);
    if (!f)
        return 0;
    char line[4096];
    int rec = -1;
    while (fgets(line, sizeof line, f)) {
        char *save, *tok = strtok_r(line, " \n", &save);
        if (!tok)
            continue;
        if (strcmp(tok, "record") == 0) {
            rec = atoi(strtok_r(NULL, " \n", &save));
            recs[rec].n = 0;
            continue;
        }
        exp_feature *e = &recs[rec].f[recs[rec].n++];
        snprintf(e->key, sizeof e->key, "%s", strtok_r(NULL, " \n", &save));
        const char *kind = strtok_r(NULL, " \n", &save);
        e->kind = strcmp(kind, "float") == 0   ? DT_FEATURE_FLOAT
                  : strcmp(kind, "int64") == 0 ? DT_FEATURE_INT64
                  : strcmp(kind, "bytes") == 0 ? DT_FEATURE_BYTES
                                               : 0;
        e->n = atoi(strtok_r(NULL, " \n", &save));
        for (int k = 0; k < e->n; k++) {
            tok = strtok_r(NULL, " \n", &save);
            if (e->kind == DT_FEATURE_FLOAT) {
                e->fbits[k] = (uint32_t)strtoul(tok, NULL, 16);
            } else if (e->kind == DT_FEATURE_INT64) {
                e->ints[k] = strtoll(tok, NULL, 10);
            } else {
                size_t len = strcmp(tok, "-") == 0 ? 0 : strlen(tok) / 2;
                for (size_t b = 0; b < len; b++)
                    e->bytes[k][b] = (uint8_t)(hexval(tok[2 * b]) << 4 | hexval(tok[2 * b + 1]));
                e->blen[k] = len;
            }
        }
    }
    fclose(f);
    return rec == N_FIXTURE - 1;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Every value protobuf read from every record, through a spec made for that record: float lists
 * as fixed-length dense features (compared bit for bit), int64 lists as variable-length ones
 * (ids compared exactly), single bytes values as fixed-length byte features. */
TEST(example_fixture_matches_protobuf_exactly)
{
    fixture fx;
    static exp_record recs[N_FIXTURE];
    if (!load_fixture(&fx) || !load_expected(recs)) {
        free_fixture(&fx);
        return;
    }
    for (int r = 0; r < N_FIXTURE; r++) {
        dt_example_spec spec;
        memset(&spec, 0, sizeof spec);
        const exp_feature *which[12];
        for (int i = 0; i < recs[r].n; i++) {
            const exp_feature *e = &recs[r].f[i];
            dt_feature_spec *f = &spec.features[spec.n_features];
            if (e->kind == DT_FEATURE_BYTES && (e->n != 1 || e->blen[0] == 0))
                continue; /* a row cannot hold those: the JSON test covers them */
            snprintf(f->key, sizeof f->key, "%s", e->key);
            f->length = e->kind == DT_FEATURE_FLOAT ? e->n
                        : e->kind == DT_FEATURE_BYTES ? (int)e->blen[0]
                                                      : 0;
            which[spec.n_features++] = e;
        }
        CHECK_OK(dt_example_spec_finalize(&spec));
        dt_rowbuf rb;
        dt_rowbuf_init(&rb, spec.n_dense);
        CHECK_OK(dt_example_parse(&spec, fx.p[r], fx.n[r], &rb));
        if (rb.n != 1) {
            dt_rowbuf_free(&rb);
            continue;
        }
        int bad = 0;
        size_t sp = 0;
        for (int i = 0; i < spec.n_features; i++) {
            const exp_feature *e = which[i];
            const float *slots = rb.dense + spec.dense_off[i];
            for (int k = 0; k < spec.features[i].length; k++) {
                uint32_t want = e->kind == DT_FEATURE_FLOAT ? e->fbits[k] : bits((float)e->bytes[0][k]);
                if (bits(slots[k]) != want) {
                    test_fail(__FILE__, __LINE__, "record %d '%s'[%d]: %08x, protobuf %08x", r,
                              e->key, k, bits(slots[k]), want);
                    bad++;
                }
            }
            if (spec.features[i].length > 0)
                continue;
            for (int k = 0; k < e->n; k++, sp++) {
                int64_t want_id = e->kind == DT_FEATURE_INT64 ? e->ints[k] : k;
                uint32_t want_v = e->kind == DT_FEATURE_INT64 ? bits(1.0f) : e->fbits[k];
                if (sp >= rb.nnz || rb.sp_ids[sp] != want_id || bits(rb.sp_vals[sp]) != want_v) {
                    test_fail(__FILE__, __LINE__, "record %d '%s' sparse %d differs", r, e->key, k);
                    bad++;
                }
            }
        }
        CHECK_MSG(sp == rb.nnz, "record %d: %zu sparse entries, expected %zu", r, rb.nnz, sp);
        CHECK(bad == 0);
        dt_rowbuf_free(&rb);
    }
    free_fixture(&fx);
}

typedef struct {
    float dense[12];
    float label;
    int nnz;
    int64_t ids[8];
    float vals[8];
} want_row;

/* The fixture through the spec a user would write for it. */
TEST(example_fixture_through_a_user_spec)
{
    fixture fx;
    if (!load_fixture(&fx)) {
        free_fixture(&fx);
        return;
    }
    dt_example_spec spec;
    CHECK_OK(dt_example_spec_parse("floats:3,ints:3,img:4:1/255,ids:0,w:0,opt:2:1:7", "label",
                                   &spec));
    CHECK(spec.n_dense == 12);
    /* "1/255" divides, once, as the tutorial's x / 255. */
    const want_row want[5] = {
        {{1.5f, -2.25f, 3e-5f, -1.0f, (float)(INT64_C(1) << 53 | 1), (float)(INT64_C(1) << 62),
          0.0f / 255.0f, 127.0f / 255.0f, 128.0f / 255.0f, 255.0f / 255.0f, 4.0f, 5.0f},
         1.0f, 7, {3, INT64_C(1) << 40, -5, 0, 0, 1, 2}, {1, 1, 1, 1, 0.5f, 0.0f, -1.0f}},
        {{-0.0f, 1e-45f, FLT_MAX, (float)INT64_MAX, (float)INT64_MIN, (float)INT64_C(12345678901),
          1.0f / 255.0f, 2.0f / 255.0f, 3.0f / 255.0f, 4.0f / 255.0f, 7.0f, 7.0f},
         0.75f, 1, {0}, {2.5f}},
        {{0.125f, 1e10f, -3.0f, 7.0f, 8.0f, 9.0f, 16.0f / 255.0f, 32.0f / 255.0f, 48.0f / 255.0f, 64.0f / 255.0f, 7.0f,
          7.0f},
         0.0f, 1, {0}, {6.5f}},
        {{1.0f, 2.0f, 3.0f, -2147483648.0f, 2147483648.0f, 1.0f, 255.0f / 255.0f, 254.0f / 255.0f, 0.0f,
          1.0f / 255.0f, -1.0f, 2.0f},
         3.0f, 3, {0, 1, 2}, {0.25f, -8.0f, 16.0f}},
        {{127.0f, 128.0f, 16777216.0f, 127.0f, 128.0f, (float)(INT64_MAX - 1023), 250.0f / 255.0f,
          251.0f / 255.0f, 252.0f / 255.0f, 253.0f / 255.0f, 7.0f, 7.0f},
         -1.5f, 0, {0}, {0}},
    };
    dt_rowbuf rb;
    dt_rowbuf_init(&rb, spec.n_dense);
    for (int r = 0; r < 5; r++) {
        CHECK_OK(dt_example_parse(&spec, fx.p[r], fx.n[r], &rb));
        CHECK(rb.n == r + 1);
        if (rb.n != r + 1)
            break;
        const float *d = rb.dense + (size_t)r * 12;
        for (int k = 0; k < 12; k++)
            CHECK_MSG(bits(d[k]) == bits(want[r].dense[k]), "record %d slot %d: %.9g, expected %.9g",
                      r, k, (double)d[k], (double)want[r].dense[k]);
        CHECK_MSG(bits(rb.labels[r]) == bits(want[r].label), "record %d label %g", r,
                  (double)rb.labels[r]);
        int64_t lo = rb.sp_row[r], hi = rb.sp_row[r + 1];
        CHECK_MSG(hi - lo == want[r].nnz, "record %d: %lld sparse entries", r, (long long)(hi - lo));
        for (int k = 0; k < want[r].nnz && lo + k < hi; k++)
            CHECK_MSG(rb.sp_ids[lo + k] == want[r].ids[k] &&
                      bits(rb.sp_vals[lo + k]) == bits(want[r].vals[k]),
                      "record %d sparse %d: (%lld, %g)", r, k, (long long)rb.sp_ids[lo + k],
                      (double)rb.sp_vals[lo + k]);
    }
    /* Record 5 has two values for "ints", record 6 no label: errors, and no row added. */
    size_t nnz = rb.nnz;
    CHECK_ERR(dt_example_parse(&spec, fx.p[5], fx.n[5], &rb), DT_ERR_FORMAT,
              "feature 'ints' has 2 values, expected 3");
    CHECK(strncmp(dt_last_error(), "byte ", 5) == 0);
    CHECK_ERR(dt_example_parse(&spec, fx.p[6], fx.n[6], &rb), DT_ERR_FORMAT,
              "feature 'label' missing");
    CHECK(rb.n == 5 && rb.nnz == nnz);
    dt_rowbuf_free(&rb);
    free_fixture(&fx);
}

/* Record 0 is what protobuf writes for a map with sorted keys; dtrain's encoder given the same
 * features in that order writes the same bytes. */
TEST(example_encoder_matches_protobuf_bytes)
{
    fixture fx;
    if (!load_fixture(&fx)) {
        free_fixture(&fx);
        return;
    }
    const float floats[] = {1.5f, -2.25f, 3e-5f}, w[] = {0.5f, 0.0f, -1.0f}, opt[] = {4.0f, 5.0f};
    const int64_t ints[] = {-1, (INT64_C(1) << 53) + 1, INT64_C(1) << 62};
    const int64_t ids[] = {3, INT64_C(1) << 40, -5, 0}, label[] = {1};
    const uint8_t img[] = {0x00, 0x7f, 0x80, 0xff};
    const dt_feature_value f[] = {
        {"floats", DT_FEATURE_FLOAT, 3, floats, NULL, NULL},
        {"ids", DT_FEATURE_INT64, 4, NULL, ids, NULL},
        {"img", DT_FEATURE_BYTES, 4, NULL, NULL, img},
        {"ints", DT_FEATURE_INT64, 3, NULL, ints, NULL},
        {"label", DT_FEATURE_INT64, 1, NULL, label, NULL},
        {"opt", DT_FEATURE_FLOAT, 2, opt, NULL, NULL},
        {"other", DT_FEATURE_BYTES, 5, NULL, NULL, (const uint8_t *)"hello"},
        {"w", DT_FEATURE_FLOAT, 3, w, NULL, NULL},
    };
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    CHECK_OK(dt_example_encode(f, 8, &buf, &n, &cap));
    CHECK_MSG(n == fx.n[0], "%zu bytes, protobuf wrote %zu", n, fx.n[0]);
    CHECK(n == fx.n[0] && memcmp(buf, fx.p[0], n) == 0);
    CHECK(cap >= n);
    /* Reusing the buffer: no growth for a smaller example, and empty lists encode as TF's. */
    uint8_t *before = buf;
    const dt_feature_value empty[] = {{"e", DT_FEATURE_FLOAT, 0, NULL, NULL, NULL},
                                      {"i", DT_FEATURE_INT64, 0, NULL, NULL, NULL}};
    CHECK_OK(dt_example_encode(empty, 2, &buf, &n, &cap));
    const uint8_t want[] = {0x0a, 0x12, 0x0a, 0x07, 0x0a, 0x01, 'e', 0x12, 0x02, 0x12, 0x00,
                            0x0a, 0x07, 0x0a, 0x01, 'i', 0x12, 0x02, 0x1a, 0x00};
    CHECK(buf == before && n == sizeof want && memcmp(buf, want, n) == 0);
    CHECK_OK(dt_example_encode(NULL, 0, &buf, &n, &cap));
    CHECK(n == 2 && buf[0] == 0x0a && buf[1] == 0);
    const dt_feature_value bad[] = {{NULL, DT_FEATURE_FLOAT, 0, NULL, NULL, NULL}};
    CHECK_ERR(dt_example_encode(bad, 1, &buf, &n, &cap), DT_ERR_INVALID, "feature 0 has no key");
    const dt_feature_value bad2[] = {{"k", 7, 0, NULL, NULL, NULL}};
    CHECK_ERR(dt_example_encode(bad2, 1, &buf, &n, &cap), DT_ERR_INVALID, "'k' has unknown type 7");
    const dt_feature_value bad3[] = {{"k", DT_FEATURE_INT64, 3, NULL, NULL, NULL}};
    CHECK_ERR(dt_example_encode(bad3, 1, &buf, &n, &cap), DT_ERR_INVALID, "'k' has 3 values at NULL");
    free(buf);
    free_fixture(&fx);
}

TEST(example_json_lists_every_feature)
{
    fixture fx;
    if (!load_fixture(&fx)) {
        free_fixture(&fx);
        return;
    }
    char *text;
    CHECK_OK(dt_example_to_json(fx.p[0], fx.n[0], &text));
    const char *want0 = "{\"floats\": [1.5, -2.25, 2.99999992e-05], \"ids\": [3, 1099511627776, "
                        "-5, 0], \"img\": [\"AH+A/w==\"], \"ints\": [-1, 9007199254740993, "
                        "4611686018427387904], \"label\": [1], \"opt\": [4.0, 5.0], \"other\": "
                        "[\"aGVsbG8=\"], \"w\": [0.5, 0.0, -1.0]}";
    CHECK_MSG(text && strcmp(text, want0) == 0, "got %s", text);
    free(text);
    /* Record 2: unknown fields skipped, the key given twice listed twice (the last one is what
     * parsing uses), the value-before-key entry under its key. */
    CHECK_OK(dt_example_to_json(fx.p[2], fx.n[2], &text));
    const char *want2 = "{\"floats\": [9.0, 9.0, 9.0], \"ints\": [7, 8, 9], \"img\": [\"ECAwQA==\"], "
                        "\"label\": [0], \"floats\": [0.125, 1e+10, -3.0], \"w\": [6.5]}";
    CHECK_MSG(text && strcmp(text, want2) == 0, "got %s", text);
    free(text);
    /* Record 4: an unset list, an empty list, several bytes values. */
    CHECK_OK(dt_example_to_json(fx.p[4], fx.n[4], &text));
    CHECK_MSG(text && strstr(text, "{\"ids\": [], \"w\": [], \"floats\": [127.0, 128.0, 16777216.0], "
                             "\"ints\": [127, 128, 9223372036854774784]") == text, "got %s", text);
    CHECK(text && strstr(text, "\"multi\": [\"aGVsbG8=\", \"\", \"w6k=\"]}"));
    free(text);
    for (int r = 0; r < N_FIXTURE; r++) {
        CHECK_OK(dt_example_to_json(fx.p[r], fx.n[r], &text));
        free(text);
    }
    /* Keys are escaped, and bytes that are not UTF-8 become U+FFFD; odd floats are strings. */
    const float odd[] = {NAN, INFINITY, -INFINITY, -0.0f, 1e-45f};
    const int64_t extreme[] = {INT64_MIN, INT64_MAX};
    const dt_feature_value f[] = {
        {"a\"b\\c\n\x01", DT_FEATURE_FLOAT, 5, odd, NULL, NULL},
        {"caf\xc3\xa9 \xff\xc3", DT_FEATURE_INT64, 2, NULL, extreme, NULL},
        {"", DT_FEATURE_BYTES, 0, NULL, NULL, NULL},
    };
    uint8_t *buf = NULL;
    size_t n, cap = 0;
    CHECK_OK(dt_example_encode(f, 3, &buf, &n, &cap));
    CHECK_OK(dt_example_to_json(buf, n, &text));
    const char *want = "{\"a\\\"b\\\\c\\u000a\\u0001\": [\"nan\", \"inf\", \"-inf\", -0.0, 1.40129846e-45], "
                       "\"caf\xc3\xa9 \\ufffd\\ufffd\": [-9223372036854775808, 9223372036854775807], "
                       "\"\": [\"\"]}";
    CHECK_MSG(text && strcmp(text, want) == 0, "got %s", text);
    free(text);
    CHECK_OK(dt_example_to_json(NULL, 0, &text));
    CHECK(text && strcmp(text, "{}") == 0);
    free(text);
    CHECK_ERR(dt_example_to_json((const uint8_t *)"\x0b", 1, &text), DT_ERR_FORMAT,
              "byte 0: field 1 of the Example is a group");
    CHECK(text == NULL);
    free(buf);
    free_fixture(&fx);
}

/* ---- encoder -> decoder ---- */

TEST(example_round_trips_random_examples)
{
    dt_rng rng;
    dt_rng_seed(&rng, 42);
    uint8_t *buf = NULL;
    size_t n, cap = 0;
    for (int iter = 0; iter < 200; iter++) {
        /* "d": fixed floats, "b": fixed bytes, "i": int64 ids, "v": variable floats, "y": label;
         * every length random, in a random order, with an unwanted feature among them. */
        int nd = 1 + (int)(dt_rng_next(&rng) % 50), nb = 1 + (int)(dt_rng_next(&rng) % 300);
        int ni = (int)(dt_rng_next(&rng) % 20), nv = (int)(dt_rng_next(&rng) % 20);
        float d[50], v[20], y = (float)(dt_rng_next(&rng) % 10);
        uint8_t b[300];
        int64_t ids[20];
        for (int k = 0; k < nd; k++)
            d[k] = (float)((double)(int64_t)dt_rng_next(&rng) / 1e15);
        for (int k = 0; k < nb; k++)
            b[k] = (uint8_t)dt_rng_next(&rng);
        for (int k = 0; k < ni; k++)
            ids[k] = (int64_t)dt_rng_next(&rng) >> (dt_rng_next(&rng) % 64);
        for (int k = 0; k < nv; k++)
            v[k] = (float)k - 3.5f;
        dt_feature_value f[6] = {
            {"dense", DT_FEATURE_FLOAT, (size_t)nd, d, NULL, NULL},
            {"bytes", DT_FEATURE_BYTES, (size_t)nb, NULL, NULL, b},
            {"ids", DT_FEATURE_INT64, (size_t)ni, NULL, ids, NULL},
            {"vals", DT_FEATURE_FLOAT, (size_t)nv, v, NULL, NULL},
            {"y", DT_FEATURE_FLOAT, 1, &y, NULL, NULL},
            {"unwanted", DT_FEATURE_INT64, (size_t)ni, NULL, ids, NULL},
        };
        for (int k = 5; k > 0; k--) { /* shuffle: the order in the record must not matter */
            int j = (int)(dt_rng_next(&rng) % (uint64_t)(k + 1));
            dt_feature_value t = f[k];
            f[k] = f[j];
            f[j] = t;
        }
        CHECK_OK(dt_example_encode(f, 6, &buf, &n, &cap));
        dt_example_spec spec;
        char list[128];
        snprintf(list, sizeof list, "ids:0,dense:%d:2,vals:0:0.5,bytes:%d", nd, nb);
        CHECK_OK(dt_example_spec_parse(list, "y", &spec));
        dt_rowbuf rb;
        dt_rowbuf_init(&rb, spec.n_dense);
        CHECK_OK(dt_example_parse(&spec, buf, n, &rb));
        int bad = rb.n != 1 || rb.labels[0] != y || rb.nnz != (size_t)(ni + nv);
        for (int k = 0; !bad && k < nd; k++)
            bad |= rb.dense[k] != d[k] * 2.0f;
        for (int k = 0; !bad && k < nb; k++)
            bad |= rb.dense[nd + k] != (float)b[k];
        for (int k = 0; !bad && k < ni; k++) /* ids first: the spec's order */
            bad |= rb.sp_ids[k] != ids[k] || rb.sp_vals[k] != 1.0f;
        for (int k = 0; !bad && k < nv; k++)
            bad |= rb.sp_ids[ni + k] != k || rb.sp_vals[ni + k] != v[k] * 0.5f;
        CHECK_MSG(!bad, "iteration %d differs", iter);
        dt_rowbuf_free(&rb);
        if (bad)
            break;
    }
    free(buf);
}

/* ---- the spec ---- */

TEST(example_spec_parse_and_errors)
{
    dt_example_spec s;
    CHECK_OK(dt_example_spec_parse("image:784:1/255,label_ids:0,price:1", "label", &s));
    CHECK(s.n_features == 3 && s.n_dense == 785);
    CHECK(strcmp(s.features[0].key, "image") == 0 && s.features[0].length == 784);
    CHECK(s.features[0].scale == 1.0f && s.features[0].divisor == 255.0f && !s.features[0].has_default);
    CHECK(s.features[1].length == 0 && s.features[1].scale == 1.0f);
    CHECK(s.features[2].length == 1 && strcmp(s.label_key, "label") == 0);
    CHECK_OK(dt_example_spec_parse(" a:2:0.5:-1 , b:0 ", NULL, &s));
    CHECK(s.n_features == 2 && s.features[0].scale == 0.5f && s.features[0].has_default &&
          s.features[0].default_value == -1.0f && s.label_key[0] == 0);
    CHECK_OK(dt_example_spec_parse("", "y", &s));
    CHECK(s.n_features == 0 && s.n_dense == 0);
    CHECK_ERR(dt_example_spec_parse("image:x", "", &s), DT_ERR_INVALID,
              "features item 'image:x': length 'x' is not an integer");
    CHECK_ERR(dt_example_spec_parse("a:-1", "", &s), DT_ERR_INVALID, "item 'a:-1': length '-1'");
    CHECK_ERR(dt_example_spec_parse("a", "", &s), DT_ERR_INVALID,
              "features item 'a': expected key:length[:scale[:default]]");
    CHECK_ERR(dt_example_spec_parse("a:1:2:3:4", "", &s), DT_ERR_INVALID,
              "features item 'a:1:2:3:4': expected key:length");
    CHECK_ERR(dt_example_spec_parse(":3", "", &s), DT_ERR_INVALID, "item ':3': the key must have");
    CHECK_ERR(dt_example_spec_parse("a:1:0", "", &s), DT_ERR_INVALID, "item 'a:1:0': scale '0'");
    CHECK_ERR(dt_example_spec_parse("a:1:1/0", "", &s), DT_ERR_INVALID, "scale '1/0'");
    CHECK_ERR(dt_example_spec_parse("a:1:x/2", "", &s), DT_ERR_INVALID, "scale 'x/2'");
    CHECK_ERR(dt_example_spec_parse("a:1:1:q", "", &s), DT_ERR_INVALID, "default 'q' is not a finite float");
    CHECK_ERR(dt_example_spec_parse("a:1:1:1e39", "", &s), DT_ERR_INVALID, "default '1e39'");
    CHECK_ERR(dt_example_spec_parse("a:1:1e39", "", &s), DT_ERR_INVALID, "scale '1e39'");
    CHECK_ERR(dt_example_spec_parse("a:1:1e-50", "", &s), DT_ERR_INVALID, "scale '1e-50'");
    CHECK_ERR(dt_example_spec_parse("a:0:1:5", "", &s), DT_ERR_INVALID,
              "item 'a:0:1:5': a default needs a fixed length");
    CHECK_ERR(dt_example_spec_parse("a:1,,b:1", "", &s), DT_ERR_INVALID, "features item 2 is empty");
    CHECK_ERR(dt_example_spec_parse("a:1,", "", &s), DT_ERR_INVALID, "empty item after item 1 'a:1'");
    CHECK_ERR(dt_example_spec_parse("a:1,b:2,a:3", "", &s), DT_ERR_INVALID, "feature 'a' is listed twice");
    CHECK_ERR(dt_example_spec_parse("a:1,y:1", "y", &s), DT_ERR_INVALID,
              "'y' is both the label and a feature");
    CHECK_ERR(dt_example_spec_parse("a:67108864,b:1", "", &s), DT_ERR_INVALID,
              "more than 67108864 dense values (at feature 'b')");
    char many[1024] = "";
    for (int i = 0; i < 65; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%sf%d:1", i ? "," : "", i);
    CHECK_ERR(dt_example_spec_parse(many, "", &s), DT_ERR_INVALID, "item 65 'f64:1': more than 64");
    char longkey[100];
    memset(longkey, 'k', 64);
    strcpy(longkey + 64, ":1");
    CHECK_ERR(dt_example_spec_parse(longkey, "", &s), DT_ERR_INVALID, "the key must have 1 to 63 bytes");
    /* Built by hand: a zero scale means 1; an empty key is named by its index. */
    dt_example_spec h;
    memset(&h, 0, sizeof h);
    h.n_features = 1;
    strcpy(h.features[0].key, "x");
    h.features[0].length = 2;
    CHECK_OK(dt_example_spec_finalize(&h));
    CHECK(h.features[0].scale == 1.0f && h.n_dense == 2);
    h.n_features = 2;
    CHECK_ERR(dt_example_spec_finalize(&h), DT_ERR_INVALID, "feature 1 has an empty key");
}

/* ---- malformed records ---- */

typedef struct {
    uint8_t p[4096];
    size_t n;
} msg;

static void add(msg *m, const void *data, size_t n)
{
    memcpy(m->p + m->n, data, n);
    m->n += n;
}

static void add_byte(msg *m, uint8_t b) { add(m, &b, 1); }

static void add_varint(msg *m, uint64_t v)
{
    while (v >= 0x80) {
        add_byte(m, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    add_byte(m, (uint8_t)v);
}

/* Appends field `field` as a length-delimited field holding inner. */
static void add_len(msg *m, int field, const msg *inner)
{
    add_varint(m, (uint64_t)field << 3 | 2);
    add_varint(m, inner->n);
    add(m, inner->p, inner->n);
}

/* An Example with one map entry: key and a Feature whose payload is given raw. Returns the offset
 * of the entry's payload (where errors about the feature point). */
static size_t one_feature(msg *out, const char *key, const uint8_t *feature, size_t n)
{
    msg entry = {.n = 0}, features = {.n = 0}, f = {.n = 0};
    add(&f, feature, n);
    add_byte(&entry, 0x0a);
    add_varint(&entry, strlen(key));
    add(&entry, key, strlen(key));
    add_len(&entry, 2, &f);
    add_len(&features, 1, &entry);
    out->n = 0;
    add_len(out, 1, &features);
    return out->n - entry.n;
}

static dt_example_spec spec_of(const char *list, const char *label)
{
    dt_example_spec s;
    dt_status st = dt_example_spec_parse(list, label, &s);
    CHECK_OK(st);
    return s;
}

TEST(example_malformed_wire_format)
{
    dt_example_spec none = spec_of("", "");
    dt_rowbuf rb;
    dt_rowbuf_init(&rb, 0);
    struct {
        const char *bytes;
        size_t n;
        const char *message;
    } cases[] = {
        {"\x0a\xff\xff\xff\xff\x0f", 6, "byte 1: length 4294967295 runs past the end of the record (6 bytes)"},
        {"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 10, "byte 1: length 9223372036854775807 runs past the end of the record"},
        {"\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12, "byte 1: varint longer than 10 bytes or beyond 64 bits"},
        {"\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 11, "byte 1: varint longer than 10 bytes or beyond 64 bits"},
        {"\x10\xff", 2, "byte 1: varint runs past the end of the Example"},
        {"\x80", 1, "byte 0: varint runs past the end of the Example"},
        {"\xff\xff\xff\xff\x7f", 5, "byte 0: field tag 34359738367 out of range in the Example"},
        {"\x0b", 1, "byte 0: field 1 of the Example is a group (wire type 3): groups are not supported"},
        {"\x14", 1, "byte 0: field 2 of the Example is a group (wire type 4)"},
        {"\x0f", 1, "byte 0: field 1 of the Example has invalid wire type 7"},
        {"\x02\x00", 2, "byte 0: field number 0 in the Example"},
        {"\x08\x01", 2, "byte 0: Example.features has wire type 0, expected 2"},
        {"\x15\x01\x02", 3, "byte 1: a 4-byte value runs past the end of the Example"},
        {"\x11\x01\x02\x03\x04\x05\x06\x07", 8, "byte 1: a 8-byte value runs past the end of the Example"},
        /* Features of 4 bytes whose entry claims 16, inside a longer record. */
        {"\x0a\x04\x0a\x10\x0a\x00\x12\x14" "01234567890123456789", 28,
         "byte 3: length 16 runs past the end of the Features (at byte 6)"},
        {"\x0a\x02\x08\x01", 4, "byte 2: a Features map entry has wire type 0, expected 2"},
        {"\x0a\x04\x0a\x02\x08\x01", 6, "byte 4: a map entry's key has wire type 0, expected 2"},
        {"\x0a\x04\x0a\x02\x13\x01", 6, "byte 4: field 2 of the map entry is a group"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dt_status st = dt_example_parse(&none, (const uint8_t *)cases[i].bytes, cases[i].n, &rb);
        CHECK_MSG(st == DT_ERR_FORMAT && strstr(dt_last_error(), cases[i].message),
                  "case %zu: status %d, message '%s', expected '%s'", i, st, dt_last_error(),
                  cases[i].message);
        char *text = NULL;
        st = dt_example_to_json((const uint8_t *)cases[i].bytes, cases[i].n, &text);
        CHECK_MSG(st == DT_ERR_FORMAT && strstr(dt_last_error(), cases[i].message) && !text,
                  "json case %zu: '%s'", i, dt_last_error());
    }
    /* A 10-byte varint ending in 0x01 is the largest valid one; empty records are fine. */
    CHECK_OK(dt_example_parse(&none, (const uint8_t *)"\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11, &rb));
    CHECK_OK(dt_example_parse(&none, NULL, 0, &rb));
    CHECK(rb.n == 2);
    dt_rowbuf_free(&rb);
}

TEST(example_malformed_features)
{
    dt_example_spec spec = spec_of("f:2", "");
    dt_rowbuf rb;
    dt_rowbuf_init(&rb, 2);
    msg m;
    struct {
        const char *feature;
        size_t n;
        const char *what;
    } cases[] = {
        {"\x12\x05\x0a\x03\x01\x02\x03", 7, "packed float_list of 3 bytes, not a multiple of 4"},
        {"\x12\x02\x08\x01", 4, "a float_list value has wire type 0, expected 5"},
        {"\x12\x03\x0d\x00\x00", 5, "a 4-byte float runs past the end of the float_list"},
        {"\x1a\x05\x0d\x00\x00\x00\x00", 7, "an int64_list value has wire type 5, expected 0"},
        {"\x1a\x03\x0a\x01\x80", 5, "varint runs past the end of the packed int64_list"},
        {"\x1a\x02\x08\x80", 4, "varint runs past the end of the int64_list"},
        {"\x0a\x02\x08\x01", 4, "a bytes_list value has wire type 0, expected 2"},
        {"\x10\x01", 2, "the Feature's float_list has wire type 0, expected 2"},
        {"\x12\x09\x0a\x08\x00\x00\x80\x3f", 8, "length 9 runs past the end of the record"},
        /* The float_list's value claims 8 bytes: within the record (the Feature goes on with an
         * unknown field) but past the float_list's end. */
        {"\x12\x03\x0a\x08\x00\x2a\x08" "12345678", 15,
         "byte 12: length 8 runs past the end of the float_list (at byte 14)"},
        {"\x12\x0a\x0a\x08\x00\x00\x80\x3f\x00\x00\x00\x40\x0b", 13, "field 1 of the Feature is a group"},
        {"\x1b", 1, "field 3 of the Feature is a group"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        one_feature(&m, "f", (const uint8_t *)cases[i].feature, cases[i].n);
        dt_status st = dt_example_parse(&spec, m.p, m.n, &rb);
        CHECK_MSG(st == DT_ERR_FORMAT && strstr(dt_last_error(), cases[i].what) &&
                  strncmp(dt_last_error(), "byte ", 5) == 0,
                  "case %zu: status %d, '%s', expected '%s'", i, st, dt_last_error(), cases[i].what);
    }
    CHECK(rb.n == 0);
    /* A malformed value under a key the spec does not want is never looked at. */
    one_feature(&m, "other", (const uint8_t *)"\x12\x02\x08\x01", 4);
    dt_example_spec spec0 = spec_of("", "");
    dt_rowbuf rb0;
    dt_rowbuf_init(&rb0, 0);
    CHECK_OK(dt_example_parse(&spec0, m.p, m.n, &rb0));
    dt_rowbuf_free(&rb0);
    dt_rowbuf_free(&rb);
}

/* The errors about a record's content against the spec, with the byte of the entry at fault. */
TEST(example_spec_mismatches_name_the_feature_and_byte)
{
    uint8_t *buf = NULL;
    size_t n, cap = 0;
    float image[784] = {0};
    dt_feature_value f = {"image", DT_FEATURE_FLOAT, 783, image, NULL, NULL};
    CHECK_OK(dt_example_encode(&f, 1, &buf, &n, &cap));
    dt_example_spec spec = spec_of("image:784", "");
    dt_rowbuf rb;
    dt_rowbuf_init(&rb, 784);
    /* Example tag + 2-byte length, entry tag + 2-byte length: the entry's payload is at byte 6. */
    CHECK_ERR(dt_example_parse(&spec, buf, n, &rb), DT_ERR_FORMAT,
              "byte 6: feature 'image' has 783 values, expected 784");
    uint8_t px[785] = {0};
    f = (dt_feature_value){"image", DT_FEATURE_BYTES, 783, NULL, NULL, px};
    CHECK_OK(dt_example_encode(&f, 1, &buf, &n, &cap));
    CHECK_ERR(dt_example_parse(&spec, buf, n, &rb), DT_ERR_FORMAT,
              "byte 6: feature 'image' has a bytes value of 783 bytes, expected 784");
    /* Two bytes values: a bytes_list of 784 + 1 bytes, written by hand. */
    msg m, list = {.n = 0};
    add_byte(&list, 0x0a), add_varint(&list, 784), add(&list, px, 784);
    add_byte(&list, 0x0a), add_varint(&list, 1), add(&list, px, 1);
    msg feat = {.n = 0};
    add_len(&feat, 1, &list);
    size_t at = one_feature(&m, "image", feat.p, feat.n);
    char want[128];
    snprintf(want, sizeof want, "byte %zu: feature 'image' has 2 bytes values, expected one of 784 bytes", at);
    CHECK_ERR(dt_example_parse(&spec, m.p, m.n, &rb), DT_ERR_FORMAT, want);
    CHECK(rb.n == 0);
    dt_rowbuf_free(&rb);

    /* Sparse: a bytes_list is refused, and entries of an earlier feature are taken back. */
    const int64_t ids[] = {5, 6, 7};
    dt_feature_value two[] = {{"a", DT_FEATURE_INT64, 3, NULL, ids, NULL},
                              {"b", DT_FEATURE_BYTES, 3, NULL, NULL, px}};
    CHECK_OK(dt_example_encode(two, 2, &buf, &n, &cap));
    spec = spec_of("a:0", "");
    dt_rowbuf_init(&rb, 0);
    CHECK_OK(dt_example_parse(&spec, buf, n, &rb)); /* fine without b */
    CHECK(rb.n == 1 && rb.nnz == 3);
    spec = spec_of("a:0,b:0", "");
    dt_rowbuf_free(&rb);
    dt_rowbuf_init(&rb, 0);
    CHECK_ERR(dt_example_parse(&spec, buf, n, &rb), DT_ERR_FORMAT,
              "feature 'b' is a bytes_list: a variable-length feature needs an int64_list or a float_list");
    CHECK(rb.n == 0 && rb.nnz == 0);
    dt_rowbuf_free(&rb);

    /* Labels: missing, two values, bytes. Missing fixed features: default or error. */
    const float two_f[] = {1, 2};
    dt_feature_value lab[] = {{"y", DT_FEATURE_FLOAT, 2, two_f, NULL, NULL}};
    CHECK_OK(dt_example_encode(lab, 1, &buf, &n, &cap));
    spec = spec_of("", "y");
    dt_rowbuf_init(&rb, 0);
    CHECK_ERR(dt_example_parse(&spec, buf, n, &rb), DT_ERR_FORMAT, "byte 4: label 'y' has 2 values, expected 1");
    lab[0] = (dt_feature_value){"y", DT_FEATURE_BYTES, 1, NULL, NULL, px};
    CHECK_OK(dt_example_encode(lab, 1, &buf, &n, &cap));
    CHECK_ERR(dt_example_parse(&spec, buf, n, &rb), DT_ERR_FORMAT, "label 'y' is a bytes_list");
    spec = spec_of("", "z");
    CHECK_ERR(dt_example_parse(&spec, buf, n, &rb), DT_ERR_FORMAT, "feature 'z' missing");
    spec = spec_of("m:3", "");
    dt_rowbuf_free(&rb);
    dt_rowbuf_init(&rb, 3);
    CHECK_ERR(dt_example_parse(&spec, buf, n, &rb), DT_ERR_FORMAT, "feature 'm' missing");
    CHECK(strcmp(dt_last_error(), "feature 'm' missing") == 0);
    spec = spec_of("m:3:2:-4", "");
    CHECK_OK(dt_example_parse(&spec, buf, n, &rb));
    CHECK(rb.n == 1 && rb.dense[0] == -4.0f && rb.dense[2] == -4.0f); /* a default is not scaled */
    dt_rowbuf_free(&rb);

    /* The caller's mistakes: an unfinalized spec, a row buffer of the wrong width. */
    dt_example_spec raw;
    memset(&raw, 0, sizeof raw);
    dt_rowbuf_init(&rb, 0);
    CHECK_ERR(dt_example_parse(&raw, buf, n, &rb), DT_ERR_INVALID, "dt_example_spec_finalize");
    CHECK_ERR(dt_example_parse(&spec, buf, n, &rb), DT_ERR_INVALID,
              "rows of 0 dense values cannot hold examples of 3");
    dt_rowbuf_free(&rb);
    free(buf);
}

/* Every prefix and every single-byte change of every fixture record parses or fails cleanly,
 * and a failure leaves the row buffer as it was. (The fuzz target goes much further.) */
TEST(example_every_prefix_and_byte_flip_is_safe)
{
    fixture fx;
    if (!load_fixture(&fx)) {
        free_fixture(&fx);
        return;
    }
    dt_example_spec spec = spec_of("floats:3,ints:3,img:4:1/255,ids:0,w:0,opt:2:1:7", "label");
    dt_rowbuf rb;
    dt_rowbuf_init(&rb, spec.n_dense);
    long ok = 0, failed = 0, broken = 0;
    for (int r = 0; r < N_FIXTURE; r++) {
        uint8_t *p = fx.p[r];
        for (size_t cut = 0; cut <= fx.n[r]; cut++) {
            int before = rb.n;
            size_t nnz = rb.nnz;
            dt_status st = dt_example_parse(&spec, p, cut, &rb);
            st ? failed++ : ok++;
            broken += st ? (rb.n != before || rb.nnz != nnz) : rb.n != before + 1;
            char *text;
            if (dt_example_to_json(p, cut, &text) == DT_OK)
                free(text);
            if (rb.n > 1000)
                dt_rowbuf_clear(&rb);
        }
        for (size_t i = 0; i < fx.n[r]; i++) {
            uint8_t keep = p[i];
            for (int x = 1; x < 256; x += 7) {
                p[i] = keep ^ (uint8_t)x;
                int before = rb.n;
                size_t nnz = rb.nnz;
                dt_status st = dt_example_parse(&spec, p, fx.n[r], &rb);
                st ? failed++ : ok++;
                broken += st ? (rb.n != before || rb.nnz != nnz) : rb.n != before + 1;
                if (rb.n > 1000)
                    dt_rowbuf_clear(&rb);
            }
            p[i] = keep;
        }
    }
    CHECK(broken == 0);
    CHECK(ok > 0 && failed > 0);
    dt_rowbuf_free(&rb);
    free_fixture(&fx);
}

/* ---- the fast path against the general decoder ---- */

/* Parses with the fast path allowed (spec) and with the general decoder only (slow), and says
 * whether both gave the same status and, on success, the same row bit for bit. */
static int same_both_ways(const dt_example_spec *spec, const dt_example_spec *slow,
                          const uint8_t *p, size_t n, dt_rowbuf *a, dt_rowbuf *b, int *ok)
{
    dt_rowbuf_clear(a);
    dt_rowbuf_clear(b);
    dt_status sa = dt_example_parse(spec, p, n, a), sb = dt_example_parse(slow, p, n, b);
    *ok = sa == DT_OK;
    if (sa != sb || a->n != b->n)
        return 0;
    if (sa)
        return a->n == 0 && strcmp(dt_last_error(), "") != 0;
    return memcmp(a->dense, b->dense, (size_t)spec->n_dense * sizeof(float)) == 0 &&
           memcmp(a->labels, b->labels, sizeof(float)) == 0;
}

TEST(example_fast_path_matches_general_decoder)
{
    dt_rng rng;
    dt_rng_seed(&rng, 7);
    uint8_t *buf = NULL;
    size_t n, cap = 0;
    long fast_taken = 0, records = 0, mutants = 0, mismatches = 0, mutants_ok = 0;
    dt_rowbuf a, b, c;
    for (int iter = 0; iter < 150 && mismatches == 0; iter++) {
        /* Fixed-length floats, bytes and int64s (some negative or past 56 bits: varints of 9 or
         * 10 bytes), a label of either kind, an unwanted feature, a feature with a default that
         * some records lack; in a random order. */
        int nd = 1 + (int)(dt_rng_next(&rng) % 20), nb = 1 + (int)(dt_rng_next(&rng) % 200);
        int ni = 1 + (int)(dt_rng_next(&rng) % 10);
        float d[20], yf = (float)(dt_rng_next(&rng) % 10), opt[2] = {1.5f, -2.0f};
        int64_t ids[10], yi = (int64_t)(dt_rng_next(&rng) % 300);
        uint8_t bytes[200];
        for (int k = 0; k < nd; k++)
            d[k] = (float)((double)(int64_t)dt_rng_next(&rng) / 1e15);
        for (int k = 0; k < nb; k++)
            bytes[k] = (uint8_t)dt_rng_next(&rng);
        int wide = iter % 5 == 4;
        for (int k = 0; k < ni; k++)
            ids[k] = wide ? (int64_t)dt_rng_next(&rng)
                          : (int64_t)(dt_rng_next(&rng) >> (8 + dt_rng_next(&rng) % 56));
        dt_feature_value f[6] = {
            {"dense", DT_FEATURE_FLOAT, (size_t)nd, d, NULL, NULL},
            {"img", DT_FEATURE_BYTES, (size_t)nb, NULL, NULL, bytes},
            {"ids", DT_FEATURE_INT64, (size_t)ni, NULL, ids, NULL},
            iter % 2 ? (dt_feature_value){"y", DT_FEATURE_FLOAT, 1, &yf, NULL, NULL}
                     : (dt_feature_value){"y", DT_FEATURE_INT64, 1, NULL, &yi, NULL},
            {"unwanted", DT_FEATURE_INT64, (size_t)ni, NULL, ids, NULL},
            {"opt", DT_FEATURE_FLOAT, 2, opt, NULL, NULL},
        };
        for (int k = 5; k > 0; k--) {
            int j = (int)(dt_rng_next(&rng) % (uint64_t)(k + 1));
            dt_feature_value t = f[k];
            f[k] = f[j];
            f[j] = t;
        }
        int n_f = 6;
        if (iter % 3 == 0) { /* every third record lacks "opt", which has a default */
            for (int k = 0; k < 5; k++)
                if (strcmp(f[k].key, "opt") == 0) {
                    dt_feature_value t = f[k];
                    f[k] = f[5];
                    f[5] = t;
                }
            n_f = 5;
        }
        CHECK_OK(dt_example_encode(f, n_f, &buf, &n, &cap));
        char list[128];
        snprintf(list, sizeof list, "dense:%d:2,img:%d:1/255,ids:%d:3/7,opt:2:1:7", nd, nb, ni);
        dt_example_spec spec, slow;
        CHECK_OK(dt_example_spec_parse(list, "y", &spec));
        CHECK(spec.fast);
        slow = spec;
        slow.fast = 0;
        dt_rowbuf_init(&a, spec.n_dense);
        dt_rowbuf_init(&b, spec.n_dense);
        dt_rowbuf_init(&c, spec.n_dense);
        /* The record as written: the fast path takes it unless it holds a long varint. */
        int ok;
        records++;
        mismatches += !same_both_ways(&spec, &slow, buf, n, &a, &b, &ok);
        CHECK(ok);
        dt_status fst = dt_example_parse_fast(&spec, buf, n, &c);
        CHECK(fst == DT_OK || fst == DT_END);
        CHECK(fst == DT_END ? c.n == 0 : c.n == 1);
        fast_taken += fst == DT_OK;
        if (!wide)
            CHECK_MSG(fst == DT_OK, "record %d: the fast path declined a record of TF's shape",
                      iter);
        /* A key given twice (the label, a feature with the same or another count of values):
         * protobuf's last-wins, which the fast path must leave to the general decoder. */
        float yf2 = yf + 1.0f, d2[21];
        int64_t yi2 = yi + 1, ids2[11];
        for (int k = 0; k < 21; k++)
            d2[k] = -(float)k;
        for (int k = 0; k < 11; k++)
            ids2[k] = k;
        dt_feature_value dup[4] = {
            {"y", DT_FEATURE_FLOAT, 1, &yf2, NULL, NULL},
            {"y", DT_FEATURE_INT64, 1, NULL, &yi2, NULL},
            {"dense", DT_FEATURE_FLOAT, (size_t)nd + (size_t)(iter % 2), d2, NULL, NULL},
            {"ids", DT_FEATURE_INT64, (size_t)ni + (size_t)(iter % 2), NULL, ids2, NULL},
        };
        for (int v = 0; v < 4; v++) {
            dt_feature_value g[7];
            int at = (int)(dt_rng_next(&rng) % (uint64_t)(n_f + 1));
            for (int k = 0, j = 0; k <= n_f; k++)
                g[k] = k == at ? dup[v] : f[j++];
            uint8_t *vb = NULL;
            size_t vn, vcap = 0;
            CHECK_OK(dt_example_encode(g, n_f + 1, &vb, &vn, &vcap));
            mutants++;
            mismatches += !same_both_ways(&spec, &slow, vb, vn, &a, &b, &ok);
            mutants_ok += ok;
            free(vb);
        }
        /* Every prefix, and bytes flipped: the same status and row both ways. */
        for (size_t cut = 0; cut < n && mismatches == 0; cut += 1 + cut / 64) {
            mutants++;
            mismatches += !same_both_ways(&spec, &slow, buf, cut, &a, &b, &ok);
            mutants_ok += ok;
        }
        for (size_t i = 0; i < n && mismatches == 0; i++) {
            uint8_t keep = buf[i];
            for (int x = 1; x < 256; x += 37) {
                buf[i] = keep ^ (uint8_t)x;
                mutants++;
                mismatches += !same_both_ways(&spec, &slow, buf, n, &a, &b, &ok);
                mutants_ok += ok;
            }
            buf[i] = keep;
        }
        dt_rowbuf_free(&a);
        dt_rowbuf_free(&b);
        dt_rowbuf_free(&c);
    }
    CHECK_MSG(mismatches == 0, "%ld of %ld mutated records decode differently", mismatches,
              mutants);
    /* Both outcomes occur among the mutants, and the fast path took most records as written. */
    CHECK(mutants_ok > 0 && mutants_ok < mutants);
    CHECK(fast_taken >= records * 3 / 4);
    /* A spec with a variable-length feature never takes the fast path. */
    dt_example_spec sparse = spec_of("ids:0", "");
    CHECK(!sparse.fast);
    dt_rowbuf_init(&c, sparse.n_dense);
    CHECK(dt_example_parse_fast(&sparse, buf, n, &c) == DT_END && c.n == 0);
    dt_rowbuf_free(&c);
    free(buf);
}

/* ---- the learned layout against the general decoder ---- */

/* A stream of records mostly of one shape, as a file holds, with records of other shapes and
 * mutants among them: dt_example_parse_learned gives each the row, status and message of
 * dt_example_parse, and the layout decodes most of them itself; with the vector decoder or the
 * portable one. */
static void learned_layout_matches_general_decoder(int vector)
{
    dt_rng rng;
    dt_rng_seed(&rng, 11);
    dt_example_spec spec;
    CHECK_OK(dt_example_spec_parse("f:1,g:3,img:4,c1:1,c2:1,opt:1:1:5", "y", &spec));
    dt_example_layout *L;
    CHECK_OK(dt_example_layout_new(&L));
    if (dt_example_layout_use_vector(L, vector) != vector) {
        printf("  note: this CPU has no AVX2 and fast BMI2: the vector decoder is not checked\n");
        dt_example_layout_free(L);
        return;
    }
    dt_rowbuf a, b;
    dt_rowbuf_init(&a, spec.n_dense);
    dt_rowbuf_init(&b, spec.n_dense);
    uint8_t *buf = NULL, *padded = malloc(1 << 16);
    size_t n, cap = 0;
    long records = 0, mismatches = 0, failures = 0;
    int order[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int k = 7; k > 0; k--) { /* the file's key order */
        int j = (int)(dt_rng_next(&rng) % (uint64_t)(k + 1)), t = order[k];
        order[k] = order[j], order[j] = t;
    }
    for (int iter = 0; iter < 4000 && mismatches == 0; iter++) {
        float f = (float)(dt_rng_next(&rng) % 1000) / 8.0f, g[3], yf = (float)(iter % 2);
        for (int k = 0; k < 3; k++)
            g[k] = (float)(int64_t)dt_rng_next(&rng) / 1e12f;
        uint8_t img[4] = {(uint8_t)iter, 7, 255, 0};
        /* int64s of every varint length, some negative (10 bytes) */
        int64_t c1 = (int64_t)(dt_rng_next(&rng) >> (dt_rng_next(&rng) % 64));
        int64_t c2 = iter % 10 ? iter : -iter;
        int64_t yi = iter % 3, extra = 5;
        dt_feature_value all[8] = {
            {"f", DT_FEATURE_FLOAT, 1, &f, NULL, NULL},
            {"g", DT_FEATURE_FLOAT, 3, g, NULL, NULL},
            {"img", DT_FEATURE_BYTES, 4, NULL, NULL, img},
            {"c1", DT_FEATURE_INT64, 1, NULL, &c1, NULL},
            {"c2", DT_FEATURE_INT64, 1, NULL, &c2, NULL},
            {"opt", DT_FEATURE_FLOAT, 1, &f, NULL, NULL},
            iter % 700 < 350 ? (dt_feature_value){"y", DT_FEATURE_INT64, 1, NULL, &yi, NULL}
                             : (dt_feature_value){"y", DT_FEATURE_FLOAT, 1, &yf, NULL, NULL},
            {"unknown", DT_FEATURE_INT64, 1, NULL, &extra, NULL},
        };
        dt_feature_value rec[8];
        int n_f = 0, kind = (int)(dt_rng_next(&rng) % 20);
        for (int k = 0; k < 8; k++) {
            const dt_feature_value *v = &all[order[k]];
            if (strcmp(v->key, "unknown") == 0 && kind != 1)
                continue; /* an unknown key in one record in 20 */
            if (strcmp(v->key, "opt") == 0 && kind == 2)
                continue; /* a defaulted feature missing */
            rec[n_f++] = *v;
        }
        if (kind == 3) { /* another order */
            dt_feature_value t = rec[0];
            rec[0] = rec[n_f - 1], rec[n_f - 1] = t;
        }
        CHECK_OK(dt_example_encode(rec, n_f, &buf, &n, &cap));
        if (kind == 4 && n > 0) /* a flipped byte */
            buf[dt_rng_next(&rng) % n] ^= (uint8_t)(1 + dt_rng_next(&rng) % 255);
        if (kind == 5) /* a truncated record */
            n = (size_t)(dt_rng_next(&rng) % (n + 1));
        memcpy(padded, buf, n);
        for (int k = 0; k < DT_EXAMPLE_LAYOUT_SLACK; k++) /* whatever follows the record */
            padded[n + (size_t)k] = (uint8_t)dt_rng_next(&rng);
        dt_rowbuf_clear(&a);
        dt_rowbuf_clear(&b);
        dt_status sa = dt_example_parse_learned(&spec, L, padded, n, &a);
        char msg_a[512];
        snprintf(msg_a, sizeof msg_a, "%s", dt_last_error());
        dt_status sb = dt_example_parse(&spec, buf, n, &b);
        records++;
        failures += sb != DT_OK;
        int same = sa == sb && a.n == b.n;
        if (same && sa == DT_OK)
            same = memcmp(a.dense, b.dense, (size_t)spec.n_dense * sizeof(float)) == 0 &&
                   memcmp(a.labels, b.labels, sizeof(float)) == 0;
        if (same && sa != DT_OK)
            same = strcmp(msg_a, dt_last_error()) == 0;
        CHECK_MSG(same, "record %d (kind %d, vector %d): learned %d '%s', general %d '%s'", iter,
                  kind, vector, sa, msg_a, sb, dt_last_error());
        mismatches += !same;
    }
    CHECK(records == 4000 && failures > 100);
    /* Most records are of the file's shape: the layout decoded them. */
    CHECK_MSG(dt_example_layout_hits(L) > 2500, "the layout decoded %llu of %ld records",
              (unsigned long long)dt_example_layout_hits(L), records);
    dt_rowbuf_free(&a);
    dt_rowbuf_free(&b);
    dt_example_layout_free(L);
    free(buf);
    free(padded);
}

TEST(example_learned_layout_matches_general_decoder)
{
    learned_layout_matches_general_decoder(0);
    learned_layout_matches_general_decoder(1);
}

/* CTR Examples as the DeepFM sample writes them: ids and values zipped into fields; every bad
 * record named by what is wrong with it. */
static dt_status parse_ctr(const int64_t *ids, size_t n_ids, const float *vals, size_t n_vals,
                           float label, int64_t max_id, int64_t buckets, dt_rowbuf *b)
{
    dt_example_spec spec;
    memset(&spec, 0, sizeof spec);
    snprintf(spec.features[0].key, DT_EXAMPLE_KEY_CAP, "ids");
    snprintf(spec.features[1].key, DT_EXAMPLE_KEY_CAP, "values");
    snprintf(spec.label_key, DT_EXAMPLE_KEY_CAP, "label");
    spec.n_features = 2;
    spec.ctr_fields = 3;
    spec.ctr_max_id = max_id;
    spec.ctr_hash_buckets = buckets;
    CHECK_OK(dt_example_spec_finalize(&spec));
    /* The values before the ids, as a writer may order them: the fields still pair up. */
    dt_feature_value f[3] = {{"values", DT_FEATURE_FLOAT, n_vals, vals, NULL, NULL},
                             {"label", DT_FEATURE_FLOAT, 1, &label, NULL, NULL},
                             {"ids", DT_FEATURE_INT64, n_ids, NULL, ids, NULL}};
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    CHECK_OK(dt_example_encode(f, 3, &buf, &len, &cap));
    dt_status st = dt_example_parse(&spec, buf, len, b);
    free(buf);
    return st;
}

TEST(example_ctr_fields_zip_ids_and_values)
{
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    int64_t ids[3] = {7, 2, 7};
    float vals[3] = {0.5f, 1.0f, -2.0f};
    CHECK_OK(parse_ctr(ids, 3, vals, 3, 1.0f, 10, 0, &b));
    CHECK(b.n == 1 && b.nnz == 3 && b.sp_row[1] == 3 && b.labels[0] == 1.0f);
    for (int f = 0; f < 3; f++)
        CHECK(b.sp_ids[f] == ids[f] && b.sp_vals[f] == vals[f]);
    /* Hashed: each id's digits with its field. */
    CHECK_OK(parse_ctr(ids, 3, vals, 3, 0.0f, 0, 100, &b));
    CHECK(b.n == 2 && b.nnz == 6 && b.sp_row[2] == 6);
    CHECK(b.sp_ids[3] == dt_hash_bucket(0, "7", 1, 100) && b.sp_ids[4] == dt_hash_bucket(1, "2", 1, 100));
    struct {
        int64_t ids[3];
        size_t n_ids, n_vals;
        float v0, label;
        const char *needle;
    } bad[] = {
        {{1, 2, 3}, 3, 2, 1.0f, 0.0f, "3 ids but 2 values"},
        {{1, 2, 3}, 0, 0, 1.0f, 0.0f, "no ids"},
        {{1, 2, 3}, 2, 2, 1.0f, 0.0f, "2 fields, the model takes 3"},
        {{1, -4, 3}, 3, 3, 1.0f, 0.0f, "field 2: id -4 is negative"},
        {{1, 2, 10}, 3, 3, 1.0f, 0.0f, "field 3: id 10 is outside the table's 10 rows"},
        {{1, 2, 3}, 3, 3, NAN, 0.0f, "field 1: value nan"},
        {{1, 2, 3}, 3, 3, INFINITY, 0.0f, "field 1: value inf"},
        {{1, 2, 3}, 3, 3, 1.0f, 2.0f, "label 2 is not 0 or 1"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        float v[3] = {bad[k].v0, 1.0f, 1.0f};
        dt_status st = parse_ctr(bad[k].ids, bad[k].n_ids, v, bad[k].n_vals, bad[k].label, 10, 0, &b);
        CHECK_MSG(st == DT_ERR_FORMAT && strstr(dt_last_error(), bad[k].needle) && b.n == 2 &&
                  b.nnz == 6, "case %zu: status %d, '%s', %d rows", k, st, dt_last_error(), b.n);
    }
    dt_rowbuf_free(&b);
}

/* CTR ids given as floats, or values as int64s, are named, not read as positions or ones. */
TEST(example_ctr_fields_refuse_lists_of_the_wrong_kind)
{
    dt_example_spec spec;
    memset(&spec, 0, sizeof spec);
    snprintf(spec.features[0].key, DT_EXAMPLE_KEY_CAP, "ids");
    snprintf(spec.features[1].key, DT_EXAMPLE_KEY_CAP, "values");
    snprintf(spec.label_key, DT_EXAMPLE_KEY_CAP, "label");
    spec.n_features = 2;
    spec.ctr_fields = 2;
    CHECK_OK(dt_example_spec_finalize(&spec));
    float fids[2] = {1, 2}, vals[2] = {1, 1}, label = 0;
    int64_t ids[2] = {1, 2};
    dt_feature_value bad_ids[3] = {{"ids", DT_FEATURE_FLOAT, 2, fids, NULL, NULL},
                                   {"values", DT_FEATURE_FLOAT, 2, vals, NULL, NULL},
                                   {"label", DT_FEATURE_FLOAT, 1, &label, NULL, NULL}};
    dt_feature_value bad_vals[3] = {{"ids", DT_FEATURE_INT64, 2, NULL, ids, NULL},
                                    {"values", DT_FEATURE_INT64, 2, NULL, ids, NULL},
                                    {"label", DT_FEATURE_FLOAT, 1, &label, NULL, NULL}};
    const dt_feature_value *cases[2] = {bad_ids, bad_vals};
    const char *needle[2] = {"'ids' is a float_list", "'values' is an int64_list"};
    for (int k = 0; k < 2; k++) {
        uint8_t *buf = NULL;
        size_t len = 0, cap = 0;
        CHECK_OK(dt_example_encode(cases[k], 3, &buf, &len, &cap));
        dt_rowbuf b;
        dt_rowbuf_init(&b, 0);
        CHECK_MSG(dt_example_parse(&spec, buf, len, &b) == DT_ERR_FORMAT &&
                  strstr(dt_last_error(), needle[k]) && b.n == 0, "case %d: %s", k,
                  dt_last_error());
        dt_rowbuf_free(&b);
        free(buf);
    }
}

/* The CTR fast path (ids and values straight into the row's entries) against the general
 * decoder, which appends each id and value and pairs them after: random records of the sample's
 * form, in any key order, with an unwanted key, labels of either kind and of 0, 1 or 2, ids of
 * any width (negative ones, and ones of 9 and 10 varint bytes), values now and then not finite,
 * and now and then one id or value too many or too few; with a table's rows and with hash
 * buckets. The same status, the same message, the same row bit for bit; the fast path takes every
 * record of the plain shape itself, and no other. */
TEST(example_ctr_fast_path_matches_general_decoder)
{
    enum { F = 5 };
    dt_rng rng;
    dt_rng_seed(&rng, 11);
    dt_example_spec spec[2], slow[2];
    for (int k = 0; k < 2; k++) {
        memset(&spec[k], 0, sizeof spec[k]);
        snprintf(spec[k].features[0].key, DT_EXAMPLE_KEY_CAP, "ids");
        snprintf(spec[k].features[1].key, DT_EXAMPLE_KEY_CAP, "values");
        snprintf(spec[k].label_key, DT_EXAMPLE_KEY_CAP, "label");
        spec[k].n_features = 2;
        spec[k].ctr_fields = F;
        spec[k].ctr_max_id = k ? 0 : 1000;
        spec[k].ctr_hash_buckets = k ? 101 : 0;
        CHECK_OK(dt_example_spec_finalize(&spec[k]));
        CHECK(spec[k].ctr_fast && !spec[k].fast);
        slow[k] = spec[k];
        slow[k].ctr_fast = 0;
    }
    dt_rowbuf a, b, c;
    dt_rowbuf_init(&a, 0), dt_rowbuf_init(&b, 0), dt_rowbuf_init(&c, 0);
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    long plain = 0, taken = 0, accepted = 0, mismatches = 0;
    for (int iter = 0; iter < 400 && mismatches == 0; iter++) {
        int n_ids = F, n_vals = F, odd = (int)(dt_rng_next(&rng) % 8);
        if (odd == 0)
            n_ids += dt_rng_next(&rng) % 2 ? 1 : -1;
        if (odd == 1)
            n_vals += dt_rng_next(&rng) % 2 ? 1 : -1;
        int64_t ids[F + 1];
        int64_t label_i = (int64_t)(dt_rng_next(&rng) % 5 == 0 ? 2 : dt_rng_next(&rng) % 2);
        float vals[F + 1], label_f = (float)label_i;
        for (int f = 0; f < F + 1; f++) {
            uint64_t r = dt_rng_next(&rng);
            ids[f] = odd == 2 ? (int64_t)r : odd == 3 && f == 1 ? -(int64_t)(r % 50) - 1
                                                                : (int64_t)(r % 1200);
            vals[f] = odd == 4 && f == 2 ? (r % 2 ? NAN : INFINITY)
                                         : (float)((double)(int64_t)(r >> 20) / 1e12);
        }
        dt_feature_value fv[4] = {
            {"ids", DT_FEATURE_INT64, (size_t)n_ids, NULL, ids, NULL},
            {"values", DT_FEATURE_FLOAT, (size_t)n_vals, vals, NULL, NULL},
            iter % 2 ? (dt_feature_value){"label", DT_FEATURE_FLOAT, 1, &label_f, NULL, NULL}
                     : (dt_feature_value){"label", DT_FEATURE_INT64, 1, NULL, &label_i, NULL},
            {"unwanted", DT_FEATURE_INT64, 2, NULL, ids, NULL},
        };
        for (int k = 3; k > 0; k--) {
            int j = (int)(dt_rng_next(&rng) % (uint64_t)(k + 1));
            dt_feature_value t = fv[k];
            fv[k] = fv[j], fv[j] = t;
        }
        CHECK_OK(dt_example_encode(fv, 4, &buf, &len, &cap));
        int ids_ok = 1, below_rows = 1;
        for (int f = 0; f < n_ids; f++) {
            ids_ok &= ids[f] >= 0 && ids[f] < (int64_t)1 << 56; /* varints of up to 8 bytes */
            below_rows &= ids[f] < 1000;
        }
        for (int k = 0; k < 2; k++) {
            dt_rowbuf_clear(&a), dt_rowbuf_clear(&b), dt_rowbuf_clear(&c);
            dt_status fast = dt_example_parse_fast(&spec[k], buf, len, &c);
            dt_status sa = dt_example_parse(&spec[k], buf, len, &a);
            char msg[512];
            snprintf(msg, sizeof msg, "%s", sa ? dt_last_error() : "");
            dt_status sb = dt_example_parse(&slow[k], buf, len, &b);
            int same = sa == sb && a.n == b.n && a.nnz == b.nnz &&
                       (sa != DT_OK || (a.labels[0] == b.labels[0] &&
                                        memcmp(a.sp_ids, b.sp_ids, F * sizeof(int64_t)) == 0 &&
                                        memcmp(a.sp_vals, b.sp_vals, F * sizeof(float)) == 0)) &&
                       (sa == DT_OK || strcmp(msg, dt_last_error()) == 0);
            /* What the fast path takes, it decodes as the general decoder does. */
            int fast_same = fast == DT_OK && sa == DT_OK && c.n == 1 &&
                            memcmp(c.sp_ids, a.sp_ids, F * sizeof(int64_t)) == 0 &&
                            memcmp(c.sp_vals, a.sp_vals, F * sizeof(float)) == 0;
            same = same && (fast == DT_END ? c.n == 0 : fast_same);
            /* The plain shape: F ids and F finite values, ids of up to 8 varint bytes within
             * the table (or hashed), a label of 0 or 1. */
            int is_plain = n_ids == F && n_vals == F && odd != 4 && ids_ok && label_i < 2 &&
                           (k == 1 || below_rows);
            plain += is_plain;
            same = same && (!is_plain || fast == DT_OK);
            taken += fast == DT_OK;
            accepted += sa == DT_OK;
            if (!same) {
                mismatches++;
                CHECK_MSG(0, "record %d, spec %d: fast %d, %d '%s' against the general decoder's "
                          "%d '%s'", iter, k, fast, sa, msg, sb, dt_last_error());
            }
        }
    }
    CHECK_MSG(plain > 100 && taken == plain && accepted > plain,
              "%ld plain records, %ld taken by the fast path, %ld accepted", plain, taken,
              accepted);
    free(buf);
    dt_rowbuf_free(&a), dt_rowbuf_free(&b), dt_rowbuf_free(&c);
}

/* ---- the reader of every feature ---- */

/* The feature of key, or NULL; fails the test when the key appears more than once. */
static const dt_example_feature *find_feature(const dt_example_feature *fs, size_t n,
                                              const char *key)
{
    const dt_example_feature *found = NULL;
    size_t klen = strlen(key);
    for (size_t i = 0; i < n; i++)
        if (fs[i].key_len == klen && memcmp(fs[i].key, key, klen) == 0) {
            CHECK_MSG(!found, "key '%s' listed twice", key);
            found = &fs[i];
        }
    CHECK_MSG(found != NULL, "key '%s' missing", key);
    return found;
}

/* The record's keys in the order the reader gave them, comma-separated. */
static void key_order(const dt_example_feature *fs, size_t n, char *out, size_t cap)
{
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(out + at, cap - at, "%s%.*s", i ? "," : "", (int)fs[i].key_len,
                               fs[i].key);
}

/* The invariants of every successful read: the kind's pointer set, the others NULL, no values
 * without a list, keys distinct and within the record, bytes values within it. */
static int read_is_sane(const dt_example_feature *fs, size_t n, const uint8_t *rec,
                        size_t n_bytes)
{
    int ok = n == 0 || fs != NULL;
    const char *lo = (const char *)rec, *hi = lo + n_bytes;
    for (size_t i = 0; ok && i < n; i++) {
        const dt_example_feature *f = &fs[i];
        ok = f->key && (f->key_len == 0 || (f->key >= lo && f->key + f->key_len <= hi));
        ok = ok && (f->ints != NULL) == (f->kind == DT_FEATURE_INT64) &&
             (f->floats != NULL) == (f->kind == DT_FEATURE_FLOAT) &&
             (f->bytes != NULL) == (f->kind == DT_FEATURE_BYTES) &&
             (f->bytes_len != NULL) == (f->kind == DT_FEATURE_BYTES) && (f->kind || f->n == 0);
        for (size_t k = 0; ok && f->kind == DT_FEATURE_BYTES && k < f->n; k++)
            ok = f->bytes[k] >= rec && f->bytes[k] + f->bytes_len[k] <= rec + n_bytes;
        for (size_t j = 0; ok && j < i; j++)
            ok = !(fs[j].key_len == f->key_len && memcmp(fs[j].key, f->key, f->key_len) == 0);
    }
    return ok;
}

static int by_key(const void *a, const void *b)
{
    const dt_example_feature *x = *(const dt_example_feature *const *)a;
    const dt_example_feature *y = *(const dt_example_feature *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    return c ? c : (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

/* Every feature of every fixture record against what protobuf's own parser read (its map view,
 * sorted by key): kinds, counts and values exact, bytes values in place in the record. The
 * records cover packed and unpacked lists, unknown fields at every level, a key given twice, a
 * value before its key, a list split in two, a oneof replaced, Features in two parts. */
TEST(example_read_fixture_matches_protobuf_exactly)
{
    fixture fx;
    static exp_record recs[N_FIXTURE];
    dt_example_reader *rd = NULL;
    CHECK_OK(dt_example_reader_new(&rd));
    if (!rd || !load_fixture(&fx) || !load_expected(recs)) {
        dt_example_reader_free(rd);
        free_fixture(&fx);
        return;
    }
    for (int r = 0; r < N_FIXTURE; r++) {
        const dt_example_feature *fs;
        size_t nf;
        CHECK_OK(dt_example_read(rd, fx.p[r], fx.n[r], &fs, &nf));
        CHECK(read_is_sane(fs, nf, fx.p[r], fx.n[r]));
        CHECK_MSG((int)nf == recs[r].n, "record %d: %zu features, protobuf has %d", r, nf,
                  recs[r].n);
        if ((int)nf != recs[r].n)
            continue;
        const dt_example_feature *sorted[12];
        for (size_t i = 0; i < nf; i++)
            sorted[i] = &fs[i];
        qsort(sorted, nf, sizeof sorted[0], by_key);
        for (size_t i = 0; i < nf; i++) {
            const dt_example_feature *f = sorted[i];
            const exp_feature *e = &recs[r].f[i];
            int same = f->key_len == strlen(e->key) && memcmp(f->key, e->key, f->key_len) == 0 &&
                       f->kind == e->kind && f->n == (size_t)e->n;
            for (int k = 0; same && k < e->n; k++) {
                if (e->kind == DT_FEATURE_FLOAT)
                    same = bits(f->floats[k]) == e->fbits[k];
                else if (e->kind == DT_FEATURE_INT64)
                    same = f->ints[k] == e->ints[k];
                else
                    same = f->bytes_len[k] == e->blen[k] &&
                           memcmp(f->bytes[k], e->bytes[k], e->blen[k]) == 0;
            }
            CHECK_MSG(same, "record %d, feature '%s' differs from protobuf's", r, e->key);
        }
    }
    /* Record 2 gives "floats" twice: one entry, with its last value, at its first place. */
    const dt_example_feature *fs;
    size_t nf;
    char order[256];
    CHECK_OK(dt_example_read(rd, fx.p[2], fx.n[2], &fs, &nf));
    key_order(fs, nf, order, sizeof order);
    CHECK_MSG(strcmp(order, "floats,ints,img,label,w") == 0, "order %s", order);
    CHECK(nf == 5 && fs[0].kind == DT_FEATURE_FLOAT && fs[0].n == 3 && fs[0].floats[0] == 0.125f &&
          fs[0].floats[1] == 1e10f && fs[0].floats[2] == -3.0f);
    dt_example_reader_free(rd);
    free_fixture(&fx);
}

/* Every kind through the encoder, with extreme values kept exactly, empty lists, an empty bytes
 * value, an empty key; bytes values point into the record. */
TEST(example_read_every_kind)
{
    const float fl[] = {1.5f, -0.0f, NAN, INFINITY, 1e-45f, FLT_MAX};
    const int64_t in[] = {INT64_MIN, INT64_MAX, -1, 0, 9007199254740993LL, 127, 128};
    const uint8_t by[] = {0, 0xff, 0x80, 'a'};
    const dt_feature_value fv[] = {
        {"f", DT_FEATURE_FLOAT, 6, fl, NULL, NULL},
        {"i", DT_FEATURE_INT64, 7, NULL, in, NULL},
        {"b", DT_FEATURE_BYTES, 4, NULL, NULL, by},
        {"empty_f", DT_FEATURE_FLOAT, 0, NULL, NULL, NULL},
        {"empty_i", DT_FEATURE_INT64, 0, NULL, NULL, NULL},
        {"", DT_FEATURE_BYTES, 0, NULL, NULL, NULL}, /* one bytes value of 0 bytes */
    };
    uint8_t *buf = NULL;
    size_t n, cap = 0, nf;
    const dt_example_feature *fs;
    dt_example_reader *rd;
    CHECK_OK(dt_example_reader_new(&rd));
    CHECK_OK(dt_example_encode(fv, 6, &buf, &n, &cap));
    CHECK_OK(dt_example_read(rd, buf, n, &fs, &nf));
    CHECK(nf == 6 && read_is_sane(fs, nf, buf, n));
    char order[256];
    key_order(fs, nf, order, sizeof order);
    CHECK_MSG(strcmp(order, "f,i,b,empty_f,empty_i,") == 0, "order %s", order);
    CHECK(fs[0].kind == DT_FEATURE_FLOAT && fs[0].n == 6);
    for (int k = 0; k < 6; k++)
        CHECK_MSG(bits(fs[0].floats[k]) == bits(fl[k]), "float %d", k);
    CHECK(fs[1].kind == DT_FEATURE_INT64 && fs[1].n == 7);
    for (int k = 0; k < 7; k++)
        CHECK_MSG(fs[1].ints[k] == in[k], "int %d: %lld", k, (long long)fs[1].ints[k]);
    CHECK(fs[2].kind == DT_FEATURE_BYTES && fs[2].n == 1 && fs[2].bytes_len[0] == 4 &&
          memcmp(fs[2].bytes[0], by, 4) == 0 && fs[2].bytes[0] > buf && fs[2].bytes[0] < buf + n);
    CHECK(fs[3].kind == DT_FEATURE_FLOAT && fs[3].n == 0 && fs[3].floats != NULL);
    CHECK(fs[4].kind == DT_FEATURE_INT64 && fs[4].n == 0 && fs[4].ints != NULL);
    CHECK(fs[5].key_len == 0 && fs[5].kind == DT_FEATURE_BYTES && fs[5].n == 1 &&
          fs[5].bytes_len[0] == 0);
    CHECK(find_feature(fs, nf, "i") == &fs[1]);

    /* By hand: an empty bytes_list, a Feature with no list, a map entry with no value, and one
     * with no key (the key ""). */
    msg m, features = {.n = 0}, e;
    const struct {
        const char *entry;
        size_t n;
    } entries[] = {
        {"\x0a\x02" "eb" "\x12\x02\x0a\x00", 8},
        {"\x0a\x02" "nl" "\x12\x00", 6},
        {"\x0a\x02" "nv", 4},
        {"\x12\x04\x1a\x02\x08\x05", 6},
    };
    for (int i = 0; i < 4; i++) {
        e.n = 0;
        add(&e, entries[i].entry, entries[i].n);
        add_len(&features, 1, &e);
    }
    m.n = 0;
    add_len(&m, 1, &features);
    CHECK_OK(dt_example_read(rd, m.p, m.n, &fs, &nf));
    CHECK(nf == 4 && read_is_sane(fs, nf, m.p, m.n));
    key_order(fs, nf, order, sizeof order);
    CHECK_MSG(strcmp(order, "eb,nl,nv,") == 0, "order %s", order);
    CHECK(fs[0].kind == DT_FEATURE_BYTES && fs[0].n == 0 && fs[0].bytes && fs[0].bytes_len);
    CHECK(fs[1].kind == 0 && fs[1].n == 0 && !fs[1].ints && !fs[1].floats && !fs[1].bytes);
    CHECK(fs[2].kind == 0 && fs[2].n == 0);
    CHECK(fs[3].key_len == 0 && fs[3].kind == DT_FEATURE_INT64 && fs[3].n == 1 &&
          fs[3].ints[0] == 5);
    dt_example_reader_free(rd);
    free(buf);
}

/* Lists packed, unpacked and both in one list; unknown fields of every wire type at every level
 * skipped. */
TEST(example_read_packed_unpacked_and_unknown_fields)
{
    dt_example_reader *rd;
    CHECK_OK(dt_example_reader_new(&rd));
    const dt_example_feature *fs;
    size_t nf;
    msg m;
    /* float_list: 1.0 unpacked, then 2.0 and 3.0 packed, then 4.0 unpacked. */
    one_feature(&m, "f", (const uint8_t *)"\x12\x14"
                "\x0d\x00\x00\x80\x3f"
                "\x0a\x08\x00\x00\x00\x40\x00\x00\x40\x40"
                "\x0d\x00\x00\x80\x40", 22);
    CHECK_OK(dt_example_read(rd, m.p, m.n, &fs, &nf));
    CHECK(nf == 1 && fs[0].kind == DT_FEATURE_FLOAT && fs[0].n == 4 && fs[0].floats[0] == 1.0f &&
          fs[0].floats[1] == 2.0f && fs[0].floats[2] == 3.0f && fs[0].floats[3] == 4.0f);
    /* int64_list: 5 and -1 unpacked (-1 in 10 bytes), then 300 and 1 packed. */
    one_feature(&m, "i", (const uint8_t *)"\x1a\x12"
                "\x08\x05"
                "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"
                "\x0a\x03\xac\x02\x01", 20);
    CHECK_OK(dt_example_read(rd, m.p, m.n, &fs, &nf));
    CHECK(nf == 1 && fs[0].kind == DT_FEATURE_INT64 && fs[0].n == 4 && fs[0].ints[0] == 5 &&
          fs[0].ints[1] == -1 && fs[0].ints[2] == 300 && fs[0].ints[3] == 1);
    /* Unknown fields: in the lists (varint, fixed64, fixed32, bytes), in the Feature, in the
     * map entry, in Features, in the Example (before and after, a two-byte tag among them). */
    msg feat = {.n = 0}, entry = {.n = 0}, features = {.n = 0};
    add(&feat, "\x4d\x01\x02\x03\x04", 5); /* Feature field 9, fixed32 */
    add(&feat, "\x1a\x15"                   /* the int64_list, 21 bytes: */
               "\x10\x07"                   /*   field 2, varint */
               "\x19\x01\x02\x03\x04\x05\x06\x07\x08" /* field 3, fixed64 */
               "\x0a\x01\x2a"               /*   the values, packed: 42 */
               "\x25\x00\x00\x00\x00"       /*   field 4, fixed32 */
               "\x12\x00", 23);             /*   field 2 again, bytes */
    add(&entry, "\x19\x00\x00\x00\x00\x00\x00\xf0\x3f", 9); /* map entry field 3, a double */
    add(&entry, "\x0a\x01u", 3);
    add_len(&entry, 2, &feat);
    add(&features, "\x10\x02", 2); /* Features field 2, varint */
    add_len(&features, 1, &entry);
    m.n = 0;
    add(&m, "\x38\x63", 2);                  /* Example field 7, varint */
    add(&m, "\x62\x03" "abc", 5);            /* field 12, bytes */
    add_len(&m, 1, &features);
    add(&m, "\x82\x7d\x02" "zz", 5);         /* field 2000: a two-byte tag */
    CHECK_OK(dt_example_read(rd, m.p, m.n, &fs, &nf));
    CHECK(nf == 1 && fs[0].key_len == 1 && fs[0].key[0] == 'u' && fs[0].kind == DT_FEATURE_INT64 &&
          fs[0].n == 1 && fs[0].ints[0] == 42);
    /* A record of unknown fields only has no features. */
    CHECK_OK(dt_example_read(rd, (const uint8_t *)"\x38\x63\x62\x01x", 5, &fs, &nf));
    CHECK(nf == 0);
    dt_example_reader_free(rd);
}

/* A key given twice appears once, with its last value (of whatever kind) at its first place;
 * two Features messages merge; the earlier value of a key must still be well formed. */
TEST(example_read_duplicate_keys_and_merged_features)
{
    dt_example_reader *rd;
    CHECK_OK(dt_example_reader_new(&rd));
    const float two[] = {1, 2};
    const int64_t three[] = {7, 8, 9}, one[] = {3};
    const dt_feature_value fv[] = {
        {"a", DT_FEATURE_FLOAT, 2, two, NULL, NULL},
        {"b", DT_FEATURE_INT64, 1, NULL, one, NULL},
        {"a", DT_FEATURE_INT64, 3, NULL, three, NULL},
        {"c", DT_FEATURE_BYTES, 2, NULL, NULL, (const uint8_t *)"hi"},
        {"b", DT_FEATURE_FLOAT, 0, NULL, NULL, NULL},
    };
    uint8_t *buf = NULL, *joined = NULL;
    size_t n, cap = 0, nf;
    const dt_example_feature *fs;
    char order[256];
    CHECK_OK(dt_example_encode(fv, 5, &buf, &n, &cap));
    CHECK_OK(dt_example_read(rd, buf, n, &fs, &nf));
    key_order(fs, nf, order, sizeof order);
    CHECK_MSG(nf == 3 && strcmp(order, "a,b,c") == 0, "order %s", order);
    CHECK(fs[0].kind == DT_FEATURE_INT64 && fs[0].n == 3 && fs[0].ints[2] == 9);
    CHECK(fs[1].kind == DT_FEATURE_FLOAT && fs[1].n == 0);
    CHECK(fs[2].kind == DT_FEATURE_BYTES && fs[2].n == 1 && fs[2].bytes_len[0] == 2);

    /* Two serialized Examples back to back are one Example whose Features merge: x, y then
     * z, x is x (its second value), y, z. */
    const dt_feature_value first[] = {{"x", DT_FEATURE_INT64, 1, NULL, one, NULL},
                                      {"y", DT_FEATURE_FLOAT, 2, two, NULL, NULL}};
    const dt_feature_value second[] = {{"z", DT_FEATURE_INT64, 3, NULL, three, NULL},
                                       {"x", DT_FEATURE_FLOAT, 1, two + 1, NULL, NULL}};
    size_t n1, n2;
    CHECK_OK(dt_example_encode(first, 2, &buf, &n1, &cap));
    joined = malloc(n1 + 256);
    memcpy(joined, buf, n1);
    CHECK_OK(dt_example_encode(second, 2, &buf, &n2, &cap));
    memcpy(joined + n1, buf, n2);
    CHECK_OK(dt_example_read(rd, joined, n1 + n2, &fs, &nf));
    key_order(fs, nf, order, sizeof order);
    CHECK_MSG(nf == 3 && strcmp(order, "x,y,z") == 0, "order %s", order);
    CHECK(fs[0].kind == DT_FEATURE_FLOAT && fs[0].n == 1 && fs[0].floats[0] == 2.0f);
    CHECK(fs[1].n == 2 && fs[2].n == 3 && read_is_sane(fs, nf, joined, n1 + n2));

    /* The earlier value of "k" is a float_list with a varint value: malformed, though replaced. */
    msg m, features = {.n = 0}, e = {.n = 0};
    add(&e, "\x0a\x01k\x12\x04\x12\x02\x08\x01", 9);
    add_len(&features, 1, &e);
    e.n = 0;
    add(&e, "\x0a\x01k\x12\x00", 5);
    add_len(&features, 1, &e);
    m.n = 0;
    add_len(&m, 1, &features);
    CHECK_ERR(dt_example_read(rd, m.p, m.n, &fs, &nf), DT_ERR_FORMAT,
              "byte 11: a float_list value has wire type 0, expected 5");
    CHECK(fs == NULL && nf == 0);
    char *text = NULL;
    CHECK_ERR(dt_example_to_json(m.p, m.n, &text), DT_ERR_FORMAT,
              "byte 11: a float_list value has wire type 0, expected 5");
    free(joined);
    free(buf);
    dt_example_reader_free(rd);
}

/* Malformed records fail with DT_ERR_FORMAT and the general decoder's "byte N" message; every
 * prefix of a record fails so, and a failure leaves no features. */
TEST(example_read_malformed_records)
{
    dt_example_reader *rd;
    CHECK_OK(dt_example_reader_new(&rd));
    const dt_example_feature *fs;
    size_t nf;
    struct {
        const char *bytes;
        size_t n;
        const char *message;
    } cases[] = {
        {"\x0a\xff\xff\xff\xff\x0f", 6, "byte 1: length 4294967295 runs past the end of the record (6 bytes)"},
        {"\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12, "byte 1: varint longer than 10 bytes or beyond 64 bits"},
        {"\x80", 1, "byte 0: varint runs past the end of the Example"},
        {"\x0b", 1, "byte 0: field 1 of the Example is a group (wire type 3): groups are not supported"},
        {"\x02\x00", 2, "byte 0: field number 0 in the Example"},
        {"\x08\x01", 2, "byte 0: Example.features has wire type 0, expected 2"},
        {"\x0a\x04\x0a\x10\x0a\x00\x12\x14" "01234567890123456789", 28,
         "byte 3: length 16 runs past the end of the Features (at byte 6)"},
        {"\x0a\x02\x08\x01", 4, "byte 2: a Features map entry has wire type 0, expected 2"},
        {"\x0a\x04\x0a\x02\x08\x01", 6, "byte 4: a map entry's key has wire type 0, expected 2"},
        {"\x0a\x04\x0a\x02\x13\x01", 6, "byte 4: field 2 of the map entry is a group"},
        {"\x0a\x07\x0a\x05\x12\x03\x1a\x01\x0b", 9, "byte 8: field 1 of the int64_list is a group"},
        {"\x0a\x09\x0a\x07\x12\x05\x12\x03\x0a\x01\x00", 11,
         "byte 8: packed float_list of 1 bytes, not a multiple of 4"},
        {"\x0a\x08\x0a\x06\x12\x04\x1a\x02\x08\x80", 10,
         "byte 9: varint runs past the end of the int64_list"},
        {"\x0a\x06\x0a\x04\x12\x02\x10\x01", 8,
         "byte 6: the Feature's float_list has wire type 0, expected 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fs = (const dt_example_feature *)cases; /* anything but NULL */
        nf = 99;
        dt_status st = dt_example_read(rd, (const uint8_t *)cases[i].bytes, cases[i].n, &fs, &nf);
        CHECK_MSG(st == DT_ERR_FORMAT && strstr(dt_last_error(), cases[i].message) && !fs && !nf,
                  "case %zu: status %d, message '%s', expected '%s'", i, st, dt_last_error(),
                  cases[i].message);
    }
    /* Every strict prefix of a record of one Features message fails, with a message naming a
     * byte; the whole record reads. */
    const float fl[] = {1, 2, 3};
    const int64_t in[] = {-1, 300};
    const dt_feature_value fv[] = {{"floats", DT_FEATURE_FLOAT, 3, fl, NULL, NULL},
                                   {"ints", DT_FEATURE_INT64, 2, NULL, in, NULL},
                                   {"b", DT_FEATURE_BYTES, 3, NULL, NULL, (const uint8_t *)"xyz"}};
    uint8_t *buf = NULL;
    size_t n, cap = 0;
    CHECK_OK(dt_example_encode(fv, 3, &buf, &n, &cap));
    long bad_prefix = 0;
    for (size_t cut = 1; cut < n; cut++) {
        uint8_t *p = malloc(cut); /* exactly cut bytes, so ASan sees any read past them */
        memcpy(p, buf, cut);
        dt_status st = dt_example_read(rd, p, cut, &fs, &nf);
        bad_prefix += st != DT_ERR_FORMAT || strncmp(dt_last_error(), "byte ", 5) != 0 || fs;
        free(p);
    }
    CHECK_MSG(bad_prefix == 0, "%ld prefixes did not fail with a byte", bad_prefix);
    CHECK_OK(dt_example_read(rd, buf, n, &fs, &nf));
    CHECK(nf == 3);
    /* Every byte changed: the reader fails exactly when the JSON listing (which decodes every
     * value too) does, with the same status. */
    long differ = 0, ok = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t keep = buf[i];
        for (int x = 1; x < 256; x++) {
            buf[i] = keep ^ (uint8_t)x;
            char *text = NULL;
            dt_status sj = dt_example_to_json(buf, n, &text);
            free(text);
            dt_status sr = dt_example_read(rd, buf, n, &fs, &nf);
            differ += sr != sj || (sr == DT_OK && !read_is_sane(fs, nf, buf, n));
            ok += sr == DT_OK;
        }
        buf[i] = keep;
    }
    CHECK_MSG(differ == 0 && ok > 0, "%ld byte changes read otherwise than listed (%ld read)",
              differ, ok);
    free(buf);
    dt_example_reader_free(rd);
}

/* No features: an empty record, NULL, an empty Features message. */
TEST(example_read_no_features)
{
    dt_example_reader *rd;
    CHECK_OK(dt_example_reader_new(&rd));
    const dt_example_feature *fs;
    size_t nf = 7;
    CHECK_OK(dt_example_read(rd, NULL, 0, &fs, &nf));
    CHECK(nf == 0);
    uint8_t *buf = NULL;
    size_t n, cap = 0;
    CHECK_OK(dt_example_encode(NULL, 0, &buf, &n, &cap));
    CHECK(n == 2);
    nf = 7;
    CHECK_OK(dt_example_read(rd, buf, n, &fs, &nf));
    CHECK(nf == 0);
    free(buf);
    dt_example_reader_free(rd);
    dt_example_reader_free(NULL);
}

/* A record of 5,000 features of every kind and one of 200,000 values grow the buffers and the
 * key table; one reader then reads records of other shapes in turn, small and large, each
 * exactly, and a record read again reads the same. */
TEST(example_read_many_features_and_reuse)
{
    enum { NF = 5000, NV = 200000 };
    static char keys[NF][12];
    static dt_feature_value fv[NF];
    static int64_t ints[NF];
    static float floats[NF];
    float *big = malloc(NV * sizeof *big);
    for (int i = 0; i < NV; i++)
        big[i] = (float)i * 0.5f;
    for (int i = 0; i < NF; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        ints[i] = (int64_t)i * 1000003 - 7;
        floats[i] = (float)i / 3.0f;
        int kind = i % 3 == 0 ? DT_FEATURE_INT64 : i % 3 == 1 ? DT_FEATURE_FLOAT : DT_FEATURE_BYTES;
        fv[i] = (dt_feature_value){keys[i], kind, (size_t)(i % 4), floats, ints,
                                   (const uint8_t *)keys[i]};
        if (kind == DT_FEATURE_BYTES)
            fv[i].n = strlen(keys[i]);
    }
    uint8_t *many = NULL, *large = NULL, *small = NULL;
    size_t n_many, n_large, n_small, cap1 = 0, cap2 = 0, cap3 = 0;
    CHECK_OK(dt_example_encode(fv, NF, &many, &n_many, &cap1));
    const dt_feature_value lv[] = {{"big", DT_FEATURE_FLOAT, NV, big, NULL, NULL},
                                   {"ids", DT_FEATURE_INT64, NF, NULL, ints, NULL}};
    CHECK_OK(dt_example_encode(lv, 2, &large, &n_large, &cap2));
    CHECK_OK(dt_example_encode(fv + 1, 3, &small, &n_small, &cap3));
    dt_example_reader *rd;
    CHECK_OK(dt_example_reader_new(&rd));
    const dt_example_feature *fs;
    size_t nf;
    for (int round = 0; round < 3; round++) {
        CHECK_OK(dt_example_read(rd, small, n_small, &fs, &nf));
        CHECK(nf == 3 && fs[0].key_len == 2 && memcmp(fs[0].key, "k1", 2) == 0 &&
              fs[0].kind == DT_FEATURE_FLOAT && fs[0].n == 1 && fs[1].kind == DT_FEATURE_BYTES &&
              fs[2].kind == DT_FEATURE_INT64 && fs[2].n == 3 && fs[2].ints[2] == ints[2]);
        CHECK_OK(dt_example_read(rd, many, n_many, &fs, &nf));
        CHECK(nf == NF && read_is_sane(fs, nf, many, n_many));
        long wrong = 0;
        for (int i = 0; i < NF && nf == NF; i++) {
            const dt_example_feature *f = &fs[i];
            int same = f->key_len == strlen(keys[i]) && memcmp(f->key, keys[i], f->key_len) == 0 &&
                       f->kind == fv[i].type &&
                       f->n == (f->kind == DT_FEATURE_BYTES ? 1 : fv[i].n);
            for (size_t k = 0; same && f->kind != DT_FEATURE_BYTES && k < f->n; k++)
                same = f->kind == DT_FEATURE_INT64 ? f->ints[k] == ints[k]
                                                   : f->floats[k] == floats[k];
            if (same && f->kind == DT_FEATURE_BYTES)
                same = f->bytes_len[0] == fv[i].n && memcmp(f->bytes[0], keys[i], fv[i].n) == 0;
            wrong += !same;
        }
        CHECK_MSG(wrong == 0, "round %d: %ld of %d features wrong", round, wrong, NF);
        CHECK_OK(dt_example_read(rd, large, n_large, &fs, &nf));
        CHECK(nf == 2 && fs[0].kind == DT_FEATURE_FLOAT && fs[0].n == NV &&
              memcmp(fs[0].floats, big, NV * sizeof(float)) == 0 && fs[1].n == NF &&
              memcmp(fs[1].ints, ints, NF * sizeof(int64_t)) == 0);
    }
    /* The many features again, every key given twice (the second time with one int64 more):
     * still NF features in the first order, each with its later value. */
    static dt_feature_value twice[2 * NF];
    static int64_t more[NF + 1];
    for (int i = 0; i < NF; i++) {
        twice[i] = fv[i];
        twice[NF + i] = (dt_feature_value){keys[NF - 1 - i], DT_FEATURE_INT64, 1, NULL,
                                           more + (NF - 1 - i), NULL};
        more[i] = -i;
    }
    uint8_t *dup = NULL;
    size_t n_dup, cap4 = 0;
    CHECK_OK(dt_example_encode(twice, 2 * NF, &dup, &n_dup, &cap4));
    CHECK_OK(dt_example_read(rd, dup, n_dup, &fs, &nf));
    long wrong = 0;
    for (int i = 0; i < NF && nf == NF; i++)
        wrong += fs[i].key_len != strlen(keys[i]) || memcmp(fs[i].key, keys[i], fs[i].key_len) ||
                 fs[i].kind != DT_FEATURE_INT64 || fs[i].n != 1 || fs[i].ints[0] != -i;
    CHECK_MSG(nf == NF && wrong == 0, "%zu features, %ld wrong", nf, wrong);
    dt_example_reader_free(rd);
    free(dup);
    free(small);
    free(large);
    free(many);
    free(big);
}
