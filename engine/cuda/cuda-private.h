/* cuda-private.h: what the files of engine/cuda (the CUDA backend,
 * em_cuda_backend) share: the check macros every CUDA runtime call goes
 * through (cuBLAS / cuDNN ones, the library handles and the amp
 * conversion are in cuda-libs.h), the per-device context (device, stream),
 * the caching allocator's entry points, launch helpers and block
 * reductions, and the kernel entries each op family's .cu defines for the
 * em_kernels table (cuda-device.cu).
 *
 * Every file here is CUDA C++ compiled by nvcc; the engine headers are C11
 * and are included inside extern "C". Errors: a failed call inside a
 * backend entry that returns a status is reported through em_error; inside
 * a kernel entry it becomes the entry's status (EM_CUDA_KCHECK below),
 * which the op front-end turns into the thread's device error naming the
 * call, the function and the line. Device memory a kernel needs
 * for scratch comes from em_device_alloc, which records the sticky
 * out-of-memory error when it fails; the kernel then does nothing. */
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

/* em-error.h declares em_assert_fail with C11's _Noreturn. */
#if defined(__cplusplus) && !defined(_Noreturn)
#define _Noreturn __attribute__((noreturn))
#endif

extern "C" {
#include "em-backend.h"
#include "em-amp.h"
#include "em-device.h"
#include "em-error.h"
#include "em-tensor.h"
}

#include "kernels/kern-common.h"

/* The check macros every CUDA runtime call goes through (EM_CUDA_CHECK,
 * EM_CUDA_RAISE outside kernel entries, EM_CUDA_KCHECK inside them). */
#include "cuda-check.h"

/* ---- devices ------------------------------------------------------------ */
/* One device's context, made on first use: its stream (a non-default
 * one: every kernel, copy and library call of the device goes on it), then
 * the cuBLAS and cuDNN handles when first asked for (cuda-libs.h). */
typedef struct em_cuda_ctx em_cuda_ctx;

/* The number of devices (0 when there is no driver or no device); the
 * reason is kept for why_none. */
int em_cuda_count(void);
/* Makes device `index` current on this thread and returns its context
 * (its stream made on first use); asserts when it cannot be. */
em_cuda_ctx *em_cuda_enter(int index);
/* em_cuda_enter for the device of a tensor. */
static inline em_cuda_ctx *em_cuda_enter_t(const em_tensor *t) {
  return em_cuda_enter(t->device.index);
}
cudaStream_t em_cuda_stream(em_cuda_ctx *c);
int em_cuda_index(const em_cuda_ctx *c);
/* The compute capability major of the context's device. */
int em_cuda_cc_major(const em_cuda_ctx *c);

/* ---- the caching allocator (cuda-alloc.cu) ------------------------------ */
#include "cuda-alloc.h"

/* Scratch device memory for a kernel entry on device `index` (amp operand
 * copies, workspaces): em_device_alloc, so a failure records the sticky
 * out-of-memory error naming `what`; NULL then, and the caller returns
 * without computing. Freed with em_cuda_scratch_free right after queuing
 * the work: the one stream per device orders reuse after it. */
void *em_cuda_scratch(int index, size_t nbytes, const char *what);
void em_cuda_scratch_free(int index, void *p, size_t nbytes);

/* ---- launch helpers ----------------------------------------------------- */
#define EM_CUDA_THREADS 256
/* Blocks for a grid-stride loop over n elements (at most 65535 * 8 so
 * that a grid never gets absurd; the loop covers the rest). */
static inline unsigned em_cuda_blocks(int64_t n) {
  int64_t b = (n + EM_CUDA_THREADS - 1) / EM_CUDA_THREADS;
  if (b < 1) b = 1;
  if (b > 65535 * 8) b = 65535 * 8;
  return (unsigned)b;
}
/* Blocks for a block-per-row loop over `rows` rows (at least 1, at most
 * 65535 * 8; each block strides over the rest). */
static inline unsigned em_cuda_row_blocks(int64_t rows) {
  if (rows < 1) return 1;
  return (unsigned)(rows < 65535 * 8 ? rows : 65535 * 8);
}
#define EM_CUDA_GRID_STRIDE(i, n)                                                   \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);          \
       i += (int64_t)gridDim.x * blockDim.x)

/* The kernel view of tensor t iterated over its own shape. */
em_kview em_cuda_view(const em_tensor *t);
/* The kernel view of x broadcast into y's shape. */
em_kview em_cuda_view_bcast(const em_tensor *y, const em_tensor *x);

/* An operand as a kernel reads it: its view over the iteration shape, and
 * whether that walk is contiguous (then element i is offset + i). */
typedef struct em_cuda_arg {
  em_kview v;
  int contig;
} em_cuda_arg;
/* x broadcast into the iteration shape of y (x may be y itself). */
static inline em_cuda_arg em_cuda_arg_of(const em_tensor *y, const em_tensor *x) {
  em_cuda_arg a;
  a.v = em_cuda_view_bcast(y, x);
  a.contig = em_kview_is_contig(&a.v) && em_kview_numel(&a.v) == em_tensor_numel(x);
  return a;
}
__device__ __forceinline__ int64_t em_cuda_at(const em_cuda_arg &a, int64_t i) {
  return a.contig ? a.v.offset + i : em_kview_at(&a.v, i);
}

/* Block-wide sum of v over blockDim.x threads (a multiple of 32, at most
 * 1024), in double (the statistics want the extra precision); every
 * thread gets the result. Uses 32 doubles of shared memory. */
__device__ __forceinline__ double em_cuda_warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double em_cuda_block_sum_d(double v) {
  __shared__ double part_d[32];
  __shared__ double total_d;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = em_cuda_warp_sum_d(v);
  __syncthreads(); /* part_d may still be read by a previous call */
  if (lane == 0) part_d[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int nw = (int)(blockDim.x + 31) >> 5;
    double s = lane < nw ? part_d[lane] : 0.0;
    s = em_cuda_warp_sum_d(s);
    if (lane == 0) total_d = s;
  }
  __syncthreads();
  return total_d;
}

/* Block-wide maximum of v, a NaN winning (every thread gets the result). */
__device__ __forceinline__ float em_cuda_nanmax(float a, float b) {
  return (a != a || b != b) ? a + b : (a > b ? a : b);
}
__device__ __forceinline__ float em_cuda_block_max(float v) {
  __shared__ float part_m[32];
  __shared__ float total_m;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = em_cuda_nanmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0) part_m[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int nw = (int)(blockDim.x + 31) >> 5;
    float s = lane < nw ? part_m[lane] : part_m[0];
    for (int o = 16; o > 0; o >>= 1) s = em_cuda_nanmax(s, __shfl_xor_sync(0xffffffffu, s, o));
    if (lane == 0) total_m = s;
  }
  __syncthreads();
  return total_m;
}

/* ---- kernel entries (one group per .cu) --------------------------------- */
/* cuda-elementwise.cu */
em_k_fill em_cuda_fill;
/* em_cuda_fill for use inside another kernel entry: a failure stays
 * latched for that entry to return. */
void em_cuda_fill_in(em_tensor *y, double v);
em_k_copy em_cuda_copy;
em_k_binary em_cuda_binary;
em_k_unary em_cuda_unary;
em_k_unary_backward em_cuda_unary_backward;
/* cuda-reduce.cu */
em_k_reduce em_cuda_reduce;
em_k_sum_to em_cuda_sum_to;
em_k_sumsq em_cuda_sumsq;
em_k_unscale em_cuda_unscale;
/* cuda-gemm.cu */
em_k_gemm em_cuda_gemm;
/* cuda-conv.cu */
em_k_conv2d_forward em_cuda_conv2d_forward;
em_k_conv2d_backward em_cuda_conv2d_backward;
/* cuda-pool.cu */
em_k_pool2d_forward em_cuda_pool2d_forward;
em_k_pool2d_backward em_cuda_pool2d_backward;
/* cuda-norm.cu */
em_k_batch_norm_forward em_cuda_batch_norm_forward;
em_k_batch_norm_backward em_cuda_batch_norm_backward;
em_k_layer_norm_forward em_cuda_layer_norm_forward;
em_k_layer_norm_backward em_cuda_layer_norm_backward;
/* cuda-softmax.cu */
em_k_softmax_forward em_cuda_softmax_forward;
em_k_softmax_backward em_cuda_softmax_backward;
em_k_cross_entropy_forward em_cuda_cross_entropy_forward;
em_k_cross_entropy_backward em_cuda_cross_entropy_backward;
/* cuda-embedding.cu */
em_k_embedding_forward em_cuda_embedding_forward;
em_k_embedding_backward em_cuda_embedding_backward;
/* cuda-random.cu */
em_k_dropout_mask em_cuda_dropout_mask;
em_k_masked_fill em_cuda_masked_fill;
/* cuda-sdpa.cu */
em_k_sdpa_forward em_cuda_sdpa_forward;
em_k_sdpa_backward em_cuda_sdpa_backward;
/* cuda-optim.cu */
em_k_sgd_step em_cuda_sgd_step;
em_k_adam_step em_cuda_adam_step;
