/* gemm-amx.c: the bf16 GEMM on AMX tiles (tdpbf16ps): A packed into
 * (m, k/2) rows of bf16 pairs, B into the (k/2, n) pair panel the AVX512
 * kernel also reads, both padded to whole tiles; each work item computes
 * a 32 x 32 block of C in four 16 x 16 f32 accumulator tiles. Linux hands
 * out the tile state on request (arch_prctl), once per process. */
#include "amp-private.h"
#include "em-pool.h"

#ifdef HAVE_BF16_KERNEL

#include <cpuid.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_TARGET                                                                             \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

enum { TM = 32, TN = 32, TK = 16 }; /* a C block per item; TK pairs per tile */

bool em_amx_enable_(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!((d >> 22) & 1) || !((d >> 24) & 1)) return false; /* AMX-BF16, AMX-TILE */
  /* ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA: refused by older kernels */
  return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} __attribute__((packed)) tile_config;

typedef struct {
  const uint32_t *ap; /* (mp, k2p) pairs */
  const uint32_t *bp; /* (k2p, np) pairs */
  int64_t m, n, k2p, np, n_nb;
  float beta;
  float *c;
  int64_t ldc;
} amx_job;

AMX_TARGET static void block(const amx_job *g, int64_t bi, int64_t bj) {
  int64_t i0 = bi * TM, j0 = bj * TN;
  const uint32_t *a0 = g->ap + i0 * g->k2p, *a1 = a0 + 16 * g->k2p, *b0 = g->bp + j0;
  size_t sa = sizeof(uint32_t) * (size_t)g->k2p, sb = sizeof(uint32_t) * (size_t)g->np;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t q0 = 0; q0 < g->k2p; q0 += TK) {
    _tile_loadd(4, a0 + q0, sa);
    _tile_loadd(5, a1 + q0, sa);
    _tile_loadd(6, b0 + q0 * g->np, sb);
    _tile_loadd(7, b0 + q0 * g->np + 16, sb);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  float out[4][16 * 16];
  _tile_stored(0, out[0], 64);
  _tile_stored(1, out[1], 64);
  _tile_stored(2, out[2], 64);
  _tile_stored(3, out[3], 64);
  for (int t = 0; t < 4; t++) {
    int64_t r0 = i0 + (t >> 1) * 16, c0 = j0 + (t & 1) * 16, cols = g->n - c0;
    if (cols <= 0) continue;
    __mmask16 mask = cols >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << cols) - 1);
    for (int r = 0; r < 16 && r0 + r < g->m; r++) {
      float *cp = g->c + (r0 + r) * g->ldc + c0;
      __m512 v = _mm512_loadu_ps(out[t] + r * 16);
      if (g->beta != 0.f) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, cp), v);
      _mm512_mask_storeu_ps(cp, mask, v);
    }
  }
}

AMX_TARGET static void run_blocks(void *ctx, int64_t begin, int64_t end) {
  const amx_job *g = ctx;
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) { /* 0-3 C, 4-5 A, 6-7 B: all 16 rows of 64 bytes */
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  for (int64_t it = begin; it < end; it++) block(g, it / g->n_nb, it % g->n_nb);
  _tile_release();
}

/* ap (mp, k2p): row i's pairs; rows past m and pairs past k are zero. */
AMX_TARGET static void pack_a(bool ta, int64_t m, int64_t k, const float *a, int64_t lda,
                              int64_t mp, int64_t k2p, uint32_t *ap) {
  if (!ta) {
    for (int64_t i = 0; i < mp; i++)
      for (int64_t q0 = 0; q0 < k2p; q0 += 16) {
        __m512i v = _mm512_setzero_si512();
        if (i < m) v = pairs_from_run(a + i * lda + 2 * q0, k - 2 * q0 < 32 ? k - 2 * q0 : 32);
        _mm512_storeu_si512(ap + i * k2p + q0, v);
      }
    return;
  }
  uint32_t blk[16][16]; /* [pair][row] */
  for (int64_t i0 = 0; i0 < mp; i0 += 16)
    for (int64_t q0 = 0; q0 < k2p; q0 += 16) {
      for (int l = 0; l < 16; l++) {
        int64_t p = 2 * (q0 + l);
        __m512i v = _mm512_setzero_si512();
        if (p < k)
          v = pairs_from_rows(a + p * lda + i0, p + 1 < k ? a + (p + 1) * lda + i0 : NULL, m - i0);
        _mm512_storeu_si512(blk[l], v);
      }
      for (int r = 0; r < 16; r++)
        for (int l = 0; l < 16; l++) ap[(i0 + r) * k2p + q0 + l] = blk[l][r];
    }
}

void em_gemm_amx_(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  int64_t k2 = (k + 1) / 2, k2p = (k2 + TK - 1) / TK * TK;
  int64_t n_mb = (m + TM - 1) / TM, n_nb = (n + TN - 1) / TN, mp = n_mb * TM, np = n_nb * TN;
  size_t a_bytes = sizeof(uint32_t) * (size_t)(mp * k2p);
  size_t b_bytes = sizeof(uint32_t) * (size_t)(k2p * np);
  uint32_t *ap = em_alloc(a_bytes), *bp = em_alloc(b_bytes);
  pack_a(ta, m, k, a, lda, mp, k2p, ap);
  em_bf16_pack_b_(tb, n, k, b, ldb, k2, np, bp);
  memset(bp + k2 * np, 0, sizeof(uint32_t) * (size_t)((k2p - k2) * np));
  amx_job g = {.ap = ap, .bp = bp, .m = m, .n = n, .k2p = k2p, .np = np, .n_nb = n_nb,
               .beta = beta, .c = c, .ldc = ldc};
  /* about 2M multiply-adds per chunk before splitting over threads */
  int64_t grain = (1 << 21) / (TM * TN * 2 * k2p) + 1;
  em_parallel_for(n_mb * n_nb, grain, run_blocks, &g);
  em_free(ap, a_bytes);
  em_free(bp, b_bytes);
}

#endif
