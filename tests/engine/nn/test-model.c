/* test-model.c: instantiating specs: parameter names, shapes and order
 * (PyTorch's state dict), init distributions against PyTorch's bounds,
 * seeded reproducibility, Linear-only forward against a loop reference,
 * forward input validation and zero_grad. Runs only em_linear, so it
 * needs no other op. */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "em-nn.h"
#include "gradcheck.h"

static em_spec *parse_ok(const char *text) {
  char *json = g_strdup(text);
  g_strdelimit(json, "'", '"');
  em_error err = {0};
  em_spec *s = em_spec_parse(json, "test.json", &err);
  if (!s) g_error("spec did not parse: %s", err.msg);
  g_free(json);
  return s;
}

static em_model *model_ok(const em_spec *s, uint64_t seed, const em_model_options *o) {
  em_error err = {0};
  em_model *m = em_model_new_with(s, seed, o, &err);
  if (!m) g_error("model: %s", err.msg);
  return m;
}

static const char *bn_spec =
    "{'name': 'bn', 'input': {'shape': [3, 8, 8]}, 'nodes': ["
    " {'name': 'conv1', 'type': 'Conv2d', 'out_channels': 4, 'kernel_size': 3},"
    " {'name': 'bn1', 'type': 'BatchNorm2d'},"
    " {'name': 'relu', 'type': 'ReLU'},"
    " {'name': 'flat', 'type': 'Flatten'},"
    " {'name': 'ln', 'type': 'LayerNorm'},"
    " {'name': 'fc', 'type': 'Linear', 'out_features': 5, 'bias': false}]}";

static void test_names(void) {
  em_spec *s = parse_ok(bn_spec);
  em_model *m = model_ok(s, 1, NULL);
  em_spec_free(s); /* the model keeps its own copy */
  const struct {
    const char *name;
    const char *shape;
    bool buffer;
    em_dtype dt;
  } want[] = {
      {"conv1.weight", "[4, 3, 3, 3]", false, EM_DTYPE_F32},
      {"conv1.bias", "[4]", false, EM_DTYPE_F32},
      {"bn1.weight", "[4]", false, EM_DTYPE_F32},
      {"bn1.bias", "[4]", false, EM_DTYPE_F32},
      {"bn1.running_mean", "[4]", true, EM_DTYPE_F32},
      {"bn1.running_var", "[4]", true, EM_DTYPE_F32},
      {"bn1.num_batches_tracked", "[]", true, EM_DTYPE_I64},
      {"ln.weight", "[144]", false, EM_DTYPE_F32},
      {"ln.bias", "[144]", false, EM_DTYPE_F32},
      {"fc.weight", "[5, 144]", false, EM_DTYPE_F32},
  };
  g_assert_cmpint(em_model_tensor_count(m), ==, G_N_ELEMENTS(want));
  g_assert_cmpint(em_model_param_count(m), ==, 7);
  int p = 0;
  for (int i = 0; i < (int)G_N_ELEMENTS(want); i++) {
    const char *name;
    em_tensor *t = em_model_tensor(m, i, &name);
    char buf[64];
    g_assert_cmpstr(name, ==, want[i].name);
    g_assert_cmpstr(t->name, ==, want[i].name);
    g_assert_cmpstr(em_shape_str(t->ndim, t->shape, buf, sizeof buf), ==, want[i].shape);
    g_assert_cmpint(t->dtype, ==, want[i].dt);
    g_assert_cmpint(em_model_tensor_is_buffer(m, i), ==, want[i].buffer);
    g_assert_cmpint(em_tensor_requires_grad(t), ==, !want[i].buffer);
    g_assert_cmpint(em_model_tensor_find(m, want[i].name), ==, i);
    if (!want[i].buffer) {
      const char *pn;
      g_assert_true(em_model_param(m, p++, &pn) == t);
      g_assert_cmpstr(pn, ==, want[i].name);
    }
  }
  g_assert_cmpint(em_model_tensor_find(m, "nope"), ==, -1);
  /* constant inits */
  for (int c = 0; c < 4; c++) {
    g_assert_cmpfloat(em_f32(em_model_tensor(m, 2, NULL))[c], ==, 1.0f);
    g_assert_cmpfloat(em_f32(em_model_tensor(m, 3, NULL))[c], ==, 0.0f);
    g_assert_cmpfloat(em_f32(em_model_tensor(m, 4, NULL))[c], ==, 0.0f);
    g_assert_cmpfloat(em_f32(em_model_tensor(m, 5, NULL))[c], ==, 1.0f);
  }
  g_assert_cmpint(em_i64(em_model_tensor(m, 6, NULL))[0], ==, 0);
  g_assert_cmpfloat(em_f32(em_model_tensor(m, 7, NULL))[100], ==, 1.0f);
  g_assert_cmpfloat(em_f32(em_model_tensor(m, 8, NULL))[100], ==, 0.0f);
  g_assert_cmpint(em_model_dtype(m), ==, EM_DTYPE_F32);
  g_assert_cmpint(em_spec_param_count(em_model_spec(m)), ==, 112 + 8 + 288 + 720);
  em_model_free(m);
}

typedef struct {
  double mean, std, min, max;
} stats;

static stats stats_of(const em_tensor *t) {
  int64_t n = em_tensor_numel(t);
  double s = 0, s2 = 0, lo = INFINITY, hi = -INFINITY;
  for (int64_t k = 0; k < n; k++) {
    double v = t->dtype == EM_DTYPE_F32 ? em_f32(t)[k] : em_f64(t)[k];
    s += v;
    s2 += v * v;
    lo = fmin(lo, v);
    hi = fmax(hi, v);
  }
  double mean = s / (double)n;
  return (stats){mean, sqrt(s2 / (double)n - mean * mean), lo, hi};
}

/* A uniform U(-b, b) sample of n values: mean ~ 0, std ~ b/sqrt(3),
 * everything inside, the extremes close to the bound. */
static void assert_uniform(const em_tensor *t, double b) {
  stats st = stats_of(t);
  double n = (double)em_tensor_numel(t), sd = b / sqrt(3.0);
  g_assert_cmpfloat(fabs(st.mean), <, 5 * sd / sqrt(n));
  g_assert_cmpfloat(fabs(st.std - sd), <, 0.01 * sd);
  g_assert_cmpfloat(st.min, >=, -b);
  g_assert_cmpfloat(st.max, <=, b);
  g_assert_cmpfloat(st.max, >, 0.99 * b);
  g_assert_cmpfloat(st.min, <, -0.99 * b);
}

static void assert_normal(const em_tensor *t, double sd) {
  stats st = stats_of(t);
  double n = (double)em_tensor_numel(t);
  g_assert_cmpfloat(fabs(st.mean), <, 5 * sd / sqrt(n));
  g_assert_cmpfloat(fabs(st.std - sd), <, 0.01 * sd);
  g_assert_cmpfloat(st.max, >, 3 * sd); /* tails, not a clipped uniform */
}

static const char *init_spec =
    "{'name': 'init', 'input': {'shape': [16, 6, 6]}, 'nodes': ["
    " {'name': 'conv', 'type': 'Conv2d', 'out_channels': 256, 'kernel_size': 3, 'groups': 2},"
    " {'name': 'flat', 'type': 'Flatten'},"
    " {'name': 'fc', 'type': 'Linear', 'out_features': 512, 'in_features': 4096}]}";

static void test_init_default(void) {
  em_spec *s = parse_ok(init_spec);
  em_model *m = model_ok(s, 42, NULL);
  /* PyTorch: kaiming_uniform(a=sqrt(5)) -> U(+-1/sqrt(fan_in)), bias the same */
  double conv_b = 1.0 / sqrt(8 * 9), fc_b = 1.0 / sqrt(4096);
  assert_uniform(em_model_tensor(m, 0, NULL), conv_b);
  assert_uniform(em_model_tensor(m, 2, NULL), fc_b);
  stats cb = stats_of(em_model_tensor(m, 1, NULL)), fb = stats_of(em_model_tensor(m, 3, NULL));
  g_assert_cmpfloat(cb.max, <=, conv_b);
  g_assert_cmpfloat(cb.min, >=, -conv_b);
  g_assert_cmpfloat(fb.max, <=, fc_b);
  g_assert_cmpfloat(fb.max, >, 0.9 * fc_b);
  em_model_free(m);

  /* Embedding: N(0, 1) */
  em_spec *e = parse_ok("{'name': 'e', 'input': {'shape': [4], 'dtype': 'i64'}, 'nodes': ["
                        " {'name': 'emb', 'type': 'Embedding', 'num_embeddings': 1000,"
                        "  'embedding_dim': 200}]}");
  m = model_ok(e, 7, NULL);
  assert_normal(em_model_tensor(m, 0, NULL), 1.0);
  em_model_free(m);
  em_spec_free(e);
  em_spec_free(s);
}

static void test_init_schemes(void) {
  em_spec *s = parse_ok(init_spec);
  const double fc_in = 4096, fc_out = 512;
  em_model_options o = {EM_DTYPE_F32, EM_WEIGHT_INIT_KAIMING_NORMAL};
  em_model *m = model_ok(s, 3, &o);
  assert_normal(em_model_tensor(m, 2, NULL), sqrt(2.0 / fc_in));
  em_model_free(m);
  o.weight_init = EM_WEIGHT_INIT_XAVIER_UNIFORM;
  m = model_ok(s, 3, &o);
  assert_uniform(em_model_tensor(m, 2, NULL), sqrt(6.0 / (fc_in + fc_out)));
  /* conv fans as PyTorch counts them: in 8*3*3, out 256*3*3 */
  assert_uniform(em_model_tensor(m, 0, NULL), sqrt(6.0 / (8 * 9 + 256 * 9)));
  em_model_free(m);
  o = (em_model_options){EM_DTYPE_F64, EM_WEIGHT_INIT_XAVIER_NORMAL};
  m = model_ok(s, 3, &o);
  g_assert_cmpint(em_model_tensor(m, 2, NULL)->dtype, ==, EM_DTYPE_F64);
  assert_normal(em_model_tensor(m, 2, NULL), sqrt(2.0 / (fc_in + fc_out)));
  em_model_free(m);
  em_spec_free(s);

  /* the public initialisers on their own */
  int64_t shape[2] = {300, 700};
  em_tensor *t = em_tensor_new(EM_DTYPE_F64, 2, shape, NULL);
  em_rng r;
  em_rng_seed(&r, 5);
  em_init_kaiming_uniform(t, 0, &r);
  assert_uniform(t, sqrt(6.0 / 700));
  em_init_kaiming_uniform(t, sqrt(5.0), &r);
  assert_uniform(t, 1.0 / sqrt(700));
  em_init_kaiming_normal(t, 0, &r);
  assert_normal(t, sqrt(2.0 / 700));
  em_init_xavier_uniform(t, 2.0, &r);
  assert_uniform(t, 2.0 * sqrt(6.0 / 1000));
  em_init_xavier_normal(t, 1.0, &r);
  assert_normal(t, sqrt(2.0 / 1000));
  em_init_normal(t, 3.0, 0.5, &r);
  stats st = stats_of(t);
  g_assert_cmpfloat(fabs(st.mean - 3.0), <, 0.01);
  int64_t fi, fo;
  em_init_fans(t, &fi, &fo);
  g_assert_cmpint(fi, ==, 700);
  g_assert_cmpint(fo, ==, 300);
  em_tensor_free(t);
}

static bool same_values(const em_model *a, const em_model *b, int i) {
  const em_tensor *x = em_model_tensor(a, i, NULL), *y = em_model_tensor(b, i, NULL);
  return memcmp(x->data, y->data, em_tensor_nbytes(x)) == 0;
}

static void test_seeded(void) {
  em_spec *s = parse_ok(bn_spec);
  em_model *a = model_ok(s, 11, NULL), *b = model_ok(s, 11, NULL), *c = model_ok(s, 12, NULL);
  for (int i = 0; i < em_model_tensor_count(a); i++) g_assert_true(same_values(a, b, i));
  g_assert_false(same_values(a, c, 0));
  g_assert_false(same_values(a, c, 9));
  /* a tensor's values depend on its name and the seed, not on what else
   * the model holds */
  em_spec *s2 = parse_ok("{'name': 'bn', 'input': {'shape': [3, 8, 8]}, 'nodes': ["
                         " {'name': 'extra', 'type': 'Conv2d', 'out_channels': 3, 'kernel_size': 1,"
                         "  'padding': 0},"
                         " {'name': 'conv1', 'type': 'Conv2d', 'out_channels': 4, 'kernel_size': 3}]}");
  em_model *d = model_ok(s2, 11, NULL);
  g_assert_cmpint(em_model_tensor_find(d, "conv1.weight"), ==, 2);
  g_assert_cmpmem(em_model_tensor(d, 2, NULL)->data, 4 * 27 * 4, em_model_tensor(a, 0, NULL)->data,
                  4 * 27 * 4);
  em_model_free(a);
  em_model_free(b);
  em_model_free(c);
  em_model_free(d);
  em_spec_free(s);
  em_spec_free(s2);
}

static const char *linear_spec =
    "{'name': 'lin', 'input': {'shape': [6]}, 'nodes': ["
    " {'name': 'fc1', 'type': 'Linear', 'out_features': 4},"
    " {'name': 'fc2', 'type': 'Linear', 'out_features': 3},"
    " {'name': 'dead', 'type': 'Linear', 'out_features': 2, 'inputs': ['fc1']}],"
    " 'output': 'fc2'}";

static void test_linear_forward(void) {
  em_spec *s = parse_ok(linear_spec);
  em_model *m = model_ok(s, 9, NULL);
  int64_t xs[2] = {5, 6};
  em_tensor *x = gc_rand(EM_DTYPE_F32, 2, xs, -1, 1, 77, false);
  em_scope *sc = em_scope_begin();
  em_error err = {0};
  em_tensor *y = em_model_forward(m, x, false, NULL, &err);
  g_assert_nonnull(y);
  g_assert_cmpint(y->ndim, ==, 2);
  g_assert_cmpint(y->shape[0], ==, 5);
  g_assert_cmpint(y->shape[1], ==, 3);
  const float *w1 = em_f32(em_model_tensor(m, 0, NULL)), *b1 = em_f32(em_model_tensor(m, 1, NULL));
  const float *w2 = em_f32(em_model_tensor(m, 2, NULL)), *b2 = em_f32(em_model_tensor(m, 3, NULL));
  for (int n = 0; n < 5; n++) {
    double h[4];
    for (int j = 0; j < 4; j++) {
      h[j] = b1[j];
      for (int d = 0; d < 6; d++) h[j] += (double)w1[j * 6 + d] * em_f32(x)[n * 6 + d];
    }
    for (int k = 0; k < 3; k++) {
      double ref = b2[k];
      for (int j = 0; j < 4; j++) ref += w2[k * 4 + j] * h[j];
      g_assert_cmpfloat_with_epsilon(em_f32(y)[n * 3 + k], ref, 1e-5);
    }
  }
  /* backward reaches live parameters only; zero_grad makes the next
   * backward overwrite */
  em_tensor *g = em_full(EM_DTYPE_F32, 2, y->shape, 1.0);
  em_backward_grad(y, g);
  em_scope_end(sc);
  em_tensor *b2t = em_model_tensor(m, 3, NULL);
  g_assert_nonnull(b2t->grad);
  g_assert_cmpfloat_with_epsilon(em_f32(b2t->grad)[0], 5.0, 1e-6);
  g_assert_null(em_model_tensor(m, 4, NULL)->grad); /* 'dead' is not on the output's path */
  em_model_zero_grad(m);
  sc = em_scope_begin();
  y = em_model_forward(m, x, true, NULL, &err);
  em_backward_grad(y, em_full(EM_DTYPE_F32, 2, y->shape, 2.0));
  em_scope_end(sc);
  g_assert_cmpfloat_with_epsilon(em_f32(b2t->grad)[0], 10.0, 1e-6);
  em_tensor_free(x);
  em_model_free(m);
  em_spec_free(s);
}

static void test_forward_errors(void) {
  em_spec *s = parse_ok(linear_spec);
  em_model *m = model_ok(s, 9, NULL);
  em_scope *sc = em_scope_begin();
  em_error err = {0};
  int64_t bad[2] = {5, 7};
  g_assert_null(em_model_forward(m, em_zeros(EM_DTYPE_F32, 2, bad), false, NULL, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_SHAPE);
  g_assert_cmpstr(err.msg, ==, "model 'lin': input has shape [5, 7], expected [N, 6]");
  int64_t flat[1] = {6};
  g_assert_null(em_model_forward(m, em_zeros(EM_DTYPE_F32, 1, flat), false, NULL, &err));
  g_assert_nonnull(strstr(err.msg, "input has shape [6], expected [N, 6]"));
  int64_t ok[2] = {2, 6};
  g_assert_null(em_model_forward(m, em_zeros(EM_DTYPE_F64, 2, ok), false, NULL, &err));
  g_assert_cmpstr(err.msg, ==, "model 'lin': input has dtype f64, expected f32");
  em_scope_end(sc);
  em_model_free(m);
  em_spec_free(s);

  /* indices out of range are a user error, found before the op runs */
  s = parse_ok("{'name': 'e', 'input': {'shape': [3], 'dtype': 'i64'}, 'nodes': ["
               " {'name': 'emb', 'type': 'Embedding', 'num_embeddings': 10, 'embedding_dim': 4}]}");
  m = model_ok(s, 1, NULL);
  sc = em_scope_begin();
  int64_t is[2] = {2, 3}, idx[6] = {0, 1, 2, 3, 10, 5};
  g_assert_null(em_model_forward(m, em_from_data(EM_DTYPE_I64, 2, is, idx), false, NULL, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "node 'emb' (Embedding): index 10 at position 4 is outside [0, 10)"));
  g_assert_null(em_model_forward(m, em_zeros(EM_DTYPE_F32, 2, is), false, NULL, &err));
  g_assert_nonnull(strstr(err.msg, "input has dtype f32, expected i64"));
  em_scope_end(sc);
  em_model_free(m);
  em_spec_free(s);

  em_model_options o = {EM_DTYPE_I32, EM_WEIGHT_INIT_DEFAULT};
  s = parse_ok(linear_spec);
  g_assert_null(em_model_new_with(s, 1, &o, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_UNSUPPORTED);
  em_spec_free(s);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/nn/model/names", test_names);
  g_test_add_func("/engine/nn/model/init-default", test_init_default);
  g_test_add_func("/engine/nn/model/init-schemes", test_init_schemes);
  g_test_add_func("/engine/nn/model/seeded", test_seeded);
  g_test_add_func("/engine/nn/model/linear-forward", test_linear_forward);
  g_test_add_func("/engine/nn/model/forward-errors", test_forward_errors);
  return g_test_run();
}
