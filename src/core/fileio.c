/* Replacing a file whole (see fileio.h). */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* This host's name as temporaries carry it: at most 63 bytes, no '/'. */
static void host_name(char out[64])
{
    if (gethostname(out, 64) != 0)
        snprintf(out, 64, "localhost");
    out[63] = '\0';
    for (char *p = out; *p; p++)
        if (*p == '/')
            *p = '_';
}

bool dt_file_replace_orphan(const char *name, size_t *target_len)
{
    const char *t = strstr(name, ".tmp.");
    while (t && strstr(t + 1, ".tmp."))
        t = strstr(t + 1, ".tmp.");
    if (!t)
        return false;
    *target_len = (size_t)(t - name);
    char *end;
    errno = 0;
    long pid = strtol(t + 5, &end, 10);
    if (end == t + 5 || errno || pid <= 0)
        return false;
    if (*end == '.') {
        char host[64];
        host_name(host);
        if (strcmp(end + 1, host) != 0)
            return false; /* another host's: its pid means nothing here */
    } else if (*end) {
        return false;
    }
    return pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

dt_status dt_file_replace_begin(dt_file_replace *r, const char *path, bool in_place_if_special)
{
    memset(r, 0, sizeof *r);
    char host[64];
    host_name(host);
    if (snprintf(r->target, sizeof r->target, "%s", path) >= (int)sizeof r->target ||
        snprintf(r->tmp, sizeof r->tmp, "%s.tmp.%ld.%s", path, (long)getpid(), host) >=
            (int)sizeof r->tmp)
        return dt_error(DT_ERR_INVALID, "%s: path too long", path);
    struct stat sb;
    /* lstat: a symbolic link is written through, not replaced by a file of its own. */
    r->in_place = in_place_if_special && lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode);
    return DT_OK;
}

const char *dt_file_replace_path(const dt_file_replace *r)
{
    return r->in_place ? r->target : r->tmp;
}

void dt_path_dir(const char *path, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, cap, ".");
    else if (slash == path)
        snprintf(out, cap, "/");
    else
        snprintf(out, cap, "%.*s", (int)(slash - path), path);
}

static dt_status fsync_path(const char *path, const char *what, int flags)
{
    int fd = open(path, flags | O_CLOEXEC);
    if (fd < 0)
        return dt_error(DT_ERR_IO, "%s: open %s: %s", what, path, strerror(errno));
    dt_status st = DT_OK;
    if (fsync(fd) != 0)
        st = dt_error(DT_ERR_IO, "%s: fsync %s: %s", what, path, strerror(errno));
    close(fd);
    return st;
}

dt_status dt_file_replace_commit(dt_file_replace *r)
{
    if (r->in_place)
        return DT_OK;
    dt_status st = fsync_path(r->tmp, r->tmp, O_RDONLY);
    if (st == DT_OK && rename(r->tmp, r->target) != 0)
        st = dt_error(DT_ERR_IO, "%s: rename from %s: %s", r->target, r->tmp, strerror(errno));
    if (st) {
        unlink(r->tmp);
        return st;
    }
    char dir[DT_PATH_CAP];
    /* The directory holding the file: what is flushed for the rename to be durable. */
    dt_path_dir(r->target, dir, sizeof dir);
    return fsync_path(dir, r->target, O_RDONLY | O_DIRECTORY);
}

void dt_file_replace_abort(dt_file_replace *r)
{
    if (!r->in_place && r->tmp[0])
        unlink(r->tmp);
}

static dt_status write_all(int fd, const char *path, const void *data, size_t n)
{
    const unsigned char *p = data;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return dt_error(DT_ERR_IO, "%s: write: %s", path, strerror(errno));
        if (k == 0)
            return dt_error(DT_ERR_IO, "%s: write: wrote nothing", path);
        p += k;
        n -= (size_t)k;
    }
    return DT_OK;
}

dt_status dt_file_write_atomic(const char *path, const dt_file_part *parts, int n_parts)
{
    dt_file_replace r;
    dt_status st = dt_file_replace_begin(&r, path, false);
    if (st)
        return st;
    int fd = open(r.tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return dt_error(DT_ERR_IO, "%s: open: %s", r.tmp, strerror(errno));
    for (int i = 0; i < n_parts && st == DT_OK; i++)
        st = write_all(fd, r.tmp, parts[i].data, parts[i].n_bytes);
    if (close(fd) != 0 && st == DT_OK)
        st = dt_error(DT_ERR_IO, "%s: close: %s", r.tmp, strerror(errno));
    if (st) {
        dt_file_replace_abort(&r);
        return st;
    }
    return dt_file_replace_commit(&r);
}

dt_status dt_file_read_text(const char *path, size_t max_bytes, const char *what, char **text,
                            size_t *n_bytes)
{
    *text = NULL;
    dt_status st = DT_OK;
    FILE *f = fopen(path, "rb");
    if (!f)
        return dt_error(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    /* The buffer grows as the file is read (a regular file's size is only a first guess), so a
     * large limit costs nothing for a small file. */
    struct stat sb;
    size_t cap = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0
                     ? (size_t)sb.st_size + 1 : 4096;
    if (cap > max_bytes + 1)
        cap = max_bytes + 1;
    char *buf = malloc(cap + 1);
    size_t n = 0;
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap || cap == max_bytes + 1)
            break;
        size_t more = cap * 2 > max_bytes + 1 ? max_bytes + 1 : cap * 2;
        char *b = realloc(buf, more + 1);
        if (!b) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = b, cap = more;
    }
    if (!buf)
        st = dt_error(DT_ERR_NOMEM, "%s: no memory to read it", path);
    else if (ferror(f))
        st = dt_error(DT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    else if (n > max_bytes)
        st = dt_error(DT_ERR_INVALID, "%s: larger than %zu bytes: not %s", path, max_bytes, what);
    else if (memchr(buf, '\0', n))
        st = dt_error(DT_ERR_INVALID, "%s: offset %zu: a NUL byte: not %s", path,
                      (size_t)((char *)memchr(buf, '\0', n) - buf), what);
    fclose(f);
    if (st) {
        free(buf);
        return st;
    }
    buf[n] = '\0';
    *text = buf;
    if (n_bytes)
        *n_bytes = n;
    return DT_OK;
}
