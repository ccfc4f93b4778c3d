/* em-series.c: see the header. The pyramid: level l (1..EM_LEVELS) holds,
 * per block of B^l consecutive points, the min and max of its finite
 * values (NAN when it has none); level 0 is the points themselves. */
#include "em-series.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EM_BLOCK 64
#define EM_LEVELS 5 /* 64^5 points before the top level is scanned */

typedef struct {
  double *mn, *mx; /* (len) */
  int64_t len, cap;
} em_level;

struct em_series {
  double *x, *y, *ys; /* (n) points, raw and smoothed */
  int64_t n, cap;
  double alpha;
  double ema_last;    /* the EMA's running state */
  int64_t ema_count;
  int64_t n_nonfinite, first_nonfinite; /* of the raw values; first: -1 when none */
  em_level lev[2][EM_LEVELS + 1]; /* [curve][level]; [.][0] unused */
};

em_series *em_series_new(void) {
  em_series *s = calloc(1, sizeof(em_series));
  if (s) s->first_nonfinite = -1;
  return s;
}

void em_series_free(em_series *s) {
  if (!s) return;
  free(s->x);
  free(s->y);
  free(s->ys);
  for (int c = 0; c < 2; c++)
    for (int l = 1; l <= EM_LEVELS; l++) {
      free(s->lev[c][l].mn);
      free(s->lev[c][l].mx);
    }
  free(s);
}

static bool grow(double **p, int64_t cap) {
  double *q = realloc(*p, (size_t)cap * sizeof(double));
  if (!q) return false;
  *p = q;
  return true;
}

static bool reserve(em_series *s, int64_t need) {
  if (need <= s->cap) return true;
  int64_t cap = s->cap ? s->cap : 1024;
  while (cap < need) cap *= 2;
  if (!grow(&s->x, cap) || !grow(&s->y, cap) || !grow(&s->ys, cap)) return false;
  s->cap = cap;
  return true;
}

/* Folds value v of point i into the pyramid of curve c. */
static bool pyramid_add(em_series *s, int c, int64_t i, double v) {
  int64_t block = 1;
  double f = isfinite(v) ? v : NAN;
  for (int l = 1; l <= EM_LEVELS; l++) {
    block *= EM_BLOCK;
    em_level *L = &s->lev[c][l];
    int64_t k = i / block;
    if (k == L->len) {
      if (L->len == L->cap) {
        int64_t cap = L->cap ? L->cap * 2 : 64;
        if (!grow(&L->mn, cap) || !grow(&L->mx, cap)) return false;
        L->cap = cap;
      }
      L->mn[k] = f;
      L->mx[k] = f;
      L->len++;
    } else {
      L->mn[k] = fmin(L->mn[k], f);
      L->mx[k] = fmax(L->mx[k], f);
    }
  }
  return true;
}

static double ema_next(em_series *s, double v) {
  if (!isfinite(v)) return v;
  s->ema_last = s->ema_last * s->alpha + (1.0 - s->alpha) * v;
  s->ema_count++;
  double debias = 1.0 - pow(s->alpha, (double)s->ema_count);
  return debias > 0 ? s->ema_last / debias : v;
}

bool em_series_append(em_series *s, const double *x, const double *y, int64_t n) {
  if (n <= 0) return true;
  if (!reserve(s, s->n + n)) return false;
  for (int64_t k = 0; k < n; k++) {
    int64_t i = s->n;
    s->x[i] = x[k];
    s->y[i] = y[k];
    s->ys[i] = ema_next(s, y[k]);
    if (!isfinite(y[k]) && s->n_nonfinite++ == 0) s->first_nonfinite = i;
    if (!pyramid_add(s, 0, i, y[k]) || !pyramid_add(s, 1, i, s->ys[i])) return false;
    s->n++;
  }
  return true;
}

int64_t em_series_len(const em_series *s) { return s->n; }
int64_t em_series_n_nonfinite(const em_series *s) { return s->n_nonfinite; }
int64_t em_series_first_nonfinite(const em_series *s) { return s->first_nonfinite; }
const double *em_series_x(const em_series *s) { return s->x; }
const double *em_series_y(const em_series *s, em_curve c) {
  return c == EM_CURVE_SMOOTH ? s->ys : s->y;
}

void em_series_set_smoothing(em_series *s, double alpha) {
  if (!(alpha >= 0)) alpha = 0;
  if (alpha > 0.999) alpha = 0.999;
  if (alpha == s->alpha && s->ema_count > 0) return;
  s->alpha = alpha;
  s->ema_last = 0;
  s->ema_count = 0;
  for (int l = 1; l <= EM_LEVELS; l++) s->lev[1][l].len = 0;
  for (int64_t i = 0; i < s->n; i++) {
    s->ys[i] = ema_next(s, s->y[i]);
    pyramid_add(s, 1, i, s->ys[i]); /* capacity is already there */
  }
}

double em_series_get_smoothing(const em_series *s) { return s->alpha; }

static int64_t lower_bound(const em_series *s, double x) {
  int64_t lo = 0, hi = s->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (s->x[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

void em_series_range(const em_series *s, double x0, double x1, int64_t *i0, int64_t *i1) {
  *i0 = lower_bound(s, x0);
  *i1 = lower_bound(s, x1);
  if (*i1 < *i0) *i1 = *i0;
}

bool em_series_minmax(const em_series *s, em_curve c, int64_t i0, int64_t i1, double *mn,
                      double *mx) {
  const double *v = em_series_y(s, c);
  int ci = c == EM_CURVE_SMOOTH ? 1 : 0;
  double lo_v = NAN, hi_v = NAN;
  if (i0 < 0) i0 = 0;
  if (i1 > s->n) i1 = s->n;
  int64_t lo = i0, hi = i1;
  int lvl = 0;
#define ACC(k)                                                          \
  do {                                                                  \
    if (lvl == 0) {                                                     \
      double a = v[k];                                                  \
      if (isfinite(a)) { lo_v = fmin(lo_v, a); hi_v = fmax(hi_v, a); } \
    } else {                                                            \
      lo_v = fmin(lo_v, s->lev[ci][lvl].mn[k]);                         \
      hi_v = fmax(hi_v, s->lev[ci][lvl].mx[k]);                         \
    }                                                                   \
  } while (0)
  while (lo < hi) {
    if (lvl == EM_LEVELS || hi - lo < 2 * EM_BLOCK) {
      for (int64_t k = lo; k < hi; k++) ACC(k);
      break;
    }
    while (lo % EM_BLOCK) { ACC(lo); lo++; }
    while (hi % EM_BLOCK) { hi--; ACC(hi); }
    lo /= EM_BLOCK;
    hi /= EM_BLOCK;
    lvl++;
  }
#undef ACC
  *mn = lo_v;
  *mx = hi_v;
  return !isnan(lo_v);
}

void em_series_decimate(const em_series *s, em_curve c, double x0, double x1, int ncols,
                        em_series_column *cols) {
  if (ncols <= 0) return;
  int64_t prev = lower_bound(s, x0);
  for (int j = 0; j < ncols; j++) {
    double xb = x0 + (x1 - x0) * (double)(j + 1) / (double)ncols;
    int64_t next = j + 1 == ncols ? lower_bound(s, x1) : lower_bound(s, xb);
    if (next < prev) next = prev;
    cols[j].i0 = prev;
    cols[j].i1 = next;
    if (!em_series_minmax(s, c, prev, next, &cols[j].min, &cols[j].max)) {
      cols[j].min = NAN;
      cols[j].max = NAN;
    }
    prev = next;
  }
}

int64_t em_series_nearest(const em_series *s, double x) {
  if (s->n == 0) return -1;
  int64_t i = lower_bound(s, x);
  if (i >= s->n) return s->n - 1;
  if (i > 0 && fabs(s->x[i - 1] - x) <= fabs(s->x[i] - x)) return i - 1;
  return i;
}
