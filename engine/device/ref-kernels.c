/* ref-kernels.c: the reference device's kernel table, and its
 * element-wise kernels: fill, copy, binary, unary (forward and backward),
 * reduce and sum_to.
 *
 * Every kernel is a plain host loop over the shared bodies of
 * engine/device/kernels/, with the operands' strides and broadcasting
 * through em_kview, so the reference device computes what the CUDA
 * kernels compute, one element at a time. Sums are accumulated in double
 * in index order. The other families live in ref-linalg.c, ref-pool.c,
 * ref-norm.c, ref-softmax-loss.c and ref-misc.c. */
#include "ref-private.h"

#include "kernels/kern-elementwise.h"

#include <stdlib.h>
#include <string.h>

/* ---- loads and stores of any dtype ------------------------------------------- */

/* Element `at` of a buffer of dtype dt, as a double (integers above 2^53
 * round; copies between integer dtypes use load_int instead). */
static double load_f(const void *base, em_dtype dt, int64_t at) {
  switch (dt) {
  case EM_DTYPE_F32: return ((const float *)base)[at];
  case EM_DTYPE_F64: return ((const double *)base)[at];
  case EM_DTYPE_I32: return ((const int32_t *)base)[at];
  case EM_DTYPE_I64: return (double)((const int64_t *)base)[at];
  default: return ((const uint8_t *)base)[at];
  }
}

static int64_t load_int(const void *base, em_dtype dt, int64_t at) {
  switch (dt) {
  case EM_DTYPE_I32: return ((const int32_t *)base)[at];
  case EM_DTYPE_I64: return ((const int64_t *)base)[at];
  case EM_DTYPE_U8: return ((const uint8_t *)base)[at];
  case EM_DTYPE_F32: return (int64_t)((const float *)base)[at];
  default: return (int64_t)((const double *)base)[at];
  }
}

/* Stores v (a double) into element `at`: float -> integer truncates. */
static void store_f(void *base, em_dtype dt, int64_t at, double v) {
  switch (dt) {
  case EM_DTYPE_F32: ((float *)base)[at] = (float)v; break;
  case EM_DTYPE_F64: ((double *)base)[at] = v; break;
  case EM_DTYPE_I32: ((int32_t *)base)[at] = (int32_t)(int64_t)v; break;
  case EM_DTYPE_I64: ((int64_t *)base)[at] = (int64_t)v; break;
  default: ((uint8_t *)base)[at] = (uint8_t)(int64_t)v; break;
  }
}

static void store_int(void *base, em_dtype dt, int64_t at, int64_t v) {
  switch (dt) {
  case EM_DTYPE_F32: ((float *)base)[at] = (float)v; break;
  case EM_DTYPE_F64: ((double *)base)[at] = (double)v; break;
  case EM_DTYPE_I32: ((int32_t *)base)[at] = (int32_t)v; break;
  case EM_DTYPE_I64: ((int64_t *)base)[at] = v; break;
  default: ((uint8_t *)base)[at] = (uint8_t)v; break;
  }
}

static bool is_float(em_dtype dt) { return dt == EM_DTYPE_F32 || dt == EM_DTYPE_F64; }

/* ---- fill, copy --------------------------------------------------------------- */

static em_status ref_fill(em_tensor *y, double v) {
  em_kview vy = em_ref_view(y);
  int64_t n = em_kview_numel(&vy);
  for (int64_t i = 0; i < n; i++) store_f(y->data, y->dtype, em_kview_at(&vy, i), v);
  return EM_OK;
}

static em_status ref_copy(em_tensor *y, const em_tensor *x) {
  em_kview vy = em_ref_view(y), vx = em_ref_view_into(x, y);
  int64_t n = em_kview_numel(&vy);
  size_t es = em_dtype_size(y->dtype);
  if (x->dtype == y->dtype) {
    for (int64_t i = 0; i < n; i++)
      memcpy((char *)y->data + em_kview_at(&vy, i) * (int64_t)es,
             (const char *)x->data + em_kview_at(&vx, i) * (int64_t)es, es);
  } else if (is_float(x->dtype)) {
    for (int64_t i = 0; i < n; i++)
      store_f(y->data, y->dtype, em_kview_at(&vy, i), load_f(x->data, x->dtype, em_kview_at(&vx, i)));
  } else {
    for (int64_t i = 0; i < n; i++)
      store_int(y->data, y->dtype, em_kview_at(&vy, i),
                load_int(x->data, x->dtype, em_kview_at(&vx, i)));
  }
  return EM_OK;
}

/* ---- binary, unary -------------------------------------------------------------- */

static em_status ref_binary(em_kbin op, bool acc, em_tensor *y, const em_tensor *a,
                       const em_tensor *b) {
  EM_ASSERT(y->dtype == EM_DTYPE_F32 && a->dtype == EM_DTYPE_F32 && b->dtype == EM_DTYPE_F32);
  em_kview vy = em_ref_view(y), va = em_ref_view_into(a, y), vb = em_ref_view_into(b, y);
  float *py = y->data;
  const float *pa = a->data, *pb = b->data;
  int64_t n = em_kview_numel(&vy);
  for (int64_t i = 0; i < n; i++) {
    int64_t at = em_kview_at(&vy, i);
    float r = em_kbin_f(op, pa[em_kview_at(&va, i)], pb[em_kview_at(&vb, i)]);
    py[at] = acc ? py[at] + r : r;
  }
  return EM_OK;
}

static em_status ref_masked_fill(bool acc, em_tensor *y, const em_tensor *x, const em_tensor *mask,
                                 double v) {
  EM_ASSERT(y->dtype == EM_DTYPE_F32 && x->dtype == EM_DTYPE_F32 && mask->dtype == EM_DTYPE_U8);
  em_kview vy = em_ref_view(y), vx = em_ref_view_into(x, y), vm = em_ref_view_into(mask, y);
  float *py = y->data;
  const float *px = x->data;
  const uint8_t *pm = mask->data;
  const float fv = (float)v;
  int64_t n = em_kview_numel(&vy);
  for (int64_t i = 0; i < n; i++) {
    int64_t at = em_kview_at(&vy, i);
    float r = em_kmasked_f(pm[em_kview_at(&vm, i)], px[em_kview_at(&vx, i)], fv);
    py[at] = acc ? py[at] + r : r;
  }
  return EM_OK;
}

static em_status ref_unary(em_kun op, em_tensor *y, const em_tensor *x, double p0, double p1) {
  EM_ASSERT(y->dtype == EM_DTYPE_F32 && x->dtype == EM_DTYPE_F32);
  em_kview vy = em_ref_view(y), vx = em_ref_view_into(x, y);
  float *py = y->data;
  const float *px = x->data;
  const float f0 = (float)p0, f1 = (float)p1;
  int64_t n = em_kview_numel(&vy);
  for (int64_t i = 0; i < n; i++)
    py[em_kview_at(&vy, i)] = em_kun_f(op, px[em_kview_at(&vx, i)], f0, f1);
  return EM_OK;
}

/* x or y may be NULL when the op's derivative does not read it
 * (em_kun_uses_y). */
static em_status ref_unary_backward(em_kun op, bool acc, em_tensor *gx, const em_tensor *g,
                               const em_tensor *x, const em_tensor *y, double p0, double p1) {
  bool use_y = em_kun_uses_y(op);
  const em_tensor *v = use_y ? y : x; /* the value the derivative reads */
  EM_ASSERT(v && "unary_backward: the saved value its derivative needs is missing");
  EM_ASSERT(gx->dtype == EM_DTYPE_F32 && g->dtype == EM_DTYPE_F32 && v->dtype == EM_DTYPE_F32);
  em_kview vgx = em_ref_view(gx), vg = em_ref_view_into(g, gx), vv = em_ref_view_into(v, gx);
  float *pgx = gx->data;
  const float *pg = g->data, *pv = v->data;
  const float f0 = (float)p0, f1 = (float)p1;
  int64_t n = em_kview_numel(&vgx);
  for (int64_t i = 0; i < n; i++) {
    int64_t at = em_kview_at(&vgx, i);
    float val = pv[em_kview_at(&vv, i)];
    float d = em_kun_df(op, pg[em_kview_at(&vg, i)], use_y ? 0.f : val, use_y ? val : 0.f, f0, f1);
    pgx[at] = acc ? pgx[at] + d : d;
  }
  return EM_OK;
}

/* ---- reduce, sum_to -------------------------------------------------------------- */

static em_status ref_reduce(em_kred op, em_tensor *y, em_tensor *idx, const em_tensor *x, int dim) {
  EM_ASSERT(y->dtype == EM_DTYPE_F32 && x->dtype == EM_DTYPE_F32);
  EM_ASSERT(dim >= 0 && dim < x->ndim && y->ndim == x->ndim && y->shape[dim] == 1);
  /* x's view over y's shape walks the first element of each reduced line. */
  em_kview vy = em_ref_view(y), vx, vi;
  em_kview_bcast(&vx, y->ndim, y->shape, x->ndim, y->shape, x->stride, x->offset);
  if (idx) vi = em_ref_view(idx);
  const int64_t R = x->shape[dim], step = x->stride[dim];
  float *py = y->data;
  const float *px = x->data;
  int64_t n = em_kview_numel(&vy);
  for (int64_t i = 0; i < n; i++) {
    const float *line = px + em_kview_at(&vx, i); /* (R) with stride step */
    if (op == EM_KR_SUM) {
      double s = 0;
      for (int64_t r = 0; r < R; r++) s += (double)line[r * step];
      py[em_kview_at(&vy, i)] = (float)s;
    } else {
      float best = R > 0 ? line[0] : -em_kinf();
      int64_t bi = 0;
      for (int64_t r = 1; r < R; r++)
        if (em_kmax_takes(line[r * step], best)) {
          best = line[r * step];
          bi = r;
        }
      py[em_kview_at(&vy, i)] = best;
      if (idx) ((int64_t *)idx->data)[em_kview_at(&vi, i)] = bi;
    }
  }
  return EM_OK;
}

static em_status ref_sum_to(bool acc, em_tensor *y, const em_tensor *x) {
  EM_ASSERT(y->dtype == EM_DTYPE_F32 && x->dtype == EM_DTYPE_F32 && y->ndim == x->ndim);
  em_kview vy = em_ref_view(y), vx = em_ref_view(x), vl;
  int64_t ny = em_kview_numel(&vy), nx = em_kview_numel(&vx);
  /* vl: the linear index into y's elements of each element of x. */
  int64_t lin[EM_KMAX_DIMS], s = 1;
  for (int d = y->ndim - 1; d >= 0; d--) {
    lin[d] = s;
    s *= y->shape[d];
  }
  em_kview_bcast(&vl, x->ndim, x->shape, y->ndim, y->shape, lin, 0);
  double *sum = calloc((size_t)(ny ? ny : 1), sizeof *sum);
  EM_ASSERT(sum && "ref device: out of host memory in sum_to");
  const float *px = x->data;
  for (int64_t i = 0; i < nx; i++) sum[em_kview_at(&vl, i)] += (double)px[em_kview_at(&vx, i)];
  float *py = y->data;
  for (int64_t i = 0; i < ny; i++) {
    int64_t at = em_kview_at(&vy, i);
    py[at] = acc ? py[at] + (float)sum[i] : (float)sum[i];
  }
  free(sum);
  return EM_OK;
}

/* ---- the table ---------------------------------------------------------------------- */

const em_kernels em_ref_kernels = {
  .fill = ref_fill,
  .copy = ref_copy,
  .binary = ref_binary,
  .unary = ref_unary,
  .unary_backward = ref_unary_backward,
  .reduce = ref_reduce,
  .sum_to = ref_sum_to,
  .gemm = em_ref_gemm,
  .conv2d_forward = em_ref_conv2d_forward,
  .conv2d_backward = em_ref_conv2d_backward,
  .pool2d_forward = em_ref_pool2d_forward,
  .pool2d_backward = em_ref_pool2d_backward,
  .batch_norm_forward = em_ref_batch_norm_forward,
  .batch_norm_backward = em_ref_batch_norm_backward,
  .layer_norm_forward = em_ref_layer_norm_forward,
  .layer_norm_backward = em_ref_layer_norm_backward,
  .softmax_forward = em_ref_softmax_forward,
  .softmax_backward = em_ref_softmax_backward,
  .cross_entropy_forward = em_ref_cross_entropy_forward,
  .cross_entropy_backward = em_ref_cross_entropy_backward,
  .embedding_forward = em_ref_embedding_forward,
  .embedding_backward = em_ref_embedding_backward,
  .dropout_mask = em_ref_dropout_mask,
  .masked_fill = ref_masked_fill,
  .sdpa_forward = em_ref_sdpa_forward,
  .sdpa_backward = em_ref_sdpa_backward,
  .sgd_step = em_ref_sgd_step,
  .adam_step = em_ref_adam_step,
  .sumsq = em_ref_sumsq,
  .unscale = em_ref_unscale,
};
