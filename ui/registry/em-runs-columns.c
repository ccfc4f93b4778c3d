/* em-runs-columns.c: any setting or metric as a column of the Runs
 * table: the Columns menu, adding and removing a column (its values come
 * with the page's reads: em-runs-read.c), and the cells' text. */
#include "em-runs-page-private.h"

#include <math.h>
#include <string.h>

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
  g_signal_connect(f, "setup", G_CALLBACK(em_runs_page_cell_setup_), owned);
  g_signal_connect(f, "bind", G_CALLBACK(em_runs_page_cell_bind_), owned);
  char *title = column_title(key);
  GtkColumnViewColumn *col = gtk_column_view_column_new(title, f);
  g_free(title);
  g_object_set_data_full(G_OBJECT(col), "em-key", g_strdup(key), g_free);
  column_sort *cs = g_new(column_sort, 1);
  *cs = (column_sort){self, owned};
  GtkCustomSorter *sorter = gtk_custom_sorter_new(em_runs_page_compare_rows_, cs, g_free);
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
void em_runs_page_fill_column_menu_(EmRunsPage *self) {
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

void em_runs_page_build_column_menu_(EmRunsPage *self) {
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

