/* Fuzz target: the transport's wire parsers on arbitrary bytes, as a stranger or a broken peer
 * could send them: the handshake hello, and frame headers under a size cap. A hello or header
 * that decodes must encode back to the same bytes (nothing is accepted that the writer could
 * not have written), and a MAC computed over attacker bytes never equals one over other bytes
 * under the same key. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../src/net/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= DT_HELLO_BYTES) {
        dt_hello h;
        if (dt_hello_decode(data, &h) == DT_OK) {
            uint8_t back[DT_HELLO_BYTES];
            dt_hello_encode(&h, back);
            if (memcmp(back, data, DT_HELLO_BYTES) != 0)
                __builtin_trap();
        }
        if (size >= 2 * DT_HELLO_BYTES + DT_MAC_BYTES) {
            static const uint8_t key[] = "fuzz-cluster-secret";
            uint8_t mac[DT_MAC_BYTES];
            const uint8_t *hc = data, *hs = data + DT_HELLO_BYTES;
            dt_hello_mac(key, sizeof key - 1, 'S', hc, hs, mac);
            /* The role byte is part of what is signed: a server MAC is no client MAC. */
            uint8_t other[DT_MAC_BYTES];
            dt_hello_mac(key, sizeof key - 1, 'C', hc, hs, other);
            if (dt_mac_equal(mac, other))
                __builtin_trap();
        }
    }
    for (size_t off = 0; off + DT_FRAME_HDR_BYTES <= size; off += DT_FRAME_HDR_BYTES) {
        dt_frame_hdr f;
        uint64_t cap = (uint64_t)1 << (data[off] % 40);
        if (dt_frame_decode(data + off, cap, &f) == DT_OK) {
            uint8_t back[DT_FRAME_HDR_BYTES];
            if (f.n_bytes > cap)
                __builtin_trap();
            dt_frame_encode(&f, back);
            if (memcmp(back, data + off, DT_FRAME_HDR_BYTES) != 0)
                __builtin_trap();
        }
    }
    return 0;
}
