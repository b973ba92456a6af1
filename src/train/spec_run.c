/* A training run's feature spec (see spec_run.h). The adapt pass reads the whole training data
 * on every process that needs it (the same data gives every worker the same vocabularies and
 * boundaries); the chief writes the result beside the checkpoints, where evaluation, restores
 * and predictions read it back. */
#include "spec_run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/fileio.h"
#include "dtrain/log.h"
#include "dtrain/pool.h"

/* The fields a spec's optimizer gives (0: left to the default) into a config's. */
static void given_fields(const dt_feature_optimizer *o, float *beta1, float *beta2,
                         float *epsilon, float *initial_accumulator)
{
    if (o->beta_1 > 0)
        *beta1 = o->beta_1;
    if (o->beta_2 > 0)
        *beta2 = o->beta_2;
    if (o->epsilon > 0)
        *epsilon = o->epsilon;
    if (o->initial_accumulator > 0)
        *initial_accumulator = o->initial_accumulator;
}

static dt_status rule_of(const dt_feature_optimizer *o, dt_rowopt_config *out)
{
    dt_rowopt_kind kind;
    const char *type = strcmp(o->type, "momentum") == 0 ? "sgd" : o->type;
    dt_status st = dt_rowopt_kind_parse(type, &kind);
    if (st)
        return st;
    dt_rowopt_config_default(out, kind);
    out->lr = o->learning_rate;
    given_fields(o, &out->beta1, &out->beta2, &out->epsilon, &out->initial_accumulator);
    out->l1 = o->l1, out->l2 = o->l2;
    return dt_rowopt_config_check(out);
}

/* The deep part's optimizer as the dense one, its table rule the deep tables'; a model
 * without dense variables (linear) keeps sgd for the empty arena. */
static dt_status dense_of(const dt_feature_optimizer *o, const dt_optim_config *base,
                          dt_optim_config *out)
{
    dt_opt_kind kind = DT_OPT_SGD;
    if (strcmp(o->type, "ftrl") != 0) {
        dt_status st = dt_opt_kind_parse(o->type, &kind);
        if (st)
            return st;
    }
    dt_optim_config_default(out, kind);
    out->schedule = base->schedule, out->decay_steps = base->decay_steps;
    out->decay_rate = base->decay_rate, out->alpha = base->alpha;
    out->lr = o->learning_rate;
    given_fields(o, &out->beta1, &out->beta2, &out->epsilon, &out->initial_accumulator);
    if (o->momentum > 0)
        out->momentum = o->momentum;
    if (strcmp(o->type, "ftrl") == 0) {
        out->table_kind_set = true;
        out->table_kind = DT_ROWOPT_FTRL;
        out->ftrl_l1 = o->l1, out->ftrl_l2 = o->l2;
    }
    return dt_optim_config_check(out);
}

static dt_status save_spec(const dt_features *f, const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, DT_FEATURE_SPEC_FILE);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return dt_error(DT_ERR_IO, "--model-dir %s: %s", dir, strerror(errno));
    char *text = dt_features_to_json(f);
    if (!text)
        return dt_error(DT_ERR_NOMEM, "no memory for the feature spec");
    dt_file_part part = {text, strlen(text)};
    dt_status st = dt_file_write_atomic(path, &part, 1);
    free(text);
    return st;
}

dt_status dt_spec_run_open(const dt_train_config *c, bool chief, dt_spec_run *out)
{
    memset(out, 0, sizeof *out);
    char saved[4200] = "";
    if (c->fit.model_dir)
        snprintf(saved, sizeof saved, "%s/%s", c->fit.model_dir, DT_FEATURE_SPEC_FILE);
    out->from_model_dir = saved[0] && access(saved, F_OK) == 0;
    /* A restore reads what was adapted before, whatever --feature-spec says now: the
     * checkpoint's tables were sized and its ids given by that spec. */
    if (out->from_model_dir && c->fit.log)
        fprintf(c->fit.log, "feature spec: %s (adapted before; --feature-spec %s not read)\n",
                saved, c->feature_spec);
    dt_status st = dt_features_load(out->from_model_dir ? saved : c->feature_spec, &out->f);
    if (st == DT_OK && dt_features_needs_adapt(out->f)) {
        dt_input_spec data;
        int64_t bad = 0;
        if ((st = dt_input_spec_parse(c->data, "--data", &data)) == DT_OK)
            st = dt_features_adapt(out->f, &data, c->threads > 0 ? c->threads : dt_cpu_count(),
                                   c->input.skip_bad_records, &bad);
        if (st == DT_OK && c->fit.log)
            fprintf(c->fit.log, "feature spec: adapted over %s%s\n", c->data,
                    bad ? " (bad rows skipped)" : "");
    }
    if (st == DT_OK && chief && c->fit.model_dir && !out->from_model_dir)
        st = save_spec(out->f, c->fit.model_dir);
    if (st == DT_OK)
        st = dt_features_model(out->f, &out->model);
    if (st == DT_OK && (st = dense_of(&out->model.dnn, &c->optim, &out->optim)) == DT_OK &&
        (st = rule_of(&out->model.linear, &out->optim.linear_rule)) == DT_OK)
        out->optim.linear_rule_set = true;
    if (st == DT_OK)
        st = dt_feature_parser_new(out->f, &out->parser);
    if (st)
        dt_spec_run_close(out);
    return st;
}

void dt_spec_run_close(dt_spec_run *r)
{
    dt_feature_parser_free(r->parser);
    dt_features_destroy(r->f);
    memset(r, 0, sizeof *r);
}
