/* masked-fill.c: em_masked_fill, x with the elements where a u8 mask is
 * set replaced by a value (PyTorch's masked_fill: the causal and padding
 * masks of attention), one front-end for every device (op-frontend.h).
 *
 * The mask broadcasts to x's shape; the output has x's shape. Forward and
 * backward are the one masked_fill kernel (em-backend.h): forward writes
 * mask ? value : x, backward adds mask ? 0 : g into x's gradient, so a
 * filled element passes no gradient (value may be -INFINITY; its zero
 * gradient then stays finite). The CPU's kernel is cpu-masked-fill.c.
 * The tape node: in[0] = x, saved[0] = the mask. */
#include "op-frontend.h"
#include "ops-private.h"

static void masked_fill_backward(em_node *n) {
  em_tensor *x = n->in[0], *mask = n->saved[0], *g = n->out->grad; /* g: x's shape */
  if (!em_tensor_requires_grad(x)) return;
  const char *prev = op_backward_begin(n);
  bool fresh;
  em_tensor *gx = em_grad_acquire(x, &fresh);
  if (gx && op_live(gx, g, mask) && em_tensor_numel(gx) > 0)
    EM_KCALL(op_k(g), masked_fill, !fresh, gx, g, mask, 0.0);
  em_device_set_op(prev);
}

em_tensor *em_masked_fill(em_tensor *x, em_tensor *mask, double value) {
  EM_ASSERT(EM_IS_FLOAT(x) && "masked_fill: x must be a float tensor");
  OP_BEGIN("masked_fill", 2, x, mask);
  EM_ASSERT(mask->dtype == EM_DTYPE_U8 && "masked_fill: the mask must be u8");
  int64_t shape[EM_MAX_DIMS];
  int nd = em_broadcast_shape(x, mask, shape);
  bool fits = nd == x->ndim;
  for (int d = 0; fits && d < nd; d++) fits = shape[d] == x->shape[d];
  EM_ASSERT(fits && "masked_fill: the mask does not broadcast to x's shape");
  em_tensor *y = op_empty_like(x);
  const em_kernels *k = op_k(x);
  if (op_live(x, mask, y) && OP_HAS(k, masked_fill, "masked_fill", x)) {
    if (em_tensor_numel(y) > 0) EM_KCALL(k, masked_fill, false, y, x, mask, value);
    if (em_needs_grad(1, &x)) {
      em_node *node = em_record("masked_fill", masked_fill_backward, y, 1, &x);
      node->saved[0] = mask;
    }
  }
  return OP_END(y);
}
