/* layer-linear.c: the Linear and Embedding layer types. */
#include "nn-private.h"
#include "em-device.h"

#include <math.h>

/* ---- Linear ------------------------------------------------------------------ */

enum { LIN_IN, LIN_OUT, LIN_BIAS };
static const em_attr_desc linear_attrs[] = {
    {"in_features", EM_ATTR_INT, false, 0, 1, EM_NN_MAX_SIZE,
     "input features (inferred; checked when given)", NULL},
    {"out_features", EM_ATTR_INT, true, 0, 1, EM_NN_MAX_SIZE, "output features", NULL},
    {"bias", EM_ATTR_BOOL, false, 1, 0, 1, "learn an additive bias", NULL},
};

static em_status linear_infer(const em_layer_node *node, int n_in, const em_shape *in,
                              em_shape *out, int *n_params, em_param_decl *params,
                              em_error *err) {
  char buf[160];
  if (in->ndim != 2 && in->ndim != 3)
    return em_error_set(err, EM_ERR_SHAPE, "expects input of shape [N, D] or [N, L, D], got %s%s",
                        em_shape_format(in, buf, sizeof buf),
                        in->ndim > 3 ? " (add a Flatten before it?)" : "");
  int64_t D = in->shape[in->ndim - 1], K = em_attr_int(node, LIN_OUT, 0);
  if (node->attr[LIN_IN].given && em_attr_int(node, LIN_IN, 0) != D)
    return em_error_set(err, EM_ERR_SHAPE,
                        "in_features is %lld but its input %s has %lld features",
                        (long long)em_attr_int(node, LIN_IN, 0),
                        em_shape_format(in, buf, sizeof buf), (long long)D);
  *out = *in;
  out->shape[out->ndim - 1] = K;
  int64_t ws[2] = {K, D};
  em_decl_set(&params[0], "weight", false, EM_DTYPE_F32, 2, ws, EM_INIT_WEIGHT, 0);
  params[0].fan_in = D;
  params[0].fan_out = K;
  *n_params = 1;
  if (em_attr_bool(node, LIN_BIAS)) {
    em_decl_set(&params[1], "bias", false, EM_DTYPE_F32, 1, &K, EM_INIT_UNIFORM,
                1.0 / sqrt((double)D));
    *n_params = 2;
  }
  return EM_OK;
}

/* em_linear (or em_linear_relu) over the last dimension of x. */
static em_tensor *linear_apply(const em_layer_node *node, em_tensor *x, em_tensor **params,
                               bool relu) {
  em_tensor *w = params[0], *b = em_attr_bool(node, LIN_BIAS) ? params[1] : NULL;
  em_tensor *(*op)(em_tensor *, em_tensor *, em_tensor *) = relu ? em_linear_relu : em_linear;
  if (x->ndim == 2) return op(x, w, b); /* (N, D) */
  int64_t N = x->shape[0], L = x->shape[1], D = x->shape[2], K = w->shape[0];
  int64_t flat[2] = {N * L, D}, back[3] = {N, L, K}; /* (N, L, D) */
  return em_reshape(op(em_reshape(x, 2, flat), w, b), 3, back);
}

static em_tensor *linear_forward(const em_layer_node *node, int n_in, em_tensor **in,
                                 em_tensor **params, const em_forward_ctx *ctx) {
  return linear_apply(node, in[0], params, false);
}

em_tensor *em_linear_relu_layer_forward(const em_layer_node *node, em_tensor *x,
                                        em_tensor **params) {
  return linear_apply(node, x, params, true);
}

const em_layer_type em_layer_linear = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "Linear",
    .category = "linear",
    .help = "y = x W^T + b over the last dimension",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 3,
    .attrs = linear_attrs,
    .infer = linear_infer,
    .forward = linear_forward,
    .position_wise = true,
};

/* ---- Embedding ---------------------------------------------------------------- */

enum { EMB_NUM, EMB_DIM, EMB_STD };
static const em_attr_desc embedding_attrs[] = {
    {"num_embeddings", EM_ATTR_INT, true, 0, 1, EM_NN_MAX_SIZE, "vocabulary size V", NULL},
    {"embedding_dim", EM_ATTR_INT, true, 0, 1, EM_NN_MAX_SIZE, "vector size D", NULL},
    {"init_std", EM_ATTR_FLOAT, false, 1.0, 0, 100,
     "the weights' initial N(0, std^2) (PyTorch's 1; GPT-2's 0.02)", NULL},
};

static em_status embedding_infer(const em_layer_node *node, int n_in, const em_shape *in,
                                 em_shape *out, int *n_params, em_param_decl *params,
                                 em_error *err) {
  char buf[160];
  if (in->ndim + 1 > EM_MAX_DIMS)
    return em_error_set(err, EM_ERR_SHAPE, "input %s has too many dimensions (at most %d)",
                        em_shape_format(in, buf, sizeof buf), EM_MAX_DIMS - 1);
  int64_t V = em_attr_int(node, EMB_NUM, 0), D = em_attr_int(node, EMB_DIM, 0);
  *out = *in;
  out->dtype = EM_DTYPE_F32;
  out->shape[out->ndim++] = D;
  int64_t ws[2] = {V, D};
  em_decl_set(&params[0], "weight", false, EM_DTYPE_F32, 2, ws, EM_INIT_NORMAL,
              em_attr_float(node, EMB_STD));
  *n_params = 1;
  return EM_OK;
}

static em_tensor *embedding_forward(const em_layer_node *node, int n_in, em_tensor **in,
                                    em_tensor **params, const em_forward_ctx *ctx) {
  return em_embedding(params[0], in[0]); /* (V, D), (N, ...) -> (N, ..., D) */
}

static em_status embedding_check(const em_layer_node *node, int n_in, em_tensor **in,
                                 em_tensor **params, const em_forward_ctx *ctx, em_error *err) {
  /* i64 (N, ...); indices on a device are checked from a host copy (scoped) */
  const em_tensor *idx = em_to_device(in[0], em_device_cpu());
  int64_t V = params[0]->shape[0], n = em_tensor_numel(idx);
  int64_t pos[EM_MAX_DIMS] = {0};
  for (int64_t k = 0; k < n; k++) {
    int64_t off = idx->offset;
    for (int d = 0; d < idx->ndim; d++) off += pos[d] * idx->stride[d];
    int64_t v = ((const int64_t *)idx->data)[off];
    if (v < 0 || v >= V)
      return em_error_set(err, EM_ERR_INVALID,
                          "index %lld at position %lld is outside [0, %lld) (num_embeddings)",
                          (long long)v, (long long)k, (long long)V);
    for (int d = idx->ndim - 1; d >= 0; d--) {
      if (++pos[d] < idx->shape[d]) break;
      pos[d] = 0;
    }
  }
  return EM_OK;
}

const em_layer_type em_layer_embedding = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "Embedding",
    .category = "linear",
    .help = "a learned vector per index: i64 (N, ...) -> (N, ..., D)",
    .min_inputs = 1,
    .max_inputs = 1,
    .index_input = true,
    .n_attrs = 3,
    .attrs = embedding_attrs,
    .infer = embedding_infer,
    .forward = embedding_forward,
    .check_input = embedding_check,
    .position_wise = true,
};
