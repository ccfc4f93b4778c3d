/* em-builder-files.c: opening and saving spec files (GtkFileChooserNative: GTK 4.8
 * has no GtkFileDialog) and starting from the model zoo (data/models). */
#include "em-builder-page-private.h"
#include "em-data-dirs.h"

#include <string.h>

void em_builder_show_error(EmBuilderPage *self, const char *msg) {
  char *m = g_markup_printf_escaped("<span foreground=\"#c01c28\">%s</span>", msg);
  gtk_label_set_markup(self->totals_label, m);
  g_free(m);
}

/* The file gets the text the document was read from while nothing has
 * changed, else em_spec_format's layout (the zoo's), numbers in their
 * shortest round-tripping form and a final newline. */
static gboolean save_to(EmBuilderPage *self, const char *path, GError **error) {
  char *text = em_spec_format(self->doc, self->original);
  if (!text) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, "the model cannot be written as JSON");
    return FALSE;
  }
  gboolean ok = g_file_set_contents(path, text, -1, error);
  if (ok) { /* path may be self->path itself (Save): copied before it is freed */
    char *copy = g_strdup(path);
    g_free(self->path);
    self->path = copy;
    g_free(self->original);
    self->original = g_strdup(text);
    em_builder_reparse(self);
    em_model_doc_saved(self->mdoc, self->path);
  }
  free(text);
  return ok;
}

gboolean em_builder_save_now(EmBuilderPage *self) {
  if (!self->path) return FALSE;
  GError *error = NULL;
  gboolean ok = save_to(self, self->path, &error);
  if (!ok) {
    char *msg = g_strdup_printf("Could not save: %s", error->message);
    em_builder_show_error(self, msg);
    g_free(msg);
    g_error_free(error);
  } else {
    em_builder_refresh(self, FALSE);
  }
  return ok;
}

static void on_chooser_response(GtkNativeDialog *d, int response, EmBuilderPage *self) {
  gboolean saving = gtk_file_chooser_get_action(GTK_FILE_CHOOSER(d)) == GTK_FILE_CHOOSER_ACTION_SAVE;
  if (response == GTK_RESPONSE_ACCEPT) {
    GFile *f = gtk_file_chooser_get_file(GTK_FILE_CHOOSER(d));
    GError *error = NULL;
    gboolean ok;
    if (saving) {
      char *path = g_file_get_path(f);
      ok = save_to(self, path, &error);
      g_free(path);
    } else {
      ok = em_builder_page_open(self, f, &error);
    }
    if (!ok) {
      char *msg = g_strdup_printf("%s: %s", saving ? "Could not save" : "Could not open",
                                  error ? error->message : "unknown error");
      em_builder_show_error(self, msg);
      g_free(msg);
    } else if (saving) {
      em_builder_refresh(self, FALSE);
    }
    g_clear_error(&error);
    g_object_unref(f);
    if (saving) em_builder_doc_after_save(self, ok);
  } else if (saving) {
    em_builder_doc_after_save(self, FALSE);
  }
  g_clear_object(&self->chooser);
}

static void run_chooser(EmBuilderPage *self, gboolean save) {
  GtkRoot *root = gtk_widget_get_root(GTK_WIDGET(self));
  g_clear_object(&self->chooser);
  self->chooser = gtk_file_chooser_native_new(
      save ? "Save Model Spec" : "Open Model Spec", GTK_IS_WINDOW(root) ? GTK_WINDOW(root) : NULL,
      save ? GTK_FILE_CHOOSER_ACTION_SAVE : GTK_FILE_CHOOSER_ACTION_OPEN, save ? "_Save" : "_Open",
      "_Cancel");
  GtkFileFilter *filter = gtk_file_filter_new();
  gtk_file_filter_set_name(filter, "Model specs (JSON)");
  gtk_file_filter_add_pattern(filter, "*.json");
  gtk_file_chooser_add_filter(GTK_FILE_CHOOSER(self->chooser), filter);
  g_object_unref(filter);
  if (save) {
    const char *name = json_string_value(json_object_get(self->doc, "name"));
    char *fn = g_strdup_printf("%s.json", name ? name : "model");
    gtk_file_chooser_set_current_name(GTK_FILE_CHOOSER(self->chooser), fn);
    g_free(fn);
  }
  g_signal_connect_object(self->chooser, "response", G_CALLBACK(on_chooser_response), self, 0);
  gtk_native_dialog_show(GTK_NATIVE_DIALOG(self->chooser));
}

static void open_chooser(EmBuilderPage *self, gpointer data) {
  (void)data;
  run_chooser(self, FALSE);
}

void em_builder_act_open(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  em_builder_page_confirm_discard(EM_BUILDER_PAGE(w), "opening another model", open_chooser, NULL,
                                  NULL);
}

void em_builder_act_save(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  EmBuilderPage *self = EM_BUILDER_PAGE(w);
  if (!self->path) {
    run_chooser(self, TRUE);
    return;
  }
  em_builder_save_now(self);
}

void em_builder_act_save_as(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  run_chooser(EM_BUILDER_PAGE(w), TRUE);
}

/* ---- open and the zoo ------------------------------------------------------------ */

/* A newly loaded document: the estimate starts from its training batch. */
void em_builder_take_batch(EmBuilderPage *self) {
  json_t *b = json_object_get(json_object_get(self->doc, "training"), "batch_size");
  if (json_is_integer(b) && json_integer_value(b) > 0)
    gtk_spin_button_set_value(self->batch_spin, (double)json_integer_value(b));
}

gboolean em_builder_page_open(EmBuilderPage *self, GFile *file, GError **error) {
  g_return_val_if_fail(EM_IS_BUILDER_PAGE(self), FALSE);
  char *text = NULL;
  gsize len = 0;
  if (!g_file_load_contents(file, NULL, &text, &len, NULL, error)) return FALSE;
  json_error_t je;
  json_t *doc = json_loadb(text, len, 0, &je);
  char *path = g_file_get_path(file);
  if (!doc || !json_is_object(doc) || !json_is_array(json_object_get(doc, "nodes"))) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                doc ? "%s is not a model spec: it needs a JSON object with a \"nodes\" list"
                    : "%s: line %d: %s; fix the JSON and open it again",
                path ? path : "file", je.line, je.text);
    json_decref(doc);
    g_free(path);
    g_free(text);
    return FALSE;
  }
  json_decref(self->doc);
  self->doc = doc;
  g_free(self->original);
  self->original = text;
  g_free(self->path);
  self->path = path;
  self->selected = -1;
  em_builder_take_batch(self);
  em_builder_doc_loaded(self);
  em_builder_reparse(self);
  em_builder_refresh(self, TRUE);
  return TRUE;
}

char *em_builder_page_dup_json(EmBuilderPage *self) {
  char *t = em_spec_format(self->doc, self->original);
  char *g = g_strdup(t);
  free(t);
  return g;
}

const char *em_builder_page_get_error(EmBuilderPage *self) { return self->error; }
const char *em_builder_page_get_error_node(EmBuilderPage *self) { return self->error_node; }

static gint cmp_names(gconstpointer a, gconstpointer b) {
  return g_ascii_strcasecmp(*(const char *const *)a, *(const char *const *)b);
}

void em_builder_fill_zoo(EmBuilderPage *self) {
  GPtrArray *paths = g_ptr_array_new();
  GtkStringList *names = gtk_string_list_new(NULL);
  gtk_string_list_append(names, "Model zoo…");
  char *dir = em_data_dir_find("models");
  GDir *d = dir ? g_dir_open(dir, 0, NULL) : NULL;
  GPtrArray *files = g_ptr_array_new_with_free_func(g_free);
  const char *fn;
  while (d && (fn = g_dir_read_name(d)))
    if (g_str_has_suffix(fn, ".json")) g_ptr_array_add(files, g_strdup(fn));
  if (d) g_dir_close(d);
  g_ptr_array_sort(files, cmp_names);
  for (guint i = 0; i < files->len; i++) {
    const char *f = g_ptr_array_index(files, i);
    char *label = g_strndup(f, strlen(f) - 5);
    gtk_string_list_append(names, label);
    g_free(label);
    g_ptr_array_add(paths, g_build_filename(dir, f, NULL));
  }
  g_ptr_array_free(files, TRUE);
  g_ptr_array_add(paths, NULL);
  g_strfreev(self->zoo_paths);
  self->zoo_paths = (char **)g_ptr_array_free(paths, FALSE);
  gtk_drop_down_set_model(self->zoo_dropdown, G_LIST_MODEL(names));
  g_object_unref(names);
  g_free(dir);
}

static void open_zoo(EmBuilderPage *self, gpointer data) {
  GFile *f = g_file_new_for_path(data);
  GError *error = NULL;
  if (!em_builder_page_open(self, f, &error)) {
    em_builder_show_error(self, error->message);
    g_error_free(error);
  } else {
    g_clear_pointer(&self->path, g_free); /* a copy: Save asks where */
    em_builder_doc_loaded(self);
    em_builder_refresh(self, FALSE);
  }
  g_object_unref(f);
}

void em_builder_on_zoo_selected(GtkDropDown *dd, GParamSpec *ps, EmBuilderPage *self) {
  (void)ps;
  guint i = gtk_drop_down_get_selected(dd);
  if (i == 0 || i == GTK_INVALID_LIST_POSITION || !self->zoo_paths) return;
  char *path = g_strdup(self->zoo_paths[i - 1]);
  gtk_drop_down_set_selected(dd, 0);
  em_builder_page_confirm_discard(self, "starting from the zoo's model", open_zoo, path, g_free);
}
