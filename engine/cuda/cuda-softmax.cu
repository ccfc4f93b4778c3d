/* cuda-softmax.cu: softmax, log-softmax and cross-entropy of the CUDA
 * backend: one block per row, block reductions (a NaN-aware maximum,
 * sums in double) and the row math of engine/device/kernels/kern-rows.h
 * (the same formulas as the reference device; partial sums combine in
 * another order, so results agree to rounding). */
#include "cuda-private.h"

#include "kernels/kern-rows.h"

#define ROW_THREADS 256

/* Row r of x viewed as (outer, L, inner): its first element and stride. */
__device__ __forceinline__ int64_t row_base(int64_t r, int64_t L, int64_t inner) {
  int64_t o = r / inner, in = r - o * inner;
  return o * L * inner + in;
}

/* y, x (outer, L, inner): rows = outer * inner */
__global__ void softmax_kernel(int log_out, float *y, const float *x, int64_t rows, int64_t L,
                               int64_t inner) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t base = row_base(r, L, inner);
    const float *xr = x + base;
    float *yr = y + base;
    float m = -em_kinf();
    for (int64_t k = threadIdx.x; k < L; k += blockDim.x) m = em_cuda_nanmax(m, xr[k * inner]);
    m = em_cuda_block_max(m);
    double s = 0;
    for (int64_t k = threadIdx.x; k < L; k += blockDim.x) s += (double)expf(xr[k * inner] - m);
    s = em_cuda_block_sum_d(s);
    if (log_out) {
      float ls = (float)log(s);
      for (int64_t k = threadIdx.x; k < L; k += blockDim.x) yr[k * inner] = (xr[k * inner] - m) - ls;
    } else {
      float inv = (float)(1.0 / s);
      for (int64_t k = threadIdx.x; k < L; k += blockDim.x)
        yr[k * inner] = expf(xr[k * inner] - m) * inv;
    }
  }
}

__global__ void softmax_backward_kernel(int log_out, float *gx, const float *g, const float *y,
                                        int64_t rows, int64_t L, int64_t inner) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t base = row_base(r, L, inner);
    double s = 0;
    for (int64_t k = threadIdx.x; k < L; k += blockDim.x) {
      int64_t at = base + k * inner;
      s += log_out ? (double)g[at] : (double)g[at] * (double)y[at];
    }
    float sum = (float)em_cuda_block_sum_d(s);
    for (int64_t k = threadIdx.x; k < L; k += blockDim.x) {
      int64_t at = base + k * inner;
      gx[at] = em_ksoftmax_bwd(log_out, g[at], y[at], sum);
    }
  }
}

/* x viewed as (outer, L, inner) around dim. */
static void split(const em_tensor *x, int dim, int64_t *rows, int64_t *L, int64_t *inner) {
  int64_t outer = 1, in = 1;
  for (int d = 0; d < dim; d++) outer *= x->shape[d];
  for (int d = dim + 1; d < x->ndim; d++) in *= x->shape[d];
  *L = x->shape[dim];
  *inner = in;
  *rows = outer * in;
}

em_status em_cuda_softmax_forward(bool log, em_tensor *y, const em_tensor *x, int dim) {
  EM_ASSERT(em_tensor_is_contiguous(x) && em_tensor_is_contiguous(y) && dim >= 0 && dim < x->ndim);
  em_cuda_ctx *c = em_cuda_enter_t(y);
  int64_t rows, L, inner;
  split(x, dim, &rows, &L, &inner);
  if (!rows || !L) return em_cuda_kernel_end();
  softmax_kernel<<<em_cuda_row_blocks(rows), ROW_THREADS, 0, em_cuda_stream(c)>>>(
      log ? 1 : 0, em_f32(y), em_f32(x), rows, L, inner);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}

em_status em_cuda_softmax_backward(bool log, em_tensor *gx, const em_tensor *g, const em_tensor *y,
                              int dim) {
  EM_ASSERT(em_tensor_is_contiguous(gx) && em_tensor_is_contiguous(g) && em_tensor_is_contiguous(y));
  em_cuda_ctx *c = em_cuda_enter_t(gx);
  int64_t rows, L, inner;
  split(y, dim, &rows, &L, &inner);
  if (!rows || !L) return em_cuda_kernel_end();
  softmax_backward_kernel<<<em_cuda_row_blocks(rows), ROW_THREADS, 0, em_cuda_stream(c)>>>(
      log ? 1 : 0, em_f32(gx), em_f32(g), em_f32(y), rows, L, inner);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}

/* ---- cross-entropy --------------------------------------------------------- */

/* Row i of x (N, K): lse[i] and the row's loss (double) into part[i]
 * (both (N)). */
__global__ void ce_rows_kernel(double *part, float *lse, const float *x, const int64_t *target,
                               int64_t N, int64_t K, double smoothing) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const float *xr = x + i * K;
    float m = -em_kinf();
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) m = em_cuda_nanmax(m, xr[k]);
    m = em_cuda_block_max(m);
    double se = 0, sx = 0;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
      se += (double)expf(xr[k] - m);
      sx += (double)xr[k];
    }
    se = em_cuda_block_sum_d(se);
    sx = em_cuda_block_sum_d(sx);
    if (threadIdx.x == 0) {
      double l = (double)m + log(se);
      double mean = sx / (double)K;
      lse[i] = (float)l;
      part[i] = (1.0 - smoothing) * (l - (double)xr[target[i]]) + smoothing * (l - mean);
    }
  }
}

__global__ void ce_mean_kernel(float *loss, const double *part, int64_t N) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) s += part[i];
  s = em_cuda_block_sum_d(s);
  if (threadIdx.x == 0) *loss = (float)(s / (double)N);
}

em_status em_cuda_cross_entropy_forward(em_tensor *loss, em_tensor *lse, const em_tensor *logits,
                                   const em_tensor *target, double smoothing) {
  EM_ASSERT(logits->ndim == 2 && em_tensor_is_contiguous(logits) && em_tensor_is_contiguous(lse));
  EM_ASSERT(target->dtype == EM_DTYPE_I64 && em_tensor_is_contiguous(target));
  em_cuda_ctx *c = em_cuda_enter_t(loss);
  int64_t N = logits->shape[0], K = logits->shape[1];
  if (!N) { /* the mean of nothing: NaN, as PyTorch */
    em_cuda_fill_in(loss, (double)NAN);
    return em_cuda_kernel_end();
  }
  size_t bytes = (size_t)N * sizeof(double);
  double *part = (double *)em_cuda_scratch(em_cuda_index(c), bytes, "cross_entropy");
  if (!part) return em_cuda_kernel_end();
  cudaStream_t s = em_cuda_stream(c);
  ce_rows_kernel<<<em_cuda_row_blocks(N), ROW_THREADS, 0, s>>>(part, em_f32(lse), em_f32(logits),
                                                                em_i64(target), N, K, smoothing);
  EM_CUDA_LAUNCHED();
  ce_mean_kernel<<<1, ROW_THREADS, 0, s>>>(em_f32(loss), part, N);
  EM_CUDA_LAUNCHED();
  em_cuda_scratch_free(em_cuda_index(c), part, bytes);
  return em_cuda_kernel_end();
}

__global__ void ce_backward_kernel(float *gx, const float *gscale, const float *x,
                                   const int64_t *target, const float *lse, int64_t N, int64_t K,
                                   float smoothing) {
  float scale = (float)((double)*gscale / (double)N);
  int64_t n = N * K;
  EM_CUDA_GRID_STRIDE(i, n) {
    int64_t r = i / K, k = i - r * K;
    gx[i] = em_kce_grad(x[i], lse[r], k == target[r], scale, smoothing, K);
  }
}

em_status em_cuda_cross_entropy_backward(em_tensor *gx, const em_tensor *gscale,
                                    const em_tensor *logits, const em_tensor *target,
                                    const em_tensor *lse, double smoothing) {
  EM_ASSERT(em_tensor_is_contiguous(gx) && em_tensor_is_contiguous(logits) &&
            em_tensor_is_contiguous(lse) && em_tensor_is_contiguous(target));
  em_cuda_ctx *c = em_cuda_enter_t(gx);
  int64_t N = logits->shape[0], K = logits->shape[1];
  if (!N || !K) return em_cuda_kernel_end();
  ce_backward_kernel<<<em_cuda_blocks(N * K), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
      em_f32(gx), em_f32(gscale), em_f32(logits), em_i64(target), em_f32(lse), N, K,
      (float)smoothing);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}
