/* test-store-run-columns.c: a setting or a metric as a column of a runs
 * table (run-columns.c): one value per run, newest first, numbers and
 * text, a run without the setting or the metric (blank, NaN), a nested
 * setting, the choice of columns, and a column that is neither. */
#include <math.h>
#include <string.h>

#include "store-test-util.h"

typedef st_fixture fixture;

static int64_t run_with(em_store *s, const char *config) {
  em_run_new r = {.model = "m", .spec_json = "{}", .config_json = config, .device = "cpu",
                  .threads = 1, .engine_version = "test"};
  int64_t id = 0;
  em_error err = {0};
  g_assert_cmpint(em_store_run_create(s, &r, &id, &err), ==, EM_OK);
  return id;
}

static void test_values(fixture *f, gconstpointer data) {
  (void)data;
  int64_t a = run_with(f->s, "{\"optim\": {\"lr\": 0.1, \"kind\": \"sgd\"}, \"batch_size\": 64}");
  int64_t b = run_with(f->s, "{\"optim\": {\"lr\": 0.002, \"kind\": \"adam\"}}");
  em_error err = {0};
  em_store_writer *w = em_store_writer_new(f->dir, 10, &err);
  g_assert_nonnull(w);
  em_store_writer_metric(w, a, 1, "loss", 2.5, 1.0);
  em_store_writer_metric(w, a, 2, "loss", 1.25, 2.0);
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);

  em_run_value *v = NULL;
  int n = 0;
  g_assert_cmpint(em_store_run_values(f->s, "config.optim.lr", &v, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 2);
  g_assert_cmpint(v[0].run, ==, b); /* newest first */
  g_assert_cmpstr(v[0].text, ==, "0.002");
  g_assert_cmpfloat(v[1].number, ==, 0.1);
  em_run_values_free(v, n);
  g_assert_cmpint(em_store_run_values(f->s, "config.optim.kind", &v, &n, &err), ==, EM_OK);
  g_assert_cmpstr(v[0].text, ==, "adam");
  g_assert_true(isnan(v[0].number));
  em_run_values_free(v, n);
  g_assert_cmpint(em_store_run_values(f->s, "config.batch_size", &v, &n, &err), ==, EM_OK);
  g_assert_cmpstr(v[0].text, ==, ""); /* run b has none */
  g_assert_cmpstr(v[1].text, ==, "64");
  em_run_values_free(v, n);
  g_assert_cmpint(em_store_run_values(f->s, "metrics.loss", &v, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 2);
  g_assert_cmpstr(v[0].text, ==, ""); /* b recorded no loss */
  g_assert_cmpfloat(v[1].number, ==, 1.25); /* a's last */
  em_run_values_free(v, n);

  char **cols = NULL;
  g_assert_cmpint(em_store_run_columns(f->s, &cols, &n, &err), ==, EM_OK);
  g_assert_true(g_strv_contains((const char *const *)cols, "config.optim.lr"));
  g_assert_true(g_strv_contains((const char *const *)cols, "config.batch_size"));
  g_assert_true(g_strv_contains((const char *const *)cols, "metrics.loss"));
  for (int i = 1; i < n; i++) g_assert_cmpint(strcmp(cols[i - 1], cols[i]), <, 0);
  g_strfreev(cols);

  g_assert_cmpint(em_store_run_values(f->s, "optim.lr", &v, &n, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "config.<setting> or metrics.<key>"));
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add("/store/run-columns/values", fixture, NULL, st_fixture_setup, test_values,
             st_fixture_teardown);
  return g_test_run();
}
