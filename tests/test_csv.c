/* CSV parser: rows with and without a label column, quotes, padding, other delimiters, headers,
 * and every error with its column and field. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/csv.h"
#include "test.h"

static dt_csv_options copts(int label_column, char delimiter)
{
    dt_csv_options o;
    dt_csv_options_default(&o);
    o.label_column = label_column;
    o.delimiter = delimiter;
    return o;
}

static dt_status cparse(const char *line, const dt_csv_options *o, int ncol, dt_rowbuf *b)
{
    return dt_csv_parse_line(line, strlen(line), o, ncol, b);
}

TEST(csv_rows_with_and_without_a_label)
{
    dt_csv_options none = copts(-1, ','), first = copts(0, ','), last = copts(2, ',');
    CHECK(none.label_column == -1 && !none.header && none.delimiter == ',');
    dt_rowbuf b;
    dt_rowbuf_init(&b, 3);
    CHECK_OK(cparse("1.5,2,-3e-1", &none, 3, &b));
    CHECK(b.n == 1 && b.dense[0] == 1.5f && b.dense[1] == 2 && b.dense[2] == -0.3f &&
          b.labels[0] == 0);
    dt_rowbuf_free(&b);
    dt_rowbuf_init(&b, 2);
    CHECK_OK(cparse("1,0.25,4", &first, 3, &b));
    CHECK_OK(cparse(" \"7\" , \"0.5\",\t+8 \r", &first, 3, &b)); /* quotes, padding, CRLF */
    CHECK_OK(cparse("\xef\xbb\xbf" "2,3,4", &first, 3, &b));    /* a byte order mark */
    CHECK_OK(cparse("5,6,1", &last, 3, &b));
    CHECK(b.n == 4);
    if (b.n == 4) {
        float dense[8] = {0.25f, 4, 0.5f, 8, 3, 4, 5, 6}, labels[4] = {1, 7, 2, 1};
        CHECK(memcmp(b.dense, dense, sizeof dense) == 0);
        CHECK(memcmp(b.labels, labels, sizeof labels) == 0);
    }
    CHECK(cparse("", &first, 3, &b) == DT_END);
    CHECK(cparse("  \t\r", &first, 3, &b) == DT_END);
    CHECK(b.n == 4);
    dt_rowbuf_free(&b);
    /* Other delimiters: tab (spaces still pad), semicolon, space. */
    dt_csv_options tab = copts(1, '\t'), semi = copts(-1, ';'), space = copts(-1, ' ');
    dt_rowbuf_init(&b, 2);
    CHECK_OK(cparse("1 \t 9\t 2", &tab, 3, &b));
    CHECK_OK(cparse("3;4", &semi, 2, &b));
    CHECK_OK(cparse("5 6", &space, 2, &b));
    CHECK(b.n == 3 && b.labels[0] == 9 && b.dense[0] == 1 && b.dense[1] == 2 &&
          b.dense[2] == 3 && b.dense[3] == 4 && b.dense[4] == 5 && b.dense[5] == 6);
    dt_rowbuf_free(&b);
    /* A single column that is the label: rows without dense values. */
    dt_rowbuf_init(&b, 0);
    CHECK_OK(cparse("4", &first, 1, &b));
    CHECK(b.n == 1 && b.labels[0] == 4);
    dt_rowbuf_free(&b);
}

/* The line fails with a format error whose message is exactly want, and appends nothing. */
static void check_bad(const char *line, const dt_csv_options *o, int ncol, const char *want,
                      int ln)
{
    dt_rowbuf b;
    dt_rowbuf_init(&b, ncol - (o->label_column >= 0));
    dt_status st = cparse(line, o, ncol, &b);
    CHECK_MSG(st == DT_ERR_FORMAT && strcmp(dt_last_error(), want) == 0,
              "line %d: '%s': status %d, message '%s', expected '%s'", ln, line, st,
              dt_last_error(), want);
    CHECK_MSG(b.n == 0, "line %d: a row was appended", ln);
    dt_rowbuf_free(&b);
}
#define BAD(line, o, ncol, want) check_bad(line, o, ncol, want, __LINE__)

TEST(csv_errors_name_column_and_field)
{
    dt_csv_options o = copts(0, ',');
    BAD("1,,3", &o, 3, "column 3 (field 2): empty field (every field needs a number)");
    BAD("1,2,", &o, 3, "column 5 (field 3): empty field (every field needs a number)");
    BAD("1,\"\",3", &o, 3, "column 3 (field 2): empty field (every field needs a number)");
    BAD("1,abc,3", &o, 3, "column 3 (field 2): 'abc' is not a number");
    BAD("1, 2 5 ,3", &o, 3, "column 4 (field 2): '2 5' is not a number");
    BAD("1,2", &o, 3, "column 4 (field 3): expected 3 fields, the line has 2");
    BAD("1,2,3,4,5", &o, 3, "column 7 (field 4): expected 3 fields, the line has 5");
    BAD("1,2,3,\"4", &o, 3, "column 7 (field 4): expected 3 fields, the line has more");
    BAD("1,\"2,3", &o, 3, "column 3 (field 2): the quoted field does not end on this line");
    BAD("1,\"2\"x,3", &o, 3, "column 6 (field 2): text after the closing quote");
    BAD("1,\"1\"\"5\",3", &o, 3, "column 3 (field 2): '1\"\"5' is not a number");
    BAD("1,nan,3", &o, 3, "column 3 (field 2): 'nan' is not finite (only finite decimal numbers "
        "are accepted)");
    BAD("-inf,1,3", &o, 3, "column 1 (field 1): '-inf' is not finite (only finite decimal "
        "numbers are accepted)");
    BAD("1,1e39,3", &o, 3, "column 3 (field 2): '1e39' is out of a float's range");
    BAD("1,2;3", &o, 2, "column 3 (field 2): '2;3' is not a number");
    BAD("1,\x01,3", &o, 3, "column 3 (field 2): '\\x01' is not a number");
}

TEST(csv_invalid_options)
{
    dt_csv_options o = copts(3, ',');
    dt_rowbuf b;
    dt_rowbuf_init(&b, 2);
    CHECK_ERR(cparse("1,2,3", &o, 3, &b), DT_ERR_INVALID, "label column 3 is not among the 3");
    o.label_column = -2;
    CHECK_ERR(cparse("1,2,3", &o, 3, &b), DT_ERR_INVALID, "label column -2");
    o.label_column = -1;
    CHECK_ERR(cparse("1,2,3", &o, 3, &b), DT_ERR_INVALID, "rows of 2 dense values cannot hold 3 "
              "columns without a label");
    CHECK_ERR(cparse("1,2,3", &o, 0, &b), DT_ERR_INVALID, "0 columns expected");
    o.delimiter = '"';
    CHECK_ERR(cparse("1,2,3", &o, 2, &b), DT_ERR_INVALID, "the delimiter cannot be '\"'");
    o.delimiter = '\n';
    CHECK_ERR(cparse("1,2,3", &o, 2, &b), DT_ERR_INVALID, "a line break");
    CHECK(b.n == 0);
    dt_rowbuf_free(&b);
}

TEST(csv_header_names_and_lookup)
{
    dt_csv_options o = copts(-1, ',');
    char names[8][DT_CSV_NAME_CAP];
    int n = -1;
    const char *h = "\xef\xbb\xbf" "id, \"click\" ,\"a \"\"b\"\", c\",,x\r";
    CHECK_OK(dt_csv_parse_header(h, strlen(h), &o, names, 8, &n));
    CHECK(n == 5);
    if (n == 5) {
        CHECK(strcmp(names[0], "id") == 0 && strcmp(names[1], "click") == 0);
        CHECK(strcmp(names[2], "a \"b\", c") == 0 && names[3][0] == '\0');
        CHECK(strcmp(names[4], "x") == 0);
        CHECK(dt_csv_find_column(names, n, "click") == 1);
        CHECK(dt_csv_find_column(names, n, "x") == 4);
        CHECK(dt_csv_find_column(names, n, "y") == -1);
    }
    CHECK_ERR(dt_csv_parse_header("a,b,c", 5, &o, names, 2, &n), DT_ERR_FORMAT,
              "column 5 (field 3): more than 2 columns");
    char longname[100];
    memset(longname, 'n', 64);
    strcpy(longname + 64, ",b");
    CHECK_ERR(dt_csv_parse_header(longname, strlen(longname), &o, names, 8, &n), DT_ERR_FORMAT,
              "column 1 (field 1): the name 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...' is "
              "longer than 63 bytes");
    longname[63] = ',';
    CHECK_OK(dt_csv_parse_header(longname, strlen(longname), &o, names, 8, &n));
    CHECK(n == 3 && strlen(names[0]) == 63);
    CHECK_ERR(dt_csv_parse_header("a,\"b", 4, &o, names, 8, &n), DT_ERR_FORMAT,
              "column 3 (field 2): the quoted field does not end on this line");
    CHECK(dt_csv_parse_header(" \r", 2, &o, names, 8, &n) == DT_END && n == 0);
}

TEST(csv_count_fields)
{
    dt_csv_options o = copts(-1, ',');
    int n = -1;
    CHECK_OK(dt_csv_count_fields("1,\"2,3\",4", 9, &o, &n));
    CHECK(n == 3);
    CHECK_OK(dt_csv_count_fields("1,,", 3, &o, &n));
    CHECK(n == 3);
    CHECK_OK(dt_csv_count_fields("x", 1, &o, &n));
    CHECK(n == 1);
    CHECK(dt_csv_count_fields("", 0, &o, &n) == DT_END && n == 0);
    CHECK_ERR(dt_csv_count_fields("1,\"2", 4, &o, &n), DT_ERR_FORMAT, "does not end");
}
