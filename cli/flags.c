/* Command-line flags (see flags.h). */
#include "flags.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static dt_status parse_value(flag_def *f, const char *text)
{
    char *end = NULL;
    errno = 0;
    switch (f->kind) {
    case FLAG_INT: {
        long v = strtol(text, &end, 10);
        if (!*text || *end || errno || v < -2147483647L || v > 2147483647L)
            return dt_error(DT_ERR_INVALID, "--%s: expected an integer, got '%s'", f->name, text);
        *(int *)f->dst = (int)v;
        return DT_OK;
    }
    case FLAG_INT64: {
        long long v = strtoll(text, &end, 10);
        if (!*text || *end || errno)
            return dt_error(DT_ERR_INVALID, "--%s: expected an integer, got '%s'", f->name, text);
        *(int64_t *)f->dst = v;
        return DT_OK;
    }
    case FLAG_FLOAT: {
        double v = strtod(text, &end);
        if (!*text || *end || errno || !isfinite(v))
            return dt_error(DT_ERR_INVALID, "--%s: expected a number, got '%s'", f->name, text);
        *(double *)f->dst = v;
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
    }
    return DT_OK;
}

static void apply_default(flag_def *f)
{
    f->set = false;
    if (f->def) {
        dt_status st = parse_value(f, f->def);
        (void)st; /* defaults are literals in this program: a bad one is caught by the tests */
        return;
    }
    switch (f->kind) {
    case FLAG_INT: *(int *)f->dst = 0; break;
    case FLAG_INT64: *(int64_t *)f->dst = 0; break;
    case FLAG_FLOAT: *(double *)f->dst = 0.0; break;
    case FLAG_STRING: *(const char **)f->dst = NULL; break;
    case FLAG_BOOL: *(bool *)f->dst = false; break;
    }
}

const flag_def *flags_find(const flag_def *flags, int n_flags, const char *name)
{
    for (int i = 0; i < n_flags; i++)
        if (strcmp(flags[i].name, name) == 0)
            return &flags[i];
    return NULL;
}

dt_status flags_parse(flag_def *flags, int n_flags, int argc, char **argv)
{
    for (int i = 0; i < n_flags; i++)
        apply_default(&flags[i]);
    for (int i = 0; i < argc; i++) {
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
        if (f->set)
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
        dt_status st = parse_value(f, value);
        if (st)
            return st;
        f->set = true;
    }
    return DT_OK;
}

void flags_print_help(const flag_def *flags, int n_flags, FILE *out)
{
    for (int i = 0; i < n_flags; i++) {
        const flag_def *f = &flags[i];
        char left[64];
        const char *arg = f->kind == FLAG_BOOL    ? ""
                          : f->kind == FLAG_FLOAT ? " X"
                          : f->kind == FLAG_STRING ? " S"
                                                   : " N";
        snprintf(left, sizeof left, "  --%s%s", f->name, arg);
        fprintf(out, "%-28s %s", left, f->help);
        if (f->def)
            fprintf(out, " (default: %s)", f->def);
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
