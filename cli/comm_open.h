/* The flags of the commands that join a cluster, filling the library's dt_comm_options
 * (include/dtrain/comm_open.h), which opens the communicator. */
#ifndef DTRAIN_CLI_COMM_OPEN_H
#define DTRAIN_CLI_COMM_OPEN_H

#include <stdbool.h>

#include "dtrain/comm_open.h"

typedef dt_comm_options cli_comm_flags;

/* The flag table rows for cli_comm_flags (7 rows), to append to a command's own table. */
#define CLI_COMM_FLAGS(f)                                                                          \
    {"comm", FLAG_STRING, "tcp", "communicator: tcp (TF_CONFIG names the cluster) or mpi "       \
     "(mpirun or srun names it)", &(f).backend, false},                                           \
    {"secret-file", FLAG_STRING, NULL, "file holding the cluster secret (default: env "          \
     "DTRAIN_CLUSTER_SECRET)", &(f).secret_file, false},                                          \
    {"insecure", FLAG_BOOL, "false", "allow a cluster with non-loopback addresses to run "       \
     "without a secret", &(f).insecure, false},                                                   \
    {"connect-timeout", FLAG_FLOAT, "300", "seconds to wait for every task to connect",          \
     &(f).connect_timeout, false},                                                                \
    {"timeout", FLAG_FLOAT, "60", "seconds a collective may wait for a peer before it fails",    \
     &(f).timeout, false},                                                                        \
    {"shm", FLAG_BOOL, "true", "tcp: when every task runs on this host, all-reduce through "     \
     "shared memory, and train keeps one copy of the parameters there, each worker updating "    \
     "its share of them (--shm=false: always over TCP)", &(f).shm, false},                       \
    {"task", FLAG_STRING, NULL, "TYPE:INDEX: this process's task in TF_CONFIG's cluster, "        \
     "overriding TF_CONFIG's task", &(f).task, false}

#endif
