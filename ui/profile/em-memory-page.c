/* em-memory-page.c: see the header. The chart is ui/chart's EmLineChart
 * (every point kept, decimated for display); the y axis is in MiB. */
#include "em-memory-page.h"

#include "em-devices-panel.h"
#include "em-devices.h"
#include "em-line-chart.h"
#include "em-profile.h"
#include "em-tensor.h"

#define MIB (1024.0 * 1024.0)

struct _EmMemoryPage {
  GtkBox parent_instance;
  GtkLabel *now_label, *warning_label, *summary_label;
  GtkFrame *chart_frame;
  GtkBox *devices_box;
  GtkToggleButton *log_toggle;
  EmLineChart *chart;
  GtkWidget *devices; /* EmDevicesPanel */
  EmAppState *state;
  em_device device;   /* the run's (or, before a run, the chosen) device */
  char *device_name;  /* its display name: "cuda:0 · NVIDIA H200", "CPU" */
  int s_alloc, s_reserved, s_peak;
  gint64 n_points, last_alloc, last_reserved, last_peak;
  gint64 last_summary_us;
  guint leak_timer;
  char *warning;
};

G_DEFINE_FINAL_TYPE(EmMemoryPage, em_memory_page, GTK_TYPE_BOX)

static void add_series(EmMemoryPage *self) {
  em_line_chart_clear(self->chart);
  GdkRGBA a = {0.21f, 0.52f, 0.89f, 1}, r = {0.15f, 0.64f, 0.41f, 1}, p = {0.88f, 0.11f, 0.14f, 1};
  self->s_alloc = em_line_chart_add_series(self->chart, "allocated", &a);
  self->s_reserved = em_line_chart_add_series(self->chart, "reserved", &r);
  /* the peak often equals the reserve: dashed over it, both show */
  self->s_peak = em_line_chart_add_series(self->chart, "peak", &p);
  em_line_chart_set_series_dashed(self->chart, self->s_peak, TRUE);
  self->n_points = 0;
}

/* The device whose memory the page shows, named in the chart's title. */
static void set_device(EmMemoryPage *self, em_device d) {
  self->device = d;
  g_free(self->device_name);
  self->device_name = em_devices_display_name(d);
  char *title = em_device_is_cpu(d) ? g_strdup("Memory (CPU allocator)")
                                    : g_strdup_printf("Memory (%s)", self->device_name);
  em_line_chart_set_title(self->chart, title);
  g_free(title);
}

void em_memory_page_refresh(EmMemoryPage *self) {
  em_memory_stats ms;
  em_device_memory_stats(self->device, &ms);
  char id[16];
  em_device_str(self->device, id, sizeof id);
  char *txt = em_memory_summary(&ms, id);
  /* the figures now, not at a step: after a run, what the allocator keeps */
  char *now = g_strdup_printf("%s  (now, not at a step: after a run, what the allocator keeps "
                              "cached)",
                              txt ? txt : "(out of memory)");
  gtk_label_set_text(self->summary_label, now);
  g_free(now);
  free(txt);
  em_leak_report rep;
  if (em_leak_check(10, &rep)) {
    g_free(self->warning);
    self->warning = g_strdup(rep.message);
    gtk_label_set_text(self->warning_label, rep.message);
    gtk_widget_set_visible(GTK_WIDGET(self->warning_label), TRUE);
  }
  self->last_summary_us = g_get_monotonic_time();
}

static void on_progress(EmAppState *state, gpointer data, EmMemoryPage *self) {
  (void)state;
  const EmTrainUpdate *u = data;
  if (!u || u->n <= 0 || !u->mem_allocated) return;
  double *x = g_new(double, u->n), *y = g_new(double, u->n);
  const int64_t *src[3] = {u->mem_allocated, u->mem_reserved, u->mem_peak};
  int ids[3] = {self->s_alloc, self->s_reserved, self->s_peak};
  for (int s = 0; s < 3; s++) {
    if (!src[s]) continue;
    for (int i = 0; i < u->n; i++) {
      x[i] = (double)u->step[i];
      y[i] = (double)src[s][i] / MIB;
    }
    em_line_chart_append(self->chart, ids[s], x, y, u->n);
  }
  g_free(x);
  g_free(y);
  self->n_points += u->n;
  self->last_alloc = u->mem_allocated[u->n - 1];
  self->last_reserved = u->mem_reserved ? u->mem_reserved[u->n - 1] : 0;
  self->last_peak = u->mem_peak ? u->mem_peak[u->n - 1] : 0;
  /* at a step, not now: the summary below and the devices list say now */
  char *t = g_strdup_printf("%s · step %lld · allocated %.1f MiB · reserved %.1f MiB · "
                            "peak %.1f MiB",
                            self->device_name, (long long)u->step[u->n - 1],
                            (double)self->last_alloc / MIB, (double)self->last_reserved / MIB,
                            (double)self->last_peak / MIB);
  gtk_label_set_text(self->now_label, t);
  g_free(t);
  if (g_get_monotonic_time() - self->last_summary_us > G_USEC_PER_SEC) /* at most once a second */
    em_memory_page_refresh(self);
}

static gboolean leak_tick(gpointer data) {
  em_memory_page_refresh(data);
  return G_SOURCE_CONTINUE;
}

static void on_started(EmAppState *state, gint64 run_id, EmMemoryPage *self) {
  (void)run_id;
  set_device(self, em_app_state_get_run_device(state));
  add_series(self);
  char *t = g_strdup_printf("%s: waiting for the first step…", self->device_name);
  gtk_label_set_text(self->now_label, t);
  g_free(t);
  g_clear_pointer(&self->warning, g_free);
  gtk_widget_set_visible(GTK_WIDGET(self->warning_label), FALSE);
  if (!self->leak_timer) self->leak_timer = g_timeout_add_seconds(3, leak_tick, self);
}

static void on_finished(EmAppState *state, gint64 run_id, int status, const char *msg,
                        EmMemoryPage *self) {
  (void)state;
  (void)run_id;
  (void)status;
  (void)msg;
  g_clear_handle_id(&self->leak_timer, g_source_remove);
  em_memory_page_refresh(self);
}

/* Before a run, the page shows the device chosen for the next one. */
static void on_device_changed(EmAppState *state, EmMemoryPage *self) {
  if (em_app_state_is_training(state)) return;
  set_device(self, em_app_state_get_device(state));
  em_memory_page_refresh(self);
}

static void on_log_toggled(GtkToggleButton *b, EmMemoryPage *self) {
  em_line_chart_set_log_y(self->chart, gtk_toggle_button_get_active(b));
}

gint64 em_memory_page_get_n_points(EmMemoryPage *self) { return self->n_points; }
gint64 em_memory_page_get_last_allocated(EmMemoryPage *self) { return self->last_alloc; }
gint64 em_memory_page_get_last_peak(EmMemoryPage *self) { return self->last_peak; }
const char *em_memory_page_get_warning(EmMemoryPage *self) { return self->warning; }
const char *em_memory_page_get_device_name(EmMemoryPage *self) { return self->device_name; }
const char *em_memory_page_get_now_text(EmMemoryPage *self) {
  return gtk_label_get_text(self->now_label);
}
const char *em_memory_page_get_summary(EmMemoryPage *self) {
  return gtk_label_get_text(self->summary_label);
}
GtkWidget *em_memory_page_get_devices_panel(EmMemoryPage *self) { return self->devices; }

static void em_memory_page_dispose(GObject *obj) {
  EmMemoryPage *self = EM_MEMORY_PAGE(obj);
  g_clear_handle_id(&self->leak_timer, g_source_remove);
  g_clear_object(&self->state);
  gtk_widget_dispose_template(GTK_WIDGET(obj), EM_TYPE_MEMORY_PAGE);
  G_OBJECT_CLASS(em_memory_page_parent_class)->dispose(obj);
}

static void em_memory_page_finalize(GObject *obj) {
  g_free(EM_MEMORY_PAGE(obj)->warning);
  g_free(EM_MEMORY_PAGE(obj)->device_name);
  G_OBJECT_CLASS(em_memory_page_parent_class)->finalize(obj);
}

static void em_memory_page_class_init(EmMemoryPageClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  oc->dispose = em_memory_page_dispose;
  oc->finalize = em_memory_page_finalize;
  gtk_widget_class_set_template_from_resource(wc, "/org/ember/Workbench/profile/em-memory-page.ui");
  gtk_widget_class_bind_template_child(wc, EmMemoryPage, now_label);
  gtk_widget_class_bind_template_child(wc, EmMemoryPage, warning_label);
  gtk_widget_class_bind_template_child(wc, EmMemoryPage, summary_label);
  gtk_widget_class_bind_template_child(wc, EmMemoryPage, chart_frame);
  gtk_widget_class_bind_template_child(wc, EmMemoryPage, devices_box);
  gtk_widget_class_bind_template_child(wc, EmMemoryPage, log_toggle);
}

static void em_memory_page_init(EmMemoryPage *self) {
  gtk_widget_init_template(GTK_WIDGET(self));
  self->chart = EM_LINE_CHART(em_line_chart_new());
  em_line_chart_set_integer_x(self->chart, TRUE);
  em_line_chart_set_x_label(self->chart, "step");
  em_line_chart_set_y_label(self->chart, "MiB");
  gtk_widget_set_vexpand(GTK_WIDGET(self->chart), TRUE);
  gtk_widget_set_hexpand(GTK_WIDGET(self->chart), TRUE);
  gtk_frame_set_child(self->chart_frame, GTK_WIDGET(self->chart));
  set_device(self, em_device_cpu());
  add_series(self);
  g_signal_connect_object(self->log_toggle, "toggled", G_CALLBACK(on_log_toggled), self, 0);
  em_memory_page_refresh(self);
}

GtkWidget *em_memory_page_new(EmAppState *state) {
  EmMemoryPage *self = g_object_new(EM_TYPE_MEMORY_PAGE, NULL);
  self->state = state ? g_object_ref(state) : NULL;
  if (state) {
    g_signal_connect_object(state, "run-progress", G_CALLBACK(on_progress), self, 0);
    g_signal_connect_object(state, "run-started", G_CALLBACK(on_started), self, 0);
    g_signal_connect_object(state, "run-finished", G_CALLBACK(on_finished), self, 0);
    g_signal_connect_object(state, "device-changed", G_CALLBACK(on_device_changed), self, 0);
    em_device d = em_app_state_get_device(state);
    if (!em_device_eq(d, self->device)) { /* init showed the CPU */
      set_device(self, d);
      em_memory_page_refresh(self);
    }
  }
  self->devices = em_devices_panel_new(state);
  gtk_widget_set_vexpand(self->devices, TRUE);
  gtk_box_append(self->devices_box, self->devices);
  return GTK_WIDGET(self);
}
