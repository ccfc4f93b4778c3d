/* kern-rows.h: the per-row (and per-channel) math of the device kernels:
 * softmax and log-softmax over a strided row, cross-entropy of one row
 * with label smoothing and its gradient, layer norm of one row forward
 * and backward, batch norm's per-channel statistics.
 *
 * Values are float in memory; sums are accumulated in double (the CPU's
 * reference does the same, and the CPU's fast kernels stay within a few
 * float ulps of it). A row is (pointer, n, stride in elements). The CUDA
 * kernels may split a row over a warp or block and combine partial sums
 * (em_ksum_*, max) in their own order: the results then differ from the
 * reference device's by rounding only.
 *
 * Conventions (PyTorch's):
 *  - softmax shifts by the row maximum; a NaN in the row makes it NaN;
 *    log_softmax = (x - m) - log(sum exp(x - m)).
 *  - cross-entropy of row i with target t over K classes and smoothing s:
 *      loss_i = (1 - s) (lse - x_t) + s (lse - mean(x)),
 *      d loss_i / d x_k = softmax_k - s / K - (k == t ? 1 - s : 0);
 *    the loss is the mean over the N rows.
 *  - layer norm: biased variance, rstd = 1 / sqrt(var + eps), two passes.
 *  - batch norm: the same per channel of (N, C, S); the running variance
 *    takes the unbiased variance var * M / (M - 1), M = N S. */
#pragma once

#include "kern-common.h"

/* The maximum of a row; NaN when the row has one (-inf when n == 0). */
EM_HD float em_krow_max(const float *x, int64_t n, int64_t xs) {
  float m = -em_kinf();
  for (int64_t k = 0; k < n; k++) {
    float v = x[k * xs];
    if (v > m || v != v) m = v;
    if (m != m) break;
  }
  return m;
}

/* sum_k exp(x_k - m) in double. */
EM_HD double em_krow_sumexp(const float *x, int64_t n, int64_t xs, float m) {
  double s = 0;
  for (int64_t k = 0; k < n; k++) s += (double)expf(x[k * xs] - m);
  return s;
}

/* y = softmax(x) or log_softmax(x) of one row (y and x may be one row). */
EM_HD void em_ksoftmax_row(int log_out, float *y, int64_t ys, const float *x, int64_t xs,
                           int64_t n) {
  float m = em_krow_max(x, n, xs);
  double s = em_krow_sumexp(x, n, xs, m);
  if (log_out) {
    float ls = (float)log(s);
    for (int64_t k = 0; k < n; k++) y[k * ys] = (x[k * xs] - m) - ls;
  } else {
    float inv = (float)(1.0 / s);
    for (int64_t k = 0; k < n; k++) y[k * ys] = expf(x[k * xs] - m) * inv;
  }
}

/* The row sum the softmax backward needs: sum g (log) or sum g y. */
EM_HD double em_ksoftmax_bwd_sum(int log_out, const float *g, int64_t gs, const float *y,
                                 int64_t ys, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < n; k++)
    s += log_out ? (double)g[k * gs] : (double)g[k * gs] * (double)y[k * ys];
  return s;
}
/* One element of the softmax backward, given that sum:
 * g - exp(y) sum (log) or y (g - sum). */
EM_HD float em_ksoftmax_bwd(int log_out, float g, float y, float sum) {
  return log_out ? g - expf(y) * sum : y * (g - sum);
}
/* gx = the softmax backward of one row. */
EM_HD void em_ksoftmax_bwd_row(int log_out, float *gx, int64_t gxs, const float *g, int64_t gs,
                               const float *y, int64_t ys, int64_t n) {
  float sum = (float)em_ksoftmax_bwd_sum(log_out, g, gs, y, ys, n);
  for (int64_t k = 0; k < n; k++) gx[k * gxs] = em_ksoftmax_bwd(log_out, g[k * gs], y[k * ys], sum);
}

/* ---- cross-entropy ----------------------------------------------------------- */
/* Row i's loss (double) with target t, and its log-sum-exp in *lse. */
EM_HD double em_kce_row(const float *x, int64_t K, int64_t t, double smoothing, float *lse) {
  float m = em_krow_max(x, K, 1);
  double l = (double)m + log(em_krow_sumexp(x, K, 1, m));
  double mean = 0;
  for (int64_t k = 0; k < K; k++) mean += (double)x[k];
  mean /= (double)K;
  *lse = (float)l;
  return (1.0 - smoothing) * (l - (double)x[t]) + smoothing * (l - mean);
}
/* scale * d loss_i / d x_k, scale = the incoming gradient / N. */
EM_HD float em_kce_grad(float x, float lse, int is_target, float scale, float smoothing,
                        int64_t K) {
  float p = expf(x - lse);
  float d = p - smoothing / (float)K - (is_target ? 1.f - smoothing : 0.f);
  return scale * d;
}

/* ---- layer norm ---------------------------------------------------------------- */
/* One row of D values: *mean and *rstd (double) and y = (x - mean) rstd w
 * + b (w, b (D) may be NULL). */
EM_HD void em_klayer_norm_row(float *y, const float *x, const float *w, const float *b, int64_t D,
                              double eps, double *mean, double *rstd) {
  double s = 0;
  for (int64_t d = 0; d < D; d++) s += (double)x[d];
  double m = s / (double)D, v = 0;
  for (int64_t d = 0; d < D; d++) {
    double c = (double)x[d] - m;
    v += c * c;
  }
  double r = 1.0 / sqrt(v / (double)D + eps);
  for (int64_t d = 0; d < D; d++) {
    double o = ((double)x[d] - m) * r;
    if (w) o *= (double)w[d];
    if (b) o += (double)b[d];
    y[d] = (float)o;
  }
  *mean = m;
  *rstd = r;
}
/* gx of one row from g, x, w (may be NULL), mean and rstd:
 *   gxhat = g w;  gx = rstd (gxhat - mean(gxhat) - xhat mean(gxhat xhat)). */
EM_HD void em_klayer_norm_bwd_row(float *gx, const float *g, const float *x, const float *w,
                                  int64_t D, double mean, double rstd) {
  double s1 = 0, s2 = 0;
  for (int64_t d = 0; d < D; d++) {
    double xh = ((double)x[d] - mean) * rstd;
    double gh = (double)g[d] * (w ? (double)w[d] : 1.0);
    s1 += gh;
    s2 += gh * xh;
  }
  s1 /= (double)D;
  s2 /= (double)D;
  for (int64_t d = 0; d < D; d++) {
    double xh = ((double)x[d] - mean) * rstd;
    double gh = (double)g[d] * (w ? (double)w[d] : 1.0);
    gx[d] = (float)(rstd * (gh - s1 - xh * s2));
  }
}
/* Column d's contributions to gw (g xhat) and gb (g) from rows [0, R) of
 * a (R, D) layout. */
EM_HD void em_klayer_norm_param_col(const float *g, const float *x, const float *mean,
                                    const float *rstd, int64_t R, int64_t D, int64_t d,
                                    double *gw, double *gb) {
  double a = 0, c = 0;
  for (int64_t r = 0; r < R; r++) {
    double gv = (double)g[r * D + d];
    a += gv * (((double)x[r * D + d] - (double)mean[r]) * (double)rstd[r]);
    c += gv;
  }
  *gw = a;
  *gb = c;
}

/* ---- batch norm (x (N, C, S), channel c) ---------------------------------------- */
/* The channel's mean and biased variance (two passes, double). */
EM_HD void em_kbn_stats(const float *x, int64_t N, int64_t C, int64_t S, int64_t c, double *mean,
                        double *var) {
  double s = 0, M = (double)(N * S);
  for (int64_t n = 0; n < N; n++)
    for (int64_t i = 0; i < S; i++) s += (double)x[(n * C + c) * S + i];
  double m = s / M, v = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t i = 0; i < S; i++) {
      double d = (double)x[(n * C + c) * S + i] - m;
      v += d * d;
    }
  *mean = m;
  *var = v / M;
}
/* The channel's sums for backward: sum g and sum g (x - mean). */
EM_HD void em_kbn_grad_sums(const float *g, const float *x, int64_t N, int64_t C, int64_t S,
                            int64_t c, double mean, double *sg, double *sgx) {
  double a = 0, b = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t i = 0; i < S; i++) {
      int64_t at = (n * C + c) * S + i;
      a += (double)g[at];
      b += (double)g[at] * ((double)x[at] - mean);
    }
  *sg = a;
  *sgx = b;
}
/* One element of the training-mode gradient of x:
 *   gx = w invstd (g - sg / M - xhat sgxhat / M), xhat = (x - mean) invstd,
 *   sgxhat = sgx invstd. */
EM_HD float em_kbn_grad_x(float g, float x, double w, double mean, double invstd, double sg,
                          double sgx, double M) {
  double xh = ((double)x - mean) * invstd;
  return (float)(w * invstd * ((double)g - sg / M - xh * (sgx * invstd) / M));
}
