/* Parameter-server messages over a connection (see psconn.h). */
#include "psconn.h"

#include <stdlib.h>

#include "../net/sock.h"

dt_status dt_psconn_send(int fd, const dt_psbuf *b, const char *who, double deadline)
{
    return dt_sock_send_all(fd, b->data, b->len, deadline, who);
}

static dt_status grow(dt_psbuf *b, size_t n)
{
    if (n <= b->cap)
        return DT_OK;
    uint8_t *p = realloc(b->data, n);
    if (!p)
        return dt_error(DT_ERR_NOMEM, "no memory for a %zu-byte ps message", n);
    b->data = p, b->cap = n;
    return DT_OK;
}

dt_status dt_psconn_recv(int fd, const char *who, double deadline, dt_psbuf *in, dt_psmsg *out)
{
    in->len = 0;
    dt_status st = grow(in, DT_PSMSG_HEADER_BYTES);
    uint32_t size = 0;
    if (st || (st = dt_sock_recv_all(fd, in->data, DT_PSMSG_HEADER_BYTES, deadline, who)) ||
        (st = dt_psmsg_peek(in->data, who, &size)) ||
        (st = grow(in, DT_PSMSG_HEADER_BYTES + (size_t)size)) ||
        (st = dt_sock_recv_all(fd, in->data + DT_PSMSG_HEADER_BYTES, size, deadline, who)))
        return st;
    in->len = DT_PSMSG_HEADER_BYTES + (size_t)size;
    return dt_psmsg_decode(in->data, in->len, who, out);
}
