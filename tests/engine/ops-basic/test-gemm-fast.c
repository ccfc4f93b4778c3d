/* test-gemm-fast.c: em_gemm's f32 path (gemm-fast.c in each instruction
 * set this processor runs, OpenBLAS where a variant has no kernel)
 * against a plain triple loop in double: every transpose combination,
 * padded leading dimensions, alpha, beta 0 over NaN garbage and beta 1,
 * sizes off the tile grid, the Linear layers' shapes, 1 and 2 threads
 * (which must agree bit for bit on Ember's own kernels). */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "gradcheck.h"
#include "em-pool.h"
#include "cpu-kernels.h"

typedef struct {
  int64_t m, n, k;
} dims;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static float next_f(void) { return (float)((double)(next_u64() >> 11) / 9007199254740992.0) * 2.f - 1.f; }

/* C (m, n, ldc) = alpha op(A) op(B) + beta C in double; also the sum of
 * |terms| of each element, for the f32 error bound. */
static void gemm_ref(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, double beta,
                     const float *c0, int64_t ldc, double *ref, double *mag) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0, s_abs = 0;
      for (int64_t kk = 0; kk < k; kk++) {
        double x = ta ? a[kk * lda + i] : a[i * lda + kk];
        double y = tb ? b[j * ldb + kk] : b[kk * ldb + j];
        s += x * y;
        s_abs += fabs(x * y);
      }
      double cv = beta == 0 ? 0 : beta * c0[i * ldc + j];
      ref[i * n + j] = alpha * s + cv;
      mag[i * n + j] = fabs(alpha) * s_abs + fabs(cv);
    }
}

/* The distinct kernel tables this processor runs, lowest level first. */
static int variants(const em_cpu_kernels **out) {
  int n = 0;
  for (int isa = EM_CPU_ISA_GENERIC; isa < EM_CPU_ISA_COUNT; isa++) {
    const em_cpu_kernels *k = em_cpu_kernels_for((em_cpu_isa)isa);
    if (k && (n == 0 || out[n - 1] != k)) out[n++] = k;
  }
  return n;
}

/* C by variant k's kernel, or by em_gemm (OpenBLAS) when it declines;
 * returns whether k took it. */
static bool use_gemv; /* check_case runs the variants' one-row kernel (gemv-fast.c) */

static bool run_gemm(const em_cpu_kernels *k, bool ta, bool tb, int64_t m, int64_t n, int64_t kd,
                     double alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                     double beta, float *c, int64_t ldc) {
  if (use_gemv) {
    bool took = k->gemv_f32(ta, tb, m, n, kd, (float)alpha, a, lda, b, ldb, (float)beta, NULL,
                            false, c, ldc);
    g_assert_true(took == (m == 1 && (!ta || lda == 1)));
    if (took) return true;
  } else if (k->gemm_f32(ta, tb, m, n, kd, (float)alpha, a, lda, b, ldb, (float)beta, NULL, false, c, ldc))
    return true;
  em_gemm(EM_DTYPE_F32, ta, tb, m, n, kd, alpha, a, lda, b, ldb, beta, c, ldc);
  return false;
}

/* One case on every variant with 1 and 2 threads; aborts with a message
 * on a mismatch. The bound: each product x*y and each partial sum of k
 * terms rounds by at most 2^-24 relative, so the error is at most about
 * (k + 2) * 2^-24 * sum |terms| (alpha and beta C add their own
 * rounding), whatever the order the kernel sums in. */
static void check_case(dims d, bool ta, bool tb, int pad, double alpha, double beta) {
  int64_t m = d.m, n = d.n, k = d.k;
  int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  size_t na = (size_t)((ta ? k : m) * lda), nb = (size_t)((tb ? n : k) * ldb),
         nc = (size_t)(m * ldc);
  float *a = g_new(float, na), *b = g_new(float, nb), *c0 = g_new(float, nc);
  float *c[2] = {g_new(float, nc), g_new(float, nc)};
  double *ref = g_new(double, (size_t)(m * n)), *mag = g_new(double, (size_t)(m * n));
  for (size_t i = 0; i < na; i++) a[i] = next_f();
  for (size_t i = 0; i < nb; i++) b[i] = next_f();
  for (size_t i = 0; i < nc; i++) c0[i] = beta == 0 ? NAN : next_f();
  gemm_ref(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc, ref, mag);
  const em_cpu_kernels *ks[EM_CPU_ISA_COUNT];
  int nk = variants(ks);
  for (int v = 0; v < nk; v++) {
    bool fast = false;
    for (int t = 0; t < 2; t++) {
      em_set_num_threads(t + 1);
      memcpy(c[t], c0, sizeof(float) * nc);
      em_scope *s = em_scope_begin();
      fast = run_gemm(ks[v], ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c[t], ldc);
      em_scope_end(s);
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
          float got = c[t][i * ldc + j];
          if (j >= n) { /* padding stays as it was */
            if (memcmp(&got, &c0[i * ldc + j], sizeof got) != 0)
              g_error("%s %ldx%ldx%ld ta=%d tb=%d: padding (%ld,%ld) written", ks[v]->name,
                      (long)m, (long)n, (long)k, ta, tb, (long)i, (long)j);
            continue;
          }
          double want = ref[i * n + j];
          double tol = (double)(k + 2) * 1.2e-7 * mag[i * n + j] + 1e-30;
          if (!(fabs(got - want) <= tol))
            g_error("%s %ldx%ldx%ld ta=%d tb=%d pad=%d alpha=%g beta=%g threads=%d: C(%ld,%ld) = "
                    "%.9g, want %.9g", ks[v]->name, (long)m, (long)n, (long)k, ta, tb, pad, alpha,
                    beta, t + 1, (long)i, (long)j, got, want);
        }
    }
    /* Ember's kernels give the same numbers for 1 and 2 threads (OpenBLAS may not) */
    if (fast) g_assert_true(memcmp(c[0], c[1], sizeof(float) * nc) == 0);
  }
  g_free(a);
  g_free(b);
  g_free(c0);
  g_free(c[0]);
  g_free(c[1]);
  g_free(ref);
  g_free(mag);
}

static void test_linear_shapes(void) {
  /* (m, n, k) with the transposes the layers use: forward NT, dW TN, dX NN */
  static const struct {
    dims d;
    bool ta, tb;
  } cases[] = {
      {{128, 256, 784}, false, true}, {{128, 128, 256}, false, true},
      {{128, 10, 128}, false, true},  {{256, 784, 128}, true, false},
      {{128, 256, 128}, true, false}, {{10, 128, 128}, true, false},
      {{128, 256, 128}, false, false}, {{128, 128, 10}, false, false},
      {{128, 128, 3136}, false, true}, {{128, 3136, 128}, true, false},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    check_case(cases[i].d, cases[i].ta, cases[i].tb, 0, 1.0, 0.0);
    check_case(cases[i].d, cases[i].ta, cases[i].tb, 0, 1.0, 1.0);
  }
}

static void test_all_transposes(void) {
  static const dims shapes[] = {{1, 1, 1},    {17, 33, 5},  {10, 128, 128}, {8, 32, 16},
                                {9, 31, 17},  {3, 100, 1},  {65, 47, 300},  {1, 200, 40},
                                {40, 1, 70},  {23, 64, 513}, {7, 16, 257},  {33, 17, 2}};
  static const double alphas[] = {1.0, -0.5, 2.25};
  static const double betas[] = {0.0, 1.0, -0.75};
  int i = 0;
  for (size_t s = 0; s < G_N_ELEMENTS(shapes); s++)
    for (int t = 0; t < 4; t++) {
      int pad = (int)(next_u64() % 3) * 5; /* 0, 5 or 10 */
      check_case(shapes[s], t & 1, t >> 1, pad, alphas[i % 3], betas[(i / 3) % 3]);
      check_case(shapes[s], t & 1, t >> 1, pad, 1.0, 0.0);
      i++;
    }
}

static void test_random_shapes(void) {
  for (int i = 0; i < 60; i++) {
    dims d = {1 + (int64_t)(next_u64() % 70), 1 + (int64_t)(next_u64() % 90),
              1 + (int64_t)(next_u64() % 300)};
    check_case(d, next_u64() & 1, next_u64() & 1, (int)(next_u64() % 4) * 3,
               (next_u64() & 1) ? 1.0 : 0.7, (double)(next_u64() % 3) * 0.5);
  }
}

/* Each variant's GEMV (one row of A: a Linear layer at batch 1) against
 * the same bound, bit for bit on 1 and 2 threads: off its 8-row and
 * vector steps, both transposes, padded rows, alpha and beta, and sizes
 * the pool shares (n k >= 2^20); it declines more than one row. */
static void test_gemv(void) {
  static const dims shapes[] = {{1, 1, 1},    {1, 7, 3},     {1, 8, 16},    {1, 9, 17},
                                {1, 10, 128}, {1, 65, 33},   {1, 128, 256}, {1, 256, 784},
                                {1, 300, 5},  {1, 31, 1000}, {1, 1100, 1000}, {1, 2000, 700},
                                {2, 16, 16}};
  static const double alphas[] = {1.0, -0.5, 2.25};
  static const double betas[] = {0.0, 1.0, -0.75};
  use_gemv = true;
  int i = 0;
  for (size_t s = 0; s < G_N_ELEMENTS(shapes); s++)
    for (int t = 0; t < 4; t++) {
      int pad = (int)(next_u64() % 3) * 5; /* 0, 5 or 10 */
      check_case(shapes[s], t & 1, t >> 1, pad, 1.0, 0.0);
      check_case(shapes[s], t & 1, t >> 1, pad, alphas[i % 3], betas[(i / 3) % 3]);
      i++;
    }
  use_gemv = false;
}

/* Leading dimensions that are multiples of 128 floats (the plain-B copy). */
static void test_aligned_ld(void) {
  check_case((dims){64, 100, 200}, false, false, 28, 1.0, 1.0); /* ldb = 128 */
  check_case((dims){48, 256, 64}, true, false, 0, 1.0, 0.0);    /* ldb = 256 */
  check_case((dims){40, 100, 128}, false, true, 0, 1.0, 0.0);   /* ldb = 128, transposed */
}

/* em_gemm_bias (the bias added where the first reduction block is stored,
 * the ReLU where the last is) gives what filling C with the bias, em_gemm
 * with beta 1, then em_relu's rule give, bit for bit, on 1 and 2 threads,
 * with padded rows left alone; NaN passes the ReLU, as em_relu's. The last
 * shape is too big for the fast kernels (OpenBLAS, then a pass). */
static void check_bias(bool relu) {
  static const dims shapes[] = {{128, 256, 784}, {128, 10, 128}, {7, 33, 300}, {1, 1, 1},
                                {1, 256, 784},   {1, 10, 128},   {600, 600, 200}};
  for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
    int64_t m = shapes[si].m, n = shapes[si].n, k = shapes[si].k, ldc = n + 3;
    float *a = g_new(float, (size_t)(m * k)), *w = g_new(float, (size_t)(n * k));
    float *bias = g_new(float, (size_t)n), *want = g_new(float, (size_t)(m * ldc));
    float *got = g_new(float, (size_t)(m * ldc));
    for (int64_t i = 0; i < m * k; i++) a[i] = next_f();
    for (int64_t i = 0; i < n * k; i++) w[i] = next_f();
    for (int64_t i = 0; i < n; i++) bias[i] = next_f();
    if (relu && n > 3) bias[3] = NAN;
    for (int t = 1; t <= 2; t++) {
      em_set_num_threads(t);
      for (int64_t i = 0; i < m * ldc; i++) want[i] = got[i] = (float)i;
      for (int64_t i = 0; i < m; i++) memcpy(want + i * ldc, bias, sizeof(float) * (size_t)n);
      em_scope *s = em_scope_begin();
      em_gemm(EM_DTYPE_F32, false, true, m, n, k, 1.0, a, k, w, k, 1.0, want, ldc);
      for (int64_t i = 0; relu && i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          float *v = &want[i * ldc + j];
          *v = *v < 0.f ? 0.f : *v;
        }
      em_gemm_bias(EM_DTYPE_F32, false, true, m, n, k, a, k, w, k, bias, relu, got, ldc);
      em_scope_end(s);
      if (relu && n > 3) g_assert_true(isnan(got[3]));
      g_assert_true(memcmp(want, got, sizeof(float) * (size_t)(m * ldc)) == 0);
    }
    g_free(a);
    g_free(w);
    g_free(bias);
    g_free(want);
    g_free(got);
  }
  em_set_num_threads(1);
}

static void test_bias(void) { check_bias(false); }
static void test_bias_relu(void) { check_bias(true); }

/* Each variant's fast kernel takes small products inside a scope and
 * declines without one and for big products (left to OpenBLAS); a
 * variant with no kernel (generic) declines everything. */
static void test_dispatch(void) {
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4];
  const em_cpu_kernels *ks[EM_CPU_ISA_COUNT];
  int nk = variants(ks);
  g_assert_cmpint(nk, >=, 1);
  g_assert_cmpstr(ks[0]->name, ==, "generic");
  g_assert_true(em_cpu_kernels_get() == em_cpu_kernels_for(em_cpu_isa_active()));
  for (int v = 0; v < nk; v++) {
    const em_cpu_kernels *k = ks[v];
    bool has_kernel = strcmp(k->name, "avx512") == 0 || strcmp(k->name, "avx2") == 0;
    g_assert_false(k->gemm_f32(false, false, 2, 2, 2, 1.f, a, 2, b, 2, 0.f, NULL, false, c, 2));
    em_scope *s = em_scope_begin();
    g_assert_true(k->gemm_f32(false, false, 2, 2, 2, 1.f, a, 2, b, 2, 0.f, NULL, false, c, 2) ==
                  has_kernel);
    for (int i = 0; has_kernel && i < 4; i++) g_assert_cmpfloat(c[i], ==, a[i]);
    g_assert_false(
        k->gemm_f32(false, false, 1024, 1024, 1024, 1.f, a, 2, b, 2, 0.f, NULL, false, c, 2));
    em_scope_end(s);
  }
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/gemm-fast/dispatch", test_dispatch);
  g_test_add_func("/engine/gemm-fast/bias", test_bias);
  g_test_add_func("/engine/gemm-fast/bias-relu", test_bias_relu);
  g_test_add_func("/engine/gemm-fast/linear-shapes", test_linear_shapes);
  g_test_add_func("/engine/gemm-fast/transposes", test_all_transposes);
  g_test_add_func("/engine/gemm-fast/random", test_random_shapes);
  g_test_add_func("/engine/gemm-fast/aligned-ld", test_aligned_ld);
  g_test_add_func("/engine/gemm-fast/gemv", test_gemv);
  int rc = g_test_run();
  em_pool_shutdown();
  return rc;
}
