/* A sparse cluster's global step (see stepboard.h). */
#include "stepboard.h"

#include <stdlib.h>

#include "psmsg.h"

dt_status dt_step_board_init(dt_step_board *b, int max_workers)
{
    *b = (dt_step_board){.cap = max_workers};
    b->heard = calloc((size_t)max_workers, sizeof *b->heard);
    b->left = calloc((size_t)max_workers, sizeof *b->left);
    if (!b->heard || !b->left) {
        dt_step_board_free(b);
        return dt_error(DT_ERR_NOMEM, "no memory for %d workers' steps", max_workers);
    }
    return DT_OK;
}

void dt_step_board_free(dt_step_board *b)
{
    free(b->heard), free(b->left);
    *b = (dt_step_board){0};
}

static int count_active(const dt_step_board *b, int worker, double now, double timeout)
{
    int n = 0;
    for (int i = 0; i < b->cap; i++)
        n += i != worker && b->heard[i] > 0 && !b->left[i] && now - b->heard[i] < timeout;
    return n;
}

dt_status dt_step_board_ask(dt_step_board *b, int worker, uint32_t kind, uint32_t n,
                            int64_t floor, double now, double timeout, dt_step_reply *out)
{
    if (worker < 0 || worker >= b->cap)
        return dt_error(DT_ERR_INVALID, "worker:%d: a sparse cluster's workers are numbered "
                        "below %d", worker, b->cap);
    if (kind == DT_PSMSG_STEP_READY && worker != 0)
        return dt_error(DT_ERR_INVALID, "worker:%d says the variables are ready: worker 0 makes "
                        "them so", worker);
    /* A worker heard again is training again (one started anew after it left). */
    b->heard[worker] = now;
    b->left[worker] = kind == DT_PSMSG_STEP_LEAVE;
    if (kind == DT_PSMSG_STEP_READY) {
        b->ready = true;
        if (b->total < floor)
            b->total = floor;
    }
    if (kind == DT_PSMSG_STEP_TAKE)
        b->total += n;
    if (kind == DT_PSMSG_STEP_RETURN) /* the count is of the steps trained */
        b->total -= b->total < (int64_t)n ? b->total : (int64_t)n;
    *out = (dt_step_reply){.total = b->total, .ready = b->ready,
                           .active = count_active(b, worker, now, timeout)};
    return DT_OK;
}
