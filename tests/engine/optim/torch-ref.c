/* torch-ref.c: see torch-ref.h. */
#include "torch-ref.h"

#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define PYTHON "/usr/bin/python3"

struct tref_batch {
  GString *in;
  int n_cases;
  GPtrArray *out; /* GArray of double per case */
};

tref_batch *tref_batch_new(void) {
  tref_batch *b = g_new0(tref_batch, 1);
  b->in = g_string_new(NULL);
  b->out = g_ptr_array_new_with_free_func((GDestroyNotify)g_array_unref);
  return b;
}

void tref_batch_free(tref_batch *b) {
  if (!b) return;
  g_string_free(b->in, TRUE);
  g_ptr_array_unref(b->out);
  g_free(b);
}

int tref_case(tref_batch *b, const char *kind) {
  g_string_append_printf(b->in, "\ncase %s", kind);
  return b->n_cases++;
}

void tref_word(tref_batch *b, const char *w) { g_string_append_printf(b->in, " %s", w); }
void tref_num(tref_batch *b, double v) { g_string_append_printf(b->in, " %.17g", v); }
void tref_int(tref_batch *b, int64_t v) { g_string_append_printf(b->in, " %lld", (long long)v); }

/* Parses "count v..." lines, one per case. */
static bool parse_output(tref_batch *b, const char *text) {
  const char *p = text;
  for (int c = 0; c < b->n_cases; c++) {
    char *end;
    long long count = strtoll(p, &end, 10);
    if (end == p || count < 0) return false;
    p = end;
    GArray *a = g_array_sized_new(FALSE, FALSE, sizeof(double), (guint)count);
    for (long long k = 0; k < count; k++) {
      double v = g_ascii_strtod(p, &end);
      if (end == p) {
        g_array_unref(a);
        return false;
      }
      p = end;
      g_array_append_val(a, v);
    }
    g_ptr_array_add(b->out, a);
  }
  return true;
}

bool tref_batch_run(tref_batch *b, char **why) {
  if (!g_file_test(PYTHON, G_FILE_TEST_IS_EXECUTABLE)) {
    *why = g_strdup(PYTHON " is missing");
    return false;
  }
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("ember-optim-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *in_path = g_build_filename(dir, "in.txt", NULL);
  g_autofree char *out_path = g_build_filename(dir, "out.txt", NULL);
  g_autofree char *text = g_strdup_printf("%d%s\n", b->n_cases, b->in->str);
  g_file_set_contents(in_path, text, -1, &error);
  g_assert_no_error(error);
  const char *argv[] = {PYTHON, OPTIM_REF_SCRIPT, in_path, out_path, NULL};
  g_autofree char *err_text = NULL;
  int status = 0;
  g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL,
               &err_text, &status, &error);
  g_assert_no_error(error);
  bool ok = true;
  if (!g_spawn_check_wait_status(status, &error)) {
    if (!g_error_matches(error, G_SPAWN_EXIT_ERROR, 77))
      g_error("optim-ref.py failed: %s\n%s", error->message, err_text);
    *why = g_strdup("PyTorch is not importable by " PYTHON);
    ok = false;
  } else {
    g_autofree char *out = NULL;
    g_file_get_contents(out_path, &out, NULL, &error);
    g_assert_no_error(error);
    if (!parse_output(b, out)) g_error("optim-ref.py wrote a malformed result");
  }
  g_unlink(in_path);
  g_unlink(out_path);
  g_rmdir(dir);
  return ok;
}

const double *tref_result(const tref_batch *b, int c, int64_t *n) {
  g_assert_cmpint(c, <, (int)b->out->len);
  GArray *a = g_ptr_array_index(b->out, c);
  *n = a->len;
  return (const double *)(void *)a->data;
}

bool tref_close(const char *what, const double *got, const double *want, int64_t n, double tol,
                double *worst) {
  double w = 0;
  for (int64_t k = 0; k < n; k++) {
    double scale = fmax(fabs(want[k]), 1.0);
    double e = fabs(got[k] - want[k]) / scale;
    if (!(e <= tol) && !(isnan(got[k]) && isnan(want[k])) && got[k] != want[k]) {
      g_printerr("%s: element %lld: got %.17g, PyTorch %.17g (error %.3g > %.3g)\n", what,
                 (long long)k, got[k], want[k], e, tol);
      if (worst) *worst = e;
      return false;
    }
    if (e > w && isfinite(e)) w = e;
  }
  if (worst && w > *worst) *worst = w;
  return true;
}

void tref_batch_run_or_skip(tref_batch **b, char **why) {
  if (*b && !tref_batch_run(*b, why)) {
    tref_batch_free(*b);
    *b = NULL;
  }
  if (!*b) g_test_skip(*why);
}
