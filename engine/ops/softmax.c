/* softmax.c: em_softmax and em_log_softmax along any dim, with backward,
 * one front-end for every device (op-frontend.h). The CPU's kernels are
 * in cpu-softmax.c.
 *
 * Forward is the backend's softmax_forward over a contiguous x (a 0-dim x
 * runs as a (1) row); backward its softmax_backward from the saved
 * output, written into a gradient buffer (em_grad_buffer_begin: the
 * gradient itself when fresh, else a temporary added into it). The tape
 * node: in[0] = x, saved[0] = y as the kernel wrote it, i[0] = dim,
 * i[1] = log. */
#include "op-frontend.h"
#include "ops-private.h"

static void softmax_backward(em_node *n) {
  em_tensor *y = n->saved[0];
  const char *prev = op_backward_begin(n);
  em_tensor *g = em_contiguous_nograd(n->out->grad);
  em_grad_buffer gx;
  em_tensor *bx = em_grad_buffer_begin(n->in[0], &gx);
  if (bx && op_live(bx, g, y) && em_tensor_numel(bx) > 0) {
    /* a 0-dim x ran as a (1) row */
    EM_KCALL(op_k(g), softmax_backward, n->i[1] != 0, em_view_as(bx, y->ndim, y->shape),
             em_view_as(g, y->ndim, y->shape), y, (int)n->i[0]);
    em_grad_buffer_end(&gx);
  }
  em_device_set_op(prev);
}

static em_tensor *softmax_any(em_tensor *x, int dim, bool log_out) {
  const char *name = log_out ? "log_softmax" : "softmax";
  EM_ASSERT(em_dtype_is_float(x->dtype));
  OP_BEGIN(name, 1, x);
  if (dim < 0) dim += x->ndim;
  EM_ASSERT(x->ndim == 0 ? dim == 0 || dim == -1 : dim >= 0 && dim < x->ndim);
  em_tensor *xc = em_contiguous_nograd(x);
  if (x->ndim == 0) { /* one value: a (1) row */
    int64_t one = 1;
    xc = em_view_as(xc, 1, &one);
    dim = 0;
  }
  em_tensor *yk = op_empty_like(xc); /* what the kernel writes */
  em_tensor *y = x->ndim == 0 ? em_view_as(yk, 0, NULL) : yk;
  const em_kernels *k = op_k(x);
  if (op_live(xc, yk) && OP_HAS(k, softmax_forward, name, x) &&
      OP_HAS(k, softmax_backward, name, x)) {
    if (em_tensor_numel(xc) > 0) EM_KCALL(k, softmax_forward, log_out, yk, xc, dim);
    if (em_needs_grad(1, &x)) {
      em_node *nd = em_record(name, softmax_backward, y, 1, &x);
      nd->saved[0] = yk;
      nd->i[0] = dim;
      nd->i[1] = log_out;
    }
  }
  return OP_END(y);
}

em_tensor *em_softmax(em_tensor *x, int dim) { return softmax_any(x, dim, false); }
em_tensor *em_log_softmax(em_tensor *x, int dim) { return softmax_any(x, dim, true); }
