/* cpu-kernels.h: the CPU's tuned f32 kernels (GEMM, convolution,
 * pooling rows), one table per instruction set, chosen once at first use
 * from the processor under EMBER_CPU_ISA's cap (em-cpu.h).
 *
 * The files that hold them (engine/meson.build: cpu_variant_sources) are
 * compiled once per variant, with -DEM_ISA=generic|avx2|avx512 and that
 * level's -march (x86-64, x86-64-v3, x86-64-v4), whatever the build's own
 * flags; they include this header first, which gives each of their
 * shared symbols the variant's suffix (em_gemm_f32_fast becomes
 * em_gemm_f32_fast_avx2), so the three copies link side by side. Code
 * outside them calls through em_cpu_kernels_get(); a test can take each
 * variant the machine runs with em_cpu_kernels_for().
 *
 * Adding a kernel family: its files to cpu_variant_sources, its entry
 * points to the table and to the renames below, and its row in
 * cpu-kernels-table.c. */
#pragma once

#include "em-cpu-variant.h" /* EM_ISA_FN */

#ifdef EM_ISA
#define em_gemm_f32_fast EM_ISA_FN(em_gemm_f32_fast)
#define em_gemv_f32 EM_ISA_FN(em_gemv_f32)
#define em_conv2d_fast_forward EM_ISA_FN(em_conv2d_fast_forward)
#define em_conv2d_fast_backward EM_ISA_FN(em_conv2d_fast_backward)
#define em_conv_kernel_rows EM_ISA_FN(em_conv_kernel_rows)
#define em_conv_kernel_acc EM_ISA_FN(em_conv_kernel_acc)
#define em_conv_queue_init EM_ISA_FN(em_conv_queue_init)
#define em_conv_queue_slot EM_ISA_FN(em_conv_queue_slot)
#define em_conv_queue_take EM_ISA_FN(em_conv_queue_take)
#define em_conv_queue_run EM_ISA_FN(em_conv_queue_run)
#define em_conv_winograd_ok EM_ISA_FN(em_conv_winograd_ok)
#define em_conv_winograd_forward EM_ISA_FN(em_conv_winograd_forward)
#define em_conv_winograd_backward_x EM_ISA_FN(em_conv_winograd_backward_x)
#define em_max2x2_fwd_row EM_ISA_FN(em_max2x2_fwd_row)
#define em_max2x2_bwd_row EM_ISA_FN(em_max2x2_bwd_row)
#endif

#include "conv-private.h"
#include "em-cpu.h"

typedef struct {
  const char *name; /* "generic", "avx2", "avx512" */
  /* C (m, n, ldc) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C,
   * row-major, or + bias (n values added to every row; beta is then
   * ignored), then max(C, 0) when relu, split over the pool in a fixed
   * way (the same numbers for any thread count). Needs an open scope
   * (packing scratch). Returns false, touching nothing, when it does not
   * take the call (no fast kernel at this level, no scope, a size < 1, or
   * a product too large); em_gemm then uses OpenBLAS. */
  bool (*gemm_f32)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                   const float *bias, bool relu, float *c, int64_t ldc);
  /* The same for one row of A (m == 1: a Linear layer at batch 1), in
   * gemv-fast.c: B read where it lies, no scratch (no scope needed), one
   * thread below a size worth sharing. Returns false, touching nothing,
   * unless m is 1, n and k positive, and A's k values adjacent (not ta,
   * or ta with lda 1). Every variant has one. */
  bool (*gemv_f32)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                   const float *bias, bool relu, float *c, int64_t ldc);
  /* conv-fast.c and conv-winograd.c (conv-private.h and conv-ref.h have the
   * contracts). */
  void (*conv2d_forward)(const em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                         const em_tensor *b, em_tensor *y);
  void (*conv2d_backward)(const em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                          const em_tensor *gy, const em_conv_grads *out);
  /* 2x2 stride-2 max pool of one output row (pool-fast.c): y and idx
   * (positions in the plane, base that of r0[0]) from input rows r0, r1;
   * backward writes both input rows from gy and idx. */
  void (*max2x2_fwd_row)(const float *r0, const float *r1, int64_t OW, int32_t W, int32_t base,
                         float *y, int32_t *idx);
  void (*max2x2_bwd_row)(const float *gy, const int32_t *idx, int64_t OW, int32_t W,
                         int32_t base, float *r0, float *r1);
} em_cpu_kernels;

/* The table in force (em_cpu_kernels_name(em_cpu_isa_active())). */
const em_cpu_kernels *em_cpu_kernels_get(void);
/* The table of a level, or NULL when this build lacks it or the
 * processor cannot run it (for tests that run every variant). */
const em_cpu_kernels *em_cpu_kernels_for(em_cpu_isa isa);

#ifdef EM_ISA
/* A variant's own entry points (renamed above). */
bool em_gemm_f32_fast(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      const float *bias, bool relu, float *c, int64_t ldc);
bool em_gemv_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                 int64_t lda, const float *b, int64_t ldb, float beta, const float *bias,
                 bool relu, float *c, int64_t ldc);
void em_max2x2_fwd_row(const float *r0, const float *r1, int64_t OW, int32_t W, int32_t base,
                       float *y, int32_t *idx);
void em_max2x2_bwd_row(const float *gy, const int32_t *idx, int64_t OW, int32_t W, int32_t base,
                       float *r0, float *r1);
extern const em_cpu_kernels EM_ISA_FN(em_cpu_kernels_table);
#endif
