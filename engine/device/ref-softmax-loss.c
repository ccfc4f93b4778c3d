/* ref-softmax-loss.c: the reference device's softmax / log-softmax
 * (forward and backward) and cross-entropy with label smoothing (forward
 * and backward), one row at a time through kernels/kern-rows.h. */
#include "ref-private.h"

#include "kernels/kern-rows.h"

/* (outer, K, inner) of contiguous x around dim. */
static void split(const em_tensor *x, int dim, int64_t *outer, int64_t *K, int64_t *inner) {
  EM_ASSERT(dim >= 0 && dim < (x->ndim > 0 ? x->ndim : 1));
  *outer = 1;
  *inner = 1;
  for (int d = 0; d < dim; d++) *outer *= x->shape[d];
  for (int d = dim + 1; d < x->ndim; d++) *inner *= x->shape[d];
  *K = x->ndim > 0 ? x->shape[dim] : 1;
}

em_status em_ref_softmax_forward(bool log, em_tensor *y, const em_tensor *x, int dim) {
  EM_ASSERT(em_tensor_is_contiguous(x) && em_tensor_is_contiguous(y));
  int64_t O, K, I;
  split(x, dim, &O, &K, &I);
  const float *xs = em_f32(x); /* (O, K, I) */
  float *ys = em_f32(y);
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < I; i++)
      em_ksoftmax_row(log, ys + o * K * I + i, I, xs + o * K * I + i, I, K);
  return EM_OK;
}

em_status em_ref_softmax_backward(bool log, em_tensor *gx, const em_tensor *g, const em_tensor *y,
                             int dim) {
  EM_ASSERT(em_tensor_is_contiguous(g) && em_tensor_is_contiguous(y) &&
            em_tensor_is_contiguous(gx));
  int64_t O, K, I;
  split(y, dim, &O, &K, &I);
  const float *gs = em_f32(g), *ys = em_f32(y); /* (O, K, I) */
  float *gxs = em_f32(gx);
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < I; i++) {
      int64_t base = o * K * I + i;
      em_ksoftmax_bwd_row(log, gxs + base, I, gs + base, I, ys + base, I, K);
    }
  return EM_OK;
}

em_status em_ref_cross_entropy_forward(em_tensor *loss, em_tensor *lse, const em_tensor *logits,
                                  const em_tensor *target, double smoothing) {
  EM_ASSERT(logits->ndim == 2 && em_tensor_is_contiguous(logits) && target->dtype == EM_DTYPE_I64);
  int64_t N = logits->shape[0], K = logits->shape[1];
  const float *xs = em_f32(logits); /* (N, K) */
  const int64_t *ts = em_i64(target); /* (N) */
  double total = 0;
  for (int64_t i = 0; i < N; i++) {
    int64_t t = ts[i * target->stride[0]];
    EM_ASSERT(t >= 0 && t < K && "cross_entropy: target out of range reached the kernel");
    float l;
    total += em_kce_row(xs + i * K, K, t, smoothing, &l);
    if (lse) em_f32(lse)[i * lse->stride[0]] = l;
  }
  em_f32(loss)[0] = (float)(total / (double)N);
  return EM_OK;
}

em_status em_ref_cross_entropy_backward(em_tensor *gx, const em_tensor *gscale,
                                   const em_tensor *logits, const em_tensor *target,
                                   const em_tensor *lse, double smoothing) {
  EM_ASSERT(em_tensor_is_contiguous(logits) && em_tensor_is_contiguous(gx));
  int64_t N = logits->shape[0], K = logits->shape[1];
  const float *xs = em_f32(logits); /* (N, K) */
  const int64_t *ts = em_i64(target); /* (N) */
  float *gxs = em_f32(gx);            /* (N, K) */
  float scale = (float)((double)em_f32(gscale)[0] / (double)N);
  for (int64_t i = 0; i < N; i++) {
    int64_t t = ts[i * target->stride[0]];
    float l = em_f32(lse)[i * lse->stride[0]];
    for (int64_t k = 0; k < K; k++)
      gxs[i * K + k] = em_kce_grad(xs[i * K + k], l, k == t, scale, (float)smoothing, K);
  }
  return EM_OK;
}
