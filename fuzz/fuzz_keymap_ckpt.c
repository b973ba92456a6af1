/* Fuzz target: a dynamic table's checkpoint reader. The input is a safetensors file (opened as
 * dt_ckpt_open opens any, through a memory-backed file; one without a checksum in its metadata
 * is read unchecked, so mutations reach the tensors), restored into a key map of two tables
 * (fm_w of 1 value and fm_v of 4, with Adagrad's slot) as a checkpoint of a dynamic model is:
 * keys, counts, last-seen steps, rows and slots, keys being counted, the Bloom filter, each of
 * any dtype, shape or content. Any status is fine; a crash, a sanitizer report, or a restored
 * map that breaks its invariants is not. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dtrain/checkpoint.h"
#include "dtrain/keymap.h"
#include "fuzz.h"

enum { CAPACITY = 4096 };

static void check_restored(dt_keymap *m, const dt_ckpt *c)
{
    const dt_ckpt_tensor *keys = dt_ckpt_find(c, "fm_w/keys");
    REQUIRE(keys != NULL);
    dt_keymap_stats s;
    dt_keymap_stats_get(m, &s);
    REQUIRE(s.live == keys->dims[0] && s.rows_used == s.live + 1);
    /* Every key restored finds its row, in file order. */
    for (int64_t i = 0; i < keys->dims[0]; i++) {
        int64_t k;
        memcpy(&k, (const uint8_t *)keys->data + 8 * i, 8);
        REQUIRE(dt_keymap_row(m, k) == i + 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("ckpt", 0);
    if (fd < 0)
        return 0;
    dt_ckpt *c = NULL;
    if ((size == 0 || write(fd, data, size) == (ssize_t)size)) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        if (dt_ckpt_open(path, &c) != DT_OK)
            c = NULL;
    }
    close(fd);
    if (!c)
        return 0;
    dt_keymap_policy p;
    dt_keymap_policy_default(&p);
    p.min_count = 2, p.bloom_bits = size > 0 && data[0] & 1 ? 1024 : 0;
    dt_keymap *m = NULL;
    dt_table w, v;
    memset(&w, 0, sizeof w), memset(&v, 0, sizeof v);
    const char *slot[1] = {"accumulator"};
    const float init[1] = {0.1f};
    if (dt_keymap_create("fm_w", &p, CAPACITY, &m) == DT_OK &&
        dt_table_create(&w, "fm_w", CAPACITY, 1) == DT_OK &&
        dt_table_create(&v, "fm_v", CAPACITY, 4) == DT_OK &&
        dt_keymap_attach(m, &w, 0.0f, 1) == DT_OK && dt_keymap_attach(m, &v, 0.1f, 1) == DT_OK &&
        dt_table_set_slots(&w, "adagrad", 1, slot, init) == DT_OK &&
        dt_table_set_slots(&v, "adagrad", 1, slot, init) == DT_OK) {
        if (dt_keymap_restore(m, c, true) == DT_OK) {
            check_restored(m, c);
            /* A restored map trains on: a lookup of keys old and new, an eviction, a pack. */
            int64_t keys[3] = {0, 7, -1}, rows[3];
            (void)dt_keymap_resolve(m, keys, 3, 2, rows);
            dt_keymap_evict_all(m, 3);
            dt_keymap_compact(m);
        }
    }
    dt_table_free(&w), dt_table_free(&v);
    dt_keymap_destroy(m);
    dt_ckpt_close(c);
    return 0;
}
