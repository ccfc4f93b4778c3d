/* test-ui-registry-odd.c: the Runs, Compare and Registry pages on a
 * registry of odd runs written through em_store (no training, so it is
 * quick): metrics that are NaN, infinite or 1e300, a failed run with its
 * message, a model with a very long name, a run still "running" in this
 * process, and a registry path that is a file. From the GUI fuzz. */
#include <math.h>
#include <string.h>

#include "em-app-state.h"
#include "em-compare-page.h"
#include "em-registry-page.h"
#include "em-run-row.h"
#include "em-runs-page.h"
#include "em-store.h"
#include "ui-test-util.h"

#define LONG_MODEL "a-model-name-that-is-also-unreasonably-long-for-a-column-of-a-table"

static char *home;
static gint64 id_nan, id_inf, id_huge, id_ok, id_failed, id_running;

static gint64 make_run(em_store *s, em_store_writer *w, const char *model, double acc,
                       double loss, em_run_status status, const char *msg) {
  em_error err = {0};
  int64_t id = 0;
  em_run_new rn = {.model = model, .spec_json = "{}", .config_json = "{\"optim\":{\"lr\":0.1}}",
                   .device = "cpu", .engine_version = "test"};
  g_assert_cmpint(em_store_run_create(s, &rn, &id, &err), ==, EM_OK);
  double now = (double)g_get_real_time() / 1e6;
  for (int k = 1; k <= 3; k++) em_store_writer_metric(w, id, k, "loss", 1.0 / k, now);
  em_store_writer_metric(w, id, 3, "test_accuracy", acc, now);
  em_store_writer_metric(w, id, 3, "test_loss", loss, now);
  g_assert_cmpint(em_store_writer_flush(w, &err), ==, EM_OK);
  if (status != EM_RUN_RUNNING)
    g_assert_cmpint(em_store_run_finish(s, id, status, msg, &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_tag(s, id, "batch", id % 2 ? "odd" : "even", &err), ==, EM_OK);
  return id;
}

static void fill_registry(void) {
  em_error err = {0};
  em_store *s = em_store_open(home, false, &err);
  g_assert_nonnull(s);
  em_store_writer *w = em_store_writer_new(home, 200, &err);
  g_assert_nonnull(w);
  id_nan = make_run(s, w, "mlp", NAN, NAN, EM_RUN_COMPLETED, NULL);
  id_inf = make_run(s, w, "mlp", INFINITY, -INFINITY, EM_RUN_COMPLETED, NULL);
  id_huge = make_run(s, w, LONG_MODEL, 1e300, 1e300, EM_RUN_COMPLETED, NULL);
  id_ok = make_run(s, w, "mlp", 0.5, 0.7, EM_RUN_COMPLETED, NULL);
  id_failed = make_run(s, w, "mlp", 0.2, 2.0, EM_RUN_FAILED, "the loss diverged at step 3");
  id_running = make_run(s, w, "mlp", 0.3, 1.0, EM_RUN_RUNNING, NULL); /* this process's */
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);
  em_store_close(s);
}

static GtkColumnViewColumn *column(GtkWidget *page, const char *title) {
  GtkColumnView *view = GTK_COLUMN_VIEW(ui_test_find(page, GTK_TYPE_COLUMN_VIEW, 0));
  GListModel *cols = gtk_column_view_get_columns(view);
  for (guint i = 0; i < g_list_model_get_n_items(cols); i++) {
    GtkColumnViewColumn *c = g_list_model_get_item(cols, i);
    g_object_unref(c); /* the view keeps it */
    if (strcmp(gtk_column_view_column_get_title(c), title) == 0) return c;
  }
  g_assert_not_reached();
}

static gboolean has_label(GtkWidget *root, const char *text, const char *tooltip) {
  GPtrArray *labels = g_ptr_array_new();
  ui_test_collect(root, GTK_TYPE_LABEL, labels);
  gboolean hit = FALSE;
  for (guint i = 0; i < labels->len && !hit; i++) {
    GtkWidget *l = labels->pdata[i];
    hit = strcmp(gtk_label_get_text(GTK_LABEL(l)), text) == 0 &&
          (!tooltip || g_strcmp0(gtk_widget_get_tooltip_text(l), tooltip) == 0);
  }
  g_ptr_array_unref(labels);
  return hit;
}

static void test_metric_format(void) {
  char buf[64];
  em_run_row_format_metric(INFINITY, TRUE, buf, sizeof buf);
  g_assert_cmpstr(buf, ==, "inf");
  em_run_row_format_metric(-INFINITY, FALSE, buf, sizeof buf);
  g_assert_cmpstr(buf, ==, "-inf");
  em_run_row_format_metric(NAN, TRUE, buf, sizeof buf);
  g_assert_cmpstr(buf, ==, "");
  em_run_row_format_metric(1e300, TRUE, buf, sizeof buf);
  g_assert_cmpstr(buf, ==, "1e+302%");
  em_run_row_format_metric(-1e300, FALSE, buf, sizeof buf);
  g_assert_cmpstr(buf, ==, "-1e+300");
  em_run_row_format_metric(0.5167, TRUE, buf, sizeof buf);
  g_assert_cmpstr(buf, ==, "51.67%");
  em_run_row_format_metric(1.32264, FALSE, buf, sizeof buf);
  g_assert_cmpstr(buf, ==, "1.3226");
}

/* Absent accuracy (NaN) sorts last both ways; the failed run's message is
 * its status's tooltip; values print without "inf%" or 300 digits. */
static void test_runs_sort_and_text(void) {
  EmAppState *state = em_app_state_new(home);
  GtkWidget *page = em_runs_page_new(state);
  GtkWindow *win = ui_test_show(page, 1200, 500);
  EmRunsPage *rp = EM_RUNS_PAGE(page);
  guint n = em_runs_page_get_n_shown(rp);
  g_assert_cmpuint(n, ==, 6);
  GtkColumnView *view = GTK_COLUMN_VIEW(ui_test_find(page, GTK_TYPE_COLUMN_VIEW, 0));
  GtkColumnViewColumn *acc = column(page, "Test accuracy");
  gtk_column_view_sort_by_column(view, acc, GTK_SORT_DESCENDING);
  ui_test_spin(50);
  g_assert_cmpint(em_runs_page_get_shown_id(rp, n - 1), ==, id_nan);
  g_assert_cmpint(em_runs_page_get_shown_id(rp, 0), ==, id_inf);
  gtk_column_view_sort_by_column(view, acc, GTK_SORT_ASCENDING);
  ui_test_spin(50);
  g_assert_cmpint(em_runs_page_get_shown_id(rp, n - 1), ==, id_nan);
  g_assert_cmpint(em_runs_page_get_shown_id(rp, 0), ==, id_failed);
  ui_test_spin(100);
  g_assert_true(has_label(page, "inf", NULL));
  g_assert_true(has_label(page, "1e+302%", NULL));
  g_assert_true(has_label(page, "failed", "the loss diverged at step 3"));
  g_free(ui_test_screenshot(page, "runs-odd"));

  /* deleting the run this process is still training: refused, and said */
  em_runs_page_select_ids(rp, &id_running, 1);
  g_assert_true(gtk_widget_activate_action(page, "runs.delete", NULL));
  GListModel *tops = gtk_window_get_toplevels();
  GtkDialog *d = NULL;
  for (guint i = 0; i < g_list_model_get_n_items(tops) && !d; i++) {
    GObject *w = g_list_model_get_item(tops, i);
    if (g_object_get_data(w, "em-runs-delete")) d = GTK_DIALOG(w);
    g_object_unref(w);
  }
  g_assert_nonnull(d);
  gtk_dialog_response(d, GTK_RESPONSE_ACCEPT);
  ui_test_spin(50);
  char *want = g_strdup_printf("Run %" G_GINT64_FORMAT " was not deleted", id_running);
  g_assert_nonnull(strstr(em_runs_page_get_message(rp), want));
  g_assert_nonnull(strstr(em_runs_page_get_message(rp), "still training"));
  g_free(want);
  g_assert_cmpuint(em_runs_page_get_n_shown(rp), ==, 6);
  gtk_window_destroy(win);
  g_object_unref(state);
}

/* While a run trains the page reads the registry only when it is shown,
 * and once more when it is shown again. */
static void test_runs_refresh_when_shown(void) {
  EmAppState *state = em_app_state_new(home);
  GtkWidget *stack = gtk_stack_new();
  GtkWidget *page = em_runs_page_new(state);
  gtk_stack_add_named(GTK_STACK(stack), gtk_label_new("another page"), "other");
  gtk_stack_add_named(GTK_STACK(stack), page, "runs");
  gtk_stack_set_visible_child_name(GTK_STACK(stack), "other");
  GtkWindow *win = ui_test_show(stack, 900, 400);
  EmRunsPage *rp = EM_RUNS_PAGE(page);
  guint before = em_runs_page_get_n_reloads(rp);
  em_app_state_run_started(state, 0);
  em_app_state_registry_changed(state);
  ui_test_spin(2300); /* one 2 s refresh */
  g_assert_cmpuint(em_runs_page_get_n_reloads(rp), ==, before);
  gtk_stack_set_visible_child_name(GTK_STACK(stack), "runs");
  ui_test_spin(100);
  g_assert_cmpuint(em_runs_page_get_n_reloads(rp), ==, before + 1);
  em_app_state_run_finished(state, 0, EM_RUN_COMPLETED, NULL);
  gtk_window_destroy(win);
  g_object_unref(state);
}

/* Compare: an infinite metric reads "inf" (json_real gave NULL: "—"), the
 * long model name does not widen its column beyond the page, and "(None)"
 * leaves no title of the metric before. */
static void test_compare(void) {
  EmAppState *state = em_app_state_new(home);
  GtkWidget *page = em_compare_page_new(state);
  GtkWindow *win = ui_test_show(page, 1000, 600);
  EmComparePage *cp = EM_COMPARE_PAGE(page);
  gint64 ids[] = {id_inf, id_huge, id_ok};
  em_compare_page_set_runs(cp, ids, 3);
  ui_test_spin(100);
  g_assert_cmpstr(em_compare_page_get_difference(cp, "metrics.test_accuracy", 0), ==, "inf");
  g_assert_cmpstr(em_compare_page_get_difference(cp, "metrics.test_loss", 0), ==, "-inf");
  g_assert_cmpstr(em_compare_page_get_difference(cp, "model", 1), ==, LONG_MODEL);
  GtkWidget *table = ui_test_find(page, GTK_TYPE_COLUMN_VIEW, 0);
  g_assert_cmpint(gtk_widget_get_width(table), <=, 1000);
  int min = 0;
  gtk_widget_measure(page, GTK_ORIENTATION_HORIZONTAL, -1, &min, NULL, NULL, NULL);
  g_assert_cmpint(min, <=, 1000);
  g_assert_true(em_compare_page_set_metric(cp, "loss"));
  g_assert_cmpstr(em_compare_page_get_chart_title(cp), ==, "loss");
  GtkDropDown *metric = NULL;
  GPtrArray *dds = g_ptr_array_new();
  ui_test_collect(page, GTK_TYPE_DROP_DOWN, dds);
  for (guint i = 0; i < dds->len && !metric; i++) {
    GListModel *m = gtk_drop_down_get_model(dds->pdata[i]);
    for (guint k = 0; m && k < g_list_model_get_n_items(m) && !metric; k++) {
      GtkStringObject *o = g_list_model_get_item(m, k);
      if (GTK_IS_STRING_OBJECT(o) && !strcmp(gtk_string_object_get_string(o), "loss"))
        metric = dds->pdata[i];
      g_object_unref(o);
    }
  }
  g_ptr_array_unref(dds);
  g_assert_nonnull(metric);
  gtk_drop_down_set_selected(metric, GTK_INVALID_LIST_POSITION);
  ui_test_spin(50);
  g_assert_null(em_compare_page_get_chart_title(cp));
  g_free(ui_test_screenshot(page, "compare-odd"));
  gtk_window_destroy(win);
  g_object_unref(state);
}

/* Compare a run that failed before its first evaluation (only "loss")
 * with one that finished: test_accuracy is still offered (the metrics
 * were those every run had: the failed run hid it from both), its curve
 * shows the finished run, and the page says which run has none. */
static void test_compare_partial(void) {
  char *dir = g_build_filename(home, "partial", NULL);
  g_assert_cmpint(g_mkdir_with_parents(dir, 0700), ==, 0);
  em_error err = {0};
  em_store *s = em_store_open(dir, false, &err);
  g_assert_nonnull(s);
  em_store_writer *w = em_store_writer_new(dir, 200, &err);
  g_assert_nonnull(w);
  gint64 ids[2];
  ids[0] = make_run(s, w, "mlp", 0.8, 0.5, EM_RUN_COMPLETED, NULL);
  int64_t id = 0;
  em_run_new rn = {.model = "mlp", .spec_json = "{}", .config_json = "{}", .device = "cpu",
                   .engine_version = "test"};
  g_assert_cmpint(em_store_run_create(s, &rn, &id, &err), ==, EM_OK);
  em_store_writer_metric(w, id, 1, "loss", 2.3, (double)g_get_real_time() / 1e6);
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_finish(s, id, EM_RUN_FAILED, "the loss became NaN at step 2", &err),
                  ==, EM_OK);
  em_store_close(s);
  ids[1] = id;

  EmAppState *state = em_app_state_new(dir);
  GtkWidget *page = em_compare_page_new(state);
  GtkWindow *win = ui_test_show(page, 1000, 600);
  EmComparePage *cp = EM_COMPARE_PAGE(page);
  em_compare_page_set_runs(cp, ids, 2);
  ui_test_spin(50);
  g_assert_cmpstr(em_compare_page_get_metric(cp), ==, "test_accuracy");
  g_assert_cmpint(em_compare_page_get_n_points(cp, 0), ==, 1);
  g_assert_cmpint(em_compare_page_get_n_points(cp, 1), ==, 0);
  char *want = g_strdup_printf("Run %" G_GINT64_FORMAT " (failed) recorded no test_accuracy.", id);
  g_assert_cmpstr(em_compare_page_get_message(cp), ==, want);
  g_free(want);
  g_assert_true(em_compare_page_set_metric(cp, "loss")); /* both have it: no note */
  g_assert_cmpint(em_compare_page_get_n_points(cp, 1), ==, 1);
  g_assert_cmpstr(em_compare_page_get_message(cp), ==, "");
  gtk_window_destroy(win);
  g_object_unref(state);
  g_free(dir);
}

/* A registry path that is a file: the pages say what Start would. */
static void test_registry_is_a_file(void) {
  char *file = g_build_filename(home, "not-a-folder", NULL);
  g_assert_true(g_file_set_contents(file, "x", 1, NULL));
  EmAppState *state = em_app_state_new(file);
  GtkWidget *runs = em_runs_page_new(state);
  g_assert_nonnull(strstr(em_runs_page_get_message(EM_RUNS_PAGE(runs)), "is a file, not a folder"));
  g_object_ref_sink(runs);
  g_object_unref(runs);
  g_object_unref(state);
  g_free(file);
}

int main(int argc, char **argv) {
  home = g_dir_make_tmp("ember-ui-registry-odd-XXXXXX", NULL);
  g_setenv("EMBER_HOME", home, TRUE);
  ui_test_init(&argc, &argv);
  fill_registry();
  g_test_add_func("/registry-odd/metric-format", test_metric_format);
  g_test_add_func("/registry-odd/compare-partial", test_compare_partial);
  g_test_add_func("/registry-odd/runs-sort-and-text", test_runs_sort_and_text);
  g_test_add_func("/registry-odd/runs-refresh-when-shown", test_runs_refresh_when_shown);
  g_test_add_func("/registry-odd/compare", test_compare);
  g_test_add_func("/registry-odd/registry-is-a-file", test_registry_is_a_file);
  int rc = g_test_run();
  char *rm[] = {"rm", "-rf", home, NULL};
  g_spawn_sync(NULL, rm, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
  g_free(home);
  return rc;
}
