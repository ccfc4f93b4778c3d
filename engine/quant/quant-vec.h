/* quant-vec.h: the vector layer of engine/quant's per-instruction-set
 * files (quant-isa.h), picked by the variant's -march: AVX-512 (F, BW),
 * AVX2, else SSE2 (the x86-64 baseline). QV_LANES int32 or f32 lanes:
 *
 *   qvi (int32 x QV_LANES)       qvf (f32 x QV_LANES)
 *   qvi_zero  qvi_load(p)        qvf_zero  qvf_load(p)  qvf_set1(x)
 *   qvi_set1(x) int32 in each    qvf_load_part(p, n): n < QV_LANES values,
 *   qvi_madd16(a, b) pmaddwd:      zeros past them
 *     the int16 pairs' sums      qvf_min(v, acc) qvf_max(v, acc): acc on a
 *   qvi_add(a, b)                  NaN (as the plain loop's comparisons)
 *   qvi_store(p, v)              qvf_mul  qvf_add
 *   qvi_store_part(p, v, n)      qvf_lanes(v, out): the lanes to out[]
 *   qvf_rint(v): int32 lanes, rounded to nearest even (cvtps2dq under
 *     the default rounding mode, which rintf follows too); a NaN gives
 *     INT32_MIN
 *   qv_store_u8(p, v, n) / qv_store_i16(p, v, n): the first n (<=
 *     QV_LANES) lanes clamped to [0, 255], as uint8 / int16
 *   qv_store2_u8(p, v0, v1) / qv_store2_i16(p, v0, v1): the same for
 *     2 QV_LANES lanes, v0's then v1's (SSE2 packs the two at once)
 *
 * Every operation is exact or one IEEE operation, the same at every
 * width. Include after the headers that set EM_ISA (quant-isa.h). */
#pragma once

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define QV_LANES 16
typedef __m512i qvi;
typedef __m512 qvf;
static inline __mmask16 qv_mask(int n) {
  return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
}
#define qvi_zero() _mm512_setzero_si512()
#define qvi_load(p) _mm512_loadu_si512((const void *)(p))
#define qvi_set1(x) _mm512_set1_epi32(x)
#define qvi_madd16(a, b) _mm512_madd_epi16(a, b)
#define qvi_add(a, b) _mm512_add_epi32(a, b)
#define qvi_store(p, v) _mm512_storeu_si512((void *)(p), v)
#define qvi_store_part(p, v, n) _mm512_mask_storeu_epi32(p, qv_mask(n), v)
#define qvf_zero() _mm512_setzero_ps()
#define qvf_load(p) _mm512_loadu_ps(p)
#define qvf_load_part(p, n) _mm512_maskz_loadu_ps(qv_mask(n), p)
#define qvf_set1(x) _mm512_set1_ps(x)
#define qvf_min(v, acc) _mm512_min_ps(v, acc)
#define qvf_max(v, acc) _mm512_max_ps(v, acc)
#define qvf_mul(a, b) _mm512_mul_ps(a, b)
#define qvf_add(a, b) _mm512_add_ps(a, b)
#define qvf_lanes(v, out) _mm512_storeu_ps(out, v)
#define qvf_rint(v) _mm512_cvtps_epi32(v)
static inline void qv_store_u8(uint8_t *p, qvi v, int n) {
  _mm512_mask_cvtusepi32_storeu_epi8(p, qv_mask(n), _mm512_max_epi32(v, _mm512_setzero_si512()));
}
static inline void qv_store_i16(int16_t *p, qvi v, int n) {
  v = _mm512_min_epi32(_mm512_max_epi32(v, _mm512_setzero_si512()), _mm512_set1_epi32(255));
  _mm512_mask_cvtepi32_storeu_epi16(p, qv_mask(n), v);
}
#define qv_store2_u8(p, v0, v1) (qv_store_u8(p, v0, 16), qv_store_u8((p) + 16, v1, 16))
#define qv_store2_i16(p, v0, v1) (qv_store_i16(p, v0, 16), qv_store_i16((p) + 16, v1, 16))

#else
/* AVX2 and SSE2: whole vectors, and the partial ones through a buffer. */
#if defined(__AVX2__)
#define QV_LANES 8
typedef __m256i qvi;
typedef __m256 qvf;
#define qvi_zero() _mm256_setzero_si256()
#define qvi_load(p) _mm256_loadu_si256((const __m256i *)(p))
#define qvi_set1(x) _mm256_set1_epi32(x)
#define qvi_madd16(a, b) _mm256_madd_epi16(a, b)
#define qvi_add(a, b) _mm256_add_epi32(a, b)
#define qvi_store(p, v) _mm256_storeu_si256((__m256i *)(p), v)
#define qvf_zero() _mm256_setzero_ps()
#define qvf_load(p) _mm256_loadu_ps(p)
#define qvf_set1(x) _mm256_set1_ps(x)
#define qvf_min(v, acc) _mm256_min_ps(v, acc)
#define qvf_max(v, acc) _mm256_max_ps(v, acc)
#define qvf_mul(a, b) _mm256_mul_ps(a, b)
#define qvf_add(a, b) _mm256_add_ps(a, b)
#define qvf_lanes(v, out) _mm256_storeu_ps(out, v)
#define qvf_rint(v) _mm256_cvtps_epi32(v)
/* the eight lanes as bytes clamped to [0, 255] (the low 8 of an xmm) */
static inline __m128i qv_bytes(qvi v) {
  __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return _mm_packus_epi16(w, w);
}
#else
#define QV_LANES 4
typedef __m128i qvi;
typedef __m128 qvf;
#define qvi_zero() _mm_setzero_si128()
#define qvi_load(p) _mm_loadu_si128((const __m128i *)(p))
#define qvi_set1(x) _mm_set1_epi32(x)
#define qvi_madd16(a, b) _mm_madd_epi16(a, b)
#define qvi_add(a, b) _mm_add_epi32(a, b)
#define qvi_store(p, v) _mm_storeu_si128((__m128i *)(p), v)
#define qvf_zero() _mm_setzero_ps()
#define qvf_load(p) _mm_loadu_ps(p)
#define qvf_set1(x) _mm_set1_ps(x)
#define qvf_min(v, acc) _mm_min_ps(v, acc)
#define qvf_max(v, acc) _mm_max_ps(v, acc)
#define qvf_mul(a, b) _mm_mul_ps(a, b)
#define qvf_add(a, b) _mm_add_ps(a, b)
#define qvf_lanes(v, out) _mm_storeu_ps(out, v)
#define qvf_rint(v) _mm_cvtps_epi32(v)
/* the four lanes as bytes clamped to [0, 255] (the low 4 of an xmm):
 * signed saturation to int16, then unsigned to uint8 */
static inline __m128i qv_bytes(qvi v) {
  __m128i w = _mm_packs_epi32(v, v);
  return _mm_packus_epi16(w, w);
}
#endif

static inline void qvi_store_part(int32_t *p, qvi v, int n) {
  int32_t t[QV_LANES];
  qvi_store(t, v);
  memcpy(p, t, (size_t)n * sizeof *p);
}
static inline qvf qvf_load_part(const float *p, int n) {
  float t[QV_LANES] = {0};
  memcpy(t, p, (size_t)n * sizeof *p);
  return qvf_load(t);
}
static inline void qv_store_u8(uint8_t *p, qvi v, int n) {
  __m128i b = qv_bytes(v);
  if (n == QV_LANES) {
#if QV_LANES == 8
    _mm_storel_epi64((__m128i *)p, b);
#else
    int32_t w = _mm_cvtsi128_si32(b);
    memcpy(p, &w, 4);
#endif
  } else {
    uint8_t t[16];
    _mm_storeu_si128((__m128i *)t, b);
    memcpy(p, t, (size_t)n);
  }
}
static inline void qv_store_i16(int16_t *p, qvi v, int n) {
  __m128i w = _mm_unpacklo_epi8(qv_bytes(v), _mm_setzero_si128());
  if (n == QV_LANES) {
#if QV_LANES == 8
    _mm_storeu_si128((__m128i *)p, w);
#else
    _mm_storel_epi64((__m128i *)p, w);
#endif
  } else {
    int16_t t[8];
    _mm_storeu_si128((__m128i *)t, w);
    memcpy(p, t, (size_t)n * sizeof *p);
  }
}
#if QV_LANES == 8
#define qv_store2_u8(p, v0, v1) (qv_store_u8(p, v0, 8), qv_store_u8((p) + 8, v1, 8))
#define qv_store2_i16(p, v0, v1) (qv_store_i16(p, v0, 8), qv_store_i16((p) + 8, v1, 8))
#else
static inline __m128i qv_bytes2(qvi v0, qvi v1) {
  __m128i w = _mm_packs_epi32(v0, v1);
  return _mm_packus_epi16(w, w);
}
static inline void qv_store2_u8(uint8_t *p, qvi v0, qvi v1) {
  _mm_storel_epi64((__m128i *)p, qv_bytes2(v0, v1));
}
static inline void qv_store2_i16(int16_t *p, qvi v0, qvi v1) {
  _mm_storeu_si128((__m128i *)p, _mm_unpacklo_epi8(qv_bytes2(v0, v1), _mm_setzero_si128()));
}
#endif
#endif
