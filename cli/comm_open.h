/* The flags of the commands that join a cluster, filling the library's dt_comm_options
 * (include/dtrain/comm_open.h), which opens the communicator. */
#ifndef DTRAIN_CLI_COMM_OPEN_H
#define DTRAIN_CLI_COMM_OPEN_H

#include "dtrain/comm_open.h"
#include "flags.h"

/* The rows that make a process a cluster's member, for any options struct o (a dt_comm_options,
 * the ps server's dt_ps_server_config) with fields task, secret_file and insecure: which task
 * it is, and the secret that admits it. */
#define CLI_MEMBER_FLAGS_ADD(t, o)                                                                \
    do {                                                                                           \
        flags_add_field((t), (o), "task", FLAG_STRING, task, "TYPE:INDEX: this process's task "   \
                        "in TF_CONFIG's cluster, overriding TF_CONFIG's task");                   \
        flags_add_field((t), (o), "secret-file", FLAG_STRING, secret_file, "file holding the "    \
                        "cluster secret (default: env DTRAIN_CLUSTER_SECRET)");                   \
        flags_add_field((t), (o), "insecure", FLAG_BOOL, insecure, "allow a cluster to run "      \
                        "without a secret, unauthenticated (anyone who reaches its ports joins "  \
                        "it; on loopback, any local user)");                                      \
    } while (0)

/* Adds the 7 rows of o's fields (comm, secret-file, insecure, connect-timeout, timeout, shm,
 * task) to t, their defaults o's own: call dt_comm_options_default(o) first. */
void cli_comm_flags_add(flag_table *t, dt_comm_options *o);

#endif
