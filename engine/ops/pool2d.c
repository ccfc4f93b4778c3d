/* pool2d.c: em_max_pool2d and em_avg_pool2d, with backward, one front-end
 * for every device (op-frontend.h). The CPU's kernels are in cpu-pool.c
 * (its plane-by-plane fast path and the loop reference,
 * engine/device/kernels/pool-ref.c); em_max_pool2d_ref and
 * em_avg_pool2d_ref run the reference on the CPU, for tests.
 *
 * Forward is the backend's pool2d_forward over a contiguous x (a strided
 * input is copied first, and the copy is what backward reads); backward
 * its pool2d_backward, written into a gradient buffer (the gradient
 * itself when fresh, else a temporary added into it). A max pool that
 * records a node gives both kernels an I32 tensor of the output's shape
 * for the positions of the maxima (em-backend.h: the CPU's scatter reads
 * them; ref and CUDA find each maximum again from x). The tape node:
 * in[0] = x; saved[0] = x as the kernel read it, saved[1] = the positions
 * (max) or NULL; i[0..6] the parameters (node-params.h); i[7] = max;
 * i[8] = ref. */
#include "conv-private.h"
#include "op-frontend.h"

static void pool_backward(em_node *n) {
  em_tensor *xs = n->saved[0], *idx = n->saved[1], *y = n->out;
  const char *prev = op_backward_begin(n);
  em_pool2d_params p = em_pool2d_params_load(n);
  em_grad_buffer gx;
  em_tensor *bx = em_grad_buffer_begin(n->in[0], &gx);
  em_tensor *g = em_contiguous_nograd(n->out->grad);
  if (bx && op_live(bx, g, xs, y, idx) && em_tensor_numel(bx) > 0) {
    em_k_pool2d_backward *kernel = n->i[8] ? em_cpu_pool2d_ref_backward : op_k(g)->pool2d_backward;
    em_kernel_done("pool2d_backward", kernel(n->i[7] != 0, bx, g, xs, y, idx, &p));
    em_grad_buffer_end(&gx);
  }
  em_device_set_op(prev);
}

static em_tensor *pool_run(em_tensor *x /* (N, C, H, W) */, const em_pool2d_params *p, bool max,
                           bool ref) {
  const char *name = max ? "max_pool2d" : "avg_pool2d";
  OP_BEGIN(name, 1, x);
  EM_ASSERT(p && x->ndim == 4);
  EM_ASSERT(!(ref && em_on_device(x)) && "pool2d_ref: the loop reference runs on the CPU");
  em_pool_geom g;
  em_pool_geom_init(&g, x, p);
  em_tensor *xc = em_contiguous_nograd(x);
  int64_t shape[4] = {g.N, g.C, g.OH, g.OW};
  em_tensor *y = em_empty_on(x->device, x->dtype, 4, shape); /* (N, C, OH, OW) */
  bool grad = em_needs_grad(1, &x);
  em_tensor *idx = max && grad ? em_empty_on(x->device, EM_DTYPE_I32, 4, shape) : NULL;
  const em_kernels *k = op_k(x);
  if ((ref || (OP_HAS(k, pool2d_forward, name, x) && OP_HAS(k, pool2d_backward, name, x))) &&
      op_live(xc, y, idx)) {
    em_k_pool2d_forward *kernel = ref ? em_cpu_pool2d_ref_forward : k->pool2d_forward;
    if (em_tensor_numel(y) > 0) em_kernel_done("pool2d_forward", kernel(max, y, idx, xc, p));
    if (grad) {
      em_node *nd = em_record(name, pool_backward, y, 1, &x);
      nd->saved[0] = xc;
      nd->saved[1] = idx;
      em_pool2d_params_save(nd, p);
      nd->i[7] = max;
      nd->i[8] = ref;
    }
  }
  return OP_END(y);
}

em_tensor *em_max_pool2d(em_tensor *x, const em_pool2d_params *p) {
  return pool_run(x, p, true, false);
}

em_tensor *em_avg_pool2d(em_tensor *x, const em_pool2d_params *p) {
  return pool_run(x, p, false, false);
}

em_tensor *em_max_pool2d_ref(em_tensor *x, const em_pool2d_params *p) {
  return pool_run(x, p, true, true);
}

em_tensor *em_avg_pool2d_ref(em_tensor *x, const em_pool2d_params *p) {
  return pool_run(x, p, false, true);
}
