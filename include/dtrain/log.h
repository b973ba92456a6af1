/* The library's log: warnings (a peer refused, a damaged checkpoint passed over, a collective
 * stalled), information (a stale file removed, a checkpoint saved) and debugging detail, each at
 * its level, filtered by one threshold.
 *
 * The threshold comes from env DTRAIN_LOG (debug, info, warn, or off), read once, on the first
 * message; info when unset. dt_log_set_level overrides it. A message goes to the stream its
 * caller names (a component's own FILE *log, as the checkpoint manager and the transport take
 * one), else to the log's sink: stderr unless dt_log_set_sink says otherwise. Each message is
 * written with one call, so lines of several threads do not interleave. Library code writes
 * diagnostics through here only. */
#ifndef DTRAIN_LOG_H
#define DTRAIN_LOG_H

#include <stdio.h>

#include "dtrain/api.h"

typedef enum { DT_LOG_DEBUG, DT_LOG_INFO, DT_LOG_WARN, DT_LOG_OFF } dt_log_level;

/* The threshold in force: messages below it are dropped. */
DT_API dt_log_level dt_log_level_now(void);
DT_API void dt_log_set_level(dt_log_level level);
/* "debug", "info", "warn" (or "warning"), "off" -> level; -1 otherwise. */
DT_API int dt_log_level_parse(const char *name);
/* Where messages without a stream of their own go; NULL: stderr. */
DT_API void dt_log_set_sink(FILE *sink);

/* Writes the formatted text and a newline to out (NULL: the sink), if level passes. */
DT_API void dt_log_to(FILE *out, dt_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
