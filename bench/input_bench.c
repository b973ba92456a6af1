/* Input pipeline benchmarks.
 *
 *   input_bench gen DIR SIZE_MB   writes DIR/ctr.tfrecord (CTR Examples: 13 float features
 *                                 I1..I13, 26 int64 features C1..C26 and an int64 label) and
 *                                 DIR/ctr.svm (the same rows as LibSVM, 39 features)
 *   input_bench read FILE THREADS [staged]
 *                                 reads, checks the CRCs of and parses every record of a TFRecord
 *                                 file through the pipeline (source -> batch 1024 -> parse with
 *                                 THREADS calls at once), which runs as one fused stage unless
 *                                 "staged" is given; prints records/s and MB/s
 *   input_bench libsvm FILE       parses a LibSVM file through its source; prints lines/s, MB/s
 *   input_bench libsvm-fields FILE F ROWS
 *                                 the same for CTR rows: F fields per line, ids below ROWS
 *   input_bench overhead STEPS    step time of the tutorial CNN fed by the image pipeline with
 *                                 prefetch, against the same batches already in memory
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../src/nn/gemm.h"
#include "../src/core/mapview.h"
#include "../src/core/clock.h"
#include "../src/data/image_pipeline.h"
#include "dtrain/fit.h"
#include "dtrain/model.h"
#include "dtrain/optim.h"
#include "dtrain/rng.h"
#include "dtrain/sources.h"

static int fail(const char *what)
{
    fprintf(stderr, "input_bench: %s: %s\n", what, dt_last_error());
    return 1;
}

static int gen(const char *dir, long size_mb)
{
    char tfr_path[4096], svm_path[4096];
    snprintf(tfr_path, sizeof tfr_path, "%s/ctr.tfrecord", dir);
    snprintf(svm_path, sizeof svm_path, "%s/ctr.svm", dir);
    dt_tfrecord_writer *w;
    if (dt_tfrecord_writer_open(tfr_path, DT_COMPRESSION_NONE, &w))
        return fail("open");
    FILE *svm = fopen(svm_path, "w");
    if (!svm)
        return fail(svm_path);
    char keys[40][8];
    dt_feature_value f[40];
    float floats[13];
    int64_t ints[26], label;
    for (int i = 0; i < 13; i++) {
        snprintf(keys[i], sizeof keys[i], "I%d", i + 1);
        f[i] = (dt_feature_value){keys[i], DT_FEATURE_FLOAT, 1, &floats[i], NULL, NULL};
    }
    for (int i = 0; i < 26; i++) {
        snprintf(keys[13 + i], sizeof keys[13 + i], "C%d", i + 1);
        f[13 + i] = (dt_feature_value){keys[13 + i], DT_FEATURE_INT64, 1, NULL, &ints[i], NULL};
    }
    f[39] = (dt_feature_value){"label", DT_FEATURE_INT64, 1, NULL, &label, NULL};
    dt_rng r;
    dt_rng_seed(&r, 1);
    uint8_t *buf = NULL;
    size_t len, cap = 0, total = 0, target = (size_t)size_mb << 20;
    long n = 0;
    while (total < target) {
        label = (int64_t)dt_rng_below(&r, 2);
        for (int i = 0; i < 13; i++)
            floats[i] = (float)dt_rng_below(&r, 10000) / 7.0f;
        for (int i = 0; i < 26; i++)
            ints[i] = (int64_t)(dt_rng_next(&r) >> 20);
        if (dt_example_encode(f, 40, &buf, &len, &cap) || dt_tfrecord_write(w, buf, len))
            return fail("write");
        total += len + 16;
        fprintf(svm, "%lld", (long long)label);
        for (int i = 0; i < 13; i++)
            fprintf(svm, " %d:%.6g", i + 1, floats[i]);
        for (int i = 0; i < 26; i++)
            fprintf(svm, " %d:%lld", 14 + i, (long long)(ints[i] % 1000000));
        fputc('\n', svm);
        n++;
    }
    free(buf);
    if (dt_tfrecord_writer_close(w) || fclose(svm) != 0)
        return fail("close");
    printf("wrote %ld records: %s (%.0f MB), %s\n", n, tfr_path, total / 1e6, svm_path);
    return 0;
}

static double file_mb(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (double)sb.st_size / 1e6 : 0.0;
}

/* Drains a dataset, counting rows. */
static int drain(dt_dataset *ds, long *rows)
{
    *rows = 0;
    for (;;) {
        dt_elem *e;
        dt_status st = dt_dataset_next(ds, &e);
        if (st == DT_END)
            return 0;
        if (st)
            return fail("next");
        *rows += e->n;
        dt_elem_free(e);
    }
}

static int read_tfrecord(const char *path, int threads, bool fuse)
{
    dt_file_list files;
    dt_example_spec spec;
    char features[1024] = "";
    for (int i = 0; i < 13; i++)
        snprintf(features + strlen(features), sizeof features - strlen(features), "%sI%d:1",
                 i ? "," : "", i + 1);
    for (int i = 0; i < 26; i++)
        snprintf(features + strlen(features), sizeof features - strlen(features), ",C%d:1", i + 1);
    if (dt_file_list_glob(path, &files) || dt_example_spec_parse(features, "label", &spec))
        return fail("setup");
    dt_source_options o;
    dt_source_options_default(&o);
    o.fuse = fuse;
    dt_dataset *ds;
    if (dt_dataset_tfrecord(&files, &o, &ds) || dt_dataset_batch(ds, 1024, false, &ds) ||
        dt_dataset_parse_examples(ds, &spec, &files, threads, &o, &ds))
        return fail("pipeline");
    /* Best of 5 passes, as the cat figure is. */
    double dt = 1e30;
    long rows = 0;
    for (int pass = 0; pass < 5; pass++) {
        double t0 = dt_clock_now();
        if (drain(ds, &rows))
            return 1;
        double t = dt_clock_now() - t0;
        dt = t < dt ? t : dt;
        if (dt_dataset_reset(ds))
            return fail("reset");
    }
    printf("tfrecord read+crc+parse, %d thread%s%s: %ld records in %.2f s: %.0f records/s, "
           "%.0f MB/s (best of 5)\n", threads, threads == 1 ? "" : "s", fuse ? "" : " (staged, unfused)",
           rows, dt, rows / dt, file_mb(path) / dt);
    dt_dataset_destroy(ds);
    dt_file_list_free(&files);
    return 0;
}

/* fields 0: dense rows of 39 features; else CTR rows of that many fields (ids from 0, below
 * max_id), as `dtrain train --field-size F --feature-size N` reads them. */
static int read_libsvm(const char *path, int fields, long max_id)
{
    dt_file_list files;
    if (dt_file_list_glob(path, &files))
        return fail("glob");
    dt_libsvm_options lo;
    dt_libsvm_options_default(&lo);
    if (fields > 0) {
        lo.field_size = fields;
        lo.index_base = 0;
        lo.max_id = max_id;
    } else {
        lo.n_dense = 39;
    }
    dt_source_options o;
    dt_source_options_default(&o);
    dt_dataset *ds;
    if (dt_dataset_libsvm(&files, &lo, &o, &ds))
        return fail("libsvm");
    double t0 = dt_clock_now();
    long rows;
    if (drain(ds, &rows))
        return 1;
    double dt = dt_clock_now() - t0;
    printf("libsvm parse%s, 1 thread: %ld lines in %.2f s: %.0f lines/s, %.0f MB/s\n",
           fields > 0 ? " (CTR fields)" : "", rows, dt, rows / dt, file_mb(path) / dt);
    dt_dataset_destroy(ds);
    dt_file_list_free(&files);
    return 0;
}

/* Trains the tutorial CNN for steps batches from ds; returns seconds per step. */
static double train_steps(dt_dataset *ds, long steps, dt_model *m, dt_optim *o)
{
    dt_fit_config c;
    dt_fit_config_default(&c);
    c.max_steps = steps;
    c.epochs = 1000;
    dt_fit_result r;
    if (dt_fit_dataset(m, o, NULL, ds, NULL, &c, &r)) {
        fail("fit");
        return -1.0;
    }
    return r.train_seconds / (double)r.steps;
}

static int overhead(long steps)
{
    dt_image_dataset train;
    if (dt_image_dataset_load_mnist_dir("/usr/share/datasets/fashion-mnist", 1, &train))
        return fail("dataset");
    dt_model_spec spec;
    dt_model *m;
    dt_model_spec_builtin("mnist_cnn", &spec);
    spec.input_shape[0] = 28, spec.input_shape[1] = 28, spec.input_shape[2] = 1;
    if (dt_model_create(&spec, 64, NULL, NULL, &m))
        return fail("model");
    dt_optim_config oc;
    dt_optim_config_default(&oc, DT_OPT_ADAM);
    /* The same batches, gathered once into memory ahead of time. */
    dt_dataset *p;
    if (dt_image_pipeline(&train, 64, true, INT64_MAX, 1, 0, &p))
        return fail("pipeline");
    dt_elem **batches = calloc((size_t)steps, sizeof *batches);
    for (long i = 0; i < steps; i++)
        if (dt_dataset_next(p, &batches[i]))
            return fail("gather");
    dt_dataset_destroy(p);
    double best_mem = 1e9, best_pipe = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        dt_optim o;
        dt_dataset *mem, *pipe;
        dt_optim_init(&o);
        dt_model_init_params(m, 1);
        dt_optim_setup(&o, &oc, dt_model_params(m));
        if (dt_dataset_from_elems(batches, steps, &mem))
            return fail("from_elems");
        double t_mem = train_steps(mem, steps, m, &o);
        dt_dataset_destroy(mem);
        dt_optim_free(&o);
        dt_optim_init(&o);
        dt_model_init_params(m, 1);
        dt_optim_setup(&o, &oc, dt_model_params(m));
        if (dt_image_pipeline(&train, 64, true, INT64_MAX, 1, 2, &pipe))
            return fail("pipeline");
        double t_pipe = train_steps(pipe, steps, m, &o);
        dt_dataset_destroy(pipe);
        dt_optim_free(&o);
        if (t_mem < 0 || t_pipe < 0)
            return 1;
        best_mem = t_mem < best_mem ? t_mem : best_mem;
        best_pipe = t_pipe < best_pipe ? t_pipe : best_pipe;
    }
    printf("tutorial CNN, batch 64, 1 thread, best of 3: %.3f ms/step from batches in memory, "
           "%.3f ms/step from the pipeline with prefetch 2: %+.1f%%\n",
           best_mem * 1e3, best_pipe * 1e3, (best_pipe / best_mem - 1.0) * 100.0);
    for (long i = 0; i < steps; i++)
        dt_elem_free(batches[i]);
    free(batches);
    dt_model_destroy(m);
    dt_image_dataset_free(&train);
    return 0;
}

int main(int argc, char **argv)
{
    mallopt(M_MMAP_THRESHOLD, 16 << 20); /* as the dtrain command sets them */
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    dt_gemm_setup();
    dt_mapview_guard_install();
    if (argc == 4 && strcmp(argv[1], "gen") == 0)
        return gen(argv[2], atol(argv[3]));
    if ((argc == 4 || (argc == 5 && strcmp(argv[4], "staged") == 0)) &&
        strcmp(argv[1], "read") == 0)
        return read_tfrecord(argv[2], atoi(argv[3]), argc == 4);
    if (argc == 3 && strcmp(argv[1], "libsvm") == 0)
        return read_libsvm(argv[2], 0, 0);
    if (argc == 5 && strcmp(argv[1], "libsvm-fields") == 0 && atoi(argv[3]) > 0 &&
        atol(argv[4]) > 0)
        return read_libsvm(argv[2], atoi(argv[3]), atol(argv[4]));
    if (argc == 3 && strcmp(argv[1], "overhead") == 0)
        return overhead(atol(argv[2]));
    fprintf(stderr, "usage: input_bench gen DIR SIZE_MB | read FILE THREADS [staged] | "
                    "libsvm FILE | libsvm-fields FILE F ROWS | overhead STEPS\n");
    return 2;
}
