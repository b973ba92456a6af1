/* What a parameter-server job's coordinator and workers both know (internal to src/train): the
 * cluster with its secret, a task's ZeroMQ endpoint, and where the model's variables are placed
 * on the ps tasks. */
#ifndef DTRAIN_TRAIN_PS_TASK_H
#define DTRAIN_TRAIN_PS_TASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../ps/client.h"
#include "../ps/joblink.h"
#include "dtrain/cluster.h"
#include "dtrain/model.h"
#include "dtrain/train.h"

typedef struct {
    dt_cluster cl;
    uint8_t *secret;
    size_t secret_len;
    dt_handshake_id me;
} ps_cluster;

/* The cluster from TF_CONFIG (and --task), with the cluster secret; errors name the field. */
dt_status ps_open_cluster(const dt_train_config *c, ps_cluster *pc);
void ps_close_cluster(ps_cluster *pc);

/* A task's ZeroMQ endpoint, from its TF_CONFIG address. */
void ps_endpoint_of(const dt_addr *a, char *out, size_t cap);

/* Tells the client where the model's tables and dense variables are (define: and puts them
 * there, with m's values, as the coordinator does); table_rows > 0: the tables' rows on the ps
 * tasks when m's are fewer (a worker's), DT_PARTITION_HASH_ROWS when they are dynamic there. */
dt_status ps_place_variables(const dt_train_config *c, dt_model *m, dt_ps_client *ps, int n_ps,
                             bool define, int64_t table_rows);

#endif
