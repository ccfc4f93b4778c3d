/* conv2d.c: em_conv2d and em_conv2d_relu (the same, then max(., 0) in
 * place: a Conv2d layer followed by a ReLU that alone reads it), with
 * backward, one front-end for every device (op-frontend.h). The CPU's
 * kernels are in cpu-conv.c (its fast paths, cpu-kernels.h, and the loop
 * reference, engine/device/kernels/conv-ref.c); em_conv2d_ref runs the
 * reference on the CPU, for tests.
 *
 * Forward is the backend's conv2d_forward over contiguous x and w (a
 * strided input is copied first, and the copy is what backward reads),
 * under the autocast mode (the CPU's autocast leaves convolution in f32;
 * on devices it is autocast too). conv2d_relu then runs the backend's
 * unary ReLU in place, and its backward masks the incoming gradient with
 * the unary_backward of that ReLU (from the output) before the
 * convolution's: the kernels em_relu(em_conv2d(.)) runs, so that both
 * give the same bits. Backward computes only the gradients that are
 * wanted (the first layer of a network, whose input needs no grad, never
 * pays for dX); the kernel writes them, so an accumulating gradient goes
 * through a temporary (em_grad_buffer). The tape node: in = x, w, b;
 * saved[0], saved[1] = x, w as the kernel read them; i[0..6] the
 * parameters (node-params.h); i[7] = amp; i[8] = ref (em_conv2d_ref). */
#include "conv-private.h"
#include "op-frontend.h"

#include "em-amp.h"
#include "em-profile.h"

/* Multiply-adds of one direct convolution, times two: forward, dX and
 * dW each do this many (Winograd does fewer; the nominal count is what
 * FLOP rates are quoted in). */
static double conv_flops(const em_conv_geom *g) {
  return 2.0 * (double)g->N * (double)g->K * (double)g->OH * (double)g->OW * (double)g->Cg *
         (double)g->kh * (double)g->kw;
}

/* The convolution's gradients from g, the gradient of its own output. */
static void conv2d_grads(em_node *n, em_tensor *g) {
  em_tensor *xs = n->saved[0], *ws = n->saved[1];
  em_grad_buffer gx, gw, gb;
  em_tensor *bx = em_grad_buffer_begin(n->in[0], &gx);
  em_tensor *bw = em_grad_buffer_begin(n->in[1], &gw);
  em_tensor *bb = em_grad_buffer_begin(n->in[2], &gb);
  if (!(bx || bw || bb) || !op_live(g, xs, ws, bx, bw, bb)) return;
  em_conv2d_params p = em_conv2d_params_load(n);
  em_conv_geom geo;
  em_conv_geom_init(&geo, xs, ws, &p);
  em_op_add_flops(((bx != NULL) + (bw != NULL)) * conv_flops(&geo)); /* dX and dW GEMMs */
  em_k_conv2d_backward *kernel = n->i[8] ? em_cpu_conv2d_ref_backward : op_k(g)->conv2d_backward;
  em_kernel_done("conv2d_backward", kernel((int)n->i[7], bx, bw, bb, g, xs, ws, &p));
  em_grad_buffer_end(&gx);
  em_grad_buffer_end(&gw);
  em_grad_buffer_end(&gb);
}

static void conv2d_backward(em_node *n) {
  const char *prev = op_backward_begin(n);
  conv2d_grads(n, em_contiguous_nograd(n->out->grad));
  em_device_set_op(prev);
}

/* The ReLU's mask on the incoming gradient (from the output y: relu's
 * derivative reads its output), then the convolution's gradients. */
static void conv2d_relu_backward(em_node *n) {
  const char *prev = op_backward_begin(n);
  em_tensor *y = n->out, *g = em_contiguous_nograd(y->grad);
  em_tensor *gm = op_empty_like(g); /* (N, K, OH, OW) */
  if (op_live(gm, g, y)) {
    if (em_tensor_numel(gm) > 0)
      EM_KCALL(op_k(g), unary_backward, EM_KU_RELU, false, gm, g, y, y, 0, 0);
    conv2d_grads(n, gm);
  }
  em_device_set_op(prev);
}

static em_tensor *conv2d_run(em_tensor *x /* (N, C, H, W) */,
                             em_tensor *w /* (K, C/groups, kh, kw) */,
                             em_tensor *b /* (K) or NULL */, const em_conv2d_params *p,
                             bool ref, bool relu) {
  const char *name = relu ? "conv2d_relu" : "conv2d";
  OP_BEGIN(name, 3, x, w, b);
  EM_ASSERT(p && x->ndim == 4 && w->ndim == 4);
  EM_ASSERT(w->dtype == x->dtype);
  if (b) EM_ASSERT(b->ndim == 1 && b->shape[0] == w->shape[0] && b->dtype == x->dtype);
  EM_ASSERT(!(ref && em_on_device(x)) && "conv2d_ref: the loop reference runs on the CPU");
  em_conv_geom g;
  em_conv_geom_init(&g, x, w, p);
  em_op_add_flops(conv_flops(&g));
  em_tensor *xc = em_contiguous_nograd(x), *wc = em_contiguous_nograd(w);
  em_tensor *bc = b ? em_contiguous_nograd(b) : NULL;
  int64_t shape[4] = {g.N, g.K, g.OH, g.OW};
  em_tensor *y = em_empty_on(x->device, x->dtype, 4, shape); /* (N, K, OH, OW) */
  int amp = (int)em_autocast_mode();
  const em_kernels *k = op_k(x);
  bool has = ref || (OP_HAS(k, conv2d_forward, name, x) && OP_HAS(k, conv2d_backward, name, x));
  if (has && relu) has = OP_HAS(k, unary, name, x) && OP_HAS(k, unary_backward, name, x);
  if (has && op_live(xc, wc, bc, y)) {
    em_k_conv2d_forward *kernel = ref ? em_cpu_conv2d_ref_forward : k->conv2d_forward;
    if (em_tensor_numel(y) > 0 &&
        em_kernel_done("conv2d_forward", kernel(amp, y, xc, wc, bc, p)) && relu)
      EM_KCALL(k, unary, EM_KU_RELU, y, y, 0, 0); /* in place */
    em_tensor *ins[3] = {x, w, b};
    if (em_needs_grad(3, ins)) {
      em_node *nd = em_record(name, relu ? conv2d_relu_backward : conv2d_backward, y, 3, ins);
      nd->saved[0] = xc;
      nd->saved[1] = wc;
      em_conv2d_params_save(nd, p);
      nd->i[7] = amp;
      nd->i[8] = ref;
    }
  }
  return OP_END(y);
}

em_tensor *em_conv2d(em_tensor *x, em_tensor *w, em_tensor *b, const em_conv2d_params *p) {
  return conv2d_run(x, w, b, p, false, false);
}

em_tensor *em_conv2d_relu(em_tensor *x, em_tensor *w, em_tensor *b, const em_conv2d_params *p) {
  /* in anomaly mode, which checks every op's output, the convolution's
   * own must be seen (the ReLU would turn a -inf there into 0) */
  if (em_anomaly_enabled()) return em_relu(em_conv2d(x, w, b, p));
  return conv2d_run(x, w, b, p, false, true);
}

em_tensor *em_conv2d_ref(em_tensor *x, em_tensor *w, em_tensor *b, const em_conv2d_params *p) {
  return conv2d_run(x, w, b, p, true, false);
}
