/* bad-plugins.c: plugins the host must refuse, built as shared modules
 * from this one file with -DBAD_<KIND>: a table for another API version,
 * no entry point, an init that registers a layer type and a metric and
 * then fails (both must be rolled back), one that registers a layer
 * named like a built-in (after a fresh one, which must not stay either),
 * a version with a space (run tags split on spaces), an init that calls
 * em_layer_register itself (refused: the type would outlive the refused
 * module), and one that keeps its host and adds a metric after init
 * (bad_late_add, called by the test: an error, not a write into the
 * host's ended init), and one whose metric takes a run's own key
 * (test_accuracy: it would be written over the run's), and one that
 * loads with a layer whose ONNX mapping misbehaves as bad_onnx_mode says
 * (the exporter must refuse what no ONNX reader takes), a metric that
 * gives NaN (left out of the evaluation with a warning), and a dataset
 * kind "test-odd-data" whose test split is empty, or (a folder named
 * "huge") whose length is 2^50. */
#include "em-plugin.h"

#include <string.h>

/* Each variant uses some of what follows. */
#define UNUSED __attribute__((unused))

static em_status id_infer(const em_layer_node *node, int n_in, const em_shape *in, em_shape *out,
                          int *n_params, em_param_decl *params, em_error *err) {
  *out = in[0];
  *n_params = 0;
  return EM_OK;
}

static em_tensor *id_forward(const em_layer_node *node, int n_in, em_tensor **in,
                             em_tensor **params, const em_forward_ctx *ctx) {
  return in[0];
}

#define LAYER(var, nm)                                                                   \
  UNUSED static const em_layer_type var = {.api_version = EM_LAYER_API_VERSION, .name = nm,      \
                                    .category = "test", .help = "identity",              \
                                    .min_inputs = 1, .max_inputs = 1, .infer = id_infer, \
                                    .forward = id_forward}

LAYER(rolled_back, "TestRolledBack");
LAYER(fresh, "TestFreshBeforeDuplicate");
LAYER(duplicate, "Linear");

UNUSED static em_status zero(int64_t n, int k, const float *logits, const int64_t *labels,
                             double *value, em_error *err) {
  *value = 0;
  return EM_OK;
}
UNUSED static const em_metric_type rolled_back_metric = {"test_rolled_back_metric", "zero", zero};

UNUSED static em_status init_fails(em_plugin_host *h, em_error *err) {
  em_plugin_add_layer(h, &rolled_back, NULL, err);
  em_plugin_add_metric(h, &rolled_back_metric, err);
  return em_error_set(err, EM_ERR_INVALID, "deliberately failing (test)");
}

UNUSED static em_status init_duplicate(em_plugin_host *h, em_error *err) {
  em_status st = em_plugin_add_layer(h, &fresh, NULL, err);
  if (st == EM_OK) st = em_plugin_add_layer(h, &duplicate, NULL, err);
  return st;
}

UNUSED static em_status init_direct(em_plugin_host *h, em_error *err) {
  return em_layer_register(&fresh, err);
}

UNUSED static em_plugin_host *kept;
UNUSED static em_status init_keep(em_plugin_host *h, em_error *err) {
  kept = h;
  return EM_OK;
}

UNUSED static const em_metric_type own_key_metric = {"test_accuracy", "zero", zero};
UNUSED static em_status init_own_key(em_plugin_host *h, em_error *err) {
  return em_plugin_add_metric(h, &own_key_metric, err);
}

#if defined(BAD_ODD_ONNX)
static int onnx_mode;
EM_PLUGIN_EXPORT void bad_onnx_mode(int mode) { onnx_mode = mode; }

static em_status odd_onnx(em_onnx_graph *g, const em_layer_node *node, int n_in,
                          const char *const *inputs, const em_shape *in_shapes,
                          const char *output, int n_params, em_tensor *const *params,
                          const char *const *param_names, em_error *err) {
  const char *missing[1] = {"no-such-value"};
  switch (onnx_mode) {
  case 0: em_onnx_graph_node(g, "Identity", 1, inputs, output); break; /* fine */
  case 1: break;                                                      /* writes nothing */
  case 2: /* writes its output twice */
    em_onnx_graph_node(g, "Identity", 1, inputs, output);
    em_onnx_graph_node(g, "Identity", 1, inputs, output);
    break;
  case 3: em_onnx_graph_node(g, "Identity", 1, missing, output); break; /* reads nothing */
  case 4: em_onnx_graph_node(g, NULL, 1, inputs, output); break;       /* no op_type */
  case 5: { /* an initializer named like the graph input */
    int64_t v[1] = {1};
    em_onnx_graph_initializer_i64s(g, inputs[0], 1, v);
    em_onnx_graph_node(g, "Identity", 1, inputs, output);
    break;
  }
  case 6: return EM_ERR_UNSUPPORTED; /* fails without a message */
  }
  return EM_OK;
}

LAYER(odd_onnx_layer, "TestOddOnnx");
static em_status nan_metric(int64_t n, int k, const float *logits, const int64_t *labels,
                            double *value, em_error *err) {
  *value = 0.0 / 0.0;
  return EM_OK;
}
static const em_metric_type nan_metric_type = {"test_nan_metric", "NaN", nan_metric};

static int64_t odd_len(const void *impl) { return *(const int64_t *)impl; }
static int odd_shape(const void *impl, int64_t *shape) {
  shape[0] = 4;
  return 1;
}
static int odd_classes(const void *impl) { return 2; }
static em_status odd_get(const void *impl, int64_t i, float *x, int64_t *y, em_error *err) {
  for (int k = 0; k < 4; k++) x[k] = (float)((i + k) % 3);
  *y = i % 2;
  return EM_OK;
}
static const em_dataset_vtable odd_vt = {.kind = "test-odd-data", .len = odd_len,
                                         .sample_shape = odd_shape, .num_classes = odd_classes,
                                         .get = odd_get};
static const int64_t len_train = 64, len_test = 0, len_huge = (int64_t)1 << 50;
static em_dataset *odd_open(const char *dir, bool train, const void *options, em_error *err) {
  const char *base = strrchr(dir, '/');
  bool huge = !strcmp(base ? base + 1 : dir, "huge");
  return em_dataset_new(&odd_vt, (void *)(huge ? &len_huge : train ? &len_train : &len_test),
                        err);
}
static const em_dataset_type odd_data = {"test-odd-data", "empty test split, or 2^50", odd_open};

static em_status init_odd_onnx(em_plugin_host *h, em_error *err) {
  em_status st = em_plugin_add_layer(h, &odd_onnx_layer, odd_onnx, err);
  if (!st) st = em_plugin_add_metric(h, &nan_metric_type, err);
  return st ? st : em_plugin_add_dataset(h, &odd_data, err);
}
#endif

#if defined(BAD_LATE_ADD)
EM_PLUGIN_EXPORT em_status bad_late_add(em_error *err) {
  return em_plugin_add_metric(kept, &rolled_back_metric, err);
}
#endif

#if defined(BAD_VERSION)
static const em_plugin_table table = {99, "bad-version", "0", "",
                                      init_duplicate};
#elif defined(BAD_INIT)
static const em_plugin_table table = {EM_PLUGIN_API_VERSION, "bad-init", "0", "", init_fails};
#elif defined(BAD_DUPLICATE)
static const em_plugin_table table = {EM_PLUGIN_API_VERSION, "bad-duplicate", "0", "",
                                      init_duplicate};
#elif defined(BAD_VERSION_SPACE)
static const em_plugin_table table = {EM_PLUGIN_API_VERSION, "bad-version-space", "1.0 beta", "",
                                      init_keep};
#elif defined(BAD_DIRECT_REGISTER)
static const em_plugin_table table = {EM_PLUGIN_API_VERSION, "bad-direct-register", "0", "",
                                      init_direct};
#elif defined(BAD_RESERVED_METRIC)
static const em_plugin_table table = {EM_PLUGIN_API_VERSION, "bad-reserved-metric", "0", "",
                                      init_own_key};
#elif defined(BAD_ODD_ONNX)
static const em_plugin_table table = {EM_PLUGIN_API_VERSION, "bad-odd-onnx", "0", "",
                                      init_odd_onnx};
#elif defined(BAD_LATE_ADD)
static const em_plugin_table table = {EM_PLUGIN_API_VERSION, "bad-late-add", "0",
                                      "two\nlines", init_keep};
#endif

#if defined(BAD_NO_ENTRY)
EM_PLUGIN_EXPORT int ember_plugin_entry_misspelt(void) { return 0; }
#else
EM_PLUGIN_EXPORT const em_plugin_table *ember_plugin_entry(void) { return &table; }
#endif
