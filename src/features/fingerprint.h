/* TensorFlow's string fingerprints, bit for bit, so that a model trained by dtrain puts a feature
 * value in the same bucket as the TensorFlow or Keras model it replaces or is compared with
 * (internal to the features layer).
 *
 * dt_fingerprint64 is FarmHash's Fingerprint64 (its "na" 64-bit hash), the function behind
 * TensorFlow's Fingerprint64, tf.strings.to_hash_bucket_fast, categorical_column_with_hash_bucket
 * and Keras Hashing without a salt: bucket = Fingerprint64(bytes) % buckets. Keras Hashing hashes
 * integer inputs as their decimal text, and with a mask value keeps bin 0 for it (the others are
 * then 1 + fingerprint % (bins - 1)). FarmHash promises that a fingerprint never changes, so
 * neither may this one: tests/test_fingerprint.c pins values and compares with libfarmhash.
 *
 * dt_fingerprint_cat64 is TensorFlow's FingerprintCat64, which folds a cross of several features
 * into one value. TensorFlow's hashed crosses (tf.sparse.cross_hashed, crossed_column, Keras
 * HashedCrossing) start from the hash key 0xDECAFCAFFE, fold in each feature in column order
 * (all sparse inputs before all dense ones, whatever order the caller gave) and end with
 * h % buckets, or h % (2^63 - 1) when there are no buckets. A string feature enters as its
 * fingerprint, an integer one as its value. */
#ifndef DTRAIN_FEATURES_FINGERPRINT_H
#define DTRAIN_FEATURES_FINGERPRINT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

/* The fingerprint of n_bytes bytes at data (which may be NULL when n_bytes is 0). */
uint64_t dt_fingerprint64(const void *data, size_t n_bytes);

/* Folds the high bits of v into the low ones. */
static inline uint64_t dt_fingerprint_shift_mix(uint64_t v) { return v ^ (v >> 47); }

/* The fingerprint of fp1 followed by fp2. Order matters: cat64(a, b) != cat64(b, a). */
static inline uint64_t dt_fingerprint_cat64(uint64_t fp1, uint64_t fp2)
{
    const uint64_t mul = 0xc6a4a7935bd1e995ULL;
    uint64_t r = fp1 ^ mul;
    r ^= dt_fingerprint_shift_mix(fp2 * mul) * mul;
    r *= mul;
    r = dt_fingerprint_shift_mix(r) * mul;
    return dt_fingerprint_shift_mix(r);
}

/* The bucket of a value among `buckets` (> 0), as tf.strings.to_hash_bucket_fast gives it. */
static inline uint64_t dt_fingerprint_bucket(const void *data, size_t n, uint64_t buckets)
{
    assert(buckets > 0);
    return dt_fingerprint64(data, n) % buckets;
}

#endif
