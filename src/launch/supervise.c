/* The supervisor of a launch: dt_launch_run (see include/dtrain/launch.h).
 *
 * It owns the child processes, their output pipes and their life. Each task runs in its own
 * process group, so a stopping signal reaches whatever the task started, and a terminal's Ctrl-C
 * reaches launch alone, which decides. One poll() loop waits on the tasks' pipes and the signal
 * self-pipe (interrupt.c) with a deadline: the next SIGKILL after a grace period, the next
 * SIGTERM of a task serving after training, the end of draining. Every task that ends is reaped
 * at once (its group killed while its pid is still ours), its last output printed, and what its
 * end means is asked of dt_launch_decide (restart.c); this file only carries the answer out.
 * Every child is reaped on every path, including a failed start and an interrupt. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../core/clock.h"
#include "dtrain/launch.h"
#include "interrupt.h"
#include "mux.h"
#include "ports.h"

extern char **environ;

/* After the last task has exited, how long to keep reading output still in flight. Only a
 * process that left its task's process group can hold a pipe open this long. */
#define DRAIN_SECONDS 1.0
/* Without the signal self-pipe nothing wakes the loop when a task ends: it looks this often. */
#define POLL_CAP_MS 50

struct task {
    const dt_launch_task *spec;
    pid_t pid;       /* > 0 from start until reaped; the task's process group too */
    bool stop_asked; /* sent a stopping signal: SIGKILL at kill_at */
    bool killed;     /* sent SIGKILL */
    double kill_at;
    double term_at;  /* a task serving once training is done: SIGTERM then, unless it ended */
    bool exited_ok;  /* reaped with status 0 */
    int restarts;    /* times this task alone was started again in this attempt */
    bool restart_pending;
    dt_mux_stream out, err;
};

struct run {
    const dt_launch_spec *s;
    struct task *tasks;
    int n_tasks;
    uint16_t *ports; /* one per task TF_CONFIG lists: chief, workers, ps */
    int n_ports;
    dt_cluster cluster; /* the cluster of this attempt's ports */
    int devnull;
    int cluster_restarts;
    struct pollfd *pfds;
    dt_mux_stream **which;

    /* The state of one attempt. */
    bool stopping;      /* a failure or an interrupt: every task is being stopped */
    bool training_done; /* training succeeded: the tasks that serve are being stopped */
    int interrupted;    /* the signal that asked launch to stop, 0 if none */
    int failed;         /* index of the first failing task, -1 if none */
    int fail_status;    /* its exit status: the code, or 128 + signal */
    bool restart_cluster; /* the rules start the whole cluster again after this attempt */
    int start_status;   /* a task could not be started: 127, 126 or 1; 0 otherwise */

    /* Every task's DTRAIN_JOB_ID and DTRAIN_JOB_NONCE: what a ps task's snapshots are bound
     * to, the same for a task started again, another for the next launch. */
    char job_id[96];    /* "" when the environment names the job already */
    char job_nonce[40];
};

static void emit(const struct run *R, dt_launch_event e)
{
    e.max_restarts = R->s->max_restarts;
    if (R->s->on_event)
        R->s->on_event(R->s->event_ctx, &e);
}

static bool is_training(dt_job job) { return job == DT_JOB_CHIEF || job == DT_JOB_WORKER; }

/* ---- a task's environment ---- */

/* The base environment without TF_CONFIG, DTRAIN_TASK, DTRAIN_CLUSTER_SECRET and
 * DTRAIN_JOB_NONCE, then those of this task and the job. Only the strings in own[] are
 * allocated here. */
struct task_env {
    char **envp;
    char *own[5];
};

/* The job's identity: the id the environment gives (a platform's job), else one of this launch;
 * and a fresh nonce, so that no later launch under the same id takes this one's snapshots. */
static dt_status job_identity(struct run *R)
{
    char *const *base = R->s->envp ? R->s->envp : environ;
    bool named = false;
    for (size_t i = 0; base[i]; i++)
        named |= strncmp(base[i], "DTRAIN_JOB_ID=", 14) == 0 && base[i][14] != '\0';
    if (!named) {
        char host[64] = "localhost";
        gethostname(host, sizeof host - 1);
        snprintf(R->job_id, sizeof R->job_id, "launch-%.40s-%ld", host, (long)getpid());
    }
    uint8_t nonce[16];
    if (getentropy(nonce, sizeof nonce) != 0)
        return dt_error(DT_ERR_IO, "launch: no random bytes for the job's nonce: %s",
                        strerror(errno));
    for (int i = 0; i < 16; i++)
        snprintf(R->job_nonce + 2 * i, 3, "%02x", nonce[i]);
    return DT_OK;
}

static void task_env_free(struct task_env *e)
{
    for (int i = 0; i < 5; i++)
        free(e->own[i]);
    free(e->envp);
    memset(e, 0, sizeof *e);
}

static bool has_name(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

static dt_status task_env_build(const struct run *R, const struct task *t, struct task_env *e)
{
    char *const *base = R->s->envp ? R->s->envp : environ;
    char *json = NULL;
    memset(e, 0, sizeof *e);
    size_t n = 0;
    while (base[n])
        n++;
    if (!(e->envp = malloc((n + 6) * sizeof *e->envp)))
        goto nomem;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!has_name(base[i], "TF_CONFIG") && !has_name(base[i], "DTRAIN_TASK") &&
            !has_name(base[i], "DTRAIN_CLUSTER_SECRET") && !has_name(base[i], "DTRAIN_JOB_NONCE") &&
            !(R->job_id[0] && has_name(base[i], "DTRAIN_JOB_ID")))
            e->envp[k++] = base[i];
    if (asprintf(&e->own[3], "DTRAIN_JOB_NONCE=%s", R->job_nonce) < 0) {
        e->own[3] = NULL;
        goto nomem;
    }
    e->envp[k++] = e->own[3];
    if (R->job_id[0]) {
        if (asprintf(&e->own[4], "DTRAIN_JOB_ID=%s", R->job_id) < 0) {
            e->own[4] = NULL;
            goto nomem;
        }
        e->envp[k++] = e->own[4];
    }
    if (R->s->secret) {
        if (asprintf(&e->own[0], "DTRAIN_CLUSTER_SECRET=%s", R->s->secret) < 0) {
            e->own[0] = NULL;
            goto nomem;
        }
        e->envp[k++] = e->own[0];
    }
    if (R->s->tf_config) {
        /* TF_CONFIG from net/'s writer, the inverse of the parser every task runs. */
        if (!(json = dt_cluster_tf_config(&R->cluster, t->spec->job, t->spec->index)))
            goto nomem;
        if (asprintf(&e->own[1], "TF_CONFIG=%s", json) < 0) {
            e->own[1] = NULL;
            goto nomem;
        }
        if (asprintf(&e->own[2], "DTRAIN_TASK=%s", t->spec->name) < 0) {
            e->own[2] = NULL;
            goto nomem;
        }
        e->envp[k++] = e->own[1];
        e->envp[k++] = e->own[2];
    }
    e->envp[k] = NULL;
    free(json);
    return DT_OK;
nomem:
    free(json);
    task_env_free(e);
    return dt_error(DT_ERR_NOMEM, "no memory for the environment of task %s", t->spec->name);
}

/* ---- starting and stopping tasks ---- */

/* In the child between fork and exec: only async-signal-safe calls. Never returns: it ends in
 * the exec, or in _exit, the one way for a forked copy of this process to end without running
 * the parent's atexit handlers and flushing its stdio buffers a second time. */
static void child_exec(const struct run *R, const sigset_t *mask, pid_t parent, int out_w,
                       int err_w, int status_w, char **envp)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    dt_launch_signals_reset_in_child();
    /* A program may ignore SIGPIPE for its own writes; a task should die of a closed pipe as
     * usual. */
    sigaction(SIGPIPE, &dfl, NULL);
    /* Should launch itself be killed (SIGKILL gives it no chance to stop anyone), the kernel
     * kills its tasks rather than leaving them running unowned. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int e = 0;
    if (getppid() != parent) {
        e = ESRCH;
        goto fail;
    }
    /* Its own process group: a terminal's Ctrl-C reaches launch only, which decides, and a
     * stopping signal sent to the group reaches the processes the task started too. */
    setpgid(0, 0);
    /* Tasks share no input: a background process group reading the terminal would stop. */
    if (dup2(R->devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) {
        e = errno;
        goto fail;
    }
    sigprocmask(SIG_SETMASK, mask, NULL);
    execvpe(R->s->exe, R->s->argv, envp);
    e = errno;
fail:;
    ssize_t r = write(status_w, &e, sizeof e);
    (void)r;
    _exit(127);
}

static void close_pair(int fds[2])
{
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]), fds[i] = -1;
}

/* Starts task t; returns 0, or the exit status for the run with the error message set: 127
 * when the command does not exist, 126 when it cannot be run, 1 when no process can be started.
 * The exec's outcome comes back on a close-on-exec pipe: end of file means the command runs; an
 * errno means it could not be run, reported once rather than as a failure of every task. */
static int start_task(struct run *R, struct task *t)
{
    int status = 1;
    int out[2] = {-1, -1}, err[2] = {-1, -1}, st[2] = {-1, -1};
    struct task_env env;
    dt_status s = task_env_build(R, t, &env);
    if (s)
        return 1;
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(st, O_CLOEXEC) != 0) {
        s = dt_error(DT_ERR_IO, "task %s: pipe: %s", t->spec->name, strerror(errno));
        goto fail;
    }
    /* Signals wait until the child has dropped launch's handlers, which write to the self-pipe
     * that the child shares until its exec. */
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        child_exec(R, &old, parent, out[1], err[1], st[1], env.envp);
    int fork_errno = errno;
    if (pid > 0)
        setpgid(pid, pid); /* also here, so the group exists before kill(-pid) can be called */
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(out[1]), out[1] = -1;
    close(err[1]), err[1] = -1;
    close(st[1]), st[1] = -1;
    if (pid < 0) {
        s = dt_error(DT_ERR_IO, "task %s: fork: %s", t->spec->name, strerror(fork_errno));
        goto fail;
    }
    /* The child writes its errno or execs at once (the status pipe closes): no deadline is
     * needed beyond the exec's own. */
    int e = 0;
    ssize_t r;
    do
        r = read(st[0], &e, sizeof e);
    while (r < 0 && errno == EINTR);
    if (r > 0) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        s = dt_error(DT_ERR_IO, "cannot run '%s': %s", R->s->exe, strerror(e));
        status = e == ENOENT ? 127 : 126;
        goto fail;
    }
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    t->pid = pid;
    dt_mux_open(&t->out, out[0], R->s->out_fd, t->spec->name);
    dt_mux_open(&t->err, err[0], R->s->err_fd, t->spec->name);
    out[0] = err[0] = -1;
fail:
    close_pair(out);
    close_pair(err);
    close_pair(st);
    task_env_free(&env);
    return s ? status : 0;
}

/* Sends sig to t's process group; SIGKILL follows after the grace period. t->pid is not reaped
 * yet (at most a zombie), so its group id cannot belong to anyone else. */
static void signal_task(const struct run *R, struct task *t, int sig)
{
    if (t->pid <= 0)
        return;
    kill(-t->pid, sig);
    if (sig == SIGKILL) {
        t->killed = true;
    } else if (!t->stop_asked) {
        t->stop_asked = true;
        t->kill_at = dt_clock_now() + R->s->grace;
    }
}

static void stop_all(struct run *R, int sig)
{
    R->stopping = true;
    for (int i = 0; i < R->n_tasks; i++)
        signal_task(R, &R->tasks[i], sig);
}

static int status_code(int wstatus)
{
    return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
}

/* Carries out what the rules decide about task i's end. */
static void task_exited(struct run *R, int i, pid_t pid, int wstatus)
{
    struct task *t = &R->tasks[i];
    const dt_launch_spec *s = R->s;
    bool ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
    t->exited_ok = ok;
    bool left = false;
    for (int k = 0; k < R->n_tasks; k++)
        left |= is_training(R->tasks[k].spec->job) && !R->tasks[k].exited_ok;
    dt_launch_exit e = {
        .kind = s->kind, .job = t->spec->job, .ok = ok, .stopping = R->stopping,
        .training_done = R->training_done, .training_left = left, .task_restarts = t->restarts,
        .cluster_restarts = R->cluster_restarts, .max_restarts = s->max_restarts,
    };
    dt_launch_event ev = {.task = t->spec, .pid = (long)pid, .wstatus = wstatus};
    dt_launch_action a = dt_launch_decide(&e);
    switch (a) {
    case DT_LAUNCH_CONTINUE:
        break;
    case DT_LAUNCH_RESTART_TASK:
        t->restarts++;
        t->restart_pending = true;
        ev.kind = DT_LAUNCH_EV_TASK_RESTART, ev.restarts = t->restarts;
        emit(R, ev);
        break;
    case DT_LAUNCH_LEAVE_OUT:
        ev.kind = DT_LAUNCH_EV_TASK_LEFT_OUT;
        emit(R, ev);
        break;
    case DT_LAUNCH_RESTART_CLUSTER:
    case DT_LAUNCH_FAIL:
        ev.kind = DT_LAUNCH_EV_TASK_FAILED;
        emit(R, ev);
        R->failed = i;
        R->fail_status = status_code(wstatus);
        R->restart_cluster = a == DT_LAUNCH_RESTART_CLUSTER;
        stop_all(R, SIGTERM);
        break;
    case DT_LAUNCH_TRAINING_DONE:
        /* ps tasks serve until told otherwise. A parameter-server chief has told them and the
         * workers (they end on their own within a second or two); for any other command,
         * SIGTERM after that time. */
        R->training_done = true;
        for (int k = 0; k < R->n_tasks; k++)
            if (R->tasks[k].spec->job == DT_JOB_PS ||
                (s->kind == DT_LAUNCH_PS && R->tasks[k].pid > 0))
                R->tasks[k].term_at = dt_clock_now() + s->serve_stop_seconds;
        break;
    }
}

/* A task could not be started: the run stops with the status that says why. */
static void start_failed(struct run *R, struct task *t, int status)
{
    R->start_status = status;
    dt_launch_event ev = {.kind = DT_LAUNCH_EV_START_FAILED, .task = t->spec,
                          .message = dt_last_error()};
    emit(R, ev);
    stop_all(R, SIGTERM);
}

/* Starts again the tasks the rules restart alone. Once training has ended well (a chief that
 * finished in the same pass as a ps task failed), nothing is started again: a task started then
 * would serve a job that is over. */
static void restart_pending(struct run *R)
{
    for (int i = 0; i < R->n_tasks && !R->stopping; i++) {
        struct task *t = &R->tasks[i];
        if (!t->restart_pending || t->pid > 0)
            continue;
        t->restart_pending = false;
        if (R->training_done)
            continue;
        t->stop_asked = t->killed = t->exited_ok = false;
        t->term_at = 0;
        int status = start_task(R, t);
        if (status)
            start_failed(R, t, status);
    }
}

/* Reaps every task that has ended. */
static void reap(struct run *R)
{
    for (int i = 0; i < R->n_tasks; i++) {
        struct task *t = &R->tasks[i];
        if (t->pid <= 0)
            continue;
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)t->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0)
            continue;
        /* While it is a zombie its pid, and so its group id, is still ours: whatever it left
         * running in its group is killed now, or it would be orphaned and hold the output pipes
         * open. The zombie is reaped at once: no wait here blocks. */
        kill(-t->pid, SIGKILL);
        int ws = 0;
        while (waitpid(t->pid, &ws, 0) < 0 && errno == EINTR) {
        }
        pid_t pid = t->pid;
        t->pid = 0;
        /* Its last words come before the verdict on it. */
        dt_mux_read(&t->out, true);
        dt_mux_read(&t->err, true);
        task_exited(R, i, pid, ws);
    }
}

/* Acts on the signals that arrived: the first Ctrl-C or SIGTERM is forwarded to every task,
 * with SIGKILL after the grace period; another one (or one during a failure's stop) kills. */
static void handle_signals(struct run *R)
{
    int sig = dt_launch_take_signal();
    if (!sig)
        return;
    dt_launch_event ev = {.sig = sig};
    if (!R->stopping) {
        R->interrupted = sig;
        ev.kind = DT_LAUNCH_EV_SIGNAL;
        emit(R, ev);
        stop_all(R, sig);
        return;
    }
    if (!R->interrupted)
        R->interrupted = sig;
    ev.kind = DT_LAUNCH_EV_SIGNAL_KILL;
    emit(R, ev);
    stop_all(R, SIGKILL);
}

/* SIGTERM for the tasks still serving after training, SIGKILL for the tasks whose grace
 * period is over; returns the next deadline (0: none). */
static double enforce_deadlines(struct run *R, double now)
{
    double next = 0;
    for (int i = 0; i < R->n_tasks; i++) {
        struct task *t = &R->tasks[i];
        if (t->pid > 0 && t->term_at > 0 && !t->stop_asked) {
            if (now >= t->term_at)
                signal_task(R, t, SIGTERM);
            else if (next == 0 || t->term_at < next)
                next = t->term_at;
        }
        if (t->pid <= 0 || !t->stop_asked || t->killed)
            continue;
        if (now >= t->kill_at) {
            if (t->spec->job == DT_JOB_PS && R->training_done && !R->stopping) {
                dt_launch_event ev = {.kind = DT_LAUNCH_EV_SERVER_KILLED, .task = t->spec,
                                      .pid = (long)t->pid, .grace = R->s->grace};
                emit(R, ev);
            }
            signal_task(R, t, SIGKILL);
        } else if (next == 0 || t->kill_at < next) {
            next = t->kill_at;
        }
    }
    return next;
}

/* Runs the cluster once, until every task has been reaped and its output printed. Returns the
 * exit status of the attempt. */
static int run_attempt(struct run *R)
{
    R->stopping = R->training_done = R->restart_cluster = false;
    R->failed = -1;
    R->fail_status = 0;
    R->start_status = 0;
    for (int i = 0; i < R->n_tasks; i++) {
        struct task *t = &R->tasks[i];
        t->pid = 0;
        t->restarts = 0, t->restart_pending = false;
        t->stop_asked = t->killed = t->exited_ok = false;
        t->term_at = 0;
        t->out.fd = t->err.fd = -1;
    }
    for (int i = 0; i < R->n_tasks && !R->stopping; i++) {
        /* A Ctrl-C or a task failing early stops the start too. */
        handle_signals(R);
        reap(R);
        if (R->stopping)
            break;
        int status = start_task(R, &R->tasks[i]);
        if (status)
            start_failed(R, &R->tasks[i], status);
    }
    int wake_fd = dt_launch_wake_fd();
    bool draining = false;
    double drain_at = 0;
    for (;;) {
        handle_signals(R);
        reap(R);
        restart_pending(R);
        double now = dt_clock_now();
        double deadline = enforce_deadlines(R, now);
        bool running = false;
        int n = 0;
        if (wake_fd >= 0) {
            R->pfds[n] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
            R->which[n++] = NULL;
        }
        int first_stream = n;
        for (int i = 0; i < R->n_tasks; i++) {
            struct task *t = &R->tasks[i];
            running |= t->pid > 0;
            dt_mux_stream *ss[2] = {&t->out, &t->err};
            for (int k = 0; k < 2; k++)
                if (ss[k]->fd >= 0) {
                    R->pfds[n] = (struct pollfd){.fd = ss[k]->fd, .events = POLLIN};
                    R->which[n++] = ss[k];
                }
        }
        if (!running) {
            if (n == first_stream)
                break;
            if (!draining) {
                draining = true;
                drain_at = now + DRAIN_SECONDS;
            } else if (now >= drain_at) {
                for (int i = 0; i < R->n_tasks; i++) {
                    dt_mux_close(&R->tasks[i].out);
                    dt_mux_close(&R->tasks[i].err);
                }
                break;
            }
            deadline = drain_at;
        }
        int timeout_ms = -1;
        if (deadline > 0) {
            double ms = (deadline - now) * 1000.0 + 1.0;
            timeout_ms = ms < 0 ? 0 : ms > 3600e3 ? 3600000 : (int)ms;
        }
        if (wake_fd < 0 && running && (timeout_ms < 0 || timeout_ms > POLL_CAP_MS))
            timeout_ms = POLL_CAP_MS;
        int r = poll(R->pfds, (nfds_t)n, timeout_ms);
        if (r < 0 && errno != EINTR) {
            /* Not expected (EINVAL, ENOMEM): do not spin; the loop still reaps and kills. */
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        for (int k = first_stream; k < n && r > 0; k++)
            if (R->pfds[k].revents)
                dt_mux_read(R->which[k], false);
    }
    if (R->start_status)
        return R->start_status;
    if (R->interrupted)
        return 128 + R->interrupted;
    if (R->failed >= 0)
        return R->fail_status;
    return 0;
}

static void run_free(struct run *R)
{
    dt_cluster_free(&R->cluster);
    if (R->devnull >= 0)
        close(R->devnull);
    free(R->which);
    free(R->pfds);
    free(R->ports);
    free(R->tasks);
}

dt_status dt_launch_run(const dt_launch_spec *s, dt_launch_result *r)
{
    dt_status st = DT_OK;
    struct run R;
    memset(&R, 0, sizeof R);
    memset(r, 0, sizeof *r);
    R.s = s;
    R.devnull = -1;
    R.n_tasks = s->n_tasks;
    if (s->n_tasks < 1 || !s->exe || !s->argv) {
        st = dt_error(DT_ERR_INVALID, "launch: a job needs tasks and a command");
        goto fail;
    }
    if ((st = job_identity(&R)))
        goto fail;
    R.n_ports = 0;
    if (s->tf_config)
        R.n_ports = s->n_jobs[DT_JOB_CHIEF] + s->n_jobs[DT_JOB_WORKER] + s->n_jobs[DT_JOB_PS];
    R.tasks = calloc((size_t)s->n_tasks, sizeof *R.tasks);
    R.ports = calloc((size_t)(R.n_ports ? R.n_ports : 1), sizeof *R.ports);
    R.pfds = malloc((size_t)(2 * s->n_tasks + 1) * sizeof *R.pfds);
    R.which = malloc((size_t)(2 * s->n_tasks + 1) * sizeof *R.which);
    if (!R.tasks || !R.ports || !R.pfds || !R.which) {
        st = dt_error(DT_ERR_NOMEM, "no memory for %d tasks", s->n_tasks);
        goto fail;
    }
    for (int i = 0; i < s->n_tasks; i++) {
        R.tasks[i].spec = &s->tasks[i];
        R.tasks[i].out.fd = R.tasks[i].err.fd = -1;
    }
    if ((R.devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
        st = dt_error(DT_ERR_IO, "launch: /dev/null: %s", strerror(errno));
        goto fail;
    }
    for (;;) {
        /* A restarted cluster keeps its ports where it can: tasks that connect again find the
         * same addresses. */
        if (s->tf_config) {
            dt_cluster_free(&R.cluster);
            if ((st = dt_launch_pick_ports(R.ports, R.n_ports, R.cluster_restarts > 0)) ||
                (st = dt_cluster_local(s->n_jobs, s->host, R.ports, &R.cluster)))
                goto fail;
        }
        int rc = run_attempt(&R);
        r->exit_status = rc;
        r->interrupted = R.interrupted;
        r->cluster_restarts = R.cluster_restarts;
        /* A start that failed or an interrupt ends the run whatever the rules asked. */
        if (rc == 0 || !R.restart_cluster || R.start_status || R.interrupted)
            break;
        R.cluster_restarts++;
        dt_launch_event ev = {.kind = DT_LAUNCH_EV_CLUSTER_RESTART, .task = &s->tasks[R.failed],
                              .restarts = R.cluster_restarts};
        emit(&R, ev);
    }
fail:
    run_free(&R);
    return st;
}
