/* seblock.c: the squeeze-and-excitation block (Hu et al., 2018) as an
 * Ember plugin layer, "SEBlock":
 *
 *   s = mean over (H, W) of x           (N, C)
 *   g = sigmoid(fc2(relu(fc1(s))))      (N, C); fc1: C -> C/reduction
 *   y = x * g[:, :, None, None]         (N, C, H, W)
 *
 * The forward is written with engine ops, so backward comes from autograd.
 * Parameters are fc1_weight (C/r, C), fc1_bias, fc2_weight (C, C/r) and
 * fc2_bias ("se.fc1_weight" in the state dict; parameter names may not
 * hold dots), initialised like PyTorch's nn.Linear. The ONNX
 * form (opset 17) is in se_onnx. This file is the example to copy for a layer plugin. */
#include <math.h>
#include <stdio.h>

#include "em-ops.h"
#include "em-plugin.h"

enum { SE_REDUCTION };

static const em_attr_desc se_attrs[] = {
    [SE_REDUCTION] = {"reduction", EM_ATTR_INT, false, 4, 1, 1 << 20,
                      "channels / reduction hidden units in the bottleneck", NULL},
};

static int64_t hidden_of(const em_layer_node *node, int64_t c) {
  int64_t h = c / em_attr_int(node, SE_REDUCTION, 0);
  return h < 1 ? 1 : h;
}

static void decl(em_param_decl *d, const char *name, int ndim, int64_t d0, int64_t d1,
                 em_init_kind init, double a, int64_t fan_in, int64_t fan_out) {
  *d = (em_param_decl){.name = name, .dtype = EM_DTYPE_F32, .ndim = ndim, .init = init, .a = a,
                       .fan_in = fan_in, .fan_out = fan_out};
  d->shape[0] = d0;
  d->shape[1] = d1;
}

static em_status se_infer(const em_layer_node *node, int n_in, const em_shape *in, em_shape *out,
                          int *n_params, em_param_decl *params, em_error *err) {
  char buf[64];
  if (in[0].ndim != 4 || in[0].dtype != EM_DTYPE_F32)
    return em_error_set(err, EM_ERR_SHAPE, "expects input of shape [N, C, H, W], got %s",
                        em_shape_format(&in[0], buf, sizeof buf));
  int64_t c = in[0].shape[1], h = hidden_of(node, c);
  *out = in[0];
  decl(&params[0], "fc1_weight", 2, h, c, EM_INIT_WEIGHT, 0, c, h);
  decl(&params[1], "fc1_bias", 1, h, 0, EM_INIT_UNIFORM, 1.0 / sqrt((double)c), 0, 0);
  decl(&params[2], "fc2_weight", 2, c, h, EM_INIT_WEIGHT, 0, h, c);
  decl(&params[3], "fc2_bias", 1, c, 0, EM_INIT_UNIFORM, 1.0 / sqrt((double)h), 0, 0);
  *n_params = 4;
  return EM_OK;
}

static em_tensor *se_forward(const em_layer_node *node, int n_in, em_tensor **in,
                             em_tensor **p, const em_forward_ctx *ctx) {
  em_tensor *x = in[0];                                          /* (N, C, H, W) */
  em_tensor *s = em_mean(em_mean(x, 3, false), 2, false);       /* (N, C) */
  em_tensor *h = em_relu(em_linear(s, p[0], p[1]));             /* (N, C/r) */
  em_tensor *g = em_sigmoid(em_linear(h, p[2], p[3]));          /* (N, C) */
  int64_t shape[4] = {x->shape[0], x->shape[1], 1, 1};
  return em_mul(x, em_reshape(g, 4, shape));                    /* (N, C, H, W) */
}

/* GlobalAveragePool -> Flatten -> Gemm -> Relu -> Gemm -> Sigmoid, then
 * the channel scaling. That would be Mul(x, gate as (N, C, 1, 1)), but
 * OpenCV 4.6's DNN cannot broadcast a Mul between two computed tensors, so
 * the gate is spread over (N, C, H*W) by a MatMul with a row of ones (exact)
 * and multiplies x viewed as (N, C, H*W): valid ONNX for every consumer. */
static em_status se_onnx(em_onnx_graph *g, const em_layer_node *node, int n_in,
                         const char *const *in, const em_shape *in_shapes, const char *out,
                         int n_params, em_tensor *const *p, const char *const *pn, em_error *err) {
  int64_t c = in_shapes[0].shape[1], h = in_shapes[0].shape[2], w = in_shapes[0].shape[3];
  for (int i = 0; i < 4; i++) em_onnx_graph_initializer(g, pn[i], p[i]);
  const char *v[13];
  static const char *const what[13] = {"pool",  "squeeze", "fc1",   "relu",  "fc2",
                                       "gate",  "shape3",  "gate3", "ones",  "spread",
                                       "xshape", "x3",     "scaled"};
  for (int i = 0; i < 13; i++)
    if (!(v[i] = em_onnx_graph_value(g, what[i]))) return EM_OK; /* out of memory: reported */
  const char *shape4 = em_onnx_graph_value(g, "shape4");
  if (!shape4) return EM_OK;
  int64_t s3[3] = {0, c, 1}, x3[3] = {0, c, h * w}, s4[4] = {0, c, h, w};
  int64_t ones_shape[2] = {1, h * w};
  em_onnx_graph_initializer_i64s(g, v[6], 3, s3);
  em_onnx_graph_initializer_i64s(g, v[10], 3, x3);
  em_onnx_graph_initializer_i64s(g, shape4, 4, s4);
  em_tensor *ones = em_tensor_new(EM_DTYPE_F32, 2, ones_shape, err); /* (1, H*W) */
  if (!ones) return err ? err->status : EM_ERR_NOMEM;
  em_tensor_fill_(ones, 1.0);
  em_onnx_graph_initializer(g, v[8], ones); /* copied */
  em_tensor_free(ones);
  em_onnx_graph_node(g, "GlobalAveragePool", 1, (const char *[]){in[0]}, v[0]);
  em_onnx_graph_attr_int(g, em_onnx_graph_node(g, "Flatten", 1, (const char *[]){v[0]}, v[1]),
                         "axis", 1);
  em_onnx_graph_attr_int(
      g, em_onnx_graph_node(g, "Gemm", 3, (const char *[]){v[1], pn[0], pn[1]}, v[2]), "transB", 1);
  em_onnx_graph_node(g, "Relu", 1, (const char *[]){v[2]}, v[3]);
  em_onnx_graph_attr_int(
      g, em_onnx_graph_node(g, "Gemm", 3, (const char *[]){v[3], pn[2], pn[3]}, v[4]), "transB", 1);
  em_onnx_graph_node(g, "Sigmoid", 1, (const char *[]){v[4]}, v[5]);
  em_onnx_graph_node(g, "Reshape", 2, (const char *[]){v[5], v[6]}, v[7]);    /* (N, C, 1) */
  em_onnx_graph_node(g, "MatMul", 2, (const char *[]){v[7], v[8]}, v[9]);     /* (N, C, HW) */
  em_onnx_graph_node(g, "Reshape", 2, (const char *[]){in[0], v[10]}, v[11]); /* (N, C, HW) */
  em_onnx_graph_node(g, "Mul", 2, (const char *[]){v[11], v[9]}, v[12]);
  em_onnx_graph_node(g, "Reshape", 2, (const char *[]){v[12], shape4}, out);  /* (N, C, H, W) */
  return EM_OK;
}

static const em_layer_type se_type = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "SEBlock",
    .category = "conv",
    .help = "Squeeze-and-excitation: rescales each channel by a gate learnt from its mean",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 1,
    .attrs = se_attrs,
    .infer = se_infer,
    .forward = se_forward,
};

static em_status se_init(em_plugin_host *host, em_error *err) {
  return em_plugin_add_layer(host, &se_type, se_onnx, err);
}

static const em_plugin_table se_table = {
    .api_version = EM_PLUGIN_API_VERSION,
    .name = "seblock",
    .version = "1.0",
    .description = "Squeeze-and-excitation block (layer SEBlock, with an ONNX form)",
    .init = se_init,
};

EM_PLUGIN_EXPORT const em_plugin_table *ember_plugin_entry(void) { return &se_table; }
