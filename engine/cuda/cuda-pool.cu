/* cuda-pool.cu: 2-D max and average pooling of the CUDA backend (NCHW,
 * contiguous). One thread per output element forward and one per input
 * element backward (a gather over the windows that cover it: no atomics,
 * the same sums in the same order as the reference device), with the
 * window math of engine/device/kernels/kern-pool.h: PyTorch's rules (the
 * first maximum, a NaN wins, padding never chosen; count_include_pad). */
#include "cuda-private.h"

#include "kernels/kern-pool.h"

/* y (N, C, OH, OW), x (N, C, H, W) */
__global__ void pool_forward_kernel(int is_max, em_kpool_geom g, float *y, const float *x,
                                    int64_t n) {
  EM_CUDA_GRID_STRIDE(o, n) y[o] = em_kpool_forward(is_max, &g, x, o);
}

/* gx, x (N, C, H, W), gy (N, C, OH, OW) */
__global__ void pool_backward_kernel(int is_max, em_kpool_geom g, float *gx, const float *gy,
                                     const float *x, int64_t n) {
  EM_CUDA_GRID_STRIDE(i, n) gx[i] = em_kpool_backward(is_max, &g, gy, x, i);
}

static em_kpool_geom geom_of(const em_tensor *x, const em_pool2d_params *p) {
  em_kpool_geom g;
  em_kpool_geom_init(&g, x->shape[0], x->shape[1], x->shape[2], x->shape[3], p->kernel[0],
                     p->kernel[1], p->stride[0], p->stride[1], p->padding[0], p->padding[1],
                     p->count_include_pad ? 1 : 0);
  return g;
}

/* idx is not used: backward finds each maximum again from x. */
em_status em_cuda_pool2d_forward(bool max, em_tensor *y, em_tensor *idx, const em_tensor *x,
                                 const em_pool2d_params *p) {
  (void)idx;
  EM_ASSERT(x->ndim == 4 && em_tensor_is_contiguous(x) && em_tensor_is_contiguous(y));
  em_cuda_ctx *c = em_cuda_enter_t(y);
  em_kpool_geom g = geom_of(x, p);
  EM_ASSERT(y->shape[2] == g.OH && y->shape[3] == g.OW && "cuda pool2d: output shape");
  int64_t n = em_tensor_numel(y);
  if (!n) return em_cuda_kernel_end();
  pool_forward_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
      max ? 1 : 0, g, em_f32(y), em_f32(x), n);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}

em_status em_cuda_pool2d_backward(bool max, em_tensor *gx, const em_tensor *g, const em_tensor *x,
                                  const em_tensor *y, const em_tensor *idx,
                                  const em_pool2d_params *p) {
  (void)idx;
  EM_ASSERT(em_tensor_is_contiguous(gx) && em_tensor_is_contiguous(g) && em_tensor_is_contiguous(x));
  em_cuda_ctx *c = em_cuda_enter_t(gx);
  em_kpool_geom geom = geom_of(x, p);
  int64_t n = em_tensor_numel(gx);
  if (!n) return em_cuda_kernel_end();
  pool_backward_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
      max ? 1 : 0, geom, em_f32(gx), em_f32(g), max ? em_f32(x) : NULL, n);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}
