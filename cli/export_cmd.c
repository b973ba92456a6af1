/* dtrain export: a trained model written in a serving format (include/dtrain/export.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "dtrain/export.h"
#include "flags.h"

int cmd_export(int argc, char **argv)
{
    const char *model_dir, *checkpoint, *format, *out;
    int64_t threshold;
    bool help;
    char threshold_def[32];
    snprintf(threshold_def, sizeof threshold_def, "%" PRIu64, DT_EXPORT_EXTERNAL_DEFAULT);
    flag_def flags[] = {
        {"model-dir", FLAG_STRING, NULL, "the training's --model-dir: its latest checkpoint and "
         "feature spec", &model_dir, false},
        {"checkpoint", FLAG_STRING, NULL, "this checkpoint file instead (its directory holds the "
         "feature spec, if any)", &checkpoint, false},
        {"format", FLAG_STRING, NULL, "the format to write: onnx (a standard ONNX model), or "
         "dtrain (a directory the C predictor and dtrain predict open)", &format, false},
        {"out", FLAG_STRING, NULL, "onnx: the model file to write, signature.json beside it; "
         "dtrain: the directory to write", &out, false},
        {"external-data-threshold", FLAG_INT64, threshold_def, "tensors of more bytes go to "
         "OUT.data (ONNX external data) rather than into OUT", &threshold, false},
        {"help", FLAG_BOOL, "false", "this text", &help, false},
    };
    int n_flags = (int)(sizeof flags / sizeof flags[0]);
    if (flags_parse(flags, n_flags, argc, argv))
        return cli_fail(2, dt_last_error());
    if (help) {
        printf("usage: dtrain export --model-dir DIR | --checkpoint FILE --format onnx|dtrain "
               "--out PATH\n\n"
               "Writes a trained model for serving: a standard ONNX model (opset 13) and\n"
               "signature.json, which describes its inputs and outputs, in PATH's directory;\n"
               "or, with --format dtrain, the directory PATH with the model's variables alone\n"
               "(model.safetensors), its feature spec and signature.json.\n\n"
               "flags:\n");
        flags_print_help(flags, n_flags, stdout);
        return 0;
    }
    if ((model_dir == NULL) == (checkpoint == NULL))
        return cli_fail(2, "export: give --model-dir DIR or --checkpoint FILE (one of them)");
    if (!format) {
        char msg[256];
        snprintf(msg, sizeof msg, "export: give --format (formats: %s)", dt_export_format_names());
        return cli_fail(2, msg);
    }
    if (!out || !*out)
        return cli_fail(2, "export: give --out FILE");
    if (threshold < 0)
        return cli_fail(2, "--external-data-threshold: must not be negative");
    dt_export_options o;
    dt_export_options_default(&o);
    if (dt_export_format_parse(format, &o.format) != DT_OK) {
        dt_error_prefix(DT_ERR_INVALID, "--format");
        return cli_fail(2, dt_last_error());
    }
    o.out = out;
    o.external_data_threshold = (uint64_t)threshold;
    o.log = stderr;
    dt_export_result r;
    if (dt_export(model_dir, checkpoint, &o, &r) != DT_OK)
        return cli_fail(1, dt_last_error());
    if (o.format == DT_EXPORT_DTRAIN) {
        printf("Exported %s (%s, step %" PRId64 ") to %s; inputs and outputs in %s\n",
               r.checkpoint, r.model_kind, r.step, out, r.signature);
        return 0;
    }
    printf("Exported %s (%s, step %" PRId64 ") to %s: %" PRIu64 " bytes, %d nodes, %d "
           "initializers", r.checkpoint, r.model_kind, r.step, out, r.model_bytes, r.n_nodes,
           r.n_initializers);
    if (r.n_external > 0)
        printf(", %d in %s (%" PRIu64 " bytes)", r.n_external, r.data_file, r.data_bytes);
    printf("; inputs and outputs in %s\n", r.signature);
    return 0;
}
