/* em-builder-document.c: the Builder's side of its model document
 * (em-model-doc.h): each state the page reaches is noted, undo and redo
 * load a noted state back, the title carries the modified marker, a
 * person about to lose unsaved changes (quit, close, open, the zoo, a
 * spec from another page) is asked to save, discard or cancel, and a
 * recovery copy a crashed session left is offered back. */
#include "em-builder-page-private.h"

#include <glib/gstdio.h>
#include <string.h>

/* The document's text, the form every state is compared in and kept as
 * (g_free): compact, keys in order, reals with 17 digits (they read back
 * equal); not the file's layout, which a save changes. */
char *em_builder_doc_text(EmBuilderPage *self) {
  char *t = json_dumps(self->doc, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  char *g = g_strdup(t ? t : "");
  free(t);
  return g;
}

void em_builder_doc_loaded(EmBuilderPage *self) {
  char *text = em_builder_doc_text(self);
  em_model_doc_reset(self->mdoc, text, self->path);
  g_free(text);
}

void em_builder_doc_sync_actions(EmBuilderPage *self) {
  GtkWidget *w = GTK_WIDGET(self);
  gtk_widget_action_set_enabled(w, "builder.undo", em_model_doc_can_undo(self->mdoc));
  gtk_widget_action_set_enabled(w, "builder.redo", em_model_doc_can_redo(self->mdoc));
}

gboolean em_builder_page_is_modified(EmBuilderPage *self) {
  g_return_val_if_fail(EM_IS_BUILDER_PAGE(self), FALSE);
  return em_model_doc_is_modified(self->mdoc);
}

/* ---- undo and redo ---------------------------------------------------------- */

static void load_state(EmBuilderPage *self, const char *text) {
  json_t *doc = text ? json_loads(text, 0, NULL) : NULL;
  if (!json_is_object(doc)) { /* a noted state always parses: it came from json_dumps */
    json_decref(doc);
    return;
  }
  json_decref(self->doc);
  self->doc = doc;
  if (self->selected >= em_builder_n_nodes(self)) self->selected = em_builder_n_nodes(self) - 1;
  em_builder_reparse(self); /* notes text: the state it stands at, no new step */
  em_builder_refresh(self, TRUE);
}

void em_builder_act_undo(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  EmBuilderPage *self = EM_BUILDER_PAGE(w);
  load_state(self, em_model_doc_undo(self->mdoc));
}

void em_builder_act_redo(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  EmBuilderPage *self = EM_BUILDER_PAGE(w);
  load_state(self, em_model_doc_redo(self->mdoc));
}

/* ---- save, discard or cancel ------------------------------------------------- */

typedef struct {
  EmBuilderPage *self;
  EmBuilderProceed fn;
  gpointer data;
  GDestroyNotify destroy;
  int response;
} pending;

static void pending_free(pending *p) {
  if (p->destroy) p->destroy(p->data);
  g_object_unref(p->self);
  g_free(p);
}

static void proceed(pending *p) {
  p->fn(p->self, p->data);
  pending_free(p);
}

/* Called by em-builder-files.c when the Save As chooser that a "Save"
 * answer opened has ended: saved says whether the document is now on
 * disk. */
void em_builder_doc_after_save(EmBuilderPage *self, gboolean saved) {
  pending *p = self->pending_close;
  self->pending_close = NULL;
  if (!p) return;
  if (saved) proceed(p);
  else pending_free(p);
}

/* After the dialog is gone: what goes on may destroy the window it was
 * transient for, which must not happen while the dialog still exists. */
static gboolean finish_response(gpointer data) {
  pending *p = data;
  int response = p->response;
  EmBuilderPage *self = p->self;
  if (response == GTK_RESPONSE_REJECT) { /* Discard */
    em_model_doc_discard_recovery(self->mdoc);
    proceed(p);
  } else if (response == GTK_RESPONSE_ACCEPT) { /* Save */
    if (em_builder_save_now(self)) {
      proceed(p);
    } else if (!self->path) { /* untitled: the chooser asks where, then goes on */
      if (self->pending_close) pending_free(self->pending_close);
      self->pending_close = p;
      em_builder_act_save_as(GTK_WIDGET(self), NULL, NULL);
    } else {
      pending_free(p); /* the save failed: its error is on the page; stay */
    }
  } else {
    pending_free(p); /* Cancel, or the dialog closed */
  }
  return G_SOURCE_REMOVE;
}

static void on_confirm_response(GtkDialog *dialog, int response, pending *p) {
  p->response = response;
  gtk_window_destroy(GTK_WINDOW(dialog));
  g_idle_add(finish_response, p);
}

void em_builder_page_confirm_discard(EmBuilderPage *self, const char *doing, EmBuilderProceed fn,
                                     gpointer data, GDestroyNotify destroy) {
  g_return_if_fail(EM_IS_BUILDER_PAGE(self));
  pending *p = g_new0(pending, 1);
  p->self = g_object_ref(self);
  p->fn = fn;
  p->data = data;
  p->destroy = destroy;
  if (!em_model_doc_is_modified(self->mdoc)) {
    proceed(p);
    return;
  }
  GtkRoot *root = gtk_widget_get_root(GTK_WIDGET(self));
  const char *name = json_string_value(json_object_get(self->doc, "name"));
  GtkWidget *d = gtk_message_dialog_new(
      GTK_IS_WINDOW(root) ? GTK_WINDOW(root) : NULL, GTK_DIALOG_MODAL | GTK_DIALOG_DESTROY_WITH_PARENT,
      GTK_MESSAGE_QUESTION, GTK_BUTTONS_NONE, "Save the changes to model “%s” before %s?",
      name ? name : "untitled", doing);
  gtk_message_dialog_format_secondary_text(
      GTK_MESSAGE_DIALOG(d), "%s",
      self->path ? "If you don't save, the changes since it was last saved are lost."
                 : "The model has never been saved: if you don't save it, it is lost.");
  gtk_dialog_add_button(GTK_DIALOG(d), "_Cancel", GTK_RESPONSE_CANCEL);
  gtk_dialog_add_button(GTK_DIALOG(d), "_Discard", GTK_RESPONSE_REJECT);
  gtk_dialog_add_button(GTK_DIALOG(d), self->path ? "_Save" : "_Save As…", GTK_RESPONSE_ACCEPT);
  gtk_dialog_set_default_response(GTK_DIALOG(d), GTK_RESPONSE_ACCEPT);
  gtk_widget_set_name(d, "unsaved-changes");
  g_signal_connect(d, "response", G_CALLBACK(on_confirm_response), p);
  gtk_window_present(GTK_WINDOW(d));
}

/* ---- recovery ------------------------------------------------------------------ */

static void on_restore(GtkButton *b, EmBuilderPage *self) {
  (void)b;
  char *text, *path, *when;
  if (em_model_doc_read_recovery(self->recovery_file, &text, &path, &when)) {
    json_t *doc = json_loads(text, 0, NULL);
    if (json_is_object(doc) && json_is_array(json_object_get(doc, "nodes"))) {
      json_decref(self->doc);
      self->doc = doc;
      g_free(self->path);
      self->path = g_strdup(path);
      self->selected = -1;
      char *now = em_builder_doc_text(self);
      em_model_doc_reset_modified(self->mdoc, now, self->path);
      g_free(now);
      em_builder_take_batch(self);
      em_builder_reparse(self);
      em_builder_refresh(self, TRUE);
    } else {
      json_decref(doc);
    }
  }
  g_free(text);
  g_free(path);
  g_free(when);
  g_unlink(self->recovery_file); /* the document keeps its own copy while modified */
  gtk_widget_set_visible(self->recovery_bar, FALSE);
}

static void on_drop(GtkButton *b, EmBuilderPage *self) {
  (void)b;
  g_unlink(self->recovery_file);
  gtk_widget_set_visible(self->recovery_bar, FALSE);
}

/* The copy a session left is moved aside first (recovery_file then
 * names it), so this session's own copy never overwrites it before the
 * person has chosen. */
void em_builder_doc_offer_recovery(EmBuilderPage *self, GtkBox *column) {
  char *left = em_model_doc_recovery_path();
  self->recovery_file = g_strconcat(left, ".previous", NULL);
  if (g_file_test(left, G_FILE_TEST_EXISTS)) g_rename(left, self->recovery_file);
  g_free(left);
  char *text, *path, *when;
  if (!em_model_doc_read_recovery(self->recovery_file, &text, &path, &when)) return;
  json_t *doc = json_loads(text, 0, NULL);
  const char *name = json_string_value(json_object_get(doc, "name"));
  char *where = path ? g_strdup_printf(" (%s)", path) : g_strdup("");
  GDateTime *dt = when ? g_date_time_new_from_iso8601(when, NULL) : NULL;
  if (dt) { /* "2 Dec 13:21", local time */
    GDateTime *local = g_date_time_to_local(dt);
    g_free(when);
    when = g_date_time_format(local, "%e %b %H:%M");
    g_strstrip(when);
    g_date_time_unref(local);
    g_date_time_unref(dt);
  }
  char *msg = g_strdup_printf("Unsaved changes to model “%s”%s were kept when the workbench last "
                              "closed%s%s.",
                              name ? name : "untitled", where, when ? ", at " : "", when ? when : "");
  g_free(where);
  json_decref(doc);
  GtkWidget *bar = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 6);
  gtk_widget_set_name(bar, "recovery-bar");
  GtkWidget *l = gtk_label_new(msg);
  gtk_label_set_wrap(GTK_LABEL(l), TRUE);
  gtk_label_set_xalign(GTK_LABEL(l), 0);
  gtk_widget_set_hexpand(l, TRUE);
  GtkWidget *restore = gtk_button_new_with_mnemonic("_Restore");
  gtk_widget_set_name(restore, "recovery-restore");
  gtk_widget_set_valign(restore, GTK_ALIGN_CENTER);
  GtkWidget *drop = gtk_button_new_with_mnemonic("Dis_card");
  gtk_widget_set_valign(drop, GTK_ALIGN_CENTER);
  gtk_widget_set_name(drop, "recovery-discard");
  g_signal_connect_object(restore, "clicked", G_CALLBACK(on_restore), self, 0);
  g_signal_connect_object(drop, "clicked", G_CALLBACK(on_drop), self, 0);
  gtk_box_append(GTK_BOX(bar), l);
  gtk_box_append(GTK_BOX(bar), drop);
  gtk_box_append(GTK_BOX(bar), restore);
  gtk_box_prepend(column, bar);
  self->recovery_bar = bar;
  g_free(msg);
  g_free(text);
  g_free(path);
  g_free(when);
}
