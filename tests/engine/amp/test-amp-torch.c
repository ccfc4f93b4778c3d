/* test-amp-torch.c: bf16 autocast against PyTorch (Debian's python3-torch
 * at /usr/bin/python3). The test writes, to a temporary folder, edge
 * values with the engine's bf16 roundings, and a Linear layer's x, W, b,
 * upstream gradient and the engine's output and gradients under bf16
 * autocast; amp-torch-ref.py there checks
 *  - rounding: bit for bit against tensor.to(torch.bfloat16) (NaN: NaN);
 *  - the Linear: against the same bf16 math in f64 (f32 summation error
 *    only) and against torch.autocast('cpu', dtype=torch.bfloat16) within
 *    the bf16 roundings torch adds (its output, bias and gradients are
 *    bf16; ours stay f32).
 * Skips when torch cannot be imported or the CPU has no AVX512-BF16. */
#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>

#include "em-amp.h"
#include "em-ops.h"
#include "torch-script.h"

static const char *const files[] = {"rin", "rout", "x", "w", "b", "gy", "y", "dx", "dw", "db"};

static void test_torch(void) {
  if (!test_torch_available()) return;
  if (em_bf16_kernel_best() == EM_BF16_KERNEL_NONE) {
    g_test_skip("EMBER_BF16_KERNEL=none: autocast runs f32");
    return;
  }
  g_autoptr(GError) err = NULL;
  g_autofree char *dir = g_dir_make_tmp("ember-amp-XXXXXX", &err);
  g_assert_nonnull(dir);

  /* rounding: edge values, then a sweep of random bit patterns */
  enum { R = 4096 };
  static const uint32_t edges[] = {
      0x00000000u, 0x80000000u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f808001u,
      0x3f807fffu, 0xbf818000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
      0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x00008000u, 0x00018000u, 0x00000001u,
      0x007fffffu, 0x00800000u, 0x807fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x33800000u};
  uint32_t *rin = g_new(uint32_t, R);
  uint16_t *rout = g_new(uint16_t, R);
  GRand *r = g_rand_new_with_seed(16);
  for (int i = 0; i < R; i++) {
    rin[i] = i < (int)G_N_ELEMENTS(edges) ? edges[i] : g_rand_int(r);
    float f;
    memcpy(&f, &rin[i], sizeof f);
    rout[i] = em_bf16_from_f32(f);
  }
  test_write_raw(dir, "rin", rin, sizeof(uint32_t) * R);
  test_write_raw(dir, "rout", rout, sizeof(uint16_t) * R);

  /* a Linear layer under autocast */
  enum { N = 64, D = 300, K = 40 };
  int64_t xs[2] = {N, D}, ws[2] = {K, D}, bs[1] = {K}, ys[2] = {N, K};
  em_tensor *x = em_tensor_new(EM_DTYPE_F32, 2, xs, NULL), *w = em_tensor_new(EM_DTYPE_F32, 2, ws, NULL);
  em_tensor *b = em_tensor_new(EM_DTYPE_F32, 1, bs, NULL);
  float *gy = g_new(float, N * K);
  for (int i = 0; i < N * D; i++) em_f32(x)[i] = (float)g_rand_double_range(r, -1, 1);
  for (int i = 0; i < K * D; i++) em_f32(w)[i] = (float)g_rand_double_range(r, -0.06, 0.06);
  for (int i = 0; i < K; i++) em_f32(b)[i] = (float)g_rand_double_range(r, -0.5, 0.5);
  for (int i = 0; i < N * K; i++) gy[i] = (float)g_rand_double_range(r, -1, 1);
  em_tensor_set_requires_grad(x, true), em_tensor_set_requires_grad(w, true);
  em_tensor_set_requires_grad(b, true);
  em_scope *s = em_scope_begin();
  em_amp_mode prev = em_autocast_begin(EM_AMP_BF16);
  em_tensor *y = em_linear(x, w, b);
  em_autocast_restore(prev);
  em_backward_grad(y, em_from_data(EM_DTYPE_F32, 2, ys, gy));
  test_write_raw(dir, "x", em_f32(x), sizeof(float) * N * D);
  test_write_raw(dir, "w", em_f32(w), sizeof(float) * K * D);
  test_write_raw(dir, "b", em_f32(b), sizeof(float) * K);
  test_write_raw(dir, "gy", gy, sizeof(float) * N * K);
  test_write_raw(dir, "y", em_f32(y), sizeof(float) * N * K);
  test_write_raw(dir, "dx", em_f32(x->grad), sizeof(float) * N * D);
  test_write_raw(dir, "dw", em_f32(w->grad), sizeof(float) * K * D);
  test_write_raw(dir, "db", em_f32(b->grad), sizeof(float) * K);
  em_scope_end(s);

  g_autofree char *dims = g_strdup_printf("%d,%d,%d,%d", R, N, D, K);
  test_run_torch_script("tests/engine/amp/amp-torch-ref.py", dir, dims);
  for (size_t i = 0; i < G_N_ELEMENTS(files); i++) {
    g_autofree char *p = g_strdup_printf("%s/%s.bin", dir, files[i]);
    g_remove(p);
  }
  g_rmdir(dir);
  em_tensor_free(x), em_tensor_free(w), em_tensor_free(b);
  g_free(rin), g_free(rout), g_free(gy);
  g_rand_free(r);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/amp/torch", test_torch);
  return g_test_run();
}
