/* What a parameter-server job's coordinator and workers both know (see ps_task.h). */
#include "ps_task.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/model_spec.h"
#include "dtrain/optim.h"
#include "dtrain/partition.h"

void ps_close_cluster(ps_cluster *pc)
{
    free(pc->secret);
    dt_cluster_free(&pc->cl);
    memset(pc, 0, sizeof *pc);
}

dt_status ps_open_cluster(const dt_train_config *c, ps_cluster *pc)
{
    memset(pc, 0, sizeof *pc);
    dt_status st = dt_cluster_from_env(&pc->cl);
    if (st == DT_OK && c->comm.task)
        st = dt_cluster_set_task(&pc->cl, c->comm.task);
    if (st == DT_OK)
        st = dt_cluster_load_secret(c->comm.secret_file, &pc->secret, &pc->secret_len);
    if (st == DT_OK)
        st = dt_cluster_check_secret(&pc->cl, pc->secret != NULL, c->comm.insecure);
    if (st) {
        ps_close_cluster(pc);
        return st;
    }
    pc->me = (dt_handshake_id){pc->secret, pc->secret_len, pc->cl.id, pc->cl.task_type,
                               pc->cl.task_index};
    return DT_OK;
}

void ps_endpoint_of(const dt_addr *a, char *out, size_t cap)
{
    bool v6 = strchr(a->host, ':') != NULL;
    snprintf(out, cap, "tcp://%s%s%s:%u", v6 ? "[" : "", a->host, v6 ? "]" : "", a->port);
}

/* The shards of table t: the partitioner's count, or one per ps task. */
static int64_t shards_of(const dt_train_config *c, int64_t rows, int dim, int n_ps)
{
    if (c->ps.partitioner_given)
        return dt_partition_shards(&c->ps.partitioner, rows, (int64_t)dim * 4);
    return n_ps < rows ? n_ps : rows;
}

dt_status ps_place_variables(const dt_train_config *c, dt_model *m, dt_ps_client *ps, int n_ps,
                             bool define, int64_t table_rows)
{
    dt_rowopt_config rule;
    dt_optim_table_rule(&c->optim, &rule);
    dt_status st = DT_OK;
    if (dt_model_num_tables(m) > DT_PS_MAX_TABLES)
        return dt_error(DT_ERR_UNSUPPORTED, "model %s: %d tables, more than the %d a ps holds",
                        dt_model_spec_of(m)->name, dt_model_num_tables(m), DT_PS_MAX_TABLES);
    for (int t = 0; t < dt_model_num_tables(m) && st == DT_OK; t++) {
        const dt_table *tab = dt_model_table(m, t);
        /* A dynamic table's keys go to the ps tasks by their hash, one shard a task. */
        dt_keymap *km = dt_model_keymap(m, t);
        bool keyed = km || dt_model_table_dynamic(m, t) || table_rows == DT_PARTITION_HASH_ROWS;
        int64_t rows = keyed ? DT_PARTITION_HASH_ROWS : table_rows > 0 ? table_rows : tab->rows;
        int64_t shards = keyed ? n_ps : shards_of(c, rows, tab->dim, n_ps);
        dt_partition_strategy placed = keyed ? DT_PARTITION_HASH : c->ps.partition_strategy;
        /* Each table starts as dt_model_init_params draws it, row by row from its seed; a
         * feature-spec model's linear tables take the linear part's rule. */
        float stddev;
        uint64_t seed_offset;
        dt_model_table_init(m, t, &stddev, &seed_offset);
        const dt_rowopt_config *r =
            c->optim.linear_rule_set && dt_model_table_linear(m, t) ? &c->optim.linear_rule
                                                                    : &rule;
        st = define ? dt_ps_client_define_ex(ps, (uint32_t)t, tab->name, rows, tab->dim, shards,
                                             placed, r, stddev, c->fit.seed + seed_offset,
                                             km ? dt_keymap_policy_of(km) : NULL)
                    : dt_ps_client_use_table(ps, (uint32_t)t, rows, tab->dim, shards, placed);
    }
    /* Hybrid: the dense variables are the workers' own, all-reduced among them. */
    if (st == DT_OK && c->ps.mode != DT_PS_HYBRID)
        st = define ? dt_ps_client_define_dense(ps, dt_model_params(m), &c->optim)
                    : dt_ps_client_use_dense(ps, dt_model_params(m));
    return st;
}

