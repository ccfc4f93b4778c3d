/* spec.c: parsing and validating a JSON model spec, with shape inference.
 *
 * Two passes over "nodes": the first checks every node's name (so that a
 * reference to a later node can be told apart from a misspelt one), the
 * second resolves types, inputs and attributes and runs each type's
 * shape inference in order. Nodes may only take earlier nodes as inputs,
 * so the graph is a DAG by construction. Every message starts with the
 * source and the node: "models/x.json: node 'fc2' (Linear): ...". */
#include "nn-private.h"
#include "em-data.h"
#include "em-io.h"
#include "em-plugin.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_SPEC_BYTES (16 << 20)

static const char *const top_keys[] = {"name", "description", "input",    "nodes",
                                       "output", "loss",       "training", "tokenizer"};
static const char *const input_keys[] = {"shape", "dtype"};

static em_status parse_input(em_spec *s, json_t *in, em_error *err) {
  if (!in) return em_error_set(err, EM_ERR_INVALID, "missing \"input\" (e.g. {\"shape\": [1, 28, 28]})");
  if (!json_is_object(in))
    return em_error_set(err, EM_ERR_INVALID, "\"input\" must be an object, got %s", em_spec_json_kind(in));
  em_status st = em_spec_check_keys(in, input_keys, 2, "in \"input\"", err);
  if (st != EM_OK) return st;
  json_t *shape = json_object_get(in, "shape"), *dt = json_object_get(in, "dtype");
  if (!shape) return em_error_set(err, EM_ERR_INVALID, "\"input\" lacks \"shape\" (one sample's shape)");
  if (!json_is_array(shape))
    return em_error_set(err, EM_ERR_INVALID, "input \"shape\" must be a list of integers, got %s",
                        em_spec_json_kind(shape));
  size_t n = json_array_size(shape);
  if (n < 1 || n > EM_MAX_DIMS - 1)
    return em_error_set(err, EM_ERR_INVALID,
                        "input \"shape\" must list 1 to %d sizes (one sample, no batch), got %zu",
                        EM_MAX_DIMS - 1, n);
  s->input.dtype = EM_DTYPE_F32;
  s->input.ndim = (int)n + 1;
  s->input.shape[0] = -1;
  int64_t numel = 1;
  for (size_t k = 0; k < n; k++) {
    json_t *v = json_array_get(shape, k);
    if (!json_is_integer(v))
      return em_error_set(err, EM_ERR_INVALID, "input \"shape\"[%zu] must be an integer, got %s", k,
                          em_spec_json_kind(v));
    json_int_t x = json_integer_value(v);
    if (x < 1)
      return em_error_set(err, EM_ERR_INVALID, "input \"shape\"[%zu] must be positive, got %lld",
                          k, (long long)x);
    if (x > EM_NN_MAX_NUMEL || (numel *= x) > EM_NN_MAX_NUMEL)
      return em_error_set(err, EM_ERR_NOMEM,
                          "input \"shape\" is absurdly large (over 2^30 values per sample)");
    s->input.shape[k + 1] = x;
  }
  if (dt) {
    const char *d = json_string_value(dt);
    if (!d)
      return em_error_set(err, EM_ERR_INVALID, "input \"dtype\" must be a string, got %s",
                          em_spec_json_kind(dt));
    if (!strcmp(d, "f32")) s->input.dtype = EM_DTYPE_F32;
    else if (!strcmp(d, "i64")) s->input.dtype = EM_DTYPE_I64;
    else
      return em_error_set(err, EM_ERR_INVALID,
                          "input \"dtype\" '%s' is not supported; use \"f32\" or \"i64\" (indices "
                          "for Embedding)",
                          d);
  }
  return EM_OK;
}

/* ---- nodes ------------------------------------------------------------------------ */

static int find_node(const em_spec *s, const char *name) {
  for (int i = 0; i < s->n_nodes; i++)
    if (s->nodes[i].name && !strcmp(s->nodes[i].name, name)) return i;
  return -1;
}

/* First pass: the node is an object with a valid, unique name. */
static em_status parse_node_name(em_spec *s, int i, json_t *obj, em_error *err) {
  if (!json_is_object(obj))
    return em_error_set(err, EM_ERR_INVALID, "nodes[%d] must be an object, got %s", i,
                        em_spec_json_kind(obj));
  json_t *nm = json_object_get(obj, "name");
  if (!nm) return em_error_set(err, EM_ERR_INVALID, "nodes[%d] has no \"name\"", i);
  if (!json_is_string(nm))
    return em_error_set(err, EM_ERR_INVALID, "nodes[%d]: \"name\" must be a string, got %s", i,
                        em_spec_json_kind(nm));
  const char *name = json_string_value(nm);
  char what[64];
  snprintf(what, sizeof what, "nodes[%d]: the name", i);
  /* a repeated block's copies are named "block.0.node" (spec-repeat.c
   * checked the parts) */
  em_status st = s->flat && strchr(name, '.') ? EM_OK : em_spec_check_name(name, what, err);
  if (st != EM_OK) return st;
  if (!strcmp(name, "input"))
    return em_error_set(err, EM_ERR_INVALID,
                        "nodes[%d]: 'input' is reserved for the model input; pick another name", i);
  int j = find_node(s, name);
  if (j >= 0)
    return em_error_set(err, EM_ERR_INVALID, "node '%s': duplicate name (nodes[%d] and nodes[%d])",
                        name, j, i);
  s->nodes[i].name = name;
  return EM_OK;
}

static em_status unknown_type(const char *type, em_error *err) {
  em_strbuf known = {0};
  const char *guess = NULL;
  int n = em_layer_type_count();
  for (int i = 0; i < n; i++) {
    const char *k = em_layer_type_at(i)->name;
    em_strbuf_printf(&known, "%s%s", i ? ", " : "", k);
    if (!guess && em_spec_looks_like(type, k)) guess = k;
  }
  em_status st;
  char search[640]; /* where plugins were looked for, and which were refused */
  em_plugin_search_summary(search, sizeof search);
  if (guess)
    st = em_error_set(err, EM_ERR_INVALID,
                      "unknown layer type '%s' (did you mean '%s'?); known: %s; no loaded plugin "
                      "provides it: %s",
                      type, guess, known.s ? known.s : "", search);
  else
    st = em_error_set(err, EM_ERR_INVALID,
                      "unknown layer type '%s'; known: %s; no loaded plugin provides it: %s", type,
                      known.s ? known.s : "", search);
  em_strbuf_free(&known);
  return st;
}

static em_status parse_inputs(em_spec *s, int i, json_t *obj, em_error *err) {
  em_spec_node *nd = &s->nodes[i];
  const em_layer_type *t = nd->type;
  json_t *ins = json_object_get(obj, "inputs");
  if (!ins) {
    if (t->min_inputs > 1)
      return em_error_set(err, EM_ERR_INVALID,
                          "needs at least %d inputs; list them in \"inputs\" (node names or "
                          "\"input\")",
                          t->min_inputs);
    nd->n_in = 1;
    nd->in[0] = i - 1;
    nd->in_names[0] = i ? s->nodes[i - 1].name : "input";
    return EM_OK;
  }
  if (!json_is_array(ins))
    return em_error_set(err, EM_ERR_INVALID, "\"inputs\" must be a list of node names, got %s",
                        em_spec_json_kind(ins));
  size_t n = json_array_size(ins);
  if ((int)n < t->min_inputs || n > (size_t)t->max_inputs) {
    if (t->min_inputs == t->max_inputs)
      return em_error_set(err, EM_ERR_INVALID, "takes %d input%s, got %zu", t->min_inputs,
                          t->min_inputs == 1 ? "" : "s", n);
    return em_error_set(err, EM_ERR_INVALID, "takes %d to %d inputs, got %zu", t->min_inputs,
                        t->max_inputs, n);
  }
  nd->n_in = (int)n;
  for (size_t k = 0; k < n; k++) {
    json_t *v = json_array_get(ins, k);
    const char *name = json_string_value(v);
    if (!name)
      return em_error_set(err, EM_ERR_INVALID, "\"inputs\"[%zu] must be a node name, got %s", k,
                          em_spec_json_kind(v));
    int j = strcmp(name, "input") ? find_node(s, name) : -1;
    if (j == i)
      return em_error_set(err, EM_ERR_INVALID, "lists itself as an input (cycles are not allowed)");
    if (j > i)
      return em_error_set(err, EM_ERR_INVALID,
                          "input '%s' is defined later in \"nodes\" (a node may only take earlier "
                          "nodes, which rules out cycles)",
                          name);
    if (j < 0 && strcmp(name, "input")) {
      const char *guess = NULL;
      for (int m = 0; m < i && !guess; m++)
        if (em_spec_looks_like(name, s->nodes[m].name)) guess = s->nodes[m].name;
      if (guess)
        return em_error_set(err, EM_ERR_INVALID, "unknown input '%s' (did you mean '%s'?)", name,
                            guess);
      return em_error_set(err, EM_ERR_INVALID,
                          "unknown input '%s' (inputs name earlier nodes, or \"input\" for the "
                          "model input)",
                          name);
    }
    nd->in[k] = j;
    nd->in_names[k] = j < 0 ? "input" : s->nodes[j].name;
  }
  return EM_OK;
}

/* Checks what a type's infer produced. */
static em_status check_inferred(em_spec *s, em_spec_node *nd, em_error *err) {
  char buf[160];
  em_shape *o = &nd->out;
  if (o->ndim < 1 || o->ndim > EM_MAX_DIMS || o->shape[0] != -1)
    return em_error_set(err, EM_ERR_INVALID, "shape inference gave %s, which lacks the batch dim",
                        o->ndim >= 1 && o->ndim <= EM_MAX_DIMS ? em_shape_format(o, buf, sizeof buf)
                                                               : "a bad rank");
  if (o->dtype != EM_DTYPE_F32 && o->dtype != EM_DTYPE_I64)
    return em_error_set(err, EM_ERR_INVALID, "shape inference gave dtype %s (f32 for float "
                        "values, whatever the model's float dtype, or i64 for indices)",
                        (unsigned)o->dtype < EM_DTYPE_COUNT ? em_dtype_name(o->dtype) : "unknown");
  int64_t numel = 1;
  for (int d = 1; d < o->ndim; d++) {
    if (o->shape[d] < 1)
      return em_error_set(err, EM_ERR_SHAPE, "output shape %s has an empty dimension",
                          em_shape_format(o, buf, sizeof buf));
    if (__builtin_mul_overflow(numel, o->shape[d], &numel) || numel > EM_NN_MAX_NUMEL)
      return em_error_set(err, EM_ERR_NOMEM,
                          "output shape %s is absurdly large (over 2^30 values per sample)",
                          em_shape_format(o, buf, sizeof buf));
  }
  if (nd->n_decl < 0 || nd->n_decl > EM_LAYER_MAX_PARAMS)
    return em_error_set(err, EM_ERR_INVALID, "declares %d parameters (at most %d)", nd->n_decl,
                        EM_LAYER_MAX_PARAMS);
  for (int k = 0; k < nd->n_decl; k++) {
    em_param_decl *d = &nd->decl[k];
    if (!d->name || !em_spec_param_name_ok(d->name))
      return em_error_set(err, EM_ERR_INVALID, "parameter %d has no valid name", k);
    for (int j = 0; j < k; j++)
      if (!strcmp(nd->decl[j].name, d->name))
        return em_error_set(err, EM_ERR_INVALID, "declares parameter '%s' twice", d->name);
    if (d->ndim < 0 || d->ndim > EM_MAX_DIMS)
      return em_error_set(err, EM_ERR_INVALID, "parameter '%s' has %d dims", d->name, d->ndim);
    em_shape ds = {d->dtype, d->ndim, {0}};
    memcpy(ds.shape, d->shape, sizeof ds.shape);
    for (int j = 0; j < d->ndim; j++)
      if (d->shape[j] < 0)
        return em_error_set(err, EM_ERR_INVALID, "parameter '%s.%s' has a negative size (%s)",
                            nd->name, d->name, em_shape_format(&ds, buf, sizeof buf));
    int64_t n = em_decl_numel(d);
    if (n < 0 || n > EM_NN_MAX_NUMEL)
      return em_error_set(err, EM_ERR_NOMEM,
                          "parameter '%s.%s' of shape %s is absurdly large (the limit is 2^30 "
                          "values, 4 GiB in f32)",
                          nd->name, d->name, em_shape_format(&ds, buf, sizeof buf));
    if (d->dtype != EM_DTYPE_F32 && d->dtype != EM_DTYPE_I64)
      return em_error_set(err, EM_ERR_INVALID, "parameter '%s' has dtype %s (f32 or i64 only)",
                          d->name, (unsigned)d->dtype < EM_DTYPE_COUNT ? em_dtype_name(d->dtype)
                                                                       : "unknown");
    if ((unsigned)d->init > EM_INIT_WEIGHT)
      return em_error_set(err, EM_ERR_INVALID, "parameter '%s' has an unknown init kind (%d)",
                          d->name, (int)d->init);
    if ((d->init == EM_INIT_UNIFORM || d->init == EM_INIT_NORMAL) && !(isfinite(d->a) && d->a >= 0))
      return em_error_set(err, EM_ERR_INVALID, "parameter '%s' has init scale %g (a finite "
                          "number >= 0)", d->name, (double)d->a);
    if (d->init == EM_INIT_WEIGHT && (d->fan_in < 1 || d->fan_out < 1))
      return em_error_set(err, EM_ERR_INVALID, "parameter '%s' has fan-in %lld and fan-out %lld "
                          "for its weight init (both >= 1)", d->name, (long long)d->fan_in,
                          (long long)d->fan_out);
    if (d->buffer) nd->n_buffer += n;
    else if (k != nd->tie_decl) nd->n_params += n; /* a tied weight is its owner's */
  }
  s->n_params += nd->n_params;
  s->n_buffer += nd->n_buffer;
  if (s->n_params > EM_NN_MAX_PARAMS)
    return em_error_set(err, EM_ERR_NOMEM,
                        "the model reaches %lld parameters here, over the limit of 2^31",
                        (long long)s->n_params);
  return EM_OK;
}

/* "tie_weight": the name of an earlier node whose "weight" this node's
 * "weight" is (the same tensor, trained once: a language model's head
 * tied to its token embedding). The shapes must match. */
static em_status parse_tie(em_spec *s, int i, json_t *v, em_error *err) {
  em_spec_node *nd = &s->nodes[i];
  if (!v) return EM_OK;
  if (nd->n_decl < 0 || nd->n_decl > EM_LAYER_MAX_PARAMS) return EM_OK; /* check_inferred says */
  if (!json_is_string(v))
    return em_error_set(err, EM_ERR_INVALID, "\"tie_weight\" must name an earlier node, got %s",
                        em_spec_json_kind(v));
  const char *src = json_string_value(v);
  int j = find_node(s, src);
  if (j < 0 || j >= i)
    return em_error_set(err, EM_ERR_INVALID,
                        "\"tie_weight\" names '%s', which is not an earlier node", src);
  int k = 0, ks = 0;
  while (k < nd->n_decl && strcmp(nd->decl[k].name, "weight")) k++;
  const em_spec_node *o = &s->nodes[j];
  while (ks < o->n_decl && strcmp(o->decl[ks].name, "weight")) ks++;
  if (k == nd->n_decl || ks == o->n_decl)
    return em_error_set(err, EM_ERR_INVALID, "\"tie_weight\": %s has no \"weight\" to tie",
                        k == nd->n_decl ? "this node" : src);
  const em_param_decl *a = &nd->decl[k], *b = &o->decl[ks];
  bool same = a->ndim == b->ndim && a->dtype == b->dtype && !a->buffer && !b->buffer;
  for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
  if (!same) {
    em_shape sa = {a->dtype, a->ndim, {0}}, sb = {b->dtype, b->ndim, {0}};
    memcpy(sa.shape, a->shape, sizeof sa.shape);
    memcpy(sb.shape, b->shape, sizeof sb.shape);
    char ba[96], bb[96];
    return em_error_set(err, EM_ERR_SHAPE,
                        "\"tie_weight\": its weight %s and %s's %s differ in shape (a head tied "
                        "to an Embedding(V, D) is a Linear from D to V)",
                        em_shape_format(&sa, ba, sizeof ba), src, em_shape_format(&sb, bb, sizeof bb));
  }
  nd->tie_decl = k;
  nd->tie_node = j;
  nd->tie_src = ks;
  return EM_OK;
}

/* Second pass for node i: type, inputs, attributes, shape inference. */
static em_status build_node(em_spec *s, int i, json_t *obj, em_error *err) {
  em_spec_node *nd = &s->nodes[i];
  nd->tie_decl = nd->tie_node = nd->tie_src = -1;
  json_t *ty = json_object_get(obj, "type");
  if (!ty) return em_error_set(err, EM_ERR_INVALID, "has no \"type\"");
  if (!json_is_string(ty))
    return em_error_set(err, EM_ERR_INVALID, "\"type\" must be a string, got %s", em_spec_json_kind(ty));
  nd->type = em_layer_type_find(json_string_value(ty));
  if (!nd->type) return unknown_type(json_string_value(ty), err);
  nd->view.name = nd->name;
  nd->view.type = nd->type;
  nd->view.attr = nd->attr;
  nd->view.input_names = nd->in_names;
  nd->view.json = obj;
  em_status st = em_spec_parse_attrs(nd, obj, err);
  if (st == EM_OK) st = parse_inputs(s, i, obj, err);
  if (st != EM_OK) return st;

  em_shape in[EM_LAYER_MAX_INPUTS];
  for (int k = 0; k < nd->n_in; k++) {
    in[k] = nd->in[k] < 0 ? s->input : s->nodes[nd->in[k]].out;
    bool idx = in[k].dtype == EM_DTYPE_I64;
    if (nd->type->index_input && !idx)
      return em_error_set(err, EM_ERR_SHAPE,
                          "expects i64 indices, but its input '%s' gives floats (an index "
                          "model declares \"input\": {\"dtype\": \"i64\", ...})",
                          nd->in_names[k]);
    if (!nd->type->index_input && idx)
      return em_error_set(err, EM_ERR_SHAPE,
                          "expects floats, but its input '%s' holds i64 indices (feed them to an "
                          "Embedding first)",
                          nd->in_names[k]);
  }
  nd->n_decl = 0;
  em_error e = {0};
  st = nd->type->infer(&nd->view, nd->n_in, in, &nd->out, &nd->n_decl, nd->decl, &e);
  if (st != EM_OK) return em_error_set(err, st, "%s", e.msg);
  st = parse_tie(s, i, json_object_get(obj, "tie_weight"), err);
  if (st != EM_OK) return st;
  return check_inferred(s, nd, err);
}

static em_status build(em_spec *s, em_error *err) {
  json_t *root = s->root;
  if (!json_is_object(root))
    return em_error_set(err, EM_ERR_INVALID, "a spec must be a JSON object, got %s",
                        em_spec_json_kind(root));
  em_status st = em_spec_check_keys(root, top_keys, 8, "at the top level", err);
  if (st != EM_OK) return st;

  json_t *nm = json_object_get(root, "name");
  if (!nm) return em_error_set(err, EM_ERR_INVALID, "missing \"name\" (the model's name)");
  if (!json_is_string(nm) || !json_string_value(nm)[0])
    return em_error_set(err, EM_ERR_INVALID, "\"name\" must be a non-empty string, got %s",
                        json_is_string(nm) ? "an empty one" : em_spec_json_kind(nm));
  s->name = json_string_value(nm);
  json_t *desc = json_object_get(root, "description");
  if (desc && !json_is_string(desc))
    return em_error_set(err, EM_ERR_INVALID, "\"description\" must be a string, got %s",
                        em_spec_json_kind(desc));
  s->description = desc ? json_string_value(desc) : "";
  s->loss = json_object_get(root, "loss");
  s->training = json_object_get(root, "training");
  if (s->loss && !json_is_object(s->loss))
    return em_error_set(err, EM_ERR_INVALID, "\"loss\" must be an object, got %s",
                        em_spec_json_kind(s->loss));
  if (s->training && !json_is_object(s->training))
    return em_error_set(err, EM_ERR_INVALID, "\"training\" must be an object, got %s",
                        em_spec_json_kind(s->training));

  st = parse_input(s, json_object_get(root, "input"), err);
  if (st != EM_OK) return st;
  st = em_spec_parse_tokenizer(json_object_get(root, "tokenizer"), s->input.dtype, &s->tokenizer,
                               err);
  if (st != EM_OK) return st;

  json_t *nodes = json_object_get(root, "nodes");
  if (!nodes) return em_error_set(err, EM_ERR_INVALID, "missing \"nodes\" (the list of layers)");
  if (!json_is_array(nodes))
    return em_error_set(err, EM_ERR_INVALID, "\"nodes\" must be a list, got %s", em_spec_json_kind(nodes));
  st = em_spec_expand_repeats(nodes, json_string_value(json_object_get(root, "output")),
                              &s->flat_output, &s->flat, err);
  if (st != EM_OK) return st;
  if (s->flat) nodes = s->flat;
  size_t n = json_array_size(nodes);
  if (n == 0) return em_error_set(err, EM_ERR_INVALID, "\"nodes\" is empty");
  if (n > EM_NN_MAX_NODES)
    return em_error_set(err, EM_ERR_NOMEM, "\"nodes\" lists %zu nodes (at most %d)", n,
                        EM_NN_MAX_NODES);
  s->nodes = calloc(n, sizeof *s->nodes);
  if (!s->nodes) return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  s->n_nodes = (int)n;
  for (int i = 0; i < s->n_nodes; i++) {
    st = parse_node_name(s, i, json_array_get(nodes, (size_t)i), err);
    if (st != EM_OK) return st;
  }
  for (int i = 0; i < s->n_nodes; i++) {
    em_error e = {0};
    st = build_node(s, i, json_array_get(nodes, (size_t)i), &e);
    if (st != EM_OK) {
      em_spec_node *nd = &s->nodes[i];
      if (nd->type)
        return em_error_set(err, st, "node '%s' (%s): %s", nd->name, nd->type->name, e.msg);
      return em_error_set(err, st, "node '%s': %s", nd->name, e.msg);
    }
  }

  json_t *out = json_object_get(root, "output");
  s->output = s->n_nodes - 1;
  if (out) {
    if (!json_is_string(out))
      return em_error_set(err, EM_ERR_INVALID, "\"output\" must be a node name, got %s",
                          em_spec_json_kind(out));
    s->output = find_node(s, s->flat_output ? s->flat_output : json_string_value(out));
    if (s->output < 0)
      return em_error_set(err, EM_ERR_INVALID, "\"output\" names '%s', which is not a node",
                          json_string_value(out));
  }
  if (s->nodes[s->output].out.dtype != EM_DTYPE_F32)
    return em_error_set(err, EM_ERR_SHAPE, "the output node '%s' must give floats",
                        s->nodes[s->output].name);
  s->nodes[s->output].live = true;
  for (int i = s->output; i >= 0; i--)
    if (s->nodes[i].live)
      for (int k = 0; k < s->nodes[i].n_in; k++)
        if (s->nodes[i].in[k] >= 0) s->nodes[s->nodes[i].in[k]].live = true;
  return EM_OK;
}

/* Takes ownership of root. */
static em_spec *spec_build(json_t *root, const char *source, em_error *err) {
  em_spec *s = calloc(1, sizeof *s);
  char *src = strdup(source ? source : "<spec>");
  if (!s || !src) {
    free(s);
    free(src);
    json_decref(root);
    em_error_set(err, EM_ERR_NOMEM, "out of memory");
    return NULL;
  }
  s->root = root;
  s->source = src;
  em_error e = {0};
  if (build(s, &e) != EM_OK) {
    em_error_set(err, e.status, "%s: %s", s->source, e.msg);
    em_spec_free(s);
    return NULL;
  }
  return s;
}

em_spec *em_spec_parse(const char *json_text, const char *source_name, em_error *err) {
  const char *src = source_name ? source_name : "<spec>";
  if (!json_text) {
    em_error_set(err, EM_ERR_INVALID, "%s: no text", src);
    return NULL;
  }
  json_error_t je;
  json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    em_error_set(err, EM_ERR_FORMAT, "%s:%d:%d: not valid JSON: %s", src, je.line, je.column,
                 je.text);
    return NULL;
  }
  return spec_build(root, src, err);
}

em_spec *em_spec_load(const char *path, em_error *err) {
  FILE *f = em_fopen_read(path, false); /* a pipe (<(...)) is fine, read once */
  /* a bare name that is no file here: the zoo's spec of that name
   * ("fmnist-mlp" or "fmnist-mlp.json"), found as the workbench finds it */
  char zoo[4096], zpath[4200];
  if (!f && errno == ENOENT && path && *path && !strchr(path, '/') &&
      em_data_dir("models", zoo, sizeof zoo)) {
    bool json = strlen(path) > 5 && !strcmp(path + strlen(path) - 5, ".json");
    if ((size_t)snprintf(zpath, sizeof zpath, "%s/%s%s", zoo, path, json ? "" : ".json") <
            sizeof zpath &&
        (f = em_fopen_read(zpath, false)))
      path = zpath;
    else
      errno = ENOENT;
  }
  if (!f) {
    em_error_set(err, EM_ERR_IO, "cannot open spec '%s': %s", path, em_open_error(errno));
    return NULL;
  }
  struct stat sb;
  bool regular = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode);
  char *text = malloc(MAX_SPEC_BYTES + 1);
  size_t n = text ? fread(text, 1, MAX_SPEC_BYTES + 1, f) : 0;
  bool bad = text && ferror(f);
  fclose(f);
  /* A pipe holding a spec (<(...)) is read once and works; one that gave
   * nothing (a FIFO nobody writes to) is not "not valid JSON". */
  if (text && !bad && n == 0 && !regular) {
    free(text);
    em_error_set(err, EM_ERR_IO, "cannot read spec '%s': %s, and nothing was written to it",
                 path, em_open_error(EINVAL));
    return NULL;
  }
  if (!text || bad || n > MAX_SPEC_BYTES) {
    free(text);
    em_error_set(err, !text ? EM_ERR_NOMEM : bad ? EM_ERR_IO : EM_ERR_FORMAT,
                 !text ? "%s: out of memory"
                 : bad ? "%s: read error"
                       : "%s: larger than 16 MiB; not a model spec",
                 path);
    return NULL;
  }
  text[n] = '\0';
  if (strlen(text) != n) {
    free(text);
    em_error_set(err, EM_ERR_FORMAT, "%s: contains a NUL byte; not a JSON spec", path);
    return NULL;
  }
  em_spec *s = em_spec_parse(text, path, err);
  free(text);
  return s;
}

em_spec *em_spec_copy(const em_spec *spec, em_error *err) {
  json_t *root = json_deep_copy(spec->root);
  if (!root) {
    em_error_set(err, EM_ERR_NOMEM, "out of memory copying a spec");
    return NULL;
  }
  return spec_build(root, spec->source, err);
}

void em_spec_free(em_spec *spec) {
  if (!spec) return;
  json_decref(spec->root);
  json_decref(spec->flat);
  free(spec->flat_output);
  free(spec->nodes);
  free(spec->source);
  em_tokenizer_free(spec->tokenizer);
  free(spec);
}

/* ---- accessors ------------------------------------------------------------------ */

const char *em_spec_name(const em_spec *s) { return s->name; }
const char *em_spec_description(const em_spec *s) { return s->description; }
json_t *em_spec_loss_json(const em_spec *s) { return s->loss; }
json_t *em_spec_training_json(const em_spec *s) { return s->training; }
json_t *em_spec_json(const em_spec *s) { return s->root; }
const em_tokenizer *em_spec_tokenizer(const em_spec *s) { return s->tokenizer; }

char *em_spec_format(const json_t *doc, const char *original) {
  char *text = em_json_write(doc, EM_JSON_SPEC_WIDTH);
  if (!text) return NULL;
  json_t *was = original ? json_loads(original, JSON_DECODE_ANY, NULL) : NULL;
  char *was_text = was ? em_json_write(was, EM_JSON_SPEC_WIDTH) : NULL;
  json_decref(was);
  bool same = was_text && !strcmp(was_text, text);
  free(was_text);
  if (same) {
    free(text);
    return strdup(original);
  }
  size_t n = strlen(text);
  char *t = realloc(text, n + 2);
  if (!t) {
    free(text);
    return NULL;
  }
  t[n] = '\n';
  t[n + 1] = '\0';
  return t;
}
em_dtype em_spec_input_dtype(const em_spec *s) { return s->input.dtype; }
int64_t em_spec_param_count(const em_spec *s) { return s->n_params; }
int64_t em_spec_buffer_count(const em_spec *s) { return s->n_buffer; }
int em_spec_node_count(const em_spec *s) { return s->n_nodes; }
int em_spec_output_node(const em_spec *s) { return s->output; }

int em_spec_input_shape(const em_spec *s, int64_t *shape) {
  for (int d = 1; d < s->input.ndim; d++) shape[d - 1] = s->input.shape[d];
  return s->input.ndim - 1;
}

int em_spec_output_shape(const em_spec *s, int64_t *shape) {
  const em_shape *o = &s->nodes[s->output].out;
  for (int d = 1; d < o->ndim; d++) shape[d - 1] = o->shape[d];
  return o->ndim - 1;
}

const char *em_spec_node_name(const em_spec *s, int i) {
  EM_ASSERT(i >= 0 && i < s->n_nodes);
  return s->nodes[i].name;
}

const em_layer_type *em_spec_node_type(const em_spec *s, int i) {
  EM_ASSERT(i >= 0 && i < s->n_nodes);
  return s->nodes[i].type;
}

const em_shape *em_spec_node_output(const em_spec *s, int i) {
  EM_ASSERT(i >= 0 && i < s->n_nodes);
  return &s->nodes[i].out;
}

int64_t em_spec_node_param_count(const em_spec *s, int i) {
  EM_ASSERT(i >= 0 && i < s->n_nodes);
  return s->nodes[i].n_params;
}

bool em_spec_node_fuses_relu(const em_spec *s, int i) {
  EM_ASSERT(i >= 0 && i < s->n_nodes);
  if (i + 1 >= s->n_nodes || i >= s->output) return false;
  const em_spec_node *nd = &s->nodes[i], *nx = &s->nodes[i + 1];
  bool ok = nd->live && nx->live &&
            (nd->type == &em_layer_linear || nd->type == &em_layer_conv2d) &&
            nx->type == &em_layer_relu && nx->n_in == 1 && nx->in[0] == i;
  for (int j = i + 2; ok && j < s->n_nodes; j++)
    for (int k = 0; k < s->nodes[j].n_in; k++) ok = ok && s->nodes[j].in[k] != i;
  return ok;
}

int em_spec_node_inputs(const em_spec *s, int i, int *idx) {
  EM_ASSERT(i >= 0 && i < s->n_nodes);
  for (int k = 0; k < s->nodes[i].n_in; k++) idx[k] = s->nodes[i].in[k];
  return s->nodes[i].n_in;
}
