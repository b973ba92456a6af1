/* Checkpoints: safetensors files and TF's checkpoint manager (see include/dtrain/checkpoint.h).
 *
 * Writing streams the header and then each view straight from its arena, so a save needs no
 * second copy of the parameters. Reading loads the whole file into one buffer (its size comes from
 * fstat, never from the header), parses the header with cJSON and keeps the parsed tree: tensor
 * names, metadata keys and values point into it, tensor data into the buffer. */
#include "fileio.h"
#include "dtrain/log.h"
#include "dtrain/checkpoint.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/bytes.h"
#include "crc32c.h"

/* Tensor data is written and read as the host's bytes: dtrain targets x86-64 only. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c writes the host's floats as safetensors' little-endian data"
#endif

#define FORMAT_NAME "dtrain-ckpt-1"
#define METADATA_KEY "__metadata__"
#define STATE_NAME "checkpoint"
#define MAX_DIMS 8
#define PATH_CAP 4096
/* A state file is a few lines per checkpoint; anything this big is not one. */
#define MAX_STATE_BYTES ((off_t)16 << 20)
/* Offsets and sizes travel as JSON numbers (doubles): beyond 2^53 they are not exact. */
#define MAX_JSON_INT 9007199254740992.0


/* ---- save ---- */

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

/* Adds one view's entry at data offset *off; duplicate names would make the JSON ambiguous. */
static dt_status add_tensor_entry(cJSON *root, const char *path, const dt_view *v, uint64_t *off)
{
    if (strcmp(v->name, METADATA_KEY) == 0 || cJSON_GetObjectItemCaseSensitive(root, v->name))
        return dt_error(DT_ERR_INVALID, "%s: tensor name '%s' is reserved or appears twice", path,
                        v->name);
    uint64_t n_bytes = (uint64_t)v->n_elems * sizeof(float);
    cJSON *t = cJSON_CreateObject(), *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();
    if (!t || !shape || !offs) {
        cJSON_Delete(t), cJSON_Delete(shape), cJSON_Delete(offs);
        return nomem(path);
    }
    cJSON_AddItemToObject(root, v->name, t);
    if (!cJSON_AddStringToObject(t, "dtype", "F32")) {
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
static dt_status build_header(const char *path, const dt_arena *const *arenas, int n_arenas,
                              const dt_ckpt_meta *meta, int n_meta, uint8_t **out, size_t *out_n)
{
    dt_status st = DT_OK;
    char *json = NULL;
    uint32_t crc = 0;
    uint64_t off = 0;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return nomem(path);
    for (int a = 0; a < n_arenas; a++)
        for (int i = 0; i < arenas[a]->n_views; i++) {
            const dt_view *v = &arenas[a]->views[i];
            if ((st = add_tensor_entry(root, path, v, &off)))
                goto fail;
            crc = dt_crc32c_extend(crc, dt_arena_view_data(arenas[a], i), v->n_elems * sizeof(float));
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

dt_status dt_ckpt_save(const char *path, const dt_arena *const *arenas, int n_arenas,
                       const dt_ckpt_meta *meta, int n_meta)
{
    dt_status st = check_save_args(path, arenas, n_arenas, meta, n_meta);
    if (st)
        return st;
    uint8_t *header = NULL;
    size_t header_n = 0;
    dt_file_part *parts = NULL;
    if ((st = build_header(path, arenas, n_arenas, meta, n_meta, &header, &header_n)))
        return st;
    int n_parts = 1;
    for (int a = 0; a < n_arenas; a++)
        n_parts += arenas[a]->n_views;
    parts = malloc((size_t)n_parts * sizeof *parts);
    if (!parts) {
        st = nomem(path);
        goto fail;
    }
    parts[0] = (dt_file_part){header, header_n};
    int k = 1;
    for (int a = 0; a < n_arenas; a++)
        for (int i = 0; i < arenas[a]->n_views; i++)
            parts[k++] = (dt_file_part){dt_arena_view_data(arenas[a], i),
                                       arenas[a]->views[i].n_elems * sizeof(float)};
    st = dt_file_write_atomic(path, parts, n_parts);
fail:
    free(parts);
    free(header);
    return st;
}

/* ---- open ---- */

struct dt_ckpt {
    char *path;
    uint8_t *buf;
    size_t size;
    bool mapped;  /* buf is a read-only mapping of the file, not a copy */
    int fd;       /* the mapped file while it is verified, else -1 */
    cJSON *root;
    dt_ckpt_tensor *tensors;
    int n_tensors;
    int *by_name; /* tensor indices sorted by name, for dt_ckpt_find */
    const char **meta_keys, **meta_values;
    int n_meta;
};

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    {"F32", 4}, {"F64", 8}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1},
};

static size_t dtype_size(const char *name)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(name, dtypes[i].name) == 0)
            return dtypes[i].size;
    return 0;
}

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

static dt_status open_checkpoint(const char *path, bool map, dt_ckpt **out)
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
    if ((st = parse_json(c, header_n)) || (st = parse_entries(c, 8 + header_n)) ||
        (st = verify_checksum(c, 8 + header_n)))
        goto fail;
    if (c->fd >= 0)
        close(c->fd), c->fd = -1;
    *out = c;
    return DT_OK;
fail:
    dt_ckpt_close(c);
    return st;
}

dt_status dt_ckpt_open(const char *path, dt_ckpt **out)
{
    return open_checkpoint(path, false, out);
}

dt_status dt_ckpt_map(const char *path, dt_ckpt **out)
{
    return open_checkpoint(path, true, out);
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

/* ---- the manager ---- */

int64_t dt_ckpt_step_of_name(const char *name)
{
    static const char prefix[] = "ckpt-", suffix[] = ".safetensors";
    if (!name || strncmp(name, prefix, sizeof prefix - 1) != 0)
        return -1;
    const char *p = name + sizeof prefix - 1;
    /* Leading zeros are refused: "ckpt-007" would not be the file the manager names step 7. */
    if (!isdigit((unsigned char)*p) || (p[0] == '0' && isdigit((unsigned char)p[1])))
        return -1;
    int64_t v = 0;
    for (; isdigit((unsigned char)*p); p++) {
        int digit = *p - '0';
        if (v > (INT64_MAX - digit) / 10)
            return -1;
        v = v * 10 + digit;
    }
    return strcmp(p, suffix) == 0 ? v : -1;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The checkpoint list of a directory: what the state file says, or a scan. */
struct ckpt_list {
    int n, cap;
    int64_t *steps;
    double *ts;
    double last_preserved;
    int has_last_preserved;
};

static void list_free(struct ckpt_list *l)
{
    free(l->steps);
    free(l->ts);
    memset(l, 0, sizeof *l);
}

static int list_find(const struct ckpt_list *l, int64_t step)
{
    for (int i = 0; i < l->n; i++)
        if (l->steps[i] == step)
            return i;
    return -1;
}

static void list_remove(struct ckpt_list *l, int i)
{
    memmove(l->steps + i, l->steps + i + 1, (size_t)(l->n - i - 1) * sizeof *l->steps);
    memmove(l->ts + i, l->ts + i + 1, (size_t)(l->n - i - 1) * sizeof *l->ts);
    l->n--;
}

static dt_status list_push(struct ckpt_list *l, int64_t step, double ts)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        int64_t *steps = realloc(l->steps, (size_t)cap * sizeof *steps);
        if (steps)
            l->steps = steps;
        double *t = steps ? realloc(l->ts, (size_t)cap * sizeof *t) : NULL;
        if (!t)
            return dt_error(DT_ERR_NOMEM, "checkpoint list: out of memory");
        l->ts = t;
        l->cap = cap;
    }
    l->steps[l->n] = step;
    l->ts[l->n++] = ts;
    return DT_OK;
}

static dt_status build_path(char *out, size_t cap, const char *dir, const char *name)
{
    if ((size_t)snprintf(out, cap, "%s/%s", dir, name) >= cap)
        return dt_error(DT_ERR_INVALID, "%s/%s: path too long", dir, name);
    return DT_OK;
}

static void ckpt_name(char *out, size_t cap, int64_t step)
{
    snprintf(out, cap, "ckpt-%lld.safetensors", (long long)step);
}

/* The step of a quoted state-file path ("ckpt-5.safetensors", or TF-style with a directory). */
static int64_t step_of_quoted(const char *v)
{
    size_t n = strlen(v);
    if (n < 2 || v[0] != '"' || v[n - 1] != '"')
        return -1;
    char name[PATH_CAP];
    if (n - 2 >= sizeof name)
        return -1;
    memcpy(name, v + 1, n - 2);
    name[n - 2] = '\0';
    const char *base = strrchr(name, '/');
    return dt_ckpt_step_of_name(base ? base + 1 : name);
}

static int parse_double(const char *v, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(d))
        return 0;
    *out = d;
    return 1;
}

/* Parsed lines so far; the lists are checked against each other once all are read. */
struct state_parse {
    struct ckpt_list paths;
    double *ts;
    int n_ts, cap_ts;
    int64_t latest;
};

static dt_status push_ts(struct state_parse *s, double t)
{
    if (s->n_ts == s->cap_ts) {
        int cap = s->cap_ts ? s->cap_ts * 2 : 16;
        double *grown = realloc(s->ts, (size_t)cap * sizeof *grown);
        if (!grown)
            return dt_error(DT_ERR_NOMEM, "checkpoint state: out of memory");
        s->ts = grown;
        s->cap_ts = cap;
    }
    s->ts[s->n_ts++] = t;
    return DT_OK;
}

/* One "key: value" line; lines of other keys are ignored, as TF's text format readers would
 * skip fields they do not know. DT_ERR_FORMAT for a known key with a bad value. */
static dt_status parse_state_line(struct state_parse *s, char *line, const char *file, int lineno)
{
    char *colon = strchr(line, ':');
    if (!colon)
        return DT_OK;
    *colon = '\0';
    char *key = line, *v = colon + 1;
    while (isspace((unsigned char)*key))
        key++;
    while (isspace((unsigned char)*v))
        v++;
    for (size_t n = strlen(v); n && isspace((unsigned char)v[n - 1]);)
        v[--n] = '\0';
    int64_t step;
    double t;
    if (strcmp(key, "model_checkpoint_path") == 0 || strcmp(key, "all_model_checkpoint_paths") == 0) {
        if ((step = step_of_quoted(v)) < 0)
            return dt_error(DT_ERR_FORMAT, "%s: line %d: %s %s is not a quoted ckpt-<step>.safetensors",
                            file, lineno, key, v);
        if (key[0] == 'm')
            s->latest = step;
        else if (list_find(&s->paths, step) >= 0)
            return dt_error(DT_ERR_FORMAT, "%s: line %d: step %lld listed twice", file, lineno,
                            (long long)step);
        else
            return list_push(&s->paths, step, 0);
    } else if (strcmp(key, "all_model_checkpoint_timestamps") == 0 ||
               strcmp(key, "last_preserved_timestamp") == 0) {
        if (!parse_double(v, &t))
            return dt_error(DT_ERR_FORMAT, "%s: line %d: %s '%s' is not a number", file, lineno,
                            key, v);
        if (key[0] == 'a')
            return push_ts(s, t);
        s->paths.last_preserved = t;
        s->paths.has_last_preserved = 1;
    }
    return DT_OK;
}

/* Checks the lists agree and puts the latest last. Old TF state files have no timestamps: they
 * then all get now, as TF's manager does. */
static dt_status finish_state(struct state_parse *s, const char *file, double now)
{
    struct ckpt_list *l = &s->paths;
    if (s->n_ts != 0 && s->n_ts != l->n)
        return dt_error(DT_ERR_FORMAT, "%s: %d checkpoint paths but %d timestamps", file, l->n,
                        s->n_ts);
    for (int i = 0; i < l->n; i++)
        l->ts[i] = s->n_ts ? s->ts[i] : now;
    if (s->latest >= 0) {
        int i = list_find(l, s->latest);
        double t = i >= 0 ? l->ts[i] : now;
        if (i >= 0)
            list_remove(l, i);
        return list_push(l, s->latest, t);
    }
    return DT_OK;
}

/* Reads dir's state file into *out. DT_END when there is none, DT_ERR_FORMAT when it is
 * malformed, DT_ERR_IO when it cannot be read. */
static dt_status read_state(const char *dir, double now, struct ckpt_list *out)
{
    char file[PATH_CAP];
    dt_status st = build_path(file, sizeof file, dir, STATE_NAME);
    if (st)
        return st;
    FILE *f = fopen(file, "re");
    if (!f)
        return errno == ENOENT ? DT_END : dt_error(DT_ERR_IO, "%s: %s", file, strerror(errno));
    struct state_parse s = {.latest = -1};
    struct stat sb;
    char *line = NULL;
    size_t cap = 0;
    if (fstat(fileno(f), &sb) != 0 || sb.st_size > MAX_STATE_BYTES) {
        st = dt_error(DT_ERR_FORMAT, "%s: not a state file (too large or unreadable)", file);
        goto fail;
    }
    for (int lineno = 1; getline(&line, &cap, f) >= 0; lineno++)
        if ((st = parse_state_line(&s, line, file, lineno)))
            goto fail;
    if (ferror(f)) {
        st = dt_error(DT_ERR_IO, "%s: read: %s", file, strerror(errno));
        goto fail;
    }
    if ((st = finish_state(&s, file, now)))
        goto fail;
    *out = s.paths;
    s.paths = (struct ckpt_list){0};
fail:
    free(line);
    free(s.ts);
    list_free(&s.paths);
    fclose(f);
    return st;
}

static int by_step(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Every ckpt-<step>.safetensors of dir, by increasing step, with its mtime as its timestamp.
 * Temporary files ("*.tmp.*") never match the name. */
static dt_status scan_dir(const char *dir, struct ckpt_list *out)
{
    DIR *d = opendir(dir);
    if (!d)
        return dt_error(DT_ERR_IO, "%s: opendir: %s", dir, strerror(errno));
    dt_status st = DT_OK;
    struct ckpt_list l = {0};
    for (struct dirent *e; (e = readdir(d));) {
        int64_t step = dt_ckpt_step_of_name(e->d_name);
        if (step >= 0 && (st = list_push(&l, step, 0)))
            goto fail;
    }
    if (l.n > 1)
        qsort(l.steps, (size_t)l.n, sizeof *l.steps, by_step);
    for (int i = 0; i < l.n; i++) {
        char path[PATH_CAP], name[64];
        struct stat sb;
        ckpt_name(name, sizeof name, l.steps[i]);
        l.ts[i] = build_path(path, sizeof path, dir, name) == DT_OK && stat(path, &sb) == 0
                      ? (double)sb.st_mtim.tv_sec + (double)sb.st_mtim.tv_nsec * 1e-9
                      : 0;
    }
    *out = l;
    l = (struct ckpt_list){0};
fail:
    list_free(&l);
    closedir(d);
    return st;
}

static int ckpt_exists(const char *dir, int64_t step)
{
    char path[PATH_CAP], name[64];
    struct stat sb;
    ckpt_name(name, sizeof name, step);
    return build_path(path, sizeof path, dir, name) == DT_OK && stat(path, &sb) == 0;
}

static dt_status mkdir_p(const char *dir)
{
    char buf[PATH_CAP];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return dt_error(DT_ERR_INVALID, "%s: path too long", dir);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return dt_error(DT_ERR_IO, "%s: mkdir: %s", buf, strerror(errno));
        if (!(*p = saved))
            break;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return dt_error(DT_ERR_IO, "%s: not a directory", dir);
    return DT_OK;
}

/* The manager's lists from the state file; a malformed one is rebuilt from the directory. */
static dt_status load_list(const dt_ckpt_manager *m, double now, struct ckpt_list *l)
{
    dt_status st = read_state(m->dir, now, l);
    if (st == DT_ERR_FORMAT) {
        if (m->log)
            dt_log_to(m->log, DT_LOG_WARN, "dtrain: warning: %s; listing the ckpt-*.safetensors "
                      "files of %s instead", dt_last_error(), m->dir);
        st = scan_dir(m->dir, l);
    }
    if (st == DT_END)
        st = DT_OK;
    if (st)
        return st;
    for (int i = l->n - 1; i >= 0; i--)
        if (!ckpt_exists(m->dir, l->steps[i]))
            list_remove(l, i);
    if (!l->has_last_preserved)
        l->last_preserved = now;
    return DT_OK;
}

static void manager_take(dt_ckpt_manager *m, struct ckpt_list *l)
{
    free(m->steps);
    free(m->timestamps);
    m->steps = l->steps;
    m->timestamps = l->ts;
    m->n_kept = l->n;
    m->last_preserved = l->last_preserved;
    *l = (struct ckpt_list){0};
}

/* A save writes "<name>.tmp.<pid>" and renames it; a run killed in between leaves the file.
 * Those of processes that no longer exist on this host are removed when the directory's writer
 * opens it. (Only one writer may use a directory: a writer on another host sharing it could
 * have a pid that is free here.) */
static void remove_stale_temps(const dt_ckpt_manager *m)
{
    DIR *d = opendir(m->dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        const char *t = strstr(e->d_name, ".tmp.");
        if (!t || (strncmp(e->d_name, "ckpt-", 5) != 0 && strncmp(e->d_name, "checkpoint", 10) != 0))
            continue;
        char *end;
        long pid = strtol(t + 5, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[PATH_CAP + 256];
        snprintf(path, sizeof path, "%s/%s", m->dir, e->d_name);
        if (unlink(path) == 0 && m->log)
            dt_log_to(m->log, DT_LOG_INFO, "dtrain: removed %s, left by a run that stopped while "
                      "saving", path);
    }
    if (d)
        closedir(d);
}

dt_status dt_ckpt_manager_open(dt_ckpt_manager *m, const char *dir, int max_to_keep,
                               double keep_checkpoint_every_n_hours, FILE *log)
{
    memset(m, 0, sizeof *m);
    if (!dir || !*dir)
        return dt_error(DT_ERR_INVALID, "checkpoint manager: empty directory");
    if (max_to_keep < 0 || !(keep_checkpoint_every_n_hours >= 0) ||
        !isfinite(keep_checkpoint_every_n_hours))
        return dt_error(DT_ERR_INVALID, "%s: max_to_keep %d and keep_checkpoint_every_n_hours %g "
                        "must be >= 0", dir, max_to_keep, keep_checkpoint_every_n_hours);
    /* Room for "/ckpt-<19 digits>.safetensors.tmp.<pid>" after the directory. */
    if (strlen(dir) + 64 >= sizeof m->dir)
        return dt_error(DT_ERR_INVALID, "%s: path too long", dir);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    for (size_t n = strlen(m->dir); n > 1 && m->dir[n - 1] == '/';)
        m->dir[--n] = '\0';
    m->max_to_keep = max_to_keep;
    m->keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours;
    m->log = log;
    struct ckpt_list l = {0};
    dt_status st = mkdir_p(m->dir);
    if (st || (st = load_list(m, wall_now(), &l)))
        return st;
    manager_take(m, &l);
    remove_stale_temps(m);
    return DT_OK;
}

void dt_ckpt_manager_close(dt_ckpt_manager *m)
{
    free(m->steps);
    free(m->timestamps);
    m->steps = NULL;
    m->timestamps = NULL;
    m->n_kept = 0;
}

/* The shortest decimal that reads back as t, so the state file stays legible. */
static void format_time(char *out, size_t cap, double t)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, t);
        if (strtod(out, NULL) == t)
            return;
    }
}

static dt_status write_state(const dt_ckpt_manager *m)
{
    char path[PATH_CAP], name[64], t[40];
    dt_status st = build_path(path, sizeof path, m->dir, STATE_NAME);
    if (st)
        return st;
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f)
        return dt_error(DT_ERR_NOMEM, "%s: out of memory", path);
    if (m->n_kept) {
        ckpt_name(name, sizeof name, m->steps[m->n_kept - 1]);
        fprintf(f, "model_checkpoint_path: \"%s\"\n", name);
    }
    for (int i = 0; i < m->n_kept; i++) {
        ckpt_name(name, sizeof name, m->steps[i]);
        fprintf(f, "all_model_checkpoint_paths: \"%s\"\n", name);
    }
    for (int i = 0; i < m->n_kept; i++) {
        format_time(t, sizeof t, m->timestamps[i]);
        fprintf(f, "all_model_checkpoint_timestamps: %s\n", t);
    }
    format_time(t, sizeof t, m->last_preserved);
    fprintf(f, "last_preserved_timestamp: %s\n", t);
    if (fclose(f) != 0 || !text) {
        free(text);
        return dt_error(DT_ERR_NOMEM, "%s: out of memory", path);
    }
    dt_file_part part = {text, n};
    st = dt_file_write_atomic(path, &part, 1);
    free(text);
    return st;
}

void dt_ckpt_shard_name(char *out, size_t cap, int64_t step, int k, int n)
{
    snprintf(out, cap, "ckpt-%lld.ps-%d-of-%d.safetensors", (long long)step, k, n);
}

enum { MAX_SHARD_FILES = 4096, SHARD_NAME_CAP = 200 };

bool dt_ckpt_is_sharded(const dt_ckpt *c) { return dt_ckpt_meta_get(c, "ps_shards") != NULL; }

void dt_ckpt_close_shards(dt_ckpt **files, int n)
{
    for (int i = 0; i < n; i++)
        dt_ckpt_close(files[i]);
    free(files);
}

/* The manifest's "ps_shards" list names files in its own directory: a name there is a plain
 * file name, never a path, so a manifest cannot point outside it. */
dt_status dt_ckpt_open_shards(const dt_ckpt *manifest, dt_ckpt ***files_out, int *n_out)
{
    const char *list = dt_ckpt_meta_get(manifest, "ps_shards"), *path = dt_ckpt_path(manifest);
    *files_out = NULL, *n_out = 0;
    if (!list)
        return dt_error(DT_END, "%s: not a sharded checkpoint (no __metadata__.ps_shards)", path);
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path + 1) : 0;
    dt_ckpt **files = calloc(MAX_SHARD_FILES, sizeof *files);
    if (!files)
        return dt_error(DT_ERR_NOMEM, "no memory to open %s's shard files", path);
    int n = 0;
    dt_status st = DT_OK;
    for (const char *p = list; *p && st == DT_OK;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0 || len > SHARD_NAME_CAP || memchr(p, '/', len) || n == MAX_SHARD_FILES) {
            st = dt_error(DT_ERR_FORMAT, "%s: __metadata__.ps_shards: an empty or overlong "
                          "name, a path, or more than %d files", path, MAX_SHARD_FILES);
            break;
        }
        char file[PATH_CAP + SHARD_NAME_CAP + 2];
        snprintf(file, sizeof file, "%.*s%.*s", dir_len, path, (int)len, p);
        st = dt_ckpt_open(file, &files[n]);
        if (st)
            st = dt_error_prefix(st, "%s names its shard file", path);
        else
            n++;
        p = end ? end + 1 : p + len;
    }
    if (st == DT_OK && n == 0)
        st = dt_error(DT_ERR_FORMAT, "%s: __metadata__.ps_shards names no file", path);
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", dt_last_error());
        dt_ckpt_close_shards(files, n);
        return dt_error(st, "%s", msg);
    }
    *files_out = files, *n_out = n;
    return DT_OK;
}

/* A sharded checkpoint's shard files, deleted with its manifest. */
static void remove_shards(const dt_ckpt_manager *m, int64_t step)
{
    DIR *d = opendir(m->dir);
    if (!d)
        return;
    char prefix[64], path[PATH_CAP];
    int n = snprintf(prefix, sizeof prefix, "ckpt-%lld.ps-", (long long)step);
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, prefix, (size_t)n) != 0 || len < 12 ||
            strcmp(e->d_name + len - 12, ".safetensors") != 0)
            continue;
        if (build_path(path, sizeof path, m->dir, e->d_name) == DT_OK && unlink(path) != 0 &&
            errno != ENOENT && m->log)
            dt_log_to(m->log, DT_LOG_WARN, "dtrain: warning: %s: unlink: %s", path,
                      strerror(errno));
    }
    closedir(d);
}

/* TF's sweep: the oldest beyond max_to_keep leave the list; each one's file is deleted unless it
 * is the first at least keep_checkpoint_every_n_hours after the last one preserved. */
static void sweep(dt_ckpt_manager *m)
{
    if (!m->max_to_keep)
        return;
    struct ckpt_list l = {m->n_kept, m->n_kept, m->steps, m->timestamps, 0, 0};
    while (l.n > m->max_to_keep) {
        int64_t step = l.steps[0];
        double t = l.ts[0];
        list_remove(&l, 0);
        if (m->keep_checkpoint_every_n_hours > 0 &&
            t >= m->last_preserved + m->keep_checkpoint_every_n_hours * 3600.0) {
            m->last_preserved = t;
            continue;
        }
        char path[PATH_CAP], name[64];
        ckpt_name(name, sizeof name, step);
        if (build_path(path, sizeof path, m->dir, name) == DT_OK && unlink(path) != 0 &&
            errno != ENOENT && m->log)
            dt_log_to(m->log, DT_LOG_WARN, "dtrain: warning: %s: unlink: %s", path,
                      strerror(errno));
        remove_shards(m, step);
    }
    m->n_kept = l.n;
}

dt_status dt_ckpt_manager_save(dt_ckpt_manager *m, int64_t step, const dt_arena *const *arenas,
                               int n_arenas, const dt_ckpt_meta *meta, int n_meta,
                               char *path_out, size_t path_cap)
{
    char path[PATH_CAP], name[64];
    if (step < 0)
        return dt_error(DT_ERR_INVALID, "%s: step %lld is negative", m->dir, (long long)step);
    ckpt_name(name, sizeof name, step);
    dt_status st = build_path(path, sizeof path, m->dir, name);
    if (st)
        return st;
    if (path_out && strlen(path) >= path_cap)
        return dt_error(DT_ERR_INVALID, "%s: longer than the %zu-byte buffer for it", path, path_cap);
    if ((st = dt_ckpt_save(path, arenas, n_arenas, meta, n_meta)))
        return st;
    if (path_out)
        snprintf(path_out, path_cap, "%s", path);
    struct ckpt_list l = {m->n_kept, m->n_kept, m->steps, m->timestamps, m->last_preserved, 1};
    int i = list_find(&l, step);
    if (i >= 0)
        list_remove(&l, i);
    st = list_push(&l, step, wall_now());
    m->steps = l.steps, m->timestamps = l.ts, m->n_kept = l.n;
    if (st)
        return st;
    sweep(m);
    return write_state(m);
}

/* ---- open the latest ---- */

/* dt_ckpt_open's messages begin with the path already: it is not repeated. */
static void warn_skip(FILE *log, const char *path, int more)
{
    if (!log)
        return;
    const char *msg = dt_last_error();
    size_t n = strlen(path);
    int named = strncmp(msg, path, n) == 0 && msg[n] == ':';
    dt_log_to(log, DT_LOG_WARN, "dtrain: warning: %s%s%s; %s", named ? "" : path,
              named ? "" : ": ", msg,
              more ? "trying an older checkpoint" : "no older checkpoint to try");
}

/* The steps to try, newest first: the state file's list from its latest, then the directory's
 * other checkpoints by decreasing step. */
static dt_status candidates(const char *dir, FILE *log, struct ckpt_list *out)
{
    struct ckpt_list state = {0}, scan = {0};
    dt_status st = read_state(dir, 0, &state);
    if (st == DT_ERR_NOMEM)
        goto fail;
    /* A broken or unreadable state file still leaves the checkpoints themselves. */
    if (st != DT_OK && st != DT_END && log)
        dt_log_to(log, DT_LOG_WARN, "dtrain: warning: %s; trying the ckpt-*.safetensors files "
                  "of %s", dt_last_error(), dir);
    if ((st = scan_dir(dir, &scan)))
        goto fail;
    for (int i = state.n - 1; i >= 0; i--)
        if ((st = list_push(out, state.steps[i], 0)))
            goto fail;
    for (int i = scan.n - 1; i >= 0; i--)
        if (list_find(out, scan.steps[i]) < 0 && (st = list_push(out, scan.steps[i], 0)))
            goto fail;
fail:
    list_free(&state);
    list_free(&scan);
    return st;
}

static dt_status open_latest(const char *dir, FILE *log, bool map, dt_ckpt **out)
{
    *out = NULL;
    struct ckpt_list l = {0};
    struct stat sb;
    dt_status st = DT_END;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        goto fail;
    if ((st = candidates(dir, log, &l)))
        goto fail;
    st = DT_END;
    for (int i = 0; i < l.n && st == DT_END; i++) {
        char path[PATH_CAP], name[64];
        ckpt_name(name, sizeof name, l.steps[i]);
        if (build_path(path, sizeof path, dir, name) != DT_OK)
            continue;
        dt_status s = open_checkpoint(path, map, out);
        if (s == DT_OK)
            st = DT_OK;
        else if (s == DT_ERR_NOMEM)
            st = s;
        else
            warn_skip(log, path, i + 1 < l.n);
    }
fail:
    list_free(&l);
    if (st == DT_END)
        return dt_error(DT_END, "%s: no valid checkpoint", dir);
    return st;
}

dt_status dt_ckpt_open_latest(const char *dir, FILE *log, dt_ckpt **out)
{
    return open_latest(dir, log, false, out);
}

dt_status dt_ckpt_map_latest(const char *dir, FILE *log, dt_ckpt **out)
{
    return open_latest(dir, log, true, out);
}
