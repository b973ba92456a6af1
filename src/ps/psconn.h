/* Parameter-server messages (psmsg.h) over an authenticated connection: one message at a time,
 * each read whole before a deadline, its header checked before its payload is allocated
 * (internal to the library). */
#ifndef DTRAIN_PS_PSCONN_H
#define DTRAIN_PS_PSCONN_H

#include "psmsg.h"

/* Sends the bytes of b (one or more encoded messages). */
dt_status dt_psconn_send(int fd, const dt_psbuf *b, const char *who, double deadline);
/* Receives one message into in (grown as needed) and decodes it into out, whose views point
 * into in. DT_ERR_PEER when the peer closed the connection before a message began ("closed"),
 * DT_ERR_FORMAT for a message amiss, the socket's errors otherwise. */
dt_status dt_psconn_recv(int fd, const char *who, double deadline, dt_psbuf *in, dt_psmsg *out);

/* Bytes read from a connection ahead of its message reads: a client reading replies while it
 * still sends (so that neither side's send waits on the other's read), then reading them as
 * messages. */
typedef struct {
    uint8_t *data;
    size_t len, off, cap;
} dt_psconn_ahead;

/* Whatever fd holds now, without waiting, appended to a. DT_ERR_PEER when the peer closed the
 * connection. */
dt_status dt_psconn_read_ahead(int fd, dt_psconn_ahead *a, const char *who);
/* dt_psconn_recv taking a's bytes first. */
dt_status dt_psconn_recv_ahead(int fd, dt_psconn_ahead *a, const char *who, double deadline,
                               dt_psbuf *in, dt_psmsg *out);
void dt_psconn_ahead_clear(dt_psconn_ahead *a);
void dt_psconn_ahead_free(dt_psconn_ahead *a);

#endif
