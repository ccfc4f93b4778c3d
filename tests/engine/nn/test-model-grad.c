/* test-model-grad.c: finite-difference gradient checks (f64) through whole
 * models built from specs, and the layers whose behaviour is random or
 * stateful: Dropout and BatchNorm's num_batches_tracked. */
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

typedef struct {
  em_model *model;
  bool training;
} fwd_ctx;

/* in[0] is the input; the rest are the model's parameters, which
 * gradcheck perturbs in place. */
static em_tensor *f_model(em_tensor **in, void *ctx) {
  fwd_ctx *c = ctx;
  em_error err = {0};
  em_tensor *y = em_model_forward(c->model, in[0], c->training, NULL, &err);
  if (!y) g_error("%s", err.msg);
  return y;
}

static void check_model(const char *text, int64_t batch, bool training, unsigned seed) {
  em_spec *s = parse_ok(text);
  em_model_options o = {EM_DTYPE_F64, EM_WEIGHT_INIT_DEFAULT};
  em_error err = {0};
  em_model *m = em_model_new_with(s, seed, &o, &err);
  g_assert_nonnull(m);
  int64_t xs[EM_MAX_DIMS];
  xs[0] = batch;
  int xn = em_spec_input_shape(s, xs + 1) + 1;
  int np = em_model_param_count(m);
  em_tensor **in = g_new0(em_tensor *, np + 1);
  in[0] = gc_rand(EM_DTYPE_F64, xn, xs, -1, 1, seed, true);
  /* make the norm layers' ones and zeros generic */
  em_rng r;
  em_rng_seed(&r, seed);
  for (int i = 0; i < np; i++) {
    const char *name;
    in[i + 1] = em_model_param(m, i, &name);
    if (strstr(name, "bn") || strstr(name, "norm"))
      em_init_uniform(in[i + 1], 0.5, 1.5, &r);
  }
  fwd_ctx ctx = {m, training};
  g_assert_true(gradcheck(em_spec_name(s), f_model, np + 1, in, &ctx, NULL));
  em_tensor_free(in[0]);
  g_free(in);
  em_model_free(m);
  em_spec_free(s);
}

static void test_mlp(void) {
  check_model("{'name': 'linear-relu-linear', 'input': {'shape': [5]}, 'nodes': ["
              " {'name': 'fc1', 'type': 'Linear', 'out_features': 7},"
              " {'name': 'relu', 'type': 'ReLU'},"
              " {'name': 'fc2', 'type': 'Linear', 'out_features': 3}]}",
              4, true, 1);
}

static const char *cnn =
    "{'name': 'conv-bn-relu-pool-flatten-linear', 'input': {'shape': [2, 6, 6]}, 'nodes': ["
    " {'name': 'conv', 'type': 'Conv2d', 'out_channels': 3, 'kernel_size': 3, 'padding': 1},"
    " {'name': 'bn', 'type': 'BatchNorm2d'},"
    " {'name': 'relu', 'type': 'ReLU'},"
    " {'name': 'pool', 'type': 'MaxPool2d', 'kernel_size': 2},"
    " {'name': 'flat', 'type': 'Flatten'},"
    " {'name': 'fc', 'type': 'Linear', 'out_features': 4}]}";

static void test_cnn_train(void) { check_model(cnn, 2, true, 2); }
static void test_cnn_eval(void) { check_model(cnn, 2, false, 3); }

static void test_residual(void) {
  check_model("{'name': 'residual', 'input': {'shape': [3, 4]}, 'nodes': ["
              " {'name': 'fc1', 'type': 'Linear', 'out_features': 4},"
              " {'name': 'act', 'type': 'GELU'},"
              " {'name': 'fc2', 'type': 'Linear', 'out_features': 4},"
              " {'name': 'sum', 'type': 'Add', 'inputs': ['input', 'fc2', 'act']},"
              " {'name': 'norm', 'type': 'LayerNorm', 'normalized_shape': [3, 4]},"
              " {'name': 'silu', 'type': 'SiLU'},"
              " {'name': 'sig', 'type': 'Sigmoid'},"
              " {'name': 'flat', 'type': 'Flatten'},"
              " {'name': 'head', 'type': 'Linear', 'out_features': 2},"
              " {'name': 'tanh', 'type': 'Tanh'}]}",
              3, true, 4);
}

static void test_pool_avg(void) {
  check_model("{'name': 'avg', 'input': {'shape': [2, 5, 5]}, 'nodes': ["
              " {'name': 'conv', 'type': 'Conv2d', 'out_channels': 4, 'kernel_size': [2, 3],"
              "  'stride': [1, 2], 'dilation': [2, 1], 'groups': 2, 'padding': 1},"
              " {'name': 'pool', 'type': 'AvgPool2d', 'kernel_size': 2, 'padding': 1},"
              " {'name': 'flat', 'type': 'Flatten'},"
              " {'name': 'fc', 'type': 'Linear', 'out_features': 2}]}",
              2, true, 5);
}

static void test_embedding_grad(void) {
  em_spec *s = parse_ok("{'name': 'emb', 'input': {'shape': [4], 'dtype': 'i64'}, 'nodes': ["
                        " {'name': 'emb', 'type': 'Embedding', 'num_embeddings': 6,"
                        "  'embedding_dim': 3},"
                        " {'name': 'flat', 'type': 'Flatten'},"
                        " {'name': 'fc', 'type': 'Linear', 'out_features': 2}]}");
  em_model_options o = {EM_DTYPE_F64, EM_WEIGHT_INIT_DEFAULT};
  em_model *m = em_model_new_with(s, 6, &o, NULL);
  int64_t xs[2] = {3, 4};
  em_tensor *in[4] = {gc_rand(EM_DTYPE_I64, 2, xs, 0, 6, 6, false), em_model_param(m, 0, NULL),
                      em_model_param(m, 1, NULL), em_model_param(m, 2, NULL)};
  fwd_ctx ctx = {m, true};
  g_assert_true(gradcheck("embedding model", f_model, 4, in, &ctx, NULL));
  em_tensor_free(in[0]);
  em_model_free(m);
  em_spec_free(s);
}

static void test_dropout(void) {
  em_spec *s = parse_ok("{'name': 'd', 'input': {'shape': [100000]}, 'nodes': ["
                        " {'name': 'drop', 'type': 'Dropout', 'p': 0.3}]}");
  em_model *m = em_model_new(s, 1, NULL);
  int64_t xs[2] = {1, 100000};
  em_tensor *x = em_tensor_new(EM_DTYPE_F32, 2, xs, NULL);
  em_tensor_fill_(x, 1.0);
  em_scope *sc = em_scope_begin();
  em_error err = {0};
  em_rng r1, r2;
  em_rng_seed(&r1, 5);
  em_rng_seed(&r2, 5);
  em_tensor *a = em_model_forward(m, x, true, &r1, &err);
  em_tensor *b = em_model_forward(m, x, true, &r2, &err);
  g_assert_cmpmem(em_f32(a), 400000, em_f32(b), 400000); /* seeded: reproducible */
  int64_t zeros = 0;
  for (int64_t k = 0; k < 100000; k++) {
    float v = em_f32(a)[k];
    if (v == 0) zeros++;
    else g_assert_cmpfloat_with_epsilon(v, 1 / 0.7, 1e-6);
  }
  g_assert_cmpfloat(fabs((double)zeros / 100000 - 0.3), <, 0.01);
  em_tensor *e = em_model_forward(m, x, false, NULL, &err); /* eval: identity */
  for (int64_t k = 0; k < 100000; k += 997) g_assert_cmpfloat(em_f32(e)[k], ==, 1.0f);
  em_tensor *own = em_model_forward(m, x, true, NULL, &err); /* the model's own stream */
  g_assert_nonnull(own);
  em_scope_end(sc);
  em_tensor_free(x);
  em_model_free(m);
  em_spec_free(s);
}

static void test_batches_tracked(void) {
  em_spec *s = parse_ok("{'name': 'b', 'input': {'shape': [2, 3, 3]}, 'nodes': ["
                        " {'name': 'bn', 'type': 'BatchNorm2d'}]}");
  em_model *m = em_model_new(s, 1, NULL);
  int64_t xs[4] = {4, 2, 3, 3};
  em_tensor *x = gc_rand(EM_DTYPE_F32, 4, xs, -1, 1, 3, false);
  em_tensor *nbt = em_model_tensor(m, em_model_tensor_find(m, "bn.num_batches_tracked"), NULL);
  em_scope *sc = em_scope_begin();
  em_model_forward(m, x, true, NULL, NULL);
  em_model_forward(m, x, true, NULL, NULL);
  em_model_forward(m, x, false, NULL, NULL);
  em_scope_end(sc);
  g_assert_cmpint(em_i64(nbt)[0], ==, 2);
  em_tensor_free(x);
  em_model_free(m);
  em_spec_free(s);
}

/* PyTorch refuses one value per channel in training; so do we, with a
 * message rather than NaN running statistics. */
static void test_batch_of_one(void) {
  em_spec *s = parse_ok("{'name': 'b', 'input': {'shape': [2, 1, 1]}, 'nodes': ["
                        " {'name': 'bn', 'type': 'BatchNorm2d'}]}");
  em_model *m = em_model_new(s, 1, NULL);
  int64_t xs[4] = {1, 2, 1, 1};
  em_tensor *x = gc_rand(EM_DTYPE_F32, 4, xs, -1, 1, 3, false);
  em_scope *sc = em_scope_begin();
  em_error err = {0};
  g_assert_null(em_model_forward(m, x, true, NULL, &err));
  g_assert_nonnull(strstr(err.msg, "node 'bn' (BatchNorm2d): training needs more than one value "
                                   "per channel"));
  g_assert_nonnull(em_model_forward(m, x, false, NULL, &err)); /* eval is fine */
  em_scope_end(sc);
  em_tensor_free(x);
  em_model_free(m);
  em_spec_free(s);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/nn/grad/linear-relu-linear", test_mlp);
  g_test_add_func("/engine/nn/grad/conv-bn-relu-pool-linear/train", test_cnn_train);
  g_test_add_func("/engine/nn/grad/conv-bn-relu-pool-linear/eval", test_cnn_eval);
  g_test_add_func("/engine/nn/grad/residual-layernorm", test_residual);
  g_test_add_func("/engine/nn/grad/conv-options-avgpool", test_pool_avg);
  g_test_add_func("/engine/nn/grad/embedding", test_embedding_grad);
  g_test_add_func("/engine/nn/dropout", test_dropout);
  g_test_add_func("/engine/nn/batchnorm/num-batches-tracked", test_batches_tracked);
  g_test_add_func("/engine/nn/batchnorm/batch-of-one", test_batch_of_one);
  return g_test_run();
}
