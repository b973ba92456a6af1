/* Plain or streaming stores into shared memory (see store_choice.h). */
#include "store_choice.h"

/* Where the step is in the trials' cycle; negative before the first. */
static int64_t trial_position(const dt_store_choice *c)
{
    return c->step < DT_STORE_TRIAL_START
               ? -1
               : (c->step - DT_STORE_TRIAL_START) % DT_STORE_TRIAL_EVERY;
}

void dt_store_choice_for_step(dt_store_choice *c)
{
    int64_t at = trial_position(c);
    if (at == 2 * DT_STORE_TRIAL_STEPS)
        c->streaming = c->timed[1] < c->timed[0] * (2.0 / 3.0);
    if (at < 0)
        c->now = false;
    else if (at < 2 * DT_STORE_TRIAL_STEPS)
        c->now = at >= DT_STORE_TRIAL_STEPS;
    else
        c->now = c->streaming;
}

void dt_store_choice_record(dt_store_choice *c, double seconds)
{
    int64_t at = trial_position(c);
    if (at == 0)
        c->timed[0] = c->timed[1] = 0.0;
    if (at >= 0 && at < 2 * DT_STORE_TRIAL_STEPS)
        c->timed[c->now] += seconds;
    c->step++;
}
