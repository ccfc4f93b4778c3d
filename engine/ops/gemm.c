/* gemm.c: the matrix product under every op that multiplies matrices on
 * the CPU (em_matmul, em_linear, em_linear_relu through the CPU backend's
 * gemm kernels, cpu-linalg.c; the convolutions' GEMMs):
 * gemv-fast.c's kernel for one row (m == 1, every instruction set),
 * gemm-fast.c's AVX-512 or AVX2 kernels where they take the call,
 * OpenBLAS otherwise (f64, a generic x86-64 processor, big squares;
 * EMBER_GEMM_FAST=0 sends every product there, for comparisons), the bf16
 * GEMM under autocast (em_gemm_amp), and em_blas_ready (a copy when BLAS
 * cannot take the strides; em_blas_operand_of, which says so, is in
 * ../core/shape.c). Each product of em_gemm, em_gemm_bias and em_gemm_amp
 * is one profiler span ("gemm") carrying its FLOPs; the _unprofiled ones,
 * which the backend kernels call, leave the span to the op front-end. */
#include "cpu-kernels.h"

#include "em-amp.h"
#include "em-pool.h"

#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void gemm_run(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                     double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                     double beta, const void *bias, bool relu, void *c, int64_t ldc);

void em_fill_rows(void *c, int64_t m, int64_t n, int64_t ldc, const void *bias, size_t es) {
  for (int64_t i = 0; i < m; i++) memcpy((char *)c + (size_t)(i * ldc) * es, bias, (size_t)n * es);
}

/* The profiler's span of a product: linear's and matmul's self time
 * exclude it, and its FLOPs are counted where they are done. */
static int gemm_span_begin(const char *name, int64_t m, int64_t n, int64_t k) {
  const int tok = em_profile_hooks_on() ? em_op_begin_(name, 0, NULL) : -1;
  if (tok >= 0) {
    em_op_note_shape_(tok, 2, (int64_t[]){m, k});
    em_op_note_shape_(tok, 2, (int64_t[]){k, n});
    em_op_add_flops_(2.0 * (double)m * (double)n * (double)k);
  }
  return tok;
}

void em_gemm(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
             const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
             int64_t ldc) {
  if (m == 0 || n == 0) return;
  const int tok = gemm_span_begin("gemm", m, n, k);
  gemm_run(dt, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, NULL, false, c, ldc);
  if (tok >= 0) em_op_end_(tok, NULL);
}

void em_gemm_bias(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                  int64_t lda, const void *b, int64_t ldb, const void *bias, bool relu, void *c,
                  int64_t ldc) {
  if (m == 0 || n == 0) return;
  const int tok = gemm_span_begin("gemm", m, n, k);
  gemm_run(dt, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, bias, relu, c, ldc);
  if (tok >= 0) em_op_end_(tok, NULL);
}

void em_gemm_unprofiled(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                        double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                        double beta, void *c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  gemm_run(dt, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, NULL, false, c, ldc);
}

void em_gemm_bias_unprofiled(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                             const void *a, int64_t lda, const void *b, int64_t ldb,
                             const void *bias, bool relu, void *c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  gemm_run(dt, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, bias, relu, c, ldc);
}

void em_gemm_amp(em_bf16_kernel kern, em_dtype dt, bool ta, bool tb, int64_t m, int64_t n,
                 int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
                 void *c, int64_t ldc) {
  if (kern == EM_BF16_KERNEL_NONE || dt != EM_DTYPE_F32) {
    em_gemm(dt, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (m == 0 || n == 0) return;
  const int tok = gemm_span_begin("gemm_bf16", m, n, k);
  em_gemm_bf16(kern, ta, tb, m, n, k, a, lda, b, ldb, (float)beta, c, ldc);
  if (tok >= 0) em_op_end_(tok, NULL);
}

/* C (m, n, ldc) = max(C, 0), NaN and -0 kept (as em_relu). */
static void relu_rows(em_dtype dt, void *c, int64_t m, int64_t n, int64_t ldc) {
  for (int64_t i = 0; i < m; i++) {
    if (dt == EM_DTYPE_F32) {
      float *r = (float *)c + i * ldc;
      for (int64_t j = 0; j < n; j++) r[j] = r[j] < 0.f ? 0.f : r[j];
    } else {
      double *r = (double *)c + i * ldc;
      for (int64_t j = 0; j < n; j++) r[j] = r[j] < 0. ? 0. : r[j];
    }
  }
}

static void gemm_blas(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                      double beta, const void *bias, void *c, int64_t ldc);

/* EMBER_GEMM_FAST=0: OpenBLAS takes every product (to compare against). */
static bool fast_off;
static void read_fast_off(void) {
  const char *e = getenv("EMBER_GEMM_FAST");
  fast_off = e && strcmp(e, "0") == 0;
}

/* C = alpha op(A) op(B) + (bias ? bias in every row : beta C), then
 * max(C, 0) when relu. */
static void gemm_run(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                     double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                     double beta, const void *bias, bool relu, void *c, int64_t ldc) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, read_fast_off);
  if (dt == EM_DTYPE_F32 && k > 0 && !fast_off) {
    const em_cpu_kernels *kt = em_cpu_kernels_get();
    /* one row (batch 1): the GEMV, which reads B once where it lies */
    if (m == 1 && kt->gemv_f32(ta, tb, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, bias,
                               relu, c, ldc))
      return;
    if (kt->gemm_f32(ta, tb, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, bias, relu, c,
                     ldc))
      return;
  }
  gemm_blas(dt, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, bias, c, ldc);
  if (relu) relu_rows(dt, c, m, n, ldc);
}

/* gemm_run without the fast kernels or the ReLU. */
static void gemm_blas(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                      double beta, const void *bias, void *c, int64_t ldc) {
  if (bias) { /* the bias in every row of C, then C += the product */
    em_fill_rows(c, m, n, ldc, bias, em_dtype_size(dt));
    beta = 1.0;
  }
  if (k == 0) { /* BLAS may not scale C for k = 0 */
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        if (dt == EM_DTYPE_F32) {
          float *p = (float *)c + i * ldc + j;
          *p = beta == 0 ? 0.f : (float)(beta * *p);
        } else {
          double *p = (double *)c + i * ldc + j;
          *p = beta == 0 ? 0.0 : beta * *p;
        }
      }
    return;
  }
  /* f32 products gemm-fast.c did not take (generic x86-64, too big) and f64: OpenBLAS */
  enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  em_pool_park(); /* the pool's workers leave the cores to OpenBLAS's threads */
  if (dt == EM_DTYPE_F32)
    cblas_sgemm(CblasRowMajor, TA, TB, (blasint)m, (blasint)n, (blasint)k, (float)alpha, a,
                (blasint)lda, b, (blasint)ldb, (float)beta, c, (blasint)ldc);
  else if (dt == EM_DTYPE_F64)
    cblas_dgemm(CblasRowMajor, TA, TB, (blasint)m, (blasint)n, (blasint)k, alpha, a,
                (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
  else
    EM_ASSERT(!"gemm needs f32 or f64");
}

/* A 2-D-viewable operand: contiguous copy when BLAS cannot take the
 * strides as they are. */
em_tensor *em_blas_ready(em_tensor *t, int d0, int d1) {
  em_blas_operand op;
  if (t->ndim == 2 && em_blas_operand_of(t, d0, d1, 0, &op)) return t;
  if (t->ndim != 2 && em_tensor_is_contiguous(t)) return t;
  bool prev = em_no_grad_begin();
  em_tensor *c = em_contiguous(t);
  em_grad_mode_restore(prev);
  return c;
}
