/* quant-pmadd.c: the uint8 x int8 -> int32 GEMM without VNNI, written
 * once and compiled per instruction set (quant-isa.h): AVX-512BW on zmm
 * registers ("avx512bw"), AVX2 on ymm ("avx2"), SSE2 on xmm ("sse2", the
 * x86-64 baseline: EMBER_CPU_ISA=generic).
 *
 * A panel is QV_LANES columns (16, 8, 4) by pairs of inputs, packed as
 * int16 (one vector per pair), and the activations come widened to int16
 * too, so a row's pair is one broadcast from memory and pmaddwd adds two
 * exact products into each int32 lane with no shuffles on the way
 * (widening in the loop made port 5 the bottleneck: 2.4x slower).
 * pmaddubsw would take bytes but saturates a pair's sum at 32767, and
 * 2 * 255 * 127 is more: not exact. Products and sums are exact
 * (D <= EM_QUANT_MAX_FEATURES), so every width returns the reference's
 * int32 values bit for bit.
 *
 * C is cut into tiles of rows by two panels, the accumulators in
 * registers over the whole reduction: FULL_MR rows (8 with AVX-512's 32
 * registers, whose two weight loads then feed sixteen pmaddwd; 4 with
 * 16 registers) with the sixteen or eight accumulators spelled out, and
 * the edges in tiles of up to 4 rows by 1 or 2 panels. */
#include "quant-isa.h"

#include "em-cpu.h"

#if defined(__x86_64__)
#include "quant-vec.h"

#define NB QV_LANES /* columns per panel */
#define NP 2        /* panels per tile */
#define MR 4        /* rows of the edge tiles */
#if QV_LANES == 16
#define FULL_MR 8
#define NAME "avx512bw"
#define LEVEL EM_CPU_ISA_AVX512
#elif QV_LANES == 8
#define FULL_MR 4
#define NAME "avx2"
#define LEVEL EM_CPU_ISA_AVX2
#else
#define FULL_MR 4
#define NAME "sse2"
#define LEVEL EM_CPU_ISA_GENERIC
#endif

#define INLINE static inline __attribute__((always_inline))

static bool pmadd_supported(void) { return em_cpu_isa_active() >= LEVEL; }

static size_t pmadd_packed_size(int64_t K, int64_t Dp) {
  return (size_t)((K + NB - 1) / NB) * NB * (size_t)Dp * sizeof(int16_t);
}

/* panel p, pair g: int16 [(p * Dp/2 + g) * 2 NB + 2 j + t] = wq[NB p + j][2 g + t],
 * zero past K or D */
static void pmadd_pack(const int8_t *wq, int64_t K, int64_t D, int64_t Dp, void *packed) {
  int16_t *out = packed;
  int64_t np = (K + NB - 1) / NB, ng = Dp / 2;
  for (int64_t p = 0; p < np; p++)
    for (int64_t g = 0; g < ng; g++)
      for (int j = 0; j < NB; j++)
        for (int t = 0; t < 2; t++) {
          int64_t n = p * NB + j, d = 2 * g + t;
          *out++ = n < K && d < D ? wq[n * D + d] : 0;
        }
}

/* The full tile: FULL_MR rows by 2 NB columns. */
static void tile_full(const int16_t *a, int64_t lda, const int16_t *b, int64_t bs, int64_t ng,
                      int32_t *c, int64_t ldc) {
  qvi c00 = qvi_zero(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  qvi c30 = c00, c31 = c00;
#if FULL_MR == 8
  qvi c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
#endif
  const int16_t *b0 = b, *b1 = b + bs;
  for (int64_t g = 0; g < ng; g++) {
    qvi w0 = qvi_load(b0 + g * 2 * NB), w1 = qvi_load(b1 + g * 2 * NB);
    int32_t q; /* row I's pair (a0, a1) as int16, in every 32-bit lane */
    qvi av;
#define ROW(I)                                          \
  memcpy(&q, a + (I) * lda + 2 * g, 4);                 \
  av = qvi_set1(q);                                     \
  c##I##0 = qvi_add(c##I##0, qvi_madd16(av, w0));       \
  c##I##1 = qvi_add(c##I##1, qvi_madd16(av, w1));
    ROW(0) ROW(1) ROW(2) ROW(3)
#if FULL_MR == 8
    ROW(4) ROW(5) ROW(6) ROW(7)
#endif
#undef ROW
  }
#define STORE(I) qvi_store(c + (I) * ldc, c##I##0), qvi_store(c + (I) * ldc + NB, c##I##1);
  STORE(0) STORE(1) STORE(2) STORE(3)
#if FULL_MR == 8
  STORE(4) STORE(5) STORE(6) STORE(7)
#endif
#undef STORE
}

/* The edges: rows [0, mr) by panels [0, np), ncols valid columns. */
INLINE void tile(const int16_t *a, int64_t lda, const int16_t *b, int64_t bs, int64_t ng,
                 int32_t *c, int64_t ldc, int64_t ncols, const int mr, const int np) {
  qvi acc[MR][NP];
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
    for (int j = 0; j < NP; j++) acc[i][j] = qvi_zero();
  for (int64_t g = 0; g < ng; g++) {
    qvi bv[NP];
#pragma GCC unroll 2
    for (int j = 0; j < NP; j++)
      if (j < np) bv[j] = qvi_load(b + j * bs + g * 2 * NB);
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
      if (i >= mr) break;
      int32_t a2;
      memcpy(&a2, a + i * lda + 2 * g, 4);
      qvi av = qvi_set1(a2);
#pragma GCC unroll 2
      for (int j = 0; j < NP; j++)
        if (j < np) acc[i][j] = qvi_add(acc[i][j], qvi_madd16(av, bv[j]));
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++) {
    if (i >= mr) break;
#pragma GCC unroll 2
    for (int j = 0; j < NP; j++) {
      if (j >= np) break;
      int64_t w = ncols - NB * j;
      int32_t *dst = c + i * ldc + NB * j;
      if (w >= NB) qvi_store(dst, acc[i][j]);
      else qvi_store_part(dst, acc[i][j], (int)w);
    }
  }
}

#define CASE(MR_, NP_) \
  case (MR_) * 8 + (NP_): tile(a, lda, b, bs, ng, c, ldc, ncols, MR_, NP_); break;

static void pmadd_gemm(const em_quant_layer *L, const void *a_, int64_t lda, int64_t M,
                       int64_t n0, int64_t n1, int32_t *c0, int64_t ldc) {
  EM_ASSERT(n0 % NB == 0 && L->Dp % 2 == 0);
  const int16_t *a0 = a_;
  const int64_t ng = L->Dp / 2, bs = ng * 2 * NB;
  for (int64_t n = n0; n < n1; n += NB * NP) {
    int64_t ncols = n1 - n < NB * NP ? n1 - n : NB * NP;
    int np = (int)((ncols + NB - 1) / NB);
    const int16_t *b = (const int16_t *)L->packed + (n / NB) * bs;
    for (int64_t m = 0; m < M;) {
      const int16_t *a = a0 + m * lda;
      int32_t *c = c0 + m * ldc + (n - n0);
      if (M - m >= FULL_MR && ncols == NB * NP) {
        tile_full(a, lda, b, bs, ng, c, ldc);
        m += FULL_MR;
        continue;
      }
      int mr = M - m < MR ? (int)(M - m) : MR;
      m += mr;
      switch (mr * 8 + np) {
        CASE(1, 1) CASE(1, 2) CASE(2, 1) CASE(2, 2)
        CASE(3, 1) CASE(3, 2) CASE(4, 1) CASE(4, 2)
      default: EM_ASSERT(!"bad " NAME " tile");
      }
    }
  }
}

const em_qgemm_kernel em_qgemm_pmadd = {
    .name = NAME,
    .n_block = NB,
    .a_width = 2,
    .supported = pmadd_supported,
    .packed_size = pmadd_packed_size,
    .pack = pmadd_pack,
    .gemm = pmadd_gemm,
};

#endif /* x86-64 */
