/* em-parallel-coords.h: a parallel-coordinates chart of a sweep's trials,
 * drawn with Cairo: one vertical axis per varied setting and one for the
 * metric (em-sweep-stats.h's table: log axes for log ranges, a position
 * per value for lists and choices), one polyline per trial coloured by
 * its metric (blue to orange: worse to better; grey and dashed: no metric
 * yet), the best trial drawn bold. Dragging along an axis brushes a range
 * of it (a click on the axis clears it); the trials outside any brush are
 * greyed and the page's table hides them ("brush-changed"). The frame is
 * cached as a render node until the data, a brush, the size or the style
 * change. Main thread only. */
#pragma once

#include <gtk/gtk.h>

#include "em-sweep-stats.h"

G_BEGIN_DECLS

#define EM_TYPE_PARALLEL_COORDS (em_parallel_coords_get_type())
G_DECLARE_FINAL_TYPE(EmParallelCoords, em_parallel_coords, EM, PARALLEL_COORDS, GtkWidget)

GtkWidget *em_parallel_coords_new(void);
/* Copies the table (NULL: none). The brushes stay when the axes are the
 * same ones (a table of the same sweep with more trials). best: the index
 * of the best trial (-1: none). */
void em_parallel_coords_set_table(EmParallelCoords *self, const em_sweep_table *t, int best);
int em_parallel_coords_get_n_axes(EmParallelCoords *self);
const char *em_parallel_coords_get_axis_name(EmParallelCoords *self, int axis); /* NULL past */
int em_parallel_coords_get_n_trials(EmParallelCoords *self);

/* Brushes axis over the values [v0, v1] (a categorical axis: its values'
 * indices, 0, 1, ...), as dragging does; emits "brush-changed". Returns
 * the number of trials kept, -1 for an axis that does not exist. */
int em_parallel_coords_set_brush(EmParallelCoords *self, int axis, double v0, double v1);
/* Clears axis's brush (-1: every brush); emits "brush-changed". */
void em_parallel_coords_clear_brush(EmParallelCoords *self, int axis);
gboolean em_parallel_coords_has_brush(EmParallelCoords *self);
/* The trials within every brush: how many, and whether trial i is. */
int em_parallel_coords_get_n_kept(EmParallelCoords *self);
gboolean em_parallel_coords_is_kept(EmParallelCoords *self, int trial);

G_END_DECLS
