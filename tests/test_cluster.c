/* The cluster spec: TF_CONFIG parsing with TensorFlow's semantics, ranks and the chief, cluster
 * ids, loopback detection, host:port parsing, and one error naming the field per invalid config.
 * JSON is written with single quotes here for legibility; J() turns them into double quotes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain/cluster.h"
#include "test.h"

/* The text with every ' replaced by ", in one of eight rotating buffers. */
static const char *J(const char *s)
{
    static char buf[8][2048];
    static int next;
    char *p = buf[next++ % 8];
    size_t n = strlen(s);
    CHECK(n < sizeof buf[0]);
    for (size_t i = 0; i <= n && i < sizeof buf[0]; i++)
        p[i] = s[i] == '\'' ? '"' : s[i];
    p[sizeof buf[0] - 1] = '\0';
    return p;
}

static bool is_zeroed(const dt_cluster *c)
{
    static const dt_cluster zero;
    return memcmp(c, &zero, sizeof zero) == 0;
}

static void check_local(const dt_cluster *c, const char *what)
{
    CHECK_MSG(!c->has_cluster, "%s: has_cluster", what);
    CHECK_MSG(c->task_type == DT_JOB_WORKER && c->task_index == 0, "%s: task %d/%d", what,
              c->task_type, c->task_index);
    CHECK_MSG(c->rank == 0 && c->n_workers == 1 && c->is_chief, "%s: rank %d of %d, chief %d", what,
              c->rank, c->n_workers, c->is_chief);
    for (int j = 0; j < DT_JOB_COUNT; j++)
        CHECK_MSG(c->n_tasks[j] == 0 && c->tasks[j] == NULL, "%s: job %d has tasks", what, j);
    CHECK(dt_cluster_addr(c, DT_JOB_WORKER, 0) == NULL);
    CHECK(dt_cluster_all_loopback(c));
    dt_job job = DT_JOB_PS;
    int index = -1;
    dt_cluster_rank_task(c, 0, &job, &index);
    CHECK(job == DT_JOB_WORKER && index == 0);
}

TEST(cluster_job_names)
{
    for (int j = 0; j < DT_JOB_COUNT; j++) {
        dt_job job = DT_JOB_COUNT;
        CHECK_OK(dt_job_parse(dt_job_name((dt_job)j), &job));
        CHECK(job == (dt_job)j);
    }
    CHECK(strcmp(dt_job_name(DT_JOB_CHIEF), "chief") == 0);
    CHECK(strcmp(dt_job_name(DT_JOB_EVALUATOR), "evaluator") == 0);
    dt_job job;
    CHECK_ERR(dt_job_parse("master", &job), DT_ERR_INVALID, "unknown job 'master'");
    CHECK_ERR(dt_job_parse("Worker", &job), DT_ERR_INVALID, "jobs are chief, worker, ps, evaluator");
    CHECK_ERR(dt_job_parse("", &job), DT_ERR_INVALID, "unknown job ''");
}

TEST(cluster_local_without_tf_config)
{
    static const char *const texts[] = {
        "{}",
        "{'rpc_layer': 'grpc'}",
        "{'cluster': {}}",
        "{'cluster': {}, 'task': {'type': 'worker', 'index': 0}}",
        "{'task': {'type': 'worker', 'index': 1}, 'environment': 'cloud'}",
    };
    dt_cluster c;
    CHECK_OK(dt_cluster_parse(NULL, &c));
    check_local(&c, "NULL");
    uint64_t local_id = c.id;
    dt_cluster_free(&c);
    CHECK_OK(dt_cluster_parse("", &c));
    check_local(&c, "empty string");
    dt_cluster_free(&c);
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        CHECK_OK(dt_cluster_parse(J(texts[k]), &c));
        check_local(&c, texts[k]);
        CHECK_MSG(c.id == local_id, "%s: id differs from a local task's", texts[k]);
        dt_cluster_free(&c);
    }
}

/* TensorFlow's documented example: one chief, three workers, two ps. */
#define TF_EXAMPLE_CLUSTER                                                                         \
    "'cluster': {'chief': ['host0:2222'], 'worker': ['host1:2222', 'host2:2222', 'host3:2222'], "  \
    "'ps': ['host4:2222', 'host5:2222']}"

TEST(cluster_tf_example_chief_workers_ps)
{
    dt_cluster c;
    CHECK_OK(dt_cluster_parse(
        J("{" TF_EXAMPLE_CLUSTER ", 'task': {'type': 'worker', 'index': 1}, 'rpc_layer': 'grpc'}"),
        &c));
    CHECK(c.has_cluster);
    CHECK(c.n_tasks[DT_JOB_CHIEF] == 1 && c.n_tasks[DT_JOB_WORKER] == 3);
    CHECK(c.n_tasks[DT_JOB_PS] == 2 && c.n_tasks[DT_JOB_EVALUATOR] == 0);
    CHECK(c.task_type == DT_JOB_WORKER && c.task_index == 1);
    CHECK(c.rank == 2 && !c.is_chief && c.n_workers == 4);
    const dt_addr *a = dt_cluster_addr(&c, DT_JOB_WORKER, 2);
    CHECK(a && strcmp(a->host, "host3") == 0 && a->port == 2222);
    a = dt_cluster_addr(&c, DT_JOB_PS, 1);
    CHECK(a && strcmp(a->host, "host5") == 0 && a->port == 2222);
    CHECK(dt_cluster_addr(&c, DT_JOB_PS, 2) == NULL);
    CHECK(dt_cluster_addr(&c, DT_JOB_CHIEF, -1) == NULL);
    CHECK(dt_cluster_addr(&c, DT_JOB_EVALUATOR, 0) == NULL);
    CHECK(dt_cluster_addr(&c, DT_JOB_COUNT, 0) == NULL);
    CHECK(!dt_cluster_all_loopback(&c));

    /* Ranks cover chief then workers, in order. */
    static const dt_job want_job[] = {DT_JOB_CHIEF, DT_JOB_WORKER, DT_JOB_WORKER, DT_JOB_WORKER};
    static const int want_index[] = {0, 0, 1, 2};
    for (int r = 0; r < c.n_workers; r++) {
        dt_job job;
        int index;
        dt_cluster_rank_task(&c, r, &job, &index);
        CHECK_MSG(job == want_job[r] && index == want_index[r], "rank %d is %s %d", r,
                  dt_job_name(job), index);
    }
    dt_cluster_free(&c);
    CHECK(is_zeroed(&c));
    dt_cluster_free(&c); /* twice is harmless */
}

TEST(cluster_ranks_and_chief_of_every_task)
{
    static const struct {
        const char *task;
        int rank;
        bool chief;
    } cases[] = {
        {"{'type': 'chief', 'index': 0}", 0, true},    {"{'type': 'worker', 'index': 0}", 1, false},
        {"{'type': 'worker', 'index': 1}", 2, false},  {"{'type': 'worker', 'index': 2}", 3, false},
        {"{'type': 'ps', 'index': 0}", -1, false},     {"{'type': 'ps', 'index': 1}", -1, false},
    };
    uint64_t id = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char text[1024];
        snprintf(text, sizeof text, "{" TF_EXAMPLE_CLUSTER ", 'task': %s}", cases[k].task);
        dt_cluster c;
        CHECK_OK(dt_cluster_parse(J(text), &c));
        CHECK_MSG(c.rank == cases[k].rank, "%s: rank %d, expected %d", cases[k].task, c.rank,
                  cases[k].rank);
        CHECK_MSG(c.is_chief == cases[k].chief, "%s: is_chief %d", cases[k].task, c.is_chief);
        CHECK_MSG(c.n_workers == 4, "%s: n_workers %d", cases[k].task, c.n_workers);
        if (k == 0)
            id = c.id;
        CHECK_MSG(c.id == id, "%s: id differs from the chief's", cases[k].task);
        dt_cluster_free(&c);
    }
}

/* TensorFlow's multi-worker tutorial: two workers on localhost, worker 0 is the chief. */
TEST(cluster_workers_only)
{
    dt_cluster c;
    CHECK_OK(dt_cluster_parse(J("{'cluster': {'worker': ['localhost:12345', 'localhost:23456']}, "
                                "'task': {'type': 'worker', 'index': 0}}"),
                              &c));
    CHECK(c.has_cluster && c.rank == 0 && c.is_chief && c.n_workers == 2);
    CHECK(dt_cluster_all_loopback(&c));
    dt_job job;
    int index;
    dt_cluster_rank_task(&c, 1, &job, &index);
    CHECK(job == DT_JOB_WORKER && index == 1);
    uint64_t id = c.id;
    dt_cluster_free(&c);

    CHECK_OK(dt_cluster_parse(J("{'cluster': {'worker': ['localhost:12345', 'localhost:23456']}, "
                                "'task': {'type': 'worker', 'index': 1}}"),
                              &c));
    CHECK(c.rank == 1 && !c.is_chief && c.n_workers == 2 && c.id == id);
    dt_cluster_free(&c);

    /* Parameter-server style: workers and ps, no chief; ps tasks have no rank. */
    CHECK_OK(dt_cluster_parse(J("{'cluster': {'worker': ['w0:1', 'w1:1'], 'ps': ['p0:1']}, "
                                "'task': {'type': 'ps', 'index': 0}}"),
                              &c));
    CHECK(c.task_type == DT_JOB_PS && c.rank == -1 && !c.is_chief && c.n_workers == 2);
    dt_cluster_free(&c);
}

TEST(cluster_evaluator_outside_the_cluster)
{
    dt_cluster c;
    /* Not listed: it stands outside the training cluster and is chief of its own. */
    CHECK_OK(dt_cluster_parse(J("{'cluster': {'chief': ['c:1'], 'worker': ['w:1', 'w:2']}, "
                                "'task': {'type': 'evaluator', 'index': 0}}"),
                              &c));
    CHECK(c.has_cluster && c.task_type == DT_JOB_EVALUATOR && c.task_index == 0);
    CHECK(c.is_chief && c.rank == -1 && c.n_workers == 1);
    CHECK(c.n_tasks[DT_JOB_CHIEF] == 1 && c.n_tasks[DT_JOB_WORKER] == 2);
    dt_job job = DT_JOB_CHIEF;
    int index = -1;
    dt_cluster_rank_task(&c, 0, &job, &index);
    CHECK(job == DT_JOB_EVALUATOR && index == 0);
    uint64_t id_outside = c.id;
    dt_cluster_free(&c);

    /* Listed: the same, and its address is known. */
    CHECK_OK(dt_cluster_parse(J("{'cluster': {'chief': ['c:1'], 'worker': ['w:1', 'w:2'], "
                                "'evaluator': ['e:1']}, 'task': {'type': 'evaluator', 'index': 0}}"),
                              &c));
    CHECK(c.is_chief && c.rank == -1 && c.n_workers == 1);
    const dt_addr *a = dt_cluster_addr(&c, DT_JOB_EVALUATOR, 0);
    CHECK(a && strcmp(a->host, "e") == 0 && a->port == 1);
    CHECK(c.id != id_outside);
    dt_cluster_free(&c);

    /* The training tasks of that cluster do not count the evaluator. */
    CHECK_OK(dt_cluster_parse(J("{'cluster': {'chief': ['c:1'], 'worker': ['w:1', 'w:2'], "
                                "'evaluator': ['e:1']}, 'task': {'type': 'worker', 'index': 1}}"),
                              &c));
    CHECK(c.rank == 2 && c.n_workers == 3 && !c.is_chief);
    dt_cluster_free(&c);
}

static uint64_t id_of(const char *text)
{
    dt_cluster c;
    dt_status st = dt_cluster_parse(J(text), &c);
    CHECK_MSG(st == DT_OK, "%s: %s", text, dt_last_error());
    uint64_t id = c.id;
    dt_cluster_free(&c);
    return id;
}

TEST(cluster_id_same_for_one_cluster_and_different_otherwise)
{
    const char *base = "{'cluster': {'chief': ['a:1'], 'worker': ['b:1', 'c:1'], 'ps': ['d:1']}, "
                       "'task': {'type': 'chief', 'index': 0}}";
    uint64_t id = id_of(base);
    /* The same cluster seen by another task, with jobs in another order and other extras. */
    static const char *const same[] = {
        "{'task': {'type': 'ps', 'index': 0}, 'cluster': {'ps': ['d:1'], 'worker': ['b:1', 'c:1'], "
        "'chief': ['a:1']}, 'rpc_layer': 'grpc'}",
        "{'cluster': {'chief': ['A:1'], 'worker': ['B:1', 'c:1'], 'ps': ['d:1']}, "
        "'task': {'type': 'worker', 'index': 1}}",
        "{'cluster': {'chief': ['a:1'], 'worker': ['b:1', 'c:1'], 'ps': ['d:1'], 'evaluator': []}, "
        "'task': {'type': 'worker', 'index': 0}}",
        "{'cluster': {'chief': ['a:1'], 'worker': ['b:1', 'c:1'], 'ps': ['d:1']}, "
        "'task': {'type': 'evaluator', 'index': 0}}",
    };
    static const char *const other[] = {
        "{'cluster': {'chief': ['a:1'], 'worker': ['b:1', 'c:2'], 'ps': ['d:1']}, "
        "'task': {'type': 'chief', 'index': 0}}",
        "{'cluster': {'chief': ['a:1'], 'worker': ['c:1', 'b:1'], 'ps': ['d:1']}, "
        "'task': {'type': 'chief', 'index': 0}}",
        "{'cluster': {'chief': ['a:1'], 'worker': ['b:1'], 'ps': ['d:1', 'c:1']}, "
        "'task': {'type': 'chief', 'index': 0}}",
        "{'cluster': {'worker': ['a:1', 'b:1', 'c:1'], 'ps': ['d:1']}, "
        "'task': {'type': 'worker', 'index': 0}}",
        "{'cluster': {'chief': ['a:1'], 'worker': ['b:1', 'c:1'], 'ps': ['d:1'], 'evaluator': ['e:1']}, "
        "'task': {'type': 'chief', 'index': 0}}",
        "{'cluster': {'chief': ['a:1'], 'worker': ['b:1', 'c:1', 'x:1'], 'ps': ['d:1']}, "
        "'task': {'type': 'chief', 'index': 0}}",
        "{'cluster': {'chief': ['a:1'], 'worker': ['b:1', 'c:1']}, "
        "'task': {'type': 'chief', 'index': 0}}",
        "{'cluster': {'chief': ['a:1'], 'worker': ['b:1', 'c:1'], 'ps': ['d.x:1']}, "
        "'task': {'type': 'chief', 'index': 0}}",
    };
    for (size_t k = 0; k < sizeof same / sizeof same[0]; k++)
        CHECK_MSG(id_of(same[k]) == id, "%s: id differs", same[k]);
    for (size_t k = 0; k < sizeof other / sizeof other[0]; k++) {
        CHECK_MSG(id_of(other[k]) != id, "%s: id equals the base cluster's", other[k]);
        for (size_t l = 0; l < k; l++)
            CHECK_MSG(id_of(other[k]) != id_of(other[l]), "%zu and %zu share an id", k, l);
    }
    CHECK(id_of("{}") != id);
}

static bool loopback(const char *address)
{
    char text[512];
    snprintf(text, sizeof text, "{'cluster': {'worker': ['localhost:1', '%s']}, "
                                "'task': {'type': 'worker', 'index': 0}}", address);
    dt_cluster c;
    dt_status st = dt_cluster_parse(J(text), &c);
    CHECK_MSG(st == DT_OK, "%s: %s", address, dt_last_error());
    bool all = dt_cluster_all_loopback(&c);
    dt_cluster_free(&c);
    return all;
}

TEST(cluster_loopback_detection)
{
    static const char *const yes[] = {"localhost:2", "LocalHost:2", "127.0.0.1:2", "127.255.3.4:2",
                                      "[::1]:2", "[0:0:0:0:0:0:0:1]:2", "[::ffff:127.0.0.1]:2"};
    static const char *const no[] = {"128.0.0.1:2",   "10.0.0.1:2",     "0.0.0.0:2",
                                     "[::]:2",        "[::2]:2",        "host:2",
                                     "localhost.example.com:2", "[fe80::1%eth0]:2",
                                     "[::ffff:10.0.0.1]:2", "126.0.0.1:2"};
    for (size_t k = 0; k < sizeof yes / sizeof yes[0]; k++)
        CHECK_MSG(loopback(yes[k]), "%s is loopback", yes[k]);
    for (size_t k = 0; k < sizeof no / sizeof no[0]; k++)
        CHECK_MSG(!loopback(no[k]), "%s is not loopback", no[k]);
}

TEST(cluster_addr_parse)
{
    static const struct {
        const char *text, *host;
        unsigned port;
    } good[] = {
        {"localhost:2222", "localhost", 2222},     {"10.1.2.3:1", "10.1.2.3", 1},
        {"h:65535", "h", 65535},                   {"[::1]:8080", "::1", 8080},
        {"[fe80::1%eth0]:9", "fe80::1%eth0", 9},   {"my-host_2.example.com:80", "my-host_2.example.com", 80},
        {"h:00080", "h", 80},
    };
    for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
        dt_addr a;
        dt_status st = dt_addr_parse(good[k].text, &a);
        CHECK_MSG(st == DT_OK, "%s: %s", good[k].text, dt_last_error());
        CHECK_MSG(strcmp(a.host, good[k].host) == 0 && a.port == good[k].port, "%s: '%s' port %u",
                  good[k].text, a.host, (unsigned)a.port);
    }
    static const char *const bad[] = {
        "localhost", "localhost:", ":80", "h:0", "h:65536", "h:99999999999", "h:-1", "h:+80",
        "h: 80", "h:80 ", "h:8o", "h:0x50", "::1:80", "[::1]", "[::1]:", "[]:80", "[host]:80",
        "[::1:80", "::1]:80", "h o:1", "h/x:1", "", ":", "h:1:2", "[::1]x:80",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        dt_addr a;
        char needle[128];
        snprintf(needle, sizeof needle, "'%s' is not host:port", bad[k]);
        CHECK_ERR(dt_addr_parse(bad[k], &a), DT_ERR_INVALID, needle);
        CHECK_MSG(a.host[0] == '\0' && a.port == 0, "%s: left host '%s'", bad[k], a.host);
    }
    /* DT_HOST_CAP - 1 characters fit; DT_HOST_CAP do not. */
    char text[DT_HOST_CAP + 16];
    memset(text, 'a', DT_HOST_CAP - 1);
    strcpy(text + DT_HOST_CAP - 1, ":5");
    dt_addr a;
    CHECK_OK(dt_addr_parse(text, &a));
    CHECK(strlen(a.host) == DT_HOST_CAP - 1 && a.port == 5);
    memset(text, 'a', DT_HOST_CAP);
    strcpy(text + DT_HOST_CAP, ":5");
    CHECK_ERR(dt_addr_parse(text, &a), DT_ERR_INVALID, "is not host:port (the host is too long)");
}

TEST(cluster_from_env)
{
    const char *old = getenv("TF_CONFIG");
    char *saved = old ? strdup(old) : NULL;
    dt_cluster c;

    unsetenv("TF_CONFIG");
    CHECK_OK(dt_cluster_from_env(&c));
    check_local(&c, "no TF_CONFIG");
    dt_cluster_free(&c);

    setenv("TF_CONFIG", J("{'cluster': {'worker': ['localhost:1', 'localhost:2']}, "
                          "'task': {'type': 'worker', 'index': 1}}"), 1);
    CHECK_OK(dt_cluster_from_env(&c));
    CHECK(c.has_cluster && c.rank == 1 && c.n_workers == 2);
    dt_cluster_free(&c);

    setenv("TF_CONFIG", J("{'cluster': {'worker': ['localhost:1']}}"), 1);
    CHECK_ERR(dt_cluster_from_env(&c), DT_ERR_INVALID, "TF_CONFIG: task: missing");
    CHECK(is_zeroed(&c));

    if (saved)
        setenv("TF_CONFIG", saved, 1);
    else
        unsetenv("TF_CONFIG");
    free(saved);
}

TEST(cluster_free_accepts_zeroed)
{
    dt_cluster c;
    memset(&c, 0, sizeof c);
    dt_cluster_free(&c);
    CHECK(is_zeroed(&c));
}

#define W2 "'cluster': {'worker': ['h:1', 'h:2']}"
#define TASK_W0 "'task': {'type': 'worker', 'index': 0}"

TEST(cluster_parse_errors)
{
    static const struct {
        const char *json, *needle; /* needle: the start of the message */
    } cases[] = {
        /* Not JSON, or not an object. */
        {"{'cluster': {'worker': ['h:1',]}}", "TF_CONFIG: not valid JSON near byte 30"},
        {"{} x", "TF_CONFIG: not valid JSON near byte 3"},
        {" ", "TF_CONFIG: not valid JSON near byte 1"},
        {"{'cluster'", "TF_CONFIG: not valid JSON near byte"},
        {"['h:1']", "TF_CONFIG: not a JSON object"},
        {"null", "TF_CONFIG: not a JSON object"},
        /* The top level. */
        {"{'clutser': {'worker': ['h:1']}, " TASK_W0 "}",
         "TF_CONFIG: unknown key 'clutser' (keys are cluster, task, rpc_layer, environment)"},
        {"{" W2 ", " TASK_W0 ", " TASK_W0 "}", "TF_CONFIG: task: given twice"},
        {"{" W2 ", " TASK_W0 ", 'rpc_layer': 5}", "TF_CONFIG: rpc_layer: not a string"},
        {"{" W2 ", " TASK_W0 ", 'environment': null}", "TF_CONFIG: environment: not a string"},
        /* The cluster. */
        {"{'cluster': ['h:1'], " TASK_W0 "}", "TF_CONFIG: cluster: not an object"},
        {"{'cluster': null, " TASK_W0 "}", "TF_CONFIG: cluster: not an object"},
        {"{'cluster': {'wrker': ['h:1']}, " TASK_W0 "}",
         "TF_CONFIG: cluster: unknown job 'wrker' (jobs are chief, worker, ps, evaluator, master)"},
        {"{'cluster': {'master': ['h:1'], 'chief': ['h:2'], 'worker': ['h:3']}, " TASK_W0 "}",
         "TF_CONFIG: cluster: both 'chief' and 'master'"},
        {"{'cluster': {'master': ['h:1', 'h:2']}, " TASK_W0 "}",
         "TF_CONFIG: cluster.chief: 2 tasks, at most one chief"},
        {"{'cluster': {'worker': ['h:1'], 'worker': ['h:2']}, " TASK_W0 "}",
         "TF_CONFIG: cluster.worker: given twice"},
        {"{'cluster': {'worker': 'h:1'}, " TASK_W0 "}", "TF_CONFIG: cluster.worker: not a list"},
        {"{'cluster': {'worker': {'0': 'h:1'}}, " TASK_W0 "}", "TF_CONFIG: cluster.worker: not a list"},
        {"{'cluster': {'worker': ['h:1', 2]}, " TASK_W0 "}",
         "TF_CONFIG: cluster.worker[1]: not a \"host:port\" string"},
        {"{'cluster': {'worker': ['h:1', 'localhost']}, " TASK_W0 "}",
         "TF_CONFIG: cluster.worker[1]: 'localhost' is not host:port"},
        {"{'cluster': {'worker': ['h:0']}, " TASK_W0 "}",
         "TF_CONFIG: cluster.worker[0]: 'h:0' is not host:port"},
        {"{'cluster': {'worker': ['h:1'], 'ps': ['h:70000']}, " TASK_W0 "}",
         "TF_CONFIG: cluster.ps[0]: 'h:70000' is not host:port"},
        {"{'cluster': {'chief': [':80'], 'worker': ['h:1']}, " TASK_W0 "}",
         "TF_CONFIG: cluster.chief[0]: ':80' is not host:port"},
        {"{'cluster': {'worker': ['::1:80']}, " TASK_W0 "}",
         "TF_CONFIG: cluster.worker[0]: '::1:80' is not host:port"},
        {"{'cluster': {'chief': ['a:1', 'b:1'], 'worker': ['h:1']}, " TASK_W0 "}",
         "TF_CONFIG: cluster.chief: 2 tasks, at most one chief"},
        {"{'cluster': {'worker': ['h:1'], 'evaluator': ['e:1', 'e:2']}, " TASK_W0 "}",
         "TF_CONFIG: cluster.evaluator: 2 tasks, at most one evaluator"},
        {"{'cluster': {'chief': ['h:1'], 'worker': ['h:2', 'h:1']}, " TASK_W0 "}",
         "TF_CONFIG: cluster.worker[1]: 'h:1' is also cluster.chief[0]"},
        {"{'cluster': {'worker': ['h:1', 'H:1']}, " TASK_W0 "}",
         "TF_CONFIG: cluster.worker[1]: 'H:1' is also cluster.worker[0]"},
        {"{'cluster': {'worker': ['[::1]:5'], 'ps': ['[0::1]:5']}, " TASK_W0 "}",
         "TF_CONFIG: cluster.ps[0]: '[0::1]:5' is also cluster.worker[0]"},
        {"{'cluster': {'ps': ['p:1']}, 'task': {'type': 'ps', 'index': 0}}",
         "TF_CONFIG: cluster: no chief and no worker"},
        {"{'cluster': {'worker': [], 'evaluator': ['e:1']}, "
         "'task': {'type': 'evaluator', 'index': 0}}",
         "TF_CONFIG: cluster: no chief and no worker"},
        /* The task. */
        {"{" W2 "}", "TF_CONFIG: task: missing"},
        {"{" W2 ", 'task': ['worker', 0]}", "TF_CONFIG: task: not an object"},
        {"{" W2 ", 'task': {'index': 0}}", "TF_CONFIG: task.type: missing"},
        {"{" W2 ", 'task': {'type': 1, 'index': 0}}", "TF_CONFIG: task.type: not a string"},
        {"{" W2 ", 'task': {'type': 'master', 'index': 0}}",
         "TF_CONFIG: task.type: job 'master' is not in the cluster"},
        {"{" W2 ", 'task': {'type': 'mastr', 'index': 0}}",
         "TF_CONFIG: task.type: unknown job 'mastr' (jobs are chief, worker, ps, evaluator, "
         "master)"},
        {"{" W2 ", 'task': {'type': 'Worker', 'index': 0}}",
         "TF_CONFIG: task.type: unknown job 'Worker'"},
        {"{" W2 ", 'task': {'type': 'ps', 'index': 0}}",
         "TF_CONFIG: task.type: job 'ps' is not in the cluster"},
        {"{'cluster': {'chief': ['c:1'], 'worker': []}, 'task': {'type': 'worker', 'index': 0}}",
         "TF_CONFIG: task.type: job 'worker' is not in the cluster"},
        {"{" W2 ", 'task': {'type': 'worker', 'idx': 0}}",
         "TF_CONFIG: task: unknown key 'idx' (keys are type, index)"},
        {"{" W2 ", 'task': {'type': 'worker', 'type': 'ps', 'index': 0}}",
         "TF_CONFIG: task.type: given twice"},
        {"{" W2 ", 'task': {'type': 'worker'}}", "TF_CONFIG: task.index: missing"},
        {"{" W2 ", 'task': {'type': 'worker', 'index': '1'}}",
         "TF_CONFIG: task.index: not a non-negative integer"},
        {"{" W2 ", 'task': {'type': 'worker', 'index': -1}}",
         "TF_CONFIG: task.index: not a non-negative integer"},
        {"{" W2 ", 'task': {'type': 'worker', 'index': 1.5}}",
         "TF_CONFIG: task.index: not a non-negative integer"},
        {"{" W2 ", 'task': {'type': 'worker', 'index': true}}",
         "TF_CONFIG: task.index: not a non-negative integer"},
        {"{" W2 ", 'task': {'type': 'worker', 'index': 1e30}}",
         "TF_CONFIG: task.index: not a non-negative integer"},
        {"{" W2 ", 'task': {'type': 'worker', 'index': 3}}",
         "TF_CONFIG: task.index: 3 is out of range: job 'worker' has 2 tasks"},
        {"{" W2 ", 'task': {'type': 'worker', 'index': 2}}",
         "TF_CONFIG: task.index: 2 is out of range: job 'worker' has 2 tasks"},
        {"{'cluster': {'chief': ['c:1'], 'worker': ['h:1']}, 'task': {'type': 'chief', 'index': 1}}",
         "TF_CONFIG: task.index: 1 is out of range: job 'chief' has 1 task"},
        {"{'cluster': {'worker': ['h:1'], 'evaluator': ['e:1']}, "
         "'task': {'type': 'evaluator', 'index': 1}}",
         "TF_CONFIG: task.index: 1 is out of range: job 'evaluator' has 1 task"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dt_cluster c;
        memset(&c, 0xAB, sizeof c); /* parse must not read what was there */
        CHECK_ERR(dt_cluster_parse(J(cases[k].json), &c), DT_ERR_INVALID, cases[k].needle);
        CHECK_MSG(strncmp(dt_last_error(), cases[k].needle, strlen(cases[k].needle)) == 0,
                  "case %zu %s: message '%s' does not start with '%s'", k, cases[k].json,
                  dt_last_error(), cases[k].needle);
        CHECK_MSG(is_zeroed(&c), "case %zu %s: cluster not zeroed after the error", k, cases[k].json);
    }
}

/* The TF_CONFIGs the platforms write: SageMaker's parameter-server distribution (a "master", a
 * ps beside each host's worker or master), Kubeflow's TFJob (service names with the namespace and
 * the cluster domain, "environment": "cloud"). */
TEST(cluster_parses_the_platforms_tf_configs)
{
    dt_cluster c;
    CHECK_OK(dt_cluster_parse(
        J("{'cluster': {'master': ['algo-1:2222'], 'ps': ['algo-1:2223', 'algo-2:2223'], "
          "'worker': ['algo-2:2222']}, 'environment': 'cloud', "
          "'task': {'type': 'master', 'index': 0}}"), &c));
    CHECK(c.task_type == DT_JOB_CHIEF && c.is_chief && c.rank == 0 && c.n_workers == 2 &&
          c.n_tasks[DT_JOB_PS] == 2 && c.chief_named_master &&
          strcmp(c.tasks[DT_JOB_CHIEF][0].host, "algo-1") == 0);
    dt_cluster_free(&c);
    CHECK_OK(dt_cluster_parse(
        J("{'cluster': {'master': ['algo-1:2222'], 'ps': ['algo-1:2223', 'algo-2:2223'], "
          "'worker': ['algo-2:2222']}, 'environment': 'cloud', "
          "'task': {'type': 'ps', 'index': 1}}"), &c));
    CHECK(c.task_type == DT_JOB_PS && c.task_index == 1 && !c.is_chief && c.rank == -1);
    dt_cluster_free(&c);
    CHECK_OK(dt_cluster_parse(
        J("{'cluster': {'chief': ['ctr-chief-0.team.svc.cluster.local:2222'], "
          "'worker': ['ctr-worker-0.team.svc.cluster.local:2222', "
          "'ctr-worker-1.team.svc.cluster.local:2222'], "
          "'ps': ['ctr-ps-0.team.svc:2222', 'ctr-ps-1.team.svc:2222'], "
          "'evaluator': ['ctr-evaluator-0.team.svc:2222']}, 'environment': 'cloud', "
          "'task': {'type': 'worker', 'index': 1}}"), &c));
    CHECK(c.task_type == DT_JOB_WORKER && c.rank == 2 && c.n_workers == 3 &&
          !c.chief_named_master &&
          strcmp(c.tasks[DT_JOB_WORKER][1].host, "ctr-worker-1.team.svc.cluster.local") == 0 &&
          c.tasks[DT_JOB_PS][1].port == 2222);
    dt_cluster_free(&c);
}

TEST(cluster_task_flag_overrides_tf_config)
{
    dt_cluster c;
    CHECK_OK(dt_cluster_parse("{\"cluster\": {\"chief\": [\"h:1\"], \"worker\": [\"h:2\", \"h:3\"]},"
                              " \"task\": {\"type\": \"chief\", \"index\": 0}}", &c));
    CHECK(c.rank == 0 && c.is_chief);
    CHECK_OK(dt_cluster_set_task(&c, "worker:1"));
    CHECK(c.task_type == DT_JOB_WORKER && c.task_index == 1 && c.rank == 2 && !c.is_chief);
    CHECK_ERR(dt_cluster_set_task(&c, "worker:2"), DT_ERR_INVALID,
              "--task worker:2: job 'worker' has 2 tasks in the cluster");
    CHECK_ERR(dt_cluster_set_task(&c, "wrker:0"), DT_ERR_INVALID, "--task wrker:0");
    CHECK_ERR(dt_cluster_set_task(&c, "worker"), DT_ERR_INVALID, "is not TYPE:INDEX");
    CHECK_ERR(dt_cluster_set_task(&c, "worker:-1"), DT_ERR_INVALID, "is not TYPE:INDEX");
    CHECK_ERR(dt_cluster_set_task(&c, "ps:0"), DT_ERR_INVALID, "job 'ps' has 0 tasks");
    CHECK(c.rank == 2); /* a refused override changes nothing */
    dt_cluster_free(&c);
    dt_cluster local;
    CHECK_OK(dt_cluster_parse(NULL, &local));
    CHECK_ERR(dt_cluster_set_task(&local, "worker:0"), DT_ERR_INVALID, "there is no cluster");
    dt_cluster_free(&local);
}

/* Hybrid parameter-server workers all-reduce over a ring of their own: the workers alone, each
 * at its host and the port it told; this task keeps its index (and is rank = index); the id is
 * the same for every worker of the cluster and no other cluster's. A ps task has no ring. */
TEST(cluster_workers_ring)
{
    dt_cluster c, ring, ring2, other;
    CHECK_OK(dt_cluster_parse(
        J("{" TF_EXAMPLE_CLUSTER ", 'task': {'type': 'worker', 'index': 1}}"), &c));
    const uint16_t ports[3] = {5001, 5002, 5003};
    CHECK_OK(dt_cluster_workers_ring(&c, ports, &ring));
    CHECK(ring.has_cluster && ring.n_tasks[DT_JOB_CHIEF] == 0 && ring.n_tasks[DT_JOB_PS] == 0);
    CHECK(ring.n_tasks[DT_JOB_WORKER] == 3 && ring.n_workers == 3);
    CHECK(ring.task_type == DT_JOB_WORKER && ring.task_index == 1 && ring.rank == 1);
    for (int i = 0; i < 3; i++) {
        const dt_addr *a = dt_cluster_addr(&ring, DT_JOB_WORKER, i);
        const dt_addr *b = dt_cluster_addr(&c, DT_JOB_WORKER, i);
        CHECK(a && strcmp(a->host, b->host) == 0 && a->port == ports[i]);
    }
    CHECK(ring.id != c.id);
    CHECK_OK(dt_cluster_set_task(&c, "worker:2"));
    CHECK_OK(dt_cluster_workers_ring(&c, ports, &ring2));
    CHECK(ring2.id == ring.id && ring2.rank == 2);
    const uint16_t moved[3] = {5001, 5002, 5004};
    CHECK_OK(dt_cluster_workers_ring(&c, moved, &other));
    CHECK(other.id != ring.id);
    dt_cluster_free(&other);
    CHECK_OK(dt_cluster_set_task(&c, "ps:0"));
    CHECK(dt_cluster_workers_ring(&c, ports, &other) == DT_ERR_INVALID);
    CHECK(strstr(dt_last_error(), "ps:0 is not a worker"));
    dt_cluster_free(&ring2);
    dt_cluster_free(&ring);
    dt_cluster_free(&c);
}

/* The writer is the parser's inverse: a local cluster written as each task's TF_CONFIG parses
 * back to the same jobs, addresses, task, rank and cluster id; an IPv6 host keeps its brackets. */
TEST(cluster_tf_config_writer_round_trips_through_the_parser)
{
    int n[DT_JOB_COUNT] = {1, 3, 2, 1};
    uint16_t ports[6] = {4000, 4001, 4002, 4003, 4004, 4005};
    dt_cluster c;
    CHECK_OK(dt_cluster_local(n, "127.0.0.1", ports, &c));
    CHECK(c.is_chief && c.rank == 0 && c.n_workers == 4);
    for (int j = 0; j < DT_JOB_COUNT; j++)
        for (int i = 0; i < n[j]; i++) {
            char *text = dt_cluster_tf_config(&c, (dt_job)j, i);
            CHECK(text != NULL);
            dt_cluster back;
            CHECK_OK(dt_cluster_parse(text, &back));
            CHECK_MSG(back.task_type == (dt_job)j && back.task_index == i, "%s", text);
            /* The evaluator is outside the cluster: every other job is as written. */
            for (int k = 0; k < DT_JOB_EVALUATOR; k++) {
                CHECK(back.n_tasks[k] == c.n_tasks[k]);
                for (int t = 0; t < c.n_tasks[k] && t < back.n_tasks[k]; t++)
                    CHECK(back.tasks[k][t].port == c.tasks[k][t].port &&
                          strcmp(back.tasks[k][t].host, "127.0.0.1") == 0);
            }
            if (j != DT_JOB_EVALUATOR)
                CHECK(back.rank == dt_cluster_rank_of(&c, (dt_job)j, i));
            dt_cluster_free(&back);
            free(text);
        }
    dt_cluster_free(&c);
    int m[DT_JOB_COUNT] = {0, 2, 0, 0};
    CHECK_OK(dt_cluster_local(m, "::1", ports, &c));
    char *text = dt_cluster_tf_config(&c, DT_JOB_WORKER, 1);
    CHECK(text && strstr(text, "\"[::1]:4001\""));
    dt_cluster back;
    CHECK_OK(dt_cluster_parse(text, &back));
    CHECK(back.tasks[DT_JOB_WORKER][1].port == 4001 &&
          strcmp(back.tasks[DT_JOB_WORKER][1].host, "::1") == 0 && back.rank == 1);
    dt_cluster_free(&back);
    free(text);
    dt_cluster_free(&c);
    int two_chiefs[DT_JOB_COUNT] = {2, 0, 0, 0};
    CHECK_ERR(dt_cluster_local(two_chiefs, "h", ports, &c), DT_ERR_INVALID, "2 chief");
}

/* Writes text to a fresh file of mode `mode`; its path into path (a mkstemp template). */
static void secret_file(char *path, const char *text, mode_t mode)
{
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    CHECK(fchmod(fd, mode) == 0);
    close(fd);
}

/* A secret file its group or others may read or change is refused, naming the file and its
 * mode; mode 600 is read. */
TEST(cluster_secret_file_readable_by_others_is_refused)
{
    uint8_t *secret = NULL;
    size_t n = 0;
    const mode_t modes[] = {0644, 0640, 0604, 0620};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        char path[] = "/tmp/dtrain-secret-XXXXXX", want[64];
        secret_file(path, "a secret of at least 32 bytes, for sure\n", modes[i]);
        snprintf(want, sizeof want, "mode %04o", (unsigned)modes[i]);
        CHECK_ERR(dt_cluster_load_secret(path, &secret, &n), DT_ERR_INVALID, want);
        CHECK(strstr(dt_last_error(), path) != NULL && secret == NULL);
        unlink(path);
    }
    char path[] = "/tmp/dtrain-secret-XXXXXX";
    secret_file(path, "a secret of at least 32 bytes, for sure\n", 0600);
    CHECK_OK(dt_cluster_load_secret(path, &secret, &n));
    CHECK(secret && n == strlen("a secret of at least 32 bytes, for sure") &&
          memcmp(secret, "a secret of at least 32 bytes, for sure", n) == 0);
    free(secret);
    unlink(path);
}

/* A secret shorter than 32 bytes is stretched (PBKDF2) into a 32-byte key, the same from a file
 * and from the environment, and not the secret itself; a longer one is used as it is. */
TEST(cluster_short_secret_is_stretched)
{
    const char *weak = "a weak secret 123456"; /* 20 bytes */
    char path[] = "/tmp/dtrain-secret-XXXXXX";
    secret_file(path, weak, 0600);
    uint8_t *from_file = NULL, *from_env = NULL;
    size_t n_file = 0, n_env = 0;
    CHECK_OK(dt_cluster_load_secret(path, &from_file, &n_file));
    setenv("DTRAIN_CLUSTER_SECRET", weak, 1);
    CHECK_OK(dt_cluster_load_secret(NULL, &from_env, &n_env));
    unsetenv("DTRAIN_CLUSTER_SECRET");
    CHECK(from_file && from_env && n_file == 32 && n_env == 32 &&
          memcmp(from_file, from_env, 32) == 0 && memcmp(from_file, weak, 20) != 0);
    free(from_file), free(from_env);
    unlink(path);
}

/* Without a secret, a cluster of more than one task is refused unless insecure, loopback or not,
 * naming --insecure; a task alone needs none. */
TEST(cluster_without_secret_needs_insecure)
{
    dt_cluster c;
    CHECK_OK(dt_cluster_parse(J("{'cluster': {'chief': ['127.0.0.1:1'], 'ps': ['127.0.0.1:2']}, "
                                "'task': {'type': 'ps', 'index': 0}}"), &c));
    CHECK_ERR(dt_cluster_check_secret(&c, false, false), DT_ERR_AUTH, "--insecure");
    CHECK_OK(dt_cluster_check_secret(&c, true, false));
    CHECK_OK(dt_cluster_check_secret(&c, false, true));
    dt_cluster_free(&c);
    CHECK_OK(dt_cluster_parse(J("{'cluster': {'worker': ['127.0.0.1:1']}, "
                                "'task': {'type': 'worker', 'index': 0}}"), &c));
    CHECK_OK(dt_cluster_check_secret(&c, false, false));
    dt_cluster_free(&c);
}

/* ---- Cluster resolvers, over a made-up environment ---- */

static const char *fake_env[32][2];

static const char *fake_getenv(const char *name)
{
    for (int i = 0; i < 32 && fake_env[i][0]; i++)
        if (strcmp(fake_env[i][0], name) == 0)
            return fake_env[i][1];
    return NULL;
}

/* NAME=VALUE pairs, NULL-terminated, as the whole environment. */
static void set_env(const char *const *pairs)
{
    memset(fake_env, 0, sizeof fake_env);
    for (int i = 0; pairs[2 * i] && i < 31; i++)
        fake_env[i][0] = pairs[2 * i], fake_env[i][1] = pairs[2 * i + 1];
}

/* The cluster resolver r gives for env; *used the resolver taken. */
static dt_status resolved(dt_resolver r, const char *const *env, dt_cluster *c, dt_resolver *used)
{
    set_env(env);
    char *json = NULL;
    memset(c, 0, sizeof *c);
    dt_status st = dt_cluster_resolve(r, fake_getenv, &json, used);
    if (st == DT_OK)
        st = dt_cluster_parse(json, c);
    free(json);
    return st;
}

static void check_addr(const dt_cluster *c, dt_job job, int i, const char *host, int port,
                       int line)
{
    const dt_addr *a = dt_cluster_addr(c, job, i);
    if (!a || strcmp(a->host, host) != 0 || a->port != port)
        test_fail(__FILE__, line, "%s:%d is %s:%d, expected %s:%d", dt_job_name(job), i,
                  a ? a->host : "(none)", a ? a->port : 0, host, port);
}
#define CHECK_ADDR(c, job, i, host, port) check_addr(c, job, i, host, port, __LINE__)

TEST(cluster_resolver_slurm_expands_host_lists_and_tasks_per_node)
{
    dt_cluster c;
    dt_resolver used;
    /* TF's SlurmClusterResolver: nodes in list order, tasks per node from the base port. */
    CHECK_OK(resolved(DT_RESOLVER_AUTO,
                      (const char *[]){"SLURM_PROCID", "4", "SLURM_NTASKS", "7",
                                       "SLURM_STEP_NODELIST", "node[09-10,007],gpu5",
                                       "SLURM_STEP_TASKS_PER_NODE", "2(x3),1", NULL},
                      &c, &used));
    CHECK(used == DT_RESOLVER_SLURM && c.n_tasks[DT_JOB_WORKER] == 7 && c.rank == 4);
    CHECK_ADDR(&c, DT_JOB_WORKER, 0, "node09", 8888);
    CHECK_ADDR(&c, DT_JOB_WORKER, 1, "node09", 8889);
    CHECK_ADDR(&c, DT_JOB_WORKER, 3, "node10", 8889);
    CHECK_ADDR(&c, DT_JOB_WORKER, 4, "node007", 8888);
    CHECK_ADDR(&c, DT_JOB_WORKER, 6, "gpu5", 8888);
    dt_cluster_free(&c);
    /* Bracket groups one after another; jobs sorted by name (ps before worker); a port base. */
    CHECK_OK(resolved(DT_RESOLVER_SLURM,
                      (const char *[]){"SLURM_PROCID", "1", "SLURM_STEP_NUM_TASKS", "4",
                                       "SLURM_STEP_NODELIST", "r[1-2]n[1-2]",
                                       "SLURM_STEP_TASKS_PER_NODE", "1", "DTRAIN_JOBS",
                                       "worker:2,ps:2", "DTRAIN_PORT_BASE", "7000", NULL},
                      &c, NULL));
    CHECK(c.task_type == DT_JOB_PS && c.task_index == 1 && c.n_tasks[DT_JOB_WORKER] == 2);
    CHECK_ADDR(&c, DT_JOB_PS, 0, "r1n1", 7000);
    CHECK_ADDR(&c, DT_JOB_PS, 1, "r1n2", 7000);
    CHECK_ADDR(&c, DT_JOB_WORKER, 1, "r2n2", 7000);
    dt_cluster_free(&c);
    /* Under mpirun inside the allocation, Open MPI's rank is the one (as TF reads it). */
    CHECK_OK(resolved(DT_RESOLVER_SLURM,
                      (const char *[]){"SLURM_PROCID", "0", "SLURM_NTASKS", "2",
                                       "OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2",
                                       "SLURM_STEP_NODELIST", "a,b", "SLURM_STEP_TASKS_PER_NODE",
                                       "1(x2)", NULL},
                      &c, NULL));
    CHECK(c.rank == 1);
    dt_cluster_free(&c);
    /* Without a step's tasks per node, sbatch's --ntasks-per-node counts on every node. */
    CHECK_OK(resolved(DT_RESOLVER_SLURM,
                      (const char *[]){"SLURM_PROCID", "3", "SLURM_NTASKS", "4",
                                       "SLURM_JOB_NODELIST", "c[1-2]", "SLURM_NTASKS_PER_NODE",
                                       "2", NULL},
                      &c, NULL));
    CHECK(c.rank == 3);
    CHECK_ADDR(&c, DT_JOB_WORKER, 1, "c1", 8889);
    CHECK_ADDR(&c, DT_JOB_WORKER, 2, "c2", 8888);
    dt_cluster_free(&c);
    CHECK_ERR(resolved(DT_RESOLVER_SLURM,
                       (const char *[]){"SLURM_PROCID", "0", "SLURM_NTASKS", "4",
                                        "SLURM_JOB_NODELIST", "c[1-2]", "SLURM_NTASKS_PER_NODE",
                                        "", NULL},
                       &c, NULL),
              DT_ERR_INVALID, "SLURM_STEP_TASKS_PER_NODE is not set");
    /* What does not add up names the variable. */
    CHECK_ERR(resolved(DT_RESOLVER_SLURM,
                       (const char *[]){"SLURM_PROCID", "0", "SLURM_NTASKS", "4",
                                        "SLURM_STEP_NODELIST", "n[1-2]",
                                        "SLURM_STEP_TASKS_PER_NODE", "2(x3)", NULL},
                       &c, NULL),
              DT_ERR_INVALID, "SLURM_STEP_TASKS_PER_NODE='2(x3)'");
    CHECK_ERR(resolved(DT_RESOLVER_SLURM,
                       (const char *[]){"SLURM_PROCID", "0", "SLURM_NTASKS", "2",
                                        "SLURM_STEP_NODELIST", "n[2-1]",
                                        "SLURM_STEP_TASKS_PER_NODE", "1", NULL},
                       &c, NULL),
              DT_ERR_INVALID, "SLURM_STEP_NODELIST 'n[2-1]': '2-1' is not a range");
    CHECK_ERR(resolved(DT_RESOLVER_SLURM,
                       (const char *[]){"SLURM_PROCID", "0", "SLURM_NTASKS", "2",
                                        "SLURM_STEP_NODELIST", "n[1-2]",
                                        "SLURM_STEP_TASKS_PER_NODE", "1", "DTRAIN_JOBS",
                                        "worker:1,ps:2", NULL},
                       &c, NULL),
              DT_ERR_INVALID, "jobs 'worker:1,ps:2' make 3 tasks; the platform started 2");
    CHECK_ERR(resolved(DT_RESOLVER_SLURM,
                       (const char *[]){"SLURM_PROCID", "0", "SLURM_NTASKS", "2",
                                        "SLURM_STEP_NODELIST", "n[1-2]",
                                        "SLURM_STEP_TASKS_PER_NODE", "1", "DTRAIN_JOBS",
                                        "boss:2", NULL},
                       &c, NULL),
              DT_ERR_INVALID, "'boss' is not a job");
    CHECK_ERR(resolved(DT_RESOLVER_SLURM, (const char *[]){"SLURM_PROCID", "x", NULL}, &c, NULL),
              DT_ERR_INVALID, "SLURM_PROCID='x' is not an integer");
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

TEST(cluster_resolver_sagemaker_places_master_workers_and_ps)
{
    char root[] = "/tmp/dtrain-sm-XXXXXX", dir[128], path[160];
    CHECK(mkdtemp(root) != NULL);
    snprintf(dir, sizeof dir, "%s/input", root);
    mkdir(dir, 0700);
    snprintf(dir, sizeof dir, "%s/input/config", root);
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/resourceconfig.json", dir);
    write_file(path, J("{'current_host': 'algo-3', 'hosts': ['algo-1', 'algo-2', 'algo-3']}"));
    snprintf(path, sizeof path, "%s/hyperparameters.json", dir);
    write_file(path, J("{'sagemaker_parameter_server_enabled': 'true', 'epochs': '3'}"));
    dt_cluster c;
    dt_resolver used;
    CHECK_OK(resolved(DT_RESOLVER_AUTO, (const char *[]){"DTRAIN_SAGEMAKER_ROOT", root, NULL}, &c,
                      &used));
    /* SageMaker's toolkit: master = the first host, workers the rest, a ps on every host. */
    CHECK(used == DT_RESOLVER_SAGEMAKER && c.chief_named_master && c.task_type == DT_JOB_WORKER &&
          c.task_index == 1 && c.n_tasks[DT_JOB_PS] == 3 && c.n_workers == 3);
    CHECK_ADDR(&c, DT_JOB_CHIEF, 0, "algo-1", 2222);
    CHECK_ADDR(&c, DT_JOB_WORKER, 1, "algo-3", 2222);
    CHECK_ADDR(&c, DT_JOB_PS, 2, "algo-3", 2223);
    dt_cluster_free(&c);
    CHECK_OK(resolved(DT_RESOLVER_SAGEMAKER, (const char *[]){"DTRAIN_SAGEMAKER_ROOT", root,
                                                             "DTRAIN_SAGEMAKER_PS", "1", NULL},
                      &c, NULL));
    CHECK(c.task_type == DT_JOB_PS && c.task_index == 2);
    dt_cluster_free(&c);
    /* Without the ps distribution: no ps, and a ps task is an error naming why. */
    write_file(path, J("{'epochs': '3'}"));
    CHECK_OK(resolved(DT_RESOLVER_SAGEMAKER, (const char *[]){"DTRAIN_SAGEMAKER_ROOT", root, NULL},
                      &c, NULL));
    CHECK(c.n_tasks[DT_JOB_PS] == 0 && c.n_tasks[DT_JOB_WORKER] == 2);
    dt_cluster_free(&c);
    CHECK_ERR(resolved(DT_RESOLVER_SAGEMAKER, (const char *[]){"DTRAIN_SAGEMAKER_ROOT", root,
                                                              "DTRAIN_SAGEMAKER_PS", "1", NULL},
                       &c, NULL),
              DT_ERR_INVALID, "no ps distribution");
    /* A current host that is not among the hosts. */
    snprintf(path, sizeof path, "%s/resourceconfig.json", dir);
    write_file(path, J("{'current_host': 'algo-9', 'hosts': ['algo-1']}"));
    CHECK_ERR(resolved(DT_RESOLVER_SAGEMAKER, (const char *[]){"DTRAIN_SAGEMAKER_ROOT", root, NULL},
                       &c, NULL),
              DT_ERR_INVALID, "resourceconfig.json: expected \"hosts\"");
    unlink(path);
    snprintf(path, sizeof path, "%s/hyperparameters.json", dir);
    unlink(path);
    rmdir(dir);
    snprintf(dir, sizeof dir, "%s/input", root);
    rmdir(dir);
    rmdir(root);
    /* The SM_ variables alone: one host is the master, alone. */
    CHECK_OK(resolved(DT_RESOLVER_AUTO,
                      (const char *[]){"DTRAIN_SAGEMAKER_ROOT", root, "SM_CURRENT_HOST", "algo-1",
                                       "SM_HOSTS", J("['algo-1']"), NULL},
                      &c, &used));
    CHECK(used == DT_RESOLVER_SAGEMAKER && c.is_chief && c.n_workers == 1);
    dt_cluster_free(&c);
}

TEST(cluster_resolver_mpi_and_detection_order)
{
    dt_cluster c;
    dt_resolver used;
    CHECK_OK(resolved(DT_RESOLVER_MPI,
                      (const char *[]){"PMI_RANK", "2", "PMI_SIZE", "3", "DTRAIN_PORT_BASE",
                                       "9100", NULL},
                      &c, &used));
    CHECK(used == DT_RESOLVER_MPI && c.rank == 2 && c.n_workers == 3);
    CHECK_ADDR(&c, DT_JOB_WORKER, 2, "localhost", 9102);
    dt_cluster_free(&c);
    CHECK_ERR(resolved(DT_RESOLVER_MPI,
                       (const char *[]){"OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "4",
                                        "OMPI_COMM_WORLD_LOCAL_SIZE", "2", NULL},
                       &c, NULL),
              DT_ERR_INVALID, "2 of the 4 processes run on this host");
    /* mpirun alone is not detected (the mpi communicator needs no cluster); TF_CONFIG wins over
     * a platform's variables; nothing at all is a local task. */
    CHECK_OK(resolved(DT_RESOLVER_AUTO,
                      (const char *[]){"OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "2",
                                       NULL},
                      &c, &used));
    CHECK(used == DT_RESOLVER_TF_CONFIG && !c.has_cluster);
    dt_cluster_free(&c);
    CHECK_OK(resolved(DT_RESOLVER_AUTO,
                      (const char *[]){"TF_CONFIG", J("{'cluster': {'worker': ['h:1', 'h:2']}, "
                                                      "'task': {'type': 'worker', 'index': 1}}"),
                                       "SLURM_PROCID", "0", "SLURM_STEP_NODELIST", "n1",
                                       "SLURM_STEP_TASKS_PER_NODE", "1", NULL},
                      &c, &used));
    CHECK(used == DT_RESOLVER_TF_CONFIG && c.rank == 1);
    dt_cluster_free(&c);
    dt_resolver r;
    CHECK_OK(dt_resolver_parse("sagemaker", &r));
    CHECK(r == DT_RESOLVER_SAGEMAKER && strcmp(dt_resolver_name(r), "sagemaker") == 0);
    CHECK_ERR(dt_resolver_parse("k8s", &r), DT_ERR_INVALID, "'k8s' is not a cluster resolver");
}

/* TFJob's enableDynamicWorker form, as its controller writes it: a worker knows the ps tasks
 * and itself, a ps task itself, whatever its index. */
TEST(cluster_sparse_worker_knows_the_ps_and_itself)
{
    dt_cluster c;
    CHECK_OK(dt_cluster_parse(J("{'sparseCluster': {'worker': {'2': 'w2.ns.svc:2222'}, 'ps': "
                                "['p0.ns.svc:2222', 'p1.ns.svc:2222']}, 'task': {'type': 'worker',"
                                " 'index': 2}}"), &c));
    CHECK(c.sparse && c.has_cluster && c.task_type == DT_JOB_WORKER && c.task_index == 2);
    CHECK(!c.is_chief && c.rank == 2 && c.n_tasks[DT_JOB_PS] == 2 && c.n_tasks[DT_JOB_CHIEF] == 0);
    CHECK(dt_cluster_known(&c, DT_JOB_WORKER, 2) && !dt_cluster_known(&c, DT_JOB_WORKER, 0) &&
          !dt_cluster_known(&c, DT_JOB_WORKER, 3));
    CHECK(strcmp(dt_cluster_addr(&c, DT_JOB_PS, 1)->host, "p1.ns.svc") == 0);
    uint64_t id = c.id;
    CHECK_ERR(dt_cluster_set_task(&c, "worker:0"), DT_ERR_INVALID, "sparseCluster is its own");
    dt_cluster_free(&c);
    CHECK_OK(dt_cluster_parse(J("{'sparseCluster': {'worker': {'0': 'w0:2222'}, 'ps': ['p0:2222']}"
                                ", 'task': {'type': 'worker', 'index': 0}}"), &c));
    CHECK(c.is_chief && c.id == id);
    dt_cluster_free(&c);
    CHECK_OK(dt_cluster_parse(J("{'sparseCluster': {'worker': {}, 'ps': ['p1.ns.svc:2222']}, "
                                "'task': {'type': 'ps', 'index': 1}}"), &c));
    CHECK(c.sparse && c.task_type == DT_JOB_PS && c.n_tasks[DT_JOB_PS] == 2 && c.id == id);
    CHECK(dt_cluster_known(&c, DT_JOB_PS, 1) && !dt_cluster_known(&c, DT_JOB_PS, 0));
    CHECK(strcmp(dt_cluster_addr(&c, DT_JOB_PS, 1)->host, "p1.ns.svc") == 0);
    dt_cluster_free(&c);
    /* The evaluator's is empty: it reads the checkpoints. */
    CHECK_OK(dt_cluster_parse(J("{'sparseCluster': {'worker': {}, 'ps': []}, "
                                "'task': {'type': 'evaluator', 'index': 0}}"), &c));
    CHECK(c.sparse && c.task_type == DT_JOB_EVALUATOR && c.rank == -1);
    dt_cluster_free(&c);
}

/* What the form cannot be: each named. */
TEST(cluster_sparse_form_errors_are_named)
{
    dt_cluster c;
    CHECK_ERR(dt_cluster_parse(J("{'sparseCluster': {'worker': {}, 'ps': []}, 'task': "
                                 "{'type': 'chief', 'index': 0}}"), &c),
              DT_ERR_INVALID, "sparseCluster (TFJob's enableDynamicWorker) gives a chief task");
    CHECK_ERR(dt_cluster_parse(J("{'sparseCluster': {'worker': {}, 'ps': ['p:1']}, 'task': "
                                 "{'type': 'evaluator', 'index': 0}}"), &c),
              DT_ERR_INVALID, "sparseCluster: an evaluator's is empty, found 1 ps");
    CHECK_ERR(dt_cluster_parse(J("{'sparseCluster': {'worker': {'1': 'w1:2222'}, 'ps': ['p:1']}, "
                                 "'task': {'type': 'worker', 'index': 2}}"), &c),
              DT_ERR_INVALID, "sparseCluster.worker: a worker's holds itself alone");
    CHECK_ERR(dt_cluster_parse(J("{'sparseCluster': {'worker': {'1': 'w1:2222'}}, "
                                 "'task': {'type': 'worker', 'index': 1}}"), &c),
              DT_ERR_INVALID, "sparseCluster.ps: no ps task");
    CHECK_ERR(dt_cluster_parse(J("{'sparseCluster': {'ps': ['p0:1', 'p1:1']}, "
                                 "'task': {'type': 'ps', 'index': 1}}"), &c),
              DT_ERR_INVALID, "a ps task's holds its own address alone");
    CHECK_ERR(dt_cluster_parse(J("{'sparseCluster': {'ps': ['p0:1']}, 'cluster': {}, "
                                 "'task': {'type': 'ps', 'index': 0}}"), &c),
              DT_ERR_INVALID, "both cluster and sparseCluster");
    CHECK_ERR(dt_cluster_parse(J("{'sparseCluster': {'ps': ['p0:1'], 'chief': []}, "
                                 "'task': {'type': 'ps', 'index': 0}}"), &c),
              DT_ERR_INVALID, "sparseCluster: unknown job 'chief'");
    CHECK_ERR(dt_cluster_parse(J("{'sparseCluster': {'worker': {'0': 'w:1'}, 'ps': ['w:1']}, "
                                 "'task': {'type': 'worker', 'index': 0}}"), &c),
              DT_ERR_INVALID, "cluster.ps[0]: 'w:1' is also cluster.worker[0]");
    CHECK_ERR(dt_cluster_parse(J("{'sparseCluster': {'worker': {'0': 7}, 'ps': ['p:1']}, "
                                 "'task': {'type': 'worker', 'index': 0}}"), &c),
              DT_ERR_INVALID, "sparseCluster.worker: not a \"host:port\" string");
    CHECK_ERR(dt_cluster_parse(J("{'sparseCluster': {'ps': ['p0:1']}}"), &c),
              DT_ERR_INVALID, "task: missing");
}
