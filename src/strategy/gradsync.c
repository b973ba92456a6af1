/* Bucketed gradient all-reduce on a communication thread (see gradsync.h). */
#include "gradsync.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/clock.h"

#define MAX_BUCKETS 1024 /* per step; past it the last bucket takes the rest */

typedef struct {
    size_t lo, hi;
} bucket;

struct dt_gradsync {
    dt_comm *comm;
    float *grads;
    size_t n_elems, first_elems, bucket_elems;
    dt_wire_dtype wire;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bucket queue[MAX_BUCKETS];
    int pushed, done;    /* buckets handed over and summed in this step */
    size_t handed_from;  /* grads[handed_from, n_elems) are handed over */
    bool stop;
    dt_status st;        /* the first failure of the step */
    char msg[1024];
    double last_wait;
};

static void *comm_thread(void *arg)
{
    dt_gradsync *g = arg;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->stop && g->done == g->pushed)
            pthread_cond_wait(&g->cv, &g->mu);
        if (g->stop)
            break;
        bucket b = g->queue[g->done];
        bool skip = g->st != DT_OK; /* after a failure the communicator is broken anyway */
        pthread_mutex_unlock(&g->mu);
        dt_status st = DT_OK;
        if (!skip)
            st = dt_comm_allreduce(g->comm, g->grads + b.lo, b.hi - b.lo, DT_REDUCE_SUM, g->wire);
        pthread_mutex_lock(&g->mu);
        if (st && g->st == DT_OK) {
            g->st = st;
            snprintf(g->msg, sizeof g->msg, "%s", dt_last_error());
        }
        g->done++;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

dt_status dt_gradsync_create(dt_comm *comm, float *grads, size_t n_elems, size_t first_bucket_bytes,
                             size_t bucket_bytes, dt_wire_dtype wire, dt_gradsync **out)
{
    *out = NULL;
    dt_gradsync *g = calloc(1, sizeof *g);
    if (!g)
        return dt_error(DT_ERR_NOMEM, "no memory for the gradient synchronizer");
    g->comm = comm, g->grads = grads, g->n_elems = n_elems, g->wire = wire;
    g->first_elems = first_bucket_bytes / sizeof(float) ? first_bucket_bytes / sizeof(float) : 1;
    g->bucket_elems = bucket_bytes / sizeof(float) ? bucket_bytes / sizeof(float) : 1;
    g->handed_from = n_elems;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->thread, NULL, comm_thread, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return dt_error(DT_ERR_IO, "cannot start the gradient communication thread");
    }
    *out = g;
    return DT_OK;
}

void dt_gradsync_begin(dt_gradsync *g)
{
    pthread_mutex_lock(&g->mu);
    g->pushed = g->done = 0;
    g->handed_from = g->n_elems;
    g->st = DT_OK;
    pthread_mutex_unlock(&g->mu);
}

/* Hands grads[lo, handed_from) to the thread. Called with the lock held. */
static void push(dt_gradsync *g, size_t lo)
{
    g->queue[g->pushed++] = (bucket){lo, g->handed_from};
    g->handed_from = lo;
    pthread_cond_broadcast(&g->cv);
}

void dt_gradsync_ready(void *arg, size_t ready_from)
{
    dt_gradsync *g = arg;
    pthread_mutex_lock(&g->mu);
    size_t want = g->pushed == 0 ? g->first_elems : g->bucket_elems;
    /* The last slot is kept for finish, which hands over whatever remains. */
    if (ready_from < g->handed_from && g->handed_from - ready_from >= want &&
        g->pushed < MAX_BUCKETS - 1)
        push(g, ready_from);
    pthread_mutex_unlock(&g->mu);
}

dt_status dt_gradsync_finish(dt_gradsync *g)
{
    double t0 = dt_clock_now();
    pthread_mutex_lock(&g->mu);
    if (g->handed_from > 0)
        push(g, 0);
    while (g->done < g->pushed)
        pthread_cond_wait(&g->cv, &g->mu);
    dt_status st = g->st;
    if (st)
        dt_error(st, "%s", g->msg);
    pthread_mutex_unlock(&g->mu);
    g->last_wait = dt_clock_now() - t0;
    return st;
}

double dt_gradsync_last_wait(const dt_gradsync *g) { return g->last_wait; }

void dt_gradsync_destroy(dt_gradsync *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}
