/* Parameter-server messages over a connection (see psconn.h). */
#include "psconn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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

dt_status dt_psconn_seal(dt_session *s, dt_psbuf *b, size_t from)
{
    /* Room first: a frame is counted only once its tag is in place. */
    dt_status st = b->cap - b->len < DT_FRAME_TAG_BYTES
                       ? grow(b, b->len + (b->len >> 1) + DT_FRAME_TAG_BYTES)
                       : DT_OK;
    if (st == DT_OK &&
        (st = dt_frame_mac_seal(&s->send, b->data + from, b->len - from, b->data + b->len)) ==
            DT_OK)
        b->len += DT_FRAME_TAG_BYTES;
    return st;
}

/* n bytes into dst: those read ahead first (a may be NULL), then from fd. */
static dt_status read_bytes(int fd, dt_psconn_ahead *a, void *dst, size_t n, double deadline,
                            const char *who)
{
    size_t have = a ? a->len - a->off : 0;
    if (have > n)
        have = n;
    if (have > 0) {
        memcpy(dst, a->data + a->off, have);
        a->off += have;
        if (a->off == a->len)
            a->off = a->len = 0;
    }
    return n > have ? dt_sock_recv_all(fd, (uint8_t *)dst + have, n - have, deadline, who)
                    : DT_OK;
}

/* A message's buffer grows by at most what has arrived, and by this much at first. */
#define FIRST_GROWTH ((size_t)1 << 20)

/* Bytes in->data[have .. want) from the connection, the buffer grown as they come: a peer that
 * declares a large payload and sends little makes this side allocate little. */
static dt_status read_growing(int fd, dt_psconn_ahead *a, dt_psbuf *in, size_t have, size_t want,
                              double deadline, const char *who)
{
    while (have < want) {
        size_t step = have < FIRST_GROWTH ? FIRST_GROWTH : have;
        size_t upto = want - have < step ? want : have + step;
        dt_status st = grow(in, upto);
        if (st || (st = read_bytes(fd, a, in->data + have, upto - have, deadline, who)))
            return st;
        have = upto;
    }
    return DT_OK;
}

dt_status dt_psconn_recv_ahead(int fd, dt_psconn_ahead *a, dt_session *s, const char *who,
                               double deadline, dt_psbuf *in, dt_psmsg *out)
{
    in->len = 0;
    dt_status st = grow(in, DT_PSMSG_HEADER_BYTES + DT_FRAME_TAG_BYTES);
    uint32_t size = 0;
    if (st || (st = read_bytes(fd, a, in->data, DT_PSMSG_HEADER_BYTES, deadline, who)) ||
        (st = dt_psmsg_peek(in->data, who, &size)))
        return st;
    size_t n = DT_PSMSG_HEADER_BYTES + (size_t)size;
    if ((st = read_growing(fd, a, in, DT_PSMSG_HEADER_BYTES, n + DT_FRAME_TAG_BYTES, deadline,
                           who)) ||
        (st = dt_frame_mac_check(&s->recv, in->data, n, in->data + n, who)))
        return st;
    in->len = n;
    return dt_psmsg_decode(in->data, in->len, who, out);
}

dt_status dt_psconn_recv(int fd, dt_session *s, const char *who, double deadline, dt_psbuf *in,
                         dt_psmsg *out)
{
    return dt_psconn_recv_ahead(fd, NULL, s, who, deadline, in, out);
}

/* Read ahead in pieces of this many bytes at most. */
#define AHEAD_PIECE ((size_t)1 << 20)

dt_status dt_psconn_read_ahead(int fd, dt_psconn_ahead *a, const char *who)
{
    for (;;) {
        if (a->cap - a->len < AHEAD_PIECE) {
            size_t cap = a->cap ? 2 * a->cap : 2 * AHEAD_PIECE;
            uint8_t *p = realloc(a->data, cap);
            if (!p)
                return dt_error(DT_ERR_NOMEM, "no memory for %zu bytes from %s", cap, who);
            a->data = p, a->cap = cap;
        }
        ssize_t k = recv(fd, a->data + a->len, a->cap - a->len, MSG_DONTWAIT);
        if (k > 0) {
            a->len += (size_t)k;
            continue;
        }
        if (k == 0)
            return dt_error(DT_ERR_PEER, "%s closed the connection", who);
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return DT_OK;
        return dt_error(DT_ERR_IO, "receiving from %s: %s", who, strerror(errno));
    }
}

void dt_psconn_ahead_clear(dt_psconn_ahead *a) { a->len = a->off = 0; }

void dt_psconn_ahead_free(dt_psconn_ahead *a)
{
    free(a->data);
    *a = (dt_psconn_ahead){0};
}
