/* dev-elementwise.c: the broadcasting element-wise ops on devices: add,
 * sub, mul, div, with backward. (The one-input maps have one front-end
 * for every device, engine/ops/unary.c.)
 *
 * Forward is one kernel. Backward of a binary op computes each input's
 * term (g, -g, g * other, g / b, -g * a / b^2) straight into its gradient
 * buffer (accumulating unless fresh) when the input has the output's
 * shape, else into a temporary that em_reduce_to_shape sums down to the
 * input's shape. */
#include "dev-private.h"

#include "../ops/ops-private.h"

static const char *const bin_names[EM_KB_COUNT] = {"add", "sub", "mul", "div"};

/* ---- binary ------------------------------------------------------------------ */

/* dst (=|+=) the gradient term of input `which` (g's shape). */
static void binary_term(em_kbin op, int which, em_tensor *dst, bool acc, em_tensor *g,
                        em_tensor *a, em_tensor *b) {
  const em_kernels *k = dev_k(g);
  switch (op) {
  case EM_KB_ADD: EM_KCALL(k, unary_backward, EM_KU_MULS, acc, dst, g, g, g, 1.0, 0); break;
  case EM_KB_SUB:
    EM_KCALL(k, unary_backward, EM_KU_MULS, acc, dst, g, g, g, which == 0 ? 1.0 : -1.0, 0);
    break;
  case EM_KB_MUL: EM_KCALL(k, binary, EM_KB_MUL, acc, dst, g, which == 0 ? b : a); break;
  case EM_KB_DIV:
    if (which == 0) {
      EM_KCALL(k, binary, EM_KB_DIV, acc, dst, g, b);
    } else { /* -(g * a) / (b * b), the CPU's order of operations */
      em_tensor *ga = dev_empty_like(g), *bb = dev_empty_like(g);
      if (!dev_live(ga, bb)) return;
      EM_KCALL(k, binary, EM_KB_MUL, false, ga, g, a);
      EM_KCALL(k, binary, EM_KB_MUL, false, bb, b, b);
      em_tensor *q = dev_empty_like(g);
      if (!dev_live(q)) return;
      EM_KCALL(k, binary, EM_KB_DIV, false, q, ga, bb);
      EM_KCALL(k, unary_backward, EM_KU_MULS, acc, dst, q, q, q, -1.0, 0);
    }
    break;
  default: EM_ASSERT(!"unknown binary op");
  }
}

static void binary_backward(em_node *n) {
  const em_kbin op = (em_kbin)n->i[0];
  em_tensor *a = n->in[0], *b = n->in[1], *g = n->out->grad; /* g: out's shape */
  const char *prev = dev_backward_begin(n);
  for (int which = 0; which < 2; which++) {
    em_tensor *x = n->in[which];
    if (!em_tensor_requires_grad(x)) continue;
    if (em_tensor_same_shape(x, g)) {
      bool fresh;
      em_tensor *gx = em_grad_acquire(x, &fresh);
      if (dev_live(gx, g, a, b)) binary_term(op, which, gx, !fresh, g, a, b);
    } else {
      em_tensor *t = dev_empty_like(g);
      if (!dev_live(t, g, a, b)) continue;
      binary_term(op, which, t, false, g, a, b);
      em_grad_add(x, em_reduce_to_shape(t, x->ndim, x->shape));
    }
  }
  em_device_set_op(prev);
}

static em_tensor *binary_apply(em_kbin op, em_tensor *a, em_tensor *b) {
  const char *name = bin_names[op];
  DEV_OP_BEGIN(name, 2, a, b);
  EM_ASSERT(a->dtype == EM_DTYPE_F32 && b->dtype == EM_DTYPE_F32);
  int64_t shape[EM_MAX_DIMS];
  int nd = em_broadcast_shape(a, b, shape);
  EM_ASSERT(nd >= 0 && "operands do not broadcast");
  em_tensor *y = dev_empty(a, EM_DTYPE_F32, nd, shape);
  if (dev_live(a, b, y)) {
    if (em_tensor_numel(y) > 0) EM_KCALL(dev_k(a), binary, op, false, y, a, b);
    em_tensor *ins[2] = {a, b};
    if (em_needs_grad(2, ins)) {
      em_node *node = em_record(name, binary_backward, y, 2, ins);
      node->i[0] = op;
    }
  }
  return DEV_OP_END(y);
}

em_tensor *em_dev_add(em_tensor *a, em_tensor *b) { return binary_apply(EM_KB_ADD, a, b); }
em_tensor *em_dev_sub(em_tensor *a, em_tensor *b) { return binary_apply(EM_KB_SUB, a, b); }
em_tensor *em_dev_mul(em_tensor *a, em_tensor *b) { return binary_apply(EM_KB_MUL, a, b); }
em_tensor *em_dev_div(em_tensor *a, em_tensor *b) { return binary_apply(EM_KB_DIV, a, b); }
