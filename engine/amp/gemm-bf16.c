/* gemm-bf16.c: C = beta C + bf16(A) @ bf16(B) with f32 accumulation: the
 * choice of kernel at run time, the loop reference, the B panel both fast
 * kernels read, and the AVX512-BF16 kernel (vdpbf16ps; AMX is in
 * gemm-amx.c). The AVX512 path rounds and packs A into (tile, k/2, MR)
 * pairs and B into (k/2, n) pairs, then computes MR x NR tiles of C, one
 * tile per work item, so every value is summed in the same order
 * whatever the thread count. */
#include "amp-private.h"
#include "em-cpu.h"
#include "em-pool.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { MR = 8, NR = 32 }; /* pack_a (A^T) fills two tiles from 16 lanes */

const char *em_bf16_kernel_name(em_bf16_kernel k) {
  switch (k) {
  case EM_BF16_KERNEL_AMX: return "amx-bf16";
  case EM_BF16_KERNEL_AVX512: return "avx512-bf16";
  case EM_BF16_KERNEL_SCALAR: return "scalar";
  case EM_BF16_KERNEL_EMULATED: return "emulated";
  default: return "none";
  }
}

static em_bf16_kernel best_kernel = EM_BF16_KERNEL_EMULATED;

static void find_best(void) {
  const char *cap = getenv("EMBER_BF16_KERNEL");
  if (cap && *cap && strcmp(cap, "none") && strcmp(cap, "emulated") &&
      strcmp(cap, "avx512-bf16") && strcmp(cap, "amx-bf16"))
    em_log_msg(EM_LOG_WARNING, "EMBER_BF16_KERNEL is '%s': it takes amx-bf16, avx512-bf16, "
               "emulated or none (a cap on the kernel); taking the best one here", cap);
  if (cap && strcmp(cap, "none") == 0) {
    best_kernel = EM_BF16_KERNEL_NONE;
    return;
  }
  if (cap && strcmp(cap, "emulated") == 0) return;
#ifdef HAVE_BF16_KERNEL
  /* the processor's AVX512-BF16 (and AMX) under EMBER_CPU_ISA's cap */
  if (!em_cpu_has(EM_CPU_AVX512_BF16)) return;
  best_kernel = EM_BF16_KERNEL_AVX512;
  if (!(cap && strcmp(cap, "avx512-bf16") == 0) && em_cpu_has(EM_CPU_AMX_BF16) &&
      em_amx_enable_())
    best_kernel = EM_BF16_KERNEL_AMX;
#endif
}

em_bf16_kernel em_bf16_kernel_best(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, find_best);
  return best_kernel;
}

bool em_bf16_kernel_available(em_bf16_kernel k) {
  em_bf16_kernel best = em_bf16_kernel_best();
  switch (k) {
  case EM_BF16_KERNEL_SCALAR: return true;
  case EM_BF16_KERNEL_EMULATED: return true;
  case EM_BF16_KERNEL_AVX512: return best == EM_BF16_KERNEL_AVX512 || best == EM_BF16_KERNEL_AMX;
  case EM_BF16_KERNEL_AMX: return best == EM_BF16_KERNEL_AMX;
  default: return false;
  }
}

/* bf16 as vdpbf16ps reads it: subnormals are zero (DAZ). */
static inline float bf16_daz(float x) {
  float r = em_bf16_to_f32(em_bf16_from_f32(x));
  return fabsf(r) < FLT_MIN ? copysignf(0.f, r) : r;
}

static inline float ftz(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.f, x) : x; }

static void gemm_scalar(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                        int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                        int64_t ldc) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      float acc = 0.f;
      for (int64_t p = 0; p < k; p += 2) {
        /* the odd element of the pair first, as vdpbf16ps */
        if (p + 1 < k) {
          float x = bf16_daz(ta ? a[(p + 1) * lda + i] : a[i * lda + p + 1]);
          float y = bf16_daz(tb ? b[j * ldb + p + 1] : b[(p + 1) * ldb + j]);
          acc = ftz(acc + x * y); /* x * y is exact: 8-bit significands */
        }
        float x = bf16_daz(ta ? a[p * lda + i] : a[i * lda + p]);
        float y = bf16_daz(tb ? b[j * ldb + p] : b[p * ldb + j]);
        acc = ftz(acc + x * y);
      }
      float *cp = c + i * ldc + j;
      *cp = beta == 0.f ? acc : *cp + acc;
    }
}

/* The emulation where the processor has no bf16 instructions: op(A) and
 * op(B) rounded to bf16 as vdpbf16ps reads them (subnormals zero), then
 * OpenBLAS's f32 GEMM, whose products of 8-bit significands are exact; only the
 * order of the f32 sums (and vdpbf16ps's flushing of subnormal partial
 * sums) differs from the hardware kernels. The rounded copies keep the
 * operands' layout: (rows, cols) with ld = cols. */
static float *rounded_copy(const float *x, int64_t rows, int64_t cols, int64_t ld, size_t *bytes) {
  *bytes = sizeof(float) * (size_t)(rows * cols);
  float *r = em_alloc(*bytes);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) r[i * cols + j] = bf16_daz(x[i * ld + j]);
  return r;
}

static void gemm_emulated(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                          int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                          int64_t ldc) {
  int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  size_t na, nb;
  float *ra = rounded_copy(a, ar, ac, lda, &na), *rb = rounded_copy(b, br, bc, ldb, &nb);
  em_pool_park(); /* the pool's workers leave the cores to OpenBLAS's threads */
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              (blasint)m, (blasint)n, (blasint)k, 1.f, ra, (blasint)ac, rb, (blasint)bc, beta, c,
              (blasint)ldc);
  em_free(rb, nb);
  em_free(ra, na);
}

#ifdef HAVE_BF16_KERNEL

typedef struct {
  const uint32_t *ap; /* (n_mt, k2, MR) pairs */
  const uint32_t *bp; /* (k2, np) pairs */
  int64_t m, n, k2, np, n_nt;
  float beta;
  float *c;
  int64_t ldc;
} bf16_job;

/* ap (n_mt, k2, MR): tile t, pair q, row r; rows past m and the odd
 * element past k are zero. */
BF16_TARGET static void pack_a(bool ta, int64_t m, int64_t k, const float *a, int64_t lda,
                               int64_t n_mt, int64_t k2, uint32_t *ap) {
  uint32_t tmp[16];
  if (!ta) { /* row i holds its pairs in order: a tile's MR rows at a time */
    uint32_t blk[MR][16];
    for (int64_t t = 0; t < n_mt; t++)
      for (int64_t q0 = 0; q0 < k2; q0 += 16) {
        int64_t nq = k2 - q0 < 16 ? k2 - q0 : 16, cnt = k - 2 * q0 < 32 ? k - 2 * q0 : 32;
        for (int r = 0; r < MR; r++) {
          int64_t i = t * MR + r;
          if (i < m) _mm512_storeu_si512(blk[r], pairs_from_run(a + i * lda + 2 * q0, cnt));
          else memset(blk[r], 0, sizeof blk[r]);
        }
        for (int64_t l = 0; l < nq; l++)
          for (int r = 0; r < MR; r++) ap[(t * k2 + q0 + l) * MR + r] = blk[r][l];
      }
    return;
  }
  for (int64_t q = 0; q < k2; q++) { /* A^T: rows 2q and 2q+1 run along i */
    const float *e = a + 2 * q * lda, *o = 2 * q + 1 < k ? a + (2 * q + 1) * lda : NULL;
    for (int64_t i0 = 0; i0 < n_mt * MR; i0 += 16) {
      _mm512_storeu_si512(tmp, pairs_from_rows(e + i0, o ? o + i0 : NULL, m - i0));
      int64_t t = i0 / MR;
      memcpy(ap + (t * k2 + q) * MR, tmp, sizeof(uint32_t) * MR);
      if (t + 1 < n_mt) memcpy(ap + ((t + 1) * k2 + q) * MR, tmp + MR, sizeof(uint32_t) * MR);
    }
  }
}

BF16_TARGET void em_bf16_pack_b_(bool tb, int64_t n, int64_t k, const float *b, int64_t ldb,
                                 int64_t k2, int64_t np, uint32_t *bp) {
  if (!tb) { /* rows 2q and 2q+1 run along j */
    for (int64_t q = 0; q < k2; q++) {
      const float *e = b + 2 * q * ldb, *o = 2 * q + 1 < k ? b + (2 * q + 1) * ldb : NULL;
      for (int64_t j0 = 0; j0 < np; j0 += 16)
        _mm512_storeu_si512(bp + q * np + j0,
                            pairs_from_rows(e + j0, o ? o + j0 : NULL, n - j0));
    }
    return;
  }
  uint32_t blk[16][16];
  for (int64_t j0 = 0; j0 < n; j0 += 16) /* B^T: row j holds column j's pairs in order */
    for (int64_t q0 = 0; q0 < k2; q0 += 16) {
      int64_t nj = n - j0 < 16 ? n - j0 : 16, nq = k2 - q0 < 16 ? k2 - q0 : 16;
      int64_t cnt = k - 2 * q0 < 32 ? k - 2 * q0 : 32;
      for (int64_t j = 0; j < nj; j++)
        _mm512_storeu_si512(blk[j], pairs_from_run(b + (j0 + j) * ldb + 2 * q0, cnt));
      for (int64_t l = 0; l < nq; l++)
        for (int64_t j = 0; j < nj; j++) bp[(q0 + l) * np + j0 + j] = blk[j][l];
    }
  for (int64_t q = 0; q < k2; q++) memset(bp + q * np + n, 0, sizeof(uint32_t) * (size_t)(np - n));
}

BF16_TARGET static void tile_avx512(const bf16_job *g, int64_t t, int64_t nt) {
  const uint32_t *ap = g->ap + t * g->k2 * MR;
  const uint32_t *bp = g->bp + nt * NR;
  __m512 acc[MR][2];
  for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t q = 0; q < g->k2; q++) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + q * g->np);
    __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + q * g->np + 16);
    const uint32_t *aq = ap + q * MR;
    for (int r = 0; r < MR; r++) {
      __m512bh av = (__m512bh)_mm512_set1_epi32((int)aq[r]);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
  int64_t i0 = t * MR, j0 = nt * NR;
  int mr = (int)(g->m - i0 < MR ? g->m - i0 : MR);
  for (int r = 0; r < mr; r++)
    for (int h = 0; h < 2; h++) {
      int64_t cols = g->n - j0 - 16 * h;
      if (cols <= 0) break;
      __mmask16 mask = cols >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << cols) - 1);
      float *cp = g->c + (i0 + r) * g->ldc + j0 + 16 * h;
      __m512 v = acc[r][h];
      if (g->beta != 0.f) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, cp), v);
      _mm512_mask_storeu_ps(cp, mask, v);
    }
}

static void run_tiles(void *ctx, int64_t begin, int64_t end) {
  const bf16_job *g = ctx;
  for (int64_t it = begin; it < end; it++) tile_avx512(g, it / g->n_nt, it % g->n_nt);
}

static void gemm_avx512(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                        int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                        int64_t ldc) {
  int64_t k2 = (k + 1) / 2, n_mt = (m + MR - 1) / MR, n_nt = (n + NR - 1) / NR;
  int64_t np = n_nt * NR;
  size_t a_bytes = sizeof(uint32_t) * (size_t)(n_mt * k2 * MR);
  size_t b_bytes = sizeof(uint32_t) * (size_t)(k2 * np);
  uint32_t *ap = em_alloc(a_bytes), *bp = em_alloc(b_bytes);
  pack_a(ta, m, k, a, lda, n_mt, k2, ap);
  em_bf16_pack_b_(tb, n, k, b, ldb, k2, np, bp);
  bf16_job g = {.ap = ap, .bp = bp, .m = m, .n = n, .k2 = k2, .np = np, .n_nt = n_nt,
                .beta = beta, .c = c, .ldc = ldc};
  int64_t items = n_mt * n_nt;
  /* about 64k multiply-adds per item before splitting over threads */
  int64_t grain = 65536 / (MR * NR * (k2 > 0 ? 2 * k2 : 1)) + 1;
  em_parallel_for(items, grain, run_tiles, &g);
  em_free(ap, a_bytes);
  em_free(bp, b_bytes);
}

#endif

void em_gemm_bf16(em_bf16_kernel kernel, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                  const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                  int64_t ldc) {
  EM_ASSERT(beta == 0.f || beta == 1.f);
  if (m <= 0 || n <= 0) return;
#ifdef HAVE_BF16_KERNEL
  if (kernel == EM_BF16_KERNEL_AVX512 && k > 0) {
    EM_ASSERT(em_bf16_kernel_available(kernel));
    gemm_avx512(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (kernel == EM_BF16_KERNEL_AMX && k > 0) {
    EM_ASSERT(em_bf16_kernel_available(kernel));
    em_gemm_amx_(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
#endif
  if (kernel == EM_BF16_KERNEL_EMULATED && k > 0) {
    gemm_emulated(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  EM_ASSERT(kernel == EM_BF16_KERNEL_SCALAR || k == 0);
  gemm_scalar(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}
