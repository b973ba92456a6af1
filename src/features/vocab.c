/* Vocabularies: a token's index in a list, found in one probe most of the time. The tokens sit
 * in one blob in index order (what saving the vocabulary writes out again), and an open-addressed
 * table of indices, at most half full, is keyed by the token's Fingerprint64, which out-of-
 * vocabulary values need anyway for their OOV bucket. */
#include <stdlib.h>
#include <string.h>

#include "features_int.h"
#include "fingerprint.h"

void dt_vocab_init(dt_vocab *v) { memset(v, 0, sizeof *v); }

void dt_vocab_free(dt_vocab *v)
{
    free(v->blob);
    free(v->offset);
    free(v->len);
    free(v->slots);
    dt_vocab_init(v);
}

static uint64_t table_cap(int64_t n)
{
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n)
        cap *= 2;
    return cap;
}

/* The slot where the token is, or the empty slot where it would go. */
static uint64_t probe(const dt_vocab *v, const char *token, size_t len, uint64_t h)
{
    uint64_t mask = v->cap - 1;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        int64_t s = v->slots[i];
        if (s == 0)
            return i;
        if (v->len[s - 1] == len && memcmp(v->blob + v->offset[s - 1], token, len) == 0)
            return i;
    }
}

dt_status dt_vocab_build(dt_vocab *v, const char *const *tokens, const uint32_t *lens, int64_t n)
{
    dt_vocab_free(v);
    size_t bytes = 0;
    for (int64_t i = 0; i < n; i++)
        bytes += (size_t)lens[i] + 1;
    v->cap = table_cap(n);
    v->blob = malloc(bytes ? bytes : 1);
    v->offset = malloc((size_t)(n ? n : 1) * sizeof *v->offset);
    v->len = malloc((size_t)(n ? n : 1) * sizeof *v->len);
    v->slots = calloc(v->cap, sizeof *v->slots);
    if (!v->blob || !v->offset || !v->len || !v->slots) {
        dt_vocab_free(v);
        return dt_error(DT_ERR_NOMEM, "no memory for a vocabulary of %lld tokens", (long long)n);
    }
    size_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t s = probe(v, tokens[i], lens[i], dt_fingerprint64(tokens[i], lens[i]));
        if (v->slots[s] != 0) {
            dt_status st = dt_error(DT_ERR_INVALID, "token '%.*s' is given twice (entries %lld and "
                                    "%lld)", (int)(lens[i] > 80 ? 80 : lens[i]), tokens[i],
                                    (long long)(v->slots[s] - 1), (long long)i);
            dt_vocab_free(v);
            return st;
        }
        memcpy(v->blob + at, tokens[i], lens[i]);
        v->blob[at + lens[i]] = '\0';
        v->offset[i] = at;
        v->len[i] = lens[i];
        v->slots[s] = i + 1;
        v->n = i + 1;
        at += (size_t)lens[i] + 1;
    }
    v->n = n;
    v->blob_bytes = at;
    return DT_OK;
}

int64_t dt_vocab_find_hashed(const dt_vocab *v, const char *token, size_t len, uint64_t fp)
{
    if (v->n == 0)
        return -1;
    return v->slots[probe(v, token, len, fp)] - 1;
}

int64_t dt_vocab_find(const dt_vocab *v, const char *token, size_t len)
{
    return v->n == 0 ? -1 : dt_vocab_find_hashed(v, token, len, dt_fingerprint64(token, len));
}
