/* em-builder-palette.c: the palette: every registered layer type (built-in and
 * plugin), grouped by category; activating one adds it after the selection. */
#include "em-builder-page-private.h"

#include <stdlib.h>

/* ---- palette ---------------------------------------------------------------------- */

static int cmp_types(const void *a, const void *b) {
  const em_layer_type *x = *(const em_layer_type *const *)a, *y = *(const em_layer_type *const *)b;
  int c = g_strcmp0(x->category, y->category);
  return c ? c : g_strcmp0(x->name, y->name);
}

static void palette_header(GtkListBoxRow *row, GtkListBoxRow *before, gpointer data) {
  (void)data;
  const char *cat = g_object_get_data(G_OBJECT(row), "category");
  const char *prev = before ? g_object_get_data(G_OBJECT(before), "category") : NULL;
  if (prev && !g_strcmp0(cat, prev)) {
    gtk_list_box_row_set_header(row, NULL);
    return;
  }
  GtkWidget *l = gtk_label_new(cat);
  gtk_label_set_xalign(GTK_LABEL(l), 0);
  gtk_widget_add_css_class(l, "dim-label");
  gtk_widget_add_css_class(l, "caption-heading");
  gtk_widget_set_margin_top(l, 6);
  gtk_widget_set_margin_start(l, 6);
  gtk_list_box_row_set_header(row, l);
}

void em_builder_on_palette_activated(GtkListBox *box, GtkListBoxRow *row, EmBuilderPage *self) {
  (void)box;
  em_builder_add_layer(self, g_object_get_data(G_OBJECT(row), "type"));
}

/* name with a zero-width space before each inner capital that follows a
 * lower-case letter ("Transformer\u200bEncoder\u200bLayer"), where a
 * wrapping label may break. */
static char *camel_breaks(const char *name) {
  GString *s = g_string_new(NULL);
  for (const char *p = name; *p; p++) {
    if (p > name && g_ascii_isupper(*p) && g_ascii_islower(p[-1])) g_string_append(s, "\u200b");
    g_string_append_c(s, *p);
  }
  return g_string_free(s, FALSE);
}


void em_builder_fill_palette(EmBuilderPage *self) {
  GtkWidget *old;
  while ((old = gtk_widget_get_first_child(GTK_WIDGET(self->palette_list))))
    gtk_list_box_remove(self->palette_list, old);
  int n = em_layer_type_count();
  self->palette_types = n;
  const em_layer_type **types = g_new(const em_layer_type *, n);
  for (int i = 0; i < n; i++) types[i] = em_layer_type_at(i);
  qsort(types, (size_t)n, sizeof *types, cmp_types);
  for (int i = 0; i < n; i++) {
    GtkWidget *row = gtk_list_box_row_new();
    /* long names (TransformerEncoderLayer) wrap between their words
     * rather than widen the palette at the table's cost */
    char *shown = camel_breaks(types[i]->name);
    GtkWidget *l = gtk_label_new(shown);
    g_free(shown);
    gtk_label_set_xalign(GTK_LABEL(l), 0);
    gtk_label_set_wrap(GTK_LABEL(l), TRUE);
    gtk_label_set_wrap_mode(GTK_LABEL(l), PANGO_WRAP_WORD);
    gtk_label_set_max_width_chars(GTK_LABEL(l), 13);
    gtk_list_box_row_set_child(GTK_LIST_BOX_ROW(row), l);
    char *tip = g_strdup_printf("%s: %s", types[i]->name, types[i]->help);
    gtk_widget_set_tooltip_text(row, tip);
    g_free(tip);
    char *wname = g_strdup_printf("palette-%s", types[i]->name);
    gtk_widget_set_name(row, wname);
    g_free(wname);
    g_object_set_data(G_OBJECT(row), "type", (gpointer)types[i]->name);
    g_object_set_data(G_OBJECT(row), "category",
                      (gpointer)(types[i]->category ? types[i]->category : "other"));
    gtk_list_box_append(self->palette_list, row);
  }
  g_free(types);
  gtk_list_box_set_header_func(self->palette_list, palette_header, NULL, NULL);
}
