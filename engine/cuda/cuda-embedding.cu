/* cuda-embedding.cu: embedding lookup of the CUDA backend. Forward: one
 * thread per output element, y (idx's shape, D) = w[idx] for w (V, D).
 * Backward: gw (zeroed by the caller) += g rows at idx with atomicAdd, so
 * duplicate indices add up (in an order that may vary from run to run:
 * float sums of duplicates can differ in the last bits). Indices are I64
 * and in range (the op layer checks them on the host). */
#include "cuda-private.h"

/* y (R, D), w (V, D), idx (R) */
__global__ void embedding_forward_kernel(float *y, const float *w, const int64_t *idx,
                                         int64_t n, int64_t D) {
  EM_CUDA_GRID_STRIDE(i, n) {
    int64_t r = i / D, d = i - r * D;
    y[i] = w[idx[r] * D + d];
  }
}

/* gw (V, D), g (R, D), idx (R) */
__global__ void embedding_backward_kernel(float *gw, const float *g, const int64_t *idx,
                                          int64_t n, int64_t D) {
  EM_CUDA_GRID_STRIDE(i, n) {
    int64_t r = i / D, d = i - r * D;
    atomicAdd(&gw[idx[r] * D + d], g[i]);
  }
}

em_status em_cuda_embedding_forward(em_tensor *y, const em_tensor *w, const em_tensor *idx) {
  EM_ASSERT(idx->dtype == EM_DTYPE_I64 && em_tensor_is_contiguous(idx));
  EM_ASSERT(em_tensor_is_contiguous(w) && em_tensor_is_contiguous(y) && w->ndim == 2);
  em_cuda_ctx *c = em_cuda_enter_t(y);
  int64_t D = w->shape[1], n = em_tensor_numel(idx) * D;
  if (!n) return em_cuda_kernel_end();
  embedding_forward_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
      em_f32(y), em_f32(w), em_i64(idx), n, D);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}

em_status em_cuda_embedding_backward(em_tensor *gw, const em_tensor *g, const em_tensor *idx) {
  EM_ASSERT(idx->dtype == EM_DTYPE_I64 && em_tensor_is_contiguous(idx));
  EM_ASSERT(em_tensor_is_contiguous(gw) && em_tensor_is_contiguous(g) && gw->ndim == 2);
  em_cuda_ctx *c = em_cuda_enter_t(gw);
  int64_t D = gw->shape[1], n = em_tensor_numel(idx) * D;
  if (!n) return em_cuda_kernel_end();
  embedding_backward_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
      em_f32(gw), em_f32(g), em_i64(idx), n, D);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}
