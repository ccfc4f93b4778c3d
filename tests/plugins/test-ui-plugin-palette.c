/* test-ui-plugin-palette.c: the workbench shows what loaded plugins (the
 * real plugins of plugins/, loaded as ember-workbench loads them at
 * startup) add: the builder palette lists their layer types and a click
 * on one adds a node; the Data page lists their dataset kinds and loads
 * one (a folder of PNGs through the png-folder plugin). Runs under Xvfb. */
#include <glib/gstdio.h>
#include <png.h>
#include <string.h>

#include "em-builder-page.h"
#include "em-data-page.h"
#include "em-plugin.h"
#include "ui-test-util.h"

GResource *em_ui_builder_get_resource(void);

static void test_palette(void) {
  g_assert_nonnull(em_layer_type_find("SEBlock"));
  g_autofree char *dir = g_dir_make_tmp("ember-ui-plugins-XXXXXX", NULL);
  EmAppState *state = em_app_state_new(dir);
  GtkWidget *page = em_builder_page_new(state);
  GtkWindow *win = ui_test_show(page, 1000, 600);
  GtkWidget *row = ui_test_find_named(page, "palette-SEBlock");
  g_assert_nonnull(row);
  g_signal_emit_by_name(gtk_widget_get_parent(row), "row-activated", row);
  g_assert_cmpstr(em_builder_page_get_selected(EM_BUILDER_PAGE(page)), ==, "seblock1");
  gtk_window_destroy(win);
  g_object_unref(state);
  g_rmdir(dir);
}

/* dir/<class>/<i>.png: 8x8 grey images, n per class. */
static void write_png_folder(const char *dir, int classes, int n) {
  for (int c = 0; c < classes; c++) {
    g_autofree char *sub = g_strdup_printf("%s/class%d", dir, c);
    g_assert_cmpint(g_mkdir_with_parents(sub, 0755), ==, 0);
    for (int i = 0; i < n; i++) {
      png_image img = {.version = PNG_IMAGE_VERSION, .width = 8, .height = 8,
                       .format = PNG_FORMAT_GRAY};
      unsigned char px[64];
      for (int k = 0; k < 64; k++) px[k] = (unsigned char)(c * 100 + i * 7 + k);
      g_autofree char *path = g_strdup_printf("%s/%d.png", sub, i);
      g_assert_true(png_image_write_to_file(&img, path, 0, px, 0, NULL));
    }
  }
}

static gboolean data_loaded(gpointer page) { return !em_data_page_is_loading(page); }

static void test_data_page(void) {
  g_assert_nonnull(em_dataset_type_find("png-folder"));
  g_autofree char *dir = g_dir_make_tmp("ember-ui-pngs-XXXXXX", NULL);
  write_png_folder(dir, 3, 4);
  g_autofree char *home = g_dir_make_tmp("ember-ui-plugins-XXXXXX", NULL);
  EmAppState *state = em_app_state_new(home);
  GtkWidget *page = em_data_page_new(state);
  GtkWindow *win = ui_test_show(page, 900, 600);
  /* the kind dropdown offers the plugin's kind after the built-in ones */
  GtkDropDown *dd = GTK_DROP_DOWN(ui_test_find(page, GTK_TYPE_DROP_DOWN, 0));
  g_assert_nonnull(dd);
  GListModel *names = gtk_drop_down_get_model(dd);
  guint n = g_list_model_get_n_items(names), found = G_MAXUINT;
  for (guint i = 0; i < n; i++)
    if (!strcmp(gtk_string_list_get_string(GTK_STRING_LIST(names), i), "png-folder (plugin)"))
      found = i;
  g_assert_cmpuint(found, !=, G_MAXUINT);
  em_data_page_load(EM_DATA_PAGE(page), "png-folder", dir);
  g_assert_true(ui_test_wait(data_loaded, page, 10000));
  g_assert_null(em_data_page_get_error(EM_DATA_PAGE(page)));
  g_assert_cmpint(em_data_page_get_n_samples(EM_DATA_PAGE(page)), ==, 12);
  g_assert_cmpint(em_data_page_get_n_classes(EM_DATA_PAGE(page)), ==, 3);
  for (int c = 0; c < 3; c++) g_assert_cmpint(em_data_page_get_class_count(EM_DATA_PAGE(page), c), ==, 4);
  gtk_window_destroy(win);
  g_object_unref(state);
  g_rmdir(home);
  for (int c = 0; c < 3; c++) {
    for (int i = 0; i < 4; i++) {
      g_autofree char *path = g_strdup_printf("%s/class%d/%d.png", dir, c, i);
      g_remove(path);
    }
    g_autofree char *sub = g_strdup_printf("%s/class%d", dir, c);
    g_rmdir(sub);
  }
  g_rmdir(dir);
}

int main(int argc, char **argv) {
  ui_test_init(&argc, &argv);
  g_resources_register(em_ui_builder_get_resource());
  /* as ember-workbench does at startup, once */
  g_assert_cmpint(em_plugins_load_dir(g_getenv("EMBER_PLUGIN_DIR"), "test"), ==, 0);
  g_test_add_func("/plugins/ui/palette", test_palette);
  g_test_add_func("/plugins/ui/data-page", test_data_page);
  return g_test_run();
}
