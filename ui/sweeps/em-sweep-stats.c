/* em-sweep-stats.c: see the header. */
#include "em-sweep-stats.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the table ------------------------------------------------------------------ */

/* The index of value v among a categorical axis's values: its JSON text,
 * or the same number written another way (1e-2 and 0.01). -1: none. */
static int category_of(const em_sweep_axis *a, json_t *v) {
  char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
  int hit = -1;
  for (int k = 0; k < a->n_cats && hit < 0 && text; k++)
    if (!strcmp(a->cats[k], text)) hit = k;
  free(text);
  if (hit >= 0 || !json_is_number(v)) return hit;
  for (int k = 0; k < a->n_cats && hit < 0; k++) {
    json_t *c = json_loads(a->cats[k], JSON_DECODE_ANY, NULL);
    if (json_is_number(c) && json_number_value(c) == json_number_value(v)) hit = k;
    json_decref(c);
  }
  return hit;
}

void em_sweep_table_build(em_sweep_table *t, const em_tune_desc *d,
                          const char *const *params_json, const double *metric, int n) {
  memset(t, 0, sizeof *t);
  t->n_params = d->n_params;
  t->n_axes = d->n_params + 1;
  t->maximize = d->maximize;
  t->n = n;
  for (int p = 0; p < d->n_params; p++) {
    em_sweep_axis *a = &t->axis[p];
    const em_tune_param *q = &d->p[p];
    snprintf(a->name, sizeof a->name, "%s", q->path);
    a->categorical = q->kind != EM_TUNE_RANGE;
    if (a->categorical) {
      a->n_cats = q->n_values;
      for (int k = 0; k < q->n_values; k++) a->cats[k] = strdup(q->values[k]);
    } else {
      a->log = q->log;
      a->lo = q->low;
      a->hi = q->high;
    }
  }
  em_sweep_axis *m = &t->axis[d->n_params];
  snprintf(m->name, sizeof m->name, "%s", d->metric);
  m->lo = INFINITY;
  m->hi = -INFINITY;
  t->v = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1) * (size_t)t->n_axes);
  for (int i = 0; i < n; i++) {
    json_t *o = params_json[i] ? json_loads(params_json[i], 0, NULL) : NULL;
    for (int p = 0; p < d->n_params; p++) {
      json_t *v = json_object_get(o, t->axis[p].name);
      double x = NAN;
      if (v && t->axis[p].categorical) {
        int k = category_of(&t->axis[p], v);
        if (k >= 0) x = k;
      } else if (json_is_number(v)) {
        x = json_number_value(v);
      }
      t->v[i * t->n_axes + p] = x;
    }
    json_decref(o);
    double y = metric ? metric[i] : NAN;
    t->v[i * t->n_axes + d->n_params] = isfinite(y) ? y : NAN;
    if (isfinite(y)) {
      m->lo = fmin(m->lo, y);
      m->hi = fmax(m->hi, y);
    }
  }
  if (!(m->lo <= m->hi)) { /* no value yet */
    m->lo = 0;
    m->hi = 1;
  } else if (m->lo == m->hi) { /* one value: in the middle of a small range */
    double pad = fabs(m->lo) * 0.05 + 1e-6;
    m->lo -= pad;
    m->hi += pad;
  } else if (m->lo > 0 && m->lo < 0.1 * (m->hi - m->lo)) { /* a loss near 0: from 0 */
    m->lo = 0;
  }
}

void em_sweep_table_clear(em_sweep_table *t) {
  for (int a = 0; a < t->n_axes; a++)
    for (int k = 0; k < t->axis[a].n_cats; k++) free(t->axis[a].cats[k]);
  free(t->v);
  memset(t, 0, sizeof *t);
}

void em_sweep_table_copy(em_sweep_table *dst, const em_sweep_table *src) {
  *dst = *src;
  for (int a = 0; a < src->n_axes; a++)
    for (int k = 0; k < src->axis[a].n_cats; k++) dst->axis[a].cats[k] = strdup(src->axis[a].cats[k]);
  size_t bytes = sizeof(double) * (size_t)(src->n > 0 ? src->n : 1) * (size_t)src->n_axes;
  dst->v = malloc(bytes);
  if (src->v) memcpy(dst->v, src->v, bytes);
}

/* ---- an axis ---------------------------------------------------------------------- */

double em_sweep_axis_pos(const em_sweep_axis *a, double v) {
  if (isnan(v)) return NAN;
  double u;
  if (a->categorical) u = a->n_cats > 1 ? v / (a->n_cats - 1) : 0.5;
  else if (a->log && a->lo > 0 && v > 0) u = (log(v) - log(a->lo)) / (log(a->hi) - log(a->lo));
  else u = a->hi > a->lo ? (v - a->lo) / (a->hi - a->lo) : 0.5;
  return fmin(fmax(u, 0), 1);
}

double em_sweep_axis_value(const em_sweep_axis *a, double u) {
  if (a->categorical) return a->n_cats > 1 ? u * (a->n_cats - 1) : 0;
  if (a->log && a->lo > 0) return exp(log(a->lo) + u * (log(a->hi) - log(a->lo)));
  return a->lo + u * (a->hi - a->lo);
}

void em_sweep_axis_format(const em_sweep_axis *a, double v, char *buf, size_t cap) {
  if (isnan(v)) {
    snprintf(buf, cap, "-");
  } else if (a->categorical) {
    int k = (int)lround(v);
    const char *c = k >= 0 && k < a->n_cats ? a->cats[k] : "?";
    size_t n = strlen(c);
    if (n >= 2 && c[0] == '"' && c[n - 1] == '"') snprintf(buf, cap, "%.*s", (int)n - 2, c + 1);
    else snprintf(buf, cap, "%s", c);
  } else if (a->log && (fabs(v) < 1e-3 || fabs(v) >= 1e4)) {
    snprintf(buf, cap, "%.0e", v);
  } else {
    snprintf(buf, cap, "%.4g", v);
  }
}

int em_sweep_axis_ticks(const em_sweep_axis *a, double *pos, char (*label)[EM_SWEEP_TICK_LABEL],
                        int max) {
  int n = 0;
  if (max <= 0) return 0;
  if (a->categorical) {
    int every = (a->n_cats + max - 1) / max;
    for (int k = 0; k < a->n_cats && n < max; k += every > 0 ? every : 1) {
      pos[n] = em_sweep_axis_pos(a, k);
      em_sweep_axis_format(a, k, label[n++], EM_SWEEP_TICK_LABEL);
    }
    return n;
  }
  if (a->log && a->lo > 0) { /* decades, or the ends when the range holds fewer than two */
    int d0 = (int)ceil(log10(a->lo) - 1e-9), d1 = (int)floor(log10(a->hi) + 1e-9);
    if (d1 - d0 >= 1) {
      int every = (d1 - d0) / max + 1;
      for (int d = d0; d <= d1 && n < max; d += every) {
        double v = pow(10, d);
        pos[n] = em_sweep_axis_pos(a, v);
        em_sweep_axis_format(a, v, label[n++], EM_SWEEP_TICK_LABEL);
      }
      return n;
    }
  }
  /* a linear axis: the multiples of a 1, 2 or 5 step within it (about 5),
   * or its ends when it is too narrow for two */
  int want = max < 5 ? max : 5;
  double span = a->hi - a->lo;
  if (want >= 2 && span > 0 && isfinite(span)) {
    double raw = span / (want - 1), mag = pow(10, floor(log10(raw))), r = raw / mag;
    double step = (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
    double k0 = ceil(a->lo / step - 1e-9), k1 = floor(a->hi / step + 1e-9);
    while (k1 - k0 + 1 > max) { /* the next of 1, 2, 5, 10 */
      double m = step / pow(10, floor(log10(step) + 1e-9));
      step *= m < 1.5 ? 2 : m < 3 ? 2.5 : 2;
      k0 = ceil(a->lo / step - 1e-9);
      k1 = floor(a->hi / step + 1e-9);
    }
    for (double k = k0; k <= k1 && n < max; k++) {
      double v = fabs(k) < 0.5 ? 0 : k * step;
      pos[n] = em_sweep_axis_pos(a, v);
      em_sweep_axis_format(a, v, label[n++], EM_SWEEP_TICK_LABEL);
    }
    if (n >= 2) return n;
    n = 0;
  }
  for (int i = 0; i < 2 && n < max; i++) {
    pos[n] = i;
    em_sweep_axis_format(a, i ? a->hi : a->lo, label[n++], EM_SWEEP_TICK_LABEL);
  }
  return n;
}

/* ---- brushing, best so far ------------------------------------------------------------ */

int em_sweep_table_filter(const em_sweep_table *t, const em_sweep_brush *brushes, bool *keep) {
  int kept = 0;
  for (int i = 0; i < t->n; i++) {
    bool in = true;
    for (int a = 0; a < t->n_axes && in; a++) {
      if (!brushes[a].on) continue;
      double u = em_sweep_axis_pos(&t->axis[a], em_sweep_table_at(t, i, a));
      in = !isnan(u) && u >= brushes[a].lo - 1e-9 && u <= brushes[a].hi + 1e-9;
    }
    keep[i] = in;
    kept += in;
  }
  return kept;
}

void em_sweep_best_so_far(const double *v, int n, bool maximize, double *best) {
  double b = NAN;
  for (int i = 0; i < n; i++) {
    if (isfinite(v[i]) && (isnan(b) || (maximize ? v[i] > b : v[i] < b))) b = v[i];
    best[i] = b;
  }
}

/* ---- importance ------------------------------------------------------------------------ */

int em_sweep_importance_bins(int k) {
  int b = (int)lround(sqrt((double)k));
  return b < 2 ? 2 : b > 5 ? 5 : b;
}

int em_sweep_importance(const em_sweep_table *t, const bool *use, double *eta2) {
  int m = t->n_params, k = 0;
  double sum = 0;
  for (int i = 0; i < t->n; i++) {
    double y = em_sweep_table_at(t, i, m);
    if ((use && !use[i]) || !isfinite(y)) continue;
    sum += y;
    k++;
  }
  for (int p = 0; p < m; p++) eta2[p] = NAN;
  if (k < 3) return k;
  double mean = sum / k, ss_total = 0;
  for (int i = 0; i < t->n; i++) {
    double y = em_sweep_table_at(t, i, m);
    if ((!use || use[i]) && isfinite(y)) ss_total += (y - mean) * (y - mean);
  }
  if (!(ss_total > 0)) return k;
  int bins = em_sweep_importance_bins(k);
  for (int p = 0; p < m; p++) {
    const em_sweep_axis *a = &t->axis[p];
    int ng = a->categorical ? a->n_cats : bins;
    double gsum[EM_TUNE_MAX_VALUES] = {0};
    int gn[EM_TUNE_MAX_VALUES] = {0};
    int in = 0;
    double in_sum = 0;
    for (int i = 0; i < t->n; i++) {
      double y = em_sweep_table_at(t, i, m), v = em_sweep_table_at(t, i, p);
      if ((use && !use[i]) || !isfinite(y) || isnan(v)) continue;
      int g = a->categorical ? (int)lround(v) : (int)floor(em_sweep_axis_pos(a, v) * bins);
      if (g < 0) g = 0;
      if (g >= ng) g = ng - 1;
      gsum[g] += y;
      gn[g]++;
      in++;
      in_sum += y;
    }
    int groups = 0;
    for (int g = 0; g < ng; g++) groups += gn[g] > 0;
    if (groups < 2 || in < 3) continue;
    /* the trials without this setting's value are left out of its groups:
     * its total is over the trials it has */
    double in_mean = in_sum / in, between = 0, total = 0;
    for (int g = 0; g < ng; g++)
      if (gn[g]) between += gn[g] * (gsum[g] / gn[g] - in_mean) * (gsum[g] / gn[g] - in_mean);
    for (int i = 0; i < t->n; i++) {
      double y = em_sweep_table_at(t, i, m), v = em_sweep_table_at(t, i, p);
      if ((!use || use[i]) && isfinite(y) && !isnan(v)) total += (y - in_mean) * (y - in_mean);
    }
    if (total > 0) eta2[p] = fmin(between / total, 1);
  }
  return k;
}
