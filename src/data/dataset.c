/* Datasets: sources and tf.data's transformations (see include/dtrain/dataset.h).
 *
 * Each dataset is a small state machine behind dt_dataset_ops; transformations pull from their
 * input on demand, so a pipeline holds only what its buffers (shuffle, prefetch, map's window,
 * cache) say it holds. */
#include "dtrain/dataset.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "../core/crc32c.h"
#include "../core/fileio.h"
#include "dtrain/rng.h"
#include "shuffle.h"

/* ---- Common ---- */

dt_status dt_dataset_next(dt_dataset *ds, dt_elem **out)
{
    *out = NULL;
    ds->started = true;
    return ds->ops->next(ds, out);
}

dt_status dt_dataset_reset(dt_dataset *ds)
{
    /* An iteration nobody has read from is already at its beginning: resetting it would only
     * throw away read-ahead work, and a stream could not be read again. */
    if (!ds->started)
        return DT_OK;
    ds->started = false;
    ds->iteration++;
    return ds->ops->reset(ds);
}

void dt_dataset_destroy(dt_dataset *ds)
{
    if (!ds)
        return;
    ds->ops->destroy(ds);
    dt_dataset_destroy(ds->input);
    free(ds);
}

dt_status dt_dataset_create(const dt_dataset_ops *ops, dt_dataset *input, void *state,
                            dt_dataset **out)
{
    *out = NULL;
    dt_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) {
        dt_dataset tmp = {.ops = ops, .state = state};
        if (state)
            ops->destroy(&tmp);
        dt_dataset_destroy(input);
        return dt_error(DT_ERR_NOMEM, "no memory for a %s dataset", ops->name);
    }
    ds->ops = ops;
    ds->input = input;
    ds->state = state;
    *out = ds;
    return DT_OK;
}

/* Allocates a transformation's state, or destroys the input and fails. */
static void *alloc_state(size_t n_bytes, dt_dataset *input, const char *what, dt_status *st)
{
    void *s = calloc(1, n_bytes);
    if (!s) {
        dt_dataset_destroy(input);
        *st = dt_error(DT_ERR_NOMEM, "no memory for a %s dataset", what);
    }
    return s;
}

static void free_state(dt_dataset *ds) { free(ds->state); }

static dt_status reset_input(dt_dataset *ds) { return dt_dataset_reset(ds->input); }

static dt_status nomem_elem(void) { return dt_error(DT_ERR_NOMEM, "no memory for an element"); }

/* Error messages are thread-local: what a worker thread raised is carried to the consumer. */
#define MSG_CAP 1024
typedef char dt_msg[MSG_CAP];

static void keep_message(dt_status st, dt_msg msg)
{
    if (st != DT_OK && st != DT_END)
        snprintf(msg, MSG_CAP, "%s", dt_last_error());
}

static dt_status raise_kept(dt_status st, const dt_msg msg)
{
    if (st != DT_OK && st != DT_END)
        dt_error(st, "%s", msg);
    return st;
}

/* ---- range ---- */

struct range_state {
    int64_t start, stop, step, cur;
    uint64_t pos;
};

static dt_status range_next(dt_dataset *ds, dt_elem **out)
{
    struct range_state *s = ds->state;
    if (s->step > 0 ? s->cur >= s->stop : s->cur <= s->stop)
        return DT_END;
    if (s->cur == (s->step > 0 ? INT64_MAX : INT64_MIN) && s->pos > 0 && s->stop != s->cur)
        return DT_END;
    dt_elem *e = dt_elem_alloc(1, 1, 1, 0);
    if (!e)
        return nomem_elem();
    e->dense[0] = (float)s->cur;
    e->labels[0] = (float)s->cur;
    /* Exact as an id too: floats hold integers exactly only up to 2^24. */
    e->sp_ids[0] = s->cur;
    e->sp_vals[0] = 1.0f;
    e->sp_row[1] = 1;
    e->index = s->pos++;
    /* Past INT64's end the range is over: saturate rather than overflow. */
    if (__builtin_add_overflow(s->cur, s->step, &s->cur))
        s->cur = s->step > 0 ? INT64_MAX : INT64_MIN;
    *out = e;
    return DT_OK;
}

static dt_status range_reset(dt_dataset *ds)
{
    struct range_state *s = ds->state;
    s->cur = s->start;
    s->pos = 0;
    return DT_OK;
}

static const dt_dataset_ops range_ops = {"range", range_next, range_reset, free_state};

dt_status dt_dataset_range(int64_t start, int64_t stop, int64_t step, dt_dataset **out)
{
    *out = NULL;
    if (step == 0)
        return dt_error(DT_ERR_INVALID, "range: step must not be 0");
    dt_status st = DT_OK;
    struct range_state *s = alloc_state(sizeof *s, NULL, "range", &st);
    if (!s)
        return st;
    s->start = s->cur = start, s->stop = stop, s->step = step;
    return dt_dataset_create(&range_ops, NULL, s, out);
}

/* ---- from_elems ---- */

struct slices_state {
    dt_elem *const *elems;
    int64_t n, i;
};

static dt_status slices_next(dt_dataset *ds, dt_elem **out)
{
    struct slices_state *s = ds->state;
    if (s->i >= s->n)
        return DT_END;
    dt_elem *e = dt_elem_clone(s->elems[s->i]);
    if (!e)
        return nomem_elem();
    e->index = (uint64_t)s->i++;
    *out = e;
    return DT_OK;
}

static dt_status slices_reset(dt_dataset *ds)
{
    ((struct slices_state *)ds->state)->i = 0;
    return DT_OK;
}

static const dt_dataset_ops slices_ops = {"from_elems", slices_next, slices_reset, free_state};

dt_status dt_dataset_from_elems(dt_elem *const *elems, int64_t n, dt_dataset **out)
{
    dt_status st = DT_OK;
    struct slices_state *s = alloc_state(sizeof *s, NULL, "from_elems", &st);
    if (!s)
        return st;
    s->elems = elems, s->n = n;
    return dt_dataset_create(&slices_ops, NULL, s, out);
}

/* ---- shard ---- */

struct shard_state {
    int64_t n, index, pos;
};

static dt_status shard_next(dt_dataset *ds, dt_elem **out)
{
    struct shard_state *s = ds->state;
    for (;;) {
        dt_elem *e;
        dt_status st = dt_dataset_next(ds->input, &e);
        if (st)
            return st;
        if (s->pos++ % s->n == s->index) {
            *out = e;
            return DT_OK;
        }
        dt_elem_free(e);
    }
}

static dt_status shard_reset(dt_dataset *ds)
{
    ((struct shard_state *)ds->state)->pos = 0;
    return reset_input(ds);
}

static const dt_dataset_ops shard_ops = {"shard", shard_next, shard_reset, free_state};

dt_status dt_dataset_shard(dt_dataset *input, int64_t num_shards, int64_t index, dt_dataset **out)
{
    *out = NULL;
    if (num_shards < 1 || index < 0 || index >= num_shards) {
        dt_dataset_destroy(input);
        return dt_error(DT_ERR_INVALID, "shard: index %lld is not in [0, %lld)", (long long)index,
                        (long long)num_shards);
    }
    dt_status st = DT_OK;
    struct shard_state *s = alloc_state(sizeof *s, input, "shard", &st);
    if (!s)
        return st;
    s->n = num_shards, s->index = index;
    return dt_dataset_create(&shard_ops, input, s, out);
}

/* ---- shuffle ---- */

struct shuffle_state {
    dt_elem **buf;     /* the shuffle buffer's slots (sb.slots) */
    dt_shuffle_buf sb;
    int64_t cap, allocated;
    bool filled, input_done, reshuffle;
    uint64_t seed;
};

static void shuffle_seed(dt_dataset *ds)
{
    struct shuffle_state *s = ds->state;
    /* One stream per iteration when reshuffling; the same stream every time otherwise. */
    dt_shuffle_seed(&s->sb, s->seed, s->reshuffle ? ds->iteration : 0);
}

static void shuffle_drop_buffer(struct shuffle_state *s)
{
    for (int64_t i = 0; i < s->sb.count; i++)
        dt_elem_free(s->buf[i]);
    s->sb.count = 0;
}

static dt_status shuffle_next(dt_dataset *ds, dt_elem **out)
{
    struct shuffle_state *s = ds->state;
    dt_status st;
    while (!s->filled && s->sb.count < s->cap) {
        dt_elem *e;
        st = dt_dataset_next(ds->input, &e);
        if (st == DT_END) {
            s->input_done = true;
            break;
        }
        if (st)
            return st;
        if (s->sb.count == s->allocated) {
            /* Grown as it fills, so a buffer larger than the dataset costs only the dataset. */
            int64_t grown = s->allocated ? 2 * s->allocated : 1024;
            if (grown > s->cap)
                grown = s->cap;
            dt_elem **b = realloc(s->buf, (size_t)grown * sizeof *b);
            if (!b) {
                dt_elem_free(e);
                return dt_error(DT_ERR_NOMEM, "shuffle: no memory for a buffer of %lld elements",
                                (long long)grown);
            }
            s->buf = b, s->sb.slots = b, s->allocated = grown;
        }
        s->buf[s->sb.count++] = e;
    }
    s->filled = true;
    if (s->sb.count == 0)
        return DT_END;
    /* The input's next element, which takes the picked one's slot (the draw does not depend on
     * it); an error ends the iteration with the buffer as it is, freed on reset. */
    dt_elem *next = NULL;
    if (!s->input_done) {
        st = dt_dataset_next(ds->input, &next);
        if (st == DT_END)
            s->input_done = true;
        else if (st)
            return st;
    }
    dt_shuffle_take(&s->sb, out, next ? &next : NULL);
    return DT_OK;
}

static dt_status shuffle_reset(dt_dataset *ds)
{
    struct shuffle_state *s = ds->state;
    shuffle_drop_buffer(s);
    s->filled = s->input_done = false;
    shuffle_seed(ds);
    return reset_input(ds);
}

static void shuffle_destroy(dt_dataset *ds)
{
    struct shuffle_state *s = ds->state;
    if (!s)
        return;
    shuffle_drop_buffer(s);
    free(s->buf);
    free(s);
}

static const dt_dataset_ops shuffle_ops = {"shuffle", shuffle_next, shuffle_reset, shuffle_destroy};

/* Shuffle buffers hold pointers; beyond this the buffer itself would not fit in memory. */
#define DT_MAX_SHUFFLE_BUFFER ((int64_t)1 << 32)

dt_status dt_dataset_shuffle(dt_dataset *input, int64_t buffer_size, uint64_t seed,
                             bool reshuffle_each_iteration, dt_dataset **out)
{
    *out = NULL;
    if (buffer_size < 1) {
        dt_dataset_destroy(input);
        return dt_error(DT_ERR_INVALID, "shuffle: buffer size %lld is below 1",
                        (long long)buffer_size);
    }
    /* The buffer grows only as it fills: a size beyond any dataset is a full shuffle. */
    if (buffer_size > DT_MAX_SHUFFLE_BUFFER)
        buffer_size = DT_MAX_SHUFFLE_BUFFER;
    dt_status st = DT_OK;
    struct shuffle_state *s = alloc_state(sizeof *s, input, "shuffle", &st);
    if (!s)
        return st;
    /* The buffer grows as it fills, so a buffer size beyond the dataset costs nothing. */
    s->cap = buffer_size;
    s->seed = seed;
    s->reshuffle = reshuffle_each_iteration;
    s->sb.slot_bytes = sizeof(dt_elem *);
    if ((st = dt_dataset_create(&shuffle_ops, input, s, out)))
        return st;
    shuffle_seed(*out);
    return DT_OK;
}

/* ---- batch ---- */

struct batch_state {
    int64_t size;
    bool drop;
    dt_rowbuf rows;
    bool rows_ready; /* rows initialised with the first element's n_dense */
    bool done;
};

static dt_status batch_next(dt_dataset *ds, dt_elem **out)
{
    struct batch_state *s = ds->state;
    if (s->done)
        return DT_END;
    int64_t got = 0;
    dt_status st = DT_OK;
    while (got < s->size) {
        dt_elem *e;
        st = dt_dataset_next(ds->input, &e);
        if (st)
            break;
        if (!s->rows_ready) {
            dt_rowbuf_init(&s->rows, e->n_dense);
            s->rows_ready = true;
        }
        st = dt_rowbuf_append_elem(&s->rows, e);
        dt_elem_free(e);
        if (st)
            return st;
        got++;
    }
    if (st && st != DT_END)
        return st;
    if (st == DT_END) {
        s->done = true;
        if (got == 0 || s->drop) {
            if (s->rows_ready)
                dt_rowbuf_clear(&s->rows);
            return DT_END;
        }
    }
    *out = dt_rowbuf_take(&s->rows);
    return *out ? DT_OK : nomem_elem();
}

static dt_status batch_reset(dt_dataset *ds)
{
    struct batch_state *s = ds->state;
    s->done = false;
    if (s->rows_ready)
        dt_rowbuf_clear(&s->rows);
    return reset_input(ds);
}

static void batch_destroy(dt_dataset *ds)
{
    struct batch_state *s = ds->state;
    if (!s)
        return;
    dt_rowbuf_free(&s->rows);
    free(s);
}

static const dt_dataset_ops batch_ops = {"batch", batch_next, batch_reset, batch_destroy};

dt_status dt_dataset_batch(dt_dataset *input, int64_t batch_size, bool drop_remainder,
                           dt_dataset **out)
{
    *out = NULL;
    if (batch_size < 1 || batch_size > (1 << 24)) {
        dt_dataset_destroy(input);
        return dt_error(DT_ERR_INVALID, "batch: size %lld is not in 1..2^24", (long long)batch_size);
    }
    dt_status st = DT_OK;
    struct batch_state *s = alloc_state(sizeof *s, input, "batch", &st);
    if (!s)
        return st;
    s->size = batch_size, s->drop = drop_remainder;
    return dt_dataset_create(&batch_ops, input, s, out);
}

bool dt_dataset_batch_params(const dt_dataset *ds, int64_t *batch_size, bool *drop_remainder)
{
    if (!ds || ds->ops != &batch_ops)
        return false;
    const struct batch_state *s = ds->state;
    *batch_size = s->size, *drop_remainder = s->drop;
    return true;
}

/* ---- map ---- */

struct map_state {
    dt_map_fn fn;
    void *ctx;
    int k;
    dt_pool *pool;
    dt_elem **in, **outs;
    dt_status *status;
    dt_msg *msgs;
    int n, next;      /* elements in the window, the next to hand out */
    dt_status tail;   /* what the input said after the window's elements (END or an error) */
    dt_msg tail_msg;
};

static void map_task(void *ctx, int task, int n_tasks)
{
    struct map_state *s = ctx;
    (void)n_tasks;
    if (task < s->n) {
        s->outs[task] = NULL;
        s->status[task] = s->fn(s->ctx, s->in[task], &s->outs[task]);
        keep_message(s->status[task], s->msgs[task]);
    }
}

static dt_status map_next(dt_dataset *ds, dt_elem **out)
{
    struct map_state *s = ds->state;
    for (;;) {
        if (s->next == s->n) {
            if (s->tail != DT_OK)
                return raise_kept(s->tail, s->tail_msg);
            s->n = s->next = 0;
            while (s->n < s->k) {
                dt_elem *e;
                dt_status st = dt_dataset_next(ds->input, &e);
                if (st) {
                    /* Kept now: the map calls below may set other messages on this thread. */
                    s->tail = st;
                    keep_message(st, s->tail_msg);
                    break;
                }
                s->in[s->n++] = e;
            }
            if (s->n == 0)
                return raise_kept(s->tail, s->tail_msg);
            dt_pool_run(s->n > 1 ? s->pool : NULL, map_task, s, s->n);
        }
        int i = s->next++;
        /* A function may drop an element: DT_OK with no output. */
        if (s->status[i] == DT_OK && !s->outs[i])
            continue;
        *out = s->outs[i];
        return raise_kept(s->status[i], s->msgs[i]);
    }
}

static void map_drop_window(struct map_state *s)
{
    for (int i = s->next; i < s->n; i++)
        dt_elem_free(s->outs[i]);
    s->n = s->next = 0;
    s->tail = DT_OK;
}

static dt_status map_reset(dt_dataset *ds)
{
    map_drop_window(ds->state);
    return reset_input(ds);
}

static void map_destroy(dt_dataset *ds)
{
    struct map_state *s = ds->state;
    if (!s)
        return;
    map_drop_window(s);
    dt_pool_destroy(s->pool);
    free(s->in), free(s->outs), free(s->status), free(s->msgs);
    free(s);
}

static const dt_dataset_ops map_ops = {"map", map_next, map_reset, map_destroy};

dt_status dt_dataset_map(dt_dataset *input, dt_map_fn fn, void *ctx, int num_parallel_calls,
                         dt_dataset **out)
{
    *out = NULL;
    if (num_parallel_calls < 1 || num_parallel_calls > 1024) {
        dt_dataset_destroy(input);
        return dt_error(DT_ERR_INVALID, "map: num_parallel_calls %d is not in 1..1024",
                        num_parallel_calls);
    }
    dt_status st = DT_OK;
    struct map_state *s = alloc_state(sizeof *s, input, "map", &st);
    if (!s)
        return st;
    s->fn = fn, s->ctx = ctx, s->k = num_parallel_calls;
    s->in = calloc((size_t)s->k, sizeof *s->in);
    s->outs = calloc((size_t)s->k, sizeof *s->outs);
    s->status = calloc((size_t)s->k, sizeof *s->status);
    s->msgs = calloc((size_t)s->k, sizeof *s->msgs);
    if (!s->in || !s->outs || !s->status || !s->msgs)
        st = dt_error(DT_ERR_NOMEM, "no memory for a map dataset");
    else if (s->k > 1)
        st = dt_pool_create(s->k, &s->pool);
    if (st) {
        dt_dataset tmp = {.ops = &map_ops, .state = s};
        map_destroy(&tmp);
        dt_dataset_destroy(input);
        return st;
    }
    return dt_dataset_create(&map_ops, input, s, out);
}

/* ---- cache ---- */

/* Cache file: "DTCACHE1", u32 version 1, then per element u64 length, u32 CRC32C of the payload,
 * payload: the element's fields and arrays as they are in memory (little-endian machines only). */
#define CACHE_MAGIC "DTCACHE1"
#define CACHE_VERSION 1u

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "cache files are little-endian");

struct cache_state {
    char *path;        /* NULL: memory */
    dt_file_replace replace; /* the file being written, renamed over path once whole */
    dt_elem **elems;   /* memory cache */
    int64_t n, cap, pos;
    bool complete;     /* a whole iteration is cached */
    FILE *file;        /* writing (first iteration) or reading */
    uint64_t file_off;
};

struct cache_header {
    int32_t n, n_dense;
    uint64_t nnz, n_bytes, index, pos;
    uint32_t file, pad;
};

static size_t elem_payload_bytes(const dt_elem *e)
{
    size_t rows = (size_t)e->n;
    return sizeof(struct cache_header) + rows * (size_t)e->n_dense * 4 + rows * 4 +
           (rows + 1) * 8 + e->nnz * 12 + (rows + 1) * 8 + e->n_bytes;
}

static dt_status cache_write_elem(struct cache_state *s, const dt_elem *e)
{
    size_t rows = (size_t)e->n, len = elem_payload_bytes(e);
    uint8_t *buf = malloc(len), *p = buf;
    if (!buf)
        return nomem_elem();
    struct cache_header h = {e->n, e->n_dense, e->nnz, e->n_bytes, e->index, e->pos, e->file, 0};
#define PUT(src, bytes) (memcpy(p, (src), (bytes)), p += (bytes))
    PUT(&h, sizeof h);
    PUT(e->dense, rows * (size_t)e->n_dense * 4);
    PUT(e->labels, rows * 4);
    PUT(e->sp_row, (rows + 1) * 8);
    PUT(e->sp_ids, e->nnz * 8);
    PUT(e->sp_vals, e->nnz * 4);
    for (size_t r = 0; r <= rows; r++) {
        uint64_t off = e->raw_off[r];
        PUT(&off, 8);
    }
    PUT(e->raw, e->n_bytes);
#undef PUT
    uint64_t len64 = len;
    uint32_t crc = dt_crc32c(buf, len);
    bool ok = fwrite(&len64, 8, 1, s->file) == 1 && fwrite(&crc, 4, 1, s->file) == 1 &&
              fwrite(buf, 1, len, s->file) == len;
    free(buf);
    if (!ok)
        return dt_error(DT_ERR_IO, "%s: write failed: %s", dt_file_replace_path(&s->replace),
                        strerror(errno));
    return DT_OK;
}

/* Reads the next element of the cache file; DT_END at its end. */
static dt_status cache_read_elem(struct cache_state *s, dt_elem **out)
{
    uint64_t len;
    uint32_t crc;
    size_t got = fread(&len, 1, 8, s->file);
    if (got == 0 && feof(s->file))
        return DT_END;
    if (got != 8 || fread(&crc, 4, 1, s->file) != 1)
        return dt_error(DT_ERR_FORMAT, "%s: offset %llu: truncated element header", s->path,
                        (unsigned long long)s->file_off);
    /* A cached element is at most what a batch can hold; a larger length is corruption. */
    if (len < sizeof(struct cache_header) || len > ((uint64_t)1 << 36))
        return dt_error(DT_ERR_FORMAT, "%s: offset %llu: element length %llu is impossible",
                        s->path, (unsigned long long)s->file_off, (unsigned long long)len);
    uint8_t *buf = malloc(len);
    if (!buf)
        return nomem_elem();
    dt_status st = DT_OK;
    if (fread(buf, 1, len, s->file) != len) {
        st = dt_error(DT_ERR_FORMAT, "%s: offset %llu: truncated element of %llu bytes", s->path,
                      (unsigned long long)s->file_off, (unsigned long long)len);
        goto fail;
    }
    if (dt_crc32c(buf, len) != crc) {
        st = dt_error(DT_ERR_FORMAT, "%s: offset %llu: element CRC mismatch", s->path,
                      (unsigned long long)s->file_off);
        goto fail;
    }
    struct cache_header h;
    memcpy(&h, buf, sizeof h);
    dt_elem probe = {.n = h.n, .n_dense = h.n_dense, .nnz = h.nnz, .n_bytes = h.n_bytes};
    /* Bounded first, so the size arithmetic below cannot wrap. */
    bool sane = h.n >= 0 && h.n_dense >= 0 && h.n <= (1 << 24) && h.n_dense <= (1 << 28) &&
                h.nnz <= len && h.n_bytes <= len;
    if (!sane || elem_payload_bytes(&probe) != len) {
        st = dt_error(DT_ERR_FORMAT, "%s: offset %llu: element sizes disagree with its length",
                      s->path, (unsigned long long)s->file_off);
        goto fail;
    }
    dt_elem *e = dt_elem_alloc(h.n, h.n_dense, h.nnz, h.n_bytes);
    if (!e) {
        st = nomem_elem();
        goto fail;
    }
    size_t rows = (size_t)h.n;
    const uint8_t *p = buf + sizeof h;
#define GET(dst, bytes) (memcpy((dst), p, (bytes)), p += (bytes))
    GET(e->dense, rows * (size_t)h.n_dense * 4);
    GET(e->labels, rows * 4);
    GET(e->sp_row, (rows + 1) * 8);
    GET(e->sp_ids, h.nnz * 8);
    GET(e->sp_vals, h.nnz * 4);
    for (size_t r = 0; r <= rows; r++) {
        uint64_t off;
        GET(&off, 8);
        e->raw_off[r] = (size_t)off;
    }
    GET(e->raw, h.n_bytes);
#undef GET
    e->index = h.index, e->pos = h.pos, e->file = h.file;
    /* Offsets must rise within their arrays, or later readers would index outside them. */
    for (size_t r = 0; r < rows; r++)
        if (e->sp_row[r] > e->sp_row[r + 1] || e->raw_off[r] > e->raw_off[r + 1])
            sane = false;
    if (!sane || e->sp_row[0] != 0 || (uint64_t)e->sp_row[rows] != h.nnz || e->raw_off[0] != 0 ||
        e->raw_off[rows] != h.n_bytes) {
        dt_elem_free(e);
        st = dt_error(DT_ERR_FORMAT, "%s: offset %llu: element offsets are inconsistent", s->path,
                      (unsigned long long)s->file_off);
        goto fail;
    }
    s->file_off += 12 + len;
    *out = e;
fail:
    free(buf);
    return st;
}

static dt_status cache_open_for_reading(struct cache_state *s)
{
    s->file = fopen(s->path, "rb");
    if (!s->file)
        return dt_error(DT_ERR_IO, "%s: %s", s->path, strerror(errno));
    char magic[8];
    uint32_t version;
    if (fread(magic, 1, 8, s->file) != 8 || memcmp(magic, CACHE_MAGIC, 8) != 0 ||
        fread(&version, 4, 1, s->file) != 1)
        return dt_error(DT_ERR_FORMAT, "%s: offset 0: not a dtrain cache file", s->path);
    if (version != CACHE_VERSION)
        return dt_error(DT_ERR_FORMAT, "%s: offset 8: cache version %u (this build reads %u)",
                        s->path, version, CACHE_VERSION);
    s->file_off = 12;
    return DT_OK;
}

static dt_status cache_open_for_writing(struct cache_state *s)
{
    dt_status st = dt_file_replace_begin(&s->replace, s->path, false);
    if (st)
        return st;
    s->file = fopen(dt_file_replace_path(&s->replace), "wb");
    uint32_t version = CACHE_VERSION;
    if (!s->file || fwrite(CACHE_MAGIC, 1, 8, s->file) != 8 || fwrite(&version, 4, 1, s->file) != 1)
        return dt_error(DT_ERR_IO, "%s: %s", dt_file_replace_path(&s->replace), strerror(errno));
    return DT_OK;
}

static dt_status cache_finish_file(struct cache_state *s)
{
    FILE *f = s->file;
    s->file = NULL;
    if (fclose(f) != 0) {
        dt_status st = dt_error(DT_ERR_IO, "%s: write failed: %s",
                                dt_file_replace_path(&s->replace), strerror(errno));
        dt_file_replace_abort(&s->replace);
        return st;
    }
    return dt_file_replace_commit(&s->replace);
}

static dt_status cache_next(dt_dataset *ds, dt_elem **out)
{
    struct cache_state *s = ds->state;
    if (s->complete) {
        if (s->path)
            return s->file ? cache_read_elem(s, out) : DT_END;
        if (s->pos >= s->n)
            return DT_END;
        *out = dt_elem_clone(s->elems[s->pos++]);
        return *out ? DT_OK : nomem_elem();
    }
    dt_elem *e;
    dt_status st = dt_dataset_next(ds->input, &e);
    if (st == DT_END) {
        /* The iteration is whole: from now on the cache answers (an empty input makes an empty
         * cache). Until the next reset, this iteration stays at its end. */
        if (s->path && !s->file && (st = cache_open_for_writing(s)))
            return st;
        if (s->path && (st = cache_finish_file(s)))
            return st;
        s->complete = true;
        s->pos = s->n;
        return DT_END;
    }
    if (st)
        return st;
    if (s->path) {
        if (!s->file && (st = cache_open_for_writing(s)))
            goto fail;
        if ((st = cache_write_elem(s, e)))
            goto fail;
    } else {
        if (s->n == s->cap) {
            int64_t cap = s->cap ? 2 * s->cap : 1024;
            dt_elem **grown = realloc(s->elems, (size_t)cap * sizeof *grown);
            if (!grown) {
                st = nomem_elem();
                goto fail;
            }
            s->elems = grown, s->cap = cap;
        }
        if (!(s->elems[s->n] = dt_elem_clone(e))) {
            st = nomem_elem();
            goto fail;
        }
        s->n++;
    }
    *out = e;
    return DT_OK;
fail:
    dt_elem_free(e);
    return st;
}

static void cache_discard_partial(struct cache_state *s)
{
    if (s->path) {
        if (s->file) {
            fclose(s->file);
            s->file = NULL;
        }
        if (!s->complete)
            dt_file_replace_abort(&s->replace);
    } else if (!s->complete) {
        for (int64_t i = 0; i < s->n; i++)
            dt_elem_free(s->elems[i]);
        s->n = 0;
    }
}

static dt_status cache_reset(dt_dataset *ds)
{
    struct cache_state *s = ds->state;
    /* TensorFlow's rule: a cache filled by a partial iteration is not used. */
    cache_discard_partial(s);
    s->pos = 0;
    if (s->complete)
        return s->path ? cache_open_for_reading(s) : DT_OK;
    return reset_input(ds);
}

static void cache_destroy(dt_dataset *ds)
{
    struct cache_state *s = ds->state;
    if (!s)
        return;
    cache_discard_partial(s);
    for (int64_t i = 0; i < s->n; i++)
        dt_elem_free(s->elems[i]);
    free(s->elems);
    free(s->path);
    free(s);
}

static const dt_dataset_ops cache_ops = {"cache", cache_next, cache_reset, cache_destroy};

dt_status dt_dataset_cache(dt_dataset *input, const char *path, dt_dataset **out)
{
    *out = NULL;
    dt_status st = DT_OK;
    struct cache_state *s = alloc_state(sizeof *s, input, "cache", &st);
    if (!s)
        return st;
    if (path) {
        size_t len = strlen(path);
        s->path = malloc(len + 1);
        if (!s->path) {
            st = dt_error(DT_ERR_NOMEM, "no memory for a cache dataset");
            goto fail;
        }
        memcpy(s->path, path, len + 1);
        if (access(path, F_OK) == 0) {
            /* A finished cache from an earlier run: read it, as TensorFlow does. */
            s->complete = true;
            if ((st = cache_open_for_reading(s)))
                goto fail;
        }
    }
    return dt_dataset_create(&cache_ops, input, s, out);
fail: {
    dt_dataset tmp = {.ops = &cache_ops, .state = s};
    cache_destroy(&tmp);
    dt_dataset_destroy(input);
    return st;
}
}

/* ---- repeat ---- */

struct repeat_state {
    int64_t count, done;
    bool produced; /* the current iteration of the input gave at least one element */
};

static dt_status repeat_next(dt_dataset *ds, dt_elem **out)
{
    struct repeat_state *s = ds->state;
    for (;;) {
        if (s->count >= 0 && s->done >= s->count)
            return DT_END;
        dt_status st = dt_dataset_next(ds->input, out);
        if (st == DT_OK) {
            s->produced = true;
            return DT_OK;
        }
        if (st != DT_END)
            return st;
        s->done++;
        /* An empty input repeated forever would spin: it ends instead, as in TensorFlow. */
        if (!s->produced)
            return DT_END;
        if (s->count >= 0 && s->done >= s->count)
            return DT_END;
        s->produced = false;
        if ((st = dt_dataset_reset(ds->input)))
            return st;
    }
}

static dt_status repeat_reset(dt_dataset *ds)
{
    struct repeat_state *s = ds->state;
    s->done = 0;
    s->produced = false;
    return reset_input(ds);
}

static const dt_dataset_ops repeat_ops = {"repeat", repeat_next, repeat_reset, free_state};

dt_status dt_dataset_repeat(dt_dataset *input, int64_t count, dt_dataset **out)
{
    dt_status st = DT_OK;
    struct repeat_state *s = alloc_state(sizeof *s, input, "repeat", &st);
    if (!s)
        return st;
    s->count = count < 0 ? -1 : count;
    return dt_dataset_create(&repeat_ops, input, s, out);
}

/* ---- take and skip ---- */

struct count_state {
    int64_t limit, seen;
};

static dt_status take_next(dt_dataset *ds, dt_elem **out)
{
    struct count_state *s = ds->state;
    if (s->seen >= s->limit)
        return DT_END;
    dt_status st = dt_dataset_next(ds->input, out);
    if (st == DT_OK)
        s->seen++;
    return st;
}

static dt_status skip_next(dt_dataset *ds, dt_elem **out)
{
    struct count_state *s = ds->state;
    while (s->seen < s->limit) {
        dt_elem *e;
        dt_status st = dt_dataset_next(ds->input, &e);
        if (st)
            return st;
        dt_elem_free(e);
        s->seen++;
    }
    return dt_dataset_next(ds->input, out);
}

static dt_status count_reset(dt_dataset *ds)
{
    ((struct count_state *)ds->state)->seen = 0;
    return reset_input(ds);
}

static const dt_dataset_ops take_ops = {"take", take_next, count_reset, free_state};
static const dt_dataset_ops skip_ops = {"skip", skip_next, count_reset, free_state};

static dt_status make_count(const dt_dataset_ops *ops, dt_dataset *input, int64_t count,
                            dt_dataset **out)
{
    dt_status st = DT_OK;
    struct count_state *s = alloc_state(sizeof *s, input, ops->name, &st);
    if (!s)
        return st;
    /* TensorFlow: take(-1) takes everything; skip(-1) skips everything. */
    s->limit = count < 0 ? INT64_MAX : count;
    return dt_dataset_create(ops, input, s, out);
}

dt_status dt_dataset_take(dt_dataset *input, int64_t count, dt_dataset **out)
{
    return make_count(&take_ops, input, count, out);
}

dt_status dt_dataset_skip(dt_dataset *input, int64_t count, dt_dataset **out)
{
    return make_count(&skip_ops, input, count, out);
}

/* ---- prefetch ---- */

/* The producer thread may be stuck in a read that never returns (a FIFO nobody writes, a hung
 * network file system). The consumer's wait has a deadline (watch.stall_secs), and a pipeline
 * destroyed while its producer is stuck is handed to that producer: the state and the input stay
 * alive until its read returns, and it frees them then (`abandoned`), so destroying never waits
 * for a read. */
struct prefetch_state {
    dt_dataset *input;   /* what the producer reads; not ds->input once abandoned */
    pthread_t thread;
    bool running;
    pthread_mutex_t mu;
    pthread_cond_t changed;
    dt_elem **queue;
    dt_status *status;
    int cap, head, count;
    bool stop, finished; /* finished: the producer queued END or an error and stopped */
    bool ended;          /* the consumer has seen END or an error */
    bool producing;      /* the producer is inside the input's next() */
    bool abandoned;      /* destroyed while producing: the producer frees everything */
    dt_status final;
    dt_msg msg;          /* the producer's error message */
    dt_prefetch_watch watch;
    char source[512];    /* watch.source, copied */
};

static void prefetch_free(struct prefetch_state *s);

static void *prefetch_main(void *arg)
{
    struct prefetch_state *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (s->count == s->cap && !s->stop)
            pthread_cond_wait(&s->changed, &s->mu);
        bool stop = s->stop;
        s->producing = !stop;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            return NULL;
        dt_elem *e = NULL;
        dt_status st = dt_dataset_next(s->input, &e);
        keep_message(st, s->msg);
        pthread_mutex_lock(&s->mu);
        s->producing = false;
        if (s->abandoned) {
            /* Nobody waits for this thread any more: it owns what is left. */
            pthread_mutex_unlock(&s->mu);
            dt_elem_free(e);
            dt_dataset_destroy(s->input);
            prefetch_free(s);
            return NULL;
        }
        int tail = (s->head + s->count) % s->cap;
        s->queue[tail] = e;
        s->status[tail] = st;
        s->count++;
        if (st != DT_OK)
            s->finished = true;
        pthread_cond_broadcast(&s->changed);
        pthread_mutex_unlock(&s->mu);
        if (st != DT_OK)
            return NULL;
    }
}

static dt_status prefetch_start(struct prefetch_state *s)
{
    s->stop = s->finished = s->ended = false;
    s->head = s->count = 0;
    if (pthread_create(&s->thread, NULL, prefetch_main, s) != 0)
        return dt_error(DT_ERR_IO, "prefetch: cannot start a thread");
    s->running = true;
    return DT_OK;
}

static void prefetch_stop(struct prefetch_state *s)
{
    if (s->running) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->changed);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        s->running = false;
    }
    for (int i = 0; i < s->count; i++)
        dt_elem_free(s->queue[(s->head + i) % s->cap]);
    s->count = 0;
}

/* The message of a stalled input: the file its source last opened, else the pipeline's name. */
static dt_status stalled(struct prefetch_state *s)
{
    const char *file = s->watch.reading ? __atomic_load_n(s->watch.reading, __ATOMIC_ACQUIRE)
                                        : NULL;
    dt_status st = dt_error(DT_ERR_IO, "%s: no data for %g s (input_timeout): the input has "
                            "stalled",
                            file ? file : s->source[0] ? s->source : "the input",
                            s->watch.stall_secs);
    keep_message(st, s->msg);
    return st;
}

/* A second more than the watch's deadline: a source that can wait with a deadline itself (a
 * FIFO, a pipe) reports its stall first, through the queue, and its producer ends and is joined;
 * the consumer's own deadline is for a read that never returns. */
#define STALL_MARGIN_SECS 1.0

/* Waits for an element; false when the watch's deadline passes first (under the lock). */
static bool wait_for_element(struct prefetch_state *s)
{
    if (s->watch.stall_secs <= 0) {
        while (s->count == 0)
            pthread_cond_wait(&s->changed, &s->mu);
        return true;
    }
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    double secs = s->watch.stall_secs + STALL_MARGIN_SECS;
    double whole = (double)(int64_t)secs;
    until.tv_sec += (time_t)whole;
    until.tv_nsec += (long)((secs - whole) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    while (s->count == 0)
        if (pthread_cond_timedwait(&s->changed, &s->mu, &until) == ETIMEDOUT && s->count == 0)
            return false;
    return true;
}

static dt_status prefetch_next(dt_dataset *ds, dt_elem **out)
{
    struct prefetch_state *s = ds->state;
    if (s->ended)
        return raise_kept(s->final, s->msg);
    pthread_mutex_lock(&s->mu);
    if (!wait_for_element(s)) {
        pthread_mutex_unlock(&s->mu);
        s->ended = true;
        s->final = stalled(s);
        return s->final;
    }
    *out = s->queue[s->head];
    dt_status st = s->status[s->head];
    s->head = (s->head + 1) % s->cap;
    s->count--;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->mu);
    if (st != DT_OK) {
        s->ended = true;
        s->final = st;
    }
    return raise_kept(st, s->msg);
}

/* Whether the producer is stuck in a read: then it is left to finish on its own. */
static bool prefetch_abandon(struct prefetch_state *s)
{
    if (!s->running)
        return false;
    pthread_mutex_lock(&s->mu);
    bool stuck = s->producing && s->ended && s->count == 0 && !s->finished;
    if (stuck) {
        s->abandoned = true;
        pthread_detach(s->thread);
    }
    pthread_mutex_unlock(&s->mu);
    return stuck;
}

static dt_status prefetch_reset(dt_dataset *ds)
{
    struct prefetch_state *s = ds->state;
    if (s->running && s->ended && s->final != DT_END && s->count == 0 && !s->finished) {
        /* A stalled input cannot be rewound: its producer may never come back. */
        return raise_kept(s->final, s->msg);
    }
    prefetch_stop(s);
    dt_status st = reset_input(ds);
    if (st == DT_OK)
        st = prefetch_start(s);
    if (st) {
        /* No producer runs: next() must report this, not wait for one. */
        s->ended = true;
        s->final = st;
        keep_message(st, s->msg);
    }
    return st;
}

static void prefetch_free(struct prefetch_state *s)
{
    for (int i = 0; i < s->count; i++)
        dt_elem_free(s->queue[(s->head + i) % s->cap]);
    pthread_cond_destroy(&s->changed);
    pthread_mutex_destroy(&s->mu);
    free(s->queue);
    free(s->status);
    free(s);
}

static void prefetch_destroy(dt_dataset *ds)
{
    struct prefetch_state *s = ds->state;
    if (!s)
        return;
    if (prefetch_abandon(s)) {
        ds->input = NULL; /* the producer destroys it when its read returns */
        return;
    }
    prefetch_stop(s);
    prefetch_free(s);
}

static const dt_dataset_ops prefetch_ops = {"prefetch", prefetch_next, prefetch_reset,
                                            prefetch_destroy};

dt_status dt_dataset_prefetch_watched(dt_dataset *input, int buffer_size,
                                      const dt_prefetch_watch *watch, dt_dataset **out)
{
    *out = NULL;
    if (buffer_size < 1 || buffer_size > 4096) {
        dt_dataset_destroy(input);
        return dt_error(DT_ERR_INVALID, "prefetch: buffer size %d is not in 1..4096", buffer_size);
    }
    dt_status st = DT_OK;
    struct prefetch_state *s = alloc_state(sizeof *s, input, "prefetch", &st);
    if (!s)
        return st;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines immune to clock steps */
    pthread_cond_init(&s->changed, &ca);
    pthread_condattr_destroy(&ca);
    if (watch) {
        s->watch = *watch;
        snprintf(s->source, sizeof s->source, "%s", watch->source ? watch->source : "");
    }
    s->input = input;
    s->cap = buffer_size;
    s->queue = calloc((size_t)buffer_size, sizeof *s->queue);
    s->status = calloc((size_t)buffer_size, sizeof *s->status);
    if (!s->queue || !s->status) {
        prefetch_free(s);
        dt_dataset_destroy(input);
        return dt_error(DT_ERR_NOMEM, "no memory for a prefetch dataset");
    }
    if ((st = dt_dataset_create(&prefetch_ops, input, s, out)))
        return st;
    if ((st = prefetch_start(s))) {
        dt_dataset_destroy(*out);
        *out = NULL;
    }
    return st;
}

dt_status dt_dataset_prefetch(dt_dataset *input, int buffer_size, dt_dataset **out)
{
    return dt_dataset_prefetch_watched(input, buffer_size, NULL, out);
}

/* ---- Distributed input ---- */

dt_status dt_autoshard_parse(const char *name, dt_autoshard_policy *out)
{
    static const char *const names[] = {"off", "auto", "file", "data"};
    for (int i = 0; i < 4; i++)
        if (strcasecmp(name, names[i]) == 0) {
            *out = (dt_autoshard_policy)i;
            return DT_OK;
        }
    return dt_error(DT_ERR_INVALID, "unknown auto-shard policy '%s' (off, auto, file, data)", name);
}

dt_autoshard_policy dt_autoshard_resolve(dt_autoshard_policy policy, int64_t n_files,
                                         int64_t num_workers, const char **reason)
{
    *reason = "";
    if (num_workers <= 1 || policy == DT_AUTOSHARD_OFF || policy == DT_AUTOSHARD_DATA)
        return num_workers <= 1 ? DT_AUTOSHARD_OFF : policy;
    if (n_files >= num_workers)
        return DT_AUTOSHARD_FILE;
    *reason = policy == DT_AUTOSHARD_FILE
                  ? "FILE sharding needs at least as many files as workers: sharding by DATA "
                    "instead (TensorFlow would stop with an error)"
                  : "fewer files than workers: sharding by DATA";
    return DT_AUTOSHARD_DATA;
}

dt_status dt_input_context_per_replica_batch(const dt_input_context *c, int64_t global_batch,
                                             int64_t *out)
{
    if (c->num_replicas_in_sync < 1)
        return dt_error(DT_ERR_INVALID, "input context: %d replicas in sync", c->num_replicas_in_sync);
    if (global_batch % c->num_replicas_in_sync != 0)
        return dt_error(DT_ERR_INVALID, "the global batch size %lld is not divisible by the %d "
                        "replicas in sync", (long long)global_batch, c->num_replicas_in_sync);
    *out = global_batch / c->num_replicas_in_sync;
    return DT_OK;
}
