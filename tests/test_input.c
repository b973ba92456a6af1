/* Input from a data spec: every spec form and its errors, and the pipeline over files sharded by
 * FILE and by DATA over two workers, together covering every example once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/input.h"
#include "test.h"

TEST(input_spec_parses_every_form)
{
    dt_input_spec s;
    CHECK_OK(dt_input_spec_parse("fashion-mnist", "--data", &s));
    CHECK(s.kind == DT_INPUT_MNIST_DIR && s.default_dir &&
          strcmp(s.path, DT_FASHION_MNIST_DIR) == 0);
    CHECK_OK(dt_input_spec_parse("mnist:/d", "--data", &s));
    CHECK(s.kind == DT_INPUT_MNIST_DIR && !s.default_dir && strcmp(s.path, "/d") == 0);
    CHECK_OK(dt_input_spec_parse("idx:a.gz,b", "--data", &s));
    CHECK(s.kind == DT_INPUT_IDX && strcmp(s.path, "a.gz") == 0 && strcmp(s.labels, "b") == 0);
    CHECK_OK(dt_input_spec_parse("tfrecord:x/*.tfrecord,y", "--data", &s));
    CHECK(s.kind == DT_INPUT_TFRECORD && strcmp(s.path, "x/*.tfrecord,y") == 0 &&
          dt_input_spec_is_files(&s));
    CHECK_OK(dt_input_spec_parse("libsvm:-", "--data", &s));
    CHECK(s.kind == DT_INPUT_LIBSVM && strcmp(s.path, "-") == 0);
    CHECK_OK(dt_input_spec_parse("csv:a.csv", "--test-data", &s));
    CHECK(s.kind == DT_INPUT_CSV);
    dt_input_spec t;
    bool have;
    CHECK_OK(dt_input_spec_parse("fashion-mnist:/d", "--data", &s));
    dt_input_spec_default_test(&s, &t, &have);
    CHECK(have && strcmp(t.path, "/d") == 0);
    CHECK_OK(dt_input_spec_parse("idx:a,b", "--data", &s));
    dt_input_spec_default_test(&s, &t, &have);
    CHECK(!have);
}

TEST(input_spec_names_the_flag_and_the_spec_when_bad)
{
    dt_input_spec s;
    CHECK_ERR(dt_input_spec_parse("parquet:x", "--data", &s), DT_ERR_INVALID,
              "--data: unknown data 'parquet:x'");
    CHECK_ERR(dt_input_spec_parse("idx:a", "--test-data", &s), DT_ERR_INVALID,
              "--test-data: expected idx:IMAGES,LABELS, got 'idx:a'");
    CHECK_ERR(dt_input_spec_parse("idx:,b", "--data", &s), DT_ERR_INVALID, "expected idx:");
    CHECK_ERR(dt_input_spec_parse("mnist:", "--data", &s), DT_ERR_INVALID,
              "the directory after ':' is empty");
    CHECK_ERR(dt_input_spec_parse("tfrecord:", "--data", &s), DT_ERR_INVALID,
              "the files after ':' are missing");
    CHECK_ERR(dt_input_load_images(&(dt_input_spec){.kind = DT_INPUT_CSV, .text = "csv:a"},
                                   "--test-data", true, NULL),
              DT_ERR_INVALID, "--test-data: 'csv:a': images are read from");
}

/* Reads every batch of one worker's pipeline; marks seen[label] for each example. */
static int read_worker(const char *glob, dt_autoshard_policy policy, int worker, int *seen,
                       int n)
{
    dt_input_spec s;
    dt_input_options o;
    dt_input_options_default(&o);
    o.batch_size = 2; /* one example per worker per step */
    o.shuffle_buffer = 0;
    o.prefetch = 0;
    o.keep_remainder = true;
    o.num_features = 1;
    o.autoshard = policy;
    dt_input in;
    dt_input_context ctx = {2, worker, 2};
    int rows = 0;
    if (dt_input_spec_parse(glob, "--data", &s) || dt_input_open(&s, NULL, &o, &ctx, &in))
        return -1;
    dt_elem *e;
    while (dt_dataset_next(in.train, &e) == DT_OK) {
        for (int r = 0; r < e->n; r++) {
            int label = (int)e->labels[r];
            if (label >= 0 && label < n)
                seen[label]++;
            rows++;
        }
        dt_elem_free(e);
    }
    dt_input_free(&in);
    return rows;
}

TEST(input_shards_files_by_file_and_by_data_over_two_workers)
{
    char dir[] = "/tmp/dtrain-input-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256], glob[300];
    /* 4 files of 3 examples each; the label numbers the example. */
    for (int f = 0; f < 4; f++) {
        snprintf(path, sizeof path, "%s/part-%d.svm", dir, f);
        FILE *fp = fopen(path, "w");
        CHECK(fp != NULL);
        for (int i = 0; i < 3; i++)
            fprintf(fp, "%d 1:%d\n", f * 3 + i, i);
        fclose(fp);
    }
    snprintf(glob, sizeof glob, "libsvm:%s/part-*.svm", dir);
    dt_autoshard_policy policies[2] = {DT_AUTOSHARD_FILE, DT_AUTOSHARD_DATA};
    for (int p = 0; p < 2; p++) {
        int seen[12] = {0};
        int a = read_worker(glob, policies[p], 0, seen, 12);
        int b = read_worker(glob, policies[p], 1, seen, 12);
        CHECK_MSG(a == 6 && b == 6, "policy %d: %d and %d examples", p, a, b);
        for (int i = 0; i < 12; i++)
            CHECK_MSG(seen[i] == 1, "policy %d: example %d seen %d times", p, i, seen[i]);
        /* FILE: worker 0 has whole files 0 and 2 (labels 0-2 and 6-8). */
        if (policies[p] == DT_AUTOSHARD_FILE) {
            int mine[12] = {0};
            read_worker(glob, policies[p], 0, mine, 12);
            CHECK(mine[0] && mine[1] && mine[2] && mine[6] && !mine[3] && !mine[9]);
        }
    }
    for (int f = 0; f < 4; f++) {
        snprintf(path, sizeof path, "%s/part-%d.svm", dir, f);
        unlink(path);
    }
    rmdir(dir);
}
