/* quant-gemm-x86.c: the uint8 x int8 -> int32 GEMM on AVX512-VNNI,
 * compiled with a target attribute (the build need not use
 * -march=native, and no variant's -march has VNNI) and chosen at run time
 * from the processor's instruction sets under EMBER_CPU_ISA's cap
 * (em-cpu.h).
 *
 * It cuts C into tiles of rows by panels of columns (8 x 32 while 8 rows
 * remain, else 4 x 64) and keeps the tile's accumulators in registers
 * over the whole reduction; the weights are packed once, at quantisation
 * time, panel by panel: a panel is 16 columns; for each group of 4 inputs
 * it holds 64 bytes, column j's 4 weights at [4j, 4j+4). vpdpbusd
 * multiplies the 4 activation bytes of a row (broadcast to all 16 lanes)
 * with them and adds the 4 products into the lane's int32: 64
 * multiply-adds per instruction, no intermediate saturation.
 *
 * Without VNNI the int16-pair kernels run ("avx512bw", "avx2", "sse2"):
 * one body compiled per instruction set, in quant-pmadd.c. Products and
 * sums are exact (D <= EM_QUANT_MAX_FEATURES), so every kernel returns
 * the reference's int32 values bit for bit. */
#include "quant-private.h"

#include "em-cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <string.h>

#define TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define INLINE static inline __attribute__((always_inline))

/* ---- AVX512-VNNI ------------------------------------------------------------- */

#define V_NB 16 /* columns per panel */
#define V_MR 4  /* rows per tile */
#define V_NP 4  /* panels per tile: 4 x 4 = 16 zmm accumulators */

static bool vnni_supported(void) { return em_cpu_has(EM_CPU_AVX512_VNNI); }

static size_t vnni_packed_size(int64_t K, int64_t Dp) {
  return (size_t)((K + V_NB - 1) / V_NB) * V_NB * (size_t)Dp;
}

/* panel p, group g: bytes [(p * Dp/4 + g) * 64 + 4 j + t] = wq[16 p + j][4 g + t],
 * zero past K or D */
static void vnni_pack(const int8_t *wq, int64_t K, int64_t D, int64_t Dp, void *packed) {
  int8_t *out = packed;
  int64_t np = (K + V_NB - 1) / V_NB, ng = Dp / 4;
  for (int64_t p = 0; p < np; p++)
    for (int64_t g = 0; g < ng; g++)
      for (int j = 0; j < V_NB; j++)
        for (int t = 0; t < 4; t++) {
          int64_t n = p * V_NB + j, d = 4 * g + t;
          *out++ = n < K && d < D ? wq[n * D + d] : 0;
        }
}

/* One tile: rows [0, mr) of a, panels [0, np) from b (panel stride bs),
 * written to c (columns: ncols valid of np * 16). */
INLINE TARGET_VNNI void vnni_tile(const uint8_t *a, int64_t lda, const int8_t *b, int64_t bs,
                                  int64_t ng, int32_t *c, int64_t ldc, int64_t ncols,
                                  const int mr, const int np) {
  __m512i acc[V_MR][V_NP];
#pragma GCC unroll 4
  for (int i = 0; i < V_MR; i++)
#pragma GCC unroll 4
    for (int j = 0; j < V_NP; j++) acc[i][j] = _mm512_setzero_si512();
  for (int64_t g = 0; g < ng; g++) {
    __m512i bv[V_NP];
#pragma GCC unroll 4
    for (int j = 0; j < V_NP; j++)
      if (j < np) bv[j] = _mm512_loadu_si512(b + j * bs + g * 64);
#pragma GCC unroll 4
    for (int i = 0; i < V_MR; i++) {
      if (i >= mr) break;
      int32_t a4;
      memcpy(&a4, a + i * lda + 4 * g, 4);
      __m512i av = _mm512_set1_epi32(a4);
#pragma GCC unroll 4
      for (int j = 0; j < V_NP; j++)
        if (j < np) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], av, bv[j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < V_MR; i++) {
    if (i >= mr) break;
#pragma GCC unroll 4
    for (int j = 0; j < V_NP; j++) {
      if (j >= np) break;
      int64_t w = ncols - 16 * j;
      __mmask16 k = w >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << w) - 1);
      _mm512_mask_storeu_epi32(c + i * ldc + 16 * j, k, acc[i][j]);
    }
  }
}

/* The full 4 x 64 tile with its sixteen accumulators spelled out: GCC
 * keeps an array of them in registers too, but shuffles copies around
 * every vpdpbusd (measured: 40% slower). */
static TARGET_VNNI void vnni_tile_4x4(const uint8_t *a, int64_t lda, const int8_t *b, int64_t bs,
                                      int64_t ng, int32_t *c, int64_t ldc) {
  __m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c03 = c00;
  __m512i c10 = c00, c11 = c00, c12 = c00, c13 = c00;
  __m512i c20 = c00, c21 = c00, c22 = c00, c23 = c00;
  __m512i c30 = c00, c31 = c00, c32 = c00, c33 = c00;
  const int8_t *b0 = b, *b1 = b + bs, *b2 = b + 2 * bs, *b3 = b + 3 * bs;
  for (int64_t g = 0; g < ng; g++) {
    __m512i w0 = _mm512_loadu_si512(b0 + g * 64), w1 = _mm512_loadu_si512(b1 + g * 64);
    __m512i w2 = _mm512_loadu_si512(b2 + g * 64), w3 = _mm512_loadu_si512(b3 + g * 64);
    int32_t q0, q1, q2, q3;
    memcpy(&q0, a + 4 * g, 4);
    memcpy(&q1, a + lda + 4 * g, 4);
    memcpy(&q2, a + 2 * lda + 4 * g, 4);
    memcpy(&q3, a + 3 * lda + 4 * g, 4);
    __m512i a0 = _mm512_set1_epi32(q0), a1 = _mm512_set1_epi32(q1);
    __m512i a2 = _mm512_set1_epi32(q2), a3 = _mm512_set1_epi32(q3);
    c00 = _mm512_dpbusd_epi32(c00, a0, w0), c01 = _mm512_dpbusd_epi32(c01, a0, w1);
    c02 = _mm512_dpbusd_epi32(c02, a0, w2), c03 = _mm512_dpbusd_epi32(c03, a0, w3);
    c10 = _mm512_dpbusd_epi32(c10, a1, w0), c11 = _mm512_dpbusd_epi32(c11, a1, w1);
    c12 = _mm512_dpbusd_epi32(c12, a1, w2), c13 = _mm512_dpbusd_epi32(c13, a1, w3);
    c20 = _mm512_dpbusd_epi32(c20, a2, w0), c21 = _mm512_dpbusd_epi32(c21, a2, w1);
    c22 = _mm512_dpbusd_epi32(c22, a2, w2), c23 = _mm512_dpbusd_epi32(c23, a2, w3);
    c30 = _mm512_dpbusd_epi32(c30, a3, w0), c31 = _mm512_dpbusd_epi32(c31, a3, w1);
    c32 = _mm512_dpbusd_epi32(c32, a3, w2), c33 = _mm512_dpbusd_epi32(c33, a3, w3);
  }
  _mm512_storeu_si512(c, c00), _mm512_storeu_si512(c + 16, c01);
  _mm512_storeu_si512(c + 32, c02), _mm512_storeu_si512(c + 48, c03);
  c += ldc;
  _mm512_storeu_si512(c, c10), _mm512_storeu_si512(c + 16, c11);
  _mm512_storeu_si512(c + 32, c12), _mm512_storeu_si512(c + 48, c13);
  c += ldc;
  _mm512_storeu_si512(c, c20), _mm512_storeu_si512(c + 16, c21);
  _mm512_storeu_si512(c + 32, c22), _mm512_storeu_si512(c + 48, c23);
  c += ldc;
  _mm512_storeu_si512(c, c30), _mm512_storeu_si512(c + 16, c31);
  _mm512_storeu_si512(c + 32, c32), _mm512_storeu_si512(c + 48, c33);
}

/* 8 rows by 32 columns, also sixteen accumulators: each 64-byte load of
 * the weights feeds eight vpdpbusd instead of four, which halves the
 * weight traffic from L2 (a 784-input panel of 64 columns is larger than
 * L1). */
static TARGET_VNNI void vnni_tile_8x2(const uint8_t *a, int64_t lda, const int8_t *b, int64_t bs,
                                      int64_t ng, int32_t *c, int64_t ldc) {
  __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m512i c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  __m512i c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  const int8_t *b0 = b, *b1 = b + bs;
  for (int64_t g = 0; g < ng; g++) {
    __m512i w0 = _mm512_loadu_si512(b0 + g * 64), w1 = _mm512_loadu_si512(b1 + g * 64);
    int32_t q[8];
    for (int i = 0; i < 8; i++) memcpy(&q[i], a + i * lda + 4 * g, 4);
    __m512i a0 = _mm512_set1_epi32(q[0]), a1 = _mm512_set1_epi32(q[1]);
    c00 = _mm512_dpbusd_epi32(c00, a0, w0), c01 = _mm512_dpbusd_epi32(c01, a0, w1);
    c10 = _mm512_dpbusd_epi32(c10, a1, w0), c11 = _mm512_dpbusd_epi32(c11, a1, w1);
    __m512i a2 = _mm512_set1_epi32(q[2]), a3 = _mm512_set1_epi32(q[3]);
    c20 = _mm512_dpbusd_epi32(c20, a2, w0), c21 = _mm512_dpbusd_epi32(c21, a2, w1);
    c30 = _mm512_dpbusd_epi32(c30, a3, w0), c31 = _mm512_dpbusd_epi32(c31, a3, w1);
    __m512i a4 = _mm512_set1_epi32(q[4]), a5 = _mm512_set1_epi32(q[5]);
    c40 = _mm512_dpbusd_epi32(c40, a4, w0), c41 = _mm512_dpbusd_epi32(c41, a4, w1);
    c50 = _mm512_dpbusd_epi32(c50, a5, w0), c51 = _mm512_dpbusd_epi32(c51, a5, w1);
    __m512i a6 = _mm512_set1_epi32(q[6]), a7 = _mm512_set1_epi32(q[7]);
    c60 = _mm512_dpbusd_epi32(c60, a6, w0), c61 = _mm512_dpbusd_epi32(c61, a6, w1);
    c70 = _mm512_dpbusd_epi32(c70, a7, w0), c71 = _mm512_dpbusd_epi32(c71, a7, w1);
  }
  _mm512_storeu_si512(c, c00), _mm512_storeu_si512(c + 16, c01), c += ldc;
  _mm512_storeu_si512(c, c10), _mm512_storeu_si512(c + 16, c11), c += ldc;
  _mm512_storeu_si512(c, c20), _mm512_storeu_si512(c + 16, c21), c += ldc;
  _mm512_storeu_si512(c, c30), _mm512_storeu_si512(c + 16, c31), c += ldc;
  _mm512_storeu_si512(c, c40), _mm512_storeu_si512(c + 16, c41), c += ldc;
  _mm512_storeu_si512(c, c50), _mm512_storeu_si512(c + 16, c51), c += ldc;
  _mm512_storeu_si512(c, c60), _mm512_storeu_si512(c + 16, c61), c += ldc;
  _mm512_storeu_si512(c, c70), _mm512_storeu_si512(c + 16, c71);
}

#define VNNI_CASE(MR_, NP_) \
  case (MR_) * 8 + (NP_): vnni_tile(a, lda, b, bs, ng, c, ldc, ncols, MR_, NP_); break;
/* rows [h, h + 4), the panels after the first two */
#define VNNI_CASE_AT(MR_, NP_, H_)                                                          \
  case (MR_) * 8 + (NP_):                                                                 \
    vnni_tile(a + (H_) * lda, lda, b + 2 * bs, bs, ng, c + (H_) * ldc + 32, ldc, ncols - 32, \
              MR_, NP_);                                                                  \
    break;

static TARGET_VNNI void vnni_gemm(const em_quant_layer *L, const void *a_, int64_t lda,
                                  int64_t M, int64_t n0, int64_t n1, int32_t *c0, int64_t ldc) {
  const uint8_t *a0 = a_;
  EM_ASSERT(n0 % V_NB == 0 && L->Dp % 4 == 0);
  const int64_t ng = L->Dp / 4, bs = ng * 64;
  for (int64_t n = n0; n < n1; n += V_NB * V_NP) {
    int64_t ncols = n1 - n < V_NB * V_NP ? n1 - n : V_NB * V_NP;
    int np = (int)((ncols + V_NB - 1) / V_NB);
    const int8_t *b = (const int8_t *)L->packed + (n / V_NB) * bs;
    for (int64_t m = 0; m < M;) {
      int mr = M - m < V_MR ? (int)(M - m) : V_MR;
      const uint8_t *a = a0 + m * lda;
      int32_t *c = c0 + m * ldc + (n - n0);
      if (M - m >= 8 && ncols >= 32) { /* 8 rows: 32 columns at a time */
        vnni_tile_8x2(a, lda, b, bs, ng, c, ldc);
        if (ncols == 64) vnni_tile_8x2(a, lda, b + 2 * bs, bs, ng, c + 32, ldc);
        else if (ncols > 32) { /* the rest: 4-row tiles */
          for (int h = 0; h < 8; h += 4)
            switch (4 * 8 + (np - 2)) {
              VNNI_CASE_AT(4, 1, h) VNNI_CASE_AT(4, 2, h)
            default: EM_ASSERT(!"bad VNNI tile");
            }
        }
        m += 8;
        continue;
      }
      m += mr;
      if (mr == 4 && ncols == 64) {
        vnni_tile_4x4(a, lda, b, bs, ng, c, ldc);
        continue;
      }
      switch (mr * 8 + np) {
        VNNI_CASE(1, 1) VNNI_CASE(1, 2) VNNI_CASE(1, 3) VNNI_CASE(1, 4)
        VNNI_CASE(2, 1) VNNI_CASE(2, 2) VNNI_CASE(2, 3) VNNI_CASE(2, 4)
        VNNI_CASE(3, 1) VNNI_CASE(3, 2) VNNI_CASE(3, 3) VNNI_CASE(3, 4)
        VNNI_CASE(4, 1) VNNI_CASE(4, 2) VNNI_CASE(4, 3) VNNI_CASE(4, 4)
      default: EM_ASSERT(!"bad VNNI tile");
      }
    }
  }
}

const em_qgemm_kernel em_qgemm_vnni = {
    .name = "avx512-vnni",
    .n_block = V_NB,
    .a_width = 1,
    .supported = vnni_supported,
    .packed_size = vnni_packed_size,
    .pack = vnni_pack,
    .gemm = vnni_gemm,
};

#endif /* x86 */
