/* onnx-plugin.c: a layer node in ONNX through its type's form, an
 * em_layer_onnx_fn found in the forms registry: a plugin gives one with its
 * layer (em-plugin.h) and writes through the small public builder below
 * (em_onnx_graph), a thin face of the exporter's own builder; the built-in
 * types' forms (onnx-layers.c) are registered there too and use the
 * builder itself. Every form's nodes are checked to be a valid graph. A
 * type without a form is refused naming the node and the type. */
#include "export-private.h"

#include <string.h>

#include "em-plugin.h"


/* A call with arguments no graph can hold is remembered (the first one)
 * and refused, instead of reaching the builder. */
static bool misused(em_onnx_graph *g, bool bad, const char *what) {
  if (bad && !g->misuse) g->misuse = what;
  return bad;
}

em_onnx_op *em_onnx_graph_node(em_onnx_graph *g, const char *op_type, int n_in,
                                 const char *const *inputs, const char *output) {
  if (misused(g, !op_type || !op_type[0], "em_onnx_graph_node without an op_type") ||
      misused(g, !output || !output[0], "em_onnx_graph_node without an output name") ||
      misused(g, n_in < 0 || n_in > 1024 || (n_in && !inputs),
              "em_onnx_graph_node with a bad input count or no inputs"))
    return NULL;
  for (int k = 0; k < n_in; k++)
    if (misused(g, !inputs[k], "em_onnx_graph_node with a NULL input name")) return NULL;
  char *name = em_onnx_tmp_name(g->b, g->node, op_type);
  if (!name) return NULL;
  return (em_onnx_op *)em_onnx_node(g->b, op_type, name, n_in, inputs, output);
}

void em_onnx_graph_attr_int(em_onnx_graph *g, em_onnx_op *n, const char *name, int64_t v) {
  if (n && !misused(g, !name || !name[0], "an attribute without a name"))
    em_onnx_attr_int(g->b, (Onnx__NodeProto *)n, name, v);
}

void em_onnx_graph_attr_float(em_onnx_graph *g, em_onnx_op *n, const char *name, float v) {
  if (n && !misused(g, !name || !name[0], "an attribute without a name"))
    em_onnx_attr_float(g->b, (Onnx__NodeProto *)n, name, v);
}

void em_onnx_graph_attr_ints(em_onnx_graph *g, em_onnx_op *n, const char *name, int k,
                             const int64_t *v) {
  if (n && !misused(g, !name || !name[0], "an attribute without a name") &&
      !misused(g, k < 0 || k > (1 << 20) || (k && !v), "an ints attribute with a bad count"))
    em_onnx_attr_ints(g->b, (Onnx__NodeProto *)n, name, k, v);
}

void em_onnx_graph_initializer(em_onnx_graph *g, const char *name, const em_tensor *t) {
  if (!misused(g, !name || !name[0] || !t, "an initializer without a name or a tensor"))
    em_onnx_init_tensor(g->b, name, t);
}

void em_onnx_graph_initializer_i64s(em_onnx_graph *g, const char *name, int k, const int64_t *v) {
  if (!misused(g, !name || !name[0], "an initializer without a name") &&
      !misused(g, k < 0 || k > (1 << 20) || (k && !v), "an int64 initializer with a bad count"))
    em_onnx_init_i64s(g->b, name, k, v);
}

const char *em_onnx_graph_value(em_onnx_graph *g, const char *what) {
  if (misused(g, !what || !what[0], "em_onnx_graph_value without a name")) return NULL;
  return em_onnx_tmp_name(g->b, g->node, what);
}

/* ---- what a mapping must leave: a graph ONNX readers take ----------------- */

/* The values the layer's mapping may read besides those it makes: the
 * layer's inputs (the model's input is added to the graph at its end). */
typedef struct {
  int n;
  const char *const *names;
} layer_inputs;

/* Whether name is a value before node j: one of the layer's inputs, a
 * graph input, an initializer (any: they precede every node), or an
 * output of a node before j. */
static bool value_before(const Onnx__GraphProto *gr, const layer_inputs *li, size_t j,
                         const char *name) {
  for (int k = 0; k < li->n; k++)
    if (!strcmp(li->names[k], name)) return true;
  for (size_t k = 0; k < gr->n_input; k++)
    if (!strcmp(gr->input[k]->name, name)) return true;
  for (size_t k = 0; k < gr->n_initializer; k++)
    if (!strcmp(gr->initializer[k]->name, name)) return true;
  for (size_t k = 0; k < j; k++)
    if (!strcmp(gr->node[k]->output[0], name)) return true;
  return false;
}

/* The nodes [n0, end) and initializers [i0, end) a mapping added: every
 * input made before it is read (topological order), every value written
 * once (SSA), an initializer not named like another value, and the
 * layer's output written by exactly one of them. */
static em_status check_mapping(const Onnx__GraphProto *gr, const layer_inputs *li, size_t n0,
                               size_t i0, const char *out, em_error *err) {
  for (size_t k = i0; k < gr->n_initializer; k++) {
    const char *nm = gr->initializer[k]->name;
    for (int q = 0; q < li->n; q++)
      if (!strcmp(li->names[q], nm))
        return em_error_set(err, EM_ERR_INVALID, "its initializer '%s' is named like the "
                            "layer's input", nm);
    for (size_t q = 0; q < gr->n_input; q++)
      if (!strcmp(gr->input[q]->name, nm))
        return em_error_set(err, EM_ERR_INVALID, "its initializer '%s' is named like a graph "
                            "input", nm);
    for (size_t q = 0; q < k; q++)
      if (!strcmp(gr->initializer[q]->name, nm))
        return em_error_set(err, EM_ERR_INVALID, "its initializer '%s' is named like another "
                            "initializer (name each once)", nm);
  }
  int writes_out = 0;
  for (size_t j = n0; j < gr->n_node; j++) {
    const Onnx__NodeProto *n = gr->node[j];
    for (size_t k = 0; k < n->n_input; k++)
      if (n->input[k][0] && !value_before(gr, li, j, n->input[k]))
        return em_error_set(err, EM_ERR_INVALID, "its node '%s' (%s) reads '%s', which no input, "
                            "initializer or earlier node makes", n->name, n->op_type,
                            n->input[k]);
    if (value_before(gr, li, j, n->output[0]))
      return em_error_set(err, EM_ERR_INVALID, "its node '%s' (%s) writes '%s', which is already "
                          "a value (each value is written once: make new ones with "
                          "em_onnx_graph_value)", n->name, n->op_type, n->output[0]);
    writes_out += !strcmp(n->output[0], out);
  }
  if (writes_out == 0)
    return em_error_set(err, EM_ERR_INVALID, "it did not write the layer's output value '%s'",
                        out);
  return EM_OK;
}

em_status em_onnx_layer(em_onnx_builder *b, const em_spec *spec, int i, const char *const *in,
                        const char *out, em_tensor *const *t, const char *const *tn,
                        em_error *err) {
  const em_spec_node *sn = &spec->nodes[i];
  em_onnx_forms_register();
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
  em_onnx_graph g = {b, sn->name, NULL};
  em_error e = {0};
  size_t n0 = b->graph->n_node, i0 = b->graph->n_initializer;
  em_status st = fn(&g, &sn->view, sn->n_in, in, shapes, out, sn->n_decl, t, tn, &e);
  if (st != EM_OK)
    return em_error_set(err, st, "node '%s' (%s): %s", sn->name, sn->type->name,
                        e.msg[0] ? e.msg : em_status_name(st));
  if (b->failed)
    return em_error_set(err, EM_ERR_NOMEM, "node '%s': out of memory building the ONNX graph",
                        sn->name);
  if (g.misuse)
    return em_error_set(err, EM_ERR_INVALID, "node '%s' (%s): its ONNX mapping called %s",
                        sn->name, sn->type->name, g.misuse);
  layer_inputs li = {sn->n_in, in};
  if (check_mapping(b->graph, &li, n0, i0, out, &e) != EM_OK)
    return em_error_set(err, EM_ERR_INVALID, "node '%s' (%s): its ONNX mapping is not a valid "
                        "graph: %s", sn->name, sn->type->name, e.msg);
  return EM_OK;
}
