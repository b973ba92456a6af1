/* Buffers on whole cache lines (internal to the library). The kernels read and write 16 floats
 * at a time; a large malloc lands 16 bytes past a page, which splits every such access over two
 * lines (a feature-spec DeepFM's first-layer weight gradient took 28% longer over such an x0).
 * Freed with free(). */
#ifndef DTRAIN_CORE_LINES_H
#define DTRAIN_CORE_LINES_H

#include <stdint.h>
#include <stdlib.h>

/* n floats (at least one) starting on a 64-byte line; NULL without memory. */
static inline float *dt_lines_floats(size_t n)
{
    size_t elems = n ? n : 1;
    if (elems > (SIZE_MAX - 63) / sizeof(float))
        return NULL;
    return aligned_alloc(64, (elems * sizeof(float) + 63) / 64 * 64);
}

#endif
