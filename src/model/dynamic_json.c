/* Dynamic tables' policies in JSON (see dynamic_json.h). */
#include "dynamic_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../core/json.h"

static dt_status bad(const char *where, const char *field, const char *why)
{
    return dt_error(DT_ERR_INVALID, "%s: %s: %s", where, field, why);
}

/* A whole number in [lo, hi]. */
static dt_status get_int(const cJSON *o, const char *key, const char *where, const char *field,
                         double lo, double hi, int64_t *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!it)
        return DT_OK;
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
        it->valuedouble < lo || it->valuedouble > hi) {
        char why[96];
        snprintf(why, sizeof why, "expected an integer in %.0f..%.0f", lo, hi);
        return bad(where, field, why);
    }
    *out = (int64_t)it->valuedouble;
    return DT_OK;
}

static dt_status read_admit(const cJSON *a, const char *where, dt_keymap_policy *p)
{
    static const char *const keys[] = {"min_count", "bloom", NULL};
    const char *unknown = dt_json_unknown_field(a, keys);
    if (!cJSON_IsObject(a) || unknown)
        return bad(where, unknown ? unknown : "admit",
                   "admit takes {\"min_count\": C, \"bloom\": {\"bits\": B, \"hashes\": H}}");
    dt_status st = get_int(a, "min_count", where, "admit.min_count", 1, 4294967295.0, &p->min_count);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(a, "bloom");
    if (st || !b)
        return st;
    static const char *const bkeys[] = {"bits", "hashes", NULL};
    unknown = dt_json_unknown_field(b, bkeys);
    if (!cJSON_IsObject(b) || unknown || !cJSON_GetObjectItemCaseSensitive(b, "bits"))
        return bad(where, "admit.bloom", "expected {\"bits\": B, \"hashes\": H} (hashes 3 unless given)");
    int64_t hashes = 3;
    if ((st = get_int(b, "bits", where, "admit.bloom.bits", 64, 1099511627776.0, &p->bloom_bits)) ||
        (st = get_int(b, "hashes", where, "admit.bloom.hashes", 1, 16, &hashes)))
        return st;
    p->bloom_hashes = (int)hashes;
    return DT_OK;
}

static dt_status read_evict(const cJSON *e, const char *where, dt_keymap_policy *p)
{
    static const char *const keys[] = {"steps_to_live", "l2_below", "max_rows", "every_steps", NULL};
    const char *unknown = dt_json_unknown_field(e, keys);
    if (!cJSON_IsObject(e) || unknown)
        return bad(where, unknown ? unknown : "evict",
                   "evict takes steps_to_live, l2_below, max_rows and every_steps");
    dt_status st;
    if ((st = get_int(e, "steps_to_live", where, "evict.steps_to_live", 1, 4294967295.0,
                      &p->steps_to_live)) ||
        (st = get_int(e, "max_rows", where, "evict.max_rows", 1, 2147483646.0, &p->max_rows)) ||
        (st = get_int(e, "every_steps", where, "evict.every_steps", 1, 4294967295.0,
                      &p->evict_every_steps)))
        return st;
    const cJSON *l2 = cJSON_GetObjectItemCaseSensitive(e, "l2_below");
    if (l2) {
        if (!cJSON_IsNumber(l2) || !(l2->valuedouble > 0) || !isfinite(l2->valuedouble))
            return bad(where, "evict.l2_below", "expected a positive number");
        p->l2_below = (float)l2->valuedouble;
    }
    return DT_OK;
}

dt_status dt_dynamic_policy_from_json(const cJSON *obj, const char *where, dt_keymap_policy *p)
{
    dt_keymap_policy_default(p);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, "admit");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(obj, "evict");
    dt_status st = DT_OK;
    if (a)
        st = read_admit(a, where, p);
    if (st == DT_OK && e)
        st = read_evict(e, where, p);
    if (st == DT_OK)
        st = get_int(obj, "memory_limit", where, "memory_limit", 1, 9007199254740992.0,
                     &p->memory_limit);
    if (st == DT_OK && (st = dt_keymap_policy_check(p)))
        return dt_error_prefix(st, "%s", where);
    return st;
}

bool dt_dynamic_policy_to_json(cJSON *obj, const dt_keymap_policy *p)
{
    cJSON *a = cJSON_AddObjectToObject(obj, "admit");
    bool ok = a && cJSON_AddNumberToObject(a, "min_count", (double)(p->min_count ? p->min_count : 1));
    if (ok && p->bloom_bits) {
        cJSON *b = cJSON_AddObjectToObject(a, "bloom");
        ok = b && cJSON_AddNumberToObject(b, "bits", (double)p->bloom_bits) &&
             cJSON_AddNumberToObject(b, "hashes", p->bloom_hashes);
    }
    if (ok && dt_keymap_policy_evicts(p)) {
        cJSON *e = cJSON_AddObjectToObject(obj, "evict");
        ok = e != NULL;
        if (ok && p->steps_to_live)
            ok = cJSON_AddNumberToObject(e, "steps_to_live", (double)p->steps_to_live) != NULL;
        if (ok && p->l2_below > 0.0f)
            ok = cJSON_AddNumberToObject(e, "l2_below", (double)p->l2_below) != NULL;
        if (ok && p->max_rows)
            ok = cJSON_AddNumberToObject(e, "max_rows", (double)p->max_rows) != NULL;
        if (ok && p->evict_every_steps)
            ok = cJSON_AddNumberToObject(e, "every_steps", (double)p->evict_every_steps) != NULL;
    }
    if (ok && p->memory_limit)
        ok = cJSON_AddNumberToObject(obj, "memory_limit", (double)p->memory_limit) != NULL;
    return ok;
}
