/* Input columns carried beside the scores (dtrain predict --keep-columns).
 *
 * A row parser around the feature spec's: it parses each raw row as the spec does, then appends
 * the named columns' text to the parsed row as its raw bytes, tab-separated, so they travel with
 * the row through batching, skipped records and threads, and can never drift from its score. */
#include "keep.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/example.h"

enum { MAX_FIELDS = 4096 };

struct dt_keep {
    dt_row_parser inner;
    int n;
    char **names;
};

typedef struct {
    void *inner;
    const char *header_line;  /* the header the indices below are for */
    size_t header_len;
    int *index;               /* each kept column's field in a line; -1: absent */
    const char *cells[MAX_FIELDS];
    size_t lens[MAX_FIELDS];
    dt_example_reader *reader;
    char num[32];
} keep_scratch;

/* Splits a line at delim: quoted fields ("a,b", "" for a quote) as one, spaces around a field
 * dropped (unless they are the delimiter). The quotes stay in the cell. */
static int split(const char *line, size_t len, char delim, const char **cells, size_t *lens)
{
    int n = 0;
    size_t i = 0;
    for (;;) {
        while (i < len && (line[i] == ' ' || (line[i] == '\t' && delim != '\t')))
            i++;
        size_t start = i;
        bool quoted = false;
        while (i < len && (quoted || line[i] != delim)) {
            if (line[i] == '"')
                quoted = !quoted;
            i++;
        }
        size_t end = i;
        while (end > start && (line[end - 1] == ' ' || line[end - 1] == '\r' ||
                               (line[end - 1] == '\t' && delim != '\t')))
            end--;
        if (n < MAX_FIELDS)
            cells[n] = line + start, lens[n] = end - start;
        n++;
        if (i >= len)
            return n;
        i++;
    }
}

static void criteo_name(int i, char *out, size_t cap)
{
    if (i == 0)
        snprintf(out, cap, "label");
    else
        snprintf(out, cap, "%c%d", i <= 13 ? 'I' : 'C', i <= 13 ? i : i - 13);
}

/* Each kept column's field under this header (NULL: Criteo's 40 columns). */
static void index_columns(const dt_keep *k, keep_scratch *s, const dt_text_header *h)
{
    const char *hl = h ? h->line : NULL;
    size_t hn = h ? h->len : 0;
    if (s->header_line == hl && s->header_len == hn && s->index[0] != -2)
        return;
    s->header_line = hl, s->header_len = hn;
    int n = hl ? split(hl, hn, ',', s->cells, s->lens) : 40;
    for (int c = 0; c < k->n; c++) {
        s->index[c] = -1;
        for (int i = 0; i < n && i < MAX_FIELDS; i++) {
            char name[16];
            const char *cell = s->cells[i];
            size_t len = s->lens[i];
            if (!hl) {
                criteo_name(i, name, sizeof name);
                cell = name, len = strlen(name);
            } else if (len >= 2 && cell[0] == '"' && cell[len - 1] == '"') {
                cell++, len -= 2;
            }
            if (strlen(k->names[c]) == len && memcmp(k->names[c], cell, len) == 0) {
                s->index[c] = i;
                break;
            }
        }
    }
}

/* Appends text with tabs and line ends made spaces, so the row's columns stay apart. */
static dt_status add_text(dt_rowbuf *b, const char *p, size_t n)
{
    if (n == 0)
        return DT_OK;
    dt_status st = dt_rowbuf_add_raw(b, p, n);
    if (st)
        return st;
    for (uint8_t *c = b->raw + b->n_bytes - n; c < b->raw + b->n_bytes; c++)
        if (*c == '\t' || *c == '\n' || *c == '\r')
            *c = ' ';
    return DT_OK;
}

static dt_status add_separator(dt_rowbuf *b, int c)
{
    return c > 0 ? dt_rowbuf_add_raw(b, "\t", 1) : DT_OK;
}

static dt_status keep_line(void *ctx, void *scratch, const dt_text_header *header,
                           const char *line, size_t len, dt_rowbuf *out)
{
    const dt_keep *k = ctx;
    keep_scratch *s = scratch;
    dt_status st = k->inner.parse_line(k->inner.ctx, s->inner, header, line, len, out);
    if (st)
        return st;
    index_columns(k, s, header && header->set ? header : NULL);
    int n = split(line, len, header && header->set ? ',' : '\t', s->cells, s->lens);
    for (int c = 0; c < k->n && st == DT_OK; c++) {
        int i = s->index[c];
        const char *cell = i >= 0 && i < n && i < MAX_FIELDS ? s->cells[i] : "";
        size_t cl = i >= 0 && i < n && i < MAX_FIELDS ? s->lens[i] : 0;
        if (cl >= 2 && cell[0] == '"' && cell[cl - 1] == '"')
            cell++, cl -= 2;
        if ((st = add_separator(out, c)) == DT_OK)
            st = add_text(out, cell, cl);
    }
    if (st)
        dt_rowbuf_drop_last(out);
    return st;
}

/* A feature's values as text: numbers as printf writes them, several joined by spaces. */
static dt_status add_feature(keep_scratch *s, const dt_example_feature *f, dt_rowbuf *out)
{
    dt_status st = DT_OK;
    for (size_t j = 0; j < f->n && st == DT_OK; j++) {
        if (j > 0)
            st = dt_rowbuf_add_raw(out, " ", 1);
        if (st)
            break;
        if (f->kind == DT_FEATURE_BYTES) {
            st = add_text(out, (const char *)f->bytes[j], f->bytes_len[j]);
            continue;
        }
        int w = f->kind == DT_FEATURE_INT64
                    ? snprintf(s->num, sizeof s->num, "%" PRId64, f->ints[j])
                    : snprintf(s->num, sizeof s->num, "%.9g", (double)f->floats[j]);
        st = dt_rowbuf_add_raw(out, s->num, (size_t)w);
    }
    return st;
}

static dt_status keep_record(void *ctx, void *scratch, const uint8_t *record, size_t n_bytes,
                             dt_rowbuf *out)
{
    const dt_keep *k = ctx;
    keep_scratch *s = scratch;
    dt_status st = k->inner.parse_record(k->inner.ctx, s->inner, record, n_bytes, out);
    if (st)
        return st;
    const dt_example_feature *fs;
    size_t nf;
    if ((st = dt_example_read(s->reader, record, n_bytes, &fs, &nf)) == DT_OK)
        for (int c = 0; c < k->n && st == DT_OK; c++) {
            st = add_separator(out, c);
            for (size_t j = 0; j < nf && st == DT_OK; j++)
                if (fs[j].key_len == strlen(k->names[c]) &&
                    memcmp(fs[j].key, k->names[c], fs[j].key_len) == 0) {
                    st = add_feature(s, &fs[j], out);
                    break;
                }
        }
    if (st)
        dt_rowbuf_drop_last(out);
    return st;
}

static void *keep_scratch_new(void *ctx)
{
    const dt_keep *k = ctx;
    keep_scratch *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->index = malloc((size_t)k->n * sizeof *s->index);
    s->inner = k->inner.scratch_new(k->inner.ctx);
    if (!s->index || !s->inner || dt_example_reader_new(&s->reader) != DT_OK) {
        if (s->inner)
            k->inner.scratch_free(k->inner.ctx, s->inner);
        free(s->index);
        dt_example_reader_free(s->reader);
        free(s);
        return NULL;
    }
    s->index[0] = -2; /* no header indexed yet */
    return s;
}

static void keep_scratch_free(void *ctx, void *scratch)
{
    const dt_keep *k = ctx;
    keep_scratch *s = scratch;
    if (!s)
        return;
    k->inner.scratch_free(k->inner.ctx, s->inner);
    free(s->index);
    dt_example_reader_free(s->reader);
    free(s);
}

dt_status dt_keep_new(const dt_row_parser *inner, const char *columns, dt_keep **out)
{
    *out = NULL;
    dt_keep *k = calloc(1, sizeof *k);
    char *list = strdup(columns);
    dt_status st = DT_OK;
    if (!k || !list) {
        st = dt_error(DT_ERR_NOMEM, "no memory for --keep-columns");
        goto fail;
    }
    k->inner = *inner;
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char **grown = realloc(k->names, (size_t)(k->n + 1) * sizeof *grown);
        if (!grown || !(grown[k->n] = strdup(t))) {
            if (grown)
                k->names = grown;
            st = dt_error(DT_ERR_NOMEM, "no memory for --keep-columns");
            goto fail;
        }
        k->names = grown;
        k->n++;
    }
    if (k->n == 0) {
        st = dt_error(DT_ERR_INVALID, "--keep-columns '%s': no column named", columns);
        goto fail;
    }
    free(list);
    *out = k;
    return DT_OK;
fail:
    free(list);
    dt_keep_free(k);
    return st;
}

void dt_keep_free(dt_keep *k)
{
    if (!k)
        return;
    for (int i = 0; i < k->n; i++)
        free(k->names[i]);
    free(k->names);
    free(k);
}

int dt_keep_count(const dt_keep *k) { return k->n; }
const char *dt_keep_name(const dt_keep *k, int i) { return k->names[i]; }

dt_row_parser dt_keep_parser(dt_keep *k)
{
    dt_row_parser p = k->inner;
    p.ctx = k;
    p.scratch_new = keep_scratch_new;
    p.scratch_free = keep_scratch_free;
    p.parse_line = keep_line;
    p.parse_record = keep_record;
    return p;
}
