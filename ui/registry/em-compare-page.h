/* em-compare-page.h: the Compare page for two or more runs: the curves of
 * one metric overlaid (keys the runs share, chosen from a dropdown), the
 * settings, spec and final metrics that differ (flattened to dotted keys),
 * and accuracy against cost (parameters, FLOPs or step time), one labelled
 * point per run. Runs are named by what tells them apart: up to three
 * settings that differ ("run 3 · lr 0.002 · batch_size 64"), the model
 * when none does. */
#pragma once

#include <gtk/gtk.h>

#include "em-app-state.h"

G_BEGIN_DECLS

#define EM_TYPE_COMPARE_PAGE (em_compare_page_get_type())
G_DECLARE_FINAL_TYPE(EmComparePage, em_compare_page, EM, COMPARE_PAGE, GtkBox)

GtkWidget *em_compare_page_new(EmAppState *state);
/* Loads the runs (copies ids) and shows them; errors appear in the page. */
void em_compare_page_set_runs(EmComparePage *self, const gint64 *ids, int n);

/* For tests: the metric shown, choosing one, points in the chart's series
 * for run index i, the differences (rows; key of row i), and the error
 * line ("" when none). */
const char *em_compare_page_get_metric(EmComparePage *self);
/* The name the legend, the table and the scatter give run index i. */
const char *em_compare_page_get_run_label(EmComparePage *self, guint i);
gboolean em_compare_page_set_metric(EmComparePage *self, const char *key);
gint64 em_compare_page_get_n_points(EmComparePage *self, int run_index);
guint em_compare_page_get_n_differences(EmComparePage *self);
const char *em_compare_page_get_difference_key(EmComparePage *self, guint i);
/* The value of difference key for the run-th run compared (NULL: no such
 * difference), and the chart's title (NULL: none). */
const char *em_compare_page_get_difference(EmComparePage *self, const char *key, guint run);
const char *em_compare_page_get_chart_title(EmComparePage *self);
const char *em_compare_page_get_message(EmComparePage *self);

G_END_DECLS
