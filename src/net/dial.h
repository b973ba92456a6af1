/* Connecting to another task of the cluster: the TCP connection and the client half of the
 * handshake, tried again with backoff while the task is not listening yet (it may start after
 * this one) until a deadline (internal to src/net). */
#ifndef DTRAIN_NET_DIAL_H
#define DTRAIN_NET_DIAL_H

#include "dtrain/cluster.h"
#include "handshake.h"

/* Connects to task job:index at a (who names it in messages) as me. Each attempt has
 * handshake_timeout seconds; DT_ERR_TIMEOUT names the task once the deadline passes. A refusal
 * is tried again too, until the deadline, since whoever holds the port may not be the task (a
 * local user's listener bound while the task restarts: an impostor must not end the job); the
 * first refusal is logged, and at the deadline DT_ERR_AUTH says who refused and how often.
 * keys (unless NULL) get the connection's keys (session.h). */
dt_status dt_dial_task(const dt_handshake_id *me, const dt_addr *a, dt_job job, int index,
                       const char *who, double handshake_timeout, double deadline, int *fd,
                       dt_session_keys *keys);

#endif
