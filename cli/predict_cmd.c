/* dtrain predict: every row of the data scored by a checkpoint's model, in input order. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "dtrain/predict.h"
#include "flags.h"

int cmd_predict(int argc, char **argv)
{
    const char *model_dir, *checkpoint, *data, *out, *format, *keep, *features, *label_key;
    const char *compression, *label_column, *ids_key, *values_key;
    int batch, threads, num_features, index_base, field_size;
    int64_t hash_buckets;
    bool logits, skip_bad, csv_header, private_tables, help;
    flag_def flags[] = {
        {"model-dir", FLAG_STRING, NULL, "the training's --model-dir (its latest checkpoint), or "
         "a directory dtrain export wrote", &model_dir, false},
        {"checkpoint", FLAG_STRING, NULL, "score with this checkpoint file", &checkpoint, false},
        {"data", FLAG_STRING, NULL, "the rows: libsvm:GLOB, csv:GLOB, criteo:GLOB, tfrecord:GLOB "
         "(a path of - is stdin), idx:IMAGES,LABELS, fashion-mnist[:DIR] (its t10k half)", &data,
         false},
        {"out", FLAG_STRING, "-", "where the scores go (- is stdout)", &out, false},
        {"format", FLAG_STRING, "tsv", "tsv, jsonl or npy", &format, false},
        {"logits", FLAG_BOOL, "false", "also the logits (binary and multiclass heads)", &logits,
         false},
        {"keep-columns", FLAG_STRING, NULL, "input columns copied beside the scores, comma-"
         "separated: label, or a feature-spec model's csv/criteo/tfrecord columns", &keep,
         false},
        {"threads", FLAG_INT, "1", "threads scoring (and parsing)", &threads, false},
        {"batch-size", FLAG_INT, "256", "rows per forward", &batch, false},
        {"private-tables", FLAG_BOOL, "false", "copy the tables into this process (on huge "
         "pages: faster lookups in large tables) instead of mapping the checkpoint",
         &private_tables, false},
        {"skip-bad-records", FLAG_BOOL, "false", "skip and count bad rows instead of stopping at "
         "the first", &skip_bad, false},
        {"features", FLAG_STRING, NULL, "tfrecord: the Example features to read, "
         "KEY:LENGTH[:SCALE[:DEFAULT]],...", &features, false},
        {"label-key", FLAG_STRING, "label", "tfrecord: the feature holding the label", &label_key,
         false},
        {"compression", FLAG_STRING, "auto", "tfrecord: none, gzip, zlib or auto", &compression,
         false},
        {"num-features", FLAG_INT, "0", "libsvm: dense features per example", &num_features,
         false},
        {"index-base", FLAG_INT, "1", "libsvm: the first feature index", &index_base, false},
        {"field-size", FLAG_INT, "0", "CTR models: fields per row of field-positional libsvm "
         "data (default: the model's)", &field_size, false},
        {"ids-key", FLAG_STRING, "ids", "tfrecord, CTR models: the int64 feature ids", &ids_key,
         false},
        {"values-key", FLAG_STRING, "values", "tfrecord, CTR models: the float feature values",
         &values_key, false},
        {"hash-buckets", FLAG_INT64, "0", "CTR models: ids hashed with their field into this "
         "many rows (as dtrain train's --hash-buckets)", &hash_buckets, false},
        {"csv-header", FLAG_BOOL, "false", "csv: the first line names the columns", &csv_header,
         false},
        {"label-column", FLAG_STRING, NULL, "csv: the label's column, by name or 0-based index",
         &label_column, false},
        {"help", FLAG_BOOL, "false", "this text", &help, false},
    };
    int n_flags = (int)(sizeof flags / sizeof flags[0]);
    if (flags_parse(flags, n_flags, argc, argv))
        return cli_fail(2, dt_last_error());
    if (help) {
        printf("usage: dtrain predict --model-dir DIR | --checkpoint FILE --data SPEC [--out FILE]\n"
               "                      [--format tsv|jsonl|npy] [--logits] [--keep-columns a,b]\n\n"
               "Scores every row of the data in input order: the probability for a binary head,\n"
               "the class probabilities for a multiclass one, the value for regression. A\n"
               "feature-spec model reads raw rows through the spec saved with it.\n\n"
               "flags:\n");
        flags_print_help(flags, n_flags, stdout);
        return 0;
    }
    dt_predict_run_options o;
    dt_predict_run_options_default(&o);
    dt_input_options io;
    dt_input_options_default(&io);
    if (dt_predict_format_parse(format, &o.format) != DT_OK)
        return cli_fail(2, dt_last_error());
    if (dt_compression_parse(compression, &io.compression) != DT_OK) {
        dt_error_prefix(DT_ERR_INVALID, "--compression");
        return cli_fail(2, dt_last_error());
    }
    io.features = features, io.label_key = label_key, io.num_features = num_features;
    io.index_base = index_base, io.csv_header = csv_header, io.label_column = label_column;
    io.field_size = field_size, io.hash_buckets = hash_buckets;
    io.ids_key = ids_key, io.values_key = values_key, io.skip_bad_records = skip_bad;
    io.batch_size = batch > 0 ? batch : 1;
    if (dt_input_options_check(&io) != DT_OK)
        return cli_fail(2, dt_last_error());
    o.model_dir = model_dir, o.checkpoint = checkpoint, o.data = data, o.input = &io;
    o.out = out, o.logits = logits, o.keep_columns = keep, o.threads = threads;
    o.batch_size = batch, o.private_tables = private_tables, o.log = stderr;
    dt_predict_run_result r;
    dt_status st = dt_predict_run(&o, &r);
    if (st)
        return cli_fail(st == DT_ERR_INVALID ? 2 : 1, dt_last_error());
    if (r.bad_records > 0)
        fprintf(stderr, "dtrain predict: skipped %lld bad record%s\n", (long long)r.bad_records,
                r.bad_records == 1 ? "" : "s");
    return 0;
}
