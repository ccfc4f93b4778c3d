/* test-binary.c: em_add, em_sub, em_mul, em_div: broadcasting against a
 * loop reference, the vectorised paths against the strided path, and
 * finite-difference gradients (broadcast inputs, views, accumulation). */
#include "ops-test.h"
#include "em-pool.h"

typedef em_tensor *(*bin_op)(em_tensor *, em_tensor *);
static const bin_op ops[4] = {em_add, em_sub, em_mul, em_div};
static const char *const names[4] = {"add", "sub", "mul", "div"};

static double apply(int k, double a, double b) {
  switch (k) {
  case 0: return a + b;
  case 1: return a - b;
  case 2: return a * b;
  default: return a / b;
  }
}

/* Element of t at the broadcast index idx of an nd-dim result. */
static double bcast_get(const em_tensor *t, int nd, const int64_t *idx) {
  int64_t ti[EM_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) {
    int od = d + nd - t->ndim;
    ti[d] = t->shape[d] == 1 ? 0 : idx[od];
  }
  return em_tensor_get(t, ti);
}

static void check_forward(em_dtype dt, int na, const int64_t *sa, int nb, const int64_t *sb,
                          int nr, const int64_t *sr) {
  em_tensor *a = gc_rand(dt, na, sa, -2, 2, 11, false);
  em_tensor *b = gc_rand(dt, nb, sb, 0.5, 2, 12, false);
  for (int k = 0; k < 4; k++) {
    em_scope *s = em_scope_begin();
    em_tensor *y = ops[k](a, b);
    g_assert_true(ot_shape_is(y, nr, sr));
    g_assert_true(em_tensor_is_contiguous(y));
    int64_t n = em_tensor_numel(y);
    for (int64_t e = 0; e < n; e++) {
      int64_t idx[EM_MAX_DIMS], r = e;
      for (int d = nr - 1; d >= 0; d--) {
        idx[d] = r % sr[d];
        r /= sr[d];
      }
      double av = bcast_get(a, nr, idx), bv = bcast_get(b, nr, idx);
      double ref = dt == EM_DTYPE_F32 ? (double)(float)apply(k, (float)av, (float)bv)
                                      : apply(k, av, bv);
      if (ot_elem(y, e) != ref)
        g_error("%s element %lld: %.9g vs %.9g", names[k], (long long)e, ot_elem(y, e), ref);
    }
    em_scope_end(s);
  }
  em_tensor_free(a);
  em_tensor_free(b);
}

static void test_forward(void) {
  for (int t = 0; t < 2; t++) {
    em_dtype dt = t ? EM_DTYPE_F64 : EM_DTYPE_F32;
    int64_t s34[2] = {3, 4}, s4[1] = {4}, s214[3] = {2, 1, 4}, s31[2] = {3, 1}, s234[3] = {2, 3, 4};
    int64_t s13[2] = {1, 3}, s41[2] = {4, 1}, s43[2] = {4, 3};
    check_forward(dt, 2, s34, 2, s34, 2, s34);      /* same shape */
    check_forward(dt, 2, s34, 1, s4, 2, s34);       /* bias-like */
    check_forward(dt, 1, s4, 2, s34, 2, s34);       /* broadcast first operand */
    check_forward(dt, 3, s214, 2, s31, 3, s234);    /* both broadcast */
    check_forward(dt, 2, s34, 0, s4, 2, s34);       /* scalar tensor (shape [], s4 unused) */
    check_forward(dt, 2, s13, 2, s41, 2, s43);      /* outer product shape */
    int64_t nchw[4] = {2, 3, 5, 7}, c11[3] = {3, 1, 1};
    check_forward(dt, 4, nchw, 3, c11, 4, nchw);    /* channel broadcast */
  }
}

/* Transposed (strided) operands give exactly the values of contiguous
 * ones, small and large (threads). */
static void test_fast_vs_general(void) {
  em_set_num_threads(2);
  int64_t small[2] = {7, 9}, big[2] = {300, 301}, brow[1] = {9}, bigrow[1] = {301};
  for (int size = 0; size < 2; size++) {
    const int64_t *sh = size ? big : small, *rs = size ? bigrow : brow;
    em_tensor *a = gc_rand(EM_DTYPE_F32, 2, sh, -2, 2, 21, false);
    em_tensor *b = gc_rand(EM_DTYPE_F32, 2, sh, 0.5, 2, 22, false);
    em_tensor *r = gc_rand(EM_DTYPE_F32, 1, rs, 0.5, 2, 23, false);
    em_scope *s = em_scope_begin();
    em_tensor *av = ot_strided_copy(a), *bv = ot_strided_copy(b);
    for (int k = 0; k < 4; k++) {
      ot_assert_equal(names[k], ops[k](av, bv), ops[k](a, b));
      ot_assert_equal(names[k], ops[k](av, b), ops[k](a, b));
      ot_assert_equal(names[k], ops[k](av, r), ops[k](a, r));
      ot_assert_equal(names[k], ops[k](r, bv), ops[k](r, b));
    }
    em_scope_end(s);
    em_tensor_free(a);
    em_tensor_free(b);
    em_tensor_free(r);
  }
  em_set_num_threads(1);
}

typedef struct {
  int op;
  bool view_a; /* feed a through a transpose */
} bin_ctx;

static em_tensor *f_bin(em_tensor **in, void *ctx) {
  const bin_ctx *c = ctx;
  em_tensor *a = c->view_a ? em_transpose(in[0], 0, 1) : in[0];
  return ops[c->op](a, in[1]);
}

static void gradcheck_case(int op, int na, const int64_t *sa, int nb, const int64_t *sb,
                           bool view_a, bool only_b) {
  bin_ctx c = {op, view_a};
  em_tensor *in[2] = {gc_rand(EM_DTYPE_F64, na, sa, -2, 2, 31, !only_b),
                      gc_rand(EM_DTYPE_F64, nb, sb, 0.5, 2, 32, true)};
  char what[64];
  g_snprintf(what, sizeof what, "%s %dd-%dd%s", names[op], na, nb, view_a ? " view" : "");
  ot_check_accumulates(what, f_bin, 2, in, &c);
  ot_gradcheck(what, f_bin, 2, in, &c, NULL);
}

static void test_backward(gconstpointer data) {
  int op = GPOINTER_TO_INT(data);
  int64_t s34[2] = {3, 4}, s43[2] = {4, 3}, s4[1] = {4}, s214[3] = {2, 1, 4}, s31[2] = {3, 1};
  int64_t s1[1] = {1}, nchw[4] = {2, 3, 2, 3}, c11[3] = {3, 1, 1};
  gradcheck_case(op, 2, s34, 2, s34, false, false);
  gradcheck_case(op, 2, s34, 1, s4, false, false);
  gradcheck_case(op, 1, s4, 2, s34, false, false);
  gradcheck_case(op, 3, s214, 2, s31, false, false);
  gradcheck_case(op, 2, s34, 0, s4, false, false); /* shape [] */
  gradcheck_case(op, 2, s34, 1, s1, false, true);
  gradcheck_case(op, 2, s43, 2, s34, true, false);  /* a^T (3, 4) op b (3, 4) */
  gradcheck_case(op, 4, nchw, 3, c11, false, false);
}

/* The same tensor on both sides: both terms land in one gradient. */
static em_tensor *f_self(em_tensor **in, void *ctx) {
  return ops[GPOINTER_TO_INT(ctx)](in[0], in[0]);
}

static void test_same_input(void) {
  int64_t s[2] = {3, 5};
  for (int k = 0; k < 4; k++) {
    em_tensor *in[1] = {gc_rand(EM_DTYPE_F64, 2, s, 0.5, 2, 41, true)};
    ot_gradcheck(names[k], f_self, 1, in, GINT_TO_POINTER(k), NULL);
  }
}

/* Only inputs that require grad receive one; no tape without grad. */
static void test_no_grad(void) {
  int64_t s[2] = {2, 3};
  em_tensor *a = gc_rand(EM_DTYPE_F32, 2, s, -1, 1, 1, true);
  em_tensor *b = gc_rand(EM_DTYPE_F32, 2, s, -1, 1, 2, false);
  em_scope *sc = em_scope_begin();
  bool prev = em_no_grad_begin();
  g_assert_false(em_tensor_requires_grad(em_mul(a, b)));
  em_grad_mode_restore(prev);
  em_tensor *y = em_mul(a, b);
  g_assert_true(em_tensor_requires_grad(y));
  em_backward(em_sum_all(y));
  g_assert_nonnull(a->grad);
  g_assert_null(b->grad);
  for (int k = 0; k < 6; k++) g_assert_cmpfloat(em_f32(a->grad)[k], ==, em_f32(b)[k]);
  em_scope_end(sc);
  em_tensor_free(a);
  em_tensor_free(b);
}

/* Zero-size tensors pass through every kind of op. */
static void test_empty(void) {
  int64_t s03[2] = {0, 3}, s3[1] = {3};
  em_tensor *a = em_tensor_new(EM_DTYPE_F32, 2, s03, NULL);
  em_tensor *b = gc_rand(EM_DTYPE_F32, 1, s3, -1, 1, 1, true);
  em_tensor_set_requires_grad(a, true);
  em_scope *s = em_scope_begin();
  em_tensor *y = em_relu(em_mul(a, b));
  g_assert_true(ot_shape_is(y, 2, s03));
  em_tensor *r = em_sum(y, 0, false);
  g_assert_true(ot_shape_is(r, 1, s3));
  for (int k = 0; k < 3; k++) g_assert_cmpfloat(em_f32(r)[k], ==, 0);
  em_backward(em_sum_all(r));
  for (int k = 0; k < 3; k++) g_assert_cmpfloat(em_f32(b->grad)[k], ==, 0);
  g_assert_cmpint(em_tensor_numel(em_contiguous(em_transpose(y, 0, 1))), ==, 0);
  g_assert_true(isnan(em_tensor_item(em_mean_all(y))));
  em_scope_end(s);
  em_tensor_free(a);
  em_tensor_free(b);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/ops/binary/forward", test_forward);
  g_test_add_func("/engine/ops/binary/fast-vs-general", test_fast_vs_general);
  for (int k = 0; k < 4; k++) {
    char path[64];
    g_snprintf(path, sizeof path, "/engine/ops/%s/backward", names[k]);
    g_test_add_data_func(path, GINT_TO_POINTER(k), test_backward);
  }
  g_test_add_func("/engine/ops/binary/same-input", test_same_input);
  g_test_add_func("/engine/ops/binary/no-grad", test_no_grad);
  g_test_add_func("/engine/ops/binary/empty", test_empty);
  return g_test_run();
}
