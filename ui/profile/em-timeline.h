/* em-timeline.h: a timeline strip of a profiled window: the spans of a
 * Chrome trace (ops, layers, ranges, steps) as rectangles in one lane per
 * thread, nested spans stacked below their parents, names drawn where they
 * fit. Scroll zooms the time axis around the pointer, drag pans,
 * double-click shows the whole window. Main thread only; the trace is
 * read and laid out once in em_timeline_load, never on the draw path. */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

#define EM_TYPE_TIMELINE (em_timeline_get_type())
G_DECLARE_FINAL_TYPE(EmTimeline, em_timeline, EM, TIMELINE, GtkWidget)

GtkWidget *em_timeline_new(void);

/* A trace read and laid out (lanes, nesting), from any thread: a worker
 * prepares it, the main thread hands it to the widget. */
typedef struct EmTimelineData EmTimelineData;
EmTimelineData *em_timeline_data_load(const char *trace_path, GError **error);
void em_timeline_data_free(EmTimelineData *d);
/* Takes ownership (NULL: empty) and shows the whole window. */
void em_timeline_set_data(EmTimeline *self, EmTimelineData *d);

/* Reads the trace's "X" events here and now; FALSE with error when the file cannot be
 * read or is not a trace. */
gboolean em_timeline_load(EmTimeline *self, const char *trace_path, GError **error);
int em_timeline_get_n_spans(EmTimeline *self);
/* The layer ("args": {"layer"}) of the first span named op (NULL: none). */
const char *em_timeline_layer_of(EmTimeline *self, const char *op);
/* Visible time window in microseconds from the first span. */
void em_timeline_set_view(EmTimeline *self, double t0_us, double t1_us);
void em_timeline_get_view(EmTimeline *self, double *t0_us, double *t1_us);

G_END_DECLS
