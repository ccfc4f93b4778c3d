/* em-profiler-page.h: the Profiler page: the op table of the latest
 * profiled window (by op or by layer) in a sortable column view, and a
 * timeline strip of the window. It fills on the app state's
 * "profile-ready"; "Profile now" (action profiler.run) profiles a few
 * training steps of the current spec in a worker when no training runs.
 * Selecting a row selects its layer in the builder (em_app_state_select_layer). */
#pragma once

#include <gtk/gtk.h>

#include "em-app-state.h"

G_BEGIN_DECLS

#define EM_TYPE_PROFILER_PAGE (em_profiler_page_get_type())
G_DECLARE_FINAL_TYPE(EmProfilerPage, em_profiler_page, EM, PROFILER_PAGE, GtkBox)

GtkWidget *em_profiler_page_new(EmAppState *state);
/* Profiles `steps` steps of the app state's spec (on its dataset, or the
 * spec's, or synthetic when dataset is "synthetic") in a worker; emits
 * "profile-ready" on the app state when done. FALSE (and the reason on
 * the page) when a run or a profile is already going or there is no spec. */
gboolean em_profiler_page_profile_now(EmProfilerPage *self, int steps);
gboolean em_profiler_page_is_busy(EmProfilerPage *self);
/* Rows in the table; the name and layer of row i in display order;
 * selects row i (as a click does). */
guint em_profiler_page_get_n_rows(EmProfilerPage *self);
const char *em_profiler_page_get_row_name(EmProfilerPage *self, guint i);
void em_profiler_page_select_row(EmProfilerPage *self, guint i);
/* GTK_INVALID_LIST_POSITION: none. */
guint em_profiler_page_get_selected_row(EmProfilerPage *self);
/* By layer (TRUE) or by op. */
void em_profiler_page_set_by_layer(EmProfilerPage *self, gboolean by_layer);
int em_profiler_page_get_n_spans(EmProfilerPage *self);

G_END_DECLS
