/* CRC32C (see crc32c.h). The SSE4.2 crc32 instruction computes the Castagnoli CRC
 * directly, eight bytes per instruction; a byte-wise table is the portable fallback. */
#include "crc32c.h"

#include <string.h>

static uint32_t crc_table[256];
static int crc_table_ready;

static void build_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
    crc_table_ready = 1;
}

uint32_t dt_crc32c_extend_naive(uint32_t crc, const void *data, size_t n_bytes)
{
    /* Building the table twice from two threads writes identical values, so the race is benign;
     * the flag is only an optimisation. */
    if (!__atomic_load_n(&crc_table_ready, __ATOMIC_ACQUIRE))
        build_table();
    const uint8_t *p = data;
    uint32_t c = ~crc;
    for (size_t i = 0; i < n_bytes; i++)
        c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return ~c;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

#include "cpu.h"
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *data,
                                                             size_t n_bytes)
{
    const uint8_t *p = data;
    uint64_t c = ~crc;
    while (n_bytes >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        n_bytes -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n_bytes--)
        c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}

/* Three buffers in step for as long as the shortest, then each on its own: the instruction has
 * a latency of three cycles and a throughput of one, so three chains keep it busy. */
__attribute__((target("sse4.2"))) static void crc32c_hw3(const uint8_t *const *data,
                                                          const size_t *len, uint32_t *out)
{
    const uint8_t *a = data[0], *b = data[1], *c = data[2];
    size_t common = len[0] < len[1] ? len[0] : len[1];
    common = (common < len[2] ? common : len[2]) / 8 * 8;
    uint64_t ca = 0xffffffffu, cb = 0xffffffffu, cc = 0xffffffffu;
    for (size_t i = 0; i < common; i += 8) {
        uint64_t wa, wb, wc;
        memcpy(&wa, a + i, 8);
        memcpy(&wb, b + i, 8);
        memcpy(&wc, c + i, 8);
        ca = _mm_crc32_u64(ca, wa);
        cb = _mm_crc32_u64(cb, wb);
        cc = _mm_crc32_u64(cc, wc);
    }
    /* crc32c_hw takes and returns the CRC outside its inversion. */
    out[0] = crc32c_hw(~(uint32_t)ca, a + common, len[0] - common);
    out[1] = crc32c_hw(~(uint32_t)cb, b + common, len[1] - common);
    out[2] = crc32c_hw(~(uint32_t)cc, c + common, len[2] - common);
}

/* One long buffer as three chains too: blocks A, B and C of BLOCK bytes each at a time, B and C
 * from a zero register, then joined. The register update is linear in (register, data) over
 * GF(2), so raw(s, A B) = shift(raw(s, A)) ^ raw(0, B), where shift is the update by BLOCK zero
 * bytes: a linear map of the 32-bit register, kept as four tables of 256 entries. */
enum { BLOCK = 4096 };
static uint32_t shift_table[4][256];
static int shift_ready;

__attribute__((target("sse4.2"))) static void build_shift(void)
{
    uint32_t basis[32];
    for (int i = 0; i < 32; i++) {
        uint64_t c = (uint64_t)1 << i;
        for (int k = 0; k < BLOCK / 8; k++)
            c = _mm_crc32_u64(c, 0);
        basis[i] = (uint32_t)c;
    }
    for (int k = 0; k < 4; k++)
        for (int b = 0; b < 256; b++) {
            uint32_t t = 0;
            for (int j = 0; j < 8; j++)
                if (b >> j & 1)
                    t ^= basis[8 * k + j];
            shift_table[k][b] = t;
        }
    /* Two threads building at once write the same values. */
    __atomic_store_n(&shift_ready, 1, __ATOMIC_RELEASE);
}

static inline uint32_t shift_block(uint32_t x)
{
    return shift_table[0][x & 0xff] ^ shift_table[1][x >> 8 & 0xff] ^
           shift_table[2][x >> 16 & 0xff] ^ shift_table[3][x >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw_long(uint32_t crc, const uint8_t *p,
                                                                  size_t n_bytes)
{
    if (!__atomic_load_n(&shift_ready, __ATOMIC_ACQUIRE))
        build_shift();
    uint32_t s = ~crc;
    for (; n_bytes >= 3 * BLOCK; p += 3 * BLOCK, n_bytes -= 3 * BLOCK) {
        uint64_t a = s, b = 0, c = 0;
        for (size_t i = 0; i < BLOCK; i += 8) {
            uint64_t wa, wb, wc;
            memcpy(&wa, p + i, 8);
            memcpy(&wb, p + BLOCK + i, 8);
            memcpy(&wc, p + 2 * BLOCK + i, 8);
            a = _mm_crc32_u64(a, wa);
            b = _mm_crc32_u64(b, wb);
            c = _mm_crc32_u64(c, wc);
        }
        s = shift_block(shift_block((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
    }
    return crc32c_hw(~s, p, n_bytes);
}

static int has_sse42(void) { return dt_cpu_has(DT_CPU_SSE42); }

uint32_t dt_crc32c_extend(uint32_t crc, const void *data, size_t n_bytes)
{
    if (!has_sse42())
        return dt_crc32c_extend_naive(crc, data, n_bytes);
    return n_bytes >= 3 * BLOCK ? crc32c_hw_long(crc, data, n_bytes)
                                : crc32c_hw(crc, data, n_bytes);
}

void dt_crc32c_many(int n, const uint8_t *const *data, const size_t *len, uint32_t *out)
{
    int i = 0;
    if (has_sse42())
        for (; i + 3 <= n; i += 3)
            crc32c_hw3(data + i, len + i, out + i);
    for (; i < n; i++)
        out[i] = dt_crc32c_extend(0, data[i], len[i]);
}
#else
uint32_t dt_crc32c_extend(uint32_t crc, const void *data, size_t n_bytes)
{
    return dt_crc32c_extend_naive(crc, data, n_bytes);
}

void dt_crc32c_many(int n, const uint8_t *const *data, const size_t *len, uint32_t *out)
{
    for (int i = 0; i < n; i++)
        out[i] = dt_crc32c_extend_naive(0, data[i], len[i]);
}
#endif
