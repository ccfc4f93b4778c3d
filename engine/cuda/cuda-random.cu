/* cuda-random.cu: the dropout mask of the CUDA backend. Element i is kept
 * when the Philox draw (seed, counter, i) of engine/device/kernels/
 * kern-random.h is at or above p 2^32, so a mask equals the reference
 * device's for the same (seed, counter) under any launch geometry. One
 * thread per Philox block (four elements). */
#include "cuda-private.h"

#include "kernels/kern-random.h"

__global__ void dropout_mask_kernel(float *mask, int64_t n, uint64_t threshold, float scale,
                                    uint64_t seed, uint64_t counter) {
  int64_t blocks = (n + 3) / 4;
  EM_CUDA_GRID_STRIDE(b, blocks) {
    uint32_t r[4];
    em_krandom_block(seed, counter, (uint64_t)b, r);
    for (int j = 0; j < 4; j++) {
      int64_t i = b * 4 + j;
      if (i < n) mask[i] = (uint64_t)r[j] >= threshold ? scale : 0.f;
    }
  }
}

em_status em_cuda_dropout_mask(em_tensor *mask, double p, uint64_t seed, uint64_t counter) {
  EM_ASSERT(mask->dtype == EM_DTYPE_F32 && em_tensor_is_contiguous(mask));
  em_cuda_ctx *c = em_cuda_enter_t(mask);
  int64_t n = em_tensor_numel(mask);
  if (!n) return em_cuda_kernel_end();
  dropout_mask_kernel<<<em_cuda_blocks((n + 3) / 4), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
      em_f32(mask), n, em_kdropout_threshold(p), em_kdropout_scale(p), seed, counter);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}
