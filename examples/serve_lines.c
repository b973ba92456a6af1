/* serve_lines: a trained dtrain model scoring lines from stdin, one score line per input line,
 * the way a serving process embeds the predictor (include/dtrain/predict.h).
 *
 *   cc -std=c11 serve_lines.c $(pkg-config --cflags --libs dtrain) -o serve_lines
 *   ./serve_lines MODEL [THREADS] < rows
 *
 * MODEL is a checkpoint file, a training's model directory or a directory dtrain export wrote.
 * What a line holds depends on the model:
 *   a feature-spec model  a raw row: the first line is the CSV header naming the columns (or
 *                         the word "criteo", for Criteo TSV rows); the label may be left out
 *   lr, fm, deepfm        F pairs "id:value", already hashed, as field-positional LibSVM
 *                         (a leading label is skipped)
 *   a dense model         the input's values, comma-separated
 * Each output line is the row's score: the probability, the class probabilities or the value.
 *
 * Lines are scored in blocks; with THREADS > 1 a block's lines are split among that many
 * threads, each scoring through its own context with no lock, as a server's request threads
 * would. Any error names the line and stops with exit status 1. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <string.h>

#include "dtrain/predict.h"

enum { BLOCK = 1024, MAX_THREADS = 16 };

typedef struct {
    const dt_predictor *p;
    dt_predict_ctx *ctx;
    const char *header;      /* a spec model's CSV header; NULL: Criteo */
    char **lines;
    size_t *lens;
    int first, n;            /* this thread's lines of the block */
    float *out;
    int64_t *ids;
    float *vals, *dense;
    dt_status st;
    char msg[512];
    int failed_at;
} job;

/* "label id:value id:value ..." or without the label: F pairs into ids and vals. */
static int parse_pairs(const char *s, int F, int64_t *ids, float *vals)
{
    int k = 0;
    while (*s) {
        char *end;
        while (*s == ' ' || *s == '\t')
            s++;
        if (!*s)
            break;
        long long id = strtoll(s, &end, 10);
        if (*end != ':') { /* a label, or a token that is not a pair */
            if (k > 0 || end == s)
                return -1;
            s = end;
            continue;
        }
        if (k == F)
            return -1;
        ids[k] = id;
        vals[k] = strtof(end + 1, &end);
        k++;
        s = end;
    }
    return k == F ? 0 : -1;
}

static int parse_values(const char *s, size_t width, float *x)
{
    for (size_t i = 0; i < width; i++) {
        char *end;
        x[i] = strtof(s, &end);
        if (end == s)
            return -1;
        s = end;
        while (*s == ' ' || *s == ',')
            s++;
    }
    return *s ? -1 : 0;
}

static void *score_job(void *arg)
{
    job *j = arg;
    const dt_predictor *p = j->p;
    int B = dt_predictor_max_batch(p), K = dt_predictor_num_outputs(p);
    for (int at = j->first; at < j->first + j->n && j->st == DT_OK; at += B) {
        int n = j->first + j->n - at < B ? j->first + j->n - at : B;
        float *out = j->out + (size_t)at * K;
        if (dt_predictor_features(p)) {
            j->st = dt_predict_lines(j->ctx, j->header, n, (const char *const *)j->lines + at,
                                     j->lens + at, DT_PREDICT_SCORES, out);
        } else if (dt_predictor_field_size(p) > 0) {
            int F = dt_predictor_field_size(p);
            for (int i = 0; i < n; i++)
                if (parse_pairs(j->lines[at + i], F, j->ids + (size_t)i * F,
                                j->vals + (size_t)i * F) != 0) {
                    snprintf(j->msg, sizeof j->msg, "row %d: expected %d id:value pairs", i, F);
                    j->st = DT_ERR_FORMAT;
                    break;
                }
            if (j->st == DT_OK)
                j->st = dt_predict_ids(j->ctx, n, j->ids, j->vals, DT_PREDICT_SCORES, out);
        } else {
            size_t w = dt_predictor_dense_width(p);
            for (int i = 0; i < n; i++)
                if (parse_values(j->lines[at + i], w, j->dense + (size_t)i * w) != 0) {
                    snprintf(j->msg, sizeof j->msg, "row %d: expected %zu values", i, w);
                    j->st = DT_ERR_FORMAT;
                    break;
                }
            if (j->st == DT_OK)
                j->st = dt_predict_dense(j->ctx, n, j->dense, DT_PREDICT_SCORES, out);
        }
        if (j->st && !j->msg[0])
            snprintf(j->msg, sizeof j->msg, "%s", dt_last_error());
        if (j->st)
            j->failed_at = at; /* the call's first line: its rows count from there */
    }
    return NULL;
}

/* Scores lines [0, n) on the threads and prints them in order. */
static int score_block(job *jobs, int threads, char **lines, size_t *lens, int n, float *out,
                       int64_t first_line)
{
    pthread_t tid[MAX_THREADS];
    int per = (n + threads - 1) / threads;
    for (int t = 0; t < threads; t++) {
        jobs[t].lines = lines, jobs[t].lens = lens, jobs[t].out = out;
        jobs[t].first = t * per < n ? t * per : n;
        jobs[t].n = jobs[t].first + per <= n ? per : n - jobs[t].first;
        jobs[t].st = DT_OK, jobs[t].msg[0] = '\0';
        if (t > 0 && pthread_create(&tid[t], NULL, score_job, &jobs[t]) != 0) {
            fprintf(stderr, "serve_lines: cannot start a thread\n");
            return 1;
        }
    }
    score_job(&jobs[0]);
    for (int t = 1; t < threads; t++)
        pthread_join(tid[t], NULL);
    for (int t = 0; t < threads; t++)
        if (jobs[t].st) {
            fprintf(stderr, "serve_lines: stdin, rows from line %" PRId64 " (row 0): %s\n",
                    first_line + jobs[t].failed_at, jobs[t].msg);
            return 1;
        }
    int K = dt_predictor_num_outputs(jobs[0].p);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < K; k++)
            printf("%.9g%c", (double)out[(size_t)i * K + k], k + 1 < K ? '\t' : '\n');
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s MODEL [THREADS] < rows\n", argv[0]);
        return 2;
    }
    int threads = argc == 3 ? atoi(argv[2]) : 1;
    if (threads < 1 || threads > MAX_THREADS) {
        fprintf(stderr, "%s: THREADS must be in 1..%d\n", argv[0], MAX_THREADS);
        return 2;
    }
    dt_predictor *p;
    if (dt_predictor_open(argv[1], NULL, &p) != DT_OK) {
        fprintf(stderr, "%s: %s\n", argv[0], dt_last_error());
        return 1;
    }
    int B = dt_predictor_max_batch(p), F = dt_predictor_field_size(p);
    size_t W = dt_predictor_dense_width(p);
    char *lines[BLOCK] = {0}, *header = NULL;
    size_t lens[BLOCK], caps[BLOCK] = {0};
    float *out = malloc((size_t)BLOCK * dt_predictor_num_outputs(p) * sizeof *out);
    job jobs[MAX_THREADS];
    memset(jobs, 0, sizeof jobs);
    int rc = out ? 0 : 1;
    for (int t = 0; t < threads && rc == 0; t++) {
        jobs[t].p = p;
        jobs[t].ids = malloc((size_t)B * (F ? F : 1) * sizeof(int64_t));
        jobs[t].vals = malloc((size_t)B * (F ? F : 1) * sizeof(float));
        jobs[t].dense = malloc((size_t)B * (W ? W : 1) * sizeof(float));
        if (dt_predict_ctx_new(p, &jobs[t].ctx) != DT_OK || !jobs[t].ids || !jobs[t].vals ||
            !jobs[t].dense) {
            fprintf(stderr, "%s: %s\n", argv[0], dt_last_error());
            rc = 1;
        }
    }
    /* A spec model's first line: the header, or "criteo". */
    size_t hcap = 0;
    ssize_t got;
    if (rc == 0 && dt_predictor_features(p)) {
        if ((got = getline(&header, &hcap, stdin)) < 0) {
            fprintf(stderr, "%s: stdin: no header line\n", argv[0]);
            rc = 1;
        } else {
            header[strcspn(header, "\r\n")] = '\0';
            for (int t = 0; t < threads; t++)
                jobs[t].header = strcmp(header, "criteo") == 0 ? NULL : header;
        }
    }
    int64_t line_no = dt_predictor_features(p) ? 2 : 1;
    while (rc == 0) {
        int n = 0;
        while (n < BLOCK && (got = getline(&lines[n], &caps[n], stdin)) >= 0) {
            while (got > 0 && (lines[n][got - 1] == '\n' || lines[n][got - 1] == '\r'))
                lines[n][--got] = '\0';
            lens[n++] = (size_t)got;
        }
        if (n == 0)
            break;
        rc = score_block(jobs, threads, lines, lens, n, out, line_no);
        line_no += n;
        if (n < BLOCK)
            break;
    }
    if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
        fprintf(stderr, "%s: stdout: %s\n", argv[0], strerror(errno));
        rc = 1;
    }
    for (int t = 0; t < threads; t++) {
        dt_predict_ctx_free(jobs[t].ctx);
        free(jobs[t].ids);
        free(jobs[t].vals);
        free(jobs[t].dense);
    }
    for (int i = 0; i < BLOCK; i++)
        free(lines[i]);
    free(header);
    free(out);
    dt_predictor_close(p);
    return rc;
}
