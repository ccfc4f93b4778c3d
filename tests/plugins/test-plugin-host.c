/* test-plugin-host.c: the plugin host and the plugins of plugins/, through
 * the API a third party uses. Bad plugins (API version, no entry point,
 * failing init, a duplicate layer name, a file that is not a shared
 * object) are refused with their reasons and leave nothing registered,
 * while the good ones load; the SEBlock layer's gradients match finite
 * differences (f64) and it exports to ONNX through its mapping; macro-F1
 * gives scikit-learn's value; a spec naming a type nobody provides says
 * where plugins were looked for and which were refused. */
#include <dlfcn.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>

#include "em-export.h"
#include "em-plugin.h"
#include "gradcheck.h"

static const em_plugin_info *find_plugin(const char *file) {
  for (int i = 0; i < em_plugin_count(); i++) {
    const em_plugin_info *p = em_plugin_at(i);
    const char *base = strrchr(p->path, '/');
    if (!strcmp(base ? base + 1 : p->path, file)) return p;
  }
  return NULL;
}

static void assert_refused(const char *file, const char *reason_part) {
  const em_plugin_info *p = find_plugin(file);
  g_assert_nonnull(p);
  g_assert_false(p->loaded);
  if (!strstr(p->reason, reason_part))
    g_error("%s: reason '%s' lacks '%s'", file, p->reason, reason_part);
}

static void test_load(void) {
  const char *bad = g_getenv("EMBER_BAD_PLUGIN_DIR"), *good = g_getenv("EMBER_PLUGIN_DIR");
  g_assert_nonnull(bad);
  g_assert_nonnull(good);
  /* a file that is not a shared object at all */
  g_autofree char *junk = g_build_filename(bad, "not-elf.so", NULL);
  g_assert_true(g_file_set_contents(junk, "not a shared object\n", -1, NULL));
  /* a shared object cut short (a copy that did not finish): dlopen would
   * map its missing segments and die of SIGBUS touching them */
  g_autofree char *good_so = g_build_filename(good, "ember-seblock.so", NULL);
  g_autofree char *so_bytes = NULL;
  gsize so_len = 0;
  g_assert_true(g_file_get_contents(good_so, &so_bytes, &so_len, NULL));
  g_autofree char *cut = g_build_filename(bad, "truncated.so", NULL);
  g_assert_true(g_file_set_contents(cut, so_bytes, 8000, NULL));
  int refused = em_plugins_load_dir(bad, "test");
  g_assert_cmpint(refused, ==, 9);
  assert_refused("bad-reserved-metric.so", "metric name 'test_accuracy' is a run's own");
  assert_refused("bad-version.so", "built for plugin API version 99");
  assert_refused("bad-no-entry.so", "no ember_plugin_entry() function");
  assert_refused("bad-init.so", "init failed: deliberately failing (test)");
  assert_refused("bad-duplicate.so", "layer type 'Linear' is already registered (built in)");
  assert_refused("not-elf.so", "cannot load it");
  assert_refused("truncated.so", "it is truncated (8000 bytes");
  assert_refused("bad-version-space.so", "its version '1.0 beta' is not");
  assert_refused("bad-direct-register.so", "with em_plugin_add_layer from its init");
  /* nothing of the refused ones stayed registered */
  g_assert_null(em_layer_type_find("TestRolledBack"));
  g_assert_null(em_layer_type_find("TestFreshBeforeDuplicate"));
  g_assert_null(em_metric_find("test_rolled_back_metric"));
  /* a plugin that adds after its init is told so (its host is closed) */
  const em_plugin_info *late = find_plugin("bad-late-add.so");
  g_assert_nonnull(late);
  g_assert_true(late->loaded);
  g_assert_cmpstr(late->description, ==, "two lines"); /* one line */
  void *dl = dlopen(late->path, RTLD_NOW | RTLD_NOLOAD);
  g_assert_nonnull(dl);
  em_status (*late_add)(em_error *);
  *(void **)&late_add = dlsym(dl, "bad_late_add");
  g_assert_nonnull(late_add);
  em_error lerr = {0};
  g_assert_cmpint(late_add(&lerr), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(lerr.msg, "may only be called from init"));
  g_assert_null(em_metric_find("test_rolled_back_metric"));
  dlclose(dl);
  g_unlink(cut);

  /* a folder of more "*.so" files than are tried: the first in name order */
  g_autofree char *many = g_dir_make_tmp("ember-plugins-many-XXXXXX", NULL);
  for (int i = 0; i < 66; i++) {
    g_autofree char *f = g_strdup_printf("%s/j%03d.so", many, 65 - i); /* made in reverse */
    g_assert_true(g_file_set_contents(f, "junk", -1, NULL));
  }
  g_assert_cmpint(em_plugins_load_dir(many, "test"), ==, 64);
  g_assert_nonnull(find_plugin("j000.so"));
  g_assert_nonnull(find_plugin("j063.so"));
  g_assert_null(find_plugin("j064.so"));
  for (int i = 0; i < 66; i++) {
    g_autofree char *f = g_strdup_printf("%s/j%03d.so", many, i);
    g_unlink(f);
  }
  g_rmdir(many);

  g_assert_cmpint(em_plugins_load_dir(good, "test"), ==, 0);
  const em_plugin_info *se = find_plugin("ember-seblock.so");
  g_assert_nonnull(se);
  g_assert_true(se->loaded);
  g_assert_cmpint(se->n_layers, ==, 1);
  g_assert_cmpstr(se->layers[0], ==, "SEBlock");
  g_assert_nonnull(em_layer_type_find("SEBlock"));
  g_assert_nonnull(em_layer_onnx_find(em_layer_type_find("SEBlock")));
  g_assert_nonnull(em_dataset_type_find("png-folder"));
  g_assert_nonnull(em_metric_find("macro_f1"));
  g_assert_cmpstr(em_plugin_provider("SEBlock"), ==, "seblock");
  g_assert_cmpstr(em_plugin_provider("macro_f1"), ==, "macro-f1");

  /* the same folder again loads nothing twice; one file again is fine */
  g_assert_cmpint(em_plugins_load_dir(good, "again"), ==, 0);
  g_autofree char *se_path = g_build_filename(good, "ember-seblock.so", NULL);
  em_error err = {0};
  g_assert_cmpint(em_plugin_load_file(se_path, &err), ==, EM_OK);
  /* a copy of it under another file name is a duplicate plugin */
  g_autofree char *copy_dir = g_dir_make_tmp("ember-plugins-XXXXXX", NULL);
  g_autofree char *copy = g_build_filename(copy_dir, "seblock-copy.so", NULL);
  g_autofree char *bytes = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(se_path, &bytes, &len, NULL));
  g_assert_true(g_file_set_contents(copy, bytes, (gssize)len, NULL));
  g_assert_cmpint(em_plugin_load_file(copy, &err), !=, EM_OK);
  g_assert_nonnull(strstr(err.msg, "a plugin named 'seblock' is already loaded"));
  g_unlink(copy);
  g_rmdir(copy_dir);
  g_unlink(junk);
}

static const char *se_spec =
    "{\"name\": \"se\", \"input\": {\"shape\": [4, 3, 5]},"
    " \"nodes\": [{\"name\": \"se\", \"type\": \"SEBlock\", \"reduction\": 2},"
    "            {\"name\": \"flat\", \"type\": \"Flatten\"},"
    "            {\"name\": \"fc\", \"type\": \"Linear\", \"out_features\": 3}]}";

typedef struct {
  em_model *m;
} se_ctx;

static em_tensor *se_fn(em_tensor **in, void *ctx) {
  em_error err = {0};
  em_tensor *y = em_model_forward(((se_ctx *)ctx)->m, in[0], true, NULL, &err);
  g_assert_nonnull(y);
  return y;
}

static void test_seblock_gradcheck(void) {
  em_error err = {0};
  em_spec *spec = em_spec_parse(se_spec, "<test>", &err);
  g_assert_nonnull(spec);
  g_assert_cmpint(em_spec_node_param_count(spec, 0), ==, 2 * 4 + 2 + 4 * 2 + 4);
  em_model_options o = {.dtype = EM_DTYPE_F64};
  em_model *m = em_model_new_with(spec, 3, &o, &err);
  g_assert_nonnull(m);
  int64_t xs[4] = {2, 4, 3, 5};
  em_tensor *in[5] = {gc_rand(EM_DTYPE_F64, 4, xs, -1, 1, 7, true)};
  for (int i = 0; i < 4; i++) { /* the SEBlock's own parameters */
    const char *name;
    in[1 + i] = em_model_param(m, i, &name);
    g_assert_true(g_str_has_prefix(name, "se.fc"));
  }
  se_ctx ctx = {m};
  g_assert_true(gradcheck("SEBlock", se_fn, 5, in, &ctx, NULL));
  em_tensor_free(in[0]);
  em_model_free(m);
  em_spec_free(spec);
}

static void test_seblock_export(void) {
  em_error err = {0};
  em_spec *spec = em_spec_parse(se_spec, "<test>", &err);
  em_model *m = em_model_new(spec, 1, &err);
  g_assert_nonnull(m);
  g_autofree char *dir = g_dir_make_tmp("ember-plugin-onnx-XXXXXX", NULL);
  g_autofree char *path = g_build_filename(dir, "se.onnx", NULL);
  if (em_export_onnx(m, path, NULL, &err) != EM_OK) g_error("export: %s", err.msg);
  g_assert_true(g_file_test(path, G_FILE_TEST_EXISTS));
  g_unlink(path);
  g_rmdir(dir);
  em_model_free(m);
  em_spec_free(spec);
}

/* A plugin's ONNX mapping that leaves a graph no reader takes is refused,
 * saying what is wrong, and nothing is written. */
static void test_odd_onnx_mapping_refused(void) {
  const em_plugin_info *odd = find_plugin("bad-odd-onnx.so");
  g_assert_nonnull(odd);
  g_assert_true(odd->loaded);
  void *dl = dlopen(odd->path, RTLD_NOW | RTLD_NOLOAD);
  g_assert_nonnull(dl);
  void (*set_mode)(int);
  *(void **)&set_mode = dlsym(dl, "bad_onnx_mode");
  g_assert_nonnull(set_mode);
  em_error err = {0};
  em_spec *spec = em_spec_parse("{\"name\": \"odd\", \"input\": {\"shape\": [4]},"
                                " \"nodes\": [{\"name\": \"o\", \"type\": \"TestOddOnnx\"},"
                                "  {\"name\": \"fc\", \"type\": \"Linear\", "
                                "\"out_features\": 2}]}",
                                "<test>", &err);
  g_assert_nonnull(spec);
  em_model *m = em_model_new(spec, 1, &err);
  g_assert_nonnull(m);
  g_autofree char *dir = g_dir_make_tmp("ember-plugin-onnx-XXXXXX", NULL);
  g_autofree char *path = g_build_filename(dir, "odd.onnx", NULL);
  static const char *const why[] = {
      NULL,
      "did not write the layer's output value",
      "which is already a value",
      "reads 'no-such-value', which no input, initializer or earlier node makes",
      "called em_onnx_graph_node without an op_type",
      "its initializer 'input' is named like the layer's input",
      "node 'o' (TestOddOnnx): unsupported"};
  for (int mode = 0; mode <= 6; mode++) {
    set_mode(mode);
    em_status st = em_export_onnx(m, path, NULL, &err);
    if (mode == 0) {
      if (st != EM_OK) g_error("mode 0: %s", err.msg);
      g_unlink(path);
      continue;
    }
    g_assert_cmpint(st, !=, EM_OK);
    if (!strstr(err.msg, why[mode])) g_error("mode %d: '%s'", mode, err.msg);
    g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
  }
  g_rmdir(dir);
  dlclose(dl);
  em_model_free(m);
  em_spec_free(spec);
}

static void test_macro_f1(void) {
  const em_metric_type *f1 = em_metric_find("macro_f1");
  g_assert_nonnull(f1);
  /* labels 0 0 1 1 2 2, predictions 0 1 1 1 2 0: F1 0.5, 0.8, 2/3 */
  const int64_t y[6] = {0, 0, 1, 1, 2, 2};
  const int pred[6] = {0, 1, 1, 1, 2, 0};
  float logits[6 * 4] = {0}; /* K = 4: class 3 never occurs and is left out */
  for (int i = 0; i < 6; i++) logits[i * 4 + pred[i]] = 1;
  double v = 0;
  em_error err = {0};
  g_assert_cmpint(f1->compute(6, 4, logits, y, &v, &err), ==, EM_OK);
  g_assert_cmpfloat_with_epsilon(v, (0.5 + 0.8 + 2.0 / 3.0) / 3.0, 1e-12);
  const int64_t bad[1] = {7};
  g_assert_cmpint(f1->compute(1, 4, logits, bad, &v, &err), ==, EM_ERR_INVALID);
}

static void test_unknown_type_message(void) {
  em_error err = {0};
  em_spec *spec = em_spec_parse(
      "{\"name\": \"x\", \"input\": {\"shape\": [4]},"
      " \"nodes\": [{\"name\": \"g\", \"type\": \"GLU\"}]}",
      "<test>", &err);
  g_assert_null(spec);
  g_assert_nonnull(strstr(err.msg, "unknown layer type 'GLU'"));
  g_assert_nonnull(strstr(err.msg, "plugin folders searched: "));
  g_assert_nonnull(strstr(err.msg, g_getenv("EMBER_BAD_PLUGIN_DIR")));
  g_assert_nonnull(strstr(err.msg, "refused: bad-direct-register.so"));
  /* and a metric no plugin provides */
  g_assert_cmpint(em_metrics_select("top5", &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "unknown metric 'top5'"));
  g_assert_nonnull(strstr(err.msg, "macro_f1"));
}

/* A layer type the way a plugin writes one, misbehaving in one way each:
 * its forward gives the wrong dtype, or its inference declares a
 * parameter no init can fill. The host checks what it is handed. */
static int misbehave;

static em_status odd_infer(const em_layer_node *node, int n_in, const em_shape *in,
                           em_shape *out, int *n_params, em_param_decl *params, em_error *err) {
  *out = in[0];
  *n_params = 1;
  params[0] = (em_param_decl){.name = "w", .dtype = EM_DTYPE_F32, .ndim = 1, .shape = {4},
                              .init = EM_INIT_UNIFORM, .a = 0.1};
  if (misbehave == 1) params[0].init = (em_init_kind)77;
  if (misbehave == 2) params[0].a = 1.0 / 0.0;
  if (misbehave == 3) params[0].shape[0] = -4;
  if (misbehave == 4) out->dtype = EM_DTYPE_U8;
  return EM_OK;
}

static em_tensor *odd_forward(const em_layer_node *node, int n_in, em_tensor **in,
                              em_tensor **params, const em_forward_ctx *ctx) {
  em_tensor *y = em_mul(in[0], params[0]);
  return misbehave == 5 ? em_cast(y, EM_DTYPE_F64) : y;
}

static const em_layer_type odd_layer = {.api_version = EM_LAYER_API_VERSION, .name = "TestOdd",
                                        .category = "test", .help = "x * w", .min_inputs = 1,
                                        .max_inputs = 1, .infer = odd_infer,
                                        .forward = odd_forward};

static void test_checks_what_a_layer_gives(void) {
  em_error err = {0};
  g_assert_cmpint(em_layer_register(&odd_layer, &err), ==, EM_OK);
  const char *spec_json = "{\"name\": \"odd\", \"input\": {\"shape\": [4]},"
                          " \"nodes\": [{\"name\": \"o\", \"type\": \"TestOdd\"}]}";
  static const char *const why[] = {NULL, "unknown init kind (77)", "init scale inf",
                                    "has a negative size", "shape inference gave dtype u8"};
  for (misbehave = 1; misbehave <= 4; misbehave++) {
    g_assert_null(em_spec_parse(spec_json, "<test>", &err));
    if (!strstr(err.msg, why[misbehave])) g_error("case %d: '%s'", misbehave, err.msg);
  }
  misbehave = 5; /* a forward that gives f64 in an f32 model: an error, not an abort later */
  em_spec *spec = em_spec_parse(spec_json, "<test>", &err);
  g_assert_nonnull(spec);
  em_model *m = em_model_new(spec, 1, &err);
  g_assert_nonnull(m);
  em_scope *sc = em_scope_begin();
  int64_t shape[2] = {2, 4};
  em_tensor *x = em_zeros(EM_DTYPE_F32, 2, shape);
  g_assert_null(em_model_forward(m, x, false, NULL, &err));
  if (!strstr(err.msg, "forward gave a f64 tensor on cpu, where the model runs in f32 on cpu"))
    g_error("'%s'", err.msg);
  em_scope_end(sc);
  em_model_free(m);
  em_spec_free(spec);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/plugins/host/load-and-refuse", test_load);
  g_test_add_func("/plugins/seblock/gradcheck", test_seblock_gradcheck);
  g_test_add_func("/plugins/seblock/onnx", test_seblock_export);
  g_test_add_func("/plugins/macro-f1/value", test_macro_f1);
  g_test_add_func("/plugins/onnx/odd-mapping-refused", test_odd_onnx_mapping_refused);
  g_test_add_func("/plugins/spec/unknown-type", test_unknown_type_message);
  g_test_add_func("/plugins/spec/checks-what-a-layer-gives", test_checks_what_a_layer_gives);
  return g_test_run();
}
