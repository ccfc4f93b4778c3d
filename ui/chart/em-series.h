/* em-series.h: one chart series as plain data, no GTK: every point kept in
 * growable arrays, its exponential moving average (TensorBoard's debiased
 * EMA) kept up to date on append, and a min/max pyramid over both curves
 * so that a display column's min and max come from O(log n) blocks: the
 * cost of decimating for a frame depends on the number of pixel columns,
 * not on the number of points.
 *
 * Points must arrive with non-decreasing x (steps); non-finite y values
 * are kept but skipped by min/max and leave the EMA unchanged. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

typedef struct em_series em_series;

/* Which curve: the raw values or their EMA. */
typedef enum { EM_CURVE_RAW, EM_CURVE_SMOOTH } em_curve;

em_series *em_series_new(void);
void em_series_free(em_series *s); /* NULL is fine */

/* Appends n points; amortised O(1) each. Returns false when memory ran
 * out (the points that fitted are kept). */
bool em_series_append(em_series *s, const double *x, const double *y, int64_t n);
int64_t em_series_len(const em_series *s);
const double *em_series_x(const em_series *s);
const double *em_series_y(const em_series *s, em_curve c);

/* Smoothing weight in [0, 1) (0: the EMA equals the raw curve). Setting a
 * new weight recomputes the EMA over the full series. */
void em_series_set_smoothing(em_series *s, double alpha);
double em_series_get_smoothing(const em_series *s);

/* The index range of points with x in [x0, x1): first index with
 * x >= x0 into *i0, first with x >= x1 into *i1. */
void em_series_range(const em_series *s, double x0, double x1, int64_t *i0, int64_t *i1);
/* Min and max of curve c over points [i0, i1) (finite values only);
 * false when there is none. */
bool em_series_minmax(const em_series *s, em_curve c, int64_t i0, int64_t i1, double *mn,
                      double *mx);

/* One display column of a decimation. */
typedef struct {
  int64_t i0, i1;    /* the points in the column: [i0, i1) */
  double min, max;   /* of the finite values; NAN when none */
} em_series_column;

/* Splits [x0, x1) into ncols equal columns and fills cols[ncols] with the
 * min and max of curve c in each. Cost: O(ncols * log n). */
void em_series_decimate(const em_series *s, em_curve c, double x0, double x1, int ncols,
                        em_series_column *cols);

/* Points whose raw y is NaN or infinite (a diverged loss): how many, and
 * the index of the first (-1 when none). The chart says so, since a line
 * cannot show them. */
int64_t em_series_n_nonfinite(const em_series *s);
int64_t em_series_first_nonfinite(const em_series *s);

/* The index of the point whose x is nearest to x (-1 when empty). */
int64_t em_series_nearest(const em_series *s, double x);
