/* JSON text through cJSON with errors a user can act on (internal to the library): a syntax
 * error names the source and the line and column where the parser stopped. Model files and
 * feature specs read their JSON through here. */
#ifndef DTRAIN_CORE_JSON_H
#define DTRAIN_CORE_JSON_H

#include <cjson/cJSON.h>

#include "dtrain/status.h"

/* Parses text (NUL-terminated, nothing after the value but white space) into *out, for
 * cJSON_Delete. DT_ERR_INVALID "<source>: line L, column C: not valid JSON" otherwise. */
dt_status dt_json_parse(const char *text, const char *source, cJSON **out);

/* The first member of object obj whose name is not in allowed (NULL-terminated), or NULL: how
 * a reader refuses a misspelt field rather than leave an option at its default unnoticed. */
const char *dt_json_unknown_field(const cJSON *obj, const char *const *allowed);

#endif
