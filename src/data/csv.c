/* Numeric CSV parser (see include/dtrain/csv.h).
 *
 * One scanner, next_field, finds a field's bounds (quotes, escapes, surrounding blanks) for all
 * three readers: data lines, headers and field counts, so they agree on where fields are. Numbers
 * go through dt_libsvm_parse_float, shared with the LibSVM parser, so a value reads the same in
 * either format. Like the LibSVM parser, a data line is written straight into the row builder and
 * undone with dt_rowbuf_drop_last when it turns out bad. */
#include "dtrain/csv.h"

#include <stdint.h>
#include <string.h>

#include "dtrain/libsvm.h"

void dt_csv_options_default(dt_csv_options *o)
{
    o->label_column = -1;
    o->header = false;
    o->delimiter = ',';
}

static dt_status check_delimiter(const dt_csv_options *o)
{
    char d = o->delimiter;
    if (d == '"' || d == '\r' || d == '\n' || d == '\0')
        return dt_error(DT_ERR_INVALID, "csv: the delimiter cannot be %s",
                        d == '"' ? "'\"'" : d == '\0' ? "NUL" : "a line break");
    return DT_OK;
}

/* Bytes skipped around fields: spaces and tabs, except the one that delimits. */
static inline int is_pad(char c, char delim)
{
    return (c == ' ' || c == '\t') && c != delim;
}

/* Where a line's content starts and ends: after a UTF-8 byte order mark, before a '\r'. */
static void line_bounds(const char *line, size_t len, const char **begin, const char **end)
{
    const char *b = line, *e = line + len;
    if (len >= 3 && (unsigned char)b[0] == 0xef && (unsigned char)b[1] == 0xbb &&
        (unsigned char)b[2] == 0xbf)
        b += 3;
    if (e > b && e[-1] == '\r')
        e--;
    *begin = b;
    *end = e;
}

static int is_blank_line(const char *p, const char *end)
{
    for (; p < end; p++)
        if (*p != ' ' && *p != '\t')
            return 0;
    return 1;
}

/* What every reader of a line does first: the delimiter checked, and the line's content
 * (line_bounds) in [*p, *end); DT_END for a blank line. */
static dt_status line_content(const char *line, size_t len, const dt_csv_options *o,
                              const char **p, const char **end)
{
    dt_status st = check_delimiter(o);
    if (st)
        return st;
    line_bounds(line, len, p, end);
    return is_blank_line(*p, *end) ? DT_END : DT_OK;
}

typedef struct {
    const char *start;       /* the field's first byte after padding: where errors point */
    const char *text, *stop; /* its content: inside the quotes, or with padding trimmed */
    int escaped;             /* quoted content holding "" pairs */
} field;

/* Scans the field at p and returns the delimiter ending it, or end. NULL for a bad quote, with
 * the message set ("column C (field K): ..."). */
static const char *next_field(const char *line, const char *p, const char *end, char delim,
                              int field_no, field *f)
{
    while (p < end && is_pad(*p, delim))
        p++;
    f->start = p;
    f->escaped = 0;
    if (p < end && *p == '"') {
        const char *q = p + 1;
        for (;;) {
            q = memchr(q, '"', (size_t)(end - q));
            if (!q) {
                dt_error(DT_ERR_FORMAT, "column %d (field %d): the quoted field does not end "
                         "on this line", (int)(p - line) + 1, field_no);
                return NULL;
            }
            if (q + 1 < end && q[1] == '"') {
                f->escaped = 1;
                q += 2;
                continue;
            }
            break;
        }
        f->text = p + 1;
        f->stop = q;
        q++;
        while (q < end && is_pad(*q, delim))
            q++;
        if (q < end && *q != delim) {
            dt_error(DT_ERR_FORMAT, "column %d (field %d): text after the closing quote",
                     (int)(q - line) + 1, field_no);
            return NULL;
        }
        return q;
    }
    const char *q = memchr(p, delim, (size_t)(end - p));
    if (!q)
        q = end;
    const char *stop = q;
    while (stop > p && is_pad(stop[-1], delim))
        stop--;
    f->text = p;
    f->stop = stop;
    return q;
}

/* Fields from p to end; -1 after a bad quote (message set). */
static int count_from(const char *line, const char *p, const char *end, char delim, int first_no)
{
    int k = first_no - 1;
    for (;;) {
        field f;
        const char *q = next_field(line, p, end, delim, k + 1, &f);
        if (!q)
            return -1;
        k++;
        if (q == end)
            return k;
        p = q + 1;
    }
}

/* Copies up to 40 bytes of a field for a message, non-printable bytes as \xHH, "..." when cut. */
static const char *show(char *dst, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 40) {
            memcpy(dst + k, "...", 3);
            k += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
            dst[k++] = (char)c;
        else
            dst[k++] = '\\', dst[k++] = 'x', dst[k++] = hex[c >> 4], dst[k++] = hex[c & 15];
    }
    dst[k] = '\0';
    return dst;
}

dt_status dt_csv_parse_line(const char *line, size_t len, const dt_csv_options *o,
                            int n_columns_expected, dt_rowbuf *out)
{
    dt_status st = check_delimiter(o);
    if (st)
        return st;
    const int ncol = n_columns_expected;
    if (ncol < 1)
        return dt_error(DT_ERR_INVALID, "csv: %d columns expected; a line has at least 1", ncol);
    if (o->label_column < -1 || o->label_column >= ncol)
        return dt_error(DT_ERR_INVALID, "csv: label column %d is not among the %d columns "
                        "(0-based, or -1 for none)", o->label_column, ncol);
    int n_dense = ncol - (o->label_column >= 0);
    if (out->n_dense != n_dense)
        return dt_error(DT_ERR_INVALID, "csv: rows of %d dense values cannot hold %d columns "
                        "%s a label", out->n_dense, ncol,
                        o->label_column >= 0 ? "with" : "without");

    const char *p, *end;
    line_bounds(line, len, &p, &end);
    if (is_blank_line(p, end))
        return DT_END;
    float *dense;
    if ((st = dt_rowbuf_add_row(out, &dense)))
        return st;
    const char delim = o->delimiter;
    char shown[200];
    int k = 0; /* fields done */
    for (;;) {
        if (k == ncol) {
            /* One field too many: say how many, though a bad quote past here may hide that. */
            const char *s = p;
            while (s < end && is_pad(*s, delim))
                s++;
            int col = (int)(s - line) + 1;
            int total = count_from(line, p, end, delim, k + 1);
            if (total < 0)
                st = dt_error(DT_ERR_FORMAT, "column %d (field %d): expected %d fields, the line "
                              "has more", col, k + 1, ncol);
            else
                st = dt_error(DT_ERR_FORMAT, "column %d (field %d): expected %d fields, the line "
                              "has %d", col, k + 1, ncol, total);
            goto fail;
        }
        field f;
        const char *q = next_field(line, p, end, delim, k + 1, &f);
        if (!q) {
            st = DT_ERR_FORMAT;
            goto fail;
        }
        int col = (int)(f.start - line) + 1;
        size_t n = (size_t)(f.stop - f.text);
        if (n == 0) {
            st = dt_error(DT_ERR_FORMAT, "column %d (field %d): empty field (every field needs a "
                          "number)", col, k + 1);
            goto fail;
        }
        float v;
        dt_number_result res = dt_libsvm_parse_float(f.text, n, &v);
        if (res == DT_NUMBER_RANGE) {
            st = dt_error(DT_ERR_FORMAT, "column %d (field %d): '%s' is out of a float's range",
                          col, k + 1, show(shown, f.text, n));
            goto fail;
        }
        if (res != DT_NUMBER_OK) {
            /* Name infinities and NaNs, which look like numbers to most writers. */
            const char *t = f.text;
            size_t tn = n;
            if (*t == '+' || *t == '-')
                t++, tn--;
            char low[9] = {0};
            for (size_t i = 0; i < tn && i < 8; i++)
                low[i] = (char)(t[i] | 0x20);
            int nonfinite = (tn == 3 && (!memcmp(low, "inf", 3) || !memcmp(low, "nan", 3))) ||
                            (tn == 8 && !memcmp(low, "infinity", 8));
            st = dt_error(DT_ERR_FORMAT, "column %d (field %d): '%s' is not %s", col, k + 1,
                          show(shown, f.text, n),
                          nonfinite ? "finite (only finite decimal numbers are accepted)"
                                    : "a number");
            goto fail;
        }
        if (k == o->label_column)
            dt_rowbuf_set_label(out, v);
        else
            *dense++ = v;
        k++;
        if (q == end)
            break;
        p = q + 1;
    }
    if (k < ncol) {
        st = dt_error(DT_ERR_FORMAT, "column %d (field %d): expected %d fields, the line has %d",
                      (int)(end - line) + 1, k + 1, ncol, k);
        goto fail;
    }
    return DT_OK;
fail:
    dt_rowbuf_drop_last(out);
    return st;
}

dt_status dt_csv_parse_header(const char *line, size_t len, const dt_csv_options *o,
                              char names[][DT_CSV_NAME_CAP], int max, int *n)
{
    *n = 0;
    const char *p, *end;
    dt_status st = line_content(line, len, o, &p, &end);
    if (st)
        return st;
    const char delim = o->delimiter;
    int k = 0;
    for (;;) {
        field f;
        const char *q = next_field(line, p, end, delim, k + 1, &f);
        if (!q)
            return DT_ERR_FORMAT;
        int col = (int)(f.start - line) + 1;
        if (k == max)
            return dt_error(DT_ERR_FORMAT, "column %d (field %d): more than %d columns", col,
                            k + 1, max);
        size_t w = 0;
        for (const char *s = f.text; s < f.stop; s++) {
            if (w == DT_CSV_NAME_CAP - 1) {
                char shown[200];
                return dt_error(DT_ERR_FORMAT, "column %d (field %d): the name '%s' is longer "
                                "than %d bytes", col, k + 1,
                                show(shown, f.text, (size_t)(f.stop - f.text)),
                                DT_CSV_NAME_CAP - 1);
            }
            names[k][w++] = *s;
            if (f.escaped && *s == '"')
                s++; /* "" stands for one quote */
        }
        names[k][w] = '\0';
        k++;
        *n = k;
        if (q == end)
            break;
        p = q + 1;
    }
    return DT_OK;
}

int dt_csv_find_column(const char names[][DT_CSV_NAME_CAP], int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

dt_status dt_csv_count_fields(const char *line, size_t len, const dt_csv_options *o, int *n)
{
    *n = 0;
    const char *p, *end;
    dt_status st = line_content(line, len, o, &p, &end);
    if (st)
        return st;
    int k = count_from(line, p, end, o->delimiter, 1);
    if (k < 0)
        return DT_ERR_FORMAT;
    *n = k;
    return DT_OK;
}
