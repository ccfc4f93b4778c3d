/* pool-fast.c: the rows of the 2x2 stride-2 max pool, the common pool of
 * the zoo's CNNs, for the fast path of pool2d.c: compiled once per
 * instruction set (cpu-kernels.h), AVX-512 with lane masks, the plain
 * loops elsewhere. Both give the reference's numbers and positions (the
 * first largest element of the window in row-major order, or the last
 * NaN), which test-conv and test-pool check against pool-ref.c. */
#include "cpu-kernels.h"

#include <math.h>

#if defined(__AVX512F__)
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
