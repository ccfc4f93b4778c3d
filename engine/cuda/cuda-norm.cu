/* cuda-norm.cu: batch norm and layer norm of the CUDA backend.
 *
 * Batch norm (x (N, C, S) contiguous): one block per channel computes the
 * batch mean and biased variance (two passes, double) and updates the
 * running stats with the unbiased variance var M / (M - 1), M = N S; an
 * element-wise pass normalises. Backward: one block per channel sums g
 * and g (x - mean) (giving gb and gw), then an element-wise pass applies
 * kern-rows.h's em_kbn_grad_x. Layer norm (x (rows, cols)): one block per
 * row for the row statistics and the input gradient, one thread per column
 * for the parameter gradients (kern-rows.h's em_klayer_norm_param_col).
 * The formulas are those of kern-rows.h and engine/ops/norm.c. */
#include "cuda-private.h"

#include "kernels/kern-rows.h"

#define NORM_THREADS 256

/* ---- batch norm ------------------------------------------------------------- */

/* x (N, C, S). stat (2 C doubles) = mean, invstd per channel; save_* and running stats
 * (each may be NULL) written. */
__global__ void bn_stats_kernel(double *stat, float *save_mean, float *save_invstd,
                                float *run_mean, float *run_var, const float *x, int64_t N,
                                int64_t C, int64_t S, double momentum, double eps) {
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    int64_t M = N * S;
    double s = 0;
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
      int64_t n = j / S, i = j - n * S;
      s += (double)x[(n * C + c) * S + i];
    }
    double mean = em_cuda_block_sum_d(s) / (double)M;
    double v = 0;
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
      int64_t n = j / S, i = j - n * S;
      double d = (double)x[(n * C + c) * S + i] - mean;
      v += d * d;
    }
    double var = em_cuda_block_sum_d(v) / (double)M;
    if (threadIdx.x == 0) {
      double invstd = 1.0 / sqrt(var + eps);
      stat[c] = mean;
      stat[C + c] = invstd;
      if (save_mean) save_mean[c] = (float)mean;
      if (save_invstd) save_invstd[c] = (float)invstd;
      if (run_mean) run_mean[c] = (float)((1 - momentum) * (double)run_mean[c] + momentum * mean);
      if (run_var)
        run_var[c] = (float)((1 - momentum) * (double)run_var[c] +
                             momentum * var * (double)M / (double)(M - 1));
    }
  }
}

/* y = (x - mean) invstd w + b, from stat (training) or the running stats
 * (stat NULL: eval). */
__global__ void bn_apply_kernel(float *y, const float *x, const double *stat,
                                const float *run_mean, const float *run_var, const float *w,
                                const float *b, int64_t n, int64_t C, int64_t S, double eps) {
  EM_CUDA_GRID_STRIDE(i, n) {
    int64_t c = (i / S) % C;
    double mean, invstd;
    if (stat) {
      mean = stat[c];
      invstd = stat[C + c];
    } else {
      mean = (double)run_mean[c];
      invstd = 1.0 / sqrt((double)run_var[c] + eps);
    }
    double wv = w ? (double)w[c] : 1.0, bv = b ? (double)b[c] : 0.0;
    y[i] = (float)(((double)x[i] - mean) * invstd * wv + bv);
  }
}

em_status em_cuda_batch_norm_forward(bool training, em_tensor *y, em_tensor *save_mean,
                                em_tensor *save_invstd, const em_tensor *x, const em_tensor *w,
                                const em_tensor *b, em_tensor *running_mean,
                                em_tensor *running_var, double momentum, double eps) {
  EM_ASSERT(x->ndim >= 2 && em_tensor_is_contiguous(x) && em_tensor_is_contiguous(y));
  em_cuda_ctx *c = em_cuda_enter_t(y);
  int64_t N = x->shape[0], C = x->shape[1], n = em_tensor_numel(x);
  int64_t S = N && C ? n / (N * C) : 0;
  if (!n) return em_cuda_kernel_end();
  cudaStream_t s = em_cuda_stream(c);
  const float *wp = w ? em_f32(w) : NULL, *bp = b ? em_f32(b) : NULL;
  if (!training) {
    EM_ASSERT(running_mean && running_var && "cuda batch_norm: eval needs the running stats");
    bn_apply_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, s>>>(
        em_f32(y), em_f32(x), NULL, em_f32(running_mean), em_f32(running_var), wp, bp, n, C, S,
        eps);
    EM_CUDA_LAUNCHED();
    return em_cuda_kernel_end();
  }
  size_t bytes = (size_t)(2 * C) * sizeof(double);
  double *stat = (double *)em_cuda_scratch(em_cuda_index(c), bytes, "batch_norm");
  if (!stat) return em_cuda_kernel_end();
  bn_stats_kernel<<<em_cuda_row_blocks(C), NORM_THREADS, 0, s>>>(
      stat, save_mean ? em_f32(save_mean) : NULL, save_invstd ? em_f32(save_invstd) : NULL,
      running_mean ? em_f32(running_mean) : NULL, running_var ? em_f32(running_var) : NULL,
      em_f32(x), N, C, S, momentum, eps);
  EM_CUDA_LAUNCHED();
  bn_apply_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, s>>>(em_f32(y), em_f32(x), stat, NULL,
                                                                NULL, wp, bp, n, C, S, eps);
  EM_CUDA_LAUNCHED();
  em_cuda_scratch_free(em_cuda_index(c), stat, bytes);
  return em_cuda_kernel_end();
}

/* sums (2 C doubles) = sum g, sum g (x - mean); gw = sum g xhat, gb = sum g. */
__global__ void bn_grad_sums_kernel(double *sums, float *gw, float *gb, const float *g,
                                    const float *x, const float *save_mean,
                                    const float *save_invstd, int64_t N, int64_t C, int64_t S) {
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    int64_t M = N * S;
    double mean = (double)save_mean[c];
    double a = 0, bsum = 0;
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
      int64_t n = j / S, i = j - n * S, at = (n * C + c) * S + i;
      a += (double)g[at];
      bsum += (double)g[at] * ((double)x[at] - mean);
    }
    double sg = em_cuda_block_sum_d(a);
    double sgx = em_cuda_block_sum_d(bsum);
    if (threadIdx.x == 0) {
      sums[c] = sg;
      sums[C + c] = sgx;
      if (gw) gw[c] = (float)(sgx * (double)save_invstd[c]);
      if (gb) gb[c] = (float)sg;
    }
  }
}

__global__ void bn_grad_x_kernel(float *gx, const float *g, const float *x, const float *w,
                                 const float *save_mean, const float *save_invstd,
                                 const double *sums, int64_t n, int64_t C, int64_t S, double M) {
  EM_CUDA_GRID_STRIDE(i, n) {
    int64_t c = (i / S) % C;
    gx[i] = em_kbn_grad_x(g[i], x[i], w ? (double)w[c] : 1.0, (double)save_mean[c],
                          (double)save_invstd[c], sums[c], sums[C + c], M);
  }
}

em_status em_cuda_batch_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *g,
                                 const em_tensor *x, const em_tensor *w,
                                 const em_tensor *save_mean, const em_tensor *save_invstd) {
  EM_ASSERT(em_tensor_is_contiguous(g) && em_tensor_is_contiguous(x));
  em_cuda_ctx *c = em_cuda_enter_t(g);
  int64_t N = x->shape[0], C = x->shape[1], n = em_tensor_numel(x);
  int64_t S = N && C ? n / (N * C) : 0;
  if (!n) {
    if (gw) em_cuda_fill_in(gw, 0.0);
    if (gb) em_cuda_fill_in(gb, 0.0);
    return em_cuda_kernel_end();
  }
  cudaStream_t s = em_cuda_stream(c);
  size_t bytes = (size_t)(2 * C) * sizeof(double);
  double *sums = (double *)em_cuda_scratch(em_cuda_index(c), bytes, "batch_norm backward");
  if (!sums) return em_cuda_kernel_end();
  bn_grad_sums_kernel<<<em_cuda_row_blocks(C), NORM_THREADS, 0, s>>>(
      sums, gw ? em_f32(gw) : NULL, gb ? em_f32(gb) : NULL, em_f32(g), em_f32(x),
      em_f32(save_mean), em_f32(save_invstd), N, C, S);
  EM_CUDA_LAUNCHED();
  if (gx) {
    bn_grad_x_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, s>>>(
        em_f32(gx), em_f32(g), em_f32(x), w ? em_f32(w) : NULL, em_f32(save_mean),
        em_f32(save_invstd), sums, n, C, S, (double)(N * S));
    EM_CUDA_LAUNCHED();
  }
  em_cuda_scratch_free(em_cuda_index(c), sums, bytes);
  return em_cuda_kernel_end();
}

/* ---- layer norm --------------------------------------------------------------- */

/* y, x (rows, D); mean_out, rstd_out (rows); w, b (D) */
__global__ void ln_forward_kernel(float *y, float *mean_out, float *rstd_out, const float *x,
                                  const float *w, const float *b, int64_t rows, int64_t D,
                                  double eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * D;
    float *yr = y + r * D;
    double s = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) s += (double)xr[d];
    double m = em_cuda_block_sum_d(s) / (double)D;
    double v = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      double cd = (double)xr[d] - m;
      v += cd * cd;
    }
    double rs = 1.0 / sqrt(em_cuda_block_sum_d(v) / (double)D + eps);
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      double o = ((double)xr[d] - m) * rs;
      if (w) o *= (double)w[d];
      if (b) o += (double)b[d];
      yr[d] = (float)o;
    }
    if (threadIdx.x == 0) {
      if (mean_out) mean_out[r] = (float)m;
      if (rstd_out) rstd_out[r] = (float)rs;
    }
  }
}

em_status em_cuda_layer_norm_forward(em_tensor *y, em_tensor *mean, em_tensor *rstd,
                                const em_tensor *x, const em_tensor *w, const em_tensor *b,
                                int64_t rows, int64_t cols, double eps) {
  EM_ASSERT(em_tensor_is_contiguous(x) && em_tensor_is_contiguous(y));
  em_cuda_ctx *c = em_cuda_enter_t(y);
  if (!rows || !cols) return em_cuda_kernel_end();
  ln_forward_kernel<<<em_cuda_row_blocks(rows), NORM_THREADS, 0, em_cuda_stream(c)>>>(
      em_f32(y), mean ? em_f32(mean) : NULL, rstd ? em_f32(rstd) : NULL, em_f32(x),
      w ? em_f32(w) : NULL, b ? em_f32(b) : NULL, rows, cols, eps);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}

/* gx of each row: rstd (gxhat - mean(gxhat) - xhat mean(gxhat xhat)),
 * gxhat = g w (em_klayer_norm_bwd_row, split over a block). */
__global__ void ln_backward_x_kernel(float *gx, const float *g, const float *x, const float *w,
                                     const float *mean, const float *rstd, int64_t rows,
                                     int64_t D) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *gr = g + r * D, *xr = x + r * D;
    double m = (double)mean[r], rs = (double)rstd[r];
    double s1 = 0, s2 = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      double xh = ((double)xr[d] - m) * rs;
      double gh = (double)gr[d] * (w ? (double)w[d] : 1.0);
      s1 += gh;
      s2 += gh * xh;
    }
    s1 = em_cuda_block_sum_d(s1) / (double)D;
    s2 = em_cuda_block_sum_d(s2) / (double)D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      double xh = ((double)xr[d] - m) * rs;
      double gh = (double)gr[d] * (w ? (double)w[d] : 1.0);
      gx[r * D + d] = (float)(rs * (gh - s1 - xh * s2));
    }
  }
}

__global__ void ln_backward_params_kernel(float *gw, float *gb, const float *g, const float *x,
                                          const float *mean, const float *rstd, int64_t rows,
                                          int64_t D) {
  EM_CUDA_GRID_STRIDE(d, D) {
    double a, c;
    em_klayer_norm_param_col(g, x, mean, rstd, rows, D, d, &a, &c);
    if (gw) gw[d] = (float)a;
    if (gb) gb[d] = (float)c;
  }
}

em_status em_cuda_layer_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *g,
                                 const em_tensor *x, const em_tensor *w, const em_tensor *mean,
                                 const em_tensor *rstd, int64_t rows, int64_t cols) {
  EM_ASSERT(em_tensor_is_contiguous(g) && em_tensor_is_contiguous(x));
  em_cuda_ctx *c = em_cuda_enter_t(g);
  if (!cols) return em_cuda_kernel_end();
  cudaStream_t s = em_cuda_stream(c);
  if (gx && rows) {
    ln_backward_x_kernel<<<em_cuda_row_blocks(rows), NORM_THREADS, 0, s>>>(
        em_f32(gx), em_f32(g), em_f32(x), w ? em_f32(w) : NULL, em_f32(mean), em_f32(rstd), rows,
        cols);
    EM_CUDA_LAUNCHED();
  }
  if (gw || gb) {
    ln_backward_params_kernel<<<em_cuda_blocks(cols), EM_CUDA_THREADS, 0, s>>>(
        gw ? em_f32(gw) : NULL, gb ? em_f32(gb) : NULL, em_f32(g), em_f32(x), em_f32(mean),
        em_f32(rstd), rows, cols);
    EM_CUDA_LAUNCHED();
  }
  return em_cuda_kernel_end();
}
