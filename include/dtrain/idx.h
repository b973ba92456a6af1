/* IDX files (the MNIST format) and in-memory image datasets built from them.
 *
 * An IDX file is a big-endian u32 magic (0x00000800 | dtype << 8 | n_dims; dtrain reads dtype
 * 0x08, unsigned bytes), n_dims big-endian u32 sizes, then the data, row-major. Files may be
 * gzip-compressed (Fashion-MNIST ships as .gz). Images stay uint8 in memory (47 MB for
 * Fashion-MNIST's training set instead of 188 MB as float) and are scaled per batch. */
#ifndef DTRAIN_IDX_H
#define DTRAIN_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/api.h"
#include "dtrain/status.h"

#define DT_IDX_MAX_DIMS 4

typedef struct {
    uint8_t *data;
    int n_dims;
    uint32_t dims[DT_IDX_MAX_DIMS];
    size_t n_bytes; /* of data */
} dt_idx;

/* Reads a whole IDX file, raw or gzip. Errors name the file and the byte offset (of the
 * decompressed stream for .gz): missing file, bad magic, unsupported dtype, a size product beyond
 * 2^33 bytes, truncated data, trailing bytes (after a gzip stream's end zlib ignores them). The
 * buffer grows with the data read (from 1 MiB, doubling), so a header promising more than the
 * file holds costs no more than the file's size. */
DT_API dt_status dt_idx_read(const char *path, dt_idx *out);
DT_API void dt_idx_free(dt_idx *idx);

/* Images (N, H, W, C) uint8 with labels (N) in [0, n_classes). */
typedef struct {
    uint8_t *images;
    int32_t *labels;
    int n, h, w, c;
    int n_classes; /* max label + 1 */
    char images_path[512], labels_path[512];
} dt_image_dataset;

/* Pairs an images file ((N, H, W) or (N, H, W, C)) with a labels file ((N)); errors when the
 * counts differ, naming both files. */
DT_API dt_status dt_image_dataset_load(const char *images_path, const char *labels_path,
                                       dt_image_dataset *out);
DT_API void dt_image_dataset_free(dt_image_dataset *ds);

/* Fashion-MNIST (or MNIST) in dir under its standard names, train or t10k, .gz or not. */
DT_API dt_status dt_image_dataset_load_mnist_dir(const char *dir, int train, dt_image_dataset *out);

#endif
