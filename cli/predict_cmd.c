/* dtrain predict: every row of the data scored by a checkpoint's model, in input order. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "dtrain/predict.h"
#include "flags.h"
#include "read_flags.h"

int cmd_predict(int argc, char **argv)
{
    const char *model_dir, *checkpoint, *data, *out, *format, *keep;
    int batch, threads;
    bool logits, skip_bad, private_tables, help;
    dt_input_options io;
    dt_input_options_default(&io);
    flag_def rows[32];
    flag_ext exts[32];
    flag_table t = {rows, 0, 32, exts};
#define FLAG(name_, kind_, def_, help_, dst_) flags_add(&t, (flag_def){name_, kind_, def_, help_, dst_, false})
    FLAG("model-dir", FLAG_STRING, NULL, "the training's --model-dir (its latest checkpoint), or "
         "a directory dtrain export wrote", &model_dir);
    FLAG("checkpoint", FLAG_STRING, NULL, "score with this checkpoint file", &checkpoint);
    FLAG("data", FLAG_STRING, NULL, "the rows: libsvm:GLOB, csv:GLOB, criteo:GLOB, tfrecord:GLOB "
         "(a path of - is stdin), idx:IMAGES,LABELS, fashion-mnist[:DIR] (its t10k half)", &data);
    FLAG("out", FLAG_STRING, "-", "where the scores go (- is stdout)", &out);
    FLAG("format", FLAG_STRING, "tsv", "tsv, jsonl or npy", &format);
    FLAG("logits", FLAG_BOOL, "false", "also the logits (binary and multiclass heads)", &logits);
    FLAG("keep-columns", FLAG_STRING, NULL, "input columns copied beside the scores, comma-"
         "separated: label, or a feature-spec model's csv/criteo/tfrecord columns", &keep);
    FLAG("threads", FLAG_INT, "1", "threads scoring (and parsing)", &threads);
    FLAG("batch-size", FLAG_INT, "256", "rows per forward", &batch);
    FLAG("private-tables", FLAG_BOOL, "false", "copy the tables into this process (on huge "
         "pages: faster lookups in large tables) instead of mapping the checkpoint",
         &private_tables);
    FLAG("skip-bad-records", FLAG_BOOL, "false", "skip and count bad rows instead of stopping at "
         "the first", &skip_bad);
    cli_read_flags_add(&t, &io, "CTR models: fields per row of field-positional libsvm data "
                       "(default: the model's)");
    FLAG("help", FLAG_BOOL, "false", "this text", &help);
#undef FLAG
    if (flags_parse(t.rows, t.n, argc, argv))
        return cli_fail(2, dt_last_error());
    if (help) {
        printf("usage: dtrain predict --model-dir DIR | --checkpoint FILE --data SPEC [--out FILE]\n"
               "                      [--format tsv|jsonl|npy] [--logits] [--keep-columns a,b]\n\n"
               "Scores every row of the data in input order: the probability for a binary head,\n"
               "the class probabilities for a multiclass one, the value for regression. A\n"
               "feature-spec model reads raw rows through the spec saved with it.\n\n"
               "flags:\n");
        flags_print_help(t.rows, t.n, stdout);
        return 0;
    }
    dt_predict_run_options o;
    dt_predict_run_options_default(&o);
    if (dt_predict_format_parse(format, &o.format) != DT_OK)
        return cli_fail(2, dt_last_error());
    io.skip_bad_records = skip_bad;
    io.batch_size = batch > 0 ? batch : 1;
    if (dt_input_options_check(&io) != DT_OK)
        return cli_fail(2, flags_name_fields(t.rows, t.n, dt_last_error()));
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
