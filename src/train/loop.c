/* fit's training loop: Keras's fit as a short loop over a strategy's replica (replica.h) and a
 * list of callbacks (callback.h). Each step takes the next batch, lets the strategy begin it,
 * runs forward, the loss and backward, and lets the strategy turn the gradients into the
 * update; everything else (progress, evaluation, early stopping, checkpoints, backups,
 * summaries) is a callback. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "callback.h"
#include "../core/clock.h"

/* One step on the batch e: NULL when this replica's data has ended, or no rows on a replica
 * whose share of a short last batch is empty. The strategy clears the gradients and turns them
 * into the update; when s->ended on return, the step was not taken. *go_on false: the epoch
 * ended before the step, for every replica. */
static dt_status train_step(dt_replica *r, dt_model *m, dt_optim *o, dt_pool *pool,
                            const dt_elem *e, int32_t *labels, dt_step *s, bool *go_on)
{
    dt_status st = dt_replica_begin_step(r, m, s, go_on);
    if (st || !*go_on)
        return st;
    if (e && ((st = dt_check_batch(m, e)) || (st = dt_batch_labels(m, e, labels))))
        return st;
    /* The gradient averages over the global batch. */
    float scale = 1.0f / (float)(s->mean ? s->scaled_rows : s->batch_size);
    double loss = 0.0;
    int correct = 0;
    uint64_t dropout_at = dt_model_dropout_position(m);
    if (e && e->n > 0) {
        if ((st = dt_model_forward_batch(m, e, true, NULL)))
            return st;
        loss = dt_model_loss(m, e->n, labels, scale, true, &correct);
        if (isfinite(loss))
            dt_model_backward(m, e->n);
    } else if (e) {
        /* An empty share of a short batch still counts as a training forward: every replica's
         * dropout sequence stays at the chief's, which is the one a checkpoint saves. */
        dt_model_set_dropout_position(m, dt_model_dropout_position(m) + 1);
    }
    s->loss = loss;
    s->correct = correct;
    st = dt_replica_apply(r, m, o, pool, s);
    if (st == DT_OK && s->ended)
        dt_model_set_dropout_position(m, dropout_at); /* the step is not taken */
    return st;
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

/* ---- The loop ---- */

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

typedef struct {
    dt_fit_ctx c;
    dt_callbacks cbs;
    dt_pool *pool;
    dt_dataset *train;
    int32_t *labels;
} fit_run;

/* The epoch's steps, until its limit or the end of its data (some replica's). */
static dt_status run_steps(fit_run *f)
{
    dt_fit_ctx *c = &f->c;
    dt_fit_position *p = &c->pos;
    dt_status st = DT_OK;
    while (c->epoch_limit == 0 || p->in_epoch < c->epoch_limit) {
        dt_elem *e = NULL;
        st = dt_dataset_next(f->train, &e);
        if (st != DT_OK && st != DT_END)
            return st;
        if (st == DT_END)
            e = NULL; /* this replica's data ended: the strategy decides what that ends */
        st = DT_OK;
        dt_step s = {.step = p->step, .batch_size = c->cfg->batch_size,
                     .mean = c->cfg->reduction == DT_REDUCTION_MEAN, .rows = e ? e->n : 0,
                     .ended = e == NULL,
                     .state_wanted = dt_callbacks_saves_after(&f->cbs, c, p->step + 1)};
        bool go_on = false;
        DT_EACH_CALLBACK(&f->cbs, step_begin, c);
        if (st) {
            dt_elem_free(e);
            return st;
        }
        st = train_step(c->replica, c->m, c->o, f->pool, e, f->labels, &s, &go_on);
        c->result->comm_seconds += s.comm_seconds;
        c->result->table_bytes += s.table_bytes;
        dt_elem_free(e);
        if (st || !go_on || s.ended)
            return st; /* the data ended (some replica's): the batch was not trained on */
        p->step++;
        p->in_epoch++;
        p->epoch_loss += s.loss;
        p->epoch_correct += s.correct;
        p->epoch_samples += s.rows;
        c->result->samples += s.rows;
        c->batch_loss = s.loss / (double)s.rows;
        c->batch_accuracy = (double)s.correct / (double)s.rows;
        c->evaluated = false;
        DT_EACH_CALLBACK(&f->cbs, step_end, c);
        if (st)
            return st;
    }
    return DT_OK;
}

/* One epoch: its steps, its figures, and its end's callbacks. *more false: training ends. */
static dt_status run_epoch(fit_run *f, bool positioned, bool *more)
{
    dt_fit_ctx *c = &f->c;
    dt_fit_position *p = &c->pos;
    const dt_fit_config *cfg = c->cfg;
    dt_fit_result *r = c->result;
    dt_status st = DT_OK;
    *more = false;
    if (!positioned) {
        if (p->epoch > 0 && (st = dt_dataset_reset(f->train)))
            return st;
        p->in_epoch = p->epoch_correct = p->epoch_samples = 0;
        p->epoch_loss = 0.0;
    }
    c->epoch_limit = epoch_limit(cfg, p);
    DT_EACH_CALLBACK(&f->cbs, epoch_begin, c);
    if (st)
        return st;
    r->epochs = (int)p->epoch + 1;
    double t0 = dt_clock_now(), side0 = dt_fit_side_seconds(r);
    if ((st = run_steps(f)))
        return st;
    /* Evaluations and checkpoints are not training time. */
    r->train_seconds += dt_clock_now() - t0 - (dt_fit_side_seconds(r) - side0);
    if (p->epoch_samples == 0)
        return dt_error(DT_ERR_INVALID, "epoch %lld: the input gave no batch",
                        (long long)p->epoch + 1);
    /* max_steps may end training inside an epoch: the position stays there, so a run resumed
     * from the final checkpoint with more steps goes on as one that never stopped. */
    c->epoch_cut = cfg->max_steps > 0 && p->step >= cfg->max_steps;
    r->steps = p->step;
    r->final_loss = p->epoch_loss / p->epoch_samples;
    r->final_accuracy = (double)p->epoch_correct / p->epoch_samples;
    c->epoch_extra[0] = '\0';
    c->evaluated = false;
    DT_EACH_CALLBACK(&f->cbs, epoch_end, c);
    if (st || c->stop || c->epoch_cut)
        return st;
    p->samples += p->epoch_samples;
    dt_fit_position next = *p;
    next.epoch++;
    next.in_epoch = next.epoch_correct = next.epoch_samples = 0;
    next.epoch_loss = 0.0;
    if ((st = dt_replica_whole_state(c->replica, c->m, c->o)))
        return st;
    DT_EACH_CALLBACK(&f->cbs, between_epochs, c, &next);
    if (st)
        return st;
    *p = next;
    *more = true;
    return DT_OK;
}

/* Restores a checkpoint when there is one, and brings the input to where it stopped. */
static dt_status resume(fit_run *f)
{
    dt_fit_ctx *c = &f->c;
    dt_status st = dt_fit_restore(c->replica, c->cfg, c->m, c->o, &c->pos, &c->resumed);
    if (st || !c->resumed)
        return st;
    c->result->resumed_step = c->pos.step;
    return seek_input(f->train, &c->pos);
}

dt_status dt_fit_replica(dt_replica *r, dt_model *m, dt_optim *o, dt_pool *pool,
                         dt_dataset *train, dt_dataset *test, const dt_fit_config *cfg,
                         dt_fit_result *result)
{
    memset(result, 0, sizeof *result);
    result->val_auc = NAN;
    dt_status st = dt_fit_check(cfg, -1);
    if (st)
        return st;
    fit_run f = {.c = {.replica = r, .m = m, .o = o, .cfg = cfg, .test = test, .result = result,
                       .pos = {.best = INFINITY}, .step_count = 1},
                 .pool = pool, .train = train};
    dt_fit_ctx *c = &f.c;
    bool completed = false;
    f.labels = malloc((size_t)dt_model_max_batch(m) * sizeof *f.labels);
    if (!f.labels)
        return dt_error(DT_ERR_NOMEM, "no memory for training");
    dt_model_set_dropout_seed(m, cfg->seed);
    if ((st = dt_callbacks_open(c, &f.cbs)) || (st = dt_replica_start(r, m)) ||
        (st = resume(&f)) || (st = dt_replica_place(r, m)))
        goto fail;
    c->train_t0 = dt_clock_now();
    DT_EACH_CALLBACK(&f.cbs, train_begin, c);
    bool positioned = c->resumed; /* the first epoch's input is where the checkpoint left it */
    for (bool more = true; st == DT_OK && more && c->pos.epoch < cfg->epochs; positioned = false) {
        if (cfg->max_steps > 0 && c->pos.step >= cfg->max_steps)
            break;
        st = run_epoch(&f, positioned, &more);
    }
    if (st)
        goto fail;
    result->steps = c->pos.step;
    if ((st = dt_replica_whole_state(r, m, o)))
        goto fail;
    c->evaluated = false;
    DT_EACH_CALLBACK(&f.cbs, train_end, c);
    completed = st == DT_OK;
fail:
    dt_replica_end(r, m);
    free(f.labels);
    dt_status close_st = dt_callbacks_close(&f.cbs, completed);
    return st ? st : close_st;
}

dt_status dt_fit_dataset(dt_model *m, dt_optim *o, dt_pool *pool, dt_dataset *train,
                         dt_dataset *test, const dt_fit_config *cfg, dt_fit_result *result)
{
    dt_replica *alone;
    dt_status st = dt_replica_alone(&alone);
    if (st)
        return st;
    st = dt_fit_replica(alone, m, o, pool, train, test, cfg, result);
    dt_replica_free_alone(alone);
    return st;
}
