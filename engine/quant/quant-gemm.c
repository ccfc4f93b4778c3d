/* quant-gemm.c: the uint8 x int8 -> int32 GEMM kernels' table, the run-
 * time choice among them, and the plain reference every fast kernel is
 * tested against (tests/engine/quant). The AVX512-VNNI kernel lives in
 * quant-gemm-x86.c, the int16-pair ones (AVX-512BW, AVX2, SSE2: one body
 * per instruction set) in quant-pmadd.c. */
#include "quant-isa.h"

#include <string.h>

/* ---- scalar reference: reads wq (K, D) where it lies ---------------------- */

static bool scalar_supported(void) { return true; }
static size_t scalar_packed_size(int64_t K, int64_t Dp) { return 0; }
static void scalar_pack(const int8_t *wq, int64_t K, int64_t D, int64_t Dp, void *packed) {}

static void scalar_gemm(const em_quant_layer *L, const void *a_, int64_t lda, int64_t M,
                        int64_t n0, int64_t n1, int32_t *c, int64_t ldc) {
  const uint8_t *a = a_;
  for (int64_t m = 0; m < M; m++) {
    const uint8_t *ar = a + m * lda; /* (D) */
    for (int64_t n = n0; n < n1; n++) {
      const int8_t *wr = L->wq + n * L->D; /* (D) */
      int32_t acc = 0;
      for (int64_t d = 0; d < L->D; d++) acc += (int32_t)ar[d] * (int32_t)wr[d];
      c[m * ldc + (n - n0)] = acc;
    }
  }
}

const em_qgemm_kernel em_qgemm_scalar = {
    .name = "scalar",
    .n_block = 1,
    .a_width = 1,
    .supported = scalar_supported,
    .packed_size = scalar_packed_size,
    .pack = scalar_pack,
    .gemm = scalar_gemm,
};

/* ---- the table --------------------------------------------------------------- */

static const em_qgemm_kernel *const kernels[] = {
#if defined(__x86_64__)
    &em_qgemm_vnni,
    &em_qgemm_pmadd_avx512, /* "avx512bw" */
    &em_qgemm_pmadd_avx2,   /* "avx2" */
    &em_qgemm_pmadd_generic, /* "sse2" */
#endif
    &em_qgemm_scalar,
};

int em_qgemm_kernel_count(void) { return (int)(sizeof kernels / sizeof kernels[0]); }

const em_qgemm_kernel *em_qgemm_kernel_at(int i) {
  EM_ASSERT(i >= 0 && i < em_qgemm_kernel_count());
  return kernels[i];
}

const em_qgemm_kernel *em_qgemm_kernel_find(const char *name) {
  for (int i = 0; i < em_qgemm_kernel_count(); i++)
    if (!strcmp(kernels[i]->name, name)) return kernels[i];
  return NULL;
}

const em_qgemm_kernel *em_qgemm_kernel_best(void) {
  for (int i = 0; i < em_qgemm_kernel_count(); i++)
    if (kernels[i]->supported()) return kernels[i];
  return &em_qgemm_scalar;
}
