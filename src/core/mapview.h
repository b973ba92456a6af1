/* Read-only views of a file's bytes through mmap, for readers that go through a file once.
 *
 * A mapped file read by a cache-friendly loop costs no copy, where read() copies every byte once
 * more. The price of mmap is that a file truncated under a mapping raises SIGBUS on the next read
 * past its new end. A program that installs the guard (dt_mapview_guard_install: a process-wide
 * SIGBUS handler, passing every other fault on to the handler before it) gets views mapped: the
 * handler maps zeros over the page that faulted and marks the view. Without the guard, which the
 * library never installs on its own, a view's bytes are read into memory instead (a copy, no
 * signal), and a file cut short leaves zeros and marks the view the same way. Either way the
 * reader asks dt_mapview_shrunk before trusting what it read. */
#ifndef DTRAIN_MAPVIEW_H
#define DTRAIN_MAPVIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/process.h"
#include "dtrain/status.h"

/* Bytes readable after a view's last byte (of no particular value), for loads that run a little
 * past a record. */
#define DT_MAPVIEW_SLACK 64

/* Views open at once, over the whole process. */
#define DT_MAPVIEW_MAX 1024

typedef struct {
    const uint8_t *data; /* the bytes [off, off + len) of the file: data[i] is byte off + i */
    uint64_t off;
    size_t len;
    void *base;          /* the whole mapping (page-aligned), base_len bytes */
    size_t base_len;
    int guard;           /* its slot in the SIGBUS guard's table; -1 when closed or copied */
    bool copied_short;   /* read without the guard, and the file ended early */
} dt_mapview;

/* dt_mapview_guard_install (include/dtrain/process.h) installs the guard for the whole process. */

/* Maps bytes [off, off + len) of the open file fd (name for messages), followed by at least
 * DT_MAPVIEW_SLACK readable bytes; off need not be page-aligned, and the fd may be closed
 * afterwards. DT_ERR_IO when mmap fails or DT_MAPVIEW_MAX views are open already. */
dt_status dt_mapview_open(int fd, const char *name, uint64_t off, size_t len, dt_mapview *v);
/* A read of the view faulted since it was opened because the file had shrunk: zeros were read
 * in its place, and what was read is not the file's. */
bool dt_mapview_shrunk(const dt_mapview *v);
void dt_mapview_close(dt_mapview *v);

#endif
