/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of TFRecord framing, of
 * dtrain's own file formats and of parameter fingerprints. Uses the CPU's crc32 instruction when
 * it has one, a table otherwise; both give the same value. */
#ifndef DTRAIN_CRC32C_H
#define DTRAIN_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC of data appended to a stream whose CRC so far is crc (0 for an empty stream). */
uint32_t dt_crc32c_extend(uint32_t crc, const void *data, size_t n_bytes);

static inline uint32_t dt_crc32c(const void *data, size_t n_bytes)
{
    return dt_crc32c_extend(0, data, n_bytes);
}

/* TFRecord's masking: ((c >> 15) | (c << 17)) + 0xa282ead8. */
static inline uint32_t dt_crc32c_mask(uint32_t c)
{
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* The CRCs of n independent buffers: out[i] = dt_crc32c(data[i], len[i]). With the crc32
 * instruction three buffers advance together, which hides its latency: about three times the
 * bytes per second of one buffer at a time, for many short records. */
void dt_crc32c_many(int n, const uint8_t *const *data, const size_t *len, uint32_t *out);

/* The table-driven version, kept as the reference the fast one is tested against. */
uint32_t dt_crc32c_extend_naive(uint32_t crc, const void *data, size_t n_bytes);

#endif
