/* test-ui-shell.c: the workbench's window and Train page, driven for real
 * under Xvfb: every page is there and reachable by its action; the
 * preferences switch the style; a small training run (the zoo's MLP on a
 * 2000-sample slice of Fashion-MNIST, or the synthetic set without it)
 * reaches the charts, pauses (no step while paused), resumes with a new
 * learning rate (recorded as a run event), stops, and is found in the
 * registry with status "stopped"; SIGTERM to the process does the same
 * (the application quits cleanly). While it trains, every frame interval
 * after the first second must stay under 50 ms (the main loop never waits
 * on the worker). Each page is rendered to workbench-<page>.png. */
#include <glib/gstdio.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "em-data-dirs.h"
#include "em-app-state.h"
#include "em-application.h"
#include "em-store.h"
#include "em-train-page.h"
#include "em-window.h"
#include "ui-test-util.h"
#include "em-line-chart.h"

static char *g_home; /* the test's EMBER_HOME */
static EmApplication *g_app;

/* ---- the window ------------------------------------------------------------ */

static EmWindow *new_window(void) {
  EmAppState *state = em_app_state_new(g_home);
  EmWindow *w = em_window_new(GTK_APPLICATION(g_app), state);
  g_object_unref(state);
  return w;
}

static gboolean page_is(gpointer data) {
  void **p = data;
  const char *v = em_window_get_visible_page(p[0]);
  return v && strcmp(v, p[1]) == 0;
}

static void test_window_pages(void) {
  EmWindow *w = new_window();
  ui_test_show(GTK_WIDGET(w), 1280, 800);
  const char *const *names = em_window_page_names();
  int n = 0;
  for (; names[n]; n++) {
    g_assert_nonnull(em_window_get_page(w, names[n]));
    char action[64];
    g_snprintf(action, sizeof action, "page('%s')", names[n]);
    g_action_group_activate_action(G_ACTION_GROUP(w), "page", g_variant_new_string(names[n]));
    void *p[2] = {w, (void *)names[n]};
    g_assert_true(ui_test_wait(page_is, p, 2000));
  }
  g_assert_cmpint(n, ==, 10);
  /* the window fits a 1024-pixel-wide screen: the Builder's table and
   * toolbar held it at 1239 (its table now scrolls sideways, its file
   * buttons are icons) */
  int min_w = 0;
  gtk_widget_measure(GTK_WIDGET(w), GTK_ORIENTATION_HORIZONTAL, -1, &min_w, NULL, NULL, NULL);
  g_test_message("the window's minimum width: %d px", min_w);
  g_assert_cmpint(min_w, <=, 1024);
  gtk_window_set_default_size(GTK_WINDOW(w), 1024, 700);
  g_action_group_activate_action(G_ACTION_GROUP(w), "page", g_variant_new_string("builder"));
  ui_test_spin(600); /* past the stack's cross-fade */
  g_free(ui_test_screenshot(GTK_WIDGET(w), "workbench-builder-1024"));
  g_assert_true(EM_IS_TRAIN_PAGE(em_window_get_page(w, "train")));
  /* the accelerators the application installed */
  char **accels = gtk_application_get_accels_for_action(GTK_APPLICATION(g_app),
                                                        "win.page('train')");
  g_assert_cmpstr(accels[0], ==, "<Control>3");
  g_strfreev(accels);
  accels = gtk_application_get_accels_for_action(GTK_APPLICATION(g_app), "win.page('deploy')");
  g_assert_cmpstr(accels[0], ==, "<Control>9");
  g_strfreev(accels);
  accels = gtk_application_get_accels_for_action(GTK_APPLICATION(g_app), "win.page('sweeps')");
  g_assert_cmpstr(accels[0], ==, "<Control>0");
  g_strfreev(accels);
  accels = gtk_application_get_accels_for_action(GTK_APPLICATION(g_app), "app.quit");
  g_assert_cmpstr(accels[0], ==, "<Control>q");
  g_strfreev(accels);
  /* the shortcuts window and the open action */
  g_assert_true(g_action_group_has_action(G_ACTION_GROUP(w), "show-help-overlay"));
  g_assert_true(g_action_group_has_action(G_ACTION_GROUP(w), "open"));
  GtkShortcutsWindow *help = gtk_application_window_get_help_overlay(GTK_APPLICATION_WINDOW(w));
  g_assert_nonnull(help);
  gtk_window_present(GTK_WINDOW(help));
  ui_test_spin(300);
  g_free(ui_test_screenshot(GTK_WIDGET(help), "workbench-shortcuts"));
  gtk_window_close(GTK_WINDOW(help));

  /* Ctrl+O's work: a zoo spec opens in the builder, which shares it */
  char *zoo = em_data_dir_find("models");
  g_assert_nonnull(zoo);
  char *cnn = g_build_filename(zoo, "fmnist-cnn.json", NULL);
  GFile *f = g_file_new_for_path(cnn);
  em_window_show_page(w, "runs");
  em_window_open_spec(w, f);
  ui_test_spin(100);
  const char *path = em_app_state_get_spec_path(em_window_get_state(w));
  g_assert_nonnull(path);
  g_assert_true(g_str_has_suffix(path, "fmnist-cnn.json"));
  g_assert_nonnull(strstr(em_app_state_get_spec_json(em_window_get_state(w)), "Conv2d"));
  g_assert_cmpstr(em_window_get_visible_page(w), ==, "builder");
  g_object_unref(f);
  g_free(cnn);
  g_free(zoo);
  gtk_window_destroy(GTK_WINDOW(w));
}

/* A label's text shown cut short with an ellipsis. */
static gboolean shown_ellipsized(PangoLayout *l) { return l && pango_layout_is_ellipsized(l); }

/* The labels under w cut off at the right or bottom edge of clip (the page,
 * or the scrolled window around them: inside one, what lies below its
 * view is scrolled to, not cut off), or shown shortened with an ellipsis;
 * their texts go into names. */
static int clipped_labels(GtkWidget *w, GtkWidget *clip, gboolean scrolls, GString *names) {
  int n = 0;
  if (GTK_IS_LABEL(w) && gtk_widget_get_mapped(w) && gtk_widget_get_child_visible(w)) {
    graphene_rect_t r;
    if (gtk_widget_compute_bounds(w, clip, &r)) {
      double right = r.origin.x + r.size.width, bottom = r.origin.y + r.size.height;
      gboolean shown = right > 0 && bottom > 0 && r.origin.x < gtk_widget_get_width(clip) &&
                       r.origin.y < gtk_widget_get_height(clip);
      if (shown && (right > gtk_widget_get_width(clip) + 0.5 ||
                    (!scrolls && bottom > gtk_widget_get_height(clip) + 0.5))) {
        g_string_append_printf(names, " '%s'", gtk_label_get_text(GTK_LABEL(w)));
        n++;
      }
    }
    if (shown_ellipsized(gtk_label_get_layout(GTK_LABEL(w)))) {
      g_string_append_printf(names, " '%s' (ellipsized)", gtk_label_get_text(GTK_LABEL(w)));
      n++;
    }
  }
  if (GTK_IS_SCROLLED_WINDOW(w)) {
    GtkPolicyType v;
    gtk_scrolled_window_get_policy(GTK_SCROLLED_WINDOW(w), NULL, &v);
    clip = w;
    scrolls = v != GTK_POLICY_NEVER && v != GTK_POLICY_EXTERNAL;
  }
  for (GtkWidget *c = gtk_widget_get_first_child(w); c; c = gtk_widget_get_next_sibling(c))
    n += clipped_labels(c, clip, scrolls, names);
  return n;
}

/* Issue 32, item 10: the window at 1024x700 shows the Builder's whole
 * table (FLOPs and activation columns included) for the zoo's CNN, and the
 * Train page's status line, nothing cut off. Screenshots:
 * workbench-builder-1024-cnn, workbench-train-1024, workbench-train-1024-end. */
static void test_fits_1024(void) {
  EmWindow *w = new_window();
  ui_test_show(GTK_WIDGET(w), 1024, 700);
  char *zoo = em_data_dir_find("models");
  char *cnn = g_build_filename(zoo, "fmnist-cnn.json", NULL);
  GFile *f = g_file_new_for_path(cnn);
  em_window_open_spec(w, f);
  g_object_unref(f);
  ui_test_spin(700);
  g_assert_cmpint(gtk_widget_get_width(GTK_WIDGET(w)), <=, 1024);
  GtkWidget *builder = em_window_get_page(w, "builder");
  g_free(ui_test_screenshot(GTK_WIDGET(w), "workbench-builder-1024-cnn"));
  /* every scrolled window of the page shows its content's whole width */
  GPtrArray *sws = g_ptr_array_new();
  ui_test_collect(builder, GTK_TYPE_SCROLLED_WINDOW, sws);
  for (guint i = 0; i < sws->len; i++) {
    GtkAdjustment *h = gtk_scrolled_window_get_hadjustment(sws->pdata[i]);
    g_assert_cmpfloat(gtk_adjustment_get_upper(h), <=, gtk_adjustment_get_page_size(h) + 0.5);
  }
  g_ptr_array_unref(sws);
  GString *cut = g_string_new(NULL);
  int n = clipped_labels(builder, builder, FALSE, cut);
  if (n) g_test_message("clipped on the Builder:%s", cut->str);
  g_assert_cmpint(n, ==, 0);
  em_window_show_page(w, "train");
  ui_test_spin(700);
  g_free(ui_test_screenshot(GTK_WIDGET(w), "workbench-train-1024"));
  GtkWidget *train = em_window_get_page(w, "train");
  GPtrArray *tl = g_ptr_array_new(); /* counts as everywhere: 421,642 */
  ui_test_collect(train, GTK_TYPE_LABEL, tl);
  gboolean counted = FALSE;
  for (guint i = 0; i < tl->len; i++)
    counted |= strstr(gtk_label_get_text(tl->pdata[i]), "421,642 parameters") != NULL;
  g_ptr_array_unref(tl);
  g_assert_true(counted);
  g_string_truncate(cut, 0);
  n = clipped_labels(train, train, FALSE, cut);
  if (n) g_test_message("clipped on the Train page:%s", cut->str);
  g_assert_cmpint(n, ==, 0);
  /* the form's end: the buttons and the status lines */
  GtkWidget *form_sw = ui_test_find(train, GTK_TYPE_SCROLLED_WINDOW, 0);
  GtkAdjustment *va = gtk_scrolled_window_get_vadjustment(GTK_SCROLLED_WINDOW(form_sw));
  gtk_adjustment_set_value(va, gtk_adjustment_get_upper(va));
  ui_test_spin(200);
  g_free(ui_test_screenshot(GTK_WIDGET(w), "workbench-train-1024-end"));
  n = clipped_labels(train, train, FALSE, cut);
  if (n) g_test_message("clipped at the Train form's end:%s", cut->str);
  g_assert_cmpint(n, ==, 0);
  g_string_free(cut, TRUE);
  g_free(cnn);
  g_free(zoo);
  gtk_window_destroy(GTK_WINDOW(w));
}

static gboolean prefer_dark(void) {
  gboolean dark = FALSE;
  g_object_get(gtk_settings_get_default(), "gtk-application-prefer-dark-theme", &dark, NULL);
  return dark;
}

static void test_preferences(void) {
  GSettings *s = em_application_get_settings(g_app);
  g_assert_nonnull(s); /* compiled into the build tree by data/meson.build */
  g_assert_cmpstr(g_settings_get_string(s, "color-scheme"), ==, "system");
  g_settings_set_string(s, "color-scheme", "dark");
  g_assert_true(prefer_dark());
  g_assert_true(em_application_is_dark(g_app));
  g_action_group_activate_action(G_ACTION_GROUP(g_app), "preferences", NULL);
  GtkWindow *prefs = NULL;
  for (GList *l = gtk_application_get_windows(GTK_APPLICATION(g_app)); l; l = l->next)
    if (strcmp(G_OBJECT_TYPE_NAME(l->data), "EmPreferences") == 0) prefs = l->data;
  if (!prefs) { /* not attached to the app: find it among the toplevels */
    GListModel *tl = gtk_window_get_toplevels();
    for (guint i = 0; i < g_list_model_get_n_items(tl); i++) {
      GtkWindow *t = g_list_model_get_item(tl, i);
      if (strcmp(G_OBJECT_TYPE_NAME(t), "EmPreferences") == 0) prefs = t;
      g_object_unref(t);
    }
  }
  g_assert_nonnull(prefs);
  ui_test_spin(300);
  g_free(ui_test_screenshot(GTK_WIDGET(prefs), "workbench-preferences"));
  g_settings_set_string(s, "color-scheme", "light");
  g_assert_false(prefer_dark());
  g_settings_set_string(s, "color-scheme", "system");
  gtk_window_destroy(prefs);
}

/* ---- a training run ------------------------------------------------------------ */

typedef struct {
  EmTrainPage *page;
  gint64 run_id;
  gboolean started, finished;
  int status;
  char *message;
  gint64 points, evals, progress_signals;
  double last_lr; /* the lr of the latest step */
  gboolean measuring;
  char *profile; /* the trace of the profiled window */
  GArray *frames; /* frame times, us, while measuring */
  gint64 update_start, max_paint_us; /* the longest update..after-paint of a frame */
  gint64 update_cpu, max_paint_cpu_us; /* the same in the main thread's CPU time */
} run_watch;

static void on_started(EmAppState *s, gint64 id, run_watch *w) {
  w->started = TRUE;
  w->run_id = id;
}

static void on_progress(EmAppState *s, gpointer u, run_watch *w) {
  const EmTrainUpdate *up = u;
  w->points += up->n;
  w->evals += up->n_eval;
  w->progress_signals++;
  if (up->n > 0) w->last_lr = up->lr[up->n - 1];
  for (int i = 1; i < up->n; i++) g_assert_cmpint(up->step[i], >, up->step[i - 1]);
}

static void on_finished(EmAppState *s, gint64 id, int status, const char *msg, run_watch *w) {
  w->finished = TRUE;
  w->status = status;
  g_free(w->message);
  w->message = g_strdup(msg);
}

static void on_profile(EmAppState *s, const char *path, run_watch *w) {
  g_free(w->profile);
  w->profile = g_strdup(path);
}

static gboolean on_frame(GtkWidget *widget, GdkFrameClock *clock, gpointer data) {
  run_watch *w = data;
  if (w->measuring) {
    gint64 t = g_get_monotonic_time();
    g_array_append_val(w->frames, t);
  }
  return G_SOURCE_CONTINUE;
}

static gint64 thread_cpu_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (gint64)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void on_update(GdkFrameClock *c, run_watch *w) {
  w->update_start = g_get_monotonic_time();
  w->update_cpu = thread_cpu_us();
}

static void on_after_paint(GdkFrameClock *c, run_watch *w) {
  if (w->measuring && w->update_start)
  {
    w->max_paint_us = MAX(w->max_paint_us, g_get_monotonic_time() - w->update_start);
    w->max_paint_cpu_us = MAX(w->max_paint_cpu_us, thread_cpu_us() - w->update_cpu);
  }
}

static gboolean has_points(gpointer d) { return ((run_watch *)d)->points >= 30; }
static gboolean is_paused(gpointer d) { return em_train_page_is_paused(((run_watch *)d)->page); }
static gboolean is_finished(gpointer d) { return ((run_watch *)d)->finished; }
static gboolean resumed_points(gpointer d) {
  run_watch *w = d;
  return w->points >= 60 && !em_train_page_is_paused(w->page);
}

static gint64 chart_points(GtkWidget *chart) {
  return em_line_chart_get_n_points(EM_LINE_CHART(chart), 0);
}

static int cmp_i64(const void *a, const void *b) {
  gint64 x = *(const gint64 *)a, y = *(const gint64 *)b;
  return (x > y) - (x < y);
}

static void test_train_run(void) {
  EmWindow *win = new_window();
  EmAppState *state = em_window_get_state(win);
  gboolean fmnist = g_file_test("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                                G_FILE_TEST_EXISTS);
  em_app_state_set_dataset(state, fmnist ? "fashion-mnist" : "synthetic", NULL);
  /* the zoo's MLP, whatever the builder starts with */
  char *zoo = em_data_dir_find("models");
  g_assert_nonnull(zoo);
  char *mlp_path = g_build_filename(zoo, "fmnist-mlp.json", NULL), *mlp = NULL;
  g_assert_true(g_file_get_contents(mlp_path, &mlp, NULL, NULL));
  em_app_state_set_spec(state, mlp, mlp_path);
  g_free(mlp);
  g_free(mlp_path);
  g_free(zoo);
  ui_test_show(GTK_WIDGET(win), 1280, 800);
  em_window_show_page(win, "train");
  EmTrainPage *page = EM_TRAIN_PAGE(em_window_get_page(win, "train"));
  g_assert_true(em_train_page_set_value(page, "limit", 2000));
  /* far more than the test waits for: it stops the run itself, so however
   * fast the engine (40 epochs of 2000 samples ended in under 6 s on the
   * AVX-512 kernels, before the stop) or slow the main loop, the stop
   * comes first */
  g_assert_true(em_train_page_set_value(page, "epochs", 5000));
  g_assert_true(em_train_page_set_value(page, "batch", 32));
  g_assert_true(em_train_page_set_value(page, "threads", 1));
  g_assert_true(em_train_page_set_value(page, "lr", 0.05));
  g_assert_cmpfloat(em_train_page_get_value(page, "lr"), ==, 0.05);

  run_watch w = {.page = page, .frames = g_array_new(FALSE, FALSE, sizeof(gint64))};
  g_signal_connect(state, "run-started", G_CALLBACK(on_started), &w);
  g_signal_connect(state, "run-progress", G_CALLBACK(on_progress), &w);
  g_signal_connect(state, "run-finished", G_CALLBACK(on_finished), &w);
  g_signal_connect(state, "profile-ready", G_CALLBACK(on_profile), &w);
  em_train_page_set_profile(page, TRUE);
  guint tick = gtk_widget_add_tick_callback(GTK_WIDGET(win), on_frame, &w, NULL);
  GdkFrameClock *clock = gtk_widget_get_frame_clock(GTK_WIDGET(win));
  g_signal_connect(clock, "update", G_CALLBACK(on_update), &w);
  g_signal_connect(clock, "after-paint", G_CALLBACK(on_after_paint), &w);

  gint64 t0 = g_get_monotonic_time();
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(page), "train.start", NULL));
  g_assert_true(em_train_page_is_running(page));
  ui_test_spin(1000); /* the first second: the data loads, the first frames settle */
  w.measuring = TRUE;
  g_assert_true(ui_test_wait(has_points, &w, 60000));
  g_assert_true(w.started);
  g_assert_cmpint(w.run_id, >, 0);
  /* coalesced: far fewer signals than points */
  g_assert_cmpint(w.progress_signals, <, w.points);

  /* pause: no step while paused; change the lr; resume */
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(page), "train.pause", NULL));
  g_assert_true(ui_test_wait(is_paused, &w, 10000));
  ui_test_spin(100);
  gint64 at_pause = w.points;
  ui_test_spin(400);
  g_assert_cmpint(w.points, ==, at_pause);
  g_assert_cmpfloat_with_epsilon(w.last_lr, 0.05, 1e-9);
  g_assert_true(em_train_page_set_value(page, "lr", 0.025));
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(page), "train.resume", NULL));
  w.points = MIN(w.points, 30);
  g_assert_true(ui_test_wait(resumed_points, &w, 60000));
  ui_test_spin(2000); /* a few more seconds of training and drawing */
  g_assert_cmpfloat_with_epsilon(w.last_lr, 0.025, 1e-9); /* the new lr is the one used */
  w.measuring = FALSE;
  /* the profiled window (batches 6..25) ended and its trace was announced */
  g_assert_nonnull(w.profile);
  g_assert_true(g_file_test(w.profile, G_FILE_TEST_IS_REGULAR));
  g_unlink(w.profile);

  /* the chart holds the points */
  GtkWidget *chart = em_train_page_get_loss_chart(page);
  g_assert_nonnull(chart);
  g_assert_cmpint(em_line_chart_get_n_points(EM_LINE_CHART(chart), 0), >, 0);
  /* the loss axis goes logarithmic from its check button (the README says so) */
  GtkWidget *log_check = ui_test_find_named(GTK_WIDGET(page), "loss-log");
  g_assert_nonnull(log_check);
  gtk_check_button_set_active(GTK_CHECK_BUTTON(log_check), TRUE);
  g_assert_true(em_line_chart_get_log_y(EM_LINE_CHART(chart)));
  gtk_check_button_set_active(GTK_CHECK_BUTTON(log_check), FALSE);
  g_assert_false(em_line_chart_get_log_y(EM_LINE_CHART(chart)));
  g_free(ui_test_screenshot(GTK_WIDGET(win), "workbench-train")); /* while it trains */

  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(page), "train.stop", NULL));
  g_assert_true(ui_test_wait(is_finished, &w, 30000));
  g_assert_cmpint(w.status, ==, EM_RUN_STOPPED);
  g_assert_false(em_train_page_is_running(page));
  gtk_widget_remove_tick_callback(GTK_WIDGET(win), tick);
  g_signal_handlers_disconnect_by_data(clock, &w);

  /* frame intervals while training */
  GArray *f = w.frames;
  g_assert_cmpuint(f->len, >, 20);
  int n = (int)f->len - 1;
  gint64 *iv = g_new(gint64, n);
  for (int i = 0; i < n; i++)
    iv[i] = g_array_index(f, gint64, i + 1) - g_array_index(f, gint64, i);
  qsort(iv, (size_t)n, sizeof *iv, cmp_i64);
  double max_ms = iv[n - 1] / 1000.0, p99_ms = iv[(int)floor(0.99 * (n - 1))] / 1000.0,
         med_ms = iv[n / 2] / 1000.0;
  char *msg = g_strdup_printf("frame intervals while training: %d frames over %.1f s, median "
                              "%.1f ms, p99 %.1f ms, max %.1f ms (longest frame's own work "
                              "%.1f ms, %.1f ms of it on the CPU); %lld progress signals",
                              n, (g_get_monotonic_time() - t0) / 1e6, med_ms, p99_ms, max_ms,
                              w.max_paint_us / 1000.0, w.max_paint_cpu_us / 1000.0,
                              (long long)w.progress_signals);
  g_test_message("%s", msg);
  g_print("%s\n", msg);
  g_free(msg);
  g_free(iv);
  /* The bound is the app's: no frame's own work (update to after-paint, in
   * CPU time, which another process on a shared machine cannot inflate)
   * over 50 ms. Frame intervals are wall-clock: on a quiet machine the p99
   * and the max stay under 40 ms (reported above), but neighbours taking
   * both cores stretched the p99 to 133 ms once; a main loop blocked by the
   * training would show intervals of seconds, so 99% within 200 ms still
   * catches that without failing on a busy machine. */
  g_assert_cmpfloat(p99_ms, <=, 200.0);
#if defined(__SANITIZE_ADDRESS__) /* its build runs several times slower: 84 ms was seen once */
  const double paint_bound_ms = 250.0;
#else
  const double paint_bound_ms = 50.0;
#endif
  g_assert_cmpfloat(w.max_paint_cpu_us / 1000.0, <=, paint_bound_ms);

  /* the run in the registry: stopped, its points, the lr change */
  em_error err = {0};
  em_store *st = em_store_open(g_home, true, &err);
  g_assert_nonnull(st);
  em_run r;
  memset(&r, 0, sizeof r);
  g_assert_cmpint(em_store_run_get(st, w.run_id, &r, &err), ==, EM_OK);
  g_assert_cmpint(r.status, ==, EM_RUN_STOPPED);
  g_assert_cmpstr(r.model, ==, "fmnist-mlp");
  g_assert_cmpint(r.steps, >=, 60);
  em_run_clear(&r);
  em_metric_point *pts = NULL;
  int64_t np = 0;
  g_assert_cmpint(em_store_metrics_get(st, w.run_id, "loss", &pts, &np, &err), ==, EM_OK);
  g_assert_cmpint(np, >=, 60);
  free(pts);
  em_run_annotation *an = NULL;
  int na = 0;
  gboolean lr_event = FALSE;
  g_assert_cmpint(em_store_run_annotations(st, w.run_id, &an, &na, &err), ==, EM_OK);
  for (int i = 0; i < na; i++)
    if (strcmp(an[i].kind, "settings") == 0 && strstr(an[i].text, "lr 0.05 -> 0.025"))
      lr_event = TRUE;
  em_run_annotations_free(an, na);
  g_assert_true(lr_event);
  em_store_close(st);

  /* a second, short run from the same page completes */
  w.finished = FALSE;
  w.run_id = 0;
  em_train_page_set_profile(page, FALSE);
  g_assert_true(em_train_page_set_value(page, "epochs", 1));
  g_assert_true(em_train_page_set_value(page, "limit", 640));
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(page), "train.start", NULL));
  g_assert_true(ui_test_wait(is_finished, &w, 60000));
  g_assert_cmpint(w.status, ==, EM_RUN_COMPLETED);
  g_assert_cmpint(w.run_id, >, 1);
  g_assert_cmpint(chart_points(chart), ==, 20); /* 640 / 32 steps */

  /* every page, rendered */
  for (const char *const *p = em_window_page_names(); *p; p++) {
    if (strcmp(*p, "train") == 0) continue; /* shown while training, above */
    /* their own tests render them, with a server or a sweep running
     * (test-ui-deploy, test-ui-sweeps): the same file from here raced them */
    if (strcmp(*p, "deploy") == 0 || strcmp(*p, "sweeps") == 0) continue;
    em_window_show_page(win, *p);
    ui_test_spin(400);
    char name[64];
    g_snprintf(name, sizeof name, "workbench-%s", *p);
    g_free(ui_test_screenshot(GTK_WIDGET(win), name));
  }
  g_signal_handlers_disconnect_by_data(state, &w);
  g_array_unref(w.frames);
  g_free(w.message);
  g_free(w.profile);
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Closing the window while a run is paused stops it (the worker wakes,
 * writes its final checkpoint, records the end) without hanging. */
static void test_close_while_paused(void) {
  EmWindow *win = new_window();
  EmAppState *state = em_window_get_state(win);
  em_app_state_set_dataset(state, "synthetic", NULL);
  ui_test_show(GTK_WIDGET(win), 1000, 700);
  EmTrainPage *page = EM_TRAIN_PAGE(em_window_get_page(win, "train"));
  em_train_page_set_value(page, "epochs", 50);
  em_train_page_set_value(page, "threads", 1);
  run_watch w = {.page = page};
  g_signal_connect(state, "run-started", G_CALLBACK(on_started), &w);
  g_signal_connect(state, "run-progress", G_CALLBACK(on_progress), &w);
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(page), "train.start", NULL));
  g_assert_true(ui_test_wait(has_points, &w, 60000));
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(page), "train.pause", NULL));
  g_assert_true(ui_test_wait(is_paused, &w, 10000));
  g_signal_handlers_disconnect_by_data(state, &w);
  gint64 t0 = g_get_monotonic_time();
  gtk_window_destroy(GTK_WINDOW(win));
  double close_ms = (g_get_monotonic_time() - t0) / 1000.0;
  g_test_message("closing the window during a paused run took %.0f ms", close_ms);
  g_assert_cmpfloat(close_ms, <, 10000);
  em_error err = {0};
  em_store *st = em_store_open(g_home, true, &err);
  g_assert_nonnull(st);
  em_run r;
  memset(&r, 0, sizeof r);
  g_assert_cmpint(em_store_run_get(st, w.run_id, &r, &err), ==, EM_OK);
  g_assert_cmpint(r.status, ==, EM_RUN_STOPPED);
  em_run_clear(&r);
  em_store_close(st);
}

/* SIGTERM during a run: the application's quit path (the windows close,
 * the run stops), not the default death that left the run "killed" with
 * no final checkpoint. Without the handler this kills the test. */
static void test_sigterm_stops_run(void) {
  EmWindow *win = new_window();
  EmAppState *state = em_window_get_state(win);
  em_app_state_set_dataset(state, "synthetic", NULL);
  ui_test_show(GTK_WIDGET(win), 1000, 700);
  EmTrainPage *page = EM_TRAIN_PAGE(em_window_get_page(win, "train"));
  em_train_page_set_value(page, "epochs", 50);
  em_train_page_set_value(page, "threads", 1);
  run_watch w = {.page = page};
  g_signal_connect(state, "run-started", G_CALLBACK(on_started), &w);
  g_signal_connect(state, "run-progress", G_CALLBACK(on_progress), &w);
  g_assert_true(gtk_widget_activate_action(GTK_WIDGET(page), "train.start", NULL));
  g_assert_true(ui_test_wait(has_points, &w, 60000));
  g_signal_handlers_disconnect_by_data(state, &w);
  g_object_add_weak_pointer(G_OBJECT(win), (gpointer *)&win);
  raise(SIGTERM);
  ui_test_spin(500); /* the signal source runs; quitting closes the window */
  g_assert_null(win);
  em_error err = {0};
  em_store *st = em_store_open(g_home, true, &err);
  g_assert_nonnull(st);
  em_run r;
  memset(&r, 0, sizeof r);
  g_assert_cmpint(em_store_run_get(st, w.run_id, &r, &err), ==, EM_OK);
  g_assert_cmpint(r.status, ==, EM_RUN_STOPPED);
  em_run_clear(&r);
  em_checkpoint_row *c = NULL;
  int n = 0;
  g_assert_cmpint(em_store_checkpoints_list(st, w.run_id, &c, &n, &err), ==, EM_OK);
  gboolean final = FALSE;
  for (int i = 0; i < n; i++) final |= strcmp(c[i].kind, "final") == 0;
  g_assert_true(final);
  em_checkpoint_rows_free(c, n);
  em_store_close(st);
}

int main(int argc, char **argv) {
  g_home = g_dir_make_tmp("ember-ui-shell-XXXXXX", NULL);
  g_setenv("EMBER_HOME", g_home, TRUE);
  ui_test_init(&argc, &argv);
  g_app = em_application_new();
  g_application_set_flags(G_APPLICATION(g_app), G_APPLICATION_NON_UNIQUE);
  /* Under xvfb-run there is usually no session bus: GTK warns about it,
   * and gtk_test_init made warnings fatal; the application works without
   * one, so only that warning is let through. */
  GLogLevelFlags fatal = g_log_set_always_fatal(G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
  g_assert_true(g_application_register(G_APPLICATION(g_app), NULL, NULL));
  g_log_set_always_fatal(fatal);
  g_test_add_func("/ui/shell/window-pages", test_window_pages);
  g_test_add_func("/ui/shell/fits-1024", test_fits_1024);
  g_test_add_func("/ui/shell/preferences", test_preferences);
  g_test_add_func("/ui/shell/train-run", test_train_run);
  g_test_add_func("/ui/shell/close-while-paused", test_close_while_paused);
  g_test_add_func("/ui/shell/sigterm-stops-run", test_sigterm_stops_run); /* last: it quits */
  int rc = g_test_run();
  g_object_unref(g_app);
  char *cmd = g_strdup_printf("rm -rf '%s'", g_home);
  if (system(cmd) != 0) g_printerr("could not remove %s\n", g_home);
  g_free(cmd);
  g_free(g_home);
  return rc;
}
