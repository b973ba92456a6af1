/* Safetensors checkpoint files (see include/dtrain/checkpoint.h): written from arenas, opened
 * (read or mapped) and checked, their tensors and metadata found, and arenas restored from them.
 * The directory of checkpoints and which of them to keep is the manager's (ckpt_manager.c).
 *
 * Writing streams the header and then each view straight from its arena, so a save needs no
 * second copy of the parameters. Reading loads the whole file into one buffer (its size comes from
 * fstat, never from the header), parses the header with cJSON and keeps the parsed tree: tensor
 * names, metadata keys and values point into it, tensor data into the buffer. */
#include "dtrain/checkpoint.h"

#include "fileio.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/bytes.h"
#include "crc32c.h"

/* Tensor data is written and read as the host's bytes: dtrain builds for little-endian hosts
 * only (x86-64, aarch64), which the check below holds it to. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c writes the host's floats as safetensors' little-endian data"
#endif

#define FORMAT_NAME "dtrain-ckpt-1"
#define METADATA_KEY "__metadata__"
#define MAX_DIMS 8
/* Offsets and sizes travel as JSON numbers (doubles): beyond 2^53 they are not exact. */
#define MAX_JSON_INT 9007199254740992.0

/* ---- save ---- */

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    {"F32", 4}, {"F64", 8}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1},
    {"U64", 8}, {"U32", 4}, {"U16", 2},
};

static size_t dtype_size(const char *name)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(name, dtypes[i].name) == 0)
            return dtypes[i].size;
    return 0;
}


/* A JSON integer as cJSON would not print it: cJSON prints large doubles with exponents
 * ("1e+15"), which safetensors readers refuse for offsets. */
static cJSON *json_uint(uint64_t v)
{
    char text[32];
    snprintf(text, sizeof text, "%llu", (unsigned long long)v);
    return cJSON_CreateRaw(text);
}

static dt_status nomem(const char *path)
{
    return dt_error(DT_ERR_NOMEM, "%s: out of memory building the checkpoint header", path);
}

static dt_status check_save_args(const char *path, const dt_arena *const *arenas, int n_arenas,
                                 const dt_ckpt_meta *meta, int n_meta)
{
    if (!path || !*path)
        return dt_error(DT_ERR_INVALID, "checkpoint: empty path");
    if (n_arenas < 0 || n_meta < 0 || (n_arenas && !arenas) || (n_meta && !meta))
        return dt_error(DT_ERR_INVALID, "%s: bad arena or metadata list", path);
    for (int i = 0; i < n_arenas; i++)
        if (!arenas[i] || (arenas[i]->n_views && !arenas[i]->data))
            return dt_error(DT_ERR_INVALID, "%s: arena %d is missing or not committed", path, i);
    for (int i = 0; i < n_meta; i++) {
        if (!meta[i].key || !meta[i].value)
            return dt_error(DT_ERR_INVALID, "%s: metadata entry %d has no key or value", path, i);
        /* dtrain owns these two: a caller's value would be overwritten or contradict the data. */
        if (strcmp(meta[i].key, "format") == 0 || strcmp(meta[i].key, "checksum") == 0)
            return dt_error(DT_ERR_INVALID, "%s: metadata key '%s' is reserved for dtrain", path,
                            meta[i].key);
        for (int j = 0; j < i; j++)
            if (strcmp(meta[i].key, meta[j].key) == 0)
                return dt_error(DT_ERR_INVALID, "%s: metadata key '%s' given twice", path,
                                meta[i].key);
    }
    return DT_OK;
}

/* The tensors a save writes: every view of the arenas, then the extra tensors, in that order. */
typedef struct {
    dt_ckpt_tensor *t;
    int n;
} save_list;

static dt_status list_tensors(const char *path, const dt_arena *const *arenas, int n_arenas,
                              const dt_ckpt_tensor *extra, int n_extra, save_list *out)
{
    int n = n_extra;
    for (int a = 0; a < n_arenas; a++)
        n += arenas[a]->n_views;
    out->n = 0;
    out->t = calloc((size_t)(n ? n : 1), sizeof *out->t);
    if (!out->t)
        return nomem(path);
    for (int a = 0; a < n_arenas; a++)
        for (int i = 0; i < arenas[a]->n_views; i++) {
            const dt_view *v = &arenas[a]->views[i];
            dt_ckpt_tensor *t = &out->t[out->n++];
            t->name = v->name, t->dtype = "F32", t->n_dims = v->n_dims;
            for (int d = 0; d < v->n_dims; d++)
                t->dims[d] = v->dims[d];
            t->data = dt_arena_view_data(arenas[a], i);
            t->n_bytes = v->n_elems * sizeof(float);
        }
    for (int i = 0; i < n_extra; i++) {
        const dt_ckpt_tensor *x = &extra[i];
        size_t esize = x->dtype ? dtype_size(x->dtype) : 0;
        uint64_t elems = 1;
        for (int d = 0; d < x->n_dims; d++)
            elems *= x->dims[d] > 0 ? (uint64_t)x->dims[d] : 0;
        if (!x->name || !esize || x->n_dims < 1 || x->n_dims > MAX_DIMS ||
            elems * esize != x->n_bytes || (x->n_bytes && !x->data))
            return dt_error(DT_ERR_INVALID, "%s: tensor '%s': a bad dtype, shape or size", path,
                            x->name ? x->name : "?");
        out->t[out->n++] = *x;
    }
    return DT_OK;
}

/* Adds one tensor's entry at data offset *off; duplicate names would make the JSON ambiguous. */
static dt_status add_tensor_entry(cJSON *root, const char *path, const dt_ckpt_tensor *v,
                                  uint64_t *off)
{
    if (strcmp(v->name, METADATA_KEY) == 0 || cJSON_GetObjectItemCaseSensitive(root, v->name))
        return dt_error(DT_ERR_INVALID, "%s: tensor name '%s' is reserved or appears twice", path,
                        v->name);
    uint64_t n_bytes = (uint64_t)v->n_bytes;
    cJSON *t = cJSON_CreateObject(), *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();
    if (!t || !shape || !offs) {
        cJSON_Delete(t), cJSON_Delete(shape), cJSON_Delete(offs);
        return nomem(path);
    }
    cJSON_AddItemToObject(root, v->name, t);
    if (!cJSON_AddStringToObject(t, "dtype", v->dtype)) {
        cJSON_Delete(shape), cJSON_Delete(offs);
        return nomem(path);
    }
    cJSON_AddItemToObject(t, "shape", shape);
    cJSON_AddItemToObject(t, "data_offsets", offs);
    for (int d = 0; d < v->n_dims; d++)
        cJSON_AddItemToArray(shape, json_uint((uint64_t)v->dims[d]));
    cJSON_AddItemToArray(offs, json_uint(*off));
    cJSON_AddItemToArray(offs, json_uint(*off + n_bytes));
    if (cJSON_GetArraySize(shape) != v->n_dims || cJSON_GetArraySize(offs) != 2)
        return nomem(path);
    *off += n_bytes;
    return DT_OK;
}

static dt_status add_metadata(cJSON *root, const char *path, const dt_ckpt_meta *meta, int n_meta,
                              uint32_t crc)
{
    cJSON *m = cJSON_AddObjectToObject(root, METADATA_KEY);
    if (!m)
        return nomem(path);
    for (int i = 0; i < n_meta; i++)
        if (!cJSON_AddStringToObject(m, meta[i].key, meta[i].value))
            return nomem(path);
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", crc);
    if (!cJSON_AddStringToObject(m, "format", FORMAT_NAME) ||
        !cJSON_AddStringToObject(m, "checksum", hex))
        return nomem(path);
    return DT_OK;
}

/* The 8-byte length and the JSON, padded with spaces so the data section starts 8-aligned. */
static dt_status build_header(const char *path, const save_list *l, const dt_ckpt_meta *meta,
                              int n_meta, uint8_t **out, size_t *out_n)
{
    dt_status st = DT_OK;
    char *json = NULL;
    uint32_t crc = 0;
    uint64_t off = 0;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return nomem(path);
    for (int i = 0; i < l->n; i++) {
        if ((st = add_tensor_entry(root, path, &l->t[i], &off)))
            goto fail;
        crc = dt_crc32c_extend(crc, l->t[i].data, l->t[i].n_bytes);
    }
    if ((st = add_metadata(root, path, meta, n_meta, crc)))
        goto fail;
    json = cJSON_PrintUnformatted(root);
    if (!json) {
        st = nomem(path);
        goto fail;
    }
    size_t len = strlen(json), padded = (len + 7) / 8 * 8;
    if (padded > DT_CKPT_MAX_HEADER_BYTES) {
        st = dt_error(DT_ERR_INVALID, "%s: the header would be %zu bytes, over the %llu readers accept",
                      path, padded, (unsigned long long)DT_CKPT_MAX_HEADER_BYTES);
        goto fail;
    }
    uint8_t *buf = malloc(8 + padded);
    if (!buf) {
        st = nomem(path);
        goto fail;
    }
    dt_store_le64(buf, padded);
    memcpy(buf + 8, json, len);
    memset(buf + 8 + len, ' ', padded - len);
    *out = buf;
    *out_n = 8 + padded;
fail:
    free(json);
    cJSON_Delete(root);
    return st;
}

dt_status dt_ckpt_save_ex(const char *path, const dt_arena *const *arenas, int n_arenas,
                          const dt_ckpt_tensor *extra, int n_extra, const dt_ckpt_meta *meta,
                          int n_meta)
{
    dt_status st = check_save_args(path, arenas, n_arenas, meta, n_meta);
    if (st)
        return st;
    if (n_extra < 0 || (n_extra && !extra))
        return dt_error(DT_ERR_INVALID, "%s: bad tensor list", path);
    uint8_t *header = NULL;
    size_t header_n = 0;
    dt_file_part *parts = NULL;
    save_list l = {0};
    if ((st = list_tensors(path, arenas, n_arenas, extra, n_extra, &l)) ||
        (st = build_header(path, &l, meta, n_meta, &header, &header_n)))
        goto fail;
    parts = malloc((size_t)(l.n + 1) * sizeof *parts);
    if (!parts) {
        st = nomem(path);
        goto fail;
    }
    parts[0] = (dt_file_part){header, header_n};
    for (int i = 0; i < l.n; i++)
        parts[i + 1] = (dt_file_part){l.t[i].data, l.t[i].n_bytes};
    st = dt_file_write_atomic(path, parts, l.n + 1);
fail:
    free(parts);
    free(header);
    free(l.t);
    return st;
}

dt_status dt_ckpt_save(const char *path, const dt_arena *const *arenas, int n_arenas,
                       const dt_ckpt_meta *meta, int n_meta)
{
    return dt_ckpt_save_ex(path, arenas, n_arenas, NULL, 0, meta, n_meta);
}

/* ---- open ---- */

struct dt_ckpt {
    char *path;
    uint8_t *buf;
    size_t size;
    bool mapped;  /* buf is a read-only mapping of the file, not a copy */
    int fd;       /* the mapped file until it is verified, else -1 */
    uint64_t data_off; /* where the data section starts */
    bool verified;     /* its checksum pass done and passed */
    cJSON *root;
    dt_ckpt_tensor *tensors;
    int n_tensors;
    int *by_name; /* tensor indices sorted by name, for dt_ckpt_find */
    const char **meta_keys, **meta_values;
    int n_meta;
};

/* The checkpoint's file opened, a regular one, its size in c->size; *fd -1 on failure. */
static dt_status open_regular(dt_ckpt *c, int *fd)
{
    *fd = open(c->path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return dt_error(DT_ERR_IO, "%s: open: %s", c->path, strerror(errno));
    struct stat sb;
    dt_status st = DT_OK;
    if (fstat(*fd, &sb) != 0)
        st = dt_error(DT_ERR_IO, "%s: fstat: %s", c->path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = dt_error(DT_ERR_IO, "%s: not a regular file", c->path);
    if (st) {
        close(*fd);
        *fd = -1;
        return st;
    }
    c->size = (size_t)sb.st_size;
    return DT_OK;
}

static dt_status read_file(dt_ckpt *c)
{
    int fd;
    dt_status st = open_regular(c, &fd);
    if (st)
        return st;
    c->buf = malloc(c->size ? c->size : 1);
    if (!c->buf) {
        st = dt_error(DT_ERR_NOMEM, "%s: cannot allocate %zu bytes", c->path, c->size);
        goto fail;
    }
    for (size_t got = 0; got < c->size;) {
        ssize_t k = read(fd, c->buf + got, c->size - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            st = dt_error(DT_ERR_IO, "%s: offset %zu: read: %s", c->path, got, strerror(errno));
            goto fail;
        }
        if (k == 0) {
            st = dt_error(DT_ERR_IO, "%s: offset %zu: the file shrank while being read", c->path, got);
            goto fail;
        }
        got += (size_t)k;
    }
fail:
    close(fd);
    return st;
}

/* The file mapped read-only and shared: its pages are the page cache's, one copy for every
 * process that maps it. */
static dt_status map_file(dt_ckpt *c)
{
    int fd;
    dt_status st = open_regular(c, &fd);
    if (st)
        return st;
    if (c->size == 0)
        st = dt_error(DT_ERR_FORMAT, "%s: 0 bytes: too short for the 8-byte header length",
                      c->path);
    if (st == DT_OK) {
        void *p = mmap(NULL, c->size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            st = dt_error(DT_ERR_IO, "%s: mmap of %zu bytes: %s", c->path, c->size,
                          strerror(errno));
        else
            c->buf = p, c->mapped = true;
    }
    if (st == DT_OK)
        c->fd = fd; /* kept for the checksum pass */
    else
        close(fd);
    return st;
}

/* A JSON number that is an integer in [0, 2^53]. */
static int json_count(const cJSON *item, uint64_t *out)
{
    if (!cJSON_IsNumber(item) || !(item->valuedouble >= 0) || item->valuedouble > MAX_JSON_INT ||
        item->valuedouble != floor(item->valuedouble))
        return 0;
    *out = (uint64_t)item->valuedouble;
    return 1;
}

/* "[2, 3]" for messages. */
static void format_shape(const int64_t *dims, int n, char *out, size_t cap)
{
    size_t used = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(out + used, cap - used, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (used < cap)
        snprintf(out + used, cap - used, "]");
}

static dt_status parse_shape(const dt_ckpt *c, const cJSON *entry, dt_ckpt_tensor *t,
                             uint64_t *n_elems)
{
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    if (!cJSON_IsArray(shape))
        return dt_error(DT_ERR_FORMAT, "%s: tensor '%s': shape is missing or not an array", c->path,
                        t->name);
    int n = cJSON_GetArraySize(shape);
    if (n > MAX_DIMS)
        return dt_error(DT_ERR_FORMAT, "%s: tensor '%s': shape has %d dimensions (at most %d)",
                        c->path, t->name, n, MAX_DIMS);
    uint64_t prod = 1;
    int d = 0;
    for (const cJSON *it = shape->child; it; it = it->next, d++) {
        uint64_t v;
        if (!json_count(it, &v))
            return dt_error(DT_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer",
                            c->path, t->name, d);
        if (__builtin_mul_overflow(prod, v, &prod))
            return dt_error(DT_ERR_FORMAT, "%s: tensor '%s': shape overflows", c->path, t->name);
        t->dims[d] = (int64_t)v;
    }
    t->n_dims = n;
    *n_elems = prod;
    return DT_OK;
}

static dt_status parse_offsets(const dt_ckpt *c, const cJSON *entry, const char *name,
                               uint64_t *begin, uint64_t *end)
{
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_count(offs->child, begin) ||
        !json_count(offs->child->next, end) || *end < *begin)
        return dt_error(DT_ERR_FORMAT, "%s: tensor '%s': data_offsets is not [begin, end] with "
                        "0 <= begin <= end", c->path, name);
    return DT_OK;
}

/* One tensor entry: its dtype, shape and offsets, and that they agree with each other. */
static dt_status parse_tensor(const dt_ckpt *c, const cJSON *entry, dt_ckpt_tensor *t,
                              uint64_t *begin, uint64_t *end)
{
    t->name = entry->string;
    if (!cJSON_IsObject(entry))
        return dt_error(DT_ERR_FORMAT, "%s: tensor '%s': entry is not an object", c->path, t->name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    if (!cJSON_IsString(dtype))
        return dt_error(DT_ERR_FORMAT, "%s: tensor '%s': dtype is missing or not a string", c->path,
                        t->name);
    size_t esize = dtype_size(dtype->valuestring);
    if (!esize)
        return dt_error(DT_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", c->path, t->name,
                        dtype->valuestring);
    t->dtype = dtype->valuestring;
    uint64_t n_elems = 0, n_bytes = 0;
    dt_status st = parse_shape(c, entry, t, &n_elems);
    if (st || (st = parse_offsets(c, entry, t->name, begin, end)))
        return st;
    if (__builtin_mul_overflow(n_elems, (uint64_t)esize, &n_bytes) || n_bytes != *end - *begin) {
        char shape[160];
        format_shape(t->dims, t->n_dims, shape, sizeof shape);
        return dt_error(DT_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, "
                        "but shape %s of %s needs %llu elements of %zu bytes", c->path, t->name,
                        (unsigned long long)*begin, (unsigned long long)*end,
                        (unsigned long long)(*end - *begin), shape, t->dtype,
                        (unsigned long long)n_elems, esize);
    }
    t->n_bytes = (size_t)n_bytes;
    return DT_OK;
}

static dt_status parse_metadata(dt_ckpt *c, const cJSON *m)
{
    if (!cJSON_IsObject(m))
        return dt_error(DT_ERR_FORMAT, "%s: %s is not an object", c->path, METADATA_KEY);
    int n = cJSON_GetArraySize(m);
    c->meta_keys = malloc((size_t)(n ? n : 1) * sizeof *c->meta_keys);
    c->meta_values = malloc((size_t)(n ? n : 1) * sizeof *c->meta_values);
    if (!c->meta_keys || !c->meta_values)
        return dt_error(DT_ERR_NOMEM, "%s: no memory for the metadata", c->path);
    for (const cJSON *it = m->child; it; it = it->next) {
        if (!cJSON_IsString(it))
            return dt_error(DT_ERR_FORMAT, "%s: %s.%s is not a string", c->path, METADATA_KEY,
                            it->string);
        c->meta_keys[c->n_meta] = it->string;
        c->meta_values[c->n_meta++] = it->valuestring;
    }
    return DT_OK;
}

/* A tensor's data_offsets, kept beside its index while sorting by begin. */
struct span {
    uint64_t begin, end;
    int index;
};

static int by_begin(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Sorted by begin, the tensors must cover [0, data_size) with neither gaps nor overlaps: every
 * data byte then belongs to exactly one tensor, as safetensors requires. */
static dt_status check_tiling(const dt_ckpt *c, struct span *spans, uint64_t data_size)
{
    qsort(spans, (size_t)c->n_tensors, sizeof *spans, by_begin);
    uint64_t expected = 0;
    for (int i = 0; i < c->n_tensors; i++) {
        const struct span *s = &spans[i];
        if (s->begin != expected)
            return dt_error(DT_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] %s: the "
                            "previous tensor ends at %llu", c->path, c->tensors[s->index].name,
                            (unsigned long long)s->begin, (unsigned long long)s->end,
                            s->begin > expected ? "leave a gap" : "overlap",
                            (unsigned long long)expected);
        expected = s->end;
    }
    if (expected != data_size)
        return dt_error(DT_ERR_FORMAT, "%s: the tensors cover %llu bytes but the data section "
                        "(from byte %zu) has %llu", c->path, (unsigned long long)expected,
                        c->size - (size_t)data_size, (unsigned long long)data_size);
    return DT_OK;
}

static int by_name_cmp(const void *a, const void *b, void *ctx)
{
    const dt_ckpt *c = ctx;
    return strcmp(c->tensors[*(const int *)a].name, c->tensors[*(const int *)b].name);
}

/* The name index, which also finds duplicate names (a reader could not tell them apart). */
static dt_status index_names(dt_ckpt *c)
{
    c->by_name = malloc((size_t)(c->n_tensors ? c->n_tensors : 1) * sizeof *c->by_name);
    if (!c->by_name)
        return dt_error(DT_ERR_NOMEM, "%s: no memory for the tensor index", c->path);
    for (int i = 0; i < c->n_tensors; i++)
        c->by_name[i] = i;
    qsort_r(c->by_name, (size_t)c->n_tensors, sizeof *c->by_name, by_name_cmp, c);
    for (int i = 1; i < c->n_tensors; i++)
        if (strcmp(c->tensors[c->by_name[i]].name, c->tensors[c->by_name[i - 1]].name) == 0)
            return dt_error(DT_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", c->path,
                            c->tensors[c->by_name[i]].name);
    return DT_OK;
}

static dt_status parse_json(dt_ckpt *c, uint64_t header_n)
{
    const char *json = (const char *)c->buf + 8, *end = NULL;
    if (header_n == 0 || json[0] != '{')
        return dt_error(DT_ERR_FORMAT, "%s: byte 8: the header does not begin with '{'", c->path);
    c->root = cJSON_ParseWithLengthOpts(json, (size_t)header_n, &end, 0);
    if (!c->root) {
        size_t at = end ? (size_t)(end - json) : 0;
        return dt_error(DT_ERR_FORMAT, "%s: byte %zu: invalid JSON in the %llu-byte header",
                        c->path, 8 + at, (unsigned long long)header_n);
    }
    /* safetensors allows whitespace after the object (writers pad with spaces), nothing else. */
    for (const char *p = end; p < json + header_n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return dt_error(DT_ERR_FORMAT, "%s: byte %zu: garbage after the header's JSON object",
                            c->path, (size_t)(8 + (p - json)));
    if (!cJSON_IsObject(c->root))
        return dt_error(DT_ERR_FORMAT, "%s: byte 8: the header is not a JSON object", c->path);
    return DT_OK;
}

/* Every entry of the header: tensors in header order, then their tiling of the data section. */
static dt_status parse_entries(dt_ckpt *c, uint64_t data_off)
{
    int n = cJSON_GetArraySize(c->root);
    dt_status st = DT_OK;
    struct span *spans = malloc((size_t)(n ? n : 1) * sizeof *spans);
    c->tensors = calloc((size_t)(n ? n : 1), sizeof *c->tensors);
    if (!spans || !c->tensors) {
        st = dt_error(DT_ERR_NOMEM, "%s: no memory for %d header entries", c->path, n);
        goto fail;
    }
    const cJSON *meta = NULL;
    for (const cJSON *it = c->root->child; it; it = it->next) {
        if (strcmp(it->string, METADATA_KEY) == 0) {
            if (meta) {
                st = dt_error(DT_ERR_FORMAT, "%s: %s appears twice", c->path, METADATA_KEY);
                goto fail;
            }
            meta = it;
            continue;
        }
        struct span *s = &spans[c->n_tensors];
        dt_ckpt_tensor *t = &c->tensors[c->n_tensors];
        if ((st = parse_tensor(c, it, t, &s->begin, &s->end)))
            goto fail;
        s->index = c->n_tensors++;
    }
    if ((st = parse_metadata(c, meta ? meta : &(cJSON){.type = cJSON_Object})))
        goto fail;
    if ((st = check_tiling(c, spans, c->size - data_off)) || (st = index_names(c)))
        goto fail;
    for (int i = 0; i < c->n_tensors; i++)
        c->tensors[spans[i].index].data = c->buf + data_off + spans[i].begin;
fail:
    free(spans);
    return st;
}

/* The CRC32C of a mapped file's data read through its descriptor, not the mapping: the pages
 * pass through the page cache without becoming the process's, which then holds only the
 * tensors it reads (a predictor's tables, not the optimizer's slots beside them). A read that
 * fails or comes up short gives a CRC that will not match. */
static uint32_t crc_of_file(const dt_ckpt *c, uint64_t data_off)
{
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = malloc(CHUNK);
    uint32_t crc = 0;
    if (!buf)
        return dt_crc32c(c->buf + data_off, c->size - (size_t)data_off);
    for (uint64_t at = data_off; at < c->size;) {
        size_t want = c->size - at < CHUNK ? (size_t)(c->size - at) : CHUNK;
        ssize_t k = pread(c->fd, buf, want, (off_t)at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            crc ^= 0xffffffffu;
            break;
        }
        crc = dt_crc32c_extend(crc, buf, (size_t)k);
        at += (uint64_t)k;
    }
    free(buf);
    return crc;
}

static dt_status verify_checksum(const dt_ckpt *c, uint64_t data_off)
{
    const char *want = dt_ckpt_meta_get(c, "checksum");
    if (!want)
        return DT_OK;
    int hex = strlen(want) == 8;
    for (int i = 0; hex && i < 8; i++)
        hex = isxdigit((unsigned char)want[i]) != 0;
    if (!hex)
        return dt_error(DT_ERR_FORMAT, "%s: %s.checksum '%s' is not 8 hex digits", c->path,
                        METADATA_KEY, want);
    uint32_t got = c->fd >= 0 ? crc_of_file(c, data_off)
                              : dt_crc32c(c->buf + data_off, c->size - (size_t)data_off);
    if ((uint32_t)strtoul(want, NULL, 16) != got)
        return dt_error(DT_ERR_FORMAT, "%s: checksum mismatch: header says %s, data gives %08x",
                        c->path, want, got);
    return DT_OK;
}

/* Opens path, read or mapped; verify false leaves the checksum pass to dt_ckpt_verify (mapped
 * files only). */
static dt_status open_checkpoint(const char *path, bool map, bool verify, dt_ckpt **out)
{
    *out = NULL;
    dt_status st;
    dt_ckpt *c = calloc(1, sizeof *c);
    if (c)
        c->fd = -1;
    if (!c || !(c->path = strdup(path))) {
        free(c);
        return dt_error(DT_ERR_NOMEM, "%s: out of memory", path);
    }
    if ((st = map ? map_file(c) : read_file(c)))
        goto fail;
    if (c->size < 8) {
        st = dt_error(DT_ERR_FORMAT, "%s: %zu bytes: too short for the 8-byte header length",
                      path, c->size);
        goto fail;
    }
    uint64_t header_n = dt_load_le64(c->buf);
    if (header_n > c->size - 8 || header_n > DT_CKPT_MAX_HEADER_BYTES) {
        st = dt_error(DT_ERR_FORMAT, "%s: byte 0: header length %llu exceeds the %zu bytes after "
                      "it or the limit of %llu", path, (unsigned long long)header_n, c->size - 8,
                      (unsigned long long)DT_CKPT_MAX_HEADER_BYTES);
        goto fail;
    }
    c->data_off = 8 + header_n;
    if ((st = parse_json(c, header_n)) || (st = parse_entries(c, c->data_off)) ||
        (verify && (st = dt_ckpt_verify(c))))
        goto fail;
    *out = c;
    return DT_OK;
fail:
    dt_ckpt_close(c);
    return st;
}

dt_status dt_ckpt_open(const char *path, dt_ckpt **out)
{
    return open_checkpoint(path, false, true, out);
}

dt_status dt_ckpt_map(const char *path, dt_ckpt **out)
{
    return open_checkpoint(path, true, true, out);
}

dt_status dt_ckpt_map_unverified(const char *path, dt_ckpt **out)
{
    return open_checkpoint(path, true, false, out);
}

dt_status dt_ckpt_verify(dt_ckpt *c)
{
    if (c->verified)
        return DT_OK;
    dt_status st = verify_checksum(c, c->data_off);
    if (c->fd >= 0)
        close(c->fd), c->fd = -1;
    c->verified = st == DT_OK;
    return st;
}

void dt_ckpt_close(dt_ckpt *c)
{
    if (!c)
        return;
    cJSON_Delete(c->root);
    free(c->tensors);
    free(c->by_name);
    free(c->meta_keys);
    free(c->meta_values);
    if (c->fd >= 0)
        close(c->fd);
    if (c->mapped)
        munmap(c->buf, c->size);
    else
        free(c->buf);
    free(c->path);
    free(c);
}

const char *dt_ckpt_path(const dt_ckpt *c) { return c->path; }

const char *dt_ckpt_meta_get(const dt_ckpt *c, const char *key)
{
    for (int i = 0; i < c->n_meta; i++)
        if (strcmp(c->meta_keys[i], key) == 0)
            return c->meta_values[i];
    return NULL;
}

int dt_ckpt_n_meta(const dt_ckpt *c) { return c->n_meta; }

void dt_ckpt_meta_at(const dt_ckpt *c, int i, const char **key, const char **value)
{
    *key = c->meta_keys[i];
    *value = c->meta_values[i];
}

int dt_ckpt_n_tensors(const dt_ckpt *c) { return c->n_tensors; }

const dt_ckpt_tensor *dt_ckpt_tensor_at(const dt_ckpt *c, int i) { return &c->tensors[i]; }

const dt_ckpt_tensor *dt_ckpt_find(const dt_ckpt *c, const char *name)
{
    int lo = 0, hi = c->n_tensors;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        const dt_ckpt_tensor *t = &c->tensors[c->by_name[mid]];
        int cmp = strcmp(t->name, name);
        if (cmp == 0)
            return t;
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---- restore ---- */

static dt_status check_view(const dt_ckpt *c, const dt_view *v)
{
    int64_t vdims[DT_VIEW_MAX_DIMS];
    for (int d = 0; d < v->n_dims; d++)
        vdims[d] = v->dims[d];
    char want[160], have[160];
    format_shape(vdims, v->n_dims, want, sizeof want);
    const dt_ckpt_tensor *t = dt_ckpt_find(c, v->name);
    if (!t)
        return dt_error(DT_ERR_INVALID, "%s: no tensor '%s' (the model's is F32 %s)", c->path,
                        v->name, want);
    format_shape(t->dims, t->n_dims, have, sizeof have);
    int same = strcmp(t->dtype, "F32") == 0 && t->n_dims == v->n_dims;
    for (int d = 0; same && d < v->n_dims; d++)
        same = t->dims[d] == vdims[d];
    if (!same)
        return dt_error(DT_ERR_INVALID, "%s: tensor '%s' is %s %s, the model's is F32 %s", c->path,
                        v->name, t->dtype, have, want);
    return DT_OK;
}

dt_status dt_ckpt_restore_arena(const dt_ckpt *c, dt_arena *a)
{
    if (a->n_views && !a->data)
        return dt_error(DT_ERR_INVALID, "%s: restoring into an arena that is not committed", c->path);
    /* Every view is checked before any is written, so a mismatch leaves the arena as it was. */
    for (int i = 0; i < a->n_views; i++) {
        dt_status st = check_view(c, &a->views[i]);
        if (st)
            return st;
    }
    for (int i = 0; i < a->n_views; i++) {
        const dt_ckpt_tensor *t = dt_ckpt_find(c, a->views[i].name);
        memcpy(dt_arena_view_data(a, i), t->data, t->n_bytes);
    }
    return DT_OK;
}
