/* The mpi resolver: the cluster of the processes mpirun started on this host, for dtrain's own
 * communicators (the mpi communicator itself needs no cluster: --comm mpi). Rank and size from
 * Open MPI's OMPI_COMM_WORLD_RANK / _SIZE, or MPICH's and Intel MPI's PMI_RANK / PMI_SIZE; task
 * r at localhost:DTRAIN_PORT_BASE + r; the jobs of DTRAIN_JOBS as the slurm resolver gives them.
 * mpirun's environment does not name the other hosts, so a job over several hosts takes TF_CONFIG
 * or the slurm resolver instead: one that spans hosts is refused, naming the variables. Chosen by
 * name only (--cluster-resolver mpi): under mpirun, the mpi communicator is the usual choice. */
#include <stdio.h>
#include <stdlib.h>

#include "resolver.h"

#define MAX_TASKS 4096

typedef char addr_text[DT_HOST_CAP + 8];

/* Open MPI's variables, else PMI's. */
static dt_status mpi_var(dt_getenv_fn env, const char *ompi, const char *pmi, long long max,
                         long long *out)
{
    dt_status st = dt_resolver_env_int(env, ompi, max, out);
    return st == DT_END ? dt_resolver_env_int(env, pmi, max, out) : st;
}

static dt_status mpi_resolve(dt_getenv_fn env, char **tf_config)
{
    long long rank = 0, size = 0, local = 0, base = 8888;
    dt_status st = mpi_var(env, "OMPI_COMM_WORLD_RANK", "PMI_RANK", MAX_TASKS - 1, &rank);
    if (st == DT_OK)
        st = mpi_var(env, "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", MAX_TASKS, &size);
    if (st == DT_END)
        return dt_error(DT_ERR_INVALID, "neither OMPI_COMM_WORLD_RANK and _SIZE nor PMI_RANK and "
                        "PMI_SIZE are set: run under mpirun");
    if (st == DT_OK && (size < 1 || rank >= size))
        st = dt_error(DT_ERR_INVALID, "rank %lld of %lld processes", rank, size);
    dt_status lst = st ? st : mpi_var(env, "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                      MAX_TASKS, &local);
    if (lst == DT_OK && local != size)
        st = dt_error(DT_ERR_INVALID, "%lld of the %lld processes run on this host: mpirun does "
                      "not say where the others are; give TF_CONFIG, or train with --comm mpi",
                      local, size);
    else if (lst != DT_OK && lst != DT_END)
        st = lst;
    if (st == DT_OK && (st = dt_resolver_env_int(env, "DTRAIN_PORT_BASE", 65535, &base)) == DT_END)
        st = DT_OK;
    if (st == DT_OK && base + size - 1 > 65535)
        st = dt_error(DT_ERR_INVALID, "DTRAIN_PORT_BASE %lld: %lld ports pass 65535", base, size);
    if (st)
        return st;
    dt_resolver_jobs jobs;
    if ((st = dt_resolver_parse_jobs(env("DTRAIN_JOBS"), (int)size, &jobs)))
        return dt_error_prefix(st, "DTRAIN_JOBS (--jobs)");
    addr_text *addrs = calloc((size_t)size, sizeof *addrs);
    if (!addrs)
        return dt_error(DT_ERR_NOMEM, "no memory for %lld tasks", size);
    for (long long r = 0; r < size; r++)
        snprintf(addrs[r], sizeof addrs[0], "localhost:%lld", base + r);
    *tf_config = dt_resolver_tf_config(&jobs, addrs, (int)rank, false);
    free(addrs);
    return *tf_config ? DT_OK : dt_error(DT_ERR_NOMEM, "no memory for a TF_CONFIG");
}

const dt_resolver_ops dt_resolver_mpi_ops = {DT_RESOLVER_MPI, NULL, mpi_resolve};
