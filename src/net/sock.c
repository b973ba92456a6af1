/* TCP sockets with deadlines (see sock.h). */
#include "sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../core/clock.h"

/* poll() timeout in ms for the time left until deadline, rounded up so a wait never ends early
 * and spins; 0 when it has passed. */
static int ms_left(double deadline)
{
    double left = deadline - dt_clock_now();
    if (left <= 0.0)
        return 0;
    double ms = ceil(left * 1000.0);
    return ms > 1e9 ? 1000000000 : (int)ms;
}

static dt_status set_nonblocking(int fd)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return dt_error(DT_ERR_IO, "fcntl O_NONBLOCK: %s", strerror(errno));
    return DT_OK;
}

/* Keepalive probes after this many idle seconds, every KEEPALIVE_INTERVAL, KEEPALIVE_PROBES
 * times; and data unacknowledged for USER_TIMEOUT_MS ends a connection. A peer whose host is
 * powered off or cut off is then seen within about a minute, where TCP alone waits for hours.
 * (A stopped process on a live host still acknowledges: the tasks' own timeouts see that.) */
#define KEEPALIVE_IDLE 20
#define KEEPALIVE_INTERVAL 5
#define KEEPALIVE_PROBES 4
#define USER_TIMEOUT_MS 60000

/* Options for a connected socket: no Nagle delay, buffers large enough for a ring segment in
 * flight each way, and the keepalive above. Failures only cost speed or an early warning, so
 * they are ignored. */
static void tune_connected(int fd)
{
    int one = 1, buf = 4 << 20, idle = KEEPALIVE_IDLE, interval = KEEPALIVE_INTERVAL,
        probes = KEEPALIVE_PROBES;
    unsigned user_timeout = USER_TIMEOUT_MS;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
}

static void format_peer(const struct sockaddr_storage *sa, char *out, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        port = ntohs(a->sin_port);
        snprintf(out, cap, "%s:%u", ip, port);
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        port = ntohs(a->sin6_port);
        snprintf(out, cap, "[%s]:%u", ip, port);
    } else {
        snprintf(out, cap, "?");
    }
}

static dt_status resolve(const char *host, uint16_t port, int passive, struct addrinfo **res)
{
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    char service[8];
    snprintf(service, sizeof service, "%u", (unsigned)port);
    int rc = getaddrinfo(host, service, &hints, res);
    /* A name not (yet) known may become one: a pod's name appears once the pod has an address. */
    if (rc == EAI_NONAME || rc == EAI_AGAIN || rc == EAI_FAIL || rc == EAI_NODATA)
        return dt_error(DT_ERR_UNAVAILABLE, "%s does not resolve: %s", host, gai_strerror(rc));
    if (rc != 0)
        return dt_error(DT_ERR_INVALID, "%s: cannot resolve: %s", host, gai_strerror(rc));
    return DT_OK;
}

bool dt_bind_all(void)
{
    const char *v = getenv("DTRAIN_BIND_ALL");
    return v && strcmp(v, "1") == 0;
}

dt_status dt_sock_listen(const char *host, uint16_t port, int *fd, uint16_t *bound_port)
{
    *fd = -1;
    struct addrinfo *res;
    /* Every interface, of the family the task's own address has. */
    struct in6_addr v6;
    if (dt_bind_all())
        host = host && inet_pton(AF_INET6, host, &v6) == 1 ? "::" : "0.0.0.0";
    dt_status st = resolve(host, port, 1, &res);
    if (st)
        return st;
    int s = -1, err = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (s < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(s, ai->ai_addr, ai->ai_addrlen) == 0 && listen(s, 128) == 0)
            break;
        err = errno;
        close(s);
        s = -1;
    }
    freeaddrinfo(res);
    if (s < 0)
        return dt_error(DT_ERR_IO, "cannot listen on %s:%u: %s", host, (unsigned)port,
                        strerror(err));
    if ((st = set_nonblocking(s))) {
        close(s);
        return st;
    }
    if (bound_port && (st = dt_sock_local_port(s, bound_port))) {
        close(s);
        return st;
    }
    *fd = s;
    return DT_OK;
}

dt_status dt_sock_local_port(int fd, uint16_t *port)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        return dt_error(DT_ERR_IO, "cannot tell a socket's port: %s", strerror(errno));
    *port = sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                     : ntohs(((struct sockaddr_in *)&sa)->sin_port);
    return DT_OK;
}

dt_status dt_sock_accept(int listen_fd, double deadline, int *fd, char *peer, size_t peer_cap)
{
    *fd = -1;
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        int s = accept4(listen_fd, (struct sockaddr *)&sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (s >= 0) {
            tune_connected(s);
            format_peer(&sa, peer, peer_cap);
            *fd = s;
            return DT_OK;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return dt_error(DT_ERR_IO, "accept: %s", strerror(errno));
        int ms = ms_left(deadline);
        if (ms == 0)
            return DT_END;
        struct pollfd p = {listen_fd, POLLIN, 0};
        if (poll(&p, 1, ms) < 0 && errno != EINTR)
            return dt_error(DT_ERR_IO, "poll: %s", strerror(errno));
    }
}

/* Waits for a non-blocking connect to finish; 0 or the errno it failed with. */
static int finish_connect(int s, double deadline)
{
    for (;;) {
        struct pollfd p = {s, POLLOUT, 0};
        int ms = ms_left(deadline);
        if (ms == 0)
            return ETIMEDOUT;
        int rc = poll(&p, 1, ms);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0)
            return errno;
        if (rc == 0)
            continue; /* ms_left decides when it is over */
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            return errno;
        return err;
    }
}

dt_status dt_sock_connect(const char *host, uint16_t port, double deadline, int *fd)
{
    *fd = -1;
    struct addrinfo *res;
    dt_status st = resolve(host, port, 0, &res);
    if (st)
        return st;
    int err = ECONNREFUSED;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                       ai->ai_protocol);
        if (s < 0) {
            err = errno;
            continue;
        }
        int rc = connect(s, ai->ai_addr, ai->ai_addrlen);
        err = rc == 0 ? 0 : errno;
        if (rc < 0 && errno == EINPROGRESS)
            err = finish_connect(s, deadline);
        if (err == 0) {
            tune_connected(s);
            freeaddrinfo(res);
            *fd = s;
            return DT_OK;
        }
        close(s);
    }
    freeaddrinfo(res);
    if (err == ETIMEDOUT)
        return dt_error(DT_ERR_TIMEOUT, "connect to %s:%u: timed out", host, (unsigned)port);
    return dt_error(DT_ERR_PEER, "connect to %s:%u: %s", host, (unsigned)port, strerror(err));
}

/* Waits until fd is ready for events or the deadline passes. */
static dt_status wait_ready(int fd, short events, double deadline, const char *what,
                            const char *who)
{
    for (;;) {
        int ms = ms_left(deadline);
        if (ms == 0)
            return dt_error(DT_ERR_TIMEOUT, "%s %s: timed out", what, who);
        struct pollfd p = {fd, events, 0};
        int rc = poll(&p, 1, ms);
        if (rc > 0)
            return DT_OK; /* errors and hang-ups show in the next read or write */
        if (rc < 0 && errno != EINTR)
            return dt_error(DT_ERR_IO, "poll: %s", strerror(errno));
    }
}

dt_status dt_sock_send_all(int fd, const void *buf, size_t n_bytes, double deadline,
                           const char *who)
{
    const uint8_t *p = buf;
    while (n_bytes > 0) {
        ssize_t k = send(fd, p, n_bytes, MSG_NOSIGNAL);
        if (k > 0) {
            p += k;
            n_bytes -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            dt_status st = wait_ready(fd, POLLOUT, deadline, "sending to", who);
            if (st)
                return st;
            continue;
        }
        if (k < 0 && (errno == EPIPE || errno == ECONNRESET))
            return dt_error(DT_ERR_PEER, "%s closed the connection", who);
        return dt_error(DT_ERR_IO, "sending to %s: %s", who, strerror(errno));
    }
    return DT_OK;
}

dt_status dt_sock_recv_all(int fd, void *buf, size_t n_bytes, double deadline, const char *who)
{
    uint8_t *p = buf;
    while (n_bytes > 0) {
        ssize_t k = recv(fd, p, n_bytes, 0);
        if (k > 0) {
            p += k;
            n_bytes -= (size_t)k;
            continue;
        }
        if (k == 0)
            return dt_error(DT_ERR_PEER, "%s closed the connection", who);
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            dt_status st = wait_ready(fd, POLLIN, deadline, "waiting for", who);
            if (st)
                return st;
            continue;
        }
        if (errno == ECONNRESET)
            return dt_error(DT_ERR_PEER, "%s closed the connection (reset)", who);
        return dt_error(DT_ERR_IO, "receiving from %s: %s", who, strerror(errno));
    }
    return DT_OK;
}

void dt_sock_close(int fd)
{
    if (fd >= 0)
        close(fd);
}
