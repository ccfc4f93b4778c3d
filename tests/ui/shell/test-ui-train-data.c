/* test-ui-train-data.c: the Train page with what the other pages choose,
 * from the GUI fuzz: a CSV chosen on the Data page trains (it failed with
 * "unknown dataset 'csv'"); a model and a dataset changed during a run
 * are loaded into the form when the run ends (the next Start trained the
 * new model with the old model's lr); a long status keeps the throughput
 * and ETA lines in sight. Small runs on a 100-row CSV and the synthetic
 * set: seconds. */
#include <dlfcn.h>
#include <glib/gstdio.h>
#include <gdk/x11/gdkx.h>
#include <math.h>
#include <string.h>

#include "em-app-state.h"
#include "em-store.h"
#include "em-train-page.h"
#include "ui-test-util.h"

static char *g_home;

/* An MLP for samples of `features` values and `classes` classes, with
 * its own lr. */
static char *mlp_spec(const char *name, int features, int classes, double lr) {
  return g_strdup_printf(
      "{\"name\": \"%s\", \"input\": {\"shape\": [%d]},"
      " \"nodes\": [{\"name\": \"fc1\", \"type\": \"Linear\", \"out_features\": 16},"
      "  {\"name\": \"relu\", \"type\": \"ReLU\"},"
      "  {\"name\": \"fc2\", \"type\": \"Linear\", \"out_features\": %d}],"
      " \"loss\": {\"type\": \"cross_entropy\"},"
      " \"training\": {\"optimizer\": \"sgd\", \"lr\": %g, \"batch_size\": 16, \"epochs\": 2}}",
      name, features, classes, lr);
}

typedef struct {
  gboolean finished;
  gint64 run;
  int status;
  char *message;
  gint64 steps;
} run_end;

static void on_finished(EmAppState *st, gint64 run, int status, const char *msg, gpointer data) {
  (void)st;
  run_end *e = data;
  e->finished = TRUE;
  e->run = run;
  e->status = status;
  g_free(e->message);
  e->message = g_strdup(msg);
}

static void on_progress(EmAppState *st, const EmTrainUpdate *u, gpointer data) {
  (void)st;
  run_end *e = data;
  e->steps += u->n;
}

static gboolean ended(gpointer data) { return ((run_end *)data)->finished; }
static gboolean stepped(gpointer data) { return ((run_end *)data)->steps > 0; }

static gboolean has_label_with(GtkWidget *root, const char *needle) {
  GPtrArray *labels = g_ptr_array_new();
  ui_test_collect(root, GTK_TYPE_LABEL, labels);
  gboolean hit = FALSE;
  for (guint i = 0; i < labels->len && !hit; i++)
    hit = strstr(gtk_label_get_text(GTK_LABEL(labels->pdata[i])), needle) != NULL;
  g_ptr_array_unref(labels);
  return hit;
}

/* The Data page's CSV (its path as the dataset dir) trains and is recorded
 * with the file as its dataset. */
static void test_csv_trains(void) {
  char *csv = g_build_filename(g_home, "points.csv", NULL);
  GString *rows = g_string_new(NULL);
  for (int i = 0; i < 100; i++) {
    int y = i % 3;
    g_string_append_printf(rows, "%g,%g,%g,%g,%d\n", y + 0.1 * (i % 7), -y + 0.05 * (i % 5),
                           0.5 * y, 1.0, y);
  }
  g_assert_true(g_file_set_contents(csv, rows->str, -1, NULL));
  g_string_free(rows, TRUE);
  EmAppState *state = em_app_state_new(g_home);
  char *spec = mlp_spec("csv-mlp", 4, 3, 0.05);
  em_app_state_set_spec(state, spec, NULL);
  em_app_state_set_dataset(state, "csv", csv);
  GtkWidget *page = em_train_page_new(state);
  GtkWindow *win = ui_test_show(page, 1100, 700);
  EmTrainPage *tp = EM_TRAIN_PAGE(page);
  em_train_page_set_value(tp, "threads", 1);
  run_end e = {0};
  g_signal_connect(state, "run-finished", G_CALLBACK(on_finished), &e);
  g_assert_true(gtk_widget_activate_action(page, "train.start", NULL));
  g_assert_true(ui_test_wait(ended, &e, 60000));
  if (e.message) g_test_message("the run said: %s", e.message);
  g_assert_cmpint(e.status, ==, EM_RUN_COMPLETED);
  g_assert_cmpint(e.run, >, 0);
  em_error err = {0};
  em_store *st = em_store_open(g_home, true, &err);
  g_assert_nonnull(st);
  em_run r = {0};
  g_assert_cmpint(em_store_run_get(st, e.run, &r, &err), ==, EM_OK);
  g_assert_cmpstr(r.dataset_name, ==, "csv");
  g_assert_cmpint(r.steps, ==, 2 * 5); /* 80 training rows, batch 16, 2 epochs */
  g_assert_false(isnan(r.final_test_accuracy)); /* evaluated on the 20 held-out rows */
  em_run_clear(&r);
  em_store_close(st);
  g_signal_handlers_disconnect_by_data(state, &e);
  g_free(e.message);
  gtk_window_destroy(win);
  g_object_unref(state);
  g_free(spec);
  g_unlink(csv);
  g_free(csv);
}

/* A new model and dataset during a run: the form keeps the run's values
 * while it runs and takes the new model's when it ends. */
static void test_changes_during_run(void) {
  EmAppState *state = em_app_state_new(g_home);
  char *first = mlp_spec("first-mlp", 8, 3, 0.1), *second = mlp_spec("second-mlp", 8, 3, 0.002);
  em_app_state_set_spec(state, first, NULL);
  em_app_state_set_dataset(state, "synthetic", NULL);
  GtkWidget *page = em_train_page_new(state);
  GtkWindow *win = ui_test_show(page, 1100, 960);
  EmTrainPage *tp = EM_TRAIN_PAGE(page);
  em_train_page_set_value(tp, "threads", 1);
  em_train_page_set_value(tp, "epochs", 200);
  g_assert_cmpfloat(em_train_page_get_value(tp, "lr"), ==, 0.1);
  run_end e = {0};
  g_signal_connect(state, "run-finished", G_CALLBACK(on_finished), &e);
  g_signal_connect(state, "run-progress", G_CALLBACK(on_progress), &e);
  g_assert_true(gtk_widget_activate_action(page, "train.start", NULL));
  g_assert_true(ui_test_wait(stepped, &e, 60000));
  em_app_state_set_spec(state, second, NULL);
  em_app_state_set_dataset(state, "synthetic", "/nonexistent-but-unused");
  g_assert_cmpfloat(em_train_page_get_value(tp, "lr"), ==, 0.1); /* the run's, while it runs */
  g_assert_true(gtk_widget_activate_action(page, "train.stop", NULL));
  g_assert_true(ui_test_wait(ended, &e, 60000));
  ui_test_spin(50);
  g_assert_cmpfloat(em_train_page_get_value(tp, "lr"), ==, 0.002);
  g_assert_cmpfloat(em_train_page_get_value(tp, "epochs"), ==, 2);
  g_assert_true(has_label_with(page, "second-mlp"));

  /* a long status: the figures stay above it, in sight */
  GString *name = g_string_new("cuda:");
  for (int i = 0; i < 60; i++) g_string_append(name, "no-such-device-");
  g_assert_false(em_train_page_set_device(tp, name->str, NULL));
  g_string_free(name, TRUE);
  ui_test_spin(100);
  GPtrArray *labels = g_ptr_array_new();
  ui_test_collect(page, GTK_TYPE_LABEL, labels);
  GtkWidget *status = NULL, *eta = NULL;
  long long ended_at = -1, shown_at = -2;
  for (guint i = 0; i < labels->len; i++) {
    const char *t = gtk_label_get_text(GTK_LABEL(labels->pdata[i]));
    const char *st = strstr(t, "samples/s · step ");
    if (g_str_has_prefix(t, "Device 'cuda:")) status = labels->pdata[i];
    if (g_str_has_prefix(t, "Ended at step")) {
      eta = labels->pdata[i];
      ended_at = g_ascii_strtoll(t + strlen("Ended at step "), NULL, 10);
    }
    if (st && !strstr(t, "ETA")) shown_at = g_ascii_strtoll(st + strlen("samples/s · step "), NULL, 10);
  }
  g_ptr_array_unref(labels);
  g_assert_nonnull(status);
  g_assert_nonnull(eta);
  /* the throughput line ends on the last step, not the last quarter second's */
  g_assert_cmpint(shown_at, ==, ended_at);
  graphene_rect_t sb, eb;
  g_assert_true(gtk_widget_compute_bounds(status, page, &sb));
  g_assert_true(gtk_widget_compute_bounds(eta, page, &eb));
  g_assert_cmpfloat(eb.origin.y + eb.size.height, <=, gtk_widget_get_height(page));
  g_assert_cmpfloat(eb.origin.y, <, sb.origin.y);
  g_assert_cmpfloat(sb.size.height, <, 300); /* 8 lines at most */
  g_free(ui_test_screenshot(page, "train-after-changes"));
  g_signal_handlers_disconnect_by_data(state, &e);
  g_free(e.message);
  gtk_window_destroy(win);
  g_object_unref(state);
  g_free(first);
  g_free(second);
}

/* The form takes a spec's lr and seed as they are: lr 1e-6 stayed 1e-6
 * (the spin button held 1e-5 to 10 and moved it there silently, then
 * showed 0.00000), a spec without a seed trains with 0 as `ember train`
 * does (the page said 1), and the config the page builds has both. */
static void test_form_from_spec(void) {
  EmAppState *state = em_app_state_new(g_home);
  char *spec = mlp_spec("tiny-lr", 4, 3, 1e-6);
  em_app_state_set_spec(state, spec, NULL);
  GtkWidget *page = em_train_page_new(state);
  GtkWindow *win = ui_test_show(page, 1100, 700);
  EmTrainPage *tp = EM_TRAIN_PAGE(page);
  ui_test_spin(20);
  g_assert_cmpfloat(em_train_page_get_value(tp, "lr"), ==, 1e-6);
  g_assert_cmpfloat(em_train_page_get_value(tp, "seed"), ==, 0);
  GtkWidget *lr = ui_test_find_named(page, "lr");
  g_assert_nonnull(lr);
  g_assert_cmpstr(gtk_editable_get_text(GTK_EDITABLE(lr)), ==, "1e-06");
  gtk_editable_set_text(GTK_EDITABLE(lr), "250");
  gtk_spin_button_update(GTK_SPIN_BUTTON(lr));
  g_assert_cmpfloat(em_train_page_get_value(tp, "lr"), ==, 250);
  char *seeded = g_strdup_printf("%.*s, \"seed\": 4294967296}}", (int)strlen(spec) - 2, spec);
  em_app_state_set_spec(state, seeded, NULL);
  ui_test_spin(20);
  g_assert_cmpfloat(em_train_page_get_value(tp, "seed"), ==, 4294967296.0);
  em_train_config cfg;
  char *error = NULL;
  g_assert_true(em_train_page_get_config(tp, &cfg, &error));
  g_assert_cmpuint(cfg.seed, ==, 4294967296u);
  g_assert_cmpfloat(cfg.optim.lr, ==, 1e-6);
  g_free(seeded);
  gtk_window_destroy(win);
  g_object_unref(state);
  g_free(spec);
}

/* A real wheel notch (button 4 up, 5 down) at the middle of widget w, sent
 * through the X server by XTest (libXtst, opened at run time: Debian
 * installs no headers of it here). FALSE when XTest is not there. */
static gboolean wheel_over(GtkWidget *w, gboolean down) {
  static int (*motion)(Display *, int, int, int, unsigned long);
  static int (*button)(Display *, unsigned, Bool, unsigned long);
  if (!motion) {
    void *xtst = dlopen("libXtst.so.6", RTLD_NOW);
    if (!xtst) return FALSE;
    *(void **)&motion = dlsym(xtst, "XTestFakeMotionEvent");
    *(void **)&button = dlsym(xtst, "XTestFakeButtonEvent");
    if (!motion || !button) return FALSE;
  }
  GdkDisplay *gd = gtk_widget_get_display(w);
  if (!GDK_IS_X11_DISPLAY(gd)) return FALSE;
  Display *dpy = gdk_x11_display_get_xdisplay(gd);
  GtkNative *native = gtk_widget_get_native(w);
  double sx, sy, x, y;
  gtk_native_get_surface_transform(native, &sx, &sy);
  g_assert_true(gtk_widget_translate_coordinates(w, GTK_WIDGET(native), gtk_widget_get_width(w) / 2.0,
                                                 gtk_widget_get_height(w) / 2.0, &x, &y));
  Window child, xid = gdk_x11_surface_get_xid(gtk_native_get_surface(native));
  int rx, ry;
  XTranslateCoordinates(dpy, xid, DefaultRootWindow(dpy), (int)(x + sx), (int)(y + sy), &rx, &ry,
                        &child);
  motion(dpy, -1, rx, ry, 0);
  XSync(dpy, False);
  ui_test_spin(100);
  button(dpy, down ? 5 : 4, True, 0);
  button(dpy, down ? 5 : 4, False, 0);
  XSync(dpy, False);
  ui_test_spin(200);
  return TRUE;
}

/* Issue 32, item 2: the wheel over an unfocused spin button of the form
 * scrolls the form and leaves the value alone (it turned Data limit from
 * 5000 to 0); once the spin button has the focus, the wheel changes it. */
static void test_wheel_scrolls_form(void) {
  EmAppState *state = em_app_state_new(g_home);
  char *spec = mlp_spec("wheel", 4, 3, 0.05);
  em_app_state_set_spec(state, spec, NULL);
  GtkWidget *page = em_train_page_new(state);
  GtkWindow *win = ui_test_show(page, 1024, 400); /* the form scrolls */
  EmTrainPage *tp = EM_TRAIN_PAGE(page);
  g_assert_true(em_train_page_set_value(tp, "limit", 5000));
  GtkWidget *limit = NULL;
  GPtrArray *labels = g_ptr_array_new();
  ui_test_collect(page, GTK_TYPE_LABEL, labels);
  for (guint i = 0; i < labels->len && !limit; i++)
    if (!g_strcmp0(gtk_label_get_text(labels->pdata[i]), "Data limit"))
      limit = gtk_label_get_mnemonic_widget(labels->pdata[i]);
  g_ptr_array_unref(labels);
  g_assert_true(GTK_IS_SPIN_BUTTON(limit));
  GtkWidget *sw = gtk_widget_get_ancestor(limit, GTK_TYPE_SCROLLED_WINDOW);
  g_assert_nonnull(sw);
  GtkAdjustment *va = gtk_scrolled_window_get_vadjustment(GTK_SCROLLED_WINDOW(sw));
  gtk_window_set_focus(win, NULL);
  /* the spin button in sight, with room to scroll further down */
  double lx, ly;
  g_assert_true(gtk_widget_translate_coordinates(limit, sw, 0, 0, &lx, &ly));
  double top = CLAMP(gtk_adjustment_get_value(va) + ly - 150, 0,
                     gtk_adjustment_get_upper(va) - gtk_adjustment_get_page_size(va) - 50);
  gtk_adjustment_set_value(va, top);
  ui_test_spin(50);
  if (!wheel_over(limit, TRUE)) {
    g_test_skip("no XTest on this display");
  } else {
    g_assert_cmpfloat(em_train_page_get_value(tp, "limit"), ==, 5000);
    g_assert_cmpfloat(gtk_adjustment_get_value(va), >, top); /* the form scrolled */
    gtk_widget_grab_focus(limit);
    ui_test_spin(50);
    g_assert_true(wheel_over(limit, TRUE));
    g_assert_cmpfloat(em_train_page_get_value(tp, "limit"), <, 5000);
    /* a dropdown (the optimiser) does not take the wheel either (GTK 4's
     * GtkDropDown has no scroll handler: checked, not assumed) */
    gtk_window_set_focus(win, NULL);
    gtk_adjustment_set_value(va, 0);
    ui_test_spin(50);
    GtkWidget *dd = ui_test_find(page, GTK_TYPE_DROP_DOWN, 0);
    guint was = gtk_drop_down_get_selected(GTK_DROP_DOWN(dd));
    g_assert_true(wheel_over(dd, TRUE));
    g_assert_cmpuint(gtk_drop_down_get_selected(GTK_DROP_DOWN(dd)), ==, was);
    g_assert_true(wheel_over(dd, FALSE));
    g_assert_cmpuint(gtk_drop_down_get_selected(GTK_DROP_DOWN(dd)), ==, was);
  }
  gtk_window_destroy(win);
  g_object_unref(state);
  g_free(spec);
}

static gboolean paused(gpointer data) { return em_train_page_is_paused(data); }

/* Issue 32, item 5: a run whose lr was changed while paused (0.001 ->
 * 0.0005), stopped, and resumed with `ember train --resume`, records the
 * lr it trains at, where Compare reads it (optim.lr 0.0005; it said
 * 0.001). */
static void test_pause_lr_then_resume(void) {
  EmAppState *state = em_app_state_new(g_home);
  char *spec = mlp_spec("paused-lr", 8, 3, 0.001);
  em_app_state_set_spec(state, spec, NULL);
  em_app_state_set_dataset(state, "synthetic", NULL);
  GtkWidget *page = em_train_page_new(state);
  GtkWindow *win = ui_test_show(page, 1100, 960);
  EmTrainPage *tp = EM_TRAIN_PAGE(page);
  em_train_page_set_value(tp, "threads", 1);
  em_train_page_set_value(tp, "epochs", 200);
  run_end e = {0};
  g_signal_connect(state, "run-finished", G_CALLBACK(on_finished), &e);
  g_signal_connect(state, "run-progress", G_CALLBACK(on_progress), &e);
  g_assert_true(gtk_widget_activate_action(page, "train.start", NULL));
  g_assert_true(ui_test_wait(stepped, &e, 60000));
  g_assert_true(gtk_widget_activate_action(page, "train.pause", NULL));
  g_assert_true(ui_test_wait(paused, tp, 10000));
  g_assert_true(em_train_page_set_value(tp, "lr", 0.0005));
  g_assert_true(gtk_widget_activate_action(page, "train.resume", NULL));
  gint64 at = e.steps;
  while (e.steps < at + 3 && !e.finished) ui_test_spin(20);
  g_assert_true(gtk_widget_activate_action(page, "train.stop", NULL));
  g_assert_true(ui_test_wait(ended, &e, 60000));
  g_assert_cmpint(e.status, ==, EM_RUN_STOPPED);
  g_signal_handlers_disconnect_by_data(state, &e);
  gtk_window_destroy(win);
  g_object_unref(state);

  char *ember = g_build_filename(g_getenv("EMBER_BUILD_ROOT"), "app", "ember", NULL);
  char *run = g_strdup_printf("%lld", (long long)e.run);
  char *argv[] = {ember, "train", "--resume", run, "--stop-after-steps", "2", "--quiet", NULL};
  int status = -1;
  char *err_text = NULL;
  g_assert_true(g_spawn_sync(NULL, argv, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL,
                             &err_text, &status, NULL));
  if (!g_spawn_check_wait_status(status, NULL)) g_error("ember train --resume: %s", err_text);
  em_error err = {0};
  em_store *st = em_store_open(g_home, true, &err);
  g_assert_nonnull(st);
  int64_t child = 0;
  g_assert_cmpint(em_store_run_first_child(st, e.run, &child, &err), ==, EM_OK);
  g_assert_cmpint(child, >, 0);
  em_run r = {0};
  g_assert_cmpint(em_store_run_get(st, child, &r, &err), ==, EM_OK);
  json_t *cfg = json_loads(r.config_json, 0, NULL);
  g_assert_nonnull(cfg);
  double lr = json_number_value(json_object_get(json_object_get(cfg, "optim"), "lr"));
  g_assert_cmpfloat(fabs(lr - 0.0005), <, 1e-12);
  json_decref(cfg);
  em_run_clear(&r);
  em_store_close(st);
  g_free(err_text);
  g_free(run);
  g_free(ember);
  g_free(e.message);
  g_free(spec);
}

int main(int argc, char **argv) {
  g_home = g_dir_make_tmp("ember-ui-train-data-XXXXXX", NULL);
  g_setenv("EMBER_HOME", g_home, TRUE);
  ui_test_init(&argc, &argv);
  g_test_add_func("/ui/train-data/csv-trains", test_csv_trains);
  g_test_add_func("/ui/train-data/changes-during-run", test_changes_during_run);
  g_test_add_func("/ui/train-data/form-from-spec", test_form_from_spec);
  g_test_add_func("/ui/train-data/wheel-scrolls-form", test_wheel_scrolls_form);
  g_test_add_func("/ui/train-data/pause-lr-then-resume", test_pause_lr_then_resume);
  int rc = g_test_run();
  char *rm[] = {"rm", "-rf", g_home, NULL};
  g_spawn_sync(NULL, rm, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
  g_free(g_home);
  return rc;
}
