/* test-reduce.c: sum, mean, sum_all, mean_all, max and argmax against
 * loop references, the contiguous (vectorised, threaded) kernels against
 * the strided reference, first-max and NaN rules, and finite-difference
 * gradients. */
#include "ops-test.h"
#include "em-pool.h"

/* Reference reduction of x (any strides) over d: 0 sum, 1 mean, 2 max
 * (value), 3 argmax; result in row-major order of the kept dims. */
static double ref_reduce(const em_tensor *x, int d, int kind, int64_t out_k) {
  int64_t idx[EM_MAX_DIMS], r = out_k;
  for (int k = x->ndim - 1; k >= 0; k--) {
    if (k == d) continue;
    idx[k] = r % x->shape[k];
    r /= x->shape[k];
  }
  double acc = 0, best = 0;
  int64_t bi = 0;
  for (int64_t j = 0; j < x->shape[d]; j++) {
    idx[d] = j;
    double v = em_tensor_get(x, idx);
    acc += v;
    if (j == 0 || v > best) {
      best = v;
      bi = j;
    }
  }
  switch (kind) {
  case 0: return acc;
  case 1: return acc / (double)x->shape[d];
  case 2: return best;
  default: return (double)bi;
  }
}

static void check_dims(em_tensor *x, double atol, double rtol) {
  for (int dim = -x->ndim; dim < x->ndim; dim++)
    for (int keep = 0; keep < 2; keep++) {
      int d = dim < 0 ? dim + x->ndim : dim;
      em_tensor *am = NULL;
      em_tensor *outs[4] = {em_sum(x, dim, keep), em_mean(x, dim, keep), em_max(x, dim, keep, &am),
                            em_argmax(x, dim, keep)};
      g_assert_true(am->dtype == EM_DTYPE_I64 && outs[3]->dtype == EM_DTYPE_I64);
      for (int kind = 0; kind < 4; kind++) {
        em_tensor *y = outs[kind];
        g_assert_cmpint(y->ndim, ==, keep ? x->ndim : x->ndim - 1);
        if (keep) g_assert_cmpint(y->shape[d], ==, 1);
        int64_t n = em_tensor_numel(y);
        for (int64_t k = 0; k < n; k++) {
          double want = ref_reduce(x, d, kind, k), got = ot_elem(y, k);
          if (!(fabs(got - want) <= atol + rtol * fabs(want)))
            g_error("kind %d dim %d keep %d element %lld: %.9g vs %.9g", kind, dim, keep,
                    (long long)k, got, want);
          if (kind == 3) g_assert_cmpfloat(ot_elem(am, k), ==, want);
        }
      }
    }
}

static void test_forward(void) {
  int64_t shape[3] = {3, 4, 5};
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_DTYPE_F64 : EM_DTYPE_F32;
    em_tensor *x = gc_rand(dt, 3, shape, -2, 2, 71, false);
    em_scope *s = em_scope_begin();
    double tol = t ? 1e-14 : 1e-6;
    check_dims(x, tol, tol);               /* contiguous: fast kernels */
    check_dims(ot_strided_copy(x), tol, tol); /* strided: reference loop */
    em_tensor *sa = em_sum_all(x), *ma = em_mean_all(x);
    g_assert_cmpint(sa->ndim, ==, 0);
    double acc = 0;
    for (int k = 0; k < 60; k++) acc += ot_elem(x, k);
    g_assert_cmpfloat_with_epsilon(em_tensor_item(sa), acc, tol);
    g_assert_cmpfloat_with_epsilon(em_tensor_item(ma), acc / 60, tol);
    g_assert_cmpfloat_with_epsilon(em_tensor_item(em_sum_all(ot_strided_copy(x))), acc, tol);
    em_scope_end(s);
    em_tensor_free(x);
  }
}

/* Large inputs take the threaded kernels: same results as one thread and
 * close to double references; f32 sums stay accurate over 10^6 values. */
static void test_large(void) {
  int64_t shapes[3][3] = {{64, 1000, 3}, {3, 70000, 1}, {2, 3, 40000}};
  for (int c = 0; c < 3; c++) {
    em_tensor *x = gc_rand(EM_DTYPE_F32, 3, shapes[c], 0, 1, 72 + (unsigned)c, false);
    for (int d = 0; d < 3; d++) {
      em_scope *s = em_scope_begin();
      em_set_num_threads(1);
      em_tensor *s1 = em_sum(x, d, false), *m1 = em_max(x, d, false, NULL);
      em_tensor *a1 = em_sum_all(x);
      em_set_num_threads(2);
      em_tensor *s2 = em_sum(x, d, false), *m2 = em_max(x, d, false, NULL);
      em_tensor *a2 = em_sum_all(x);
      ot_assert_equal("sum threads", s1, s2);
      ot_assert_equal("max threads", m1, m2);
      ot_assert_equal("sum_all threads", a1, a2);
      int64_t n = em_tensor_numel(s1);
      for (int64_t k = 0; k < n; k += 97)
        g_assert_cmpfloat_with_epsilon(ot_elem(s2, k), ref_reduce(x, d, 0, k),
                                       1e-5 * (double)x->shape[d]);
      em_scope_end(s);
    }
    em_tensor_free(x);
  }
  em_set_num_threads(1);
  int64_t n = 1 << 20, shape[1] = {n};
  em_tensor *x = em_tensor_new(EM_DTYPE_F32, 1, shape, NULL);
  double acc = 0;
  for (int64_t k = 0; k < n; k++) {
    em_f32(x)[k] = 1.0f + (float)(k % 7) * 0.1f;
    acc += em_f32(x)[k];
  }
  em_scope *s = em_scope_begin();
  g_assert_cmpfloat(fabs(em_tensor_item(em_sum_all(x)) - acc), <=, 1e-6 * acc);
  g_assert_cmpfloat(fabs(em_tensor_item(em_mean_all(x)) - acc / (double)n), <=, 1e-6 * acc / (double)n);
  int64_t sh2[2] = {1, n};
  g_assert_cmpfloat(fabs(em_f32(em_sum(em_reshape(x, 2, sh2), 1, false))[0] - acc), <=, 1e-6 * acc);
  em_scope_end(s);
  em_tensor_free(x);
}

/* Ties go to the first maximum (value and gradient); NaN wins. */
static void test_max_rules(void) {
  int64_t shape[2] = {2, 4};
  double v[8] = {1, 3, 3, 2, NAN, 5, NAN, 7};
  for (int t = 0; t < 2; t++) {
    em_tensor *x = ot_new(t ? EM_DTYPE_F64 : EM_DTYPE_F32, 2, shape, v);
    em_tensor_set_requires_grad(x, true);
    em_scope *s = em_scope_begin();
    em_tensor *am;
    em_tensor *y = em_max(x, 1, false, &am);
    g_assert_cmpfloat(ot_elem(y, 0), ==, 3);
    g_assert_true(isnan(ot_elem(y, 1)));
    g_assert_cmpint(em_i64(am)[0], ==, 1);
    g_assert_cmpint(em_i64(am)[1], ==, 0);
    /* the strided reference agrees */
    em_tensor *yt = em_max(em_transpose(em_contiguous(em_transpose(x, 0, 1)), 0, 1), 1, false, &am);
    g_assert_cmpfloat(ot_elem(yt, 0), ==, 3);
    g_assert_true(isnan(ot_elem(yt, 1)));
    g_assert_cmpint(em_i64(am)[0], ==, 1);
    g_assert_cmpint(em_i64(am)[1], ==, 0);
    em_backward(em_sum_all(em_slice(y, 0, 0, 1, 1)));
    double want[8] = {0, 1, 0, 0, 0, 0, 0, 0};
    for (int k = 0; k < 8; k++) g_assert_cmpfloat(ot_elem(x->grad, k), ==, want[k]);
    /* along dim 0 (I > 1 kernel) */
    em_tensor *y0 = em_max(x, 0, true, &am);
    g_assert_true(isnan(ot_elem(y0, 0)) && isnan(ot_elem(y0, 2)));
    g_assert_cmpfloat(ot_elem(y0, 1), ==, 5);
    g_assert_cmpfloat(ot_elem(y0, 3), ==, 7);
    int64_t wa[4] = {1, 1, 1, 1};
    for (int k = 0; k < 4; k++) g_assert_cmpint(em_i64(am)[k], ==, wa[k]);
    em_scope_end(s);
    em_tensor_free(x);
  }
  /* argmax of an integer tensor */
  double iv[6] = {4, -1, 9, 9, 0, 2};
  int64_t is[2] = {3, 2};
  em_tensor *xi = ot_new(EM_DTYPE_I64, 2, is, iv);
  em_scope *s = em_scope_begin();
  em_tensor *a0 = em_argmax(xi, 0, false), *a1 = em_argmax(xi, -1, true);
  g_assert_cmpint(em_i64(a0)[0], ==, 1);
  g_assert_cmpint(em_i64(a0)[1], ==, 1);
  int64_t w1[3] = {0, 0, 1};
  g_assert_cmpint(a1->ndim, ==, 2);
  for (int k = 0; k < 3; k++) g_assert_cmpint(em_i64(a1)[k], ==, w1[k]);
  g_assert_false(em_tensor_requires_grad(a1));
  em_scope_end(s);
  em_tensor_free(xi);
}

typedef struct {
  int kind; /* 0 sum, 1 mean, 2 max, 3 sum_all, 4 mean_all */
  int dim;
  bool keep, view;
} red_ctx;

static em_tensor *f_red(em_tensor **in, void *ctx) {
  const red_ctx *c = ctx;
  em_tensor *x = c->view ? em_transpose(in[0], 0, 2) : in[0];
  switch (c->kind) {
  case 0: return em_sum(x, c->dim, c->keep);
  case 1: return em_mean(x, c->dim, c->keep);
  case 2: return em_max(x, c->dim, c->keep, NULL);
  case 3: return em_sum_all(x);
  default: return em_mean_all(x);
  }
}

static void test_backward(void) {
  int64_t shape[3] = {3, 4, 2};
  const char *names[5] = {"sum", "mean", "max", "sum_all", "mean_all"};
  for (int kind = 0; kind < 5; kind++)
    for (int view = 0; view < 2; view++)
      for (int dim = -3; dim < 3; dim++)
        for (int keep = 0; keep < 2; keep++) {
          if (kind >= 3 && (dim != 0 || keep)) continue;
          red_ctx c = {kind, dim, keep, view};
          char what[64];
          g_snprintf(what, sizeof what, "%s dim %d keep %d view %d", names[kind], dim, keep, view);
          /* distinct values so that max has no ties within eps */
          em_tensor *in[1] = {gc_rand(EM_DTYPE_F64, 3, shape, -1, 1, 80 + (unsigned)kind, true)};
          if (dim == 0 && !keep) ot_check_accumulates(what, f_red, 1, in, &c);
          ot_gradcheck(what, f_red, 1, in, &c, NULL);
        }
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/ops/reduce/forward", test_forward);
  g_test_add_func("/engine/ops/reduce/large", test_large);
  g_test_add_func("/engine/ops/max/rules", test_max_rules);
  g_test_add_func("/engine/ops/reduce/backward", test_backward);
  return g_test_run();
}
