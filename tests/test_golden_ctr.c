/* Golden test: DeepFM's logits, loss and gradients (dense and the tables' rows) for fixed
 * weights on a small batch against PyTorch in float64.
 *
 * tests/fixtures/golden_deepfm.bin is written by `python3 scripts/make_golden_ctr.py
 * tests/fixtures/golden_deepfm.bin`; the script documents the model, the weights' formula (not
 * stored: recomputed here), the batch and the format. The tables' gradients are stored dense:
 * dtrain's sparse rows, scattered, must equal them, and rows outside them must be zero there. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/crc32c.h"
#include "dtrain/model.h"
#include "test.h"

#define FIXTURE "tests/fixtures/golden_deepfm.bin"
#define TOL 1e-5

enum { N_TENSORS = 9 };

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
    uint32_t v = 0;
    const uint8_t *b = take(r, 4);
    if (b)
        v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return v;
}

/* The script's weights: element i of tensor t. */
static float formula(int t, size_t i, double scale)
{
    uint64_t h = ((uint64_t)i * 2654435761u + 12345u * (uint64_t)(t + 1)) % 4294967296u;
    h ^= h >> 16;
    h = (h * 0x45D9F3Bu) % 4294967296u;
    h ^= h >> 16;
    return (float)(scale * ((double)h / 4294967296.0 - 0.5));
}

static double glorot(double fan_in, double fan_out) { return 2.0 * sqrt(6.0 / (fan_in + fan_out)); }

static void fill(float *dst, size_t n, int t, double scale)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = formula(t, i, scale);
}

TEST(golden_deepfm_matches_pytorch)
{
    size_t size = 0;
    FILE *f = fopen(FIXTURE, "rb");
    CHECK_MSG(f != NULL, "%s is missing: python3 scripts/make_golden_ctr.py %s", FIXTURE, FIXTURE);
    if (!f)
        return;
    uint8_t *buf = malloc(1 << 16);
    size = fread(buf, 1, 1 << 16, f);
    fclose(f);
    CHECK(size > 12 && memcmp(buf, "DTGOLDCT", 8) == 0);
    uint32_t crc = size >= 4 ? (uint32_t)buf[size - 4] | (uint32_t)buf[size - 3] << 8 |
                                   (uint32_t)buf[size - 2] << 16 | (uint32_t)buf[size - 1] << 24
                             : 0;
    CHECK_MSG(size >= 4 && dt_crc32c(buf, size - 4) == crc, "%s: checksum mismatch", FIXTURE);
    reader r = {buf + 8, buf + size - 4, true};
    uint32_t version = u32(&r), B = u32(&r), F = u32(&r), K = u32(&r), rows = u32(&r);
    CHECK(r.ok && version == 1 && B == 6 && F == 5 && K == 4 && rows == 40);
    if (!r.ok || B != 6) {
        free(buf);
        return;
    }
    const uint8_t *ids_b = take(&r, (size_t)B * F * 8), *vals_b = take(&r, (size_t)B * F * 4);
    const uint8_t *labels_b = take(&r, (size_t)B * 4), *logits_b = take(&r, (size_t)B * 8);
    const uint8_t *loss_b = take(&r, 8);
    CHECK(r.ok);
    dt_elem *e = dt_elem_alloc((int)B, 0, (size_t)B * F, 0);
    for (uint32_t i = 0; i <= B; i++)
        e->sp_row[i] = (int64_t)i * F;
    memcpy(e->sp_ids, ids_b, (size_t)B * F * 8);
    memcpy(e->sp_vals, vals_b, (size_t)B * F * 4);
    memcpy(e->labels, labels_b, (size_t)B * 4);

    dt_ctr_spec c;
    dt_ctr_spec_default(&c);
    c.field_size = (int)F, c.feature_size = rows, c.embedding_size = (int)K;
    c.n_deep = 2, c.deep_layers[0] = 8, c.deep_layers[1] = 6;
    c.dropout_keep[0] = c.dropout_keep[1] = 1.0f;
    dt_model_spec spec;
    dt_model *m = NULL;
    CHECK_OK(dt_model_spec_ctr(DT_ARCH_DEEPFM, &c, &spec));
    CHECK_OK(dt_model_create(&spec, (int)B, NULL, NULL, &m));
    if (!m) {
        dt_elem_free(e);
        free(buf);
        return;
    }
    /* The weights, tensor by tensor in the script's order. */
    dt_arena *params = dt_model_params(m);
    const int widths[4] = {(int)(F * K), 8, 6, 1};
    fill(dt_arena_view_data(params, dt_arena_find(params, "fm_b")), 1, 0, 0.2);
    for (int li = 0; li < 3; li++) {
        char kname[32], bname[32];
        snprintf(kname, sizeof kname, li ? "dense_%d/kernel" : "dense/kernel", li);
        snprintf(bname, sizeof bname, li ? "dense_%d/bias" : "dense/bias", li);
        int kv = dt_arena_find(params, kname), bv = dt_arena_find(params, bname);
        CHECK(kv >= 0 && bv >= 0);
        fill(dt_arena_view_data(params, kv), (size_t)widths[li] * widths[li + 1], 1 + 2 * li,
             glorot(widths[li], widths[li + 1]));
        fill(dt_arena_view_data(params, bv), (size_t)widths[li + 1], 2 + 2 * li, 0.2);
    }
    fill(dt_model_table(m, 0)->data, rows, 7, 0.2);
    fill(dt_model_table(m, 1)->data, (size_t)rows * K, 8, 1.0);

    const float *logits = NULL;
    CHECK_OK(dt_model_forward_batch(m, e, true, &logits));
    int32_t labels[6];
    for (uint32_t i = 0; i < B; i++)
        labels[i] = (int32_t)e->labels[i];
    double loss = dt_model_loss(m, (int)B, labels, 1.0f / (float)B, true, NULL) / B;
    dt_model_zero_grads(m);
    dt_model_backward(m, (int)B);
    for (uint32_t i = 0; i < B; i++) {
        double want;
        memcpy(&want, logits_b + 8 * i, 8);
        CHECK_NEAR(logits[i], want, TOL);
    }
    double want_loss;
    memcpy(&want_loss, loss_b, 8);
    CHECK_NEAR(loss, want_loss, TOL);

    /* The gradients: the arena's by name, the tables' scattered from their rows. */
    dt_arena *grads = dt_model_grads(m);
    int seen = 0;
    for (int t = 0; t < N_TENSORS && r.ok; t++) {
        uint32_t nlen = u32(&r);
        const char *name = take(&r, nlen);
        uint32_t count = u32(&r);
        const uint8_t *g = take(&r, (size_t)count * 4);
        if (!r.ok || nlen >= 64)
            break;
        char key[64];
        memcpy(key, name, nlen);
        key[nlen] = '\0';
        float *mine = calloc(count, sizeof *mine);
        int v = dt_arena_find(grads, key);
        if (v >= 0 && grads->views[v].n_elems == count) {
            memcpy(mine, dt_arena_view_data(grads, v), (size_t)count * 4);
        } else {
            int tab = strcmp(key, "fm_w") == 0 ? 0 : strcmp(key, "fm_v") == 0 ? 1 : -1;
            CHECK_MSG(tab >= 0, "gradient %s: no such variable", key);
            const dt_sparse_rows *s = tab >= 0 ? dt_model_table_grad(m, tab) : NULL;
            for (size_t u = 0; s && u < s->n; u++)
                for (int k = 0; k < s->dim; k++)
                    mine[(size_t)s->ids[u] * (size_t)s->dim + (size_t)k] = s->rows[u * (size_t)s->dim + (size_t)k];
        }
        double worst = 0.0;
        for (uint32_t i = 0; i < count; i++) {
            float want;
            memcpy(&want, g + 4 * i, 4);
            double d = fabs((double)mine[i] - want) / fmax(1.0, fabs(want));
            worst = d > worst ? d : worst;
        }
        CHECK_MSG(worst <= TOL, "gradient %s: off by %g", key, worst);
        free(mine);
        seen++;
    }
    CHECK(seen == N_TENSORS);
    dt_model_destroy(m);
    dt_elem_free(e);
    free(buf);
}
