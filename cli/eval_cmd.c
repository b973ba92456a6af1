/* dtrain evaluate (one checkpoint, or a sidecar evaluator watching a model directory) and
 * dtrain inspect (a checkpoint's tensors and metadata). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "commands.h"
#include "dtrain/checkpoint.h"
#include "dtrain/evaluator.h"
#include "dtrain/model_spec.h"
#include "../src/core/crc32c.h"
#include "dtrain/tfrecord.h"
#include "flags.h"
#include "read_flags.h"

int cmd_evaluate(int argc, char **argv)
{
    const char *model_dir, *checkpoint;
    bool watch_dir, help;
    dt_input_options io;
    dt_input_options_default(&io);
    flag_def rows[32];
    flag_ext exts[32];
    flag_table t = {rows, 0, 32, exts};
    dt_evaluator_options eo;
    dt_evaluator_options_default(&eo);
#define FLAG(name_, kind_, def_, help_, dst_) flags_add(&t, (flag_def){name_, kind_, def_, help_, dst_, false})
    FLAG("model-dir", FLAG_STRING, NULL, "the training's --model-dir", &model_dir);
    FLAG("checkpoint", FLAG_STRING, NULL, "evaluate this checkpoint file (default: the latest in "
         "--model-dir)", &checkpoint);
    FLAG("watch", FLAG_BOOL, "false", "sidecar evaluator: evaluate each newer checkpoint of "
         "--model-dir as it appears, until the final one", &watch_dir);
#define ROW(...) flags_add_field(&t, eo, __VA_ARGS__)
    ROW("test-data", FLAG_STRING, test_data, "fashion-mnist[:DIR] or mnist:DIR (their t10k "
        "files), idx:IMAGES,LABELS, tfrecord:GLOB, libsvm:GLOB, csv:GLOB");
    cli_read_flags_add(&t, &io, "CTR models: fields per example of field-positional libsvm data "
                       "(as dtrain train's --field-size)");
    ROW("batch-size", FLAG_INT, batch_size, "examples per forward");
    ROW("poll-secs", FLAG_FLOAT, poll_secs, "--watch: seconds between looks at --model-dir");
    ROW("watch-timeout", FLAG_FLOAT, idle_timeout, "--watch: give up after this many seconds "
        "without a new checkpoint (0: never)");
#undef ROW
    FLAG("help", FLAG_BOOL, "false", "this text", &help);
#undef FLAG
    if (flags_parse(t.rows, t.n, argc, argv))
        return cli_fail(2, flags_name_fields(t.rows, t.n, dt_last_error()));
    if (help) {
        printf("usage: dtrain evaluate --model-dir DIR [--checkpoint FILE] [--watch] [flags]\n\n"
               "Evaluates a checkpoint on the test data and prints Estimator's line\n"
               "`Saving dict for global step N: global_step = N, loss = L, accuracy = A`.\n\n"
               "flags:\n");
        flags_print_help(t.rows, t.n, stdout);
        return 0;
    }
    if (!model_dir && !checkpoint)
        return cli_fail(2, "evaluate: give --model-dir DIR or --checkpoint FILE");
    if (watch_dir && (!model_dir || checkpoint))
        return cli_fail(2, "evaluate: --watch needs --model-dir and no --checkpoint");
    io.batch_size = eo.batch_size;
    eo.input = &io;
    eo.model_dir = model_dir, eo.checkpoint = checkpoint, eo.watch = watch_dir;
    eo.out = stdout;
    eo.log = stderr;
    if (dt_evaluator_options_check(&eo) != DT_OK)
        return cli_fail(2, flags_name_fields(t.rows, t.n, dt_last_error()));
    if (dt_evaluate_checkpoints(&eo) != DT_OK)
        return cli_fail(1, flags_name_fields(t.rows, t.n, dt_last_error()));
    return 0;
}

/* ---- inspect ---- */

static void print_tensor(const dt_ckpt_tensor *t)
{
    char shape[128] = "[";
    for (int d = 0; d < t->n_dims; d++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%" PRId64,
                 d ? ", " : "", t->dims[d]);
    snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "]");
    printf("%-40s %-20s %-4s %10zu bytes  crc32c %08x\n", t->name, shape, t->dtype, t->n_bytes,
           dt_crc32c(t->data, t->n_bytes));
}

/* A sharded checkpoint's manifest: each ps task's file and the table shards it holds. */
static dt_status print_sharding(const dt_ckpt *c)
{
    if (!dt_ckpt_is_sharded(c))
        return DT_OK;
    dt_ckpt **files;
    int n;
    dt_status st = dt_ckpt_open_shards(c, &files, &n);
    if (st)
        return st;
    printf("sharding (parameter-server checkpoint):\n");
    for (int i = 0; i < n; i++) {
        const char *task = dt_ckpt_meta_get(files[i], "ps_task"), *path = dt_ckpt_path(files[i]);
        const char *slash = strrchr(path, '/');
        int dense = 0;
        printf("  %s (ps:%s, %d tensors)\n", slash ? slash + 1 : path, task ? task : "?",
               dt_ckpt_n_tensors(files[i]));
        for (int j = 0; j < dt_ckpt_n_meta(files[i]); j++) {
            const char *k, *v;
            dt_ckpt_meta_at(files[i], j, &k, &v);
            if (strstr(k, "/part_"))
                printf("    %-28s %s\n", k, v);
            dense += strncmp(k, "dense/var_", 10) == 0;
        }
        if (dense)
            printf("    %d dense variable%s, with the optimizer's slots over them\n", dense,
                   dense == 1 ? "" : "s");
    }
    dt_ckpt_close_shards(files, n);
    return DT_OK;
}

/* A dynamic table's tensors: "<table>/keys" and the rest beside its rows. */
static void print_dynamic_table(const dt_ckpt *c, const dt_ckpt_tensor *keys)
{
    size_t n = strlen(keys->name) - strlen("/keys"), bytes = 0;
    for (int i = 0; i < dt_ckpt_n_tensors(c); i++) {
        const dt_ckpt_tensor *t = dt_ckpt_tensor_at(c, i);
        const char *slash = strrchr(t->name, '/');
        bool mine = (strncmp(t->name, keys->name, n) == 0 && (t->name[n] == '/' || !t->name[n])) ||
                    (slash && strlen(slash + 1) == n && strncmp(slash + 1, keys->name, n) == 0);
        bytes += mine && !strstr(t->name, "/counting_") && !strstr(t->name, "/bloom") ? t->n_bytes : 0;
    }
    char counted[300];
    snprintf(counted, sizeof counted, "%.*s/counting_keys", (int)n, keys->name);
    const dt_ckpt_tensor *ck = dt_ckpt_find(c, counted);
    printf("  %-20.*s %lld live keys, %.1f bytes each (rows, slots, key, count, step)", (int)n,
           keys->name, (long long)keys->dims[0],
           keys->dims[0] ? (double)bytes / (double)keys->dims[0] : 0.0);
    if (ck)
        printf("; %lld keys being counted", (long long)ck->dims[0]);
    printf("\n");
}

/* A checkpoint of dynamic tables: each table's live keys and bytes, and the model's admission
 * and eviction. */
static void print_dynamic(const dt_ckpt *c)
{
    bool any = false;
    for (int i = 0; i < dt_ckpt_n_tensors(c); i++) {
        const dt_ckpt_tensor *t = dt_ckpt_tensor_at(c, i);
        size_t len = strlen(t->name);
        if (len > 5 && strcmp(t->name + len - 5, "/keys") == 0 && strcmp(t->dtype, "I64") == 0) {
            if (!any)
                printf("dynamic tables:\n");
            any = true;
            print_dynamic_table(c, t);
        }
    }
    /* A built-in model's policy is in its spec; a feature spec's columns carry their own. */
    const char *json = any ? dt_ckpt_meta_get(c, "model_spec") : NULL;
    dt_model_spec spec;
    if (!json || dt_model_spec_from_json(json, dt_ckpt_path(c), &spec) != DT_OK) {
        dt_error_clear();
        return;
    }
    if (spec.arch == DT_ARCH_SEQUENTIAL || spec.arch == DT_ARCH_COLUMNS || !spec.ctr.dynamic)
        return;
    const dt_keymap_policy *p = &spec.ctr.dynamic_policy;
    printf("  admission: min_count %lld", (long long)(p->min_count > 1 ? p->min_count : 1));
    if (p->min_count <= 1)
        printf(", every key at its first sighting");
    else if (p->bloom_bits)
        printf(", counted in a Bloom filter of %lld bits, %d hashes", (long long)p->bloom_bits,
               p->bloom_hashes);
    else
        printf(", counted exactly");
    printf("\n  eviction: ");
    if (!dt_keymap_policy_evicts(p))
        printf("none");
    if (p->steps_to_live)
        printf("keys unseen for %lld steps; ", (long long)p->steps_to_live);
    if (p->l2_below > 0.0f)
        printf("rows of L2 norm below %g; ", (double)p->l2_below);
    if (p->max_rows)
        printf("past %lld rows, the least recently seen; ", (long long)p->max_rows);
    if (dt_keymap_policy_evicts(p))
        printf(p->evict_every_steps ? "a pass every %lld steps and at each save" : "at each save",
               (long long)p->evict_every_steps);
    printf("\n");
    if (p->memory_limit)
        printf("  memory limit: %lld bytes\n", (long long)p->memory_limit);
}

int cmd_inspect(int argc, char **argv)
{
    if (argc == 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        printf("usage: dtrain inspect CHECKPOINT|MODEL_DIR\n\nPrints every tensor's name, "
               "shape, dtype, size and CRC32C, then the metadata; for dynamic tables, each\n"
               "table's live keys and bytes per key and the admission and eviction; for a\n"
               "parameter-server checkpoint, each ps task's file and the table shards it holds.\n");
        return 0;
    }
    if (argc != 1)
        return cli_fail(2, "usage: dtrain inspect CHECKPOINT|MODEL_DIR (dtrain inspect --help)");
    if (argv[0][0] == '-' && argv[0][1] == '-') {
        char msg[300];
        snprintf(msg, sizeof msg, "unknown flag '%.200s' (see dtrain inspect --help)", argv[0]);
        return cli_fail(2, msg);
    }
    struct stat sb;
    dt_ckpt *c = NULL;
    dt_status st = stat(argv[0], &sb) == 0 && S_ISDIR(sb.st_mode)
                       ? dt_ckpt_open_latest(argv[0], stderr, &c)
                       : dt_ckpt_open(argv[0], &c);
    if (st)
        return cli_fail(1, dt_last_error());
    size_t bytes = 0;
    for (int i = 0; i < dt_ckpt_n_tensors(c); i++)
        bytes += dt_ckpt_tensor_at(c, i)->n_bytes;
    printf("%s: %d tensors, %zu bytes of data\n", dt_ckpt_path(c), dt_ckpt_n_tensors(c), bytes);
    for (int i = 0; i < dt_ckpt_n_tensors(c); i++)
        print_tensor(dt_ckpt_tensor_at(c, i));
    printf("metadata:\n");
    for (int i = 0; i < dt_ckpt_n_meta(c); i++) {
        const char *k, *v;
        dt_ckpt_meta_at(c, i, &k, &v);
        printf("  %s = %s\n", k, v);
    }
    print_dynamic(c);
    st = print_sharding(c);
    dt_ckpt_close(c);
    if (st)
        return cli_fail(1, dt_last_error());
    if (fflush(stdout) != 0 || ferror(stdout))
        return cli_fail(1, "stdout: write failed");
    return 0;
}
