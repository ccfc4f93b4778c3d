/* em-runs-page.c: see the header. The table: GListStore of EmRunRow ->
 * GtkFilterListModel (text, status, model) -> GtkSortListModel (the column
 * view's sorter) -> GtkMultiSelection. Its reads and their merge are
 * em-runs-read.c, the added columns em-runs-columns.c. */
#include "em-runs-page-private.h"
#include "em-run-view.h"

#include <math.h>
#include <string.h>

#include "em-run-row.h"
#include "em-store.h"

G_DEFINE_FINAL_TYPE(EmRunsPage, em_runs_page, GTK_TYPE_BOX)

static const struct {
  const char *key, *title;
  gboolean numeric, expand;
} columns[] = {
  {"id", "ID", TRUE, FALSE},          {"name", "Name", FALSE, TRUE},
  {"model", "Model", FALSE, FALSE},   {"status", "Status", FALSE, FALSE},
  {"started", "Started", TRUE, FALSE}, {"duration", "Duration", TRUE, FALSE},
  {"steps", "Steps", TRUE, FALSE},    {"accuracy", "Test accuracy", TRUE, FALSE},
  {"loss", "Test loss", TRUE, FALSE}, {"tags", "Tags", FALSE, TRUE},
};

void em_runs_page_set_message_(EmRunsPage *self, const char *msg) {
  g_free(self->message);
  self->message = g_strdup(msg ? msg : "");
  gtk_label_set_text(self->message_label, self->message);
  gtk_widget_set_visible(GTK_WIDGET(self->message_label), *self->message != 0);
}

/* ---- columns ------------------------------------------------------------ */

void em_runs_page_cell_setup_(GtkSignalListItemFactory *f, GtkListItem *item, gpointer key) {
  (void)f;
  GtkWidget *label = gtk_label_new(NULL);
  gboolean right = strcmp(key, "id") == 0 || strcmp(key, "steps") == 0 ||
                   strcmp(key, "accuracy") == 0 || strcmp(key, "loss") == 0 ||
                   g_str_has_prefix(key, "metrics.");
  gtk_label_set_xalign(GTK_LABEL(label), right ? 1.0f : 0.0f);
  gtk_label_set_ellipsize(GTK_LABEL(label), PANGO_ELLIPSIZE_END);
  gtk_list_item_set_child(item, label);
}

void em_runs_page_cell_bind_(GtkSignalListItemFactory *f, GtkListItem *item, gpointer key) {
  (void)f;
  char buf[256];
  EmRunRow *row = gtk_list_item_get_item(item);
  GtkWidget *label = gtk_list_item_get_child(item);
  em_run_row_format(row, key, buf, sizeof buf);
  gtk_label_set_text(GTK_LABEL(label), buf);
  /* why a run failed (or what a stopped one said): on its status */
  const char *msg = em_run_row_get(row)->message;
  if (strcmp(key, "status") == 0)
    gtk_widget_set_tooltip_text(label, msg && *msg ? msg : NULL);
}

static double numeric_of(const em_run *r, const char *key) {
  if (strcmp(key, "id") == 0) return (double)r->id;
  if (strcmp(key, "started") == 0) return r->started;
  if (strcmp(key, "duration") == 0)
    return (r->ended > 0 ? r->ended : (double)g_get_real_time() / 1e6) - r->started;
  if (strcmp(key, "steps") == 0) return (double)r->steps;
  if (strcmp(key, "accuracy") == 0) return r->final_test_accuracy;
  if (strcmp(key, "loss") == 0) return r->final_test_loss;
  return 0;
}

int em_runs_page_compare_rows_(gconstpointer a, gconstpointer b, gpointer data) {
  const column_sort *cs = data;
  const char *key = cs->key;
  EmRunRow *ra = (EmRunRow *)a, *rb = (EmRunRow *)b;
  const em_run *x = em_run_row_get(ra), *y = em_run_row_get(rb);
  for (guint i = 0; i < G_N_ELEMENTS(columns); i++) {
    if (strcmp(columns[i].key, key) != 0) continue;
    if (columns[i].numeric) {
      double u = numeric_of(x, key), v = numeric_of(y, key);
      if (isnan(u) || isnan(v)) {
        /* absent last in both directions: the column view inverts what
         * this returns when it sorts descending, so invert it first */
        if (isnan(u) && isnan(v)) return GTK_ORDERING_EQUAL;
        int last = isnan(u) ? GTK_ORDERING_LARGER : GTK_ORDERING_SMALLER;
        return cs->self->descending ? -last : last;
      }
      return u < v ? GTK_ORDERING_SMALLER : u > v ? GTK_ORDERING_LARGER : GTK_ORDERING_EQUAL;
    }
    char s[256], t[256];
    em_run_row_format(ra, key, s, sizeof s);
    em_run_row_format(rb, key, t, sizeof t);
    int c = g_utf8_collate(s, t);
    return c < 0 ? GTK_ORDERING_SMALLER : c > 0 ? GTK_ORDERING_LARGER : GTK_ORDERING_EQUAL;
  }
  /* an added column: by number when both are numbers (a run without one
   * last, either way), else by text */
  double u, v;
  const char *s = em_run_row_get_extra(ra, key, &u), *t = em_run_row_get_extra(rb, key, &v);
  if (!isnan(u) && !isnan(v)) return u < v ? GTK_ORDERING_SMALLER : u > v ? GTK_ORDERING_LARGER : GTK_ORDERING_EQUAL;
  if (!*s || !*t) {
    if (!*s && !*t) return GTK_ORDERING_EQUAL;
    int last = !*s ? GTK_ORDERING_LARGER : GTK_ORDERING_SMALLER;
    return cs->self->descending ? -last : last;
  }
  int c = g_utf8_collate(s, t);
  return c < 0 ? GTK_ORDERING_SMALLER : c > 0 ? GTK_ORDERING_LARGER : GTK_ORDERING_EQUAL;
}

static void add_columns(EmRunsPage *self) {
  GtkColumnViewColumn *id_col = NULL;
  for (guint i = 0; i < G_N_ELEMENTS(columns); i++) {
    GtkListItemFactory *f = gtk_signal_list_item_factory_new();
    g_signal_connect(f, "setup", G_CALLBACK(em_runs_page_cell_setup_), (gpointer)columns[i].key);
    g_signal_connect(f, "bind", G_CALLBACK(em_runs_page_cell_bind_), (gpointer)columns[i].key);
    GtkColumnViewColumn *col = gtk_column_view_column_new(columns[i].title, f);
    column_sort *cs = g_new(column_sort, 1);
    *cs = (column_sort){self, columns[i].key};
    GtkCustomSorter *sorter = gtk_custom_sorter_new(em_runs_page_compare_rows_, cs, g_free);
    gtk_column_view_column_set_sorter(col, GTK_SORTER(sorter));
    g_object_unref(sorter);
    gtk_column_view_column_set_resizable(col, TRUE);
    gtk_column_view_column_set_expand(col, columns[i].expand);
    gtk_column_view_append_column(self->column_view, col);
    if (i == 0) id_col = col;
    g_object_unref(col);
  }
  /* newest first */
  gtk_column_view_sort_by_column(self->column_view, id_col, GTK_SORT_DESCENDING);
}

/* GTK 4.8 does not say which way a column view sorts: its sorter is
 * asked to order two rows that every column orders alike, low first. */
static void on_view_sorter_changed(GtkSorter *sorter, GtkSorterChange change, gpointer data) {
  (void)change;
  EmRunsPage *self = data;
  if (!self->probe_lo) return; /* disposed: its columns are going */
  self->descending =
      gtk_sorter_compare(sorter, self->probe_lo, self->probe_hi) == GTK_ORDERING_LARGER;
}

static EmRunRow *probe_row(int k) {
  em_run r = {.id = k, .name = k ? "b" : "a", .model = k ? "b" : "a",
              .status = k ? EM_RUN_FAILED : EM_RUN_COMPLETED, .started = 1 + k,
              .ended = 2 + 9 * k, .steps = k, .final_test_accuracy = 0.1 + k,
              .final_test_loss = 0.1 + k};
  EmRunRow *row = em_run_row_new(&r);
  em_run_row_set_tags(row, k ? "b" : "a");
  return row;
}

/* ---- filter ------------------------------------------------------------- */

static gboolean filter_row(gpointer item, gpointer data) {
  EmRunsPage *self = data;
  const em_run *r = em_run_row_get(item);
  guint st = gtk_drop_down_get_selected(self->status_dropdown);
  if (st != GTK_INVALID_LIST_POSITION && st > 0 && (guint)r->status != st - 1) return FALSE;
  guint m = gtk_drop_down_get_selected(self->model_dropdown);
  if (m != GTK_INVALID_LIST_POSITION && m > 0 &&
      g_strcmp0(gtk_string_list_get_string(self->models, m), r->model) != 0)
    return FALSE;
  const char *text = gtk_editable_get_text(GTK_EDITABLE(self->filter_entry));
  if (!text || !*text) return TRUE;
  char id[32];
  g_snprintf(id, sizeof id, "%" G_GINT64_FORMAT, (gint64)r->id);
  char *needle = g_utf8_casefold(text, -1);
  char *joined = g_strjoin(" ", id, r->name, r->model, em_run_row_get_tags(item), NULL);
  char *hay = g_utf8_casefold(joined, -1);
  g_free(joined);
  gboolean hit = strstr(hay, needle) != NULL;
  g_free(needle);
  g_free(hay);
  return hit;
}

static void refilter(EmRunsPage *self) {
  gtk_filter_changed(GTK_FILTER(self->filter), GTK_FILTER_CHANGE_DIFFERENT);
}

void em_runs_page_update_counts_(EmRunsPage *self) {
  guint shown = g_list_model_get_n_items(G_LIST_MODEL(self->filtered));
  guint all = g_list_model_get_n_items(G_LIST_MODEL(self->rows));
  GtkBitset *sel = gtk_selection_model_get_selection(GTK_SELECTION_MODEL(self->selection));
  guint64 nsel = gtk_bitset_get_size(sel);
  gtk_bitset_unref(sel);
  char buf[128];
  g_snprintf(buf, sizeof buf, "%u of %u runs shown, %u selected", shown, all, (guint)nsel);
  gtk_label_set_text(self->count_label, buf);
  gtk_widget_action_set_enabled(GTK_WIDGET(self), "runs.compare", nsel >= 2);
  gtk_widget_action_set_enabled(GTK_WIDGET(self), "runs.delete", nsel >= 1);
  gtk_widget_action_set_enabled(GTK_WIDGET(self), "runs.tag", nsel >= 1);
}

/* ---- loading ------------------------------------------------------------ */

gint64 *em_runs_page_get_selected_ids(EmRunsPage *self, int *n) {
  GtkBitset *sel = gtk_selection_model_get_selection(GTK_SELECTION_MODEL(self->selection));
  guint64 k = gtk_bitset_get_size(sel);
  gint64 *ids = g_new0(gint64, k + 1);
  int m = 0;
  GtkBitsetIter it;
  guint pos;
  for (gboolean ok = gtk_bitset_iter_init_first(&it, sel, &pos); ok;
       ok = gtk_bitset_iter_next(&it, &pos)) {
    EmRunRow *row = g_list_model_get_item(G_LIST_MODEL(self->selection), pos);
    if (row) ids[m++] = em_run_row_get(row)->id;
    g_clear_object(&row);
  }
  gtk_bitset_unref(sel);
  *n = m;
  return ids;
}

void em_runs_page_select_ids(EmRunsPage *self, const gint64 *ids, int n) {
  g_return_if_fail(EM_IS_RUNS_PAGE(self));
  GListModel *m = G_LIST_MODEL(self->selection);
  guint len = g_list_model_get_n_items(m);
  GtkBitset *want = gtk_bitset_new_empty();
  for (guint i = 0; i < len; i++) {
    EmRunRow *row = g_list_model_get_item(m, i);
    for (int k = 0; k < n; k++)
      if (em_run_row_get(row)->id == ids[k]) gtk_bitset_add(want, i);
    g_object_unref(row);
  }
  GtkBitset *mask = gtk_bitset_new_range(0, len);
  gtk_selection_model_set_selection(GTK_SELECTION_MODEL(self->selection), want, mask);
  gtk_bitset_unref(want);
  gtk_bitset_unref(mask);
  em_runs_page_update_counts_(self);
}

/* ---- actions ------------------------------------------------------------ */

static void action_reload(GtkWidget *w, const char *name, GVariant *p) {
  (void)name;
  (void)p;
  EmRunsPage *self = EM_RUNS_PAGE(w);
  em_runs_page_set_message_(self, "");
  em_runs_page_reload_async_(self);
}

static EmComparePage *find_in(GtkWidget *w) {
  if (EM_IS_COMPARE_PAGE(w)) return g_object_ref(EM_COMPARE_PAGE(w));
  for (GtkWidget *c = gtk_widget_get_first_child(w); c; c = gtk_widget_get_next_sibling(c)) {
    EmComparePage *hit = find_in(c);
    if (hit) return hit;
  }
  return NULL;
}

/* No page was wired: the "compare" child of the stack this page is in. */
static EmComparePage *find_compare_page(GtkWidget *w) {
  GtkWidget *stack = gtk_widget_get_ancestor(w, GTK_TYPE_STACK);
  GtkWidget *page = stack ? gtk_stack_get_child_by_name(GTK_STACK(stack), "compare") : NULL;
  return page ? find_in(page) : NULL;
}

static void action_compare(GtkWidget *w, const char *name, GVariant *p) {
  (void)name;
  (void)p;
  EmRunsPage *self = EM_RUNS_PAGE(w);
  int n = 0;
  gint64 *ids = em_runs_page_get_selected_ids(self, &n);
  if (n >= 2) {
    EmComparePage *compare = g_weak_ref_get(&self->compare);
    if (!compare) compare = find_compare_page(w);
    if (compare) {
      em_compare_page_set_runs(compare, ids, n);
      g_object_unref(compare);
    }
    gtk_widget_activate_action(w, "win.page", "s", "compare");
  }
  g_free(ids);
}

static em_store *open_for_writing(EmRunsPage *self) {
  em_error err = {0};
  em_store *s = em_store_open(em_app_state_get_registry_dir(self->state), false, &err);
  if (!s) em_runs_page_set_message_(self, err.msg);
  return s;
}

static void action_tag(GtkWidget *w, const char *name, GVariant *p) {
  (void)name;
  (void)p;
  EmRunsPage *self = EM_RUNS_PAGE(w);
  const char *text = gtk_editable_get_text(GTK_EDITABLE(self->tag_entry));
  const char *eq = strchr(text, '=');
  if (!eq || eq == text) {
    em_runs_page_set_message_(self, "A tag is key=value (for example: dataset=small): type one in the tag box.");
    return;
  }
  char *key = g_strndup(text, eq - text);
  g_strstrip(key);
  int n = 0;
  gint64 *ids = em_runs_page_get_selected_ids(self, &n);
  em_store *s = n ? open_for_writing(self) : NULL;
  gboolean ok = s != NULL;
  for (int i = 0; s && i < n && ok; i++) {
    em_error err = {0};
    if (em_store_run_tag(s, ids[i], key, eq + 1, &err) != EM_OK) {
      em_runs_page_set_message_(self, err.msg);
      ok = FALSE;
    }
  }
  em_store_close(s);
  if (ok) {
    em_runs_page_set_message_(self, "");
    gtk_editable_set_text(GTK_EDITABLE(self->tag_entry), "");
  }
  g_free(key);
  g_free(ids);
  em_app_state_registry_changed(self->state);
}

static void delete_response(GtkDialog *dialog, int response, gpointer data) {
  EmRunsPage *self = data;
  gint64 *ids = g_object_get_data(G_OBJECT(dialog), "ids");
  int n = GPOINTER_TO_INT(g_object_get_data(G_OBJECT(dialog), "n"));
  if (response == GTK_RESPONSE_ACCEPT) {
    em_store *s = open_for_writing(self);
    GString *errors = g_string_new(NULL);
    for (int i = 0; s && i < n; i++) {
      em_error err = {0};
      if (em_store_run_delete(s, ids[i], &err) != EM_OK)
        g_string_append_printf(errors, "%sRun %" G_GINT64_FORMAT " was not deleted: %s",
                               errors->len ? "\n" : "", ids[i], err.msg);
    }
    em_store_close(s);
    if (s) em_runs_page_set_message_(self, errors->str);
    g_string_free(errors, TRUE);
    em_app_state_registry_changed(self->state);
  }
  gtk_window_destroy(GTK_WINDOW(dialog));
}

static void action_delete(GtkWidget *w, const char *name, GVariant *p) {
  (void)name;
  (void)p;
  EmRunsPage *self = EM_RUNS_PAGE(w);
  int n = 0;
  gint64 *ids = em_runs_page_get_selected_ids(self, &n);
  if (n == 0) {
    g_free(ids);
    return;
  }
  GString *list = g_string_new(NULL);
  for (int i = 0; i < n && i < 12; i++)
    g_string_append_printf(list, "%s%" G_GINT64_FORMAT, i ? ", " : "", ids[i]);
  if (n > 12) g_string_append(list, ", …");
  GtkRoot *root = gtk_widget_get_root(w);
  char *title = n == 1 ? g_strdup_printf("Delete run %s?", list->str)
                       : g_strdup_printf("Delete %d runs?", n);
  GtkWidget *dialog = gtk_message_dialog_new(
      GTK_IS_WINDOW(root) ? GTK_WINDOW(root) : NULL, GTK_DIALOG_MODAL | GTK_DIALOG_DESTROY_WITH_PARENT,
      GTK_MESSAGE_WARNING, GTK_BUTTONS_NONE, "%s", title);
  g_free(title);
  gtk_message_dialog_format_secondary_text(
      GTK_MESSAGE_DIALOG(dialog),
      "Runs %s will be removed with their metrics, checkpoints and tags. This cannot be undone.",
      list->str);
  gtk_dialog_add_button(GTK_DIALOG(dialog), "Cancel", GTK_RESPONSE_CANCEL);
  GtkWidget *del = gtk_dialog_add_button(GTK_DIALOG(dialog), "Delete", GTK_RESPONSE_ACCEPT);
  gtk_widget_add_css_class(del, "destructive-action");
  gtk_dialog_set_default_response(GTK_DIALOG(dialog), GTK_RESPONSE_CANCEL);
  g_object_set_data_full(G_OBJECT(dialog), "ids", ids, g_free);
  g_object_set_data(G_OBJECT(dialog), "n", GINT_TO_POINTER(n));
  g_object_set_data(G_OBJECT(dialog), "em-runs-delete", GINT_TO_POINTER(1));
  g_signal_connect_object(dialog, "response", G_CALLBACK(delete_response), self, 0);
  g_string_free(list, TRUE);
  gtk_window_present(GTK_WINDOW(dialog));
}

/* ---- signals ------------------------------------------------------------ */

/* Reads the registry now when the page is on screen; otherwise when it
 * is next shown (map): with thousands of runs a reload costs the main
 * thread a visible pause, not worth paying for a page nobody sees. */
static void reload_when_shown(EmRunsPage *self) {
  if (gtk_widget_get_mapped(GTK_WIDGET(self))) em_runs_page_reload_async_(self);
  else self->stale = TRUE;
}

static gboolean on_refresh(gpointer data) {
  reload_when_shown(data);
  return G_SOURCE_CONTINUE;
}

static void on_run_started(EmAppState *st, gint64 run, gpointer data) {
  (void)st;
  (void)run;
  EmRunsPage *self = data;
  reload_when_shown(self);
  if (!self->refresh_id) self->refresh_id = g_timeout_add(2000, on_refresh, self);
}

static void on_run_finished(EmAppState *st, gint64 run, int status, const char *msg, gpointer data) {
  (void)st;
  (void)run;
  (void)status;
  (void)msg;
  EmRunsPage *self = data;
  /* the state announces "registry-changed" next, which reloads */
  g_clear_handle_id(&self->refresh_id, g_source_remove);
}

static void on_registry_changed(EmAppState *st, gpointer data) {
  (void)st;
  reload_when_shown(data);
}

static void em_runs_page_map(GtkWidget *w) {
  GTK_WIDGET_CLASS(em_runs_page_parent_class)->map(w);
  EmRunsPage *self = EM_RUNS_PAGE(w);
  if (self->stale) em_runs_page_reload_async_(self);
}

static void on_filter_changed(gpointer data) {
  refilter(data);
  em_runs_page_update_counts_(data);
}

static void on_selection_changed(GtkSelectionModel *m, guint pos, guint n, gpointer data) {
  (void)m;
  (void)pos;
  (void)n;
  em_runs_page_update_counts_(data);
}

static void on_tag_activate(EmRunsPage *self) {
  gtk_widget_activate_action(GTK_WIDGET(self), "runs.tag", NULL);
}

/* ---- GObject ------------------------------------------------------------ */

static void em_runs_page_dispose(GObject *object) {
  EmRunsPage *self = EM_RUNS_PAGE(object);
  self->disposed = TRUE;
  g_clear_handle_id(&self->refresh_id, g_source_remove);
  gtk_widget_dispose_template(GTK_WIDGET(self), EM_TYPE_RUNS_PAGE);
  g_clear_object(&self->selection);
  g_clear_object(&self->rows);
  g_clear_object(&self->models);
  g_clear_object(&self->state);
  g_clear_object(&self->probe_lo);
  g_clear_object(&self->probe_hi);
  G_OBJECT_CLASS(em_runs_page_parent_class)->dispose(object);
}

static void em_runs_page_finalize(GObject *object) {
  EmRunsPage *self = EM_RUNS_PAGE(object);
  g_weak_ref_clear(&self->compare);
  g_free(self->message);
  g_ptr_array_unref(self->extra_keys);
  g_ptr_array_unref(self->retired_keys);
  g_strfreev(self->column_keys);
  G_OBJECT_CLASS(em_runs_page_parent_class)->finalize(object);
}

static void em_runs_page_class_init(EmRunsPageClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  oc->dispose = em_runs_page_dispose;
  oc->finalize = em_runs_page_finalize;
  wc->map = em_runs_page_map;
  gtk_widget_class_set_template_from_resource(wc, "/org/ember/Workbench/registry/em-runs-page.ui");
  gtk_widget_class_bind_template_child(wc, EmRunsPage, filter_entry);
  gtk_widget_class_bind_template_child(wc, EmRunsPage, status_dropdown);
  gtk_widget_class_bind_template_child(wc, EmRunsPage, model_dropdown);
  gtk_widget_class_bind_template_child(wc, EmRunsPage, message_label);
  gtk_widget_class_bind_template_child(wc, EmRunsPage, count_label);
  gtk_widget_class_bind_template_child(wc, EmRunsPage, column_view);
  gtk_widget_class_bind_template_child(wc, EmRunsPage, tag_entry);
  gtk_widget_class_install_action(wc, "runs.reload", NULL, action_reload);
  gtk_widget_class_install_action(wc, "runs.compare", NULL, action_compare);
  gtk_widget_class_install_action(wc, "runs.tag", NULL, action_tag);
  gtk_widget_class_install_action(wc, "runs.delete", NULL, action_delete);
  gtk_widget_class_add_binding_action(wc, GDK_KEY_Delete, 0, "runs.delete", NULL);
  gtk_widget_class_add_binding_action(wc, GDK_KEY_F5, 0, "runs.reload", NULL);
}

/* ---- one run on its own ------------------------------------------------- */

GtkWindow *em_runs_page_open_run(EmRunsPage *self, gint64 id) {
  g_return_val_if_fail(EM_IS_RUNS_PAGE(self), NULL);
  GtkRoot *root = gtk_widget_get_root(GTK_WIDGET(self));
  return em_run_view_present(GTK_IS_WINDOW(root) ? GTK_WINDOW(root) : NULL, self->state, id);
}

/* Double-click (or Enter) on a row. */
static void on_row_activate(GtkColumnView *view, guint pos, EmRunsPage *self) {
  (void)view;
  EmRunRow *row = g_list_model_get_item(G_LIST_MODEL(self->selection), pos);
  if (row) em_runs_page_open_run(self, em_run_row_get(row)->id);
  g_clear_object(&row);
}

static void em_runs_page_init(EmRunsPage *self) {
  gtk_widget_init_template(GTK_WIDGET(self));
  self->message = g_strdup("");
  self->extra_keys = g_ptr_array_new_with_free_func(g_free);
  self->retired_keys = g_ptr_array_new_with_free_func(g_free);
  g_weak_ref_init(&self->compare, NULL);
  self->rows = g_list_store_new(EM_TYPE_RUN_ROW);
  self->filter = gtk_custom_filter_new(filter_row, self, NULL);
  self->filtered = gtk_filter_list_model_new(G_LIST_MODEL(g_object_ref(self->rows)), GTK_FILTER(self->filter));
  GtkSorter *sorter = gtk_column_view_get_sorter(self->column_view);
  self->probe_lo = probe_row(0);
  self->probe_hi = probe_row(1);
  /* before the sort model's own handler: the direction is known when it sorts */
  g_signal_connect(sorter, "changed", G_CALLBACK(on_view_sorter_changed), self);
  self->sorted = gtk_sort_list_model_new(G_LIST_MODEL(self->filtered), g_object_ref(sorter));
  self->selection = gtk_multi_selection_new(G_LIST_MODEL(self->sorted));
  gtk_column_view_set_model(self->column_view, GTK_SELECTION_MODEL(self->selection));
  add_columns(self);
  em_runs_page_build_column_menu_(self);
  const char *any[] = {"Any model", NULL};
  self->models = gtk_string_list_new(any);
  gtk_drop_down_set_model(self->model_dropdown, G_LIST_MODEL(self->models));
  g_signal_connect_swapped(self->filter_entry, "search-changed", G_CALLBACK(on_filter_changed), self);
  g_signal_connect_swapped(self->status_dropdown, "notify::selected", G_CALLBACK(on_filter_changed), self);
  g_signal_connect_swapped(self->model_dropdown, "notify::selected", G_CALLBACK(on_filter_changed), self);
  g_signal_connect(self->selection, "selection-changed", G_CALLBACK(on_selection_changed), self);
  g_signal_connect_swapped(self->tag_entry, "activate", G_CALLBACK(on_tag_activate), self);
  g_signal_connect(self->column_view, "activate", G_CALLBACK(on_row_activate), self);
  em_runs_page_update_counts_(self);
}

static EmRunsPage *make_page(EmAppState *state) {
  EmRunsPage *self = g_object_new(EM_TYPE_RUNS_PAGE, NULL);
  self->state = g_object_ref(state);
  g_signal_connect_object(state, "registry-changed", G_CALLBACK(on_registry_changed), self, 0);
  g_signal_connect_object(state, "run-started", G_CALLBACK(on_run_started), self, 0);
  g_signal_connect_object(state, "run-finished", G_CALLBACK(on_run_finished), self, 0);
  if (em_app_state_is_training(state)) self->refresh_id = g_timeout_add(2000, on_refresh, self);
  return self;
}

GtkWidget *em_runs_page_new(EmAppState *state) {
  g_return_val_if_fail(EM_IS_APP_STATE(state), NULL);
  EmRunsPage *self = make_page(state);
  em_runs_page_reload(self);
  return GTK_WIDGET(self);
}

GtkWidget *em_runs_page_new_async(EmAppState *state) {
  g_return_val_if_fail(EM_IS_APP_STATE(state), NULL);
  EmRunsPage *self = make_page(state);
  em_runs_page_reload_async_(self);
  return GTK_WIDGET(self);
}

void em_runs_page_set_compare_page(EmRunsPage *self, EmComparePage *compare) {
  g_return_if_fail(EM_IS_RUNS_PAGE(self));
  g_weak_ref_set(&self->compare, compare);
}

guint em_runs_page_get_n_shown(EmRunsPage *self) {
  g_return_val_if_fail(EM_IS_RUNS_PAGE(self), 0);
  return g_list_model_get_n_items(G_LIST_MODEL(self->sorted));
}

gint64 em_runs_page_get_shown_id(EmRunsPage *self, guint i) {
  g_return_val_if_fail(EM_IS_RUNS_PAGE(self), 0);
  EmRunRow *row = g_list_model_get_item(G_LIST_MODEL(self->sorted), i);
  if (!row) return 0;
  gint64 id = em_run_row_get(row)->id;
  g_object_unref(row);
  return id;
}

const char *em_runs_page_get_message(EmRunsPage *self) {
  g_return_val_if_fail(EM_IS_RUNS_PAGE(self), "");
  return self->message;
}

guint em_runs_page_get_n_reloads(EmRunsPage *self) {
  g_return_val_if_fail(EM_IS_RUNS_PAGE(self), 0);
  return self->reloads;
}
