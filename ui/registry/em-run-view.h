/* em-run-view.h: one run of the registry on its own (the MLflow run view,
 * natively; issue 32, item 8): its status line, the metric charts of that
 * run (any recorded key, against step, epoch or wall time) with every
 * key's last, min and max, its settings (the recorded config as dotted
 * keys), its events with tags and notes (pauses, setting changes,
 * rollbacks, resumes, warnings), its checkpoints and artifacts with sizes
 * and SHA-256, the spec's and the dataset's identity, and actions: open
 * the spec in the Builder, resume (`ember train --resume`, in the
 * background), register a model version, export ONNX (into the registry's
 * artifacts, recorded), delete (after a question).
 *
 * Reads through its own em_store on the main thread once, when made or
 * reloaded (one run's rows: milliseconds); the actions that write open
 * the registry for writing for the one call. Double-clicking a row of the
 * Runs page opens one in a window of its own (em_run_view_present). */
#pragma once

#include <gtk/gtk.h>

#include "em-app-state.h"

G_BEGIN_DECLS

#define EM_TYPE_RUN_VIEW (em_run_view_get_type())
G_DECLARE_FINAL_TYPE(EmRunView, em_run_view, EM, RUN_VIEW, GtkBox)

GtkWidget *em_run_view_new(EmAppState *state, gint64 run);
/* A window of its own showing run (transient for parent, may be NULL). */
GtkWindow *em_run_view_present(GtkWindow *parent, EmAppState *state, gint64 run);
void em_run_view_reload(EmRunView *self);
gint64 em_run_view_get_run(EmRunView *self);
/* For tests: the message line ("" when none), the metric charted, the
 * points charted, and choosing the metric and x axis ("step", "epoch",
 * "time"). */
const char *em_run_view_get_message(EmRunView *self);
const char *em_run_view_get_metric(EmRunView *self);
gint64 em_run_view_get_n_points(EmRunView *self);
gboolean em_run_view_show_metric(EmRunView *self, const char *key, const char *axis);

G_END_DECLS
