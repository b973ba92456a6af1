/* A ps task's life from its configuration (see include/dtrain/ps.h). */
#include "dtrain/ps.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dtrain/cluster.h"
#include "dtrain/log.h"
#include "service.h"

void dt_ps_server_config_default(dt_ps_server_config *c)
{
    *c = (dt_ps_server_config){.coordinator_timeout = 120.0, .request_timeout = 60.0,
                               .threads = 1, .snapshot_secs = 30.0};
}

void dt_ps_options_default(dt_ps_options *o)
{
    *o = (dt_ps_options){.mode = DT_PS_ASYNC, .steps_per_execution = 1,
                         .coordinator_timeout = 120.0, .worker_timeout = 300.0,
                         .heartbeat_timeout = 10.0, .snapshot_secs = 30.0,
                         .recovery_timeout = 60.0,
                         .partition_strategy = DT_PARTITION_DIV};
}

dt_status dt_ps_mode_parse(const char *text, dt_ps_options *o)
{
    if (strcmp(text, "async") == 0) {
        o->mode = DT_PS_ASYNC;
        return DT_OK;
    }
    if (strcmp(text, "hybrid") == 0) {
        o->mode = DT_PS_HYBRID;
        return DT_OK;
    }
    char *end;
    if (strncmp(text, "ssp:", 4) == 0) {
        long sv = strtol(text + 4, &end, 10);
        if (end != text + 4 && *end == '\0' && sv >= 0 && sv <= 1000000) {
            o->mode = DT_PS_SSP, o->staleness = (int)sv;
            return DT_OK;
        }
    }
    return dt_error(DT_ERR_INVALID, "'%s' is not async, ssp:S (S a staleness 0..10^6) or hybrid",
                    text);
}

/* A number of seconds in (lo, hi], or [lo, hi] when lo_closed. */
static dt_status check_seconds(const char *field, double v, double lo, bool lo_closed, double hi)
{
    if ((lo_closed ? v >= lo : v > lo) && v <= hi)
        return DT_OK;
    return dt_error(DT_ERR_INVALID, "%s: must be in %c%g, %g] seconds, got %g", field,
                    lo_closed ? '[' : '(', lo, hi, v);
}

dt_status dt_ps_options_check(const dt_ps_options *o)
{
    dt_status st;
    if (o->mode == DT_PS_SSP && (o->staleness < 0 || o->staleness > 1000000))
        return dt_error(DT_ERR_INVALID, "staleness: must be in 0..1000000, got %d", o->staleness);
    if (o->steps_per_execution < 1 || o->steps_per_execution > 1000000)
        return dt_error(DT_ERR_INVALID, "steps_per_execution: must be in 1..1000000, got %d",
                        o->steps_per_execution);
    if ((st = check_seconds("coordinator_timeout", o->coordinator_timeout, 0, false, 86400)) ||
        (st = check_seconds("worker_timeout", o->worker_timeout, 0, false, 86400)) ||
        (st = check_seconds("heartbeat_timeout", o->heartbeat_timeout, 0.5, true, 6553)) ||
        (st = check_seconds("snapshot_secs", o->snapshot_secs, 0, true, 86400)) ||
        (st = check_seconds("recovery_timeout", o->recovery_timeout, 0, false, 86400)))
        return st;
    const dt_partitioner *p = &o->partitioner;
    if (o->partitioner_given &&
        ((p->kind == DT_PARTITION_FIXED && p->num_shards < 1) ||
         (p->kind != DT_PARTITION_FIXED && (p->shard_bytes < 1 || p->max_shards < 0))))
        return dt_error(DT_ERR_INVALID, "partitioner: fixed needs 1 shard or more, min_size and "
                        "max_size 1 byte or more and a shard limit of 0 or more");
    return DT_OK;
}

dt_status dt_ps_server_config_check(const dt_ps_server_config *c)
{
    dt_status st;
    if ((st = check_seconds("coordinator_timeout", c->coordinator_timeout, 0, false, 86400)) ||
        (st = check_seconds("request_timeout", c->request_timeout, 0, false, 3600)))
        return st;
    if (c->threads < 1 || c->threads > 256)
        return dt_error(DT_ERR_INVALID, "threads: must be in 1..256, got %d", c->threads);
    return check_seconds("snapshot_secs", c->snapshot_secs, 0, true, 86400);
}

static dt_status check_cluster(const dt_cluster *cl)
{
    if (!cl->has_cluster)
        return dt_error(DT_ERR_INVALID, "TF_CONFIG: no cluster: a ps task needs TF_CONFIG's "
                        "cluster and task (or --task)");
    if (cl->task_type != DT_JOB_PS)
        return dt_error(DT_ERR_INVALID, "TF_CONFIG: task %s:%d is not a ps task (this serves "
                        "ps tasks)", dt_job_name(cl->task_type), cl->task_index);
    if (cl->n_tasks[DT_JOB_CHIEF] != 1)
        return dt_error(DT_ERR_INVALID, "TF_CONFIG: cluster.chief: parameter-server training "
                        "needs one chief (the coordinator), found %d",
                        cl->n_tasks[DT_JOB_CHIEF]);
    return DT_OK;
}

dt_status dt_ps_server_run(const dt_ps_server_config *c, dt_ps_server_report *report)
{
    dt_cluster cl = {0};
    uint8_t *secret = NULL;
    size_t secret_len = 0;
    dt_status st = dt_ps_server_config_check(c);
    if (st == DT_OK)
        st = dt_cluster_from_env(&cl);
    if (st == DT_OK && c->task)
        st = dt_cluster_set_task(&cl, c->task);
    if (st == DT_OK)
        st = check_cluster(&cl);
    if (st == DT_OK)
        st = dt_cluster_load_secret(c->secret_file, &secret, &secret_len);
    if (st == DT_OK)
        st = dt_cluster_check_secret(&cl, secret != NULL, c->insecure);
    if (st)
        goto done;
    if (report)
        dt_cluster_task_name(&cl, cl.task_type, cl.task_index, report->task, sizeof report->task);
    if (!secret)
        dt_log_to(NULL, DT_LOG_WARN, "dtrain: warning: no cluster secret: traffic between the tasks is "
               "unauthenticated");
    char path[4200];
    if (c->snapshot_dir) {
        snprintf(path, sizeof path, "%s/ps-%d.snapshot", c->snapshot_dir, cl.task_index);
        if (mkdir(c->snapshot_dir, 0755) != 0 && errno != EEXIST) {
            st = dt_error(DT_ERR_IO, "--snapshot-dir %s: %s", c->snapshot_dir, strerror(errno));
            goto done;
        }
    }
    dt_ps_service_options o = {
        .me = {secret, secret_len, cl.id, cl.task_type, cl.task_index},
        .cluster = &cl,
        .coordinator_timeout = c->coordinator_timeout,
        .request_timeout = c->request_timeout,
        .handshake_timeout = 0, /* the listener's: a short deadline (listener.h) */
        .threads = c->threads,
        .snapshot_path = c->snapshot_dir ? path : NULL,
        .snapshot_secs = c->snapshot_secs,
        .model_dir = c->model_dir,
    };
    dt_ps_service_stats stats = {0};
    st = dt_ps_serve(&o, &stats);
    if (report)
        report->requests = stats.requests, report->rows_pulled = stats.rows_pulled,
        report->rows_pushed = stats.rows_pushed, report->snapshots = stats.snapshots;
done:
    free(secret);
    dt_cluster_free(&cl);
    return st;
}
