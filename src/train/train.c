/* Training as `dtrain train` does it, from one call (see include/dtrain/train.h). */
#include "dtrain/train.h"

#include "spec_run.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/clock.h"
#include "dtrain/cluster.h"
#include "../core/crc32c.h"
#include "dtrain/evaluator.h"
#include "dtrain/model.h"
#include "dtrain/pool.h"
#include "dtrain/strategy.h"
#include "ps_train.h"

void dt_train_config_default(dt_train_config *c)
{
    memset(c, 0, sizeof *c);
    c->model = "mnist_cnn";
    dt_ctr_spec_default(&c->ctr);
    c->data = "fashion-mnist";
    dt_input_options_default(&c->input);
    dt_optim_config_default(&c->optim, DT_OPT_SGD);
    dt_comm_options_default(&c->comm);
    dt_ps_options_default(&c->ps);
    dt_fit_config_default(&c->fit);
}

/* Puts "member." before this thread's message (a nested struct's check names its own field). */
static dt_status in_member(dt_status st, const char *member)
{
    char message[1024];
    snprintf(message, sizeof message, "%s", dt_last_error());
    return dt_error(st, "%s.%s", member, message);
}

dt_status dt_train_config_check(const dt_train_config *c)
{
    dt_status st;
    if (!c->data)
        return dt_error(DT_ERR_INVALID, "data: missing: a data spec (input.h)");
    if ((st = dt_fit_check(&c->fit, -1)))
        return in_member(st, "fit");
    /* The input's batching is fit's (dt_train copies it in), so its other fields are checked
     * with fit's in place. */
    dt_input_options io = c->input;
    io.batch_size = c->fit.batch_size, io.seed = c->fit.seed;
    io.shuffle_buffer = c->fit.shuffle_buffer, io.prefetch = c->fit.prefetch;
    io.keep_remainder = c->fit.keep_remainder;
    if ((st = dt_input_options_check(&io)))
        return in_member(st, "input");
    if ((st = dt_optim_config_check(&c->optim)))
        return in_member(st, "optim");
    if ((st = dt_ctr_spec_check(&c->ctr)))
        return in_member(st, "ctr");
    if (c->hash_buckets < 0)
        return dt_error(DT_ERR_INVALID, "hash_buckets: must not be negative, got %lld",
                        (long long)c->hash_buckets);
    if ((st = dt_comm_options_check(&c->comm)))
        return in_member(st, "comm");
    if ((st = dt_ps_options_check(&c->ps)))
        return in_member(st, "ps");
    dt_strategy_kind kind = DT_STRATEGY_ONE_DEVICE;
    if (c->strategy && (st = dt_strategy_parse(c->strategy, &kind)))
        return dt_error_prefix(st, "strategy");
    if (c->replicas < 0 || c->replicas > 256 ||
        (c->replicas > 0 && (!c->strategy || (kind != DT_STRATEGY_MIRRORED &&
                                              kind != DT_STRATEGY_CENTRAL_STORAGE))))
        return dt_error(DT_ERR_INVALID, "replicas: 1..256 model copies, with `strategy` "
                        "mirrored or central_storage (0: one per core), got %d", c->replicas);
    if (c->threads < 0 || c->threads > 1024)
        return dt_error(DT_ERR_INVALID, "threads: must be in 0..1024 (0: every core), got %d",
                        c->threads);
    if (c->wire != DT_WIRE_F32 && c->wire != DT_WIRE_BF16 && c->wire != DT_WIRE_F16)
        return dt_error(DT_ERR_INVALID, "wire: not a wire type (%d)", (int)c->wire);
    if (c->bucket_bytes > ((size_t)4096 << 20))
        return dt_error(DT_ERR_INVALID, "bucket_bytes: must be at most 4096 MiB, got %zu bytes",
                        c->bucket_bytes);
    return DT_OK;
}

/* ---- Where this process stands ---- */

/* This task's place in TF_CONFIG's cluster (with the task override), read once, whatever the
 * strategy: a TF_CONFIG that is not valid is an error naming its field, never a silent run alone.
 * Over mpi, mpirun names the cluster and TF_CONFIG is not read. */
typedef struct {
    bool evaluator;    /* this task is the cluster's evaluator */
    bool ps;           /* this task is a ps task */
    bool has_ps;       /* the cluster names ps tasks */
    int n_workers;     /* training tasks */
    dt_job job;        /* this task */
    int index;
    int n_worker_tasks; /* the cluster's worker job */
    int n_chief_tasks;
    int n_ps;          /* the cluster's ps job */
    bool loopback;     /* every task on this machine */
    bool sparse;       /* TFJob's sparseCluster: the workers train between-graph */
} task_place;

static dt_status read_task_place(const dt_comm_options *o, task_place *p)
{
    memset(p, 0, sizeof *p);
    p->n_workers = 1;
    if (strcmp(o->backend, "tcp") != 0)
        return DT_OK;
    dt_cluster c;
    memset(&c, 0, sizeof c);
    dt_status st = dt_cluster_from_env(&c);
    if (st == DT_OK && o->task)
        st = dt_cluster_set_task(&c, o->task);
    if (st == DT_OK && c.has_cluster) {
        p->evaluator = c.task_type == DT_JOB_EVALUATOR;
        p->ps = c.task_type == DT_JOB_PS;
        p->has_ps = c.n_tasks[DT_JOB_PS] > 0;
        p->n_workers = c.n_workers;
        p->job = c.task_type, p->index = c.task_index;
        p->n_worker_tasks = c.n_tasks[DT_JOB_WORKER];
        p->n_chief_tasks = c.n_tasks[DT_JOB_CHIEF];
        p->n_ps = c.n_tasks[DT_JOB_PS];
        p->loopback = dt_cluster_all_loopback(&c);
        p->sparse = c.sparse;
    }
    dt_cluster_free(&c);
    return st;
}

typedef struct train_role train_role;

/* What this process runs: the strategy, its replicas, their threads, the communicator, and its
 * role among them. */
typedef struct {
    const train_role *role;
    dt_strategy_kind kind;
    bool on_threads;   /* replicas on threads of this process */
    int workers, rank; /* replicas in sync, and this process's first one */
    int threads;       /* per replica */
    int prefetch;
    dt_comm *comm;     /* multi_worker_mirrored's */
    dt_cluster cluster;
} run_plan;

/* The parts of a training process, made by dt_train, for its role to train with. */
typedef struct {
    const dt_train_config *c;
    const run_plan *plan;
    const dt_model_spec *spec;
    const dt_fit_config *fcfg;
    const dt_input_options *io;
    dt_input *in;
    dt_model *model;
    dt_optim *opt;
    dt_pool *pool;
    int64_t table_rows;         /* the rows of the tables the model stands for */
    dt_train_report *out;
} train_parts;

/* What a training process does once the plan is made: which share of the data it reads, the
 * rows its tables hold, how it trains, and how it is described. A synchronous strategy's
 * replicas and the parameter server's coordinator and workers are one entry each, so dt_train
 * has no branch on the strategy. (The evaluator and the ps tasks train nothing: dt_train hands
 * them over before a plan is made.) */
struct train_role {
    /* Its input's place among the cluster's readers. */
    dt_input_context (*input)(const dt_train_config *c, const run_plan *p);
    /* The model's table rows for this process (NULL: the spec's). */
    void (*tables)(const dt_input *in, dt_model_spec *spec);
    /* Trains the model made for it, its variables not yet set. */
    dt_status (*train)(const train_parts *t);
    /* The line naming the run's layout (the chief's). */
    void (*describe)(const dt_train_config *c, const run_plan *p, const char *name);
    /* Its model is the job's: counted, checksummed and tested for the report. */
    bool reports;
};

static const train_role replicas_role, ps_coordinator_role, ps_worker_role, ps_sparse_lead_role,
    ps_sparse_follower_role;

static dt_status check_divides(int batch, int n, const char *who)
{
    if (batch % n != 0)
        return dt_error(DT_ERR_INVALID, "fit.batch_size: the global batch %d is not divisible by "
                        "the %d %s", batch, n, who);
    return DT_OK;
}

/* multi_worker_mirrored: the cluster's communicator; the workers on this machine share out its
 * cores, as mirrored replicas do (with every core each, their threads would take turns on each
 * core, each waiting on the others). When they have a thread on every core, a prefetch thread
 * would have no core of its own, and each hand-off wakes it on a core a worker needs: the input
 * then runs on the worker's own thread (2 workers of the tutorial CNN on 2 cores read a batch in
 * 40 us so, against 50 to 120 us from a prefetch thread). */
static dt_status plan_workers(const dt_train_config *c, run_plan *p)
{
    dt_status st = dt_comm_open(&c->comm, &p->cluster, &p->comm);
    if (st)
        return st;
    p->workers = p->comm->size, p->rank = p->comm->rank;
    if ((st = check_divides(c->fit.batch_size, p->workers, "workers")))
        return st;
    int local = dt_comm_local_ranks(p->comm);
    if (c->threads <= 0 && local > 1)
        p->threads = p->threads / local > 0 ? p->threads / local : 1;
    if (local > 1 && local * p->threads >= dt_cpu_count() && !c->prefetch_given)
        p->prefetch = 0;
    return DT_OK;
}

/* A sparse cluster's worker: worker 0 leads, the others follow (ps_train.h); each reads shard
 * i of --num-workers, or all its data. */
static dt_status plan_sparse(const dt_train_config *c, const task_place *place, run_plan *p)
{
    if (c->ps.mode != DT_PS_ASYNC)
        return dt_error(DT_ERR_INVALID, "ps.mode: TF_CONFIG's sparseCluster (TFJob's "
                        "enableDynamicWorker) trains between-graph, each worker on its own "
                        "against the ps tasks: asynchronously only (no ssp, no hybrid)");
    if (c->ps.num_workers > 0 && place->index >= c->ps.num_workers)
        return dt_error(DT_ERR_INVALID, "ps.num_workers: worker:%d is not among the %d workers "
                        "of --num-workers", place->index, c->ps.num_workers);
    p->role = place->index == 0 ? &ps_sparse_lead_role : &ps_sparse_follower_role;
    p->workers = c->ps.num_workers > 0 ? c->ps.num_workers : 1;
    p->rank = place->index;
    return DT_OK;
}

/* parameter_server: the coordinator (the chief) computes nothing, so it takes one thread; the
 * workers on one machine share out its cores. Replicas in sync: the workers; rank 0 the
 * coordinator, worker i rank i + 1. */
static dt_status plan_ps(const dt_train_config *c, const task_place *place, run_plan *p)
{
    if (!place->has_ps)
        return dt_error(DT_ERR_INVALID, "--strategy parameter_server: TF_CONFIG's cluster names "
                        "no ps task (cluster.ps)");
    if (place->sparse)
        return plan_sparse(c, place, p);
    if (place->n_chief_tasks != 1)
        return dt_error(DT_ERR_INVALID, "TF_CONFIG: cluster.chief: parameter-server training needs "
                        "one chief (the coordinator), found %d", place->n_chief_tasks);
    if (place->n_worker_tasks < 1)
        return dt_error(DT_ERR_INVALID, "TF_CONFIG: cluster.worker: parameter-server training "
                        "needs at least one worker task");
    if (strcmp(c->comm.backend, "tcp") != 0)
        return dt_error(DT_ERR_INVALID, "comm.backend: parameter_server runs over tcp (TF_CONFIG)");
    p->workers = place->n_worker_tasks;
    dt_status st = c->ps.mode == DT_PS_HYBRID
                       ? check_divides(c->fit.batch_size, p->workers, "workers")
                       : DT_OK;
    if (st)
        return st;
    if (place->job == DT_JOB_CHIEF) {
        p->role = &ps_coordinator_role;
        p->rank = 0, p->threads = 1;
    } else {
        p->role = &ps_worker_role;
        p->rank = place->index + 1;
        if (c->threads <= 0 && place->loopback && p->workers > 1)
            p->threads = p->threads / p->workers > 0 ? p->threads / p->workers : 1;
    }
    return DT_OK;
}

static dt_status plan_run(const dt_train_config *c, const task_place *place, run_plan *p)
{
    memset(p, 0, sizeof *p);
    p->role = &replicas_role;
    p->workers = 1;
    p->threads = c->threads > 0 ? c->threads : dt_cpu_count();
    p->prefetch = c->fit.prefetch;
    const char *name = c->strategy;
    /* As TF: a cluster of several workers (TF_CONFIG, or mpi) means multi_worker_mirrored, one
     * with ps tasks parameter_server. */
    if (!name)
        name = place->has_ps ? "parameter_server"
               : strcmp(c->comm.backend, "mpi") == 0 || place->n_workers > 1
                   ? "multi_worker_mirrored"
                   : "one_device";
    dt_status st = dt_strategy_parse(name, &p->kind);
    if (st)
        return dt_error_prefix(st, "strategy");
    if (p->kind == DT_STRATEGY_PARAMETER_SERVER)
        return plan_ps(c, place, p);
    if (place->has_ps)
        return dt_error(DT_ERR_INVALID, "--strategy %s: TF_CONFIG's cluster names ps tasks, which "
                        "only --strategy parameter_server uses", name);
    if (p->kind == DT_STRATEGY_MULTI_WORKER_MIRRORED)
        return plan_workers(c, p);
    p->on_threads = p->kind == DT_STRATEGY_MIRRORED || p->kind == DT_STRATEGY_CENTRAL_STORAGE;
    if (p->on_threads) {
        p->workers = c->replicas > 0 ? c->replicas : dt_cpu_count();
        /* The cores are shared out: each replica's kernels run on its own threads. */
        p->threads = p->threads / p->workers > 0 ? p->threads / p->workers : 1;
        return check_divides(c->fit.batch_size, p->workers, "replicas");
    }
    return DT_OK;
}

static void plan_free(run_plan *p)
{
    dt_comm_destroy(p->comm);
    dt_cluster_free(&p->cluster);
    p->comm = NULL;
}

/* ---- The replicas ---- */

/* One replica's training, run by dt_strategy_run on every replica of this process. The
 * process's first replica has the model, data and optimizer dt_train prepared, and the chief
 * among the replicas reports. Other local replicas (mirrored and central_storage, on threads)
 * build their own model, with the variables their strategy gives them, and their own block of
 * every global batch (the chief's images are shared, read-only). */
typedef struct {
    const dt_train_config *c;
    const dt_model_spec *spec;
    dt_fit_config fcfg;
    dt_input_options io;
    dt_input *chief_in;
    dt_model *chief_model;
    dt_optim *chief_opt;
    dt_pool *chief_pool;
    const run_plan *plan;
    dt_fit_result chief_res;
    int64_t other_bad_records; /* skipped by the other replicas in files only they read */
} replica_run;

static dt_status other_local_replica(replica_run *m, dt_replica *r)
{
    dt_fit_config fcfg = m->fcfg;
    fcfg.progress = NULL;
    fcfg.log = NULL;
    fcfg.validate = false;
    dt_input in;
    dt_pool *pool = NULL;
    dt_model *model = NULL;
    dt_optim opt;
    dt_optim_init(&opt);
    dt_input_context ctx = {m->plan->workers, dt_replica_id(r), m->plan->workers};
    dt_status st = dt_input_open_replica(m->chief_in, &m->io, &ctx, &in);
    dt_model_options mopts = {.no_fuse = m->c->no_fuse};
    dt_fit_result res;
    if (st || (st = dt_pool_create(m->plan->threads, &pool)) ||
        (st = dt_model_create(m->spec, m->chief_in->eval_batch, pool, &mopts, &model)) ||
        (st = dt_replica_create_variables(r, model, m->chief_model, &opt, &m->c->optim,
                                          m->c->fit.seed)))
        goto done;
    st = dt_fit_replica(r, model, &opt, pool, in.train, NULL, &fcfg, &res);
done:
    dt_optim_free(&opt);
    dt_model_destroy(model);
    dt_pool_destroy(pool);
    dt_input_free(&in);
    /* Sharded by FILE, each replica read files no other did, so the run skipped the sum of
     * their bad records; otherwise every replica read every record and counted the chief's.
     * Read once the input is freed: its prefetch thread, which counts too, has stopped. */
    if (in.autoshard == DT_AUTOSHARD_FILE)
        __atomic_add_fetch(&m->other_bad_records, in.bad_records, __ATOMIC_RELAXED);
    return st;
}

static dt_status train_replica(void *ctx, dt_replica *r)
{
    replica_run *m = ctx;
    if (m->plan->on_threads && dt_replica_id(r) > 0)
        return other_local_replica(m, r);
    /* Only the chief evaluates: the other workers' fit has no test data. */
    bool chief = dt_replica_id(r) == 0;
    return dt_fit_replica(r, m->chief_model, m->chief_opt, m->chief_pool, m->chief_in->train,
                          chief ? m->chief_in->test : NULL, &m->fcfg, &m->chief_res);
}

/* ---- The parts ---- */

/* The training and test specs: test_data, "none", or the t10k half beside directory data. */
static dt_status input_specs(const dt_train_config *c, dt_input_spec *train, dt_input_spec *test,
                             bool *have_test)
{
    *have_test = false;
    dt_status st = dt_input_spec_parse(c->data, "data", train);
    if (st)
        return st;
    if (c->test_data && strcmp(c->test_data, "none") == 0)
        return DT_OK;
    if (!c->test_data) {
        dt_input_spec_default_test(train, test, have_test);
        return DT_OK;
    }
    *have_test = true;
    return dt_input_spec_parse(c->test_data, "test_data", test);
}

/* A built-in CTR model's spec: the tables have the hash buckets' rows when ids are hashed. */
static dt_status ctr_spec(const dt_train_config *c, dt_arch arch, dt_model_spec *spec)
{
    dt_ctr_spec ctr = c->ctr;
    if (c->hash_buckets > 0)
        ctr.feature_size = c->hash_buckets;
    if (ctr.feature_size < 1 && !ctr.dynamic)
        return dt_error(DT_ERR_INVALID, "ctr.feature_size: model %s needs the number of "
                        "feature ids (the tables' rows), or `hash_buckets`", c->model);
    return dt_model_spec_ctr(arch, &ctr, spec);
}

/* For a CTR model, built in or from a model file: its data is read field-positional, its ids
 * checked against the tables' rows or hashed into them. *ctr false for other models. */
static dt_status ctr_input_options(const dt_train_config *c, dt_input_options *io, bool *ctr)
{
    *ctr = false;
    dt_arch arch = DT_ARCH_SEQUENTIAL;
    dt_ctr_spec spec = c->ctr;
    if (c->model_file) {
        dt_model_spec file;
        dt_status st = dt_model_spec_from_json_file(c->model_file, &file);
        if (st)
            return st;
        arch = file.arch;
        spec = file.ctr;
        if (arch != DT_ARCH_SEQUENTIAL && c->hash_buckets > 0 &&
            c->hash_buckets != spec.feature_size)
            return dt_error(DT_ERR_INVALID, "--hash-buckets %lld: %s has feature_size %lld: the "
                            "ids are hashed into the table's rows, so give the same number",
                            (long long)c->hash_buckets, c->model_file, spec.feature_size);
    } else if (dt_arch_parse(c->model, &arch) != DT_OK) {
        dt_error_clear();
        return DT_OK;
    }
    if (arch == DT_ARCH_SEQUENTIAL)
        return DT_OK;
    *ctr = true;
    if (spec.dynamic && c->hash_buckets > 0)
        return dt_error(DT_ERR_INVALID, "--hash-buckets %lld: dynamic tables key their rows by "
                        "the raw id, never hashed into buckets: drop one of the two",
                        (long long)c->hash_buckets);
    io->field_size = spec.field_size;
    io->hash_buckets = c->hash_buckets;
    io->max_id = c->hash_buckets > 0 || spec.dynamic ? 0 : spec.feature_size;
    return DT_OK;
}

/* The model's spec, its input shape the data's when it names none. */
static dt_status load_model_spec(const dt_train_config *c, const dt_input *in,
                                 dt_model_spec *spec)
{
    dt_arch arch = DT_ARCH_SEQUENTIAL;
    if (!c->model_file && dt_arch_parse(c->model, &arch) == DT_OK && arch != DT_ARCH_SEQUENTIAL)
        return ctr_spec(c, arch, spec);
    dt_error_clear();
    dt_status st = c->model_file ? dt_model_spec_from_json_file(c->model_file, spec)
                                 : dt_model_spec_builtin(c->model, spec);
    if (st)
        return c->model_file ? st : dt_error_prefix(st, "model");
    if (spec->arch != DT_ARCH_SEQUENTIAL) /* fields, not a shape of dense values */
        return DT_OK;
    if (spec->input_shape[0] == 0) {
        memcpy(spec->input_shape, in->shape, sizeof in->shape);
    } else if (memcmp(spec->input_shape, in->shape, sizeof in->shape) != 0) {
        return dt_error(DT_ERR_INVALID, "%s: input_shape is [%d, %d, %d] but %s gives %dx%dx%d "
                        "inputs", c->model_file, spec->input_shape[0], spec->input_shape[1],
                        spec->input_shape[2], in->source, in->shape[0], in->shape[1],
                        in->shape[2]);
    }
    return DT_OK;
}

/* A ps task of a cluster: it serves the coordinator and the workers until told to stop. */
static dt_status run_ps_task(const dt_train_config *c, dt_train_report *out)
{
    dt_ps_server_config sc;
    dt_ps_server_config_default(&sc);
    sc.task = c->comm.task, sc.secret_file = c->comm.secret_file, sc.insecure = c->comm.insecure;
    sc.coordinator_timeout = c->ps.coordinator_timeout;
    sc.threads = c->threads > 0 ? c->threads : 1;
    /* Snapshots beside the chief's checkpoints: --model-dir/ps. */
    char dir[4200];
    if (c->fit.model_dir) {
        snprintf(dir, sizeof dir, "%s/ps", c->fit.model_dir);
        if (mkdir(c->fit.model_dir, 0755) != 0 && errno != EEXIST)
            return dt_error(DT_ERR_IO, "--model-dir %s: %s", c->fit.model_dir, strerror(errno));
        sc.snapshot_dir = dir;
        sc.model_dir = c->fit.model_dir;
    }
    sc.snapshot_secs = c->ps.snapshot_secs;
    out->ps_task = true;
    snprintf(out->strategy, sizeof out->strategy, "parameter_server");
    return dt_ps_server_run(&sc, &out->ps);
}

/* A feature-spec model's evaluator reads the spec the chief adapted and saves before its first
 * checkpoint: it waits for it (bounded), as for the checkpoints. */
static dt_status await_saved_spec(const char *model_dir, double timeout)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", model_dir, DT_FEATURE_SPEC_FILE);
    double deadline = dt_clock_now() + timeout;
    while (access(path, F_OK) != 0) {
        if (timeout > 0 && dt_clock_now() > deadline)
            return dt_error(DT_ERR_TIMEOUT, "%s: not written within %.0f s (--watch-timeout)",
                            path, timeout);
        dt_sleep(0.5);
    }
    return DT_OK;
}

/* The evaluator task of a cluster: TF's sidecar evaluator over the chief's model directory. */
static dt_status run_evaluator(const dt_train_config *c, dt_train_report *out)
{
    if (!c->fit.model_dir)
        return dt_error(DT_ERR_INVALID, "the evaluator task evaluates the checkpoints of "
                        "--model-dir: give it");
    const char *test = c->test_data;
    dt_input_spec train;
    if (!test && dt_input_spec_parse(c->data, "data", &train) == DT_OK &&
        train.kind == DT_INPUT_MNIST_DIR)
        test = c->data; /* the t10k files beside the training data */
    if (!test || strcmp(test, "none") == 0)
        return dt_error(DT_ERR_INVALID, "the evaluator task needs --test-data");
    dt_evaluator_options eo;
    dt_evaluator_options_default(&eo);
    eo.model_dir = c->fit.model_dir, eo.watch = true, eo.test_data = test;
    dt_input_options io = c->input; /* file test data is read as the training data is */
    bool ctr;
    dt_status st = c->feature_spec ? await_saved_spec(c->fit.model_dir, eo.idle_timeout)
                                   : ctr_input_options(c, &io, &ctr);
    if (st)
        return st;
    eo.input = &io;
    eo.out = c->fit.log;
    eo.log = stderr;
    out->evaluator = true;
    return dt_evaluate_checkpoints(&eo);
}

/* The fit's configuration as this process runs it: only the chief prints and validates. */
static dt_fit_config fit_config_of(const dt_train_config *c, const run_plan *p,
                                   const dt_input *in)
{
    dt_fit_config f = c->fit;
    bool chief = p->rank == 0;
    f.prefetch = p->prefetch;
    /* A sparse cluster's workers each show their own progress, as TF 1.x's did. */
    if (!chief && p->role != &ps_sparse_follower_role)
        f.progress = f.log = NULL;
    f.validate = c->fit.validate && in->test && chief;
    if (in->n_train >= 0)
        f.expected_steps_per_epoch = dt_fit_batches_per_epoch(&f, in->n_train);
    return f;
}

/* The final report's test figures cover the whole test set, which eval_steps may not have. */
static dt_status final_test(const dt_train_config *c, dt_input *in, dt_model *m,
                            dt_train_report *out)
{
    const dt_fit_result *r = &out->fit;
    out->have_test = in->test != NULL;
    out->test_loss = r->val_loss, out->test_accuracy = r->val_accuracy;
    out->test_auc = out->test_logloss = NAN;
    /* A binary model's AUC needs every score of the set: its validation did not keep them. */
    bool binary = dt_model_num_outputs(m) == 1 &&
                  dt_model_spec_of(m)->loss == DT_LOSS_BINARY_CROSSENTROPY;
    if (!in->test || (r->validated && c->fit.eval_steps == 0 && !binary))
        return DT_OK;
    dt_status st = dt_dataset_reset(in->test);
    dt_eval_metrics e;
    if (st == DT_OK && (st = dt_evaluate_metrics(m, in->test, 0, &e)) == DT_OK) {
        out->test_loss = e.loss, out->test_accuracy = e.accuracy;
        out->test_auc = e.auc, out->test_logloss = e.logloss;
    }
    return st;
}

static void describe(const dt_train_config *c, const run_plan *p, dt_model *m,
                     const char *name)
{
    if (!c->out || p->rank != 0)
        return;
    if (c->summary)
        dt_model_summary(m, c->out);
    p->role->describe(c, p, name);
}

/* Dynamic tables give each key a row as it arrives, in the one process that trains them. */
static dt_status check_dynamic_strategy(const dt_model_spec *spec, dt_strategy_kind kind)
{
    /* One process holds the key map, or the parameter server's shards each hold theirs (the
     * keys placed by their hash); the synchronous replicas would each need the same map. */
    if (!dt_model_spec_dynamic(spec) || kind == DT_STRATEGY_ONE_DEVICE ||
        kind == DT_STRATEGY_PARAMETER_SERVER)
        return DT_OK;
    return dt_error(DT_ERR_UNSUPPORTED, "model %s: %s train with one_device or parameter_server; "
                    "%s does not train them yet", spec->name,
                    spec->arch == DT_ARCH_COLUMNS ? "a feature spec's dynamic columns"
                                                  : "dynamic tables",
                    dt_strategy_name(kind));
}

typedef struct {
    int64_t key, row;
} keyed_row;

static int by_key(const void *a, const void *b)
{
    int64_t x = ((const keyed_row *)a)->key, y = ((const keyed_row *)b)->key;
    return (x > y) - (x < y);
}

/* Table t's rows into the report's count and CRC: a fixed table's in order, a dynamic one's
 * live rows in key order (where a process put each key is its own affair: one_device and the
 * parameter server's read-back agree on the keys' rows, not on their order). */
static dt_status checksum_table(dt_model *m, int t, dt_train_report *out)
{
    const dt_table *tab = dt_model_table(m, t);
    size_t dim = (size_t)tab->dim;
    dt_keymap *km = dt_model_keymap(m, t);
    if (!km) {
        size_t n = (size_t)dt_model_table_rows_used(m, t) * dim;
        out->param_count += n;
        out->param_checksum = dt_crc32c_extend(out->param_checksum, tab->data, n * sizeof(float));
        return DT_OK;
    }
    dt_keymap_stats k;
    dt_keymap_stats_get(km, &k);
    size_t n = (size_t)k.live, got = 0;
    keyed_row *kr = malloc((n + 1) * sizeof *kr);
    int64_t *rows = malloc((n + 1) * sizeof *rows), *keys = malloc((n + 1) * sizeof *keys);
    uint32_t *counts = malloc((n + 1) * sizeof *counts), *last = malloc((n + 1) * sizeof *last);
    dt_status st = kr && rows && keys && counts && last
                       ? DT_OK
                       : dt_error(DT_ERR_NOMEM, "no memory to check table %s's %zu rows",
                                  tab->name, n);
    int64_t cursor = 0;
    if (st == DT_OK)
        got = dt_keymap_next_live(km, &cursor, n, rows, keys, counts, last);
    for (size_t i = 0; i < got; i++)
        kr[i] = (keyed_row){keys[i], rows[i]};
    qsort(kr, got, sizeof *kr, by_key);
    for (size_t i = 0; i < got; i++)
        out->param_checksum = dt_crc32c_extend(out->param_checksum, dt_table_row(tab, kr[i].row),
                                               dim * sizeof(float));
    out->param_count += got * dim;
    free(kr), free(rows), free(keys), free(counts), free(last);
    return st;
}

/* The replicas of a synchronous strategy, trained with fit; out gets the chief's result. */
static dt_status train_replicas(const dt_train_config *c, const run_plan *plan,
                                const dt_model_spec *spec, const dt_fit_config *fcfg,
                                const dt_input_options *io, dt_input *in, dt_model *model,
                                dt_optim *opt, dt_pool *pool, dt_train_report *out)
{
    dt_strategy_options so;
    dt_strategy_options_default(&so);
    so.replicas = plan->on_threads ? plan->workers : 1;
    so.timeout = c->comm.timeout;
    so.comm = plan->comm;
    so.bucket_bytes = c->bucket_bytes;
    so.wire = c->wire;
    replica_run run = {.c = c, .spec = spec, .fcfg = *fcfg, .io = *io, .chief_in = in,
                       .chief_model = model, .chief_opt = opt, .chief_pool = pool,
                       .plan = plan};
    dt_strategy *strategy = NULL;
    dt_status st = dt_strategy_create(plan->kind, &so, &strategy);
    if (st == DT_OK)
        st = dt_strategy_run(strategy, train_replica, &run);
    dt_strategy_destroy(strategy);
    out->fit = run.chief_res;
    out->bad_records = run.other_bad_records;
    return st;
}

/* ---- Roles ---- */

/* A synchronous strategy's replicas: each reads its block of every global batch; the variables
 * start as one_device's and fit trains them. */
static dt_input_context replicas_input(const dt_train_config *c, const run_plan *p)
{
    (void)c;
    return (dt_input_context){p->workers, p->rank, p->workers};
}

static dt_status replicas_train(const train_parts *t)
{
    dt_model_init_params(t->model, t->c->fit.seed);
    dt_status st = dt_model_setup_optimizer(t->model, t->opt, &t->c->optim);
    return st ? st : train_replicas(t->c, t->plan, t->spec, t->fcfg, t->io, t->in, t->model,
                                    t->opt, t->pool, t->out);
}

static void replicas_describe(const dt_train_config *c, const run_plan *p, const char *name)
{
    if (p->workers > 1)
        fprintf(c->out, "%s: %d %s (%s), %d examples per %s per step\n", name, p->workers,
                p->on_threads ? "replicas" : "workers",
                p->on_threads ? "local" : dt_comm_describe(p->comm),
                c->fit.batch_size / p->workers, p->on_threads ? "replica" : "worker");
}

static const train_role replicas_role = {.input = replicas_input, .train = replicas_train,
                                         .describe = replicas_describe, .reports = true};

/* The parameter server's coordinator reads the data only for its size; its model's dense
 * variables are what the ps tasks start from, and its tables are only read back into at the
 * end (the ps tasks draw the rows). */
static dt_input_context ps_coordinator_input(const dt_train_config *c, const run_plan *p)
{
    (void)c, (void)p;
    return (dt_input_context){1, 0, 1};
}

static dt_status ps_coordinator_train(const train_parts *t)
{
    dt_model_init_dense_params(t->model, t->c->fit.seed);
    return dt_ps_coordinate(t->c, t->fcfg, t->model, t->in->test, &t->out->fit);
}

static void ps_describe(const dt_train_config *c, const run_plan *p, const char *name)
{
    if (c->ps.mode == DT_PS_SSP)
        fprintf(c->out, "%s: %d workers, %d examples per worker step, bounded staleness %d\n",
                name, p->workers, c->fit.batch_size, c->ps.staleness);
    else if (c->ps.mode == DT_PS_HYBRID)
        fprintf(c->out, "%s: %d workers, %d examples per worker per step, hybrid (dense variables "
                "all-reduced among the workers, tables on the ps tasks)\n", name, p->workers,
                c->fit.batch_size / p->workers);
    else
        fprintf(c->out, "%s: %d workers, %d examples per worker step, asynchronous\n", name,
                p->workers, c->fit.batch_size);
}

static const train_role ps_coordinator_role = {.input = ps_coordinator_input,
                                               .train = ps_coordinator_train,
                                               .describe = ps_describe, .reports = true};

/* A parameter-server worker reads its own shard in batches of the whole --batch-size (its steps
 * are its own, not a share of a global step), but in hybrid mode, whose steps are synchronous,
 * in its share of the global batch. Its tables hold one batch's rows, pulled step by step; its
 * variables come from the ps tasks. */
static dt_input_context ps_worker_input(const dt_train_config *c, const run_plan *p)
{
    return (dt_input_context){p->workers, p->rank - 1,
                              c->ps.mode == DT_PS_HYBRID ? p->workers : 1};
}

static void ps_worker_tables(const dt_input *in, dt_model_spec *spec)
{
    if (spec->arch != DT_ARCH_SEQUENTIAL && spec->arch != DT_ARCH_COLUMNS) {
        spec->ctr.feature_size = (int64_t)in->eval_batch * spec->ctr.field_size;
        /* Dynamic tables are the ps tasks': the worker's rows are the batch's, by position. */
        spec->ctr.dynamic = false;
        dt_keymap_policy_default(&spec->ctr.dynamic_policy);
    }
}

static dt_status ps_worker_train(const train_parts *t)
{
    return dt_ps_work(t->c, t->model, t->pool, t->in, t->io, t->table_rows, t->out);
}

static const train_role ps_worker_role = {.input = ps_worker_input, .tables = ps_worker_tables,
                                          .train = ps_worker_train, .describe = ps_describe};

/* A sparse cluster's worker reads shard i of --num-workers (all its data without it), in
 * batches of the whole --batch-size, as a worker under a chief. */
static dt_input_context ps_sparse_input(const dt_train_config *c, const run_plan *p)
{
    (void)c;
    return (dt_input_context){p->workers, p->workers > 1 ? p->rank : 0, 1};
}

static void ps_sparse_describe(const dt_train_config *c, const run_plan *p, const char *name)
{
    fprintf(c->out, "%s: between-graph (TF_CONFIG's sparseCluster), worker:%d %s, %d examples "
            "per step, asynchronous; data shard %d of %d\n", name, p->rank,
            p->rank == 0 ? "leading" : "following worker:0", c->fit.batch_size,
            p->workers > 1 ? p->rank : 0, p->workers);
}

/* Worker 0: its model is the whole one (the variables it defines and reads back); its worker
 * steps on a model of one batch's rows, as any worker's. */
static dt_status ps_sparse_lead_train(const train_parts *t)
{
    dt_model_spec spec = *t->spec;
    ps_worker_tables(t->in, &spec);
    dt_model_options mo = {.no_fuse = t->c->no_fuse, .dynamic_shards = 1, .keys_local = true};
    dt_model *m = NULL;
    dt_status st = dt_model_create(&spec, t->in->eval_batch, t->pool, &mo, &m);
    if (st)
        return st;
    dt_model_init_dense_params(t->model, t->c->fit.seed);
    st = dt_ps_train_sparse(t->c, t->fcfg, t->model, m, t->pool, t->in, t->io, t->table_rows,
                            t->out);
    dt_model_destroy(m);
    return st;
}

/* The other workers read nothing back: their coordinator and their worker share one model of
 * one batch's rows. */
static dt_status ps_sparse_follower_train(const train_parts *t)
{
    return dt_ps_train_sparse(t->c, t->fcfg, t->model, t->model, t->pool, t->in, t->io,
                              t->table_rows, t->out);
}

static const train_role ps_sparse_lead_role = {.input = ps_sparse_input,
                                               .train = ps_sparse_lead_train,
                                               .describe = ps_sparse_describe, .reports = true};
static const train_role ps_sparse_follower_role = {.input = ps_sparse_input,
                                                   .tables = ps_worker_tables,
                                                   .train = ps_sparse_follower_train,
                                                   .describe = ps_sparse_describe};

dt_status dt_train(const dt_train_config *c, dt_train_report *out)
{
    memset(out, 0, sizeof *out);
    task_place place;
    run_plan plan;
    memset(&plan, 0, sizeof plan);
    dt_input in;
    memset(&in, 0, sizeof in);
    dt_pool *pool = NULL;
    dt_model *model = NULL;
    dt_optim opt;
    dt_optim_init(&opt);
    dt_spec_run sr;
    memset(&sr, 0, sizeof sr);
    dt_train_config with_spec;
    dt_status st = dt_train_config_check(c);
    if (st == DT_OK)
        st = read_task_place(&c->comm, &place);
    if (st)
        return st;
    if (place.evaluator)
        return run_evaluator(c, out);
    if (place.ps)
        return run_ps_task(c, out);
    if ((st = plan_run(c, &place, &plan)))
        goto fail;
    const char *name = dt_strategy_name(plan.kind);
    if (c->feature_spec) {
        /* The spec's optimizers replace the command line's for the rest of the run. */
        if ((st = dt_spec_run_open(c, plan.rank == 0, &sr)))
            goto fail;
        with_spec = *c;
        with_spec.optim = sr.optim;
        c = &with_spec;
    }
    /* The input's batching is fit's. */
    dt_input_options io = c->input;
    io.batch_size = c->fit.batch_size, io.seed = c->fit.seed;
    io.shuffle_buffer = c->fit.shuffle_buffer, io.prefetch = plan.prefetch;
    io.keep_remainder = c->fit.keep_remainder;
    bool ctr = sr.f != NULL;
    if (sr.f)
        io.row_parser = dt_feature_parser_rows(sr.parser);
    else if ((st = ctr_input_options(c, &io, &ctr)))
        goto fail;
    if (ctr && plan.kind == DT_STRATEGY_CENTRAL_STORAGE) {
        st = dt_error(DT_ERR_UNSUPPORTED, "model %s: central_storage does not train embedding "
                      "tables (one_device, mirrored, multi_worker_mirrored and parameter_server "
                      "do)", c->feature_spec ? c->feature_spec
                                             : c->model_file ? c->model_file : c->model);
        goto fail;
    }
    dt_input_spec train_spec, test_spec;
    bool have_test;
    dt_input_context ctx = plan.role->input(c, &plan);
    dt_model_spec spec;
    if ((st = input_specs(c, &train_spec, &test_spec, &have_test)) ||
        (st = dt_input_open(&train_spec, have_test ? &test_spec : NULL, &io, &ctx, &in)) ||
        (!sr.f && (st = load_model_spec(c, &in, &spec))))
        goto fail;
    if (sr.f)
        spec = sr.model.spec;
    if ((st = check_dynamic_strategy(&spec, plan.kind)))
        goto fail;
    dt_fit_config fcfg = fit_config_of(c, &plan, &in);
    if ((fcfg.eval_every_steps > 0 || fcfg.eval_throttle_secs > 0.0) && !in.test) {
        st = dt_error(DT_ERR_INVALID, "%s: there is no test data to evaluate on (`test_data`)",
                      fcfg.eval_every_steps > 0 ? "fit.eval_every_steps"
                                                : "fit.eval_throttle_secs");
        goto fail;
    }
    if ((st = dt_fit_check(&fcfg, in.n_train))) {
        dt_error_prefix(st, "%s", in.source);
        goto fail;
    }
    /* A worker's tables hold one batch's rows of the ps tasks' (dynamic ones: of their keys). */
    bool dynamic = spec.arch != DT_ARCH_SEQUENTIAL && spec.arch != DT_ARCH_COLUMNS &&
                   spec.ctr.dynamic;
    int64_t table_rows = dynamic ? DT_PARTITION_HASH_ROWS : spec.ctr.feature_size;
    if (plan.role->tables)
        plan.role->tables(&in, &spec);
    /* No batch is larger than the training set: the buffers are sized for what will be used. */
    /* A ps coordinator reads every ps task's dynamic tables back into its own. */
    bool coordinates = plan.role == &ps_coordinator_role || plan.role == &ps_sparse_lead_role;
    dt_model_options mopts = {.no_fuse = c->no_fuse,
                              .dynamic_shards = coordinates ? place.n_ps : 1,
                              .keys_local = plan.role == &ps_worker_role ||
                                            plan.role == &ps_sparse_follower_role};
    if ((st = dt_pool_create(plan.threads, &pool)) ||
        (st = dt_model_create(&spec, in.eval_batch, pool, &mopts, &model)))
        goto fail;
    /* Images in memory are checked whole before training, so a bad label is named by its file
     * and offset rather than met half-way through an epoch. */
    if (in.train_images.n > 0 && ((st = dt_check_dataset(model, &in.train_images)) ||
                                  (in.test && (st = dt_check_dataset(model, &in.test_images)))))
        goto fail;
    describe(c, &plan, model, name);
    train_parts parts = {.c = c, .plan = &plan, .spec = &spec, .fcfg = &fcfg, .io = &io,
                         .in = &in, .model = model, .opt = &opt, .pool = pool,
                         .table_rows = table_rows, .out = out};
    st = plan.role->train(&parts);
    snprintf(out->strategy, sizeof out->strategy, "%s", name);
    if (st || !plan.role->reports)
        goto fail;
    out->chief = plan.rank == 0;
    out->threads = plan.threads, out->workers = plan.workers, out->prefetch = plan.prefetch;
    snprintf(out->model, sizeof out->model, "%s", dt_model_spec_of(model)->name);
    out->bad_records += in.bad_records;
    out->param_count = dt_arena_payload_elems(dt_model_params(model));
    out->param_checksum = dt_arena_checksum(dt_model_params(model));
    /* A CTR model's tables are parameters too: the count and the CRC go on over their rows. */
    for (int t = 0; t < dt_model_num_tables(model) && st == DT_OK; t++)
        st = checksum_table(model, t, out);
    out->dynamic = dt_model_dynamic_stats(model, &out->dynamic_stats);
    if (out->chief)
        st = final_test(c, &in, model, out);
fail:
    dt_optim_free(&opt);
    dt_model_destroy(model);
    dt_pool_destroy(pool);
    dt_input_free(&in);
    dt_spec_run_close(&sr);
    plan_free(&plan);
    return st;
}
