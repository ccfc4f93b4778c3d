/* test-spec.c: model spec parsing, shape inference, parameter counts, the
 * summary table, the layer registry, and one test per error class with
 * the message it must give. Needs no pending op: nothing runs forward. */
#include <glib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "em-data.h"
#include "em-io.h"
#include "em-nn.h"

/* Spec text written with ' for " (easier to read in C). */
static char *q(const char *text) {
  char *s = g_strdup(text);
  g_strdelimit(s, "'", '"');
  return s;
}

static em_spec *parse_ok(const char *text) {
  char *json = q(text);
  em_error err = {0};
  em_spec *s = em_spec_parse(json, "test.json", &err);
  if (!s) g_error("spec did not parse: %s\n%s", err.msg, json);
  g_free(json);
  return s;
}

/* The spec must fail with a message holding every substring of subs. */
static void expect_error(const char *text, const char *const *subs) {
  char *json = q(text);
  em_error err = {0};
  em_spec *s = em_spec_parse(json, "bad.json", &err);
  if (s) g_error("spec parsed but should not:\n%s", json);
  g_assert_cmpint(err.status, !=, EM_OK);
  if (!g_str_has_prefix(err.msg, "bad.json")) g_error("message lacks the source: %s", err.msg);
  for (int i = 0; subs[i]; i++)
    if (!strstr(err.msg, subs[i]))
      g_error("message\n  %s\nlacks\n  %s\nfor spec\n  %s", err.msg, subs[i], json);
  if (g_test_verbose()) g_printerr("%s\n", err.msg);
  g_free(json);
}
#define EXPECT_ERROR(text, ...) expect_error(text, (const char *const[]){__VA_ARGS__, NULL})

static const char *mlp_spec =
    "{'name': 'fmnist-mlp', 'input': {'shape': [1, 28, 28]},"
    " 'nodes': ["
    "  {'name': 'flatten', 'type': 'Flatten'},"
    "  {'name': 'fc1', 'type': 'Linear', 'out_features': 256},"
    "  {'name': 'relu1', 'type': 'ReLU'},"
    "  {'name': 'fc2', 'type': 'Linear', 'out_features': 128, 'inputs': ['relu1']},"
    "  {'name': 'relu2', 'type': 'ReLU'},"
    "  {'name': 'fc3', 'type': 'Linear', 'out_features': 10}],"
    " 'output': 'fc3',"
    " 'loss': {'type': 'cross_entropy'}, 'training': {'epochs': 2},"
    " 'description': 'an MLP'}";

static const char *cnn_spec =
    "{'name': 'fmnist-cnn', 'input': {'shape': [1, 28, 28]},"
    " 'nodes': ["
    "  {'name': 'conv1', 'type': 'Conv2d', 'out_channels': 32, 'kernel_size': 3, 'padding': 1},"
    "  {'name': 'relu1', 'type': 'ReLU'},"
    "  {'name': 'pool1', 'type': 'MaxPool2d', 'kernel_size': 2},"
    "  {'name': 'conv2', 'type': 'Conv2d', 'out_channels': 64, 'kernel_size': 3, 'padding': 1},"
    "  {'name': 'relu2', 'type': 'ReLU'},"
    "  {'name': 'pool2', 'type': 'MaxPool2d', 'kernel_size': 2},"
    "  {'name': 'flatten', 'type': 'Flatten'},"
    "  {'name': 'fc1', 'type': 'Linear', 'out_features': 128},"
    "  {'name': 'relu3', 'type': 'ReLU'},"
    "  {'name': 'fc2', 'type': 'Linear', 'out_features': 10}]}";

static void assert_node_shape(const em_spec *s, const char *name, const char *shape,
                              int64_t params) {
  char buf[160];
  for (int i = 0; i < em_spec_node_count(s); i++)
    if (!strcmp(em_spec_node_name(s, i), name)) {
      g_assert_cmpstr(em_shape_format(em_spec_node_output(s, i), buf, sizeof buf), ==, shape);
      g_assert_cmpint(em_spec_node_param_count(s, i), ==, params);
      return;
    }
  g_error("no node %s", name);
}

static void test_mlp(void) {
  em_spec *s = parse_ok(mlp_spec);
  g_assert_cmpstr(em_spec_name(s), ==, "fmnist-mlp");
  g_assert_cmpstr(em_spec_description(s), ==, "an MLP");
  g_assert_cmpint(em_spec_param_count(s), ==, 235146);
  g_assert_cmpint(em_spec_buffer_count(s), ==, 0);
  int64_t shape[8];
  g_assert_cmpint(em_spec_input_shape(s, shape), ==, 3);
  g_assert_cmpint(shape[0], ==, 1);
  g_assert_cmpint(shape[2], ==, 28);
  g_assert_cmpint(em_spec_input_dtype(s), ==, EM_DTYPE_F32);
  g_assert_cmpint(em_spec_output_shape(s, shape), ==, 1);
  g_assert_cmpint(shape[0], ==, 10);
  assert_node_shape(s, "flatten", "[N, 784]", 0);
  assert_node_shape(s, "fc1", "[N, 256]", 200960);
  assert_node_shape(s, "fc2", "[N, 128]", 32896);
  assert_node_shape(s, "fc3", "[N, 10]", 1290);
  g_assert_nonnull(em_spec_loss_json(s));
  g_assert_cmpstr(json_string_value(json_object_get(em_spec_loss_json(s), "type")), ==,
                  "cross_entropy");
  g_assert_nonnull(em_spec_training_json(s));
  g_assert_cmpint(em_spec_output_node(s), ==, 5);
  int idx[16];
  g_assert_cmpint(em_spec_node_inputs(s, 0, idx), ==, 1);
  g_assert_cmpint(idx[0], ==, -1);
  g_assert_cmpint(em_spec_node_inputs(s, 3, idx), ==, 1);
  g_assert_cmpint(idx[0], ==, 2);
  em_spec_free(s);
}

static void test_cnn(void) {
  em_spec *s = parse_ok(cnn_spec);
  g_assert_cmpint(em_spec_param_count(s), ==, 421642);
  assert_node_shape(s, "conv1", "[N, 32, 28, 28]", 320);
  assert_node_shape(s, "pool1", "[N, 32, 14, 14]", 0);
  assert_node_shape(s, "conv2", "[N, 64, 14, 14]", 18496);
  assert_node_shape(s, "pool2", "[N, 64, 7, 7]", 0);
  assert_node_shape(s, "flatten", "[N, 3136]", 0);
  assert_node_shape(s, "fc1", "[N, 128]", 401536);
  assert_node_shape(s, "fc2", "[N, 10]", 1290);
  g_assert_null(em_spec_loss_json(s));
  g_assert_null(em_spec_training_json(s));
  g_assert_cmpstr(em_spec_description(s), ==, "");
  em_spec_free(s);
}

/* The zoo's files, when they are there. */
static void test_zoo_files(void) {
  const char *root = g_getenv("EMBER_SOURCE_ROOT");
  if (!root) {
    g_test_skip("EMBER_SOURCE_ROOT not set");
    return;
  }
  const struct {
    const char *file;
    int64_t params;
  } zoo[] = {{"fmnist-mlp.json", 235146}, {"fmnist-cnn.json", 421642},
             {"char-gpt.json", 824192}};
  for (size_t i = 0; i < G_N_ELEMENTS(zoo); i++) {
    char *path = g_build_filename(root, "data", "models", zoo[i].file, NULL);
    if (g_file_test(path, G_FILE_TEST_EXISTS)) {
      em_error err = {0};
      em_spec *s = em_spec_load(path, &err);
      if (!s) g_error("%s", err.msg);
      g_assert_cmpint(em_spec_param_count(s), ==, zoo[i].params);
      em_spec_free(s);
    }
    g_free(path);
  }
}

static const char *residual_spec =
    "{'name': 'res', 'input': {'shape': [16]},"
    " 'nodes': ["
    "  {'name': 'fc1', 'type': 'Linear', 'out_features': 32},"
    "  {'name': 'act1', 'type': 'GELU'},"
    "  {'name': 'fc2', 'type': 'Linear', 'out_features': 32},"
    "  {'name': 'res1', 'type': 'Add', 'inputs': ['fc1', 'fc2']},"
    "  {'name': 'norm', 'type': 'LayerNorm'},"
    "  {'name': 'skip', 'type': 'Linear', 'out_features': 32, 'bias': false, 'inputs': ['input']},"
    "  {'name': 'res2', 'type': 'Add', 'inputs': ['norm', 'skip', 'fc1']},"
    "  {'name': 'head', 'type': 'Linear', 'in_features': 32, 'out_features': 4}]}";

static void test_residual(void) {
  em_spec *s = parse_ok(residual_spec);
  assert_node_shape(s, "res1", "[N, 32]", 0);
  assert_node_shape(s, "norm", "[N, 32]", 64);
  assert_node_shape(s, "skip", "[N, 32]", 512);
  assert_node_shape(s, "res2", "[N, 32]", 0);
  assert_node_shape(s, "head", "[N, 4]", 132);
  g_assert_cmpint(em_spec_param_count(s), ==, 544 + 1056 + 64 + 512 + 132);
  int idx[16];
  g_assert_cmpint(em_spec_node_inputs(s, 6, idx), ==, 3);
  g_assert_cmpint(idx[0], ==, 4);
  g_assert_cmpint(idx[1], ==, 5);
  g_assert_cmpint(idx[2], ==, 0);
  g_assert_cmpint(em_spec_node_inputs(s, 5, idx), ==, 1);
  g_assert_cmpint(idx[0], ==, -1);
  char buf[4096];
  em_spec_format_summary(s, buf, sizeof buf);
  g_assert_nonnull(strstr(buf, "inputs"));
  g_assert_nonnull(strstr(buf, "norm, skip, fc1"));
  em_spec_free(s);
}

/* Repeated blocks: copies named like an nn.ModuleList's children, inner
 * inputs per copy, the block's own name for its last copy, errors. */
static void test_repeat(void) {
  em_spec *s = parse_ok(
      "{'name': 'gpt', 'input': {'shape': [5], 'dtype': 'i64'},"
      " 'nodes': ["
      "  {'name': 'tok', 'type': 'Embedding', 'num_embeddings': 7, 'embedding_dim': 8},"
      "  {'name': 'layers', 'repeat': 3, 'nodes': ["
      "   {'name': 'enc', 'type': 'TransformerEncoderLayer', 'nhead': 2, 'dim_feedforward': 4}]},"
      "  {'name': 'blocks', 'repeat': 2, 'nodes': ["
      "   {'name': 'fc', 'type': 'Linear', 'out_features': 8},"
      "   {'name': 'act', 'type': 'GELU'},"
      "   {'name': 'sum', 'type': 'Add', 'inputs': ['fc', 'act']}]},"
      "  {'name': 'skip', 'type': 'Add', 'inputs': ['layers', 'blocks']},"
      "  {'name': 'head', 'type': 'Linear', 'out_features': 7}],"
      " 'output': 'head'}");
  g_assert_cmpint(em_spec_node_count(s), ==, 1 + 3 + 6 + 2);
  g_assert_cmpstr(em_spec_node_name(s, 1), ==, "layers.0");
  g_assert_cmpstr(em_spec_node_name(s, 3), ==, "layers.2");
  g_assert_cmpstr(em_spec_node_name(s, 4), ==, "blocks.0.fc");
  g_assert_cmpstr(em_spec_node_name(s, 9), ==, "blocks.1.sum");
  int idx[16];
  g_assert_cmpint(em_spec_node_inputs(s, 2, idx), ==, 1); /* layers.1 <- layers.0 */
  g_assert_cmpint(idx[0], ==, 1);
  g_assert_cmpint(em_spec_node_inputs(s, 7, idx), ==, 1); /* blocks.1.fc <- blocks.0.sum */
  g_assert_cmpint(idx[0], ==, 6);
  g_assert_cmpint(em_spec_node_inputs(s, 9, idx), ==, 2); /* blocks.1.sum <- its own fc, act */
  g_assert_cmpint(idx[0], ==, 7);
  g_assert_cmpint(idx[1], ==, 8);
  g_assert_cmpint(em_spec_node_inputs(s, 10, idx), ==, 2); /* skip <- layers.2, blocks.1.sum */
  g_assert_cmpint(idx[0], ==, 3);
  g_assert_cmpint(idx[1], ==, 9);
  /* each copy has its own parameters: 3 encoder layers, 2 Linear(8, 8) */
  int64_t enc = 3 * 8 * 8 + 3 * 8 + 8 * 8 + 8 + 4 * 8 + 4 + 8 * 4 + 8 + 4 * 8;
  g_assert_cmpint(em_spec_param_count(s), ==, 7 * 8 + 3 * enc + 2 * (64 + 8) + 8 * 7 + 7);
  /* the spec's JSON keeps the block as written */
  g_assert_cmpint(json_array_size(json_object_get(em_spec_json(s), "nodes")), ==, 5);
  em_spec_free(s);

  s = parse_ok("{'name': 'r', 'input': {'shape': [4]}, 'nodes': ["
               " {'name': 'b', 'repeat': 2, 'nodes': [{'name': 'fc', 'type': 'Linear',"
               "  'out_features': 4}]}], 'output': 'b'}");
  g_assert_cmpint(em_spec_node_count(s), ==, 2);
  em_spec_free(s);

#define HEAD_R "{'name': 'r', 'input': {'shape': [4]}, 'nodes': ["
  EXPECT_ERROR(HEAD_R "{'name': 'b', 'repeat': 0, 'nodes': [{'name': 'f', 'type': 'ReLU'}]}]}",
               "block 'b': \"repeat\" must be an integer from 1 to");
  EXPECT_ERROR(HEAD_R "{'name': 'b', 'repeat': 2, 'nodes': []}]}",
               "block 'b': \"nodes\" must be a non-empty list");
  EXPECT_ERROR(HEAD_R "{'name': 'b', 'repeat': 2, 'nodes': [{'name': 'c', 'repeat': 2,"
               " 'nodes': [{'name': 'f', 'type': 'ReLU'}]}]}]}",
               "a block inside a block is not supported");
  EXPECT_ERROR(HEAD_R "{'name': 'b', 'repeat': 2, 'times': 3, 'nodes': [{'name': 'f',"
               " 'type': 'ReLU'}]}]}",
               "block 'b': unknown key 'times'");
  EXPECT_ERROR(HEAD_R "{'name': 'b.x', 'repeat': 2, 'nodes': [{'name': 'f', 'type': 'ReLU'}]}]}",
               "a name may not hold '.'");
  EXPECT_ERROR(HEAD_R "{'name': 'b', 'repeat': 2, 'nodes': [{'name': 'f', 'type': 'Lineer',"
               " 'out_features': 3}]}]}",
               "node 'b.0': unknown layer type 'Lineer'");
#undef HEAD_R
}

/* "tie_weight": the head's weight is the embedding's (counted once). */
static void test_tie_weight(void) {
  em_spec *s = parse_ok("{'name': 'lm', 'input': {'shape': [4], 'dtype': 'i64'}, 'nodes': ["
                        " {'name': 'tok', 'type': 'Embedding', 'num_embeddings': 11,"
                        "  'embedding_dim': 6},"
                        " {'name': 'head', 'type': 'Linear', 'out_features': 11,"
                        "  'tie_weight': 'tok'}]}");
  g_assert_cmpint(em_spec_param_count(s), ==, 11 * 6 + 11); /* the head's bias alone is its own */
  g_assert_cmpint(em_spec_node_param_count(s, 1), ==, 11);
  em_error err = {0};
  em_model *m = em_model_new(s, 1, &err);
  g_assert_nonnull(m);
  g_assert_cmpint(em_model_tensor_count(m), ==, 2); /* tok.weight, head.bias */
  int a = em_model_tensor_find(m, "head.weight"), b = em_model_tensor_find(m, "tok.weight");
  g_assert_cmpint(a, ==, b);
  em_model_free(m);
  em_spec_free(s);
#define HEAD_T "{'name': 'lm', 'input': {'shape': [4], 'dtype': 'i64'}, 'nodes': [" \
               " {'name': 'tok', 'type': 'Embedding', 'num_embeddings': 11, 'embedding_dim': 6},"
  EXPECT_ERROR(HEAD_T " {'name': 'head', 'type': 'Linear', 'out_features': 10,"
                      " 'tie_weight': 'tok'}]}",
               "node 'head' (Linear): \"tie_weight\": its weight [10, 6] and tok's [11, 6] differ");
  EXPECT_ERROR(HEAD_T " {'name': 'head', 'type': 'Linear', 'out_features': 11,"
                      " 'tie_weight': 'head'}]}",
               "\"tie_weight\" names 'head', which is not an earlier node");
  EXPECT_ERROR(HEAD_T " {'name': 'act', 'type': 'GELU', 'tie_weight': 'tok'}]}",
               "\"tie_weight\": this node has no \"weight\" to tie");
#undef HEAD_T
}

/* Every built-in type, with attributes that change the shapes. */
static void test_all_types(void) {
  em_spec *s = parse_ok(
      "{'name': 'all', 'input': {'shape': [3, 17, 20]},"
      " 'nodes': ["
      "  {'name': 'c1', 'type': 'Conv2d', 'out_channels': 6, 'kernel_size': [3, 5],"
      "   'stride': [2, 1], 'padding': [1, 2], 'dilation': [1, 2], 'groups': 3, 'bias': false},"
      "  {'name': 'bn', 'type': 'BatchNorm2d', 'eps': 0.001, 'momentum': 0.2},"
      "  {'name': 'a1', 'type': 'SiLU'},"
      "  {'name': 'mp', 'type': 'MaxPool2d', 'kernel_size': 3, 'stride': 2, 'padding': 1},"
      "  {'name': 'ap', 'type': 'AvgPool2d', 'kernel_size': [2, 1]},"
      "  {'name': 'ln', 'type': 'LayerNorm', 'normalized_shape': [2, 8], 'eps': 1e-6},"
      "  {'name': 'fl', 'type': 'Flatten', 'start_dim': 2},"
      "  {'name': 'sg', 'type': 'Sigmoid'},"
      "  {'name': 'th', 'type': 'Tanh'},"
      "  {'name': 'dr', 'type': 'Dropout', 'p': 0.25},"
      "  {'name': 'fc', 'type': 'Linear', 'out_features': 5},"
      "  {'name': 'gl', 'type': 'GELU'},"
      "  {'name': 're', 'type': 'ReLU'}]}");
  /* conv: H (17 + 2 - 2 - 1)/2 + 1 = 9, W (20 + 4 - 8 - 1)/1 + 1 = 16 */
  assert_node_shape(s, "c1", "[N, 6, 9, 16]", 6 * 1 * 3 * 5);
  assert_node_shape(s, "bn", "[N, 6, 9, 16]", 12);
  assert_node_shape(s, "mp", "[N, 6, 5, 8]", 0);
  assert_node_shape(s, "ap", "[N, 6, 2, 8]", 0);
  assert_node_shape(s, "ln", "[N, 6, 2, 8]", 32);
  assert_node_shape(s, "fl", "[N, 6, 16]", 0);
  assert_node_shape(s, "fc", "[N, 6, 5]", 85);
  assert_node_shape(s, "re", "[N, 6, 5]", 0);
  g_assert_cmpint(em_spec_buffer_count(s), ==, 13);
  em_spec_free(s);

  s = parse_ok("{'name': 'emb', 'input': {'shape': [12], 'dtype': 'i64'},"
               " 'nodes': ["
               "  {'name': 'emb', 'type': 'Embedding', 'num_embeddings': 100, 'embedding_dim': 8},"
               "  {'name': 'flat', 'type': 'Flatten', 'start_dim': -2},"
               "  {'name': 'fc', 'type': 'Linear', 'out_features': 3}]}");
  g_assert_cmpint(em_spec_input_dtype(s), ==, EM_DTYPE_I64);
  assert_node_shape(s, "emb", "[N, 12, 8]", 800);
  assert_node_shape(s, "flat", "[N, 96]", 0);
  g_assert_cmpint(em_spec_param_count(s), ==, 800 + 291);
  em_spec_free(s);
}

static void test_summary(void) {
  em_spec *s = parse_ok(mlp_spec);
  char small[16];
  size_t need = em_spec_format_summary(s, small, sizeof small);
  g_assert_cmpuint(need, >, sizeof small);
  g_assert_cmpuint(strlen(small), ==, sizeof small - 1);
  char *buf = g_malloc(need + 1);
  g_assert_cmpuint(em_spec_format_summary(s, buf, need + 1), ==, need);
  g_assert_cmpuint(strlen(buf), ==, need);
  const char *want[] = {"fmnist-mlp", "name", "type", "output shape", "params",
                        "fc1", "Linear", "[N, 256]", "200,960", "235,146", "[N, 1, 28, 28]"};
  for (size_t i = 0; i < G_N_ELEMENTS(want); i++)
    if (!strstr(buf, want[i])) g_error("summary lacks '%s':\n%s", want[i], buf);
  g_assert_null(strstr(buf, "inputs")); /* sequential: no inputs column */
  if (g_test_verbose()) g_printerr("%s", buf);

  FILE *f = tmpfile();
  em_error err = {0};
  g_assert_cmpint(em_spec_print_summary(s, f, &err), ==, EM_OK);
  rewind(f);
  char *back = g_malloc(need + 1);
  g_assert_cmpuint(fread(back, 1, need + 1, f), ==, need);
  back[need] = '\0';
  g_assert_cmpstr(back, ==, buf);
  fclose(f);
  g_free(back);
  g_free(buf);
  em_spec_free(s);
}

/* ---- registry and a plugin-style type --------------------------------------------- */

static const em_attr_desc scale_attrs[] = {
    {"factor", EM_ATTR_FLOAT, false, 2.0, -100, 100, "multiplier", NULL},
};

static em_status scale_infer(const em_layer_node *node, int n_in, const em_shape *in,
                             em_shape *out, int *n_params, em_param_decl *params, em_error *err) {
  *out = *in;
  *n_params = 0;
  return EM_OK;
}

static em_tensor *scale_forward(const em_layer_node *node, int n_in, em_tensor **in,
                                em_tensor **params, const em_forward_ctx *ctx) {
  return em_mul_scalar(in[0], em_attr_float(node, 0));
}

static const em_layer_type scale_type = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "TestScale",
    .category = "test",
    .help = "x * factor",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 1,
    .attrs = scale_attrs,
    .infer = scale_infer,
    .forward = scale_forward,
};

static void test_registry(void) {
  const char *builtin[] = {"Linear",  "Conv2d",    "BatchNorm2d", "LayerNorm", "Dropout",
                           "ReLU",    "GELU",      "SiLU",        "Sigmoid",   "Tanh",
                           "MaxPool2d", "AvgPool2d", "Flatten",   "Embedding", "Add"};
  g_assert_cmpint(em_layer_type_count(), >=, (int)G_N_ELEMENTS(builtin));
  for (size_t i = 0; i < G_N_ELEMENTS(builtin); i++) {
    const em_layer_type *t = em_layer_type_find(builtin[i]);
    g_assert_nonnull(t);
    g_assert_cmpstr(t->name, ==, builtin[i]);
    g_assert_nonnull(t->category);
    g_assert_nonnull(t->help);
  }
  g_assert_null(em_layer_type_find("NoSuchLayer"));
  g_assert_null(em_layer_type_at(-1));
  g_assert_null(em_layer_type_at(em_layer_type_count()));

  em_error err = {0};
  int before = em_layer_type_count();
  g_assert_cmpint(em_layer_register(&scale_type, &err), ==, EM_OK);
  g_assert_cmpint(em_layer_type_count(), ==, before + 1);
  g_assert_true(em_layer_type_at(before) == &scale_type);
  g_assert_cmpint(em_layer_register(&scale_type, &err), !=, EM_OK);
  g_assert_nonnull(strstr(err.msg, "already registered"));
  em_layer_type old = scale_type;
  old.name = "TestOld";
  old.api_version = 99;
  g_assert_cmpint(em_layer_register(&old, &err), ==, EM_ERR_UNSUPPORTED);
  g_assert_nonnull(strstr(err.msg, "layer API 99"));

  em_spec *s = parse_ok("{'name': 'p', 'input': {'shape': [4]}, 'nodes': ["
                        " {'name': 's', 'type': 'TestScale', 'factor': 3},"
                        " {'name': 'fc', 'type': 'Linear', 'out_features': 2}]}");
  assert_node_shape(s, "s", "[N, 4]", 0);
  em_spec_free(s);
  EXPECT_ERROR("{'name': 'p', 'input': {'shape': [4]}, 'nodes': ["
               " {'name': 's', 'type': 'TestScale', 'factr': 3}]}",
               "node 's' (TestScale): unknown attribute 'factr' (did you mean 'factor'?)");
}

/* ---- errors --------------------------------------------------------------------- */

#define HEAD "{'name': 'm', 'input': {'shape': [1, 28, 28]}, 'nodes': ["
#define FLAT "{'name': 'flatten', 'type': 'Flatten'}"

static void test_errors_syntax(void) {
  EXPECT_ERROR("{'name': 'm', 'nodes': [}", "bad.json:1:", "not valid JSON");
  EXPECT_ERROR("[1, 2]", "a spec must be a JSON object");
  EXPECT_ERROR("{'name': 'm', 'name': 'n'}", "not valid JSON", "duplicate");
  em_error err = {0};
  g_assert_null(em_spec_load("/nonexistent/spec.json", &err));
  g_assert_cmpint(err.status, ==, EM_ERR_IO);
  g_assert_nonnull(strstr(err.msg, "cannot open spec '/nonexistent/spec.json'"));
}

static void test_errors_unknown_keys(void) {
  EXPECT_ERROR(HEAD FLAT "], 'nodez': []}", "unknown key 'nodez' at the top level",
               "known: name, description, input, nodes, output, loss, training");
  EXPECT_ERROR("{'name': 'm', 'input': {'shape': [4], 'dtyp': 'f32'}, 'nodes': [" FLAT "]}",
               "unknown key 'dtyp' in \"input\"");
  EXPECT_ERROR(HEAD "{'name': 'conv1', 'type': 'Conv2d', 'out_channels': 8, 'kernel': 3}]}",
               "node 'conv1' (Conv2d): unknown attribute 'kernel'",
               "known: out_channels, kernel_size, stride, padding, dilation, groups, bias");
  EXPECT_ERROR(HEAD "{'name': 'conv1', 'type': 'Conv2d', 'out_channels': 8, 'kernal_size': 3}]}",
               "unknown attribute 'kernal_size' (did you mean 'kernel_size'?)");
  EXPECT_ERROR(HEAD "{'name': 'r', 'type': 'ReLU', 'inplace': true}]}",
               "node 'r' (ReLU): unknown attribute 'inplace'; ReLU takes no attributes");
  EXPECT_ERROR(HEAD "{'name': 'c', 'type': 'Conv2D', 'out_channels': 8}]}",
               "node 'c': unknown layer type 'Conv2D' (did you mean 'Conv2d'?)",
               "known: Linear, Conv2d");
  EXPECT_ERROR(HEAD "{'name': 'c', 'type': 'Hologram'}]}",
               "node 'c': unknown layer type 'Hologram'; known:");
  EXPECT_ERROR("{'name': 'm', 'input': {'shape': [4], 'dtype': 'f16'}, 'nodes': [" FLAT "]}",
               "input \"dtype\" 'f16' is not supported");
}

/* A language model's "tokenizer": byte or char with its vocabulary (ids
 * are places in it), kept by the spec; what it refuses. */
#define LM(tok) "{'name': 'lm', 'input': {'shape': [4], 'dtype': 'i64'}, " tok ", 'nodes': [" \
    "{'name': 'e', 'type': 'Embedding', 'num_embeddings': 5, 'embedding_dim': 2}]}"
static void test_tokenizer(void) {
  em_spec *s = parse_ok(LM("'tokenizer': {'type': 'byte'}"));
  g_assert_nonnull(em_spec_tokenizer(s));
  g_assert_cmpint(em_tokenizer_kind_of(em_spec_tokenizer(s)), ==, EM_TOKENIZER_BYTE);
  g_assert_cmpint(em_tokenizer_vocab_size(em_spec_tokenizer(s)), ==, 256);
  em_spec_free(s);
  s = parse_ok(LM("'tokenizer': {'type': 'char', 'vocab': 'ba\\n\\u00e9'}"));
  const em_tokenizer *t = em_spec_tokenizer(s);
  g_assert_cmpint(em_tokenizer_vocab_size(t), ==, 4);
  char b[4];
  g_assert_cmpint(em_tokenizer_decode(t, 0, b), ==, 1);
  g_assert_cmpint(b[0], ==, 'b');
  g_assert_cmpint(em_tokenizer_decode(t, 2, b), ==, 1);
  g_assert_cmpint(b[0], ==, '\n');
  g_assert_cmpint(em_tokenizer_decode(t, 3, b), ==, 2); /* U+00E9 */
  char *text = json_dumps(em_spec_json(s), 0); /* the document keeps it */
  em_spec *c = em_spec_parse(text, "again", NULL);
  free(text);
  g_assert_cmpint(em_tokenizer_vocab_size(em_spec_tokenizer(c)), ==, 4);
  em_spec_free(c);
  em_spec_free(s);
  s = parse_ok(LM("'tokenizer': {'type': 'char'}")); /* its vocabulary still to come */
  g_assert_cmpint(em_tokenizer_vocab_size(em_spec_tokenizer(s)), ==, 0);
  em_spec_free(s);
  s = parse_ok(mlp_spec);
  g_assert_null(em_spec_tokenizer(s));
  em_spec_free(s);
  EXPECT_ERROR(LM("'tokenizer': 'char'"), "\"tokenizer\" must be an object");
  EXPECT_ERROR(LM("'tokenizer': {'type': 'word'}"), "needs a \"type\": \"byte\"", "\"char\"");
  EXPECT_ERROR(LM("'tokenizer': {'type': 'char', 'vocb': 'ab'}"),
               "unknown key 'vocb' in \"tokenizer\"; known: type, vocab");
  EXPECT_ERROR(LM("'tokenizer': {'type': 'byte', 'vocab': 'ab'}"), "byte tokenizer has no "
               "vocabulary");
  EXPECT_ERROR(LM("'tokenizer': {'type': 'char', 'vocab': ['a', 'b']}"), "\"vocab\" must be a "
               "string");
  EXPECT_ERROR(LM("'tokenizer': {'type': 'char', 'vocab': 'abca'}"), "\"tokenizer\": ",
               "U+0061 'a' twice");
  EXPECT_ERROR("{'name': 'm', 'input': {'shape': [4]}, 'tokenizer': {'type': 'byte'}, 'nodes': ["
               "{'name': 'f', 'type': 'ReLU'}]}", "a tokenizer is for a model of token ids");
}

static void test_errors_graph(void) {
  EXPECT_ERROR(HEAD FLAT ", {'name': 'flatten', 'type': 'ReLU'}]}",
               "node 'flatten': duplicate name (nodes[0] and nodes[1])");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'fc', 'type': 'Linear', 'out_features': 3,"
                         " 'inputs': ['flaten']}]}",
               "node 'fc' (Linear): unknown input 'flaten' (did you mean 'flatten'?)");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'fc', 'type': 'Linear', 'out_features': 3,"
                         " 'inputs': ['zzz']}]}",
               "node 'fc' (Linear): unknown input 'zzz'");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'fc', 'type': 'Linear', 'out_features': 3,"
                         " 'inputs': ['fc2']}, {'name': 'fc2', 'type': 'ReLU', 'inputs': ['fc']}]}",
               "node 'fc' (Linear): input 'fc2' is defined later", "cycles");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'fc', 'type': 'ReLU', 'inputs': ['fc']}]}",
               "node 'fc' (ReLU): lists itself as an input");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'sum', 'type': 'Add'}]}",
               "node 'sum' (Add): needs at least 2 inputs");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'sum', 'type': 'Add', 'inputs': ['flatten']}]}",
               "node 'sum' (Add): takes 2 to 16 inputs, got 1");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'r', 'type': 'ReLU', 'inputs': ['flatten', 'input']}]}",
               "node 'r' (ReLU): takes 1 input, got 2");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'r', 'type': 'ReLU', 'inputs': 'flatten'}]}",
               "node 'r' (ReLU): \"inputs\" must be a list of node names, got a string");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'r', 'type': 'ReLU'}], 'output': 'relu'}",
               "\"output\" names 'relu', which is not a node");
  EXPECT_ERROR(HEAD "]}", "\"nodes\" is empty");
  EXPECT_ERROR(HEAD "{'name': 'fc.1', 'type': 'ReLU'}]}", "may only hold letters");
  EXPECT_ERROR(HEAD "{'name': 'input', 'type': 'ReLU'}]}", "'input' is reserved");
}

static void test_errors_fields(void) {
  EXPECT_ERROR("{'input': {'shape': [4]}, 'nodes': [" FLAT "]}", "missing \"name\"");
  EXPECT_ERROR("{'name': 3, 'input': {'shape': [4]}, 'nodes': [" FLAT "]}",
               "\"name\" must be a non-empty string, got an integer");
  EXPECT_ERROR("{'name': 'm', 'nodes': [" FLAT "]}", "missing \"input\"");
  EXPECT_ERROR("{'name': 'm', 'input': {'shape': [4]}}", "missing \"nodes\"");
  EXPECT_ERROR("{'name': 'm', 'input': {'shape': [4]}, 'nodes': {}}",
               "\"nodes\" must be a list, got an object");
  EXPECT_ERROR("{'name': 'm', 'input': {'shape': '4'}, 'nodes': [" FLAT "]}",
               "input \"shape\" must be a list of integers, got a string");
  EXPECT_ERROR("{'name': 'm', 'input': {}, 'nodes': [" FLAT "]}", "\"input\" lacks \"shape\"");
  EXPECT_ERROR(HEAD "{'type': 'ReLU'}]}", "nodes[0] has no \"name\"");
  EXPECT_ERROR(HEAD "{'name': 'r'}]}", "node 'r': has no \"type\"");
  EXPECT_ERROR(HEAD "'relu']}", "nodes[0] must be an object, got a string");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'fc', 'type': 'Linear'}]}",
               "node 'fc' (Linear): missing required attribute 'out_features'");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'fc', 'type': 'Linear', 'out_features': '256'}]}",
               "node 'fc' (Linear): attribute 'out_features' must be an integer, got a string");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'fc', 'type': 'Linear', 'out_features': 25.5}]}",
               "attribute 'out_features' must be an integer, got a fractional number");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'fc', 'type': 'Linear', 'out_features': 5, 'bias': 1}]}",
               "attribute 'bias' must be true or false, got an integer");
  EXPECT_ERROR(HEAD "{'name': 'c', 'type': 'Conv2d', 'out_channels': 4, 'kernel_size': [3, 3, 3]}]}",
               "node 'c' (Conv2d): attribute 'kernel_size' must be an integer or a list [h, w]");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'd', 'type': 'Dropout', 'p': 'half'}]}",
               "attribute 'p' must be a number, got a string");
  EXPECT_ERROR(HEAD FLAT "], 'loss': 'mse'}", "\"loss\" must be an object, got a string");
  EXPECT_ERROR(HEAD FLAT "], 'training': [1]}", "\"training\" must be an object, got an array");
}

static void test_errors_sizes(void) {
  EXPECT_ERROR(HEAD FLAT ", {'name': 'fc', 'type': 'Linear', 'out_features': 0}]}",
               "node 'fc' (Linear): attribute 'out_features' must be positive, got 0");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'fc', 'type': 'Linear', 'out_features': -3}]}",
               "attribute 'out_features' must be positive, got -3");
  EXPECT_ERROR("{'name': 'm', 'input': {'shape': [1, 0]}, 'nodes': [" FLAT "]}",
               "input \"shape\"[1] must be positive, got 0");
  EXPECT_ERROR(HEAD "{'name': 'c', 'type': 'Conv2d', 'out_channels': 4, 'kernel_size': [3, 0]}]}",
               "node 'c' (Conv2d): attribute 'kernel_size' must be positive, got 0");
  EXPECT_ERROR(HEAD "{'name': 'c', 'type': 'Conv2d', 'out_channels': 4, 'kernel_size': 3,"
                    " 'padding': -1}]}",
               "attribute 'padding' must not be negative, got -1");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'd', 'type': 'Dropout', 'p': 1.5}]}",
               "node 'd' (Dropout): attribute 'p' must be between 0 and 1, got 1.5");
  /* absurd sizes are refused before anything is allocated */
  EXPECT_ERROR(HEAD FLAT ", {'name': 'fc', 'type': 'Linear', 'out_features': 1000000000000}]}",
               "node 'fc' (Linear): attribute 'out_features' is absurdly large");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'fc', 'type': 'Linear', 'out_features': 1000000000}]}",
               "node 'fc' (Linear): parameter 'fc.weight' of shape [1000000000, 784] is "
               "absurdly large");
  EXPECT_ERROR("{'name': 'm', 'input': {'shape': [32768]}, 'nodes': ["
               " {'name': 'fc1', 'type': 'Linear', 'out_features': 32768},"
               " {'name': 'fc2', 'type': 'Linear', 'out_features': 32768}]}",
               "node 'fc2' (Linear): the model reaches", "over the limit of 2^31");
  EXPECT_ERROR("{'name': 'm', 'input': {'shape': [100000, 100000]}, 'nodes': [" FLAT "]}",
               "input \"shape\" is absurdly large");
  EXPECT_ERROR("{'name': 'm', 'input': {'shape': [3, 4096, 4096]}, 'nodes': ["
               " {'name': 'c', 'type': 'Conv2d', 'out_channels': 1024, 'kernel_size': 1}]}",
               "node 'c' (Conv2d): output shape [N, 1024, 4096, 4096] is absurdly large");
}

static void test_errors_shapes(void) {
  EXPECT_ERROR(HEAD "{'name': 'c', 'type': 'Conv2d', 'out_channels': 32, 'kernel_size': 3,"
                    " 'padding': 1}, {'name': 'p', 'type': 'MaxPool2d', 'kernel_size': 4},"
                    " {'name': 'fc2', 'type': 'Linear', 'out_features': 10}]}",
               "node 'fc2' (Linear): expects input of shape [N, D]", "got [N, 32, 7, 7]");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'fc', 'type': 'Linear', 'in_features': 700,"
                         " 'out_features': 10}]}",
               "node 'fc' (Linear): in_features is 700 but its input [N, 784] has 784 features");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'c', 'type': 'Conv2d', 'out_channels': 4, 'kernel_size': 3}]}",
               "node 'c' (Conv2d): expects input of shape [N, C, H, W], got [N, 784]");
  EXPECT_ERROR("{'name': 'm', 'input': {'shape': [3, 8, 8]}, 'nodes': ["
               " {'name': 'c', 'type': 'Conv2d', 'out_channels': 4, 'kernel_size': 3, 'groups': 2}]}",
               "node 'c' (Conv2d): groups=2 must divide both in_channels (3) and out_channels (4)");
  EXPECT_ERROR("{'name': 'm', 'input': {'shape': [1, 2, 2]}, 'nodes': ["
               " {'name': 'c', 'type': 'Conv2d', 'out_channels': 4, 'kernel_size': 3}]}",
               "node 'c' (Conv2d): input [N, 1, 2, 2] is too small for kernel_size 3x3");
  EXPECT_ERROR(HEAD "{'name': 'p', 'type': 'MaxPool2d', 'kernel_size': 2, 'padding': 2}]}",
               "node 'p' (MaxPool2d): padding 2 must be at most half of kernel_size 2");
  EXPECT_ERROR(HEAD "{'name': 'p', 'type': 'AvgPool2d', 'kernel_size': 29}]}",
               "node 'p' (AvgPool2d): input [N, 1, 28, 28] is too small");
  EXPECT_ERROR(HEAD "{'name': 'bn', 'type': 'BatchNorm2d', 'num_features': 3}]}",
               "node 'bn' (BatchNorm2d): num_features is 3 but its input [N, 1, 28, 28] has 1");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'bn', 'type': 'BatchNorm2d'}]}",
               "node 'bn' (BatchNorm2d): expects input of shape [N, C, H, W], got [N, 784]");
  EXPECT_ERROR(HEAD "{'name': 'ln', 'type': 'LayerNorm', 'normalized_shape': [27, 28]}]}",
               "node 'ln' (LayerNorm): normalized_shape [27, 28] does not match the last dims "
               "of its input [N, 1, 28, 28]");
  EXPECT_ERROR(HEAD "{'name': 'f', 'type': 'Flatten', 'start_dim': 0}]}",
               "node 'f' (Flatten): start_dim 0 would merge the batch dimension");
  EXPECT_ERROR(HEAD "{'name': 'f', 'type': 'Flatten', 'start_dim': 5}]}",
               "node 'f' (Flatten): start_dim 5 / end_dim -1 are out of range");
  EXPECT_ERROR(HEAD FLAT ", {'name': 'fc', 'type': 'Linear', 'out_features': 10},"
                         " {'name': 'sum', 'type': 'Add', 'inputs': ['flatten', 'fc']}]}",
               "node 'sum' (Add): inputs must have equal shapes, but 'flatten' is [N, 784] and "
               "'fc' is [N, 10]");
  EXPECT_ERROR(HEAD "{'name': 'e', 'type': 'Embedding', 'num_embeddings': 10, 'embedding_dim': 4}]}",
               "node 'e' (Embedding): expects i64 indices, but its input 'input' gives floats");
  EXPECT_ERROR("{'name': 'm', 'input': {'shape': [5], 'dtype': 'i64'}, 'nodes': ["
               " {'name': 'fc', 'type': 'Linear', 'out_features': 3}]}",
               "node 'fc' (Linear): expects floats, but its input 'input' holds i64 indices");
}

/* Issue 32, item 4: numbers in their shortest form that reads back equal
 * (0.1, not 0.10000000000000001), '.' and ".0" as JSON wants them. */
static void test_real_format(void) {
  const struct {
    double v;
    const char *text;
  } cases[] = {{0.1, "0.1"},   {0.9, "0.9"},       {1.0, "1.0"},       {-2.0, "-2.0"},
               {1e-6, "1e-6"}, {0.001, "0.001"},   {1e20, "1e20"},     {0.5e-300, "5e-301"},
               {1.0 / 3, "0.3333333333333333"},    {0.1 + 0.2, "0.30000000000000004"},
               {123456.789, "123456.789"}};
  char out[64];
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_assert_true(em_json_real_format(cases[i].v, out, sizeof out));
    g_assert_cmpstr(out, ==, cases[i].text);
  }
  g_assert_false(em_json_real_format(1.0 / 0.0, out, sizeof out));
  /* every double reads back equal, in at most 17 significant digits */
  GRand *r = g_rand_new_with_seed(32);
  for (int i = 0; i < 20000; i++) {
    union {
      guint64 u;
      double d;
    } x = {.u = ((guint64)g_rand_int(r) << 32) | g_rand_int(r)};
    if (!isfinite(x.d)) continue;
    g_assert_true(em_json_real_format(x.d, out, sizeof out));
    g_assert_true(strtod(out, NULL) == x.d);
  }
  g_rand_free(r);
}

/* Issue 32, item 4: a spec written back is the text it came from while
 * nothing changed, whatever its layout; changed, it is laid out as the
 * zoo's files are (their own text, for the zoo's documents), with a final
 * newline. */
static void test_spec_format(void) {
  const char *odd = "{ \"name\":\"m\",\n\t\"input\": {\"shape\": [4]},\"nodes\": [{\"name\": \"fc\", "
                    "\"type\": \"Linear\", \"out_features\": 3}], \"training\": {\"lr\": 0.1}}";
  json_t *doc = json_loads(odd, 0, NULL);
  char *t = em_spec_format(doc, odd);
  g_assert_cmpstr(t, ==, odd); /* unchanged: byte for byte, no newline added */
  free(t);
  json_object_set_new(json_object_get(doc, "training"), "momentum", json_real(0.9));
  t = em_spec_format(doc, odd);
  g_assert_cmpstr(t, ==,
                  "{\n  \"name\": \"m\",\n  \"input\": {\"shape\": [4]},\n"
                  "  \"nodes\": [{\"name\": \"fc\", \"type\": \"Linear\", \"out_features\": 3}],\n"
                  "  \"training\": {\"lr\": 0.1, \"momentum\": 0.9}\n}\n");
  free(t);
  json_decref(doc);
  const char *root = g_getenv("EMBER_SOURCE_ROOT");
  if (!root) {
    g_test_skip("EMBER_SOURCE_ROOT not set: the zoo's files not checked");
    return;
  }
  const char *zoo[] = {"fmnist-mlp.json", "fmnist-cnn.json"};
  for (size_t i = 0; i < G_N_ELEMENTS(zoo); i++) {
    char *path = g_build_filename(root, "data", "models", zoo[i], NULL), *text = NULL;
    g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
    json_t *d = json_loads(text, 0, NULL);
    g_assert_nonnull(d);
    char *w = em_spec_format(d, NULL);
    g_assert_cmpstr(w, ==, text);
    free(w);
    json_decref(d);
    g_free(text);
    g_free(path);
  }
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/nn/spec/mlp", test_mlp);
  g_test_add_func("/engine/nn/spec/cnn", test_cnn);
  g_test_add_func("/engine/nn/spec/zoo-files", test_zoo_files);
  g_test_add_func("/engine/nn/spec/real-format", test_real_format);
  g_test_add_func("/engine/nn/spec/format", test_spec_format);
  g_test_add_func("/engine/nn/spec/residual", test_residual);
  g_test_add_func("/engine/nn/spec/all-types", test_all_types);
  g_test_add_func("/engine/nn/spec/repeat", test_repeat);
  g_test_add_func("/engine/nn/spec/tie-weight", test_tie_weight);
  g_test_add_func("/engine/nn/spec/tokenizer", test_tokenizer);
  g_test_add_func("/engine/nn/spec/summary", test_summary);
  g_test_add_func("/engine/nn/registry", test_registry);
  g_test_add_func("/engine/nn/spec/errors/syntax", test_errors_syntax);
  g_test_add_func("/engine/nn/spec/errors/unknown-keys", test_errors_unknown_keys);
  g_test_add_func("/engine/nn/spec/errors/graph", test_errors_graph);
  g_test_add_func("/engine/nn/spec/errors/fields", test_errors_fields);
  g_test_add_func("/engine/nn/spec/errors/sizes", test_errors_sizes);
  g_test_add_func("/engine/nn/spec/errors/shapes", test_errors_shapes);
  return g_test_run();
}
