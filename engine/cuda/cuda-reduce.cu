/* cuda-reduce.cu: the reductions of the CUDA backend: sum / max over one
 * dim (with argmax), sum_to (the broadcast gradient's reduction), the sum
 * of squares (gradient-norm clipping) and the gradient scaler's unscale
 * with its finite check.
 *
 * A reduction is described by three views: the output over its own shape,
 * the input's base over the output's shape (index 0 on reduced dims) and
 * the reduced walk (the reduced dims, input strides, offset 0). Long
 * reductions run one block per output element with a block reduction
 * (unless they run over outer dims into many outputs: red_inner); short
 * ones one thread per output element. Sums accumulate in double; a
 * max keeps the first index of the maximum, the first NaN winning (the
 * rule of kern-rows.h's em_krow_max). */
#include "cuda-private.h"

#include "kernels/kern-rows.h"

/* Long reductions (at least this many elements per output) get a block. */
#define LONG_REDUCTION 256

typedef struct {
  em_kview out;  /* output element -> its offset in y (and idx) */
  em_kview base; /* output element -> the offset of its first input */
  em_kview red;  /* reduced element -> offset from base (offset 0) */
  em_kview idx;  /* output element -> its offset in idx (max only) */
  int64_t n_out, n_red;
} reduce_geom;

/* (m, at) after seeing (v, j): the first maximum, the first NaN winning. */
__device__ __forceinline__ void max_step(float &m, int64_t &at, float v, int64_t j) {
  if (m != m) return;
  if (at < 0 || v > m || v != v) {
    m = v;
    at = j;
  }
}
/* Combines two partial maxima of one reduction (at < 0: none). */
__device__ __forceinline__ void max_merge(float &m, int64_t &at, float m2, int64_t at2) {
  if (at2 < 0) return;
  if (at < 0) {
    m = m2;
    at = at2;
    return;
  }
  bool nan1 = m != m, nan2 = m2 != m2;
  bool take;
  if (nan1 || nan2) take = nan2 && (!nan1 || at2 < at);
  else take = m2 > m || (m2 == m && at2 < at);
  if (take) {
    m = m2;
    at = at2;
  }
}

template <int OP>
__global__ void reduce_thread_kernel(bool acc, float *y, int64_t *idx, const float *x,
                                     reduce_geom g) {
  EM_CUDA_GRID_STRIDE(o, g.n_out) {
    const float *xb = x + em_kview_at(&g.base, o);
    int64_t yo = em_kview_at(&g.out, o);
    if (OP == EM_KR_SUM) {
      double s = 0;
      for (int64_t j = 0; j < g.n_red; j++) s += (double)xb[em_kview_at(&g.red, j)];
      y[yo] = acc ? y[yo] + (float)s : (float)s; /* ref-kernels.c's order */
    } else {
      float m = 0.f;
      int64_t at = -1;
      for (int64_t j = 0; j < g.n_red; j++) max_step(m, at, xb[em_kview_at(&g.red, j)], j);
      y[yo] = m;
      if (idx) idx[em_kview_at(&g.idx, o)] = at < 0 ? 0 : at;
    }
  }
}

template <int OP>
__global__ void reduce_block_kernel(bool acc, float *y, int64_t *idx, const float *x,
                                    reduce_geom g) {
  __shared__ float sm[EM_CUDA_THREADS];
  __shared__ int64_t sat[EM_CUDA_THREADS];
  for (int64_t o = blockIdx.x; o < g.n_out; o += gridDim.x) {
    const float *xb = x + em_kview_at(&g.base, o);
    int64_t yo = em_kview_at(&g.out, o);
    if (OP == EM_KR_SUM) {
      double s = 0;
      for (int64_t j = threadIdx.x; j < g.n_red; j += blockDim.x)
        s += (double)xb[em_kview_at(&g.red, j)];
      s = em_cuda_block_sum_d(s);
      if (threadIdx.x == 0) y[yo] = acc ? y[yo] + (float)s : (float)s; /* ref-kernels.c's order */
    } else {
      float m = 0.f;
      int64_t at = -1;
      for (int64_t j = threadIdx.x; j < g.n_red; j += blockDim.x)
        max_step(m, at, xb[em_kview_at(&g.red, j)], j);
      __syncthreads();
      sm[threadIdx.x] = m;
      sat[threadIdx.x] = at;
      __syncthreads();
      for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) {
          float mm = sm[threadIdx.x];
          int64_t aa = sat[threadIdx.x];
          max_merge(mm, aa, sm[threadIdx.x + w], sat[threadIdx.x + w]);
          sm[threadIdx.x] = mm;
          sat[threadIdx.x] = aa;
        }
        __syncthreads();
      }
      if (threadIdx.x == 0) {
        y[yo] = sm[0];
        if (idx) idx[em_kview_at(&g.idx, o)] = sat[0] < 0 ? 0 : sat[0];
      }
    }
  }
}

/* Whether one output's reduced elements are adjacent in memory (the
 * reduced dims innermost): a block per output then reads them coalesced.
 * Otherwise (a reduction over outer dims, such as a bias gradient over
 * the batch) neighbouring outputs are adjacent, and with enough of them
 * one thread per output reads coalesced across each warp instead. */
static bool red_inner(const reduce_geom *g) {
  for (int d = g->red.ndim - 1; d >= 0; d--)
    if (g->red.shape[d] > 1) return g->red.stride[d] == 1;
  return true;
}
#define MANY_OUTPUTS 32768 /* 128 blocks of threads: enough to fill a GPU */

static void run_reduce(em_cuda_ctx *c, int op, bool acc, float *y, int64_t *idx, const float *x,
                       const reduce_geom *g) {
  if (!g->n_out) return;
  cudaStream_t s = em_cuda_stream(c);
  if (g->n_red >= LONG_REDUCTION && (red_inner(g) || g->n_out < MANY_OUTPUTS)) {
    unsigned blocks = em_cuda_row_blocks(g->n_out);
    if (op == EM_KR_SUM) reduce_block_kernel<EM_KR_SUM><<<blocks, EM_CUDA_THREADS, 0, s>>>(acc, y, idx, x, *g);
    else reduce_block_kernel<EM_KR_MAX><<<blocks, EM_CUDA_THREADS, 0, s>>>(acc, y, idx, x, *g);
  } else {
    unsigned blocks = em_cuda_blocks(g->n_out);
    if (op == EM_KR_SUM) reduce_thread_kernel<EM_KR_SUM><<<blocks, EM_CUDA_THREADS, 0, s>>>(acc, y, idx, x, *g);
    else reduce_thread_kernel<EM_KR_MAX><<<blocks, EM_CUDA_THREADS, 0, s>>>(acc, y, idx, x, *g);
  }
  EM_CUDA_LAUNCHED();
}

em_status em_cuda_reduce(em_kred op, em_tensor *y, em_tensor *idx, const em_tensor *x, int dim) {
  EM_ASSERT(x->dtype == EM_DTYPE_F32 && y->dtype == EM_DTYPE_F32 && y->ndim == x->ndim);
  EM_ASSERT(dim >= 0 && dim < x->ndim && y->shape[dim] == 1);
  EM_ASSERT(!idx || (idx->dtype == EM_DTYPE_I64 && em_tensor_same_shape(idx, y)));
  em_cuda_ctx *c = em_cuda_enter_t(y);
  reduce_geom g;
  g.out = em_cuda_view(y);
  g.base = em_cuda_view_bcast(y, x);
  int64_t L = x->shape[dim], ls = x->stride[dim];
  em_kview_bcast(&g.red, 1, &L, 1, &L, &ls, 0);
  g.n_out = em_tensor_numel(y);
  g.n_red = L;
  if (op == EM_KR_MAX) EM_ASSERT(L > 0 && "cuda reduce: max over an empty dim");
  g.idx = idx ? em_cuda_view(idx) : g.out;
  run_reduce(c, (int)op, false, (float *)y->data, idx ? (int64_t *)idx->data : NULL,
             (const float *)x->data, &g);
  return em_cuda_kernel_end();
}

em_status em_cuda_sum_to(bool acc, em_tensor *y, const em_tensor *x) {
  EM_ASSERT(x->dtype == EM_DTYPE_F32 && y->dtype == EM_DTYPE_F32 && y->ndim == x->ndim);
  em_cuda_ctx *c = em_cuda_enter_t(y);
  reduce_geom g;
  g.out = em_cuda_view(y);
  /* base: x's strides on the kept dims (the iteration is y's shape, so
   * a reduced dim's index is 0). */
  g.base = em_cuda_view_bcast(y, x);
  int64_t rshape[EM_MAX_DIMS], rstride[EM_MAX_DIMS];
  int64_t n_red = 1;
  for (int d = 0; d < x->ndim; d++) {
    bool reduced = y->shape[d] == 1 && x->shape[d] != 1;
    rshape[d] = reduced ? x->shape[d] : 1;
    rstride[d] = reduced ? x->stride[d] : 0;
    n_red *= rshape[d];
  }
  em_kview_bcast(&g.red, x->ndim, rshape, x->ndim, rshape, rstride, 0);
  g.idx = g.out;
  g.n_out = em_tensor_numel(y);
  g.n_red = n_red;
  if (n_red == 0) { /* an empty sum: zeros (or nothing to add) */
    if (!acc) em_cuda_fill_in(y, 0.0);
    return em_cuda_kernel_end();
  }
  run_reduce(c, EM_KR_SUM, acc, (float *)y->data, NULL, (const float *)x->data, &g);
  return em_cuda_kernel_end();
}

/* ---- sum of squares -------------------------------------------------------- */

#define SUMSQ_BLOCKS 512

__global__ void sumsq_partial_kernel(const float *x, int64_t n, double *part) {
  double s = 0;
  EM_CUDA_GRID_STRIDE(i, n) {
    double v = (double)x[i];
    s += v * v;
  }
  s = em_cuda_block_sum_d(s);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void sumsq_final_kernel(const double *part, int np, bool acc, float *out) {
  double s = 0;
  for (int i = threadIdx.x; i < np; i += blockDim.x) s += part[i];
  s = em_cuda_block_sum_d(s);
  if (threadIdx.x == 0) *out = acc ? *out + (float)s : (float)s; /* as ref-misc.c */
}

em_status em_cuda_sumsq(bool acc, em_tensor *out, const em_tensor *x) {
  EM_ASSERT(x->dtype == EM_DTYPE_F32 && out->dtype == EM_DTYPE_F32 && em_tensor_numel(out) == 1);
  EM_ASSERT(em_tensor_is_contiguous(x));
  em_cuda_ctx *c = em_cuda_enter_t(out);
  int64_t n = em_tensor_numel(x);
  int np = (int)(em_cuda_blocks(n) < SUMSQ_BLOCKS ? em_cuda_blocks(n) : SUMSQ_BLOCKS);
  size_t bytes = (size_t)np * sizeof(double);
  double *part = (double *)em_cuda_scratch(em_cuda_index(c), bytes, "sum of squares");
  if (!part) return em_cuda_kernel_end();
  cudaStream_t s = em_cuda_stream(c);
  sumsq_partial_kernel<<<np, EM_CUDA_THREADS, 0, s>>>(em_f32(x), n, part);
  EM_CUDA_LAUNCHED();
  sumsq_final_kernel<<<1, EM_CUDA_THREADS, 0, s>>>(part, np, acc, em_f32(out));
  EM_CUDA_LAUNCHED();
  em_cuda_scratch_free(em_cuda_index(c), part, bytes);
  return em_cuda_kernel_end();
}

/* ---- the gradient scaler ----------------------------------------------------- */

__global__ void unscale_kernel(float *x, int64_t n, float inv_scale, float *found) {
  int bad = 0;
  EM_CUDA_GRID_STRIDE(i, n) {
    float v = x[i];
    if (!isfinite(v)) bad = 1;
    x[i] = v * inv_scale;
  }
  /* Every thread of the block reaches this (the loop has no early exit). */
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found = 1.f;
}

em_status em_cuda_unscale(em_tensor *x, float inv_scale, em_tensor *found) {
  EM_ASSERT(x->dtype == EM_DTYPE_F32 && found->dtype == EM_DTYPE_F32);
  EM_ASSERT(em_tensor_is_contiguous(x));
  em_cuda_ctx *c = em_cuda_enter_t(x);
  int64_t n = em_tensor_numel(x);
  if (!n) return em_cuda_kernel_end();
  unscale_kernel<<<em_cuda_blocks(n), EM_CUDA_THREADS, 0, em_cuda_stream(c)>>>(em_f32(x), n,
                                                                               inv_scale,
                                                                               em_f32(found));
  EM_CUDA_LAUNCHED();
  return em_cuda_kernel_end();
}
