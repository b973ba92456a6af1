/* Fuzz target: the IDX reader, raw and gzip'd, on arbitrary bytes. The input goes through a
 * memory-backed file so the real path (stat, gzopen, gzread) is exercised. Any return status is
 * fine; a crash, a sanitizer report or an allocation beyond the input's means is not. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dtrain/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("idx", 0);
    if (fd < 0)
        return 0;
    if (size == 0 || write(fd, data, size) == (ssize_t)size) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        dt_idx idx;
        if (dt_idx_read(path, &idx) == DT_OK) {
            /* The header's sizes must describe exactly the data returned. */
            size_t n = 1;
            for (int d = 0; d < idx.n_dims; d++)
                n *= idx.dims[d];
            if (n != idx.n_bytes)
                __builtin_trap();
            dt_idx_free(&idx);
        }
    }
    close(fd);
    return 0;
}
