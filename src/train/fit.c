/* fit / evaluate on an in-memory image dataset (see include/dtrain/fit.h). */
#include "dtrain/fit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "dtrain/clock.h"
#include "dtrain/comm.h"
#include "dtrain/gradsync.h"
#include "dtrain/progress.h"
#include "dtrain/rng.h"
#include "dtrain/stream.h"
#include "fit_ckpt.h"
#include "store_choice.h"

void dt_fit_config_default(dt_fit_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->epochs = 1;
    cfg->batch_size = 64;
    cfg->seed = 1;
    cfg->shuffle_buffer = INT64_MAX;
    cfg->prefetch = 2;
}

dt_status dt_check_dataset(const dt_model *m, const dt_image_dataset *ds)
{
    const int *s = dt_model_spec_of(m)->input_shape;
    if (ds->h != s[0] || ds->w != s[1] || ds->c != s[2])
        return dt_error(DT_ERR_INVALID, "%s: images are %dx%dx%d but model %s takes %dx%dx%d",
                        ds->images_path, ds->h, ds->w, ds->c, dt_model_spec_of(m)->name, s[0],
                        s[1], s[2]);
    int K = dt_model_num_outputs(m), limit = K == 1 ? 2 : K;
    for (int i = 0; i < ds->n; i++)
        if (ds->labels[i] >= limit)
            return dt_error(DT_ERR_INVALID, "%s: offset %d: label %d, but the model has %d "
                            "output%s (labels 0..%d)", ds->labels_path, 8 + i, ds->labels[i], K,
                            K == 1 ? "" : "s", limit - 1);
    if (ds->n == 0)
        return dt_error(DT_ERR_INVALID, "%s: no examples", ds->images_path);
    return DT_OK;
}

/* dst[k] = src[k] / 255 for the first pixels, 16 at a time; returns how many. IEEE division is
 * correctly rounded, so these are the table's values (the test checks every byte value). */
static size_t scale_pixels(const uint8_t *src, float *dst, size_t n)
{
    size_t k = 0;
#if defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128();
    const __m128 d = _mm_set1_ps(255.0f);
    for (; k + 16 <= n; k += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(src + k));
        __m128i lo = _mm_unpacklo_epi8(v, zero), hi = _mm_unpackhi_epi8(v, zero);
        __m128i q[4] = {_mm_unpacklo_epi16(lo, zero), _mm_unpackhi_epi16(lo, zero),
                        _mm_unpacklo_epi16(hi, zero), _mm_unpackhi_epi16(hi, zero)};
        for (int j = 0; j < 4; j++)
            _mm_storeu_ps(dst + k + 4 * j, _mm_div_ps(_mm_cvtepi32_ps(q[j]), d));
    }
#else
    (void)src, (void)dst, (void)n;
#endif
    return k;
}

static void prefetch_image(const uint8_t *p, size_t n)
{
    for (size_t k = 0; k < n; k += 64)
        __builtin_prefetch(p + k);
    __builtin_prefetch(p + n - 1); /* the line the last bytes spill into */
}

void dt_gather_batch(const dt_image_dataset *ds, const uint32_t *idx, int B, float *x,
                     int32_t *labels)
{
    /* v / 255 for each byte value, computed by division so the floats equal the tutorial's
     * `tf.cast(x, tf.float32) / 255`. */
    static float scale[256];
    static int ready;
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        for (int v = 0; v < 256; v++)
            scale[v] = (float)v / 255.0f;
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    size_t item = (size_t)ds->h * ds->w * ds->c;
    /* The images lie at random in a file-sized array: each is asked for from memory two images
     * ahead of its turn, which halves the gather's time. */
    for (int b = 0; b < B && b < 2; b++)
        prefetch_image(ds->images + (size_t)idx[b] * item, item);
    for (int b = 0; b < B; b++) {
        if (b + 2 < B)
            prefetch_image(ds->images + (size_t)idx[b + 2] * item, item);
        const uint8_t *src = ds->images + (size_t)idx[b] * item;
        float *dst = x + (size_t)b * item;
        size_t k = scale_pixels(src, dst, item);
        for (; k < item; k++)
            dst[k] = scale[src[k]];
        labels[b] = ds->labels[idx[b]];
    }
}

/* ---- The image pipeline: indices, shuffled and batched, then gathered into pixels ---- */

/* range(0, n) -> shuffle(buffer, seed, reshuffle each iteration) -> batch -> the images of this
 * worker's block of each batch's rows (dt_comm_block's split of the global batch), as one stage
 * over a plain array of indices. Its batches are those of the four datasets chained, in the same
 * order with the same random draws (test_fit checks it), but an index costs no element of its
 * own: chained, each index was an allocation, a pointer chased in the shuffle buffer and a copy
 * into the batch, which made the pipeline several times dearer than the gather itself. */
typedef struct {
    const dt_image_dataset *ds;
    int n_slices, slice, batch_size;
    bool drop_remainder;
    bool shuffled;   /* a shuffle buffer above 1: otherwise file order */
    uint64_t seed;
    uint32_t *buf;   /* the shuffle buffer: min(buffer size, examples) indices */
    int64_t cap, count;
    int64_t next_id; /* the next index the buffer has not taken */
    bool filled, done;
    dt_rng rng;
    uint32_t *ids;   /* the batch's indices */
    int32_t *labels; /* its labels, as the gather returns them */
} image_batches;

/* The shuffle's next index: a random pick from the buffer, whose slot the next unread index
 * fills (tf.data's shuffle buffer); false once buffer and input are both empty. */
static bool next_index(image_batches *b, uint32_t *out)
{
    int64_t n = b->ds->n;
    if (!b->shuffled) {
        if (b->next_id >= n)
            return false;
        *out = (uint32_t)b->next_id++;
        return true;
    }
    if (!b->filled) {
        while (b->count < b->cap && b->next_id < n)
            b->buf[b->count++] = (uint32_t)b->next_id++;
        b->filled = true;
    }
    if (b->count == 0)
        return false;
    int64_t j = (int64_t)dt_rng_below(&b->rng, (uint64_t)b->count);
    *out = b->buf[j];
    if (b->next_id < n)
        b->buf[j] = (uint32_t)b->next_id++;
    else
        b->buf[j] = b->buf[--b->count];
    return true;
}

/* One batch of indices: batch_size of them, or the last ones short (unless dropped). */
static int next_batch_ids(image_batches *b)
{
    if (b->done)
        return 0;
    int got = 0;
    while (got < b->batch_size && next_index(b, &b->ids[got]))
        got++;
    if (got < b->batch_size) {
        b->done = true;
        if (b->drop_remainder)
            return 0;
    }
    return got;
}

/* The images of this pipeline's block of the next batch, scaled to [0, 1], with their class
 * labels. A block may be empty (a short last batch over many workers): the element then has no
 * rows, and the step still happens on every worker. */
static dt_status image_batches_next(dt_dataset *ds, dt_elem **out)
{
    image_batches *b = ds->state;
    int got = next_batch_ids(b);
    if (got == 0)
        return DT_END;
    size_t first, rows;
    dt_comm_block((size_t)got, b->n_slices, b->slice, &first, &rows);
    int item = b->ds->h * b->ds->w * b->ds->c;
    dt_elem *e = dt_elem_alloc((int)rows, item, 0, 0);
    if (!e)
        return dt_error(DT_ERR_NOMEM, "no memory for a batch of %zu images", rows);
    dt_gather_batch(b->ds, b->ids + first, (int)rows, e->dense, b->labels);
    for (size_t r = 0; r < rows; r++)
        e->labels[r] = (float)b->labels[r];
    /* As the chained datasets number it: the batch's first index, plus the block's offset. */
    e->index = b->ids[0] + first;
    *out = e;
    return DT_OK;
}

/* Each iteration reshuffles: its own random stream, derived from the seed and the iteration as
 * the shuffle dataset derives it. */
static void image_batches_seed(dt_dataset *ds)
{
    image_batches *b = ds->state;
    dt_rng_derive(&b->rng, b->seed, 0x5348554646ull /* "SHUFF" */, ds->iteration);
}

static dt_status image_batches_reset(dt_dataset *ds)
{
    image_batches *b = ds->state;
    b->count = b->next_id = 0;
    b->filled = b->done = false;
    image_batches_seed(ds);
    return DT_OK;
}

static void image_batches_destroy(dt_dataset *ds)
{
    image_batches *b = ds->state;
    if (!b)
        return;
    free(b->buf);
    free(b->ids);
    free(b->labels);
    free(b);
}

static const dt_dataset_ops image_batches_ops = {"image_pipeline", image_batches_next,
                                                 image_batches_reset, image_batches_destroy};

dt_status dt_image_pipeline_sharded(const dt_image_dataset *ds, int batch_size,
                                    bool drop_remainder, int64_t shuffle_buffer, uint64_t seed,
                                    int prefetch, int n_workers, int worker, dt_dataset **out)
{
    *out = NULL;
    if (n_workers < 1 || worker < 0 || worker >= n_workers)
        return dt_error(DT_ERR_INVALID, "worker %d of %d", worker, n_workers);
    if (batch_size < 1 || batch_size > (1 << 24))
        return dt_error(DT_ERR_INVALID, "batch: size %d is not in 1..2^24", batch_size);
    image_batches *b = calloc(1, sizeof *b);
    if (!b)
        return dt_error(DT_ERR_NOMEM, "no memory for an image pipeline");
    *b = (image_batches){.ds = ds, .n_slices = n_workers, .slice = worker,
                         .batch_size = batch_size, .drop_remainder = drop_remainder,
                         .shuffled = shuffle_buffer > 1, .seed = seed,
                         .cap = shuffle_buffer < ds->n ? shuffle_buffer : ds->n};
    b->buf = b->shuffled ? malloc((size_t)(b->cap > 0 ? b->cap : 1) * sizeof *b->buf) : NULL;
    b->ids = malloc((size_t)batch_size * sizeof *b->ids);
    b->labels = malloc((size_t)batch_size * sizeof *b->labels);
    dt_dataset *p = NULL;
    dt_status st;
    if ((b->shuffled && !b->buf) || !b->ids || !b->labels) {
        dt_dataset tmp = {.state = b};
        image_batches_destroy(&tmp);
        return dt_error(DT_ERR_NOMEM, "no memory for an image pipeline of batch %d", batch_size);
    }
    if ((st = dt_dataset_create(&image_batches_ops, NULL, b, &p)))
        return st;
    image_batches_seed(p);
    if (prefetch > 0 && (st = dt_dataset_prefetch(p, prefetch, &p)))
        return st;
    *out = p;
    return DT_OK;
}

dt_status dt_image_pipeline(const dt_image_dataset *ds, int batch_size, bool drop_remainder,
                            int64_t shuffle_buffer, uint64_t seed, int prefetch, dt_dataset **out)
{
    return dt_image_pipeline_sharded(ds, batch_size, drop_remainder, shuffle_buffer, seed,
                                     prefetch, 1, 0, out);
}

/* ---- Evaluation ---- */

/* Labels of a batch as class indices, checked against the model's outputs. */
static dt_status batch_labels(const dt_model *m, const dt_elem *e, int32_t *labels)
{
    int K = dt_model_num_outputs(m), limit = K == 1 ? 2 : K;
    for (int r = 0; r < e->n; r++) {
        float v = e->labels[r];
        if (!(v >= 0.0f && v < (float)limit) || v != (float)(int32_t)v)
            return dt_error(DT_ERR_INVALID, "row %llu of the input: label %g, but the model takes "
                            "classes 0..%d", (unsigned long long)(e->index + (uint64_t)r), v,
                            limit - 1);
        labels[r] = (int32_t)v;
    }
    return DT_OK;
}

static dt_status check_batch(const dt_model *m, const dt_elem *e)
{
    if ((size_t)e->n_dense != dt_model_input_elems(m))
        return dt_error(DT_ERR_INVALID, "the input gives %d values per example, model %s takes "
                        "%zu", e->n_dense, dt_model_spec_of(m)->name, dt_model_input_elems(m));
    if (e->n > dt_model_max_batch(m))
        return dt_error(DT_ERR_INVALID, "a batch of %d examples exceeds the model's maximum batch "
                        "%d", e->n, dt_model_max_batch(m));
    return DT_OK;
}

dt_status dt_evaluate_dataset(dt_model *m, dt_dataset *batches, double *loss, double *accuracy)
{
    return dt_evaluate_batches(m, batches, 0, loss, accuracy);
}

dt_status dt_evaluate_batches(dt_model *m, dt_dataset *batches, int64_t max_batches, double *loss,
                              double *accuracy)
{
    int32_t *labels = malloc((size_t)dt_model_max_batch(m) * sizeof *labels);
    if (!labels)
        return dt_error(DT_ERR_NOMEM, "no memory for evaluation");
    double loss_sum = 0.0;
    int64_t correct = 0, seen = 0;
    dt_status st = DT_OK;
    for (int64_t b = 0; max_batches <= 0 || b < max_batches; b++) {
        dt_elem *e;
        st = dt_dataset_next(batches, &e);
        if (st == DT_END) {
            st = DT_OK;
            break;
        }
        if (st)
            break;
        if ((st = check_batch(m, e)) || (st = batch_labels(m, e, labels))) {
            dt_elem_free(e);
            break;
        }
        dt_model_forward(m, e->n, e->dense, false);
        int c = 0;
        loss_sum += dt_model_loss(m, e->n, labels, 0.0f, false, &c);
        correct += c;
        seen += e->n;
        dt_elem_free(e);
    }
    free(labels);
    if (st == DT_OK && seen == 0)
        st = dt_error(DT_ERR_INVALID, "evaluation: the input has no examples");
    if (st == DT_OK) {
        *loss = loss_sum / (double)seen;
        *accuracy = (double)correct / (double)seen;
    }
    return st;
}

dt_status dt_evaluate(dt_model *m, const dt_image_dataset *ds, double *loss, double *accuracy)
{
    dt_status st = dt_check_dataset(m, ds);
    if (st)
        return st;
    dt_dataset *p;
    if ((st = dt_image_pipeline(ds, dt_model_max_batch(m), false, 0, 0, 0, &p)))
        return st;
    st = dt_evaluate_dataset(m, p, loss, accuracy);
    dt_dataset_destroy(p);
    return st;
}

/* ---- Training ---- */

static bool distributed(const dt_fit_config *cfg) { return cfg->comm && cfg->comm->size > 1; }

/* A step's figures: on entry this worker's, on return summed over the workers. */
typedef struct {
    double loss;       /* the batch's summed loss */
    int64_t correct;   /* its correct predictions */
    int64_t rows;      /* its examples */
    bool ended;        /* this worker's data ended; on return: some worker's did (or the batch
                        * is empty everywhere), and the step was not taken */
    bool state_wanted; /* this worker needs the optimizer state whole after the step (to save
                        * it); on return: some worker does */
} step_sums;

/* The owner's part of a sharded step (dt_comm_allreduce_update): the summed gradients, scaled
 * again when the batch was not the size they were scaled for, then the optimizer. */
typedef struct {
    dt_optim *o;
    dt_pool *pool;
    float *params, *grads;
    float rescale;
    bool streaming;  /* the parameters are shared and go back with streaming stores */
    double seconds;  /* time spent updating, summed */
} owned_update;

/* Shared parameters, when stores stream (store_choice.h), are updated in a private copy of each
 * slice, which goes back with streaming stores. Small enough to stay in the first-level cache. */
#define PRIVATE_SLICE 2048

static void update_streaming(owned_update *u, size_t lo, size_t hi, const float *grads_lo)
{
    float slice[PRIVATE_SLICE];
    for (size_t at = lo; at < hi; at += PRIVATE_SLICE) {
        size_t k = hi - at < PRIVATE_SLICE ? hi - at : PRIVATE_SLICE;
        memcpy(slice, u->params + at, k * sizeof *slice);
        dt_optim_update_slice(u->o, NULL, slice, grads_lo + (at - lo), at, at + k);
        dt_stream_copy(u->params + at, slice, k);
    }
}

static void update_owned(void *ctx, size_t lo, size_t hi, const float *sum)
{
    owned_update *u = ctx;
    double t0 = dt_clock_now();
    const float *g = sum;
    if (u->rescale != 1.0f) {
        /* The sums are the communicator's: scaled into this rank's own gradients. */
        for (size_t i = lo; i < hi; i++)
            u->grads[i] = sum[i - lo] * u->rescale;
        g = u->grads + lo;
    }
    if (u->streaming)
        update_streaming(u, lo, hi, g);
    else
        dt_optim_update_range(u->o, u->pool, u->params, g, lo, hi);
    u->seconds += dt_clock_now() - t0;
}

/* Workers share their gradients by plain all-reduce and every one updates every parameter, or
 * with the update sharded (each updates what it owns, then they share the parameters): sharded
 * unless gradients travel in buckets during backward, the variables are central, or the wire
 * rounds gradients (which the sharded step does not). */
static bool sharded_update(const dt_fit_config *cfg, const dt_gradsync *gs)
{
    return distributed(cfg) && !gs && !cfg->central_storage && cfg->wire == DT_WIRE_F32;
}

/* Whether the workers learn the global batch with the step's sums, after backward, rather than
 * agreeing on it before the step (an extra wait for each other every step). Buckets need it
 * before: their all-reduces start during backward. */
static bool agrees_with_sums(const dt_fit_config *cfg, const dt_gradsync *gs)
{
    return distributed(cfg) && !gs;
}

/* Every rank's optimizer slots made whole, before a checkpoint, when the update is sharded. */
static dt_status share_optimizer_state(const dt_fit_config *cfg, const dt_gradsync *gs,
                                       dt_optim *o, size_t n_params)
{
    if (!sharded_update(cfg, gs))
        return DT_OK;
    for (int k = 0; k < o->n_slots; k++) {
        dt_status st = dt_comm_share_owned(cfg->comm, o->state.data + (size_t)k * n_params,
                                           n_params);
        if (st)
            return dt_error_prefix(st, "sharing the optimizer's state");
    }
    return DT_OK;
}

/* The step's figures summed over the workers (rows too, unless agreed on before the step). */
static dt_status sum_figures(const dt_fit_config *cfg, int64_t step, bool with_rows,
                             step_sums *s)
{
    float v[5] = {(float)s->loss, (float)s->correct, with_rows ? (float)s->rows : 0.0f,
                  s->ended ? 1.0f : 0.0f, s->state_wanted ? 1.0f : 0.0f};
    dt_status st = dt_comm_allreduce(cfg->comm, v, 5, DT_REDUCE_SUM, DT_WIRE_F32);
    if (st)
        return dt_error_prefix(st, "step %lld", (long long)step);
    s->loss = v[0];
    s->correct = (int64_t)v[1];
    if (with_rows)
        s->rows = (int64_t)v[2];
    s->ended = v[3] > 0.0f || s->rows == 0;
    s->state_wanted = v[4] > 0.0f;
    if (!s->ended && !isfinite(s->loss))
        return dt_error(DT_ERR_NUMERIC, "step %lld: the loss is %g: training diverged (try a "
                        "lower --lr)", (long long)step, s->loss);
    return DT_OK;
}

/* The gradients (scaled by 1 / scaled_rows, so their sum is the batch's mean when the batch has
 * that many rows) summed over the workers, and the update, sharded or not. The step's figures
 * are summed first: a diverged worker's NaN travels in the loss, so every worker stops at the
 * same step, before any update, and a worker whose data ended stops them all before it. With
 * buckets, already on their way, the figures come after them. */
static dt_status sync_and_update(dt_model *m, dt_optim *o, dt_pool *pool, const dt_fit_config *cfg,
                                 dt_gradsync *gs, dt_store_choice *stores, int64_t step,
                                 int64_t scaled_rows, step_sums *s, double *comm_seconds)
{
    dt_arena *params = dt_model_params(m), *grads = dt_model_grads(m);
    double t0 = dt_clock_now();
    dt_status st;
    if (gs && (st = dt_gradsync_finish(gs)))
        return dt_error_prefix(st, "step %lld", (long long)step);
    if ((st = sum_figures(cfg, step, agrees_with_sums(cfg, gs), s)))
        return st;
    if (s->ended) {
        *comm_seconds += dt_clock_now() - t0;
        return DT_OK;
    }
    /* A short batch (the last of an epoch): the sums are scaled to its own mean. */
    float rescale = cfg->reduction == DT_REDUCTION_MEAN && s->rows != scaled_rows
                        ? (float)scaled_rows / (float)s->rows
                        : 1.0f;
    if (sharded_update(cfg, gs)) {
        owned_update u = {o, pool, params->data, grads->data, rescale, stores && stores->now,
                          0.0};
        st = dt_comm_allreduce_update(cfg->comm, grads->data, params->data, params->n_elems,
                                      update_owned, &u);
        if (st == DT_OK && stores)
            dt_store_choice_record(stores, u.seconds);
    } else if (!gs) {
        st = dt_comm_allreduce(cfg->comm, grads->data, grads->n_elems, DT_REDUCE_SUM,
                               (dt_wire_dtype)cfg->wire);
        for (size_t i = 0; st == DT_OK && rescale != 1.0f && i < grads->n_elems; i++)
            grads->data[i] *= rescale;
    }
    if (st)
        return dt_error_prefix(st, "step %lld", (long long)step);
    *comm_seconds += dt_clock_now() - t0;
    if (sharded_update(cfg, gs)) {
        dt_optim_count_step(o);
        return s->state_wanted ? share_optimizer_state(cfg, gs, o, params->n_elems) : DT_OK;
    }
    if (!cfg->central_storage) {
        dt_optim_step(o, pool, params->data, grads->data, params->n_elems);
        return DT_OK;
    }
    /* One copy of the variables: rank 0 updates it, and no replica computes the next step
     * before the update is done. */
    if (cfg->comm->rank == 0)
        dt_optim_step(o, pool, params->data, grads->data, params->n_elems);
    if ((st = dt_comm_barrier(cfg->comm)))
        return dt_error_prefix(st, "step %lld", (long long)step);
    return DT_OK;
}

/* One synchronous step on the batch e: NULL when this worker's data has ended, or no rows on a
 * worker whose share of a short last batch is empty. s holds the step's figures (see
 * step_sums): s->rows on entry is the global batch when the workers agreed on it before the
 * step, else this worker's rows. When s->ended on return, the step was not taken. */
static dt_status train_step(dt_model *m, dt_optim *o, dt_pool *pool, const dt_fit_config *cfg,
                            dt_gradsync *gs, dt_store_choice *stores, const dt_elem *e,
                            const int32_t *labels, int64_t step, step_sums *s,
                            double *comm_seconds)
{
    /* The gradient averages over the global batch. Learned with the sums, its size is taken to
     * be the configured one, as it is but for an epoch's short last batch. */
    int64_t scaled_rows = agrees_with_sums(cfg, gs) ? cfg->batch_size : s->rows;
    float scale = 1.0f / (float)(cfg->reduction == DT_REDUCTION_MEAN ? scaled_rows
                                                                      : cfg->batch_size);
    double loss = 0.0;
    int correct = 0;
    uint64_t dropout_at = dt_model_dropout_position(m);
    if (stores)
        dt_store_choice_for_step(stores);
    if (stores && stores->now) /* other workers read these gradients (store_choice.h) */
        dt_stream_zero(dt_model_grads(m)->data, dt_model_grads(m)->n_elems);
    else
        dt_model_zero_grads(m);
    if (gs)
        dt_gradsync_begin(gs);
    if (e && e->n > 0) {
        dt_model_forward(m, e->n, e->dense, true);
        loss = dt_model_loss(m, e->n, labels, scale, true, &correct);
        if (isfinite(loss))
            dt_model_backward(m, e->n);
    } else if (e) {
        /* An empty share of a short batch still counts as a training forward: every rank's
         * dropout sequence stays at rank 0's, which is the one a checkpoint saves. */
        dt_model_set_dropout_position(m, dt_model_dropout_position(m) + 1);
    }
    s->loss = loss;
    s->correct = correct;
    if (!distributed(cfg)) {
        if (!isfinite(loss))
            return dt_error(DT_ERR_NUMERIC, "step %lld: the loss is %g: training diverged (try "
                            "a lower --lr)", (long long)step, loss);
        dt_arena *params = dt_model_params(m), *grads = dt_model_grads(m);
        dt_optim_step(o, pool, params->data, grads->data, params->n_elems);
        return DT_OK;
    }
    dt_status st = sync_and_update(m, o, pool, cfg, gs, stores, step, scaled_rows, s,
                                   comm_seconds);
    if (st == DT_OK && s->ended)
        dt_model_set_dropout_position(m, dropout_at); /* the step is not taken */
    return st;
}

/* Before each step the workers agree on the global batch (the sum of their rows) and on whether
 * the epoch goes on: it ends for all as soon as one worker's data does, so shards that differ by
 * a batch never leave a worker waiting. */
static dt_status agree_on_step(const dt_fit_config *cfg, const dt_elem *e, int64_t *global_rows,
                               bool *go_on, double *comm_seconds)
{
    *global_rows = e ? e->n : 0;
    *go_on = e != NULL;
    if (!distributed(cfg))
        return DT_OK;
    float v[2] = {e ? (float)e->n : 0.0f, e ? 0.0f : 1.0f};
    double t0 = dt_clock_now();
    dt_status st = dt_comm_allreduce(cfg->comm, v, 2, DT_REDUCE_SUM, DT_WIRE_F32);
    if (st)
        return st;
    *comm_seconds += dt_clock_now() - t0;
    *global_rows = (int64_t)v[0];
    *go_on = v[1] == 0.0f && v[0] > 0.0f;
    return DT_OK;
}

/* Keras's EarlyStopping (mode min) at an epoch's end. Only the chief may have validated, so
 * across workers its decision is broadcast: every worker stops after the same epoch. */
static dt_status early_stop(const dt_fit_config *cfg, double current, double *best, int *waited,
                            bool *stop)
{
    if (current < *best - cfg->early_stopping_min_delta) {
        *best = current;
        *waited = 0;
    } else {
        ++*waited;
    }
    float decision = *waited >= cfg->early_stopping_patience ? 1.0f : 0.0f;
    if (distributed(cfg)) {
        dt_status st = dt_comm_broadcast(cfg->comm, &decision, sizeof decision, 0);
        if (st)
            return dt_error_prefix(st, "early stopping");
    }
    *stop = decision != 0.0f;
    return DT_OK;
}

/* Estimator's training log at global step `step` (counted from 0, as its hooks do): the loss,
 * and from the second line on the rate and time since the last. */
static void log_like_estimator(FILE *out, int64_t step, double loss, const dt_fit_config *cfg,
                               double *t0)
{
    double now = dt_clock_now(), dt = now - *t0;
    if (step == 0) {
        fprintf(out, "loss = %.6g, step = 0\n", loss);
    } else {
        fprintf(out, "global_step/sec: %.6g\n", (double)cfg->log_step_count_steps / dt);
        fprintf(out, "loss = %.6g, step = %lld (%.3f sec)\n", loss, (long long)step, dt);
    }
    fflush(out);
    *t0 = now;
}

static bool evaluates_periodically(const dt_fit_config *cfg, const dt_dataset *test)
{
    return test && (cfg->eval_every_steps > 0 || cfg->eval_throttle_secs > 0.0);
}

/* Whether an evaluation is due after global step `step` (counted from 1), `elapsed` seconds of
 * training in and `since_last` seconds after the previous evaluation (or the start). */
static bool evaluation_due(const dt_fit_config *cfg, int64_t step, double elapsed,
                           double since_last)
{
    if (elapsed < cfg->eval_start_delay_secs)
        return false;
    if (cfg->eval_every_steps > 0 && step % cfg->eval_every_steps == 0)
        return true;
    return cfg->eval_throttle_secs > 0.0 && since_last >= cfg->eval_throttle_secs;
}

/* One evaluation of train_and_evaluate, reported as Estimator reports it. */
static dt_status periodic_evaluation(dt_model *m, dt_dataset *test, const dt_fit_config *cfg,
                                     int64_t step, dt_fit_result *r)
{
    double t0 = dt_clock_now();
    dt_status st = dt_dataset_reset(test);
    if (st || (st = dt_evaluate_batches(m, test, cfg->eval_steps, &r->val_loss,
                                        &r->val_accuracy)))
        return dt_error_prefix(st, "evaluation at global step %lld", (long long)step);
    r->validated = true;
    r->evaluations++;
    r->eval_step = step;
    r->eval_seconds += dt_clock_now() - t0;
    if (cfg->progress) {
        fprintf(cfg->progress, "Saving dict for global step %lld: global_step = %lld, "
                "loss = %.7g, accuracy = %.7g\n", (long long)step, (long long)step, r->val_loss,
                r->val_accuracy);
        fflush(cfg->progress);
    }
    return DT_OK;
}

int64_t dt_fit_batches_per_epoch(const dt_fit_config *cfg, int64_t n_examples)
{
    int64_t b = cfg->batch_size;
    return cfg->keep_remainder ? (n_examples + b - 1) / b : n_examples / b;
}

dt_status dt_fit_check(const dt_fit_config *cfg, int64_t n_examples)
{
    if (cfg->epochs < 1)
        return dt_error(DT_ERR_INVALID, "epochs: must be at least 1, got %d", cfg->epochs);
    if (cfg->batch_size < 1)
        return dt_error(DT_ERR_INVALID, "batch_size: must be at least 1, got %d", cfg->batch_size);
    if (cfg->steps_per_epoch < 0 || cfg->max_steps < 0 || cfg->shuffle_buffer < 0 ||
        cfg->prefetch < 0)
        return dt_error(DT_ERR_INVALID, "steps_per_epoch, max_steps, shuffle_buffer and prefetch "
                        "must not be negative");
    if (cfg->eval_every_steps < 0 || cfg->eval_steps < 0 || !(cfg->eval_throttle_secs >= 0.0) ||
        !(cfg->eval_start_delay_secs >= 0.0))
        return dt_error(DT_ERR_INVALID, "eval_every_steps, eval_steps, eval_throttle_secs and "
                        "eval_start_delay_secs must not be negative");
    if (n_examples >= 0 && !cfg->keep_remainder && n_examples < cfg->batch_size)
        return dt_error(DT_ERR_INVALID, "%lld examples make no full batch of %d (keep the "
                        "remainder or lower the batch size)", (long long)n_examples,
                        cfg->batch_size);
    return DT_OK;
}

/* Brings a fresh dataset to where pos says the interrupted run was: the start of iteration
 * pos->epoch (each earlier iteration begun with one element, then reset, so every transformation
 * derives that iteration's order, a shuffle's included), then pos->in_epoch elements in. */
static dt_status seek_input(dt_dataset *ds, const dt_fit_position *pos)
{
    dt_status st = DT_OK;
    for (int64_t e = 0; e < pos->epoch && st == DT_OK; e++) {
        dt_elem *x = NULL;
        st = dt_dataset_next(ds, &x);
        dt_elem_free(x);
        if (st == DT_OK || st == DT_END)
            st = dt_dataset_reset(ds);
    }
    for (int64_t i = 0; i < pos->in_epoch && st == DT_OK; i++) {
        dt_elem *x = NULL;
        st = dt_dataset_next(ds, &x);
        dt_elem_free(x);
    }
    if (st == DT_END)
        st = dt_error(DT_ERR_INVALID, "resuming: the input ended before epoch %lld, batch %lld, "
                      "where the checkpoint stopped: is it the same data?",
                      (long long)pos->epoch + 1, (long long)pos->in_epoch);
    return st;
}

/* Evaluation at the end of an epoch (Keras's validation_data). */
static dt_status validate_epoch(dt_model *m, dt_dataset *test, dt_fit_ckpt *k, int64_t step,
                                dt_fit_result *result, char *extra, size_t extra_cap)
{
    dt_status st;
    if ((st = dt_dataset_reset(test)) ||
        (st = dt_evaluate_dataset(m, test, &result->val_loss, &result->val_accuracy)) ||
        (st = dt_fit_ckpt_eval_summary(k, step, result->val_loss, result->val_accuracy)))
        return st;
    result->validated = true;
    snprintf(extra, extra_cap, " - val_loss: %.4f - val_accuracy: %.4f", result->val_loss,
             result->val_accuracy);
    return DT_OK;
}

/* The steps an epoch runs to (a count from its start; 0: until its data ends). */
static int64_t epoch_limit(const dt_fit_config *cfg, const dt_fit_position *pos)
{
    int64_t limit = cfg->steps_per_epoch;
    if (cfg->max_steps > 0) {
        int64_t rem = pos->in_epoch + cfg->max_steps - pos->step;
        if (limit == 0 || rem < limit)
            limit = rem;
    }
    return limit;
}

/* Time spent on evaluations and checkpoints, which training time leaves out. */
static double side_seconds(const dt_fit_result *r) { return r->eval_seconds + r->checkpoint_seconds; }

dt_status dt_fit_dataset(dt_model *m, dt_optim *o, dt_pool *pool, dt_dataset *train,
                         dt_dataset *test, const dt_fit_config *cfg, dt_fit_result *result)
{
    memset(result, 0, sizeof *result);
    dt_status st = dt_fit_check(cfg, -1);
    if (st)
        return st;
    int32_t *labels = malloc((size_t)dt_model_max_batch(m) * sizeof *labels);
    if (!labels)
        return dt_error(DT_ERR_NOMEM, "no memory for training");
    dt_model_set_dropout_seed(m, cfg->seed);
    dt_gradsync *gs = NULL;
    dt_fit_ckpt ck;
    bool completed = false, shared_storage = false;
    dt_store_choice stores = {0};
    if ((st = dt_fit_ckpt_open(&ck, cfg)))
        goto fail;
    if (distributed(cfg)) {
        /* Every worker starts from the chief's parameters, as TF's strategies and DDP do. */
        dt_arena *params = dt_model_params(m), *grads = dt_model_grads(m);
        if (!cfg->central_storage &&
            (st = dt_comm_broadcast(cfg->comm, params->data, params->n_elems * sizeof(float), 0))) {
            dt_error_prefix(st, "broadcasting the initial parameters");
            goto fail;
        }
        if (cfg->bucket_bytes > 0) {
            size_t first = cfg->bucket_bytes < ((size_t)1 << 20) ? cfg->bucket_bytes : (size_t)1 << 20;
            if ((st = dt_gradsync_create(cfg->comm, grads->data, grads->n_elems, first,
                                         cfg->bucket_bytes, (dt_wire_dtype)cfg->wire, &gs)))
                goto fail;
            dt_model_set_grad_hook(m, dt_gradsync_ready, gs);
        }
    }
    dt_fit_position pos = {.best = INFINITY};
    bool resumed = false;
    if ((st = dt_fit_ckpt_restore(&ck, cfg, m, o, &pos, &resumed)))
        goto fail;
    if (resumed) {
        result->resumed_step = pos.step;
        if ((st = seek_input(train, &pos)))
            goto fail;
    }
    /* Workers on one host keep one shared copy of the parameters and read each other's
     * gradients where they are: the sharded update then copies nothing. From the chief's
     * parameters, which every worker holds by now (broadcast, or restored and broadcast). */
    if (sharded_update(cfg, gs)) {
        dt_arena *params = dt_model_params(m), *grads = dt_model_grads(m);
        float *shared_params, *shared_grads;
        if ((st = dt_comm_share_tensors(cfg->comm, params->data, params->n_elems, grads->n_elems,
                                        &shared_params, &shared_grads))) {
            dt_error_prefix(st, "sharing the parameters");
            goto fail;
        }
        if (shared_params) {
            dt_model_use_storage(m, shared_params, shared_grads);
            shared_storage = true;
        }
    }
    bool positioned = resumed; /* the first epoch's input is where the checkpoint left it */
    dt_progress prog;
    FILE *keras = cfg->log_step_count_steps > 0 ? NULL : cfg->progress; /* one style or other */
    FILE *estimator = cfg->log_step_count_steps > 0 ? cfg->progress : NULL;
    double log_t0 = dt_clock_now();
    if (keras)
        dt_progress_init(&prog, keras, cfg->progress_bar);
    bool periodic = evaluates_periodically(cfg, test);
    double train_t0 = dt_clock_now(), last_eval_t = train_t0;
    for (; pos.epoch < cfg->epochs; pos.epoch++) {
        if (cfg->max_steps > 0 && pos.step >= cfg->max_steps)
            break;
        if (!positioned) {
            if (pos.epoch > 0 && (st = dt_dataset_reset(train)))
                goto fail;
            pos.in_epoch = pos.epoch_correct = pos.epoch_samples = 0;
            pos.epoch_loss = 0.0;
        }
        positioned = false;
        int64_t limit = epoch_limit(cfg, &pos);
        if (keras)
            dt_progress_epoch_begin(&prog, (int)pos.epoch + 1, cfg->epochs,
                                    limit > 0 ? limit : cfg->expected_steps_per_epoch);
        result->epochs = (int)pos.epoch + 1;
        double t0 = dt_clock_now(), side0 = side_seconds(result);
        for (; limit == 0 || pos.in_epoch < limit; pos.in_epoch++) {
            dt_elem *e = NULL;
            st = dt_dataset_next(train, &e);
            if (st != DT_OK && st != DT_END)
                goto fail;
            if (st == DT_END)
                e = NULL;
            step_sums sums = {.rows = e ? e->n : 0, .ended = e == NULL,
                              .state_wanted = dt_fit_ckpt_saves_after(&ck, cfg, pos.step + 1)};
            if (!agrees_with_sums(cfg, gs)) {
                int64_t rows;
                bool go_on;
                if ((st = agree_on_step(cfg, e, &rows, &go_on, &result->comm_seconds))) {
                    dt_elem_free(e);
                    goto fail;
                }
                if (!go_on) {
                    dt_elem_free(e); /* another worker's data ended: not trained on */
                    break;
                }
                sums.rows = rows;
            }
            if ((e && ((st = check_batch(m, e)) || (st = batch_labels(m, e, labels)))) ||
                (st = train_step(m, o, pool, cfg, gs, shared_storage ? &stores : NULL, e,
                                 labels, pos.step, &sums,
                                 &result->comm_seconds))) {
                dt_elem_free(e);
                goto fail;
            }
            if (sums.ended) {
                dt_elem_free(e); /* some worker's data ended: the batch was not trained on */
                break;
            }
            double loss_sum = sums.loss;
            int64_t correct = sums.correct, rows = sums.rows;
            dt_elem_free(e);
            pos.step++;
            pos.epoch_loss += loss_sum;
            pos.epoch_correct += correct;
            pos.epoch_samples += rows;
            result->samples += rows;
            double batch_loss = loss_sum / (double)rows, batch_acc = (double)correct / rows;
            if (estimator && (pos.step == 1 || (pos.step - 1) % cfg->log_step_count_steps == 0))
                log_like_estimator(estimator, pos.step - 1, batch_loss, cfg, &log_t0);
            if (keras)
                dt_progress_step(&prog, pos.in_epoch + 1, pos.epoch_loss / pos.epoch_samples,
                                 (double)pos.epoch_correct / pos.epoch_samples);
            double now = dt_clock_now();
            if (periodic && evaluation_due(cfg, pos.step, now - train_t0 - side_seconds(result),
                                           now - last_eval_t)) {
                if ((st = periodic_evaluation(m, test, cfg, pos.step, result)) ||
                    (st = dt_fit_ckpt_eval_summary(&ck, pos.step, result->val_loss,
                                                   result->val_accuracy)))
                    goto fail;
                last_eval_t = dt_clock_now();
            }
            dt_fit_position after = pos;
            after.in_epoch++;
            if ((st = dt_fit_ckpt_after_step(&ck, cfg, m, o, &after, batch_loss, batch_acc,
                                             result)))
                goto fail;
        }
        st = DT_OK;
        /* Evaluations and checkpoints are not training time. */
        result->train_seconds += dt_clock_now() - t0 - (side_seconds(result) - side0);
        if (pos.epoch_samples == 0) {
            st = dt_error(DT_ERR_INVALID, "epoch %lld: the input gave no batch",
                          (long long)pos.epoch + 1);
            goto fail;
        }
        /* max_steps may end training inside an epoch: the position stays there, so a run
         * resumed from the final checkpoint with more steps goes on as one that never stopped. */
        bool cut = cfg->max_steps > 0 && pos.step >= cfg->max_steps;
        result->steps = pos.step;
        result->final_loss = pos.epoch_loss / pos.epoch_samples;
        result->final_accuracy = (double)pos.epoch_correct / pos.epoch_samples;
        char extra[128] = "";
        bool validated = cfg->validate && test;
        if (validated && (st = validate_epoch(m, test, &ck, pos.step, result, extra, sizeof extra)))
            goto fail;
        if (keras)
            dt_progress_epoch_end(&prog, pos.in_epoch, result->final_loss,
                                  result->final_accuracy, extra);
        /* An epoch cut short by max_steps is not judged: training ends there, and a run resumed
         * from it must judge the whole epoch once. The monitored loss is this epoch's own
         * (a periodic evaluation's would not be in a checkpoint). */
        if (cfg->early_stopping_patience > 0 && !cut) {
            bool stop = false;
            int waited = (int)pos.waited;
            double current = validated ? result->val_loss : result->final_loss;
            if ((st = early_stop(cfg, current, &pos.best, &waited, &stop)))
                goto fail;
            pos.waited = waited;
            if (stop) {
                result->stopped_early = true;
                if (cfg->progress)
                    fprintf(cfg->progress, "Epoch %lld: early stopping\n", (long long)pos.epoch + 1);
                break;
            }
        }
        if (cut)
            break;
        pos.samples += pos.epoch_samples;
        dt_fit_position next = pos;
        next.epoch++;
        next.in_epoch = next.epoch_correct = next.epoch_samples = 0;
        next.epoch_loss = 0.0;
        if ((st = share_optimizer_state(cfg, gs, o, dt_model_params(m)->n_elems)) ||
            (st = dt_fit_ckpt_after_epoch(&ck, cfg, m, o, &next, result)))
            goto fail;
        pos = next;
        pos.epoch--; /* the loop's increment moves it on */
    }
    result->steps = pos.step;
    /* As Estimator, the last step is always evaluated, and saved. */
    if (periodic && result->eval_step != pos.step &&
        ((st = periodic_evaluation(m, test, cfg, pos.step, result)) ||
         (st = dt_fit_ckpt_eval_summary(&ck, pos.step, result->val_loss, result->val_accuracy))))
        goto fail;
    if ((st = share_optimizer_state(cfg, gs, o, dt_model_params(m)->n_elems)) ||
        (st = dt_fit_ckpt_final(&ck, cfg, m, o, &pos, result)))
        goto fail;
    completed = true;
fail:
    if (shared_storage)
        dt_model_use_storage(m, NULL, NULL); /* the parameters back in the model's own storage */
    if (gs) {
        dt_model_set_grad_hook(m, NULL, NULL);
        dt_gradsync_destroy(gs);
    }
    free(labels);
    dt_status close_st = dt_fit_ckpt_close(&ck, completed && st == DT_OK);
    return st ? st : close_st;
}

dt_status dt_train_and_evaluate(dt_model *m, dt_optim *o, dt_pool *pool, dt_dataset *train,
                                dt_dataset *eval, const dt_fit_config *cfg, dt_fit_result *result)
{
    memset(result, 0, sizeof *result);
    if (cfg->max_steps <= 0)
        return dt_error(DT_ERR_INVALID, "train_and_evaluate: max_steps must be set (> 0)");
    dt_fit_config c = *cfg;
    c.epochs = INT32_MAX; /* Estimator's input repeats: training ends at max_steps */
    c.validate = false;
    c.early_stopping_patience = 0;
    if (c.log_step_count_steps <= 0)
        c.log_step_count_steps = 100;
    return dt_fit_dataset(m, o, pool, train, eval, &c, result);
}

dt_status dt_fit(dt_model *m, dt_optim *o, dt_pool *pool, const dt_image_dataset *train,
                 const dt_image_dataset *test, const dt_fit_config *cfg, dt_fit_result *result)
{
    memset(result, 0, sizeof *result);
    dt_dataset *train_p = NULL, *test_p = NULL;
    dt_status st = dt_check_dataset(m, train);
    if (st == DT_OK && test)
        st = dt_check_dataset(m, test);
    if (st == DT_OK)
        st = dt_fit_check(cfg, train->n);
    if (st)
        return st;
    int largest = cfg->batch_size < train->n ? cfg->batch_size : train->n;
    if (largest > dt_model_max_batch(m))
        return dt_error(DT_ERR_INVALID, "batches of %d exceed the model's maximum batch %d",
                        largest, dt_model_max_batch(m));
    dt_fit_config c = *cfg;
    c.expected_steps_per_epoch = dt_fit_batches_per_epoch(cfg, train->n);
    if ((st = dt_image_pipeline(train, cfg->batch_size, !cfg->keep_remainder, cfg->shuffle_buffer,
                                cfg->seed, cfg->prefetch, &train_p)))
        return st;
    if (test && (st = dt_image_pipeline(test, dt_model_max_batch(m), false, 0, 0, 0, &test_p)))
        goto fail;
    st = dt_fit_dataset(m, o, pool, train_p, test_p, &c, result);
fail:
    dt_dataset_destroy(train_p);
    dt_dataset_destroy(test_p);
    return st;
}
