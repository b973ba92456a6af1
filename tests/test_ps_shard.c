/* Parameter-server shards: tables split over shards (div and mod) start as the whole table and,
 * fed the same pushes through the message codec, stay equal to it bit for bit; requests that do
 * not fit a shard get an ERROR reply naming what is wrong. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/ps/shard.h"
#include "../src/ps/shard_ckpt.h"
#include "../src/ps/snapshot.h"
#include "../src/ps/sweep.h"
#include "../src/core/fileio.h"
#include "../src/train/ps_ckpt.h"
#include "dtrain/checkpoint.h"
#include "dtrain/model.h"
#include "dtrain/model_spec.h"
#include "dtrain/rng.h"
#include "test.h"

enum { ROWS = 101, DIM = 4 };

/* Encodes m and decodes it again, as the wire would deliver it. */
static void via_wire(const dt_psmsg *m, const int64_t *ids, const float *vals, dt_psbuf *buf,
                     dt_psmsg *out)
{
    buf->len = 0;
    CHECK_OK(dt_psmsg_encode(m, ids, vals, buf));
    CHECK_OK(dt_psmsg_decode(buf->data, buf->len, "worker:0", out));
}

/* Pulls every row of the table from the shards into rows (ROWS x DIM). */
static void pull_all(dt_ps_shard *shards, int n, dt_partition_strategy strat, float *rows)
{
    dt_psbuf req = {0}, rep = {0};
    for (int k = 0; k < n; k++) {
        int64_t ids[ROWS];
        uint32_t count = 0;
        for (int64_t id = 0; id < ROWS; id++) {
            int64_t shard, row;
            dt_partition_locate(strat, ROWS, n, id, &shard, &row);
            if (shard == k)
                ids[count++] = id;
        }
        dt_psmsg m = {.type = DT_PSMSG_PULL_ROWS, .table = 1, .n = count}, in, out;
        via_wire(&m, ids, NULL, &req, &in);
        rep.len = 0;
        CHECK_OK(dt_ps_shard_handle(&shards[k], &in, &rep));
        CHECK_OK(dt_psmsg_decode(rep.data, rep.len, "ps", &out));
        CHECK(out.type == DT_PSMSG_ROWS && out.n == count && out.dim == DIM);
        for (uint32_t i = 0; i < count && out.type == DT_PSMSG_ROWS; i++)
            for (int d = 0; d < DIM; d++)
                rows[ids[i] * DIM + d] = dt_psmsg_value(&out, (size_t)i * DIM + (size_t)d);
    }
    dt_psbuf_free(&req), dt_psbuf_free(&rep);
}

static void check_shards_follow_the_table(dt_partition_strategy strat, int n, dt_rowopt_kind kind)
{
    dt_rowopt_config opt;
    dt_rowopt_config_default(&opt, kind);
    opt.lr = 0.05f, opt.l2_reg = 0.01f, opt.l1 = 0.001f;
    dt_table full;
    CHECK_OK(dt_table_create(&full, "fm_v", ROWS, DIM));
    CHECK_OK(dt_rowopt_setup(&opt, &full));
    dt_table_init_normal(&full, 0.1f, 77, NULL);
    dt_ps_shard shards[4];
    for (int k = 0; k < n; k++) {
        dt_ps_shard_init(&shards[k], NULL);
        CHECK_OK(dt_ps_shard_add_table(&shards[k], 1, "fm_v", ROWS, DIM, n, k, strat, &opt, 0.1f,
                                       77));
    }
    float *rows = malloc(sizeof(float) * ROWS * DIM);
    pull_all(shards, n, strat, rows);
    CHECK(memcmp(rows, full.data, sizeof(float) * ROWS * DIM) == 0);

    dt_rng r;
    dt_rng_seed(&r, 5);
    dt_psbuf buf = {0}, rep = {0};
    for (int step = 1; step <= 6; step++) {
        /* A step's gradient: a sorted set of unique ids with rows. */
        dt_sparse_rows g;
        dt_sparse_rows_init(&g, DIM);
        CHECK_OK(dt_sparse_rows_reserve(&g, ROWS));
        for (int64_t id = 0; id < ROWS; id++)
            if (dt_rng_below(&r, 3) == 0) {
                g.ids[g.n] = id;
                for (int d = 0; d < DIM; d++)
                    g.rows[g.n * DIM + (size_t)d] = dt_rng_uniform(&r) - 0.5f;
                g.n++;
            }
        dt_rowopt_update(&opt, opt.lr * 0.5f, step, &full, &g, NULL);
        for (int k = 0; k < n; k++) {
            int64_t ids[ROWS];
            float vals[ROWS * DIM];
            uint32_t count = 0;
            for (size_t u = 0; u < g.n; u++) {
                int64_t shard, row;
                dt_partition_locate(strat, ROWS, n, g.ids[u], &shard, &row);
                if (shard != k)
                    continue;
                ids[count] = g.ids[u];
                memcpy(vals + (size_t)count * DIM, g.rows + u * DIM, sizeof(float) * DIM);
                count++;
            }
            dt_psmsg m = {.type = DT_PSMSG_PUSH_ROWS, .table = 1, .n = count, .dim = DIM,
                          .step = step, .lr_scale = 0.5f}, in, out;
            via_wire(&m, ids, vals, &buf, &in);
            rep.len = 0;
            CHECK_OK(dt_ps_shard_handle(&shards[k], &in, &rep));
            CHECK_OK(dt_psmsg_decode(rep.data, rep.len, "ps", &out));
            CHECK(out.type == DT_PSMSG_ACK && out.clock == step);
        }
        dt_sparse_rows_free(&g);
    }
    pull_all(shards, n, strat, rows);
    CHECK_MSG(memcmp(rows, full.data, sizeof(float) * ROWS * DIM) == 0,
              "%s over %d %s shards: rows differ from the whole table's",
              dt_rowopt_kind_name(kind), n, strat == DT_PARTITION_DIV ? "div" : "mod");
    for (int k = 0; k < n; k++)
        dt_ps_shard_free(&shards[k]);
    dt_psbuf_free(&buf), dt_psbuf_free(&rep);
    free(rows);
    dt_table_free(&full);
}

TEST(ps_shards_train_as_the_whole_table)
{
    check_shards_follow_the_table(DT_PARTITION_DIV, 3, DT_ROWOPT_ADAM);
    check_shards_follow_the_table(DT_PARTITION_MOD, 2, DT_ROWOPT_FTRL);
    check_shards_follow_the_table(DT_PARTITION_DIV, 4, DT_ROWOPT_ADAGRAD);
}

/* One request that the shard refuses: its ERROR reply's text contains needle. */
static void expect_refusal(dt_ps_shard *s, const dt_psmsg *m, const int64_t *ids,
                           const float *vals, const char *needle)
{
    dt_psbuf buf = {0}, rep = {0};
    dt_psmsg in, out;
    via_wire(m, ids, vals, &buf, &in);
    CHECK_OK(dt_ps_shard_handle(s, &in, &rep));
    CHECK_OK(dt_psmsg_decode(rep.data, rep.len, "ps", &out));
    CHECK_MSG(out.type == DT_PSMSG_ERROR && out.text_len > 0 &&
              strstr(out.text, needle) != NULL, "'%s': type %d, '%.*s'", needle, (int)out.type,
              (int)out.text_len, out.text ? out.text : "");
    dt_psbuf_free(&buf), dt_psbuf_free(&rep);
}

TEST(ps_shard_refuses_requests_that_do_not_fit)
{
    dt_rowopt_config opt;
    dt_rowopt_config_default(&opt, DT_ROWOPT_SGD);
    dt_ps_shard s;
    dt_ps_shard_init(&s, NULL);
    CHECK_OK(dt_ps_shard_add_table(&s, 1, "fm_v", ROWS, DIM, 2, 0, DT_PARTITION_DIV, &opt, 0, 1));
    int64_t mine[2] = {3, 9}, theirs[1] = {60}, outside[1] = {ROWS}, unsorted[2] = {9, 3};
    float vals[8] = {0};
    dt_psmsg pull = {.type = DT_PSMSG_PULL_ROWS, .table = 1, .n = 1};
    expect_refusal(&s, &pull, theirs, NULL, "id 60 is not held by shard 0 of 2");
    expect_refusal(&s, &pull, outside, NULL, "id 101 is not held");
    pull.table = 7;
    expect_refusal(&s, &pull, mine, NULL, "no table 7");
    dt_psmsg push = {.type = DT_PSMSG_PUSH_ROWS, .table = 1, .n = 2, .dim = 2, .step = 1,
                     .lr_scale = 1.0f};
    expect_refusal(&s, &push, mine, vals, "rows of 2 values pushed, the table's are 4");
    push.dim = DIM;
    expect_refusal(&s, &push, unsorted, vals, "not unique and increasing");
    push.step = 0;
    expect_refusal(&s, &push, mine, vals, "step 0");
    dt_psmsg stop = {.type = DT_PSMSG_DENSE};
    expect_refusal(&s, &stop, NULL, vals, "does not answer DENSE");
    dt_ps_shard_free(&s);
}

/* Dense variables as slices over two ps shards (VAR, PULL_DENSE, PUSH_DENSE through the codec)
 * follow dt_optim_step over the whole layout bit for bit, Adam's bias correction by the pushes'
 * steps included; a slice that is not the one held, and a push at step 0, are refused. */
TEST(ps_dense_slices_train_as_the_whole_layout)
{
    enum { TOTAL = 48, STEPS = 5 };
    const uint64_t offs[3] = {0, 16, 32}, counts[3] = {10, 16, 7}; /* views, padding between */
    dt_optim_config cfg;
    dt_optim_config_default(&cfg, DT_OPT_ADAM);
    cfg.lr = 0.01f;
    dt_arena layout;
    dt_arena_init(&layout);
    int dims[1] = {TOTAL};
    CHECK_OK(dt_arena_add(&layout, "dense", 1, dims, NULL));
    CHECK_OK(dt_arena_commit(&layout));
    dt_optim whole;
    dt_optim_init(&whole);
    CHECK_OK(dt_optim_setup(&whole, &cfg, &layout));
    float *p = layout.data, grads[TOTAL], got[TOTAL];
    dt_rng r;
    dt_rng_seed(&r, 3);
    for (int i = 0; i < TOTAL; i++)
        p[i] = dt_rng_uniform(&r) - 0.5f;
    dt_ps_shard ps[2];
    dt_psbuf buf = {0}, rep = {0};
    dt_psmsg m, in, out;
    for (int k = 0; k < 2; k++)
        dt_ps_shard_init(&ps[k], NULL);
    for (uint32_t v = 0; v < 3; v++) {
        dt_ps_var_msg(v, offs[v], counts[v], TOTAL, &cfg, &m);
        via_wire(&m, NULL, p + offs[v], &buf, &in);
        rep.len = 0;
        CHECK_OK(dt_ps_shard_handle(&ps[v % 2], &in, &rep));
        CHECK_OK(dt_psmsg_decode(rep.data, rep.len, "ps", &out));
        CHECK(out.type == DT_PSMSG_ACK);
    }
    for (int step = 1; step <= STEPS + 1; step++) {
        if (step <= STEPS) {
            for (int i = 0; i < TOTAL; i++)
                grads[i] = dt_rng_uniform(&r) - 0.5f;
            dt_optim_step(&whole, NULL, p, grads, TOTAL);
        }
        for (uint32_t v = 0; v < 3; v++) {
            dt_psmsg q = {.type = step <= STEPS ? DT_PSMSG_PUSH_DENSE : DT_PSMSG_PULL_DENSE,
                          .table = v, .offset = offs[v], .count = counts[v], .step = step,
                          .lr_scale = 1.0f};
            via_wire(&q, NULL, grads + offs[v], &buf, &in);
            rep.len = 0;
            CHECK_OK(dt_ps_shard_handle(&ps[v % 2], &in, &rep));
            CHECK_OK(dt_psmsg_decode(rep.data, rep.len, "ps", &out));
            if (step <= STEPS) {
                CHECK(out.type == DT_PSMSG_ACK && out.clock == step);
            } else {
                CHECK(out.type == DT_PSMSG_DENSE && out.count == counts[v]);
                for (uint64_t i = 0; i < counts[v] && out.type == DT_PSMSG_DENSE; i++)
                    got[offs[v] + i] = dt_psmsg_value(&out, i);
            }
        }
    }
    for (uint32_t v = 0; v < 3; v++)
        CHECK_MSG(memcmp(got + offs[v], p + offs[v], counts[v] * sizeof(float)) == 0,
                  "variable %u differs from the whole layout's update", v);
    /* Another slice than the one held; a push at step 0. */
    dt_psmsg bad[2] = {{.type = DT_PSMSG_PULL_DENSE, .table = 0, .offset = 0, .count = 9},
                       {.type = DT_PSMSG_PUSH_DENSE, .table = 0, .offset = 0, .count = 10,
                        .step = 0, .lr_scale = 1.0f}};
    for (int i = 0; i < 2; i++) {
        via_wire(&bad[i], NULL, grads, &buf, &in);
        rep.len = 0;
        CHECK_OK(dt_ps_shard_handle(&ps[0], &in, &rep));
        CHECK_OK(dt_psmsg_decode(rep.data, rep.len, "ps", &out));
        CHECK(out.type == DT_PSMSG_ERROR);
    }
    for (int k = 0; k < 2; k++)
        dt_ps_shard_free(&ps[k]);
    dt_psbuf_free(&buf), dt_psbuf_free(&rep);
    dt_optim_free(&whole);
    dt_arena_free(&layout);
}

/* Feeds s one message and expects an ACK. */
static void feed(dt_ps_shard *s, const dt_psmsg *m, const int64_t *ids, const float *vals)
{
    dt_psbuf buf = {0}, rep = {0};
    dt_psmsg in, out;
    via_wire(m, ids, vals, &buf, &in);
    CHECK_OK(dt_ps_shard_handle(s, &in, &rep));
    CHECK_OK(dt_psmsg_decode(rep.data, rep.len, "ps", &out));
    CHECK_MSG(out.type == DT_PSMSG_ACK, "%s: %.*s", dt_psmsg_type_name(out.type),
              (int)out.text_len, out.text ? out.text : "");
    dt_psbuf_free(&buf), dt_psbuf_free(&rep);
}

static bool same_floats(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* A pid that no longer runs: a child's, reaped. */
static long dead_pid(void)
{
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    waitpid(p, NULL, 0);
    return (long)p;
}

static void touch(const char *dir, const char *name)
{
    char path[2300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
}

static bool exists_in(const char *dir, const char *name)
{
    char path[2300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* A ps task sweeps the temporaries of its own failed writes on its own host: a dead process's,
 * of its own snapshot and shard files. A running process's, another host's, another ps task's
 * and other files stay. */
TEST(ps_sweeps_only_its_own_orphaned_temporaries)
{
    char dir[] = "/tmp/dtrain-sweep-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char host[64];
    CHECK(gethostname(host, sizeof host) == 0);
    host[63] = '\0';
    long dead = dead_pid(), live = (long)getppid();
    char names[10][200];
    const char *forms[10] = {
        "ps-0.snapshot.tmp.%ld.%s",                      /* 0: swept */
        "ckpt-40.ps-0-of-2.safetensors.tmp.%ld.%s",      /* 1: swept */
        "ps-0.snapshot.tmp.%ld",                         /* 2: swept (no host: an older name) */
        "ps-0.snapshot.tmp.%ld.%s",                      /* 3: live pid */
        "ps-0.snapshot.tmp.%ld.another-host",            /* 4: another host's */
        "ps-1.snapshot.tmp.%ld.%s",                      /* 5: another ps task's */
        "ckpt-40.ps-1-of-2.safetensors.tmp.%ld.%s",      /* 6: another ps task's */
        "ckpt-40.ps-0-of-2.safetensors",                 /* 7: a checkpoint file */
        "ckpt-40.safetensors.tmp.%ld.%s",                /* 8: the chief's */
        "ps-0.snapshot",                                 /* 9: the snapshot */
    };
    for (int i = 0; i < 10; i++) {
        snprintf(names[i], sizeof names[i], forms[i], i == 3 ? live : dead, host);
        touch(dir, names[i]);
    }
    size_t n;
    CHECK(dt_file_replace_orphan(names[0], &n) && n == strlen("ps-0.snapshot"));
    CHECK(!dt_file_replace_orphan(names[3], &n) && !dt_file_replace_orphan(names[4], &n));
    FILE *quiet = fopen("/dev/null", "w");
    CHECK(dt_ps_sweep_temps(dir, 0, quiet) == 3);
    if (quiet)
        fclose(quiet);
    for (int i = 0; i < 10; i++)
        CHECK_MSG(exists_in(dir, names[i]) == (i > 2), "%s %s", names[i],
                  i > 2 ? "was removed" : "is left");
    for (int i = 3; i < 10; i++) {
        char path[2300];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    CHECK(rmdir(dir) == 0);
}

/* A snapshot is bound to the job that wrote it: a task of another job (another id, or the same
 * id with another nonce: a new run under the same name) does not take it for its own, and a file
 * of the format before snapshots named their job is not known to be this job's. */
TEST(ps_snapshot_of_another_job_is_not_restored)
{
    char path[] = "/tmp/dtrain-snapjob-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    dt_rowopt_config ro;
    dt_rowopt_config_default(&ro, DT_ROWOPT_SGD);
    dt_ps_shard a, b;
    dt_ps_shard_init(&a, NULL);
    dt_ps_shard_init(&b, NULL);
    dt_psmsg def;
    dt_ps_table_msg(7, "emb", 100, DIM, 1, 0, DT_PARTITION_DIV, &ro, 0.1f, 3, &def);
    feed(&a, &def, NULL, NULL);
    dt_ps_job mine = {.id = "ctr-daily", .nonce = {0xab, 0xcd}};
    CHECK_OK(dt_ps_snapshot_save(&a, 0, &mine, path));
    dt_ps_snapshot_info info;
    CHECK_OK(dt_ps_snapshot_load(&b, 0, &mine, path, &info));
    CHECK(!info.other_job && b.n_tables == 1);
    dt_ps_shard_free(&b);
    dt_ps_shard_init(&b, NULL);
    dt_ps_job next_run = mine;
    next_run.nonce[15] = 1;
    CHECK_ERR(dt_ps_snapshot_load(&b, 0, &next_run, path, &info), DT_ERR_INVALID,
              "the snapshot of another job (job 'ctr-daily', nonce abcd000000000000000000000000"
              "0000; this is job 'ctr-daily', nonce abcd0000000000000000000000000001)");
    CHECK(info.other_job && b.n_tables == 0);
    dt_ps_job other = {.id = "census", .nonce = {0xab, 0xcd}};
    CHECK_ERR(dt_ps_snapshot_load(&b, 0, &other, path, &info), DT_ERR_INVALID, "job 'census'");
    CHECK(info.other_job && b.n_tables == 0);
    /* Version 1's header: magic, version, and what followed. */
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    fseek(f, 8, SEEK_SET);
    fputc(1, f);
    fclose(f);
    CHECK_ERR(dt_ps_snapshot_load(&b, 0, &mine, path, &info), DT_ERR_INVALID,
              "before snapshots named their job");
    CHECK(info.other_job);
    /* Damage is not another job's: a flipped byte of the header is still a format error. */
    f = fopen(path, "r+b");
    fseek(f, 8, SEEK_SET);
    fputc(2, f);
    fseek(f, 40, SEEK_SET);
    fputc('X', f);
    fclose(f);
    CHECK_ERR(dt_ps_snapshot_load(&b, 0, &mine, path, &info), DT_ERR_FORMAT, "checksum");
    CHECK(!info.other_job);
    unlink(path);
    dt_ps_shard_free(&a);
    dt_ps_shard_free(&b);
}

/* A snapshot holds a ps task's shards whole: rows, optimizer slots, clocks, dense slices and
 * their optimizer state come back bit for bit, and the restored shard trains on as the original
 * does. A flipped byte, a cut, another ps's file and no file are named refusals. */
TEST(ps_snapshot_restores_every_shard_bit_for_bit)
{
    enum { TOTAL = 40, N = 70000 }; /* N rows: the values span two ROWS messages */
    char path[] = "/tmp/dtrain-snap-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    dt_rowopt_config ro;
    dt_rowopt_config_default(&ro, DT_ROWOPT_ADAM);
    ro.lr = 0.02f;
    dt_optim_config dc;
    dt_optim_config_default(&dc, DT_OPT_ADAM);
    dt_ps_shard a, b;
    dt_ps_shard_init(&a, NULL);
    dt_ps_shard_init(&b, NULL);
    dt_psmsg def;
    dt_ps_table_msg(1 << 16 | 1, "fm_v", 2 * N + 1, DIM, 2, 1, DT_PARTITION_MOD, &ro, 0.1f, 9, &def);
    feed(&a, &def, NULL, NULL);
    float dense[TOTAL], grads[TOTAL];
    for (int i = 0; i < TOTAL; i++)
        dense[i] = 0.01f * (float)i, grads[i] = 0.5f - 0.02f * (float)i;
    dt_ps_var_msg(3, 8, 20, TOTAL, &dc, &def);
    feed(&a, &def, NULL, dense + 8);
    int64_t ids[3] = {1, 7, 2 * N - 1};
    float rows[3 * DIM];
    for (int i = 0; i < 3 * DIM; i++)
        rows[i] = 0.1f * (float)(i - 5);
    for (int step = 1; step <= 3; step++) {
        dt_psmsg push = {.type = DT_PSMSG_PUSH_ROWS, .table = 1 << 16 | 1, .n = 3, .dim = DIM,
                         .step = step, .lr_scale = 1.0f};
        feed(&a, &push, ids, rows);
        dt_psmsg pd = {.type = DT_PSMSG_PUSH_DENSE, .table = 3, .offset = 8, .count = 20,
                       .step = step, .lr_scale = 1.0f};
        feed(&a, &pd, NULL, grads + 8);
    }
    dt_ps_job job = {.id = "job-a", .nonce = {1, 2, 3}};
    CHECK_OK(dt_ps_snapshot_save(&a, 1, &job, path));
    dt_ps_snapshot_info info;
    CHECK_OK(dt_ps_snapshot_load(&b, 1, &job, path, &info));
    CHECK(info.last_step == 3 && info.n_tables == 1 && info.n_slices == 1 && b.last_step == 3);
    const dt_ps_table_shard *ta = &a.tables[0], *tb = &b.tables[0];
    size_t n = (size_t)ta->t.rows * DIM;
    CHECK(b.n_tables == 1 && tb->t.rows == ta->t.rows && tb->clock == 3 && tb->t.n_slots == 2);
    CHECK(same_floats(ta->t.data, tb->t.data, n));
    for (int k = 0; k < 2; k++)
        CHECK(same_floats(ta->t.slots[k], tb->t.slots[k], n));
    CHECK(b.n_slices == 1 && b.slices[0].clock == 3 && b.dense_total == TOTAL);
    CHECK(same_floats(a.dense + 8, b.dense + 8, 20));
    CHECK(same_floats(a.dense_opt.state.data, b.dense_opt.state.data, a.dense_opt.state.n_elems));
    /* Both train on alike. */
    dt_psmsg push = {.type = DT_PSMSG_PUSH_ROWS, .table = 1 << 16 | 1, .n = 3, .dim = DIM,
                     .step = 4, .lr_scale = 1.0f};
    feed(&a, &push, ids, rows);
    feed(&b, &push, ids, rows);
    CHECK(same_floats(ta->t.data, tb->t.data, n) && same_floats(ta->t.slots[1], tb->t.slots[1], n));

    /* A flipped byte (in the header, in a message) and a cut: refused, naming the file and the
     * byte, the shard left empty. */
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    const long flips[3] = {20, 120 + 30, size - 3};
    for (int i = 0; i < 3; i++) {
        f = fopen(path, "r+b");
        fseek(f, flips[i], SEEK_SET);
        int c = fgetc(f);
        fseek(f, flips[i], SEEK_SET);
        fputc(c ^ 0x10, f);
        fclose(f);
        dt_ps_shard c_shard;
        dt_ps_shard_init(&c_shard, NULL);
        CHECK(dt_ps_snapshot_load(&c_shard, 1, &job, path, &info) == DT_ERR_FORMAT);
        CHECK_MSG(strstr(dt_last_error(), path) && strstr(dt_last_error(), "byte"), "%s",
                  dt_last_error());
        CHECK(c_shard.n_tables == 0 && c_shard.n_slices == 0);
        dt_ps_shard_free(&c_shard);
        f = fopen(path, "r+b");
        fseek(f, flips[i], SEEK_SET);
        fputc(c, f);
        fclose(f);
    }
    CHECK(truncate(path, size - 100) == 0);
    dt_ps_shard c_shard;
    dt_ps_shard_init(&c_shard, NULL);
    CHECK(dt_ps_snapshot_load(&c_shard, 1, &job, path, &info) == DT_ERR_FORMAT);
    CHECK(strstr(dt_last_error(), "truncated"));
    CHECK(dt_ps_snapshot_load(&c_shard, 0, &job, path, &info) == DT_ERR_FORMAT);
    CHECK(strstr(dt_last_error(), "another ps task"));
    unlink(path);
    CHECK(dt_ps_snapshot_load(&c_shard, 1, &job, path, &info) == DT_END);
    dt_ps_shard_free(&c_shard);
    dt_ps_shard_free(&a);
    dt_ps_shard_free(&b);
}

/* A table shard's description in its checkpoint file lists every slot's full name, however long
 * the table's name and the shard's numbers: a cut description is never written. */
TEST(ps_shard_ckpt_describes_long_names_whole)
{
    char name[DT_TABLE_NAME_MAX + 1];
    memset(name, 'n', DT_TABLE_NAME_MAX);
    name[DT_TABLE_NAME_MAX] = '\0';
    dt_rowopt_config opt;
    dt_rowopt_config_default(&opt, DT_ROWOPT_FTRL);
    dt_ps_shard s;
    dt_ps_shard_init(&s, NULL);
    /* The first of 2^40 one-row shards of the widest rows: the longest numbers, and slot names
     * as long as a shard's tensor names allow (FTRL's two, of a 96-byte table name). */
    int64_t total = (int64_t)1 << 40;
    CHECK_OK(dt_ps_shard_add_table(&s, 1, name, total, 65536, total, 0, DT_PARTITION_DIV, &opt,
                                   0, 1));
    char path[] = "/tmp/dtrain-shard-ckpt-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_OK(dt_ps_shard_save_ckpt(&s, path, 5, 0, 1));
    dt_ckpt *c = NULL;
    CHECK_OK(dt_ckpt_open(path, &c));
    char key[DT_VIEW_NAME_CAP + 32];
    snprintf(key, sizeof key, "%s/part_0", name);
    const char *desc = c ? dt_ckpt_meta_get(c, key) : NULL;
    const char *slots = desc ? strstr(desc, " slots=") : NULL;
    char want[2 * DT_VIEW_NAME_CAP + 8];
    snprintf(want, sizeof want, " slots=%s,%s", s.tables[0].t.slot_names[0],
             s.tables[0].t.slot_names[1]);
    CHECK_MSG(slots && strcmp(slots, want) == 0, "description '%s'", desc ? desc : "(none)");
    dt_ckpt_close(c);
    unlink(path);
    dt_ps_shard_free(&s);
}

/* A sharded checkpoint whose files hold one shard twice and another not at all (the same number
 * of rows between them) is refused, naming the shard, not restored with rows left unset. */
TEST(ps_ckpt_restore_counts_shards_not_rows)
{
    dt_ctr_spec cs;
    dt_ctr_spec_default(&cs);
    cs.field_size = 2, cs.feature_size = 100;
    dt_model_spec spec;
    dt_model *m = NULL;
    CHECK_OK(dt_model_spec_ctr(DT_ARCH_LR, &cs, &spec));
    CHECK_OK(dt_model_create(&spec, 4, NULL, NULL, &m));
    if (!m)
        return;
    dt_table *tab = dt_model_table(m, 0);
    dt_rowopt_config opt;
    dt_rowopt_config_default(&opt, DT_ROWOPT_SGD);
    char dir[] = "/tmp/dtrain-ps-restore-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char paths[3][sizeof dir + 64], names[2][64];
    for (int k = 0; k < 2; k++) {
        dt_ps_shard s;
        dt_ps_shard_init(&s, NULL);
        /* Both files claim shard 0 of 2: 50 rows each, 100 in all. */
        CHECK_OK(dt_ps_shard_add_table(&s, 1, tab->name, tab->rows, tab->dim, 2, 0,
                                       DT_PARTITION_DIV, &opt, 0.1f, 3));
        dt_ckpt_shard_name(names[k], sizeof names[k], 7, k, 2);
        snprintf(paths[k], sizeof paths[k], "%s/%s", dir, names[k]);
        CHECK_OK(dt_ps_shard_save_ckpt(&s, paths[k], 7, k, 2));
        dt_ps_shard_free(&s);
    }
    char list[160];
    snprintf(list, sizeof list, "%s,%s", names[0], names[1]);
    dt_ckpt_meta meta[1] = {{"ps_shards", list}};
    snprintf(paths[2], sizeof paths[2], "%s/ckpt-7.safetensors", dir);
    CHECK_OK(dt_ckpt_save(paths[2], NULL, 0, meta, 1));
    dt_ckpt *c = NULL;
    CHECK_OK(dt_ckpt_open(paths[2], &c));
    dt_status st = c ? dt_ps_ckpt_restore(c, m, NULL) : DT_OK;
    CHECK_MSG(st == DT_ERR_FORMAT && strstr(dt_last_error(), "shard 0 of 2 is given twice"),
              "status %d: %s", (int)st, dt_last_error());
    dt_ckpt_close(c);
    for (int k = 0; k < 3; k++)
        unlink(paths[k]);
    rmdir(dir);
    dt_model_destroy(m);
}

/* A pull whose reply would pass a message's limit (ids times the table's row) is refused with an
 * ERROR naming the sizes, before any row is gathered, and the shard answers the next pull. */
TEST(ps_shard_refuses_a_pull_larger_than_a_reply)
{
    enum { WIDE = 65536, N = 4100 }; /* 4100 rows of 256 KiB: just over 1 GiB */
    dt_rowopt_config opt;
    dt_rowopt_config_default(&opt, DT_ROWOPT_SGD);
    dt_ps_shard s;
    dt_ps_shard_init(&s, NULL);
    CHECK_OK(dt_ps_shard_add_table(&s, 1, "wide", 2, WIDE, 1, 0, DT_PARTITION_DIV, &opt, 0, 1));
    int64_t *ids = calloc(N, sizeof *ids);
    CHECK(ids != NULL);
    if (!ids)
        return;
    dt_psmsg pull = {.type = DT_PSMSG_PULL_ROWS, .table = 1, .n = N};
    expect_refusal(&s, &pull, ids, NULL, "a pull of 4100 rows of 65536 values needs a reply of");
    dt_psbuf buf = {0}, rep = {0};
    dt_psmsg in, out;
    pull.n = 2;
    ids[1] = 1;
    via_wire(&pull, ids, NULL, &buf, &in);
    CHECK_OK(dt_ps_shard_handle(&s, &in, &rep));
    CHECK_OK(dt_psmsg_decode(rep.data, rep.len, "ps", &out));
    CHECK(out.type == DT_PSMSG_ROWS && out.n == 2 && out.dim == WIDE);
    dt_psbuf_free(&buf), dt_psbuf_free(&rep);
    free(ids);
    dt_ps_shard_free(&s);
}

/* A TABLE whose shard would not fit in this host's memory, alone or beside the tables already
 * held, is refused with an ERROR naming the sizes before anything is allocated; the shard goes
 * on serving what it holds. */
TEST(ps_shard_refuses_tables_larger_than_its_memory)
{
    dt_rowopt_config opt;
    dt_rowopt_config_default(&opt, DT_ROWOPT_ADAGRAD);
    dt_ps_shard s;
    dt_ps_shard_init(&s, NULL);
    dt_psmsg def;
    /* 2^36 rows of 64 values with Adagrad's slot: 35 TB. */
    dt_ps_table_msg(1, "huge", (int64_t)1 << 36, 64, 1, 0, DT_PARTITION_DIV, &opt, 0.0f, 1, &def);
    expect_refusal(&s, &def, NULL, NULL, "more than the");
    CHECK(s.n_tables == 0);
    /* Two tables that fit one at a time: the second is refused, the first stays. */
    s.max_bytes = 6 << 20; /* 4.2 MB each */
    dt_ps_table_msg(2, "half", 4096, 128, 1, 0, DT_PARTITION_DIV, &opt, 0.1f, 1, &def);
    feed(&s, &def, NULL, NULL);
    dt_ps_table_msg(3, "other", 4096, 128, 1, 0, DT_PARTITION_DIV, &opt, 0.1f, 1, &def);
    expect_refusal(&s, &def, NULL, NULL, "with the 0.00419 GB of tables this task holds");
    CHECK(s.n_tables == 1 && s.tables[0].id == 2);
    dt_ps_shard_free(&s);
}

/* ---- Dynamic tables on ps shards ---- */

/* Sends m to the shard of its keys and decodes the reply into out (rep keeps its bytes). */
static void ask(dt_ps_shard *s, const dt_psmsg *m, const int64_t *ids, const float *vals,
                dt_psbuf *req, dt_psbuf *rep, dt_psmsg *out)
{
    dt_psmsg in;
    via_wire(m, ids, vals, req, &in);
    rep->len = 0;
    CHECK_OK(dt_ps_shard_handle(s, &in, rep));
    CHECK_OK(dt_psmsg_decode(rep->data, rep->len, "ps", out));
}

/* Two shards of a dynamic table, each key on its hash's shard, fed training pulls (with each
 * key's sightings) and pushes through the codec, against one key map with its table fed the
 * same: the same admissions, and the same rows and slots key for key, bit for bit. */
TEST(ps_dynamic_table_shards_follow_one_key_map)
{
    enum { N = 2, KEYS = 64, STEPS = 6 };
    dt_rowopt_config opt;
    dt_rowopt_config_default(&opt, DT_ROWOPT_ADAGRAD);
    opt.lr = 0.05f;
    dt_keymap_policy pol;
    dt_keymap_policy_default(&pol);
    pol.min_count = 2, pol.memory_limit = 64 << 20;
    dt_keymap *ref = NULL;
    dt_table rt;
    CHECK_OK(dt_keymap_create("emb", &pol, 1000, &ref));
    CHECK_OK(dt_table_create(&rt, "emb", 1000, DIM));
    CHECK_OK(dt_keymap_attach(ref, &rt, 0.1f, 77));
    CHECK_OK(dt_rowopt_setup(&opt, &rt));
    dt_ps_shard shards[N];
    dt_psbuf req = {0}, rep = {0};
    for (int k = 0; k < N; k++) {
        dt_ps_shard_init(&shards[k], NULL);
        dt_psmsg def, in, out;
        dt_ps_table_msg(3, "emb", DT_PARTITION_HASH_ROWS, DIM, N, k, DT_PARTITION_HASH, &opt,
                        0.1f, 77, &def);
        def.policy = pol;
        via_wire(&def, NULL, NULL, &req, &in);
        CHECK(in.policy.min_count == 2 && in.policy.memory_limit == 64 << 20);
        rep.len = 0;
        CHECK_OK(dt_ps_shard_handle(&shards[k], &in, &rep));
        CHECK_OK(dt_psmsg_decode(rep.data, rep.len, "ps", &out));
        CHECK_MSG(out.type == DT_PSMSG_ACK, "%.*s", (int)out.text_len, out.text ? out.text : "");
    }
    dt_rng r;
    dt_rng_seed(&r, 9);
    for (int64_t step = 1; step <= STEPS; step++) {
        /* The batch's distinct keys (increasing), each seen 1 or 2 times. */
        int64_t keys[KEYS], rows[KEYS];
        uint32_t times[KEYS];
        int nk = 0;
        for (int64_t k = 0; k < KEYS; k++)
            if (dt_rng_below(&r, 3))
                keys[nk] = (k * 0x9E3779B97F4A7C15LL) & INT64_MAX, times[nk++] = 1 + (uint32_t)dt_rng_below(&r, 2);
        /* keys increase for the push: sort them (with their times) */
        for (int a = 1; a < nk; a++)
            for (int b = a; b > 0 && keys[b - 1] > keys[b]; b--) {
                int64_t t = keys[b]; keys[b] = keys[b - 1], keys[b - 1] = t;
                uint32_t u = times[b]; times[b] = times[b - 1], times[b - 1] = u;
            }
        CHECK_OK(dt_keymap_resolve_counted(ref, keys, times, (size_t)nk, step, rows));
        float grad[KEYS * DIM];
        for (int i = 0; i < nk * DIM; i++)
            grad[i] = dt_rng_uniform(&r) - 0.5f;
        for (int k = 0; k < N; k++) {
            int64_t mine[KEYS];
            uint32_t mt[KEYS];
            float mg[KEYS * DIM];
            uint32_t n = 0;
            for (int i = 0; i < nk; i++)
                if (dt_keymap_shard(keys[i], N) == k) {
                    mine[n] = keys[i], mt[n] = times[i];
                    memcpy(mg + n * DIM, grad + i * DIM, sizeof(float) * DIM);
                    n++;
                }
            dt_psmsg pull = {.type = DT_PSMSG_PULL_KEYS, .table = 3, .n = n, .step = step,
                             .times_host = mt}, out;
            ask(&shards[k], &pull, mine, NULL, &req, &rep, &out);
            CHECK(out.type == DT_PSMSG_ROWS && out.n == n);
            for (uint32_t i = 0; i < n && out.type == DT_PSMSG_ROWS; i++) {
                int64_t rr = dt_keymap_row(ref, mine[i]);
                for (int d = 0; d < DIM; d++)
                    CHECK(dt_psmsg_value(&out, i * DIM + (size_t)d) == dt_table_row(&rt, rr)[d]);
            }
            dt_psmsg push = {.type = DT_PSMSG_PUSH_ROWS, .table = 3, .n = n, .dim = DIM,
                             .step = step, .lr_scale = 1.0f};
            ask(&shards[k], &push, mine, mg, &req, &rep, &out);
            CHECK(out.type == DT_PSMSG_ACK);
        }
        /* The reference: the admitted keys' gradient rows, by row. */
        dt_sparse_rows g;
        dt_sparse_rows_init(&g, DIM);
        CHECK_OK(dt_sparse_rows_reserve(&g, KEYS));
        for (int i = 0; i < nk; i++)
            if (rows[i]) {
                g.ids[g.n] = rows[i];
                memcpy(g.rows + g.n * DIM, grad + i * DIM, sizeof(float) * DIM);
                g.n++;
            }
        dt_rowopt_update(&opt, opt.lr, step, &rt, &g, NULL);
        dt_sparse_rows_free(&g);
    }
    /* Every key of the reference map has the same row and slot on its shard. */
    int64_t admitted = 0;
    for (int k = 0; k < N; k++) {
        dt_ps_table_shard *ts = &shards[k].tables[0];
        dt_keymap_stats st;
        dt_keymap_stats_get(ts->keys, &st);
        admitted += st.live;
    }
    dt_keymap_stats rs;
    dt_keymap_stats_get(ref, &rs);
    CHECK_MSG(admitted == rs.live && rs.live > 10, "%lld admitted on the shards, %lld in the map",
              (long long)admitted, (long long)rs.live);
    for (int64_t k = 0; k < KEYS; k++) {
        int64_t key = (k * 0x9E3779B97F4A7C15LL) & INT64_MAX, rr = dt_keymap_row(ref, key);
        dt_ps_table_shard *ts = &shards[dt_keymap_shard(key, N)].tables[0];
        int64_t sr = dt_keymap_row(ts->keys, key);
        CHECK((rr == 0) == (sr == 0));
        if (rr && sr)
            CHECK(memcmp(dt_table_row(&rt, rr), dt_table_row(&ts->t, sr), sizeof(float) * DIM) == 0 &&
                  memcmp(rt.slots[0] + rr * DIM, ts->t.slots[0] + sr * DIM, sizeof(float) * DIM) == 0);
    }
    /* A key on the other shard is an ERROR naming it. */
    int64_t wrong = 0;
    while (dt_keymap_shard(wrong, N) == 0)
        wrong++;
    uint32_t one = 1;
    dt_psmsg pull = {.type = DT_PSMSG_PULL_KEYS, .table = 3, .n = 1, .step = 9, .times_host = &one}, out;
    ask(&shards[0], &pull, &wrong, NULL, &req, &rep, &out);
    CHECK(out.type == DT_PSMSG_ERROR && out.text && strstr(out.text, "is not held by shard"));
    /* The decoder refuses a key seen 0 times and a negative key, naming the byte. */
    uint32_t zero = 0;
    int64_t negative = -5, fine = 7;
    dt_psmsg bad = {.type = DT_PSMSG_PULL_KEYS, .table = 3, .n = 1, .step = 9, .times_host = &zero};
    req.len = 0;
    CHECK_OK(dt_psmsg_encode(&bad, &fine, NULL, &req));
    CHECK(dt_psmsg_decode(req.data, req.len, "worker:1", &out) == DT_ERR_FORMAT &&
          strstr(dt_last_error(), "worker:1") && strstr(dt_last_error(), "a key seen 0 times"));
    bad.times_host = &one;
    req.len = 0;
    CHECK_OK(dt_psmsg_encode(&bad, &negative, NULL, &req));
    CHECK(dt_psmsg_decode(req.data, req.len, "worker:1", &out) == DT_ERR_FORMAT &&
          strstr(dt_last_error(), "a negative key"));
    /* Shard 0 read back (READ_KEYS, with slots) and merged into a fresh shard 0 (KEYED, as a
     * restore sends it): every key's row and slot alike; and through a snapshot. */
    dt_ps_shard fresh, again;
    dt_ps_shard_init(&fresh, NULL);
    dt_ps_shard_init(&again, NULL);
    CHECK_OK(dt_ps_shard_add_dynamic(&fresh, 3, "emb", DIM, N, 0, &opt, 0.1f, 77, &pol));
    int messages = 0;
    for (uint32_t kind = DT_PSMSG_KEYED_ROWS; kind <= DT_PSMSG_KEYED_COUNTING; kind++)
    for (int64_t cursor = 0;;) {
        dt_psmsg rd = {.type = DT_PSMSG_READ_KEYS, .table = 3, .target = kind, .n = 7,
                       .slots = 1, .offset = (uint64_t)cursor};
        ask(&shards[0], &rd, NULL, NULL, &req, &rep, &out);
        CHECK(out.type == DT_PSMSG_KEYED && out.target == kind);
        if (out.type != DT_PSMSG_KEYED || out.n == 0)
            break;
        cursor = (int64_t)out.offset, messages++;
        dt_psbuf r2 = {0};
        dt_psmsg ack;
        CHECK_OK(dt_ps_shard_handle(&fresh, &out, &r2));
        CHECK_OK(dt_psmsg_decode(r2.data, r2.len, "ps", &ack));
        CHECK(ack.type == DT_PSMSG_ACK);
        dt_psbuf_free(&r2);
    }
    char snap[] = "/tmp/dtrain-test-dynsnap-XXXXXX";
    int fd = mkstemp(snap);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    dt_ps_job job = {.id = "dyn"};
    dt_ps_snapshot_info info;
    CHECK_OK(dt_ps_snapshot_save(&fresh, 0, &job, snap));
    CHECK_OK(dt_ps_snapshot_load(&again, 0, &job, snap, &info));
    unlink(snap);
    dt_keymap_stats s0, s1, s2;
    dt_keymap_stats_get(shards[0].tables[0].keys, &s0);
    dt_keymap_stats_get(fresh.tables[0].keys, &s1);
    CHECK_MSG(messages >= 2 && s1.live == s0.live && s1.counting == s0.counting && s0.live > 3,
              "%d messages, %lld and %lld keys", messages, (long long)s0.live, (long long)s1.live);
    if (again.n_tables == 1) {
        dt_keymap_stats_get(again.tables[0].keys, &s2);
        CHECK_MSG(s2.live == s0.live && s2.counting == s0.counting && info.dynamic_keys == s0.live,
                  "%lld/%lld live, %lld/%lld counted, info %lld", (long long)s2.live,
                  (long long)s0.live, (long long)s2.counting, (long long)s0.counting,
                  (long long)info.dynamic_keys);
    }
    for (int64_t k = 0; k < KEYS && again.n_tables == 1; k++) {
        int64_t key = (k * 0x9E3779B97F4A7C15LL) & INT64_MAX;
        if (dt_keymap_shard(key, N) != 0)
            continue;
        const dt_ps_table_shard *a = &shards[0].tables[0], *b = &again.tables[0];
        int64_t ra = dt_keymap_row(a->keys, key), rb = dt_keymap_row(b->keys, key);
        CHECK((ra == 0) == (rb == 0));
        if (ra && rb)
            CHECK(memcmp(dt_table_row(&a->t, ra), dt_table_row(&b->t, rb), sizeof(float) * DIM) == 0 &&
                  memcmp(a->t.slots[0] + ra * DIM, b->t.slots[0] + rb * DIM, sizeof(float) * DIM) == 0);
    }
    /* A key of shard 1 merged into shard 0 is refused, naming it. */
    uint32_t c1 = 1, l1 = 1;
    float row[DIM * 2] = {0};
    dt_psmsg wrongk = {.type = DT_PSMSG_KEYED, .table = 3, .n = 1, .dim = DIM, .slots = 1,
                       .times_host = &c1, .last_host = &l1};
    ask(&fresh, &wrongk, &wrong, row, &req, &rep, &out);
    CHECK(out.type == DT_PSMSG_ERROR && out.text && strstr(out.text, "is not held by shard"));
    dt_ps_shard_free(&fresh);
    dt_ps_shard_free(&again);
    for (int k = 0; k < N; k++)
        dt_ps_shard_free(&shards[k]);
    dt_psbuf_free(&req), dt_psbuf_free(&rep);
    dt_table_free(&rt);
    dt_keymap_destroy(ref);
}
