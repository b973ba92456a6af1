/* Parameter-server training, the worker's and the coordinator's parts (internal to src/train;
 * dt_train calls them for --strategy parameter_server, the ps tasks run dt_ps_server_run).
 *
 * The coordinator (the chief) defines the variables on the ps tasks: each table split into
 * shards by the partitioner (one per ps task unless --partitioner), shard s on ps s mod P, rows
 * starting as one_device's would; each dense variable whole on ps v mod P (TensorFlow's
 * round-robin), with its initial values. It then schedules functions of steps_per_execution
 * steps on the workers, one thread per worker taking the next function as soon as its worker is
 * free, numbering the steps globally (Adam's bias correction and the learning-rate schedule
 * follow that number). A worker runs a function's steps on its own shard of the data (its
 * epochs one after the other): per step it pulls the rows of the batch's unique ids and the
 * dense variables, computes, and pushes the tables' row gradients and the dense gradients, which
 * the ps tasks apply at once (asynchronous training). Under bounded staleness (ssp:S) the
 * coordinator gives a worker steps only while no other worker is more than S steps behind it:
 * a function's steps all keep to that bound, and each step's pushes are applied before the
 * worker's result comes back. Hybrid keeps the tables on the ps tasks, as async, but the dense
 * variables on the workers: each worker's copy starts as one_device's, and each step the
 * workers (every one takes every step, on its share of the global batch) sum their dense
 * gradients over a ring of their own (a listener beside the ZeroMQ one, its port told through
 * the coordinator) and update their copies alike; the coordinator reads them from worker 0 at
 * the end. A worker whose link closes or falls silent (ZeroMQ heartbeats) is lost, not failed
 * (but in hybrid mode): its function goes back to a queue the other workers take from first,
 * and when it answers again it rejoins, a restarted one skipping the batches the coordinator
 * saw it train on; one that does not come back leaves its shard of the data to the first worker
 * to use up its own. A lost ps task is waited for (started again, its snapshot restored) and
 * its variables defined again. With a model directory the coordinator writes sharded
 * checkpoints (ps_ckpt.h) and starts from the latest one. When every worker's data is used up
 * (or max_steps are taken) the coordinator reads every variable back into its model, for the
 * report, the test set and the checksum, and stops the workers and the ps tasks. A worker or ps
 * with no coordinator for coordinator_timeout seconds gives up, naming it. */
#ifndef DTRAIN_TRAIN_PS_TRAIN_H
#define DTRAIN_TRAIN_PS_TRAIN_H

#include "dtrain/fit.h"
#include "dtrain/input.h"
#include "dtrain/model.h"
#include "dtrain/train.h"

/* The coordinator: m initialised (its values are what the ps tasks start from); fcfg: the fit
 * configuration as this process runs it (its callbacks'); test: the data its validation and
 * periodic evaluation read (NULL: none); on return m holds the trained variables. */
dt_status dt_ps_coordinate(const dt_train_config *c, const dt_fit_config *fcfg, dt_model *m,
                           dt_dataset *test, dt_fit_result *res);

/* A worker task: serves the coordinator's functions over in->train until it stops it; out gets
 * its figures (steps, samples, pull times, traffic). m's tables hold one batch's unique rows
 * (max_batch x fields rows); table_rows is the rows the tables really have. */
dt_status dt_ps_work(const dt_train_config *c, dt_model *m, dt_pool *pool, dt_input *in,
                     const dt_input_options *io, int64_t table_rows, dt_train_report *out);

/* A worker of TFJob's sparse cluster (enableDynamicWorker), which knows only the ps tasks and
 * itself: it trains between-graph, as TF 1.x's workers did, coordinating itself. It runs
 * dt_ps_work on m (one batch's rows) on a thread of its own and dt_ps_coordinate on
 * `coordinator` linked to that worker alone, its steps numbered by the job's count that ps 0
 * keeps (--max-steps is the job's). Worker 0 leads: it defines the variables (or restores its
 * checkpoint) and says they are ready, writes the checkpoints, and at its end waits for the
 * other workers to end, reads the model back into `coordinator` (the whole model) and stops
 * the ps tasks. The others wait for the variables to be ready, train, and leave (their
 * `coordinator` may be m itself: they read nothing back). Asynchronous training only. */
dt_status dt_ps_train_sparse(const dt_train_config *c, const dt_fit_config *fcfg,
                             dt_model *coordinator, dt_model *m, dt_pool *pool, dt_input *in,
                             const dt_input_options *io, int64_t table_rows,
                             dt_train_report *out);

#endif
