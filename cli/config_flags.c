/* The library's option types as flag kinds (see config_flags.h). */
#include "config_flags.h"

#include "comm_open.h"
#include "commands.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/cluster.h"
#include "dtrain/comm.h"
#include "dtrain/dataset.h"
#include "dtrain/fit.h"
#include "dtrain/optim.h"
#include "dtrain/partition.h"
#include "dtrain/ps.h"
#include "dtrain/tfrecord.h"

/* ---- Enums: the library's parser, shown by the name that parses to the value ---- */

#define ENUM_FLAG(var_, type_, parse_, ...)                                                        \
    static dt_status var_##_parse(const char *text, void *dst) { return parse_(text, (type_ *)dst); } \
    static const char *const var_##_names[] = {__VA_ARGS__, NULL};                                 \
    const flag_custom var_ = {var_##_parse, NULL, var_##_names, sizeof(type_), " S"}

ENUM_FLAG(flag_compression, dt_compression, dt_compression_parse, "auto", "none", "gzip", "zlib");
ENUM_FLAG(flag_autoshard, dt_autoshard_policy, dt_autoshard_parse, "off", "auto", "file", "data");
ENUM_FLAG(flag_wire, dt_wire_dtype, dt_wire_dtype_parse, "f32", "bf16", "fp16");
ENUM_FLAG(flag_optimizer, dt_opt_kind, dt_opt_kind_parse, "sgd", "momentum", "adam", "adagrad");
ENUM_FLAG(flag_lr_schedule, dt_lr_kind, dt_lr_kind_parse, "constant", "step", "cosine");
ENUM_FLAG(flag_partition_strategy, dt_partition_strategy, dt_partition_strategy_parse, "div",
          "mod");

static dt_status reduction_parse(const char *text, dt_reduction *r)
{
    if (strcmp(text, "mean") == 0)
        *r = DT_REDUCTION_MEAN;
    else if (strcmp(text, "sum_over_global_batch") == 0)
        *r = DT_REDUCTION_SUM_OVER_GLOBAL;
    else
        return dt_error(DT_ERR_INVALID, "expected mean or sum_over_global_batch, got '%s'", text);
    return DT_OK;
}
ENUM_FLAG(flag_reduction, dt_reduction, reduction_parse, "mean", "sum_over_global_batch");

/* ---- Values that set two fields ---- */

static dt_status table_optimizer_parse(const char *text, void *dst)
{
    dt_optim_config *o = dst;
    dt_status st = dt_rowopt_kind_parse(text, &o->table_kind);
    o->table_kind_set = st == DT_OK;
    return st;
}

/* Unset, the tables take the dense optimizer's counterpart: the row's help says so. */
static void table_optimizer_show(const void *dst, char *out, size_t cap)
{
    const dt_optim_config *o = dst;
    snprintf(out, cap, "%s", o->table_kind_set ? dt_rowopt_kind_name(o->table_kind) : "");
}
const flag_custom flag_table_optimizer = {table_optimizer_parse, table_optimizer_show, NULL, 0,
                                          " S"};

static dt_status ps_mode_parse(const char *text, void *dst) { return dt_ps_mode_parse(text, dst); }

static void ps_mode_show(const void *dst, char *out, size_t cap)
{
    const dt_ps_options *o = dst;
    if (o->mode == DT_PS_SSP)
        snprintf(out, cap, "ssp:%d", o->staleness);
    else
        snprintf(out, cap, "%s", o->mode == DT_PS_HYBRID ? "hybrid" : "async");
}
const flag_custom flag_ps_mode = {ps_mode_parse, ps_mode_show, NULL, 0, " S"};

static dt_status partitioner_parse(const char *text, void *dst)
{
    dt_ps_options *o = dst;
    dt_status st = dt_partitioner_parse(text, &o->partitioner);
    o->partitioner_given = st == DT_OK;
    return st;
}

/* Unset, one shard per ps task: the row's help says so. */
static void show_nothing(const void *dst, char *out, size_t cap)
{
    (void)dst;
    if (cap)
        out[0] = '\0';
}
const flag_custom flag_partitioner = {partitioner_parse, show_nothing, NULL, 0, " S"};

/* ---- Numbers with words ---- */

static dt_status count_or_word(const char *text, const char *word, int64_t word_value,
                               long long min, const char *expected, int64_t *out)
{
    if (strcmp(text, word) == 0) {
        *out = word_value;
        return DT_OK;
    }
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || errno || v < min)
        return dt_error(DT_ERR_INVALID, "expected %s, got '%s'", expected, text);
    *out = v;
    return DT_OK;
}

static dt_status shuffle_buffer_parse(const char *text, void *dst)
{
    return count_or_word(text, "all", INT64_MAX, 0, "a count >= 0 or 'all'", dst);
}

static void shuffle_buffer_show(const void *dst, char *out, size_t cap)
{
    int64_t v = *(const int64_t *)dst;
    if (v == INT64_MAX)
        snprintf(out, cap, "all");
    else
        snprintf(out, cap, "%lld", (long long)v);
}
const flag_custom flag_shuffle_buffer = {shuffle_buffer_parse, shuffle_buffer_show, NULL, 0, " S"};

static dt_status backup_freq_parse(const char *text, void *dst)
{
    return count_or_word(text, "epoch", 0, 1, "epoch or a step count >= 1", dst);
}

static void backup_freq_show(const void *dst, char *out, size_t cap)
{
    int64_t v = *(const int64_t *)dst;
    if (v == 0)
        snprintf(out, cap, "epoch");
    else
        snprintf(out, cap, "%lld", (long long)v);
}
const flag_custom flag_backup_freq = {backup_freq_parse, backup_freq_show, NULL, 0, " S"};

/* The conversion to bytes needs a bounded number: the range is checked here, in MiB. */
static dt_status mib_parse(const char *text, void *dst)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || *end || errno)
        return dt_error(DT_ERR_INVALID, "expected a number, got '%s'", text);
    if (!(v >= 0.0 && v <= 4096.0))
        return dt_error(DT_ERR_INVALID, "must be in 0..4096, got %g", v);
    *(size_t *)dst = (size_t)(v * 1048576.0);
    return DT_OK;
}

static void mib_show(const void *dst, char *out, size_t cap)
{
    snprintf(out, cap, "%g", (double)*(const size_t *)dst / 1048576.0);
}
const flag_custom flag_mib = {mib_parse, mib_show, NULL, 0, " X"};

/* ---- The CTR model's lists ---- */

/* A comma-separated list of at most cap numbers into out; their count. */
static dt_status parse_list(const char *text, int cap, double *out, int *n)
{
    *n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || (*end && *end != ',') || *n == cap)
            return dt_error(DT_ERR_INVALID, "expected up to %d comma-separated numbers, got '%s'",
                            cap, text);
        out[(*n)++] = v;
        p = *end ? end + 1 : end;
    }
    if (*n == 0)
        return dt_error(DT_ERR_INVALID, "empty");
    return DT_OK;
}

static dt_status deep_layers_parse(const char *text, void *dst)
{
    flag_ctr_lists *l = dst;
    double units[DT_MAX_DEEP_LAYERS];
    int n;
    dt_status st = parse_list(text, DT_MAX_DEEP_LAYERS, units, &n);
    if (st)
        return st;
    for (int i = 0; i < n; i++) {
        if (units[i] != (int)units[i])
            return dt_error(DT_ERR_INVALID, "units in 1..65536, got %g", units[i]);
        l->ctr->deep_layers[i] = (int)units[i];
    }
    l->ctr->n_deep = n;
    return DT_OK;
}

static void deep_layers_show(const void *dst, char *out, size_t cap)
{
    const dt_ctr_spec *c = ((const flag_ctr_lists *)dst)->ctr;
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < c->n_deep && o < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%d", i ? "," : "", c->deep_layers[i]);
}
const flag_custom flag_deep_layers = {deep_layers_parse, deep_layers_show, NULL, 0, " S"};

static dt_status dropout_keep_parse(const char *text, void *dst)
{
    flag_ctr_lists *l = dst;
    double keep[DT_MAX_DEEP_LAYERS];
    dt_status st = parse_list(text, DT_MAX_DEEP_LAYERS, keep, &l->n_keep);
    for (int i = 0; st == DT_OK && i < l->n_keep; i++)
        l->ctr->dropout_keep[i] = (float)keep[i];
    return st;
}

/* One value when every layer keeps the same. */
static void dropout_keep_show(const void *dst, char *out, size_t cap)
{
    const dt_ctr_spec *c = ((const flag_ctr_lists *)dst)->ctr;
    bool same = true;
    for (int i = 1; i < c->n_deep; i++)
        same &= c->dropout_keep[i] == c->dropout_keep[0];
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < (same ? 1 : c->n_deep) && o < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%g", i ? "," : "", c->dropout_keep[i]);
}
const flag_custom flag_dropout_keep = {dropout_keep_parse, dropout_keep_show, NULL, 0, " S"};

dt_status flag_ctr_lists_finish(flag_ctr_lists *l)
{
    dt_ctr_spec *c = l->ctr;
    if (l->n_keep > 1 && l->n_keep != c->n_deep)
        return dt_error(DT_ERR_INVALID, "--dropout-keep: one value, or one per deep layer (%d), "
                        "got %d", c->n_deep, l->n_keep);
    if (l->n_keep <= 1)
        for (int i = 1; i < c->n_deep; i++)
            c->dropout_keep[i] = c->dropout_keep[0];
    return DT_OK;
}

/* ---- Cluster resolvers ---- */

void cli_resolver_flags_add(flag_table *t, cli_resolver *r)
{
    flags_add(t, (flag_def){"cluster-resolver", FLAG_STRING, NULL, "where the cluster comes from: "
                            "tf_config, sagemaker, slurm or mpi (default auto: TF_CONFIG, else "
                            "an srun step or a SageMaker job)", &r->name, NULL});
    flags_add(t, (flag_def){"jobs", FLAG_STRING, NULL, "slurm, mpi: the tasks' jobs, JOB:COUNT,... "
                            "in name order over the ranks (default: every task a worker)",
                            &r->jobs, NULL});
    flags_add(t, (flag_def){"port-base", FLAG_STRING, NULL, "slurm, mpi: the first task's port on "
                            "each host (default 8888)", &r->port_base, NULL});
    flags_add(t, (flag_def){"bind-all", FLAG_BOOL, "false", "listen on every interface rather "
                            "than on the address this task's name resolves to (a name that "
                            "resolves to an address the host does not hold)", &r->bind_all, NULL});
}

int cli_resolver_apply(const cli_resolver *r)
{
    dt_resolver kind = DT_RESOLVER_AUTO;
    char msg[1200];
    if (r->name && dt_resolver_parse(r->name, &kind)) {
        snprintf(msg, sizeof msg, "--cluster-resolver: %s", dt_last_error());
        return cli_fail(2, msg);
    }
    const char *vars[4][2] = {{"DTRAIN_CLUSTER_RESOLVER", r->name},
                              {"DTRAIN_JOBS", r->jobs},
                              {"DTRAIN_PORT_BASE", r->port_base},
                              {"DTRAIN_BIND_ALL", r->bind_all ? "1" : NULL}};
    for (int i = 0; i < 4; i++)
        if (vars[i][1] && setenv(vars[i][0], vars[i][1], 1) != 0) {
            snprintf(msg, sizeof msg, "setting %s: %s", vars[i][0], strerror(errno));
            return cli_fail(1, msg);
        }
    const char *name = getenv("DTRAIN_CLUSTER_RESOLVER");
    if (name && *name && dt_resolver_parse(name, &kind)) {
        snprintf(msg, sizeof msg, "DTRAIN_CLUSTER_RESOLVER: %s", dt_last_error());
        return cli_fail(2, msg);
    }
    char *json = NULL;
    dt_resolver used;
    dt_cluster c;
    dt_status st = dt_cluster_resolve(kind, NULL, &json, &used);
    if (st == DT_OK && used != DT_RESOLVER_TF_CONFIG && (st = dt_cluster_parse(json, &c)) == DT_OK) {
        char me[DT_HOST_CAP + 48];
        dt_cluster_task_name(&c, c.task_type, c.task_index, me, sizeof me);
        fprintf(stderr, "dtrain: the %s resolver places this process as %s, of %d training "
                "task%s\n", dt_resolver_name(used), me, c.n_workers, c.n_workers == 1 ? "" : "s");
        dt_cluster_free(&c);
        /* Resolved once: the library's readers of the cluster (the task's place, the
         * communicator, the ps links) parse this TF_CONFIG from here on, as the resolver wrote
         * it, rather than read the platform's variables and files again. */
        if (setenv("TF_CONFIG", json, 1) != 0 ||
            setenv("DTRAIN_CLUSTER_RESOLVER", "tf_config", 1) != 0) {
            snprintf(msg, sizeof msg, "setting TF_CONFIG and DTRAIN_CLUSTER_RESOLVER: %s",
                     strerror(errno));
            free(json);
            return cli_fail(1, msg);
        }
    }
    free(json);
    return st ? cli_fail(1, dt_last_error()) : 0;
}

/* ---- The communicator's flags ---- */

void cli_comm_flags_add(flag_table *t, dt_comm_options *o)
{
#define COMM(...) flags_add_field(t, *o, __VA_ARGS__)
    COMM("comm", FLAG_STRING, backend, "communicator: tcp (TF_CONFIG names the cluster) or mpi "
         "(mpirun or srun names it)");
    CLI_MEMBER_FLAGS_ADD(t, *o);
    COMM("connect-timeout", FLAG_FLOAT, connect_timeout, "seconds to wait for every task to "
         "connect");
    COMM("timeout", FLAG_FLOAT, timeout, "seconds a collective may wait for a peer before it "
         "fails");
    COMM("shm", FLAG_BOOL, shm, "tcp: when every task runs on this host, all-reduce through "
         "shared memory, and train keeps one copy of the parameters there, each worker updating "
         "its share of them (--shm=false: always over TCP)");
#undef COMM
}
