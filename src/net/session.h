/* The keys of one authenticated connection and the MAC of every frame sent over it after the
 * handshake (internal to the library; docs/SECURITY.md states the scheme).
 *
 * Key schedule: each direction's 32-byte key is HKDF-SHA256 (RFC 5869) with
 *   IKM  = the cluster secret (empty in a cluster without one),
 *   salt = hello_c || hello_s (the two 64-byte hellos as sent: both nonces, both task
 *          identities, the cluster id and the protocol version),
 *   info = "dtrain v2 frame key client->server" or "dtrain v2 frame key server->client".
 * Fresh nonces make every connection's keys new, so nothing recorded on one connection verifies
 * on another, and a direction's frames never verify in the other direction.
 *
 * Frame MAC: ChaCha20-Poly1305 (RFC 8439) over an empty plaintext with the frame as its
 * additional data, i.e. a Poly1305 tag of the frame under a one-time key drawn from the
 * direction's key and the nonce u32 direction (1 client->server, 2 server->client) || u64
 * counter, little-endian. Each side counts the frames of each direction from 0 and never takes
 * the count from the wire: a frame that was altered, injected, replayed, reordered or follows a
 * dropped one gets a tag computed for another count or other bytes, and fails. Poly1305 runs at
 * about 12 GB/s here (bench/mac_bench.c), against 1.7 GB/s for HMAC-SHA256. */
#ifndef DTRAIN_NET_SESSION_H
#define DTRAIN_NET_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/status.h"

#define DT_SESSION_KEY_BYTES 32
#define DT_FRAME_TAG_BYTES 16

enum { DT_DIR_CLIENT_TO_SERVER = 1, DT_DIR_SERVER_TO_CLIENT = 2 };

/* One connection's keys, one per direction, as the handshake derives them. */
typedef struct {
    uint8_t client_to_server[DT_SESSION_KEY_BYTES];
    uint8_t server_to_client[DT_SESSION_KEY_BYTES];
} dt_session_keys;

/* The key schedule above, from the secret (secret_len 0: none) and both hellos. */
dt_status dt_session_derive(const uint8_t *secret, size_t secret_len, const uint8_t *hello_c,
                            const uint8_t *hello_s, size_t hello_bytes, dt_session_keys *out);

/* One direction's MAC: its key and the frames counted so far. */
typedef struct {
    void *ctx; /* the cipher context, keyed once */
    uint32_t direction;
    uint64_t counter; /* the next frame's number */
} dt_frame_mac;

/* A connection's two directions, for one side of it. */
typedef struct {
    dt_frame_mac send, recv;
} dt_session;

/* The session of the client (is_client) or the server side of a connection with keys k. Free
 * with dt_session_close, which accepts a zeroed or half-opened session. */
dt_status dt_session_open(dt_session *s, const dt_session_keys *k, bool is_client);
void dt_session_close(dt_session *s);

/* The tag of the direction's next frame, the n_bytes at data; counts the frame. */
dt_status dt_frame_mac_seal(dt_frame_mac *m, const void *data, size_t n_bytes,
                            uint8_t tag[DT_FRAME_TAG_BYTES]);
/* Whether tag is that of the direction's next frame over the n_bytes at data (counted when it
 * is): DT_ERR_AUTH "frame N: bad MAC ..." naming who otherwise. Compared in constant time. */
dt_status dt_frame_mac_check(dt_frame_mac *m, const void *data, size_t n_bytes,
                             const uint8_t tag[DT_FRAME_TAG_BYTES], const char *who);

#endif
