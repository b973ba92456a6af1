/* A ps task's snapshot (see snapshot.h). */
#include "snapshot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/bytes.h"
#include "../core/crc32c.h"
#include "../core/fileio.h"

#define HEADER_BYTES 120
#define CRC_AT 116
#define JOB_ID_AT 36
#define NONCE_AT (JOB_ID_AT + DT_PS_JOB_ID_CAP)
#define VERSION 2

/* ---- Writing ---- */

typedef struct {
    FILE *f;
    const char *path;
    dt_psbuf buf;
    uint32_t n_messages;
} writer;

/* Writes the message encoded in w->buf, with its CRC. */
static dt_status put_encoded(writer *w, dt_status st)
{
    uint8_t crc[4];
    dt_store_le32(crc, dt_crc32c(w->buf.data, w->buf.len));
    if (st == DT_OK && (fwrite(w->buf.data, 1, w->buf.len, w->f) != w->buf.len ||
                        fwrite(crc, 1, sizeof crc, w->f) != sizeof crc))
        st = dt_error(DT_ERR_IO, "%s: %s", w->path, strerror(errno));
    w->n_messages++;
    return st;
}

static dt_status put(writer *w, const dt_psmsg *m, const float *values)
{
    w->buf.len = 0;
    return put_encoded(w, dt_psmsg_encode(m, NULL, values, &w->buf));
}

/* A dynamic table's state as KEYED records (its live rows with their slots, the keys counted,
 * the filter), ended by an empty one. */
static dt_status put_keyed(writer *w, const dt_ps_table_shard *ts)
{
    dt_status st = DT_OK;
    for (uint32_t kind = DT_PSMSG_KEYED_ROWS; kind <= DT_PSMSG_KEYED_BLOOM && st == DT_OK;
         kind++) {
        int64_t cursor = 0;
        for (;;) {
            uint32_t n = 0;
            w->buf.len = 0;
            st = dt_ps_shard_keyed(ts, kind, &cursor, UINT32_MAX, true, 0, &w->buf, &n);
            if (st || n == 0)
                break;
            st = put_encoded(w, st);
        }
    }
    dt_psmsg end = {.type = DT_PSMSG_KEYED, .table = ts->id, .target = DT_PSMSG_KEYED_ROWS};
    return st ? st : put(w, &end, NULL);
}

/* rows x dim floats as ROWS messages of at most a chunk of rows each. */
static dt_status put_rows(writer *w, uint32_t table, uint64_t tag, const float *data,
                          int64_t rows, int dim)
{
    dt_status st = DT_OK;
    for (int64_t lo = 0; lo < rows && st == DT_OK; lo += DT_PS_SNAPSHOT_CHUNK) {
        int64_t n = rows - lo < DT_PS_SNAPSHOT_CHUNK ? rows - lo : DT_PS_SNAPSHOT_CHUNK;
        dt_psmsg m = {.type = DT_PSMSG_ROWS, .request_id = tag, .table = table, .n = (uint32_t)n,
                      .dim = (uint32_t)dim};
        st = put(w, &m, data + (size_t)lo * (size_t)dim);
    }
    return st;
}

static dt_status put_table(writer *w, const dt_ps_table_shard *ts)
{
    dt_psmsg def, clock = {.type = DT_PSMSG_ACK, .request_id = ts->id, .clock = ts->clock};
    dt_ps_table_msg(ts->id, ts->t.name, ts->rows_total, ts->t.dim, ts->n_shards, ts->shard,
                    ts->strategy, &ts->opt, ts->init_stddev, ts->seed, &def);
    def.policy = ts->policy;
    dt_status st = put(w, &def, NULL);
    if (st == DT_OK)
        st = put(w, &clock, NULL);
    if (st == DT_OK && ts->keys)
        return put_keyed(w, ts);
    if (st == DT_OK)
        st = put_rows(w, ts->id, 0, ts->t.data, ts->t.rows, ts->t.dim);
    for (int k = 0; k < ts->t.n_slots && st == DT_OK; k++)
        st = put_rows(w, ts->id, (uint64_t)k + 1, ts->t.slots[k], ts->t.rows, ts->t.dim);
    return st;
}

/* Slot k of the dense optimizer: element i at state[k x stride + i]. */
static const float *dense_slot(const dt_ps_shard *s, int k)
{
    size_t stride = s->dense_opt.state.n_elems / (size_t)s->dense_opt.n_slots;
    return s->dense_opt.state.data + (size_t)k * stride;
}

static dt_status put_slice(writer *w, const dt_ps_shard *s, const dt_ps_dense_slice *v)
{
    dt_psmsg def, clock = {.type = DT_PSMSG_ACK, .request_id = v->id, .clock = v->clock};
    dt_ps_var_msg(v->id, v->offset, v->count, s->dense_total, &s->dense_opt.cfg, &def);
    dt_status st = put(w, &def, s->dense + v->offset);
    if (st == DT_OK)
        st = put(w, &clock, NULL);
    for (int k = 0; k < s->dense_opt.n_slots && st == DT_OK; k++) {
        dt_psmsg m = {.type = DT_PSMSG_DENSE, .request_id = (uint64_t)k + 1, .table = v->id,
                      .offset = v->offset, .count = v->count};
        st = put(w, &m, dense_slot(s, k) + v->offset);
    }
    return st;
}

void dt_ps_job_nonce_hex(const dt_ps_job *job, char out[2 * DT_PS_JOB_NONCE_BYTES + 1])
{
    for (int i = 0; i < DT_PS_JOB_NONCE_BYTES; i++)
        snprintf(out + 2 * i, 3, "%02x", job->nonce[i]);
}

static void encode_header(uint8_t h[HEADER_BYTES], int ps_index, const dt_ps_job *job,
                          int64_t last_step, int64_t unix_time, uint32_t n_messages)
{
    memset(h, 0, HEADER_BYTES);
    memcpy(h, "DTPSSNAP", 8);
    dt_store_le32(h + 8, VERSION);
    dt_store_le32(h + 12, (uint32_t)ps_index);
    dt_store_le64(h + 16, (uint64_t)last_step);
    dt_store_le64(h + 24, (uint64_t)unix_time);
    dt_store_le32(h + 32, n_messages);
    memcpy(h + JOB_ID_AT, job->id, strnlen(job->id, DT_PS_JOB_ID_CAP));
    memcpy(h + NONCE_AT, job->nonce, DT_PS_JOB_NONCE_BYTES);
    dt_store_le32(h + CRC_AT, dt_crc32c(h, CRC_AT));
}

dt_status dt_ps_snapshot_save(const dt_ps_shard *s, int ps_index, const dt_ps_job *job,
                              const char *path)
{
    dt_file_replace r;
    dt_status st = dt_file_replace_begin(&r, path, false);
    if (st)
        return st;
    writer w = {.path = path};
    uint8_t h[HEADER_BYTES] = {0};
    if (!(w.f = fopen(dt_file_replace_path(&r), "wb"))) {
        st = dt_error(DT_ERR_IO, "%s: %s", dt_file_replace_path(&r), strerror(errno));
        goto fail;
    }
    /* The header's count is known at the end: written blank, then again. */
    if (fwrite(h, 1, sizeof h, w.f) != sizeof h)
        st = dt_error(DT_ERR_IO, "%s: %s", path, strerror(errno));
    for (int i = 0; i < s->n_tables && st == DT_OK; i++)
        st = put_table(&w, &s->tables[i]);
    for (int i = 0; i < s->n_slices && st == DT_OK; i++)
        st = put_slice(&w, s, &s->slices[i]);
    if (st == DT_OK) {
        encode_header(h, ps_index, job, s->last_step, (int64_t)time(NULL), w.n_messages);
        if (fseek(w.f, 0, SEEK_SET) != 0 || fwrite(h, 1, sizeof h, w.f) != sizeof h)
            st = dt_error(DT_ERR_IO, "%s: %s", path, strerror(errno));
    }
    if (fclose(w.f) != 0 && st == DT_OK)
        st = dt_error(DT_ERR_IO, "%s: %s", path, strerror(errno));
    if (st == DT_OK) {
        dt_psbuf_free(&w.buf);
        return dt_file_replace_commit(&r);
    }
fail:
    dt_psbuf_free(&w.buf);
    dt_file_replace_abort(&r);
    return st;
}

/* ---- Reading ---- */

typedef struct {
    FILE *f;
    const char *path;
    uint64_t at;        /* the byte the next message starts at */
    uint32_t left;      /* messages the header announced, not yet read */
    dt_psbuf buf;
    char where[DT_PATH_CAP + 64];
} reader;

static dt_status bad(const reader *r, uint64_t at, const char *what)
{
    return dt_error(DT_ERR_FORMAT, "%s: byte %llu: %s", r->path, (unsigned long long)at, what);
}

/* The next message, of type want (its decoded views point into r->buf). */
static dt_status next(reader *r, dt_psmsg_type want, dt_psmsg *m)
{
    if (r->left == 0)
        return bad(r, r->at, "the snapshot ends before its last shard");
    uint8_t hdr[DT_PSMSG_HEADER_BYTES];
    snprintf(r->where, sizeof r->where, "%s at byte %llu", r->path, (unsigned long long)r->at);
    uint32_t size;
    if (fread(hdr, 1, sizeof hdr, r->f) != sizeof hdr)
        return bad(r, r->at, "truncated message header");
    dt_status st = dt_psmsg_peek(hdr, r->where, &size);
    if (st)
        return st;
    size_t n = DT_PSMSG_HEADER_BYTES + (size_t)size;
    if (n > r->buf.cap) {
        uint8_t *p = realloc(r->buf.data, n);
        if (!p)
            return dt_error(DT_ERR_NOMEM, "%s: no memory for a %zu-byte message", r->path, n);
        r->buf.data = p, r->buf.cap = n;
    }
    memcpy(r->buf.data, hdr, sizeof hdr);
    uint8_t crc[4];
    if (fread(r->buf.data + sizeof hdr, 1, size, r->f) != size ||
        fread(crc, 1, sizeof crc, r->f) != sizeof crc)
        return bad(r, r->at, "truncated message");
    if (dt_crc32c(r->buf.data, n) != dt_load_le32(crc))
        return bad(r, r->at, "message checksum mismatch");
    if ((st = dt_psmsg_decode(r->buf.data, n, r->where, m)))
        return st;
    if (m->type != want)
        return bad(r, r->at, "a message of another kind than the snapshot's order has there");
    r->at += n + sizeof crc, r->left--;
    return DT_OK;
}

/* rows x dim floats from ROWS messages tagged tag. */
static dt_status get_rows(reader *r, uint32_t table, uint64_t tag, float *data, int64_t rows,
                          int dim)
{
    for (int64_t lo = 0; lo < rows;) {
        uint64_t at = r->at;
        dt_psmsg m;
        dt_status st = next(r, DT_PSMSG_ROWS, &m);
        if (st)
            return st;
        if (m.table != table || m.request_id != tag || m.dim != (uint32_t)dim ||
            m.n > (uint64_t)(rows - lo) || m.n == 0)
            return bad(r, at, "rows of another table, slot or shape than the shard's");
        dt_psmsg_values(&m, 0, (size_t)m.n * (size_t)dim, data + (size_t)lo * (size_t)dim);
        lo += m.n;
    }
    return DT_OK;
}

/* The shard's clock, from the ACK after its definition. */
static dt_status get_clock(reader *r, uint64_t id, int64_t *clock)
{
    uint64_t at = r->at;
    dt_psmsg m;
    dt_status st = next(r, DT_PSMSG_ACK, &m);
    if (st == DT_OK && (m.request_id != id || m.clock < 0))
        st = bad(r, at, "a clock of another variable");
    if (st == DT_OK)
        *clock = m.clock;
    return st;
}

/* A definition (a table's or a slice's), replayed as the coordinator's would be: it must be
 * accepted. Then the clock the shard had for what it defines. */
static dt_status define(reader *r, dt_ps_shard *s, const dt_psmsg *def, uint64_t at)
{
    dt_psbuf reply = {0};
    dt_psmsg ack;
    dt_status st = dt_ps_shard_handle(s, def, &reply);
    if (st == DT_OK && (st = dt_psmsg_decode(reply.data, reply.len, "this ps", &ack)) == DT_OK &&
        ack.type == DT_PSMSG_ERROR)
        st = dt_error(DT_ERR_FORMAT, "%s: byte %llu: %.*s", r->path, (unsigned long long)at,
                      (int)ack.text_len, ack.text);
    dt_psbuf_free(&reply);
    if (st)
        return st;
    if (def->type == DT_PSMSG_TABLE) {
        dt_ps_table_shard *ts = &s->tables[s->n_tables - 1];
        return get_clock(r, ts->id, &ts->clock);
    }
    dt_ps_dense_slice *v = &s->slices[s->n_slices - 1];
    return get_clock(r, v->id, &v->clock);
}

/* A dynamic table's KEYED records, merged in as the coordinator's restore would be, to the
 * empty one that ends them. */
static dt_status get_keyed(reader *r, dt_ps_shard *s, const dt_ps_table_shard *ts)
{
    dt_psbuf reply = {0};
    dt_status st = DT_OK;
    for (;;) {
        uint64_t at = r->at;
        dt_psmsg m, ack;
        if ((st = next(r, DT_PSMSG_KEYED, &m)))
            break;
        if (m.table != ts->id) {
            st = bad(r, at, "keys of another table");
            break;
        }
        if (m.n == 0)
            break;
        reply.len = 0;
        if ((st = dt_ps_shard_handle(s, &m, &reply)) ||
            (st = dt_psmsg_decode(reply.data, reply.len, "this ps", &ack)))
            break;
        if (ack.type == DT_PSMSG_ERROR) {
            st = dt_error(DT_ERR_FORMAT, "%s: byte %llu: %.*s", r->path, (unsigned long long)at,
                          (int)ack.text_len, ack.text);
            break;
        }
    }
    dt_psbuf_free(&reply);
    return st;
}

static dt_status get_table(reader *r, dt_ps_shard *s, const dt_psmsg *def, uint64_t at)
{
    dt_status st = define(r, s, def, at);
    if (st)
        return st;
    dt_ps_table_shard *ts = &s->tables[s->n_tables - 1];
    if (ts->keys)
        return get_keyed(r, s, ts);
    if ((st = get_rows(r, ts->id, 0, ts->t.data, ts->t.rows, ts->t.dim)))
        return st;
    for (int k = 0; k < ts->t.n_slots && st == DT_OK; k++)
        st = get_rows(r, ts->id, (uint64_t)k + 1, ts->t.slots[k], ts->t.rows, ts->t.dim);
    return st;
}

static dt_status get_slice(reader *r, dt_ps_shard *s, const dt_psmsg *def, uint64_t at)
{
    dt_status st = define(r, s, def, at);
    if (st)
        return st;
    dt_ps_dense_slice *v = &s->slices[s->n_slices - 1];
    for (int k = 0; k < s->dense_opt.n_slots; k++) {
        uint64_t at_k = r->at;
        dt_psmsg m;
        if ((st = next(r, DT_PSMSG_DENSE, &m)))
            return st;
        if (m.table != v->id || m.request_id != (uint64_t)k + 1 || m.offset != v->offset ||
            m.count != v->count)
            return bad(r, at_k, "optimizer values of another variable or slot");
        dt_psmsg_values(&m, 0, v->count, (float *)dense_slot(s, k) + v->offset);
    }
    return DT_OK;
}

/* The job of a header: another job's snapshot is refused, naming both. */
static dt_status check_job(reader *r, const uint8_t *h, const dt_ps_job *job,
                           dt_ps_snapshot_info *info)
{
    dt_ps_job theirs;
    memset(&theirs, 0, sizeof theirs);
    memcpy(theirs.id, h + JOB_ID_AT, DT_PS_JOB_ID_CAP);
    memcpy(theirs.nonce, h + NONCE_AT, DT_PS_JOB_NONCE_BYTES);
    if (strcmp(theirs.id, job->id) == 0 &&
        memcmp(theirs.nonce, job->nonce, DT_PS_JOB_NONCE_BYTES) == 0)
        return DT_OK;
    char a[2 * DT_PS_JOB_NONCE_BYTES + 1], b[2 * DT_PS_JOB_NONCE_BYTES + 1];
    dt_ps_job_nonce_hex(&theirs, a);
    dt_ps_job_nonce_hex(job, b);
    info->other_job = true;
    return dt_error(DT_ERR_INVALID, "%s: the snapshot of another job (job '%s', nonce %s; this "
                    "is job '%s', nonce %s)", r->path, theirs.id, a, job->id, b);
}

static dt_status read_header(reader *r, int ps_index, const dt_ps_job *job,
                             dt_ps_snapshot_info *info)
{
    uint8_t h[HEADER_BYTES];
    size_t got = fread(h, 1, sizeof h, r->f);
    if (got >= 12 && memcmp(h, "DTPSSNAP", 8) == 0 && dt_load_le32(h + 8) == 1) {
        info->other_job = true;
        return dt_error(DT_ERR_INVALID, "%s: a snapshot written before snapshots named their "
                        "job (version 1): not known to be this job's", r->path);
    }
    if (got != sizeof h)
        return bad(r, 0, "truncated header");
    if (memcmp(h, "DTPSSNAP", 8) != 0)
        return bad(r, 0, "not a dtrain ps snapshot (bad magic)");
    if (dt_crc32c(h, CRC_AT) != dt_load_le32(h + CRC_AT))
        return bad(r, CRC_AT, "header checksum mismatch");
    if (dt_load_le32(h + 8) != VERSION)
        return bad(r, 8, "unsupported version");
    if (dt_load_le32(h + 12) != (uint32_t)ps_index)
        return bad(r, 12, "the snapshot of another ps task");
    dt_status st = check_job(r, h, job, info);
    if (st)
        return st;
    info->last_step = (int64_t)dt_load_le64(h + 16);
    info->unix_time = (int64_t)dt_load_le64(h + 24);
    r->left = dt_load_le32(h + 32);
    r->at = HEADER_BYTES;
    return DT_OK;
}

dt_status dt_ps_snapshot_load(dt_ps_shard *s, int ps_index, const dt_ps_job *job,
                              const char *path, dt_ps_snapshot_info *info)
{
    memset(info, 0, sizeof *info);
    reader r = {.path = path};
    if (!(r.f = fopen(path, "rb")))
        return errno == ENOENT ? DT_END : dt_error(DT_ERR_IO, "%s: %s", path, strerror(errno));
    dt_status st = read_header(&r, ps_index, job, info);
    while (st == DT_OK && r.left > 0) {
        uint64_t at = r.at;
        dt_psmsg def;
        /* A definition: a table's (TABLE) or a slice's (VAR); peeked by trying TABLE first. */
        long pos = ftell(r.f);
        st = next(&r, DT_PSMSG_TABLE, &def);
        if (st == DT_OK) {
            st = get_table(&r, s, &def, at);
            continue;
        }
        if (fseek(r.f, pos, SEEK_SET) != 0) {
            st = dt_error(DT_ERR_IO, "%s: %s", path, strerror(errno));
            break;
        }
        r.at = at;
        st = next(&r, DT_PSMSG_VAR, &def);
        if (st == DT_OK)
            st = get_slice(&r, s, &def, at);
    }
    if (st == DT_OK && fgetc(r.f) != EOF)
        st = bad(&r, r.at, "bytes after the snapshot's last message");
    fclose(r.f);
    dt_psbuf_free(&r.buf);
    if (st) {
        dt_ps_shard_free(s);
        dt_ps_shard_init(s, s->pool);
        return st;
    }
    s->last_step = info->last_step;
    info->n_tables = s->n_tables, info->n_slices = s->n_slices;
    for (int i = 0; i < s->n_tables; i++)
        if (s->tables[i].keys) { /* the next eviction pass is due as after a whole one then */
            dt_keymap_set_pass_step(s->tables[i].keys, info->last_step);
            dt_keymap_stats k;
            dt_keymap_stats_get(s->tables[i].keys, &k);
            info->dynamic_keys += k.live;
        }
    return DT_OK;
}
