/* matmul.c: em_matmul (a @ b, 2-D and batched, the leading dims
 * broadcast) and its backward pass. Under bf16 autocast (em-amp.h) the
 * products, forward and backward, use the bf16 GEMM. */
#include "ops-private.h"

#include "em-amp.h"

/* Element offset of batch element `bi` (of the broadcast batch shape) in t. */
static int64_t batch_offset(const em_tensor *t, int nb, const int64_t *bshape, int64_t bi) {
  int64_t off = 0;
  int tb = t->ndim - 2;
  for (int d = nb - 1; d >= 0; d--) {
    int64_t idx = bi % bshape[d];
    bi /= bshape[d];
    int td = d - (nb - tb);
    if (td >= 0 && t->shape[td] != 1) off += idx * t->stride[td];
  }
  return off;
}

static em_blas_operand slice_operand(const em_tensor *t, int nb, const int64_t *bshape,
                                     int64_t bi) {
  em_blas_operand op;
  EM_ASSERT(em_blas_operand_of(t, t->ndim - 2, t->ndim - 1, batch_offset(t, nb, bshape, bi), &op));
  return op;
}

static void matmul_backward_with(em_node *n, em_bf16_kernel kern) {
  em_tensor *a = n->saved[0], *b = n->saved[1]; /* BLAS-ready operands */
  em_tensor *gy = n->out->grad;                 /* (..., L, K) contiguous */
  int nb = gy->ndim - 2;
  int64_t L = gy->shape[nb], K = gy->shape[nb + 1], D = a->shape[a->ndim - 1];
  int64_t nbatch = 1;
  for (int d = 0; d < nb; d++) nbatch *= gy->shape[d];
  em_dtype dt = gy->dtype;
  size_t es = em_dtype_size(dt);
  /* Each gradient is summed in a contiguous buffer of the operand's shape
   * (batch-broadcast operands receive several slices), then flows to the
   * original input, which may be a view. */
  for (int which = 0; which < 2; which++) {
    em_tensor *orig = n->in[which];
    if (!em_tensor_requires_grad(orig)) continue;
    em_tensor *src = which == 0 ? a : b;
    em_tensor *g = em_zeros(dt, src->ndim, src->shape);
    for (int64_t bi = 0; bi < nbatch; bi++) {
      const char *gyp = (const char *)em_tensor_ptr(gy) + (size_t)(bi * L * K) * es;
      char *gp = (char *)g->data + (size_t)batch_offset(g, nb, gy->shape, bi) * es;
      if (which == 0) { /* da (L, D) += gy (L, K) @ b^T (K, D) */
        em_blas_operand bo = slice_operand(b, nb, gy->shape, bi);
        em_gemm_amp(kern, dt, false, !bo.trans, L, D, K, gyp, K, bo.ptr, bo.ld, 1.0, gp, D);
      } else { /* db (D, K) += a^T (D, L) @ gy (L, K) */
        em_blas_operand ao = slice_operand(a, nb, gy->shape, bi);
        em_gemm_amp(kern, dt, !ao.trans, false, D, K, L, ao.ptr, ao.ld, gyp, K, 1.0, gp, K);
      }
    }
    em_grad_accumulate(orig, g);
  }
}

static void matmul_backward(em_node *n) { matmul_backward_with(n, EM_BF16_KERNEL_NONE); }
static void matmul_backward_bf16(em_node *n) { matmul_backward_with(n, em_bf16_kernel_best()); }

/* t itself when its last two dims can go to BLAS as they are, else a
 * contiguous copy. */
static em_tensor *inner_blas_ready(em_tensor *t) {
  em_blas_operand op;
  if (em_blas_operand_of(t, t->ndim - 2, t->ndim - 1, 0, &op)) return t;
  bool prev = em_no_grad_begin();
  em_tensor *c = em_contiguous(t);
  em_grad_mode_restore(prev);
  return c;
}

em_tensor *em_matmul(em_tensor *a, em_tensor *b) {
  if (EM_ON_DEVICE(a, b)) return em_dev_matmul(a, b);
  EM_ASSERT(a->ndim >= 2 && b->ndim >= 2 && a->dtype == b->dtype && EM_IS_FLOAT(a));
  int64_t L = a->shape[a->ndim - 2], D = a->shape[a->ndim - 1], K = b->shape[b->ndim - 1];
  EM_ASSERT(b->shape[b->ndim - 2] == D);
  EM_OP_BEGIN("matmul", 2, a, b);
  int nb = (a->ndim > b->ndim ? a->ndim : b->ndim) - 2;
  int64_t shape[EM_MAX_DIMS];
  for (int d = 0; d < nb; d++) {
    int da = d - (nb - (a->ndim - 2)), db = d - (nb - (b->ndim - 2));
    int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
    EM_ASSERT(sa == sb || sa == 1 || sb == 1);
    shape[d] = sa > sb ? sa : sb;
  }
  shape[nb] = L;
  shape[nb + 1] = K;
  em_tensor *y = em_empty(a->dtype, nb + 2, shape);
  size_t es = em_dtype_size(a->dtype);
  em_tensor *ac = inner_blas_ready(a), *bc = inner_blas_ready(b);
  int64_t nbatch = 1;
  for (int d = 0; d < nb; d++) nbatch *= shape[d];
  em_bf16_kernel kern = em_autocast_kernel();
  for (int64_t bi = 0; bi < nbatch; bi++) {
    em_blas_operand ao = slice_operand(ac, nb, shape, bi), bo = slice_operand(bc, nb, shape, bi);
    em_gemm_amp(kern, a->dtype, ao.trans, bo.trans, L, K, D, ao.ptr, ao.ld, bo.ptr, bo.ld, 0.0,
                (char *)em_tensor_ptr(y) + (size_t)(bi * L * K) * es, K);
  }
  em_tensor *ins[2] = {a, b};
  if (em_needs_grad(2, ins)) {
    bool amp = kern != EM_BF16_KERNEL_NONE && a->dtype == EM_DTYPE_F32;
    em_node *nd = em_record("matmul", amp ? matmul_backward_bf16 : matmul_backward, y, 2, ins);
    nd->saved[0] = ac;
    nd->saved[1] = bc;
  }
  return EM_OP_END(y);
}
