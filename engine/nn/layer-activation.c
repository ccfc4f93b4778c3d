/* layer-activation.c: element-wise layer types (ReLU, GELU, SiLU, Sigmoid,
 * Tanh) and Dropout. */
#include "nn-private.h"

static em_status same_shape_infer(const em_layer_node *node, int n_in, const em_shape *in,
                                  em_shape *out, int *n_params, em_param_decl *params,
                                  em_error *err) {
  *out = *in;
  *n_params = 0;
  return EM_OK;
}

#define ACTIVATION(var, NAME, op, HELP)                                                    \
  static em_tensor *var##_forward(const em_layer_node *node, int n_in, em_tensor **in,    \
                                  em_tensor **params, const em_forward_ctx *ctx) {        \
    return op(in[0]);                                                                      \
  }                                                                                        \
  const em_layer_type em_layer_##var = {                                                   \
      .api_version = EM_LAYER_API_VERSION,                                                 \
      .name = NAME,                                                                        \
      .category = "activation",                                                            \
      .help = HELP,                                                                        \
      .min_inputs = 1,                                                                     \
      .max_inputs = 1,                                                                     \
      .infer = same_shape_infer,                                                           \
      .forward = var##_forward,                                                            \
      .position_wise = true,                                                               \
  };

ACTIVATION(relu, "ReLU", em_relu, "max(x, 0)")
ACTIVATION(silu, "SiLU", em_silu, "x * sigmoid(x)")
ACTIVATION(sigmoid, "Sigmoid", em_sigmoid, "1 / (1 + exp(-x))")
ACTIVATION(tanh, "Tanh", em_tanh, "tanh(x)")

/* ---- GELU: the exact form, or PyTorch's approximate="tanh" -------------------------- */

enum { GELU_APPROX };
static const em_attr_desc gelu_attrs[] = {
    {"approximate", EM_ATTR_CHOICE, false, 0, 0, 0,
     "none: x Phi(x) (erf); tanh: GPT-2's tanh approximation", "none|tanh"},
};

static em_tensor *gelu_forward(const em_layer_node *node, int n_in, em_tensor **in,
                               em_tensor **params, const em_forward_ctx *ctx) {
  return em_attr_choice(node, GELU_APPROX) ? em_gelu_tanh(in[0]) : em_gelu(in[0]);
}

const em_layer_type em_layer_gelu = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "GELU",
    .category = "activation",
    .help = "x * Phi(x): the exact (erf) form, or its tanh approximation",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 1,
    .attrs = gelu_attrs,
    .infer = same_shape_infer,
    .forward = gelu_forward,
    .position_wise = true,
};

/* ---- Dropout -------------------------------------------------------------------- */

enum { DO_P };
static const em_attr_desc dropout_attrs[] = {
    {"p", EM_ATTR_FLOAT, false, 0.5, 0, 1, "probability of zeroing an element", NULL},
};

static em_tensor *dropout_forward(const em_layer_node *node, int n_in, em_tensor **in,
                                  em_tensor **params, const em_forward_ctx *ctx) {
  double p = em_attr_float(node, DO_P);
  if (!ctx->training || p == 0) return in[0];
  if (p >= 1) return em_mul_scalar(in[0], 0.0); /* everything dropped, like PyTorch */
  return em_dropout(in[0], p, true, ctx->rng);
}

const em_layer_type em_layer_dropout = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "Dropout",
    .category = "regularisation",
    .help = "zeroes elements with probability p while training, scaling the rest by 1/(1-p)",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 1,
    .attrs = dropout_attrs,
    .infer = same_shape_infer,
    .forward = dropout_forward,
    .position_wise = true,
};
