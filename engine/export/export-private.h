/* export-private.h: what the files of engine/export share: a small
 * builder over the protobuf-c structs of onnx.proto. Every string and
 * struct the builder makes comes from its arena and is released with it,
 * so the mapping code never frees piecemeal. */
#pragma once

#include "em-export.h"
#include "../nn/nn-spec.h"
#include "onnx.pb-c.h"

typedef struct {
  void **blocks;
  size_t n, cap;
  bool failed; /* an allocation failed: the builder reports EM_ERR_NOMEM */
  Onnx__GraphProto *graph;
  size_t cap_node, cap_init;
  int tmp_count; /* for unique intermediate value names */
  bool free_length; /* a token model's sequence length is free: forms read
                       it off the graph (Shape) instead of the spec */
} em_onnx_builder;

/* Zeroed memory from the arena (NULL sets failed). */
void *em_onnx_alloc(em_onnx_builder *b, size_t n);
char *em_onnx_strdup(em_onnx_builder *b, const char *s);
char *em_onnx_printf(em_onnx_builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void em_onnx_builder_free(em_onnx_builder *b);

/* A new node op_type(inputs...) -> output, appended to the graph; name is
 * the node's name in the graph. Returns NULL on allocation failure. */
Onnx__NodeProto *em_onnx_node(em_onnx_builder *b, const char *op_type, const char *name,
                              int n_in, const char *const *inputs, const char *output);
void em_onnx_attr_int(em_onnx_builder *b, Onnx__NodeProto *n, const char *name, int64_t v);
void em_onnx_attr_float(em_onnx_builder *b, Onnx__NodeProto *n, const char *name, float v);
void em_onnx_attr_ints(em_onnx_builder *b, Onnx__NodeProto *n, const char *name, int k,
                       const int64_t *v);
/* A float initializer named name with a copy of t's values (f32 or f64,
 * written as f32 little-endian). */
void em_onnx_init_tensor(em_onnx_builder *b, const char *name, const em_tensor *t);
/* A float scalar / int64 vector initializer. */
void em_onnx_init_scalar(em_onnx_builder *b, const char *name, float v);
void em_onnx_init_i64s(em_onnx_builder *b, const char *name, int k, const int64_t *v);
/* An initializer of any element type from host values (elem_size bytes
 * each, written little-endian). */
void em_onnx_init_raw(em_onnx_builder *b, const char *name, int32_t dtype, int ndim,
                      const int64_t *dims, const void *data, size_t elem_size);
/* "<base>/<what>" unique within the graph. */
char *em_onnx_tmp_name(em_onnx_builder *b, const char *base, const char *what);

/* The public builder a layer's ONNX form writes into (em-plugin.h): the
 * exporter's builder, the node being mapped and the first misuse. */
struct em_onnx_graph {
  em_onnx_builder *b;
  const char *node;   /* the spec node being mapped: names start with it */
  const char *misuse; /* the first call the mapping made wrongly, or NULL */
};

/* Appends the nodes of spec node i (inputs already named in in_names)
 * writing value out_name, through its type's form in the registry
 * (onnx-plugin.c); refused naming the node and type when it has none.
 * tensors: the node's parameters and buffers in declaration order, with
 * their state-dict names. */
em_status em_onnx_layer(em_onnx_builder *b, const em_spec *spec, int i, const char *const *in_names,
                        const char *out_name, em_tensor *const *tensors,
                        const char *const *tensor_names, em_error *err);
/* Adds the built-in layer types' forms to the registry, once
 * (onnx-layers.c). */
void em_onnx_forms_register(void);
/* A type exported as the identity (Dropout: its value is its input's). */
bool em_onnx_layer_is_identity(const em_layer_type *type);
/* A quantised Linear layer (engine/quant) in ONNX operators (onnx-quant.c):
 * x -> out, its int8 weights named after weight_name, its bias (if any)
 * bias_name. */
#include "../quant/quant-layer.h"
em_status em_onnx_quant_linear(em_onnx_builder *b, const char *name, const char *x,
                               const char *out, const em_quant_layer *L, const char *weight_name,
                               const char *bias_name, em_error *err);
