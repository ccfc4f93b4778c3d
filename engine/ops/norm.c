/* norm.c: em_batch_norm and em_layer_norm, with backward for x, weight
 * and bias, one front-end for every device (op-frontend.h). The CPU's
 * kernels are in cpu-norm.c (the formulas are at its top).
 *
 * Training-mode batch norm and layer norm are their kernels over
 * contiguous x, w, b, with the statistics backward reads (per channel or
 * per row: mean, invstd) saved by forward, in double on a backend that
 * takes f64 (the CPU's kernels keep them so), else f32; the batch-norm
 * kernel updates the running stats in place with the unbiased variance.
 * Eval-mode batch norm backward is the backend's batch_norm_backward_eval
 * over copies of the running stats taken when forward runs; a backend
 * without it (ref, CUDA) gets it composed from element-wise kernels on
 * the per-channel a = weight / sqrt(running_var + eps) and running mean:
 *   gx = g * a,   gb = sum g,   gw = sum g * (x - mean) * invstd
 * (sums over every dim but the channel, with sum_to). Backward kernels
 * write gradients, so an accumulating one goes through a temporary
 * (em_grad_buffer). */
#include "op-frontend.h"
#include "ops-private.h"

/* t (C) seen as (1, C, 1, ...) against x's ndim. */
static em_tensor *channel_view(em_tensor *t, int ndim) {
  int64_t shape[EM_MAX_DIMS];
  for (int d = 0; d < ndim; d++) shape[d] = d == 1 ? t->shape[0] : 1;
  return em_view_as(t, ndim, shape);
}

/* The dtype of saved statistics on t's device. */
static em_dtype stat_dtype(const em_tensor *t) {
  return em_backend_of(t)->f64 ? EM_DTYPE_F64 : EM_DTYPE_F32;
}

/* ---- batch norm ------------------------------------------------------------------------ */

/* in: x, w, b; saved: x (contiguous), w (contiguous or NULL), then
 * training: save_mean, save_invstd; eval: the running mean and variance
 * (copies; i[1] set) or the running mean and invstd (f32, for the
 * composed backward). i[0]: training; f[0]: eps. */
static void batch_norm_backward(em_node *n) {
  em_tensor *x = n->saved[0], *w = n->saved[1], *s0 = n->saved[2], *s1 = n->saved[3];
  const char *prev = op_backward_begin(n);
  em_tensor *g = em_contiguous_nograd(n->out->grad);
  const em_kernels *k = op_k(g);
  if (n->i[0] || n->i[1]) {
    em_grad_buffer gx, gw, gb;
    em_tensor *bx = em_grad_buffer_begin(n->in[0], &gx);
    em_tensor *bw = em_grad_buffer_begin(n->in[1], &gw);
    em_tensor *bb = em_grad_buffer_begin(n->in[2], &gb);
    if ((bx || bw || bb) && op_live(g, x, w, s0, s1, bx, bw, bb)) {
      if (n->i[0]) EM_KCALL(k, batch_norm_backward, bx, bw, bb, g, x, w, s0, s1);
      else EM_KCALL(k, batch_norm_backward_eval, bx, bw, bb, g, x, w, s0, s1, n->f[0]);
      em_grad_buffer_end(&gx);
      em_grad_buffer_end(&gw);
      em_grad_buffer_end(&gb);
    }
  } else {
    int nd = x->ndim;
    em_tensor *a = s1; /* (C): invstd, times w */
    if (w) {
      a = op_empty_like(s1);
      if (op_live(a, s1, w)) EM_KCALL(k, binary, EM_KB_MUL, false, a, s1, w);
    }
    bool fresh;
    em_tensor *gx = em_grad_acquire(n->in[0], &fresh);
    if (gx && op_live(gx, g, a)) EM_KCALL(k, binary, EM_KB_MUL, !fresh, gx, g, channel_view(a, nd));
    em_tensor *gw = em_grad_acquire(n->in[1], &fresh);
    if (gw) { /* sum g * (x - mean) * invstd */
      em_tensor *t = op_empty_like(g), *u = op_empty_like(g);
      if (op_live(gw, t, u, g, x, s0, s1)) {
        EM_KCALL(k, binary, EM_KB_SUB, false, t, x, channel_view(s0, nd));
        EM_KCALL(k, binary, EM_KB_MUL, false, u, t, channel_view(s1, nd));
        EM_KCALL(k, binary, EM_KB_MUL, false, t, u, g);
        EM_KCALL(k, sum_to, !fresh, channel_view(gw, nd), t);
      }
    }
    em_tensor *gb = em_grad_acquire(n->in[2], &fresh);
    if (gb && op_live(gb, g)) EM_KCALL(k, sum_to, !fresh, channel_view(gb, nd), g);
  }
  em_device_set_op(prev);
}

em_tensor *em_batch_norm(em_tensor *x, em_tensor *weight, em_tensor *bias,
                         em_tensor *running_mean, em_tensor *running_var, bool training,
                         double momentum, double eps) {
  em_op_check("batch_norm", 5, (em_tensor *const[]){x, weight, bias, running_mean, running_var});
  OP_BEGIN("batch_norm", 3, x, weight, bias);
  EM_ASSERT(x->ndim >= 2);
  int64_t N = x->shape[0], C = x->shape[1], S = 1;
  for (int d = 2; d < x->ndim; d++) S *= x->shape[d];
  em_tensor *ts[4] = {weight, bias, running_mean, running_var};
  for (int j = 0; j < 4; j++)
    if (ts[j]) EM_ASSERT(ts[j]->ndim == 1 && ts[j]->shape[0] == C && EM_IS_FLOAT(ts[j]));
  if (weight) EM_ASSERT(weight->dtype == x->dtype);
  if (bias) EM_ASSERT(bias->dtype == x->dtype);
  if (training) EM_ASSERT(N * S > 1 && "batch norm needs more than one value per channel");
  else EM_ASSERT(running_mean && running_var);
  em_tensor *xc = em_contiguous_nograd(x);
  em_tensor *wc = weight ? em_contiguous_nograd(weight) : NULL;
  em_tensor *bc = bias ? em_contiguous_nograd(bias) : NULL;
  em_tensor *ins[3] = {x, weight, bias};
  bool grad = em_needs_grad(3, ins);
  em_tensor *y = op_empty_like(xc);
  const em_kernels *k = op_k(x);
  bool eval_kernel = !training && k->batch_norm_backward_eval;
  /* The statistics backward reads; eval without grad (inference) needs none. */
  em_tensor *s0 = NULL, *s1 = NULL;
  if (training) {
    s0 = em_empty_on(x->device, stat_dtype(x), 1, &C);
    s1 = em_empty_on(x->device, stat_dtype(x), 1, &C);
  } else if (grad && eval_kernel) {
    s0 = op_empty_like(running_mean);
    s1 = op_empty_like(running_var);
  } else if (grad) {
    s0 = em_empty_on(x->device, EM_DTYPE_F32, 1, &C);
    s1 = em_empty_on(x->device, EM_DTYPE_F32, 1, &C);
  }
  bool live = op_live(xc, wc, bc, y, s0, s1, running_mean, running_var) &&
              OP_HAS(k, batch_norm_forward, "batch_norm", x) &&
              (!grad || !training || OP_HAS(k, batch_norm_backward, "batch_norm", x));
  if (live && training) {
    EM_KCALL(k, batch_norm_forward, true, y, s0, s1, xc, wc, bc, running_mean, running_var,
             momentum, eps);
  } else if (live) {
    EM_KCALL(k, batch_norm_forward, false, y, NULL, NULL, xc, wc, bc, running_mean, running_var,
             momentum, eps);
    if (grad && eval_kernel) { /* the running stats as forward used them */
      EM_KCALL(k, copy, s0, running_mean);
      EM_KCALL(k, copy, s1, running_var);
    } else if (grad) {
      EM_KCALL(k, copy, s0, running_mean);
      em_tensor *t = em_empty_on(x->device, EM_DTYPE_F32, 1, &C);
      if ((live = op_live(t))) {
        EM_KCALL(k, unary, EM_KU_ADDS, t, running_var, eps, 0);
        EM_KCALL(k, unary, EM_KU_POWS, s1, t, -0.5, 0);
      }
    }
  }
  if (live && grad) {
    em_node *nd = em_record("batch_norm", batch_norm_backward, y, 3, ins);
    nd->saved[0] = xc;
    nd->saved[1] = wc;
    nd->saved[2] = s0;
    nd->saved[3] = s1;
    nd->i[0] = training;
    nd->i[1] = eval_kernel;
    nd->f[0] = eps;
  }
  return OP_END(y);
}

/* ---- layer norm ------------------------------------------------------------------------ */

/* in: x, w, b; saved: x, w (contiguous), mean, rstd (R); i[0], i[1]: R, D. */
static void layer_norm_backward(em_node *n) {
  em_tensor *x = n->saved[0], *w = n->saved[1], *mean = n->saved[2], *rstd = n->saved[3];
  const char *prev = op_backward_begin(n);
  em_tensor *g = em_contiguous_nograd(n->out->grad);
  em_grad_buffer gx, gw, gb;
  em_tensor *bx = em_grad_buffer_begin(n->in[0], &gx);
  em_tensor *bw = em_grad_buffer_begin(n->in[1], &gw);
  em_tensor *bb = em_grad_buffer_begin(n->in[2], &gb);
  if ((bx || bw || bb) && op_live(g, x, w, mean, rstd, bx, bw, bb)) {
    EM_KCALL(op_k(g), layer_norm_backward, bx, bw, bb, g, x, w, mean, rstd, n->i[0], n->i[1]);
    em_grad_buffer_end(&gx);
    em_grad_buffer_end(&gw);
    em_grad_buffer_end(&gb);
  }
  em_device_set_op(prev);
}

em_tensor *em_layer_norm(em_tensor *x, int nd, em_tensor *weight, em_tensor *bias, double eps) {
  OP_BEGIN("layer_norm", 3, x, weight, bias);
  EM_ASSERT(nd >= 1 && nd <= x->ndim);
  int64_t R = 1, D = 1;
  for (int d = 0; d < x->ndim - nd; d++) R *= x->shape[d];
  for (int d = x->ndim - nd; d < x->ndim; d++) D *= x->shape[d];
  EM_ASSERT(D > 0);
  for (int j = 0; j < 2; j++) {
    em_tensor *t = j == 0 ? weight : bias;
    if (!t) continue;
    EM_ASSERT(t->dtype == x->dtype && t->ndim == nd);
    for (int d = 0; d < nd; d++) EM_ASSERT(t->shape[d] == x->shape[x->ndim - nd + d]);
  }
  em_tensor *xc = em_contiguous_nograd(x);
  em_tensor *wc = weight ? em_contiguous_nograd(weight) : NULL;
  em_tensor *bc = bias ? em_contiguous_nograd(bias) : NULL;
  em_tensor *y = op_empty_like(xc);
  em_tensor *mean = em_empty_on(x->device, stat_dtype(x), 1, &R);
  em_tensor *rstd = em_empty_on(x->device, stat_dtype(x), 1, &R);
  const em_kernels *k = op_k(x);
  em_tensor *ins[3] = {x, weight, bias};
  bool grad = em_needs_grad(3, ins);
  bool live = op_live(xc, wc, bc, y, mean, rstd) &&
              OP_HAS(k, layer_norm_forward, "layer_norm", x) &&
              (!grad || OP_HAS(k, layer_norm_backward, "layer_norm", x));
  if (live && R > 0) EM_KCALL(k, layer_norm_forward, y, mean, rstd, xc, wc, bc, R, D, eps);
  if (live && grad) {
    em_node *n = em_record("layer_norm", layer_norm_backward, y, 3, ins);
    n->saved[0] = xc;
    n->saved[1] = wc;
    n->saved[2] = mean;
    n->saved[3] = rstd;
    n->i[0] = R;
    n->i[1] = D;
  }
  return OP_END(y);
}
