/* The image pipeline (see image_pipeline.h): indices shuffled and batched, then
 * each batch's images gathered and scaled to [0, 1]. */
#include "image_pipeline.h"

#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "dtrain/block.h"
#include "dtrain/rng.h"
#include "../core/prefetch.h"
#include "shuffle.h"

/* dst[k] = src[k] / 255 for the first pixels, 16 at a time; returns how many. IEEE division is
 * correctly rounded, so these are the table's values (the test checks every byte value). */
static size_t scale_pixels(const uint8_t *src, float *dst, size_t n)
{
    size_t k = 0;
#if defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128();
    const __m128 d = _mm_set1_ps(255.0f);
    for (; k + 16 <= n; k += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(src + k));
        __m128i lo = _mm_unpacklo_epi8(v, zero), hi = _mm_unpackhi_epi8(v, zero);
        __m128i q[4] = {_mm_unpacklo_epi16(lo, zero), _mm_unpackhi_epi16(lo, zero),
                        _mm_unpacklo_epi16(hi, zero), _mm_unpackhi_epi16(hi, zero)};
        for (int j = 0; j < 4; j++)
            _mm_storeu_ps(dst + k + 4 * j, _mm_div_ps(_mm_cvtepi32_ps(q[j]), d));
    }
#else
    (void)src, (void)dst, (void)n;
#endif
    return k;
}

void dt_gather_batch(const dt_image_dataset *ds, const uint32_t *idx, int B, float *x,
                     int32_t *labels)
{
    /* v / 255 for each byte value, computed by division so the floats equal the tutorial's
     * `tf.cast(x, tf.float32) / 255`. */
    static float scale[256];
    static int ready;
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        for (int v = 0; v < 256; v++)
            scale[v] = (float)v / 255.0f;
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    size_t item = (size_t)ds->h * ds->w * ds->c;
    /* The images lie at random in a file-sized array: each is asked for from memory two images
     * ahead of its turn, which halves the gather's time. */
    for (int b = 0; b < B && b < 2; b++)
        dt_prefetch_read(ds->images + (size_t)idx[b] * item, item);
    for (int b = 0; b < B; b++) {
        if (b + 2 < B)
            dt_prefetch_read(ds->images + (size_t)idx[b + 2] * item, item);
        const uint8_t *src = ds->images + (size_t)idx[b] * item;
        float *dst = x + (size_t)b * item;
        size_t k = scale_pixels(src, dst, item);
        for (; k < item; k++)
            dst[k] = scale[src[k]];
        labels[b] = ds->labels[idx[b]];
    }
}

/* ---- The image pipeline: indices, shuffled and batched, then gathered into pixels ---- */

/* range(0, n) -> shuffle(buffer, seed, reshuffle each iteration) -> batch -> the images of this
 * worker's block of each batch's rows (dt_block's split of the global batch), as one stage
 * over a plain array of indices. Its batches are those of the four datasets chained, in the same
 * order: the shuffle is the shuffle dataset's own algorithm (shuffle.h) over uint32 slots
 * (test_fit checks the batches), but an index costs no element of its
 * own: chained, each index was an allocation, a pointer chased in the shuffle buffer and a copy
 * into the batch, which made the pipeline several times dearer than the gather itself. */
typedef struct {
    const dt_image_dataset *ds;
    int n_slices, slice, batch_size;
    bool drop_remainder;
    bool shuffled;   /* a shuffle buffer above 1: otherwise file order */
    uint64_t seed;
    uint32_t *buf;   /* the shuffle buffer's slots (sb.slots): min(buffer size, examples) */
    dt_shuffle_buf sb;
    int64_t cap;
    int64_t next_id; /* the next index the buffer has not taken */
    bool filled, done;
    uint32_t *ids;   /* the batch's indices */
    int32_t *labels; /* its labels, as the gather returns them */
} image_batches;

/* The shuffle's next index: a random pick from the buffer, whose slot the next unread index
 * fills (tf.data's shuffle buffer); false once buffer and input are both empty. */
static bool next_index(image_batches *b, uint32_t *out)
{
    int64_t n = b->ds->n;
    if (!b->shuffled) {
        if (b->next_id >= n)
            return false;
        *out = (uint32_t)b->next_id++;
        return true;
    }
    if (!b->filled) {
        while (b->sb.count < b->cap && b->next_id < n)
            b->buf[b->sb.count++] = (uint32_t)b->next_id++;
        b->filled = true;
    }
    if (b->sb.count == 0)
        return false;
    uint32_t next = (uint32_t)b->next_id;
    bool more = b->next_id < n;
    if (more)
        b->next_id++;
    dt_shuffle_take(&b->sb, out, more ? &next : NULL);
    return true;
}

/* One batch of indices: batch_size of them, or the last ones short (unless dropped). */
static int next_batch_ids(image_batches *b)
{
    if (b->done)
        return 0;
    int got = 0;
    while (got < b->batch_size && next_index(b, &b->ids[got]))
        got++;
    if (got < b->batch_size) {
        b->done = true;
        if (b->drop_remainder)
            return 0;
    }
    return got;
}

/* The images of this pipeline's block of the next batch, scaled to [0, 1], with their class
 * labels. A block may be empty (a short last batch over many workers): the element then has no
 * rows, and the step still happens on every worker. */
static dt_status image_batches_next(dt_dataset *ds, dt_elem **out)
{
    image_batches *b = ds->state;
    int got = next_batch_ids(b);
    if (got == 0)
        return DT_END;
    size_t first, rows;
    dt_block((size_t)got, b->n_slices, b->slice, &first, &rows);
    int item = b->ds->h * b->ds->w * b->ds->c;
    dt_elem *e = dt_elem_alloc((int)rows, item, 0, 0);
    if (!e)
        return dt_error(DT_ERR_NOMEM, "no memory for a batch of %zu images", rows);
    dt_gather_batch(b->ds, b->ids + first, (int)rows, e->dense, b->labels);
    for (size_t r = 0; r < rows; r++)
        e->labels[r] = (float)b->labels[r];
    /* As the chained datasets number it: the batch's first index, plus the block's offset. */
    e->index = b->ids[0] + first;
    *out = e;
    return DT_OK;
}

/* Each iteration reshuffles: its own random stream, derived from the seed and the iteration. */
static void image_batches_seed(dt_dataset *ds)
{
    image_batches *b = ds->state;
    dt_shuffle_seed(&b->sb, b->seed, ds->iteration);
}

static dt_status image_batches_reset(dt_dataset *ds)
{
    image_batches *b = ds->state;
    b->sb.count = b->next_id = 0;
    b->filled = b->done = false;
    image_batches_seed(ds);
    return DT_OK;
}

static void image_batches_destroy(dt_dataset *ds)
{
    image_batches *b = ds->state;
    if (!b)
        return;
    free(b->buf);
    free(b->ids);
    free(b->labels);
    free(b);
}

static const dt_dataset_ops image_batches_ops = {"image_pipeline", image_batches_next,
                                                 image_batches_reset, image_batches_destroy};

dt_status dt_image_pipeline_sharded(const dt_image_dataset *ds, int batch_size,
                                    bool drop_remainder, int64_t shuffle_buffer, uint64_t seed,
                                    int prefetch, int n_workers, int worker, dt_dataset **out)
{
    *out = NULL;
    if (n_workers < 1 || worker < 0 || worker >= n_workers)
        return dt_error(DT_ERR_INVALID, "worker %d of %d", worker, n_workers);
    if (batch_size < 1 || batch_size > (1 << 24))
        return dt_error(DT_ERR_INVALID, "batch: size %d is not in 1..2^24", batch_size);
    image_batches *b = calloc(1, sizeof *b);
    if (!b)
        return dt_error(DT_ERR_NOMEM, "no memory for an image pipeline");
    *b = (image_batches){.ds = ds, .n_slices = n_workers, .slice = worker,
                         .batch_size = batch_size, .drop_remainder = drop_remainder,
                         .shuffled = shuffle_buffer > 1, .seed = seed,
                         .cap = shuffle_buffer < ds->n ? shuffle_buffer : ds->n};
    b->buf = b->shuffled ? malloc((size_t)(b->cap > 0 ? b->cap : 1) * sizeof *b->buf) : NULL;
    b->sb.slots = b->buf;
    b->sb.slot_bytes = sizeof *b->buf;
    b->ids = malloc((size_t)batch_size * sizeof *b->ids);
    b->labels = malloc((size_t)batch_size * sizeof *b->labels);
    dt_dataset *p = NULL;
    dt_status st;
    if ((b->shuffled && !b->buf) || !b->ids || !b->labels) {
        dt_dataset tmp = {.state = b};
        image_batches_destroy(&tmp);
        return dt_error(DT_ERR_NOMEM, "no memory for an image pipeline of batch %d", batch_size);
    }
    if ((st = dt_dataset_create(&image_batches_ops, NULL, b, &p)))
        return st;
    image_batches_seed(p);
    if (prefetch > 0 && (st = dt_dataset_prefetch(p, prefetch, &p)))
        return st;
    *out = p;
    return DT_OK;
}

dt_status dt_image_pipeline(const dt_image_dataset *ds, int batch_size, bool drop_remainder,
                            int64_t shuffle_buffer, uint64_t seed, int prefetch, dt_dataset **out)
{
    return dt_image_pipeline_sharded(ds, batch_size, drop_remainder, shuffle_buffer, seed,
                                     prefetch, 1, 0, out);
}
