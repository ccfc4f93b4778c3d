/* test-ui-chart.c: the line chart. The series (no GTK): decimation is
 * exact (each column's min and max equal a brute-force scan of the points
 * whose x falls in it), range min/max over the pyramid equals a scan, the
 * EMA equals TensorBoard's debiased EMA computed here on the full series.
 * The widget: a million points append and draw (the time of one snapshot
 * and of rasterising it are printed), log axis over six decades, and the
 * view API (zoom, reset). Screenshots: chart-million-points,
 * chart-log-axis, chart-smoothing, chart-zoomed, chart-hover. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "em-line-chart.h"
#include "em-series.h"
#include "ui-test-util.h"

/* A noisy decreasing curve with repeated x values and a few NaNs. */
static em_series *random_series(GRand *r, int64_t n, double **xs, double **ys) {
  double *x = g_new(double, n), *y = g_new(double, n);
  double t = g_rand_double_range(r, -50, 50);
  for (int64_t i = 0; i < n; i++) {
    if (g_rand_int_range(r, 0, 4) != 0) t += g_rand_double_range(r, 0, 3);
    x[i] = t;
    y[i] = exp(-(double)i / (double)n * 3) + g_rand_double_range(r, -0.3, 0.3);
    if (g_rand_int_range(r, 0, 500) == 0) y[i] = NAN;
  }
  em_series *s = em_series_new();
  /* in uneven chunks, as a trainer delivers them */
  for (int64_t i = 0; i < n;) {
    int64_t k = g_rand_int_range(r, 1, 700);
    k = MIN(n - i, k);
    g_assert_true(em_series_append(s, x + i, y + i, k));
    i += k;
  }
  *xs = x;
  *ys = y;
  return s;
}

static void test_series_minmax(void) {
  GRand *r = g_rand_new_with_seed(7);
  double *x, *y;
  int64_t n = 300000;
  em_series *s = random_series(r, n, &x, &y);
  g_assert_cmpint(em_series_len(s), ==, n);
  for (int trial = 0; trial < 400; trial++) {
    int64_t a = g_rand_int_range(r, 0, (gint32)n);
    int64_t len = g_rand_int_range(r, 0, trial < 200 ? 300 : (gint32)n);
    int64_t b = MIN(n, a + len);
    double mn = NAN, mx = NAN;
    for (int64_t i = a; i < b; i++)
      if (isfinite(y[i])) { mn = fmin(mn, y[i]); mx = fmax(mx, y[i]); }
    double gmn, gmx;
    gboolean any = em_series_minmax(s, EM_CURVE_RAW, a, b, &gmn, &gmx);
    g_assert_cmpint(any, ==, !isnan(mn));
    if (any) {
      g_assert_cmpfloat(gmn, ==, mn);
      g_assert_cmpfloat(gmx, ==, mx);
    }
  }
  em_series_free(s);
  g_free(x);
  g_free(y);
  g_rand_free(r);
}

static void test_series_decimate(void) {
  GRand *r = g_rand_new_with_seed(11);
  for (int trial = 0; trial < 12; trial++) {
    double *x, *y;
    int64_t n = trial < 6 ? g_rand_int_range(r, 1, 5000) : g_rand_int_range(r, 50000, 400000);
    em_series *s = random_series(r, n, &x, &y);
    em_series_set_smoothing(s, trial % 3 == 0 ? 0.0 : 0.9);
    const double *curve[2] = {y, em_series_y(s, EM_CURVE_SMOOTH)};
    int ncols = g_rand_int_range(r, 1, 1500);
    /* the whole range, or a zoomed window */
    double x0 = x[0], x1 = x[n - 1] + 1;
    if (trial % 2) {
      double a = g_rand_double_range(r, x[0], x[n - 1]), b = g_rand_double_range(r, x[0], x[n - 1]);
      x0 = fmin(a, b);
      x1 = fmax(a, b) + 1e-3;
    }
    em_series_column *cols = g_new(em_series_column, ncols);
    double *bmin = g_new(double, ncols), *bmax = g_new(double, ncols);
    gint64 *bcount = g_new0(gint64, ncols);
    for (int c = 0; c < 2; c++) {
      em_series_decimate(s, c, x0, x1, ncols, cols);
      for (int j = 0; j < ncols; j++) { bmin[j] = NAN; bmax[j] = NAN; bcount[j] = 0; }
      /* brute force: the column of every point from the same boundaries */
      int j = 0; /* x is sorted: the column only moves right */
      for (int64_t i = 0; i < n; i++) {
        if (x[i] < x0 || x[i] >= x1) continue;
        while (j + 1 < ncols && x[i] >= x0 + (x1 - x0) * (double)(j + 1) / (double)ncols) j++;
        bcount[j]++;
        double v = curve[c][i];
        if (isfinite(v)) { bmin[j] = fmin(bmin[j], v); bmax[j] = fmax(bmax[j], v); }
      }
      for (int j = 0; j < ncols; j++) {
        g_assert_cmpint(cols[j].i1 - cols[j].i0, ==, bcount[j]);
        g_assert_cmpint(isnan(cols[j].min), ==, isnan(bmin[j]));
        if (!isnan(bmin[j])) {
          g_assert_cmpfloat(cols[j].min, ==, bmin[j]);
          g_assert_cmpfloat(cols[j].max, ==, bmax[j]);
        }
      }
    }
    g_free(cols);
    g_free(bmin);
    g_free(bmax);
    g_free(bcount);
    em_series_free(s);
    g_free(x);
    g_free(y);
  }
  g_rand_free(r);
}

/* TensorBoard's smoothing, written out plainly. */
static void reference_ema(const double *y, int64_t n, double w, double *out) {
  double last = 0;
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(y[i])) { out[i] = y[i]; continue; }
    last = last * w + (1 - w) * y[i];
    k++;
    out[i] = last / (1 - pow(w, (double)k));
  }
}

static void test_series_smoothing(void) {
  GRand *r = g_rand_new_with_seed(3);
  double *x, *y;
  int64_t n = 100000;
  em_series *s = random_series(r, n, &x, &y);
  double *ref = g_new(double, n);
  const double ws[] = {0.0, 0.6, 0.9, 0.99};
  for (guint t = 0; t < G_N_ELEMENTS(ws); t++) {
    em_series_set_smoothing(s, ws[t]);
    reference_ema(y, n, ws[t], ref);
    const double *sm = em_series_y(s, EM_CURVE_SMOOTH);
    for (int64_t i = 0; i < n; i++) {
      if (isnan(ref[i])) { g_assert_true(isnan(sm[i])); continue; }
      g_assert_cmpfloat_with_epsilon(sm[i], ref[i], 1e-12 * (1 + fabs(ref[i])));
    }
  }
  /* incremental: smoothing set first, then appends, equals the same */
  em_series *s2 = em_series_new();
  em_series_set_smoothing(s2, 0.9);
  for (int64_t i = 0; i < n; i += 1000) em_series_append(s2, x + i, y + i, MIN(1000, n - i));
  reference_ema(y, n, 0.9, ref);
  for (int64_t i = 0; i < n; i++)
    if (!isnan(ref[i])) g_assert_cmpfloat_with_epsilon(em_series_y(s2, EM_CURVE_SMOOTH)[i], ref[i], 1e-12);
  /* and the smoothed pyramid follows a change of weight */
  double mn, mx;
  g_assert_true(em_series_minmax(s2, EM_CURVE_SMOOTH, 0, n, &mn, &mx));
  double bmn = INFINITY, bmx = -INFINITY;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(ref[i])) { bmn = fmin(bmn, ref[i]); bmx = fmax(bmx, ref[i]); }
  g_assert_cmpfloat_with_epsilon(mn, bmn, 1e-12);
  g_assert_cmpfloat_with_epsilon(mx, bmx, 1e-12);
  em_series_free(s2);
  em_series_free(s);
  g_free(ref);
  g_free(x);
  g_free(y);
  g_rand_free(r);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median milliseconds of building the chart's frame (snapshot, the cache
 * invalidated first) and of rasterising it. */
static void time_frame(GtkWidget *chart, double *snap_ms, double *raster_ms) {
  enum { REPS = 15 };
  double ts[REPS], tr[REPS];
  int w = gtk_widget_get_width(chart), h = gtk_widget_get_height(chart);
  GskRenderer *renderer = gtk_native_get_renderer(gtk_widget_get_native(chart));
  for (int k = 0; k < REPS; k++) {
    em_line_chart_set_title(EM_LINE_CHART(chart), k % 2 ? "Training loss (1,000,000 steps)" : "Training loss");
    GtkSnapshot *s = gtk_snapshot_new();
    gint64 t0 = g_get_monotonic_time();
    GTK_WIDGET_GET_CLASS(chart)->snapshot(chart, s);
    GskRenderNode *node = gtk_snapshot_free_to_node(s);
    gint64 t1 = g_get_monotonic_time();
    GdkTexture *tex = gsk_renderer_render_texture(renderer, node, &GRAPHENE_RECT_INIT(0, 0, w, h));
    gint64 t2 = g_get_monotonic_time();
    ts[k] = (t1 - t0) / 1000.0;
    tr[k] = (t2 - t1) / 1000.0;
    g_object_unref(tex);
    gsk_render_node_unref(node);
  }
  qsort(ts, REPS, sizeof(double), cmp_double);
  qsort(tr, REPS, sizeof(double), cmp_double);
  *snap_ms = ts[REPS / 2];
  *raster_ms = tr[REPS / 2];
}

static void test_chart_million(void) {
  GtkWidget *chart = em_line_chart_new();
  EmLineChart *c = EM_LINE_CHART(chart);
  em_line_chart_set_title(c, "Training loss");
  em_line_chart_set_x_label(c, "step");
  em_line_chart_set_y_label(c, "loss");
  int train = em_line_chart_add_series(c, "train", NULL);
  int eval = em_line_chart_add_series(c, "eval", NULL);
  enum { N = 1000000, CHUNK = 250 };
  GRand *r = g_rand_new_with_seed(5);
  double x[CHUNK], y[CHUNK];
  gint64 t0 = g_get_monotonic_time();
  for (int i = 0; i < N; i += CHUNK) {
    for (int k = 0; k < CHUNK; k++) {
      double s = i + k;
      x[k] = s;
      y[k] = 2.3 * exp(-s / 150000.0) + 0.1 + g_rand_double_range(r, 0, 0.25) *
             (1 + (g_rand_int_range(r, 0, 20000) == 0 ? 8 : 0));
    }
    em_line_chart_append(c, train, x, y, CHUNK);
  }
  double append_ms = (g_get_monotonic_time() - t0) / 1000.0;
  for (int i = 0; i < 50; i++) {
    x[0] = (i + 1) * 20000.0;
    y[0] = 2.0 * exp(-x[0] / 150000.0) + 0.2;
    em_line_chart_append(c, eval, x, y, 1);
  }
  g_assert_cmpint(em_line_chart_get_n_points(c, train), ==, N);
  g_assert_cmpint(em_line_chart_get_n_points(c, eval), ==, 50);
  em_line_chart_set_smoothing(c, 0.9);
  em_line_chart_set_note(c, "1,000,000 points");
  GtkWindow *win = ui_test_show(chart, 900, 480);
  double snap_ms, raster_ms;
  time_frame(chart, &snap_ms, &raster_ms);
  /* the same chart with 10,000 points: the frame should cost about the same */
  GtkWidget *small = em_line_chart_new();
  int ss = em_line_chart_add_series(EM_LINE_CHART(small), "train", NULL);
  for (int i = 0; i < 10000; i += CHUNK) {
    for (int k = 0; k < CHUNK; k++) { x[k] = i + k; y[k] = g_rand_double_range(r, 0, 1); }
    em_line_chart_append(EM_LINE_CHART(small), ss, x, y, CHUNK);
  }
  em_line_chart_set_smoothing(EM_LINE_CHART(small), 0.9);
  GtkWindow *win2 = ui_test_show(small, 900, 480);
  double small_snap, small_raster;
  time_frame(small, &small_snap, &small_raster);
  printf("# chart: append 1,000,000 points %.1f ms; one frame at 900x480 (cache rebuilt): "
         "snapshot %.2f ms + rasterise %.2f ms (10,000 points: %.2f + %.2f ms)\n",
         append_ms, snap_ms, raster_ms, small_snap, small_raster);
  /* an optimised build: well under a frame; sanitizers and -O0 are slower */
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__)
  const double slack = 1;
#else
  const double slack = 10;
#endif
  g_assert_cmpfloat(snap_ms, <, 50.0 * slack);
  g_assert_cmpfloat(append_ms, <, 3000.0 * slack);
  char *png = ui_test_screenshot(chart, "chart-million-points");
  g_assert_nonnull(png);
  g_free(png);
  /* zoom into a window and back */
  em_line_chart_set_view(c, 400000, 410000, 0.1, 1.5);
  double v0, v1, w0, w1;
  em_line_chart_get_view(c, &v0, &v1, &w0, &w1);
  g_assert_cmpfloat(v0, ==, 400000);
  g_assert_cmpfloat(v1, ==, 410000);
  ui_test_spin(50);
  png = ui_test_screenshot(chart, "chart-zoomed");
  g_free(png);
  em_line_chart_reset_view(c);
  em_line_chart_get_view(c, &v0, &v1, &w0, &w1);
  g_assert_cmpfloat(v0, ==, 0);
  g_assert_cmpfloat(v1, ==, N); /* the last eval point */
  gtk_window_destroy(win);
  gtk_window_destroy(win2);
  g_rand_free(r);
}

static void test_chart_log_axis(void) {
  GtkWidget *chart = em_line_chart_new();
  EmLineChart *c = EM_LINE_CHART(chart);
  em_line_chart_set_title(c, "Loss (log axis)");
  em_line_chart_set_x_label(c, "step");
  int a = em_line_chart_add_series(c, "train", NULL);
  int b = em_line_chart_add_series(c, "eval", NULL);
  enum { N = 5000 };
  double *x = g_new(double, N), *y = g_new(double, N);
  for (int i = 0; i < N; i++) { x[i] = i; y[i] = 100.0 * pow(1e-6, i / (double)(N - 1)) * (1 + 0.3 * sin(i * 0.7)); }
  em_line_chart_append(c, a, x, y, N);
  for (int i = 0; i < N; i++) y[i] = 10.0 * pow(1e-5, i / (double)(N - 1));
  y[0] = 0; /* not on a log axis: skipped, not a crash */
  em_line_chart_append(c, b, x, y, N);
  em_line_chart_set_log_y(c, TRUE);
  g_assert_true(em_line_chart_get_log_y(c));
  double x0, x1, y0, y1;
  em_line_chart_get_view(c, &x0, &x1, &y0, &y1);
  g_assert_cmpfloat(y0, >, 0);
  g_assert_cmpfloat(y1 / y0, >, 1e6); /* the view spans the decades */
  g_assert_cmpfloat(y0, <, 1e-4);
  g_assert_cmpfloat(y1, >, 100);
  GtkWindow *win = ui_test_show(chart, 700, 420);
  char *png = ui_test_screenshot(chart, "chart-log-axis");
  g_assert_nonnull(png);
  g_free(png);
  em_line_chart_set_log_y(c, FALSE);
  em_line_chart_get_view(c, &x0, &x1, &y0, &y1);
  g_assert_cmpfloat(y0, <, 0); /* linear: 0 is in, with a margin */
  gtk_window_destroy(win);
  g_free(x);
  g_free(y);
}

/* A loss that diverges (finite, then inf, then NaN): a line cannot show
 * those points, and the chart dropped them without a word, so a run that
 * blew up looked like one that stopped. The chart says what and where
 * (the note, and a mark on the top edge in the series' colour); series
 * with only finite values say nothing. */
static void test_chart_nonfinite(void) {
  GtkWidget *chart = em_line_chart_new();
  EmLineChart *c = EM_LINE_CHART(chart);
  em_line_chart_set_x_label(c, "step");
  int a = em_line_chart_add_series(c, "loss", NULL);
  int b = em_line_chart_add_series(c, "test_loss", NULL);
  double x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {2.3, 1.9, 1.5, INFINITY, NAN, NAN};
  em_line_chart_append(c, b, x, y, 3);
  g_assert_null(em_line_chart_get_nonfinite_note(c));
  em_line_chart_append(c, a, x, y, 6);
  char *note = em_line_chart_get_nonfinite_note(c);
  g_assert_cmpstr(note, ==, "loss: inf at step 4 (3 points not drawn)");
  g_free(note);
  double neg = -INFINITY, x7 = 7;
  em_line_chart_append(c, b, &x7, &neg, 1);
  note = em_line_chart_get_nonfinite_note(c);
  g_assert_cmpstr(note, ==, "loss: inf at step 4 (3 points not drawn); "
                            "test_loss: -inf at step 7 (1 point not drawn)");
  g_free(note);
  GtkWindow *win = ui_test_show(chart, 600, 360);
  char *png = ui_test_screenshot(chart, "chart-nonfinite");
  g_assert_nonnull(png);
  g_free(png);
  em_line_chart_clear(c);
  g_assert_null(em_line_chart_get_nonfinite_note(c));
  gtk_window_destroy(win);
}

/* A series between 0.3 and 0.30000000000000004 (two runs' lr, compared):
 * its ticks' step is below a double's precision there, and the loop that
 * drew them never ended (t += step left t as it was), the process growing
 * until memory ran out. It renders now, without ticks it cannot tell
 * apart; the count helper gives none where k * step is not exact. */
static void test_chart_ticks_below_precision(void) {
  double k0 = -1;
  g_assert_cmpint(em_chart_tick_count(0.3, 0.30000000000000004, 1e-18, &k0), ==, 0);
  g_assert_cmpint(em_chart_tick_count(0, 1, 0.25, &k0), ==, 5);
  g_assert_cmpfloat(k0, ==, 0);
  g_assert_cmpint(em_chart_tick_count(-1e300, 1e300, 1e-300, &k0), ==, 0);
  g_assert_cmpint(em_chart_tick_count(0, 1e9, 1, &k0), ==, EM_CHART_MAX_TICKS);
  g_assert_cmpint(em_chart_tick_count(0, 1, 0, &k0), ==, 0);
  GtkWidget *chart = em_line_chart_new();
  EmLineChart *c = EM_LINE_CHART(chart);
  em_line_chart_set_title(c, "lr of two runs");
  int a = em_line_chart_add_series(c, "0.3", NULL), b = em_line_chart_add_series(c, "0.3+", NULL);
  double x[2] = {0, 100}, ya[2] = {0.3, 0.3}, yb[2] = {0.30000000000000004, 0.30000000000000004};
  em_line_chart_append(c, a, x, ya, 2);
  em_line_chart_append(c, b, x, yb, 2);
  GtkWindow *win = ui_test_show(chart, 500, 300);
  char *png = ui_test_screenshot(chart, "chart-ticks-below-precision");
  g_assert_nonnull(png);
  g_free(png);
  gtk_window_destroy(win);
}

static void test_chart_smoothing(void) {
  GtkWidget *chart = em_line_chart_new();
  EmLineChart *c = EM_LINE_CHART(chart);
  em_line_chart_set_title(c, "Accuracy, smoothed 0.8");
  em_line_chart_set_x_label(c, "step");
  em_line_chart_set_y_label(c, "accuracy");
  GRand *r = g_rand_new_with_seed(9);
  const char *names[] = {"run 1 (mlp)", "run 2 (cnn)"};
  for (int s = 0; s < 2; s++) {
    int id = em_line_chart_add_series(c, names[s], NULL);
    for (int i = 0; i < 600; i++) {
      double x = i * 10, y = (0.85 + 0.05 * s) * (1 - exp(-i / (80.0 + 40 * s))) + g_rand_double_range(r, -0.06, 0.06);
      em_line_chart_append(c, id, &x, &y, 1);
    }
  }
  em_line_chart_set_smoothing(c, 0.8);
  g_assert_cmpfloat(em_line_chart_get_smoothing(c), ==, 0.8);
  GtkWindow *win = ui_test_show(chart, 700, 420);
  char *png = ui_test_screenshot(chart, "chart-smoothing");
  g_assert_nonnull(png);
  g_free(png);
  em_line_chart_clear(c);
  g_assert_cmpint(em_line_chart_get_n_series(c), ==, 0);
  ui_test_spin(30);
  gtk_window_destroy(win);
  g_rand_free(r);
}

/* The controller of type t on w (the chart installs one of each). */
static GObject *controller(GtkWidget *w, GType t) {
  GListModel *list = gtk_widget_observe_controllers(w);
  GObject *hit = NULL;
  for (guint i = 0; i < g_list_model_get_n_items(list) && !hit; i++) {
    GObject *c = g_list_model_get_item(list, i);
    if (G_TYPE_CHECK_INSTANCE_TYPE(c, t)) hit = c;
    g_object_unref(c);
  }
  g_object_unref(list);
  g_assert_nonnull(hit);
  return hit;
}

/* Hover, scroll zoom, drag pan and double-click reset, through the
 * chart's own event controllers (their signals emitted as GTK would). */
static void test_chart_interaction(void) {
  GtkWidget *chart = em_line_chart_new();
  EmLineChart *c = EM_LINE_CHART(chart);
  em_line_chart_set_title(c, "Hover read-out");
  em_line_chart_set_x_label(c, "step");
  int a = em_line_chart_add_series(c, "train loss", NULL);
  int b = em_line_chart_add_series(c, "test loss", NULL);
  for (int i = 0; i < 1000; i++) {
    double x = i, y = 2.0 * exp(-i / 300.0) + 0.1 * sin(i * 0.3), z = 2.1 * exp(-i / 280.0);
    em_line_chart_append(c, a, &x, &y, 1);
    if (i % 50 == 0) em_line_chart_append(c, b, &x, &z, 1);
  }
  em_line_chart_set_smoothing(c, 0.6);
  GtkWindow *win = ui_test_show(chart, 700, 400);
  double x0, x1, y0, y1;
  em_line_chart_get_view(c, &x0, &x1, &y0, &y1);
  g_assert_cmpfloat(x0, ==, 0);
  g_assert_cmpfloat(x1, ==, 999);

  GObject *motion = controller(chart, GTK_TYPE_EVENT_CONTROLLER_MOTION);
  g_signal_emit_by_name(motion, "motion", 380.0, 200.0);
  ui_test_spin(30);
  char *png = ui_test_screenshot(chart, "chart-hover");
  g_assert_nonnull(png);
  g_free(png);

  /* scroll up zooms x in around the pointer */
  gboolean handled = FALSE;
  g_signal_emit_by_name(controller(chart, GTK_TYPE_EVENT_CONTROLLER_SCROLL), "scroll", 0.0, -3.0, &handled);
  double z0, z1, w0, w1;
  em_line_chart_get_view(c, &z0, &z1, &w0, &w1);
  g_assert_cmpfloat(z1 - z0, <, (x1 - x0) * 0.8);
  g_assert_cmpfloat(z0, >, x0);
  g_assert_cmpfloat(z1, <, x1);
  g_assert_cmpfloat_with_epsilon(w1 - w0, y1 - y0, 1e-9); /* y untouched */

  /* dragging right by 100 px moves the view left */
  GObject *drag = controller(chart, GTK_TYPE_GESTURE_DRAG);
  g_signal_emit_by_name(drag, "drag-begin", 300.0, 200.0);
  g_signal_emit_by_name(drag, "drag-update", 100.0, 0.0);
  g_signal_emit_by_name(drag, "drag-end", 100.0, 0.0);
  double p0, p1, q0, q1;
  em_line_chart_get_view(c, &p0, &p1, &q0, &q1);
  g_assert_cmpfloat(p0, <, z0);
  g_assert_cmpfloat_with_epsilon(p1 - p0, z1 - z0, 1e-9 * (z1 - z0));

  /* a double click fits everything again */
  g_signal_emit_by_name(controller(chart, GTK_TYPE_GESTURE_CLICK), "pressed", 2, 300.0, 200.0);
  em_line_chart_get_view(c, &p0, &p1, &q0, &q1);
  g_assert_cmpfloat(p0, ==, x0);
  g_assert_cmpfloat(p1, ==, x1);
  g_signal_emit_by_name(motion, "leave");
  gtk_window_destroy(win);
}

/* Tick labels fit the fixed left gutter whatever the values (a diverged
 * run's 1e300 printed as "1e+291G", clipped on the left). */
/* Pixels of colour c (each channel within 40 of it) in the chart as drawn. */
static int count_colour(GtkWidget *chart, const guchar c[3]) {
  int w = gtk_widget_get_width(chart), h = gtk_widget_get_height(chart);
  GskRenderer *renderer = gtk_native_get_renderer(gtk_widget_get_native(chart));
  GtkSnapshot *s = gtk_snapshot_new();
  GTK_WIDGET_GET_CLASS(chart)->snapshot(chart, s);
  GskRenderNode *node = gtk_snapshot_free_to_node(s);
  GdkTexture *tex = gsk_renderer_render_texture(renderer, node, &GRAPHENE_RECT_INIT(0, 0, w, h));
  guchar *px = g_malloc((gsize)w * h * 4);
  gdk_texture_download(tex, px, (gsize)w * 4); /* cairo ARGB32: B, G, R, A in memory */
  int n = 0;
  for (int i = 0; i < w * h; i++) {
    const guchar *p = px + 4 * i;
    if (abs(p[2] - c[0]) < 40 && abs(p[1] - c[1]) < 40 && abs(p[0] - c[2]) < 40) n++;
  }
  g_free(px);
  g_object_unref(tex);
  gsk_render_node_unref(node);
  return n;
}

/* Two series on the same values (the Memory page's reserve and peak):
 * drawn solid, the last hides the first; the last dashed, both show. */
static void test_chart_dashed(void) {
  GtkWidget *chart = em_line_chart_new();
  GtkWindow *win = ui_test_show(chart, 500, 300);
  GdkRGBA green = {0, 1, 0, 1}, red = {1, 0, 0, 1};
  int sg = em_line_chart_add_series(EM_LINE_CHART(chart), "reserved", &green);
  int sr = em_line_chart_add_series(EM_LINE_CHART(chart), "peak", &red);
  double x[50], y[50];
  for (int i = 0; i < 50; i++) x[i] = i, y[i] = 3.0 + (i > 25);
  em_line_chart_append(EM_LINE_CHART(chart), sg, x, y, 50);
  em_line_chart_append(EM_LINE_CHART(chart), sr, x, y, 50);
  em_line_chart_set_title(EM_LINE_CHART(chart), NULL);
  ui_test_spin(50);
  const guchar g[3] = {0, 255, 0};
  int solid = count_colour(chart, g); /* the legend's green swatch only */
  g_assert_false(em_line_chart_get_series_dashed(EM_LINE_CHART(chart), sr));
  em_line_chart_set_series_dashed(EM_LINE_CHART(chart), sr, TRUE);
  g_assert_true(em_line_chart_get_series_dashed(EM_LINE_CHART(chart), sr));
  int dashed = count_colour(chart, g);
  g_assert_cmpint(dashed, >, solid + 100); /* the green line between the red dashes */
  gtk_window_destroy(win);
}

static void test_tick_labels(void) {
  char buf[64];
  const double vs[] = {0, 0.5, 1234.5, -98765, 3e9, 1e12, 1e300, -1.7e308, 2.5e-7, -1e-300,
                       9.96e20, INFINITY, -INFINITY, NAN};
  for (size_t i = 0; i < G_N_ELEMENTS(vs); i++) {
    em_line_chart_format_tick(vs[i], fabs(vs[i]) > 0 && isfinite(vs[i]) ? fabs(vs[i]) / 4 : 1,
                              buf, sizeof buf);
    g_assert_cmpuint(strlen(buf), <=, 8);
  }
  em_line_chart_format_tick(1e300, 1e299, buf, sizeof buf);
  g_assert_cmpstr(buf, ==, "1e300");
  em_line_chart_format_tick(-1.5e300, 1e299, buf, sizeof buf);
  g_assert_cmpstr(buf, ==, "-1.5e300");
  em_line_chart_format_tick(9.96e20, 1e20, buf, sizeof buf);
  g_assert_cmpstr(buf, ==, "1e21");
  em_line_chart_format_tick(25000, 5000, buf, sizeof buf);
  g_assert_cmpstr(buf, ==, "25k");
  em_line_chart_format_tick(0.25, 0.05, buf, sizeof buf);
  g_assert_cmpstr(buf, ==, "0.25");
}

int main(int argc, char **argv) {
  ui_test_init(&argc, &argv);
  g_test_add_func("/chart/series/minmax", test_series_minmax);
  g_test_add_func("/chart/series/decimate-exact", test_series_decimate);
  g_test_add_func("/chart/series/smoothing-ema", test_series_smoothing);
  g_test_add_func("/chart/widget/million-points", test_chart_million);
  g_test_add_func("/chart/widget/log-axis", test_chart_log_axis);
  g_test_add_func("/chart/widget/nonfinite", test_chart_nonfinite);
  g_test_add_func("/chart/widget/smoothing", test_chart_smoothing);
  g_test_add_func("/chart/widget/ticks-below-precision", test_chart_ticks_below_precision);
  g_test_add_func("/chart/widget/interaction", test_chart_interaction);
  g_test_add_func("/chart/widget/tick-labels", test_tick_labels);
  g_test_add_func("/chart/widget/dashed", test_chart_dashed);
  return g_test_run();
}
