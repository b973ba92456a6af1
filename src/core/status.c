/* Status codes and the thread-local error message (see include/dtrain/status.h). */
#include "dtrain/status.h"

#include <stdio.h>
#include <string.h>

#define DT_ERROR_CAP 1024

static _Thread_local char error_message[DT_ERROR_CAP];

const char *dt_last_error(void) { return error_message; }

void dt_error_clear(void) { error_message[0] = '\0'; }

dt_status dt_error(dt_status code, const char *fmt, ...)
{
    /* Formatted aside first: an argument may be dt_last_error() itself. */
    char text[DT_ERROR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    memcpy(error_message, text, sizeof text);
    return code;
}

dt_status dt_error_prefix(dt_status code, const char *fmt, ...)
{
    char combined[2 * DT_ERROR_CAP + 2];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(combined, DT_ERROR_CAP, fmt, ap);
    va_end(ap);
    size_t used = n < 0 ? 0 : (size_t)n < DT_ERROR_CAP ? (size_t)n : DT_ERROR_CAP - 1;
    combined[used++] = ':';
    combined[used++] = ' ';
    size_t old = strlen(error_message);
    memcpy(combined + used, error_message, old + 1);
    /* Keep the start of the message, the prefix included, if the whole does not fit. */
    size_t total = used + old;
    if (total >= DT_ERROR_CAP)
        total = DT_ERROR_CAP - 1;
    memcpy(error_message, combined, total);
    error_message[total] = '\0';
    return code;
}

const char *dt_status_name(dt_status code)
{
    switch (code) {
    case DT_END: return "end of stream";
    case DT_OK: return "ok";
    case DT_ERR_INVALID: return "invalid argument";
    case DT_ERR_IO: return "I/O error";
    case DT_ERR_FORMAT: return "format error";
    case DT_ERR_NOMEM: return "out of memory";
    case DT_ERR_UNSUPPORTED: return "unsupported";
    case DT_ERR_NUMERIC: return "numeric error";
    case DT_ERR_PEER: return "peer error";
    case DT_ERR_TIMEOUT: return "timeout";
    case DT_ERR_AUTH: return "authentication error";
    case DT_ERR_UNAVAILABLE: return "unavailable";
    default: return "unknown error";
    }
}
