/* em-preferences.c: the preferences dialog (see the header). */
#include "em-preferences.h"

#include <string.h>

struct _EmPreferences {
  GtkWindow parent_instance;
  GSettings *settings;
  GtkWidget *style_dropdown, *registry_entry, *threads_spin, *note_label;
};

G_DEFINE_FINAL_TYPE(EmPreferences, em_preferences, GTK_TYPE_WINDOW)

static const char *const schemes[] = {"system", "light", "dark"};

static gboolean scheme_to_index(GValue *value, GVariant *variant, gpointer data) {
  const char *s = g_variant_get_string(variant, NULL);
  guint i = 0;
  for (guint k = 0; k < G_N_ELEMENTS(schemes); k++)
    if (strcmp(s, schemes[k]) == 0) i = k;
  g_value_set_uint(value, i);
  return TRUE;
}

static GVariant *index_to_scheme(const GValue *value, const GVariantType *type, gpointer data) {
  guint i = g_value_get_uint(value);
  return g_variant_new_string(schemes[i < G_N_ELEMENTS(schemes) ? i : 0]);
}

static void em_preferences_dispose(GObject *obj) {
  EmPreferences *self = EM_PREFERENCES(obj);
  gtk_widget_dispose_template(GTK_WIDGET(obj), EM_TYPE_PREFERENCES);
  g_clear_object(&self->settings);
  G_OBJECT_CLASS(em_preferences_parent_class)->dispose(obj);
}

static void em_preferences_class_init(EmPreferencesClass *klass) {
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  G_OBJECT_CLASS(klass)->dispose = em_preferences_dispose;
  gtk_widget_class_set_template_from_resource(wc, "/org/ember/Workbench/shell/em-preferences.ui");
  gtk_widget_class_bind_template_child(wc, EmPreferences, style_dropdown);
  gtk_widget_class_bind_template_child(wc, EmPreferences, registry_entry);
  gtk_widget_class_bind_template_child(wc, EmPreferences, threads_spin);
  gtk_widget_class_bind_template_child(wc, EmPreferences, note_label);
  gtk_widget_class_add_binding_action(wc, GDK_KEY_Escape, 0, "window.close", NULL);
}

static void em_preferences_init(EmPreferences *self) { gtk_widget_init_template(GTK_WIDGET(self)); }

GtkWidget *em_preferences_new(GSettings *settings) {
  EmPreferences *self = g_object_new(EM_TYPE_PREFERENCES, NULL);
  if (!settings) {
    gtk_label_set_text(GTK_LABEL(self->note_label),
                       "These preferences cannot be saved: the org.ember.Workbench settings "
                       "schema is not installed (install the workbench, or run it from its "
                       "build folder).");
    gtk_widget_set_visible(self->note_label, TRUE);
    gtk_widget_set_sensitive(self->style_dropdown, FALSE);
    gtk_widget_set_sensitive(self->registry_entry, FALSE);
    gtk_widget_set_sensitive(self->threads_spin, FALSE);
    return GTK_WIDGET(self);
  }
  self->settings = g_object_ref(settings);
  g_settings_bind_with_mapping(settings, "color-scheme", self->style_dropdown, "selected",
                               G_SETTINGS_BIND_DEFAULT, scheme_to_index, index_to_scheme, NULL,
                               NULL);
  g_settings_bind(settings, "registry-dir", self->registry_entry, "text", G_SETTINGS_BIND_DEFAULT);
  g_settings_bind(settings, "default-threads", self->threads_spin, "value",
                  G_SETTINGS_BIND_DEFAULT);
  return GTK_WIDGET(self);
}
