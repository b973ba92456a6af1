/* TCP sockets with deadlines.
 *
 * Every socket here is non-blocking and every wait goes through poll() with the time left until
 * an absolute deadline (dt_clock_now() seconds), so no call can block past it. EINTR is retried,
 * short reads and writes are continued, SIGPIPE is avoided with MSG_NOSIGNAL. Connected sockets
 * get TCP_NODELAY (collectives send small frames whose latency matters) and large buffers.
 *
 * Errors name the peer as the caller describes it (`who`, e.g. "worker:1 (127.0.0.1:4001)"):
 * DT_ERR_PEER when it closed or reset the connection, DT_ERR_TIMEOUT when the deadline passed,
 * DT_ERR_IO for the rest. */
#ifndef DTRAIN_SOCK_H
#define DTRAIN_SOCK_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "dtrain/status.h"

/* Listens on host:port (port 0: any free port, read back into *bound_port). */
dt_status dt_sock_listen(const char *host, uint16_t port, int *fd, uint16_t *bound_port);
/* The local port fd is bound to. */
dt_status dt_sock_local_port(int fd, uint16_t *port);
/* Accepts one connection before deadline; *peer receives "ip:port". DT_END when the deadline
 * passed with no connection (not an error: the caller decides). */
dt_status dt_sock_accept(int listen_fd, double deadline, int *fd, char *peer, size_t peer_cap);
/* One connection attempt to host:port, finished before deadline. DT_ERR_PEER when refused or
 * unreachable (worth retrying), DT_ERR_UNAVAILABLE when the name does not resolve (yet: worth
 * retrying too), DT_ERR_INVALID when it cannot be resolved at all. */
dt_status dt_sock_connect(const char *host, uint16_t port, double deadline, int *fd);
/* Whether tasks listen on every interface (DTRAIN_BIND_ALL=1, --bind-all) rather than on the
 * address their own name resolves to: for hosts whose name resolves to an address they do not
 * hold (behind NAT, a load balancer's). dt_sock_listen binds so. */
bool dt_bind_all(void);
/* Sends or receives exactly n_bytes before deadline. */
dt_status dt_sock_send_all(int fd, const void *buf, size_t n_bytes, double deadline,
                           const char *who);
dt_status dt_sock_recv_all(int fd, void *buf, size_t n_bytes, double deadline, const char *who);
/* Closes fd if >= 0. */
void dt_sock_close(int fd);

#endif
