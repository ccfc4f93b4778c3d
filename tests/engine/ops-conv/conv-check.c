/* conv-check.c: closeness checks and the PyTorch bridge of the conv and
 * pool tests. */
#include "conv-check.h"

#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define PYTHON "/usr/bin/python3"

/* Element k (row-major) of t as a double. */
static double elem(const em_tensor *t, int64_t k) {
  int64_t idx[EM_MAX_DIMS];
  for (int d = t->ndim - 1; d >= 0; d--) {
    idx[d] = k % t->shape[d];
    k /= t->shape[d];
  }
  return em_tensor_get(t, idx);
}

double cc_rel_err(const em_tensor *got, const em_tensor *want) {
  int64_t n = em_tensor_numel(want);
  if (em_tensor_numel(got) != n) return INFINITY;
  double scale = 1, worst = 0;
  for (int64_t k = 0; k < n; k++) scale = fmax(scale, fabs(elem(want, k)));
  for (int64_t k = 0; k < n; k++) {
    double d = fabs(elem(got, k) - elem(want, k));
    if (!(d <= worst)) worst = d; /* NaN counts as worst */
  }
  return worst / scale;
}

bool cc_close(const char *what, const em_tensor *got, const em_tensor *want, double tol) {
  double e = cc_rel_err(got, want);
  if (e <= tol) return true;
  fprintf(stderr, "%s: relative error %.3g exceeds %.3g\n", what, e, tol);
  return false;
}

/* ---- PyTorch bridge ------------------------------------------------------------- */

struct cc_torch {
  GByteArray *in;
  int n_cases;
  GPtrArray *outs; /* per case: a GPtrArray of em_tensor */
};

cc_torch *cc_torch_new(void) {
  cc_torch *t = g_new0(cc_torch, 1);
  t->in = g_byte_array_new();
  t->outs = g_ptr_array_new();
  return t;
}

static void free_case(gpointer p) {
  GPtrArray *a = p;
  for (guint i = 0; i < a->len; i++) em_tensor_free(a->pdata[i]);
  g_ptr_array_free(a, TRUE);
}

void cc_torch_free(cc_torch *t) {
  if (!t) return;
  g_byte_array_free(t->in, TRUE);
  for (guint i = 0; i < t->outs->len; i++) free_case(t->outs->pdata[i]);
  g_ptr_array_free(t->outs, TRUE);
  g_free(t);
}

static void put_i32(GByteArray *b, int32_t v) { g_byte_array_append(b, (const guint8 *)&v, 4); }

static void put_str(GByteArray *b, const char *s) {
  put_i32(b, (int32_t)strlen(s));
  g_byte_array_append(b, (const guint8 *)s, (guint)strlen(s));
}

int cc_torch_case(cc_torch *t, const char *op, const char *params_json, int n,
                  em_tensor *const *ins) {
  put_str(t->in, op);
  put_str(t->in, params_json);
  put_i32(t->in, n);
  for (int i = 0; i < n; i++) {
    const em_tensor *x = ins[i];
    put_i32(t->in, x->ndim);
    g_byte_array_append(t->in, (const guint8 *)x->shape, (guint)(8 * x->ndim));
    int64_t m = em_tensor_numel(x);
    for (int64_t k = 0; k < m; k++) {
      float v = (float)elem(x, k);
      g_byte_array_append(t->in, (const guint8 *)&v, 4);
    }
  }
  return t->n_cases++;
}

/* Reads n bytes at *pos of buf into dst; false when buf is too short. */
static bool take(const gchar *buf, gsize len, gsize *pos, void *dst, gsize n) {
  if (*pos + n > len) return false;
  memcpy(dst, buf + *pos, n);
  *pos += n;
  return true;
}

bool cc_torch_run(cc_torch *t, char **why) {
  if (!g_file_test(PYTHON, G_FILE_TEST_IS_EXECUTABLE)) {
    *why = g_strdup(PYTHON " not found");
    return false;
  }
  const char *probe[] = {PYTHON, "-c", "import torch", NULL};
  gint status = 0;
  if (!g_spawn_sync(NULL, (gchar **)probe, NULL, G_SPAWN_STDOUT_TO_DEV_NULL |
                    G_SPAWN_STDERR_TO_DEV_NULL, NULL, NULL, NULL, NULL, &status, NULL) ||
      !g_spawn_check_wait_status(status, NULL)) {
    *why = g_strdup(PYTHON " cannot import torch");
    return false;
  }
  GError *err = NULL;
  char *dir = g_dir_make_tmp("ember-conv-XXXXXX", &err);
  g_assert_no_error(err);
  char *in_path = g_build_filename(dir, "in.bin", NULL);
  char *out_path = g_build_filename(dir, "out.bin", NULL);
  g_file_set_contents(in_path, (const gchar *)t->in->data, t->in->len, &err);
  g_assert_no_error(err);
  const char *root = g_getenv("EMBER_SOURCE_ROOT");
  char *script = root ? g_build_filename(root, "tests", "engine", "ops-conv", "torch_conv.py", NULL)
                      : g_strdup(CONV_TORCH_SCRIPT);
  const char *argv[] = {PYTHON, script, in_path, out_path, NULL};
  gchar *err_text = NULL;
  gboolean spawned = g_spawn_sync(NULL, (gchar **)argv, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL,
                                  NULL, NULL, &err_text, &status, &err);
  g_assert_no_error(err);
  g_assert_true(spawned);
  if (!g_spawn_check_wait_status(status, NULL)) {
    fprintf(stderr, "%s failed:\n%s\n", script, err_text ? err_text : "");
    g_assert_not_reached();
  }
  gchar *buf = NULL;
  gsize len = 0, pos = 0;
  g_file_get_contents(out_path, &buf, &len, &err);
  g_assert_no_error(err);
  for (int c = 0; c < t->n_cases; c++) {
    int32_t n = 0;
    g_assert_true(take(buf, len, &pos, &n, 4));
    GPtrArray *a = g_ptr_array_new();
    for (int i = 0; i < n; i++) {
      int32_t nd = 0;
      int64_t shape[EM_MAX_DIMS];
      g_assert_true(take(buf, len, &pos, &nd, 4) && nd >= 0 && nd <= EM_MAX_DIMS);
      g_assert_true(take(buf, len, &pos, shape, (gsize)(8 * nd)));
      em_tensor *x = em_tensor_new(EM_DTYPE_F32, nd, shape, NULL);
      g_assert_nonnull(x);
      g_assert_true(take(buf, len, &pos, em_f32(x), em_tensor_nbytes(x)));
      g_ptr_array_add(a, x);
    }
    g_ptr_array_add(t->outs, a);
  }
  g_assert_cmpuint(pos, ==, len);
  g_unlink(in_path);
  g_unlink(out_path);
  g_rmdir(dir);
  g_free(buf);
  g_free(err_text);
  g_free(script);
  g_free(in_path);
  g_free(out_path);
  g_free(dir);
  return true;
}

em_tensor *cc_torch_out(cc_torch *t, int c, int k) {
  g_assert_cmpint(c, <, (int)t->outs->len);
  GPtrArray *a = t->outs->pdata[c];
  g_assert_cmpint(k, <, (int)a->len);
  return a->pdata[k];
}
