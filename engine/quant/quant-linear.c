/* quant-linear.c: a quantised Linear layer's forward: per-row activation
 * quantisation, the integer GEMM, and the f32 rescale plus bias, threaded
 * over blocks of rows (or of columns, for a few rows of a wide layer).
 * The formulas are in quant-private.h; each row's numbers never depend
 * on the other rows or on the thread count. */
#include "quant-private.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "em-ops.h"
#include "em-cpu.h"
#include "em-pool.h"

#define ROW_BLOCK 32 /* rows a task quantises and multiplies */
#define COL_TILE 64  /* columns of one int32 block (a multiple of every n_block) */
#define COL_CHUNK 256 /* columns of a task when a few rows are split by columns */
/* Below this many multiply-adds one thread does the layer: waking a pool
 * worker costs tens of microseconds on this machine. */
#define PAR_MACS 4.0e6

/* The min and max of a row, 0 included, and whether all of it is finite
 * (the plain loop; rows_avx512 below is the fast path). */
static bool row_range(const float *x, int64_t D, float *lo_out, float *hi_out) {
  float lo = 0.f, hi = 0.f, nf = 0.f;
  for (int64_t d = 0; d < D; d++) {
    lo = x[d] < lo ? x[d] : lo; /* a NaN is skipped */
    hi = x[d] > hi ? x[d] : hi;
    nf += x[d] * 0.f; /* NaN from a NaN or an infinity */
  }
  *lo_out = lo;
  *hi_out = hi;
  return nf == 0.f;
}

/* A row's scale from its range (quant-private.h): (hi - lo) / 255 by
 * halves, FLT_MIN for an all-zero row; NaN for a row that holds a NaN or
 * an infinity (finite false). */
static float row_scale(float lo, float hi, bool finite) {
  float s = (hi * 0.5f - lo * 0.5f) / 127.5f;
  s = s >= FLT_MIN ? s : FLT_MIN;
  return finite ? s : NAN;
}

void em_quant_rows_ref(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *a, float *sx,
                       int32_t *zp) {
  for (int64_t m = 0; m < M; m++) {
    const float *xr = x + m * D; /* (D) */
    uint8_t *ar = a + m * Dp;    /* (Dp) */
    float lo, hi;
    bool finite = row_range(xr, D, &lo, &hi);
    float s = row_scale(lo, hi, finite);
    float z = rintf(-lo / s);
    z = z > 0.f ? z : 0.f; /* NaN (a row holding a NaN or an infinity) -> 0 */
    z = z < 255.f ? z : 255.f;
    const float inv = 1.f / s;
    for (int64_t d = 0; d < D; d++) {
      float t = rintf(xr[d] * inv) + z;
      t = t > 0.f ? t : 0.f; /* NaN -> 0 */
      t = t < 255.f ? t : 255.f;
      ar[d] = (uint8_t)(int32_t)t;
    }
    if (Dp > D) memset(ar + D, 0, (size_t)(Dp - D));
    sx[m] = s;
    zp[m] = (int32_t)z;
  }
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* The same on AVX-512: the same IEEE operations (min/max are exact;
 * vrndscaleps with mode 0 is rint's ties-to-even), so the same bytes. */
static __attribute__((target("avx512f,avx512bw"))) void rows_avx512(const float *x, int64_t M,
                                                                     int64_t D, int64_t Dp,
                                                                     uint8_t *a, int16_t *a16,
                                                                     float *sx, int32_t *zp) {
  const __m512 zero = _mm512_setzero_ps(), top = _mm512_set1_ps(255.f);
  for (int64_t m = 0; m < M; m++) {
    const float *xr = x + m * D; /* (D) */
    uint8_t *ar = a16 ? NULL : a + m * Dp; /* (Dp) */
    __m512 lo = zero, hi = zero, lo2 = zero, hi2 = zero; /* two chains: min/max latency */
    __m512 nf = zero; /* v * 0 summed: NaN once a NaN or an infinity passed */
    int64_t d = 0;
    for (; d + 32 <= D; d += 32) {
      __m512 v = _mm512_loadu_ps(xr + d), v2 = _mm512_loadu_ps(xr + d + 16);
      lo = _mm512_min_ps(v, lo);
      hi = _mm512_max_ps(v, hi);
      lo2 = _mm512_min_ps(v2, lo2);
      hi2 = _mm512_max_ps(v2, hi2);
      nf = _mm512_fmadd_ps(v, zero, _mm512_fmadd_ps(v2, zero, nf));
    }
    lo = _mm512_min_ps(lo2, lo);
    hi = _mm512_max_ps(hi2, hi);
    for (; d + 16 <= D; d += 16) {
      __m512 v = _mm512_loadu_ps(xr + d);
      lo = _mm512_min_ps(v, lo); /* a NaN keeps lo */
      hi = _mm512_max_ps(v, hi);
      nf = _mm512_fmadd_ps(v, zero, nf);
    }
    if (d < D) { /* the lanes past D load as 0, which the range holds anyway */
      __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << (D - d)) - 1), xr + d);
      lo = _mm512_min_ps(v, lo);
      hi = _mm512_max_ps(v, hi);
      nf = _mm512_fmadd_ps(v, zero, nf);
    }
    float l = _mm512_reduce_min_ps(lo), h = _mm512_reduce_max_ps(hi);
    bool finite = _mm512_cmp_ps_mask(nf, zero, _CMP_EQ_OQ) == 0xFFFF;
    float s = row_scale(l, h, finite);
    float z = rintf(-l / s);
    z = z > 0.f ? z : 0.f; /* NaN (a row holding a NaN or an infinity) -> 0 */
    z = z < 255.f ? z : 255.f;
    const __m512 inv = _mm512_set1_ps(1.f / s), zv = _mm512_set1_ps(z);
    for (d = 0; d < D; d += 16) {
      __mmask16 k = D - d >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (D - d)) - 1);
      __m512 v = _mm512_maskz_loadu_ps(k, xr + d);
      __m512 t = _mm512_roundscale_ps(_mm512_mul_ps(v, inv),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      t = _mm512_add_ps(t, zv);
      t = _mm512_min_ps(_mm512_max_ps(t, zero), top); /* a NaN -> 0 */
      if (a16) _mm512_mask_cvtepi32_storeu_epi16(a16 + m * Dp + d, k, _mm512_cvttps_epi32(t));
      else _mm512_mask_cvtepi32_storeu_epi8(ar + d, k, _mm512_cvttps_epi32(t));
    }
    if (Dp > D && a16) memset(a16 + m * Dp + D, 0, (size_t)(Dp - D) * sizeof *a16);
    else if (Dp > D) memset(ar + D, 0, (size_t)(Dp - D));
    sx[m] = s;
    zp[m] = (int32_t)z;
  }
}

/* The same on AVX2 (an AVX2-only processor, or EMBER_CPU_ISA=avx2): the
 * same IEEE operations as the plain loop (vminps / vmaxps keep the second
 * operand on a NaN, as its comparisons do; vroundps mode 0 is rint), so
 * the same bytes; the tail past the last 8 values is the plain loop's. */
static __attribute__((target("avx2,fma"))) void rows_avx2(const float *x, int64_t M, int64_t D,
                                                         int64_t Dp, uint8_t *a, int16_t *a16,
                                                         float *sx, int32_t *zp) {
  const __m256 zero = _mm256_setzero_ps(), top = _mm256_set1_ps(255.f);
  const int64_t Dv = D - D % 8;
  for (int64_t m = 0; m < M; m++) {
    const float *xr = x + m * D; /* (D) */
    uint8_t *ar = a16 ? NULL : a + m * Dp; /* (Dp) */
    int16_t *ar16 = a16 ? a16 + m * Dp : NULL;
    __m256 lo = zero, hi = zero, lo2 = zero, hi2 = zero, nf = zero, nf2 = zero;
    int64_t d = 0;
    for (; d + 16 <= Dv; d += 16) {
      __m256 v = _mm256_loadu_ps(xr + d), v2 = _mm256_loadu_ps(xr + d + 8);
      lo = _mm256_min_ps(v, lo); /* a NaN keeps lo */
      hi = _mm256_max_ps(v, hi);
      lo2 = _mm256_min_ps(v2, lo2);
      hi2 = _mm256_max_ps(v2, hi2);
      nf = _mm256_fmadd_ps(v, zero, nf);
      nf2 = _mm256_fmadd_ps(v2, zero, nf2);
    }
    for (; d < Dv; d += 8) {
      __m256 v = _mm256_loadu_ps(xr + d);
      lo = _mm256_min_ps(v, lo);
      hi = _mm256_max_ps(v, hi);
      nf = _mm256_fmadd_ps(v, zero, nf);
    }
    lo = _mm256_min_ps(lo2, lo);
    hi = _mm256_max_ps(hi2, hi);
    nf = _mm256_add_ps(nf, nf2);
    float ll[8], hh[8], nn[8];
    _mm256_storeu_ps(ll, lo);
    _mm256_storeu_ps(hh, hi);
    _mm256_storeu_ps(nn, nf);
    float l = 0.f, h = 0.f, nsum = 0.f;
    for (int i = 0; i < 8; i++) {
      l = ll[i] < l ? ll[i] : l;
      h = hh[i] > h ? hh[i] : h;
      nsum += nn[i];
    }
    for (; d < D; d++) {
      l = xr[d] < l ? xr[d] : l;
      h = xr[d] > h ? xr[d] : h;
      nsum += xr[d] * 0.f;
    }
    float s = row_scale(l, h, nsum == 0.f);
    float z = rintf(-l / s);
    z = z > 0.f ? z : 0.f; /* NaN (a row holding a NaN or an infinity) -> 0 */
    z = z < 255.f ? z : 255.f;
    const float inv = 1.f / s;
    const __m256 iv = _mm256_set1_ps(inv), zv = _mm256_set1_ps(z);
    for (d = 0; d < Dv; d += 8) {
      __m256 t = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + d), iv),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      t = _mm256_add_ps(t, zv);
      t = _mm256_min_ps(_mm256_max_ps(t, zero), top); /* a NaN -> 0 */
      __m256i q = _mm256_cvttps_epi32(t);
      __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      if (ar16) _mm_storeu_si128((__m128i *)(ar16 + d), w);
      else _mm_storel_epi64((__m128i *)(ar + d), _mm_packus_epi16(w, w));
    }
    for (; d < D; d++) {
      float t = rintf(xr[d] * inv) + z;
      t = t > 0.f ? t : 0.f; /* NaN -> 0 */
      t = t < 255.f ? t : 255.f;
      if (ar16) ar16[d] = (int16_t)(int32_t)t;
      else ar[d] = (uint8_t)(int32_t)t;
    }
    if (Dp > D && ar16) memset(ar16 + D, 0, (size_t)(Dp - D) * sizeof *ar16);
    else if (Dp > D) memset(ar + D, 0, (size_t)(Dp - D));
    sx[m] = s;
    zp[m] = (int32_t)z;
  }
}

/* The same on SSE2 (the x86-64 baseline), which has no vroundps:
 * cvtps2dq rounds as rint does (to nearest, ties to even, under the
 * default rounding mode that rintf follows too), exactly for these
 * values (|x / s| <= 255 and a little); the zero point is added as an
 * integer and pack-with-saturation clamps to [0, 255] (a NaN row's
 * 0x80000000 lands on 0, as the loop's NaN does). Writes uint8 into a,
 * or int16 into a16. */
static void rows_sse2(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *a,
                      int16_t *a16, float *sx, int32_t *zp) {
  const __m128 zero = _mm_setzero_ps();
  const int64_t Dv = D - D % 8;
  for (int64_t m = 0; m < M; m++) {
    const float *xr = x + m * D; /* (D) */
    uint8_t *ar = a16 ? NULL : a + m * Dp;
    int16_t *ar16 = a16 ? a16 + m * Dp : NULL;
    __m128 lo = zero, hi = zero, lo2 = zero, hi2 = zero, nf = zero, nf2 = zero;
    int64_t d = 0;
    for (; d < Dv; d += 8) {
      __m128 v = _mm_loadu_ps(xr + d), v2 = _mm_loadu_ps(xr + d + 4);
      lo = _mm_min_ps(v, lo); /* a NaN keeps lo */
      hi = _mm_max_ps(v, hi);
      lo2 = _mm_min_ps(v2, lo2);
      hi2 = _mm_max_ps(v2, hi2);
      nf = _mm_add_ps(_mm_mul_ps(v, zero), nf);
      nf2 = _mm_add_ps(_mm_mul_ps(v2, zero), nf2);
    }
    lo = _mm_min_ps(lo2, lo);
    hi = _mm_max_ps(hi2, hi);
    nf = _mm_add_ps(nf, nf2);
    float ll[4], hh[4], nn[4];
    _mm_storeu_ps(ll, lo);
    _mm_storeu_ps(hh, hi);
    _mm_storeu_ps(nn, nf);
    float l = 0.f, h = 0.f, nsum = 0.f;
    for (int i = 0; i < 4; i++) {
      l = ll[i] < l ? ll[i] : l;
      h = hh[i] > h ? hh[i] : h;
      nsum += nn[i];
    }
    for (; d < D; d++) {
      l = xr[d] < l ? xr[d] : l;
      h = xr[d] > h ? xr[d] : h;
      nsum += xr[d] * 0.f;
    }
    float s = row_scale(l, h, nsum == 0.f);
    float z = rintf(-l / s);
    z = z > 0.f ? z : 0.f; /* NaN (a row holding a NaN or an infinity) -> 0 */
    z = z < 255.f ? z : 255.f;
    const float inv = 1.f / s;
    const __m128 iv = _mm_set1_ps(inv);
    const __m128i zv = _mm_set1_epi32((int32_t)z);
    for (d = 0; d < Dv; d += 8) {
      __m128i q0 = _mm_add_epi32(_mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(xr + d), iv)), zv);
      __m128i q1 = _mm_add_epi32(_mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(xr + d + 4), iv)), zv);
      __m128i w = _mm_packs_epi32(q0, q1); /* int16, saturated */
      __m128i b = _mm_packus_epi16(w, w);  /* [0, 255] */
      if (ar16) _mm_storeu_si128((__m128i *)(ar16 + d), _mm_unpacklo_epi8(b, _mm_setzero_si128()));
      else _mm_storel_epi64((__m128i *)(ar + d), b);
    }
    for (; d < D; d++) {
      float t = rintf(xr[d] * inv) + z;
      t = t > 0.f ? t : 0.f; /* NaN -> 0 */
      t = t < 255.f ? t : 255.f;
      if (ar16) ar16[d] = (int16_t)(int32_t)t;
      else ar[d] = (uint8_t)(int32_t)t;
    }
    if (Dp > D && ar16) memset(ar16 + D, 0, (size_t)(Dp - D) * sizeof *ar16);
    else if (Dp > D) memset(ar + D, 0, (size_t)(Dp - D));
    sx[m] = s;
    zp[m] = (int32_t)z;
  }
}
#endif

void em_quant_rows(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *a, float *sx,
                   int32_t *zp) {
#if defined(__x86_64__) || defined(__i386__)
  if (em_cpu_isa_active() >= EM_CPU_ISA_AVX512) {
    rows_avx512(x, M, D, Dp, a, NULL, sx, zp);
    return;
  }
  if (em_cpu_isa_active() >= EM_CPU_ISA_AVX2) {
    rows_avx2(x, M, D, Dp, a, NULL, sx, zp);
    return;
  }
  rows_sse2(x, M, D, Dp, a, NULL, sx, zp);
#else
  em_quant_rows_ref(x, M, D, Dp, a, sx, zp);
#endif
}

void em_quant_rows16(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *tmp,
                     int16_t *a16, float *sx, int32_t *zp) {
#if defined(__x86_64__) || defined(__i386__)
  if (em_cpu_isa_active() >= EM_CPU_ISA_AVX512) {
    rows_avx512(x, M, D, Dp, NULL, a16, sx, zp);
    return;
  }
  if (em_cpu_isa_active() >= EM_CPU_ISA_AVX2) {
    rows_avx2(x, M, D, Dp, NULL, a16, sx, zp);
    return;
  }
  rows_sse2(x, M, D, Dp, NULL, a16, sx, zp);
#else
  em_quant_rows_ref(x, M, D, Dp, tmp, sx, zp);
  em_quant_widen(tmp, M * Dp, a16);
#endif
}

#if defined(__x86_64__) || defined(__i386__)
/* rescale's loop 8 columns at a time on AVX2 (no FMA: the same separate
 * IEEE multiplies and add, so the same bits), with the ReLU's rule (x < 0
 * ? 0 : x: NaN and -0 pass) when relu. Returns the first column left. */
static __attribute__((target("avx2"))) int64_t rescale_row_avx2(
    const int32_t *cr, int64_t n0, int64_t n1, float s, int32_t z, const int32_t *ws,
    const float *sw, const float *b, bool relu, float *yr) {
  const __m256 sv = _mm256_set1_ps(s), zero = _mm256_setzero_ps();
  const __m256i zv = _mm256_set1_epi32(z);
  int64_t n = n0;
  for (; n + 8 <= n1; n += 8) {
    __m256i acc = _mm256_loadu_si256((const __m256i *)(cr + (n - n0)));
    acc = _mm256_sub_epi32(acc, _mm256_mullo_epi32(zv, _mm256_loadu_si256((const __m256i *)(ws + n))));
    __m256 r = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_mul_ps(sv, _mm256_loadu_ps(sw + n)));
    if (b) r = _mm256_add_ps(r, _mm256_loadu_ps(b + n));
    if (relu) r = _mm256_blendv_ps(r, zero, _mm256_cmp_ps(r, zero, _CMP_LT_OQ));
    _mm256_storeu_ps(yr + n, r);
  }
  return n;
}
#endif

/* y (rows, K) columns [n0, n1) from the raw products c (rows, n1 - n0),
 * then max(y, 0) by em_relu's rule when relu. */
static void rescale(const em_quant_layer *L, const int32_t *c, int64_t rows, int64_t n0,
                    int64_t n1, const float *sx, const int32_t *zp, bool relu, float *y) {
  const int32_t *ws = L->w_sum;
  const float *sw = L->w_scale, *b = L->bias;
  int64_t w = n1 - n0;
#if defined(__x86_64__) || defined(__i386__)
  const bool avx2 = em_cpu_isa_active() >= EM_CPU_ISA_AVX2;
#endif
  for (int64_t m = 0; m < rows; m++) {
    const int32_t *cr = c + m * w;
    float *yr = y + m * L->K;
    const float s = sx[m];
    const int32_t z = zp[m];
    int64_t n = n0;
#if defined(__x86_64__) || defined(__i386__)
    if (avx2) n = rescale_row_avx2(cr, n0, n1, s, z, ws, sw, b, relu, yr);
#endif
    for (; n < n1; n++) {
      float r = (float)(cr[n - n0] - z * ws[n]) * (s * sw[n]);
      if (b) r += b[n];
      yr[n] = relu && r < 0.f ? 0.f : r;
    }
  }
}

void em_quant_widen(const uint8_t *a, int64_t n, int16_t *out) {
  for (int64_t i = 0; i < n; i++) out[i] = a[i];
}

/* Rows [m0, m1) by columns [n0, n1) of y, from quantised rows a (in the
 * kernel's width). */
static void block(const em_quant_layer *L, const em_qgemm_kernel *k, const void *a,
                  const float *sx, const int32_t *zp, int64_t m0, int64_t m1, int64_t n0,
                  int64_t n1, bool relu, float *y) {
  int32_t c[ROW_BLOCK * COL_TILE];
  for (int64_t m = m0; m < m1; m += ROW_BLOCK) {
    int64_t rows = m1 - m < ROW_BLOCK ? m1 - m : ROW_BLOCK;
    const void *am = (const char *)a + m * L->Dp * k->a_width;
    for (int64_t n = n0; n < n1; n += COL_TILE) {
      int64_t ne = n1 - n < COL_TILE ? n1 : n + COL_TILE;
      k->gemm(L, am, L->Dp, rows, n, ne, c, ne - n);
      rescale(L, c, rows, n, ne, sx + m, zp + m, relu, y + m * L->K);
    }
  }
}

typedef struct {
  const em_quant_layer *L;
  const em_qgemm_kernel *k;
  const float *x;
  int64_t M;
  uint8_t *a;
  int16_t *a16; /* a widened, for kernels with a_width 2 (else NULL) */
  float *sx;
  int32_t *zp;
  bool relu; /* a ReLU after the layer, applied in the rescale */
  float *y;
} run_ctx;

static void rows_task(void *p, int64_t b0, int64_t b1) {
  run_ctx *r = p;
  const em_quant_layer *L = r->L;
  int64_t m0 = b0 * ROW_BLOCK, m1 = b1 * ROW_BLOCK < r->M ? b1 * ROW_BLOCK : r->M;
  if (r->a16) /* straight to int16 (the widening in the same pass) */
    em_quant_rows16(r->x + m0 * L->D, m1 - m0, L->D, L->Dp, r->a + m0 * L->Dp,
                    r->a16 + m0 * L->Dp, r->sx + m0, r->zp + m0);
  else
    em_quant_rows(r->x + m0 * L->D, m1 - m0, L->D, L->Dp, r->a + m0 * L->Dp, r->sx + m0,
                  r->zp + m0);
  block(L, r->k, r->a16 ? (const void *)r->a16 : r->a, r->sx, r->zp, m0, m1, 0, L->K, r->relu,
        r->y);
}

static void cols_task(void *p, int64_t c0, int64_t c1) {
  run_ctx *r = p;
  int64_t n1 = c1 * COL_CHUNK < r->L->K ? c1 * COL_CHUNK : r->L->K;
  block(r->L, r->k, r->a16 ? (const void *)r->a16 : r->a, r->sx, r->zp, 0, r->M,
        c0 * COL_CHUNK, n1, r->relu, r->y);
}

void em_quant_linear_run(const em_quant_layer *L, const em_qgemm_kernel *k, const float *x,
                         int64_t M, float *y) {
  em_quant_linear_run_relu(L, k, x, M, false, y);
}

void em_quant_linear_run_relu(const em_quant_layer *L, const em_qgemm_kernel *k, const float *x,
                              int64_t M, bool relu, float *y) {
  run_ctx r = {L, k, x, M, NULL, NULL, NULL, NULL, relu, y};
  r.a = em_scratch((size_t)(M * L->Dp));
  if (k->a_width == 2) r.a16 = em_scratch((size_t)(M * L->Dp) * sizeof *r.a16);
  r.sx = em_scratch((size_t)M * sizeof *r.sx);
  r.zp = em_scratch((size_t)M * sizeof *r.zp);
  double macs = (double)M * (double)L->K * (double)L->D;
  int64_t n_rb = (M + ROW_BLOCK - 1) / ROW_BLOCK, n_cc = (L->K + COL_CHUNK - 1) / COL_CHUNK;
  bool par = macs >= PAR_MACS && em_get_num_threads() > 1;
  if (n_rb >= 2 || !par) {
    em_parallel_for(n_rb, par ? 1 : n_rb, rows_task, &r);
  } else { /* a few rows of a wide layer: split the columns */
    if (r.a16) em_quant_rows16(x, M, L->D, L->Dp, r.a, r.a16, r.sx, r.zp);
    else em_quant_rows(x, M, L->D, L->Dp, r.a, r.sx, r.zp);
    em_parallel_for(n_cc, 1, cols_task, &r);
  }
}

em_tensor *em_quant_linear_forward(const em_quant_layer *L, const em_qgemm_kernel *k,
                                   em_tensor *x, bool relu) {
  EM_ASSERT(x->dtype == EM_DTYPE_F32 && x->shape[x->ndim - 1] == L->D);
  x = em_contiguous(x); /* (N, D) or (N, L, D) */
  int64_t shape[EM_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  shape[x->ndim - 1] = L->K;
  em_tensor *y = em_empty(EM_DTYPE_F32, x->ndim, shape); /* (N, K) or (N, L, K) */
  int64_t M = em_tensor_numel(x) / L->D;
  if (M > 0) em_quant_linear_run_relu(L, k, em_f32(x), M, relu, em_f32(y));
  return y;
}
