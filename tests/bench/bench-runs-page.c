/* bench-runs-page.c: the Runs page on a large registry (issue 32, scale):
 * how long it takes to open and whether it scrolls at display rate.
 *
 *   bench-runs-page DIR --generate [RUNS [KEYS [POINTS]]]
 *       fills a new registry in DIR with RUNS runs (default 10,000), each
 *       with KEYS metric keys (20) of POINTS points (10), three of them
 *       the keys the table shows (train_loss, test_loss, test_accuracy),
 *       a config with a few settings and two tags;
 *   xvfb-run -a bench-runs-page DIR [--repeat N]
 *       measures, N times (default 5), medians printed:
 *       - read: the registry read alone (em_store_runs_list and every
 *         run's tags), as the page's loader does it;
 *       - made: em_runs_page_new_async, as the window makes it at
 *         start-up (its first read on the worker);
 *       - shown: the page made behind another one (as in the window),
 *         then switched to with the registry changed meanwhile: until its
 *         first frame is drawn (the goal: under 200 ms);
 *       - cold open: made and shown at once, to the first frame with rows;
 *       - stall: the longest the main loop went without a frame while the
 *         page reloaded (what a read on the main thread would cost);
 *       - scroll: frame intervals while the table scrolls from top to
 *         bottom, one screen per frame (every visible row bound again
 *         each frame: the worst case, a held Page Down), then back up an
 *         eighth of a screen per frame (a wheel's pace) (median, p95,
 *         max), against the display's 16.7 ms.
 * GSK_RENDERER=cairo, as the UI tests. The page reads on a worker thread
 * (em-runs-page.h), so "stall" is frames, not the read. */
#include <gtk/gtk.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "em-app-state.h"
#include "em-application.h"
#include "em-runs-page.h"
#include "em-store.h"

static double now_ms(void) { return (double)g_get_monotonic_time() / 1000.0; }

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0;
}

/* ---- generating ------------------------------------------------------------------ */

static int generate(const char *dir, int runs, int keys, int points) {
  em_error err = {0};
  em_store *s = em_store_open(dir, false, &err);
  em_store_writer *w = s ? em_store_writer_new(dir, 200, &err) : NULL;
  if (!w) {
    fprintf(stderr, "bench-runs-page: %s\n", err.msg);
    return 1;
  }
  static const char *const shown[] = {EM_METRIC_TRAIN_LOSS, EM_METRIC_TEST_LOSS,
                                      EM_METRIC_TEST_ACCURACY};
  double t0 = now_ms();
  for (int r = 0; r < runs; r++) {
    char model[32], cfg[160];
    g_snprintf(model, sizeof model, "model-%d", r % 7);
    g_snprintf(cfg, sizeof cfg,
               "{\"optim\": {\"name\": \"adam\", \"lr\": %g}, \"batch_size\": %d, \"epochs\": %d}",
               1e-3 * (1 + r % 5), 32 << (r % 3), 1 + r % 4);
    em_run_new nr = {.model = model, .spec_json = "{\"name\": \"x\", \"nodes\": []}",
                     .config_json = cfg, .seed = (uint64_t)r, .device = "cpu", .threads = 2,
                     .engine_version = "bench"};
    int64_t id = 0;
    if (em_store_run_create(s, &nr, &id, &err) != EM_OK) {
      fprintf(stderr, "bench-runs-page: %s\n", err.msg);
      return 1;
    }
    for (int k = 0; k < keys; k++) {
      char key[32];
      if (k < 3) g_strlcpy(key, shown[k], sizeof key);
      else g_snprintf(key, sizeof key, "metric_%02d", k);
      for (int p = 0; p < points; p++)
        em_store_writer_metric(w, id, (p + 1) * 100, key, 1.0 / (1 + p + r % 13), 1.7e9 + p);
    }
    em_store_run_tag(s, id, "sweep", r % 2 ? "a" : "b", &err);
    em_store_run_tag(s, id, "owner", "bench", &err);
    em_store_run_finish(s, id, r % 10 ? EM_RUN_COMPLETED : EM_RUN_STOPPED, NULL, &err);
    if ((r + 1) % 1000 == 0) fprintf(stderr, "  %d runs (%.0f s)\n", r + 1, (now_ms() - t0) / 1e3);
  }
  if (em_store_writer_free(w, &err) != EM_OK) fprintf(stderr, "bench-runs-page: %s\n", err.msg);
  em_store_close(s);
  printf("generated %d runs x %d keys x %d points in %.1f s\n", runs, keys, points,
         (now_ms() - t0) / 1e3);
  return 0;
}

/* ---- measuring --------------------------------------------------------------------- */

typedef struct {
  double last, worst; /* ms */
  GArray *intervals;  /* double ms, when recording */
  gboolean drawn_rows;
  EmRunsPage *page;
  double opened_at, open_ms;
} frames;

static gboolean on_tick(GtkWidget *w, GdkFrameClock *fc, gpointer data) {
  frames *f = data;
  double t = now_ms();
  if (f->last > 0) {
    double dt = t - f->last;
    if (dt > f->worst) f->worst = dt;
    if (f->intervals) g_array_append_val(f->intervals, dt);
  }
  f->last = t;
  if (!f->drawn_rows && f->page && em_runs_page_get_n_shown(f->page) > 0) {
    f->drawn_rows = TRUE;
    f->open_ms = t - f->opened_at;
  }
  return G_SOURCE_CONTINUE;
}

static void spin_until(gboolean *flag, double timeout_ms) {
  double end = now_ms() + timeout_ms;
  while (!*flag && now_ms() < end) g_main_context_iteration(NULL, TRUE);
}

static void spin_ms(double ms) {
  double end = now_ms() + ms;
  while (now_ms() < end) g_main_context_iteration(NULL, FALSE);
}

/* The table's vertical adjustment (its column view scrolls itself). */
static GtkAdjustment *vadj_of(GtkWidget *w) {
  if (GTK_IS_COLUMN_VIEW(w)) return gtk_scrollable_get_vadjustment(GTK_SCROLLABLE(w));
  for (GtkWidget *c = gtk_widget_get_first_child(w); c; c = gtk_widget_get_next_sibling(c)) {
    GtkAdjustment *a = vadj_of(c);
    if (a) return a;
  }
  return NULL;
}

/* Waits for the next frame of w's clock. */
static void next_frame(GtkWidget *w) {
  GdkFrameClock *fc = gtk_widget_get_frame_clock(w);
  gint64 frame = gdk_frame_clock_get_frame_counter(fc);
  double end = now_ms() + 5000;
  while (gdk_frame_clock_get_frame_counter(fc) == frame && now_ms() < end)
    g_main_context_iteration(NULL, TRUE);
}

static int measure(const char *dir, int repeat) {
  double *read = g_new(double, repeat), *open = g_new(double, repeat), *stall = g_new(double, repeat);
  double *make = g_new(double, repeat), *show = g_new(double, repeat);
  guint shown = 0;
  for (int k = 0; k < repeat; k++) { /* the read alone */
    em_error err = {0};
    double t = now_ms();
    em_store *s = em_store_open(dir, true, &err);
    em_run_filter f = {.any_status = true};
    em_run *runs = NULL;
    em_run_tag *tags = NULL;
    int n = 0, nt = 0;
    if (!s || em_store_runs_list(s, &f, &runs, &n, &err) != EM_OK ||
        em_store_run_tags_all(s, &tags, &nt, &err) != EM_OK) {
      fprintf(stderr, "bench-runs-page: %s\n", err.msg);
      return 1;
    }
    read[k] = now_ms() - t;
    shown = (guint)n;
    em_runs_free(runs, n);
    em_run_tags_free(tags, nt);
    em_store_close(s);
  }
  GArray *scroll = g_array_new(FALSE, FALSE, sizeof(double));
  GArray *smooth = g_array_new(FALSE, FALSE, sizeof(double));
  for (int k = 0; k < repeat; k++) {
    EmAppState *state = em_app_state_new(dir);
    GtkWidget *win = gtk_window_new();
    gtk_window_set_default_size(GTK_WINDOW(win), 1280, 800);
    frames f = {0};
    gtk_widget_add_tick_callback(win, on_tick, &f, NULL);
    gtk_window_present(GTK_WINDOW(win));
    spin_ms(300);
    f.opened_at = now_ms();
    GtkWidget *page = em_runs_page_new(state);
    f.page = EM_RUNS_PAGE(page);
    gtk_window_set_child(GTK_WINDOW(win), page);
    spin_until(&f.drawn_rows, 60000);
    open[k] = f.open_ms;
    /* as in the window: made at start-up behind another page, then shown */
    {
      GtkWidget *stack = gtk_stack_new();
      gtk_stack_add_named(GTK_STACK(stack), gtk_label_new("another page"), "other");
      double t = now_ms();
      GtkWidget *hidden = em_runs_page_new_async(state); /* as the window makes it */
      make[k] = now_ms() - t;
      gtk_stack_add_named(GTK_STACK(stack), hidden, "runs");
      GtkWidget *w2 = gtk_window_new();
      gtk_window_set_default_size(GTK_WINDOW(w2), 1280, 800);
      gtk_window_set_child(GTK_WINDOW(w2), stack);
      gtk_window_present(GTK_WINDOW(w2));
      spin_ms(1500); /* the page's idle work, behind the other page */
      em_app_state_registry_changed(state); /* stale: read when shown */
      t = now_ms();
      gtk_stack_set_visible_child_name(GTK_STACK(stack), "runs");
      next_frame(w2);
      next_frame(w2); /* the first frame that draws it */
      show[k] = now_ms() - t;
      gtk_window_destroy(GTK_WINDOW(w2));
    }
    if (em_runs_page_get_n_shown(f.page) != shown)
      spin_ms(200); /* every row in */
    /* a reload while frames run: the longest gap */
    spin_ms(200);
    f.worst = 0;
    guint before = em_runs_page_get_n_reloads(f.page);
    em_app_state_registry_changed(state);
    double end = now_ms() + 30000;
    while (em_runs_page_get_n_reloads(f.page) == before && now_ms() < end)
      g_main_context_iteration(NULL, TRUE);
    spin_ms(100);
    stall[k] = f.worst;
    if (k == repeat - 1) { /* scroll top to bottom, a screen per frame */
      GtkAdjustment *a = vadj_of(page);
      f.intervals = scroll;
      f.last = 0;
      for (int step = 0; a && step < 2000 && gtk_adjustment_get_value(a) + gtk_adjustment_get_page_size(a) <
                                             gtk_adjustment_get_upper(a) - 1; step++) {
        gtk_adjustment_set_value(a, gtk_adjustment_get_value(a) + gtk_adjustment_get_page_size(a));
        next_frame(win);
      }
      /* a wheel's pace: an eighth of a screen per frame, 300 frames up */
      f.intervals = smooth;
      f.last = 0;
      for (int step = 0; a && step < 300; step++) {
        gtk_adjustment_set_value(a, gtk_adjustment_get_value(a) - gtk_adjustment_get_page_size(a) / 8);
        next_frame(win);
      }
      f.intervals = NULL;
    }
    gtk_window_destroy(GTK_WINDOW(win));
    g_object_unref(state);
    spin_ms(100);
  }
  double *iv = (double *)scroll->data;
  int ni = (int)scroll->len;
  qsort(iv, (size_t)ni, sizeof *iv, cmp_d);
  printf("registry: %u runs\n", shown);
  printf("read (runs + tags, one thread):   median %.1f ms\n", median(read, repeat));
  printf("made (as the window makes it at start-up; the read on the worker): median %.1f ms\n",
         median(make, repeat));
  printf("shown (switched to, to its first frame drawn):  median %.1f ms   (goal: under 200 ms)\n",
         median(show, repeat));
  printf("cold open (made and shown at once, to the first frame with rows): median %.1f ms\n",
         median(open, repeat));
  printf("longest frame gap during a reload: median %.1f ms\n", median(stall, repeat));
  if (ni)
    printf("scroll, %d frames of a screen each: interval median %.1f ms, p95 %.1f ms, max %.1f ms "
           "(display: 16.7 ms)\n",
           ni, iv[ni / 2], iv[(int)(0.95 * (ni - 1))], iv[ni - 1]);
  double *sv = (double *)smooth->data;
  int ns = (int)smooth->len;
  qsort(sv, (size_t)ns, sizeof *sv, cmp_d);
  if (ns)
    printf("scroll, %d frames of an eighth of a screen: interval median %.1f ms, p95 %.1f ms, "
           "max %.1f ms\n",
           ns, sv[ns / 2], sv[(int)(0.95 * (ns - 1))], sv[ns - 1]);
  g_array_unref(smooth);
  g_array_unref(scroll);
  g_free(read);
  g_free(open);
  g_free(stall);
  g_free(make);
  g_free(show);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench-runs-page DIR --generate [RUNS [KEYS [POINTS]]]\n"
                    "       bench-runs-page DIR [--repeat N]   (under xvfb-run)\n");
    return 2;
  }
  if (argc >= 3 && !strcmp(argv[2], "--generate"))
    return generate(argv[1], argc > 3 ? atoi(argv[3]) : 10000, argc > 4 ? atoi(argv[4]) : 20,
                    argc > 5 ? atoi(argv[5]) : 10);
  int repeat = argc >= 4 && !strcmp(argv[2], "--repeat") ? atoi(argv[3]) : 5;
  if (repeat < 1) repeat = 1;
  g_setenv("GSK_RENDERER", "cairo", FALSE);
  g_setenv("GSETTINGS_BACKEND", "memory", TRUE);
  gtk_init();
  em_ui_register_resources();
  return measure(argv[1], repeat);
}
