/* Streaming stores: writes that go to memory without first bringing the lines into this core's
 * cache.
 *
 * For memory that other processes on other cores read every step, such as the parameters and
 * gradients that workers on one machine share: a plain store to a line another core holds
 * waits until that copy is invalidated. Where the two cores sit far apart (another core complex,
 * or another socket of the host under a virtual machine), those waits made 700 KB of parameter
 * updates take 700 us rather than 50. Streaming stores invalidate the other copies without
 * waiting on each; the readers then take the lines from memory. */
#ifndef DTRAIN_STREAM_H
#define DTRAIN_STREAM_H

#include <stddef.h>

/* dst[0..n) = src[0..n), dst written with streaming stores where the CPU has them (the arrays
 * do not overlap). A store fence ends it, so later stores of this thread come after. */
void dt_stream_copy(float *dst, const float *src, size_t n);

/* dst[0..n) = 0.0f, written the same way. */
void dt_stream_zero(float *dst, size_t n);

#endif
