/* Command-line flags (see flags.h). */
#include "flags.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char flag_in_dst[] = "(the destination's value)";

static dt_status parse_integer(const flag_def *f, const char *text, long long lo, long long hi,
                               long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || errno || v < lo || v > hi)
        return dt_error(DT_ERR_INVALID, "--%s: expected an integer, got '%s'", f->name, text);
    if (f->ext && f->ext->min < f->ext->max && (v < f->ext->min || v > f->ext->max)) {
        if (f->ext->max == INT64_MAX)
            return dt_error(DT_ERR_INVALID, "--%s: must be at least %lld, got %lld", f->name,
                            (long long)f->ext->min, v);
        return dt_error(DT_ERR_INVALID, "--%s: must be in %lld..%lld, got %lld", f->name,
                        (long long)f->ext->min, (long long)f->ext->max, v);
    }
    *out = v;
    return DT_OK;
}

static dt_status parse_value(flag_def *f, const char *text)
{
    long long i = 0;
    dt_status st = DT_OK;
    switch (f->kind) {
    case FLAG_INT:
        if (!(st = parse_integer(f, text, -2147483647LL, 2147483647LL, &i)))
            *(int *)f->dst = (int)i;
        return st;
    case FLAG_INT64:
    case FLAG_LLONG:
    case FLAG_UINT64:
        if ((st = parse_integer(f, text, LLONG_MIN, LLONG_MAX, &i)))
            return st;
        if (f->kind == FLAG_INT64)
            *(int64_t *)f->dst = i;
        else if (f->kind == FLAG_LLONG)
            *(long long *)f->dst = i;
        else
            *(uint64_t *)f->dst = (uint64_t)i;
        return DT_OK;
    case FLAG_FLOAT:
    case FLAG_FLOAT32: {
        char *end = NULL;
        errno = 0;
        double v = strtod(text, &end);
        if (!*text || *end || errno || !isfinite(v))
            return dt_error(DT_ERR_INVALID, "--%s: expected a number, got '%s'", f->name, text);
        if (f->kind == FLAG_FLOAT)
            *(double *)f->dst = v;
        else
            *(float *)f->dst = (float)v;
        return DT_OK;
    }
    case FLAG_STRING:
        *(const char **)f->dst = text;
        return DT_OK;
    case FLAG_BOOL:
        if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0)
            *(bool *)f->dst = true;
        else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0)
            *(bool *)f->dst = false;
        else
            return dt_error(DT_ERR_INVALID, "--%s: expected true or false, got '%s'", f->name, text);
        return DT_OK;
    case FLAG_CUSTOM:
        if ((st = f->ext->custom->parse(text, f->dst)))
            return dt_error_prefix(st, "--%s", f->name);
        return DT_OK;
    }
    return DT_OK;
}

static void apply_default(flag_def *f)
{
    if (f->ext)
        f->ext->set = false;
    if (f->def == FLAG_IN_DST)
        return;
    if (f->def) {
        dt_status st = parse_value(f, f->def);
        (void)st; /* defaults are literals in this program: a bad one is caught by the tests */
        return;
    }
    switch (f->kind) {
    case FLAG_INT: *(int *)f->dst = 0; break;
    case FLAG_INT64: *(int64_t *)f->dst = 0; break;
    case FLAG_LLONG: *(long long *)f->dst = 0; break;
    case FLAG_UINT64: *(uint64_t *)f->dst = 0; break;
    case FLAG_FLOAT: *(double *)f->dst = 0.0; break;
    case FLAG_FLOAT32: *(float *)f->dst = 0.0f; break;
    case FLAG_STRING: *(const char **)f->dst = NULL; break;
    case FLAG_BOOL: *(bool *)f->dst = false; break;
    case FLAG_CUSTOM: break; /* a custom flag's unset value is its destination's */
    }
}

const flag_def *flags_find(const flag_def *flags, int n_flags, const char *name)
{
    for (int i = 0; i < n_flags; i++)
        if (strcmp(flags[i].name, name) == 0)
            return &flags[i];
    return NULL;
}

bool flags_given(const flag_def *flags, int n_flags, const char *name)
{
    const flag_def *f = flags_find(flags, n_flags, name);
    return f && f->ext && f->ext->set;
}

static dt_status parse_one(flag_def *flags, int n_flags, bool *given, int argc, char **argv,
                           int *at);

dt_status flags_parse(flag_def *flags, int n_flags, int argc, char **argv)
{
    for (int i = 0; i < n_flags; i++)
        apply_default(&flags[i]);
    bool *given = calloc((size_t)n_flags + 1, sizeof *given);
    if (!given)
        return dt_error(DT_ERR_NOMEM, "no memory for the flags");
    dt_status st = DT_OK;
    for (int i = 0; i < argc && st == DT_OK; i++)
        st = parse_one(flags, n_flags, given, argc, argv, &i);
    free(given);
    return st;
}

/* argv[*i] (and its value, *i moved past it) into its flag. */
static dt_status parse_one(flag_def *flags, int n_flags, bool *given, int argc, char **argv,
                           int *at)
{
    int i = *at;
    const char *arg = argv[i];
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
        return dt_error(DT_ERR_INVALID, "unexpected argument '%s' (flags start with --)", arg);
    char name[128];
    const char *eq = strchr(arg + 2, '=');
    size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    if (len >= sizeof name)
        return dt_error(DT_ERR_INVALID, "unknown flag '%s'", arg);
    memcpy(name, arg + 2, len);
    name[len] = '\0';
    flag_def *f = (flag_def *)flags_find(flags, n_flags, name);
    if (!f)
        return dt_error(DT_ERR_INVALID, "unknown flag '--%s' (see --help)", name);
    if (given[f - flags])
        return dt_error(DT_ERR_INVALID, "--%s: given twice", name);
    const char *value;
    if (eq) {
        value = eq + 1;
    } else if (f->kind == FLAG_BOOL) {
        value = "true";
    } else {
        if (i + 1 >= argc)
            return dt_error(DT_ERR_INVALID, "--%s: missing value", name);
        value = argv[++i];
    }
    *at = i;
    dt_status st = parse_value(f, value);
    if (st)
        return st;
    given[f - flags] = true;
    if (f->ext)
        f->ext->set = true;
    return DT_OK;
}

/* Text that reads back as v (a float when single), with the exponent unpadded ("1e-7", not
 * "1e-07"), as a person writes a default. */
static void show_number(double v, bool single, char *out, size_t cap)
{
    for (int digits = 6; digits <= 17; digits++) { /* %g's 6 digits first: 120, not 1.2e2 */
        snprintf(out, cap, "%.*g", digits, v);
        if (single ? strtof(out, NULL) == (float)v : strtod(out, NULL) == v)
            break;
    }
    char *e = strchr(out, 'e');
    if (e) {
        char *d = e + 1 + (e[1] == '-' || e[1] == '+');
        size_t zeros = strspn(d, "0");
        if (d[zeros])
            memmove(d, d + zeros, strlen(d + zeros) + 1);
        if (e[1] == '+')
            memmove(e + 1, e + 2, strlen(e + 2) + 1);
    }
}

/* The value at f's destination as text; "" when there is none to show. */
static void show_value(const flag_def *f, char *out, size_t cap)
{
    const flag_custom *c = f->ext ? f->ext->custom : NULL;
    out[0] = '\0';
    switch (f->kind) {
    case FLAG_INT: snprintf(out, cap, "%d", *(const int *)f->dst); break;
    case FLAG_INT64: snprintf(out, cap, "%lld", (long long)*(const int64_t *)f->dst); break;
    case FLAG_LLONG: snprintf(out, cap, "%lld", *(const long long *)f->dst); break;
    case FLAG_UINT64:
        snprintf(out, cap, "%llu", (unsigned long long)*(const uint64_t *)f->dst);
        break;
    case FLAG_FLOAT: show_number(*(const double *)f->dst, false, out, cap); break;
    case FLAG_FLOAT32: show_number(*(const float *)f->dst, true, out, cap); break;
    case FLAG_STRING: {
        const char *s = *(const char *const *)f->dst;
        snprintf(out, cap, "%s", s ? s : "");
        break;
    }
    case FLAG_BOOL: snprintf(out, cap, "%s", *(const bool *)f->dst ? "true" : "false"); break;
    case FLAG_CUSTOM:
        if (!c)
            break;
        if (c->show) {
            c->show(f->dst, out, cap);
            break;
        }
        for (int i = 0; c->names && c->names[i]; i++) {
            unsigned char v[16] = {0};
            if (c->n_bytes <= sizeof v && c->parse(c->names[i], v) == 0 &&
                memcmp(v, f->dst, c->n_bytes) == 0) {
                snprintf(out, cap, "%s", c->names[i]);
                break;
            }
        }
        dt_error_clear();
        break;
    }
}

void flags_print_help(const flag_def *flags, int n_flags, FILE *out)
{
    for (int i = 0; i < n_flags; i++) {
        const flag_def *f = &flags[i];
        char left[64], def[256] = "";
        const char *arg = f->kind == FLAG_CUSTOM                               ? f->ext->custom->arg
                          : f->kind == FLAG_BOOL                               ? ""
                          : f->kind == FLAG_FLOAT || f->kind == FLAG_FLOAT32   ? " X"
                          : f->kind == FLAG_STRING                             ? " S"
                                                                               : " N";
        snprintf(left, sizeof left, "  --%s%s", f->name, arg);
        if (f->ext && f->ext->shown)
            snprintf(def, sizeof def, "%s", f->ext->shown);
        else if (f->def == FLAG_IN_DST)
            show_value(f, def, sizeof def);
        else if (f->def)
            snprintf(def, sizeof def, "%s", f->def);
        fprintf(out, "%-28s %s", left, f->help);
        if (def[0])
            fprintf(out, " (default: %s)", def);
        fputc('\n', out);
    }
}

void flags_add_at(flag_table *t, const char *file, int line, flag_def row)
{
    if (t->n >= t->cap) {
        fprintf(stderr, "%s:%d: the flag table holds %d rows: '--%s' does not fit\n", file, line,
                t->cap, row.name);
        abort();
    }
    t->rows[t->n++] = row;
}

void flags_add_ext_at(flag_table *t, const char *file, int line, flag_def row, flag_ext ext)
{
    if (!t->exts) {
        fprintf(stderr, "%s:%d: '--%s' has extras, and its table no room for them\n", file, line,
                row.name);
        abort();
    }
    if (t->n < t->cap) {
        t->exts[t->n] = ext;
        row.ext = &t->exts[t->n];
    }
    flags_add_at(t, file, line, row);
}

/* ---- Field names into flag names ---- */

static const char *last_part(const char *field, size_t n, size_t *part_n)
{
    const char *p = field;
    for (size_t i = 0; i < n; i++)
        if (field[i] == '.')
            p = field + i + 1;
    *part_n = n - (size_t)(p - field);
    return p;
}

static const char *field_of(const flag_def *f) { return f->ext ? f->ext->field : NULL; }

/* The flag whose field is name[0..n), whole, else by its last part; NULL if none. */
static const flag_def *flag_of_field(const flag_def *flags, int n_flags, const char *name,
                                     size_t n)
{
    for (int i = 0; i < n_flags; i++)
        if (field_of(&flags[i]) && strlen(field_of(&flags[i])) == n &&
            memcmp(field_of(&flags[i]), name, n) == 0)
            return &flags[i];
    size_t part_n;
    const char *part = last_part(name, n, &part_n);
    for (int i = 0; i < n_flags; i++) {
        const char *field = field_of(&flags[i]);
        if (!field)
            continue;
        size_t row_n;
        const char *row = last_part(field, strlen(field), &row_n);
        if (row_n == part_n && memcmp(row, part, part_n) == 0)
            return &flags[i];
    }
    return NULL;
}

static bool is_field_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

const char *flags_name_fields(const flag_def *flags, int n_flags, const char *message)
{
    static char out[2048];
    size_t o = 0;
    const char *p = message;
#define PUT(s_, n_)                                                                                \
    do {                                                                                           \
        size_t k_ = (n_) < sizeof out - 1 - o ? (n_) : sizeof out - 1 - o;                         \
        memcpy(out + o, (s_), k_);                                                                 \
        o += k_;                                                                                   \
    } while (0)
    /* The leading fields: names joined by ", " or " and ", ended by ": ". Rewritten only when
     * every one of them is a flag's field. */
    const char *colon = strstr(message, ": ");
    if (colon) {
        char lead[2048];
        size_t lo = 0;
        bool all = true;
        const char *q = message;
        while (q < colon && all) {
            const char *start = q;
            while (q < colon && is_field_char(*q))
                q++;
            const flag_def *f = q > start ? flag_of_field(flags, n_flags, start, (size_t)(q - start))
                                          : NULL;
            if (!f) {
                all = false;
                break;
            }
            lo += (size_t)snprintf(lead + lo, sizeof lead - lo, "--%s", f->name);
            const char *sep = strncmp(q, ", ", 2) == 0 ? ", " : strncmp(q, " and ", 5) == 0 ? " and " : NULL;
            if (q < colon && !sep)
                all = false;
            else if (sep) {
                lo += (size_t)snprintf(lead + lo, sizeof lead - lo, "%s", sep);
                q += strlen(sep);
            }
            if (lo >= sizeof lead)
                all = false;
        }
        if (all) {
            PUT(lead, lo);
            p = colon;
        }
    }
    /* Fields quoted in `backquotes` anywhere after. */
    while (*p) {
        const char *tick = strchr(p, '`');
        const char *end = tick ? strchr(tick + 1, '`') : NULL;
        if (!end) {
            PUT(p, strlen(p));
            break;
        }
        const flag_def *f = flag_of_field(flags, n_flags, tick + 1, (size_t)(end - tick - 1));
        PUT(p, (size_t)(tick - p));
        if (f) {
            char flag[160];
            int n = snprintf(flag, sizeof flag, "--%s", f->name);
            PUT(flag, (size_t)n);
        } else {
            PUT(tick, (size_t)(end + 1 - tick));
        }
        p = end + 1;
    }
#undef PUT
    out[o] = '\0';
    return out;
}
