/* Gradient all-reduce in buckets, overlapped with backward.
 *
 * As backward completes layers (last first), their gradients form a growing final range at the
 * end of the gradient arena (dt_model_set_grad_hook). Once the range not yet handed over holds a
 * bucket's worth (the first bucket smaller, so communication starts early, as PyTorch DDP's
 * 1 MiB first bucket does), it is all-reduced on a communication thread while backward goes on
 * with the earlier layers. Bucket boundaries depend only on the layer layout and the sizes, so
 * every worker issues the same all-reduces in the same order. dt_gradsync_finish hands over the
 * rest and waits for all of them. The communicator is used by the thread only between
 * dt_gradsync_begin and dt_gradsync_finish: the caller's own collectives go outside that span. */
#ifndef DTRAIN_STRATEGY_GRADSYNC_H
#define DTRAIN_STRATEGY_GRADSYNC_H

#include <stddef.h>

#include "dtrain/comm.h"

typedef struct dt_gradsync dt_gradsync;

/* grads (n_elems) are summed over the communicator's ranks, in buckets of bucket_bytes (the first
 * of first_bucket_bytes), on the wire as wire. */
dt_status dt_gradsync_create(dt_comm *comm, float *grads, size_t n_elems, size_t first_bucket_bytes,
                             size_t bucket_bytes, dt_wire_dtype wire, dt_gradsync **out);
/* A new step: nothing handed over yet. */
void dt_gradsync_begin(dt_gradsync *g);
/* The model's hook (a dt_grad_ready_fn over a dt_gradsync *): grads[ready_from, n_elems) are final. */
void dt_gradsync_ready(void *g, size_t ready_from);
/* Hands over what is left and waits until every bucket is summed; the first error, if any. */
dt_status dt_gradsync_finish(dt_gradsync *g);
/* Seconds the last finish waited for the communication thread (the all-reduce time backward
 * did not hide). */
double dt_gradsync_last_wait(const dt_gradsync *g);
/* Accepts NULL. */
void dt_gradsync_destroy(dt_gradsync *g);

#endif
