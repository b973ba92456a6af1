/* A dynamic table's admission and eviction in JSON (keymap.h): the members "admit", "evict" and
 * "memory_limit" of a model's or a feature column's object. The model spec and the feature spec
 * read and write them alike. */
#ifndef DTRAIN_MODEL_DYNAMIC_JSON_H
#define DTRAIN_MODEL_DYNAMIC_JSON_H

#include <cjson/cJSON.h>

#include "dtrain/keymap.h"

/* Reads obj's members into p (left at dt_keymap_policy_default's values where absent):
 *   "admit": {"min_count": C, "bloom": {"bits": B, "hashes": H}},
 *   "evict": {"steps_to_live": S, "l2_below": X, "max_rows": R, "every_steps": N},
 *   "memory_limit": bytes
 * DT_ERR_INVALID naming where (the file and object) and the field. */
dt_status dt_dynamic_policy_from_json(const cJSON *obj, const char *where, dt_keymap_policy *p);
/* Adds them to obj (the parts p sets); false when out of memory. */
bool dt_dynamic_policy_to_json(cJSON *obj, const dt_keymap_policy *p);

#endif
