/* test-ui-run-view.c: the run page (issue 32, item 8) on a real registry:
 * `ember train` makes a completed run (fmnist-mlp, 2 epochs of 2,000
 * samples; synthetic data without Fashion-MNIST) and a stopped one
 * (SIGTERM after its first checkpoint). Double-clicking a row of the Runs
 * page opens the run in a window of its own; the view charts a metric
 * against step, epoch and wall time, lists the settings, events,
 * checkpoints and identity; its actions export ONNX (an artifact file
 * that exists), register a version, put the spec in the Builder's state,
 * refuse to delete a run a version came from, resume the stopped run
 * (a child run appears in the registry) and refuse to resume the
 * completed one. Before: double-clicking a run did nothing. Screenshot:
 * workbench-run (the README's). */
#include <signal.h>
#include <string.h>

#include "em-app-state.h"
#include "em-run-view.h"
#include "em-runs-page.h"
#include "em-store.h"
#include "ui-test-util.h"

static char *home;

static const char *data_args[3];

static void set_data_args(void) {
  gboolean fmnist = g_file_test("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                                G_FILE_TEST_EXISTS);
  data_args[0] = fmnist ? "--limit" : "--dataset";
  data_args[1] = fmnist ? "2000" : "synthetic";
}

static char *spec_path(void) {
  return g_build_filename(g_getenv("EMBER_SOURCE_ROOT"), "data", "models", "fmnist-mlp.json", NULL);
}

static void train_completed(void) {
  char *spec = spec_path();
  const char *argv[] = {g_getenv("EMBER_EXE"), "train", spec, "--epochs", "2", "--seed", "1",
                        "--threads", "2", "--quiet", data_args[0], data_args[1], NULL};
  int status = 0;
  char *err = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, NULL, &err,
                             &status, NULL));
  if (!g_spawn_check_wait_status(status, NULL)) g_error("ember train failed:\n%s", err);
  g_free(err);
  g_free(spec);
}

static int n_checkpoints(gint64 run) {
  em_error err = {0};
  em_store *s = em_store_open(home, true, &err);
  if (!s) return 0;
  em_checkpoint_row *c = NULL;
  int n = 0;
  if (em_store_checkpoints_list(s, run, &c, &n, &err) != EM_OK) n = 0;
  em_checkpoint_rows_free(c, n);
  em_store_close(s);
  return n;
}

/* A run stopped by SIGTERM once it has a checkpoint (a long one: 500
 * epochs, a checkpoint every 5 steps). */
static void train_stopped(gint64 run) {
  char *spec = spec_path();
  GError *error = NULL;
  GSubprocess *p = g_subprocess_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE, &error, g_getenv("EMBER_EXE"),
                                    "train", spec, "--epochs", "500", "--checkpoint-every", "5",
                                    "--threads", "1", "--quiet", "--dataset", "synthetic", NULL);
  g_assert_no_error(error);
  gint64 end = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;
  while (n_checkpoints(run) < 1 && g_get_monotonic_time() < end) g_usleep(100000);
  g_assert_cmpint(n_checkpoints(run), >=, 1);
  g_subprocess_send_signal(p, SIGTERM);
  g_assert_true(g_subprocess_wait(p, NULL, NULL));
  g_object_unref(p);
  g_free(spec);
}

static em_run run_row(gint64 id) {
  em_error err = {0};
  em_store *s = em_store_open(home, true, &err);
  g_assert_nonnull(s);
  em_run r;
  memset(&r, 0, sizeof r);
  g_assert_cmpint(em_store_run_get(s, id, &r, &err), ==, EM_OK);
  em_store_close(s);
  return r;
}

static EmRunView *view_of(GtkWindow *w) {
  GtkWidget *c = gtk_window_get_child(w);
  g_assert_true(EM_IS_RUN_VIEW(c));
  return EM_RUN_VIEW(c);
}

/* A label under w whose text starts with text. */
static gboolean has_label(GtkWidget *w, const char *text) {
  if (GTK_IS_LABEL(w) && g_str_has_prefix(gtk_label_get_text(GTK_LABEL(w)), text)) return TRUE;
  for (GtkWidget *c = gtk_widget_get_first_child(w); c; c = gtk_widget_get_next_sibling(c))
    if (has_label(c, text)) return TRUE;
  return FALSE;
}

static void test_run_view(void) {
  EmAppState *state = em_app_state_new(home);
  GtkWidget *runs = em_runs_page_new(state);
  GtkWindow *main_win = ui_test_show(runs, 1000, 600);
  (void)main_win;
  g_assert_cmpuint(em_runs_page_get_n_shown(EM_RUNS_PAGE(runs)), ==, 2);
  /* double-click the completed run's row (the table is newest first) */
  guint row = em_runs_page_get_shown_id(EM_RUNS_PAGE(runs), 0) == 1 ? 0 : 1;
  GtkWidget *cv = ui_test_find(runs, GTK_TYPE_COLUMN_VIEW, 0);
  guint before = g_list_model_get_n_items(gtk_window_get_toplevels());
  g_signal_emit_by_name(cv, "activate", row);
  g_assert_cmpuint(g_list_model_get_n_items(gtk_window_get_toplevels()), ==, before + 1);
  GtkWindow *win = NULL;
  GListModel *tops = gtk_window_get_toplevels();
  for (guint i = 0; i < g_list_model_get_n_items(tops); i++) {
    GtkWindow *t = g_list_model_get_item(tops, i);
    g_object_unref(t);
    if (!g_strcmp0(gtk_window_get_title(t), "Run 1")) win = t;
  }
  g_assert_nonnull(win);
  ui_test_spin(200);
  EmRunView *v = view_of(win);
  g_assert_cmpint(em_run_view_get_run(v), ==, 1);

  em_run r = run_row(1);
  /* the chart: the step loss by default, every step; the epoch and time axes */
  g_assert_cmpstr(em_run_view_get_metric(v), ==, "loss");
  g_assert_cmpint(em_run_view_get_n_points(v), ==, r.steps);
  g_assert_true(em_run_view_show_metric(v, "loss", "epoch"));
  g_assert_cmpint(em_run_view_get_n_points(v), ==, r.steps);
  g_assert_true(em_run_view_show_metric(v, "test_accuracy", "time"));
  g_assert_cmpint(em_run_view_get_n_points(v), ==, 2); /* one evaluation per epoch */
  g_assert_true(em_run_view_show_metric(v, "loss", "step"));
  /* settings, events, files and identity */
  g_assert_true(has_label(GTK_WIDGET(v), "optim.lr"));
  g_assert_true(has_label(GTK_WIDGET(v), "final"));
  g_assert_true(has_label(GTK_WIDGET(v), r.spec_sha256));
  g_assert_true(has_label(GTK_WIDGET(v), "dataset SHA-256"));
  ui_test_screenshot(GTK_WIDGET(win), "workbench-run");

  /* a completed run: nothing to resume */
  gtk_widget_activate_action(GTK_WIDGET(v), "run.resume", NULL); /* disabled: does nothing */
  g_assert_null(strstr(em_run_view_get_message(v), "Resuming"));

  /* export: an ONNX file recorded with the run */
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(v), "run.export", NULL));
  const char *msg = em_run_view_get_message(v);
  if (!g_str_has_prefix(msg, "Exported step")) g_error("export: %s", msg);
  const char *path = strstr(msg, " to ") + 4;
  g_assert_true(g_file_test(path, G_FILE_TEST_EXISTS));
  g_assert_true(has_label(GTK_WIDGET(v), "export"));

  /* register; then delete is refused: a version came from it */
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(v), "run.register", NULL));
  g_assert_cmpstr(em_run_view_get_message(v), ==,
                  "Registered as fmnist-mlp version 1 (its best checkpoint).");
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(v), "run.delete", NULL));
  GtkWidget *d = NULL;
  for (guint i = 0; i < g_list_model_get_n_items(tops) && !d; i++) {
    GtkWidget *t = g_list_model_get_item(tops, i);
    g_object_unref(t);
    if (!g_strcmp0(gtk_widget_get_name(t), "run-delete")) d = t;
  }
  g_assert_nonnull(d);
  gtk_dialog_response(GTK_DIALOG(d), GTK_RESPONSE_ACCEPT);
  g_assert_nonnull(strstr(em_run_view_get_message(v), "version"));
  em_run still = run_row(1); /* still there */
  em_run_clear(&still);

  /* the spec goes to the Builder through the state */
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(v), "run.open-spec", NULL));
  g_assert_cmpstr(em_app_state_get_spec_json(state), ==, r.spec_json);
  em_run_clear(&r);
  gtk_window_destroy(win);

  /* the stopped run resumes in the background: a child run appears */
  GtkWindow *w2 = em_runs_page_open_run(EM_RUNS_PAGE(runs), 2);
  EmRunView *v2 = view_of(w2);
  em_run stopped = run_row(2);
  g_assert_cmpint(stopped.status, ==, EM_RUN_STOPPED);
  em_run_clear(&stopped);
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(v2), "run.resume", NULL));
  g_assert_true(g_str_has_prefix(em_run_view_get_message(v2), "Resuming run 2"));
  gint64 end = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;
  gint64 child = 0;
  while (!child && g_get_monotonic_time() < end) {
    em_error err = {0};
    em_store *s = em_store_open(home, true, &err);
    if (s) {
      em_store_run_first_child(s, 2, &child, &err);
      em_store_close(s);
    }
    if (!child) g_usleep(100000);
  }
  g_assert_cmpint(child, ==, 3);
  em_run c = run_row(child);
  g_assert_cmpint(c.parent_run, ==, 2);
  if (c.status == EM_RUN_RUNNING && c.pid > 0) kill((pid_t)c.pid, SIGTERM); /* enough */
  em_run_clear(&c);
  gtk_window_destroy(w2);
  gtk_window_destroy(GTK_WINDOW(gtk_widget_get_root(runs)));
  g_object_unref(state);
}

int main(int argc, char **argv) {
  home = g_dir_make_tmp("ember-ui-run-view-XXXXXX", NULL);
  g_setenv("EMBER_HOME", home, TRUE);
  g_setenv("EMBER_CLI", g_getenv("EMBER_EXE"), TRUE); /* the Resume action's program */
  ui_test_init(&argc, &argv);
  set_data_args();
  train_completed();  /* run 1 */
  train_stopped(2);   /* run 2 */
  g_test_add_func("/registry/run-view", test_run_view);
  int rc = g_test_run();
  /* the resumed run may still be stopping: wait for its process */
  g_usleep(500000);
  char *rm[] = {"rm", "-rf", home, NULL};
  g_spawn_sync(NULL, rm, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
  g_free(home);
  return rc;
}
