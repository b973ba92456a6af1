/* The library's log (see include/dtrain/log.h). */
#include "dtrain/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *const level_names[] = {"debug", "info", "warn", "off"};

/* -1: not yet read from DTRAIN_LOG. Atomics: any thread may log first. */
static int threshold = -1;
static FILE *sink;

int dt_log_level_parse(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return strcmp(name, "warning") == 0 ? DT_LOG_WARN : -1;
}

static FILE *sink_now(void)
{
    FILE *s = __atomic_load_n(&sink, __ATOMIC_ACQUIRE);
    return s ? s : stderr;
}

dt_log_level dt_log_level_now(void)
{
    int t = __atomic_load_n(&threshold, __ATOMIC_ACQUIRE);
    if (t >= 0)
        return (dt_log_level)t;
    const char *env = getenv("DTRAIN_LOG");
    int parsed = env && *env ? dt_log_level_parse(env) : DT_LOG_INFO;
    if (parsed < 0) {
        fprintf(sink_now(), "dtrain: warning: DTRAIN_LOG: '%s' is not debug, info, warn or off; "
                "logging at info\n", env);
        parsed = DT_LOG_INFO;
    }
    int unset = -1;
    /* The first reader sets it; a concurrent one keeps what was set. */
    if (!__atomic_compare_exchange_n(&threshold, &unset, parsed, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        parsed = unset;
    return (dt_log_level)parsed;
}

void dt_log_set_level(dt_log_level level)
{
    __atomic_store_n(&threshold, (int)level, __ATOMIC_RELEASE);
}

void dt_log_set_sink(FILE *s) { __atomic_store_n(&sink, s, __ATOMIC_RELEASE); }

void dt_log_to(FILE *out, dt_log_level level, const char *fmt, ...)
{
    if (level < dt_log_level_now() || level >= DT_LOG_OFF)
        return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof line - 1 ? (size_t)n : sizeof line - 2;
    line[len] = '\n';
    FILE *f = out ? out : sink_now();
    fwrite(line, 1, len + 1, f);
    fflush(f);
}
