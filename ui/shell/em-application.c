/* em-application.c: the workbench's application (see the header). */
#include "em-application.h"

#define G_SETTINGS_ENABLE_BACKEND /* g_keyfile_settings_backend_new */
#include <gio/gsettingsbackend.h>
#include <glib-unix.h>
#include <signal.h>
#include <string.h>

#include "em-app-state.h"
#include "em-device.h"
#include "em-preferences.h"
#include "em-shell-config.h"
#include "em-train-page.h"
#include "em-window.h"

extern GResource *em_ui_shell_get_resource(void);
extern GResource *em_ui_chart_get_resource(void);
extern GResource *em_ui_registry_get_resource(void);
extern GResource *em_ui_builder_get_resource(void);
extern GResource *em_ui_profile_get_resource(void);
extern GResource *em_ui_deploy_get_resource(void);
extern GResource *em_ui_sweeps_get_resource(void);

struct _EmApplication {
  GtkApplication parent_instance;
  GSettings *settings;      /* org.ember.Workbench; NULL without the schema */
  GSettings *interface;     /* org.gnome.desktop.interface, when it has color-scheme */
  gboolean system_dark;     /* GTK's own preference at startup (no desktop schema) */
  char *device;             /* --device: the training device of the first window, or NULL */
  guint sigterm_id, sigint_id; /* the main loop's SIGTERM and SIGINT sources */
};

G_DEFINE_FINAL_TYPE(EmApplication, em_application, GTK_TYPE_APPLICATION)

void em_ui_register_resources(void) {
  static gsize done = 0;
  if (!g_once_init_enter(&done)) return;
  g_resources_register(em_ui_shell_get_resource());
  g_resources_register(em_ui_chart_get_resource());
  g_resources_register(em_ui_registry_get_resource());
  g_resources_register(em_ui_builder_get_resource());
  g_resources_register(em_ui_profile_get_resource());
  g_resources_register(em_ui_deploy_get_resource());
  g_resources_register(em_ui_sweeps_get_resource());
  g_once_init_leave(&done, 1);
}

/* Where the workbench's own settings are kept. GLib's default backend is
 * dconf, which writes through the session bus: without one (a plain X
 * server, ssh -X, a container) every write is lost and the control that
 * made it snaps back. Then, and when there is no dconf at all (GLib's
 * memory backend, unless the environment asked for it), the settings go
 * to a key file, $XDG_CONFIG_HOME/ember/workbench.ini, and last. NULL: the
 * default backend works. */
GSettingsBackend *em_application_settings_backend(void) {
  GSettingsBackend *def = g_settings_backend_get_default();
  const char *type = def ? G_OBJECT_TYPE_NAME(def) : "";
  gboolean memory = g_str_equal(type, "GMemorySettingsBackend") && !g_getenv("GSETTINGS_BACKEND");
  gboolean dconf = g_str_equal(type, "DConfSettingsBackend");
  g_clear_object(&def);
  gboolean bus = g_getenv("DBUS_SESSION_BUS_ADDRESS") != NULL;
  if (!bus && g_get_user_runtime_dir()) {
    char *sock = g_build_filename(g_get_user_runtime_dir(), "bus", NULL);
    bus = g_file_test(sock, G_FILE_TEST_EXISTS);
    g_free(sock);
  }
  if (!memory && !(dconf && !bus)) return NULL;
  char *dir = g_build_filename(g_get_user_config_dir(), "ember", NULL);
  g_mkdir_with_parents(dir, 0700);
  char *file = g_build_filename(dir, "workbench.ini", NULL);
  GSettingsBackend *kf = g_keyfile_settings_backend_new(file, "/org/ember/Workbench/", "workbench");
  g_free(file);
  g_free(dir);
  return kf;
}

/* The schema installed, or compiled in the build tree for uninstalled runs. */
static GSettings *open_settings(const char *id, gboolean build_tree) {
  GSettingsSchemaSource *def = g_settings_schema_source_get_default();
  GSettingsSchema *schema = def ? g_settings_schema_source_lookup(def, id, TRUE) : NULL;
  if (!schema && build_tree) {
    GSettingsSchemaSource *src =
        g_settings_schema_source_new_from_directory(EM_BUILD_SCHEMA_DIR, def, FALSE, NULL);
    if (src) {
      schema = g_settings_schema_source_lookup(src, id, FALSE);
      g_settings_schema_source_unref(src);
    }
  }
  if (!schema) return NULL;
  /* ours only: the desktop's interface settings are read, never written */
  GSettingsBackend *backend = build_tree ? em_application_settings_backend() : NULL;
  GSettings *s = g_settings_new_full(schema, backend, NULL);
  if (backend) g_object_unref(backend);
  g_settings_schema_unref(schema);
  return s;
}

GSettings *em_application_open_settings(void) { return open_settings("org.ember.Workbench", TRUE); }

GSettings *em_application_get_settings(EmApplication *self) { return self->settings; }

gboolean em_application_is_dark(EmApplication *self) {
  char *pref = self->settings ? g_settings_get_string(self->settings, "color-scheme")
                              : g_strdup("system");
  gboolean dark;
  if (strcmp(pref, "dark") == 0) {
    dark = TRUE;
  } else if (strcmp(pref, "light") == 0) {
    dark = FALSE;
  } else if (self->interface) {
    char *cs = g_settings_get_string(self->interface, "color-scheme");
    dark = strcmp(cs, "prefer-dark") == 0;
    g_free(cs);
  } else {
    dark = self->system_dark;
  }
  g_free(pref);
  return dark;
}

static void apply_style(EmApplication *self) {
  GtkSettings *gs = gtk_settings_get_default();
  if (gs) g_object_set(gs, "gtk-application-prefer-dark-theme", em_application_is_dark(self), NULL);
}

static void on_scheme_changed(GSettings *s, const char *key, gpointer data) {
  apply_style(EM_APPLICATION(data));
}

/* ---- actions ------------------------------------------------------------ */

static void quit_now(GtkApplication *app) {
  GList *wins = g_list_copy(gtk_application_get_windows(app));
  for (GList *l = wins; l; l = l->next) gtk_window_destroy(l->data); /* stops a run */
  g_list_free(wins);
  g_application_quit(G_APPLICATION(app));
}

static void quit_after_confirm(EmBuilderPage *page, gpointer data) {
  (void)page;
  g_action_group_activate_action(G_ACTION_GROUP(data), "quit", NULL); /* the next window */
}

/* Ctrl+Q and the menu: each window with unsaved changes in its Builder
 * asks to save or discard them (Cancel keeps everything open), then all
 * close. */
static void quit_activated(GSimpleAction *a, GVariant *p, gpointer data) {
  GtkApplication *app = data;
  for (GList *l = gtk_application_get_windows(app); l; l = l->next)
    if (EM_IS_WINDOW(l->data) && em_window_has_unsaved(l->data)) {
      em_window_confirm_unsaved(l->data, "quitting", quit_after_confirm, app);
      return;
    }
  quit_now(app);
}

/* SIGTERM (a logout, `kill`) and SIGINT (Ctrl-C in the terminal) quit as
 * Ctrl+Q does: the windows close, which stops a run and records its end
 * with a final checkpoint, as `ember train` does on these signals. The
 * default action killed the process and left the run to be found
 * "killed". Nobody may be there to answer a question: unsaved changes in
 * the Builder stay in its recovery copy, offered at the next start. */
static gboolean on_quit_signal(gpointer data) {
  quit_now(GTK_APPLICATION(data));
  return G_SOURCE_CONTINUE;
}

static void preferences_activated(GSimpleAction *a, GVariant *p, gpointer data) {
  EmApplication *self = data;
  GtkWindow *parent = gtk_application_get_active_window(GTK_APPLICATION(self));
  GtkWidget *prefs = em_preferences_new(self->settings);
  if (parent) gtk_window_set_transient_for(GTK_WINDOW(prefs), parent);
  gtk_window_present(GTK_WINDOW(prefs));
}

static void about_activated(GSimpleAction *a, GVariant *p, gpointer data) {
  GtkApplication *app = data;
  gtk_show_about_dialog(gtk_application_get_active_window(app), "program-name",
                        "Ember Workbench", "logo-icon-name", "org.ember.Workbench", "comments",
                        "Build, train, profile and compare neural networks", "license-type",
                        GTK_LICENSE_MIT_X11, NULL);
}

static const GActionEntry app_actions[] = {
    {.name = "quit", .activate = quit_activated},
    {.name = "preferences", .activate = preferences_activated},
    {.name = "about", .activate = about_activated},
};

/* ---- GApplication ----------------------------------------------------------- */

static void em_application_startup(GApplication *app) {
  EmApplication *self = EM_APPLICATION(app);
  G_APPLICATION_CLASS(em_application_parent_class)->startup(app);
  em_ui_register_resources();
  g_action_map_add_action_entries(G_ACTION_MAP(app), app_actions, G_N_ELEMENTS(app_actions), app);
  self->sigterm_id = g_unix_signal_add(SIGTERM, on_quit_signal, app);
  self->sigint_id = g_unix_signal_add(SIGINT, on_quit_signal, app);
  GtkApplication *ga = GTK_APPLICATION(app);
  static const char *const pages[] = {"builder",  "data",     "train",  "memory", "profiler",
                                      "runs",     "compare",  "registry", "deploy", "sweeps"};
  for (int i = 0; i < 10; i++) { /* Ctrl+1 ... Ctrl+9, then Ctrl+0 */
    char action[64], accel[32];
    g_snprintf(action, sizeof action, "win.page('%s')", pages[i]);
    g_snprintf(accel, sizeof accel, "<Control>%d", (i + 1) % 10);
    const char *accels[] = {accel, NULL};
    gtk_application_set_accels_for_action(ga, action, accels);
  }
  const char *quit[] = {"<Control>q", NULL}, *open[] = {"<Control>o", NULL},
             *prefs[] = {"<Control>comma", NULL}, *help[] = {"<Control>question", "F1", NULL};
  gtk_application_set_accels_for_action(ga, "app.quit", quit);
  gtk_application_set_accels_for_action(ga, "win.open", open);
  const char *save[] = {"<Control>s", NULL}, *save_as[] = {"<Control><Shift>s", NULL};
  gtk_application_set_accels_for_action(ga, "win.save", save);
  gtk_application_set_accels_for_action(ga, "win.save-as", save_as);
  gtk_application_set_accels_for_action(ga, "app.preferences", prefs);
  gtk_application_set_accels_for_action(ga, "win.show-help-overlay", help);

  GtkCssProvider *css = gtk_css_provider_new();
  gtk_css_provider_load_from_resource(css, "/org/ember/Workbench/shell/style.css");
  gtk_style_context_add_provider_for_display(gdk_display_get_default(), GTK_STYLE_PROVIDER(css),
                                             GTK_STYLE_PROVIDER_PRIORITY_APPLICATION);
  g_object_unref(css);
  GtkIconTheme *icons = gtk_icon_theme_get_for_display(gdk_display_get_default());
  if (!gtk_icon_theme_has_icon(icons, "org.ember.Workbench")) /* not installed: the source's */
    gtk_icon_theme_add_search_path(icons, EM_SOURCE_ICONS_DIR);
  gtk_window_set_default_icon_name("org.ember.Workbench");

  GtkSettings *gs = gtk_settings_get_default();
  if (gs) g_object_get(gs, "gtk-application-prefer-dark-theme", &self->system_dark, NULL);
  self->settings = open_settings("org.ember.Workbench", TRUE);
  GSettings *iface = open_settings("org.gnome.desktop.interface", FALSE);
  if (iface) {
    GSettingsSchema *sc = NULL;
    g_object_get(iface, "settings-schema", &sc, NULL);
    if (sc && g_settings_schema_has_key(sc, "color-scheme")) self->interface = g_object_ref(iface);
    if (sc) g_settings_schema_unref(sc);
    g_object_unref(iface);
  }
  if (self->settings)
    g_signal_connect_object(self->settings, "changed::color-scheme",
                            G_CALLBACK(on_scheme_changed), self, 0);
  if (self->interface)
    g_signal_connect_object(self->interface, "changed::color-scheme",
                            G_CALLBACK(on_scheme_changed), self, 0);
  apply_style(self);
}

static void em_application_activate(GApplication *app) {
  EmApplication *self = EM_APPLICATION(app);
  GtkWindow *win = gtk_application_get_active_window(GTK_APPLICATION(app));
  if (!win) {
    char *dir = self->settings ? g_settings_get_string(self->settings, "registry-dir") : NULL;
    EmAppState *state = em_app_state_new(dir && dir[0] ? dir : NULL);
    g_free(dir);
    EmWindow *w = em_window_new(GTK_APPLICATION(app), state);
    g_object_unref(state);
    int threads = self->settings ? g_settings_get_int(self->settings, "default-threads") : 0;
    GtkWidget *train = em_window_get_page(w, "train");
    if (threads > 0 && train) em_train_page_set_value(EM_TRAIN_PAGE(train), "threads", threads);
    g_autoptr(GError) error = NULL;
    if (self->device && train &&
        !em_train_page_set_device(EM_TRAIN_PAGE(train), self->device, &error))
      g_printerr("ember-workbench: %s\n", error->message); /* the Train page says it too */
    win = GTK_WINDOW(w);
  }
  gtk_window_present(win);
}

/* --device: its syntax is checked here (exit 2, as `ember train`); a
 * device that is absent is reported by the Train page, which stays on
 * the CPU, so the workbench still opens. */
static gint em_application_handle_local_options(GApplication *app, GVariantDict *options) {
  EmApplication *self = EM_APPLICATION(app);
  const char *device = NULL;
  if (g_variant_dict_lookup(options, "device", "&s", &device)) {
    em_device d;
    em_error err = {0};
    if (em_device_parse(device, &d, &err) != EM_OK) {
      g_printerr("ember-workbench: --device: %s\n", err.msg);
      return 2;
    }
    g_free(self->device);
    self->device = g_strdup(device);
  }
  return -1; /* go on */
}

static void em_application_finalize(GObject *obj) {
  g_free(EM_APPLICATION(obj)->device);
  G_OBJECT_CLASS(em_application_parent_class)->finalize(obj);
}

static void em_application_dispose(GObject *obj) {
  EmApplication *self = EM_APPLICATION(obj);
  g_clear_handle_id(&self->sigterm_id, g_source_remove);
  g_clear_handle_id(&self->sigint_id, g_source_remove);
  g_clear_object(&self->settings);
  g_clear_object(&self->interface);
  G_OBJECT_CLASS(em_application_parent_class)->dispose(obj);
}

static void em_application_class_init(EmApplicationClass *klass) {
  G_OBJECT_CLASS(klass)->dispose = em_application_dispose;
  G_OBJECT_CLASS(klass)->finalize = em_application_finalize;
  G_APPLICATION_CLASS(klass)->handle_local_options = em_application_handle_local_options;
  G_APPLICATION_CLASS(klass)->startup = em_application_startup;
  G_APPLICATION_CLASS(klass)->activate = em_application_activate;
}

static void em_application_init(EmApplication *self) {
  g_application_add_main_option(G_APPLICATION(self), "device", 0, 0, G_OPTION_ARG_STRING,
                                "Train on DEVICE: cpu, cuda, cuda:N (ref: the slow reference "
                                "device, for tests)",
                                "DEVICE");
}

EmApplication *em_application_new(void) {
  return g_object_new(EM_TYPE_APPLICATION, "application-id", "org.ember.Workbench", "flags",
                      G_APPLICATION_DEFAULT_FLAGS, NULL);
}
