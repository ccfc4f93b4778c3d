/* em-compare-page.c: see the header. set_runs reads every run once (spec,
 * config, metric summaries) through a read-only em_store kept for the
 * page; choosing another metric reads only that key's points. */
#include "em-compare-page.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

#include "em-cost-scatter.h"
#include "em-line-chart.h"
#include "em-nn.h"
#include "em-spec-costs.h"
#include "em-store.h"
#include "em-wheel-guard.h"

typedef struct {
  gint64 id;
  char *label;
  const char *status; /* "completed", "failed", ... (static) */
  double accuracy, params, flops, step_s;
} CmpRun;

struct _EmComparePage {
  GtkBox parent_instance;
  GtkLabel *title_label, *message_label;
  GtkDropDown *metric_dropdown, *cost_dropdown;
  GtkSpinButton *smoothing_spin;
  GtkCheckButton *log_check;
  GtkBox *chart_box, *scatter_box;
  GtkColumnView *diff_view;

  EmAppState *state;
  em_store *store;
  EmLineChart *chart;
  EmCostScatter *scatter;
  GArray *runs;              /* CmpRun */
  GtkStringList *metrics;    /* keys any run recorded */
  GListStore *diffs;         /* GtkStringObject: the keys that differ */
  GHashTable *diff_values;   /* key -> char** (one text per run) */
  gboolean loading;
  char *message;
  char *runs_message; /* what reading the runs said; the chosen metric's note follows it */
};

G_DEFINE_FINAL_TYPE(EmComparePage, em_compare_page, GTK_TYPE_BOX)

static void cmp_run_clear(gpointer p) {
  CmpRun *r = p;
  g_free(r->label);
}

static void set_message(EmComparePage *self, const char *msg) {
  g_free(self->message);
  self->message = g_strdup(msg ? msg : "");
  gtk_label_set_text(self->message_label, self->message);
  gtk_widget_set_visible(GTK_WIDGET(self->message_label), *self->message != 0);
}

/* ---- the differences table ------------------------------------------------ */

static void diff_setup(GtkSignalListItemFactory *f, GtkListItem *item, gpointer data) {
  (void)f;
  (void)data;
  GtkWidget *label = gtk_label_new(NULL);
  gtk_label_set_xalign(GTK_LABEL(label), 0);
  gtk_label_set_ellipsize(GTK_LABEL(label), PANGO_ELLIPSIZE_END);
  gtk_label_set_selectable(GTK_LABEL(label), FALSE);
  gtk_list_item_set_child(item, label);
}

static void diff_bind(GtkSignalListItemFactory *f, GtkListItem *item, gpointer data) {
  EmComparePage *self = data;
  int col = GPOINTER_TO_INT(g_object_get_data(G_OBJECT(f), "column"));
  const char *key = gtk_string_object_get_string(gtk_list_item_get_item(item));
  GtkLabel *label = GTK_LABEL(gtk_list_item_get_child(item));
  if (col < 0) {
    gtk_label_set_text(label, key);
    return;
  }
  char **values = g_hash_table_lookup(self->diff_values, key);
  const char *v = values && col < (int)g_strv_length(values) ? values[col] : "";
  gtk_label_set_text(label, v);
  gtk_widget_set_tooltip_text(GTK_WIDGET(label), v);
}

/* A column's header does not ellipsize: a long title (a model named with
 * 70 characters) would set the column's width and push the others off
 * the page. The whole name is in the chart's legend. */
#define MAX_TITLE_CHARS 28

static void add_diff_column(EmComparePage *self, const char *title, int col) {
  /* (g_utf8_substring reads past the end of a string shorter than its end) */
  char *shown;
  if (g_utf8_strlen(title, -1) > MAX_TITLE_CHARS) {
    char *cut = g_utf8_substring(title, 0, MAX_TITLE_CHARS - 1);
    shown = g_strconcat(cut, "…", NULL);
    g_free(cut);
  } else {
    shown = g_strdup(title);
  }
  GtkListItemFactory *f = gtk_signal_list_item_factory_new();
  g_object_set_data(G_OBJECT(f), "column", GINT_TO_POINTER(col));
  g_signal_connect(f, "setup", G_CALLBACK(diff_setup), NULL);
  g_signal_connect_object(f, "bind", G_CALLBACK(diff_bind), self, 0);
  GtkColumnViewColumn *c = gtk_column_view_column_new(shown, f);
  g_free(shown);
  gtk_column_view_column_set_resizable(c, TRUE);
  gtk_column_view_column_set_expand(c, TRUE);
  gtk_column_view_append_column(self->diff_view, c);
  g_object_unref(c);
}

static void remove_diff_columns(EmComparePage *self) {
  GListModel *cols = gtk_column_view_get_columns(self->diff_view);
  while (g_list_model_get_n_items(cols) > 0) {
    GtkColumnViewColumn *c = g_list_model_get_item(cols, 0);
    gtk_column_view_remove_column(self->diff_view, c);
    g_object_unref(c);
  }
}

/* Flattens what is compared for one run: the model, its config, its spec
 * and the last value of each metric. */
static json_t *flatten_run(const em_run *r, em_metric_summary *ms, int nms) {
  json_t *flat = json_object();
  json_object_set_new(flat, "model", json_string(r->model ? r->model : ""));
  json_t *cfg = r->config_json ? json_loads(r->config_json, 0, NULL) : NULL;
  if (cfg) em_json_flatten(cfg, "config", flat);
  json_decref(cfg);
  json_t *spec = r->spec_json ? json_loads(r->spec_json, 0, NULL) : NULL;
  if (spec) em_json_flatten(spec, "spec", flat);
  json_decref(spec);
  for (int i = 0; i < nms; i++) {
    char key[256];
    g_snprintf(key, sizeof key, "metrics.%s", ms[i].key);
    double v = ms[i].last;
    /* json_real refuses what is not finite (it gave NULL, read as absent,
     * so an infinite metric looked like a missing one) */
    json_object_set_new(flat, key, isfinite(v) ? json_real(v)
                                   : isinf(v) ? json_string(v > 0 ? "inf" : "-inf")
                                              : json_string("nan"));
  }
  return flat;
}

static int cmp_str(gconstpointer a, gconstpointer b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The table's keys, sorted (borrowed pointers). */
static GPtrArray *sorted_keys(GHashTable *t) {
  GPtrArray *out = g_ptr_array_new();
  GHashTableIter it;
  gpointer key;
  if (t) {
    g_hash_table_iter_init(&it, t);
    while (g_hash_table_iter_next(&it, &key, NULL)) g_ptr_array_add(out, key);
  }
  g_ptr_array_sort(out, cmp_str);
  return out;
}

/* Whether a key names the run itself rather than how it was set up (its
 * folders, files and seed-free identity): never what a legend should say. */
static gboolean label_worthy(const char *key) {
  if (!strcmp(key, "model")) return TRUE;
  if (!g_str_has_prefix(key, "config.")) return FALSE;
  static const char *const noise[] = {"dir", "path", "save", "trace", "resume", "registry", "file"};
  for (size_t i = 0; i < G_N_ELEMENTS(noise); i++)
    if (strstr(key, noise[i])) return FALSE;
  return TRUE;
}

/* How much a key is worth in a legend: the model, the learning rate, the
 * batch size and the optimiser first, then the rest in name order. */
static int key_rank(const char *key) {
  static const char *const first[] = {"model", "lr", "batch_size", "kind", "name", "epochs"};
  const char *leaf = strrchr(key, '.');
  leaf = leaf ? leaf + 1 : key;
  for (size_t i = 0; i < G_N_ELEMENTS(first); i++)
    if (!strcmp(leaf, first[i])) return (int)i;
  return (int)G_N_ELEMENTS(first);
}

static int cmp_keys_rank(gconstpointer a, gconstpointer b) {
  const char *x = *(const char *const *)a, *y = *(const char *const *)b;
  int d = key_rank(x) - key_rank(y);
  return d ? d : strcmp(x, y);
}

/* Names each run by what tells it apart from the others: up to three
 * settings whose values differ ("run 3 · lr 0.002 · batch_size 64"); when
 * none does, its model ("run 3 fmnist-cnn"). */
static void label_runs(EmComparePage *self, GPtrArray *flats) {
  GHashTable *keys = g_hash_table_new(g_str_hash, g_str_equal);
  for (guint i = 0; i < flats->len; i++) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)flats->pdata[i], k, v)
      if (label_worthy(k)) g_hash_table_add(keys, (gpointer)k);
  }
  GPtrArray *differ = g_ptr_array_new();
  GHashTableIter it;
  gpointer key;
  g_hash_table_iter_init(&it, keys);
  while (g_hash_table_iter_next(&it, &key, NULL)) {
    char first[512] = "", buf[512];
    gboolean d = FALSE;
    for (guint i = 0; i < flats->len && !d; i++) {
      em_json_leaf_text(json_object_get(flats->pdata[i], key), buf, sizeof buf);
      if (i == 0) g_strlcpy(first, buf, sizeof first);
      else d = strcmp(first, buf) != 0;
    }
    if (d) g_ptr_array_add(differ, key);
  }
  g_ptr_array_sort(differ, cmp_keys_rank);
  for (guint i = 0; i < self->runs->len && i < flats->len; i++) {
    CmpRun *c = &g_array_index(self->runs, CmpRun, i);
    if (!differ->len) continue; /* the model label stays */
    GString *s = g_string_new(NULL);
    g_string_printf(s, "run %" G_GINT64_FORMAT, (gint64)c->id);
    for (guint k = 0; k < differ->len && k < 3; k++) {
      const char *full = differ->pdata[k];
      char buf[512];
      em_json_leaf_text(json_object_get(flats->pdata[i], full), buf, sizeof buf);
      /* the leaf names it ("lr"), unless it is a generic one ("kind",
       * "name", "type"): then its parent does ("optim adam") */
      char **parts = g_strsplit(full, ".", -1);
      guint np = g_strv_length(parts);
      const char *leaf = np ? parts[np - 1] : full;
      if (np >= 2 && (!strcmp(leaf, "kind") || !strcmp(leaf, "name") || !strcmp(leaf, "type")))
        leaf = parts[np - 2];
      g_string_append_printf(s, " · %s %s", leaf, *buf ? buf : "—");
      g_strfreev(parts);
    }
    g_free(c->label);
    c->label = g_string_free(s, FALSE);
  }
  g_ptr_array_unref(differ);
  g_hash_table_unref(keys);
}

static void fill_differences(EmComparePage *self, GPtrArray *flats) {
  g_hash_table_remove_all(self->diff_values);
  GHashTable *keys = g_hash_table_new(g_str_hash, g_str_equal);
  for (guint i = 0; i < flats->len; i++) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)flats->pdata[i], k, v) g_hash_table_add(keys, (gpointer)k);
  }
  GPtrArray *sorted = sorted_keys(keys);
  GPtrArray *rows = g_ptr_array_new_with_free_func(g_object_unref);
  for (guint k = 0; k < sorted->len; k++) {
    const char *key = sorted->pdata[k];
    char **values = g_new0(char *, flats->len + 1);
    gboolean differ = FALSE;
    for (guint i = 0; i < flats->len; i++) {
      char buf[512];
      em_json_leaf_text(json_object_get(flats->pdata[i], key), buf, sizeof buf);
      values[i] = g_strdup(buf);
      if (i > 0 && strcmp(values[i], values[0]) != 0) differ = TRUE;
    }
    if (differ) {
      g_hash_table_insert(self->diff_values, g_strdup(key), values);
      g_ptr_array_add(rows, gtk_string_object_new(key));
    } else {
      g_strfreev(values);
    }
  }
  g_list_store_splice(self->diffs, 0, g_list_model_get_n_items(G_LIST_MODEL(self->diffs)),
                      rows->pdata, rows->len);
  g_ptr_array_unref(rows);
  g_ptr_array_unref(sorted);
  g_hash_table_unref(keys);
}

/* ---- chart and scatter ---------------------------------------------------- */

static void load_metric(EmComparePage *self, const char *key) {
  em_line_chart_clear(self->chart);
  /* "(None)" chosen: no series and no title left from the metric before */
  em_line_chart_set_title(self->chart, key && self->store ? key : NULL);
  em_line_chart_set_y_label(self->chart, key && self->store ? key : NULL);
  GString *msg = g_string_new(self->runs_message);
  if (!key || !self->store) {
    set_message(self, msg->str);
    g_string_free(msg, TRUE);
    return;
  }
  GString *missing = g_string_new(NULL);
  int n_missing = 0;
  for (guint i = 0; i < self->runs->len; i++) {
    CmpRun *r = &g_array_index(self->runs, CmpRun, i);
    int s = em_line_chart_add_series(self->chart, r->label, NULL);
    em_metric_point *pts = NULL;
    int64_t n = 0;
    em_error err = {0};
    if (em_store_metrics_get(self->store, r->id, key, &pts, &n, &err) != EM_OK) {
      g_string_append_printf(msg, "%s%s", msg->len ? "\n" : "", err.msg);
      continue;
    }
    if (n == 0) { /* a run that failed or stopped before it got there */
      g_string_append_printf(missing, "%s%" G_GINT64_FORMAT " (%s)", n_missing ? ", " : "",
                             r->id, r->status);
      n_missing++;
    }
    double *x = g_new(double, MAX(n, 1)), *y = g_new(double, MAX(n, 1));
    for (int64_t k = 0; k < n; k++) {
      x[k] = (double)pts[k].step;
      y[k] = pts[k].value;
    }
    em_line_chart_append(self->chart, s, x, y, (int)n);
    g_free(x);
    g_free(y);
    free(pts);
  }
  if (n_missing)
    g_string_append_printf(msg, "%s%s %s recorded no %s.", msg->len ? "\n" : "",
                           n_missing > 1 ? "Runs" : "Run", missing->str, key);
  set_message(self, msg->str);
  g_string_free(missing, TRUE);
  g_string_free(msg, TRUE);
}

static void update_scatter(EmComparePage *self) {
  guint which = gtk_drop_down_get_selected(self->cost_dropdown);
  int n = (int)self->runs->len;
  double *x = g_new(double, MAX(n, 1)), *y = g_new(double, MAX(n, 1));
  const char **labels = g_new0(const char *, n + 1);
  for (int i = 0; i < n; i++) {
    CmpRun *r = &g_array_index(self->runs, CmpRun, i);
    x[i] = which == 1 ? r->flops : which == 2 ? r->step_s : r->params;
    y[i] = r->accuracy;
    labels[i] = r->label;
  }
  static const char *titles[] = {"parameters", "forward FLOPs per sample", "step time (batch / samples per s)"};
  static const char *units[] = {"params", "FLOP", "s"};
  which = MIN(which, 2u);
  em_cost_scatter_set_axes(self->scatter, titles[which], units[which], "final test accuracy");
  em_cost_scatter_set_points(self->scatter, x, y, labels, n);
  g_free(x);
  g_free(y);
  g_free(labels);
}

static void read_costs(CmpRun *c, const em_run *r, em_metric_summary *ms, int nms) {
  c->params = c->flops = c->step_s = NAN;
  em_error err = {0};
  em_spec *spec = r->spec_json ? em_spec_parse(r->spec_json, c->label, &err) : NULL;
  if (spec) {
    c->params = (double)em_spec_param_count(spec);
    int nn = em_spec_node_count(spec);
    em_node_cost *costs = g_new0(em_node_cost, MAX(nn, 1));
    em_spec_costs_compute(spec, costs);
    double f = 0;
    for (int i = 0; i < nn; i++) f += costs[i].flops;
    c->flops = f;
    g_free(costs);
    em_spec_free(spec);
  }
  double sps = NAN;
  for (int i = 0; i < nms; i++)
    if (strcmp(ms[i].key, "samples_per_sec") == 0) sps = ms[i].last;
  json_t *cfg = r->config_json ? json_loads(r->config_json, 0, NULL) : NULL;
  json_t *b = cfg ? json_object_get(cfg, "batch_size") : NULL;
  if (b && json_is_number(b) && sps > 0) c->step_s = json_number_value(b) / sps;
  json_decref(cfg);
}

/* ---- loading -------------------------------------------------------------- */

static const char *chosen_metric(EmComparePage *self) {
  guint i = gtk_drop_down_get_selected(self->metric_dropdown);
  if (i == GTK_INVALID_LIST_POSITION) return NULL;
  return gtk_string_list_get_string(self->metrics, i);
}

void em_compare_page_set_runs(EmComparePage *self, const gint64 *ids, int n) {
  g_return_if_fail(EM_IS_COMPARE_PAGE(self));
  set_message(self, "");
  g_array_set_size(self->runs, 0);
  g_clear_pointer(&self->store, em_store_close);
  em_error err = {0};
  self->store = em_store_open(em_app_state_get_registry_dir(self->state), true, &err);
  g_free(self->runs_message);
  self->runs_message = g_strdup(self->store ? "" : err.msg);
  if (!self->store) {
    set_message(self, err.msg);
    return;
  }
  GPtrArray *flats = g_ptr_array_new_with_free_func((GDestroyNotify)json_decref);
  /* every key any run recorded: a run that failed before its first
   * evaluation must not hide test_accuracy from the others */
  GHashTable *seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  GString *title = g_string_new("Comparing runs ");
  for (int i = 0; i < n; i++) {
    em_run r = {0};
    if (em_store_run_get(self->store, ids[i], &r, &err) != EM_OK) {
      set_message(self, err.msg);
      continue;
    }
    em_metric_summary *ms = NULL;
    int nms = 0;
    if (em_store_metrics_summary(self->store, ids[i], &ms, &nms, &err) != EM_OK) nms = 0;
    CmpRun c = {.id = r.id, .accuracy = r.final_test_accuracy,
                .status = em_run_status_name(r.status)};
    c.label = g_strdup_printf("run %" G_GINT64_FORMAT " %s", (gint64)r.id, r.model ? r.model : "");
    read_costs(&c, &r, ms, nms);
    g_array_append_val(self->runs, c);
    g_ptr_array_add(flats, flatten_run(&r, ms, nms));
    for (int k = 0; k < nms; k++)
      if (!g_hash_table_contains(seen, ms[k].key)) g_hash_table_add(seen, g_strdup(ms[k].key));
    em_metric_summaries_free(ms, nms);
    g_string_append_printf(title, "%s%" G_GINT64_FORMAT, self->runs->len > 1 ? ", " : "", (gint64)r.id);
    em_run_clear(&r);
  }
  gtk_label_set_text(self->title_label, self->runs->len ? title->str : "Compare: no runs");
  g_string_free(title, TRUE);

  label_runs(self, flats);
  /* the table's columns: the key, then one per run */
  remove_diff_columns(self);
  add_diff_column(self, "Setting", -1);
  for (guint i = 0; i < self->runs->len; i++)
    add_diff_column(self, g_array_index(self->runs, CmpRun, i).label, (int)i);
  fill_differences(self, flats);
  g_ptr_array_unref(flats);

  /* the metrics every run has; keep the one shown when it is still there */
  char *keep = g_strdup(chosen_metric(self));
  GPtrArray *keys = sorted_keys(seen);
  g_ptr_array_add(keys, NULL);
  self->loading = TRUE;
  gtk_string_list_splice(self->metrics, 0, g_list_model_get_n_items(G_LIST_MODEL(self->metrics)),
                         (const char *const *)keys->pdata);
  guint pick = GTK_INVALID_LIST_POSITION;
  const char *prefer[] = {keep, "test_accuracy", "loss", "train_loss"};
  for (guint p = 0; p < G_N_ELEMENTS(prefer) && pick == GTK_INVALID_LIST_POSITION; p++)
    for (guint k = 0; prefer[p] && k + 1 < keys->len; k++)
      if (strcmp(keys->pdata[k], prefer[p]) == 0) pick = k;
  if (pick == GTK_INVALID_LIST_POSITION && keys->len > 1) pick = 0;
  gtk_drop_down_set_selected(self->metric_dropdown, pick);
  self->loading = FALSE;
  g_ptr_array_unref(keys);
  g_free(keep);
  g_hash_table_unref(seen);
  if (self->runs->len >= 1 && g_list_model_get_n_items(G_LIST_MODEL(self->metrics)) == 0 &&
      !*self->message)
    set_message(self, "These runs recorded no metrics: there are no curves to overlay.");
  g_free(self->runs_message);
  self->runs_message = g_strdup(self->message);
  load_metric(self, chosen_metric(self));
  update_scatter(self);
}

/* ---- signals ------------------------------------------------------------- */

static void on_metric_changed(EmComparePage *self) {
  if (!self->loading) load_metric(self, chosen_metric(self));
}

static void on_cost_changed(EmComparePage *self) {
  update_scatter(self);
}

static void on_log_toggled(EmComparePage *self) {
  em_line_chart_set_log_y(self->chart, gtk_check_button_get_active(self->log_check));
}

static void on_smoothing(EmComparePage *self) {
  em_line_chart_set_smoothing(self->chart, gtk_spin_button_get_value(self->smoothing_spin));
}

/* ---- GObject ------------------------------------------------------------- */

static void em_compare_page_dispose(GObject *object) {
  EmComparePage *self = EM_COMPARE_PAGE(object);
  gtk_widget_dispose_template(GTK_WIDGET(self), EM_TYPE_COMPARE_PAGE);
  g_clear_pointer(&self->store, em_store_close);
  g_clear_object(&self->state);
  g_clear_object(&self->metrics);
  g_clear_object(&self->diffs);
  G_OBJECT_CLASS(em_compare_page_parent_class)->dispose(object);
}

static void em_compare_page_finalize(GObject *object) {
  EmComparePage *self = EM_COMPARE_PAGE(object);
  g_array_unref(self->runs);
  g_hash_table_unref(self->diff_values);
  g_free(self->message);
  g_free(self->runs_message);
  G_OBJECT_CLASS(em_compare_page_parent_class)->finalize(object);
}

static void em_compare_page_class_init(EmComparePageClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  oc->dispose = em_compare_page_dispose;
  oc->finalize = em_compare_page_finalize;
  gtk_widget_class_set_template_from_resource(wc, "/org/ember/Workbench/registry/em-compare-page.ui");
  gtk_widget_class_bind_template_child(wc, EmComparePage, title_label);
  gtk_widget_class_bind_template_child(wc, EmComparePage, message_label);
  gtk_widget_class_bind_template_child(wc, EmComparePage, metric_dropdown);
  gtk_widget_class_bind_template_child(wc, EmComparePage, cost_dropdown);
  gtk_widget_class_bind_template_child(wc, EmComparePage, smoothing_spin);
  gtk_widget_class_bind_template_child(wc, EmComparePage, log_check);
  gtk_widget_class_bind_template_child(wc, EmComparePage, chart_box);
  gtk_widget_class_bind_template_child(wc, EmComparePage, scatter_box);
  gtk_widget_class_bind_template_child(wc, EmComparePage, diff_view);
}

static void em_compare_page_init(EmComparePage *self) {
  g_type_ensure(EM_TYPE_LINE_CHART);
  gtk_widget_init_template(GTK_WIDGET(self));
  em_wheel_guard_all(GTK_WIDGET(self)); /* the wheel scrolls the page */
  self->message = g_strdup("");
  self->runs_message = g_strdup("");
  self->runs = g_array_new(FALSE, TRUE, sizeof(CmpRun));
  g_array_set_clear_func(self->runs, cmp_run_clear);
  self->diff_values = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)g_strfreev);
  self->chart = EM_LINE_CHART(em_line_chart_new());
  em_line_chart_set_integer_x(self->chart, TRUE);
  em_line_chart_set_x_label(self->chart, "step");
  gtk_box_append(self->chart_box, GTK_WIDGET(self->chart));
  self->scatter = EM_COST_SCATTER(em_cost_scatter_new());
  gtk_box_append(self->scatter_box, GTK_WIDGET(self->scatter));
  self->metrics = gtk_string_list_new(NULL);
  gtk_drop_down_set_model(self->metric_dropdown, G_LIST_MODEL(self->metrics));
  self->diffs = g_list_store_new(GTK_TYPE_STRING_OBJECT);
  GtkNoSelection *sel = gtk_no_selection_new(G_LIST_MODEL(g_object_ref(self->diffs)));
  gtk_column_view_set_model(self->diff_view, GTK_SELECTION_MODEL(sel));
  g_object_unref(sel);
  g_signal_connect_swapped(self->metric_dropdown, "notify::selected", G_CALLBACK(on_metric_changed), self);
  g_signal_connect_swapped(self->cost_dropdown, "notify::selected", G_CALLBACK(on_cost_changed), self);
  g_signal_connect_swapped(self->log_check, "toggled", G_CALLBACK(on_log_toggled), self);
  g_signal_connect_swapped(self->smoothing_spin, "value-changed", G_CALLBACK(on_smoothing), self);
  update_scatter(self);
}

GtkWidget *em_compare_page_new(EmAppState *state) {
  g_return_val_if_fail(EM_IS_APP_STATE(state), NULL);
  EmComparePage *self = g_object_new(EM_TYPE_COMPARE_PAGE, NULL);
  self->state = g_object_ref(state);
  return GTK_WIDGET(self);
}

const char *em_compare_page_get_metric(EmComparePage *self) {
  g_return_val_if_fail(EM_IS_COMPARE_PAGE(self), NULL);
  return chosen_metric(self);
}

gboolean em_compare_page_set_metric(EmComparePage *self, const char *key) {
  g_return_val_if_fail(EM_IS_COMPARE_PAGE(self), FALSE);
  guint n = g_list_model_get_n_items(G_LIST_MODEL(self->metrics));
  for (guint i = 0; i < n; i++)
    if (g_strcmp0(gtk_string_list_get_string(self->metrics, i), key) == 0) {
      gtk_drop_down_set_selected(self->metric_dropdown, i);
      return TRUE;
    }
  return FALSE;
}

gint64 em_compare_page_get_n_points(EmComparePage *self, int run_index) {
  g_return_val_if_fail(EM_IS_COMPARE_PAGE(self), -1);
  return em_line_chart_get_n_points(self->chart, run_index);
}

guint em_compare_page_get_n_differences(EmComparePage *self) {
  g_return_val_if_fail(EM_IS_COMPARE_PAGE(self), 0);
  return g_list_model_get_n_items(G_LIST_MODEL(self->diffs));
}

const char *em_compare_page_get_difference_key(EmComparePage *self, guint i) {
  g_return_val_if_fail(EM_IS_COMPARE_PAGE(self), NULL);
  GtkStringObject *o = g_list_model_get_item(G_LIST_MODEL(self->diffs), i);
  if (!o) return NULL;
  const char *s = gtk_string_object_get_string(o);
  g_object_unref(o); /* the store keeps it alive */
  return s;
}

const char *em_compare_page_get_difference(EmComparePage *self, const char *key, guint run) {
  g_return_val_if_fail(EM_IS_COMPARE_PAGE(self), NULL);
  char **values = g_hash_table_lookup(self->diff_values, key);
  return values && run < g_strv_length(values) ? values[run] : NULL;
}

const char *em_compare_page_get_chart_title(EmComparePage *self) {
  g_return_val_if_fail(EM_IS_COMPARE_PAGE(self), NULL);
  return em_line_chart_get_title(self->chart);
}

const char *em_compare_page_get_message(EmComparePage *self) {
  g_return_val_if_fail(EM_IS_COMPARE_PAGE(self), "");
  return self->message;
}

const char *em_compare_page_get_run_label(EmComparePage *self, guint i) {
  g_return_val_if_fail(EM_IS_COMPARE_PAGE(self), NULL);
  return i < self->runs->len ? g_array_index(self->runs, CmpRun, i).label : NULL;
}
