/* Parameter-server training in TFJob's sparse cluster (see ps_train.h): between-graph, each
 * worker process running both halves of the job for itself, the worker on a thread of its own
 * (serving its ZeroMQ endpoint as under a chief) and its coordinator on the caller's, linked
 * to that worker alone. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "dtrain/log.h"
#include "ps_train.h"

typedef struct {
    const dt_train_config *c;
    dt_model *m;
    dt_pool *pool;
    dt_input *in;
    const dt_input_options *io;
    int64_t table_rows;
    dt_train_report report;
    dt_status st;
    char error[1024];
} sparse_worker;

static void *work(void *arg)
{
    sparse_worker *w = arg;
    w->st = dt_ps_work(w->c, w->m, w->pool, w->in, w->io, w->table_rows, &w->report);
    if (w->st) {
        /* Said at once: the coordinator only sees its worker silent (up to --connect-timeout). */
        snprintf(w->error, sizeof w->error, "%s", dt_last_error());
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: this worker's steps: %s", w->error);
    }
    return NULL;
}

dt_status dt_ps_train_sparse(const dt_train_config *c, const dt_fit_config *fcfg,
                             dt_model *coordinator, dt_model *m, dt_pool *pool, dt_input *in,
                             const dt_input_options *io, int64_t table_rows,
                             dt_train_report *out)
{
    sparse_worker w = {.c = c, .m = m, .pool = pool, .in = in, .io = io,
                       .table_rows = table_rows};
    pthread_t thread;
    if (pthread_create(&thread, NULL, work, &w) != 0)
        return dt_error(DT_ERR_IO, "cannot start this worker's thread");
    dt_status st = dt_ps_coordinate(c, fcfg, coordinator, in->test, &out->fit);
    char first[1024];
    snprintf(first, sizeof first, "%s", st ? dt_last_error() : "");
    /* The coordinator stopped its worker at its end, or told it to stop when it failed. */
    pthread_join(thread, NULL);
    out->ps_worker = w.report.ps_worker;
    out->worker = w.report.worker;
    /* A worker stopped by its coordinator ends well: one that failed is the cause. */
    if (w.st)
        return dt_error(w.st, "%s", w.error);
    if (st)
        return dt_error(st, "%s", first);
    return DT_OK;
}
