/* The wire formats of the cluster transport: the handshake hello, its MACs, and frame headers.
 * Pure functions over bytes (no sockets), so a fuzzer can drive the parsers directly.
 *
 * Handshake, on a new connection from the higher rank (client) to the lower (server):
 *   client -> server  hello_c                      (DT_HELLO_BYTES)
 *   server -> client  hello_s, mac_s               mac_s = HMAC-SHA256(secret, "S" hello_c hello_s)
 *   client -> server  mac_c                        mac_c = HMAC-SHA256(secret, "C" hello_c hello_s)
 *   server -> client  an ACK frame
 * Each side checks the other's hello (magic, version, cluster id, who it is) and MAC before it
 * trusts the connection; both hellos carry fresh random nonces, so a recorded exchange cannot be
 * replayed. Until then every read has a fixed small size: nothing a stranger sends can make a
 * peer allocate. Compares are constant-time.
 *
 * Hello (64 bytes, little-endian): magic "dtrainHS" | u16 version | u16 flags (0) | u32 task index |
 * u64 cluster id | u8 task type | 7 zero bytes | 32-byte nonce.
 *
 * Frame header (24 bytes, little-endian): u32 magic "DTF1" | u16 type | u16 op | u32 seq |
 * u32 crc32c of the other 20 header bytes | u64 payload bytes. */
#ifndef DTRAIN_WIRE_H
#define DTRAIN_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/status.h"

/* 2: the frames after the handshake carry a MAC (session.h); a version-1 peer is refused at its
 * hello rather than failing on its first frame. */
#define DT_WIRE_VERSION 2
#define DT_HELLO_BYTES 64
#define DT_MAC_BYTES 32
#define DT_FRAME_HDR_BYTES 24
#define DT_NONCE_BYTES 32

typedef struct {
    uint16_t version;
    uint64_t cluster_id;
    uint8_t task_type; /* a dt_job */
    uint32_t task_index;
    uint8_t nonce[DT_NONCE_BYTES];
} dt_hello;

void dt_hello_encode(const dt_hello *h, uint8_t out[DT_HELLO_BYTES]);
/* DT_ERR_AUTH: "not a dtrain peer (bad magic)", "protocol version 1, this dtrain speaks 2", a
 * task type out of range, non-zero reserved bytes. */
dt_status dt_hello_decode(const uint8_t in[DT_HELLO_BYTES], dt_hello *h);

/* role 'S' (server) or 'C' (client); secret may be empty (an unauthenticated cluster). */
void dt_hello_mac(const uint8_t *secret, size_t secret_len, char role,
                  const uint8_t hello_c[DT_HELLO_BYTES], const uint8_t hello_s[DT_HELLO_BYTES],
                  uint8_t mac[DT_MAC_BYTES]);
/* Constant-time equality of two MACs. */
bool dt_mac_equal(const uint8_t a[DT_MAC_BYTES], const uint8_t b[DT_MAC_BYTES]);

/* Fills buf with bytes from the kernel's random source. */
dt_status dt_random_bytes(void *buf, size_t n_bytes);

enum {
    DT_FRAME_ACK = 1,   /* handshake accepted; no payload */
    DT_FRAME_DATA = 2,  /* a piece of a collective's data */
    DT_FRAME_ABORT = 3, /* the sender failed: the payload is its error message */
};

typedef struct {
    uint16_t type;
    uint16_t op;  /* the collective (a dt_coll_op of coll/tcp), 0 outside collectives */
    uint32_t seq; /* the collective's number: every rank counts them alike */
    uint64_t n_bytes;
} dt_frame_hdr;

void dt_frame_encode(const dt_frame_hdr *h, uint8_t out[DT_FRAME_HDR_BYTES]);
/* DT_ERR_PEER: a bad magic or checksum, an unknown type, a payload above max_bytes. */
dt_status dt_frame_decode(const uint8_t in[DT_FRAME_HDR_BYTES], uint64_t max_bytes,
                          dt_frame_hdr *h);

#endif
