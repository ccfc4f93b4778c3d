/* test-quant-torch.c: a quantised Linear layer against PyTorch (Debian's
 * python3-torch at /usr/bin/python3). The test writes x, W, b and the
 * engine's int8 output y to a temporary folder; quant-torch-ref.py there
 * checks y against
 *  - the same scheme (per-row uint8 activations, per-channel int8
 *    weights) recomputed with torch's f32 ops: the same numbers;
 *  - the f32 layer: within the quantisation error (relative < 1%);
 *  - torch.ao.quantization.quantize_dynamic: ours is closer to f32 (it
 *    quantises activations per tensor with reduce_range, 7 bits).
 * Skips when torch cannot be imported. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>

#include "quant-private.h"
#include "torch-script.h"

static void test_torch(void) {
  if (!test_torch_available()) return;
  g_autoptr(GError) err = NULL;
  g_autofree char *dir = g_dir_make_tmp("ember-quant-XXXXXX", &err);
  g_assert_nonnull(dir);
  enum { M = 96, D = 203, K = 50 };
  GRand *r = g_rand_new_with_seed(21);
  float *x = g_new(float, M * D), *w = g_new(float, K * D), *b = g_new(float, K);
  float *y = g_new(float, M * K);
  for (int m = 0; m < M; m++) /* rows of different ranges; half post-ReLU */
    for (int d = 0; d < D; d++) {
      double v = g_rand_double_range(r, -1, 1) * (1 + m % 7);
      x[m * D + d] = (float)(m % 2 ? fmax(v, 0) : v);
    }
  for (int i = 0; i < K * D; i++) w[i] = (float)(g_rand_double_range(r, -1, 1) * 0.07);
  for (int k = 0; k < K; k++) b[k] = (float)g_rand_double_range(r, -0.5, 0.5);
  em_quant_layer L;
  em_error e = {0};
  g_assert_cmpint(em_quant_layer_init(&L, 0, w, b, K, D, em_qgemm_kernel_best(), "fc", &e), ==,
                  EM_OK);
  em_scope *s = em_scope_begin();
  em_quant_linear_run(&L, em_qgemm_kernel_best(), x, M, y);
  em_scope_end(s);
  test_write_raw(dir, "x", x, sizeof(float) * M * D);
  test_write_raw(dir, "w", w, sizeof(float) * K * D);
  test_write_raw(dir, "b", b, sizeof(float) * K);
  test_write_raw(dir, "y", y, sizeof(float) * M * K);

  g_autofree char *dims = g_strdup_printf("%d,%d,%d", M, D, K);
  test_run_torch_script("tests/engine/quant/quant-torch-ref.py", dir, dims);
  const char *names[] = {"x", "w", "b", "y"};
  for (int i = 0; i < 4; i++) {
    g_autofree char *p = g_strdup_printf("%s/%s.bin", dir, names[i]);
    g_remove(p);
  }
  g_rmdir(dir);
  em_quant_layer_clear(&L);
  g_free(x), g_free(w), g_free(b), g_free(y);
  g_rand_free(r);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/quant/torch", test_torch);
  return g_test_run();
}
