/* cuda-gemm.cu: the batched GEMM of the CUDA backend on cuBLAS.
 *
 * Row-major C (m, n) = op(A) (m, k) @ op(B) (k, n) is column-major
 * C^T (n, m) = op(B)^T @ op(A)^T, so cublasGemmStridedBatchedEx gets B
 * before A with m and n swapped; the leading dimensions stay as given.
 * EM_AMP_OFF multiplies in full f32 (CUBLAS_COMPUTE_32F with the handle's
 * default math: no TF32, PyTorch's matmul default). EM_AMP_BF16 / F16 first
 * copies A and B into packed bf16 / f16 scratch matrices (rounded to
 * nearest even, kern-common.h's rule) and multiplies those with f32
 * accumulation and an f32 C (CUBLAS_COMPUTE_32F, tensor cores). */
#include "cuda-libs.h"

#include <limits.h>

/* ---- f32 -> bf16 / f16 ------------------------------------------------------ */

template <typename H>
__device__ __forceinline__ H to_half_t(float f);
template <>
__device__ __forceinline__ __nv_bfloat16 to_half_t<__nv_bfloat16>(float f) {
  return __float2bfloat16_rn(f);
}
template <>
__device__ __forceinline__ __half to_half_t<__half>(float f) {
  return __float2half_rn(f);
}

template <typename H>
__global__ void to_half_kernel(H *dst, const float *src, int64_t n) {
  EM_CUDA_GRID_STRIDE(i, n) dst[i] = to_half_t<H>(src[i]);
}

/* dst (batches, rows, cols) packed = src's matrices (rows, cols) at leading
 * dimension ld, matrix b at src + b * stride. */
template <typename H>
__global__ void pack_half_kernel(H *dst, const float *src, int64_t batches, int64_t rows,
                                 int64_t cols, int64_t ld, int64_t stride) {
  int64_t n = batches * rows * cols;
  EM_CUDA_GRID_STRIDE(i, n) {
    int64_t col = i % cols, r = (i / cols) % rows, b = i / (cols * rows);
    dst[i] = to_half_t<H>(src[b * stride + r * ld + col]);
  }
}

void em_cuda_to_half(em_cuda_ctx *ctx, int amp, void *dst, const float *src, int64_t n) {
  if (!n) return;
  cudaStream_t s = em_cuda_stream(ctx);
  if (amp == EM_AMP_BF16)
    to_half_kernel<__nv_bfloat16><<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, s>>>(
        (__nv_bfloat16 *)dst, src, n);
  else
    to_half_kernel<__half><<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, s>>>((__half *)dst, src, n);
  EM_CUDA_LAUNCHED();
}

static void pack_half(em_cuda_ctx *ctx, int amp, void *dst, const float *src, int64_t batches,
                      int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
  int64_t n = batches * rows * cols;
  if (!n) return;
  cudaStream_t s = em_cuda_stream(ctx);
  if (amp == EM_AMP_BF16)
    pack_half_kernel<__nv_bfloat16><<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, s>>>(
        (__nv_bfloat16 *)dst, src, batches, rows, cols, ld, stride);
  else
    pack_half_kernel<__half><<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, s>>>(
        (__half *)dst, src, batches, rows, cols, ld, stride);
  EM_CUDA_LAUNCHED();
}

/* ---- the GEMM ----------------------------------------------------------------- */

/* C_b = beta C_b (an empty sum, k = 0: cuBLAS may refuse the operands'
 * leading dimensions then). */
__global__ void scale_c_kernel(float *c, int64_t m, int64_t n, int64_t ldc, int64_t stride_c,
                               int64_t batch, float beta) {
  int64_t total = batch * m * n;
  EM_CUDA_GRID_STRIDE(i, total) {
    int64_t j = i % n, r = (i / n) % m, b = i / (n * m);
    float *at = c + b * stride_c + r * ldc + j;
    *at = beta == 0.f ? 0.f : beta * *at;
  }
}

/* The context of the device that holds C (gemm gets raw pointers). */
static em_cuda_ctx *ctx_of(const void *p) {
  cudaPointerAttributes at;
  EM_CUDA_KCHECK(cudaPointerGetAttributes(&at, p));
  EM_ASSERT(at.type == cudaMemoryTypeDevice && "cuda gemm: C is not device memory");
  return em_cuda_enter(at.device);
}

em_status em_cuda_gemm(int amp, em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                       float alpha, const void *av, int64_t lda, int64_t stride_a, const void *bv,
                       int64_t ldb, int64_t stride_b, float beta, void *cv, int64_t ldc,
                       int64_t stride_c, int64_t batch) {
  EM_ASSERT(dt == EM_DTYPE_F32 && "cuda gemm: f32 only"); /* the op front-end checked */
  const float *a = (const float *)av, *b = (const float *)bv;
  float *c = (float *)cv;
  if (m == 0 || n == 0 || batch == 0) return em_cuda_kernel_end();
  EM_ASSERT(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && batch <= INT_MAX &&
            lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX &&
            "cuda gemm: a dimension beyond cuBLAS's 32-bit sizes");
  em_cuda_ctx *ctx = ctx_of(c);
  cublasHandle_t h = em_cuda_cublas(ctx);
  if (!h) return em_cuda_kernel_end(); /* out of device memory: the pending error says so */
  const em_cublas_api *api = em_cuda_cublas_api(); /* loaded: the handle exists */
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;

  if (k == 0) {
    scale_c_kernel<<<em_cuda_blocks(batch * m * n), EM_CUDA_THREADS, 0, em_cuda_stream(ctx)>>>(
        c, m, n, ldc, stride_c, batch, beta);
    EM_CUDA_LAUNCHED();
    return em_cuda_kernel_end();
  }
  if (amp == EM_AMP_OFF) {
    EM_CUBLAS_KCHECK(api->gemm_strided_batched_ex(
        h, opb, opa, (int)n, (int)m, (int)k, &alpha, b, CUDA_R_32F, (int)ldb, stride_b, a,
        CUDA_R_32F, (int)lda, stride_a, &beta, c, CUDA_R_32F, (int)ldc, stride_c, (int)batch,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return em_cuda_kernel_end();
  }

  /* Stored shapes (row-major): A is (m, k), or (k, m) when transposed. */
  int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
  int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
  int64_t a_batches = stride_a ? batch : 1, b_batches = stride_b ? batch : 1;
  size_t a_bytes = (size_t)(a_batches * a_rows * a_cols) * 2;
  size_t b_bytes = (size_t)(b_batches * b_rows * b_cols) * 2;
  int index = em_cuda_index(ctx);
  void *ah = em_cuda_scratch(index, a_bytes, "matmul (amp operands)");
  if (!ah) return em_cuda_kernel_end();
  void *bh = em_cuda_scratch(index, b_bytes, "matmul (amp operands)");
  if (!bh) {
    em_cuda_scratch_free(index, ah, a_bytes);
    return em_cuda_kernel_end();
  }
  pack_half(ctx, amp, ah, a, a_batches, a_rows, a_cols, lda, stride_a);
  pack_half(ctx, amp, bh, b, b_batches, b_rows, b_cols, ldb, stride_b);
  cudaDataType_t ht = amp == EM_AMP_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  long long sa = stride_a ? a_rows * a_cols : 0, sb = stride_b ? b_rows * b_cols : 0;
  EM_CUBLAS_KCHECK(api->gemm_strided_batched_ex(
      h, opb, opa, (int)n, (int)m, (int)k, &alpha, bh, ht, (int)b_cols, sb, ah, ht, (int)a_cols,
      sa, &beta, c, CUDA_R_32F, (int)ldc, stride_c, (int)batch, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
  /* Stream order: the GEMM reads the copies before any later reuse. */
  em_cuda_scratch_free(index, bh, b_bytes);
  em_cuda_scratch_free(index, ah, a_bytes);
  return em_cuda_kernel_end();
}
