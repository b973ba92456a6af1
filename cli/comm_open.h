/* Opening the communicator a command asks for: the cluster from TF_CONFIG, the secret, and the
 * backend (tcp or mpi). Shared by the commands that join a cluster. */
#ifndef DTRAIN_CLI_COMM_OPEN_H
#define DTRAIN_CLI_COMM_OPEN_H

#include <stdbool.h>

#include "dtrain/cluster.h"
#include "dtrain/comm.h"

typedef struct {
    const char *comm;        /* "tcp" or "mpi" */
    const char *secret_file; /* NULL: env DTRAIN_CLUSTER_SECRET, else none */
    bool insecure;
    double connect_timeout;  /* seconds */
    double timeout;          /* seconds per collective */
    size_t segment_bytes;    /* tcp ring segment; 0: the default */
    bool shm;                /* tcp: all-reduce through shared memory when all tasks share a host */
    const char *task;        /* "worker:1" overrides TF_CONFIG's task; NULL: TF_CONFIG's */
} cli_comm_flags;

/* The flag table rows for cli_comm_flags (7 rows), to append to a command's own table. */
#define CLI_COMM_FLAGS(f)                                                                          \
    {"comm", FLAG_STRING, "tcp", "communicator: tcp (TF_CONFIG names the cluster) or mpi "       \
     "(mpirun or srun names it)", &(f).comm, false},                                              \
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

/* Opens the communicator; cl receives the cluster (free it after the communicator). */
dt_status cli_comm_open(const cli_comm_flags *f, dt_cluster *cl, dt_comm **out);
/* The communicator's name for messages: "tcp", "tcp, all-reduce in shared memory", "mpi". */
const char *cli_comm_describe(const dt_comm *c);

/* How many of the communicator's ranks run on this machine, as far as it can tell: all of them
 * when they meet in shared memory; under mpirun, what Open MPI (OMPI_COMM_WORLD_LOCAL_SIZE) or
 * MPICH (MPI_LOCALNRANKS) says; else 1. */
int cli_comm_local_ranks(const dt_comm *c);

#endif
