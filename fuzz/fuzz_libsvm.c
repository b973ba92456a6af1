/* Fuzz target: the LibSVM parser on arbitrary bytes, as a buffer in sparse and dense modes with
 * at_eof both ways. The input is plain text (so seeds are readable files); the index base and
 * zero_based_ok come from its length. Checked, beyond the sanitizers:
 *   - *consumed <= n, it ends at a line boundary, and *lines_done counts the lines in it;
 *   - rows come only from complete lines: without at_eof a success leaves no '\n' unconsumed;
 *   - the buffer parse equals dt_libsvm_parse_line over the same lines, errors included;
 *   - the rows of the at_eof = false parse are a prefix of the at_eof = true parse's;
 *   - every label and value is finite, sparse ids increase within a row;
 *   - field-positional (CTR) rows have exactly field_size entries, labels 0 or 1, and ids within
 *     the table's rows or the hash buckets;
 *   - dt_libsvm_parse_float agrees bit for bit with strtof on the input's first token. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/libsvm.h"
#include "fuzz.h"

static size_t count_newlines(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == '\n';
    return k;
}

static void check_rows(const dt_rowbuf *b, const dt_libsvm_options *o)
{
    REQUIRE(b->n >= 0 && b->n_dense == o->n_dense);
    if (b->n == 0)
        return;
    REQUIRE(b->sp_row[0] == 0 && (size_t)b->sp_row[b->n] == b->nnz);
    int64_t lowest = o->zero_based_ok ? -(int64_t)o->index_base : 0;
    for (int r = 0; r < b->n; r++) {
        REQUIRE(isfinite(b->labels[r]));
        for (int j = 0; j < b->n_dense; j++)
            REQUIRE(isfinite(b->dense[(size_t)r * b->n_dense + j]));
        REQUIRE(b->sp_row[r] <= b->sp_row[r + 1]);
        if (o->field_size > 0) {
            int64_t limit = o->hash_buckets > 0 ? o->hash_buckets : o->max_id;
            REQUIRE(b->sp_row[r + 1] - b->sp_row[r] == o->field_size);
            REQUIRE(b->labels[r] == 0.0f || b->labels[r] == 1.0f);
            for (int64_t k = b->sp_row[r]; k < b->sp_row[r + 1]; k++)
                REQUIRE(b->sp_ids[k] >= 0 && (limit == 0 || b->sp_ids[k] < limit) &&
                        isfinite(b->sp_vals[k]));
            continue;
        }
        for (int64_t k = b->sp_row[r]; k < b->sp_row[r + 1]; k++) {
            REQUIRE(b->sp_ids[k] >= lowest && isfinite(b->sp_vals[k]));
            REQUIRE(b->sp_ids[k] <= (int64_t)DT_LIBSVM_MAX_INDEX);
            REQUIRE(k == b->sp_row[r] || b->sp_ids[k] > b->sp_ids[k - 1]);
        }
    }
}

/* Rows [0, a->n) of a equal b's first a->n rows. */
static int is_prefix(const dt_rowbuf *a, const dt_rowbuf *b)
{
    if (a->n > b->n)
        return 0;
    size_t rows = (size_t)a->n;
    if (!rows)
        return 1;
    size_t nnz = (size_t)a->sp_row[rows];
    return memcmp(a->labels, b->labels, rows * sizeof(float)) == 0 &&
           memcmp(a->sp_row, b->sp_row, (rows + 1) * sizeof(int64_t)) == 0 &&
           (!a->n_dense ||
            memcmp(a->dense, b->dense, rows * (size_t)a->n_dense * sizeof(float)) == 0) &&
           (!nnz || (memcmp(a->sp_ids, b->sp_ids, nnz * sizeof(int64_t)) == 0 &&
                     memcmp(a->sp_vals, b->sp_vals, nnz * sizeof(float)) == 0));
}

/* Parses buf one line at a time with dt_libsvm_parse_line, as far as the buffer parse got, and
 * requires the same rows, and the same error for the line it stopped at. */
static void check_by_lines(const char *buf, size_t n, bool at_eof, const dt_libsvm_options *o,
                           const dt_rowbuf *got, dt_status st, size_t used)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dt_last_error());
    dt_rowbuf b;
    dt_rowbuf_init(&b, o->n_dense);
    size_t pos = 0;
    uint64_t line = 1;
    while (pos < used) {
        const char *nl = memchr(buf + pos, '\n', used - pos);
        size_t len = nl ? (size_t)(nl - buf - pos) : used - pos;
        REQUIRE(nl || at_eof);
        REQUIRE(dt_libsvm_parse_line(buf + pos, len, o, &b) >= 0);
        pos += len + (nl != NULL);
        line++;
    }
    REQUIRE(b.n == got->n && is_prefix(&b, got));
    if (st < 0 && st != DT_ERR_NOMEM) {
        /* The bad line fails alone too, with the message the buffer parse prefixed. */
        const char *nl = memchr(buf + used, '\n', n - used);
        size_t len = nl ? (size_t)(nl - buf - used) : n - used;
        if (len <= DT_LIBSVM_MAX_LINE) {
            dt_status st1 = dt_libsvm_parse_line(buf + used, len, o, &b);
            REQUIRE(st1 == st);
            char want[1100];
            snprintf(want, sizeof want, "line %llu, %s", (unsigned long long)line,
                     dt_last_error());
            REQUIRE(strcmp(want, msg) == 0);
        }
    }
    dt_rowbuf_free(&b);
}

static void run(const char *buf, size_t n, const dt_libsvm_options *o, dt_rowbuf *eof_rows)
{
    dt_rowbuf part;
    dt_rowbuf_init(&part, o->n_dense);
    dt_rowbuf_init(eof_rows, o->n_dense);
    for (int at_eof = 0; at_eof < 2; at_eof++) {
        dt_rowbuf *b = at_eof ? eof_rows : &part;
        size_t used = (size_t)-1;
        uint64_t lines = (uint64_t)-1;
        dt_status st = dt_libsvm_parse_buffer(buf, n, at_eof, o, 1, b, &used, &lines);
        REQUIRE(st == DT_OK || st == DT_ERR_FORMAT || st == DT_ERR_NOMEM);
        REQUIRE(used <= n);
        REQUIRE(used == 0 || buf[used - 1] == '\n' || (at_eof && used == n));
        size_t nls = count_newlines(buf, used);
        int final_unterminated = used > 0 && buf[used - 1] != '\n';
        REQUIRE(lines == nls + (uint64_t)final_unterminated);
        REQUIRE((uint64_t)b->n <= lines);
        if (st == DT_OK) {
            if (at_eof)
                REQUIRE(used == n);
            else
                REQUIRE(!memchr(buf + used, '\n', n - used) && n - used <= DT_LIBSVM_MAX_LINE);
        } else {
            REQUIRE(strncmp(dt_last_error(), "line ", 5) == 0);
        }
        check_rows(b, o);
        check_by_lines(buf, n, at_eof, o, b, st, used);
    }
    /* Whatever at_eof = false parsed, at_eof = true parsed the same way first. */
    REQUIRE(is_prefix(&part, eof_rows));
    dt_rowbuf_free(&part);
}

/* The first token of the input as a number: where dt_libsvm_parse_float takes it, strtof must
 * read all of it and give the same float. */
static void check_number(const char *buf, size_t n)
{
    size_t len = 0;
    while (len < n && len < 400 && buf[len] != ' ' && buf[len] != '\n' && buf[len] != '\0')
        len++;
    float got;
    dt_number_result r = dt_libsvm_parse_float(buf, len, &got);
    if (r == DT_NUMBER_SYNTAX)
        return;
    char s[401];
    memcpy(s, buf, len);
    s[len] = '\0';
    char *end;
    float want = strtof(s, &end);
    REQUIRE(end == s + len);
    if (r == DT_NUMBER_RANGE) {
        REQUIRE(isinf(want));
    } else {
        uint32_t a, b;
        memcpy(&a, &got, 4);
        memcpy(&b, &want, 4);
        REQUIRE(a == b);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = size ? (const char *)data : "";
    dt_libsvm_options o;
    dt_libsvm_options_default(&o);
    o.index_base = (int)(size & 1) ^ 1;
    o.zero_based_ok = (size >> 1) & 1;
    dt_rowbuf sparse_rows, dense_rows;
    run(buf, size, &o, &sparse_rows);
    o.n_dense = 13;
    run(buf, size, &o, &dense_rows);
    /* Both modes stop at the same line or the dense one earlier (its indices have a bound). */
    REQUIRE(dense_rows.n <= sparse_rows.n);
    dt_rowbuf_free(&sparse_rows);
    dt_rowbuf_free(&dense_rows);
    /* Field-positional CTR rows, their ids checked against a table or hashed. */
    dt_rowbuf ctr_rows;
    dt_libsvm_options c;
    dt_libsvm_options_default(&c);
    c.index_base = 0;
    c.field_size = 1 + (int)(size % 4);
    if ((size >> 2) & 1)
        c.hash_buckets = 1 + (int64_t)(size % 97);
    else
        c.max_id = (size >> 3) & 1 ? 1000 : 0;
    run(buf, size, &c, &ctr_rows);
    dt_rowbuf_free(&ctr_rows);
    check_number(buf, size);
    return 0;
}
