/* File sources: globs, TFRecord interleaving, Example parsing with errors that name the file and
 * offset, skipping bad records, LibSVM and CSV files, and streams read once. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/crc32c.h"
#include "../src/core/mapview.h"
#include "dtrain/sources.h"
#include "test.h"

/* Writes n Examples {"x": [base + i, 2 (base + i)], "y": base + i} to path. */
static void write_examples(const char *path, int base, int n)
{
    dt_tfrecord_writer *w;
    CHECK_OK(dt_tfrecord_writer_open(path, DT_COMPRESSION_NONE, &w));
    uint8_t *buf = NULL;
    size_t len, cap = 0;
    for (int i = 0; i < n; i++) {
        float x[2] = {(float)(base + i), 2.0f * (float)(base + i)};
        int64_t y = base + i;
        dt_feature_value f[2] = {{"x", DT_FEATURE_FLOAT, 2, x, NULL, NULL},
                                 {"y", DT_FEATURE_INT64, 1, NULL, &y, NULL}};
        CHECK_OK(dt_example_encode(f, 2, &buf, &len, &cap));
        CHECK_OK(dt_tfrecord_write(w, buf, len));
    }
    free(buf);
    CHECK_OK(dt_tfrecord_writer_close(w));
}

static int read_labels(dt_dataset *ds, float *out, int cap, dt_status *end)
{
    int n = 0;
    for (;;) {
        dt_elem *e;
        dt_status st = dt_dataset_next(ds, &e);
        if (st) {
            *end = st;
            return n;
        }
        for (int r = 0; r < e->n && n < cap; r++)
            out[n++] = e->labels[r];
        dt_elem_free(e);
    }
}

TEST(sources_glob_interleave_and_parse_tfrecord_files)
{
    write_examples(test_path("part-0.tfrecord"), 0, 3);
    write_examples(test_path("part-1.tfrecord"), 100, 2);
    write_examples(test_path("part-2.tfrecord"), 200, 1);
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s/part-*.tfrecord", test_tmpdir());
    dt_file_list files;
    CHECK_OK(dt_file_list_glob(pattern, &files));
    CHECK(files.n == 3 && strstr(files.paths[1], "part-1"));
    dt_example_spec spec;
    CHECK_OK(dt_example_spec_parse("x:2", "y", &spec));
    dt_source_options o;
    dt_source_options_default(&o);
    o.num_parallel_reads = 2;
    dt_dataset *ds;
    CHECK_OK(dt_dataset_tfrecord(&files, &o, &ds));
    CHECK_OK(dt_dataset_parse_examples(ds, &spec, &files, 2, &o, &ds));
    float got[16];
    dt_status end;
    int n = read_labels(ds, got, 16, &end);
    /* Two files in turn, the third taking the place of the first to end. */
    float want[] = {0, 100, 1, 101, 2, 200};
    CHECK(end == DT_END && n == 6);
    for (int i = 0; i < n && i < 6; i++)
        CHECK_MSG(got[i] == want[i], "element %d: %g, expected %g", i, got[i], want[i]);
    /* A second iteration reads the files again. */
    CHECK_OK(dt_dataset_reset(ds));
    CHECK(read_labels(ds, got, 16, &end) == 6 && end == DT_END);
    dt_dataset_destroy(ds);
    /* Batch then map: one parse call per batch, the same values. */
    CHECK_OK(dt_dataset_tfrecord(&files, &o, &ds));
    CHECK_OK(dt_dataset_batch(ds, 4, false, &ds));
    CHECK_OK(dt_dataset_parse_examples(ds, &spec, &files, 1, &o, &ds));
    dt_elem *e;
    CHECK_OK(dt_dataset_next(ds, &e));
    CHECK(e && e->n == 4 && e->n_dense == 2 && e->dense[2] == 100.0f && e->dense[3] == 200.0f);
    dt_elem_free(e);
    dt_dataset_destroy(ds);
    dt_file_list_free(&files);
}

TEST(sources_empty_glob_and_missing_files_are_errors)
{
    dt_file_list files;
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s/nothing-*.tfrecord", test_tmpdir());
    CHECK_ERR(dt_file_list_glob(pattern, &files), DT_ERR_IO, "the pattern matches no file");
    snprintf(pattern, sizeof pattern, "%s/absent.tfrecord", test_tmpdir());
    CHECK_ERR(dt_file_list_glob(pattern, &files), DT_ERR_IO, "absent.tfrecord: No such file");
    CHECK_ERR(dt_file_list_glob(test_tmpdir(), &files), DT_ERR_IO, "is a directory");
}

TEST(sources_bad_records_name_file_and_offset_or_are_skipped)
{
    const char *path = test_path("bad.tfrecord");
    write_examples(path, 0, 3);
    /* Corrupt the second record's data: its CRC no longer matches. Records are 16 + len bytes. */
    FILE *f = fopen(path, "r+b");
    uint64_t len0;
    CHECK(fread(&len0, 8, 1, f) == 1);
    long second = (long)(16 + len0);
    fseek(f, second + 12 + 3, SEEK_SET);
    int c = fgetc(f);
    fseek(f, second + 12 + 3, SEEK_SET);
    fputc(c ^ 0xff, f);
    fclose(f);
    dt_file_list files;
    CHECK_OK(dt_file_list_glob(path, &files));
    dt_example_spec spec;
    CHECK_OK(dt_example_spec_parse("x:2", "y", &spec));
    dt_source_options o;
    dt_source_options_default(&o);
    dt_dataset *ds;
    CHECK_OK(dt_dataset_tfrecord(&files, &o, &ds));
    float got[8];
    dt_status end;
    char offset[64];
    snprintf(offset, sizeof offset, "offset %ld", second);
    CHECK(read_labels(ds, got, 8, &end) == 1 && end == DT_ERR_FORMAT);
    CHECK_MSG(strstr(dt_last_error(), "bad.tfrecord") && strstr(dt_last_error(), offset),
              "message: %s", dt_last_error());
    dt_dataset_destroy(ds);
    int64_t bad = 0;
    o.skip_bad_records = true;
    o.bad_records = &bad;
    CHECK_OK(dt_dataset_tfrecord(&files, &o, &ds));
    CHECK_OK(dt_dataset_parse_examples(ds, &spec, &files, 1, &o, &ds));
    CHECK(read_labels(ds, got, 8, &end) == 2 && end == DT_END);
    CHECK(got[0] == 0 && got[1] == 2 && bad == 1);
    dt_dataset_destroy(ds);
    /* An Example missing its label: the parse error names the file and the record's offset. */
    dt_example_spec other;
    CHECK_OK(dt_example_spec_parse("x:2", "z", &other));
    o.skip_bad_records = false;
    write_examples(test_path("good.tfrecord"), 0, 2);
    dt_file_list good;
    CHECK_OK(dt_file_list_glob(test_path("good.tfrecord"), &good));
    CHECK_OK(dt_dataset_tfrecord(&good, &o, &ds));
    CHECK_OK(dt_dataset_parse_examples(ds, &other, &good, 1, &o, &ds));
    CHECK(read_labels(ds, got, 8, &end) == 0 && end == DT_ERR_FORMAT);
    CHECK_MSG(strstr(dt_last_error(), "good.tfrecord: record at offset 0: ") &&
              strstr(dt_last_error(), "'z'"), "message: %s", dt_last_error());
    dt_dataset_destroy(ds);
    dt_file_list_free(&good);
    dt_file_list_free(&files);
}

TEST(sources_libsvm_and_csv_files)
{
    const char *svm = test_path("a.svm");
    FILE *f = fopen(svm, "w");
    fputs("1 1:0.5 3:2\n0 2:1.5\n\n1 1:1 2:2 3:3\n", f);
    fclose(f);
    dt_file_list files;
    CHECK_OK(dt_file_list_glob(svm, &files));
    dt_libsvm_options lo;
    dt_libsvm_options_default(&lo);
    lo.n_dense = 3;
    dt_source_options o;
    dt_source_options_default(&o);
    dt_dataset *ds;
    CHECK_OK(dt_dataset_libsvm(&files, &lo, &o, &ds));
    CHECK_OK(dt_dataset_batch(ds, 8, false, &ds));
    dt_elem *e;
    CHECK_OK(dt_dataset_next(ds, &e));
    CHECK(e && e->n == 3 && e->n_dense == 3);
    float want[9] = {0.5f, 0, 2, 0, 1.5f, 0, 1, 2, 3};
    for (int i = 0; e && i < 9; i++)
        CHECK(e->dense[i] == want[i]);
    CHECK(e && e->labels[0] == 1 && e->labels[1] == 0 && e->labels[2] == 1);
    dt_elem_free(e);
    dt_dataset_destroy(ds);
    /* A bad line: the file and the line in the message; skipped on request. */
    f = fopen(svm, "a");
    fputs("1 1:x\n0 3:1\n", f);
    fclose(f);
    CHECK_OK(dt_dataset_libsvm(&files, &lo, &o, &ds));
    float got[8];
    dt_status end;
    CHECK(read_labels(ds, got, 8, &end) == 3 && end == DT_ERR_FORMAT);
    CHECK_MSG(strstr(dt_last_error(), "a.svm: line 5, column"), "message: %s", dt_last_error());
    dt_dataset_destroy(ds);
    int64_t bad = 0;
    o.skip_bad_records = true, o.bad_records = &bad;
    CHECK_OK(dt_dataset_libsvm(&files, &lo, &o, &ds));
    CHECK(read_labels(ds, got, 8, &end) == 4 && end == DT_END && bad == 1);
    dt_dataset_destroy(ds);
    dt_file_list_free(&files);

    const char *csv = test_path("a.csv");
    f = fopen(csv, "w");
    fputs("\nf1,label,f2\n1.5,1,2\n3,0,4\n", f); /* a blank line before the header */
    fclose(f);
    CHECK_OK(dt_file_list_glob(csv, &files));
    dt_csv_options co;
    dt_csv_options_default(&co);
    co.header = true;
    dt_source_options_default(&o);
    CHECK_OK(dt_dataset_csv(&files, &co, "label", &o, &ds));
    CHECK_OK(dt_dataset_batch(ds, 8, false, &ds));
    CHECK_OK(dt_dataset_next(ds, &e));
    CHECK(e && e->n == 2 && e->n_dense == 2 && e->dense[0] == 1.5f && e->dense[1] == 2.0f &&
          e->dense[3] == 4.0f && e->labels[0] == 1.0f && e->labels[1] == 0.0f);
    dt_elem_free(e);
    dt_dataset_destroy(ds);
    dt_file_list_free(&files);
}

TEST(sources_read_a_stream_once)
{
    /* A FIFO stands for stdin or SageMaker's pipe: read once, never seeked. */
    const char *fifo = test_path("pipe.svm");
    CHECK(mkfifo(fifo, 0600) == 0);
    dt_file_list files;
    CHECK_OK(dt_file_list_glob(fifo, &files));
    dt_libsvm_options lo;
    dt_libsvm_options_default(&lo);
    dt_source_options o;
    dt_source_options_default(&o);
    dt_dataset *ds;
    CHECK_OK(dt_dataset_libsvm(&files, &lo, &o, &ds));
    /* Opening a FIFO for reading waits for a writer: a child process writes. */
    const char *text = "1 5:1\n0 7:2\n1 9:3";
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(fifo, O_WRONLY);
        ssize_t n = write(fd, text, strlen(text));
        _exit(n > 0 ? 0 : 1);
    }
    float got[8];
    dt_status end;
    CHECK(read_labels(ds, got, 8, &end) == 3 && end == DT_END);
    CHECK(got[0] == 1 && got[1] == 0 && got[2] == 1);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_OK(dt_dataset_reset(ds));
    dt_elem *e;
    CHECK_ERR(dt_dataset_next(ds, &e), DT_ERR_INVALID, "a stream is read once");
    dt_dataset_destroy(ds);
    dt_file_list_free(&files);
}

TEST(sources_review_regressions)
{
    /* tf.data's interleave order: A=[0], B=[100, 101], C=[200, 201], cycle 2 -> 0 100 101 200 201. */
    write_examples(test_path("il-a.tfrecord"), 0, 1);
    write_examples(test_path("il-b.tfrecord"), 100, 2);
    write_examples(test_path("il-c.tfrecord"), 200, 2);
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s/il-*.tfrecord", test_tmpdir());
    dt_file_list files;
    CHECK_OK(dt_file_list_glob(pattern, &files));
    dt_example_spec spec;
    CHECK_OK(dt_example_spec_parse("x:2", "y", &spec));
    dt_source_options o;
    dt_source_options_default(&o);
    o.num_parallel_reads = 2;
    dt_dataset *ds;
    CHECK_OK(dt_dataset_tfrecord(&files, &o, &ds));
    CHECK_OK(dt_dataset_parse_examples(ds, &spec, &files, 1, &o, &ds));
    float got[8];
    dt_status end;
    CHECK(read_labels(ds, got, 8, &end) == 5 && end == DT_END);
    float want[5] = {0, 100, 101, 200, 201};
    for (int i = 0; i < 5; i++)
        CHECK_MSG(got[i] == want[i], "element %d: %g, expected %g", i, got[i], want[i]);
    dt_dataset_destroy(ds);
    /* A batch whose records are all skipped is dropped, not passed on empty. */
    dt_example_spec wrong;
    CHECK_OK(dt_example_spec_parse("x:2", "missing_label", &wrong));
    int64_t bad = 0;
    o.skip_bad_records = true, o.bad_records = &bad, o.num_parallel_reads = 1;
    CHECK_OK(dt_dataset_tfrecord(&files, &o, &ds));
    CHECK_OK(dt_dataset_batch(ds, 2, false, &ds));
    CHECK_OK(dt_dataset_parse_examples(ds, &wrong, &files, 2, &o, &ds));
    CHECK(read_labels(ds, got, 8, &end) == 0 && end == DT_END && bad == 5);
    dt_dataset_destroy(ds);
    dt_file_list_free(&files);
    /* A CSV label named wrongly is a configuration error even with skipping, and a text source
     * stays at its end once there. */
    const char *csv = test_path("r.csv");
    test_write_file(csv, "a,b\n1,2\n", 8);
    CHECK_OK(dt_file_list_glob(csv, &files));
    dt_csv_options co;
    dt_csv_options_default(&co);
    co.header = true;
    CHECK_OK(dt_dataset_csv(&files, &co, "lable", &o, &ds));
    dt_elem *e;
    CHECK_ERR(dt_dataset_next(ds, &e), DT_ERR_INVALID, "no column is called 'lable'");
    dt_dataset_destroy(ds);
    CHECK_OK(dt_dataset_csv(&files, &co, "b", &o, &ds));
    CHECK(read_labels(ds, got, 8, &end) == 1 && end == DT_END && got[0] == 2.0f);
    CHECK(dt_dataset_next(ds, &e) == DT_END);
    dt_dataset_destroy(ds);
    dt_file_list_free(&files);
}

/* ---- the fused tfrecord -> batch -> parse stage against the three stages ---- */

/* Everything a pipeline gives, as text: each element's rows, values, index, file and offset,
 * then the final status, its message and the count of skipped records; over two iterations. */
static char *transcript(const dt_file_list *files, const dt_example_spec *spec, int64_t batch,
                        bool drop, int threads, bool skip, bool fuse, size_t range, bool *fused)
{
    size_t cap = 1 << 16, len = 0;
    char *t = malloc(cap);
    int64_t bad = 0;
    dt_source_options o;
    dt_source_options_default(&o);
    o.fuse = fuse, o.skip_bad_records = skip, o.bad_records = &bad, o.buffer_bytes = range;
    dt_dataset *ds;
    CHECK_OK(dt_dataset_tfrecord(files, &o, &ds));
    CHECK_OK(dt_dataset_batch(ds, batch, drop, &ds));
    CHECK_OK(dt_dataset_parse_examples(ds, spec, files, threads, &o, &ds));
    *fused = strcmp(ds->ops->name, "tfrecord_batches") == 0;
    for (int pass = 0; pass < 2; pass++) {
        for (;;) {
            dt_elem *e;
            dt_status st = dt_dataset_next(ds, &e);
            if (len + 4096 > cap)
                t = realloc(t, cap *= 2);
            if (st) {
                len += (size_t)snprintf(t + len, cap - len, "end %d '%s' bad %lld\n", st,
                                        st == DT_END ? "" : dt_last_error(), (long long)bad);
                break;
            }
            len += (size_t)snprintf(t + len, cap - len, "n %d index %llu file %u pos %llu:", e->n,
                                    (unsigned long long)e->index, e->file,
                                    (unsigned long long)e->pos);
            for (int r = 0; r < e->n; r++) {
                if (len + 4096 > cap)
                    t = realloc(t, cap *= 2);
                len += (size_t)snprintf(t + len, cap - len, " [%g", e->labels[r]);
                for (int k = 0; k < e->n_dense; k++)
                    len += (size_t)snprintf(t + len, cap - len, " %g", e->dense[(size_t)r *
                                                                              e->n_dense + k]);
                for (int64_t k = e->sp_row[r]; k < e->sp_row[r + 1]; k++)
                    len += (size_t)snprintf(t + len, cap - len, " %lld:%g",
                                            (long long)e->sp_ids[k], e->sp_vals[k]);
                len += (size_t)snprintf(t + len, cap - len, "]");
            }
            len += (size_t)snprintf(t + len, cap - len, "\n");
            dt_elem_free(e);
        }
        CHECK_OK(dt_dataset_reset(ds));
    }
    dt_dataset_destroy(ds);
    return t;
}

/* n Examples of CTR shape (a float, two int64s of every width, a label) from base; every
 * `odd`-th one (when odd > 0) lacks its label, so it does not parse. With decoys, each also holds
 * a bytes feature the spec does not name whose value looks like a TFRecord header (a length and
 * its masked CRC), as a TFRecord file kept inside an Example would: a reader that looks for
 * headers in the middle of a file finds these first. */
static void write_ctr_decoys(const char *path, int base, int n, int odd, bool decoys)
{
    dt_tfrecord_writer *w;
    CHECK_OK(dt_tfrecord_writer_open(path, DT_COMPRESSION_NONE, &w));
    uint8_t *buf = NULL;
    size_t len, cap = 0;
    for (int i = 0; i < n; i++) {
        float x = (float)(base + i) / 4.0f;
        int64_t a = (int64_t)((uint64_t)(base + i) * 0x9E3779B97F4A7C15ull >> (i % 64));
        int64_t b = i % 7 ? base + i : -(base + i), y = (base + i) % 2;
        uint8_t decoy[12] = {(uint8_t)(20 + i % 50)};
        uint32_t c = dt_crc32c_mask(dt_crc32c(decoy, 8));
        for (int k = 0; k < 4; k++)
            decoy[8 + k] = (uint8_t)(c >> (8 * k));
        dt_feature_value f[5];
        int nf = 0;
        f[nf++] = (dt_feature_value){"x", DT_FEATURE_FLOAT, 1, &x, NULL, NULL};
        f[nf++] = (dt_feature_value){"a", DT_FEATURE_INT64, 1, NULL, &a, NULL};
        if (decoys)
            f[nf++] = (dt_feature_value){"d", DT_FEATURE_BYTES, 12, NULL, NULL, decoy};
        f[nf++] = (dt_feature_value){"b", DT_FEATURE_INT64, 1, NULL, &b, NULL};
        f[nf++] = (dt_feature_value){"y", DT_FEATURE_INT64, 1, NULL, &y, NULL};
        CHECK_OK(dt_example_encode(f, odd > 0 && i % odd == odd - 1 ? nf - 1 : nf, &buf, &len,
                                   &cap));
        CHECK_OK(dt_tfrecord_write(w, buf, len));
    }
    free(buf);
    CHECK_OK(dt_tfrecord_writer_close(w));
}

static void write_ctr(const char *path, int base, int n, int odd)
{
    write_ctr_decoys(path, base, n, odd, false);
}

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static void flip_byte(const char *path, long at)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

/* The offset of record r of a TFRecord file, from the lengths in the headers before it. */
static long record_offset(const char *path, int r)
{
    FILE *f = fopen(path, "rb");
    long at = 0;
    for (int i = 0; f && i < r; i++) {
        uint64_t l;
        CHECK(fread(&l, 8, 1, f) == 1);
        at += 16 + (long)l;
        fseek(f, at, SEEK_SET);
    }
    if (f)
        fclose(f);
    return at;
}

TEST(sources_fused_tfrecord_batches_equal_the_three_stages)
{
    /* Files of 300, 0, 1, 400 and 150 records: batches span files, the layout meets every varint
     * width and negative values, and the last file's records hold decoy headers. */
    const char *names[] = {"fz-0.tfrecord", "fz-1.tfrecord", "fz-2.tfrecord", "fz-3.tfrecord",
                           "fz-4.tfrecord"};
    int counts[] = {300, 0, 1, 400, 150};
    for (int i = 0; i < 5; i++)
        write_ctr_decoys(test_path(names[i]), i * 10000, counts[i], 0, i == 4);
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s/fz-*.tfrecord", test_tmpdir());
    dt_file_list files;
    CHECK_OK(dt_file_list_glob(pattern, &files));
    /* Dense features only (a batch is built in its element), and with a variable-length one
     * (its entries go to the rows' sparse part, and batches through a row builder). */
    dt_example_spec dense, sparse;
    CHECK_OK(dt_example_spec_parse("x:1,a:1,b:1", "y", &dense));
    CHECK_OK(dt_example_spec_parse("x:1,a:0,b:1", "y", &sparse));
    /* Then broken: a data CRC (record 5 of file 3), a length CRC (file 0's record 200), a
     * truncated file (file 2); and on their own, records that do not parse (every 97th of file
     * 3, and the first record of a batch of 7 or 64). Each is read in ranges of 8 MiB (whole
     * files), of about a record (61 bytes) and of a few records (300 bytes), and in ranges of 13
     * bytes, most of which hold no record's start. */
    int64_t batches[] = {1, 7, 64, 4096};
    size_t ranges[] = {0, 61, 300, 13};
    for (int variant = 0; variant < 6; variant++) {
        if (variant == 1) {
            flip_byte(test_path(names[3]), record_offset(test_path(names[3]), 5) + 12 + 2);
        } else if (variant == 2) {
            flip_byte(test_path(names[0]), record_offset(test_path(names[0]), 200) + 9);
        } else if (variant == 3) {
            CHECK(truncate(test_path(names[2]), file_size(test_path(names[2])) - 3) == 0);
        } else if (variant == 4) {
            for (int i = 0; i < 3; i++)
                write_ctr(test_path(names[i]), i * 10000, counts[i], 0);
            write_ctr(test_path(names[3]), 30000, 400, 97);
        } else if (variant == 5) {
            write_ctr(test_path(names[3]), 30000, 400, 64 * 3 + 1 - 300 % 64);
        }
        for (int bi = 0; bi < 4; bi++)
            for (int ri = 0; ri < 4; ri++)
                for (int threads = 1; threads <= 2; threads++)
                    for (int mode = 0; mode < 8; mode++) {
                        /* Small ranges cost a mapping each: two threads, and fewer cases; the
                         * sparse spec differs only in how batches are built. */
                        if (ri > 0 && (threads == 1 || bi == 0 || bi == 3 || mode >= 4))
                            continue;
                        if (ri == 3 && (bi != 1 || mode == 1 || mode == 2))
                            continue;
                        bool drop = mode & 1, skip = mode & 2, fused_a, fused_b;
                        const dt_example_spec *spec = mode & 4 ? &sparse : &dense;
                        char *a = transcript(&files, spec, batches[bi], drop, threads, skip, true,
                                             ranges[ri], &fused_a);
                        char *b = transcript(&files, spec, batches[bi], drop, threads, skip,
                                             false, ranges[ri], &fused_b);
                        CHECK(fused_a && !fused_b);
                        size_t k = 0;
                        while (a[k] && a[k] == b[k])
                            k++;
                        CHECK_MSG(a[k] == b[k], "variant %d, batch %lld, range %zu, %d threads, "
                                  "drop %d, skip %d, sparse %d: fused and staged differ at byte "
                                  "%zu:\n  fused: %.200s\n  staged: %.200s", variant,
                                  (long long)batches[bi], ranges[ri], threads, drop, skip,
                                  mode >= 4, k,
                                  a + (k > 40 ? k - 40 : 0), b + (k > 40 ? k - 40 : 0));
                        free(a);
                        free(b);
                    }
    }
    dt_file_list_free(&files);
}

/* A file cut short while the fused stage reads it: the stage maps its ranges (or, without the
 * SIGBUS guard, reads them), and a read past the new end must give an error naming the file, not
 * a SIGBUS; the batches before it are whole. Run in this process, which has no guard, and in a
 * child that installs it. */
static void truncated_while_read(const char *path);

TEST(sources_fused_tfrecord_file_truncated_while_read_is_an_error)
{
    truncated_while_read(test_path("shrink.tfrecord"));
}

TEST(sources_fused_tfrecord_file_truncated_while_read_is_an_error_with_the_guard)
{
    const char *path = test_path("shrink_guarded.tfrecord");
    pid_t pid = fork();
    if (pid == 0) {
        int failed_before = dt_test_failures();
        if (dt_mapview_guard_install())
            _exit(2);
        truncated_while_read(path);
        _exit(dt_test_failures() == failed_before ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "guarded child status 0x%x", status);
}

static void truncated_while_read(const char *path)
{
    write_ctr(path, 0, 40000, 0);
    long size = file_size(path);
    dt_file_list files;
    CHECK_OK(dt_file_list_glob(path, &files));
    dt_example_spec spec;
    CHECK_OK(dt_example_spec_parse("x:1,a:1,b:1", "y", &spec));
    for (int threads = 1; threads <= 2; threads++) {
        write_ctr(path, 0, 40000, 0);
        dt_source_options o;
        dt_source_options_default(&o);
        o.buffer_bytes = 16 << 10;
        dt_dataset *ds;
        CHECK_OK(dt_dataset_tfrecord(&files, &o, &ds));
        CHECK_OK(dt_dataset_batch(ds, 64, false, &ds));
        CHECK_OK(dt_dataset_parse_examples(ds, &spec, &files, threads, &o, &ds));
        CHECK(strcmp(ds->ops->name, "tfrecord_batches") == 0);
        dt_elem *e;
        CHECK_OK(dt_dataset_next(ds, &e));
        dt_elem_free(e);
        /* The readers are at most a few ranges ahead: everything past half the file is
         * read after it is gone. */
        CHECK(truncate(path, size / 2 / 4096 * 4096) == 0);
        long rows = 64;
        dt_status st;
        while ((st = dt_dataset_next(ds, &e)) == DT_OK) {
            for (int r = 0; r < e->n; r++) /* label y = i % 2 of record i, in order */
                CHECK(e->labels[r] == (float)((e->index + (uint64_t)r) % 2));
            rows += e->n;
            dt_elem_free(e);
        }
        CHECK_MSG(st == DT_ERR_IO && strstr(dt_last_error(), path) &&
                  strstr(dt_last_error(), "truncated while"),
                  "%d threads: status %d: %s", threads, st, dt_last_error());
        CHECK(rows < 40000);
        dt_dataset_destroy(ds);
    }
    dt_file_list_free(&files);
}

/* A SIGBUS that is not a guarded view's goes to the handler that was there before the guard. */
static void exit_on_bus(int sig)
{
    (void)sig;
    _exit(7);
}

TEST(sources_mapview_guard_passes_other_faults_on)
{
    const char *path = test_path("other.bin");
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    for (int i = 0; f && i < 3 * 4096; i++)
        fputc(i, f);
    if (f)
        fclose(f);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGBUS, exit_on_bus);
        int fd = open(path, O_RDONLY);
        dt_mapview v;
        if (dt_mapview_guard_install() || fd < 0 || dt_mapview_open(fd, path, 0, 4096, &v))
            _exit(2);
        volatile const uint8_t *p = mmap(NULL, 3 * 4096, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED || truncate(path, 0) != 0)
            _exit(3);
        uint8_t x = p[2 * 4096]; /* past the end now: SIGBUS */
        _exit(x == 0 ? 4 : 5);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 7, "child status 0x%x", status);
}
