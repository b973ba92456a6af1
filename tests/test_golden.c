/* Golden test: the built-in mnist_cnn against PyTorch on one batch, fused and unfused.
 *
 * tests/fixtures/golden_cnn.bin is written by `python3 scripts/make_golden.py
 * tests/fixtures/golden_cnn.bin` (PyTorch, float64). It holds a batch of Fashion-MNIST images and
 * labels, the mean cross-entropy loss and the gradient of every parameter for parameters given by
 * a formula (not stored; recomputed here exactly as the script does):
 *   tensor t in dtrain's order (conv2d/kernel, conv2d/bias, dense/kernel, dense/bias,
 *   dense_1/kernel, dense_1/bias), flat index i in dtrain's layout:
 *     h = (i * 2654435761 + 12345 * (t + 1)) mod 2^32
 *     h ^= h >> 16; h = (h * 0x45D9F3B) mod 2^32; h ^= h >> 16     (see the script for why)
 *     value = (float)(scale_t * (h / 2^32 - 0.5))                     computed in double
 *     scale_t = 2 sqrt(6 / (fan_in + fan_out)) for kernels (Keras's Glorot fans), 0.2 for biases
 * The input is image / 255.0f.
 *
 * Fixture format, little-endian, no padding:
 *   8 bytes "DTGOLD01" | u32 version = 1 | u32 batch B | B*784 uint8 images | B uint8 labels |
 *   f64 mean loss | 6 x (u32 name length n | n name bytes | u32 count N | N float32 gradients in
 *   dtrain's layout) | u32 CRC32C (Castagnoli) of every byte before it.
 *
 * Set DTRAIN_GOLDEN_VERBOSE=1 to print the max abs error per tensor on success too. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/arena.h"
#include "../src/nn/convpool.h"
#include "../src/core/crc32c.h"
#include "dtrain/model.h"
#include "dtrain/model_spec.h"
#include "test.h"

#define GOLDEN_PATH "tests/fixtures/golden_cnn.bin"
#define GOLDEN_BATCH 16
#define GOLDEN_PIXELS 784
#define GOLDEN_TENSORS 6
#define GOLDEN_TOL 1e-4
#define GOLDEN_MAX_LINES 5

static const struct {
    const char *name;
    int n_dims;
    int dims[4];
} golden_params[GOLDEN_TENSORS] = {
    {"conv2d/kernel", 4, {3, 3, 1, 32}}, {"conv2d/bias", 1, {32}},
    {"dense/kernel", 2, {5408, 64}},     {"dense/bias", 1, {64}},
    {"dense_1/kernel", 2, {64, 10}},     {"dense_1/bias", 1, {10}},
};

struct golden {
    uint32_t batch;
    const uint8_t *images, *labels;
    double loss;
    uint32_t counts[GOLDEN_TENSORS];
    const uint8_t *grads[GOLDEN_TENSORS]; /* little-endian float32 */
};

static size_t param_elems(int t)
{
    size_t n = 1;
    for (int d = 0; d < golden_params[t].n_dims; d++)
        n *= (size_t)golden_params[t].dims[d];
    return n;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float le_f32(const uint8_t *p)
{
    uint32_t u = le32(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static double le_f64(const uint8_t *p)
{
    uint64_t u = (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* Reads a whole file; NULL (and a message in err) when it cannot. */
static uint8_t *read_all(const char *path, size_t *n_out, char *err, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, cap, "cannot open %s (run from the repo root; regenerate with python3 "
                 "scripts/make_golden.py %s)", path, path);
        return NULL;
    }
    size_t n = 0, size = 1 << 20;
    uint8_t *buf = malloc(size);
    while (buf) {
        n += fread(buf + n, 1, size - n, f);
        if (n < size)
            break;
        uint8_t *bigger = realloc(buf, size *= 2);
        if (!bigger)
            free(buf);
        buf = bigger;
    }
    bool bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        snprintf(err, cap, "cannot read %s", path);
        return NULL;
    }
    *n_out = n;
    return buf;
}

/* Checks and indexes a fixture in memory (g points into buf). False with a message in err when
 * the magic, version, CRC, sizes or tensor names are wrong. */
static bool golden_parse(const uint8_t *buf, size_t n, struct golden *g, char *err, size_t cap)
{
    memset(g, 0, sizeof *g);
    if (n < 8 + 4 + 4 + 4 || memcmp(buf, "DTGOLD01", 8) != 0) {
        snprintf(err, cap, "golden fixture: bad magic or too short (%zu bytes)", n);
        return false;
    }
    uint32_t stored = le32(buf + n - 4), crc = dt_crc32c(buf, n - 4);
    if (stored != crc) {
        snprintf(err, cap, "golden fixture: CRC32C mismatch: stored %08x, computed %08x", stored,
                 crc);
        return false;
    }
    if (le32(buf + 8) != 1) {
        snprintf(err, cap, "golden fixture: version %u, expected 1", le32(buf + 8));
        return false;
    }
    g->batch = le32(buf + 12);
    if (g->batch != GOLDEN_BATCH) {
        snprintf(err, cap, "golden fixture: batch %u, expected %d", g->batch, GOLDEN_BATCH);
        return false;
    }
    size_t pos = 16, end = n - 4;
    size_t need = (size_t)g->batch * GOLDEN_PIXELS + g->batch + 8;
    if (end - pos < need) {
        snprintf(err, cap, "golden fixture: truncated in the images, labels or loss");
        return false;
    }
    g->images = buf + pos;
    pos += (size_t)g->batch * GOLDEN_PIXELS;
    g->labels = buf + pos;
    pos += g->batch;
    g->loss = le_f64(buf + pos);
    pos += 8;
    for (int t = 0; t < GOLDEN_TENSORS; t++) {
        const char *name = golden_params[t].name;
        size_t len = strlen(name);
        if (end - pos < 4 || le32(buf + pos) != len || end - pos - 4 < len + 4 ||
            memcmp(buf + pos + 4, name, len) != 0) {
            snprintf(err, cap, "golden fixture: tensor %d is not %s", t, name);
            return false;
        }
        pos += 4 + len;
        g->counts[t] = le32(buf + pos);
        pos += 4;
        if (g->counts[t] != param_elems(t) || (end - pos) / 4 < g->counts[t]) {
            snprintf(err, cap, "golden fixture: %s has %u elements, expected %zu (or is truncated)",
                     name, g->counts[t], param_elems(t));
            return false;
        }
        g->grads[t] = buf + pos;
        pos += (size_t)4 * g->counts[t];
    }
    if (pos != end) {
        snprintf(err, cap, "golden fixture: %zu unexpected bytes before the CRC", end - pos);
        return false;
    }
    for (uint32_t i = 0; i < g->batch; i++)
        if (g->labels[i] > 9) {
            snprintf(err, cap, "golden fixture: label %u of example %u", g->labels[i], i);
            return false;
        }
    return true;
}

/* The parameter formula (see the top of the file and scripts/make_golden.py). */
static double param_scale(int t)
{
    if (golden_params[t].n_dims == 1)
        return 0.2;
    const int *d = golden_params[t].dims;
    int nd = golden_params[t].n_dims;
    double receptive = 1.0;
    for (int k = 0; k + 2 < nd; k++)
        receptive *= d[k];
    double fan_in = receptive * d[nd - 2], fan_out = receptive * d[nd - 1];
    return 2.0 * sqrt(6.0 / (fan_in + fan_out));
}

static float param_value(int t, uint64_t i, double scale)
{
    uint64_t h = (i * 2654435761u + 12345u * (uint64_t)(t + 1)) & 0xffffffffu;
    h ^= h >> 16;
    h = (h * 0x45D9F3Bu) & 0xffffffffu;
    h ^= h >> 16;
    return (float)(scale * ((double)h / 4294967296.0 - 0.5));
}

static bool env_verbose(void)
{
    const char *v = getenv("DTRAIN_GOLDEN_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}

/* Whether the model reports the conv2d + max_pooling2d pair as fused, from its summary. */
static bool model_reports_fused(const dt_model *m)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return false;
    dt_model_summary(m, f);
    fclose(f);
    bool fused = text && strstr(text, "fused") != NULL;
    free(text);
    return fused;
}

/* Reads and parses the fixture, recording a failure when it cannot; returns the file's bytes
 * (which g points into) or NULL. */
static uint8_t *load_golden(size_t *n, struct golden *g)
{
    char err[512];
    uint8_t *buf = read_all(GOLDEN_PATH, n, err, sizeof err);
    CHECK_MSG(buf != NULL, "%s", err);
    if (!buf)
        return NULL;
    bool parsed = golden_parse(buf, *n, g, err, sizeof err);
    CHECK_MSG(parsed, "the fixture is rejected: %s", err);
    if (!parsed) {
        free(buf);
        return NULL;
    }
    return buf;
}

static void run_golden(bool no_fuse)
{
    const char *path_label = no_fuse ? "unfused" : "fused";
    size_t n = 0;
    struct golden g;
    uint8_t *buf = load_golden(&n, &g);
    if (!buf)
        return;
    const int B = (int)g.batch;

    dt_model_spec spec;
    CHECK_OK(dt_model_spec_builtin("mnist_cnn", &spec));
    spec.input_shape[0] = 28, spec.input_shape[1] = 28, spec.input_shape[2] = 1;
    dt_model_options opts = {.no_fuse = no_fuse};
    dt_model *m = NULL;
    CHECK_OK(dt_model_create(&spec, GOLDEN_BATCH, NULL, &opts, &m));
    if (!m) {
        free(buf);
        return;
    }

    /* The fused kernel runs when asked for and the CPU has AVX2 + FMA. */
    dt_conv_geom cg;
    dt_pool_geom pg;
    CHECK(dt_conv_geom_init(&cg, 28, 28, 1, 3, 3, 32, 1, 1, false));
    CHECK(dt_pool_geom_init(&pg, 26, 26, 32, 2, 2, 2, 2, false));
    bool want_fused = !no_fuse && dt_convpool_supported(&cg, &pg);
    bool fused = model_reports_fused(m);
    CHECK_MSG(fused == want_fused, "%s: the model is %sfused, expected %sfused", path_label,
              fused ? "" : "not ", want_fused ? "" : "not ");
    if (env_verbose() && !no_fuse && !want_fused)
        printf("    note: no AVX2 + FMA here: the fused path runs the generic kernels\n");

    dt_arena *params = dt_model_params(m), *grads = dt_model_grads(m);
    CHECK(params->n_views == GOLDEN_TENSORS);
    int views[GOLDEN_TENSORS];
    bool views_ok = true;
    for (int t = 0; t < GOLDEN_TENSORS; t++) {
        views[t] = dt_arena_find(params, golden_params[t].name);
        int gv = dt_arena_find(grads, golden_params[t].name);
        bool ok = views[t] >= 0 && gv == views[t] &&
                  params->views[views[t]].n_elems == param_elems(t) &&
                  params->views[views[t]].n_dims == golden_params[t].n_dims &&
                  memcmp(params->views[views[t]].dims, golden_params[t].dims,
                         sizeof(int) * (size_t)golden_params[t].n_dims) == 0;
        CHECK_MSG(ok, "view %s missing or not of the expected shape", golden_params[t].name);
        views_ok = views_ok && ok;
    }
    if (!views_ok)
        goto done;
    for (int t = 0; t < GOLDEN_TENSORS; t++) {
        double scale = param_scale(t);
        float *w = dt_arena_view_data(params, views[t]);
        for (size_t i = 0; i < param_elems(t); i++)
            w[i] = param_value(t, i, scale);
    }

    float *x = malloc((size_t)B * GOLDEN_PIXELS * sizeof *x);
    int32_t labels[GOLDEN_BATCH];
    CHECK(x != NULL);
    if (!x)
        goto done;
    for (size_t i = 0; i < (size_t)B * GOLDEN_PIXELS; i++)
        x[i] = (float)g.images[i] / 255.0f;
    for (int i = 0; i < B; i++)
        labels[i] = g.labels[i];

    dt_model_forward(m, B, x, true);
    double loss = dt_model_loss(m, B, labels, 1.0f / (float)B, true, NULL) / B;
    dt_model_zero_grads(m);
    dt_model_backward(m, B);
    free(x);

    CHECK_NEAR(loss, g.loss, GOLDEN_TOL);
    bool verbose = env_verbose();
    if (verbose)
        printf("    %s: loss %.9f, torch %.9f, abs error %.3g\n", path_label, loss, g.loss,
               fabs(loss - g.loss));
    for (int t = 0; t < GOLDEN_TENSORS; t++) {
        const char *name = golden_params[t].name;
        const float *got = dt_arena_view_data(grads, views[t]);
        const uint8_t *want = g.grads[t];
        double max_err = 0.0;
        size_t worst = 0, n_bad = 0;
        for (size_t i = 0; i < g.counts[t]; i++) {
            double a = got[i], b = le_f32(want + 4 * i);
            double e = fabs(a - b);
            if (!(e <= max_err)) /* also catches NaN */
                max_err = e, worst = i;
            /* CHECK_NEAR's test, with a message that names the tensor and the element. */
            bool ok = e <= GOLDEN_TOL * fmax(1.0, fmax(fabs(a), fabs(b)));
            if (!ok && n_bad++ < GOLDEN_MAX_LINES)
                test_fail(__FILE__, __LINE__, "%s %s[%zu]: dtrain %.9g, torch %.9g, differ by more "
                          "than %g", path_label, name, i, a, b, GOLDEN_TOL);
        }
        if (n_bad)
            test_fail(__FILE__, __LINE__, "%s %s: %zu of %u gradients differ from torch by more "
                      "than %g; max abs error %.3g at [%zu]", path_label, name, n_bad, g.counts[t],
                      GOLDEN_TOL, max_err, worst);
        else if (verbose)
            printf("    %s %-15s max abs error %.3g at [%zu]\n", path_label, name, max_err, worst);
    }
done:
    dt_model_destroy(m);
    free(buf);
}

TEST(golden_cnn_fused_matches_torch) { run_golden(false); }

TEST(golden_cnn_unfused_matches_torch) { run_golden(true); }

/* The reader rejects a damaged fixture: the CRC check can fail. */
TEST(golden_fixture_reader_rejects_corruption)
{
    char err[512];
    size_t n = 0;
    struct golden g;
    uint8_t *buf = load_golden(&n, &g);
    if (!buf)
        return;
    uint8_t *copy = malloc(n);
    CHECK(copy != NULL);
    if (copy) {
        /* One bit in the middle (gradient data), in the loss, in an image, in the CRC itself. */
        const size_t where[] = {n / 2, 16 + GOLDEN_BATCH * (GOLDEN_PIXELS + 1) + 3, 100, n - 1};
        for (size_t k = 0; k < sizeof where / sizeof where[0]; k++) {
            memcpy(copy, buf, n);
            copy[where[k]] ^= 0x10;
            err[0] = 0;
            CHECK_MSG(!golden_parse(copy, n, &g, err, sizeof err),
                      "a flipped bit at byte %zu is not detected", where[k]);
            CHECK_MSG(strstr(err, "CRC32C mismatch") != NULL,
                      "byte %zu: message '%s' does not name the CRC", where[k], err);
        }
        /* Truncated, and a wrong magic. */
        CHECK(!golden_parse(buf, n - 1, &g, err, sizeof err));
        memcpy(copy, buf, n);
        copy[0] = 'X';
        CHECK(!golden_parse(copy, n, &g, err, sizeof err) && strstr(err, "magic"));
    }
    free(copy);
    free(buf);
}
