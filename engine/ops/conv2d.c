/* conv2d.c: em_conv2d and its autograd node.
 *
 * f32 runs the fast path of the CPU kernel table (cpu-kernels.h:
 * conv-fast.c, which hands 3x3 stride-1 convolutions to conv-winograd.c,
 * in the processor's instruction set), f64 the loop reference (conv-ref.c);
 * em_conv2d_ref runs the reference for either, for tests.
 * Backward computes only the gradients that are wanted: the first layer
 * of a network, whose input needs no grad, never pays for dX. */
#include "cpu-kernels.h"

/* Multiply-adds of one direct convolution, times two: forward, dX and
 * dW each do this many (Winograd does fewer; the nominal count is what
 * FLOP rates are quoted in). */
static double conv_flops(const em_conv_geom *g) {
  return 2.0 * (double)g->N * (double)g->K * (double)g->OH * (double)g->OW * (double)g->Cg *
         (double)g->kh * (double)g->kw;
}

/* in: x, w, b (or NULL); saved[0]: x as the forward read it. */
static void conv2d_backward_with(em_node *n, bool ref) {
  em_tensor *xs = n->saved[0], *w = n->in[1], *b = n->in[2];
  em_conv_grads gr = {0};
  gr.gx = em_grad_acquire(n->in[0], &gr.gx_fresh);
  gr.gw = em_grad_acquire(w, &gr.gw_fresh);
  gr.gb = b ? em_grad_acquire(b, &gr.gb_fresh) : NULL;
  if (!gr.gx && !gr.gw && !gr.gb) return;
  em_conv2d_params p = em_conv2d_params_load(n);
  em_conv_geom g;
  em_conv_geom_init(&g, xs, w, &p);
  em_op_add_flops(((gr.gx != NULL) + (gr.gw != NULL)) * conv_flops(&g)); /* dX and dW GEMMs */
  if (ref) em_conv2d_ref_backward(&g, xs, w, n->out->grad, &gr);
  else em_cpu_kernels_get()->conv2d_backward(&g, xs, w, n->out->grad, &gr);
}

static void conv2d_backward_fast(em_node *n) { conv2d_backward_with(n, false); }
static void conv2d_backward_ref(em_node *n) { conv2d_backward_with(n, true); }

static em_tensor *conv2d_run(em_tensor *x /* (N, C, H, W) */,
                             em_tensor *w /* (K, C/groups, kh, kw) */,
                             em_tensor *b /* (K) or NULL */, const em_conv2d_params *p,
                             bool ref) {
  if (EM_ON_DEVICE(x, w, b)) return em_dev_conv2d(x, w, b, p);
  EM_ASSERT(p && x->ndim == 4 && w->ndim == 4);
  EM_ASSERT(EM_IS_FLOAT(x) && w->dtype == x->dtype);
  if (b) EM_ASSERT(b->ndim == 1 && b->shape[0] == w->shape[0] && b->dtype == x->dtype);
  EM_OP_BEGIN("conv2d", 3, x, w, b);
  em_conv_geom g;
  em_conv_geom_init(&g, x, w, p);
  em_op_add_flops(conv_flops(&g));
  ref = ref || x->dtype != EM_DTYPE_F32;
  em_tensor *xs = x; /* what forward reads and backward keeps */
  if (!ref && !em_tensor_is_contiguous(x)) {
    xs = em_empty(x->dtype, 4, x->shape);
    em_tensor_copy_(xs, x);
  }
  int64_t shape[4] = {g.N, g.K, g.OH, g.OW};
  em_tensor *y = em_empty(x->dtype, 4, shape); /* (N, K, OH, OW) */
  if (ref) em_conv2d_ref_forward(&g, xs, w, b, y);
  else em_cpu_kernels_get()->conv2d_forward(&g, xs, w, b, y);
  em_tensor *ins[3] = {x, w, b};
  if (em_needs_grad(3, ins)) {
    em_node *nd = em_record("conv2d", ref ? conv2d_backward_ref : conv2d_backward_fast, y, 3, ins);
    nd->saved[0] = xs;
    em_conv2d_params_save(nd, p);
  }
  return EM_OP_END(y);
}

em_tensor *em_conv2d(em_tensor *x, em_tensor *w, em_tensor *b, const em_conv2d_params *p) {
  return conv2d_run(x, w, b, p, false);
}

em_tensor *em_conv2d_ref(em_tensor *x, em_tensor *w, em_tensor *b, const em_conv2d_params *p) {
  return conv2d_run(x, w, b, p, true);
}
