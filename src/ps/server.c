/* A ps task's life from its configuration (see include/dtrain/ps.h). */
#include "dtrain/ps.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
                         .recovery_timeout = 60.0, .ps_timeout = 60.0,
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
        (st = check_seconds("recovery_timeout", o->recovery_timeout, 0, false, 86400)) ||
        (st = check_seconds("ps_timeout", o->ps_timeout, 0, false, 86400)))
        return st;
    if (o->num_workers < 0 || o->num_workers > DT_SPARSE_MAX_TASKS)
        return dt_error(DT_ERR_INVALID, "num_workers: must be in 0..%d, got %d",
                        DT_SPARSE_MAX_TASKS, o->num_workers);
    const dt_partitioner *p = &o->partitioner;
    if (o->partitioner_given &&
        ((p->kind == DT_PARTITION_FIXED && p->num_shards < 1) ||
         (p->kind != DT_PARTITION_FIXED && (p->shard_bytes < 1 || p->max_shards < 0))))
        return dt_error(DT_ERR_INVALID, "partitioner: fixed needs 1 shard or more, min_size and "
                        "max_size 1 byte or more and a shard limit of 0 or more");
    return DT_OK;
}

/* 32 hex digits into nonce; DT_ERR_INVALID naming where it came from. */
static dt_status parse_nonce(const char *text, const char *what, uint8_t *nonce)
{
    size_t n = strlen(text);
    for (size_t i = 0; i < n && n == 2 * DT_PS_JOB_NONCE_BYTES; i++)
        if (!isxdigit((unsigned char)text[i]))
            n = 0;
    if (n != 2 * DT_PS_JOB_NONCE_BYTES)
        return dt_error(DT_ERR_INVALID, "%s: expected %d hex digits, got '%.80s'", what,
                        2 * DT_PS_JOB_NONCE_BYTES, text);
    for (int i = 0; i < DT_PS_JOB_NONCE_BYTES; i++) {
        unsigned v;
        sscanf(text + 2 * i, "%2x", &v);
        nonce[i] = (uint8_t)v;
    }
    return DT_OK;
}

static dt_status check_job_id(const char *id, const char *what)
{
    if (strlen(id) > DT_PS_JOB_ID_CAP)
        return dt_error(DT_ERR_INVALID, "%s: at most %d bytes, got %zu", what, DT_PS_JOB_ID_CAP,
                        strlen(id));
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
    uint8_t nonce[DT_PS_JOB_NONCE_BYTES];
    if ((c->job_id && (st = check_job_id(c->job_id, "job_id"))) ||
        (c->job_nonce && (st = parse_nonce(c->job_nonce, "job_nonce", nonce))))
        return st;
    return check_seconds("snapshot_secs", c->snapshot_secs, 0, true, 86400);
}

/* The job this task's snapshots belong to, from c or the environment the launcher set; with
 * neither, a nonce of this task's own, so that no other task takes its snapshots for its own. */
static dt_status job_identity(const dt_ps_server_config *c, dt_ps_job *job)
{
    memset(job, 0, sizeof *job);
    const char *id = c->job_id ? c->job_id : getenv("DTRAIN_JOB_ID");
    const char *nonce = c->job_nonce ? c->job_nonce : getenv("DTRAIN_JOB_NONCE");
    const char *id_what = c->job_id ? "job_id" : "DTRAIN_JOB_ID";
    const char *nonce_what = c->job_nonce ? "job_nonce" : "DTRAIN_JOB_NONCE";
    dt_status st;
    if (id && *id) {
        if ((st = check_job_id(id, id_what)))
            return st;
        snprintf(job->id, sizeof job->id, "%s", id);
    }
    if (nonce && *nonce)
        return parse_nonce(nonce, nonce_what, job->nonce);
    if (getentropy(job->nonce, sizeof job->nonce) != 0)
        return dt_error(DT_ERR_IO, "no random bytes for a job nonce: %s", strerror(errno));
    if (c->snapshot_dir && c->snapshot_secs > 0)
        dt_log_to(NULL, DT_LOG_WARN, "dtrain server: warning: no job nonce (DTRAIN_JOB_NONCE, "
                  "which dtrain launch sets): this task's snapshots cannot be told from another "
                  "job's, so a task started again will not restore them");
    return DT_OK;
}

static dt_status check_cluster(const dt_cluster *cl)
{
    if (!cl->has_cluster)
        return dt_error(DT_ERR_INVALID, "TF_CONFIG: no cluster: a ps task needs TF_CONFIG's "
                        "cluster and task (or --task)");
    if (cl->task_type != DT_JOB_PS)
        return dt_error(DT_ERR_INVALID, "TF_CONFIG: task %s:%d is not a ps task (this serves "
                        "ps tasks)", dt_job_name(cl->task_type), cl->task_index);
    /* A sparse cluster's ps knows no chief: its workers lead themselves, worker 0 first. */
    if (!cl->sparse && cl->n_tasks[DT_JOB_CHIEF] != 1)
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
    dt_ps_job job;
    if (st == DT_OK)
        st = job_identity(c, &job);
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
        .job = &job,
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
