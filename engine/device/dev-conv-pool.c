/* dev-conv-pool.c: em_conv2d, em_max_pool2d and em_avg_pool2d on devices,
 * with backward.
 *
 * The kernels take contiguous NCHW tensors: a strided input is copied
 * first, and the copy is what backward reads. Output sizes and the
 * parameter checks are the CPU's (em_conv_geom_init, em_pool_geom_init:
 * they read only shapes). conv2d runs under autocast with the amp mode
 * (on devices convolution is autocast too, unlike the CPU). Backward
 * kernels write gradients, so an accumulating gradient goes through a
 * temporary (em_grad_buffer). */
#include "dev-private.h"

#include "../ops/conv-private.h"
#include "../core/grad-accumulate.h"
#include "../core/node-params.h"
#include "em-amp.h"

/* ---- conv2d ------------------------------------------------------------------------ */

/* in: x, w, b; saved: x, w as the kernel read them; i[7]: amp. */
static void conv2d_backward(em_node *n) {
  em_tensor *xs = n->saved[0], *ws = n->saved[1];
  const char *prev = dev_backward_begin(n);
  em_conv2d_params p = em_conv2d_params_load(n);
  em_grad_buffer gx, gw, gb;
  em_tensor *bx = em_grad_buffer_begin(n->in[0], &gx);
  em_tensor *bw = em_grad_buffer_begin(n->in[1], &gw);
  em_tensor *bb = em_grad_buffer_begin(n->in[2], &gb);
  em_tensor *g = em_contiguous_nograd(n->out->grad);
  if ((bx || bw || bb) && dev_live(g, xs, ws, bx, bw, bb)) {
    EM_KCALL(dev_k(g), conv2d_backward, (int)n->i[7], bx, bw, bb, g, xs, ws, &p);
    em_grad_buffer_end(&gx);
    em_grad_buffer_end(&gw);
    em_grad_buffer_end(&gb);
  }
  em_device_set_op(prev);
}

em_tensor *em_dev_conv2d(em_tensor *x, em_tensor *w, em_tensor *b, const em_conv2d_params *p) {
  DEV_OP_BEGIN("conv2d", 3, x, w, b);
  EM_ASSERT(p && x->ndim == 4 && w->ndim == 4);
  if (b) EM_ASSERT(b->ndim == 1 && b->shape[0] == w->shape[0]);
  em_conv_geom g;
  em_conv_geom_init(&g, x, w, p);
  em_op_add_flops(2.0 * (double)g.N * (double)g.K * (double)g.OH * (double)g.OW * (double)g.Cg *
                  (double)g.kh * (double)g.kw);
  em_tensor *xc = em_contiguous_nograd(x), *wc = em_contiguous_nograd(w);
  em_tensor *bc = b ? em_contiguous_nograd(b) : NULL;
  int64_t shape[4] = {g.N, g.K, g.OH, g.OW};
  em_tensor *y = dev_empty(x, EM_DTYPE_F32, 4, shape); /* (N, K, OH, OW) */
  int amp = (int)em_autocast_mode();
  if (dev_live(xc, wc, bc, y)) {
    if (em_tensor_numel(y) > 0) EM_KCALL(dev_k(x), conv2d_forward, amp, y, xc, wc, bc, p);
    em_tensor *ins[3] = {x, w, b};
    if (em_needs_grad(3, ins)) {
      em_node *nd = em_record("conv2d", conv2d_backward, y, 3, ins);
      nd->saved[0] = xc;
      nd->saved[1] = wc;
      em_conv2d_params_save(nd, p);
      nd->i[7] = amp;
    }
  }
  return DEV_OP_END(y);
}

/* ---- pooling ------------------------------------------------------------------------------ */

/* in: x; saved[0]: x as the kernel read it; i[7]: max. */
static void pool_backward(em_node *n) {
  em_tensor *xs = n->saved[0], *y = n->out;
  const char *prev = dev_backward_begin(n);
  em_pool2d_params p = em_pool2d_params_load(n);
  em_grad_buffer gx;
  em_tensor *bx = em_grad_buffer_begin(n->in[0], &gx);
  em_tensor *g = em_contiguous_nograd(n->out->grad);
  if (bx && dev_live(bx, g, xs, y) && em_tensor_numel(bx) > 0) {
    EM_KCALL(dev_k(g), pool2d_backward, n->i[7] != 0, bx, g, xs, y, &p);
    em_grad_buffer_end(&gx);
  }
  em_device_set_op(prev);
}

static em_tensor *pool_run(em_tensor *x /* (N, C, H, W) */, const em_pool2d_params *p, bool max) {
  const char *name = max ? "max_pool2d" : "avg_pool2d";
  DEV_OP_BEGIN(name, 1, x);
  EM_ASSERT(p && x->ndim == 4 && x->dtype == EM_DTYPE_F32);
  em_pool_geom g;
  em_pool_geom_init(&g, x, p);
  em_tensor *xc = em_contiguous_nograd(x);
  int64_t shape[4] = {g.N, g.C, g.OH, g.OW};
  em_tensor *y = dev_empty(x, EM_DTYPE_F32, 4, shape); /* (N, C, OH, OW) */
  if (dev_live(xc, y)) {
    if (em_tensor_numel(y) > 0) EM_KCALL(dev_k(x), pool2d_forward, max, y, xc, p);
    if (em_needs_grad(1, &x)) {
      em_node *nd = em_record(name, pool_backward, y, 1, &x);
      nd->saved[0] = xc;
      em_pool2d_params_save(nd, p);
      nd->i[7] = max;
    }
  }
  return DEV_OP_END(y);
}

em_tensor *em_dev_max_pool2d(em_tensor *x, const em_pool2d_params *p) {
  return pool_run(x, p, true);
}
em_tensor *em_dev_avg_pool2d(em_tensor *x, const em_pool2d_params *p) {
  return pool_run(x, p, false);
}
