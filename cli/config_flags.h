/* The library's option types as flag kinds (flags.h's FLAG_CUSTOM): enums parsed by the
 * library's own parsers and shown by name, and the few values whose text is not a plain number
 * ("all", "epoch", lists, MiB). Each row that uses one points at the library's field. */
#ifndef DTRAIN_CLI_CONFIG_FLAGS_H
#define DTRAIN_CLI_CONFIG_FLAGS_H

#include "dtrain/model_spec.h"
#include "flags.h"

extern const flag_custom flag_compression;      /* dt_compression */
extern const flag_custom flag_autoshard;        /* dt_autoshard_policy */
extern const flag_custom flag_wire;             /* dt_wire_dtype */
extern const flag_custom flag_optimizer;        /* dt_opt_kind */
extern const flag_custom flag_lr_schedule;      /* dt_lr_kind */
extern const flag_custom flag_table_optimizer;  /* dt_optim_config: table_kind, table_kind_set */
extern const flag_custom flag_reduction;        /* dt_reduction */
extern const flag_custom flag_ps_mode;          /* dt_ps_options: mode, staleness */
extern const flag_custom flag_partitioner;      /* dt_ps_options: partitioner, partitioner_given */
extern const flag_custom flag_partition_strategy; /* dt_partition_strategy */
extern const flag_custom flag_shuffle_buffer;   /* int64_t: a count, or all (INT64_MAX) */
extern const flag_custom flag_backup_freq;      /* int64_t: epoch (0) or steps */
extern const flag_custom flag_mib;              /* size_t bytes, given in MiB (0..4096) */

/* dt_ctr_spec's deep layers and dropout, given as comma-separated lists: the destination of
 * both rows. */
typedef struct {
    dt_ctr_spec *ctr;
    int n_keep; /* dropout values given; one applies to every layer */
} flag_ctr_lists;
extern const flag_custom flag_deep_layers;
extern const flag_custom flag_dropout_keep;

/* After flags_parse: one dropout value over every deep layer, or one per layer. */
dt_status flag_ctr_lists_finish(flag_ctr_lists *l);

/* The cluster resolver's flags (cluster.h): --cluster-resolver, --jobs, --port-base, and
 * --bind-all (listen on every interface). */
typedef struct {
    const char *name, *jobs, *port_base;
    bool bind_all;
} cli_resolver;
void cli_resolver_flags_add(flag_table *t, cli_resolver *r);
/* After flags_parse: the flags into the environment the library reads (DTRAIN_CLUSTER_RESOLVER,
 * DTRAIN_JOBS, DTRAIN_PORT_BASE, DTRAIN_BIND_ALL), and, when a platform's resolver gives the
 * cluster, one line naming it and this task, and the cluster as TF_CONFIG (the resolver set to
 * tf_config), so that it is resolved once. Returns an exit status: 0, 2 for a bad flag, else
 * the resolver's. */
int cli_resolver_apply(const cli_resolver *r);

#endif
