/* test-quant.c: dynamic int8 quantisation (engine/quant).
 *
 *  - every GEMM kernel this CPU runs against the scalar reference, int32
 *    for int32, on odd shapes (D not a multiple of 4 or 64, K not of 16,
 *    M = 1), the extreme values (255 x +-127 over every input) and
 *    column sub-ranges;
 *  - activation and weight round trips within half a step;
 *  - a layer's output against f32 within the bound the two rounding
 *    errors allow;
 *  - batch independence (a row alone = the same row in a threaded batch),
 *    the same numbers from every kernel, the column-split path;
 *  - the model API: report, inference only, undo, mode parsing. */
#include <float.h>
#include <glib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "em-pool.h"
#include "em-quant.h"
#include "quant-private.h"

static float frand(GRand *r, double lo, double hi) { return (float)g_rand_double_range(r, lo, hi); }

static float *rand_floats(GRand *r, int64_t n, double lo, double hi) {
  float *v = g_new(float, n);
  for (int64_t i = 0; i < n; i++) v[i] = frand(r, lo, hi);
  return v;
}

/* A layer (K, D) quantised for kernel k from weights w. */
static void layer_make(em_quant_layer *L, const em_qgemm_kernel *k, const float *w,
                       const float *b, int64_t K, int64_t D) {
  em_error err = {0};
  g_assert_cmpint(em_quant_layer_init(L, 0, w, b, K, D, k, "test", &err), ==, EM_OK);
}

/* ---- kernels ------------------------------------------------------------------ */

static void check_kernels_shape(GRand *r, int64_t M, int64_t D, int64_t K, bool extreme) {
  float *w = rand_floats(r, K * D, -1, 1);
  if (extreme)
    for (int64_t i = 0; i < K * D; i++) w[i] = (i + i / D) % 3 ? 1.f : -1.f; /* q = +-127 */
  int64_t Dp = (D + EM_QUANT_K_ALIGN - 1) / EM_QUANT_K_ALIGN * EM_QUANT_K_ALIGN;
  uint8_t *a = g_new0(uint8_t, M * Dp);
  for (int64_t m = 0; m < M; m++)
    for (int64_t d = 0; d < D; d++) a[m * Dp + d] = extreme ? 255 : (uint8_t)g_rand_int_range(r, 0, 256);
  em_quant_layer ref;
  layer_make(&ref, &em_qgemm_scalar, w, NULL, K, D);
  int32_t *c_ref = g_new(int32_t, M * K), *c = g_new(int32_t, M * K);
  em_qgemm_scalar.gemm(&ref, a, Dp, M, 0, K, c_ref, K);
  if (extreme) /* about 255 * 127 * D / 3: far past int16, still exact */
    g_assert_cmpint(abs(c_ref[0]), >=, 255 * 127 * (D / 4));
  int tested = 0;
  for (int i = 0; i < em_qgemm_kernel_count(); i++) {
    const em_qgemm_kernel *k = em_qgemm_kernel_at(i);
    if (!k->supported() || k == &em_qgemm_scalar) continue;
    em_quant_layer L;
    layer_make(&L, k, w, NULL, K, D);
    g_assert_cmpmem(L.wq, K * D, ref.wq, K * D);
    /* the whole product, into a wider C (ldc > K) */
    int64_t ldc = K + 3;
    int32_t *cw = g_new(int32_t, M * ldc);
    for (int64_t e = 0; e < M * ldc; e++) cw[e] = 0x5A5A5A5A;
    int16_t *a16 = g_new(int16_t, M * Dp); /* for kernels that read int16 */
    em_quant_widen(a, M * Dp, a16);
    const void *ak = k->a_width == 2 ? (const void *)a16 : a;
    k->gemm(&L, ak, Dp, M, 0, K, cw, ldc);
    for (int64_t m = 0; m < M; m++) {
      for (int64_t n = 0; n < K; n++)
        if (cw[m * ldc + n] != c_ref[m * K + n])
          g_error("%s: M %lld D %lld K %lld: c[%lld][%lld] = %d, reference %d", k->name,
                  (long long)M, (long long)D, (long long)K, (long long)m, (long long)n,
                  cw[m * ldc + n], c_ref[m * K + n]);
      for (int64_t n = K; n < ldc; n++) g_assert_cmpint(cw[m * ldc + n], ==, 0x5A5A5A5A);
    }
    /* a column range that starts at a later panel */
    int64_t n0 = K > k->n_block ? k->n_block : 0, n1 = K - (K > 2 * k->n_block ? 1 : 0);
    memset(c, 0, (size_t)(M * K) * sizeof *c);
    k->gemm(&L, ak, Dp, M, n0, n1, c, n1 - n0);
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = n0; n < n1; n++)
        g_assert_cmpint(c[m * (n1 - n0) + (n - n0)], ==, c_ref[m * K + n]);
    g_free(cw);
    g_free(a16);
    em_quant_layer_clear(&L);
    tested++;
  }
  if (M == 1 && D == 1 && K == 1) g_test_message("kernels compared with scalar: %d", tested);
  em_quant_layer_clear(&ref);
  g_free(c_ref);
  g_free(c);
  g_free(a);
  g_free(w);
}

static void test_kernels(void) {
  GRand *r = g_rand_new_with_seed(11);
  static const int64_t shapes[][3] = {/* M, D, K */
                                      {1, 1, 1},    {1, 3, 5},     {3, 7, 17},   {5, 65, 33},
                                      {4, 64, 16},  {1, 784, 256}, {7, 130, 10}, {9, 1001, 100},
                                      {33, 784, 256}, {6, 2, 63},  {17, 255, 129}, {2, 4, 8},
                                      /* 8-row tiles with 32, 36, 56 columns left */
                                      {16, 130, 120}, {8, 77, 96}, {10, 40, 40}, {9, 5, 100}};
  for (size_t i = 0; i < G_N_ELEMENTS(shapes); i++)
    check_kernels_shape(r, shapes[i][0], shapes[i][1], shapes[i][2], false);
  check_kernels_shape(r, 5, 1031, 37, true);
  check_kernels_shape(r, 4, EM_QUANT_MAX_FEATURES, 3, true); /* the widest layer allowed */
  g_rand_free(r);
  /* The CPU these tests are meant for runs the fast paths: say when not. */
  for (int i = 0; i < em_qgemm_kernel_count(); i++)
    if (!em_qgemm_kernel_at(i)->supported())
      g_test_message("kernel %s: not run on this CPU (or under this EMBER_CPU_ISA cap): not tested",
                     em_qgemm_kernel_at(i)->name);
}

/* ---- round trips ----------------------------------------------------------------- */

static void test_rows_round_trip(void) {
  GRand *r = g_rand_new_with_seed(5);
  const int64_t M = 6, D = 301, Dp = 304;
  float *x = rand_floats(r, M * D, -3, 5);
  for (int64_t d = 0; d < D; d++) x[1 * D + d] = frand(r, 0.5, 2); /* all positive */
  for (int64_t d = 0; d < D; d++) x[2 * D + d] = frand(r, -2, -0.5); /* all negative */
  for (int64_t d = 0; d < D; d++) x[3 * D + d] = 0;                  /* all zero */
  x[4 * D + 7] = 0;
  for (int64_t d = 0; d < D; d++) x[5 * D + d] = d == 9 ? 1e-3f : 0; /* one tiny value */
  uint8_t *a = g_new(uint8_t, M * Dp);
  memset(a, 0xEE, (size_t)(M * Dp));
  float sx[6];
  int32_t zp[6];
  em_quant_rows(x, M, D, Dp, a, sx, zp);
  for (int64_t m = 0; m < M; m++) {
    float lo = 0, hi = 0;
    for (int64_t d = 0; d < D; d++) lo = fminf(lo, x[m * D + d]), hi = fmaxf(hi, x[m * D + d]);
    g_assert_cmpint(zp[m], >=, 0);
    g_assert_cmpint(zp[m], <=, 255);
    if (m == 3) {
      g_assert_cmpint(zp[m], ==, 0);
    } else {
      g_assert_cmpfloat(fabsf(sx[m] - (hi - lo) / 255.f), <=, 1e-6f * sx[m]);
    }
    if (m == 1) g_assert_cmpint(zp[m], ==, 0);  /* lo = 0 */
    if (m == 2) g_assert_cmpint(zp[m], ==, 255); /* hi = 0 */
    for (int64_t d = 0; d < D; d++) {
      float v = x[m * D + d], back = (float)((int)a[m * Dp + d] - zp[m]) * sx[m];
      g_assert_cmpfloat(fabsf(v - back), <=, 0.5f * sx[m] * (1 + 1e-3f) + 1e-30f);
      if (v == 0) g_assert_cmpint(a[m * Dp + d], ==, zp[m]); /* zero is exact */
    }
    for (int64_t d = D; d < Dp; d++) g_assert_cmpint(a[m * Dp + d], ==, 0);
  }
  /* the tiny value keeps its full resolution: 1e-3 maps to 255 */
  g_assert_cmpint(a[5 * Dp + 9], ==, 255);
  g_free(a);
  g_free(x);
  g_rand_free(r);
}

/* 9 rows of D inputs for the row quantisers: random with ties (k / 8),
 * a NaN in row 3, an infinity in row 4, row 5 all zero, row 6 all
 * positive, row 7 all negative. */
static float *rows_input(GRand *r, int64_t M, int64_t D) {
  g_assert_cmpint(M, ==, 9);
  float *x = rand_floats(r, M * D, -2, 3);
  for (int64_t i = 0; i < M * D; i += 5) x[i] = (float)g_rand_int_range(r, -300, 300) / 8; /* ties */
  x[(3 * D) + D / 2] = NAN;
  x[(4 * D) + D / 3] = INFINITY;
  for (int64_t d = 0; d < D; d++) x[5 * D + d] = 0;
  for (int64_t d = 0; d < D; d++) x[6 * D + d] = frand(r, 0.5, 2);
  for (int64_t d = 0; d < D; d++) x[7 * D + d] = frand(r, -2, -0.5);
  return x;
}

/* Each width's row quantiser (AVX-512, AVX2, SSE2: every one the CPU
 * runs, whatever the cap) gives the plain loop's bytes, as uint8 and
 * widened to int16. */
static void check_rows_fn(em_quant_rows_fn f, const char *what) {
  GRand *r = g_rand_new_with_seed(13);
  for (int64_t D = 1; D <= 140; D += (D < 70 ? 1 : 9)) {
    const int64_t M = 9, Dp = (D + 3) / 4 * 4;
    float *x = rows_input(r, M, D);
    uint8_t *a1 = g_new(uint8_t, M * Dp), *a2 = g_new0(uint8_t, M * Dp);
    int16_t *w1 = g_new(int16_t, M * Dp), *w2 = g_new(int16_t, M * Dp);
    float s1[9], s2[9], s3[9];
    int32_t z1[9], z2[9], z3[9];
    memset(a1, 0xEE, (size_t)(M * Dp)); /* the padding must be written */
    memset(w1, 0x55, sizeof *w1 * (size_t)(M * Dp));
    em_quant_rows_ref(x, M, D, Dp, a2, s2, z2);
    em_quant_widen(a2, M * Dp, w2);
    f(x, M, D, Dp, a1, NULL, s1, z1);
    f(x, M, D, Dp, NULL, w1, s3, z3);
    if (memcmp(a1, a2, (size_t)(M * Dp)) || memcmp(w1, w2, sizeof *w1 * (size_t)(M * Dp)))
      g_error("%s rows: D %lld: bytes differ from the plain loop's", what, (long long)D);
    g_assert_cmpmem(s1, sizeof s1, s2, sizeof s2);
    g_assert_cmpmem(z1, sizeof z1, z2, sizeof z2);
    g_assert_cmpmem(s3, sizeof s3, s2, sizeof s2);
    g_assert_cmpmem(z3, sizeof z3, z2, sizeof z2);
    g_free(a1), g_free(a2), g_free(w1), g_free(w2), g_free(x);
  }
  g_rand_free(r);
}

static void test_rows_each_width(void) {
  int tested = 0;
  for (em_cpu_isa isa = EM_CPU_ISA_GENERIC; isa <= EM_CPU_ISA_AVX512; isa++) {
    em_quant_rows_fn f = em_quant_rows_for(isa);
    if (!f) {
      g_test_message("rows %s: not run on this CPU: not tested", em_cpu_isa_name(isa));
      continue;
    }
    check_rows_fn(f, em_cpu_isa_name(isa));
    tested++;
  }
  g_test_message("row quantisers compared with the plain loop: %d", tested);
}

/* The row quantiser in force (under the cap) gives the plain loop's
 * bytes, as uint8 and widened to int16. */
static void test_rows_fast_vs_ref(void) {
  GRand *r = g_rand_new_with_seed(12);
  for (int64_t D = 1; D <= 70; D += (D < 40 ? 1 : 7)) {
    const int64_t M = 9, Dp = (D + 3) / 4 * 4;
    float *x = rows_input(r, M, D);
    uint8_t *a1 = g_new0(uint8_t, M * Dp), *a2 = g_new0(uint8_t, M * Dp);
    float s1[9], s2[9];
    int32_t z1[9], z2[9];
    em_quant_rows(x, M, D, Dp, a1, s1, z1);
    em_quant_rows_ref(x, M, D, Dp, a2, s2, z2);
    g_assert_cmpmem(a1, M * Dp, a2, M * Dp);
    g_assert_cmpmem(s1, sizeof s1, s2, sizeof s2);
    g_assert_cmpmem(z1, sizeof z1, z2, sizeof z2);
    /* the int16 form (AVX2 / AVX-512BW kernels): the same values widened */
    int16_t *w1 = g_new(int16_t, M * Dp), *w2 = g_new(int16_t, M * Dp);
    uint8_t *tmp = g_new(uint8_t, M * Dp);
    float s3[9];
    int32_t z3[9];
    memset(w1, 0x55, sizeof *w1 * (size_t)(M * Dp)); /* the padding must be written */
    em_quant_rows16(x, M, D, Dp, tmp, w1, s3, z3);
    em_quant_widen(a2, M * Dp, w2);
    g_assert_cmpmem(w1, sizeof *w1 * (size_t)(M * Dp), w2, sizeof *w2 * (size_t)(M * Dp));
    g_assert_cmpmem(s3, sizeof s3, s2, sizeof s2);
    g_assert_cmpmem(z3, sizeof z3, z2, sizeof z2);
    g_free(w1), g_free(w2), g_free(tmp);
    for (int m = 0; m < 9; m++) g_assert_true(z1[m] >= 0 && z1[m] <= 255);
    g_free(a1), g_free(a2), g_free(x);
  }
  g_rand_free(r);
}

static void test_weights_round_trip(void) {
  GRand *r = g_rand_new_with_seed(6);
  const int64_t K = 9, D = 77;
  float *w = rand_floats(r, K * D, -0.3, 0.2);
  for (int64_t d = 0; d < D; d++) w[4 * D + d] = 0; /* an all-zero row */
  float b[9];
  for (int k = 0; k < 9; k++) b[k] = (float)k;
  em_quant_layer L;
  layer_make(&L, em_qgemm_kernel_best(), w, b, K, D);
  for (int64_t k = 0; k < K; k++) {
    int qmax = 0, sum = 0;
    for (int64_t d = 0; d < D; d++) {
      int q = L.wq[k * D + d];
      qmax = MAX(qmax, abs(q));
      sum += q;
      g_assert_cmpfloat(fabsf(w[k * D + d] - (float)q * L.w_scale[k]), <=,
                        0.5f * L.w_scale[k] * (1 + 1e-5f));
    }
    g_assert_cmpint(sum, ==, L.w_sum[k]);
    g_assert_cmpint(qmax, ==, k == 4 ? 0 : 127); /* symmetric, the full range */
    g_assert_cmpfloat(L.bias[k], ==, (float)k);
  }
  em_quant_layer_clear(&L);
  /* NaN weights are refused with the position */
  w[2 * D + 5] = NAN;
  em_error err = {0};
  g_assert_cmpint(em_quant_layer_init(&L, 0, w, NULL, K, D, &em_qgemm_scalar, "fc", &err), ==,
                  EM_ERR_NUMERIC);
  g_assert_nonnull(strstr(err.msg, "[2, 5]"));
  g_free(w);
  g_rand_free(r);
}

/* ---- a layer against f32 ------------------------------------------------------------- */

/* Asserts that every y (M, L->K) of the layer L (weights w, bias b or
 * NULL) on x (M, L->D), whose rows were quantised with scales sx, is
 * within the error bound of int8 rounding of the f64 product:
 * y - y32 = sum x ew + ex w + ex ew, |ex| <= sx/2, |ew| <= sw/2.
 * Returns the worst error / bound. */
static double check_error_bound(const em_quant_layer *L, const float *x, const float *w,
                                const float *b, const float *sx, const float *y, int64_t M) {
  const int64_t D = L->D, K = L->K;
  double worst = 0;
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < K; k++) {
      double ref = b ? b[k] : 0, sum_x = 0, sum_w = 0;
      for (int64_t d = 0; d < D; d++) {
        ref += (double)x[m * D + d] * w[k * D + d];
        sum_x += fabs(x[m * D + d]);
        sum_w += fabs(w[k * D + d]);
      }
      double bound = sum_x * L->w_scale[k] / 2 + sum_w * sx[m] / 2 +
                     (double)D * sx[m] * L->w_scale[k] / 4;
      double e = fabs(y[m * K + k] - ref);
      g_assert_cmpfloat(e, <=, bound * 1.001 + 1e-5 * fabs(ref) + 1e-6);
      worst = MAX(worst, e / bound);
    }
  return worst;
}

static void test_linear_error_bound(void) {
  GRand *r = g_rand_new_with_seed(7);
  const int64_t M = 40, D = 333, K = 70;
  float *x = rand_floats(r, M * D, -1, 3), *w = rand_floats(r, K * D, -0.2, 0.2);
  float *b = rand_floats(r, K, -1, 1);
  em_quant_layer L;
  layer_make(&L, em_qgemm_kernel_best(), w, b, K, D);
  float *y = g_new(float, M * K);
  em_scope *s = em_scope_begin();
  em_quant_linear_run(&L, em_qgemm_kernel_best(), x, M, y);
  float *sx = g_new(float, M);
  int32_t *zp = g_new(int32_t, M);
  uint8_t *a = g_new(uint8_t, M * L.Dp);
  em_quant_rows(x, M, D, L.Dp, a, sx, zp);
  double worst = check_error_bound(&L, x, w, b, sx, y, M);
  g_test_message("worst error / bound: %.3f", worst);
  g_assert_cmpfloat(worst, >, 0.01); /* the bound is not vacuous */
  em_scope_end(s);
  em_quant_layer_clear(&L);
  g_free(a), g_free(sx), g_free(zp), g_free(y), g_free(x), g_free(w), g_free(b);
  g_rand_free(r);
}

/* A row spanning more than +-1.7e38 (its hi - lo overflows f32) gets a
 * finite scale, the same from both quantisers, and the layer's output
 * is within the error bound (it was NaN); a row holding an infinity or a
 * NaN gives NaN outputs, as f32 does (not those of its values quantised
 * to zero). */
static void test_huge_range_rows(void) {
  GRand *r = g_rand_new_with_seed(31);
  const int64_t M = 5, D = 37, K = 5;
  float *x = rand_floats(r, M * D, -3e38, 3e38), *w = rand_floats(r, K * D, -1e-3, 1e-3);
  x[0] = 3.2e38f, x[1] = -3.2e38f; /* row 0 spans 6.4e38 */
  for (int64_t d = 0; d < D; d++) x[D + d] = fabsf(x[D + d]); /* row 1: [0, 3e38], no overflow */
  for (int64_t d = 0; d < D; d++) x[2 * D + d] = frand(r, -1, 1);
  for (int64_t d = 0; d < 2 * D; d++) x[3 * D + d] = frand(r, -1, 1);
  x[3 * D + 4] = -INFINITY;
  x[4 * D + 30] = NAN;
  em_quant_layer L;
  layer_make(&L, em_qgemm_kernel_best(), w, NULL, K, D);
  uint8_t *a1 = g_new0(uint8_t, M * L.Dp), *a2 = g_new0(uint8_t, M * L.Dp);
  float s1[5], s2[5];
  int32_t z1[5], z2[5];
  em_quant_rows(x, M, D, L.Dp, a1, s1, z1);
  em_quant_rows_ref(x, M, D, L.Dp, a2, s2, z2);
  g_assert_cmpmem(a1, M * L.Dp, a2, M * L.Dp);
  g_assert_cmpmem(s1, sizeof s1, s2, sizeof s2);
  g_assert_cmpmem(z1, sizeof z1, z2, sizeof z2);
  g_assert_true(isfinite(s1[0]));
  g_assert_cmpfloat(fabs(s1[0] - 6.4e38 / 255), <=, 0.01 * 6.4e38 / 255);
  float *y = g_new(float, M * K);
  em_scope *s = em_scope_begin();
  em_quant_linear_run(&L, em_qgemm_kernel_best(), x, M, y);
  for (int64_t i = 0; i < 3 * K; i++) g_assert_true(isfinite(y[i]));
  check_error_bound(&L, x, w, NULL, s1, y, 3);
  for (int64_t i = 3 * K; i < M * K; i++) g_assert_true(isnan(y[i]));
  em_scope_end(s);
  em_quant_layer_clear(&L);
  g_free(a1), g_free(a2), g_free(y), g_free(x), g_free(w);
  g_rand_free(r);
}

/* ---- models ---------------------------------------------------------------------------- */

static const char *spec_json =
    "{\"name\": \"qtest\", \"input\": {\"shape\": [5, 300]},"
    " \"nodes\": ["
    "  {\"name\": \"fc1\", \"type\": \"Linear\", \"out_features\": 200},"
    "  {\"name\": \"act\", \"type\": \"GELU\"},"
    "  {\"name\": \"fc2\", \"type\": \"Linear\", \"out_features\": 37, \"bias\": false},"
    "  {\"name\": \"flat\", \"type\": \"Flatten\"},"
    "  {\"name\": \"fc3\", \"type\": \"Linear\", \"out_features\": 10}]}";

/* (N, 5, 300) through the model, no grad; a new malloc'd copy of the (N, 10) output. */
static float *forward(em_model *m, const float *x, int64_t N) {
  int64_t shape[3] = {N, 5, 300};
  bool prev = em_no_grad_begin();
  em_scope *s = em_scope_begin();
  em_error err = {0};
  em_tensor *y = em_model_forward(m, em_from_data(EM_DTYPE_F32, 3, shape, x), false, NULL, &err);
  if (!y) g_error("forward: %s", err.msg);
  g_assert_true(em_tensor_is_contiguous(y));
  float *out = g_memdup2(em_f32(y), (gsize)(N * 10) * sizeof *out);
  em_scope_end(s);
  em_grad_mode_restore(prev);
  return out;
}

static em_model *model_new(void) {
  em_error err = {0};
  em_spec *spec = em_spec_parse(spec_json, "<test>", &err);
  g_assert_nonnull(spec);
  em_model *m = em_model_new(spec, 3, &err);
  g_assert_nonnull(m);
  em_spec_free(spec);
  return m;
}

static void test_batch_independence(void) {
  em_set_num_threads(2);
  const int64_t N = 70; /* 350 rows into fc1: several threaded row blocks */
  GRand *r = g_rand_new_with_seed(8);
  float *x = rand_floats(r, N * 1500, -2, 2);
  em_model *m = model_new();
  float *first = NULL;
  for (int i = 0; i < em_qgemm_kernel_count(); i++) {
    const em_qgemm_kernel *k = em_qgemm_kernel_at(i);
    if (!k->supported()) continue;
    g_setenv("EMBER_QUANT_KERNEL", k->name, TRUE);
    em_quant_report rep;
    em_error err = {0};
    g_assert_cmpint(em_model_quantize(m, EM_QUANT_INT8_DYNAMIC, &rep, &err), ==, EM_OK);
    g_assert_cmpstr(rep.kernel, ==, k->name);
    float *batch = forward(m, x, N);
    for (int64_t n = 0; n < N; n += 13) {
      float *one = forward(m, x + n * 1500, 1);
      g_assert_cmpmem(one, 10 * sizeof(float), batch + n * 10, 10 * sizeof(float));
      g_free(one);
    }
    float *part = forward(m, x + 5 * 1500, 9); /* a batch of another size */
    g_assert_cmpmem(part, 9 * 10 * sizeof(float), batch + 5 * 10, 9 * 10 * sizeof(float));
    g_free(part);
    if (!first) first = batch;
    else { /* exact integer products, the same rescale: the same numbers */
      g_assert_cmpmem(batch, N * 10 * sizeof(float), first, N * 10 * sizeof(float));
      g_free(batch);
    }
  }
  g_unsetenv("EMBER_QUANT_KERNEL");
  g_free(first);
  em_model_free(m);
  g_free(x);
  g_rand_free(r);
}

/* A few rows of a wide layer take the column-split path. */
static void test_wide_layer_columns(void) {
  em_set_num_threads(2);
  GRand *r = g_rand_new_with_seed(9);
  const int64_t M = 3, D = 2050, K = 1030;
  float *x = rand_floats(r, M * D, -1, 1), *w = rand_floats(r, K * D, -1, 1);
  float *y = g_new(float, M * K), *y_ref = g_new(float, M * K);
  em_quant_layer L, R;
  layer_make(&L, em_qgemm_kernel_best(), w, NULL, K, D);
  layer_make(&R, &em_qgemm_scalar, w, NULL, K, D);
  em_scope *s = em_scope_begin();
  em_quant_linear_run(&L, em_qgemm_kernel_best(), x, M, y);
  em_quant_linear_run(&R, &em_qgemm_scalar, x, 1, y_ref);
  em_quant_linear_run(&R, &em_qgemm_scalar, x + D, M - 1, y_ref + K);
  em_scope_end(s);
  g_assert_cmpmem(y, M * K * sizeof(float), y_ref, M * K * sizeof(float));
  em_quant_layer_clear(&L);
  em_quant_layer_clear(&R);
  g_free(x), g_free(w), g_free(y), g_free(y_ref);
  g_rand_free(r);
}

static void test_model_api(void) {
  em_model *m = model_new();
  em_quant_report rep;
  em_error err = {0};
  g_assert_cmpint(em_model_quant_mode(m), ==, EM_QUANT_NONE);
  GRand *r = g_rand_new_with_seed(10);
  float *x = rand_floats(r, 2 * 1500, -1, 1);
  float *f32 = forward(m, x, 2);

  g_assert_cmpint(em_model_quantize(m, EM_QUANT_INT8_DYNAMIC, &rep, &err), ==, EM_OK);
  g_assert_cmpint(em_model_quant_mode(m), ==, EM_QUANT_INT8_DYNAMIC);
  g_assert_cmpint(rep.layers_quantized, ==, 3);
  g_assert_cmpint(rep.layers_kept, ==, 2);
  g_assert_cmpint(rep.weight_bytes_f32, ==, 4 * (200 * 300 + 37 * 200 + 10 * 185));
  g_assert_cmpint(rep.weight_bytes_int8, ==, (200 * 300 + 37 * 200 + 10 * 185) + 4 * 247);
  g_assert_cmpstr(rep.kernel, ==, em_qgemm_kernel_best()->name);
  float *q = forward(m, x, 2);
  double worst = 0, scale = 0;
  for (int i = 0; i < 20; i++) {
    worst = MAX(worst, fabs(q[i] - f32[i]));
    scale = MAX(scale, fabs(f32[i]));
  }
  g_assert_cmpfloat(worst, >, 0);              /* it did run in int8 */
  g_assert_cmpfloat(worst, <, 0.02 * scale); /* and close */

  /* inference only */
  int64_t shape[3] = {1, 5, 300};
  em_scope *s = em_scope_begin();
  em_tensor *xt = em_from_data(EM_DTYPE_F32, 3, shape, x);
  g_assert_null(em_model_forward(m, xt, false, NULL, &err)); /* grad mode on */
  g_assert_cmpint(err.status, ==, EM_ERR_UNSUPPORTED);
  g_assert_nonnull(strstr(err.msg, "inference only"));
  bool prev = em_no_grad_begin();
  g_assert_null(em_model_forward(m, xt, true, NULL, &err)); /* training */
  g_assert_nonnull(strstr(err.msg, "training"));
  em_grad_mode_restore(prev);
  em_scope_end(s);

  /* undo: the f32 weights were kept */
  g_assert_cmpint(em_model_quantize(m, EM_QUANT_NONE, &rep, &err), ==, EM_OK);
  g_assert_cmpint(em_model_quant_mode(m), ==, EM_QUANT_NONE);
  float *again = forward(m, x, 2);
  g_assert_cmpmem(again, 20 * sizeof(float), f32, 20 * sizeof(float));

  /* an unknown kernel name is refused with the choices */
  g_setenv("EMBER_QUANT_KERNEL", "sse9", TRUE);
  g_assert_cmpint(em_model_quantize(m, EM_QUANT_INT8_DYNAMIC, NULL, &err), ==,
                  EM_ERR_UNSUPPORTED);
  g_assert_nonnull(strstr(err.msg, "scalar"));
  g_unsetenv("EMBER_QUANT_KERNEL");
  g_assert_cmpint(em_model_quant_mode(m), ==, EM_QUANT_NONE);

  em_quant_mode mode;
  g_assert_cmpint(em_quant_mode_parse("int8", &mode, &err), ==, EM_OK);
  g_assert_cmpint(mode, ==, EM_QUANT_INT8_DYNAMIC);
  g_assert_cmpint(em_quant_mode_parse("off", &mode, &err), ==, EM_OK);
  g_assert_cmpint(mode, ==, EM_QUANT_NONE);
  g_assert_cmpint(em_quant_mode_parse("int4", &mode, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "int8"));

  g_free(x), g_free(f32), g_free(q), g_free(again);
  g_rand_free(r);
  em_model_free(m); /* frees the plan of a quantised model too (asan) */
}

static void test_model_without_linear(void) {
  em_error err = {0};
  em_spec *spec = em_spec_parse(
      "{\"name\": \"nolin\", \"input\": {\"shape\": [4]}, \"nodes\": [{\"name\": \"r\", "
      "\"type\": \"ReLU\"}]}",
      "<test>", &err);
  g_assert_nonnull(spec);
  em_model *m = em_model_new(spec, 1, &err);
  em_quant_report rep;
  g_assert_cmpint(em_model_quantize(m, EM_QUANT_INT8_DYNAMIC, &rep, &err), ==, EM_OK);
  g_assert_cmpint(rep.layers_quantized, ==, 0);
  g_assert_cmpint(rep.layers_kept, ==, 1);
  g_assert_cmpint(rep.layers_too_wide, ==, 0);
  em_model_quantize(m, EM_QUANT_INT8_DYNAMIC, NULL, &err); /* again: replaces the plan */
  em_model_free(m);
  em_spec_free(spec);

  /* a Linear too wide for exact int32 sums stays f32, and is counted as such
   * (export said the model had no Linear layer) */
  char *wide = g_strdup_printf(
      "{\"name\": \"wide\", \"input\": {\"shape\": [%d]}, \"nodes\": [{\"name\": \"fc\", "
      "\"type\": \"Linear\", \"out_features\": 2}]}", EM_QUANT_MAX_INPUTS + 1);
  spec = em_spec_parse(wide, "<test>", &err);
  g_free(wide);
  g_assert_nonnull(spec);
  m = em_model_new(spec, 1, &err);
  g_assert_cmpint(em_model_quantize(m, EM_QUANT_INT8_DYNAMIC, &rep, &err), ==, EM_OK);
  g_assert_cmpint(rep.layers_quantized, ==, 0);
  g_assert_cmpint(rep.layers_too_wide, ==, 1);
  em_model_free(m);
  em_spec_free(spec);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/quant/kernels", test_kernels);
  g_test_add_func("/engine/quant/rows-each-width", test_rows_each_width);
  g_test_add_func("/engine/quant/rows-round-trip", test_rows_round_trip);
  g_test_add_func("/engine/quant/rows-fast-vs-ref", test_rows_fast_vs_ref);
  g_test_add_func("/engine/quant/weights-round-trip", test_weights_round_trip);
  g_test_add_func("/engine/quant/linear-error-bound", test_linear_error_bound);
  g_test_add_func("/engine/quant/huge-range-rows", test_huge_range_rows);
  g_test_add_func("/engine/quant/batch-independence", test_batch_independence);
  g_test_add_func("/engine/quant/wide-layer-columns", test_wide_layer_columns);
  g_test_add_func("/engine/quant/model-api", test_model_api);
  g_test_add_func("/engine/quant/model-without-linear", test_model_without_linear);
  return g_test_run();
}
