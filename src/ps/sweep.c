/* A ps task's orphaned temporary files, removed (see sweep.h). */
#include "sweep.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/fileio.h"
#include "dtrain/log.h"

/* Whether the n-byte name at p is all digits (at least one). */
static bool digits(const char *p, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return false;
    return true;
}

/* Whether target (n bytes, not NUL-terminated) names a file of ps task ps_index: its snapshot or
 * one of its checkpoint shard files. */
static bool own_file(const char *target, size_t n, int ps_index)
{
    char snap[48], shard[48];
    int k = snprintf(snap, sizeof snap, "ps-%d.snapshot", ps_index);
    if ((size_t)k == n && memcmp(target, snap, n) == 0)
        return true;
    /* ckpt-<step>.ps-<index>-of-<n>.safetensors */
    static const char ext[] = ".safetensors";
    size_t ext_n = sizeof ext - 1;
    if (n < 5 + ext_n || memcmp(target, "ckpt-", 5) != 0 ||
        memcmp(target + n - ext_n, ext, ext_n) != 0)
        return false;
    const char *mid = memchr(target + 5, '.', n - 5);
    if (!mid || !digits(target + 5, (size_t)(mid - target - 5)))
        return false;
    k = snprintf(shard, sizeof shard, ".ps-%d-of-", ps_index);
    const char *end = target + n - ext_n;
    return (size_t)(end - mid) > (size_t)k && memcmp(mid, shard, (size_t)k) == 0 &&
           digits(mid + k, (size_t)(end - mid - k));
}

int dt_ps_sweep_temps(const char *dir, int ps_index, FILE *log)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t target_len;
        if (!dt_file_replace_orphan(e->d_name, &target_len) ||
            !own_file(e->d_name, target_len, ps_index))
            continue;
        char path[DT_PATH_CAP + 300];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0) {
            removed++;
            dt_log_to(log, DT_LOG_WARN, "dtrain server: removed %s, left by a write of this ps "
                      "task that failed or was stopped", path);
        }
    }
    closedir(d);
    return removed;
}
