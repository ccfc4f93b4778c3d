/* em-line-chart.h: a line chart widget for training curves. Every point
 * appended is kept; display uses min/max level-of-detail decimation per
 * pixel column (a pyramid of min/max blocks, so a frame's cost depends on
 * the widget's width, not on the number of points), and an exponential
 * moving average (TensorBoard-style smoothing) computed incrementally on
 * append over the full series, never on the draw path.
 *
 * Interaction: scroll zooms x around the pointer (Ctrl+scroll zooms y),
 * pinch zooms, drag pans, Shift+drag (or secondary button drag) zooms to
 * a box, double-click resets the view. Hovering shows the nearest point of
 * each series (x, raw y, smoothed y). Main thread only. */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

#define EM_TYPE_LINE_CHART (em_line_chart_get_type())
G_DECLARE_FINAL_TYPE(EmLineChart, em_line_chart, EM, LINE_CHART, GtkWidget)

GtkWidget *em_line_chart_new(void);

/* Adds an empty series; color NULL picks one from the palette. Returns the
 * series id (0, 1, ...) for em_line_chart_append. */
int em_line_chart_add_series(EmLineChart *self, const char *name, const GdkRGBA *color);
int em_line_chart_get_n_series(EmLineChart *self);
/* A dashed series, drawn in its turn: over a solid one it coincides with,
 * both stay visible (the Memory page's peak over its reserve). */
void em_line_chart_set_series_dashed(EmLineChart *self, int series, gboolean dashed);
gboolean em_line_chart_get_series_dashed(EmLineChart *self, int series);
/* Appends n points (x should be non-decreasing; each point is kept).
 * Amortised O(1) per point. */
void em_line_chart_append(EmLineChart *self, int series, const double *x, const double *y, int n);
/* Number of points held by series (-1 for an unknown id). */
gint64 em_line_chart_get_n_points(EmLineChart *self, int series);
/* What the chart says of values it cannot draw (NaN, infinities): "loss:
 * nan at step 412 (3 points not drawn)", one clause per series; NULL when
 * there are none. g_free. */
char *em_line_chart_get_nonfinite_note(EmLineChart *self);
/* Removes every series and its points. */
void em_line_chart_clear(EmLineChart *self);

/* Logarithmic y axis (values <= 0 are not drawn on it). */
void em_line_chart_set_log_y(EmLineChart *self, gboolean log_y);
/* x values are counts (optimiser steps): ticks only at integers. */
void em_line_chart_set_integer_x(EmLineChart *self, gboolean integer_x);
gboolean em_line_chart_get_log_y(EmLineChart *self);
/* Smoothing weight alpha in [0, 1): 0 draws the raw curve only; otherwise
 * the smoothed curve is drawn bold over a faint raw curve. Recomputed over
 * the full series when alpha changes. */
void em_line_chart_set_smoothing(EmLineChart *self, double alpha);
double em_line_chart_get_smoothing(EmLineChart *self);

void em_line_chart_set_title(EmLineChart *self, const char *title);
const char *em_line_chart_get_title(EmLineChart *self); /* NULL: none */
void em_line_chart_set_x_label(EmLineChart *self, const char *label);
void em_line_chart_set_y_label(EmLineChart *self, const char *label);
/* An axis tick's label for value v on a grid of step: 8 characters at
 * most, whatever v is (the left gutter is fixed). */
void em_line_chart_format_tick(double v, double step, char *buf, size_t cap);
/* The ticks k * step over [v0, v1] that an axis draws: *k0 the first k,
 * and how many (at most EM_CHART_MAX_TICKS). None when k is past what a
 * double counts exactly: a step below the values' precision (a view
 * zoomed in far, or a series between 0.3 and 0.30000000000000004),
 * where t += step did not move t and the loop drawing the ticks ran on
 * until memory ran out. Draw tick i at (k0 + i) * step. */
#define EM_CHART_MAX_TICKS 200
int em_chart_tick_count(double v0, double v1, double step, double *k0);

/* Back to fitting every point (follows new data again). */
void em_line_chart_reset_view(EmLineChart *self);
/* The visible data range (after zoom/pan, or the fitted range). */
void em_line_chart_get_view(EmLineChart *self, double *x0, double *x1, double *y0, double *y1);
/* Sets the visible data range (stops following new data). */
void em_line_chart_set_view(EmLineChart *self, double x0, double x1, double y0, double y1);

/* Extra text drawn in the top-right corner (throughput, ETA; NULL: none). */
void em_line_chart_set_note(EmLineChart *self, const char *note);

G_END_DECLS
