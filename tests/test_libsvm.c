/* LibSVM parser: good lines in dense and sparse modes, every error with its exact column, buffers
 * split anywhere, and numbers bit-equal to strtof on 100k random strings and on the hard cases
 * (where rounding to a double first would give a different float). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/libsvm.h"
#include "test.h"

static dt_libsvm_options opts(int n_dense, int index_base)
{
    dt_libsvm_options o;
    dt_libsvm_options_default(&o);
    o.n_dense = n_dense;
    o.index_base = index_base;
    return o;
}

static dt_status parse(const char *line, const dt_libsvm_options *o, dt_rowbuf *b)
{
    return dt_libsvm_parse_line(line, strlen(line), o, b);
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

TEST(libsvm_dense_lines)
{
    dt_libsvm_options o = opts(4, 1);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 4);
    CHECK_OK(parse("1 1:0.5 3:-2 4:1e-3", &o, &b));
    CHECK_OK(parse("-1\t2:7\t\t4:+.25 # a comment 5:9", &o, &b));
    CHECK_OK(parse("+1 qid:17 1:3.\r", &o, &b));
    CHECK_OK(parse("  0.5  ", &o, &b)); /* a label and no features */
    CHECK_OK(parse("2#x", &o, &b));
    CHECK_OK(parse("1e-3 4:1E2", &o, &b));
    CHECK(b.n == 6 && b.nnz == 0);
    if (b.n == 6) {
        float want[6][4] = {{0.5f, 0, -2, 0.001f}, {0, 7, 0, 0.25f}, {3, 0, 0, 0}, {0}, {0},
                            {0, 0, 0, 100}};
        float labels[6] = {1, -1, 1, 0.5f, 2, 0.001f};
        CHECK(memcmp(b.dense, want, sizeof want) == 0);
        CHECK(memcmp(b.labels, labels, sizeof labels) == 0);
    }
    /* index_base 0: index 0 is slot 0, index 3 the last. */
    dt_libsvm_options o0 = opts(4, 0);
    dt_rowbuf_clear(&b);
    CHECK_OK(parse("3 0:1 3:4", &o0, &b));
    CHECK(b.n == 1 && b.dense[0] == 1 && b.dense[3] == 4 && b.labels[0] == 3);
    dt_rowbuf_free(&b);
}

TEST(libsvm_sparse_lines)
{
    dt_libsvm_options o = opts(0, 1);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    CHECK_OK(parse("1 1:0.5 14:1 9223372036854775807:2", &o, &b));
    CHECK_OK(parse("0 qid:3", &o, &b));
    CHECK_OK(parse("-1 7:-1.5 # 8:1\r", &o, &b));
    CHECK(b.n == 3 && b.nnz == 4);
    if (b.n == 3 && b.nnz == 4) {
        CHECK(b.sp_row[0] == 0 && b.sp_row[1] == 3 && b.sp_row[2] == 3 && b.sp_row[3] == 4);
        CHECK(b.sp_ids[0] == 0 && b.sp_ids[1] == 13 && b.sp_ids[2] == INT64_MAX - 1);
        CHECK(b.sp_vals[0] == 0.5f && b.sp_vals[1] == 1 && b.sp_vals[2] == 2);
        CHECK(b.sp_ids[3] == 6 && b.sp_vals[3] == -1.5f);
        CHECK(b.labels[0] == 1 && b.labels[1] == 0 && b.labels[2] == -1);
    }
    /* zero_based_ok: index 0 of a "1-based" file is id -1, ahead of index 1's id 0. */
    o.zero_based_ok = true;
    dt_rowbuf_clear(&b);
    CHECK_OK(parse("1 0:2 1:3", &o, &b));
    CHECK(b.nnz == 2 && b.sp_ids[0] == -1 && b.sp_ids[1] == 0);
    dt_rowbuf_free(&b);
}

TEST(libsvm_blank_and_comment_lines_append_nothing)
{
    dt_libsvm_options o = opts(0, 1);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    CHECK(parse("", &o, &b) == DT_END);
    CHECK(parse(" \t ", &o, &b) == DT_END);
    CHECK(parse("\r", &o, &b) == DT_END);
    CHECK(parse("# 1 1:2", &o, &b) == DT_END);
    CHECK(parse("   # indented comment", &o, &b) == DT_END);
    CHECK(b.n == 0);
    dt_rowbuf_free(&b);
}

/* The line fails with a format error whose message is exactly want, and appends nothing. */
static void check_bad(const char *line, const dt_libsvm_options *o, const char *want, int ln)
{
    dt_rowbuf b;
    dt_rowbuf_init(&b, o->n_dense);
    CHECK_OK(parse("5 1:1", o, &b));
    dt_status st = parse(line, o, &b);
    CHECK_MSG(st == DT_ERR_FORMAT && strcmp(dt_last_error(), want) == 0,
              "line %d: '%s': status %d, message '%s', expected '%s'", ln, line, st,
              dt_last_error(), want);
    CHECK_MSG(b.n == 1 && b.nnz == (o->n_dense ? 0u : 1u) && b.sp_row[1] == (int64_t)b.nnz,
              "line %d: rows changed after an error", ln);
    dt_rowbuf_free(&b);
}
#define BAD(line, o, want) check_bad(line, o, want, __LINE__)

TEST(libsvm_errors_name_the_column)
{
    dt_libsvm_options sp = opts(0, 1), de = opts(4, 1);
    BAD("1 2:0.5 abc", &sp, "column 9: expected index:value, got 'abc'");
    BAD("1.0 0:2", &sp, "column 5: index 0 is below the index base 1");
    BAD("1 1:0.5 10:nan?", &sp, "column 12: value 'nan?' is not a number");
    BAD("  x 1:2", &sp, "column 3: label 'x' is not a number");
    BAD("1 3:1 2:1", &sp, "column 7: index 2 does not increase (the previous index is 3)");
    BAD("1 3:1 3:2", &sp, "column 7: index 3 does not increase (the previous index is 3)");
    BAD("1 2:1 5:1", &de, "column 7: index 5 is beyond the 4 dense features (indices 1..4)");
    BAD("1 9223372036854775808:1", &sp,
        "column 3: index 9223372036854775808 is above the largest, 2^63 - 1");
    BAD("1 99999999999999999999999:1", &sp,
        "column 3: index 99999999999999999999999 is above the largest, 2^63 - 1");
    BAD("1 1:inf", &sp, "column 5: value 'inf' is not finite (only finite decimal numbers are "
        "accepted)");
    BAD("1 1:-NaN", &sp, "column 5: value '-NaN' is not finite (only finite decimal numbers are "
        "accepted)");
    BAD("1 1:1e39", &sp, "column 5: value '1e39' is out of a float's range");
    BAD("1 1:-3.5e38", &sp, "column 5: value '-3.5e38' is out of a float's range");
    BAD("Infinity 1:1", &sp, "column 1: label 'Infinity' is not finite (only finite decimal "
        "numbers are accepted)");
    BAD("1e39", &sp, "column 1: label '1e39' is out of a float's range");
    BAD("1e 1:2", &sp, "column 1: label '1e' is not a number");
    BAD("1 1:", &sp, "column 5: value is missing");
    BAD("1 1: 2:3", &sp, "column 5: value is missing");
    BAD("1 :5", &sp, "column 3: expected index:value, got ':5' (no index)");
    BAD("1 a:5", &sp, "column 3: index 'a' is not a non-negative integer");
    BAD("1 -1:5", &sp, "column 3: index '-1' is not a non-negative integer");
    BAD("1 12", &sp, "column 3: expected index:value, got '12'");
    BAD("1 1:0.5x", &sp, "column 5: value '0.5x' is not a number");
    BAD("1 1:2:3", &sp, "column 5: value '2:3' is not a number");
    BAD("1 1:0x10", &sp, "column 5: value '0x10' is not a number");
    BAD("1 1:1,5", &sp, "column 5: value '1,5' is not a number");
    BAD("1 1:\001\377", &sp, "column 5: value '\\x01\\xff' is not a number");
    BAD("1 1:2 qid:3", &sp, "column 7: 'qid:3': a qid comes once, right after the label");
    BAD("1 qid:x 1:2", &sp, "column 3: expected qid:N, got 'qid:x'");
    BAD("1 1:2\r\r", &sp, "column 5: value '2\\x0d' is not a number");
    /* Dense rows: index 0 has no slot even when zero_based_ok lets it through. */
    dt_libsvm_options dz = de;
    dz.zero_based_ok = true;
    BAD("1 0:1", &dz, "column 3: index 0 is below the index base 1 (dense rows have no slot for "
        "it)");
    BAD("1 0:1", &de, "column 3: index 0 is below the index base 1");
    /* A long token is cut in the message. */
    BAD("1 1:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", &sp,
        "column 5: value 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' is not a number");
}

TEST(libsvm_bad_options_and_long_lines)
{
    dt_libsvm_options o = opts(4, 1);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 3);
    CHECK_ERR(parse("1 1:1", &o, &b), DT_ERR_INVALID, "rows of 3 dense values");
    o.n_dense = -1;
    CHECK_ERR(parse("1 1:1", &o, &b), DT_ERR_INVALID, "n_dense -1 is negative");
    o = opts(3, -2);
    CHECK_ERR(parse("1 1:1", &o, &b), DT_ERR_INVALID, "index_base -2 is negative");
    dt_rowbuf_free(&b);

    /* A line of DT_LIBSVM_MAX_LINE bytes parses; one byte more does not. */
    size_t n = DT_LIBSVM_MAX_LINE + 1;
    char *line = malloc(n + 1);
    CHECK(line != NULL);
    if (!line)
        return;
    memset(line, ' ', n);
    memcpy(line, "1 1:2", 5);
    dt_rowbuf_init(&b, 0);
    o = opts(0, 1);
    CHECK_OK(dt_libsvm_parse_line(line, n - 1, &o, &b));
    CHECK_ERR(dt_libsvm_parse_line(line, n, &o, &b), DT_ERR_FORMAT,
              "column 1048577: the line is longer than 1048576 bytes");
    /* In a buffer the error comes as soon as the bytes are there, before any newline. */
    size_t used = 99;
    uint64_t lines = 99;
    dt_rowbuf_clear(&b);
    CHECK_ERR(dt_libsvm_parse_buffer(line, n, false, &o, 7, &b, &used, &lines), DT_ERR_FORMAT,
              "line 7: longer than 1048576 bytes");
    CHECK(used == 0 && lines == 0 && b.n == 0);
    line[n - 1] = '\n';
    CHECK_OK(dt_libsvm_parse_buffer(line, n, false, &o, 7, &b, &used, &lines));
    CHECK(used == n && lines == 1 && b.n == 1);
    free(line);
    dt_rowbuf_free(&b);
}

static const char sample[] =
    "1 1:0.5 3:2\n"
    "# a comment\n"
    "\n"
    "-1 qid:2 2:-1.25e1 4:3 # tail\r\n"
    "0\t1:1\t2:2\t3:3\t4:4\n"
    "  \r\n"
    "+1 4:0.001";

TEST(libsvm_buffer_partial_lines)
{
    dt_libsvm_options o = opts(0, 1);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    size_t n = strlen(sample), used;
    uint64_t lines;
    CHECK_OK(dt_libsvm_parse_buffer(sample, n, false, &o, 1, &b, &used, &lines));
    CHECK(b.n == 3 && lines == 6 && used == n - strlen("+1 4:0.001"));
    CHECK(b.pos == 1);
    CHECK_OK(dt_libsvm_parse_buffer(sample + used, n - used, true, &o, 1 + lines, &b, &used,
                                    &lines));
    CHECK(b.n == 4 && lines == 1 && used == strlen("+1 4:0.001"));
    CHECK(b.nnz == 9 && b.labels[3] == 1 && b.sp_ids[8] == 3 && b.sp_vals[8] == 0.001f);
    /* Nothing but a partial line: nothing done. */
    CHECK_OK(dt_libsvm_parse_buffer("1 1:2", 5, false, &o, 1, &b, &used, &lines));
    CHECK(used == 0 && lines == 0 && b.n == 4);
    CHECK_OK(dt_libsvm_parse_buffer("", 0, true, &o, 1, &b, &used, &lines));
    CHECK(used == 0 && lines == 0);
    /* out->pos takes the line of the first row when out starts empty. */
    dt_rowbuf_clear(&b);
    CHECK_OK(dt_libsvm_parse_buffer(sample + 12, n - 12, true, &o, 2, &b, &used, &lines));
    CHECK(b.n == 3 && b.pos == 4);
    dt_rowbuf_free(&b);
}

/* Rows equal in every array. */
static int same_rows(const dt_rowbuf *a, const dt_rowbuf *b)
{
    if (a->n != b->n || a->nnz != b->nnz || a->n_dense != b->n_dense)
        return 0;
    size_t rows = (size_t)a->n;
    return (!rows || (memcmp(a->labels, b->labels, rows * sizeof(float)) == 0 &&
                      memcmp(a->sp_row, b->sp_row, (rows + 1) * sizeof(int64_t)) == 0 &&
                      (!a->n_dense || memcmp(a->dense, b->dense,
                                             rows * (size_t)a->n_dense * sizeof(float)) == 0))) &&
           (!a->nnz || (memcmp(a->sp_ids, b->sp_ids, a->nnz * sizeof(int64_t)) == 0 &&
                        memcmp(a->sp_vals, b->sp_vals, a->nnz * sizeof(float)) == 0));
}

/* Feeds text in chunks of `chunk` bytes the way a file reader does: keep the unconsumed tail,
 * add the next chunk, parse; at_eof with the last one. */
static dt_status feed(const char *text, size_t n, size_t chunk, const dt_libsvm_options *o,
                      dt_rowbuf *out, uint64_t *bad_line)
{
    char *pending = malloc(n + 1);
    size_t have = 0, off = 0;
    uint64_t line = 1;
    dt_status st = DT_OK;
    while (off < n || have) {
        size_t take = n - off < chunk ? n - off : chunk;
        memcpy(pending + have, text + off, take);
        have += take, off += take;
        size_t used;
        uint64_t lines;
        st = dt_libsvm_parse_buffer(pending, have, off == n, o, line, out, &used, &lines);
        line += lines;
        memmove(pending, pending + used, have - used);
        have -= used;
        if (st || off == n)
            break;
    }
    free(pending);
    *bad_line = line;
    return st;
}

TEST(libsvm_buffer_split_anywhere_gives_the_same_rows)
{
    dt_libsvm_options o = opts(0, 1);
    dt_rowbuf whole, part;
    dt_rowbuf_init(&whole, 0);
    dt_rowbuf_init(&part, 0);
    size_t n = strlen(sample), used;
    uint64_t lines, bad;
    CHECK_OK(dt_libsvm_parse_buffer(sample, n, true, &o, 1, &whole, &used, &lines));
    CHECK(whole.n == 4 && used == n && lines == 7);
    for (size_t chunk = 1; chunk <= n; chunk++) {
        dt_rowbuf_clear(&part);
        CHECK_OK(feed(sample, n, chunk, &o, &part, &bad));
        CHECK_MSG(same_rows(&whole, &part), "chunks of %zu bytes give other rows", chunk);
    }
    /* Dense mode too. */
    dt_libsvm_options od = opts(4, 1);
    dt_rowbuf_free(&whole);
    dt_rowbuf_init(&whole, 4);
    dt_rowbuf_free(&part);
    dt_rowbuf_init(&part, 4);
    CHECK_OK(dt_libsvm_parse_buffer(sample, n, true, &od, 1, &whole, &used, &lines));
    for (size_t chunk = 1; chunk <= n; chunk += 3) {
        dt_rowbuf_clear(&part);
        CHECK_OK(feed(sample, n, chunk, &od, &part, &bad));
        CHECK_MSG(same_rows(&whole, &part), "dense: chunks of %zu bytes give other rows", chunk);
    }
    dt_rowbuf_free(&whole);
    dt_rowbuf_free(&part);
}

TEST(libsvm_buffer_error_names_the_line)
{
    static const char text[] = "1 1:1\n\n0 2:2\n1 2:0.5 abc\n1 3:3\n";
    dt_libsvm_options o = opts(0, 1);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    size_t used;
    uint64_t lines;
    CHECK_ERR(dt_libsvm_parse_buffer(text, strlen(text), true, &o, 1231, &b, &used, &lines),
              DT_ERR_FORMAT, "line 1234, column 9: expected index:value, got 'abc'");
    CHECK(strcmp(dt_last_error(), "line 1234, column 9: expected index:value, got 'abc'") == 0);
    CHECK(used == 13 && lines == 3 && b.n == 2 && b.nnz == 2);
    /* Chunked, the same line is named. */
    dt_rowbuf_clear(&b);
    uint64_t bad;
    CHECK_ERR(feed(text, strlen(text), 4, &o, &b, &bad), DT_ERR_FORMAT, "line 4, column 9:");
    CHECK(bad == 4 && b.n == 2);
    dt_rowbuf_free(&b);
}

/* ---- numbers ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t next_u64(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int below(int n) { return (int)(next_u64() % (uint64_t)n); }

static void digits(char *s, int *k, int n, int leading_nonzero)
{
    for (int i = 0; i < n; i++)
        s[(*k)++] = (char)('0' + (i == 0 && leading_nonzero ? 1 + below(9) : below(10)));
}

/* A random decimal string of one of many shapes. */
static void random_number(char *s, size_t cap)
{
    int k = 0, form = below(10);
    float f;
    uint32_t u;
    switch (form) {
    case 0: /* a float printed to 6..20 significant digits, maybe near a rounding boundary */
    case 1:
        u = (uint32_t)next_u64() & 0x7fffffffu;
        memcpy(&f, &u, sizeof f);
        if (!(f == f) || f > 3e38f)
            f = 1.5f;
        {
            double x = f;
            if (form == 1) /* the midpoint to the next float */
                x = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
            snprintf(s, cap, "%s%.*g", below(2) ? "-" : "", 6 + below(15), x);
        }
        return;
    case 2: /* an integer */
        if (below(3) == 0)
            s[k++] = below(2) ? '-' : '+';
        digits(s, &k, 1 + below(20), 0);
        break;
    case 3: /* a CTR-like value: 0.xxxx */
        s[k++] = '0', s[k++] = '.';
        digits(s, &k, 1 + below(9), 0);
        break;
    case 4: /* a many-digit mantissa */
        digits(s, &k, below(30), 0);
        s[k++] = '.';
        digits(s, &k, 1 + below(150), 0);
        break;
    default: /* [sign] int [. frac] [e[sign]exp], parts of random lengths */
        if (below(2))
            s[k++] = below(2) ? '-' : '+';
        {
            int ni = below(12), nf = below(18);
            if (ni + nf == 0)
                ni = 1;
            digits(s, &k, ni, below(2));
            if (nf || below(4) == 0) {
                s[k++] = '.';
                digits(s, &k, nf, 0);
            }
            if (below(2)) {
                s[k++] = below(2) ? 'e' : 'E';
                if (below(2))
                    s[k++] = below(2) ? '-' : '+';
                int e = below(4) == 0 ? below(60) : below(25);
                k += snprintf(s + k, cap - (size_t)k, "%d", e);
            }
        }
        break;
    }
    s[k] = '\0';
}

/* dt_libsvm_parse_float agrees with strtof on s: the same float bit for bit, or out of range
 * where strtof overflows. Returns 0 on a mismatch. */
static int agrees_with_strtof(const char *s)
{
    errno = 0;
    char *e;
    float want = strtof(s, &e);
    if (*e != '\0')
        return 0; /* not a whole number: the generator's fault */
    float got = 12345;
    dt_number_result r = dt_libsvm_parse_float(s, strlen(s), &got);
    if (want == INFINITY || want == -INFINITY)
        return r == DT_NUMBER_RANGE;
    return r == DT_NUMBER_OK && bits_of(got) == bits_of(want);
}

TEST(libsvm_numbers_equal_strtof_on_random_strings)
{
    char s[512];
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        random_number(s, sizeof s);
        if (!agrees_with_strtof(s)) {
            if (bad++ < 10)
                test_fail(__FILE__, __LINE__, "'%s' differs from strtof", s);
        }
    }
    CHECK(bad == 0);
    /* Through a line too: label and value. */
    dt_libsvm_options o = opts(0, 1);
    dt_rowbuf b;
    dt_rowbuf_init(&b, 0);
    for (int i = 0; i < 2000; i++) {
        char line[1100];
        random_number(s, sizeof s);
        float want = strtof(s, NULL);
        if (want == INFINITY || want == -INFINITY)
            continue;
        snprintf(line, sizeof line, "%s 5:%s", s, s);
        dt_rowbuf_clear(&b);
        CHECK_OK(parse(line, &o, &b));
        CHECK_MSG(b.n == 1 && b.nnz == 1 && bits_of(b.labels[0]) == bits_of(want) &&
                  bits_of(b.sp_vals[0]) == bits_of(want), "line '%s'", line);
    }
    dt_rowbuf_free(&b);
}

TEST(libsvm_numbers_hard_cases)
{
    /* Decimals whose nearest double is exactly halfway between two floats: (float)strtod rounds
     * twice and is off by one unit; the nearest float is what strtof gives. The first ones take
     * the fast path (16 digits, small exponent) and must notice the tie. */
    static const char *hard[] = {
        "0.07228936627507210", "82.77339553833008", "0.005151951452717185",
        "0.0003191639989381656", "0.09686592593789101", "70.70637893676758",
        "0.0159867936745286", "1.406000219140653e+19", "3.008109016249005e-22",
        "8.152162556118725e-10", "6.542891147886759e+23",
        /* float limits: the largest, just past it, halfway past it, subnormals, underflow */
        "3.4028234663852886e38", "3.4028235677973366e38", "3.40282357e38", "3.4028236e38",
        "1.17549435e-38", "1.4e-45", "7.006492321624085e-46", "7.006492321624086e-46",
        "7e-46", "1e-46", "1e-50", "-1e-50", "2.5e-45",
        /* exact ties in float: ties to even */
        "16777217", "16777219", "33554435", "1.00000005960464477539062500",
        /* long and zero-padded forms */
        "0.000000000000000000000000000000000000000000000000001234",
        "1234567890123456789012345678901234567890e-30",
        "00000000000000000000000000000000000000000000000000000000000001.5",
        "1.500000000000000000000000000000000000000000000000000000000000000000000000000",
        "0e999999999999999999999", "-0", "-0.0e-5", "0.", ".5", "-.5e1", "5.e-1", "1e-0",
        "9007199254740993", "9007199254740992", "18446744073709551615", "1e22", "1e23",
        "123456789012345678e-40", "4.9406564584124654e-324", "1e38", "1e39", "-1e39",
    };
    for (size_t i = 0; i < sizeof hard / sizeof hard[0]; i++)
        CHECK_MSG(agrees_with_strtof(hard[i]), "'%s' differs from strtof", hard[i]);
    /* A 400-digit number whose 121st significant digit onwards decides nothing but is not 0. */
    char big[512];
    memset(big, '0', 400);
    big[0] = '1', big[1] = '.';
    big[8] = '5'; /* 1.000000500... */
    big[399] = '1';
    big[400] = '\0';
    CHECK(agrees_with_strtof(big));
    /* 1 + 2^-24, halfway between 1 and the next float, exactly: a tie, rounded to even (1). A 1
     * far past the 120 digits kept makes it round up; only the sticky digit can tell. */
    strcpy(big, "1.000000059604644775390625");
    CHECK(agrees_with_strtof(big));
    memset(big + 26, '0', 150);
    strcpy(big + 176, "1");
    CHECK(agrees_with_strtof(big));
    float up;
    CHECK(dt_libsvm_parse_float(big, strlen(big), &up) == DT_NUMBER_OK && up == nextafterf(1, 2));
    big[176] = '\0';
    CHECK(dt_libsvm_parse_float(big, strlen(big), &up) == DT_NUMBER_OK && up == 1);
    float v;
    CHECK(dt_libsvm_parse_float("-0", 2, &v) == DT_NUMBER_OK && bits_of(v) == 0x80000000u);
    /* Not numbers. */
    static const char *junk[] = {
        "", "+", "-", ".", "+.", "e5", ".e5", "1e", "1e+", "1E-", "inf", "-inf", "nan",
        "infinity", "0x1p3", "0x10", " 1", "1 ", "1..2", "--1", "+-1", "1.2.3", "1e5.5", "1,5",
        "1_000", "\xef\xbc\x91",
    };
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++)
        CHECK_MSG(dt_libsvm_parse_float(junk[i], strlen(junk[i]), &v) == DT_NUMBER_SYNTAX,
                  "'%s' was taken for a number", junk[i]);
    CHECK(dt_libsvm_parse_float("1e40", 4, &v) == DT_NUMBER_RANGE);
    /* Bytes past n are not read: "12" of "123". */
    CHECK(dt_libsvm_parse_float("123", 2, &v) == DT_NUMBER_OK && v == 12);
}
