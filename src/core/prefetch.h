/* Prefetching a span of memory into the cache: every 64-byte line it touches, the last byte's
 * too, so that a span straddling a line boundary is covered (internal to the library). For
 * scattered spans the hardware prefetcher cannot guess, fetched a few ahead of their use: rows
 * of embedding tables and their optimizer slots, images of a shuffled batch. */
#ifndef DTRAIN_CORE_PREFETCH_H
#define DTRAIN_CORE_PREFETCH_H

#include <stddef.h>

/* A function whose only effect is prefetching must be inlined into its callers
 * (always_inline): GCC counts __builtin_prefetch as no effect at all, finds such a function
 * const, and drops the calls to it, prefetches and all. */

/* __builtin_prefetch takes its read/write hint as a constant, hence a macro under the two. */
#define DT_PREFETCH_SPAN(ptr, bytes, rw)                                                        \
    do {                                                                                       \
        const char *span_ = (const char *)(ptr);                                               \
        size_t bytes_ = (bytes);                                                               \
        for (size_t at_ = 0; at_ < bytes_; at_ += 64)                                          \
            __builtin_prefetch(span_ + at_, rw, 3);                                            \
        __builtin_prefetch(span_ + bytes_ - 1, rw, 3);                                         \
    } while (0)

static inline void dt_prefetch_read(const void *p, size_t bytes) { DT_PREFETCH_SPAN(p, bytes, 0); }
static inline void dt_prefetch_write(const void *p, size_t bytes) { DT_PREFETCH_SPAN(p, bytes, 1); }

#endif
