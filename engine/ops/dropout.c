/* dropout.c: em_dropout with PyTorch's semantics, one front-end for every
 * device (op-frontend.h). In training each element is zeroed with
 * probability p and survivors are scaled by 1 / (1 - p); in eval, or
 * with p == 0, the op is the identity and returns x itself.
 *
 * One (seed, counter) pair is drawn from the caller's rng (two
 * em_rng_next calls, whatever the size) and the backend's dropout_mask
 * kernel turns it into the mask, 1 / (1 - p) or 0 per element, from the
 * counter-based generator every backend shares (kern-random.h): the same
 * rng state gives the same mask on the CPU and on every device, whatever
 * the dtype. y = x * mask; backward gx = g * mask. The tape node: in[0] =
 * x, saved[0] = the mask (x's shape, contiguous), f[0] = p. */
#include "op-frontend.h"
#include "ops-private.h"

static void dropout_backward(em_node *n) {
  em_tensor *mask = n->saved[0], *g = n->out->grad;
  const char *prev = op_backward_begin(n);
  bool fresh;
  em_tensor *gx = em_grad_acquire(n->in[0], &fresh);
  if (gx && op_live(gx, g, mask) && em_tensor_numel(gx) > 0)
    EM_KCALL(op_k(g), binary, EM_KB_MUL, !fresh, gx, g, mask);
  em_device_set_op(prev);
}

em_tensor *em_dropout(em_tensor *x, double p, bool training, em_rng *rng) {
  EM_ASSERT(em_dtype_is_float(x->dtype) && p >= 0 && p <= 1);
  em_op_check("dropout", 1, &x);
  if (!training || p == 0) return x;
  EM_ASSERT(rng);
  OP_BEGIN("dropout", 1, x);
  const uint64_t seed = em_rng_next(rng), counter = em_rng_next(rng);
  em_tensor *mask = op_empty_like(x), *y = op_empty_like(x);
  const em_kernels *k = op_k(x);
  if (op_live(x, mask, y) && OP_HAS(k, dropout_mask, "dropout", x) &&
      OP_HAS(k, binary, "dropout", x)) {
    if (em_tensor_numel(y) > 0) { /* p == 1: every draw is below 2^32, scale 0 */
      EM_KCALL(k, dropout_mask, mask, p, seed, counter);
      EM_KCALL(k, binary, EM_KB_MUL, false, y, x, mask);
    }
    if (em_needs_grad(1, &x)) {
      em_node *nd = em_record("dropout", dropout_backward, y, 1, &x);
      nd->saved[0] = mask;
      nd->f[0] = p;
    }
  }
  return OP_END(y);
}
