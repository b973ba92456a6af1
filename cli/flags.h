/* Table-driven command-line flags: each flag's default is text parsed like a user's value, so
 * `--help` shows exactly the default that applies. `--name value` and `--name=value` are accepted;
 * a boolean flag alone means true. Unknown flags, missing values and malformed numbers are
 * errors naming the flag. */
#ifndef DTRAIN_CLI_FLAGS_H
#define DTRAIN_CLI_FLAGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/status.h"

typedef enum { FLAG_INT, FLAG_INT64, FLAG_FLOAT, FLAG_STRING, FLAG_BOOL } flag_kind;

typedef struct {
    const char *name;   /* without the leading dashes */
    flag_kind kind;
    const char *def;    /* default as text; NULL: unset (string NULL, numbers 0) */
    const char *help;
    void *dst;          /* int *, int64_t *, double *, const char **, bool * */
    bool set;           /* given on the command line */
} flag_def;

/* A table being filled: rows added with flags_add, which aborts (a bug, named by file and line)
 * rather than write past the table's end. */
typedef struct {
    flag_def *rows;
    int n, cap;
} flag_table;

/* Adds row to t; aborts with the caller's file:line when t is full. */
#define flags_add(t, ...) flags_add_at((t), __FILE__, __LINE__, __VA_ARGS__)
void flags_add_at(flag_table *t, const char *file, int line, flag_def row);

/* Applies every default, then argv[0..argc). Positional arguments are errors. */
dt_status flags_parse(flag_def *flags, int n_flags, int argc, char **argv);

void flags_print_help(const flag_def *flags, int n_flags, FILE *out);

/* The flag named name, or NULL. */
const flag_def *flags_find(const flag_def *flags, int n_flags, const char *name);

#endif
