/* Parameter-server tasks (`--strategy parameter_server`, TF_CONFIG with "ps" tasks).
 *
 * dt_ps_server_run is a ps task's whole life: it listens on its TF_CONFIG address, admits only
 * the chief and the workers of its cluster (the cluster secret's handshake), holds the shards of
 * the tables the coordinator defines on it (rows split by TensorFlow's partitioners, partition.h)
 * with their optimizer slots, answers pulls with rows and applies pushed row gradients itself,
 * and returns when the coordinator sends STOP, or with an error naming the coordinator when no
 * chief has been connected for coordinator_timeout seconds. */
#ifndef DTRAIN_PS_H
#define DTRAIN_PS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/status.h"

typedef struct {
    const char *task;           /* "ps:0" overrides TF_CONFIG's task; NULL: TF_CONFIG's */
    const char *secret_file;    /* NULL: env DTRAIN_CLUSTER_SECRET, else none */
    bool insecure;              /* allow a non-loopback cluster without a secret */
    double coordinator_timeout; /* seconds without a connected chief before giving up (120) */
    double request_timeout;     /* seconds a started request has to arrive whole (60) */
    int threads;                /* for the row-wise updates (1) */
} dt_ps_server_config;

typedef struct {
    char task[300];             /* "ps:0 (127.0.0.1:4003)" */
    uint64_t requests;          /* answered */
    uint64_t rows_pulled, rows_pushed;
} dt_ps_server_report;

void dt_ps_server_config_default(dt_ps_server_config *c);

/* Serves until STOP (DT_OK) or the coordinator timeout (DT_ERR_TIMEOUT); errors in the cluster
 * (not a ps task, no chief) are DT_ERR_INVALID naming TF_CONFIG's field. report may be NULL. */
dt_status dt_ps_server_run(const dt_ps_server_config *c, dt_ps_server_report *report);

#endif
