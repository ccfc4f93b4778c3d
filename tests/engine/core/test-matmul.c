/* test-matmul.c: em_linear, em_linear_relu and em_matmul against a loop
 * reference, each other and finite differences. */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "em-pool.h"
#include "gradcheck.h"

static em_tensor *f_linear(em_tensor **in, void *ctx) { return em_linear(in[0], in[1], in[2]); }
static em_tensor *f_linear_relu(em_tensor **in, void *ctx) {
  return em_linear_relu(in[0], in[1], in[2]);
}
/* x (1, D) broadcast to (4, D): a view BLAS cannot take as it is */
static em_tensor *f_linear_expanded(em_tensor **in, void *ctx) {
  int64_t shape[2] = {4, in[0]->shape[1]};
  return em_linear(em_expand(in[0], 2, shape), in[1], in[2]);
}
static em_tensor *f_matmul(em_tensor **in, void *ctx) { return em_matmul(in[0], in[1]); }

static void test_linear_forward(void) {
  int64_t xs[2] = {5, 7}, ws[2] = {3, 7}, bs[1] = {3};
  em_tensor *x = gc_rand(EM_DTYPE_F32, 2, xs, -1, 1, 1, false);
  em_tensor *w = gc_rand(EM_DTYPE_F32, 2, ws, -1, 1, 2, false);
  em_tensor *b = gc_rand(EM_DTYPE_F32, 1, bs, -1, 1, 3, false);
  em_scope *s = em_scope_begin();
  em_tensor *y = em_linear(x, w, b);
  for (int i = 0; i < 5; i++)
    for (int k = 0; k < 3; k++) {
      double ref = em_f32(b)[k];
      for (int d = 0; d < 7; d++) ref += (double)em_f32(x)[i * 7 + d] * em_f32(w)[k * 7 + d];
      g_assert_cmpfloat_with_epsilon(em_f32(y)[i * 3 + k], ref, 1e-5);
    }
  em_scope_end(s);
  em_tensor_free(x);
  em_tensor_free(w);
  em_tensor_free(b);
}

/* gradcheck of f over x (rows, 6), w (5, 6), b (5), all f64 from seed. */
static void check_linear_grads(const char *what, gc_fn f, int64_t rows, unsigned seed) {
  int64_t xs[2] = {rows, 6}, ws[2] = {5, 6}, bs[1] = {5};
  em_tensor *in[3] = {gc_rand(EM_DTYPE_F64, 2, xs, -1, 1, seed, true),
                      gc_rand(EM_DTYPE_F64, 2, ws, -1, 1, seed + 1, true),
                      gc_rand(EM_DTYPE_F64, 1, bs, -1, 1, seed + 2, true)};
  g_assert_true(gradcheck(what, f, 3, in, NULL, NULL));
  for (int i = 0; i < 3; i++) em_tensor_free(in[i]);
}

static void test_linear_backward(void) { check_linear_grads("linear", f_linear, 4, 1); }
static void test_linear_relu_backward(void) {
  check_linear_grads("linear_relu", f_linear_relu, 4, 1);
}
/* The gradient reaches an input that went to BLAS as a copy (it went to
 * the copy, and stopped there, before). */
static void test_linear_copied_input(void) {
  check_linear_grads("linear-expanded-input", f_linear_expanded, 1, 4);
}

static void assert_same_bits(const em_tensor *a, const em_tensor *b) {
  g_assert_nonnull(a);
  g_assert_nonnull(b);
  g_assert_cmpint(em_tensor_numel(a), ==, em_tensor_numel(b));
  g_assert_true(memcmp(em_tensor_ptr((em_tensor *)a), em_tensor_ptr((em_tensor *)b),
                       em_dtype_size(a->dtype) * (size_t)em_tensor_numel(a)) == 0);
}

/* em_linear_relu gives em_relu(em_linear(.)) bit for bit: the output and
 * each input's gradient, fresh and then accumulated by a second backward;
 * a NaN in x passes both alike. */
static void check_fused_same(em_dtype dt, int64_t N, int64_t D, int64_t K, int threads) {
  em_set_num_threads(threads);
  int64_t xs[2] = {N, D}, ws[2] = {K, D}, bs[1] = {K}, ys[2] = {N, K};
  em_tensor *in[2][3];
  for (int v = 0; v < 2; v++) {
    in[v][0] = gc_rand(dt, 2, xs, -1, 1, 11, true);
    in[v][1] = gc_rand(dt, 2, ws, -0.2, 0.2, 12, true);
    in[v][2] = gc_rand(dt, 1, bs, -0.2, 0.2, 13, true);
    if (dt == EM_DTYPE_F32) em_f32(in[v][0])[D + 2] = NAN;
    else em_f64(in[v][0])[D + 2] = NAN;
  }
  em_tensor *r = gc_rand(dt, 2, ys, -1, 1, 14, false);
  for (int rep = 0; rep < 2; rep++) {
    em_scope *s = em_scope_begin();
    em_tensor *y0 = em_relu(em_linear(in[0][0], in[0][1], in[0][2]));
    em_scope *s1 = em_scope_begin(); /* a tape of its own */
    em_tensor *y1 = em_linear_relu(in[1][0], in[1][1], in[1][2]);
    assert_same_bits(y0, y1);
    em_backward_grad(y1, r);
    em_scope_end(s1);
    em_backward_grad(y0, r);
    em_scope_end(s);
    for (int i = 0; i < 3; i++) assert_same_bits(in[0][i]->grad, in[1][i]->grad);
  }
  em_tensor_free(r);
  for (int v = 0; v < 2; v++)
    for (int i = 0; i < 3; i++) em_tensor_free(in[v][i]);
  em_set_num_threads(1);
}

static void test_linear_relu_same(void) {
  /* fast kernels, 4 reduction blocks; the mask split over 2 threads */
  check_fused_same(EM_DTYPE_F32, 64, 784, 200, 2);
  check_fused_same(EM_DTYPE_F32, 64, 784, 200, 1);
  check_fused_same(EM_DTYPE_F32, 5, 7, 3, 1);
  check_fused_same(EM_DTYPE_F64, 9, 20, 6, 2); /* OpenBLAS, then the ReLU pass */
}

/* A batch of no rows after a zero_grad: the bias's fresh gradient is 0
 * (it kept the last step's sums), fused or not. */
static void test_linear_empty_batch(void) {
  for (int fused = 0; fused < 2; fused++) {
    int64_t ws[2] = {2, 3}, bs[1] = {2};
    em_tensor *w = gc_rand(EM_DTYPE_F32, 2, ws, 0.1, 1, 21, true); /* y > 0: no mask */
    em_tensor *b = gc_rand(EM_DTYPE_F32, 1, bs, 0.1, 1, 22, true);
    for (int64_t rows = 1; rows >= 0; rows--) {
      int64_t xs[2] = {rows, 3}, ys[2] = {rows, 2};
      em_tensor *x = gc_rand(EM_DTYPE_F32, 2, xs, 0.5, 1, 23, false);
      em_tensor *g = em_tensor_new(EM_DTYPE_F32, 2, ys, NULL);
      for (int64_t k = 0; k < rows * 2; k++) em_f32(g)[k] = 5.f;
      em_scope *s = em_scope_begin();
      em_tensor *y = fused ? em_linear_relu(x, w, b) : em_linear(x, w, b);
      em_backward_grad(y, g);
      em_scope_end(s);
      for (int k = 0; k < 2; k++) g_assert_cmpfloat(em_f32(b->grad)[k], ==, (rows ? 5.f : 0.f));
      b->flags |= EM_TENSOR_GRAD_STALE; /* zero_grad */
      w->flags |= EM_TENSOR_GRAD_STALE;
      em_tensor_free(x);
      em_tensor_free(g);
    }
    em_tensor_free(w);
    em_tensor_free(b);
  }
}

static void test_matmul_2d_transposed(void) {
  int64_t as[2] = {6, 4}, bs[2] = {5, 6};
  em_tensor *a = gc_rand(EM_DTYPE_F64, 2, as, -1, 1, 4, true);
  em_tensor *b = gc_rand(EM_DTYPE_F64, 2, bs, -1, 1, 5, true);
  em_scope *s = em_scope_begin();
  /* a^T (4, 6) @ b^T (6, 5) through transposed views */
  int64_t at_shape[2] = {4, 6}, at_stride[2] = {1, 4};
  int64_t bt_shape[2] = {6, 5}, bt_stride[2] = {1, 6};
  em_tensor *at = em_view_raw(a, 2, at_shape, at_stride, 0);
  em_tensor *bt = em_view_raw(b, 2, bt_shape, bt_stride, 0);
  em_tensor *y = em_matmul(at, bt);
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 5; k++) {
      double ref = 0;
      for (int d = 0; d < 6; d++) ref += em_f64(a)[d * 4 + i] * em_f64(b)[k * 6 + d];
      g_assert_cmpfloat_with_epsilon(em_f64(y)[i * 5 + k], ref, 1e-12);
    }
  em_scope_end(s);
  em_tensor_free(a);
  em_tensor_free(b);
}

static void test_matmul_batched_backward(void) {
  int64_t as[3] = {3, 4, 5}, bs[2] = {5, 2};
  em_tensor *in[2] = {gc_rand(EM_DTYPE_F64, 3, as, -1, 1, 6, true),
                      gc_rand(EM_DTYPE_F64, 2, bs, -1, 1, 7, true)};
  g_assert_true(gradcheck("matmul-batched-broadcast", f_matmul, 2, in, NULL, NULL));
  em_tensor_free(in[0]);
  em_tensor_free(in[1]);
  int64_t a2[2] = {3, 4}, b2[2] = {4, 6};
  em_tensor *in2[2] = {gc_rand(EM_DTYPE_F64, 2, a2, -1, 1, 8, true),
                       gc_rand(EM_DTYPE_F64, 2, b2, -1, 1, 9, true)};
  g_assert_true(gradcheck("matmul-2d", f_matmul, 2, in2, NULL, NULL));
  em_tensor_free(in2[0]);
  em_tensor_free(in2[1]);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/linear/forward", test_linear_forward);
  g_test_add_func("/engine/linear/backward", test_linear_backward);
  g_test_add_func("/engine/linear/copied-input", test_linear_copied_input);
  g_test_add_func("/engine/linear/empty-batch", test_linear_empty_batch);
  g_test_add_func("/engine/linear-relu/backward", test_linear_relu_backward);
  g_test_add_func("/engine/linear-relu/same-as-two-ops", test_linear_relu_same);
  g_test_add_func("/engine/matmul/transposed-views", test_matmul_2d_transposed);
  g_test_add_func("/engine/matmul/backward", test_matmul_batched_backward);
  return g_test_run();
}
