/* Input from a data spec: every spec form and its errors, the builder's errors naming their
 * flags, the pipeline over files sharded by FILE, DATA and AUTO over two workers (together
 * covering every example once) or not at all, and images over several workers, whose blocks
 * put together are the one-worker batches. */
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
          strcmp(s.path, DT_FASHION_MNIST_DIR) == 0 && strcmp(s.text, "fashion-mnist") == 0);
    CHECK_OK(dt_input_spec_parse("fashion-mnist:/data/fm", "--data", &s));
    CHECK(s.kind == DT_INPUT_MNIST_DIR && !s.default_dir && strcmp(s.path, "/data/fm") == 0 &&
          !dt_input_spec_is_files(&s));
    CHECK_OK(dt_input_spec_parse("mnist:/d", "--data", &s));
    CHECK(s.kind == DT_INPUT_MNIST_DIR && !s.default_dir && strcmp(s.path, "/d") == 0);
    CHECK_OK(dt_input_spec_parse("idx:a.gz,b", "--data", &s));
    CHECK(s.kind == DT_INPUT_IDX && strcmp(s.path, "a.gz") == 0 && strcmp(s.labels, "b") == 0 &&
          !dt_input_spec_is_files(&s));
    CHECK_OK(dt_input_spec_parse("tfrecord:x/*.tfrecord,y", "--data", &s));
    CHECK(s.kind == DT_INPUT_TFRECORD && strcmp(s.path, "x/*.tfrecord,y") == 0 &&
          dt_input_spec_is_files(&s));
    CHECK_OK(dt_input_spec_parse("libsvm:-", "--data", &s));
    CHECK(s.kind == DT_INPUT_LIBSVM && strcmp(s.path, "-") == 0 && dt_input_spec_is_files(&s));
    CHECK_OK(dt_input_spec_parse("csv:a.csv", "--test-data", &s));
    CHECK(s.kind == DT_INPUT_CSV && strcmp(s.path, "a.csv") == 0 && dt_input_spec_is_files(&s));
    CHECK_OK(dt_input_spec_parse("tfrecord:-", "--data", &s));
    CHECK(s.kind == DT_INPUT_TFRECORD && strcmp(s.path, "-") == 0);
    CHECK_OK(dt_input_spec_parse("csv:-", "--data", &s));
    CHECK(s.kind == DT_INPUT_CSV && strcmp(s.path, "-") == 0);
    dt_input_spec t;
    bool have;
    CHECK_OK(dt_input_spec_parse("fashion-mnist:/d", "--data", &s));
    dt_input_spec_default_test(&s, &t, &have);
    CHECK(have && strcmp(t.path, "/d") == 0);
    CHECK_OK(dt_input_spec_parse("idx:a,b", "--data", &s));
    dt_input_spec_default_test(&s, &t, &have);
    CHECK(!have);
    CHECK_OK(dt_input_spec_parse("libsvm:a", "--data", &s));
    dt_input_spec_default_test(&s, &t, &have);
    CHECK(!have);
}

TEST(input_spec_names_the_flag_and_the_spec_when_bad)
{
    dt_input_spec s;
    CHECK_ERR(dt_input_spec_parse("parquet:x", "--data", &s), DT_ERR_INVALID,
              "--data: unknown data 'parquet:x' (fashion-mnist[:DIR], mnist:DIR, "
              "idx:IMAGES,LABELS, tfrecord:GLOB, libsvm:GLOB, csv:GLOB, criteo:GLOB)");
    CHECK_ERR(dt_input_spec_parse("", "--data", &s), DT_ERR_INVALID, "--data: unknown data ''");
    CHECK_ERR(dt_input_spec_parse("-", "--data", &s), DT_ERR_INVALID, "--data: unknown data '-'");
    CHECK_ERR(dt_input_spec_parse("Fashion-MNIST", "--data", &s), DT_ERR_INVALID,
              "unknown data 'Fashion-MNIST'");
    CHECK_ERR(dt_input_spec_parse("idx:a", "--test-data", &s), DT_ERR_INVALID,
              "--test-data: expected idx:IMAGES,LABELS, got 'idx:a'");
    CHECK_ERR(dt_input_spec_parse("idx:,b", "--data", &s), DT_ERR_INVALID,
              "--data: expected idx:IMAGES,LABELS, got 'idx:,b'");
    CHECK_ERR(dt_input_spec_parse("idx:a,", "--data", &s), DT_ERR_INVALID,
              "--data: expected idx:IMAGES,LABELS, got 'idx:a,'");
    CHECK_ERR(dt_input_spec_parse("idx:", "--data", &s), DT_ERR_INVALID,
              "--data: expected idx:IMAGES,LABELS, got 'idx:'");
    CHECK_ERR(dt_input_spec_parse("mnist:", "--data", &s), DT_ERR_INVALID,
              "--data: 'mnist:': the directory after ':' is empty");
    CHECK_ERR(dt_input_spec_parse("fashion-mnist:", "--test-data", &s), DT_ERR_INVALID,
              "--test-data: 'fashion-mnist:': the directory after ':' is empty");
    const char *files[] = {"tfrecord:", "libsvm:", "csv:"};
    for (int i = 0; i < 3; i++) {
        char want[64];
        snprintf(want, sizeof want, "--data: '%s': the files after ':' are missing", files[i]);
        CHECK_ERR(dt_input_spec_parse(files[i], "--data", &s), DT_ERR_INVALID, want);
    }
    /* A path longer than the spec holds is refused, not cut. */
    static char longer[5000];
    memcpy(longer, "libsvm:", 7);
    memset(longer + 7, 'a', sizeof longer - 8);
    CHECK_ERR(dt_input_spec_parse(longer, "--data", &s), DT_ERR_INVALID,
              "--data: a path of 4999 bytes is too long");
    longer[4100] = '\0'; /* the spec fits, its path does not */
    memcpy(longer, "idx:", 4);
    longer[60] = ',';
    CHECK_OK(dt_input_spec_parse(longer, "--data", &s));
    CHECK_ERR(dt_input_load_images(&(dt_input_spec){.kind = DT_INPUT_CSV, .text = "csv:a"},
                                   "--test-data", true, NULL),
              DT_ERR_INVALID, "--test-data: 'csv:a': images are read from");
}

/* 4 LibSVM files part-0..3 of 3 examples each in the test's directory; the label numbers the
 * example. Returns the spec's glob. */
static const char *write_parts(void)
{
    static char glob[512];
    for (int f = 0; f < 4; f++) {
        char name[32], text[64];
        size_t len = 0;
        for (int i = 0; i < 3; i++)
            len += (size_t)snprintf(text + len, sizeof text - len, "%d 1:%d\n", f * 3 + i, i);
        snprintf(name, sizeof name, "part-%d.svm", f);
        test_write_file(test_path(name), text, len);
    }
    snprintf(glob, sizeof glob, "libsvm:%s", test_path("part-*.svm"));
    return glob;
}

static void file_options(dt_input_options *o, dt_autoshard_policy policy)
{
    dt_input_options_default(o);
    o->batch_size = 2; /* one example per worker per step */
    o->shuffle_buffer = 0;
    o->prefetch = 0;
    o->keep_remainder = true;
    o->num_features = 1;
    o->autoshard = policy;
}

/* Reads every batch of one worker's pipeline; marks seen[label] for each example. Returns the
 * rows read (-1 when the pipeline cannot be built) and the policy applied. */
static int read_worker(const char *glob, dt_autoshard_policy policy, int worker, int *seen,
                       int n, dt_autoshard_policy *applied)
{
    dt_input_spec s;
    dt_input_options o;
    file_options(&o, policy);
    dt_input in;
    dt_input_context ctx = {2, worker, 2};
    int rows = 0;
    if (dt_input_spec_parse(glob, "--data", &s) || dt_input_open(&s, NULL, &o, &ctx, &in))
        return -1;
    *applied = in.autoshard;
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
    const char *glob = write_parts();
    /* AUTO over 4 files and 2 workers is FILE. */
    const dt_autoshard_policy policies[3] = {DT_AUTOSHARD_FILE, DT_AUTOSHARD_DATA,
                                             DT_AUTOSHARD_AUTO};
    const dt_autoshard_policy expect[3] = {DT_AUTOSHARD_FILE, DT_AUTOSHARD_DATA,
                                           DT_AUTOSHARD_FILE};
    for (int p = 0; p < 3; p++) {
        int seen[12] = {0};
        dt_autoshard_policy ap = DT_AUTOSHARD_OFF, bp = DT_AUTOSHARD_OFF;
        int a = read_worker(glob, policies[p], 0, seen, 12, &ap);
        int b = read_worker(glob, policies[p], 1, seen, 12, &bp);
        CHECK_MSG(a == 6 && b == 6, "policy %d: %d and %d examples (%s)", p, a, b,
                  dt_last_error());
        CHECK_MSG(ap == expect[p] && bp == expect[p], "policy %d applied as %d and %d", p, ap,
                  bp);
        for (int i = 0; i < 12; i++)
            CHECK_MSG(seen[i] == 1, "policy %d: example %d seen %d times", p, i, seen[i]);
        /* FILE: worker 0 has whole files 0 and 2 (labels 0-2 and 6-8); DATA: every other
         * example of the files read in turn. */
        int mine[12] = {0};
        read_worker(glob, policies[p], 0, mine, 12, &ap);
        for (int i = 0; i < 12; i++) {
            bool want = expect[p] == DT_AUTOSHARD_FILE ? (i / 3) % 2 == 0 : i % 2 == 0;
            CHECK_MSG(mine[i] == want, "policy %d: worker 0 has example %d %d times", p, i,
                      mine[i]);
        }
    }
}

TEST(input_autoshard_off_and_too_few_files)
{
    const char *glob = write_parts();
    /* OFF: both workers read all 12 examples. */
    int seen[12] = {0};
    dt_autoshard_policy ap, bp;
    CHECK(read_worker(glob, DT_AUTOSHARD_OFF, 0, seen, 12, &ap) == 12);
    CHECK(read_worker(glob, DT_AUTOSHARD_OFF, 1, seen, 12, &bp) == 12);
    CHECK(ap == DT_AUTOSHARD_OFF && bp == DT_AUTOSHARD_OFF);
    for (int i = 0; i < 12; i++)
        CHECK_MSG(seen[i] == 2, "example %d seen %d times", i, seen[i]);
    /* One file for two workers: FILE and AUTO fall back to DATA, still disjoint and complete. */
    char one[600];
    snprintf(one, sizeof one, "libsvm:%s", test_path("part-1.svm"));
    const dt_autoshard_policy policies[2] = {DT_AUTOSHARD_FILE, DT_AUTOSHARD_AUTO};
    for (int p = 0; p < 2; p++) {
        int got[12] = {0};
        int a = read_worker(one, policies[p], 0, got, 12, &ap);
        int b = read_worker(one, policies[p], 1, got, 12, &bp);
        CHECK_MSG(a == 2 && b == 1 && ap == DT_AUTOSHARD_DATA && bp == DT_AUTOSHARD_DATA,
                  "policy %d: %d and %d examples, applied %d and %d", p, a, b, ap, bp);
        for (int i = 0; i < 12; i++)
            CHECK_MSG(got[i] == (i / 3 == 1), "policy %d: example %d seen %d times", p, i,
                      got[i]);
    }
}

TEST(input_builder_errors_name_their_field)
{
    const char *glob = write_parts();
    const char *rows = "1,2,3\n4,5,6\n";
    test_write_file(test_path("rows.csv"), rows, strlen(rows));
    char csv[600];
    snprintf(csv, sizeof csv, "csv:%s", test_path("rows.csv"));
    dt_input_spec svm, tfr, csvs, dir, missing;
    CHECK_OK(dt_input_spec_parse(glob, "--data", &svm));
    CHECK_OK(dt_input_spec_parse("tfrecord:x.tfrecord", "--data", &tfr));
    CHECK_OK(dt_input_spec_parse(csv, "--data", &csvs));
    CHECK_OK(dt_input_spec_parse("mnist:/nonexistent/mnist", "--data", &dir));
    CHECK_OK(dt_input_spec_parse("libsvm:/nonexistent/*.svm", "--data", &missing));
    dt_input_options o;
    file_options(&o, DT_AUTOSHARD_DATA);
    dt_input in;
    CHECK_ERR(dt_input_open(&tfr, NULL, &o, NULL, &in), DT_ERR_INVALID,
              "features: tfrecord data needs the features to read");
    o.features = "image:4:1/255:oops:more";
    CHECK_ERR(dt_input_open(&tfr, NULL, &o, NULL, &in), DT_ERR_INVALID, "features: features item");
    o.features = NULL;
    CHECK_ERR(dt_input_open(&svm, &tfr, &o, NULL, &in), DT_ERR_INVALID, "--features");
    CHECK_ERR(dt_input_open(&svm, &dir, &o, NULL, &in), DT_ERR_INVALID,
              "test_data: 'mnist:/nonexistent/mnist': with libsvm --data, give tfrecord:, "
              "libsvm: or csv: test data");
    CHECK_ERR(dt_input_open(&dir, &svm, &o, NULL, &in), DT_ERR_IO,
              "data: /nonexistent/mnist: No such file");
    CHECK_ERR(dt_input_open(&missing, NULL, &o, NULL, &in), DT_ERR_IO, "data: ");
    o.num_features = 0;
    CHECK_ERR(dt_input_open(&svm, NULL, &o, NULL, &in), DT_ERR_INVALID,
              "num_features: libsvm data for a dense model needs the number of features");
    o.num_features = 1;
    o.input_shape = "1,x,1";
    CHECK_ERR(dt_input_open(&svm, NULL, &o, NULL, &in), DT_ERR_INVALID,
              "input_shape: expected H,W,C, got '1,x,1'");
    o.input_shape = "2,2,1";
    CHECK_ERR(dt_input_open(&svm, NULL, &o, NULL, &in), DT_ERR_INVALID,
              "input_shape: 2x2x1 is not the 1 values per example");
    o.input_shape = NULL;
    o.label_column = "price";
    CHECK_ERR(dt_input_open(&csvs, NULL, &o, NULL, &in), DT_ERR_INVALID,
              "label_column: a column name needs `csv_header`");
    o.label_column = "0";
    CHECK_OK(dt_input_open(&csvs, NULL, &o, NULL, &in));
    CHECK(in.shape[0] == 1 && in.shape[1] == 1 && in.shape[2] == 2 && in.n_train == -1 &&
          strcmp(in.source, csv) == 0);
    dt_input_free(&in);
    o.label_column = NULL;
    o.batch_size = 3;
    dt_input_context ctx = {2, 0, 2};
    CHECK_ERR(dt_input_open(&svm, NULL, &o, &ctx, &in), DT_ERR_INVALID,
              "batch_size: the global batch 3 is not divisible by the 2 workers");
    o.batch_size = 0;
    CHECK_ERR(dt_input_open(&svm, NULL, &o, NULL, &in), DT_ERR_INVALID,
              "batch_size: must be at least 1");
    o.batch_size = 2;
    dt_input_options bad = o;
    bad.shuffle_buffer = -1;
    CHECK_ERR(dt_input_options_check(&bad), DT_ERR_INVALID, "shuffle_buffer: must not be");
    bad = o, bad.prefetch = 4097;
    CHECK_ERR(dt_input_open(&svm, NULL, &bad, NULL, &in), DT_ERR_INVALID,
              "prefetch: must be in 0..4096, got 4097");
    bad = o, bad.num_parallel_reads = 0;
    CHECK_ERR(dt_input_options_check(&bad), DT_ERR_INVALID, "num_parallel_reads: must be in");
    bad = o, bad.num_parallel_calls = 1025;
    CHECK_ERR(dt_input_options_check(&bad), DT_ERR_INVALID, "num_parallel_calls: must be in");
    bad = o, bad.num_features = -1;
    CHECK_ERR(dt_input_options_check(&bad), DT_ERR_INVALID, "num_features: must be in");
    bad = o, bad.index_base = 2;
    CHECK_ERR(dt_input_open_test(&svm, &bad, &in), DT_ERR_INVALID, "index_base: must be 0 or 1");
    CHECK_OK(dt_input_options_check(&o));
    ctx.input_pipeline_id = 2;
    CHECK_ERR(dt_input_open(&svm, NULL, &o, &ctx, &in), DT_ERR_INVALID, "input: worker 2 of 2");
}

/* IDX files of n images of 3x2 pixels whose bytes name the image, labels i % 10. */
static void write_images(const char *images, const char *labels, int n)
{
    uint8_t im[16 + 64 * 6], lb[8 + 64];
    const uint8_t head[16] = {0, 0, 8, 3, 0, 0, 0, (uint8_t)n, 0, 0, 0, 3, 0, 0, 0, 2};
    const uint8_t lhead[8] = {0, 0, 8, 1, 0, 0, 0, (uint8_t)n};
    memcpy(im, head, 16);
    memcpy(lb, lhead, 8);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 6; k++)
            im[16 + i * 6 + k] = (uint8_t)(i * 4 + k);
        lb[8 + i] = (uint8_t)(i % 10);
    }
    test_write_file(images, im, 16 + (size_t)n * 6);
    test_write_file(labels, lb, 8 + (size_t)n);
}

/* Opens worker w of n over spec (n 1: no context); on_replica: as another local replica over
 * one's images. */
static dt_status open_worker(const dt_input_spec *s, const dt_input_options *o, int n, int w,
                             const dt_input *one, dt_input *out)
{
    dt_input_context ctx = {n, w, n};
    if (one)
        return dt_input_open_replica(one, o, &ctx, out);
    return dt_input_open(s, NULL, o, n > 1 ? &ctx : NULL, out);
}

/* Each step's blocks of the workers, in worker order, are the one-worker batch of the step, bit
 * for bit, through two epochs. Returns the rows compared. */
static int compare_blocks(dt_input *whole, dt_input *parts, int n, const char *what)
{
    int rows = 0;
    for (int epoch = 0; epoch < 2; epoch++) {
        for (int step = 0;; step++) {
            dt_elem *all;
            dt_status st = dt_dataset_next(whole->train, &all);
            int at = 0;
            for (int w = 0; w < n; w++) {
                dt_elem *e;
                dt_status sw = dt_dataset_next(parts[w].train, &e);
                CHECK_MSG(sw == st, "%s: epoch %d step %d: worker %d ends apart", what, epoch,
                          step, w);
                if (sw != DT_OK)
                    continue;
                size_t item = (size_t)e->n_dense;
                bool same = st == DT_OK && at + e->n <= all->n && e->n_dense == all->n_dense &&
                            memcmp(e->dense, all->dense + at * item,
                                   (size_t)e->n * item * sizeof(float)) == 0 &&
                            memcmp(e->labels, all->labels + at, (size_t)e->n * sizeof(float)) == 0;
                CHECK_MSG(same, "%s: epoch %d step %d: worker %d's block differs", what, epoch,
                          step, w);
                at += e->n;
                dt_elem_free(e);
            }
            if (st != DT_OK)
                break;
            CHECK_MSG(at == all->n, "%s: step %d: blocks of %d rows for a batch of %d", what,
                      step, at, all->n);
            rows += all->n;
            dt_elem_free(all);
        }
        CHECK_OK(dt_dataset_reset(whole->train));
        for (int w = 0; w < n; w++)
            CHECK_OK(dt_dataset_reset(parts[w].train));
    }
    return rows;
}

TEST(input_images_over_workers_are_the_one_worker_batches_in_blocks)
{
    enum { N = 29 };
    write_images(test_path("im.idx"), test_path("lb.idx"), N);
    char text[600];
    snprintf(text, sizeof text, "idx:%s,%s", test_path("im.idx"), test_path("lb.idx"));
    dt_input_spec s;
    CHECK_OK(dt_input_spec_parse(text, "--data", &s));
    const int batches[] = {4, 7, 12};
    int compared = 0;
    for (int bi = 0; bi < 3; bi++)
        for (int keep = 0; keep < 2; keep++)
            for (int n = 2; n <= 3; n++)
                for (int replica = 0; replica < 2; replica++) {
                    dt_input_options o;
                    dt_input_options_default(&o);
                    o.batch_size = batches[bi];
                    o.keep_remainder = keep;
                    o.shuffle_buffer = 11;
                    o.seed = 5;
                    o.prefetch = keep; /* with and without the prefetch thread */
                    dt_input whole, parts[3];
                    memset(parts, 0, sizeof parts);
                    CHECK_OK(dt_input_open(&s, NULL, &o, NULL, &whole));
                    CHECK(whole.n_train == N && whole.shape[0] == 3 && whole.shape[1] == 2 &&
                          whole.shape[2] == 1 && whole.autoshard == DT_AUTOSHARD_OFF);
                    for (int w = 0; w < n; w++)
                        CHECK_OK(open_worker(&s, &o, n, w, replica ? &whole : NULL, &parts[w]));
                    char what[96];
                    snprintf(what, sizeof what, "batch %d, keep %d, %d %s", batches[bi], keep, n,
                             replica ? "replicas" : "workers");
                    int rows = compare_blocks(&whole, parts, n, what);
                    int per_epoch = keep ? N : N / batches[bi] * batches[bi];
                    CHECK_MSG(rows == 2 * per_epoch, "%s: %d rows", what, rows);
                    compared += rows;
                    for (int w = 0; w < n; w++)
                        dt_input_free(&parts[w]);
                    dt_input_free(&whole);
                }
    CHECK(compared > 0);
}

TEST(input_test_data_alone_in_file_order)
{
    enum { N = 9 };
    write_images(test_path("tim.idx"), test_path("tlb.idx"), N);
    char text[600];
    snprintf(text, sizeof text, "idx:%s,%s", test_path("tim.idx"), test_path("tlb.idx"));
    dt_input_spec s;
    CHECK_OK(dt_input_spec_parse(text, "--test-data", &s));
    dt_input_options o;
    dt_input_options_default(&o);
    o.batch_size = 4;
    dt_input in;
    CHECK_OK(dt_input_open_test(&s, &o, &in));
    CHECK(in.train == NULL && in.test != NULL && in.test_images.n == N && in.shape[0] == 3 &&
          in.shape[1] == 2 && in.shape[2] == 1 && in.eval_batch == 4);
    /* Batches of 4, 4 and 1 in file order: image i's first pixel is i * 4 / 255. */
    int seen = 0, batches = 0;
    dt_elem *e;
    while (in.test && dt_dataset_next(in.test, &e) == DT_OK) {
        for (int r = 0; r < e->n; r++, seen++)
            CHECK_MSG(e->dense[r * 6] == (float)(seen * 4) / 255.0f && e->labels[r] == seen % 10,
                      "row %d", seen);
        batches++;
        dt_elem_free(e);
    }
    CHECK_MSG(seen == N && batches == 3, "%d rows in %d batches", seen, batches);
    dt_input_free(&in);

    const char *rows = "1,0.5,2\n0,0.25,4\n";
    test_write_file(test_path("t.csv"), rows, strlen(rows));
    snprintf(text, sizeof text, "csv:%s", test_path("t.csv"));
    CHECK_OK(dt_input_spec_parse(text, "--test-data", &s));
    o.label_column = "0";
    o.prefetch = 0;
    CHECK_OK(dt_input_open_test(&s, &o, &in));
    CHECK(in.shape[2] == 2 && in.test_images.n == 0 && strcmp(in.source, text) == 0);
    CHECK(in.test && dt_dataset_next(in.test, &e) == DT_OK && e->n == 2 && e->labels[1] == 0.0f &&
          e->dense[2] == 0.25f);
    if (in.test)
        dt_elem_free(e);
    dt_input_free(&in);
    test_write_file(test_path("empty.csv"), "", 0);
    snprintf(text, sizeof text, "csv:%s", test_path("empty.csv"));
    CHECK_OK(dt_input_spec_parse(text, "--test-data", &s));
    CHECK_ERR(dt_input_open_test(&s, &o, &in), DT_ERR_INVALID, "test_data: ");
    snprintf(text, sizeof text, "libsvm:%s", test_path("t.csv"));
    CHECK_OK(dt_input_spec_parse(text, "--test-data", &s));
    CHECK_ERR(dt_input_open_test(&s, &o, &in), DT_ERR_INVALID, "num_features: ");
}
