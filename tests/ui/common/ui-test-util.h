/* ui-test-util.h: what the GTK tests share: running the main loop until a
 * condition holds (bounded), and rendering a widget to a PNG in the
 * screenshots folder ($EMBER_SCREENSHOT_DIR, default
 * <build>/tests/ui/screenshots), which the README shows. */
#pragma once

#include <gtk/gtk.h>

/* Registers every ui/ folder's GResource (tests link libember-ui); points
 * XDG_STATE_HOME at a folder of the process's own (removed at exit). */
void ui_test_init(int *argc, char ***argv);
/* Iterates the default main context until cond(data) or timeout_ms;
 * returns cond's last value. */
gboolean ui_test_wait(gboolean (*cond)(gpointer), gpointer data, int timeout_ms);
/* Iterates for ms milliseconds. */
void ui_test_spin(int ms);
/* Puts widget in a window of width x height (if it has no root yet),
 * presents it and waits until it is mapped and laid out. */
GtkWindow *ui_test_show(GtkWidget *widget, int width, int height);
/* Renders widget (mapped) to <screenshots>/<name>.png; returns the path
 * (g_free) or NULL with a test failure. */
char *ui_test_screenshot(GtkWidget *widget, const char *name);
/* Appends the widgets of type t under w (w included), in tree order. */
void ui_test_collect(GtkWidget *w, GType t, GPtrArray *out);
/* The index-th widget of type t under w; a test failure when absent. */
GtkWidget *ui_test_find(GtkWidget *w, GType t, guint index);
/* The first widget under w (w included, in tree order) whose widget name
 * (gtk_widget_set_name) is name, or NULL. */
GtkWidget *ui_test_find_named(GtkWidget *w, const char *name);
