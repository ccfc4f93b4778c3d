/* em-line-chart.c: see the header. The chart keeps its data in em_series
 * (every point, EMA, min/max pyramid); a frame decimates the visible range
 * to one min/max pair per pixel column and draws with Cairo into a render
 * node that is cached until the data, the size, the view or the style
 * changes. The hover read-out and the zoom box are drawn over the cached
 * node each frame. */
#include "em-line-chart.h"

#include <math.h>
#include <pango/pangocairo.h>

#include "em-series.h"

typedef struct {
  char *name;
  GdkRGBA color;
  em_series *s;
  gboolean dashed; /* drawn over what it may coincide with (a peak over its reserve) */
} EmChartSeries;

struct _EmLineChart {
  GtkWidget parent_instance;
  GPtrArray *series; /* EmChartSeries* */
  gboolean log_y;
  gboolean integer_x; /* x is a count (steps): no ticks between integers */
  double alpha;
  char *title, *x_label, *y_label, *note;

  /* The view: x in data units, y in axis units (log10 of the value on a
   * log axis). user_view: set by zoom/pan, else fitted to the data. */
  gboolean user_view;
  double vx0, vx1, vy0, vy1;

  GskRenderNode *cache;
  int cache_w, cache_h;
  em_series_column *cols; /* scratch, one per pixel column */
  int n_cols;

  gboolean hover;
  double hx, hy;
  /* drag: pan, or a zoom box */
  gboolean dragging, boxing;
  double drag_x, drag_y, drag_dx, drag_dy;
  double drag_vx0, drag_vx1, drag_vy0, drag_vy1;
  double pinch_vx0, pinch_vx1;
};

G_DEFINE_FINAL_TYPE(EmLineChart, em_line_chart, GTK_TYPE_WIDGET)

static const char *const palette[] = {"#3584e4", "#e66100", "#2ec27e", "#c061cb",
                                      "#e01b24", "#986a44", "#1c71d8", "#f5c211"};

enum { M_LEFT = 64, M_RIGHT = 16, M_TOP_TITLE = 30, M_TOP = 12, M_BOTTOM = 40 };

static void series_free(gpointer p) {
  EmChartSeries *cs = p;
  g_free(cs->name);
  em_series_free(cs->s);
  g_free(cs);
}

static void invalidate(EmLineChart *self) {
  g_clear_pointer(&self->cache, gsk_render_node_unref);
  gtk_widget_queue_draw(GTK_WIDGET(self));
}

/* ---- geometry ----------------------------------------------------------- */

typedef struct {
  double x, y, w, h; /* the plot area, widget pixels */
  double vx0, vx1, vy0, vy1;
} Frame;

/* A dashed line (6 on, 4 off), or solid again. */
static void set_dash(cairo_t *cr, gboolean dashed) {
  static const double d[2] = {6, 4};
  cairo_set_dash(cr, d, dashed ? 2 : 0, 0);
}

static double axis_y(const EmLineChart *self, double v) {
  if (!self->log_y) return v;
  return v > 0 ? log10(v) : NAN;
}

static double data_y(const EmLineChart *self, double a) {
  return self->log_y ? pow(10.0, a) : a;
}

/* The range that fits every point (5% margins on y). */
static void fit_view(EmLineChart *self, double *x0, double *x1, double *y0, double *y1) {
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (guint i = 0; i < self->series->len; i++) {
    EmChartSeries *cs = g_ptr_array_index(self->series, i);
    int64_t n = em_series_len(cs->s);
    if (n == 0) continue;
    const double *x = em_series_x(cs->s);
    xmin = fmin(xmin, x[0]);
    xmax = fmax(xmax, x[n - 1]);
    for (int c = 0; c < 2; c++) {
      if (c == 1 && self->alpha <= 0) continue;
      double mn, mx;
      if (!em_series_minmax(cs->s, c, 0, n, &mn, &mx)) continue;
      if (self->log_y) {
        if (mx <= 0) continue;
        if (mn <= 0) mn = mx * 1e-4; /* values <= 0 are not on a log axis */
      }
      ymin = fmin(ymin, axis_y(self, mn));
      ymax = fmax(ymax, axis_y(self, mx));
    }
  }
  if (!isfinite(xmin)) { xmin = 0; xmax = 1; }
  if (xmax <= xmin) { xmin -= 0.5; xmax += 0.5; }
  if (!isfinite(ymin)) { ymin = 0; ymax = 1; }
  if (ymax - ymin <= fmax(fabs(ymin), fabs(ymax)) * 1e-9) { /* constant, to rounding */
    double d = fabs(ymin) > 0 ? fabs(ymin) * 0.1 : 0.5;
    ymin -= d;
    ymax += d;
  }
  double pad = (ymax - ymin) * 0.05;
  *x0 = xmin;
  *x1 = xmax;
  *y0 = ymin - pad;
  *y1 = ymax + pad;
}

static void current_view(EmLineChart *self, double *x0, double *x1, double *y0, double *y1) {
  if (self->user_view) {
    *x0 = self->vx0; *x1 = self->vx1; *y0 = self->vy0; *y1 = self->vy1;
  } else {
    fit_view(self, x0, x1, y0, y1);
  }
}

static Frame frame_of(EmLineChart *self) {
  Frame f;
  int w = gtk_widget_get_width(GTK_WIDGET(self)), h = gtk_widget_get_height(GTK_WIDGET(self));
  double top = (self->title && *self->title) || self->series->len ? M_TOP_TITLE : M_TOP;
  f.x = M_LEFT;
  f.y = top;
  f.w = MAX(w - M_LEFT - M_RIGHT, 1);
  f.h = MAX(h - top - M_BOTTOM, 1);
  current_view(self, &f.vx0, &f.vx1, &f.vy0, &f.vy1);
  return f;
}

static double px_of(const Frame *f, double x) { return f->x + (x - f->vx0) / (f->vx1 - f->vx0) * f->w; }
static double py_of(const Frame *f, double a) { return f->y + f->h - (a - f->vy0) / (f->vy1 - f->vy0) * f->h; }
static double x_at(const Frame *f, double px) { return f->vx0 + (px - f->x) / f->w * (f->vx1 - f->vx0); }
static double a_at(const Frame *f, double py) { return f->vy0 + (f->y + f->h - py) / f->h * (f->vy1 - f->vy0); }

/* ---- drawing ------------------------------------------------------------ */

static void fg_color(EmLineChart *self, GdkRGBA *fg) {
G_GNUC_BEGIN_IGNORE_DEPRECATIONS
  gtk_style_context_get_color(gtk_widget_get_style_context(GTK_WIDGET(self)), fg);
G_GNUC_END_IGNORE_DEPRECATIONS
}

static void set_rgba(cairo_t *cr, const GdkRGBA *c, double alpha) {
  cairo_set_source_rgba(cr, c->red, c->green, c->blue, c->alpha * alpha);
}

/* Draws text with its anchor at (x, y): ax, ay in {0, 0.5, 1} of its size. */
static void draw_text(EmLineChart *self, cairo_t *cr, const char *text, double x, double y,
                      double ax, double ay, gboolean bold) {
  PangoLayout *layout = gtk_widget_create_pango_layout(GTK_WIDGET(self), NULL);
  if (bold) {
    char *m = g_markup_printf_escaped("<b>%s</b>", text);
    pango_layout_set_markup(layout, m, -1);
    g_free(m);
  } else {
    pango_layout_set_text(layout, text, -1);
  }
  int w, h;
  pango_layout_get_pixel_size(layout, &w, &h);
  cairo_move_to(cr, round(x - ax * w), round(y - ay * h));
  pango_cairo_show_layout(cr, layout);
  g_object_unref(layout);
}

static void text_size(EmLineChart *self, const char *text, int *w, int *h) {
  PangoLayout *layout = gtk_widget_create_pango_layout(GTK_WIDGET(self), text);
  pango_layout_get_pixel_size(layout, w, h);
  g_object_unref(layout);
}

/* A tick label short enough for the fixed left gutter (M_LEFT): at most
 * 8 characters, "-1.5e300" rather than "1e+291G" or 30 digits. */
void em_line_chart_format_tick(double v, double step, char *buf, size_t cap) {
  if (fabs(v) < fabs(step) * 1e-9) v = 0;
  double a = fabs(v);
  if (!isfinite(v)) g_snprintf(buf, cap, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
  else if (a >= 1e12 || (a != 0 && a < 1e-3)) {
    int e = (int)floor(log10(a));
    double m = v / pow(10.0, e);
    if (fabs(m) >= 9.95) { /* 9.96 rounds to "10": one decade up */
      m /= 10;
      e++;
    }
    g_snprintf(buf, cap, "%.2ge%d", m, e);
  } else if (a >= 1e9) g_snprintf(buf, cap, "%.4gG", v / 1e9);
  else if (a >= 1e6) g_snprintf(buf, cap, "%.4gM", v / 1e6);
  else if (a >= 1e4) g_snprintf(buf, cap, "%.4gk", v / 1e3);
  else g_snprintf(buf, cap, "%.6g", v);
}

/* A 1-2-5 step giving about `want` ticks over span. */
static double nice_step(double span, double want) {
  double raw = span / MAX(want, 1);
  double mag = pow(10.0, floor(log10(raw)));
  double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

int em_chart_tick_count(double v0, double v1, double step, double *k0) {
  if (!(step > 0) || !isfinite(v0) || !isfinite(v1)) return 0;
  double a = ceil(v0 / step), b = floor(v1 / step + 1e-9);
  if (!(b >= a) || fabs(a) > 0x1p52 || fabs(b) > 0x1p52) return 0;
  *k0 = a;
  return (int)MIN(b - a + 1, EM_CHART_MAX_TICKS);
}

static void draw_axes(EmLineChart *self, cairo_t *cr, const Frame *f, const GdkRGBA *fg) {
  char buf[64];
  cairo_set_line_width(cr, 1);
  /* x ticks */
  double xs = nice_step(f->vx1 - f->vx0, f->w / 90);
  if (self->integer_x && xs < 1) xs = 1;
  double k0 = 0;
  for (int i = 0, n = em_chart_tick_count(f->vx0, f->vx1, xs, &k0); i < n; i++) {
    double t = (k0 + i) * xs;
    double px = round(px_of(f, t)) + 0.5;
    set_rgba(cr, fg, 0.12);
    cairo_move_to(cr, px, f->y);
    cairo_line_to(cr, px, f->y + f->h);
    cairo_stroke(cr);
    em_line_chart_format_tick(t, xs, buf, sizeof buf);
    set_rgba(cr, fg, 0.75);
    int tw, th;
    text_size(self, buf, &tw, &th);
    double tx = MIN(px, f->x + f->w + M_RIGHT - tw / 2.0 - 1);
    draw_text(self, cr, buf, tx, f->y + f->h + 4, 0.5, 0, FALSE);
  }
  /* y ticks: decades on a log axis that spans at least two, else 1-2-5 */
  double span = f->vy1 - f->vy0;
  gboolean decades = self->log_y && span >= 2;
  double ys = decades ? ceil(span / MAX(f->h / 40, 1)) : nice_step(span, f->h / 40);
  for (int i = 0, n = em_chart_tick_count(f->vy0, f->vy1, ys, &k0); i < n; i++) {
    double t = (k0 + i) * ys;
    double py = round(py_of(f, t)) + 0.5;
    set_rgba(cr, fg, 0.12);
    cairo_move_to(cr, f->x, py);
    cairo_line_to(cr, f->x + f->w, py);
    cairo_stroke(cr);
    if (decades) {
      if (t >= -2 && t <= 3) g_snprintf(buf, sizeof buf, "%g", pow(10.0, t));
      else g_snprintf(buf, sizeof buf, "1e%d", (int)lround(t));
    } else if (self->log_y) {
      g_snprintf(buf, sizeof buf, "%.3g", pow(10.0, t));
    } else {
      em_line_chart_format_tick(t, ys, buf, sizeof buf);
    }
    set_rgba(cr, fg, 0.75);
    draw_text(self, cr, buf, f->x - 6, py, 1, 0.5, FALSE);
  }
  if (decades) { /* minor ticks 2..9 inside each decade */
    set_rgba(cr, fg, 0.35);
    double d0 = 0;
    for (int i = 0, n = em_chart_tick_count(floor(f->vy0), f->vy1, 1, &d0); i < n; i++)
      for (int m = 2; m < 10; m++) {
        double d = d0 + i;
        double a = d + log10(m);
        if (a < f->vy0 || a > f->vy1) continue;
        double py = round(py_of(f, a)) + 0.5;
        cairo_move_to(cr, f->x, py);
        cairo_line_to(cr, f->x + 4, py);
        cairo_stroke(cr);
      }
  }
  /* frame */
  set_rgba(cr, fg, 0.4);
  cairo_rectangle(cr, f->x + 0.5, f->y + 0.5, f->w - 1, f->h - 1);
  cairo_stroke(cr);
  /* labels and title */
  set_rgba(cr, fg, 0.85);
  if (self->x_label) draw_text(self, cr, self->x_label, f->x + f->w / 2, f->y + f->h + 22, 0.5, 0, FALSE);
  if (self->y_label) {
    cairo_save(cr);
    cairo_translate(cr, 4, f->y + f->h / 2);
    cairo_rotate(cr, -G_PI / 2);
    draw_text(self, cr, self->y_label, 0, 0, 0.5, 0, FALSE);
    cairo_restore(cr);
  }
  if (self->title && *self->title) draw_text(self, cr, self->title, f->x, 6, 0, 0, TRUE);
  if (self->note && *self->note) {
    set_rgba(cr, fg, 0.7);
    draw_text(self, cr, self->note, f->x + f->w, 6, 1, 0, FALSE);
  }
}

/* Many points per pixel: the min/max envelope of each column as one
 * filled band, widened by half the line width, each column also reaching
 * the previous column's last value so that the band has no gaps. One
 * polygon without self-intersections fills far faster than stroking a
 * path that doubles back on itself in every column. */
static void draw_band(EmLineChart *self, cairo_t *cr, const Frame *f, const double *y, int ncols) {
  double pad = cairo_get_line_width(cr) / 2;
  double *top = g_new(double, ncols), *bot = g_new(double, ncols);
  gboolean *ok = g_new0(gboolean, ncols);
  double bottom = f->y + f->h + 1;
  for (int j = 0; j < ncols; j++) {
    const em_series_column *col = &self->cols[j];
    if (col->i1 <= col->i0 || isnan(col->min)) continue;
    double lo = col->min, hi = col->max;
    if (j > 0 && ok[j - 1]) {
      double prev = y[self->cols[j - 1].i1 - 1];
      if (isfinite(prev)) { lo = fmin(lo, prev); hi = fmax(hi, prev); }
    }
    double ahi = axis_y(self, hi), alo = axis_y(self, lo);
    if (!isfinite(ahi)) continue; /* all <= 0 on a log axis */
    top[j] = py_of(f, ahi) - pad;
    bot[j] = isfinite(alo) ? py_of(f, alo) + pad : bottom;
    ok[j] = TRUE;
  }
  for (int j = 0; j < ncols;) {
    if (!ok[j]) { j++; continue; }
    int e = j;
    while (e + 1 < ncols && ok[e + 1]) e++;
    cairo_move_to(cr, f->x + j, top[j]);
    for (int k = j; k <= e; k++) {
      cairo_line_to(cr, f->x + k, top[k]);
      cairo_line_to(cr, f->x + k + 1, top[k]);
    }
    for (int k = e; k >= j; k--) {
      cairo_line_to(cr, f->x + k + 1, bot[k]);
      cairo_line_to(cr, f->x + k, bot[k]);
    }
    cairo_close_path(cr);
    j = e + 1;
  }
  cairo_fill(cr);
  g_free(top);
  g_free(bot);
  g_free(ok);
}

/* One curve: every point when the visible ones are few (a polyline),
 * else the band of per-pixel-column min/max (draw_band). */
static void draw_curve(EmLineChart *self, cairo_t *cr, const Frame *f, em_series *s, em_curve c) {
  int64_t n = em_series_len(s);
  if (n == 0) return;
  const double *x = em_series_x(s), *y = em_series_y(s, c);
  int64_t i0, i1;
  em_series_range(s, f->vx0, f->vx1, &i0, &i1);
  int ncols = (int)f->w;
  gboolean pen = FALSE;
  int seg = 0;
  double lx = 0, ly = 0;
  /* Stroked in batches of short paths: one long self-overlapping path
   * makes Cairo's stroker slow (its cost grows with the intersections). */
#define PLOT(px, v)                                         \
  do {                                                      \
    double a_ = axis_y(self, (v));                          \
    if (!isfinite(a_)) { pen = FALSE; break; }              \
    double py_ = py_of(f, a_);                              \
    if (pen) cairo_line_to(cr, (px), py_);                  \
    else cairo_move_to(cr, (px), py_);                      \
    lx = (px); ly = py_;                                    \
    pen = TRUE;                                             \
    if (++seg == 16) {                                      \
      cairo_stroke(cr);                                     \
      cairo_move_to(cr, lx, ly);                            \
      seg = 0;                                              \
    }                                                       \
  } while (0)
  if (i1 - i0 <= 2 * (int64_t)ncols) {
    int64_t a = i0 > 0 ? i0 - 1 : 0, b = i1 < n ? i1 + 1 : n;
    for (int64_t i = a; i < b; i++) PLOT(px_of(f, x[i]), y[i]);
    if (b - a == 1) { /* a lone point: a dot */
      double a_ = axis_y(self, y[a]);
      if (isfinite(a_)) cairo_arc(cr, px_of(f, x[a]), py_of(f, a_), 2, 0, 2 * G_PI);
    }
  } else {
    if (self->n_cols < ncols) {
      self->cols = g_renew(em_series_column, self->cols, ncols);
      self->n_cols = ncols;
    }
    em_series_decimate(s, c, f->vx0, f->vx1, ncols, self->cols);
    draw_band(self, cr, f, y, ncols);
    return;
  }
#undef PLOT
  cairo_stroke(cr);
}

/* The legend: in the header row after the title when it fits there (it
 * then never covers a curve), else as a box in the plot's top-left. */
static void draw_legend(EmLineChart *self, cairo_t *cr, const Frame *f, const GdkRGBA *fg) {
  double x = f->x + 10, y = f->y + 8;
  int maxw = 0, lh = 16, total = 0;
  for (guint i = 0; i < self->series->len; i++) {
    EmChartSeries *cs = g_ptr_array_index(self->series, i);
    int w, h;
    text_size(self, cs->name, &w, &h);
    maxw = MAX(maxw, w);
    lh = MAX(lh, h);
    total += 26 + w + 16;
  }
  if (self->series->len == 0) return;
  int tw = 0, th = 0, nw = 0;
  if (self->title && *self->title) {
    char *m = g_markup_printf_escaped("<b>%s</b>", self->title);
    PangoLayout *l = gtk_widget_create_pango_layout(GTK_WIDGET(self), NULL);
    pango_layout_set_markup(l, m, -1);
    pango_layout_get_pixel_size(l, &tw, &th);
    g_object_unref(l);
    g_free(m);
    tw += 24;
  }
  if (self->note && *self->note) text_size(self, self->note, &nw, &th);
  if (f->x + tw + total + nw + 16 <= f->x + f->w) {
    double hx = f->x + tw, hy = 6;
    for (guint i = 0; i < self->series->len; i++) {
      EmChartSeries *cs = g_ptr_array_index(self->series, i);
      int w, h;
      text_size(self, cs->name, &w, &h);
      set_rgba(cr, &cs->color, 1);
      cairo_set_line_width(cr, 3);
      set_dash(cr, cs->dashed);
      cairo_move_to(cr, hx, hy + lh / 2.0);
      cairo_line_to(cr, hx + 20, hy + lh / 2.0);
      cairo_stroke(cr);
      set_dash(cr, FALSE);
      set_rgba(cr, fg, 0.9);
      draw_text(self, cr, cs->name, hx + 26, hy, 0, 0, FALSE);
      hx += 26 + w + 16;
    }
    return;
  }
  GdkRGBA bg = {1 - fg->red, 1 - fg->green, 1 - fg->blue, 0.75};
  set_rgba(cr, &bg, 1);
  cairo_rectangle(cr, x - 4, y - 2, maxw + 34, lh * self->series->len + 4);
  cairo_fill(cr);
  for (guint i = 0; i < self->series->len; i++) {
    EmChartSeries *cs = g_ptr_array_index(self->series, i);
    set_rgba(cr, &cs->color, 1);
    cairo_set_line_width(cr, 3);
    set_dash(cr, cs->dashed);
    cairo_move_to(cr, x, y + lh * (i + 0.5));
    cairo_line_to(cr, x + 20, y + lh * (i + 0.5));
    cairo_stroke(cr);
    set_dash(cr, FALSE);
    set_rgba(cr, fg, 0.9);
    draw_text(self, cr, cs->name, x + 26, y + lh * i, 0, 0, FALSE);
  }
}

/* Values a line cannot show (a loss that became NaN or infinite), one
 * clause per series that has them: "loss: nan at step 412 (3 points not
 * drawn)". NULL when every value is finite. */
static char *nonfinite_note(EmLineChart *self) {
  GString *out = NULL;
  for (guint i = 0; i < self->series->len; i++) {
    EmChartSeries *cs = g_ptr_array_index(self->series, i);
    int64_t n = em_series_n_nonfinite(cs->s), at = em_series_first_nonfinite(cs->s);
    if (n == 0 || at < 0) continue;
    double v = em_series_y(cs->s, EM_CURVE_RAW)[at];
    if (!out) out = g_string_new(NULL);
    char x[G_ASCII_DTOSTR_BUF_SIZE];
    g_ascii_formatd(x, sizeof x, "%.6g", em_series_x(cs->s)[at]);
    g_string_append_printf(out, "%s%s: %s at %s %s (%" G_GINT64_FORMAT " point%s not drawn)",
                           out->len ? "; " : "", cs->name,
                           isnan(v) ? "nan" : v > 0 ? "inf" : "-inf",
                           self->x_label ? self->x_label : "x", x, n, n == 1 ? "" : "s");
  }
  return out ? g_string_free(out, FALSE) : NULL;
}

/* The note at the plot's bottom left, and a mark on its top edge at the
 * first such point of each series (in the series' colour) when in view. */
static void draw_nonfinite(EmLineChart *self, cairo_t *cr, const Frame *f) {
  char *note = nonfinite_note(self);
  if (!note) return;
  for (guint i = 0; i < self->series->len; i++) {
    EmChartSeries *cs = g_ptr_array_index(self->series, i);
    int64_t at = em_series_first_nonfinite(cs->s);
    if (at < 0) continue;
    double x = em_series_x(cs->s)[at];
    if (!(x >= f->vx0 && x <= f->vx1)) continue;
    double px = px_of(f, x);
    set_rgba(cr, &cs->color, 1);
    cairo_move_to(cr, px - 5, f->y + 1);
    cairo_line_to(cr, px + 5, f->y + 1);
    cairo_line_to(cr, px, f->y + 9);
    cairo_close_path(cr);
    cairo_fill(cr);
  }
  /* wrapped to the plot's width, on a light band, at its bottom */
  PangoLayout *layout = gtk_widget_create_pango_layout(GTK_WIDGET(self), note);
  pango_layout_set_width(layout, (int)MAX(f->w - 12, 40) * PANGO_SCALE);
  pango_layout_set_wrap(layout, PANGO_WRAP_WORD_CHAR);
  int w, h;
  pango_layout_get_pixel_size(layout, &w, &h);
  cairo_set_source_rgba(cr, 1, 1, 1, 0.8);
  cairo_rectangle(cr, f->x + 2, f->y + f->h - h - 4, w + 8, h + 2);
  cairo_fill(cr);
  cairo_set_source_rgba(cr, 0.75, 0.11, 0.16, 1); /* #c01c28 */
  cairo_move_to(cr, round(f->x + 6), round(f->y + f->h - 3 - h));
  pango_cairo_show_layout(cr, layout);
  g_object_unref(layout);
  g_free(note);
}

static GskRenderNode *render_static(EmLineChart *self, int w, int h) {
  Frame f = frame_of(self);
  GdkRGBA fg;
  fg_color(self, &fg);
  GskRenderNode *node = gsk_cairo_node_new(&GRAPHENE_RECT_INIT(0, 0, w, h));
  cairo_t *cr = gsk_cairo_node_get_draw_context(node);
  draw_axes(self, cr, &f, &fg);
  cairo_save(cr);
  cairo_rectangle(cr, f.x, f.y, f.w, f.h);
  cairo_clip(cr);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  for (guint i = 0; i < self->series->len; i++) {
    EmChartSeries *cs = g_ptr_array_index(self->series, i);
    set_dash(cr, cs->dashed);
    if (self->alpha > 0) {
      cairo_set_line_width(cr, 1);
      set_rgba(cr, &cs->color, 0.3);
      draw_curve(self, cr, &f, cs->s, EM_CURVE_RAW);
      cairo_set_line_width(cr, 2);
      set_rgba(cr, &cs->color, 1);
      draw_curve(self, cr, &f, cs->s, EM_CURVE_SMOOTH);
    } else {
      cairo_set_line_width(cr, 1.5);
      set_rgba(cr, &cs->color, 1);
      draw_curve(self, cr, &f, cs->s, EM_CURVE_RAW);
    }
    set_dash(cr, FALSE);
  }
  draw_nonfinite(self, cr, &f);
  cairo_restore(cr);
  draw_legend(self, cr, &f, &fg);
  cairo_destroy(cr);
  return node;
}

static void draw_hover(EmLineChart *self, cairo_t *cr, const Frame *f, const GdkRGBA *fg) {
  if (self->hx < f->x || self->hx > f->x + f->w || self->hy < f->y || self->hy > f->y + f->h) return;
  double xv = x_at(f, self->hx);
  GString *text = g_string_new(NULL);
  int64_t shown_x = 0;
  gboolean any = FALSE;
  cairo_set_line_width(cr, 1);
  set_rgba(cr, fg, 0.4);
  cairo_move_to(cr, round(self->hx) + 0.5, f->y);
  cairo_line_to(cr, round(self->hx) + 0.5, f->y + f->h);
  cairo_stroke(cr);
  for (guint i = 0; i < self->series->len; i++) {
    EmChartSeries *cs = g_ptr_array_index(self->series, i);
    int64_t k = em_series_nearest(cs->s, xv);
    if (k < 0) continue;
    double x = em_series_x(cs->s)[k], y = em_series_y(cs->s, EM_CURVE_RAW)[k];
    double ys = em_series_y(cs->s, EM_CURVE_SMOOTH)[k];
    double shown = self->alpha > 0 ? ys : y;
    double a = axis_y(self, shown);
    if (isfinite(a)) {
      set_rgba(cr, &cs->color, 1);
      cairo_arc(cr, px_of(f, x), py_of(f, a), 3.5, 0, 2 * G_PI);
      cairo_fill(cr);
    }
    if (!any || (int64_t)x != shown_x) {
      g_string_append_printf(text, "%sx %.6g\n", any ? "" : "", x);
      shown_x = (int64_t)x;
    }
    if (self->alpha > 0)
      g_string_append_printf(text, "%s: %.5g (smoothed %.5g)\n", cs->name, y, ys);
    else
      g_string_append_printf(text, "%s: %.5g\n", cs->name, y);
    any = TRUE;
  }
  if (any) {
    if (text->len && text->str[text->len - 1] == '\n') g_string_truncate(text, text->len - 1);
    PangoLayout *layout = gtk_widget_create_pango_layout(GTK_WIDGET(self), text->str);
    int w, h;
    pango_layout_get_pixel_size(layout, &w, &h);
    double bx = self->hx + 12, by = self->hy + 12;
    if (bx + w + 8 > f->x + f->w) bx = self->hx - w - 20;
    if (by + h + 8 > f->y + f->h) by = self->hy - h - 20;
    GdkRGBA bg = {1 - fg->red, 1 - fg->green, 1 - fg->blue, 0.9};
    set_rgba(cr, &bg, 1);
    cairo_rectangle(cr, bx, by, w + 8, h + 6);
    cairo_fill_preserve(cr);
    set_rgba(cr, fg, 0.5);
    cairo_stroke(cr);
    set_rgba(cr, fg, 1);
    cairo_move_to(cr, bx + 4, by + 3);
    pango_cairo_show_layout(cr, layout);
    g_object_unref(layout);
  }
  g_string_free(text, TRUE);
}

static void em_line_chart_snapshot(GtkWidget *widget, GtkSnapshot *snapshot) {
  EmLineChart *self = EM_LINE_CHART(widget);
  int w = gtk_widget_get_width(widget), h = gtk_widget_get_height(widget);
  if (w <= 0 || h <= 0) return;
  if (!self->cache || self->cache_w != w || self->cache_h != h) {
    g_clear_pointer(&self->cache, gsk_render_node_unref);
    self->cache = render_static(self, w, h);
    self->cache_w = w;
    self->cache_h = h;
  }
  gtk_snapshot_append_node(snapshot, self->cache);
  if (!self->hover && !self->boxing) return;
  cairo_t *cr = gtk_snapshot_append_cairo(snapshot, &GRAPHENE_RECT_INIT(0, 0, w, h));
  Frame f = frame_of(self);
  GdkRGBA fg;
  fg_color(self, &fg);
  if (self->boxing) {
    GdkRGBA sel = {0.21, 0.52, 0.89, 1};
    cairo_rectangle(cr, self->drag_x, self->drag_y, self->drag_dx, self->drag_dy);
    set_rgba(cr, &sel, 0.2);
    cairo_fill_preserve(cr);
    set_rgba(cr, &sel, 0.9);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
  } else if (self->hover) {
    draw_hover(self, cr, &f, &fg);
  }
  cairo_destroy(cr);
}

static void em_line_chart_measure(GtkWidget *widget, GtkOrientation o, int for_size, int *min,
                                  int *nat, int *min_base, int *nat_base) {
  (void)widget;
  (void)for_size;
  *min = o == GTK_ORIENTATION_HORIZONTAL ? 200 : 140;
  *nat = o == GTK_ORIENTATION_HORIZONTAL ? 480 : 280;
  *min_base = *nat_base = -1;
}

static void em_line_chart_size_allocate(GtkWidget *widget, int w, int h, int baseline) {
  (void)w;
  (void)h;
  (void)baseline;
  invalidate(EM_LINE_CHART(widget));
}

/* The chart's stylesheet (chart.css in this folder's GResource), once per
 * display, when the application registered the resource. */
static void em_line_chart_root(GtkWidget *widget) {
  GTK_WIDGET_CLASS(em_line_chart_parent_class)->root(widget);
  static const char path[] = "/org/ember/Workbench/chart/chart.css";
  GdkDisplay *display = gtk_widget_get_display(widget);
  if (g_object_get_data(G_OBJECT(display), "em-line-chart-css")) return;
  if (!g_resources_get_info(path, G_RESOURCE_LOOKUP_FLAGS_NONE, NULL, NULL, NULL)) return;
  GtkCssProvider *css = gtk_css_provider_new();
  gtk_css_provider_load_from_resource(css, path);
  gtk_style_context_add_provider_for_display(display, GTK_STYLE_PROVIDER(css),
                                             GTK_STYLE_PROVIDER_PRIORITY_APPLICATION);
  g_object_set_data_full(G_OBJECT(display), "em-line-chart-css", css, g_object_unref);
}

static void em_line_chart_css_changed(GtkWidget *widget, GtkCssStyleChange *change) {
  GTK_WIDGET_CLASS(em_line_chart_parent_class)->css_changed(widget, change);
  invalidate(EM_LINE_CHART(widget));
}

/* ---- interaction -------------------------------------------------------- */

static void set_view_axis(EmLineChart *self, double x0, double x1, double a0, double a1) {
  if (!(x1 > x0) || !(a1 > a0) || !isfinite(x0 + x1 + a0 + a1)) return;
  self->user_view = TRUE;
  self->vx0 = x0; self->vx1 = x1; self->vy0 = a0; self->vy1 = a1;
  invalidate(self);
}

static void zoom_at(EmLineChart *self, double px, double py, double fx, double fy) {
  Frame f = frame_of(self);
  double cx = x_at(&f, px), ca = a_at(&f, py);
  set_view_axis(self, cx - (cx - f.vx0) * fx, cx + (f.vx1 - cx) * fx, ca - (ca - f.vy0) * fy,
                ca + (f.vy1 - ca) * fy);
}

static gboolean on_scroll(GtkEventControllerScroll *c, double dx, double dy, gpointer data) {
  EmLineChart *self = data;
  (void)dx;
  GdkModifierType mods = gtk_event_controller_get_current_event_state(GTK_EVENT_CONTROLLER(c));
  double k = pow(1.15, dy);
  if (mods & GDK_CONTROL_MASK) zoom_at(self, self->hx, self->hy, 1, k);
  else zoom_at(self, self->hx, self->hy, k, 1);
  return TRUE;
}

static void on_motion(GtkEventControllerMotion *c, double x, double y, gpointer data) {
  (void)c;
  EmLineChart *self = data;
  self->hover = TRUE;
  self->hx = x;
  self->hy = y;
  gtk_widget_queue_draw(GTK_WIDGET(self));
}

static void on_leave(GtkEventControllerMotion *c, gpointer data) {
  (void)c;
  EmLineChart *self = data;
  self->hover = FALSE;
  gtk_widget_queue_draw(GTK_WIDGET(self));
}

static void on_drag_begin(GtkGestureDrag *g, double x, double y, gpointer data) {
  EmLineChart *self = data;
  GdkModifierType mods = gtk_event_controller_get_current_event_state(GTK_EVENT_CONTROLLER(g));
  guint button = gtk_gesture_single_get_current_button(GTK_GESTURE_SINGLE(g));
  Frame f = frame_of(self);
  self->dragging = TRUE;
  self->boxing = (mods & GDK_SHIFT_MASK) || button == GDK_BUTTON_SECONDARY;
  self->drag_x = x;
  self->drag_y = y;
  self->drag_dx = self->drag_dy = 0;
  self->drag_vx0 = f.vx0; self->drag_vx1 = f.vx1; self->drag_vy0 = f.vy0; self->drag_vy1 = f.vy1;
}

static void on_drag_update(GtkGestureDrag *g, double dx, double dy, gpointer data) {
  (void)g;
  EmLineChart *self = data;
  if (!self->dragging) return;
  self->drag_dx = dx;
  self->drag_dy = dy;
  if (self->boxing) {
    gtk_widget_queue_draw(GTK_WIDGET(self));
    return;
  }
  Frame f = frame_of(self);
  double sx = (self->drag_vx1 - self->drag_vx0) / f.w, sy = (self->drag_vy1 - self->drag_vy0) / f.h;
  set_view_axis(self, self->drag_vx0 - dx * sx, self->drag_vx1 - dx * sx, self->drag_vy0 + dy * sy,
                self->drag_vy1 + dy * sy);
}

static void on_drag_end(GtkGestureDrag *g, double dx, double dy, gpointer data) {
  (void)g;
  EmLineChart *self = data;
  if (self->boxing && fabs(dx) > 4 && fabs(dy) > 4) {
    Frame f = frame_of(self);
    double xa = x_at(&f, self->drag_x), xb = x_at(&f, self->drag_x + dx);
    double aa = a_at(&f, self->drag_y), ab = a_at(&f, self->drag_y + dy);
    set_view_axis(self, fmin(xa, xb), fmax(xa, xb), fmin(aa, ab), fmax(aa, ab));
  }
  self->dragging = self->boxing = FALSE;
  gtk_widget_queue_draw(GTK_WIDGET(self));
}

static void on_pinch_begin(GtkGesture *g, GdkEventSequence *seq, gpointer data) {
  (void)g;
  (void)seq;
  EmLineChart *self = data;
  Frame f = frame_of(self);
  self->pinch_vx0 = f.vx0;
  self->pinch_vx1 = f.vx1;
}

static void on_pinch(GtkGestureZoom *g, double scale, gpointer data) {
  EmLineChart *self = data;
  double cx, cy;
  if (scale <= 0 || !gtk_gesture_get_bounding_box_center(GTK_GESTURE(g), &cx, &cy)) return;
  Frame f = frame_of(self);
  double span = (self->pinch_vx1 - self->pinch_vx0) / scale;
  double c = x_at(&f, cx), t = (cx - f.x) / f.w;
  set_view_axis(self, c - t * span, c + (1 - t) * span, f.vy0, f.vy1);
}

static void on_click(GtkGestureClick *g, int n_press, double x, double y, gpointer data) {
  (void)g;
  (void)x;
  (void)y;
  if (n_press == 2) em_line_chart_reset_view(data);
}

/* ---- GObject ------------------------------------------------------------ */

static void em_line_chart_finalize(GObject *object) {
  EmLineChart *self = EM_LINE_CHART(object);
  g_ptr_array_unref(self->series);
  g_clear_pointer(&self->cache, gsk_render_node_unref);
  g_free(self->cols);
  g_free(self->title);
  g_free(self->x_label);
  g_free(self->y_label);
  g_free(self->note);
  G_OBJECT_CLASS(em_line_chart_parent_class)->finalize(object);
}

static void em_line_chart_class_init(EmLineChartClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  oc->finalize = em_line_chart_finalize;
  wc->snapshot = em_line_chart_snapshot;
  wc->measure = em_line_chart_measure;
  wc->size_allocate = em_line_chart_size_allocate;
  wc->css_changed = em_line_chart_css_changed;
  wc->root = em_line_chart_root;
  gtk_widget_class_set_css_name(wc, "linechart");
  gtk_widget_class_set_accessible_role(wc, GTK_ACCESSIBLE_ROLE_IMG);
}

static void em_line_chart_init(EmLineChart *self) {
  GtkWidget *w = GTK_WIDGET(self);
  self->series = g_ptr_array_new_with_free_func(series_free);
  gtk_widget_set_focusable(w, TRUE);
  gtk_widget_set_hexpand(w, TRUE);
  gtk_widget_set_vexpand(w, TRUE);

  GtkEventController *scroll = gtk_event_controller_scroll_new(GTK_EVENT_CONTROLLER_SCROLL_VERTICAL);
  g_signal_connect(scroll, "scroll", G_CALLBACK(on_scroll), self);
  gtk_widget_add_controller(w, scroll);

  GtkEventController *motion = gtk_event_controller_motion_new();
  g_signal_connect(motion, "enter", G_CALLBACK(on_motion), self);
  g_signal_connect(motion, "motion", G_CALLBACK(on_motion), self);
  g_signal_connect(motion, "leave", G_CALLBACK(on_leave), self);
  gtk_widget_add_controller(w, motion);

  GtkGesture *drag = gtk_gesture_drag_new();
  gtk_gesture_single_set_button(GTK_GESTURE_SINGLE(drag), 0);
  g_signal_connect(drag, "drag-begin", G_CALLBACK(on_drag_begin), self);
  g_signal_connect(drag, "drag-update", G_CALLBACK(on_drag_update), self);
  g_signal_connect(drag, "drag-end", G_CALLBACK(on_drag_end), self);
  gtk_widget_add_controller(w, GTK_EVENT_CONTROLLER(drag));

  GtkGesture *pinch = gtk_gesture_zoom_new();
  g_signal_connect(pinch, "begin", G_CALLBACK(on_pinch_begin), self);
  g_signal_connect(pinch, "scale-changed", G_CALLBACK(on_pinch), self);
  gtk_widget_add_controller(w, GTK_EVENT_CONTROLLER(pinch));

  GtkGesture *click = gtk_gesture_click_new();
  g_signal_connect(click, "pressed", G_CALLBACK(on_click), self);
  gtk_widget_add_controller(w, GTK_EVENT_CONTROLLER(click));
}

/* ---- API ---------------------------------------------------------------- */

GtkWidget *em_line_chart_new(void) {
  return g_object_new(EM_TYPE_LINE_CHART, NULL);
}

int em_line_chart_add_series(EmLineChart *self, const char *name, const GdkRGBA *color) {
  g_return_val_if_fail(EM_IS_LINE_CHART(self), -1);
  EmChartSeries *cs = g_new0(EmChartSeries, 1);
  cs->name = g_strdup(name ? name : "");
  if (color) cs->color = *color;
  else gdk_rgba_parse(&cs->color, palette[self->series->len % G_N_ELEMENTS(palette)]);
  cs->s = em_series_new();
  em_series_set_smoothing(cs->s, self->alpha);
  g_ptr_array_add(self->series, cs);
  invalidate(self);
  return (int)self->series->len - 1;
}

int em_line_chart_get_n_series(EmLineChart *self) {
  g_return_val_if_fail(EM_IS_LINE_CHART(self), 0);
  return (int)self->series->len;
}

void em_line_chart_append(EmLineChart *self, int series, const double *x, const double *y, int n) {
  g_return_if_fail(EM_IS_LINE_CHART(self));
  g_return_if_fail(series >= 0 && (guint)series < self->series->len);
  if (n <= 0) return;
  EmChartSeries *cs = g_ptr_array_index(self->series, series);
  em_series_append(cs->s, x, y, n);
  invalidate(self);
}

gint64 em_line_chart_get_n_points(EmLineChart *self, int series) {
  g_return_val_if_fail(EM_IS_LINE_CHART(self), -1);
  if (series < 0 || (guint)series >= self->series->len) return -1;
  EmChartSeries *cs = g_ptr_array_index(self->series, series);
  return em_series_len(cs->s);
}

char *em_line_chart_get_nonfinite_note(EmLineChart *self) {
  g_return_val_if_fail(EM_IS_LINE_CHART(self), NULL);
  return nonfinite_note(self);
}

void em_line_chart_clear(EmLineChart *self) {
  g_return_if_fail(EM_IS_LINE_CHART(self));
  g_ptr_array_set_size(self->series, 0);
  self->user_view = FALSE;
  invalidate(self);
}

void em_line_chart_set_log_y(EmLineChart *self, gboolean log_y) {
  g_return_if_fail(EM_IS_LINE_CHART(self));
  if (!!log_y == self->log_y) return;
  self->log_y = !!log_y;
  self->user_view = FALSE;
  invalidate(self);
}

void em_line_chart_set_integer_x(EmLineChart *self, gboolean integer_x) {
  g_return_if_fail(EM_IS_LINE_CHART(self));
  self->integer_x = integer_x;
  g_clear_pointer(&self->cache, gsk_render_node_unref);
  gtk_widget_queue_draw(GTK_WIDGET(self));
}

gboolean em_line_chart_get_log_y(EmLineChart *self) {
  g_return_val_if_fail(EM_IS_LINE_CHART(self), FALSE);
  return self->log_y;
}

void em_line_chart_set_smoothing(EmLineChart *self, double alpha) {
  g_return_if_fail(EM_IS_LINE_CHART(self));
  alpha = CLAMP(alpha, 0.0, 0.999);
  if (alpha == self->alpha) return;
  self->alpha = alpha;
  for (guint i = 0; i < self->series->len; i++) {
    EmChartSeries *cs = g_ptr_array_index(self->series, i);
    em_series_set_smoothing(cs->s, alpha);
  }
  invalidate(self);
}

double em_line_chart_get_smoothing(EmLineChart *self) {
  g_return_val_if_fail(EM_IS_LINE_CHART(self), 0);
  return self->alpha;
}

static void set_str(EmLineChart *self, char **field, const char *v) {
  if (g_strcmp0(*field, v) == 0) return;
  g_free(*field);
  *field = g_strdup(v);
  invalidate(self);
}

void em_line_chart_set_title(EmLineChart *self, const char *title) {
  g_return_if_fail(EM_IS_LINE_CHART(self));
  set_str(self, &self->title, title);
}

const char *em_line_chart_get_title(EmLineChart *self) {
  g_return_val_if_fail(EM_IS_LINE_CHART(self), NULL);
  return self->title;
}

void em_line_chart_set_x_label(EmLineChart *self, const char *label) {
  g_return_if_fail(EM_IS_LINE_CHART(self));
  set_str(self, &self->x_label, label);
}

void em_line_chart_set_y_label(EmLineChart *self, const char *label) {
  g_return_if_fail(EM_IS_LINE_CHART(self));
  set_str(self, &self->y_label, label);
}

void em_line_chart_set_note(EmLineChart *self, const char *note) {
  g_return_if_fail(EM_IS_LINE_CHART(self));
  set_str(self, &self->note, note);
}

void em_line_chart_reset_view(EmLineChart *self) {
  g_return_if_fail(EM_IS_LINE_CHART(self));
  self->user_view = FALSE;
  invalidate(self);
}

void em_line_chart_get_view(EmLineChart *self, double *x0, double *x1, double *y0, double *y1) {
  g_return_if_fail(EM_IS_LINE_CHART(self));
  double a, b, c, d;
  current_view(self, &a, &b, &c, &d);
  if (x0) *x0 = a;
  if (x1) *x1 = b;
  if (y0) *y0 = data_y(self, c);
  if (y1) *y1 = data_y(self, d);
}

void em_line_chart_set_view(EmLineChart *self, double x0, double x1, double y0, double y1) {
  g_return_if_fail(EM_IS_LINE_CHART(self));
  set_view_axis(self, x0, x1, axis_y(self, y0), axis_y(self, y1));
}

void em_line_chart_set_series_dashed(EmLineChart *self, int series, gboolean dashed) {
  g_return_if_fail(EM_IS_LINE_CHART(self));
  if (series < 0 || (guint)series >= self->series->len) return;
  EmChartSeries *cs = g_ptr_array_index(self->series, series);
  cs->dashed = dashed;
  invalidate(self);
}

gboolean em_line_chart_get_series_dashed(EmLineChart *self, int series) {
  g_return_val_if_fail(EM_IS_LINE_CHART(self), FALSE);
  if (series < 0 || (guint)series >= self->series->len) return FALSE;
  return ((EmChartSeries *)g_ptr_array_index(self->series, series))->dashed;
}
