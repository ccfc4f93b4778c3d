/* test-sdpa-torch.c: em_sdpa (the fused attention) against PyTorch 1.13
 * (Debian's /usr/bin/python3), which has no F.scaled_dot_product_attention:
 * sdpa-torch-ref.py writes the math out, softmax(q k^T * scale + mask) v
 * in float64 with the causal mask aligned to the last query, the key
 * padding mask, and a row that sees no key giving zeros, then its
 * autograd gradients for the upstream gradient g. Each case runs here in
 * f64 and in f32 on the CPU (forward, and backward from g); the script
 * compares both with PyTorch and prints the differences. Cases: plain,
 * causal, padding, both with a batch entry all padded, L < S (a KV-cache
 * step), L > S, a given scale with Ev != E, and sizes over several tiles.
 * Dropout draws Ember's own mask (checked against em_dropout's in
 * test-sdpa.c), so it is not compared here. Skips without torch. */
#include <glib.h>
#include <glib/gstdio.h>
#include <stdio.h>

#include "em-ops.h"
#include "gradcheck.h"
#include "torch-script.h"

typedef struct {
  int64_t N, H, L, S, E, Ev;
  bool causal, pad;
  double scale;
} tc;

static const tc cases[] = {
    {2, 2, 5, 5, 4, 3, false, false, 0},    {2, 2, 6, 6, 8, 8, true, false, 0},
    {2, 2, 4, 7, 3, 4, false, true, 0},     {3, 2, 5, 5, 4, 4, true, true, 0},
    {2, 2, 1, 9, 4, 4, true, false, 0},     {2, 1, 7, 4, 4, 4, true, true, 0},
    {2, 3, 5, 6, 4, 5, false, true, 0.7},   {2, 2, 70, 130, 20, 24, true, true, 0},
};

static void write_t(const char *dir, int c, const char *name, const em_tensor *t) {
  char file[32];
  snprintf(file, sizeof file, "c%d-%s", c, name);
  test_write_raw(dir, file, em_tensor_ptr(t), em_tensor_nbytes(t));
}

/* Case c's output and gradients in dt, written as f64. */
static void run(const char *dir, int c, em_tensor *const *in64, const em_tensor *kpm,
                em_tensor *g64, em_dtype dt) {
  const tc *k = &cases[c];
  const char *suffix = dt == EM_DTYPE_F64 ? "64" : "32";
  em_tensor *x[3];
  for (int i = 0; i < 3; i++) {
    x[i] = em_tensor_new(dt, 4, in64[i]->shape, NULL);
    em_tensor_copy_(x[i], in64[i]);
    em_tensor_set_requires_grad(x[i], true);
  }
  em_scope *s = em_scope_begin();
  em_sdpa_params p = {.causal = k->causal, .key_padding_mask = kpm, .scale = k->scale};
  em_tensor *y = em_sdpa(x[0], x[1], x[2], &p);
  em_backward_grad(y, em_cast(g64, dt));
  const char *names[4] = {"o", "gq", "gk", "gv"};
  em_tensor *outs[4] = {y, x[0]->grad, x[1]->grad, x[2]->grad};
  for (int i = 0; i < 4; i++) {
    char name[16];
    snprintf(name, sizeof name, "%s%s", names[i], suffix);
    write_t(dir, c, name, em_cast(outs[i], EM_DTYPE_F64));
  }
  em_scope_end(s);
  for (int i = 0; i < 3; i++) em_tensor_free(x[i]);
}

static void test_torch(void) {
  if (!test_torch_available()) return;
  g_autoptr(GError) err = NULL;
  g_autofree char *dir = g_dir_make_tmp("ember-sdpa-XXXXXX", &err);
  g_assert_nonnull(dir);
  for (int c = 0; c < (int)G_N_ELEMENTS(cases); c++) {
    const tc *k = &cases[c];
    double meta[9] = {(double)k->N, (double)k->H, (double)k->L, (double)k->S, (double)k->E,
                      (double)k->Ev, k->causal, k->pad, k->scale};
    char file[32];
    snprintf(file, sizeof file, "c%d-meta", c);
    test_write_raw(dir, file, meta, sizeof meta);
    int64_t qs[4] = {k->N, k->H, k->L, k->E}, ks[4] = {k->N, k->H, k->S, k->E};
    int64_t vs[4] = {k->N, k->H, k->S, k->Ev}, os[4] = {k->N, k->H, k->L, k->Ev};
    em_tensor *in[3] = {gc_rand(EM_DTYPE_F64, 4, qs, -1.5, 1.5, 10 + 4 * (unsigned)c, false),
                        gc_rand(EM_DTYPE_F64, 4, ks, -1.5, 1.5, 11 + 4 * (unsigned)c, false),
                        gc_rand(EM_DTYPE_F64, 4, vs, -1, 1, 12 + 4 * (unsigned)c, false)};
    em_tensor *g = gc_rand(EM_DTYPE_F64, 4, os, -1, 1, 13 + 4 * (unsigned)c, false);
    /* f32 inputs rounded first, so that both sides start from the same values */
    em_scope *s = em_scope_begin();
    for (int i = 0; i < 3; i++) em_tensor_copy_(in[i], em_cast(em_cast(in[i], EM_DTYPE_F32), EM_DTYPE_F64));
    em_tensor_copy_(g, em_cast(em_cast(g, EM_DTYPE_F32), EM_DTYPE_F64));
    em_scope_end(s);
    em_tensor *kpm = NULL;
    if (k->pad) {
      int64_t ms[2] = {k->N, k->S};
      kpm = em_tensor_new(EM_DTYPE_U8, 2, ms, NULL);
      uint8_t *m = em_tensor_ptr(kpm);
      for (int64_t n = 0; n < k->N; n++)
        for (int64_t j = 0; j < k->S; j++) m[n * k->S + j] = n == 1 || (j * 5 + n * 3) % 4 == 1;
      write_t(dir, c, "kpm", kpm);
    }
    write_t(dir, c, "q", in[0]);
    write_t(dir, c, "k", in[1]);
    write_t(dir, c, "v", in[2]);
    write_t(dir, c, "g", g);
    run(dir, c, in, kpm, g, EM_DTYPE_F64);
    run(dir, c, in, kpm, g, EM_DTYPE_F32);
    for (int i = 0; i < 3; i++) em_tensor_free(in[i]);
    em_tensor_free(g);
    em_tensor_free(kpm);
  }
  char dims[16];
  snprintf(dims, sizeof dims, "%d", (int)G_N_ELEMENTS(cases));
  test_run_torch_script("tests/engine/ops-nn/sdpa-torch-ref.py", dir, dims);
  g_autoptr(GDir) gd = g_dir_open(dir, 0, NULL);
  for (const char *f; gd && (f = g_dir_read_name(gd));) {
    g_autofree char *path = g_build_filename(dir, f, NULL);
    g_remove(path);
  }
  g_rmdir(dir);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/ops/sdpa/torch", test_torch);
  return g_test_run();
}
