/* An ONNX graph under construction (private to src/serve): nodes, initializers, inputs and
 * outputs, written as an ONNX ModelProto through protobuf-c's code for onnx.proto, generated at
 * build time. The exporters call these functions and never see a protobuf structure.
 *
 * Every string and array lives in the builder's own memory until og_destroy. An initializer's
 * data is borrowed (not copied) until og_write, so a table is written from where the model
 * reads it (a mapped checkpoint) as it is; a tensor over the external-data threshold is written to the data file at once, and
 * borrowed only for the call. Failures (memory, the data file) are remembered and returned by
 * og_write, so a graph is built without a check after each call; the names returned after a
 * failure are placeholders. */
#ifndef DTRAIN_SERVE_ONNX_GRAPH_H
#define DTRAIN_SERVE_ONNX_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/status.h"

/* ONNX's TensorProto.DataType numbers. */
typedef enum { OG_FLOAT = 1, OG_INT64 = 7 } og_type;

/* The ONNX opset the graphs are written for, and the IR version of the file. */
#define OG_OPSET 13
/* ONNX's standard machine-learning domain (LabelEncoder: a dynamic table's keys to its rows). */
#define OG_ML_DOMAIN "ai.onnx.ml"
#define OG_ML_OPSET 2
#define OG_IR_VERSION 8

#define OG_MAX_DIMS 8

typedef struct og_graph og_graph;

/* A graph named name. Tensors of more bytes than threshold go to data_path (created when the
 * first one comes, and named location in the model, relative to the model's directory). */
dt_status og_create(const char *name, const char *data_path, const char *location,
                    uint64_t threshold, og_graph **out);
/* Removes a data file og_write did not commit. Accepts NULL. */
void og_destroy(og_graph *g);

/* Names of values made by og_node come from the scope (a layer's name) and the operator:
 * "dense_1/Gemm_12". NULL: none. */
void og_scope(og_graph *g, const char *scope);

/* A graph input or output: dims[i] < 0 is the symbolic dimension dim_names[i] ("N"). */
void og_input(og_graph *g, const char *name, og_type t, int n_dims, const int64_t *dims,
              const char *const *dim_names);
void og_output(og_graph *g, const char *name, og_type t, int n_dims, const int64_t *dims,
               const char *const *dim_names);

/* An initializer over data, (dims) little-endian float32, borrowed until og_write (or, when it
 * goes to the data file, until the call returns). Returns its name. */
const char *og_tensor_f32(og_graph *g, const char *name, int n_dims, const int64_t *dims,
                          const float *data);
/* Constants, copied: a float scalar; int64 vectors (axes, shapes, indices). */
const char *og_const_f32(og_graph *g, float v);
const char *og_const_i64(og_graph *g, int n, const int64_t *v);
const char *og_const_f32s(og_graph *g, int n, const float *v);
/* A copy of s in the builder's memory ("?" without memory). */
const char *og_str(og_graph *g, const char *s);
/* n floats of the builder's memory, for data an exporter computes (a transposed kernel); NULL
 * without memory. */
float *og_alloc_f32(og_graph *g, size_t n);

/* A node op(in[0..n_in)) with one output, named out (NULL: a fresh name); returns the output's
 * name. Attributes go to the last node added. */
const char *og_node(og_graph *g, const char *op, const char *out, int n_in,
                    const char *const *in);
void og_attr_int(og_graph *g, const char *name, int64_t v);
void og_attr_float(og_graph *g, const char *name, float v);
void og_attr_ints(og_graph *g, const char *name, int n, const int64_t *v);
/* Puts the last node made in the ai.onnx.ml domain (the model then imports it). */
void og_ml_domain(og_graph *g);

/* Shorthands for one and two inputs. */
static inline const char *og_op1(og_graph *g, const char *op, const char *a)
{
    return og_node(g, op, NULL, 1, &a);
}
static inline const char *og_op2(og_graph *g, const char *op, const char *a, const char *b)
{
    const char *in[2] = {a, b};
    return og_node(g, op, NULL, 2, in);
}

/* A metadata_props entry and the model's doc_string. */
void og_meta(og_graph *g, const char *key, const char *value);
void og_doc(og_graph *g, const char *text);

/* Writes the model to path (replacing it whole) and commits the data file. The first failure
 * of the build, or of the writes, naming the file. */
dt_status og_write(og_graph *g, const char *path);

/* After og_write: sizes and counts. */
typedef struct {
    uint64_t model_bytes, data_bytes;
    int n_nodes, n_initializers, n_external;
} og_stats;
void og_get_stats(const og_graph *g, og_stats *s);

#endif
