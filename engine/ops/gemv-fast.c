/* gemv-fast.c: the f32 product of one row, C (1, n) = alpha * a (1, k) @
 * op(B) (k, n) + beta * C (or + bias), then max(C, 0) when relu: a Linear
 * layer's forward at batch 1, the latency every `ember serve` request
 * pays. The GEMM paths pay for a whole product's machinery there:
 * OpenBLAS packs all of B (the weight, 800 KB for fmnist-mlp's first
 * layer) on every call, and gemm-fast.c packs B's panels by transposes,
 * though each weight is used once. Here B is read where it lies, once:
 *
 *  - B transposed (the forward's w (n, k), row-major): eight of its rows
 *    at a time, one vector accumulator each (eight independent FMA
 *    chains, one load of a per eight of w), reduced across lanes by a
 *    fixed tree into eight sums;
 *  - B plain (k, n): a's values broadcast, eight vectors of B's row per
 *    step, so each column is summed over k in order.
 *
 * Each element is summed in an order that depends only on k and its own
 * row, so the numbers do not depend on the thread count; products too
 * small to repay a pool wake-up (PAR_MACS) run on the calling thread.
 * Compiled once per instruction set (cpu-kernels.h): AVX-512, AVX2 + FMA,
 * and SSE2 (multiply then add) for the generic variant. Needs no scope. */
#include "cpu-kernels.h"

#include "em-pool.h"

#include <immintrin.h>

/* At or above this many multiply-adds (n k: 4 MB of weights) the pool
 * shares the outputs; below, waking a worker costs more than it saves. */
#define PAR_MACS (1 << 20)
#define ROWS 8    /* rows of w^T per step */
#define CHUNK 64  /* outputs per task when shared */

#if defined(__AVX512F__)
#define VW 16
typedef __m512 vec;
#define vzero() _mm512_setzero_ps()
#define vload(p) _mm512_loadu_ps(p)
#define vstore(p, v) _mm512_storeu_ps(p, v)
#define vset1(x) _mm512_set1_ps(x)
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#elif defined(__AVX2__) && defined(__FMA__)
#define VW 8
typedef __m256 vec;
#define vzero() _mm256_setzero_ps()
#define vload(p) _mm256_loadu_ps(p)
#define vstore(p, v) _mm256_storeu_ps(p, v)
#define vset1(x) _mm256_set1_ps(x)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#else
#define VW 4
typedef __m128 vec;
#define vzero() _mm_setzero_ps()
#define vload(p) _mm_loadu_ps(p)
#define vstore(p, v) _mm_storeu_ps(p, v)
#define vset1(x) _mm_set1_ps(x)
#define vfma(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
#endif

/* The eight lane sums of acc[0..7] into s[0..7], by a fixed tree. */
static inline void reduce8(const vec *acc, float *s) {
#if VW == 16
  __m256 h[ROWS];
  for (int r = 0; r < ROWS; r++)
    h[r] = _mm256_add_ps(_mm512_castps512_ps256(acc[r]),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r]), 1)));
#elif VW == 8
  const __m256 *h = acc;
#endif
#if VW >= 8
  __m256 t0 = _mm256_hadd_ps(h[0], h[1]), t1 = _mm256_hadd_ps(h[2], h[3]);
  __m256 t2 = _mm256_hadd_ps(h[4], h[5]), t3 = _mm256_hadd_ps(h[6], h[7]);
  __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  __m256 r = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                           _mm256_permute2f128_ps(u0, u1, 0x31));
  _mm256_storeu_ps(s, r);
#else
  for (int g = 0; g < ROWS; g += 4) {
    __m128 r0 = acc[g], r1 = acc[g + 1], r2 = acc[g + 2], r3 = acc[g + 3];
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    _mm_storeu_ps(s + g, _mm_add_ps(_mm_add_ps(r0, r1), _mm_add_ps(r2, r3)));
  }
#endif
}

/* The lane sum of one accumulator (the rows past the last eight). */
static inline float reduce1(vec v) {
  float l[VW], s = 0.f;
  vstore(l, v);
  for (int i = 0; i < VW; i++) s += l[i];
  return s;
}

typedef struct {
  bool tb;
  int64_t n, k;
  float alpha, beta;
  const float *a, *b;
  int64_t ldb;
  const float *bias;
  bool relu;
  float *c;
} gemv_job;

/* c[j] from the product's sum s. */
static inline float finish(const gemv_job *g, int64_t j, float s) {
  float r = g->alpha * s;
  if (g->bias) r += g->bias[j];
  else if (g->beta != 0.f) r += g->beta * g->c[j];
  return g->relu && r < 0.f ? 0.f : r;
}

/* Outputs [j0, j1) with B transposed: dot products of a with w's rows. */
static void rows_t(const gemv_job *g, int64_t j0, int64_t j1) {
  const int64_t k = g->k, kv = k - k % VW, ldb = g->ldb;
  const float *a = g->a;
  int64_t j = j0;
  for (; j + ROWS <= j1; j += ROWS) {
    const float *w = g->b + j * ldb;
    vec acc[ROWS];
    for (int r = 0; r < ROWS; r++) acc[r] = vzero();
    for (int64_t d = 0; d < kv; d += VW) {
      vec av = vload(a + d);
      acc[0] = vfma(av, vload(w + d), acc[0]);
      acc[1] = vfma(av, vload(w + ldb + d), acc[1]);
      acc[2] = vfma(av, vload(w + 2 * ldb + d), acc[2]);
      acc[3] = vfma(av, vload(w + 3 * ldb + d), acc[3]);
      acc[4] = vfma(av, vload(w + 4 * ldb + d), acc[4]);
      acc[5] = vfma(av, vload(w + 5 * ldb + d), acc[5]);
      acc[6] = vfma(av, vload(w + 6 * ldb + d), acc[6]);
      acc[7] = vfma(av, vload(w + 7 * ldb + d), acc[7]);
    }
    float s[ROWS];
    reduce8(acc, s);
    for (int r = 0; r < ROWS; r++) {
      for (int64_t d = kv; d < k; d++) s[r] += a[d] * w[r * ldb + d];
      g->c[j + r] = finish(g, j + r, s[r]);
    }
  }
  for (; j < j1; j++) {
    const float *w = g->b + j * ldb;
    vec acc = vzero();
    for (int64_t d = 0; d < kv; d += VW) acc = vfma(vload(a + d), vload(w + d), acc);
    float s = reduce1(acc);
    for (int64_t d = kv; d < k; d++) s += a[d] * w[d];
    g->c[j] = finish(g, j, s);
  }
}

/* Outputs [j0, j1) with B plain (k, n): each column summed over k in order. */
static void rows_n(const gemv_job *g, int64_t j0, int64_t j1) {
  const int64_t k = g->k, ldb = g->ldb;
  const float *a = g->a;
  int64_t j = j0;
  for (; j + 4 * VW <= j1; j += 4 * VW) {
    vec c0 = vzero(), c1 = c0, c2 = c0, c3 = c0;
    const float *b = g->b + j;
    for (int64_t d = 0; d < k; d++, b += ldb) {
      vec av = vset1(a[d]);
      c0 = vfma(av, vload(b), c0);
      c1 = vfma(av, vload(b + VW), c1);
      c2 = vfma(av, vload(b + 2 * VW), c2);
      c3 = vfma(av, vload(b + 3 * VW), c3);
    }
    float s[4 * VW];
    vstore(s, c0), vstore(s + VW, c1), vstore(s + 2 * VW, c2), vstore(s + 3 * VW, c3);
    for (int i = 0; i < 4 * VW; i++) g->c[j + i] = finish(g, j + i, s[i]);
  }
  for (; j + VW <= j1; j += VW) {
    vec c0 = vzero();
    const float *b = g->b + j;
    for (int64_t d = 0; d < k; d++, b += ldb) c0 = vfma(vset1(a[d]), vload(b), c0);
    float s[VW];
    vstore(s, c0);
    for (int i = 0; i < VW; i++) g->c[j + i] = finish(g, j + i, s[i]);
  }
  for (; j < j1; j++) {
    float s = 0.f;
    for (int64_t d = 0; d < k; d++) s += a[d] * g->b[d * ldb + j];
    g->c[j] = finish(g, j, s);
  }
}

static void run_chunks(void *ctx, int64_t c0, int64_t c1) {
  const gemv_job *g = ctx;
  int64_t j0 = c0 * CHUNK, j1 = c1 * CHUNK < g->n ? c1 * CHUNK : g->n;
  if (g->tb) rows_t(g, j0, j1);
  else rows_n(g, j0, j1);
}

bool em_gemv_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                 int64_t lda, const float *b, int64_t ldb, float beta, const float *bias,
                 bool relu, float *c, int64_t ldc) {
  /* one row of A, its k values adjacent (a transposed A of one column
   * with lda 1 is the same row) */
  if (m != 1 || n < 1 || k < 1 || (ta && lda != 1)) return false;
  gemv_job g = {tb, n, k, alpha, beta, a, b, ldb, bias, relu, c};
  int64_t chunks = (n + CHUNK - 1) / CHUNK;
  if ((double)n * (double)k >= PAR_MACS && chunks > 1 && em_get_num_threads() > 1)
    em_parallel_for(chunks, 1, run_chunks, &g);
  else
    run_chunks(&g, 0, chunks);
  return true;
}
