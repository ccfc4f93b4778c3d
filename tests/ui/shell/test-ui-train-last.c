/* test-ui-train-last.c: the Train page after a restart (issue 32, item 8)
 * shows the registry's newest run, its curves and how it ended, until a
 * run starts (before: an empty page); an empty registry leaves the page
 * as it was. The run is made through em_store (no training). */
#include <math.h>
#include <string.h>

#include "em-app-state.h"
#include "em-line-chart.h"
#include "em-store.h"
#include "em-train-page.h"
#include "ui-test-util.h"

static int64_t make_run(const char *dir) {
  em_error err = {0};
  em_store *s = em_store_open(dir, false, &err);
  g_assert_nonnull(s);
  em_run_new r = {.model = "fmnist-mlp", .spec_json = "{}", .config_json = "{}", .device = "cpu",
                  .threads = 1, .engine_version = "test"};
  int64_t id = 0;
  g_assert_cmpint(em_store_run_create(s, &r, &id, &err), ==, EM_OK);
  em_store_writer *w = em_store_writer_new(dir, 10, &err);
  for (int i = 1; i <= 30; i++) em_store_writer_metric(w, id, i, "loss", 2.0 / i, 1.7e9 + i);
  em_store_writer_metric(w, id, 15, EM_METRIC_TEST_LOSS, 0.6, 1.7e9 + 15);
  em_store_writer_metric(w, id, 30, EM_METRIC_TEST_LOSS, 0.5, 1.7e9 + 30);
  em_store_writer_metric(w, id, 15, EM_METRIC_TEST_ACCURACY, 0.8, 1.7e9 + 15);
  em_store_writer_metric(w, id, 30, EM_METRIC_TEST_ACCURACY, 0.85, 1.7e9 + 30);
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_finish(s, id, EM_RUN_COMPLETED, NULL, &err), ==, EM_OK);
  em_store_close(s);
  return id;
}

static gboolean has_points(gpointer page) {
  EmLineChart *c = EM_LINE_CHART(em_train_page_get_loss_chart(page));
  return em_line_chart_get_n_series(c) >= 1 && em_line_chart_get_n_points(c, 0) == 30;
}

static void test_last_run_shown(void) {
  char *dir = g_dir_make_tmp("ember-ui-train-last-XXXXXX", NULL);
  EmAppState *empty_state = em_app_state_new(dir);
  GtkWidget *empty = em_train_page_new(empty_state);
  GtkWindow *w0 = ui_test_show(empty, 1000, 700);
  ui_test_spin(300);
  g_assert_cmpstr(em_train_page_get_status(EM_TRAIN_PAGE(empty)), ==, "Ready: press Start to train.");
  gtk_window_destroy(w0);
  g_object_unref(empty_state);

  int64_t id = make_run(dir);
  EmAppState *state = em_app_state_new(dir);
  GtkWidget *page = em_train_page_new(state);
  GtkWindow *win = ui_test_show(page, 1000, 700);
  g_assert_true(ui_test_wait(has_points, page, 5000));
  EmLineChart *acc = EM_LINE_CHART(em_train_page_get_accuracy_chart(EM_TRAIN_PAGE(page)));
  g_assert_cmpint(em_line_chart_get_n_points(acc, 0), ==, 2);
  char *want = g_strdup_printf("The last run: run %lld (fmnist-mlp), completed", (long long)id);
  const char *status = em_train_page_get_status(EM_TRAIN_PAGE(page));
  g_assert_true(g_str_has_prefix(status, want));
  g_assert_nonnull(strstr(status, "test accuracy 85.00%"));
  g_assert_nonnull(strstr(status, "after 30 steps"));
  ui_test_screenshot(GTK_WIDGET(win), "train-last-run");
  g_free(want);
  gtk_window_destroy(win);
  g_object_unref(state);
  char *rm[] = {"rm", "-rf", dir, NULL};
  g_spawn_sync(NULL, rm, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
  g_free(dir);
}

int main(int argc, char **argv) {
  ui_test_init(&argc, &argv);
  g_test_add_func("/ui/train/last-run-shown", test_last_run_shown);
  return g_test_run();
}
