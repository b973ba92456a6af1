/* Joining the cluster's communicator (see include/dtrain/comm_open.h). */
#include "dtrain/comm_open.h"

#include <stdlib.h>
#include <string.h>

#include "comm_tcp.h"

void dt_comm_options_default(dt_comm_options *o)
{
    memset(o, 0, sizeof *o);
    o->backend = "tcp";
    o->connect_timeout = 300.0;
    o->timeout = 60.0;
    o->shm = true;
}

dt_status dt_comm_options_check(const dt_comm_options *o)
{
    if (!o->backend || (strcmp(o->backend, "tcp") != 0 && strcmp(o->backend, "mpi") != 0))
        return dt_error(DT_ERR_INVALID, "backend: '%s' is not tcp or mpi",
                        o->backend ? o->backend : "(none)");
    if (!(o->connect_timeout > 0.0))
        return dt_error(DT_ERR_INVALID, "connect_timeout: must be positive, got %g",
                        o->connect_timeout);
    if (!(o->timeout > 0.0))
        return dt_error(DT_ERR_INVALID, "timeout: must be positive, got %g", o->timeout);
    return DT_OK;
}

dt_status dt_comm_open(const dt_comm_options *f, dt_cluster *cl, dt_comm **out)
{
    *out = NULL;
    memset(cl, 0, sizeof *cl);
    dt_status st = dt_comm_options_check(f);
    if (st)
        return st;
    if (strcmp(f->backend, "mpi") == 0)
        return dt_comm_mpi(f->timeout, out);
    st = dt_cluster_from_env(cl);
    if (st == DT_OK && f->task)
        st = dt_cluster_set_task(cl, f->task);
    if (st) {
        dt_cluster_free(cl);
        return st;
    }
    uint8_t *secret = NULL;
    size_t secret_len = 0;
    if ((st = dt_cluster_load_secret(f->secret_file, &secret, &secret_len)))
        return st;
    st = dt_comm_open_on(cl, f, secret, secret_len, -1, out);
    free(secret);
    if (st)
        dt_cluster_free(cl);
    return st;
}

dt_status dt_comm_listen_any(const char *host, int *fd, uint16_t *port)
{
    return dt_transport_listen_any(host, fd, port);
}

dt_status dt_comm_open_on(const dt_cluster *cl, const dt_comm_options *f, const uint8_t *secret,
                          size_t secret_len, int listen_fd, dt_comm **out)
{
    dt_tcp_options o;
    dt_tcp_options_default(&o);
    o.timeout = f->timeout;
    o.stall_warn = f->timeout / 2;
    if (f->segment_bytes)
        o.segment_bytes = f->segment_bytes;
    o.shm = f->shm;
    o.transport.secret = secret;
    o.transport.secret_len = secret_len;
    o.transport.insecure = f->insecure;
    o.transport.connect_timeout = f->connect_timeout;
    o.transport.listen_fd = listen_fd;
    return dt_comm_tcp(cl, &o, out);
}

const char *dt_comm_describe(const dt_comm *c)
{
    return dt_comm_tcp_uses_shm(c) ? "tcp, all-reduce in shared memory" : c->ops->name;
}

int dt_comm_local_ranks(const dt_comm *c)
{
    if (dt_comm_tcp_uses_shm(c))
        return c->size;
    if (strcmp(c->ops->name, "mpi") == 0) {
        const char *names[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            const char *v = getenv(names[i]);
            char *end;
            long n = v ? strtol(v, &end, 10) : 0;
            if (v && *v && !*end && n >= 1 && n <= c->size)
                return (int)n;
        }
    }
    return 1;
}
