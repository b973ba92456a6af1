/* The parts of the communicator interface that every backend shares (see include/dtrain/comm.h):
 * destroying a communicator, the names of reduce ops and wire dtypes, the reduction kernel and the
 * float32 <-> bfloat16 / IEEE half conversions. Everything here is a pure function of its
 * arguments except dt_comm_destroy.
 *
 * The kernels are plain loops over blocks of a fixed 16 elements: GCC 12's -O2 vectorizes a loop
 * only when the vector code replaces the scalar loop whole (its "very cheap" cost model), which a
 * loop of unknown trip count never does, but a loop of 16 does. The tail goes element by element.
 *
 * Each fast conversion has a naive reference (_ref) beside it that works in double precision from
 * the definition of the format, with the C library rounding to nearest even (nearbyint in the
 * default rounding mode); the fast narrowing conversions matched them on all 2^32 float32 inputs
 * when written (a one-off exhaustive run), and tests/test_comm.c holds them to the references on
 * the rounding boundaries of every exponent and on every 16-bit value. This file is also compiled
 * into the MPI plugin (mpi/dt_mpi_plugin.c), which has no libdtrain to call. */
#include "dtrain/comm.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 16

/* The communicator struct itself is allocated with malloc by the backend's constructor; the
 * backend's destroy slot frees only what impl owns, and this frees the struct. */
void dt_comm_destroy(dt_comm *c)
{
    if (!c)
        return;
    if (c->ops && c->ops->destroy)
        c->ops->destroy(c);
    free(c);
}

dt_status dt_comm_allreduce_update(dt_comm *c, float *grads, float *params, size_t n_elems,
                                   dt_update_fn update, void *ctx)
{
    if (c->ops->allreduce_update)
        return c->ops->allreduce_update(c, grads, params, n_elems, update, ctx);
    dt_status st = c->ops->allreduce(c, grads, n_elems, DT_REDUCE_SUM, DT_WIRE_F32);
    if (st == DT_OK && n_elems > 0)
        update(ctx, 0, n_elems, grads);
    return st;
}

dt_status dt_comm_share_owned(dt_comm *c, float *data, size_t n_elems)
{
    return c->ops->share_owned ? c->ops->share_owned(c, data, n_elems) : DT_OK;
}

dt_status dt_comm_share_tensors(dt_comm *c, const float *params, size_t n_params, size_t n_grads,
                                float **shared_params, float **shared_grads)
{
    *shared_params = *shared_grads = NULL;
    if (!c->ops->share_tensors)
        return DT_OK;
    return c->ops->share_tensors(c, params, n_params, n_grads, shared_params, shared_grads);
}

const char *dt_reduce_op_name(dt_reduce_op op)
{
    switch (op) {
    case DT_REDUCE_SUM: return "sum";
    case DT_REDUCE_MEAN: return "mean";
    case DT_REDUCE_MIN: return "min";
    case DT_REDUCE_MAX: return "max";
    }
    return "?";
}

dt_status dt_reduce_op_parse(const char *s, dt_reduce_op *op)
{
    static const dt_reduce_op all[] = {DT_REDUCE_SUM, DT_REDUCE_MEAN, DT_REDUCE_MIN, DT_REDUCE_MAX};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (s && strcmp(s, dt_reduce_op_name(all[i])) == 0) {
            *op = all[i];
            return DT_OK;
        }
    }
    return dt_error(DT_ERR_INVALID, "unknown reduce op '%s' (expected sum, mean, min or max)",
                    s ? s : "");
}

const char *dt_wire_dtype_name(dt_wire_dtype w)
{
    switch (w) {
    case DT_WIRE_F32: return "f32";
    case DT_WIRE_BF16: return "bf16";
    case DT_WIRE_F16: return "fp16";
    }
    return "?";
}

dt_status dt_wire_dtype_parse(const char *s, dt_wire_dtype *w)
{
    static const dt_wire_dtype all[] = {DT_WIRE_F32, DT_WIRE_BF16, DT_WIRE_F16};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (s && strcmp(s, dt_wire_dtype_name(all[i])) == 0) {
            *w = all[i];
            return DT_OK;
        }
    }
    return dt_error(DT_ERR_INVALID, "unknown wire dtype '%s' (expected f32, bf16 or fp16)",
                    s ? s : "");
}

/* ---- reduction ---- */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* All-ones when cond holds, else zero: selects written with it stay branch-free, which GCC needs
 * to vectorize these loops. */
static inline uint32_t mask_if(int cond) { return 0u - (uint32_t)(cond != 0); }

/* MIN and MAX are IEEE 754-2019's minimum and maximum, and commutative to the bit, so that every
 * rank gets the same bits whatever order a backend combines them in (MPI's builtin MPI_MIN does
 * not: it keeps its second operand on ties, and drops a NaN or not depending on the order):
 *   - a NaN operand makes the result NaN (a diverged rank cannot hide behind a reduction; SUM
 *     does this by itself); of two NaNs, the one with the larger bit pattern;
 *   - -0 is below +0.
 * Otherwise they compare an integer key of the bits that orders floats as numbers, -0 below +0:
 * the magnitude bits of negative numbers are flipped, and the sign bit is flipped for an
 * unsigned comparison. */
static inline uint32_t order_key(uint32_t u) { return u ^ ((0u - (u >> 31)) >> 1) ^ 0x80000000u; }

static inline float min_max(float a, float b, int want_max)
{
    uint32_t ua = f32_bits(a), ub = f32_bits(b);
    uint32_t na = mask_if((ua & 0x7FFFFFFFu) > 0x7F800000u);
    uint32_t nb = mask_if((ub & 0x7FFFFFFFu) > 0x7F800000u);
    uint32_t ka = order_key(ua), kb = order_key(ub);
    uint32_t take_b = mask_if(want_max ? kb > ka : kb < ka);
    uint32_t num = (ub & take_b) | (ua & ~take_b);
    uint32_t nan_b = nb & (~na | mask_if(ub > ua)); /* b is NaN and a is not, or b's bits win */
    uint32_t nan = (ub & nan_b) | (ua & ~nan_b);
    uint32_t any_nan = na | nb;
    return bits_f32((nan & any_nan) | (num & ~any_nan));
}

static inline float min_nan(float a, float b) { return min_max(a, b, 0); }
static inline float max_nan(float a, float b) { return min_max(a, b, 1); }

/* dst (n_elems) op= src (n_elems); the arrays do not overlap. */
static void reduce_add(float *restrict dst, const float *restrict src, size_t n_elems)
{
    size_t i = 0;
    for (; i + BLOCK <= n_elems; i += BLOCK)
        for (size_t j = 0; j < BLOCK; j++)
            dst[i + j] += src[i + j];
    for (; i < n_elems; i++)
        dst[i] += src[i];
}

static void reduce_min(float *restrict dst, const float *restrict src, size_t n_elems)
{
    size_t i = 0;
    for (; i + BLOCK <= n_elems; i += BLOCK)
        for (size_t j = 0; j < BLOCK; j++)
            dst[i + j] = min_nan(dst[i + j], src[i + j]);
    for (; i < n_elems; i++)
        dst[i] = min_nan(dst[i], src[i]);
}

static void reduce_max(float *restrict dst, const float *restrict src, size_t n_elems)
{
    size_t i = 0;
    for (; i + BLOCK <= n_elems; i += BLOCK)
        for (size_t j = 0; j < BLOCK; j++)
            dst[i + j] = max_nan(dst[i + j], src[i + j]);
    for (; i < n_elems; i++)
        dst[i] = max_nan(dst[i], src[i]);
}

// dst (n_elems) = op(dst, src) elementwise; MEAN adds as SUM and the caller divides at the end.
void dt_reduce_f32(float *dst, const float *src, size_t n_elems, dt_reduce_op op)
{
    switch (op) {
    case DT_REDUCE_SUM:
    case DT_REDUCE_MEAN: reduce_add(dst, src, n_elems); return;
    case DT_REDUCE_MIN: reduce_min(dst, src, n_elems); return;
    case DT_REDUCE_MAX: reduce_max(dst, src, n_elems); return;
    }
    assert(!"unknown reduce op");
}

/* ---- float32 <-> bfloat16 ----
 * bfloat16 is the upper half of a float32: same sign and 8-bit exponent, 7 mantissa bits. */

/* Adding 0x7FFF plus the lowest kept bit rounds the upper half to nearest even, carrying into the
 * exponent where the mantissa overflows (so the largest finite values round up to infinity, and
 * subnormals round like any other value). NaN is kept apart: the carry could turn it into
 * infinity; it keeps its sign and upper payload and gets the quiet bit. */
static inline uint16_t bf16_from_bits(uint32_t x)
{
    uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = (x >> 16) | 0x0040u;
    return (uint16_t)((x & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

// src (n_elems) float32 -> dst (n_elems) bfloat16 bits
void dt_f32_to_bf16(const float *src, uint16_t *dst, size_t n_elems)
{
    size_t i = 0;
    for (; i + BLOCK <= n_elems; i += BLOCK)
        for (size_t j = 0; j < BLOCK; j++)
            dst[i + j] = bf16_from_bits(f32_bits(src[i + j]));
    for (; i < n_elems; i++)
        dst[i] = bf16_from_bits(f32_bits(src[i]));
}

/* Widening is exact; a signalling NaN gets the quiet bit. */
static inline uint32_t bf16_to_bits(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    return (x & 0x7FFFFFFFu) > 0x7F800000u ? x | 0x00400000u : x;
}

// src (n_elems) bfloat16 bits -> dst (n_elems) float32
void dt_bf16_to_f32(const uint16_t *src, float *dst, size_t n_elems)
{
    size_t i = 0;
    for (; i + BLOCK <= n_elems; i += BLOCK)
        for (size_t j = 0; j < BLOCK; j++)
            dst[i + j] = bits_f32(bf16_to_bits(src[i + j]));
    for (; i < n_elems; i++)
        dst[i] = bits_f32(bf16_to_bits(src[i]));
}

/* ---- float32 <-> IEEE half ----
 * Half: sign, 5-bit exponent (bias 15), 10 mantissa bits; the largest finite value is 65504,
 * the smallest normal 2^-14, the smallest subnormal 2^-24. */

/* Marat Dukhan's method (the FP16 library, as in PyTorch): scaling |f| by 2^112 then 2^-110
 * makes values beyond the half range overflow to infinity; adding a power of two chosen from f's
 * exponent (at least 2^-14's, for subnormals) makes the float adder itself round f to the half's
 * precision, to nearest even, and the half's bits are then read off the sum. This relies on
 * IEEE arithmetic in the default rounding mode without flush-to-zero, as the rest of dtrain does.
 * NaN becomes the quiet NaN 0x7E00 with f's sign (the payload is dropped). */
static inline uint16_t f16_from_float(float f)
{
    uint32_t w = f32_bits(f), shl1_w = w + w, sign = w & 0x80000000u;
    float base = (fabsf(f) * 0x1p+112f) * 0x1p-110f;
    uint32_t bias = shl1_w & 0xFF000000u, low = mask_if(bias < 0x71000000u);
    bias = (0x71000000u & low) | (bias & ~low);
    base = bits_f32((bias >> 1) + 0x07800000u) + base;
    uint32_t bits = f32_bits(base);
    uint32_t nonsign = ((bits >> 13) & 0x7C00u) + (bits & 0x0FFFu);
    uint32_t nan = mask_if(shl1_w > 0xFF000000u);
    return (uint16_t)((sign >> 16) | (0x7E00u & nan) | (nonsign & ~nan));
}

// src (n_elems) float32 -> dst (n_elems) IEEE half bits
void dt_f32_to_f16(const float *src, uint16_t *dst, size_t n_elems)
{
    size_t i = 0;
    for (; i + BLOCK <= n_elems; i += BLOCK)
        for (size_t j = 0; j < BLOCK; j++)
            dst[i + j] = f16_from_float(src[i + j]);
    for (; i < n_elems; i++)
        dst[i] = f16_from_float(src[i]);
}

/* The same library's widening: a normal half's exponent and mantissa moved into place and
 * rebiased by a multiplication by 2^-112 (which also keeps infinities and quiets NaNs, keeping
 * their payload); a subnormal half m * 2^-24 is computed exactly as (0.5 + m * 2^-24) - 0.5. */
static inline float f16_to_float(uint16_t h)
{
    uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
    float normalized = bits_f32((two_w >> 4) + (0xE0u << 23)) * 0x1p-112f;
    float subnormal = bits_f32((two_w >> 17) | (126u << 23)) - 0.5f;
    uint32_t sub = mask_if(two_w < (1u << 27));
    return bits_f32(sign | (f32_bits(subnormal) & sub) | (f32_bits(normalized) & ~sub));
}

// src (n_elems) IEEE half bits -> dst (n_elems) float32
void dt_f16_to_f32(const uint16_t *src, float *dst, size_t n_elems)
{
    size_t i = 0;
    for (; i + BLOCK <= n_elems; i += BLOCK)
        for (size_t j = 0; j < BLOCK; j++)
            dst[i + j] = f16_to_float(src[i + j]);
    for (; i < n_elems; i++)
        dst[i] = f16_to_float(src[i]);
}

/* ---- naive references ----
 * Not declared in comm.h (its interface is shared with the other backends); the tests declare
 * them. Each computes the nearest representable value from the format's definition. */

/* The 16-bit encoding of x for a format with mant_bits mantissa bits, exponent bias `bias` and
 * all-ones exponent max_e (infinity and NaN). */
static uint16_t ref_encode(float f, int mant_bits, int bias, int max_e, uint16_t quiet_nan)
{
    uint16_t sign = signbit(f) ? (uint16_t)0x8000u : 0;
    double a = fabs((double)f);
    if (isnan(f))
        return quiet_nan;
    uint16_t inf = (uint16_t)(sign | ((unsigned)max_e << mant_bits));
    if (isinf(f))
        return inf;
    double min_normal = ldexp(1.0, 1 - bias);
    if (a < min_normal) {
        /* Subnormal: a count of units of 2^(1 - bias - mant_bits); a count of 2^mant_bits is the
         * smallest normal number's encoding. */
        double k = nearbyint(ldexp(a, bias - 1 + mant_bits));
        return (uint16_t)(sign | (uint16_t)k);
    }
    int e;
    double fr = frexp(a, &e); /* a = fr * 2^e, fr in [0.5, 1) */
    /* The significand, 2^mant_bits .. 2^(mant_bits + 1). */
    double m = nearbyint(ldexp(fr, mant_bits + 1));
    if (m == ldexp(1.0, mant_bits + 1)) {
        m = ldexp(1.0, mant_bits);
        e++;
    }
    int biased = e - 1 + bias;
    if (biased >= max_e)
        return inf;
    return (uint16_t)(sign | ((unsigned)biased << mant_bits) |
                      ((unsigned)m - (1u << mant_bits)));
}

static float ref_decode(uint16_t h, int mant_bits, int bias, int max_e)
{
    int sign = h >> 15, e = (h >> mant_bits) & max_e;
    unsigned m = h & ((1u << mant_bits) - 1u);
    double v;
    if (e == max_e)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, 1 - bias - mant_bits);
    else
        v = ldexp((double)(m | (1u << mant_bits)), e - bias - mant_bits);
    return (float)(sign ? -v : v);
}

void dt_f32_to_bf16_naive(const float *src, uint16_t *dst, size_t n_elems);
void dt_bf16_to_f32_naive(const uint16_t *src, float *dst, size_t n_elems);
void dt_f32_to_f16_naive(const float *src, uint16_t *dst, size_t n_elems);
void dt_f16_to_f32_naive(const uint16_t *src, float *dst, size_t n_elems);

void dt_f32_to_bf16_naive(const float *src, uint16_t *dst, size_t n_elems)
{
    for (size_t i = 0; i < n_elems; i++) {
        /* A NaN keeps its sign and upper payload, quieted, as the fast version does. */
        uint32_t x = f32_bits(src[i]);
        dst[i] = isnan(src[i]) ? (uint16_t)((x >> 16) | 0x40u)
                               : ref_encode(src[i], 7, 127, 255, 0);
    }
}

void dt_bf16_to_f32_naive(const uint16_t *src, float *dst, size_t n_elems)
{
    for (size_t i = 0; i < n_elems; i++) {
        bool nan = (src[i] & 0x7F80u) == 0x7F80u && (src[i] & 0x7Fu);
        /* A NaN keeps its payload, quieted: the decoder's NAN would lose it. */
        dst[i] = nan ? bits_f32(((uint32_t)src[i] << 16) | 0x00400000u)
                     : ref_decode(src[i], 7, 127, 255);
    }
}

void dt_f32_to_f16_naive(const float *src, uint16_t *dst, size_t n_elems)
{
    for (size_t i = 0; i < n_elems; i++) {
        uint16_t sign = signbit(src[i]) ? (uint16_t)0x8000u : 0;
        dst[i] = ref_encode(src[i], 10, 15, 31, (uint16_t)(sign | 0x7E00u));
    }
}

void dt_f16_to_f32_naive(const uint16_t *src, float *dst, size_t n_elems)
{
    for (size_t i = 0; i < n_elems; i++) {
        bool nan = (src[i] & 0x7C00u) == 0x7C00u && (src[i] & 0x3FFu);
        dst[i] = nan ? bits_f32(((uint32_t)(src[i] & 0x8000u) << 16) | 0x7FC00000u |
                                ((uint32_t)(src[i] & 0x3FFu) << 13))
                     : ref_decode(src[i], 10, 15, 31);
    }
}

void dt_wire_encode(dt_wire_dtype w, const float *src, uint16_t *dst, size_t n_elems)
{
    if (w == DT_WIRE_BF16)
        dt_f32_to_bf16(src, dst, n_elems);
    else
        dt_f32_to_f16(src, dst, n_elems);
}

void dt_wire_decode(dt_wire_dtype w, const uint16_t *src, float *dst, size_t n_elems)
{
    if (w == DT_WIRE_BF16)
        dt_bf16_to_f32(src, dst, n_elems);
    else
        dt_f16_to_f32(src, dst, n_elems);
}
