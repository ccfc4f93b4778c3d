/* export-forward.c: the engine's side of the ONNX export tests. Loads a
 * spec and its weights, runs the model in inference mode on N samples of
 * raw little-endian f32 (or i64 for index inputs) read from IN, and
 * writes the outputs as raw f32 to OUT, for test_export.py to compare with
 * what OpenCV computes from the exported file.
 *
 *   export-forward SPEC WEIGHTS N IN OUT [int8]
 *
 * int8 quantises the model first (em_model_quantize), for the quantised
 * export's test (test_export_quant.py).
 *
 * WEIGHTS "init:FILE" initialises the model (seed 1) and saves its
 * weights to FILE first, for specs no dataset can train (index inputs). */
#include <string.h>
#include <stdio.h>
#include <stdlib.h>

#include "em-ops.h"
#include "em-quant.h"
#include "em-train.h"

static int fail(const char *what, const em_error *err) {
  fprintf(stderr, "export-forward: %s: %s\n", what, err ? err->msg : "failed");
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 6 && !(argc == 7 && !strcmp(argv[6], "int8"))) {
    fprintf(stderr, "usage: export-forward SPEC WEIGHTS N IN OUT [int8]\n");
    return 2;
  }
  em_error err = {0};
  em_spec *spec = em_spec_load(argv[1], &err);
  if (!spec) return fail(argv[1], &err);
  bool init = !strncmp(argv[2], "init:", 5);
  em_model *m = em_model_new(spec, init ? 1 : 0, &err);
  if (!m) return fail("model", &err);
  if (init ? em_model_save(m, argv[2] + 5, &err) != EM_OK
           : em_model_load(m, argv[2], &err) != EM_OK)
    return fail(argv[2], &err);
  if (argc == 7 && em_model_quantize(m, EM_QUANT_INT8_DYNAMIC, NULL, &err) != EM_OK)
    return fail("quantize", &err);

  int64_t shape[EM_MAX_DIMS + 1]; /* (N, ...input) */
  int nd = em_spec_input_shape(spec, shape + 1) + 1;
  shape[0] = atoll(argv[3]);
  em_dtype dt = em_spec_input_dtype(spec);
  int64_t numel = 1;
  for (int d = 0; d < nd; d++) numel *= shape[d];
  size_t esz = dt == EM_DTYPE_I64 ? 8 : 4;
  void *x = malloc((size_t)numel * esz);
  FILE *f = fopen(argv[4], "rb");
  if (!x || !f || fread(x, esz, (size_t)numel, f) != (size_t)numel) {
    fprintf(stderr, "export-forward: cannot read %lld values from %s\n", (long long)numel, argv[4]);
    return 1;
  }
  fclose(f);

  bool prev = em_no_grad_begin();
  em_scope *s = em_scope_begin();
  em_tensor *xt = em_tensor_wrap(dt, nd, shape, x);
  em_tensor *y = em_model_forward(m, xt, false, NULL, &err);
  if (!y) return fail("forward", &err);
  y = em_contiguous(y); /* (N, ...output) */
  FILE *o = fopen(argv[5], "wb");
  int64_t n = em_tensor_numel(y);
  if (!o || fwrite(em_f32(y), 4, (size_t)n, o) != (size_t)n || fclose(o) != 0) {
    fprintf(stderr, "export-forward: cannot write %s\n", argv[5]);
    return 1;
  }
  em_scope_end(s);
  em_grad_mode_restore(prev);
  free(x);
  em_model_free(m);
  em_spec_free(spec);
  return 0;
}
