/* cuda-sdpa.cu: the fused scaled dot-product attention of the CUDA
 * backend (the sdpa_forward and sdpa_backward entries of em-backend.h),
 * f32: one thread per row over the row bodies of
 * engine/device/kernels/kern-attention.h, which the reference device
 * runs in host loops, so both compute the same formulas in the same
 * order (expf may differ from libm's by an ulp). Forward: a thread per
 * query row (the online softmax, the output row accumulated in place);
 * backward: a thread per query row for gq, then one per key row for gk
 * and gv, each recomputing the weights from q, k and lse, and the dropout
 * mask from its counter. Simple and correct rather than fast: no shared
 * memory tiles, and each pass reads k and v once per row. */
#include "cuda-private.h"

#include "kernels/attention-args.h"

/* rows: N H L */
__global__ void sdpa_forward_kernel(em_ksdpa a, const float *q, const float *k, const float *v,
                                    const unsigned char *kpm, float *o, float *lse, int64_t rows) {
  EM_CUDA_GRID_STRIDE(r, rows) {
    int64_t i = r % a.L, nh = r / a.L;
    em_ksdpa_fwd_row(&a, q, k, v, kpm, o, lse, nh / a.H, nh % a.H, i);
  }
}

/* rows: N H L */
__global__ void sdpa_backward_q_kernel(em_ksdpa a, const float *q, const float *k, const float *v,
                                       const float *g, const float *o, const float *lse,
                                       const unsigned char *kpm, float *gq, int64_t rows) {
  EM_CUDA_GRID_STRIDE(r, rows) {
    int64_t i = r % a.L, nh = r / a.L;
    em_ksdpa_bwd_q_row(&a, q, k, v, g, o, lse, kpm, gq, nh / a.H, nh % a.H, i);
  }
}

/* rows: N H S */
__global__ void sdpa_backward_kv_kernel(em_ksdpa a, const float *q, const float *k,
                                        const float *v, const float *g, const float *o,
                                        const float *lse, const unsigned char *kpm, float *gk,
                                        float *gv, int64_t rows) {
  EM_CUDA_GRID_STRIDE(r, rows) {
    int64_t j = r % a.S, nh = r / a.S;
    em_ksdpa_bwd_kv_row(&a, q, k, v, g, o, lse, kpm, gk, gv, nh / a.H, nh % a.H, j);
  }
}

static const unsigned char *mask_ptr(const em_tensor *kpm) {
  return kpm ? (const unsigned char *)em_tensor_ptr(kpm) : NULL;
}

em_status em_cuda_sdpa_forward(em_tensor *o, em_tensor *lse, const em_tensor *q,
                               const em_tensor *k, const em_tensor *v, const em_tensor *kpm,
                               const em_sdpa_args *args) {
  EM_ASSERT(q->dtype == EM_DTYPE_F32 && em_tensor_is_contiguous(lse));
  em_cuda_ctx *c = em_cuda_enter_t(o);
  em_ksdpa a = em_ksdpa_of(q, k, v, o, NULL, NULL, NULL, NULL, kpm, args);
  int64_t rows = a.N * a.H * a.L;
  if (!rows) return em_cuda_kernel_end();
  sdpa_forward_kernel<<<em_cuda_blocks(rows), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
      a, em_f32(q), em_f32(k), em_f32(v), mask_ptr(kpm), em_f32(o), em_f32(lse), rows);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}

em_status em_cuda_sdpa_backward(em_tensor *gq, em_tensor *gk, em_tensor *gv, const em_tensor *g,
                                const em_tensor *q, const em_tensor *k, const em_tensor *v,
                                const em_tensor *o, const em_tensor *lse, const em_tensor *kpm,
                                const em_sdpa_args *args) {
  EM_ASSERT(q->dtype == EM_DTYPE_F32 && em_tensor_is_contiguous(lse));
  em_cuda_ctx *c = em_cuda_enter_t(o);
  em_ksdpa a = em_ksdpa_of(q, k, v, o, g, gq, gk, gv, kpm, args);
  int64_t qrows = a.N * a.H * a.L, krows = a.N * a.H * a.S;
  if (gq && qrows) {
    sdpa_backward_q_kernel<<<em_cuda_blocks(qrows), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
        a, em_f32(q), em_f32(k), em_f32(v), em_f32(g), em_f32(o), em_f32(lse), mask_ptr(kpm),
        em_f32(gq), qrows);
    EM_CUDA_LAUNCHED();
  }
  if ((gk || gv) && krows) {
    sdpa_backward_kv_kernel<<<em_cuda_blocks(krows), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
        a, em_f32(q), em_f32(k), em_f32(v), em_f32(g), em_f32(o), em_f32(lse), mask_ptr(kpm),
        gk ? em_f32(gk) : NULL, gv ? em_f32(gv) : NULL, krows);
    EM_CUDA_LAUNCHED();
  }
  return em_cuda_kernel_end();
}
