/* Handshake hellos, their MACs and frame headers (see wire.h). */
#include "wire.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>
#include <sys/random.h>

#include "../core/bytes.h"
#include "dtrain/cluster.h"
#include "../core/crc32c.h"

static const uint8_t hello_magic[8] = {'d', 't', 'r', 'a', 'i', 'n', 'H', 'S'};
static const uint8_t frame_magic[4] = {'D', 'T', 'F', '1'};


void dt_hello_encode(const dt_hello *h, uint8_t out[DT_HELLO_BYTES])
{
    memset(out, 0, DT_HELLO_BYTES);
    memcpy(out, hello_magic, 8);
    dt_store_le16(out + 8, h->version);
    dt_store_le32(out + 12, h->task_index);
    dt_store_le64(out + 16, h->cluster_id);
    out[24] = h->task_type;
    memcpy(out + 32, h->nonce, DT_NONCE_BYTES);
}

dt_status dt_hello_decode(const uint8_t in[DT_HELLO_BYTES], dt_hello *h)
{
    if (memcmp(in, hello_magic, 8) != 0)
        return dt_error(DT_ERR_AUTH, "not a dtrain peer (its first bytes are not the handshake)");
    h->version = dt_load_le16(in + 8);
    if (h->version != DT_WIRE_VERSION)
        return dt_error(DT_ERR_AUTH, "protocol version %u, this dtrain speaks %d", h->version,
                        DT_WIRE_VERSION);
    if (dt_load_le16(in + 10) != 0)
        return dt_error(DT_ERR_AUTH, "handshake flags 0x%x are not known", dt_load_le16(in + 10));
    h->task_index = dt_load_le32(in + 12);
    h->cluster_id = dt_load_le64(in + 16);
    h->task_type = in[24];
    if (h->task_type >= DT_JOB_COUNT)
        return dt_error(DT_ERR_AUTH, "task type %u is not a job", h->task_type);
    if (h->task_index > 1000000)
        return dt_error(DT_ERR_AUTH, "task index %u is out of range", h->task_index);
    for (int i = 25; i < 32; i++)
        if (in[i] != 0)
            return dt_error(DT_ERR_AUTH, "reserved handshake byte %d is not zero", i);
    memcpy(h->nonce, in + 32, DT_NONCE_BYTES);
    return DT_OK;
}

void dt_hello_mac(const uint8_t *secret, size_t secret_len, char role,
                  const uint8_t hello_c[DT_HELLO_BYTES], const uint8_t hello_s[DT_HELLO_BYTES],
                  uint8_t mac[DT_MAC_BYTES])
{
    uint8_t msg[1 + 2 * DT_HELLO_BYTES];
    static const uint8_t no_key[1];
    msg[0] = (uint8_t)role;
    memcpy(msg + 1, hello_c, DT_HELLO_BYTES);
    memcpy(msg + 1 + DT_HELLO_BYTES, hello_s, DT_HELLO_BYTES);
    unsigned int len = DT_MAC_BYTES;
    /* HMAC-SHA256 cannot fail for these arguments; a failure would leave mac zeroed, which never
     * equals a real MAC of the peer. */
    memset(mac, 0, DT_MAC_BYTES);
    HMAC(EVP_sha256(), secret_len ? secret : no_key, (int)secret_len, msg, sizeof msg, mac, &len);
}

bool dt_mac_equal(const uint8_t a[DT_MAC_BYTES], const uint8_t b[DT_MAC_BYTES])
{
    return CRYPTO_memcmp(a, b, DT_MAC_BYTES) == 0;
}

dt_status dt_random_bytes(void *buf, size_t n_bytes)
{
    uint8_t *p = buf;
    while (n_bytes > 0) {
        ssize_t k = getrandom(p, n_bytes, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return dt_error(DT_ERR_IO, "getrandom: %s", strerror(errno));
        p += k;
        n_bytes -= (size_t)k;
    }
    return DT_OK;
}

static uint32_t frame_crc(const uint8_t *b)
{
    uint8_t t[20];
    memcpy(t, b, 12);
    memcpy(t + 12, b + 16, 8);
    return dt_crc32c(t, sizeof t);
}

void dt_frame_encode(const dt_frame_hdr *h, uint8_t out[DT_FRAME_HDR_BYTES])
{
    memcpy(out, frame_magic, 4);
    dt_store_le16(out + 4, h->type);
    dt_store_le16(out + 6, h->op);
    dt_store_le32(out + 8, h->seq);
    dt_store_le64(out + 16, h->n_bytes);
    dt_store_le32(out + 12, frame_crc(out));
}

dt_status dt_frame_decode(const uint8_t in[DT_FRAME_HDR_BYTES], uint64_t max_bytes,
                          dt_frame_hdr *h)
{
    if (memcmp(in, frame_magic, 4) != 0)
        return dt_error(DT_ERR_PEER, "sent bytes that are not a frame (bad magic)");
    if (dt_load_le32(in + 12) != frame_crc(in))
        return dt_error(DT_ERR_PEER, "sent a frame header with a bad checksum");
    h->type = dt_load_le16(in + 4);
    h->op = dt_load_le16(in + 6);
    h->seq = dt_load_le32(in + 8);
    h->n_bytes = dt_load_le64(in + 16);
    if (h->type < DT_FRAME_ACK || h->type > DT_FRAME_ABORT)
        return dt_error(DT_ERR_PEER, "sent a frame of unknown type %u", h->type);
    if (h->n_bytes > max_bytes)
        return dt_error(DT_ERR_PEER, "sent a frame of %llu bytes, above the limit of %llu",
                        (unsigned long long)h->n_bytes, (unsigned long long)max_bytes);
    return DT_OK;
}
