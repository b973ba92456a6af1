/* TFRecord reader and writer (see include/dtrain/tfrecord.h).
 *
 * The reader keeps a window [lo, hi) of the (decompressed) stream in one buffer. A record is
 * returned as a pointer into that window, so records are never copied: when the window runs out
 * the unread tail moves to the buffer's front and more is read behind it. The buffer starts at
 * 1 MiB and doubles only when it is full of real data and a record still needs more, so its size
 * stays within twice the largest record actually present, whatever a header claims. Compressed
 * files go through zlib's inflate over read(), not gzread, because gzread wants a seekable file
 * for some of its paths and hides where in the compressed input an error sits. */
#include "dtrain/tfrecord.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../core/bytes.h"
#include "../core/crc32c.h"

#define IO_CHUNK ((size_t)1 << 20)
#define HEADER_BYTES DT_TFRECORD_HEADER_BYTES /* u64 length, u32 masked crc of the length */
#define FOOTER_BYTES DT_TFRECORD_FOOTER_BYTES /* u32 masked crc of the data */

dt_status dt_compression_parse(const char *name, dt_compression *out)
{
    static const struct {
        const char *name;
        dt_compression c;
    } names[] = {
        {"auto", DT_COMPRESSION_AUTO}, {"none", DT_COMPRESSION_NONE}, {"", DT_COMPRESSION_NONE},
        {"gzip", DT_COMPRESSION_GZIP}, {"zlib", DT_COMPRESSION_ZLIB},
    };
    if (!name)
        name = "";
    /* Case-insensitive, so TF's "GZIP" and "ZLIB" match as dtrain's lower-case names do. */
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcasecmp(name, names[i].name) == 0) {
            *out = names[i].c;
            return DT_OK;
        }
    }
    return dt_error(DT_ERR_INVALID, "compression '%s': expected auto, none, gzip or zlib "
                    "(or TensorFlow's \"\", GZIP, ZLIB)", name);
}

const char *dt_compression_name(dt_compression c)
{
    switch (c) {
    case DT_COMPRESSION_AUTO: return "auto";
    case DT_COMPRESSION_NONE: return "none";
    case DT_COMPRESSION_GZIP: return "gzip";
    case DT_COMPRESSION_ZLIB: return "zlib";
    }
    return "unknown";
}

/* ---- reader ---- */

struct dt_tfrecord_reader {
    int fd, own_fd;
    char *name;
    dt_compression comp; /* NONE, GZIP or ZLIB once open */
    size_t max_record;
    uint8_t *buf;        /* the stream window: bytes [lo, hi) are read and not yet returned */
    size_t cap, lo, hi;
    uint64_t buf_off;    /* stream offset of buf[0] */
    int eof;             /* the stream has no more bytes */
    dt_status sticky;    /* a final error: every later call returns it */
    /* compressed input */
    z_stream z;
    int z_ready;
    uint8_t *zin;
    size_t zin_cap;
    int in_eof;          /* read() has returned 0 */
    int member_started;  /* inflate has consumed bytes of a gzip member / zlib stream not yet ended */
    uint64_t file_off;   /* bytes read from the descriptor */
};

/* read() until at least one byte, end of file or an error; handles EINTR. */
static dt_status read_fd(dt_tfrecord_reader *r, uint8_t *dst, size_t n, size_t *got)
{
    for (;;) {
        ssize_t k = read(r->fd, dst, n);
        if (k >= 0) {
            *got = (size_t)k;
            r->file_off += (uint64_t)k;
            return DT_OK;
        }
        if (errno != EINTR)
            return dt_error(DT_ERR_IO, "%s: offset %llu: read: %s", r->name,
                            (unsigned long long)r->file_off, strerror(errno));
    }
}

static const char *comp_label(const dt_tfrecord_reader *r)
{
    return r->comp == DT_COMPRESSION_GZIP ? "gzip" : "zlib";
}

/* Appends decompressed bytes at buf[hi, cap) (which must not be empty): at least one, or sets eof. */
static dt_status fill(dt_tfrecord_reader *r)
{
    if (r->comp == DT_COMPRESSION_NONE) {
        size_t got;
        dt_status st = read_fd(r, r->buf + r->hi, r->cap - r->hi, &got);
        if (st)
            return st;
        if (got == 0)
            r->eof = 1;
        r->hi += got;
        return DT_OK;
    }
    for (;;) {
        if (r->z.avail_in == 0 && !r->in_eof) {
            size_t got;
            dt_status st = read_fd(r, r->zin, r->zin_cap, &got);
            if (st)
                return st;
            if (got == 0)
                r->in_eof = 1;
            r->z.next_in = r->zin;
            r->z.avail_in = (uInt)got;
        }
        if (r->z.avail_in == 0 && r->in_eof) {
            /* The input may end only between members: an unfinished one is a cut-off file. */
            if (r->member_started)
                return dt_error(DT_ERR_FORMAT, "%s: offset %llu: truncated %s stream: the "
                                "compressed file ends (after %llu bytes) inside a compressed block",
                                r->name, (unsigned long long)(r->buf_off + r->hi), comp_label(r),
                                (unsigned long long)r->file_off);
            r->eof = 1;
            return DT_OK;
        }
        uInt in_before = r->z.avail_in;
        r->z.next_out = r->buf + r->hi;
        size_t room = r->cap - r->hi; /* avail_out is 32 bits */
        r->z.avail_out = (uInt)(room < ((size_t)1 << 30) ? room : ((size_t)1 << 30));
        uInt out_before = r->z.avail_out;
        int ret = inflate(&r->z, Z_NO_FLUSH);
        size_t produced = out_before - r->z.avail_out;
        r->hi += produced;
        if (r->z.avail_in != in_before)
            r->member_started = 1;
        if (ret == Z_STREAM_END) {
            /* Concatenated gzip members (cat a.gz b.gz) are one stream, as gunzip reads them. */
            inflateReset(&r->z);
            r->member_started = 0;
        } else if (ret != Z_OK && !(ret == Z_BUF_ERROR && r->z.avail_in == 0)) {
            return dt_error(DT_ERR_FORMAT, "%s: offset %llu: corrupt %s stream (compressed byte "
                            "%llu): %s", r->name, (unsigned long long)(r->buf_off + r->hi),
                            comp_label(r), (unsigned long long)(r->file_off - r->z.avail_in),
                            r->z.msg ? r->z.msg : zError(ret));
        }
        if (produced)
            return DT_OK;
    }
}

/* Makes the window hold at least k bytes, or everything up to the end of the stream. */
static dt_status need(dt_tfrecord_reader *r, size_t k)
{
    while (r->hi - r->lo < k && !r->eof) {
        if (r->hi == r->cap && r->lo > 0) {
            size_t keep = r->hi - r->lo;
            memmove(r->buf, r->buf + r->lo, keep);
            r->buf_off += r->lo;
            r->lo = 0;
            r->hi = keep;
        }
        if (r->hi == r->cap) {
            /* Full of real data and the record needs more: only now is growing justified. */
            size_t grown = r->cap * 2 < k ? r->cap * 2 : k;
            uint8_t *nb = realloc(r->buf, grown);
            if (!nb)
                return dt_error(DT_ERR_NOMEM, "%s: offset %llu: no memory for a record of %zu "
                                "bytes", r->name, (unsigned long long)(r->buf_off + r->lo), k);
            r->buf = nb;
            r->cap = grown;
        }
        dt_status st = fill(r);
        if (st)
            return st;
    }
    return DT_OK;
}

static dt_status reader_open(int fd, int own_fd, const char *name, dt_compression c,
                             size_t max_record_bytes, dt_tfrecord_reader **out)
{
    dt_status st;
    dt_tfrecord_reader *r = calloc(1, sizeof *r);
    if (!r) {
        if (own_fd)
            close(fd);
        return dt_error(DT_ERR_NOMEM, "%s: no memory for a reader", name);
    }
    r->fd = fd;
    r->own_fd = own_fd;
    /* A limit near SIZE_MAX would let header + length + footer overflow. */
    r->max_record = max_record_bytes ? max_record_bytes : DT_TFRECORD_DEFAULT_MAX_RECORD_BYTES;
    if (r->max_record > SIZE_MAX / 2)
        r->max_record = SIZE_MAX / 2;
    r->name = strdup(name);
    /* 1 MiB reads, but a small regular file (one of many shards, say) gets buffers of its own
     * size: the window grows later if a record needs more. */
    struct stat sb;
    size_t io = IO_CHUNK;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size < IO_CHUNK)
        io = sb.st_size < 4096 ? 4096 : (size_t)sb.st_size;
    r->cap = r->zin_cap = io;
    r->buf = malloc(r->cap);
    if (!r->name || !r->buf) {
        st = dt_error(DT_ERR_NOMEM, "%s: no memory for a reader", name);
        goto fail;
    }
    if (c == DT_COMPRESSION_AUTO) {
        /* Look at the first two bytes; they stay in the window (or move to zin for gzip). */
        c = DT_COMPRESSION_NONE;
        while (r->hi < 2) {
            size_t got;
            if ((st = read_fd(r, r->buf + r->hi, 2 - r->hi, &got)))
                goto fail;
            if (got == 0)
                break;
            r->hi += got;
        }
        if (r->hi == 2 && r->buf[0] == 0x1f && r->buf[1] == 0x8b)
            c = DT_COMPRESSION_GZIP;
        if (r->hi < 2)
            r->eof = 1; /* read() returned 0: nothing more will come */
    }
    if (c != DT_COMPRESSION_NONE && c != DT_COMPRESSION_GZIP && c != DT_COMPRESSION_ZLIB) {
        st = dt_error(DT_ERR_INVALID, "%s: invalid compression %d", name, (int)c);
        goto fail;
    }
    r->comp = c;
    if (c != DT_COMPRESSION_NONE) {
        r->zin = malloc(r->zin_cap);
        if (!r->zin) {
            st = dt_error(DT_ERR_NOMEM, "%s: no memory for a reader", name);
            goto fail;
        }
        memcpy(r->zin, r->buf, r->hi); /* the bytes AUTO looked at */
        r->z.next_in = r->zin;
        r->z.avail_in = (uInt)r->hi;
        r->hi = 0;
        r->eof = 0;
        int wbits = c == DT_COMPRESSION_GZIP ? 16 + MAX_WBITS : MAX_WBITS;
        if (inflateInit2(&r->z, wbits) != Z_OK) {
            st = dt_error(DT_ERR_NOMEM, "%s: cannot start zlib", name);
            goto fail;
        }
        r->z_ready = 1;
    }
    *out = r;
    return DT_OK;
fail:
    dt_tfrecord_close(r);
    return st;
}

dt_status dt_tfrecord_open(const char *path, dt_compression c, size_t max_record_bytes,
                           dt_tfrecord_reader **out)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dt_error(DT_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        close(fd);
        return dt_error(DT_ERR_IO, "%s: is a directory, not a TFRecord file", path);
    }
    return reader_open(fd, 1, path, c, max_record_bytes, out);
}

dt_status dt_tfrecord_open_fd(int fd, const char *name, dt_compression c, size_t max_record_bytes,
                              dt_tfrecord_reader **out)
{
    *out = NULL;
    return reader_open(fd, 0, name ? name : "(fd)", c, max_record_bytes, out);
}

dt_status dt_tfrecord_frame(const char *name, uint64_t at, const uint8_t *p, size_t avail, int eof,
                           size_t max_record_bytes, uint64_t *data_len, size_t *need)
{
    *need = HEADER_BYTES;
    if (avail < HEADER_BYTES) {
        if (!eof)
            return DT_END;
        return dt_error(DT_ERR_FORMAT, "%s: offset %llu: truncated record: the file ends %zu bytes "
                        "into the 12-byte record header (at offset %llu)", name,
                        (unsigned long long)at, avail, (unsigned long long)(at + avail));
    }
    uint64_t len = dt_load_le64(p);
    uint32_t stored = dt_load_le32(p + 8), computed = dt_crc32c_mask(dt_crc32c(p, 8));
    if (stored != computed)
        return dt_error(DT_ERR_FORMAT, "%s: offset %llu: corrupt record header: length CRC "
                        "mismatch (stored 0x%08x, computed 0x%08x over length %llu)", name,
                        (unsigned long long)at, stored, computed, (unsigned long long)len);
    if (len > max_record_bytes)
        return dt_error(DT_ERR_FORMAT, "%s: offset %llu: record length %llu is above the limit of "
                        "%zu bytes (corrupt header?)", name, (unsigned long long)at,
                        (unsigned long long)len, max_record_bytes);
    size_t total = HEADER_BYTES + (size_t)len + FOOTER_BYTES;
    *need = total;
    *data_len = len;
    if (avail >= total)
        return DT_OK;
    if (!eof)
        return DT_END;
    if (avail < HEADER_BYTES + len)
        return dt_error(DT_ERR_FORMAT, "%s: offset %llu: truncated record: the header gives %llu "
                        "data bytes, the file ends after %zu of them (at offset %llu)", name,
                        (unsigned long long)at, (unsigned long long)len, avail - HEADER_BYTES,
                        (unsigned long long)(at + avail));
    return dt_error(DT_ERR_FORMAT, "%s: offset %llu: truncated record: the file ends %zu bytes "
                    "into the 4-byte data CRC that follows %llu data bytes (at offset %llu)",
                    name, (unsigned long long)at, avail - HEADER_BYTES - (size_t)len,
                    (unsigned long long)len, (unsigned long long)(at + avail));
}

void dt_tfrecord_encode_frame(const void *data, uint64_t n_bytes,
                              uint8_t header[DT_TFRECORD_HEADER_BYTES],
                              uint8_t footer[DT_TFRECORD_FOOTER_BYTES])
{
    dt_store_le64(header, n_bytes);
    dt_store_le32(header + 8, dt_crc32c_mask(dt_crc32c(header, 8)));
    dt_store_le32(footer, dt_crc32c_mask(dt_crc32c(data, (size_t)n_bytes)));
}

bool dt_tfrecord_header_ok(const uint8_t *p)
{
    return dt_load_le32(p + 8) == dt_crc32c_mask(dt_crc32c(p, 8));
}

dt_status dt_tfrecord_check_data(const char *name, uint64_t at, const uint8_t *record,
                                 uint64_t data_len, uint32_t crc)
{
    uint32_t stored = dt_load_le32(record + HEADER_BYTES + data_len), computed = dt_crc32c_mask(crc);
    if (stored == computed)
        return DT_OK;
    return dt_error(DT_ERR_FORMAT, "%s: offset %llu: corrupt record: data CRC mismatch over %llu "
                    "bytes (stored 0x%08x, computed 0x%08x)", name, (unsigned long long)at,
                    (unsigned long long)data_len, stored, computed);
}

dt_status dt_tfrecord_next(dt_tfrecord_reader *r, const uint8_t **data, size_t *n_bytes,
                           uint64_t *offset)
{
    if (r->sticky)
        return dt_error(r->sticky, "%s: offset %llu: reading stopped at an earlier error",
                        r->name, (unsigned long long)(r->buf_off + r->lo));
    dt_status st = need(r, HEADER_BYTES);
    if (st)
        goto fail;
    if (r->hi == r->lo)
        return DT_END;
    uint64_t len;
    size_t total;
    st = dt_tfrecord_frame(r->name, r->buf_off + r->lo, r->buf + r->lo, r->hi - r->lo, r->eof,
                           r->max_record, &len, &total);
    if (st == DT_END) {
        /* The header is sound and the record needs more of the stream: read up to its end. */
        if ((st = need(r, total)))
            goto fail;
        st = dt_tfrecord_frame(r->name, r->buf_off + r->lo, r->buf + r->lo, r->hi - r->lo, 1,
                               r->max_record, &len, &total);
    }
    if (st)
        goto fail;
    uint64_t at = r->buf_off + r->lo;
    const uint8_t *rec = r->buf + r->lo;
    r->lo += total;
    /* Not sticky: the length was verified, so the next record starts where this one ends. */
    if ((st = dt_tfrecord_check_data(r->name, at, rec, len,
                                     dt_crc32c(rec + HEADER_BYTES, (size_t)len))))
        return st;
    *data = rec + HEADER_BYTES;
    *n_bytes = (size_t)len;
    if (offset)
        *offset = at;
    return DT_OK;
fail:
    r->sticky = st;
    return st;
}

const char *dt_tfrecord_name(const dt_tfrecord_reader *r) { return r->name; }

int dt_tfrecord_can_continue(const dt_tfrecord_reader *r) { return r->sticky == DT_OK; }

void dt_tfrecord_close(dt_tfrecord_reader *r)
{
    if (!r)
        return;
    if (r->z_ready)
        inflateEnd(&r->z);
    if (r->own_fd)
        close(r->fd);
    free(r->zin);
    free(r->buf);
    free(r->name);
    free(r);
}

/* ---- writer ---- */

struct dt_tfrecord_writer {
    int fd, own_fd;
    char *name;
    dt_compression comp;
    z_stream z;
    int z_ready;
    uint8_t *out;        /* bytes waiting for write() */
    size_t out_n;
    uint64_t stream_off; /* uncompressed bytes accepted: the next record's offset */
    dt_status sticky;    /* the first error */
};

static dt_status write_all(dt_tfrecord_writer *w, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return w->sticky = dt_error(DT_ERR_IO, "%s: offset %llu: write: %s", w->name,
                                        (unsigned long long)w->stream_off, strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return DT_OK;
}

static dt_status flush_out(dt_tfrecord_writer *w)
{
    dt_status st = write_all(w, w->out, w->out_n);
    w->out_n = 0;
    return st;
}

/* Runs deflate over the pending input with flush (Z_NO_FLUSH or Z_FINISH), writing out as the
 * buffer fills, until the input is consumed (and, for Z_FINISH, the stream has ended). */
static dt_status deflate_pending(dt_tfrecord_writer *w, int flush)
{
    for (;;) {
        if (w->out_n == IO_CHUNK) {
            dt_status st = flush_out(w);
            if (st)
                return st;
        }
        w->z.next_out = w->out + w->out_n;
        w->z.avail_out = (uInt)(IO_CHUNK - w->out_n);
        uInt before = w->z.avail_out;
        int ret = deflate(&w->z, flush);
        w->out_n += before - w->z.avail_out;
        if (ret == Z_STREAM_END)
            return DT_OK;
        if (ret != Z_OK && ret != Z_BUF_ERROR)
            return w->sticky = dt_error(DT_ERR_IO, "%s: offset %llu: deflate: %s", w->name,
                                        (unsigned long long)w->stream_off, zError(ret));
        if (flush == Z_NO_FLUSH && w->z.avail_in == 0)
            return DT_OK;
    }
}

static dt_status emit(dt_tfrecord_writer *w, const uint8_t *p, size_t n)
{
    if (w->comp == DT_COMPRESSION_NONE) {
        if (w->out_n + n > IO_CHUNK) {
            dt_status st = flush_out(w);
            if (st)
                return st;
        }
        if (n >= IO_CHUNK)
            return write_all(w, p, n);
        memcpy(w->out + w->out_n, p, n);
        w->out_n += n;
        return DT_OK;
    }
    /* avail_in is 32 bits: feed a huge record in pieces. */
    while (n > 0) {
        size_t piece = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        w->z.next_in = (Bytef *)(uintptr_t)p;
        w->z.avail_in = (uInt)piece;
        dt_status st = deflate_pending(w, Z_NO_FLUSH);
        if (st)
            return st;
        p += piece;
        n -= piece;
    }
    return DT_OK;
}

static dt_status writer_open(int fd, int own_fd, const char *name, dt_compression c,
                             dt_tfrecord_writer **out)
{
    dt_status st;
    dt_tfrecord_writer *w = calloc(1, sizeof *w);
    if (!w) {
        if (own_fd)
            close(fd);
        return dt_error(DT_ERR_NOMEM, "%s: no memory for a writer", name);
    }
    w->fd = fd;
    w->own_fd = own_fd;
    w->comp = c;
    w->name = strdup(name);
    w->out = malloc(IO_CHUNK);
    if (!w->name || !w->out) {
        st = dt_error(DT_ERR_NOMEM, "%s: no memory for a writer", name);
        goto fail;
    }
    if (c == DT_COMPRESSION_GZIP || c == DT_COMPRESSION_ZLIB) {
        int wbits = c == DT_COMPRESSION_GZIP ? 16 + MAX_WBITS : MAX_WBITS;
        if (deflateInit2(&w->z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, wbits, 8,
                         Z_DEFAULT_STRATEGY) != Z_OK) {
            st = dt_error(DT_ERR_NOMEM, "%s: cannot start zlib", name);
            goto fail;
        }
        w->z_ready = 1;
    } else if (c != DT_COMPRESSION_NONE) {
        st = dt_error(DT_ERR_INVALID, "%s: a writer needs compression none, gzip or zlib, not %s",
                      name, dt_compression_name(c));
        goto fail;
    }
    *out = w;
    return DT_OK;
fail:
    if (w->z_ready)
        deflateEnd(&w->z);
    if (own_fd)
        close(fd);
    free(w->out);
    free(w->name);
    free(w);
    return st;
}

dt_status dt_tfrecord_writer_open(const char *path, dt_compression c, dt_tfrecord_writer **out)
{
    *out = NULL;
    if (c != DT_COMPRESSION_NONE && c != DT_COMPRESSION_GZIP && c != DT_COMPRESSION_ZLIB)
        return dt_error(DT_ERR_INVALID, "%s: a writer needs compression none, gzip or zlib, not %s",
                        path, dt_compression_name(c));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return dt_error(DT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    return writer_open(fd, 1, path, c, out);
}

dt_status dt_tfrecord_writer_open_fd(int fd, const char *name, dt_compression c,
                                     dt_tfrecord_writer **out)
{
    *out = NULL;
    return writer_open(fd, 0, name ? name : "(fd)", c, out);
}

dt_status dt_tfrecord_write(dt_tfrecord_writer *w, const void *data, size_t n_bytes)
{
    if (w->sticky)
        return dt_error(w->sticky, "%s: offset %llu: writing stopped at an earlier error",
                        w->name, (unsigned long long)w->stream_off);
    uint8_t head[HEADER_BYTES], foot[FOOTER_BYTES];
    dt_tfrecord_encode_frame(data, n_bytes, head, foot);
    dt_status st;
    if ((st = emit(w, head, sizeof head)) || (st = emit(w, data, n_bytes)) ||
        (st = emit(w, foot, sizeof foot)))
        return st;
    w->stream_off += HEADER_BYTES + (uint64_t)n_bytes + FOOTER_BYTES;
    return DT_OK;
}

dt_status dt_tfrecord_writer_close(dt_tfrecord_writer *w)
{
    if (!w)
        return DT_OK;
    dt_status st = w->sticky;
    if (!st && w->z_ready) {
        w->z.next_in = NULL;
        w->z.avail_in = 0;
        st = deflate_pending(w, Z_FINISH);
    }
    if (!st)
        st = flush_out(w);
    if (w->z_ready)
        deflateEnd(&w->z);
    if (w->own_fd && close(w->fd) != 0 && !st)
        st = dt_error(DT_ERR_IO, "%s: close: %s", w->name, strerror(errno));
    free(w->out);
    free(w->name);
    free(w);
    return st;
}
