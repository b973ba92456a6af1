/* Table-driven command-line flags: one row a flag, naming it, where its value goes, its default,
 * the range a given value must lie in (where the library has no rule of its own), its help, and
 * the library field it sets. `--name value` and `--name=value` are accepted; a boolean flag alone
 * means true. Unknown flags, missing values and malformed numbers are errors naming the flag.
 *
 * A flag whose value is a field of a library config points straight at that field, and its
 * default is whatever the config's dt_*_default put there (def FLAG_IN_DST): `--help` prints it
 * from the struct, so the default is written once, in the library. The library checks the
 * config and names the field in its errors ("fit.batch_size: ..."); flags_name_fields turns those
 * names back into the command's flags for the user. */
#ifndef DTRAIN_CLI_FLAGS_H
#define DTRAIN_CLI_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/status.h"

typedef enum {
    FLAG_INT,     /* int */
    FLAG_INT64,   /* int64_t */
    FLAG_LLONG,   /* long long */
    FLAG_UINT64,  /* uint64_t, given as a signed integer (as seeds always were) */
    FLAG_FLOAT,   /* double */
    FLAG_FLOAT32, /* float, parsed as a double and rounded */
    FLAG_STRING,  /* const char * */
    FLAG_BOOL,    /* bool */
    FLAG_CUSTOM,  /* custom->parse and custom->show */
} flag_kind;

/* How a custom flag's text becomes its value, and back. */
typedef struct {
    /* text into *dst; an error without the flag's name (flags_parse puts "--name: " first). */
    dt_status (*parse)(const char *text, void *dst);
    /* *dst as --help shows the default; "" for none. NULL with names: the name that parses to
     * the n_bytes at dst. */
    void (*show)(const void *dst, char *out, size_t cap);
    const char *const *names; /* NULL-terminated: an enum's names, for show */
    size_t n_bytes;           /* with names: the size of the enum at dst */
    const char *arg;          /* what --help writes after the name: " S", " X", " N" */
} flag_custom;

/* What a row of a config-driven table says beyond the basic five: kept apart so that a plain
 * table stays {name, kind, def, help, dst, false}. */
typedef struct {
    const char *field;  /* the library field it sets, as its errors name it ("fit.batch_size") */
    const flag_custom *custom; /* FLAG_CUSTOM */
    /* A given integer must lie in [min, max] when min < max: the command's own rule, for a
     * value the library reads otherwise (--threads 0 is not offered, the library's 0 is "all
     * cores"). */
    int64_t min, max;
    const char *shown;  /* --help's default, when the value is chosen later (the cluster's) */
    bool set;           /* given on the command line */
} flag_ext;

typedef struct {
    const char *name;   /* without the leading dashes */
    flag_kind kind;
    /* Default as text, parsed like a user's value; NULL: unset (string NULL, numbers 0, none
     * shown); FLAG_IN_DST: the value dst holds before flags_parse (a dt_*_default's), shown. */
    const char *def;
    const char *help;
    void *dst;          /* int *, int64_t *, ..., as kind says */
    flag_ext *ext;      /* NULL for a plain flag; the table's for one added with flags_add_ext */
} flag_def;

extern const char flag_in_dst[];
#define FLAG_IN_DST flag_in_dst

/* A table being filled: rows added with flags_add (and flags_add_ext, whose extras go in exts),
 * which abort (a bug, named by file and line) rather than write past the table's end. */
typedef struct {
    flag_def *rows;
    int n, cap;
    flag_ext *exts; /* cap of them, or NULL when every row is plain */
} flag_table;

/* Adds row to t; aborts with the caller's file:line when t is full. */
#define flags_add(t, ...) flags_add_at((t), __FILE__, __LINE__, __VA_ARGS__)
void flags_add_at(flag_table *t, const char *file, int line, flag_def row);
/* Adds row with its extras (row.ext is set to t's copy of ext). */
#define flags_add_ext(t, row, ext) flags_add_ext_at((t), __FILE__, __LINE__, row, ext)
void flags_add_ext_at(flag_table *t, const char *file, int line, flag_def row, flag_ext ext);

/* Adds the row of a flag that sets member_ of the struct base_ (an lvalue, e.g. *c), its default
 * base_'s value, its field named "member_" as written ("fit.batch_size"), with any more of
 * flag_ext's fields after help_ (.custom = ..., .min = ...). */
#define flags_add_field(t_, base_, name_, kind_, member_, help_, ...)                              \
    flags_add_ext((t_), ((flag_def){.name = (name_), .kind = (kind_), .def = FLAG_IN_DST,          \
                                    .help = (help_), .dst = &(base_).member_}),                    \
                  ((flag_ext){.field = #member_, __VA_ARGS__}))

/* Applies every default, then argv[0..argc). Positional arguments are errors. */
dt_status flags_parse(flag_def *flags, int n_flags, int argc, char **argv);

/* Each flag with its help and default, as the defaults stand before flags_parse. */
void flags_print_help(const flag_def *flags, int n_flags, FILE *out);

/* The flag named name, or NULL. */
const flag_def *flags_find(const flag_def *flags, int n_flags, const char *name);
/* Whether the flag named name, a row with extras, was given (false for any other). */
bool flags_given(const flag_def *flags, int n_flags, const char *name);

/* message with the library's field names turned into the flags that set them: the fields it
 * starts with ("fit.batch_size: ...", "numeric_columns and categorical_columns: ...") and any
 * field quoted in `backquotes`. A field matches a row's field whole, or by its last part
 * ("input.prefetch" and "prefetch" match "fit.prefetch"). Returns a static buffer. */
const char *flags_name_fields(const flag_def *flags, int n_flags, const char *message);

#endif
