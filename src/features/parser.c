/* The feature spec as a row parser of input pipelines (features.h): raw CSV and Criteo lines,
 * and tf.Example records, transformed after batching on the pipeline's parse threads.
 *
 * A CSV file's header decides where each key's cells are, so the parser keeps one text layout
 * per header text (training and test files may order their columns differently); a thread's
 * scratch remembers the last one it used, and only a change of header takes the parser's lock.
 * Layouts are found by the header's text, not its address: the parser outlives the pipelines
 * whose headers it has seen, and a later one's header may sit where an earlier one's was. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "features_int.h"

#define MAX_LAYOUTS 16

struct dt_feature_parser {
    dt_row_parser rows;
    const dt_features *f;
    pthread_mutex_t mu;
    char *headers[MAX_LAYOUTS];              /* copies of the header lines; NULL: Criteo's */
    dt_feature_text *layouts[MAX_LAYOUTS];
    int n_layouts;
};

typedef struct {
    dt_feature_scratch *fs;
    const dt_text_header *last_header;
    const dt_feature_text *last_layout;
    bool have_last;
} parser_scratch;

static void *scratch_new(void *ctx)
{
    dt_feature_parser *p = ctx;
    parser_scratch *s = calloc(1, sizeof *s);
    if (s && dt_feature_scratch_new(p->f, &s->fs) != DT_OK) {
        free(s);
        s = NULL;
    }
    return s;
}

static void scratch_free(void *ctx, void *scratch)
{
    (void)ctx;
    parser_scratch *s = scratch;
    if (s)
        dt_feature_scratch_free(s->fs);
    free(s);
}

/* The layout of files under header h (NULL: Criteo's), built the first time. */
static dt_status layout_of(dt_feature_parser *p, const dt_text_header *h,
                           const dt_feature_text **out)
{
    dt_status st = DT_OK;
    pthread_mutex_lock(&p->mu);
    int i = 0;
    while (i < p->n_layouts && !(h ? p->headers[i] && strcmp(p->headers[i], h->line) == 0
                                   : p->headers[i] == NULL))
        i++;
    if (i == p->n_layouts) {
        char *copy = h ? strdup(h->line) : NULL;
        if (i == MAX_LAYOUTS) {
            st = dt_error(DT_ERR_INVALID, "more than %d headers for one feature parser",
                          MAX_LAYOUTS);
        } else if (h && !copy) {
            st = dt_error(DT_ERR_NOMEM, "no memory for a header");
        } else if ((st = dt_feature_text_new(p->f, h ? h->line : NULL, h ? h->len : 0, ',',
                                             &p->layouts[i])) == DT_OK) {
            p->headers[i] = copy;
            copy = NULL;
            p->n_layouts++;
        }
        free(copy);
    }
    *out = st == DT_OK ? p->layouts[i] : NULL;
    pthread_mutex_unlock(&p->mu);
    return st;
}

static dt_status parse_line(void *ctx, void *scratch, const dt_text_header *header,
                            const char *line, size_t len, dt_rowbuf *out)
{
    dt_feature_parser *p = ctx;
    parser_scratch *s = scratch;
    if (!s->have_last || s->last_header != header) {
        dt_status st = layout_of(p, header, &s->last_layout);
        /* A header that names the keys wrongly is the input's fault, but no other line of the
         * file would parse either: an error that skipping lines cannot get past. */
        if (st)
            return st == DT_ERR_FORMAT ? DT_ERR_INVALID : st;
        s->last_header = header;
        s->have_last = true;
    }
    return dt_feature_text_parse(p->f, s->last_layout, s->fs, line, len, out);
}

static dt_status parse_record(void *ctx, void *scratch, const uint8_t *record, size_t n_bytes,
                              dt_rowbuf *out)
{
    dt_feature_parser *p = ctx;
    parser_scratch *s = scratch;
    return dt_features_transform_example(p->f, s->fs, record, n_bytes, out);
}

dt_status dt_feature_parser_new(const dt_features *f, dt_feature_parser **out)
{
    /* Rows through a spec whose statistics are still to come would be standardized by 0/0 and
     * looked up in empty vocabularies. */
    if (dt_features_needs_adapt(f)) {
        *out = NULL;
        return dt_error(DT_ERR_INVALID, "%s: columns still to adapt: run the adapt pass first",
                        f->source);
    }
    dt_feature_parser *p = calloc(1, sizeof *p);
    if (!p) {
        *out = NULL;
        return dt_error(DT_ERR_NOMEM, "no memory for a feature parser");
    }
    p->f = f;
    pthread_mutex_init(&p->mu, NULL);
    p->rows = (dt_row_parser){.ctx = p, .n_dense = f->n_dense, .scratch_new = scratch_new,
                              .scratch_free = scratch_free, .parse_line = parse_line,
                              .parse_record = parse_record};
    *out = p;
    return DT_OK;
}

void dt_feature_parser_free(dt_feature_parser *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_layouts; i++) {
        dt_feature_text_free(p->layouts[i]);
        free(p->headers[i]);
    }
    pthread_mutex_destroy(&p->mu);
    free(p);
}

const dt_row_parser *dt_feature_parser_rows(const dt_feature_parser *p) { return &p->rows; }
