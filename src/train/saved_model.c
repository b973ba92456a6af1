/* Models read back from checkpoints (see include/dtrain/saved_model.h). */
#include "dtrain/saved_model.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fit_ckpt.h"

dt_status dt_saved_spec_open(const char *dir, dt_saved_spec *s)
{
    memset(s, 0, sizeof *s);
    char path[4400];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, DT_FEATURE_SPEC_FILE) >= sizeof path ||
        access(path, F_OK) != 0)
        return DT_OK;
    dt_status st = dt_features_load(path, &s->features);
    if (st == DT_OK)
        st = dt_features_model(s->features, &s->model);
    if (st == DT_OK)
        st = dt_feature_parser_new(s->features, &s->parser);
    if (st)
        dt_saved_spec_close(s);
    return st;
}

void dt_saved_spec_close(dt_saved_spec *s)
{
    dt_feature_parser_free(s->parser);
    dt_features_destroy(s->features);
    memset(s, 0, sizeof *s);
}

/* The spec's model, if it is the checkpoint's: the same tables, layers and loss. */
static dt_status spec_of_checkpoint(const dt_ckpt *c, const char *json, const dt_saved_spec *s,
                                    dt_model_spec *spec)
{
    char *mine = dt_model_spec_to_json(&s->model.spec);
    bool same = mine && strcmp(mine, json) == 0;
    free(mine);
    if (!same)
        return dt_error(DT_ERR_INVALID, "%s: written for another model than %s describes",
                        dt_ckpt_path(c), DT_FEATURE_SPEC_FILE);
    *spec = s->model.spec;
    return DT_OK;
}

dt_status dt_saved_model_spec(const dt_ckpt *c, const dt_saved_spec *s, dt_model_spec *out)
{
    const char *json = dt_ckpt_meta_get(c, "model_spec");
    if (!json)
        return dt_error(DT_ERR_FORMAT, "%s: __metadata__.model_spec: missing", dt_ckpt_path(c));
    dt_status st = s && s->features ? spec_of_checkpoint(c, json, s, out)
                                    : dt_model_spec_from_json(json, dt_ckpt_path(c), out);
    if (st == DT_OK && out->input_shape[0] == 0)
        st = dt_error(DT_ERR_FORMAT, "%s: __metadata__.model_spec: no input_shape",
                      dt_ckpt_path(c));
    return st;
}

dt_status dt_saved_model_build(const dt_ckpt *c, const dt_saved_spec *s, int max_batch,
                               dt_pool *pool, dt_model **out)
{
    *out = NULL;
    dt_model_spec spec;
    dt_model *m;
    dt_status st = dt_saved_model_spec(c, s, &spec);
    if (st || (st = dt_model_create(&spec, max_batch, pool, NULL, &m)))
        return st;
    if ((st = dt_ckpt_restore_arena(c, dt_model_params(m))) ||
        (dt_model_state(m)->n_views > 0 && (st = dt_ckpt_restore_arena(c, dt_model_state(m)))) ||
        (st = dt_ckpt_restore_tables(c, m, false))) {
        dt_model_destroy(m);
        return st;
    }
    *out = m;
    return DT_OK;
}

/* Model m's tables read from c's tensors of the same names. */
static dt_status borrow_tables(const dt_ckpt *c, dt_model *m)
{
    for (int i = 0; i < dt_model_num_tables(m); i++) {
        const dt_table *t = dt_model_table(m, i);
        const dt_ckpt_tensor *x = dt_ckpt_find(c, t->name);
        if (!x)
            return dt_error(DT_ERR_FORMAT, "%s: no tensor %s (the model's table)",
                            dt_ckpt_path(c), t->name);
        if (strcmp(x->dtype, "F32") != 0 || x->n_dims != 2 || x->dims[0] != t->rows ||
            x->dims[1] != t->dim)
            return dt_error(DT_ERR_FORMAT, "%s: tensor %s: %s of %d dimensions, the model's table "
                            "is F32 [%lld, %d]", dt_ckpt_path(c), t->name, x->dtype, x->n_dims,
                            (long long)t->rows, t->dim);
        dt_status st = dt_model_borrow_table(m, i, x->data);
        if (st)
            return st;
    }
    return DT_OK;
}

dt_status dt_saved_model_map(const dt_ckpt *c, const dt_saved_spec *s, int max_batch,
                             dt_model **out)
{
    *out = NULL;
    dt_model_spec spec;
    dt_model *m = NULL;
    dt_status st = dt_saved_model_spec(c, s, &spec);
    /* Sharded tables are assembled; dynamic ones restore their keys' map, their rows after
     * its zero row. */
    bool dynamic = st == DT_OK && dt_model_spec_dynamic(&spec);
    if (st == DT_OK && (dt_ckpt_is_sharded(c) || dynamic))
        return dt_saved_model_build(c, s, max_batch, NULL, out);
    if (st || (st = dt_model_create(&spec, max_batch, NULL, NULL, &m)) ||
        (st = dt_ckpt_restore_arena(c, dt_model_params(m))) ||
        (dt_model_state(m)->n_views > 0 && (st = dt_ckpt_restore_arena(c, dt_model_state(m)))) ||
        (st = borrow_tables(c, m))) {
        dt_model_destroy(m);
        return st;
    }
    *out = m;
    return DT_OK;
}

int64_t dt_saved_model_step(const dt_ckpt *c)
{
    const char *v = dt_ckpt_meta_get(c, "global_step");
    if (v)
        return strtoll(v, NULL, 10);
    const char *slash = strrchr(dt_ckpt_path(c), '/');
    return dt_ckpt_step_of_name(slash ? slash + 1 : dt_ckpt_path(c));
}
