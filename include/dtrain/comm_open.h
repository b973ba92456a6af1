/* Joining the cluster's communicator: the cluster from TF_CONFIG (or mpirun's world), the
 * cluster secret, and the backend, as `dtrain train` and `dtrain bench` join it.
 *
 * tcp: TF_CONFIG names the cluster (its task may be overridden, as --task does); the secret is
 * the contents of secret_file, else env DTRAIN_CLUSTER_SECRET, else none (a cluster of more than
 * one task then refuses to start unless insecure, loopback or not, and runs unauthenticated with
 * a warning when it is; see dt_cluster_check_secret). With
 * shm, ranks on one host all-reduce through shared memory. mpi: the plugin and MPI_COMM_WORLD
 * (see dt_comm_mpi). */
#ifndef DTRAIN_COMM_OPEN_H
#define DTRAIN_COMM_OPEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/cluster.h"
#include "dtrain/comm.h"

typedef struct {
    const char *backend;     /* "tcp" or "mpi" */
    const char *secret_file; /* NULL: env DTRAIN_CLUSTER_SECRET, else none */
    bool insecure;           /* allow a cluster to run without a secret */
    double connect_timeout;  /* seconds to wait for every task to connect */
    double timeout;          /* seconds a collective may wait for a peer */
    size_t segment_bytes;    /* tcp ring segment; 0: the default */
    bool shm;                /* tcp: all-reduce through shared memory when all tasks share a host */
    const char *task;        /* "worker:1" overrides TF_CONFIG's task; NULL: TF_CONFIG's */
} dt_comm_options;

/* tcp, shared memory on, 300 s to connect, 60 s per collective. */
DT_API void dt_comm_options_default(dt_comm_options *o);
/* The backend's name and the timeouts, each error naming the field first ("timeout: ..."). */
DT_API dt_status dt_comm_options_check(const dt_comm_options *o);

/* Opens the communicator; cl receives the cluster (zeroed for mpi; free it after the
 * communicator). Errors name the field, the file or the peer. */
DT_API dt_status dt_comm_open(const dt_comm_options *o, dt_cluster *cl, dt_comm **out);

/* A ring whose members learn each other's ports from elsewhere (the parameter server's hybrid
 * workers, through the coordinator), joined in two steps: a listener on an ephemeral port of
 * host (*fd, *port), then the tcp communicator over cl, which names every member with its port,
 * accepting on that listener (listen_fd: taken, closed on failure too; -1: cl's own port). */
DT_API dt_status dt_comm_listen_any(const char *host, int *fd, uint16_t *port);
DT_API dt_status dt_comm_open_on(const dt_cluster *cl, const dt_comm_options *o,
                                 const uint8_t *secret, size_t secret_len, int listen_fd,
                                 dt_comm **out);

/* The communicator's name for messages: "tcp", "tcp, all-reduce in shared memory", "mpi". */
DT_API const char *dt_comm_describe(const dt_comm *c);

/* How many of the communicator's ranks run on this machine, as far as it can tell: all of them
 * when they meet in shared memory; under mpirun, what Open MPI (OMPI_COMM_WORLD_LOCAL_SIZE) or
 * MPICH (MPI_LOCALNRANKS) says; else 1. */
DT_API int dt_comm_local_ranks(const dt_comm *c);

#endif
