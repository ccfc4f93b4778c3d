/* matmul.c: em_matmul (a @ b, 2-D and batched, the leading dims
 * broadcast) and its backward, one front-end for every device
 * (op-frontend.h), on the backend's batched gemm kernel (the CPU's in
 * cpu-linalg.c). Under autocast (em_autocast_mode) the kernel gets the
 * amp mode, forward and backward: bf16 products on the CPU (its bf16
 * GEMM) and on CUDA, bf16 or f16 on the devices.
 *
 * A GEMM operand is its last two dims, row-major with a leading
 * dimension, transposed or not (em_blas_operand_of, ../core/shape.h), and
 * one stride between batch elements: an operand whose batch dims do not
 * collapse to one stride (or whose inner dims have no unit stride) is
 * first expanded to the output's batch shape and copied contiguous.
 * Backward computes the full-batch gradient of each operand and sums it
 * down to the operand's shape (em_reduce_to_shape) when the operand was
 * broadcast; otherwise the GEMM writes into the gradient buffer directly
 * (beta 0 when fresh, 1 when accumulating). Each gemm call is one
 * profiler span ("gemm") carrying its FLOPs. The tape node: in = a, b;
 * saved[0], saved[1] = the operands as the kernel read them; i[0] = amp. */
#include "op-frontend.h"
#include "ops-private.h"

#include "em-amp.h"

/* ---- GEMM operands (shared with linear.c) ------------------------------------- */

int em_gemm_span_begin(int amp, int64_t m, int64_t n, int64_t k, int64_t batch) {
  if (!em_profile_hooks_on()) return -1;
  const char *name = amp == EM_AMP_BF16 ? "gemm_bf16" : amp == EM_AMP_F16 ? "gemm_f16" : "gemm";
  const int tok = em_op_begin_(name, 0, NULL);
  if (tok >= 0) {
    em_op_note_shape_(tok, 2, (int64_t[]){m, k});
    em_op_note_shape_(tok, 2, (int64_t[]){k, n});
    em_op_add_flops_(2.0 * (double)batch * (double)m * (double)n * (double)k);
  }
  return tok;
}

void em_gemm_span_end(int tok) {
  if (tok >= 0) em_op_end_(tok, NULL);
}

/* t's stride along batch dim d of the output's nb, 0 where t is
 * broadcast (a size-1 or missing dim). */
static int64_t batch_stride(const em_tensor *t, int nb, int d) {
  int td = d - (nb - (t->ndim - 2));
  return td >= 0 && t->shape[td] != 1 ? t->stride[td] : 0;
}

/* t (..., R, C) seen over the output's batch shape bshape (nb dims):
 * false when its batch dims do not collapse to one stride or its inner
 * dims are not BLAS-shaped. */
static bool operand_of(em_tensor *t, int nb, const int64_t *bshape, em_gemm_operand *op) {
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
  *op = (em_gemm_operand){t, b.ptr, b.trans, b.ld, step < 0 ? 0 : step};
  return true;
}

em_gemm_operand em_gemm_operand_ready(em_tensor *t, int nb, const int64_t *bshape) {
  em_gemm_operand op;
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
  em_tensor *c = em_empty_on(t->device, t->dtype, nb + 2, shape);
  if (op_live(t, c) && em_tensor_numel(c) > 0) EM_KCALL(op_k(t), copy, c, e);
  if (!c->data) return (em_gemm_operand){c, NULL, false, 1, 0}; /* out of memory */
  bool ok = operand_of(c, nb, bshape, &op);
  EM_ASSERT(ok);
  return op;
}

/* ---- matmul ---------------------------------------------------------------------- */

static void matmul_backward(em_node *n) {
  em_tensor *a = n->saved[0], *b = n->saved[1], *gy = n->out->grad; /* gy (..., L, K) */
  const char *prev = op_backward_begin(n);
  int amp = (int)n->i[0];
  int nb = gy->ndim - 2;
  int64_t L = gy->shape[nb], K = gy->shape[nb + 1], D = a->shape[a->ndim - 1];
  int64_t nbatch = 1;
  for (int d = 0; d < nb; d++) nbatch *= gy->shape[d];
  em_dtype dt = gy->dtype;
  em_gemm_operand ao = em_gemm_operand_ready(a, nb, gy->shape);
  em_gemm_operand bo = em_gemm_operand_ready(b, nb, gy->shape);
  em_tensor *gyc = em_contiguous_nograd(gy);
  const void *gp = em_tensor_ptr(gyc);
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
    em_tensor *g = direct ? em_grad_acquire(orig, &fresh) : em_empty_on(gy->device, dt, nb + 2, shape);
    if (!g || !op_live(g, gyc, ao.t, bo.t) || em_tensor_numel(g) == 0) continue;
    float beta = fresh ? 0.f : 1.f;
    const em_kernels *k = op_k(gy);
    if (which == 0) { /* da (L, D) = gy (L, K) @ b^T (K, D) */
      int tok = em_gemm_span_begin(amp, L, D, K, nbatch);
      EM_KCALL(k, gemm, amp, dt, false, !bo.trans, L, D, K, 1.f, gp, K, L * K, bo.ptr, bo.ld,
                       bo.bstride, beta, em_tensor_ptr(g), D, L * D, nbatch);
      em_gemm_span_end(tok);
    } else { /* db (D, K) = a^T (D, L) @ gy (L, K) */
      int tok = em_gemm_span_begin(amp, D, K, L, nbatch);
      EM_KCALL(k, gemm, amp, dt, !ao.trans, false, D, K, L, 1.f, ao.ptr, ao.ld, ao.bstride, gp, K,
                       L * K, beta, em_tensor_ptr(g), K, D * K, nbatch);
      em_gemm_span_end(tok);
    }
    if (!direct) em_grad_add(orig, em_reduce_to_shape(g, orig->ndim, orig->shape));
  }
  em_device_set_op(prev);
}

em_tensor *em_matmul(em_tensor *a, em_tensor *b) {
  EM_ASSERT(a->ndim >= 2 && b->ndim >= 2 && a->dtype == b->dtype && EM_IS_FLOAT(a));
  OP_BEGIN("matmul", 2, a, b);
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
  em_tensor *y = em_empty_on(a->device, a->dtype, nb + 2, shape); /* (..., L, K) */
  int amp = a->dtype == EM_DTYPE_F32 ? (int)em_autocast_mode() : EM_AMP_OFF;
  const em_kernels *k = op_k(a);
  if (OP_HAS(k, gemm, "matmul", a)) {
    em_gemm_operand ao = em_gemm_operand_ready(a, nb, shape), bo = em_gemm_operand_ready(b, nb, shape);
    if (op_live(ao.t, bo.t, y)) {
      if (em_tensor_numel(y) > 0) {
        if (D == 0) {
          EM_KCALL(k, fill, y, 0.0);
        } else {
          int tok = em_gemm_span_begin(amp, L, K, D, nbatch);
          EM_KCALL(k, gemm, amp, a->dtype, ao.trans, bo.trans, L, K, D, 1.f, ao.ptr, ao.ld,
                           ao.bstride, bo.ptr, bo.ld, bo.bstride, 0.f, em_tensor_ptr(y), K, L * K,
                           nbatch);
          em_gemm_span_end(tok);
        }
      }
      em_tensor *ins[2] = {a, b};
      if (em_needs_grad(2, ins)) {
        em_node *nd = em_record("matmul", matmul_backward, y, 2, ins);
        nd->saved[0] = ao.t;
        nd->saved[1] = bo.t;
        nd->i[0] = amp;
      }
    }
  }
  return OP_END(y);
}
