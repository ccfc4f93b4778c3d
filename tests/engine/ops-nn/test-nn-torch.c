/* test-nn-torch.c: forward and backward of batch norm (train and eval),
 * layer norm, (log_)softmax, cross entropy (with label smoothing 0.1),
 * mse and embedding against PyTorch.
 *
 * The inputs are written to a temporary file, nn-torch-ref.py computes
 * PyTorch's answers in float64 with Debian's /usr/bin/python3, and each
 * op is run here in f64 (the reference kernels) and f32 (the fast
 * kernels) and compared. Without torch the tests skip. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "em-pool.h"
#include "nn-check.h"

#define MAX_ARRAYS 96

typedef struct {
  char name[48];
  em_tensor *t; /* persistent, f64 */
} named;

static named inputs[MAX_ARRAYS], outputs[MAX_ARRAYS];
static int n_inputs, n_outputs;
static int torch_state;    /* 0 not run, 1 answers read, -1 unavailable */
static char skip_why[256];

/* Tensors a test converted for its run; freed at its end. */
static em_tensor *owned[64];
static int n_owned;

static void add_input(const char *name, em_tensor *t) {
  g_assert(n_inputs < MAX_ARRAYS);
  g_strlcpy(inputs[n_inputs].name, name, sizeof inputs[0].name);
  inputs[n_inputs++].t = t;
}

static em_tensor *lookup(named *list, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(list[i].name, name)) return list[i].t;
  g_error("no array named %s", name);
}

/* Random f64 input `case.field`. */
static void rand_input(const char *name, int ndim, const int64_t *shape, double lo, double hi) {
  static unsigned seed = 1000;
  add_input(name, gc_rand(EM_DTYPE_F64, ndim, shape, lo, hi, seed++, false));
}

/* Integer-valued input in [0, hi), stored as f64 like the rest. */
static void index_input(const char *name, int ndim, const int64_t *shape, int64_t hi) {
  static unsigned seed = 2000;
  em_tensor *t = em_tensor_new(EM_DTYPE_F64, ndim, shape, NULL);
  em_rng r;
  em_rng_seed(&r, seed++);
  for (int64_t k = 0; k < em_tensor_numel(t); k++) em_f64(t)[k] = (double)em_rng_below(&r, (uint64_t)hi);
  add_input(name, t);
}

static void make_inputs(void) {
  int64_t x4[4] = {4, 3, 5, 5}, c3[1] = {3}, x2[2] = {8, 6}, c6[1] = {6};
  const char *bn[3] = {"bn4d_train", "bn2d_train", "bn4d_eval"};
  for (int k = 0; k < 3; k++) {
    char name[48];
    bool two_d = k == 1;
    const int64_t *xs = two_d ? x2 : x4, *cs = two_d ? c6 : c3;
    int nd = two_d ? 2 : 4;
#define FIELD(f) (g_snprintf(name, sizeof name, "%s.%s", bn[k], f), name)
    rand_input(FIELD("x"), nd, xs, -2, 3);
    rand_input(FIELD("w"), 1, cs, 0.5, 1.5);
    rand_input(FIELD("b"), 1, cs, -1, 1);
    rand_input(FIELD("rm"), 1, cs, -0.5, 0.5);
    rand_input(FIELD("rv"), 1, cs, 0.5, 2);
    rand_input(FIELD("gy"), nd, xs, -1, 1);
#undef FIELD
  }
  int64_t lx[3] = {4, 5, 6}, lw[2] = {5, 6};
  rand_input("ln.x", 3, lx, -2, 2);
  rand_input("ln.w", 2, lw, 0.5, 1.5);
  rand_input("ln.b", 2, lw, -1, 1);
  rand_input("ln.gy", 3, lx, -1, 1);
  int64_t sx[3] = {6, 5, 3}, s0[2] = {7, 4};
  rand_input("lsm1.x", 3, sx, -4, 4);
  rand_input("lsm1.gy", 3, sx, -1, 1);
  rand_input("lsm0.x", 2, s0, -4, 4);
  rand_input("lsm0.gy", 2, s0, -1, 1);
  rand_input("sm2.x", 3, sx, -4, 4);
  rand_input("sm2.gy", 3, sx, -1, 1);
  int64_t cx[2] = {16, 10}, cn[1] = {16};
  rand_input("ce.x", 2, cx, -4, 4);
  index_input("ce.t", 1, cn, 10);
  rand_input("ce0.x", 2, cx, -4, 4);
  index_input("ce0.t", 1, cn, 10);
  int64_t ms[2] = {5, 7};
  rand_input("mse.a", 2, ms, -2, 2);
  rand_input("mse.b", 2, ms, -2, 2);
  int64_t ew[2] = {11, 4}, ei[2] = {3, 5}, ey[3] = {3, 5, 4};
  rand_input("emb.w", 2, ew, -1, 1);
  index_input("emb.idx", 2, ei, 11);
  rand_input("emb.gy", 3, ey, -1, 1);
}

static bool write_arrays(const char *path) {
  FILE *f = fopen(path, "wb");
  if (!f) return false;
  for (int i = 0; i < n_inputs; i++) {
    const em_tensor *t = inputs[i].t;
    fprintf(f, "%s %d", inputs[i].name, t->ndim);
    for (int d = 0; d < t->ndim; d++) fprintf(f, " %lld", (long long)t->shape[d]);
    fprintf(f, "\n");
    fwrite(em_f64(t), sizeof(double), (size_t)em_tensor_numel(t), f);
  }
  return fclose(f) == 0;
}

static bool read_arrays(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    g_assert(n_outputs < MAX_ARRAYS);
    char **parts = g_strsplit(g_strstrip(line), " ", -1);
    int ndim = atoi(parts[1]);
    int64_t shape[EM_MAX_DIMS];
    for (int d = 0; d < ndim; d++) shape[d] = g_ascii_strtoll(parts[2 + d], NULL, 10);
    em_tensor *t = em_tensor_new(EM_DTYPE_F64, ndim, shape, NULL);
    size_t n = (size_t)em_tensor_numel(t);
    bool ok = fread(em_f64(t), sizeof(double), n, f) == n;
    g_strlcpy(outputs[n_outputs].name, parts[0], sizeof outputs[0].name);
    outputs[n_outputs++].t = t;
    g_strfreev(parts);
    if (!ok) {
      fclose(f);
      return false;
    }
  }
  fclose(f);
  return true;
}

/* Runs PyTorch once for every case; false (with skip_why) without it. */
static bool torch_ready(void) {
  if (torch_state) return torch_state > 0;
  torch_state = -1;
  if (!g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE)) {
    g_strlcpy(skip_why, "no /usr/bin/python3", sizeof skip_why);
    return false;
  }
  const char *root = g_getenv("EMBER_SOURCE_ROOT");
  g_autofree char *script = g_build_filename(root ? root : ".", "tests", "engine", "ops-nn",
                                             "nn-torch-ref.py", NULL);
  g_autoptr(GError) err = NULL;
  g_autofree char *dir = g_dir_make_tmp("ember-nn-torch-XXXXXX", &err);
  g_assert_no_error(err);
  g_autofree char *in = g_build_filename(dir, "in.bin", NULL);
  g_autofree char *out = g_build_filename(dir, "out.bin", NULL);
  make_inputs();
  g_assert_true(write_arrays(in));
  char *argv[] = {"/usr/bin/python3", script, in, out, NULL};
  g_autofree char *py_err = NULL;
  int status = 0;
  g_assert_true(g_spawn_sync(NULL, argv, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL,
                             &py_err, &status, &err));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    g_strlcpy(skip_why, "/usr/bin/python3 cannot import torch", sizeof skip_why);
  } else {
    if (!g_spawn_check_wait_status(status, &err)) g_error("%s: %s", script, py_err);
    g_assert_true(read_arrays(out));
    torch_state = 1;
  }
  g_unlink(in);
  g_unlink(out);
  g_rmdir(dir);
  return torch_state > 0;
}

/* A converted copy of input `name` for this run (freed by end_case). */
static em_tensor *arg(const char *name, em_dtype dt, bool grad) {
  g_assert(n_owned < (int)G_N_ELEMENTS(owned));
  em_tensor *t = nc_convert(lookup(inputs, n_inputs, name), dt);
  em_tensor_set_requires_grad(t, grad);
  return owned[n_owned++] = t;
}

static void end_case(void) {
  for (int i = 0; i < n_owned; i++) em_tensor_free(owned[i]);
  n_owned = 0;
}

/* got against PyTorch's `name`, within the dtype's tolerance. */
static void expect(const em_tensor *got, const char *name) {
  g_assert_nonnull(got);
  double tol = got->dtype == EM_DTYPE_F64 ? 1e-10 : 3e-5;
  double d = nc_rel_diff(got, lookup(outputs, n_outputs, name));
  if (!(d <= tol))
    g_error("%s (%s): differs from PyTorch by %g (tolerance %g)", name,
            em_dtype_name(got->dtype), d, tol);
}

#define SKIP_WITHOUT_TORCH()        \
  do {                              \
    if (!torch_ready()) {           \
      g_test_skip(skip_why);        \
      return;                       \
    }                               \
  } while (0)

static const em_dtype dtypes[2] = {EM_DTYPE_F64, EM_DTYPE_F32};

static void batch_norm_case(const char *c, bool training) {
  char n[64];
#define F(f) (g_snprintf(n, sizeof n, "%s.%s", c, f), n)
  for (int k = 0; k < 2; k++) {
    em_dtype dt = dtypes[k];
    em_tensor *x = arg(F("x"), dt, true), *w = arg(F("w"), dt, true), *b = arg(F("b"), dt, true);
    em_tensor *rm = arg(F("rm"), dt, false), *rv = arg(F("rv"), dt, false);
    em_scope *s = em_scope_begin();
    em_tensor *y = em_batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5);
    em_backward_grad(y, arg(F("gy"), dt, false));
    expect(y, F("y"));
    expect(x->grad, F("gx"));
    expect(w->grad, F("gw"));
    expect(b->grad, F("gb"));
    expect(rm, F("rm"));
    expect(rv, F("rv"));
    em_scope_end(s);
    end_case();
  }
#undef F
}

static void test_batch_norm(void) {
  SKIP_WITHOUT_TORCH();
  batch_norm_case("bn4d_train", true);
  batch_norm_case("bn2d_train", true);
  batch_norm_case("bn4d_eval", false);
}

static void test_layer_norm(void) {
  SKIP_WITHOUT_TORCH();
  for (int k = 0; k < 2; k++) {
    em_dtype dt = dtypes[k];
    em_tensor *x = arg("ln.x", dt, true), *w = arg("ln.w", dt, true), *b = arg("ln.b", dt, true);
    em_scope *s = em_scope_begin();
    em_tensor *y = em_layer_norm(x, 2, w, b, 1e-5);
    em_backward_grad(y, arg("ln.gy", dt, false));
    expect(y, "ln.y");
    expect(x->grad, "ln.gx");
    expect(w->grad, "ln.gw");
    expect(b->grad, "ln.gb");
    em_scope_end(s);
    end_case();
  }
}

static void test_softmax(void) {
  SKIP_WITHOUT_TORCH();
  struct {
    const char *c;
    int dim;
    bool log;
  } cases[] = {{"lsm1", 1, true}, {"lsm0", 0, true}, {"sm2", 2, false}};
  for (unsigned c = 0; c < G_N_ELEMENTS(cases); c++)
    for (int k = 0; k < 2; k++) {
      char n[64];
#define F(f) (g_snprintf(n, sizeof n, "%s.%s", cases[c].c, f), n)
      em_tensor *x = arg(F("x"), dtypes[k], true);
      em_scope *s = em_scope_begin();
      em_tensor *y = cases[c].log ? em_log_softmax(x, cases[c].dim) : em_softmax(x, cases[c].dim);
      em_backward_grad(y, arg(F("gy"), dtypes[k], false));
      expect(y, F("y"));
      expect(x->grad, F("gx"));
      em_scope_end(s);
      end_case();
#undef F
    }
}

static void test_cross_entropy(void) {
  SKIP_WITHOUT_TORCH();
  for (int c = 0; c < 2; c++)
    for (int k = 0; k < 2; k++) {
      const char *cs = c ? "ce0" : "ce";
      char n[64];
#define F(f) (g_snprintf(n, sizeof n, "%s.%s", cs, f), n)
      em_tensor *x = arg(F("x"), dtypes[k], true), *t = arg(F("t"), EM_DTYPE_I64, false);
      em_scope *s = em_scope_begin();
      em_tensor *loss = em_cross_entropy(x, t, c ? 0.0 : 0.1);
      em_backward(loss);
      expect(loss, F("loss"));
      expect(x->grad, F("gx"));
      em_scope_end(s);
      end_case();
#undef F
    }
}

static void test_mse(void) {
  SKIP_WITHOUT_TORCH();
  for (int k = 0; k < 2; k++) {
    em_tensor *a = arg("mse.a", dtypes[k], true), *b = arg("mse.b", dtypes[k], true);
    em_scope *s = em_scope_begin();
    em_tensor *loss = em_mse_loss(a, b);
    em_backward(loss);
    expect(loss, "mse.loss");
    expect(a->grad, "mse.ga");
    expect(b->grad, "mse.gb");
    em_scope_end(s);
    end_case();
  }
}

static void test_embedding(void) {
  SKIP_WITHOUT_TORCH();
  for (int k = 0; k < 2; k++) {
    em_tensor *w = arg("emb.w", dtypes[k], true), *idx = arg("emb.idx", EM_DTYPE_I64, false);
    em_scope *s = em_scope_begin();
    em_tensor *y = em_embedding(w, idx);
    em_backward_grad(y, arg("emb.gy", dtypes[k], false));
    expect(y, "emb.y");
    expect(w->grad, "emb.gw");
    em_scope_end(s);
    end_case();
  }
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  em_set_num_threads(2);
  g_test_add_func("/engine/torch/batch-norm", test_batch_norm);
  g_test_add_func("/engine/torch/layer-norm", test_layer_norm);
  g_test_add_func("/engine/torch/softmax", test_softmax);
  g_test_add_func("/engine/torch/cross-entropy", test_cross_entropy);
  g_test_add_func("/engine/torch/mse", test_mse);
  g_test_add_func("/engine/torch/embedding", test_embedding);
  int rc = g_test_run();
  for (int i = 0; i < n_inputs; i++) em_tensor_free(inputs[i].t);
  for (int i = 0; i < n_outputs; i++) em_tensor_free(outputs[i].t);
  em_pool_shutdown();
  return rc;
}
