/* dtrain convert and dtrain data head: moving data between the formats dtrain reads, and looking
 * at a file's first records as JSON lines. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "../src/core/clock.h"
#include "../src/core/fileio.h"
#include "dtrain/gen_ctr.h"
#include "dtrain/pool.h"
#include "dtrain/example.h"
#include "dtrain/features.h"
#include "dtrain/idx.h"
#include "dtrain/sources.h"
#include "dtrain/tfrecord.h"
#include "flags.h"

/* ---- convert ---- */

/* IDX images and labels -> Examples {"image": bytes (H * W * C), "label": int64}. */
static dt_status convert_idx(const char *in, dt_tfrecord_writer *w, int64_t *count)
{
    const char *comma = strchr(in, ',');
    if (!comma)
        return dt_error(DT_ERR_INVALID, "--from idx: IN is IMAGES,LABELS, got '%s'", in);
    char images[4096];
    snprintf(images, sizeof images, "%.*s", (int)(comma - in), in);
    dt_image_dataset ds;
    dt_status st = dt_image_dataset_load(images, comma + 1, &ds);
    if (st)
        return st;
    size_t item = (size_t)ds.h * ds.w * ds.c;
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (int i = 0; i < ds.n && st == DT_OK; i++) {
        int64_t label = ds.labels[i];
        dt_feature_value f[2] = {{"image", DT_FEATURE_BYTES, item, NULL, NULL, ds.images + i * item},
                                 {"label", DT_FEATURE_INT64, 1, NULL, &label, NULL}};
        if ((st = dt_example_encode(f, 2, &buf, &len, &cap)) == DT_OK)
            st = dt_tfrecord_write(w, buf, len);
    }
    *count = ds.n;
    free(buf);
    dt_image_dataset_free(&ds);
    return st;
}

/* How the rows to convert are read. */
typedef struct {
    const char *from;       /* libsvm or criteo */
    int num_features, index_base;
    int field_size;         /* libsvm: > 0, field-positional CTR rows */
    int64_t hash_buckets;   /* criteo; field-positional libsvm: hash the ids */
} convert_input;

/* LibSVM or Criteo TSV -> Examples: {"label", "ids", "values"}, the sparse form a CTR model
 * reads (field-positional LibSVM and Criteo's rows as their fields, in field order); with
 * num_features N, {"label", "features": N floats} instead. */
static dt_status convert_rows(const char *in, const convert_input *ci, dt_tfrecord_writer *w,
                              int64_t *count)
{
    int num_features = ci->num_features;
    dt_file_list files;
    dt_status st = dt_file_list_glob(in, &files);
    if (st)
        return st;
    dt_libsvm_options lo;
    dt_libsvm_options_default(&lo);
    lo.n_dense = num_features;
    lo.index_base = ci->index_base;
    if (ci->field_size > 0) {
        lo.index_base = 0;
        lo.field_size = ci->field_size;
        lo.hash_buckets = ci->hash_buckets;
    }
    dt_source_options so;
    dt_source_options_default(&so);
    dt_dataset *ds = NULL;
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    *count = 0;
    st = strcmp(ci->from, "criteo") == 0 ? dt_dataset_criteo(&files, ci->hash_buckets, &so, &ds)
                                         : dt_dataset_libsvm(&files, &lo, &so, &ds);
    if (st)
        goto fail;
    for (;;) {
        dt_elem *e;
        if ((st = dt_dataset_next(ds, &e))) {
            if (st == DT_END)
                st = DT_OK;
            break;
        }
        float label = e->labels[0];
        dt_feature_value f[3];
        int n = 0;
        f[n++] = (dt_feature_value){"label", DT_FEATURE_FLOAT, 1, &label, NULL, NULL};
        if (num_features > 0) {
            f[n++] = (dt_feature_value){"features", DT_FEATURE_FLOAT, (size_t)num_features,
                                        e->dense, NULL, NULL};
        } else {
            f[n++] = (dt_feature_value){"ids", DT_FEATURE_INT64, e->nnz, NULL, e->sp_ids, NULL};
            f[n++] = (dt_feature_value){"values", DT_FEATURE_FLOAT, e->nnz, e->sp_vals, NULL, NULL};
        }
        st = dt_example_encode(f, n, &buf, &len, &cap);
        if (st == DT_OK)
            st = dt_tfrecord_write(w, buf, len);
        dt_elem_free(e);
        if (st)
            break;
        (*count)++;
    }
fail:
    free(buf);
    dt_dataset_destroy(ds);
    dt_file_list_free(&files);
    return st;
}

int cmd_convert(int argc, char **argv)
{
    const char *from, *to, *compression;
    int num_features, index_base, field_size;
    int64_t hash_buckets;
    bool help;
    flag_def flags[] = {
        {"from", FLAG_STRING, NULL,
         "input format: idx (IN = IMAGES,LABELS), libsvm or criteo (IN = GLOB)", &from, false},
        {"to", FLAG_STRING, "tfrecord", "output format: tfrecord", &to, false},
        {"compression", FLAG_STRING, "none", "output compression: none, gzip, zlib", &compression, false},
        {"num-features", FLAG_INT, "0", "libsvm: write N dense floats as 'features' (0: sparse 'ids' and 'values')", &num_features, false},
        {"index-base", FLAG_INT, "1", "libsvm: the first feature index (1 as LibSVM counts)", &index_base, false},
        {"field-size", FLAG_INT, "0",
         "libsvm: field-positional CTR rows of this many fields (0: plain LibSVM)", &field_size,
         false},
        {"hash-buckets", FLAG_INT64, "0",
         "criteo, or field-positional libsvm: ids hashed with their field into this many rows",
         &hash_buckets, false},
        {"help", FLAG_BOOL, "false", "this text", &help, false},
    };
    int n_flags = (int)(sizeof flags / sizeof flags[0]);
    /* The two positional arguments come last: IN OUT. */
    if (argc >= 1 && (strcmp(argv[0], "--help") == 0)) {
        printf("usage: dtrain convert --from idx|libsvm|criteo --to tfrecord [flags] IN OUT\n\n"
               "LibSVM and Criteo's TSV become Examples of label, ids and values (the DeepFM "
               "sample's TFRecord form), or with --num-features of label and features.\n\n"
               "flags:\n");
        flags_print_help(flags, n_flags, stdout);
        return 0;
    }
    /* Flags first, so an unknown one is named as such rather than taken for IN or OUT. */
    int n_positional = argc >= 2 ? 2 : argc;
    if (flags_parse(flags, n_flags, argc - n_positional, argv))
        return cli_fail(2, dt_last_error());
    if (argc < 2 || strncmp(argv[argc - 1], "--", 2) == 0 || strncmp(argv[argc - 2], "--", 2) == 0)
        return cli_fail(2, "convert: expected IN OUT after the flags (see dtrain convert --help)");
    const char *in = argv[argc - 2], *out = argv[argc - 1];
    dt_compression c;
    if (!from)
        return cli_fail(2, "convert: --from is required (idx or libsvm)");
    if (strcmp(to, "tfrecord") != 0)
        return cli_fail(2, "--to: only tfrecord is written");
    if (strcmp(from, "idx") != 0 && strcmp(from, "libsvm") != 0 && strcmp(from, "criteo") != 0)
        return cli_fail(2, "--from: expected idx, libsvm or criteo");
    if (strcmp(from, "criteo") == 0 && hash_buckets <= 13)
        return cli_fail(2, "--hash-buckets: criteo data hashes its categories into that many "
                        "rows (more than 13)");
    if (field_size < 0 || hash_buckets < 0 || (field_size > 0 && num_features > 0))
        return cli_fail(2, "--field-size and --hash-buckets must not be negative, and "
                        "field-positional rows have no --num-features");
    if (dt_compression_parse(compression, &c) || c == DT_COMPRESSION_AUTO)
        return cli_fail(2, "--compression: expected none, gzip or zlib");
    if (num_features < 0 || num_features > (1 << 24))
        return cli_fail(2, "--num-features: must be in 0..16777216");
    /* A regular file (or a new one) is written beside OUT and renamed over it when complete, so
     * a bad input never destroys an existing OUT nor leaves half of one; anything else (stdout,
     * a pipe) is written in place and never removed. */
    dt_file_replace r;
    dt_tfrecord_writer *w;
    dt_status st = dt_file_replace_begin(&r, out, true);
    if (st || (st = dt_tfrecord_writer_open(dt_file_replace_path(&r), c, &w)))
        return cli_fail(1, dt_last_error());
    int64_t count = 0;
    convert_input ci = {from, num_features, index_base, field_size, hash_buckets};
    st = strcmp(from, "idx") == 0 ? convert_idx(in, w, &count) : convert_rows(in, &ci, w, &count);
    dt_status close_st = dt_tfrecord_writer_close(w);
    if (st == DT_OK)
        st = close_st;
    if (st == DT_OK)
        st = dt_file_replace_commit(&r);
    if (st) {
        char msg[1200];
        snprintf(msg, sizeof msg, "%s", dt_last_error());
        dt_file_replace_abort(&r);
        return cli_fail(1, msg);
    }
    printf("Wrote %lld records to %s\n", (long long)count, out);
    return 0;
}

/* ---- data head ---- */

static dt_status head_tfrecord(const char *path, int64_t n)
{
    dt_tfrecord_reader *r;
    dt_status st = dt_tfrecord_open(path, DT_COMPRESSION_AUTO, 0, &r);
    if (st)
        return st;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *data;
        size_t len;
        uint64_t offset;
        if ((st = dt_tfrecord_next(r, &data, &len, &offset)))
            break;
        char *text;
        if ((st = dt_example_to_json(data, len, &text))) {
            dt_error_prefix(st, "%s: record at offset %llu", path, (unsigned long long)offset);
            break;
        }
        printf("%s\n", text);
        free(text);
    }
    dt_tfrecord_close(r);
    return st == DT_END ? DT_OK : st;
}

static dt_status head_idx(const char *path, int64_t n)
{
    dt_idx idx;
    dt_status st = dt_idx_read(path, &idx);
    if (st)
        return st;
    size_t item = 1;
    for (int d = 1; d < idx.n_dims; d++)
        item *= idx.dims[d];
    for (int64_t i = 0; i < n && (uint64_t)i < idx.dims[0]; i++) {
        printf("{\"index\": %lld, \"shape\": [", (long long)i);
        for (int d = 1; d < idx.n_dims; d++)
            printf("%s%u", d > 1 ? ", " : "", idx.dims[d]);
        printf("], \"values\": [");
        for (size_t k = 0; k < item; k++)
            printf("%s%u", k ? ", " : "", idx.data[(size_t)i * item + k]);
        printf("]}\n");
    }
    dt_idx_free(&idx);
    return DT_OK;
}

static dt_status head_libsvm(const char *path, int64_t n)
{
    dt_file_list files;
    dt_status st = dt_file_list_glob(path, &files);
    if (st)
        return st;
    dt_libsvm_options lo;
    dt_libsvm_options_default(&lo);
    lo.index_base = 0; /* print the indices as written */
    lo.zero_based_ok = true;
    dt_source_options so;
    dt_source_options_default(&so);
    dt_dataset *ds = NULL;
    if ((st = dt_dataset_libsvm(&files, &lo, &so, &ds)))
        goto fail;
    for (int64_t i = 0; i < n; i++) {
        dt_elem *e;
        if ((st = dt_dataset_next(ds, &e)))
            break;
        printf("{\"label\": %.9g, \"features\": {", e->labels[0]);
        for (size_t k = 0; k < e->nnz; k++)
            printf("%s\"%lld\": %.9g", k ? ", " : "", (long long)e->sp_ids[k], e->sp_vals[k]);
        printf("}}\n");
        dt_elem_free(e);
    }
    if (st == DT_END)
        st = DT_OK;
fail:
    dt_dataset_destroy(ds);
    dt_file_list_free(&files);
    return st;
}

/* ---- gen-ctr ---- */

static int cmd_gen_ctr(int argc, char **argv)
{
    int64_t rows, seed, id_space, first_row;
    const char *format, *out;
    int threads;
    bool help;
    flag_def flags[] = {
        {"rows", FLAG_INT64, "100000", "rows to write", &rows, false},
        {"id-space", FLAG_INT64, "0", "the wide form: each categorical field's values come from "
         "this many (10^8 and more), with a long tail, drifting over the rows (values appear and "
         "disappear); 0: fields of 10 to 10^6 values", &id_space, false},
        {"first-row", FLAG_INT64, "0", "the wide form's position of the first row: a test set "
         "written from the training set's row count continues it in time", &first_row, false},
        {"seed", FLAG_INT64, "1", "picks the rows; the teacher is the same for every seed",
         &seed, false},
        {"format", FLAG_STRING, "libsvm", "libsvm (field-positional, as the DeepFM sample), "
         "criteo (Criteo's TSV), tfrecord (Examples of label, ids, values), tfrecord-columns "
         "(Examples of I1..I13, C1..C26), csv (the criteo columns under a header) or census "
         "(census rows in the UCI Adult columns, as CSV under a header, with a teacher of their "
         "own)", &format, false},
        {"out", FLAG_STRING, NULL, "the file to write", &out, false},
        {"threads", FLAG_INT, "0", "threads (0: every core)", &threads, false},
        {"help", FLAG_BOOL, "false", "this text", &help, false},
    };
    int n_flags = (int)(sizeof flags / sizeof flags[0]);
    if (flags_parse(flags, n_flags, argc, argv))
        return cli_fail(2, dt_last_error());
    if (help) {
        printf("usage: dtrain data gen-ctr --rows N --seed S --format "
               "libsvm|criteo|tfrecord|tfrecord-columns|csv|census --out FILE\n\nSynthetic "
               "Criteo-like click data (13 numeric and 26 categorical "
               "fields) labelled by a fixed teacher with pairwise interactions. Prints the "
               "teacher's AUC on the rows and the feature_size a model needs.\n\n--format census "
               "writes census rows instead, in the UCI Adult data's 15 columns (age, workclass, "
               "fnlwgt, education, education_num, marital_status, occupation, relationship, race, "
               "gender, capital_gain, capital_loss, hours_per_week, native_country, "
               "income_bracket) under a header, labelled \"<=50K\" or \">50K\" (about 24%%) by a "
               "teacher with education x occupation and age x education x occupation "
               "interactions, as TensorFlow's census wide & deep tutorial reads them "
               "(examples/census_wide_deep.json). Prints the teacher's AUC and the share of "
               "\">50K\".\n\nflags:\n");
        flags_print_help(flags, n_flags, stdout);
        return 0;
    }
    dt_gen_format fmt;
    if (!out)
        return cli_fail(2, "--out: the file to write is required");
    if (dt_gen_format_parse(format, &fmt))
        return cli_fail(2, dt_last_error());
    if (threads < 0 || threads > 1024 || rows < 1 || seed < 0)
        return cli_fail(2, "--threads must be in 0..1024, --rows positive, --seed not negative");
    dt_pool *pool = NULL;
    dt_status st = dt_pool_create(threads ? threads : dt_cpu_count(), &pool);
    dt_gen_result r;
    double t0 = dt_clock_now();
    dt_gen_options go = {.format = fmt, .rows = rows, .seed = (uint64_t)seed,
                         .id_space = id_space, .first_row = first_row};
    if (st == DT_OK)
        st = dt_gen_ctr_ex(out, &go, pool, &r);
    dt_pool_destroy(pool);
    if (st)
        return cli_fail(st == DT_ERR_INVALID ? 2 : 1, dt_last_error());
    double secs = dt_clock_now() - t0;
    if (fmt == DT_GEN_CENSUS)
        printf("rows=%lld teacher_auc=%.4f positives=%.4f rows_per_s=%.0f\n", (long long)r.rows,
               r.teacher_auc, r.ctr, (double)r.rows / (secs > 0 ? secs : 1e-9));
    else
        printf("rows=%lld feature_size=%lld field_size=39 teacher_auc=%.4f ctr=%.4f "
               "rows_per_s=%.0f\n", (long long)r.rows, (long long)r.feature_size,
               r.teacher_auc, r.ctr, (double)r.rows / (secs > 0 ? secs : 1e-9));
    return 0;
}

/* ---- transform ---- */

/* Each row of --data through the spec, as JSON lines: how a user checks their preprocessing. */
static dt_status print_transformed(const dt_features *f, const char *data, int64_t n,
                                   bool skip_bad, int64_t *bad)
{
    dt_input_spec spec;
    dt_input_options o;
    dt_input in;
    dt_feature_parser *parser = NULL;
    memset(&in, 0, sizeof in);
    dt_input_options_default(&o);
    o.batch_size = 256;
    o.keep_remainder = true;
    o.shuffle_buffer = 0;
    o.prefetch = 0;
    o.skip_bad_records = skip_bad;
    dt_status st = dt_input_spec_parse(data, "--data", &spec);
    if (st == DT_OK)
        st = dt_feature_parser_new(f, &parser);
    if (st == DT_OK) {
        o.row_parser = dt_feature_parser_rows(parser);
        st = dt_input_open(&spec, NULL, &o, NULL, &in);
    }
    int64_t printed = 0;
    dt_elem *e = NULL;
    while (st == DT_OK && (n == 0 || printed < n) && (st = dt_dataset_next(in.train, &e)) == DT_OK) {
        for (int r = 0; r < e->n && (n == 0 || printed < n) && st == DT_OK; r++, printed++) {
            char *line = dt_features_row_json(f, e, r);
            if (!line || printf("%s\n", line) < 0)
                st = dt_error(line ? DT_ERR_IO : DT_ERR_NOMEM, "stdout: %s",
                              line ? "write failed" : "no memory");
            free(line);
        }
        dt_elem_free(e);
    }
    *bad = in.bad_records;
    dt_input_free(&in);
    dt_feature_parser_free(parser);
    return st == DT_END ? DT_OK : st;
}

static int cmd_transform(int argc, char **argv)
{
    const char *spec_path, *data, *write_spec;
    int64_t n;
    int threads;
    bool skip_bad, help;
    flag_def flags[] = {
        {"feature-spec", FLAG_STRING, NULL, "the feature spec (JSON, docs/FEATURES.md)",
         &spec_path, false},
        {"data", FLAG_STRING, NULL, "csv:GLOB (with a header), criteo:GLOB or tfrecord:GLOB",
         &data, false},
        {"n", FLAG_INT64, "10", "rows to print (0: all)", &n, false},
        {"threads", FLAG_INT, "0", "threads of an adapt pass (0: every core)", &threads, false},
        {"skip-bad-records", FLAG_BOOL, "false", "skip and count rows that do not parse",
         &skip_bad, false},
        {"write-spec", FLAG_STRING, NULL, "also write the spec with what was adapted filled in",
         &write_spec, false},
        {"help", FLAG_BOOL, "false", "this text", &help, false},
    };
    int n_flags = (int)(sizeof flags / sizeof flags[0]);
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "-n") == 0)
            argv[i] = "--n";
    if (flags_parse(flags, n_flags, argc, argv))
        return cli_fail(2, dt_last_error());
    if (help) {
        printf("usage: dtrain data transform --feature-spec SPEC --data DATA [-n N]\n\nEach row's "
               "column outputs (ids, weights, values) and label as JSON lines, after any adapt "
               "pass the spec needs (over DATA).\n\nflags:\n");
        flags_print_help(flags, n_flags, stdout);
        return 0;
    }
    if (!spec_path || !data)
        return cli_fail(2, "data transform: --feature-spec and --data are required");
    if (n < 0 || threads < 0 || threads > 1024)
        return cli_fail(2, "-n must be 0 or more, --threads in 0..1024");
    dt_features *f = NULL;
    dt_input_spec ds;
    int64_t bad = 0, bad_adapt = 0;
    dt_status st = dt_features_load(spec_path, &f);
    if (st == DT_OK && dt_features_needs_adapt(f) &&
        (st = dt_input_spec_parse(data, "--data", &ds)) == DT_OK)
        st = dt_features_adapt(f, &ds, threads ? threads : dt_cpu_count(), skip_bad, &bad_adapt);
    if (st == DT_OK && write_spec) {
        char *text = dt_features_to_json(f);
        dt_file_part part = {text, text ? strlen(text) : 0};
        st = text ? dt_file_write_atomic(write_spec, &part, 1)
                  : dt_error(DT_ERR_NOMEM, "no memory for the spec");
        free(text);
    }
    if (st == DT_OK)
        st = print_transformed(f, data, n, skip_bad, &bad);
    dt_features_destroy(f);
    if (st)
        return cli_fail(1, dt_last_error());
    if (bad || bad_adapt)
        fprintf(stderr, "dtrain: skipped %lld bad rows\n", (long long)(bad > bad_adapt ? bad
                                                                                : bad_adapt));
    return fflush(stdout) == 0 ? 0 : cli_fail(1, "stdout: write failed");
}

int cmd_data(int argc, char **argv)
{
    if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        printf("usage: dtrain data head FILE --format idx|tfrecord|libsvm [-n N]\n"
               "       dtrain data transform --feature-spec SPEC --data DATA [-n N]\n"
               "       dtrain data gen-ctr --rows N --seed S --format "
               "libsvm|criteo|tfrecord|tfrecord-columns|csv|census --out FILE\n\n"
               "subcommands:\n  head     the first records of a file, decoded, as JSON lines "
               "(dtrain data head --help)\n  gen-ctr  synthetic click (or census) data with a "
               "known teacher (dtrain data gen-ctr --help)\n  transform  rows through a feature spec, as JSON "
               "lines (dtrain data transform --help)\n");
        return 0;
    }
    if (argc >= 1 && strcmp(argv[0], "gen-ctr") == 0)
        return cmd_gen_ctr(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "transform") == 0)
        return cmd_transform(argc - 1, argv + 1);
    if (argc < 1 || strcmp(argv[0], "head") != 0)
        return cli_fail(2, "usage: dtrain data head FILE --format idx|tfrecord|libsvm [-n N]");
    const char *format;
    int64_t n;
    bool help;
    flag_def flags[] = {
        {"format", FLAG_STRING, NULL, "idx, tfrecord or libsvm", &format, false},
        {"n", FLAG_INT64, "5", "records to print", &n, false},
        {"help", FLAG_BOOL, "false", "this text", &help, false},
    };
    int n_flags = (int)(sizeof flags / sizeof flags[0]);
    /* FILE anywhere among the flags; -n is accepted for --n. A word is a flag's value when it
     * follows a flag that takes one and has no '=' (only --help takes none). */
    char *args[64];
    int n_args = 0;
    const char *file = NULL;
    bool value_next = false;
    for (int i = 1; i < argc && n_args < 63; i++) {
        const char *a = argv[i];
        bool is_flag = a[0] == '-' && a[1] != '\0';
        if (is_flag) {
            args[n_args++] = strcmp(a, "-n") == 0 ? "--n" : argv[i];
            value_next = !strchr(a, '=') && strcmp(a, "--help") != 0;
        } else if (value_next) {
            args[n_args++] = argv[i];
            value_next = false;
        } else if (!file) {
            file = a;
        } else {
            args[n_args++] = argv[i]; /* a second FILE: flags_parse names it */
        }
    }
    if (flags_parse(flags, n_flags, n_args, args))
        return cli_fail(2, dt_last_error());
    if (help) {
        printf("usage: dtrain data head FILE --format idx|tfrecord|libsvm [-n N]\n\nflags:\n");
        flags_print_help(flags, n_flags, stdout);
        return 0;
    }
    if (!file)
        return cli_fail(2, "data head: FILE is missing");
    if (!format)
        return cli_fail(2, "data head: --format is required (idx, tfrecord or libsvm)");
    if (n < 0)
        return cli_fail(2, "-n: must be 0 or more");
    dt_status st;
    if (strcmp(format, "tfrecord") == 0)
        st = head_tfrecord(file, n);
    else if (strcmp(format, "idx") == 0)
        st = head_idx(file, n);
    else if (strcmp(format, "libsvm") == 0)
        st = head_libsvm(file, n);
    else
        return cli_fail(2, "--format: expected idx, tfrecord or libsvm");
    if (st)
        return cli_fail(1, dt_last_error());
    return fflush(stdout) == 0 ? 0 : cli_fail(1, "stdout: write failed");
}
