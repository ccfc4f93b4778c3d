/* onnx-plugin.c: the ONNX form of plugin layer types. A plugin gives an
 * em_layer_onnx_fn with its layer (em-plugin.h); the exporter calls it for
 * a node whose type is not built in, through the small public builder
 * below (em_onnx_graph), a thin face of the exporter's own builder. A type
 * without a mapping is refused naming the node and the type. */
#include "export-private.h"

#include <string.h>

#include "em-plugin.h"

struct em_onnx_graph {
  em_onnx_builder *b;
  const char *node; /* the spec node being mapped: names start with it */
};

em_onnx_op *em_onnx_graph_node(em_onnx_graph *g, const char *op_type, int n_in,
                                 const char *const *inputs, const char *output) {
  char *name = em_onnx_tmp_name(g->b, g->node, op_type);
  if (!name) return NULL;
  return (em_onnx_op *)em_onnx_node(g->b, op_type, name, n_in, inputs, output);
}

void em_onnx_graph_attr_int(em_onnx_graph *g, em_onnx_op *n, const char *name, int64_t v) {
  if (n) em_onnx_attr_int(g->b, (Onnx__NodeProto *)n, name, v);
}

void em_onnx_graph_attr_float(em_onnx_graph *g, em_onnx_op *n, const char *name, float v) {
  if (n) em_onnx_attr_float(g->b, (Onnx__NodeProto *)n, name, v);
}

void em_onnx_graph_attr_ints(em_onnx_graph *g, em_onnx_op *n, const char *name, int k,
                             const int64_t *v) {
  if (n) em_onnx_attr_ints(g->b, (Onnx__NodeProto *)n, name, k, v);
}

void em_onnx_graph_initializer(em_onnx_graph *g, const char *name, const em_tensor *t) {
  em_onnx_init_tensor(g->b, name, t);
}

void em_onnx_graph_initializer_i64s(em_onnx_graph *g, const char *name, int k, const int64_t *v) {
  em_onnx_init_i64s(g->b, name, k, v);
}

const char *em_onnx_graph_value(em_onnx_graph *g, const char *what) {
  return em_onnx_tmp_name(g->b, g->node, what);
}

em_status em_onnx_plugin_layer(em_onnx_builder *b, const em_spec *spec, int i,
                               const char *const *in, const char *out, em_tensor *const *t,
                               const char *const *tn, em_error *err) {
  const em_spec_node *sn = &spec->nodes[i];
  em_layer_onnx_fn fn = em_layer_onnx_find(sn->type);
  if (!fn) {
    const char *who = em_plugin_provider(sn->type->name);
    return em_error_set(err, EM_ERR_UNSUPPORTED,
                        "node '%s': layer type '%s'%s%s%s has no ONNX form; export supports the "
                        "built-in layers and plugin layers that give one (replace it, or export "
                        "without it)",
                        sn->name, sn->type->name, who ? " (from plugin '" : "", who ? who : "",
                        who ? "')" : "");
  }
  em_shape shapes[EM_LAYER_MAX_INPUTS];
  for (int k = 0; k < sn->n_in; k++)
    shapes[k] = sn->in[k] < 0 ? spec->input : spec->nodes[sn->in[k]].out;
  em_onnx_graph g = {b, sn->name};
  em_error e = {0};
  em_status st = fn(&g, &sn->view, sn->n_in, in, shapes, out, sn->n_decl, t, tn, &e);
  if (st != EM_OK)
    return em_error_set(err, st, "node '%s' (%s): %s", sn->name, sn->type->name, e.msg);
  return EM_OK;
}
