/* onnx-forms.h: what the built-in layers' ONNX forms share
 * (onnx-layers.c, onnx-attention.c): their arguments, one- and two-input
 * nodes, and the forms a composite layer (TransformerEncoderLayer) builds
 * from. */
#pragma once

#include "export-private.h"
#include "../plugin/plugin-host.h"

/* What every built-in form reads: the builder, the node, its inputs'
 * names and shapes, its output's name, its tensors and their names (the
 * arguments of an em_layer_onnx_fn, the builder unwrapped). A composite
 * form calls another with a node of its own making (a name under its
 * own, the attributes that form reads). */
typedef struct {
  em_onnx_builder *b;
  const em_layer_node *node;
  int n_in;
  const char *const *in;
  const em_shape *in_shapes;
  const char *out;
  int n_t;
  em_tensor *const *t;
  const char *const *tn;
} form_args;

static inline const char *em_onnx_op1(em_onnx_builder *b, const char *op, const char *node,
                                      const char *x, const char *out) {
  const char *in[1] = {x};
  return em_onnx_node(b, op, node, 1, in, out) ? out : NULL;
}

static inline const char *em_onnx_op2(em_onnx_builder *b, const char *op, const char *node,
                                      const char *x, const char *y, const char *out) {
  const char *in[2] = {x, y};
  return em_onnx_node(b, op, node, 2, in, out) ? out : NULL;
}

/* Linear (t: weight[, bias]), GELU (exact), LayerNorm (t: weight, bias;
 * the node's "eps"). */
void em_onnx_linear(const form_args *a);
void em_onnx_gelu(const form_args *a);
void em_onnx_layer_norm(const form_args *a);

/* Each form as an em_layer_onnx_fn (the registry's kind). */
#define EM_ONNX_FORM(f)                                                                      \
  em_status f##_form(em_onnx_graph *g, const em_layer_node *node, int n_in,                   \
                     const char *const *in, const em_shape *in_shapes, const char *out,       \
                     int n_t, em_tensor *const *t, const char *const *tn, em_error *err) {    \
    (void)err;                                                                               \
    f(&(form_args){g->b, node, n_in, in, in_shapes, out, n_t, t, tn});                       \
    return EM_OK;                                                                            \
  }
#define EM_ONNX_FORM_DECL(f)                                                                 \
  em_status f##_form(em_onnx_graph *g, const em_layer_node *node, int n_in,                   \
                     const char *const *in, const em_shape *in_shapes, const char *out,       \
                     int n_t, em_tensor *const *t, const char *const *tn, em_error *err)
/* onnx-attention.c */
EM_ONNX_FORM_DECL(em_onnx_positional);
EM_ONNX_FORM_DECL(em_onnx_attention);
EM_ONNX_FORM_DECL(em_onnx_encoder);
EM_ONNX_FORM_DECL(em_onnx_to_sequence);
EM_ONNX_FORM_DECL(em_onnx_class_token);
EM_ONNX_FORM_DECL(em_onnx_sequence_pool);
