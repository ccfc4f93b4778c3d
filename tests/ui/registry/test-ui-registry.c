/* test-ui-registry.c: the Runs, Compare and Registry pages on a real
 * registry: a temporary EMBER_HOME filled by running `ember train` twice
 * (fmnist-mlp at lr 0.1, fmnist-cnn at lr 0.002, 2,000 samples, one epoch;
 * the synthetic dataset when Fashion-MNIST is absent). The tests drive the
 * pages through their actions (what the buttons do) and check the result
 * in the widgets and in the registry read back through em_store.
 * Screenshots: runs, compare, registry. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "em-app-state.h"
#include "em-compare-page.h"
#include "em-registry-page.h"
#include "em-runs-page.h"
#include "em-store.h"
#include "ui-test-util.h"

static char *home;
static EmAppState *state;
static EmRunsPage *runs_page;
static EmComparePage *compare_page;

static void train(const char *spec, const char *lr) {
  const char *exe = g_getenv("EMBER_EXE");
  g_assert_nonnull(exe);
  const char *src = g_getenv("EMBER_SOURCE_ROOT");
  char *spec_path = g_build_filename(src ? src : ".", "data", "models", spec, NULL);
  gboolean have_fmnist = g_file_test("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                                     G_FILE_TEST_EXISTS);
  const char *argv[] = {exe, "train", spec_path, "--epochs", "1", "--limit", "2000", "--lr", lr,
                        "--seed", "1", "--threads", "2", "--quiet",
                        have_fmnist ? NULL : "--dataset", "synthetic", NULL};
  char *out = NULL, *err = NULL;
  int status = 0;
  GError *error = NULL;
  gboolean ok = g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, &err,
                             &status, &error);
  g_assert_no_error(error);
  g_assert_true(ok);
  if (!g_spawn_check_wait_status(status, NULL)) g_error("ember train %s failed:\n%s", spec, err);
  g_free(out);
  g_free(err);
  g_free(spec_path);
}



static void select_ids(gint64 a, gint64 b) {
  gint64 ids[2] = {a, b};
  em_runs_page_select_ids(runs_page, ids, b ? 2 : 1);
}

static double accuracy_of(gint64 id) {
  em_error err = {0};
  em_store *s = em_store_open(home, true, &err);
  g_assert_nonnull(s);
  em_run r = {0};
  g_assert_cmpint(em_store_run_get(s, id, &r, &err), ==, EM_OK);
  double acc = r.final_test_accuracy;
  em_run_clear(&r);
  em_store_close(s);
  return acc;
}

static void test_runs_page(void) {
  runs_page = EM_RUNS_PAGE(em_runs_page_new(state));
  compare_page = EM_COMPARE_PAGE(em_compare_page_new(state));
  g_object_ref_sink(compare_page);
  em_runs_page_set_compare_page(runs_page, compare_page);
  ui_test_show(GTK_WIDGET(runs_page), 1100, 420);
  /* both runs, newest first */
  g_assert_cmpuint(em_runs_page_get_n_shown(runs_page), ==, 2);
  g_assert_cmpint(em_runs_page_get_shown_id(runs_page, 0), ==, 2);
  g_assert_cmpint(em_runs_page_get_shown_id(runs_page, 1), ==, 1);
  g_assert_cmpstr(em_runs_page_get_message(runs_page), ==, "");

  /* sorting by a column: test accuracy, ascending then descending */
  GtkColumnView *view = GTK_COLUMN_VIEW(ui_test_find(GTK_WIDGET(runs_page), GTK_TYPE_COLUMN_VIEW, 0));
  GListModel *cols = gtk_column_view_get_columns(view);
  GtkColumnViewColumn *acc_col = NULL;
  for (guint i = 0; i < g_list_model_get_n_items(cols); i++) {
    GtkColumnViewColumn *c = g_list_model_get_item(cols, i);
    if (strcmp(gtk_column_view_column_get_title(c), "Test accuracy") == 0) acc_col = c;
    g_object_unref(c);
  }
  g_assert_nonnull(acc_col);
  gtk_column_view_sort_by_column(view, acc_col, GTK_SORT_ASCENDING);
  ui_test_spin(50);
  double a0 = accuracy_of(em_runs_page_get_shown_id(runs_page, 0));
  double a1 = accuracy_of(em_runs_page_get_shown_id(runs_page, 1));
  g_assert_cmpfloat(a0, <=, a1);
  gtk_column_view_sort_by_column(view, acc_col, GTK_SORT_DESCENDING);
  ui_test_spin(50);
  g_assert_cmpfloat(accuracy_of(em_runs_page_get_shown_id(runs_page, 0)), >=,
                    accuracy_of(em_runs_page_get_shown_id(runs_page, 1)));

  /* filtering: text, status, model */
  GtkEditable *search = GTK_EDITABLE(ui_test_find(GTK_WIDGET(runs_page), GTK_TYPE_SEARCH_ENTRY, 0));
  gtk_editable_set_text(search, "cnn");
  ui_test_spin(400); /* the search entry's delay */
  g_assert_cmpuint(em_runs_page_get_n_shown(runs_page), ==, 1);
  g_assert_cmpint(em_runs_page_get_shown_id(runs_page, 0), ==, 2);
  gtk_editable_set_text(search, "");
  ui_test_spin(400);
  g_assert_cmpuint(em_runs_page_get_n_shown(runs_page), ==, 2);
  GtkDropDown *status = GTK_DROP_DOWN(ui_test_find(GTK_WIDGET(runs_page), GTK_TYPE_DROP_DOWN, 0));
  GtkDropDown *model = GTK_DROP_DOWN(ui_test_find(GTK_WIDGET(runs_page), GTK_TYPE_DROP_DOWN, 1));
  gtk_drop_down_set_selected(status, 3); /* failed */
  g_assert_cmpuint(em_runs_page_get_n_shown(runs_page), ==, 0);
  gtk_drop_down_set_selected(status, 2); /* completed */
  g_assert_cmpuint(em_runs_page_get_n_shown(runs_page), ==, 2);
  GListModel *models = gtk_drop_down_get_model(model);
  g_assert_cmpuint(g_list_model_get_n_items(models), ==, 3); /* any, cnn, mlp */
  gtk_drop_down_set_selected(model, 2);
  g_assert_cmpuint(em_runs_page_get_n_shown(runs_page), ==, 1);
  g_assert_cmpint(em_runs_page_get_shown_id(runs_page, 0), ==, 1);
  gtk_drop_down_set_selected(model, 0);
  gtk_drop_down_set_selected(status, 0);

  /* a tag on run 1, seen in the registry and by the filter */
  select_ids(1, 0);
  GtkEditable *tag = GTK_EDITABLE(ui_test_find(GTK_WIDGET(runs_page), GTK_TYPE_ENTRY, 0));
  gtk_editable_set_text(tag, "purpose=baseline");
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(runs_page), "runs.tag", NULL));
  g_assert_cmpstr(em_runs_page_get_message(runs_page), ==, "");
  em_error err = {0};
  em_store *s = em_store_open(home, true, &err);
  em_run_annotation *an = NULL;
  int nan_ = 0;
  g_assert_cmpint(em_store_run_annotations(s, 1, &an, &nan_, &err), ==, EM_OK);
  gboolean found = FALSE;
  for (int i = 0; i < nan_; i++)
    found |= strcmp(an[i].kind, "tag") == 0 && g_strcmp0(an[i].key, "purpose") == 0 &&
             strcmp(an[i].text, "baseline") == 0;
  g_assert_true(found);
  em_run_annotations_free(an, nan_);
  em_store_close(s);
  gtk_editable_set_text(search, "baseline");
  ui_test_spin(400);
  g_assert_cmpuint(em_runs_page_get_n_shown(runs_page), ==, 1);
  gtk_editable_set_text(search, "");
  ui_test_spin(400);

  select_ids(1, 2);
  ui_test_spin(100);
  char *png = ui_test_screenshot(GTK_WIDGET(runs_page), "runs");
  g_assert_nonnull(png);
  g_free(png);
}

static void test_compare(void) {
  /* Compare needs two */
  select_ids(1, 0);
  g_assert_false(gtk_widget_activate_action(GTK_WIDGET(runs_page), "runs.compare", NULL) &&
                 em_compare_page_get_n_differences(compare_page) > 0);
  select_ids(1, 2);
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(runs_page), "runs.compare", NULL));
  g_assert_cmpstr(em_compare_page_get_message(compare_page), ==, "");
  /* the curves have points */
  g_assert_nonnull(em_compare_page_get_metric(compare_page));
  g_assert_true(em_compare_page_set_metric(compare_page, "loss"));
  g_assert_cmpint(em_compare_page_get_n_points(compare_page, 0), >=, 16);
  g_assert_cmpint(em_compare_page_get_n_points(compare_page, 1), >=, 16);
  g_assert_true(em_compare_page_set_metric(compare_page, "test_accuracy"));
  g_assert_cmpint(em_compare_page_get_n_points(compare_page, 0), >=, 1);
  /* what differs: the model and the learning rate, not the seed */
  gboolean lr = FALSE, model = FALSE, seed = FALSE;
  for (guint i = 0; i < em_compare_page_get_n_differences(compare_page); i++) {
    const char *k = em_compare_page_get_difference_key(compare_page, i);
    lr |= strcmp(k, "config.optim.lr") == 0;
    model |= strcmp(k, "model") == 0;
    seed |= strcmp(k, "config.seed") == 0;
  }
  g_assert_true(lr);
  g_assert_true(model);
  g_assert_false(seed);
  g_assert_true(em_compare_page_set_metric(compare_page, "loss"));
  GtkWindow *win = ui_test_show(GTK_WIDGET(compare_page), 1200, 760);
  ui_test_spin(100);
  char *png = ui_test_screenshot(GTK_WIDGET(compare_page), "compare");
  g_assert_nonnull(png);
  g_free(png);
  gtk_window_destroy(win);
}

/* Any setting or metric as a column (before: the table could not show lr
 * or batch size): the Columns menu offers them, a column shows each run's
 * value, sorts by number, and goes again. */
static void test_added_columns(void) {
  GtkWidget *page = GTK_WIDGET(runs_page);
  GtkColumnView *view = GTK_COLUMN_VIEW(ui_test_find(page, GTK_TYPE_COLUMN_VIEW, 0));
  guint before = g_list_model_get_n_items(gtk_column_view_get_columns(view));
  g_assert_nonnull(ui_test_find_named(page, "column-config.optim.lr")); /* in the menu */
  g_assert_nonnull(ui_test_find_named(page, "column-metrics.loss"));
  g_assert_true(em_runs_page_add_column(runs_page, "config.optim.lr"));
  g_assert_true(em_runs_page_add_column(runs_page, "metrics.loss"));
  g_assert_false(em_runs_page_add_column(runs_page, "optim.lr")); /* neither kind */
  g_assert_cmpuint(g_list_model_get_n_items(gtk_column_view_get_columns(view)), ==, before + 2);
  GtkCheckButton *check = GTK_CHECK_BUTTON(ui_test_find_named(page, "column-config.optim.lr"));
  g_assert_true(gtk_check_button_get_active(check)); /* the menu follows */
  for (guint i = 0; i < em_runs_page_get_n_shown(runs_page); i++) {
    gint64 id = em_runs_page_get_shown_id(runs_page, i);
    char *lr = em_runs_page_get_cell(runs_page, i, "config.optim.lr");
    char *loss = em_runs_page_get_cell(runs_page, i, "metrics.loss");
    g_assert_cmpstr(lr, ==, id == 1 ? "0.1" : "0.002"); /* as trained (main) */
    g_assert_true(g_ascii_strtod(loss, NULL) > 0);
    g_free(lr);
    g_free(loss);
  }
  /* sorted by it, ascending: 0.002 first */
  GtkColumnViewColumn *lr_col = NULL;
  GListModel *cols = gtk_column_view_get_columns(view);
  for (guint i = 0; i < g_list_model_get_n_items(cols); i++) {
    GtkColumnViewColumn *c = g_list_model_get_item(cols, i);
    if (!g_strcmp0(gtk_column_view_column_get_title(c), "optim.lr")) lr_col = c;
    g_object_unref(c);
  }
  g_assert_nonnull(lr_col);
  gtk_column_view_sort_by_column(view, lr_col, GTK_SORT_ASCENDING);
  ui_test_spin(50);
  char *first = em_runs_page_get_cell(runs_page, 0, "config.optim.lr");
  g_assert_cmpstr(first, ==, "0.002");
  g_free(first);
  char *png = ui_test_screenshot(page, "runs-columns");
  g_free(png);
  em_runs_page_remove_column(runs_page, "config.optim.lr");
  em_runs_page_remove_column(runs_page, "metrics.loss");
  g_assert_cmpuint(g_list_model_get_n_items(gtk_column_view_get_columns(view)), ==, before);
  g_assert_false(gtk_check_button_get_active(check));
  GtkColumnViewColumn *id_col = g_list_model_get_item(cols, 0);
  gtk_column_view_sort_by_column(view, id_col, GTK_SORT_DESCENDING);
  g_object_unref(id_col);
}

static GListModel *run_choices;
static gboolean choices_listed(gpointer n) {
  return g_list_model_get_n_items(run_choices) == GPOINTER_TO_UINT(n);
}

/* The window's Registry page reads the run list on a worker (ten thousand
 * runs held the main loop 90 ms at every registry change): the page is
 * made at once, the "Register run" choices arrive, and again after a
 * registry change. */
static void test_registry_page_async(void) {
  GtkWidget *page = em_registry_page_new_async(state);
  GtkWindow *win = ui_test_show(page, 1100, 600);
  GtkDropDown *runs = GTK_DROP_DOWN(ui_test_find(page, GTK_TYPE_DROP_DOWN, 0));
  run_choices = gtk_drop_down_get_model(runs);
  guint n = em_runs_page_get_n_shown(runs_page);
  g_assert_cmpuint(n, >=, 2);
  g_assert_true(ui_test_wait(choices_listed, GUINT_TO_POINTER(n), 5000));
  em_app_state_registry_changed(state);
  g_assert_true(ui_test_wait(choices_listed, GUINT_TO_POINTER(n), 5000));
  gtk_window_destroy(win);
}

/* The legend names each run by what tells it apart (before: "run 1
 * fmnist-mlp"): its model and learning rate here, not its seed or its
 * checkpoint folder. */
static void test_compare_legend(void) {
  select_ids(1, 2);
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(runs_page), "runs.compare", NULL));
  for (guint i = 0; i < 2; i++) {
    const char *label = em_compare_page_get_run_label(compare_page, i);
    g_assert_nonnull(label);
    g_assert_true(g_str_has_prefix(label, "run "));
    g_assert_nonnull(strstr(label, " · model fmnist-"));
    g_assert_nonnull(strstr(label, " · lr 0."));
    g_assert_null(strstr(label, "seed"));
    g_assert_null(strstr(label, "dir"));
  }
  g_assert_cmpstr(em_compare_page_get_run_label(compare_page, 0), !=,
                  em_compare_page_get_run_label(compare_page, 1));
}

/* The version alias points at in the registry (0: none). */
static int alias_version(const char *model, const char *alias) {
  em_error err = {0};
  em_store *s = em_store_open(home, true, &err);
  g_assert_nonnull(s);
  em_version_row *v = NULL;
  int n = 0, at = 0;
  g_assert_cmpint(em_store_model_versions(s, model, &v, &n, &err), ==, EM_OK);
  for (int i = 0; i < n; i++)
    if (v[i].aliases && strstr(v[i].aliases, alias)) at = v[i].version;
  em_version_rows_free(v, n);
  em_store_close(s);
  return at;
}

static void test_registry_page(void) {
  EmRegistryPage *page = EM_REGISTRY_PAGE(em_registry_page_new(state));
  GtkWindow *win = ui_test_show(GTK_WIDGET(page), 1100, 640);
  /* register run 2's best checkpoint through the page's form */
  GtkDropDown *runs = GTK_DROP_DOWN(ui_test_find(GTK_WIDGET(page), GTK_TYPE_DROP_DOWN, 0));
  g_assert_cmpuint(g_list_model_get_n_items(gtk_drop_down_get_model(runs)), ==, 2);
  gtk_drop_down_set_selected(runs, 0); /* newest first: run 2 */
  GtkEditable *name = GTK_EDITABLE(ui_test_find(GTK_WIDGET(page), GTK_TYPE_ENTRY, 0));
  gtk_editable_set_text(name, "fmnist");
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(page), "registry.register", NULL));
  g_assert_true(g_str_has_prefix(em_registry_page_get_message(page), "Registered run 2"));
  /* and its last checkpoint as v2 */
  g_assert_true(em_registry_page_register(page, 2, FALSE, "fmnist"));
  g_assert_true(em_registry_page_select_model(page, "fmnist"));
  /* promote v1, then v2, then roll back: production moves 1 -> 2 -> 1 */
  g_assert_true(em_registry_page_select_version(page, 1));
  gtk_widget_activate_action(GTK_WIDGET(page), "registry.promote", NULL);
  g_assert_cmpint(alias_version("fmnist", "production"), ==, 1);
  /* the selection stays on v1 (it went to the newest, v2, and a second
   * click promoted the version nobody chose) */
  gtk_widget_activate_action(GTK_WIDGET(page), "registry.promote", NULL);
  g_assert_cmpint(alias_version("fmnist", "production"), ==, 1);
  g_assert_nonnull(
      strstr(em_registry_page_get_message(page), "already points at v1: nothing changed"));
  g_assert_true(em_registry_page_select_version(page, 2));
  gtk_widget_activate_action(GTK_WIDGET(page), "registry.promote", NULL);
  g_assert_cmpint(alias_version("fmnist", "production"), ==, 2);
  g_assert_nonnull(strstr(em_registry_page_get_message(page), "now points at v2"));
  /* promoting it again changes nothing, and says so */
  gtk_widget_activate_action(GTK_WIDGET(page), "registry.promote", NULL);
  g_assert_cmpint(alias_version("fmnist", "production"), ==, 2);
  g_assert_nonnull(
      strstr(em_registry_page_get_message(page), "already points at v2: nothing changed"));
  gtk_widget_activate_action(GTK_WIDGET(page), "registry.rollback", NULL);
  g_assert_cmpint(alias_version("fmnist", "production"), ==, 1);
  g_assert_true(strstr(em_registry_page_get_message(page), "rolled back to v1") != NULL);
  /* nothing left to roll back: refused, said in the page */
  gtk_widget_activate_action(GTK_WIDGET(page), "registry.rollback", NULL);
  gtk_widget_activate_action(GTK_WIDGET(page), "registry.rollback", NULL);
  g_assert_cmpstr(em_registry_page_get_message(page), !=, "");
  /* a bad model name is refused with the store's message */
  g_assert_false(em_registry_page_register(page, 1, TRUE, "-bad name"));
  g_assert_cmpstr(em_registry_page_get_message(page), !=, "");
  gtk_widget_activate_action(GTK_WIDGET(page), "registry.reload", NULL);
  g_assert_true(em_registry_page_select_model(page, "fmnist"));
  g_assert_true(em_registry_page_select_version(page, 1));
  /* export v1 to ONNX: a file in the registry, recorded on its run (2) */
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(page), "registry.export", NULL));
  g_assert_true(g_str_has_prefix(em_registry_page_get_message(page), "Exported fmnist v1 to "));
  char *onnx = g_build_filename(g_getenv("EMBER_HOME"), "artifacts", "exports", "fmnist-v1.onnx",
                                NULL);
  g_assert_true(g_file_test(onnx, G_FILE_TEST_IS_REGULAR));
  em_error err = {0};
  em_store *st = em_store_open(g_getenv("EMBER_HOME"), true, &err);
  g_assert_nonnull(st);
  em_artifact *arts = NULL;
  int na = 0;
  g_assert_cmpint(em_store_artifacts_list(st, 2, &arts, &na, &err), ==, EM_OK);
  gboolean recorded = FALSE;
  for (int i = 0; i < na; i++)
    recorded |= g_strcmp0(arts[i].kind, "export") == 0 && g_strcmp0(arts[i].path, onnx) == 0;
  g_assert_true(recorded);
  em_artifacts_free(arts, na);
  em_store_close(st);
  g_free(onnx);
  ui_test_spin(100);
  char *png = ui_test_screenshot(GTK_WIDGET(page), "registry");
  g_assert_nonnull(png);
  g_free(png);
  gtk_window_destroy(win);
}

static GtkDialog *delete_dialog(void) {
  GListModel *tops = gtk_window_get_toplevels();
  GtkDialog *hit = NULL;
  for (guint i = 0; i < g_list_model_get_n_items(tops) && !hit; i++) {
    GObject *w = g_list_model_get_item(tops, i);
    if (g_object_get_data(w, "em-runs-delete")) hit = GTK_DIALOG(w);
    g_object_unref(w);
  }
  return hit;
}

static void test_delete(void) {
  /* run 2 has model versions: refused, the reason shown in the page */
  select_ids(2, 0);
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(runs_page), "runs.delete", NULL));
  GtkDialog *d = delete_dialog();
  g_assert_nonnull(d);
  gtk_dialog_response(d, GTK_RESPONSE_ACCEPT);
  ui_test_spin(50);
  g_assert_nonnull(strstr(em_runs_page_get_message(runs_page), "Run 2 was not deleted"));
  g_assert_cmpuint(em_runs_page_get_n_shown(runs_page), ==, 2);
  /* cancel keeps run 1; accept deletes it */
  select_ids(1, 0);
  gtk_widget_activate_action(GTK_WIDGET(runs_page), "runs.delete", NULL);
  gtk_dialog_response(delete_dialog(), GTK_RESPONSE_CANCEL);
  ui_test_spin(50);
  g_assert_cmpuint(em_runs_page_get_n_shown(runs_page), ==, 2);
  gtk_widget_activate_action(GTK_WIDGET(runs_page), "runs.delete", NULL);
  gtk_dialog_response(delete_dialog(), GTK_RESPONSE_ACCEPT);
  ui_test_spin(50);
  g_assert_cmpuint(em_runs_page_get_n_shown(runs_page), ==, 1);
  g_assert_cmpint(em_runs_page_get_shown_id(runs_page, 0), ==, 2);
  g_assert_cmpstr(em_runs_page_get_message(runs_page), ==, "");
}

static gboolean shown_two(gpointer data) {
  (void)data;
  return em_runs_page_get_n_shown(runs_page) == 2;
}

/* While a run trains the page reads the registry every 2 s by itself: a
 * run recorded by another process appears without "registry-changed". */
static void test_live_refresh(void) {
  g_assert_cmpuint(em_runs_page_get_n_shown(runs_page), ==, 1);
  em_app_state_run_started(state, 0);
  train("fmnist-mlp.json", "0.02");
  gint64 t0 = g_get_monotonic_time();
  g_assert_true(ui_test_wait(shown_two, NULL, 5000));
  printf("# runs page: a new run appeared %.1f s after it was recorded\n",
         (g_get_monotonic_time() - t0) / 1e6);
  em_app_state_run_finished(state, 3, EM_RUN_COMPLETED, NULL);
  GtkColumnView *view = GTK_COLUMN_VIEW(ui_test_find(GTK_WIDGET(runs_page), GTK_TYPE_COLUMN_VIEW, 0));
  GtkColumnViewColumn *id_col = g_list_model_get_item(gtk_column_view_get_columns(view), 0);
  g_assert_cmpstr(gtk_column_view_column_get_title(id_col), ==, "ID");
  gtk_column_view_sort_by_column(view, id_col, GTK_SORT_DESCENDING);
  g_object_unref(id_col);
  g_assert_cmpint(em_runs_page_get_shown_id(runs_page, 0), ==, 3);
  g_assert_cmpint(em_runs_page_get_shown_id(runs_page, 1), ==, 2);
}

/* `ember train SPEC ARGS...` into the registry dir (NULL-terminated ARGS). */
static void train_into(const char *dir, const char *spec, ...) {
  const char *src = g_getenv("EMBER_SOURCE_ROOT");
  char *spec_path = g_build_filename(src ? src : ".", "data", "models", spec, NULL);
  GPtrArray *argv = g_ptr_array_new();
  const char *fixed[] = {g_getenv("EMBER_EXE"), "train", spec_path, "--registry", dir,
                         "--dataset", "synthetic", "--limit", "512", "--epochs", "1",
                         "--threads", "2", "--quiet"};
  for (size_t i = 0; i < G_N_ELEMENTS(fixed); i++) g_ptr_array_add(argv, (char *)fixed[i]);
  va_list ap;
  va_start(ap, spec);
  for (const char *a; (a = va_arg(ap, const char *));) g_ptr_array_add(argv, (char *)a);
  va_end(ap);
  g_ptr_array_add(argv, NULL);
  char *err = NULL;
  int status = 0;
  g_assert_true(g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL,
                             NULL, NULL, &err, &status, NULL));
  if (!g_spawn_check_wait_status(status, NULL)) g_error("ember train %s failed:\n%s", spec, err);
  g_free(err);
  g_ptr_array_free(argv, TRUE);
  g_free(spec_path);
}

/* Issue 32, item 7: the Registry page's defaults follow what was just
 * done. "Register run" offers the newest finished run (it offered a
 * stopped one); after registering v2 the selection is on v2 (it stayed on
 * v1, and Promote promoted v1); another architecture under the same name
 * is said, with both parameter counts, and registered on a second press. */
static void test_registry_traps(void) {
  char *dir = g_dir_make_tmp("ember-ui-registry-traps-XXXXXX", NULL);
  train_into(dir, "fmnist-mlp.json", NULL);                             /* run 1 */
  train_into(dir, "fmnist-cnn.json", NULL);                             /* run 2 */
  train_into(dir, "fmnist-mlp.json", "--stop-after-steps", "1", NULL);  /* run 3, stopped */
  EmAppState *st = em_app_state_new(dir);
  EmRegistryPage *page = EM_REGISTRY_PAGE(em_registry_page_new(st));
  GtkWindow *win = ui_test_show(GTK_WIDGET(page), 1100, 640);
  GtkDropDown *runs = GTK_DROP_DOWN(ui_test_find(GTK_WIDGET(page), GTK_TYPE_DROP_DOWN, 0));
  GtkStringObject *item = gtk_drop_down_get_selected_item(runs);
  g_assert_nonnull(item);
  g_assert_true(g_str_has_prefix(gtk_string_object_get_string(item), "run 2 "));
  GtkEditable *name = GTK_EDITABLE(ui_test_find(GTK_WIDGET(page), GTK_TYPE_ENTRY, 0));
  gtk_editable_set_text(name, "fmnist");
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(page), "registry.register", NULL));
  g_assert_true(g_str_has_prefix(em_registry_page_get_message(page), "Registered run 2"));
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(page), "registry.register", NULL));
  g_assert_nonnull(strstr(em_registry_page_get_message(page), "fmnist v2"));
  /* Promote now promotes v2, what was just registered */
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(page), "registry.promote", NULL));
  g_assert_nonnull(strstr(em_registry_page_get_message(page), "now points at v2"));
  /* the MLP (run 1) under the CNN's name: said, not done */
  g_assert_false(em_registry_page_register(page, 1, TRUE, "fmnist"));
  const char *msg = em_registry_page_get_message(page);
  g_test_message("%s", msg);
  g_assert_nonnull(strstr(msg, "235,146 parameters against 421,642"));
  g_assert_nonnull(strstr(msg, "Press Register again"));
  em_error err = {0};
  em_store *s = em_store_open(dir, true, &err);
  em_version_row *v = NULL;
  int n = 0;
  g_assert_cmpint(em_store_model_versions(s, "fmnist", &v, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 2);
  em_version_rows_free(v, n);
  em_store_close(s);
  /* pressed again: registered as v3, and selected */
  g_assert_true(em_registry_page_register(page, 1, TRUE, "fmnist"));
  g_assert_nonnull(strstr(em_registry_page_get_message(page), "fmnist v3"));
  g_free(ui_test_screenshot(GTK_WIDGET(page), "registry-traps"));
  gtk_window_destroy(win);
  g_object_unref(st);
  char *rm[] = {"rm", "-rf", dir, NULL};
  g_spawn_sync(NULL, rm, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
  g_free(dir);
}

int main(int argc, char **argv) {
  GError *error = NULL;
  home = g_dir_make_tmp("ember-ui-registry-XXXXXX", &error);
  g_assert_no_error(error);
  g_setenv("EMBER_HOME", home, TRUE); /* before any thread starts */
  ui_test_init(&argc, &argv);
  train("fmnist-mlp.json", "0.1");
  train("fmnist-cnn.json", "0.002");
  state = em_app_state_new(home);
  g_test_add_func("/registry/runs-page", test_runs_page);
  g_test_add_func("/registry/compare-page", test_compare);
  g_test_add_func("/registry/compare-legend", test_compare_legend);
  g_test_add_func("/registry/added-columns", test_added_columns);
  g_test_add_func("/registry/registry-page-async", test_registry_page_async);
  g_test_add_func("/registry/registry-page", test_registry_page);
  g_test_add_func("/registry/delete", test_delete);
  g_test_add_func("/registry/live-refresh", test_live_refresh);
  g_test_add_func("/registry/traps", test_registry_traps);
  int rc = g_test_run();
  char *rm[] = {"rm", "-rf", home, NULL};
  g_spawn_sync(NULL, rm, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
  g_free(home);
  return rc;
}
