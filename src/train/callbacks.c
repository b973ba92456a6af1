/* The list of fit's callbacks (callback.h): made in order, closed in order. The training loop
 * (loop.c) and the parameter-server coordinator (ps_loop.c) both run this one list. */
#include <stdlib.h>
#include <string.h>

#include "callback.h"

/* The callbacks, in the order they run: validation before the progress line that shows it, the
 * step's log lines before a periodic evaluation's, the progress line before early stopping's
 * verdict, saves, and last the program's own (which see every figure of the step or epoch). */
typedef dt_status (*callback_ctor)(const dt_fit_ctx *c, dt_callback *out);
static const callback_ctor builtins[] = {
    dt_lr_schedule_callback, dt_validation_callback, dt_estimator_log_callback, dt_progress_callback,
    dt_periodic_evaluation_callback, dt_early_stopping_callback, dt_backup_callback,
    dt_checkpoint_callback, dt_summary_callback, dt_user_callbacks,
};
_Static_assert(sizeof builtins / sizeof builtins[0] <= DT_MAX_CALLBACKS,
               "DT_MAX_CALLBACKS holds every built-in callback");

dt_status dt_callbacks_open(const dt_fit_ctx *c, dt_callbacks *cbs)
{
    memset(cbs, 0, sizeof *cbs);
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++) {
        dt_status st = builtins[i](c, &cbs->cb[cbs->n]);
        if (st)
            return st;
        if (cbs->cb[cbs->n].ops)
            cbs->n++;
    }
    return DT_OK;
}

dt_status dt_callbacks_close(dt_callbacks *cbs, bool completed)
{
    dt_status first = DT_OK;
    for (int i = 0; i < cbs->n; i++) {
        const dt_callback *cb = &cbs->cb[i];
        dt_status st = cb->ops->close ? cb->ops->close(cb->self, completed) : DT_OK;
        if (st && !first)
            first = st;
    }
    cbs->n = 0;
    return first;
}

bool dt_callbacks_saves_after(dt_callbacks *cbs, dt_fit_ctx *c, int64_t step)
{
    bool wanted = false;
    for (int i = 0; i < cbs->n; i++)
        if (cbs->cb[i].ops->saves_after && cbs->cb[i].ops->saves_after(cbs->cb[i].self, c, step))
            wanted = true;
    return wanted;
}

dt_status dt_callback_free_self(void *self, bool completed)
{
    (void)completed;
    free(self);
    return DT_OK;
}
