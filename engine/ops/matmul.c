/* matmul.c: matrix products on OpenBLAS: em_matmul (2-D and batched) and
 * the fused em_linear (x @ w^T + b), with their backward passes.
 * Backward writes straight into gradient buffers (beta 0 when the buffer
 * is fresh, 1 when accumulating), so a linear layer's backward is two
 * GEMMs and a column sum with no temporaries. Under bf16 autocast
 * (em-amp.h) both ops, and their backward, use the bf16 GEMM. */
#include "ops-private.h"

#include "em-amp.h"
#include "em-pool.h"

#include <cblas.h>
#include <string.h>

static void gemm_run(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                     double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                     double beta, const void *bias, void *c, int64_t ldc);

/* Every row of C (m, n, ldc) = bias (n values of es bytes). */
static void fill_rows(void *c, int64_t m, int64_t n, int64_t ldc, const void *bias, size_t es) {
  for (int64_t i = 0; i < m; i++) memcpy((char *)c + (size_t)(i * ldc) * es, bias, (size_t)n * es);
}

/* The profiler's span of a product: linear's and matmul's self time
 * exclude it, and its FLOPs are counted where they are done. */
static int gemm_span_begin(const char *name, int64_t m, int64_t n, int64_t k) {
  const int tok = em_profile_hooks_on() ? em_op_begin_(name, 0, NULL) : -1;
  if (tok >= 0) {
    em_op_note_shape_(tok, 2, (int64_t[]){m, k});
    em_op_note_shape_(tok, 2, (int64_t[]){k, n});
    em_op_add_flops_(2.0 * (double)m * (double)n * (double)k);
  }
  return tok;
}

void em_gemm(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
             const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
             int64_t ldc) {
  if (m == 0 || n == 0) return;
  const int tok = gemm_span_begin("gemm", m, n, k);
  gemm_run(dt, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, NULL, c, ldc);
  if (tok >= 0) em_op_end_(tok, NULL);
}

void em_gemm_bias(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                  int64_t lda, const void *b, int64_t ldb, const void *bias, void *c,
                  int64_t ldc) {
  if (m == 0 || n == 0) return;
  const int tok = gemm_span_begin("gemm", m, n, k);
  gemm_run(dt, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, bias, c, ldc);
  if (tok >= 0) em_op_end_(tok, NULL);
}

void em_gemm_unprofiled(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                        double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                        double beta, void *c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  gemm_run(dt, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, NULL, c, ldc);
}

/* em_gemm, or the bf16 GEMM (alpha 1, f32) when kern is not NONE. */
static void gemm_amp(em_bf16_kernel kern, em_dtype dt, bool ta, bool tb, int64_t m, int64_t n,
                     int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb,
                     double beta, void *c, int64_t ldc) {
  if (kern == EM_BF16_KERNEL_NONE || dt != EM_DTYPE_F32) {
    em_gemm(dt, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (m == 0 || n == 0) return;
  const int tok = gemm_span_begin("gemm_bf16", m, n, k);
  em_gemm_bf16(kern, ta, tb, m, n, k, a, lda, b, ldb, (float)beta, c, ldc);
  if (tok >= 0) em_op_end_(tok, NULL);
}

/* C = alpha op(A) op(B) + (bias ? bias in every row : beta C). */
static void gemm_run(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                     double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                     double beta, const void *bias, void *c, int64_t ldc) {
  if (dt == EM_DTYPE_F32 && k > 0 &&
      em_gemm_f32_fast(ta, tb, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, bias, c, ldc))
    return;
  if (bias) { /* the bias in every row of C, then C += the product */
    fill_rows(c, m, n, ldc, bias, em_dtype_size(dt));
    beta = 1.0;
  }
  if (k == 0) { /* BLAS may not scale C for k = 0 */
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        if (dt == EM_DTYPE_F32) {
          float *p = (float *)c + i * ldc + j;
          *p = beta == 0 ? 0.f : (float)(beta * *p);
        } else {
          double *p = (double *)c + i * ldc + j;
          *p = beta == 0 ? 0.0 : beta * *p;
        }
      }
    return;
  }
  /* f32 products gemm-fast.c did not take (no AVX-512, too big) and f64: OpenBLAS */
  enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  em_pool_park(); /* the pool's workers leave the cores to OpenBLAS's threads */
  if (dt == EM_DTYPE_F32)
    cblas_sgemm(CblasRowMajor, TA, TB, (blasint)m, (blasint)n, (blasint)k, (float)alpha, a,
                (blasint)lda, b, (blasint)ldb, (float)beta, c, (blasint)ldc);
  else if (dt == EM_DTYPE_F64)
    cblas_dgemm(CblasRowMajor, TA, TB, (blasint)m, (blasint)n, (blasint)k, alpha, a,
                (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
  else
    EM_ASSERT(!"gemm needs f32 or f64");
}

bool em_blas_operand_of(const em_tensor *t, int d0, int d1, int64_t offset_elems,
                        em_blas_operand *out) {
  int64_t rows = t->shape[d0], cols = t->shape[d1];
  int64_t s0 = t->stride[d0], s1 = t->stride[d1];
  const char *base = (const char *)t->data + (t->offset + offset_elems) * (int64_t)em_dtype_size(t->dtype);
  out->ptr = base;
  if ((s1 == 1 || cols == 1) && s0 >= (cols > 1 ? cols : 1)) {
    out->trans = false;
    out->ld = s0 > 0 ? s0 : 1;
    if (rows == 1) out->ld = cols > 1 ? cols : 1;
    return true;
  }
  if ((s0 == 1 || rows == 1) && s1 >= (rows > 1 ? rows : 1)) {
    out->trans = true;
    out->ld = s1 > 0 ? s1 : 1;
    if (cols == 1) out->ld = rows > 1 ? rows : 1;
    return true;
  }
  return false;
}

/* A 2-D-viewable operand: contiguous copy when BLAS cannot take the
 * strides as they are. */
static em_tensor *blas_ready(em_tensor *t, int d0, int d1) {
  em_blas_operand op;
  if (t->ndim == 2 && em_blas_operand_of(t, d0, d1, 0, &op)) return t;
  if (t->ndim != 2 && em_tensor_is_contiguous(t)) return t;
  bool prev = em_no_grad_begin();
  em_tensor *c = em_contiguous(t);
  em_grad_mode_restore(prev);
  return c;
}

/* ---- linear ---------------------------------------------------------------- */

static void linear_backward_with(em_node *n, em_bf16_kernel kern) {
  em_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
  em_tensor *gy = n->out->grad; /* (N, K) contiguous */
  em_tensor *xs = n->saved[0];  /* x as handed to BLAS */
  int64_t N = gy->shape[0], K = gy->shape[1], D = w->shape[1];
  em_dtype dt = gy->dtype;
  bool fresh;
  em_tensor *gx = em_grad_acquire(x, &fresh);
  if (gx) /* dx (N, D) = gy (N, K) @ w (K, D) */
    gemm_amp(kern, dt, false, false, N, D, K, em_tensor_ptr(gy), K, em_tensor_ptr(w),
             w->stride[0], fresh ? 0.0 : 1.0, em_tensor_ptr(gx), D);
  em_tensor *gw = em_grad_acquire(w, &fresh);
  if (gw) { /* dw (K, D) = gy^T (K, N) @ x (N, D) */
    em_blas_operand xo;
    EM_ASSERT(em_blas_operand_of(xs, 0, 1, 0, &xo));
    gemm_amp(kern, dt, true, xo.trans, K, D, N, em_tensor_ptr(gy), K, xo.ptr, xo.ld,
             fresh ? 0.0 : 1.0, em_tensor_ptr(gw), D);
  }
  em_tensor *gb = b ? em_grad_acquire(b, &fresh) : NULL;
  if (gb) { /* db (K) = column sums of gy */
    if (dt == EM_DTYPE_F32) {
      float *d = em_f32(gb);
      const float *g = em_f32(gy);
      if (fresh) memcpy(d, g, sizeof(float) * (size_t)K);
      else for (int64_t k = 0; k < K; k++) d[k] += g[k];
      for (int64_t i = 1; i < N; i++)
        for (int64_t k = 0; k < K; k++) d[k] += g[i * K + k];
    } else {
      double *d = em_f64(gb);
      const double *g = em_f64(gy);
      if (fresh) memcpy(d, g, sizeof(double) * (size_t)K);
      else for (int64_t k = 0; k < K; k++) d[k] += g[k];
      for (int64_t i = 1; i < N; i++)
        for (int64_t k = 0; k < K; k++) d[k] += g[i * K + k];
    }
  }
}

static void linear_backward(em_node *n) { linear_backward_with(n, EM_BF16_KERNEL_NONE); }
static void linear_backward_bf16(em_node *n) { linear_backward_with(n, em_bf16_kernel_best()); }

em_tensor *em_linear(em_tensor *x, em_tensor *w, em_tensor *b) {
  if (EM_ON_DEVICE(x, w, b)) return em_dev_linear(x, w, b);
  EM_ASSERT(x->ndim == 2 && w->ndim == 2 && x->shape[1] == w->shape[1]);
  EM_ASSERT(EM_IS_FLOAT(x) && x->dtype == w->dtype);
  EM_ASSERT(w->stride[1] == 1 || w->shape[1] == 1);
  if (b) EM_ASSERT(b->ndim == 1 && b->shape[0] == w->shape[0] && b->dtype == x->dtype);
  EM_OP_BEGIN("linear", 3, x, w, b);
  int64_t N = x->shape[0], D = x->shape[1], K = w->shape[0];
  x = blas_ready(x, 0, 1);
  em_blas_operand xo;
  EM_ASSERT(em_blas_operand_of(x, 0, 1, 0, &xo));
  int64_t shape[2] = {N, K};
  em_tensor *y = em_empty(x->dtype, 2, shape);
  em_bf16_kernel kern = em_autocast_kernel();
  const void *wp = em_tensor_ptr(w);
  int64_t ldw = w->shape[1] == 1 ? 1 : w->stride[0];
  const void *bp = b ? em_tensor_ptr(blas_ready(b, 0, 0)) : NULL; /* (K) contiguous */
  if (kern == EM_BF16_KERNEL_NONE || x->dtype != EM_DTYPE_F32) {
    em_gemm_bias(x->dtype, xo.trans, true, N, K, D, xo.ptr, xo.ld, wp, ldw, bp,
                 em_tensor_ptr(y), K);
  } else { /* bf16 products: the bias in every row first, then y += x w^T */
    if (bp) fill_rows(em_tensor_ptr(y), N, K, K, bp, sizeof(float));
    gemm_amp(kern, x->dtype, xo.trans, true, N, K, D, xo.ptr, xo.ld, wp, ldw, bp ? 1.0 : 0.0,
             em_tensor_ptr(y), K);
  }
  em_tensor *ins[3] = {x, w, b};
  if (em_needs_grad(3, ins)) {
    bool amp = kern != EM_BF16_KERNEL_NONE && x->dtype == EM_DTYPE_F32;
    em_node *nd = em_record("linear", amp ? linear_backward_bf16 : linear_backward, y, 3, ins);
    nd->saved[0] = x;
  }
  return EM_OP_END(y);
}

/* ---- matmul ------------------------------------------------------------------ */

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
        gemm_amp(kern, dt, false, !bo.trans, L, D, K, gyp, K, bo.ptr, bo.ld, 1.0, gp, D);
      } else { /* db (D, K) += a^T (D, L) @ gy (L, K) */
        em_blas_operand ao = slice_operand(a, nb, gy->shape, bi);
        gemm_amp(kern, dt, !ao.trans, false, D, K, L, ao.ptr, ao.ld, gyp, K, 1.0, gp, K);
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
    gemm_amp(kern, a->dtype, ao.trans, bo.trans, L, K, D, ao.ptr, ao.ld, bo.ptr, bo.ld, 0.0,
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
