/* Synchronous data parallelism in fit: k workers at a global batch B end with the parameters one
 * worker gets at batch B (the property multi_worker_mirrored exists for), their copies stay
 * identical, and uneven or short batches never leave a worker waiting. Workers are threads with
 * the local communicator here; tests/net.sh runs the same across processes over tcp. */
#include <math.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/comm.h"
#include "dtrain/fit.h"
#include "dtrain/model_spec.h"
#include "dtrain/rng.h"
#include "test.h"
#include "../src/data/image_pipeline.h"

/* Quadrant images: the class is the bright quadrant. */
static void make_data(dt_image_dataset *ds, int n, uint64_t seed)
{
    memset(ds, 0, sizeof *ds);
    ds->n = n, ds->h = 8, ds->w = 8, ds->c = 1, ds->n_classes = 4;
    ds->images = malloc((size_t)n * 64);
    ds->labels = malloc((size_t)n * sizeof *ds->labels);
    dt_rng r;
    dt_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        int q = (int)dt_rng_below(&r, 4);
        ds->labels[i] = q;
        for (int p = 0; p < 64; p++)
            ds->images[i * 64 + p] =
                (uint8_t)(dt_rng_below(&r, 120) + (((p / 8) / 4) * 2 + (p % 8) / 4 == q ? 100 : 0));
    }
}

static const char *const cnn =
    "{\"name\": \"quad\", \"input_shape\": [8, 8, 1], \"layers\": ["
    "{\"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 3, \"activation\": \"relu\"},"
    "{\"type\": \"max_pooling2d\"}, {\"type\": \"flatten\"},"
    "{\"type\": \"dense\", \"units\": 16, \"activation\": \"relu\"}, {\"type\": \"dense\", \"units\": 4}]}";

#define STEPS 50
#define BATCH 32

typedef struct {
    const dt_image_dataset *data;
    dt_replica *replica; /* NULL: alone */
    int n_workers, rank;
    size_t bucket_bytes; /* the strategy's option, for the run that sets it */
    int patience; /* early stopping, with a min_delta no epoch can meet */
    float *params; /* out: the final parameters */
    size_t n_params;
    dt_status st;
    char msg[512];
    double final_loss;
    int epochs;
    bool stopped_early;
} worker;

static void *train_worker(void *arg)
{
    worker *w = arg;
    dt_model_spec spec;
    dt_model *m = NULL;
    dt_pool *pool = NULL;
    dt_dataset *ds = NULL;
    dt_optim o;
    dt_optim_init(&o);
    dt_optim_config oc;
    dt_optim_config_default(&oc, DT_OPT_ADAM);
    oc.lr = 0.01f;
    dt_fit_config fc;
    dt_fit_config_default(&fc);
    fc.epochs = 100;
    fc.max_steps = STEPS;
    fc.batch_size = BATCH;
    fc.keep_remainder = true; /* 500 examples: every 16th step is a short batch of 20 */
    fc.seed = 7;
    if (w->patience) {
        fc.max_steps = 0;
        fc.steps_per_epoch = 3;
        fc.early_stopping_patience = w->patience;
        fc.early_stopping_min_delta = 100.0;
    }
    int per_worker = (BATCH + w->n_workers - 1) / w->n_workers;
    if ((w->st = dt_model_spec_from_json(cnn, "cnn", &spec)) ||
        (w->st = dt_pool_create(1, &pool)) ||
        (w->st = dt_model_create(&spec, per_worker, pool, NULL, &m)))
        goto done;
    /* Each worker starts from its own random parameters: the chief's broadcast must win. */
    dt_model_init_params(m, 100 + (uint64_t)w->rank);
    if ((w->st = dt_optim_setup(&o, &oc, dt_model_params(m))) ||
        (w->st = dt_image_pipeline_sharded(w->data, BATCH, false, INT64_MAX, 7, 2, w->n_workers,
                                           w->rank, &ds)))
        goto done;
    dt_fit_result r;
    w->st = w->replica ? dt_fit_replica(w->replica, m, &o, pool, ds, NULL, &fc, &r)
                       : dt_fit_dataset(m, &o, pool, ds, NULL, &fc, &r);
    if (w->st)
        goto done;
    w->final_loss = r.final_loss;
    w->epochs = r.epochs;
    w->stopped_early = r.stopped_early;
    dt_arena *p = dt_model_params(m);
    w->n_params = p->n_elems;
    w->params = malloc(p->n_elems * sizeof(float));
    memcpy(w->params, p->data, p->n_elems * sizeof(float));
done:
    if (w->st)
        snprintf(w->msg, sizeof w->msg, "%s", dt_last_error());
    dt_dataset_destroy(ds);
    dt_optim_free(&o);
    dt_model_destroy(m);
    dt_pool_destroy(pool);
    return NULL;
}

/* Mirrored replicas, each training as train_worker does: w[id] is replica id's. */
static dt_status replica_fn(void *ctx, dt_replica *r)
{
    worker *w = (worker *)ctx + dt_replica_id(r);
    w->replica = r;
    train_worker(w);
    return DT_OK; /* each replica's status stays in its worker */
}

static void run_replicas(worker *w, int k, size_t bucket_bytes)
{
    dt_strategy_options so;
    dt_strategy_options_default(&so);
    so.replicas = k;
    so.timeout = 30.0;
    so.bucket_bytes = bucket_bytes;
    dt_strategy *s;
    CHECK_OK(dt_strategy_create(DT_STRATEGY_MIRRORED, &so, &s));
    CHECK_OK(dt_strategy_run(s, replica_fn, w));
    dt_strategy_destroy(s);
}

TEST(multi_worker_equals_one_worker_at_the_same_global_batch)
{
    dt_image_dataset data;
    make_data(&data, 500, 3);
    worker alone = {&data, NULL, 1, 0, 0, 0, NULL, 0, 0, "", 0, 0, false};
    train_worker(&alone);
    CHECK_MSG(alone.st == DT_OK, "%s", alone.msg);
    /* Gradients summed after backward, and in buckets during it (256 bytes: one per layer). */
    for (int trial = 0; trial < 6 && alone.st == DT_OK; trial++) {
        int k = 2 + trial % 3;
        size_t bucket = trial < 3 ? 0 : 256;
        worker w[4];
        for (int r = 0; r < k; r++)
            w[r] = (worker){&data, NULL, k, r, bucket, 0, NULL, 0, 0, "", 0, 0, false};
        run_replicas(w, k, bucket);
        for (int r = 0; r < k; r++) {
            CHECK_MSG(w[r].st == DT_OK, "%d workers, rank %d: %s", k, r, w[r].msg);
            if (w[r].st)
                continue;
            /* The copies are identical, bit for bit... */
            CHECK_MSG(memcmp(w[r].params, w[0].params, w[0].n_params * sizeof(float)) == 0,
                      "%d workers: rank %d's parameters differ from rank 0's", k, r);
            CHECK(w[r].final_loss == w[0].final_loss);
        }
        if (w[0].st == DT_OK) {
            /* ... and equal one worker's within float rounding: 1e-5 relative. */
            double diff = 0.0, norm = 0.0, worst = 0.0, scale = 0.0;
            for (size_t i = 0; i < alone.n_params; i++) {
                double d = (double)w[0].params[i] - alone.params[i];
                diff += d * d;
                norm += (double)alone.params[i] * alone.params[i];
                worst = fabs(d) > worst ? fabs(d) : worst;
                scale = fabs(alone.params[i]) > scale ? fabs(alone.params[i]) : scale;
            }
            double rel = sqrt(diff / norm);
            CHECK_MSG(rel <= 1e-5 && worst <= 1e-5 * scale,
                      "%d workers (buckets of %zu bytes) vs 1 after %d steps: relative difference "
                      "%.3g (largest %.3g of %.3g)", k, bucket, STEPS, rel, worst, scale);
            CHECK_NEAR(w[0].final_loss, alone.final_loss, 1e-5 * fabs(alone.final_loss));
        }
        for (int r = 0; r < k; r++)
            free(w[r].params);
    }
    free(alone.params);
    dt_image_dataset_free(&data);
}

/* Early stopping across workers: all stop after the same epoch, the first one plus patience. */
TEST(multi_worker_early_stopping_stops_every_worker_together)
{
    dt_image_dataset data;
    make_data(&data, 500, 3);
    worker w[3];
    for (int r = 0; r < 3; r++)
        w[r] = (worker){&data, NULL, 3, r, 0, 2, NULL, 0, 0, "", 0, 0, false};
    run_replicas(w, 3, 0);
    for (int r = 0; r < 3; r++) {
        CHECK_MSG(w[r].st == DT_OK, "rank %d: %s", r, w[r].msg);
        CHECK_MSG(w[r].epochs == 3 && w[r].stopped_early, "rank %d: %d epochs, stopped early %d",
                  r, w[r].epochs, w[r].stopped_early);
        free(w[r].params);
    }
    dt_image_dataset_free(&data);
}
