/* ref-norm.c: the reference device's batch norm and layer norm, forward
 * and backward, through the per-channel and per-row bodies of
 * kernels/kern-rows.h (statistics and sums in double).
 *
 * Batch norm in training uses the batch's mean and biased variance and
 * updates the running statistics as PyTorch does:
 *   running = (1 - momentum) running + momentum stat,
 * with the unbiased variance var M / (M - 1), M = N * (H * W ...). */
#include "ref-private.h"

#include "kernels/kern-rows.h"

#include <stdlib.h>

/* Element c of a 1-D f32 tensor (any stride). */
static float *at1(const em_tensor *t, int64_t c) { return em_f32(t) + c * t->stride[0]; }

/* x (N, C, S): the sizes of a contiguous (N, C, *) tensor. */
static void bn_sizes(const em_tensor *x, int64_t *N, int64_t *C, int64_t *S) {
  EM_ASSERT(x->ndim >= 2 && em_tensor_is_contiguous(x));
  *N = x->shape[0];
  *C = x->shape[1];
  *S = 1;
  for (int d = 2; d < x->ndim; d++) *S *= x->shape[d];
}

em_status em_ref_batch_norm_forward(bool training, em_tensor *y, em_tensor *save_mean,
                               em_tensor *save_invstd, const em_tensor *x, const em_tensor *w,
                               const em_tensor *b, em_tensor *running_mean,
                               em_tensor *running_var, double momentum, double eps) {
  int64_t N, C, S;
  bn_sizes(x, &N, &C, &S);
  const float *xs = em_f32(x); /* (N, C, S) */
  float *ys = em_f32(y);       /* (N, C, S) */
  double M = (double)(N * S);
  for (int64_t c = 0; c < C; c++) {
    double mean, var;
    if (training) {
      em_kbn_stats(xs, N, C, S, c, &mean, &var);
      if (save_mean) *at1(save_mean, c) = (float)mean;
      if (save_invstd) *at1(save_invstd, c) = (float)(1.0 / sqrt(var + eps));
      if (running_mean)
        *at1(running_mean, c) = (float)((1 - momentum) * (double)*at1(running_mean, c) + momentum * mean);
      if (running_var)
        *at1(running_var, c) =
            (float)((1 - momentum) * (double)*at1(running_var, c) + momentum * var * M / (M - 1));
    } else {
      EM_ASSERT(running_mean && running_var && "batch norm in eval needs running statistics");
      mean = *at1(running_mean, c);
      var = *at1(running_var, c);
    }
    double invstd = 1.0 / sqrt(var + eps);
    double a = (w ? (double)*at1(w, c) : 1.0) * invstd, sh = b ? (double)*at1(b, c) : 0.0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < S; i++) {
        int64_t at = (n * C + c) * S + i;
        ys[at] = (float)(a * ((double)xs[at] - mean) + sh);
      }
  }
  return EM_OK;
}

em_status em_ref_batch_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *g,
                                const em_tensor *x, const em_tensor *w, const em_tensor *save_mean,
                                const em_tensor *save_invstd) {
  int64_t N, C, S;
  bn_sizes(x, &N, &C, &S);
  EM_ASSERT(em_tensor_is_contiguous(g));
  const float *xs = em_f32(x), *gs = em_f32(g); /* (N, C, S) */
  double M = (double)(N * S);
  for (int64_t c = 0; c < C; c++) {
    double mean = *at1(save_mean, c), invstd = *at1(save_invstd, c), sg, sgx;
    em_kbn_grad_sums(gs, xs, N, C, S, c, mean, &sg, &sgx);
    if (gw) *at1(gw, c) = (float)(sgx * invstd);
    if (gb) *at1(gb, c) = (float)sg;
    if (!gx) continue;
    double wc = w ? (double)*at1(w, c) : 1.0;
    float *gxs = em_f32(gx); /* (N, C, S) */
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < S; i++) {
        int64_t at = (n * C + c) * S + i;
        gxs[at] = em_kbn_grad_x(gs[at], xs[at], wc, mean, invstd, sg, sgx, M);
      }
  }
  return EM_OK;
}

em_status em_ref_layer_norm_forward(em_tensor *y, em_tensor *mean, em_tensor *rstd, const em_tensor *x,
                               const em_tensor *w, const em_tensor *b, int64_t rows, int64_t cols,
                               double eps) {
  EM_ASSERT(em_tensor_is_contiguous(x) && (!w || em_tensor_is_contiguous(w)) &&
            (!b || em_tensor_is_contiguous(b)));
  const float *xs = em_f32(x); /* (rows, cols) */
  float *ys = em_f32(y);
  for (int64_t r = 0; r < rows; r++) {
    double m, s;
    em_klayer_norm_row(ys + r * cols, xs + r * cols, w ? em_f32(w) : NULL, b ? em_f32(b) : NULL,
                       cols, eps, &m, &s);
    if (mean) *at1(mean, r) = (float)m;
    if (rstd) *at1(rstd, r) = (float)s;
  }
  return EM_OK;
}

em_status em_ref_layer_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *g,
                                const em_tensor *x, const em_tensor *w, const em_tensor *mean,
                                const em_tensor *rstd, int64_t rows, int64_t cols) {
  EM_ASSERT(em_tensor_is_contiguous(x) && em_tensor_is_contiguous(g) &&
            em_tensor_is_contiguous(mean) && em_tensor_is_contiguous(rstd));
  const float *xs = em_f32(x), *gs = em_f32(g); /* (rows, cols) */
  const float *ms = em_f32(mean), *rs = em_f32(rstd); /* (rows) */
  if (gx)
    for (int64_t r = 0; r < rows; r++)
      em_klayer_norm_bwd_row(em_f32(gx) + r * cols, gs + r * cols, xs + r * cols,
                             w ? em_f32(w) : NULL, cols, ms[r], rs[r]);
  if (gw || gb)
    for (int64_t d = 0; d < cols; d++) {
      double sw, sb;
      em_klayer_norm_param_col(gs, xs, ms, rs, rows, cols, d, &sw, &sb);
      if (gw) em_f32(gw)[d] = (float)sw;
      if (gb) em_f32(gb)[d] = (float)sb;
    }
  return EM_OK;
}
