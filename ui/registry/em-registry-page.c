/* em-registry-page.c: see the header. Reads through a read-only em_store
 * kept by the page; each change (register, promote, roll back) opens a
 * writable one for that change, then announces "registry-changed". */
#include "em-registry-page.h"

#include "em-run-row.h"

#include <math.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "em-store.h"

#ifndef EMBER_VERSION
#define EMBER_VERSION "unknown"
#endif
#include "em-text-row.h"

struct _EmRegistryPage {
  GtkBox parent_instance;
  GtkLabel *message_label, *versions_label;
  GtkDropDown *run_dropdown, *pick_dropdown;
  gboolean filling_runs;  /* load_runs sets the run: not the person's choice */
  gboolean run_chosen;    /* the person chose the run to register: kept */
  gint64 confirm_run;     /* a different architecture, said once: the next */
  char *confirm_name;     /* Register of the same run and name goes ahead */
  GtkEntry *name_entry, *alias_entry;
  GtkColumnView *models_view, *versions_view, *history_view;
  GtkWidget *export_button;

  EmAppState *state;
  em_store *store;
  GListStore *models, *versions, *history; /* EmTextRow */
  GtkSingleSelection *models_sel, *versions_sel;
  GtkStringList *run_names;
  GArray *run_ids; /* gint64, parallel to run_names */
  char *model;     /* the model shown */
  char *message;
};

G_DEFINE_FINAL_TYPE(EmRegistryPage, em_registry_page, GTK_TYPE_BOX)

static void set_message(EmRegistryPage *self, const char *msg, gboolean error) {
  g_free(self->message);
  self->message = g_strdup(msg ? msg : "");
  gtk_label_set_text(self->message_label, self->message);
  gtk_widget_set_visible(GTK_WIDGET(self->message_label), *self->message != 0);
  if (error) gtk_widget_add_css_class(GTK_WIDGET(self->message_label), "error");
  else gtk_widget_remove_css_class(GTK_WIDGET(self->message_label), "error");
}

static char *format_time(double t) {
  time_t s = (time_t)t;
  struct tm tm;
  char buf[64] = "";
  if (localtime_r(&s, &tm)) strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return g_strdup(buf);
}

/* "test_accuracy 0.5167, test_loss 1.323" from a version's metrics JSON. */
static char *metrics_text(const char *json) {
  json_t *root = json ? json_loads(json, 0, NULL) : NULL;
  if (!root) return g_strdup(json ? json : "");
  json_t *flat = json_object();
  em_json_flatten(root, "", flat);
  GString *out = g_string_new(NULL);
  const char *k;
  json_t *v;
  for (int pass = 0; pass < 2; pass++) /* the test metrics first */
    json_object_foreach(flat, k, v) {
      if (!json_is_number(v) || (strstr(k, "test_") != NULL) != (pass == 0)) continue;
      g_string_append_printf(out, "%s%s %.4g", out->len ? ", " : "", k, json_number_value(v));
    }
  json_decref(flat);
  json_decref(root);
  return g_string_free(out, FALSE);
}

/* ---- tables --------------------------------------------------------------- */

static void cell_setup(GtkSignalListItemFactory *f, GtkListItem *item, gpointer data) {
  (void)f;
  (void)data;
  GtkWidget *label = gtk_label_new(NULL);
  gtk_label_set_xalign(GTK_LABEL(label), 0);
  gtk_label_set_ellipsize(GTK_LABEL(label), PANGO_ELLIPSIZE_END);
  gtk_list_item_set_child(item, label);
}

static void cell_bind(GtkSignalListItemFactory *f, GtkListItem *item, gpointer data) {
  (void)f;
  const char *text = em_text_row_get_cell(gtk_list_item_get_item(item), GPOINTER_TO_INT(data));
  gtk_label_set_text(GTK_LABEL(gtk_list_item_get_child(item)), text);
  gtk_widget_set_tooltip_text(gtk_list_item_get_child(item), *text ? text : NULL);
}

static void add_columns(GtkColumnView *view, const char *const *titles, int expand_col) {
  for (int i = 0; titles[i]; i++) {
    GtkListItemFactory *f = gtk_signal_list_item_factory_new();
    g_signal_connect(f, "setup", G_CALLBACK(cell_setup), NULL);
    g_signal_connect(f, "bind", G_CALLBACK(cell_bind), GINT_TO_POINTER(i));
    GtkColumnViewColumn *c = gtk_column_view_column_new(titles[i], f);
    gtk_column_view_column_set_resizable(c, TRUE);
    gtk_column_view_column_set_expand(c, i == expand_col);
    gtk_column_view_append_column(view, c);
    g_object_unref(c);
  }
}

static void replace_rows(GListStore *store, GPtrArray *rows) {
  g_list_store_splice(store, 0, g_list_model_get_n_items(G_LIST_MODEL(store)), rows->pdata, rows->len);
}

/* ---- loading -------------------------------------------------------------- */

static gboolean ensure_store(EmRegistryPage *self) {
  if (self->store) return TRUE;
  em_error err = {0};
  self->store = em_store_open(em_app_state_get_registry_dir(self->state), true, &err);
  if (!self->store) {
    char *m = g_strdup_printf("The registry cannot be read yet: %s", err.msg);
    set_message(self, m, TRUE);
    g_free(m);
  }
  return self->store != NULL;
}

static void load_model(EmRegistryPage *self) {
  GPtrArray *vrows = g_ptr_array_new_with_free_func(g_object_unref);
  GPtrArray *hrows = g_ptr_array_new_with_free_func(g_object_unref);
  if (self->model && self->store) {
    em_error err = {0};
    em_version_row *v = NULL;
    int nv = 0;
    if (em_store_model_versions(self->store, self->model, &v, &nv, &err) == EM_OK) {
      for (int i = nv - 1; i >= 0; i--) { /* newest first */
        char **cells = g_new0(char *, 6);
        cells[0] = g_strdup_printf("v%d", v[i].version);
        cells[1] = g_strdup_printf("run %" G_GINT64_FORMAT, (gint64)v[i].run);
        cells[2] = g_strdup(v[i].aliases ? v[i].aliases : "");
        cells[3] = metrics_text(v[i].metrics_json);
        cells[4] = format_time(v[i].created);
        g_ptr_array_add(vrows, em_text_row_new(v[i].version, cells));
      }
      em_version_rows_free(v, nv);
    } else {
      set_message(self, err.msg, TRUE);
    }
    em_audit_row *a = NULL;
    int na = 0;
    if (em_store_model_history(self->store, self->model, &a, &na, &err) == EM_OK) {
      for (int i = na - 1; i >= 0; i--) {
        char **cells = g_new0(char *, 6);
        cells[0] = format_time(a[i].time);
        cells[1] = a[i].detail && a[i].detail[0]
                       ? g_strdup_printf("%s %s: %s", a[i].action, a[i].alias, a[i].detail)
                       : g_strdup_printf("%s %s", a[i].action, a[i].alias);
        cells[2] = a[i].from_version ? g_strdup_printf("v%d", a[i].from_version) : g_strdup("(unset)");
        cells[3] = g_strdup_printf("v%d", a[i].to_version);
        cells[4] = g_strdup_printf("%s@%s", a[i].user ? a[i].user : "?", a[i].host ? a[i].host : "?");
        g_ptr_array_add(hrows, em_text_row_new(a[i].id, cells));
      }
      em_audit_rows_free(a, na);
    }
  }
  replace_rows(self->versions, vrows);
  replace_rows(self->history, hrows);
  g_ptr_array_unref(vrows);
  g_ptr_array_unref(hrows);
  char *t = self->model ? g_strdup_printf("Versions of %s", self->model) : g_strdup("Versions");
  gtk_label_set_text(self->versions_label, t);
  g_free(t);
}

/* The "Register run" choice from a list of the registry's runs (newest
 * first). */
static void fill_runs(EmRegistryPage *self, em_run *runs, int n) {
  guint sel = gtk_drop_down_get_selected(self->run_dropdown);
  gint64 keep = sel != GTK_INVALID_LIST_POSITION && sel < self->run_ids->len
                    ? g_array_index(self->run_ids, gint64, sel) : 0;
  char **names = g_new0(char *, n + 1);
  g_array_set_size(self->run_ids, 0);
  /* the person's choice while it is listed, else the newest finished run
   * (the list is newest first; a stopped or failed run has no final
   * metrics to register by), else the newest */
  guint pick = 0, newest_done = G_MAXUINT;
  gboolean kept = FALSE;
  for (int i = 0; i < n; i++) {
    char acc[64] = "", value[32];
    em_run_row_format_metric(runs[i].final_test_accuracy, TRUE, value, sizeof value);
    if (value[0]) g_snprintf(acc, sizeof acc, ", accuracy %s", value);
    names[i] = g_strdup_printf("run %" G_GINT64_FORMAT " %s (%s%s)", (gint64)runs[i].id,
                               runs[i].model, em_run_status_name(runs[i].status), acc);
    gint64 id = runs[i].id;
    if (id == keep && self->run_chosen) {
      pick = (guint)i;
      kept = TRUE;
    }
    if (newest_done == G_MAXUINT && runs[i].status == EM_RUN_COMPLETED) newest_done = (guint)i;
    g_array_append_val(self->run_ids, id);
  }
  if (!kept) {
    self->run_chosen = FALSE;
    if (newest_done != G_MAXUINT) pick = newest_done;
  }
  self->filling_runs = TRUE;
  gtk_string_list_splice(self->run_names, 0, g_list_model_get_n_items(G_LIST_MODEL(self->run_names)),
                         (const char *const *)names);
  self->filling_runs = TRUE;
  gtk_drop_down_set_selected(self->run_dropdown, n ? pick : GTK_INVALID_LIST_POSITION);
  self->filling_runs = FALSE;
  g_strfreev(names);
}

static void load_runs(EmRegistryPage *self) {
  em_run_filter f = {.any_status = true};
  em_run *runs = NULL;
  int n = 0;
  em_error err = {0};
  if (em_store_runs_list(self->store, &f, &runs, &n, &err) != EM_OK) return;
  fill_runs(self, runs, n);
  em_runs_free(runs, n);
}

/* The run list on a worker thread (its own read-only connection: ten
 * thousand runs take 90 ms), filled in on the main thread. */
typedef struct {
  em_run *runs;
  int n;
} runs_list;

static void runs_list_free(gpointer p) {
  runs_list *l = p;
  if (!l) return;
  em_runs_free(l->runs, l->n);
  g_free(l);
}

static void runs_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel) {
  (void)source;
  (void)cancel;
  runs_list *l = g_new0(runs_list, 1);
  em_error err = {0};
  em_store *s = em_store_open(data, true, &err);
  em_run_filter f = {.any_status = true};
  if (!s || em_store_runs_list(s, &f, &l->runs, &l->n, &err) != EM_OK) l->n = 0;
  em_store_close(s);
  g_task_return_pointer(task, l, runs_list_free);
}

static void on_runs_read(GObject *source, GAsyncResult *res, gpointer data) {
  (void)data;
  EmRegistryPage *self = EM_REGISTRY_PAGE(source);
  runs_list *l = g_task_propagate_pointer(G_TASK(res), NULL);
  if (l && self->state) fill_runs(self, l->runs, l->n); /* state: NULL once disposed */
  runs_list_free(l);
}

static void load_runs_async(EmRegistryPage *self) {
  GTask *t = g_task_new(self, NULL, on_runs_read, NULL);
  g_task_set_task_data(t, g_strdup(em_app_state_get_registry_dir(self->state)), g_free);
  g_task_run_in_thread(t, runs_thread);
  g_object_unref(t);
}

static int selected_version(EmRegistryPage *self) {
  guint i = gtk_single_selection_get_selected(self->versions_sel);
  if (i == GTK_INVALID_LIST_POSITION) return 0;
  EmTextRow *r = g_list_model_get_item(G_LIST_MODEL(self->versions_sel), i);
  int v = r ? (int)em_text_row_get_id(r) : 0;
  g_clear_object(&r);
  return v;
}

static void reload_models(EmRegistryPage *self);

void em_registry_page_reload(EmRegistryPage *self) {
  g_return_if_fail(EM_IS_REGISTRY_PAGE(self));
  if (!ensure_store(self)) return;
  if (g_str_has_prefix(self->message, "The registry cannot be read")) set_message(self, "", FALSE);
  load_runs(self);
  reload_models(self);
}

/* The same, the run list read on the worker (registry-changed, and the
 * window's page when made): the models' few rows stay here. */
static void reload_async(EmRegistryPage *self) {
  if (!ensure_store(self)) return;
  if (g_str_has_prefix(self->message, "The registry cannot be read")) set_message(self, "", FALSE);
  load_runs_async(self);
  reload_models(self);
}

/* The models, the chosen one's versions and history. */
static void reload_models(EmRegistryPage *self) {
  em_model_row *m = NULL;
  int n = 0;
  em_error err = {0};
  if (em_store_models_list(self->store, &m, &n, &err) != EM_OK) {
    set_message(self, err.msg, TRUE);
    return;
  }
  char *keep = g_strdup(self->model);
  /* the selected version, chosen again at the end: replacing the model
   * rows passes through no selection, which emptied the versions, and the
   * newest was selected in their place (a second Promote then moved the
   * alias to a version nobody chose) */
  int keep_version = selected_version(self);
  GPtrArray *rows = g_ptr_array_new_with_free_func(g_object_unref);
  guint pick = GTK_INVALID_LIST_POSITION;
  for (int i = 0; i < n; i++) {
    char **cells = g_new0(char *, 4);
    cells[0] = g_strdup(m[i].name);
    cells[1] = g_strdup_printf("%d (latest v%d)", m[i].versions, m[i].latest);
    cells[2] = g_strdup(m[i].aliases ? m[i].aliases : "");
    if (keep && strcmp(keep, m[i].name) == 0) pick = (guint)i;
    g_ptr_array_add(rows, em_text_row_new(i, cells));
  }
  em_model_rows_free(m, n);
  replace_rows(self->models, rows);
  g_ptr_array_unref(rows);
  if (pick == GTK_INVALID_LIST_POSITION && n > 0) pick = 0;
  gtk_single_selection_set_selected(self->models_sel, pick);
  g_free(self->model);
  self->model = NULL;
  if (pick != GTK_INVALID_LIST_POSITION) {
    EmTextRow *r = g_list_model_get_item(G_LIST_MODEL(self->models_sel), pick);
    self->model = g_strdup(em_text_row_get_cell(r, 0));
    g_object_unref(r);
  }
  load_model(self);
  if (keep_version && g_strcmp0(keep, self->model) == 0)
    em_registry_page_select_version(self, keep_version);
  g_free(keep);
}

/* ---- changes -------------------------------------------------------------- */

static em_store *open_for_writing(EmRegistryPage *self) {
  em_error err = {0};
  em_store *s = em_store_open(em_app_state_get_registry_dir(self->state), false, &err);
  if (!s) set_message(self, err.msg, TRUE);
  return s;
}

/* Ends a change made through s: shows msg (taken; NULL: err's message as
 * an error), closes s and tells the other pages the registry changed. */
static void change_done(EmRegistryPage *self, em_store *s, char *msg, const em_error *err) {
  set_message(self, msg ? msg : err->msg, msg == NULL);
  g_free(msg);
  em_store_close(s);
  em_app_state_registry_changed(self->state);
}

gboolean em_registry_page_register(EmRegistryPage *self, gint64 run, gboolean best,
                                   const char *model) {
  g_return_val_if_fail(EM_IS_REGISTRY_PAGE(self), FALSE);
  em_store *s = open_for_writing(self);
  if (!s) return FALSE;
  em_error err = {0};
  char *name = g_strdup(model);
  if (!name || !*name) {
    em_run r = {0};
    if (em_store_run_get(s, run, &r, &err) == EM_OK) {
      g_free(name);
      name = g_strdup(r.model);
      em_run_clear(&r);
    }
  }
  /* another architecture under a name: said with both parameter counts,
   * and registered only when Register is pressed again */
  em_arch_diff d;
  gboolean confirmed = self->confirm_run == run && !g_strcmp0(self->confirm_name, name);
  if (name && *name && !confirmed && em_store_model_arch_diff(s, name, run, &d, NULL) == EM_OK &&
      d.differs) {
    char a[32], b[32];
    char *m = g_strdup_printf("Run %" G_GINT64_FORMAT "'s model is not the architecture of %s "
                              "v%d (%s parameters against %s). Press Register again to register "
                              "it as %s v%d all the same, or give it another name.",
                              run, name, d.latest_version,
                              em_format_count(d.run_params, a, sizeof a),
                              em_format_count(d.latest_params, b, sizeof b), name,
                              d.latest_version + 1);
    set_message(self, m, TRUE);
    g_free(m);
    self->confirm_run = run;
    g_free(self->confirm_name);
    self->confirm_name = g_strdup(name);
    em_store_close(s);
    g_free(name);
    return FALSE;
  }
  self->confirm_run = 0;
  g_clear_pointer(&self->confirm_name, g_free);
  int version = 0;
  gboolean ok = name && *name &&
                em_store_model_register(s, run, name, best ? EM_PICK_BEST : EM_PICK_LAST, 0,
                                        &version, &err) == EM_OK;
  em_error rerr = {0}; /* the drift reference the server judges live inputs against */
  gboolean no_ref = ok && em_store_version_build_reference(s, name, version,
                                                           EM_DRIFT_REFERENCE_SAMPLES,
                                                           &rerr) != EM_OK;
  em_store_close(s);
  if (ok) {
    char *m = g_strdup_printf("Registered run %" G_GINT64_FORMAT "'s %s checkpoint as %s v%d%s%s.",
                              run, best ? "best" : "last", name, version,
                              no_ref ? "; no drift reference: " : "", no_ref ? rerr.msg : "");
    g_free(self->model);
    self->model = g_strdup(name);
    em_app_state_registry_changed(self->state);
    /* what was just done is selected: Promote then promotes the new version */
    em_registry_page_reload(self);
    em_registry_page_select_model(self, name);
    em_registry_page_select_version(self, version);
    set_message(self, m, FALSE);
    g_free(m);
    g_free(name);
    return TRUE;
  } else {
    set_message(self, *err.msg ? err.msg : "Choose a run and a model name to register.", TRUE);
  }
  g_free(name);
  em_app_state_registry_changed(self->state);
  return ok;
}

static const char *alias_text(EmRegistryPage *self) {
  const char *a = gtk_editable_get_text(GTK_EDITABLE(self->alias_entry));
  return a && *a ? a : "production";
}

static void action_register(GtkWidget *w, const char *name, GVariant *p) {
  (void)name;
  (void)p;
  EmRegistryPage *self = EM_REGISTRY_PAGE(w);
  guint i = gtk_drop_down_get_selected(self->run_dropdown);
  if (i == GTK_INVALID_LIST_POSITION || i >= self->run_ids->len) {
    set_message(self, "Choose the run to register (train one first if the list is empty).", TRUE);
    return;
  }
  em_registry_page_register(self, g_array_index(self->run_ids, gint64, i),
                            gtk_drop_down_get_selected(self->pick_dropdown) == 0,
                            gtk_editable_get_text(GTK_EDITABLE(self->name_entry)));
}

static void action_promote(GtkWidget *w, const char *name, GVariant *p) {
  (void)name;
  (void)p;
  EmRegistryPage *self = EM_REGISTRY_PAGE(w);
  int v = selected_version(self);
  if (!self->model || v == 0) {
    set_message(self, "Select a model and one of its versions to promote.", TRUE);
    return;
  }
  em_store *s = open_for_writing(self);
  if (!s) return;
  em_error err = {0};
  char *alias = g_strdup(alias_text(self));
  /* the version the alias already points at: say nothing changed (the
   * store records nothing then), as `ember model promote` does */
  char *ref_text = g_strdup_printf("%s@%s", self->model, alias);
  em_version_ref ref;
  bool same = false;
  if (em_store_resolve_version(s, ref_text, &ref, NULL) == EM_OK) {
    same = ref.version == v;
    em_version_ref_clear(&ref);
  }
  g_free(ref_text);
  char *m = em_store_model_promote(s, self->model, v, alias, &err) != EM_OK ? NULL
            : same ? g_strdup_printf("%s: %s already points at v%d: nothing changed.",
                                     self->model, alias, v)
                   : g_strdup_printf("%s: %s now points at v%d.", self->model, alias, v);
  g_free(alias);
  change_done(self, s, m, &err);
}

static void action_rollback(GtkWidget *w, const char *name, GVariant *p) {
  (void)name;
  (void)p;
  EmRegistryPage *self = EM_REGISTRY_PAGE(w);
  if (!self->model) {
    set_message(self, "Select a model whose alias to roll back.", TRUE);
    return;
  }
  em_store *s = open_for_writing(self);
  if (!s) return;
  em_error err = {0};
  int v = 0;
  char *alias = g_strdup(alias_text(self));
  char *m = NULL;
  if (em_store_model_rollback(s, self->model, alias, &v, &err) == EM_OK)
    m = v ? g_strdup_printf("%s: %s rolled back to v%d.", self->model, alias, v)
          : g_strdup_printf("%s: %s rolled back (now unset).", self->model, alias);
  g_free(alias);
  change_done(self, s, m, &err);
}

static void action_export(GtkWidget *w, const char *name, GVariant *p) {
  (void)name;
  (void)p;
  EmRegistryPage *self = EM_REGISTRY_PAGE(w);
  int v = selected_version(self);
  if (!self->model || v == 0) {
    set_message(self, "Select a model and one of its versions to export.", TRUE);
    return;
  }
  em_store *s = open_for_writing(self);
  if (!s) return;
  em_error err = {0};
  char path[4096];
  int64_t art = 0;
  char *m = em_store_export_version(s, self->model, v, EM_QUANT_NONE, EMBER_VERSION, path,
                                    sizeof path, &art, &err) == EM_OK
                ? g_strdup_printf("Exported %s v%d to %s (artifact %" G_GINT64_FORMAT ").",
                                  self->model, v, path, art)
                : NULL;
  change_done(self, s, m, &err);
}

static void action_reload(GtkWidget *w, const char *name, GVariant *p) {
  (void)name;
  (void)p;
  set_message(EM_REGISTRY_PAGE(w), "", FALSE);
  em_registry_page_reload(EM_REGISTRY_PAGE(w));
}

/* ---- signals -------------------------------------------------------------- */

static void on_model_selected(GtkSingleSelection *sel, GParamSpec *pspec, gpointer data) {
  (void)pspec;
  EmRegistryPage *self = data;
  EmTextRow *r = gtk_single_selection_get_selected_item(sel);
  const char *name = r ? em_text_row_get_cell(r, 0) : NULL;
  if (g_strcmp0(name, self->model) == 0) return;
  g_free(self->model);
  self->model = g_strdup(name);
  load_model(self);
}

static void on_registry_changed(EmAppState *st, gpointer data) {
  (void)st;
  reload_async(data);
}

/* ---- GObject -------------------------------------------------------------- */

/* The person picked the run to register: kept across reloads. */
static void on_run_chosen(GtkDropDown *dd, GParamSpec *ps, EmRegistryPage *self) {
  (void)dd;
  (void)ps;
  if (!self->filling_runs) self->run_chosen = TRUE;
}

static void em_registry_page_dispose(GObject *object) {
  EmRegistryPage *self = EM_REGISTRY_PAGE(object);
  gtk_widget_dispose_template(GTK_WIDGET(self), EM_TYPE_REGISTRY_PAGE);
  g_clear_object(&self->models_sel);
  g_clear_object(&self->versions_sel);
  g_clear_object(&self->history);
  g_clear_object(&self->run_names);
  g_clear_object(&self->state);
  g_clear_pointer(&self->store, em_store_close);
  G_OBJECT_CLASS(em_registry_page_parent_class)->dispose(object);
}

static void em_registry_page_finalize(GObject *object) {
  EmRegistryPage *self = EM_REGISTRY_PAGE(object);
  g_array_unref(self->run_ids);
  g_free(self->model);
  g_free(self->message);
  g_free(self->confirm_name);
  G_OBJECT_CLASS(em_registry_page_parent_class)->finalize(object);
}

static void em_registry_page_class_init(EmRegistryPageClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  oc->dispose = em_registry_page_dispose;
  oc->finalize = em_registry_page_finalize;
  gtk_widget_class_set_template_from_resource(wc, "/org/ember/Workbench/registry/em-registry-page.ui");
  gtk_widget_class_bind_template_child(wc, EmRegistryPage, message_label);
  gtk_widget_class_bind_template_child(wc, EmRegistryPage, versions_label);
  gtk_widget_class_bind_template_child(wc, EmRegistryPage, run_dropdown);
  gtk_widget_class_bind_template_child(wc, EmRegistryPage, pick_dropdown);
  gtk_widget_class_bind_template_child(wc, EmRegistryPage, name_entry);
  gtk_widget_class_bind_template_child(wc, EmRegistryPage, alias_entry);
  gtk_widget_class_bind_template_child(wc, EmRegistryPage, models_view);
  gtk_widget_class_bind_template_child(wc, EmRegistryPage, versions_view);
  gtk_widget_class_bind_template_child(wc, EmRegistryPage, history_view);
  gtk_widget_class_bind_template_child(wc, EmRegistryPage, export_button);
  gtk_widget_class_install_action(wc, "registry.register", NULL, action_register);
  gtk_widget_class_install_action(wc, "registry.promote", NULL, action_promote);
  gtk_widget_class_install_action(wc, "registry.rollback", NULL, action_rollback);
  gtk_widget_class_install_action(wc, "registry.reload", NULL, action_reload);
  gtk_widget_class_install_action(wc, "registry.export", NULL, action_export);
}

static void em_registry_page_init(EmRegistryPage *self) {
  gtk_widget_init_template(GTK_WIDGET(self));
  self->message = g_strdup("");
  self->run_ids = g_array_new(FALSE, TRUE, sizeof(gint64));
  self->run_names = gtk_string_list_new(NULL);
  gtk_drop_down_set_model(self->run_dropdown, G_LIST_MODEL(self->run_names));
  g_signal_connect(self->run_dropdown, "notify::selected", G_CALLBACK(on_run_chosen), self);

  self->models = g_list_store_new(EM_TYPE_TEXT_ROW);
  self->models_sel = gtk_single_selection_new(G_LIST_MODEL(self->models));
  gtk_single_selection_set_autoselect(self->models_sel, FALSE);
  gtk_column_view_set_model(self->models_view, GTK_SELECTION_MODEL(self->models_sel));
  static const char *const mcols[] = {"Model", "Versions", "Aliases", NULL};
  add_columns(self->models_view, mcols, 0);
  g_signal_connect(self->models_sel, "notify::selected", G_CALLBACK(on_model_selected), self);

  self->versions = g_list_store_new(EM_TYPE_TEXT_ROW);
  self->versions_sel = gtk_single_selection_new(G_LIST_MODEL(self->versions));
  gtk_single_selection_set_autoselect(self->versions_sel, TRUE);
  gtk_column_view_set_model(self->versions_view, GTK_SELECTION_MODEL(self->versions_sel));
  static const char *const vcols[] = {"Version", "From", "Aliases", "Final metrics", "Registered", NULL};
  add_columns(self->versions_view, vcols, 3);

  self->history = g_list_store_new(EM_TYPE_TEXT_ROW);
  GtkNoSelection *hsel = gtk_no_selection_new(G_LIST_MODEL(g_object_ref(self->history)));
  gtk_column_view_set_model(self->history_view, GTK_SELECTION_MODEL(hsel));
  g_object_unref(hsel);
  static const char *const hcols[] = {"When", "Change", "From", "To", "By", NULL};
  add_columns(self->history_view, hcols, 1);
}

static EmRegistryPage *make_page(EmAppState *state) {
  EmRegistryPage *self = g_object_new(EM_TYPE_REGISTRY_PAGE, NULL);
  self->state = g_object_ref(state);
  g_signal_connect_object(state, "registry-changed", G_CALLBACK(on_registry_changed), self, 0);
  return self;
}

GtkWidget *em_registry_page_new(EmAppState *state) {
  g_return_val_if_fail(EM_IS_APP_STATE(state), NULL);
  EmRegistryPage *self = make_page(state);
  em_registry_page_reload(self);
  return GTK_WIDGET(self);
}

GtkWidget *em_registry_page_new_async(EmAppState *state) {
  g_return_val_if_fail(EM_IS_APP_STATE(state), NULL);
  EmRegistryPage *self = make_page(state);
  reload_async(self);
  return GTK_WIDGET(self);
}

gboolean em_registry_page_select_model(EmRegistryPage *self, const char *model) {
  g_return_val_if_fail(EM_IS_REGISTRY_PAGE(self), FALSE);
  guint n = g_list_model_get_n_items(G_LIST_MODEL(self->models));
  for (guint i = 0; i < n; i++) {
    EmTextRow *r = g_list_model_get_item(G_LIST_MODEL(self->models), i);
    gboolean hit = strcmp(em_text_row_get_cell(r, 0), model) == 0;
    g_object_unref(r);
    if (hit) {
      gtk_single_selection_set_selected(self->models_sel, i);
      return TRUE;
    }
  }
  return FALSE;
}

gboolean em_registry_page_select_version(EmRegistryPage *self, int version) {
  g_return_val_if_fail(EM_IS_REGISTRY_PAGE(self), FALSE);
  guint n = g_list_model_get_n_items(G_LIST_MODEL(self->versions));
  for (guint i = 0; i < n; i++) {
    EmTextRow *r = g_list_model_get_item(G_LIST_MODEL(self->versions), i);
    gboolean hit = em_text_row_get_id(r) == version;
    g_object_unref(r);
    if (hit) {
      gtk_single_selection_set_selected(self->versions_sel, i);
      return TRUE;
    }
  }
  return FALSE;
}

const char *em_registry_page_get_message(EmRegistryPage *self) {
  g_return_val_if_fail(EM_IS_REGISTRY_PAGE(self), "");
  return self->message;
}
