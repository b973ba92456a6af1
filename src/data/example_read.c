/* The reader of every feature of a tf.train.Example record (dt_example_read).
 *
 * dt_example_read walks the entries as the general decoder does (the same helpers, so the same
 * protobuf semantics and messages), keeping each key's last entry at the place of its first
 * through a key table, and then decodes every kept entry into buffers, one per kind, that it owns
 * and reuses. */
#include "example_int.h"

#include <stdlib.h>
#include <string.h>

/* Beside each feature of the record being read: its last map entry, its key's hash, and where
 * its values start in the buffer of its kind. */
struct read_slot {
    entry_loc el;
    uint32_t hash;
    size_t off;
};

/* Grows p, an array of *cap elements of elem bytes, to hold at least need (doubling from 64).
 * Returns the new array, or NULL (p untouched) when memory or size_t runs out. */
static void *grow_array(void *p, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return NULL;
        c *= 2;
    }
    if (c > SIZE_MAX / elem)
        return NULL;
    void *q = realloc(p, c * elem);
    if (q)
        *cap = c;
    return q;
}

/* Room for `more` values of a kind beyond those the buffer holds. */
dt_status dt_ex_reader_grow_values(dt_example_reader *rd, int kind, size_t more)
{
    void *q;
    size_t used = kind == DT_FEATURE_FLOAT   ? rd->n_floats
                  : kind == DT_FEATURE_INT64 ? rd->n_ints
                                             : rd->n_bvals;
    size_t need = used + more; /* values lie in the record: no overflow */
    if (kind == DT_FEATURE_FLOAT) {
        if (!(q = grow_array(rd->floats, &rd->cap_floats, need, sizeof *rd->floats)))
            goto fail;
        rd->floats = q;
    } else if (kind == DT_FEATURE_INT64) {
        if (!(q = grow_array(rd->ints, &rd->cap_ints, need, sizeof *rd->ints)))
            goto fail;
        rd->ints = q;
    } else {
        /* Two arrays of one capacity: it is recorded once both have grown. */
        size_t c1 = rd->cap_bvals, c2 = rd->cap_bvals;
        if (!(q = grow_array((void *)rd->bytes, &c1, need, sizeof *rd->bytes)))
            goto fail;
        rd->bytes = q;
        if (!(q = grow_array(rd->bytes_len, &c2, need, sizeof *rd->bytes_len)))
            goto fail;
        rd->bytes_len = q;
        rd->cap_bvals = c1;
    }
    return DT_OK;
fail:
    return dt_error(DT_ERR_NOMEM, "example reader: no memory for %zu %s values", need,
                    dt_ex_list_name[kind]);
}

/* Room for one more feature, and a key table at most half full with it. */
static dt_status reader_grow_features(dt_example_reader *rd)
{
    void *q;
    size_t need = rd->n_features + 1;
    if (need >= UINT32_MAX / 2)
        return dt_error(DT_ERR_NOMEM, "example reader: more than %u features", UINT32_MAX / 2);
    if (need > rd->cap_features) {
        size_t c1 = rd->cap_features, c2 = rd->cap_features;
        if (!(q = grow_array(rd->features, &c1, need, sizeof *rd->features)))
            goto fail;
        rd->features = q;
        if (!(q = grow_array(rd->slots, &c2, need, sizeof *rd->slots)))
            goto fail;
        rd->slots = q;
        rd->cap_features = c1;
    }
    if (2 * need > rd->table_cap) {
        /* A fresh table (every slot of generation 0, never current) holding this record's keys. */
        size_t cap = rd->table_cap * 2;
        struct table_slot *t = calloc(cap, sizeof *t);
        if (!t)
            goto fail;
        for (size_t i = 0; i < rd->n_features; i++) {
            size_t h = rd->slots[i].hash & (cap - 1);
            while (t[h].gen == rd->gen)
                h = (h + 1) & (cap - 1);
            t[h] = (struct table_slot){rd->gen, (uint32_t)i};
        }
        free(rd->table);
        rd->table = t;
        rd->table_cap = cap;
    }
    return DT_OK;
fail:
    return dt_error(DT_ERR_NOMEM, "example reader: no memory for %zu features", need);
}

dt_status dt_example_reader_new(dt_example_reader **out)
{
    *out = NULL;
    dt_example_reader *rd = calloc(1, sizeof *rd);
    if (!rd)
        return dt_error(DT_ERR_NOMEM, "example reader: no memory");
    /* Every buffer exists from the start, so a feature's pointer is never NULL, even with no
     * values. */
    rd->table_cap = 64;
    rd->table = calloc(rd->table_cap, sizeof *rd->table);
    if (!rd->table || reader_grow_features(rd) ||
        dt_ex_reader_grow_values(rd, DT_FEATURE_FLOAT, 1) ||
        dt_ex_reader_grow_values(rd, DT_FEATURE_INT64, 1) ||
        dt_ex_reader_grow_values(rd, DT_FEATURE_BYTES, 1)) {
        dt_example_reader_free(rd);
        return dt_error(DT_ERR_NOMEM, "example reader: no memory");
    }
    *out = rd;
    return DT_OK;
}

void dt_example_reader_free(dt_example_reader *rd)
{
    if (!rd)
        return;
    free(rd->bytes_len);
    free((void *)rd->bytes);
    free(rd->floats);
    free(rd->ints);
    free(rd->table);
    free(rd->slots);
    free(rd->features);
    free(rd);
}

/* FNV-1a over the key: the table's index is its low bits. */
static uint32_t read_key_hash(const uint8_t *k, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ k[i]) * 16777619u;
    return h ^ (h >> 15);
}

/* Whether an entry's value is well formed, as protobuf's parser checks every value even when a
 * later one of its key replaces it: a label sink decodes the values and keeps only the first. */
static dt_status check_value(const rec *r, const entry_loc *el)
{
    feature_loc fl;
    sink s = {.mode = SINK_LABEL};
    dt_status st = dt_ex_analyze_feature(r, el, &fl);
    return st ? st : dt_ex_decode_feature(r, el, &fl, &s);
}

/* The first pass of dt_example_read: a new key takes the next feature, a key seen before has its
 * entry replaced (its place stays that of its first appearance). */
static dt_status read_entry_fn(void *ctx, const rec *r, const uint8_t *k, size_t klen,
                               const entry_loc *el)
{
    dt_example_reader *rd = ctx;
    if (!k) /* a map entry without its key field has the default key, "" */
        k = (const uint8_t *)"", klen = 0;
    uint32_t hash = read_key_hash(k, klen);
    size_t mask = rd->table_cap - 1;
    for (size_t h = hash & mask;; h = (h + 1) & mask) {
        struct table_slot *t = &rd->table[h];
        if (t->gen != rd->gen)
            break;
        dt_example_feature *f = &rd->features[t->idx];
        struct read_slot *sl = &rd->slots[t->idx];
        if (sl->hash == hash && f->key_len == klen && memcmp(f->key, k, klen) == 0) {
            dt_status st = check_value(r, &sl->el);
            if (st)
                return st;
            sl->el = *el;
            return DT_OK;
        }
    }
    dt_status st = reader_grow_features(rd); /* may rebuild the table */
    if (st)
        return st;
    mask = rd->table_cap - 1;
    size_t h = hash & mask;
    while (rd->table[h].gen == rd->gen)
        h = (h + 1) & mask;
    size_t i = rd->n_features++;
    rd->table[h] = (struct table_slot){rd->gen, (uint32_t)i};
    rd->features[i] = (dt_example_feature){.key = (const char *)k, .key_len = klen};
    rd->slots[i] = (struct read_slot){.el = *el, .hash = hash};
    return DT_OK;
}

dt_status dt_example_read(dt_example_reader *rd, const uint8_t *data, size_t n_bytes,
                          const dt_example_feature **features, size_t *n_features)
{
    static const uint8_t empty[1];
    *features = NULL;
    *n_features = 0;
    rec r = {n_bytes ? data : empty, n_bytes};
    rd->n_features = rd->n_ints = rd->n_floats = rd->n_bvals = 0;
    rd->oom = 0;
    if (++rd->gen == 0) { /* after 2^32 records: the old generations could match again */
        memset(rd->table, 0, rd->table_cap * sizeof *rd->table);
        rd->gen = 1;
    }
    dt_status st = dt_ex_each_entry(&r, read_entry_fn, rd);
    if (st)
        return st;
    for (size_t i = 0; i < rd->n_features; i++) {
        struct read_slot *sl = &rd->slots[i];
        feature_loc fl;
        sink s = {.mode = SINK_READ, .rd = rd};
        if ((st = dt_ex_analyze_feature(&r, &sl->el, &fl)))
            return st;
        sl->off = fl.kind == DT_FEATURE_FLOAT   ? rd->n_floats
                  : fl.kind == DT_FEATURE_INT64 ? rd->n_ints
                                                : rd->n_bvals;
        if ((st = dt_ex_decode_feature(&r, &sl->el, &fl, &s)))
            return st;
        if (rd->oom)
            return DT_ERR_NOMEM; /* dt_ex_reader_grow_values wrote the message */
        rd->features[i].kind = fl.kind;
        rd->features[i].n = s.count;
    }
    /* The buffers are final: point each feature at its run. */
    for (size_t i = 0; i < rd->n_features; i++) {
        dt_example_feature *f = &rd->features[i];
        size_t off = rd->slots[i].off;
        f->ints = f->kind == DT_FEATURE_INT64 ? rd->ints + off : NULL;
        f->floats = f->kind == DT_FEATURE_FLOAT ? rd->floats + off : NULL;
        f->bytes = f->kind == DT_FEATURE_BYTES ? rd->bytes + off : NULL;
        f->bytes_len = f->kind == DT_FEATURE_BYTES ? rd->bytes_len + off : NULL;
    }
    *features = rd->features;
    *n_features = rd->n_features;
    return DT_OK;
}
