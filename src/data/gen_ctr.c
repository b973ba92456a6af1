/* Synthetic CTR data with a fixed teacher (see include/dtrain/gen_ctr.h).
 *
 * Rows are made in blocks; block b's rows come from a generator seeded with (seed, b), so the
 * output does not depend on the threads, and each block is formatted into its own buffer,
 * written in order. */
#include "dtrain/gen_ctr.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/example.h"
#include "../core/fileio.h"
#include "dtrain/hash.h"
#include "dtrain/metrics.h"
#include "dtrain/rng.h"
#include "../core/crc32c.h"
#include "gen_int.h"

#define LATENT 4
#define BLOCK_ROWS 8192

static const int cat_pairs[10][2] = {{0, 5}, {1, 9}, {2, 14}, {3, 20}, {6, 11},
                                     {8, 17}, {12, 22}, {15, 25}, {4, 19}, {7, 23}};
static const int num_cat_pairs[3][2] = {{0, 2}, {1, 4}, {3, 7}};

typedef struct {
    int64_t card[DT_GEN_CATEGORICAL];
    int64_t offset[DT_GEN_CATEGORICAL];
    double zipf_s[DT_GEN_CATEGORICAL]; /* the power law's exponent */
    double zipf_top[DT_GEN_CATEGORICAL], zipf_inv[DT_GEN_CATEGORICAL]; /* (card + 1)^(1 - s), 1 / (1 - s) */
    double mu[DT_GEN_NUMERIC], sigma[DT_GEN_NUMERIC], w_num[DT_GEN_NUMERIC];
    double u_num[DT_GEN_NUMERIC][LATENT];
    double bias;
    int64_t feature_size;
    /* The wide form (dt_gen_options.id_space > 0): each field's values come from [0, space),
     * rank r at row position p being value_of(j, r + (p / DRIFT_ROWS) x drift_j). */
    int64_t space, first_row;
    int64_t drift[DT_GEN_CATEGORICAL];
} teacher;

/* Rows per step of the wide form's drift: every DRIFT_ROWS rows, each field's ranks move on. */
#define DRIFT_ROWS 20000

/* The teacher's hash of a three-part key. */
static uint64_t hash3(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t key[3] = {a, b, c};
    return dt_hash_words(0x7465616368ULL, key, 3);
}

/* A fixed pseudo-random number in [-1, 1) from a key: the teacher's weights. */
static double hashed_unit(uint64_t a, uint64_t b, uint64_t c)
{
    return (double)(hash3(a, b, c) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* Roughly normal with unit variance: the sum of four 16-bit uniforms of one hash. */
static double normal_of(uint64_t h)
{
    double s = 0.0;
    for (int i = 0; i < 4; i++, h >>= 16)
        s += (double)(h & 0xffff) / 65536.0 - 0.5;
    return s * 1.7320508075688772; /* 4 uniforms of variance 1/12 each */
}

static double hashed_normal(uint64_t a, uint64_t b, uint64_t c) { return normal_of(hash3(a, b, c)); }

static double w_cat(int j, int64_t v) { return 0.35 * hashed_normal(1, (uint64_t)j, (uint64_t)v); }

/* A categorical value's LATENT interaction factors. */
static void u_cat(int j, int64_t r, double u[LATENT])
{
    /* Two factors per hash, each the sum of two 16-bit uniforms scaled to unit variance. */
    for (int k = 0; k < LATENT; k += 2) {
        uint64_t h = hash3(2 + (uint64_t)k, (uint64_t)j, (uint64_t)r);
        for (int q = 0; q < 2; q++, h >>= 32) {
            double v = (double)(h & 0xffff) / 65536.0 + (double)((h >> 16) & 0xffff) / 65536.0 - 1.0;
            u[k + q] = 0.5 * v * 2.449489742783178; /* sqrt(6): two uniforms' variance 1/6 */
        }
    }
}

/* One row before formatting: the counts (-1: missing), their values as the model sees them
 * (numeric_value: computed once, for the teacher and the formats) and the categorical values
 * (-1: missing): the ranks drawn, or in the wide form the values those ranks stand for at the
 * row's position. */
typedef struct {
    int64_t count[DT_GEN_NUMERIC];
    double num[DT_GEN_NUMERIC];
    int64_t rank[DT_GEN_CATEGORICAL];
    float label;
    float logit;
} row;

static double normal(dt_rng *r)
{
    double u1 = 1.0 - (double)dt_rng_uniform(r), u2 = (double)dt_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* A rank in [0, card) by inverting the continuous power law x^-s on [1, card + 1): top is
 * (card + 1)^(1 - s), inv 1 / (1 - s). */
static int64_t power_law_rank(double u, double top, double inv, int64_t card)
{
    double x = pow(1.0 + u * (top - 1.0), inv);
    int64_t r = (int64_t)x - 1;
    return r < 0 ? 0 : r >= card ? card - 1 : r;
}

static double numeric_value(int64_t count) { return count < 0 ? 0.0 : log1p((double)count) / 4.0; }

static double teacher_logit(const teacher *t, const row *x)
{
    double z = t->bias;
    for (int i = 0; i < DT_GEN_NUMERIC; i++)
        z += t->w_num[i] * (x->num[i] - 0.5);
    for (int j = 0; j < DT_GEN_CATEGORICAL; j++)
        if (x->rank[j] >= 0)
            z += w_cat(j, x->rank[j]);
    for (int p = 0; p < 10; p++) {
        int a = cat_pairs[p][0], b = cat_pairs[p][1];
        if (x->rank[a] < 0 || x->rank[b] < 0)
            continue;
        double ua[LATENT], ub[LATENT];
        u_cat(a, x->rank[a], ua), u_cat(b, x->rank[b], ub);
        for (int k = 0; k < LATENT; k++)
            z += ua[k] * ub[k];
    }
    for (int p = 0; p < 3; p++) {
        int i = num_cat_pairs[p][0], j = num_cat_pairs[p][1];
        if (x->rank[j] < 0)
            continue;
        double dot = 0.0, u[LATENT];
        u_cat(j, x->rank[j], u);
        for (int k = 0; k < LATENT; k++)
            dot += u[k] * t->u_num[i][k];
        z += (x->num[i] - 0.5) * dot;
    }
    return z;
}

/* The wide form's value of field j's rank r at row position pos: the ranks slide along a
 * hashed sequence of values, drift_j places per DRIFT_ROWS rows, so values appear in the tail,
 * grow popular, lead, and then are never drawn again. */
static int64_t wide_value(const teacher *t, int j, int64_t rank, int64_t pos)
{
    uint64_t k = (uint64_t)rank + (uint64_t)(pos / DRIFT_ROWS) * (uint64_t)t->drift[j];
    return (int64_t)(hash3(8, (uint64_t)j, k) % (uint64_t)t->space);
}

static void draw_row(const teacher *t, dt_rng *r, int64_t pos, row *x)
{
    for (int i = 0; i < DT_GEN_NUMERIC; i++) {
        x->count[i] = dt_rng_uniform(r) < 0.1f ? -1
                      : (int64_t)floor(exp(t->mu[i] + t->sigma[i] * normal(r)));
        x->num[i] = numeric_value(x->count[i]);
    }
    for (int j = 0; j < DT_GEN_CATEGORICAL; j++) {
        x->rank[j] = dt_rng_uniform(r) < 0.03f
                         ? -1 : power_law_rank((double)dt_rng_uniform(r), t->zipf_top[j],
                                                       t->zipf_inv[j], t->card[j]);
        if (t->space && x->rank[j] >= 0)
            x->rank[j] = wide_value(t, j, x->rank[j], t->first_row + pos);
    }
    double z = teacher_logit(t, x);
    x->logit = (float)z;
    x->label = (double)dt_rng_uniform(r) < 1.0 / (1.0 + exp(-z)) ? 1.0f : 0.0f;
}

static void teacher_init(teacher *t, int64_t space, int64_t first_row)
{
    memset(t, 0, sizeof *t);
    t->space = space, t->first_row = first_row;
    int64_t offset = DT_GEN_NUMERIC;
    for (int j = 0; j < DT_GEN_CATEGORICAL; j++) {
        /* 10 .. 10^6, log-uniformly spaced; the wide form's ranks span the whole space. */
        t->card[j] = space ? space
                           : (int64_t)llround(pow(10.0, 1.0 + 5.0 * j / (DT_GEN_CATEGORICAL - 1)));
        /* 1 .. 64 places per drift step, more for the fields of more values. */
        t->drift[j] = 1 + (int64_t)(63.0 * j / (DT_GEN_CATEGORICAL - 1));
        t->offset[j] = offset;
        offset += t->card[j] + 1; /* + the missing value's row */
        t->zipf_s[j] = 1.05 + 0.55 * (hashed_unit(3, (uint64_t)j, 0) + 1.0) / 2.0;
        t->zipf_top[j] = pow((double)t->card[j] + 1.0, 1.0 - t->zipf_s[j]);
        t->zipf_inv[j] = 1.0 / (1.0 - t->zipf_s[j]);
    }
    t->feature_size = offset;
    for (int i = 0; i < DT_GEN_NUMERIC; i++) {
        t->mu[i] = 0.5 + 1.25 * (hashed_unit(4, (uint64_t)i, 0) + 1.0);
        t->sigma[i] = 0.8 + 0.6 * (hashed_unit(5, (uint64_t)i, 0) + 1.0);
        t->w_num[i] = 0.25 * hashed_normal(6, (uint64_t)i, 0);
        for (int k = 0; k < LATENT; k++)
            t->u_num[i][k] = 0.5 * hashed_normal(7, (uint64_t)i, (uint64_t)k);
    }
    /* The bias that makes the mean click probability 25% over a fixed sample, by bisection. The
     * sample's 160 KB live on the stack: the setup cannot fail for want of memory. */
    enum { SAMPLE = 20000 };
    double z[SAMPLE];
    dt_rng r;
    dt_rng_seed(&r, 0x63616c6962ULL);
    row x;
    for (int n = 0; n < SAMPLE; n++) {
        draw_row(t, &r, n, &x);
        z[n] = x.logit;
    }
    t->bias = dt_gen_bias_for_rate(z, SAMPLE, 0.25);
}

double dt_gen_bias_for_rate(const double *z, int n, double rate)
{
    double lo = -20.0, hi = 20.0;
    for (int it = 0; it < 50; it++) {
        double mid = (lo + hi) / 2.0, p = 0.0;
        for (int i = 0; i < n; i++)
            p += 1.0 / (1.0 + exp(-(z[i] + mid)));
        if (p / n < rate)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int64_t dt_gen_ctr_feature_size(void)
{
    teacher t;
    teacher_init(&t, 0, 0);
    return t.feature_size;
}

dt_status dt_gen_format_parse(const char *name, dt_gen_format *out)
{
    static const char *const names[] = {"libsvm", "criteo", "tfrecord", "tfrecord-columns", "csv",
                                        "census"};
    for (int i = 0; i < 6; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (dt_gen_format)i;
            return DT_OK;
        }
    return dt_error(DT_ERR_INVALID, "unknown format '%s' (libsvm, criteo, tfrecord, "
                    "tfrecord-columns, csv, census)", name);
}

/* ---- Formatting ---- */

typedef struct {
    char *p;
    size_t n, cap;
} buf;

static bool reserve(buf *b, size_t more)
{
    if (b->n + more <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 1 << 20;
    while (cap < b->n + more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return false;
    b->p = p, b->cap = cap;
    return true;
}

/* v >= 0 with six decimals, trailing zeros dropped: exact enough for a float reader. */
static char *put_fixed6(char *p, double v)
{
    uint64_t n = (uint64_t)llround(v * 1e6);
    p = dt_put_decimal(p, n / 1000000);
    uint64_t frac = n % 1000000;
    if (frac) {
        *p++ = '.';
        char d[6];
        for (int i = 5; i >= 0; i--, frac /= 10)
            d[i] = (char)('0' + frac % 10);
        int last = 5;
        while (d[last] == '0')
            last--;
        memcpy(p, d, (size_t)last + 1);
        p += last + 1;
    }
    return p;
}

static void ids_values(const teacher *t, const row *x, int64_t *ids, float *vals)
{
    for (int i = 0; i < DT_GEN_NUMERIC; i++) {
        ids[i] = i;
        vals[i] = (float)x->num[i];
    }
    for (int j = 0; j < DT_GEN_CATEGORICAL; j++) {
        ids[DT_GEN_NUMERIC + j] = t->offset[j] + (x->rank[j] < 0 ? t->card[j] : x->rank[j]);
        vals[DT_GEN_NUMERIC + j] = 1.0f;
    }
}

static bool format_libsvm(const teacher *t, const row *x, buf *b)
{
    if (!reserve(b, 64 * DT_GEN_FIELDS))
        return false;
    char *p = b->p + b->n;
    *p++ = x->label ? '1' : '0';
    int64_t ids[DT_GEN_FIELDS];
    float vals[DT_GEN_FIELDS];
    ids_values(t, x, ids, vals);
    for (int f = 0; f < DT_GEN_FIELDS; f++) {
        *p++ = ' ';
        p = dt_put_decimal(p, (uint64_t)ids[f]);
        *p++ = ':';
        p = f < DT_GEN_NUMERIC ? put_fixed6(p, x->num[f]) : (*p = '1', p + 1);
    }
    *p++ = '\n';
    b->n = (size_t)(p - b->p);
    return true;
}

/* A categorical value's 8 hex digits in the criteo form: a hash of its field and rank. */
static void cat_token(int j, int64_t rank, char out[8])
{
    static const char hex[] = "0123456789abcdef";
    uint64_t key[2] = {(uint64_t)j, (uint64_t)rank};
    uint32_t h = (uint32_t)dt_hash_words(0x637269746f, key, 2);
    for (int s = 28, i = 0; s >= 0; s -= 4, i++)
        out[i] = hex[(h >> s) & 15];
}

/* The criteo form's columns, separated by sep. */
static bool format_columns(const row *x, char sep, buf *b)
{
    if (!reserve(b, 32 * DT_GEN_FIELDS))
        return false;
    char *p = b->p + b->n;
    *p++ = x->label ? '1' : '0';
    for (int i = 0; i < DT_GEN_NUMERIC; i++) {
        *p++ = sep;
        if (x->count[i] >= 0)
            p = dt_put_decimal(p, (uint64_t)x->count[i]);
    }
    for (int j = 0; j < DT_GEN_CATEGORICAL; j++) {
        *p++ = sep;
        if (x->rank[j] < 0)
            continue;
        cat_token(j, x->rank[j], p);
        p += 8;
    }
    *p++ = '\n';
    b->n = (size_t)(p - b->p);
    return true;
}

static bool format_criteo(const teacher *t, const row *x, buf *b)
{
    (void)t;
    return format_columns(x, '\t', b);
}

static bool format_csv(const teacher *t, const row *x, buf *b)
{
    (void)t;
    return format_columns(x, ',', b);
}

/* One Example in TFRecord framing, so blocks are concatenated as they are. */
static bool put_example(const dt_feature_value *f, int n_features, buf *b)
{
    uint8_t *ex = NULL;
    size_t len = 0, cap = 0;
    if (dt_example_encode(f, n_features, &ex, &len, &cap) != DT_OK || !reserve(b, len + 16)) {
        free(ex);
        return false;
    }
    /* u64 length, masked CRC32C of the length, the data, masked CRC32C of the data. */
    uint8_t *p = (uint8_t *)b->p + b->n, lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (uint8_t)((uint64_t)len >> (8 * i));
    uint32_t crcs[2] = {dt_crc32c_mask(dt_crc32c(lenb, 8)), dt_crc32c_mask(dt_crc32c(ex, len))};
    memcpy(p, lenb, 8);
    for (int i = 0; i < 4; i++)
        p[8 + i] = (uint8_t)(crcs[0] >> (8 * i)), p[12 + len + (size_t)i] = (uint8_t)(crcs[1] >> (8 * i));
    memcpy(p + 12, ex, len);
    b->n += len + 16;
    free(ex);
    return true;
}

static bool format_tfrecord(const teacher *t, const row *x, buf *b)
{
    int64_t ids[DT_GEN_FIELDS];
    float vals[DT_GEN_FIELDS], label = x->label;
    ids_values(t, x, ids, vals);
    dt_feature_value f[3] = {{"label", DT_FEATURE_FLOAT, 1, &label, NULL, NULL},
                             {"ids", DT_FEATURE_INT64, DT_GEN_FIELDS, NULL, ids, NULL},
                             {"values", DT_FEATURE_FLOAT, DT_GEN_FIELDS, vals, NULL, NULL}};
    return put_example(f, 3, b);
}

static bool format_tfrecord_columns(const teacher *t, const row *x, buf *b)
{
    (void)t;
    static const char *const names[DT_GEN_FIELDS] = {"I1", "I2", "I3", "I4", "I5", "I6", "I7",
        "I8", "I9", "I10", "I11", "I12", "I13", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8",
        "C9", "C10", "C11", "C12", "C13", "C14", "C15", "C16", "C17", "C18", "C19", "C20", "C21",
        "C22", "C23", "C24", "C25", "C26"};
    dt_feature_value f[1 + DT_GEN_FIELDS];
    float label = x->label, counts[DT_GEN_NUMERIC];
    char tokens[DT_GEN_CATEGORICAL][8];
    int n = 0;
    f[n++] = (dt_feature_value){"label", DT_FEATURE_FLOAT, 1, &label, NULL, NULL};
    for (int i = 0; i < DT_GEN_NUMERIC; i++)
        if (x->count[i] >= 0) {
            counts[i] = (float)x->count[i];
            f[n++] = (dt_feature_value){names[i], DT_FEATURE_FLOAT, 1, &counts[i], NULL, NULL};
        }
    for (int j = 0; j < DT_GEN_CATEGORICAL; j++)
        if (x->rank[j] >= 0) {
            cat_token(j, x->rank[j], tokens[j]);
            f[n++] = (dt_feature_value){names[DT_GEN_NUMERIC + j], DT_FEATURE_BYTES, 8, NULL,
                                        NULL, (const uint8_t *)tokens[j]};
        }
    return put_example(f, n, b);
}

/* ---- Blocks ---- */

/* A round generates blocks [first_block, first_block + n_blocks) into gen, one task a block,
 * and task 0 meanwhile writes the round before's blocks from the other half of the buffers:
 * with the write in the round, no thread waits for it. */
typedef struct {
    const teacher *t;
    double census_bias;     /* the census teacher's */
    dt_gen_format format;
    uint64_t seed;
    int64_t rows, first_block, n_blocks;
    buf *gen;               /* (n_blocks) this round's */
    buf *written;           /* (n_written) the round before's */
    int64_t n_written;
    FILE *f;
    int write_errno;        /* 0, or why a write failed */
    float *logits, *labels; /* (rows) over the whole run */
    bool failed;
} gen_job;

static void gen_block(gen_job *j, int64_t b)
{
    int64_t block = j->first_block + b, r0 = block * BLOCK_ROWS;
    int64_t r1 = r0 + BLOCK_ROWS < j->rows ? r0 + BLOCK_ROWS : j->rows;
    dt_rng rng;
    dt_rng_derive(&rng, j->seed, 0x67656e, (uint64_t)block);
    buf *out = &j->gen[b];
    out->n = 0;
    if (j->format == DT_GEN_CENSUS) {
        for (int64_t r = r0; r < r1; r++) {
            if (!reserve(out, DT_GEN_CENSUS_LINE_MAX)) {
                j->failed = true;
                return;
            }
            out->n += dt_gen_census_row(j->census_bias, &rng, out->p + out->n, &j->logits[r],
                                        &j->labels[r]);
        }
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        row x;
        draw_row(j->t, &rng, r, &x);
        j->logits[r] = x.logit;
        j->labels[r] = x.label;
        bool ok = j->format == DT_GEN_LIBSVM     ? format_libsvm(j->t, &x, out)
                  : j->format == DT_GEN_CRITEO   ? format_criteo(j->t, &x, out)
                  : j->format == DT_GEN_TFRECORD ? format_tfrecord(j->t, &x, out)
                  : j->format == DT_GEN_CSV      ? format_csv(j->t, &x, out)
                                                 : format_tfrecord_columns(j->t, &x, out);
        if (!ok) {
            j->failed = true;
            return;
        }
    }
}

static void write_blocks(gen_job *j)
{
    for (int64_t k = 0; k < j->n_written && !j->write_errno; k++) {
        errno = 0; /* a short write need not set it: then EIO, not an earlier call's errno */
        if (fwrite(j->written[k].p, 1, j->written[k].n, j->f) != j->written[k].n)
            j->write_errno = errno ? errno : EIO;
    }
}

static void round_task(void *ctx, int task, int n_tasks)
{
    (void)n_tasks;
    gen_job *j = ctx;
    if (task == 0)
        write_blocks(j);
    else
        gen_block(j, task - 1);
}

dt_status dt_gen_ctr(const char *path, dt_gen_format format, int64_t rows, uint64_t seed,
                     dt_pool *pool, dt_gen_result *out)
{
    dt_gen_options o = {.format = format, .rows = rows, .seed = seed};
    return dt_gen_ctr_ex(path, &o, pool, out);
}

dt_status dt_gen_ctr_ex(const char *path, const dt_gen_options *o, dt_pool *pool,
                        dt_gen_result *out)
{
    memset(out, 0, sizeof *out);
    dt_gen_format format = o->format;
    int64_t rows = o->rows;
    uint64_t seed = o->seed;
    if (rows < 1 || rows > ((int64_t)1 << 34))
        return dt_error(DT_ERR_INVALID, "--rows: 1..2^34, got %lld", (long long)rows);
    if (o->id_space && (o->id_space < 1000 || o->id_space > ((int64_t)1 << 40) ||
                        format == DT_GEN_CENSUS))
        return dt_error(DT_ERR_INVALID, "--id-space: 1000..2^40 values per field, for the click "
                        "formats; got %lld", (long long)o->id_space);
    if (o->first_row < 0 || o->first_row > ((int64_t)1 << 40))
        return dt_error(DT_ERR_INVALID, "--first-row: 0..2^40, got %lld", (long long)o->first_row);
    teacher t;
    teacher_init(&t, o->id_space, o->first_row);
    int64_t n_blocks = (rows + BLOCK_ROWS - 1) / BLOCK_ROWS;
    int per_round = dt_pool_size(pool) * 4;
    gen_job j = {.t = &t, .format = format, .seed = seed, .rows = rows,
                 .census_bias = format == DT_GEN_CENSUS ? dt_gen_census_bias() : 0.0};
    buf *bufs = calloc(2 * (size_t)per_round, sizeof *bufs);
    j.logits = malloc((size_t)rows * sizeof *j.logits);
    j.labels = malloc((size_t)rows * sizeof *j.labels);
    dt_status st = DT_OK;
    dt_file_replace fr;
    bool open = false;
    FILE *f = NULL;
    if (!bufs || !j.logits || !j.labels || isnan(j.census_bias)) {
        st = dt_error(DT_ERR_NOMEM, "no memory to generate %lld rows", (long long)rows);
        goto done;
    }
    if ((st = dt_file_replace_begin(&fr, path, true)))
        goto done;
    open = true;
    if (!(f = fopen(dt_file_replace_path(&fr), "wb"))) {
        st = dt_error(DT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        goto done;
    }
    if (format == DT_GEN_CSV) {
        fputs("label", f);
        for (int i = 0; i < DT_GEN_FIELDS; i++)
            fprintf(f, i < DT_GEN_NUMERIC ? ",I%d" : ",C%d",
                    i < DT_GEN_NUMERIC ? i + 1 : i - DT_GEN_NUMERIC + 1);
        fputc('\n', f);
    } else if (format == DT_GEN_CENSUS) {
        fputs(dt_gen_census_header, f);
    }
    j.f = f;
    /* Rounds alternate between the two halves of bufs; the last round's blocks are written
     * after it, by a round of no blocks. */
    for (int64_t b = 0, turn = 0; b < n_blocks || j.n_written > 0; b += j.n_blocks, turn++) {
        j.first_block = b;
        j.n_blocks = n_blocks - b < per_round ? n_blocks - b : per_round;
        j.gen = bufs + (turn & 1) * per_round;
        dt_pool_run(pool, round_task, &j, (int)j.n_blocks + 1);
        if (j.failed) {
            st = dt_error(DT_ERR_NOMEM, "no memory to format rows");
            break;
        }
        if (j.write_errno) {
            st = dt_error(DT_ERR_IO, "%s: write failed: %s", path, strerror(j.write_errno));
            break;
        }
        j.written = j.gen, j.n_written = j.n_blocks;
    }
    if (fclose(f) != 0 && st == DT_OK)
        st = dt_error(DT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    f = NULL;
    if (st == DT_OK) {
        st = dt_file_replace_commit(&fr);
        open = false;
    }
    if (st == DT_OK) {
        out->rows = rows;
        out->feature_size = format == DT_GEN_CENSUS ? 0 : t.feature_size;
        double clicks = 0.0;
        for (int64_t r = 0; r < rows; r++)
            clicks += j.labels[r];
        out->ctr = clicks / (double)rows;
        out->teacher_auc = NAN;
        if (dt_auc(j.logits, j.labels, (size_t)rows, &out->teacher_auc) != DT_OK)
            dt_error_clear(); /* one class only in a handful of rows */
    }
done:
    if (f)
        fclose(f);
    if (open)
        dt_file_replace_abort(&fr);
    for (int k = 0; bufs && k < 2 * per_round; k++)
        free(bufs[k].p);
    free(bufs), free(j.logits), free(j.labels);
    return st;
}
