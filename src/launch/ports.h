/* Free loopback ports for the tasks of a launch. Private to src/launch/. */
#ifndef DTRAIN_LAUNCH_PORTS_H
#define DTRAIN_LAUNCH_PORTS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/status.h"

/* Picks n distinct free ports on 127.0.0.1 into ports[]. Every socket stays bound until all are
 * picked, so the kernel cannot hand out one port twice. With keep, a port of ports[] that can
 * be bound again is kept (with SO_REUSEADDR, as servers bind, so that connections of the last
 * attempt waiting in TIME_WAIT do not count as a use); the others are replaced. */
dt_status dt_launch_pick_ports(uint16_t *ports, int n, bool keep);

#endif
