/* Parameter-server messages (psmsg.h) over an authenticated connection: one message at a time,
 * each followed on the wire by the 16-byte MAC of its bytes (header and payload) as the
 * connection's next frame in its direction (net/session.h), read whole before a deadline and
 * checked before it is decoded (internal to the library). A message's buffer grows as its bytes
 * arrive, never to more than twice what came plus a MiB, so a header that declares a large
 * payload makes no one allocate it before it is sent. */
#ifndef DTRAIN_PS_PSCONN_H
#define DTRAIN_PS_PSCONN_H

#include "../net/session.h"
#include "psmsg.h"

/* Appends to b the MAC of the message at b->data + from .. b->len, the session's next frame
 * out. Every message sent is sealed once, in the order sent. */
dt_status dt_psconn_seal(dt_session *s, dt_psbuf *b, size_t from);
/* Sends the bytes of b (one or more sealed messages). */
dt_status dt_psconn_send(int fd, const dt_psbuf *b, const char *who, double deadline);
/* Receives one message into in (grown as its bytes come, in->len its length without the MAC),
 * checks its MAC as the session's next frame in, and decodes it into out, whose views point
 * into in. DT_ERR_PEER when the peer closed the connection before a message began ("closed"),
 * DT_ERR_AUTH for a bad MAC (the connection must be dropped: the frames are out of step),
 * DT_ERR_FORMAT for a message amiss, the socket's errors otherwise. */
dt_status dt_psconn_recv(int fd, dt_session *s, const char *who, double deadline, dt_psbuf *in,
                         dt_psmsg *out);

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
dt_status dt_psconn_recv_ahead(int fd, dt_psconn_ahead *a, dt_session *s, const char *who,
                               double deadline, dt_psbuf *in, dt_psmsg *out);
void dt_psconn_ahead_clear(dt_psconn_ahead *a);
void dt_psconn_ahead_free(dt_psconn_ahead *a);

#endif
