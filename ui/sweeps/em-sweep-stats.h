/* em-sweep-stats.h: the numbers behind the Sweeps page, with no widgets
 * in them (unit-tested on their own): a sweep's trials as a table of one
 * column per varied setting plus the metric, each column an axis of the
 * parallel-coordinates chart (its layout: a value's position on its axis,
 * the ticks); brushing (ranges on axes) as a filter of trials; the
 * best-so-far curve; and each setting's importance.
 *
 * Importance is a one-way ANOVA's eta squared, per setting: the trials'
 * metric is split into groups by the setting's value (a list's or a
 * choice's values; a range cut into equal-width bins on its axis, in log
 * space for a log range, min(5, max(2, round(sqrt(k)))) bins for k
 * trials), and eta^2 = SS_between / SS_total, the share of the metric's
 * variance that the groups' means explain. Each setting is judged on its
 * own (its marginal means), so settings that vary together share credit,
 * and with few trials per group it reads high: it is a first look, not
 * fANOVA's variance decomposition over a fitted forest. */
#pragma once

#include <stdbool.h>

#include "em-tune.h"

#define EM_SWEEP_MAX_AXES (EM_TUNE_MAX_PARAMS + 1)

typedef struct {
  char name[128];       /* the setting's path, or the metric's name (the last axis) */
  bool categorical;     /* a list or a choice: one position per value, in the given order */
  bool log;             /* a log range: positions in log space */
  int n_cats;
  char *cats[EM_TUNE_MAX_VALUES]; /* categorical: each value's JSON text */
  double lo, hi;        /* numeric: the axis's range (the metric's: its values' min and
                           max, from 0 when the min is within a tenth of the span of it) */
} em_sweep_axis;

typedef struct {
  int n_params;         /* axes 0 .. n_params - 1: the settings; axis n_params: the metric */
  int n_axes;
  em_sweep_axis axis[EM_SWEEP_MAX_AXES];
  int n;                /* trials */
  double *v;            /* (n, n_axes): a number, or a category's index; NAN: none */
  bool maximize;
} em_sweep_table;

/* Builds the table of n trials from the sweep's description: params_json[i]
 * is trial i's settings (JSON object text, path -> value), metric[i] its
 * metric (NAN: none yet). A value that is not among a list's values is
 * NAN on its axis. */
void em_sweep_table_build(em_sweep_table *t, const em_tune_desc *d,
                          const char *const *params_json, const double *metric, int n);
void em_sweep_table_clear(em_sweep_table *t);
/* A deep copy of src into dst. */
void em_sweep_table_copy(em_sweep_table *dst, const em_sweep_table *src);
static inline double em_sweep_table_at(const em_sweep_table *t, int trial, int axis) {
  return t->v[trial * t->n_axes + axis];
}

/* A value's position on its axis, 0 (bottom) to 1 (top), clamped; NAN for
 * NAN. A categorical axis spreads its values evenly (one alone: 0.5). */
double em_sweep_axis_pos(const em_sweep_axis *a, double v);
/* The value at position u (a fractional index on a categorical axis). */
double em_sweep_axis_value(const em_sweep_axis *a, double u);
/* A value as an axis labels it ("0.01", "relu", "1e-04"). */
void em_sweep_axis_format(const em_sweep_axis *a, double v, char *buf, size_t cap);
/* The axis's ticks: positions and labels, at most max: a categorical
 * axis's values (every k-th when there are more), a log axis's decades, a
 * linear axis's multiples of a 1-2-5 step (about 5). Returns how many. */
#define EM_SWEEP_TICK_LABEL 24
int em_sweep_axis_ticks(const em_sweep_axis *a, double *pos, char (*label)[EM_SWEEP_TICK_LABEL],
                        int max);

/* A brush: the trials whose position on an axis is within [lo, hi]
 * (positions, 0 to 1). */
typedef struct {
  bool on;
  double lo, hi;
} em_sweep_brush;

/* keep[i]: trial i is within every brush that is on (a NAN value is not).
 * brushes: n_axes of them. Returns how many are kept. */
int em_sweep_table_filter(const em_sweep_table *t, const em_sweep_brush *brushes, bool *keep);

/* best[i]: the best of v[0 .. i] (the finite ones; NAN before the first). */
void em_sweep_best_so_far(const double *v, int n, bool maximize, double *best);

/* Each setting's eta squared (see the top) over the trials with use[i]
 * (NULL: all) and a finite metric: eta2[p] for p < n_params, NAN where it
 * says nothing (fewer than 3 trials, a metric that does not vary, or one
 * group only). Returns the number of trials it used. */
int em_sweep_importance(const em_sweep_table *t, const bool *use, double *eta2);
/* The number of groups a range is cut into for k trials. */
int em_sweep_importance_bins(int k);
