/* test-softmax-loss.c: em_softmax, em_log_softmax, em_cross_entropy and
 * em_mse_loss: finite differences (f64), the fast kernels against the
 * reference, and numerical stability. */
#include <glib.h>
#include <math.h>

#include "em-pool.h"
#include "nn-check.h"

typedef struct {
  int dim;
} dim_ctx;

static em_tensor *f_softmax(em_tensor **in, void *ctx) {
  return em_softmax(in[0], ((dim_ctx *)ctx)->dim);
}
static em_tensor *f_log_softmax(em_tensor **in, void *ctx) {
  return em_log_softmax(in[0], ((dim_ctx *)ctx)->dim);
}

typedef struct {
  double smoothing;
} ce_ctx;

/* in: logits (N, K), target i64 (N) */
static em_tensor *f_cross_entropy(em_tensor **in, void *ctx) {
  return em_cross_entropy(in[0], in[1], ((ce_ctx *)ctx)->smoothing);
}
static em_tensor *f_mse(em_tensor **in, void *ctx) { return em_mse_loss(in[0], in[1]); }

/* Random class indices in [0, K). */
static em_tensor *rand_targets(int64_t N, int64_t K, unsigned seed) {
  em_tensor *t = em_tensor_new(EM_DTYPE_I64, 1, &N, NULL);
  em_rng r;
  em_rng_seed(&r, seed);
  for (int64_t i = 0; i < N; i++) em_i64(t)[i] = (int64_t)em_rng_below(&r, (uint64_t)K);
  return t;
}

static void test_softmax_backward(void) {
  int64_t xs[3] = {3, 4, 5};
  em_tensor *x = gc_rand(EM_DTYPE_F64, 3, xs, -3, 3, 1, true);
  for (int dim = -1; dim < 3; dim++) {
    dim_ctx c = {dim};
    char what[64];
    g_snprintf(what, sizeof what, "softmax-dim%d", dim);
    g_assert_true(gradcheck(what, f_softmax, 1, &x, &c, NULL));
    g_snprintf(what, sizeof what, "log_softmax-dim%d", dim);
    g_assert_true(gradcheck(what, f_log_softmax, 1, &x, &c, NULL));
  }
  em_tensor_free(x);
  int64_t s2[2] = {4, 6};
  em_tensor *x2 = gc_rand(EM_DTYPE_F64, 2, s2, -3, 3, 2, true);
  for (int dim = 0; dim < 2; dim++) {
    dim_ctx c = {dim};
    g_assert_true(gradcheck("softmax-2d", f_softmax, 1, &x2, &c, NULL));
    g_assert_true(gradcheck("log_softmax-2d", f_log_softmax, 1, &x2, &c, NULL));
  }
  em_tensor_free(x2);
}

static void test_softmax_values(void) {
  int64_t xs[2] = {3, 4};
  em_tensor *x = gc_rand(EM_DTYPE_F64, 2, xs, -3, 3, 3, false);
  em_scope *s = em_scope_begin();
  em_tensor *y0 = em_softmax(x, 0), *y1 = em_log_softmax(x, 1);
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 4; k++) {
      double col = 0, row = 0;
      for (int j = 0; j < 3; j++) col += exp(em_f64(x)[j * 4 + k]);
      for (int j = 0; j < 4; j++) row += exp(em_f64(x)[i * 4 + j]);
      g_assert_cmpfloat_with_epsilon(em_f64(y0)[i * 4 + k], exp(em_f64(x)[i * 4 + k]) / col, 1e-14);
      g_assert_cmpfloat_with_epsilon(em_f64(y1)[i * 4 + k], em_f64(x)[i * 4 + k] - log(row), 1e-14);
    }
  em_scope_end(s);
  em_tensor_free(x);
}

/* Logits far beyond exp's range still give finite, exact answers. */
static void test_softmax_stable(void) {
  float big[6] = {1000, 1001, 1002, -1000, -1001, -1002};
  int64_t shape[2] = {2, 3};
  em_scope *s = em_scope_begin();
  em_tensor *x = em_from_data(EM_DTYPE_F32, 2, shape, big);
  em_tensor *y = em_softmax(x, 1), *ly = em_log_softmax(x, 1);
  double z = 1 + exp(-1) + exp(-2);
  g_assert_cmpfloat_with_epsilon(em_f32(y)[2], 1 / z, 1e-6);
  g_assert_cmpfloat_with_epsilon(em_f32(y)[3], 1 / z, 1e-6);
  g_assert_cmpfloat_with_epsilon(em_f32(ly)[0], -2 - log(z), 1e-5);
  int64_t one = 2;
  em_tensor *t = em_from_data(EM_DTYPE_I64, 1, &one, (int64_t[]){0, 0});
  /* -inf (a masked logit) gets probability 0; NaN spreads to its row */
  float odd[6] = {0, -INFINITY, 1, 0, NAN, 1};
  em_tensor *xo = em_from_data(EM_DTYPE_F32, 2, shape, odd);
  em_tensor *yo = em_softmax(xo, 1), *lyo = em_log_softmax(xo, 1);
  g_assert_cmpfloat(em_f32(yo)[1], ==, 0);
  g_assert_cmpfloat_with_epsilon(em_f32(yo)[2], exp(1) / (1 + exp(1)), 1e-6);
  g_assert_true(isinf(em_f32(lyo)[1]) && em_f32(lyo)[1] < 0);
  for (int k = 3; k < 6; k++) g_assert_true(isnan(em_f32(yo)[k]));
  em_tensor *loss = em_cross_entropy(x, t, 0);
  g_assert_cmpfloat_with_epsilon(em_tensor_item(loss), (2 + log(z) + log(z)) / 2, 1e-6);
  em_scope_end(s);
}

static void test_softmax_fast_vs_ref(void) {
  struct {
    int ndim, dim;
    int64_t shape[3];
  } cases[] = {{2, 1, {7, 10}},      {2, 0, {7, 10}},     {3, 1, {4, 9, 70}},
               {3, 2, {3, 5, 40}},   {1, 0, {17}},        {2, 1, {256, 300}} /* threads */,
               {3, 1, {8, 64, 200}} /* threads, blocks */};
  for (unsigned k = 0; k < G_N_ELEMENTS(cases); k++) {
    em_tensor *x = gc_rand(EM_DTYPE_F64, cases[k].ndim, cases[k].shape, -5, 5, 10 + k, true);
    dim_ctx c = {cases[k].dim};
    g_assert_true(nc_fast_vs_ref("softmax", f_softmax, 1, &x, &c, 1e-5));
    g_assert_true(nc_fast_vs_ref("log_softmax", f_log_softmax, 1, &x, &c, 1e-5));
    em_tensor_free(x);
  }
}

/* Rows far apart (offsets -200, 0, 200): a block of short rows cannot
 * share one shift, so the fast kernels must redo the low rows. */
static em_tensor *spread_rows(int64_t N, int64_t K, unsigned seed) {
  int64_t shape[2] = {N, K};
  em_tensor *x = gc_rand(EM_DTYPE_F64, 2, shape, -3, 3, seed, true);
  for (int64_t i = 0; i < N; i++)
    for (int64_t k = 0; k < K; k++) em_f64(x)[i * K + k] += (double)(i % 3) * 200 - 200;
  return x;
}

static void test_softmax_spread_rows(void) {
  em_tensor *x = spread_rows(30, 10, 15);
  dim_ctx c = {1};
  g_assert_true(nc_fast_vs_ref("softmax-spread", f_softmax, 1, &x, &c, 1e-5));
  g_assert_true(nc_fast_vs_ref("log_softmax-spread", f_log_softmax, 1, &x, &c, 1e-5));
  em_tensor_free(x);
}

static void test_cross_entropy_backward(void) {
  int64_t ls[2] = {6, 5};
  em_tensor *in[2] = {gc_rand(EM_DTYPE_F64, 2, ls, -3, 3, 20, true), rand_targets(6, 5, 21)};
  ce_ctx plain = {0}, smooth = {0.1}, heavy = {0.7};
  g_assert_true(gradcheck("cross_entropy", f_cross_entropy, 2, in, &plain, NULL));
  g_assert_true(gradcheck("cross_entropy-smoothing", f_cross_entropy, 2, in, &smooth, NULL));
  g_assert_true(gradcheck("cross_entropy-smoothing-0.7", f_cross_entropy, 2, in, &heavy, NULL));
  /* the value against a direct formula */
  em_scope *s = em_scope_begin();
  em_tensor *loss = em_cross_entropy(in[0], in[1], 0.1);
  double want = 0;
  for (int i = 0; i < 6; i++) {
    const double *x = em_f64(in[0]) + i * 5;
    double z = 0, all = 0;
    for (int k = 0; k < 5; k++) z += exp(x[k]);
    for (int k = 0; k < 5; k++) all += -(x[k] - log(z));
    want += 0.9 * -(x[em_i64(in[1])[i]] - log(z)) + 0.1 / 5 * all;
  }
  g_assert_cmpfloat_with_epsilon(em_tensor_item(loss), want / 6, 1e-12);
  em_scope_end(s);
  em_tensor_free(in[0]);
  em_tensor_free(in[1]);
}

static void test_cross_entropy_fast_vs_ref(void) {
  int64_t shapes[][2] = {{128, 10}, {5, 3}, {300, 1000} /* threads */};
  for (unsigned k = 0; k < G_N_ELEMENTS(shapes); k++) {
    em_tensor *in[2] = {gc_rand(EM_DTYPE_F64, 2, shapes[k], -4, 4, 30 + k, true),
                        rand_targets(shapes[k][0], shapes[k][1], 40 + k)};
    ce_ctx plain = {0}, smooth = {0.1};
    g_assert_true(nc_fast_vs_ref("cross_entropy", f_cross_entropy, 2, in, &plain, 1e-5));
    g_assert_true(nc_fast_vs_ref("cross_entropy-smoothing", f_cross_entropy, 2, in, &smooth, 1e-5));
    em_tensor_free(in[0]);
    em_tensor_free(in[1]);
  }
  em_tensor *in[2] = {spread_rows(30, 10, 35), rand_targets(30, 10, 36)};
  ce_ctx smooth = {0.1};
  g_assert_true(nc_fast_vs_ref("cross_entropy-spread", f_cross_entropy, 2, in, &smooth, 1e-5));
  em_tensor_free(in[0]);
  em_tensor_free(in[1]);
}

static void test_cross_entropy_bad_target(void) {
  if (g_test_subprocess()) {
    int64_t ls[2] = {2, 3}, n = 2;
    em_scope *s = em_scope_begin();
    em_tensor *x = em_zeros(EM_DTYPE_F32, 2, ls);
    em_tensor *t = em_from_data(EM_DTYPE_I64, 1, &n, (int64_t[]){1, 3});
    (void)em_cross_entropy(x, t, 0);
    em_scope_end(s);
    return;
  }
  g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed();
  g_test_trap_assert_stderr("*class index out of range*");
}

static void test_mse_backward(void) {
  int64_t s[3] = {2, 3, 4};
  em_tensor *in[2] = {gc_rand(EM_DTYPE_F64, 3, s, -2, 2, 50, true),
                      gc_rand(EM_DTYPE_F64, 3, s, -2, 2, 51, true)};
  g_assert_true(gradcheck("mse", f_mse, 2, in, NULL, NULL));
  em_tensor_set_requires_grad(in[1], false);
  g_assert_true(gradcheck("mse-a-only", f_mse, 2, in, NULL, NULL));
  em_tensor_set_requires_grad(in[1], true);
  g_assert_true(nc_fast_vs_ref("mse", f_mse, 2, in, NULL, 1e-5));
  em_tensor_free(in[0]);
  em_tensor_free(in[1]);
  int64_t big[2] = {300, 400}; /* threads */
  em_tensor *in2[2] = {gc_rand(EM_DTYPE_F64, 2, big, -2, 2, 52, true),
                       gc_rand(EM_DTYPE_F64, 2, big, -2, 2, 53, true)};
  g_assert_true(nc_fast_vs_ref("mse-big", f_mse, 2, in2, NULL, 1e-5));
  em_tensor_free(in2[0]);
  em_tensor_free(in2[1]);
}

/* Forward and backward give the same bits on one thread and on two. */
static void test_thread_count_invariance(void) {
  int64_t shape[2] = {8192, 10}; /* big enough for threads */
  em_tensor *x = gc_rand(EM_DTYPE_F32, 2, shape, -4, 4, 60, true);
  em_tensor *t = rand_targets(8192, 10, 61);
  em_tensor *b = gc_rand(EM_DTYPE_F32, 2, shape, -4, 4, 62, false);
  em_tensor *kept[2][4];
  for (int run = 0; run < 2; run++) {
    em_set_num_threads(run ? 2 : 1);
    em_scope *s = em_scope_begin();
    em_tensor_zero_grad(x);
    em_backward(em_cross_entropy(x, t, 0.1));
    kept[run][0] = nc_keep(x->grad);
    kept[run][1] = nc_keep(em_log_softmax(x, 1));
    kept[run][2] = nc_keep(em_softmax(x, 0));
    kept[run][3] = nc_keep(em_mse_loss(x, b));
    em_scope_end(s);
  }
  for (int k = 0; k < 4; k++) {
    g_assert_cmpfloat(gc_max_abs_diff(kept[0][k], kept[1][k]), ==, 0);
    em_tensor_free(kept[0][k]);
    em_tensor_free(kept[1][k]);
  }
  em_tensor_free(x);
  em_tensor_free(t);
  em_tensor_free(b);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  em_set_num_threads(2);
  g_test_add_func("/engine/softmax/backward", test_softmax_backward);
  g_test_add_func("/engine/softmax/values", test_softmax_values);
  g_test_add_func("/engine/softmax/stable", test_softmax_stable);
  g_test_add_func("/engine/softmax/fast-vs-ref", test_softmax_fast_vs_ref);
  g_test_add_func("/engine/softmax/spread-rows", test_softmax_spread_rows);
  g_test_add_func("/engine/cross-entropy/backward", test_cross_entropy_backward);
  g_test_add_func("/engine/cross-entropy/fast-vs-ref", test_cross_entropy_fast_vs_ref);
  g_test_add_func("/engine/cross-entropy/bad-target", test_cross_entropy_bad_target);
  g_test_add_func("/engine/mse/backward", test_mse_backward);
  g_test_add_func("/engine/softmax-loss/thread-count", test_thread_count_invariance);
  int rc = g_test_run();
  em_pool_shutdown();
  return rc;
}
