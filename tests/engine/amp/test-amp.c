/* test-amp.c: mixed precision on the CPU (engine/amp): bf16 rounding on
 * edge values, the AVX512-BF16 GEMM against the loop reference of the
 * same bf16 math (bit for bit), Linear and matmul forward and backward
 * under autocast against that reference, the autocast flag, and the
 * gradient scaler's state machine against torch.cuda.amp.GradScaler's
 * rules. */
#include <glib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "em-amp.h"
#include "em-ops.h"
#include "em-pool.h"
#include "em-tensor.h"
#include "em-train.h"

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* ---- bf16 rounding ------------------------------------------------------------- */

static void test_round_edges(void) {
  static const struct { uint32_t in; uint16_t out; } cases[] = {
      {0x00000000u, 0x0000}, {0x80000000u, 0x8000}, /* +-0 */
      {0x3f800000u, 0x3f80},                        /* 1 */
      {0x3f808000u, 0x3f80}, /* tie, even below: down */
      {0x3f818000u, 0x3f82}, /* tie, odd below: up */
      {0x3f808001u, 0x3f81}, /* above the tie: up */
      {0x3f807fffu, 0x3f80}, /* below the tie: down */
      {0xbf818000u, 0xbf82}, /* negative tie: away from zero to even */
      {0x7f7fffffu, 0x7f80}, /* FLT_MAX rounds to +inf */
      {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80}, /* +-inf */
      {0x7fc00000u, 0x7fc0}, {0xffc00001u, 0x7fc0}, /* NaNs: the one quiet NaN */
      {0x7f800001u, 0x7fc0},                        /* signalling NaN */
      {0x00008000u, 0x0000}, /* subnormal tie to even: 0 */
      {0x00018000u, 0x0002}, /* subnormal tie to even: up */
      {0x00000001u, 0x0000}, /* smallest subnormal */
      {0x007fffffu, 0x0080}, /* largest subnormal rounds to FLT_MIN */
      {0x00800000u, 0x0080}, /* FLT_MIN */
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    uint16_t got = em_bf16_from_f32(from_bits(cases[i].in));
    if (got != cases[i].out)
      g_error("bf16(0x%08x) = 0x%04x, want 0x%04x", cases[i].in, got, cases[i].out);
  }
  /* back to f32 is exact, and rounding is idempotent */
  for (uint32_t h = 0; h < 0x10000u; h += 7) {
    float f = em_bf16_to_f32((uint16_t)h);
    if (f == f) g_assert_cmphex(em_bf16_from_f32(f), ==, h);
  }
  float buf[3] = {1.00390625f, 3.0f, -0.0f};
  em_bf16_round(buf, buf, 3);
  g_assert_cmpfloat(buf[0], ==, 1.0f); /* 1 + 2^-8: a tie, to even */
  g_assert_cmpfloat(buf[1], ==, 3.0f);
}

/* ---- the GEMM kernel ------------------------------------------------------------ */

static void fill(GRand *r, float *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) p[i] = (float)g_rand_double_range(r, -2, 2);
}

/* |x| of n values into a new buffer. */
static float *abs_copy(const float *x, int64_t n) {
  float *y = g_new(float, n);
  for (int64_t i = 0; i < n; i++) y[i] = fabsf(x[i]);
  return y;
}

/* got against want: the same bits for the AVX512 kernel (its summation
 * order is the reference's); for AMX and the emulation (OpenBLAS's f32
 * GEMM over rounded operands), which order the sum their own way,
 * within the f32 summation bound 2 k 2^-24 sum|terms| (sum|terms| in
 * absw), far below the bf16 rounding of the inputs (2^-8 relative). */
static void assert_match(em_bf16_kernel kern, const float *want, const float *got,
                         const float *absw, int64_t n, int64_t k, const char *what) {
  for (int64_t i = 0; i < n; i++) {
    bool ok = kern == EM_BF16_KERNEL_AMX || kern == EM_BF16_KERNEL_EMULATED
                  ? fabs((double)got[i] - want[i]) <= 2.0 * (double)k * 0x1p-24 * absw[i] + 1e-30
                  : memcmp(&want[i], &got[i], sizeof(float)) == 0;
    if (!ok)
      g_error("%s (%s)[%lld]: %.9g, want %.9g", what, em_bf16_kernel_name(kern), (long long)i,
              got[i], want[i]);
  }
}

static void check_gemm_kernel(GRand *r, em_bf16_kernel kern, bool ta, bool tb, int64_t m,
                              int64_t n, int64_t k, float beta) {
  int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2; /* padded rows */
  float *a = g_new(float, (ta ? k : m) * lda), *b = g_new(float, (tb ? n : k) * ldb);
  float *c1 = g_new(float, m * ldc), *c2 = g_new(float, m * ldc);
  fill(r, a, (ta ? k : m) * lda);
  fill(r, b, (tb ? n : k) * ldb);
  fill(r, c1, m * ldc);
  memcpy(c2, c1, sizeof(float) * (size_t)(m * ldc));
  float *aa = abs_copy(a, (ta ? k : m) * lda), *ba = abs_copy(b, (tb ? n : k) * ldb);
  float *ca = abs_copy(c1, m * ldc);
  em_gemm_bf16(EM_BF16_KERNEL_SCALAR, ta, tb, m, n, k, a, lda, b, ldb, beta, c1, ldc);
  em_gemm_bf16(EM_BF16_KERNEL_SCALAR, ta, tb, m, n, k, aa, lda, ba, ldb, beta, ca, ldc);
  em_gemm_bf16(kern, ta, tb, m, n, k, a, lda, b, ldb, beta, c2, ldc);
  g_autofree char *what = g_strdup_printf("ta %d tb %d m %lld n %lld k %lld beta %g", ta, tb,
                                          (long long)m, (long long)n, (long long)k, beta);
  assert_match(kern, c1, c2, ca, m * ldc, k + 1, what);
  g_free(a), g_free(b), g_free(c1), g_free(c2), g_free(aa), g_free(ba), g_free(ca);
}

static void check_kernel(em_bf16_kernel kern) {
  if (!em_bf16_kernel_available(kern)) {
    g_test_skip("this CPU (or OS) cannot run this kernel");
    return;
  }
  GRand *r = g_rand_new_with_seed(8);
  static const int64_t shapes[][3] = {{1, 1, 1},   {8, 32, 2},   {7, 33, 5},  {19, 70, 31},
                                      {64, 96, 200}, {3, 129, 64}, {40, 17, 1}};
  for (int t = 0; t < 4; t++)
    for (size_t s = 0; s < G_N_ELEMENTS(shapes); s++)
      for (int bt = 0; bt < 2; bt++)
        check_gemm_kernel(r, kern, t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2],
                          (float)bt);
  /* threads split the tiles; the numbers stay the same */
  int prev = em_get_num_threads();
  em_set_num_threads(2);
  check_gemm_kernel(r, kern, false, true, 150, 300, 257, 0.f);
  check_gemm_kernel(r, kern, true, false, 70, 45, 600, 1.f);
  em_set_num_threads(prev);
  g_rand_free(r);
}

static void test_gemm_avx512(void) { check_kernel(EM_BF16_KERNEL_AVX512); }
static void test_gemm_amx(void) { check_kernel(EM_BF16_KERNEL_AMX); }
static void test_gemm_emulated(void) { check_kernel(EM_BF16_KERNEL_EMULATED); }

/* Inf and NaN reach the output as in f32 arithmetic. */
static void test_gemm_nonfinite(void) {
  static const em_bf16_kernel kernels[] = {EM_BF16_KERNEL_SCALAR, EM_BF16_KERNEL_AVX512,
                                           EM_BF16_KERNEL_AMX, EM_BF16_KERNEL_EMULATED};
  for (size_t i = 0; i < G_N_ELEMENTS(kernels); i++) {
    if (!em_bf16_kernel_available(kernels[i])) continue;
    float a[2 * 4] = {1, 2, INFINITY, 1, 1, 1, 1, NAN}, b[4] = {1, 1, 1, 1}, c[2];
    em_gemm_bf16(kernels[i], false, false, 2, 1, 4, a, 4, b, 1, 0.f, c, 1);
    g_assert_true(isinf(c[0]) && c[0] > 0);
    g_assert_true(isnan(c[1]));
  }
}

/* ---- Linear and matmul under autocast ------------------------------------------- */

static em_tensor *param(GRand *r, int ndim, const int64_t *shape) {
  em_tensor *t = em_tensor_new(EM_DTYPE_F32, ndim, shape, NULL);
  fill(r, em_f32(t), em_tensor_numel(t));
  em_tensor_set_requires_grad(t, true);
  return t;
}

static void test_linear_autocast(void) {
  em_bf16_kernel kern = em_bf16_kernel_best();
  if (kern == EM_BF16_KERNEL_NONE) {
    g_test_skip("EMBER_BF16_KERNEL=none: autocast runs f32");
    return;
  }
  enum { N = 13, D = 37, K = 21 };
  GRand *r = g_rand_new_with_seed(3);
  em_tensor *x = param(r, 2, (int64_t[]){N, D}), *w = param(r, 2, (int64_t[]){K, D});
  em_tensor *b = param(r, 1, (int64_t[]){K});
  float gy[N * K];
  fill(r, gy, N * K);
  em_scope *s = em_scope_begin();
  em_amp_mode prev = em_autocast_begin(EM_AMP_BF16);
  g_assert_cmpint(em_autocast_kernel(), ==, kern);
  em_tensor *y = em_linear(x, w, b); /* (N, K) */
  em_autocast_restore(prev);
  g_assert_cmpint(em_autocast_mode(), ==, EM_AMP_OFF);
  g_assert_cmpint(y->dtype, ==, EM_DTYPE_F32);
  em_backward_grad(y, em_from_data(EM_DTYPE_F32, 2, y->shape, gy));

  /* the same math through the loop reference (and on |values| for the
   * AMX tolerance) */
  float ry[N * K], rx[N * D], rw[K * D], rb[K], ay[N * K], ax[N * D], aw[K * D];
  float *xa = abs_copy(em_f32(x), N * D), *wa = abs_copy(em_f32(w), K * D);
  float *ba = abs_copy(em_f32(b), K), *ga = abs_copy(gy, N * K);
  for (int i = 0; i < N; i++) memcpy(ry + i * K, em_f32(b), sizeof(float) * K);
  for (int i = 0; i < N; i++) memcpy(ay + i * K, ba, sizeof(float) * K);
  em_gemm_bf16(EM_BF16_KERNEL_SCALAR, false, true, N, K, D, em_f32(x), D, em_f32(w), D, 1.f, ry, K);
  em_gemm_bf16(EM_BF16_KERNEL_SCALAR, false, true, N, K, D, xa, D, wa, D, 1.f, ay, K);
  em_gemm_bf16(EM_BF16_KERNEL_SCALAR, false, false, N, D, K, gy, K, em_f32(w), D, 0.f, rx, D);
  em_gemm_bf16(EM_BF16_KERNEL_SCALAR, false, false, N, D, K, ga, K, wa, D, 0.f, ax, D);
  em_gemm_bf16(EM_BF16_KERNEL_SCALAR, true, false, K, D, N, gy, K, em_f32(x), D, 0.f, rw, D);
  em_gemm_bf16(EM_BF16_KERNEL_SCALAR, true, false, K, D, N, ga, K, xa, D, 0.f, aw, D);
  g_free(xa), g_free(wa), g_free(ba), g_free(ga);
  for (int k = 0; k < K; k++) {
    rb[k] = 0;
    for (int i = 0; i < N; i++) rb[k] += gy[i * K + k];
  }
  assert_match(kern, ry, em_f32(y), ay, N * K, D + 1, "y");
  assert_match(kern, rx, em_f32(x->grad), ax, N * D, K, "dx");
  assert_match(kern, rw, em_f32(w->grad), aw, K * D, N, "dw");
  for (int k = 0; k < K; k++) g_assert_cmpfloat_with_epsilon(em_f32(b->grad)[k], rb[k], 1e-5);

  /* autocast off: the f32 product, not the bf16 one */
  em_tensor *y32 = em_linear(x, w, b);
  double diff = 0;
  for (int i = 0; i < N * K; i++) diff = fmax(diff, fabs(em_f32(y32)[i] - ry[i]));
  g_assert_cmpfloat(diff, >, 0);
  em_scope_end(s);
  em_tensor_free(x), em_tensor_free(w), em_tensor_free(b);
  g_rand_free(r);
}

static void test_matmul_autocast(void) {
  em_bf16_kernel kern = em_bf16_kernel_best();
  if (kern == EM_BF16_KERNEL_NONE) {
    g_test_skip("EMBER_BF16_KERNEL=none: autocast runs f32");
    return;
  }
  enum { B = 2, L = 5, D = 9, K = 6 };
  GRand *r = g_rand_new_with_seed(4);
  em_tensor *a = param(r, 3, (int64_t[]){B, L, D}), *w = param(r, 2, (int64_t[]){D, K});
  float gy[B * L * K];
  fill(r, gy, B * L * K);
  em_scope *s = em_scope_begin();
  em_amp_mode prev = em_autocast_begin(EM_AMP_BF16);
  em_tensor *y = em_matmul(a, w); /* (B, L, K) */
  em_autocast_restore(prev);
  em_backward_grad(y, em_from_data(EM_DTYPE_F32, 3, y->shape, gy));
  float ry[B * L * K], ra[B * L * D], rw[D * K], ay[B * L * K], aa[B * L * D], aw[D * K];
  float *absa = abs_copy(em_f32(a), B * L * D), *absw = abs_copy(em_f32(w), D * K);
  float *absg = abs_copy(gy, B * L * K);
  memset(rw, 0, sizeof rw);
  memset(aw, 0, sizeof aw);
  for (int bi = 0; bi < B; bi++) {
    const float *ab = em_f32(a) + bi * L * D, *abs_ab = absa + bi * L * D;
    em_gemm_bf16(EM_BF16_KERNEL_SCALAR, false, false, L, K, D, abs_ab, D, absw, K, 0.f,
                 ay + bi * L * K, K);
    em_gemm_bf16(EM_BF16_KERNEL_SCALAR, false, true, L, D, K, absg + bi * L * K, K, absw, K,
                 0.f, aa + bi * L * D, D);
    em_gemm_bf16(EM_BF16_KERNEL_SCALAR, true, false, D, K, L, abs_ab, D, absg + bi * L * K, K,
                 1.f, aw, K);
    em_gemm_bf16(EM_BF16_KERNEL_SCALAR, false, false, L, K, D, ab, D, em_f32(w), K, 0.f,
                 ry + bi * L * K, K);
    em_gemm_bf16(EM_BF16_KERNEL_SCALAR, false, true, L, D, K, gy + bi * L * K, K, em_f32(w), K,
                 0.f, ra + bi * L * D, D);
    em_gemm_bf16(EM_BF16_KERNEL_SCALAR, true, false, D, K, L, ab, D, gy + bi * L * K, K, 1.f,
                 rw, K);
  }
  g_free(absa), g_free(absw), g_free(absg);
  assert_match(kern, ry, em_f32(y), ay, B * L * K, D, "y");
  assert_match(kern, ra, em_f32(a->grad), aa, B * L * D, K, "da");
  assert_match(kern, rw, em_f32(w->grad), aw, D * K, B * L, "dw");
  em_scope_end(s);
  em_tensor_free(a), em_tensor_free(w);
  g_rand_free(r);
}

static void test_mode_names(void) {
  em_amp_mode m;
  em_error err = {0};
  g_assert_cmpint(em_amp_mode_parse("bf16", &m, &err), ==, EM_OK);
  g_assert_cmpint(m, ==, EM_AMP_BF16);
  g_assert_cmpint(em_amp_mode_parse("f16", &m, &err), ==, EM_OK);
  g_assert_cmpint(m, ==, EM_AMP_F16);
  g_assert_cmpint(em_amp_mode_parse("off", &m, &err), ==, EM_OK);
  g_assert_cmpint(m, ==, EM_AMP_OFF);
  g_assert_cmpint(em_amp_mode_parse("fp8", &m, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "fp8"));
  g_assert_cmpstr(em_amp_mode_name(EM_AMP_BF16), ==, "bf16");
}

/* ---- the gradient scaler ---------------------------------------------------------- */

/* A scripted run against GradScaler's documented rules (torch/cuda/amp/
 * grad_scaler.py, _amp_update_scale_): init 65536; an Inf/NaN step is
 * skipped, the scale halves and the tracker resets; growth_interval clean
 * steps in a row double it. Interval 3 here to keep the script short. */
static void test_scaler_script(void) {
  em_grad_scaler s;
  em_grad_scaler_init(&s, true);
  g_assert_cmpfloat(s.scale, ==, 65536.f);
  g_assert_cmpint(s.growth_interval, ==, 2000);
  g_assert_cmpfloat(s.growth_factor, ==, 2.f);
  g_assert_cmpfloat(s.backoff_factor, ==, 0.5f);
  s.growth_interval = 3;
  /* 1 = a step whose grads hold an Inf or NaN */
  static const int inf[] = {0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0};
  static const float want_scale[] = {65536, 65536, 32768, 32768, 32768, 65536, 65536,
                                     32768, 16384, 16384, 16384, 32768, 32768, 32768, 65536};
  static const int want_tracker[] = {1, 2, 0, 1, 2, 0, 1, 0, 0, 1, 2, 0, 1, 2, 0};
  int64_t n = 7;
  em_tensor *g = em_tensor_new(EM_DTYPE_F32, 1, &n, NULL);
  int skipped = 0;
  for (size_t i = 0; i < G_N_ELEMENTS(inf); i++) {
    float scale = em_grad_scaler_loss_scale(&s);
    for (int j = 0; j < n; j++) em_f32(g)[j] = (float)(j - 3) * 0.25f * scale; /* scaled grads */
    if (inf[i]) em_f32(g)[i % n] = i % 2 ? INFINITY : NAN;
    bool found = em_grad_scaler_unscale(&s, 1, &g);
    g_assert_cmpint(found, ==, inf[i]);
    if (!found) /* unscaled exactly: the scale is a power of two */
      for (int j = 0; j < n; j++) g_assert_cmpfloat(em_f32(g)[j], ==, (float)(j - 3) * 0.25f);
    skipped += found;
    em_grad_scaler_update(&s, found);
    g_assert_cmpfloat(s.scale, ==, want_scale[i]);
    g_assert_cmpint(s.growth_tracker, ==, want_tracker[i]);
  }
  g_assert_cmpint(s.skipped, ==, skipped);
  em_tensor_free(g);
}

/* Growth stops where the scale would overflow; back-off goes on halving. */
static void test_scaler_limits(void) {
  em_grad_scaler s;
  em_grad_scaler_init(&s, true);
  s.growth_interval = 1;
  s.scale = 0x1p127f;
  em_grad_scaler_update(&s, false);
  g_assert_cmpfloat(s.scale, ==, 0x1p127f); /* 2^128 is not finite: kept */
  g_assert_cmpint(s.growth_tracker, ==, 0);
  for (int i = 0; i < 400; i++) em_grad_scaler_update(&s, true);
  g_assert_cmpfloat(s.scale, ==, 0.f); /* torch's scale underflows the same way */
  /* default interval: 1999 clean steps keep it, the 2000th doubles it */
  em_grad_scaler_init(&s, true);
  for (int i = 0; i < 1999; i++) em_grad_scaler_update(&s, false);
  g_assert_cmpfloat(s.scale, ==, 65536.f);
  em_grad_scaler_update(&s, false);
  g_assert_cmpfloat(s.scale, ==, 131072.f);
  /* disabled: scale 1, never skips, grads untouched */
  em_grad_scaler_init(&s, false);
  g_assert_cmpfloat(em_grad_scaler_loss_scale(&s), ==, 1.f);
  int64_t n = 2;
  em_tensor *g = em_tensor_new(EM_DTYPE_F32, 1, &n, NULL);
  em_f32(g)[0] = INFINITY, em_f32(g)[1] = 3;
  g_assert_false(em_grad_scaler_unscale(&s, 1, &g));
  g_assert_cmpfloat(em_f32(g)[1], ==, 3.f);
  em_grad_scaler_update(&s, true);
  g_assert_cmpfloat(s.scale, ==, 1.f);
  em_tensor_free(g);
}

/* 1/scale is computed in double and rounded to f32, as torch does. */
static void test_scaler_unscale_rounding(void) {
  em_grad_scaler s;
  em_grad_scaler_init(&s, true);
  s.scale = 3.f;
  int64_t n = 1;
  em_tensor *g = em_tensor_new(EM_DTYPE_F32, 1, &n, NULL);
  em_f32(g)[0] = 3.f;
  em_tensor *list[2] = {g, NULL}; /* NULL grads are skipped */
  g_assert_false(em_grad_scaler_unscale(&s, 2, list));
  g_assert_cmpfloat(em_f32(g)[0], ==, 3.f * (float)(1.0 / 3.0));
  em_tensor_free(g);
}

/* The config carries the mode: absent from the JSON when off (runs
 * without amp are stored as before), round-tripped when on; f16 is
 * refused on the CPU. */
static void test_config(void) {
  em_train_config c;
  em_train_config_defaults(&c);
  g_assert_cmpint(c.amp, ==, EM_AMP_OFF);
  char *j = em_train_config_to_json(&c);
  g_assert_null(strstr(j, "\"amp\""));
  free(j);
  c.amp = EM_AMP_BF16;
  j = em_train_config_to_json(&c);
  g_assert_nonnull(strstr(j, "\"amp\":\"bf16\""));
  em_train_config back;
  em_error err = {0};
  g_assert_cmpint(em_train_config_from_json(&back, j, &err), ==, EM_OK);
  g_assert_cmpint(back.amp, ==, EM_AMP_BF16);
  g_assert_false(back.amp_scaler);
  g_assert_null(strstr(j, "amp_scaler"));
  free(j);
  c.amp_scaler = true;
  j = em_train_config_to_json(&c);
  g_assert_cmpint(em_train_config_from_json(&back, j, &err), ==, EM_OK);
  g_assert_true(back.amp_scaler);
  free(j);
  c.amp = EM_AMP_OFF; /* a scaler without amp is refused */
  g_assert_cmpint(em_train_config_validate(&c, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "amp_scaler"));
  c.amp = EM_AMP_BF16;
  g_assert_cmpint(em_train_config_from_json(&back, "{\"amp\":\"fp8\"}", &err), ==,
                  EM_ERR_INVALID);
  g_assert_cmpint(em_train_config_validate(&c, &err), ==, EM_OK);
  c.amp = EM_AMP_F16;
  g_assert_cmpint(em_train_config_validate(&c, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "GPU"));
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/amp/bf16/round-edges", test_round_edges);
  g_test_add_func("/amp/gemm/avx512-vs-scalar", test_gemm_avx512);
  g_test_add_func("/amp/gemm/amx-vs-scalar", test_gemm_amx);
  g_test_add_func("/amp/gemm/emulated-vs-scalar", test_gemm_emulated);
  g_test_add_func("/amp/gemm/nonfinite", test_gemm_nonfinite);
  g_test_add_func("/amp/autocast/linear", test_linear_autocast);
  g_test_add_func("/amp/autocast/matmul", test_matmul_autocast);
  g_test_add_func("/amp/mode-names", test_mode_names);
  g_test_add_func("/amp/config", test_config);
  g_test_add_func("/amp/scaler/script", test_scaler_script);
  g_test_add_func("/amp/scaler/limits", test_scaler_limits);
  g_test_add_func("/amp/scaler/unscale-rounding", test_scaler_unscale_rounding);
  return g_test_run();
}
