/* linear.c: em_linear (x @ w^T + b) and em_linear_relu (the same, then
 * max(., 0), as a Linear layer followed by a ReLU), with their backward,
 * one front-end for every device (op-frontend.h), on the backend's gemm
 * kernels (the CPU's in cpu-linalg.c).
 *
 * Forward is the gemm_bias kernel (the CPU's fuses the bias, and the
 * ReLU, into its GEMM) or, on a backend without it, the bias copied into
 * every row and gemm with beta 1. Backward writes straight into gradient
 * buffers (beta 0 when the buffer is fresh, 1 when accumulating): two
 * GEMMs and the bias's column sums (the bias_backward kernel, or sum_to
 * without it), no temporaries; em_linear_relu's bias_backward masks the
 * incoming gradient first, in the same pass as the column sums. Under
 * autocast (em_autocast_mode) the GEMMs get the amp mode, forward and
 * backward. em_linear_relu is fused only where the backend has gemm_bias
 * and bias_backward, outside autocast and anomaly mode; elsewhere it is
 * em_relu(em_linear(...)). Each gemm call is one profiler span ("gemm").
 * The tape node: in = x, w, b; saved[0], saved[1] = x and w as the kernel
 * read them; i[0] = amp. */
#include "op-frontend.h"
#include "ops-private.h"

#include "em-amp.h"

/* The gradients of y = x w^T + b given gy = dL/dy (N, K), contiguous:
 * into x's and w's gradient buffers by two GEMMs; b's column sums are the
 * caller's (gb_done), or here when it passes false. */
static void linear_grads(em_node *n, em_tensor *gy, bool gb_done) {
  em_tensor *b = n->in[2];
  int amp = (int)n->i[0];
  int64_t N = gy->shape[0], K = gy->shape[1], D = n->saved[1]->shape[1];
  em_dtype dt = gy->dtype;
  em_gemm_operand xo = em_gemm_operand_ready(n->saved[0], 0, NULL);
  em_gemm_operand wo = em_gemm_operand_ready(n->saved[1], 0, NULL);
  const em_kernels *k = op_k(gy);
  const void *gp = em_tensor_ptr(gy);
  bool fresh;
  em_tensor *gx = em_grad_acquire(n->in[0], &fresh);
  if (gx && op_live(gx, gy, wo.t) && N * D > 0) { /* dx (N, D) = gy (N, K) @ w (K, D) */
    int tok = em_gemm_span_begin(amp, N, D, K, 1);
    EM_KCALL(k, gemm, amp, dt, false, wo.trans, N, D, K, 1.f, gp, K, 0, wo.ptr, wo.ld, 0,
             fresh ? 0.f : 1.f, em_tensor_ptr(gx), D, 0, 1);
    em_gemm_span_end(tok);
  }
  em_tensor *gw = em_grad_acquire(n->in[1], &fresh);
  if (gw && op_live(gw, gy, xo.t) && K * D > 0) { /* dw (K, D) = gy^T (K, N) @ x (N, D) */
    int tok = em_gemm_span_begin(amp, K, D, N, 1);
    EM_KCALL(k, gemm, amp, dt, true, xo.trans, K, D, N, 1.f, gp, K, 0, xo.ptr, xo.ld, 0,
             fresh ? 0.f : 1.f, em_tensor_ptr(gw), D, 0, 1);
    em_gemm_span_end(tok);
  }
  em_tensor *gb = b && !gb_done ? em_grad_acquire(b, &fresh) : NULL;
  if (gb && op_live(gb, gy) && K > 0) { /* db (K) = column sums of gy */
    if (k->bias_backward) {
      EM_KCALL(k, bias_backward, !fresh, gb, NULL, gy, NULL);
    } else {
      int64_t row[2] = {1, K};
      EM_KCALL(k, sum_to, !fresh, em_view_as(gb, 2, row), gy);
    }
  }
}

static void linear_backward(em_node *n) {
  const char *prev = op_backward_begin(n);
  linear_grads(n, em_contiguous_nograd(n->out->grad), false);
  em_device_set_op(prev);
}

/* The ReLU's mask and b's gradient in one pass (bias_backward), then x's
 * and w's gradients from the masked gy. */
static void linear_relu_backward(em_node *n) {
  const char *prev = op_backward_begin(n);
  em_tensor *y = n->out, *b = n->in[2];
  em_tensor *gy = em_contiguous_nograd(n->out->grad); /* (N, K) */
  em_tensor *gm = op_empty_like(gy);                  /* (N, K): gy masked */
  bool fresh = true;
  em_tensor *gb = b ? em_grad_acquire(b, &fresh) : NULL;
  if (op_live(gy, gm, y, gb)) {
    EM_KCALL(op_k(gy), bias_backward, !fresh, gb, gm, gy, y);
    linear_grads(n, gm, true);
  }
  em_device_set_op(prev);
}

/* y = x w^T + b, then max(y, 0) when relu (only where the backend has
 * gemm_bias and bias_backward); the autograd node is recorded as `name`. */
static em_tensor *linear_apply(const char *name, em_tensor *x, em_tensor *w, em_tensor *b,
                               bool relu) {
  EM_ASSERT(x->ndim == 2 && w->ndim == 2 && x->shape[1] == w->shape[1]);
  EM_ASSERT(EM_IS_FLOAT(x) && x->dtype == w->dtype);
  if (b) EM_ASSERT(b->ndim == 1 && b->shape[0] == w->shape[0] && b->dtype == x->dtype);
  OP_BEGIN(name, 3, x, w, b);
  int64_t N = x->shape[0], D = x->shape[1], K = w->shape[0];
  int64_t shape[2] = {N, K};
  em_tensor *y = em_empty_on(x->device, x->dtype, 2, shape); /* (N, K) */
  int amp = relu || x->dtype != EM_DTYPE_F32 ? EM_AMP_OFF : (int)em_autocast_mode();
  const em_kernels *k = op_k(x);
  if (OP_HAS(k, gemm, name, x)) {
    em_gemm_operand xo = em_gemm_operand_ready(x, 0, NULL), wo = em_gemm_operand_ready(w, 0, NULL);
    em_tensor *bc = b && k->gemm_bias ? em_contiguous_nograd(b) : b; /* (K) */
    if (op_live(xo.t, wo.t, bc, y)) {
      if (N * K > 0) {
        int tok = em_gemm_span_begin(amp, N, K, D, 1);
        if (k->gemm_bias) /* y (N, K) = x (N, D) @ w^T (D, K) + b, ReLU'd when relu */
          EM_KCALL(k, gemm_bias, amp, x->dtype, xo.trans, !wo.trans, N, K, D, xo.ptr, xo.ld, wo.ptr,
                   wo.ld, bc ? em_tensor_ptr(bc) : NULL, relu, em_tensor_ptr(y), K);
        else if (b) { /* b broadcast over the rows, then y += x @ w^T */
          EM_KCALL(k, copy, y, b);
          if (D > 0)
            EM_KCALL(k, gemm, amp, x->dtype, xo.trans, !wo.trans, N, K, D, 1.f, xo.ptr, xo.ld, 0,
                     wo.ptr, wo.ld, 0, 1.f, em_tensor_ptr(y), K, 0, 1);
        } else if (D > 0) {
          EM_KCALL(k, gemm, amp, x->dtype, xo.trans, !wo.trans, N, K, D, 1.f, xo.ptr, xo.ld, 0,
                   wo.ptr, wo.ld, 0, 0.f, em_tensor_ptr(y), K, 0, 1);
        } else {
          EM_KCALL(k, fill, y, 0.0);
        }
        em_gemm_span_end(tok);
      }
      em_tensor *ins[3] = {x, w, b};
      if (em_needs_grad(3, ins)) {
        em_node *nd = em_record(name, relu ? linear_relu_backward : linear_backward, y, 3, ins);
        nd->saved[0] = xo.t;
        nd->saved[1] = wo.t;
        nd->i[0] = amp;
      }
    }
  }
  return OP_END(y);
}

em_tensor *em_linear(em_tensor *x, em_tensor *w, em_tensor *b) {
  return linear_apply("linear", x, w, b, false);
}

em_tensor *em_linear_relu(em_tensor *x, em_tensor *w, em_tensor *b) {
  /* the two ops where the backend lacks the fused kernels, under autocast
   * (the bf16 GEMM has no ReLU), and in anomaly mode, which checks every
   * op's output: the Linear's own must be seen (the ReLU would turn a
   * -inf there into 0) */
  const em_kernels *k = op_k(x);
  if (!k->gemm_bias || !k->bias_backward || em_anomaly_enabled() ||
      (em_autocast_kernel() != EM_BF16_KERNEL_NONE && x->dtype == EM_DTYPE_F32))
    return em_relu(em_linear(x, w, b));
  return linear_apply("linear_relu", x, w, b, true);
}
