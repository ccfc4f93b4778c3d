/* unary.c: the one-input element-wise ops, one front-end for every
 * device (op-frontend.h): neg, add_scalar, mul_scalar, pow_scalar, exp,
 * log, sqrt, abs, clamp, relu, gelu, silu, sigmoid, tanh, with backward.
 *
 * Forward is the backend's unary kernel, backward its unary_backward on
 * the saved input and output (each op's derivative reads one of them:
 * em_kun_uses_y in the shared kernel bodies, the save column of the
 * CPU's rows in cpu-unary.c). The tape node: in[0] = x, saved[0] = y,
 * i[0] = the op code, f = its scalars. */
#include "op-frontend.h"

static void unary_backward(em_node *n) {
  em_tensor *x = n->in[0], *y = n->saved[0], *g = n->out->grad;
  const char *prev = op_backward_begin(n);
  bool fresh;
  em_tensor *gx = em_grad_acquire(x, &fresh);
  if (gx && op_live(gx, g, x, y) && em_tensor_numel(gx) > 0)
    EM_KCALL(op_k(g), unary_backward, (em_kun)n->i[0], !fresh, gx, g, x, y, n->f[0], n->f[1]);
  em_device_set_op(prev);
}

static em_tensor *unary_apply(em_kun op, const char *name, em_tensor *x, double p0, double p1) {
  EM_ASSERT(em_dtype_is_float(x->dtype));
  OP_BEGIN(name, 1, x);
  em_tensor *y = op_empty_like(x);
  const em_kernels *k = op_k(x);
  if (op_live(x, y) && OP_HAS(k, unary, name, x) && OP_HAS(k, unary_backward, name, x)) {
    if (em_tensor_numel(y) > 0) EM_KCALL(k, unary, op, y, x, p0, p1);
    if (em_needs_grad(1, &x)) {
      em_node *nd = em_record(name, unary_backward, y, 1, &x);
      nd->saved[0] = y;
      nd->i[0] = op;
      nd->f[0] = p0;
      nd->f[1] = p1;
    }
  }
  return OP_END(y);
}

em_tensor *em_neg(em_tensor *x) { return unary_apply(EM_KU_NEG, "neg", x, 0, 0); }
em_tensor *em_add_scalar(em_tensor *x, double s) {
  return unary_apply(EM_KU_ADDS, "add_scalar", x, s, 0);
}
em_tensor *em_mul_scalar(em_tensor *x, double s) {
  return unary_apply(EM_KU_MULS, "mul_scalar", x, s, 0);
}
em_tensor *em_pow_scalar(em_tensor *x, double p) {
  return unary_apply(EM_KU_POWS, "pow_scalar", x, p, 0);
}
em_tensor *em_exp(em_tensor *x) { return unary_apply(EM_KU_EXP, "exp", x, 0, 0); }
em_tensor *em_log(em_tensor *x) { return unary_apply(EM_KU_LOG, "log", x, 0, 0); }
em_tensor *em_sqrt(em_tensor *x) { return unary_apply(EM_KU_SQRT, "sqrt", x, 0, 0); }
em_tensor *em_abs(em_tensor *x) { return unary_apply(EM_KU_ABS, "abs", x, 0, 0); }
em_tensor *em_clamp(em_tensor *x, double lo, double hi) {
  return unary_apply(EM_KU_CLAMP, "clamp", x, lo, hi);
}
em_tensor *em_relu(em_tensor *x) { return unary_apply(EM_KU_RELU, "relu", x, 0, 0); }
em_tensor *em_gelu(em_tensor *x) { return unary_apply(EM_KU_GELU, "gelu", x, 0, 0); }
em_tensor *em_gelu_tanh(em_tensor *x) {
  return unary_apply(EM_KU_GELU_TANH, "gelu_tanh", x, 0, 0);
}
em_tensor *em_silu(em_tensor *x) { return unary_apply(EM_KU_SILU, "silu", x, 0, 0); }
em_tensor *em_sigmoid(em_tensor *x) { return unary_apply(EM_KU_SIGMOID, "sigmoid", x, 0, 0); }
em_tensor *em_tanh(em_tensor *x) { return unary_apply(EM_KU_TANH, "tanh", x, 0, 0); }
