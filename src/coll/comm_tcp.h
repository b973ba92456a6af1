/* The tcp communicator: collectives over the cluster transport (src/net/transport.h).
 *
 * All-reduce of up to small_bytes (on the wire) uses recursive doubling (log2 steps, latency
 * bound; non-power-of-two sizes fold the extra ranks in first); larger tensors use the ring:
 * reduce-scatter then all-gather, each rank sending and receiving 2(n-1)/n of the data, the
 * bandwidth optimum. The ring runs over slices of 2 x size segments (segment_bytes each), each
 * slice reduce-scattered and all-gathered before the next: a reduced segment goes back on the
 * wire while it is still in cache, rather than the whole tensor streaming through memory twice
 * (on loopback this doubled the bus bandwidth at 64 MiB). Broadcast is a binomial tree,
 * all-gather and reduce-scatter are rings.
 * Every rank ends with bitwise identical results: each element is reduced once, in a fixed
 * order, and then copied.
 *
 * Failure: any error (a peer closed, reset, timed out or broke the protocol) breaks the
 * communicator, and the rank tells every peer it can reach why, in an ABORT frame, so ranks not
 * adjacent to the failure stop at once naming it instead of waiting for their own timeout. */
#ifndef DTRAIN_COMM_TCP_H
#define DTRAIN_COMM_TCP_H

#include "dtrain/cluster.h"
#include "dtrain/comm.h"
#include "../net/transport.h"

typedef struct {
    dt_transport_options transport;
    double timeout;       /* seconds per collective (default 60) */
    double stall_warn;    /* seconds before a waiting rank logs whom it waits for (default 30) */
    size_t segment_bytes; /* ring segment (default 256 KiB) */
    size_t small_bytes;   /* all-reduce up to this many wire bytes uses recursive doubling (64 KiB) */
    bool shm;             /* when every rank is on this host, all-reduce (float32 on the wire) and
                             barrier go through shared memory (default true; see below) */
} dt_tcp_options;

void dt_tcp_options_default(dt_tcp_options *o);

/* Shared memory: when all ranks run on one host, all-reduce with the float32 wire and barrier
 * skip TCP: the ranks share a memory segment, set up over the authenticated connections, which
 * still carry every other collective and tell a rank that a peer died while it waits (see
 * src/coll/shm.h). Each rank copies its data in and reduces its own block in rank order, so
 * results are the same bits on every rank, as with TCP (though not the same bits as TCP's ring,
 * which sums in another order). */

/* Connects this training task to every other (dt_transport_open) and returns its communicator:
 * rank and size are the cluster's training rank and n_workers. cl must outlive it. */
dt_status dt_comm_tcp(const dt_cluster *cl, const dt_tcp_options *o, dt_comm **out);
/* Whether c, a tcp communicator, all-reduces through shared memory. */
bool dt_comm_tcp_uses_shm(const dt_comm *c);

#endif
