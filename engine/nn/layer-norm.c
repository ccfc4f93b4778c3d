/* layer-norm.c: the BatchNorm2d and LayerNorm layer types. */
#include "nn-private.h"

/* ---- BatchNorm2d ---------------------------------------------------------------- */

enum { BN_FEATURES, BN_EPS, BN_MOMENTUM };
static const em_attr_desc batch_norm_attrs[] = {
    {"num_features", EM_ATTR_INT, false, 0, 1, EM_NN_MAX_SIZE,
     "channels C (inferred; checked when given)", NULL},
    {"eps", EM_ATTR_FLOAT, false, 1e-5, 0, 1, "added to the variance", NULL},
    {"momentum", EM_ATTR_FLOAT, false, 0.1, 0, 1, "running statistics update rate", NULL},
};

static em_status batch_norm_infer(const em_layer_node *node, int n_in, const em_shape *in,
                                  em_shape *out, int *n_params, em_param_decl *params,
                                  em_error *err) {
  char buf[160];
  if (in->ndim != 4)
    return em_error_set(err, EM_ERR_SHAPE, "expects input of shape [N, C, H, W], got %s",
                        em_shape_format(in, buf, sizeof buf));
  int64_t C = in->shape[1];
  if (node->attr[BN_FEATURES].given && em_attr_int(node, BN_FEATURES, 0) != C)
    return em_error_set(err, EM_ERR_SHAPE,
                        "num_features is %lld but its input %s has %lld channel%s",
                        (long long)em_attr_int(node, BN_FEATURES, 0),
                        em_shape_format(in, buf, sizeof buf), (long long)C, C == 1 ? "" : "s");
  *out = *in;
  /* PyTorch's state-dict order: weight, bias, running_mean, running_var,
   * num_batches_tracked. */
  em_decl_set(&params[0], "weight", false, EM_DTYPE_F32, 1, &C, EM_INIT_ONES, 0);
  em_decl_set(&params[1], "bias", false, EM_DTYPE_F32, 1, &C, EM_INIT_ZEROS, 0);
  em_decl_set(&params[2], "running_mean", true, EM_DTYPE_F32, 1, &C, EM_INIT_ZEROS, 0);
  em_decl_set(&params[3], "running_var", true, EM_DTYPE_F32, 1, &C, EM_INIT_ONES, 0);
  em_decl_set(&params[4], "num_batches_tracked", true, EM_DTYPE_I64, 0, NULL, EM_INIT_ZEROS, 0);
  *n_params = 5;
  return EM_OK;
}

static em_tensor *batch_norm_forward(const em_layer_node *node, int n_in, em_tensor **in,
                                     em_tensor **params, const em_forward_ctx *ctx) {
  /* x (N, C, H, W); weight, bias, running_mean, running_var (C) */
  em_tensor *y = em_batch_norm(in[0], params[0], params[1], params[2], params[3], ctx->training,
                               em_attr_float(node, BN_MOMENTUM), em_attr_float(node, BN_EPS));
  if (ctx->training) em_i64(params[4])[0] += 1;
  return y;
}

static em_status batch_norm_check(const em_layer_node *node, int n_in, em_tensor **in,
                                  em_tensor **params, const em_forward_ctx *ctx, em_error *err) {
  const em_tensor *x = in[0]; /* (N, C, H, W) */
  if (ctx->training && x->shape[0] * x->shape[2] * x->shape[3] < 2)
    return em_error_set(err, EM_ERR_SHAPE,
                        "training needs more than one value per channel, got input [%lld, %lld, "
                        "%lld, %lld] (use a batch of 2 or more; when it is an epoch's last, "
                        "short batch, set \"drop_last\": true in the spec's \"training\")",
                        (long long)x->shape[0], (long long)x->shape[1], (long long)x->shape[2],
                        (long long)x->shape[3]);
  return EM_OK;
}

const em_layer_type em_layer_batch_norm2d = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "BatchNorm2d",
    .category = "norm",
    .help = "per-channel normalisation over the batch, with running statistics",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 3,
    .attrs = batch_norm_attrs,
    .infer = batch_norm_infer,
    .forward = batch_norm_forward,
    .check_input = batch_norm_check,
};

/* ---- LayerNorm ------------------------------------------------------------------- */

enum { LN_SHAPE, LN_EPS };
static const em_attr_desc layer_norm_attrs[] = {
    {"normalized_shape", EM_ATTR_INTS, false, 0, 1, EM_NN_MAX_SIZE,
     "the trailing dims normalised over (default: the last dim)", NULL},
    {"eps", EM_ATTR_FLOAT, false, 1e-5, 0, 1, "added to the variance", NULL},
};

static em_status layer_norm_infer(const em_layer_node *node, int n_in, const em_shape *in,
                                  em_shape *out, int *n_params, em_param_decl *params,
                                  em_error *err) {
  char buf[160];
  const em_attr_value *ns = &node->attr[LN_SHAPE];
  int nd = ns->given ? ns->n : 1;
  if (in->ndim < nd + 1)
    return em_error_set(err, EM_ERR_SHAPE,
                        "normalized_shape has %d dims but its input %s has only %d besides the "
                        "batch",
                        nd, em_shape_format(in, buf, sizeof buf), in->ndim - 1);
  int64_t shape[EM_MAX_DIMS];
  for (int k = 0; k < nd; k++) {
    shape[k] = in->shape[in->ndim - nd + k];
    if (ns->given && (int64_t)ns->v[k] != shape[k]) {
      em_shape want = {EM_DTYPE_F32, nd, {0}};
      for (int j = 0; j < nd; j++) want.shape[j] = (int64_t)ns->v[j];
      char wb[160];
      return em_error_set(err, EM_ERR_SHAPE,
                          "normalized_shape %s does not match the last dims of its input %s",
                          em_shape_format(&want, wb, sizeof wb),
                          em_shape_format(in, buf, sizeof buf));
    }
  }
  *out = *in;
  em_decl_set(&params[0], "weight", false, EM_DTYPE_F32, nd, shape, EM_INIT_ONES, 0);
  em_decl_set(&params[1], "bias", false, EM_DTYPE_F32, nd, shape, EM_INIT_ZEROS, 0);
  *n_params = 2;
  return EM_OK;
}

static em_tensor *layer_norm_forward(const em_layer_node *node, int n_in, em_tensor **in,
                                     em_tensor **params, const em_forward_ctx *ctx) {
  /* x (N, ..., D...), weight/bias (D...) */
  return em_layer_norm(in[0], params[0]->ndim, params[0], params[1],
                       em_attr_float(node, LN_EPS));
}

const em_layer_type em_layer_layer_norm = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "LayerNorm",
    .category = "norm",
    .help = "normalisation over the trailing dims of each sample",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 2,
    .attrs = layer_norm_attrs,
    .infer = layer_norm_infer,
    .forward = layer_norm_forward,
    .position_wise = true,
};
