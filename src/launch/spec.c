/* The job spec of a launch (see include/dtrain/launch.h): the tasks, the command they run and
 * the policy. It owns the task array, the program's path and the argv array, and nothing the
 * caller passed in. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain/launch.h"

void dt_launch_spec_init(dt_launch_spec *s)
{
    memset(s, 0, sizeof *s);
    s->kind = DT_LAUNCH_SYNC;
    s->tf_config = true;
    s->host = "127.0.0.1";
    s->grace = 10.0;
    s->serve_stop_seconds = 2.0;
    s->out_fd = 1;
    s->err_fd = 2;
}

void dt_launch_spec_free(dt_launch_spec *s)
{
    free(s->tasks);
    free(s->exe);
    free(s->argv);
    free(s->mpi_program);
    s->mpi_program = NULL;
    s->tasks = NULL;
    s->exe = NULL;
    s->argv = NULL;
    s->n_tasks = 0;
}

static dt_status add_task(dt_launch_spec *s, dt_job job, int index, const char *name)
{
    dt_launch_task *t = realloc(s->tasks, (size_t)(s->n_tasks + 1) * sizeof *t);
    if (!t)
        return dt_error(DT_ERR_NOMEM, "no memory for %d tasks", s->n_tasks + 1);
    s->tasks = t;
    t = &s->tasks[s->n_tasks++];
    t->job = job;
    t->index = index;
    if (name)
        snprintf(t->name, sizeof t->name, "%s", name);
    else
        snprintf(t->name, sizeof t->name, "%s:%d", dt_job_name(job), index);
    return DT_OK;
}

dt_status dt_launch_spec_cluster(dt_launch_spec *s, const int n[DT_JOB_COUNT])
{
    if (n[DT_JOB_CHIEF] < 0 || n[DT_JOB_CHIEF] > 1)
        return dt_error(DT_ERR_INVALID, "launch: a cluster of %d chief tasks", n[DT_JOB_CHIEF]);
    for (int j = 0; j < DT_JOB_COUNT; j++) {
        if (n[j] < 0)
            return dt_error(DT_ERR_INVALID, "launch: a cluster of %d %s tasks", n[j],
                            dt_job_name((dt_job)j));
        s->n_jobs[j] = n[j];
        for (int i = 0; i < n[j]; i++) {
            dt_status st = add_task(s, (dt_job)j, i, NULL);
            if (st)
                return st;
        }
    }
    s->kind = n[DT_JOB_PS] > 0 && n[DT_JOB_CHIEF] > 0 ? DT_LAUNCH_PS : DT_LAUNCH_SYNC;
    return DT_OK;
}

/* Sets exe to path and allocates an argv array for n strings and the final NULL. */
static dt_status set_program(dt_launch_spec *s, const char *path, int n)
{
    free(s->exe);
    free(s->argv);
    s->exe = strdup(path);
    s->argv = calloc((size_t)n + 1, sizeof *s->argv);
    if (!s->exe || !s->argv)
        return dt_error(DT_ERR_NOMEM, "no memory for the command");
    return DT_OK;
}

/* cmd0, or this program's path when it is self_name. */
static const char *program_of(const char *cmd0, const char *self_name, char self[PATH_MAX])
{
    if (self_name && strcmp(cmd0, self_name) == 0) {
        ssize_t r = readlink("/proc/self/exe", self, PATH_MAX - 1);
        if (r > 0) {
            self[r] = '\0';
            return self;
        }
    }
    return cmd0;
}

dt_status dt_launch_spec_command(dt_launch_spec *s, char *const *cmd, int n_cmd,
                                 const char *self_name)
{
    if (n_cmd < 1)
        return dt_error(DT_ERR_INVALID, "launch: no command to run");
    char self[PATH_MAX];
    dt_status st = set_program(s, program_of(cmd[0], self_name, self), n_cmd);
    if (st)
        return st;
    for (int i = 0; i < n_cmd; i++)
        s->argv[i] = cmd[i];
    return DT_OK;
}

/* Finds an executable name in PATH, as execvp would. */
static bool find_in_path(const char *name, char *out, size_t cap)
{
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path;; p++) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        struct stat sb;
        if (len == 0)
            snprintf(out, cap, "%s", name);
        else
            snprintf(out, cap, "%.*s/%s", (int)len, p, name);
        if (stat(out, &sb) == 0 && S_ISREG(sb.st_mode) && access(out, X_OK) == 0)
            return true;
        if (!end)
            return false;
        p = end;
    }
}

dt_status dt_launch_spec_mpirun(dt_launch_spec *s, int np, char *const *cmd, int n_cmd,
                                const char *self_name)
{
    if (n_cmd < 1)
        return dt_error(DT_ERR_INVALID, "launch: no command to run");
    char mpirun[PATH_MAX], self[PATH_MAX];
    if (!find_in_path("mpirun", mpirun, sizeof mpirun))
        return dt_error(DT_ERR_UNSUPPORTED, "--comm mpi: mpirun is not in PATH (install Open "
                        "MPI: the Debian package openmpi-bin)");
    dt_status st = set_program(s, mpirun, n_cmd + 8);
    if (st)
        return st;
    if ((st = add_task(s, DT_JOB_WORKER, 0, "mpi")))
        return st;
    s->kind = DT_LAUNCH_SYNC;
    s->tf_config = false;
    snprintf(s->np_text, sizeof s->np_text, "%d", np);
    int n = 0;
    s->argv[n++] = "mpirun";
    s->argv[n++] = "-np";
    s->argv[n++] = s->np_text;
    /* Open MPI refuses to run as root without it: containers often are root. */
    if (geteuid() == 0)
        s->argv[n++] = "--allow-run-as-root";
    /* A local cluster may ask for more ranks than there are cores. */
    s->argv[n++] = "--oversubscribe";
    /* Ranks on other hosts get the secret too, not only the local ones that inherit it. */
    s->argv[n++] = "-x";
    s->argv[n++] = "DTRAIN_CLUSTER_SECRET";
    /* mpirun runs the command: its path (this program's, for self_name) is an argument, kept
     * in a copy the spec owns. */
    if (!(s->mpi_program = strdup(program_of(cmd[0], self_name, self))))
        return dt_error(DT_ERR_NOMEM, "no memory for the command");
    s->argv[n++] = s->mpi_program;
    for (int i = 1; i < n_cmd; i++)
        s->argv[n++] = cmd[i];
    return DT_OK;
}
