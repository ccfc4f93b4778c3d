/* layer-shape.c: the Flatten and Add layer types. */
#include "nn-private.h"

/* ---- Flatten -------------------------------------------------------------------- */

enum { FL_START, FL_END };
static const em_attr_desc flatten_attrs[] = {
    {"start_dim", EM_ATTR_INT, false, 1, -EM_MAX_DIMS, EM_MAX_DIMS - 1,
     "first dim merged (1 = after the batch; negative counts from the end)", NULL},
    {"end_dim", EM_ATTR_INT, false, -1, -EM_MAX_DIMS, EM_MAX_DIMS - 1,
     "last dim merged (negative counts from the end)", NULL},
};

/* The resolved [start, end] dims, or an error. */
static em_status flatten_dims(const em_layer_node *node, const em_shape *in, int *start, int *end,
                              em_error *err) {
  char buf[160];
  int s = (int)em_attr_int(node, FL_START, 0), e = (int)em_attr_int(node, FL_END, 0);
  int rs = s < 0 ? s + in->ndim : s, re = e < 0 ? e + in->ndim : e;
  if (rs < 0 || rs >= in->ndim || re < 0 || re >= in->ndim)
    return em_error_set(err, EM_ERR_SHAPE, "start_dim %d / end_dim %d are out of range for input %s",
                        s, e, em_shape_format(in, buf, sizeof buf));
  if (rs == 0)
    return em_error_set(err, EM_ERR_SHAPE,
                        "start_dim %d would merge the batch dimension of input %s; use 1", s,
                        em_shape_format(in, buf, sizeof buf));
  if (re < rs)
    return em_error_set(err, EM_ERR_SHAPE, "end_dim %d comes before start_dim %d for input %s", e,
                        s, em_shape_format(in, buf, sizeof buf));
  *start = rs;
  *end = re;
  return EM_OK;
}

static em_status flatten_infer(const em_layer_node *node, int n_in, const em_shape *in,
                               em_shape *out, int *n_params, em_param_decl *params,
                               em_error *err) {
  int s, e;
  em_status st = flatten_dims(node, in, &s, &e, err);
  if (st != EM_OK) return st;
  *out = *in;
  int64_t merged = 1;
  for (int d = s; d <= e; d++) merged *= in->shape[d]; /* sample numel is bounded */
  out->ndim = 0;
  for (int d = 0; d < s; d++) out->shape[out->ndim++] = in->shape[d];
  out->shape[out->ndim++] = merged;
  for (int d = e + 1; d < in->ndim; d++) out->shape[out->ndim++] = in->shape[d];
  *n_params = 0;
  return EM_OK;
}

static em_tensor *flatten_forward(const em_layer_node *node, int n_in, em_tensor **in,
                                  em_tensor **params, const em_forward_ctx *ctx) {
  em_tensor *x = in[0]; /* (N, ...) */
  em_shape xs = {x->dtype, x->ndim, {0}}, ys;
  for (int d = 0; d < x->ndim; d++) xs.shape[d] = x->shape[d];
  int s, e, np;
  EM_ASSERT(flatten_dims(node, &xs, &s, &e, NULL) == EM_OK);
  if (e == x->ndim - 1) return em_flatten(x, s);
  flatten_infer(node, 1, &xs, &ys, &np, NULL, NULL);
  return em_reshape(x, ys.ndim, ys.shape);
}

const em_layer_type em_layer_flatten = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "Flatten",
    .category = "shape",
    .help = "merges dims start_dim..end_dim into one",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 2,
    .attrs = flatten_attrs,
    .infer = flatten_infer,
    .forward = flatten_forward,
};

/* ---- Add ------------------------------------------------------------------------ */

static em_status add_infer(const em_layer_node *node, int n_in, const em_shape *in, em_shape *out,
                           int *n_params, em_param_decl *params, em_error *err) {
  char b0[160], b1[160];
  for (int k = 1; k < n_in; k++) {
    bool same = in[k].ndim == in[0].ndim;
    for (int d = 0; same && d < in[0].ndim; d++) same = in[k].shape[d] == in[0].shape[d];
    if (!same)
      return em_error_set(err, EM_ERR_SHAPE,
                          "inputs must have equal shapes, but '%s' is %s and '%s' is %s",
                          node->input_names[0], em_shape_format(&in[0], b0, sizeof b0),
                          node->input_names[k], em_shape_format(&in[k], b1, sizeof b1));
  }
  *out = in[0];
  *n_params = 0;
  return EM_OK;
}

static em_tensor *add_forward(const em_layer_node *node, int n_in, em_tensor **in,
                              em_tensor **params, const em_forward_ctx *ctx) {
  em_tensor *y = em_add(in[0], in[1]); /* all (N, ...) */
  for (int k = 2; k < n_in; k++) y = em_add(y, in[k]);
  return y;
}

const em_layer_type em_layer_add = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "Add",
    .category = "merge",
    .help = "element-wise sum of two or more inputs of equal shape (residuals)",
    .min_inputs = 2,
    .max_inputs = EM_LAYER_MAX_INPUTS,
    .infer = add_infer,
    .forward = add_forward,
    .position_wise = true,
};
