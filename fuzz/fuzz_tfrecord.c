/* Fuzz target: the TFRecord reader on arbitrary bytes. The first input byte picks the mode: bits
 * 0-1 the compression (auto, none, gzip, zlib), bit 2 opening by path (/proc/self/fd) or by
 * descriptor, bits 3-4 the record size limit; the rest is the file, in a memory-backed file.
 * Every record is read until DT_END or a final error (a data CRC mismatch is not final: reading
 * goes on). Any status is fine; a crash, a sanitizer report, a record beyond the limit or offsets
 * that do not follow the framing are not. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dtrain/tfrecord.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    static const dt_compression modes[4] = {DT_COMPRESSION_AUTO, DT_COMPRESSION_NONE,
                                            DT_COMPRESSION_GZIP, DT_COMPRESSION_ZLIB};
    static const size_t limits[4] = {0, 16, 1000, (size_t)1 << 20};
    dt_compression c = modes[data[0] & 3];
    int by_path = (data[0] >> 2) & 1;
    size_t limit = limits[(data[0] >> 3) & 3];
    int fd = memfd_create("tfrecord", 0);
    if (fd < 0)
        return 0;
    if (size > 1 && write(fd, data + 1, size - 1) != (ssize_t)(size - 1))
        goto done;
    if (lseek(fd, 0, SEEK_SET) != 0)
        goto done;
    dt_tfrecord_reader *r = NULL;
    dt_status st;
    if (by_path) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        st = dt_tfrecord_open(path, c, limit, &r);
    } else {
        st = dt_tfrecord_open_fd(fd, "fuzz", c, limit, &r);
    }
    if (st)
        goto done;
    size_t max = limit ? limit : DT_TFRECORD_DEFAULT_MAX_RECORD_BYTES;
    uint64_t next_off = 0;
    int after_bad = 0;
    for (int i = 0; i < 100000; i++) {
        const uint8_t *d;
        size_t n;
        uint64_t off;
        st = dt_tfrecord_next(r, &d, &n, &off);
        if (st == DT_OK) {
            /* Records follow each other exactly, except after a skipped bad one. */
            if (n > max || (!after_bad && off != next_off) || off < next_off)
                __builtin_trap();
            if (n) /* touch every byte: the record must be readable memory */
                if (d[0] + d[n - 1] == 1000)
                    __builtin_trap();
            next_off = off + 16 + n;
            after_bad = 0;
        } else if (st == DT_END) {
            break;
        } else if (dt_tfrecord_can_continue(r)) {
            if (st != DT_ERR_FORMAT || !strstr(dt_last_error(), "data CRC mismatch"))
                __builtin_trap();
            after_bad = 1;
        } else {
            break;
        }
    }
    dt_tfrecord_close(r);
done:
    close(fd);
    return 0;
}
