/* em-sweeps-page.c: see the header. The GObject, its template, the
 * once-a-second read while the page is shown, the accessors, and the two
 * actions on the registry (Compare, Register best). The view is
 * em-sweeps-view.c, the reads em-sweeps-read.c, the form and the
 * runner's commands em-sweeps-start.c. */
#include "em-sweeps-page-private.h"

#include <math.h>
#include <string.h>

#include "em-store.h"
#include "em-text-row.h"
#include "em-wheel-guard.h"

G_DEFINE_FINAL_TYPE(EmSweepsPage, em_sweeps_page, GTK_TYPE_BOX)

static gboolean tick(gpointer data) {
  EmSweepsPage *self = data;
  if (gtk_widget_get_mapped(GTK_WIDGET(self))) em_sweeps_page_read_now_(self);
  return G_SOURCE_CONTINUE;
}

/* ---- compare, register --------------------------------------------------------------- */

static EmComparePage *find_compare(GtkWidget *w) {
  if (EM_IS_COMPARE_PAGE(w)) return g_object_ref(EM_COMPARE_PAGE(w));
  for (GtkWidget *c = gtk_widget_get_first_child(w); c; c = gtk_widget_get_next_sibling(c)) {
    EmComparePage *hit = find_compare(c);
    if (hit) return hit;
  }
  return NULL;
}

void em_sweeps_page_compare_selected(EmSweepsPage *self) {
  g_return_if_fail(EM_IS_SWEEPS_PAGE(self));
  GtkBitset *bits = gtk_selection_model_get_selection(GTK_SELECTION_MODEL(self->selection));
  GArray *ids = g_array_new(FALSE, FALSE, sizeof(gint64));
  GListModel *m = G_LIST_MODEL(self->selection);
  for (guint i = 0; i < g_list_model_get_n_items(m); i++) {
    if (!gtk_bitset_contains(bits, i)) continue;
    EmTextRow *r = g_list_model_get_item(m, i);
    gint64 number = em_text_row_get_id(r);
    g_object_unref(r);
    gint64 run = number >= 0 && (guint)number < self->runs->len
                     ? g_array_index(self->runs, gint64, number) : 0;
    if (run) g_array_append_val(ids, run);
  }
  gtk_bitset_unref(bits);
  if (ids->len == 0) {
    em_sweeps_page_set_status_(self, "The selected trials have no runs yet.");
  } else {
    EmComparePage *compare = g_weak_ref_get(&self->compare);
    if (!compare) {
      GtkWidget *stack = gtk_widget_get_ancestor(GTK_WIDGET(self), GTK_TYPE_STACK);
      GtkWidget *page = stack ? gtk_stack_get_child_by_name(GTK_STACK(stack), "compare") : NULL;
      compare = page ? find_compare(page) : NULL;
    }
    if (compare) {
      em_compare_page_set_runs(compare, (const gint64 *)(void *)ids->data, (int)ids->len);
      g_object_unref(compare);
    }
    gtk_widget_activate_action(GTK_WIDGET(self), "win.page", "s", "compare");
  }
  g_array_unref(ids);
}

/* The best trial's run, its best checkpoint, as a new version of its
 * model (the run's model name), with the drift reference the server
 * judges live inputs against (as the Registry page registers). */
gboolean em_sweeps_page_register_best(EmSweepsPage *self) {
  g_return_val_if_fail(EM_IS_SWEEPS_PAGE(self), FALSE);
  EmSweepSnapshot *s = self->snap;
  if (!s || s->best < 0 || !s->trials[s->best].run) {
    em_sweeps_page_set_status_(self, "No trial has completed with a metric yet.");
    return FALSE;
  }
  gint64 run_id = s->trials[s->best].run;
  int number = s->trials[s->best].number;
  em_error err = {0}, rerr = {0};
  em_store *st = em_store_open(em_app_state_get_registry_dir(self->state), false, &err);
  em_run run = {0};
  int version = 0;
  char *name = NULL;
  gboolean ok = st && em_store_run_get(st, run_id, &run, &err) == EM_OK;
  if (ok) {
    name = g_strdup(run.model && em_store_check_name("model", run.model, NULL) == EM_OK
                        ? run.model : "sweep-best");
    ok = em_store_model_register(st, run_id, name, EM_PICK_BEST, 0, &version, &err) == EM_OK;
  }
  gboolean no_ref = ok && em_store_version_build_reference(st, name, version,
                                                           EM_DRIFT_REFERENCE_SAMPLES,
                                                           &rerr) != EM_OK;
  em_run_clear(&run);
  em_store_close(st);
  char *m = ok ? g_strdup_printf("Registered trial %d's run %" G_GINT64_FORMAT " (best checkpoint)"
                                 " as %s v%d%s%s.", number, run_id, name, version,
                                 no_ref ? "; no drift reference: " : "", no_ref ? rerr.msg : "")
               : g_strdup_printf("Could not register trial %d's run: %s", number, err.msg);
  em_sweeps_page_set_status_(self, m);
  g_free(m);
  g_free(name);
  em_app_state_registry_changed(self->state);
  return ok;
}

/* ---- accessors ------------------------------------------------------------------------ */

void em_sweeps_page_set_compare_page(EmSweepsPage *self, EmComparePage *compare) {
  g_return_if_fail(EM_IS_SWEEPS_PAGE(self));
  g_weak_ref_set(&self->compare, compare);
}

gint64 em_sweeps_page_get_sweep(EmSweepsPage *self) { return self->snap ? self->snap->sweep : 0; }

void em_sweeps_page_select_sweep(EmSweepsPage *self, gint64 id) {
  g_return_if_fail(EM_IS_SWEEPS_PAGE(self));
  g_clear_pointer(&self->want_name, g_free);
  self->sweep = id;
  em_sweeps_page_read_now_(self);
}

int em_sweeps_page_get_sweep_status(EmSweepsPage *self) {
  EmSweepSnapshot *s = self->snap;
  return s && s->sweep_index >= 0 ? (int)s->sweeps[s->sweep_index].status : -1;
}

gboolean em_sweeps_page_get_runner_alive(EmSweepsPage *self) {
  return self->snap && self->snap->runner_alive;
}

guint em_sweeps_page_get_n_sweeps(EmSweepsPage *self) {
  return self->snap ? (guint)self->snap->n_sweeps : 0;
}

int em_sweeps_page_get_n_updates(EmSweepsPage *self) { return self->n_updates; }

guint em_sweeps_page_get_n_trials(EmSweepsPage *self) {
  return g_list_model_get_n_items(G_LIST_MODEL(self->trial_rows));
}

guint em_sweeps_page_get_n_shown(EmSweepsPage *self) {
  return g_list_model_get_n_items(G_LIST_MODEL(self->selection));
}

char *em_sweeps_page_dup_row_text(EmSweepsPage *self, guint i) {
  EmTextRow *r = g_list_model_get_item(G_LIST_MODEL(self->selection), i);
  if (!r) return NULL;
  GString *s = g_string_new(NULL);
  for (int c = 0; c < self->n_cols; c++)
    g_string_append_printf(s, "%s%s", c ? " | " : "", em_text_row_get_cell(r, c));
  g_object_unref(r);
  return g_string_free(s, FALSE);
}

void em_sweeps_page_select_trials(EmSweepsPage *self, const int *numbers, int n) {
  GListModel *m = G_LIST_MODEL(self->selection);
  guint len = g_list_model_get_n_items(m);
  GtkBitset *want = gtk_bitset_new_empty();
  for (guint i = 0; i < len; i++) {
    EmTextRow *r = g_list_model_get_item(m, i);
    for (int k = 0; k < n; k++)
      if (em_text_row_get_id(r) == numbers[k]) gtk_bitset_add(want, i);
    g_object_unref(r);
  }
  GtkBitset *mask = gtk_bitset_new_range(0, len);
  gtk_selection_model_set_selection(GTK_SELECTION_MODEL(self->selection), want, mask);
  gtk_bitset_unref(want);
  gtk_bitset_unref(mask);
  em_sweeps_page_update_buttons_(self);
}

int em_sweeps_page_get_best_trial(EmSweepsPage *self) {
  EmSweepSnapshot *s = self->snap;
  return s && s->best >= 0 ? s->trials[s->best].number : -1;
}

GtkWidget *em_sweeps_page_get_best_chart(EmSweepsPage *self) { return GTK_WIDGET(self->best_chart); }
GtkWidget *em_sweeps_page_get_parallel_coords(EmSweepsPage *self) { return GTK_WIDGET(self->pc); }

int em_sweeps_page_get_n_importances(EmSweepsPage *self) {
  return self->snap && self->snap->have_desc ? self->snap->d.n_params : 0;
}

double em_sweeps_page_get_importance(EmSweepsPage *self, int i, const char **name) {
  if (i < 0 || i >= em_sweeps_page_get_n_importances(self)) return NAN;
  if (name) *name = self->snap->d.p[i].path;
  return self->snap->eta2[i];
}

const char *em_sweeps_page_get_importance_note(EmSweepsPage *self) {
  return gtk_label_get_text(self->importance_note);
}
const char *em_sweeps_page_get_status(EmSweepsPage *self) {
  return gtk_label_get_text(self->status_label);
}
const char *em_sweeps_page_get_form_message(EmSweepsPage *self) {
  return gtk_label_get_text(self->form_message);
}

void em_sweeps_page_show_form(EmSweepsPage *self, gboolean shown) {
  gtk_toggle_button_set_active(self->new_toggle, shown);
}

/* ---- signals ---------------------------------------------------------------------------- */

static void on_sweep_chosen(GtkDropDown *d, GParamSpec *ps, EmSweepsPage *self) {
  (void)ps;
  guint i = gtk_drop_down_get_selected(d);
  EmSweepSnapshot *s = self->snap;
  if (self->filling_list || !s || i == GTK_INVALID_LIST_POSITION || i >= (guint)s->n_sweeps) return;
  gint64 id = s->sweeps[s->n_sweeps - 1 - i].id; /* the list is newest first */
  if (id != self->sweep) em_sweeps_page_select_sweep(self, id);
}

static void on_clicked(GtkButton *b, EmSweepsPage *self) {
  if (b == self->start_button) em_sweeps_page_start(self);
  else if (b == self->pause_button) em_sweeps_page_pause(self);
  else if (b == self->cancel_button) em_sweeps_page_cancel(self);
  else if (b == self->resume_button) em_sweeps_page_resume(self);
  else if (b == self->compare_button) em_sweeps_page_compare_selected(self);
  else if (b == self->register_button) em_sweeps_page_register_best(self);
}

static void on_map(GtkWidget *w, gpointer data) {
  (void)data;
  EmSweepsPage *self = EM_SWEEPS_PAGE(w);
  em_sweeps_page_refresh_base_(self);
  em_sweeps_page_read_now_(self);
}

static void on_state_changed(EmAppState *st, EmSweepsPage *self) {
  (void)st;
  em_sweeps_page_refresh_base_(self);
}

/* The sweeps' list: the button's label ellipsized (a long name must not
 * widen the page), the popup's whole. */
static void name_setup(GtkSignalListItemFactory *f, GtkListItem *item, gpointer data) {
  (void)f;
  GtkWidget *l = gtk_label_new(NULL);
  gtk_label_set_xalign(GTK_LABEL(l), 0);
  if (data) gtk_label_set_ellipsize(GTK_LABEL(l), PANGO_ELLIPSIZE_MIDDLE);
  gtk_list_item_set_child(item, l);
}

static void name_bind(GtkSignalListItemFactory *f, GtkListItem *item, gpointer data) {
  (void)f;
  (void)data;
  GtkStringObject *o = gtk_list_item_get_item(item);
  gtk_label_set_text(GTK_LABEL(gtk_list_item_get_child(item)), gtk_string_object_get_string(o));
}

static GtkListItemFactory *name_factory(gboolean ellipsize) {
  GtkListItemFactory *f = gtk_signal_list_item_factory_new();
  g_signal_connect(f, "setup", G_CALLBACK(name_setup), GINT_TO_POINTER(ellipsize));
  g_signal_connect(f, "bind", G_CALLBACK(name_bind), NULL);
  return f;
}

/* ---- the GObject ------------------------------------------------------------------------- */

static void em_sweeps_page_dispose(GObject *obj) {
  EmSweepsPage *self = EM_SWEEPS_PAGE(obj);
  g_clear_handle_id(&self->tick, g_source_remove);
  if (self->cancel) g_cancellable_cancel(self->cancel);
  g_clear_object(&self->proc); /* the runner goes on without the page */
  g_clear_object(&self->cancel);
  g_clear_object(&self->state);
  g_clear_object(&self->selection);
  g_clear_object(&self->filter);
  g_clear_object(&self->trial_rows);
  gtk_widget_dispose_template(GTK_WIDGET(obj), EM_TYPE_SWEEPS_PAGE);
  G_OBJECT_CLASS(em_sweeps_page_parent_class)->dispose(obj);
}

static void em_sweeps_page_finalize(GObject *obj) {
  EmSweepsPage *self = EM_SWEEPS_PAGE(obj);
  em_sweep_snapshot_free(self->snap);
  g_weak_ref_clear(&self->compare);
  g_array_unref(self->runs);
  g_free(self->want_name);
  g_free(self->digest);
  g_free(self->sweeps_digest);
  g_free(self->metric);
  g_free(self->columns_key);
  g_free(self->proc_log);
  G_OBJECT_CLASS(em_sweeps_page_parent_class)->finalize(obj);
}

#define BIND(name) gtk_widget_class_bind_template_child(wc, EmSweepsPage, name)

static void em_sweeps_page_class_init(EmSweepsPageClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  oc->dispose = em_sweeps_page_dispose;
  oc->finalize = em_sweeps_page_finalize;
  gtk_widget_class_set_template_from_resource(wc, "/org/ember/Workbench/sweeps/em-sweeps-page.ui");
  BIND(sweep_drop);
  BIND(new_toggle);
  BIND(pause_button);
  BIND(cancel_button);
  BIND(resume_button);
  BIND(compare_button);
  BIND(register_button);
  BIND(status_label);
  BIND(base_label);
  BIND(form_message);
  BIND(importance_note);
  BIND(form_revealer);
  BIND(params_grid);
  BIND(importance_grid);
  BIND(sampler_drop);
  BIND(direction_drop);
  BIND(pruner_drop);
  BIND(metric_entry);
  BIND(trials_spin);
  BIND(parallel_spin);
  BIND(limit_spin);
  BIND(epochs_spin);
  BIND(start_button);
  BIND(pc_frame);
  BIND(best_frame);
  BIND(side);
  BIND(trials_view);
}

static void em_sweeps_page_init(EmSweepsPage *self) {
  gtk_widget_init_template(GTK_WIDGET(self));
  g_weak_ref_init(&self->compare, NULL);
  self->runs = g_array_new(FALSE, TRUE, sizeof(gint64));
  self->cancel = g_cancellable_new();
  self->sweep_names = GTK_STRING_LIST(gtk_drop_down_get_model(self->sweep_drop));
  GtkListItemFactory *button = name_factory(TRUE), *list = name_factory(FALSE);
  gtk_drop_down_set_factory(self->sweep_drop, button);
  gtk_drop_down_set_list_factory(self->sweep_drop, list);
  g_object_unref(button);
  g_object_unref(list);
  em_sweeps_page_build_view_(self);
  em_sweeps_page_build_form_(self);
  em_wheel_guard_all(GTK_WIDGET(self));
  g_object_bind_property(self->new_toggle, "active", self->form_revealer, "reveal-child",
                         G_BINDING_SYNC_CREATE);
  /* the form takes the side column's place: the page fits a 1024-pixel screen */
  g_object_bind_property(self->new_toggle, "active", self->side, "visible",
                         G_BINDING_SYNC_CREATE | G_BINDING_INVERT_BOOLEAN);
  GtkButton *buttons[] = {self->start_button, self->pause_button, self->cancel_button,
                          self->resume_button, self->compare_button, self->register_button};
  for (guint i = 0; i < G_N_ELEMENTS(buttons); i++)
    g_signal_connect_object(buttons[i], "clicked", G_CALLBACK(on_clicked), self, 0);
  g_signal_connect_object(self->sweep_drop, "notify::selected", G_CALLBACK(on_sweep_chosen), self,
                          0);
  g_signal_connect(self, "map", G_CALLBACK(on_map), NULL);
  em_sweeps_page_update_buttons_(self);
  self->tick = g_timeout_add(1000, tick, self);
}

GtkWidget *em_sweeps_page_new(EmAppState *state) {
  EmSweepsPage *self = g_object_new(EM_TYPE_SWEEPS_PAGE, NULL);
  self->state = state ? g_object_ref(state) : NULL;
  if (state) {
    g_signal_connect_object(state, "spec-changed", G_CALLBACK(on_state_changed), self, 0);
    g_signal_connect_object(state, "dataset-changed", G_CALLBACK(on_state_changed), self, 0);
  }
  em_sweeps_page_refresh_base_(self);
  return GTK_WIDGET(self);
}
