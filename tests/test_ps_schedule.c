/* The parameter-server scheduler (src/train/ps_schedule.c) as a state machine: every
 * transition the coordinator relies on, without a socket or a thread. */
#include <stdint.h>
#include <string.h>

#include "../src/train/ps_schedule.h"
#include "test.h"

static dt_ps_sched_config config(int workers, int64_t limit)
{
    return (dt_ps_sched_config){.n_workers = workers, .steps_per_execution = 1, .limit = limit};
}

/* Takes a function for w, which must be given: its first step. */
static int64_t must_take(dt_ps_sched *s, int w, dt_ps_function *fn)
{
    int adopted;
    dt_ps_take t = dt_ps_sched_take(s, w, fn, &adopted);
    CHECK_MSG(t == DT_PS_TAKE_RUN, "worker %d: take gave %d, not a function", w, (int)t);
    return t == DT_PS_TAKE_RUN ? fn->first : -1;
}

static dt_ps_take take(dt_ps_sched *s, int w)
{
    dt_ps_function fn;
    int adopted;
    return dt_ps_sched_take(s, w, &fn, &adopted);
}

TEST(ps_schedule_numbers_steps_globally_up_to_the_limit)
{
    dt_ps_sched s;
    dt_ps_sched_config cfg = config(2, 5);
    cfg.steps_per_execution = 2;
    CHECK_OK(dt_ps_sched_init(&s, &cfg));
    dt_ps_function a, b, c;
    CHECK(must_take(&s, 0, &a) == 1 && a.n == 2 && a.shard == 0 && !a.again);
    CHECK(must_take(&s, 1, &b) == 3 && b.n == 2 && b.shard == 1);
    CHECK(dt_ps_sched_answered(&s, 0, &a, 2, false) == 2);
    /* The last function is cut to the limit, then there is nothing more. */
    CHECK(must_take(&s, 0, &c) == 5 && c.n == 1 && c.position == 2);
    CHECK(take(&s, 0) == DT_PS_TAKE_NONE);
    CHECK(!dt_ps_sched_quiet(&s));
    dt_ps_sched_answered(&s, 1, &b, 2, false);
    dt_ps_sched_answered(&s, 0, &c, 1, false);
    CHECK(s.steps == 5 && dt_ps_sched_quiet(&s));
    dt_ps_sched_free(&s);
}

TEST(ps_schedule_starts_after_a_restored_step)
{
    dt_ps_sched s;
    dt_ps_sched_config cfg = config(1, 12);
    cfg.start = 10;
    CHECK_OK(dt_ps_sched_init(&s, &cfg));
    dt_ps_function fn;
    CHECK(must_take(&s, 0, &fn) == 11);
    dt_ps_sched_answered(&s, 0, &fn, 1, false);
    CHECK(s.steps == 11);
    dt_ps_sched_free(&s);
}

TEST(ps_schedule_requeues_a_lost_workers_function_for_the_others_first)
{
    dt_ps_sched s;
    dt_ps_sched_config cfg = config(2, 100);
    CHECK_OK(dt_ps_sched_init(&s, &cfg));
    dt_ps_function a, b, again;
    must_take(&s, 0, &a);
    must_take(&s, 1, &b);
    CHECK_OK(dt_ps_sched_lose(&s, 1, &b));
    CHECK(s.n_active == 1 && s.n_lost == 1 && s.in_flight == 1);
    /* The lost worker's shard is free and it takes nothing while lost. */
    CHECK(s.shards[1].owner == -1 && take(&s, 1) == DT_PS_TAKE_NONE);
    dt_ps_sched_answered(&s, 0, &a, 1, false);
    CHECK(must_take(&s, 0, &again) == b.first && again.n == b.n && again.again);
    /* Worker 0 reads its own shard for it. */
    CHECK(again.shard == 0 && again.position == 1);
    dt_ps_sched_answered(&s, 0, &again, 1, false);
    CHECK(must_take(&s, 0, &a) == 3 && !a.again);
    dt_ps_sched_free(&s);
}

TEST(ps_schedule_rejoined_worker_takes_the_slowest_clock_and_its_own_shard)
{
    dt_ps_sched s;
    dt_ps_sched_config cfg = config(3, 100);
    CHECK_OK(dt_ps_sched_init(&s, &cfg));
    dt_ps_function fn;
    for (int k = 0; k < 4; k++) {
        must_take(&s, 0, &fn);
        dt_ps_sched_answered(&s, 0, &fn, 1, false);
    }
    must_take(&s, 1, &fn);
    dt_ps_sched_answered(&s, 1, &fn, 1, false);
    must_take(&s, 2, &fn);
    CHECK_OK(dt_ps_sched_lose(&s, 2, &fn));
    dt_ps_sched_rejoin(&s, 2);
    CHECK(s.workers[2].active && !s.workers[2].lost && s.n_active == 3 && s.n_lost == 0);
    CHECK(s.workers[2].completed == 1); /* worker 1's: the slowest active one */
    CHECK(s.workers[2].shard == 2 && s.shards[2].owner == 2);
    dt_ps_sched_free(&s);
}

TEST(ps_schedule_ssp_holds_a_worker_more_than_s_steps_ahead)
{
    dt_ps_sched s;
    dt_ps_sched_config cfg = config(2, 100);
    cfg.ssp = true, cfg.staleness = 1, cfg.steps_per_execution = 5;
    CHECK_OK(dt_ps_sched_init(&s, &cfg));
    dt_ps_function fn;
    /* Worker 0 at clock 0 with worker 1 at 0 may take 2 steps (0 + 1 - 0 + 1), not 5. */
    must_take(&s, 0, &fn);
    CHECK(fn.n == 2);
    dt_ps_sched_answered(&s, 0, &fn, 2, false);
    CHECK(take(&s, 0) == DT_PS_TAKE_WAIT);
    /* Worker 1 moves: worker 0 may go on. */
    dt_ps_function f1;
    must_take(&s, 1, &f1);
    dt_ps_sched_answered(&s, 1, &f1, f1.n, false);
    CHECK(s.workers[1].completed == 2);
    must_take(&s, 0, &fn);
    CHECK(fn.n == 2);
    dt_ps_sched_free(&s);
}

TEST(ps_schedule_ssp_stops_waiting_for_a_lost_worker)
{
    dt_ps_sched s;
    dt_ps_sched_config cfg = config(2, 100);
    cfg.ssp = true, cfg.staleness = 0;
    CHECK_OK(dt_ps_sched_init(&s, &cfg));
    dt_ps_function a, b;
    must_take(&s, 0, &a);
    must_take(&s, 1, &b);
    dt_ps_sched_answered(&s, 0, &a, 1, false);
    CHECK(take(&s, 0) == DT_PS_TAKE_WAIT);
    CHECK_OK(dt_ps_sched_lose(&s, 1, &b));
    must_take(&s, 0, &a);
    CHECK(a.again && a.first == b.first);
    dt_ps_sched_free(&s);
}

TEST(ps_schedule_takes_over_a_lost_workers_data_once_its_own_is_used_up)
{
    dt_ps_sched s;
    dt_ps_sched_config cfg = config(2, INT64_MAX);
    CHECK_OK(dt_ps_sched_init(&s, &cfg));
    dt_ps_function a, b;
    must_take(&s, 1, &b);
    dt_ps_sched_answered(&s, 1, &b, 1, false);
    must_take(&s, 1, &b);
    CHECK_OK(dt_ps_sched_lose(&s, 1, &b));
    must_take(&s, 0, &a);
    CHECK(a.again && a.shard == 0);
    dt_ps_sched_answered(&s, 0, &a, 1, true); /* worker 0's shard is used up */
    int adopted;
    CHECK(dt_ps_sched_take(&s, 0, &a, &adopted) == DT_PS_TAKE_RUN);
    CHECK(adopted == 1 && a.shard == 1 && a.position == 1 && s.shards[1].owner == 0);
    dt_ps_sched_answered(&s, 0, &a, 1, true);
    /* Both shards used up: nothing more, and worker 1 back finds its shard done. */
    CHECK(take(&s, 0) == DT_PS_TAKE_NONE);
    dt_ps_sched_rejoin(&s, 1);
    CHECK(take(&s, 1) == DT_PS_TAKE_NONE);
    dt_ps_sched_free(&s);
}

TEST(ps_schedule_pause_gives_nothing_until_resumed_and_is_quiet_when_drained)
{
    dt_ps_sched s;
    dt_ps_sched_config cfg = config(2, 100);
    CHECK_OK(dt_ps_sched_init(&s, &cfg));
    dt_ps_function a, b;
    must_take(&s, 0, &a);
    must_take(&s, 1, &b);
    dt_ps_sched_pause(&s, true);
    CHECK(!dt_ps_sched_quiet(&s));
    dt_ps_sched_answered(&s, 0, &a, 1, false);
    CHECK(take(&s, 0) == DT_PS_TAKE_WAIT);
    CHECK(!dt_ps_sched_quiet(&s));
    /* A worker lost during the pause drains it too. */
    CHECK_OK(dt_ps_sched_lose(&s, 1, &b));
    CHECK(dt_ps_sched_quiet(&s) && s.steps == 1);
    dt_ps_sched_pause(&s, false);
    must_take(&s, 0, &a);
    CHECK(a.again && a.first == b.first);
    dt_ps_sched_free(&s);
}

TEST(ps_schedule_failure_stops_every_worker)
{
    dt_ps_sched s;
    dt_ps_sched_config cfg = config(2, 100);
    CHECK_OK(dt_ps_sched_init(&s, &cfg));
    dt_ps_function a;
    must_take(&s, 0, &a);
    dt_ps_sched_unanswered(&s, 0);
    dt_ps_sched_retire(&s, 0, true);
    CHECK(s.failed && dt_ps_sched_over(&s) && dt_ps_sched_quiet(&s));
    CHECK(take(&s, 1) == DT_PS_TAKE_NONE);
    dt_ps_sched_free(&s);
}

TEST(ps_schedule_all_lost_waits_and_over_when_a_worker_finished)
{
    dt_ps_sched s;
    dt_ps_sched_config cfg = config(2, 2);
    CHECK_OK(dt_ps_sched_init(&s, &cfg));
    dt_ps_function a, b;
    must_take(&s, 0, &a);
    must_take(&s, 1, &b);
    CHECK_OK(dt_ps_sched_lose(&s, 0, &a));
    CHECK(!dt_ps_sched_all_lost(&s));
    CHECK_OK(dt_ps_sched_lose(&s, 1, &b));
    CHECK(dt_ps_sched_all_lost(&s) && !dt_ps_sched_over(&s));
    dt_ps_sched_rejoin(&s, 0);
    CHECK(!dt_ps_sched_all_lost(&s));
    must_take(&s, 0, &a);
    dt_ps_sched_answered(&s, 0, &a, 1, false);
    must_take(&s, 0, &a);
    dt_ps_sched_answered(&s, 0, &a, 1, false);
    CHECK(take(&s, 0) == DT_PS_TAKE_NONE);
    dt_ps_sched_retire(&s, 0, false);
    /* Worker 1, still lost, is told training is over. */
    CHECK(dt_ps_sched_over(&s) && s.n_finished == 1 && s.steps == 2);
    dt_ps_sched_free(&s);
}

TEST(ps_schedule_hybrid_gives_every_worker_every_step_and_counts_worker_0s)
{
    dt_ps_sched s;
    dt_ps_sched_config cfg = config(2, 3);
    cfg.hybrid = true, cfg.steps_per_execution = 2;
    CHECK_OK(dt_ps_sched_init(&s, &cfg));
    dt_ps_function a, b;
    CHECK(must_take(&s, 0, &a) == 1 && must_take(&s, 1, &b) == 1 && a.n == 2 && b.n == 2);
    CHECK(a.shard == 0 && b.shard == 1);
    CHECK(dt_ps_sched_answered(&s, 1, &b, 2, false) == 0);
    CHECK(dt_ps_sched_answered(&s, 0, &a, 2, false) == 2);
    CHECK(must_take(&s, 0, &a) == 3 && a.n == 1);
    CHECK(a.position == 2);
    CHECK(take(&s, 0) == DT_PS_TAKE_NONE);
    dt_ps_sched_free(&s);
}

TEST(ps_schedule_end_gives_no_new_steps_but_a_lost_workers)
{
    dt_ps_sched s;
    dt_ps_sched_config cfg = config(2, 100);
    CHECK_OK(dt_ps_sched_init(&s, &cfg));
    dt_ps_function a, b;
    must_take(&s, 0, &a);
    must_take(&s, 1, &b);
    dt_ps_sched_end(&s);
    CHECK_OK(dt_ps_sched_lose(&s, 1, &b));
    dt_ps_sched_answered(&s, 0, &a, 1, false);
    must_take(&s, 0, &a);
    CHECK(a.again && a.first == 2);
    dt_ps_sched_answered(&s, 0, &a, 1, false);
    CHECK(take(&s, 0) == DT_PS_TAKE_NONE && s.steps == 2);
    dt_ps_sched_free(&s);
}

TEST(ps_schedule_rejects_a_bad_configuration)
{
    dt_ps_sched s;
    dt_ps_sched_config cfg = config(0, 10);
    CHECK_ERR(dt_ps_sched_init(&s, &cfg), DT_ERR_INVALID, "0 workers");
}
