/* IDX reader: good files raw and gzip'd, and every kind of bad file, each with an error that
 * names the file and the offset. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "dtrain/idx.h"
#include "test.h"

static void write_gz(const char *path, const void *data, size_t n)
{
    gzFile f = gzopen(path, "wb");
    CHECK(f != NULL);
    CHECK(gzwrite(f, data, (unsigned)n) == (int)n);
    gzclose(f);
}

/* An IDX images file: n images of h x w with pixel values i + j, and its labels file. */
static size_t make_images(uint8_t *buf, uint32_t n, uint32_t h, uint32_t w)
{
    uint8_t head[16] = {0, 0, 8, 3};
    uint32_t dims[3] = {n, h, w};
    for (int d = 0; d < 3; d++)
        for (int b = 0; b < 4; b++)
            head[4 + 4 * d + b] = (uint8_t)(dims[d] >> (24 - 8 * b));
    memcpy(buf, head, 16);
    for (uint32_t i = 0; i < n * h * w; i++)
        buf[16 + i] = (uint8_t)(i % 251);
    return 16 + (size_t)n * h * w;
}

static size_t make_labels(uint8_t *buf, uint32_t n)
{
    uint8_t head[8] = {0, 0, 8, 1, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    memcpy(buf, head, 8);
    for (uint32_t i = 0; i < n; i++)
        buf[8 + i] = (uint8_t)(i % 10);
    return 8 + n;
}

TEST(idx_reads_raw_and_gzip)
{
    uint8_t img[16 + 5 * 4 * 3], lab[8 + 5];
    size_t ni = make_images(img, 5, 4, 3), nl = make_labels(lab, 5);
    test_write_file(test_path("im.idx"), img, ni);
    write_gz(test_path("im.idx.gz"), img, ni);
    test_write_file(test_path("lb.idx"), lab, nl);
    dt_idx a, b;
    CHECK_OK(dt_idx_read(test_path("im.idx"), &a));
    CHECK_OK(dt_idx_read(test_path("im.idx.gz"), &b));
    CHECK(a.n_dims == 3 && a.dims[0] == 5 && a.dims[1] == 4 && a.dims[2] == 3);
    CHECK(a.n_bytes == 60 && b.n_bytes == 60);
    CHECK(a.data && b.data && memcmp(a.data, img + 16, 60) == 0 && memcmp(b.data, img + 16, 60) == 0);
    dt_idx_free(&a);
    dt_idx_free(&b);
    dt_image_dataset ds;
    CHECK_OK(dt_image_dataset_load(test_path("im.idx.gz"), test_path("lb.idx"), &ds));
    CHECK(ds.n == 5 && ds.h == 4 && ds.w == 3 && ds.c == 1 && ds.n_classes == 5);
    CHECK(ds.labels && ds.labels[4] == 4);
    dt_image_dataset_free(&ds);
}

TEST(idx_missing_file_names_it)
{
    dt_idx a;
    CHECK_ERR(dt_idx_read(test_path("nope.idx"), &a), DT_ERR_IO, "nope.idx: No such file");
    CHECK_ERR(dt_idx_read(test_tmpdir(), &a), DT_ERR_IO, "is a directory");
}

TEST(idx_bad_magic_names_offset_0)
{
    uint8_t junk[32] = "PK\3\4 this is a zip, not an idx";
    test_write_file(test_path("junk.idx"), junk, sizeof junk);
    dt_idx a;
    CHECK_ERR(dt_idx_read(test_path("junk.idx"), &a), DT_ERR_FORMAT, "junk.idx: offset 0: bad magic");
    uint8_t floats[8] = {0, 0, 0x0d, 1, 0, 0, 0, 1}; /* dtype 0x0d: float, not supported */
    test_write_file(test_path("float.idx"), floats, 8);
    CHECK_ERR(dt_idx_read(test_path("float.idx"), &a), DT_ERR_FORMAT, "bad magic 0x00000d01");
}

TEST(idx_truncated_files_name_the_offset)
{
    uint8_t img[16 + 5 * 4 * 3];
    size_t n = make_images(img, 5, 4, 3);
    test_write_file(test_path("short.idx"), img, n - 7);
    dt_idx a;
    CHECK_ERR(dt_idx_read(test_path("short.idx"), &a), DT_ERR_FORMAT,
              "short.idx: offset 69: truncated: the header promises 60 data bytes, the file ends after 53");
    write_gz(test_path("short.idx.gz"), img, n - 7);
    CHECK_ERR(dt_idx_read(test_path("short.idx.gz"), &a), DT_ERR_FORMAT, "offset 69: truncated");
    test_write_file(test_path("head.idx"), img, 10);
    CHECK_ERR(dt_idx_read(test_path("head.idx"), &a), DT_ERR_FORMAT, "head.idx: offset 10: truncated in the header");
    test_write_file(test_path("empty.idx"), img, 0);
    CHECK_ERR(dt_idx_read(test_path("empty.idx"), &a), DT_ERR_FORMAT, "empty.idx: offset 0: truncated");
    /* A gzip stream cut short: zlib reports it, with the offset reached. */
    uint8_t gz[4096];
    write_gz(test_path("whole.gz"), img, n);
    FILE *f = fopen(test_path("whole.gz"), "rb");
    size_t gn = fread(gz, 1, sizeof gz, f);
    fclose(f);
    test_write_file(test_path("cut.gz"), gz, gn - 12);
    dt_status st = dt_idx_read(test_path("cut.gz"), &a);
    CHECK(st == DT_ERR_FORMAT);
    CHECK_MSG(strstr(dt_last_error(), "cut.gz: offset") != NULL, "message: %s", dt_last_error());
}

TEST(idx_trailing_bytes_and_absurd_sizes_are_errors)
{
    uint8_t img[16 + 5 * 4 * 3 + 3];
    size_t n = make_images(img, 5, 4, 3);
    img[n] = img[n + 1] = img[n + 2] = 1;
    test_write_file(test_path("long.idx"), img, n + 3);
    dt_idx a;
    CHECK_ERR(dt_idx_read(test_path("long.idx"), &a), DT_ERR_FORMAT, "long.idx: offset 76: trailing bytes");
    /* Dimensions whose product is 2^96 bytes: rejected from the header, before any allocation. */
    uint8_t huge[16] = {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    test_write_file(test_path("huge.idx"), huge, sizeof huge);
    CHECK_ERR(dt_idx_read(test_path("huge.idx"), &a), DT_ERR_FORMAT, "huge.idx: offset 8: dimensions describe more than");
    /* Claims 4 GB of data but holds none: a truncation error, not a 4 GB allocation. */
    uint8_t big[12] = {0, 0, 8, 2, 0, 1, 0, 0, 0, 1, 0, 0};
    test_write_file(test_path("big.idx"), big, sizeof big);
    CHECK_ERR(dt_idx_read(test_path("big.idx"), &a), DT_ERR_FORMAT, "big.idx: offset 12: truncated");
    uint8_t zero[12] = {0, 0, 8, 2, 0, 0, 0, 0, 0, 0, 0, 1};
    test_write_file(test_path("zero.idx"), zero, sizeof zero);
    CHECK_ERR(dt_idx_read(test_path("zero.idx"), &a), DT_ERR_FORMAT, "zero.idx: offset 4: dimension 0 is 0");
    uint8_t dims9[4] = {0, 0, 8, 9};
    test_write_file(test_path("dims9.idx"), dims9, 4);
    CHECK_ERR(dt_idx_read(test_path("dims9.idx"), &a), DT_ERR_FORMAT, "offset 3: 9 dimensions");
}

TEST(image_dataset_count_mismatch_names_both_files)
{
    uint8_t img[16 + 5 * 4 * 3], lab[8 + 6];
    test_write_file(test_path("m_im.idx"), img, make_images(img, 5, 4, 3));
    test_write_file(test_path("m_lb.idx"), lab, make_labels(lab, 6));
    dt_image_dataset ds;
    CHECK_ERR(dt_image_dataset_load(test_path("m_im.idx"), test_path("m_lb.idx"), &ds),
              DT_ERR_FORMAT, "m_im.idx has 5 images but");
    CHECK(strstr(dt_last_error(), "m_lb.idx has 6 labels") != NULL);
    /* Images and labels swapped: the labels file is 3-D. */
    test_write_file(test_path("m_lb5.idx"), lab, make_labels(lab, 5));
    CHECK_ERR(dt_image_dataset_load(test_path("m_lb5.idx"), test_path("m_im.idx"), &ds),
              DT_ERR_FORMAT, "images need 3 or 4 dimensions");
    CHECK(ds.images == NULL && ds.labels == NULL);
}
