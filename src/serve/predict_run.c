/* Batch scoring (dtrain predict, see include/dtrain/predict.h).
 *
 * The input pipeline reads and parses ahead as training's does. Worker threads, each with its
 * own predictor context, take the next batch in turn (a sequence number with it), score it and
 * format its lines outside any lock, then hand the lines to the output: a batch whose turn has
 * come is written at once, with the batches after it that are ready; one scored ahead of its
 * turn is parked in a window of slots and its thread goes on to the next batch, so no thread
 * idles while another is still scoring an earlier batch. The output is in input order whatever
 * the threads, and a batch's scores are written with that batch's rows.
 *
 * The checkpoint's checksum pass (a read of the whole file) runs on a thread of its own while
 * the first batches are parsed and scored: their lines wait in the slots, and nothing is written
 * before the pass has found the file whole. A damaged checkpoint is the run's error, and no
 * score computed from it leaves the process. */
#include "dtrain/predict.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/clock.h"
#include "../data/input_int.h"
#include "float_text.h"
#include "keep.h"

void dt_predict_run_options_default(dt_predict_run_options *o)
{
    memset(o, 0, sizeof *o);
    o->format = DT_PREDICT_TSV;
    o->threads = 1;
    o->batch_size = 256;
}

dt_status dt_predict_format_parse(const char *name, dt_predict_format *out)
{
    static const char *const names[] = {"tsv", "jsonl", "npy"};
    for (int i = 0; i < 3; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (dt_predict_format)i;
            return DT_OK;
        }
    return dt_error(DT_ERR_INVALID, "--format '%s': expected tsv, jsonl or npy", name);
}

/* A growable text buffer for one batch's lines. */
typedef struct {
    char *p;
    size_t n, cap;
} text;

static bool text_reserve(text *t, size_t more)
{
    if (t->n + more <= t->cap)
        return true;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->n + more)
        cap *= 2;
    char *p = realloc(t->p, cap);
    if (!p)
        return false;
    t->p = p, t->cap = cap;
    return true;
}

static bool text_add(text *t, const char *s, size_t n)
{
    if (!text_reserve(t, n))
        return false;
    memcpy(t->p + t->n, s, n);
    t->n += n;
    return true;
}

static bool text_num(text *t, float x)
{
    if (!text_reserve(t, DT_FLOAT_TEXT_MAX))
        return false;
    t->n += dt_float_text(x, t->p + t->n);
    return true;
}

/* A JSON string, escaped. */
static bool text_json_string(text *t, const char *s, size_t n)
{
    bool ok = text_add(t, "\"", 1);
    for (size_t i = 0; ok && i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        if (ch == '"' || ch == '\\')
            ok = text_add(t, "\\", 1) && text_add(t, s + i, 1);
        else if (ch < 0x20)
            ok = text_add(t, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x", ch));
        else
            ok = text_add(t, s + i, 1);
    }
    return ok && text_add(t, "\"", 1);
}

/* The output as messages name it. */
static const char *out_name(const dt_predict_run_options *o)
{
    return o->out && strcmp(o->out, "-") != 0 ? o->out : "stdout";
}

typedef struct run run;

/* A batch formatted ahead of its turn to be written. */
typedef struct {
    text t;
    int rows;
    bool ready;
} slot;

struct run {
    const dt_predict_run_options *o;
    dt_predictor *p;
    dt_input in;
    dt_keep *keep;
    bool keep_label;          /* the one kept column is the row's label */
    int K, cols;              /* outputs, numbers per row written */
    FILE *out;
    pthread_mutex_t in_mu;    /* the input and the sequence numbers */
    uint64_t next_seq;
    bool done;
    pthread_mutex_t mu;       /* the output, the slots and the error */
    pthread_cond_t turn;
    bool verified;            /* the checkpoint's checksum pass passed: lines may be written */
    uint64_t next_write;
    slot *slots;              /* batch seq waits in slots[seq % n_slots] */
    int n_slots;
    dt_status err;
    char msg[1024];
    int64_t rows;
};

static void fail_run(run *r, dt_status st)
{
    pthread_mutex_lock(&r->mu);
    if (!r->err) {
        r->err = st;
        snprintf(r->msg, sizeof r->msg, "%s", dt_last_error());
    }
    pthread_cond_broadcast(&r->turn);
    pthread_mutex_unlock(&r->mu);
}

/* The kept columns of row i: the label, or the raw bytes the keeper appended. */
static bool add_kept_tsv(const run *r, const dt_elem *e, int i, text *t)
{
    if (r->keep_label)
        return text_num(t, e->labels[i]) && text_add(t, "\t", 1);
    if (!r->keep)
        return true;
    size_t a = e->n_bytes ? e->raw_off[i] : 0, b = e->n_bytes ? e->raw_off[i + 1] : 0;
    return text_add(t, (const char *)e->raw + a, b - a) && text_add(t, "\t", 1);
}

static bool add_kept_json(const run *r, const dt_elem *e, int i, text *t)
{
    if (r->keep_label)
        return text_add(t, "\"label\": ", 9) && text_num(t, e->labels[i]) &&
               text_add(t, ", ", 2);
    if (!r->keep)
        return true;
    const char *p = e->n_bytes ? (const char *)e->raw + e->raw_off[i] : "";
    const char *end = e->n_bytes ? (const char *)e->raw + e->raw_off[i + 1] : p;
    bool ok = true;
    for (int c = 0; ok && c < dt_keep_count(r->keep); c++) {
        const char *q = memchr(p, '\t', (size_t)(end - p));
        if (!q)
            q = end;
        const char *name = dt_keep_name(r->keep, c);
        ok = text_json_string(t, name, strlen(name)) && text_add(t, ": ", 2) &&
             text_json_string(t, p, (size_t)(q - p)) && text_add(t, ", ", 2);
        p = q < end ? q + 1 : end;
    }
    return ok;
}

static bool add_numbers(text *t, const float *x, int n, const char *sep)
{
    bool ok = true;
    for (int k = 0; ok && k < n; k++)
        ok = (k == 0 || text_add(t, sep, strlen(sep))) && text_num(t, x[k]);
    return ok;
}

static bool format_json(const run *r, const float *s, const float *z, text *t)
{
    dt_predict_head h = dt_predictor_head(r->p);
    int K = r->K;
    if (h == DT_HEAD_REGRESSION)
        return K == 1 ? text_add(t, "\"value\": ", 9) && text_num(t, s[0])
                      : text_add(t, "\"value\": [", 10) && add_numbers(t, s, K, ", ") &&
                            text_add(t, "]", 1);
    if (h == DT_HEAD_BINARY) {
        bool ok = text_add(t, "\"probability\": ", 15) && text_num(t, s[0]);
        return ok && (!r->o->logits || (text_add(t, ", \"logit\": ", 11) && text_num(t, z[0])));
    }
    bool ok = text_add(t, "\"probabilities\": [", 18) && add_numbers(t, s, K, ", ") &&
              text_add(t, "]", 1);
    return ok && (!r->o->logits || (text_add(t, ", \"logits\": [", 13) &&
                                    add_numbers(t, z, K, ", ") && text_add(t, "]", 1)));
}

/* One batch's output: text lines, or the npy's float32 numbers. */
static bool format_batch(const run *r, const dt_elem *e, const float *s, const float *z, text *t)
{
    int K = r->K;
    bool with_logits = r->o->logits && dt_predictor_head(r->p) != DT_HEAD_REGRESSION;
    bool ok = true;
    for (int i = 0; ok && i < e->n; i++) {
        const float *si = s + (size_t)i * K, *zi = z + (size_t)i * K;
        switch (r->o->format) {
        case DT_PREDICT_NPY:
            ok = text_add(t, (const char *)si, (size_t)K * sizeof(float)) &&
                 (!with_logits || text_add(t, (const char *)zi, (size_t)K * sizeof(float)));
            break;
        case DT_PREDICT_TSV:
            ok = add_kept_tsv(r, e, i, t) && add_numbers(t, si, K, "\t") &&
                 (!with_logits || (text_add(t, "\t", 1) && add_numbers(t, zi, K, "\t"))) &&
                 text_add(t, "\n", 1);
            break;
        case DT_PREDICT_JSONL:
            ok = text_add(t, "{", 1) && add_kept_json(r, e, i, t) && format_json(r, si, zi, t) &&
                 text_add(t, "}\n", 2);
            break;
        }
    }
    return ok;
}

static bool failed(run *r)
{
    pthread_mutex_lock(&r->mu);
    bool f = r->err != DT_OK;
    pthread_mutex_unlock(&r->mu);
    return f;
}

/* Takes the next batch and its place in the output; NULL at the end or after an error. */
static dt_elem *next_batch(run *r, uint64_t *seq)
{
    dt_elem *e = NULL;
    pthread_mutex_lock(&r->in_mu);
    while (!r->done && !e && !failed(r)) {
        dt_status st = dt_dataset_next(r->in.test, &e);
        if (st == DT_END) {
            r->done = true;
        } else if (st) {
            e = NULL;
            fail_run(r, st);
        } else if (e->n == 0) { /* every row of it skipped */
            dt_elem_free(e);
            e = NULL;
        }
    }
    if (e)
        *seq = r->next_seq++;
    pthread_mutex_unlock(&r->in_mu);
    return e;
}

/* Writes the batches whose turn has come, in order, while they are ready (r->mu held). */
static void write_ready(run *r)
{
    slot *w;
    while (!r->err && (w = &r->slots[r->next_write % (uint64_t)r->n_slots])->ready) {
        if (w->t.n > 0 && fwrite(w->t.p, 1, w->t.n, r->out) != w->t.n) {
            r->err = DT_ERR_IO;
            snprintf(r->msg, sizeof r->msg, "%s: write: %s", out_name(r->o), strerror(errno));
            break;
        }
        r->rows += w->rows;
        w->ready = false;
        r->next_write++;
    }
}

/* Hands batch seq's lines to the output: parked in its slot (t takes the slot's spare buffer)
 * and written with any batches after it once its turn comes. Waits only while the window of
 * slots is full; false when the run failed. */
static bool hand_over(run *r, uint64_t seq, text *t, int rows)
{
    pthread_mutex_lock(&r->mu);
    while (!r->err && seq - r->next_write >= (uint64_t)r->n_slots)
        pthread_cond_wait(&r->turn, &r->mu);
    bool ok = !r->err;
    if (ok) {
        slot *s = &r->slots[seq % (uint64_t)r->n_slots];
        text spare = s->t;
        s->t = *t, *t = spare;
        s->rows = rows;
        s->ready = true;
        if (seq == r->next_write && r->verified) {
            write_ready(r);
            pthread_cond_broadcast(&r->turn);
        }
        ok = !r->err;
    }
    pthread_mutex_unlock(&r->mu);
    return ok;
}

static void *worker(void *arg)
{
    run *r = arg;
    dt_predict_ctx *c = NULL;
    int B = dt_predictor_max_batch(r->p);
    float *z = malloc((size_t)B * r->K * sizeof *z), *s = malloc((size_t)B * r->K * sizeof *s);
    text t = {0};
    dt_status st = dt_predict_ctx_new(r->p, &c);
    if (st == DT_OK && (!z || !s))
        st = dt_error(DT_ERR_NOMEM, "no memory for a batch's scores");
    if (st)
        fail_run(r, st);
    uint64_t seq = 0;
    dt_elem *e;
    while (st == DT_OK && (e = next_batch(r, &seq))) {
        t.n = 0;
        st = dt_predict_rows(c, e, DT_PREDICT_LOGITS, z);
        if (st == DT_OK) {
            dt_predict_scores_of_logits(r->p, z, e->n, s);
            if (!format_batch(r, e, s, z, &t))
                st = dt_error(DT_ERR_NOMEM, "no memory for a batch's output");
        }
        if (st)
            fail_run(r, st);
        else if (!hand_over(r, seq, &t, e->n))
            st = DT_ERR_IO;
        dt_elem_free(e);
    }
    free(t.p);
    free(z);
    free(s);
    dt_predict_ctx_free(c);
    return NULL;
}

/* ---- npy: a header whose row count is filled in at the end ---- */

enum { NPY_HEADER = 128 };

static void npy_header(char out[NPY_HEADER], int64_t rows, int cols)
{
    char dict[NPY_HEADER];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': "
                     "(%lld, %d), }", (long long)rows, cols);
    memset(out, ' ', NPY_HEADER);
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (char)(NPY_HEADER - 10), out[9] = 0;
    memcpy(out + 10, dict, (size_t)n);
    out[NPY_HEADER - 1] = '\n';
}

/* ---- The run ---- */

static dt_status open_output(run *r, bool *to_close)
{
    const char *path = r->o->out;
    *to_close = false;
    if (!path || strcmp(path, "-") == 0) {
        r->out = stdout;
        if (r->o->format == DT_PREDICT_NPY)
            return dt_error(DT_ERR_INVALID, "--format npy writes its row count last, into a file "
                            "it can seek in: give --out FILE");
        return DT_OK;
    }
    if (!(r->out = fopen(path, "wb")))
        return dt_error(DT_ERR_IO, "%s: %s", path, strerror(errno));
    *to_close = true;
    if (r->o->format == DT_PREDICT_NPY && lseek(fileno(r->out), 0, SEEK_CUR) < 0)
        return dt_error(DT_ERR_INVALID, "%s: --format npy writes its row count last, into a file "
                        "it can seek in: not a pipe", path);
    return DT_OK;
}

static dt_status setup_keep(run *r, const dt_feature_parser *fp)
{
    const char *cols = r->o->keep_columns;
    if (!cols || !*cols)
        return DT_OK;
    if (r->o->format == DT_PREDICT_NPY)
        return dt_error(DT_ERR_INVALID, "--keep-columns: an npy file holds the scores alone; "
                        "use --format tsv or jsonl");
    if (strcmp(cols, "label") == 0 && !fp) {
        r->keep_label = true;
        return DT_OK;
    }
    if (!fp)
        return dt_error(DT_ERR_INVALID, "--keep-columns '%s': a built-in model's rows keep only "
                        "their label (--keep-columns label); named columns need a feature-spec "
                        "model's raw rows", cols);
    return dt_keep_new(dt_feature_parser_rows(fp), cols, &r->keep);
}

static dt_status open_input(run *r, dt_feature_parser **fp, dt_row_parser *keeper)
{
    const dt_predict_run_options *o = r->o;
    dt_input_options io;
    dt_input_options_for_batch(&io, o->input, o->batch_size);
    io.num_parallel_calls = o->threads;
    io.shuffle_buffer = 0;
    dt_features *f = (dt_features *)dt_predictor_features(r->p);
    const dt_model_spec *ms = dt_predictor_model_spec(r->p);
    dt_status st = DT_OK;
    if (f) {
        if ((st = dt_feature_parser_new(f, fp)))
            return st;
        io.row_parser = dt_feature_parser_rows(*fp);
    } else if (ms->arch != DT_ARCH_SEQUENTIAL && ms->arch != DT_ARCH_COLUMNS) {
        /* Ids past the tables are named with their file and line by the reader. */
        if (io.field_size == 0)
            io.field_size = ms->ctr.field_size;
        if (io.hash_buckets == 0)
            io.max_id = ms->ctr.feature_size;
    }
    if ((st = setup_keep(r, *fp)))
        return st;
    if (r->keep) {
        *keeper = dt_keep_parser(r->keep);
        io.row_parser = keeper;
    }
    dt_input_spec spec;
    if ((st = dt_input_spec_parse(o->data, "--data", &spec)))
        return st;
    if (f && !dt_input_spec_is_files(&spec))
        return dt_error(DT_ERR_INVALID, "--data: a feature-spec model reads csv:, criteo: or "
                        "tfrecord: data, not '%s'", o->data);
    return dt_input_open_test(&spec, &io, &r->in);
}

static dt_status check_options(const dt_predict_run_options *o)
{
    if (!o->model_dir && !o->checkpoint)
        return dt_error(DT_ERR_INVALID, "predict: give --model-dir DIR or --checkpoint FILE");
    if (o->model_dir && o->checkpoint)
        return dt_error(DT_ERR_INVALID, "predict: give --model-dir or --checkpoint, not both");
    if (!o->data)
        return dt_error(DT_ERR_INVALID, "predict: give --data SPEC");
    if (o->threads < 1 || o->threads > 256)
        return dt_error(DT_ERR_INVALID, "--threads: must be in 1..256, got %d", o->threads);
    if (o->batch_size < 1 || o->batch_size > 65536)
        return dt_error(DT_ERR_INVALID, "--batch-size: must be in 1..65536, got %d",
                        o->batch_size);
    return DT_OK;
}

/* The checkpoint's checksum pass, then the lines that waited for it. */
static void *verifier(void *arg)
{
    run *r = arg;
    dt_status st = dt_predictor_verify(r->p);
    if (st) {
        fail_run(r, st);
        return NULL;
    }
    pthread_mutex_lock(&r->mu);
    r->verified = true;
    write_ready(r);
    pthread_cond_broadcast(&r->turn);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static dt_status run_workers(run *r)
{
    pthread_t tids[256];
    int started = 0;
    dt_status st = DT_OK;
    for (; started < r->o->threads; started++)
        if (pthread_create(&tids[started], NULL, worker, r) != 0) {
            st = dt_error(DT_ERR_NOMEM, "predict: cannot start thread %d", started);
            fail_run(r, st);
            break;
        }
    for (int i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    return st;
}

dt_status dt_predict_run(const dt_predict_run_options *o, dt_predict_run_result *res)
{
    memset(res, 0, sizeof *res);
    double t0 = dt_clock_now();
    run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    pthread_mutex_init(&r.in_mu, NULL);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.turn, NULL);
    dt_feature_parser *fp = NULL;
    dt_row_parser keeper;
    bool to_close = false;
    dt_predictor_options po;
    dt_predictor_options_default(&po);
    po.max_batch = o->batch_size;
    po.private_tables = o->private_tables;
    po.log = o->log;
    po.defer_verify = true;
    pthread_t verify_tid;
    bool verifying = false;
    dt_status st = check_options(o);
    if (st || (st = dt_predictor_open(o->model_dir ? o->model_dir : o->checkpoint, &po, &r.p)))
        goto fail;
    /* Room for every thread's batch and one more each, so a thread ahead of a slow one parks a
     * batch and scores the next without waiting, and for some 64k rows scored while the
     * checksum pass runs. */
    r.n_slots = 2 * o->threads + 2 + 65536 / o->batch_size;
    if (!(r.slots = calloc((size_t)r.n_slots, sizeof *r.slots))) {
        st = dt_error(DT_ERR_NOMEM, "no memory for the output's slots");
        goto fail;
    }
    if (pthread_create(&verify_tid, NULL, verifier, &r) != 0) {
        st = dt_error(DT_ERR_NOMEM, "predict: cannot start the checksum thread");
        goto fail;
    }
    verifying = true;
    r.K = dt_predictor_num_outputs(r.p);
    r.cols = r.K * (o->logits && dt_predictor_head(r.p) != DT_HEAD_REGRESSION ? 2 : 1);
    if ((st = open_input(&r, &fp, &keeper)) || (st = open_output(&r, &to_close)))
        goto fail;
    char header[NPY_HEADER];
    if (o->format == DT_PREDICT_NPY) {
        npy_header(header, 0, r.cols);
        if (fwrite(header, 1, NPY_HEADER, r.out) != NPY_HEADER) {
            st = dt_error(DT_ERR_IO, "%s: write: %s", out_name(o),
                          strerror(errno));
            goto fail;
        }
    }
    st = run_workers(&r);
    pthread_join(verify_tid, NULL);
    verifying = false;
    if (r.err)
        st = dt_error(r.err, "%s", r.msg);
    res->rows = r.rows;
    res->bad_records = r.in.bad_records;
    if (st == DT_OK && o->format == DT_PREDICT_NPY) {
        /* The row count is known now: rewrite the header in place (a seekable file only). */
        npy_header(header, r.rows, r.cols);
        if (fflush(r.out) != 0 || fseek(r.out, 0, SEEK_SET) != 0 ||
            fwrite(header, 1, NPY_HEADER, r.out) != NPY_HEADER)
            st = dt_error(DT_ERR_IO, "%s: the npy header: %s (npy needs --out FILE, seekable)",
                          out_name(o), strerror(errno));
    }
    if (st == DT_OK && (fflush(r.out) != 0 || ferror(r.out)))
        st = dt_error(DT_ERR_IO, "%s: write failed", out_name(o));
fail:
    if (verifying) /* a failure before the workers ran: the pass ends on its own */
        pthread_join(verify_tid, NULL);
    if (to_close && fclose(r.out) != 0 && st == DT_OK)
        st = dt_error(DT_ERR_IO, "%s: close: %s", o->out, strerror(errno));
    dt_input_free(&r.in);
    dt_keep_free(r.keep);
    dt_feature_parser_free(fp);
    dt_predictor_close(r.p);
    for (int i = 0; r.slots && i < r.n_slots; i++)
        free(r.slots[i].t.p);
    free(r.slots);
    pthread_mutex_destroy(&r.in_mu);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.turn);
    res->seconds = dt_clock_now() - t0;
    return st;
}
