/* em-builder-page.c: see the header. The JSON document is the truth: every
 * edit changes it, then the page re-parses it (shape inference, no
 * tensors) and refreshes the node rows, the totals and the estimate. */
#include "em-builder-page-private.h"

#include <string.h>

#include "em-spec-costs.h"
#include "em-wheel-guard.h"

G_DEFINE_FINAL_TYPE(EmBuilderPage, em_builder_page, GTK_TYPE_BOX)

static const char *default_spec =
    "{\"name\": \"untitled\", \"input\": {\"shape\": [1, 28, 28]}, \"nodes\": [],"
    " \"loss\": {\"type\": \"cross_entropy\"},"
    " \"training\": {\"optimizer\": \"adam\", \"lr\": 0.001, \"batch_size\": 128, \"epochs\": 1}}";

/* ---- parse and publish ---------------------------------------------------- */

/* The nodes before index k alone, parsed (NULL when they do not parse):
 * an invalid model still shows what its valid start infers. */
static em_spec *parse_prefix(EmBuilderPage *self, int k) {
  if (k <= 0) return NULL;
  json_t *doc = json_deep_copy(self->doc);
  json_t *nodes = json_object_get(doc, "nodes");
  while ((int)json_array_size(nodes) > k) json_array_remove(nodes, json_array_size(nodes) - 1);
  json_object_del(doc, "output"); /* the last node of the prefix */
  char *text = json_dumps(doc, JSON_PRESERVE_ORDER);
  json_decref(doc);
  em_error err = {0};
  em_spec *s = text ? em_spec_parse(text, "<builder>", &err) : NULL;
  free(text);
  return s;
}

static int node_index(EmBuilderPage *self, const char *name) {
  for (int i = 0; name && i < em_builder_n_nodes(self); i++)
    if (!g_strcmp0(em_builder_node_name(self, i), name)) return i;
  return -1;
}

void em_builder_reparse(EmBuilderPage *self) {
  g_clear_pointer(&self->spec, em_spec_free);
  g_clear_pointer(&self->prefix, em_spec_free);
  g_clear_pointer(&self->error, g_free);
  g_clear_pointer(&self->error_node, g_free);
  char *text = em_spec_format(self->doc, self->original);
  if (!text) return;
  em_error err = {0};
  if (em_builder_n_nodes(self) == 0) {
    self->error = g_strdup("The model has no nodes yet: click a layer in the palette to add one.");
  } else {
    self->spec = em_spec_parse(text, "<builder>", &err);
    if (!self->spec) {
      const char *msg = err.msg;
      if (g_str_has_prefix(msg, "<builder>: ")) msg += strlen("<builder>: ");
      self->error = g_strdup(msg);
      const char *p = strstr(err.msg, "node '");
      if (p) {
        p += 6;
        const char *q = strchr(p, '\'');
        if (q) self->error_node = g_strndup(p, (gsize)(q - p));
      }
      self->prefix = parse_prefix(self, node_index(self, self->error_node));
    }
  }
  if (self->spec && self->state) {
    g_free(self->published);
    self->published = g_strdup(text);
    em_app_state_set_spec(self->state, text, self->path);
  }
  free(text);
  /* the document's states are compared in one form that does not depend on
   * the file's own layout (em_spec_format's text changes when a save makes
   * its text the original) */
  char *state = em_builder_doc_text(self);
  em_model_doc_note(self->mdoc, state);
  g_free(state);
}

/* ---- node rows ------------------------------------------------------------ */

/* Sized so that the zoo's models show whole in a 1024-pixel-wide window:
 * the units are in the titles (FLOPs and activation bytes per sample). */
static const int col_chars[] = {8, 11, 15, 8, 7, 8};
static const char *col_titles[] = {"Name", "Type", "Output", "Params", "FLOPs", "Act."};
static const char *col_tips[] = {NULL, NULL, "the node's output shape (N: the batch)", "parameters",
                                 "forward FLOPs per sample", "activation memory per sample"};

static GtkWidget *cell(const char *text, int chars, gboolean bold) {
  GtkWidget *l = gtk_label_new(NULL);
  if (bold) {
    char *m = g_markup_printf_escaped("<b>%s</b>", text);
    gtk_label_set_markup(GTK_LABEL(l), m);
    g_free(m);
  } else {
    gtk_label_set_text(GTK_LABEL(l), text);
  }
  gtk_label_set_width_chars(GTK_LABEL(l), chars);
  gtk_label_set_max_width_chars(GTK_LABEL(l), chars);
  gtk_label_set_ellipsize(GTK_LABEL(l), PANGO_ELLIPSIZE_END);
  gtk_label_set_xalign(GTK_LABEL(l), 0);
  return l;
}

static void build_header(EmBuilderPage *self) {
  for (int c = 0; c < 6; c++) {
    GtkWidget *l = cell(col_titles[c], col_chars[c], TRUE);
    gtk_widget_add_css_class(l, "dim-label");
    if (col_tips[c]) gtk_widget_set_tooltip_text(l, col_tips[c]);
    gtk_box_append(self->header_box, l);
  }
}

static void fill_rows(EmBuilderPage *self) {
  GtkWidget *child;
  while ((child = gtk_widget_get_first_child(GTK_WIDGET(self->node_list))))
    gtk_list_box_remove(self->node_list, child);
  int n = em_builder_n_nodes(self);
  em_node_cost *costs = NULL;
  const em_spec *shown = self->spec ? self->spec : self->prefix; /* the valid nodes */
  if (shown) {
    costs = g_new0(em_node_cost, em_spec_node_count(shown));
    em_spec_costs_compute(shown, costs);
  }
  for (int i = 0; i < n; i++) {
    json_t *node = em_builder_node_at(self, i);
    const char *name = json_string_value(json_object_get(node, "name"));
    const char *type = json_string_value(json_object_get(node, "type"));
    char shape[64] = "—", params[32] = "—", flops[32] = "—", act[32] = "—";
    int first = i, last = shown ? em_spec_row_nodes(shown, i, &first) : -1;
    char block[48];
    json_t *rep = json_object_get(node, "repeat");
    if (rep && !type) { /* a repeated block: its copies' sums, the last one's shape */
      snprintf(block, sizeof block, "block \u00d7%lld", (long long)json_integer_value(rep));
      type = block;
    }
    if (last >= 0) {
      int64_t np = 0, act_bytes = 0;
      double fl = 0;
      for (int k = first; k <= last; k++) {
        np += em_spec_node_param_count(shown, k);
        fl += costs[k].flops;
        act_bytes += costs[k].act_bytes;
      }
      em_shape_format(em_spec_node_output(shown, last), shape, sizeof shape);
      em_format_count(np, params, sizeof params);
      em_format_flops(fl, flops, sizeof flops);
      char *unit = strstr(flops, "FLOP"); /* the column's title says it: "501.8 k" */
      if (unit) *unit = '\0';
      g_strchomp(flops);
      em_format_bytes(act_bytes, act, sizeof act);
    }
    GtkWidget *v = gtk_box_new(GTK_ORIENTATION_VERTICAL, 2);
    GtkWidget *h = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 6);
    const char *vals[] = {name ? name : "?", type ? type : "?", shape, params, flops, act};
    for (int c = 0; c < 6; c++) gtk_box_append(GTK_BOX(h), cell(vals[c], col_chars[c], c == 0));
    gtk_box_append(GTK_BOX(v), h);
    json_t *inputs = json_object_get(node, "inputs");
    if (json_is_array(inputs)) {
      GString *s = g_string_new("← ");
      for (size_t k = 0; k < json_array_size(inputs); k++)
        g_string_append_printf(s, "%s%s", k ? " + " : "",
                               json_string_value(json_array_get(inputs, k)) ?: "?");
      GtkWidget *l = gtk_label_new(s->str);
      gtk_label_set_xalign(GTK_LABEL(l), 0);
      gtk_widget_add_css_class(l, "dim-label");
      gtk_box_append(GTK_BOX(v), l);
      g_string_free(s, TRUE);
    }
    GtkWidget *row = gtk_list_box_row_new();
    char *wname = g_strdup_printf("node-%s", name ? name : "");
    gtk_widget_set_name(row, wname);
    g_free(wname);
    if (self->error_node && name && !strcmp(self->error_node, name)) {
      GtkWidget *e = gtk_label_new(self->error);
      gtk_label_set_wrap(GTK_LABEL(e), TRUE);
      gtk_label_set_xalign(GTK_LABEL(e), 0);
      gtk_widget_add_css_class(e, "error");
      gtk_widget_set_name(e, "node-error");
      gtk_box_append(GTK_BOX(v), e);
      gtk_widget_add_css_class(row, "error-row");
    }
    gtk_widget_set_margin_top(v, 3);
    gtk_widget_set_margin_bottom(v, 3);
    gtk_widget_set_margin_start(v, 6);
    gtk_list_box_row_set_child(GTK_LIST_BOX_ROW(row), v);
    gtk_list_box_append(self->node_list, row);
  }
  g_free(costs);
}

static void fill_totals(EmBuilderPage *self) {
  const char *name = json_string_value(json_object_get(self->doc, "name"));
  gboolean modified = em_model_doc_is_modified(self->mdoc);
  char *title = g_strdup_printf("%s%s%s", name ? name : "untitled", modified ? " \u2022" : "",
                                self->spec ? "" : "  (invalid)");
  gtk_label_set_text(self->title_label, title);
  gtk_widget_set_tooltip_text(GTK_WIDGET(self->title_label),
                              modified ? "Unsaved changes (Ctrl+S saves)" : NULL);
  g_free(title);
  if (!self->spec) {
    char *m = g_markup_printf_escaped("<span foreground=\"#c01c28\">%s</span>",
                                      self->error ? self->error : "invalid spec");
    gtk_label_set_markup(self->totals_label, m);
    g_free(m);
    gtk_label_set_text(self->estimate_label, "No estimate until the model is valid.");
    return;
  }
  int n = em_spec_node_count(self->spec);
  em_node_cost *costs = g_new0(em_node_cost, n);
  em_spec_costs_compute(self->spec, costs);
  double flops = 0;
  for (int i = 0; i < n; i++) flops += costs[i].flops;
  g_free(costs);
  int64_t out[EM_MAX_DIMS];
  int od = em_spec_output_shape(self->spec, out);
  GString *os = g_string_new("[N");
  for (int d = 0; d < od; d++) g_string_append_printf(os, ", %lld", (long long)out[d]);
  g_string_append(os, "]");
  char fb[32], pc[32];
  char *t = g_strdup_printf("%d nodes · %s parameters · %s forward per sample · output %s",
                            n, em_format_count(em_spec_param_count(self->spec), pc, sizeof pc),
                            em_format_flops(flops, fb, sizeof fb), os->str);
  g_string_free(os, TRUE);
  gtk_label_set_text(self->totals_label, t);
  g_free(t);

  em_memory_estimate e;
  em_memory_estimate_compute(self->spec, (int64_t)gtk_spin_button_get_value(self->batch_spin), -1,
                             &e);
  char tot[32], av[32], w[32], a[32], o[32], mb[32];
  char *m = g_markup_printf_escaped(
      "Peak training memory (CPU): <b>%s</b> — <span foreground=\"%s\"><b>%s</b></span> in %s "
      "free; largest batch that fits: <b>%s</b>\n"
      "<small>weights+grads %s · optimiser %s (%d per parameter) · activations %s</small>",
      em_format_bytes(e.mem.total_bytes, tot, sizeof tot), e.fits ? "#26a269" : "#c01c28",
      e.fits ? "fits" : "does not fit", em_format_bytes(e.available_bytes, av, sizeof av),
      em_format_count(e.max_batch, mb, sizeof mb), em_format_bytes(e.mem.weights_bytes + e.mem.grads_bytes, w, sizeof w),
      em_format_bytes(e.mem.optim_bytes, o, sizeof o), e.mem.optim_states,
      em_format_bytes(e.mem.act_bytes + e.mem.workspace_bytes, a, sizeof a));
  gtk_label_set_markup(self->estimate_label, m);
  g_free(m);
}

/* ---- selection ---------------------------------------------------------------- */

static void on_row_selected(GtkListBox *box, GtkListBoxRow *row, EmBuilderPage *self) {
  (void)box;
  if (self->loading || self->disposed) return;
  int i = row ? gtk_list_box_row_get_index(row) : -1;
  if (i == self->selected) return;
  self->selected = i;
  em_builder_fill_editor(self);
  const char *name = i >= 0 ? em_builder_node_name(self, i) : NULL;
  if (name && self->state) em_app_state_select_layer(self->state, name);
  em_builder_fill_profile(self);
  GtkWidget *w = GTK_WIDGET(self);
  gtk_widget_action_set_enabled(w, "builder.remove", i >= 0);
  gtk_widget_action_set_enabled(w, "builder.move-up", i > 0);
  gtk_widget_action_set_enabled(w, "builder.move-down", i >= 0 && i < em_builder_n_nodes(self) - 1);
}

void em_builder_refresh(EmBuilderPage *self, gboolean rebuild_editor) {
  self->loading = TRUE;
  fill_rows(self);
  if (self->selected >= em_builder_n_nodes(self)) self->selected = em_builder_n_nodes(self) - 1;
  if (self->selected >= 0)
    gtk_list_box_select_row(self->node_list,
                            gtk_list_box_get_row_at_index(self->node_list, self->selected));
  self->loading = FALSE;
  fill_totals(self);
  em_builder_doc_sync_actions(self);
  if (rebuild_editor) em_builder_fill_editor(self);
  GtkWidget *w = GTK_WIDGET(self);
  int i = self->selected;
  gtk_widget_action_set_enabled(w, "builder.remove", i >= 0);
  gtk_widget_action_set_enabled(w, "builder.move-up", i > 0);
  gtk_widget_action_set_enabled(w, "builder.move-down", i >= 0 && i < em_builder_n_nodes(self) - 1);
}

const char *em_builder_page_get_selected(EmBuilderPage *self) {
  g_return_val_if_fail(EM_IS_BUILDER_PAGE(self), NULL);
  return self->selected >= 0 ? em_builder_node_name(self, self->selected) : NULL;
}

gboolean em_builder_page_select(EmBuilderPage *self, const char *name) {
  g_return_val_if_fail(EM_IS_BUILDER_PAGE(self), FALSE);
  for (int i = 0; i < em_builder_n_nodes(self); i++)
    if (!g_strcmp0(em_builder_node_name(self, i), name)) {
      gtk_list_box_select_row(self->node_list, gtk_list_box_get_row_at_index(self->node_list, i));
      return TRUE;
    }
  return FALSE;
}

static void on_layer_selected(EmAppState *state, const char *layer, EmBuilderPage *self) {
  (void)state;
  if (!layer || !g_strcmp0(layer, em_builder_page_get_selected(self))) return;
  char *base = g_strdup(layer); /* "fc1 (backward)", "block/fc1" */
  char *p = strstr(base, " (");
  if (p) *p = 0;
  if (!em_builder_page_select(self, base)) {
    char *slash = strrchr(base, '/');
    if (slash) em_builder_page_select(self, slash + 1);
  }
  g_free(base);
}

/* Another page set the spec (a registry version, a run's spec): edit that,
 * once unsaved changes are saved or discarded. */
static void load_state_spec(EmBuilderPage *self, gpointer data) {
  (void)data;
  EmAppState *state = self->state;
  const char *json = state ? em_app_state_get_spec_json(state) : NULL;
  if (!json || !g_strcmp0(json, self->published)) return;
  json_t *doc = json_loads(json, 0, NULL);
  if (!json_is_object(doc) || !json_is_array(json_object_get(doc, "nodes"))) {
    json_decref(doc);
    return;
  }
  json_decref(self->doc);
  self->doc = doc;
  g_free(self->original);
  self->original = g_strdup(json);
  g_free(self->path);
  const char *p = em_app_state_get_spec_path(state);
  self->path = p ? g_strdup(p) : NULL;
  self->selected = -1;
  em_builder_take_batch(self);
  em_builder_doc_loaded(self);
  em_builder_reparse(self);
  em_builder_refresh(self, TRUE);
}

static void on_spec_changed(EmAppState *state, EmBuilderPage *self) {
  const char *json = em_app_state_get_spec_json(state);
  if (!json || !g_strcmp0(json, self->published)) return;
  em_builder_page_confirm_discard(self, "opening another model", load_state_spec, NULL, NULL);
}

static void on_profile_ready(EmAppState *state, const char *trace, EmBuilderPage *self) {
  (void)state;
  (void)trace;
  em_builder_fill_profile(self);
}

/* ---- actions -------------------------------------------------------------------- */

static char *unique_name(EmBuilderPage *self, const char *type) {
  char *base = g_ascii_strdown(type, -1);
  for (int k = 1;; k++) {
    char *cand = g_strdup_printf("%s%d", base, k);
    gboolean taken = FALSE;
    for (int i = 0; i < em_builder_n_nodes(self) && !taken; i++) taken = !g_strcmp0(em_builder_node_name(self, i), cand);
    if (!taken) {
      g_free(base);
      return cand;
    }
    g_free(cand);
  }
}

void em_builder_add_layer(EmBuilderPage *self, const char *type_name) {
  const em_layer_type *type = em_layer_type_find(type_name);
  if (!type) return;
  json_t *node = json_object();
  char *name = unique_name(self, type_name);
  json_object_set_new(node, "name", json_string(name));
  g_free(name);
  json_object_set_new(node, "type", json_string(type_name));
  for (int a = 0; a < type->n_attrs; a++) { /* required fields get a starting value */
    const em_attr_desc *d = &type->attrs[a];
    if (!d->required) continue;
    if (d->kind == EM_ATTR_CHOICE) {
      char buf[64];
      json_object_set_new(node, d->name,
                          json_string(em_attr_choice_name(d->choices, (int)d->def, buf, sizeof buf)));
      continue;
    }
    double v = d->def != 0 ? d->def : strstr(d->name, "kernel") ? 3 : d->kind == EM_ATTR_FLOAT ? 0.5 : 16;
    if (v < d->min) v = d->min;
    if (v > d->max) v = d->max;
    json_object_set_new(node, d->name, d->kind == EM_ATTR_FLOAT ? json_real(v)
                                       : d->kind == EM_ATTR_BOOL ? json_boolean(v != 0)
                                                                 : json_integer((json_int_t)v));
  }
  int at = self->selected >= 0 ? self->selected + 1 : em_builder_n_nodes(self);
  json_array_insert_new(em_builder_nodes(self), (size_t)at, node);
  if (type->max_inputs > 1 && at >= 2) { /* a merge: the two nodes before it */
    json_t *in = json_array();
    json_array_append_new(in, json_string(em_builder_node_name(self, at - 2)));
    json_array_append_new(in, json_string(em_builder_node_name(self, at - 1)));
    json_object_set_new(node, "inputs", in);
  }
  self->selected = at;
  em_builder_reparse(self);
  em_builder_refresh(self, TRUE);
  const char *nm = em_builder_node_name(self, at);
  if (self->state && nm) em_app_state_select_layer(self->state, nm);
}

static void act_add(GtkWidget *w, const char *name, GVariant *param) {
  (void)name;
  em_builder_add_layer(EM_BUILDER_PAGE(w), g_variant_get_string(param, NULL));
}

static void act_remove(GtkWidget *w, const char *name, GVariant *param) {
  (void)name;
  (void)param;
  EmBuilderPage *self = EM_BUILDER_PAGE(w);
  if (self->selected < 0) return;
  json_array_remove(em_builder_nodes(self), (size_t)self->selected);
  if (self->selected >= em_builder_n_nodes(self)) self->selected = em_builder_n_nodes(self) - 1;
  em_builder_reparse(self);
  em_builder_refresh(self, TRUE);
}

static void move(EmBuilderPage *self, int delta) {
  int i = self->selected, j = i + delta;
  if (i < 0 || j < 0 || j >= em_builder_n_nodes(self)) return;
  json_t *a = json_incref(em_builder_node_at(self, i));
  json_array_remove(em_builder_nodes(self), (size_t)i);
  json_array_insert_new(em_builder_nodes(self), (size_t)j, a);
  self->selected = j;
  em_builder_reparse(self);
  em_builder_refresh(self, TRUE);
}

static void act_up(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  move(EM_BUILDER_PAGE(w), -1);
}
static void act_down(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  move(EM_BUILDER_PAGE(w), 1);
}

/* ---- class ------------------------------------------------------------------------- */

static void on_batch_changed(GtkSpinButton *b, EmBuilderPage *self) {
  (void)b;
  fill_totals(self);
}

/* Plugins may register layer types after the page was made. */
static void em_builder_page_map(GtkWidget *w) {
  GTK_WIDGET_CLASS(em_builder_page_parent_class)->map(w);
  EmBuilderPage *self = EM_BUILDER_PAGE(w);
  if (em_layer_type_count() != self->palette_types) em_builder_fill_palette(self);
}

static void em_builder_page_dispose(GObject *obj) {
  EmBuilderPage *self = EM_BUILDER_PAGE(obj);
  self->disposed = TRUE;
  if (self->profile_cancel) g_cancellable_cancel(self->profile_cancel);
  g_clear_object(&self->profile_cancel);
  if (self->chooser) gtk_native_dialog_destroy(GTK_NATIVE_DIALOG(self->chooser));
  g_clear_object(&self->chooser);
  em_builder_doc_after_save(self, FALSE); /* a Save As still open: nothing goes on */
  g_clear_object(&self->state);
  gtk_widget_dispose_template(GTK_WIDGET(obj), EM_TYPE_BUILDER_PAGE);
  G_OBJECT_CLASS(em_builder_page_parent_class)->dispose(obj);
}

static void em_builder_page_finalize(GObject *obj) {
  EmBuilderPage *self = EM_BUILDER_PAGE(obj);
  json_decref(self->doc);
  g_clear_pointer(&self->spec, em_spec_free);
  g_clear_pointer(&self->prefix, em_spec_free);
  g_free(self->path);
  g_free(self->original);
  g_free(self->error);
  g_free(self->error_node);
  g_free(self->published);
  g_strfreev(self->zoo_paths);
  em_model_doc_free(self->mdoc);
  g_free(self->recovery_file);
  G_OBJECT_CLASS(em_builder_page_parent_class)->finalize(obj);
}

static void em_builder_page_class_init(EmBuilderPageClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  oc->dispose = em_builder_page_dispose;
  oc->finalize = em_builder_page_finalize;
  wc->map = em_builder_page_map;
  gtk_widget_class_set_template_from_resource(wc, "/org/ember/Workbench/builder/em-builder-page.ui");
  gtk_widget_class_bind_template_child(wc, EmBuilderPage, palette_list);
  gtk_widget_class_bind_template_child(wc, EmBuilderPage, node_list);
  gtk_widget_class_bind_template_child(wc, EmBuilderPage, zoo_dropdown);
  gtk_widget_class_bind_template_child(wc, EmBuilderPage, title_label);
  gtk_widget_class_bind_template_child(wc, EmBuilderPage, totals_label);
  gtk_widget_class_bind_template_child(wc, EmBuilderPage, estimate_label);
  gtk_widget_class_bind_template_child(wc, EmBuilderPage, profile_label);
  gtk_widget_class_bind_template_child(wc, EmBuilderPage, header_box);
  gtk_widget_class_bind_template_child(wc, EmBuilderPage, inputs_box);
  gtk_widget_class_bind_template_child(wc, EmBuilderPage, props_grid);
  gtk_widget_class_bind_template_child(wc, EmBuilderPage, batch_spin);
  gtk_widget_class_install_action(wc, "builder.add", "s", act_add);
  gtk_widget_class_install_action(wc, "builder.remove", NULL, act_remove);
  gtk_widget_class_install_action(wc, "builder.move-up", NULL, act_up);
  gtk_widget_class_install_action(wc, "builder.move-down", NULL, act_down);
  gtk_widget_class_install_action(wc, "builder.open", NULL, em_builder_act_open);
  gtk_widget_class_install_action(wc, "builder.save", NULL, em_builder_act_save);
  gtk_widget_class_install_action(wc, "builder.save-as", NULL, em_builder_act_save_as);
  gtk_widget_class_install_action(wc, "builder.undo", NULL, em_builder_act_undo);
  gtk_widget_class_install_action(wc, "builder.redo", NULL, em_builder_act_redo);
  gtk_widget_class_add_binding_action(wc, GDK_KEY_s, GDK_CONTROL_MASK, "builder.save", NULL);
  gtk_widget_class_add_binding_action(wc, GDK_KEY_s, GDK_CONTROL_MASK | GDK_SHIFT_MASK,
                                      "builder.save-as", NULL);
  gtk_widget_class_add_binding_action(wc, GDK_KEY_z, GDK_CONTROL_MASK, "builder.undo", NULL);
  gtk_widget_class_add_binding_action(wc, GDK_KEY_z, GDK_CONTROL_MASK | GDK_SHIFT_MASK,
                                      "builder.redo", NULL);
  gtk_widget_class_add_binding_action(wc, GDK_KEY_y, GDK_CONTROL_MASK, "builder.redo", NULL);
  gtk_widget_class_add_binding_action(wc, GDK_KEY_Delete, 0, "builder.remove", NULL);
  gtk_widget_class_add_binding_action(wc, GDK_KEY_Up, GDK_ALT_MASK, "builder.move-up", NULL);
  gtk_widget_class_add_binding_action(wc, GDK_KEY_Down, GDK_ALT_MASK, "builder.move-down", NULL);
}

static void em_builder_page_init(EmBuilderPage *self) {
  gtk_widget_init_template(GTK_WIDGET(self));
  em_wheel_guard_all(GTK_WIDGET(self)); /* the wheel scrolls the page */
  self->selected = -1;
  self->doc = json_loads(default_spec, 0, NULL);
  gtk_widget_set_name(GTK_WIDGET(self->title_label), "builder-title");
  self->mdoc = em_model_doc_new(NULL);
  em_builder_doc_loaded(self);
  /* the centre column (the toolbar holds the title) */
  em_builder_doc_offer_recovery(
      self, GTK_BOX(gtk_widget_get_parent(gtk_widget_get_parent(GTK_WIDGET(self->title_label)))));
  build_header(self);
  em_builder_fill_palette(self);
  em_builder_fill_zoo(self);
  g_signal_connect_object(self->palette_list, "row-activated", G_CALLBACK(em_builder_on_palette_activated),
                          self, 0);
  g_signal_connect_object(self->node_list, "row-selected", G_CALLBACK(on_row_selected), self, 0);
  g_signal_connect_object(self->zoo_dropdown, "notify::selected", G_CALLBACK(em_builder_on_zoo_selected),
                          self, 0);
  g_signal_connect_object(self->batch_spin, "value-changed", G_CALLBACK(on_batch_changed), self, 0);
}

GtkWidget *em_builder_page_new(EmAppState *state) {
  EmBuilderPage *self = g_object_new(EM_TYPE_BUILDER_PAGE, NULL);
  self->state = state ? g_object_ref(state) : NULL;
  if (state) {
    g_signal_connect_object(state, "layer-selected", G_CALLBACK(on_layer_selected), self, 0);
    g_signal_connect_object(state, "profile-ready", G_CALLBACK(on_profile_ready), self, 0);
    g_signal_connect_object(state, "spec-changed", G_CALLBACK(on_spec_changed), self, 0);
  }
  const char *json = state ? em_app_state_get_spec_json(state) : NULL;
  json_t *doc = json ? json_loads(json, 0, NULL) : NULL;
  if (json_is_object(doc)) {
    json_decref(self->doc);
    self->doc = doc;
    self->original = g_strdup(json);
    const char *p = em_app_state_get_spec_path(state);
    self->path = p ? g_strdup(p) : NULL;
  } else {
    json_decref(doc);
  }
  em_builder_doc_loaded(self);
  em_builder_reparse(self);
  em_builder_refresh(self, TRUE);
  return GTK_WIDGET(self);
}
