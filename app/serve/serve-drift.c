/* serve-drift.c: drift gauges of the served versions (em-drift.h). Each
 * served version with a drift reference keeps its last --drift-window
 * requests' samples (their input features and predicted classes) in a
 * ring; once a second the judge compares each window with its version's
 * reference, publishes the figures on /metrics and, when a limit is
 * crossed (or no longer is), writes a "drift" (or "drift-end") row with
 * the figures into the registry's audit log, where `ember model history`
 * and the Registry page show it. A window under --drift-min samples is
 * not judged: its figures would be mostly noise. */
#include "serve-private.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static serve_drift_config g_cfg = {.window = 500, .min_samples = 100, .limits = {0.25, 0.1}};

void serve_drift_configure(const serve_drift_config *c) { g_cfg = *c; }

struct serve_drift {
  em_drift_ref ref;
  pthread_mutex_t mu;
  int window;
  double *feats; /* (window, n_features) ring */
  int *pred;     /* (window) */
  int64_t seen;  /* samples observed (the ring holds the last min(seen, window)) */
  bool drifted;  /* the judge's last verdict (judge thread only) */
};

serve_drift *serve_drift_new(const char *reference_json, const char *label) {
  if (!reference_json || g_cfg.window <= 0) return NULL;
  serve_drift *d = calloc(1, sizeof *d);
  em_error err = {0};
  if (!d || em_drift_ref_from_json(&d->ref, reference_json, &err) != EM_OK) {
    fprintf(stderr, "ember serve: warning: %s: no drift gauges: %s\n", label,
            d ? err.msg : "out of memory");
    free(d);
    return NULL;
  }
  d->window = g_cfg.window;
  d->feats = malloc((size_t)d->window * (size_t)(d->ref.n_features + 1) * sizeof *d->feats);
  d->pred = malloc((size_t)d->window * sizeof *d->pred);
  if (!d->feats || !d->pred) {
    serve_drift_free(d);
    return NULL;
  }
  pthread_mutex_init(&d->mu, NULL);
  return d;
}

void serve_drift_free(serve_drift *d) {
  if (!d) return;
  if (d->feats && d->pred) pthread_mutex_destroy(&d->mu);
  free(d->feats);
  free(d->pred);
  free(d);
}

#define OBSERVE_CHUNK 32 /* rows whose features are computed before the lock is taken */

void serve_drift_observe(serve_drift *d, const serve_model *m, const void *in, const float *out,
                         int64_t rows) {
  if (!d) return;
  int nf = d->ref.n_features, classes = d->ref.classes;
  if (classes && classes != m->out_numel) classes = 0; /* another head: features only */
  /* the features outside the lock, then one lock a chunk of rows (a
   * request of one row: one lock, no allocation) */
  double f[OBSERVE_CHUNK * EM_DRIFT_MAX_FEATURES];
  int p[OBSERVE_CHUNK];
  for (int64_t r0 = 0; r0 < rows; r0 += OBSERVE_CHUNK) {
    int64_t n = rows - r0 < OBSERVE_CHUNK ? rows - r0 : OBSERVE_CHUNK;
    for (int64_t i = 0; i < n; i++) {
      if (nf && m->in_dtype == EM_DTYPE_F32)
        em_drift_features(m->in_shape, m->in_ndim, (const float *)in + (r0 + i) * m->in_numel,
                          f + i * nf);
      p[i] = classes ? em_drift_argmax(out + (r0 + i) * m->out_numel, classes) : -1;
    }
    pthread_mutex_lock(&d->mu);
    for (int64_t i = 0; i < n; i++) {
      int64_t slot = d->seen % d->window;
      memcpy(d->feats + slot * nf, f + i * nf, (size_t)nf * sizeof *f);
      d->pred[slot] = p[i];
      d->seen++;
    }
    pthread_mutex_unlock(&d->mu);
  }
}

/* ---- the judge ---------------------------------------------------------------- */

typedef struct {
  char version[32];
  bool judged;
  em_drift_stats s;
  bool drifted;
} role_figures;

static void record(serve_drift_judge *j, int role, const serve_model *m, const char *action,
                   const char *detail) {
  if (!j->store || !m->cm.registered) return;
  const char *ref = role ? j->canary_ref : j->stable_ref;
  const char *at = strchr(ref, '@');
  em_error err = {0};
  if (em_store_model_audit(j->store, m->name, at ? at + 1 : ref, action, m->cm.ref.version,
                           m->cm.ref.version, detail, &err) != EM_OK)
    fprintf(stderr, "ember serve: warning: could not record the %s in the registry: %s\n",
            action, err.msg);
}

/* Judges one version's window (fig->judged false: too few samples). */
static void judge_role(serve_drift_judge *j, int role, serve_model *m, role_figures *fig) {
  serve_drift *d = m->drift;
  snprintf(fig->version, sizeof fig->version, "%s", m->version);
  int nf = d->ref.n_features;
  pthread_mutex_lock(&d->mu);
  int64_t n = d->seen < d->window ? d->seen : d->window;
  double *feats = n >= g_cfg.min_samples ? malloc((size_t)(n * (nf + 1)) * sizeof *feats) : NULL;
  int *pred = feats ? malloc((size_t)n * sizeof *pred) : NULL;
  if (pred) {
    memcpy(feats, d->feats, (size_t)(n * nf) * sizeof *feats);
    memcpy(pred, d->pred, (size_t)n * sizeof *pred);
  }
  pthread_mutex_unlock(&d->mu);
  if (!pred) {
    free(feats);
    return;
  }
  bool by_class = d->ref.classes && pred[0] >= 0;
  em_drift_compare(&d->ref, feats, n, by_class ? pred : NULL, &fig->s);
  char why[512];
  fig->judged = true;
  fig->drifted = em_drift_judge(&d->ref, &fig->s, &g_cfg.limits, why, sizeof why);
  if (fig->drifted != d->drifted) {
    char detail[700];
    if (fig->drifted)
      snprintf(detail, sizeof detail, "%s, over the last %lld requests' samples", why,
               (long long)n);
    else
      snprintf(detail, sizeof detail, "back within the limits over the last %lld samples "
               "(largest PSI %.3f)", (long long)n, fig->s.worst >= 0 ? fig->s.psi[fig->s.worst] : 0);
    fprintf(stderr, "ember serve: version %s: %s%s\n", m->version,
            fig->drifted ? "the inputs drifted: " : "drift ended: ", detail);
    record(j, role, m, fig->drifted ? "drift" : "drift-end", detail);
    d->drifted = fig->drifted;
    if (fig->drifted) j->events++;
  }
  free(feats);
  free(pred);
}

/* The /metrics block of the judged windows (malloc'd). */
static char *format(const serve_drift_judge *j, serve_model *const *models,
                    const role_figures *fig) {
  size_t cap = 1 << 14, len = 0;
  char *t = malloc(cap);
  if (!t) return NULL;
#define PUT(...) \
  len += (size_t)snprintf(t + len, len < cap ? cap - len : 0, __VA_ARGS__)
  static const char *const role_name[2] = {"stable", "canary"};
  PUT("# HELP ember_serve_drift_psi Population stability index of an input feature over the "
      "live window against the version's reference (> 0.25: a large shift).\n"
      "# TYPE ember_serve_drift_psi gauge\n");
  for (int r = 0; r < 2; r++)
    for (int f = 0; fig[r].judged && f < models[r]->drift->ref.n_features; f++)
      PUT("ember_serve_drift_psi{role=\"%s\",version=\"%s\",feature=\"%s\"} %.6f\n", role_name[r],
          fig[r].version, models[r]->drift->ref.f[f].name, fig[r].s.psi[f]);
  PUT("# HELP ember_serve_drift_ks Kolmogorov-Smirnov statistic of an input feature over the "
      "live window against the version's reference.\n# TYPE ember_serve_drift_ks gauge\n");
  for (int r = 0; r < 2; r++)
    for (int f = 0; fig[r].judged && f < models[r]->drift->ref.n_features; f++)
      PUT("ember_serve_drift_ks{role=\"%s\",version=\"%s\",feature=\"%s\"} %.6f\n", role_name[r],
          fig[r].version, models[r]->drift->ref.f[f].name, fig[r].s.ks[f]);
  PUT("# HELP ember_serve_drift_ks_critical The KS statistic's critical value at alpha 0.01 for "
      "the window and reference sizes.\n# TYPE ember_serve_drift_ks_critical gauge\n");
  for (int r = 0; r < 2; r++)
    if (fig[r].judged)
      PUT("ember_serve_drift_ks_critical{role=\"%s\",version=\"%s\"} %.6f\n", role_name[r],
          fig[r].version, fig[r].s.ks_critical);
  PUT("# HELP ember_serve_drift_prediction_js Jensen-Shannon divergence (base 2) of the "
      "window's predicted classes from the reference's.\n"
      "# TYPE ember_serve_drift_prediction_js gauge\n");
  for (int r = 0; r < 2; r++)
    if (fig[r].judged && isfinite(fig[r].s.js))
      PUT("ember_serve_drift_prediction_js{role=\"%s\",version=\"%s\"} %.6f\n", role_name[r],
          fig[r].version, fig[r].s.js);
  PUT("# HELP ember_serve_drift_window_samples Samples in the judged window.\n"
      "# TYPE ember_serve_drift_window_samples gauge\n");
  for (int r = 0; r < 2; r++)
    if (fig[r].judged)
      PUT("ember_serve_drift_window_samples{role=\"%s\",version=\"%s\"} %lld\n", role_name[r],
          fig[r].version, (long long)fig[r].s.n);
  PUT("# HELP ember_serve_drift_detected 1 while the version's window is past a drift limit.\n"
      "# TYPE ember_serve_drift_detected gauge\n");
  for (int r = 0; r < 2; r++)
    if (fig[r].judged)
      PUT("ember_serve_drift_detected{role=\"%s\",version=\"%s\"} %d\n", role_name[r],
          fig[r].version, fig[r].drifted ? 1 : 0);
  PUT("# HELP ember_serve_drift_events_total Times a served version's inputs crossed a drift "
      "limit.\n# TYPE ember_serve_drift_events_total counter\n"
      "ember_serve_drift_events_total %llu\n", (unsigned long long)j->events);
#undef PUT
  if (len >= cap) { /* 2 roles x 32 features fit; say nothing rather than half */
    free(t);
    return NULL;
  }
  return t;
}

static void judge_once(serve_drift_judge *j) {
  serve_model *models[2] = {serve_slot_acquire(&j->srv->slot),
                            j->srv->canary.cur ? serve_slot_acquire(&j->srv->canary) : NULL};
  role_figures fig[2];
  memset(fig, 0, sizeof fig);
  for (int r = 0; r < 2; r++)
    if (models[r] && models[r]->drift) judge_role(j, r, models[r], &fig[r]);
  serve_metrics_set_drift(&j->srv->metrics, format(j, models, fig));
  for (int r = 0; r < 2; r++) serve_model_unref(models[r]);
}

static bool judge_tick(void *arg) {
  judge_once(arg);
  return true;
}

em_status serve_drift_judge_start(serve_drift_judge *j, em_error *err) {
  return serve_ticker_start(&j->ticker, 1.0, judge_tick, j, "the drift judge", err);
}

void serve_drift_judge_stop(serve_drift_judge *j) {
  serve_ticker_stop(&j->ticker);
  if (j->store) em_store_close(j->store);
  j->store = NULL;
}
