/* Fuzz target: the fused TFRecord stage (tfrecord -> batch -> parse_examples as one stage, whose
 * workers map byte ranges and look for record headers in them) against the three stages run
 * one after the other, on the same file. Both must give the same elements (rows, values, index,
 * file, offset), the same final status and message, and the same count of skipped records, over
 * two iterations. A difference is a crash.
 *
 * The first input byte picks the run: bits 0-1 the batch size (1, 3, 7, 64), bit 2
 * drop_remainder, bit 3 skip_bad_records, bits 4-5 the range size (13, 61 or 300 bytes, or the
 * default: whole files), bit 6 one or two threads, bit 7 a spec with a variable-length feature
 * (sparse rows, built through the row builder) instead of dense ones only. The second byte picks
 * how the rest becomes the file: with bit 0 clear the rest is the file itself; with it set, the
 * rest is split at each 0xff byte into record payloads that are framed as valid records (length,
 * length CRC, data, data CRC), and bits 1-7, when not zero, name a byte of the file (that many
 * 128ths of the way in) to flip, so headers and CRCs break in the middle of sound framing. */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../src/core/crc32c.h"
#include "dtrain/sources.h"

typedef struct {
    char *p;
    size_t len, cap;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0)
            __builtin_trap();
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        t->cap = (t->cap + (size_t)n) * 2;
        if (!(t->p = realloc(t->p, t->cap)))
            __builtin_trap();
    }
}

/* Everything the pipeline gives, as text, over two iterations. */
static char *transcript(const dt_file_list *files, const dt_example_spec *spec, int64_t batch,
                        bool drop, int threads, bool skip, bool fuse, size_t range)
{
    text t = {malloc(4096), 0, 4096};
    if (!t.p)
        __builtin_trap();
    t.p[0] = 0;
    int64_t bad = 0;
    dt_source_options o;
    dt_source_options_default(&o);
    o.fuse = fuse, o.skip_bad_records = skip, o.bad_records = &bad, o.buffer_bytes = range;
    dt_dataset *ds;
    if (dt_dataset_tfrecord(files, &o, &ds) || dt_dataset_batch(ds, batch, drop, &ds) ||
        dt_dataset_parse_examples(ds, spec, files, threads, &o, &ds))
        __builtin_trap();
    if ((strcmp(ds->ops->name, "tfrecord_batches") == 0) != fuse)
        __builtin_trap(); /* the fused stage must be the one compared */
    for (int pass = 0; pass < 2; pass++) {
        for (;;) {
            dt_elem *e;
            dt_status st = dt_dataset_next(ds, &e);
            if (st) {
                put(&t, "end %d '%s' bad %lld\n", st, st == DT_END ? "" : dt_last_error(),
                    (long long)bad);
                break;
            }
            put(&t, "n %d index %llu file %u pos %llu:", e->n, (unsigned long long)e->index,
                e->file, (unsigned long long)e->pos);
            for (int r = 0; r < e->n; r++) {
                put(&t, " [%a", e->labels[r]);
                for (int k = 0; k < e->n_dense; k++)
                    put(&t, " %a", e->dense[(size_t)r * e->n_dense + k]);
                for (int64_t k = e->sp_row[r]; k < e->sp_row[r + 1]; k++)
                    put(&t, " %lld:%a", (long long)e->sp_ids[k], e->sp_vals[k]);
                put(&t, "]");
            }
            put(&t, "\n");
            dt_elem_free(e);
        }
        if (dt_dataset_reset(ds))
            __builtin_trap();
    }
    dt_dataset_destroy(ds);
    return t.p;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The payloads in data (split at 0xff), each framed as a sound TFRecord record. */
static uint8_t *frame_records(const uint8_t *data, size_t size, size_t *out_len)
{
    size_t pieces = 1;
    for (size_t i = 0; i < size; i++)
        pieces += data[i] == 0xff;
    uint8_t *f = malloc(size + 16 * pieces + 1), *w = f;
    if (!f)
        __builtin_trap();
    size_t start = 0;
    for (size_t i = 0; i <= size; i++) {
        if (i < size && data[i] != 0xff)
            continue;
        size_t len = i - start;
        put_le(w, len, 8);
        put_le(w + 8, dt_crc32c_mask(dt_crc32c(w, 8)), 4);
        memcpy(w + 12, data + start, len);
        put_le(w + 12 + len, dt_crc32c_mask(dt_crc32c(data + start, len)), 4);
        w += 16 + len;
        start = i + 1;
    }
    *out_len = (size_t)(w - f);
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static dt_example_spec dense, sparse;
    static bool ready;
    if (!ready) {
        if (dt_example_spec_parse("x:1,a:1,b:1", "y", &dense) ||
            dt_example_spec_parse("x:1,a:0,b:1", "y", &sparse))
            __builtin_trap();
        ready = true;
    }
    if (size < 2)
        return 0;
    static const int64_t batches[4] = {1, 3, 7, 64};
    static const size_t ranges[4] = {13, 61, 300, 0};
    uint8_t mode = data[0], shape = data[1];
    const uint8_t *body = data + 2;
    size_t body_len = size - 2, file_len = body_len;
    uint8_t *file = (uint8_t *)body;
    if (shape & 1) {
        file = frame_records(body, body_len, &file_len);
        if ((shape >> 1) && file_len > 0)
            file[file_len * (shape >> 1) / 128] ^= 0x5a;
    }
    int fd = memfd_create("fused", 0);
    if (fd < 0)
        __builtin_trap();
    if (file_len > 0 && write(fd, file, file_len) != (ssize_t)file_len)
        __builtin_trap();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    char *paths[1] = {path};
    dt_file_list files = {paths, 1};
    const dt_example_spec *spec = mode & 0x80 ? &sparse : &dense;
    int64_t batch = batches[mode & 3];
    bool drop = mode & 4, skip = mode & 8;
    size_t range = ranges[(mode >> 4) & 3];
    int threads = mode & 0x40 ? 2 : 1;
    char *a = transcript(&files, spec, batch, drop, threads, skip, true, range);
    char *b = transcript(&files, spec, batch, drop, threads, skip, false, range);
    if (strcmp(a, b) != 0) {
        size_t k = 0;
        while (a[k] == b[k])
            k++;
        fprintf(stderr, "fused and staged differ at byte %zu:\n  fused:  %.300s\n  staged: %.300s\n",
                k, a + (k > 60 ? k - 60 : 0), b + (k > 60 ? k - 60 : 0));
        __builtin_trap();
    }
    free(a);
    free(b);
    close(fd);
    if (file != body)
        free(file);
    return 0;
}
