/* The flags of the commands that join a cluster, filling the library's dt_comm_options
 * (include/dtrain/comm_open.h), which opens the communicator. */
#ifndef DTRAIN_CLI_COMM_OPEN_H
#define DTRAIN_CLI_COMM_OPEN_H

#include "dtrain/comm_open.h"
#include "flags.h"

/* Adds the 7 rows of o's fields (comm, secret-file, insecure, connect-timeout, timeout, shm,
 * task) to t, their defaults o's own: call dt_comm_options_default(o) first. */
void cli_comm_flags_add(flag_table *t, dt_comm_options *o);

#endif
