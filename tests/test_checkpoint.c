/* Checkpoints: safetensors files round-trip exactly, have the documented layout, are read by an
 * independent reader (python + numpy), and every kind of corruption is a format error naming the
 * file; the manager keeps TF's lists and files; open_latest falls back past broken files. */
#include <dirent.h>
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/checkpoint.h"
#include "../src/core/crc32c.h"
#include "test.h"

/* ---- helpers ---- */

/* Parameters (three views) and a mirrored optimizer slot arena "adam/m/...", filled with
 * distinct values, special ones included, so any misplaced or altered byte shows. */
static void make_arenas(dt_arena *p, dt_arena *s, float base)
{
    dt_arena_init(p);
    dt_arena_init(s);
    CHECK_OK(dt_arena_add(p, "conv2d/kernel", 4, (int[]){3, 3, 1, 4}, NULL));
    CHECK_OK(dt_arena_add(p, "conv2d/bias", 1, (int[]){4}, NULL));
    CHECK_OK(dt_arena_add(p, "dense/kernel", 2, (int[]){5, 3}, NULL));
    CHECK_OK(dt_arena_commit(p));
    CHECK_OK(dt_arena_mirror(s, p, "adam/m/"));
    if (!p->data || !s->data)
        return;
    for (int a = 0; a < 2; a++) {
        dt_arena *ar = a ? s : p;
        for (int v = 0; v < ar->n_views; v++) {
            float *x = dt_arena_view_data(ar, v);
            for (size_t i = 0; i < ar->views[v].n_elems; i++)
                x[i] = base + (float)(a * 1000 + v * 100) + (float)i * 0.37f - 3.0f;
        }
    }
    float *k = dt_arena_view_data(p, 0);
    k[0] = -0.0f, k[1] = 1e-40f, k[2] = FLT_MAX, k[3] = -FLT_MIN;
}

/* One small arena: a [2] and b [3], for files whose every byte is looped over. */
static void make_small(dt_arena *a)
{
    dt_arena_init(a);
    CHECK_OK(dt_arena_add(a, "a", 1, (int[]){2}, NULL));
    CHECK_OK(dt_arena_add(a, "b", 1, (int[]){3}, NULL));
    CHECK_OK(dt_arena_commit(a));
    if (a->data)
        for (size_t i = 0; i < a->n_elems; i++)
            a->data[i] = (float)i + 0.5f;
}

static int views_equal(const dt_arena *a, const dt_arena *b)
{
    if (a->n_views != b->n_views)
        return 0;
    for (int i = 0; i < a->n_views; i++)
        if (a->views[i].n_elems != b->views[i].n_elems ||
            memcmp(dt_arena_view_data(a, i), dt_arena_view_data(b, i),
                   a->views[i].n_elems * sizeof(float)) != 0)
            return 0;
    return 1;
}

static uint8_t *read_all(const char *path, size_t *n)
{
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        rewind(f);
        buf = malloc(size > 0 ? (size_t)size : 1);
        if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
            free(buf);
            buf = NULL;
        } else if (buf) {
            *n = (size_t)size;
        }
    }
    fclose(f);
    return buf;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* A file of an 8-byte length, that many header bytes and then data, however inconsistent. */
static void write_raw(const char *path, uint64_t header_len, const char *header, const void *data,
                      size_t data_n)
{
    size_t hn = strlen(header);
    uint8_t *buf = calloc(1, 8 + hn + data_n);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(header_len >> (8 * i));
    memcpy(buf + 8, header, hn);
    if (data_n)
        memcpy(buf + 8 + hn, data, data_n);
    test_write_file(path, buf, 8 + hn + data_n);
    free(buf);
}

/* A consistent-length file: header_len is the JSON's own length. */
static void write_json(const char *path, const char *json, size_t data_n)
{
    uint8_t data[64] = {0};
    write_raw(path, strlen(json), json, data, data_n);
}

/* dt_ckpt_open(path) fails with DT_ERR_FORMAT, a message naming path and containing needle, and
 * no checkpoint; what names the case in a failure. */
static void expect_format(const char *path, const char *needle, const char *what)
{
    dt_ckpt *c = (dt_ckpt *)1;
    dt_status st = dt_ckpt_open(path, &c);
    CHECK_MSG(st == DT_ERR_FORMAT, "%s: status %d (%s)", what, st, dt_last_error());
    CHECK_MSG(strstr(dt_last_error(), path) != NULL, "%s: message '%s' lacks the path", what,
              dt_last_error());
    CHECK_MSG(strstr(dt_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what,
              dt_last_error(), needle);
    CHECK_MSG(c == NULL, "%s: *out not NULL on failure", what);
    if (st == DT_OK)
        dt_ckpt_close(c);
}

/* The sorted names in dir, one per line. */
static void list_dir(const char *dir, char *out, size_t cap)
{
    char names[64][256];
    int n = 0;
    out[0] = '\0';
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d)) && n < 64;)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    size_t used = 0;
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(out + used, cap - used, "%s\n", names[i]);
}

static double now_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- files ---- */

TEST(checkpoint_round_trip_of_two_arenas)
{
    dt_arena p, s, p2, s2;
    make_arenas(&p, &s, 0.0f);
    const char *path = test_path("rt.safetensors");
    const dt_arena *arenas[] = {&p, &s};
    dt_ckpt_meta meta[] = {{"global_step", "938"}, {"model", "cnn \"q\"\n\xc3\xa9"}};
    CHECK_OK(dt_ckpt_save(path, arenas, 2, meta, 2));
    dt_ckpt *c = NULL;
    CHECK_OK(dt_ckpt_open(path, &c));
    if (!c)
        goto done;
    CHECK(strcmp(dt_ckpt_path(c), path) == 0);
    CHECK(dt_ckpt_n_tensors(c) == 6);
    for (int i = 0; i < 6 && i < dt_ckpt_n_tensors(c); i++) {
        const dt_arena *a = i < 3 ? &p : &s;
        const dt_view *v = &a->views[i % 3];
        const dt_ckpt_tensor *t = dt_ckpt_tensor_at(c, i);
        CHECK_MSG(strcmp(t->name, v->name) == 0, "tensor %d is '%s', expected '%s'", i, t->name,
                  v->name);
        CHECK(strcmp(t->dtype, "F32") == 0);
        CHECK(t->n_dims == v->n_dims);
        for (int d = 0; d < v->n_dims; d++)
            CHECK(t->dims[d] == v->dims[d]);
        CHECK(t->n_bytes == v->n_elems * 4);
        CHECK(memcmp(t->data, dt_arena_view_data(a, i % 3), t->n_bytes) == 0);
        CHECK(dt_ckpt_find(c, v->name) == t);
    }
    CHECK(dt_ckpt_find(c, "adam/m/conv2d/kernel") != NULL);
    CHECK(dt_ckpt_find(c, "adam/v/conv2d/kernel") == NULL);
    CHECK(dt_ckpt_find(c, "__metadata__") == NULL);

    static const char *const keys[] = {"global_step", "model", "format", "checksum"};
    CHECK(dt_ckpt_n_meta(c) == 4);
    for (int i = 0; i < 4 && i < dt_ckpt_n_meta(c); i++) {
        const char *k, *v;
        dt_ckpt_meta_at(c, i, &k, &v);
        CHECK_MSG(strcmp(k, keys[i]) == 0, "metadata %d is '%s', expected '%s'", i, k, keys[i]);
    }
    CHECK(dt_ckpt_meta_get(c, "global_step") && strcmp(dt_ckpt_meta_get(c, "global_step"), "938") == 0);
    CHECK(dt_ckpt_meta_get(c, "model") && strcmp(dt_ckpt_meta_get(c, "model"), meta[1].value) == 0);
    CHECK(dt_ckpt_meta_get(c, "format") && strcmp(dt_ckpt_meta_get(c, "format"), "dtrain-ckpt-1") == 0);
    CHECK(dt_ckpt_meta_get(c, "nope") == NULL);
    uint32_t crc = dt_arena_checksum(&p);
    for (int i = 0; i < s.n_views; i++)
        crc = dt_crc32c_extend(crc, dt_arena_view_data(&s, i), s.views[i].n_elems * 4);
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", crc);
    CHECK_MSG(dt_ckpt_meta_get(c, "checksum") && strcmp(dt_ckpt_meta_get(c, "checksum"), hex) == 0,
              "checksum %s, expected %s", dt_ckpt_meta_get(c, "checksum"), hex);

    /* Restored into fresh arenas of the same layout: bit for bit the saved values. */
    make_arenas(&p2, &s2, 50.0f);
    CHECK(!views_equal(&p, &p2));
    CHECK_OK(dt_ckpt_restore_arena(c, &p2));
    CHECK_OK(dt_ckpt_restore_arena(c, &s2));
    CHECK(views_equal(&p, &p2));
    CHECK(views_equal(&s, &s2));
    dt_arena_free(&p2);
    dt_arena_free(&s2);
    dt_ckpt_close(c);
done:
    dt_arena_free(&p);
    dt_arena_free(&s);
}

TEST(checkpoint_file_layout_is_safetensors)
{
    dt_arena p, s;
    make_arenas(&p, &s, 1.0f);
    const char *path = test_path("layout.safetensors");
    const dt_arena *arenas[] = {&p, &s};
    CHECK_OK(dt_ckpt_save(path, arenas, 2, NULL, 0));
    size_t n = 0;
    uint8_t *buf = read_all(path, &n);
    CHECK(buf != NULL && n > 8);
    if (!buf || n <= 8)
        goto done;
    uint64_t hn = le64(buf);
    size_t payload = (dt_arena_payload_elems(&p) + dt_arena_payload_elems(&s)) * 4;
    CHECK_MSG(8 + hn + payload == n, "8 + %llu + %zu != file size %zu", (unsigned long long)hn,
              payload, n);
    CHECK_MSG((8 + hn) % 8 == 0, "data section starts at %llu", (unsigned long long)(8 + hn));
    if (8 + hn + payload != n)
        goto done;
    CHECK(buf[8] == '{');
    /* The JSON closes with '}' and only spaces pad it. */
    size_t last = 8 + hn - 1;
    while (last > 8 && buf[last] == ' ')
        last--;
    CHECK(buf[last] == '}');
    CHECK(8 + hn - 1 - last < 8);
    CHECK(memchr(buf + 8, '\n', hn) == NULL);
    CHECK(memmem(buf + 8, hn, "\"format\":\"dtrain-ckpt-1\"", 24) != NULL);
    static const char first[] =
        "{\"conv2d/kernel\":{\"dtype\":\"F32\",\"shape\":[3,3,1,4],\"data_offsets\":[0,144]},"
        "\"conv2d/bias\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[144,160]},";
    CHECK_MSG(hn >= sizeof first - 1 && memcmp(buf + 8, first, sizeof first - 1) == 0,
              "header: %.*s", (int)hn, (const char *)buf + 8);
    /* The data section is the views back to back, padding excluded, in arena order. */
    size_t off = 8 + hn;
    for (int a = 0; a < 2; a++) {
        const dt_arena *ar = a ? &s : &p;
        for (int v = 0; v < ar->n_views; v++) {
            size_t nb = ar->views[v].n_elems * 4;
            CHECK_MSG(memcmp(buf + off, dt_arena_view_data(ar, v), nb) == 0, "view %s",
                      ar->views[v].name);
            off += nb;
        }
    }
    CHECK(off == n);
done:
    free(buf);
    dt_arena_free(&p);
    dt_arena_free(&s);
}

TEST(checkpoint_save_refuses_reserved_metadata_and_bad_arguments)
{
    dt_arena a;
    make_small(&a);
    const dt_arena *arenas[] = {&a, &a};
    const char *path = test_path("reserved.safetensors");
    CHECK_ERR(dt_ckpt_save(path, arenas, 1, &(dt_ckpt_meta){"format", "x"}, 1), DT_ERR_INVALID,
              "'format'");
    CHECK_ERR(dt_ckpt_save(path, arenas, 1, &(dt_ckpt_meta){"checksum", "0"}, 1), DT_ERR_INVALID,
              "'checksum'");
    CHECK_ERR(dt_ckpt_save(path, arenas, 1, (dt_ckpt_meta[]){{"k", "1"}, {"k", "2"}}, 2),
              DT_ERR_INVALID, "twice");
    /* The same arena twice would give every tensor name twice. */
    CHECK_ERR(dt_ckpt_save(path, arenas, 2, NULL, 0), DT_ERR_INVALID, "'a'");
    CHECK(access(path, F_OK) != 0);
    char listing[4096];
    list_dir(test_tmpdir(), listing, sizeof listing);
    CHECK_MSG(strstr(listing, ".tmp.") == NULL, "temporary files left:\n%s", listing);
    dt_arena_free(&a);
}

TEST(checkpoint_save_failures_are_io_errors_and_leave_no_temp_file)
{
    dt_arena a;
    make_small(&a);
    const dt_arena *arenas[] = {&a};
    char path[600];
    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", test_tmpdir());
    CHECK_ERR(dt_ckpt_save(path, arenas, 1, NULL, 0), DT_ERR_IO, "no/such/dir/x.safetensors");
    CHECK_ERR(dt_ckpt_save(path, arenas, 1, NULL, 0), DT_ERR_IO, "No such file");
    /* The target is a directory: the temporary file is written, the rename fails, and the
     * temporary file is removed. */
    const char *dir = test_path("save_fail");
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/target", dir);
    mkdir(path, 0755);
    CHECK_ERR(dt_ckpt_save(path, arenas, 1, NULL, 0), DT_ERR_IO, "rename");
    char listing[4096];
    list_dir(dir, listing, sizeof listing);
    CHECK_MSG(strcmp(listing, "target\n") == 0, "left in %s:\n%s", dir, listing);
    dt_arena_free(&a);
}

TEST(checkpoint_every_truncation_is_a_format_error)
{
    dt_arena a;
    make_small(&a);
    const dt_arena *arenas[] = {&a};
    const char *path = test_path("whole.safetensors"), *cut = test_path("cut.safetensors");
    CHECK_OK(dt_ckpt_save(path, arenas, 1, &(dt_ckpt_meta){"k", "v"}, 1));
    size_t n = 0;
    uint8_t *buf = read_all(path, &n);
    CHECK(buf && n > 8 + 20);
    int bad = 0;
    for (size_t len = 0; buf && len < n; len++) {
        test_write_file(cut, buf, len);
        dt_ckpt *c = NULL;
        dt_status st = dt_ckpt_open(cut, &c);
        if ((st != DT_ERR_FORMAT || !strstr(dt_last_error(), cut) || c) && bad++ < 5)
            test_fail(__FILE__, __LINE__, "prefix of %zu/%zu bytes: status %d, '%s'", len, n, st,
                      dt_last_error());
        dt_ckpt_close(c);
    }
    CHECK(bad == 0);
    /* The whole file still opens: the loop's failures come from the cuts. */
    dt_ckpt *c = NULL;
    CHECK_OK(dt_ckpt_open(path, &c));
    dt_ckpt_close(c);
    free(buf);
    dt_arena_free(&a);
}

TEST(checkpoint_corrupt_headers_are_format_errors)
{
    const char *path = test_path("corrupt.safetensors");
    static const struct {
        const char *json;
        size_t data_n;
        const char *needle;
    } cases[] = {
        {"{\"a\": ", 0, "invalid JSON"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}", 4, "invalid JSON"},
        {"[1, 2]", 0, "'{'"},
        {"", 0, "'{'"},
        {"{} x", 0, "garbage"},
        {"{\"a\": 1}", 0, "not an object"},
        {"{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "dtype"},
        {"{\"a\": {\"dtype\": \"F8\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "unknown dtype 'F8'"},
        {"{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4, "shape"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, "shape[0]"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4, "shape[0]"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4,
         "9 dimensions"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296], "
         "\"data_offsets\": [0, 4]}}", 4, "overflows"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "data_offsets"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", 4, "data_offsets"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", 4, "data_offsets"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 4, "data_offsets"},
        /* shape and size disagree */
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8, "needs 3 elements"},
        {"{\"a\": {\"dtype\": \"F64\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8, "hold 8 bytes"},
        /* tiling: overlap, gap, beyond the data, data not covered */
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
         " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12, "overlap"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
         " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}", 12, "gap"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 8, "cover 16 bytes"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 8, "cover 4 bytes"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
         " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8, "twice"},
        /* metadata */
        {"{\"__metadata__\": {\"x\": 1}}", 0, "__metadata__.x"},
        {"{\"__metadata__\": [\"x\"]}", 0, "__metadata__"},
        {"{\"__metadata__\": {\"checksum\": \"xyz\"}}", 0, "not 8 hex digits"},
        {"{\"__metadata__\": {\"checksum\": \"0x123456\"}}", 0, "not 8 hex digits"},
        {"{\"__metadata__\": {\"checksum\": \"00000001\"}}", 0, "checksum mismatch: header says "
                                                                 "00000001, data gives 00000000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_json(path, cases[i].json, cases[i].data_n);
        char what[64];
        snprintf(what, sizeof what, "case %zu", i);
        expect_format(path, cases[i].needle, what);
    }
    /* A well-formed file from another writer (no dtrain metadata, 0-d and empty tensors, other
     * dtypes, trailing spaces) opens. */
    write_json(path, "{\"s\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [0, 8]},"
                     " \"e\": {\"dtype\": \"BF16\", \"shape\": [0, 3], \"data_offsets\": [8, 8]},"
                     " \"__metadata__\": {\"format\": \"pt\"}}   ", 8);
    dt_ckpt *c = NULL;
    CHECK_OK(dt_ckpt_open(path, &c));
    if (c) {
        CHECK(dt_ckpt_n_tensors(c) == 2);
        CHECK(dt_ckpt_find(c, "s") && dt_ckpt_find(c, "s")->n_dims == 0);
        CHECK(dt_ckpt_find(c, "e") && dt_ckpt_find(c, "e")->n_bytes == 0);
        dt_ckpt_close(c);
    }
}

TEST(checkpoint_bad_header_lengths_are_format_errors)
{
    const char *path = test_path("len.safetensors");
    write_raw(path, UINT64_MAX, "{}", NULL, 0);
    expect_format(path, "header length 18446744073709551615", "length 2^64-1");
    write_raw(path, 3, "{}", NULL, 0);
    expect_format(path, "header length 3", "length one past the end");
    test_write_file(path, "\x02\0\0\0", 4);
    expect_format(path, "too short", "4-byte file");
    /* Longer than DT_CKPT_MAX_HEADER_BYTES though within the (sparse) file. */
    write_raw(path, DT_CKPT_MAX_HEADER_BYTES + 1, "{}", NULL, 0);
    CHECK(truncate(path, (off_t)(DT_CKPT_MAX_HEADER_BYTES + 16)) == 0);
    expect_format(path, "limit", "header over the limit");
    CHECK(truncate(path, 0) == 0);
    dt_ckpt *c = NULL;
    CHECK_ERR(dt_ckpt_open(test_path("absent.safetensors"), &c), DT_ERR_IO, "No such file");
    CHECK_ERR(dt_ckpt_open(test_path("absent.safetensors"), &c), DT_ERR_IO, "absent.safetensors");
    CHECK(c == NULL);
}

TEST(checkpoint_flipped_data_byte_is_a_checksum_mismatch)
{
    dt_arena a;
    make_small(&a);
    const dt_arena *arenas[] = {&a};
    const char *path = test_path("flip.safetensors"), *bad = test_path("flipped.safetensors");
    CHECK_OK(dt_ckpt_save(path, arenas, 1, NULL, 0));
    size_t n = 0;
    uint8_t *buf = read_all(path, &n);
    CHECK(buf && n > 8);
    size_t data_off = buf ? 8 + (size_t)le64(buf) : n;
    CHECK(data_off + 20 == n);
    for (size_t i = data_off; buf && i < n; i++) {
        buf[i] ^= 0x10;
        test_write_file(bad, buf, n);
        char what[64];
        snprintf(what, sizeof what, "byte %zu flipped", i);
        expect_format(bad, "checksum mismatch: header says", what);
        buf[i] ^= 0x10;
    }
    free(buf);
    dt_arena_free(&a);
}

TEST(checkpoint_restore_mismatch_names_the_tensor_and_leaves_the_arena)
{
    dt_arena p, s;
    make_arenas(&p, &s, 0.0f);
    const char *path = test_path("restore.safetensors");
    const dt_arena *arenas[] = {&p};
    CHECK_OK(dt_ckpt_save(path, arenas, 1, NULL, 0));
    dt_ckpt *c = NULL;
    CHECK_OK(dt_ckpt_open(path, &c));
    if (!c)
        goto done;
    /* dense/kernel is [3, 5] here, [5, 3] in the file; conv2d/kernel (checked first) matches. */
    dt_arena q;
    dt_arena_init(&q);
    CHECK_OK(dt_arena_add(&q, "conv2d/kernel", 4, (int[]){3, 3, 1, 4}, NULL));
    CHECK_OK(dt_arena_add(&q, "dense/kernel", 2, (int[]){3, 5}, NULL));
    CHECK_OK(dt_arena_commit(&q));
    for (size_t i = 0; q.data && i < q.n_elems; i++)
        q.data[i] = 7.0f;
    float *before = malloc(q.n_elems * sizeof(float));
    memcpy(before, q.data, q.n_elems * sizeof(float));
    CHECK_ERR(dt_ckpt_restore_arena(c, &q), DT_ERR_INVALID, "'dense/kernel'");
    CHECK_ERR(dt_ckpt_restore_arena(c, &q), DT_ERR_INVALID, "F32 [5, 3], the model's is F32 [3, 5]");
    CHECK_ERR(dt_ckpt_restore_arena(c, &q), DT_ERR_INVALID, path);
    CHECK(memcmp(before, q.data, q.n_elems * sizeof(float)) == 0);
    /* A view the file lacks. */
    CHECK_ERR(dt_ckpt_restore_arena(c, &s), DT_ERR_INVALID, "no tensor 'adam/m/conv2d/kernel'");
    dt_arena_free(&q);
    free(before);
    dt_ckpt_close(c);

    /* A tensor of another dtype is listed but not restored. */
    write_json(path, "{\"x\": {\"dtype\": \"F64\", \"shape\": [2], \"data_offsets\": [0, 16]}}", 16);
    CHECK_OK(dt_ckpt_open(path, &c));
    dt_arena r;
    dt_arena_init(&r);
    CHECK_OK(dt_arena_add(&r, "x", 1, (int[]){2}, NULL));
    CHECK_OK(dt_arena_commit(&r));
    if (c)
        CHECK_ERR(dt_ckpt_restore_arena(c, &r), DT_ERR_INVALID, "'x' is F64 [2]");
    dt_arena_free(&r);
    dt_ckpt_close(c);
done:
    dt_arena_free(&p);
    dt_arena_free(&s);
}

TEST(checkpoint_step_of_name)
{
    CHECK(dt_ckpt_step_of_name("ckpt-123.safetensors") == 123);
    CHECK(dt_ckpt_step_of_name("ckpt-0.safetensors") == 0);
    CHECK(dt_ckpt_step_of_name("ckpt-9223372036854775807.safetensors") == INT64_MAX);
    CHECK(dt_ckpt_step_of_name("ckpt-9223372036854775808.safetensors") == -1);
    CHECK(dt_ckpt_step_of_name("ckpt-99999999999999999999999.safetensors") == -1);
    CHECK(dt_ckpt_step_of_name("ckpt-12x.safetensors") == -1);
    CHECK(dt_ckpt_step_of_name("ckpt-.safetensors") == -1);
    CHECK(dt_ckpt_step_of_name("ckpt--1.safetensors") == -1);
    CHECK(dt_ckpt_step_of_name("ckpt-+1.safetensors") == -1);
    CHECK(dt_ckpt_step_of_name("ckpt- 1.safetensors") == -1);
    CHECK(dt_ckpt_step_of_name("ckpt-007.safetensors") == -1);
    CHECK(dt_ckpt_step_of_name("ckpt-5.safetensors.tmp.123") == -1);
    CHECK(dt_ckpt_step_of_name("ckpt-5.safetensor") == -1);
    CHECK(dt_ckpt_step_of_name("xckpt-5.safetensors") == -1);
    CHECK(dt_ckpt_step_of_name("checkpoint") == -1);
    CHECK(dt_ckpt_step_of_name("") == -1);
}

/* A manifest's "ps_shards" names files beside it: opened in order; a missing one, a path, an
 * empty name and a manifest naming none are format errors naming the manifest. */
TEST(checkpoint_open_shards_of_a_manifest)
{
    dt_arena a;
    make_small(&a);
    const dt_arena *arenas[] = {&a};
    char shard[2][96], manifest[600];
    for (int k = 0; k < 2; k++) {
        dt_ckpt_shard_name(shard[k], sizeof shard[k], 7, k, 2);
        char task[12];
        snprintf(task, sizeof task, "%d", k);
        CHECK_OK(dt_ckpt_save(test_path(shard[k]), arenas, 1, &(dt_ckpt_meta){"ps_task", task}, 1));
    }
    CHECK(strcmp(shard[1], "ckpt-7.ps-1-of-2.safetensors") == 0);
    static const struct {
        const char *list;
        dt_status want;
        const char *needle;
    } cases[] = {
        {"ckpt-7.ps-0-of-2.safetensors,ckpt-7.ps-1-of-2.safetensors", DT_OK, NULL},
        {"ckpt-7.ps-0-of-2.safetensors,ckpt-7.ps-2-of-2.safetensors", DT_ERR_IO,
         "names its shard file"},
        {"ckpt-7.ps-0-of-2.safetensors,,x", DT_ERR_FORMAT, "an empty or overlong name"},
        {"../ckpt-7.ps-0-of-2.safetensors", DT_ERR_FORMAT, "a path"},
        {"", DT_ERR_FORMAT, "names no file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(manifest, sizeof manifest, "%s", test_path("ckpt-7.safetensors"));
        CHECK_OK(dt_ckpt_save(manifest, arenas, 1, &(dt_ckpt_meta){"ps_shards", cases[i].list},
                              1));
        dt_ckpt *c = NULL, **files = NULL;
        int n = -1;
        CHECK_OK(dt_ckpt_open(manifest, &c));
        if (!c)
            continue;
        CHECK(dt_ckpt_is_sharded(c));
        if (cases[i].want == DT_OK) {
            CHECK_OK(dt_ckpt_open_shards(c, &files, &n));
            CHECK(n == 2);
            for (int k = 0; k < n && k < 2; k++)
                CHECK(strcmp(dt_ckpt_meta_get(files[k], "ps_task"), k ? "1" : "0") == 0);
            dt_ckpt_close_shards(files, n);
        } else {
            CHECK_ERR(dt_ckpt_open_shards(c, &files, &n), cases[i].want, cases[i].needle);
            CHECK_MSG(strstr(dt_last_error(), "ckpt-7.safetensors") != NULL, "case %zu: %s", i,
                      dt_last_error());
            CHECK(files == NULL && n == 0);
        }
        dt_ckpt_close(c);
    }
    /* A checkpoint of one process is not sharded. */
    CHECK_OK(dt_ckpt_save(manifest, arenas, 1, NULL, 0));
    dt_ckpt *c = NULL, **files = NULL;
    int n;
    CHECK_OK(dt_ckpt_open(manifest, &c));
    if (c) {
        CHECK(!dt_ckpt_is_sharded(c));
        CHECK_ERR(dt_ckpt_open_shards(c, &files, &n), DT_END, "not a sharded checkpoint");
        dt_ckpt_close(c);
    }
    dt_arena_free(&a);
}

/* ---- the manager ---- */

/* Reads dir's state file into lines; returns how many (at most cap). */
static int state_lines(const char *dir, char lines[][256], int cap)
{
    char path[600];
    snprintf(path, sizeof path, "%s/checkpoint", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int n = 0;
    while (n < cap && fgets(lines[n], 256, f)) {
        lines[n][strcspn(lines[n], "\n")] = '\0';
        n++;
    }
    fclose(f);
    return n;
}

/* The number after "key: " in line, or NAN. */
static double state_number(const char *line, const char *key)
{
    size_t k = strlen(key);
    if (strncmp(line, key, k) != 0 || strncmp(line + k, ": ", 2) != 0)
        return NAN;
    char *end;
    double v = strtod(line + k + 2, &end);
    return *end ? NAN : v;
}

static void save_steps(dt_ckpt_manager *m, const dt_arena *a, const int64_t *steps, int n)
{
    const dt_arena *arenas[] = {a};
    for (int i = 0; i < n; i++) {
        char path[4200], want[4200];
        CHECK_OK(dt_ckpt_manager_save(m, steps[i], arenas, 1, &(dt_ckpt_meta){"k", "v"}, 1, path,
                                      sizeof path));
        snprintf(want, sizeof want, "%s/ckpt-%lld.safetensors", m->dir, (long long)steps[i]);
        CHECK_MSG(strcmp(path, want) == 0, "path_out %s, expected %s", path, want);
    }
}

TEST(checkpoint_manager_max_to_keep_deletes_the_oldest)
{
    dt_arena a;
    make_small(&a);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/keep/sub", test_tmpdir()); /* parents created too */
    dt_ckpt_manager m;
    double t0 = now_wall();
    CHECK_OK(dt_ckpt_manager_open(&m, dir, 2, 0, NULL));
    CHECK(m.n_kept == 0);
    save_steps(&m, &a, (int64_t[]){100, 200, 300, 400, 500}, 5);
    double t1 = now_wall();
    char listing[4096];
    list_dir(dir, listing, sizeof listing);
    CHECK_MSG(strcmp(listing, "checkpoint\nckpt-400.safetensors\nckpt-500.safetensors\n") == 0,
              "files:\n%s", listing);
    CHECK(m.n_kept == 2 && m.steps[0] == 400 && m.steps[1] == 500);
    CHECK(m.n_kept == 2 && m.timestamps[0] >= t0 && m.timestamps[0] <= m.timestamps[1] &&
          m.timestamps[1] <= t1);
    CHECK(m.last_preserved >= t0 - 1 && m.last_preserved <= t0 + 1); /* the open time */

    char lines[16][256];
    int n = state_lines(dir, lines, 16);
    CHECK_MSG(n == 6, "%d lines in the state file", n);
    if (n == 6 && m.n_kept == 2) {
        CHECK(strcmp(lines[0], "model_checkpoint_path: \"ckpt-500.safetensors\"") == 0);
        CHECK(strcmp(lines[1], "all_model_checkpoint_paths: \"ckpt-400.safetensors\"") == 0);
        CHECK(strcmp(lines[2], "all_model_checkpoint_paths: \"ckpt-500.safetensors\"") == 0);
        CHECK_MSG(state_number(lines[3], "all_model_checkpoint_timestamps") == m.timestamps[0],
                  "%s vs %.17g", lines[3], m.timestamps[0]);
        CHECK(state_number(lines[4], "all_model_checkpoint_timestamps") == m.timestamps[1]);
        CHECK(state_number(lines[5], "last_preserved_timestamp") == m.last_preserved);
    }
    /* Reopened, the manager has the same lists. */
    dt_ckpt_manager m2;
    CHECK_OK(dt_ckpt_manager_open(&m2, dir, 2, 0, NULL));
    CHECK(m2.n_kept == 2);
    for (int i = 0; i < 2 && m2.n_kept == 2 && m.n_kept == 2; i++)
        CHECK(m2.steps[i] == m.steps[i] && m2.timestamps[i] == m.timestamps[i]);
    CHECK(m2.last_preserved == m.last_preserved);
    dt_ckpt_manager_close(&m2);
    dt_ckpt_manager_close(&m);
    dt_arena_free(&a);
}

TEST(checkpoint_manager_same_step_moves_to_the_end)
{
    dt_arena a;
    make_small(&a);
    const char *dir = test_path("same_step");
    dt_ckpt_manager m;
    CHECK_OK(dt_ckpt_manager_open(&m, dir, 0, 0, NULL));
    save_steps(&m, &a, (int64_t[]){1, 2, 1}, 3);
    CHECK(m.n_kept == 2 && m.steps[0] == 2 && m.steps[1] == 1);
    char lines[16][256];
    CHECK(state_lines(dir, lines, 16) == 6 &&
          strcmp(lines[0], "model_checkpoint_path: \"ckpt-1.safetensors\"") == 0);
    CHECK_ERR(dt_ckpt_manager_save(&m, -1, (const dt_arena *const[]){&a}, 1, NULL, 0, NULL, 0),
              DT_ERR_INVALID, "negative");
    dt_ckpt_manager_close(&m);
    dt_arena_free(&a);
}

TEST(checkpoint_manager_keep_every_n_hours_preserves_files)
{
    dt_arena a;
    make_small(&a);
    /* A tiny period: every checkpoint that leaves the list is kept on disk. */
    const char *dir = test_path("hours_tiny");
    dt_ckpt_manager m;
    CHECK_OK(dt_ckpt_manager_open(&m, dir, 2, 1e-9, NULL));
    save_steps(&m, &a, (int64_t[]){1, 2, 3, 4, 5}, 5);
    char listing[4096];
    list_dir(dir, listing, sizeof listing);
    CHECK_MSG(strcmp(listing, "checkpoint\nckpt-1.safetensors\nckpt-2.safetensors\n"
                              "ckpt-3.safetensors\nckpt-4.safetensors\nckpt-5.safetensors\n") == 0,
              "files:\n%s", listing);
    CHECK(m.n_kept == 2 && m.steps[0] == 4 && m.steps[1] == 5);
    dt_ckpt_manager_close(&m);

    /* One hour: the first to leave is an hour past the last preserved (set to 0 here) and is
     * kept; the next ones, seconds later, are deleted. */
    dir = test_path("hours_one");
    CHECK_OK(dt_ckpt_manager_open(&m, dir, 2, 1.0, NULL));
    m.last_preserved = 0;
    save_steps(&m, &a, (int64_t[]){1, 2, 3, 4, 5}, 5);
    list_dir(dir, listing, sizeof listing);
    CHECK_MSG(strcmp(listing, "checkpoint\nckpt-1.safetensors\nckpt-4.safetensors\n"
                              "ckpt-5.safetensors\n") == 0, "files:\n%s", listing);
    char lines[16][256];
    int n = state_lines(dir, lines, 16);
    CHECK(n == 6 && m.last_preserved > 1e9 &&
          state_number(lines[5], "last_preserved_timestamp") == m.last_preserved);
    dt_ckpt_manager_close(&m);
    dt_arena_free(&a);
}

TEST(checkpoint_manager_reads_tf_state_and_drops_missing_files)
{
    dt_arena a;
    make_small(&a);
    const dt_arena *arenas[] = {&a};
    const char *dir = test_path("tfstate");
    mkdir(dir, 0755);
    char path[600];
    for (int step = 1; step <= 3; step += 2) { /* ckpt-1 and ckpt-3; ckpt-2 is gone */
        snprintf(path, sizeof path, "%s/ckpt-%d.safetensors", dir, step);
        CHECK_OK(dt_ckpt_save(path, arenas, 1, NULL, 0));
    }
    static const char state[] = "model_checkpoint_path: \"ckpt-3.safetensors\"\n"
                                "all_model_checkpoint_paths: \"/elsewhere/ckpt-1.safetensors\"\n"
                                "all_model_checkpoint_paths: \"ckpt-2.safetensors\"\n"
                                "all_model_checkpoint_paths: \"ckpt-3.safetensors\"\n"
                                "some_future_field: 12\n"
                                "\n"
                                "all_model_checkpoint_timestamps: 100.5\n"
                                "all_model_checkpoint_timestamps: 200.25\n"
                                "all_model_checkpoint_timestamps: 300\n"
                                "last_preserved_timestamp: 50.0\n";
    snprintf(path, sizeof path, "%s/checkpoint", dir);
    test_write_file(path, state, sizeof state - 1);
    dt_ckpt_manager m;
    CHECK_OK(dt_ckpt_manager_open(&m, dir, 5, 0, NULL));
    CHECK(m.n_kept == 2 && m.steps[0] == 1 && m.steps[1] == 3);
    CHECK(m.n_kept == 2 && m.timestamps[0] == 100.5 && m.timestamps[1] == 300);
    CHECK(m.last_preserved == 50.0);
    dt_ckpt_manager_close(&m);

    /* A malformed state file: a warning, and the list comes from the directory. */
    static const char broken[] = "all_model_checkpoint_paths: \"ckpt-1.safetensors\"\n"
                                 "all_model_checkpoint_timestamps: soon\n";
    test_write_file(path, broken, sizeof broken - 1);
    char *log_text = NULL;
    size_t log_n = 0;
    FILE *log = open_memstream(&log_text, &log_n);
    double t0 = now_wall();
    CHECK_OK(dt_ckpt_manager_open(&m, dir, 5, 0, log));
    fclose(log);
    CHECK(m.n_kept == 2 && m.steps[0] == 1 && m.steps[1] == 3);
    CHECK(m.last_preserved >= t0 - 1);
    CHECK_MSG(strstr(log_text, "dtrain: warning: ") && strstr(log_text, "checkpoint: line 2") &&
              strstr(log_text, "'soon'"), "log: %s", log_text);
    free(log_text);
    dt_ckpt_manager_close(&m);
    dt_arena_free(&a);

    CHECK_ERR(dt_ckpt_manager_open(&m, dir, -1, 0, NULL), DT_ERR_INVALID, "max_to_keep");
    CHECK_ERR(dt_ckpt_manager_open(&m, dir, 1, -2, NULL), DT_ERR_INVALID, "every_n_hours");
    snprintf(path, sizeof path, "%s/ckpt-1.safetensors", dir);
    CHECK_ERR(dt_ckpt_manager_open(&m, path, 1, 0, NULL), DT_ERR_IO, "ckpt-1.safetensors");
}

/* ---- open_latest ---- */

TEST(checkpoint_open_latest_falls_back_past_broken_files)
{
    dt_arena a;
    make_small(&a);
    const char *dir = test_path("latest");
    dt_ckpt_manager m;
    CHECK_OK(dt_ckpt_manager_open(&m, dir, 0, 0, NULL));
    save_steps(&m, &a, (int64_t[]){100, 200, 300}, 3);
    dt_ckpt_manager_close(&m);
    char path[600], want[600];
    snprintf(path, sizeof path, "%s/ckpt-300.safetensors", dir);
    CHECK(truncate(path, 30) == 0);

    char *log_text = NULL;
    size_t log_n = 0;
    FILE *log = open_memstream(&log_text, &log_n);
    dt_ckpt *c = NULL;
    CHECK_OK(dt_ckpt_open_latest(dir, log, &c));
    fclose(log);
    snprintf(want, sizeof want, "%s/ckpt-200.safetensors", dir);
    CHECK_MSG(c && strcmp(dt_ckpt_path(c), want) == 0, "opened %s", c ? dt_ckpt_path(c) : "nothing");
    char warning[800];
    snprintf(warning, sizeof warning, "dtrain: warning: %s/ckpt-300.safetensors: byte 0: header "
             "length ", dir);
    CHECK_MSG(strncmp(log_text, warning, strlen(warning)) == 0, "log: %s", log_text);
    CHECK_MSG(strstr(log_text, "; trying an older checkpoint\n") != NULL, "log: %s", log_text);
    CHECK_MSG(strchr(log_text, '\n') == log_text + strlen(log_text) - 1, "one line: %s", log_text);
    free(log_text);
    dt_ckpt_close(c);

    /* Without the state file: the directory's files by decreasing step (ckpt-90 sorts after
     * ckpt-300 by name, not by step), skipping temporary files even when they hold a valid
     * checkpoint. */
    snprintf(path, sizeof path, "%s/checkpoint", dir);
    CHECK(unlink(path) == 0);
    snprintf(path, sizeof path, "%s/ckpt-200.safetensors", dir);
    snprintf(want, sizeof want, "%s/ckpt-900.safetensors.tmp.1", dir);
    CHECK(link(path, want) == 0);
    snprintf(want, sizeof want, "%s/ckpt-90.safetensors", dir);
    CHECK(link(path, want) == 0);
    CHECK_OK(dt_ckpt_open_latest(dir, NULL, &c));
    CHECK_MSG(c && strcmp(dt_ckpt_path(c), path) == 0, "opened %s", c ? dt_ckpt_path(c) : "nothing");
    dt_ckpt_close(c);

    /* Nothing valid: every file broken (ckpt-200's links with it). */
    CHECK(truncate(path, 10) == 0);
    snprintf(path, sizeof path, "%s/ckpt-100.safetensors", dir);
    CHECK(truncate(path, 9) == 0);
    CHECK_ERR(dt_ckpt_open_latest(dir, NULL, &c), DT_END, "no valid checkpoint");
    CHECK(c == NULL);
    dt_arena_free(&a);
}

TEST(checkpoint_open_latest_of_a_missing_or_empty_dir_is_end)
{
    dt_ckpt *c = (dt_ckpt *)1;
    const char *dir = test_path("no_such_dir");
    CHECK_ERR(dt_ckpt_open_latest(dir, NULL, &c), DT_END, "no valid checkpoint");
    CHECK_ERR(dt_ckpt_open_latest(dir, NULL, &c), DT_END, dir);
    CHECK(c == NULL);
    dir = test_path("empty_dir");
    mkdir(dir, 0755);
    CHECK_ERR(dt_ckpt_open_latest(dir, NULL, &c), DT_END, "no valid checkpoint");
}

/* ---- read by numpy ---- */

static const char reader[] = "tests/progs/read_safetensors.py";

/* A python3 that imports numpy: the one on PATH, else Debian's (python3-numpy installs there). */
static const char *find_python(void)
{
    static const char *const candidates[] = {"python3", "/usr/bin/python3"};
    for (size_t i = 0; i < 2; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import numpy' > /dev/null 2>&1", candidates[i]);
        int status = system(cmd);
        if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
            return candidates[i];
    }
    return NULL;
}

/* Runs the reader; returns its exit status (-1 if it could not run), its output in out. */
static int run_reader(const char *python, const char *args, char *out, size_t cap)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s %s 2>&1", python, reader, args);
    out[0] = '\0';
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(checkpoint_is_read_by_numpy)
{
    const char *python = find_python();
    CHECK_MSG(python != NULL, "python3 with numpy is required for this test (Debian: "
              "apt-get install python3-numpy)");
    CHECK_MSG(access(reader, R_OK) == 0, "%s not found: run the tests from the repository root",
              reader);
    if (!python || access(reader, R_OK) != 0)
        return;
    dt_arena p, s;
    make_arenas(&p, &s, 3.0f);
    const char *path = test_path("numpy.safetensors");
    const dt_arena *arenas[] = {&p, &s};
    CHECK_OK(dt_ckpt_save(path, arenas, 2, &(dt_ckpt_meta){"epoch", "2"}, 1));

    /* Expected: one line per view with its CRC32C computed here, then the combined CRC of every
     * tensor in arena order, which is the data section's, the metadata's checksum. */
    char want[4096] = "", names[2048] = "", args[2600];
    size_t wn = 0, nn = 0;
    for (int a = 0; a < 2; a++) {
        const dt_arena *ar = arenas[a];
        for (int v = 0; v < ar->n_views; v++) {
            const dt_view *vw = &ar->views[v];
            wn += (size_t)snprintf(want + wn, sizeof want - wn, "%s [", vw->name);
            for (int d = 0; d < vw->n_dims; d++)
                wn += (size_t)snprintf(want + wn, sizeof want - wn, "%s%d", d ? "," : "", vw->dims[d]);
            wn += (size_t)snprintf(want + wn, sizeof want - wn, "] %08x\n",
                                   dt_crc32c(dt_arena_view_data(ar, v), vw->n_elems * 4));
            nn += (size_t)snprintf(names + nn, sizeof names - nn, "%s%s", nn ? "," : "", vw->name);
        }
    }
    dt_ckpt *c = NULL;
    CHECK_OK(dt_ckpt_open(path, &c));
    snprintf(want + wn, sizeof want - wn, "combined %s\n", c ? dt_ckpt_meta_get(c, "checksum") : "?");
    dt_ckpt_close(c);
    snprintf(args, sizeof args, "'%s' --names '%s'", path, names);
    char out[8192];
    int status = run_reader(python, args, out, sizeof out);
    CHECK_MSG(status == 0, "%s exited %d: %s", reader, status, out);
    CHECK_MSG(strcmp(out, want) == 0, "reader printed:\n%s\nexpected:\n%s", out, want);

    /* The reader is not blind: it refuses a truncated copy and a bad length. */
    size_t n = 0;
    uint8_t *buf = read_all(path, &n);
    const char *cut = test_path("numpy_cut.safetensors");
    if (buf) {
        test_write_file(cut, buf, n - 1);
        snprintf(args, sizeof args, "'%s'", cut);
        status = run_reader(python, args, out, sizeof out);
        CHECK_MSG(status == 1 && strstr(out, "cover"), "on a truncated file: %d, %s", status, out);
        buf[7] = 1;
        test_write_file(cut, buf, n);
        status = run_reader(python, args, out, sizeof out);
        CHECK_MSG(status == 1 && strstr(out, "header length"), "on a huge length: %d, %s", status,
                  out);
    }
    free(buf);
    dt_arena_free(&p);
    dt_arena_free(&s);
}
