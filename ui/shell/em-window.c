/* em-window.c: the main window (see the header). */
#include "em-window.h"

#include <string.h>

#include "em-data-dirs.h"
#include "em-shell-config.h"
#include "em-store.h"
#include "em-train-page.h"
#include "em-builder-page.h"
#include "em-data-page.h"
#include "em-memory-page.h"
#include "em-profiler-page.h"
#include "em-runs-page.h"
#include "em-compare-page.h"
#include "em-registry-page.h"
#include "em-deploy-page.h"
#include "em-sweeps-page.h"

struct _EmWindow {
  GtkApplicationWindow parent_instance;
  EmAppState *state;
  GtkWidget *sidebar, *stack, *run_label;
};

G_DEFINE_FINAL_TYPE(EmWindow, em_window, GTK_TYPE_APPLICATION_WINDOW)

static const char *const page_names[] = {"builder", "data",     "train",  "memory", "profiler", "runs",
                                         "compare", "registry", "deploy", "sweeps", NULL};
static const char *const page_titles[] = {"Builder", "Data",     "Train",  "Memory", "Profiler",
                                          "Runs",    "Compare",  "Registry", "Deploy", "Sweeps"};

const char *const *em_window_page_names(void) { return page_names; }

static GtkWidget *placeholder(const char *title) {
  char *text = g_strdup_printf("The %s page is not built into this workbench yet.", title);
  GtkWidget *l = gtk_label_new(text);
  g_free(text);
  gtk_widget_add_css_class(l, "dim-label");
  return l;
}

static GtkWidget *make_page(int i, EmAppState *st) {
  const char *n = page_names[i];
  (void)n;
  if (strcmp(n, "builder") == 0) return em_builder_page_new(st);
  if (strcmp(n, "data") == 0) return em_data_page_new(st);
  if (strcmp(n, "train") == 0) return em_train_page_new(st);
  if (strcmp(n, "memory") == 0) return em_memory_page_new(st);
  if (strcmp(n, "profiler") == 0) return em_profiler_page_new(st);
  if (strcmp(n, "runs") == 0) return em_runs_page_new_async(st); /* start-up never waits on it */
  if (strcmp(n, "compare") == 0) return em_compare_page_new(st);
  if (strcmp(n, "registry") == 0) return em_registry_page_new_async(st);
  if (strcmp(n, "deploy") == 0) return em_deploy_page_new(st);
  if (strcmp(n, "sweeps") == 0) return em_sweeps_page_new(st);
  return placeholder(page_titles[i]);
}

GtkWidget *em_window_get_page(EmWindow *self, const char *name) {
  return gtk_stack_get_child_by_name(GTK_STACK(self->stack), name);
}

void em_window_show_page(EmWindow *self, const char *name) {
  if (gtk_stack_get_child_by_name(GTK_STACK(self->stack), name))
    gtk_stack_set_visible_child_name(GTK_STACK(self->stack), name);
}

const char *em_window_get_visible_page(EmWindow *self) {
  return gtk_stack_get_visible_child_name(GTK_STACK(self->stack));
}

EmAppState *em_window_get_state(EmWindow *self) { return self->state; }

/* ---- opening a spec ------------------------------------------------------------ */

static void show_error(EmWindow *self, const char *primary, const char *secondary) {
  GtkWidget *dlg =
      gtk_message_dialog_new(GTK_WINDOW(self), GTK_DIALOG_MODAL | GTK_DIALOG_DESTROY_WITH_PARENT,
                             GTK_MESSAGE_ERROR, GTK_BUTTONS_CLOSE, "%s", primary);
  gtk_message_dialog_format_secondary_text(GTK_MESSAGE_DIALOG(dlg), "%s", secondary);
  g_signal_connect(dlg, "response", G_CALLBACK(gtk_window_destroy), NULL);
  gtk_window_present(GTK_WINDOW(dlg));
}

void em_window_open_spec(EmWindow *self, GFile *file) {
  g_autoptr(GError) error = NULL;
  GtkWidget *b = em_window_get_page(self, "builder");
  if (b && EM_IS_BUILDER_PAGE(b)) {
    if (em_builder_page_open(EM_BUILDER_PAGE(b), file, &error))
      em_window_show_page(self, "builder");
    else
      show_error(self, "The spec could not be opened", error->message);
    return;
  }
  char *text = NULL;
  if (!g_file_load_contents(file, NULL, &text, NULL, NULL, &error)) {
    show_error(self, "The spec could not be read", error->message);
    return;
  }
  char *path = g_file_get_path(file);
  em_app_state_set_spec(self->state, text, path);
  g_free(path);
  g_free(text);
}

static void on_open_response(GtkNativeDialog *dialog, int response, gpointer data) {
  EmWindow *self = data;
  if (response == GTK_RESPONSE_ACCEPT) {
    GFile *f = gtk_file_chooser_get_file(GTK_FILE_CHOOSER(dialog));
    if (f) {
      em_window_open_spec(self, f);
      g_object_unref(f);
    }
  }
  g_object_unref(dialog);
}

static void show_open_chooser(EmWindow *self) {
  GtkFileChooserNative *fc = gtk_file_chooser_native_new(
      "Open a Model Spec", GTK_WINDOW(self), GTK_FILE_CHOOSER_ACTION_OPEN, "_Open", "_Cancel");
  GtkFileFilter *filter = gtk_file_filter_new();
  gtk_file_filter_set_name(filter, "Model specs (JSON)");
  gtk_file_filter_add_pattern(filter, "*.json");
  gtk_file_chooser_add_filter(GTK_FILE_CHOOSER(fc), filter);
  g_object_unref(filter);
  char *zoo = em_data_dir_find("models");
  if (zoo) {
    GFile *dir = g_file_new_for_path(zoo);
    gtk_file_chooser_set_current_folder(GTK_FILE_CHOOSER(fc), dir, NULL);
    g_object_unref(dir);
    g_free(zoo);
  }
  g_signal_connect(fc, "response", G_CALLBACK(on_open_response), self);
  gtk_native_dialog_show(GTK_NATIVE_DIALOG(fc));
}

static void open_after_confirm(EmBuilderPage *page, gpointer data) {
  (void)page;
  show_open_chooser(data);
}

static GtkWidget *builder_of(EmWindow *self) {
  GtkWidget *b = em_window_get_page(self, "builder");
  return b && EM_IS_BUILDER_PAGE(b) ? b : NULL;
}

/* Unsaved changes are saved or discarded before the chooser opens. */
static void open_activated(GSimpleAction *a, GVariant *p, gpointer data) {
  EmWindow *self = data;
  GtkWidget *b = builder_of(self);
  if (b)
    em_builder_page_confirm_discard(EM_BUILDER_PAGE(b), "opening another model",
                                    open_after_confirm, self, NULL);
  else
    show_open_chooser(self);
}

/* win.save, save-as, undo, redo: the Builder's actions, from the menu and
 * the application's shortcuts on any page. */
static void builder_action(GSimpleAction *a, GVariant *p, gpointer data) {
  EmWindow *self = data;
  GtkWidget *b = builder_of(self);
  if (!b) return;
  const char *name = g_action_get_name(G_ACTION(a));
  if (!strcmp(name, "save-as") || !strcmp(name, "save")) em_window_show_page(self, "builder");
  char action[32];
  g_snprintf(action, sizeof action, "builder.%s", name);
  gtk_widget_activate_action(b, action, NULL);
}

gboolean em_window_has_unsaved(EmWindow *self) {
  GtkWidget *b = builder_of(self);
  return b && em_builder_page_is_modified(EM_BUILDER_PAGE(b));
}

void em_window_confirm_unsaved(EmWindow *self, const char *doing, EmBuilderProceed fn,
                               gpointer data) {
  GtkWidget *b = builder_of(self);
  if (!b) {
    fn(NULL, data);
    return;
  }
  em_window_show_page(self, "builder");
  em_builder_page_confirm_discard(EM_BUILDER_PAGE(b), doing, fn, data, NULL);
}

static void close_after_confirm(EmBuilderPage *page, gpointer data) {
  (void)page;
  gtk_window_destroy(GTK_WINDOW(data));
}

/* Closing the window (its close button, Alt+F4) with unsaved changes asks
 * first; quitting (app.quit) asks for every window before any closes. */
static gboolean on_close_request(GtkWindow *w, gpointer data) {
  (void)data;
  EmWindow *self = EM_WINDOW(w);
  if (!em_window_has_unsaved(self)) return FALSE;
  em_window_confirm_unsaved(self, "closing the window", close_after_confirm, self);
  return TRUE;
}

static void page_activated(GSimpleAction *a, GVariant *p, gpointer data) {
  em_window_show_page(EM_WINDOW(data), g_variant_get_string(p, NULL));
}

static const GActionEntry win_actions[] = {
    {.name = "page", .activate = page_activated, .parameter_type = "s"},
    {.name = "open", .activate = open_activated},
    {.name = "save", .activate = builder_action},
    {.name = "save-as", .activate = builder_action},
    {.name = "undo", .activate = builder_action},
    {.name = "redo", .activate = builder_action},
};

/* ---- the run in the header bar ---------------------------------------------------- */

static void on_run_started(EmAppState *st, gint64 run, gpointer data) {
  EmWindow *self = data;
  char buf[64];
  if (run) g_snprintf(buf, sizeof buf, "Training run %lld", (long long)run);
  else g_strlcpy(buf, "Training", sizeof buf);
  gtk_label_set_text(GTK_LABEL(self->run_label), buf);
}

static void on_run_finished(EmAppState *st, gint64 run, int status, const char *msg,
                            gpointer data) {
  EmWindow *self = data;
  char buf[96];
  g_snprintf(buf, sizeof buf, "Run %lld %s", (long long)run,
             em_run_status_name((em_run_status)status));
  gtk_label_set_text(GTK_LABEL(self->run_label), run ? buf : "");
}

/* ---- the widget -------------------------------------------------------------------- */

static void em_window_dispose(GObject *obj) {
  EmWindow *self = EM_WINDOW(obj);
  gtk_widget_dispose_template(GTK_WIDGET(obj), EM_TYPE_WINDOW);
  g_clear_object(&self->state);
  G_OBJECT_CLASS(em_window_parent_class)->dispose(obj);
}

static void em_window_class_init(EmWindowClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  oc->dispose = em_window_dispose;
  gtk_widget_class_set_template_from_resource(wc, "/org/ember/Workbench/shell/em-window.ui");
  gtk_widget_class_bind_template_child(wc, EmWindow, sidebar);
  gtk_widget_class_bind_template_child(wc, EmWindow, stack);
  gtk_widget_class_bind_template_child(wc, EmWindow, run_label);
}

static void em_window_init(EmWindow *self) {
  gtk_widget_init_template(GTK_WIDGET(self));
  g_action_map_add_action_entries(G_ACTION_MAP(self), win_actions, G_N_ELEMENTS(win_actions),
                                  self);
  GtkBuilder *b = gtk_builder_new_from_resource("/org/ember/Workbench/shell/em-shortcuts.ui");
  gtk_application_window_set_help_overlay(
      GTK_APPLICATION_WINDOW(self),
      GTK_SHORTCUTS_WINDOW(gtk_builder_get_object(b, "help_overlay")));
  g_object_unref(b);
  g_signal_connect(self, "close-request", G_CALLBACK(on_close_request), NULL);
}

EmWindow *em_window_new(GtkApplication *app, EmAppState *state) {
  EmWindow *self = g_object_new(EM_TYPE_WINDOW, "application", app, NULL);
  self->state = g_object_ref(state);
  for (int i = 0; page_names[i]; i++)
    gtk_stack_add_titled(GTK_STACK(self->stack), make_page(i, state), page_names[i],
                         page_titles[i]);
  gtk_stack_set_visible_child_name(GTK_STACK(self->stack), "builder");
  g_signal_connect_object(state, "run-started", G_CALLBACK(on_run_started), self, 0);
  g_signal_connect_object(state, "run-finished", G_CALLBACK(on_run_finished), self, 0);
  return self;
}
