/* ops-private.h: what the files of engine/ops share. */
#pragma once

#include "em-ops.h"
#include "em-amp.h"
#include "em-profile.h"
/* Headers of their own in engine/core, shared with the device layer. */
#include "../core/grad-accumulate.h"
#include "../core/node-params.h"
#include "../core/shape.h"

#define EM_IS_FLOAT(t) ((t)->dtype == EM_DTYPE_F32 || (t)->dtype == EM_DTYPE_F64)

/* em_blas_operand_of (how a strided matrix is handed to a GEMM) is in
 * ../core/shape.h, shared with the backends. */
/* C (m, n, ldc) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C, in t's dtype. */
void em_gemm(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
             const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
             int64_t ldc);
/* C (m, n, ldc) = op(A) (m, k) @ op(B) (k, n) + bias (n values, contiguous,
 * added to every row; or NULL), then max(C, 0) when relu (NaN and -0 kept,
 * as em_relu), in dt: a Linear layer's forward, or a Linear and ReLU's. */
void em_gemm_bias(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                  int64_t lda, const void *b, int64_t ldb, const void *bias, bool relu, void *c,
                  int64_t ldc);
/* em_gemm (alpha 1), or the bf16 GEMM (f32) when kern is not NONE. */
void em_gemm_amp(em_bf16_kernel kern, em_dtype dt, bool ta, bool tb, int64_t m, int64_t n,
                 int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
                 void *c, int64_t ldc);
/* Every row of C (m, n, ldc) = bias (n values of es bytes). */
void em_fill_rows(void *c, int64_t m, int64_t n, int64_t ldc, const void *bias, size_t es);
/* t itself when BLAS can take its dims (d0, d1) as they are (or, not 2-D,
 * when it is contiguous), else a contiguous copy (outside autograd). */
em_tensor *em_blas_ready(em_tensor *t, int d0, int d1);
/* em_gemm without its profiler span (for a caller that records the op
 * and its FLOPs itself: the reference device's and the CPU's gemm
 * kernels, under the op front-end's span). */
void em_gemm_unprofiled(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                        double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                        double beta, void *c, int64_t ldc);
/* em_gemm_bias without its profiler span (the CPU's gemm_bias kernel:
 * the op front-end records the span). */
void em_gemm_bias_unprofiled(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                             const void *a, int64_t lda, const void *b, int64_t ldb,
                             const void *bias, bool relu, void *c, int64_t ldc);

/* ---- GEMM operands of the op front-end (matmul.c; linear.c) ---- */

/* An operand as the gemm kernel reads it: its last two dims row-major
 * with a leading dimension, transposed or not, and one stride between
 * the batch elements of the output's batch shape. */
typedef struct {
  em_tensor *t;    /* what the kernel reads */
  const void *ptr; /* first element */
  bool trans;
  int64_t ld, bstride; /* leading dimension; elements between batch elements */
} em_gemm_operand;
/* t itself when it fits over the output's batch shape bshape (nb dims;
 * 0 for a 2-D product), else t expanded to it and copied contiguous
 * (through the copy kernel; out of memory: a placeholder whose t has no
 * data, which op_live skips). */
em_gemm_operand em_gemm_operand_ready(em_tensor *t, int nb, const int64_t *bshape);
/* The profiler's span of one gemm kernel call ("gemm", "gemm_bf16" or
 * "gemm_f16" under amp), carrying its FLOPs; -1 when not profiling. */
int em_gemm_span_begin(int amp, int64_t m, int64_t n, int64_t k, int64_t batch);
void em_gemm_span_end(int tok);

/* ---- shared by the basic ops (views.c, elementwise.c, unary.c, reduce.c) ---- */

#include <math.h>
#include <string.h>

/* Element counts at which work is split over the thread pool, and the
 * smallest chunk a thread takes: waking a worker costs microseconds. */
#define EM_PAR_MIN (1 << 16)
#define EM_PAR_GRAIN (1 << 14)

/* The strided iterator behind element-wise kernels. Operands (at most
 * EM_ITER_MAX_OPS) are viewed over one iteration shape: an operand with
 * fewer dims or size-1 dims is broadcast (stride 0). Size-1 dims are
 * dropped and neighbouring dims merged where every operand allows, so a
 * contiguous tensor becomes one long row and a bias add becomes rows with
 * a shared second operand. Kernels see one row at a time: n elements,
 * p[k] the row's first element of operand k, s[k] its stride in elements. */
#define EM_ITER_MAX_OPS 4
typedef void (*em_row_fn)(void *ctx, int64_t n, char *const *p, const int64_t *s);
typedef struct {
  int ndim, nops;                                /* ndim >= 1 after merging */
  int64_t numel;
  int64_t shape[EM_MAX_DIMS];
  int64_t stride[EM_ITER_MAX_OPS][EM_MAX_DIMS]; /* elements; 0 = broadcast */
  char *base[EM_ITER_MAX_OPS];
  int64_t esize[EM_ITER_MAX_OPS];
} em_iter;
void em_iter_init(em_iter *it, int ndim, const int64_t *shape, int nops, em_tensor *const *ops);
/* Runs fn over the elements [begin, end) of the iteration, row-major. */
void em_iter_run(const em_iter *it, int64_t begin, int64_t end, em_row_fn fn, void *ctx);
/* Runs fn over every element, split over the pool when the iteration is
 * large. Only for kernels whose output elements are distinct (operand 0
 * not broadcast). */
void em_iter_parallel(const em_iter *it, em_row_fn fn, void *ctx);

/* Sums of n contiguous values: f32 in 32 float lanes flushed into a double
 * every 4096 values (so it vectorises and stays accurate). */
double em_sum_f32(const float *x, int64_t n);
double em_sum_f64(const double *x, int64_t n);

/* Vectorisable f32 math (the loops calling these compile to SIMD; libm's
 * expf/erff/tanhf do not vectorise without -ffast-math). Errors against
 * the double functions: exp about 2 ulp, log under 1 ulp, erf about
 * 4e-7 absolute, tanh about 3 ulp; NaN propagates. */
static inline float em_bits_to_f32(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}
static inline uint32_t em_f32_to_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}
/* exp: Cody-Waite reduction x = n ln2 + r, Cephes' degree-6 polynomial
 * for e^r, and 2^n applied as two factors so that n in [-150, 128] stays
 * in range (results below FLT_MIN come out subnormal, above FLT_MAX inf). */
static inline float em_expf(float x) {
  float xc = x > 88.8f ? 88.8f : x;
  xc = xc < -104.f ? -104.f : xc;
  float t = xc * 1.44269504088896341f + 0x1.8p23f; /* round(x log2 e) in the low bits */
  float n = t - 0x1.8p23f;
  int32_t ni = (int32_t)(em_f32_to_bits(t) - 0x4B400000u);
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float y = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
              4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  int32_t n1 = ni / 2, n2 = ni - n1;
  y = y * em_bits_to_f32((uint32_t)(n1 + 127) << 23);
  y = y * em_bits_to_f32((uint32_t)(n2 + 127) << 23);
  y = x >= 88.72283935546875f ? INFINITY : y; /* exp of it rounds to inf */
  return x < -103.972084f ? 0.0f : y;
}
/* erf: a rational minimax fit on [-4, 4] (odd numerator, even
 * denominator; as in Eigen), +-1 beyond. */
static inline float em_erff(float a) {
  float x = a > 4.f ? 4.f : a;
  x = x < -4.f ? -4.f : x;
  float x2 = x * x;
  float p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = x2 * p + -2.10102402082508e-06f;
  p = x2 * p + -5.69250639462346e-05f;
  p = x2 * p + -7.34990630326855e-04f;
  p = x2 * p + -2.95459980854025e-03f;
  p = x2 * p + -1.60960333262415e-02f;
  float q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
  q = x2 * q + -1.68282697438203e-03f;
  q = x2 * q + -7.37332916720468e-03f;
  q = x2 * q + -1.42647390514189e-02f;
  return x * p / q;
}
/* tanh: Cephes' odd polynomial below |x| = 0.625, 1 - 2 / (e^2|x| + 1)
 * above. */
static inline float em_tanhf(float x) {
  float a = x < 0.f ? -x : x;
  float big = 1.f - 2.f / (em_expf(2.f * a) + 1.f);
  big = x < 0.f ? -big : big;
  float z = x * x;
  float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                  1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
  return a < 0.625f ? small : big;
}
static inline float em_sigmoidf(float x) { return 1.f / (1.f + em_expf(-x)); }
/* log: x = 2^e m with m in [sqrt(1/2), sqrt(2)), Cephes' polynomial for
 * log(m), e ln2 added in two parts (under 1 ulp over all floats;
 * subnormals scaled first; 0 -> -inf, negative -> NaN). */
static inline float em_logf(float x) {
  const bool sub = x < 1.17549435e-38f;
  const float scaled = x * 8388608.0f; /* 2^23 */
  uint32_t b = em_f32_to_bits(sub ? scaled : x);
  int32_t e = (int32_t)((b >> 23) & 0xffu) - (sub ? 149 : 126);
  float m = em_bits_to_f32((b & 0x007fffffu) | 0x3f000000u); /* [0.5, 1) */
  const bool low = m < 0.707106781186547524f;
  const float m_low = m + m - 1.f, m_high = m - 1.f;
  e -= low;
  m = low ? m_low : m_high;
  float fe = (float)e, z = m * m;
  float y = ((((((((7.0376836292e-2f * m - 1.1514610310e-1f) * m + 1.1676998740e-1f) * m -
                  1.2420140846e-1f) * m + 1.4249322787e-1f) * m - 1.6668057665e-1f) * m +
               2.0000714765e-1f) * m - 2.4999993993e-1f) * m + 3.3333331174e-1f) * m * z;
  y += -2.12194440e-4f * fe;
  y += -0.5f * z;
  float r = m + y + 0.693359375f * fe;
  /* r is finite for every input. Special inputs (NaN, inf, 0, negative)
   * replace it arithmetically, r * 0 + special: with a plain select the
   * compiler makes the polynomial conditional and the loop stays scalar
   * (FP ops may trap, so it will not speculate them back). */
  const bool normal = x > 0.f && x < INFINITY;
  const float special = x != x ? x : x < 0.f ? NAN : x == 0.f ? -INFINITY : INFINITY;
  return r * (normal ? 1.f : 0.f) + (normal ? 0.f : special);
}

/* gemm-fast.c, the f32 GEMM behind em_gemm, is in the CPU kernel table
 * (cpu-kernels.h). */

/* The CPU backend's kernel entries (cpu-backend.c's table; em-backend.h
 * says what each does), f32 and f64. */
#include "em-backend.h"
em_k_fill em_cpu_fill;                     /* cpu-copy.c */
em_k_copy em_cpu_copy;                     /* cpu-copy.c */
em_k_binary em_cpu_binary;                 /* cpu-binary.c */
em_k_unary em_cpu_unary;                   /* cpu-unary.c */
em_k_unary_backward em_cpu_unary_backward; /* cpu-unary.c */
em_k_reduce em_cpu_reduce;                 /* cpu-reduce.c */
em_k_sum_to em_cpu_sum_to;                 /* cpu-reduce.c */
em_k_dropout_mask em_cpu_dropout_mask;     /* cpu-random.c */
em_k_masked_fill em_cpu_masked_fill;       /* cpu-masked-fill.c */
em_k_sdpa_forward em_cpu_sdpa_forward;     /* cpu-sdpa.c */
em_k_sdpa_backward em_cpu_sdpa_backward;   /* cpu-sdpa.c */
em_k_softmax_forward em_cpu_softmax_forward;   /* cpu-softmax.c */
em_k_softmax_backward em_cpu_softmax_backward; /* cpu-softmax.c */
em_k_embedding_forward em_cpu_embedding_forward;   /* cpu-embedding.c */
em_k_embedding_backward em_cpu_embedding_backward; /* cpu-embedding.c */
em_k_conv2d_forward em_cpu_conv2d_forward;         /* cpu-conv.c */
em_k_conv2d_backward em_cpu_conv2d_backward;       /* cpu-conv.c */
em_k_pool2d_forward em_cpu_pool2d_forward;         /* cpu-pool.c */
em_k_pool2d_backward em_cpu_pool2d_backward;       /* cpu-pool.c */
em_k_batch_norm_forward em_cpu_batch_norm_forward;                /* cpu-norm.c */
em_k_batch_norm_backward em_cpu_batch_norm_backward;              /* cpu-norm.c */
em_k_batch_norm_backward_eval em_cpu_batch_norm_backward_eval;    /* cpu-norm.c */
em_k_layer_norm_forward em_cpu_layer_norm_forward;                /* cpu-norm.c */
em_k_layer_norm_backward em_cpu_layer_norm_backward;              /* cpu-norm.c */
em_k_gemm em_cpu_gemm;                     /* cpu-linalg.c */
em_k_gemm_bias em_cpu_gemm_bias;           /* cpu-linalg.c */
em_k_bias_backward em_cpu_bias_backward;   /* cpu-linalg.c */
em_k_cross_entropy_forward em_cpu_cross_entropy_forward;   /* cpu-loss.c */
em_k_cross_entropy_backward em_cpu_cross_entropy_backward; /* cpu-loss.c */
em_k_sumsq em_cpu_sumsq;                                   /* cpu-loss.c */

/* Max and sum of x[0, n) (n >= 1) in float, with 16 lanes so that they
 * vectorise once n >= 64 (the row kernels of softmax and cross-entropy). */
float em_lane_max_f32(const float *x, int64_t n);
float em_lane_sum_f32(const float *x, int64_t n);
