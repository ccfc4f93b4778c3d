/* test-kernels.c: the reference device's allocator and the shared kernel
 * bodies (engine/device/kernels/) on their own, below the op layer
 * (test-device-ops.c compares whole ops against the CPU):
 *  - the ref allocator: statistics, cache reuse, peaks, release, the
 *    EMBER_REF_DEVICE_MEMORY cap (NULL, statistics unchanged) and devices
 *    kept apart;
 *  - the counter-based generator against Random123's known answers, and
 *    dropout masks: a pure function of (seed, counter, i), keep rate;
 *  - bf16 / f16 rounding against em_bf16_from_f32 and the compiler's
 *    _Float16;
 *  - unary bodies and row bodies (softmax, cross-entropy with smoothing,
 *    layer norm) against double formulas and finite differences;
 *  - pooling bodies on a hand-checked case;
 *  - the SGD and Adam kernels bit for bit against the CPU optimiser;
 *  - copy (dtype conversion, broadcast, strides), fill, reduce (first
 *    maximum, first NaN), sum_to and the amp GEMM of the ref table.
 * The process runs with EMBER_REF_DEVICES=2 and a 1 MiB cap (set in main
 * before the backend reads them). Kernels get tensors wrapped around host
 * buffers: the reference device's memory is host memory. */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "em-optim.h"
#include "em-tensor.h"

#include "../../engine/device/device-private.h"
#include "../../engine/device/kernels/kern-elementwise.h"
#include "../../engine/device/kernels/kern-pool.h"
#include "../../engine/device/kernels/kern-random.h"
#include "../../engine/device/kernels/kern-rows.h"
#include "em-amp.h"

#define CAP 1048576

static const em_backend *ref(void) { return em_ref_backend(); }

/* ---- allocator ---------------------------------------------------------------- */

static void test_alloc_stats(void) {
  const em_backend *b = ref();
  g_assert_cmpint(b->count(), ==, 2);
  b->release_cached(0);
  b->reset_peak(0);
  em_memory_stats s0, s;
  b->stats(0, &s0);

  void *p = b->alloc(0, 1000); /* rounds to 1024 */
  g_assert_nonnull(p);
  g_assert_cmpuint((uintptr_t)p % 256, ==, 0);
  memset(p, 0xab, 1000);
  b->stats(0, &s);
  g_assert_cmpint(s.allocated_bytes - s0.allocated_bytes, ==, 1024);
  g_assert_cmpint(s.reserved_bytes - s0.reserved_bytes, ==, 1024);
  g_assert_cmpint(s.alloc_count - s0.alloc_count, ==, 1);
  g_assert_cmpint(s.system_alloc_count - s0.system_alloc_count, ==, 1);
  g_assert_cmpint(s.peak_allocated_bytes, >=, s.allocated_bytes);

  b->free(0, p, 1000);
  b->stats(0, &s);
  g_assert_cmpint(s.allocated_bytes, ==, s0.allocated_bytes);
  g_assert_cmpint(s.reserved_bytes - s0.reserved_bytes, ==, 1024);
  g_assert_cmpint(s.free_count - s0.free_count, ==, 1);
  g_assert_cmpint(s.cached_blocks, ==, 1);
  g_assert_cmpint(s.largest_free_block, ==, 1024);

  /* a request that fits the cached block reuses it */
  void *q = b->alloc(0, 700);
  g_assert_true(q == p);
  b->stats(0, &s);
  g_assert_cmpint(s.system_alloc_count - s0.system_alloc_count, ==, 1);
  g_assert_cmpint(s.cached_blocks, ==, 0);
  g_assert_cmpint(s.largest_free_block, ==, 0);
  g_assert_cmpint(s.allocated_bytes - s0.allocated_bytes, ==, 1024);

  /* one too small for it goes to the system (best fit wastes at most half) */
  void *r = b->alloc(0, 100);
  g_assert_true(r != q);
  b->stats(0, &s);
  g_assert_cmpint(s.system_alloc_count - s0.system_alloc_count, ==, 2);
  g_assert_cmpint(s.allocated_bytes - s0.allocated_bytes, ==, 1024 + 512);
  g_assert_cmpint(s.peak_allocated_bytes - s0.allocated_bytes, ==, 1024 + 512);
  b->free(0, q, 700);
  b->free(0, r, 100);
  b->stats(0, &s);
  g_assert_cmpint(s.cached_blocks, ==, 2);
  g_assert_cmpint(s.largest_free_block, ==, 1024);
  g_assert_cmpint(s.peak_allocated_bytes - s0.allocated_bytes, ==, 1024 + 512);
  b->reset_peak(0);
  b->stats(0, &s);
  g_assert_cmpint(s.peak_allocated_bytes, ==, s.allocated_bytes);
  g_assert_cmpint(s.peak_reserved_bytes, ==, s.reserved_bytes);

  /* device 1 keeps its own books */
  em_memory_stats t0, t;
  b->stats(1, &t0);
  void *d1 = b->alloc(1, 4096);
  g_assert_nonnull(d1);
  b->stats(1, &t);
  g_assert_cmpint(t.allocated_bytes - t0.allocated_bytes, ==, 4096);
  b->stats(0, &s);
  g_assert_cmpint(s.allocated_bytes, ==, s0.allocated_bytes);
  b->free(1, d1, 4096);
  b->release_cached(1);

  b->release_cached(0);
  b->stats(0, &s);
  g_assert_cmpint(s.cached_blocks, ==, 0);
  g_assert_cmpint(s.reserved_bytes, ==, s.allocated_bytes);
  g_assert_cmpint(s.largest_free_block, ==, 0);

  em_device_info info;
  em_error err;
  g_assert_cmpint(b->info(0, &info, &err), ==, EM_OK);
  g_assert_cmpstr(info.name, ==, "reference device (host memory)");
  g_assert_cmpint(info.total_bytes, ==, CAP);
  g_assert_cmpint(info.free_bytes, ==, CAP - s.reserved_bytes);
  g_assert_cmpint(b->info(2, &info, &err), !=, EM_OK);
}

static void test_alloc_cap(void) {
  const em_backend *b = ref();
  b->release_cached(0);
  em_memory_stats s0, s;
  b->stats(0, &s0);
  g_assert_cmpint(s0.reserved_bytes, ==, 0);

  void *a = b->alloc(0, 600 * 1024);
  g_assert_nonnull(a);
  b->free(0, a, 600 * 1024); /* cached: reserved stays 600 KiB */
  /* 700 KiB does not fit the cached block and would pass the cap with it:
   * the cache is released first, then it fits. */
  void *c = b->alloc(0, 700 * 1024);
  g_assert_nonnull(c);
  b->stats(0, &s);
  g_assert_cmpint(s.reserved_bytes, ==, 700 * 1024);
  g_assert_cmpint(s.cached_blocks, ==, 0);

  /* 400 KiB more cannot fit under 1 MiB: NULL, statistics unchanged */
  em_memory_stats before;
  b->stats(0, &before);
  g_assert_null(b->alloc(0, 400 * 1024));
  b->stats(0, &s);
  g_assert_cmpmem(&s, sizeof s, &before, sizeof before);

  /* an absurd request fails too */
  g_assert_null(b->alloc(0, (size_t)1 << 62));
  b->free(0, c, 700 * 1024);
  b->release_cached(0);
  b->stats(0, &s);
  g_assert_cmpint(s.reserved_bytes, ==, 0);
  g_assert_cmpint(s.allocated_bytes, ==, 0);
  g_assert_cmpint(s.peak_reserved_bytes, <=, CAP);
}

/* ---- random --------------------------------------------------------------------- */

static void test_philox(void) {
  /* Random123's known-answer vectors of philox4x32-10. */
  static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                     {~0u, ~0u, ~0u, ~0u},
                                     {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
  static const uint32_t key[3][2] = {{0, 0}, {~0u, ~0u}, {0xa4093822u, 0x299f31d0u}};
  static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                      {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                      {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
  for (int t = 0; t < 3; t++) {
    uint32_t out[4];
    em_kphilox(ctr[t], key[t], out);
    for (int j = 0; j < 4; j++) g_assert_cmphex(out[j], ==, want[t][j]);
  }
}

static em_tensor *wrap(float *data, int64_t n) {
  int64_t shape[1] = {n};
  return em_tensor_wrap(EM_DTYPE_F32, 1, shape, data);
}

static void test_dropout_mask(void) {
  em_scope *sc = em_scope_begin();
  enum { N = 100000 };
  float *a = g_new(float, N), *b = g_new(float, N), *c = g_new(float, N);
  const em_kernels *k = ref()->k;
  const double p = 0.3;
  k->dropout_mask(wrap(a, N), p, 1234, 77);
  k->dropout_mask(wrap(b, N), p, 1234, 77);
  g_assert_cmpmem(a, sizeof(float) * N, b, sizeof(float) * N);
  /* element i depends on (seed, counter, i) only, not on the mask's size */
  k->dropout_mask(wrap(c, 37), p, 1234, 77);
  g_assert_cmpmem(a, sizeof(float) * 37, c, sizeof(float) * 37);
  float scale = (float)(1.0 / (1.0 - p));
  int64_t kept = 0;
  for (int64_t i = 0; i < N; i++) {
    g_assert_true(a[i] == 0.f || a[i] == scale);
    kept += a[i] != 0.f;
    g_assert_true((a[i] != 0.f) == em_kdropout_keep(em_kdropout_threshold(p), 1234, 77, (uint64_t)i));
  }
  /* keep rate 0.7 within 5 standard deviations (sd ~ 0.00145) */
  g_assert_cmpfloat(fabs((double)kept / N - 0.7), <, 0.0075);
  /* another counter or seed gives another mask */
  k->dropout_mask(wrap(b, N), p, 1234, 78);
  g_assert_true(memcmp(a, b, sizeof(float) * N) != 0);
  k->dropout_mask(wrap(b, N), p, 1235, 77);
  g_assert_true(memcmp(a, b, sizeof(float) * N) != 0);
  /* p = 0 keeps everything at 1, p = 1 drops everything */
  k->dropout_mask(wrap(b, 1000), 0.0, 5, 0);
  for (int i = 0; i < 1000; i++) g_assert_true(b[i] == 1.f);
  k->dropout_mask(wrap(b, 1000), 1.0, 5, 0);
  for (int i = 0; i < 1000; i++) g_assert_true(b[i] == 0.f);
  g_free(a);
  g_free(b);
  g_free(c);
  em_scope_end(sc);
}

/* ---- rounding ------------------------------------------------------------------------- */

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void test_rounding(void) {
  GRand *r = g_rand_new_with_seed(7);
  static const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x3f800000u, 0x3f808000u,
                                   0x3f818000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
                                   0x00000001u, 0x007fffffu, 0x33800000u, 0x477fefffu,
                                   0x477ff000u, 0x387fc000u, 0x33000000u, 0x33000001u,
                                   0x38800000u, 0x387fffffu, 0x477fe000u, 0xc77ff000u,
                                   0x3f801000u, 0x3f803000u, 0xbf805000u, 0x33c00000u};
  for (int i = 0; i < 200000; i++) {
    uint32_t u = i < (int)G_N_ELEMENTS(edges) ? edges[i] : g_rand_int(r);
    float f = from_bits(u);
    if (f != f) {
      g_assert_true(em_kround_bf16(f) != em_kround_bf16(f));
      g_assert_true(em_kround_f16(f) != em_kround_f16(f));
      continue;
    }
    float wb = em_bf16_to_f32(em_bf16_from_f32(f)), gb = em_kround_bf16(f);
    g_assert_cmpmem(&gb, 4, &wb, 4);
#ifdef __FLT16_MAX__
    float wh = (float)(_Float16)f, gh = em_kround_f16(f);
    if (memcmp(&gh, &wh, 4) != 0) g_error("f16 rounding of %08x: got %a, want %a", u, gh, wh);
#endif
  }
  g_rand_free(r);
}

/* ---- element-wise bodies ---------------------------------------------------------------- */

static double un_f64(int op, double x, double p0, double p1) {
  switch (op) {
  case EM_KU_NEG: return -x;
  case EM_KU_EXP: return exp(x);
  case EM_KU_LOG: return log(x);
  case EM_KU_SQRT: return sqrt(x);
  case EM_KU_ABS: return fabs(x);
  case EM_KU_CLAMP: return x < p0 ? p0 : x > p1 ? p1 : x;
  case EM_KU_RELU: return x < 0 ? 0 : x;
  case EM_KU_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
  case EM_KU_SILU: return x / (1 + exp(-x));
  case EM_KU_SIGMOID: return 1 / (1 + exp(-x));
  case EM_KU_TANH: return tanh(x);
  case EM_KU_ADDS: return x + p0;
  case EM_KU_MULS: return x * p0;
  case EM_KU_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  default: return pow(x, p0);
  }
}

static void test_unary_bodies(void) {
  GRand *r = g_rand_new_with_seed(11);
  for (int op = 0; op < EM_KU_COUNT; op++) {
    const double pows[] = {2, 3, 0.5, -1, 1.7, 0};
    for (int pi = 0; pi < (op == EM_KU_POWS ? 6 : 1); pi++) {
      double p0 = op == EM_KU_CLAMP ? -0.5 : op == EM_KU_POWS ? pows[pi] : 1.25;
      double p1 = op == EM_KU_CLAMP ? 0.75 : 0;
      bool positive = op == EM_KU_LOG || op == EM_KU_SQRT || op == EM_KU_POWS;
      for (int i = 0; i < 200; i++) {
        double x = g_rand_double_range(r, positive ? 0.2 : -3, 3);
        float xf = (float)x;
        x = xf;
        float y = em_kun_f(op, xf, (float)p0, (float)p1);
        double yd = un_f64(op, x, p0, p1);
        g_assert_cmpfloat(fabs(y - yd), <=, 4e-7 * (1 + fabs(yd)));
        /* derivative against a central difference in double, away from kinks */
        if ((op == EM_KU_ABS || op == EM_KU_RELU) && fabs(x) < 1e-3) continue;
        if (op == EM_KU_CLAMP && (fabs(x - p0) < 1e-3 || fabs(x - p1) < 1e-3)) continue;
        double h = 1e-6, fd = (un_f64(op, x + h, p0, p1) - un_f64(op, x - h, p0, p1)) / (2 * h);
        float g = 0.75f;
        float d = em_kun_df(op, g, xf, y, (float)p0, (float)p1);
        if (fabs(d - 0.75 * fd) > 2e-5 * (1 + fabs(fd)))
          g_error("op %d p0 %g x %.9g: derivative %.9g, finite difference %.9g", op, p0, x,
                  (double)d, 0.75 * fd);
      }
    }
  }
  /* the conventions at kinks (PyTorch's) */
  g_assert_true(em_kun_df(EM_KU_RELU, 1.f, 0.f, 0.f, 0, 0) == 0.f);
  g_assert_true(em_kun_df(EM_KU_ABS, 1.f, 0.f, 0.f, 0, 0) == 0.f);
  g_assert_true(em_kun_df(EM_KU_CLAMP, 1.f, -0.5f, 0, -0.5f, 0.75f) == 1.f);
  g_assert_true(em_kun_df(EM_KU_CLAMP, 1.f, 0.75f, 0, -0.5f, 0.75f) == 1.f);
  g_assert_true(em_kun_df(EM_KU_CLAMP, 1.f, 0.76f, 0, -0.5f, 0.75f) == 0.f);
  g_assert_true(em_kun_df(EM_KU_POWS, 1.f, 2.f, 1.f, 0.f, 0) == 0.f);
  float nan = from_bits(0x7fc00000u);
  g_assert_true(isnan(em_kun_f(EM_KU_CLAMP, nan, -1, 1)));
  g_assert_true(isnan(em_kun_f(EM_KU_RELU, nan, 0, 0)));
  g_assert_cmpfloat(em_kbin_f(EM_KB_DIV, 1.f, 4.f), ==, 0.25f);
  g_assert_cmpfloat(em_kbin_f(EM_KB_SUB, 1.f, 4.f), ==, -3.f);
  g_rand_free(r);
}

static void test_kview(void) {
  /* a (3, 1) operand with strides (5, 1), offset 2, broadcast into (2, 3, 4) */
  int64_t shape[3] = {2, 3, 4}, xs[2] = {3, 1}, xst[2] = {5, 1};
  em_kview v;
  em_kview_bcast(&v, 3, shape, 2, xs, xst, 2);
  g_assert_cmpint(em_kview_numel(&v), ==, 24);
  for (int64_t i = 0; i < 24; i++) {
    int64_t j = (i / 4) % 3;
    g_assert_cmpint(em_kview_at(&v, i), ==, 2 + 5 * j);
  }
  g_assert_false(em_kview_is_contig(&v));
  int64_t cst[3] = {12, 4, 1};
  em_kview_bcast(&v, 3, shape, 3, shape, cst, 0);
  g_assert_true(em_kview_is_contig(&v));
  for (int64_t i = 0; i < 24; i++) g_assert_cmpint(em_kview_at(&v, i), ==, i);
}

/* ---- row bodies ---------------------------------------------------------------------------- */

static void test_softmax_rows(void) {
  GRand *r = g_rand_new_with_seed(3);
  enum { K = 37, S = 3 }; /* a row of K values with stride S */
  float x[K * S], y[K * S], g[K * S], gx[K * S];
  for (int k = 0; k < K * S; k++) {
    x[k] = (float)g_rand_double_range(r, -20, 20) + 1000.f * (k % S == 0); /* large logits */
    g[k] = (float)g_rand_double_range(r, -1, 1);
  }
  for (int log_out = 0; log_out < 2; log_out++) {
    em_ksoftmax_row(log_out, y, S, x, S, K);
    double m = -INFINITY, s = 0, sg = 0, sgy = 0;
    for (int k = 0; k < K; k++) m = fmax(m, x[k * S]);
    for (int k = 0; k < K; k++) s += exp((double)x[k * S] - m);
    for (int k = 0; k < K; k++) {
      double want = log_out ? (x[k * S] - m) - log(s) : exp(x[k * S] - m) / s;
      g_assert_cmpfloat(fabs(y[k * S] - want), <=, 2e-6 * (1 + fabs(want)));
    }
    em_ksoftmax_bwd_row(log_out, gx, S, g, S, y, S, K);
    for (int k = 0; k < K; k++) {
      sg += g[k * S];
      sgy += (double)g[k * S] * y[k * S];
    }
    for (int k = 0; k < K; k++) {
      double yk = y[k * S];
      double want = log_out ? g[k * S] - exp(yk) * sg : yk * (g[k * S] - sgy);
      g_assert_cmpfloat(fabs(gx[k * S] - want), <=, 1e-6 * (1 + fabs(want)));
    }
  }
  /* a NaN makes the row NaN */
  x[5 * S] = from_bits(0x7fc00000u);
  em_ksoftmax_row(0, y, S, x, S, K);
  g_assert_true(isnan(y[0]));
  g_rand_free(r);
}

/* PyTorch's smoothed cross-entropy of one row, in double. */
static double ce_f64(const double *x, int K, int t, double s) {
  double m = -INFINITY, z = 0, mean = 0;
  for (int k = 0; k < K; k++) m = fmax(m, x[k]);
  for (int k = 0; k < K; k++) z += exp(x[k] - m);
  double lse = m + log(z);
  for (int k = 0; k < K; k++) mean += x[k] / K;
  return (1 - s) * (lse - x[t]) + s * (lse - mean);
}

static void test_cross_entropy_row(void) {
  GRand *r = g_rand_new_with_seed(5);
  enum { K = 10 };
  float x[K];
  double xd[K];
  for (int k = 0; k < K; k++) xd[k] = x[k] = (float)g_rand_double_range(r, -4, 4);
  const double smooth[] = {0, 0.1, 1};
  for (int si = 0; si < 3; si++)
    for (int t = 0; t < K; t += 3) {
      double s = smooth[si];
      float lse;
      double l = em_kce_row(x, K, t, s, &lse);
      double want = ce_f64(xd, K, t, s);
      g_assert_cmpfloat(fabs(l - want), <=, 1e-6 * (1 + fabs(want)));
      for (int k = 0; k < K; k++) {
        double xp[K], xm[K], h = 1e-5;
        memcpy(xp, xd, sizeof xp);
        memcpy(xm, xd, sizeof xm);
        xp[k] += h;
        xm[k] -= h;
        double fd = (ce_f64(xp, K, t, s) - ce_f64(xm, K, t, s)) / (2 * h);
        float gk = em_kce_grad(x[k], lse, k == t, 0.5f, (float)s, K);
        g_assert_cmpfloat(fabs(gk - 0.5 * fd), <=, 1e-5);
      }
    }
  g_rand_free(r);
}

static void test_layer_norm_row(void) {
  GRand *r = g_rand_new_with_seed(9);
  enum { D = 24 };
  float x[D], w[D], b[D], y[D], g[D], gx[D];
  for (int d = 0; d < D; d++) {
    x[d] = (float)g_rand_double_range(r, -2, 2) + 100.f; /* a large mean */
    w[d] = (float)g_rand_double_range(r, 0.5, 1.5);
    b[d] = (float)g_rand_double_range(r, -1, 1);
    g[d] = (float)g_rand_double_range(r, -1, 1);
  }
  const double eps = 1e-5;
  double mean, rstd;
  em_klayer_norm_row(y, x, w, b, D, eps, &mean, &rstd);
  /* f(x) = sum g * layer_norm(x) in double, for a finite difference */
  double xd[D];
  for (int d = 0; d < D; d++) xd[d] = x[d];
  double m = 0, v = 0;
  for (int d = 0; d < D; d++) m += xd[d] / D;
  for (int d = 0; d < D; d++) v += (xd[d] - m) * (xd[d] - m) / D;
  g_assert_cmpfloat(fabs(mean - m), <=, 1e-12);
  g_assert_cmpfloat(fabs(rstd - 1 / sqrt(v + eps)), <=, 1e-9);
  for (int d = 0; d < D; d++) {
    double want = (xd[d] - m) / sqrt(v + eps) * w[d] + b[d];
    g_assert_cmpfloat(fabs(y[d] - want), <=, 1e-6 * (1 + fabs(want)));
  }
  em_klayer_norm_bwd_row(gx, g, x, w, D, mean, rstd);
  for (int k = 0; k < D; k++) {
    double f[2];
    for (int sgn = 0; sgn < 2; sgn++) {
      double xs[D], mm = 0, vv = 0, acc = 0;
      memcpy(xs, xd, sizeof xs);
      xs[k] += sgn ? -1e-6 : 1e-6;
      for (int d = 0; d < D; d++) mm += xs[d] / D;
      for (int d = 0; d < D; d++) vv += (xs[d] - mm) * (xs[d] - mm) / D;
      for (int d = 0; d < D; d++) acc += g[d] * ((xs[d] - mm) / sqrt(vv + eps) * w[d] + b[d]);
      f[sgn] = acc;
    }
    double fd = (f[0] - f[1]) / 2e-6;
    g_assert_cmpfloat(fabs(gx[k] - fd), <=, 1e-4 * (1 + fabs(fd)));
  }
  g_rand_free(r);
}

/* ---- pooling ---------------------------------------------------------------------------------- */

static void test_pool_bodies(void) {
  /* one (4, 4) plane, 3x3 windows, stride 2, padding 1: outputs (2, 2) */
  const float x[16] = {1, 5, 2, 0, 3, 5, 9, 1, 4, 2, 6, 7, 8, 0, 7, 3};
  em_kpool_geom g;
  em_kpool_geom_init(&g, 1, 1, 4, 4, 3, 3, 2, 2, 1, 1, 1);
  g_assert_cmpint(g.OH, ==, 2);
  g_assert_cmpint(g.OW, ==, 2);
  /* window (0, 0) covers rows 0..1, cols 0..1: {1, 5, 3, 5}: first max at 1 */
  const float want_max[4] = {5, 9, 8, 9};
  for (int o = 0; o < 4; o++) g_assert_cmpfloat(em_kpool_forward(1, &g, x, o), ==, want_max[o]);
  const float gy[4] = {1, 10, 100, 1000};
  float gx[16];
  for (int i = 0; i < 16; i++) gx[i] = em_kpool_backward(1, &g, gy, x, i);
  /* 5 at (0, 1) (first of the two 5s) gets window 0; 9 at (1, 2) gets
   * windows 1 and 3; 8 at (3, 0) gets window 2 */
  for (int i = 0; i < 16; i++) {
    float want = i == 1 ? 1 : i == 6 ? 1010 : i == 12 ? 100 : 0;
    g_assert_cmpfloat(gx[i], ==, want);
  }
  /* avg with count_include_pad: window 0 sums 14 over 9 */
  g_assert_cmpfloat(fabsf(em_kpool_forward(0, &g, x, 0) - 14.f / 9), <, 1e-6);
  em_kpool_geom_init(&g, 1, 1, 4, 4, 3, 3, 2, 2, 1, 1, 0);
  g_assert_cmpfloat(fabsf(em_kpool_forward(0, &g, x, 0) - 14.f / 4), <, 1e-6);
  /* avg backward: the adjoint of forward, <gy, pool(x)> = <backward(gy), x> */
  double lhs = 0, rhs = 0;
  for (int o = 0; o < 4; o++) lhs += gy[o] * (double)em_kpool_forward(0, &g, x, o);
  for (int i = 0; i < 16; i++) rhs += (double)em_kpool_backward(0, &g, gy, NULL, i) * x[i];
  g_assert_cmpfloat(fabs(lhs - rhs), <=, 1e-3);
}

/* ---- optimisers: bit for bit against the CPU ------------------------------------------------- */

static void run_optim(em_optim_kind kind, bool nesterov, double wd) {
  enum { D = 301, STEPS = 3 };
  em_optim_config c;
  em_optim_config_defaults(&c, kind);
  c.lr = 0.05;
  c.weight_decay = wd;
  if (kind == EM_OPTIM_SGD) {
    c.momentum = 0.9;
    c.dampening = nesterov ? 0 : 0.1;
    c.nesterov = nesterov;
  }
  int64_t shape[1] = {D};
  em_error err;
  em_tensor *p = em_tensor_new(EM_DTYPE_F32, 1, shape, &err);
  em_tensor *g = em_tensor_new(EM_DTYPE_F32, 1, shape, &err);
  float pr[D], m[D] = {0}, v[D] = {0};
  GRand *r = g_rand_new_with_seed(21);
  for (int i = 0; i < D; i++) pr[i] = em_f32(p)[i] = (float)g_rand_double_range(r, -1, 1);
  em_tensor_set_requires_grad(p, true);
  em_optimizer *o = em_optimizer_new(&c, 1, &p, NULL, &err);
  g_assert_nonnull(o);
  const em_kernels *k = ref()->k;
  for (int s = 0; s < STEPS; s++) {
    for (int i = 0; i < D; i++) em_f32(g)[i] = (float)g_rand_double_range(r, -1, 1);
    em_optimizer_zero_grad(o);
    em_grad_accumulate(p, g);
    em_optimizer_step(o);
    em_scope *sc = em_scope_begin();
    if (kind == EM_OPTIM_SGD)
      k->sgd_step(wrap(pr, D), g, wrap(m, D), c.lr, c.weight_decay, c.momentum, c.dampening,
                  c.nesterov, s == 0);
    else
      k->adam_step(wrap(pr, D), g, wrap(m, D), wrap(v, D), s + 1, c.lr, c.beta1, c.beta2,
                   c.eps, c.weight_decay, kind == EM_OPTIM_ADAMW);
    em_scope_end(sc);
    for (int i = 0; i < D; i++)
      if (memcmp(&pr[i], &em_f32(p)[i], 4) != 0)
        g_error("%s step %d element %d: ref %.9g, cpu %.9g", em_optim_kind_name(kind), s, i,
                (double)pr[i], (double)em_f32(p)[i]);
  }
  em_optimizer_free(o);
  em_tensor_free(p);
  em_tensor_free(g);
  g_rand_free(r);
}

static void test_optim_bits(void) {
  run_optim(EM_OPTIM_SGD, false, 0.01);
  run_optim(EM_OPTIM_SGD, true, 0);
  run_optim(EM_OPTIM_ADAM, false, 0.01);
  run_optim(EM_OPTIM_ADAMW, false, 0.1);
}

/* ---- table entries the op tests reach only indirectly ------------------------------------------- */

static void test_copy_fill(void) {
  em_scope *sc = em_scope_begin();
  const em_kernels *k = ref()->k;
  /* f32 (2, 3) -> i64 with C's truncation; through a transposed view */
  float xf[6] = {1.9f, -1.9f, 2.5f, -0.5f, 7.f, 100.75f};
  int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, t32[2] = {1, 3};
  em_tensor *x = em_tensor_wrap(EM_DTYPE_F32, 2, s23, xf);
  int64_t yi[6];
  em_tensor *y = em_tensor_wrap(EM_DTYPE_I64, 2, s32, yi);
  em_tensor *xt = em_view_raw(x, 2, s32, t32, 0); /* x transposed */
  k->copy(y, xt);
  const int64_t want[6] = {1, -0, -1, 7, 2, 100}; /* xt = {{1.9, -0.5}, {-1.9, 7}, {2.5, 100.75}} */
  for (int i = 0; i < 6; i++) g_assert_cmpint(yi[i], ==, want[i]);
  /* i64 -> u8 and i32, a broadcast row */
  int64_t row[3] = {3, 255, 4000000000LL}, s3[1] = {3};
  uint8_t yu[6];
  int32_t y32[6];
  k->copy(em_tensor_wrap(EM_DTYPE_U8, 2, s23, yu), em_tensor_wrap(EM_DTYPE_I64, 1, s3, row));
  k->copy(em_tensor_wrap(EM_DTYPE_I32, 2, s23, y32), em_tensor_wrap(EM_DTYPE_I64, 1, s3, row));
  for (int i = 0; i < 6; i++) {
    g_assert_cmpint(yu[i], ==, (uint8_t)row[i % 3]);
    g_assert_cmpint(y32[i], ==, (int32_t)row[i % 3]);
  }
  /* fill of every dtype, strided */
  double yd[6];
  k->fill(em_tensor_wrap(EM_DTYPE_F64, 2, s23, yd), -2.25);
  for (int i = 0; i < 6; i++) g_assert_cmpfloat(yd[i], ==, -2.25);
  k->fill(em_view_raw(y, 1, s3, (int64_t[]){2}, 0), 42);
  for (int i = 0; i < 6; i++) g_assert_cmpint(yi[i], ==, i % 2 ? want[i] : 42);
  em_scope_end(sc);
}

static void test_reduce_sum_to(void) {
  em_scope *sc = em_scope_begin();
  const em_kernels *k = ref()->k;
  float nan = from_bits(0x7fc00000u);
  /* (2, 4): max over dim 1 keeps the first maximum and the first NaN */
  float xf[8] = {1, 3, 3, 2, 5, nan, 9, nan};
  int64_t s24[2] = {2, 4}, s21[2] = {2, 1}, s14[2] = {1, 4};
  float ym[2], ys[2];
  int64_t idx[2];
  em_tensor *x = em_tensor_wrap(EM_DTYPE_F32, 2, s24, xf);
  k->reduce(EM_KR_MAX, em_tensor_wrap(EM_DTYPE_F32, 2, s21, ym),
            em_tensor_wrap(EM_DTYPE_I64, 2, s21, idx), x, 1);
  g_assert_cmpfloat(ym[0], ==, 3);
  g_assert_cmpint(idx[0], ==, 1);
  g_assert_true(isnan(ym[1]));
  g_assert_cmpint(idx[1], ==, 1);
  k->reduce(EM_KR_SUM, em_tensor_wrap(EM_DTYPE_F32, 2, s21, ys), NULL, x, 1);
  g_assert_cmpfloat(ys[0], ==, 9);
  /* sum_to (1, 4) from (2, 4), accumulating */
  float acc[4] = {1, 1, 1, 1};
  xf[5] = 0;
  xf[7] = 0;
  k->sum_to(true, em_tensor_wrap(EM_DTYPE_F32, 2, s14, acc), x);
  const float want[4] = {7, 4, 13, 3};
  for (int i = 0; i < 4; i++) g_assert_cmpfloat(acc[i], ==, want[i]);
  em_scope_end(sc);
}

/* The amp GEMM is the f32 GEMM of the rounded operands: products exact. */
static void test_gemm_amp(void) {
  enum { M = 5, N = 7, K = 33 };
  float a[K * M], b[K * N], c[2 * M * N]; /* (2, M, N) */
  GRand *r = g_rand_new_with_seed(13);
  for (int i = 0; i < K * M; i++) a[i] = (float)g_rand_double_range(r, -1, 1);
  for (int i = 0; i < K * N; i++) b[i] = (float)g_rand_double_range(r, -1, 1);
  for (int amp = 1; amp <= 2; amp++) {
    /* op(A) = A^T with A stored (K, M); B (K, N); two batches, B broadcast */
    for (int i = 0; i < 2 * M * N; i++) c[i] = 1.f;
    ref()->k->gemm(amp, EM_DTYPE_F32, true, false, M, N, K, 0.5f, a, M, 0, b, N, 0, 2.f, c, N, M * N, 2);
    for (int bi = 0; bi < 2; bi++)
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double s = 0;
          for (int q = 0; q < K; q++)
            s += (double)em_kround_amp(amp, a[q * M + i]) * em_kround_amp(amp, b[q * N + j]);
          double want = 0.5 * s + 2.0;
          g_assert_cmpfloat(fabs(c[(bi * M + i) * N + j] - want), <=, 1e-5);
        }
  }
  g_rand_free(r);
}

int main(int argc, char **argv) {
  /* Read once by the backend, before its first call. */
  g_setenv("EMBER_REF_DEVICES", "2", TRUE);
  g_setenv("EMBER_REF_DEVICE_MEMORY", G_STRINGIFY(CAP), TRUE);
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/device/ref/alloc/stats", test_alloc_stats);
  g_test_add_func("/device/ref/alloc/cap", test_alloc_cap);
  g_test_add_func("/device/kernels/philox", test_philox);
  g_test_add_func("/device/kernels/dropout-mask", test_dropout_mask);
  g_test_add_func("/device/kernels/rounding", test_rounding);
  g_test_add_func("/device/kernels/unary", test_unary_bodies);
  g_test_add_func("/device/kernels/kview", test_kview);
  g_test_add_func("/device/kernels/softmax-row", test_softmax_rows);
  g_test_add_func("/device/kernels/cross-entropy-row", test_cross_entropy_row);
  g_test_add_func("/device/kernels/layer-norm-row", test_layer_norm_row);
  g_test_add_func("/device/kernels/pool", test_pool_bodies);
  g_test_add_func("/device/kernels/optim-bits", test_optim_bits);
  g_test_add_func("/device/ref/copy-fill", test_copy_fill);
  g_test_add_func("/device/ref/reduce-sum-to", test_reduce_sum_to);
  g_test_add_func("/device/ref/gemm-amp", test_gemm_amp);
  return g_test_run();
}
