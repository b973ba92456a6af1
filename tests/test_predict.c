/* The predictor: scores equal the logits evaluation computes for the same checkpoint bit for
 * bit, whatever the batch, the thread or the entry point; two threads scoring at once get one
 * thread's scores; its tables are the file's pages, not a copy; a damaged, truncated or
 * foreign checkpoint is one clear error. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain/checkpoint.h"
#include "dtrain/model.h"
#include "dtrain/predict.h"
#include "dtrain/rng.h"
#include "dtrain/saved_model.h"
#include "test.h"
#include "../src/serve/float_text.h"

enum { FIELDS = 6, ROWS = 5000, EMB = 4, N = 300 };

static void deepfm(dt_model_spec *spec)
{
    dt_ctr_spec c;
    dt_ctr_spec_default(&c);
    c.field_size = FIELDS, c.feature_size = ROWS, c.embedding_size = EMB;
    c.n_deep = 2, c.deep_layers[0] = 16, c.deep_layers[1] = 8;
    c.dropout_keep[0] = c.dropout_keep[1] = 0.5f;
    CHECK_OK(dt_model_spec_ctr(DT_ARCH_DEEPFM, &c, spec));
}

/* A model of spec with drawn variables, saved to path as training saves it (its tables whole,
 * its model_spec in the metadata). */
static void save_model(const dt_model_spec *spec, const char *path, uint64_t seed)
{
    dt_model *m = NULL;
    CHECK_OK(dt_model_create(spec, 16, NULL, NULL, &m));
    if (!m)
        return;
    dt_model_init_params(m, seed);
    /* Nonzero first-order weights and biases, so every term shows. */
    dt_rng r;
    dt_rng_seed(&r, seed + 1);
    dt_arena *p = dt_model_params(m);
    for (size_t i = 0; i < p->n_elems; i++)
        p->data[i] += 0.01f * (dt_rng_uniform(&r) - 0.5f);
    for (int t = 0; t < dt_model_num_tables(m); t++) {
        dt_table *tab = dt_model_table(m, t);
        for (size_t i = 0; i < (size_t)tab->rows * tab->dim; i++)
            tab->data[i] += 0.1f * (dt_rng_uniform(&r) - 0.5f);
    }
    dt_arena tables[4];
    const dt_arena *list[6] = {p};
    int n = 1;
    for (int t = 0; t < dt_model_num_tables(m); t++) {
        CHECK_OK(dt_table_arena(dt_model_table(m, t), -1, &tables[t]));
        list[n++] = &tables[t];
    }
    if (dt_model_state(m)->n_views > 0)
        list[n++] = dt_model_state(m);
    char *json = dt_model_spec_to_json(spec);
    dt_ckpt_meta meta[] = {{"model_spec", json}, {"global_step", "7"}};
    CHECK_OK(dt_ckpt_save(path, list, n, meta, 2));
    for (int t = 0; t < dt_model_num_tables(m); t++)
        dt_table_arena_release(&tables[t]);
    free(json);
    dt_model_destroy(m);
}

static dt_elem *random_rows(int n, uint64_t seed)
{
    dt_elem *e = dt_elem_alloc(n, 0, (size_t)n * FIELDS, 0);
    if (!e)
        return NULL;
    dt_rng r;
    dt_rng_seed(&r, seed);
    for (int i = 0; i <= n; i++)
        e->sp_row[i] = (int64_t)i * FIELDS;
    for (int i = 0; i < n * FIELDS; i++) {
        e->sp_ids[i] = (int64_t)dt_rng_below(&r, ROWS);
        e->sp_vals[i] = dt_rng_uniform(&r) * 2.0f;
    }
    for (int i = 0; i < n; i++)
        e->labels[i] = 0;
    return e;
}

/* Evaluation's logits: the model built from the checkpoint read into memory, over a pool of two,
 * in batches of 1000 (dtrain evaluate's default). */
static void reference_logits(const char *path, const dt_elem *e, float *out)
{
    dt_ckpt *c = NULL;
    dt_pool *pool = NULL;
    dt_model *m = NULL;
    CHECK_OK(dt_ckpt_open(path, &c));
    CHECK_OK(dt_pool_create(2, &pool));
    if (c && pool)
        CHECK_OK(dt_saved_model_build(c, NULL, 1000, pool, &m));
    const float *z;
    if (m && dt_model_forward_batch(m, e, false, &z) == DT_OK)
        memcpy(out, z, (size_t)e->n * dt_model_num_outputs(m) * sizeof *out);
    dt_model_destroy(m);
    dt_pool_destroy(pool);
    dt_ckpt_close(c);
}

static void tmp_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "/tmp/dtrain_test_predict_%d_%s", (int)getpid(), name);
}

/* Scores e's rows in chunks of `chunk` through dt_predict_ids. */
static dt_status score_in_chunks(const dt_predictor *p, const dt_elem *e, int chunk,
                                 dt_predict_output what, float *out)
{
    dt_predict_ctx *c = NULL;
    dt_status st = dt_predict_ctx_new(p, &c);
    for (int i = 0; st == DT_OK && i < e->n; i += chunk) {
        int n = e->n - i < chunk ? e->n - i : chunk;
        st = dt_predict_ids(c, n, e->sp_ids + (size_t)i * FIELDS, e->sp_vals + (size_t)i * FIELDS,
                            what, out + i);
    }
    dt_predict_ctx_free(c);
    return st;
}

TEST(predict_equals_evaluation_logits_bit_for_bit_at_any_batch)
{
    char path[256];
    tmp_path(path, sizeof path, "deepfm.safetensors");
    dt_model_spec spec;
    deepfm(&spec);
    save_model(&spec, path, 11);
    dt_elem *e = random_rows(N, 5);
    float ref[N], got[N], probs[N];
    reference_logits(path, e, ref);
    dt_predictor_options o;
    dt_predictor_options_default(&o);
    o.max_batch = 64;
    dt_predictor *p = NULL;
    CHECK_OK(dt_predictor_open(path, &o, &p));
    if (p && e) {
        CHECK(dt_predictor_head(p) == DT_HEAD_BINARY && dt_predictor_num_outputs(p) == 1);
        CHECK(dt_predictor_field_size(p) == FIELDS && dt_predictor_step(p) == 7);
        int chunks[] = {1, 7, 64};
        for (int k = 0; k < 3; k++) {
            memset(got, 0, sizeof got);
            CHECK_OK(score_in_chunks(p, e, chunks[k], DT_PREDICT_LOGITS, got));
            CHECK_MSG(memcmp(got, ref, sizeof got) == 0, "chunks of %d: logits differ from "
                      "evaluation's (row 0: %.9g vs %.9g)", chunks[k], got[0], ref[0]);
        }
        /* Tables copied into the process rather than mapped: the same logits. */
        dt_predictor *q = NULL;
        o.private_tables = true, o.populate = true;
        CHECK_OK(dt_predictor_open(path, &o, &q));
        if (q) {
            memset(got, 0, sizeof got);
            CHECK_OK(score_in_chunks(q, e, 7, DT_PREDICT_LOGITS, got));
            CHECK(memcmp(got, ref, sizeof got) == 0);
        }
        dt_predictor_close(q);
        CHECK_OK(score_in_chunks(p, e, 64, DT_PREDICT_SCORES, probs));
        for (int i = 0; i < N; i++)
            CHECK_NEAR(probs[i], 1.0 / (1.0 + exp(-(double)ref[i])), 1e-6);
        /* The rows API on the pipeline's element, in one batch of at most max_batch. */
        dt_predict_ctx *c = NULL;
        CHECK_OK(dt_predict_ctx_new(p, &c));
        CHECK_ERR(dt_predict_rows(c, e, DT_PREDICT_LOGITS, got), DT_ERR_INVALID, "1..64");
        dt_predict_ctx_free(c);
    }
    dt_predictor_close(p);
    dt_elem_free(e);
    unlink(path);
}

typedef struct {
    const dt_predictor *p;
    const dt_elem *e;
    int chunk;
    float out[N];
    dt_status st;
} thread_job;

static void *score_thread(void *arg)
{
    thread_job *j = arg;
    for (int rep = 0; rep < 20 && j->st == DT_OK; rep++)
        j->st = score_in_chunks(j->p, j->e, j->chunk, DT_PREDICT_SCORES, j->out);
    return NULL;
}

TEST(predict_two_threads_at_once_give_one_threads_scores)
{
    char path[256];
    tmp_path(path, sizeof path, "threads.safetensors");
    dt_model_spec spec;
    deepfm(&spec);
    save_model(&spec, path, 12);
    dt_elem *e = random_rows(N, 6);
    dt_predictor *p = NULL;
    CHECK_OK(dt_predictor_open(path, NULL, &p));
    if (p && e) {
        float one[N];
        CHECK_OK(score_in_chunks(p, e, 256, DT_PREDICT_SCORES, one));
        thread_job jobs[2] = {{p, e, 13, {0}, DT_OK}, {p, e, 100, {0}, DT_OK}};
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            CHECK(pthread_create(&t[i], NULL, score_thread, &jobs[i]) == 0);
        for (int i = 0; i < 2; i++) {
            pthread_join(t[i], NULL);
            CHECK_OK(jobs[i].st);
            CHECK(memcmp(jobs[i].out, one, sizeof one) == 0);
        }
    }
    dt_predictor_close(p);
    dt_elem_free(e);
    unlink(path);
}

/* The tables are read where they lie in the mapped file: the predictor's table of fm_v is the
 * file's bytes (a write to the file shows through the mapping) and costs no copy. */
TEST(predict_tables_are_the_mapped_file)
{
    char path[256];
    tmp_path(path, sizeof path, "mapped.safetensors");
    dt_model_spec spec;
    deepfm(&spec);
    save_model(&spec, path, 13);
    dt_predictor *p = NULL;
    CHECK_OK(dt_predictor_open(path, NULL, &p));
    dt_ckpt *c = NULL;
    CHECK_OK(dt_ckpt_open(path, &c));
    if (p && c) {
        const dt_ckpt_tensor *v = dt_ckpt_find(c, "fm_v");
        CHECK(v != NULL);
        /* Row 0 of fm_v, overwritten in the file with a value training never gives. */
        FILE *f = fopen(path, "r+b");
        CHECK(f != NULL);
        if (f && v) {
            uint64_t n;
            CHECK(fread(&n, 8, 1, f) == 1);
            /* The tensor's offset in the data section: its place in the copy read above. */
            const uint8_t *base = NULL;
            for (int i = 0; i < dt_ckpt_n_tensors(c); i++) {
                const dt_ckpt_tensor *t = dt_ckpt_tensor_at(c, i);
                if (!base || (const uint8_t *)t->data < base)
                    base = t->data;
            }
            long off = (long)(8 + n + (size_t)((const uint8_t *)v->data - base));
            float big = 1000.0f;
            CHECK(fseek(f, off, SEEK_SET) == 0 && fwrite(&big, 4, 1, f) == 1);
            fclose(f);
            dt_predict_ctx *ctx = NULL;
            CHECK_OK(dt_predict_ctx_new(p, &ctx));
            int64_t ids[FIELDS] = {0, 1, 2, 3, 4, 5};
            float vals[FIELDS] = {1, 0, 0, 0, 0, 0}, z = 0;
            CHECK_OK(dt_predict_ids(ctx, 1, ids, vals, DT_PREDICT_LOGITS, &z));
            /* The FM term of one field is 0, but the MLP sees 1000 in its input: a logit far
             * from a model of small weights. */
            CHECK_MSG(fabsf(z) > 1.0f, "logit %g: the table is not the file's", z);
            dt_predict_ctx_free(ctx);
        }
    }
    dt_ckpt_close(c);
    dt_predictor_close(p);
    unlink(path);
}

TEST(predict_dense_model_equals_evaluation)
{
    char path[256];
    tmp_path(path, sizeof path, "mlp.safetensors");
    dt_model_spec spec;
    CHECK_OK(dt_model_spec_builtin("mnist_cnn", &spec));
    spec.input_shape[0] = 28, spec.input_shape[1] = 28, spec.input_shape[2] = 1;
    save_model(&spec, path, 14);
    enum { M = 37 };
    dt_elem *e = dt_elem_alloc(M, 784, 0, 0);
    dt_rng r;
    dt_rng_seed(&r, 3);
    for (size_t i = 0; e && i < (size_t)M * 784; i++)
        e->dense[i] = dt_rng_uniform(&r);
    for (int i = 0; e && i <= M; i++)
        e->sp_row[i] = 0, e->labels[i < M ? i : 0] = 0;
    float ref[M * 10], got[M * 10], probs[M * 10];
    if (e)
        reference_logits(path, e, ref);
    dt_predictor *p = NULL;
    CHECK_OK(dt_predictor_open(path, NULL, &p));
    if (p && e) {
        CHECK(dt_predictor_head(p) == DT_HEAD_MULTICLASS && dt_predictor_num_outputs(p) == 10);
        CHECK(dt_predictor_dense_width(p) == 784);
        dt_predict_ctx *c = NULL;
        CHECK_OK(dt_predict_ctx_new(p, &c));
        for (int i = 0; i < M; i += 5) {
            int n = M - i < 5 ? M - i : 5;
            CHECK_OK(dt_predict_dense(c, n, e->dense + (size_t)i * 784, DT_PREDICT_LOGITS,
                                      got + i * 10));
        }
        CHECK(memcmp(got, ref, sizeof got) == 0);
        CHECK_OK(dt_predict_dense(c, M, e->dense, DT_PREDICT_SCORES, probs));
        for (int i = 0; i < M; i++) {
            double sum = 0;
            for (int k = 0; k < 10; k++)
                sum += probs[i * 10 + k];
            CHECK_NEAR(sum, 1.0, 1e-5);
        }
        CHECK_ERR(dt_predict_ids(c, 1, (int64_t[]){0}, (float[]){1}, DT_PREDICT_SCORES, probs),
                  DT_ERR_INVALID, "lr, fm and deepfm");
        dt_predict_ctx_free(c);
    }
    dt_predictor_close(p);
    dt_elem_free(e);
    unlink(path);
}

/* Copies the first n bytes of src to dst. */
static void copy_prefix(const char *src, const char *dst, long n)
{
    FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
    CHECK(a && b);
    for (long i = 0; a && b && i < n; i++) {
        int ch = fgetc(a);
        if (ch == EOF)
            break;
        fputc(ch, b);
    }
    if (a)
        fclose(a);
    if (b)
        fclose(b);
}

TEST(predict_refuses_truncated_foreign_and_bad_ids)
{
    char path[256], cut[256], foreign[256];
    tmp_path(path, sizeof path, "good.safetensors");
    tmp_path(cut, sizeof cut, "cut.safetensors");
    tmp_path(foreign, sizeof foreign, "foreign.safetensors");
    dt_model_spec spec;
    deepfm(&spec);
    save_model(&spec, path, 15);
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    copy_prefix(path, cut, (long)sb.st_size - 100);
    dt_predictor *p = NULL;
    CHECK_ERR(dt_predictor_open(cut, NULL, &p), DT_ERR_FORMAT, cut);
    CHECK(p == NULL);
    /* A safetensors file of another tool: no format metadata. */
    dt_arena a;
    dt_arena_init(&a);
    CHECK_OK(dt_arena_add(&a, "w", 1, (int[]){3}, NULL));
    CHECK_OK(dt_arena_commit(&a));
    const dt_arena *list[] = {&a};
    CHECK_OK(dt_ckpt_save(foreign, list, 1, NULL, 0));
    CHECK_ERR(dt_predictor_open(foreign, NULL, &p), DT_ERR_FORMAT, "model_spec");
    dt_arena_free(&a);
    CHECK_ERR(dt_predictor_open("/nonexistent/dir/x", NULL, &p), DT_ERR_IO, "/nonexistent");
    /* The same checkpoint marked as another format version (the header is not checksummed). */
    char older[256];
    tmp_path(older, sizeof older, "older.safetensors");
    FILE *f = fopen(path, "rb");
    char *buf = malloc((size_t)sb.st_size);
    CHECK(f && buf && fread(buf, 1, (size_t)sb.st_size, f) == (size_t)sb.st_size);
    if (f)
        fclose(f);
    char *at = buf ? memmem(buf, (size_t)sb.st_size, "dtrain-ckpt-1", 13) : NULL;
    CHECK(at != NULL);
    if (at) {
        at[12] = '0';
        FILE *g = fopen(older, "wb");
        CHECK(g && fwrite(buf, 1, (size_t)sb.st_size, g) == (size_t)sb.st_size);
        if (g)
            fclose(g);
        CHECK_ERR(dt_predictor_open(older, NULL, &p), DT_ERR_FORMAT, "another version");
    }
    free(buf);
    unlink(older);
    CHECK_OK(dt_predictor_open(path, NULL, &p));
    if (p) {
        dt_predict_ctx *c = NULL;
        CHECK_OK(dt_predict_ctx_new(p, &c));
        int64_t ids[2 * FIELDS] = {0};
        float vals[2 * FIELDS] = {0}, out[2];
        ids[FIELDS + 3] = ROWS; /* row 1, field 3: past the table */
        CHECK_ERR(dt_predict_ids(c, 2, ids, vals, DT_PREDICT_SCORES, out), DT_ERR_INVALID,
                  "example 1 of the batch, field 4");
        CHECK_ERR(dt_predict_lines(c, NULL, 1, (const char *const[]){"x"}, (size_t[]){1},
                                   DT_PREDICT_SCORES, out), DT_ERR_INVALID, "feature-spec");
        dt_predict_ctx_free(c);
    }
    dt_predictor_close(p);
    unlink(path);
    unlink(cut);
    unlink(foreign);
}

static void read_all(const char *path, char **buf, size_t *n)
{
    FILE *f = fopen(path, "rb");
    *buf = NULL, *n = 0;
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc((size_t)len + 1);
    if (*buf)
        *n = fread(*buf, 1, (size_t)len, f);
    fclose(f);
}

/* dtrain predict's runner: batches scored on 3 threads at once are written in input order, the
 * same bytes as one thread's (the threads' hand-over is what ThreadSanitizer watches here). */
TEST(predict_run_on_three_threads_writes_one_threads_bytes)
{
    char path[256], data[256], out1[256], out3[256];
    tmp_path(path, sizeof path, "run.safetensors");
    tmp_path(data, sizeof data, "run.libsvm");
    tmp_path(out1, sizeof out1, "run1.tsv");
    tmp_path(out3, sizeof out3, "run3.tsv");
    dt_model_spec spec;
    deepfm(&spec);
    save_model(&spec, path, 16);
    FILE *f = fopen(data, "w");
    dt_rng r;
    dt_rng_seed(&r, 9);
    for (int i = 0; f && i < 700; i++) {
        fprintf(f, "%d", i % 2);
        for (int k = 0; k < FIELDS; k++)
            fprintf(f, " %llu:%.3f", (unsigned long long)dt_rng_below(&r, ROWS),
                    dt_rng_uniform(&r));
        fputc('\n', f);
    }
    CHECK(f && fclose(f) == 0);
    char spec_text[300];
    snprintf(spec_text, sizeof spec_text, "libsvm:%s", data);
    dt_predict_run_options o;
    dt_predict_run_options_default(&o);
    o.checkpoint = path, o.data = spec_text, o.keep_columns = "label", o.logits = true;
    dt_predict_run_result res;
    o.out = out1, o.threads = 1, o.batch_size = 64;
    CHECK_OK(dt_predict_run(&o, &res));
    CHECK(res.rows == 700);
    o.out = out3, o.threads = 3, o.batch_size = 5;
    CHECK_OK(dt_predict_run(&o, &res));
    CHECK(res.rows == 700);
    char *a, *b;
    size_t na, nb;
    read_all(out1, &a, &na);
    read_all(out3, &b, &nb);
    CHECK(a && b && na > 700 * 10 && na == nb && memcmp(a, b, na) == 0);
    free(a);
    free(b);
    unlink(path), unlink(data), unlink(out1), unlink(out3);
}

/* defer_verify: a damaged checkpoint opens and scores, and dt_predictor_verify names it; a
 * whole one verifies (and again at once); dt_predict_run, which verifies while it scores,
 * fails on the damaged one and writes no score. */
TEST(predict_deferred_checksum_pass_finds_a_damaged_checkpoint)
{
    char path[256], bad[256], data[256], out[256];
    tmp_path(path, sizeof path, "whole.safetensors");
    tmp_path(bad, sizeof bad, "damaged.safetensors");
    tmp_path(data, sizeof data, "damaged.libsvm");
    tmp_path(out, sizeof out, "damaged.tsv");
    dt_model_spec spec;
    deepfm(&spec);
    save_model(&spec, path, 17);
    char *buf;
    size_t n;
    read_all(path, &buf, &n);
    CHECK(buf && n > 1000);
    if (!buf)
        return;
    buf[n - 1] ^= 0x40; /* the last tensor's last byte */
    FILE *f = fopen(bad, "wb");
    CHECK(f && fwrite(buf, 1, n, f) == n);
    if (f)
        fclose(f);
    free(buf);
    dt_predictor *p = NULL;
    CHECK_ERR(dt_predictor_open(bad, NULL, &p), DT_ERR_FORMAT, "checksum mismatch");
    dt_predictor_options o;
    dt_predictor_options_default(&o);
    o.defer_verify = true;
    CHECK_OK(dt_predictor_open(bad, &o, &p));
    if (p) {
        float scores[8];
        dt_elem *e = random_rows(8, 3);
        CHECK(e != NULL);
        if (e)
            CHECK_OK(score_in_chunks(p, e, 8, DT_PREDICT_SCORES, scores));
        dt_elem_free(e);
        CHECK_ERR(dt_predictor_verify(p), DT_ERR_FORMAT, bad);
        dt_predictor_close(p);
        p = NULL;
    }
    CHECK_OK(dt_predictor_open(path, &o, &p));
    if (p) {
        CHECK_OK(dt_predictor_verify(p));
        CHECK_OK(dt_predictor_verify(p));
        dt_predictor_close(p);
    }
    f = fopen(data, "w");
    for (int i = 0; f && i < 300; i++) {
        fprintf(f, "1");
        for (int k = 0; k < FIELDS; k++)
            fprintf(f, " %d:1", (i * 7 + k) % ROWS);
        fputc('\n', f);
    }
    CHECK(f && fclose(f) == 0);
    char spec_text[300];
    snprintf(spec_text, sizeof spec_text, "libsvm:%s", data);
    dt_predict_run_options ro;
    dt_predict_run_options_default(&ro);
    ro.checkpoint = bad, ro.data = spec_text, ro.out = out, ro.threads = 2, ro.batch_size = 4;
    dt_predict_run_result res;
    CHECK_ERR(dt_predict_run(&ro, &res), DT_ERR_FORMAT, "checksum mismatch");
    CHECK(res.rows == 0);
    struct stat sb;
    CHECK(stat(out, &sb) != 0 || sb.st_size == 0);
    unlink(path), unlink(bad), unlink(data), unlink(out);
}

/* Scores are written as "%.9g" writes them, byte for byte: floats sampled over every bit
 * pattern (zeros, subnormals, infinities and NaNs included), every float in [0.5, 1), where
 * probabilities are, and the floats around each power of ten, where the exponent and the
 * rounding turn over. */
static int float_text_differs(float x, int *shown)
{
    char want[DT_FLOAT_TEXT_MAX], got[DT_FLOAT_TEXT_MAX];
    snprintf(want, sizeof want, "%.9g", (double)x);
    size_t n = dt_float_text(x, got);
    if (strcmp(want, got) == 0 && n == strlen(want))
        return 0;
    if ((*shown)++ < 5)
        test_fail(__FILE__, __LINE__, "%a: printf writes '%s', dt_float_text '%s'", x, want, got);
    return 1;
}

static float float_of_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

TEST(predict_float_text_is_printf_9g)
{
    int shown = 0;
    long bad = 0;
    for (uint64_t u = 0; u <= 0xffffffffull; u += 4093)
        bad += float_text_differs(float_of_bits((uint32_t)u), &shown);
    uint32_t half = 0x3f000000u; /* 0.5f */
    for (uint32_t i = 0; i < (1u << 23); i += 3)
        bad += float_text_differs(float_of_bits(half + i), &shown);
    for (int k = -22; k <= 10; k++) {
        char s[32];
        snprintf(s, sizeof s, "1e%d", k);
        float p = strtof(s, NULL);
        uint32_t v;
        memcpy(&v, &p, sizeof v);
        for (int d = -300; d <= 300; d++) {
            bad += float_text_differs(float_of_bits(v + (uint32_t)d), &shown);
            bad += float_text_differs(-float_of_bits(v + (uint32_t)d), &shown);
        }
    }
    CHECK(bad == 0);
}
