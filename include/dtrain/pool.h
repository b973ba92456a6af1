/* A fixed pool of threads for intra-op parallelism (`--threads N`).
 *
 * dt_pool_run(pool, fn, ctx, n_tasks) calls fn(ctx, task, n_tasks) for task = 0..n_tasks-1 and
 * returns when all are done. Thread i (the caller is thread 0) runs the i-th contiguous block of
 * the tasks, then helps with what is left of the others' blocks, so which thread runs a task
 * depends on timing, but the split of work is a function of the task count alone: a kernel that gives each task a fixed slice, keeps per-task scratch by task index and
 * combines partial results in task order is bit-reproducible for a given task count. Kernels receive a pool that may be NULL, meaning run on the calling thread. */
#ifndef DTRAIN_POOL_H
#define DTRAIN_POOL_H

#include "dtrain/api.h"
#include "dtrain/status.h"

typedef struct dt_pool dt_pool;

typedef void (*dt_task_fn)(void *ctx, int task, int n_tasks);

/* n_threads >= 1 counts the caller: 1 creates no thread. */
DT_API dt_status dt_pool_create(int n_threads, dt_pool **out);
DT_API void dt_pool_destroy(dt_pool *pool);

/* Threads in the pool, the caller included; 1 for a NULL pool. */
DT_API int dt_pool_size(const dt_pool *pool);

DT_API void dt_pool_run(dt_pool *pool, dt_task_fn fn, void *ctx, int n_tasks);

/* The slice [*begin, *end) of n items that task t of n_tasks owns: contiguous, in order, sizes
 * differing by at most one. */
DT_API void dt_pool_slice(long n, int task, int n_tasks, long *begin, long *end);

/* The number of CPUs this process may run on (its affinity mask; at least 1). */
DT_API int dt_cpu_count(void);

#endif
