/* dtrain launch: a local cluster of processes.
 *
 * Starts the tasks of a cluster (chief, workers, ps, evaluator) on this machine, each running the
 * same command with its own TF_CONFIG naming free loopback ports, and a shared random cluster
 * secret for the handshake. It owns the child processes, their output pipes (every line is
 * printed with a "[worker:1] " prefix) and their life: one failing task stops the others, ps
 * tasks are told to stop once training is done, a Ctrl-C or SIGTERM is forwarded, and every child
 * is reaped on every path. With --max-restarts the whole cluster is started again after a
 * failure; with --comm mpi the training tasks are started by mpirun instead. A parameter-server
 * cluster (--ps) is the exception: its chief survives a lost worker, so a failed worker or ps
 * task alone is started again (up to --max-restarts times each) while the others go on, and a
 * worker past its restarts is left out; the chief's end is the run's. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "../src/core/clock.h"
#include "dtrain/cluster.h"
#include "flags.h"

extern char **environ;

/* Bytes of one output line kept before it is printed: a longer line is printed in pieces of at
 * most this many bytes, each with its own prefix, cut between UTF-8 characters. */
#define LINE_CAP 4096
/* The most tasks of one job: each costs two descriptors in this process. */
#define MAX_JOB_TASKS 256
/* After the last task has exited, how long to keep reading output still in flight. Only a
 * process that left its task's process group can hold a pipe open this long. */
#define DRAIN_SECONDS 1.0

/* One output pipe of a task. */
struct stream {
    int fd;       /* read end, non-blocking; -1 when closed */
    int out_fd;   /* where its lines go: 1 or 2 */
    size_t n_bytes;
    char buf[LINE_CAP];
};

/* Seconds ps tasks have to end on their own once training is done, before SIGTERM. */
#define PS_OWN_STOP_SECONDS 2.0

struct task {
    char name[40];   /* "worker:1": the output prefix and DTRAIN_TASK */
    const char *job; /* "chief", "worker", "ps", "evaluator", or "mpi" (mpirun itself) */
    int index;
    int port_slot;   /* index into launch.ports; -1 for the evaluator and mpirun */
    bool training;   /* chief, worker or mpirun: the tasks whose success ends the run */
    bool is_ps;
    pid_t pid;       /* > 0 from start until reaped; the task's process group too */
    bool stop_asked; /* sent a stopping signal: SIGKILL at kill_at */
    bool killed;     /* sent SIGKILL */
    double kill_at;
    double term_at;  /* a ps task once training is done: SIGTERM then, unless it ended */
    bool exited_ok;  /* reaped with status 0 */
    int restarts;    /* parameter-server cluster: times this task alone was started again */
    bool restart_pending;
    struct stream out, err;
};

struct launch {
    /* flags */
    int n, n_ps, max_restarts;
    bool chief, evaluator, mpi;
    double grace;

    char exe[PATH_MAX];    /* the file to run: COMMAND, this binary for "dtrain", or mpirun */
    char self[PATH_MAX];   /* this binary, when COMMAND is "dtrain" */
    char **argv;           /* every task's argv: COMMAND ARGS, or mpirun's (strings borrowed) */
    const char *secret;    /* DTRAIN_CLUSTER_SECRET as given, or secret_buf */
    char secret_buf[65];
    char np[16];           /* mpirun's -np */
    int devnull;
    int wake[2];           /* the self-pipe: signal handlers write, the poll() loop reads */

    struct task *tasks;
    int n_tasks;
    uint16_t *ports;       /* one per task listed in the cluster */
    int n_ports;

    /* The state of one attempt. */
    bool stopping;     /* a failure or an interrupt: every task is being stopped */
    bool ps_stopping;  /* training succeeded: ps tasks are being stopped */
    int interrupted;   /* the signal that asked launch to stop, 0 if none */
    int failed;        /* index of the first failing task, -1 if none */
    int fail_status;   /* its exit status: the code, or 128 + signal */
    int launch_status; /* launch itself failed (could not start a task): the exit status */
};

/* ---- signals: a self-pipe wakes the poll() loop ---- */

static int wake_fd = -1;
static volatile sig_atomic_t pending_int, pending_term, pending_hup;

static const int caught[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
#define N_CAUGHT ((int)(sizeof caught / sizeof caught[0]))

static void on_signal(int sig)
{
    int saved = errno;
    if (sig == SIGINT)
        pending_int = 1;
    else if (sig == SIGTERM)
        pending_term = 1;
    else if (sig == SIGHUP)
        pending_hup = 1;
    char b = (char)sig;
    ssize_t r = write(wake_fd, &b, 1); /* a full pipe already holds a wake-up */
    (void)r;
    errno = saved;
}

/* Installs the handlers, keeping a signal ignored when launch was started with it ignored (nohup,
 * or a background job of a shell, which ignores SIGINT): that is the caller's choice to keep. */
static void install_handlers(struct sigaction old[N_CAUGHT], bool installed[N_CAUGHT])
{
    for (int i = 0; i < N_CAUGHT; i++) {
        installed[i] = false;
        if (sigaction(caught[i], NULL, &old[i]) != 0)
            continue;
        if (caught[i] != SIGCHLD && old[i].sa_handler == SIG_IGN)
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = caught[i] == SIGCHLD ? SA_NOCLDSTOP : 0;
        installed[i] = sigaction(caught[i], &sa, NULL) == 0;
    }
}

static void restore_handlers(const struct sigaction old[N_CAUGHT], const bool installed[N_CAUGHT])
{
    for (int i = 0; i < N_CAUGHT; i++)
        if (installed[i])
            sigaction(caught[i], &old[i], NULL);
}

static const char *signal_name(int sig)
{
    const char *s = sigabbrev_np(sig);
    return s ? s : "?";
}

/* ---- output: prefixed lines ---- */

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            /* A non-blocking descriptor inherited from the terminal: wait until it takes more. */
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            poll(&pf, 1, -1);
            continue;
        }
        if (w <= 0)
            return; /* a closed stdout: the tasks keep running, their output is dropped */
        p += w;
        n -= (size_t)w;
    }
}

/* Prints "[name] " + data + "\n" with one write, so lines of different tasks never mix. */
static void emit_line(const struct task *t, int out_fd, const char *data, size_t n_bytes)
{
    char line[LINE_CAP + 64];
    int p = snprintf(line, 64, "[%s] ", t->name);
    memcpy(line + p, data, n_bytes);
    line[(size_t)p + n_bytes] = '\n';
    write_all(out_fd, line, (size_t)p + n_bytes + 1);
}

/* The length of the longest prefix of buf[0..n) that does not end inside a UTF-8 character. */
static size_t utf8_cut(const char *buf, size_t n)
{
    for (size_t i = n; i > 0 && n - i < 4; i--) {
        unsigned char b = (unsigned char)buf[i - 1];
        if ((b & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back for the lead */
        size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
        return (i - 1 + need > n && i - 1 > 0) ? i - 1 : n;
    }
    return n;
}

/* Prints the complete lines in s's buffer; a full buffer without a newline is printed as a
 * piece; at eof the rest is printed as a last line. */
static void consume(const struct task *t, struct stream *s, bool eof)
{
    size_t start = 0;
    for (;;) {
        char *nl = memchr(s->buf + start, '\n', s->n_bytes - start);
        if (!nl)
            break;
        size_t end = (size_t)(nl - s->buf);
        emit_line(t, s->out_fd, s->buf + start, end - start);
        start = end + 1;
    }
    if (start == 0 && s->n_bytes == LINE_CAP) {
        start = utf8_cut(s->buf, s->n_bytes);
        emit_line(t, s->out_fd, s->buf, start);
    }
    memmove(s->buf, s->buf + start, s->n_bytes - start);
    s->n_bytes -= start;
    if (eof && s->n_bytes > 0) {
        emit_line(t, s->out_fd, s->buf, s->n_bytes);
        s->n_bytes = 0;
    }
}

static void close_stream(const struct task *t, struct stream *s)
{
    if (s->fd < 0)
        return;
    consume(t, s, true);
    close(s->fd);
    s->fd = -1;
}

/* Reads what the pipe holds now (once, or until empty with all). */
static void read_stream(const struct task *t, struct stream *s, bool all)
{
    while (s->fd >= 0) {
        ssize_t r = read(s->fd, s->buf + s->n_bytes, LINE_CAP - s->n_bytes);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            return;
        if (r <= 0) {
            close_stream(t, s);
            return;
        }
        s->n_bytes += (size_t)r;
        consume(t, s, false);
        if (!all)
            return;
    }
}

/* ---- setup: ports, secret, environment ---- */

static void close_all(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Picks n distinct free loopback ports. Every socket stays bound until all are picked, so the
 * kernel cannot hand out one port twice. With keep, a port of ports[] that can be bound again
 * is kept (with SO_REUSEADDR, as servers bind, so that connections of the last attempt waiting
 * in TIME_WAIT do not count as a use); the others are replaced. */
static dt_status pick_ports(uint16_t *ports, int n, bool keep)
{
    int *fds = malloc((size_t)(n > 0 ? n : 1) * sizeof *fds);
    if (!fds)
        return dt_error(DT_ERR_NOMEM, "no memory for %d ports", n);
    for (int i = 0; i < n; i++)
        fds[i] = -1;
    dt_status st = DT_OK;
    for (int i = 0; i < n && st == DT_OK; i++) {
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (keep && ports[i] != 0) {
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            int one = 1;
            a.sin_port = htons(ports[i]);
            if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
                bind(fd, (struct sockaddr *)&a, sizeof a) == 0) {
                fds[i] = fd;
                continue;
            }
            if (fd >= 0)
                close(fd);
            a.sin_port = 0;
        }
        socklen_t len = sizeof a;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
            getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
            st = dt_error(DT_ERR_IO, "cannot find a free port on 127.0.0.1: %s", strerror(errno));
            if (fd >= 0)
                close(fd);
            break;
        }
        fds[i] = fd;
        ports[i] = ntohs(a.sin_port);
    }
    close_all(fds, n);
    free(fds);
    return st;
}

static dt_status make_secret(char out[65])
{
    unsigned char raw[32];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t r = getrandom(raw + got, sizeof raw - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return dt_error(DT_ERR_IO, "getrandom: %s", strerror(errno));
        got += (size_t)r;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[64] = '\0';
    return DT_OK;
}

/* The cluster launch runs: the chief (with --chief), the workers and the ps tasks on 127.0.0.1
 * at ports[] in that order, and the evaluator (which has no port). */
static dt_status local_cluster(const struct launch *L, const uint16_t *ports, dt_cluster *c)
{
    int n[DT_JOB_COUNT] = {0};
    n[DT_JOB_CHIEF] = L->chief ? 1 : 0;
    n[DT_JOB_WORKER] = L->n - n[DT_JOB_CHIEF];
    n[DT_JOB_PS] = L->n_ps;
    n[DT_JOB_EVALUATOR] = L->evaluator ? 1 : 0;
    return dt_cluster_local(n, "127.0.0.1", ports, c);
}

/* The TF_CONFIG of task t: the whole cluster (without the evaluator, as TF lists it) and t. */
static char *tf_config(const struct launch *L, const struct task *t)
{
    dt_cluster c;
    dt_job job;
    if (local_cluster(L, L->ports, &c) != DT_OK)
        return NULL;
    char *text = dt_job_parse(t->job, &job) == DT_OK ? dt_cluster_tf_config(&c, job, t->index)
                                                     : NULL;
    dt_cluster_free(&c);
    return text;
}

/* A task's environment: launch's, with TF_CONFIG, DTRAIN_TASK and DTRAIN_CLUSTER_SECRET
 * replaced. Only the strings in own[] are allocated here. */
struct task_env {
    char **envp;
    char *own[3];
};

static void task_env_free(struct task_env *e)
{
    for (int i = 0; i < 3; i++)
        free(e->own[i]);
    free(e->envp);
    memset(e, 0, sizeof *e);
}

static bool has_name(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

static dt_status task_env_build(const struct launch *L, const struct task *t, struct task_env *e)
{
    memset(e, 0, sizeof *e);
    size_t n = 0;
    while (environ[n])
        n++;
    if (!(e->envp = malloc((n + 4) * sizeof *e->envp)))
        goto nomem;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!has_name(environ[i], "TF_CONFIG") && !has_name(environ[i], "DTRAIN_TASK") &&
            !has_name(environ[i], "DTRAIN_CLUSTER_SECRET"))
            e->envp[k++] = environ[i];
    if (asprintf(&e->own[0], "DTRAIN_CLUSTER_SECRET=%s", L->secret) < 0) {
        e->own[0] = NULL;
        goto nomem;
    }
    e->envp[k++] = e->own[0];
    if (!L->mpi) {
        char *json = tf_config(L, t);
        if (!json)
            goto nomem;
        int r = asprintf(&e->own[1], "TF_CONFIG=%s", json);
        free(json);
        if (r < 0) {
            e->own[1] = NULL;
            goto nomem;
        }
        if (asprintf(&e->own[2], "DTRAIN_TASK=%s", t->name) < 0) {
            e->own[2] = NULL;
            goto nomem;
        }
        e->envp[k++] = e->own[1];
        e->envp[k++] = e->own[2];
    }
    e->envp[k] = NULL;
    return DT_OK;
nomem:
    task_env_free(e);
    return dt_error(DT_ERR_NOMEM, "no memory for the environment of task %s", t->name);
}

/* ---- starting and stopping tasks ---- */

/* In the child between fork and exec: only async-signal-safe calls. Never returns. */
static void child_exec(const struct launch *L, const sigset_t *mask, pid_t parent, int out_w,
                       int err_w, int status_w, char **envp)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int i = 0; i < N_CAUGHT; i++) {
        struct sigaction cur;
        if (sigaction(caught[i], NULL, &cur) == 0 && cur.sa_handler == on_signal)
            sigaction(caught[i], &dfl, NULL);
    }
    /* main() ignores SIGPIPE for its own writes; a task should die of a closed pipe as usual. */
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
    if (dup2(L->devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) {
        e = errno;
        goto fail;
    }
    sigprocmask(SIG_SETMASK, mask, NULL);
    execvpe(L->exe, L->argv, envp);
    e = errno;
fail:;
    ssize_t r = write(status_w, &e, sizeof e);
    (void)r;
    _exit(127);
}

/* Starts task t; returns 0, or the exit status for launch with the error message set: 127 when
 * the command does not exist, 126 when it cannot be run, 1 when launch cannot start a process.
 * The exec's outcome comes back on a close-on-exec pipe: end of file means the command runs; an
 * errno means it could not be run, reported here once rather than as a failure of every task. */
static int start_task(struct launch *L, struct task *t)
{
    int status = 1;
    int out[2] = {-1, -1}, err[2] = {-1, -1}, st[2] = {-1, -1};
    struct task_env env;
    dt_status s = task_env_build(L, t, &env);
    if (s)
        return 1;
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(st, O_CLOEXEC) != 0) {
        s = dt_error(DT_ERR_IO, "task %s: pipe: %s", t->name, strerror(errno));
        goto fail;
    }
    /* Signals wait until the child has dropped launch's handlers, which write to the wake-up
     * pipe that the child shares. */
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        child_exec(L, &old, parent, out[1], err[1], st[1], env.envp);
    int fork_errno = errno;
    if (pid > 0)
        setpgid(pid, pid); /* also here, so the group exists before kill(-pid) can be called */
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(out[1]), out[1] = -1;
    close(err[1]), err[1] = -1;
    close(st[1]), st[1] = -1;
    if (pid < 0) {
        s = dt_error(DT_ERR_IO, "task %s: fork: %s", t->name, strerror(fork_errno));
        goto fail;
    }
    int e = 0;
    ssize_t r;
    do
        r = read(st[0], &e, sizeof e);
    while (r < 0 && errno == EINTR);
    if (r > 0) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        s = dt_error(DT_ERR_IO, "cannot run '%s': %s", L->exe, strerror(e));
        status = e == ENOENT ? 127 : 126;
        goto fail;
    }
    status = 0;
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    t->pid = pid;
    t->out = (struct stream){.fd = out[0], .out_fd = 1};
    t->err = (struct stream){.fd = err[0], .out_fd = 2};
    out[0] = err[0] = -1;
fail:
    close_all(out, 2);
    close_all(err, 2);
    close_all(st, 2);
    task_env_free(&env);
    return s ? status : 0;
}

/* Sends sig to t's process group; SIGKILL follows after --grace seconds. t->pid is not reaped
 * yet (at most a zombie), so its group id cannot belong to anyone else. */
static void signal_task(const struct launch *L, struct task *t, int sig)
{
    if (t->pid <= 0)
        return;
    kill(-t->pid, sig);
    if (sig == SIGKILL) {
        t->killed = true;
    } else if (!t->stop_asked) {
        t->stop_asked = true;
        t->kill_at = dt_clock_now() + L->grace;
    }
}

static void stop_all(struct launch *L, int sig)
{
    L->stopping = true;
    for (int i = 0; i < L->n_tasks; i++)
        signal_task(L, &L->tasks[i], sig);
}

static int status_code(int wstatus)
{
    return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
}

/* A parameter-server cluster: a chief coordinating workers and ps tasks. */
static bool ps_cluster(const struct launch *L)
{
    return L->n_ps > 0 && L->chief && !L->mpi;
}

/* "exited with status 3", "was killed by signal 9 (SIGKILL)" */
static void describe_exit(int wstatus, char *out, size_t cap)
{
    if (WIFEXITED(wstatus))
        snprintf(out, cap, "exited with status %d", WEXITSTATUS(wstatus));
    else
        snprintf(out, cap, "was killed by signal %d (SIG%s)", WTERMSIG(wstatus),
                 signal_name(WTERMSIG(wstatus)));
}

/* In a parameter-server cluster a worker or ps task that failed is started again while
 * restarts are left (a worker then rejoins, a ps restores its shards), and a worker past them is
 * left out: the chief goes on without it. True when the failure is dealt with so. */
static bool outlive_task_failure(struct launch *L, struct task *t, pid_t pid, const char *how)
{
    if (!ps_cluster(L) || strcmp(t->job, "chief") == 0 || strcmp(t->job, "evaluator") == 0 ||
        L->ps_stopping)
        return false;
    if (t->restarts < L->max_restarts) {
        t->restarts++;
        t->restart_pending = true;
        fprintf(stderr, "dtrain: task %s (pid %ld) %s: starting it again (%d of %d); the other "
                "tasks go on\n", t->name, (long)pid, how, t->restarts, L->max_restarts);
        return true;
    }
    if (t->is_ps)
        return false;
    fprintf(stderr, "dtrain: warning: task %s (pid %ld) %s%s; the chief goes on without it\n",
            t->name, (long)pid, how, L->max_restarts > 0 ? ", past --max-restarts" : "");
    return true;
}

/* Decides what a task's exit means for the run. */
static void task_exited(struct launch *L, int i, pid_t pid, int wstatus)
{
    struct task *t = &L->tasks[i];
    bool ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
    t->exited_ok = ok;
    if (L->stopping)
        return; /* stopped by us, or dying of the same cause */
    if ((t->is_ps || (ps_cluster(L) && t->training)) && L->ps_stopping) {
        t->exited_ok = true; /* told to stop: its end is the end of the run */
        return;
    }
    if (!ok) {
        char how[64];
        describe_exit(wstatus, how, sizeof how);
        if (outlive_task_failure(L, t, pid, how))
            return;
        fprintf(stderr, "dtrain: error: task %s (pid %ld) %s\n", t->name, (long)pid, how);
        L->failed = i;
        L->fail_status = status_code(wstatus);
        stop_all(L, SIGTERM);
        return;
    }
    if (!t->training)
        return;
    /* A parameter-server cluster's training is the chief's: the workers it stopped end on
     * their own, and one it went on without never will. */
    bool chief_done = ps_cluster(L) && strcmp(t->job, "chief") == 0;
    for (int k = 0; k < L->n_tasks && !chief_done; k++)
        if (L->tasks[k].training && !L->tasks[k].exited_ok)
            return;
    /* Training is done: ps tasks serve until told otherwise. A parameter-server chief has told
     * them (they end on their own within a second or two); for any other command, SIGTERM. */
    L->ps_stopping = true;
    for (int k = 0; k < L->n_tasks; k++)
        if (L->tasks[k].is_ps || (chief_done && L->tasks[k].pid > 0))
            L->tasks[k].term_at = dt_clock_now() + PS_OWN_STOP_SECONDS;
}

/* Starts again the tasks whose failure a parameter-server cluster outlives. */
static void restart_pending(struct launch *L)
{
    for (int i = 0; i < L->n_tasks && !L->stopping; i++) {
        struct task *t = &L->tasks[i];
        if (!t->restart_pending || t->pid > 0)
            continue;
        t->restart_pending = false;
        t->stop_asked = t->killed = t->exited_ok = false;
        t->term_at = 0;
        int status = start_task(L, t);
        if (status) {
            L->launch_status = cli_fail(status, dt_last_error());
            stop_all(L, SIGTERM);
        }
    }
}

/* Reaps every task that has exited. */
static void reap(struct launch *L)
{
    for (int i = 0; i < L->n_tasks; i++) {
        struct task *t = &L->tasks[i];
        if (t->pid <= 0)
            continue;
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)t->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0)
            continue;
        /* While it is a zombie its pid, and so its group id, is still ours: whatever it left
         * running in its group is killed now, or it would be orphaned and hold the output pipes
         * open. */
        kill(-t->pid, SIGKILL);
        int ws = 0;
        while (waitpid(t->pid, &ws, 0) < 0 && errno == EINTR) {
        }
        pid_t pid = t->pid;
        t->pid = 0;
        /* Its last words come before launch's verdict on it. */
        read_stream(t, &t->out, true);
        read_stream(t, &t->err, true);
        task_exited(L, i, pid, ws);
    }
}

/* Acts on the signals that arrived: the first Ctrl-C or SIGTERM is forwarded to every task,
 * with SIGKILL after the grace period; another one (or one during a failure's stop) kills. */
static void handle_signals(struct launch *L)
{
    char buf[64];
    while (read(L->wake[0], buf, sizeof buf) > 0) {
    }
    int sig = 0;
    if (pending_int)
        pending_int = 0, sig = SIGINT;
    if (pending_term)
        pending_term = 0, sig = SIGTERM;
    if (pending_hup)
        pending_hup = 0, sig = SIGHUP;
    if (!sig)
        return;
    if (!L->stopping) {
        fprintf(stderr, "dtrain: received SIG%s: stopping the cluster\n", signal_name(sig));
        L->interrupted = sig;
        stop_all(L, sig);
        return;
    }
    if (!L->interrupted)
        L->interrupted = sig;
    fprintf(stderr, "dtrain: received SIG%s while stopping: killing the cluster\n",
            signal_name(sig));
    stop_all(L, SIGKILL);
}

/* SIGTERM for the ps tasks still serving after training, SIGKILL for the tasks whose grace
 * period is over; returns the next deadline (0: none). */
static double enforce_deadlines(struct launch *L, double now)
{
    double next = 0;
    for (int i = 0; i < L->n_tasks; i++) {
        struct task *t = &L->tasks[i];
        if (t->pid > 0 && t->term_at > 0 && !t->stop_asked) {
            if (now >= t->term_at)
                signal_task(L, t, SIGTERM);
            else if (next == 0 || t->term_at < next)
                next = t->term_at;
        }
        if (t->pid <= 0 || !t->stop_asked || t->killed)
            continue;
        if (now >= t->kill_at) {
            if (t->is_ps && L->ps_stopping && !L->stopping)
                fprintf(stderr, "dtrain: warning: task %s did not stop within %g s of SIGTERM: "
                        "killing it\n", t->name, L->grace);
            signal_task(L, t, SIGKILL);
        } else if (next == 0 || t->kill_at < next) {
            next = t->kill_at;
        }
    }
    return next;
}

/* Runs the cluster once, until every task has been reaped and its output printed. Returns the
 * exit status; *restartable tells whether a task failed (rather than launch or the user). */
static int run_attempt(struct launch *L, bool *restartable)
{
    L->stopping = L->ps_stopping = false;
    L->failed = -1;
    L->fail_status = 0;
    L->launch_status = 0;
    *restartable = false;
    struct pollfd *pfds = malloc((size_t)(2 * L->n_tasks + 1) * sizeof *pfds);
    struct stream **which = malloc((size_t)(2 * L->n_tasks + 1) * sizeof *which);
    struct task **owner = malloc((size_t)(2 * L->n_tasks + 1) * sizeof *owner);
    if (!pfds || !which || !owner) {
        free(pfds);
        free(which);
        free(owner);
        return cli_fail(1, "no memory");
    }
    for (int i = 0; i < L->n_tasks; i++) {
        struct task *t = &L->tasks[i];
        t->pid = 0;
        t->restarts = 0, t->restart_pending = false;
        t->stop_asked = t->killed = t->exited_ok = false;
        t->term_at = 0;
        t->out.fd = t->err.fd = -1;
    }
    for (int i = 0; i < L->n_tasks && !L->stopping; i++) {
        /* A Ctrl-C or a task failing early stops the start too. */
        handle_signals(L);
        reap(L);
        if (L->stopping)
            break;
        int status = start_task(L, &L->tasks[i]);
        if (status) {
            L->launch_status = cli_fail(status, dt_last_error());
            stop_all(L, SIGTERM);
        }
    }
    bool draining = false;
    double drain_at = 0;
    for (;;) {
        handle_signals(L);
        reap(L);
        restart_pending(L);
        double now = dt_clock_now();
        double deadline = enforce_deadlines(L, now);
        bool running = false;
        int n = 0;
        pfds[n] = (struct pollfd){.fd = L->wake[0], .events = POLLIN};
        owner[n] = NULL;
        which[n++] = NULL;
        for (int i = 0; i < L->n_tasks; i++) {
            struct task *t = &L->tasks[i];
            running |= t->pid > 0;
            struct stream *ss[2] = {&t->out, &t->err};
            for (int k = 0; k < 2; k++)
                if (ss[k]->fd >= 0) {
                    pfds[n] = (struct pollfd){.fd = ss[k]->fd, .events = POLLIN};
                    owner[n] = t;
                    which[n++] = ss[k];
                }
        }
        if (!running) {
            if (n == 1)
                break;
            if (!draining) {
                draining = true;
                drain_at = now + DRAIN_SECONDS;
            } else if (now >= drain_at) {
                for (int i = 0; i < L->n_tasks; i++) {
                    close_stream(&L->tasks[i], &L->tasks[i].out);
                    close_stream(&L->tasks[i], &L->tasks[i].err);
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
        int r = poll(pfds, (nfds_t)n, timeout_ms);
        if (r < 0 && errno != EINTR) {
            /* Not expected (EINVAL, ENOMEM): do not spin; the loop still reaps and kills. */
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        for (int k = 1; k < n && r > 0; k++) {
            if (!pfds[k].revents)
                continue;
            read_stream(owner[k], which[k], false);
        }
    }
    free(pfds);
    free(which);
    free(owner);
    if (L->launch_status)
        return L->launch_status;
    if (L->interrupted)
        return 128 + L->interrupted;
    if (L->failed >= 0) {
        *restartable = true;
        return L->fail_status;
    }
    return 0;
}

/* ---- the command ---- */

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

static void print_help(const flag_def *flags, int n_flags)
{
    printf("usage: dtrain launch -n N [--ps M] [--chief] [--evaluator] [--comm tcp|mpi]\n"
           "                    [--max-restarts K] [--grace SECONDS] -- COMMAND [ARGS...]\n"
           "\n"
           "Starts a local cluster: N training tasks (workers, or a chief and N-1 workers; with\n"
           "--ps, a chief that coordinates and N workers), M ps tasks and an evaluator, each\n"
           "running COMMAND with its own TF_CONFIG on free 127.0.0.1 ports and a shared\n"
           "DTRAIN_CLUSTER_SECRET. Output lines are prefixed [worker:1]. One\n"
           "failing task stops the others; launch exits with its status.\n"
           "\n"
           "flags:\n");
    printf("%-28s %s\n", "  -n N", "training tasks (chief and workers), 1..256");
    flags_print_help(flags, n_flags, stdout);
}

/* The tasks of the cluster, in the order they start and are listed. */
static dt_status make_tasks(struct launch *L)
{
    int n = L->mpi ? 1 : L->n + L->n_ps + (L->evaluator ? 1 : 0);
    if (!(L->tasks = calloc((size_t)n, sizeof *L->tasks)) ||
        !(L->ports = calloc((size_t)n, sizeof *L->ports)))
        return dt_error(DT_ERR_NOMEM, "no memory for %d tasks", n);
    for (int i = 0; i < n; i++) {
        struct task *t = &L->tasks[i];
        t->out.fd = t->err.fd = -1;
        t->port_slot = -1;
        if (L->mpi) {
            t->job = "mpi", t->index = 0, t->training = true;
        } else if (i < L->n) {
            bool chief = L->chief && i == 0;
            t->job = chief ? "chief" : "worker";
            t->index = chief ? 0 : i - (L->chief ? 1 : 0);
            t->training = true;
        } else if (i < L->n + L->n_ps) {
            t->job = "ps", t->index = i - L->n, t->is_ps = true;
        } else {
            t->job = "evaluator", t->index = 0;
        }
        if (L->mpi)
            snprintf(t->name, sizeof t->name, "mpi");
        else
            snprintf(t->name, sizeof t->name, "%s:%d", t->job, t->index);
        if (!L->mpi && strcmp(t->job, "evaluator") != 0)
            t->port_slot = L->n_ports++;
    }
    L->n_tasks = n;
    return DT_OK;
}

/* What each task runs: COMMAND (this very binary when it is "dtrain", so that a build that is
 * not installed runs itself), or mpirun with COMMAND. */
static int make_command(struct launch *L, char **cmd, int n_cmd)
{
    const char *first = cmd[0];
    if (strcmp(first, "dtrain") == 0) {
        ssize_t r = readlink("/proc/self/exe", L->self, sizeof L->self - 1);
        if (r > 0) {
            L->self[r] = '\0';
            first = L->self;
        }
    }
    int n = 0;
    if (!(L->argv = calloc((size_t)n_cmd + 8, sizeof *L->argv)))
        return cli_fail(1, "no memory");
    if (!L->mpi) {
        snprintf(L->exe, sizeof L->exe, "%s", first);
        for (int i = 0; i < n_cmd; i++)
            L->argv[n++] = cmd[i];
        return 0;
    }
    if (!find_in_path("mpirun", L->exe, sizeof L->exe))
        return cli_fail(1, "--comm mpi: mpirun is not in PATH (install Open MPI: the Debian "
                        "package openmpi-bin)");
    snprintf(L->np, sizeof L->np, "%d", L->n);
    L->argv[n++] = "mpirun";
    L->argv[n++] = "-np";
    L->argv[n++] = L->np;
    /* Open MPI refuses to run as root without it: containers often are root. */
    if (geteuid() == 0)
        L->argv[n++] = "--allow-run-as-root";
    /* A local cluster may ask for more ranks than there are cores. */
    L->argv[n++] = "--oversubscribe";
    /* Ranks on other hosts get the secret too, not only the local ones that inherit it. */
    L->argv[n++] = "-x";
    L->argv[n++] = "DTRAIN_CLUSTER_SECRET";
    L->argv[n++] = (char *)first;
    for (int i = 1; i < n_cmd; i++)
        L->argv[n++] = cmd[i];
    return 0;
}

static int run_all(struct launch *L)
{
    for (int attempt = 0;; attempt++) {
        if (!L->mpi && pick_ports(L->ports, L->n_ports, attempt > 0))
            return cli_fail(1, dt_last_error());
        bool restartable;
        int rc = run_attempt(L, &restartable);
        if (rc == 0 || !restartable || attempt >= L->max_restarts)
            return rc;
        fprintf(stderr, "dtrain: restarting the cluster (%d of %d) after task %s failed\n",
                attempt + 1, L->max_restarts, L->tasks[L->failed].name);
    }
}

/* Launch's -n: "-n N", "-n=N", "--n N" or "--n=N". Returns 0 or a usage error's status. */
static int take_n(char **argv, int argc, int *i, const char **n_text)
{
    const char *a = argv[*i];
    const char *v = NULL;
    if (strcmp(a, "-n") == 0 || strcmp(a, "--n") == 0) {
        if (*i + 1 >= argc)
            return cli_fail(2, "-n: missing value");
        v = argv[++*i];
    } else if (strncmp(a, "-n=", 3) == 0) {
        v = a + 3;
    } else if (strncmp(a, "--n=", 4) == 0) {
        v = a + 4;
    } else {
        return -1; /* not -n */
    }
    if (*n_text)
        return cli_fail(2, "-n: given twice");
    *n_text = v;
    return 0;
}

/* --print-tf-config: the TF_CONFIG that task (TYPE:INDEX) would get, its ports counted from
 * base. */
static int print_tf_config(const struct launch *L, const char *task, int base)
{
    int n_ports = L->n + L->n_ps;
    if (base < 1 || base + n_ports - 1 > 65535) {
        char msg[128];
        snprintf(msg, sizeof msg, "--base-port: must be in 1..%d for %d tasks, got %d",
                 65536 - n_ports, n_ports, base);
        return cli_fail(2, msg);
    }
    uint16_t *ports = calloc((size_t)(n_ports ? n_ports : 1), sizeof *ports);
    if (!ports)
        return cli_fail(1, "no memory");
    for (int i = 0; i < n_ports; i++)
        ports[i] = (uint16_t)(base + i);
    dt_cluster c;
    dt_status st = local_cluster(L, ports, &c);
    free(ports);
    if (st == DT_OK && (st = dt_cluster_set_task(&c, task)))
        dt_error_prefix(st, "--print-tf-config");
    char *text = st ? NULL : dt_cluster_tf_config(&c, c.task_type, c.task_index);
    dt_cluster_free(&c);
    if (st)
        return cli_fail(2, dt_last_error());
    if (!text)
        return cli_fail(1, "no memory");
    printf("%s\n", text);
    free(text);
    return 0;
}

int cmd_launch(int argc, char **argv)
{
    struct launch L;
    memset(&L, 0, sizeof L);
    L.devnull = L.wake[0] = L.wake[1] = -1;
    const char *comm, *print_task;
    int base_port;
    bool help;
    flag_def flags[] = {
        {"ps", FLAG_INT, "0", "parameter-server tasks, 0..256", &L.n_ps, false},
        {"chief", FLAG_BOOL, "false", "make the first training task the chief (chief + N-1 workers)",
         &L.chief, false},
        {"evaluator", FLAG_BOOL, "false", "add an evaluator task (outside the cluster, as in TF)",
         &L.evaluator, false},
        {"comm", FLAG_STRING, "tcp", "tcp (TF_CONFIG tasks) or mpi (mpirun -np N COMMAND)", &comm,
         false},
        {"max-restarts", FLAG_INT, "0", "restart the whole cluster up to K times after a failure "
         "(with --ps, a failed worker or ps task alone, up to K times each)",
         &L.max_restarts, false},
        {"grace", FLAG_FLOAT, "10", "seconds between SIGTERM and SIGKILL when stopping tasks",
         &L.grace, false},
        {"print-tf-config", FLAG_STRING, NULL, "print the TF_CONFIG task TYPE:INDEX would get "
         "(ports from --base-port) and run nothing", &print_task, false},
        {"base-port", FLAG_INT, "0", "--print-tf-config: the first task's port, the others after "
         "it (chief, workers, ps)", &base_port, false},
        {"help", FLAG_BOOL, "false", "this text", &help, false},
    };
    int n_flags = (int)(sizeof flags / sizeof flags[0]);

    /* Flags end at "--"; COMMAND and its arguments follow, untouched. */
    int sep = -1;
    for (int i = 0; i < argc && sep < 0; i++)
        if (strcmp(argv[i], "--") == 0)
            sep = i;
    int n_flag_args = sep < 0 ? argc : sep;
    /* Without "--", a word of COMMAND would be reported as an unknown argument: name the cause. */
    bool asks_help = false;
    for (int i = 0; i < n_flag_args; i++)
        asks_help |= strcmp(argv[i], "--help") == 0 || strncmp(argv[i], "--help=", 7) == 0 ||
                     strncmp(argv[i], "--print-tf-config", 17) == 0;
    if (sep < 0 && !asks_help)
        return cli_fail(2, "launch: expected -- COMMAND after the flags, e.g. dtrain launch -n 2 "
                        "-- dtrain train ...");
    char **rest = malloc((size_t)(n_flag_args + 1) * sizeof *rest);
    if (!rest)
        return cli_fail(1, "no memory");
    int n_rest = 0, rc = 0;
    const char *n_text = NULL;
    for (int i = 0; i < n_flag_args && rc == 0; i++) {
        int r = take_n(argv, n_flag_args, &i, &n_text);
        if (r < 0)
            rest[n_rest++] = argv[i];
        else
            rc = r;
    }
    if (rc == 0 && flags_parse(flags, n_flags, n_rest, rest))
        rc = cli_fail(2, dt_last_error());
    free(rest);
    if (rc)
        return rc;
    if (help) {
        print_help(flags, n_flags);
        return 0;
    }
    if (sep == argc - 1 && !print_task)
        return cli_fail(2, "launch: COMMAND is missing after --");
    if (!n_text)
        return cli_fail(2, "launch: -n N is required (the number of training tasks)");
    char *end;
    errno = 0;
    long n = strtol(n_text, &end, 10);
    char msg[256];
    if (!*n_text || *end || errno) {
        snprintf(msg, sizeof msg, "-n: expected a number of tasks, got '%s'", n_text);
        return cli_fail(2, msg);
    }
    /* Printing a TF_CONFIG, a ps cluster may be its chief and ps tasks alone (-n 0 --ps M). */
    int min_n = print_task ? 0 : 1;
    if (n < min_n || n > MAX_JOB_TASKS) {
        snprintf(msg, sizeof msg, "-n: must be in %d..%d, got %ld", min_n, MAX_JOB_TASKS, n);
        return cli_fail(2, msg);
    }
    L.n = (int)n;
    if (L.n_ps < 0 || L.n_ps > MAX_JOB_TASKS) {
        snprintf(msg, sizeof msg, "--ps: must be in 0..%d, got %d", MAX_JOB_TASKS, L.n_ps);
        return cli_fail(2, msg);
    }
    if (L.max_restarts < 0 || L.max_restarts > 1000) {
        snprintf(msg, sizeof msg, "--max-restarts: must be in 0..1000, got %d", L.max_restarts);
        return cli_fail(2, msg);
    }
    if (L.grace < 0 || L.grace > 86400) {
        snprintf(msg, sizeof msg, "--grace: must be in 0..86400 seconds, got %g", L.grace);
        return cli_fail(2, msg);
    }
    if (strcmp(comm, "tcp") != 0 && strcmp(comm, "mpi") != 0) {
        snprintf(msg, sizeof msg, "--comm: expected tcp or mpi, got '%s'", comm);
        return cli_fail(2, msg);
    }
    L.mpi = strcmp(comm, "mpi") == 0;
    if (L.mpi && (L.n_ps > 0 || L.chief || L.evaluator))
        return cli_fail(2, L.n_ps > 0 ? "--ps needs --comm tcp" : L.chief ? "--chief needs "
                        "--comm tcp" : "--evaluator needs --comm tcp");
    /* Parameter-server training: -n workers, and a chief beside them that coordinates. */
    if (L.n_ps > 0 && !L.chief) {
        if (L.n + 1 > MAX_JOB_TASKS)
            return cli_fail(2, "-n: with --ps, the chief comes on top of the N workers: N too "
                            "large");
        L.chief = true;
        L.n += 1;
    }
    if (print_task)
        return print_tf_config(&L, print_task, base_port);

    struct sigaction old[N_CAUGHT];
    bool installed[N_CAUGHT] = {false};
    /* Closed standard descriptors would be reused by the pipes below and lost at dup2. */
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0)
            open("/dev/null", O_RDWR);
    /* A secret already set is the caller's: tasks of several launches may need to agree. */
    L.secret = getenv("DTRAIN_CLUSTER_SECRET");
    if (!L.secret && make_secret(L.secret_buf) == DT_OK)
        L.secret = L.secret_buf;
    if (!L.secret || make_tasks(&L)) {
        rc = cli_fail(1, dt_last_error());
        goto done;
    }
    if ((rc = make_command(&L, argv + sep + 1, argc - sep - 1)))
        goto done;
    if ((L.devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0 ||
        pipe2(L.wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(msg, sizeof msg, "launch: %s", strerror(errno));
        rc = cli_fail(1, msg);
        goto done;
    }
    wake_fd = L.wake[1];
    pending_int = pending_term = pending_hup = 0;
    install_handlers(old, installed);
    rc = run_all(&L);
    restore_handlers(old, installed);
    wake_fd = -1;
done:
    if (L.wake[0] >= 0)
        close(L.wake[0]), close(L.wake[1]);
    if (L.devnull >= 0)
        close(L.devnull);
    free(L.argv);
    free(L.ports);
    free(L.tasks);
    return rc;
}
