/* test-ui-model-doc.c: the Builder's model document (issue 32, item 3)
 * through the real widgets under Xvfb: the document's history and its
 * recovery copy; a model opened from a file is unmodified, an edit marks
 * the title and writes the recovery copy, undo goes back to the file's
 * state (no mark, no copy) and redo forward, Save (Ctrl+S's action)
 * writes it; quitting, closing the window and opening from the zoo with
 * unsaved changes ask first (Cancel keeps everything, Discard drops the
 * changes and goes on, Save writes them and goes on); a copy a crashed
 * session left is offered and restored. Before the document, Ctrl+Q
 * quit with an unsaved model and the next start was an empty "untitled". */
#include <glib/gstdio.h>
#include <jansson.h>
#include <string.h>

#include "em-application.h"
#include "em-builder-page.h"
#include "em-model-doc.h"
#include "em-window.h"
#include "ui-test-util.h"

static char *g_dir;  /* the test's files */
static EmApplication *g_app;

static char *spec_copy(const char *name) {
  char *src = g_build_filename(g_getenv("EMBER_SOURCE_ROOT"), "data", "models", name, NULL);
  char *dst = g_build_filename(g_dir, name, NULL);
  char *text = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(src, &text, &len, NULL));
  g_assert_true(g_file_set_contents(dst, text, (gssize)len, NULL));
  g_free(text);
  g_free(src);
  return dst;
}

static const char *title_of(GtkWidget *page) {
  GtkWidget *l = ui_test_find_named(page, "builder-title");
  g_assert_nonnull(l);
  return gtk_label_get_text(GTK_LABEL(l));
}

static gboolean marked(GtkWidget *page) { return strstr(title_of(page), "\u2022") != NULL; }

static void set_spin(GtkWidget *page, const char *attr, double v) {
  char *wname = g_strdup_printf("attr-%s", attr);
  GtkWidget *spin = ui_test_find_named(page, wname);
  g_assert_nonnull(spin);
  gtk_spin_button_set_value(GTK_SPIN_BUTTON(spin), v);
  g_free(wname);
}

/* The confirm dialog, if one is showing. */
static GtkWidget *find_dialog(void) {
  GListModel *tops = gtk_window_get_toplevels();
  for (guint i = 0; i < g_list_model_get_n_items(tops); i++) {
    GtkWidget *w = g_list_model_get_item(tops, i);
    g_object_unref(w);
    if (!g_strcmp0(gtk_widget_get_name(w), "unsaved-changes") && gtk_widget_get_visible(w))
      return w;
  }
  return NULL;
}

static gboolean dialog_shown(gpointer d) { return find_dialog() != NULL; }

static void answer(int response) {
  g_assert_true(ui_test_wait(dialog_shown, NULL, 3000));
  gtk_dialog_response(GTK_DIALOG(find_dialog()), response);
  ui_test_spin(50);
}

static char *recovery(void) { return em_model_doc_recovery_path(); }

static gboolean recovery_exists(void) {
  char *r = recovery();
  gboolean e = g_file_test(r, G_FILE_TEST_EXISTS);
  g_free(r);
  return e;
}

/* ---- the document alone ----------------------------------------------------- */

static void test_history(void) {
  char *rec = g_build_filename(g_dir, "history-recovery.json", NULL);
  EmModelDoc *d = em_model_doc_new(rec);
  em_model_doc_reset(d, "A", "/x/a.json");
  g_assert_false(em_model_doc_is_modified(d));
  g_assert_false(em_model_doc_can_undo(d));
  g_assert_false(em_model_doc_note(d, "A")); /* the same state: no step */
  g_assert_true(em_model_doc_note(d, "B"));
  g_assert_true(em_model_doc_note(d, "C"));
  g_assert_true(em_model_doc_is_modified(d));
  char *text, *path, *when;
  g_assert_true(em_model_doc_read_recovery(rec, &text, &path, &when));
  g_assert_cmpstr(text, ==, "C");
  g_assert_cmpstr(path, ==, "/x/a.json");
  g_assert_nonnull(when);
  g_free(text), g_free(path), g_free(when);
  g_assert_cmpstr(em_model_doc_undo(d), ==, "B");
  g_assert_cmpstr(em_model_doc_undo(d), ==, "A");
  g_assert_null(em_model_doc_undo(d));
  g_assert_false(em_model_doc_is_modified(d)); /* back at the file's state */
  g_assert_false(g_file_test(rec, G_FILE_TEST_EXISTS));
  g_assert_cmpstr(em_model_doc_redo(d), ==, "B");
  g_assert_true(em_model_doc_note(d, "D")); /* a new branch: C is gone */
  g_assert_false(em_model_doc_can_redo(d));
  em_model_doc_saved(d, "/x/b.json");
  g_assert_false(em_model_doc_is_modified(d));
  g_assert_cmpstr(em_model_doc_path(d), ==, "/x/b.json");
  g_assert_false(g_file_test(rec, G_FILE_TEST_EXISTS));
  g_assert_cmpstr(em_model_doc_undo(d), ==, "B"); /* saved at D: B differs */
  g_assert_true(em_model_doc_is_modified(d));
  em_model_doc_discard_recovery(d);
  g_assert_false(em_model_doc_is_modified(d));
  g_assert_false(g_file_test(rec, G_FILE_TEST_EXISTS));
  g_assert_true(em_model_doc_note(d, "E")); /* a change after discarding counts again */
  g_assert_true(em_model_doc_is_modified(d));
  em_model_doc_free(d);
  g_unlink(rec);
  g_free(rec);
}

/* ---- the Builder ---------------------------------------------------------------- */

static void test_edit_undo_save(void) {
  char *path = spec_copy("fmnist-mlp.json");
  GtkWidget *page = em_builder_page_new(NULL);
  ui_test_show(page, 1000, 700);
  GFile *f = g_file_new_for_path(path);
  g_assert_true(em_builder_page_open(EM_BUILDER_PAGE(page), f, NULL));
  g_object_unref(f);
  g_assert_false(em_builder_page_is_modified(EM_BUILDER_PAGE(page)));
  g_assert_false(marked(page));
  g_assert_false(recovery_exists());

  char *before = em_builder_page_dup_json(EM_BUILDER_PAGE(page));
  g_assert_true(em_builder_page_select(EM_BUILDER_PAGE(page), "fc1")); /* its first Linear */
  set_spin(page, "out_features", 77);
  g_assert_true(em_builder_page_is_modified(EM_BUILDER_PAGE(page)));
  g_assert_true(marked(page));
  g_assert_true(recovery_exists());
  ui_test_screenshot(page, "builder-modified");

  g_assert_true(gtk_widget_activate_action(page, "builder.undo", NULL));
  char *undone = em_builder_page_dup_json(EM_BUILDER_PAGE(page));
  g_assert_cmpstr(undone, ==, before);
  g_assert_false(em_builder_page_is_modified(EM_BUILDER_PAGE(page)));
  g_assert_false(marked(page));
  g_assert_false(recovery_exists());
  g_assert_true(gtk_widget_activate_action(page, "builder.redo", NULL));
  g_assert_true(em_builder_page_is_modified(EM_BUILDER_PAGE(page)));
  g_assert_nonnull(strstr(em_builder_page_dup_json(EM_BUILDER_PAGE(page)), "77"));

  g_assert_true(gtk_widget_activate_action(page, "builder.save", NULL));
  g_assert_false(em_builder_page_is_modified(EM_BUILDER_PAGE(page)));
  g_assert_false(marked(page));
  g_assert_false(recovery_exists());
  json_t *saved = json_load_file(path, 0, NULL);
  g_assert_nonnull(saved);
  json_t *nodes = json_object_get(saved, "nodes");
  gboolean found = FALSE;
  for (size_t i = 0; i < json_array_size(nodes); i++)
    found |= json_integer_value(json_object_get(json_array_get(nodes, i), "out_features")) == 77;
  g_assert_true(found);
  json_decref(saved);
  g_free(undone);
  g_free(before);
  gtk_window_destroy(GTK_WINDOW(gtk_widget_get_root(page)));
  g_free(path);
}

static EmWindow *new_window(void) {
  EmAppState *state = em_app_state_new(g_dir);
  EmWindow *w = em_window_new(GTK_APPLICATION(g_app), state);
  g_object_unref(state);
  ui_test_show(GTK_WIDGET(w), 1024, 700);
  return w;
}

static GtkWidget *modify(EmWindow *w) {
  GtkWidget *page = em_window_get_page(w, "builder");
  g_assert_true(gtk_widget_activate_action(page, "builder.add", "s", "Flatten"));
  g_assert_true(em_builder_page_is_modified(EM_BUILDER_PAGE(page)));
  return page;
}

/* Closing the window (its close button) with unsaved changes. */
static void test_close_asks(void) {
  EmWindow *w = new_window();
  modify(w);
  g_object_add_weak_pointer(G_OBJECT(w), (gpointer *)&w);
  gtk_window_close(GTK_WINDOW(w));
  answer(GTK_RESPONSE_CANCEL);
  g_assert_nonnull(w); /* still open, still modified */
  g_assert_true(em_window_has_unsaved(w));
  gtk_window_close(GTK_WINDOW(w));
  answer(GTK_RESPONSE_REJECT); /* Discard */
  ui_test_spin(50);
  g_assert_null(w);
  g_assert_false(recovery_exists());
}

/* The zoo with unsaved changes: Cancel keeps the model. */
static void test_zoo_asks(void) {
  EmWindow *w = new_window();
  GtkWidget *page = modify(w);
  char *before = em_builder_page_dup_json(EM_BUILDER_PAGE(page));
  GtkDropDown *zoo = GTK_DROP_DOWN(ui_test_find(page, GTK_TYPE_DROP_DOWN, 0));
  g_assert_cmpuint(g_list_model_get_n_items(gtk_drop_down_get_model(zoo)), >, 1);
  gtk_drop_down_set_selected(zoo, 1);
  answer(GTK_RESPONSE_CANCEL);
  char *after = em_builder_page_dup_json(EM_BUILDER_PAGE(page));
  g_assert_cmpstr(after, ==, before);
  gtk_drop_down_set_selected(zoo, 1);
  answer(GTK_RESPONSE_REJECT);
  g_assert_false(em_builder_page_is_modified(EM_BUILDER_PAGE(page)));
  char *zooed = em_builder_page_dup_json(EM_BUILDER_PAGE(page));
  g_assert_cmpstr(zooed, !=, before);
  g_free(before), g_free(after), g_free(zooed);
  gtk_window_destroy(GTK_WINDOW(w));
}

/* A crashed session's copy comes back. */
static void test_recovery_offered(void) {
  char *rec = recovery();
  EmModelDoc *d = em_model_doc_new(rec);
  em_model_doc_reset(d, "{}", NULL);
  const char *spec = "{\"name\": \"rescued\", \"input\": {\"shape\": [4]}, \"nodes\": "
                     "[{\"name\": \"fc\", \"type\": \"Linear\", \"out_features\": 3}]}";
  em_model_doc_note(d, spec);
  em_model_doc_free(d); /* the "crash": the copy stays */
  g_assert_true(recovery_exists());
  EmWindow *w = new_window();
  GtkWidget *page = em_window_get_page(w, "builder");
  GtkWidget *bar = ui_test_find_named(page, "recovery-bar");
  g_assert_nonnull(bar);
  ui_test_screenshot(GTK_WIDGET(w), "builder-recovery");
  g_signal_emit_by_name(ui_test_find_named(page, "recovery-restore"), "clicked");
  g_assert_false(gtk_widget_get_visible(bar));
  g_assert_true(em_builder_page_is_modified(EM_BUILDER_PAGE(page)));
  g_assert_nonnull(strstr(title_of(page), "rescued"));
  g_assert_true(recovery_exists()); /* the document's own copy, until saved or discarded */
  EmModelDoc *drop = em_model_doc_new(rec);
  em_model_doc_discard_recovery(drop);
  em_model_doc_free(drop);
  gtk_window_destroy(GTK_WINDOW(w));
  g_free(rec);
}

/* Ctrl+Q's action with unsaved changes: Cancel keeps the window; Save
 * writes the file and quits. Last: it quits the application. */
static void test_quit_asks(void) {
  char *path = spec_copy("fmnist-cnn.json");
  EmWindow *w = new_window();
  GFile *f = g_file_new_for_path(path);
  em_window_open_spec(w, f);
  g_object_unref(f);
  GtkWidget *page = modify(w);
  (void)page;
  g_object_add_weak_pointer(G_OBJECT(w), (gpointer *)&w);
  g_action_group_activate_action(G_ACTION_GROUP(g_app), "quit", NULL);
  answer(GTK_RESPONSE_CANCEL);
  g_assert_nonnull(w);
  g_action_group_activate_action(G_ACTION_GROUP(g_app), "quit", NULL);
  answer(GTK_RESPONSE_ACCEPT); /* Save */
  ui_test_spin(50);
  g_assert_null(w);
  char *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  g_assert_nonnull(strstr(text, "Flatten")); /* the added node was saved */
  g_free(text);
  g_assert_false(recovery_exists());
  g_free(path);
}

int main(int argc, char **argv) {
  g_dir = g_dir_make_tmp("ember-ui-model-doc-XXXXXX", NULL);
  g_setenv("EMBER_HOME", g_dir, TRUE);
  ui_test_init(&argc, &argv); /* XDG_STATE_HOME: a folder of the test's own */
  g_app = em_application_new();
  g_application_set_flags(G_APPLICATION(g_app), G_APPLICATION_NON_UNIQUE);
  GLogLevelFlags fatal = g_log_set_always_fatal(G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
  g_assert_true(g_application_register(G_APPLICATION(g_app), NULL, NULL));
  g_log_set_always_fatal(fatal);
  g_test_add_func("/ui/model-doc/history", test_history);
  g_test_add_func("/ui/model-doc/edit-undo-save", test_edit_undo_save);
  g_test_add_func("/ui/model-doc/close-asks", test_close_asks);
  g_test_add_func("/ui/model-doc/zoo-asks", test_zoo_asks);
  g_test_add_func("/ui/model-doc/recovery-offered", test_recovery_offered);
  g_test_add_func("/ui/model-doc/quit-asks", test_quit_asks); /* last: it quits */
  int rc = g_test_run();
  g_object_unref(g_app);
  return rc;
}
