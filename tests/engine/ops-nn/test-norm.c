/* test-norm.c: em_batch_norm and em_layer_norm: finite differences (f64),
 * the fast kernels against the reference, running statistics and eval
 * mode. */
#include <glib.h>
#include <math.h>

#include "em-pool.h"
#include "nn-check.h"

typedef struct {
  em_tensor *running_mean, *running_var; /* (C) or NULL */
  bool training;
  double momentum, eps;
} bn_ctx;

/* in: x (N, C, ...), weight (C), bias (C); either of the last may be NULL */
static em_tensor *f_batch_norm(em_tensor **in, void *ctx) {
  bn_ctx *c = ctx;
  return em_batch_norm(in[0], in[1], in[2], c->running_mean, c->running_var, c->training,
                       c->momentum, c->eps);
}

typedef struct {
  int nd;
  double eps;
} ln_ctx;

static em_tensor *f_layer_norm(em_tensor **in, void *ctx) {
  ln_ctx *c = ctx;
  return em_layer_norm(in[0], c->nd, in[1], in[2], c->eps);
}

static void free_all(int n, em_tensor **t) {
  for (int i = 0; i < n; i++) em_tensor_free(t[i]);
}

static void test_batch_norm_train_backward(void) {
  int64_t xs[4] = {3, 4, 2, 3}, cs[1] = {4};
  em_tensor *in[3] = {gc_rand(EM_DTYPE_F64, 4, xs, -2, 3, 1, true),
                      gc_rand(EM_DTYPE_F64, 1, cs, 0.5, 1.5, 2, true),
                      gc_rand(EM_DTYPE_F64, 1, cs, -1, 1, 3, true)};
  bn_ctx c = {NULL, NULL, true, 0.1, 1e-5};
  g_assert_true(gradcheck("batch_norm-train-4d", f_batch_norm, 3, in, &c, NULL));
  free_all(3, in);

  int64_t xs2[2] = {6, 5}, cs2[1] = {5};
  em_tensor *in2[3] = {gc_rand(EM_DTYPE_F64, 2, xs2, -1, 1, 4, true),
                       gc_rand(EM_DTYPE_F64, 1, cs2, 0.5, 1.5, 5, true),
                       gc_rand(EM_DTYPE_F64, 1, cs2, -1, 1, 6, true)};
  g_assert_true(gradcheck("batch_norm-train-2d", f_batch_norm, 3, in2, &c, NULL));
  /* without affine parameters, and x alone needing grad */
  em_tensor *x_only[3] = {in2[0], NULL, NULL};
  g_assert_true(gradcheck("batch_norm-train-no-affine", f_batch_norm, 3, x_only, &c, NULL));
  em_tensor_set_requires_grad(in2[0], false);
  g_assert_true(gradcheck("batch_norm-train-params-only", f_batch_norm, 3, in2, &c, NULL));
  free_all(3, in2);
}

static void test_batch_norm_eval_backward(void) {
  int64_t xs[3] = {4, 3, 5}, cs[1] = {3};
  em_tensor *in[3] = {gc_rand(EM_DTYPE_F64, 3, xs, -2, 2, 7, true),
                      gc_rand(EM_DTYPE_F64, 1, cs, 0.5, 1.5, 8, true),
                      gc_rand(EM_DTYPE_F64, 1, cs, -1, 1, 9, true)};
  em_tensor *rm = gc_rand(EM_DTYPE_F64, 1, cs, -0.5, 0.5, 10, false);
  em_tensor *rv = gc_rand(EM_DTYPE_F64, 1, cs, 0.5, 2, 11, false);
  bn_ctx c = {rm, rv, false, 0.1, 1e-5};
  g_assert_true(gradcheck("batch_norm-eval", f_batch_norm, 3, in, &c, NULL));
  /* eval leaves the running stats alone and uses them */
  em_scope *s = em_scope_begin();
  em_tensor *y = f_batch_norm(in, &c);
  for (int64_t n = 0; n < 4; n++)
    for (int64_t ch = 0; ch < 3; ch++)
      for (int64_t k = 0; k < 5; k++) {
        int64_t at = (n * 3 + ch) * 5 + k;
        double ref = (em_f64(in[0])[at] - em_f64(rm)[ch]) / sqrt(em_f64(rv)[ch] + 1e-5) *
                         em_f64(in[1])[ch] + em_f64(in[2])[ch];
        g_assert_cmpfloat_with_epsilon(em_f64(y)[at], ref, 1e-12);
      }
  em_scope_end(s);
  free_all(3, in);
  em_tensor_free(rm);
  em_tensor_free(rv);
}

static void test_batch_norm_running_stats(void) {
  int64_t xs[4] = {5, 2, 3, 4}, cs[1] = {2};
  for (int dt = 0; dt < 2; dt++) {
    em_dtype t = dt ? EM_DTYPE_F64 : EM_DTYPE_F32;
    em_tensor *x = gc_rand(t, 4, xs, 1, 4, 12, false);
    em_tensor *rm = em_tensor_new(t, 1, cs, NULL), *rv = em_tensor_new(t, 1, cs, NULL);
    em_tensor_fill_(rm, 0.5);
    em_tensor_fill_(rv, 2.0);
    em_scope *s = em_scope_begin();
    em_tensor *y = em_batch_norm(x, NULL, NULL, rm, rv, true, 0.25, 1e-5);
    double tol = dt ? 1e-12 : 1e-5;
    for (int64_t ch = 0; ch < 2; ch++) {
      double sum = 0, sq = 0, M = 5 * 12;
      for (int64_t n = 0; n < 5; n++)
        for (int64_t k = 0; k < 12; k++) sum += nc_at(x, (n * 2 + ch) * 12 + k);
      double mean = sum / M;
      for (int64_t n = 0; n < 5; n++)
        for (int64_t k = 0; k < 12; k++) {
          double d = nc_at(x, (n * 2 + ch) * 12 + k) - mean;
          sq += d * d;
        }
      g_assert_cmpfloat_with_epsilon(nc_at(rm, ch), 0.75 * 0.5 + 0.25 * mean, tol);
      g_assert_cmpfloat_with_epsilon(nc_at(rv, ch), 0.75 * 2.0 + 0.25 * sq / (M - 1), tol);
      /* the output is normalised with the biased variance */
      double ym = 0, yv = 0;
      for (int64_t n = 0; n < 5; n++)
        for (int64_t k = 0; k < 12; k++) ym += nc_at(y, (n * 2 + ch) * 12 + k) / M;
      for (int64_t n = 0; n < 5; n++)
        for (int64_t k = 0; k < 12; k++) yv += pow(nc_at(y, (n * 2 + ch) * 12 + k) - ym, 2) / M;
      g_assert_cmpfloat_with_epsilon(ym, 0, 1e-5);
      g_assert_cmpfloat_with_epsilon(yv, (sq / M) / (sq / M + 1e-5), 1e-5);
    }
    /* NULL running stats are fine in training */
    (void)em_batch_norm(x, NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
    em_scope_end(s);
    em_tensor_free(x);
    em_tensor_free(rm);
    em_tensor_free(rv);
  }
}

/* A large mean and small spread: the one-pass variance must not cancel. */
static void test_batch_norm_offset_data(void) {
  int64_t xs[3] = {64, 3, 50};
  em_tensor *x = gc_rand(EM_DTYPE_F32, 3, xs, 1000, 1001, 13, false);
  em_tensor *x64 = nc_convert(x, EM_DTYPE_F64);
  em_scope *s = em_scope_begin();
  em_tensor *y = em_batch_norm(x, NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
  em_tensor *y64 = em_batch_norm(x64, NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
  g_assert_cmpfloat(nc_rel_diff(y, y64), <, 2e-3);
  em_scope_end(s);
  em_tensor_free(x);
  em_tensor_free(x64);
}

static void test_batch_norm_fast_vs_ref(void) {
  struct {
    int ndim;
    int64_t shape[4];
  } cases[] = {{2, {16, 7}}, {4, {4, 5, 3, 7}}, {3, {6, 3, 37}},
               {4, {16, 8, 32, 32}} /* big: threads */, {2, {512, 160}} /* big, (N, C) */};
  for (unsigned k = 0; k < G_N_ELEMENTS(cases); k++) {
    int64_t cs[1] = {cases[k].shape[1]};
    em_tensor *in[3] = {gc_rand(EM_DTYPE_F64, cases[k].ndim, cases[k].shape, -2, 3, 20 + k, true),
                        gc_rand(EM_DTYPE_F64, 1, cs, 0.5, 1.5, 30 + k, true),
                        gc_rand(EM_DTYPE_F64, 1, cs, -1, 1, 40 + k, true)};
    em_tensor *rm = gc_rand(EM_DTYPE_F64, 1, cs, -0.5, 0.5, 50 + k, false);
    em_tensor *rv = gc_rand(EM_DTYPE_F64, 1, cs, 0.5, 2, 60 + k, false);
    bn_ctx train = {NULL, NULL, true, 0.1, 1e-5}, eval = {rm, rv, false, 0.1, 1e-5};
    g_assert_true(nc_fast_vs_ref("batch_norm-train", f_batch_norm, 3, in, &train, 1e-4));
    g_assert_true(nc_fast_vs_ref("batch_norm-eval", f_batch_norm, 3, in, &eval, 1e-4));
    em_tensor *x_only[3] = {in[0], NULL, NULL};
    g_assert_true(nc_fast_vs_ref("batch_norm-no-affine", f_batch_norm, 3, x_only, &train, 1e-4));
    free_all(3, in);
    em_tensor_free(rm);
    em_tensor_free(rv);
  }
}

/* A strided (transposed) input gives the same values and gradient as
 * its contiguous copy. */
static void test_batch_norm_strided_input(void) {
  int64_t base_shape[2] = {5, 12};
  em_tensor *base = gc_rand(EM_DTYPE_F32, 2, base_shape, -1, 1, 70, false);
  em_scope *s = em_scope_begin();
  int64_t shape[2] = {12, 5}, stride[2] = {1, 12};
  em_tensor *xt = em_view_raw(base, 2, shape, stride, 0);
  em_tensor_set_requires_grad(xt, true);
  em_tensor *xc = em_empty(EM_DTYPE_F32, 2, shape);
  em_tensor_copy_(xc, xt);
  em_tensor_set_requires_grad(xc, true);
  em_tensor *gy = em_empty(EM_DTYPE_F32, 2, shape);
  for (int k = 0; k < 60; k++) em_f32(gy)[k] = (float)sin(k);
  /* backward consumes the tape, so one op at a time */
  em_tensor *yt = em_batch_norm(xt, NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
  em_backward_grad(yt, gy);
  em_tensor *yc = em_batch_norm(xc, NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
  em_backward_grad(yc, gy);
  g_assert_cmpfloat(gc_max_abs_diff(yt, yc), ==, 0);
  g_assert_cmpfloat(gc_max_abs_diff(xt->grad, xc->grad), ==, 0);
  em_scope_end(s);
  em_tensor_free(base);
}

static void test_layer_norm_backward(void) {
  int64_t xs[3] = {3, 4, 5}, ws2[2] = {4, 5}, ws1[1] = {5};
  em_tensor *in[3] = {gc_rand(EM_DTYPE_F64, 3, xs, -2, 2, 80, true),
                      gc_rand(EM_DTYPE_F64, 2, ws2, 0.5, 1.5, 81, true),
                      gc_rand(EM_DTYPE_F64, 2, ws2, -1, 1, 82, true)};
  ln_ctx c2 = {2, 1e-5};
  g_assert_true(gradcheck("layer_norm-nd2", f_layer_norm, 3, in, &c2, NULL));
  em_tensor *x_only[3] = {in[0], NULL, NULL};
  g_assert_true(gradcheck("layer_norm-no-affine", f_layer_norm, 3, x_only, &c2, NULL));
  em_tensor *w1[3] = {in[0], gc_rand(EM_DTYPE_F64, 1, ws1, 0.5, 1.5, 83, true),
                      gc_rand(EM_DTYPE_F64, 1, ws1, -1, 1, 84, true)};
  ln_ctx c1 = {1, 1e-5};
  g_assert_true(gradcheck("layer_norm-nd1", f_layer_norm, 3, w1, &c1, NULL));
  em_tensor *w_only[3] = {in[0], w1[1], NULL};
  g_assert_true(gradcheck("layer_norm-weight-only", f_layer_norm, 3, w_only, &c1, NULL));
  em_tensor_free(w1[1]);
  em_tensor_free(w1[2]);
  free_all(3, in);
}

static void test_layer_norm_fast_vs_ref(void) {
  struct {
    int ndim, nd;
    int64_t shape[3];
  } cases[] = {{2, 1, {7, 33}}, {3, 2, {4, 3, 10}}, {3, 1, {64, 32, 48}} /* big: threads */};
  for (unsigned k = 0; k < G_N_ELEMENTS(cases); k++) {
    const int64_t *ws = cases[k].shape + cases[k].ndim - cases[k].nd;
    em_tensor *in[3] = {gc_rand(EM_DTYPE_F64, cases[k].ndim, cases[k].shape, -2, 3, 90 + k, true),
                        gc_rand(EM_DTYPE_F64, cases[k].nd, ws, 0.5, 1.5, 100 + k, true),
                        gc_rand(EM_DTYPE_F64, cases[k].nd, ws, -1, 1, 110 + k, true)};
    ln_ctx c = {cases[k].nd, 1e-5};
    g_assert_true(nc_fast_vs_ref("layer_norm", f_layer_norm, 3, in, &c, 1e-4));
    em_tensor *x_only[3] = {in[0], NULL, NULL};
    g_assert_true(nc_fast_vs_ref("layer_norm-no-affine", f_layer_norm, 3, x_only, &c, 1e-4));
    em_tensor *w_only[3] = {in[0], in[1], NULL};
    g_assert_true(nc_fast_vs_ref("layer_norm-weight-only", f_layer_norm, 3, w_only, &c, 1e-4));
    free_all(3, in);
  }
}

/* Forward and every gradient give the same bits on one thread and two. */
static void test_thread_count_invariance(void) {
  int64_t xs[4] = {16, 8, 24, 24}, cs[1] = {8}, ls[2] = {512, 192}, ws[1] = {192};
  em_tensor *bn[3] = {gc_rand(EM_DTYPE_F32, 4, xs, -2, 3, 120, true),
                      gc_rand(EM_DTYPE_F32, 1, cs, 0.5, 1.5, 121, true),
                      gc_rand(EM_DTYPE_F32, 1, cs, -1, 1, 122, true)};
  em_tensor *ln[3] = {gc_rand(EM_DTYPE_F32, 2, ls, -2, 3, 123, true),
                      gc_rand(EM_DTYPE_F32, 1, ws, 0.5, 1.5, 124, true),
                      gc_rand(EM_DTYPE_F32, 1, ws, -1, 1, 125, true)};
  bn_ctx bc = {NULL, NULL, true, 0.1, 1e-5};
  ln_ctx lc = {1, 1e-5};
  em_tensor *kept[2][8];
  for (int run = 0; run < 2; run++) {
    em_set_num_threads(run ? 2 : 1);
    for (int op = 0; op < 2; op++) {
      em_tensor **in = op ? ln : bn;
      for (int i = 0; i < 3; i++) em_tensor_zero_grad(in[i]);
      em_scope *s = em_scope_begin();
      em_tensor *y = op ? f_layer_norm(in, &lc) : f_batch_norm(in, &bc);
      kept[run][op * 4] = nc_keep(y);
      em_backward_grad(y, y);
      for (int i = 0; i < 3; i++) kept[run][op * 4 + 1 + i] = nc_keep(in[i]->grad);
      em_scope_end(s);
    }
  }
  for (int k = 0; k < 8; k++) {
    g_assert_cmpfloat(gc_max_abs_diff(kept[0][k], kept[1][k]), ==, 0);
    em_tensor_free(kept[0][k]);
    em_tensor_free(kept[1][k]);
  }
  free_all(3, bn);
  free_all(3, ln);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  em_set_num_threads(2);
  g_test_add_func("/engine/batch-norm/train-backward", test_batch_norm_train_backward);
  g_test_add_func("/engine/batch-norm/eval-backward", test_batch_norm_eval_backward);
  g_test_add_func("/engine/batch-norm/running-stats", test_batch_norm_running_stats);
  g_test_add_func("/engine/batch-norm/offset-data", test_batch_norm_offset_data);
  g_test_add_func("/engine/batch-norm/fast-vs-ref", test_batch_norm_fast_vs_ref);
  g_test_add_func("/engine/batch-norm/strided-input", test_batch_norm_strided_input);
  g_test_add_func("/engine/layer-norm/backward", test_layer_norm_backward);
  g_test_add_func("/engine/layer-norm/fast-vs-ref", test_layer_norm_fast_vs_ref);
  g_test_add_func("/engine/norm/thread-count", test_thread_count_invariance);
  int rc = g_test_run();
  em_pool_shutdown();
  return rc;
}
