/* em-application.h: ember-workbench's GtkApplication (id
 * org.ember.Workbench): registers every ui/ folder's GResource, installs
 * the accelerators and app actions (quit, preferences, about), follows the
 * system's light/dark preference unless the person chose one
 * (GSettings org.ember.Workbench color-scheme), and opens windows.
 * --device DEVICE (cpu, cuda, cuda:N, ref) chooses the first window's
 * training device: a malformed name exits with status 2; a device that is
 * not there leaves the CPU chosen, with the reason on the Train page and
 * stderr. */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

#define EM_TYPE_APPLICATION (em_application_get_type())
G_DECLARE_FINAL_TYPE(EmApplication, em_application, EM, APPLICATION, GtkApplication)

EmApplication *em_application_new(void);
/* The preferences (NULL when the schema is neither installed nor in the
 * build tree: the workbench then runs on its defaults). */
GSettings *em_application_get_settings(EmApplication *self);
/* The backend the workbench's settings use when GLib's default would lose
 * them (dconf without a session bus, or no dconf): a key file in
 * $XDG_CONFIG_HOME/ember/workbench.ini; NULL when the default keeps them.
 * And org.ember.Workbench's settings opened on it (NULL without the
 * schema). */
GSettingsBackend *em_application_settings_backend(void);
GSettings *em_application_open_settings(void);
/* Registers the GResources of every ui/ folder that has one (idempotent). */
void em_ui_register_resources(void);
/* "system", "light" or "dark" -> whether the dark style applies now. */
gboolean em_application_is_dark(EmApplication *self);

G_END_DECLS
