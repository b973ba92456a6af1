/* TensorBoard event files (see include/dtrain/summary.h).
 *
 * The writer frames records itself (tfrecord.h's layout, crc32c.h's masked CRC) over its own
 * descriptor instead of using dt_tfrecord_writer: that writer has no flush short of close, and a
 * running job must be able to push its figures to TensorBoard at any time. Events are small
 * (under 300 bytes), so a fixed buffer holds many of them and write(2) is called only on flush,
 * when the buffer fills, and at close.
 *
 * Events are encoded the way a proto3 serializer (TensorFlow's own writer) encodes them: fields
 * in field-number order, and a scalar field left out when it holds its default (step 0,
 * wall_time +0.0), so our files are byte-identical to TF's for the same event. Fields inside a
 * oneof (file_version, summary, Value.simple_value) are always written: their presence is what
 * tells a reader which member is set, so a simple_value of 0.0 must still be on the wire. */
#include "dtrain/summary.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/bytes.h"
#include "../core/crc32c.h"
#include "dtrain/tfrecord.h"

#define MAX_TAG_BYTES 255
#define BUF_BYTES ((size_t)64 << 10)
#define HEADER_BYTES DT_TFRECORD_HEADER_BYTES
#define FOOTER_BYTES DT_TFRECORD_FOOTER_BYTES
/* An encoded scalar event: wall_time (1 + 8), step (1 + 10), summary key and length (1 + 2),
 * Value key and length (1 + 2), tag key and length (1 + 2) and bytes, simple_value (1 + 4). */
#define MAX_EVENT_BYTES (9 + 11 + 3 + 3 + 3 + MAX_TAG_BYTES + 5)
#define MAX_ATTEMPTS 1000 /* ".<pid>.<n>" names tried before giving up */

/* Protobuf wire types. */
enum { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2, WT_FIXED32 = 5 };

struct dt_summary_writer {
    int fd;
    char *path;
    uint8_t *buf; /* framed records waiting for write() */
    size_t buf_n;
    uint64_t file_off; /* bytes written to the file so far, for messages */
    dt_status sticky;  /* the first I/O error; after it the writer accepts nothing */
    char sticky_msg[512];
};

/* ---- protobuf encoding ---- */

/* A bounded output cursor: writes past cap are counted but not stored, so an encoder runs to the
 * end and the caller compares the final length with cap once. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} out_buf;

static void put_byte(out_buf *o, uint8_t b)
{
    if (o->n < o->cap)
        o->p[o->n] = b;
    o->n++;
}

static void put_bytes(out_buf *o, const void *data, size_t n)
{
    if (o->n <= o->cap && n <= o->cap - o->n)
        memcpy(o->p + o->n, data, n);
    o->n += n;
}

static void put_varint(out_buf *o, uint64_t v)
{
    while (v >= 0x80) {
        put_byte(o, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    put_byte(o, (uint8_t)v);
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static void put_key(out_buf *o, unsigned field, unsigned wire_type)
{
    put_varint(o, (uint64_t)field << 3 | wire_type);
}

/* Fixed-width fields are little endian whatever the host. */
static void put_fixed64(out_buf *o, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        put_byte(o, (uint8_t)(v >> (8 * i)));
}

static void put_fixed32(out_buf *o, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        put_byte(o, (uint8_t)(v >> (8 * i)));
}

static uint64_t double_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Event.wall_time = 1 (double), left out at +0.0 as proto3 does (-0.0 has bits and is kept). */
static void put_wall_time(out_buf *o, double wall_time)
{
    uint64_t bits = double_bits(wall_time);
    if (bits != 0) {
        put_key(o, 1, WT_FIXED64);
        put_fixed64(o, bits);
    }
}

size_t dt_event_encode_scalar(uint8_t *buf, size_t cap, double wall_time, int64_t step,
                              const char *tag, float value)
{
    out_buf o = {buf, 0, cap};
    size_t tag_n = tag ? strlen(tag) : 0;
    /* Value { tag = 1; simple_value = 2 }; an empty tag is left out like any proto3 default
     * (dt_summary_scalar refuses one, but other callers of this function may not). */
    size_t tag_field_n = tag_n ? 1 + varint_len(tag_n) + tag_n : 0;
    size_t value_n = tag_field_n + 1 + 4;
    size_t summary_n = 1 + varint_len(value_n) + value_n; /* Summary { repeated Value value = 1 } */
    put_wall_time(&o, wall_time);
    if (step != 0) {
        put_key(&o, 2, WT_VARINT);
        put_varint(&o, (uint64_t)step); /* int64: two's complement, so negatives take 10 bytes */
    }
    put_key(&o, 5, WT_LEN); /* Event.summary */
    put_varint(&o, summary_n);
    put_key(&o, 1, WT_LEN); /* Summary.value */
    put_varint(&o, value_n);
    if (tag_n) {
        put_key(&o, 1, WT_LEN); /* Value.tag */
        put_varint(&o, tag_n);
        put_bytes(&o, tag, tag_n);
    }
    put_key(&o, 2, WT_FIXED32); /* Value.simple_value */
    put_fixed32(&o, float_bits(value));
    return o.n <= cap ? o.n : 0;
}

size_t dt_event_encode_file_version(uint8_t *buf, size_t cap, double wall_time)
{
    static const char version[] = "brain.Event:2";
    out_buf o = {buf, 0, cap};
    put_wall_time(&o, wall_time);
    put_key(&o, 3, WT_LEN); /* Event.file_version */
    put_varint(&o, sizeof version - 1);
    put_bytes(&o, version, sizeof version - 1);
    return o.n <= cap ? o.n : 0;
}

/* ---- the file ---- */

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Records the first I/O error (the thread-local message is overwritten by later calls, and close
 * must still be able to report it) and returns it. */
static dt_status set_sticky(dt_summary_writer *w, dt_status st)
{
    if (!w->sticky) {
        w->sticky = st;
        snprintf(w->sticky_msg, sizeof w->sticky_msg, "%s", dt_last_error());
    }
    return st;
}

static dt_status write_buffer(dt_summary_writer *w)
{
    const uint8_t *p = w->buf;
    size_t n = w->buf_n;
    w->buf_n = 0;
    while (n > 0) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return set_sticky(w, dt_error(DT_ERR_IO, "%s: offset %llu: write: %s", w->path,
                                          (unsigned long long)w->file_off, strerror(errno)));
        p += k;
        n -= (size_t)k;
        w->file_off += (uint64_t)k;
    }
    return DT_OK;
}

/* Frames one event into the buffer, writing the buffer out first if the record would not fit. */
static dt_status append_record(dt_summary_writer *w, const uint8_t *data, size_t n)
{
    if (w->sticky)
        return dt_error(w->sticky, "%s: writing stopped at an earlier error: %s", w->path,
                        w->sticky_msg);
    size_t need = HEADER_BYTES + n + FOOTER_BYTES;
    if (w->buf_n + need > BUF_BYTES) {
        dt_status st = write_buffer(w);
        if (st)
            return st;
    }
    uint8_t *p = w->buf + w->buf_n;
    dt_tfrecord_encode_frame(data, n, p, p + HEADER_BYTES + n);
    memcpy(p + HEADER_BYTES, data, n);
    w->buf_n += need;
    return DT_OK;
}

/* mkdir -p: creates each missing component of dir (mode 0755, less the umask). */
static dt_status make_dirs(const char *dir)
{
    char path[PATH_MAX];
    size_t n = strlen(dir);
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        if (path[i - 1] == '/') /* a doubled slash: nothing new to create */
            continue;
        char saved = path[i];
        path[i] = '\0';
        if (mkdir(path, 0755) != 0) {
            int err = errno;
            struct stat sb;
            /* A directory already there is fine, whatever mkdir said (EEXIST, or EACCES/EROFS
             * for an existing parent on some systems); for anything else at that name, say what
             * is in the way. */
            if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
                path[i] = saved;
                continue;
            }
            return dt_error(DT_ERR_IO, "%s: cannot create log directory %s: %s", dir, path,
                            strerror(err == EEXIST ? ENOTDIR : err));
        }
        path[i] = saved;
    }
    return DT_OK;
}

/* Creates the event file under a name no other writer holds: O_EXCL makes two writers in the
 * same second on the same host (two workers, a restarted job) pick different names instead of
 * one truncating the other. */
static dt_status create_file(const char *dir, long long secs, char **path_out, int *fd_out)
{
    char host[256];
    if (gethostname(host, sizeof host) != 0 || !host[0])
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0'; /* gethostname may truncate without a terminator */
    for (char *c = host; *c; c++)
        if (*c == '/') /* it becomes part of a file name */
            *c = '_';
    size_t cap = strlen(dir) + strlen(host) + 96;
    char *path = malloc(cap);
    if (!path)
        return dt_error(DT_ERR_NOMEM, "%s: no memory for the event file's name", dir);
    long pid = (long)getpid();
    for (int attempt = 0; attempt <= MAX_ATTEMPTS; attempt++) {
        int k = snprintf(path, cap, "%s/events.out.tfevents.%010lld.%s", dir, secs, host);
        if (attempt == 1)
            snprintf(path + k, cap - (size_t)k, ".%ld", pid);
        else if (attempt > 1)
            snprintf(path + k, cap - (size_t)k, ".%ld.%d", pid, attempt - 1);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) {
            *path_out = path;
            *fd_out = fd;
            return DT_OK;
        }
        if (errno != EEXIST) {
            dt_status st = dt_error(DT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
            free(path);
            return st;
        }
    }
    dt_status st = dt_error(DT_ERR_IO, "%s: cannot create an event file: %d names taken (last "
                            "tried %s)", dir, MAX_ATTEMPTS + 1, path);
    free(path);
    return st;
}

dt_status dt_summary_open(const char *logdir, dt_summary_writer **out)
{
    dt_status st;
    *out = NULL;
    if (!logdir || !logdir[0])
        return dt_error(DT_ERR_INVALID, "summary log directory: an empty path");
    size_t n = strlen(logdir);
    if (n >= PATH_MAX)
        return dt_error(DT_ERR_INVALID, "%.64s...: log directory path longer than %d bytes",
                        logdir, PATH_MAX - 1);
    /* Without trailing slashes, so the file's path reads dir/events... rather than dir//events. */
    char dir[PATH_MAX];
    while (n > 1 && logdir[n - 1] == '/')
        n--;
    memcpy(dir, logdir, n);
    dir[n] = '\0';
    if ((st = make_dirs(dir)))
        return st;

    dt_summary_writer *w = calloc(1, sizeof *w);
    if (!w)
        return dt_error(DT_ERR_NOMEM, "%s: no memory for a summary writer", dir);
    w->fd = -1;
    w->buf = malloc(BUF_BYTES);
    if (!w->buf) {
        st = dt_error(DT_ERR_NOMEM, "%s: no memory for a summary writer", dir);
        goto fail;
    }
    double now = wall_now();
    /* With "/" as the directory the name is written as "//events...": harmless, and nobody keeps
     * TensorBoard logs in the root. */
    if ((st = create_file(dir, (long long)now, &w->path, &w->fd)))
        goto fail;
    uint8_t ev[64];
    size_t ev_n = dt_event_encode_file_version(ev, sizeof ev, now);
    if ((st = append_record(w, ev, ev_n)))
        goto fail;
    /* Written at once, so even a job that dies before its first flush leaves a valid, readable
     * event file rather than an empty one. */
    if ((st = write_buffer(w)))
        goto fail;
    *out = w;
    return DT_OK;
fail:
    if (w->fd >= 0) {
        close(w->fd);
        unlink(w->path); /* ours (O_EXCL), and useless without its version record */
    }
    free(w->path);
    free(w->buf);
    free(w);
    return st;
}

const char *dt_summary_path(const dt_summary_writer *w) { return w->path; }

/* TensorBoard and TF's proto3 parsers want string fields to be UTF-8; a tag that is not would
 * make the event unreadable to them. Rejects overlong forms, surrogates and code points above
 * U+10FFFF, as protobuf's own check does. */
static int valid_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            len = 2, cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3, cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4, cp = c & 0x07;
        } else {
            return 0;
        }
        if (n - i < len)
            return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

dt_status dt_summary_scalar(dt_summary_writer *w, const char *tag, int64_t step, float value)
{
    /* A bad tag is the caller's mistake, not the file's: it is refused without stopping the
     * writer, so it is not the "first error" close reports. */
    if (!tag || !tag[0])
        return dt_error(DT_ERR_INVALID, "%s: a summary tag must not be empty", w->path);
    size_t n = strlen(tag);
    if (n > MAX_TAG_BYTES)
        return dt_error(DT_ERR_INVALID, "%s: summary tag '%.32s...' is %zu bytes, more than %d",
                        w->path, tag, n, MAX_TAG_BYTES);
    if (!valid_utf8((const unsigned char *)tag, n))
        return dt_error(DT_ERR_INVALID, "%s: summary tag is not valid UTF-8", w->path);
    uint8_t ev[MAX_EVENT_BYTES];
    size_t ev_n = dt_event_encode_scalar(ev, sizeof ev, wall_now(), step, tag, value);
    return append_record(w, ev, ev_n);
}

dt_status dt_summary_flush(dt_summary_writer *w)
{
    if (w->sticky)
        return dt_error(w->sticky, "%s", w->sticky_msg);
    return write_buffer(w);
}

dt_status dt_summary_close(dt_summary_writer *w)
{
    if (!w)
        return DT_OK;
    dt_status st = w->sticky ? dt_error(w->sticky, "%s", w->sticky_msg) : write_buffer(w);
    /* A full disk or a network file system may only report at close. */
    if (close(w->fd) != 0 && !st)
        st = dt_error(DT_ERR_IO, "%s: close: %s", w->path, strerror(errno));
    free(w->path);
    free(w->buf);
    free(w);
    return st;
}
