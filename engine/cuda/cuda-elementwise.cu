/* cuda-elementwise.cu: the element-wise kernels of the CUDA backend: fill
 * and copy (every dtype, any strides, broadcast and conversion), binary,
 * unary and the unary backward (f32). Each is a grid-stride loop over the
 * output's elements; the math is that of engine/device/kernels/
 * kern-elementwise.h, shared with the reference device. */
#include "cuda-private.h"

#include "kernels/kern-elementwise.h"

/* ---- fill and copy ------------------------------------------------------- */

template <typename T>
__global__ void fill_kernel(T *y, em_cuda_arg ya, int64_t n, T v) {
  EM_CUDA_GRID_STRIDE(i, n) y[em_cuda_at(ya, i)] = v;
}

/* v as dtype T, the reference device's rule (ref-kernels.c store_f): a
 * float to an integer dtype goes through int64 (truncation), so that
 * -1 fills u8 with 255 as on the host, not with the device's saturated 0. */
template <typename T>
static __host__ __device__ __forceinline__ T from_double(double v) {
  return (T)(int64_t)v;
}
template <>
__host__ __device__ __forceinline__ float from_double<float>(double v) {
  return (float)v;
}
template <>
__host__ __device__ __forceinline__ double from_double<double>(double v) {
  return v;
}

template <typename T>
static void fill_as(em_cuda_ctx *c, em_tensor *y, double v) {
  int64_t n = em_tensor_numel(y);
  if (!n) return;
  em_cuda_arg ya = em_cuda_arg_of(y, y);
  fill_kernel<T><<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
      (T *)y->data, ya, n, from_double<T>(v));
  EM_CUDA_LAUNCHED();
}

void em_cuda_fill_in(em_tensor *y, double v) {
  em_cuda_ctx *c = em_cuda_enter_t(y);
  switch (y->dtype) {
  case EM_DTYPE_F32: fill_as<float>(c, y, v); break;
  case EM_DTYPE_F64: fill_as<double>(c, y, v); break;
  case EM_DTYPE_I32: fill_as<int32_t>(c, y, v); break;
  case EM_DTYPE_I64: fill_as<int64_t>(c, y, v); break;
  case EM_DTYPE_U8: fill_as<uint8_t>(c, y, v); break;
  default: EM_ASSERT(!"cuda fill: unknown dtype");
  }
}

em_status em_cuda_fill(em_tensor *y, double v) {
  em_cuda_fill_in(y, v);
  return em_cuda_kernel_end();
}

/* A value in transit between dtypes: integers as int64, floats as double,
 * so that integers stay exact and every conversion is the reference
 * device's (float -> integer truncates through int64: from_double). */
typedef struct {
  int64_t i;
  double d;
  int is_int;
} any_value;

__device__ __forceinline__ any_value load_any(const void *base, int dt, int64_t at) {
  any_value v;
  v.i = 0;
  v.d = 0;
  v.is_int = 1;
  switch (dt) {
  case EM_DTYPE_F32: v.d = ((const float *)base)[at]; v.is_int = 0; break;
  case EM_DTYPE_F64: v.d = ((const double *)base)[at]; v.is_int = 0; break;
  case EM_DTYPE_I32: v.i = ((const int32_t *)base)[at]; break;
  case EM_DTYPE_I64: v.i = ((const int64_t *)base)[at]; break;
  default: v.i = ((const uint8_t *)base)[at]; break; /* EM_DTYPE_U8 */
  }
  return v;
}

template <typename T>
__device__ __forceinline__ T convert_any(any_value v) {
  return v.is_int ? (T)v.i : from_double<T>(v.d);
}

__device__ __forceinline__ void store_any(void *base, int dt, int64_t at, any_value v) {
  switch (dt) {
  case EM_DTYPE_F32: ((float *)base)[at] = convert_any<float>(v); break;
  case EM_DTYPE_F64: ((double *)base)[at] = convert_any<double>(v); break;
  case EM_DTYPE_I32: ((int32_t *)base)[at] = convert_any<int32_t>(v); break;
  case EM_DTYPE_I64: ((int64_t *)base)[at] = convert_any<int64_t>(v); break;
  default: ((uint8_t *)base)[at] = convert_any<uint8_t>(v); break; /* EM_DTYPE_U8 */
  }
}

/* Same dtype: a copy of T-sized elements (by size, so 3 instantiations). */
template <typename T>
__global__ void copy_same_kernel(T *y, em_cuda_arg ya, const T *x, em_cuda_arg xa, int64_t n) {
  EM_CUDA_GRID_STRIDE(i, n) y[em_cuda_at(ya, i)] = x[em_cuda_at(xa, i)];
}

__global__ void copy_convert_kernel(void *y, int ydt, em_cuda_arg ya, const void *x, int xdt,
                                    em_cuda_arg xa, int64_t n) {
  EM_CUDA_GRID_STRIDE(i, n) store_any(y, ydt, em_cuda_at(ya, i), load_any(x, xdt, em_cuda_at(xa, i)));
}

template <typename T>
static void copy_same(cudaStream_t s, em_tensor *y, const em_tensor *x, int64_t n) {
  copy_same_kernel<T><<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, s>>>(
      (T *)y->data, em_cuda_arg_of(y, y), (const T *)x->data, em_cuda_arg_of(y, x), n);
  EM_CUDA_LAUNCHED();
}

em_status em_cuda_copy(em_tensor *y, const em_tensor *x) {
  em_cuda_ctx *c = em_cuda_enter_t(y);
  int64_t n = em_tensor_numel(y);
  if (!n) return em_cuda_kernel_end();
  cudaStream_t s = em_cuda_stream(c);
  if (y->dtype == x->dtype && em_tensor_same_shape(x, y) && em_tensor_is_contiguous(x) &&
      em_tensor_is_contiguous(y)) {
    EM_CUDA_KCHECK(cudaMemcpyAsync(em_tensor_ptr(y), em_tensor_ptr(x), em_tensor_nbytes(y),
                                   cudaMemcpyDeviceToDevice, s));
    return em_cuda_kernel_end();
  }
  if (y->dtype == x->dtype) {
    switch (em_dtype_size(y->dtype)) {
    case 1: copy_same<uint8_t>(s, y, x, n); return em_cuda_kernel_end();
    case 4: copy_same<uint32_t>(s, y, x, n); return em_cuda_kernel_end();
    case 8: copy_same<uint64_t>(s, y, x, n); return em_cuda_kernel_end();
    default: EM_ASSERT(!"cuda copy: unknown dtype size");
    }
  }
  copy_convert_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, s>>>(
      y->data, (int)y->dtype, em_cuda_arg_of(y, y), x->data, (int)x->dtype, em_cuda_arg_of(y, x),
      n);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}

/* ---- binary -------------------------------------------------------------- */

__global__ void binary_kernel(int op, bool acc, float *y, em_cuda_arg ya, const float *a,
                              em_cuda_arg aa, const float *b, em_cuda_arg ba, int64_t n) {
  EM_CUDA_GRID_STRIDE(i, n) {
    float r = em_kbin_f(op, a[em_cuda_at(aa, i)], b[em_cuda_at(ba, i)]);
    int64_t at = em_cuda_at(ya, i);
    y[at] = acc ? y[at] + r : r;
  }
}

em_status em_cuda_binary(em_kbin op, bool acc, em_tensor *y, const em_tensor *a, const em_tensor *b) {
  EM_ASSERT(y->dtype == EM_DTYPE_F32 && a->dtype == EM_DTYPE_F32 && b->dtype == EM_DTYPE_F32);
  em_cuda_ctx *c = em_cuda_enter_t(y);
  int64_t n = em_tensor_numel(y);
  if (!n) return em_cuda_kernel_end();
  binary_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
      (int)op, acc, (float *)y->data, em_cuda_arg_of(y, y), (const float *)a->data,
      em_cuda_arg_of(y, a), (const float *)b->data, em_cuda_arg_of(y, b), n);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}

/* ---- masked_fill ---------------------------------------------------------- */

__global__ void masked_fill_kernel(bool acc, float *y, em_cuda_arg ya, const float *x, em_cuda_arg xa,
                                   const uint8_t *m, em_cuda_arg ma, int64_t n, float v) {
  EM_CUDA_GRID_STRIDE(i, n) {
    float r = em_kmasked_f(m[em_cuda_at(ma, i)], x[em_cuda_at(xa, i)], v);
    int64_t at = em_cuda_at(ya, i);
    y[at] = acc ? y[at] + r : r;
  }
}

em_status em_cuda_masked_fill(bool acc, em_tensor *y, const em_tensor *x, const em_tensor *mask,
                              double v) {
  EM_ASSERT(y->dtype == EM_DTYPE_F32 && x->dtype == EM_DTYPE_F32 && mask->dtype == EM_DTYPE_U8);
  em_cuda_ctx *c = em_cuda_enter_t(y);
  int64_t n = em_tensor_numel(y);
  if (!n) return em_cuda_kernel_end();
  masked_fill_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
      acc, (float *)y->data, em_cuda_arg_of(y, y), (const float *)x->data, em_cuda_arg_of(y, x),
      (const uint8_t *)mask->data, em_cuda_arg_of(y, mask), n, (float)v);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}

/* ---- unary --------------------------------------------------------------- */

__global__ void unary_kernel(int op, float *y, em_cuda_arg ya, const float *x, em_cuda_arg xa,
                             int64_t n, float p0, float p1) {
  EM_CUDA_GRID_STRIDE(i, n) y[em_cuda_at(ya, i)] = em_kun_f(op, x[em_cuda_at(xa, i)], p0, p1);
}

em_status em_cuda_unary(em_kun op, em_tensor *y, const em_tensor *x, double p0, double p1) {
  EM_ASSERT(y->dtype == EM_DTYPE_F32 && x->dtype == EM_DTYPE_F32);
  em_cuda_ctx *c = em_cuda_enter_t(y);
  int64_t n = em_tensor_numel(y);
  if (!n) return em_cuda_kernel_end();
  unary_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
      (int)op, (float *)y->data, em_cuda_arg_of(y, y), (const float *)x->data,
      em_cuda_arg_of(y, x), n, (float)p0, (float)p1);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}

/* x or y may be NULL (the one the op's derivative does not read). */
__global__ void unary_backward_kernel(int op, bool acc, float *gx, em_cuda_arg gxa,
                                      const float *g, em_cuda_arg ga, const float *x,
                                      em_cuda_arg xa, const float *y, em_cuda_arg ya, int64_t n,
                                      float p0, float p1) {
  EM_CUDA_GRID_STRIDE(i, n) {
    float xv = x ? x[em_cuda_at(xa, i)] : 0.f;
    float yv = y ? y[em_cuda_at(ya, i)] : 0.f;
    float r = em_kun_df(op, g[em_cuda_at(ga, i)], xv, yv, p0, p1);
    int64_t at = em_cuda_at(gxa, i);
    gx[at] = acc ? gx[at] + r : r;
  }
}

em_status em_cuda_unary_backward(em_kun op, bool acc, em_tensor *gx, const em_tensor *g,
                            const em_tensor *x, const em_tensor *y, double p0, double p1) {
  EM_ASSERT(gx->dtype == EM_DTYPE_F32 && g->dtype == EM_DTYPE_F32);
  em_cuda_ctx *c = em_cuda_enter_t(gx);
  int64_t n = em_tensor_numel(gx);
  if (!n) return em_cuda_kernel_end();
  bool use_y = em_kun_uses_y((int)op) != 0;
  const em_tensor *xr = use_y ? NULL : x, *yr = use_y ? y : NULL;
  EM_ASSERT((use_y ? yr : xr) != NULL && "cuda unary_backward: the operand f' reads is missing");
  em_cuda_arg none;
  memset(&none, 0, sizeof none);
  unary_backward_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(
      (int)op, acc, (float *)gx->data, em_cuda_arg_of(gx, gx), (const float *)g->data,
      em_cuda_arg_of(gx, g), xr ? (const float *)xr->data : NULL,
      xr ? em_cuda_arg_of(gx, xr) : none, yr ? (const float *)yr->data : NULL,
      yr ? em_cuda_arg_of(gx, yr) : none, n, (float)p0, (float)p1);
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}
