/* Frames over a connection (see conn.h). */
#include "conn.h"

#include <string.h>

#include "../core/clock.h"
#include "sock.h"

dt_status dt_conn_send_frame(int fd, const char *who, const dt_frame_hdr *h, const void *payload,
                             double deadline)
{
    uint8_t raw[DT_FRAME_HDR_BYTES];
    dt_frame_encode(h, raw);
    dt_status st = dt_sock_send_all(fd, raw, sizeof raw, deadline, who);
    if (st == DT_OK && h->n_bytes > 0)
        st = dt_sock_send_all(fd, payload, (size_t)h->n_bytes, deadline, who);
    return st;
}

dt_status dt_conn_recv_frame(int fd, const char *who, uint64_t max_bytes, double deadline,
                             dt_frame_hdr *h, void *buf, size_t cap)
{
    uint8_t raw[DT_FRAME_HDR_BYTES];
    dt_status st = dt_sock_recv_all(fd, raw, sizeof raw, deadline, who);
    if (st)
        return st;
    /* An ABORT's reason may be longer than the payloads this caller takes. */
    if ((st = dt_frame_decode(raw, max_bytes > DT_ABORT_MSG_CAP ? max_bytes : DT_ABORT_MSG_CAP,
                              h)))
        return dt_error_prefix(st, "%s", who);
    if (h->type == DT_FRAME_ABORT) {
        char why[DT_ABORT_MSG_CAP];
        dt_conn_read_abort_reason(fd, h->n_bytes, why, sizeof why, who);
        return dt_error(DT_ERR_PEER, "%s stopped: %s", who, why);
    }
    if (h->n_bytes > max_bytes || h->n_bytes > cap)
        return dt_error(DT_ERR_PEER, "%s sent a frame of %llu bytes, more than the %zu expected",
                        who, (unsigned long long)h->n_bytes,
                        (size_t)(max_bytes < cap ? max_bytes : cap));
    return h->n_bytes ? dt_sock_recv_all(fd, buf, (size_t)h->n_bytes, deadline, who) : DT_OK;
}

void dt_conn_read_abort_reason(int fd, uint64_t n, char *out, size_t cap, const char *who)
{
    size_t take = n < cap - 1 ? (size_t)n : cap - 1;
    out[0] = '\0';
    if (dt_sock_recv_all(fd, out, take, dt_clock_now() + 1.0, who) == DT_OK)
        out[take] = '\0';
    for (size_t i = 0; out[i]; i++) /* one line, printable */
        if ((unsigned char)out[i] < 0x20)
            out[i] = ' ';
}

void dt_conn_refuse(int fd, const char *why)
{
    size_t n = strlen(why);
    dt_frame_hdr h = {DT_FRAME_ABORT, 0, 0, n};
    dt_conn_send_frame(fd, "peer", &h, why, dt_clock_now() + 0.5);
}
