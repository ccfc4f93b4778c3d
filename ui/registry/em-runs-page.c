/* em-runs-page.c: see the header. The table: GListStore of EmRunRow ->
 * GtkFilterListModel (text, status, model) -> GtkSortListModel (the column
 * view's sorter) -> GtkMultiSelection. */
#include "em-runs-page.h"
#include "em-run-view.h"

#include <math.h>
#include <string.h>

#include "em-run-row.h"
#include "em-store.h"

struct _EmRunsPage {
  GtkBox parent_instance;
  GtkSearchEntry *filter_entry;
  GtkDropDown *status_dropdown, *model_dropdown;
  GtkLabel *message_label, *count_label;
  GtkColumnView *column_view;
  GtkEntry *tag_entry;

  EmAppState *state;
  gboolean reading, read_again, disposed; /* the worker's read (reload_async) */
  GPtrArray *extra_keys;      /* char *: the added columns ("config.optim.lr"), in order */
  char **column_keys;         /* what the Columns menu offers (from the last read) */
  GtkMenuButton *columns_button;
  GtkListBox *columns_list;
  GPtrArray *retired_keys;    /* removed columns' keys (their factories may still hold them) */
  gboolean syncing_checks;
  GListStore *rows;           /* EmRunRow */
  GtkCustomFilter *filter;
  GtkFilterListModel *filtered;
  GtkSortListModel *sorted;
  GtkMultiSelection *selection;
  GtkStringList *models;      /* "Any model", then the models */
  GWeakRef compare;           /* EmComparePage */
  guint refresh_id;
  gboolean stale; /* the registry changed while the page was not shown */
  gboolean descending; /* the column view sorts its primary column descending */
  EmRunRow *probe_lo, *probe_hi; /* two rows ordered alike in every column */
  guint reloads;  /* for the tests: how many times the table was read */
  char *message;
};

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

static void set_message(EmRunsPage *self, const char *msg) {
  g_free(self->message);
  self->message = g_strdup(msg ? msg : "");
  gtk_label_set_text(self->message_label, self->message);
  gtk_widget_set_visible(GTK_WIDGET(self->message_label), *self->message != 0);
}

/* ---- columns ------------------------------------------------------------ */

static void cell_setup(GtkSignalListItemFactory *f, GtkListItem *item, gpointer key) {
  (void)f;
  GtkWidget *label = gtk_label_new(NULL);
  gboolean right = strcmp(key, "id") == 0 || strcmp(key, "steps") == 0 ||
                   strcmp(key, "accuracy") == 0 || strcmp(key, "loss") == 0 ||
                   g_str_has_prefix(key, "metrics.");
  gtk_label_set_xalign(GTK_LABEL(label), right ? 1.0f : 0.0f);
  gtk_label_set_ellipsize(GTK_LABEL(label), PANGO_ELLIPSIZE_END);
  gtk_list_item_set_child(item, label);
}

static void cell_bind(GtkSignalListItemFactory *f, GtkListItem *item, gpointer key) {
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

typedef struct {
  EmRunsPage *self;
  const char *key;
} column_sort;

static int compare_rows(gconstpointer a, gconstpointer b, gpointer data) {
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
    g_signal_connect(f, "setup", G_CALLBACK(cell_setup), (gpointer)columns[i].key);
    g_signal_connect(f, "bind", G_CALLBACK(cell_bind), (gpointer)columns[i].key);
    GtkColumnViewColumn *col = gtk_column_view_column_new(columns[i].title, f);
    column_sort *cs = g_new(column_sort, 1);
    *cs = (column_sort){self, columns[i].key};
    GtkCustomSorter *sorter = gtk_custom_sorter_new(compare_rows, cs, g_free);
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

/* ---- added columns: any setting or metric ---------------------------------- */

/* "config.optim.lr" -> "optim.lr"; "metrics.loss" -> "loss (last)". */
static char *column_title(const char *key) {
  if (g_str_has_prefix(key, "config.")) return g_strdup(key + 7);
  if (g_str_has_prefix(key, "metrics.")) return g_strdup_printf("%s (last)", key + 8);
  return g_strdup(key);
}

static GtkColumnViewColumn *find_added(EmRunsPage *self, const char *key) {
  GListModel *cols = gtk_column_view_get_columns(self->column_view);
  for (guint i = 0; i < g_list_model_get_n_items(cols); i++) {
    GtkColumnViewColumn *c = g_list_model_get_item(cols, i);
    g_object_unref(c);
    if (!g_strcmp0(g_object_get_data(G_OBJECT(c), "em-key"), key)) return c;
  }
  return NULL;
}

static void sync_column_checks(EmRunsPage *self);

gboolean em_runs_page_add_column(EmRunsPage *self, const char *key) {
  g_return_val_if_fail(EM_IS_RUNS_PAGE(self), FALSE);
  if (!key || (!g_str_has_prefix(key, "config.") && !g_str_has_prefix(key, "metrics.")))
    return FALSE;
  if (find_added(self, key)) return TRUE;
  char *owned = g_strdup(key);
  g_ptr_array_add(self->extra_keys, owned);
  GtkListItemFactory *f = gtk_signal_list_item_factory_new();
  g_signal_connect(f, "setup", G_CALLBACK(cell_setup), owned);
  g_signal_connect(f, "bind", G_CALLBACK(cell_bind), owned);
  char *title = column_title(key);
  GtkColumnViewColumn *col = gtk_column_view_column_new(title, f);
  g_free(title);
  g_object_set_data_full(G_OBJECT(col), "em-key", g_strdup(key), g_free);
  column_sort *cs = g_new(column_sort, 1);
  *cs = (column_sort){self, owned};
  GtkCustomSorter *sorter = gtk_custom_sorter_new(compare_rows, cs, g_free);
  gtk_column_view_column_set_sorter(col, GTK_SORTER(sorter));
  g_object_unref(sorter);
  gtk_column_view_column_set_resizable(col, TRUE);
  /* before the tags, which expand */
  GListModel *cols = gtk_column_view_get_columns(self->column_view);
  gtk_column_view_insert_column(self->column_view, g_list_model_get_n_items(cols) - 1, col);
  g_object_unref(col);
  sync_column_checks(self);
  em_runs_page_reload(self); /* its values */
  return TRUE;
}

void em_runs_page_remove_column(EmRunsPage *self, const char *key) {
  g_return_if_fail(EM_IS_RUNS_PAGE(self));
  GtkColumnViewColumn *col = find_added(self, key);
  if (!col) return;
  gtk_column_view_remove_column(self->column_view, col);
  for (guint i = 0; i < self->extra_keys->len; i++)
    if (!strcmp(self->extra_keys->pdata[i], key)) {
      /* the factory and sorter may still hold the string: keep it alive
       * until the page goes (a few bytes) */
      g_ptr_array_add(self->retired_keys, g_ptr_array_steal_index(self->extra_keys, i));
      break;
    }
  sync_column_checks(self);
}

char *em_runs_page_get_cell(EmRunsPage *self, guint shown, const char *column) {
  g_return_val_if_fail(EM_IS_RUNS_PAGE(self), NULL);
  EmRunRow *row = g_list_model_get_item(G_LIST_MODEL(self->selection), shown);
  if (!row) return NULL;
  char buf[512];
  em_run_row_format(row, column, buf, sizeof buf);
  g_object_unref(row);
  return g_strdup(buf);
}

static void on_column_toggled(GtkCheckButton *b, GParamSpec *ps, EmRunsPage *self) {
  (void)ps;
  if (self->syncing_checks) return;
  const char *key = g_object_get_data(G_OBJECT(b), "em-key");
  if (gtk_check_button_get_active(b)) em_runs_page_add_column(self, key);
  else em_runs_page_remove_column(self, key);
}

/* The menu's check buttons: one per column there is to add, ticked when
 * shown. */
static void fill_column_menu(EmRunsPage *self) {
  GtkWidget *c;
  while ((c = gtk_widget_get_first_child(GTK_WIDGET(self->columns_list))))
    gtk_list_box_remove(self->columns_list, c);
  for (int i = 0; self->column_keys && self->column_keys[i]; i++) {
    const char *key = self->column_keys[i];
    GtkWidget *b = gtk_check_button_new_with_label(key);
    char *name = g_strdup_printf("column-%s", key);
    gtk_widget_set_name(b, name);
    g_free(name);
    g_object_set_data_full(G_OBJECT(b), "em-key", g_strdup(key), g_free);
    g_signal_connect_object(b, "notify::active", G_CALLBACK(on_column_toggled), self, 0);
    gtk_list_box_append(self->columns_list, b);
  }
  sync_column_checks(self);
}

static void sync_column_checks(EmRunsPage *self) {
  self->syncing_checks = TRUE;
  for (GtkWidget *row = gtk_widget_get_first_child(GTK_WIDGET(self->columns_list)); row;
       row = gtk_widget_get_next_sibling(row)) {
    GtkWidget *b = gtk_list_box_row_get_child(GTK_LIST_BOX_ROW(row));
    if (GTK_IS_CHECK_BUTTON(b))
      gtk_check_button_set_active(GTK_CHECK_BUTTON(b),
                                  find_added(self, g_object_get_data(G_OBJECT(b), "em-key")) != NULL);
  }
  self->syncing_checks = FALSE;
}

static void build_column_menu(EmRunsPage *self) {
  GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 6);
  GtkWidget *hint = gtk_label_new("Show a setting or a metric as a column");
  gtk_widget_add_css_class(hint, "dim-label");
  gtk_box_append(GTK_BOX(box), hint);
  self->columns_list = GTK_LIST_BOX(gtk_list_box_new());
  gtk_list_box_set_selection_mode(self->columns_list, GTK_SELECTION_NONE);
  GtkWidget *sw = gtk_scrolled_window_new();
  gtk_scrolled_window_set_policy(GTK_SCROLLED_WINDOW(sw), GTK_POLICY_NEVER, GTK_POLICY_AUTOMATIC);
  gtk_scrolled_window_set_max_content_height(GTK_SCROLLED_WINDOW(sw), 420);
  gtk_scrolled_window_set_propagate_natural_height(GTK_SCROLLED_WINDOW(sw), TRUE);
  gtk_scrolled_window_set_child(GTK_SCROLLED_WINDOW(sw), GTK_WIDGET(self->columns_list));
  gtk_box_append(GTK_BOX(box), sw);
  GtkWidget *pop = gtk_popover_new();
  gtk_popover_set_child(GTK_POPOVER(pop), box);
  self->columns_button = GTK_MENU_BUTTON(gtk_menu_button_new());
  gtk_menu_button_set_label(self->columns_button, "Columns");
  gtk_widget_set_tooltip_text(GTK_WIDGET(self->columns_button), "Add a setting or a metric as a column");
  gtk_widget_set_name(GTK_WIDGET(self->columns_button), "runs-columns");
  gtk_menu_button_set_popover(self->columns_button, pop);
  gtk_box_append(GTK_BOX(gtk_widget_get_parent(GTK_WIDGET(self->filter_entry))),
                 GTK_WIDGET(self->columns_button));
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

static void update_counts(EmRunsPage *self) {
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
  update_counts(self);
}

/* run id -> "key=value, ..." for every run with tags, from one query (a
 * query per run took 0.3 s on the main thread with 3000 runs). */
static GHashTable *tags_by_run(em_store *s) {
  GHashTable *by_run = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
  em_run_tag *t = NULL;
  int n = 0;
  em_error err = {0};
  if (em_store_run_tags_all(s, &t, &n, &err) != EM_OK) return by_run; /* tags stay blank */
  for (int i = 0; i < n;) {
    GString *out = g_string_new(NULL);
    int64_t run = t[i].run;
    for (; i < n && t[i].run == run; i++)
      g_string_append_printf(out, "%s%s=%s", out->len ? ", " : "", t[i].key, t[i].value);
    g_hash_table_insert(by_run, g_memdup2(&run, sizeof run), g_string_free(out, FALSE));
  }
  em_run_tags_free(t, n);
  return by_run;
}

/* What one read of the registry gives: made on a worker thread (its own
 * read-only connection), applied on the main thread. */
typedef struct {
  em_run *runs;       /* newest first */
  int n;
  GHashTable *tags;   /* run id -> "k=v, ..." */
  char **extra_keys;  /* the added columns asked for (NULL-terminated) */
  GPtrArray *extra;   /* per extra key: em_run_value *, n_extra[k] of them, newest first */
  int *n_extra;
  char **columns;     /* what there is to add */
  char *error;        /* NULL, or why there is nothing to show */
} runs_read;

static void runs_read_free(gpointer data) {
  runs_read *r = data;
  if (!r) return;
  em_runs_free(r->runs, r->n);
  if (r->tags) g_hash_table_unref(r->tags);
  for (guint k = 0; r->extra && k < r->extra->len; k++)
    em_run_values_free(r->extra->pdata[k], r->n_extra[k]);
  if (r->extra) g_ptr_array_unref(r->extra);
  g_free(r->n_extra);
  g_strfreev(r->extra_keys);
  g_strfreev(r->columns);
  g_free(r->error);
  g_free(r);
}

static runs_read *read_registry(const char *dir, char **extra_keys) {
  runs_read *r = g_new0(runs_read, 1);
  r->extra_keys = extra_keys; /* taken */
  em_error err = {0};
  em_store *s = em_store_open(dir, true, &err);
  em_run_filter f = {.any_status = true};
  if (!s) {
    r->error = g_strdup_printf("No runs to show: %s", err.msg);
  } else if (em_store_runs_list(s, &f, &r->runs, &r->n, &err) != EM_OK) {
    r->error = g_strdup(err.msg);
  } else {
    r->tags = tags_by_run(s);
    guint nk = r->extra_keys ? g_strv_length(r->extra_keys) : 0;
    r->extra = g_ptr_array_new();
    r->n_extra = g_new0(int, nk + 1);
    for (guint k = 0; k < nk; k++) {
      em_run_value *v = NULL;
      if (em_store_run_values(s, r->extra_keys[k], &v, &r->n_extra[k], &err) != EM_OK)
        r->n_extra[k] = 0; /* a column that reads nothing stays blank */
      g_ptr_array_add(r->extra, v);
    }
    int nc = 0;
    if (em_store_run_columns(s, &r->columns, &nc, &err) != EM_OK) r->columns = NULL;
  }
  em_store_close(s);
  return r;
}

static int cmp_strp(gconstpointer a, gconstpointer b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void update_models(EmRunsPage *self, em_run *runs, int n) {
  GPtrArray *names = g_ptr_array_new();
  for (int i = 0; i < n; i++) {
    gboolean seen = FALSE;
    for (guint k = 0; k < names->len && !seen; k++) seen = strcmp(names->pdata[k], runs[i].model) == 0;
    if (!seen && runs[i].model && *runs[i].model) g_ptr_array_add(names, runs[i].model);
  }
  g_ptr_array_sort(names, cmp_strp);
  /* unchanged list: keep the dropdown as it is */
  guint have = g_list_model_get_n_items(G_LIST_MODEL(self->models));
  gboolean same = have == names->len + 1;
  for (guint k = 0; same && k < names->len; k++)
    same = strcmp(gtk_string_list_get_string(self->models, k + 1), names->pdata[k]) == 0;
  if (!same) {
    guint sel = gtk_drop_down_get_selected(self->model_dropdown);
    char *chosen = sel > 0 && sel != GTK_INVALID_LIST_POSITION
                       ? g_strdup(gtk_string_list_get_string(self->models, sel)) : NULL;
    g_ptr_array_add(names, NULL);
    gtk_string_list_splice(self->models, 1, have - 1, (const char *const *)names->pdata);
    guint pick = 0;
    for (guint k = 0; chosen && k + 1 < names->len; k++)
      if (strcmp(names->pdata[k], chosen) == 0) pick = k + 1;
    gtk_drop_down_set_selected(self->model_dropdown, pick);
    g_free(chosen);
  }
  g_ptr_array_free(names, TRUE);
}

/* The rows follow the read: a row whose run did not change is kept (so a
 * reload while one run trains replaces one row, not ten thousand, and
 * the selection, sort and scroll stay), new runs are inserted, gone ones
 * removed. Both lists are newest first. Past a few hundred changes one
 * splice replaces everything. */
/* The row of run i of the read, with its tags and added columns (the
 * extra values are newest first too: a cursor per column walks them). */
static EmRunRow *make_row(runs_read *r, int i, int *cursor) {
  EmRunRow *row = em_run_row_new(&r->runs[i]);
  gint64 id = r->runs[i].id;
  em_run_row_set_tags(row, g_hash_table_lookup(r->tags, &id));
  for (guint k = 0; r->extra && k < r->extra->len; k++) {
    em_run_value *v = r->extra->pdata[k];
    while (cursor[k] < r->n_extra[k] && v[cursor[k]].run > id) cursor[k]++;
    if (cursor[k] < r->n_extra[k] && v[cursor[k]].run == id)
      em_run_row_set_extra(row, r->extra_keys[k], v[cursor[k]].text, v[cursor[k]].number);
    else
      em_run_row_set_extra(row, r->extra_keys[k], "", NAN);
  }
  return row;
}

/* One merge of the rows (newest first) with the read (newest first):
 * with dry, only counts the rows it would insert, replace or remove. */
static int merge_rows(EmRunsPage *self, runs_read *r, gboolean dry) {
  GListModel *m = G_LIST_MODEL(self->rows);
  guint j = 0, have = g_list_model_get_n_items(m);
  int ops = 0;
  int *cursor = g_new0(int, (r->extra ? r->extra->len : 0) + 1);
  for (int i = 0; i < r->n;) {
    gint64 id = r->runs[i].id;
    EmRunRow *old = j < have ? g_list_model_get_item(m, j) : NULL;
    gint64 oid = old ? em_run_row_get(old)->id : -1;
    if (old && oid > id) { /* gone from the registry */
      ops++;
      if (dry) j++;
      else g_list_store_remove(self->rows, j), have--;
    } else if (old && oid == id) {
      EmRunRow *row = make_row(r, i, cursor);
      if (!em_run_row_equal(old, row)) {
        ops++;
        if (!dry) g_list_store_splice(self->rows, j, 1, (gpointer *)&row, 1);
      }
      g_object_unref(row);
      i++, j++;
    } else { /* new */
      ops++;
      if (!dry) {
        EmRunRow *row = make_row(r, i, cursor);
        g_list_store_insert(self->rows, j, row);
        g_object_unref(row);
        have++, j++;
      }
      i++;
    }
    g_clear_object(&old);
  }
  g_free(cursor);
  if (have > j) {
    ops += (int)(have - j);
    if (!dry) g_list_store_splice(self->rows, j, have - j, NULL, 0);
  }
  return ops;
}

/* The rows follow the read: a row whose run did not change is kept (so a
 * reload while one run trains replaces one row, not ten thousand, and
 * the selection, sort and scroll stay), new runs are inserted, gone ones
 * removed. Past a few hundred changes one splice replaces everything. */
static void apply_rows(EmRunsPage *self, runs_read *r) {
  guint have = g_list_model_get_n_items(G_LIST_MODEL(self->rows));
  if (have > 0 && merge_rows(self, r, TRUE) <= 256) {
    merge_rows(self, r, FALSE);
    return;
  }
  GPtrArray *items = g_ptr_array_new_with_free_func(g_object_unref);
  int *cursor = g_new0(int, (r->extra ? r->extra->len : 0) + 1);
  for (int i = 0; i < r->n; i++) g_ptr_array_add(items, make_row(r, i, cursor));
  g_free(cursor);
  g_list_store_splice(self->rows, 0, have, items->pdata, items->len);
  g_ptr_array_unref(items);
}

static void apply_read(EmRunsPage *self, runs_read *r) {
  self->stale = FALSE;
  self->reloads++;
  if (r->error) {
    set_message(self, r->error);
    if (g_str_has_prefix(r->error, "No runs to show")) g_list_store_remove_all(self->rows);
    update_counts(self);
    return;
  }
  int nsel = 0;
  gint64 *sel = em_runs_page_get_selected_ids(self, &nsel);
  update_models(self, r->runs, r->n);
  /* Thousands of rows are filtered and sorted in idle chunks, so that no
   * frame waits for all of them; a few hundred at once, as before (what a
   * filter shows is then there when its control returns). */
  gboolean many = r->n > 1000;
  gtk_sort_list_model_set_incremental(self->sorted, many);
  gtk_filter_list_model_set_incremental(self->filtered, many);
  apply_rows(self, r);
  if (r->columns && (!self->column_keys ||
                     !g_strv_equal((const char *const *)r->columns,
                                   (const char *const *)self->column_keys))) {
    g_strfreev(self->column_keys);
    self->column_keys = r->columns;
    r->columns = NULL;
    fill_column_menu(self);
  }
  if (nsel) em_runs_page_select_ids(self, sel, nsel);
  g_free(sel);
  if (*self->message && g_str_has_prefix(self->message, "No runs to show")) set_message(self, "");
  update_counts(self);
}

/* The added columns, for a read (g_strfreev). */
static char **extra_keys_copy(EmRunsPage *self) {
  char **k = g_new0(char *, self->extra_keys->len + 1);
  for (guint i = 0; i < self->extra_keys->len; i++) k[i] = g_strdup(self->extra_keys->pdata[i]);
  return k;
}

void em_runs_page_reload(EmRunsPage *self) {
  g_return_if_fail(EM_IS_RUNS_PAGE(self));
  runs_read *r = read_registry(em_app_state_get_registry_dir(self->state), extra_keys_copy(self));
  apply_read(self, r);
  runs_read_free(r);
}

typedef struct {
  char *dir;
  char **extra_keys;
} read_request;

static void read_request_free(gpointer p) {
  read_request *q = p;
  g_free(q->dir);
  g_strfreev(q->extra_keys);
  g_free(q);
}

static void read_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel) {
  (void)source;
  (void)cancel;
  read_request *q = data;
  char **keys = q->extra_keys;
  q->extra_keys = NULL; /* the read takes them */
  g_task_return_pointer(task, read_registry(q->dir, keys), runs_read_free);
}

static void reload_async(EmRunsPage *self);

static void on_read_done(GObject *source, GAsyncResult *res, gpointer data) {
  (void)data;
  EmRunsPage *self = EM_RUNS_PAGE(source);
  runs_read *r = g_task_propagate_pointer(G_TASK(res), NULL);
  self->reading = FALSE;
  if (r && !self->disposed) apply_read(self, r);
  runs_read_free(r);
  if (self->read_again && !self->disposed) {
    self->read_again = FALSE;
    reload_async(self);
  }
}

/* Reads on a worker thread and applies on the main one: the main loop
 * never waits on SQLite. A request while a read runs is queued (one). */
static void reload_async(EmRunsPage *self) {
  if (self->reading) {
    self->read_again = TRUE;
    return;
  }
  self->reading = TRUE;
  GTask *t = g_task_new(self, NULL, on_read_done, NULL);
  read_request *q = g_new0(read_request, 1);
  q->dir = g_strdup(em_app_state_get_registry_dir(self->state));
  q->extra_keys = extra_keys_copy(self);
  g_task_set_task_data(t, q, read_request_free);
  g_task_run_in_thread(t, read_thread);
  g_object_unref(t);
}

/* ---- actions ------------------------------------------------------------ */

static void action_reload(GtkWidget *w, const char *name, GVariant *p) {
  (void)name;
  (void)p;
  EmRunsPage *self = EM_RUNS_PAGE(w);
  set_message(self, "");
  reload_async(self);
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
  if (!s) set_message(self, err.msg);
  return s;
}

static void action_tag(GtkWidget *w, const char *name, GVariant *p) {
  (void)name;
  (void)p;
  EmRunsPage *self = EM_RUNS_PAGE(w);
  const char *text = gtk_editable_get_text(GTK_EDITABLE(self->tag_entry));
  const char *eq = strchr(text, '=');
  if (!eq || eq == text) {
    set_message(self, "A tag is key=value (for example: dataset=small): type one in the tag box.");
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
      set_message(self, err.msg);
      ok = FALSE;
    }
  }
  em_store_close(s);
  if (ok) {
    set_message(self, "");
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
    if (s) set_message(self, errors->str);
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
  if (gtk_widget_get_mapped(GTK_WIDGET(self))) reload_async(self);
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
  if (self->stale) reload_async(self);
}

static void on_filter_changed(gpointer data) {
  refilter(data);
  update_counts(data);
}

static void on_selection_changed(GtkSelectionModel *m, guint pos, guint n, gpointer data) {
  (void)m;
  (void)pos;
  (void)n;
  update_counts(data);
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
  build_column_menu(self);
  const char *any[] = {"Any model", NULL};
  self->models = gtk_string_list_new(any);
  gtk_drop_down_set_model(self->model_dropdown, G_LIST_MODEL(self->models));
  g_signal_connect_swapped(self->filter_entry, "search-changed", G_CALLBACK(on_filter_changed), self);
  g_signal_connect_swapped(self->status_dropdown, "notify::selected", G_CALLBACK(on_filter_changed), self);
  g_signal_connect_swapped(self->model_dropdown, "notify::selected", G_CALLBACK(on_filter_changed), self);
  g_signal_connect(self->selection, "selection-changed", G_CALLBACK(on_selection_changed), self);
  g_signal_connect_swapped(self->tag_entry, "activate", G_CALLBACK(on_tag_activate), self);
  g_signal_connect(self->column_view, "activate", G_CALLBACK(on_row_activate), self);
  update_counts(self);
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
  reload_async(self);
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
