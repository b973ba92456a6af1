/* Optimizers and learning-rate schedules (see include/dtrain/optim.h). */
#include "dtrain/optim.h"

#include "optim_avx2.h"

#define DT_PI 3.14159265358979323846

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../core/cpu.h"
void dt_optim_config_default(dt_optim_config *cfg, dt_opt_kind kind)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = kind;
    cfg->lr = (kind == DT_OPT_SGD || kind == DT_OPT_MOMENTUM) ? 0.01f : 0.001f;
    cfg->momentum = 0.9f;
    cfg->beta1 = 0.9f;
    cfg->beta2 = 0.999f;
    cfg->epsilon = 1e-7f;
    cfg->initial_accumulator = 0.1f;
    cfg->schedule = DT_LR_CONSTANT;
    cfg->decay_rate = 0.5f;
    cfg->ftrl_lr_power = -0.5f;
}

void dt_optim_table_rule(const dt_optim_config *cfg, dt_rowopt_config *out)
{
    dt_rowopt_kind kind = cfg->table_kind;
    if (!cfg->table_kind_set)
        kind = cfg->kind == DT_OPT_ADAM      ? DT_ROWOPT_ADAM
               : cfg->kind == DT_OPT_ADAGRAD ? DT_ROWOPT_ADAGRAD
                                             : DT_ROWOPT_SGD;
    dt_rowopt_config_default(out, kind);
    out->lr = cfg->table_lr > 0.0f ? cfg->table_lr : cfg->lr;
    out->beta1 = cfg->beta1, out->beta2 = cfg->beta2, out->epsilon = cfg->epsilon;
    out->initial_accumulator = cfg->initial_accumulator;
    out->l1 = cfg->ftrl_l1, out->l2 = cfg->ftrl_l2, out->lr_power = cfg->ftrl_lr_power;
    out->beta = cfg->ftrl_beta;
    out->l2_reg = cfg->l2_reg;
}

static const char *const opt_names[] = {"sgd", "momentum", "adam", "adagrad"};
static const char *const lr_names[] = {"constant", "step", "cosine"};

dt_status dt_opt_kind_parse(const char *name, dt_opt_kind *out)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, opt_names[i]) == 0) {
            *out = (dt_opt_kind)i;
            return DT_OK;
        }
    return dt_error(DT_ERR_INVALID, "unknown optimizer '%s' (sgd, momentum, adam, adagrad)", name);
}

dt_status dt_lr_kind_parse(const char *name, dt_lr_kind *out)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(name, lr_names[i]) == 0) {
            *out = (dt_lr_kind)i;
            return DT_OK;
        }
    return dt_error(DT_ERR_INVALID, "unknown learning-rate schedule '%s' (constant, step, cosine)",
                    name);
}

const char *dt_opt_kind_name(dt_opt_kind kind) { return opt_names[kind]; }

dt_status dt_optim_config_check(const dt_optim_config *c)
{
    if (!(c->lr > 0.0f) || !isfinite(c->lr))
        return dt_error(DT_ERR_INVALID, "lr: must be positive and finite, got %g", c->lr);
    if (c->kind == DT_OPT_MOMENTUM && !(c->momentum >= 0.0f && c->momentum < 1.0f))
        return dt_error(DT_ERR_INVALID, "momentum: must be in [0, 1), got %g", c->momentum);
    if (c->kind == DT_OPT_ADAM && !(c->beta1 >= 0.0f && c->beta1 < 1.0f))
        return dt_error(DT_ERR_INVALID, "beta1: must be in [0, 1), got %g", c->beta1);
    if (c->kind == DT_OPT_ADAM && !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return dt_error(DT_ERR_INVALID, "beta2: must be in [0, 1), got %g", c->beta2);
    if (!(c->epsilon > 0.0f))
        return dt_error(DT_ERR_INVALID, "epsilon: must be positive, got %g", c->epsilon);
    if (c->schedule != DT_LR_CONSTANT && c->decay_steps <= 0)
        return dt_error(DT_ERR_INVALID, "decay_steps: the %s schedule needs a positive value",
                        lr_names[c->schedule]);
    if (c->schedule == DT_LR_STEP && !(c->decay_rate > 0.0f))
        return dt_error(DT_ERR_INVALID, "decay_rate: must be positive, got %g", c->decay_rate);
    if (c->schedule == DT_LR_COSINE && !(c->alpha >= 0.0f && c->alpha <= 1.0f))
        return dt_error(DT_ERR_INVALID, "alpha: must be in [0, 1], got %g", c->alpha);
    const struct {
        const char *field;
        float value;
    } table[] = {{"table_lr", c->table_lr}, {"ftrl_l1", c->ftrl_l1}, {"ftrl_l2", c->ftrl_l2},
                 {"l2_reg", c->l2_reg}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!(table[i].value >= 0.0f) || !isfinite(table[i].value))
            return dt_error(DT_ERR_INVALID, "%s: must not be negative, got %g", table[i].field,
                            table[i].value);
    /* The tables' rule as it will be built, so a bad combination is named before training. */
    dt_rowopt_config rule;
    dt_optim_table_rule(c, &rule);
    dt_status st = dt_rowopt_config_check(&rule);
    return st ? dt_error_prefix(st, "table_kind") : DT_OK;
}

void dt_optim_init(dt_optim *o)
{
    memset(o, 0, sizeof *o);
    dt_arena_init(&o->state);
}

void dt_optim_free(dt_optim *o)
{
    if (!o)
        return;
    dt_arena_free(&o->state);
    dt_optim_init(o);
}

static int slots_of(dt_opt_kind kind)
{
    switch (kind) {
    case DT_OPT_SGD: return 0;
    case DT_OPT_MOMENTUM: return 1;
    case DT_OPT_ADAM: return 2;
    case DT_OPT_ADAGRAD: return 1;
    }
    return 0;
}

dt_status dt_optim_setup(dt_optim *o, const dt_optim_config *cfg, const dt_arena *params)
{
    dt_status st = dt_optim_config_check(cfg);
    if (st)
        return st;
    o->cfg = *cfg;
    o->n_slots = slots_of(cfg->kind);
    o->iterations = 0;
    static const char *const slot_names[4][2] = {
        {NULL, NULL}, {"momentum", NULL}, {"m", "v"}, {"accumulator", NULL}};
    char prefix[64];
    /* Slot s of parameter i is view s * n_params + i: each slot is contiguous over the whole
     * parameter layout, so slot arrays line up with the parameter arena element for element. */
    for (int s = 0; s < o->n_slots; s++) {
        snprintf(prefix, sizeof prefix, "%s/%s/", opt_names[cfg->kind], slot_names[cfg->kind][s]);
        for (int i = 0; i < params->n_views; i++) {
            char name[DT_VIEW_NAME_CAP + 64];
            snprintf(name, sizeof name, "%s%s", prefix, params->views[i].name);
            st = dt_arena_add(&o->state, name, params->views[i].n_dims, params->views[i].dims,
                              NULL);
            if (st)
                return st;
        }
    }
    st = dt_arena_commit(&o->state);
    if (st)
        return st;
    if (cfg->kind == DT_OPT_ADAGRAD)
        for (int i = 0; i < o->state.n_views; i++) {
            float *a = dt_arena_view_data(&o->state, i);
            for (size_t k = 0; k < o->state.views[i].n_elems; k++)
                a[k] = cfg->initial_accumulator;
        }
    return DT_OK;
}

float dt_optim_current_lr(const dt_optim *o)
{
    return o->lr_now > 0.0f ? o->lr_now : dt_lr_schedule_at(&o->cfg, o->iterations);
}

float dt_lr_schedule_at(const dt_optim_config *c, int64_t steps)
{
    double step = (double)steps;
    switch (c->schedule) {
    case DT_LR_CONSTANT:
        return c->lr;
    case DT_LR_STEP:
        return (float)(c->lr * pow(c->decay_rate, floor(step / (double)c->decay_steps)));
    case DT_LR_COSINE: {
        double frac = fmin(step, (double)c->decay_steps) / (double)c->decay_steps;
        double cosine = 0.5 * (1.0 + cos(DT_PI * frac));
        return (float)(c->lr * ((1.0 - c->alpha) * cosine + c->alpha));
    }
    }
    return c->lr;
}

struct step_job {
    const dt_optim *o;
    float *p;
    const float *g;
    float *s0, *s1; /* slot arrays aligned with p */
    size_t n;
    float lr, lr_t; /* lr_t: Adam's bias-corrected rate */
};

#if DT_X86
static bool use_avx2(void) { return dt_cpu_has(DT_CPU_AVX2); }
#endif

/* The scalar updates below are the reference; the AVX2 ones (optim_avx2.c) compute the same
 * values bit for bit, and the tests compare them. */
static void sgd_range(const struct step_job *j, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++)
        j->p[i] -= j->lr * j->g[i];
}

static void momentum_range(const struct step_job *j, size_t lo, size_t hi)
{
    float mu = j->o->cfg.momentum;
    float *v = j->s0;
    if (j->o->cfg.nesterov) {
        for (size_t i = lo; i < hi; i++) {
            v[i] = mu * v[i] - j->lr * j->g[i];
            j->p[i] += mu * v[i] - j->lr * j->g[i];
        }
    } else {
        for (size_t i = lo; i < hi; i++) {
            v[i] = mu * v[i] - j->lr * j->g[i];
            j->p[i] += v[i];
        }
    }
}

static void adam_range(const struct step_job *j, size_t lo, size_t hi)
{
    float b1 = j->o->cfg.beta1, b2 = j->o->cfg.beta2, eps = j->o->cfg.epsilon;
    float c1 = 1.0f - b1, c2 = 1.0f - b2, lr_t = j->lr_t;
    float *m = j->s0, *v = j->s1;
    for (size_t i = lo; i < hi; i++) {
        float g = j->g[i];
        m[i] = b1 * m[i] + c1 * g;
        v[i] = b2 * v[i] + c2 * g * g;
        j->p[i] -= lr_t * m[i] / (sqrtf(v[i]) + eps);
    }
}

static void adagrad_range(const struct step_job *j, size_t lo, size_t hi)
{
    float eps = j->o->cfg.epsilon;
    float *a = j->s0;
    for (size_t i = lo; i < hi; i++) {
        float g = j->g[i];
        a[i] += g * g;
        j->p[i] -= j->lr * g / (sqrtf(a[i]) + eps);
    }
}

static void step_task(void *ctx, int task, int n_tasks)
{
    const struct step_job *j = ctx;
    long lo, hi;
    /* Slices in whole cache lines so two threads never write one line. */
    dt_pool_slice((long)(j->n / 16), task, n_tasks, &lo, &hi);
    size_t begin = (size_t)lo * 16, end = task == n_tasks - 1 ? j->n : (size_t)hi * 16;
    const dt_optim_config *c = &j->o->cfg;
#if DT_X86
    if (use_avx2() && !j->o->scalar_only) {
        switch (c->kind) {
        case DT_OPT_SGD: dt_sgd_avx2(j->p, j->g, begin, end, j->lr); break;
        case DT_OPT_MOMENTUM:
            dt_momentum_avx2(j->p, j->g, j->s0, begin, end, c->momentum, j->lr, c->nesterov);
            break;
        case DT_OPT_ADAM:
            dt_adam_avx2(j->p, j->g, j->s0, j->s1, begin, end, c->beta1, c->beta2, c->epsilon, j->lr_t);
            break;
        case DT_OPT_ADAGRAD: dt_adagrad_avx2(j->p, j->g, j->s0, begin, end, j->lr, c->epsilon); break;
        }
        return;
    }
#endif
    switch (c->kind) {
    case DT_OPT_SGD: sgd_range(j, begin, end); break;
    case DT_OPT_MOMENTUM: momentum_range(j, begin, end); break;
    case DT_OPT_ADAM: adam_range(j, begin, end); break;
    case DT_OPT_ADAGRAD: adagrad_range(j, begin, end); break;
    }
}

/* The step's job over params and grads (n_elems), with the rates of the step to be taken. */
static struct step_job step_job_for(const dt_optim *o, float *params, const float *grads,
                                    size_t n_elems)
{
    size_t slot_stride = o->n_slots ? o->state.n_elems / (size_t)o->n_slots : 0;
    struct step_job j = {o, params, grads, NULL, NULL, n_elems, dt_optim_current_lr(o), 0.0f};
    if (o->n_slots >= 1)
        j.s0 = o->state.data;
    if (o->n_slots >= 2)
        j.s1 = o->state.data + slot_stride;
    if (o->cfg.kind == DT_OPT_ADAM) {
        double t = (double)(o->iterations + 1);
        j.lr_t = (float)(j.lr * sqrt(1.0 - pow(o->cfg.beta2, t)) / (1.0 - pow(o->cfg.beta1, t)));
    }
    return j;
}

static void run_job(struct step_job *j, dt_pool *pool)
{
    /* Under 64 Ki elements the hand-off to another thread costs more than it saves. */
    dt_pool_run(j->n < 65536 ? NULL : pool, step_task, j, dt_pool_size(pool));
}

void dt_optim_step(dt_optim *o, dt_pool *pool, float *params, const float *grads, size_t n_elems)
{
    struct step_job j = step_job_for(o, params, grads, n_elems);
    run_job(&j, pool);
    o->iterations++;
}

void dt_optim_update_range(const dt_optim *o, dt_pool *pool, float *params, const float *grads,
                           size_t lo, size_t hi)
{
    dt_optim_update_slice(o, pool, params + lo, grads, lo, hi);
}

void dt_optim_update_slice(const dt_optim *o, dt_pool *pool, float *params_lo,
                           const float *grads_lo, size_t lo, size_t hi)
{
    /* The job over [lo, hi) is the whole step's offset by lo. The kernels are elementwise and
     * the vector and scalar ones agree bit for bit, so where a range starts changes no value. */
    struct step_job j = step_job_for(o, params_lo, grads_lo, hi - lo);
    if (j.s0)
        j.s0 += lo;
    if (j.s1)
        j.s1 += lo;
    run_job(&j, pool);
}

void dt_optim_count_step(dt_optim *o) { o->iterations++; }
