/* Fixed-width integers in byte buffers, little-endian as every dtrain format is (TFRecord,
 * safetensors, event files, the transport's frames, agreement messages, caches), and big-endian
 * for IDX headers. One module, so a format's reader and writer cannot disagree (internal to the
 * library). On a little-endian host the loads are plain unaligned loads. */
#ifndef DTRAIN_CORE_BYTES_H
#define DTRAIN_CORE_BYTES_H

#include <stdint.h>
#include <string.h>

static inline uint16_t dt_load_le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static inline uint32_t dt_load_le32(const uint8_t *p)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
#endif
}

static inline uint64_t dt_load_le64(const uint8_t *p)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
#else
    return (uint64_t)dt_load_le32(p) | (uint64_t)dt_load_le32(p + 4) << 32;
#endif
}

static inline void dt_store_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void dt_store_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void dt_store_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t dt_load_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

#endif
