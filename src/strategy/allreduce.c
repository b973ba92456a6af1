/* The synchronous all-reduce step of mirrored and multi_worker_mirrored (and the parts of it
 * central_storage takes): every replica starts from the chief's variables, computes its block of
 * each global batch, and the replicas' gradients are summed (scaled by 1 / the global batch) so
 * that every replica applies the same update and their variables stay identical.
 *
 * The update is sharded where it can be (as ZeRO's first stage: each replica updates the
 * elements it owns, then they share the variables) unless gradients travel in buckets during
 * backward or are rounded on the wire. Workers on one host keep one shared copy of the variables
 * and read each other's gradients where they are, so the sharded update copies nothing. */
#include <math.h>
#include <string.h>

#include "../coll/agree.h"
#include "../core/clock.h"
#include "../core/stream.h"
#include "strategy_impl.h"

dt_status dt_allreduce_check(const dt_strategy_options *o)
{
    if ((unsigned)o->wire > DT_WIRE_F16)
        return dt_error(DT_ERR_INVALID, "wire: %d is not a wire dtype", (int)o->wire);
    if (o->bucket_bytes > ((size_t)4096 << 20))
        return dt_error(DT_ERR_INVALID, "bucket_bytes: %zu is over 4 GiB", o->bucket_bytes);
    return DT_OK;
}

/* Sharded unless buckets are on their way during backward or the wire rounds gradients (the
 * sharded step does not round). */
static bool sharded(const dt_replica *r) { return !r->gs && r->wire == DT_WIRE_F32; }

dt_status dt_allreduce_start_buckets(dt_replica *r, dt_model *m)
{
    if (r->bucket_bytes == 0)
        return DT_OK;
    dt_arena *grads = dt_model_grads(m);
    size_t first = r->bucket_bytes < ((size_t)1 << 20) ? r->bucket_bytes : (size_t)1 << 20;
    dt_status st = dt_gradsync_create(r->comm, grads->data, grads->n_elems, first,
                                      r->bucket_bytes, r->wire, &r->gs);
    if (st == DT_OK)
        dt_model_set_grad_hook(m, dt_gradsync_ready, r->gs);
    return st;
}

dt_status dt_allreduce_start(dt_replica *r, dt_model *m)
{
    /* Every replica starts from the chief's variables, as TF's strategies and DDP do. */
    dt_arena *params = dt_model_params(m);
    /* Tables need no broadcast: every replica draws each row from (seed, row) alike, and a
     * table may be gigabytes. A restore broadcasts them (dt_allreduce_restored). */
    dt_status st = dt_comm_broadcast(r->comm, params->data, params->n_elems * sizeof(float), 0);
    if (st)
        return dt_error_prefix(st, "broadcasting the initial parameters");
    return dt_allreduce_start_buckets(r, m);
}

dt_status dt_allreduce_restored(dt_replica *r, dt_model *m, dt_optim *o)
{
    dt_arena *p = dt_model_params(m);
    dt_status st;
    if ((st = dt_comm_broadcast(r->comm, p->data, p->n_elems * sizeof(float), 0)) ||
        (o->state.n_elems > 0 &&
         (st = dt_comm_broadcast(r->comm, o->state.data, o->state.n_elems * sizeof(float), 0))))
        return dt_error_prefix(st, "sharing the restored variables");
    return dt_sparse_broadcast_tables(r, m, true);
}

dt_status dt_allreduce_place(dt_replica *r, dt_model *m)
{
    if (!sharded(r))
        return DT_OK;
    /* From the chief's variables, which every replica holds by now (broadcast, or restored and
     * broadcast). */
    dt_arena *params = dt_model_params(m), *grads = dt_model_grads(m);
    float *shared_params, *shared_grads;
    dt_status st = dt_comm_share_tensors(r->comm, params->data, params->n_elems, grads->n_elems,
                                         &shared_params, &shared_grads);
    if (st)
        return dt_error_prefix(st, "sharing the parameters");
    if (shared_params) {
        dt_model_use_storage(m, shared_params, shared_grads);
        r->shared_storage = true;
    }
    return DT_OK;
}

/* Buckets start their all-reduces during backward, so the replicas agree on the global batch,
 * and on whether the epoch goes on, before the step: it ends for all as soon as one replica's
 * data does, so shards that differ by a batch never leave a replica waiting. Without buckets
 * they learn both with the step's summed figures, after backward (one wait for each other per
 * step fewer). */
static dt_status agree_before_step(dt_replica *r, dt_step *s, bool *go_on)
{
    dt_agree_msg m = {.type = DT_AGREE_BEFORE_STEP, .n_ints = 2,
                      .ints = {s->ended ? 0 : s->rows, s->ended ? 1 : 0}};
    double t0 = dt_clock_now();
    dt_status st = dt_comm_agree(r->comm, &m);
    if (st)
        return st;
    s->comm_seconds += dt_clock_now() - t0;
    s->rows = m.ints[0];
    *go_on = m.ints[1] == 0 && m.ints[0] > 0;
    return DT_OK;
}

/* Whether the replicas agree on the global batch before the step: when buckets travel during
 * backward, and when the step updates the dense variables only, its tables' rows going to the
 * ps tasks as they are, scaled for the global batch, which must then be known before backward. */
static bool agrees_before(const dt_replica *r, const dt_step *s)
{
    return r->gs || s->dense_only;
}

dt_status dt_allreduce_begin_step(dt_replica *r, dt_model *m, dt_step *s, bool *go_on)
{
    *go_on = true;
    if (agrees_before(r, s)) {
        dt_status st = agree_before_step(r, s, go_on);
        if (st || !*go_on)
            return st;
    }
    /* Learned with the sums, the global batch is taken to be the configured one, as it is but
     * for an epoch's short last batch (whose sums are scaled again). */
    s->scaled_rows = agrees_before(r, s) ? s->rows : s->batch_size;
    if (r->shared_storage)
        dt_store_choice_for_step(&r->stores);
    if (r->shared_storage && r->stores.now) /* other replicas read these (store_choice.h) */
        dt_stream_zero(dt_model_grads(m)->data, dt_model_grads(m)->n_elems);
    else
        dt_model_zero_grads(m);
    if (r->gs)
        dt_gradsync_begin(r->gs);
    return DT_OK;
}

/* The step's figures summed over the replicas (rows too, unless agreed on before the step). A
 * diverged replica's NaN travels in the loss, so every replica stops at the same step, before any
 * update, and a replica whose data ended stops them all before it. */
static dt_status sum_figures(dt_replica *r, dt_step *s)
{
    bool with_rows = !agrees_before(r, s);
    dt_agree_msg m = {.type = DT_AGREE_STEP, .n_ints = 4, .n_reals = 1,
                      .ints = {s->correct, with_rows ? s->rows : 0, s->ended ? 1 : 0,
                               s->state_wanted ? 1 : 0},
                      .reals = {s->loss}};
    dt_status st = dt_comm_agree(r->comm, &m);
    if (st)
        return dt_error_prefix(st, "step %lld", (long long)s->step);
    s->loss = m.reals[0];
    s->correct = m.ints[0];
    if (with_rows)
        s->rows = m.ints[1];
    s->ended = m.ints[2] > 0 || s->rows == 0;
    s->state_wanted = m.ints[3] > 0;
    if (!s->ended && !isfinite(s->loss))
        return dt_error(DT_ERR_NUMERIC, "step %lld: the loss is %g: training diverged (try a "
                        "lower --lr)", (long long)s->step, s->loss);
    return DT_OK;
}

/* Buckets finished, then the figures: with buckets already on their way, the figures come after
 * them. */
static dt_status finish_buckets_and_sum(dt_replica *r, dt_step *s)
{
    dt_status st;
    if (r->gs && (st = dt_gradsync_finish(r->gs)))
        return dt_error_prefix(st, "step %lld", (long long)s->step);
    /* A dense-only step agreed on its batch and end before it, and its figures are each
     * replica's own (a parameter-server worker reports its own to the coordinator, and stops on
     * its own diverged loss before it pushes): no second message. */
    if (s->dense_only)
        return DT_OK;
    return sum_figures(r, s);
}

/* A short batch (the last of an epoch): the sums are scaled to its own mean. */
static float rescale_of(const dt_step *s)
{
    return s->mean && s->rows != s->scaled_rows ? (float)s->scaled_rows / (float)s->rows : 1.0f;
}

dt_status dt_allreduce_sum(dt_replica *r, dt_model *m, dt_step *s)
{
    double t0 = dt_clock_now();
    dt_status st = finish_buckets_and_sum(r, s);
    if (st || s->ended) {
        s->comm_seconds += dt_clock_now() - t0;
        return st;
    }
    float rescale = rescale_of(s);
    dt_arena *grads = dt_model_grads(m);
    if (!r->gs) {
        st = dt_comm_allreduce(r->comm, grads->data, grads->n_elems, DT_REDUCE_SUM, r->wire);
        for (size_t i = 0; st == DT_OK && rescale != 1.0f && i < grads->n_elems; i++)
            grads->data[i] *= rescale;
    }
    if (st)
        return dt_error_prefix(st, "step %lld", (long long)s->step);
    s->comm_seconds += dt_clock_now() - t0;
    return DT_OK;
}

/* ---- The sharded update ---- */

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

/* The tables' rows, their sparse gradients summed over the replicas, updated before the dense
 * variables: at the step the optimizer is about to count. Not when the step updates the dense
 * variables only. */
static dt_status update_tables(dt_replica *r, dt_model *m, dt_optim *o, dt_pool *pool,
                               dt_step *s)
{
    if (dt_model_num_tables(m) == 0 || s->dense_only)
        return DT_OK;
    dt_status st = dt_sparse_sync_tables(r, m, rescale_of(s), s);
    if (st)
        return st;
    dt_replica_update_tables(m, o, pool);
    return DT_OK;
}

static dt_status apply_sharded(dt_replica *r, dt_model *m, dt_optim *o, dt_pool *pool,
                               dt_step *s)
{
    double t0 = dt_clock_now();
    dt_status st = finish_buckets_and_sum(r, s);
    if (st || s->ended) {
        s->comm_seconds += dt_clock_now() - t0;
        return st;
    }
    if ((st = update_tables(r, m, o, pool, s)))
        return st;
    dt_arena *params = dt_model_params(m), *grads = dt_model_grads(m);
    owned_update u = {o, pool, params->data, grads->data, rescale_of(s),
                      r->shared_storage && r->stores.now, 0.0};
    st = dt_comm_allreduce_update(r->comm, grads->data, params->data, params->n_elems,
                                  update_owned, &u);
    if (st)
        return dt_error_prefix(st, "step %lld", (long long)s->step);
    if (r->shared_storage)
        dt_store_choice_record(&r->stores, u.seconds);
    s->comm_seconds += dt_clock_now() - t0;
    dt_optim_count_step(o);
    return s->state_wanted ? dt_allreduce_whole_state(r, m, o) : DT_OK;
}

dt_status dt_allreduce_apply(dt_replica *r, dt_model *m, dt_optim *o, dt_pool *pool, dt_step *s)
{
    if (sharded(r))
        return apply_sharded(r, m, o, pool, s);
    dt_status st = dt_allreduce_sum(r, m, s);
    if (st || s->ended || (st = update_tables(r, m, o, pool, s)))
        return st;
    dt_arena *params = dt_model_params(m), *grads = dt_model_grads(m);
    dt_optim_step(o, pool, params->data, grads->data, params->n_elems);
    return DT_OK;
}

dt_status dt_allreduce_whole_state(dt_replica *r, dt_model *m, dt_optim *o)
{
    if (!sharded(r))
        return DT_OK;
    size_t n_params = dt_model_params(m)->n_elems;
    for (int k = 0; k < o->n_slots; k++) {
        dt_status st = dt_comm_share_owned(r->comm, o->state.data + (size_t)k * n_params,
                                           n_params);
        if (st)
            return dt_error_prefix(st, "sharing the optimizer's state");
    }
    return DT_OK;
}

void dt_allreduce_end(dt_replica *r, dt_model *m)
{
    dt_sparse_sync_free(r);
    if (r->shared_storage)
        dt_model_use_storage(m, NULL, NULL); /* the parameters back in the model's own storage */
    r->shared_storage = false;
    if (r->gs) {
        dt_model_set_grad_hook(m, NULL, NULL);
        dt_gradsync_destroy(r->gs);
        r->gs = NULL;
    }
}
