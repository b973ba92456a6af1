/* dtrain server: a ps task of parameter-server training (the library's dt_ps_server_run). */
#include <stdio.h>

#include "commands.h"
#include "dtrain/ps.h"
#include "flags.h"

int cmd_server(int argc, char **argv)
{
    dt_ps_server_config c;
    dt_ps_server_config_default(&c);
    bool help;
    flag_def flags[] = {
        {"task", FLAG_STRING, NULL, "this task as TYPE:INDEX (default: TF_CONFIG's task)",
         &c.task, false},
        {"secret-file", FLAG_STRING, NULL, "file holding the cluster secret (default: env "
         "DTRAIN_CLUSTER_SECRET)", &c.secret_file, false},
        {"insecure", FLAG_BOOL, "false", "allow a non-loopback cluster without a secret",
         &c.insecure, false},
        {"coordinator-timeout", FLAG_FLOAT, "120", "seconds without a word from the coordinator "
         "(the chief) before the task gives up", &c.coordinator_timeout, false},
        {"request-timeout", FLAG_FLOAT, "60", "seconds a request that has begun has to arrive",
         &c.request_timeout, false},
        {"threads", FLAG_INT, "1", "threads for the row-wise updates", &c.threads, false},
        {"snapshot-dir", FLAG_STRING, NULL, "snapshots of this task's shards go to "
         "DIR/ps-INDEX.snapshot; started again, the task restores them from there (the updates "
         "after the snapshot are lost); removed when the job ends", &c.snapshot_dir, false},
        {"snapshot-secs", FLAG_FLOAT, "30", "--snapshot-dir: seconds between snapshots (0: "
         "none)", &c.snapshot_secs, false},
        {"help", FLAG_BOOL, "false", "this text", &help, false},
    };
    int n_flags = (int)(sizeof flags / sizeof flags[0]);
    if (flags_parse(flags, n_flags, argc, argv))
        return cli_fail(2, dt_last_error());
    if (help) {
        printf("usage: dtrain server [flags]\n\n"
               "Serves the ps task TF_CONFIG names: holds the shards of the tables the\n"
               "coordinator (the chief) defines, answers the workers' pulls and applies their\n"
               "pushes, and exits 0 when the coordinator stops it, or 1 after\n"
               "--coordinator-timeout seconds without one.\n\nflags:\n");
        flags_print_help(flags, n_flags, stdout);
        return 0;
    }
    if (!(c.coordinator_timeout > 0.0 && c.coordinator_timeout <= 86400.0))
        return cli_fail(2, "--coordinator-timeout: must be in (0, 86400] seconds");
    if (!(c.request_timeout > 0.0 && c.request_timeout <= 3600.0))
        return cli_fail(2, "--request-timeout: must be in (0, 3600] seconds");
    if (c.threads < 1 || c.threads > 256)
        return cli_fail(2, "--threads: must be in 1..256");
    if (!(c.snapshot_secs >= 0.0 && c.snapshot_secs <= 86400.0))
        return cli_fail(2, "--snapshot-secs: must be in [0, 86400] seconds");
    dt_ps_server_report r = {0};
    if (dt_ps_server_run(&c, &r))
        return cli_fail(1, dt_last_error());
    fprintf(stderr, "dtrain server: %s stopped by the coordinator: %llu requests, %llu rows "
            "pulled, %llu rows pushed\n", r.task, (unsigned long long)r.requests,
            (unsigned long long)r.rows_pulled, (unsigned long long)r.rows_pushed);
    return 0;
}
