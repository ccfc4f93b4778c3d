/* em-sweeps-view.c: the Sweeps page's live view, filled from a snapshot
 * of the registry (em-sweeps-read.c) on the main thread: the list of
 * sweeps, the trials table (filtered by the parallel coordinates'
 * brushes, its selection kept across updates), the best-so-far chart,
 * the parallel coordinates, the importances, the status line and which
 * buttons apply. Nothing is rebuilt when the sweep has not changed. */
#include "em-sweeps-page-private.h"

#include <math.h>
#include <string.h>

#include "em-text-row.h"

/* The table's columns: #, status, one per varied setting, the metric,
 * epochs, steps and the pruner's decision (a cell's column index, and
 * RIGHT for the numbers). */
#define RIGHT 0x10000
#define ELLIPSIZE 0x20000 /* the decision's (a tooltip holds it whole); the rest show whole */
#define CELL(data) (GPOINTER_TO_INT(data) & 0xffff)

void em_sweeps_page_set_status_(EmSweepsPage *self, const char *text) {
  gtk_label_set_text(self->status_label, text);
}

/* ---- the table ---------------------------------------------------------------------- */

static void cell_setup(GtkSignalListItemFactory *f, GtkListItem *item, gpointer data) {
  (void)f;
  GtkWidget *label = gtk_label_new(NULL);
  gtk_label_set_xalign(GTK_LABEL(label), GPOINTER_TO_INT(data) & RIGHT ? 1 : 0);
  if (GPOINTER_TO_INT(data) & ELLIPSIZE) gtk_label_set_ellipsize(GTK_LABEL(label), PANGO_ELLIPSIZE_END);
  gtk_list_item_set_child(item, label);
}

static void cell_bind(GtkSignalListItemFactory *f, GtkListItem *item, gpointer data) {
  (void)f;
  const char *text = em_text_row_get_cell(gtk_list_item_get_item(item), CELL(data));
  GtkWidget *label = gtk_list_item_get_child(item);
  gtk_label_set_text(GTK_LABEL(label), text);
  gtk_widget_set_tooltip_text(label, *text ? text : NULL);
}

static gboolean keep_row(gpointer item, gpointer data) {
  EmSweepsPage *self = data;
  if (!em_parallel_coords_has_brush(self->pc)) return TRUE;
  return em_parallel_coords_is_kept(self->pc, (int)em_text_row_get_id(item));
}

static void show_status(EmSweepsPage *self);

static void on_brush_changed(EmParallelCoords *pc, EmSweepsPage *self) {
  (void)pc;
  gtk_filter_changed(GTK_FILTER(self->filter), GTK_FILTER_CHANGE_DIFFERENT);
  show_status(self);
}

static void on_selection_changed(GtkSelectionModel *m, guint pos, guint n, EmSweepsPage *self) {
  (void)m;
  (void)pos;
  (void)n;
  em_sweeps_page_update_buttons_(self);
}

static void add_column(EmSweepsPage *self, const char *title, int cell, gboolean right,
                       gboolean expand) {
  GtkListItemFactory *f = gtk_signal_list_item_factory_new();
  gpointer data = GINT_TO_POINTER(cell | (right ? RIGHT : 0) | (expand ? ELLIPSIZE : 0));
  g_signal_connect(f, "setup", G_CALLBACK(cell_setup), data);
  g_signal_connect(f, "bind", G_CALLBACK(cell_bind), data);
  GtkColumnViewColumn *c = gtk_column_view_column_new(title, f);
  gtk_column_view_column_set_resizable(c, TRUE);
  gtk_column_view_column_set_expand(c, expand);
  gtk_column_view_append_column(self->trials_view, c);
  g_object_unref(c);
}

/* The columns of snapshot s's sweep, made again when they change. */
static void set_columns(EmSweepsPage *self, const EmSweepSnapshot *s) {
  gboolean desc = s && s->have_desc;
  GString *key = g_string_new(self->metric ? self->metric : "metric");
  int k = desc ? s->d.n_params : 1;
  for (int p = 0; desc && p < k; p++) g_string_append_printf(key, "|%s", s->d.p[p].path);
  if (!g_strcmp0(key->str, self->columns_key)) {
    g_string_free(key, TRUE);
    return;
  }
  g_free(self->columns_key);
  self->columns_key = g_string_free(key, FALSE);
  GListModel *cols = gtk_column_view_get_columns(self->trials_view);
  while (g_list_model_get_n_items(cols)) {
    GtkColumnViewColumn *c = g_list_model_get_item(cols, 0);
    gtk_column_view_remove_column(self->trials_view, c);
    g_object_unref(c);
  }
  add_column(self, "#", 0, TRUE, FALSE);
  add_column(self, "Status", 1, FALSE, FALSE);
  for (int p = 0; p < k; p++) {
    const char *path = desc ? s->d.p[p].path : "Settings";
    const char *dot = strrchr(path, '.');
    add_column(self, dot && !g_str_has_prefix(path, "nodes.") ? dot + 1 : path, 2 + p, FALSE, FALSE);
  }
  add_column(self, self->metric ? self->metric : "Metric", 2 + k, TRUE, FALSE);
  add_column(self, "Epochs", 3 + k, TRUE, FALSE);
  add_column(self, "Steps", 4 + k, TRUE, FALSE);
  add_column(self, "Pruner's decision", 5 + k, FALSE, TRUE);
  self->n_cols = 6 + k;
}

void em_sweeps_page_build_view_(EmSweepsPage *self) {
  self->trial_rows = g_list_store_new(EM_TYPE_TEXT_ROW);
  self->filter = gtk_custom_filter_new(keep_row, self, NULL);
  GtkFilterListModel *filtered = gtk_filter_list_model_new(G_LIST_MODEL(g_object_ref(self->trial_rows)),
                                                           GTK_FILTER(g_object_ref(self->filter)));
  self->selection = gtk_multi_selection_new(G_LIST_MODEL(filtered));
  set_columns(self, NULL);
  gtk_column_view_set_model(self->trials_view, GTK_SELECTION_MODEL(self->selection));
  g_signal_connect_object(self->selection, "selection-changed", G_CALLBACK(on_selection_changed),
                          self, 0);

  self->pc = EM_PARALLEL_COORDS(em_parallel_coords_new());
  gtk_frame_set_child(self->pc_frame, GTK_WIDGET(self->pc));
  g_signal_connect_object(self->pc, "brush-changed", G_CALLBACK(on_brush_changed), self, 0);
  self->best_chart = EM_LINE_CHART(em_line_chart_new());
  em_line_chart_set_title(self->best_chart, "Best so far");
  em_line_chart_set_x_label(self->best_chart, "completed trials, in finish order");
  em_line_chart_set_integer_x(self->best_chart, TRUE);
  gtk_widget_set_vexpand(GTK_WIDGET(self->best_chart), TRUE);
  gtk_frame_set_child(self->best_frame, GTK_WIDGET(self->best_chart));
}

/* "lr=0.01, batch_size=64": a trial's settings, short. */
static char *settings_text(const char *params_json) {
  GString *s = g_string_new(NULL);
  const char *p = params_json ? params_json : "";
  /* {"training.lr": 0.01, "nodes.fc1.out_features": 128} -> lr=0.01, fc1.out_features=128 */
  for (; *p; p++) {
    if (*p == '{' || *p == '}' || *p == '"') continue;
    if (*p == ':') {
      g_string_append_c(s, '=');
      while (p[1] == ' ') p++;
      continue;
    }
    g_string_append_c(s, *p);
  }
  char *t = g_string_free(s, FALSE), *out = t;
  for (char *k; (k = strstr(out, "training."));) memmove(k, k + 9, strlen(k + 9) + 1);
  for (char *k; (k = strstr(out, "nodes."));) memmove(k, k + 6, strlen(k + 6) + 1);
  return out;
}

static void fill_table(EmSweepsPage *self, const EmSweepSnapshot *s) {
  /* the selection, by trial number, across the rebuild */
  GArray *selected = g_array_new(FALSE, FALSE, sizeof(int));
  GtkBitset *bits = gtk_selection_model_get_selection(GTK_SELECTION_MODEL(self->selection));
  guint n_shown = g_list_model_get_n_items(G_LIST_MODEL(self->selection));
  for (guint i = 0; i < n_shown; i++)
    if (gtk_bitset_contains(bits, i)) {
      EmTextRow *r = g_list_model_get_item(G_LIST_MODEL(self->selection), i);
      int number = (int)em_text_row_get_id(r);
      g_array_append_val(selected, number);
      g_object_unref(r);
    }
  gtk_bitset_unref(bits);
  GPtrArray *rows = g_ptr_array_new_with_free_func(g_object_unref);
  g_array_set_size(self->runs, 0);
  for (int i = 0; i < s->n_trials; i++) {
    const em_trial_row *t = &s->trials[i];
    int k = s->have_desc ? s->d.n_params : 1, j = 0;
    char **c = g_new0(char *, 7 + k);
    c[j++] = g_strdup_printf("%d", t->number);
    c[j++] = g_strdup_printf("%s%s", em_trial_status_name(t->status), i == s->best ? " (best)" : "");
    for (int p = 0; p < k; p++) {
      char v[64];
      double x = s->have_desc ? em_sweep_table_at(&s->table, i, p) : NAN;
      if (!s->have_desc) c[j++] = settings_text(t->params_json);
      else if (s->table.axis[p].categorical || isnan(x)) {
        em_sweep_axis_format(&s->table.axis[p], x, v, sizeof v);
        c[j++] = g_strdup(v);
      } else {
        c[j++] = g_strdup_printf("%.4g", x);
      }
    }
    c[j++] = !isfinite(t->metric) ? g_strdup("-")
             : t->metric != 0 && fabs(t->metric) < 1e-3 ? g_strdup_printf("%.3g", t->metric)
                                                        : g_strdup_printf("%.4f", t->metric);
    c[j++] = g_strdup_printf("%d", t->epochs);
    c[j++] = g_strdup_printf("%lld", (long long)t->steps);
    c[j++] = g_strdup(t->decision ? t->decision : "");
    g_ptr_array_add(rows, em_text_row_new(t->number, c));
    if (t->number >= 0) {
      if ((guint)t->number >= self->runs->len) g_array_set_size(self->runs, t->number + 1);
      g_array_index(self->runs, gint64, t->number) = t->run;
    }
  }
  g_list_store_splice(self->trial_rows, 0, g_list_model_get_n_items(G_LIST_MODEL(self->trial_rows)),
                      rows->pdata, rows->len);
  g_ptr_array_unref(rows);
  em_sweeps_page_select_trials(self, (const int *)(void *)selected->data, (int)selected->len);
  g_array_unref(selected);
}

/* ---- the charts --------------------------------------------------------------------------- */

static void fill_charts(EmSweepsPage *self, const EmSweepSnapshot *s) {
  em_line_chart_clear(self->best_chart);
  em_line_chart_set_y_label(self->best_chart, s->have_desc ? s->d.metric : "");
  em_parallel_coords_set_table(self->pc, s->have_desc ? &s->table : NULL, s->best);
  gtk_filter_changed(GTK_FILTER(self->filter), GTK_FILTER_CHANGE_DIFFERENT);
  if (!s->have_desc) return;
  GdkRGBA each = {0.55f, 0.55f, 0.60f, 1}, best = {0.90f, 0.45f, 0.10f, 1};
  int a = em_line_chart_add_series(self->best_chart, "each trial", &each);
  int b = em_line_chart_add_series(self->best_chart, "best so far", &best);
  /* a loss that falls by decades reads on a log axis */
  double lo = INFINITY, hi = 0;
  for (int j = 0; j < s->n_done; j++) {
    lo = fmin(lo, s->done_y[j]);
    hi = fmax(hi, s->done_y[j]);
  }
  em_line_chart_set_log_y(self->best_chart, !s->d.maximize && lo > 0 && hi / lo > 100);
  for (int j = 0; j < s->n_done; j++) {
    double x = j + 1;
    em_line_chart_append(self->best_chart, a, &x, &s->done_y[j], 1);
    em_line_chart_append(self->best_chart, b, &x, &s->best_y[j], 1);
  }
  /* the importances: a bar per setting, the largest first */
  GtkWidget *c;
  while ((c = gtk_widget_get_first_child(GTK_WIDGET(self->importance_grid))))
    gtk_grid_remove(self->importance_grid, c);
  int order[EM_TUNE_MAX_PARAMS];
  for (int p = 0; p < s->d.n_params; p++) order[p] = p;
  for (int i = 1; i < s->d.n_params; i++) /* a few: insertion sort, NAN last */
    for (int j = i; j > 0; j--) {
      double x = s->eta2[order[j]], y = s->eta2[order[j - 1]];
      if (!(isnan(y) ? !isnan(x) : x > y)) break;
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  for (int i = 0; i < s->d.n_params; i++) {
    int p = order[i];
    GtkWidget *name = gtk_label_new(s->d.p[p].path);
    gtk_label_set_xalign(GTK_LABEL(name), 0);
    gtk_label_set_ellipsize(GTK_LABEL(name), PANGO_ELLIPSIZE_MIDDLE);
    GtkWidget *bar = gtk_level_bar_new_for_interval(0, 1);
    gtk_level_bar_set_value(GTK_LEVEL_BAR(bar), isnan(s->eta2[p]) ? 0 : s->eta2[p]);
    gtk_widget_set_hexpand(bar, TRUE);
    gtk_widget_set_valign(bar, GTK_ALIGN_CENTER);
    char pct[32];
    if (isnan(s->eta2[p])) g_strlcpy(pct, "-", sizeof pct);
    else g_snprintf(pct, sizeof pct, "%.0f%%", 100 * s->eta2[p]);
    GtkWidget *value = gtk_label_new(pct);
    gtk_label_set_xalign(GTK_LABEL(value), 1);
    gtk_label_set_width_chars(GTK_LABEL(value), 5);
    gtk_grid_attach(self->importance_grid, name, 0, i, 1, 1);
    gtk_grid_attach(self->importance_grid, bar, 1, i, 1, 1);
    gtk_grid_attach(self->importance_grid, value, 2, i, 1, 1);
  }
  char *note = g_strdup_printf(
      "Importance: one-way ANOVA eta² of %s over each setting's values (ranges in %d bins), "
      "from %d completed trial%s%s", s->d.metric, em_sweep_importance_bins(s->n_eta), s->n_eta,
      s->n_eta == 1 ? "" : "s", s->n_eta < 3 ? " (3 at least)" : "");
  gtk_label_set_text(self->importance_note, note);
  g_free(note);
}

/* ---- status and buttons ---------------------------------------------------------------- */

static const em_sweep_row *shown_sweep(EmSweepsPage *self) {
  EmSweepSnapshot *s = self->snap;
  return s && s->sweep_index >= 0 ? &s->sweeps[s->sweep_index] : NULL;
}

static gboolean runner_gone(EmSweepsPage *self) {
  const em_sweep_row *sw = shown_sweep(self);
  return sw && (sw->status == EM_SWEEP_RUNNING || sw->status == EM_SWEEP_PAUSED) &&
         !self->snap->runner_alive && !self->proc;
}

void em_sweeps_page_update_buttons_(EmSweepsPage *self) {
  const em_sweep_row *sw = shown_sweep(self);
  gboolean going = sw && (sw->status == EM_SWEEP_RUNNING || sw->status == EM_SWEEP_PAUSED);
  gtk_widget_set_sensitive(GTK_WIDGET(self->pause_button), sw && sw->status == EM_SWEEP_RUNNING &&
                                                               !runner_gone(self));
  gtk_widget_set_sensitive(GTK_WIDGET(self->cancel_button), going);
  gtk_widget_set_sensitive(GTK_WIDGET(self->resume_button), runner_gone(self));
  gtk_widget_set_sensitive(GTK_WIDGET(self->register_button), self->snap && self->snap->best >= 0);
  GtkBitset *bits = gtk_selection_model_get_selection(GTK_SELECTION_MODEL(self->selection));
  gtk_widget_set_sensitive(GTK_WIDGET(self->compare_button), !gtk_bitset_is_empty(bits));
  gtk_bitset_unref(bits);
}

static void show_status(EmSweepsPage *self) {
  EmSweepSnapshot *s = self->snap;
  const em_sweep_row *sw = shown_sweep(self);
  if (!sw) {
    em_sweeps_page_set_status_(self, s && s->error ? "No sweeps yet: start one with New sweep."
                                                   : "No sweeps in this registry yet: start one "
                                                     "with New sweep.");
    return;
  }
  int count[6] = {0};
  for (int i = 0; i < s->n_trials; i++)
    if ((unsigned)s->trials[i].status < 6) count[s->trials[i].status]++;
  GString *t = g_string_new(NULL);
  g_string_append_printf(t, "Sweep %lld%s%s: %s", (long long)sw->id, sw->name ? " " : "",
                         sw->name ? sw->name : "", em_sweep_status_name(sw->status));
  if (runner_gone(self))
    g_string_append(t, ", but its runner is gone (Resume goes on)");
  else if (sw->runner_pid)
    g_string_append_printf(t, " (runner process %lld)", (long long)sw->runner_pid);
  g_string_append_printf(t, " · %d of %d trials completed", count[EM_TRIAL_COMPLETED],
                         s->have_desc ? MAX(s->d.trials, s->n_trials) : s->n_trials);
  static const em_trial_status others[] = {EM_TRIAL_RUNNING, EM_TRIAL_PRUNED, EM_TRIAL_FAILED,
                                           EM_TRIAL_CANCELLED};
  for (int i = 0; i < 4; i++)
    if (count[others[i]])
      g_string_append_printf(t, ", %d %s", count[others[i]], em_trial_status_name(others[i]));
  if (s->best >= 0)
    g_string_append_printf(t, " · best: trial %d, %s %.4g", s->trials[s->best].number, s->d.metric,
                           s->trials[s->best].metric);
  if (em_parallel_coords_has_brush(self->pc))
    g_string_append_printf(t, " · the brushes keep %d of them", em_parallel_coords_get_n_kept(self->pc));
  em_sweeps_page_set_status_(self, t->str);
  g_string_free(t, TRUE);
}

/* ---- applying a snapshot ------------------------------------------------------------------ */

static void fill_list(EmSweepsPage *self, const EmSweepSnapshot *s) {
  self->filling_list = TRUE;
  char **names = g_new0(char *, s->n_sweeps + 1);
  for (int i = 0; i < s->n_sweeps; i++) /* newest first */
    names[i] = g_strdup_printf("%lld · %s · %s", (long long)s->sweeps[s->n_sweeps - 1 - i].id,
                               s->sweeps[s->n_sweeps - 1 - i].name ? s->sweeps[s->n_sweeps - 1 - i].name
                                                                   : "",
                               em_sweep_status_name(s->sweeps[s->n_sweeps - 1 - i].status));
  gtk_string_list_splice(self->sweep_names, 0,
                         g_list_model_get_n_items(G_LIST_MODEL(self->sweep_names)),
                         (const char *const *)names);
  g_strfreev(names);
  if (s->sweep_index >= 0)
    gtk_drop_down_set_selected(self->sweep_drop, (guint)(s->n_sweeps - 1 - s->sweep_index));
  self->filling_list = FALSE;
}

void em_sweeps_page_apply_(EmSweepsPage *self, EmSweepSnapshot *s) {
  if (s->sweep_index >= 0 && self->want_name) g_clear_pointer(&self->want_name, g_free);
  gboolean list_changed = g_strcmp0(s->sweeps_digest, self->sweeps_digest) != 0;
  gboolean changed = g_strcmp0(s->digest, self->digest) != 0 || s->sweep != self->sweep;
  if (s->sweep || !self->want_name) self->sweep = s->sweep;
  em_sweep_snapshot_free(self->snap);
  self->snap = s;
  self->n_updates++;
  if (list_changed || changed) {
    g_free(self->sweeps_digest);
    self->sweeps_digest = g_strdup(s->sweeps_digest);
    fill_list(self, s);
  }
  if (changed) {
    g_free(self->digest);
    self->digest = g_strdup(s->digest);
    g_free(self->metric);
    self->metric = g_strdup(s->have_desc ? s->d.metric : "metric");
    self->maximize = s->have_desc && s->d.maximize;
    set_columns(self, s);
    fill_charts(self, s);
    fill_table(self, s);
  }
  show_status(self);
  em_sweeps_page_update_buttons_(self);
  if (self->n_updates == 1 && !s->n_sweeps) /* nothing to show yet: the form */
    gtk_toggle_button_set_active(self->new_toggle, TRUE);
}
