/* test-ui-workflow.c: the workbench's main workflow, end to end, in one
 * real window over a temporary EMBER_HOME, driven through the pages'
 * widgets and actions as a person would:
 *   1. Builder: fmnist-cnn from the model zoo; the rows show their shapes
 *      and the shared spec is the builder's.
 *   2. Data: Fashion-MNIST when Debian's copy is there, else synthetic;
 *      the learning rate set on the Train page before is kept.
 *   3. Train: 1,000 samples, one epoch, "Profile a window" on; while it
 *      runs the Memory page plots points and the Profiler page fills its
 *      table, whose ops all lie within the profiled training steps (the
 *      window closes before the evaluation); the run completes.
 *   4. The zoo's fmnist-mlp trained the same way for up to 20 epochs,
 *      stopped (Stop) after its first evaluation.
 *   5. Runs: both listed, both selected, Compare: two loss curves and a
 *      table of differences.
 *   6. Registry: the run with the better final test accuracy registered as
 *      model "fmnist" and promoted to "production", read back through
 *      em_store.
 * Each step's page is rendered to workflow-<step>.png. */
#include <glib/gstdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "em-app-state.h"
#include "em-application.h"
#include "em-builder-page.h"
#include "em-compare-page.h"
#include "em-data-page.h"
#include "em-memory-page.h"
#include "em-profile.h"
#include "em-profiler-page.h"
#include "em-registry-page.h"
#include "em-runs-page.h"
#include "em-store.h"
#include "em-train-page.h"
#include "em-window.h"
#include "ui-test-util.h"

static char *g_home;
static EmApplication *g_app;

/* ---- finding widgets ---------------------------------------------------------- */



/* A label under w whose text is exactly text. */
static gboolean has_label(GtkWidget *w, const char *text) {
  if (GTK_IS_LABEL(w) && !g_strcmp0(gtk_label_get_text(GTK_LABEL(w)), text)) return TRUE;
  for (GtkWidget *c = gtk_widget_get_first_child(w); c; c = gtk_widget_get_next_sibling(c))
    if (has_label(c, text)) return TRUE;
  return FALSE;
}

/* The position of the dropdown item whose string starts with prefix. */
static guint item_with_prefix(GtkDropDown *dd, const char *prefix) {
  GListModel *m = gtk_drop_down_get_model(dd);
  for (guint i = 0; m && i < g_list_model_get_n_items(m); i++) {
    GtkStringObject *s = g_list_model_get_item(m, i);
    gboolean hit = g_str_has_prefix(gtk_string_object_get_string(s), prefix);
    g_object_unref(s);
    if (hit) return i;
  }
  return GTK_INVALID_LIST_POSITION;
}

/* The builder's "Model zoo…" dropdown. */
static GtkDropDown *zoo_dropdown(GtkWidget *builder) {
  GPtrArray *all = g_ptr_array_new();
  ui_test_collect(builder, GTK_TYPE_DROP_DOWN, all);
  GtkDropDown *zoo = NULL;
  for (guint i = 0; i < all->len && !zoo; i++)
    if (item_with_prefix(all->pdata[i], "Model zoo") == 0) zoo = all->pdata[i];
  g_ptr_array_unref(all);
  g_assert_nonnull(zoo);
  return zoo;
}

static void shoot(EmWindow *win, const char *step) {
  ui_test_spin(300);
  char name[64];
  g_snprintf(name, sizeof name, "workflow-%s", step);
  char *png = ui_test_screenshot(GTK_WIDGET(win), name);
  g_assert_nonnull(png);
  g_test_message("%s", png);
  g_free(png);
}

static void show(EmWindow *win, const char *page) {
  g_assert_true(g_action_group_has_action(G_ACTION_GROUP(win), "page"));
  g_action_group_activate_action(G_ACTION_GROUP(win), "page", g_variant_new_string(page));
  g_assert_cmpstr(em_window_get_visible_page(win), ==, page);
  ui_test_spin(50);
}

/* ---- the training runs ----------------------------------------------------------- */

typedef struct {
  gint64 run_id;
  gboolean finished;
  int status;
  gint64 points, evals;
  char *profile;
} run_watch;

static void on_started(EmAppState *s, gint64 id, run_watch *w) {
  (void)s;
  w->run_id = id;
}

static void on_progress(EmAppState *s, gpointer u, run_watch *w) {
  (void)s;
  const EmTrainUpdate *up = u;
  w->points += up->n;
  w->evals += up->n_eval;
}

static void on_finished(EmAppState *s, gint64 id, int status, const char *msg, run_watch *w) {
  (void)s;
  (void)id;
  if (msg) g_test_message("run finished: %s", msg);
  w->finished = TRUE;
  w->status = status;
}

static void on_profile(EmAppState *s, const char *path, run_watch *w) {
  (void)s;
  g_free(w->profile);
  w->profile = g_strdup(path);
}

static gboolean is_finished(gpointer d) { return ((run_watch *)d)->finished; }
static gboolean has_points(gpointer d) { return ((run_watch *)d)->points > 0; }
static gboolean has_eval(gpointer d) { return ((run_watch *)d)->evals > 0; }
static gboolean memory_has_points(gpointer p) { return em_memory_page_get_n_points(p) > 0; }
static gboolean profiler_has_rows(gpointer p) { return em_profiler_page_get_n_rows(p) > 0; }
static gboolean data_loaded(gpointer p) {
  return !em_data_page_is_loading(p) && em_data_page_get_n_samples(p) > 0;
}

static void train_settings(EmTrainPage *page, int epochs) {
  g_assert_true(em_train_page_set_value(page, "limit", 1000));
  g_assert_true(em_train_page_set_value(page, "epochs", epochs));
  g_assert_true(em_train_page_set_value(page, "threads", 2));
}

static double accuracy_of(gint64 id) {
  em_error err = {0};
  em_store *s = em_store_open(g_home, true, &err);
  g_assert_nonnull(s);
  em_run r;
  memset(&r, 0, sizeof r);
  g_assert_cmpint(em_store_run_get(s, id, &r, &err), ==, EM_OK);
  double acc = r.final_test_accuracy;
  em_run_clear(&r);
  em_store_close(s);
  return acc;
}

/* ---- the workflow ------------------------------------------------------------------- */

static void test_workflow(void) {
  gint64 t_start = g_get_monotonic_time();
  EmAppState *state = em_app_state_new(g_home);
  EmWindow *win = em_window_new(GTK_APPLICATION(g_app), state);
  g_object_unref(state);
  ui_test_show(GTK_WIDGET(win), 1400, 860);
  run_watch w = {0};
  g_signal_connect(state, "run-started", G_CALLBACK(on_started), &w);
  g_signal_connect(state, "run-progress", G_CALLBACK(on_progress), &w);
  g_signal_connect(state, "run-finished", G_CALLBACK(on_finished), &w);
  g_signal_connect(state, "profile-ready", G_CALLBACK(on_profile), &w);

  /* 1. Builder: the zoo's CNN */
  show(win, "builder");
  GtkWidget *builder = em_window_get_page(win, "builder");
  g_assert_true(EM_IS_BUILDER_PAGE(builder));
  GtkDropDown *zoo = zoo_dropdown(builder);
  guint cnn = item_with_prefix(zoo, "fmnist-cnn");
  g_assert_cmpuint(cnn, !=, GTK_INVALID_LIST_POSITION);
  gtk_drop_down_set_selected(zoo, cnn);
  ui_test_spin(50);
  g_assert_null(em_builder_page_get_error(EM_BUILDER_PAGE(builder)));
  const char *spec = em_app_state_get_spec_json(state);
  g_assert_nonnull(spec);
  g_assert_nonnull(strstr(spec, "\"fmnist-cnn\""));
  g_assert_nonnull(strstr(spec, "Conv2d"));
  g_assert_true(has_label(builder, "[N, 32, 28, 28]")); /* conv1 */
  g_assert_true(has_label(builder, "[N, 10]"));         /* fc2 */
  shoot(win, "builder");

  /* a setting chosen on the Train page before the Data page is first seen */
  show(win, "train");
  EmTrainPage *train = EM_TRAIN_PAGE(em_window_get_page(win, "train"));
  g_assert_cmpfloat(em_train_page_get_value(train, "lr"), ==, 0.001); /* the CNN's own */
  g_assert_true(em_train_page_set_value(train, "lr", 0.002));

  /* 2. Data */
  gboolean fmnist = g_file_test("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                                G_FILE_TEST_EXISTS);
  show(win, "data");
  EmDataPage *data = EM_DATA_PAGE(em_window_get_page(win, "data"));
  if (!fmnist) {
    GtkDropDown *kind = GTK_DROP_DOWN(ui_test_find(GTK_WIDGET(data), GTK_TYPE_DROP_DOWN, 0));
    gtk_drop_down_set_selected(kind, 3); /* synthetic */
    g_assert_true(gtk_widget_activate_action(GTK_WIDGET(data), "data.load", NULL));
  }
  g_assert_true(ui_test_wait(data_loaded, data, 30000));
  g_assert_null(em_data_page_get_error(data));
  g_assert_cmpstr(em_app_state_get_dataset_name(state), ==, fmnist ? "fashion-mnist" : "synthetic");
  g_assert_cmpint(em_data_page_get_n_previews(data), >, 0);
  shoot(win, "data");

  /* 3. Train the CNN with a profiled window, watching Memory and Profiler */
  show(win, "train");
  /* the dataset's arrival kept what the person chose */
  g_assert_cmpfloat(em_train_page_get_value(train, "lr"), ==, 0.002);
  train_settings(train, 1);
  em_train_page_set_profile(train, TRUE);
  gint64 t0 = g_get_monotonic_time();
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(train), "train.start", NULL));
  g_assert_true(em_train_page_is_running(train));
  g_assert_true(ui_test_wait(has_points, &w, 60000));
  shoot(win, "train");
  show(win, "memory");
  EmMemoryPage *memory = EM_MEMORY_PAGE(em_window_get_page(win, "memory"));
  g_assert_true(ui_test_wait(memory_has_points, memory, 30000));
  shoot(win, "memory");
  show(win, "profiler");
  EmProfilerPage *profiler = EM_PROFILER_PAGE(em_window_get_page(win, "profiler"));
  g_assert_true(ui_test_wait(profiler_has_rows, profiler, 60000));
  g_assert_nonnull(w.profile);
  /* the window holds training steps only: its ops' time lies within them */
  em_op_table tab;
  em_error terr = {0};
  g_assert_cmpint(em_op_table_build(&tab, EM_OP_TABLE_BY_OP, &terr), ==, EM_OK);
  g_test_message("profiled window: %lld steps in %.1f ms, ops' self time %.1f ms",
                 (long long)tab.steps, tab.wall_ms, tab.self_sum_ms);
  g_assert_cmpint(tab.steps, >, 0);
  g_assert_cmpfloat(tab.self_sum_ms, <=, tab.wall_ms * 1.02);
  em_op_table_free(&tab);
  shoot(win, "profiler");
  g_assert_true(ui_test_wait(is_finished, &w, 90000));
  g_assert_cmpint(w.status, ==, EM_RUN_COMPLETED);
  gint64 run_cnn = w.run_id;
  g_assert_cmpint(run_cnn, >, 0);
  g_assert_cmpint(w.evals, >, 0);
  g_assert_cmpint(em_memory_page_get_n_points(memory), ==, w.points);
  g_remove(w.profile);
  g_test_message("CNN run: %lld steps in %.1f s", (long long)w.points,
                 (g_get_monotonic_time() - t0) / 1e6);

  /* 4. The zoo's MLP, up to 20 epochs, stopped after its first evaluation */
  show(win, "builder");
  guint mlp = item_with_prefix(zoo, "fmnist-mlp");
  g_assert_cmpuint(mlp, !=, GTK_INVALID_LIST_POSITION);
  gtk_drop_down_set_selected(zoo, mlp);
  ui_test_spin(50);
  g_assert_nonnull(strstr(em_app_state_get_spec_json(state), "\"fmnist-mlp\""));
  g_assert_true(has_label(builder, "[N, 784]")); /* flatten */
  show(win, "train");
  train_settings(train, 20);
  em_train_page_set_profile(train, FALSE);
  memset(&w, 0, sizeof w);
  t0 = g_get_monotonic_time();
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(train), "train.start", NULL));
  g_assert_true(ui_test_wait(has_eval, &w, 60000));
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(train), "train.stop", NULL));
  g_assert_true(ui_test_wait(is_finished, &w, 30000));
  g_assert_cmpint(w.status, ==, EM_RUN_STOPPED);
  g_assert_cmpint(w.points, <, 20 * 8); /* stopped part way */
  gint64 run_mlp = w.run_id;
  g_assert_cmpint(run_mlp, >, run_cnn);
  shoot(win, "train-stopped");
  g_test_message("MLP run: %lld steps in %.1f s", (long long)w.points,
                 (g_get_monotonic_time() - t0) / 1e6);

  /* 5. Runs: both, selected, compared */
  show(win, "runs");
  EmRunsPage *runs = EM_RUNS_PAGE(em_window_get_page(win, "runs"));
  g_assert_cmpuint(em_runs_page_get_n_shown(runs), ==, 2);
  gint64 ids[2] = {run_cnn, run_mlp};
  em_runs_page_select_ids(runs, ids, 2);
  int nsel = 0;
  g_free(em_runs_page_get_selected_ids(runs, &nsel));
  g_assert_cmpint(nsel, ==, 2);
  shoot(win, "runs");
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(runs), "runs.compare", NULL));
  ui_test_spin(50);
  g_assert_cmpstr(em_window_get_visible_page(win), ==, "compare");
  EmComparePage *compare = EM_COMPARE_PAGE(em_window_get_page(win, "compare"));
  g_assert_cmpstr(em_compare_page_get_message(compare), ==, "");
  g_assert_true(em_compare_page_set_metric(compare, "loss"));
  g_assert_cmpint(em_compare_page_get_n_points(compare, 0), >, 0);
  g_assert_cmpint(em_compare_page_get_n_points(compare, 1), >, 0);
  gboolean model_differs = FALSE;
  for (guint i = 0; i < em_compare_page_get_n_differences(compare); i++)
    model_differs |= strcmp(em_compare_page_get_difference_key(compare, i), "model") == 0;
  g_assert_true(model_differs);
  shoot(win, "compare");

  /* 6. Registry: the better run as fmnist, promoted to production */
  double acc_cnn = accuracy_of(run_cnn), acc_mlp = accuracy_of(run_mlp);
  g_test_message("final test accuracy: CNN %.4f, MLP %.4f", acc_cnn, acc_mlp);
  g_assert_false(isnan(acc_cnn));
  gint64 best = isnan(acc_mlp) || acc_cnn >= acc_mlp ? run_cnn : run_mlp;
  show(win, "registry");
  EmRegistryPage *registry = EM_REGISTRY_PAGE(em_window_get_page(win, "registry"));
  GtkDropDown *run_dd = GTK_DROP_DOWN(ui_test_find(GTK_WIDGET(registry), GTK_TYPE_DROP_DOWN, 0));
  char prefix[32];
  g_snprintf(prefix, sizeof prefix, "run %lld ", (long long)best);
  guint at = item_with_prefix(run_dd, prefix);
  g_assert_cmpuint(at, !=, GTK_INVALID_LIST_POSITION);
  gtk_drop_down_set_selected(run_dd, at);
  gtk_editable_set_text(GTK_EDITABLE(ui_test_find(GTK_WIDGET(registry), GTK_TYPE_ENTRY, 0)), "fmnist");
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(registry), "registry.register", NULL));
  g_assert_true(g_str_has_prefix(em_registry_page_get_message(registry), "Registered run"));
  g_assert_true(em_registry_page_select_model(registry, "fmnist"));
  g_assert_true(em_registry_page_select_version(registry, 1));
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(registry), "registry.promote", NULL));
  g_assert_nonnull(strstr(em_registry_page_get_message(registry), "production now points at v1"));
  shoot(win, "registry");

  /* the registry, read back */
  em_error err = {0};
  em_store *s = em_store_open(g_home, true, &err);
  g_assert_nonnull(s);
  em_version_row *v = NULL;
  int nv = 0;
  g_assert_cmpint(em_store_model_versions(s, "fmnist", &v, &nv, &err), ==, EM_OK);
  g_assert_cmpint(nv, ==, 1);
  g_assert_cmpint(v[0].version, ==, 1);
  g_assert_nonnull(v[0].aliases);
  g_assert_nonnull(strstr(v[0].aliases, "production"));
  g_assert_cmpint(v[0].run, ==, best);
  em_version_rows_free(v, nv);
  em_store_close(s);

  g_signal_handlers_disconnect_by_data(state, &w);
  g_free(w.profile);
  gtk_window_destroy(GTK_WINDOW(win));
  double total = (g_get_monotonic_time() - t_start) / 1e6;
  g_test_message("the whole workflow took %.1f s", total);
  g_print("# workflow: %.1f s\n", total);
}

int main(int argc, char **argv) {
  g_home = g_dir_make_tmp("ember-ui-workflow-XXXXXX", NULL);
  g_setenv("EMBER_HOME", g_home, TRUE);
  ui_test_init(&argc, &argv);
  g_app = em_application_new();
  g_application_set_flags(G_APPLICATION(g_app), G_APPLICATION_NON_UNIQUE);
  /* no session bus under xvfb-run: GTK's warning about it is let through */
  GLogLevelFlags fatal = g_log_set_always_fatal(G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
  g_assert_true(g_application_register(G_APPLICATION(g_app), NULL, NULL));
  g_log_set_always_fatal(fatal);
  g_test_add_func("/ui/workflow/build-train-compare-register", test_workflow);
  int rc = g_test_run();
  g_object_unref(g_app);
  char *rm[] = {"rm", "-rf", g_home, NULL};
  g_spawn_sync(NULL, rm, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
  g_free(g_home);
  return rc;
}
