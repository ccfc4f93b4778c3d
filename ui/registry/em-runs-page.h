/* em-runs-page.h: the Runs page: the registry's runs in a sortable,
 * filterable table (text, status, model), multi-selection, delete (after a
 * confirmation), key=value tags, and Compare (two or more selected): it
 * hands the ids to the Compare page and switches to it ("win.page"
 * "compare"). Made, it reads the registry once (em_runs_page_new: on the
 * calling thread; em_runs_page_new_async, the window's: on the worker);
 * after that it reloads on "registry-changed", at the
 * end of a run, every 2 s while a run is training and on its Reload
 * button, but only while it is shown (mapped): a change seen while it is
 * hidden is read when it is next shown. Those reloads read on a worker
 * thread with a read-only connection of its own, and the main thread only
 * merges the result: a row whose run did not change is kept, so the
 * selection, the sort and the scroll stay, and a reload while one run
 * trains replaces one row. Every run's tags come from one query. Past a
 * thousand runs the filter and sort models work incrementally (ten
 * thousand rows never stall a frame; tests/bench/bench-runs-page). Double-clicking a run (or Enter on it) opens it in a
 * window of its own (em-run-view.h). */
#pragma once

#include <gtk/gtk.h>

#include "em-app-state.h"
#include "em-compare-page.h"

G_BEGIN_DECLS

#define EM_TYPE_RUNS_PAGE (em_runs_page_get_type())
G_DECLARE_FINAL_TYPE(EmRunsPage, em_runs_page, EM, RUNS_PAGE, GtkBox)

GtkWidget *em_runs_page_new(EmAppState *state);
/* The same, its first read on the worker too (the window's: start-up never
 * waits on the registry; the rows arrive when read). */
GtkWidget *em_runs_page_new_async(EmAppState *state);
/* The Compare page the "Compare" button fills (the shell wires it). */
void em_runs_page_set_compare_page(EmRunsPage *self, EmComparePage *compare);
/* Shows a setting or a metric as a column ("config.optim.lr",
 * "metrics.loss": em_store_run_values), sortable like the others, before
 * Tags; FALSE for a key of neither kind. The Columns menu lists what the
 * registry has. Removing drops it again. */
gboolean em_runs_page_add_column(EmRunsPage *self, const char *key);
void em_runs_page_remove_column(EmRunsPage *self, const char *key);
/* The text of column (a built-in's key or an added one's) in shown row
 * `shown` (g_free; NULL past the end). */
char *em_runs_page_get_cell(EmRunsPage *self, guint shown, const char *column);
/* Opens run id in a window of its own (em_run_view_present). */
GtkWindow *em_runs_page_open_run(EmRunsPage *self, gint64 id);
/* Reads the registry again now. */
void em_runs_page_reload(EmRunsPage *self);

/* For tests and the shell: rows shown (after the filter), the run id of
 * shown row i (in the current sort order), selecting shown rows by run id,
 * and the selected ids (g_free; *n set). */
guint em_runs_page_get_n_shown(EmRunsPage *self);
gint64 em_runs_page_get_shown_id(EmRunsPage *self, guint i);
void em_runs_page_select_ids(EmRunsPage *self, const gint64 *ids, int n);
gint64 *em_runs_page_get_selected_ids(EmRunsPage *self, int *n);
/* The message line (errors such as a refused delete; "" when none). */
const char *em_runs_page_get_message(EmRunsPage *self);
/* How many times the page has read the registry (for the tests). */
guint em_runs_page_get_n_reloads(EmRunsPage *self);

G_END_DECLS
