/* test-torch.c: the basic ops against PyTorch (Debian's python3-torch at
 * /usr/bin/python3): gelu, silu, sigmoid, tanh, exp, log, sqrt, pow,
 * relu, clamp, sum/mean/max over dims, sum_all/mean_all, broadcasting
 * add/sub/mul/div, masked_fill with a broadcast mask, and several
 * gradients. The test writes its inputs to a
 * temporary folder, runs torch-ref.py there and reads the results back.
 * Skips when torch cannot be imported. */
#include <glib/gstdio.h>
#include <sys/wait.h>

#include "ops-test.h"

static char *dir;

static void write_raw(const char *name, const em_tensor *t) {
  g_autofree char *path = g_strdup_printf("%s/%s.bin", dir, name);
  g_autoptr(GError) err = NULL;
  g_assert_true(g_file_set_contents(path, em_tensor_ptr(t), (gssize)em_tensor_nbytes(t), &err));
}

/* PyTorch's result `name` as a scoped tensor of t's shape and dtype dt. */
static em_tensor *read_raw(const char *name, em_dtype dt, const em_tensor *like) {
  g_autofree char *path =
      g_strdup_printf("%s/%s.%s", dir, name, dt == EM_DTYPE_I64 ? "i64" : "bin");
  g_autofree char *data = NULL;
  gsize len = 0;
  g_autoptr(GError) err = NULL;
  if (!g_file_get_contents(path, &data, &len, &err)) g_error("%s", err->message);
  em_tensor *t = em_empty(dt, like->ndim, like->shape);
  g_assert_cmpuint(len, ==, em_tensor_nbytes(t));
  memcpy(t->data, data, len);
  return t;
}

static void check(const char *name, const em_tensor *ours, double atol, double rtol) {
  em_tensor *ref = read_raw(name, ours->dtype, ours);
  ot_assert_close(name, ours, ref, atol, rtol);
}

static em_tensor *grad_of(em_tensor *x, em_tensor *(*fn)(em_tensor *), const em_tensor *g) {
  em_tensor_zero_grad(x);
  em_backward_grad(fn(x), g);
  return x->grad;
}

static em_tensor *pow17(em_tensor *x) { return em_pow_scalar(x, 1.7); }

static em_tensor *mask; /* u8 (5, 6), broadcast over x (4, 5, 6) */
static em_tensor *masked(em_tensor *x) { return em_masked_fill(x, mask, -1.25); }

static void test_torch(void) {
  const char *py = "/usr/bin/python3";
  const char *root = g_getenv("EMBER_SOURCE_ROOT");
  if (!g_file_test(py, G_FILE_TEST_IS_EXECUTABLE) || !root) {
    g_test_skip("no /usr/bin/python3 or EMBER_SOURCE_ROOT");
    return;
  }
  g_autoptr(GError) err = NULL;
  dir = g_dir_make_tmp("ember-ops-basic-XXXXXX", &err);
  g_assert_nonnull(dir);

  int64_t xs[3] = {4, 5, 6}, bs[2] = {5, 1};
  em_tensor *x = gc_rand(EM_DTYPE_F32, 3, xs, -6, 6, 91, true);
  em_tensor *p = gc_rand(EM_DTYPE_F32, 3, xs, 0.05, 6, 92, true);
  em_tensor *b = gc_rand(EM_DTYPE_F32, 2, bs, 0.5, 2, 93, true);
  em_tensor *g = gc_rand(EM_DTYPE_F32, 3, xs, -1, 1, 94, false);
  write_raw("x", x);
  write_raw("p", p);
  write_raw("b", b);
  write_raw("g", g);
  int64_t ms[2] = {5, 6};
  mask = em_tensor_new(EM_DTYPE_U8, 2, ms, NULL);
  for (int k = 0; k < 30; k++) ((uint8_t *)em_tensor_ptr(mask))[k] = (k * 7) % 3 == 0;
  write_raw("mask", mask);

  g_autofree char *script = g_build_filename(root, "tests/engine/ops-basic/torch-ref.py", NULL);
  const char *argv[] = {py, script, dir, NULL};
  int status = 0;
  g_autofree char *out = NULL, *errout = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, &errout,
                             &status, &err));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
  } else {
    if (!g_spawn_check_wait_status(status, &err)) g_error("torch-ref.py: %s\n%s", err->message, errout);

    em_scope *s = em_scope_begin();
    const double at = 2e-6, rt = 2e-6; /* f32 vs f32: a few ulp */
    check("gelu", em_gelu(x), at, rt);
    check("gelu_tanh", em_gelu_tanh(x), at, rt);
    check("silu", em_silu(x), at, rt);
    check("sigmoid", em_sigmoid(x), at, rt);
    check("tanh", em_tanh(x), at, rt);
    check("exp", em_exp(x), 0, 1e-6);
    check("log", em_log(p), at, rt);
    check("sqrt", em_sqrt(p), 0, 1e-7);
    check("pow2", em_pow_scalar(x, 2), 0, 1e-7);
    check("pow1.7", em_pow_scalar(p, 1.7), 0, 1e-6);
    check("pow-0.5", em_pow_scalar(p, -0.5), 0, 1e-6);
    check("relu", em_relu(x), 0, 0);
    check("clamp", em_clamp(x, -1.5, 2.5), 0, 0);
    check("sum1", em_sum(x, 1, false), 1e-5, 1e-6);
    check("mean-1", em_mean(x, -1, true), 1e-6, 1e-6);
    check("sum0", em_sum(x, 0, false), 1e-5, 1e-6);
    em_tensor *am;
    check("max0", em_max(x, 0, false, &am), 0, 0);
    check("argmax0", am, 0, 0);
    check("max2", em_max(x, 2, false, &am), 0, 0);
    check("argmax2", am, 0, 0);
    check("argmax2", em_argmax(x, -1, false), 0, 0);
    check("sum_all", em_sum_all(x), 1e-5, 1e-6);
    check("mean_all", em_mean_all(x), 1e-6, 1e-6);
    check("add", em_add(x, b), 0, 0);
    check("mul", em_mul(x, b), 0, 0);
    check("div", em_div(x, b), 0, 1e-7);
    check("sub", em_sub(b, x), 0, 0);

    check("grad-gelu", grad_of(x, em_gelu, g), at, rt);
    check("grad-gelu_tanh", grad_of(x, em_gelu_tanh, g), at, rt);
    check("grad-silu", grad_of(x, em_silu, g), at, rt);
    check("grad-sigmoid", grad_of(x, em_sigmoid, g), at, rt);
    check("grad-tanh", grad_of(x, em_tanh, g), at, rt);
    check("grad-log", grad_of(p, em_log, g), 0, 1e-6);
    check("grad-pow1.7", grad_of(p, pow17, g), 1e-6, 1e-6);
    check("masked_fill", masked(x), 0, 0); /* a select: exact */
    check("grad-masked_fill", grad_of(x, masked, g), 0, 0);

    em_tensor_zero_grad(x);
    em_tensor_zero_grad(b);
    em_backward_grad(em_div(x, b), g);
    check("grad-div-x", x->grad, 0, 1e-6);
    check("grad-div-b", b->grad, 1e-5, 1e-5);
    em_tensor_zero_grad(b);
    em_backward_grad(em_mul(x, b), g);
    check("grad-mul-b", b->grad, 1e-5, 1e-5);

    em_tensor_zero_grad(x);
    em_tensor *g1 = em_contiguous(em_slice(g, 1, 0, 1, 1)); /* (4, 1, 6) */
    int64_t gs[2] = {4, 6};
    em_backward_grad(em_max(x, 1, false, NULL), em_reshape(g1, 2, gs));
    check("grad-max1", x->grad, 0, 0);
    em_scope_end(s);
  }

  g_autoptr(GDir) gd = g_dir_open(dir, 0, NULL);
  for (const char *f; gd && (f = g_dir_read_name(gd));) {
    g_autofree char *path = g_build_filename(dir, f, NULL);
    g_unlink(path);
  }
  g_rmdir(dir);
  g_free(dir);
  em_tensor_free(x);
  em_tensor_free(p);
  em_tensor_free(b);
  em_tensor_free(g);
  em_tensor_free(mask);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/ops/torch-reference", test_torch);
  return g_test_run();
}
