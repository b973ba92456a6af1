/* Exports (see include/dtrain/export.h): the formats a model can be written in, each a name and
 * a writer. A new format is one more writer in src/serve/, one more row of `formats` and its
 * name in dt_export_format_names. */
#include "dtrain/export.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/fileio.h"
#include "export_int.h"

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
    {"dtrain", DT_EXPORT_DTRAIN, dt_export_dtrain},
};
#define N_FORMATS (int)(sizeof formats / sizeof formats[0])

/* The names of the rows above, for usage texts and messages. */
const char *dt_export_format_names(void) { return "onnx, dtrain"; }

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

/* ---- Shared by the formats ---- */

dt_status dt_export_check(const char *model_dir, const char *checkpoint,
                          const dt_export_options *o, const char *out_kind)
{
    if (!o->out || !*o->out)
        return dt_error(DT_ERR_INVALID, "export: no output %s", out_kind);
    if ((model_dir == NULL) == (checkpoint == NULL))
        return dt_error(DT_ERR_INVALID, "export: give a model directory or a checkpoint");
    if (strlen(o->out) > 4000)
        return dt_error(DT_ERR_INVALID, "%.64s...: the path is too long", o->out);
    return DT_OK;
}

dt_status dt_export_open(const char *model_dir, const char *checkpoint,
                         const dt_export_options *o, dt_saved_spec *sm, dt_ckpt **c)
{
    char dir[4200];
    if (!model_dir)
        dt_path_dir(checkpoint, dir, sizeof dir);
    dt_status st = dt_saved_spec_open(model_dir ? model_dir : dir, sm);
    if (st)
        return st;
    st = checkpoint ? dt_ckpt_map(checkpoint, c) : dt_ckpt_map_latest(model_dir, o->log, c);
    if (st == DT_END)
        st = dt_error(DT_ERR_INVALID, "%s: no checkpoint to export", model_dir);
    return st;
}

dt_status dt_export_make_dirs(const char *dir)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return dt_error(DT_ERR_IO, "%s: cannot create the directory: %s", buf,
                            strerror(errno));
        *p = c;
        if (c == '\0')
            return DT_OK;
    }
}

dt_status dt_export_begin(const char *model_dir, const char *checkpoint,
                          const dt_export_options *o, const char *out_dir, dt_saved_spec *sm,
                          dt_ckpt **c, dt_model **m, dt_export_result *res, bool keyed_tables)
{
    dt_status st;
    if ((st = dt_export_open(model_dir, checkpoint, o, sm, c)) ||
        (st = dt_saved_model_map(*c, sm, 1, m)))
        return st;
    /* A dynamic table's rows are found through its keys: ONNX looks a built-in model's up
     * (LabelEncoder); a feature spec's dynamic columns and the dtrain format wait. */
    const dt_model_spec *spec = dt_model_spec_of(*m);
    bool columns = spec->arch == DT_ARCH_COLUMNS;
    if ((!keyed_tables || columns) && dt_model_spec_dynamic(spec))
        return dt_error(DT_ERR_UNSUPPORTED, "%s: the model's tables are dynamic (keyed by raw "
                        "ids), which the %s export does not write yet: %sscore the checkpoint "
                        "with dtrain predict or the C predictor (predict.h)", dt_ckpt_path(*c),
                        keyed_tables ? "ONNX" : "dtrain format",
                        columns ? "" : "export it with --format onnx, or ");
    if ((st = dt_export_make_dirs(out_dir)))
        return st;
    res->step = dt_saved_model_step(*c);
    snprintf(res->checkpoint, sizeof res->checkpoint, "%s", dt_ckpt_path(*c));
    return DT_OK;
}

cJSON *dt_export_features_json(const dt_features *f)
{
    char *text = dt_features_to_json(f);
    cJSON *json = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!json)
        dt_error(DT_ERR_NOMEM, "no memory for the feature spec");
    return json;
}

const char *dt_export_split_path(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    dt_path_dir(path, dir, cap);
    return slash ? slash + 1 : path;
}

const char *dt_export_model_kind(const dt_model_spec *s, const cJSON *spec_json, char *buf,
                                 size_t cap)
{
    if (s->arch != DT_ARCH_COLUMNS) {
        snprintf(buf, cap, "%s", dt_arch_name(s->arch));
        return buf;
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(spec_json, "model");
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "type"));
    snprintf(buf, cap, "columns:%s", t ? t : "?");
    return buf;
}

dt_status dt_export_write_json(const char *path, const cJSON *obj)
{
    char *text = cJSON_Print(obj);
    if (!text)
        return dt_error(DT_ERR_NOMEM, "%s: no memory for its JSON", path);
    size_t n = strlen(text);
    text[n] = '\n'; /* the terminator becomes the final newline */
    dt_status st = dt_file_write_atomic(path, (dt_file_part[]){{text, n + 1}}, 1);
    free(text);
    return st;
}
