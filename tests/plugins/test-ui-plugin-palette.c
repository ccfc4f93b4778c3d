/* test-ui-plugin-palette.c: the workbench's builder palette lists the
 * layer types of loaded plugins (the real plugins of plugins/, loaded as
 * ember-workbench loads them at startup), and a click on one adds a node.
 * Runs under Xvfb. */
#include <glib/gstdio.h>
#include <string.h>

#include "em-builder-page.h"
#include "em-plugin.h"
#include "ui-test-util.h"

GResource *em_ui_builder_get_resource(void);

static GtkWidget *find_named(GtkWidget *w, const char *name) {
  if (!g_strcmp0(gtk_widget_get_name(w), name)) return w;
  for (GtkWidget *c = gtk_widget_get_first_child(w); c; c = gtk_widget_get_next_sibling(c)) {
    GtkWidget *f = find_named(c, name);
    if (f) return f;
  }
  return NULL;
}

static void test_palette(void) {
  g_assert_cmpint(em_plugins_load_dir(g_getenv("EMBER_PLUGIN_DIR"), "test"), ==, 0);
  g_assert_nonnull(em_layer_type_find("SEBlock"));
  g_autofree char *dir = g_dir_make_tmp("ember-ui-plugins-XXXXXX", NULL);
  EmAppState *state = em_app_state_new(dir);
  GtkWidget *page = em_builder_page_new(state);
  GtkWindow *win = ui_test_show(page, 1000, 600);
  GtkWidget *row = find_named(page, "palette-SEBlock");
  g_assert_nonnull(row);
  g_signal_emit_by_name(gtk_widget_get_parent(row), "row-activated", row);
  g_assert_cmpstr(em_builder_page_get_selected(EM_BUILDER_PAGE(page)), ==, "seblock1");
  gtk_window_destroy(win);
  g_object_unref(state);
  g_rmdir(dir);
}

int main(int argc, char **argv) {
  ui_test_init(&argc, &argv);
  g_resources_register(em_ui_builder_get_resource());
  g_test_add_func("/plugins/ui/palette", test_palette);
  return g_test_run();
}
