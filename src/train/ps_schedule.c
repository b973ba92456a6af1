/* The parameter-server coordinator's scheduling (see ps_schedule.h). */
#include "ps_schedule.h"

#include <stdlib.h>
#include <string.h>

dt_status dt_ps_sched_init(dt_ps_sched *s, const dt_ps_sched_config *cfg)
{
    memset(s, 0, sizeof *s);
    if (cfg->n_workers < 1 || cfg->steps_per_execution < 1 || cfg->limit < cfg->start)
        return dt_error(DT_ERR_INVALID, "ps schedule: %d workers, %lld steps per function, "
                        "limit %lld from step %lld", cfg->n_workers,
                        (long long)cfg->steps_per_execution, (long long)cfg->limit,
                        (long long)cfg->start);
    s->cfg = *cfg;
    s->workers = calloc((size_t)cfg->n_workers, sizeof *s->workers);
    s->shards = calloc((size_t)cfg->n_workers, sizeof *s->shards);
    if (!s->workers || !s->shards) {
        dt_ps_sched_free(s);
        return dt_error(DT_ERR_NOMEM, "no memory to schedule %d workers", cfg->n_workers);
    }
    for (int i = 0; i < cfg->n_workers; i++) {
        s->workers[i] = (dt_ps_sched_worker){.shard = i, .active = true};
        s->shards[i].owner = i;
    }
    s->n_active = cfg->n_workers;
    s->dispatched = s->steps = cfg->start;
    return DT_OK;
}

void dt_ps_sched_free(dt_ps_sched *s)
{
    free(s->workers);
    free(s->shards);
    free(s->queue);
    memset(s, 0, sizeof *s);
}

/* The steps worker w may take now under bounded staleness: a worker at clock c must see every
 * update from clocks <= c - S - 1, so every other active worker must have taken c - S steps.
 * Unbounded when asynchronous, and in hybrid mode, whose ring keeps the workers in step. */
static int64_t steps_allowed(const dt_ps_sched *s, int w)
{
    if (s->cfg.hybrid || !s->cfg.ssp)
        return INT64_MAX;
    int64_t slowest = INT64_MAX;
    for (int i = 0; i < s->cfg.n_workers; i++)
        if (s->workers[i].active && s->workers[i].completed < slowest)
            slowest = s->workers[i].completed;
    return slowest + s->cfg.staleness - s->workers[w].completed + 1;
}

/* Whether worker w has data to read: its shard, or, once that is used up, a lost worker's that
 * no one reads, which it takes over (*adopted), so that the data of a worker that never comes
 * back is still trained on. */
static bool has_data(dt_ps_sched *s, int w, int *adopted)
{
    dt_ps_sched_worker *k = &s->workers[w];
    if (s->cfg.hybrid || (k->shard >= 0 && !s->shards[k->shard].done))
        return true;
    for (int j = 0; j < s->cfg.n_workers; j++)
        if (s->shards[j].owner < 0 && !s->shards[j].done) {
            s->shards[j].owner = w;
            k->shard = *adopted = j;
            return true;
        }
    return false;
}

dt_ps_take dt_ps_sched_take(dt_ps_sched *s, int w, dt_ps_function *fn, int *adopted)
{
    dt_ps_sched_worker *k = &s->workers[w];
    *adopted = -1;
    if (s->failed || !k->active || !has_data(s, w, adopted))
        return DT_PS_TAKE_NONE;
    /* Every worker of hybrid mode takes every step, so each gets the same functions. */
    int64_t *given = s->cfg.hybrid ? &k->dispatched : &s->dispatched;
    if (s->n_queued == 0 && *given >= s->cfg.limit)
        return DT_PS_TAKE_NONE;
    int64_t allowed = steps_allowed(s, w);
    if (s->pausing || allowed < 1)
        return DT_PS_TAKE_WAIT;
    /* In hybrid mode a worker reads its own shard always (it is never lost, only failed). */
    *fn = (dt_ps_function){.shard = k->shard, .position = s->shards[k->shard].position};
    if (s->n_queued > 0) {
        dt_ps_function q = s->queue[--s->n_queued];
        fn->first = q.first, fn->n = q.n, fn->again = true;
    } else {
        int64_t n = s->cfg.steps_per_execution;
        if (n > allowed)
            n = allowed;
        if (n > s->cfg.limit - *given)
            n = s->cfg.limit - *given;
        fn->first = *given + 1, fn->n = (uint32_t)n;
        *given += n;
    }
    s->in_flight++;
    return DT_PS_TAKE_RUN;
}

int64_t dt_ps_sched_answered(dt_ps_sched *s, int w, const dt_ps_function *fn, uint32_t n,
                             bool done)
{
    (void)fn;
    dt_ps_sched_worker *k = &s->workers[w];
    s->in_flight--;
    k->completed += n;
    if (k->shard >= 0) {
        s->shards[k->shard].position += n;
        s->shards[k->shard].done = s->shards[k->shard].done || done;
    }
    if (s->cfg.hybrid && w != 0)
        return 0;
    s->steps += n;
    return n;
}

void dt_ps_sched_unanswered(dt_ps_sched *s, int w)
{
    (void)w;
    s->in_flight--;
}

dt_status dt_ps_sched_lose(dt_ps_sched *s, int w, const dt_ps_function *fn)
{
    dt_ps_sched_worker *k = &s->workers[w];
    s->in_flight--;
    if (s->n_queued == s->queue_cap) {
        int cap = s->queue_cap ? 2 * s->queue_cap : 16;
        dt_ps_function *q = realloc(s->queue, (size_t)cap * sizeof *q);
        if (!q)
            return dt_error(DT_ERR_NOMEM, "no memory to queue a lost worker's steps");
        s->queue = q, s->queue_cap = cap;
    }
    s->queue[s->n_queued++] = (dt_ps_function){.first = fn->first, .n = fn->n};
    if (k->shard >= 0)
        s->shards[k->shard].owner = -1; /* another worker may take its data over */
    k->shard = -1;
    if (k->active)
        s->n_active--;
    if (!k->lost)
        s->n_lost++;
    k->active = false, k->lost = true;
    return DT_OK;
}

void dt_ps_sched_rejoin(dt_ps_sched *s, int w)
{
    dt_ps_sched_worker *k = &s->workers[w];
    if (!k->lost)
        return;
    int64_t slowest = -1;
    for (int i = 0; i < s->cfg.n_workers; i++)
        if (s->workers[i].active && (slowest < 0 || s->workers[i].completed < slowest))
            slowest = s->workers[i].completed;
    if (slowest >= 0)
        k->completed = slowest;
    dt_ps_sched_shard *own = &s->shards[w];
    if (own->owner < 0 && !own->done)
        own->owner = w, k->shard = w;
    k->lost = false, k->active = true;
    s->n_lost--, s->n_active++;
}

void dt_ps_sched_retire(dt_ps_sched *s, int w, bool failed)
{
    dt_ps_sched_worker *k = &s->workers[w];
    if (k->active) {
        s->n_active--;
        s->n_finished += !failed;
    }
    if (k->lost)
        s->n_lost--;
    k->active = k->lost = false;
    s->failed = s->failed || failed;
}

void dt_ps_sched_fail(dt_ps_sched *s) { s->failed = true; }

void dt_ps_sched_end(dt_ps_sched *s)
{
    int64_t given = s->dispatched;
    if (s->cfg.hybrid) /* the furthest worker's: the others catch up to the same step */
        for (int i = 0; i < s->cfg.n_workers; i++)
            if (s->workers[i].dispatched > given)
                given = s->workers[i].dispatched;
    if (given < s->cfg.limit)
        s->cfg.limit = given;
}

void dt_ps_sched_pause(dt_ps_sched *s, bool on) { s->pausing = on; }

bool dt_ps_sched_quiet(const dt_ps_sched *s) { return s->in_flight == 0 || s->failed; }

bool dt_ps_sched_over(const dt_ps_sched *s)
{
    return s->failed || (s->n_active == 0 && s->n_finished > 0);
}

bool dt_ps_sched_all_lost(const dt_ps_sched *s)
{
    return s->n_active == 0 && s->n_lost > 0 && !dt_ps_sched_over(s);
}
