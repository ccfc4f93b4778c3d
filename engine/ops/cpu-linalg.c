/* cpu-linalg.c: the CPU backend's GEMM kernels (the gemm, gemm_bias and
 * bias_backward entries of em-backend.h), f32 and f64. The op front-ends
 * are matmul.c and linear.c; they open the profiler's "gemm" span around
 * each call, so these run the unprofiled products.
 *
 * gemm and gemm_bias are gemm.c's products: gemv-fast.c's kernel for one
 * row, gemm-fast.c's AVX-512 / AVX2 kernels (with the bias and ReLU
 * epilogue), OpenBLAS otherwise; under bf16 autocast (amp EM_AMP_BF16,
 * f32) the bf16 GEMM of em-amp.h (AMX or AVX512-BF16, em_bf16_kernel_best;
 * f32 when the CPU has neither). The CPU has no f16 GEMM: EM_AMP_F16 runs
 * f32. A batched gemm is one product per batch entry.
 *
 * bias_backward is a linear layer's bias gradient (and, for the fused
 * linear+ReLU, the ReLU's mask in the same pass): column sums in row
 * order, the pool splitting the columns in blocks of 16, so the numbers
 * do not depend on the thread count. */
#include "ops-private.h"
#include "em-cpu.h"

#include "em-amp.h"
#include "em-pool.h"

#include <string.h>

/* The bf16 kernel a product of dtype dt runs under amp (NONE: f32). */
static em_bf16_kernel bf16_of(int amp, em_dtype dt, int64_t k) {
  return amp == EM_AMP_BF16 && dt == EM_DTYPE_F32 && k > 0 ? em_bf16_kernel_best()
                                                            : EM_BF16_KERNEL_NONE;
}

em_status em_cpu_gemm(int amp, em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      float alpha, const void *a, int64_t lda, int64_t stride_a, const void *b,
                      int64_t ldb, int64_t stride_b, float beta, void *c, int64_t ldc,
                      int64_t stride_c, int64_t batch) {
  em_bf16_kernel kern = bf16_of(amp, dt, k);
  size_t es = em_dtype_size(dt);
  for (int64_t i = 0; i < batch && m > 0 && n > 0; i++) {
    const char *ai = (const char *)a + (size_t)(i * stride_a) * es; /* op(A_i) (m, k) */
    const char *bi = (const char *)b + (size_t)(i * stride_b) * es; /* op(B_i) (k, n) */
    char *ci = (char *)c + (size_t)(i * stride_c) * es;             /* (m, n) */
    if (kern == EM_BF16_KERNEL_NONE) {
      em_gemm_unprofiled(dt, ta, tb, m, n, k, alpha, ai, lda, bi, ldb, beta, ci, ldc);
    } else {
      EM_ASSERT(alpha == 1.f && "cpu gemm: the bf16 GEMM has alpha 1");
      em_gemm_bf16(kern, ta, tb, m, n, k, (const float *)ai, lda, (const float *)bi, ldb, beta,
                   (float *)ci, ldc);
    }
  }
  return EM_OK;
}

em_status em_cpu_gemm_bias(int amp, em_dtype dt, bool ta, bool tb, int64_t m, int64_t n,
                           int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb,
                           const void *bias, bool relu, void *c, int64_t ldc) {
  if (m == 0 || n == 0) return EM_OK;
  em_bf16_kernel kern = relu ? EM_BF16_KERNEL_NONE : bf16_of(amp, dt, k);
  if (kern == EM_BF16_KERNEL_NONE) {
    em_gemm_bias_unprofiled(dt, ta, tb, m, n, k, a, lda, b, ldb, bias, relu, c, ldc);
  } else { /* bf16 products: the bias in every row first, then C += A B */
    if (bias) em_fill_rows(c, m, n, ldc, bias, sizeof(float));
    em_gemm_bf16(kern, ta, tb, m, n, k, a, lda, b, ldb, bias ? 1.f : 0.f, c, ldc);
  }
  return EM_OK;
}

/* ---- bias_backward ------------------------------------------------------------- */

/* Column sums of gy (N, K) into db (overwritten when fresh, else added
 * to), in row order; with y, gy is first masked where the ReLU's output y
 * is not above 0 (em_relu's backward: NaN outputs pass the gradient) into
 * g, and the sums are of g. */
typedef struct {
  em_dtype dt;
  int64_t N, K;
  const void *gy, *y; /* y: the ReLU's output, or NULL (no mask) */
  void *g, *db;       /* g: the masked gy (with y); db: or NULL */
  bool fresh;
} cols_job;

#define COLS(T)                                                                        \
  do {                                                                                 \
    const T *gy = j->gy, *y = j->y;                                                    \
    T *g = j->g, *db = j->db;                                                          \
    for (int64_t i = 0; i < j->N; i++) {                                               \
      const T *r = gy + i * j->K;                                                      \
      if (y) {                                                                         \
        const T *yr = y + i * j->K;                                                    \
        T *o = g + i * j->K;                                                           \
        for (int64_t k = j0; k < j1; k++) o[k] = yr[k] <= (T)0 ? (T)0 : r[k];          \
        r = o;                                                                         \
      }                                                                                \
      if (!db) continue;                                                               \
      if (i == 0 && j->fresh)                                                          \
        for (int64_t k = j0; k < j1; k++) db[k] = r[k];                                \
      else                                                                             \
        for (int64_t k = j0; k < j1; k++) db[k] += r[k];                               \
    }                                                                                  \
  } while (0)

/* Blocks [b0, b1) of 16 columns (each column summed down the rows alone:
 * the same numbers at every vector width). */
EM_CPU_CLONES static void cols_blocks(void *ctx, int64_t b0, int64_t b1) {
  const cols_job *j = ctx;
  int64_t j0 = 16 * b0, j1 = 16 * b1 < j->K ? 16 * b1 : j->K;
  if (j->dt == EM_DTYPE_F32) COLS(float);
  else COLS(double);
}

em_status em_cpu_bias_backward(bool acc, em_tensor *gb, em_tensor *gm, const em_tensor *g,
                               const em_tensor *y) {
  cols_job j = {.dt = g->dtype, .N = g->shape[0], .K = g->shape[1], .gy = em_tensor_ptr(g),
                .y = y ? em_tensor_ptr(y) : NULL, .g = gm ? em_tensor_ptr(gm) : NULL,
                .db = gb ? em_tensor_ptr(gb) : NULL, .fresh = !acc};
  if (j.N == 0 && j.db && j.fresh) /* no rows: a fresh gradient sums nothing */
    memset(j.db, 0, em_dtype_size(j.dt) * (size_t)j.K);
  int64_t blocks = (j.K + 15) / 16; /* at least 4 a thread, and 8192 values in all */
  em_parallel_for(blocks, j.N * j.K >= 8192 ? 4 : blocks, cols_blocks, &j);
  return EM_OK;
}
