/* dev-linalg.c: em_matmul (2-D and batched, batch dims broadcast) and
 * em_linear (x @ w^T + b) on devices, with backward, on the batched GEMM
 * kernel. Under autocast (em_autocast_mode) the kernels get the amp mode
 * for forward and backward, as the CPU's bf16 autocast does.
 *
 * A GEMM operand is its last two dims, row-major with a leading
 * dimension, transposed or not (em_blas_operand_of), and one stride
 * between batch elements: an operand whose batch dims do not collapse to
 * one stride (or whose inner dims have no unit stride) is first expanded
 * to the output's batch shape and copied contiguous. Backward computes
 * the full-batch gradient of each operand and sums it down to the
 * operand's shape (em_reduce_to_shape) when the operand was broadcast;
 * otherwise the GEMM writes into the gradient buffer directly (beta 0
 * when fresh, 1 when accumulating). */
#include "dev-private.h"

#include "../ops/ops-private.h"
#include "em-amp.h"

/* ---- GEMM operands ---------------------------------------------------------------- */

typedef struct {
  em_tensor *t;          /* what the kernel reads */
  const float *ptr;      /* first element */
  bool trans;
  int64_t ld, bstride;   /* leading dimension; elements between batch elements */
} operand;

/* t's stride along batch dim d of the output's nb, 0 where t is
 * broadcast (a size-1 or missing dim). */
static int64_t batch_stride(const em_tensor *t, int nb, int d) {
  int td = d - (nb - (t->ndim - 2));
  return td >= 0 && t->shape[td] != 1 ? t->stride[td] : 0;
}

/* t (..., R, C) seen over the output's batch shape bshape (nb dims):
 * false when its batch dims do not collapse to one stride or its inner
 * dims are not BLAS-shaped. */
static bool operand_of(em_tensor *t, int nb, const int64_t *bshape, operand *op) {
  em_blas_operand b;
  if (!em_blas_operand_of(t, t->ndim - 2, t->ndim - 1, 0, &b)) return false;
  /* collapse: every dim of size > 1 must step by stride[last] * inner count */
  int64_t step = -1, inner = 1;
  for (int d = nb - 1; d >= 0; d--) {
    if (bshape[d] == 1) continue;
    int64_t st = batch_stride(t, nb, d);
    if (step < 0) step = st;
    else if (st != step * inner) return false;
    inner *= bshape[d];
  }
  op->t = t;
  op->ptr = b.ptr;
  op->trans = b.trans;
  op->ld = b.ld;
  op->bstride = step < 0 ? 0 : step;
  return true;
}

/* An operand for the kernel: t itself when it fits, else t expanded to
 * the batch shape and copied contiguous. */
static operand ready_operand(em_tensor *t, int nb, const int64_t *bshape) {
  operand op;
  if (operand_of(t, nb, bshape, &op)) return op;
  int64_t shape[EM_MAX_DIMS], stride[EM_MAX_DIMS];
  int tb = t->ndim - 2;
  for (int d = 0; d < nb; d++) {
    shape[d] = bshape[d];
    stride[d] = batch_stride(t, nb, d);
  }
  for (int k = 0; k < 2; k++) {
    shape[nb + k] = t->shape[tb + k];
    stride[nb + k] = t->stride[tb + k];
  }
  em_tensor *e = em_view_raw(t, nb + 2, shape, stride, t->offset);
  em_tensor *c = dev_empty(t, t->dtype, nb + 2, shape);
  if (dev_live(t, c) && em_tensor_numel(c) > 0) EM_KCALL(dev_k(t), copy, c, e);
  if (!c->data) { /* out of memory: a placeholder the caller never runs */
    op = (operand){c, NULL, false, 1, 0};
    return op;
  }
  bool ok = operand_of(c, nb, bshape, &op);
  EM_ASSERT(ok);
  return op;
}

/* ---- matmul ---------------------------------------------------------------------------- */

/* saved[0], saved[1]: the operands as the kernel read them; i[0]: amp. */
static void matmul_backward(em_node *n) {
  em_tensor *a = n->saved[0], *b = n->saved[1], *gy = n->out->grad; /* gy (..., L, K) */
  const char *prev = dev_backward_begin(n);
  int amp = (int)n->i[0];
  int nb = gy->ndim - 2;
  int64_t L = gy->shape[nb], K = gy->shape[nb + 1], D = a->shape[a->ndim - 1];
  int64_t nbatch = 1;
  for (int d = 0; d < nb; d++) nbatch *= gy->shape[d];
  operand ao = ready_operand(a, nb, gy->shape), bo = ready_operand(b, nb, gy->shape);
  em_tensor *gyc = em_contiguous_nograd(gy);
  for (int which = 0; which < 2; which++) {
    em_tensor *orig = n->in[which];
    if (!em_tensor_requires_grad(orig)) continue;
    int64_t shape[EM_MAX_DIMS];
    for (int d = 0; d < nb; d++) shape[d] = gy->shape[d];
    shape[nb] = which == 0 ? L : D;
    shape[nb + 1] = which == 0 ? D : K;
    /* straight into the gradient when orig has the full-batch shape */
    bool direct = orig->ndim == nb + 2;
    for (int d = 0; direct && d < nb + 2; d++) direct = orig->shape[d] == shape[d];
    bool fresh = true;
    em_tensor *g = direct ? em_grad_acquire(orig, &fresh) : dev_empty(gy, EM_DTYPE_F32, nb + 2, shape);
    if (!g || !dev_live(g, gyc, ao.t, bo.t) || em_tensor_numel(g) == 0) continue;
    float beta = fresh ? 0.f : 1.f;
    const em_kernels *k = dev_k(gy);
    if (which == 0) /* da (L, D) = gy (L, K) @ b^T (K, D) */
      EM_KCALL(k, gemm, amp, false, !bo.trans, L, D, K, 1.f, em_f32(gyc), K, L * K, bo.ptr, bo.ld,
              bo.bstride, beta, em_f32(g), D, L * D, nbatch);
    else /* db (D, K) = a^T (D, L) @ gy (L, K) */
      EM_KCALL(k, gemm, amp, !ao.trans, false, D, K, L, 1.f, ao.ptr, ao.ld, ao.bstride, em_f32(gyc), K,
              L * K, beta, em_f32(g), K, D * K, nbatch);
    if (!direct) em_grad_add(orig, em_reduce_to_shape(g, orig->ndim, orig->shape));
  }
  em_device_set_op(prev);
}

em_tensor *em_dev_matmul(em_tensor *a, em_tensor *b) {
  DEV_OP_BEGIN("matmul", 2, a, b);
  EM_ASSERT(a->ndim >= 2 && b->ndim >= 2 && a->dtype == EM_DTYPE_F32 && b->dtype == EM_DTYPE_F32);
  int64_t L = a->shape[a->ndim - 2], D = a->shape[a->ndim - 1], K = b->shape[b->ndim - 1];
  EM_ASSERT(b->shape[b->ndim - 2] == D);
  int nb = (a->ndim > b->ndim ? a->ndim : b->ndim) - 2;
  int64_t shape[EM_MAX_DIMS], nbatch = 1;
  for (int d = 0; d < nb; d++) {
    int da = d - (nb - (a->ndim - 2)), db = d - (nb - (b->ndim - 2));
    int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
    EM_ASSERT(sa == sb || sa == 1 || sb == 1);
    shape[d] = sa > sb ? sa : sb;
    nbatch *= shape[d];
  }
  shape[nb] = L;
  shape[nb + 1] = K;
  em_tensor *y = dev_empty(a, EM_DTYPE_F32, nb + 2, shape);
  int amp = (int)em_autocast_mode();
  em_op_add_flops(2.0 * (double)nbatch * (double)L * (double)K * (double)D);
  operand ao = ready_operand(a, nb, shape), bo = ready_operand(b, nb, shape);
  if (dev_live(ao.t, bo.t, y)) {
    if (em_tensor_numel(y) > 0) {
      if (D == 0) EM_KCALL(dev_k(a), fill, y, 0.0);
      else
        EM_KCALL(dev_k(a), gemm, amp, ao.trans, bo.trans, L, K, D, 1.f, ao.ptr, ao.ld, ao.bstride, bo.ptr,
                       bo.ld, bo.bstride, 0.f, em_f32(y), K, L * K, nbatch);
    }
    em_tensor *ins[2] = {a, b};
    if (em_needs_grad(2, ins)) {
      em_node *nd = em_record("matmul", matmul_backward, y, 2, ins);
      nd->saved[0] = ao.t;
      nd->saved[1] = bo.t;
      nd->i[0] = amp;
    }
  }
  return DEV_OP_END(y);
}

/* ---- linear -------------------------------------------------------------------------------- */

/* in: x, w, b; saved[0], saved[1]: x and w as the kernel read them; i[0]: amp. */
static void linear_backward(em_node *n) {
  em_tensor *xs = n->saved[0], *ws = n->saved[1], *b = n->in[2], *gy = n->out->grad;
  const char *prev = dev_backward_begin(n);
  int amp = (int)n->i[0];
  int64_t N = gy->shape[0], K = gy->shape[1], D = ws->shape[1];
  em_tensor *gyc = em_contiguous_nograd(gy); /* (N, K) */
  operand xo = ready_operand(xs, 0, NULL), wo = ready_operand(ws, 0, NULL);
  const em_kernels *k = dev_k(gy);
  bool fresh;
  em_tensor *gx = em_grad_acquire(n->in[0], &fresh);
  if (gx && dev_live(gx, gyc, wo.t) && N * D > 0) /* dx (N, D) = gy (N, K) @ w (K, D) */
    EM_KCALL(k, gemm, amp, false, wo.trans, N, D, K, 1.f, em_f32(gyc), K, 0, wo.ptr, wo.ld, 0,
            fresh ? 0.f : 1.f, em_f32(gx), D, 0, 1);
  em_tensor *gw = em_grad_acquire(n->in[1], &fresh);
  if (gw && dev_live(gw, gyc, xo.t) && K * D > 0) /* dw (K, D) = gy^T (K, N) @ x (N, D) */
    EM_KCALL(k, gemm, amp, true, xo.trans, K, D, N, 1.f, em_f32(gyc), K, 0, xo.ptr, xo.ld, 0,
            fresh ? 0.f : 1.f, em_f32(gw), D, 0, 1);
  em_tensor *gb = b ? em_grad_acquire(b, &fresh) : NULL;
  if (gb && dev_live(gb, gyc) && K > 0) { /* db (K) = column sums of gy */
    int64_t row[2] = {1, K};
    EM_KCALL(k, sum_to, !fresh, em_view_as(gb, 2, row), gyc);
  }
  em_device_set_op(prev);
}

em_tensor *em_dev_linear(em_tensor *x, em_tensor *w, em_tensor *b) {
  DEV_OP_BEGIN("linear", 3, x, w, b);
  EM_ASSERT(x->ndim == 2 && w->ndim == 2 && x->shape[1] == w->shape[1]);
  EM_ASSERT(x->dtype == EM_DTYPE_F32 && w->dtype == EM_DTYPE_F32);
  if (b) EM_ASSERT(b->ndim == 1 && b->shape[0] == w->shape[0] && b->dtype == EM_DTYPE_F32);
  int64_t N = x->shape[0], D = x->shape[1], K = w->shape[0];
  int64_t shape[2] = {N, K};
  em_tensor *y = dev_empty(x, EM_DTYPE_F32, 2, shape); /* (N, K) */
  int amp = (int)em_autocast_mode();
  em_op_add_flops(2.0 * (double)N * (double)K * (double)D);
  operand xo = ready_operand(x, 0, NULL), wo = ready_operand(w, 0, NULL);
  if (dev_live(xo.t, wo.t, b, y)) {
    const em_kernels *k = dev_k(x);
    if (N * K > 0) {
      if (b) EM_KCALL(k, copy, y, b); /* b broadcast over the rows, then y += x @ w^T */
      if (D > 0) /* y (N, K) = x (N, D) @ w^T (D, K) */
        EM_KCALL(k, gemm, amp, xo.trans, !wo.trans, N, K, D, 1.f, xo.ptr, xo.ld, 0, wo.ptr, wo.ld, 0,
                b ? 1.f : 0.f, em_f32(y), K, 0, 1);
      else if (!b)
        EM_KCALL(k, fill, y, 0.0);
    }
    em_tensor *ins[3] = {x, w, b};
    if (em_needs_grad(3, ins)) {
      em_node *nd = em_record("linear", linear_backward, y, 3, ins);
      nd->saved[0] = xo.t;
      nd->saved[1] = wo.t;
      nd->i[0] = amp;
    }
  }
  return DEV_OP_END(y);
}
