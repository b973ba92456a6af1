/* A float's "%.9g" text without printf (see float_text.h).
 *
 * A float is m 2^e exactly (m < 2^24). Its 9 significant digits are the integer N nearest to
 * m 2^e 10^(8 - E), E the decimal exponent, ties to even as glibc rounds: for |x| in [1e-20,
 * 1e9) the product fits in 128 bits, so N and its remainder are exact, and the digits are
 * printf's. The rest (zero, subnormals, the very small and the very large, infinities, NaN) goes
 * to snprintf, which is as exact and rarely needed for scores. */
#include "float_text.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

__extension__ typedef unsigned __int128 u128;

/* The exact range of the fast path: 10^8 <= m 2^e 10^s < 10^9 needs s <= 29 there. */
#define FAST_MIN 1e-20f
#define FAST_LIMIT 1e9f
enum { MAX_SCALE = 30 };

static u128 pow10_128(int s)
{
    static const uint64_t p[20] = {1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull,
                                   10000000ull, 100000000ull, 1000000000ull, 10000000000ull,
                                   100000000000ull, 1000000000000ull, 10000000000000ull,
                                   100000000000000ull, 1000000000000000ull,
                                   10000000000000000ull, 100000000000000000ull,
                                   1000000000000000000ull, 10000000000000000000ull};
    return s < 20 ? (u128)p[s] : (u128)p[s - 19] * p[19];
}

/* floor(m 2^e 10^s) in *fl, and the same rounded to nearest, ties to even (the return). */
static uint64_t scaled(uint32_t m, int e, int s, uint64_t *fl)
{
    u128 num = (u128)m * pow10_128(s);
    if (e >= 0) { /* x >= 2^23 here, so s <= 2: no overflow */
        num <<= e;
        *fl = (uint64_t)num;
        return (uint64_t)num;
    }
    int k = -e; /* < 128 in the fast range */
    u128 q = num >> k, r = num - (q << k), half = (u128)1 << (k - 1);
    *fl = (uint64_t)q;
    if (r > half || (r == half && (q & 1)))
        q++;
    return (uint64_t)q;
}

static size_t fallback(float x, char out[DT_FLOAT_TEXT_MAX])
{
    int n = snprintf(out, DT_FLOAT_TEXT_MAX, "%.9g", (double)x);
    return n > 0 ? (size_t)n : 0;
}

size_t dt_float_text(float x, char out[DT_FLOAT_TEXT_MAX])
{
    float a = fabsf(x);
    if (!(a >= FAST_MIN && a < FAST_LIMIT)) /* also NaN */
        return fallback(x, out);
    uint32_t bits;
    memcpy(&bits, &a, sizeof bits);
    uint32_t m = (bits & 0x7fffffu) | 0x800000u; /* normal: a >= FAST_MIN */
    int e = (int)(bits >> 23) - 150;
    /* The decimal exponent: log10's guess, corrected against the exact product. */
    int E = (int)floor(log10((double)a));
    uint64_t N, fl;
    for (int tries = 0;; tries++) {
        if (8 - E > MAX_SCALE || 8 - E < 0 || tries > 2)
            return fallback(x, out);
        N = scaled(m, e, 8 - E, &fl);
        if (fl >= 1000000000ull)
            E++;
        else if (fl < 100000000ull)
            E--;
        else
            break;
    }
    if (N == 1000000000ull) /* rounded up to the next power of ten */
        N = 100000000ull, E++;
    if (E > 8)
        return fallback(x, out);
    char d[9];
    for (int i = 8; i >= 0; i--)
        d[i] = (char)('0' + N % 10), N /= 10;
    int last = 8; /* the last digit kept: %g drops trailing zeros */
    while (last > 0 && d[last] == '0')
        last--;
    char *p = out;
    if (x < 0)
        *p++ = '-';
    if (E < -4) { /* d.ddde-XX */
        *p++ = d[0];
        if (last > 0) {
            *p++ = '.';
            memcpy(p, d + 1, (size_t)last);
            p += last;
        }
        *p++ = 'e', *p++ = '-';
        *p++ = (char)('0' + (-E) / 10), *p++ = (char)('0' + (-E) % 10);
    } else if (E >= 0) { /* ddd.ddd */
        memcpy(p, d, (size_t)E + 1);
        p += E + 1;
        if (last > E) {
            *p++ = '.';
            memcpy(p, d + E + 1, (size_t)(last - E));
            p += last - E;
        }
    } else { /* 0.000ddd */
        *p++ = '0', *p++ = '.';
        for (int z = 0; z < -E - 1; z++)
            *p++ = '0';
        memcpy(p, d, (size_t)last + 1);
        p += last + 1;
    }
    *p = '\0';
    return (size_t)(p - out);
}
