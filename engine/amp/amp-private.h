/* amp-private.h: what engine/amp's GEMM files share: rounding f32 into
 * packed bf16 pairs with AVX512-BF16, and the B panel both fast kernels
 * read. */
#pragma once

#include "em-amp.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_BF16_KERNEL 1

#define BF16_TARGET __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl")))

/* 16 pairs (even, odd) from two runs of cnt <= 16 floats (odd may be
 * NULL: zeros); lanes past cnt are zero. vcvtneps2bf16 rounds to nearest
 * even like em_bf16_from_f32; it differs only in NaN payloads and in
 * flushing subnormals, which vdpbf16ps flushes anyway. */
BF16_TARGET static inline __m512i pairs_from_rows(const float *e, const float *o, int64_t cnt) {
  __mmask16 m = cnt >= 16 ? (__mmask16)0xffff : cnt <= 0 ? 0 : (__mmask16)((1u << cnt) - 1);
  __m512 ve = _mm512_maskz_loadu_ps(m, e);
  __m512 vo = o ? _mm512_maskz_loadu_ps(m, o) : _mm512_setzero_ps();
  __m512i ie = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(ve));
  __m512i io = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(vo));
  return _mm512_or_si512(ie, _mm512_slli_epi32(io, 16));
}

/* 16 pairs from a run of cnt <= 32 floats already in pair order. */
BF16_TARGET static inline __m512i pairs_from_run(const float *p, int64_t cnt) {
  __mmask16 m0 = cnt >= 16 ? (__mmask16)0xffff : cnt <= 0 ? 0 : (__mmask16)((1u << cnt) - 1);
  __mmask16 m1 = cnt >= 32 ? (__mmask16)0xffff : cnt <= 16 ? 0 : (__mmask16)((1u << (cnt - 16)) - 1);
  __m512 lo = _mm512_maskz_loadu_ps(m0, p), hi = _mm512_maskz_loadu_ps(m1, p + 16);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* bp (k2, np): pair q, column j of op(B) (k, n); columns past n are zero. */
void em_bf16_pack_b_(bool tb, int64_t n, int64_t k, const float *b, int64_t ldb, int64_t k2,
                     int64_t np, uint32_t *bp);

/* tdpbf16ps: C = beta C + A B over (m, n, k); in gemm-amx.c. */
bool em_amx_enable_(void);
void em_gemm_amx_(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

#endif
