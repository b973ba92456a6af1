/* A connection's keys and its frames' MACs (see session.h). */
#include "session.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <string.h>

#include "../core/bytes.h"

static const char label_c2s[] = "dtrain v2 frame key client->server";
static const char label_s2c[] = "dtrain v2 frame key server->client";

static dt_status hkdf(EVP_KDF_CTX *kc, const uint8_t *secret, size_t secret_len,
                      const uint8_t *salt, size_t salt_len, const char *info, uint8_t *out)
{
    /* OpenSSL reads the parameters without changing them; the casts drop const for its API. */
    OSSL_PARAM p[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)(secret ? secret : salt),
                                          secret_len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt, salt_len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)info, strlen(info)),
        OSSL_PARAM_construct_end(),
    };
    if (EVP_KDF_derive(kc, out, DT_SESSION_KEY_BYTES, p) != 1)
        return dt_error(DT_ERR_UNSUPPORTED, "OpenSSL's HKDF-SHA256 failed");
    return DT_OK;
}

dt_status dt_session_derive(const uint8_t *secret, size_t secret_len, const uint8_t *hello_c,
                            const uint8_t *hello_s, size_t hello_bytes, dt_session_keys *out)
{
    uint8_t salt[2 * 128];
    if (hello_bytes > 128)
        return dt_error(DT_ERR_INVALID, "session: hellos of %zu bytes", hello_bytes);
    memcpy(salt, hello_c, hello_bytes);
    memcpy(salt + hello_bytes, hello_s, hello_bytes);
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    EVP_KDF_CTX *kc = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
    dt_status st = kc ? DT_OK : dt_error(DT_ERR_UNSUPPORTED, "OpenSSL has no HKDF");
    if (st == DT_OK)
        st = hkdf(kc, secret, secret_len, salt, 2 * hello_bytes, label_c2s,
                  out->client_to_server);
    if (st == DT_OK)
        st = hkdf(kc, secret, secret_len, salt, 2 * hello_bytes, label_s2c,
                  out->server_to_client);
    EVP_KDF_CTX_free(kc);
    EVP_KDF_free(kdf);
    return st;
}

static dt_status mac_open(dt_frame_mac *m, const uint8_t key[DT_SESSION_KEY_BYTES],
                          uint32_t direction)
{
    *m = (dt_frame_mac){.direction = direction};
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    /* Keyed once here; each frame then sets only its nonce, which costs no key setup. */
    if (!ctx || EVP_EncryptInit_ex(ctx, EVP_chacha20_poly1305(), NULL, key, NULL) != 1) {
        EVP_CIPHER_CTX_free(ctx);
        return dt_error(DT_ERR_UNSUPPORTED, "OpenSSL's ChaCha20-Poly1305 is not available");
    }
    m->ctx = ctx;
    return DT_OK;
}

dt_status dt_session_open(dt_session *s, const dt_session_keys *k, bool is_client)
{
    memset(s, 0, sizeof *s);
    const uint8_t *send = is_client ? k->client_to_server : k->server_to_client;
    const uint8_t *recv = is_client ? k->server_to_client : k->client_to_server;
    dt_status st = mac_open(&s->send, send, is_client ? DT_DIR_CLIENT_TO_SERVER
                                                      : DT_DIR_SERVER_TO_CLIENT);
    if (st == DT_OK)
        st = mac_open(&s->recv, recv, is_client ? DT_DIR_SERVER_TO_CLIENT
                                                : DT_DIR_CLIENT_TO_SERVER);
    if (st)
        dt_session_close(s);
    return st;
}

void dt_session_close(dt_session *s)
{
    EVP_CIPHER_CTX_free(s->send.ctx);
    EVP_CIPHER_CTX_free(s->recv.ctx);
    memset(s, 0, sizeof *s);
}

/* EVP takes lengths as int: a frame (up to 1 GiB and its header) goes in pieces below that. */
#define AAD_PIECE ((size_t)1 << 30)

/* The tag of the frame numbered m->counter. */
static dt_status tag_of(dt_frame_mac *m, const void *data, size_t n_bytes,
                        uint8_t tag[DT_FRAME_TAG_BYTES])
{
    uint8_t nonce[12];
    dt_store_le32(nonce, m->direction);
    dt_store_le64(nonce + 4, m->counter);
    EVP_CIPHER_CTX *ctx = m->ctx;
    int out_len, ok = ctx && EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce) == 1;
    const uint8_t *p = data;
    for (size_t left = n_bytes; ok && left > 0;) {
        size_t k = left < AAD_PIECE ? left : AAD_PIECE;
        ok = EVP_EncryptUpdate(ctx, NULL, &out_len, p, (int)k) == 1;
        p += k, left -= k;
    }
    ok = ok && EVP_EncryptFinal_ex(ctx, tag, &out_len) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, DT_FRAME_TAG_BYTES, tag) == 1;
    return ok ? DT_OK : dt_error(DT_ERR_UNSUPPORTED, "OpenSSL's Poly1305 failed");
}

dt_status dt_frame_mac_seal(dt_frame_mac *m, const void *data, size_t n_bytes,
                            uint8_t tag[DT_FRAME_TAG_BYTES])
{
    dt_status st = tag_of(m, data, n_bytes, tag);
    if (st == DT_OK)
        m->counter++;
    return st;
}

dt_status dt_frame_mac_check(dt_frame_mac *m, const void *data, size_t n_bytes,
                             const uint8_t tag[DT_FRAME_TAG_BYTES], const char *who)
{
    uint8_t want[DT_FRAME_TAG_BYTES];
    dt_status st = tag_of(m, data, n_bytes, want);
    if (st)
        return st;
    if (CRYPTO_memcmp(want, tag, DT_FRAME_TAG_BYTES) != 0)
        return dt_error(DT_ERR_AUTH, "%s: message %llu of the connection failed its MAC (altered, "
                        "injected, replayed or reordered on the way, or the one before it was "
                        "dropped)", who, (unsigned long long)m->counter);
    m->counter++;
    return DT_OK;
}
