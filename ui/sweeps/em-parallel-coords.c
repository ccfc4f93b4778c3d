/* em-parallel-coords.c: see the header. A sweep has tens to a few
 * thousand trials: the whole frame is drawn into one cached node; a drag
 * redraws it (the filter is O(trials x axes)). */
#include "em-parallel-coords.h"

#include <math.h>
#include <pango/pangocairo.h>
#include <string.h>

#define MARGIN_L 18.0
#define MARGIN_R 64.0 /* the last axis's tick labels */
#define MARGIN_T 30.0 /* the axes' names */
#define MARGIN_B 12.0
#define GRAB_PX 28.0  /* how near an axis a drag must start */
#define MAX_TICKS 8

struct _EmParallelCoords {
  GtkWidget parent_instance;
  em_sweep_table t;
  gboolean have;
  int best;
  em_sweep_brush brush[EM_SWEEP_MAX_AXES];
  gboolean *keep; /* (n) */
  int n_kept;
  GskRenderNode *cache;
  int cache_w, cache_h;
  int drag_axis; /* -1: none */
  double drag_y0, drag_dy;
};

G_DEFINE_FINAL_TYPE(EmParallelCoords, em_parallel_coords, GTK_TYPE_WIDGET)

enum { SIGNAL_BRUSH_CHANGED, N_SIGNALS };
static guint signals[N_SIGNALS];

static void invalidate(EmParallelCoords *self) {
  g_clear_pointer(&self->cache, gsk_render_node_unref);
  gtk_widget_queue_draw(GTK_WIDGET(self));
}

static void refilter(EmParallelCoords *self) {
  g_free(self->keep);
  self->keep = g_new0(gboolean, MAX(self->t.n, 1));
  bool *k = g_new0(bool, MAX(self->t.n, 1));
  self->n_kept = self->have ? em_sweep_table_filter(&self->t, self->brush, k) : 0;
  for (int i = 0; i < self->t.n; i++) self->keep[i] = k[i];
  g_free(k);
}

/* ---- layout ------------------------------------------------------------------------ */

typedef struct {
  double x0, y0, w, h; /* the plot: axis 0 at x0, the last at x0 + w */
} Frame;

static Frame frame_of(EmParallelCoords *self) {
  int W = gtk_widget_get_width(GTK_WIDGET(self)), H = gtk_widget_get_height(GTK_WIDGET(self));
  return (Frame){MARGIN_L, MARGIN_T, MAX(W - MARGIN_L - MARGIN_R, 1), MAX(H - MARGIN_T - MARGIN_B, 1)};
}

static double axis_x(const Frame *f, int a, int n_axes) {
  return n_axes > 1 ? f->x0 + f->w * a / (n_axes - 1) : f->x0 + f->w / 2;
}

static double y_of(const Frame *f, double u) { return f->y0 + (1 - u) * f->h; }

/* worse to better: blue, purple, pink, orange (plasma's, short of its
 * yellow end, which does not show on a light background) */
static void color_of(double t, double rgb[3]) {
  static const double stops[5][3] = {{0.173, 0.243, 0.620}, {0.478, 0.173, 0.659},
                                     {0.780, 0.243, 0.478}, {0.933, 0.416, 0.227},
                                     {0.902, 0.600, 0.000}};
  t = fmin(fmax(t, 0), 1) * 4;
  int i = (int)fmin(floor(t), 3);
  double f = t - i;
  for (int c = 0; c < 3; c++) rgb[c] = stops[i][c] * (1 - f) + stops[i + 1][c] * f;
}

/* A setting's name on its axis: "lr" for training.lr, "fc1.out_features"
 * for nodes.fc1.out_features. */
static const char *short_name(const char *path) {
  static const char *const prefixes[] = {"training.", "nodes.", NULL};
  for (int i = 0; prefixes[i]; i++)
    if (g_str_has_prefix(path, prefixes[i])) return path + strlen(prefixes[i]);
  return path;
}

static void text_at(GtkWidget *w, cairo_t *cr, const char *t, double x, double y, double ax,
                    double ay, double max_w, gboolean small) {
  PangoLayout *l = gtk_widget_create_pango_layout(w, t);
  if (small) {
    PangoAttrList *attrs = pango_attr_list_new();
    pango_attr_list_insert(attrs, pango_attr_scale_new(0.85));
    pango_layout_set_attributes(l, attrs);
    pango_attr_list_unref(attrs);
  }
  if (max_w > 0) {
    pango_layout_set_width(l, (int)(max_w * PANGO_SCALE));
    pango_layout_set_ellipsize(l, PANGO_ELLIPSIZE_MIDDLE);
  }
  int tw, th;
  pango_layout_get_pixel_size(l, &tw, &th);
  cairo_move_to(cr, round(x - ax * tw), round(y - ay * th));
  pango_cairo_show_layout(cr, l);
  g_object_unref(l);
}

/* ---- drawing -------------------------------------------------------------------------- */

static void draw_lines(EmParallelCoords *self, cairo_t *cr, const Frame *f, const GdkRGBA *fg,
                       gboolean kept_pass) {
  const em_sweep_table *t = &self->t;
  const em_sweep_axis *m = &t->axis[t->n_params];
  for (int i = 0; i < t->n; i++) {
    gboolean kept = self->keep[i];
    if (kept != kept_pass) continue;
    double y = em_sweep_table_at(t, i, t->n_params);
    double rgb[3] = {fg->red, fg->green, fg->blue};
    double alpha = 0.18, width = 1.2;
    if (kept && !isnan(y)) {
      double u = em_sweep_axis_pos(m, y);
      color_of(t->maximize ? u : 1 - u, rgb);
      alpha = 0.9;
      width = i == self->best ? 3.5 : 1.8;
    } else if (kept) {
      alpha = 0.45;
    }
    double dash[] = {4, 3};
    cairo_set_dash(cr, dash, isnan(y) ? 2 : 0, 0);
    cairo_set_source_rgba(cr, rgb[0], rgb[1], rgb[2], alpha);
    cairo_set_line_width(cr, width);
    gboolean pen = FALSE;
    for (int a = 0; a < t->n_axes; a++) {
      double u = em_sweep_axis_pos(&t->axis[a], em_sweep_table_at(t, i, a));
      if (isnan(u)) {
        pen = FALSE;
        continue;
      }
      double x = axis_x(f, a, t->n_axes), py = y_of(f, u);
      if (pen) cairo_line_to(cr, x, py);
      else cairo_move_to(cr, x, py);
      pen = TRUE;
    }
    cairo_stroke(cr);
  }
  cairo_set_dash(cr, NULL, 0, 0);
}

static void draw_axes(EmParallelCoords *self, cairo_t *cr, const Frame *f, const GdkRGBA *fg) {
  GtkWidget *w = GTK_WIDGET(self);
  const em_sweep_table *t = &self->t;
  double spacing = t->n_axes > 1 ? f->w / (t->n_axes - 1) : f->w;
  for (int a = 0; a < t->n_axes; a++) {
    const em_sweep_axis *ax = &t->axis[a];
    double x = round(axis_x(f, a, t->n_axes)) + 0.5;
    gboolean metric = a == t->n_params;
    if (metric) { /* the metric's axis is the colour scale's legend */
      for (int k = 0; k < 32; k++) {
        double rgb[3];
        color_of(t->maximize ? (k + 0.5) / 32 : 1 - (k + 0.5) / 32, rgb);
        cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
        cairo_rectangle(cr, x - 3, y_of(f, (k + 1) / 32.0), 6, f->h / 32 + 0.5);
        cairo_fill(cr);
      }
    }
    if (self->brush[a].on) {
      cairo_set_line_width(cr, 1);
      double y0 = y_of(f, self->brush[a].hi), y1 = y_of(f, self->brush[a].lo);
      cairo_rectangle(cr, x - 7, y0, 14, MAX(y1 - y0, 2));
      cairo_set_source_rgba(cr, 0.21, 0.52, 0.89, 0.3);
      cairo_fill_preserve(cr);
      cairo_set_source_rgba(cr, 0.21, 0.52, 0.89, 0.9);
      cairo_stroke(cr);
    }
    cairo_set_source_rgba(cr, fg->red, fg->green, fg->blue, 0.55);
    cairo_set_line_width(cr, 1);
    cairo_move_to(cr, x, f->y0);
    cairo_line_to(cr, x, f->y0 + f->h);
    cairo_stroke(cr);
    double pos[MAX_TICKS];
    char label[MAX_TICKS][EM_SWEEP_TICK_LABEL];
    int nt = em_sweep_axis_ticks(ax, pos, label, MAX(2, MIN(MAX_TICKS, (int)(f->h / 22))));
    for (int k = 0; k < nt; k++) {
      double py = round(y_of(f, pos[k])) + 0.5;
      cairo_set_source_rgba(cr, fg->red, fg->green, fg->blue, 0.55);
      cairo_move_to(cr, x - 3, py);
      cairo_line_to(cr, x + 3, py);
      cairo_stroke(cr);
      cairo_set_source_rgba(cr, fg->red, fg->green, fg->blue, 0.8);
      double ay = pos[k] >= 1 ? 0 : pos[k] <= 0 ? 1 : 0.5;
      text_at(w, cr, label[k], x + 9, py, 0, ay, MIN(spacing - 12, MARGIN_R - 9), TRUE);
    }
    char name[160];
    g_snprintf(name, sizeof name, "%s%s%s", metric ? "" : short_name(ax->name),
               metric ? ax->name : "", ax->log ? " (log)" : "");
    cairo_set_source_rgba(cr, fg->red, fg->green, fg->blue, 0.95);
    double ax_anchor = a == 0 ? 0 : a == t->n_axes - 1 ? 1 : 0.5;
    if (a == 0) x -= 6;
    text_at(w, cr, name, a == t->n_axes - 1 ? x + MARGIN_R - 8 : x, 6, ax_anchor, 0,
            MAX(spacing - 8, 40), FALSE);
  }
}

static GskRenderNode *render(EmParallelCoords *self, int W, int H) {
  GskRenderNode *node = gsk_cairo_node_new(&GRAPHENE_RECT_INIT(0, 0, W, H));
  cairo_t *cr = gsk_cairo_node_get_draw_context(node);
  GdkRGBA fg;
G_GNUC_BEGIN_IGNORE_DEPRECATIONS
  gtk_style_context_get_color(gtk_widget_get_style_context(GTK_WIDGET(self)), &fg);
G_GNUC_END_IGNORE_DEPRECATIONS
  Frame f = frame_of(self);
  if (!self->have || self->t.n == 0) {
    cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.6);
    text_at(GTK_WIDGET(self), cr, self->have ? "No trials yet" : "No sweep shown", W / 2.0,
            H / 2.0, 0.5, 0.5, 0, FALSE);
  } else {
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    draw_lines(self, cr, &f, &fg, FALSE); /* the ones brushed out, under */
    draw_lines(self, cr, &f, &fg, TRUE);
    draw_axes(self, cr, &f, &fg);
  }
  cairo_destroy(cr);
  return node;
}

static void em_parallel_coords_snapshot(GtkWidget *widget, GtkSnapshot *snapshot) {
  EmParallelCoords *self = EM_PARALLEL_COORDS(widget);
  int W = gtk_widget_get_width(widget), H = gtk_widget_get_height(widget);
  if (W <= 0 || H <= 0) return;
  if (!self->cache || self->cache_w != W || self->cache_h != H) {
    g_clear_pointer(&self->cache, gsk_render_node_unref);
    self->cache = render(self, W, H);
    self->cache_w = W;
    self->cache_h = H;
  }
  gtk_snapshot_append_node(snapshot, self->cache);
}

/* ---- brushing ---------------------------------------------------------------------- */

static void set_brush_pos(EmParallelCoords *self, int axis, double u0, double u1) {
  em_sweep_brush *b = &self->brush[axis];
  b->on = TRUE;
  b->lo = fmax(fmin(u0, u1), 0);
  b->hi = fmin(fmax(u0, u1), 1);
  refilter(self);
  invalidate(self);
}

static void on_drag_begin(GtkGestureDrag *g, double x, double y, gpointer data) {
  EmParallelCoords *self = data;
  self->drag_axis = -1;
  if (!self->have) return;
  Frame f = frame_of(self);
  double best = GRAB_PX;
  for (int a = 0; a < self->t.n_axes; a++) {
    double d = fabs(x - axis_x(&f, a, self->t.n_axes));
    if (d < best) {
      best = d;
      self->drag_axis = a;
    }
  }
  self->drag_y0 = y;
  self->drag_dy = 0;
  if (self->drag_axis < 0) gtk_gesture_set_state(GTK_GESTURE(g), GTK_EVENT_SEQUENCE_DENIED);
}

static void on_drag_update(GtkGestureDrag *g, double dx, double dy, gpointer data) {
  (void)g;
  (void)dx;
  EmParallelCoords *self = data;
  if (self->drag_axis < 0) return;
  self->drag_dy = dy;
  if (fabs(dy) < 3) return;
  Frame f = frame_of(self);
  double u0 = 1 - (self->drag_y0 - f.y0) / f.h, u1 = 1 - (self->drag_y0 + dy - f.y0) / f.h;
  set_brush_pos(self, self->drag_axis, u0, u1);
  g_signal_emit(self, signals[SIGNAL_BRUSH_CHANGED], 0);
}

static void on_drag_end(GtkGestureDrag *g, double dx, double dy, gpointer data) {
  (void)g;
  (void)dx;
  EmParallelCoords *self = data;
  if (self->drag_axis >= 0 && fabs(dy) < 3) /* a click on an axis */
    em_parallel_coords_clear_brush(self, self->drag_axis);
  self->drag_axis = -1;
}

int em_parallel_coords_set_brush(EmParallelCoords *self, int axis, double v0, double v1) {
  g_return_val_if_fail(EM_IS_PARALLEL_COORDS(self), -1);
  if (!self->have || axis < 0 || axis >= self->t.n_axes) return -1;
  const em_sweep_axis *a = &self->t.axis[axis];
  double u0 = em_sweep_axis_pos(a, v0), u1 = em_sweep_axis_pos(a, v1);
  if (isnan(u0) || isnan(u1)) return -1;
  set_brush_pos(self, axis, u0, u1);
  g_signal_emit(self, signals[SIGNAL_BRUSH_CHANGED], 0);
  return self->n_kept;
}

void em_parallel_coords_clear_brush(EmParallelCoords *self, int axis) {
  g_return_if_fail(EM_IS_PARALLEL_COORDS(self));
  for (int a = 0; a < EM_SWEEP_MAX_AXES; a++)
    if (axis < 0 || a == axis) self->brush[a].on = FALSE;
  refilter(self);
  invalidate(self);
  g_signal_emit(self, signals[SIGNAL_BRUSH_CHANGED], 0);
}

gboolean em_parallel_coords_has_brush(EmParallelCoords *self) {
  for (int a = 0; a < self->t.n_axes; a++)
    if (self->brush[a].on) return TRUE;
  return FALSE;
}

int em_parallel_coords_get_n_kept(EmParallelCoords *self) { return self->n_kept; }

gboolean em_parallel_coords_is_kept(EmParallelCoords *self, int trial) {
  return trial >= 0 && trial < self->t.n && self->keep[trial];
}

/* ---- data ---------------------------------------------------------------------------- */

static gboolean same_axes(const em_sweep_table *a, const em_sweep_table *b) {
  if (a->n_axes != b->n_axes) return FALSE;
  for (int i = 0; i < a->n_axes; i++)
    if (strcmp(a->axis[i].name, b->axis[i].name)) return FALSE;
  return TRUE;
}

void em_parallel_coords_set_table(EmParallelCoords *self, const em_sweep_table *t, int best) {
  g_return_if_fail(EM_IS_PARALLEL_COORDS(self));
  gboolean keep_brushes = self->have && t && same_axes(&self->t, t);
  if (self->have) em_sweep_table_clear(&self->t);
  self->have = t != NULL;
  if (t) em_sweep_table_copy(&self->t, t);
  if (!keep_brushes) memset(self->brush, 0, sizeof self->brush);
  self->best = best;
  refilter(self);
  invalidate(self);
}

int em_parallel_coords_get_n_axes(EmParallelCoords *self) {
  return self->have ? self->t.n_axes : 0;
}

const char *em_parallel_coords_get_axis_name(EmParallelCoords *self, int axis) {
  return self->have && axis >= 0 && axis < self->t.n_axes ? self->t.axis[axis].name : NULL;
}

int em_parallel_coords_get_n_trials(EmParallelCoords *self) { return self->have ? self->t.n : 0; }

/* ---- the widget ------------------------------------------------------------------------- */

static void em_parallel_coords_measure(GtkWidget *widget, GtkOrientation o, int for_size,
                                       int *min, int *nat, int *min_base, int *nat_base) {
  (void)widget;
  (void)for_size;
  *min = o == GTK_ORIENTATION_HORIZONTAL ? 300 : 150;
  *nat = o == GTK_ORIENTATION_HORIZONTAL ? 600 : 240;
  *min_base = *nat_base = -1;
}

static void em_parallel_coords_size_allocate(GtkWidget *w, int width, int height, int baseline) {
  (void)width;
  (void)height;
  (void)baseline;
  invalidate(EM_PARALLEL_COORDS(w));
}

static void em_parallel_coords_css_changed(GtkWidget *w, GtkCssStyleChange *change) {
  GTK_WIDGET_CLASS(em_parallel_coords_parent_class)->css_changed(w, change);
  invalidate(EM_PARALLEL_COORDS(w));
}

static void em_parallel_coords_finalize(GObject *obj) {
  EmParallelCoords *self = EM_PARALLEL_COORDS(obj);
  if (self->have) em_sweep_table_clear(&self->t);
  g_free(self->keep);
  g_clear_pointer(&self->cache, gsk_render_node_unref);
  G_OBJECT_CLASS(em_parallel_coords_parent_class)->finalize(obj);
}

static void em_parallel_coords_class_init(EmParallelCoordsClass *klass) {
  G_OBJECT_CLASS(klass)->finalize = em_parallel_coords_finalize;
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  wc->snapshot = em_parallel_coords_snapshot;
  wc->measure = em_parallel_coords_measure;
  wc->size_allocate = em_parallel_coords_size_allocate;
  wc->css_changed = em_parallel_coords_css_changed;
  gtk_widget_class_set_css_name(wc, "parallelcoords");
  gtk_widget_class_set_accessible_role(wc, GTK_ACCESSIBLE_ROLE_IMG);
  signals[SIGNAL_BRUSH_CHANGED] = g_signal_new("brush-changed", G_TYPE_FROM_CLASS(klass),
                                               G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                               G_TYPE_NONE, 0);
}

static void em_parallel_coords_init(EmParallelCoords *self) {
  self->best = -1;
  self->drag_axis = -1;
  gtk_widget_set_hexpand(GTK_WIDGET(self), TRUE);
  gtk_widget_set_vexpand(GTK_WIDGET(self), TRUE);
  gtk_widget_set_tooltip_text(GTK_WIDGET(self), "Drag along an axis to keep the trials in that "
                                                "range; click the axis to clear it");
  GtkGesture *drag = gtk_gesture_drag_new();
  g_signal_connect(drag, "drag-begin", G_CALLBACK(on_drag_begin), self);
  g_signal_connect(drag, "drag-update", G_CALLBACK(on_drag_update), self);
  g_signal_connect(drag, "drag-end", G_CALLBACK(on_drag_end), self);
  gtk_widget_add_controller(GTK_WIDGET(self), GTK_EVENT_CONTROLLER(drag));
  refilter(self);
}

GtkWidget *em_parallel_coords_new(void) { return g_object_new(EM_TYPE_PARALLEL_COORDS, NULL); }
