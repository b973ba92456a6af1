/* File sources for datasets (see include/dtrain/sources.h). */
#include "dtrain/sources.h"

#include "sources_int.h"
#include "dtrain/criteo.h"
#include "dtrain/ctr_csv.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- File lists ---- */

static dt_status list_add(dt_file_list *l, const char *path)
{
    char **grown = realloc(l->paths, (size_t)(l->n + 1) * sizeof *grown);
    if (!grown)
        return dt_error(DT_ERR_NOMEM, "no memory for the file list");
    l->paths = grown;
    if (!(l->paths[l->n] = strdup(path)))
        return dt_error(DT_ERR_NOMEM, "no memory for the file list");
    l->n++;
    return DT_OK;
}

static bool has_wildcard(const char *s) { return strpbrk(s, "*?[") != NULL; }

/* A path of one file per pass over the data (dt_src_open_epoch). */
static bool per_epoch(const char *path) { return strstr(path, "{epoch}") != NULL; }

static dt_status add_pattern(dt_file_list *l, const char *pattern)
{
    if (strcmp(pattern, "-") == 0 || per_epoch(pattern))
        return list_add(l, pattern); /* a pass's file may not be there until its pass */
    if (!has_wildcard(pattern)) {
        struct stat sb;
        if (stat(pattern, &sb) != 0)
            return dt_error(DT_ERR_IO, "%s: %s", pattern, strerror(errno));
        if (S_ISDIR(sb.st_mode))
            return dt_error(DT_ERR_IO, "%s: is a directory (give a glob such as %s/*)", pattern,
                            pattern);
        return list_add(l, pattern);
    }
    glob_t g;
    int rc = glob(pattern, GLOB_ERR, NULL, &g);
    if (rc == GLOB_NOMATCH) {
        globfree(&g);
        return dt_error(DT_ERR_IO, "%s: the pattern matches no file", pattern);
    }
    if (rc != 0) {
        globfree(&g);
        return dt_error(DT_ERR_IO, "%s: cannot expand the pattern: %s", pattern, strerror(errno));
    }
    dt_status st = DT_OK;
    for (size_t i = 0; i < g.gl_pathc && st == DT_OK; i++)
        st = list_add(l, g.gl_pathv[i]);
    globfree(&g);
    return st;
}

dt_status dt_file_list_glob(const char *patterns, dt_file_list *out)
{
    memset(out, 0, sizeof *out);
    char *copy = strdup(patterns);
    if (!copy)
        return dt_error(DT_ERR_NOMEM, "no memory for the file list");
    dt_status st = DT_OK;
    char *save = NULL;
    for (char *p = strtok_r(copy, ",", &save); p && st == DT_OK; p = strtok_r(NULL, ",", &save))
        st = add_pattern(out, p);
    free(copy);
    if (st == DT_OK && out->n == 0)
        st = dt_error(DT_ERR_INVALID, "'%s' names no file", patterns);
    if (st)
        dt_file_list_free(out);
    return st;
}

void dt_file_list_free(dt_file_list *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->n; i++)
        free(l->paths[i]);
    free(l->paths);
    memset(l, 0, sizeof *l);
}

/* A source's own copy of its file names: a producer thread stuck in a read outlives the input
 * that listed them (dataset.c's prefetch hands it the pipeline), and names them in its error
 * when its read returns. */
static dt_status copy_names(const dt_file_list *from, dt_file_list *to)
{
    memset(to, 0, sizeof *to);
    for (int i = 0; i < from->n; i++)
        if (list_add(to, from->paths[i])) {
            dt_file_list_free(to);
            return DT_ERR_NOMEM;
        }
    return DT_OK;
}

dt_status dt_file_list_shard(dt_file_list *l, int num_shards, int index)
{
    if (num_shards < 1 || index < 0 || index >= num_shards)
        return dt_error(DT_ERR_INVALID, "file shard %d of %d", index, num_shards);
    if (index >= l->n)
        return dt_error(DT_ERR_INVALID, "%d files cannot give shard %d of %d a file", l->n, index,
                        num_shards);
    int kept = 0;
    for (int i = 0; i < l->n; i++) {
        if (i % num_shards == index)
            l->paths[kept++] = l->paths[i];
        else
            free(l->paths[i]);
    }
    l->n = kept;
    return DT_OK;
}

void dt_source_options_default(dt_source_options *o)
{
    memset(o, 0, sizeof *o);
    o->compression = DT_COMPRESSION_AUTO;
    o->num_parallel_reads = 1;
    o->fuse = true;
}

/* A stream can be read once: a second iteration has nothing to read it from. */
static dt_status stream_again(const char *name)
{
    return dt_error(DT_ERR_INVALID, "%s: a stream is read once, and this is a second pass over "
                    "it: cache the data (--cache) or train for one epoch", name);
}

/* Opens a file of the list: "-" is stdin (not ours to close). *stream says it can be read once
 * only (stdin, a FIFO, a character device). With streams_used, a stream is refused before it is
 * opened: opening a FIFO again would wait for a writer that never comes. */
dt_status dt_src_open_input(const char *path, bool streams_used, int *fd, bool *own, bool *stream)
{
    struct stat sb;
    bool is_stdin = strcmp(path, "-") == 0;
    *stream = is_stdin || (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode));
    if (*stream && streams_used)
        return stream_again(is_stdin ? "stdin" : path);
    if (is_stdin) {
        *fd = 0, *own = false;
        return DT_OK;
    }
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return dt_error(DT_ERR_IO, "%s: %s", path, strerror(errno));
    *own = true;
    return DT_OK;
}

dt_status dt_src_open_epoch(const char *path, int epoch, bool streams_used, int *fd, bool *own,
                            bool *stream)
{
    const char *at = strstr(path, "{epoch}");
    if (!at)
        return dt_src_open_input(path, streams_used, fd, own, stream);
    char name[4200];
    if (snprintf(name, sizeof name, "%.*s%d%s", (int)(at - path), path, epoch,
                 at + strlen("{epoch}")) >= (int)sizeof name)
        return dt_error(DT_ERR_INVALID, "%s: a path too long", path);
    return dt_src_open_input(name, false, fd, own, stream);
}

const char *dt_src_name_of(const dt_file_list *files, uint32_t file)
{
    if ((int)file >= files->n)
        return "?";
    return strcmp(files->paths[file], "-") == 0 ? "stdin" : files->paths[file];
}

void dt_src_count_bad(const dt_source_options *o)
{
    if (o->bad_records)
        __atomic_add_fetch(o->bad_records, 1, __ATOMIC_RELAXED);
}

void dt_src_note_reading(const dt_source_options *o, const char *path)
{
    if (o->reading)
        __atomic_store_n(o->reading, path, __ATOMIC_RELEASE);
}

static double monotonic_secs(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

dt_status dt_src_await_data(const dt_source_options *o, int fd, const char *name,
                            const char *where)
{
    if (o->stall_secs <= 0)
        return DT_OK;
    double deadline = monotonic_secs() + o->stall_secs;
    for (;;) {
        double left = deadline - monotonic_secs();
        if (left <= 0)
            return dt_error(DT_ERR_IO, "%s: no data for %g s at %s (input_timeout): the input "
                            "has stalled", name, o->stall_secs, where);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        /* Rounded up, so a wait never ends just short of the deadline and spins. */
        int r = poll(&p, 1, (int)(left * 1000.0) + 1);
        if (r < 0 && errno != EINTR)
            return dt_error(DT_ERR_IO, "%s: poll: %s", name, strerror(errno));
        /* Data, the writer's end closed (POLLHUP) or an error: read() says which. */
        if (r > 0)
            return DT_OK;
    }
}

/* ---- TFRecord ---- */

struct tfr_slot {
    dt_tfrecord_reader *reader;
    int fd;
    bool own;
    uint32_t file;
};

struct tfr_state {
    const dt_file_list *files; /* &names */
    dt_file_list names;        /* copy_names' */
    const dt_file_list *given; /* the caller's list, which a fused stage is made over */
    dt_source_options o;
    struct tfr_slot *slots;
    int n_slots, cursor, next_file;
    uint64_t index;
    bool read_stream; /* a stream was consumed in an earlier iteration */
    bool has_stream;
    int epoch;        /* passes begun before this one */
};

static void tfr_close_slot(struct tfr_slot *s)
{
    if (!s->reader)
        return;
    dt_tfrecord_close(s->reader);
    if (s->own)
        close(s->fd);
    s->reader = NULL;
}

static dt_status tfr_open_slot(struct tfr_state *s, struct tfr_slot *slot)
{
    uint32_t file = (uint32_t)s->next_file++;
    bool stream;
    dt_src_note_reading(&s->o, s->files->paths[file]);
    dt_status st = dt_src_open_epoch(s->files->paths[file], s->epoch, s->read_stream, &slot->fd,
                                     &slot->own, &stream);
    if (st)
        return st;
    s->has_stream |= stream;
    st = dt_tfrecord_open_fd(slot->fd, dt_src_name_of(s->files, file), s->o.compression,
                                 s->o.max_record_bytes, &slot->reader);
    if (st && slot->own)
        close(slot->fd);
    slot->file = file;
    return st;
}

static dt_status tfr_next(dt_dataset *ds, dt_elem **out)
{
    struct tfr_state *s = ds->state;
    int empty_visits = 0;
    for (;;) {
        struct tfr_slot *slot = &s->slots[s->cursor];
        if (!slot->reader) {
            if (s->next_file >= s->files->n) {
                /* Every slot empty and no file left: the iteration is over. */
                if (++empty_visits >= s->n_slots)
                    return DT_END;
                s->cursor = (s->cursor + 1) % s->n_slots;
                continue;
            }
            dt_status st = tfr_open_slot(s, slot);
            if (st)
                return st;
        }
        empty_visits = 0;
        const uint8_t *data;
        size_t n;
        uint64_t offset;
        dt_status st = dt_tfrecord_next(slot->reader, &data, &n, &offset);
        if (st == DT_END) {
            /* As tf.data's interleave: the slot takes the next file, the turn passes on. */
            tfr_close_slot(slot);
            s->cursor = (s->cursor + 1) % s->n_slots;
            continue;
        }
        if (st) {
            /* Only bad data is skipped: I/O errors and the like still stop the run. */
            if (!s->o.skip_bad_records || st != DT_ERR_FORMAT)
                return st;
            dt_src_count_bad(&s->o);
            /* Past a data CRC mismatch the framing holds; any other error ends the file. */
            if (!dt_tfrecord_can_continue(slot->reader))
                tfr_close_slot(slot);
            continue;
        }
        dt_elem *e = dt_elem_alloc(1, 0, 0, n);
        if (!e)
            return dt_error(DT_ERR_NOMEM, "no memory for a record of %zu bytes", n);
        memcpy(e->raw, data, n);
        e->raw_off[1] = n;
        e->file = slot->file;
        e->pos = offset;
        e->index = s->index++;
        s->cursor = (s->cursor + 1) % s->n_slots;
        *out = e;
        return DT_OK;
    }
}

static dt_status tfr_reset(dt_dataset *ds)
{
    struct tfr_state *s = ds->state;
    for (int i = 0; i < s->n_slots; i++)
        tfr_close_slot(&s->slots[i]);
    s->read_stream = s->read_stream || s->has_stream;
    s->cursor = s->next_file = 0;
    s->epoch++;
    s->index = 0;
    return DT_OK;
}

static void tfr_destroy(dt_dataset *ds)
{
    struct tfr_state *s = ds->state;
    if (!s)
        return;
    for (int i = 0; i < s->n_slots; i++)
        tfr_close_slot(&s->slots[i]);
    free(s->slots);
    dt_file_list_free(&s->names);
    free(s);
}

static const dt_dataset_ops tfr_ops = {"tfrecord", tfr_next, tfr_reset, tfr_destroy};

dt_status dt_dataset_tfrecord(const dt_file_list *files, const dt_source_options *o,
                              dt_dataset **out)
{
    *out = NULL;
    if (o->num_parallel_reads < 1 || o->num_parallel_reads > 1024)
        return dt_error(DT_ERR_INVALID, "num_parallel_reads %d is not in 1..1024",
                        o->num_parallel_reads);
    struct tfr_state *s = calloc(1, sizeof *s);
    if (!s || copy_names(files, &s->names)) {
        free(s);
        return dt_error(DT_ERR_NOMEM, "no memory for a tfrecord dataset");
    }
    s->files = &s->names;
    s->given = files;
    s->o = *o;
    s->n_slots = o->num_parallel_reads < files->n ? o->num_parallel_reads : files->n;
    if (s->n_slots < 1)
        s->n_slots = 1;
    if (!(s->slots = calloc((size_t)s->n_slots, sizeof *s->slots))) {
        dt_file_list_free(&s->names);
        free(s);
        return dt_error(DT_ERR_NOMEM, "no memory for a tfrecord dataset");
    }
    return dt_dataset_create(&tfr_ops, NULL, s, out);
}

/* ---- Example parsing ---- */

/* Examples parsed after batching are raw rows through a row parser (parse_rows.c) whose records
 * are decoded by the spec; it needs no scratch of its own. */
static char no_scratch;
static void *example_scratch_new(void *ctx)
{
    (void)ctx;
    return &no_scratch;
}
static void example_scratch_free(void *ctx, void *scratch) { (void)ctx, (void)scratch; }
static dt_status example_record(void *ctx, void *scratch, const uint8_t *record, size_t n_bytes,
                                dt_rowbuf *out)
{
    (void)scratch;
    return dt_example_parse(ctx, record, n_bytes, out);
}

/* Whether the file holds uncompressed records under compression c: AUTO reads its first bytes
 * as the reader would. */
static bool plain_tfrecord_file(const char *path, dt_compression c)
{
    struct stat sb;
    if (strcmp(path, "-") == 0 || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return false;
    if (c == DT_COMPRESSION_NONE)
        return true;
    if (c != DT_COMPRESSION_AUTO)
        return false;
    uint8_t magic[2] = {0, 0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t got = read(fd, magic, 2);
    close(fd);
    return got >= 0 && !(got == 2 && magic[0] == 0x1f && magic[1] == 0x8b);
}

/* tfrecord -> batch -> parse over plain files, not yet iterated: one fused stage does it all
 * (tfr_batch.c). */
static bool can_fuse(const dt_dataset *input, const dt_file_list *files, const dt_source_options *o,
                     int64_t *batch, bool *drop)
{
    if (!o->fuse || !dt_dataset_batch_params(input, batch, drop) || input->started ||
        input->iteration || !input->input || input->input->ops != &tfr_ops ||
        input->input->started || input->input->iteration)
        return false;
    const struct tfr_state *t = input->input->state;
    if (t->given != files || t->n_slots != 1 || t->o.skip_bad_records != o->skip_bad_records ||
        t->o.bad_records != o->bad_records)
        return false;
    for (int i = 0; i < files->n; i++)
        if (!plain_tfrecord_file(files->paths[i], t->o.compression))
            return false;
    return true;
}

dt_status dt_dataset_parse_examples(dt_dataset *input, const dt_example_spec *spec,
                                    const dt_file_list *files, int num_parallel_calls,
                                    const dt_source_options *o, dt_dataset **out)
{
    *out = NULL;
    int64_t batch;
    bool drop;
    if (can_fuse(input, files, o, &batch, &drop)) {
        const struct tfr_state *t = input->input->state;
        dt_source_options so = t->o;
        dt_status st = dt_src_tfrecord_batches(files, &so, spec, batch, drop, num_parallel_calls,
                                               out);
        dt_dataset_destroy(input);
        return st;
    }
    dt_row_parser rows = {.ctx = (void *)spec, .n_dense = spec->n_dense,
                          .scratch_new = example_scratch_new,
                          .scratch_free = example_scratch_free,
                          .parse_record = example_record};
    return dt_dataset_parse_rows(input, &rows, false, NULL, files, num_parallel_calls, o, out);
}

/* ---- Text sources ---- */

#define TEXT_CHUNK (1u << 20)

/* Reads a list of text files chunk by chunk; the format's parser turns complete lines into rows
 * held in `rows`, which next() hands out one element per row. */
struct text_state {
    const dt_file_list *files; /* &names */
    dt_file_list names;        /* copy_names' */
    dt_source_options o;
    int file;          /* the file being read, or -1 before the first */
    int fd;
    bool own, eof, read_stream, has_stream;
    int epoch;         /* passes begun before this one */
    bool stream;       /* the file being read is a stream: reads wait with a deadline */
    bool skipping;     /* discarding the rest of a bad line up to its newline */
    bool ended;        /* the iteration is over until a reset */
    dt_status pending; /* an error to report once the rows parsed before it are handed out */
    char pending_msg[1024];
    char *buf;
    size_t len;        /* bytes in buf */
    uint64_t line;     /* the line number of buf's first byte */
    uint64_t cur_line; /* the line a text_line_fn is given */
    dt_rowbuf rows;
    int emitted;       /* rows of `rows` already handed out */
    uint64_t index;
    /* The format: parses complete lines of buf, appending rows; consumes them. */
    dt_status (*parse)(struct text_state *s, size_t *consumed, uint64_t *lines);
    dt_libsvm_options lo;
    dt_csv_options co;
    int csv_columns;   /* fields per line, set by the first file */
    const char *label_name;
    bool header_pending;
    int64_t hash_buckets; /* criteo */
    /* CTR CSV: the layout from the first file's header, and what it is built from. */
    dt_ctr_csv ctr;
    bool ctr_ready;
    dt_ctr_csv_options ctr_opts;
    /* Raw lines: the header every file opens with, when there is one. */
    dt_text_header *header;
};

static void text_close(struct text_state *s)
{
    if (s->file >= 0 && s->own)
        close(s->fd);
    s->file = -1;
    s->len = 0;
}

/* Opens the next file; DT_END when there is none. */
static dt_status text_open_next(struct text_state *s, int next)
{
    text_close(s);
    s->skipping = false;
    if (next >= s->files->n) {
        s->ended = true;
        return DT_END;
    }
    bool stream;
    dt_src_note_reading(&s->o, s->files->paths[next]);
    dt_status st = dt_src_open_epoch(s->files->paths[next], s->epoch, s->read_stream, &s->fd,
                                     &s->own, &stream);
    if (st)
        return st;
    s->has_stream |= stream;
    s->stream = stream;
    s->file = next;
    s->eof = false;
    s->line = 1;
    s->header_pending = s->co.header;
    return DT_OK;
}

/* Reads more of the current file into buf. */
static dt_status text_fill(struct text_state *s)
{
    for (;;) {
        if (s->stream) {
            char where[48];
            snprintf(where, sizeof where, "line %llu", (unsigned long long)s->line);
            dt_status st = dt_src_await_data(&s->o, s->fd,
                                             dt_src_name_of(s->files, (uint32_t)s->file), where);
            if (st)
                return st;
        }
        ssize_t got = read(s->fd, s->buf + s->len, TEXT_CHUNK - s->len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return dt_error(DT_ERR_IO, "%s: %s", dt_src_name_of(s->files, (uint32_t)s->file),
                            strerror(errno));
        if (got == 0)
            s->eof = true;
        s->len += (size_t)got;
        return DT_OK;
    }
}

/* Drops buf's bytes up to and including the next newline: the rest of a bad line. Without a
 * newline in buf the line goes on: keep skipping what the next reads bring. */
static void text_skip_line(struct text_state *s)
{
    char *nl = memchr(s->buf, '\n', s->len);
    size_t end = nl ? (size_t)(nl - s->buf) + 1 : s->len;
    memmove(s->buf, s->buf + end, s->len - end);
    s->len -= end;
    s->skipping = !nl && !s->eof;
    if (nl)
        s->line++;
}

static dt_status text_next(dt_dataset *ds, dt_elem **out)
{
    struct text_state *s = ds->state;
    if (s->ended)
        return DT_END;
    for (;;) {
        if (s->emitted < s->rows.n) {
            int r = s->emitted++;
            size_t nnz = (size_t)(s->rows.sp_row[r + 1] - s->rows.sp_row[r]);
            size_t nb = s->rows.raw_off[r + 1] - s->rows.raw_off[r];
            dt_elem *e = dt_elem_alloc(1, s->rows.n_dense, nnz, nb);
            if (!e)
                return dt_error(DT_ERR_NOMEM, "no memory for a row");
            /* Dense-only rows have no sparse arrays and sparse-only rows no dense ones. */
            if (s->rows.n_dense)
                memcpy(e->dense, s->rows.dense + (size_t)r * s->rows.n_dense,
                       (size_t)s->rows.n_dense * sizeof(float));
            e->labels[0] = s->rows.labels[r];
            if (nnz) {
                memcpy(e->sp_ids, s->rows.sp_ids + s->rows.sp_row[r], nnz * sizeof(int64_t));
                memcpy(e->sp_vals, s->rows.sp_vals + s->rows.sp_row[r], nnz * sizeof(float));
            }
            e->sp_row[1] = (int64_t)nnz;
            if (nb)
                memcpy(e->raw, s->rows.raw + s->rows.raw_off[r], nb);
            e->raw_off[1] = nb;
            /* Text rows are named by their index (the row number); pos stays 0. */
            e->file = s->rows.file;
            e->index = s->index++;
            *out = e;
            return DT_OK;
        }
        dt_rowbuf_clear(&s->rows);
        s->emitted = 0;
        if (s->pending) {
            dt_status st = s->pending;
            s->pending = DT_OK;
            return dt_error(st, "%s", s->pending_msg);
        }
        if (s->file < 0 || (s->eof && s->len == 0)) {
            dt_status st = text_open_next(s, s->file + 1);
            if (st)
                return st;
        }
        if (!s->eof) {
            if (s->len == TEXT_CHUNK) {
                /* A whole buffer without a line end: no parser takes lines this long. */
                dt_status st = dt_error(DT_ERR_FORMAT, "%s: line %llu is longer than %u bytes",
                                        dt_src_name_of(s->files, (uint32_t)s->file),
                                        (unsigned long long)s->line, TEXT_CHUNK);
                if (!s->o.skip_bad_records)
                    return st;
                dt_src_count_bad(&s->o);
                s->len = 0;
                s->skipping = true;
            }
            dt_status st = text_fill(s);
            if (st)
                return st;
            if (s->skipping) {
                text_skip_line(s);
                continue;
            }
        }
        s->rows.file = (uint32_t)s->file;
        s->rows.pos = s->line;
        size_t consumed = 0;
        uint64_t lines = 0;
        dt_status st = s->parse(s, &consumed, &lines);
        memmove(s->buf, s->buf + consumed, s->len - consumed);
        s->len -= consumed;
        s->line += lines;
        if (st && st != DT_ERR_NOMEM) {
            /* A bad line is skipped on request; a bad option (DT_ERR_INVALID: a label column
             * that is not there) is never a bad line. */
            if (!s->o.skip_bad_records || st != DT_ERR_FORMAT) {
                /* The lines before the bad one were good: their rows go out first. */
                dt_error_prefix(st, "%s", dt_src_name_of(s->files, (uint32_t)s->file));
                snprintf(s->pending_msg, sizeof s->pending_msg, "%s", dt_last_error());
                s->pending = st;
                continue;
            }
            dt_src_count_bad(&s->o);
            text_skip_line(s);
        } else if (st) {
            return st;
        }
        if (s->eof && s->len > 0 && consumed == 0 && st == DT_OK)
            s->len = 0; /* nothing parseable left (cannot happen with a final-line parser) */
    }
}

static dt_status text_reset(dt_dataset *ds)
{
    struct text_state *s = ds->state;
    text_close(s);
    dt_rowbuf_clear(&s->rows);
    s->emitted = 0;
    s->pending = DT_OK;
    s->ended = s->skipping = false;
    s->read_stream = s->read_stream || s->has_stream;
    s->index = 0;
    s->epoch++;
    return DT_OK;
}

static void text_destroy(dt_dataset *ds)
{
    struct text_state *s = ds->state;
    if (!s)
        return;
    text_close(s);
    dt_rowbuf_free(&s->rows);
    dt_file_list_free(&s->names);
    free(s->buf);
    free(s);
}

static const dt_dataset_ops libsvm_ops = {"libsvm", text_next, text_reset, text_destroy};
static const dt_dataset_ops csv_ops = {"csv", text_next, text_reset, text_destroy};
static const dt_dataset_ops criteo_ops = {"criteo", text_next, text_reset, text_destroy};
static const dt_dataset_ops ctr_csv_ops = {"csv", text_next, text_reset, text_destroy};
static const dt_dataset_ops lines_ops = {"text_lines", text_next, text_reset, text_destroy};

static dt_status libsvm_parse(struct text_state *s, size_t *consumed, uint64_t *lines)
{
    return dt_libsvm_parse_buffer(s->buf, s->len, s->eof, &s->lo, s->line, &s->rows, consumed,
                                  lines);
}

static dt_status new_text_state(const dt_file_list *files, const dt_source_options *o,
                                int n_dense, struct text_state **out)
{
    struct text_state *s = calloc(1, sizeof *s);
    if (!s || !(s->buf = malloc(TEXT_CHUNK))) {
        free(s);
        return dt_error(DT_ERR_NOMEM, "no memory for a text dataset");
    }
    if (copy_names(files, &s->names)) {
        free(s->buf);
        free(s);
        return dt_error(DT_ERR_NOMEM, "no memory for a text dataset");
    }
    s->files = &s->names;
    s->o = *o;
    s->file = -1;
    dt_rowbuf_init(&s->rows, n_dense);
    *out = s;
    return DT_OK;
}

dt_status dt_dataset_libsvm(const dt_file_list *files, const dt_libsvm_options *lo,
                            const dt_source_options *o, dt_dataset **out)
{
    *out = NULL;
    struct text_state *s;
    dt_status st = new_text_state(files, o, lo->n_dense, &s);
    if (st)
        return st;
    s->lo = *lo;
    s->parse = libsvm_parse;
    return dt_dataset_create(&libsvm_ops, NULL, s, out);
}

/* The complete lines of s->buf, each through line_fn, as a text format's parse: errors are
 * prefixed with the line's number, and a final line without '\n' counts only at the end of the
 * file. */
typedef dt_status (*text_line_fn)(struct text_state *s, const char *line, size_t len);

static dt_status each_line(struct text_state *s, text_line_fn line_fn, size_t *consumed,
                           uint64_t *lines)
{
    size_t at = 0;
    *consumed = 0, *lines = 0;
    for (;;) {
        char *nl = memchr(s->buf + at, '\n', s->len - at);
        if (!nl && !(s->eof && at < s->len))
            return DT_OK;
        size_t end = nl ? (size_t)(nl - s->buf) : s->len;
        s->cur_line = s->line + *lines;
        dt_status st = line_fn(s, s->buf + at, end - at);
        if (st)
            return dt_error_prefix(st, "line %llu", (unsigned long long)(s->line + *lines));
        at = nl ? end + 1 : end;
        *consumed = at;
        (*lines)++;
        if (!nl)
            return DT_OK;
    }
}

/* Criteo TSV: one row per line. */
static dt_status criteo_line(struct text_state *s, const char *line, size_t len)
{
    dt_status st = dt_criteo_parse_line(line, len, s->hash_buckets, &s->rows);
    return st == DT_END ? DT_OK : st;
}

static dt_status criteo_parse(struct text_state *s, size_t *consumed, uint64_t *lines)
{
    return each_line(s, criteo_line, consumed, lines);
}

dt_status dt_dataset_criteo(const dt_file_list *files, int64_t hash_buckets,
                            const dt_source_options *o, dt_dataset **out)
{
    *out = NULL;
    if (hash_buckets <= DT_CRITEO_NUMERIC)
        return dt_error(DT_ERR_INVALID, "--hash-buckets: criteo data needs the rows its ids are "
                        "hashed into (more than %d), got %lld", DT_CRITEO_NUMERIC,
                        (long long)hash_buckets);
    struct text_state *s;
    dt_status st = new_text_state(files, o, 0, &s);
    if (st)
        return st;
    s->hash_buckets = hash_buckets;
    s->parse = criteo_parse;
    return dt_dataset_create(&criteo_ops, NULL, s, out);
}

/* A file's header line for CTR CSV: the first file's sets the layout, the others must give the
 * same one. */
static dt_status ctr_csv_header(struct text_state *s, const char *line, size_t len)
{
    const dt_ctr_csv_options *o = &s->ctr_opts;
    dt_ctr_csv layout;
    dt_status st = dt_ctr_csv_from_header(line, len, o->numeric, o->categorical, o->label,
                                          o->delimiter, o->log1p, o->hash_buckets, &layout);
    if (st)
        return st;
    if (s->ctr_ready && (layout.n_columns != s->ctr.n_columns ||
                         layout.label_column != s->ctr.label_column ||
                         memcmp(layout.column_of, s->ctr.column_of, sizeof layout.column_of) != 0))
        return dt_error(DT_ERR_FORMAT, "the header places the columns otherwise than the first "
                        "file's");
    s->ctr = layout;
    s->ctr_ready = true;
    return DT_OK;
}

/* CTR CSV: a header line per file, then one row per line. */
static dt_status ctr_csv_line(struct text_state *s, const char *line, size_t len)
{
    if (len == 0 || (len == 1 && line[0] == '\r'))
        return DT_OK;
    if (s->header_pending) {
        s->header_pending = false;
        return ctr_csv_header(s, line, len);
    }
    return dt_ctr_csv_parse_line(&s->ctr, line, len, &s->rows);
}

static dt_status ctr_csv_parse(struct text_state *s, size_t *consumed, uint64_t *lines)
{
    return each_line(s, ctr_csv_line, consumed, lines);
}

dt_status dt_dataset_ctr_csv(const dt_file_list *files, const dt_ctr_csv_options *co,
                             const dt_source_options *o, dt_dataset **out)
{
    *out = NULL;
    struct text_state *s;
    dt_status st = new_text_state(files, o, 0, &s);
    if (st)
        return st;
    s->ctr_opts = *co;
    s->co.header = true; /* every file opens with its header */
    s->parse = ctr_csv_parse;
    return dt_dataset_create(&ctr_csv_ops, NULL, s, out);
}

/* CSV: one line at a time through the CSV parser (numbers only; no quoted newlines). */
static dt_status csv_header(struct text_state *s, const char *line, size_t len)
{
    char (*names)[DT_CSV_NAME_CAP] = malloc(4096 * sizeof *names);
    int n = 0;
    if (!names)
        return dt_error(DT_ERR_NOMEM, "no memory for a CSV header");
    dt_status st = dt_csv_parse_header(line, len, &s->co, names, 4096, &n);
    if (st == DT_END) {
        st = DT_OK; /* a blank line before the header: the header is still to come */
    } else {
        s->header_pending = false;
        if (st == DT_OK && s->label_name && s->co.label_column < 0 && s->file == 0) {
            s->co.label_column = dt_csv_find_column(names, n, s->label_name);
            if (s->co.label_column < 0)
                st = dt_error(DT_ERR_INVALID, "no column is called '%s'", s->label_name);
        }
        if (st == DT_OK && s->csv_columns == 0)
            s->csv_columns = n;
        else if (st == DT_OK && n != s->csv_columns)
            st = dt_error(DT_ERR_FORMAT, "the header has %d columns, the first file had %d", n,
                          s->csv_columns);
    }
    free(names);
    return st;
}

static dt_status csv_line(struct text_state *s, const char *line, size_t len)
{
    if (s->header_pending)
        return csv_header(s, line, len);
    if (s->csv_columns == 0) {
        int n = 0;
        dt_status st = dt_csv_count_fields(line, len, &s->co, &n);
        if (st != DT_OK && st != DT_END)
            return st;
        s->csv_columns = n;
    }
    if (s->rows.n_dense == 0 && s->csv_columns > 0)
        s->rows.n_dense = s->csv_columns - (s->co.label_column >= 0 ? 1 : 0);
    dt_status st = s->csv_columns ? dt_csv_parse_line(line, len, &s->co, s->csv_columns, &s->rows)
                                  : DT_OK;
    return st == DT_END ? DT_OK : st;
}

static dt_status csv_parse(struct text_state *s, size_t *consumed, uint64_t *lines)
{
    return each_line(s, csv_line, consumed, lines);
}

dt_status dt_dataset_csv(const dt_file_list *files, const dt_csv_options *co,
                         const char *label_name, const dt_source_options *o, dt_dataset **out)
{
    *out = NULL;
    struct text_state *s;
    dt_status st = new_text_state(files, o, 0, &s);
    if (st)
        return st;
    s->co = *co;
    s->label_name = label_name;
    s->parse = csv_parse;
    return dt_dataset_create(&csv_ops, NULL, s, out);
}

/* ---- Raw lines ---- */

/* A file's header line: the first file's is kept, the others must repeat it. */
static dt_status lines_header(struct text_state *s, const char *line, size_t len)
{
    dt_text_header *h = s->header;
    if (len > 0 && line[len - 1] == '\r')
        len--;
    if (h->set) {
        /* Not a bad line to skip: the file's every line would be read by another layout. */
        if (len != h->len || memcmp(line, h->line, len) != 0)
            return dt_error(DT_ERR_INVALID, "the header differs from the first file's (%s)",
                            dt_src_name_of(s->files, h->file));
        return DT_OK;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return dt_error(DT_ERR_NOMEM, "no memory for a header line");
    memcpy(copy, line, len);
    copy[len] = '\0';
    h->line = copy;
    h->len = len;
    h->file = (uint32_t)s->file;
    h->set = true;
    return DT_OK;
}

static dt_status lines_line(struct text_state *s, const char *line, size_t len)
{
    size_t blank = 0;
    while (blank < len && (line[blank] == ' ' || line[blank] == '\t' || line[blank] == '\r'))
        blank++;
    if (blank == len)
        return DT_OK;
    if (s->header_pending) {
        s->header_pending = false;
        return lines_header(s, line, len);
    }
    uint8_t where[DT_TEXT_LINE_PREFIX];
    dt_text_line_where(where, (uint32_t)s->file, s->cur_line);
    dt_status st = dt_rowbuf_add_row(&s->rows, NULL);
    if (st == DT_OK && (st = dt_rowbuf_add_raw(&s->rows, where, sizeof where)) == DT_OK)
        st = dt_rowbuf_add_raw(&s->rows, line, len);
    return st;
}

static dt_status lines_parse(struct text_state *s, size_t *consumed, uint64_t *lines)
{
    return each_line(s, lines_line, consumed, lines);
}

dt_status dt_dataset_text_lines(const dt_file_list *files, dt_text_header *header,
                                const dt_source_options *o, dt_dataset **out)
{
    *out = NULL;
    struct text_state *s;
    dt_status st = new_text_state(files, o, 0, &s);
    if (st)
        return st;
    s->header = header;
    s->co.header = header != NULL;
    s->parse = lines_parse;
    return dt_dataset_create(&lines_ops, NULL, s, out);
}

void dt_text_header_free(dt_text_header *h)
{
    free(h->line);
    memset(h, 0, sizeof *h);
}
