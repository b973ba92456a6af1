/* Datasets: TensorFlow's documented examples for shard, batch, repeat, take, skip, cache and
 * shuffle, and the behaviour of map, prefetch and the distributed-input helpers. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/dataset.h"
#include "test.h"

/* Collects up to cap rows' labels of one iteration; returns the count, -1 on an error. */
static int collect(dt_dataset *ds, float *vals, int cap, int *n_elems)
{
    int n = 0, elems = 0;
    for (;;) {
        dt_elem *e;
        dt_status st = dt_dataset_next(ds, &e);
        if (st == DT_END)
            break;
        if (st) {
            test_fail(__FILE__, __LINE__, "next failed: %s", dt_last_error());
            return -1;
        }
        for (int r = 0; r < e->n && n < cap; r++)
            vals[n++] = e->labels[r];
        elems++;
        dt_elem_free(e);
    }
    if (n_elems)
        *n_elems = elems;
    return n;
}

static void check_seq(const float *got, int n, const float *want, int n_want, const char *what)
{
    CHECK_MSG(n == n_want, "%s: %d values, expected %d", what, n, n_want);
    for (int i = 0; i < n && i < n_want; i++)
        CHECK_MSG(got[i] == want[i], "%s: value %d is %g, expected %g", what, i, got[i], want[i]);
}

static dt_dataset *range(int64_t n)
{
    dt_dataset *ds = NULL;
    CHECK_OK(dt_dataset_range(0, n, 1, &ds));
    return ds;
}

TEST(dataset_shard_matches_tensorflow)
{
    dt_dataset *ds;
    float v[16];
    CHECK_OK(dt_dataset_shard(range(10), 3, 0, &ds));
    check_seq(v, collect(ds, v, 16, NULL), (float[]){0, 3, 6, 9}, 4, "range(10).shard(3, 0)");
    dt_dataset_destroy(ds);
    CHECK_OK(dt_dataset_shard(range(10), 3, 2, &ds));
    check_seq(v, collect(ds, v, 16, NULL), (float[]){2, 5, 8}, 3, "range(10).shard(3, 2)");
    CHECK_OK(dt_dataset_reset(ds));
    check_seq(v, collect(ds, v, 16, NULL), (float[]){2, 5, 8}, 3, "second iteration");
    dt_dataset_destroy(ds);
    CHECK_ERR(dt_dataset_shard(range(10), 3, 3, &ds), DT_ERR_INVALID, "index 3 is not in [0, 3)");
}

TEST(dataset_batch_matches_tensorflow)
{
    dt_dataset *ds;
    float v[16];
    int elems;
    CHECK_OK(dt_dataset_batch(range(8), 3, true, &ds));
    check_seq(v, collect(ds, v, 16, &elems), (float[]){0, 1, 2, 3, 4, 5}, 6, "range(8).batch(3, True)");
    CHECK(elems == 2);
    dt_dataset_destroy(ds);
    CHECK_OK(dt_dataset_batch(range(8), 3, false, &ds));
    dt_elem *e;
    int sizes[3] = {0};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(dt_dataset_next(ds, &e));
        sizes[i] = e->n;
        CHECK(e->n_dense == 1 && e->dense[0] == 3.0f * i);
        dt_elem_free(e);
    }
    CHECK(sizes[0] == 3 && sizes[1] == 3 && sizes[2] == 2);
    CHECK(dt_dataset_next(ds, &e) == DT_END);
    CHECK(dt_dataset_next(ds, &e) == DT_END);
    dt_dataset_destroy(ds);
}

TEST(dataset_repeat_take_skip_match_tensorflow)
{
    dt_dataset *ds;
    float v[32];
    CHECK_OK(dt_dataset_repeat(range(3), 2, &ds));
    check_seq(v, collect(ds, v, 32, NULL), (float[]){0, 1, 2, 0, 1, 2}, 6, "range(3).repeat(2)");
    dt_dataset_destroy(ds);
    dt_dataset *inner;
    CHECK_OK(dt_dataset_repeat(range(3), -1, &inner));
    CHECK_OK(dt_dataset_take(inner, 7, &ds));
    check_seq(v, collect(ds, v, 32, NULL), (float[]){0, 1, 2, 0, 1, 2, 0}, 7, "repeat().take(7)");
    dt_dataset_destroy(ds);
    CHECK_OK(dt_dataset_skip(range(10), 7, &ds));
    check_seq(v, collect(ds, v, 32, NULL), (float[]){7, 8, 9}, 3, "range(10).skip(7)");
    CHECK_OK(dt_dataset_reset(ds));
    check_seq(v, collect(ds, v, 32, NULL), (float[]){7, 8, 9}, 3, "skip, second iteration");
    dt_dataset_destroy(ds);
    CHECK_OK(dt_dataset_take(range(10), -1, &ds));
    CHECK(collect(ds, v, 32, NULL) == 10);
    dt_dataset_destroy(ds);
    /* An empty dataset repeated forever ends instead of spinning. */
    CHECK_OK(dt_dataset_repeat(range(0), -1, &ds));
    CHECK(collect(ds, v, 32, NULL) == 0);
    dt_dataset_destroy(ds);
}

TEST(dataset_shuffle_semantics)
{
    enum { N = 500 };
    float a[N], b[N];
    dt_dataset *ds;
    /* A buffer of 1 keeps the order, as in tf.data. */
    CHECK_OK(dt_dataset_shuffle(range(20), 1, 7, true, &ds));
    float ident[20];
    for (int i = 0; i < 20; i++)
        ident[i] = (float)i;
    check_seq(a, collect(ds, a, N, NULL), ident, 20, "shuffle(1)");
    dt_dataset_destroy(ds);
    /* A buffer of k: the element at position i came from the first i + k inputs. */
    CHECK_OK(dt_dataset_shuffle(range(N), 10, 7, true, &ds));
    CHECK(collect(ds, a, N, NULL) == N);
    int seen[N] = {0}, moved = 0;
    for (int i = 0; i < N; i++) {
        CHECK_MSG(a[i] < i + 10, "position %d holds %g", i, a[i]);
        seen[(int)a[i] % N]++;
        moved += a[i] != i;
    }
    for (int i = 0; i < N; i++)
        CHECK(seen[i] == 1);
    CHECK(moved > N / 2);
    /* reshuffle_each_iteration: a new order each iteration, the same for the same seed. */
    CHECK_OK(dt_dataset_reset(ds));
    CHECK(collect(ds, b, N, NULL) == N);
    CHECK(memcmp(a, b, sizeof a) != 0);
    dt_dataset_destroy(ds);
    CHECK_OK(dt_dataset_shuffle(range(N), 10, 7, true, &ds));
    CHECK(collect(ds, b, N, NULL) == N);
    CHECK(memcmp(a, b, sizeof a) == 0);
    dt_dataset_destroy(ds);
    CHECK_OK(dt_dataset_shuffle(range(N), N, 7, false, &ds));
    CHECK(collect(ds, a, N, NULL) == N);
    CHECK_OK(dt_dataset_reset(ds));
    CHECK(collect(ds, b, N, NULL) == N);
    CHECK(memcmp(a, b, sizeof a) == 0);
    dt_dataset_destroy(ds);
}

/* A map that counts its calls, doubles labels and fails on label 13. */
struct probe {
    int calls;
};

static dt_status double_label(void *ctx, dt_elem *in, dt_elem **out)
{
    __atomic_add_fetch(&((struct probe *)ctx)->calls, 1, __ATOMIC_RELAXED);
    if (in->labels[0] == 13.0f) {
        dt_elem_free(in);
        return dt_error(DT_ERR_FORMAT, "element 13 is unlucky");
    }
    for (int r = 0; r < in->n; r++)
        in->labels[r] *= 2.0f;
    *out = in;
    return DT_OK;
}

TEST(dataset_map_keeps_order_and_reports_errors_from_worker_threads)
{
    struct probe p = {0};
    dt_dataset *ds;
    float v[64];
    CHECK_OK(dt_dataset_map(range(10), double_label, &p, 4, &ds));
    check_seq(v, collect(ds, v, 64, NULL), (float[]){0, 2, 4, 6, 8, 10, 12, 14, 16, 18}, 10, "map x2");
    CHECK(p.calls == 10);
    dt_dataset_destroy(ds);
    CHECK_OK(dt_dataset_map(range(20), double_label, &p, 3, &ds));
    dt_elem *e;
    for (int i = 0; i < 13; i++) {
        CHECK_OK(dt_dataset_next(ds, &e));
        CHECK(e && e->labels[0] == 2.0f * i);
        dt_elem_free(e);
    }
    dt_error_clear();
    CHECK_ERR(dt_dataset_next(ds, &e), DT_ERR_FORMAT, "element 13 is unlucky");
    CHECK_OK(dt_dataset_next(ds, &e));
    CHECK(e && e->labels[0] == 28.0f);
    dt_elem_free(e);
    dt_dataset_destroy(ds);
}

TEST(dataset_memory_cache_serves_later_iterations)
{
    struct probe p = {0};
    dt_dataset *mapped, *ds;
    float v[32];
    CHECK_OK(dt_dataset_map(range(5), double_label, &p, 1, &mapped));
    CHECK_OK(dt_dataset_cache(mapped, NULL, &ds));
    /* A partial first iteration is not cached (TensorFlow discards it). */
    dt_elem *e;
    CHECK_OK(dt_dataset_next(ds, &e));
    dt_elem_free(e);
    CHECK_OK(dt_dataset_reset(ds));
    check_seq(v, collect(ds, v, 32, NULL), (float[]){0, 2, 4, 6, 8}, 5, "first full iteration");
    CHECK(p.calls == 6);
    CHECK_OK(dt_dataset_reset(ds));
    check_seq(v, collect(ds, v, 32, NULL), (float[]){0, 2, 4, 6, 8}, 5, "from the cache");
    CHECK(p.calls == 6);
    dt_dataset_destroy(ds);
}

TEST(dataset_file_cache_persists_and_checks_itself)
{
    char path[512];
    snprintf(path, sizeof path, "%s/cache.bin", test_tmpdir());
    struct probe p = {0};
    dt_dataset *mapped, *ds;
    float v[32];
    CHECK_OK(dt_dataset_map(range(6), double_label, &p, 1, &mapped));
    CHECK_OK(dt_dataset_batch(mapped, 4, false, &mapped));
    CHECK_OK(dt_dataset_cache(mapped, path, &ds));
    check_seq(v, collect(ds, v, 32, NULL), (float[]){0, 2, 4, 6, 8, 10}, 6, "filling");
    CHECK_OK(dt_dataset_reset(ds));
    check_seq(v, collect(ds, v, 32, NULL), (float[]){0, 2, 4, 6, 8, 10}, 6, "from the file");
    CHECK(p.calls == 6);
    dt_dataset_destroy(ds);
    /* Another pipeline finds the finished cache and never calls its input. */
    CHECK_OK(dt_dataset_map(range(6), double_label, &p, 1, &mapped));
    CHECK_OK(dt_dataset_cache(mapped, path, &ds));
    check_seq(v, collect(ds, v, 32, NULL), (float[]){0, 2, 4, 6, 8, 10}, 6, "second run");
    CHECK(p.calls == 6);
    dt_dataset_destroy(ds);
    /* A flipped byte is caught by the element's CRC, with the file and the offset. */
    FILE *f = fopen(path, "r+b");
    fseek(f, 40, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 40, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
    CHECK_OK(dt_dataset_cache(range(3), path, &ds));
    dt_elem *e;
    CHECK_ERR(dt_dataset_next(ds, &e), DT_ERR_FORMAT, "cache.bin: offset 12: element CRC mismatch");
    dt_dataset_destroy(ds);
    f = fopen(path, "wb");
    fputs("not a cache", f);
    fclose(f);
    CHECK_ERR(dt_dataset_cache(range(3), path, &ds), DT_ERR_FORMAT, "cache.bin: offset 0: not a dtrain cache file");
}

TEST(dataset_prefetch_keeps_order_resets_and_carries_errors)
{
    struct probe p = {0};
    dt_dataset *mapped, *ds;
    float v[64];
    CHECK_OK(dt_dataset_prefetch(range(40), 3, &ds));
    float want[40];
    for (int i = 0; i < 40; i++)
        want[i] = (float)i;
    check_seq(v, collect(ds, v, 64, NULL), want, 40, "prefetch");
    CHECK_OK(dt_dataset_reset(ds));
    dt_elem *e;
    CHECK_OK(dt_dataset_next(ds, &e)); /* reset in the middle of an iteration */
    dt_elem_free(e);
    CHECK_OK(dt_dataset_reset(ds));
    check_seq(v, collect(ds, v, 64, NULL), want, 40, "prefetch after resets");
    dt_dataset_destroy(ds);
    CHECK_OK(dt_dataset_map(range(20), double_label, &p, 1, &mapped));
    CHECK_OK(dt_dataset_prefetch(mapped, 4, &ds));
    for (int i = 0; i < 13; i++) {
        CHECK_OK(dt_dataset_next(ds, &e));
        dt_elem_free(e);
    }
    dt_error_clear();
    CHECK_ERR(dt_dataset_next(ds, &e), DT_ERR_FORMAT, "element 13 is unlucky");
    CHECK_ERR(dt_dataset_next(ds, &e), DT_ERR_FORMAT, "element 13 is unlucky");
    dt_dataset_destroy(ds);
    /* Destroyed while its producer waits on a full queue: no hang, no leak. */
    CHECK_OK(dt_dataset_prefetch(range(1000), 2, &ds));
    CHECK_OK(dt_dataset_next(ds, &e));
    dt_elem_free(e);
    dt_dataset_destroy(ds);
}

/* A source reading 4-byte labels from a pipe: its next() blocks while nothing is written. */
struct pipe_src {
    int fd;
};

static dt_status pipe_next(dt_dataset *ds, dt_elem **out)
{
    struct pipe_src *p = ds->state;
    float label;
    if (read(p->fd, &label, sizeof label) != (ssize_t)sizeof label)
        return DT_END;
    dt_elem *e = dt_elem_alloc(1, 0, 0, 0);
    if (!e)
        return DT_ERR_NOMEM;
    e->labels[0] = label;
    *out = e;
    return DT_OK;
}

static dt_status pipe_reset(dt_dataset *ds)
{
    (void)ds;
    return DT_OK;
}

static void pipe_destroy(dt_dataset *ds)
{
    struct pipe_src *p = ds->state;
    close(p->fd);
    free(p);
}

static const dt_dataset_ops pipe_ops = {"pipe", pipe_next, pipe_reset, pipe_destroy};

static double now_secs(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

TEST(dataset_prefetch_names_a_stalled_input_and_never_waits_for_it)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    struct pipe_src *p = calloc(1, sizeof *p);
    p->fd = fds[0];
    dt_dataset *src, *ds;
    CHECK_OK(dt_dataset_create(&pipe_ops, NULL, p, &src));
    const char *reading = "/data/feed.fifo";
    dt_prefetch_watch watch = {0.3, &reading, "libsvm:/data/*.fifo"};
    CHECK_OK(dt_dataset_prefetch_watched(src, 2, &watch, &ds));
    float labels[2] = {7, 8};
    CHECK(write(fds[1], labels, sizeof labels) == (ssize_t)sizeof labels);
    dt_elem *e;
    for (int i = 0; i < 2; i++) {
        CHECK_OK(dt_dataset_next(ds, &e));
        CHECK(e->labels[0] == labels[i]);
        dt_elem_free(e);
    }
    /* The writer stops: the wait ends at the deadline, naming the file being read. */
    double t0 = now_secs();
    CHECK_ERR(dt_dataset_next(ds, &e), DT_ERR_IO, "/data/feed.fifo: no data for 0.3 s (input_timeout): the input has stalled");
    double waited = now_secs() - t0;
    CHECK_MSG(waited >= 0.25 && waited < 3, "waited %.2f s for a 0.3 s deadline", waited);
    CHECK_ERR(dt_dataset_next(ds, &e), DT_ERR_IO, "input_timeout");
    /* A stalled input cannot start again, and is destroyed without waiting for its read. */
    CHECK_ERR(dt_dataset_reset(ds), DT_ERR_IO, "/data/feed.fifo");
    t0 = now_secs();
    dt_dataset_destroy(ds);
    CHECK(now_secs() - t0 < 1);
    /* The read returns: the producer finds itself alone and frees the pipeline. */
    CHECK(write(fds[1], labels, sizeof labels[0]) == (ssize_t)sizeof labels[0]);
    usleep(200 * 1000);
    close(fds[1]);
}

TEST(dataset_recommended_pipeline_order)
{
    /* source -> cache -> shuffle -> batch -> map -> repeat -> prefetch, as the guides order it:
     * every iteration holds each element exactly once. */
    struct probe p = {0};
    dt_dataset *ds;
    CHECK_OK(dt_dataset_cache(range(100), NULL, &ds));
    CHECK_OK(dt_dataset_shuffle(ds, 16, 3, true, &ds));
    CHECK_OK(dt_dataset_batch(ds, 8, false, &ds));
    CHECK_OK(dt_dataset_map(ds, double_label, &p, 2, &ds));
    CHECK_OK(dt_dataset_repeat(ds, 2, &ds));
    CHECK_OK(dt_dataset_prefetch(ds, 2, &ds));
    float v[256];
    int elems;
    CHECK(collect(ds, v, 256, &elems) == 200);
    CHECK(elems == 26); /* 13 batches per pass: 12 of 8 and one of 4 */
    int count[100] = {0};
    for (int i = 0; i < 200; i++) {
        int k = (int)(v[i] / 2.0f);
        CHECK(k >= 0 && k < 100 && v[i] == 2.0f * k);
        count[k >= 0 && k < 100 ? k : 0]++;
    }
    for (int k = 0; k < 100; k++)
        CHECK_MSG(count[k] == 2, "element %d seen %d times", k, count[k]);
    dt_dataset_destroy(ds);
}

TEST(autoshard_and_input_context)
{
    const char *why;
    CHECK(dt_autoshard_resolve(DT_AUTOSHARD_AUTO, 4, 2, &why) == DT_AUTOSHARD_FILE && !*why);
    CHECK(dt_autoshard_resolve(DT_AUTOSHARD_AUTO, 1, 2, &why) == DT_AUTOSHARD_DATA);
    CHECK(strstr(why, "fewer files than workers") != NULL);
    CHECK(dt_autoshard_resolve(DT_AUTOSHARD_FILE, 1, 3, &why) == DT_AUTOSHARD_DATA);
    CHECK(strstr(why, "TensorFlow would stop with an error") != NULL);
    CHECK(dt_autoshard_resolve(DT_AUTOSHARD_OFF, 8, 2, &why) == DT_AUTOSHARD_OFF);
    CHECK(dt_autoshard_resolve(DT_AUTOSHARD_DATA, 8, 2, &why) == DT_AUTOSHARD_DATA);
    CHECK(dt_autoshard_resolve(DT_AUTOSHARD_FILE, 8, 1, &why) == DT_AUTOSHARD_OFF);
    dt_autoshard_policy p;
    CHECK_OK(dt_autoshard_parse("DATA", &p));
    CHECK(p == DT_AUTOSHARD_DATA);
    CHECK_ERR(dt_autoshard_parse("hint", &p), DT_ERR_INVALID, "unknown auto-shard policy 'hint'");
    dt_input_context c = {2, 1, 4};
    int64_t per;
    CHECK_OK(dt_input_context_per_replica_batch(&c, 64, &per));
    CHECK(per == 16);
    CHECK_ERR(dt_input_context_per_replica_batch(&c, 66, &per), DT_ERR_INVALID,
              "global batch size 66 is not divisible by the 4 replicas");
}

static dt_status drop_odd(void *ctx, dt_elem *in, dt_elem **out)
{
    (void)ctx;
    if ((int64_t)in->labels[0] % 2) {
        dt_elem_free(in); /* dropped: OK with no output */
        return DT_OK;
    }
    *out = in;
    return DT_OK;
}

TEST(dataset_review_regressions)
{
    dt_dataset *ds;
    dt_elem *e;
    float v[16];
    /* A map may drop elements. */
    CHECK_OK(dt_dataset_map(range(7), drop_odd, NULL, 3, &ds));
    check_seq(v, collect(ds, v, 16, NULL), (float[]){0, 2, 4, 6}, 4, "map dropping odd elements");
    dt_dataset_destroy(ds);
    /* An empty first pass makes an empty cache, in memory and on file; the end stays the end. */
    char path[512];
    snprintf(path, sizeof path, "%s/empty.cache", test_tmpdir());
    for (int file = 0; file < 2; file++) {
        CHECK_OK(dt_dataset_cache(range(0), file ? path : NULL, &ds));
        CHECK(dt_dataset_next(ds, &e) == DT_END);
        CHECK(dt_dataset_next(ds, &e) == DT_END);
        CHECK_OK(dt_dataset_reset(ds));
        CHECK(dt_dataset_next(ds, &e) == DT_END);
        dt_dataset_destroy(ds);
    }
    CHECK_OK(dt_dataset_cache(range(3), NULL, &ds));
    CHECK(collect(ds, v, 16, NULL) == 3);
    CHECK(dt_dataset_next(ds, &e) == DT_END); /* not a replay of the cache */
    dt_dataset_destroy(ds);
    /* A reset before anything was read changes nothing: the same order as a fresh dataset. */
    float a[50], b[50];
    CHECK_OK(dt_dataset_shuffle(range(50), 50, 3, true, &ds));
    CHECK_OK(dt_dataset_reset(ds));
    CHECK(collect(ds, a, 50, NULL) == 50);
    dt_dataset_destroy(ds);
    CHECK_OK(dt_dataset_shuffle(range(50), 50, 3, true, &ds));
    CHECK(collect(ds, b, 50, NULL) == 50);
    dt_dataset_destroy(ds);
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* A range ending at INT64's top does not overflow. */
    CHECK_OK(dt_dataset_range(INT64_MAX - 2, INT64_MAX, 1, &ds));
    CHECK(collect(ds, v, 16, NULL) == 2);
    dt_dataset_destroy(ds);
}
