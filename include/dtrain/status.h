/* Status codes and the thread-local error message.
 *
 * Functions that can fail for reasons outside the program (files, input, flags, the OS) return a
 * dt_status and leave a message with the context a user needs (file and byte offset, line, field,
 * flag) in a thread-local buffer read by dt_last_error(). Broken invariants are bugs and go to
 * assert() instead. */
#ifndef DTRAIN_STATUS_H
#define DTRAIN_STATUS_H

#include <stdarg.h>

#include "dtrain/api.h"

typedef int dt_status;

enum {
    DT_END = 1,              /* not an error: a stream or dataset has no more elements */
    DT_OK = 0,
    DT_ERR_INVALID = -1,     /* a bad argument, flag or config value */
    DT_ERR_IO = -2,          /* the OS refused: open, read, write */
    DT_ERR_FORMAT = -3,      /* a file's contents are not what its format says */
    DT_ERR_NOMEM = -4,       /* an allocation failed */
    DT_ERR_UNSUPPORTED = -5, /* valid, but not something dtrain does */
    DT_ERR_NUMERIC = -6,     /* training diverged: NaN or infinity */
    DT_ERR_PEER = -7,        /* a peer closed its connection, died or broke the protocol */
    DT_ERR_TIMEOUT = -8,     /* a deadline passed: a peer stopped answering */
    DT_ERR_AUTH = -9,        /* a peer failed the handshake: wrong secret, version or cluster */
    DT_ERR_UNAVAILABLE = -10, /* a peer cannot serve it yet (a ps started again whose variables
                                 are not defined again yet): worth asking again */
};

/* The message of the last error set on this thread ("" if none). */
DT_API const char *dt_last_error(void);

/* Sets this thread's message from a printf format and returns code, so that a failing path can
 * read `return dt_error(DT_ERR_IO, "%s: %s", path, strerror(errno));`. */
DT_API dt_status dt_error(dt_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to this thread's message and returns code: how a caller adds context
 * (the flag or file it was handling) to an error raised below it. */
DT_API dt_status dt_error_prefix(dt_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

DT_API void dt_error_clear(void);

/* A short name for a code, e.g. "format error". */
DT_API const char *dt_status_name(dt_status code);

#endif
