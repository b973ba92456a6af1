/* Launch: a job of local processes, and their supervision.
 *
 * A job spec names the tasks of a cluster (each a dt_job and an index), the command every task
 * runs, its environment and the restart policy. dt_launch_run starts the tasks on this machine,
 * each in its own process group with its own TF_CONFIG (free loopback ports, written by
 * net/'s dt_cluster_tf_config) and the shared cluster secret, prints every line the tasks write
 * with a "[worker:1] " prefix, and decides what each task's end means through
 * dt_launch_decide: a pure function of the cluster kind, the task, how it ended and the restarts
 * so far, so every rule can be tested without a process. Every task is reaped on every path, and
 * every wait has a deadline.
 *
 * The library installs no signal handler on its own: a program that wants Ctrl-C and SIGTERM to
 * stop its cluster calls dt_launch_signals_install before dt_launch_run. */
#ifndef DTRAIN_LAUNCH_H
#define DTRAIN_LAUNCH_H

#include <stdbool.h>

#include "dtrain/api.h"
#include "dtrain/cluster.h"
#include "dtrain/status.h"

/* ---- the restart rules ---- */

typedef enum {
    /* Every chief and worker trains (all-reduce, or any command): the run succeeds when all of
     * them have ended with status 0; a failure stops the cluster. */
    DT_LAUNCH_SYNC,
    /* Parameter-server training: the chief coordinates and survives a lost worker, so a failed
     * worker or ps task alone is started again, and the chief's end is the run's. */
    DT_LAUNCH_PS,
} dt_launch_kind;

/* What dt_launch_decide is told about a task that ended. */
typedef struct {
    dt_launch_kind kind;
    dt_job job;            /* the task that ended */
    bool ok;               /* it exited with status 0 */
    bool stopping;         /* the cluster is being stopped (a failure, a signal, a failed start) */
    bool training_done;    /* training ended well: the tasks still running are being stopped */
    bool training_left;    /* another chief or worker has not yet ended with status 0 */
    int task_restarts;     /* times this task alone was started again in this cluster attempt */
    int cluster_restarts;  /* times the whole cluster was started again */
    int max_restarts;
} dt_launch_exit;

typedef enum {
    DT_LAUNCH_CONTINUE,        /* nothing changes: the others go on (or the stop under way does) */
    DT_LAUNCH_RESTART_TASK,    /* start this task alone again; the others go on */
    DT_LAUNCH_LEAVE_OUT,       /* a worker past its restarts: the chief goes on without it */
    DT_LAUNCH_TRAINING_DONE,   /* training succeeded: stop the tasks that serve; the run ends well */
    DT_LAUNCH_RESTART_CLUSTER, /* a failure: stop every task, then start the whole cluster again */
    DT_LAUNCH_FAIL,            /* a failure: stop every task; the run ends with the task's status */
} dt_launch_action;

/* What to do about a task's end. Pure: no I/O, no state; the same answer for the same input. */
DT_API dt_launch_action dt_launch_decide(const dt_launch_exit *e);

/* "continue", "restart task", ...: for messages and tests. */
DT_API const char *dt_launch_action_name(dt_launch_action a);

/* ---- the job spec ---- */

typedef struct {
    dt_job job;
    int index;
    char name[40]; /* "worker:1": its output lines' prefix and its DTRAIN_TASK */
} dt_launch_task;

/* What dt_launch_run reports as it goes (the caller prints it). */
typedef enum {
    DT_LAUNCH_EV_TASK_FAILED,     /* task, pid, wstatus: the run stops (or restarts whole) */
    DT_LAUNCH_EV_TASK_RESTART,    /* task, pid, wstatus, restarts: it alone starts again */
    DT_LAUNCH_EV_TASK_LEFT_OUT,   /* task, pid, wstatus: a worker past its restarts */
    DT_LAUNCH_EV_CLUSTER_RESTART, /* task (the one that failed), restarts: all start again */
    DT_LAUNCH_EV_START_FAILED,    /* task, message: it could not be started; the run stops */
    DT_LAUNCH_EV_SIGNAL,          /* sig: a signal asked to stop; every task is sent it */
    DT_LAUNCH_EV_SIGNAL_KILL,     /* sig: another one while stopping; every task is killed */
    DT_LAUNCH_EV_SERVER_KILLED,   /* task: a ps task did not stop within grace of SIGTERM */
} dt_launch_event_kind;

typedef struct {
    dt_launch_event_kind kind;
    const dt_launch_task *task; /* NULL for the signal events */
    long pid;
    int wstatus;      /* as waitpid gives it */
    int restarts;     /* the count this restart makes (1 for the first) */
    int max_restarts;
    int sig;
    double grace;     /* SERVER_KILLED: the seconds it had */
    const char *message; /* START_FAILED: why (also the thread's last error) */
} dt_launch_event;

typedef void (*dt_launch_event_fn)(void *ctx, const dt_launch_event *e);

/* Caller-owned; dt_launch_spec_init gives the defaults, dt_launch_spec_free what it allocated. */
typedef struct {
    dt_launch_kind kind;
    dt_launch_task *tasks;  /* in start order (owned) */
    int n_tasks;
    int n_jobs[DT_JOB_COUNT]; /* the cluster that TF_CONFIG describes */
    bool tf_config;         /* give every task TF_CONFIG and DTRAIN_TASK (default true) */
    const char *host;       /* where the tasks listen (default "127.0.0.1"; borrowed) */
    char *exe;              /* the program every task runs, found in PATH as execvp does (owned) */
    char **argv;            /* its argv, NULL-terminated (the array owned, the strings borrowed) */
    char *const *envp;      /* the environment given on, NULL: environ (borrowed) */
    const char *secret;     /* DTRAIN_CLUSTER_SECRET of every task (borrowed) */
    int max_restarts;       /* restarts of the whole cluster, or with DT_LAUNCH_PS of each task */
    double grace;           /* seconds between a stopping signal and SIGKILL (default 10) */
    double serve_stop_seconds; /* after training, seconds ps tasks have to end on their own
                                  before SIGTERM (default 2) */
    int out_fd, err_fd;     /* where the tasks' prefixed lines go (default 1 and 2) */
    dt_launch_event_fn on_event; /* NULL: events are not reported */
    void *event_ctx;
    char np_text[16];       /* mpirun's -np (dt_launch_spec_mpirun) */
    char *mpi_program;      /* the command mpirun runs (dt_launch_spec_mpirun; owned) */
} dt_launch_spec;

DT_API void dt_launch_spec_init(dt_launch_spec *s);
/* Accepts a spec that dt_launch_spec_init zeroed, however far it was built. */
DT_API void dt_launch_spec_free(dt_launch_spec *s);

/* The tasks of a cluster of n[job] tasks (at most one chief), started in job order: chief,
 * workers, ps, evaluator. kind becomes DT_LAUNCH_PS when there are ps tasks and a chief. */
DT_API dt_status dt_launch_spec_cluster(dt_launch_spec *s, const int n[DT_JOB_COUNT]);

/* Every task runs cmd[0..n_cmd) (strings borrowed). A cmd[0] equal to self_name (may be NULL)
 * runs this very program (/proc/self/exe), so a build that is not installed runs itself. */
DT_API dt_status dt_launch_spec_command(dt_launch_spec *s, char *const *cmd, int n_cmd,
                                        const char *self_name);

/* One task, "mpi" (a worker to the rules), running mpirun -np np with cmd, which starts the
 * training ranks itself: no TF_CONFIG, the secret passed on to every rank. DT_ERR_UNSUPPORTED
 * when mpirun is not in PATH. */
DT_API dt_status dt_launch_spec_mpirun(dt_launch_spec *s, int np, char *const *cmd,
                                       int n_cmd, const char *self_name);

/* ---- running ---- */

typedef struct {
    int exit_status;      /* 0; the failing task's status (its code, or 128 + signal); 128 + the
                             signal that stopped the run; 127, 126 or 1 when a task could not be
                             started (command not found, not runnable, other) */
    int interrupted;      /* the signal that stopped the run, 0 if none */
    int cluster_restarts; /* times the whole cluster was started again */
} dt_launch_result;

/* Runs the job until every task has ended and been reaped and its output printed, starting
 * tasks or the cluster again as the rules say. DT_OK when the tasks ran (r says how they
 * ended); an error when no run could be made (memory, ports, pipes). */
DT_API dt_status dt_launch_run(const dt_launch_spec *s, dt_launch_result *r);

/* ---- signals ---- */

/* Catches SIGINT, SIGTERM and SIGHUP (each left as it is when ignored now: nohup, or a shell's
 * background job, which the caller keeps) and SIGCHLD until dt_launch_signals_restore. The
 * handlers only write a byte to a self-pipe that dt_launch_run polls: the first signal stops the
 * cluster with it (SIGKILL after the grace period), another one kills it. Without them a run
 * looks for ended tasks every 50 ms. One installation per process at a time. */
DT_API dt_status dt_launch_signals_install(void);
DT_API void dt_launch_signals_restore(void);

#endif
