/* Row-wise optimizers for embedding tables (see include/dtrain/rowopt.h). */
#include "dtrain/rowopt.h"

#include <math.h>
#include <string.h>

#include "../core/cpu.h"
#include "../core/prefetch.h"

static const char *const kind_names[] = {"sgd", "adagrad", "adam", "ftrl"};

void dt_rowopt_config_default(dt_rowopt_config *c, dt_rowopt_kind kind)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->lr = kind == DT_ROWOPT_SGD ? 0.01f : 0.001f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->epsilon = 1e-7f;
    c->initial_accumulator = 0.1f;
    c->lr_power = -0.5f;
}

dt_status dt_rowopt_kind_parse(const char *name, dt_rowopt_kind *out)
{
    for (int k = 0; k < (int)(sizeof kind_names / sizeof kind_names[0]); k++)
        if (strcmp(name, kind_names[k]) == 0) {
            *out = (dt_rowopt_kind)k;
            return DT_OK;
        }
    return dt_error(DT_ERR_INVALID, "unknown table optimizer '%s' (sgd, adagrad, adam, ftrl)", name);
}

const char *dt_rowopt_kind_name(dt_rowopt_kind kind)
{
    return (unsigned)kind < sizeof kind_names / sizeof kind_names[0] ? kind_names[kind] : "?";
}

dt_status dt_rowopt_config_check(const dt_rowopt_config *c)
{
    const char *bad = NULL;
    if (!(c->lr > 0.0f) || !isfinite(c->lr))
        bad = "the learning rate must be positive";
    else if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        bad = "beta1 and beta2 must lie in [0, 1)";
    else if (!(c->epsilon > 0.0f))
        bad = "epsilon must be positive";
    else if (!(c->initial_accumulator >= 0.0f) ||
             (c->kind == DT_ROWOPT_FTRL && !(c->initial_accumulator > 0.0f)))
        bad = "the initial accumulator must be positive";
    else if (!(c->l1 >= 0.0f) || !(c->l2 >= 0.0f) || !(c->beta >= 0.0f) || !(c->l2_reg >= 0.0f))
        bad = "l1, l2, beta and l2_reg must be non-negative";
    else if (!(c->lr_power <= 0.0f))
        bad = "lr_power must be zero or negative";
    if (bad)
        return dt_error(DT_ERR_INVALID, "table optimizer %s: %s", dt_rowopt_kind_name(c->kind), bad);
    return DT_OK;
}

dt_status dt_rowopt_setup(const dt_rowopt_config *c, dt_table *t)
{
    static const char *const adam[] = {"m", "v"}, *const adagrad[] = {"accumulator"},
                             *const ftrl[] = {"linear", "accumulator"};
    const char *name = dt_rowopt_kind_name(c->kind);
    switch (c->kind) {
    case DT_ROWOPT_SGD:
        return dt_table_set_slots(t, name, 0, NULL, NULL);
    case DT_ROWOPT_ADAGRAD:
        return dt_table_set_slots(t, name, 1, adagrad, (float[]){c->initial_accumulator});
    case DT_ROWOPT_ADAM:
        return dt_table_set_slots(t, name, 2, adam, (float[]){0.0f, 0.0f});
    case DT_ROWOPT_FTRL:
        return dt_table_set_slots(t, name, 2, ftrl, (float[]){0.0f, c->initial_accumulator});
    }
    return dt_error(DT_ERR_INVALID, "unknown table optimizer %d", (int)c->kind);
}

/* The step's constants, computed once for every row. */
typedef struct {
    float lr, l2_reg;
    float b1, b2, one_b1, one_b2, eps, lr_t; /* adam */
    float power, l1, l2x2, beta;             /* ftrl */
} rates;

static rates rates_of(const dt_rowopt_config *c, float lr, int64_t step)
{
    rates r = {.lr = lr, .l2_reg = c->l2_reg, .b1 = c->beta1, .b2 = c->beta2,
               .one_b1 = 1.0f - c->beta1, .one_b2 = 1.0f - c->beta2, .eps = c->epsilon,
               .power = -c->lr_power, .l1 = c->l1, .l2x2 = 2.0f * c->l2, .beta = c->beta};
    double t = (double)(step < 1 ? 1 : step);
    r.lr_t = (float)(lr * sqrt(1.0 - pow(c->beta2, t)) / (1.0 - pow(c->beta1, t)));
    return r;
}

/* n^p for FTRL: a square root for TensorFlow's default power. */
static inline float ftrl_pow(float n, float p) { return p == 0.5f ? sqrtf(n) : powf(n, p); }

/* One coordinate of each rule: the reference and the row loops below use these alone, so the
 * two take the same float operations in the same order. */
static inline float grad_of(const rates *r, float g, float w) { return g + r->l2_reg * w; }

static inline void adagrad_one(const rates *r, float g, float *w, float *a)
{
    *a += g * g;
    *w -= r->lr * g / (sqrtf(*a) + r->eps);
}

static inline void adam_one(const rates *r, float g, float *w, float *m, float *v)
{
    *m = r->b1 * *m + r->one_b1 * g;
    *v = r->b2 * *v + r->one_b2 * (g * g);
    *w -= r->lr_t * *m / (sqrtf(*v) + r->eps);
}

static inline void ftrl_one(const rates *r, float g, float *w, float *z, float *n)
{
    float n_new = *n + g * g;
    float sigma = (ftrl_pow(n_new, r->power) - ftrl_pow(*n, r->power)) / r->lr;
    *z += g - sigma * *w;
    *n = n_new;
    float zz = *z;
    if (fabsf(zz) <= r->l1)
        *w = 0.0f;
    else
        *w = -(zz - copysignf(r->l1, zz)) / ((r->beta + ftrl_pow(n_new, r->power)) / r->lr + r->l2x2);
}

/* Row u of the gradient into its table row: the coordinates are independent, so the compiler
 * may vectorise each loop without changing a bit. Inlined into each of update_rows's clones,
 * so that it is vectorised for the CPU's instruction set. */
static inline __attribute__((always_inline)) void update_row(dt_rowopt_kind kind, const rates *r,
                                                             const float *grow, int dim, float *w,
                                                             float *s0, float *s1)
{
    switch (kind) {
    case DT_ROWOPT_SGD:
        for (int k = 0; k < dim; k++)
            w[k] -= r->lr * grad_of(r, grow[k], w[k]);
        break;
    case DT_ROWOPT_ADAGRAD:
        for (int k = 0; k < dim; k++)
            adagrad_one(r, grad_of(r, grow[k], w[k]), &w[k], &s0[k]);
        break;
    case DT_ROWOPT_ADAM:
        for (int k = 0; k < dim; k++)
            adam_one(r, grad_of(r, grow[k], w[k]), &w[k], &s0[k], &s1[k]);
        break;
    case DT_ROWOPT_FTRL:
        for (int k = 0; k < dim; k++)
            ftrl_one(r, grad_of(r, grow[k], w[k]), &w[k], &s0[k], &s1[k]);
        break;
    }
}

typedef struct {
    const dt_rowopt_config *c;
    rates r;
    dt_table *t;
    const dt_sparse_rows *g;
} update_job;

/* Rows are fetched this many updates ahead: each unique id's row and slot rows are likely cache
 * misses (see dt_embedding_forward), read and then written. */
#define PREFETCH_AHEAD 8

/* Inlined: GCC finds that a function doing nothing but prefetch has no effect, and drops the
 * calls to it (see core/prefetch.h). */
static inline __attribute__((always_inline)) void prefetch_rows(const dt_table *t, int64_t id)
{
    size_t off = (size_t)id * (size_t)t->dim;
    dt_prefetch_write(t->data + off, (size_t)t->dim * sizeof(float));
    for (int s = 0; s < t->n_slots && s < 2; s++)
        dt_prefetch_write(t->slots[s] + off, (size_t)t->dim * sizeof(float));
}

DT_MULTI_ISA
static void update_rows(void *ctx, int task, int n_tasks)
{
    update_job *j = ctx;
    long lo, hi;
    dt_pool_slice((long)j->g->n, task, n_tasks, &lo, &hi);
    int dim = j->t->dim;
    for (long u = lo; u < hi && u < lo + PREFETCH_AHEAD; u++)
        prefetch_rows(j->t, j->g->ids[u]);
    for (long u = lo; u < hi; u++) {
        if (u + PREFETCH_AHEAD < hi)
            prefetch_rows(j->t, j->g->ids[u + PREFETCH_AHEAD]);
        size_t off = (size_t)j->g->ids[u] * (size_t)dim;
        for (int s = 0; s < j->t->n_slots; s++)
            dt_table_claim_slot(j->t, s, off, (size_t)dim);
        float *s0 = j->t->n_slots > 0 ? j->t->slots[0] + off : NULL;
        float *s1 = j->t->n_slots > 1 ? j->t->slots[1] + off : NULL;
        update_row(j->c->kind, &j->r, j->g->rows + (size_t)u * (size_t)dim, dim,
                   j->t->data + off, s0, s1);
    }
}

/* Rows per task below which a thread costs more than it saves. */
#define MIN_ROWS_PER_TASK 512

void dt_rowopt_update(const dt_rowopt_config *c, float lr, int64_t step, dt_table *t,
                      const dt_sparse_rows *g, dt_pool *pool)
{
    update_job j = {c, rates_of(c, lr, step), t, g};
    /* A few tasks per thread: rows whose slot pages are touched for the first time cost a page
     * fault each, so equal shares of rows are not equal shares of time. */
    int tasks = dt_pool_size(pool) * 4;
    if ((size_t)tasks * MIN_ROWS_PER_TASK > g->n)
        tasks = (int)(g->n / MIN_ROWS_PER_TASK) + 1;
    dt_pool_run(tasks > 1 ? pool : NULL, update_rows, &j, tasks);
}

void dt_rowopt_update_naive(const dt_rowopt_config *c, float lr, int64_t step, dt_table *t,
                            const dt_sparse_rows *g)
{
    rates r = rates_of(c, lr, step);
    for (size_t u = 0; u < g->n; u++)
        for (int k = 0; k < t->dim; k++) {
            size_t at = (size_t)g->ids[u] * (size_t)t->dim + (size_t)k;
            float *w = &t->data[at], gk = grad_of(&r, g->rows[u * (size_t)t->dim + (size_t)k], *w);
            switch (c->kind) {
            case DT_ROWOPT_SGD: *w -= r.lr * gk; break;
            case DT_ROWOPT_ADAGRAD: adagrad_one(&r, gk, w, &t->slots[0][at]); break;
            case DT_ROWOPT_ADAM: adam_one(&r, gk, w, &t->slots[0][at], &t->slots[1][at]); break;
            case DT_ROWOPT_FTRL: ftrl_one(&r, gk, w, &t->slots[0][at], &t->slots[1][at]); break;
            }
        }
}
