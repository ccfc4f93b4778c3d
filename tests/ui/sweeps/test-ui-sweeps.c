/* test-ui-sweeps.c: the Sweeps page with a real `ember sweep` runner.
 *
 * /sweeps/grid: fmnist-mlp on the synthetic set, a grid of 4 learning
 * rates (each trial 500 samples, 2 epochs, 2 at once) started from the
 * page's form; once the registry says it completed: the table's rows,
 * the best-so-far chart's points, the parallel coordinates (a brush on
 * the learning rate's axis keeps 2 trials, and the table shows 2), the
 * importance of the one setting (eta squared: 1, every value its own
 * group), two trials opened on a Compare page, and Register best making
 * version 1 of fmnist-mlp.
 *
 * /sweeps/reopen: a random search (a log range of learning rates, a
 * choice of batch sizes, test_loss minimized, the median pruner, 1 at a
 * time) is started and its page destroyed while it runs; a new page
 * finds it in the registry. Its runner is then killed (SIGKILL): the
 * page says the runner is gone, Resume takes it over, and it completes
 * with every trial ended once. Screenshot: workbench-sweeps (the
 * README's), with a brush on the batch sizes.
 *
 * /sweeps/train-settings: in a stack with the Train and Compare pages, a
 * sweep trains under the Train page's learning rate and seed, and
 * Compare opens the stack's Compare page. */
#include <math.h>
#include <signal.h>
#include <string.h>

#include "em-app-state.h"
#include "em-compare-page.h"
#include "em-line-chart.h"
#include "em-parallel-coords.h"
#include "em-store.h"
#include "em-sweeps-page.h"
#include "em-sweeps.h"
#include "em-train-page.h"
#include "ui-test-util.h"

static char *home;

static EmAppState *new_state(void) {
  EmAppState *state = em_app_state_new(home);
  char *path = g_build_filename(g_getenv("EMBER_SOURCE_ROOT"), "data", "models",
                                "fmnist-mlp.json", NULL);
  char *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  em_app_state_set_spec(state, text, path);
  em_app_state_set_dataset(state, "synthetic", NULL);
  g_free(text);
  g_free(path);
  return state;
}

static gboolean updated(gpointer p) { return em_sweeps_page_get_n_updates(p) > 0; }

typedef struct {
  EmSweepsPage *page;
  int status;
  guint trials;
  gint64 sweep;
} want;

/* The page shows sweep (0: any) with status (-1: any) and trials rows. */
static gboolean shows(gpointer data) {
  want *w = data;
  EmSweepsPage *p = w->page;
  return (!w->sweep || em_sweeps_page_get_sweep(p) == w->sweep) &&
         (w->status < 0 || em_sweeps_page_get_sweep_status(p) == w->status) &&
         em_sweeps_page_get_n_trials(p) >= w->trials;
}

static void wait_for(EmSweepsPage *p, gint64 sweep, int status, guint trials, int ms) {
  want w = {p, status, trials, sweep};
  if (!ui_test_wait(shows, &w, ms))
    g_error("the page shows sweep %lld (status %d, %u trials), not sweep %lld (%d, %u): %s",
            (long long)em_sweeps_page_get_sweep(p), em_sweeps_page_get_sweep_status(p),
            em_sweeps_page_get_n_trials(p), (long long)sweep, status, trials,
            em_sweeps_page_get_status(p));
}

static void test_grid(void) {
  EmAppState *state = new_state();
  GtkWidget *widget = em_sweeps_page_new(state);
  EmSweepsPage *page = EM_SWEEPS_PAGE(widget);
  GtkWindow *win = ui_test_show(widget, 1024, 700);
  g_assert_true(ui_test_wait(updated, page, 10000));
  g_assert_cmpuint(em_sweeps_page_get_n_sweeps(page), ==, 0);
  g_assert_nonnull(strstr(em_sweeps_page_get_status(page), "No sweeps"));
  /* a refusal names the row at fault, and nothing starts */
  em_sweeps_page_set_param(page, 0, "training.lr", EM_SWEEP_KIND_RANGE, "0.1");
  for (int r = 1; r < EM_SWEEP_FORM_PARAMS; r++)
    em_sweeps_page_set_param(page, r, NULL, EM_SWEEP_KIND_LIST, NULL);
  em_sweeps_page_set_options(page, "grid", "test_accuracy", TRUE, 4, 2, "none", 500, 2);
  g_assert_false(em_sweeps_page_start(page));
  g_assert_nonnull(strstr(em_sweeps_page_get_form_message(page), "training.lr: a range"));
  em_sweeps_page_set_param(page, 0, "training.lr", EM_SWEEP_KIND_LIST, "0.0001, 0.001, 0.01, 0.1");
  ui_test_spin(300);
  g_free(ui_test_screenshot(widget, "workbench-sweeps-form"));
  g_assert_true(em_sweeps_page_start(page));
  wait_for(page, 0, EM_SWEEP_COMPLETED, 4, 120000);
  gint64 sweep = em_sweeps_page_get_sweep(page);
  g_assert_cmpint(sweep, ==, 1);
  g_assert_cmpuint(em_sweeps_page_get_n_trials(page), ==, 4);
  g_assert_cmpuint(em_sweeps_page_get_n_shown(page), ==, 4);
  for (guint i = 0; i < 4; i++) {
    char *row = em_sweeps_page_dup_row_text(page, i);
    g_test_message("trial row %u: %s", i, row);
    char prefix[16];
    g_snprintf(prefix, sizeof prefix, "%u | completed", i);
    g_assert_true(g_str_has_prefix(row, prefix));
    g_assert_nonnull(strstr(row, " | 2 | 8 | ")); /* 2 epochs of 500 / 128 -> 4 steps */
    g_free(row);
  }
  g_assert_cmpint(em_sweeps_page_get_best_trial(page), >=, 0);
  g_assert_nonnull(strstr(em_sweeps_page_get_status(page), "4 of 4 trials completed"));
  /* the best so far: a point per completed trial, in both series */
  EmLineChart *chart = EM_LINE_CHART(em_sweeps_page_get_best_chart(page));
  g_assert_cmpint(em_line_chart_get_n_series(chart), ==, 2);
  g_assert_cmpint(em_line_chart_get_n_points(chart, 0), ==, 4);
  g_assert_cmpint(em_line_chart_get_n_points(chart, 1), ==, 4);
  /* the parallel coordinates: the setting and the metric; brushing the
   * rates' axis over its first two values filters the table */
  EmParallelCoords *pc = EM_PARALLEL_COORDS(em_sweeps_page_get_parallel_coords(page));
  g_assert_cmpint(em_parallel_coords_get_n_axes(pc), ==, 2);
  g_assert_cmpstr(em_parallel_coords_get_axis_name(pc, 0), ==, "training.lr");
  g_assert_cmpstr(em_parallel_coords_get_axis_name(pc, 1), ==, "test_accuracy");
  g_assert_cmpint(em_parallel_coords_get_n_trials(pc), ==, 4);
  g_assert_cmpint(em_parallel_coords_set_brush(pc, 0, 0, 1), ==, 2);
  g_assert_cmpuint(em_sweeps_page_get_n_shown(page), ==, 2);
  char *row = em_sweeps_page_dup_row_text(page, 0);
  g_assert_true(strstr(row, " | 0.0001 | ") || strstr(row, " | 0.001 | "));
  g_free(row);
  g_assert_cmpint(em_parallel_coords_set_brush(pc, 0, 7, 9), ==, 1); /* past the end: the last */
  g_assert_cmpint(em_parallel_coords_set_brush(pc, 5, 0, 1), ==, -1);
  em_parallel_coords_clear_brush(pc, -1);
  g_assert_cmpuint(em_sweeps_page_get_n_shown(page), ==, 4);
  /* the importance of the one setting: every value its own group */
  g_assert_cmpint(em_sweeps_page_get_n_importances(page), ==, 1);
  const char *name = NULL;
  double eta = em_sweeps_page_get_importance(page, 0, &name);
  g_assert_cmpstr(name, ==, "training.lr");
  g_assert_cmpfloat_with_epsilon(eta, 1, 1e-9);
  g_assert_nonnull(strstr(em_sweeps_page_get_importance_note(page), "eta²"));
  /* two trials on the Compare page */
  GtkWidget *compare = em_compare_page_new(state);
  g_object_ref_sink(compare);
  em_sweeps_page_set_compare_page(page, EM_COMPARE_PAGE(compare));
  em_sweeps_page_select_trials(page, (const int[]){0, 3}, 2);
  em_sweeps_page_compare_selected(page);
  g_assert_nonnull(em_compare_page_get_run_label(EM_COMPARE_PAGE(compare), 1));
  g_assert_null(em_compare_page_get_run_label(EM_COMPARE_PAGE(compare), 2));
  g_assert_cmpstr(em_compare_page_get_message(EM_COMPARE_PAGE(compare)), ==, "");
  g_object_unref(compare);
  /* the selection stays through the next reads */
  ui_test_spin(1500);
  /* Register best: version 1 of the trials' model */
  g_assert_true(em_sweeps_page_register_best(page));
  g_test_message("%s", em_sweeps_page_get_status(page));
  g_assert_nonnull(strstr(em_sweeps_page_get_status(page), "as fmnist-mlp v1"));
  em_error err = {0};
  em_store *s = em_store_open(home, true, &err);
  g_assert_nonnull(s);
  em_version_row *v = NULL;
  int nv = 0;
  g_assert_cmpint(em_store_model_versions(s, "fmnist-mlp", &v, &nv, &err), ==, EM_OK);
  g_assert_cmpint(nv, ==, 1);
  em_trial_row *t = NULL;
  int n = 0;
  g_assert_cmpint(em_store_trials_list(s, sweep, &t, &n, &err), ==, EM_OK);
  g_assert_cmpint(v[0].run, ==, t[em_sweeps_page_get_best_trial(page)].run);
  em_trial_rows_free(t, n);
  em_version_rows_free(v, nv);
  em_store_close(s);
  gtk_window_destroy(win);
  g_object_unref(state);
}

/* ---- a page destroyed while its sweep runs ----------------------------------------- */

static gboolean runner_gone(gpointer p) {
  return em_sweeps_page_get_sweep_status(p) == EM_SWEEP_RUNNING &&
         !em_sweeps_page_get_runner_alive(p);
}

static gint64 runner_pid(gint64 sweep) {
  em_error err = {0};
  em_store *s = em_store_open(home, true, &err);
  em_sweep_row sw = {0};
  g_assert_cmpint(em_store_sweep_get(s, sweep, &sw, &err), ==, EM_OK);
  gint64 pid = sw.status == EM_SWEEP_RUNNING ? sw.runner_pid : 0;
  em_sweep_row_clear(&sw);
  em_store_close(s);
  return pid;
}

static void test_reopen(void) {
  EmAppState *state = new_state();
  GtkWidget *widget = em_sweeps_page_new(state);
  EmSweepsPage *page = EM_SWEEPS_PAGE(widget);
  GtkWindow *win = ui_test_show(widget, 1024, 700);
  g_assert_true(ui_test_wait(updated, page, 10000));
  em_sweeps_page_set_param(page, 0, "training.lr", EM_SWEEP_KIND_LOG_RANGE, "1e-4 .. 0.3");
  em_sweeps_page_set_param(page, 1, "training.batch_size", EM_SWEEP_KIND_CHOICE, "32, 64, 128");
  for (int r = 2; r < EM_SWEEP_FORM_PARAMS; r++)
    em_sweeps_page_set_param(page, r, NULL, EM_SWEEP_KIND_LIST, NULL);
  em_sweeps_page_set_options(page, "random", "test_loss", FALSE, 16, 1, "median", 2000, 3);
  g_assert_true(em_sweeps_page_start(page));
  wait_for(page, 2, EM_SWEEP_RUNNING, 1, 60000);
  gtk_window_destroy(win); /* the page goes; its runner does not */
  ui_test_spin(200);

  GtkWidget *w2 = em_sweeps_page_new(state);
  page = EM_SWEEPS_PAGE(w2);
  win = ui_test_show(w2, 1024, 700);
  g_assert_true(ui_test_wait(updated, page, 10000));
  g_assert_cmpuint(em_sweeps_page_get_n_sweeps(page), ==, 2);
  g_assert_cmpint(em_sweeps_page_get_sweep(page), ==, 2); /* the newest */
  int st = em_sweeps_page_get_sweep_status(page);
  g_assert_true(st == EM_SWEEP_RUNNING || st == EM_SWEEP_COMPLETED);
  gint64 pid = runner_pid(2);
  if (pid) { /* still running: its runner dies, the page offers Resume */
    g_assert_true(em_sweeps_page_get_runner_alive(page));
    g_assert_cmpint(kill((pid_t)pid, SIGKILL), ==, 0);
    g_assert_true(ui_test_wait(runner_gone, page, 20000));
    g_assert_nonnull(strstr(em_sweeps_page_get_status(page), "its runner is gone"));
    em_sweeps_page_resume(page);
  } else {
    g_test_message("the sweep ended before its runner could be killed");
  }
  wait_for(page, 2, EM_SWEEP_COMPLETED, 16, 240000);
  int completed = 0;
  for (guint i = 0; i < 16; i++) {
    char *row = em_sweeps_page_dup_row_text(page, i);
    g_test_message("trial row %u: %s", i, row);
    g_assert_true(strstr(row, " | completed") || strstr(row, " | pruned"));
    completed += strstr(row, " | completed") != NULL;
    g_free(row);
  }
  g_assert_cmpint(completed, >=, 1);
  EmParallelCoords *pc = EM_PARALLEL_COORDS(em_sweeps_page_get_parallel_coords(page));
  g_assert_cmpint(em_parallel_coords_get_n_axes(pc), ==, 3);
  EmLineChart *chart = EM_LINE_CHART(em_sweeps_page_get_best_chart(page));
  g_assert_cmpint(em_line_chart_get_n_points(chart, 1), ==, completed);
  g_assert_cmpint(em_sweeps_page_get_n_importances(page), ==, 2);
  /* batch size 32 or 64 (the choice's first two values) */
  int kept = em_parallel_coords_set_brush(pc, 1, 0, 1);
  g_assert_cmpint(kept, >=, 0);
  g_assert_cmpuint(em_sweeps_page_get_n_shown(page), ==, (guint)kept);
  ui_test_spin(300);
  g_free(ui_test_screenshot(w2, "workbench-sweeps"));
  gtk_window_destroy(win);
  g_object_unref(state);
}

/* ---- the base: the Train page's settings ---------------------------------------------- */

/* In a stack with the Train and Compare pages (as in the window): the
 * sweep trains under the Train page's form, and Compare opens the stack's
 * Compare page. */
static void test_train_settings(void) {
  EmAppState *state = new_state();
  GtkWidget *stack = gtk_stack_new();
  GtkWidget *train = em_train_page_new(state), *compare = em_compare_page_new(state);
  GtkWidget *widget = em_sweeps_page_new(state);
  EmSweepsPage *page = EM_SWEEPS_PAGE(widget);
  gtk_stack_add_named(GTK_STACK(stack), train, "train");
  gtk_stack_add_named(GTK_STACK(stack), compare, "compare");
  gtk_stack_add_named(GTK_STACK(stack), widget, "sweeps");
  gtk_stack_set_visible_child_name(GTK_STACK(stack), "sweeps");
  GtkWindow *win = ui_test_show(stack, 1024, 700);
  g_assert_true(em_train_page_set_value(EM_TRAIN_PAGE(train), "lr", 0.05));
  g_assert_true(em_train_page_set_value(EM_TRAIN_PAGE(train), "seed", 7));
  g_assert_true(ui_test_wait(updated, page, 10000));
  em_sweeps_page_set_param(page, 0, "training.batch_size", EM_SWEEP_KIND_LIST, "16, 32");
  for (int r = 1; r < EM_SWEEP_FORM_PARAMS; r++)
    em_sweeps_page_set_param(page, r, NULL, EM_SWEEP_KIND_LIST, NULL);
  em_sweeps_page_set_options(page, "grid", "test_accuracy", TRUE, 0, 1, "none", 200, 1);
  g_assert_true(em_sweeps_page_start(page));
  wait_for(page, 3, EM_SWEEP_COMPLETED, 2, 120000);
  em_error err = {0};
  em_store *s = em_store_open(home, true, &err);
  em_sweep_row sw = {0};
  g_assert_cmpint(em_store_sweep_get(s, 3, &sw, &err), ==, EM_OK);
  g_test_message("%s", sw.description_json);
  g_assert_nonnull(strstr(sw.description_json, "\"lr\":0.05"));
  g_assert_nonnull(strstr(sw.description_json, "\"seed\":7"));
  g_assert_nonnull(strstr(sw.description_json, "\"optimizer\":\"sgd\""));
  g_assert_nonnull(strstr(sw.description_json, "\"dataset\":\"synthetic\""));
  g_assert_nonnull(strstr(sw.description_json, "\"limit\":200"));
  em_sweep_row_clear(&sw);
  em_store_close(s);
  em_sweeps_page_select_trials(page, (const int[]){0, 1}, 2);
  em_sweeps_page_compare_selected(page);
  g_assert_nonnull(em_compare_page_get_run_label(EM_COMPARE_PAGE(compare), 1));
  gtk_window_destroy(win);
  g_object_unref(state);
}

int main(int argc, char **argv) {
  home = g_dir_make_tmp("ember-ui-sweeps-XXXXXX", NULL);
  g_setenv("EMBER_HOME", home, TRUE);
  g_setenv("EMBER_CLI", g_getenv("EMBER_EXE"), TRUE);
  ui_test_init(&argc, &argv);
  g_test_add_func("/sweeps/grid", test_grid);
  g_test_add_func("/sweeps/reopen", test_reopen);
  g_test_add_func("/sweeps/train-settings", test_train_settings);
  int rc = g_test_run();
  char *rm[] = {"rm", "-rf", home, NULL};
  g_spawn_sync(NULL, rm, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
  g_free(home);
  return rc;
}
