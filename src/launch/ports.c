/* Free loopback ports for a launch's tasks (see ports.h). The ports are released before the
 * tasks bind them, so another program may take one in between; a task then fails to bind and
 * the restart rules apply, as for any lost task. */
#include "ports.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

dt_status dt_launch_pick_ports(uint16_t *ports, int n, bool keep)
{
    dt_status st = DT_OK;
    int *fds = malloc((size_t)(n > 0 ? n : 1) * sizeof *fds);
    if (!fds)
        return dt_error(DT_ERR_NOMEM, "no memory for %d ports", n);
    for (int i = 0; i < n; i++)
        fds[i] = -1;
    for (int i = 0; i < n; i++) {
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (keep && ports[i] != 0) {
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            int one = 1;
            a.sin_port = htons(ports[i]);
            if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
                bind(fd, (struct sockaddr *)&a, sizeof a) == 0) {
                fds[i] = fd;
                continue;
            }
            if (fd >= 0)
                close(fd);
            a.sin_port = 0;
        }
        socklen_t len = sizeof a;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
            getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
            st = dt_error(DT_ERR_IO, "cannot find a free port on 127.0.0.1: %s", strerror(errno));
            if (fd >= 0)
                close(fd);
            goto fail;
        }
        fds[i] = fd;
        ports[i] = ntohs(a.sin_port);
    }
fail:
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    return st;
}
