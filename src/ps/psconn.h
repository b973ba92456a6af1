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

#endif
