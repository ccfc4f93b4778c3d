/* cuda-conv.cu: 2-D convolution of the CUDA backend on cuDNN (NCHW):
 * forward, backward data, backward filter, and the bias through
 * cudnnAddTensor / cudnnConvolutionBackwardBias.
 *
 * Each direction's algorithm is chosen once per shape (device, amp mode
 * and every size, stride, padding, dilation and group count) by
 * cudnnGetConvolution*Algorithm_v7 and cached: the first the heuristics
 * rank that succeeds and is deterministic (so that two runs give the same
 * gradients), in f32 one that uses plain FMA arithmetic (no TF32, as the
 * GEMM); the descriptors are made once per shape too. Its workspace
 * comes from the caching allocator for the call.
 *
 * amp (EM_AMP_BF16 / F16): cuDNN's legacy API has no mixed-type
 * convolution, so the operands are copied to bf16 / f16 scratch tensors,
 * the convolution runs with f32 accumulation (PSEUDO_HALF / BF16 config)
 * into a bf16 / f16 result that is widened into the f32 output; the
 * result is thus rounded once to the amp type, as PyTorch's autocast
 * convolution returns it. The bias stays f32. Where cuDNN has no half
 * algorithm for a shape (NO_HALF), that direction runs in f32 (FMA) on
 * operands rounded to the amp type, unrounded f32 output: the reference
 * device's arithmetic. */
#include "cuda-libs.h"

#include <array>
#include <limits.h>
#include <map>
#include <mutex>

namespace {

enum { DIR_FWD, DIR_BWD_DATA, DIR_BWD_FILTER };

typedef std::array<int, 18> ConvKey;

struct ConvAlgo {
  int algo; /* NO_HALF: amp, and cuDNN has no half algorithm for the shape */
  cudnnMathType_t math;
};

/* amp where every result of the heuristics failed (a configuration this
 * cuDNN lacks): the convolution runs in f32 on operands rounded to the
 * amp type (em_kround_amp), the reference device's arithmetic, instead of
 * failing. */
#define NO_HALF (-1)

int as_int(int64_t v) {
  EM_ASSERT(v >= 0 && v <= INT_MAX && "cuda conv2d: a size beyond cuDNN's 32-bit sizes");
  return (int)v;
}

cudnnDataType_t data_type(int amp) {
  return amp == EM_AMP_BF16 ? CUDNN_DATA_BFLOAT16 : amp == EM_AMP_F16 ? CUDNN_DATA_HALF
                                                                        : CUDNN_DATA_FLOAT;
}

/* The descriptors of one convolution (x (N, C, H, W), w (K, C/groups, kh,
 * kw), y (N, K, OH, OW)) in the data type of the amp mode, and the
 * algorithm of their direction once decided (algo_of). */
struct ConvDescs {
  cudnnTensorDescriptor_t x, y, y32, b;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  bool decided = false;
  ConvAlgo algo;

  ConvDescs(int amp, const em_tensor *xt, const em_tensor *wt, const em_tensor *yt,
            const em_conv2d_params *p) {
    cudnnDataType_t dt = data_type(amp);
    int N = as_int(xt->shape[0]), C = as_int(xt->shape[1]), H = as_int(xt->shape[2]),
        W = as_int(xt->shape[3]);
    int K = as_int(wt->shape[0]), CG = as_int(wt->shape[1]), KH = as_int(wt->shape[2]),
        KW = as_int(wt->shape[3]);
    int OH = as_int(yt->shape[2]), OW = as_int(yt->shape[3]);
    EM_CUDNN_KCHECK(cudnnCreateTensorDescriptor(&x));
    EM_CUDNN_KCHECK(cudnnCreateTensorDescriptor(&y));
    EM_CUDNN_KCHECK(cudnnCreateTensorDescriptor(&y32));
    EM_CUDNN_KCHECK(cudnnCreateTensorDescriptor(&b));
    EM_CUDNN_KCHECK(cudnnCreateFilterDescriptor(&w));
    EM_CUDNN_KCHECK(cudnnCreateConvolutionDescriptor(&conv));
    EM_CUDNN_KCHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, dt, N, C, H, W));
    EM_CUDNN_KCHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, dt, N, K, OH, OW));
    EM_CUDNN_KCHECK(
        cudnnSetTensor4dDescriptor(y32, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, OH, OW));
    EM_CUDNN_KCHECK(cudnnSetTensor4dDescriptor(b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, K, 1, 1));
    EM_CUDNN_KCHECK(cudnnSetFilter4dDescriptor(w, dt, CUDNN_TENSOR_NCHW, K, CG, KH, KW));
    EM_CUDNN_KCHECK(cudnnSetConvolution2dDescriptor(
        conv, p->padding[0], p->padding[1], p->stride[0], p->stride[1], p->dilation[0],
        p->dilation[1], CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    EM_CUDNN_KCHECK(cudnnSetConvolutionGroupCount(conv, p->groups));
    EM_CUDNN_KCHECK(cudnnSetConvolutionMathType(conv, amp ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  }

  static ConvKey key_of(int index, int amp, int dir, const em_tensor *xt, const em_tensor *wt,
                        const em_conv2d_params *p) {
    return ConvKey{{index, amp, dir, as_int(xt->shape[0]), as_int(xt->shape[1]),
                    as_int(xt->shape[2]), as_int(xt->shape[3]), as_int(wt->shape[0]),
                    as_int(wt->shape[2]), as_int(wt->shape[3]), p->padding[0], p->padding[1],
                    p->stride[0], p->stride[1], p->dilation[0], p->dilation[1], p->groups,
                    as_int(wt->shape[1])}};
  }

  ~ConvDescs() {
    (void)EM_CUDNN_CHECK(cudnnDestroyTensorDescriptor(x));
    (void)EM_CUDNN_CHECK(cudnnDestroyTensorDescriptor(y));
    (void)EM_CUDNN_CHECK(cudnnDestroyTensorDescriptor(y32));
    (void)EM_CUDNN_CHECK(cudnnDestroyTensorDescriptor(b));
    (void)EM_CUDNN_CHECK(cudnnDestroyFilterDescriptor(w));
    (void)EM_CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(conv));
  }
};

/* The descriptors of a key, made once and kept for the process (making
 * six descriptors per call costs more than many of the small kernels).
 * The key names the device, and a device's descriptors are used (their
 * math type set, their algorithm decided) only under its cuDNN lock. */
std::mutex cache_lock;
std::map<ConvKey, ConvDescs *> descs_cache;

ConvDescs *descs_of(int index, int amp, int dir, const em_tensor *x, const em_tensor *w,
                    const em_tensor *y, const em_conv2d_params *p) {
  ConvKey k = ConvDescs::key_of(index, amp, dir, x, w, p);
  {
    std::lock_guard<std::mutex> g(cache_lock);
    auto it = descs_cache.find(k);
    if (it != descs_cache.end()) return it->second;
  }
  ConvDescs *d = new ConvDescs(amp, x, w, y, p);
  std::lock_guard<std::mutex> g(cache_lock);
  auto ins = descs_cache.insert(std::make_pair(k, d));
  if (!ins.second) { /* another thread made them meanwhile */
    delete d;
    return ins.first->second;
  }
  return d;
}

/* A workspace bigger than this (FFT algorithms on large inputs can ask
 * for gigabytes) is not worth an out-of-memory error: the next ranked
 * algorithm is taken instead. */
const size_t kMaxWorkspace = (size_t)512 << 20;

/* The first acceptable of the ranked results: succeeded, deterministic,
 * a workspace of at most kMaxWorkspace, and (f32) not a tensor-core one;
 * -1 when none. The heuristics may
 * report an FMA algorithm as CUDNN_DEFAULT_MATH even though the
 * descriptor asked for CUDNN_FMA_MATH, so f32 rejects only the tensor-op
 * results and always runs with CUDNN_FMA_MATH (math_of), as PyTorch does
 * with TF32 off; requiring CUDNN_FMA_MATH here would fall back to the
 * slow default algorithm for every shape. */
template <typename Perf>
int pick(const Perf *perf, int n, int amp) {
  for (int i = 0; i < n; i++) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (perf[i].determinism != CUDNN_DETERMINISTIC) continue;
    if (perf[i].memory > kMaxWorkspace) continue;
    if (!amp && (perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
                 perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      continue;
    return i;
  }
  return -1;
}

/* The math type to run a picked result with: f32 always plain FMA (no
 * TF32), amp the result's own (tensor cores allowed). */
template <typename Perf>
cudnnMathType_t math_of(const Perf *perf, int i, int amp) {
  if (!amp) return CUDNN_FMA_MATH;
  return i >= 0 ? perf[i].mathType : CUDNN_TENSOR_OP_MATH;
}

/* The algorithm from cuDNN's ranked results (pick), or the fallback
 * (f32) / NO_HALF (amp) when none is acceptable. */
template <typename Perf>
ConvAlgo decide(const Perf *perf, int n, int amp, int fallback) {
  ConvAlgo a;
  int i = pick(perf, n, amp);
  a.algo = i >= 0 ? (int)perf[i].algo : amp ? NO_HALF : fallback;
  a.math = math_of(perf, i, amp);
  return a;
}

ConvAlgo algo_fwd(cudnnHandle_t h, ConvDescs &d, int amp) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int n = 0;
  EM_CUDNN_KCHECK(cudnnGetConvolutionForwardAlgorithm_v7(
      h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf));
  return decide(perf, n, amp, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
}

ConvAlgo algo_bwd_data(cudnnHandle_t h, ConvDescs &d, int amp) {
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int n = 0;
  EM_CUDNN_KCHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      h, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf));
  return decide(perf, n, amp, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
}

ConvAlgo algo_bwd_filter(cudnnHandle_t h, ConvDescs &d, int amp) {
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int n = 0;
  EM_CUDNN_KCHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf));
  return decide(perf, n, amp, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
}

/* ---- half copies ------------------------------------------------------------ */

__global__ void widen_bf16_kernel(float *dst, const __nv_bfloat16 *src, int64_t n) {
  EM_CUDA_GRID_STRIDE(i, n) dst[i] = __bfloat162float(src[i]);
}
__global__ void widen_f16_kernel(float *dst, const __half *src, int64_t n) {
  EM_CUDA_GRID_STRIDE(i, n) dst[i] = __half2float(src[i]);
}

void widen(em_cuda_ctx *c, int amp, float *dst, const void *src, int64_t n) {
  if (!n) return;
  cudaStream_t s = em_cuda_stream(c);
  if (amp == EM_AMP_BF16)
    widen_bf16_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, s>>>(
        dst, (const __nv_bfloat16 *)src, n);
  else
    widen_f16_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, s>>>(dst, (const __half *)src, n);
  EM_CUDA_LAUNCHED();
}

/* Scratch buffers of one call, freed together (stream order keeps that
 * safe). ok is false when an allocation failed (the sticky error is
 * recorded; the call then does nothing). */
struct Scratch {
  int index;
  int n = 0;
  void *p[6];
  size_t bytes[6];
  bool ok = true;
  explicit Scratch(int i) : index(i) {}
  void *get(size_t nbytes, const char *what) {
    if (!ok) return NULL;
    EM_ASSERT(n < 6);
    void *q = nbytes ? em_cuda_scratch(index, nbytes, what) : NULL;
    if (nbytes && !q) {
      ok = false;
      return NULL;
    }
    p[n] = q;
    bytes[n++] = nbytes;
    return q;
  }
  ~Scratch() {
    for (int i = n - 1; i >= 0; i--)
      if (p[i]) em_cuda_scratch_free(index, p[i], bytes[i]);
  }
};

/* A half copy of f32 tensor t (contiguous) in scratch, or NULL. */
void *half_copy(em_cuda_ctx *c, Scratch &s, int amp, const em_tensor *t) {
  int64_t n = em_tensor_numel(t);
  void *h = s.get((size_t)n * 2, "conv2d (amp operands)");
  if (h) em_cuda_to_half(c, amp, h, em_f32(t), n);
  return h;
}

__global__ void round_amp_kernel(float *dst, const float *src, int64_t n, int amp) {
  EM_CUDA_GRID_STRIDE(i, n) dst[i] = em_kround_amp(amp, src[i]);
}

/* Operand t as the convolution reads it: t itself (amp off), its half
 * copy (half), or an f32 copy rounded to the amp type (NO_HALF). */
const void *operand(em_cuda_ctx *c, Scratch &s, int amp, bool half, const em_tensor *t) {
  if (!amp) return em_tensor_ptr(t);
  if (half) return half_copy(c, s, amp, t);
  int64_t n = em_tensor_numel(t);
  float *r = (float *)s.get((size_t)n * sizeof(float), "conv2d (amp operands)");
  if (r && n) {
    round_amp_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(r, em_f32(t),
                                                                                  n, amp);
    EM_CUDA_LAUNCHED();
  }
  return r;
}

typedef ConvAlgo (*algo_fn)(cudnnHandle_t, ConvDescs &, int);

/* d's algorithm: asked of cuDNN (f) on the first call only. */
ConvAlgo algo_of(cudnnHandle_t h, algo_fn f, ConvDescs &d, int amp) {
  if (!d.decided) {
    d.algo = f(h, d, amp);
    d.decided = true;
  }
  return d.algo;
}

/* The descriptors (cached: descs_of) and algorithm of one direction: the
 * amp mode's (*half true under amp), or the f32 ones when amp has no half
 * algorithm. */
ConvDescs *choose(cudnnHandle_t h, algo_fn f, int index, int amp, int dir, const em_tensor *x,
                  const em_tensor *w, const em_tensor *y, const em_conv2d_params *p,
                  ConvAlgo *a, bool *half) {
  ConvDescs *d = descs_of(index, amp, dir, x, w, y, p);
  *a = algo_of(h, f, *d, amp);
  *half = amp && a->algo != NO_HALF;
  if (amp && !*half) {
    d = descs_of(index, 0, dir, x, w, y, p);
    *a = algo_of(h, f, *d, 0);
  }
  return d;
}

/* Holds the device's cuDNN lock for a scope. */
struct DnnLock {
  em_cuda_ctx *c;
  explicit DnnLock(em_cuda_ctx *ctx) : c(ctx) { em_cuda_cudnn_lock(c); }
  ~DnnLock() { em_cuda_cudnn_unlock(c); }
};

} /* namespace */

em_status em_cuda_conv2d_forward(int amp, em_tensor *y, const em_tensor *x, const em_tensor *w,
                            const em_tensor *b, const em_conv2d_params *p) {
  EM_ASSERT(em_tensor_is_contiguous(x) && em_tensor_is_contiguous(w) && em_tensor_is_contiguous(y));
  em_cuda_ctx *c = em_cuda_enter_t(y);
  if (!em_tensor_numel(y)) return em_cuda_kernel_end();
  int index = em_cuda_index(c);
  cudnnHandle_t h = em_cuda_cudnn(c);
  if (!h) return em_cuda_kernel_end(); /* out of device memory: the pending error says so */
  DnnLock held(c);
  ConvAlgo a;
  bool half;
  ConvDescs &d = *choose(h, algo_fwd, index, amp, DIR_FWD, x, w, y, p, &a, &half);
  EM_CUDNN_KCHECK(cudnnSetConvolutionMathType(d.conv, a.math));
  size_t ws = 0;
  EM_CUDNN_KCHECK(cudnnGetConvolutionForwardWorkspaceSize(
      h, d.x, d.w, d.conv, d.y, (cudnnConvolutionFwdAlgo_t)a.algo, &ws));
  Scratch s(index);
  const void *xp = operand(c, s, amp, half, x), *wp = operand(c, s, amp, half, w);
  void *yp = half ? s.get((size_t)em_tensor_numel(y) * 2, "conv2d (amp result)") : em_tensor_ptr(y);
  void *work = s.get(ws, "conv2d (cuDNN workspace)");
  if (!s.ok) return em_cuda_kernel_end();
  float one = 1.f, zero = 0.f;
  EM_CUDNN_KCHECK(cudnnConvolutionForward(h, &one, d.x, xp, d.w, wp, d.conv,
                                          (cudnnConvolutionFwdAlgo_t)a.algo, work, ws, &zero,
                                          d.y, yp));
  if (half) widen(c, amp, em_f32(y), yp, em_tensor_numel(y));
  if (b) EM_CUDNN_KCHECK(cudnnAddTensor(h, &one, d.b, em_tensor_ptr(b), &one, d.y32, em_f32(y)));
  return em_cuda_kernel_end();
}

em_status em_cuda_conv2d_backward(int amp, em_tensor *gx, em_tensor *gw, em_tensor *gb,
                             const em_tensor *g, const em_tensor *x, const em_tensor *w,
                             const em_conv2d_params *p) {
  EM_ASSERT(em_tensor_is_contiguous(g) && em_tensor_is_contiguous(x) && em_tensor_is_contiguous(w));
  em_cuda_ctx *c = em_cuda_enter_t(g);
  int index = em_cuda_index(c);
  cudnnHandle_t h = em_cuda_cudnn(c);
  if (!h) return em_cuda_kernel_end(); /* out of device memory: the pending error says so */
  DnnLock held(c);
  float one = 1.f, zero = 0.f;
  if (gb) {
    if (!em_tensor_numel(g)) em_cuda_fill_in(gb, 0.0);
    else {
      ConvDescs &d = *descs_of(index, 0, DIR_FWD, x, w, g, p);
      EM_CUDNN_KCHECK(cudnnConvolutionBackwardBias(h, &one, d.y32, em_tensor_ptr(g), &zero, d.b,
                                                   em_f32(gb)));
    }
  }
  if (!em_tensor_numel(g)) {
    if (gx) em_cuda_fill_in(gx, 0.0);
    if (gw) em_cuda_fill_in(gw, 0.0);
    return em_cuda_kernel_end();
  }
  Scratch s(index);
  /* g as each direction reads it (its half or rounded copy made once) */
  const void *g_half = NULL, *g_round = NULL;
  auto g_as = [&](bool half) -> const void * {
    if (!amp) return em_tensor_ptr(g);
    const void *&slot = half ? g_half : g_round;
    if (!slot) slot = operand(c, s, amp, half, g);
    return slot;
  };

  if (gx) {
    ConvAlgo a;
    bool half;
    ConvDescs &d = *choose(h, algo_bwd_data, index, amp, DIR_BWD_DATA, x, w, g, p, &a, &half);
    EM_CUDNN_KCHECK(cudnnSetConvolutionMathType(d.conv, a.math));
    size_t ws = 0;
    EM_CUDNN_KCHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
        h, d.w, d.y, d.conv, d.x, (cudnnConvolutionBwdDataAlgo_t)a.algo, &ws));
    Scratch s2(index);
    const void *gp = g_as(half);
    const void *wp = operand(c, s2, amp, half, w);
    void *gxp = half ? s2.get((size_t)em_tensor_numel(gx) * 2, "conv2d backward (amp result)")
                     : em_tensor_ptr(gx);
    void *work = s2.get(ws, "conv2d backward (cuDNN workspace)");
    if (!s.ok || !s2.ok) return em_cuda_kernel_end();
    EM_CUDNN_KCHECK(cudnnConvolutionBackwardData(h, &one, d.w, wp, d.y, gp, d.conv,
                                                 (cudnnConvolutionBwdDataAlgo_t)a.algo, work, ws,
                                                 &zero, d.x, gxp));
    if (half) widen(c, amp, em_f32(gx), gxp, em_tensor_numel(gx));
  }
  if (gw) {
    ConvAlgo a;
    bool half;
    ConvDescs &d =
        *choose(h, algo_bwd_filter, index, amp, DIR_BWD_FILTER, x, w, g, p, &a, &half);
    EM_CUDNN_KCHECK(cudnnSetConvolutionMathType(d.conv, a.math));
    size_t ws = 0;
    EM_CUDNN_KCHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        h, d.x, d.y, d.conv, d.w, (cudnnConvolutionBwdFilterAlgo_t)a.algo, &ws));
    Scratch s2(index);
    const void *gp = g_as(half);
    const void *xp = operand(c, s2, amp, half, x);
    void *gwp = half ? s2.get((size_t)em_tensor_numel(gw) * 2, "conv2d backward (amp result)")
                     : em_tensor_ptr(gw);
    void *work = s2.get(ws, "conv2d backward (cuDNN workspace)");
    if (!s.ok || !s2.ok) return em_cuda_kernel_end();
    EM_CUDNN_KCHECK(cudnnConvolutionBackwardFilter(h, &one, d.x, xp, d.y, gp, d.conv,
                                                   (cudnnConvolutionBwdFilterAlgo_t)a.algo, work,
                                                   ws, &zero, d.w, gwp));
    if (half) widen(c, amp, em_f32(gw), gwp, em_tensor_numel(gw));
  }
  return em_cuda_kernel_end();
}
