/* dtrain cluster check: the cluster a TF_CONFIG describes, as this task sees it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "config_flags.h"
#include "dtrain/cluster.h"
#include "flags.h"

/* One line per task of the cluster, this one marked, each host resolved when resolve is set;
 * the first host that does not resolve fails the check. */
static dt_status print_tasks(const dt_cluster *c, bool resolve)
{
    dt_status first = DT_OK;
    char failed[512] = "";
    for (int j = 0; j < DT_JOB_COUNT; j++)
        for (int i = 0; i < c->n_tasks[j]; i++) {
            if (!dt_cluster_known(c, (dt_job)j, i))
                continue; /* a task a sparse cluster does not show */
            const dt_addr *a = &c->tasks[j][i];
            char ip[64] = "", name[DT_HOST_CAP + 48];
            dt_cluster_task_name(c, (dt_job)j, i, name, sizeof name);
            dt_status st = resolve ? dt_addr_resolve(a, ip, sizeof ip) : DT_OK;
            if (st && !first)
                first = st, snprintf(failed, sizeof failed, "%s: %s", name, dt_last_error());
            printf("%s%s%s%s%s\n", name, resolve ? (st ? " does not resolve" : " at ") : "",
                   resolve && !st ? ip : "",
                   (int)j == (int)c->task_type && i == c->task_index ? "  (this task)" : "",
                   j == DT_JOB_CHIEF && c->chief_named_master ? "  (TF_CONFIG's master)" : "");
        }
    return first ? dt_error(first, "%s", failed) : DT_OK;
}

static int check(const char *json, const char *task, bool resolve)
{
    dt_cluster c;
    dt_status st = json ? dt_cluster_parse(json, &c) : dt_cluster_from_env(&c);
    if (st == DT_OK && task)
        st = dt_cluster_set_task(&c, task);
    if (st)
        return cli_fail(1, dt_last_error());
    if (!c.has_cluster) {
        printf("no cluster: a single local task\n");
        dt_cluster_free(&c);
        return 0;
    }
    char me[DT_HOST_CAP + 48];
    dt_cluster_task_name(&c, c.task_type, c.task_index, me, sizeof me);
    if (c.sparse)
        printf("task: %s of TF_CONFIG's sparseCluster (TFJob's enableDynamicWorker): %s\n", me,
               c.task_type == DT_JOB_PS ? "a ps task, knowing itself alone"
               : c.task_type == DT_JOB_EVALUATOR ? "the evaluator, reading the checkpoints"
               : c.is_chief ? "worker 0, leading the workers' between-graph training"
                            : "a worker training between-graph, worker 0 leading");
    else if (c.rank >= 0)
        printf("task: %s, training rank %d of %d%s\n", me, c.rank, c.n_workers,
               c.is_chief ? ", the chief" : "");
    else
        printf("task: %s, not a training task (the cluster trains on %d)%s\n", me, c.n_workers,
               c.is_chief ? ", the chief of itself" : "");
    st = print_tasks(&c, resolve);
    dt_cluster_free(&c);
    return st ? cli_fail_status(st, dt_last_error()) : 0;
}

int cmd_cluster(int argc, char **argv)
{
    const char *json, *task;
    bool resolve, help;
    cli_resolver resolver = {0};
    flag_def flags[8];
    flag_table t = {flags, 0, 8, NULL};
    flags_add(&t, (flag_def){"tf-config", FLAG_STRING, NULL, "this TF_CONFIG instead of the "
                             "environment's", &json, NULL});
    flags_add(&t, (flag_def){"task", FLAG_STRING, NULL, "TYPE:INDEX: this task instead of "
                             "TF_CONFIG's", &task, NULL});
    flags_add(&t, (flag_def){"resolve", FLAG_BOOL, "false", "resolve every task's host name, as "
                             "its peers will", &resolve, NULL});
    cli_resolver_flags_add(&t, &resolver);
    flags_add(&t, (flag_def){"help", FLAG_BOOL, "false", "this text", &help, NULL});
    int n_flags = t.n;
    if (argc < 1 || strcmp(argv[0], "check") != 0) {
        if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
            printf("usage: dtrain cluster check [--tf-config JSON] [--task TYPE:INDEX] "
                   "[--resolve]\n");
            return 0;
        }
        return cli_fail(2, "cluster: give a subcommand: check (see dtrain cluster --help)");
    }
    if (flags_parse(flags, n_flags, argc - 1, argv + 1))
        return cli_fail(2, dt_last_error());
    if (help) {
        printf("usage: dtrain cluster check [--tf-config JSON] [--task TYPE:INDEX] "
               "[--resolve]\n\n"
               "Checks the cluster TF_CONFIG describes (the environment's, or --tf-config) as a\n"
               "task started with it would: prints this task, its role and every task of the\n"
               "cluster, each host resolved with --resolve. Exits 1 naming the field of a\n"
               "TF_CONFIG that is not valid, 138 naming a host that does not resolve (yet).\n\n"
               "flags:\n");
        flags_print_help(flags, n_flags, stdout);
        return 0;
    }
    int resolved = json ? 0 : cli_resolver_apply(&resolver);
    return resolved ? resolved : check(json, task, resolve);
}
