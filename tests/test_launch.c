/* The launch layer: every restart rule of dt_launch_decide, one test each, and the supervisor
 * with real child processes (/bin/sh): exit statuses, prefixed lines, restarts of the cluster
 * and of one task, a command that does not exist, TF_CONFIG and the secret, an interrupt
 * through the self-pipe, and no process left behind. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/launch/mux.h"
#include "../src/core/clock.h"
#include "dtrain/launch.h"
#include "test.h"

/* ---- the rules ---- */

/* A task's end with nothing special about it: the caller changes what the test is about. */
static dt_launch_exit ended(dt_launch_kind kind, dt_job job, bool ok)
{
    dt_launch_exit e = {.kind = kind, .job = job, .ok = ok, .training_left = true,
                        .max_restarts = 2};
    return e;
}

#define CHECK_ACTION(e, want)                                                                      \
    do {                                                                                           \
        dt_launch_action got_ = dt_launch_decide(&(e));                                            \
        CHECK_MSG(got_ == (want), "decided '%s', expected '%s'", dt_launch_action_name(got_),      \
                  dt_launch_action_name(want));                                                    \
    } while (0)

/* Synchronous training: a lost worker stops the cluster, which starts again whole while
 * --max-restarts allows, whatever the worker's own count says. */
TEST(launch_rule_sync_worker_lost_restarts_the_cluster)
{
    dt_launch_exit e = ended(DT_LAUNCH_SYNC, DT_JOB_WORKER, false);
    CHECK_ACTION(e, DT_LAUNCH_RESTART_CLUSTER);
    e.cluster_restarts = 1;
    CHECK_ACTION(e, DT_LAUNCH_RESTART_CLUSTER);
    e.task_restarts = 0; /* restarts of one task alone are parameter-server training's */
    CHECK(dt_launch_decide(&e) != DT_LAUNCH_RESTART_TASK);
}

/* --max-restarts reached: the run ends with the failure. */
TEST(launch_rule_sync_worker_lost_past_max_restarts_fails)
{
    dt_launch_exit e = ended(DT_LAUNCH_SYNC, DT_JOB_WORKER, false);
    e.cluster_restarts = 2;
    CHECK_ACTION(e, DT_LAUNCH_FAIL);
    e.max_restarts = 0, e.cluster_restarts = 0;
    CHECK_ACTION(e, DT_LAUNCH_FAIL);
}

/* Parameter-server training: a lost worker alone starts again, up to --max-restarts times. */
TEST(launch_rule_ps_worker_lost_restarts_alone)
{
    dt_launch_exit e = ended(DT_LAUNCH_PS, DT_JOB_WORKER, false);
    CHECK_ACTION(e, DT_LAUNCH_RESTART_TASK);
    e.task_restarts = 1;
    CHECK_ACTION(e, DT_LAUNCH_RESTART_TASK);
    e.cluster_restarts = 2; /* the cluster's count is not the task's */
    CHECK_ACTION(e, DT_LAUNCH_RESTART_TASK);
}

/* Past its restarts (or with none), the worker is left out and the chief goes on. */
TEST(launch_rule_ps_worker_past_restarts_left_out)
{
    dt_launch_exit e = ended(DT_LAUNCH_PS, DT_JOB_WORKER, false);
    e.task_restarts = 2;
    CHECK_ACTION(e, DT_LAUNCH_LEAVE_OUT);
    e.max_restarts = 0, e.task_restarts = 0;
    CHECK_ACTION(e, DT_LAUNCH_LEAVE_OUT);
}

/* A lost ps task alone starts again (it restores its shards). */
TEST(launch_rule_ps_task_lost_restarts_alone)
{
    dt_launch_exit e = ended(DT_LAUNCH_PS, DT_JOB_PS, false);
    CHECK_ACTION(e, DT_LAUNCH_RESTART_TASK);
    e.task_restarts = 1;
    CHECK_ACTION(e, DT_LAUNCH_RESTART_TASK);
}

/* A ps task past its restarts cannot be left out: the cluster fails, and starts again whole
 * while the cluster's restarts allow. */
TEST(launch_rule_ps_task_past_restarts_fails_the_cluster)
{
    dt_launch_exit e = ended(DT_LAUNCH_PS, DT_JOB_PS, false);
    e.task_restarts = 2;
    CHECK_ACTION(e, DT_LAUNCH_RESTART_CLUSTER);
    e.cluster_restarts = 2;
    CHECK_ACTION(e, DT_LAUNCH_FAIL);
}

/* The chief lost: the run fails; the whole cluster starts again while restarts are left. */
TEST(launch_rule_chief_lost_fails_or_restarts_the_cluster)
{
    for (int kind = DT_LAUNCH_SYNC; kind <= DT_LAUNCH_PS; kind++) {
        dt_launch_exit e = ended((dt_launch_kind)kind, DT_JOB_CHIEF, false);
        CHECK_ACTION(e, DT_LAUNCH_RESTART_CLUSTER);
        e.cluster_restarts = 2;
        CHECK_ACTION(e, DT_LAUNCH_FAIL);
    }
}

/* The chief of parameter-server training ending well ends training, even with workers left;
 * in synchronous training the chief is one of the training tasks. */
TEST(launch_rule_chief_done_ends_training)
{
    dt_launch_exit e = ended(DT_LAUNCH_PS, DT_JOB_CHIEF, true);
    CHECK_ACTION(e, DT_LAUNCH_TRAINING_DONE);
    e = ended(DT_LAUNCH_SYNC, DT_JOB_CHIEF, true);
    CHECK_ACTION(e, DT_LAUNCH_CONTINUE);
    e.training_left = false;
    CHECK_ACTION(e, DT_LAUNCH_TRAINING_DONE);
}

/* Synchronous training ends when the last chief or worker has ended well. */
TEST(launch_rule_sync_last_worker_done_ends_training)
{
    dt_launch_exit e = ended(DT_LAUNCH_SYNC, DT_JOB_WORKER, true);
    CHECK_ACTION(e, DT_LAUNCH_CONTINUE);
    e.training_left = false;
    CHECK_ACTION(e, DT_LAUNCH_TRAINING_DONE);
    /* A parameter-server worker that ends well leaves training to the chief, still running. */
    e = ended(DT_LAUNCH_PS, DT_JOB_WORKER, true);
    CHECK_ACTION(e, DT_LAUNCH_CONTINUE);
}

/* The evaluator: ending well changes nothing; failing fails the run (it is never restarted
 * alone), even after training has ended. */
TEST(launch_rule_evaluator)
{
    for (int kind = DT_LAUNCH_SYNC; kind <= DT_LAUNCH_PS; kind++) {
        dt_launch_exit e = ended((dt_launch_kind)kind, DT_JOB_EVALUATOR, true);
        CHECK_ACTION(e, DT_LAUNCH_CONTINUE);
        e.training_left = false;
        CHECK_ACTION(e, DT_LAUNCH_CONTINUE);
        e.ok = false;
        CHECK_ACTION(e, DT_LAUNCH_RESTART_CLUSTER);
        e.cluster_restarts = 2;
        CHECK_ACTION(e, DT_LAUNCH_FAIL);
        e.training_done = true;
        CHECK_ACTION(e, DT_LAUNCH_FAIL);
    }
}

/* While the cluster is being stopped, every end is part of the stop. */
TEST(launch_rule_stopping_absorbs_every_end)
{
    for (int kind = DT_LAUNCH_SYNC; kind <= DT_LAUNCH_PS; kind++)
        for (int job = 0; job < DT_JOB_COUNT; job++)
            for (int ok = 0; ok < 2; ok++) {
                dt_launch_exit e = ended((dt_launch_kind)kind, (dt_job)job, ok);
                e.stopping = true;
                e.training_left = false;
                CHECK_ACTION(e, DT_LAUNCH_CONTINUE);
            }
}

/* Once training is done, ps tasks (and in parameter-server training the chief and workers) are
 * told to stop: their end, even a failing one, is the run's quiet end. */
TEST(launch_rule_after_training_serving_tasks_end_quietly)
{
    dt_launch_exit e = ended(DT_LAUNCH_SYNC, DT_JOB_PS, false);
    e.training_done = true;
    CHECK_ACTION(e, DT_LAUNCH_CONTINUE);
    dt_job jobs[] = {DT_JOB_CHIEF, DT_JOB_WORKER, DT_JOB_PS};
    for (int i = 0; i < 3; i++) {
        e = ended(DT_LAUNCH_PS, jobs[i], false);
        e.training_done = true;
        CHECK_ACTION(e, DT_LAUNCH_CONTINUE);
    }
}

/* A ps task that ends well before training is done changes nothing. */
TEST(launch_rule_ps_task_ending_well_continues)
{
    dt_launch_exit e = ended(DT_LAUNCH_PS, DT_JOB_PS, true);
    CHECK_ACTION(e, DT_LAUNCH_CONTINUE);
}

/* ---- the secret and the multiplexer ---- */

TEST(launch_secret_is_fresh_hex)
{
    char a[65], b[65];
    CHECK_OK(dt_cluster_make_secret(a));
    CHECK_OK(dt_cluster_make_secret(b));
    CHECK(strlen(a) == 64 && strspn(a, "0123456789abcdef") == 64);
    CHECK(strcmp(a, b) != 0);
}

TEST(launch_mux_never_cuts_a_character)
{
    const char e_acute[] = "x\xc3\xa9";
    CHECK(dt_mux_utf8_cut(e_acute, 3) == 3);
    CHECK(dt_mux_utf8_cut(e_acute, 2) == 1); /* the lead byte alone is held back */
    CHECK(dt_mux_utf8_cut("abc", 3) == 3);
    const char euro[] = "\xe2\x82\xac";
    CHECK(dt_mux_utf8_cut(euro, 2) == 2); /* a line that is one cut character: nothing to do */
}

/* ---- the supervisor, with real processes ---- */

struct events {
    int n[DT_LAUNCH_EV_SERVER_KILLED + 1];
    char failed[40];
};

static void count_event(void *ctx, const dt_launch_event *e)
{
    struct events *ev = ctx;
    ev->n[e->kind]++;
    if (e->kind == DT_LAUNCH_EV_TASK_FAILED)
        snprintf(ev->failed, sizeof ev->failed, "%s", e->task->name);
}

/* A spec of n[] tasks running sh -c script, its lines going to files out and err. */
static void sh_spec(dt_launch_spec *s, const int n[DT_JOB_COUNT], const char *script,
                    struct events *ev, int out_fd, int err_fd)
{
    static char *cmd[3] = {"/bin/sh", "-c", NULL};
    cmd[2] = (char *)script;
    dt_launch_spec_init(s);
    CHECK_OK(dt_launch_spec_cluster(s, n));
    CHECK_OK(dt_launch_spec_command(s, cmd, 3, NULL));
    s->secret = "test-secret-0123456789";
    s->grace = 1;
    s->serve_stop_seconds = 0.2;
    s->out_fd = out_fd;
    s->err_fd = err_fd;
    memset(ev, 0, sizeof *ev);
    s->on_event = count_event;
    s->event_ctx = ev;
}

static int open_out(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    return fd;
}

/* The file's contents (malloc'd, NUL-terminated; "" when missing). */
static char *slurp(const char *path)
{
    char *buf = calloc(1, 1 << 16);
    FILE *f = fopen(path, "rb");
    if (f) {
        size_t n = fread(buf, 1, (1 << 16) - 1, f);
        buf[n] = '\0';
        fclose(f);
    }
    return buf;
}

/* The process is gone, or a zombie of someone else's (PID 1 of a container may never reap). */
static bool gone(pid_t pid)
{
    char path[64], stat[256] = "";
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *p = strrchr(stat, ')');
    return p && p[1] == ' ' && p[2] == 'Z';
}

/* Every pid listed in the file (one a line) is gone within 2 s. */
static void check_all_gone(const char *path)
{
    char *text = slurp(path);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), n++) {
        pid_t pid = (pid_t)atol(line);
        double until = dt_clock_now() + 2.0;
        while (!gone(pid) && dt_clock_now() < until)
            dt_sleep(0.02);
        CHECK_MSG(gone(pid), "process %ld is still running", (long)pid);
    }
    CHECK_MSG(n > 0, "%s lists no process", path);
    free(text);
}

TEST(launch_run_exit_status_propagates)
{
    int n[DT_JOB_COUNT] = {0, 2, 0, 0};
    dt_launch_spec s;
    struct events ev;
    int out = open_out(test_path("exit.out")), err = open_out(test_path("exit.err"));
    sh_spec(&s, n, "exit 3", &ev, out, err);
    dt_launch_result r;
    CHECK_OK(dt_launch_run(&s, &r));
    CHECK(r.exit_status == 3 && r.interrupted == 0 && r.cluster_restarts == 0);
    /* The first end is the failure; the second is part of the stop. */
    CHECK(ev.n[DT_LAUNCH_EV_TASK_FAILED] == 1);
    CHECK(ev.n[DT_LAUNCH_EV_CLUSTER_RESTART] == 0);
    dt_launch_spec_free(&s);
    sh_spec(&s, n, "kill -9 $$", &ev, out, err);
    CHECK_OK(dt_launch_run(&s, &r));
    CHECK(r.exit_status == 128 + 9);
    dt_launch_spec_free(&s);
    sh_spec(&s, n, "exit 0", &ev, out, err);
    CHECK_OK(dt_launch_run(&s, &r));
    CHECK(r.exit_status == 0 && ev.n[DT_LAUNCH_EV_TASK_FAILED] == 0);
    dt_launch_spec_free(&s);
    close(out), close(err);
}

TEST(launch_run_prefixes_lines)
{
    int n[DT_JOB_COUNT] = {1, 1, 0, 0};
    dt_launch_spec s;
    struct events ev;
    const char *out_path = test_path("lines.out"), *err_path = test_path("lines.err");
    int out = open_out(out_path), err = open_out(err_path);
    sh_spec(&s, n, "echo \"one $DTRAIN_TASK\"; echo \"to err\" >&2; echo two; printf tail", &ev,
            out, err);
    dt_launch_result r;
    CHECK_OK(dt_launch_run(&s, &r));
    close(out), close(err);
    CHECK(r.exit_status == 0);
    char *o = slurp(out_path), *e = slurp(err_path);
    const char *want_out[] = {"[chief:0] one chief:0\n", "[worker:0] one worker:0\n",
                              "[chief:0] two\n", "[worker:0] two\n", "[chief:0] tail\n",
                              "[worker:0] tail\n"};
    for (int i = 0; i < 6; i++)
        CHECK_MSG(strstr(o, want_out[i]), "stdout lacks '%s': %s", want_out[i], o);
    CHECK_MSG(strstr(e, "[chief:0] to err\n") && strstr(e, "[worker:0] to err\n") &&
              !strstr(e, "one"), "stderr: %s", e);
    /* Each task's own lines stay in order. */
    CHECK(strstr(o, "[worker:0] one") < strstr(o, "[worker:0] two"));
    free(o), free(e);
    dt_launch_spec_free(&s);
}

TEST(launch_run_gives_tf_config_and_secret)
{
    int n[DT_JOB_COUNT] = {1, 1, 1, 1};
    dt_launch_spec s;
    struct events ev;
    const char *out_path = test_path("tf.out");
    int out = open_out(out_path), err = open_out(test_path("tf.err"));
    sh_spec(&s, n, "echo \"$DTRAIN_CLUSTER_SECRET $TF_CONFIG\"", &ev, out, err);
    dt_launch_result r;
    CHECK_OK(dt_launch_run(&s, &r));
    close(out), close(err);
    CHECK(r.exit_status == 0);
    char *o = slurp(out_path);
    const char *want[] = {"[worker:0] test-secret-0123456789 {\"cluster\":{\"chief\":[\"127.0.0.1:",
                          "\"task\":{\"type\":\"worker\",\"index\":0}}",
                          "\"task\":{\"type\":\"ps\",\"index\":0}}",
                          "\"task\":{\"type\":\"evaluator\",\"index\":0}}"};
    for (int i = 0; i < 4; i++)
        CHECK_MSG(strstr(o, want[i]), "output lacks '%s': %s", want[i], o);
    free(o);
    dt_launch_spec_free(&s);
}

TEST(launch_run_restarts_the_cluster_then_fails)
{
    int n[DT_JOB_COUNT] = {0, 2, 0, 0};
    dt_launch_spec s;
    struct events ev;
    int out = open_out(test_path("rs.out")), err = open_out(test_path("rs.err"));
    sh_spec(&s, n, "exit 5", &ev, out, err);
    s.max_restarts = 2;
    dt_launch_result r;
    CHECK_OK(dt_launch_run(&s, &r));
    CHECK(r.exit_status == 5 && r.cluster_restarts == 2);
    CHECK(ev.n[DT_LAUNCH_EV_TASK_FAILED] == 3 && ev.n[DT_LAUNCH_EV_CLUSTER_RESTART] == 2);
    dt_launch_spec_free(&s);
    close(out), close(err);
}

/* Parameter-server training: worker:1 fails every time, is restarted alone once, then left
 * out; the chief ends well and the ps task, which serves until told, is stopped. */
TEST(launch_run_ps_worker_restarted_alone_then_left_out)
{
    int n[DT_JOB_COUNT] = {1, 2, 1, 0};
    dt_launch_spec s;
    struct events ev;
    const char *pids = test_path("ps.pids");
    char script[512];
    snprintf(script, sizeof script, "echo $$ >> %s; case $DTRAIN_TASK in worker:1) exit 3;; "
             "ps:*) exec sleep 30;; chief:*) sleep 0.5;; esac", pids);
    int out = open_out(test_path("ps.out")), err = open_out(test_path("ps.err"));
    sh_spec(&s, n, script, &ev, out, err);
    CHECK(s.kind == DT_LAUNCH_PS);
    s.max_restarts = 1;
    dt_launch_result r;
    double t0 = dt_clock_now();
    CHECK_OK(dt_launch_run(&s, &r));
    double took = dt_clock_now() - t0;
    CHECK_MSG(r.exit_status == 0, "exit status %d", r.exit_status);
    CHECK(ev.n[DT_LAUNCH_EV_TASK_RESTART] == 1 && ev.n[DT_LAUNCH_EV_TASK_LEFT_OUT] == 1);
    CHECK(ev.n[DT_LAUNCH_EV_TASK_FAILED] == 0 && ev.n[DT_LAUNCH_EV_CLUSTER_RESTART] == 0);
    CHECK_MSG(took < 5.0, "took %.1f s", took);
    check_all_gone(pids);
    dt_launch_spec_free(&s);
    close(out), close(err);
}

TEST(launch_run_command_not_found)
{
    int n[DT_JOB_COUNT] = {0, 2, 0, 0};
    char *cmd[] = {(char *)test_path("no-such-command")};
    dt_launch_spec s;
    struct events ev = {0};
    dt_launch_spec_init(&s);
    CHECK_OK(dt_launch_spec_cluster(&s, n));
    CHECK_OK(dt_launch_spec_command(&s, cmd, 1, NULL));
    s.on_event = count_event, s.event_ctx = &ev;
    dt_launch_result r;
    CHECK_OK(dt_launch_run(&s, &r));
    CHECK(r.exit_status == 127 && ev.n[DT_LAUNCH_EV_START_FAILED] == 1);
    CHECK_MSG(strstr(dt_last_error(), "No such file"), "message: %s", dt_last_error());
    dt_launch_spec_free(&s);
}

/* A task's background process is stopped with it, and a failure stops the others (and what
 * they started) on every path. */
TEST(launch_run_leaves_no_process)
{
    int n[DT_JOB_COUNT] = {0, 3, 0, 0};
    dt_launch_spec s;
    struct events ev;
    const char *pids = test_path("left.pids");
    char script[512];
    snprintf(script, sizeof script, "sleep 30 & echo $! >> %s; echo $$ >> %s; "
             "if [ $DTRAIN_TASK = worker:2 ]; then sleep 0.3; exit 4; fi; wait", pids, pids);
    int out = open_out(test_path("left.out")), err = open_out(test_path("left.err"));
    sh_spec(&s, n, script, &ev, out, err);
    dt_launch_result r;
    double t0 = dt_clock_now();
    CHECK_OK(dt_launch_run(&s, &r));
    CHECK(r.exit_status == 4 && strcmp(ev.failed, "worker:2") == 0);
    CHECK_MSG(dt_clock_now() - t0 < 3.0, "took %.1f s", dt_clock_now() - t0);
    check_all_gone(pids);
    dt_launch_spec_free(&s);
    close(out), close(err);
}

/* With the self-pipe installed, a SIGTERM to this process stops the cluster: the tasks get it,
 * the run ends with 128 + 15, and this process lives on. */
TEST(launch_run_interrupted_by_a_signal)
{
    int n[DT_JOB_COUNT] = {0, 2, 0, 0};
    dt_launch_spec s;
    struct events ev;
    const char *pids = test_path("int.pids");
    char script[512];
    snprintf(script, sizeof script, "echo $$ >> %s; if [ $DTRAIN_TASK = worker:0 ]; then "
             "sleep 0.2; kill -TERM %ld; fi; exec sleep 30", pids, (long)getpid());
    int out = open_out(test_path("int.out")), err = open_out(test_path("int.err"));
    sh_spec(&s, n, script, &ev, out, err);
    CHECK_OK(dt_launch_signals_install());
    dt_launch_result r;
    CHECK_OK(dt_launch_run(&s, &r));
    dt_launch_signals_restore();
    CHECK_MSG(r.exit_status == 128 + SIGTERM && r.interrupted == SIGTERM, "exit %d",
              r.exit_status);
    CHECK(ev.n[DT_LAUNCH_EV_SIGNAL] == 1);
    check_all_gone(pids);
    dt_launch_spec_free(&s);
    close(out), close(err);
}
