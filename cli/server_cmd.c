/* dtrain server: a ps task of parameter-server training (the library's dt_ps_server_run). */
#include <stdio.h>

#include <stdlib.h>

#include "commands.h"
#include "comm_open.h"
#include "config_flags.h"
#include "dtrain/ps.h"
#include "flags.h"

int cmd_server(int argc, char **argv)
{
    dt_ps_server_config c;
    dt_ps_server_config_default(&c);
    bool help;
    flag_def flags[16];
    flag_ext exts[16];
    flag_table t = {flags, 0, 16, exts};
#define ROW(...) flags_add_field(&t, c, __VA_ARGS__)
    CLI_MEMBER_FLAGS_ADD(&t, c);
    ROW("coordinator-timeout", FLAG_FLOAT, coordinator_timeout, "seconds without a word from the "
        "coordinator (the chief) before the task gives up");
    ROW("request-timeout", FLAG_FLOAT, request_timeout, "seconds a request that has begun has to "
        "arrive");
    ROW("threads", FLAG_INT, threads, "threads for the row-wise updates");
    ROW("snapshot-dir", FLAG_STRING, snapshot_dir, "snapshots of this task's shards go to "
        "DIR/ps-INDEX.snapshot; started again, the task restores them from there (the updates "
        "after the snapshot are lost); removed when the job ends");
    ROW("model-dir", FLAG_STRING, model_dir, "the job's model directory: the chief's "
        "checkpoints have this task write its shards there (or within it), nowhere else");
    ROW("snapshot-secs", FLAG_FLOAT, snapshot_secs, "--snapshot-dir: seconds between snapshots "
        "(0: none)");
#undef ROW
    cli_resolver resolver = {0};
    cli_resolver_flags_add(&t, &resolver);
    flags_add(&t, (flag_def){"help", FLAG_BOOL, "false", "this text", &help, NULL});
    int n_flags = t.n;
    if (flags_parse(flags, n_flags, argc, argv))
        return cli_fail(2, dt_last_error());
    if (help) {
        printf("usage: dtrain server [flags]\n\n"
               "Serves the ps task TF_CONFIG names: holds the shards of the tables the\n"
               "coordinator (the chief) defines, answers the workers' pulls and applies their\n"
               "pushes, and exits 0 when the coordinator stops it, or 138 (transient) after\n"
               "--coordinator-timeout seconds without one.\n\nflags:\n");
        flags_print_help(flags, n_flags, stdout);
        return 0;
    }
    if (dt_ps_server_config_check(&c))
        return cli_fail(2, flags_name_fields(flags, n_flags, dt_last_error()));
    /* On SageMaker every host runs a ps task beside its master or worker: this is that one. */
    setenv("DTRAIN_SAGEMAKER_PS", "1", 1);
    int resolved = cli_resolver_apply(&resolver);
    if (resolved)
        return resolved;
    dt_ps_server_report r = {0};
    dt_status st = dt_ps_server_run(&c, &r);
    if (st)
        return cli_fail_status(st, flags_name_fields(flags, n_flags, dt_last_error()));
    fprintf(stderr, "dtrain server: %s stopped by the coordinator: %llu requests, %llu rows "
            "pulled, %llu rows pushed\n", r.task, (unsigned long long)r.requests,
            (unsigned long long)r.rows_pulled, (unsigned long long)r.rows_pushed);
    return 0;
}
