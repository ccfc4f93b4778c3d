/* plugin-forward.c: the engine's side of the PyTorch and OpenCV checks of
 * plugin layers (test_plugins.py). Loads the plugins of PLUGIN_DIR and a
 * spec, takes the model's weights plus "input" (N, ...) and "grad_output"
 * (N, ...output) from IN, runs forward (training mode off) and backward
 * of sum(output * grad_output), and writes "output", "grad_input" and
 * "grad.<param>" for every trainable parameter to OUT (safetensors, f32).
 *
 *   plugin-forward PLUGIN_DIR SPEC IN OUT */
#include <stdio.h>

#include "em-io.h"
#include "em-ops.h"
#include "em-plugin.h"

static int fail(const char *what, const em_error *err) {
  fprintf(stderr, "plugin-forward: %s: %s\n", what, err->msg);
  return 1;
}

static em_tensor *read_new(em_safetensors *f, const char *name, em_error *err) {
  em_dtype dt;
  int nd;
  int64_t shape[EM_MAX_DIMS];
  if (em_safetensors_info(f, name, &dt, &nd, shape, err) != EM_OK) return NULL;
  em_tensor *t = em_tensor_new(EM_DTYPE_F32, nd, shape, err);
  if (t && em_safetensors_read(f, name, t, err) != EM_OK) {
    em_tensor_free(t);
    return NULL;
  }
  return t;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: plugin-forward PLUGIN_DIR SPEC IN OUT\n");
    return 2;
  }
  em_error err = {0};
  if (em_plugins_load_dir(argv[1], "argument") != 0) {
    fprintf(stderr, "plugin-forward: a plugin in %s was refused\n", argv[1]);
    return 1;
  }
  em_spec *spec = em_spec_load(argv[2], &err);
  if (!spec) return fail(argv[2], &err);
  em_model *m = em_model_new(spec, 0, &err);
  if (!m) return fail("model", &err);
  em_safetensors *f = em_safetensors_open(argv[3], &err);
  if (!f) return fail(argv[3], &err);
  for (int i = 0; i < em_model_tensor_count(m); i++) {
    const char *name;
    em_tensor *t = em_model_tensor(m, i, &name);
    if (em_safetensors_read(f, name, t, &err) != EM_OK) return fail(name, &err);
  }
  em_tensor *x = read_new(f, "input", &err), *g = x ? read_new(f, "grad_output", &err) : NULL;
  if (!x || !g) return fail("input / grad_output", &err);
  em_safetensors_close(f);
  em_tensor_set_requires_grad(x, true);

  em_scope *s = em_scope_begin();
  em_tensor *y = em_model_forward(m, x, false, NULL, &err); /* (N, ...output) */
  if (!y) return fail("forward", &err);
  em_backward_grad(y, g);
  int np = em_model_param_count(m);
  em_named_tensor out[2 + 64];
  char names[64][128];
  int n = 0;
  out[n++] = (em_named_tensor){"output", y};
  out[n++] = (em_named_tensor){"grad_input", x->grad};
  for (int i = 0; i < np && i < 64; i++) {
    const char *name;
    em_tensor *p = em_model_param(m, i, &name);
    snprintf(names[i], sizeof names[i], "grad.%s", name);
    out[n++] = (em_named_tensor){names[i], p->grad};
  }
  if (em_safetensors_save(argv[4], n, out, 0, NULL, NULL, &err) != EM_OK)
    return fail(argv[4], &err);
  em_scope_end(s);
  em_tensor_free(x);
  em_tensor_free(g);
  em_model_free(m);
  em_spec_free(spec);
  return 0;
}
