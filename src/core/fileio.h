/* Replacing a file whole: the new contents are written beside the target
 * ("<path>.tmp.<pid>.<host>"),
 * flushed to disk, and renamed over it, and the directory is flushed, so that after a crash the
 * path holds either its old contents or all the new ones, never half. Checkpoints, their state
 * file, dataset caches, --metrics-out and dtrain convert's output all go through here.
 *
 * A target that exists and is not a regular file (a pipe, /dev/stdout, a device, a symbolic
 * link) is not to be replaced: with in_place_if_special it is written where it is (through the
 * link) instead. */
#ifndef DTRAIN_FILEIO_H
#define DTRAIN_FILEIO_H

#include <stdbool.h>
#include <stddef.h>

#include "dtrain/status.h"

#define DT_PATH_CAP 4096

typedef struct {
    char target[DT_PATH_CAP];
    char tmp[DT_PATH_CAP + 96];
    bool in_place;  /* written at the target itself */
} dt_file_replace;

/* Chooses where the new contents go: dt_file_replace_path afterwards. */
dt_status dt_file_replace_begin(dt_file_replace *r, const char *path, bool in_place_if_special);
/* The path to write to (the temporary, or the target when in place). */
const char *dt_file_replace_path(const dt_file_replace *r);
/* Once the written file is closed: flushes it to disk, renames it over the target, flushes the
 * directory. On failure the temporary is removed and the target left as it was. */
dt_status dt_file_replace_commit(dt_file_replace *r);
/* Gives up: removes the temporary (never the target). */
void dt_file_replace_abort(dt_file_replace *r);
/* Whether name (a file name without its directory) is the temporary of a replace begun by a
 * process of this host that no longer runs (killed while it wrote): "<target>.tmp.<pid>.<host>",
 * or "<target>.tmp.<pid>" as written before temporaries named their host. *target_len: the
 * length of <target>. Another host's temporary, or a running process's, never is one, so a
 * sweep over a directory that several hosts share removes only its own host's leftovers. */
bool dt_file_replace_orphan(const char *name, size_t *target_len);

/* A piece of the contents, for dt_file_write_atomic. */
typedef struct {
    const void *data;
    size_t n_bytes;
} dt_file_part;

/* Replaces path with the concatenation of the parts. */
dt_status dt_file_write_atomic(const char *path, const dt_file_part *parts, int n_parts);

/* The directory that holds path ("." for a bare file name, "/" for a file in the root), into
 * out[cap]. */
void dt_path_dir(const char *path, char *out, size_t cap);

/* Reads a whole text file of at most max_bytes into a malloc'd, NUL-terminated *text (n_bytes,
 * may be NULL, gets its length). A larger file, or one holding a NUL byte, is DT_ERR_INVALID
 * saying it is not `what` ("a JSON text file"). */
dt_status dt_file_read_text(const char *path, size_t max_bytes, const char *what, char **text,
                            size_t *n_bytes);

#endif
