/* summary: events are encoded as the protobuf wire format says (bytes derived by hand below), the
 * event file is named and framed as TensorBoard expects, records reach the file on flush, and
 * Google's protobuf library (tests/progs/read_events.py) decodes what we wrote. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/core/crc32c.h"
#include "dtrain/summary.h"
#include "dtrain/tfrecord.h"
#include "test.h"

/* Compares got[0..got_n) with want[0..want_n), reporting the first differing byte. */
#define CHECK_BYTES(got, got_n, want, want_n)                                                      \
    do {                                                                                           \
        size_t gn_ = (got_n), wn_ = (want_n);                                                      \
        const uint8_t *g_ = (got), *w_ = (want);                                                   \
        CHECK_MSG(gn_ == wn_, "%s: %zu bytes, expected %zu", #got, gn_, wn_);                     \
        for (size_t i_ = 0; i_ < gn_ && i_ < wn_; i_++)                                           \
            if (g_[i_] != w_[i_]) {                                                                \
                test_fail(__FILE__, __LINE__, "%s: byte %zu is %02x, expected %02x", #got, i_,    \
                          g_[i_], w_[i_]);                                                         \
                break;                                                                             \
            }                                                                                      \
    } while (0)

TEST(summary_encodes_a_scalar_event_as_the_wire_format_says)
{
    /* Event{wall_time = 1.5, step = 300, summary = Summary{value = [Value{tag = "loss",
     * simple_value = 0.5}]}}. Keys are (field << 3 | wire type). */
    static const uint8_t want[] = {
        0x09,                                           /* Event.wall_time: field 1, fixed64 */
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF8, 0x3F, /* 1.5 = 0x3FF8000000000000, LE */
        0x10,                                           /* Event.step: field 2, varint */
        0xAC, 0x02,                                     /* 300 = 0b10_0101100: 0x2C|0x80, 0x02 */
        0x2A,                                           /* Event.summary: field 5, length */
        0x0D,                                           /* 13 bytes of Summary follow */
        0x0A,                                           /* Summary.value: field 1, length */
        0x0B,                                           /* 11 bytes of Value follow */
        0x0A,                                           /* Value.tag: field 1, length */
        0x04, 'l', 'o', 's', 's',                       /* 4 bytes of tag */
        0x15,                                           /* Value.simple_value: field 2, fixed32 */
        0x00, 0x00, 0x00, 0x3F,                         /* 0.5f = 0x3F000000, LE */
    };
    uint8_t buf[64];
    size_t n = dt_event_encode_scalar(buf, sizeof buf, 1.5, 300, "loss", 0.5f);
    CHECK_BYTES(buf, n, want, sizeof want);
    /* The exact size is enough; one byte less is not, whatever is short. */
    CHECK(dt_event_encode_scalar(buf, sizeof want, 1.5, 300, "loss", 0.5f) == sizeof want);
    for (size_t cap = 0; cap < sizeof want; cap++)
        CHECK_MSG(dt_event_encode_scalar(buf, cap, 1.5, 300, "loss", 0.5f) == 0, "cap %zu", cap);
    CHECK(dt_event_encode_scalar(NULL, 0, 1.5, 300, "loss", 0.5f) == 0);
}

TEST(summary_encodes_defaults_and_negative_steps_like_proto3)
{
    /* wall_time +0.0 and step 0 are proto3 defaults and are left out; simple_value sits in TF's
     * Value.value oneof, so 0.0 is still written (without it a reader sees no scalar). */
    static const uint8_t zero[] = {
        0x2A, 0x0A,             /* Event.summary, 10 bytes */
        0x0A, 0x08,             /* Summary.value, 8 bytes */
        0x0A, 0x01, 'a',        /* Value.tag = "a" */
        0x15, 0x00, 0x00, 0x00, 0x00, /* Value.simple_value = 0.0f */
    };
    uint8_t buf[64];
    size_t n = dt_event_encode_scalar(buf, sizeof buf, 0.0, 0, "a", 0.0f);
    CHECK_BYTES(buf, n, zero, sizeof zero);

    /* int64 -1 is the varint of its two's complement 2^64 - 1: nine 0xFF and a final 0x01. */
    static const uint8_t negative[] = {
        0x10,                                                       /* Event.step, varint */
        0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, /* -1 */
        0x2A, 0x0A, 0x0A, 0x08, 0x0A, 0x01, 'a',                    /* summary, value, tag */
        0x15, 0x00, 0x00, 0x80, 0xBF,                               /* -1.0f = 0xBF800000, LE */
    };
    n = dt_event_encode_scalar(buf, sizeof buf, 0.0, -1, "a", -1.0f);
    CHECK_BYTES(buf, n, negative, sizeof negative);
}

TEST(summary_encodes_two_byte_lengths)
{
    /* A 200-byte tag: every length from the tag's outwards needs a two-byte varint. */
    char tag[201];
    memset(tag, 't', 200);
    tag[200] = '\0';
    static const uint8_t head[] = {
        0x10, 0x01, /* Event.step = 1 */
        0x2A,       /* Event.summary */
        0xD3, 0x01, /* 211 = 1 + 2 + 208: 0x53|0x80, 0x01 */
        0x0A,       /* Summary.value */
        0xD0, 0x01, /* 208 = 1 + 2 + 200 + 5: 0x50|0x80, 0x01 */
        0x0A,       /* Value.tag */
        0xC8, 0x01, /* 200: 0x48|0x80, 0x01 */
    };
    static const uint8_t tail[] = {0x15, 0x00, 0x00, 0x10, 0x40}; /* 2.25f = 0x40100000 */
    uint8_t buf[512];
    size_t n = dt_event_encode_scalar(buf, sizeof buf, 0.0, 1, tag, 2.25f);
    CHECK(n == sizeof head + 200 + sizeof tail);
    if (n != sizeof head + 200 + sizeof tail)
        return;
    CHECK_BYTES(buf, sizeof head, head, sizeof head);
    for (size_t i = 0; i < 200; i++)
        CHECK_MSG(buf[sizeof head + i] == 't', "tag byte %zu", i);
    CHECK_BYTES(buf + sizeof head + 200, sizeof tail, tail, sizeof tail);
}

TEST(summary_encodes_the_file_version_event)
{
    static const uint8_t want[] = {
        0x09,                                           /* Event.wall_time, fixed64 */
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF8, 0x3F, /* 1.5 */
        0x1A,                                           /* Event.file_version: field 3, length */
        0x0D,                                           /* 13 bytes */
        'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2',
    };
    uint8_t buf[64];
    size_t n = dt_event_encode_file_version(buf, sizeof buf, 1.5);
    CHECK_BYTES(buf, n, want, sizeof want);
    CHECK(dt_event_encode_file_version(buf, sizeof want - 1, 1.5) == 0);
}

/* ---- event files ---- */

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

/* The hostname as it appears in event file names. */
static void host_name(char *buf, size_t cap)
{
    if (gethostname(buf, cap) != 0 || !buf[0])
        snprintf(buf, cap, "localhost");
    buf[cap - 1] = '\0';
    for (char *c = buf; *c; c++)
        if (*c == '/')
            *c = '_';
}

/* Checks that path is dir/events.out.tfevents.<10 digits>.<host><suffix> with a time in
 * [t0, t1]; returns the seconds, or -1. */
static long long check_name(const char *path, const char *dir, double t0, double t1,
                            const char *suffix)
{
    char host[256];
    host_name(host, sizeof host);
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s/events.out.tfevents.", dir);
    size_t pn = strlen(prefix);
    CHECK_MSG(strncmp(path, prefix, pn) == 0, "'%s' does not start with '%s'", path, prefix);
    if (strncmp(path, prefix, pn) != 0)
        return -1;
    const char *p = path + pn;
    long long secs = 0;
    for (int i = 0; i < 10; i++) {
        CHECK_MSG(p[i] >= '0' && p[i] <= '9', "'%s': not 10 digits of seconds", path);
        if (p[i] < '0' || p[i] > '9')
            return -1;
        secs = secs * 10 + (p[i] - '0');
    }
    CHECK_MSG(secs >= (long long)t0 && secs <= (long long)t1, "'%s': time %lld not in [%.0f, %.0f]",
              path, secs, t0, t1);
    char rest[600];
    snprintf(rest, sizeof rest, ".%s%s", host, suffix);
    CHECK_MSG(strcmp(p + 10, rest) == 0, "'%s' ends in '%s', expected '%s'", path, p + 10, rest);
    return secs;
}

static double le_double(const uint8_t *p)
{
    uint64_t u = 0;
    for (int i = 7; i >= 0; i--)
        u = u << 8 | p[i];
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

TEST(summary_writes_a_version_event_then_scalars_on_flush)
{
    /* Two missing levels (mkdir -p) and a trailing slash. */
    const char *dir = test_path("sum_flush/runs/a");
    char dir_slash[600];
    snprintf(dir_slash, sizeof dir_slash, "%s/", dir);
    double t0 = now_seconds();
    dt_summary_writer *w = NULL;
    CHECK_OK(dt_summary_open(dir_slash, &w));
    if (!w)
        return;
    char path[1024]; /* a copy: the writer's own is freed by close */
    snprintf(path, sizeof path, "%s", dt_summary_path(w));
    check_name(path, dir, t0, now_seconds(), "");

    /* The version event reaches the file at open: 12 + 24 + 4 bytes. */
    CHECK(file_size(path) == 40);
    enum { N = 5 };
    const char *tags[N] = {"loss", "accuracy", "train/loss", "loss", "lr"};
    const int64_t steps[N] = {0, 1, 300, -5, (int64_t)1 << 40};
    const float values[N] = {0.5f, 2.25f, -1.0f, 0.0f, 1e-3f};
    for (int i = 0; i < N; i++)
        CHECK_OK(dt_summary_scalar(w, tags[i], steps[i], values[i]));
    /* Buffered until the flush... */
    CHECK(file_size(path) == 40);
    CHECK_OK(dt_summary_flush(w));
    double t1 = now_seconds();
    /* ...and all there after it, while the writer is still open. */
    long long size = file_size(path);
    CHECK_MSG(size > 40, "size %lld after flush", size);

    dt_tfrecord_reader *r = NULL;
    CHECK_OK(dt_tfrecord_open(path, DT_COMPRESSION_NONE, 0, &r));
    int count = 0;
    if (r) {
        const uint8_t *data;
        size_t n;
        dt_status st;
        while ((st = dt_tfrecord_next(r, &data, &n, NULL)) == DT_OK) {
            /* Every event starts with its wall time, which must be now; the rest is compared
             * with the encoder's bytes for that time. */
            CHECK_MSG(n > 9 && data[0] == 0x09, "record %d: no wall_time first", count);
            if (n <= 9 || data[0] != 0x09) {
                count++;
                continue;
            }
            double wall = le_double(data + 1);
            CHECK_MSG(wall >= t0 - 0.01 && wall <= t1 + 0.01, "record %d: wall_time %.6f not in "
                      "[%.6f, %.6f]", count, wall, t0, t1);
            uint8_t want[512];
            size_t want_n = count == 0
                ? dt_event_encode_file_version(want, sizeof want, wall)
                : count <= N ? dt_event_encode_scalar(want, sizeof want, wall, steps[count - 1],
                                                      tags[count - 1], values[count - 1])
                             : 0;
            CHECK_MSG(want_n > 0, "record %d: more records than written", count);
            if (want_n)
                CHECK_BYTES(data, n, want, want_n);
            count++;
        }
        CHECK_MSG(st == DT_END, "reader: %s", dt_last_error());
        dt_tfrecord_close(r);
    }
    CHECK_MSG(count == 1 + N, "%d records, expected %d", count, 1 + N);
    CHECK_OK(dt_summary_close(w));
    CHECK(file_size(path) == size); /* nothing was left for close */
}

TEST(summary_close_writes_what_was_not_flushed)
{
    dt_summary_writer *w = NULL;
    CHECK_OK(dt_summary_open(test_path("sum_close"), &w));
    if (!w)
        return;
    char path[1024];
    snprintf(path, sizeof path, "%s", dt_summary_path(w));
    /* Enough events to fill the writer's buffer several times over. */
    for (int i = 0; i < 3000; i++)
        CHECK_OK(dt_summary_scalar(w, "a/rather/long/tag/name/for/the/buffer", i, (float)i));
    CHECK_OK(dt_summary_close(w));
    CHECK_OK(dt_summary_close(NULL));
    dt_tfrecord_reader *r = NULL;
    CHECK_OK(dt_tfrecord_open(path, DT_COMPRESSION_NONE, 0, &r));
    if (!r)
        return;
    const uint8_t *data;
    size_t n;
    int count = 0;
    dt_status st;
    while ((st = dt_tfrecord_next(r, &data, &n, NULL)) == DT_OK)
        count++;
    CHECK_MSG(st == DT_END, "reader: %s", dt_last_error());
    CHECK_MSG(count == 3001, "%d records", count);
    dt_tfrecord_close(r);
}

TEST(summary_never_overwrites_an_existing_event_file)
{
    const char *dir = test_path("sum_excl");
    mkdir(dir, 0755);
    char host[256];
    host_name(host, sizeof host);
    long pid = (long)getpid();
    /* Take this second's name, then open two writers: the first must get ".<pid>", the second
     * ".<pid>.1". Should the second tick over meanwhile, the names are fresh: try again. */
    for (int attempt = 0; attempt < 5; attempt++) {
        long long secs = (long long)now_seconds();
        char taken[1024], want1[1100], want2[1200];
        snprintf(taken, sizeof taken, "%s/events.out.tfevents.%010lld.%s", dir, secs, host);
        snprintf(want1, sizeof want1, "%s.%ld", taken, pid);
        snprintf(want2, sizeof want2, "%s.1", want1);
        test_write_file(taken, "keep", 4);
        dt_summary_writer *w1 = NULL, *w2 = NULL;
        CHECK_OK(dt_summary_open(dir, &w1));
        CHECK_OK(dt_summary_open(dir, &w2));
        int same_second = (long long)now_seconds() == secs;
        if (w1 && w2 && same_second) {
            CHECK_MSG(strcmp(dt_summary_path(w1), want1) == 0, "path '%s', expected '%s'",
                      dt_summary_path(w1), want1);
            CHECK_MSG(strcmp(dt_summary_path(w2), want2) == 0, "path '%s', expected '%s'",
                      dt_summary_path(w2), want2);
            CHECK(file_size(taken) == 4); /* untouched */
            CHECK(file_size(want1) == 40 && file_size(want2) == 40);
        }
        CHECK_OK(dt_summary_close(w1));
        CHECK_OK(dt_summary_close(w2));
        if (!w1 || !w2 || same_second)
            return;
    }
    CHECK_MSG(0, "the clock ticked over at every attempt");
}

TEST(summary_open_under_a_regular_file_names_the_path)
{
    const char *plain = test_path("sum_plain");
    test_write_file(plain, "x", 1);
    char logdir[1024];
    snprintf(logdir, sizeof logdir, "%s/logs/run1", plain);
    dt_summary_writer *w = (dt_summary_writer *)1;
    CHECK_ERR(dt_summary_open(logdir, &w), DT_ERR_IO, logdir);
    CHECK(w == NULL);
    CHECK_ERR(dt_summary_open(logdir, &w), DT_ERR_IO, "Not a directory");
    /* The log directory itself a regular file. */
    CHECK_ERR(dt_summary_open(plain, &w), DT_ERR_IO, plain);
    CHECK_ERR(dt_summary_open("", &w), DT_ERR_INVALID, "empty");
}

TEST(summary_rejects_bad_tags_and_keeps_going)
{
    dt_summary_writer *w = NULL;
    CHECK_OK(dt_summary_open(test_path("sum_tags"), &w));
    if (!w)
        return;
    char tag[300];
    memset(tag, 'x', sizeof tag);
    tag[255] = '\0';
    CHECK_OK(dt_summary_scalar(w, tag, 1, 1.0f)); /* 255 bytes: the limit */
    tag[255] = 'x';
    tag[256] = '\0';
    CHECK_ERR(dt_summary_scalar(w, tag, 2, 1.0f), DT_ERR_INVALID, "256 bytes");
    CHECK_ERR(dt_summary_scalar(w, "", 2, 1.0f), DT_ERR_INVALID, "empty");
    CHECK_ERR(dt_summary_scalar(w, "bad\xff", 2, 1.0f), DT_ERR_INVALID, "UTF-8");
    CHECK_ERR(dt_summary_scalar(w, "\xc0\xaf", 2, 1.0f), DT_ERR_INVALID, "UTF-8"); /* overlong */
    CHECK_OK(dt_summary_scalar(w, "caf\xc3\xa9/\xe2\x82\xac", 3, 2.0f));
    CHECK_OK(dt_summary_close(w)); /* refused tags are not the writer's errors */
}

/* ---- decoded by Google's protobuf ---- */

/* Runs read_events.py on path; returns its exit status (-1 if it could not be run) with its
 * stdout and stderr in out. */
static int run_reader(const char *path, char *out, size_t cap)
{
    static const char script[] = "tests/progs/read_events.py";
    out[0] = '\0';
    if (access(script, R_OK) != 0) {
        snprintf(out, cap, "%s not found: run the tests from the repository root", script);
        return -1;
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "python3 %s '%s' 2>&1", script, path);
    FILE *p = popen(cmd, "r");
    if (!p) {
        snprintf(out, cap, "popen failed");
        return -1;
    }
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(summary_file_is_read_by_google_protobuf)
{
    dt_summary_writer *w = NULL;
    double t0 = now_seconds();
    CHECK_OK(dt_summary_open(test_path("sum_python"), &w));
    if (!w)
        return;
    char path[1024];
    snprintf(path, sizeof path, "%s", dt_summary_path(w));
    CHECK_OK(dt_summary_scalar(w, "loss", 0, 0.5f));
    CHECK_OK(dt_summary_scalar(w, "accuracy", 1, 2.25f));
    CHECK_OK(dt_summary_scalar(w, "train/loss", 300, -1.0f));
    CHECK_OK(dt_summary_scalar(w, "zero", -7, 0.0f));
    CHECK_OK(dt_summary_scalar(w, "tenth", (int64_t)1 << 40, 0.1f));
    CHECK_OK(dt_summary_scalar(w, "caf\xc3\xa9", 2, 1e30f));
    CHECK_OK(dt_summary_flush(w)); /* read while the writer is open, as TensorBoard does */

    char out[8192];
    int status = run_reader(path, out, sizeof out);
    CHECK_MSG(status == 0, "read_events.py exited %d (python3 with google.protobuf is required: "
              "Debian's python3-protobuf): %s", status, out);
    double t1 = now_seconds();
    if (status == 0) {
        /* repr() of each float32 widened to a double: 0.1f is not 0.1, 1e30f is not 1e30. */
        static const char want_scalars[] = "scalar 0 loss 0.5\n"
                                           "scalar 1 accuracy 2.25\n"
                                           "scalar 300 train/loss -1.0\n"
                                           "scalar -7 zero 0.0\n"
                                           "scalar 1099511627776 tenth 0.10000000149011612\n"
                                           "scalar 2 caf\xc3\xa9 1.0000000150474662e+30\n";
        static const char version[] = "version brain.Event:2 ";
        CHECK_MSG(strncmp(out, version, strlen(version)) == 0, "first line: %s", out);
        char *nl = strchr(out, '\n');
        if (strncmp(out, version, strlen(version)) == 0 && nl) {
            double wall = strtod(out + strlen(version), NULL);
            CHECK_MSG(wall >= t0 - 0.01 && wall <= t1 + 0.01, "wall_time %.6f not in [%.6f, %.6f]",
                      wall, t0, t1);
            CHECK_MSG(strcmp(nl + 1, want_scalars) == 0, "scalars:\n%s\nexpected:\n%s", nl + 1,
                      want_scalars);
        }
    }
    CHECK_OK(dt_summary_close(w));

    /* The reader is a real check: a flipped byte in the second record's data fails it, naming
     * the file and the record's offset (the version record takes bytes 0..39). */
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(fseek(f, 40 + 12 + 3, SEEK_SET) == 0);
    int c = fgetc(f);
    CHECK(fseek(f, 40 + 12 + 3, SEEK_SET) == 0);
    fputc(c ^ 0x01, f);
    fclose(f);
    status = run_reader(path, out, sizeof out);
    CHECK_MSG(status == 1, "read_events.py on a corrupt file exited %d: %s", status, out);
    CHECK_MSG(strstr(out, path) && strstr(out, "offset 40:") && strstr(out, "crc"),
              "message lacks the file, offset or crc: %s", out);
}
