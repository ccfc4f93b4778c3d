/* em-deploy-page.c: see the header. The server is a child process (its
 * stdout's "ready at http://..." line gives the address; its stderr
 * lines are the events); /metrics is fetched on a worker thread (a plain
 * HTTP/1.0 GET over GIO's socket client, 2 s at most) and parsed there,
 * the widgets touched only here, on the main thread. */
#include "em-deploy-page.h"

#include <math.h>
#include <signal.h>
#include <string.h>

#include "em-line-chart.h"
#include "em-wheel-guard.h"

#define MAX_EVENTS 40

struct _EmDeployPage {
  GtkBox parent_instance;
  GtkEntry *model_entry, *canary_entry;
  GtkSpinButton *port_spin, *share_spin, *p99_spin, *err_spin, *acc_spin;
  GtkButton *start_button, *stop_button;
  GtkLabel *status_label, *events_label;
  GtkGrid *table_grid;
  GtkFrame *chart_frame;
  EmLineChart *chart;
  int series[2];
  EmAppState *state;

  GSubprocess *proc;
  GCancellable *cancel; /* the child's pipes and the scrapes */
  GDataInputStream *out, *err;
  char *url, *host;
  int port;
  GQueue events;
  guint tick;
  gboolean scraping;
  EmScrape last, prev;
  gboolean have_last;
  gint64 last_us, started_us;
  int n_scrapes;
  char *row_text[2];
};

G_DEFINE_FINAL_TYPE(EmDeployPage, em_deploy_page, GTK_TYPE_BOX)

static void set_status(EmDeployPage *self, const char *text) {
  gtk_label_set_text(self->status_label, text);
}

static void add_event(EmDeployPage *self, const char *line) {
  g_queue_push_tail(&self->events, g_strdup(line));
  while (g_queue_get_length(&self->events) > MAX_EVENTS) g_free(g_queue_pop_head(&self->events));
  GString *s = g_string_new(NULL);
  for (GList *l = self->events.head; l; l = l->next)
    g_string_append_printf(s, "%s%s", s->len ? "\n" : "", (const char *)l->data);
  gtk_label_set_text(self->events_label, s->str);
  g_string_free(s, TRUE);
}

/* ---- the table --------------------------------------------------------------- */

static void cell(EmDeployPage *self, int col, int row, const char *text, gboolean bad) {
  GtkWidget *l = gtk_label_new(text);
  gtk_label_set_xalign(GTK_LABEL(l), col >= 2 ? 1 : 0);
  if (row == 0) gtk_widget_add_css_class(l, "heading");
  if (bad) gtk_widget_add_css_class(l, "error");
  gtk_grid_attach(self->table_grid, l, col, row, 1, 1);
}

static void ms_text(double s, char *buf, size_t cap) {
  if (isnan(s)) g_strlcpy(buf, "-", cap);
  else g_snprintf(buf, cap, "%.2f", s * 1e3);
}

static void fill_table(EmDeployPage *self, double dt) {
  GtkWidget *c;
  while ((c = gtk_widget_get_first_child(GTK_WIDGET(self->table_grid))))
    gtk_grid_remove(self->table_grid, c);
  static const char *const heads[] = {"Version", "Role",   "Share",    "req/s",    "p50 ms",
                                      "p95 ms",  "p99 ms", "Errors",   "Accuracy", "Drift"};
  for (int i = 0; i < 10; i++) cell(self, i, 0, heads[i], FALSE);
  int row = 1;
  for (int r = 0; r < 2; r++) {
    g_clear_pointer(&self->row_text[r], g_free);
    const EmScrapeRole *now = &self->last.role[r], *before = &self->prev.role[r];
    if (!now->version[0]) continue;
    gboolean same = !strcmp(now->version, before->version);
    double rate = same && dt > 0 ? (now->requests - before->requests) / dt : NAN;
    double share = r ? self->last.canary_share : 1 - self->last.canary_share;
    char t[10][64];
    g_snprintf(t[0], 64, "v%s", now->version);
    g_strlcpy(t[1], r ? "canary" : "stable", 64);
    g_snprintf(t[2], 64, "%.1f%%", 100 * share);
    if (isnan(rate)) g_strlcpy(t[3], "-", 64);
    else g_snprintf(t[3], 64, "%.1f", rate);
    ms_text(em_scrape_quantile(before, now, 0.50), t[4], 64);
    ms_text(em_scrape_quantile(before, now, 0.95), t[5], 64);
    ms_text(em_scrape_quantile(before, now, 0.99), t[6], 64);
    g_snprintf(t[7], 64, "%.0f of %.0f", now->errors, now->requests);
    if (isnan(now->accuracy)) g_strlcpy(t[8], "no feedback", 64);
    else g_snprintf(t[8], 64, "%.1f%%", 100 * now->accuracy);
    if (isnan(now->drift_psi_max)) g_strlcpy(t[9], now->drift_detected < 0 ? "-" : "ok", 64);
    else g_snprintf(t[9], 64, "%s (PSI %.2f %s)", now->drift_detected > 0 ? "DRIFT" : "ok",
                    now->drift_psi_max, now->drift_worst);
    GString *joined = g_string_new(NULL);
    for (int i = 0; i < 10; i++) {
      gboolean bad = (i == 2 && r == 1 && share == 0 && self->last.canary_rollbacks > 0) ||
                     (i == 9 && now->drift_detected > 0);
      cell(self, i, row, t[i], bad);
      g_string_append_printf(joined, "%s%s", i ? " | " : "", t[i]);
    }
    self->row_text[r] = g_string_free(joined, FALSE);
    if (!isnan(rate)) {
      double x = (double)(g_get_monotonic_time() - self->started_us) / G_USEC_PER_SEC;
      em_line_chart_append(self->chart, self->series[r], &x, &rate, 1);
    }
    row++;
  }
}

/* ---- scraping ------------------------------------------------------------------ */

/* Worker thread: GET /metrics, the body (NULL on any failure). */
static void scrape_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel) {
  (void)source;
  EmDeployPage *self = data;
  GSocketClient *client = g_socket_client_new();
  g_socket_client_set_timeout(client, 2);
  GSocketConnection *conn = g_socket_client_connect_to_host(client, self->host,
                                                            (guint16)self->port, cancel, NULL);
  GString *buf = NULL;
  if (conn) {
    char req[256];
    g_snprintf(req, sizeof req, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", self->host);
    GOutputStream *os = g_io_stream_get_output_stream(G_IO_STREAM(conn));
    GInputStream *is = g_io_stream_get_input_stream(G_IO_STREAM(conn));
    if (g_output_stream_write_all(os, req, strlen(req), NULL, cancel, NULL)) {
      buf = g_string_new(NULL);
      char chunk[16384];
      gssize n;
      while ((n = g_input_stream_read(is, chunk, sizeof chunk, cancel, NULL)) > 0)
        g_string_append_len(buf, chunk, n);
    }
    g_object_unref(conn);
  }
  g_object_unref(client);
  const char *body = buf ? strstr(buf->str, "\r\n\r\n") : NULL;
  EmScrape *s = NULL;
  if (body && g_str_has_prefix(buf->str, "HTTP/1.") && strstr(buf->str, " 200 ")) {
    s = g_new(EmScrape, 1);
    em_scrape_parse(body + 4, s);
  }
  if (buf) g_string_free(buf, TRUE);
  g_task_return_pointer(task, s, g_free);
}

static void scrape_done(GObject *source, GAsyncResult *res, gpointer data) {
  (void)data;
  EmDeployPage *self = EM_DEPLOY_PAGE(source);
  EmScrape *s = g_task_propagate_pointer(G_TASK(res), NULL);
  self->scraping = FALSE;
  if (!s) return;
  gint64 now = g_get_monotonic_time();
  double dt = self->have_last ? (double)(now - self->last_us) / G_USEC_PER_SEC : 0;
  self->prev = self->have_last ? self->last : *s;
  self->last = *s;
  self->have_last = TRUE;
  self->last_us = now;
  self->n_scrapes++;
  g_free(s);
  fill_table(self, dt);
}

static gboolean tick(gpointer data) {
  EmDeployPage *self = data;
  if (!self->url || self->scraping) return G_SOURCE_CONTINUE;
  self->scraping = TRUE;
  GTask *t = g_task_new(self, self->cancel, scrape_done, NULL);
  g_task_set_task_data(t, self, NULL);
  g_task_run_in_thread(t, scrape_thread);
  g_object_unref(t);
  return G_SOURCE_CONTINUE;
}

/* ---- the child ------------------------------------------------------------------ */

static void read_out(EmDeployPage *self);
static void read_err(EmDeployPage *self);

static void on_out_line(GObject *src, GAsyncResult *res, gpointer data) {
  char *line = g_data_input_stream_read_line_finish(G_DATA_INPUT_STREAM(src), res, NULL, NULL);
  if (!line) return; /* closed or cancelled: data may be gone */
  EmDeployPage *self = data;
  const char *at = strstr(line, " ready at http://");
  if (at && !self->url) {
    const char *hp = at + strlen(" ready at http://");
    const char *colon = strrchr(hp, ':'), *end = colon ? strchr(colon, ' ') : NULL;
    if (colon) {
      self->host = g_strndup(hp, (gsize)(colon - hp));
      if (self->host[0] == '[') { /* [::1] */
        char *h = g_strndup(self->host + 1, strlen(self->host) - 2);
        g_free(self->host);
        self->host = h;
      }
      self->port = atoi(colon + 1);
      self->url = g_strdup_printf("http://%.*s", end ? (int)(end - hp) : (int)strlen(hp), hp);
      char *st = g_strdup_printf("Serving %s", line + strlen("ember serve: "));
      set_status(self, st);
      g_free(st);
      self->started_us = g_get_monotonic_time();
      tick(self);
    }
  }
  g_free(line);
  read_out(self);
}

static void on_err_line(GObject *src, GAsyncResult *res, gpointer data) {
  char *line = g_data_input_stream_read_line_finish(G_DATA_INPUT_STREAM(src), res, NULL, NULL);
  if (!line) return;
  EmDeployPage *self = data;
  add_event(self, g_str_has_prefix(line, "ember serve: ") ? line + 13
                  : g_str_has_prefix(line, "ember: ")     ? line + 7
                                                          : line);
  g_free(line);
  read_err(self);
}

static void read_out(EmDeployPage *self) {
  g_data_input_stream_read_line_async(self->out, G_PRIORITY_DEFAULT, self->cancel, on_out_line,
                                      self);
}

static void read_err(EmDeployPage *self) {
  g_data_input_stream_read_line_async(self->err, G_PRIORITY_DEFAULT, self->cancel, on_err_line,
                                      self);
}

static void set_running(EmDeployPage *self, gboolean running) {
  gtk_widget_set_sensitive(GTK_WIDGET(self->start_button), !running);
  gtk_widget_set_sensitive(GTK_WIDGET(self->stop_button), running);
}

static void on_exited(GObject *src, GAsyncResult *res, gpointer data) {
  GSubprocess *p = G_SUBPROCESS(src);
  if (!g_subprocess_wait_finish(p, res, NULL)) return; /* cancelled: the page is going */
  EmDeployPage *self = data;
  if (self->proc != p) return;
  int code = g_subprocess_get_if_exited(p) ? g_subprocess_get_exit_status(p) : -1;
  char *st = code == 0 ? g_strdup("The server stopped.")
                       : g_strdup_printf("The server ended (%s %d): see its messages below.",
                                         code < 0 ? "signal" : "exit status",
                                         code < 0 ? g_subprocess_get_term_sig(p) : code);
  set_status(self, st);
  g_free(st);
  g_clear_object(&self->proc);
  g_clear_pointer(&self->url, g_free);
  set_running(self, FALSE);
}

static char *cli_path(void) {
  const char *cli = g_getenv("EMBER_CLI");
  if (cli) return g_strdup(cli);
  char *me = g_file_read_link("/proc/self/exe", NULL);
  char *dir = me ? g_path_get_dirname(me) : NULL;
  char *exe = dir ? g_build_filename(dir, "ember", NULL) : NULL;
  g_free(me);
  g_free(dir);
  return exe;
}

void em_deploy_page_start(EmDeployPage *self) {
  if (self->proc) return;
  const char *model = gtk_editable_get_text(GTK_EDITABLE(self->model_entry));
  const char *canary = gtk_editable_get_text(GTK_EDITABLE(self->canary_entry));
  if (!strchr(model, '@')) {
    set_status(self, "Name a registered model as NAME@ALIAS or NAME@VERSION (Registry page).");
    return;
  }
  char *cli = cli_path();
  GPtrArray *argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(cli ? cli : "ember"));
  g_ptr_array_add(argv, g_strdup("serve"));
  g_ptr_array_add(argv, g_strdup(model));
  g_ptr_array_add(argv, g_strdup("--port"));
  g_ptr_array_add(argv, g_strdup_printf("%d", gtk_spin_button_get_value_as_int(self->port_spin)));
  const char *reg = self->state ? em_app_state_get_registry_dir(self->state) : NULL;
  if (reg && *reg) {
    g_ptr_array_add(argv, g_strdup("--registry"));
    g_ptr_array_add(argv, g_strdup(reg));
  }
  if (*canary) {
    g_ptr_array_add(argv, g_strdup("--canary"));
    g_ptr_array_add(argv, g_strdup_printf("%s:%g%%", canary,
                                          gtk_spin_button_get_value(self->share_spin)));
    double p99 = gtk_spin_button_get_value(self->p99_spin),
           er = gtk_spin_button_get_value(self->err_spin),
           acc = gtk_spin_button_get_value(self->acc_spin);
    const char *flags[3] = {"--slo-p99-ms", "--slo-error-rate", "--slo-min-accuracy"};
    double vals[3] = {p99, er, acc};
    for (int i = 0; i < 3; i++)
      if (vals[i] > 0) {
        g_ptr_array_add(argv, g_strdup(flags[i]));
        g_ptr_array_add(argv, g_strdup_printf("%g", vals[i]));
      }
  }
  g_ptr_array_add(argv, NULL);
  GError *error = NULL;
  self->proc = g_subprocess_newv((const char *const *)argv->pdata,
                                 G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE,
                                 &error);
  char *cmd = g_strjoinv(" ", (char **)argv->pdata);
  g_ptr_array_unref(argv);
  g_free(cli);
  if (!self->proc) {
    char *st = g_strdup_printf("Could not start `%s`: %s", cmd, error->message);
    set_status(self, st);
    g_free(st);
    g_free(cmd);
    g_clear_error(&error);
    return;
  }
  g_queue_clear_full(&self->events, g_free);
  add_event(self, cmd);
  char *st = g_strdup_printf("Starting the server (process %s)…",
                             g_subprocess_get_identifier(self->proc));
  set_status(self, st);
  g_free(st);
  g_free(cmd);
  g_clear_object(&self->cancel);
  self->cancel = g_cancellable_new();
  g_clear_object(&self->out);
  g_clear_object(&self->err);
  self->out = g_data_input_stream_new(g_subprocess_get_stdout_pipe(self->proc));
  self->err = g_data_input_stream_new(g_subprocess_get_stderr_pipe(self->proc));
  read_out(self);
  read_err(self);
  g_subprocess_wait_async(self->proc, self->cancel, on_exited, self);
  self->have_last = FALSE;
  self->n_scrapes = 0;
  em_line_chart_clear(self->chart);
  GdkRGBA a = {0.21f, 0.52f, 0.89f, 1}, b = {0.90f, 0.45f, 0.10f, 1};
  self->series[0] = em_line_chart_add_series(self->chart, "stable req/s", &a);
  self->series[1] = em_line_chart_add_series(self->chart, "canary req/s", &b);
  set_running(self, TRUE);
}

void em_deploy_page_stop(EmDeployPage *self) {
  if (!self->proc) return;
  set_status(self, "Stopping: the server answers what is in flight, then exits…");
  g_subprocess_send_signal(self->proc, SIGTERM);
}

/* ---- accessors -------------------------------------------------------------------- */

void em_deploy_page_set_form(EmDeployPage *self, const char *model, const char *canary,
                             double share_pct, double p99_ms, double error_rate,
                             double min_accuracy, int port) {
  gtk_editable_set_text(GTK_EDITABLE(self->model_entry), model ? model : "");
  gtk_editable_set_text(GTK_EDITABLE(self->canary_entry), canary ? canary : "");
  gtk_spin_button_set_value(self->share_spin, share_pct);
  gtk_spin_button_set_value(self->p99_spin, p99_ms);
  gtk_spin_button_set_value(self->err_spin, error_rate > 0 ? error_rate : 0);
  gtk_spin_button_set_value(self->acc_spin, min_accuracy);
  gtk_spin_button_set_value(self->port_spin, port);
}

gboolean em_deploy_page_is_running(EmDeployPage *self) { return self->proc != NULL; }
const char *em_deploy_page_get_url(EmDeployPage *self) { return self->url; }
const EmScrape *em_deploy_page_get_scrape(EmDeployPage *self) {
  return self->have_last ? &self->last : NULL;
}
int em_deploy_page_get_n_scrapes(EmDeployPage *self) { return self->n_scrapes; }
const char *em_deploy_page_get_status(EmDeployPage *self) {
  return gtk_label_get_text(self->status_label);
}
const char *em_deploy_page_get_events(EmDeployPage *self) {
  return gtk_label_get_text(self->events_label);
}
char *em_deploy_page_dup_row_text(EmDeployPage *self, int role) {
  return role >= 0 && role < 2 ? g_strdup(self->row_text[role]) : NULL;
}

/* ---- the GObject ------------------------------------------------------------------- */

static void em_deploy_page_dispose(GObject *obj) {
  EmDeployPage *self = EM_DEPLOY_PAGE(obj);
  g_clear_handle_id(&self->tick, g_source_remove);
  if (self->cancel) g_cancellable_cancel(self->cancel);
  if (self->proc) { /* the page goes: so does its server, drained */
    g_subprocess_send_signal(self->proc, SIGTERM);
    g_subprocess_wait(self->proc, NULL, NULL);
    g_clear_object(&self->proc);
  }
  g_clear_object(&self->out);
  g_clear_object(&self->err);
  g_clear_object(&self->cancel);
  g_clear_object(&self->state);
  gtk_widget_dispose_template(GTK_WIDGET(obj), EM_TYPE_DEPLOY_PAGE);
  G_OBJECT_CLASS(em_deploy_page_parent_class)->dispose(obj);
}

static void em_deploy_page_finalize(GObject *obj) {
  EmDeployPage *self = EM_DEPLOY_PAGE(obj);
  g_queue_clear_full(&self->events, g_free);
  g_free(self->url);
  g_free(self->host);
  g_free(self->row_text[0]);
  g_free(self->row_text[1]);
  G_OBJECT_CLASS(em_deploy_page_parent_class)->finalize(obj);
}

static void em_deploy_page_class_init(EmDeployPageClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  oc->dispose = em_deploy_page_dispose;
  oc->finalize = em_deploy_page_finalize;
  gtk_widget_class_set_template_from_resource(wc, "/org/ember/Workbench/deploy/em-deploy-page.ui");
  gtk_widget_class_bind_template_child(wc, EmDeployPage, model_entry);
  gtk_widget_class_bind_template_child(wc, EmDeployPage, canary_entry);
  gtk_widget_class_bind_template_child(wc, EmDeployPage, port_spin);
  gtk_widget_class_bind_template_child(wc, EmDeployPage, share_spin);
  gtk_widget_class_bind_template_child(wc, EmDeployPage, p99_spin);
  gtk_widget_class_bind_template_child(wc, EmDeployPage, err_spin);
  gtk_widget_class_bind_template_child(wc, EmDeployPage, acc_spin);
  gtk_widget_class_bind_template_child(wc, EmDeployPage, start_button);
  gtk_widget_class_bind_template_child(wc, EmDeployPage, stop_button);
  gtk_widget_class_bind_template_child(wc, EmDeployPage, status_label);
  gtk_widget_class_bind_template_child(wc, EmDeployPage, events_label);
  gtk_widget_class_bind_template_child(wc, EmDeployPage, table_grid);
  gtk_widget_class_bind_template_child(wc, EmDeployPage, chart_frame);
}

static void on_start_clicked(GtkButton *b, EmDeployPage *self) {
  (void)b;
  em_deploy_page_start(self);
}

static void on_stop_clicked(GtkButton *b, EmDeployPage *self) {
  (void)b;
  em_deploy_page_stop(self);
}

static void em_deploy_page_init(EmDeployPage *self) {
  gtk_widget_init_template(GTK_WIDGET(self));
  g_queue_init(&self->events);
  self->chart = EM_LINE_CHART(em_line_chart_new());
  em_line_chart_set_title(self->chart, "Requests per second, by role");
  em_line_chart_set_x_label(self->chart, "seconds");
  em_line_chart_set_y_label(self->chart, "req/s");
  gtk_widget_set_vexpand(GTK_WIDGET(self->chart), TRUE);
  gtk_frame_set_child(self->chart_frame, GTK_WIDGET(self->chart));
  em_wheel_guard_all(GTK_WIDGET(self)); /* the spin buttons take the wheel only when focused */
  g_signal_connect_object(self->start_button, "clicked", G_CALLBACK(on_start_clicked), self, 0);
  g_signal_connect_object(self->stop_button, "clicked", G_CALLBACK(on_stop_clicked), self, 0);
  self->tick = g_timeout_add(1000, tick, self);
}

GtkWidget *em_deploy_page_new(EmAppState *state) {
  EmDeployPage *self = g_object_new(EM_TYPE_DEPLOY_PAGE, NULL);
  self->state = state ? g_object_ref(state) : NULL;
  return GTK_WIDGET(self);
}
