/* pool-fast.c: the rows of the 2x2 stride-2 max pool, the common pool of
 * the zoo's CNNs, for the fast path of pool2d.c: compiled once per
 * instruction set (cpu-kernels.h), AVX-512 and AVX2 with lane masks, the
 * plain loops elsewhere. Both give the reference's numbers and positions (the
 * first largest element of the window in row-major order, or the last
 * NaN), which test-conv and test-pool check against pool-ref.c. */
#include "cpu-kernels.h"

#include <math.h>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
/* 2x2 stride-2 max pool of one output row from input rows r0, r1, 16
 * outputs a vector: deinterleave even and odd columns, then the same
 * first-max-or-NaN rule as the scalar loop, as lane masks. idx gets
 * positions in the plane; base is the position of r0[0]. */
void em_max2x2_fwd_row(const float *r0, const float *r1, int64_t OW, int32_t W, int32_t base,
                       float *y, int32_t *idx) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i k1 = _mm512_set1_epi32(1), kw = _mm512_set1_epi32(W),
                kw1 = _mm512_set1_epi32(W + 1);
  for (int64_t ox = 0; ox < OW; ox += 16) {
    uint32_t n = (uint32_t)(OW - ox < 16 ? OW - ox : 16);
    __mmask16 mo = (__mmask16)(n == 16 ? 0xFFFFu : (1u << n) - 1);
    __mmask16 ml = (__mmask16)(n >= 8 ? 0xFFFFu : (1u << (2 * n)) - 1);
    __mmask16 mh = (__mmask16)(n > 8 ? (1u << (2 * n - 16)) - 1 : 0);
    __m512 l0 = _mm512_maskz_loadu_ps(ml, r0 + 2 * ox);
    __m512 h0 = _mm512_maskz_loadu_ps(mh, r0 + 2 * ox + 16);
    __m512 l1 = _mm512_maskz_loadu_ps(ml, r1 + 2 * ox);
    __m512 h1 = _mm512_maskz_loadu_ps(mh, r1 + 2 * ox + 16);
    __m512 m = _mm512_permutex2var_ps(l0, even, h0), v;
    __m512i k = _mm512_setzero_si512();
    __mmask16 t;
    v = _mm512_permutex2var_ps(l0, odd, h0);
    t = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    m = _mm512_mask_mov_ps(m, t, v);
    k = _mm512_mask_mov_epi32(k, t, k1);
    v = _mm512_permutex2var_ps(l1, even, h1);
    t = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    m = _mm512_mask_mov_ps(m, t, v);
    k = _mm512_mask_mov_epi32(k, t, kw);
    v = _mm512_permutex2var_ps(l1, odd, h1);
    t = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    m = _mm512_mask_mov_ps(m, t, v);
    k = _mm512_mask_mov_epi32(k, t, kw1);
    __m512i at =
        _mm512_add_epi32(_mm512_set1_epi32(base + 2 * (int32_t)ox), _mm512_add_epi32(even, k));
    _mm512_mask_storeu_ps(y + ox, mo, m);
    _mm512_mask_storeu_epi32(idx + ox, mo, at);
  }
}

/* Backward of max2x2_fwd_row into a fresh gradient: each window's four
 * elements are written (gy at the max, zero elsewhere), re-interleaved. */
void em_max2x2_bwd_row(const float *gy, const int32_t *idx, int64_t OW, int32_t W,
                       int32_t base, float *r0, float *r1) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
  for (int64_t ox = 0; ox < OW; ox += 16) {
    uint32_t n = (uint32_t)(OW - ox < 16 ? OW - ox : 16);
    __mmask16 mo = (__mmask16)(n == 16 ? 0xFFFFu : (1u << n) - 1);
    __mmask16 ml = (__mmask16)(n >= 8 ? 0xFFFFu : (1u << (2 * n)) - 1);
    __mmask16 mh = (__mmask16)(n > 8 ? (1u << (2 * n - 16)) - 1 : 0);
    __m512 v = _mm512_maskz_loadu_ps(mo, gy + ox);
    __m512i k = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(mo, idx + ox),
                                 _mm512_add_epi32(_mm512_set1_epi32(base + 2 * (int32_t)ox), even));
    __m512 e0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, _mm512_setzero_si512()), v);
    __m512 e1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(1)), v);
    __m512 e2 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(W)), v);
    __m512 e3 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(W + 1)), v);
    _mm512_mask_storeu_ps(r0 + 2 * ox, ml, _mm512_permutex2var_ps(e0, lo, e1));
    _mm512_mask_storeu_ps(r0 + 2 * ox + 16, mh, _mm512_permutex2var_ps(e0, hi, e1));
    _mm512_mask_storeu_ps(r1 + 2 * ox, ml, _mm512_permutex2var_ps(e2, lo, e3));
    _mm512_mask_storeu_ps(r1 + 2 * ox + 16, mh, _mm512_permutex2var_ps(e2, hi, e3));
  }
}
#elif defined(__AVX2__)
/* The first n of 8 lanes. */
static inline __m256i first_lanes(int64_t n) {
  int32_t c = n >= 8 ? 8 : n <= 0 ? 0 : (int32_t)n;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The even and the odd lanes of the 16 floats lo, hi, in order. */
static inline __m256 even_of(__m256 lo, __m256 hi) {
  return _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
}
static inline __m256 odd_of(__m256 lo, __m256 hi) {
  return _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
}

/* m, k = v, kv where v > m or v is NaN (the scalar loop's rule). */
static inline void take_if(__m256 v, __m256i kv, __m256 *m, __m256i *k) {
  __m256 t = _mm256_or_ps(_mm256_cmp_ps(v, *m, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  *m = _mm256_blendv_ps(*m, v, t);
  *k = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(*k), _mm256_castsi256_ps(kv), t));
}

/* Loads and stores of 8 floats under a mask, plain when it is all lanes
 * (vmaskmovps stores are slow on AMD's processors). */
static inline __m256 load_m(const float *p, __m256i m, bool full) {
  return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}
static inline void store_m(float *p, __m256i m, bool full, __m256 v) {
  if (full) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, m, v);
}

/* em_max2x2_fwd_row as the AVX-512 one, 8 outputs a vector. */
void em_max2x2_fwd_row(const float *r0, const float *r1, int64_t OW, int32_t W, int32_t base,
                       float *y, int32_t *idx) {
  const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i k1 = _mm256_set1_epi32(1), kw = _mm256_set1_epi32(W),
                kw1 = _mm256_set1_epi32(W + 1);
  for (int64_t ox = 0; ox < OW; ox += 8) {
    int64_t n = OW - ox < 8 ? OW - ox : 8;
    __m256i mo = first_lanes(n), ml = first_lanes(2 * n), mh = first_lanes(2 * n - 8);
    const bool fl = n >= 4, fh = n == 8;
    __m256 l0 = load_m(r0 + 2 * ox, ml, fl), h0 = load_m(r0 + 2 * ox + 8, mh, fh);
    __m256 l1 = load_m(r1 + 2 * ox, ml, fl), h1 = load_m(r1 + 2 * ox + 8, mh, fh);
    __m256 m = even_of(l0, h0);
    __m256i k = _mm256_setzero_si256();
    take_if(odd_of(l0, h0), k1, &m, &k);
    take_if(even_of(l1, h1), kw, &m, &k);
    take_if(odd_of(l1, h1), kw1, &m, &k);
    __m256i at =
        _mm256_add_epi32(_mm256_set1_epi32(base + 2 * (int32_t)ox), _mm256_add_epi32(even, k));
    if (fh) {
      _mm256_storeu_ps(y + ox, m);
      _mm256_storeu_si256((__m256i *)(idx + ox), at);
    } else {
      _mm256_maskstore_ps(y + ox, mo, m);
      _mm256_maskstore_epi32(idx + ox, mo, at);
    }
  }
}

/* em_max2x2_bwd_row as the AVX-512 one, 8 outputs a vector. */
void em_max2x2_bwd_row(const float *gy, const int32_t *idx, int64_t OW, int32_t W,
                       int32_t base, float *r0, float *r1) {
  const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i kw = _mm256_set1_epi32(W), kw1 = _mm256_set1_epi32(W + 1),
                k1 = _mm256_set1_epi32(1), k0 = _mm256_setzero_si256();
  for (int64_t ox = 0; ox < OW; ox += 8) {
    int64_t n = OW - ox < 8 ? OW - ox : 8;
    __m256i mo = first_lanes(n), ml = first_lanes(2 * n), mh = first_lanes(2 * n - 8);
    const bool fl = n >= 4, fh = n == 8;
    __m256 v = load_m(gy + ox, mo, fh);
    __m256i k = _mm256_sub_epi32(fh ? _mm256_loadu_si256((const __m256i *)(idx + ox))
                                    : _mm256_maskload_epi32(idx + ox, mo),
                                 _mm256_add_epi32(_mm256_set1_epi32(base + 2 * (int32_t)ox), even));
    __m256 e0 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, k0)));
    __m256 e1 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, k1)));
    __m256 e2 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, kw)));
    __m256 e3 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, kw1)));
    /* re-interleave: windows 0, 1, 4, 5 and 2, 3, 6, 7, each as its two columns */
    __m256 a = _mm256_unpacklo_ps(e0, e1), b = _mm256_unpackhi_ps(e0, e1);
    __m256 c = _mm256_unpacklo_ps(e2, e3), d = _mm256_unpackhi_ps(e2, e3);
    store_m(r0 + 2 * ox, ml, fl, _mm256_permute2f128_ps(a, b, 0x20));
    store_m(r0 + 2 * ox + 8, mh, fh, _mm256_permute2f128_ps(a, b, 0x31));
    store_m(r1 + 2 * ox, ml, fl, _mm256_permute2f128_ps(c, d, 0x20));
    store_m(r1 + 2 * ox + 8, mh, fh, _mm256_permute2f128_ps(c, d, 0x31));
  }
}
#else
/* The plain loops of the two row functions above. */
void em_max2x2_fwd_row(const float *r0, const float *r1, int64_t OW, int32_t W, int32_t base,
                       float *y, int32_t *idx) {
  for (int64_t ox = 0; ox < OW; ox++) {
    float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
    float m = a;
    int32_t k = 0;
    if (b > m || isnan(b)) m = b, k = 1;
    if (c > m || isnan(c)) m = c, k = W;
    if (d > m || isnan(d)) m = d, k = W + 1;
    y[ox] = m;
    idx[ox] = base + (int32_t)(2 * ox) + k;
  }
}

void em_max2x2_bwd_row(const float *gy, const int32_t *idx, int64_t OW, int32_t W,
                       int32_t base, float *r0, float *r1) {
  for (int64_t ox = 0; ox < OW; ox++) {
    float v = gy[ox];
    int32_t k = idx[ox] - base - (int32_t)(2 * ox);
    r0[2 * ox] = k == 0 ? v : 0.f;
    r0[2 * ox + 1] = k == 1 ? v : 0.f;
    r1[2 * ox] = k == W ? v : 0.f;
    r1[2 * ox + 1] = k == W + 1 ? v : 0.f;
  }
}
#endif
