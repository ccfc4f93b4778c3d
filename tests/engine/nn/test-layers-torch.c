/* test-layers-torch.c: every layer type, and whole models, against
 * PyTorch 1.13 (Debian's /usr/bin/python3): forward output, state after
 * the forward (BatchNorm's running statistics and num_batches_tracked),
 * and the gradients of sum(out * R) for every parameter and the input.
 *
 * Each case runs in f32 and f64. The first test writes every case
 * (spec, state dict, input, R) into a temporary folder and runs
 * nn-torch-ref.py once over all of them (one interpreter start for the
 * whole file); each case's test then compares. Skips when torch cannot be
 * imported. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "em-nn.h"
#include "gradcheck.h"

typedef struct {
  const char *name;
  const char *spec; /* ' for " */
  int64_t batch;
  bool training;
} torch_case;

static const torch_case cases[] = {
    {"linear", "{'name': 'x', 'input': {'shape': [7]}, 'nodes': ["
               " {'name': 'fc1', 'type': 'Linear', 'out_features': 5},"
               " {'name': 'fc2', 'type': 'Linear', 'out_features': 3, 'bias': false}]}",
     4, false},
    {"linear-3d", "{'name': 'x', 'input': {'shape': [3, 7]}, 'nodes': ["
                  " {'name': 'fc', 'type': 'Linear', 'out_features': 5}]}",
     2, false},
    {"conv2d", "{'name': 'x', 'input': {'shape': [2, 6, 6]}, 'nodes': ["
               " {'name': 'conv', 'type': 'Conv2d', 'out_channels': 3, 'kernel_size': 3,"
               "  'padding': 1}]}",
     2, false},
    {"conv2d-options", "{'name': 'x', 'input': {'shape': [4, 9, 8]}, 'nodes': ["
                       " {'name': 'conv', 'type': 'Conv2d', 'out_channels': 6, 'kernel_size': [3, 2],"
                       "  'stride': [2, 1], 'padding': [1, 0], 'dilation': [1, 2], 'groups': 2,"
                       "  'bias': false}]}",
     3, false},
    {"batchnorm-train", "{'name': 'x', 'input': {'shape': [3, 5, 4]}, 'nodes': ["
                        " {'name': 'bn', 'type': 'BatchNorm2d', 'momentum': 0.2, 'eps': 0.001}]}",
     4, true},
    {"batchnorm-eval", "{'name': 'x', 'input': {'shape': [3, 5, 4]}, 'nodes': ["
                       " {'name': 'bn', 'type': 'BatchNorm2d'}]}",
     4, false},
    {"layernorm", "{'name': 'x', 'input': {'shape': [3, 4, 6]}, 'nodes': ["
                  " {'name': 'ln1', 'type': 'LayerNorm'},"
                  " {'name': 'ln2', 'type': 'LayerNorm', 'normalized_shape': [4, 6], 'eps': 0.01}]}",
     2, false},
    {"relu", "{'name': 'x', 'input': {'shape': [3, 5]}, 'nodes': [{'name': 'a', 'type': 'ReLU'}]}",
     3, false},
    {"gelu", "{'name': 'x', 'input': {'shape': [3, 5]}, 'nodes': [{'name': 'a', 'type': 'GELU'}]}",
     3, false},
    {"gelu-tanh", "{'name': 'x', 'input': {'shape': [3, 5]}, 'nodes': [{'name': 'a',"
                  " 'type': 'GELU', 'approximate': 'tanh'}]}",
     3, false},
    {"silu", "{'name': 'x', 'input': {'shape': [3, 5]}, 'nodes': [{'name': 'a', 'type': 'SiLU'}]}",
     3, false},
    {"sigmoid",
     "{'name': 'x', 'input': {'shape': [3, 5]}, 'nodes': [{'name': 'a', 'type': 'Sigmoid'}]}", 3,
     false},
    {"tanh", "{'name': 'x', 'input': {'shape': [3, 5]}, 'nodes': [{'name': 'a', 'type': 'Tanh'}]}",
     3, false},
    {"dropout-eval",
     "{'name': 'x', 'input': {'shape': [3, 5]}, 'nodes': [{'name': 'd', 'type': 'Dropout'}]}", 3,
     false},
    {"maxpool2d", "{'name': 'x', 'input': {'shape': [2, 7, 9]}, 'nodes': ["
                  " {'name': 'p', 'type': 'MaxPool2d', 'kernel_size': 3, 'stride': 2, 'padding': 1}]}",
     2, false},
    {"avgpool2d", "{'name': 'x', 'input': {'shape': [2, 7, 9]}, 'nodes': ["
                  " {'name': 'p', 'type': 'AvgPool2d', 'kernel_size': [2, 3], 'stride': [1, 2],"
                  "  'padding': [1, 1]}]}",
     2, false},
    {"flatten", "{'name': 'x', 'input': {'shape': [2, 3, 4]}, 'nodes': ["
                " {'name': 'f1', 'type': 'Flatten', 'start_dim': 1, 'end_dim': 2},"
                " {'name': 'f2', 'type': 'Flatten', 'start_dim': 1}]}",
     2, false},
    {"flatten-inner", "{'name': 'x', 'input': {'shape': [2, 3, 4]}, 'nodes': ["
                      " {'name': 'f', 'type': 'Flatten', 'start_dim': -2}]}",
     2, false},
    {"embedding", "{'name': 'x', 'input': {'shape': [5], 'dtype': 'i64'}, 'nodes': ["
                  " {'name': 'emb', 'type': 'Embedding', 'num_embeddings': 11, 'embedding_dim': 4},"
                  " {'name': 'flat', 'type': 'Flatten'},"
                  " {'name': 'fc', 'type': 'Linear', 'out_features': 3}]}",
     3, false},
    {"residual", "{'name': 'res', 'input': {'shape': [6]}, 'nodes': ["
                 " {'name': 'fc1', 'type': 'Linear', 'out_features': 8},"
                 " {'name': 'act1', 'type': 'GELU'},"
                 " {'name': 'fc2', 'type': 'Linear', 'out_features': 8},"
                 " {'name': 'res1', 'type': 'Add', 'inputs': ['fc1', 'fc2']},"
                 " {'name': 'norm', 'type': 'LayerNorm'},"
                 " {'name': 'skip', 'type': 'Linear', 'out_features': 8, 'bias': false,"
                 "  'inputs': ['input']},"
                 " {'name': 'res2', 'type': 'Add', 'inputs': ['norm', 'skip', 'fc1']},"
                 " {'name': 'head', 'type': 'Linear', 'out_features': 4}]}",
     3, true},
    {"mha", "{'name': 'x', 'input': {'shape': [5, 8]}, 'nodes': ["
            " {'name': 'attn', 'type': 'MultiheadAttention', 'num_heads': 2, 'dropout': 0.3}]}",
     3, false},
    {"mha-causal-nobias", "{'name': 'x', 'input': {'shape': [6, 12]}, 'nodes': ["
                          " {'name': 'attn', 'type': 'MultiheadAttention', 'num_heads': 3,"
                          "  'bias': false, 'causal': true}]}",
     2, true},
    {"encoder-post-relu", "{'name': 'x', 'input': {'shape': [5, 8]}, 'nodes': ["
                          " {'name': 'enc', 'type': 'TransformerEncoderLayer', 'nhead': 2,"
                          "  'dim_feedforward': 16, 'dropout': 0.0}]}",
     3, true},
    {"encoder-pre-gelu-causal", "{'name': 'x', 'input': {'shape': [7, 8]}, 'nodes': ["
                                " {'name': 'enc', 'type': 'TransformerEncoderLayer', 'nhead': 4,"
                                "  'dim_feedforward': 12, 'activation': 'gelu', 'norm_first': true,"
                                "  'causal': true, 'layer_norm_eps': 1e-6}]}",
     2, false},
    {"tiny-gpt", "{'name': 'gpt', 'input': {'shape': [6], 'dtype': 'i64'}, 'nodes': ["
                 " {'name': 'tok', 'type': 'Embedding', 'num_embeddings': 11, 'embedding_dim': 8},"
                 " {'name': 'pos', 'type': 'PositionalEmbedding', 'max_len': 9},"
                 " {'name': 'b0', 'type': 'TransformerEncoderLayer', 'nhead': 2,"
                 "  'dim_feedforward': 16, 'dropout': 0.0, 'norm_first': true, 'causal': true},"
                 " {'name': 'b1', 'type': 'TransformerEncoderLayer', 'nhead': 2,"
                 "  'dim_feedforward': 16, 'dropout': 0.0, 'norm_first': true, 'causal': true},"
                 " {'name': 'ln', 'type': 'LayerNorm'},"
                 " {'name': 'head', 'type': 'Linear', 'out_features': 11}]}",
     2, true},
    {"tiny-gpt-tied", "{'name': 'gpt', 'input': {'shape': [5], 'dtype': 'i64'}, 'nodes': ["
                      " {'name': 'tok', 'type': 'Embedding', 'num_embeddings': 9,"
                      "  'embedding_dim': 8},"
                      " {'name': 'pos', 'type': 'PositionalEmbedding', 'max_len': 5},"
                      " {'name': 'layers', 'repeat': 2, 'nodes': [{'name': 'b',"
                      "  'type': 'TransformerEncoderLayer', 'nhead': 2, 'dim_feedforward': 16,"
                      "  'dropout': 0.0, 'norm_first': true, 'causal': true}]},"
                      " {'name': 'ln', 'type': 'LayerNorm'},"
                      " {'name': 'head', 'type': 'Linear', 'out_features': 9, 'bias': false,"
                      "  'tie_weight': 'tok'}]}",
     2, true},
    {"tiny-vit", "{'name': 'vit', 'input': {'shape': [1, 8, 8]}, 'nodes': ["
                 " {'name': 'patch', 'type': 'Conv2d', 'out_channels': 8, 'kernel_size': 4,"
                 "  'stride': 4},"
                 " {'name': 'seq', 'type': 'ToSequence'},"
                 " {'name': 'cls', 'type': 'ClassToken'},"
                 " {'name': 'pos', 'type': 'PositionalEmbedding', 'max_len': 5},"
                 " {'name': 'enc', 'type': 'TransformerEncoderLayer', 'nhead': 2,"
                 "  'dim_feedforward': 16, 'dropout': 0.0, 'norm_first': true,"
                 "  'activation': 'gelu'},"
                 " {'name': 'pool', 'type': 'SequencePool'},"
                 " {'name': 'head', 'type': 'Linear', 'out_features': 3}]}",
     2, true},
    {"sequence-mean", "{'name': 'x', 'input': {'shape': [2, 3, 2]}, 'nodes': ["
                      " {'name': 'seq', 'type': 'ToSequence'},"
                      " {'name': 'pool', 'type': 'SequencePool', 'mode': 'mean'}]}",
     3, false},
    {"mlp", "{'name': 'mlp', 'input': {'shape': [1, 28, 28]}, 'nodes': ["
            " {'name': 'flatten', 'type': 'Flatten'},"
            " {'name': 'fc1', 'type': 'Linear', 'out_features': 256},"
            " {'name': 'relu1', 'type': 'ReLU'},"
            " {'name': 'fc2', 'type': 'Linear', 'out_features': 128},"
            " {'name': 'relu2', 'type': 'ReLU'},"
            " {'name': 'fc3', 'type': 'Linear', 'out_features': 10}]}",
     4, true},
    {"cnn", "{'name': 'cnn', 'input': {'shape': [1, 28, 28]}, 'nodes': ["
            " {'name': 'conv1', 'type': 'Conv2d', 'out_channels': 32, 'kernel_size': 3, 'padding': 1},"
            " {'name': 'relu1', 'type': 'ReLU'},"
            " {'name': 'pool1', 'type': 'MaxPool2d', 'kernel_size': 2},"
            " {'name': 'conv2', 'type': 'Conv2d', 'out_channels': 64, 'kernel_size': 3, 'padding': 1},"
            " {'name': 'relu2', 'type': 'ReLU'},"
            " {'name': 'pool2', 'type': 'MaxPool2d', 'kernel_size': 2},"
            " {'name': 'flatten', 'type': 'Flatten'},"
            " {'name': 'fc1', 'type': 'Linear', 'out_features': 128},"
            " {'name': 'relu3', 'type': 'ReLU'},"
            " {'name': 'fc2', 'type': 'Linear', 'out_features': 10}]}",
     2, true},
    /* Linear + ReLU pairs the model runs as one op (fc1 on [N, L, D], fc3
     * at the output) and one it must not (fc2's output is read by 'sum') */
    {"linear-relu-pairs", "{'name': 'lrp', 'input': {'shape': [3, 4]}, 'nodes': ["
                          " {'name': 'fc1', 'type': 'Linear', 'out_features': 5},"
                          " {'name': 'r1', 'type': 'ReLU'},"
                          " {'name': 'fc2', 'type': 'Linear', 'out_features': 5},"
                          " {'name': 'r2', 'type': 'ReLU'},"
                          " {'name': 'sum', 'type': 'Add', 'inputs': ['r2', 'fc2']},"
                          " {'name': 'flat', 'type': 'Flatten'},"
                          " {'name': 'fc3', 'type': 'Linear', 'out_features': 6},"
                          " {'name': 'r3', 'type': 'ReLU'}]}",
     3, true},
    {"conv-bn-pool", "{'name': 'cbp', 'input': {'shape': [2, 8, 8]}, 'nodes': ["
                     " {'name': 'conv', 'type': 'Conv2d', 'out_channels': 4, 'kernel_size': 3},"
                     " {'name': 'bn', 'type': 'BatchNorm2d'},"
                     " {'name': 'relu', 'type': 'ReLU'},"
                     " {'name': 'pool', 'type': 'MaxPool2d', 'kernel_size': 2},"
                     " {'name': 'flat', 'type': 'Flatten'},"
                     " {'name': 'fc', 'type': 'Linear', 'out_features': 5},"
                     " {'name': 'tanh', 'type': 'Tanh'}]}",
     3, true},
};
#define N_CASES ((int)G_N_ELEMENTS(cases))

typedef struct {
  em_model *model;
  em_tensor *x, *R; /* persistent */
  char *dir;
} prepared;

static prepared prep[N_CASES][2]; /* [case][0: f32, 1: f64] */
static char *tmp_root;
static int reference_status = -1; /* -1 not run, 0 ok, 77 no torch, else failure */

static em_dtype dtype_of(int d) { return d ? EM_DTYPE_F64 : EM_DTYPE_F32; }

static void write_tensor(const char *dir, const char *file, const em_tensor *t) {
  char *path = g_build_filename(dir, file, NULL);
  FILE *f = fopen(path, "wb");
  g_assert_nonnull(f);
  g_assert_true(em_tensor_is_contiguous(t));
  g_assert_cmpuint(fwrite(em_tensor_ptr(t), 1, em_tensor_nbytes(t), f), ==, em_tensor_nbytes(t));
  fclose(f);
  g_free(path);
}

static json_t *tensor_entry(const char *name, const char *file, const em_tensor *t) {
  json_t *shape = json_array();
  for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
  json_t *e = json_pack("{s:s, s:s, s:o}", "file", file, "dtype", em_dtype_name(t->dtype), "shape",
                        shape);
  if (name) json_object_set_new(e, "name", json_string(name));
  return e;
}

/* Gives every constant float tensor (norm weights, biases, running stats)
 * random values, so that the comparison sees them. */
static void randomise_constants(em_model *m, em_rng *r) {
  for (int i = 0; i < em_model_tensor_count(m); i++) {
    em_tensor *t = em_model_tensor(m, i, NULL);
    if (!em_dtype_is_float(t->dtype)) continue;
    int64_t n = em_tensor_numel(t);
    double first = t->dtype == EM_DTYPE_F32 ? em_f32(t)[0] : em_f64(t)[0];
    bool constant = true;
    for (int64_t k = 0; k < n && constant; k++)
      constant = (t->dtype == EM_DTYPE_F32 ? em_f32(t)[k] : em_f64(t)[k]) == first;
    if (constant) em_init_uniform(t, first - 0.5, first + 0.5, r);
  }
}

static void prepare_case(int c, int d) {
  prepared *p = &prep[c][d];
  char *json = g_strdup(cases[c].spec);
  g_strdelimit(json, "'", '"');
  em_error err = {0};
  em_spec *s = em_spec_parse(json, cases[c].name, &err);
  if (!s) g_error("%s: %s", cases[c].name, err.msg);
  em_model_options o = {dtype_of(d), EM_WEIGHT_INIT_DEFAULT};
  p->model = em_model_new_with(s, 100 + (uint64_t)c, &o, &err);
  g_assert_nonnull(p->model);
  em_rng r;
  em_rng_seed(&r, 1000 + (uint64_t)c);
  randomise_constants(p->model, &r);

  int64_t xs[EM_MAX_DIMS], os[EM_MAX_DIMS];
  xs[0] = os[0] = cases[c].batch;
  int xn = em_spec_input_shape(s, xs + 1) + 1, on = em_spec_output_shape(s, os + 1) + 1;
  if (em_spec_input_dtype(s) == EM_DTYPE_I64) {
    p->x = gc_rand(EM_DTYPE_I64, xn, xs, 0, 11, 7 + (unsigned)c, false);
  } else {
    p->x = gc_rand(dtype_of(d), xn, xs, -2, 2, 7 + (unsigned)c, false);
    em_tensor_set_requires_grad(p->x, true);
  }
  p->R = gc_rand(dtype_of(d), on, os, -1, 1, 99 + (unsigned)c, false);

  p->dir = g_strdup_printf("%s/%s-%s", tmp_root, cases[c].name, d ? "f64" : "f32");
  g_assert_cmpint(g_mkdir(p->dir, 0700), ==, 0);
  json_t *tensors = json_array();
  for (int i = 0; i < em_model_tensor_count(p->model); i++) {
    const char *name;
    em_tensor *t = em_model_tensor(p->model, i, &name);
    char file[32];
    snprintf(file, sizeof file, "t%d.bin", i);
    write_tensor(p->dir, file, t);
    json_array_append_new(tensors, tensor_entry(name, file, t));
  }
  write_tensor(p->dir, "input.bin", p->x);
  write_tensor(p->dir, "R.bin", p->R);
  json_t *spec_json = json_loads(json, 0, NULL);
  json_t *cj = json_pack("{s:o, s:b, s:s, s:o, s:o, s:o}", "spec", spec_json, "training",
                         cases[c].training, "dtype", d ? "f64" : "f32", "input",
                         tensor_entry(NULL, "input.bin", p->x), "tensors", tensors, "grad_out",
                         tensor_entry(NULL, "R.bin", p->R));
  char *path = g_build_filename(p->dir, "case.json", NULL);
  g_assert_cmpint(json_dump_file(cj, path, JSON_INDENT(1)), ==, 0);
  g_free(path);
  json_decref(cj);
  em_spec_free(s);
  g_free(json);
}

static void run_reference(void) {
  if (reference_status >= 0) return;
  const char *root = g_getenv("EMBER_SOURCE_ROOT");
  if (!root || !g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE)) {
    reference_status = 77;
    return;
  }
  tmp_root = g_dir_make_tmp("ember-nn-torch-XXXXXX", NULL);
  g_assert_nonnull(tmp_root);
  GPtrArray *argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup("/usr/bin/python3"));
  g_ptr_array_add(argv, g_build_filename(root, "tests", "engine", "nn", "nn-torch-ref.py", NULL));
  for (int c = 0; c < N_CASES; c++)
    for (int d = 0; d < 2; d++) {
      prepare_case(c, d);
      g_ptr_array_add(argv, g_strdup(prep[c][d].dir));
    }
  g_ptr_array_add(argv, NULL);
  int wait_status = 0;
  GError *error = NULL;
  char *err_out = NULL;
  if (!g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, NULL, &err_out,
                    &wait_status, &error))
    g_error("cannot run the reference: %s", error->message);
  reference_status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 1;
  if (reference_status != 0 && reference_status != 77)
    g_printerr("nn-torch-ref.py failed (%d):\n%s\n", reference_status, err_out);
  g_free(err_out);
  g_ptr_array_free(argv, TRUE);
}

/* Reads a raw file of t's dtype and numel into a new persistent tensor. */
static em_tensor *read_like(const char *dir, const char *file, const em_tensor *t) {
  char *path = g_build_filename(dir, file, NULL);
  gchar *data = NULL;
  gsize len = 0;
  if (!g_file_get_contents(path, &data, &len, NULL)) g_error("reference wrote no %s", path);
  g_assert_cmpuint(len, ==, em_tensor_nbytes(t));
  em_tensor *r = em_tensor_new(t->dtype, t->ndim, t->shape, NULL);
  memcpy(r->data, data, len);
  g_free(data);
  g_free(path);
  return r;
}

/* |a - b| <= atol + rtol |b| everywhere. */
static void assert_close(const char *what, const em_tensor *a, const em_tensor *b, double atol,
                         double rtol) {
  int64_t n = em_tensor_numel(a);
  g_assert_cmpint(n, ==, em_tensor_numel(b));
  for (int64_t k = 0; k < n; k++) {
    double x, y;
    if (a->dtype == EM_DTYPE_F32) x = em_f32(a)[k], y = em_f32(b)[k];
    else if (a->dtype == EM_DTYPE_F64) x = em_f64(a)[k], y = em_f64(b)[k];
    else x = (double)em_i64(a)[k], y = (double)em_i64(b)[k];
    if (!(fabs(x - y) <= atol + rtol * fabs(y)))
      g_error("%s: element %lld: ember %.9g, torch %.9g", what, (long long)k, x, y);
  }
}

static void compare_case(gconstpointer data) {
  int c = GPOINTER_TO_INT(data) / 2, d = GPOINTER_TO_INT(data) % 2;
  run_reference();
  if (reference_status == 77) {
    g_test_skip("no PyTorch at /usr/bin/python3");
    return;
  }
  g_assert_cmpint(reference_status, ==, 0);
  prepared *p = &prep[c][d];
  double atol = d ? 1e-10 : 2e-5, rtol = d ? 1e-9 : 2e-4;
  char what[128];

  em_model_zero_grad(p->model);
  if (p->x->grad) em_tensor_zero_grad(p->x);
  em_scope *s = em_scope_begin();
  em_error err = {0};
  em_tensor *y = em_model_forward(p->model, p->x, cases[c].training, NULL, &err);
  if (!y) g_error("%s: %s", cases[c].name, err.msg);
  em_tensor *ref = read_like(p->dir, "out.bin", p->R);
  snprintf(what, sizeof what, "%s/%s output", cases[c].name, d ? "f64" : "f32");
  assert_close(what, em_contiguous(y), ref, atol, rtol);
  em_tensor_free(ref);
  em_backward_grad(y, p->R);
  em_scope_end(s);

  for (int i = 0; i < em_model_tensor_count(p->model); i++) {
    const char *name;
    em_tensor *t = em_model_tensor(p->model, i, &name);
    char file[32];
    snprintf(file, sizeof file, "state-%d.bin", i);
    ref = read_like(p->dir, file, t);
    snprintf(what, sizeof what, "%s/%s state %s", cases[c].name, d ? "f64" : "f32", name);
    assert_close(what, t, ref, atol, rtol);
    em_tensor_free(ref);
    if (em_model_tensor_is_buffer(p->model, i)) continue;
    snprintf(file, sizeof file, "grad-%d.bin", i);
    g_assert_nonnull(t->grad);
    ref = read_like(p->dir, file, t);
    snprintf(what, sizeof what, "%s/%s grad %s", cases[c].name, d ? "f64" : "f32", name);
    assert_close(what, t->grad, ref, atol, rtol);
    em_tensor_free(ref);
  }
  if (em_dtype_is_float(p->x->dtype)) {
    g_assert_nonnull(p->x->grad);
    ref = read_like(p->dir, "grad-input.bin", p->x);
    snprintf(what, sizeof what, "%s/%s grad input", cases[c].name, d ? "f64" : "f32");
    assert_close(what, p->x->grad, ref, atol, rtol);
    em_tensor_free(ref);
  }
}

static void remove_tree(const char *dir) {
  GDir *gd = g_dir_open(dir, 0, NULL);
  if (!gd) return;
  const char *name;
  while ((name = g_dir_read_name(gd))) {
    char *path = g_build_filename(dir, name, NULL);
    if (g_file_test(path, G_FILE_TEST_IS_DIR)) remove_tree(path);
    else g_unlink(path);
    g_free(path);
  }
  g_dir_close(gd);
  g_rmdir(dir);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  for (int c = 0; c < N_CASES; c++)
    for (int d = 0; d < 2; d++) {
      char *path = g_strdup_printf("/engine/nn/torch/%s/%s", cases[c].name, d ? "f64" : "f32");
      g_test_add_data_func(path, GINT_TO_POINTER(2 * c + d), compare_case);
      g_free(path);
    }
  int rc = g_test_run();
  for (int c = 0; c < N_CASES; c++)
    for (int d = 0; d < 2; d++) {
      em_model_free(prep[c][d].model);
      em_tensor_free(prep[c][d].x);
      em_tensor_free(prep[c][d].R);
      g_free(prep[c][d].dir);
    }
  if (tmp_root && !g_getenv("EMBER_KEEP_TMP")) remove_tree(tmp_root);
  g_free(tmp_root);
  return rc;
}
