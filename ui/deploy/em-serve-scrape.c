/* em-serve-scrape.c: see the header. */
#include "em-serve-scrape.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The value of label key in labels ('a="x",b="y"') into out. */
static gboolean label(const char *labels, const char *key, char *out, size_t cap) {
  size_t kl = strlen(key);
  for (const char *p = labels; p && *p;) {
    if (!strncmp(p, key, kl) && p[kl] == '=' && p[kl + 1] == '"') {
      const char *v = p + kl + 2, *end = strchr(v, '"');
      if (!end) return FALSE;
      size_t n = (size_t)(end - v) < cap - 1 ? (size_t)(end - v) : cap - 1;
      memcpy(out, v, n);
      out[n] = '\0';
      return TRUE;
    }
    p = strchr(p, ',');
    if (p) p++;
  }
  return FALSE;
}

static EmScrapeRole *role_of(EmScrape *s, const char *labels) {
  char r[16], v[32];
  if (!label(labels, "role", r, sizeof r)) return NULL;
  EmScrapeRole *role = !strcmp(r, "stable") ? &s->role[0] : !strcmp(r, "canary") ? &s->role[1]
                                                                                   : NULL;
  if (role && label(labels, "version", v, sizeof v)) g_strlcpy(role->version, v, sizeof role->version);
  return role;
}

void em_scrape_parse(const char *text, EmScrape *s) {
  memset(s, 0, sizeof *s);
  for (int r = 0; r < 2; r++) {
    s->role[r].accuracy = s->role[r].drift_psi_max = s->role[r].drift_js = NAN;
    s->role[r].drift_detected = -1;
  }
  char **lines = g_strsplit(text, "\n", -1);
  for (char **l = lines; *l; l++) {
    if (!**l || **l == '#') continue;
    char name[96], labels[256] = "";
    const char *brace = strchr(*l, '{'), *space = strchr(*l, ' ');
    if (!space) continue;
    const char *name_end = brace && brace < space ? brace : space;
    if ((size_t)(name_end - *l) >= sizeof name) continue;
    memcpy(name, *l, (size_t)(name_end - *l));
    name[name_end - *l] = '\0';
    const char *value = space + 1;
    if (brace && brace < space) {
      const char *close = strrchr(*l, '}');
      if (!close || (size_t)(close - brace - 1) >= sizeof labels) continue;
      memcpy(labels, brace + 1, (size_t)(close - brace - 1));
      labels[close - brace - 1] = '\0';
      value = close + 2;
    }
    double v = g_ascii_strtod(value, NULL);
    if (!strcmp(name, "ember_serve_canary_share")) s->canary_share = v;
    else if (!strcmp(name, "ember_serve_canary_rollbacks_total")) s->canary_rollbacks = v;
    else if (!strcmp(name, "ember_serve_drift_events_total")) s->drift_events = v;
    else if (!strcmp(name, "ember_serve_uptime_seconds")) s->uptime_s = v;
    if (strncmp(name, "ember_serve_version_", 20) && strncmp(name, "ember_serve_drift_", 18))
      continue;
    EmScrapeRole *r = role_of(s, labels);
    if (!r) continue;
    if (!strcmp(name, "ember_serve_version_requests_total")) r->requests = v;
    else if (!strcmp(name, "ember_serve_version_errors_total")) r->errors = v;
    else if (!strcmp(name, "ember_serve_version_accuracy")) r->accuracy = v;
    else if (!strcmp(name, "ember_serve_version_infer_duration_seconds_bucket") &&
             r->n_buckets < EM_SCRAPE_BUCKETS) {
      char le[32];
      if (!label(labels, "le", le, sizeof le)) continue;
      r->le[r->n_buckets] = !strcmp(le, "+Inf") ? INFINITY : g_ascii_strtod(le, NULL);
      r->cum[r->n_buckets++] = v;
    } else if (!strcmp(name, "ember_serve_drift_psi")) {
      if (isnan(r->drift_psi_max) || v > r->drift_psi_max) {
        r->drift_psi_max = v;
        label(labels, "feature", r->drift_worst, sizeof r->drift_worst);
      }
    } else if (!strcmp(name, "ember_serve_drift_prediction_js")) r->drift_js = v;
    else if (!strcmp(name, "ember_serve_drift_detected")) r->drift_detected = (int)v;
  }
  g_strfreev(lines);
}

double em_scrape_quantile(const EmScrapeRole *a, const EmScrapeRole *b, double q) {
  if (!b->n_buckets || strcmp(a->version, b->version) || a->n_buckets != b->n_buckets) return NAN;
  int n = b->n_buckets;
  double total = b->cum[n - 1] - a->cum[n - 1];
  if (total <= 0) return NAN;
  double rank = q * total, prev_le = 0, prev = 0;
  for (int i = 0; i < n; i++) {
    double c = b->cum[i] - a->cum[i];
    if (c >= rank) {
      if (isinf(b->le[i])) return prev_le; /* past the last edge: its lower bound */
      double in = c - prev;
      return in > 0 ? prev_le + (b->le[i] - prev_le) * (rank - prev) / in : b->le[i];
    }
    prev = c;
    prev_le = b->le[i];
  }
  return NAN;
}
