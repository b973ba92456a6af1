/* TFRecord files read, checked and parsed into batches in one stage (see sources_int.h).
 *
 * tfrecord -> batch(B) -> parse_examples(k) is how Examples are read, and run as three stages it
 * costs an element allocation and two copies per record, with every read and CRC on one thread.
 * This stage fuses them, as tf.data fuses map and batch, and splits the reading too: k workers
 * claim the files' byte ranges in turn (buffer_bytes each), map them (core/mapview.h: no copy,
 * and a file that shrinks meanwhile is an error, not a SIGBUS), and each frames, CRC-checks and
 * parses the records that start in its range in one pass over the bytes, prefetching ahead.
 *
 * A worker finds the first record of a range that does not start a file by the header's length
 * CRC: the first offset whose 8 bytes have the 4 bytes after them as their masked CRC. That can
 * be fooled (record data may hold such bytes, and a corrupt header is not found), so the consumer
 * checks every range against the one before it: the records must go on exactly where the range
 * before stopped. A range that does not is framed again from there, by the consumer, from the
 * same mapping; one whose records all lie inside a longer record of the range before is dropped.
 * The consumer then deals the checked ranges' rows into batches.
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/bytes.h"
#include "../core/crc32c.h"
#include "../core/grow.h"
#include "../core/mapview.h"
#include "sources_int.h"

#define DEFAULT_RANGE ((size_t)8 << 20)
#define PREFETCH_AHEAD 1024 /* bytes ahead of a record that its framing asks the cache for */
#define NO_START UINT64_MAX
#define FRAME_BYTES (DT_TFRECORD_HEADER_BYTES + DT_TFRECORD_FOOTER_BYTES)

struct span {
    uint64_t at;  /* the record's offset in its file */
    uint64_t len; /* data bytes */
};

struct chunk {
    /* the claim, made under the lock */
    uint32_t file;
    uint64_t lo, hi, size;  /* the records that start in [lo, hi) of a file of size bytes */
    dt_mapview view;        /* from lo to as far as they can reach; kept until the consumer is done */
    bool claim_failed;      /* opening or mapping failed: st says why, and there are no records */
    /* what framing, checking and parsing found */
    uint64_t start, end;    /* framing began at start (NO_START: no header in the range) and
                               stopped at end: after the last record, or at a bad frame */
    struct span *spans;
    int n_spans, cap_spans;
    int n_valid;            /* records that passed the data CRC (what batch counts) */
    int *valid_span;        /* (n_valid) their spans */
    int *rec_of_row;        /* (rows) the valid record each parsed row came from */
    int64_t crc_skipped;    /* records skipped for their data CRC, under skip_bad_records */
    dt_rowbuf rows;
    dt_status st;           /* an error after the valid records, msg */
    char *msg;
    bool bad_frame;         /* st is a bad frame at end */
    int parse_err_rec;      /* the first valid record that failed to parse and was not skipped, or
                               -1: an error only if its batch is not dropped */
    dt_status parse_st;
    char *parse_msg;
    bool ready;
};

struct worker {
    struct tfb *s;
    pthread_t thread;
    dt_example_layout *layout;
};

struct tfb {
    const dt_file_list *files;
    dt_source_options o;
    const dt_example_spec *spec;
    int64_t batch;
    bool drop;
    int n_workers, depth;
    size_t max_record, range;
    /* claiming, under mu */
    int file, fd, next_file; /* file: the one being claimed, or -1 */
    uint64_t at, size;       /* its next range's start, its size */
    bool input_done;         /* every range claimed, or an error ends the input */
    uint64_t claimed, taken; /* chunks claimed by workers, chunks the consumer is done with */
    bool stop, running;
    pthread_mutex_t mu;
    pthread_cond_t cv_ready, cv_space;
    struct chunk *ring;
    struct worker *workers;
    /* the consumer */
    dt_example_layout *own_layout; /* for ranges it frames again */
    int64_t cons_file;      /* the file of the last chunk checked, or -1 */
    uint64_t expect;        /* where that file's next record starts */
    bool file_ended;        /* a bad frame ended it (skip_bad_records) */
    struct chunk *cur;      /* the chunk being dealt out, NULL between chunks */
    int cur_rec, cur_row;   /* its next valid record and next row */
    bool plain;             /* every feature has a fixed length: rows are dense values and a
                               label only, and a batch is built in its element (no copy) */
    dt_rowbuf pending;      /* rows of the batch being built (not plain) */
    dt_elem *building;      /* the batch being built, room for batch rows (plain) */
    int64_t pending_recs;
    int64_t pending_skipped; /* its records that failed to parse, under skip_bad_records */
    int64_t pending_err_at;  /* its record that failed to parse, or -1 */
    dt_status pending_err;
    char *pending_msg;
    uint64_t index;         /* valid records before the batch being built */
    bool stalled;           /* a reader thread gave nothing for o.stall_secs: never joined */
    dt_status failed;       /* sticky */
    char *failed_msg;
};

/* ---- claiming ranges (under the lock) ---- */

static void close_file(struct tfb *s)
{
    if (s->file >= 0)
        close(s->fd);
    s->file = -1;
}

static dt_status open_next(struct tfb *s)
{
    const char *path = s->files->paths[s->next_file];
    dt_src_note_reading(&s->o, path);
    int fd;
    bool own, stream;
    dt_status st = dt_src_open_input(path, false, &fd, &own, &stream);
    if (st)
        return st;
    struct stat sb;
    const char *why = fstat(fd, &sb) != 0 ? strerror(errno)
                      : stream || !S_ISREG(sb.st_mode) ? "no longer a regular file" : NULL;
    if (why) {
        st = dt_error(DT_ERR_IO, "%s: %s", path, why);
        if (own)
            close(fd);
        return st;
    }
    s->fd = fd;
    s->file = s->next_file++;
    s->at = 0, s->size = (uint64_t)sb.st_size;
    return DT_OK;
}

static void reset_results(struct chunk *ch)
{
    ch->start = ch->end = NO_START;
    ch->n_spans = ch->n_valid = 0;
    ch->crc_skipped = 0;
    dt_rowbuf_clear(&ch->rows);
    ch->st = DT_OK;
    ch->bad_frame = false;
    ch->parse_err_rec = -1;
    ch->parse_st = DT_OK;
    free(ch->msg);
    free(ch->parse_msg);
    ch->msg = ch->parse_msg = NULL;
}

/* The error st (its message in dt_last_error) as the chunk's: it ends the input after it. */
static void claim_failed(struct tfb *s, struct chunk *ch, dt_status st, uint32_t file)
{
    ch->claim_failed = true;
    ch->file = file;
    ch->lo = ch->hi = ch->size = 0;
    ch->st = st;
    ch->msg = strdup(dt_last_error());
    s->input_done = true;
    close_file(s);
}

/* The next range into ch: false when every range is claimed. */
static bool claim_range(struct tfb *s, struct chunk *ch)
{
    reset_results(ch);
    ch->claim_failed = false;
    for (;;) {
        if (s->input_done)
            return false;
        if (s->file >= 0 && s->at < s->size)
            break;
        close_file(s);
        if (s->next_file >= s->files->n) {
            s->input_done = true;
            return false;
        }
        dt_status st = open_next(s);
        if (st) {
            claim_failed(s, ch, st, (uint32_t)s->next_file);
            return true;
        }
    }
    ch->file = (uint32_t)s->file;
    ch->lo = s->at, ch->size = s->size;
    ch->hi = s->size - s->at > s->range ? s->at + s->range : s->size;
    /* A record that starts before hi ends at most a frame and max_record data bytes after it. */
    uint64_t room = s->size - ch->hi;
    uint64_t reach = room > FRAME_BYTES && room - FRAME_BYTES > s->max_record
                         ? ch->hi + FRAME_BYTES + s->max_record : s->size;
    dt_status st = dt_mapview_open(s->fd, dt_src_name_of(s->files, ch->file), ch->lo,
                                   (size_t)(reach - ch->lo), &ch->view);
    if (st) {
        claim_failed(s, ch, st, ch->file);
        return true;
    }
    s->at = ch->hi;
    return true;
}

/* ---- framing, checking and parsing a range (outside the lock) ---- */

static dt_status add_span(struct chunk *ch, uint64_t at, uint64_t len)
{
    if (ch->n_spans == ch->cap_spans) {
        int cap = ch->cap_spans ? ch->cap_spans * 2 : 256;
        if (!dt_grow_together((dt_grow_item[]){{&ch->spans, sizeof *ch->spans},
                                               {&ch->valid_span, sizeof *ch->valid_span},
                                               {&ch->rec_of_row, sizeof *ch->rec_of_row}},
                              3, (size_t)cap))
            return dt_error(DT_ERR_NOMEM, "no memory for a range of records");
        ch->cap_spans = cap;
    }
    ch->spans[ch->n_spans++] = (struct span){at, len};
    return DT_OK;
}

static inline const uint8_t *bytes_at(const struct chunk *ch, uint64_t at)
{
    return ch->view.data + (at - ch->lo);
}

/* The first offset in [lo, hi) where a record header may start: 8 bytes followed by their
 * masked CRC32C, little-endian. NO_START when there is none. */
static uint64_t find_header(const struct chunk *ch)
{
    for (uint64_t at = ch->lo; at < ch->hi && at + DT_TFRECORD_HEADER_BYTES <= ch->size; at++) {
        if (dt_tfrecord_header_ok(bytes_at(ch, at)))
            return at;
    }
    return NO_START;
}

/* Parses a valid record into the chunk's rows, or notes a failure the consumer counts (skipped)
 * or raises (not skipped) only once it knows the record's batch is not a dropped remainder, as
 * parsing after batching would. Fails only when out of memory. */
static dt_status parse_record(struct tfb *s, struct chunk *ch, const uint8_t *data, uint64_t len,
                              dt_example_layout *layout)
{
    dt_status st = dt_example_parse_learned(s->spec, layout, data, (size_t)len, &ch->rows);
    if (st == DT_OK) {
        ch->rec_of_row[ch->rows.n - 1] = ch->n_valid;
        return DT_OK;
    }
    if (st == DT_ERR_NOMEM)
        return st;
    if (!(s->o.skip_bad_records && st == DT_ERR_FORMAT) && ch->parse_err_rec < 0) {
        ch->parse_err_rec = ch->n_valid;
        ch->parse_st = st;
        ch->parse_msg = strdup(dt_last_error());
    }
    return DT_OK;
}

/* Checks the data CRCs of spans [first, n_spans) (at most 3: their CRCs run side by side) and
 * parses the records that pass. An error ends the chunk's records. */
static dt_status check_and_parse(struct tfb *s, struct chunk *ch, int first,
                                 dt_example_layout *layout)
{
    const char *name = dt_src_name_of(s->files, ch->file);
    int n = ch->n_spans - first;
    const uint8_t *data[3];
    size_t len[3];
    uint32_t crc[3];
    for (int j = 0; j < n; j++) {
        data[j] = bytes_at(ch, ch->spans[first + j].at) + DT_TFRECORD_HEADER_BYTES;
        len[j] = (size_t)ch->spans[first + j].len;
    }
    dt_crc32c_many(n, data, len, crc);
    for (int j = 0; j < n; j++) {
        const struct span *sp = &ch->spans[first + j];
        dt_status st = dt_tfrecord_check_data(name, sp->at, data[j] - DT_TFRECORD_HEADER_BYTES,
                                              sp->len, crc[j]);
        if (st) {
            if (s->o.skip_bad_records && st == DT_ERR_FORMAT) {
                ch->crc_skipped++;
                continue;
            }
            return st;
        }
        if ((st = parse_record(s, ch, data[j], sp->len, layout)))
            return st;
        ch->valid_span[ch->n_valid++] = first + j;
    }
    return DT_OK;
}

/* Whether the file is shorter than when its range was claimed. Bytes past its new end read as
 * zeros in the page it ends in (only pages wholly past it fault), and they show as a bad frame
 * or CRC: asked after such an error, so that it is reported as what it is. */
static bool shorter_now(const struct tfb *s, const struct chunk *ch)
{
    struct stat sb;
    return stat(s->files->paths[ch->file], &sb) == 0 && (uint64_t)sb.st_size < ch->size;
}

/* Frames the records of ch's range from start (a record's offset, or NO_START) on, three at a
 * time, and checks and parses each three while they are in cache. The records framed before a
 * bad frame are checked and parsed too, and an error among them comes first. */
static void process_range(struct tfb *s, struct chunk *ch, uint64_t start,
                          dt_example_layout *layout)
{
    const char *name = dt_src_name_of(s->files, ch->file);
    uint64_t view_end = ch->lo + ch->view.len;
    int eof = view_end == ch->size;
    reset_results(ch);
    ch->start = start;
    uint64_t at = start;
    dt_status st = DT_OK, framing = DT_OK;
    while (st == DT_OK && framing == DT_OK && at != NO_START && at < ch->hi) {
        int first = ch->n_spans;
        while (ch->n_spans - first < 3 && at < ch->hi) {
            const uint8_t *p = bytes_at(ch, at);
            uint64_t len;
            size_t need;
            framing = dt_tfrecord_frame(name, at, p, (size_t)(view_end - at), eof, s->max_record,
                                        &len, &need);
            if (framing == DT_END) /* the view reaches as far as any record can */
                framing = dt_error(DT_ERR_IO, "%s: offset %llu: record beyond the mapped bytes",
                                   name, (unsigned long long)at);
            if (framing) {
                ch->msg = strdup(dt_last_error());
                break;
            }
            /* The bytes after this record, before the loop reads them. */
            for (size_t q = PREFETCH_AHEAD; q < need + PREFETCH_AHEAD; q += 64)
                __builtin_prefetch(p + q);
            if ((st = add_span(ch, at, len)))
                break;
            at += need;
        }
        if (st == DT_OK && ch->n_spans > first)
            st = check_and_parse(s, ch, first, layout);
    }
    ch->end = at;
    if (dt_mapview_shrunk(&ch->view) || ((st || framing) && shorter_now(s, ch)))
        st = dt_error(DT_ERR_IO, "%s: the file was truncated while offsets %llu to %llu were "
                      "being read", name, (unsigned long long)ch->lo, (unsigned long long)view_end);
    if (st) {
        free(ch->msg);
        ch->st = st;
        ch->msg = strdup(dt_last_error());
    } else if (framing) {
        ch->st = framing;
        ch->bad_frame = framing == DT_ERR_FORMAT;
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
        if (s->stop)
            break;
        struct chunk *ch = &s->ring[s->claimed % (uint64_t)s->depth];
        if (!claim_range(s, ch))
            break;
        s->claimed++;
        pthread_mutex_unlock(&s->mu);
        if (!ch->claim_failed)
            process_range(s, ch, ch->lo == 0 ? 0 : find_header(ch), w->layout);
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
    dt_elem_free(s->building);
    s->building = NULL;
    s->pending_recs = s->pending_skipped = 0;
    s->pending_err_at = -1;
    s->pending_err = DT_OK;
    free(s->pending_msg);
    s->pending_msg = NULL;
}

/* Back to the start of the input: workers stopped, nothing claimed, nothing pending. */
static void rewind_input(struct tfb *s)
{
    stop_workers(s);
    for (int i = 0; i < s->depth; i++) {
        dt_mapview_close(&s->ring[i].view);
        reset_results(&s->ring[i]);
        s->ring[i].ready = false;
    }
    close_file(s);
    s->next_file = 0, s->input_done = false;
    s->claimed = s->taken = 0;
    s->cons_file = -1, s->expect = 0, s->file_ended = false;
    s->cur = NULL;
    clear_pending(s);
    s->index = 0;
    s->failed = DT_OK;
    free(s->failed_msg);
    s->failed_msg = NULL;
}

static void release_chunk(struct tfb *s, struct chunk *ch)
{
    dt_mapview_close(&ch->view);
    pthread_mutex_lock(&s->mu);
    ch->ready = false;
    s->taken++;
    pthread_cond_broadcast(&s->cv_space);
    pthread_mutex_unlock(&s->mu);
    if (s->cur == ch)
        s->cur = NULL;
}

/* Whether the chunk the consumer takes next goes on from the one before it in its file, as the
 * file read in order would: framed again from where that one stopped when it does not, and
 * false when no record of the file starts in its range (a longer record before covers it), or
 * a bad frame ended the file. */
static bool admit(struct tfb *s, struct chunk *ch)
{
    if ((int64_t)ch->file != s->cons_file) {
        s->cons_file = ch->file;
        s->expect = 0, s->file_ended = false;
    }
    if (s->file_ended)
        return false;
    if (ch->claim_failed)
        return true;
    if (s->expect >= ch->hi)
        return false;
    if (ch->start != s->expect)
        process_range(s, ch, s->expect, s->own_layout);
    s->expect = ch->end;
    for (int64_t i = 0; i < ch->crc_skipped; i++)
        dt_src_count_bad(&s->o);
    return true;
}

/* The deadline stall_secs from now on the monotonic clock, cv_ready's. */
static struct timespec deadline_after(double secs)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double whole = (double)(int64_t)secs;
    t.tv_sec += (time_t)whole;
    t.tv_nsec += (long)((secs - whole) * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* Waits (under the lock) until ch is ready or every chunk is taken; false when the reader
 * threads have given nothing for o.stall_secs: one of them is stuck in a read (a hung network
 * file system). */
static bool wait_ready(struct tfb *s, struct chunk *ch)
{
    bool timed = s->o.stall_secs > 0;
    struct timespec until = timed ? deadline_after(s->o.stall_secs) : (struct timespec){0, 0};
    while (!ch->ready && !(s->taken == s->claimed && s->input_done)) {
        if (!timed)
            pthread_cond_wait(&s->cv_ready, &s->mu);
        else if (pthread_cond_timedwait(&s->cv_ready, &s->mu, &until) == ETIMEDOUT &&
                 !ch->ready && !(s->taken == s->claimed && s->input_done))
            return false;
    }
    return true;
}

/* The next chunk in claim order, checked, into s->cur; false at the end of the input, or with
 * *st set when the input has stalled. */
static bool next_chunk(struct tfb *s, dt_status *st)
{
    *st = DT_OK;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        struct chunk *ch = &s->ring[s->taken % (uint64_t)s->depth];
        if (!wait_ready(s, ch)) {
            bool claimed = s->taken < s->claimed;
            const char *name = dt_src_name_of(s->files, claimed ? ch->file
                                                                : (uint32_t)s->next_file);
            *st = dt_error(DT_ERR_IO, "%s: no data for %g s at offset %llu (input_timeout): the "
                           "input has stalled", name, s->o.stall_secs,
                           (unsigned long long)(claimed ? ch->lo : 0));
            s->stalled = true;
            pthread_mutex_unlock(&s->mu);
            return false;
        }
        bool ok = ch->ready;
        pthread_mutex_unlock(&s->mu);
        if (!ok)
            return false;
        if (admit(s, ch)) {
            s->cur = ch, s->cur_rec = 0, s->cur_row = 0;
            return true;
        }
        release_chunk(s, ch);
    }
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

/* The chunk's rows, seen as an element (nothing copied). */
static dt_elem rows_of(const struct chunk *ch)
{
    const dt_rowbuf *b = &ch->rows;
    return (dt_elem){.n = b->n, .n_dense = b->n_dense, .nnz = b->nnz, .n_bytes = b->n_bytes,
                     .dense = b->dense, .labels = b->labels, .sp_row = b->sp_row,
                     .sp_ids = b->sp_ids, .sp_vals = b->sp_vals, .raw_off = b->raw_off,
                     .raw = b->raw};
}

/* Rows of the batch being built. */
static int batch_rows(const struct tfb *s)
{
    return s->plain ? (s->building ? s->building->n : 0) : s->pending.n;
}

/* Appends rows [from, from + count) of the chunk to the batch being built: a plain batch is an
 * element with room for a whole batch, so its rows are copied once, into the element given out. */
static dt_status add_rows(struct tfb *s, const struct chunk *ch, int from, int count)
{
    if (!s->plain) {
        dt_elem rows = rows_of(ch);
        return dt_rowbuf_append_rows(&s->pending, &rows, from, count);
    }
    if (!s->building) {
        if (!(s->building = dt_elem_alloc((int)s->batch, ch->rows.n_dense, 0, 0)))
            return dt_error(DT_ERR_NOMEM, "no memory for a batch of %lld examples",
                            (long long)s->batch);
        s->building->n = 0;
    }
    dt_elem *e = s->building;
    size_t nd = (size_t)e->n_dense;
    memcpy(e->dense + (size_t)e->n * nd, ch->rows.dense + (size_t)from * nd,
           (size_t)count * nd * sizeof(float));
    memcpy(e->labels + e->n, ch->rows.labels + from, (size_t)count * sizeof(float));
    e->n += count;
    return DT_OK;
}

/* The batch built, as an element (NULL when out of memory); nothing is pending after it. */
static dt_elem *take_batch(struct tfb *s)
{
    if (!s->plain)
        return dt_rowbuf_take(&s->pending);
    dt_elem *e = s->building;
    s->building = NULL;
    return e;
}

/* Moves up to batch - pending_recs of the current chunk's valid records into the batch. */
static dt_status deal(struct tfb *s, uint32_t *first_file, uint64_t *first_pos)
{
    struct chunk *ch = s->cur;
    int k = ch->n_valid - s->cur_rec;
    if (k > s->batch - s->pending_recs)
        k = (int)(s->batch - s->pending_recs);
    if (s->pending_recs == 0) {
        *first_file = ch->file;
        *first_pos = ch->spans[ch->valid_span[s->cur_rec]].at;
    }
    int end = s->cur_rec + k, from = s->cur_row;
    while (s->cur_row < ch->rows.n && ch->rec_of_row[s->cur_row] < end)
        s->cur_row++;
    if (s->cur_row > from) {
        dt_status st = add_rows(s, ch, from, s->cur_row - from);
        if (st)
            return st;
    }
    s->pending_skipped += k - (s->cur_row - from);
    if (s->pending_err_at < 0 && ch->parse_err_rec >= s->cur_rec && ch->parse_err_rec < end) {
        s->pending_err_at = s->pending_recs + (ch->parse_err_rec - s->cur_rec);
        s->pending_err = ch->parse_st;
        s->pending_msg = strdup(ch->parse_msg ? ch->parse_msg : "");
    }
    s->cur_rec = end;
    s->pending_recs += k;
    return DT_OK;
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
            if (!s->cur && !next_chunk(s, &st)) {
                if (st)
                    return fail_iteration(s, st, dt_last_error());
                break;
            }
            struct chunk *ch = s->cur;
            if (s->cur_rec == ch->n_valid) {
                if (ch->st && ch->bad_frame && s->o.skip_bad_records) {
                    /* As the record source does: a bad frame ends its file. */
                    dt_src_count_bad(&s->o);
                    s->file_ended = true;
                } else if (ch->st) {
                    st = fail_iteration(s, ch->st, ch->msg);
                    release_chunk(s, ch);
                    return st;
                }
                release_chunk(s, ch);
                continue;
            }
            if ((st = deal(s, &first_file, &first_pos)))
                return fail_iteration(s, st, dt_last_error());
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
        if (batch_rows(s) == 0) { /* every record of the batch skipped: nothing to give */
            clear_pending(s);
            continue;
        }
        s->pending_recs = s->pending_skipped = 0;
        if (!(*out = take_batch(s)))
            return fail_iteration(s, DT_ERR_NOMEM, "no memory for parsed examples");
        (*out)->index = index, (*out)->file = first_file, (*out)->pos = first_pos;
        return DT_OK;
    }
}

static dt_status tfb_reset(dt_dataset *ds)
{
    struct tfb *s = ds->state;
    if (s->stalled) /* its stuck reader cannot be stopped, so the input cannot start again */
        return dt_error(s->failed, "%s", s->failed_msg ? s->failed_msg : "");
    rewind_input(s);
    return DT_OK;
}

/* A stalled input's reader threads may never return from their read: they are told to stop and
 * left running, and what they use is left allocated rather than waited for. */
static void abandon_workers(struct tfb *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv_space);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_workers; i++)
        pthread_detach(s->workers[i].thread);
}

static void tfb_destroy(dt_dataset *ds)
{
    struct tfb *s = ds->state;
    if (!s)
        return;
    if (s->stalled && s->running) {
        abandon_workers(s);
        return;
    }
    if (s->ring && s->workers)
        rewind_input(s);
    for (int i = 0; s->ring && i < s->depth; i++) {
        struct chunk *ch = &s->ring[i];
        free(ch->spans);
        free(ch->valid_span);
        free(ch->rec_of_row);
        dt_rowbuf_free(&ch->rows);
    }
    for (int i = 0; s->workers && i < s->n_workers; i++)
        dt_example_layout_free(s->workers[i].layout);
    dt_example_layout_free(s->own_layout);
    dt_rowbuf_free(&s->pending);
    dt_elem_free(s->building);
    free(s->pending_msg);
    free(s->ring);
    free(s->workers);
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
    s->range = o->buffer_bytes ? o->buffer_bytes : DEFAULT_RANGE;
    s->file = -1, s->cons_file = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* stall deadlines immune to clock steps */
    pthread_cond_init(&s->cv_ready, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&s->cv_space, NULL);
    dt_rowbuf_init(&s->pending, spec->n_dense);
    s->plain = true;
    for (int i = 0; i < spec->n_features; i++)
        s->plain = s->plain && spec->features[i].length > 0;
    s->pending_err_at = -1;
    s->ring = calloc((size_t)s->depth, sizeof *s->ring);
    s->workers = calloc((size_t)threads, sizeof *s->workers);
    dt_status st = DT_OK;
    if (!s->ring || !s->workers)
        st = dt_error(DT_ERR_NOMEM, "no memory for a tfrecord dataset");
    for (int i = 0; st == DT_OK && i < s->depth; i++) {
        dt_rowbuf_init(&s->ring[i].rows, spec->n_dense);
        s->ring[i].view.guard = -1;
    }
    for (int i = 0; st == DT_OK && i < threads; i++) {
        s->workers[i].s = s;
        st = dt_example_layout_new(&s->workers[i].layout);
    }
    if (st == DT_OK)
        st = dt_example_layout_new(&s->own_layout);
    if (st) {
        struct dt_dataset tmp = {.state = s};
        tfb_destroy(&tmp);
        return st;
    }
    return dt_dataset_create(&tfb_ops, NULL, s, out);
}
