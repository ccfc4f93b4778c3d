/* em-window.h: the workbench's main window: a sidebar of pages (Builder,
 * Data, Train, Memory, Profiler, Runs, Compare, Registry) over one
 * EmAppState. Actions: win.page('<name>') (Ctrl+1..8), win.open (Ctrl+O,
 * a spec file into the builder), win.save (Ctrl+S), win.save-as
 * (Ctrl+Shift+S), win.undo, win.redo (the Builder's), win.show-help-overlay
 * (the shortcuts window). Closing it with unsaved changes in the Builder
 * asks to save or discard them first. */
#pragma once

#include <gtk/gtk.h>

#include "em-app-state.h"
#include "em-builder-page.h"

G_BEGIN_DECLS

#define EM_TYPE_WINDOW (em_window_get_type())
G_DECLARE_FINAL_TYPE(EmWindow, em_window, EM, WINDOW, GtkApplicationWindow)

/* app may be NULL (tests without an application). */
EmWindow *em_window_new(GtkApplication *app, EmAppState *state);
EmAppState *em_window_get_state(EmWindow *self);
/* The page names, in sidebar order, NULL-terminated. */
const char *const *em_window_page_names(void);
GtkWidget *em_window_get_page(EmWindow *self, const char *name);
void em_window_show_page(EmWindow *self, const char *name);
const char *em_window_get_visible_page(EmWindow *self);
/* TRUE when the Builder holds unsaved changes. */
gboolean em_window_has_unsaved(EmWindow *self);
/* Shows the Builder and asks to save or discard its unsaved changes
 * before `doing` (em_builder_page_confirm_discard); fn runs once they
 * are saved or discarded, never on Cancel. */
void em_window_confirm_unsaved(EmWindow *self, const char *doing, EmBuilderProceed fn,
                               gpointer data);
/* Loads a spec file into the builder (or the state, without a builder). */
void em_window_open_spec(EmWindow *self, GFile *file);

G_END_DECLS
