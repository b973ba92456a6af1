/* Fuzz target: the CSV parser on arbitrary bytes. The input is plain text split at '\n' (so seeds
 * are readable files), tried with five delimiters; as a file reader would, the first line is read
 * as a header and counted to fix the width, and every line is parsed as data. The label column
 * comes from the input's length. Checked, beyond the sanitizers:
 *   - a data line appends exactly one row on success and none otherwise, with finite values;
 *   - a success means the line has the expected number of fields, by dt_csv_count_fields;
 *   - a blank line (DT_END) is blank to all three readers;
 *   - errors are format errors whose message names a column;
 *   - header names fit their buffers, and a header has as many names as the line has fields. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dtrain/csv.h"
#include "fuzz.h"

#define MAX_NAMES 16

static void check_header(const char *line, size_t len, const dt_csv_options *o)
{
    char names[MAX_NAMES][DT_CSV_NAME_CAP];
    int n = -1, count = -1;
    dt_status st = dt_csv_parse_header(line, len, o, names, MAX_NAMES, &n);
    dt_status stc = dt_csv_count_fields(line, len, o, &count);
    REQUIRE(st == DT_OK || st == DT_END || st == DT_ERR_FORMAT);
    REQUIRE((st == DT_END) == (stc == DT_END));
    if (st == DT_OK) {
        REQUIRE(stc == DT_OK && n == count && n >= 1 && n <= MAX_NAMES);
        for (int i = 0; i < n; i++) {
            REQUIRE(memchr(names[i], '\0', DT_CSV_NAME_CAP) != NULL);
            REQUIRE(dt_csv_find_column(names, n, names[i]) <= i);
        }
    } else if (st == DT_ERR_FORMAT) {
        REQUIRE(strncmp(dt_last_error(), "column ", 7) == 0);
    } else {
        REQUIRE(n == 0);
    }
}

static void check_line(const char *line, size_t len, const dt_csv_options *o, int ncol,
                       dt_rowbuf *b)
{
    int before = b->n;
    dt_status st = dt_csv_parse_line(line, len, o, ncol, b);
    REQUIRE(st == DT_OK || st == DT_END || st == DT_ERR_FORMAT || st == DT_ERR_NOMEM);
    REQUIRE(b->n == before + (st == DT_OK));
    int count = -1;
    dt_status stc = dt_csv_count_fields(line, len, o, &count);
    REQUIRE((st == DT_END) == (stc == DT_END));
    if (st == DT_OK) {
        REQUIRE(stc == DT_OK && count == ncol);
        REQUIRE(isfinite(b->labels[b->n - 1]));
        for (int j = 0; j < b->n_dense; j++)
            REQUIRE(isfinite(b->dense[(size_t)(b->n - 1) * b->n_dense + j]));
    } else if (st == DT_ERR_FORMAT) {
        REQUIRE(strncmp(dt_last_error(), "column ", 7) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char delimiters[] = {',', ';', '\t', ' ', '|'};
    const char *buf = size ? (const char *)data : "";
    for (size_t d = 0; d < sizeof delimiters; d++) {
        dt_csv_options o;
        dt_csv_options_default(&o);
        o.delimiter = delimiters[d];
        const char *nl = memchr(buf, '\n', size);
        size_t first_len = nl ? (size_t)(nl - buf) : size;
        check_header(buf, first_len, &o);
        int ncol = 0;
        if (dt_csv_count_fields(buf, first_len, &o, &ncol) != DT_OK || ncol > 64)
            ncol = 3;
        o.label_column = (int)(size % 3) - 1;
        if (o.label_column >= ncol)
            o.label_column = -1;
        dt_rowbuf b;
        dt_rowbuf_init(&b, ncol - (o.label_column >= 0));
        size_t pos = 0;
        while (pos <= size) {
            const char *e = memchr(buf + pos, '\n', size - pos);
            size_t len = e ? (size_t)(e - buf - pos) : size - pos;
            check_line(buf + pos, len, &o, ncol, &b);
            pos += len + 1;
        }
        dt_rowbuf_free(&b);
    }
    return 0;
}
