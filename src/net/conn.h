/* A framed connection between two tasks: frames (wire.h's 24-byte header and a payload) sent and
 * received whole before a deadline, the sizes checked before anything is allocated, and a peer's
 * ABORT frame read as its reason (internal to src/net). The collectives' full-duplex exchange
 * (transport.c) runs over the same frames; the handshake and request/response traffic between
 * tasks use these. */
#ifndef DTRAIN_NET_CONN_H
#define DTRAIN_NET_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/status.h"
#include "wire.h"

/* The most of a peer's ABORT reason kept. */
#define DT_ABORT_MSG_CAP 2048

/* Sends one frame: the header of h (its n_bytes the payload's) and the payload. */
dt_status dt_conn_send_frame(int fd, const char *who, const dt_frame_hdr *h, const void *payload,
                             double deadline);
/* Receives one frame's header (checked: magic, checksum, type, payload at most max_bytes) and
 * its payload into buf (cap bytes; DT_ERR_PEER naming who when it is larger). An ABORT frame
 * fails with DT_ERR_PEER and the peer's reason. */
dt_status dt_conn_recv_frame(int fd, const char *who, uint64_t max_bytes, double deadline,
                             dt_frame_hdr *h, void *buf, size_t cap);
/* Reads the n bytes of an ABORT frame's reason into out (one line, printable), best effort
 * within a second. */
void dt_conn_read_abort_reason(int fd, uint64_t n, char *out, size_t cap, const char *who);
/* Tells a peer why it is being dropped, in an ABORT frame, best effort within half a second. */
void dt_conn_refuse(int fd, const char *why);

#endif
