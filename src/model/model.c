/* Sequential models at run time (see include/dtrain/model.h).
 *
 * Each layer owns an output buffer sized for the maximum batch (Flatten aliases its input). The
 * backward pass runs through two ping-pong gradient buffers: a layer reads dy from one and writes
 * dx into the other; activations and dropout work on dy in place. Parameter gradients accumulate
 * into the gradient arena, whose layout mirrors the parameter arena. */
#include "dtrain/model.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/lines.h"
#include "../nn/convpool.h"
#include "cols.h"
#include "ctr.h"
#include "../nn/gemm.h"
#include "dtrain/rng.h"

struct layer_rt {
    dt_layer_spec spec;
    int in_dims[3], out_dims[3]; /* (H, W, C) per example */
    bool in_flat, out_flat;      /* a vector (after flatten or dense), not an (H, W, C) map */
    size_t in_elems, out_elems;
    int w_view, b_view; /* parameter views, -1 when none */
    dt_conv_geom cg;
    dt_pool_geom pg;
    bool fused;    /* a conv2d that also runs the next layer (max pooling) in one kernel */
    bool absorbed; /* a max_pooling2d run by the fused conv2d before it */
    bool drops_next; /* a dense layer that runs the dropout after it in the same pass over its
                        outputs (forward while training, and backward) */
    const float *in;
    float *out;
    int32_t *arg;
    uint32_t *mask;
    float *drop_mask;
    bool passed;   /* a dropout whose last forward dropped nothing (not training, or rate 0): it
                      wrote neither out nor drop_mask, the next layer read its input, and its
                      backward is the identity */
    int mm_view, mv_view; /* batch_normalization: its moving averages in the state arena */
    float *bn_xhat, *bn_istd;
};

struct dt_model {
    dt_model_spec spec;
    int max_batch;
    dt_pool *pool;
    int n_layers;
    struct layer_rt layers[DT_MAX_LAYERS];
    dt_arena params, grads;
    /* Variables no optimizer trains (batch normalisation's moving averages): saved in
     * checkpoints with the parameters, updated by training forwards. */
    dt_arena state;
    float *gbuf[2];
    float *scratch;
    float *prob, *losses, *targets;
    const float *logits;
    int K;
    uint64_t dropout_seed;
    uint64_t training_forwards;
    int first_trainable; /* below it no layer has parameters: backward stops there */
    dt_grad_ready_fn grad_hook;
    void *grad_hook_ctx;
    float *own_params; /* the model's own parameter storage while it uses another model's */
    float *own_state;  /* the same for its state (dt_model_share_variables) */
    float *kept_params, *kept_grads; /* its own storage while it uses storage it was given */
    /* A CTR model: its tables and lookups; the layers are DeepFM's MLP (none for lr and fm),
     * whose input gradient backward then computes. */
    dt_ctr *ctr;
    int bias_view;               /* fm_b */
    float *ctr_logits, *dz;      /* (B) each */
    dt_rowopt_config rowopt;     /* the tables' optimizer, once dt_model_setup_tables ran */
    /* A feature-spec model: its columns front (tables, linear part, deep input) and its own
     * copy of the columns spec; the layers are the deep part, ending in N units. */
    dt_cols *cols;
    dt_columns_spec *cols_spec;
    dt_rowopt_config *table_rules; /* each table's rule (dt_model_set_table_rule), or NULL */
    float *cols_logits;          /* (B, N) */
    const dt_elem *cols_ids_of;  /* the batch dt_model_table_ids prepared, until its forward */
    bool tables_ready;
};

static void *alloc_floats(size_t n) { return dt_lines_floats(n); }

/* ---- Shapes ---- */

static dt_status layer_error(const struct layer_rt *L, int i, const char *msg)
{
    return dt_error(DT_ERR_INVALID, "layers[%d] (%s): %s", i, L->spec.name, msg);
}

/* Per-example sizes past this are not a model dtrain can train; it also keeps every index in
 * the kernels within int and every GEMM dimension within OpenBLAS's int. */
#define DT_MAX_ELEMS_PER_EXAMPLE ((size_t)1 << 28)
/* Parameters per model: keeps every weight matrix's dimensions within int for OpenBLAS. */
#define DT_MAX_PARAMS ((size_t)1 << 31)

static size_t dims_elems(const int d[3]) { return (size_t)d[0] * (size_t)d[1] * (size_t)d[2]; }

static dt_status infer_shape(struct layer_rt *L, int i)
{
    const dt_layer_spec *s = &L->spec;
    memcpy(L->out_dims, L->in_dims, sizeof L->out_dims);
    L->out_flat = L->in_flat;
    L->in_elems = dims_elems(L->in_dims);
    if (L->in_elems > DT_MAX_ELEMS_PER_EXAMPLE)
        return layer_error(L, i, "input larger than 2^28 elements per example");
    switch (s->kind) {
    case DT_LAYER_DENSE:
        /* Keras's Dense on an (H, W, C) map would act on C alone; dtrain asks for a flatten so
         * the model says what it means. A 1x1 map is a vector either way. */
        if (!L->in_flat && (L->in_dims[0] != 1 || L->in_dims[1] != 1))
            return layer_error(L, i, "dense needs a flat input: add a flatten layer before it");
        L->out_dims[0] = L->out_dims[1] = 1;
        L->out_dims[2] = s->units;
        L->out_flat = true;
        break;
    case DT_LAYER_CONV2D:
        if (L->in_flat)
            return layer_error(L, i, "conv2d needs an (H, W, C) input, got a flat one");
        if (!dt_conv_geom_init(&L->cg, L->in_dims[0], L->in_dims[1], L->in_dims[2], s->kernel[0],
                               s->kernel[1], s->filters, s->strides[0], s->strides[1], s->same))
            return layer_error(L, i, "the kernel is larger than the input: empty output");
        L->out_dims[0] = L->cg.OH, L->out_dims[1] = L->cg.OW, L->out_dims[2] = s->filters;
        break;
    case DT_LAYER_MAXPOOL2D:
        if (L->in_flat)
            return layer_error(L, i, "max_pooling2d needs an (H, W, C) input, got a flat one");
        if (!dt_pool_geom_init(&L->pg, L->in_dims[0], L->in_dims[1], L->in_dims[2], s->pool[0],
                               s->pool[1], s->strides[0], s->strides[1], s->same))
            return layer_error(L, i, "the pool window is larger than the input: empty output");
        L->out_dims[0] = L->pg.OH, L->out_dims[1] = L->pg.OW;
        break;
    case DT_LAYER_FLATTEN:
        L->out_dims[0] = L->out_dims[1] = 1;
        L->out_dims[2] = (int)L->in_elems; /* within int: capped above */
        L->out_flat = true;
        break;
    case DT_LAYER_BATCHNORM:
        if (!L->in_flat && (L->in_dims[0] != 1 || L->in_dims[1] != 1))
            return layer_error(L, i, "batch_normalization takes a flat input (after a dense or "
                               "flatten layer)");
        break;
    default:
        break;
    }
    L->out_elems = dims_elems(L->out_dims);
    if (L->out_elems > DT_MAX_ELEMS_PER_EXAMPLE)
        return layer_error(L, i, "output larger than 2^28 elements per example");
    return DT_OK;
}

static dt_status declare_params(dt_model *m, struct layer_rt *L)
{
    char name[DT_VIEW_NAME_CAP];
    int kdims[4], n_kdims, bdims[1];
    if (L->spec.kind == DT_LAYER_DENSE) {
        kdims[0] = (int)L->in_elems, kdims[1] = L->spec.units, n_kdims = 2;
        bdims[0] = L->spec.units;
    } else if (L->spec.kind == DT_LAYER_CONV2D) {
        kdims[0] = L->cg.KH, kdims[1] = L->cg.KW, kdims[2] = L->cg.C, kdims[3] = L->cg.OC;
        n_kdims = 4;
        bdims[0] = L->cg.OC;
    } else if (L->spec.kind == DT_LAYER_BATCHNORM) {
        int dims[1] = {(int)L->in_elems};
        snprintf(name, sizeof name, "%s/gamma", L->spec.name);
        dt_status st = dt_arena_add(&m->params, name, 1, dims, &L->w_view);
        snprintf(name, sizeof name, "%s/beta", L->spec.name);
        if (st == DT_OK)
            st = dt_arena_add(&m->params, name, 1, dims, &L->b_view);
        snprintf(name, sizeof name, "%s/moving_mean", L->spec.name);
        if (st == DT_OK)
            st = dt_arena_add(&m->state, name, 1, dims, &L->mm_view);
        snprintf(name, sizeof name, "%s/moving_variance", L->spec.name);
        if (st == DT_OK)
            st = dt_arena_add(&m->state, name, 1, dims, &L->mv_view);
        return st;
    } else {
        L->w_view = L->b_view = -1;
        return DT_OK;
    }
    snprintf(name, sizeof name, "%s/kernel", L->spec.name);
    dt_status st = dt_arena_add(&m->params, name, n_kdims, kdims, &L->w_view);
    if (st)
        return st;
    snprintf(name, sizeof name, "%s/bias", L->spec.name);
    return dt_arena_add(&m->params, name, 1, bdims, &L->b_view);
}

/* Fuses conv2d(relu) + max_pooling2d when it opens the network (the fused kernel computes no
 * input gradient) and the shapes and CPU suit the fused kernel. */
static void plan_fusion(dt_model *m, const dt_model_options *opts)
{
    if (opts && opts->no_fuse)
        return;
    if (m->n_layers < 2)
        return;
    /* dense + dropout (DeepFM's MLP): one pass over the pool instead of two, each way. */
    for (int i = 0; i + 1 < m->n_layers; i++)
        m->layers[i].drops_next = m->layers[i].spec.kind == DT_LAYER_DENSE &&
                                  m->layers[i + 1].spec.kind == DT_LAYER_DROPOUT;
    struct layer_rt *c = &m->layers[0], *p = &m->layers[1];
    if (c->spec.kind == DT_LAYER_CONV2D && c->spec.activation == DT_ACT_RELU &&
        p->spec.kind == DT_LAYER_MAXPOOL2D && dt_convpool_supported(&c->cg, &p->pg)) {
        c->fused = true;
        p->absorbed = true;
    }
}

/* What the model's buffers need, in floats: each layer's output and auxiliary arrays, the two
 * gradient buffers, scratch and the loss's arrays. */
struct buffer_plan {
    size_t grad_elems; /* per gradient buffer */
    size_t scratch;
    size_t total;      /* floats in all buffers */
};

static struct buffer_plan plan_buffers(const dt_model *m)
{
    struct buffer_plan p = {0};
    size_t B = (size_t)m->max_batch, max_elems = (size_t)m->K;
    int n_threads = dt_pool_size(m->pool);
    for (int i = 0; i < m->n_layers; i++) {
        const struct layer_rt *L = &m->layers[i];
        /* The gradient buffers hold what backward writes: each trainable-or-later layer's output
         * gradient (never a fused conv's unpooled output) and the input gradients of the layers
         * above the first trainable one (never the absorbed pooling's input). */
        if (i >= m->first_trainable && !L->fused && L->out_elems > max_elems)
            max_elems = L->out_elems;
        bool needs_dx = i > m->first_trainable || ((m->ctr || m->cols) && i == 0);
        if (needs_dx && !L->absorbed && L->in_elems > max_elems)
            max_elems = L->in_elems;
        size_t out = B * L->out_elems, s = 0;
        if (L->spec.kind != DT_LAYER_FLATTEN && !L->fused)
            p.total += out;
        if (L->spec.kind == DT_LAYER_MAXPOOL2D && !L->absorbed)
            p.total += out; /* argmax indices, 4 bytes each */
        if (L->spec.kind == DT_LAYER_DROPOUT || L->spec.kind == DT_LAYER_BATCHNORM)
            p.total += out;
        if (L->fused) {
            p.total += dt_convpool_mask_words(&m->layers[i + 1].pg, m->max_batch);
            s = dt_convpool_scratch_elems(&L->cg, n_threads);
        } else if (L->spec.kind == DT_LAYER_CONV2D) {
            s = dt_conv2d_scratch_elems(&L->cg, n_threads);
        } else if (L->spec.kind == DT_LAYER_DENSE) {
            s = dt_dense_sparse_scratch_elems(m->max_batch, (int)L->in_elems, L->spec.units,
                                              n_threads);
        }
        p.scratch = s > p.scratch ? s : p.scratch;
    }
    p.grad_elems = B * max_elems;
    p.total += 2 * p.grad_elems + p.scratch + 3 * B * (size_t)m->K + B;
    return p;
}

/* Refuses a model whose parameters, gradients and buffers would not fit in this machine's
 * memory, rather than let the kernel's OOM killer end the process half-way. */
static dt_status check_memory(const dt_model *m, const struct buffer_plan *p)
{
    double bytes = 4.0 * (2.0 * (double)m->params.n_elems + (double)p->total);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double phys = pages > 0 && page > 0 ? (double)pages * (double)page : 0.0;
    if (phys > 0.0 && bytes > 0.9 * phys)
        return dt_error(DT_ERR_INVALID, "model %s needs %.1f GB for its parameters, gradients and "
                        "buffers at batch %d; this machine has %.1f GB", m->spec.name, bytes / 1e9,
                        m->max_batch, phys / 1e9);
    return DT_OK;
}

static dt_status allocate_buffers(dt_model *m, const struct buffer_plan *p)
{
    size_t B = (size_t)m->max_batch;
    for (int i = 0; i < m->n_layers; i++) {
        struct layer_rt *L = &m->layers[i];
        size_t out = L->out_elems;
        if (L->spec.kind != DT_LAYER_FLATTEN && !L->fused && !(L->out = alloc_floats(B * out)))
            return dt_error(DT_ERR_NOMEM, "no memory for the output of layer %s", L->spec.name);
        if (L->spec.kind == DT_LAYER_MAXPOOL2D && !L->absorbed &&
            !(L->arg = malloc(B * out * sizeof *L->arg)))
            return dt_error(DT_ERR_NOMEM, "no memory for layer %s", L->spec.name);
        if (L->spec.kind == DT_LAYER_DROPOUT && !(L->drop_mask = alloc_floats(B * out)))
            return dt_error(DT_ERR_NOMEM, "no memory for layer %s", L->spec.name);
        if (L->spec.kind == DT_LAYER_BATCHNORM &&
            (!(L->bn_xhat = alloc_floats(B * out)) || !(L->bn_istd = alloc_floats(out))))
            return dt_error(DT_ERR_NOMEM, "no memory for layer %s", L->spec.name);
        if (L->fused) {
            const dt_pool_geom *pg = &m->layers[i + 1].pg;
            if (!(L->mask = malloc(dt_convpool_mask_words(pg, m->max_batch) * sizeof *L->mask)))
                return dt_error(DT_ERR_NOMEM, "no memory for layer %s", L->spec.name);
        }
    }
    size_t K = (size_t)m->K;
    if (!(m->gbuf[0] = alloc_floats(p->grad_elems)) || !(m->gbuf[1] = alloc_floats(p->grad_elems)) ||
        !(m->scratch = alloc_floats(p->scratch)) || !(m->prob = alloc_floats(B * K)) ||
        !(m->losses = alloc_floats(B)) || !(m->targets = alloc_floats(B * K)) ||
        (m->ctr && (!(m->ctr_logits = alloc_floats(B)) || !(m->dz = alloc_floats(B)))) ||
        (m->cols && (!(m->cols_logits = alloc_floats((size_t)B * m->K)) ||
                     !(m->dz = alloc_floats((size_t)B * m->K)))))
        return dt_error(DT_ERR_NOMEM, "no memory for the model's buffers");
    return DT_OK;
}

dt_status dt_model_create(const dt_model_spec *spec, int max_batch, dt_pool *pool,
                          const dt_model_options *opts, dt_model **out)
{
    *out = NULL;
    if (max_batch < 1)
        return dt_error(DT_ERR_INVALID, "batch size must be positive, got %d", max_batch);
    for (int d = 0; d < 3; d++)
        if (spec->input_shape[d] < 1)
            return dt_error(DT_ERR_INVALID, "model %s: input_shape is not set", spec->name);
    bool cols = spec->arch == DT_ARCH_COLUMNS;
    bool ctr = spec->arch != DT_ARCH_SEQUENTIAL && !cols;
    if (cols && !spec->columns)
        return dt_error(DT_ERR_INVALID, "model %s: a columns model without its columns",
                        spec->name);
    if (spec->n_layers < (ctr || cols ? 0 : 1) || spec->n_layers > DT_MAX_LAYERS)
        return dt_error(DT_ERR_INVALID, "model %s: has %d layers (1..%d)", spec->name,
                        spec->n_layers, DT_MAX_LAYERS);
    dt_model *m = calloc(1, sizeof *m);
    if (!m)
        return dt_error(DT_ERR_NOMEM, "no memory for a model");
    m->spec = *spec;
    m->max_batch = max_batch;
    m->pool = pool;
    m->n_layers = spec->n_layers;
    dt_arena_init(&m->params);
    dt_arena_init(&m->grads);
    dt_arena_init(&m->state);
    dt_status st = DT_OK;
    /* The bias comes first in the arena: backward computes its gradient last, and gradients
     * become final from the arena's end toward its start (dt_grad_ready_fn). */
    if (ctr && ((st = dt_ctr_create(spec, max_batch, opts ? opts->dynamic_shards : 1, &m->ctr)) ||
                (st = dt_arena_add(&m->params, "fm_b", 1, (int[]){1}, &m->bias_view))))
        goto fail;
    if (cols) {
        if (!(m->cols_spec = malloc(sizeof *m->cols_spec))) {
            st = dt_error(DT_ERR_NOMEM, "no memory for a model");
            goto fail;
        }
        *m->cols_spec = *spec->columns;
        m->spec.columns = m->cols_spec;
        if ((st = dt_cols_create(m->cols_spec, max_batch, &m->params, pool, opts, &m->cols)))
            goto fail;
    }
    int dims[3] = {spec->input_shape[0], spec->input_shape[1], spec->input_shape[2]};
    bool flat = false;
    for (int i = 0; i < m->n_layers; i++) {
        struct layer_rt *L = &m->layers[i];
        L->spec = spec->layers[i];
        memcpy(L->in_dims, dims, sizeof dims);
        L->in_flat = flat;
        if ((st = infer_shape(L, i)) || (st = declare_params(m, L)))
            goto fail;
        memcpy(dims, L->out_dims, sizeof dims);
        flat = L->out_flat;
    }
    m->K = m->n_layers ? dims[0] * dims[1] * dims[2] : cols ? spec->columns->n_outputs : 1;
    if (cols && m->K != spec->columns->n_outputs) {
        st = dt_error(DT_ERR_INVALID, "model %s: the deep part ends with %d units, the head "
                      "has %d outputs", spec->name, m->K, spec->columns->n_outputs);
        goto fail;
    }
    if (ctr && m->K != 1) {
        st = dt_error(DT_ERR_INVALID, "model %s: the MLP ends with %d outputs: a CTR model's ends "
                      "with one", spec->name, m->K);
        goto fail;
    }
    if (dims[0] != 1 || dims[1] != 1) {
        st = dt_error(DT_ERR_INVALID, "model %s: the last layer's output is %dx%dx%d: flatten it "
                      "and end with a dense layer", spec->name, dims[0], dims[1], dims[2]);
        goto fail;
    }
    if (spec->loss == DT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY && m->K < 2) {
        st = dt_error(DT_ERR_INVALID, "model %s: sparse_categorical_crossentropy needs at least 2 "
                      "outputs, the last layer has %d", spec->name, m->K);
        goto fail;
    }
    if (m->params.n_elems > DT_MAX_PARAMS) {
        st = dt_error(DT_ERR_INVALID, "model %s: %zu parameters, more than dtrain's limit of 2^31",
                      spec->name, dt_arena_payload_elems(&m->params));
        goto fail;
    }
    m->first_trainable = m->n_layers;
    for (int i = m->n_layers - 1; i >= 0; i--)
        if (m->layers[i].w_view >= 0 || ctr || cols)
            m->first_trainable = i;
    plan_fusion(m, opts);
    struct buffer_plan plan = plan_buffers(m);
    if ((st = check_memory(m, &plan)) || (st = dt_arena_commit(&m->params)) ||
        (st = dt_arena_commit(&m->state)) ||
        (st = dt_arena_mirror(&m->grads, &m->params, "")) || (st = allocate_buffers(m, &plan)))
        goto fail;
    *out = m;
    return DT_OK;
fail:
    dt_model_destroy(m);
    return st;
}

void dt_model_destroy(dt_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_layers; i++) {
        struct layer_rt *L = &m->layers[i];
        if (L->spec.kind != DT_LAYER_FLATTEN)
            free(L->out);
        free(L->arg);
        free(L->mask);
        free(L->drop_mask);
        free(L->bn_xhat);
        free(L->bn_istd);
    }
    free(m->gbuf[0]);
    free(m->gbuf[1]);
    free(m->scratch);
    free(m->prob);
    free(m->losses);
    free(m->targets);
    free(m->ctr_logits);
    free(m->cols_logits);
    dt_cols_destroy(m->cols);
    free(m->cols_spec);
    free(m->table_rules);
    free(m->dz);
    dt_ctr_destroy(m->ctr);
    if (m->own_params) /* free its own storage, not the one it borrowed */
        m->params.data = m->own_params;
    if (m->own_state)
        m->state.data = m->own_state;
    if (m->kept_params) {
        m->params.data = m->kept_params;
        m->grads.data = m->kept_grads;
    }
    dt_arena_free(&m->params);
    dt_arena_free(&m->grads);
    dt_arena_free(&m->state);
    free(m);
}

void dt_model_init_params(dt_model *m, uint64_t seed)
{
    dt_model_init_dense_params(m, seed);
    if (m->ctr)
        dt_ctr_init(m->ctr, seed, m->pool);
    if (m->cols)
        dt_cols_init(m->cols, seed, m->pool);
}

/* Glorot uniform: fan_in and fan_out count the receptive field of a conv kernel. */
static void glorot_uniform(dt_model *m, int view, dt_rng *rng)
{
    const dt_view *v = &m->params.views[view];
    double receptive = 1.0;
    for (int d = 0; d + 2 < v->n_dims; d++)
        receptive *= v->dims[d];
    double fan_in = receptive * v->dims[v->n_dims - 2];
    double fan_out = receptive * v->dims[v->n_dims - 1];
    float limit = (float)sqrt(6.0 / (fan_in + fan_out));
    float *w = dt_arena_view_data(&m->params, view);
    for (size_t k = 0; k < v->n_elems; k++)
        w[k] = (2.0f * dt_rng_uniform(rng) - 1.0f) * limit;
}

void dt_model_init_dense_params(dt_model *m, uint64_t seed)
{
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    memset(m->params.data, 0, m->params.n_elems * sizeof(float));
    for (int i = 0; i < m->n_layers; i++) {
        const struct layer_rt *L = &m->layers[i];
        if (L->spec.kind == DT_LAYER_BATCHNORM) { /* gamma 1, beta 0; moving mean 0, var 1 */
            size_t n = L->in_elems;
            float *g = dt_arena_view_data(&m->params, L->w_view);
            float *mm = dt_arena_view_data(&m->state, L->mm_view);
            float *mv = dt_arena_view_data(&m->state, L->mv_view);
            for (size_t k = 0; k < n; k++)
                g[k] = 1.0f, mm[k] = 0.0f, mv[k] = 1.0f;
            continue;
        }
        if (L->w_view >= 0)
            glorot_uniform(m, L->w_view, &rng);
    }
    int views[2 * DT_MAX_CROSS_LAYERS + 1];
    int n = m->cols ? dt_cols_kernel_views(m->cols, views, 2 * DT_MAX_CROSS_LAYERS + 1) : 0;
    for (int i = 0; i < n; i++)
        glorot_uniform(m, views[i], &rng);
}

dt_arena *dt_model_params(dt_model *m) { return &m->params; }
dt_arena *dt_model_grads(dt_model *m) { return &m->grads; }
dt_arena *dt_model_state(dt_model *m) { return &m->state; }
const dt_model_spec *dt_model_spec_of(const dt_model *m) { return &m->spec; }
int dt_model_num_outputs(const dt_model *m) { return m->K; }
bool dt_model_float_targets(const dt_model *m)
{
    return m->cols && m->spec.loss == DT_LOSS_MEAN_SQUARED_ERROR;
}
int dt_model_max_batch(const dt_model *m) { return m->max_batch; }
uint64_t dt_model_dropout_position(const dt_model *m) { return m->training_forwards; }

void dt_model_set_dropout_position(dt_model *m, uint64_t forwards) { m->training_forwards = forwards; }

void dt_model_set_dropout_seed(dt_model *m, uint64_t seed)
{
    m->dropout_seed = seed;
    m->training_forwards = 0;
}

size_t dt_model_input_elems(const dt_model *m)
{
    return (size_t)m->spec.input_shape[0] * m->spec.input_shape[1] * m->spec.input_shape[2];
}

void dt_model_zero_grads(dt_model *m)
{
    memset(m->grads.data, 0, m->grads.n_elems * sizeof(float));
    for (int i = 0; i < dt_model_num_tables(m); i++)
        dt_model_table_grad(m, i)->n = 0;
}

/* ---- Forward ---- */

static const float *P(const dt_model *m, int view) { return dt_arena_view_data(&m->params, view); }
static float *G(const dt_model *m, int view) { return dt_arena_view_data(&m->grads, view); }

/* Layer i, a dense one, runs layer i + 1's dropout with its activation: only while training
 * (dropout is a copy otherwise) and when the dropout drops anything. */
static bool runs_next_dropout(const dt_model *m, int i, bool training)
{
    return training && m->layers[i].drops_next && m->layers[i + 1].spec.rate > 0.0f;
}

static void forward_layer(dt_model *m, int i, int B, bool training)
{
    struct layer_rt *L = &m->layers[i];
    size_t n_out = (size_t)B * L->out_elems;
    switch (L->spec.kind) {
    case DT_LAYER_DENSE:
        dt_dense_forward(m->pool, B, (int)L->in_elems, L->spec.units, L->in, P(m, L->w_view),
                         P(m, L->b_view), L->out);
        if (runs_next_dropout(m, i, training)) {
            struct layer_rt *D = &m->layers[i + 1];
            /* The keys the dropout layer itself would draw with: the same mask. */
            dt_act_dropout_forward_pool(m->pool, L->spec.activation, n_out, D->spec.rate,
                                        m->dropout_seed, m->training_forwards,
                                        (uint64_t)(i + 1), L->out, D->out, D->drop_mask);
            break;
        }
        dt_act_forward_pool(m->pool, L->spec.activation, n_out, L->out);
        break;
    case DT_LAYER_CONV2D:
        if (L->fused) {
            struct layer_rt *pool = &m->layers[i + 1];
            dt_convpool_forward(m->pool, &L->cg, &pool->pg, B, L->in, P(m, L->w_view),
                                P(m, L->b_view), pool->out, L->mask);
            break;
        }
        dt_conv2d_forward(m->pool, &L->cg, B, L->in, P(m, L->w_view), P(m, L->b_view), L->out,
                          m->scratch);
        dt_act_forward_pool(m->pool, L->spec.activation, n_out, L->out);
        break;
    case DT_LAYER_MAXPOOL2D:
        dt_maxpool_forward(&L->pg, B, L->in, L->out, L->arg);
        break;
    case DT_LAYER_FLATTEN:
        /* Row-major (H, W, C) is already the flattened order: share the input. */
        L->out = (float *)L->in;
        break;
    case DT_LAYER_RELU:
    case DT_LAYER_SIGMOID:
    case DT_LAYER_TANH: {
        dt_activation act = L->spec.kind == DT_LAYER_RELU      ? DT_ACT_RELU
                            : L->spec.kind == DT_LAYER_SIGMOID ? DT_ACT_SIGMOID
                                                               : DT_ACT_TANH;
        memcpy(L->out, L->in, n_out * sizeof *L->out);
        dt_act_forward_pool(m->pool, act, n_out, L->out);
        break;
    }
    case DT_LAYER_BATCHNORM: {
        int C = (int)L->in_elems;
        float *mm = dt_arena_view_data(&m->state, L->mm_view);
        float *mv = dt_arena_view_data(&m->state, L->mv_view);
        if (training)
            dt_batchnorm_forward_train(B, C, L->in, P(m, L->w_view), P(m, L->b_view),
                                       L->spec.epsilon, L->spec.momentum, mm, mv, L->out,
                                       L->bn_xhat, L->bn_istd);
        else
            dt_batchnorm_forward_infer(B, C, L->in, P(m, L->w_view), P(m, L->b_view),
                                       L->spec.epsilon, mm, mv, L->out);
        break;
    }
    case DT_LAYER_DROPOUT: /* one that drops nothing is passed over by run_layers */
        dt_dropout_forward_pool(m->pool, n_out, L->spec.rate, m->dropout_seed,
                                m->training_forwards, (uint64_t)i, L->in, L->out, L->drop_mask);
        break;
    }
}

/* A dropout layer that drops nothing (inference, or a rate of 0) is the identity: the layer
 * after it reads its input, so scoring copies no activations and fills no mask. */
static bool drops_nothing(const struct layer_rt *L, bool training)
{
    return L->spec.kind == DT_LAYER_DROPOUT && !(training && L->spec.rate > 0.0f);
}

static const float *run_layers(dt_model *m, int B, const float *x, bool training)
{
    const float *cur = x;
    for (int i = 0; i < m->n_layers; i++) {
        struct layer_rt *L = &m->layers[i];
        L->in = cur;
        L->passed = drops_nothing(L, training);
        if (L->passed)
            continue;
        if (!L->absorbed && !(i > 0 && runs_next_dropout(m, i - 1, training)))
            forward_layer(m, i, B, training);
        cur = L->out;
    }
    return cur;
}

const float *dt_model_forward(dt_model *m, int B, const float *x, bool training)
{
    assert(B >= 1 && B <= m->max_batch && !m->ctr && !m->cols);
    m->logits = run_layers(m, B, x, training);
    if (training)
        m->training_forwards++;
    return m->logits;
}

static dt_status forward_ctr(dt_model *m, const dt_elem *e, bool training)
{
    dt_status st = dt_ctr_forward(m->ctr, e, training, m->pool);
    if (st)
        return st;
    const float *deep = NULL;
    if (m->n_layers > 0)
        deep = run_layers(m, e->n, dt_ctr_deep_input(m->ctr), training);
    dt_ctr_logits(m->ctr, e->n, P(m, m->bias_view)[0], deep, m->ctr_logits);
    m->logits = m->ctr_logits;
    if (training)
        m->training_forwards++;
    return DT_OK;
}

static dt_status forward_cols(dt_model *m, const dt_elem *e, bool training)
{
    m->cols_ids_of = NULL;
    dt_status st = dt_cols_forward(m->cols, e, &m->params, training);
    if (st)
        return st;
    const float *deep = NULL;
    if (m->n_layers > 0)
        deep = run_layers(m, e->n, dt_cols_deep_input(m->cols), training);
    dt_cols_logits(m->cols, e->n, &m->params, deep, m->cols_logits);
    m->logits = m->cols_logits;
    if (training)
        m->training_forwards++;
    return DT_OK;
}

dt_status dt_model_forward_batch(dt_model *m, const dt_elem *e, bool training,
                                 const float **logits)
{
    if (e->n < 1 || e->n > m->max_batch)
        return dt_error(DT_ERR_INVALID, "a batch of %d examples for a model built for at most %d",
                        e->n, m->max_batch);
    if (m->ctr || m->cols) {
        dt_status st = m->ctr ? forward_ctr(m, e, training) : forward_cols(m, e, training);
        if (st)
            return st;
    } else {
        if ((size_t)e->n_dense != dt_model_input_elems(m))
            return dt_error(DT_ERR_INVALID, "examples of %d values for a model whose input has "
                            "%zu", e->n_dense, dt_model_input_elems(m));
        dt_model_forward(m, e->n, e->dense, training);
    }
    if (logits)
        *logits = m->logits;
    return DT_OK;
}

/* ---- Loss ---- */

static void fill_targets(const dt_model *m, int B, const int32_t *labels)
{
    int K = m->K;
    if (dt_model_float_targets(m)) { /* a regression head: the batch's own values */
        memcpy(m->targets, dt_cols_labels(m->cols), (size_t)B * sizeof *m->targets);
        return;
    }
    if (K == 1) {
        for (int i = 0; i < B; i++)
            m->targets[i] = (float)labels[i];
        return;
    }
    memset(m->targets, 0, (size_t)B * K * sizeof *m->targets);
    for (int i = 0; i < B; i++)
        m->targets[(size_t)i * K + labels[i]] = 1.0f;
}

static int count_correct(const dt_model *m, int B, const int32_t *labels)
{
    int K = m->K, correct = 0;
    for (int i = 0; i < B; i++) {
        const float *z = m->logits + (size_t)i * K;
        int pred;
        if (K == 1) {
            /* One output: a logit (binary cross-entropy) or a value (MSE) against 0.5. */
            float threshold = m->spec.loss == DT_LOSS_BINARY_CROSSENTROPY ? 0.0f : 0.5f;
            pred = z[0] > threshold;
        } else {
            pred = 0;
            for (int k = 1; k < K; k++)
                if (z[k] > z[pred])
                    pred = k;
        }
        correct += pred == labels[i];
    }
    return correct;
}

double dt_model_loss(dt_model *m, int B, const int32_t *labels, float grad_scale, bool want_grad,
                     int *n_correct)
{
    int K = m->K;
    float *dlogits = m->gbuf[0];
    assert(B >= 1 && B <= m->max_batch);
    switch (m->spec.loss) {
    case DT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY:
        dt_softmax_xent_forward(B, K, m->logits, labels, m->prob, m->losses);
        if (want_grad)
            dt_softmax_xent_backward(B, K, m->prob, labels, grad_scale, dlogits);
        break;
    case DT_LOSS_BINARY_CROSSENTROPY:
        fill_targets(m, B, labels);
        dt_bce_logits_forward(B, K, m->logits, m->targets, m->losses);
        if (want_grad)
            dt_bce_logits_backward(B, K, m->logits, m->targets, grad_scale, dlogits);
        break;
    case DT_LOSS_MEAN_SQUARED_ERROR:
        fill_targets(m, B, labels);
        dt_mse_forward(B, K, m->logits, m->targets, m->losses);
        if (want_grad)
            dt_mse_backward(B, K, m->logits, m->targets, grad_scale, dlogits);
        break;
    }
    if (n_correct)
        *n_correct = count_correct(m, B, labels);
    double sum = 0.0;
    for (int i = 0; i < B; i++)
        sum += m->losses[i];
    return sum;
}

/* ---- Backward ---- */

static dt_activation act_of_layer(dt_layer_kind kind)
{
    return kind == DT_LAYER_RELU ? DT_ACT_RELU : kind == DT_LAYER_SIGMOID ? DT_ACT_SIGMOID : DT_ACT_TANH;
}

/* Runs layer i backward with dy in a gradient buffer; returns where its input gradient is (dy
 * itself for in-place layers, dx otherwise; NULL for the first layer, which needs none). */
static float *backward_layer(dt_model *m, int i, int B, float *dy, float *dx)
{
    struct layer_rt *L = &m->layers[i];
    size_t n_out = (size_t)B * L->out_elems;
    switch (L->spec.kind) {
    case DT_LAYER_DENSE:
        /* The dropout above, whose backward was left to this layer, then the activation. A
         * dropout that dropped nothing in the forward pass has no mask to apply. */
        if (L->drops_next && !m->layers[i + 1].passed)
            dt_dropout_act_backward_pool(m->pool, L->spec.activation, n_out,
                                         m->layers[i + 1].drop_mask, L->out, dy);
        else
            dt_act_backward_pool(m->pool, L->spec.activation, n_out, L->out, dy);
        /* After ReLU and dropout much of dy is zero: the products run over its non-zeros. */
        dt_dense_backward_sparse(m->pool, B, (int)L->in_elems, L->spec.units, L->in,
                                 P(m, L->w_view), dy, G(m, L->w_view), G(m, L->b_view), dx,
                                 m->scratch);
        return dx;
    case DT_LAYER_CONV2D:
        if (L->fused) {
            struct layer_rt *pool = &m->layers[i + 1];
            dt_convpool_backward(m->pool, &L->cg, &pool->pg, B, L->in, pool->out, L->mask, dy,
                                 G(m, L->w_view), G(m, L->b_view), m->scratch);
            return NULL;
        }
        dt_act_backward_pool(m->pool, L->spec.activation, n_out, L->out, dy);
        dt_conv2d_backward(m->pool, &L->cg, B, L->in, P(m, L->w_view), dy, G(m, L->w_view),
                           G(m, L->b_view), dx, m->scratch);
        return dx;
    case DT_LAYER_MAXPOOL2D:
        if (dx)
            dt_maxpool_backward(&L->pg, B, dy, L->arg, dx);
        return dx;
    case DT_LAYER_FLATTEN:
        return dy;
    case DT_LAYER_RELU:
    case DT_LAYER_SIGMOID:
    case DT_LAYER_TANH:
        dt_act_backward_pool(m->pool, act_of_layer(L->spec.kind), n_out, L->out, dy);
        return dy;
    case DT_LAYER_DROPOUT:
        /* Else the dense layer below applies it, or it dropped nothing. */
        if (!(i > 0 && m->layers[i - 1].drops_next) && !L->passed)
            dt_dropout_backward_pool(m->pool, n_out, L->drop_mask, dy);
        return dy;
    case DT_LAYER_BATCHNORM:
        dt_batchnorm_backward(B, (int)L->in_elems, dy, L->bn_xhat, L->bn_istd, P(m, L->w_view),
                              G(m, L->w_view), G(m, L->b_view), dx);
        return dx;
    }
    return dx;
}

/* After the MLP (if any): the CTR front's sparse gradients and the bias's. The bias is the
 * arena's first variable, so every dense gradient is final after it. */
static void backward_ctr(dt_model *m, int B, float *ddeep)
{
    G(m, m->bias_view)[0] += dt_ctr_backward(m->ctr, B, m->dz, ddeep, m->pool);
    if (m->grad_hook)
        m->grad_hook(m->grad_hook_ctx, 0);
}

void dt_model_backward(dt_model *m, int B)
{
    assert(B >= 1 && B <= m->max_batch);
    float *dy = m->gbuf[0];
    if (m->ctr || m->cols) /* the logits' gradient, which the MLP's backward overwrites */
        memcpy(m->dz, dy, (size_t)B * (size_t)m->K * sizeof *m->dz);
    for (int i = m->n_layers - 1; i >= m->first_trainable; i--) {
        if (m->layers[i].absorbed)
            continue;
        float *other = dy == m->gbuf[0] ? m->gbuf[1] : m->gbuf[0];
        bool want_dx = i > m->first_trainable || m->ctr || m->cols;
        float *next = backward_layer(m, i, B, dy, want_dx ? other : NULL);
        const struct layer_rt *L = &m->layers[i];
        if (m->grad_hook && (L->w_view >= 0 || L->b_view >= 0)) {
            int v = L->w_view >= 0 ? L->w_view : L->b_view;
            if (L->b_view >= 0 && m->grads.views[L->b_view].offset < m->grads.views[v].offset)
                v = L->b_view;
            m->grad_hook(m->grad_hook_ctx, m->grads.views[v].offset);
        }
        if (!next)
            break;
        dy = next;
    }
    if (m->ctr)
        backward_ctr(m, B, m->n_layers > 0 ? dy : NULL);
    if (m->cols) {
        dt_cols_backward(m->cols, B, &m->params, &m->grads, m->dz, m->n_layers > 0 ? dy : NULL);
        if (m->grad_hook)
            m->grad_hook(m->grad_hook_ctx, 0);
    }
}

/* ---- Tables ---- */

int dt_model_num_tables(const dt_model *m)
{
    return m->ctr ? dt_ctr_num_tables(m->ctr) : m->cols ? dt_cols_num_tables(m->cols) : 0;
}
dt_table *dt_model_table(dt_model *m, int i)
{
    return m->cols ? dt_cols_table(m->cols, i) : dt_ctr_table(m->ctr, i);
}

dt_table *dt_model_find_table(dt_model *m, const char *name)
{
    for (int i = 0; i < dt_model_num_tables(m); i++)
        if (strcmp(dt_model_table(m, i)->name, name) == 0)
            return dt_model_table(m, i);
    return NULL;
}
dt_sparse_rows *dt_model_table_grad(dt_model *m, int i)
{
    return m->cols ? dt_cols_table_grad(m->cols, i) : dt_ctr_table_grad(m->ctr, i);
}

dt_status dt_model_setup_tables(dt_model *m, const dt_rowopt_config *c)
{
    dt_status st = dt_rowopt_config_check(c);
    for (int i = 0; st == DT_OK && i < dt_model_num_tables(m); i++)
        st = dt_rowopt_setup(c, dt_model_table(m, i));
    m->rowopt = *c;
    free(m->table_rules);
    m->table_rules = NULL;
    m->tables_ready = st == DT_OK;
    return st;
}

dt_status dt_model_set_table_rule(dt_model *m, int i, const dt_rowopt_config *c)
{
    assert(m->tables_ready && i >= 0 && i < dt_model_num_tables(m));
    dt_status st = dt_rowopt_config_check(c);
    if (st)
        return st;
    if (!m->table_rules) {
        int n = dt_model_num_tables(m);
        if (!(m->table_rules = malloc((size_t)n * sizeof *m->table_rules)))
            return dt_error(DT_ERR_NOMEM, "no memory for the tables' rules");
        for (int k = 0; k < n; k++)
            m->table_rules[k] = m->rowopt;
    }
    if ((st = dt_rowopt_setup(c, dt_model_table(m, i))))
        return st;
    m->table_rules[i] = *c;
    return DT_OK;
}

const dt_rowopt_config *dt_model_table_rule(const dt_model *m, int i)
{
    if (!m->tables_ready)
        return NULL;
    return m->table_rules ? &m->table_rules[i] : &m->rowopt;
}

dt_status dt_model_table_ids(dt_model *m, const dt_elem *e, int i, const int64_t **ids,
                             size_t *n)
{
    assert(m->cols && i >= 0 && i < dt_model_num_tables(m));
    if (e != m->cols_ids_of) {
        dt_status st = dt_cols_prepare(m->cols, e, false);
        if (st)
            return st;
        m->cols_ids_of = e;
    }
    dt_cols_table_ids(m->cols, i, ids, n);
    return DT_OK;
}

void dt_model_table_init(const dt_model *m, int i, float *stddev, uint64_t *seed_offset)
{
    *seed_offset = 0;
    if (m->cols)
        dt_cols_table_init(m->cols, i, stddev, seed_offset);
    else
        *stddev = m->ctr && strcmp(dt_ctr_table(m->ctr, i)->name, "fm_v") == 0
                      ? m->spec.ctr.init_stddev
                      : 0.0f;
}

bool dt_model_table_linear(const dt_model *m, int i)
{
    return m->cols && dt_cols_table_linear(m->cols, i);
}

dt_status dt_model_setup_table_rules(dt_model *m, const dt_optim_config *cfg)
{
    dt_rowopt_config rule;
    dt_optim_table_rule(cfg, &rule);
    dt_status st = dt_model_setup_tables(m, &rule);
    for (int i = 0; st == DT_OK && cfg->linear_rule_set && i < dt_model_num_tables(m); i++)
        if (dt_model_table_linear(m, i))
            st = dt_model_set_table_rule(m, i, &cfg->linear_rule);
    return st;
}

dt_status dt_model_setup_optimizer(dt_model *m, dt_optim *o, const dt_optim_config *cfg)
{
    dt_status st = dt_optim_setup(o, cfg, &m->params);
    if (st || dt_model_num_tables(m) == 0)
        return st;
    return dt_model_setup_table_rules(m, cfg);
}

const dt_rowopt_config *dt_model_table_optimizer(const dt_model *m)
{
    return m->tables_ready ? &m->rowopt : NULL;
}

void dt_model_update_tables(dt_model *m, float lr_scale, int64_t step, dt_pool *pool)
{
    assert(m->tables_ready || dt_model_num_tables(m) == 0);
    for (int i = 0; i < dt_model_num_tables(m); i++) {
        const dt_rowopt_config *r = dt_model_table_rule(m, i);
        dt_rowopt_update(r, r->lr * lr_scale, step, dt_model_table(m, i),
                         dt_model_table_grad(m, i), pool);
    }
    if (m->ctr)
        dt_ctr_tables_updated(m->ctr, step);
    if (m->cols)
        dt_cols_tables_updated(m->cols, step);
}

bool dt_model_table_dynamic(dt_model *m, int i)
{
    return m->cols ? dt_cols_table_dynamic(m->cols, i) : m->ctr && dt_ctr_keymap(m->ctr);
}

const int64_t *dt_model_table_keys(dt_model *m, int i)
{
    return m->cols ? dt_cols_local_keys(m->cols, i) : NULL;
}

void dt_model_table_counts(dt_model *m, int i, uint32_t *times)
{
    if (m->cols)
        dt_cols_table_counts(m->cols, i, times);
}

dt_keymap *dt_model_keymap(dt_model *m, int i)
{
    if (m->cols)
        return dt_cols_keymap(m->cols, i);
    return m->ctr ? dt_ctr_keymap(m->ctr) : NULL;
}

int64_t dt_model_table_rows_used(dt_model *m, int i)
{
    dt_keymap *k = dt_model_keymap(m, i);
    if (!k)
        return dt_model_table(m, i)->rows;
    dt_keymap_stats s;
    dt_keymap_stats_get(k, &s);
    return s.rows_used;
}

int dt_model_keymaps(dt_model *m, dt_keymap **out, int cap)
{
    int n = 0;
    for (int i = 0; i < dt_model_num_tables(m); i++) {
        dt_keymap *k = dt_model_keymap(m, i);
        bool seen = k == NULL;
        for (int j = 0; !seen && j < n; j++)
            seen = out[j] == k;
        if (!seen && n < cap)
            out[n++] = k;
    }
    return n;
}

bool dt_model_dynamic_stats(dt_model *m, dt_keymap_stats *out)
{
    memset(out, 0, sizeof *out);
    dt_keymap *maps[DT_MAX_COLUMN_TABLES];
    int n = dt_model_keymaps(m, maps, DT_MAX_COLUMN_TABLES);
    for (int i = 0; i < n; i++) {
        dt_keymap_stats s;
        dt_keymap_stats_get(maps[i], &s);
        dt_keymap_stats_add(out, &s);
    }
    return n > 0;
}

void dt_model_set_tables_step(dt_model *m, int64_t step)
{
    if (m->ctr)
        dt_ctr_set_step(m->ctr, step);
    if (m->cols)
        dt_cols_set_step(m->cols, step);
}

dt_status dt_model_share_params(dt_model *m, const dt_model *owner)
{
    const dt_arena *a = &m->params, *b = &owner->params;
    bool same = a->n_elems == b->n_elems && a->n_views == b->n_views;
    for (int i = 0; same && i < a->n_views; i++)
        same = a->views[i].offset == b->views[i].offset && a->views[i].n_elems == b->views[i].n_elems;
    if (!same)
        return dt_error(DT_ERR_INVALID, "model %s cannot share the parameters of model %s: their "
                        "layouts differ", m->spec.name, owner->spec.name);
    if (!m->own_params)
        m->own_params = m->params.data;
    m->params.data = owner->params.data;
    return DT_OK;
}

dt_status dt_model_borrow_table(dt_model *m, int i, const float *data)
{
    if (i < 0 || i >= dt_model_num_tables(m))
        return dt_error(DT_ERR_INVALID, "model %s: no table %d (it has %d)", m->spec.name, i,
                        dt_model_num_tables(m));
    dt_table_borrow(dt_model_table(m, i), data);
    return DT_OK;
}

dt_status dt_model_share_variables(dt_model *m, const dt_model *owner)
{
    dt_status st = dt_model_share_params(m, owner);
    const dt_arena *a = &m->state, *b = &owner->state;
    if (st == DT_OK && (a->n_elems != b->n_elems || a->n_views != b->n_views))
        st = dt_error(DT_ERR_INVALID, "model %s cannot share the state of model %s: their "
                      "layouts differ", m->spec.name, owner->spec.name);
    int n = dt_model_num_tables(m);
    if (st == DT_OK && n != dt_model_num_tables(owner))
        st = dt_error(DT_ERR_INVALID, "model %s cannot share the tables of model %s: %d and %d",
                      m->spec.name, owner->spec.name, n, dt_model_num_tables(owner));
    for (int i = 0; st == DT_OK && i < n; i++) {
        const dt_table *mine = dt_model_table(m, i);
        const dt_table *theirs = dt_model_table((dt_model *)owner, i);
        if (mine->rows != theirs->rows || mine->dim != theirs->dim)
            st = dt_error(DT_ERR_INVALID, "model %s cannot share table %s of model %s: %lld x %d "
                          "against %lld x %d", m->spec.name, mine->name, owner->spec.name,
                          (long long)mine->rows, mine->dim, (long long)theirs->rows, theirs->dim);
    }
    if (st)
        return st;
    if (a->n_elems > 0) {
        if (!m->own_state)
            m->own_state = m->state.data;
        m->state.data = b->data;
    }
    for (int i = 0; i < n; i++)
        dt_table_borrow(dt_model_table(m, i), dt_model_table((dt_model *)owner, i)->data);
    if (m->ctr && owner->ctr) /* dynamic tables: the owner's keys find their rows */
        dt_ctr_share_keys(m->ctr, dt_ctr_keymap(owner->ctr));
    if (m->cols && owner->cols)
        dt_cols_share_keys(m->cols, owner->cols);
    return DT_OK;
}

void dt_model_use_storage(dt_model *m, float *params, float *grads)
{
    if (params) {
        if (!m->kept_params) {
            m->kept_params = m->params.data;
            m->kept_grads = m->grads.data;
        }
        m->params.data = params;
        m->grads.data = grads;
    } else if (m->kept_params) {
        memcpy(m->kept_params, m->params.data, m->params.n_elems * sizeof(float));
        m->params.data = m->kept_params;
        m->grads.data = m->kept_grads;
        m->kept_params = m->kept_grads = NULL;
    }
}

void dt_model_set_grad_hook(dt_model *m, dt_grad_ready_fn fn, void *ctx)
{
    m->grad_hook = fn;
    m->grad_hook_ctx = ctx;
}

/* ---- Summary ---- */

static const char *class_name(const dt_layer_spec *s)
{
    switch (s->kind) {
    case DT_LAYER_DENSE: return "Dense";
    case DT_LAYER_CONV2D: return "Conv2D";
    case DT_LAYER_MAXPOOL2D: return "MaxPooling2D";
    case DT_LAYER_FLATTEN: return "Flatten";
    case DT_LAYER_RELU: return "ReLU";
    case DT_LAYER_SIGMOID:
    case DT_LAYER_TANH: return "Activation";
    case DT_LAYER_DROPOUT: return "Dropout";
    case DT_LAYER_BATCHNORM: return "BatchNormalization";
    }
    return "Layer";
}

void dt_model_summary(const dt_model *m, FILE *out)
{
    fprintf(out, "Model: \"%s\"\n", m->spec.name);
    fprintf(out, "%-32s %-22s %s\n", "Layer (type)", "Output Shape", "Param #");
    for (int i = 0; i < m->n_layers; i++) {
        const struct layer_rt *L = &m->layers[i];
        char label[96], shape[64];
        snprintf(label, sizeof label, "%s (%s)", L->spec.name, class_name(&L->spec));
        if (L->out_flat)
            snprintf(shape, sizeof shape, "(None, %d)", L->out_dims[2]);
        else
            snprintf(shape, sizeof shape, "(None, %d, %d, %d)", L->out_dims[0], L->out_dims[1],
                     L->out_dims[2]);
        size_t n = 0;
        if (L->w_view >= 0)
            n = m->params.views[L->w_view].n_elems + m->params.views[L->b_view].n_elems;
        fprintf(out, "%-32s %-22s %zu%s\n", label, shape, n,
                L->fused ? "  [fused with the next layer]" : "");
    }
    size_t total = dt_arena_payload_elems(&m->params);
    for (int i = 0; i < dt_model_num_tables(m); i++) {
        const dt_table *t = dt_model_table((dt_model *)m, i);
        char shape[64];
        snprintf(shape, sizeof shape, "(%lld, %d)", (long long)t->rows, t->dim);
        fprintf(out, "%-32s %-22s %zu  [table: sparse rows]\n", t->name, shape,
                (size_t)t->rows * (size_t)t->dim);
        total += (size_t)t->rows * (size_t)t->dim;
    }
    fprintf(out, "Total params: %zu\n", total);
}
