/* em-builder-editor.c: the property editor (the selected node's fields, from its
 * layer type's attribute table) and the inputs editor (earlier nodes to
 * merge, for residual connections). Every change edits the document and
 * re-parses it. */
#include "em-builder-page-private.h"

#include "em-wheel-guard.h"

#include <math.h>
#include <string.h>

/* ---- property and inputs editors --------------------------------------------- */

static void clear_box(GtkWidget *w) {
  GtkWidget *c;
  while ((c = gtk_widget_get_first_child(w))) {
    if (GTK_IS_GRID(w)) gtk_grid_remove(GTK_GRID(w), c);
    else gtk_box_remove(GTK_BOX(w), c);
  }
}

static void edited(EmBuilderPage *self) {
  em_builder_reparse(self);
  em_builder_refresh(self, FALSE);
}

static void on_attr_spin(GtkSpinButton *spin, EmBuilderPage *self) {
  if (self->loading || self->selected < 0) return;
  const char *key = g_object_get_data(G_OBJECT(spin), "attr");
  json_t *node = em_builder_node_at(self, self->selected);
  double v = gtk_spin_button_get_value(spin);
  if (gtk_spin_button_get_digits(spin) == 0)
    json_object_set_new(node, key, json_integer((json_int_t)llround(v)));
  else
    json_object_set_new(node, key, json_real(v));
  edited(self);
}

/* ---- inferred attributes ----------------------------------------------------- */

/* An optional attribute whose default lies outside its range is one the
 * layer infers when it is not given (Linear's in_features, BatchNorm's
 * num_features, a pool's stride): the editor shows "auto (128)" for it,
 * not a made-up number, and offers the way back to automatic. */
static gboolean attr_inferred(const em_attr_desc *d) {
  return !d->required && (d->def < d->min || d->def > d->max);
}

/* The value the layer infers for attribute `name` of node i, from its
 * (first) input's shape in the parsed model or in its valid prefix; -1
 * when unknown. in_features is the input's last dim; num_features and
 * in_channels its channels (the first dim after the batch). */
static int64_t inferred_value(EmBuilderPage *self, int i, const char *name) {
  const em_spec *s = self->spec ? self->spec : self->prefix;
  if (!s) return -1;
  json_t *inputs = json_object_get(em_builder_node_at(self, i), "inputs");
  int from = i - 1;
  if (json_is_array(inputs) && json_array_size(inputs) > 0) {
    const char *nm = json_string_value(json_array_get(inputs, 0));
    from = -1;
    for (int k = 0; k < i && nm; k++)
      if (!g_strcmp0(em_builder_node_name(self, k), nm)) from = k;
    if (g_strcmp0(nm, "input") && from < 0) return -1;
  }
  int64_t dims[EM_MAX_DIMS];
  int nd;
  if (from < 0) {
    nd = em_spec_input_shape(s, dims);
  } else {
    int first, last = em_spec_row_nodes(s, from, &first);
    if (last < 0) return -1;
    const em_shape *o = em_spec_node_output(s, last);
    nd = o->ndim - 1; /* without the batch dim */
    for (int k = 0; k < nd; k++) dims[k] = o->shape[k + 1];
  }
  if (nd < 1) return -1;
  if (!strcmp(name, "in_features")) return dims[nd - 1];
  if (!strcmp(name, "num_features") || !strcmp(name, "in_channels")) return dims[0];
  return -1;
}

static void show_auto(GtkStack *stack, gboolean automatic) {
  gtk_stack_set_visible_child_name(stack, automatic ? "auto" : "value");
}

static void on_auto_toggled(GtkCheckButton *b, GParamSpec *ps, EmBuilderPage *self) {
  (void)ps;
  if (self->loading || self->selected < 0) return;
  GtkStack *stack = g_object_get_data(G_OBJECT(b), "stack");
  GtkSpinButton *spin = GTK_SPIN_BUTTON(gtk_stack_get_child_by_name(stack, "value"));
  const char *key = g_object_get_data(G_OBJECT(spin), "attr");
  json_t *node = em_builder_node_at(self, self->selected);
  gboolean automatic = gtk_check_button_get_active(b);
  show_auto(stack, automatic);
  if (automatic) json_object_del(node, key);
  else /* explicit, starting from what was inferred */
    json_object_set_new(node, key, json_integer((json_int_t)llround(gtk_spin_button_get_value(spin))));
  edited(self);
}

/* The spin button, or "auto (128)" in its place while the attribute is
 * not given, with an "auto" switch beside it. */
static GtkWidget *inferred_spin(EmBuilderPage *self, int i, const em_attr_desc *d, json_t *v,
                                GtkWidget **spin_out) {
  double lo = d->min > -1e9 ? d->min : -1e9, hi = d->max < 1e9 ? d->max : 1e9;
  GtkWidget *spin = gtk_spin_button_new_with_range(lo, hi, 1);
  gtk_spin_button_set_digits(GTK_SPIN_BUTTON(spin), 0);
  int64_t guess = inferred_value(self, i, d->name);
  gtk_spin_button_set_value(GTK_SPIN_BUTTON(spin),
                            v ? json_number_value(v) : guess > 0 ? (double)guess : lo);
  g_signal_connect_object(spin, "value-changed", G_CALLBACK(on_attr_spin), self, 0);
  char *text = guess > 0 ? g_strdup_printf("auto (%lld)", (long long)guess) : g_strdup("auto");
  GtkWidget *label = gtk_label_new(text);
  g_free(text);
  gtk_label_set_xalign(GTK_LABEL(label), 0);
  gtk_widget_add_css_class(label, "dim-label");
  char *lname = g_strdup_printf("auto-value-%s", d->name);
  gtk_widget_set_name(label, lname);
  g_free(lname);
  GtkWidget *stack = gtk_stack_new();
  gtk_widget_set_hexpand(stack, TRUE);
  gtk_stack_add_named(GTK_STACK(stack), spin, "value");
  gtk_stack_add_named(GTK_STACK(stack), label, "auto");
  show_auto(GTK_STACK(stack), v == NULL);
  GtkWidget *check = gtk_check_button_new_with_label("auto");
  gtk_check_button_set_active(GTK_CHECK_BUTTON(check), v == NULL);
  gtk_widget_set_tooltip_text(check, "Inferred from the node's input while ticked");
  char *cname = g_strdup_printf("auto-%s", d->name);
  gtk_widget_set_name(check, cname);
  g_free(cname);
  g_object_set_data(G_OBJECT(check), "stack", stack);
  g_signal_connect_object(check, "notify::active", G_CALLBACK(on_auto_toggled), self, 0);
  GtkWidget *box = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 6);
  gtk_box_append(GTK_BOX(box), stack);
  gtk_box_append(GTK_BOX(box), check);
  *spin_out = spin;
  return box;
}

static void on_attr_check(GtkCheckButton *b, GParamSpec *ps, EmBuilderPage *self) {
  (void)ps;
  if (self->loading || self->selected < 0) return;
  const char *key = g_object_get_data(G_OBJECT(b), "attr");
  json_object_set_new(em_builder_node_at(self, self->selected), key,
                      json_boolean(gtk_check_button_get_active(b)));
  edited(self);
}

/* A choice attribute's drop-down: the chosen string. */
static void on_attr_choice(GtkDropDown *dd, GParamSpec *ps, EmBuilderPage *self) {
  (void)ps;
  if (self->loading || self->selected < 0) return;
  const char *key = g_object_get_data(G_OBJECT(dd), "attr");
  GtkStringObject *item = gtk_drop_down_get_selected_item(dd);
  if (!item) return;
  json_object_set_new(em_builder_node_at(self, self->selected), key,
                      json_string(gtk_string_object_get_string(item)));
  edited(self);
}

/* "3" or "3, 3" (or empty: drop the key). */
static void on_attr_entry(GtkEditable *e, EmBuilderPage *self) {
  if (self->loading || self->selected < 0) return;
  const char *key = g_object_get_data(G_OBJECT(e), "attr");
  json_t *node = em_builder_node_at(self, self->selected);
  const char *text = gtk_editable_get_text(e);
  char **parts = g_strsplit_set(text, ", []", -1);
  json_t *list = json_array();
  gboolean bad = FALSE;
  for (char **p = parts; *p; p++) {
    if (!**p) continue;
    char *end;
    long long v = g_ascii_strtoll(*p, &end, 10);
    if (*end) bad = TRUE;
    json_array_append_new(list, json_integer(v));
  }
  g_strfreev(parts);
  if (json_array_size(list) == 0) json_object_del(node, key);
  else if (bad) json_object_set_new(node, key, json_string(text)); /* the parser names the problem */
  else if (json_array_size(list) == 1) json_object_set(node, key, json_array_get(list, 0));
  else json_object_set(node, key, list);
  json_decref(list);
  edited(self);
}

static void on_name_activate(GtkEntry *entry, EmBuilderPage *self) {
  if (self->selected < 0) return;
  const char *new_name = gtk_editable_get_text(GTK_EDITABLE(entry));
  const char *old = em_builder_node_name(self, self->selected);
  if (!*new_name || !old || !strcmp(old, new_name)) return;
  char *old_copy = g_strdup(old);
  for (int i = 0; i < em_builder_n_nodes(self); i++) { /* keep the inputs that named it */
    json_t *in = json_object_get(em_builder_node_at(self, i), "inputs");
    for (size_t k = 0; k < json_array_size(in); k++)
      if (!g_strcmp0(json_string_value(json_array_get(in, k)), old_copy))
        json_array_set_new(in, k, json_string(new_name));
  }
  if (!g_strcmp0(json_string_value(json_object_get(self->doc, "output")), old_copy))
    json_object_set_new(self->doc, "output", json_string(new_name));
  json_object_set_new(em_builder_node_at(self, self->selected), "name", json_string(new_name));
  g_free(old_copy);
  edited(self);
}

static void on_input_toggled(GtkCheckButton *b, GParamSpec *ps, EmBuilderPage *self) {
  (void)ps;
  (void)b;
  if (self->loading || self->selected < 0) return;
  json_t *list = json_array();
  for (GtkWidget *c = gtk_widget_get_first_child(GTK_WIDGET(self->inputs_box)); c;
       c = gtk_widget_get_next_sibling(c))
    if (GTK_IS_CHECK_BUTTON(c) && gtk_check_button_get_active(GTK_CHECK_BUTTON(c)))
      json_array_append_new(list, json_string(g_object_get_data(G_OBJECT(c), "input")));
  json_t *node = em_builder_node_at(self, self->selected);
  const char *prev = self->selected > 0 ? em_builder_node_name(self, self->selected - 1) : "input";
  if (json_array_size(list) == 1 && !g_strcmp0(json_string_value(json_array_get(list, 0)), prev))
    json_object_del(node, "inputs"); /* the default: the previous node */
  else
    json_object_set(node, "inputs", list);
  json_decref(list);
  edited(self);
}

void em_builder_fill_editor(EmBuilderPage *self) {
  self->loading = TRUE;
  clear_box(GTK_WIDGET(self->props_grid));
  clear_box(GTK_WIDGET(self->inputs_box));
  int i = self->selected;
  json_t *node = i >= 0 ? em_builder_node_at(self, i) : NULL;
  if (!node) {
    GtkWidget *l = gtk_label_new("Select a node to edit its fields.");
    gtk_widget_add_css_class(l, "dim-label");
    gtk_grid_attach(self->props_grid, l, 0, 0, 2, 1);
    self->loading = FALSE;
    return;
  }
  const char *type_name = json_string_value(json_object_get(node, "type"));
  const em_layer_type *type = type_name ? em_layer_type_find(type_name) : NULL;
  int r = 0;
  GtkWidget *nl = gtk_label_new("name");
  gtk_label_set_xalign(GTK_LABEL(nl), 0);
  GtkWidget *ne = gtk_entry_new();
  gtk_editable_set_text(GTK_EDITABLE(ne), em_builder_node_name(self, i) ?: "");
  gtk_widget_set_tooltip_text(ne, "Press Enter to rename (inputs that name it follow)");
  gtk_widget_set_name(ne, "attr-name");
  g_signal_connect_object(ne, "activate", G_CALLBACK(on_name_activate), self, 0);
  gtk_grid_attach(self->props_grid, nl, 0, r, 1, 1);
  gtk_grid_attach(self->props_grid, ne, 1, r++, 1, 1);
  GtkWidget *tl = gtk_label_new(type ? type->help : "unknown layer type");
  gtk_label_set_wrap(GTK_LABEL(tl), TRUE);
  gtk_label_set_xalign(GTK_LABEL(tl), 0);
  gtk_widget_add_css_class(tl, "dim-label");
  gtk_grid_attach(self->props_grid, tl, 0, r++, 2, 1);
  for (int a = 0; type && a < type->n_attrs; a++) {
    const em_attr_desc *d = &type->attrs[a];
    json_t *v = json_object_get(node, d->name);
    char *text = g_strdup_printf("%s%s", d->name, d->required ? " *" : "");
    GtkWidget *label = gtk_label_new(text);
    g_free(text);
    gtk_label_set_xalign(GTK_LABEL(label), 0);
    gtk_widget_set_tooltip_text(label, d->help);
    GtkWidget *w, *cell = NULL; /* cell: what the grid holds when it is not w */
    if (d->kind == EM_ATTR_INT && attr_inferred(d)) {
      cell = inferred_spin(self, i, d, v, &w);
    } else if (d->kind == EM_ATTR_BOOL) {
      w = gtk_check_button_new();
      gtk_check_button_set_active(GTK_CHECK_BUTTON(w), v ? json_is_true(v) : d->def != 0);
      g_signal_connect_object(w, "notify::active", G_CALLBACK(on_attr_check), self, 0);
    } else if (d->kind == EM_ATTR_CHOICE) {
      char **names = g_strsplit(d->choices ? d->choices : "", "|", -1);
      w = gtk_drop_down_new_from_strings((const char *const *)names);
      int k = json_is_string(v) ? em_attr_choice_find(d->choices, json_string_value(v)) : -1;
      gtk_drop_down_set_selected(GTK_DROP_DOWN(w), (guint)(k >= 0 ? k : (int)d->def));
      g_strfreev(names);
      g_signal_connect_object(w, "notify::selected", G_CALLBACK(on_attr_choice), self, 0);
    } else if (d->kind == EM_ATTR_INT || d->kind == EM_ATTR_FLOAT) {
      gboolean is_int = d->kind == EM_ATTR_INT;
      double lo = d->min > -1e9 ? d->min : -1e9, hi = d->max < 1e9 ? d->max : 1e9;
      w = gtk_spin_button_new_with_range(lo, hi, is_int ? 1 : 0.01);
      gtk_spin_button_set_digits(GTK_SPIN_BUTTON(w), is_int ? 0 : 4);
      gtk_spin_button_set_value(GTK_SPIN_BUTTON(w), v ? json_number_value(v) : d->def);
      g_signal_connect_object(w, "value-changed", G_CALLBACK(on_attr_spin), self, 0);
      em_wheel_guard(w);
    } else {
      w = gtk_entry_new();
      GString *s = g_string_new(NULL);
      if (json_is_array(v)) {
        for (size_t k = 0; k < json_array_size(v); k++)
          g_string_append_printf(s, "%s%lld", k ? ", " : "",
                                 (long long)json_integer_value(json_array_get(v, k)));
      } else if (json_is_integer(v)) {
        g_string_append_printf(s, "%lld", (long long)json_integer_value(v));
      }
      gtk_editable_set_text(GTK_EDITABLE(w), s->str);
      gtk_entry_set_placeholder_text(GTK_ENTRY(w), attr_inferred(d) ? "auto (empty: inferred)"
                                                   : d->kind == EM_ATTR_INT2 ? "3 or 3, 3"
                                                                             : "e.g. 4, 4");
      g_string_free(s, TRUE);
      g_signal_connect_object(w, "changed", G_CALLBACK(on_attr_entry), self, 0);
    }
    char *wname = g_strdup_printf("attr-%s", d->name);
    gtk_widget_set_name(w, wname);
    g_free(wname);
    g_object_set_data_full(G_OBJECT(w), "attr", g_strdup(d->name), g_free);
    gtk_widget_set_tooltip_text(w, d->help);
    gtk_widget_set_hexpand(w, TRUE);
    gtk_grid_attach(self->props_grid, label, 0, r, 1, 1);
    gtk_grid_attach(self->props_grid, cell ? cell : w, 1, r++, 1, 1);
  }
  /* inputs: the model input and every earlier node */
  json_t *inputs = json_object_get(node, "inputs");
  GtkWidget *hint = gtk_label_new(
      "Tick earlier nodes to merge (e.g. an Add node for a residual connection).");
  gtk_label_set_wrap(GTK_LABEL(hint), TRUE);
  gtk_label_set_xalign(GTK_LABEL(hint), 0);
  gtk_widget_add_css_class(hint, "dim-label");
  gtk_box_append(self->inputs_box, hint);
  for (int k = -1; k < i; k++) {
    const char *nm = k < 0 ? "input" : em_builder_node_name(self, k);
    if (!nm) continue;
    gboolean on = FALSE;
    if (json_is_array(inputs)) {
      for (size_t j = 0; j < json_array_size(inputs); j++)
        if (!g_strcmp0(json_string_value(json_array_get(inputs, j)), nm)) on = TRUE;
    } else {
      on = k == i - 1;
    }
    GtkWidget *b = gtk_check_button_new_with_label(nm);
    gtk_check_button_set_active(GTK_CHECK_BUTTON(b), on);
    g_object_set_data_full(G_OBJECT(b), "input", g_strdup(nm), g_free);
    char *wname = g_strdup_printf("input-%s", nm);
    gtk_widget_set_name(b, wname);
    g_free(wname);
    g_signal_connect_object(b, "notify::active", G_CALLBACK(on_input_toggled), self, 0);
    gtk_box_append(self->inputs_box, b);
  }
  self->loading = FALSE;
}
