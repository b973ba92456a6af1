/* TFRecord reader and writer: CRC test vectors, round trips in every compression, reading through
 * a pipe, and every kind of damaged file built byte by byte, each error naming the file and the
 * offset of the record at fault. */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../src/core/crc32c.h"
#include "dtrain/tfrecord.h"
#include "test.h"

/* A growable byte string, for building files by hand. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void put(bytes *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    if (n)
        memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_u32(bytes *b, uint32_t v)
{
    uint8_t t[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, t, 4);
}

/* The TFRecord framing written out by hand with the table-driven reference CRC, independent of
 * the writer under test. */
static void put_record(bytes *b, const void *data, uint64_t len)
{
    uint8_t h[8];
    for (int i = 0; i < 8; i++)
        h[i] = (uint8_t)(len >> (8 * i));
    put(b, h, 8);
    put_u32(b, dt_crc32c_mask(dt_crc32c_extend_naive(0, h, 8)));
    put(b, data, (size_t)len);
    put_u32(b, dt_crc32c_mask(dt_crc32c_extend_naive(0, data, (size_t)len)));
}

static void fill_pattern(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 7 + seed * 13 + (i >> 9));
}

TEST(tfrecord_crc_test_vectors)
{
    CHECK(dt_crc32c("123456789", 9) == 0xE3069283u);
    CHECK(dt_crc32c_mask(dt_crc32c("123456789", 9)) == 0xC78AB0E5u);
    CHECK(dt_crc32c("", 0) == 0);
    CHECK(dt_crc32c_mask(dt_crc32c("", 0)) == 0xA282EAD8u);
    /* An empty record as the writer frames it: 8 zero bytes, their masked CRC, the empty data's
     * masked CRC (0xA282EAD8, little endian). */
    dt_tfrecord_writer *w;
    CHECK_OK(dt_tfrecord_writer_open(test_path("empty_rec.tfrecord"), DT_COMPRESSION_NONE, &w));
    CHECK_OK(dt_tfrecord_write(w, "", 0));
    CHECK_OK(dt_tfrecord_writer_close(w));
    uint8_t got[32];
    FILE *f = fopen(test_path("empty_rec.tfrecord"), "rb");
    size_t n = f ? fread(got, 1, sizeof got, f) : 0;
    if (f)
        fclose(f);
    bytes want = {0};
    put_record(&want, "", 0);
    CHECK(n == 16 && want.n == 16 && memcmp(got, want.p, 16) == 0);
    CHECK(got[12] == 0xD8 && got[13] == 0xEA && got[14] == 0x82 && got[15] == 0xA2);
    free(want.p);
}

TEST(tfrecord_compression_names)
{
    dt_compression c;
    CHECK_OK(dt_compression_parse("auto", &c));
    CHECK(c == DT_COMPRESSION_AUTO);
    CHECK_OK(dt_compression_parse("none", &c));
    CHECK(c == DT_COMPRESSION_NONE);
    CHECK_OK(dt_compression_parse("", &c));
    CHECK(c == DT_COMPRESSION_NONE);
    CHECK_OK(dt_compression_parse("GZIP", &c));
    CHECK(c == DT_COMPRESSION_GZIP);
    CHECK_OK(dt_compression_parse("gzip", &c));
    CHECK(c == DT_COMPRESSION_GZIP);
    CHECK_OK(dt_compression_parse("ZLIB", &c));
    CHECK(c == DT_COMPRESSION_ZLIB);
    CHECK_OK(dt_compression_parse("zlib", &c));
    CHECK(c == DT_COMPRESSION_ZLIB);
    CHECK_ERR(dt_compression_parse("bz2", &c), DT_ERR_INVALID, "compression 'bz2'");
    CHECK(strcmp(dt_compression_name(DT_COMPRESSION_ZLIB), "zlib") == 0);
    dt_tfrecord_writer *w;
    CHECK_ERR(dt_tfrecord_writer_open(test_path("auto.tfrecord"), DT_COMPRESSION_AUTO, &w),
              DT_ERR_INVALID, "none, gzip or zlib, not auto");
}

static const size_t round_trip_lens[] = {0, 1, 1000, (size_t)1 << 20, 3};

static void write_round_trip(const char *path, dt_compression c)
{
    size_t big = (size_t)1 << 20;
    uint8_t *data = malloc(big);
    dt_tfrecord_writer *w;
    CHECK_OK(dt_tfrecord_writer_open(path, c, &w));
    for (size_t i = 0; i < sizeof round_trip_lens / sizeof round_trip_lens[0]; i++) {
        fill_pattern(data, round_trip_lens[i], (unsigned)i);
        CHECK_OK(dt_tfrecord_write(w, data, round_trip_lens[i]));
    }
    CHECK_OK(dt_tfrecord_writer_close(w));
    free(data);
}

static void check_round_trip(const char *path, dt_compression c)
{
    size_t big = (size_t)1 << 20;
    uint8_t *want = malloc(big);
    dt_tfrecord_reader *r;
    CHECK_OK(dt_tfrecord_open(path, c, 0, &r));
    if (!r) {
        free(want);
        return;
    }
    uint64_t expect_off = 0;
    for (size_t i = 0; i < sizeof round_trip_lens / sizeof round_trip_lens[0]; i++) {
        const uint8_t *d = NULL;
        size_t n = 99;
        uint64_t off = 99;
        CHECK_OK(dt_tfrecord_next(r, &d, &n, &off));
        fill_pattern(want, round_trip_lens[i], (unsigned)i);
        CHECK_MSG(n == round_trip_lens[i], "%s record %zu: %zu bytes, expected %zu", path, i, n,
                  round_trip_lens[i]);
        CHECK_MSG(off == expect_off, "%s record %zu: offset %llu, expected %llu", path, i,
                  (unsigned long long)off, (unsigned long long)expect_off);
        CHECK(n != round_trip_lens[i] || n == 0 || memcmp(d, want, n) == 0);
        expect_off += 16 + round_trip_lens[i];
    }
    const uint8_t *d;
    size_t n;
    CHECK(dt_tfrecord_next(r, &d, &n, NULL) == DT_END);
    CHECK(dt_tfrecord_next(r, &d, &n, NULL) == DT_END); /* and it stays at the end */
    dt_tfrecord_close(r);
    free(want);
}

TEST(tfrecord_round_trip_every_compression)
{
    write_round_trip(test_path("rt.tfrecord"), DT_COMPRESSION_NONE);
    write_round_trip(test_path("rt.tfrecord.gz"), DT_COMPRESSION_GZIP);
    write_round_trip(test_path("rt.tfrecord.zz"), DT_COMPRESSION_ZLIB);
    check_round_trip(test_path("rt.tfrecord"), DT_COMPRESSION_NONE);
    check_round_trip(test_path("rt.tfrecord"), DT_COMPRESSION_AUTO);
    check_round_trip(test_path("rt.tfrecord.gz"), DT_COMPRESSION_GZIP);
    check_round_trip(test_path("rt.tfrecord.gz"), DT_COMPRESSION_AUTO);
    check_round_trip(test_path("rt.tfrecord.zz"), DT_COMPRESSION_ZLIB);
    /* The files are what zlib's own tools make of the plain one. */
    FILE *f = fopen(test_path("rt.tfrecord"), "rb");
    fseek(f, 0, SEEK_END);
    long plain_n = ftell(f);
    fclose(f);
    gzFile g = gzopen(test_path("rt.tfrecord.gz"), "rb");
    uint8_t *buf = malloc((size_t)plain_n + 1);
    int got = gzread(g, buf, (unsigned)plain_n + 1);
    gzclose(g);
    CHECK(got == plain_n);
    free(buf);
    /* The plain file matches the hand-built framing byte for byte. */
    bytes want = {0};
    uint8_t *data = malloc((size_t)1 << 20);
    for (size_t i = 0; i < sizeof round_trip_lens / sizeof round_trip_lens[0]; i++) {
        fill_pattern(data, round_trip_lens[i], (unsigned)i);
        put_record(&want, data, round_trip_lens[i]);
    }
    uint8_t *have = malloc(want.n);
    f = fopen(test_path("rt.tfrecord"), "rb");
    CHECK(f && fread(have, 1, want.n, f) == want.n && (long)want.n == plain_n);
    if (f)
        fclose(f);
    CHECK(memcmp(have, want.p, want.n) == 0);
    free(have);
    free(data);
    free(want.p);
}

TEST(tfrecord_concatenated_gzip_members_and_empty_files)
{
    /* cat a.gz b.gz: one stream of records, as gunzip sees it. */
    write_round_trip(test_path("a.gz"), DT_COMPRESSION_GZIP);
    bytes both = {0};
    for (int k = 0; k < 2; k++) {
        FILE *f = fopen(test_path("a.gz"), "rb");
        uint8_t chunk[65536];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
            put(&both, chunk, n);
        fclose(f);
    }
    test_write_file(test_path("ab.gz"), both.p, both.n);
    free(both.p);
    dt_tfrecord_reader *r;
    CHECK_OK(dt_tfrecord_open(test_path("ab.gz"), DT_COMPRESSION_AUTO, 0, &r));
    const uint8_t *d;
    size_t n;
    int count = 0;
    dt_status st;
    while ((st = dt_tfrecord_next(r, &d, &n, NULL)) == DT_OK)
        count++;
    CHECK(st == DT_END && count == 10);
    dt_tfrecord_close(r);
    /* An empty file is an empty dataset in every mode. */
    test_write_file(test_path("empty"), "", 0);
    dt_compression modes[] = {DT_COMPRESSION_AUTO, DT_COMPRESSION_NONE, DT_COMPRESSION_GZIP,
                              DT_COMPRESSION_ZLIB};
    for (int m = 0; m < 4; m++) {
        CHECK_OK(dt_tfrecord_open(test_path("empty"), modes[m], 0, &r));
        CHECK(r && dt_tfrecord_next(r, &d, &n, NULL) == DT_END);
        dt_tfrecord_close(r);
    }
}

/* Opens path (plain) and returns the status of reading records until one is not DT_OK; *count
 * receives the good records before it. */
static dt_status read_all(const char *path, dt_compression c, size_t max, int *count)
{
    dt_tfrecord_reader *r;
    dt_status st = dt_tfrecord_open(path, c, max, &r);
    *count = 0;
    if (st)
        return st;
    const uint8_t *d;
    size_t n;
    while ((st = dt_tfrecord_next(r, &d, &n, NULL)) == DT_OK)
        (*count)++;
    dt_tfrecord_close(r);
    return st;
}

TEST(tfrecord_exact_end_is_dt_end)
{
    bytes b = {0};
    put_record(&b, "hello", 5);
    put_record(&b, "", 0);
    put_record(&b, "abc", 3);
    test_write_file(test_path("exact.tfrecord"), b.p, b.n);
    int count;
    CHECK(read_all(test_path("exact.tfrecord"), DT_COMPRESSION_NONE, 0, &count) == DT_END);
    CHECK(count == 3);
    CHECK(read_all(test_path("exact.tfrecord"), DT_COMPRESSION_AUTO, 0, &count) == DT_END);
    CHECK(count == 3);
    free(b.p);
}

TEST(tfrecord_length_crc_mismatch_names_file_and_offset)
{
    bytes b = {0};
    put_record(&b, "hello", 5); /* 21 bytes */
    size_t second = b.n;
    put_record(&b, "abc", 3);
    b.p[second] ^= 0x01; /* the length becomes 2: its CRC no longer matches */
    test_write_file(test_path("lencrc.tfrecord"), b.p, b.n);
    int count;
    dt_status st = read_all(test_path("lencrc.tfrecord"), DT_COMPRESSION_NONE, 0, &count);
    CHECK(count == 1);
    CHECK(st == DT_ERR_FORMAT);
    CHECK_MSG(strstr(dt_last_error(), "lencrc.tfrecord: offset 21: corrupt record header: length "
                                      "CRC mismatch (stored 0x") != NULL,
              "message: %s", dt_last_error());
    free(b.p);
}

TEST(tfrecord_data_crc_mismatch_gives_both_values_and_reading_goes_on)
{
    bytes b = {0};
    put_record(&b, "hello", 5);
    size_t second = b.n;
    put_record(&b, "abc", 3);
    put_record(&b, "tail", 4);
    uint32_t stored = dt_crc32c_mask(dt_crc32c("abc", 3));
    b.p[second + 12] = 'x'; /* "xbc" */
    uint32_t computed = dt_crc32c_mask(dt_crc32c("xbc", 3));
    test_write_file(test_path("datacrc.tfrecord"), b.p, b.n);
    char want[256];
    snprintf(want, sizeof want, "datacrc.tfrecord: offset 21: corrupt record: data CRC mismatch "
             "over 3 bytes (stored 0x%08x, computed 0x%08x)", stored, computed);
    dt_tfrecord_reader *r;
    CHECK_OK(dt_tfrecord_open(test_path("datacrc.tfrecord"), DT_COMPRESSION_NONE, 0, &r));
    const uint8_t *d;
    size_t n;
    uint64_t off;
    CHECK_OK(dt_tfrecord_next(r, &d, &n, &off));
    CHECK_ERR(dt_tfrecord_next(r, &d, &n, &off), DT_ERR_FORMAT, want);
    CHECK(dt_tfrecord_can_continue(r));
    /* The length was sound, so the record after the bad one is still there. */
    CHECK_OK(dt_tfrecord_next(r, &d, &n, &off));
    CHECK(n == 4 && memcmp(d, "tail", 4) == 0 && off == 21 + 19);
    CHECK(dt_tfrecord_next(r, &d, &n, &off) == DT_END);
    dt_tfrecord_close(r);
    free(b.p);
}

TEST(tfrecord_truncated_header_data_and_footer)
{
    bytes b = {0};
    put_record(&b, "hello", 5); /* 21 bytes */
    uint8_t data[100];
    fill_pattern(data, sizeof data, 1);
    put_record(&b, data, sizeof data); /* 21 .. 137 */
    int count;
    /* In the header: 7 of its 12 bytes. */
    test_write_file(test_path("cut_head.tfrecord"), b.p, 21 + 7);
    CHECK_ERR(read_all(test_path("cut_head.tfrecord"), DT_COMPRESSION_NONE, 0, &count),
              DT_ERR_FORMAT, "cut_head.tfrecord: offset 21: truncated record: the file ends 7 "
              "bytes into the 12-byte record header (at offset 28)");
    CHECK(count == 1);
    /* In the data: 40 of 100 bytes. */
    test_write_file(test_path("cut_data.tfrecord"), b.p, 21 + 12 + 40);
    CHECK_ERR(read_all(test_path("cut_data.tfrecord"), DT_COMPRESSION_NONE, 0, &count),
              DT_ERR_FORMAT, "cut_data.tfrecord: offset 21: truncated record: the header gives "
              "100 data bytes, the file ends after 40 of them (at offset 73)");
    /* In the footer: 2 of the 4 CRC bytes. */
    test_write_file(test_path("cut_foot.tfrecord"), b.p, 21 + 12 + 100 + 2);
    CHECK_ERR(read_all(test_path("cut_foot.tfrecord"), DT_COMPRESSION_NONE, 0, &count),
              DT_ERR_FORMAT, "cut_foot.tfrecord: offset 21: truncated record: the file ends 2 "
              "bytes into the 4-byte data CRC that follows 100 data bytes (at offset 135)");
    /* Gzip'd files report the same offsets, in the decompressed stream. */
    gzFile g = gzopen(test_path("cut_data.tfrecord.gz"), "wb");
    gzwrite(g, b.p, 21 + 12 + 40);
    gzclose(g);
    CHECK_ERR(read_all(test_path("cut_data.tfrecord.gz"), DT_COMPRESSION_AUTO, 0, &count),
              DT_ERR_FORMAT, "cut_data.tfrecord.gz: offset 21: truncated record: the header "
              "gives 100 data bytes, the file ends after 40 of them (at offset 73)");
    free(b.p);
}

TEST(tfrecord_errors_are_final)
{
    bytes b = {0};
    put_record(&b, "hello", 5);
    test_write_file(test_path("final.tfrecord"), b.p, 10);
    dt_tfrecord_reader *r;
    CHECK_OK(dt_tfrecord_open(test_path("final.tfrecord"), DT_COMPRESSION_NONE, 0, &r));
    const uint8_t *d;
    size_t n;
    CHECK_ERR(dt_tfrecord_next(r, &d, &n, NULL), DT_ERR_FORMAT, "offset 0: truncated record");
    CHECK(!dt_tfrecord_can_continue(r));
    CHECK_ERR(dt_tfrecord_next(r, &d, &n, NULL), DT_ERR_FORMAT, "final.tfrecord: offset 0: "
              "reading stopped at an earlier error");
    dt_tfrecord_close(r);
    free(b.p);
}

/* A header claiming 2^60 bytes, with a valid CRC, so only the bound can catch it. */
static void put_header(bytes *b, uint64_t len)
{
    uint8_t h[8];
    for (int i = 0; i < 8; i++)
        h[i] = (uint8_t)(len >> (8 * i));
    put(b, h, 8);
    put_u32(b, dt_crc32c_mask(dt_crc32c_extend_naive(0, h, 8)));
}

TEST(tfrecord_length_bound_stops_corrupt_headers)
{
    bytes b = {0};
    put_record(&b, "hello", 5);
    put_header(&b, (uint64_t)1 << 60);
    put(&b, "some bytes", 10);
    test_write_file(test_path("huge.tfrecord"), b.p, b.n);
    int count;
    CHECK_ERR(read_all(test_path("huge.tfrecord"), DT_COMPRESSION_NONE, 0, &count), DT_ERR_FORMAT,
              "huge.tfrecord: offset 21: record length 1152921504606846976 is above the limit of "
              "268435456 bytes (corrupt header?)");
    CHECK(count == 1);
    CHECK_ERR(read_all(test_path("huge.tfrecord"), DT_COMPRESSION_NONE, 1000, &count),
              DT_ERR_FORMAT, "is above the limit of 1000 bytes (corrupt header?)");
    /* A length within the bound but far beyond the file: a truncation, and the reader's buffer
     * only ever held what the file had (it never sizes itself from the header). */
    bytes c = {0};
    put_header(&c, (uint64_t)200 << 20);
    put(&c, "short", 5);
    test_write_file(test_path("long.tfrecord"), c.p, c.n);
    CHECK_ERR(read_all(test_path("long.tfrecord"), DT_COMPRESSION_NONE, 0, &count), DT_ERR_FORMAT,
              "long.tfrecord: offset 0: truncated record: the header gives 209715200 data bytes, "
              "the file ends after 5 of them (at offset 17)");
    free(b.p);
    free(c.p);
}

TEST(tfrecord_io_errors_name_the_file)
{
    dt_tfrecord_reader *r;
    CHECK_ERR(dt_tfrecord_open(test_path("nope.tfrecord"), DT_COMPRESSION_NONE, 0, &r), DT_ERR_IO,
              "nope.tfrecord: No such file");
    CHECK_ERR(dt_tfrecord_open(test_tmpdir(), DT_COMPRESSION_NONE, 0, &r), DT_ERR_IO,
              "is a directory");
    /* read() failing: a descriptor open for writing only. */
    int fd = open(test_path("wronly"), O_WRONLY | O_CREAT, 0600);
    CHECK(fd >= 0);
    CHECK_OK(dt_tfrecord_open_fd(fd, "wronly-file", DT_COMPRESSION_NONE, 0, &r));
    const uint8_t *d;
    size_t n;
    CHECK_ERR(dt_tfrecord_next(r, &d, &n, NULL), DT_ERR_IO, "wronly-file: offset 0: read: Bad file "
              "descriptor");
    dt_tfrecord_close(r);
    close(fd);
    /* Writers: a missing directory at open, a full disk at close (the output is buffered). */
    dt_tfrecord_writer *w;
    CHECK_ERR(dt_tfrecord_writer_open(test_path("no/dir.tfrecord"), DT_COMPRESSION_NONE, &w),
              DT_ERR_IO, "no/dir.tfrecord: cannot create: No such file");
    if (access("/dev/full", W_OK) == 0) {
        CHECK_OK(dt_tfrecord_writer_open("/dev/full", DT_COMPRESSION_GZIP, &w));
        CHECK_OK(dt_tfrecord_write(w, "abc", 3));
        CHECK_ERR(dt_tfrecord_writer_close(w), DT_ERR_IO, "/dev/full: offset 19: write: No space");
    }
}

static size_t slurp(const char *path, uint8_t **out)
{
    FILE *f = fopen(path, "rb");
    bytes b = {0};
    uint8_t chunk[65536];
    size_t n;
    while (f && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        put(&b, chunk, n);
    if (f)
        fclose(f);
    *out = b.p;
    return b.n;
}

TEST(tfrecord_corrupt_compressed_streams)
{
    write_round_trip(test_path("c.gz"), DT_COMPRESSION_GZIP);
    write_round_trip(test_path("c.zz"), DT_COMPRESSION_ZLIB);
    uint8_t *gz, *zz;
    size_t gn = slurp(test_path("c.gz"), &gz), zn = slurp(test_path("c.zz"), &zz);
    int count;
    /* Cut short: the stream ends inside a compressed block. */
    test_write_file(test_path("cut.gz"), gz, gn - 10);
    CHECK_ERR(read_all(test_path("cut.gz"), DT_COMPRESSION_GZIP, 0, &count), DT_ERR_FORMAT,
              "cut.gz: offset ");
    CHECK(strstr(dt_last_error(), "truncated gzip stream") != NULL);
    test_write_file(test_path("cut.zz"), zz, zn / 2);
    CHECK_ERR(read_all(test_path("cut.zz"), DT_COMPRESSION_ZLIB, 0, &count), DT_ERR_FORMAT,
              "truncated zlib stream");
    /* Damaged: a flipped byte in the middle of the deflate data. */
    gz[gn / 2] ^= 0x55;
    test_write_file(test_path("bad.gz"), gz, gn);
    dt_status st = read_all(test_path("bad.gz"), DT_COMPRESSION_AUTO, 0, &count);
    CHECK(st == DT_ERR_FORMAT);
    /* Depending on where the damage leads inflate: a bad code, a stream that seems to go on past
     * the file's end, or garbage framing caught by the record CRCs. */
    CHECK_MSG(strstr(dt_last_error(), "bad.gz: offset ") && (strstr(dt_last_error(), "gzip stream")
              || strstr(dt_last_error(), "CRC mismatch")), "message: %s", dt_last_error());
    /* A zlib file read as gzip: the header is wrong from byte 0. */
    CHECK_ERR(read_all(test_path("c.zz"), DT_COMPRESSION_GZIP, 0, &count), DT_ERR_FORMAT,
              "c.zz: offset 0: corrupt gzip stream");
    CHECK(strstr(dt_last_error(), "incorrect header check") != NULL);
    /* A plain file read as zlib. */
    bytes b = {0};
    put_record(&b, "hello", 5);
    test_write_file(test_path("plain"), b.p, b.n);
    CHECK_ERR(read_all(test_path("plain"), DT_COMPRESSION_ZLIB, 0, &count), DT_ERR_FORMAT,
              "plain: offset 0: corrupt zlib stream");
    free(b.p);
    free(gz);
    free(zz);
}

/* The writer side of a pipe: n records of varied sizes, one of 2 MiB, through a writer over the
 * pipe's descriptor. */
typedef struct {
    int fd;
    dt_compression c;
    int n;
    dt_status st;
} pipe_job;

static size_t pipe_len(int i) { return i == 7 ? ((size_t)2 << 20) : (size_t)(i * 37 % 3001); }

static void *pipe_writer(void *arg)
{
    pipe_job *job = arg;
    uint8_t *data = malloc((size_t)2 << 20);
    dt_tfrecord_writer *w;
    job->st = dt_tfrecord_writer_open_fd(job->fd, "pipe-out", job->c, &w);
    for (int i = 0; i < job->n && job->st == DT_OK; i++) {
        fill_pattern(data, pipe_len(i), (unsigned)i);
        job->st = dt_tfrecord_write(w, data, pipe_len(i));
    }
    dt_status st = dt_tfrecord_writer_close(w);
    if (job->st == DT_OK)
        job->st = st;
    close(job->fd);
    free(data);
    return NULL;
}

TEST(tfrecord_reads_through_a_pipe)
{
    dt_compression modes[] = {DT_COMPRESSION_NONE, DT_COMPRESSION_GZIP};
    uint8_t *want = malloc((size_t)2 << 20);
    for (int m = 0; m < 2; m++) {
        int fds[2];
        CHECK(pipe(fds) == 0);
        pipe_job job = {fds[1], modes[m], 1500, DT_OK};
        pthread_t t;
        CHECK(pthread_create(&t, NULL, pipe_writer, &job) == 0);
        dt_tfrecord_reader *r;
        CHECK_OK(dt_tfrecord_open_fd(fds[0], "pipe-in", DT_COMPRESSION_AUTO, 0, &r));
        const uint8_t *d;
        size_t n;
        uint64_t off, expect_off = 0;
        int i = 0, bad = 0;
        dt_status st = DT_ERR_INVALID;
        while (r && (st = dt_tfrecord_next(r, &d, &n, &off)) == DT_OK) {
            fill_pattern(want, pipe_len(i), (unsigned)i);
            if (n != pipe_len(i) || off != expect_off || memcmp(d, want, n) != 0)
                bad++;
            expect_off += 16 + n;
            i++;
        }
        CHECK_MSG(st == DT_END, "mode %d: %s", m, dt_last_error());
        CHECK(i == 1500 && bad == 0);
        dt_tfrecord_close(r);
        pthread_join(t, NULL);
        CHECK_OK(job.st);
        close(fds[0]);
    }
    free(want);
}
