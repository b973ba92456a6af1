/* Core: CRC32C, RNG, arenas, the thread pool, error messages. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "dtrain/arena.h"
#include "../src/core/crc32c.h"
#include "../src/core/grow.h"
#include "../src/core/lines.h"
#include "dtrain/hash.h"
#include "dtrain/pool.h"
#include "dtrain/rng.h"
#include "../src/core/stream.h"
#include "test.h"

TEST(crc32c_test_vectors)
{
    CHECK(dt_crc32c("123456789", 9) == 0xE3069283u);
    CHECK(dt_crc32c_mask(dt_crc32c("123456789", 9)) == 0xC78AB0E5u);
    CHECK(dt_crc32c("", 0) == 0u);
    CHECK(dt_crc32c_mask(0) == 0xA282EAD8u);
}

TEST(crc32c_fast_matches_table_at_every_length_and_split)
{
    uint8_t buf[300];
    dt_rng r;
    dt_rng_seed(&r, 7);
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)dt_rng_next(&r);
    for (size_t n = 0; n <= sizeof buf; n++) {
        uint32_t ref = dt_crc32c_extend_naive(0, buf, n);
        CHECK_MSG(dt_crc32c(buf, n) == ref, "length %zu", n);
        size_t half = n / 3;
        CHECK_MSG(dt_crc32c_extend(dt_crc32c(buf, half), buf + half, n - half) == ref,
                  "split at %zu of %zu", half, n);
    }
}

/* Buffers long enough for the three-chain path (12 KB rounds), around its edges, whole and split
 * at odd places, against the table. */
TEST(crc32c_long_buffers_match_table)
{
    size_t cap = 100003;
    uint8_t *buf = malloc(cap);
    dt_rng r;
    dt_rng_seed(&r, 8);
    for (size_t i = 0; i < cap; i++)
        buf[i] = (uint8_t)dt_rng_next(&r);
    static const size_t lens[] = {12287, 12288, 12289, 24575, 24576, 36871, 65536, 100003};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        size_t n = lens[i];
        uint32_t ref = dt_crc32c_extend_naive(0, buf, n);
        CHECK_MSG(dt_crc32c(buf, n) == ref, "length %zu", n);
        size_t cut = n / 7 + 3;
        CHECK_MSG(dt_crc32c_extend(dt_crc32c(buf, cut), buf + cut, n - cut) == ref,
                  "split at %zu of %zu", cut, n);
    }
    free(buf);
}

TEST(hash_words_are_the_hash_of_their_little_endian_bytes)
{
    dt_rng r;
    dt_rng_seed(&r, 7);
    for (int i = 0; i < 1000; i++) {
        uint64_t w[4], seed = dt_rng_next(&r);
        unsigned char bytes[32];
        for (int k = 0; k < 4; k++) {
            w[k] = dt_rng_next(&r) >> (i % 64); /* small words too: high bytes zero */
            for (int b = 0; b < 8; b++)
                bytes[8 * k + b] = (unsigned char)(w[k] >> (8 * b));
        }
        size_t n = (size_t)(i % 5);
        CHECK_MSG(dt_hash_words(seed, w, n) == dt_hash_bytes(seed, bytes, 8 * n), "case %d", i);
    }
    /* The hash is fixed across versions (hash.h): values taken from the version before
     * dt_hash_words, so that a change of the mixing is noticed. */
    uint64_t key[2] = {3, 1234};
    CHECK(dt_hash_words(0x637269746f, key, 2) == 0xd74910effacd42b0ULL);
    CHECK(dt_hash_bytes(5, "abc", 3) == 0xf852806f86cb34bcULL);
}

TEST(rng_is_reproducible_and_bounded)
{
    dt_rng a, b;
    dt_rng_seed(&a, 42);
    dt_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++)
        CHECK(dt_rng_next(&a) == dt_rng_next(&b));
    dt_rng_seed(&b, 43);
    CHECK(dt_rng_next(&a) != dt_rng_next(&b));
    int counts[7] = {0};
    for (int i = 0; i < 70000; i++) {
        uint64_t v = dt_rng_below(&a, 7);
        CHECK(v < 7);
        counts[v < 7 ? v : 0]++;
        float u = dt_rng_uniform(&a);
        CHECK(u >= 0.0f && u < 1.0f);
    }
    for (int k = 0; k < 7; k++)
        CHECK_MSG(counts[k] > 9000 && counts[k] < 11000, "value %d drawn %d times of 70000", k,
                  counts[k]);
}

TEST(rng_shuffle_is_a_permutation)
{
    uint32_t idx[1000];
    int seen[1000] = {0};
    for (uint32_t i = 0; i < 1000; i++)
        idx[i] = i;
    dt_rng r;
    dt_rng_seed(&r, 3);
    dt_rng_shuffle_u32(&r, idx, 1000);
    int moved = 0;
    for (uint32_t i = 0; i < 1000; i++) {
        CHECK(idx[i] < 1000);
        seen[idx[i] % 1000]++;
        moved += idx[i] != i;
    }
    for (int i = 0; i < 1000; i++)
        CHECK(seen[i] == 1);
    CHECK(moved > 900);
}

TEST(arena_views_are_aligned_named_and_mirrored)
{
    dt_arena a, g;
    dt_arena_init(&a);
    dt_arena_init(&g);
    int d1[2] = {3, 5}, d2[1] = {7}, d3[4] = {2, 2, 1, 3};
    int i1, i2, i3;
    CHECK_OK(dt_arena_add(&a, "dense/kernel", 2, d1, &i1));
    CHECK_OK(dt_arena_add(&a, "dense/bias", 1, d2, &i2));
    CHECK_OK(dt_arena_add(&a, "conv2d/kernel", 4, d3, &i3));
    CHECK_OK(dt_arena_commit(&a));
    CHECK(a.n_views == 3);
    CHECK(dt_arena_payload_elems(&a) == 15 + 7 + 12);
    for (int i = 0; i < a.n_views; i++)
        CHECK(((uintptr_t)dt_arena_view_data(&a, i) & 63) == 0);
    CHECK(dt_arena_find(&a, "dense/bias") == i2);
    CHECK(dt_arena_find(&a, "nope") == -1);
    CHECK_OK(dt_arena_mirror(&g, &a, "adam/m/"));
    CHECK(g.n_elems == a.n_elems);
    CHECK(dt_arena_find(&g, "adam/m/conv2d/kernel") == i3);
    CHECK(g.views[i3].offset == a.views[i3].offset);
    uint32_t before = dt_arena_checksum(&a);
    dt_arena_view_data(&a, i2)[6] = 1.0f;
    CHECK(dt_arena_checksum(&a) != before);
    /* Padding is not part of the checksum. */
    uint32_t with_value = dt_arena_checksum(&a);
    a.data[a.views[i2].offset + 7] = 5.0f;
    CHECK(dt_arena_checksum(&a) == with_value);
    int bad[1] = {0};
    CHECK_ERR(dt_arena_add(&g, "late", 1, d2, NULL), DT_ERR_INVALID, "after commit");
    dt_arena_free(&a);
    dt_arena_init(&a);
    CHECK_ERR(dt_arena_add(&a, "zero", 1, bad, NULL), DT_ERR_INVALID, "zero");
    dt_arena_free(&a);
    dt_arena_free(&g);
}

struct pool_probe {
    int hits[64];
};

static void probe_task(void *ctx, int task, int n_tasks)
{
    struct pool_probe *p = ctx;
    (void)n_tasks;
    __atomic_add_fetch(&p->hits[task], 1, __ATOMIC_RELAXED);
}

TEST(pool_runs_every_task_once)
{
    for (int threads = 1; threads <= 4; threads++) {
        dt_pool *pool;
        CHECK_OK(dt_pool_create(threads, &pool));
        CHECK(dt_pool_size(pool) == threads);
        for (int rep = 0; rep < 200; rep++) {
            struct pool_probe p = {{0}};
            int n = 1 + rep % 13;
            dt_pool_run(pool, probe_task, &p, n);
            for (int t = 0; t < n; t++)
                CHECK(p.hits[t] == 1);
            CHECK(p.hits[n] == 0);
        }
        dt_pool_destroy(pool);
    }
    dt_pool *pool;
    CHECK_ERR(dt_pool_create(0, &pool), DT_ERR_INVALID, "thread count");
}

struct pool_owner_probe {
    pthread_t ran[8];
    int runs[8];
    int started[8];
    bool held;      /* task 0 waits until every other task has run */
};

/* Until cond holds (polled every millisecond), at most two seconds. */
#define WAIT_FOR(cond)                                                                             \
    for (int w_ = 0; w_ < 2000 && !(cond); w_++)                                                   \
        usleep(1000)

static bool others_done(struct pool_owner_probe *p)
{
    int done = 0;
    for (int t = 1; t < 8; t++)
        done += __atomic_load_n(&p->runs[t], __ATOMIC_ACQUIRE);
    return done == 7;
}

static void owner_task(void *ctx, int task, int n_tasks)
{
    struct pool_owner_probe *p = ctx;
    (void)n_tasks;
    p->ran[task] = pthread_self();
    __atomic_store_n(&p->started[task], 1, __ATOMIC_RELEASE);
    if (p->held && task == 0) {
        WAIT_FOR(others_done(p));
    } else if (!p->held) {
        /* In step with the other block: a task ends once its partner in the other block has
         * begun, so neither thread finishes its own block while the other's is unclaimed. */
        WAIT_FOR(__atomic_load_n(&p->started[(task + 4) % 8], __ATOMIC_ACQUIRE));
    }
    __atomic_add_fetch(&p->runs[task], 1, __ATOMIC_RELEASE);
}

/* Two threads, eight tasks: the caller owns tasks 0-3 and the worker 4-7, and each runs its own
 * (claimed in turn, they would alternate). When the caller is held up in task 0, the worker runs
 * its block and then takes 1-3 from the caller's. */
TEST(pool_threads_run_their_own_block_then_help_a_held_up_one)
{
    dt_pool *pool;
    CHECK_OK(dt_pool_create(2, &pool));
    pthread_t me = pthread_self();
    struct pool_owner_probe even = {.held = false};
    dt_pool_run(pool, owner_task, &even, 8);
    for (int t = 0; t < 8; t++)
        CHECK_MSG(even.runs[t] == 1 && pthread_equal(even.ran[t], me) == (t < 4),
                  "task %d: %d runs, %s thread", t, even.runs[t],
                  pthread_equal(even.ran[t], me) ? "the caller's" : "the worker's");
    struct pool_owner_probe held = {.held = true};
    dt_pool_run(pool, owner_task, &held, 8);
    CHECK(pthread_equal(held.ran[0], me));
    int worker_ran = 0;
    for (int t = 1; t < 8; t++) {
        CHECK(held.runs[t] == 1);
        worker_ran += !pthread_equal(held.ran[t], me);
    }
    CHECK_MSG(worker_ran == 7, "the worker ran %d of tasks 1-7", worker_ran);
    dt_pool_destroy(pool);
}

TEST(pool_slices_cover_everything_in_order)
{
    for (long n = 0; n < 40; n++)
        for (int tasks = 1; tasks < 7; tasks++) {
            long expect = 0;
            for (int t = 0; t < tasks; t++) {
                long lo, hi;
                dt_pool_slice(n, t, tasks, &lo, &hi);
                CHECK(lo == expect);
                CHECK(hi >= lo && hi - lo <= n / tasks + 1);
                expect = hi;
            }
            CHECK(expect == n);
        }
}

TEST(error_messages_carry_context)
{
    CHECK(dt_error(DT_ERR_FORMAT, "%s: offset %d: bad", "f.idx", 12) == DT_ERR_FORMAT);
    CHECK(strcmp(dt_last_error(), "f.idx: offset 12: bad") == 0);
    CHECK(dt_error_prefix(DT_ERR_INVALID, "--data") == DT_ERR_INVALID);
    CHECK(strcmp(dt_last_error(), "--data: f.idx: offset 12: bad") == 0);
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    dt_error(DT_ERR_IO, "%s", big);
    dt_error_prefix(DT_ERR_IO, "prefix");
    CHECK(strncmp(dt_last_error(), "prefix: xxx", 11) == 0);
    CHECK(strlen(dt_last_error()) < 1024);
    dt_error_clear();
    CHECK(dt_last_error()[0] == '\0');
    CHECK(strcmp(dt_status_name(DT_ERR_NUMERIC), "numeric error") == 0);
    /* The last message as an argument of the next, as a caller adding its context writes. */
    dt_error(DT_ERR_TIMEOUT, "could not connect to ps:0 within 3 s");
    dt_error(DT_ERR_TIMEOUT, "not back within %d s: %s", 3, dt_last_error());
    CHECK_MSG(strcmp(dt_last_error(), "not back within 3 s: could not connect to ps:0 within 3 s") ==
                  0,
              "got '%s'", dt_last_error());
}

/* Streaming copies and zeroing give memcpy's and memset's bytes at every alignment of the
 * destination and length around the vector width, and touch nothing outside. */
TEST(streaming_stores_equal_memcpy_and_memset)
{
    enum { GUARD = 8, MAX_N = 40, BIG = 100003 };
    float *src = malloc(BIG * sizeof *src), *dst = malloc((BIG + 2 * GUARD) * sizeof *dst);
    for (size_t i = 0; i < BIG; i++)
        src[i] = (float)i * 0.5f + 1.0f;
    int wrong = 0, cases = 0;
    for (int zero = 0; zero < 2; zero++)
        for (size_t off = 0; off < GUARD; off++)
            for (size_t n = 0; n <= MAX_N + 1; n++) {
                size_t len = n <= MAX_N ? n : BIG - GUARD; /* one large case per offset */
                for (size_t i = 0; i < len + 2 * GUARD; i++)
                    dst[i] = -7.0f;
                if (zero)
                    dt_stream_zero(dst + off, len);
                else
                    dt_stream_copy(dst + off, src, len);
                for (size_t i = 0; i < len + 2 * GUARD; i++) {
                    float want = i < off || i >= off + len ? -7.0f : zero ? 0.0f : src[i - off];
                    wrong += memcmp(&dst[i], &want, sizeof want) != 0;
                }
                cases++;
            }
    CHECK_MSG(wrong == 0, "%d wrong floats over %d cases", wrong, cases);
    free(src);
    free(dst);
}

/* Arrays grown together keep their contents; a size that cannot be had leaves them as they were
 * and says so. */
TEST(core_grow_together_keeps_contents)
{
    int64_t *ids = malloc(4 * sizeof *ids);
    float *w = malloc(4 * sizeof *w);
    uint16_t *h = malloc(4 * sizeof *h);
    for (int i = 0; ids && w && h && i < 4; i++)
        ids[i] = 1000 + i, w[i] = 0.5f * (float)i, h[i] = (uint16_t)(7 * i);
    CHECK(dt_grow_together((dt_grow_item[]){{&ids, sizeof *ids}, {&w, sizeof *w},
                                            {&h, sizeof *h}}, 3, 100000));
    for (int i = 0; i < 4; i++)
        CHECK(ids[i] == 1000 + i && w[i] == 0.5f * (float)i && h[i] == (uint16_t)(7 * i));
    ids[99999] = 1, w[99999] = 2.0f, h[99999] = 3; /* the new room is there */
    CHECK(!dt_grow_together((dt_grow_item[]){{&ids, sizeof *ids}, {&w, sizeof *w}}, 2,
                            SIZE_MAX / 4));
    CHECK(ids[3] == 1003 && w[3] == 1.5f && h[3] == 21);
    free(ids), free(w), free(h);
}

/* Buffers for the kernels start on a cache line, whatever their size. */
TEST(core_lines_floats_are_line_aligned)
{
    size_t sizes[] = {0, 1, 15, 16, 17, 1000, 1 << 20, (1 << 22) + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        float *p = dt_lines_floats(sizes[i]);
        CHECK_MSG(p && (uintptr_t)p % 64 == 0, "%zu floats at %p", sizes[i], (void *)p);
        if (p && sizes[i])
            p[sizes[i] - 1] = 1.0f;
        free(p);
    }
    CHECK(dt_lines_floats(SIZE_MAX / 2) == NULL && dt_lines_floats(SIZE_MAX / 4) == NULL);
}
