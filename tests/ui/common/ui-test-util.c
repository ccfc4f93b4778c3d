/* ui-test-util.c: see the header. */
#include "ui-test-util.h"

#include <glib/gstdio.h>
#include <stdlib.h>

#include "em-application.h"

static char *state_dir;

/* The state folder and what the Builder's recovery copy left in it. */
static void remove_state_dir(void) {
  char *ember = g_build_filename(state_dir, "ember", NULL);
  GDir *d = g_dir_open(ember, 0, NULL);
  for (const char *f; d && (f = g_dir_read_name(d));) {
    char *p = g_build_filename(ember, f, NULL);
    g_unlink(p);
    g_free(p);
  }
  if (d) g_dir_close(d);
  g_rmdir(ember);
  g_rmdir(state_dir);
  g_free(ember);
}

void ui_test_init(int *argc, char ***argv) {
  /* A state folder of this process's own (before GLib reads it): the
   * Builder's recovery copy of unsaved changes is never the person's, and
   * one test's unsaved model is never offered to the next. */
  state_dir = g_dir_make_tmp("ember-ui-state-XXXXXX", NULL);
  if (state_dir) {
    g_setenv("XDG_STATE_HOME", state_dir, TRUE);
    atexit(remove_state_dir);
  }
  g_setenv("GSETTINGS_BACKEND", "memory", TRUE);
  g_setenv("GSK_RENDERER", "cairo", FALSE);
  g_setenv("GTK_A11Y", "none", FALSE); /* no session bus under xvfb-run: no AT-SPI warning */
  gtk_test_init(argc, argv, NULL);
  em_ui_register_resources(); /* every ui/ folder that built a GResource */
}

gboolean ui_test_wait(gboolean (*cond)(gpointer), gpointer data, int timeout_ms) {
  gint64 end = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
  while (!cond(data)) {
    if (g_get_monotonic_time() > end) return cond(data);
    g_main_context_iteration(NULL, FALSE);
    g_usleep(1000);
  }
  return TRUE;
}

void ui_test_spin(int ms) {
  gint64 end = g_get_monotonic_time() + (gint64)ms * 1000;
  while (g_get_monotonic_time() < end) {
    g_main_context_iteration(NULL, FALSE);
    g_usleep(1000);
  }
}

static gboolean is_drawn(gpointer w) {
  return gtk_widget_get_mapped(w) && gtk_widget_get_width(w) > 0;
}

GtkWindow *ui_test_show(GtkWidget *widget, int width, int height) {
  GtkRoot *root = gtk_widget_get_root(widget);
  GtkWindow *win;
  if (root && GTK_IS_WINDOW(root)) {
    win = GTK_WINDOW(root);
  } else {
    win = GTK_WINDOW(gtk_window_new());
    gtk_window_set_child(win, widget);
  }
  gtk_window_set_default_size(win, width, height);
  gtk_window_present(win);
  ui_test_wait(is_drawn, widget, 5000);
  ui_test_spin(100);
  return win;
}

char *ui_test_screenshot(GtkWidget *widget, const char *name) {
  const char *dir = g_getenv("EMBER_SCREENSHOT_DIR");
  char *fallback = NULL;
  if (!dir) {
    const char *build = g_getenv("EMBER_BUILD_ROOT");
    fallback = g_build_filename(build ? build : ".", "tests", "ui", "screenshots", NULL);
    dir = fallback;
  }
  g_mkdir_with_parents(dir, 0755);
  char *path = g_strdup_printf("%s/%s.png", dir, name);
  g_free(fallback);
  /* A widget whose frame is not drawn yet (a loaded machine) renders to
   * nothing: let the main loop draw it, for up to 5 s. */
  GskRenderNode *node = NULL;
  int w = 0, h = 0;
  for (int tries = 0; tries < 50 && !node; tries++) {
    if (tries) ui_test_spin(100);
    w = gtk_widget_get_width(widget);
    h = gtk_widget_get_height(widget);
    GdkPaintable *p = gtk_widget_paintable_new(widget);
    GtkSnapshot *s = gtk_snapshot_new();
    gdk_paintable_snapshot(p, s, w, h);
    node = gtk_snapshot_free_to_node(s);
    g_object_unref(p);
  }
  if (!node || w <= 0 || h <= 0) {
    g_test_fail_printf("nothing to render for '%s' (%dx%d)", name, w, h);
    if (node) gsk_render_node_unref(node);
    g_free(path);
    return NULL;
  }
  GskRenderer *r = gtk_native_get_renderer(gtk_widget_get_native(widget));
  GdkTexture *tex = gsk_renderer_render_texture(r, node, &GRAPHENE_RECT_INIT(0, 0, w, h));
  gboolean ok = gdk_texture_save_to_png(tex, path);
  g_object_unref(tex);
  gsk_render_node_unref(node);
  if (!ok) {
    g_test_fail_printf("could not write %s", path);
    g_free(path);
    return NULL;
  }
  return path;
}

void ui_test_collect(GtkWidget *w, GType t, GPtrArray *out) {
  if (G_TYPE_CHECK_INSTANCE_TYPE(w, t)) g_ptr_array_add(out, w);
  for (GtkWidget *c = gtk_widget_get_first_child(w); c; c = gtk_widget_get_next_sibling(c))
    ui_test_collect(c, t, out);
}

GtkWidget *ui_test_find(GtkWidget *w, GType t, guint index) {
  GPtrArray *all = g_ptr_array_new();
  ui_test_collect(w, t, all);
  GtkWidget *hit = index < all->len ? all->pdata[index] : NULL;
  g_ptr_array_unref(all);
  g_assert_nonnull(hit);
  return hit;
}

GtkWidget *ui_test_find_named(GtkWidget *w, const char *name) {
  if (!g_strcmp0(gtk_widget_get_name(w), name)) return w;
  for (GtkWidget *c = gtk_widget_get_first_child(w); c; c = gtk_widget_get_next_sibling(c)) {
    GtkWidget *f = ui_test_find_named(c, name);
    if (f) return f;
  }
  return NULL;
}
