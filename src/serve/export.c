/* Exports (see include/dtrain/export.h): the formats a model can be written in, each a name and
 * a writer. A new format is one more writer in src/serve/, one more row of `formats` and its
 * name in dt_export_format_names. */
#include "dtrain/export.h"

#include <stdio.h>
#include <string.h>

void dt_export_options_default(dt_export_options *o)
{
    memset(o, 0, sizeof *o);
    o->format = DT_EXPORT_ONNX;
    o->external_data_threshold = DT_EXPORT_EXTERNAL_DEFAULT;
}

typedef dt_status (*export_fn)(const char *model_dir, const char *checkpoint,
                               const dt_export_options *o, dt_export_result *result);

/* Each format: its name, as --format takes it, and its writer. */
static const struct {
    const char *name;
    dt_export_format format;
    export_fn fn;
} formats[] = {
    {"onnx", DT_EXPORT_ONNX, dt_export_onnx},
};
#define N_FORMATS (int)(sizeof formats / sizeof formats[0])

/* The names of the rows above, for usage texts and messages. */
const char *dt_export_format_names(void) { return "onnx"; }

dt_status dt_export_format_parse(const char *name, dt_export_format *out)
{
    for (int i = 0; i < N_FORMATS; i++)
        if (strcmp(name, formats[i].name) == 0) {
            *out = formats[i].format;
            return DT_OK;
        }
    return dt_error(DT_ERR_INVALID, "unknown format '%s' (formats: %s)", name,
                    dt_export_format_names());
}

dt_status dt_export(const char *model_dir, const char *checkpoint, const dt_export_options *o,
                    dt_export_result *result)
{
    for (int i = 0; i < N_FORMATS; i++)
        if (formats[i].format == o->format)
            return formats[i].fn(model_dir, checkpoint, o, result);
    return dt_error(DT_ERR_INVALID, "export: format %d is not one of %s", (int)o->format,
                    dt_export_format_names());
}
