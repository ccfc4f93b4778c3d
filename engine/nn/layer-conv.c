/* layer-conv.c: the Conv2d, MaxPool2d and AvgPool2d layer types. */
#include "nn-private.h"

#include <math.h>

static em_status need_nchw(const em_shape *in, em_error *err) {
  char buf[160];
  if (in->ndim != 4)
    return em_error_set(err, EM_ERR_SHAPE, "expects input of shape [N, C, H, W], got %s",
                        em_shape_format(in, buf, sizeof buf));
  return EM_OK;
}

/* Output size of a window sliding over n with kernel k, stride s, padding p
 * and dilation d (floor mode); <= 0 when the window does not fit. */
static int64_t slide_out(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d) {
  int64_t span = n + 2 * p - d * (k - 1) - 1;
  return span < 0 ? 0 : span / s + 1;
}

/* ---- Conv2d ------------------------------------------------------------------ */

enum { CV_OUT, CV_KERNEL, CV_STRIDE, CV_PAD, CV_DIL, CV_GROUPS, CV_BIAS };
static const em_attr_desc conv2d_attrs[] = {
    {"out_channels", EM_ATTR_INT, true, 0, 1, EM_NN_MAX_SIZE, "output channels K", NULL},
    {"kernel_size", EM_ATTR_INT2, true, 0, 1, EM_NN_MAX_KERNEL, "kernel size: k or [kh, kw]", NULL},
    {"stride", EM_ATTR_INT2, false, 1, 1, EM_NN_MAX_KERNEL, "stride: s or [sh, sw]", NULL},
    {"padding", EM_ATTR_INT2, false, 0, 0, EM_NN_MAX_KERNEL, "zero padding: p or [ph, pw]", NULL},
    {"dilation", EM_ATTR_INT2, false, 1, 1, EM_NN_MAX_KERNEL, "dilation: d or [dh, dw]", NULL},
    {"groups", EM_ATTR_INT, false, 1, 1, EM_NN_MAX_SIZE, "channel groups", NULL},
    {"bias", EM_ATTR_BOOL, false, 1, 0, 1, "learn an additive bias", NULL},
};

static em_status conv2d_infer(const em_layer_node *node, int n_in, const em_shape *in,
                              em_shape *out, int *n_params, em_param_decl *params,
                              em_error *err) {
  char buf[160];
  em_status st = need_nchw(in, err);
  if (st != EM_OK) return st;
  int64_t C = in->shape[1], K = em_attr_int(node, CV_OUT, 0), G = em_attr_int(node, CV_GROUPS, 0);
  if (C % G || K % G)
    return em_error_set(err, EM_ERR_SHAPE,
                        "groups=%lld must divide both in_channels (%lld) and out_channels (%lld)",
                        (long long)G, (long long)C, (long long)K);
  *out = *in;
  out->shape[1] = K;
  for (int a = 0; a < 2; a++) {
    int64_t k = em_attr_int(node, CV_KERNEL, a), s = em_attr_int(node, CV_STRIDE, a);
    int64_t p = em_attr_int(node, CV_PAD, a), d = em_attr_int(node, CV_DIL, a);
    int64_t o = slide_out(in->shape[2 + a], k, s, p, d);
    if (o < 1)
      return em_error_set(err, EM_ERR_SHAPE,
                          "input %s is too small for kernel_size %lldx%lld (padding %lld, "
                          "dilation %lld): the output would be empty",
                          em_shape_format(in, buf, sizeof buf),
                          (long long)em_attr_int(node, CV_KERNEL, 0),
                          (long long)em_attr_int(node, CV_KERNEL, 1), (long long)p, (long long)d);
    out->shape[2 + a] = o;
  }
  int64_t kh = em_attr_int(node, CV_KERNEL, 0), kw = em_attr_int(node, CV_KERNEL, 1);
  int64_t ws[4] = {K, C / G, kh, kw};
  em_decl_set(&params[0], "weight", false, EM_DTYPE_F32, 4, ws, EM_INIT_WEIGHT, 0);
  params[0].fan_in = C / G * kh * kw;
  params[0].fan_out = K * kh * kw;
  *n_params = 1;
  if (em_attr_bool(node, CV_BIAS)) {
    em_decl_set(&params[1], "bias", false, EM_DTYPE_F32, 1, &K, EM_INIT_UNIFORM,
                1.0 / sqrt((double)params[0].fan_in));
    *n_params = 2;
  }
  return EM_OK;
}

/* em_conv2d (or em_conv2d_relu) with the node's attributes. */
static em_tensor *conv2d_apply(const em_layer_node *node, em_tensor *x, em_tensor **params,
                               bool relu) {
  em_conv2d_params p;
  for (int a = 0; a < 2; a++) {
    p.stride[a] = (int)em_attr_int(node, CV_STRIDE, a);
    p.padding[a] = (int)em_attr_int(node, CV_PAD, a);
    p.dilation[a] = (int)em_attr_int(node, CV_DIL, a);
  }
  p.groups = (int)em_attr_int(node, CV_GROUPS, 0);
  /* x (N, C, H, W), w (K, C/groups, kh, kw), b (K) */
  em_tensor *b = em_attr_bool(node, CV_BIAS) ? params[1] : NULL;
  return relu ? em_conv2d_relu(x, params[0], b, &p) : em_conv2d(x, params[0], b, &p);
}

static em_tensor *conv2d_forward(const em_layer_node *node, int n_in, em_tensor **in,
                                 em_tensor **params, const em_forward_ctx *ctx) {
  return conv2d_apply(node, in[0], params, false);
}

em_tensor *em_conv2d_relu_layer_forward(const em_layer_node *node, em_tensor *x,
                                        em_tensor **params) {
  return conv2d_apply(node, x, params, true);
}

const em_layer_type em_layer_conv2d = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "Conv2d",
    .category = "conv",
    .help = "2-D convolution (N, C, H, W) -> (N, K, H', W')",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 7,
    .attrs = conv2d_attrs,
    .infer = conv2d_infer,
    .forward = conv2d_forward,
};

/* ---- MaxPool2d, AvgPool2d --------------------------------------------------- */

enum { PL_KERNEL, PL_STRIDE, PL_PAD };
static const em_attr_desc pool_attrs[] = {
    {"kernel_size", EM_ATTR_INT2, true, 0, 1, EM_NN_MAX_KERNEL, "window: k or [kh, kw]", NULL},
    {"stride", EM_ATTR_INT2, false, 0, 1, EM_NN_MAX_KERNEL,
     "stride: s or [sh, sw] (default kernel_size)", NULL},
    {"padding", EM_ATTR_INT2, false, 0, 0, EM_NN_MAX_KERNEL, "padding: p or [ph, pw]", NULL},
};

static void pool_params(const em_layer_node *node, em_pool2d_params *p) {
  for (int a = 0; a < 2; a++) {
    p->kernel[a] = (int)em_attr_int(node, PL_KERNEL, a);
    p->stride[a] = node->attr[PL_STRIDE].given ? (int)em_attr_int(node, PL_STRIDE, a)
                                               : p->kernel[a];
    p->padding[a] = (int)em_attr_int(node, PL_PAD, a);
  }
  p->count_include_pad = true;
}

static em_status pool_infer(const em_layer_node *node, int n_in, const em_shape *in,
                            em_shape *out, int *n_params, em_param_decl *params, em_error *err) {
  char buf[160];
  em_status st = need_nchw(in, err);
  if (st != EM_OK) return st;
  em_pool2d_params p;
  pool_params(node, &p);
  *out = *in;
  for (int a = 0; a < 2; a++) {
    if (2 * p.padding[a] > p.kernel[a])
      return em_error_set(err, EM_ERR_INVALID,
                          "padding %d must be at most half of kernel_size %d", p.padding[a],
                          p.kernel[a]);
    int64_t o = slide_out(in->shape[2 + a], p.kernel[a], p.stride[a], p.padding[a], 1);
    if (o < 1)
      return em_error_set(err, EM_ERR_SHAPE,
                          "input %s is too small for kernel_size %dx%d: the output would be "
                          "empty",
                          em_shape_format(in, buf, sizeof buf), p.kernel[0], p.kernel[1]);
    out->shape[2 + a] = o;
  }
  *n_params = 0;
  return EM_OK;
}

static em_tensor *max_pool_forward(const em_layer_node *node, int n_in, em_tensor **in,
                                   em_tensor **params, const em_forward_ctx *ctx) {
  em_pool2d_params p;
  pool_params(node, &p);
  return em_max_pool2d(in[0], &p); /* (N, C, H, W) -> (N, C, H', W') */
}

static em_tensor *avg_pool_forward(const em_layer_node *node, int n_in, em_tensor **in,
                                   em_tensor **params, const em_forward_ctx *ctx) {
  em_pool2d_params p;
  pool_params(node, &p);
  return em_avg_pool2d(in[0], &p); /* (N, C, H, W) -> (N, C, H', W') */
}

const em_layer_type em_layer_max_pool2d = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "MaxPool2d",
    .category = "pool",
    .help = "maximum over 2-D windows",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 3,
    .attrs = pool_attrs,
    .infer = pool_infer,
    .forward = max_pool_forward,
};

const em_layer_type em_layer_avg_pool2d = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "AvgPool2d",
    .category = "pool",
    .help = "mean over 2-D windows (padding counted, like PyTorch)",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 3,
    .attrs = pool_attrs,
    .infer = pool_infer,
    .forward = avg_pool_forward,
};
