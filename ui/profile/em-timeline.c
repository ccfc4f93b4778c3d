/* em-timeline.c: see the header. */
#include "em-timeline.h"
#include "em-line-chart.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

#define ROW_H 16
#define LANE_GAP 6
#define LABEL_W 70

typedef struct {
  double t0, t1;   /* us from the first span */
  int lane, depth; /* lane: thread index */
  const char *name;/* interned */
  int cat;         /* 0 op, 1 backward, 2 layer, 3 range, 4 step */
} span;

struct EmTimelineData {
  GArray *spans;        /* span, sorted by lane then t0 */
  GHashTable *op_layer; /* op name -> layer (owned strings) */
  int n_lanes, *lane_depth, *lane_tid;
  double end_us;        /* last span end */
};

struct _EmTimeline {
  GtkWidget parent_instance;
  EmTimelineData *d;
  double v0, v1;        /* view */
  double drag_v0;
  GskRenderNode *cache; /* the last frame, until the view, data or size change */
  int cache_w, cache_h;
  int *lane_y;          /* top of each lane, from the last draw */
};

G_DEFINE_FINAL_TYPE(EmTimeline, em_timeline, GTK_TYPE_WIDGET)

static void invalidate(EmTimeline *self) {
  g_clear_pointer(&self->cache, gsk_render_node_unref);
  gtk_widget_queue_draw(GTK_WIDGET(self));
}

static int cat_index(const char *c) {
  static const char *cats[] = {"op", "backward", "layer", "range", "step"};
  for (int i = 0; i < 5; i++)
    if (c && !strcmp(c, cats[i])) return i;
  return 0;
}

static int cmp_span(gconstpointer a, gconstpointer b) {
  const span *x = a, *y = b;
  if (x->lane != y->lane) return x->lane - y->lane;
  if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
  return x->t1 > y->t1 ? -1 : x->t1 < y->t1; /* parents first */
}

static EmTimelineData *data_new(void) {
  EmTimelineData *d = g_new0(EmTimelineData, 1);
  d->spans = g_array_new(FALSE, FALSE, sizeof(span));
  d->op_layer = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  return d;
}

EmTimelineData *em_timeline_data_load(const char *path, GError **error) {
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  json_t *events = json_is_object(root) ? json_object_get(root, "traceEvents") : root;
  if (!json_is_array(events)) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                "%s is not a Chrome trace (%s); profile again to write a new one", path,
                root ? "no traceEvents list" : je.text);
    json_decref(root);
    return NULL;
  }
  EmTimelineData *d = data_new();
  GArray *tids = g_array_new(FALSE, FALSE, sizeof(int));
  double first = INFINITY;
  size_t i;
  json_t *e;
  json_array_foreach(events, i, e) {
    const char *ph = json_string_value(json_object_get(e, "ph"));
    if (!ph || strcmp(ph, "X")) continue;
    double ts = json_number_value(json_object_get(e, "ts"));
    if (ts < first) first = ts;
  }
  json_array_foreach(events, i, e) {
    const char *ph = json_string_value(json_object_get(e, "ph"));
    if (!ph || strcmp(ph, "X")) continue;
    int tid = (int)json_integer_value(json_object_get(e, "tid"));
    int lane = -1;
    for (guint k = 0; k < tids->len; k++)
      if (g_array_index(tids, int, k) == tid) lane = (int)k;
    if (lane < 0) {
      g_array_append_val(tids, tid);
      lane = (int)tids->len - 1;
    }
    const char *name = json_string_value(json_object_get(e, "name"));
    const char *cat = json_string_value(json_object_get(e, "cat"));
    span s = {.t0 = json_number_value(json_object_get(e, "ts")) - first,
              .lane = lane,
              .name = g_intern_string(name ? name : "?"),
              .cat = cat_index(cat)};
    s.t1 = s.t0 + json_number_value(json_object_get(e, "dur"));
    if (s.t1 > d->end_us) d->end_us = s.t1;
    g_array_append_val(d->spans, s);
    const char *layer = json_string_value(json_object_get(json_object_get(e, "args"), "layer"));
    if (name && layer && *layer && (s.cat == 0 || s.cat == 1)) {
      char *key = s.cat == 1 && !g_str_has_suffix(name, " (backward)")
                      ? g_strdup_printf("%s (backward)", name)
                      : g_strdup(name);
      if (!g_hash_table_contains(d->op_layer, key))
        g_hash_table_insert(d->op_layer, key, g_strdup(layer));
      else
        g_free(key);
    }
  }
  json_decref(root);
  g_array_sort(d->spans, cmp_span);
  /* depth: a stack of open ends per lane */
  d->n_lanes = (int)tids->len;
  d->lane_depth = g_new0(int, d->n_lanes + 1);
  d->lane_tid = (int *)g_array_free(tids, FALSE);
  double stack[64];
  int sp = 0, lane = -1;
  for (guint k = 0; k < d->spans->len; k++) {
    span *s = &g_array_index(d->spans, span, k);
    if (s->lane != lane) {
      lane = s->lane;
      sp = 0;
    }
    while (sp > 0 && stack[sp - 1] <= s->t0) sp--;
    s->depth = sp;
    if (sp < 64) stack[sp++] = s->t1;
    if (s->depth + 1 > d->lane_depth[lane]) d->lane_depth[lane] = s->depth + 1;
  }
  return d;
}

void em_timeline_data_free(EmTimelineData *d) {
  if (!d) return;
  g_array_unref(d->spans);
  g_hash_table_unref(d->op_layer);
  g_free(d->lane_depth);
  g_free(d->lane_tid);
  g_free(d);
}

void em_timeline_set_data(EmTimeline *self, EmTimelineData *d) {
  em_timeline_data_free(self->d);
  self->d = d ? d : data_new();
  self->v0 = 0;
  self->v1 = self->d->end_us > 0 ? self->d->end_us : 1;
  g_clear_pointer(&self->lane_y, g_free);
  gtk_widget_queue_resize(GTK_WIDGET(self));
  invalidate(self);
}

gboolean em_timeline_load(EmTimeline *self, const char *path, GError **error) {
  EmTimelineData *d = em_timeline_data_load(path, error);
  if (!d) return FALSE;
  em_timeline_set_data(self, d);
  return TRUE;
}


int em_timeline_get_n_spans(EmTimeline *self) { return (int)self->d->spans->len; }

const char *em_timeline_layer_of(EmTimeline *self, const char *op) {
  return g_hash_table_lookup(self->d->op_layer, op);
}

void em_timeline_set_view(EmTimeline *self, double t0, double t1) {
  if (t1 <= t0) return;
  self->v0 = t0;
  self->v1 = t1;
  invalidate(self);
}

void em_timeline_get_view(EmTimeline *self, double *t0, double *t1) {
  *t0 = self->v0;
  *t1 = self->v1;
}

static void span_color(const span *s, double rgb[3]) {
  static const double base[5][3] = {{0.21, 0.52, 0.89}, {0.90, 0.38, 0.00}, {0.15, 0.64, 0.41},
                                    {0.57, 0.25, 0.67}, {0.55, 0.55, 0.55}};
  guint h = g_str_hash(s->name);
  double jitter = 0.85 + 0.15 * (double)(h % 7) / 6.0;
  for (int c = 0; c < 3; c++) rgb[c] = base[s->cat][c] * jitter;
}

static void draw(EmTimeline *self, GtkSnapshot *snap, int W, int H);

static void em_timeline_snapshot(GtkWidget *w, GtkSnapshot *snap) {
  EmTimeline *self = EM_TIMELINE(w);
  int W = gtk_widget_get_width(w), H = gtk_widget_get_height(w);
  if (!self->cache || self->cache_w != W || self->cache_h != H) {
    g_clear_pointer(&self->cache, gsk_render_node_unref);
    GtkSnapshot *sub = gtk_snapshot_new();
    draw(self, sub, W, H);
    self->cache = gtk_snapshot_free_to_node(sub);
    self->cache_w = W;
    self->cache_h = H;
  }
  if (self->cache) gtk_snapshot_append_node(snap, self->cache);
}

static void draw(EmTimeline *self, GtkSnapshot *snap, int W, int H) {
  GtkWidget *w = GTK_WIDGET(self);
  cairo_t *cr = gtk_snapshot_append_cairo(snap, &GRAPHENE_RECT_INIT(0, 0, W, H));
  GdkRGBA fg;
  gtk_style_context_get_color(gtk_widget_get_style_context(w), &fg);
  cairo_select_font_face(cr, "Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, 10);
  if (self->d->spans->len == 0) {
    cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.6);
    cairo_move_to(cr, 10, 20);
    cairo_show_text(cr, "No profiled window yet: press \"Profile now\" or train with profiling.");
    cairo_destroy(cr);
    return;
  }
  double plot_w = W - LABEL_W - 4, scale = plot_w / (self->v1 - self->v0);
  /* time axis */
  double y_axis = 14;
  double step = pow(10, floor(log10((self->v1 - self->v0) / 5)));
  if ((self->v1 - self->v0) / step > 10) step *= 2;
  cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.7);
  double k0 = 0;
  for (int i = 0, n = em_chart_tick_count(self->v0, self->v1, step, &k0); i < n; i++) {
    double t = (k0 + i) * step;
    double x = LABEL_W + (t - self->v0) * scale;
    cairo_rectangle(cr, x, y_axis - 3, 1, 4);
    cairo_fill(cr);
    char lab[32];
    if (step >= 1000) snprintf(lab, sizeof lab, "%.0f ms", t / 1000);
    else snprintf(lab, sizeof lab, "%.2f ms", t / 1000);
    cairo_move_to(cr, x + 2, y_axis - 4);
    cairo_show_text(cr, lab);
  }
  g_free(self->lane_y);
  int *lane_y = self->lane_y = g_new0(int, self->d->n_lanes + 1);
  int y = (int)y_axis + 4;
  for (int l = 0; l < self->d->n_lanes; l++) {
    lane_y[l] = y;
    cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.8);
    cairo_move_to(cr, 4, y + 12);
    char lab[32];
    snprintf(lab, sizeof lab, "thread %d", self->d->lane_tid[l]);
    cairo_show_text(cr, lab);
    y += self->d->lane_depth[l] * ROW_H + LANE_GAP;
  }
  cairo_rectangle(cr, LABEL_W, 0, plot_w, H);
  cairo_clip(cr);
  double last_x = -1;
  int last_row = -1;
  for (guint k = 0; k < self->d->spans->len; k++) {
    const span *s = &g_array_index(self->d->spans, span, k);
    if (s->t1 < self->v0 || s->t0 > self->v1) continue;
    double x0 = LABEL_W + (s->t0 - self->v0) * scale, x1 = LABEL_W + (s->t1 - self->v0) * scale;
    int row = lane_y[s->lane] + s->depth * ROW_H;
    if (x1 - x0 < 1) { /* sub-pixel spans: one pixel per column and row */
      if (row == last_row && floor(x0) == last_x) continue;
      last_row = row;
      last_x = floor(x0);
      x1 = x0 + 1;
    }
    double rgb[3];
    span_color(s, rgb);
    cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
    cairo_rectangle(cr, x0, row, x1 - x0 - (x1 - x0 > 3 ? 1 : 0), ROW_H - 2);
    cairo_fill(cr);
    if (x1 - x0 > 30) {
      cairo_save(cr);
      cairo_rectangle(cr, x0, row, x1 - x0 - 2, ROW_H - 2);
      cairo_clip(cr);
      cairo_set_source_rgb(cr, 1, 1, 1);
      cairo_move_to(cr, MAX(x0, LABEL_W) + 3, row + 11);
      cairo_show_text(cr, s->name);
      cairo_restore(cr);
    }
  }
  cairo_destroy(cr);
}

/* The span under (x, y): its name and duration. */
static gboolean em_timeline_query_tooltip(GtkWidget *w, int x, int y, gboolean kb, GtkTooltip *tip) {
  (void)kb;
  EmTimeline *self = EM_TIMELINE(w);
  if (!self->lane_y || x < LABEL_W) return FALSE;
  double plot_w = gtk_widget_get_width(w) - LABEL_W - 4;
  double t = self->v0 + (x - LABEL_W) / plot_w * (self->v1 - self->v0);
  double slack = 2 * (self->v1 - self->v0) / plot_w; /* two pixels */
  for (guint k = 0; k < self->d->spans->len; k++) {
    const span *s = &g_array_index(self->d->spans, span, k);
    int top = self->lane_y[s->lane] + s->depth * ROW_H;
    if (y < top || y >= top + ROW_H || t < s->t0 - slack || t > s->t1 + slack) continue;
    char *text = g_strdup_printf("%s\n%.3f ms at %.3f ms", s->name, (s->t1 - s->t0) / 1000,
                                 s->t0 / 1000);
    gtk_tooltip_set_text(tip, text);
    g_free(text);
    return TRUE;
  }
  return FALSE;
}

static void em_timeline_measure(GtkWidget *w, GtkOrientation o, int for_size, int *min, int *nat,
                                int *min_base, int *nat_base) {
  (void)for_size;
  EmTimeline *self = EM_TIMELINE(w);
  *min_base = *nat_base = -1;
  if (o == GTK_ORIENTATION_HORIZONTAL) {
    *min = 200;
    *nat = 600;
    return;
  }
  int h = 22;
  for (int l = 0; l < self->d->n_lanes; l++) h += self->d->lane_depth[l] * ROW_H + LANE_GAP;
  *min = 60;
  *nat = MAX(h, 120);
}

static gboolean on_scroll(GtkEventControllerScroll *c, double dx, double dy, EmTimeline *self) {
  (void)dx;
  GtkWidget *w = GTK_WIDGET(self);
  double px = 0, py = 0;
  GdkEvent *ev = gtk_event_controller_get_current_event(GTK_EVENT_CONTROLLER(c));
  if (ev) gdk_event_get_position(ev, &px, &py);
  double plot_w = gtk_widget_get_width(w) - LABEL_W - 4;
  double frac = plot_w > 0 ? CLAMP((px - LABEL_W) / plot_w, 0, 1) : 0.5;
  double at = self->v0 + frac * (self->v1 - self->v0);
  double f = dy > 0 ? 1.25 : 0.8, span_w = (self->v1 - self->v0) * f;
  if (span_w < 1) span_w = 1;
  em_timeline_set_view(self, at - frac * span_w, at + (1 - frac) * span_w);
  return TRUE;
}

static void on_drag_begin(GtkGestureDrag *g, double x, double y, EmTimeline *self) {
  (void)g;
  (void)x;
  (void)y;
  self->drag_v0 = self->v0;
}

static void on_drag_update(GtkGestureDrag *g, double ox, double oy, EmTimeline *self) {
  (void)g;
  (void)oy;
  double plot_w = gtk_widget_get_width(GTK_WIDGET(self)) - LABEL_W - 4;
  double w = self->v1 - self->v0;
  double v0 = self->drag_v0 - ox / (plot_w > 0 ? plot_w : 1) * w;
  em_timeline_set_view(self, v0, v0 + w);
}

static void on_click(GtkGestureClick *g, int n, double x, double y, EmTimeline *self) {
  (void)g;
  (void)x;
  (void)y;
  if (n == 2) em_timeline_set_view(self, 0, self->d->end_us > 0 ? self->d->end_us : 1);
}

static void em_timeline_css_changed(GtkWidget *w, GtkCssStyleChange *change) {
  GTK_WIDGET_CLASS(em_timeline_parent_class)->css_changed(w, change);
  invalidate(EM_TIMELINE(w)); /* the text colour follows the style (dark or light) */
}

static void em_timeline_finalize(GObject *o) {
  EmTimeline *self = EM_TIMELINE(o);
  em_timeline_data_free(self->d);
  g_free(self->lane_y);
  g_clear_pointer(&self->cache, gsk_render_node_unref);
  G_OBJECT_CLASS(em_timeline_parent_class)->finalize(o);
}

static void em_timeline_class_init(EmTimelineClass *klass) {
  G_OBJECT_CLASS(klass)->finalize = em_timeline_finalize;
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  wc->snapshot = em_timeline_snapshot;
  wc->measure = em_timeline_measure;
  wc->query_tooltip = em_timeline_query_tooltip;
  wc->css_changed = em_timeline_css_changed;
  gtk_widget_class_set_css_name(wc, "timeline");
}

static void em_timeline_init(EmTimeline *self) {
  self->d = data_new();
  self->v1 = 1;
  gtk_widget_set_has_tooltip(GTK_WIDGET(self), TRUE);
  GtkEventController *sc = gtk_event_controller_scroll_new(GTK_EVENT_CONTROLLER_SCROLL_VERTICAL);
  g_signal_connect(sc, "scroll", G_CALLBACK(on_scroll), self);
  gtk_widget_add_controller(GTK_WIDGET(self), sc);
  GtkGesture *drag = gtk_gesture_drag_new();
  g_signal_connect(drag, "drag-begin", G_CALLBACK(on_drag_begin), self);
  g_signal_connect(drag, "drag-update", G_CALLBACK(on_drag_update), self);
  gtk_widget_add_controller(GTK_WIDGET(self), GTK_EVENT_CONTROLLER(drag));
  GtkGesture *click = gtk_gesture_click_new();
  g_signal_connect(click, "pressed", G_CALLBACK(on_click), self);
  gtk_widget_add_controller(GTK_WIDGET(self), GTK_EVENT_CONTROLLER(click));
}

GtkWidget *em_timeline_new(void) { return g_object_new(EM_TYPE_TIMELINE, NULL); }
