/* em-preferences.h: the preferences dialog: style (follow the system,
 * light, dark), the default registry folder, the default thread count;
 * bound to GSettings org.ember.Workbench (NULL: shown read-only, with a
 * note saying why). */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

#define EM_TYPE_PREFERENCES (em_preferences_get_type())
G_DECLARE_FINAL_TYPE(EmPreferences, em_preferences, EM, PREFERENCES, GtkWindow)

GtkWidget *em_preferences_new(GSettings *settings);

G_END_DECLS
