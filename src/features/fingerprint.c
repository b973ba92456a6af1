/* FarmHash's Fingerprint64 in portable C11 (see fingerprint.h). The input is read as unaligned
 * little-endian words through memcpy whatever the host, because the fingerprint is defined on
 * little-endian loads; all arithmetic is on uint64_t, where wraparound is defined.
 *
 * The hash picks one of four mixes by length: up to 16 bytes, 17 to 32, 33 to 64, and a loop
 * over 64-byte blocks beyond that, whose last round re-reads the final 64 bytes of the input
 * (overlapping the previous block) so that no tail is ever padded. */
#include "fingerprint.h"

#include "../core/bytes.h"

/* FarmHash's three odd multipliers, each between 2^63 and 2^64. */
#define FP_K0 0xc3a5c85c97cb3127ULL
#define FP_K1 0xb492b66fbe98f273ULL
#define FP_K2 0x9ae16a3b2f90404fULL

/* The long-input loop's seed: part of the definition, not a parameter. */
#define FP_SEED 81

typedef struct {
    uint64_t lo, hi;
} fp_pair;

/* Rotation right by 1..63 bits (never 0 or 64, which would shift by the word's width). */
static inline uint64_t rotr(uint64_t v, unsigned by) { return (v >> by) | (v << (64 - by)); }

static inline uint64_t ld64(const uint8_t *p) { return dt_load_le64(p); }

static inline uint64_t ld32(const uint8_t *p) { return dt_load_le32(p); }

/* Two words to one with a Murmur-style multiply and fold, twice. */
static inline uint64_t mix2(uint64_t u, uint64_t v, uint64_t mul)
{
    uint64_t a = dt_fingerprint_shift_mix((u ^ v) * mul);
    uint64_t b = dt_fingerprint_shift_mix((v ^ a) * mul);
    return b * mul;
}

/* 0 to 16 bytes. Lengths 8..16 and 4..7 read two possibly overlapping words, one from each end;
 * 1..3 bytes take the first, middle and last byte. */
static uint64_t hash_upto16(const uint8_t *p, size_t n)
{
    if (n >= 8) {
        uint64_t mul = FP_K2 + 2 * (uint64_t)n;
        uint64_t head = ld64(p) + FP_K2;
        uint64_t tail = ld64(p + n - 8);
        uint64_t c = rotr(tail, 37) * mul + head;
        uint64_t d = (rotr(head, 25) + tail) * mul;
        return mix2(c, d, mul);
    }
    if (n >= 4) {
        uint64_t mul = FP_K2 + 2 * (uint64_t)n;
        uint64_t head = ld32(p);
        return mix2((uint64_t)n + (head << 3), ld32(p + n - 4), mul);
    }
    if (n > 0) {
        /* 32-bit sums, as the reference computes them, widened only for the multiply. */
        uint32_t y = (uint32_t)p[0] + ((uint32_t)p[n / 2] << 8);
        uint32_t z = (uint32_t)n + ((uint32_t)p[n - 1] << 2);
        return dt_fingerprint_shift_mix((uint64_t)y * FP_K2 ^ (uint64_t)z * FP_K0) * FP_K2;
    }
    return FP_K2;
}

/* The mix of the first 16 and the last 16 bytes (which overlap below 32) that 17-to-32 returns
 * and 33-to-64 starts from; a is the first word times the caller's factor, and *y the first
 * half of the mixed pair. */
static inline uint64_t mix_ends(const uint8_t *p, size_t n, uint64_t mul, uint64_t a,
                                uint64_t *y)
{
    uint64_t b = ld64(p + 8);
    uint64_t c = ld64(p + n - 8) * mul;
    uint64_t d = ld64(p + n - 16) * FP_K2;
    *y = rotr(a + b, 43) + rotr(c, 30) + d;
    return mix2(*y, a + rotr(b + FP_K2, 18) + c, mul);
}

/* 17 to 32 bytes: both ends. */
static uint64_t hash_17to32(const uint8_t *p, size_t n)
{
    uint64_t y;
    return mix_ends(p, n, FP_K2 + 2 * (uint64_t)n, ld64(p) * FP_K1, &y);
}

/* 33 to 64 bytes: the mix of both ends, chained into a second one over the middle words. */
static uint64_t hash_33to64(const uint8_t *p, size_t n)
{
    uint64_t mul = FP_K2 + 2 * (uint64_t)n;
    uint64_t a = ld64(p) * FP_K2, y;
    uint64_t z = mix_ends(p, n, mul, a, &y);
    uint64_t e = ld64(p + 16) * mul;
    uint64_t f = ld64(p + 24);
    uint64_t g = (y + ld64(p + n - 32)) * mul;
    uint64_t h = (z + ld64(p + n - 24)) * mul;
    return mix2(rotr(e + f, 43) + rotr(g, 30) + h, e + rotr(f + a, 18) + g, mul);
}

/* A quick 128-bit digest of 32 bytes (four words) and two seeds, for the long loop's state. */
static inline fp_pair weak32(const uint8_t *p, uint64_t a, uint64_t b)
{
    uint64_t w0 = ld64(p), w1 = ld64(p + 8), w2 = ld64(p + 16), w3 = ld64(p + 24);
    a += w0;
    b = rotr(b + a + w3, 21);
    uint64_t a0 = a;
    a += w1 + w2;
    b += rotr(a, 44);
    return (fp_pair){a + w3, b + a0};
}

/* One 64-byte round of the long loop over state x, y, z, v, w, with multiplier mul. The final
 * round differs from the others only by mul and by the factors of 9 (nine = 1 in the others). */
static inline void round64(const uint8_t *p, uint64_t mul, uint64_t nine, uint64_t *x,
                           uint64_t *y, uint64_t *z, fp_pair *v, fp_pair *w)
{
    *x = rotr(*x + *y + v->lo + ld64(p + 8), 37) * mul;
    *y = rotr(*y + v->hi + ld64(p + 48), 42) * mul;
    *x ^= w->hi * nine;
    *y += v->lo * nine + ld64(p + 40);
    *z = rotr(*z + w->lo, 33) * mul;
    *v = weak32(p, v->hi * mul, *x + w->lo);
    *w = weak32(p + 32, *z + w->hi, *y + ld64(p + 16));
    uint64_t t = *z;
    *z = *x;
    *x = t;
}

/* More than 64 bytes: every whole 64-byte block but the last, then the last 64 bytes. */
static uint64_t hash_long(const uint8_t *p, size_t n)
{
    uint64_t x = FP_SEED;
    uint64_t y = FP_SEED * FP_K1 + 113;
    uint64_t z = dt_fingerprint_shift_mix(y * FP_K2 + 113) * FP_K2;
    fp_pair v = {0, 0}, w = {0, 0};
    x = x * FP_K2 + ld64(p);

    /* The loop leaves 1 to 64 bytes, so it runs at least once and the last round always has a
     * full block (the final 64 bytes) to read. */
    size_t blocks = (n - 1) / 64;
    for (size_t i = 0; i < blocks; i++)
        round64(p + 64 * i, FP_K1, 1, &x, &y, &z, &v, &w);

    uint64_t mul = FP_K1 + ((z & 0xff) << 1);
    w.lo += (uint64_t)((n - 1) & 63);
    v.lo += w.lo;
    w.lo += v.lo;
    round64(p + n - 64, mul, 9, &x, &y, &z, &v, &w);
    return mix2(mix2(v.lo, w.lo, mul) + dt_fingerprint_shift_mix(y) * FP_K0 + z,
                mix2(v.hi, w.hi, mul) + x, mul);
}

uint64_t dt_fingerprint64(const void *data, size_t n_bytes)
{
    const uint8_t *p = data;
    if (n_bytes <= 16)
        return hash_upto16(p, n_bytes);
    if (n_bytes <= 32)
        return hash_17to32(p, n_bytes);
    if (n_bytes <= 64)
        return hash_33to64(p, n_bytes);
    return hash_long(p, n_bytes);
}
