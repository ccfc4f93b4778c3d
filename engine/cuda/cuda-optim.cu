/* cuda-optim.cu: the optimiser steps of the CUDA backend (SGD with
 * momentum / Nesterov, Adam and AdamW), one thread per element with the
 * element math of engine/device/kernels/kern-optim.h (the f32 operations
 * of engine/optim/sgd.c and adam.c in the same order; the per-step
 * scalars computed in double on the host). */
#include "cuda-private.h"

#include "kernels/kern-optim.h"

__global__ void sgd_kernel(em_ksgd_scalars s, float *p, const float *g, float *buf, int64_t n) {
  EM_CUDA_GRID_STRIDE(i, n) em_ksgd(&s, &p[i], g[i], buf ? &buf[i] : NULL);
}

__global__ void adam_kernel(em_kadam_scalars s, float *p, const float *g, float *m, float *v,
                            int64_t n) {
  EM_CUDA_GRID_STRIDE(i, n) em_kadam(&s, &p[i], g[i], &m[i], &v[i]);
}

em_status em_cuda_sgd_step(em_tensor *p, const em_tensor *g, em_tensor *buf, double lr, double wd,
                      double momentum, double dampening, bool nesterov, bool first) {
  EM_ASSERT(em_tensor_is_contiguous(p) && em_tensor_is_contiguous(g) &&
            (!buf || em_tensor_is_contiguous(buf)));
  em_cuda_ctx *c = em_cuda_enter_t(p);
  int64_t n = em_tensor_numel(p);
  if (!n) return em_cuda_kernel_end();
  em_ksgd_scalars s;
  em_ksgd_scalars_init(&s, lr, wd, momentum, dampening, nesterov ? 1 : 0, first ? 1 : 0);
  sgd_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
      s, em_f32(p), em_f32(g), buf ? em_f32(buf) : NULL, n);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}

em_status em_cuda_adam_step(em_tensor *p, const em_tensor *g, em_tensor *m, em_tensor *v,
                       int64_t step, double lr, double beta1, double beta2, double eps,
                       double wd, bool decoupled) {
  EM_ASSERT(em_tensor_is_contiguous(p) && em_tensor_is_contiguous(g) &&
            em_tensor_is_contiguous(m) && em_tensor_is_contiguous(v));
  em_cuda_ctx *c = em_cuda_enter_t(p);
  int64_t n = em_tensor_numel(p);
  if (!n) return em_cuda_kernel_end();
  em_kadam_scalars s;
  em_kadam_scalars_init(&s, step, lr, beta1, beta2, eps, wd, decoupled ? 1 : 0);
  adam_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
      s, em_f32(p), em_f32(g), em_f32(m), em_f32(v), n);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}
