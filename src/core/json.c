/* JSON text with line and column in its errors (see json.h). */
#include "json.h"

#include <stddef.h>
#include <string.h>

/* Line and column of a byte offset. */
static void line_col(const char *text, size_t offset, int *line, int *col)
{
    *line = 1, *col = 1;
    for (size_t i = 0; i < offset && text[i]; i++) {
        if (text[i] == '\n')
            (*line)++, *col = 1;
        else
            (*col)++;
    }
}

dt_status dt_json_parse(const char *text, const char *source, cJSON **out)
{
    const char *end = NULL;
    *out = cJSON_ParseWithOpts(text, &end, 1);
    if (*out)
        return DT_OK;
    const char *at = cJSON_GetErrorPtr();
    int line = 1, col = 1;
    if (at && at >= text)
        line_col(text, (size_t)(at - text), &line, &col);
    return dt_error(DT_ERR_INVALID, "%s: line %d, column %d: not valid JSON", source, line, col);
}

const char *dt_json_unknown_field(const cJSON *obj, const char *const *allowed)
{
    for (const cJSON *it = obj->child; it; it = it->next) {
        int i = 0;
        while (allowed[i] && strcmp(it->string, allowed[i]) != 0)
            i++;
        if (!allowed[i])
            return it->string;
    }
    return NULL;
}
