/* A sparse cluster's global step on ps 0 (src/ps/stepboard.h): steps taken and given back,
 * readiness from worker 0 alone, and the other workers counted while they train. */
#include <string.h>

#include "../src/ps/psmsg.h"
#include "../src/ps/stepboard.h"
#include "test.h"

TEST(ps_stepboard_counts_steps_readiness_and_workers)
{
    dt_step_board b;
    CHECK_OK(dt_step_board_init(&b, 8));
    dt_step_reply r;
    /* Worker 1 waits for worker 0: not ready, no step taken. */
    CHECK_OK(dt_step_board_ask(&b, 1, DT_PSMSG_STEP_TAKE, 0, 0, 10.0, 5.0, &r));
    CHECK(!r.ready && r.total == 0 && r.active == 0);
    /* Worker 0 restored step 40: ready, the count raised to it (never lowered). */
    CHECK_OK(dt_step_board_ask(&b, 0, DT_PSMSG_STEP_READY, 0, 40, 10.5, 5.0, &r));
    CHECK(r.ready && r.total == 40 && r.active == 1);
    CHECK_ERR(dt_step_board_ask(&b, 1, DT_PSMSG_STEP_READY, 0, 90, 10.6, 5.0, &r),
              DT_ERR_INVALID, "worker 0 makes them so");
    CHECK_OK(dt_step_board_ask(&b, 1, DT_PSMSG_STEP_TAKE, 4, 0, 11.0, 5.0, &r));
    CHECK(r.total == 44);
    CHECK_OK(dt_step_board_ask(&b, 0, DT_PSMSG_STEP_TAKE, 4, 0, 11.0, 5.0, &r));
    CHECK(r.total == 48);
    /* Two of worker 1's steps had no data: given back. */
    CHECK_OK(dt_step_board_ask(&b, 1, DT_PSMSG_STEP_RETURN, 2, 0, 11.5, 5.0, &r));
    CHECK(r.total == 46 && r.active == 1);
    /* Worker 0 leaving sees worker 1 training, then not once it left... */
    CHECK_OK(dt_step_board_ask(&b, 0, DT_PSMSG_STEP_LEAVE, 0, 0, 12.0, 5.0, &r));
    CHECK(r.active == 1);
    CHECK_OK(dt_step_board_ask(&b, 1, DT_PSMSG_STEP_LEAVE, 0, 0, 12.1, 5.0, &r));
    CHECK_OK(dt_step_board_ask(&b, 0, DT_PSMSG_STEP_LEAVE, 0, 0, 12.2, 5.0, &r));
    CHECK(r.active == 0 && r.total == 46);
    /* ...and a worker heard again trains again; one silent for the timeout no longer counts. */
    CHECK_OK(dt_step_board_ask(&b, 5, DT_PSMSG_STEP_TAKE, 1, 0, 13.0, 5.0, &r));
    CHECK_OK(dt_step_board_ask(&b, 0, DT_PSMSG_STEP_LEAVE, 0, 0, 17.9, 5.0, &r));
    CHECK(r.active == 1 && r.total == 47);
    CHECK_OK(dt_step_board_ask(&b, 0, DT_PSMSG_STEP_LEAVE, 0, 0, 18.1, 5.0, &r));
    CHECK(r.active == 0);
    CHECK_OK(dt_step_board_ask(&b, 0, DT_PSMSG_STEP_RETURN, 100, 0, 18.2, 5.0, &r));
    CHECK(r.total == 0);
    CHECK_ERR(dt_step_board_ask(&b, 8, DT_PSMSG_STEP_TAKE, 1, 0, 19.0, 5.0, &r),
              DT_ERR_INVALID, "worker:8: a sparse cluster's workers are numbered below 8");
    dt_step_board_free(&b);
}
