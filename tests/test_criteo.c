/* Criteo TSV lines: values as log(1 + max(x, 0)), categories hashed with their field into the
 * rows after the 13 numeric ones, empty columns, and one error per kind of bad line naming the
 * byte column and the Criteo column. */
#include <math.h>
#include <string.h>

#include "dtrain/criteo.h"
#include "dtrain/hash.h"
#include "test.h"

/* A line of 40 columns: label, I1..I13 = 0, 1, ..., 12 with I2 empty and I3 = -5, C1..C26 as
 * 8 hex digits with C4 empty. */
static size_t make_line(char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "1");
    for (int i = 0; i < 13; i++) {
        if (i == 1)
            n += (size_t)snprintf(buf + n, cap - n, "\t");
        else
            n += (size_t)snprintf(buf + n, cap - n, "\t%d", i == 2 ? -5 : i);
    }
    for (int j = 0; j < 26; j++)
        n += (size_t)snprintf(buf + n, cap - n, j == 3 ? "\t" : "\t%08x", 0x68fd1e64u + (unsigned)j);
    return n;
}

TEST(criteo_line_becomes_39_fields)
{
    char line[1024];
    size_t n = make_line(line, sizeof line);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    CHECK_OK(dt_criteo_parse_line(line, n, 1000, &b));
    CHECK(b.n == 1 && b.nnz == 39 && b.labels[0] == 1.0f);
    for (int i = 0; i < 13; i++) {
        float want = i == 1 || i == 2 ? 0.0f : (float)log1p((double)i);
        CHECK(b.sp_ids[i] == i);
        CHECK_MSG(b.sp_vals[i] == want, "I%d: %g, expected %g", i + 1, b.sp_vals[i], want);
    }
    for (int j = 0; j < 26; j++) {
        char tok[16];
        int len = j == 3 ? 0 : snprintf(tok, sizeof tok, "%08x", 0x68fd1e64u + (unsigned)j);
        int64_t want = 13 + dt_hash_bucket(j, tok, (size_t)len, 1000 - 13);
        CHECK(b.sp_ids[13 + j] == want && b.sp_vals[13 + j] == 1.0f);
        CHECK(b.sp_ids[13 + j] >= 13 && b.sp_ids[13 + j] < 1000);
    }
    /* A CRLF line, and a blank one. */
    line[n] = '\r';
    CHECK_OK(dt_criteo_parse_line(line, n + 1, 1000, &b));
    CHECK(b.n == 2 && memcmp(b.sp_ids, b.sp_ids + 39, 39 * sizeof *b.sp_ids) == 0);
    CHECK(dt_criteo_parse_line("", 0, 1000, &b) == DT_END && b.n == 2);
    dt_rowbuf_free(&b);
}

static void expect_bad(const char *line, const char *needle)
{
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    dt_status st = dt_criteo_parse_line(line, strlen(line), 1000, &b);
    CHECK_MSG(st == DT_ERR_FORMAT && strstr(dt_last_error(), needle) && b.n == 0,
              "'%.30s...': status %d, '%s', %d rows", line, st, dt_last_error(), b.n);
    dt_rowbuf_free(&b);
}

TEST(criteo_bad_lines_name_the_column)
{
    char line[1024];
    size_t n = make_line(line, sizeof line);
    expect_bad("1\t2\t3", "3 columns, Criteo rows have 40");
    line[0] = '2';
    expect_bad(line, "column 1: label '2' is not 0 or 1");
    line[0] = '0';
    char *i4 = strstr(line, "\t3\t");
    i4[1] = 'x';
    expect_bad(line, "(I4): 'x' is not an integer");
    i4[1] = '3';
    line[n] = '\t';
    line[n + 1] = '\0';
    expect_bad(line, "41 columns");
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    CHECK(dt_criteo_parse_line(line, n, 13, &b) == DT_ERR_INVALID);
    dt_rowbuf_free(&b);
}
