/* elementwise.c: the broadcasting binary ops em_add, em_sub, em_mul and
 * em_div, with backward, one front-end for every device (op-frontend.h).
 * (The one-input maps, scalar arithmetic included, are in unary.c.)
 *
 * Shapes broadcast like NumPy. Forward is the backend's binary kernel
 * (the CPU's rows are in cpu-binary.c).
 *
 * Backward: for an input of the output's shape the gradient term
 * (g, -g, g * other, g / b, -g * a / b^2) is written or accumulated
 * straight into its gradient buffer; for a broadcast input the term goes
 * to a temporary that em_reduce_to_shape sums down. add's and sub's first
 * term is g itself and goes through em_grad_add without a kernel of its
 * own (the first input's takes g itself when it has no gradient yet:
 * em_grad_pass). The tape node: in = a, b, i[0] = the op code. */
#include "op-frontend.h"
#include "ops-private.h"

static const char *const bin_names[EM_KB_COUNT] = {"add", "sub", "mul", "div"};

/* ---- backward ---------------------------------------------------------------------- */

/* dst (g's shape) (=|+=) the gradient term of input `which` (not add's
 * terms or sub's first: those are g). */
static void binary_term(em_kbin op, int which, em_tensor *dst, bool acc, em_tensor *g,
                        em_tensor *a, em_tensor *b) {
  const em_kernels *k = op_k(g);
  switch (op) {
  case EM_KB_SUB: EM_KCALL(k, unary_backward, EM_KU_NEG, acc, dst, g, g, g, 0, 0); break;
  case EM_KB_MUL: EM_KCALL(k, binary, EM_KB_MUL, acc, dst, g, which == 0 ? b : a); break;
  case EM_KB_DIV:
    if (which == 0) {
      EM_KCALL(k, binary, EM_KB_DIV, acc, dst, g, b);
    } else { /* -((g * a) / (b * b)): the same rounding as (-g * a) / (b * b) */
      em_tensor *ga = op_empty_like(g), *bb = op_empty_like(g);
      if (!op_live(ga, bb)) return;
      EM_KCALL(k, binary, EM_KB_MUL, false, ga, g, a);
      EM_KCALL(k, binary, EM_KB_MUL, false, bb, b, b);
      em_tensor *q = op_empty_like(g);
      if (!op_live(q)) return;
      EM_KCALL(k, binary, EM_KB_DIV, false, q, ga, bb);
      EM_KCALL(k, unary_backward, EM_KU_NEG, acc, dst, q, q, q, 0, 0);
    }
    break;
  default: EM_ASSERT(!"no kernel term for this input");
  }
}

static void binary_backward(em_node *n) {
  const em_kbin op = (em_kbin)n->i[0];
  em_tensor *a = n->in[0], *b = n->in[1], *g = n->out->grad; /* g: out's shape */
  const char *prev = op_backward_begin(n);
  for (int which = 0; which < 2; which++) {
    em_tensor *x = n->in[which];
    if (!em_tensor_requires_grad(x)) continue;
    const bool same = em_tensor_same_shape(x, g);
    if (op == EM_KB_ADD || (op == EM_KB_SUB && which == 0)) {
      /* the first input may take g itself (no copy); the second then copies it */
      if (which == 0 && same) em_grad_pass(x, g);
      else em_grad_add(x, same ? g : em_reduce_to_shape(g, x->ndim, x->shape));
    } else if (same) {
      bool fresh;
      em_tensor *gx = em_grad_acquire(x, &fresh);
      if (op_live(gx, g, a, b)) binary_term(op, which, gx, !fresh, g, a, b);
    } else {
      em_tensor *t = op_empty_like(g);
      if (!op_live(t, g, a, b)) continue;
      binary_term(op, which, t, false, g, a, b);
      em_grad_add(x, em_reduce_to_shape(t, x->ndim, x->shape));
    }
  }
  em_device_set_op(prev);
}

/* ---- forward ------------------------------------------------------------------------- */

static em_tensor *binary_apply(em_kbin op, em_tensor *a, em_tensor *b) {
  const char *name = bin_names[op];
  EM_ASSERT(EM_IS_FLOAT(a) && a->dtype == b->dtype);
  OP_BEGIN(name, 2, a, b);
  int64_t shape[EM_MAX_DIMS];
  int nd = em_broadcast_shape(a, b, shape);
  EM_ASSERT(nd >= 0 && "operands do not broadcast");
  em_tensor *y = em_empty_on(a->device, a->dtype, nd, shape);
  const em_kernels *k = op_k(a);
  if (op_live(a, b, y) && OP_HAS(k, binary, name, a)) {
    if (em_tensor_numel(y) > 0) EM_KCALL(k, binary, op, false, y, a, b);
    em_tensor *ins[2] = {a, b};
    if (em_needs_grad(2, ins)) {
      em_node *node = em_record(name, binary_backward, y, 2, ins);
      node->i[0] = op;
    }
  }
  return OP_END(y);
}

em_tensor *em_add(em_tensor *a, em_tensor *b) { return binary_apply(EM_KB_ADD, a, b); }
em_tensor *em_sub(em_tensor *a, em_tensor *b) { return binary_apply(EM_KB_SUB, a, b); }
em_tensor *em_mul(em_tensor *a, em_tensor *b) { return binary_apply(EM_KB_MUL, a, b); }
em_tensor *em_div(em_tensor *a, em_tensor *b) { return binary_apply(EM_KB_DIV, a, b); }
