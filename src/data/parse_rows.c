/* Raw records parsed after batching by a row parser (sources.h): the stage that lets a feature
 * spec read lines of text and tf.Example records on several threads, a batch per call, with
 * errors naming the file and line (the line's prefix says where it came from, whatever shuffle
 * did to the order) or the record. Each call takes a row builder and a parser scratch from a
 * small free list, so that threads never share either and nothing is allocated per batch. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/sources.h"
#include "sources_int.h"

#define MAX_FREE 64

struct rows_ctx {
    dt_row_parser p;            /* a copy: its ctx is the caller's, borrowed */
    bool lines;
    const dt_text_header *header;
    const dt_file_list *files;
    dt_source_options o;
    pthread_mutex_t mu;
    dt_rowbuf *bufs[MAX_FREE];
    void *scratch[MAX_FREE];
    int n_free;
};

/* A builder and a scratch for one call; false without memory. */
static bool acquire(struct rows_ctx *c, dt_rowbuf **b, void **scratch)
{
    *b = NULL, *scratch = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->n_free > 0) {
        c->n_free--;
        *b = c->bufs[c->n_free];
        *scratch = c->scratch[c->n_free];
    }
    pthread_mutex_unlock(&c->mu);
    if (*b)
        return true;
    if ((*b = malloc(sizeof **b)))
        dt_rowbuf_init(*b, c->p.n_dense);
    *scratch = *b ? c->p.scratch_new(c->p.ctx) : NULL;
    if (*scratch)
        return true;
    if (*b) {
        dt_rowbuf_free(*b);
        free(*b);
    }
    *b = NULL;
    return false;
}

static void release(struct rows_ctx *c, dt_rowbuf *b, void *scratch)
{
    dt_rowbuf_clear(b);
    pthread_mutex_lock(&c->mu);
    if (c->n_free < MAX_FREE) {
        c->bufs[c->n_free] = b;
        c->scratch[c->n_free] = scratch;
        c->n_free++;
        b = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    if (b) {
        dt_rowbuf_free(b);
        free(b);
        c->p.scratch_free(c->p.ctx, scratch);
    }
}

/* Names the record r of `in` that failed. */
static dt_status name_record(const struct rows_ctx *c, const dt_elem *in, int r, const uint8_t *rec,
                             dt_status st)
{
    if (c->lines) {
        uint32_t file;
        uint64_t line;
        memcpy(&file, rec, 4);
        memcpy(&line, rec + 4, 8);
        return dt_error_prefix(st, "%s: line %llu", dt_src_name_of(c->files, file),
                               (unsigned long long)line);
    }
    if (r == 0)
        return dt_error_prefix(st, "%s: record at offset %llu", dt_src_name_of(c->files, in->file),
                               (unsigned long long)in->pos);
    return dt_error_prefix(st, "%s: record %d of the batch starting at offset %llu",
                           dt_src_name_of(c->files, in->file), r, (unsigned long long)in->pos);
}

static dt_status rows_fn(void *ctx, dt_elem *in, dt_elem **out)
{
    struct rows_ctx *c = ctx;
    dt_rowbuf *b;
    void *scratch;
    dt_status st = DT_OK;
    if (!acquire(c, &b, &scratch)) {
        dt_elem_free(in);
        return dt_error(DT_ERR_NOMEM, "no memory to parse records");
    }
    b->index = in->index, b->file = in->file, b->pos = in->pos;
    const dt_text_header *h = c->header && c->header->set ? c->header : NULL;
    size_t skip = c->lines ? DT_TEXT_LINE_PREFIX : 0;
    for (int r = 0; r < in->n; r++) {
        const uint8_t *rec = in->raw + in->raw_off[r];
        size_t n = in->raw_off[r + 1] - in->raw_off[r];
        if (n < skip) { /* only a bug could make a line without its prefix */
            st = dt_error(DT_ERR_INVALID, "a raw line of %zu bytes has no place prefix", n);
            break;
        }
        st = c->lines ? c->p.parse_line(c->p.ctx, scratch, h, (const char *)rec + skip,
                                         n - skip, b)
                      : c->p.parse_record(c->p.ctx, scratch, rec, n, b);
        if (st == DT_END) {
            st = DT_OK;
            continue;
        }
        if (st == DT_ERR_FORMAT && c->o.skip_bad_records) {
            dt_src_count_bad(&c->o);
            st = DT_OK;
            continue;
        }
        if (st) {
            if (st != DT_ERR_NOMEM)
                name_record(c, in, r, rec, st);
            break;
        }
    }
    /* A batch whose records were all skipped is dropped rather than passed on empty. */
    if (st == DT_OK && b->n > 0 && !(*out = dt_rowbuf_take(b)))
        st = dt_error(DT_ERR_NOMEM, "no memory for parsed rows");
    release(c, b, scratch);
    dt_elem_free(in);
    return st;
}

/* The map's context lives as long as the dataset: this pass-through stage owns it. */
static dt_status owner_next(dt_dataset *ds, dt_elem **out) { return dt_dataset_next(ds->input, out); }
static dt_status owner_reset(dt_dataset *ds) { return dt_dataset_reset(ds->input); }

static void owner_destroy(dt_dataset *ds)
{
    struct rows_ctx *c = ds->state;
    if (!c)
        return;
    /* The map must stop before its context goes. */
    dt_dataset_destroy(ds->input);
    ds->input = NULL;
    for (int i = 0; i < c->n_free; i++) {
        dt_rowbuf_free(c->bufs[i]);
        free(c->bufs[i]);
        c->p.scratch_free(c->p.ctx, c->scratch[i]);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static const dt_dataset_ops owner_ops = {"parse_rows", owner_next, owner_reset, owner_destroy};

dt_status dt_dataset_parse_rows(dt_dataset *input, const dt_row_parser *p, bool lines,
                                const dt_text_header *header, const dt_file_list *files,
                                int num_parallel_calls, const dt_source_options *o,
                                dt_dataset **out)
{
    *out = NULL;
    struct rows_ctx *c = calloc(1, sizeof *c);
    dt_dataset *ds = calloc(1, sizeof *ds);
    if (!c || !ds) {
        free(c), free(ds);
        dt_dataset_destroy(input);
        return dt_error(DT_ERR_NOMEM, "no memory for a parse stage");
    }
    c->p = *p, c->lines = lines, c->header = header, c->files = files, c->o = *o;
    pthread_mutex_init(&c->mu, NULL);
    ds->ops = &owner_ops;
    ds->state = c;
    dt_status st = dt_dataset_map(input, rows_fn, c, num_parallel_calls, &ds->input);
    if (st) {
        dt_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return DT_OK;
}
