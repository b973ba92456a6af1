/* A parameter-server task's service (`dtrain server` on a ps task): it listens on the task's
 * address, admits the chief and the workers through the cluster's authenticated handshake,
 * answers each connection's requests in order on a thread of its own against one dt_ps_shard,
 * and returns when the chief sends STOP, or with a named error when no chief has been connected
 * for coordinator_timeout seconds (a coordinator that died, or never came), so that a ps never
 * outlives its job (internal to the library). */
#ifndef DTRAIN_PS_SERVICE_H
#define DTRAIN_PS_SERVICE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../net/handshake.h"
#include "dtrain/cluster.h"
#include "snapshot.h"

typedef struct {
    dt_handshake_id me;          /* this ps task */
    const dt_cluster *cluster;   /* for the address and the peers' names */
    double coordinator_timeout;  /* seconds without a connected chief before giving up */
    double request_timeout;      /* seconds a started message has to arrive whole */
    double handshake_timeout;
    int threads;                 /* for the row-wise updates */
    /* The job's model directory: a SAVE writes into it or a directory within it, nowhere else
     * (NULL: no SAVE is taken). */
    const char *model_dir;
    FILE *log;                   /* NULL: the library's log */
    /* Snapshots (snapshot.h): with a path, the shards are restored from it at the start when
     * it exists, written to it every snapshot_secs seconds (0: never) while held still, and it
     * is removed once the chief has stopped the job. */
    const char *snapshot_path;
    double snapshot_secs;
    const dt_ps_job *job;        /* the job the snapshots belong to (snapshot.h) */
} dt_ps_service_options;

typedef struct {
    uint64_t requests;           /* answered */
    uint64_t rows_pulled, rows_pushed;
    int snapshots;               /* written */
    bool restored;               /* the shards came from a snapshot at the start */
    int64_t restored_step;       /* its latest step */
} dt_ps_service_stats;

/* Serves until STOP (DT_OK) or the coordinator timeout (DT_ERR_TIMEOUT); stats may be NULL. */
dt_status dt_ps_serve(const dt_ps_service_options *o, dt_ps_service_stats *stats);

#endif
