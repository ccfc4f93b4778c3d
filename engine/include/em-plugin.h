/* em-plugin.h: the plugin API of libember, and the host that loads plugins.
 *
 * A plugin is a shared module (meson's shared_module) that exports one
 * function, ember_plugin_entry, returning a versioned table. The host
 * checks the table's api_version before anything else, then calls its
 * init with a host handle; init registers what the plugin brings through
 * the em_plugin_add_* functions below:
 *
 *   layer types   the em_layer_type vtable of em-nn.h (attributes, shape
 *                 inference, parameter declarations, forward written with
 *                 engine ops so backward comes free), plus an optional
 *                 ONNX mapping (em_layer_onnx_fn);
 *   dataset kinds a name and an open function, reachable as
 *                 `--dataset NAME --data-dir DIR` (em_dataset_open_named);
 *   metrics       a name and a function of the evaluation's logits and
 *                 labels over the whole test set, computed at evaluation
 *                 when a spec's "training": {"metrics": [...]} or
 *                 `--metric NAME` asks for it.
 *
 * Registrations are staged and take effect only when init returns EM_OK;
 * a failed init (or one whose registrations clash with a name already
 * taken) leaves nothing behind and the plugin is unloaded. A plugin is
 * never unloaded once it loaded: the registries keep its tables by
 * pointer.
 *
 * Plugins are not linked against libember: the engine functions they call
 * (em_layer_register's neighbours, ops, em_dataset_new, ...) resolve
 * against the executable that loads them, which exports every public
 * engine symbol (linked with --export-dynamic and the whole of libember).
 *
 * A minimal plugin:
 *
 *   static em_status init(em_plugin_host *h, em_error *err) {
 *     return em_plugin_add_layer(h, &my_layer, my_layer_onnx, err);
 *   }
 *   static const em_plugin_table table = {
 *     EM_PLUGIN_API_VERSION, "my-plugin", "1.0", "What it adds", init};
 *   EM_PLUGIN_EXPORT const em_plugin_table *ember_plugin_entry(void) { return &table; }
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "em-data.h"
#include "em-error.h"
#include "em-nn.h"

/* Bumped whenever this header, em_layer_type (EM_LAYER_API_VERSION),
 * em_dataset_vtable or em_metric_type change incompatibly. */
/* 3: em_dataset_vtable grew target_len and token_samples (per-position
 * labels, token samples), read past the end of a version 2 table. */
#define EM_PLUGIN_API_VERSION 3
#define EM_PLUGIN_ENTRY_SYMBOL "ember_plugin_entry"
#define EM_PLUGIN_EXPORT __attribute__((visibility("default")))

typedef struct em_plugin_host em_plugin_host; /* opaque: the load in progress */

typedef struct {
  int api_version;         /* EM_PLUGIN_API_VERSION: first, checked first */
  const char *name;        /* unique among loaded plugins: "seblock" */
  const char *version;     /* the plugin's own version: "1.0" */
  const char *description; /* one line */
  /* Registers what the plugin brings; returns EM_OK, or a status with a
   * message in err (the plugin is then refused with that message). */
  em_status (*init)(em_plugin_host *host, em_error *err);
} em_plugin_table;

typedef const em_plugin_table *(*em_plugin_entry_fn)(void);

/* ---- what a plugin registers ------------------------------------------------ */

/* The ONNX builder a plugin layer's mapping writes into (opaque). Value
 * and node names must be unique in the graph: make intermediates with
 * em_onnx_graph_value. Failures (out of memory) are remembered by the
 * builder and reported by the exporter after the mapping returns. */
typedef struct em_onnx_graph em_onnx_graph;
typedef struct em_onnx_op em_onnx_op; /* a node just added (opaque) */

/* Appends op_type(inputs...) -> output (opset 17); the node is named
 * "<layer node>/<op_type>_<k>". NULL on failure. */
em_onnx_op *em_onnx_graph_node(em_onnx_graph *g, const char *op_type, int n_in,
                                 const char *const *inputs, const char *output);
void em_onnx_graph_attr_int(em_onnx_graph *g, em_onnx_op *n, const char *name, int64_t v);
void em_onnx_graph_attr_float(em_onnx_graph *g, em_onnx_op *n, const char *name, float v);
void em_onnx_graph_attr_ints(em_onnx_graph *g, em_onnx_op *n, const char *name, int k,
                             const int64_t *v);
/* Initializers: a float tensor's values (f32 or f64, written as f32), or
 * an int64 vector (shapes, axes). */
void em_onnx_graph_initializer(em_onnx_graph *g, const char *name, const em_tensor *t);
void em_onnx_graph_initializer_i64s(em_onnx_graph *g, const char *name, int k, const int64_t *v);
/* A fresh value name "<layer node>/<what>_<k>", owned by the builder. */
const char *em_onnx_graph_value(em_onnx_graph *g, const char *what);

/* A plugin layer's ONNX form: nodes from inputs[] (values of the shapes
 * in_shapes, batch dim -1) to the value named output. params holds the
 * node's parameters and buffers in declaration order with their state-dict
 * names (to use as initializer names). Return EM_ERR_UNSUPPORTED with a
 * reason for attribute values it cannot express. */
typedef em_status (*em_layer_onnx_fn)(em_onnx_graph *g, const em_layer_node *node, int n_in,
                                      const char *const *inputs, const em_shape *in_shapes,
                                      const char *output, int n_params, em_tensor *const *params,
                                      const char *const *param_names, em_error *err);

/* A dataset kind: em_dataset_type, em-data.h. */

/* A metric over the evaluation's outputs: logits (N, K) row-major floats
 * (the model's output, in dataset order) and labels (N) in [0, K). Fills
 * *value (a finite number, higher or lower is the metric's business). */
typedef struct {
  const char *name; /* "macro_f1": letters, digits, '_', '-' */
  const char *help; /* one line */
  em_status (*compute)(int64_t n, int k, const float *logits /* (N, K) */,
                       const int64_t *labels /* (N) */, double *value, em_error *err);
} em_metric_type;

/* Called from init only. The tables are kept by pointer (static data of
 * the plugin). Names must not be taken (built-in or another plugin's). */
em_status em_plugin_add_layer(em_plugin_host *h, const em_layer_type *type,
                              em_layer_onnx_fn onnx /* NULL: no ONNX form */, em_error *err);
em_status em_plugin_add_dataset(em_plugin_host *h, const em_dataset_type *kind, em_error *err);
em_status em_plugin_add_metric(em_plugin_host *h, const em_metric_type *metric, em_error *err);

/* ---- the registries (metrics, layer ONNX forms; dataset kinds: em-data.h) -- */
const em_metric_type *em_metric_find(const char *name);
int em_metric_count(void);
const em_metric_type *em_metric_at(int i);
/* The ONNX mapping a plugin gave for a layer type, or NULL. */
em_layer_onnx_fn em_layer_onnx_find(const em_layer_type *type);

/* ---- metrics at evaluation ------------------------------------------------- */
/* Adds a metric every evaluation of this process computes (`--metric`),
 * besides those the model's spec names in "training": {"metrics": [...]}.
 * Fails on a name no loaded plugin provides. */
em_status em_metrics_select(const char *name, em_error *err);
/* Checks a spec's "metrics" value: an array of registered metric names. */
em_status em_metrics_check_json(const json_t *v, em_error *err);

#define EM_EVAL_MAX_METRICS 16
typedef struct {
  char name[64];
  double value;
} em_metric_value;
/* The metrics of the latest evaluation that finished in this process
 * (in the order asked); returns how many (0: none asked). serial, when
 * not NULL, gets a number that grows with every evaluation. */
int em_metrics_last(em_metric_value *out, int cap, int64_t *serial);

/* ---- the host ---------------------------------------------------------------- */
typedef struct {
  char path[1024];
  bool loaded;
  int fd;               /* loaded: the descriptor it was checked on and loaded from, open
                           for the life of the process (hash its bytes with pread: its
                           path may name another file by now); else -1 */
  char reason[1024];    /* why it was refused ("" when loaded) */
  /* from the table (empty when it could not be read) */
  char name[64], version[32], description[256];
  int n_layers, n_datasets, n_metrics;
  const char *layers[16], *datasets[16], *metrics[16]; /* names (loaded only) */
} em_plugin_info;

/* Every file is loaded (both functions below) only when nobody else could
 * have written it: the file and the folder it is in (and, for
 * em_plugins_load_dir, the folder named, when a "*.so" there is a link
 * to a file elsewhere) are owned by the user (effective uid) or root and
 * are not writable by group or others;
 * else it is refused, the reason naming the path, the owner or mode found
 * and what to do. It is opened once (O_NOFOLLOW), checked with fstat and
 * loaded from that descriptor, never by its path again.
 *
 * Loads every "*.so" in dir, in name order. origin says where the folder
 * came from in messages ("--plugin-dir", "EMBER_PLUGIN_PATH", "default",
 * "installed").
 * A missing folder is recorded as searched and is not an error. Refusals
 * are recorded (em_plugin_at) and logged as warnings, never fatal.
 * Returns the number of plugins refused. */
int em_plugins_load_dir(const char *dir, const char *origin);
/* Loads one file; EM_OK, or the refusal's status and message. */
em_status em_plugin_load_file(const char *path, em_error *err);
/* The same, and before the module is mapped (its constructors run then),
 * verify is given the descriptor it will be loaded from (read it with
 * pread: its offset is not promised) and path: anything but EM_OK, with
 * err's message, refuses it. Used to load only the bytes a run recorded
 * (their SHA-256). */
typedef em_status (*em_plugin_verify_fn)(int fd, const char *path, void *user, em_error *err);
em_status em_plugin_load_file_verified(const char *path, em_plugin_verify_fn verify, void *user,
                                       em_error *err);
/* Plugins on demand: load (idempotent: it may be called before, and
 * again) runs the first time a lookup of a layer type, dataset kind or
 * metric by name finds nothing (em_layer_type_find, em_dataset_type_find,
 * em_metric_find), and the lookup is tried again. So a program loads no
 * plugin until something names a type that is not built in. */
void em_plugin_set_loader(void (*load)(void));
/* Every plugin file tried, loaded or refused, in load order. */
int em_plugin_count(void);
const em_plugin_info *em_plugin_at(int i);
/* The folders searched, in order, with their origin. */
int em_plugin_dir_count(void);
const char *em_plugin_dir_at(int i, const char **origin, bool *exists);
/* The plugin that registered a layer type / dataset kind / metric, or NULL
 * (built in, or unknown). */
const char *em_plugin_provider(const char *name);
/* One line for messages about a missing layer type, dataset or metric:
 * "plugin folders searched: A (default), B (--plugin-dir); refused: x.so
 * (reason)". Always NUL-terminated. */
void em_plugin_search_summary(char *buf, size_t n);
