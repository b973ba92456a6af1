/* LibSVM text parser (see include/dtrain/libsvm.h).
 *
 * The parser makes one pass over a line and writes straight into the row builder: dense values
 * into the row's slots, sparse ones into room reserved once per line (dt_rowbuf_reserve_sparse,
 * then dt_rowbuf_commit_sparse), so a line costs no allocation beyond the builder's growth. A
 * bad line is undone with dt_rowbuf_drop_last. Messages are built only on the error path; the
 * fast path never formats.
 *
 * Numbers: most values in these files are short decimals ("0.25", "1", "-3.5e-2"). When the
 * digits m fit in 24 bits and the power of ten is exact as a float (10^0 .. 10^10), one float
 * multiplication or division of exact operands rounds once and gives the nearest float. With up
 * to 53-bit digits and 10^0 .. 10^22 the same holds in double (Clinger's fast path), and that
 * double converts to the nearest float unless it lies exactly halfway between two floats (the
 * first rounding may have moved it there), which is checked. Every other number goes to strtof,
 * rewritten as "digits e exponent" so that no locale's decimal point matters and no copy of a
 * long token is needed (see slow_float). The tests hold all of it to strtof bit for bit, and
 * show that each of these conditions is needed. */
#include "dtrain/libsvm.h"
#include "dtrain/hash.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fast path assumes double arithmetic is done in double (SSE2, AArch64), not in x87's
 * extended registers, which would round twice. */
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
#define DT_FAST_NUMBERS 1
#else
#define DT_FAST_NUMBERS 0
#endif

/* Significant digits the slow path keeps. Every float and every midpoint between adjacent floats
 * has at most 113 significant decimal digits (an odd 25-bit integer times 2^-150 at the smallest),
 * so keeping 120 and standing in a single '1' for any nonzero rest ("sticky" digit) cannot move a
 * number across a rounding boundary. */
#define SLOW_DIGITS 120

#if DT_FAST_NUMBERS
static const double pow10_exact[23] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

static const float pow10_float[11] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f,
                                       1e6f, 1e7f, 1e8f, 1e9f, 1e10f};
#endif

static inline int is_digit(char c) { return (unsigned)(c - '0') < 10u; }
static inline int is_blank(char c) { return c == ' ' || c == '\t'; }
/* A byte that ends a token: a blank, or '#' starting a comment. */
static inline int ends_token(char c) { return c == ' ' || c == '\t' || c == '#'; }

void dt_libsvm_options_default(dt_libsvm_options *o)
{
    memset(o, 0, sizeof *o);
    o->n_dense = 0;
    o->index_base = 1;
    o->zero_based_ok = false;
}

/* ---- numbers ---- */

/* The number in s[0 .. n), which is valid decimal syntax, through strtof. The digits are
 * rewritten as "[-]DDDD[1]eX": the first SLOW_DIGITS significant digits, a sticky 1 if any
 * nonzero digit follows them, and the exponent, so the buffer is bounded whatever the input's
 * length, and the text has no decimal point for a locale to misread. */
/* Kept out of line (as are the error paths below) so the fast path inlines into the line loop. */
#define COLD __attribute__((cold, noinline))

COLD static dt_number_result slow_float(const char *s, size_t n, float *out)
{
    const char *p = s, *end = s + n;
    int neg = 0;
    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    char buf[SLOW_DIGITS + 48];
    size_t k = 1; /* buf[0] holds the sign */
    int sticky = 0;
    int64_t int_digits = 0; /* digits before the point */
    int64_t lead = -1;      /* position of the first significant digit among all digits */
    int64_t pos = 0;
    int seen_point = 0;
    for (; p < end; p++) {
        if (*p == '.') {
            seen_point = 1;
            continue;
        }
        if (!is_digit(*p))
            break;
        if (!seen_point)
            int_digits++;
        if (lead < 0 && *p != '0')
            lead = pos;
        if (lead >= 0) {
            if (k < 1 + SLOW_DIGITS)
                buf[k++] = *p;
            else if (*p != '0')
                sticky = 1;
        }
        pos++;
    }
    if (lead < 0) { /* all zeros, whatever the exponent */
        *out = neg ? -0.0f : 0.0f;
        return DT_NUMBER_OK;
    }
    int64_t exp = 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = 0;
        if (*p == '+' || *p == '-')
            eneg = *p++ == '-';
        for (; p < end; p++) /* clamped: past 10^9 the result is 0 or out of range anyway */
            if (exp < 1000000000)
                exp = exp * 10 + (*p - '0');
        if (eneg)
            exp = -exp;
    }
    /* The first significant digit stands for 10^lead_exp. */
    int64_t lead_exp = int_digits - 1 - lead + exp;
    if (lead_exp >= 39) /* >= 1e39, beyond FLT_MAX (3.4e38) */
        return DT_NUMBER_RANGE;
    if (lead_exp < -47) { /* < 1e-46, below half the smallest float (7e-46): rounds to 0 */
        *out = neg ? -0.0f : 0.0f;
        return DT_NUMBER_OK;
    }
    if (sticky)
        buf[k++] = '1';
    /* buf[1 .. k) as an integer times 10^x: */
    int64_t x = lead_exp - (int64_t)(k - 2);
    buf[0] = neg ? '-' : '+';
    buf[k++] = 'e';
    if (x < 0) {
        buf[k++] = '-';
        x = -x;
    }
    char rev[24];
    int nr = 0;
    do {
        rev[nr++] = (char)('0' + x % 10);
        x /= 10;
    } while (x);
    while (nr)
        buf[k++] = rev[--nr];
    buf[k] = '\0';
    float f = strtof(buf, NULL);
    if (isinf(f))
        return DT_NUMBER_RANGE;
    *out = f;
    return DT_NUMBER_OK;
}

/* The correctly rounded float of a value whose correctly rounded double is d, if that can be
 * told from d: it can unless d is exactly halfway between two floats (the exact value may lie
 * on either side), or outside the normal floats (subnormal and overflow rounding is left to
 * strtof). A normal float's last bit is the double's bit 29, so halfway means the low 29 bits
 * read 1 followed by 28 zeros. */
static inline int float_of_double(double d, float *out)
{
    double a = fabs(d);
    if (!(a >= FLT_MIN && a <= FLT_MAX))
        return 0;
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    if ((bits & 0x1fffffffu) == 0x10000000u)
        return 0;
    *out = (float)d;
    return 1;
}

/* Scans the longest decimal number at p (before end) and converts it. Returns the byte after it,
 * or NULL when p holds no number (no digit). An exponent marker not followed by digits is not
 * part of the number, so "1e" scans as "1" and leaves the 'e' for the caller to reject. */
static inline const char *scan_float(const char *p, const char *end, float *out,
                                     dt_number_result *res)
{
    const char *start = p;
    int neg = 0;
    if (p < end && (*p == '+' || *p == '-'))
        neg = *p++ == '-';
    /* All digits go into m; past 19 of them it wraps (unsigned, so defined) and the slow path
     * takes over, so the loops carry no bookkeeping. Leading zeros count, which sends only rare
     * forms like 0.000000000000000001234 the slow way. */
    uint64_t m = 0;
    const char *d0 = p;
    for (; p < end && is_digit(*p); p++)
        m = m * 10 + (unsigned)(*p - '0');
    size_t n_digits = (size_t)(p - d0);
    int64_t e10 = 0;
    if (p < end && *p == '.') {
        const char *f0 = ++p;
        for (; p < end && is_digit(*p); p++)
            m = m * 10 + (unsigned)(*p - '0');
        n_digits += (size_t)(p - f0);
        e10 = -(int64_t)(p - f0);
    }
    if (n_digits == 0) {
        *res = DT_NUMBER_SYNTAX;
        return NULL;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        const char *q = p + 1;
        int eneg = 0;
        if (q < end && (*q == '+' || *q == '-'))
            eneg = *q++ == '-';
        if (q < end && is_digit(*q)) {
            int64_t x = 0;
            for (; q < end && is_digit(*q); q++)
                if (x < 1000000000)
                    x = x * 10 + (*q - '0');
            e10 += eneg ? -x : x;
            p = q;
        }
    }
    *res = DT_NUMBER_OK;
#if DT_FAST_NUMBERS
    if (n_digits <= 19) {
        if (m == 0) {
            *out = neg ? -0.0f : 0.0f;
            return p;
        }
        /* m and 10^|e10| exact as floats (10^10 = 5^10 * 2^10, 5^10 < 2^24): one float
         * operation rounds once, correctly. */
        if (m <= (1u << 24) && e10 >= -10 && e10 <= 10) {
            float f = (float)(int32_t)m;
            if (e10 < 0)
                f /= pow10_float[-e10];
            else if (e10 > 0)
                f *= pow10_float[e10];
            *out = neg ? -f : f;
            return p;
        }
        /* The same in double (Clinger), then to float unless the double is a tie. */
        if (m <= ((uint64_t)1 << 53) && e10 >= -22 && e10 <= 22) {
            double d = (double)(int64_t)m;
            d = e10 < 0 ? d / pow10_exact[-e10] : d * pow10_exact[e10];
            if (float_of_double(neg ? -d : d, out))
                return p;
        }
    }
#else
    (void)neg; /* the slow path reads the sign again */
#endif
    *res = slow_float(start, (size_t)(p - start), out);
    return p;
}

dt_number_result dt_libsvm_parse_float(const char *s, size_t n, float *out)
{
    dt_number_result res;
    float v;
    const char *p = scan_float(s, s + n, &v, &res);
    if (!p || p != s + n)
        return DT_NUMBER_SYNTAX;
    if (res == DT_NUMBER_OK)
        *out = v;
    return res;
}

/* ---- messages ---- */

/* Copies up to 40 bytes of a token for a message, non-printable bytes as \xHH, "..." when cut. */
static const char *show(char *dst, size_t cap, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 40 || k + 8 >= cap) {
            memcpy(dst + k, "...", 3);
            k += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
            dst[k++] = (char)c;
        } else {
            dst[k++] = '\\', dst[k++] = 'x', dst[k++] = hex[c >> 4], dst[k++] = hex[c & 15];
        }
    }
    dst[k] = '\0';
    return dst;
}

static const char *token_end(const char *p, const char *end)
{
    while (p < end && !ends_token(*p))
        p++;
    return p;
}

static int ieq_word(const char *s, size_t n, const char *word)
{
    if (strlen(word) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((s[i] | 0x20) != word[i])
            return 0;
    return 1;
}

/* Why the token s[0 .. n) is no number, as "what 'token' is ...". */
COLD static dt_status number_error(const char *line, const char *s, const char *end,
                                   const char *what, dt_number_result res)
{
    const char *e = token_end(s, end);
    size_t n = (size_t)(e - s);
    char tok[200];
    show(tok, sizeof tok, s, n);
    int col = (int)(s - line) + 1;
    if (res == DT_NUMBER_RANGE)
        return dt_error(DT_ERR_FORMAT, "column %d: %s '%s' is out of a float's range", col, what,
                        tok);
    const char *t = s;
    size_t tn = n;
    if (tn && (*t == '+' || *t == '-'))
        t++, tn--;
    if (ieq_word(t, tn, "inf") || ieq_word(t, tn, "infinity") || ieq_word(t, tn, "nan"))
        return dt_error(DT_ERR_FORMAT, "column %d: %s '%s' is not finite (only finite decimal "
                        "numbers are accepted)", col, what, tok);
    if (n == 0)
        return dt_error(DT_ERR_FORMAT, "column %d: %s is missing", col, what);
    return dt_error(DT_ERR_FORMAT, "column %d: %s '%s' is not a number", col, what, tok);
}

/* A token at s that should have been index:value. */
COLD static dt_status feature_error(const char *line, const char *s, const char *end)
{
    const char *e = token_end(s, end);
    const char *colon = memchr(s, ':', (size_t)(e - s));
    char tok[200];
    show(tok, sizeof tok, s, (size_t)(e - s));
    int col = (int)(s - line) + 1;
    if (colon && colon - s == 3 && memcmp(s, "qid", 3) == 0)
        return dt_error(DT_ERR_FORMAT, "column %d: '%s': a qid comes once, right after the label",
                        col, tok);
    if (colon && colon == s)
        return dt_error(DT_ERR_FORMAT, "column %d: expected index:value, got '%s' (no index)",
                        col, tok);
    if (colon) {
        char idx[200];
        show(idx, sizeof idx, s, (size_t)(colon - s));
        return dt_error(DT_ERR_FORMAT, "column %d: index '%s' is not a non-negative integer", col,
                        idx);
    }
    return dt_error(DT_ERR_FORMAT, "column %d: expected index:value, got '%s'", col, tok);
}

/* ---- lines ---- */

/* The index in digits [s, e) into *idx; 0 if it is above DT_LIBSVM_MAX_INDEX. */
COLD static int exact_index(const char *s, const char *e, uint64_t *idx)
{
    uint64_t v = 0;
    for (; s < e; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (DT_LIBSVM_MAX_INDEX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *idx = v;
    return 1;
}

static dt_status check_options(const dt_libsvm_options *o, const dt_rowbuf *out)
{
    if (o->n_dense < 0)
        return dt_error(DT_ERR_INVALID, "libsvm: n_dense %d is negative", o->n_dense);
    if (o->index_base < 0)
        return dt_error(DT_ERR_INVALID, "libsvm: index_base %d is negative", o->index_base);
    if (o->field_size < 0 || (o->field_size > 0 && o->n_dense != 0) || o->max_id < 0 ||
        o->hash_buckets < 0)
        return dt_error(DT_ERR_INVALID, "libsvm: field_size %d (with n_dense %d), max_id %lld, "
                        "hash_buckets %lld", o->field_size, o->n_dense, (long long)o->max_id,
                        (long long)o->hash_buckets);
    if (out->n_dense != o->n_dense)
        return dt_error(DT_ERR_INVALID, "libsvm: rows of %d dense values cannot hold a parse "
                        "with n_dense %d", out->n_dense, o->n_dense);
    return DT_OK;
}

/* A field-positional row's id: the index token hashed with its field, or the index checked
 * against the table's rows. The index base is added back, as parse_line subtracts it. */
static dt_status field_id(const dt_libsvm_options *o, const char *line, const char *tok,
                          const char *colon, uint64_t idx, int field, uint64_t *out)
{
    int col = (int)(tok - line) + 1;
    if (field >= o->field_size)
        return dt_error(DT_ERR_FORMAT, "column %d: more than %d fields (--field-size)", col,
                        o->field_size);
    if (o->hash_buckets > 0) {
        *out = (uint64_t)dt_hash_bucket(field, tok, (size_t)(colon - tok), o->hash_buckets) +
               (uint64_t)o->index_base;
        return DT_OK;
    }
    if (o->max_id > 0 && idx - (uint64_t)o->index_base >= (uint64_t)o->max_id)
        return dt_error(DT_ERR_FORMAT, "column %d: field %d: id %llu is outside the table's %lld "
                        "rows (--feature-size, or --hash-buckets)", col, field + 1,
                        (unsigned long long)(idx - (uint64_t)o->index_base),
                        (long long)o->max_id);
    *out = idx;
    return DT_OK;
}

/* Parses one line whose options are checked; see dt_libsvm_parse_line. */
static dt_status parse_line(const char *line, size_t len, const dt_libsvm_options *o,
                            dt_rowbuf *out)
{
    const char *p = line, *end = line + len;
    if (len > DT_LIBSVM_MAX_LINE)
        return dt_error(DT_ERR_FORMAT, "column %zu: the line is longer than %zu bytes",
                        DT_LIBSVM_MAX_LINE + 1, DT_LIBSVM_MAX_LINE);
    if (p < end && end[-1] == '\r')
        end--;
    while (p < end && is_blank(*p))
        p++;
    if (p == end || *p == '#')
        return DT_END;

    float label;
    dt_number_result res;
    const char *q = scan_float(p, end, &label, &res);
    if (!q || (q < end && !ends_token(*q)))
        return number_error(line, p, end, "label", DT_NUMBER_SYNTAX);
    if (res != DT_NUMBER_OK)
        return number_error(line, p, end, "label", res);
    p = q;
    while (p < end && is_blank(*p))
        p++;
    /* An optional qid:N, which dtrain has no use for. */
    if (end - p >= 4 && memcmp(p, "qid:", 4) == 0) {
        q = p + 4;
        while (q < end && is_digit(*q))
            q++;
        if (q == p + 4 || (q < end && !ends_token(*q))) {
            char tok[200];
            show(tok, sizeof tok, p, (size_t)(token_end(p, end) - p));
            return dt_error(DT_ERR_FORMAT, "column %d: expected qid:N, got '%s'",
                            (int)(p - line) + 1, tok);
        }
        p = q;
    }

    if (o->field_size > 0 && label != 0.0f && label != 1.0f)
        return dt_error(DT_ERR_FORMAT, "column 1: label %g is not 0 or 1 (a click label)", label);
    float *dense;
    dt_status st = dt_rowbuf_add_row(out, &dense);
    if (st)
        return st;
    dt_rowbuf_set_label(out, label);
    const uint64_t base = (uint64_t)o->index_base;
    const uint64_t lowest = o->zero_based_ok ? 0 : base;
    const uint64_t n_dense = (uint64_t)o->n_dense;
    uint64_t prev = 0;
    int have_prev = 0, fields = 0;
    const bool positional = o->field_size > 0;
    /* An entry takes at least 4 bytes ("i:v" and a blank), the label 2: room for every entry
     * the line can hold, so the loop appends without a check per entry. */
    int64_t *ids = NULL;
    float *vals = NULL;
    size_t n_sparse = 0, room = len / 4 + 1;
    if (!n_dense) {
        if ((st = dt_rowbuf_reserve_sparse(out, room)))
            goto fail;
        ids = out->sp_ids + out->nnz;
        vals = out->sp_vals + out->nnz;
    }
    for (;;) {
        while (p < end && is_blank(*p))
            p++;
        if (p == end || *p == '#')
            break;
        const char *tok = p;
        uint64_t idx = 0;
        for (; p < end && is_digit(*p); p++)
            idx = idx * 10 + (unsigned)(*p - '0');
        if (p == tok || p == end || *p != ':') {
            st = feature_error(line, tok, end);
            goto fail;
        }
        int col = (int)(tok - line) + 1;
        /* 18 digits stay below 2^63 - 1; longer ones (maybe wrapped) are counted again with
         * care. */
        if (p - tok > 18 && !exact_index(tok, p, &idx)) {
            char t[200];
            show(t, sizeof t, tok, (size_t)(p - tok));
            st = dt_error(DT_ERR_FORMAT, "column %d: index %s is above the largest, 2^63 - 1", col,
                          t);
            goto fail;
        }
        if (idx < lowest) {
            st = dt_error(DT_ERR_FORMAT, "column %d: index %llu is below the index base %llu",
                          col, (unsigned long long)idx, (unsigned long long)base);
            goto fail;
        }
        if (positional) {
            st = field_id(o, line, tok, p, idx, fields, &idx);
            if (st)
                goto fail;
            fields++;
        } else if (have_prev && idx <= prev) {
            st = dt_error(DT_ERR_FORMAT, "column %d: index %llu does not increase (the previous "
                          "index is %llu)", col, (unsigned long long)idx,
                          (unsigned long long)prev);
            goto fail;
        }
        if (n_dense && idx < base) {
            st = dt_error(DT_ERR_FORMAT, "column %d: index %llu is below the index base %llu "
                          "(dense rows have no slot for it)", col, (unsigned long long)idx,
                          (unsigned long long)base);
            goto fail;
        }
        if (n_dense && idx - base >= n_dense) {
            st = dt_error(DT_ERR_FORMAT, "column %d: index %llu is beyond the %llu dense features "
                          "(indices %llu..%llu)", col, (unsigned long long)idx,
                          (unsigned long long)n_dense, (unsigned long long)base,
                          (unsigned long long)(base + n_dense - 1));
            goto fail;
        }
        p++; /* ':' */
        float v;
        q = scan_float(p, end, &v, &res);
        if (!q || (q < end && !ends_token(*q))) {
            st = number_error(line, p, end, "value", DT_NUMBER_SYNTAX);
            goto fail;
        }
        if (res != DT_NUMBER_OK) {
            st = number_error(line, p, end, "value", res);
            goto fail;
        }
        if (n_dense) {
            dense[idx - base] = v;
        } else {
            assert(n_sparse < room);
            ids[n_sparse] = (int64_t)idx - (int64_t)base;
            vals[n_sparse++] = v;
        }
        prev = idx;
        have_prev = 1;
        p = q;
    }
    if (positional && fields != o->field_size) {
        st = dt_error(DT_ERR_FORMAT, "column %d: %d fields, the model takes %d (--field-size)",
                      (int)(p - line) + 1, fields, o->field_size);
        goto fail;
    }
    if (n_sparse)
        dt_rowbuf_commit_sparse(out, n_sparse);
    return DT_OK;
fail:
    dt_rowbuf_drop_last(out);
    return st;
}

dt_status dt_libsvm_parse_line(const char *line, size_t len, const dt_libsvm_options *o,
                               dt_rowbuf *out)
{
    dt_status st = check_options(o, out);
    if (st)
        return st;
    return parse_line(line, len, o, out);
}

dt_status dt_libsvm_parse_buffer(const char *buf, size_t n, bool at_eof,
                                 const dt_libsvm_options *o, uint64_t first_line, dt_rowbuf *out,
                                 size_t *consumed, uint64_t *lines_done)
{
    size_t pos = 0;
    uint64_t lines = 0;
    dt_status st = check_options(o, out);
    if (st)
        goto done;
    while (pos < n) {
        size_t rest = n - pos;
        /* Look no further than one byte past the longest line: a line that long is an error
         * whatever follows, and the search stays bounded on a buffer with no newline. */
        size_t look = rest < DT_LIBSVM_MAX_LINE + 1 ? rest : DT_LIBSVM_MAX_LINE + 1;
        const char *nl = memchr(buf + pos, '\n', look);
        size_t len, next;
        if (nl) {
            len = (size_t)(nl - (buf + pos));
            next = pos + len + 1;
        } else if (rest > DT_LIBSVM_MAX_LINE) {
            len = rest;
            next = n;
        } else if (at_eof) {
            len = rest;
            next = n;
        } else {
            break; /* a partial line: the caller brings more */
        }
        uint64_t line_no = first_line + lines;
        if (len > DT_LIBSVM_MAX_LINE) {
            st = dt_error(DT_ERR_FORMAT, "line %llu: longer than %zu bytes",
                          (unsigned long long)line_no, DT_LIBSVM_MAX_LINE);
            goto done;
        }
        int was_empty = out->n == 0;
        st = parse_line(buf + pos, len, o, out);
        if (st < 0) {
            /* "column C: what" becomes "line L, column C: what". */
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", dt_last_error());
            st = dt_error(st, st == DT_ERR_FORMAT ? "line %llu, %s" : "line %llu: %s",
                          (unsigned long long)line_no, msg);
            goto done;
        }
        if (st == DT_OK && was_empty)
            out->pos = line_no;
        st = DT_OK;
        pos = next;
        lines++;
    }
done:
    *consumed = pos;
    *lines_done = lines;
    return st;
}
