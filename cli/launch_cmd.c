/* dtrain launch: a local cluster of processes.
 *
 * Flags, help and what the user reads; the library's launch layer (include/dtrain/launch.h)
 * does the work: the tasks of a cluster (chief, workers, ps, evaluator) on this machine, each
 * with its own TF_CONFIG on free loopback ports and a shared random cluster secret, every
 * output line prefixed "[worker:1] ", the restart rules (--max-restarts: the whole cluster, or
 * with --ps a failed worker or ps task alone), signals forwarded, every child reaped. This file
 * prints the supervisor's events as the lines users and scripts know. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "commands.h"
#include "dtrain/cluster.h"
#include "dtrain/launch.h"
#include "flags.h"

/* The most tasks of one job: each costs two descriptors in this process. */
#define MAX_JOB_TASKS 256

static const char *signal_name(int sig)
{
    const char *s = sigabbrev_np(sig);
    return s ? s : "?";
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

/* The supervisor's events, one stderr line each. */
static void print_event(void *ctx, const dt_launch_event *e)
{
    (void)ctx;
    char how[64] = "";
    const char *name = e->task ? e->task->name : "";
    if (e->task)
        describe_exit(e->wstatus, how, sizeof how);
    switch (e->kind) {
    case DT_LAUNCH_EV_TASK_FAILED:
        fprintf(stderr, "dtrain: error: task %s (pid %ld) %s\n", name, e->pid, how);
        break;
    case DT_LAUNCH_EV_TASK_RESTART:
        fprintf(stderr, "dtrain: task %s (pid %ld) %s: starting it again (%d of %d); the other "
                "tasks go on\n", name, e->pid, how, e->restarts, e->max_restarts);
        break;
    case DT_LAUNCH_EV_TASK_LEFT_OUT:
        fprintf(stderr, "dtrain: warning: task %s (pid %ld) %s%s; the chief goes on without it\n",
                name, e->pid, how, e->max_restarts > 0 ? ", past --max-restarts" : "");
        break;
    case DT_LAUNCH_EV_CLUSTER_RESTART:
        fprintf(stderr, "dtrain: restarting the cluster (%d of %d) after task %s failed\n",
                e->restarts, e->max_restarts, name);
        break;
    case DT_LAUNCH_EV_START_FAILED:
        cli_fail(1, e->message);
        break;
    case DT_LAUNCH_EV_SIGNAL:
        fprintf(stderr, "dtrain: received SIG%s: stopping the cluster\n", signal_name(e->sig));
        break;
    case DT_LAUNCH_EV_SIGNAL_KILL:
        fprintf(stderr, "dtrain: received SIG%s while stopping: killing the cluster\n",
                signal_name(e->sig));
        break;
    case DT_LAUNCH_EV_SERVER_KILLED:
        fprintf(stderr, "dtrain: warning: task %s did not stop within %g s of SIGTERM: "
                "killing it\n", name, e->grace);
        break;
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

/* Launch's -n: "-n N", "-n=N", "--n N" or "--n=N". Returns 0, -1 (not -n) or a usage error. */
static int take_n(char **argv, int argc, int *i, const char **n_text)
{
    const char *a = argv[*i];
    const char *v = NULL;
    if (strcmp(a, "-n") == 0 || strcmp(a, "--n") == 0) {
        if (*i + 1 >= argc)
            return cli_fail(2, "-n: missing value");
        v = argv[++*i];
    } else if (strncmp(a, "-n=", 3) == 0 || strncmp(a, "--n=", 4) == 0) {
        v = strchr(a, '=') + 1;
    } else {
        return -1;
    }
    if (*n_text)
        return cli_fail(2, "-n: given twice");
    *n_text = v;
    return 0;
}

/* --print-tf-config: the TF_CONFIG that task (TYPE:INDEX) would get, ports counted from base. */
static int print_tf_config(const int n[DT_JOB_COUNT], const char *task, int base)
{
    int n_ports = n[DT_JOB_CHIEF] + n[DT_JOB_WORKER] + n[DT_JOB_PS];
    char msg[128];
    if (base < 1 || base + n_ports - 1 > 65535) {
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
    dt_status st = dt_cluster_local(n, "127.0.0.1", ports, &c);
    free(ports);
    if (st == DT_OK && (st = dt_cluster_set_task(&c, task)))
        dt_error_prefix(st, "--print-tf-config");
    char *text = st ? NULL : dt_cluster_tf_config(&c, c.task_type, c.task_index);
    dt_cluster_free(&c);
    if (st || !text)
        return st ? cli_fail(2, dt_last_error()) : cli_fail(1, "no memory");
    printf("%s\n", text);
    free(text);
    return 0;
}

int cmd_launch(int argc, char **argv)
{
    int n_ps, max_restarts, base_port;
    bool chief, evaluator, help;
    double grace;
    const char *comm, *print_task;
    flag_def flags[] = {
        {"ps", FLAG_INT, "0", "parameter-server tasks, 0..256", &n_ps, false},
        {"chief", FLAG_BOOL, "false", "make the first training task the chief (chief + N-1 workers)",
         &chief, false},
        {"evaluator", FLAG_BOOL, "false", "add an evaluator task (outside the cluster, as in TF)",
         &evaluator, false},
        {"comm", FLAG_STRING, "tcp", "tcp (TF_CONFIG tasks) or mpi (mpirun -np N COMMAND)", &comm,
         false},
        {"max-restarts", FLAG_INT, "0", "restart the whole cluster up to K times after a failure "
         "(with --ps, a failed worker or ps task alone, up to K times each)", &max_restarts, false},
        {"grace", FLAG_FLOAT, "10", "seconds between SIGTERM and SIGKILL when stopping tasks",
         &grace, false},
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
    char *end, msg[256] = "";
    errno = 0;
    long n = strtol(n_text, &end, 10);
    /* Printing a TF_CONFIG, a ps cluster may be its chief and ps tasks alone (-n 0 --ps M). */
    int min_n = print_task ? 0 : 1;
    if (!*n_text || *end || errno)
        snprintf(msg, sizeof msg, "-n: expected a number of tasks, got '%s'", n_text);
    else if (n < min_n || n > MAX_JOB_TASKS)
        snprintf(msg, sizeof msg, "-n: must be in %d..%d, got %ld", min_n, MAX_JOB_TASKS, n);
    else if (n_ps < 0 || n_ps > MAX_JOB_TASKS)
        snprintf(msg, sizeof msg, "--ps: must be in 0..%d, got %d", MAX_JOB_TASKS, n_ps);
    else if (max_restarts < 0 || max_restarts > 1000)
        snprintf(msg, sizeof msg, "--max-restarts: must be in 0..1000, got %d", max_restarts);
    else if (grace < 0 || grace > 86400)
        snprintf(msg, sizeof msg, "--grace: must be in 0..86400 seconds, got %g", grace);
    else if (strcmp(comm, "tcp") != 0 && strcmp(comm, "mpi") != 0)
        snprintf(msg, sizeof msg, "--comm: expected tcp or mpi, got '%s'", comm);
    if (msg[0])
        return cli_fail(2, msg);
    bool mpi = strcmp(comm, "mpi") == 0;
    if (mpi && (n_ps > 0 || chief || evaluator))
        return cli_fail(2, n_ps > 0 ? "--ps needs --comm tcp" : chief ? "--chief needs "
                        "--comm tcp" : "--evaluator needs --comm tcp");
    /* Parameter-server training: -n workers, and a chief beside them that coordinates. */
    if (n_ps > 0 && !chief) {
        if (n + 1 > MAX_JOB_TASKS)
            return cli_fail(2, "-n: with --ps, the chief comes on top of the N workers: N too "
                            "large");
        chief = true;
        n += 1;
    }
    int jobs[DT_JOB_COUNT] = {chief ? 1 : 0, (int)n - (chief ? 1 : 0), n_ps, evaluator ? 1 : 0};
    if (print_task)
        return print_tf_config(jobs, print_task, base_port);

    /* Closed standard descriptors would be reused by the tasks' pipes and lost at dup2. */
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0)
            open("/dev/null", O_RDWR);
    dt_launch_spec spec;
    dt_launch_spec_init(&spec);
    spec.max_restarts = max_restarts;
    spec.grace = grace;
    spec.on_event = print_event;
    /* A secret already set is the caller's: tasks of several launches may need to agree. */
    char secret[65];
    spec.secret = getenv("DTRAIN_CLUSTER_SECRET");
    dt_status st = DT_OK;
    if (!spec.secret && (st = dt_cluster_make_secret(secret)) == DT_OK)
        spec.secret = secret;
    char **cmd = argv + sep + 1;
    int n_cmd = argc - sep - 1;
    if (st == DT_OK)
        st = mpi ? dt_launch_spec_mpirun(&spec, (int)n, cmd, n_cmd, "dtrain")
                 : dt_launch_spec_cluster(&spec, jobs);
    if (st == DT_OK && !mpi)
        st = dt_launch_spec_command(&spec, cmd, n_cmd, "dtrain");
    dt_launch_result result;
    if (st == DT_OK && (st = dt_launch_signals_install()) == DT_OK) {
        st = dt_launch_run(&spec, &result);
        dt_launch_signals_restore();
    }
    dt_launch_spec_free(&spec);
    return st ? cli_fail(1, dt_last_error()) : result.exit_status;
}
