/* TFRecord files read, checked and parsed into batches in one stage (see sources_int.h).
 *
 * tfrecord -> batch(B) -> parse_examples(k) is how Examples are read, and run as three stages it
 * costs an element allocation and two copies per record, with every read and CRC on one thread.
 * This stage fuses them, as tf.data fuses map and batch. k workers take turns claiming the next B
 * records: under the lock a worker reads them straight from the file into its own buffer and
 * frames them (the file is read in order, once); outside it, it checks their data CRCs, three
 * records at a time, and parses them with a layout learned from the records before. The consumer
 * takes the workers' chunks in claim order and deals their rows into batches.
 *
 * The elements and errors are the three stages': a batch is B records that passed framing and
 * the data CRC; under skip_bad_records a record whose CRC fails is skipped before batching, a
 * record that does not parse leaves its batch one row short (parse runs after batch), a batch left
 * with no rows is dropped, and a bad frame ends its file. Without it the first bad record ends
 * the iteration with the reader's or the parser's message, after the batches before it. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/crc32c.h"
#include "sources_int.h"

#define READ_BYTES ((size_t)128 << 10) /* per read(): what a chunk reads past its records */
#define FIRST_CAP ((size_t)1 << 20)
#define SLACK 64 /* readable bytes after a buffer's data, for the layout's 32-byte compares */

struct span {
    uint32_t file;
    uint64_t at;   /* the record's offset in its file */
    size_t rec;    /* its header's offset in the chunk's buffer */
    uint64_t len;  /* data bytes */
};

struct chunk {
    uint8_t *buf;
    size_t cap, len;
    struct span *spans;
    int n_spans, cap_spans;
    /* results, read by the consumer once ready */
    int n_valid;        /* records that passed the data CRC (what batch counts) */
    int *valid_span;    /* (n_valid) their spans */
    int *rec_of_row;    /* (rows) the valid record each parsed row came from */
    dt_elem *rows;      /* NULL when no record parsed */
    dt_status st;       /* an error after the valid records (reading, framing, CRC), msg */
    char *msg;
    int parse_err_rec;  /* the first valid record that failed to parse and was not skipped, or
                           -1: an error only if its batch is not dropped */
    dt_status parse_st;
    char *parse_msg;
    bool ready;
};

struct worker {
    struct tfb *s;
    pthread_t thread;
    dt_rowbuf rows;
    dt_example_layout *layout;
};

struct tfb {
    const dt_file_list *files;
    dt_source_options o;
    const dt_example_spec *spec;
    int64_t batch;
    bool drop;
    int n_workers, depth;
    size_t max_record;
    /* reading, under mu */
    int file, fd, next_file;
    bool own, eof;
    uint64_t at;            /* file offset of carry[0] */
    uint8_t *carry;
    size_t carry_len, carry_cap;
    bool input_done;        /* every file read, or an error ends the input */
    uint64_t claimed, taken; /* chunks claimed by workers, chunks the consumer is done with */
    bool stop, running;
    pthread_mutex_t mu;
    pthread_cond_t cv_ready, cv_space;
    struct chunk *ring;
    struct worker *workers;
    /* the consumer */
    struct chunk *cur;      /* the chunk being dealt out, NULL between chunks */
    int cur_rec, cur_row;   /* its next valid record and next row */
    dt_rowbuf pending;      /* rows of the batch being built */
    int64_t pending_recs;
    int64_t pending_skipped; /* its records that failed to parse, under skip_bad_records */
    int64_t pending_err_at;  /* its record that failed to parse, or -1 */
    dt_status pending_err;
    char *pending_msg;
    uint64_t index;         /* valid records before the batch being built */
    bool ended;
    dt_status failed;       /* sticky */
    char *failed_msg;
};

/* ---- reading (under the lock) ---- */

static dt_status grow_buf(struct chunk *ch, size_t need)
{
    if (need + SLACK <= ch->cap)
        return DT_OK;
    size_t cap = ch->cap ? ch->cap : FIRST_CAP;
    while (cap < need + SLACK)
        cap *= 2;
    uint8_t *b = realloc(ch->buf, cap);
    if (!b)
        return dt_error(DT_ERR_NOMEM, "no memory for %zu bytes of records", cap);
    ch->buf = b, ch->cap = cap;
    return DT_OK;
}

static dt_status add_span(struct chunk *ch, uint32_t file, uint64_t at, size_t rec, uint64_t len)
{
    if (ch->n_spans == ch->cap_spans) {
        int cap = ch->cap_spans ? ch->cap_spans * 2 : 256;
        struct span *sp = realloc(ch->spans, (size_t)cap * sizeof *sp);
        int *vs = realloc(ch->valid_span, (size_t)cap * sizeof *vs);
        if (vs)
            ch->valid_span = vs;
        int *rr = vs ? realloc(ch->rec_of_row, (size_t)cap * sizeof *rr) : NULL;
        if (sp)
            ch->spans = sp;
        if (rr)
            ch->rec_of_row = rr;
        if (!sp || !vs || !rr)
            return dt_error(DT_ERR_NOMEM, "no memory for a chunk of records");
        ch->cap_spans = cap;
    }
    ch->spans[ch->n_spans++] = (struct span){file, at, rec, len};
    return DT_OK;
}

static void close_file(struct tfb *s)
{
    if (s->file >= 0 && s->own)
        close(s->fd);
    s->file = -1;
    s->eof = false;
}

static dt_status open_next(struct tfb *s)
{
    bool stream;
    dt_status st = dt_src_open_input(s->files->paths[s->next_file], false, &s->fd, &s->own, &stream);
    if (st)
        return st;
    s->file = s->next_file++;
    s->at = 0;
    s->eof = false;
    return DT_OK;
}

/* Appends what one read() gives (up to READ_BYTES) to the chunk, or sets eof. */
static dt_status read_more(struct tfb *s, struct chunk *ch, size_t pos)
{
    dt_status st = grow_buf(ch, ch->len + READ_BYTES);
    if (st)
        return st;
    for (;;) {
        ssize_t k = read(s->fd, ch->buf + ch->len, READ_BYTES);
        if (k > 0) {
            ch->len += (size_t)k;
            return DT_OK;
        }
        if (k == 0) {
            s->eof = true;
            return DT_OK;
        }
        if (errno != EINTR)
            return dt_error(DT_ERR_IO, "%s: offset %llu: read: %s",
                            dt_src_name_of(s->files, (uint32_t)s->file),
                            (unsigned long long)(s->at + (ch->len - pos)), strerror(errno));
    }
}

/* Fills ch with the next batch of framed records: the carried bytes, then reads. An error (or,
 * with skip_bad_records, a bad frame) is kept in the chunk after the records framed before it. */
static void fill(struct tfb *s, struct chunk *ch)
{
    ch->len = 0, ch->n_spans = 0, ch->n_valid = 0, ch->st = DT_OK;
    size_t pos = 0;
    dt_status st = grow_buf(ch, s->carry_len + READ_BYTES);
    if (st)
        goto fail;
    if (s->carry_len)
        memcpy(ch->buf, s->carry, s->carry_len);
    ch->len = s->carry_len;
    s->carry_len = 0;
    while (ch->n_spans < s->batch) {
        if (s->file < 0) {
            if (s->next_file >= s->files->n) {
                s->input_done = true;
                break;
            }
            if ((st = open_next(s)))
                goto fail;
        }
        const char *name = dt_src_name_of(s->files, (uint32_t)s->file);
        if (pos == ch->len && s->eof) { /* the file ended at a record boundary */
            close_file(s);
            continue;
        }
        uint64_t len;
        size_t need;
        st = dt_tfrecord_frame(name, s->at, ch->buf + pos, ch->len - pos, s->eof, s->max_record,
                               &len, &need);
        if (st == DT_OK) {
            if ((st = add_span(ch, (uint32_t)s->file, s->at, pos, len)))
                goto fail;
            pos += need;
            s->at += need;
        } else if (st == DT_END) {
            if ((st = read_more(s, ch, pos)))
                goto fail;
        } else if (s->o.skip_bad_records && st == DT_ERR_FORMAT) {
            /* As the record source does: a bad frame ends its file. */
            dt_src_count_bad(&s->o);
            ch->len = pos;
            close_file(s);
        } else {
            goto fail;
        }
    }
    /* Bytes read past the last record wait for the next chunk. */
    s->carry_len = ch->len - pos;
    if (s->carry_len > s->carry_cap) {
        uint8_t *c = realloc(s->carry, s->carry_len);
        if (!c) {
            st = dt_error(DT_ERR_NOMEM, "no memory for %zu bytes of records", s->carry_len);
            goto fail;
        }
        s->carry = c, s->carry_cap = s->carry_len;
    }
    if (s->carry_len)
        memcpy(s->carry, ch->buf + pos, s->carry_len);
    ch->len = pos;
    return;
fail:
    ch->st = st;
    ch->msg = strdup(dt_last_error());
    ch->len = pos;
    s->carry_len = 0;
    s->input_done = true;
}

/* ---- checking and parsing (outside the lock) ---- */

/* Parses a valid record: a row, or a failure the consumer counts (skipped) or raises (not
 * skipped) only once it knows the record's batch is not a dropped remainder, as parsing after
 * batching would. false on an error that ends the chunk (no memory). */
static bool parse_record(struct worker *w, struct chunk *ch, const struct span *sp, dt_status *st)
{
    struct tfb *s = w->s;
    const uint8_t *data = ch->buf + sp->rec + DT_TFRECORD_HEADER_BYTES;
    *st = dt_example_parse_learned(s->spec, w->layout, data, (size_t)sp->len, &w->rows);
    if (*st == DT_OK) {
        ch->rec_of_row[w->rows.n - 1] = ch->n_valid;
        return true;
    }
    if (*st == DT_ERR_NOMEM)
        return false;
    if (!(s->o.skip_bad_records && *st == DT_ERR_FORMAT) && ch->parse_err_rec < 0) {
        ch->parse_err_rec = ch->n_valid;
        ch->parse_st = *st;
        ch->parse_msg = strdup(dt_last_error());
    }
    *st = DT_OK;
    return true;
}

static void process(struct worker *w, struct chunk *ch)
{
    struct tfb *s = w->s;
    dt_status st = DT_OK;
    dt_rowbuf_clear(&w->rows);
    ch->parse_err_rec = -1;
    for (int i = 0; i < ch->n_spans && st == DT_OK; i += 3) {
        int n = ch->n_spans - i < 3 ? ch->n_spans - i : 3;
        const uint8_t *data[3];
        size_t len[3];
        uint32_t crc[3];
        for (int j = 0; j < n; j++) {
            data[j] = ch->buf + ch->spans[i + j].rec + DT_TFRECORD_HEADER_BYTES;
            len[j] = (size_t)ch->spans[i + j].len;
        }
        dt_crc32c_many(n, data, len, crc);
        for (int j = 0; j < n && st == DT_OK; j++) {
            const struct span *sp = &ch->spans[i + j];
            st = dt_tfrecord_check_data(dt_src_name_of(s->files, sp->file), sp->at,
                                        ch->buf + sp->rec, sp->len, crc[j]);
            if (st) {
                if (s->o.skip_bad_records && st == DT_ERR_FORMAT) {
                    dt_src_count_bad(&s->o);
                    st = DT_OK;
                }
                continue;
            }
            if (!parse_record(w, ch, sp, &st))
                break;
            ch->valid_span[ch->n_valid++] = i + j;
        }
    }
    if (st) { /* the chunk's records stop here; an error of its framing came later */
        ch->st = st;
        free(ch->msg);
        ch->msg = strdup(dt_last_error());
    }
    ch->rows = NULL;
    if (w->rows.n > 0 && !(ch->rows = dt_rowbuf_take(&w->rows)) && ch->st == DT_OK) {
        ch->st = DT_ERR_NOMEM;
        ch->msg = strdup("no memory for parsed examples");
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct tfb *s = w->s;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && !s->input_done && s->claimed >= s->taken + (uint64_t)s->depth)
            pthread_cond_wait(&s->cv_space, &s->mu);
        if (s->stop || s->input_done)
            break;
        struct chunk *ch = &s->ring[s->claimed++ % (uint64_t)s->depth];
        fill(s, ch);
        pthread_mutex_unlock(&s->mu);
        /* The records framed before a framing error are checked and parsed too; an error
         * among them comes first. */
        dt_status framing = ch->st;
        ch->st = DT_OK;
        process(w, ch);
        if (ch->st == DT_OK)
            ch->st = framing;
        pthread_mutex_lock(&s->mu);
        ch->ready = true;
        pthread_cond_broadcast(&s->cv_ready);
    }
    pthread_cond_broadcast(&s->cv_ready);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- the consumer ---- */

/* Stops the first n workers: each ends after the chunk it holds. */
static void join_workers(struct tfb *s, int n)
{
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv_space);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++)
        pthread_join(s->workers[i].thread, NULL);
    s->stop = false;
}

static dt_status start_workers(struct tfb *s)
{
    if (s->running)
        return DT_OK;
    for (int i = 0; i < s->n_workers; i++) {
        if (pthread_create(&s->workers[i].thread, NULL, worker_main, &s->workers[i]) != 0) {
            join_workers(s, i);
            return dt_error(DT_ERR_NOMEM, "cannot start a thread to read TFRecord files");
        }
    }
    s->running = true;
    return DT_OK;
}

static void stop_workers(struct tfb *s)
{
    if (!s->running)
        return;
    join_workers(s, s->n_workers);
    s->running = false;
}

static void clear_pending(struct tfb *s)
{
    dt_rowbuf_clear(&s->pending);
    s->pending_recs = s->pending_skipped = 0;
    s->pending_err_at = -1;
    s->pending_err = DT_OK;
    free(s->pending_msg);
    s->pending_msg = NULL;
}

/* Back to the start of the input: workers stopped, nothing read, nothing pending. */
static void rewind_input(struct tfb *s)
{
    stop_workers(s);
    for (int i = 0; i < s->depth; i++) {
        struct chunk *ch = &s->ring[i];
        dt_elem_free(ch->rows);
        free(ch->msg);
        free(ch->parse_msg);
        ch->rows = NULL, ch->msg = NULL, ch->parse_msg = NULL, ch->ready = false;
    }
    close_file(s);
    s->next_file = 0, s->carry_len = 0, s->input_done = false;
    s->claimed = s->taken = 0;
    s->cur = NULL;
    clear_pending(s);
    s->index = 0;
    s->failed = DT_OK;
    free(s->failed_msg);
    s->failed_msg = NULL;
}

static void release_chunk(struct tfb *s)
{
    struct chunk *ch = s->cur;
    dt_elem_free(ch->rows);
    free(ch->msg);
    free(ch->parse_msg);
    ch->rows = NULL, ch->msg = NULL, ch->parse_msg = NULL;
    pthread_mutex_lock(&s->mu);
    ch->ready = false;
    s->taken++;
    pthread_cond_broadcast(&s->cv_space);
    pthread_mutex_unlock(&s->mu);
    s->cur = NULL;
}

/* The next chunk in claim order into s->cur; false at the end of the input. */
static bool next_chunk(struct tfb *s)
{
    pthread_mutex_lock(&s->mu);
    struct chunk *ch = &s->ring[s->taken % (uint64_t)s->depth];
    while (!ch->ready && !(s->taken == s->claimed && s->input_done))
        pthread_cond_wait(&s->cv_ready, &s->mu);
    bool ok = ch->ready;
    pthread_mutex_unlock(&s->mu);
    if (ok)
        s->cur = ch, s->cur_rec = 0, s->cur_row = 0;
    return ok;
}

static void stamp(dt_elem *e, const struct chunk *ch, int rec, uint64_t index)
{
    const struct span *sp = &ch->spans[ch->valid_span[rec]];
    e->index = index, e->file = sp->file, e->pos = sp->at;
}

static dt_status fail_iteration(struct tfb *s, dt_status st, const char *msg)
{
    s->failed = st;
    free(s->failed_msg);
    s->failed_msg = strdup(msg ? msg : "");
    clear_pending(s);
    return dt_error(st, "%s", s->failed_msg ? s->failed_msg : "");
}

/* A record of the batch failed to parse: the message parsing the batch would give. */
static dt_status fail_parse(struct tfb *s, uint32_t file, uint64_t pos)
{
    const char *name = dt_src_name_of(s->files, file);
    char msg[1024];
    if (s->pending_err_at == 0)
        snprintf(msg, sizeof msg, "%s: record at offset %llu: %s", name, (unsigned long long)pos,
                 s->pending_msg ? s->pending_msg : "");
    else
        snprintf(msg, sizeof msg, "%s: record %lld of the batch starting at offset %llu: %s",
                 name, (long long)s->pending_err_at, (unsigned long long)pos,
                 s->pending_msg ? s->pending_msg : "");
    return fail_iteration(s, s->pending_err, msg);
}

static dt_status tfb_next(dt_dataset *ds, dt_elem **out)
{
    struct tfb *s = ds->state;
    if (s->failed)
        return dt_error(s->failed, "%s", s->failed_msg ? s->failed_msg : "");
    dt_status st = start_workers(s);
    if (st)
        return st;
    uint32_t first_file = 0;
    uint64_t first_pos = 0;
    for (;;) {
        while (s->pending_recs < s->batch) {
            if (!s->cur && !next_chunk(s))
                break;
            struct chunk *ch = s->cur;
            if (s->cur_rec == ch->n_valid) {
                if (ch->st) {
                    st = fail_iteration(s, ch->st, ch->msg);
                    release_chunk(s);
                    return st;
                }
                release_chunk(s);
                continue;
            }
            int k = ch->n_valid - s->cur_rec;
            if (k > s->batch - s->pending_recs)
                k = (int)(s->batch - s->pending_recs);
            if (s->pending_recs == 0 && k == s->batch && s->cur_rec == 0 && ch->rows &&
                ch->rows->n == k && ch->parse_err_rec < 0) {
                /* A chunk that is exactly one batch goes out as it is. */
                *out = ch->rows;
                ch->rows = NULL;
                stamp(*out, ch, 0, s->index);
                s->index += (uint64_t)k;
                s->cur_rec = s->cur_row = k;
                return DT_OK;
            }
            if (s->pending_recs == 0) {
                const struct span *sp = &ch->spans[ch->valid_span[s->cur_rec]];
                first_file = sp->file, first_pos = sp->at;
            }
            int end = s->cur_rec + k, from = s->cur_row;
            while (ch->rows && s->cur_row < ch->rows->n && ch->rec_of_row[s->cur_row] < end)
                s->cur_row++;
            if (s->cur_row > from &&
                (st = dt_rowbuf_append_rows(&s->pending, ch->rows, from, s->cur_row - from)))
                return fail_iteration(s, st, dt_last_error());
            s->pending_skipped += k - (s->cur_row - from);
            if (s->pending_err_at < 0 && ch->parse_err_rec >= s->cur_rec && ch->parse_err_rec < end) {
                s->pending_err_at = s->pending_recs + (ch->parse_err_rec - s->cur_rec);
                s->pending_err = ch->parse_st;
                s->pending_msg = strdup(ch->parse_msg ? ch->parse_msg : "");
            }
            s->cur_rec = end;
            s->pending_recs += k;
        }
        if (s->pending_recs == 0)
            return DT_END;
        bool full = s->pending_recs == s->batch;
        uint64_t index = s->index;
        s->index += (uint64_t)s->pending_recs;
        if (!full && s->drop) { /* a short last batch under drop_remainder is never parsed */
            clear_pending(s);
            continue;
        }
        if (s->pending_err)
            return fail_parse(s, first_file, first_pos);
        for (int64_t i = 0; i < s->pending_skipped; i++)
            dt_src_count_bad(&s->o);
        if (s->pending.n == 0) { /* every record of the batch skipped: nothing to give */
            clear_pending(s);
            continue;
        }
        s->pending_recs = s->pending_skipped = 0;
        if (!(*out = dt_rowbuf_take(&s->pending)))
            return fail_iteration(s, DT_ERR_NOMEM, "no memory for parsed examples");
        (*out)->index = index, (*out)->file = first_file, (*out)->pos = first_pos;
        return DT_OK;
    }
}

static dt_status tfb_reset(dt_dataset *ds)
{
    rewind_input(ds->state);
    return DT_OK;
}

static void tfb_destroy(dt_dataset *ds)
{
    struct tfb *s = ds->state;
    if (!s)
        return;
    rewind_input(s);
    for (int i = 0; i < s->depth; i++) {
        free(s->ring[i].buf);
        free(s->ring[i].spans);
        free(s->ring[i].valid_span);
        free(s->ring[i].rec_of_row);
    }
    for (int i = 0; i < s->n_workers; i++) {
        dt_rowbuf_free(&s->workers[i].rows);
        dt_example_layout_free(s->workers[i].layout);
    }
    dt_rowbuf_free(&s->pending);
    free(s->pending_msg);
    free(s->ring);
    free(s->workers);
    free(s->carry);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv_ready);
    pthread_cond_destroy(&s->cv_space);
    free(s);
}

static const dt_dataset_ops tfb_ops = {"tfrecord_batches", tfb_next, tfb_reset, tfb_destroy};

dt_status dt_src_tfrecord_batches(const dt_file_list *files, const dt_source_options *o,
                                  const dt_example_spec *spec, int64_t batch_size,
                                  bool drop_remainder, int threads, dt_dataset **out)
{
    *out = NULL;
    if (batch_size < 1 || batch_size > INT32_MAX)
        return dt_error(DT_ERR_INVALID, "batch size %lld is not in 1..%d", (long long)batch_size,
                        INT32_MAX);
    if (threads < 1)
        threads = 1;
    struct tfb *s = calloc(1, sizeof *s);
    if (!s)
        return dt_error(DT_ERR_NOMEM, "no memory for a tfrecord dataset");
    s->files = files, s->o = *o, s->spec = spec;
    s->batch = batch_size, s->drop = drop_remainder;
    s->n_workers = threads, s->depth = threads + 2;
    s->max_record = o->max_record_bytes ? o->max_record_bytes : DT_TFRECORD_DEFAULT_MAX_RECORD_BYTES;
    s->file = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv_ready, NULL);
    pthread_cond_init(&s->cv_space, NULL);
    dt_rowbuf_init(&s->pending, spec->n_dense);
    s->pending_err_at = -1;
    s->ring = calloc((size_t)s->depth, sizeof *s->ring);
    s->workers = calloc((size_t)threads, sizeof *s->workers);
    dt_status st = DT_OK;
    if (!s->ring || !s->workers)
        st = dt_error(DT_ERR_NOMEM, "no memory for a tfrecord dataset");
    for (int i = 0; st == DT_OK && i < threads; i++) {
        s->workers[i].s = s;
        dt_rowbuf_init(&s->workers[i].rows, spec->n_dense);
        st = dt_example_layout_new(&s->workers[i].layout);
    }
    if (st) {
        if (!s->ring || !s->workers) {
            free(s->ring), free(s->workers);
            dt_rowbuf_free(&s->pending);
            free(s);
            return st;
        }
        struct dt_dataset tmp = {.state = s};
        tfb_destroy(&tmp);
        return st;
    }
    return dt_dataset_create(&tfb_ops, NULL, s, out);
}
