/* Golden test: feature-spec models (wide_deep binary and multiclass, deepfm, dcn_v2 parallel
 * full rank, dcn_v2 stacked low rank) against PyTorch in float64: from the raw text cells of a
 * small batch through dt_features_transform to the logits, the mean loss and the gradient of
 * every variable, the dense ones in dt_model_grads and each table's rows in
 * dt_model_table_grad, for fixed weights.
 *
 * tests/fixtures/golden_columns.bin is written by `python3 scripts/make_golden_columns.py
 * tests/fixtures/golden_columns.bin`; the script documents the columns, the models' semantics,
 * the weights' formula and the format. The fixture holds each model's spec (parsed here with
 * dt_features_parse), the raw cells, the transformed rows the script expects, the weights (as
 * float32), the logits, the loss and the gradients (as float64), and for each table the ids of
 * the rows the batch reads: dtrain's sparse gradient must hold exactly those rows. Every
 * variable and table of dtrain's model must be in the fixture and the other way round, with
 * the same shape, so the fixture also pins the variables' names and layouts. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/crc32c.h"
#include "dtrain/features.h"
#include "dtrain/model.h"
#include "dtrain/pool.h"
#include "test.h"

#define FIXTURE "tests/fixtures/golden_columns.bin"
#define TOL 1e-5
#define MAX_B 16
#define MAX_KEYS 16

typedef struct {
    const uint8_t *p, *end;
    bool ok;
} reader;

static const void *take(reader *r, size_t n)
{
    if (!r->ok || (size_t)(r->end - r->p) < n) {
        r->ok = false;
        return NULL;
    }
    const void *at = r->p;
    r->p += n;
    return at;
}

static uint32_t u32(reader *r)
{
    const uint8_t *b = take(r, 4);
    return b ? (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24
             : 0;
}

static uint64_t u64(reader *r)
{
    uint64_t lo = u32(r);
    return lo | (uint64_t)u32(r) << 32;
}

static float f32(reader *r)
{
    uint32_t v = u32(r);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

static double f64(reader *r)
{
    uint64_t v = u64(r);
    double d;
    memcpy(&d, &v, 8);
    return d;
}

/* A string: its bytes (not terminated) and length. */
static const char *str(reader *r, uint32_t *len)
{
    *len = u32(r);
    return take(r, *len);
}

/* A string copied and terminated (malloc'd), or NULL. */
static char *str_dup(reader *r)
{
    uint32_t n;
    const char *s = str(r, &n);
    char *d = s ? malloc((size_t)n + 1) : NULL;
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* The whole file, checked for its magic and CRC32C; NULL (with a failure recorded) otherwise. */
static uint8_t *load_fixture(size_t *size)
{
    FILE *f = fopen(FIXTURE, "rb");
    CHECK_MSG(f != NULL, "%s is missing: python3 scripts/make_golden_columns.py %s", FIXTURE,
              FIXTURE);
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = n > 0 ? malloc((size_t)n) : NULL;
    *size = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!buf || *size != (size_t)n) {
        CHECK_MSG(false, "%s: cannot read it", FIXTURE);
        free(buf);
        return NULL;
    }
    return buf;
}

/* Whether buf holds a fixture: the magic, version 1 and a matching CRC32C. */
static bool fixture_valid(const uint8_t *buf, size_t n, char *why, size_t cap)
{
    if (n < 20 || memcmp(buf, "DTGOLDCL", 8) != 0) {
        snprintf(why, cap, "no DTGOLDCL magic");
        return false;
    }
    uint32_t want = (uint32_t)buf[n - 4] | (uint32_t)buf[n - 3] << 8 |
                    (uint32_t)buf[n - 2] << 16 | (uint32_t)buf[n - 1] << 24;
    if (dt_crc32c(buf, n - 4) != want) {
        snprintf(why, cap, "CRC32C mismatch");
        return false;
    }
    reader r = {buf + 8, buf + n - 4, true};
    if (u32(&r) != 1) {
        snprintf(why, cap, "version is not 1");
        return false;
    }
    return true;
}

/* max |a - b| / max(1, |b|) */
static double rel(double a, double b) { return fabs(a - b) / fmax(1.0, fabs(b)); }

/* The raw row b: each of the spec's keys from the fixture's cells by name. */
static dt_status transform_rows(const dt_features *f, char **keys, int n_keys, char ***cells,
                                int nb, dt_rowbuf *rb)
{
    dt_feature_scratch *s = NULL;
    dt_status st = dt_feature_scratch_new(f, &s);
    int nk = dt_features_num_keys(f);
    dt_raw_value *v = calloc((size_t)nk + 1, sizeof *v);
    dt_bytes_ref *refs = calloc((size_t)nk + 1, sizeof *refs);
    for (int b = 0; st == DT_OK && b < nb; b++) {
        for (int k = 0; k < nk; k++) {
            const char *key = dt_features_key(f, k), *text = NULL;
            for (int j = 0; j < n_keys && !text; j++)
                if (strcmp(keys[j], key) == 0)
                    text = cells[b][j];
            CHECK_MSG(text != NULL, "the spec reads key '%s', which the fixture lacks", key);
            if (!text || !*text) {
                v[k] = (dt_raw_value){DT_RAW_MISSING, 0, NULL, NULL, NULL};
            } else {
                refs[k] = (dt_bytes_ref){text, strlen(text)};
                v[k] = (dt_raw_value){DT_RAW_TEXT, 1, &refs[k], NULL, NULL};
            }
        }
        st = dt_features_transform(f, s, v, rb);
    }
    free(v), free(refs);
    dt_feature_scratch_free(s);
    return st;
}

/* One model of the fixture, r after its name. */
static void golden_model(reader *r, const char *name, dt_pool *pool)
{
    char *spec = str_dup(r);
    uint32_t B = u32(r), n_keys = u32(r);
    if (!r->ok || !spec || B < 1 || B > MAX_B || n_keys > MAX_KEYS) {
        CHECK_MSG(false, "%s: a malformed model header", name);
        free(spec);
        r->ok = false;
        return;
    }
    char *keys[MAX_KEYS] = {0}, *cell_text[MAX_B][MAX_KEYS] = {{0}}, **cells[MAX_B];
    for (uint32_t k = 0; k < n_keys; k++)
        keys[k] = str_dup(r);
    for (uint32_t b = 0; b < B; b++) {
        cells[b] = cell_text[b];
        for (uint32_t k = 0; k < n_keys; k++)
            cell_text[b][k] = str_dup(r);
    }
    dt_features *f = NULL;
    dt_feature_model fm;
    dt_model *m = NULL;
    dt_elem *e = NULL;
    dt_rowbuf rb;
    dt_rowbuf_init(&rb, 0);
    CHECK_OK(dt_features_parse(spec, name, NULL, &f));
    if (f)
        CHECK_OK(dt_features_model(f, &fm));
    if (f && fm.spec.columns)
        CHECK_OK(dt_model_create(&fm.spec, (int)B, pool, NULL, &m));
    if (m) {
        dt_rowbuf_free(&rb);
        dt_rowbuf_init(&rb, dt_features_dense_width(f));
        CHECK_OK(transform_rows(f, keys, (int)n_keys, cells, (int)B, &rb));
        if (rb.n == (int)B)
            e = dt_rowbuf_take(&rb);
    }

    /* The transformed rows the script expects. */
    uint32_t n_dense = u32(r), n_slots = u32(r);
    CHECK_MSG(!f || ((int)n_dense == dt_features_dense_width(f) &&
                     (int)n_slots == dt_features_num_slots(f)),
              "%s: %u dense values and %u slots in the fixture", name, n_dense, n_slots);
    for (uint32_t b = 0; b < B; b++)
        for (uint32_t k = 0; k < n_dense; k++) {
            float want = f32(r);
            if (e && e->n_dense == (int)n_dense && r->ok)
                CHECK_MSG(rel(e->dense[b * n_dense + k], want) <= 1e-6,
                          "%s: row %u: dense value %u is %.9g, the script's %.9g", name, b, k,
                          e->dense[b * n_dense + k], want);
        }
    for (uint32_t b = 0; b < B; b++) {
        uint32_t nnz = u32(r);
        int64_t lo = e ? e->sp_row[b] : 0, hi = e ? e->sp_row[b + 1] : 0;
        CHECK_MSG(!e || hi - lo == (int64_t)nnz, "%s: row %u: %lld entries, the script's %u",
                  name, b, (long long)(hi - lo), nnz);
        for (uint32_t j = 0; j < nnz; j++) {
            int64_t id = (int64_t)u64(r);
            float w = f32(r);
            if (e && hi - lo == (int64_t)nnz && r->ok)
                CHECK_MSG(e->sp_ids[lo + j] == id && e->sp_vals[lo + j] == w,
                          "%s: row %u: entry %u is (slot %d, id %lld, weight %g), the "
                          "script's (slot %d, id %lld, weight %g)", name, b, j,
                          dt_feature_entry_slot(e->sp_ids[lo + j]),
                          (long long)dt_feature_entry_id(e->sp_ids[lo + j]), e->sp_vals[lo + j],
                          dt_feature_entry_slot(id), (long long)dt_feature_entry_id(id), w);
        }
    }
    int32_t labels[MAX_B];
    for (uint32_t b = 0; b < B; b++) {
        labels[b] = (int32_t)u32(r);
        CHECK(!e || e->labels[b] == (float)labels[b]);
    }
    uint32_t N = u32(r);
    const uint8_t *logits_at = take(r, (size_t)B * N * 8);
    double want_loss = f64(r);
    uint32_t n_tensors = u32(r);
    if (!r->ok || !m || !e) {
        CHECK_MSG(r->ok, "%s: the fixture ends early", name);
        goto done;
    }
    CHECK(dt_model_num_outputs(m) == (int)N);

    /* The weights, by name; then every variable and table must have been set. */
    dt_arena *params = dt_model_params(m), *grads = dt_model_grads(m);
    const uint8_t *tensors_at = r->p;
    int set_views = 0, set_tables = 0;
    for (uint32_t t = 0; t < n_tensors && r->ok; t++) {
        char *tname = str_dup(r);
        uint32_t kind = u32(r), rows = u32(r), cols = u32(r);
        size_t count = (size_t)rows * cols;
        const uint8_t *vals = take(r, count * 4);
        take(r, count * 8);
        if (kind == 1)
            take(r, (size_t)u32(r) * 8);
        if (!r->ok || !tname) {
            free(tname);
            break;
        }
        float *dst = NULL;
        if (kind == 0) {
            int v = dt_arena_find(params, tname);
            CHECK_MSG(v >= 0, "%s: the fixture's %s is not a variable of dtrain's model", name,
                      tname);
            if (v >= 0) {
                CHECK_MSG(params->views[v].n_elems == count &&
                              (params->views[v].n_dims == 1 ||
                               (params->views[v].dims[0] == (int)rows &&
                                params->views[v].dims[1] == (int)cols)),
                          "%s: %s: dtrain's shape differs from the fixture's (%u, %u)", name,
                          tname, rows, cols);
                if (params->views[v].n_elems == count)
                    dst = dt_arena_view_data(params, v), set_views++;
            }
        } else {
            dt_table *tab = dt_model_find_table(m, tname);
            CHECK_MSG(tab != NULL, "%s: the fixture's table %s is not one of dtrain's", name,
                      tname);
            if (tab) {
                CHECK_MSG(tab->rows == (int64_t)rows && tab->dim == (int)cols,
                          "%s: table %s is (%lld, %d), the fixture's (%u, %u)", name, tname,
                          (long long)tab->rows, tab->dim, rows, cols);
                if (tab->rows == (int64_t)rows && tab->dim == (int)cols)
                    dst = tab->data, set_tables++;
            }
        }
        for (size_t i = 0; dst && i < count; i++)
            memcpy(&dst[i], vals + 4 * i, 4);
        free(tname);
    }
    CHECK_MSG(set_views == params->n_views, "%s: the fixture sets %d of dtrain's %d variables",
              name, set_views, params->n_views);
    CHECK_MSG(set_tables == dt_model_num_tables(m), "%s: the fixture sets %d of dtrain's %d "
              "tables", name, set_tables, dt_model_num_tables(m));

    const float *logits = NULL;
    CHECK_OK(dt_model_forward_batch(m, e, true, &logits));
    double loss = dt_model_loss(m, (int)B, labels, 1.0f / (float)B, true, NULL) / B;
    dt_model_zero_grads(m);
    dt_model_backward(m, (int)B);
    for (uint32_t i = 0; logits && i < B * N; i++) {
        double want;
        memcpy(&want, logits_at + 8 * i, 8);
        CHECK_MSG(rel(logits[i], want) <= TOL, "%s: logit %u (row %u) is %.9g, PyTorch's %.9g",
                  name, i % N, i / N, logits[i], want);
    }
    CHECK_MSG(rel(loss, want_loss) <= TOL, "%s: loss %.9g, PyTorch's %.9g", name, loss,
              want_loss);

    /* The gradients, tensor by tensor. */
    r->p = tensors_at;
    for (uint32_t t = 0; t < n_tensors && r->ok; t++) {
        char *tname = str_dup(r);
        uint32_t kind = u32(r), rows = u32(r), cols = u32(r);
        size_t count = (size_t)rows * cols;
        take(r, count * 4);
        const uint8_t *want_g = take(r, count * 8);
        uint32_t n_ids = kind == 1 ? u32(r) : 0;
        const uint8_t *ids_at = take(r, (size_t)n_ids * 8);
        if (!r->ok || !tname) {
            free(tname);
            break;
        }
        float *mine = calloc(count + 1, sizeof *mine);
        bool have = false;
        if (kind == 0) {
            int v = dt_arena_find(grads, tname);
            if (v >= 0 && grads->views[v].n_elems == count) {
                memcpy(mine, dt_arena_view_data(grads, v), count * sizeof *mine);
                have = true;
            }
        } else {
            int ti = -1;
            for (int i = 0; i < dt_model_num_tables(m); i++)
                if (strcmp(dt_model_table(m, i)->name, tname) == 0)
                    ti = i;
            const dt_sparse_rows *s = ti >= 0 ? dt_model_table_grad(m, ti) : NULL;
            if (s && s->dim == (int)cols) {
                /* Exactly the rows the batch reads, ascending. */
                CHECK_MSG(s->n == n_ids, "%s: table %s: %zu gradient rows, the batch reads %u",
                          name, tname, s->n, n_ids);
                for (size_t u = 0; u < s->n; u++) {
                    int64_t id = s->ids[u];
                    uint64_t want_id = 0;
                    if (u < n_ids)
                        memcpy(&want_id, ids_at + 8 * u, 8);
                    CHECK_MSG(u < n_ids && id == (int64_t)want_id, "%s: table %s: gradient "
                              "row %zu has id %lld, the script's %lld", name, tname, u,
                              (long long)id, (long long)want_id);
                    if (id >= 0 && (uint64_t)id < rows)
                        memcpy(mine + (size_t)id * cols, s->rows + u * cols, cols * sizeof *mine);
                }
                have = true;
            }
        }
        CHECK_MSG(have, "%s: no gradient for %s", name, tname);
        double worst = 0.0;
        size_t at = 0;
        for (size_t i = 0; have && i < count; i++) {
            double want;
            memcpy(&want, want_g + 8 * i, 8);
            double d = rel(mine[i], want);
            if (!(d <= worst))
                worst = isnan(d) ? INFINITY : d, at = i;
        }
        CHECK_MSG(worst <= TOL, "%s: gradient of %s: element %zu off by %g", name, tname, at,
                  worst);
        free(mine);
        free(tname);
    }
done:
    dt_elem_free(e);
    dt_rowbuf_free(&rb);
    dt_model_destroy(m);
    dt_features_destroy(f);
    for (uint32_t k = 0; k < n_keys; k++)
        free(keys[k]);
    for (uint32_t b = 0; b < B; b++)
        for (uint32_t k = 0; k < n_keys; k++)
            free(cell_text[b][k]);
    free(spec);
}

/* Every model of the fixture on no pool, then on a pool of 3 threads (the cross layers' and
 * the output kernel's products split over it). */
TEST(golden_columns_match_pytorch)
{
    size_t n = 0;
    uint8_t *buf = load_fixture(&n);
    if (!buf)
        return;
    char why[64] = "";
    CHECK_MSG(fixture_valid(buf, n, why, sizeof why), "%s: %s", FIXTURE, why);
    dt_pool *pool = NULL;
    CHECK_OK(dt_pool_create(3, &pool));
    static const char *const expected[] = {"wide_deep", "wide_deep_multiclass", "deepfm",
                                           "dcn_v2_parallel", "dcn_v2_stacked_low_rank"};
    for (int pass = 0; pass < 2 && why[0] == '\0'; pass++) {
        reader r = {buf + 12, buf + n - 4, true};
        uint32_t n_models = u32(&r);
        CHECK(n_models == sizeof expected / sizeof expected[0]);
        for (uint32_t i = 0; i < n_models && r.ok; i++) {
            char *name = str_dup(&r);
            CHECK_MSG(name && i < 5 && strcmp(name, expected[i]) == 0, "model %u is %s", i,
                      name ? name : "?");
            if (name)
                golden_model(&r, name, pass ? pool : NULL);
            free(name);
        }
        CHECK_MSG(r.ok && r.p == r.end, "%s: %zu bytes left after the models", FIXTURE,
                  (size_t)(r.end - r.p));
    }
    dt_pool_destroy(pool);
    free(buf);
}

TEST(golden_columns_fixture_rejects_corruption)
{
    size_t n = 0;
    uint8_t *buf = load_fixture(&n);
    if (!buf)
        return;
    char why[64];
    CHECK(fixture_valid(buf, n, why, sizeof why));
    uint8_t *copy = malloc(n);
    const size_t where[] = {12, n / 3, n / 2, n - 5, n - 1};
    for (size_t k = 0; k < sizeof where / sizeof where[0]; k++) {
        memcpy(copy, buf, n);
        copy[where[k]] ^= 0x04;
        why[0] = '\0';
        CHECK_MSG(!fixture_valid(copy, n, why, sizeof why) && strstr(why, "CRC32C"),
                  "a flipped bit at byte %zu is not detected (%s)", where[k], why);
    }
    CHECK(!fixture_valid(buf, n - 1, why, sizeof why));
    memcpy(copy, buf, n);
    copy[1] = 'X';
    CHECK(!fixture_valid(copy, n, why, sizeof why) && strstr(why, "magic"));
    free(copy);
    free(buf);
}
