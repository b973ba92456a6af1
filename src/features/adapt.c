/* Adapt passes (features.h): one read of the training data computes what the spec leaves to the
 * data, as Keras's preprocessing layers' adapt() does: a "standardize" normalizer's mean and
 * deviation (Normalization), a bucketized column's {"num_bins": N} boundaries (Discretization),
 * a "vocabulary" column's tokens (StringLookup).
 *
 * The data is read as training reads it, raw lines or records batched and handed to the parse
 * threads, whose parser records statistics instead of rows: each thread's scratch holds its own
 * sums, values and token counts, merged into the pass's totals when the scratch is freed.
 *
 * What the results are, exactly (docs/FEATURES.md):
 *   mean and std over the values present, std the population deviation (at least 1e-7);
 *   boundaries: the sorted values at ranks floor(i n / N), i = 1 .. N-1, repeats dropped (exact
 *     quantiles, where Keras approximates them);
 *   vocabulary: the tokens seen at least min_count times, most frequent first, ties in byte
 *     order, at most max_tokens of them (the OOV buckets come on top). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/input.h"
#include "dtrain/log.h"
#include "features_int.h"
#include "fingerprint.h"

#define ADAPT_BATCH 1024

/* ---- Token counts ---- */

typedef struct {
    char *blob;           /* tokens, back to back */
    size_t blob_len, blob_cap;
    size_t *off;          /* (cap) offset of each slot's token; valid where count > 0 */
    uint32_t *len;
    uint64_t *hash;
    int64_t *count;       /* 0: empty */
    size_t cap, n;
} counts;

static void counts_free(counts *c)
{
    free(c->blob), free(c->off), free(c->len), free(c->hash), free(c->count);
    memset(c, 0, sizeof *c);
}

static dt_status counts_rehash(counts *c, size_t cap)
{
    counts n = {.blob = c->blob, .blob_len = c->blob_len, .blob_cap = c->blob_cap, .cap = cap,
                .n = c->n};
    n.off = malloc(cap * sizeof *n.off);
    n.len = malloc(cap * sizeof *n.len);
    n.hash = malloc(cap * sizeof *n.hash);
    n.count = calloc(cap, sizeof *n.count);
    if (!n.off || !n.len || !n.hash || !n.count) {
        free(n.off), free(n.len), free(n.hash), free(n.count);
        return dt_error(DT_ERR_NOMEM, "no memory to count tokens");
    }
    for (size_t i = 0; i < c->cap; i++) {
        if (c->count[i] == 0)
            continue;
        size_t j = c->hash[i] & (cap - 1);
        while (n.count[j])
            j = (j + 1) & (cap - 1);
        n.off[j] = c->off[i], n.len[j] = c->len[i], n.hash[j] = c->hash[i];
        n.count[j] = c->count[i];
    }
    free(c->off), free(c->len), free(c->hash), free(c->count);
    *c = n;
    return DT_OK;
}

static dt_status counts_add(counts *c, const char *tok, size_t len, uint64_t h, int64_t k)
{
    if (2 * (c->n + 1) > c->cap) {
        dt_status st = counts_rehash(c, c->cap ? 2 * c->cap : 1024);
        if (st)
            return st;
    }
    size_t j = h & (c->cap - 1);
    while (c->count[j]) {
        if (c->hash[j] == h && c->len[j] == len && memcmp(c->blob + c->off[j], tok, len) == 0) {
            c->count[j] += k;
            return DT_OK;
        }
        j = (j + 1) & (c->cap - 1);
    }
    if (len > UINT32_MAX)
        return dt_error(DT_ERR_FORMAT, "a token of %zu bytes", len);
    if (c->blob_len + len > c->blob_cap) {
        size_t cap = c->blob_cap ? c->blob_cap : 4096;
        while (cap < c->blob_len + len)
            cap *= 2;
        char *b = realloc(c->blob, cap);
        if (!b)
            return dt_error(DT_ERR_NOMEM, "no memory to count tokens");
        c->blob = b, c->blob_cap = cap;
    }
    memcpy(c->blob + c->blob_len, tok, len);
    c->off[j] = c->blob_len, c->len[j] = (uint32_t)len, c->hash[j] = h, c->count[j] = k;
    c->blob_len += len;
    c->n++;
    return DT_OK;
}

/* ---- Per column ---- */

/* A sum kept as an unevaluated pair hi + lo (double-double: about 106 bits), added to with
 * error-free transformations. Threads parse rows in no fixed order and their sums merge in the
 * order they finish; at this precision the rounded result is the same whatever the order (but
 * for sums within 2^-106 of a rounding boundary), so an adapt pass gives the same mean and
 * deviation on one thread or many, on every worker. */
typedef struct {
    double hi, lo;
} dsum;

static void dsum_add(dsum *s, double x)
{
    double t = s->hi + x;
    double e = fabs(s->hi) >= fabs(x) ? (s->hi - t) + x : (x - t) + s->hi;
    s->hi = t;
    s->lo += e;
}

static void dsum_merge(dsum *s, const dsum *o)
{
    dsum_add(s, o->hi);
    dsum_add(s, o->lo);
}


typedef struct {
    dsum sum, sum_sq;     /* standardize: of x and x^2, in double-double */
    int64_t n;
    float *values;        /* num_bins: every value */
    size_t n_values, cap_values;
    counts tokens;        /* vocabulary */
} col_stats;

static void stats_free(col_stats *s, int n)
{
    for (int i = 0; s && i < n; i++) {
        free(s[i].values);
        counts_free(&s[i].tokens);
    }
    free(s);
}

typedef struct {
    dt_feature_scratch *fs;
    col_stats *cols;
    const float **num;    /* (n_cols): the row's numbers for each adapted numeric column */
    int *n_num;
    const dt_text_header *last_header;
    dt_feature_text *layout;
    bool have_layout;
    dt_status failed;     /* a merge that failed for want of memory */
} adapt_scratch;

typedef struct {
    dt_features *f;
    dt_row_parser rows;
    pthread_mutex_t mu;
    col_stats *total;
    dt_status merge_st;
    int64_t rows_seen;
} adapt_pass;

/* What each column's adapt needs from the row: its own values, or its source's. */
static bool wants_numbers(const dt_feature_column *c)
{
    return c->type == DT_FCOL_NUMERIC && c->norm == DT_NORM_STANDARDIZE && !c->adapted;
}

static dt_status observe_numbers(col_stats *st, const float *v, int n, bool keep)
{
    for (int i = 0; i < n; i++) {
        /* x^2 of a float is exact in a double. */
        dsum_add(&st->sum, v[i]);
        dsum_add(&st->sum_sq, (double)v[i] * v[i]);
        st->n++;
        if (!keep)
            continue;
        if (st->n_values == st->cap_values) {
            size_t cap = st->cap_values ? 2 * st->cap_values : 4096;
            float *p = realloc(st->values, cap * sizeof *p);
            if (!p)
                return dt_error(DT_ERR_NOMEM, "no memory for the values to bucketize");
            st->values = p, st->cap_values = cap;
        }
        st->values[st->n_values++] = v[i];
    }
    return DT_OK;
}

/* The row is read whole before any of it is counted, so that a bad row (skipped with
 * skip_bad_records) adds nothing to any column, whichever column finds it bad. A numeric
 * column's values stay in the scratch's place for that column until the row's end. */
static dt_status observe_row(adapt_pass *p, adapt_scratch *s, const dt_raw_value *values)
{
    const dt_features *f = p->f;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < f->n_cols; i++) {
            const dt_feature_column *c = &f->cols[i];
            dt_status st = DT_OK;
            if (c->adapted)
                continue;
            if (wants_numbers(c) || c->type == DT_FCOL_BUCKETIZED) {
                const dt_feature_column *src =
                    c->type == DT_FCOL_BUCKETIZED ? &f->cols[c->source] : c;
                if (pass == 0)
                    st = dt_feature_numbers(f, src, &values[src->key], s->fs, &s->num[i],
                                            &s->n_num[i]);
                else
                    st = observe_numbers(&s->cols[i], s->num[i], s->n_num[i],
                                         c->type == DT_FCOL_BUCKETIZED);
            } else if (c->type == DT_FCOL_VOCAB) {
                const dt_bytes_ref *t;
                size_t n;
                st = dt_feature_tokens(f, c, &values[c->key], s->fs, &t, &n);
                for (size_t k = 0; pass == 1 && k < n && st == DT_OK; k++)
                    st = counts_add(&s->cols[i].tokens, t[k].data, t[k].len,
                                    dt_fingerprint64(t[k].data, t[k].len), 1);
            }
            if (st)
                return st;
        }
    return DT_END; /* nothing appended: the pass keeps no rows */
}

static void *adapt_scratch_new(void *ctx)
{
    adapt_pass *p = ctx;
    adapt_scratch *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->cols = calloc((size_t)p->f->n_cols, sizeof *s->cols);
    s->num = calloc((size_t)p->f->n_cols, sizeof *s->num);
    s->n_num = calloc((size_t)p->f->n_cols, sizeof *s->n_num);
    if (!s->cols || !s->num || !s->n_num || dt_feature_scratch_new(p->f, &s->fs) != DT_OK) {
        free(s->cols);
        free(s->num);
        free(s->n_num);
        free(s);
        return NULL;
    }
    return s;
}

/* Adds a thread's statistics to the pass's. */
static dt_status merge(adapt_pass *p, col_stats *from)
{
    for (int i = 0; i < p->f->n_cols; i++) {
        col_stats *t = &p->total[i], *s = &from[i];
        if (s->n > 0) {
            dsum_merge(&t->sum, &s->sum);
            dsum_merge(&t->sum_sq, &s->sum_sq);
            t->n += s->n;
        }
        if (s->n_values) {
            float *v = realloc(t->values, (t->n_values + s->n_values) * sizeof *v);
            if (!v)
                return dt_error(DT_ERR_NOMEM, "no memory for the values to bucketize");
            memcpy(v + t->n_values, s->values, s->n_values * sizeof *v);
            t->values = v;
            t->n_values += s->n_values;
        }
        for (size_t k = 0; k < s->tokens.cap; k++) {
            if (s->tokens.count[k] == 0)
                continue;
            dt_status st = counts_add(&t->tokens, s->tokens.blob + s->tokens.off[k],
                                      s->tokens.len[k], s->tokens.hash[k], s->tokens.count[k]);
            if (st)
                return st;
        }
    }
    return DT_OK;
}

static void adapt_scratch_free(void *ctx, void *scratch)
{
    adapt_pass *p = ctx;
    adapt_scratch *s = scratch;
    if (!s)
        return;
    pthread_mutex_lock(&p->mu);
    dt_status st = merge(p, s->cols);
    if (st && !p->merge_st)
        p->merge_st = st;
    pthread_mutex_unlock(&p->mu);
    stats_free(s->cols, p->f->n_cols);
    free(s->num);
    free(s->n_num);
    dt_feature_text_free(s->layout);
    dt_feature_scratch_free(s->fs);
    free(s);
}

static dt_status adapt_line(void *ctx, void *scratch, const dt_text_header *header,
                            const char *line, size_t len, dt_rowbuf *out)
{
    (void)out;
    adapt_pass *p = ctx;
    adapt_scratch *s = scratch;
    if (!s->have_layout || s->last_header != header) {
        dt_feature_text_free(s->layout);
        s->layout = NULL;
        dt_status st = dt_feature_text_new(p->f, header ? header->line : NULL,
                                           header ? header->len : 0, ',', &s->layout);
        if (st)
            return st == DT_ERR_FORMAT ? DT_ERR_INVALID : st;
        s->last_header = header;
        s->have_layout = true;
    }
    const dt_raw_value *values; /* DT_END for a blank line */
    dt_status st = dt_feature_text_values(p->f, s->layout, s->fs, line, len, &values);
    return st ? st : observe_row(p, s, values);
}

static dt_status adapt_record(void *ctx, void *scratch, const uint8_t *rec, size_t n,
                              dt_rowbuf *out)
{
    (void)out;
    adapt_scratch *s = scratch;
    const dt_raw_value *values;
    dt_status st = dt_features_example_values(((adapt_pass *)ctx)->f, s->fs, rec, n, &values);
    return st ? st : observe_row(ctx, s, values);
}

/* ---- Results ---- */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static dt_status finish_boundaries(dt_feature_column *c, col_stats *s, const char *source)
{
    if (s->n_values == 0)
        return dt_error(DT_ERR_INVALID, "%s: column '%s': no values to adapt its boundaries "
                        "from", source, c->name);
    qsort(s->values, s->n_values, sizeof *s->values, cmp_float);
    free(c->boundaries);
    if (!(c->boundaries = malloc((size_t)c->num_bins * sizeof *c->boundaries)))
        return dt_error(DT_ERR_NOMEM, "no memory for boundaries");
    int n = 0;
    for (int i = 1; i < c->num_bins; i++) {
        double b = s->values[(size_t)((double)i * (double)s->n_values / c->num_bins)];
        if (n == 0 || b > c->boundaries[n - 1])
            c->boundaries[n++] = b;
    }
    c->n_boundaries = n;
    return DT_OK;
}

/* Token order: count descending, then bytes ascending. */
static int cmp_token(const void *a, const void *b, void *ctx)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    const counts *c = ctx;
    if (c->count[i] != c->count[j])
        return c->count[i] > c->count[j] ? -1 : 1;
    uint32_t n = c->len[i] < c->len[j] ? c->len[i] : c->len[j];
    int r = memcmp(c->blob + c->off[i], c->blob + c->off[j], n);
    return r ? r : (c->len[i] > c->len[j]) - (c->len[i] < c->len[j]);
}

static dt_status finish_vocab(dt_feature_column *c, col_stats *s)
{
    const counts *t = &s->tokens;
    size_t *idx = malloc((t->n ? t->n : 1) * sizeof *idx);
    const char **tok = malloc((t->n ? t->n : 1) * sizeof *tok);
    uint32_t *len = malloc((t->n ? t->n : 1) * sizeof *len);
    dt_status st = DT_OK;
    if (!idx || !tok || !len) {
        st = dt_error(DT_ERR_NOMEM, "no memory for a vocabulary");
        goto fail;
    }
    size_t n = 0;
    for (size_t k = 0; k < t->cap; k++)
        if (t->count[k] >= c->adapt_min_count)
            idx[n++] = k;
    qsort_r(idx, n, sizeof *idx, cmp_token, (void *)t);
    if (c->adapt_max_tokens > 0 && n > (size_t)c->adapt_max_tokens)
        n = (size_t)c->adapt_max_tokens;
    /* The blob's tokens are not terminated: each is copied out by dt_vocab_build. */
    for (size_t k = 0; k < n; k++) {
        tok[k] = t->blob + t->off[idx[k]];
        len[k] = t->len[idx[k]];
    }
    st = dt_vocab_build(&c->vocab, tok, len, (int64_t)n);
fail:
    free(idx), free(tok), free(len);
    return st;
}

static dt_status finish(dt_features *f, col_stats *total)
{
    for (int i = 0; i < f->n_cols; i++) {
        dt_feature_column *c = &f->cols[i];
        col_stats *s = &total[i];
        dt_status st = DT_OK;
        if (c->adapted)
            continue;
        if (wants_numbers(c)) {
            if (s->n == 0)
                return dt_error(DT_ERR_INVALID, "%s: column '%s': no values to standardize "
                                "from", f->source, c->name);
            /* mean and E[x^2] - mean^2 from the double-double sums: the subtraction keeps
             * about 106 - 53 bits even when the mean is far larger than the deviation. */
            double n = (double)s->n;
            double m_hi = s->sum.hi / n, m_lo = (fma(-m_hi, n, s->sum.hi) + s->sum.lo) / n;
            double e_hi = s->sum_sq.hi / n;
            double e_lo = (fma(-e_hi, n, s->sum_sq.hi) + s->sum_sq.lo) / n;
            double p_hi = m_hi * m_hi, p_lo = fma(m_hi, m_hi, -p_hi) + 2 * m_hi * m_lo;
            double var = (e_hi - p_hi) + (e_lo - p_lo);
            c->mean = m_hi + m_lo;
            c->std = sqrt(var > 0 ? var : 0);
            if (c->std < 1e-7)
                c->std = 1e-7;
        } else if (c->type == DT_FCOL_BUCKETIZED) {
            st = finish_boundaries(c, s, f->source);
        } else if (c->type == DT_FCOL_VOCAB) {
            st = finish_vocab(c, s);
            if (st == DT_OK && c->has_cat_default && c->cat_default >= c->vocab.n)
                st = dt_error(DT_ERR_INVALID, "%s: column '%s': default_value %lld is not an id of "
                              "the %lld tokens adapted", f->source, c->name,
                              (long long)c->cat_default, (long long)c->vocab.n);
        }
        if (st)
            return st;
        c->adapted = true;
    }
    dt_features_layout(f);
    return DT_OK;
}

/* ---- The pass ---- */

static dt_status raw_pipeline(const dt_input_spec *data, const dt_file_list *files,
                              dt_text_header *header, const dt_source_options *so,
                              const dt_row_parser *rows, int threads, dt_dataset **out)
{
    dt_dataset *p = NULL;
    bool lines = data->kind != DT_INPUT_TFRECORD;
    dt_status st;
    if (data->kind == DT_INPUT_CSV)
        st = dt_dataset_text_lines(files, header, so, &p);
    else if (data->kind == DT_INPUT_CRITEO)
        st = dt_dataset_text_lines(files, NULL, so, &p);
    else if (data->kind == DT_INPUT_TFRECORD)
        st = dt_dataset_tfrecord(files, so, &p);
    else
        return dt_error(DT_ERR_INVALID, "'%s': a feature spec reads csv:, criteo: or tfrecord: "
                        "data", data->text);
    if (st == DT_OK)
        st = dt_dataset_batch(p, ADAPT_BATCH, false, &p);
    if (st == DT_OK)
        st = dt_dataset_parse_rows(p, rows, lines, header, files, threads, so, &p);
    *out = st == DT_OK ? p : NULL;
    return st;
}

dt_status dt_features_adapt(dt_features *f, const dt_input_spec *data, int threads,
                            bool skip_bad_records, int64_t *bad_records)
{
    if (!dt_features_needs_adapt(f))
        return DT_OK;
    adapt_pass p = {.f = f};
    dt_file_list files = {0};
    dt_text_header header = {0};
    dt_dataset *ds = NULL;
    int64_t bad = 0;
    dt_source_options so;
    dt_source_options_default(&so);
    so.skip_bad_records = skip_bad_records;
    so.bad_records = &bad;
    pthread_mutex_init(&p.mu, NULL);
    p.rows = (dt_row_parser){.ctx = &p, .n_dense = 0, .scratch_new = adapt_scratch_new,
                             .scratch_free = adapt_scratch_free, .parse_line = adapt_line,
                             .parse_record = adapt_record};
    dt_status st = DT_OK;
    if (!(p.total = calloc((size_t)f->n_cols, sizeof *p.total))) {
        st = dt_error(DT_ERR_NOMEM, "no memory for an adapt pass");
        goto fail;
    }
    if ((st = dt_file_list_glob(data->path, &files)) ||
        (st = raw_pipeline(data, &files, &header, &so, &p.rows, threads < 1 ? 1 : threads, &ds)))
        goto fail;
    dt_elem *e;
    while ((st = dt_dataset_next(ds, &e)) == DT_OK)
        dt_elem_free(e);
    if (st != DT_END)
        goto fail;
    /* Destroying the pipeline frees its scratches, which merges their statistics. */
    dt_dataset_destroy(ds);
    ds = NULL;
    if ((st = p.merge_st) || (st = finish(f, p.total)))
        goto fail;
    if (bad_records)
        *bad_records = bad;
fail:
    dt_dataset_destroy(ds);
    stats_free(p.total, f->n_cols);
    dt_text_header_free(&header);
    dt_file_list_free(&files);
    pthread_mutex_destroy(&p.mu);
    return st == DT_END ? DT_OK : st;
}
