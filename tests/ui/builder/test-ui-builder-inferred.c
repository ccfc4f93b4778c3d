/* test-ui-builder-inferred.c: inferred fields and invalid models in the
 * Builder (issue 32, item 6), through the real widgets under Xvfb. An
 * inferred field (Linear's in_features) shows "auto (128)", the value
 * its input gives, with an "auto" switch: unticked it becomes an explicit
 * number starting from that value, ticked again the key goes (the way
 * back to automatic). A model invalid at one node keeps the shapes of the
 * nodes before it. Before: in_features read 1 with its minus button off,
 * clearing it set an explicit 1 and an error with no way back, and an
 * invalid model blanked every row. */
#include <jansson.h>
#include <string.h>

#include "em-builder-page.h"
#include "ui-test-util.h"

static GtkWidget *open_page(const char *model) {
  GtkWidget *page = em_builder_page_new(NULL);
  ui_test_show(page, 1200, 700);
  char *path = g_build_filename(g_getenv("EMBER_SOURCE_ROOT"), "data", "models", model, NULL);
  GFile *f = g_file_new_for_path(path);
  g_assert_true(em_builder_page_open(EM_BUILDER_PAGE(page), f, NULL));
  g_object_unref(f);
  g_free(path);
  return page;
}

/* The selected node's object in the document (json_decref). */
static json_t *node_json(GtkWidget *page, const char *name) {
  char *text = em_builder_page_dup_json(EM_BUILDER_PAGE(page));
  json_t *doc = json_loads(text, 0, NULL);
  g_free(text);
  json_t *nodes = json_object_get(doc, "nodes"), *found = NULL;
  for (size_t i = 0; i < json_array_size(nodes); i++)
    if (!g_strcmp0(json_string_value(json_object_get(json_array_get(nodes, i), "name")), name))
      found = json_incref(json_array_get(nodes, i));
  json_decref(doc);
  return found;
}

/* The text of the row's third column (the output shape). */
static char *row_shape(GtkWidget *page, const char *node) {
  char *wname = g_strdup_printf("node-%s", node);
  GtkWidget *row = ui_test_find_named(page, wname);
  g_free(wname);
  g_assert_nonnull(row);
  GtkWidget *label = ui_test_find(row, GTK_TYPE_LABEL, 2);
  return g_strdup(gtk_label_get_text(GTK_LABEL(label)));
}

static void test_auto_field(void) {
  GtkWidget *page = open_page("fmnist-mlp.json");
  EmBuilderPage *bp = EM_BUILDER_PAGE(page);
  g_assert_true(em_builder_page_select(bp, "fc2"));
  json_t *fc1 = node_json(page, "fc1");
  json_int_t width = json_integer_value(json_object_get(fc1, "out_features"));
  json_decref(fc1);
  g_assert_cmpint(width, >, 1);
  GtkWidget *spin = ui_test_find_named(page, "attr-in_features");
  GtkWidget *check = ui_test_find_named(page, "auto-in_features");
  GtkWidget *shown = ui_test_find_named(page, "auto-value-in_features");
  g_assert_nonnull(spin);
  g_assert_nonnull(check);
  g_assert_nonnull(shown);
  char *want = g_strdup_printf("auto (%lld)", (long long)width);
  g_assert_cmpstr(gtk_label_get_text(GTK_LABEL(shown)), ==, want);
  g_assert_true(gtk_widget_get_mapped(shown)); /* in place of the number */
  g_assert_false(gtk_widget_get_mapped(spin));
  g_assert_true(gtk_check_button_get_active(GTK_CHECK_BUTTON(check)));
  ui_test_screenshot(page, "builder-auto-field");

  gtk_check_button_set_active(GTK_CHECK_BUTTON(check), FALSE); /* explicit */
  json_t *fc2 = node_json(page, "fc2");
  g_assert_cmpint(json_integer_value(json_object_get(fc2, "in_features")), ==, width);
  json_decref(fc2);
  ui_test_spin(50);
  g_assert_true(gtk_widget_get_mapped(spin));
  g_assert_cmpfloat(gtk_spin_button_get_value(GTK_SPIN_BUTTON(spin)), ==, (double)width);
  g_assert_null(em_builder_page_get_error(bp)); /* the inferred value is right */

  gtk_check_button_set_active(GTK_CHECK_BUTTON(check), TRUE); /* back to automatic */
  fc2 = node_json(page, "fc2");
  g_assert_null(json_object_get(fc2, "in_features"));
  json_decref(fc2);
  g_assert_null(em_builder_page_get_error(bp));
  ui_test_spin(50);
  g_assert_true(gtk_widget_get_mapped(shown));
  g_free(want);
  gtk_window_destroy(GTK_WINDOW(gtk_widget_get_root(page)));
}

static void test_invalid_keeps_upstream(void) {
  GtkWidget *page = open_page("fmnist-mlp.json");
  EmBuilderPage *bp = EM_BUILDER_PAGE(page);
  char *fc1_before = row_shape(page, "fc1");
  g_assert_true(g_str_has_prefix(fc1_before, "["));
  g_assert_true(em_builder_page_select(bp, "fc2"));
  gtk_check_button_set_active(GTK_CHECK_BUTTON(ui_test_find_named(page, "auto-in_features")),
                              FALSE);
  /* a wrong explicit value: the model is invalid at fc2 */
  gtk_spin_button_set_value(GTK_SPIN_BUTTON(ui_test_find_named(page, "attr-in_features")), 5);
  g_assert_nonnull(em_builder_page_get_error(bp));
  g_assert_cmpstr(em_builder_page_get_error_node(bp), ==, "fc2");
  char *fc1 = row_shape(page, "fc1"), *fc2 = row_shape(page, "fc2"), *flat = row_shape(page, "flatten");
  g_assert_cmpstr(fc1, ==, fc1_before); /* upstream of the error: still shown */
  g_assert_true(g_str_has_prefix(flat, "["));
  g_assert_cmpstr(fc2, ==, "—"); /* the node in error and after it: unknown */
  ui_test_screenshot(page, "builder-invalid-upstream");
  g_free(fc1), g_free(fc2), g_free(flat), g_free(fc1_before);
  gtk_window_destroy(GTK_WINDOW(gtk_widget_get_root(page)));
}

int main(int argc, char **argv) {
  ui_test_init(&argc, &argv);
  g_test_add_func("/ui/builder/auto-field", test_auto_field);
  g_test_add_func("/ui/builder/invalid-keeps-upstream", test_invalid_keeps_upstream);
  return g_test_run();
}
