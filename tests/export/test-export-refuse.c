/* test-export-refuse.c: what the ONNX export refuses, and the file it
 * leaves (none) when it does. A layer type registered at run time (as a
 * plugin registers one) has no ONNX form: the export names the node and
 * the type. Every built-in type has a form. */
#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>

#include "em-export.h"

static em_status twice_infer(const em_layer_node *node, int n_in, const em_shape *in,
                             em_shape *out, int *n_params, em_param_decl *params, em_error *err) {
  *out = in[0];
  *n_params = 0;
  return EM_OK;
}

static em_tensor *twice_forward(const em_layer_node *node, int n_in, em_tensor **in,
                                em_tensor **params, const em_forward_ctx *ctx) {
  return em_add(in[0], in[0]);
}

static const em_layer_type twice_type = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "TestTwice",
    .category = "test",
    .help = "x + x",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = twice_infer,
    .forward = twice_forward,
};

static const char *spec_text =
    "{\"name\": \"refuse\", \"input\": {\"shape\": [4]},"
    " \"nodes\": [{\"name\": \"fc\", \"type\": \"Linear\", \"out_features\": 3},"
    "            {\"name\": \"double_it\", \"type\": \"TestTwice\"}]}";

/* Every built-in layer type exports: it has an ONNX form in the forms
 * registry or is the identity at inference (Dropout). Run before any
 * other type is registered, so the list is the built-ins'. */
static void test_every_builtin_exports(void) {
  int n = em_layer_type_count();
  g_assert_cmpint(n, >=, 15);
  for (int i = 0; i < n; i++) {
    const em_layer_type *t = em_layer_type_at(i);
    if (!em_onnx_layer_exportable(t)) g_error("built-in layer type %s has no ONNX form", t->name);
  }
  g_assert_false(em_onnx_layer_exportable(&twice_type));
}

static void test_plugin_layer_refused(void) {
  em_error err = {0};
  g_assert_cmpint(em_layer_register(&twice_type, &err), ==, EM_OK);
  em_spec *spec = em_spec_parse(spec_text, "<test>", &err);
  g_assert_nonnull(spec);
  em_model *m = em_model_new(spec, 1, &err);
  g_assert_nonnull(m);
  g_autofree char *dir = g_dir_make_tmp("ember-export-XXXXXX", NULL);
  g_autofree char *path = g_build_filename(dir, "m.onnx", NULL);
  em_status st = em_export_onnx(m, path, NULL, &err);
  g_assert_cmpint(st, ==, EM_ERR_UNSUPPORTED);
  g_assert_nonnull(strstr(err.msg, "'double_it'"));
  g_assert_nonnull(strstr(err.msg, "'TestTwice'"));
  g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
  /* Nothing else (no temporary) was left in the folder. */
  GDir *d = g_dir_open(dir, 0, NULL);
  g_assert_null(g_dir_read_name(d));
  g_dir_close(d);
  g_rmdir(dir);
  em_model_free(m);
  em_spec_free(spec);
}

static void test_bad_path(void) {
  em_error err = {0};
  em_spec *spec = em_spec_parse(
      "{\"name\": \"ok\", \"input\": {\"shape\": [4]},"
      " \"nodes\": [{\"name\": \"fc\", \"type\": \"Linear\", \"out_features\": 3}]}",
      "<test>", &err);
  g_assert_nonnull(spec);
  em_model *m = em_model_new(spec, 1, &err);
  g_assert_cmpint(em_export_onnx(m, "/nonexistent-dir/m.onnx", NULL, &err), ==, EM_ERR_IO);
  g_assert_nonnull(strstr(err.msg, "/nonexistent-dir/m.onnx"));
  g_assert_cmpint(em_export_onnx(m, "", NULL, &err), ==, EM_ERR_INVALID);
  em_model_free(m);
  em_spec_free(spec);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/export/onnx/every-builtin-exports", test_every_builtin_exports);
  g_test_add_func("/export/onnx/refuse-plugin-layer", test_plugin_layer_refused);
  g_test_add_func("/export/onnx/bad-path", test_bad_path);
  return g_test_run();
}
