/* em-cost-scatter.c: see the header. Few points (one per run): drawn
 * directly in snapshot(). */
#include "em-cost-scatter.h"
#include "em-line-chart.h"

#include <math.h>
#include <pango/pangocairo.h>

struct _EmCostScatter {
  GtkWidget parent_instance;
  double *x, *y;
  char **labels;
  int n;
  char *x_title, *x_unit, *y_title;
};

G_DEFINE_FINAL_TYPE(EmCostScatter, em_cost_scatter, GTK_TYPE_WIDGET)

static const char *const palette[] = {"#3584e4", "#e66100", "#2ec27e", "#c061cb",
                                      "#e01b24", "#986a44", "#1c71d8", "#f5c211"};

static void text_at(GtkWidget *w, cairo_t *cr, const char *t, double x, double y, double ax,
                    double ay) {
  PangoLayout *l = gtk_widget_create_pango_layout(w, t);
  int tw, th;
  pango_layout_get_pixel_size(l, &tw, &th);
  cairo_move_to(cr, round(x - ax * tw), round(y - ay * th));
  pango_cairo_show_layout(cr, l);
  g_object_unref(l);
}

/* A 1, 2 or 5 times a power of ten near raw. */
static double nice_step(double raw) {
  double mag = pow(10, floor(log10(raw))), nrm = raw / mag;
  return (nrm < 1.5 ? 1 : nrm < 3 ? 2 : nrm < 7 ? 5 : 10) * mag;
}

static void format_cost(double v, const char *unit, char *buf, size_t cap) {
  const char *sfx = "";
  if (g_strcmp0(unit, "s") == 0) {
    if (v < 1e-3) g_snprintf(buf, cap, "%.3g µs", v * 1e6);
    else if (v < 1) g_snprintf(buf, cap, "%.3g ms", v * 1e3);
    else g_snprintf(buf, cap, "%.3g s", v);
    return;
  }
  if (v >= 1e9) { v /= 1e9; sfx = "G"; }
  else if (v >= 1e6) { v /= 1e6; sfx = "M"; }
  else if (v >= 1e3) { v /= 1e3; sfx = "k"; }
  g_snprintf(buf, cap, "%.3g%s", v, sfx);
}

static void em_cost_scatter_snapshot(GtkWidget *widget, GtkSnapshot *snapshot) {
  EmCostScatter *self = EM_COST_SCATTER(widget);
  int w = gtk_widget_get_width(widget), h = gtk_widget_get_height(widget);
  if (w <= 0 || h <= 0) return;
  cairo_t *cr = gtk_snapshot_append_cairo(snapshot, &GRAPHENE_RECT_INIT(0, 0, w, h));
  GdkRGBA fg;
G_GNUC_BEGIN_IGNORE_DEPRECATIONS
  gtk_style_context_get_color(gtk_widget_get_style_context(widget), &fg);
G_GNUC_END_IGNORE_DEPRECATIONS
  double L = 56, R = 16, T = 12, B = 44;
  double pw = MAX(w - L - R, 1), ph = MAX(h - T - B, 1);
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  int valid = 0;
  for (int i = 0; i < self->n; i++) {
    if (!isfinite(self->x[i]) || !isfinite(self->y[i]) || self->x[i] <= 0) continue;
    xmin = fmin(xmin, self->x[i]);
    xmax = fmax(xmax, self->x[i]);
    ymin = fmin(ymin, self->y[i]);
    ymax = fmax(ymax, self->y[i]);
    valid++;
  }
  cairo_set_line_width(cr, 1);
  cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.4);
  cairo_rectangle(cr, L + 0.5, T + 0.5, pw - 1, ph - 1);
  cairo_stroke(cr);
  cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.85);
  if (self->x_title) text_at(widget, cr, self->x_title, L + pw / 2, T + ph + 22, 0.5, 0);
  if (self->y_title) {
    cairo_save(cr);
    cairo_translate(cr, 4, T + ph / 2);
    cairo_rotate(cr, -G_PI / 2);
    text_at(widget, cr, self->y_title, 0, 0, 0.5, 0);
    cairo_restore(cr);
  }
  if (valid == 0) {
    cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.6);
    text_at(widget, cr, self->n ? "No run has both a cost and an accuracy" : "No runs",
            L + pw / 2, T + ph / 2, 0.5, 0.5);
    cairo_destroy(cr);
    return;
  }
  /* x: log when the costs span more than a decade; margins on both axes */
  gboolean logx = xmax / xmin > 10;
  double ax0 = logx ? log10(xmin) : xmin, ax1 = logx ? log10(xmax) : xmax;
  double xs = ax1 - ax0 > 0 ? (ax1 - ax0) * 0.15 : (logx ? 0.5 : fabs(ax0) * 0.5 + 1e-9);
  ax0 -= xs;
  ax1 += xs;
  double ys = ymax - ymin > 0 ? (ymax - ymin) * 0.2 : 0.05;
  double ay0 = ymin - ys, ay1 = ymax + ys;
  char buf[64];
  /* x: decades on a log axis, else a 1-2-5 step */
  double xstep = logx ? 1 : nice_step((ax1 - ax0) / 4);
  double k0 = 0;
  for (int i = 0, n = em_chart_tick_count(ax0, ax1, xstep, &k0); i < n; i++) {
    double a = (k0 + i) * xstep;
    double px = L + (a - ax0) / (ax1 - ax0) * pw;
    format_cost(logx ? pow(10, a) : a, self->x_unit, buf, sizeof buf);
    cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.12);
    cairo_move_to(cr, round(px) + 0.5, T);
    cairo_line_to(cr, round(px) + 0.5, T + ph);
    cairo_stroke(cr);
    cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.75);
    text_at(widget, cr, buf, CLAMP(px, L + 20, L + pw - 20), T + ph + 4, 0.5, 0);
  }
  /* y: ticks at a 1-2-5 step */
  double step = nice_step((ay1 - ay0) / 5);
  for (int i = 0, n = em_chart_tick_count(ay0, ay1, step, &k0); i < n; i++) {
    double b = (k0 + i) * step;
    double py = T + ph - (b - ay0) / (ay1 - ay0) * ph;
    g_snprintf(buf, sizeof buf, "%.4g", fabs(b) < step * 1e-9 ? 0 : b);
    cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.12);
    cairo_move_to(cr, L, round(py) + 0.5);
    cairo_line_to(cr, L + pw, round(py) + 0.5);
    cairo_stroke(cr);
    cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.75);
    text_at(widget, cr, buf, L - 6, py, 1, 0.5);
  }
  for (int i = 0; i < self->n; i++) {
    if (!isfinite(self->x[i]) || !isfinite(self->y[i]) || self->x[i] <= 0) continue;
    double a = logx ? log10(self->x[i]) : self->x[i];
    double px = L + (a - ax0) / (ax1 - ax0) * pw, py = T + ph - (self->y[i] - ay0) / (ay1 - ay0) * ph;
    GdkRGBA c;
    gdk_rgba_parse(&c, palette[i % G_N_ELEMENTS(palette)]);
    gdk_cairo_set_source_rgba(cr, &c);
    cairo_arc(cr, px, py, 5, 0, 2 * G_PI);
    cairo_fill(cr);
    cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.9);
    gboolean right = px < L + pw * 0.6;
    text_at(widget, cr, self->labels[i], right ? px + 8 : px - 8, py - 2, right ? 0 : 1, 1);
  }
  cairo_destroy(cr);
}

static void em_cost_scatter_measure(GtkWidget *widget, GtkOrientation o, int for_size, int *min,
                                    int *nat, int *min_base, int *nat_base) {
  (void)widget;
  (void)for_size;
  *min = o == GTK_ORIENTATION_HORIZONTAL ? 240 : 180;
  *nat = o == GTK_ORIENTATION_HORIZONTAL ? 380 : 280;
  *min_base = *nat_base = -1;
}

static void clear_points(EmCostScatter *self) {
  g_clear_pointer(&self->x, g_free);
  g_clear_pointer(&self->y, g_free);
  g_clear_pointer(&self->labels, g_strfreev);
  self->n = 0;
}

static void em_cost_scatter_finalize(GObject *object) {
  EmCostScatter *self = EM_COST_SCATTER(object);
  clear_points(self);
  g_free(self->x_title);
  g_free(self->x_unit);
  g_free(self->y_title);
  G_OBJECT_CLASS(em_cost_scatter_parent_class)->finalize(object);
}

static void em_cost_scatter_class_init(EmCostScatterClass *klass) {
  G_OBJECT_CLASS(klass)->finalize = em_cost_scatter_finalize;
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  wc->snapshot = em_cost_scatter_snapshot;
  wc->measure = em_cost_scatter_measure;
  gtk_widget_class_set_css_name(wc, "costscatter");
  gtk_widget_class_set_accessible_role(wc, GTK_ACCESSIBLE_ROLE_IMG);
}

static void em_cost_scatter_init(EmCostScatter *self) {
  gtk_widget_set_hexpand(GTK_WIDGET(self), TRUE);
  gtk_widget_set_vexpand(GTK_WIDGET(self), TRUE);
}

GtkWidget *em_cost_scatter_new(void) {
  return g_object_new(EM_TYPE_COST_SCATTER, NULL);
}

void em_cost_scatter_set_points(EmCostScatter *self, const double *x, const double *y,
                                const char *const *labels, int n) {
  g_return_if_fail(EM_IS_COST_SCATTER(self));
  clear_points(self);
  self->n = MAX(n, 0);
  self->x = g_memdup2(x, sizeof(double) * self->n);
  self->y = g_memdup2(y, sizeof(double) * self->n);
  self->labels = g_new0(char *, self->n + 1);
  for (int i = 0; i < self->n; i++) self->labels[i] = g_strdup(labels[i]);
  gtk_widget_queue_draw(GTK_WIDGET(self));
}

void em_cost_scatter_set_axes(EmCostScatter *self, const char *x_title, const char *x_unit,
                              const char *y_title) {
  g_return_if_fail(EM_IS_COST_SCATTER(self));
  g_free(self->x_title);
  g_free(self->x_unit);
  g_free(self->y_title);
  self->x_title = g_strdup(x_title);
  self->x_unit = g_strdup(x_unit);
  self->y_title = g_strdup(y_title);
  gtk_widget_queue_draw(GTK_WIDGET(self));
}

int em_cost_scatter_get_n_points(EmCostScatter *self) {
  g_return_val_if_fail(EM_IS_COST_SCATTER(self), 0);
  return self->n;
}
