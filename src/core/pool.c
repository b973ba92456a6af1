/* A fixed pool of threads (see include/dtrain/pool.h).
 *
 * A run is published by bumping a generation counter under the mutex. Workers spin briefly on the
 * counter before sleeping on the condition variable, because a training step issues a dozen short
 * parallel regions back to back and a futex wake-up per region would cost more than the work. */
#include "dtrain/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Spin iterations before a worker sleeps: about 1 ms of pauses on a recent x86 core (a pause is
 * 20-40 ns), and longer with the yields among them (spin_turn) when other threads are runnable.
 * The gaps between a step's parallel regions (the training thread's serial work, a batch from
 * the input thread) often last longer than a tenth of that, and a sleeping worker is woken by a
 * futex call and an interrupt to its core, which under a hypervisor costs tens of
 * microseconds: with 0.4 ms of spinning, DeepFM on 2 threads ran about 5% slower. */
#define DT_POOL_SPIN 50000

/* One turn of a spin, the i-th: a pause, and every 64th turn (about a microsecond) a yield of
 * the core. A thread with nothing to do but wait then gives its core to a runnable thread there
 * (the input thread, another process), which would otherwise take the core of a thread with
 * work at the next tick and hold up the whole run: DeepFM on 2 threads with its input thread
 * ran about 3% faster. The yield returns at once when nothing else is runnable. */
static inline void spin_turn(int i)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if ((i & 63) == 63)
        sched_yield();
}

/* Thread i's share of a run: tasks [next, end), claimed from next up, by thread i first and by
 * the others once their own shares are done. A cache line each, so that claims by different
 * threads do not contend. */
struct share {
    int next, end;
    char pad[64 - 2 * sizeof(int)];
};

struct worker_arg {
    struct dt_pool *pool;
    int id;
};

struct dt_pool {
    int n_threads;
    pthread_t *threads;
    struct worker_arg *args;
    struct share *shares; /* (n_threads) */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_cond_t done;
    dt_task_fn fn;
    void *ctx;
    int n_tasks;
    unsigned long generation; /* bumped per run; read by spinning workers */
    int pending;              /* workers yet to finish this run */
    int stop;
};

/* Thread `id` runs the tasks of its own share first, then claims what is left of the others':
 * a thread the scheduler took away for a while (the input thread, another process) leaves the
 * rest of its share to the others instead of holding up the run. Shares are contiguous blocks of
 * tasks, so that thread i works on the same part of the data in run after run (rows of a batch,
 * say) and finds it in its own cache, where claiming tasks in turn would send about half of
 * every layer's output to the other core; across the chips of a processor that costs more than
 * the work. Which thread runs a task never changes what the task computes. */
static void run_tasks(dt_pool *p, int id)
{
    for (int k = 0; k < p->n_threads; k++) {
        struct share *sh = &p->shares[(id + k) % p->n_threads];
        int t;
        while ((t = __atomic_fetch_add(&sh->next, 1, __ATOMIC_RELAXED)) < sh->end)
            p->fn(p->ctx, t, p->n_tasks);
    }
}

static void *worker_main(void *arg)
{
    const struct worker_arg *wa = arg;
    dt_pool *p = wa->pool;
    unsigned long seen = 0;
    for (;;) {
        for (int i = 0; i < DT_POOL_SPIN; i++) {
            if (__atomic_load_n(&p->generation, __ATOMIC_ACQUIRE) != seen ||
                __atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
                break;
            spin_turn(i);
        }
        pthread_mutex_lock(&p->mu);
        while (p->generation == seen && !p->stop)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);

        run_tasks(p, wa->id);

        pthread_mutex_lock(&p->mu);
        if (__atomic_sub_fetch(&p->pending, 1, __ATOMIC_ACQ_REL) == 0)
            pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

int dt_cpu_count(void)
{
    /* The CPUs this process may run on (taskset, cpusets), not all the machine's: with spinning
     * workers, more threads than usable cores is very costly. */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

dt_status dt_pool_create(int n_threads, dt_pool **out)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return dt_error(DT_ERR_INVALID, "thread count %d out of range 1..1024", n_threads);
    dt_pool *p = calloc(1, sizeof *p);
    if (!p)
        return dt_error(DT_ERR_NOMEM, "no memory for a thread pool");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads, sizeof *p->threads);
        p->args = calloc((size_t)n_threads, sizeof *p->args);
        if (posix_memalign((void **)&p->shares, 64, (size_t)n_threads * sizeof *p->shares) != 0)
            p->shares = NULL;
        if (!p->threads || !p->args || !p->shares)
            goto fail_nomem;
        for (int i = 1; i < n_threads; i++) {
            p->args[i] = (struct worker_arg){p, i};
            if (pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]) != 0) {
                p->n_threads = i; /* destroy joins only the threads that exist */
                dt_pool_destroy(p);
                return dt_error(DT_ERR_IO, "cannot start thread %d of %d", i, n_threads);
            }
        }
    }
    *out = p;
    return DT_OK;
fail_nomem:
    dt_pool_destroy(p);
    return dt_error(DT_ERR_NOMEM, "no memory for a thread pool");
}

void dt_pool_destroy(dt_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; p->threads && i < p->n_threads; i++)
        if (p->threads[i])
            pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->args);
    free(p->shares);
    free(p);
}

int dt_pool_size(const dt_pool *p) { return p ? p->n_threads : 1; }

void dt_pool_run(dt_pool *p, dt_task_fn fn, void *ctx, int n_tasks)
{
    if (n_tasks <= 0)
        return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++)
            fn(ctx, t, n_tasks);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    for (int i = 0; i < p->n_threads; i++) {
        long lo, hi;
        dt_pool_slice(n_tasks, i, p->n_threads, &lo, &hi);
        p->shares[i].next = (int)lo;
        p->shares[i].end = (int)hi;
    }
    p->pending = p->n_threads - 1;
    __atomic_store_n(&p->generation, p->generation + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    run_tasks(p, 0);

    for (int i = 0; i < DT_POOL_SPIN && __atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) > 0; i++)
        spin_turn(i);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void dt_pool_slice(long n, int task, int n_tasks, long *begin, long *end)
{
    long base = n / n_tasks, extra = n % n_tasks;
    *begin = task * base + (task < extra ? task : extra);
    *end = *begin + base + (task < extra ? 1 : 0);
}
