/* An ONNX graph under construction and its writing (see onnx_graph.h).
 *
 * The protobuf-c structures of onnx.proto are filled in place: every message, string and small
 * array comes from a bump allocator of chunks the builder owns, the growing lists (nodes,
 * initializers) are pointer vectors, and a tensor's bytes are pointed at, not copied. og_write
 * packs the ModelProto straight into the file through a ProtobufCBuffer whose append writes,
 * so the model is never held in memory as bytes. */
#include "onnx_graph.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/fileio.h"
#include "onnx.pb-c.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "ONNX raw tensor data is little-endian and is written from memory as it is");

/* The model file stays below protobuf's 2 GiB: tensors that would take the inline data past
 * this go to the data file whatever their size. */
#define INLINE_CAP ((uint64_t)7 << 28) /* 1.75 GiB */
/* External tensors start at multiples of this, so that a reader can map each one. */
#define EXTERNAL_ALIGN 4096
#define CHUNK_BYTES (64 * 1024)
#define MAX_ATTRS 8

struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

typedef struct {
    void **items;
    size_t n, cap;
} ptr_vec;

struct og_graph {
    struct chunk *chunks;
    dt_status err;           /* the first failure, DT_OK until then */
    char err_msg[1024];
    const char *scope;
    int counter;             /* fresh names */
    Onnx__GraphProto graph;
    Onnx__ModelProto model;
    Onnx__OperatorSetIdProto opset, ml_opset;
    Onnx__OperatorSetIdProto *opsets[2];
    bool uses_ml;            /* a node of the ai.onnx.ml domain */
    ptr_vec nodes, inits, inputs, outputs, meta;
    uint64_t inline_bytes;
    /* External data. */
    char data_path[DT_PATH_CAP];
    char location[DT_PATH_CAP];
    uint64_t threshold;
    dt_file_replace data_replace;
    FILE *data;              /* open once the first external tensor came */
    uint64_t data_bytes;
    bool data_committed;
    og_stats stats;
};

/* ---- Memory ---- */

static void fail_nomem(og_graph *g)
{
    if (g->err == DT_OK) {
        g->err = DT_ERR_NOMEM;
        snprintf(g->err_msg, sizeof g->err_msg, "no memory for the ONNX graph");
    }
}

static void fail_msg(og_graph *g, dt_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail_msg(og_graph *g, dt_status code, const char *fmt, ...)
{
    if (g->err != DT_OK)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err_msg, sizeof g->err_msg, fmt, ap);
    va_end(ap);
    g->err = code;
}

/* n zeroed bytes, 16-byte aligned, living as long as g; NULL (and the failure noted) without
 * memory. */
static void *mem(og_graph *g, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct chunk *c = g->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK_BYTES ? n : CHUNK_BYTES;
        struct chunk *nc = malloc(sizeof *nc + cap);
        if (!nc) {
            fail_nomem(g);
            return NULL;
        }
        nc->used = 0, nc->cap = cap;
        /* A large block gets its own chunk behind the current one, which keeps its room. */
        if (c && n > CHUNK_BYTES) {
            nc->next = c->next;
            c->next = nc;
        } else {
            nc->next = c;
            g->chunks = nc;
        }
        c = nc;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

static char *str(og_graph *g, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = mem(g, n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static char *strf(og_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *strf(og_graph *g, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return str(g, buf);
}

static void push(og_graph *g, ptr_vec *v, void *p)
{
    if (!p)
        return;
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 16;
        void **items = realloc(v->items, cap * sizeof *items);
        if (!items) {
            fail_nomem(g);
            return;
        }
        v->items = items, v->cap = cap;
    }
    v->items[v->n++] = p;
}

float *og_alloc_f32(og_graph *g, size_t n) { return mem(g, n * sizeof(float)); }

/* ---- The graph ---- */

dt_status og_create(const char *name, const char *data_path, const char *location,
                    uint64_t threshold, og_graph **out)
{
    *out = NULL;
    og_graph *g = calloc(1, sizeof *g);
    if (!g)
        return dt_error(DT_ERR_NOMEM, "no memory for an ONNX graph");
    if ((size_t)snprintf(g->data_path, sizeof g->data_path, "%s", data_path) >=
            sizeof g->data_path ||
        (size_t)snprintf(g->location, sizeof g->location, "%s", location) >= sizeof g->location) {
        free(g);
        return dt_error(DT_ERR_INVALID, "%s: the path is too long", data_path);
    }
    g->threshold = threshold;
    onnx__graph_proto__init(&g->graph);
    onnx__model_proto__init(&g->model);
    g->graph.name = str(g, name);
    *out = g;
    return DT_OK;
}

void og_destroy(og_graph *g)
{
    if (!g)
        return;
    if (g->data) {
        fclose(g->data);
        dt_file_replace_abort(&g->data_replace);
    }
    for (struct chunk *c = g->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(g->nodes.items), free(g->inits.items), free(g->inputs.items), free(g->outputs.items);
    free(g->meta.items);
    free(g);
}

void og_scope(og_graph *g, const char *scope) { g->scope = scope ? str(g, scope) : NULL; }

static const char *fresh_name(og_graph *g, const char *what)
{
    int k = g->counter++;
    char *s = g->scope ? strf(g, "%s/%s_%d", g->scope, what, k) : strf(g, "%s_%d", what, k);
    return s ? s : "?";
}

/* ---- Inputs and outputs ---- */

static Onnx__ValueInfoProto *value_info(og_graph *g, const char *name, og_type t, int n_dims,
                                        const int64_t *dims, const char *const *dim_names)
{
    Onnx__ValueInfoProto *vi = mem(g, sizeof *vi);
    Onnx__TypeProto *tp = mem(g, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = mem(g, sizeof *tt);
    Onnx__TensorShapeProto *sh = mem(g, sizeof *sh);
    Onnx__TensorShapeProto__Dimension **dv = mem(g, (size_t)(n_dims + 1) * sizeof *dv);
    if (!vi || !tp || !tt || !sh || !dv)
        return NULL;
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    for (int i = 0; i < n_dims; i++) {
        Onnx__TensorShapeProto__Dimension *d = mem(g, sizeof *d);
        if (!d)
            return NULL;
        onnx__tensor_shape_proto__dimension__init(d);
        if (dims[i] < 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = str(g, dim_names[i]);
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = dims[i];
        }
        dv[i] = d;
    }
    sh->n_dim = (size_t)n_dims;
    sh->dim = dv;
    tt->has_elem_type = 1;
    tt->elem_type = (int32_t)t;
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->name = str(g, name);
    vi->type = tp;
    return vi;
}

void og_input(og_graph *g, const char *name, og_type t, int n_dims, const int64_t *dims,
              const char *const *dim_names)
{
    push(g, &g->inputs, value_info(g, name, t, n_dims, dims, dim_names));
}

void og_output(og_graph *g, const char *name, og_type t, int n_dims, const int64_t *dims,
               const char *const *dim_names)
{
    push(g, &g->outputs, value_info(g, name, t, n_dims, dims, dim_names));
}

/* ---- Initializers ---- */

static Onnx__StringStringEntryProto *entry(og_graph *g, const char *key, const char *value)
{
    Onnx__StringStringEntryProto *e = mem(g, sizeof *e);
    if (!e)
        return NULL;
    onnx__string_string_entry_proto__init(e);
    e->key = str(g, key);
    e->value = str(g, value);
    return e;
}

static bool write_all(FILE *f, const void *data, size_t n)
{
    const unsigned char *p = data;
    while (n > 0) { /* in pieces: one fwrite of many GiB is legal, but slow to fail */
        size_t piece = n < ((size_t)64 << 20) ? n : ((size_t)64 << 20);
        if (fwrite(p, 1, piece, f) != piece)
            return false;
        p += piece, n -= piece;
    }
    return true;
}

/* Appends n bytes at the next aligned offset of the data file; returns the offset. */
static uint64_t write_external(og_graph *g, const char *name, const void *data, uint64_t n)
{
    if (!g->data) {
        dt_status st = dt_file_replace_begin(&g->data_replace, g->data_path, false);
        if (st) {
            fail_msg(g, st, "%s", dt_last_error());
            return 0;
        }
        g->data = fopen(dt_file_replace_path(&g->data_replace), "wb");
        if (!g->data) {
            fail_msg(g, DT_ERR_IO, "%s: cannot write: %s", g->data_path, strerror(errno));
            dt_file_replace_abort(&g->data_replace);
            return 0;
        }
    }
    static const unsigned char zeros[EXTERNAL_ALIGN];
    uint64_t pad = (EXTERNAL_ALIGN - g->data_bytes % EXTERNAL_ALIGN) % EXTERNAL_ALIGN;
    uint64_t at = g->data_bytes + pad;
    if (!write_all(g->data, zeros, (size_t)pad) || !write_all(g->data, data, (size_t)n)) {
        fail_msg(g, DT_ERR_IO, "%s: writing tensor %s: %s", g->data_path, name, strerror(errno));
        return 0;
    }
    g->data_bytes = at + n;
    return at;
}

static const char *add_tensor(og_graph *g, const char *name, og_type t, int n_dims,
                              const int64_t *dims, const void *data, size_t elem_bytes,
                              bool may_go_external)
{
    Onnx__TensorProto *tp = mem(g, sizeof *tp);
    int64_t *dv = mem(g, (size_t)(n_dims + 1) * sizeof *dv);
    if (!tp || !dv)
        return "?";
    onnx__tensor_proto__init(tp);
    uint64_t n = 1;
    for (int i = 0; i < n_dims; i++) {
        dv[i] = dims[i];
        n *= (uint64_t)dims[i];
    }
    uint64_t bytes = n * elem_bytes;
    tp->n_dims = (size_t)n_dims;
    tp->dims = dv;
    tp->has_data_type = 1;
    tp->data_type = (int32_t)t;
    tp->name = str(g, name);
    bool external = may_go_external &&
                    (bytes > g->threshold || g->inline_bytes + bytes > INLINE_CAP);
    if (external) {
        uint64_t at = write_external(g, name, data, bytes);
        Onnx__StringStringEntryProto **ed = mem(g, 3 * sizeof *ed);
        if (!ed)
            return "?";
        char num[32];
        ed[0] = entry(g, "location", g->location);
        snprintf(num, sizeof num, "%llu", (unsigned long long)at);
        ed[1] = entry(g, "offset", num);
        snprintf(num, sizeof num, "%llu", (unsigned long long)bytes);
        ed[2] = entry(g, "length", num);
        tp->n_external_data = 3;
        tp->external_data = ed;
        tp->has_data_location = 1;
        tp->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
        g->stats.n_external++;
    } else {
        tp->has_raw_data = 1;
        tp->raw_data.len = (size_t)bytes;
        tp->raw_data.data = (uint8_t *)data;
        g->inline_bytes += bytes;
    }
    push(g, &g->inits, tp);
    return tp->name ? tp->name : "?";
}

const char *og_tensor_f32(og_graph *g, const char *name, int n_dims, const int64_t *dims,
                          const float *data)
{
    return add_tensor(g, name, OG_FLOAT, n_dims, dims, data, sizeof(float), true);
}

const char *og_const_f32(og_graph *g, float v)
{
    float *d = og_alloc_f32(g, 1);
    if (!d)
        return "?";
    *d = v;
    return add_tensor(g, fresh_name(g, "const"), OG_FLOAT, 0, NULL, d, sizeof(float), false);
}

const char *og_const_f32s(og_graph *g, int n, const float *v)
{
    float *d = og_alloc_f32(g, (size_t)(n ? n : 1));
    if (!d)
        return "?";
    memcpy(d, v, (size_t)n * sizeof *d);
    int64_t dims[1] = {n};
    return add_tensor(g, fresh_name(g, "const"), OG_FLOAT, 1, dims, d, sizeof(float), false);
}

const char *og_str(og_graph *g, const char *s)
{
    const char *d = str(g, s);
    return d ? d : "?";
}

const char *og_const_i64(og_graph *g, int n, const int64_t *v)
{
    int64_t *d = mem(g, (size_t)(n ? n : 1) * sizeof *d);
    if (!d)
        return "?";
    memcpy(d, v, (size_t)n * sizeof *d);
    int64_t dims[1] = {n};
    return add_tensor(g, fresh_name(g, "const"), OG_INT64, 1, dims, d, sizeof(int64_t), false);
}

/* ---- Nodes ---- */

const char *og_node(og_graph *g, const char *op, const char *out, int n_in,
                    const char *const *in)
{
    Onnx__NodeProto *nd = mem(g, sizeof *nd);
    char **ins = mem(g, (size_t)(n_in + 1) * sizeof *ins);
    char **outs = mem(g, sizeof *outs);
    Onnx__AttributeProto **attrs = mem(g, MAX_ATTRS * sizeof *attrs);
    if (!nd || !ins || !outs || !attrs)
        return "?";
    onnx__node_proto__init(nd);
    for (int i = 0; i < n_in; i++)
        ins[i] = str(g, in[i]);
    outs[0] = out ? str(g, out) : (char *)fresh_name(g, op);
    nd->n_input = (size_t)n_in;
    nd->input = ins;
    nd->n_output = 1;
    nd->output = outs;
    nd->op_type = str(g, op);
    nd->name = outs[0] ? strf(g, "%s:node", outs[0]) : NULL;
    nd->attribute = attrs;
    push(g, &g->nodes, nd);
    return outs[0] ? outs[0] : "?";
}

/* An attribute of the type on the last node made; NULL (and the failure noted) when it cannot
 * be. */
static Onnx__AttributeProto *new_attr(og_graph *g, const char *name,
                                      Onnx__AttributeProto__AttributeType type)
{
    if (g->nodes.n == 0) {
        fail_msg(g, DT_ERR_INVALID, "an ONNX attribute before any node");
        return NULL;
    }
    Onnx__NodeProto *nd = g->nodes.items[g->nodes.n - 1];
    if (nd->n_attribute == MAX_ATTRS) {
        fail_msg(g, DT_ERR_INVALID, "node %s: more than %d attributes", nd->op_type, MAX_ATTRS);
        return NULL;
    }
    Onnx__AttributeProto *a = mem(g, sizeof *a);
    if (!a)
        return NULL;
    onnx__attribute_proto__init(a);
    a->name = str(g, name);
    a->has_type = 1;
    a->type = type;
    nd->attribute[nd->n_attribute++] = a;
    return a;
}

void og_attr_int(og_graph *g, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = new_attr(g, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a)
        a->has_i = 1, a->i = v;
}

void og_attr_float(og_graph *g, const char *name, float v)
{
    Onnx__AttributeProto *a = new_attr(g, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (a)
        a->has_f = 1, a->f = v;
}

void og_attr_ints(og_graph *g, const char *name, int n, const int64_t *v)
{
    Onnx__AttributeProto *a = new_attr(g, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *d = mem(g, (size_t)(n ? n : 1) * sizeof *d);
    if (a && d) {
        memcpy(d, v, (size_t)n * sizeof *d);
        a->n_ints = (size_t)n;
        a->ints = d;
    }
}

void og_ml_domain(og_graph *g)
{
    if (g->nodes.n == 0) {
        fail_msg(g, DT_ERR_INVALID, "an ONNX domain before any node");
        return;
    }
    Onnx__NodeProto *nd = g->nodes.items[g->nodes.n - 1];
    nd->domain = (char *)OG_ML_DOMAIN;
    g->uses_ml = true;
}

void og_meta(og_graph *g, const char *key, const char *value)
{
    push(g, &g->meta, entry(g, key, value));
}

void og_doc(og_graph *g, const char *text) { g->model.doc_string = str(g, text); }

/* ---- Writing ---- */

/* A protobuf-c output buffer that writes what it is given to a file. */
typedef struct {
    ProtobufCBuffer base;
    FILE *f;
    bool failed;
    uint64_t n;
} file_sink;

static void sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
    file_sink *s = (file_sink *)b;
    if (!s->failed && !write_all(s->f, data, len))
        s->failed = true;
    s->n += len;
}

static dt_status write_model(og_graph *g, const char *path)
{
    size_t packed = protobuf_c_message_get_packed_size(&g->model.base);
    if (packed > (size_t)INT32_MAX)
        return dt_error(DT_ERR_INVALID, "%s: the model would be %zu bytes, over protobuf's 2 "
                        "GiB: lower the external data threshold", path, packed);
    dt_file_replace r;
    dt_status st = dt_file_replace_begin(&r, path, true);
    if (st)
        return st;
    FILE *f = fopen(dt_file_replace_path(&r), "wb");
    if (!f) {
        st = dt_error(DT_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        dt_file_replace_abort(&r);
        return st;
    }
    file_sink sink = {.base = {.append = sink_append}, .f = f};
    protobuf_c_message_pack_to_buffer(&g->model.base, &sink.base);
    bool bad = sink.failed || fflush(f) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad)
        bad = true, err = errno;
    if (bad) {
        dt_file_replace_abort(&r);
        return dt_error(DT_ERR_IO, "%s: write failed: %s", path, strerror(err));
    }
    g->stats.model_bytes = sink.n;
    return dt_file_replace_commit(&r);
}

dt_status og_write(og_graph *g, const char *path)
{
    if (g->err != DT_OK)
        return dt_error(g->err, "%s", g->err_msg);
    onnx__operator_set_id_proto__init(&g->opset);
    g->opset.domain = (char *)"";
    g->opset.has_version = 1;
    g->opset.version = OG_OPSET;
    g->opsets[0] = &g->opset;
    onnx__operator_set_id_proto__init(&g->ml_opset);
    g->ml_opset.domain = (char *)OG_ML_DOMAIN;
    g->ml_opset.has_version = 1;
    g->ml_opset.version = OG_ML_OPSET;
    g->opsets[1] = &g->ml_opset;
    Onnx__GraphProto *gr = &g->graph;
    gr->n_node = g->nodes.n, gr->node = (Onnx__NodeProto **)g->nodes.items;
    gr->n_initializer = g->inits.n, gr->initializer = (Onnx__TensorProto **)g->inits.items;
    gr->n_input = g->inputs.n, gr->input = (Onnx__ValueInfoProto **)g->inputs.items;
    gr->n_output = g->outputs.n, gr->output = (Onnx__ValueInfoProto **)g->outputs.items;
    Onnx__ModelProto *m = &g->model;
    m->has_ir_version = 1;
    m->ir_version = OG_IR_VERSION;
    m->n_opset_import = g->uses_ml ? 2 : 1;
    m->opset_import = g->opsets;
    m->producer_name = (char *)"dtrain";
    m->graph = gr;
    m->n_metadata_props = g->meta.n;
    m->metadata_props = (Onnx__StringStringEntryProto **)g->meta.items;
    g->stats.n_nodes = (int)g->nodes.n;
    g->stats.n_initializers = (int)g->inits.n;
    dt_status st = DT_OK;
    /* The data first: a model file never names data that is not there yet. */
    if (g->data) {
        bool bad = fflush(g->data) != 0;
        int err = errno;
        if (fclose(g->data) != 0 && !bad)
            bad = true, err = errno;
        g->data = NULL;
        if (bad) {
            dt_file_replace_abort(&g->data_replace);
            return dt_error(DT_ERR_IO, "%s: write failed: %s", g->data_path, strerror(err));
        }
        if ((st = dt_file_replace_commit(&g->data_replace)))
            return st;
        g->data_committed = true;
        g->stats.data_bytes = g->data_bytes;
    } else if (access(g->data_path, F_OK) == 0 && unlink(g->data_path) != 0) {
        /* An earlier export's data: this model does not read it, and must not seem to. */
        return dt_error(DT_ERR_IO, "%s: cannot remove an earlier export's data: %s",
                        g->data_path, strerror(errno));
    }
    return write_model(g, path);
}

void og_get_stats(const og_graph *g, og_stats *s) { *s = g->stats; }
