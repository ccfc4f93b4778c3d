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
#include "quant-isa.h"

#define ROW_BLOCK 32 /* rows a task quantises and multiplies */
#define COL_TILE 64  /* columns of one int32 block (a multiple of every n_block) */
#define COL_CHUNK 256 /* columns of a task when a few rows are split by columns */
/* Below this many multiply-adds one thread does the layer: waking a pool
 * worker costs tens of microseconds on this machine. */
#define PAR_MACS 4.0e6

/* The min and max of a row, 0 included, and whether all of it is finite
 * (the plain loop; quant-rows.c has the vector one). */
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

void em_quant_rows_ref(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *a, float *sx,
                       int32_t *zp) {
  for (int64_t m = 0; m < M; m++) {
    const float *xr = x + m * D; /* (D) */
    uint8_t *ar = a + m * Dp;    /* (Dp) */
    float lo, hi;
    bool finite = row_range(xr, D, &lo, &hi);
    float s = em_quant_row_scale(lo, hi, finite);
    float z = em_quant_row_zero(lo, s);
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

em_quant_rows_fn em_quant_rows_for(em_cpu_isa isa) {
#if defined(__x86_64__)
  if (isa > em_cpu_isa_detected()) return NULL;
  if (isa >= EM_CPU_ISA_AVX512) return em_quant_rows_isa_avx512;
  if (isa >= EM_CPU_ISA_AVX2) return em_quant_rows_isa_avx2;
  return em_quant_rows_isa_generic;
#else
  (void)isa;
  return NULL;
#endif
}

void em_quant_rows(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *a, float *sx,
                   int32_t *zp) {
  em_quant_rows_fn f = em_quant_rows_for(em_cpu_isa_active());
  if (f) f(x, M, D, Dp, a, NULL, sx, zp);
  else em_quant_rows_ref(x, M, D, Dp, a, sx, zp);
}

void em_quant_rows16(const float *x, int64_t M, int64_t D, int64_t Dp, uint8_t *tmp,
                     int16_t *a16, float *sx, int32_t *zp) {
  em_quant_rows_fn f = em_quant_rows_for(em_cpu_isa_active());
  if (f) {
    f(x, M, D, Dp, NULL, a16, sx, zp);
  } else {
    em_quant_rows_ref(x, M, D, Dp, tmp, sx, zp);
    em_quant_widen(tmp, M * Dp, a16);
  }
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

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
