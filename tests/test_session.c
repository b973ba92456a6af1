/* The keys of a connection and the MACs of its frames (net/session.h) and the ps messages that
 * carry them (ps/psconn.h): the key schedule is RFC 5869's HKDF-SHA256 as written out here with
 * plain HMACs, both sides of a handshake derive the same keys and every connection new ones; a
 * frame fails its MAC under a wrong key, with a wrong counter, in the other direction or with a
 * byte of its header or payload changed (a message altered so that it still decodes);
 * a replayed message is refused; the reader's buffer grows with the bytes that come, not with
 * the size a header declares; the ps client takes no reply to another request. */
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/core/bytes.h"
#include "../src/core/clock.h"
#include "../src/core/crc32c.h"
#include "../src/net/handshake.h"
#include "../src/net/listener.h"
#include "../src/net/sock.h"
#include "../src/net/session.h"
#include "../src/net/wire.h"
#include "../src/ps/client.h"
#include "../src/ps/psconn.h"
#include "test.h"

static const uint8_t secret[] = "a cluster secret of 32 bytes....";

/* Two hellos as the handshake sends them, nonces filled with seed. */
static void hellos(uint8_t hc[DT_HELLO_BYTES], uint8_t hs[DT_HELLO_BYTES], uint8_t seed)
{
    dt_hello c = {DT_WIRE_VERSION, 77, 1, 0, {0}}, s = {DT_WIRE_VERSION, 77, 3, 1, {0}};
    for (int i = 0; i < DT_NONCE_BYTES; i++)
        c.nonce[i] = (uint8_t)(seed + i), s.nonce[i] = (uint8_t)(seed * 3 + i);
    dt_hello_encode(&c, hc);
    dt_hello_encode(&s, hs);
}

/* RFC 5869 with L = 32: PRK = HMAC(salt, IKM), OKM = HMAC(PRK, info || 0x01). */
static void hkdf_by_hand(const uint8_t *ikm, size_t ikm_len, const uint8_t *salt,
                         size_t salt_len, const char *info, uint8_t out[32])
{
    uint8_t prk[32], msg[128];
    unsigned n;
    HMAC(EVP_sha256(), salt, (int)salt_len, ikm, ikm_len, prk, &n);
    size_t k = strlen(info);
    memcpy(msg, info, k);
    msg[k] = 1;
    HMAC(EVP_sha256(), prk, 32, msg, k + 1, out, &n);
}

TEST(session_keys_are_hkdf_sha256_of_the_secret_salted_with_both_hellos)
{
    uint8_t hc[DT_HELLO_BYTES], hs[DT_HELLO_BYTES], salt[2 * DT_HELLO_BYTES], want[32];
    hellos(hc, hs, 1);
    memcpy(salt, hc, sizeof hc);
    memcpy(salt + sizeof hc, hs, sizeof hs);
    dt_session_keys k, again, other;
    CHECK_OK(dt_session_derive(secret, sizeof secret - 1, hc, hs, DT_HELLO_BYTES, &k));
    hkdf_by_hand(secret, sizeof secret - 1, salt, sizeof salt,
                 "dtrain v2 frame key client->server", want);
    CHECK(memcmp(k.client_to_server, want, 32) == 0);
    hkdf_by_hand(secret, sizeof secret - 1, salt, sizeof salt,
                 "dtrain v2 frame key server->client", want);
    CHECK(memcmp(k.server_to_client, want, 32) == 0);
    CHECK(memcmp(k.client_to_server, k.server_to_client, 32) != 0);
    CHECK_OK(dt_session_derive(secret, sizeof secret - 1, hc, hs, DT_HELLO_BYTES, &again));
    CHECK(memcmp(&k, &again, sizeof k) == 0);
    /* Another nonce (a new connection), another secret: other keys. */
    hc[40] ^= 1;
    CHECK_OK(dt_session_derive(secret, sizeof secret - 1, hc, hs, DT_HELLO_BYTES, &other));
    CHECK(memcmp(k.client_to_server, other.client_to_server, 32) != 0);
    hc[40] ^= 1;
    CHECK_OK(dt_session_derive(secret, 8, hc, hs, DT_HELLO_BYTES, &other));
    CHECK(memcmp(k.client_to_server, other.client_to_server, 32) != 0);
    /* No secret: keys from the empty one, which anyone can derive (docs/SECURITY.md). */
    CHECK_OK(dt_session_derive(NULL, 0, hc, hs, DT_HELLO_BYTES, &other));
    hkdf_by_hand((const uint8_t *)"", 0, salt, sizeof salt, "dtrain v2 frame key client->server",
                 want);
    CHECK(memcmp(other.client_to_server, want, 32) == 0);
}

TEST(frame_mac_fails_under_a_wrong_key_counter_direction_or_byte)
{
    uint8_t hc[DT_HELLO_BYTES], hs[DT_HELLO_BYTES], tag[DT_FRAME_TAG_BYTES],
        tag2[DT_FRAME_TAG_BYTES];
    hellos(hc, hs, 5);
    dt_session_keys k, wrong;
    CHECK_OK(dt_session_derive(secret, sizeof secret - 1, hc, hs, DT_HELLO_BYTES, &k));
    CHECK_OK(dt_session_derive((const uint8_t *)"another secret", 14, hc, hs, DT_HELLO_BYTES,
                               &wrong));
    dt_session client, server, impostor;
    CHECK_OK(dt_session_open(&client, &k, true));
    CHECK_OK(dt_session_open(&server, &k, false));
    CHECK_OK(dt_session_open(&impostor, &wrong, false));
    uint8_t frame[100];
    for (int i = 0; i < 100; i++)
        frame[i] = (uint8_t)i;
    CHECK_OK(dt_frame_mac_seal(&client.send, frame, sizeof frame, tag));
    CHECK_ERR(dt_frame_mac_check(&impostor.recv, frame, sizeof frame, tag, "worker:0"),
              DT_ERR_AUTH, "worker:0: message 0 of the connection failed its MAC");
    /* A byte of the header, of the payload, or the frame cut short. */
    frame[3] ^= 0x10;
    CHECK_ERR(dt_frame_mac_check(&server.recv, frame, sizeof frame, tag, "w"), DT_ERR_AUTH,
              "failed its MAC");
    frame[3] ^= 0x10, frame[90] ^= 1;
    CHECK_ERR(dt_frame_mac_check(&server.recv, frame, sizeof frame, tag, "w"), DT_ERR_AUTH,
              "failed its MAC");
    frame[90] ^= 1;
    CHECK_ERR(dt_frame_mac_check(&server.recv, frame, 99, tag, "w"), DT_ERR_AUTH, "MAC");
    /* The right frame is taken once; again it is a replay (counter 1 now). */
    CHECK_OK(dt_frame_mac_check(&server.recv, frame, sizeof frame, tag, "w"));
    CHECK_ERR(dt_frame_mac_check(&server.recv, frame, sizeof frame, tag, "w"), DT_ERR_AUTH,
              "message 1 of the connection");
    /* Frames 1 and 2 sealed; 2 arriving first (1 dropped or the two swapped) fails. */
    CHECK_OK(dt_frame_mac_seal(&client.send, frame, sizeof frame, tag));
    CHECK_OK(dt_frame_mac_seal(&client.send, frame, sizeof frame, tag2));
    CHECK(memcmp(tag, tag2, sizeof tag) != 0);
    CHECK_ERR(dt_frame_mac_check(&server.recv, frame, sizeof frame, tag2, "w"), DT_ERR_AUTH,
              "MAC");
    CHECK_OK(dt_frame_mac_check(&server.recv, frame, sizeof frame, tag, "w"));
    CHECK_OK(dt_frame_mac_check(&server.recv, frame, sizeof frame, tag2, "w"));
    /* A server's frame never passes as the client's (the other key and direction). */
    dt_session client2;
    CHECK_OK(dt_session_open(&client2, &k, true));
    CHECK_OK(dt_frame_mac_seal(&server.send, frame, sizeof frame, tag));
    dt_session server2;
    CHECK_OK(dt_session_open(&server2, &k, false));
    CHECK_ERR(dt_frame_mac_check(&server2.recv, frame, sizeof frame, tag, "w"), DT_ERR_AUTH,
              "MAC");
    CHECK_OK(dt_frame_mac_check(&client2.recv, frame, sizeof frame, tag, "w"));
    dt_session_close(&client), dt_session_close(&server), dt_session_close(&impostor);
    dt_session_close(&client2), dt_session_close(&server2);
    dt_session zero = {0};
    dt_session_close(&zero);
}

/* ---- the handshake hands both sides the same keys ---- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int fd;
    dt_session_keys keys;
    uint64_t bad_id; /* the fake ps answers with request id + this */
} peer_box;

static const char *admit_all(void *ctx, dt_job job, int index, bool authenticated)
{
    (void)ctx, (void)job, (void)index, (void)authenticated;
    return NULL;
}

static void keep_peer(void *ctx, int fd, dt_job job, int index, const dt_session_keys *keys)
{
    (void)job, (void)index;
    peer_box *b = ctx;
    pthread_mutex_lock(&b->mu);
    b->fd = fd, b->keys = *keys;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static int wait_peer(peer_box *b)
{
    pthread_mutex_lock(&b->mu);
    for (int i = 0; i < 100 && b->fd < 0; i++) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_sec += 1;
        pthread_cond_timedwait(&b->cv, &b->mu, &t);
    }
    int fd = b->fd;
    b->fd = -1;
    pthread_mutex_unlock(&b->mu);
    return fd;
}

/* A cluster of a chief and one ps at port, and a listener there as that ps. */
static dt_status ps_at(uint16_t *port, dt_cluster *cl, dt_listener **l, peer_box *box)
{
    int fd;
    dt_status st = dt_sock_listen("127.0.0.1", 0, &fd, port);
    if (st)
        return st;
    char tfc[256];
    snprintf(tfc, sizeof tfc, "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": "
             "[\"127.0.0.1:%u\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}}", *port);
    if ((st = dt_cluster_parse(tfc, cl))) {
        dt_sock_close(fd);
        return st;
    }
    dt_listener_options o = {.me = {secret, sizeof secret - 1, cl->id, DT_JOB_PS, 0},
                             .policy = admit_all, .on_peer = keep_peer, .ctx = box,
                             .handshake_timeout = 5.0};
    return dt_listener_adopt(fd, &o, l);
}

TEST(handshake_gives_both_sides_the_same_new_keys_each_connection)
{
    peer_box box = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, -1, {{0}, {0}}, 0};
    uint16_t port;
    dt_cluster cl;
    dt_listener *l = NULL;
    CHECK_OK(ps_at(&port, &cl, &l, &box));
    dt_handshake_id me = {secret, sizeof secret - 1, cl.id, DT_JOB_CHIEF, 0};
    dt_session_keys first = {{0}, {0}};
    for (int round = 0; round < 2 && l; round++) {
        int fd;
        dt_session_keys mine;
        double d = dt_clock_now() + 5;
        CHECK_OK(dt_sock_connect("127.0.0.1", port, d, &fd));
        CHECK_OK(dt_handshake_connect(&me, fd, DT_JOB_PS, 0, "ps:0", d, &mine));
        int theirs = wait_peer(&box);
        CHECK(theirs >= 0);
        CHECK(memcmp(&mine, &box.keys, sizeof mine) == 0);
        if (round == 0)
            first = mine;
        else
            CHECK(memcmp(&first, &mine, sizeof mine) != 0);
        dt_sock_close(theirs);
        dt_sock_close(fd);
    }
    dt_listener_stop(l);
    dt_cluster_free(&cl);
}

/* ---- ps messages over a connection ---- */

/* A PUSH_ROWS message of 4 rows of 8 into b. */
static void push_msg(dt_psbuf *b, uint64_t id)
{
    int64_t ids[4] = {1, 5, 9, 12};
    float rows[32];
    for (int i = 0; i < 32; i++)
        rows[i] = 0.25f * (float)i;
    dt_psmsg m = {.type = DT_PSMSG_PUSH_ROWS, .request_id = id, .table = 3, .n = 4, .dim = 8,
                  .step = 7, .lr_scale = 1.0f};
    CHECK_OK(dt_psmsg_encode(&m, ids, rows, b));
}

/* A byte of a message's payload changed, as a proxy on the path would do: the header's CRC32C
 * stays right, and the message still decodes (only its MAC protects it). */
static void alter_payload(uint8_t *msg, size_t at)
{
    msg[DT_PSMSG_HEADER_BYTES + at] ^= 0x40;
    dt_store_le32(msg + 24, dt_crc32c(msg, 24));
}

static void session_pair(dt_session *client, dt_session *server)
{
    uint8_t hc[DT_HELLO_BYTES], hs[DT_HELLO_BYTES];
    hellos(hc, hs, 9);
    dt_session_keys k;
    CHECK_OK(dt_session_derive(secret, sizeof secret - 1, hc, hs, DT_HELLO_BYTES, &k));
    CHECK_OK(dt_session_open(client, &k, true));
    CHECK_OK(dt_session_open(server, &k, false));
}

TEST(psconn_refuses_an_altered_message_that_decodes_and_a_replayed_one)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    dt_session client, server;
    session_pair(&client, &server);
    dt_psbuf out = {0}, in = {0};
    dt_psmsg got;
    double d = dt_clock_now() + 5;
    /* Sealed and sent as it is: taken. */
    push_msg(&out, 1);
    CHECK_OK(dt_psconn_seal(&client, &out, 0));
    CHECK(out.len == DT_PSMSG_HEADER_BYTES + 24 + 32 + 128 + DT_FRAME_TAG_BYTES);
    CHECK_OK(dt_psconn_send(sv[0], &out, "ps:0", d));
    CHECK_OK(dt_psconn_recv(sv[1], &server, "worker:0 (127.0.0.1:9)", d, &in, &got));
    CHECK(got.type == DT_PSMSG_PUSH_ROWS && got.request_id == 1 && got.n == 4);
    /* The same bytes again: a replay. */
    CHECK_OK(dt_psconn_send(sv[0], &out, "ps:0", d));
    CHECK_ERR(dt_psconn_recv(sv[1], &server, "worker:0 (127.0.0.1:9)", d, &in, &got),
              DT_ERR_AUTH, "worker:0 (127.0.0.1:9): message 1 of the connection failed its MAC");
    /* A fresh pair: a row's float altered: decodes, but fails its MAC. */
    dt_session_close(&client), dt_session_close(&server);
    session_pair(&client, &server);
    out.len = 0;
    push_msg(&out, 2);
    CHECK_OK(dt_psconn_seal(&client, &out, 0));
    alter_payload(out.data, 24 + 32 + 5);
    dt_psmsg decoded;
    CHECK_OK(dt_psmsg_decode(out.data, out.len - DT_FRAME_TAG_BYTES, "proxy", &decoded));
    CHECK_OK(dt_psconn_send(sv[0], &out, "ps:0", d));
    CHECK_ERR(dt_psconn_recv(sv[1], &server, "worker:1", d, &in, &got), DT_ERR_AUTH,
              "worker:1: message 0 of the connection failed its MAC");
    dt_psbuf_free(&out), dt_psbuf_free(&in);
    dt_session_close(&client), dt_session_close(&server);
    close(sv[0]), close(sv[1]);
}

TEST(psconn_reader_grows_with_the_bytes_that_come_not_with_the_declared_size)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    dt_session client, server;
    session_pair(&client, &server);
    /* A header declaring a payload of 1 GiB, then 64 KiB of it, then the connection closed. */
    uint8_t *msg = calloc(1, DT_PSMSG_HEADER_BYTES + 65536);
    memcpy(msg, "DTPS", 4);
    dt_store_le16(msg + 4, DT_PSMSG_VERSION);
    dt_store_le16(msg + 6, DT_PSMSG_PUSH_ROWS);
    dt_store_le32(msg + 16, (uint32_t)1 << 30);
    dt_store_le32(msg + 24, dt_crc32c(msg, 24));
    uint32_t size;
    CHECK_OK(dt_psmsg_peek(msg, "w", &size));
    CHECK(size == (uint32_t)1 << 30);
    double d = dt_clock_now() + 5;
    CHECK_OK(dt_sock_send_all(sv[0], msg, DT_PSMSG_HEADER_BYTES + 65536, d, "ps:0"));
    shutdown(sv[0], SHUT_WR);
    dt_psbuf in = {0};
    dt_psmsg got;
    CHECK_ERR(dt_psconn_recv(sv[1], &server, "worker:0", d, &in, &got), DT_ERR_PEER,
              "worker:0");
    CHECK_MSG(in.cap <= ((size_t)2 << 20), "%zu bytes allocated for 64 KiB received", in.cap);
    /* A real message of 3 MiB still arrives whole through the growing buffer. */
    dt_psbuf big = {0};
    dt_psmsg m = {.type = DT_PSMSG_PUSH_DENSE, .request_id = 4, .offset = 0, .count = 786432,
                  .step = 1, .lr_scale = 1.0f};
    float *v = calloc(786432, sizeof *v);
    for (size_t i = 0; i < 786432; i++)
        v[i] = (float)i;
    CHECK_OK(dt_psmsg_encode(&m, NULL, v, &big));
    CHECK_OK(dt_psconn_seal(&client, &big, 0));
    close(sv[0]), close(sv[1]);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    pid_t child = fork();
    if (child == 0) {
        dt_sock_send_all(sv[0], big.data, big.len, dt_clock_now() + 10, "ps:0");
        _exit(0);
    }
    CHECK_OK(dt_psconn_recv(sv[1], &server, "worker:0", dt_clock_now() + 10, &in, &got));
    CHECK(got.count == 786432 && dt_psmsg_value(&got, 786431) == 786431.0f);
    int status = -1;
    CHECK(waitpid(child, &status, 0) == child && status == 0);
    free(v), free(msg);
    dt_psbuf_free(&big), dt_psbuf_free(&in);
    dt_session_close(&client), dt_session_close(&server);
    close(sv[0]), close(sv[1]);
}

/* ---- the client takes only the reply to the request it waits for ---- */

/* A ps that answers one request with a PONG whose id is the request's + box->bad_id, then waits
 * for the client to hang up. */
static void *fake_ps(void *arg)
{
    peer_box *b = arg;
    int fd = wait_peer(b);
    dt_session s;
    if (fd < 0 || dt_session_open(&s, &b->keys, false) != DT_OK)
        return NULL;
    dt_psbuf in = {0}, out = {0};
    dt_psmsg req;
    double d = dt_clock_now() + 5;
    if (dt_psconn_recv(fd, &s, "chief:0", d, &in, &req) == DT_OK) {
        dt_psmsg pong = {.type = DT_PSMSG_PONG, .request_id = req.request_id + b->bad_id};
        if (dt_psmsg_encode(&pong, NULL, NULL, &out) == DT_OK &&
            dt_psconn_seal(&s, &out, 0) == DT_OK)
            dt_psconn_send(fd, &out, "chief:0", d);
    }
    char c;
    dt_sock_recv_all(fd, &c, 1, d, "chief:0");
    dt_psbuf_free(&in), dt_psbuf_free(&out);
    dt_session_close(&s);
    dt_sock_close(fd);
    return NULL;
}

TEST(ps_client_refuses_a_reply_to_another_request)
{
    peer_box box = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, -1, {{0}, {0}}, 0};
    uint16_t port;
    dt_cluster cl;
    dt_listener *l = NULL;
    CHECK_OK(ps_at(&port, &cl, &l, &box));
    dt_handshake_id me = {secret, sizeof secret - 1, cl.id, DT_JOB_CHIEF, 0};
    for (int bad = 0; bad < 2 && l; bad++) {
        box.bad_id = (uint64_t)bad;
        pthread_t t;
        pthread_create(&t, NULL, fake_ps, &box);
        dt_ps_client *c = NULL;
        CHECK_OK(dt_ps_client_open(&me, &cl, 5.0, 5.0, &c));
        if (c && bad)
            CHECK_ERR(dt_ps_client_ping(c), DT_ERR_PEER,
                      "a reply to request 2 where 1's was due");
        else if (c)
            CHECK_OK(dt_ps_client_ping(c));
        CHECK(!c || dt_ps_client_broken(c) == (bad == 1));
        dt_ps_client_close(c);
        pthread_join(t, NULL);
    }
    dt_listener_stop(l);
    dt_cluster_free(&cl);
}
