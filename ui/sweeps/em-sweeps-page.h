/* em-sweeps-page.h: the Sweeps page. A form starts a sweep of the
 * model the app state holds (the Builder's spec) under the Train page's
 * settings (optimiser, learning rate, batch size, seed, clipping,
 * dataset): the settings to vary and how (a list, a range, a log range,
 * a choice), the sampler, the metric and its direction, the trials, how
 * many at once, the pruner and each trial's limit and epochs. It writes
 * the description (em-tune.h) into the registry's artifacts and runs
 * `ember sweep start FILE` (the program next to the workbench, or
 * $EMBER_CLI) in a session of its own: closing the page or the window
 * does not stop it. Pause, Cancel and Resume (for a sweep whose runner
 * is gone) are `ember sweep pause|cancel|resume ID`.
 *
 * The sweep shown is read from the registry once a second while the page
 * is shown, on a worker thread: its trials (number, status, settings,
 * metric, epochs, steps, the pruner's decision), the best metric so far
 * against the completed trials in finish order, a parallel-coordinates
 * chart (brushing an axis filters the table) and each setting's
 * importance (eta squared, em-sweep-stats.h). Selected trials open on
 * the Compare page; Register best registers the best trial's run as a
 * version of its model, with its drift reference. */
#pragma once

#include <gtk/gtk.h>

#include "em-app-state.h"
#include "em-compare-page.h"
#include "em-sweep-desc.h"

G_BEGIN_DECLS

#define EM_TYPE_SWEEPS_PAGE (em_sweeps_page_get_type())
G_DECLARE_FINAL_TYPE(EmSweepsPage, em_sweeps_page, EM, SWEEPS_PAGE, GtkBox)

GtkWidget *em_sweeps_page_new(EmAppState *state);
/* The page selected trials open on (default: the "compare" page of the
 * stack this page is in). */
void em_sweeps_page_set_compare_page(EmSweepsPage *self, EmComparePage *compare);

/* The form, as a person fills it: row 0 .. EM_SWEEP_FORM_PARAMS - 1 of
 * the settings to vary (path NULL or "": unused), and the rest (trials 0:
 * the grid's size; limit and epochs 0: the Train page's). */
void em_sweeps_page_set_param(EmSweepsPage *self, int row, const char *path, em_sweep_kind kind,
                              const char *values);
void em_sweeps_page_set_options(EmSweepsPage *self, const char *sampler, const char *metric,
                                gboolean maximize, int trials, int parallel, const char *pruner,
                                gint64 limit, int epochs);
/* Start, as its button: FALSE when the form is refused (the page says why). */
gboolean em_sweeps_page_start(EmSweepsPage *self);
void em_sweeps_page_pause(EmSweepsPage *self);
void em_sweeps_page_cancel(EmSweepsPage *self);
void em_sweeps_page_resume(EmSweepsPage *self);
/* Compare the selected trials' runs; register the best trial's run. */
void em_sweeps_page_compare_selected(EmSweepsPage *self);
gboolean em_sweeps_page_register_best(EmSweepsPage *self);

/* The sweep shown (0: none), choosing another, its status (em_sweep_status;
 * -1: none) and whether its runner's process is there. */
gint64 em_sweeps_page_get_sweep(EmSweepsPage *self);
void em_sweeps_page_select_sweep(EmSweepsPage *self, gint64 id);
int em_sweeps_page_get_sweep_status(EmSweepsPage *self);
gboolean em_sweeps_page_get_runner_alive(EmSweepsPage *self);
guint em_sweeps_page_get_n_sweeps(EmSweepsPage *self);
/* Registry reads applied so far (tests wait for the next one). */
int em_sweeps_page_get_n_updates(EmSweepsPage *self);
/* The trials: all of them, those the brushes let through (the table's
 * rows), the text of table row i (cells joined by " | "; g_free), and
 * selecting table rows by trial number. */
guint em_sweeps_page_get_n_trials(EmSweepsPage *self);
guint em_sweeps_page_get_n_shown(EmSweepsPage *self);
char *em_sweeps_page_dup_row_text(EmSweepsPage *self, guint i);
void em_sweeps_page_select_trials(EmSweepsPage *self, const int *numbers, int n);
/* The best trial's number (-1: none), the charts, each setting's
 * importance (NAN: none; name: the setting) and the line that says how
 * it is computed. */
int em_sweeps_page_get_best_trial(EmSweepsPage *self);
GtkWidget *em_sweeps_page_get_best_chart(EmSweepsPage *self);
GtkWidget *em_sweeps_page_get_parallel_coords(EmSweepsPage *self);
int em_sweeps_page_get_n_importances(EmSweepsPage *self);
double em_sweeps_page_get_importance(EmSweepsPage *self, int i, const char **name);
const char *em_sweeps_page_get_importance_note(EmSweepsPage *self);
/* The status line and the form's message. */
const char *em_sweeps_page_get_status(EmSweepsPage *self);
const char *em_sweeps_page_get_form_message(EmSweepsPage *self);
/* Shows or hides the form (the New sweep button). */
void em_sweeps_page_show_form(EmSweepsPage *self, gboolean shown);

G_END_DECLS
