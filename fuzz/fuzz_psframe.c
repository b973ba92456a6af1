/* Fuzz target: the ps connection's framing (ps/psconn.h) on arbitrary bytes, as a stranger on the
 * path or a broken peer could send them after the handshake: a stream of messages, each with its
 * MAC, read through a socket by dt_psconn_recv under fixed session keys. Checked, beyond the
 * sanitizers:
 *   - the raw input: whatever it holds, the reader's buffer never exceeds twice the bytes that
 *     came plus a MiB and the MAC's room (a header's declared size is not allocated up front);
 *   - the input made a well-formed message (its length, zero and CRC32C set, as fuzz_psmsg does) and
 *     sealed as the sender would: it is received exactly when the decoder takes it alone, as
 *     the same message; sent a second time it is refused (a replay); with any one byte changed
 *     (the first input byte says which, and how) it is never received. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../src/core/bytes.h"
#include "../src/core/clock.h"
#include "../src/core/crc32c.h"
#include "../src/net/session.h"
#include "../src/ps/psconn.h"
#include "fuzz.h"

/* Inputs beyond this are cut: the socket's buffer takes them without a second thread. */
#define MAX_INPUT 65536

static void sessions(dt_session *client, dt_session *server)
{
    static const uint8_t secret[] = "fuzz-cluster-secret";
    uint8_t hc[64] = "client hello", hs[64] = "server hello";
    dt_session_keys k;
    REQUIRE(dt_session_derive(secret, sizeof secret - 1, hc, hs, sizeof hc, &k) == DT_OK);
    REQUIRE(dt_session_open(client, &k, true) == DT_OK);
    REQUIRE(dt_session_open(server, &k, false) == DT_OK);
}

/* Sends n bytes down a fresh socket pair (closed behind them) and reads messages off it until
 * one fails; the number read, the last status in *last. */
static int receive_all(dt_session *server, const uint8_t *bytes, size_t n, dt_psbuf *in,
                       dt_status *last)
{
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    int big = 4 * MAX_INPUT;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    REQUIRE(n == 0 || write(sv[0], bytes, n) == (ssize_t)n);
    shutdown(sv[0], SHUT_WR);
    int got = 0;
    dt_psmsg m;
    while ((*last = dt_psconn_recv(sv[1], server, "fuzz", dt_clock_now() + 1, in, &m)) == DT_OK) {
        REQUIRE(in->len <= n);
        got++;
    }
    close(sv[0]), close(sv[1]);
    return got;
}

/* The input as a message whose length and checksums are right. */
static uint8_t *well_formed(const uint8_t *data, size_t size)
{
    uint8_t *m = malloc(size);
    REQUIRE(m);
    memcpy(m, data, size);
    dt_store_le32(m + 16, (uint32_t)(size - DT_PSMSG_HEADER_BYTES));
    dt_store_le32(m + 20, 0);
    dt_store_le32(m + 24, dt_crc32c(m, 24));
    return m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT)
        size = MAX_INPUT;
    dt_session client, server;
    sessions(&client, &server);
    dt_psbuf in = {0};
    dt_status last;
    receive_all(&server, data, size, &in, &last);
    REQUIRE(in.cap <= 2 * size + ((size_t)1 << 20) + DT_PSMSG_HEADER_BYTES + DT_FRAME_TAG_BYTES);
    if (size >= DT_PSMSG_HEADER_BYTES) {
        dt_session_close(&client), dt_session_close(&server);
        sessions(&client, &server);
        uint8_t *m = well_formed(data, size);
        dt_psmsg alone;
        dt_status decodes = dt_psmsg_decode(m, size, "fuzz", &alone);
        /* The message sealed as the sender would, then the same bytes again. */
        dt_psbuf sealed = {.data = malloc(size + DT_FRAME_TAG_BYTES), .len = size,
                           .cap = size + DT_FRAME_TAG_BYTES};
        REQUIRE(sealed.data);
        memcpy(sealed.data, m, size);
        REQUIRE(dt_psconn_seal(&client, &sealed, 0) == DT_OK);
        size_t one = sealed.len;
        uint8_t *twice = malloc(2 * one);
        REQUIRE(twice);
        memcpy(twice, sealed.data, one), memcpy(twice + one, sealed.data, one);
        int got = receive_all(&server, twice, 2 * one, &in, &last);
        REQUIRE(got == (decodes == DT_OK ? 1 : 0));
        REQUIRE(got == 0 || last == DT_ERR_AUTH);
        /* One byte changed anywhere in a fresh session's first frame: never received. */
        dt_session_close(&client), dt_session_close(&server);
        sessions(&client, &server);
        sealed.len = size;
        REQUIRE(dt_psconn_seal(&client, &sealed, 0) == DT_OK);
        size_t at = (data[0] * 2654435761u) % sealed.len;
        sealed.data[at] ^= (uint8_t)(data[size - 1] | 1);
        REQUIRE(receive_all(&server, sealed.data, sealed.len, &in, &last) == 0);
        free(twice), free(sealed.data), free(m);
    }
    dt_psbuf_free(&in);
    dt_session_close(&client), dt_session_close(&server);
    return 0;
}
