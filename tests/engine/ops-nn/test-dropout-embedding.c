/* test-dropout-embedding.c: em_dropout (masks from a seeded rng, scaling,
 * the identity cases) and em_embedding (gather, scatter-add backward). */
#include <glib.h>
#include <math.h>

#include "em-pool.h"
#include "nn-check.h"

typedef struct {
  double p;
  uint64_t seed;
} drop_ctx;

/* The same seed on every call, so finite differences see one mask. */
static em_tensor *f_dropout(em_tensor **in, void *ctx) {
  drop_ctx *c = ctx;
  em_rng r;
  em_rng_seed(&r, c->seed);
  return em_dropout(in[0], c->p, true, &r);
}

static em_tensor *f_embedding(em_tensor **in, void *ctx) { return em_embedding(in[0], in[1]); }

static void test_dropout_backward(void) {
  int64_t xs[2] = {6, 7};
  em_tensor *x = gc_rand(EM_DTYPE_F64, 2, xs, 0.5, 2, 1, true);
  drop_ctx c = {0.3, 42};
  g_assert_true(gradcheck("dropout", f_dropout, 1, &x, &c, NULL));
  /* the gradient is the mask times 1 / (1 - p): y / x elementwise */
  for (int dt = 0; dt < 2; dt++) {
    em_tensor *xin = dt ? x : nc_convert(x, EM_DTYPE_F32);
    em_tensor_zero_grad(xin);
    em_scope *s = em_scope_begin();
    em_tensor *y = f_dropout(&xin, &c);
    em_tensor *gy = em_full(y->dtype, 2, xs, 1.0);
    em_backward_grad(y, gy);
    int dropped = 0;
    for (int64_t k = 0; k < 42; k++) {
      double ratio = nc_at(y, k) / nc_at(xin, k), g = nc_at(xin->grad, k);
      g_assert_true(ratio == 0 || fabs(ratio - 1 / 0.7) < 1e-6);
      g_assert_cmpfloat_with_epsilon(g, ratio, 1e-6);
      g_assert_true(g == 0 || fabs(g - 1 / 0.7) < 1e-6);
      dropped += g == 0;
    }
    g_assert_cmpint(dropped, >, 0);
    g_assert_cmpint(dropped, <, 42);
    em_scope_end(s);
    if (!dt) em_tensor_free(xin);
  }
  em_tensor_free(x);
}

static void test_dropout_mask(void) {
  int64_t n = 100000;
  em_tensor *x = em_tensor_new(EM_DTYPE_F32, 1, &n, NULL);
  em_tensor_fill_(x, 1.0);
  em_scope *s = em_scope_begin();
  em_rng r1, r2, r3;
  em_rng_seed(&r1, 7);
  em_rng_seed(&r2, 7);
  em_rng_seed(&r3, 8);
  em_tensor *a = em_dropout(x, 0.25, true, &r1), *b = em_dropout(x, 0.25, true, &r2);
  em_tensor *c = em_dropout(x, 0.25, true, &r3);
  g_assert_cmpfloat(gc_max_abs_diff(a, b), ==, 0); /* same seed, same mask */
  g_assert_cmpfloat(gc_max_abs_diff(a, c), >, 0);
  double kept = 0, mean = 0;
  for (int64_t k = 0; k < n; k++) {
    kept += em_f32(a)[k] != 0;
    mean += em_f32(a)[k] / (double)n;
  }
  g_assert_cmpfloat(fabs(kept / (double)n - 0.75), <, 0.01); /* ~ 7 sigma */
  g_assert_cmpfloat(fabs(mean - 1.0), <, 0.015);
  /* the rng advanced: the next mask differs */
  em_tensor *a2 = em_dropout(x, 0.25, true, &r1);
  g_assert_cmpfloat(gc_max_abs_diff(a, a2), >, 0);
  /* identity in eval and for p == 0; zeros for p == 1 */
  g_assert_true(em_dropout(x, 0.25, false, &r1) == x);
  g_assert_true(em_dropout(x, 0.0, true, &r1) == x);
  em_tensor *z = em_dropout(x, 1.0, true, &r1);
  for (int64_t k = 0; k < n; k++) g_assert_cmpfloat(em_f32(z)[k], ==, 0);
  em_scope_end(s);
  em_tensor_free(x);
}

static void test_embedding(void) {
  int64_t ws[2] = {7, 5}, is[2] = {3, 4};
  em_tensor *in[2] = {gc_rand(EM_DTYPE_F64, 2, ws, -1, 1, 2, true),
                      em_tensor_new(EM_DTYPE_I64, 2, is, NULL)};
  int64_t idx[12] = {0, 3, 3, 6, 1, 0, 3, 2, 6, 6, 5, 3}; /* repeats; row 4 unused */
  for (int k = 0; k < 12; k++) em_i64(in[1])[k] = idx[k];
  g_assert_true(gradcheck("embedding", f_embedding, 2, in, NULL, NULL));
  g_assert_true(nc_fast_vs_ref("embedding", f_embedding, 2, in, NULL, 1e-6));
  em_scope *s = em_scope_begin();
  em_tensor *y = em_embedding(in[0], in[1]);
  g_assert_cmpint(y->ndim, ==, 3);
  g_assert_cmpint(y->shape[2], ==, 5);
  for (int k = 0; k < 12; k++)
    for (int d = 0; d < 5; d++) g_assert_cmpfloat(em_f64(y)[k * 5 + d], ==, em_f64(in[0])[idx[k] * 5 + d]);
  /* gradient: row v receives one row of ones per occurrence */
  em_tensor_zero_grad(in[0]);
  em_backward_grad(y, em_full(EM_DTYPE_F64, 3, y->shape, 1.0));
  int count[7] = {0};
  for (int k = 0; k < 12; k++) count[idx[k]]++;
  for (int v = 0; v < 7; v++)
    for (int d = 0; d < 5; d++) g_assert_cmpfloat(em_f64(in[0]->grad)[v * 5 + d], ==, count[v]);
  /* a transposed weight view gathers the same rows */
  int64_t tshape[2] = {5, 7}, tstride[2] = {1, 5};
  em_tensor *wt = em_view_raw(in[0], 2, tshape, tstride, 0); /* (D, V) as a view */
  int64_t vshape[2] = {7, 5}, vstride[2] = {1, 7};
  em_tensor *wc = em_empty(EM_DTYPE_F64, 2, tshape);
  em_tensor_copy_(wc, wt);
  em_tensor *back = em_view_raw(wc, 2, vshape, vstride, 0); /* (V, D), strided */
  em_tensor *y2 = em_embedding(back, in[1]);
  g_assert_cmpfloat(gc_max_abs_diff(y, y2), ==, 0);
  em_scope_end(s);
  em_tensor_free(in[0]);
  em_tensor_free(in[1]);
}

static void test_embedding_big(void) {
  int64_t ws[2] = {1000, 64}, is[1] = {2048}; /* threads both ways */
  em_tensor *in[2] = {gc_rand(EM_DTYPE_F64, 2, ws, -1, 1, 3, true),
                      em_tensor_new(EM_DTYPE_I64, 1, is, NULL)};
  em_rng r;
  em_rng_seed(&r, 4);
  for (int k = 0; k < 2048; k++) em_i64(in[1])[k] = (int64_t)em_rng_below(&r, 1000);
  g_assert_true(nc_fast_vs_ref("embedding-big", f_embedding, 2, in, NULL, 1e-5));
  em_tensor_free(in[0]);
  em_tensor_free(in[1]);
}

static void test_embedding_bad_index(void) {
  if (g_test_subprocess()) {
    int64_t ws[2] = {4, 2}, n = 2;
    em_scope *s = em_scope_begin();
    em_tensor *w = em_zeros(EM_DTYPE_F32, 2, ws);
    em_tensor *idx = em_from_data(EM_DTYPE_I64, 1, &n, (int64_t[]){1, 4});
    (void)em_embedding(w, idx);
    em_scope_end(s);
    return;
  }
  g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed();
  g_test_trap_assert_stderr("*index out of range*");
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  em_set_num_threads(2);
  g_test_add_func("/engine/dropout/backward", test_dropout_backward);
  g_test_add_func("/engine/dropout/mask", test_dropout_mask);
  g_test_add_func("/engine/embedding/gather-scatter", test_embedding);
  g_test_add_func("/engine/embedding/big", test_embedding_big);
  g_test_add_func("/engine/embedding/bad-index", test_embedding_bad_index);
  int rc = g_test_run();
  em_pool_shutdown();
  return rc;
}
