/* IDX reader and image datasets (see include/dtrain/idx.h).
 *
 * Reading goes through zlib's gzread, which passes plain files through unchanged, so one path
 * serves raw and gzip'd files. The header is checked before anything is allocated, and the data
 * buffer grows with what is actually read, so a corrupt header claiming gigabytes costs nothing. */
#include "dtrain/idx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "../core/bytes.h"
/* 2^33 bytes: no IDX dataset dtrain reads comes near it. */
#define DT_IDX_MAX_BYTES ((size_t)1 << 33)


/* Reads up to n bytes; returns the count read, or -1 with the error set. */
static long read_some(gzFile f, const char *path, size_t offset, void *buf, size_t n)
{
    int got = gzread(f, buf, (unsigned)n);
    if (got < 0) {
        int zerr;
        const char *msg = gzerror(f, &zerr);
        dt_error(DT_ERR_FORMAT, "%s: offset %zu: %s", path, offset,
                 zerr == Z_ERRNO ? strerror(errno) : msg);
        return -1;
    }
    return got;
}

static dt_status read_header(gzFile f, const char *path, dt_idx *out, size_t *expected)
{
    uint8_t head[4 + 4 * DT_IDX_MAX_DIMS];
    long got = read_some(f, path, 0, head, 4);
    if (got < 0)
        return DT_ERR_FORMAT;
    if (got < 4)
        return dt_error(DT_ERR_FORMAT, "%s: offset %ld: truncated: the 4-byte magic number is "
                        "incomplete", path, got);
    uint32_t magic = dt_load_be32(head);
    if ((magic >> 16) != 0 || ((magic >> 8) & 0xff) != 0x08) {
        return dt_error(DT_ERR_FORMAT, "%s: offset 0: bad magic 0x%08x: not an IDX file of "
                        "unsigned bytes (expected 0x00000801 labels or 0x00000803 images)",
                        path, magic);
    }
    int n_dims = (int)(magic & 0xff);
    if (n_dims < 1 || n_dims > DT_IDX_MAX_DIMS)
        return dt_error(DT_ERR_FORMAT, "%s: offset 3: %d dimensions (1..%d supported)", path,
                        n_dims, DT_IDX_MAX_DIMS);
    got = read_some(f, path, 4, head + 4, 4u * (unsigned)n_dims);
    if (got < 0)
        return DT_ERR_FORMAT;
    if (got < 4 * n_dims)
        return dt_error(DT_ERR_FORMAT, "%s: offset %ld: truncated in the header (%d dimension "
                        "sizes expected)", path, 4 + got, n_dims);
    size_t total = 1;
    for (int d = 0; d < n_dims; d++) {
        uint32_t v = dt_load_be32(head + 4 + 4 * d);
        if (v == 0)
            return dt_error(DT_ERR_FORMAT, "%s: offset %d: dimension %d is 0", path, 4 + 4 * d, d);
        if (total > DT_IDX_MAX_BYTES / v)
            return dt_error(DT_ERR_FORMAT, "%s: offset %d: dimensions describe more than %zu bytes",
                            path, 4 + 4 * d, DT_IDX_MAX_BYTES);
        total *= v;
        out->dims[d] = v;
    }
    out->n_dims = n_dims;
    *expected = total;
    return DT_OK;
}

/* Reads exactly `expected` bytes of data after the header, growing the buffer as data arrives. */
static dt_status read_data(gzFile f, const char *path, size_t header_bytes, size_t expected,
                           dt_idx *out)
{
    size_t cap = expected < ((size_t)1 << 20) ? expected : ((size_t)1 << 20), have = 0;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return dt_error(DT_ERR_NOMEM, "%s: no memory for %zu bytes", path, cap);
    while (have < expected) {
        if (have == cap) {
            size_t grown = cap * 2 < expected ? cap * 2 : expected;
            uint8_t *nb = realloc(buf, grown);
            if (!nb) {
                free(buf);
                return dt_error(DT_ERR_NOMEM, "%s: no memory for %zu bytes", path, grown);
            }
            buf = nb, cap = grown;
        }
        size_t want = cap - have;
        if (want > (1u << 30))
            want = 1u << 30;
        long got = read_some(f, path, header_bytes + have, buf + have, want);
        if (got < 0) {
            free(buf);
            return DT_ERR_FORMAT;
        }
        if (got == 0) {
            free(buf);
            return dt_error(DT_ERR_FORMAT, "%s: offset %zu: truncated: the header promises %zu "
                            "data bytes, the file ends after %zu", path, header_bytes + have,
                            expected, have);
        }
        have += (size_t)got;
    }
    uint8_t extra;
    long got = read_some(f, path, header_bytes + have, &extra, 1);
    if (got != 0) {
        free(buf);
        if (got < 0)
            return DT_ERR_FORMAT;
        return dt_error(DT_ERR_FORMAT, "%s: offset %zu: trailing bytes after the %zu data bytes "
                        "the header describes", path, header_bytes + have, expected);
    }
    out->data = buf;
    out->n_bytes = expected;
    return DT_OK;
}

dt_status dt_idx_read(const char *path, dt_idx *out)
{
    memset(out, 0, sizeof *out);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return dt_error(DT_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return dt_error(DT_ERR_IO, "%s: is a directory, not an IDX file", path);
    gzFile f = gzopen(path, "rb");
    if (!f)
        return dt_error(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    gzbuffer(f, 1 << 17);
    size_t expected = 0;
    dt_status st = read_header(f, path, out, &expected);
    if (st == DT_OK)
        st = read_data(f, path, 4 + 4 * (size_t)out->n_dims, expected, out);
    gzclose(f);
    if (st)
        dt_idx_free(out);
    return st;
}

void dt_idx_free(dt_idx *idx)
{
    if (!idx)
        return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}

dt_status dt_image_dataset_load(const char *images_path, const char *labels_path,
                                dt_image_dataset *out)
{
    memset(out, 0, sizeof *out);
    dt_idx im = {0}, lb = {0};
    dt_status st = dt_idx_read(images_path, &im);
    if (st)
        goto fail;
    if ((st = dt_idx_read(labels_path, &lb)))
        goto fail;
    if (im.n_dims < 3) {
        st = dt_error(DT_ERR_FORMAT, "%s: offset 3: images need 3 or 4 dimensions (N, H, W[, C]), "
                      "the file has %d", images_path, im.n_dims);
        goto fail;
    }
    if (lb.n_dims != 1) {
        st = dt_error(DT_ERR_FORMAT, "%s: offset 3: labels need 1 dimension (N), the file has %d",
                      labels_path, lb.n_dims);
        goto fail;
    }
    if (im.dims[0] != lb.dims[0]) {
        st = dt_error(DT_ERR_FORMAT, "%s has %u images but %s has %u labels", images_path,
                      im.dims[0], labels_path, lb.dims[0]);
        goto fail;
    }
    if (im.dims[0] > (1u << 30)) {
        st = dt_error(DT_ERR_FORMAT, "%s: more than 2^30 images", images_path);
        goto fail;
    }
    /* Image sizes stay far within int, as the models' shapes do. */
    uint64_t pixels = (uint64_t)im.dims[1] * im.dims[2] * (im.n_dims == 4 ? im.dims[3] : 1);
    if (pixels > (1u << 28)) {
        st = dt_error(DT_ERR_FORMAT, "%s: offset 8: images of %llu values each, more than 2^28",
                      images_path, (unsigned long long)pixels);
        goto fail;
    }
    out->n = (int)im.dims[0];
    out->h = (int)im.dims[1];
    out->w = (int)im.dims[2];
    out->c = im.n_dims == 4 ? (int)im.dims[3] : 1;
    out->labels = malloc((size_t)out->n * sizeof *out->labels);
    if (!out->labels) {
        st = dt_error(DT_ERR_NOMEM, "%s: no memory for labels", labels_path);
        goto fail;
    }
    for (int i = 0; i < out->n; i++) {
        out->labels[i] = lb.data[i];
        if (out->labels[i] + 1 > out->n_classes)
            out->n_classes = out->labels[i] + 1;
    }
    out->images = im.data; /* taken */
    im.data = NULL;
    snprintf(out->images_path, sizeof out->images_path, "%s", images_path);
    snprintf(out->labels_path, sizeof out->labels_path, "%s", labels_path);
    dt_idx_free(&lb);
    return DT_OK;
fail:
    dt_idx_free(&im);
    dt_idx_free(&lb);
    dt_image_dataset_free(out);
    return st;
}

void dt_image_dataset_free(dt_image_dataset *ds)
{
    if (!ds)
        return;
    free(ds->images);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

static void pick_existing(char *buf, size_t cap, const char *dir, const char *base)
{
    struct stat sb;
    snprintf(buf, cap, "%s/%s.gz", dir, base);
    if (stat(buf, &sb) == 0)
        return;
    snprintf(buf, cap, "%s/%s", dir, base);
    if (stat(buf, &sb) == 0)
        return;
    snprintf(buf, cap, "%s/%s.gz", dir, base); /* report the usual name when neither exists */
}

dt_status dt_image_dataset_load_mnist_dir(const char *dir, int train, dt_image_dataset *out)
{
    char images[512], labels[512];
    const char *prefix = train ? "train" : "t10k";
    char base[64];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", prefix);
    pick_existing(images, sizeof images, dir, base);
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", prefix);
    pick_existing(labels, sizeof labels, dir, base);
    return dt_image_dataset_load(images, labels, out);
}
