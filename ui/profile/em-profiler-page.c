/* em-profiler-page.c: see the header. */
#include "em-profiler-page.h"

#include <string.h>
#include <unistd.h>

#include "em-nn.h"
#include "em-profile-run.h"
#include "em-profile.h"
#include "em-timeline.h"
#include "em-wheel-guard.h"

/* ---- one row of the op table ------------------------------------------------ */

#define EM_TYPE_OP_ITEM (em_op_item_get_type())
G_DECLARE_FINAL_TYPE(EmOpItem, em_op_item, EM, OP_ITEM, GObject)

struct _EmOpItem {
  GObject parent_instance;
  em_op_row row;
  char *layer; /* the builder node it belongs to (NULL: none) */
};
G_DEFINE_FINAL_TYPE(EmOpItem, em_op_item, G_TYPE_OBJECT)

static void em_op_item_finalize(GObject *o) {
  g_free(EM_OP_ITEM(o)->layer);
  G_OBJECT_CLASS(em_op_item_parent_class)->finalize(o);
}
static void em_op_item_class_init(EmOpItemClass *k) { G_OBJECT_CLASS(k)->finalize = em_op_item_finalize; }
static void em_op_item_init(EmOpItem *self) { (void)self; }

/* ---- page -------------------------------------------------------------------- */

struct _EmProfilerPage {
  GtkBox parent_instance;
  GtkColumnView *column_view;
  GtkDropDown *group_dropdown;
  GtkSpinButton *steps_spin;
  GtkLabel *status_label;
  EmTimeline *timeline;
  EmAppState *state;
  GListStore *store;
  GtkSingleSelection *selection;
  GCancellable *cancel;
  atomic_int stop;
  gboolean busy, preparing, have_profile, selecting;
  char *trace_path;
  em_op_table tables[2]; /* by op, by layer (n_rows 0: none) */
  GCancellable *ready_cancel;
};

G_DEFINE_FINAL_TYPE(EmProfilerPage, em_profiler_page, GTK_TYPE_BOX)

enum { COL_NAME, COL_COUNT, COL_TOTAL, COL_SELF, COL_MEAN, COL_PCT, COL_FLOPS, COL_BYTES, N_COLS };
static const char *col_titles[] = {"Name", "Count", "Total ms", "Self ms", "Mean ms", "%",
                                   "GFLOP", "Bytes"};

static double col_value(const EmOpItem *it, int col) {
  const em_op_row *r = &it->row;
  switch (col) {
  case COL_COUNT: return (double)r->count;
  case COL_TOTAL: return r->total_ms;
  case COL_SELF: return r->self_ms;
  case COL_MEAN: return r->mean_ms;
  case COL_PCT: return r->percent;
  case COL_FLOPS: return r->flops;
  case COL_BYTES: return (double)r->bytes;
  default: return 0;
  }
}

static void item_setup(GtkSignalListItemFactory *f, GtkListItem *li, gpointer data) {
  (void)f;
  GtkWidget *l = gtk_label_new(NULL);
  gtk_label_set_xalign(GTK_LABEL(l), GPOINTER_TO_INT(data) == COL_NAME ? 0 : 1);
  gtk_list_item_set_child(li, l);
}

static void item_bind(GtkSignalListItemFactory *f, GtkListItem *li, gpointer data) {
  (void)f;
  EmOpItem *it = gtk_list_item_get_item(li);
  int col = GPOINTER_TO_INT(data);
  char buf[160];
  const em_op_row *r = &it->row;
  switch (col) {
  case COL_NAME: g_strlcpy(buf, r->name, sizeof buf); break;
  case COL_COUNT: em_format_count(r->count, buf, sizeof buf); break;
  case COL_PCT: snprintf(buf, sizeof buf, "%.1f", r->percent); break;
  case COL_FLOPS: snprintf(buf, sizeof buf, r->flops > 0 ? "%.3f" : "", 1e-9 * r->flops); break;
  case COL_BYTES: em_format_bytes(r->bytes, buf, sizeof buf); break; /* "1.5 MiB", not 1572864 */
  default: snprintf(buf, sizeof buf, "%.3f", col_value(it, col)); break;
  }
  gtk_label_set_text(GTK_LABEL(gtk_list_item_get_child(li)), buf);
}

static int compare_col(gconstpointer a, gconstpointer b, gpointer data) {
  const EmOpItem *x = a, *y = b;
  int col = GPOINTER_TO_INT(data);
  if (col == COL_NAME) {
    int c = g_strcmp0(x->row.name, y->row.name);
    return c < 0 ? GTK_ORDERING_SMALLER : c > 0 ? GTK_ORDERING_LARGER : GTK_ORDERING_EQUAL;
  }
  double u = col_value(x, col), v = col_value(y, col);
  return u < v ? GTK_ORDERING_SMALLER : u > v ? GTK_ORDERING_LARGER : GTK_ORDERING_EQUAL;
}

static void build_columns(EmProfilerPage *self) {
  GtkColumnViewColumn *sort_col = NULL;
  for (int c = 0; c < N_COLS; c++) {
    GtkListItemFactory *f = gtk_signal_list_item_factory_new();
    g_signal_connect(f, "setup", G_CALLBACK(item_setup), GINT_TO_POINTER(c));
    g_signal_connect(f, "bind", G_CALLBACK(item_bind), GINT_TO_POINTER(c));
    GtkColumnViewColumn *col = gtk_column_view_column_new(col_titles[c], f);
    GtkSorter *sorter = GTK_SORTER(gtk_custom_sorter_new(compare_col, GINT_TO_POINTER(c), NULL));
    gtk_column_view_column_set_sorter(col, sorter);
    g_object_unref(sorter);
    gtk_column_view_column_set_resizable(col, TRUE);
    if (c == COL_NAME) gtk_column_view_column_set_expand(col, TRUE);
    gtk_column_view_append_column(self->column_view, col);
    if (c == COL_TOTAL) sort_col = col;
    g_object_unref(col);
  }
  GtkSortListModel *sorted =
      gtk_sort_list_model_new(G_LIST_MODEL(g_object_ref(self->store)),
                              g_object_ref(gtk_column_view_get_sorter(self->column_view)));
  self->selection = gtk_single_selection_new(G_LIST_MODEL(sorted));
  gtk_single_selection_set_autoselect(self->selection, FALSE);
  gtk_single_selection_set_can_unselect(self->selection, TRUE);
  gtk_single_selection_set_selected(self->selection, GTK_INVALID_LIST_POSITION);
  gtk_column_view_set_model(self->column_view, GTK_SELECTION_MODEL(self->selection));
  gtk_column_view_sort_by_column(self->column_view, sort_col, GTK_SORT_DESCENDING);
}

static char *layer_of_row(EmProfilerPage *self, const char *name, gboolean by_layer) {
  if (by_layer) {
    if (name[0] == '(') return NULL; /* "(outside layers)" */
    const char *p = strstr(name, " (backward)");
    return p ? g_strndup(name, (gsize)(p - name)) : g_strdup(name);
  }
  const char *l = em_timeline_layer_of(self->timeline, name);
  return l ? g_strdup(l) : NULL;
}

static void fill_table(EmProfilerPage *self) {
  gboolean by_layer = gtk_drop_down_get_selected(self->group_dropdown) == 1;
  g_list_store_remove_all(self->store);
  if (!self->have_profile) return;
  const em_op_table *t = &self->tables[by_layer ? 1 : 0];
  for (int i = 0; i < t->n_rows; i++) {
    EmOpItem *it = g_object_new(EM_TYPE_OP_ITEM, NULL);
    it->row = t->rows[i];
    it->layer = layer_of_row(self, t->rows[i].name, by_layer);
    g_list_store_append(self->store, it);
    g_object_unref(it);
  }
  char recs[32];
  char *s = g_strdup_printf("%d rows · %lld steps in %.1f ms · %s records%s%s%s", t->n_rows,
                            (long long)t->steps, t->wall_ms,
                            em_format_count(t->records, recs, sizeof recs),
                            t->dropped ? " (oldest dropped)" : "",
                            self->trace_path ? " · trace written to " : "",
                            self->trace_path ? self->trace_path : "");
  gtk_label_set_text(self->status_label, s);
  gtk_widget_set_tooltip_text(GTK_WIDGET(self->status_label), self->trace_path);
  g_free(s);
}

/* A profiled window ended: the tables and the timeline are prepared in a
 * worker (the records can be many, the trace megabytes), so that a
 * training's frames never wait on them. */
typedef struct {
  char *trace;
  em_op_table tables[2];
  em_error err;
  EmTimelineData *timeline;
  GError *tl_error;
} ready_job;

static void ready_job_free(ready_job *j) {
  for (int k = 0; k < 2; k++) em_op_table_free(&j->tables[k]);
  em_timeline_data_free(j->timeline);
  g_clear_error(&j->tl_error);
  g_free(j->trace);
  g_free(j);
}

static void ready_thread(GTask *task, gpointer src, gpointer data, GCancellable *c) {
  (void)src;
  (void)c;
  ready_job *j = data;
  if (em_op_table_build(&j->tables[0], EM_OP_TABLE_BY_OP, &j->err) == EM_OK)
    em_op_table_build(&j->tables[1], EM_OP_TABLE_BY_LAYER, &j->err);
  if (j->trace && *j->trace) j->timeline = em_timeline_data_load(j->trace, &j->tl_error);
  g_task_return_boolean(task, TRUE);
}

static void on_ready_done(GObject *src, GAsyncResult *res, gpointer data) {
  (void)data;
  EmProfilerPage *self = EM_PROFILER_PAGE(src);
  ready_job *j = g_task_get_task_data(G_TASK(res));
  g_task_propagate_boolean(G_TASK(res), NULL);
  if (g_cancellable_is_cancelled(g_task_get_cancellable(G_TASK(res)))) return;
  self->preparing = FALSE;
  for (int k = 0; k < 2; k++) {
    em_op_table_free(&self->tables[k]);
    self->tables[k] = j->tables[k];
    memset(&j->tables[k], 0, sizeof j->tables[k]);
  }
  self->have_profile = TRUE;
  g_free(self->trace_path);
  self->trace_path = g_steal_pointer(&j->trace);
  if (j->timeline) em_timeline_set_data(self->timeline, g_steal_pointer(&j->timeline));
  fill_table(self);
  if (j->err.status != EM_OK) gtk_label_set_text(self->status_label, j->err.msg);
  else if (j->tl_error) gtk_label_set_text(self->status_label, j->tl_error->message);
}

static void on_profile_ready(EmAppState *state, const char *trace, EmProfilerPage *self) {
  (void)state;
  if (self->ready_cancel) g_cancellable_cancel(self->ready_cancel);
  g_clear_object(&self->ready_cancel);
  self->ready_cancel = g_cancellable_new();
  ready_job *j = g_new0(ready_job, 1);
  j->trace = g_strdup(trace);
  self->preparing = TRUE;
  gtk_label_set_text(self->status_label, "Reading the profile…");
  GTask *task = g_task_new(self, self->ready_cancel, on_ready_done, NULL);
  g_task_set_task_data(task, j, (GDestroyNotify)ready_job_free);
  g_task_run_in_thread(task, ready_thread);
  g_object_unref(task);
}

static void on_group_changed(GtkDropDown *d, GParamSpec *ps, EmProfilerPage *self) {
  (void)d;
  (void)ps;
  fill_table(self);
}

static void on_selection(GtkSelectionModel *m, guint pos, guint n, EmProfilerPage *self) {
  (void)m;
  (void)pos;
  (void)n;
  if (self->selecting) return;
  EmOpItem *it = gtk_single_selection_get_selected_item(self->selection);
  if (it && it->layer && self->state) em_app_state_select_layer(self->state, it->layer);
}

/* ---- profile now ------------------------------------------------------------------ */

typedef struct {
  char *spec_json, *dataset, *data_dir, *trace;
  int steps;
  em_profile_run_options o;
  em_error err;
} run_job;

static void run_job_free(run_job *j) {
  g_free(j->spec_json);
  g_free(j->dataset);
  g_free(j->data_dir);
  g_free(j->trace);
  g_free(j);
}

static void run_thread(GTask *task, gpointer src, gpointer data, GCancellable *c) {
  (void)src;
  (void)c;
  run_job *j = data;
  em_profile_run(&j->o, &j->err);
  g_task_return_boolean(task, j->err.status == EM_OK);
}

static void on_run_done(GObject *src, GAsyncResult *res, gpointer data) {
  (void)data;
  EmProfilerPage *self = EM_PROFILER_PAGE(src);
  run_job *j = g_task_get_task_data(G_TASK(res));
  gboolean ok = g_task_propagate_boolean(G_TASK(res), NULL);
  self->busy = FALSE;
  if (g_cancellable_is_cancelled(g_task_get_cancellable(G_TASK(res)))) return; /* disposed */
  gtk_widget_action_set_enabled(GTK_WIDGET(self), "profiler.run", TRUE);
  if (!ok) {
    char *m = g_strdup_printf("Profiling failed: %s", j->err.msg);
    gtk_label_set_text(self->status_label, m);
    g_free(m);
    return;
  }
  if (self->state) em_app_state_profile_ready(self->state, j->trace);
  else on_profile_ready(NULL, j->trace, self);
}

gboolean em_profiler_page_profile_now(EmProfilerPage *self, int steps) {
  g_return_val_if_fail(EM_IS_PROFILER_PAGE(self), FALSE);
  const char *why = NULL;
  const char *spec = self->state ? em_app_state_get_spec_json(self->state) : NULL;
  if (self->busy || self->preparing) why = "A profile is already running.";
  else if (self->state && em_app_state_is_training(self->state))
    why = "Training is running: its profiled window shows here when it ends (or stop it first).";
  else if (em_profile_running()) why = "The profiler is already recording.";
  else if (!spec) why = "Build or open a valid model in the builder first.";
  if (why) {
    gtk_label_set_text(self->status_label, why);
    return FALSE;
  }
  run_job *j = g_new0(run_job, 1);
  j->spec_json = g_strdup(spec);
  const char *ds = em_app_state_get_dataset_name(self->state);
  if (ds && (!strcmp(ds, "fashion-mnist") || !strcmp(ds, "cifar10") || !strcmp(ds, "synthetic"))) {
    j->dataset = g_strdup(ds);
    const char *dir = em_app_state_get_dataset_dir(self->state);
    j->data_dir = dir ? g_strdup(dir) : NULL;
  }
  static int serial;
  j->trace = g_strdup_printf("%s/ember-profile-%d-%d.json", g_get_tmp_dir(), (int)getpid(), ++serial);
  j->o = (em_profile_run_options){.spec_json = j->spec_json, .dataset = j->dataset,
                                  .data_dir = j->data_dir, .steps = steps, .warmup = 2,
                                  .trace_path = j->trace, .cancel = &self->stop};
  atomic_store(&self->stop, 0);
  self->busy = TRUE;
  gtk_widget_action_set_enabled(GTK_WIDGET(self), "profiler.run", FALSE);
  char *m = g_strdup_printf("Profiling %d steps…", steps);
  gtk_label_set_text(self->status_label, m);
  g_free(m);
  g_clear_object(&self->cancel);
  self->cancel = g_cancellable_new();
  GTask *task = g_task_new(self, self->cancel, on_run_done, NULL);
  g_task_set_task_data(task, j, (GDestroyNotify)run_job_free);
  g_task_run_in_thread(task, run_thread);
  g_object_unref(task);
  return TRUE;
}

static void act_run(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  EmProfilerPage *self = EM_PROFILER_PAGE(w);
  em_profiler_page_profile_now(self, gtk_spin_button_get_value_as_int(self->steps_spin));
}

gboolean em_profiler_page_is_busy(EmProfilerPage *self) { return self->busy || self->preparing; }

guint em_profiler_page_get_n_rows(EmProfilerPage *self) {
  return g_list_model_get_n_items(G_LIST_MODEL(self->selection));
}

guint em_profiler_page_get_selected_row(EmProfilerPage *self) {
  return gtk_single_selection_get_selected(self->selection);
}

const char *em_profiler_page_get_row_name(EmProfilerPage *self, guint i) {
  EmOpItem *it = g_list_model_get_item(G_LIST_MODEL(self->selection), i);
  if (!it) return NULL;
  const char *name = it->row.name; /* the store keeps the item */
  g_object_unref(it);
  return name;
}

void em_profiler_page_select_row(EmProfilerPage *self, guint i) {
  gtk_selection_model_select_item(GTK_SELECTION_MODEL(self->selection), i, TRUE);
}

void em_profiler_page_set_by_layer(EmProfilerPage *self, gboolean by_layer) {
  gtk_drop_down_set_selected(self->group_dropdown, by_layer ? 1 : 0);
}

int em_profiler_page_get_n_spans(EmProfilerPage *self) {
  return em_timeline_get_n_spans(self->timeline);
}

/* The builder selected a node: select its row (by layer: the forward row). */
static void on_layer_selected(EmAppState *state, const char *layer, EmProfilerPage *self) {
  (void)state;
  if (!layer || self->selecting) return;
  EmOpItem *cur = gtk_single_selection_get_selected_item(self->selection);
  if (cur && !g_strcmp0(cur->layer, layer)) return;
  guint n = g_list_model_get_n_items(G_LIST_MODEL(self->selection));
  for (guint i = 0; i < n; i++) {
    EmOpItem *it = g_list_model_get_item(G_LIST_MODEL(self->selection), i);
    gboolean hit = !g_strcmp0(it->layer, layer);
    g_object_unref(it);
    if (hit) {
      self->selecting = TRUE;
      gtk_selection_model_select_item(GTK_SELECTION_MODEL(self->selection), i, TRUE);
      self->selecting = FALSE;
      return;
    }
  }
}

static void on_training(EmAppState *state, gint64 run_id, EmProfilerPage *self) {
  (void)state;
  (void)run_id;
  gtk_widget_action_set_enabled(GTK_WIDGET(self), "profiler.run", FALSE);
}

static void on_training_done(EmAppState *state, gint64 run_id, int status, const char *msg,
                             EmProfilerPage *self) {
  (void)state;
  (void)run_id;
  (void)status;
  (void)msg;
  gtk_widget_action_set_enabled(GTK_WIDGET(self), "profiler.run", !self->busy);
}

static void em_profiler_page_dispose(GObject *obj) {
  EmProfilerPage *self = EM_PROFILER_PAGE(obj);
  atomic_store(&self->stop, 1); /* the worker stops at its next step */
  if (self->cancel) g_cancellable_cancel(self->cancel);
  g_clear_object(&self->cancel);
  if (self->ready_cancel) g_cancellable_cancel(self->ready_cancel);
  g_clear_object(&self->ready_cancel);
  g_clear_object(&self->state);
  gtk_widget_dispose_template(GTK_WIDGET(obj), EM_TYPE_PROFILER_PAGE);
  g_clear_object(&self->selection);
  g_clear_object(&self->store);
  G_OBJECT_CLASS(em_profiler_page_parent_class)->dispose(obj);
}

static void em_profiler_page_finalize(GObject *obj) {
  EmProfilerPage *self = EM_PROFILER_PAGE(obj);
  for (int k = 0; k < 2; k++) em_op_table_free(&self->tables[k]);
  g_free(self->trace_path);
  G_OBJECT_CLASS(em_profiler_page_parent_class)->finalize(obj);
}

static void em_profiler_page_class_init(EmProfilerPageClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  oc->dispose = em_profiler_page_dispose;
  oc->finalize = em_profiler_page_finalize;
  g_type_ensure(EM_TYPE_TIMELINE);
  gtk_widget_class_set_template_from_resource(wc, "/org/ember/Workbench/profile/em-profiler-page.ui");
  gtk_widget_class_bind_template_child(wc, EmProfilerPage, column_view);
  gtk_widget_class_bind_template_child(wc, EmProfilerPage, group_dropdown);
  gtk_widget_class_bind_template_child(wc, EmProfilerPage, steps_spin);
  gtk_widget_class_bind_template_child(wc, EmProfilerPage, status_label);
  gtk_widget_class_bind_template_child(wc, EmProfilerPage, timeline);
  gtk_widget_class_install_action(wc, "profiler.run", NULL, act_run);
}

static void em_profiler_page_init(EmProfilerPage *self) {
  gtk_widget_init_template(GTK_WIDGET(self));
  em_wheel_guard_all(GTK_WIDGET(self)); /* the wheel scrolls the page */
  self->store = g_list_store_new(EM_TYPE_OP_ITEM);
  build_columns(self);
  g_signal_connect_object(self->selection, "selection-changed", G_CALLBACK(on_selection), self, 0);
  g_signal_connect_object(self->group_dropdown, "notify::selected", G_CALLBACK(on_group_changed),
                          self, 0);
  gtk_label_set_text(self->status_label,
                     "No profile yet: press \"Profile now\" to profile a few training steps.");
}

GtkWidget *em_profiler_page_new(EmAppState *state) {
  EmProfilerPage *self = g_object_new(EM_TYPE_PROFILER_PAGE, NULL);
  self->state = state ? g_object_ref(state) : NULL;
  if (state) {
    g_signal_connect_object(state, "profile-ready", G_CALLBACK(on_profile_ready), self, 0);
    g_signal_connect_object(state, "run-started", G_CALLBACK(on_training), self, 0);
    g_signal_connect_object(state, "layer-selected", G_CALLBACK(on_layer_selected), self, 0);
    g_signal_connect_object(state, "run-finished", G_CALLBACK(on_training_done), self, 0);
  }
  return GTK_WIDGET(self);
}
