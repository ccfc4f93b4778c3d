/* em-run-view.c: see the header. The epoch axis comes from the run's
 * "train_loss" points, one recorded at the end of each epoch: a step's
 * epoch is interpolated between the epoch ends around it (and goes on at
 * the last epoch's length after it). */
#include "em-run-view.h"

#include <math.h>
#include <string.h>

#include "em-export.h"
#include "em-line-chart.h"
#include "em-nn.h"
#include "em-store.h"

#ifndef EMBER_VERSION
#define EMBER_VERSION "unknown"
#endif

struct _EmRunView {
  GtkBox parent_instance;
  EmAppState *state;
  gint64 run;
  em_store *store; /* read-only, while the view lives */
  em_run row;
  gboolean have_row;
  GtkLabel *title, *status, *message;
  GtkDropDown *metric_dd, *axis_dd;
  EmLineChart *chart;
  GtkGrid *summary, *settings, *files, *identity;
  GtkListBox *events;
  GtkNotebook *tabs;
  char **metric_keys; /* the metric dropdown's entries */
  char *metric;
  int axis;           /* 0 step, 1 epoch, 2 time */
  gboolean loading;
};

G_DEFINE_FINAL_TYPE(EmRunView, em_run_view, GTK_TYPE_BOX)

static const char *const axis_names[] = {"step", "epoch", "time", NULL};

/* ---- small widgets -------------------------------------------------------------- */

static void set_message(EmRunView *self, const char *msg, gboolean error) {
  gtk_label_set_text(self->message, msg ? msg : "");
  if (error) gtk_widget_add_css_class(GTK_WIDGET(self->message), "error");
  else gtk_widget_remove_css_class(GTK_WIDGET(self->message), "error");
}

static void clear_grid(GtkGrid *g) {
  GtkWidget *c;
  while ((c = gtk_widget_get_first_child(GTK_WIDGET(g)))) gtk_grid_remove(g, c);
}

static GtkWidget *cell_label(const char *text, gboolean dim, gboolean select) {
  GtkWidget *l = gtk_label_new(text ? text : "");
  gtk_label_set_xalign(GTK_LABEL(l), 0);
  gtk_label_set_wrap(GTK_LABEL(l), TRUE);
  gtk_label_set_wrap_mode(GTK_LABEL(l), PANGO_WRAP_WORD_CHAR);
  gtk_label_set_selectable(GTK_LABEL(l), select);
  if (dim) gtk_widget_add_css_class(l, "dim-label");
  return l;
}

/* Appends a row of n cells to grid at *row. */
static void grid_row(GtkGrid *g, int *row, int n, const char *const *cells, gboolean header) {
  for (int c = 0; c < n; c++) {
    GtkWidget *l = cell_label(cells[c], header || c == 0, !header && c > 0);
    if (header) gtk_widget_add_css_class(l, "heading");
    gtk_grid_attach(g, l, c, *row, 1, 1);
  }
  (*row)++;
}

static GtkWidget *scrolled(GtkWidget *child) {
  GtkWidget *sw = gtk_scrolled_window_new();
  gtk_scrolled_window_set_policy(GTK_SCROLLED_WINDOW(sw), GTK_POLICY_AUTOMATIC, GTK_POLICY_AUTOMATIC);
  gtk_widget_set_vexpand(sw, TRUE);
  gtk_scrolled_window_set_child(GTK_SCROLLED_WINDOW(sw), child);
  return sw;
}

static GtkGrid *new_grid(void) {
  GtkWidget *g = gtk_grid_new();
  gtk_grid_set_column_spacing(GTK_GRID(g), 18);
  gtk_grid_set_row_spacing(GTK_GRID(g), 4);
  gtk_widget_set_margin_start(g, 12);
  gtk_widget_set_margin_end(g, 12);
  gtk_widget_set_margin_top(g, 8);
  gtk_widget_set_margin_bottom(g, 8);
  return GTK_GRID(g);
}

static char *fmt_time(double t) {
  if (t <= 0) return g_strdup("—");
  GDateTime *dt = g_date_time_new_from_unix_local((gint64)t);
  char *s = dt ? g_date_time_format(dt, "%Y-%m-%d %H:%M:%S") : g_strdup("?");
  if (dt) g_date_time_unref(dt);
  return s;
}

static char *fmt_duration(double s) {
  if (s < 0) s = 0;
  long t = lround(s);
  if (t >= 3600) return g_strdup_printf("%ldh %02ldm %02lds", t / 3600, t / 60 % 60, t % 60);
  if (t >= 60) return g_strdup_printf("%ldm %02lds", t / 60, t % 60);
  return g_strdup_printf("%.1f s", s);
}

static char *fmt_value(double v) {
  if (isnan(v)) return g_strdup("—");
  return g_strdup_printf("%.6g", v);
}

/* ---- the metric chart -------------------------------------------------------------- */

/* Fractional epoch of step s, from the epoch-end steps e[0..n). */
static double epoch_of(double s, const double *e, int64_t n) {
  if (n == 0) return 0;
  double prev = 0;
  for (int64_t k = 0; k < n; k++) {
    if (s <= e[k]) return (double)k + (e[k] > prev ? (s - prev) / (e[k] - prev) : 1.0);
    prev = e[k];
  }
  double len = n > 1 ? e[n - 1] - e[n - 2] : e[0];
  return (double)n + (len > 0 ? (s - e[n - 1]) / len : 0);
}

static void draw_metric(EmRunView *self) {
  em_line_chart_clear(self->chart);
  if (!self->store || !self->metric) return;
  em_error err = {0};
  em_metric_point *pts = NULL, *ends = NULL;
  int64_t n = 0, ne = 0;
  if (em_store_metrics_get(self->store, self->run, self->metric, &pts, &n, &err) != EM_OK) {
    set_message(self, err.msg, TRUE);
    return;
  }
  double *e = NULL;
  if (self->axis == 1 &&
      em_store_metrics_get(self->store, self->run, EM_METRIC_TRAIN_LOSS, &ends, &ne, &err) == EM_OK) {
    e = g_new(double, ne ? ne : 1);
    for (int64_t k = 0; k < ne; k++) e[k] = (double)ends[k].step;
  }
  double *x = g_new(double, n ? n : 1), *y = g_new(double, n ? n : 1);
  double t0 = self->have_row && self->row.started > 0 ? self->row.started : (n ? pts[0].wall : 0);
  for (int64_t i = 0; i < n; i++) {
    x[i] = self->axis == 0 ? (double)pts[i].step
           : self->axis == 1 ? epoch_of((double)pts[i].step, e, ne)
                             : pts[i].wall - t0;
    y[i] = pts[i].value;
  }
  int s = em_line_chart_add_series(self->chart, self->metric, NULL);
  em_line_chart_append(self->chart, s, x, y, (int)n);
  em_line_chart_set_title(self->chart, self->metric);
  em_line_chart_set_y_label(self->chart, self->metric);
  em_line_chart_set_x_label(self->chart, self->axis == 2 ? "seconds since the start" : axis_names[self->axis]);
  em_line_chart_set_integer_x(self->chart, self->axis == 0);
  em_line_chart_reset_view(self->chart);
  g_free(x);
  g_free(y);
  g_free(e);
  free(pts);
  free(ends);
}

static void on_metric_changed(GtkDropDown *dd, GParamSpec *ps, EmRunView *self) {
  (void)ps;
  if (self->loading || !self->metric_keys) return;
  guint i = gtk_drop_down_get_selected(dd);
  if (i == GTK_INVALID_LIST_POSITION || !self->metric_keys[i]) return;
  g_free(self->metric);
  self->metric = g_strdup(self->metric_keys[i]);
  draw_metric(self);
}

static void on_axis_changed(GtkDropDown *dd, GParamSpec *ps, EmRunView *self) {
  (void)ps;
  if (self->loading) return;
  guint i = gtk_drop_down_get_selected(dd);
  if (i < 3) self->axis = (int)i;
  draw_metric(self);
}

/* ---- reading the run ------------------------------------------------------------------ */

static void fill_header(EmRunView *self) {
  const em_run *r = &self->row;
  char *title = g_strdup_printf("Run %lld · %s%s%s", (long long)r->id, r->model ? r->model : "?",
                                r->name && *r->name ? " · " : "", r->name ? r->name : "");
  gtk_label_set_text(self->title, title);
  g_free(title);
  char *start = fmt_time(r->started);
  double end = r->ended > 0 ? r->ended : (double)g_get_real_time() / 1e6;
  char *dur = fmt_duration(end - r->started);
  char *acc = isnan(r->final_test_accuracy) ? g_strdup("")
                                            : g_strdup_printf(" · test accuracy %.2f%%",
                                                              100 * r->final_test_accuracy);
  char *status = g_strdup_printf("%s · started %s · %s%s · %lld steps%s%s", em_run_status_name(r->status),
                                 start, dur, r->ended > 0 ? "" : " so far", (long long)r->steps, acc,
                                 r->message && *r->message ? " · " : "");
  char *line = g_strconcat(status, r->message ? r->message : "", NULL);
  gtk_label_set_text(self->status, line);
  g_free(line);
  g_free(status);
  g_free(acc);
  g_free(dur);
  g_free(start);
}

static void fill_metrics(EmRunView *self) {
  em_error err = {0};
  em_metric_summary *m = NULL;
  int n = 0;
  clear_grid(self->summary);
  if (em_store_metrics_summary(self->store, self->run, &m, &n, &err) != EM_OK) {
    set_message(self, err.msg, TRUE);
    return;
  }
  int row = 0;
  const char *head[] = {"metric", "last", "min", "max", "points", "last step"};
  grid_row(self->summary, &row, 6, head, TRUE);
  g_strfreev(self->metric_keys);
  self->metric_keys = g_new0(char *, n + 1);
  GtkStringList *names = gtk_string_list_new(NULL);
  guint pick = 0;
  for (int i = 0; i < n; i++) {
    char *last = fmt_value(m[i].last), *lo = fmt_value(m[i].min), *hi = fmt_value(m[i].max);
    char *count = g_strdup_printf("%lld", (long long)m[i].count);
    char *step = g_strdup_printf("%lld", (long long)m[i].last_step);
    const char *cells[] = {m[i].key, last, lo, hi, count, step};
    grid_row(self->summary, &row, 6, cells, FALSE);
    g_free(last), g_free(lo), g_free(hi), g_free(count), g_free(step);
    self->metric_keys[i] = g_strdup(m[i].key);
    gtk_string_list_append(names, m[i].key);
    if (!g_strcmp0(m[i].key, self->metric ? self->metric : "loss")) pick = (guint)i;
  }
  self->loading = TRUE;
  gtk_drop_down_set_model(self->metric_dd, G_LIST_MODEL(names));
  gtk_drop_down_set_selected(self->metric_dd, n ? pick : GTK_INVALID_LIST_POSITION);
  self->loading = FALSE;
  g_object_unref(names);
  g_free(self->metric);
  self->metric = n ? g_strdup(self->metric_keys[pick]) : NULL;
  em_metric_summaries_free(m, n);
  draw_metric(self);
}

static void fill_settings(EmRunView *self) {
  clear_grid(self->settings);
  int row = 0;
  const char *head[] = {"setting", "value"};
  grid_row(self->settings, &row, 2, head, TRUE);
  json_t *cfg = self->row.config_json ? json_loads(self->row.config_json, 0, NULL) : NULL;
  json_t *flat = json_object();
  if (cfg) em_json_flatten(cfg, "", flat);
  const char **keys = g_new0(const char *, json_object_size(flat) + 1);
  size_t nk = 0;
  const char *k;
  json_t *v;
  json_object_foreach(flat, k, v) keys[nk++] = k;
  qsort(keys, nk, sizeof *keys, (int (*)(const void *, const void *))g_strcmp0);
  for (size_t i = 0; i < nk; i++) {
    json_t *val = json_object_get(flat, keys[i]);
    char *text = json_is_string(val) ? g_strdup(json_string_value(val))
                                     : json_dumps(val, JSON_ENCODE_ANY | JSON_REAL_PRECISION(10));
    const char *cells[] = {keys[i], text};
    grid_row(self->settings, &row, 2, cells, FALSE);
    if (json_is_string(val)) g_free(text);
    else free(text);
  }
  if (!nk) {
    const char *cells[] = {"(none recorded)", ""};
    grid_row(self->settings, &row, 2, cells, FALSE);
  }
  g_free(keys);
  json_decref(flat);
  json_decref(cfg);
}

static void fill_events(EmRunView *self) {
  GtkWidget *c;
  while ((c = gtk_widget_get_first_child(GTK_WIDGET(self->events))))
    gtk_list_box_remove(self->events, c);
  em_error err = {0};
  em_run_annotation *a = NULL;
  int n = 0;
  if (em_store_run_annotations(self->store, self->run, &a, &n, &err) != EM_OK) {
    set_message(self, err.msg, TRUE);
    return;
  }
  for (int i = 0; i < n; i++) {
    char *when = a[i].time > 0 ? fmt_time(a[i].time) : g_strdup("");
    char *head = !strcmp(a[i].kind, "tag")
                     ? g_strdup_printf("tag %s", a[i].key ? a[i].key : "")
                 : a[i].step > 0 ? g_strdup_printf("%s at step %lld", a[i].kind, (long long)a[i].step)
                                 : g_strdup(a[i].kind);
    GtkWidget *box = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 12);
    GtkWidget *hl = cell_label(head, FALSE, FALSE);
    gtk_label_set_width_chars(GTK_LABEL(hl), 22);
    gtk_widget_add_css_class(hl, "heading");
    GtkWidget *tl = cell_label(a[i].text, FALSE, TRUE);
    gtk_widget_set_hexpand(tl, TRUE);
    gtk_box_append(GTK_BOX(box), hl);
    gtk_box_append(GTK_BOX(box), tl);
    gtk_box_append(GTK_BOX(box), cell_label(when, TRUE, FALSE));
    gtk_widget_set_margin_start(box, 8);
    gtk_widget_set_margin_top(box, 3);
    gtk_widget_set_margin_bottom(box, 3);
    gtk_list_box_append(self->events, box);
    g_free(when);
    g_free(head);
  }
  if (!n) gtk_list_box_append(self->events, cell_label("No events, tags or notes.", TRUE, FALSE));
  em_run_annotations_free(a, n);
}

static void fill_files(EmRunView *self) {
  clear_grid(self->files);
  int row = 0;
  em_error err = {0};
  em_checkpoint_row *ck = NULL;
  int nc = 0;
  const char *head[] = {"checkpoint", "step", "size", "SHA-256", "file"};
  grid_row(self->files, &row, 5, head, TRUE);
  if (em_store_checkpoints_list(self->store, self->run, &ck, &nc, &err) == EM_OK) {
    for (int i = 0; i < nc; i++) {
      char size[32], step[32], sha[20];
      em_format_bytes(ck[i].size, size, sizeof size);
      g_snprintf(step, sizeof step, "%lld", (long long)ck[i].step);
      g_snprintf(sha, sizeof sha, "%.12s…", ck[i].sha256 ? ck[i].sha256 : "");
      char *kind = isnan(ck[i].metric) ? g_strdup(ck[i].kind)
                                       : g_strdup_printf("%s (%.4g)", ck[i].kind, ck[i].metric);
      const char *cells[] = {kind, step, size, sha, ck[i].path};
      grid_row(self->files, &row, 5, cells, FALSE);
      g_free(kind);
    }
    em_checkpoint_rows_free(ck, nc);
  }
  em_artifact *art = NULL;
  int na = 0;
  if (em_store_artifacts_list(self->store, self->run, &art, &na, &err) == EM_OK) {
    if (na) {
      const char *ahead[] = {"artifact", "", "size", "SHA-256", "file"};
      grid_row(self->files, &row, 5, ahead, TRUE);
    }
    for (int i = 0; i < na; i++) {
      char size[32], sha[20];
      em_format_bytes(art[i].size, size, sizeof size);
      g_snprintf(sha, sizeof sha, "%.12s…", art[i].sha256 ? art[i].sha256 : "");
      const char *cells[] = {art[i].kind, "", size, sha, art[i].path};
      grid_row(self->files, &row, 5, cells, FALSE);
    }
    em_artifacts_free(art, na);
  }
  if (!nc && !na) {
    const char *cells[] = {"No checkpoints or artifacts.", "", "", "", ""};
    grid_row(self->files, &row, 5, cells, FALSE);
  }
}

static void fill_identity(EmRunView *self) {
  const em_run *r = &self->row;
  clear_grid(self->identity);
  int row = 0;
  char size[32] = "", seed[32], threads[16], pid[24], parent[24];
  if (r->dataset_size > 0) em_format_bytes(r->dataset_size, size, sizeof size);
  g_snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->seed);
  g_snprintf(threads, sizeof threads, "%d", r->threads);
  g_snprintf(pid, sizeof pid, "%lld", (long long)r->pid);
  g_snprintf(parent, sizeof parent, r->parent_run ? "run %lld" : "none", (long long)r->parent_run);
  char *ended = fmt_time(r->ended);
  const char *rows[][2] = {
      {"model", r->model},          {"spec SHA-256", r->spec_sha256},
      {"dataset", r->dataset_name}, {"dataset files", r->dataset_path},
      {"dataset SHA-256", r->dataset_sha256}, {"dataset size", size},
      {"device", r->device},        {"kernels", r->kernels},
      {"threads", threads},         {"seed", seed},
      {"host", r->host},            {"process", pid},
      {"continues", parent},        {"ended", ended},
      {"engine", r->engine_version},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(rows); i++) {
    const char *cells[] = {rows[i][0], rows[i][1] && *rows[i][1] ? rows[i][1] : "—"};
    grid_row(self->identity, &row, 2, cells, FALSE);
  }
  g_free(ended);
}

void em_run_view_reload(EmRunView *self) {
  g_return_if_fail(EM_IS_RUN_VIEW(self));
  em_error err = {0}; /* the message line stays: an action's result outlives its reload */
  if (!self->store)
    self->store = em_store_open(em_app_state_get_registry_dir(self->state), true, &err);
  if (self->have_row) em_run_clear(&self->row);
  self->have_row = self->store && em_store_run_get(self->store, self->run, &self->row, &err) == EM_OK;
  /* a completed run has nothing left to train; a running one is training */
  gtk_widget_action_set_enabled(GTK_WIDGET(self), "run.resume",
                                self->have_row && self->row.status != EM_RUN_COMPLETED &&
                                    self->row.status != EM_RUN_RUNNING);
  if (!self->have_row) {
    char *t = g_strdup_printf("Run %lld", (long long)self->run);
    gtk_label_set_text(self->title, t);
    g_free(t);
    set_message(self, err.msg[0] ? err.msg : "The run is not in the registry.", TRUE);
    return;
  }
  fill_header(self);
  fill_metrics(self);
  fill_settings(self);
  fill_events(self);
  fill_files(self);
  fill_identity(self);
}

/* ---- actions ------------------------------------------------------------------------ */

static em_store *open_rw(EmRunView *self, em_error *err) {
  return em_store_open(em_app_state_get_registry_dir(self->state), false, err);
}

static void act_open_spec(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  EmRunView *self = EM_RUN_VIEW(w);
  if (!self->have_row || !self->row.spec_json) {
    set_message(self, "This run recorded no spec.", TRUE);
    return;
  }
  em_app_state_set_spec(self->state, self->row.spec_json, NULL);
  GtkWindow *win = gtk_window_get_transient_for(GTK_WINDOW(gtk_widget_get_root(w)));
  if (win) gtk_widget_activate_action(GTK_WIDGET(win), "win.page", "s", "builder");
  set_message(self, "The run's spec is in the Builder.", FALSE);
}

static void act_register(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  EmRunView *self = EM_RUN_VIEW(w);
  if (!self->have_row) return;
  em_error err = {0};
  em_store *s = open_rw(self, &err);
  int version = 0;
  if (s && em_store_model_register(s, self->run, self->row.model, EM_PICK_BEST, 0, &version, &err) ==
               EM_OK) {
    em_error rerr = {0}; /* the drift reference the server judges live inputs against */
    gboolean no_ref = em_store_version_build_reference(s, self->row.model, version,
                                                       EM_DRIFT_REFERENCE_SAMPLES, &rerr) != EM_OK;
    char *msg = g_strdup_printf("Registered as %s version %d (its best checkpoint)%s%s.",
                                self->row.model, version, no_ref ? "; no drift reference: " : "",
                                no_ref ? rerr.msg : "");
    set_message(self, msg, FALSE);
    g_free(msg);
    em_app_state_registry_changed(self->state);
  } else {
    set_message(self, err.msg, TRUE);
  }
  em_store_close(s);
  em_run_view_reload(self);
}

/* ONNX of the run's newest valid checkpoint, into the registry's
 * artifacts (runs/<id>/run<id>-step<step>.onnx), recorded with the run. */
static void act_export(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  EmRunView *self = EM_RUN_VIEW(w);
  if (!self->have_row || !self->row.spec_json) return;
  em_error err = {0};
  em_store *s = open_rw(self, &err);
  em_checkpoint_row ck = {0};
  em_spec *spec = NULL;
  em_model *model = NULL;
  char path[4096] = "";
  gboolean ok = s && em_store_checkpoint_latest_valid(s, self->run, &ck, &err) == EM_OK;
  if (ok) ok = (spec = em_spec_parse(self->row.spec_json, "run spec", &err)) != NULL;
  if (ok) ok = (model = em_model_new(spec, 0, &err)) != NULL;
  if (ok) ok = em_model_load(model, ck.path, &err) == EM_OK;
  if (ok) {
    char rel[128];
    g_snprintf(rel, sizeof rel, "runs/%lld/run%lld-step%lld.onnx", (long long)self->run,
               (long long)self->run, (long long)ck.step);
    em_store_artifact_path(s, rel, path, sizeof path);
    char *dir = g_path_get_dirname(path);
    g_mkdir_with_parents(dir, 0755);
    g_free(dir);
    em_export_meta meta = {.model_name = self->row.model, .ember_version = EMBER_VERSION,
                           .run_id = self->run};
    ok = em_export_onnx(model, path, &meta, &err) == EM_OK &&
         em_store_artifact_add(s, path, "export", self->run, NULL, &err) == EM_OK;
  }
  if (ok) {
    char *msg = g_strdup_printf("Exported step %lld to %s", (long long)ck.step, path);
    set_message(self, msg, FALSE);
    g_free(msg);
    em_app_state_registry_changed(self->state);
  } else {
    set_message(self, err.msg[0] ? err.msg : "The export failed.", TRUE);
  }
  em_model_free(model);
  em_spec_free(spec);
  em_checkpoint_row_clear(&ck);
  em_store_close(s);
  if (ok) em_run_view_reload(self);
}

/* `ember train --resume RUN` next to this program (or $EMBER_CLI), in the
 * background: its run appears on the Runs page as it trains. */
static void act_resume(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  EmRunView *self = EM_RUN_VIEW(w);
  const char *cli = g_getenv("EMBER_CLI");
  char *exe = NULL;
  if (!cli) {
    char *me = g_file_read_link("/proc/self/exe", NULL);
    char *dir = me ? g_path_get_dirname(me) : NULL;
    exe = dir ? g_build_filename(dir, "ember", NULL) : NULL;
    g_free(me);
    g_free(dir);
    cli = exe;
  }
  char id[24];
  g_snprintf(id, sizeof id, "%lld", (long long)self->run);
  const char *registry = em_app_state_get_registry_dir(self->state);
  GError *error = NULL;
  GSubprocess *proc = NULL;
  if (cli && g_file_test(cli, G_FILE_TEST_IS_EXECUTABLE))
    proc = registry ? g_subprocess_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE, &error, cli, "train",
                                       "--resume", id, "--registry", registry, NULL)
                    : g_subprocess_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE, &error, cli, "train",
                                       "--resume", id, NULL);
  if (proc) {
    char *msg = g_strdup_printf("Resuming run %s in the background (process %s): the new run "
                                "appears on the Runs page.",
                                id, g_subprocess_get_identifier(proc));
    set_message(self, msg, FALSE);
    g_free(msg);
    em_app_state_registry_changed(self->state);
    g_object_unref(proc);
  } else {
    char *msg = g_strdup_printf("Could not start `ember train --resume %s`: %s", id,
                                error ? error->message : "the ember program is not next to the "
                                                         "workbench (set EMBER_CLI)");
    set_message(self, msg, TRUE);
    g_free(msg);
  }
  g_clear_error(&error);
  g_free(exe);
}

static void on_delete_response(GtkDialog *d, int response, EmRunView *self) {
  gtk_window_destroy(GTK_WINDOW(d));
  if (response != GTK_RESPONSE_ACCEPT) return;
  em_error err = {0};
  em_store *s = open_rw(self, &err);
  if (s && em_store_run_delete(s, self->run, &err) == EM_OK) {
    char *msg = g_strdup_printf("Run %lld was deleted.", (long long)self->run);
    set_message(self, msg, FALSE);
    g_free(msg);
    gtk_widget_set_sensitive(GTK_WIDGET(self->tabs), FALSE);
    em_app_state_registry_changed(self->state);
  } else {
    set_message(self, err.msg, TRUE);
  }
  em_store_close(s);
}

static void act_delete(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  EmRunView *self = EM_RUN_VIEW(w);
  GtkRoot *root = gtk_widget_get_root(w);
  GtkWidget *d = gtk_message_dialog_new(GTK_IS_WINDOW(root) ? GTK_WINDOW(root) : NULL,
                                        GTK_DIALOG_MODAL | GTK_DIALOG_DESTROY_WITH_PARENT,
                                        GTK_MESSAGE_WARNING, GTK_BUTTONS_NONE,
                                        "Delete run %lld with its metrics and checkpoints?",
                                        (long long)self->run);
  gtk_dialog_add_button(GTK_DIALOG(d), "_Cancel", GTK_RESPONSE_CANCEL);
  gtk_dialog_add_button(GTK_DIALOG(d), "_Delete", GTK_RESPONSE_ACCEPT);
  gtk_widget_set_name(d, "run-delete");
  g_signal_connect_object(d, "response", G_CALLBACK(on_delete_response), self, 0);
  gtk_window_present(GTK_WINDOW(d));
}

/* ---- the widget ------------------------------------------------------------------------ */

static GtkWidget *action_button(const char *label, const char *action, const char *tip) {
  GtkWidget *b = gtk_button_new_with_mnemonic(label);
  gtk_actionable_set_action_name(GTK_ACTIONABLE(b), action);
  gtk_widget_set_tooltip_text(b, tip);
  return b;
}

static void em_run_view_dispose(GObject *o) {
  EmRunView *self = EM_RUN_VIEW(o);
  g_clear_object(&self->state);
  G_OBJECT_CLASS(em_run_view_parent_class)->dispose(o);
}

static void em_run_view_finalize(GObject *o) {
  EmRunView *self = EM_RUN_VIEW(o);
  if (self->have_row) em_run_clear(&self->row);
  em_store_close(self->store);
  g_strfreev(self->metric_keys);
  g_free(self->metric);
  G_OBJECT_CLASS(em_run_view_parent_class)->finalize(o);
}

static void em_run_view_class_init(EmRunViewClass *klass) {
  G_OBJECT_CLASS(klass)->dispose = em_run_view_dispose;
  G_OBJECT_CLASS(klass)->finalize = em_run_view_finalize;
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  gtk_widget_class_install_action(wc, "run.open-spec", NULL, act_open_spec);
  gtk_widget_class_install_action(wc, "run.resume", NULL, act_resume);
  gtk_widget_class_install_action(wc, "run.register", NULL, act_register);
  gtk_widget_class_install_action(wc, "run.export", NULL, act_export);
  gtk_widget_class_install_action(wc, "run.delete", NULL, act_delete);
}

static void em_run_view_init(EmRunView *self) {
  GtkBox *box = GTK_BOX(self);
  gtk_orientable_set_orientation(GTK_ORIENTABLE(self), GTK_ORIENTATION_VERTICAL);
  gtk_box_set_spacing(box, 6);
  GtkWidget *head = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 6);
  gtk_widget_set_margin_start(head, 12);
  gtk_widget_set_margin_end(head, 12);
  gtk_widget_set_margin_top(head, 10);
  self->title = GTK_LABEL(cell_label("", FALSE, FALSE));
  gtk_widget_add_css_class(GTK_WIDGET(self->title), "title-2");
  gtk_widget_set_hexpand(GTK_WIDGET(self->title), TRUE);
  gtk_box_append(GTK_BOX(head), GTK_WIDGET(self->title));
  gtk_box_append(GTK_BOX(head), action_button("Open _Spec", "run.open-spec", "Edit this run's model in the Builder"));
  gtk_box_append(GTK_BOX(head), action_button("_Resume", "run.resume", "Continue from its last checkpoint (ember train --resume)"));
  gtk_box_append(GTK_BOX(head), action_button("Re_gister", "run.register", "Register its best checkpoint as a new version of its model"));
  gtk_box_append(GTK_BOX(head), action_button("_Export ONNX", "run.export", "Export its newest checkpoint to ONNX, recorded as an artifact"));
  gtk_box_append(GTK_BOX(head), action_button("_Delete", "run.delete", "Delete the run, its metrics and checkpoints"));
  gtk_box_append(box, head);
  self->status = GTK_LABEL(cell_label("", TRUE, TRUE));
  gtk_widget_set_margin_start(GTK_WIDGET(self->status), 12);
  gtk_box_append(box, GTK_WIDGET(self->status));
  self->message = GTK_LABEL(cell_label("", FALSE, TRUE));
  gtk_widget_set_name(GTK_WIDGET(self->message), "run-message");
  gtk_widget_set_margin_start(GTK_WIDGET(self->message), 12);
  gtk_box_append(box, GTK_WIDGET(self->message));

  self->tabs = GTK_NOTEBOOK(gtk_notebook_new());
  gtk_widget_set_vexpand(GTK_WIDGET(self->tabs), TRUE);
  /* Metrics: the chart, its controls, every key's figures */
  GtkWidget *mbox = gtk_box_new(GTK_ORIENTATION_VERTICAL, 6);
  GtkWidget *controls = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 6);
  gtk_widget_set_margin_start(controls, 12);
  gtk_widget_set_margin_top(controls, 6);
  gtk_box_append(GTK_BOX(controls), gtk_label_new("Metric"));
  self->metric_dd = GTK_DROP_DOWN(gtk_drop_down_new(NULL, NULL));
  gtk_widget_set_name(GTK_WIDGET(self->metric_dd), "run-metric");
  gtk_box_append(GTK_BOX(controls), GTK_WIDGET(self->metric_dd));
  gtk_box_append(GTK_BOX(controls), gtk_label_new("against"));
  self->axis_dd = GTK_DROP_DOWN(gtk_drop_down_new_from_strings(axis_names));
  gtk_box_append(GTK_BOX(controls), GTK_WIDGET(self->axis_dd));
  gtk_box_append(GTK_BOX(mbox), controls);
  self->chart = EM_LINE_CHART(em_line_chart_new());
  gtk_widget_set_vexpand(GTK_WIDGET(self->chart), TRUE);
  gtk_widget_set_size_request(GTK_WIDGET(self->chart), -1, 260);
  gtk_box_append(GTK_BOX(mbox), GTK_WIDGET(self->chart));
  self->summary = new_grid();
  GtkWidget *ssw = scrolled(GTK_WIDGET(self->summary));
  gtk_widget_set_size_request(ssw, -1, 140);
  gtk_box_append(GTK_BOX(mbox), ssw);
  gtk_notebook_append_page(self->tabs, mbox, gtk_label_new("Metrics"));
  self->settings = new_grid();
  gtk_notebook_append_page(self->tabs, scrolled(GTK_WIDGET(self->settings)), gtk_label_new("Settings"));
  self->events = GTK_LIST_BOX(gtk_list_box_new());
  gtk_list_box_set_selection_mode(self->events, GTK_SELECTION_NONE);
  gtk_notebook_append_page(self->tabs, scrolled(GTK_WIDGET(self->events)), gtk_label_new("Events"));
  self->files = new_grid();
  gtk_notebook_append_page(self->tabs, scrolled(GTK_WIDGET(self->files)), gtk_label_new("Files"));
  self->identity = new_grid();
  gtk_notebook_append_page(self->tabs, scrolled(GTK_WIDGET(self->identity)), gtk_label_new("Identity"));
  gtk_box_append(box, GTK_WIDGET(self->tabs));
  g_signal_connect_object(self->metric_dd, "notify::selected", G_CALLBACK(on_metric_changed), self, 0);
  g_signal_connect_object(self->axis_dd, "notify::selected", G_CALLBACK(on_axis_changed), self, 0);
}

GtkWidget *em_run_view_new(EmAppState *state, gint64 run) {
  EmRunView *self = g_object_new(EM_TYPE_RUN_VIEW, NULL);
  self->state = g_object_ref(state);
  self->run = run;
  em_run_view_reload(self);
  return GTK_WIDGET(self);
}

GtkWindow *em_run_view_present(GtkWindow *parent, EmAppState *state, gint64 run) {
  GtkWidget *win = gtk_window_new();
  char *title = g_strdup_printf("Run %lld", (long long)run);
  gtk_window_set_title(GTK_WINDOW(win), title);
  g_free(title);
  gtk_window_set_default_size(GTK_WINDOW(win), 980, 680);
  if (parent) {
    gtk_window_set_transient_for(GTK_WINDOW(win), parent);
    gtk_window_set_application(GTK_WINDOW(win), gtk_window_get_application(parent));
  }
  gtk_window_set_child(GTK_WINDOW(win), em_run_view_new(state, run));
  gtk_window_present(GTK_WINDOW(win));
  return GTK_WINDOW(win);
}

gint64 em_run_view_get_run(EmRunView *self) { return self->run; }
const char *em_run_view_get_message(EmRunView *self) { return gtk_label_get_text(self->message); }
const char *em_run_view_get_metric(EmRunView *self) { return self->metric; }
gint64 em_run_view_get_n_points(EmRunView *self) {
  return em_line_chart_get_n_series(self->chart) ? em_line_chart_get_n_points(self->chart, 0) : 0;
}

gboolean em_run_view_show_metric(EmRunView *self, const char *key, const char *axis) {
  for (int i = 0; axis && axis_names[i]; i++)
    if (!strcmp(axis, axis_names[i])) gtk_drop_down_set_selected(self->axis_dd, (guint)i);
  for (int i = 0; key && self->metric_keys && self->metric_keys[i]; i++)
    if (!strcmp(self->metric_keys[i], key)) {
      gtk_drop_down_set_selected(self->metric_dd, (guint)i);
      return TRUE;
    }
  return key == NULL;
}
