/* em-devices-panel.c: see the header. One GtkListBox row per device, made
 * again when the list of devices may have changed (the reference device
 * is offered or not); a refresh only rewrites the rows' labels. */
#include "em-cpu.h"
#include "em-devices-panel.h"

#include "em-devices.h"

typedef struct {
  GtkLabel *title, *detail, *memory, *usage;
} DeviceRow;

struct _EmDevicesPanel {
  GtkBox parent_instance;
  GtkListBox *list;
  GtkLabel *note_label;
  GtkButton *refresh_button;
  EmAppState *state;
  GArray *devices; /* EmDeviceEntry */
  GArray *rows;    /* DeviceRow, parallel to devices */
  gboolean with_ref;
  gboolean run_seen; /* a run started while the panel was up */
  char *note;
  gint64 refreshed_us;
};

G_DEFINE_FINAL_TYPE(EmDevicesPanel, em_devices_panel, GTK_TYPE_BOX)

static gboolean offer_ref(EmDevicesPanel *self) {
  if (em_devices_show_ref()) return TRUE;
  if (!self->state) return FALSE;
  return em_app_state_get_device(self->state).kind == EM_DEVICE_REF ||
         em_app_state_get_run_device(self->state).kind == EM_DEVICE_REF;
}

/* The run's device, when a run has started in this workbench. */
static gboolean run_device(EmDevicesPanel *self, em_device *out, gboolean *running) {
  if (!self->state || !self->run_seen) return FALSE;
  *out = em_app_state_get_run_device(self->state);
  *running = em_app_state_is_training(self->state);
  return TRUE;
}

static GtkLabel *row_label(GtkBox *box, const char *css) {
  GtkWidget *l = gtk_label_new(NULL);
  gtk_label_set_xalign(GTK_LABEL(l), 0);
  gtk_label_set_wrap(GTK_LABEL(l), TRUE);
  gtk_label_set_selectable(GTK_LABEL(l), TRUE);
  if (css) gtk_widget_add_css_class(l, css);
  gtk_box_append(box, l);
  return GTK_LABEL(l);
}

static void rebuild_rows(EmDevicesPanel *self) {
  GtkWidget *c;
  while ((c = gtk_widget_get_first_child(GTK_WIDGET(self->list))))
    gtk_list_box_remove(self->list, c);
  g_array_set_size(self->rows, 0);
  for (guint i = 0; i < self->devices->len; i++) {
    GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 2);
    gtk_widget_set_margin_start(box, 8);
    gtk_widget_set_margin_end(box, 8);
    gtk_widget_set_margin_top(box, 6);
    gtk_widget_set_margin_bottom(box, 6);
    DeviceRow r = {
        .title = row_label(GTK_BOX(box), "heading"),
        .detail = row_label(GTK_BOX(box), "dim-label"),
        .memory = row_label(GTK_BOX(box), "numeric"),
        .usage = row_label(GTK_BOX(box), "numeric"),
    };
    g_array_append_val(self->rows, r);
    gtk_list_box_append(self->list, box);
  }
}

static void fill_row(EmDevicesPanel *self, guint i, gboolean have_run, em_device rd,
                     gboolean running) {
  const EmDeviceEntry *e = &g_array_index(self->devices, EmDeviceEntry, i);
  DeviceRow *r = &g_array_index(self->rows, DeviceRow, i);
  gboolean in_use = have_run && em_device_eq(rd, e->device);
  const char *name = e->info.name;
  char *title = g_strdup_printf("%s%s%s%s", e->id, e->info_ok && name[0] ? " · " : "",
                                e->info_ok ? name : "",
                                in_use ? (running ? " — training now" : " — last run") : "");
  gtk_label_set_text(r->title, title);
  g_free(title);

  GString *detail = g_string_new(NULL);
  if (!e->info_ok) {
    g_string_append(detail, e->info_error[0] ? e->info_error : "no information");
  } else if (e->device.kind == EM_DEVICE_CUDA) {
    g_string_append_printf(detail, "compute capability %d.%d", e->info.compute_major,
                           e->info.compute_minor);
    if (e->info.multiprocessors > 0)
      g_string_append_printf(detail, " · %d multiprocessors", e->info.multiprocessors);
    if (e->info.bf16 || e->info.f16)
      g_string_append_printf(detail, " · fast %s%s%s", e->info.bf16 ? "bf16" : "",
                             e->info.bf16 && e->info.f16 ? ", " : "", e->info.f16 ? "f16" : "");
  } else if (e->device.kind == EM_DEVICE_CPU) {
    char kernels[256];
    em_cpu_kernels_describe(kernels, sizeof kernels);
    g_string_append_printf(detail, "%u hardware threads · %s", g_get_num_processors(), kernels);
  } else {
    g_string_append(detail, "the device code path run on the host: slow, for tests");
  }
  gtk_label_set_text(r->detail, detail->str);
  g_string_free(detail, TRUE);

  if (e->info_ok && e->info.total_bytes > 0) {
    char *total = em_devices_format_bytes(e->info.total_bytes);
    char *free_ = em_devices_format_bytes(e->info.free_bytes);
    char *mem = g_strdup_printf("memory %s total · %s free", total, free_);
    gtk_label_set_text(r->memory, mem);
    g_free(mem);
    g_free(total);
    g_free(free_);
    gtk_widget_set_visible(GTK_WIDGET(r->memory), TRUE);
  } else {
    gtk_widget_set_visible(GTK_WIDGET(r->memory), FALSE);
  }

  if (in_use) {
    em_memory_stats ms;
    em_device_memory_stats(e->device, &ms);
    char *a = em_devices_format_bytes(ms.allocated_bytes);
    char *rv = em_devices_format_bytes(ms.reserved_bytes);
    char *p = em_devices_format_bytes(ms.peak_allocated_bytes);
    char *u = g_strdup_printf("%s: allocated %s · reserved %s · peak %s",
                              running ? "this run" : "now, after the last run", a, rv, p);
    gtk_label_set_text(r->usage, u);
    g_free(u);
    g_free(a);
    g_free(rv);
    g_free(p);
    gtk_widget_set_visible(GTK_WIDGET(r->usage), TRUE);
  } else {
    gtk_label_set_text(r->usage, "");
    gtk_widget_set_visible(GTK_WIDGET(r->usage), FALSE);
  }
}

void em_devices_panel_refresh(EmDevicesPanel *self) {
  gboolean with_ref = offer_ref(self);
  if (!self->devices || with_ref != self->with_ref) {
    if (self->devices) g_array_unref(self->devices);
    self->with_ref = with_ref;
    self->devices = em_devices_list(with_ref);
    rebuild_rows(self);
    g_free(self->note); /* the CUDA devices do not come and go: asked with the list */
    char *why = em_devices_cuda_note();
    self->note = why ? g_strdup_printf("No CUDA device found: %s.", why) : NULL;
    g_free(why);
    gtk_label_set_text(self->note_label, self->note ? self->note : "");
    gtk_widget_set_visible(GTK_WIDGET(self->note_label), self->note != NULL);
  } else {
    for (guint i = 0; i < self->devices->len; i++)
      em_devices_refresh(&g_array_index(self->devices, EmDeviceEntry, i));
  }
  em_device rd = em_device_cpu();
  gboolean running = FALSE;
  gboolean have_run = run_device(self, &rd, &running);
  for (guint i = 0; i < self->devices->len; i++) fill_row(self, i, have_run, rd, running);
  self->refreshed_us = g_get_monotonic_time();
}

guint em_devices_panel_get_n_devices(EmDevicesPanel *self) { return self->devices->len; }

const char *em_devices_panel_get_id(EmDevicesPanel *self, guint i) {
  return i < self->devices->len ? g_array_index(self->devices, EmDeviceEntry, i).id : NULL;
}

char *em_devices_panel_get_text(EmDevicesPanel *self, guint i) {
  if (i >= self->rows->len) return NULL;
  DeviceRow *r = &g_array_index(self->rows, DeviceRow, i);
  GtkLabel *labels[] = {r->title, r->detail, r->memory, r->usage};
  GString *s = g_string_new(NULL);
  for (size_t k = 0; k < G_N_ELEMENTS(labels); k++) {
    if (!gtk_widget_get_visible(GTK_WIDGET(labels[k]))) continue;
    if (s->len) g_string_append_c(s, '\n');
    g_string_append(s, gtk_label_get_text(labels[k]));
  }
  return g_string_free(s, FALSE);
}

const char *em_devices_panel_get_note(EmDevicesPanel *self) { return self->note; }

/* ---- signals ------------------------------------------------------------ */

static void on_run_started(EmAppState *state, gint64 run_id, EmDevicesPanel *self) {
  (void)state;
  (void)run_id;
  self->run_seen = TRUE;
  em_devices_panel_refresh(self);
}

static void on_run_finished(EmAppState *state, gint64 run_id, int status, const char *msg,
                            EmDevicesPanel *self) {
  (void)state;
  (void)run_id;
  (void)status;
  (void)msg;
  em_devices_panel_refresh(self);
}

static void on_progress(EmAppState *state, gpointer update, EmDevicesPanel *self) {
  (void)state;
  (void)update;
  /* at most once a second, and only on screen: a refresh asks every device
   * for its free memory (for CUDA, a context on each) */
  if (gtk_widget_get_mapped(GTK_WIDGET(self)) &&
      g_get_monotonic_time() - self->refreshed_us > G_USEC_PER_SEC)
    em_devices_panel_refresh(self);
}

static void on_device_changed(EmAppState *state, EmDevicesPanel *self) {
  (void)state;
  em_devices_panel_refresh(self);
}

static void on_refresh_clicked(GtkButton *b, EmDevicesPanel *self) {
  (void)b;
  em_devices_panel_refresh(self);
}

/* ---- the widget ------------------------------------------------------------ */

static void em_devices_panel_dispose(GObject *obj) {
  EmDevicesPanel *self = EM_DEVICES_PANEL(obj);
  g_clear_object(&self->state);
  gtk_widget_dispose_template(GTK_WIDGET(obj), EM_TYPE_DEVICES_PANEL);
  G_OBJECT_CLASS(em_devices_panel_parent_class)->dispose(obj);
}

static void em_devices_panel_finalize(GObject *obj) {
  EmDevicesPanel *self = EM_DEVICES_PANEL(obj);
  if (self->devices) g_array_unref(self->devices);
  g_array_unref(self->rows);
  g_free(self->note);
  G_OBJECT_CLASS(em_devices_panel_parent_class)->finalize(obj);
}

static void em_devices_panel_class_init(EmDevicesPanelClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  oc->dispose = em_devices_panel_dispose;
  oc->finalize = em_devices_panel_finalize;
  gtk_widget_class_set_template_from_resource(wc,
                                              "/org/ember/Workbench/profile/em-devices-panel.ui");
  gtk_widget_class_bind_template_child(wc, EmDevicesPanel, list);
  gtk_widget_class_bind_template_child(wc, EmDevicesPanel, note_label);
  gtk_widget_class_bind_template_child(wc, EmDevicesPanel, refresh_button);
}

static void em_devices_panel_init(EmDevicesPanel *self) {
  gtk_widget_init_template(GTK_WIDGET(self));
  self->rows = g_array_new(FALSE, TRUE, sizeof(DeviceRow));
  g_signal_connect_object(self->refresh_button, "clicked", G_CALLBACK(on_refresh_clicked), self,
                          0);
}

GtkWidget *em_devices_panel_new(EmAppState *state) {
  EmDevicesPanel *self = g_object_new(EM_TYPE_DEVICES_PANEL, NULL);
  self->state = state ? g_object_ref(state) : NULL;
  if (state) {
    g_signal_connect_object(state, "run-started", G_CALLBACK(on_run_started), self, 0);
    g_signal_connect_object(state, "run-finished", G_CALLBACK(on_run_finished), self, 0);
    g_signal_connect_object(state, "run-progress", G_CALLBACK(on_progress), self, 0);
    g_signal_connect_object(state, "device-changed", G_CALLBACK(on_device_changed), self, 0);
  }
  em_devices_panel_refresh(self);
  return GTK_WIDGET(self);
}
