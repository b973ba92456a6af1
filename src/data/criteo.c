/* Criteo TSV lines into CTR rows (see include/dtrain/criteo.h). */
#include "dtrain/criteo.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtrain/hash.h"

#define COLD __attribute__((cold, noinline))

/* The Criteo name of column c (0 the label, 1..13 I1..I13, 14..39 C1..C26). */
static void column_name(int c, char *out, size_t cap)
{
    if (c == 0)
        snprintf(out, cap, "label");
    else if (c <= DT_CRITEO_NUMERIC)
        snprintf(out, cap, "I%d", c);
    else
        snprintf(out, cap, "C%d", c - DT_CRITEO_NUMERIC);
}

COLD static dt_status bad_column(const char *line, const char *tok, size_t n, int c,
                                 const char *what)
{
    char name[16];
    column_name(c, name, sizeof name);
    return dt_error(DT_ERR_FORMAT, "column %d (%s): '%.*s' %s", (int)(tok - line) + 1, name,
                    (int)(n > 40 ? 40 : n), tok, what);
}

/* A decimal integer, optionally negative, of at most 18 digits. */
static bool parse_int(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    bool neg = n > 0 && s[0] == '-';
    if (neg || (n > 0 && s[0] == '+'))
        i++;
    if (i == n || n - i > 18)
        return false;
    int64_t v = 0;
    for (; i < n; i++) {
        if ((unsigned)(s[i] - '0') > 9u)
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return true;
}

dt_status dt_criteo_parse_line(const char *line, size_t len, int64_t hash_buckets,
                               dt_rowbuf *out)
{
    if (hash_buckets <= DT_CRITEO_NUMERIC)
        return dt_error(DT_ERR_INVALID, "criteo: hash_buckets %lld: more than the %d numeric "
                        "fields' rows needed", (long long)hash_buckets, DT_CRITEO_NUMERIC);
    if (out->n_dense != 0)
        return dt_error(DT_ERR_INVALID, "criteo: rows of %d dense values cannot hold CTR rows",
                        out->n_dense);
    const char *end = line + len;
    if (end > line && end[-1] == '\r')
        end--;
    if (end == line)
        return DT_END;
    /* The 40 columns' bounds first: a row is appended only once the line is known whole. */
    const char *start[DT_CRITEO_FIELDS + 1];
    size_t n[DT_CRITEO_FIELDS + 1];
    int cols = 0;
    const char *p = line;
    for (;;) {
        const char *tab = memchr(p, '\t', (size_t)(end - p));
        const char *stop = tab ? tab : end;
        if (cols <= DT_CRITEO_FIELDS) {
            start[cols] = p;
            n[cols] = (size_t)(stop - p);
        }
        cols++;
        if (!tab)
            break;
        p = tab + 1;
    }
    if (cols != DT_CRITEO_FIELDS + 1)
        return dt_error(DT_ERR_FORMAT, "column %d: %d columns, Criteo rows have %d (a label, "
                        "13 integers, 26 categories)", (int)(end - line) + 1, cols,
                        DT_CRITEO_FIELDS + 1);
    if (n[0] != 1 || (start[0][0] != '0' && start[0][0] != '1'))
        return dt_error(DT_ERR_FORMAT, "column 1: label '%.*s' is not 0 or 1",
                        (int)(n[0] > 40 ? 40 : n[0]), start[0]);
    float value[DT_CRITEO_NUMERIC];
    for (int i = 0; i < DT_CRITEO_NUMERIC; i++) {
        int64_t x = 0;
        if (n[1 + i] > 0 && !parse_int(start[1 + i], n[1 + i], &x))
            return bad_column(line, start[1 + i], n[1 + i], 1 + i, "is not an integer");
        value[i] = n[1 + i] > 0 ? (float)log1p((double)(x > 0 ? x : 0)) : 0.0f;
    }
    dt_status st = dt_rowbuf_add_row(out, NULL);
    if (st)
        return st;
    dt_rowbuf_set_label(out, start[0][0] == '1' ? 1.0f : 0.0f);
    for (int i = 0; i < DT_CRITEO_NUMERIC && st == DT_OK; i++)
        st = dt_rowbuf_add_sparse(out, i, value[i]);
    int64_t buckets = hash_buckets - DT_CRITEO_NUMERIC;
    for (int j = 0; j < DT_CRITEO_CATEGORICAL && st == DT_OK; j++) {
        int c = 1 + DT_CRITEO_NUMERIC + j;
        st = dt_rowbuf_add_sparse(out, DT_CRITEO_NUMERIC + dt_hash_bucket(j, start[c], n[c], buckets),
                                  1.0f);
    }
    if (st)
        dt_rowbuf_drop_last(out);
    return st;
}
