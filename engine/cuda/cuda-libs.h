/* cuda-libs.h: what the files of engine/cuda that call cuBLAS or cuDNN
 * share on top of cuda-private.h (kept apart: these headers are large,
 * and the other files compile faster without them): the libraries' check
 * macros, each device's handles, the cuDNN lock and the f32 -> bf16 / f16
 * conversion of amp operands. */
#pragma once

#include "cuda-private.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudnn.h>

/* As EM_CUDA_CHECK / EM_CUDA_KCHECK (cuda-private.h), for cuBLAS and
 * cuDNN (whose calls are all made from kernel entries). */
em_status em_cuda_check_blas(cublasStatus_t s, const char *call, const char *func, int line);
em_status em_cuda_check_dnn(cudnnStatus_t s, const char *call, const char *func, int line);
#define EM_CUBLAS_CHECK(call) em_cuda_check_blas((call), #call, __func__, __LINE__)
#define EM_CUDNN_CHECK(call) em_cuda_check_dnn((call), #call, __func__, __LINE__)
/* Inside kernel entries: latch the failure (EM_CUDA_KCHECK). */
#define EM_CUBLAS_KCHECK(call) \
  do { if (EM_CUBLAS_CHECK(call) != EM_OK) em_cuda_kernel_fail(); } while (0)
#define EM_CUDNN_KCHECK(call) \
  do { if (EM_CUDNN_CHECK(call) != EM_OK) em_cuda_kernel_fail(); } while (0)

/* cuBLAS, loaded on first use (dlopen of libcublas.so.<major>, found by
 * the programs' rpath): linking it would add about a fifth of a second to
 * the start of every program, GPU or not (libcublasLt's initialisers).
 * The functions the backend calls, by their cuBLAS names. */
typedef struct em_cublas_api {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  /* the C entry point (cublas_api.h adds a C++ overload taking a
   * cudaDataType compute type) */
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                            int, int, int, const void *, const void *,
                                            cudaDataType, int, long long, const void *,
                                            cudaDataType, int, long long, const void *, void *,
                                            cudaDataType, int, long long, int,
                                            cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&cublasGetStatusString) status_string;
} em_cublas_api;
/* NULL (the reason in em_cuda_last_error) when the library cannot be
 * loaded. */
const em_cublas_api *em_cuda_cublas_api(void);

/* The device's handles, made on first use and bound to its stream; NULL
 * when there is no device memory left to make one (the device's pending
 * out-of-memory error is raised: the caller returns without computing) or
 * when making it failed (latched as the calling kernel entry's status,
 * EM_CUDA_KCHECK). */
cublasHandle_t em_cuda_cublas(em_cuda_ctx *c);
cudnnHandle_t em_cuda_cudnn(em_cuda_ctx *c);
/* cuDNN handles must not be used by two threads at once: kernel entries
 * that call cuDNN hold this lock of the device while they do. */
void em_cuda_cudnn_lock(em_cuda_ctx *c);
void em_cuda_cudnn_unlock(em_cuda_ctx *c);

/* Converts n floats of src to bf16 (amp 1) or f16 (amp 2) in dst on the
 * context's stream, rounding to nearest even (cuda-gemm.cu). */
void em_cuda_to_half(em_cuda_ctx *ctx, int amp, void *dst, const float *src, int64_t n);
