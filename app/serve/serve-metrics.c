/* serve-metrics.c: what /metrics shows, in the Prometheus text exposition
 * format (version 0.0.4): counters (_total), gauges and histograms with
 * cumulative le buckets, _sum and _count. One mutex guards the counters;
 * the queue and in-flight gauges are atomics the batcher and the HTTP
 * side move. */
#include "serve-private.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>

/* Latency buckets (seconds) and batch-size buckets (rows per forward). */
const double serve_lat_le[SERVE_LAT_BUCKETS] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                                 0.05,   0.1,   0.2,   0.5,   1,    2,
                                                 5,      10,    30,    60};
static const double batch_le[SERVE_BATCH_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128, 256,
                                                     512, 1024, 4096};

void serve_metrics_init(serve_metrics *m) {
  memset(m, 0, sizeof *m);
  pthread_mutex_init(&m->mu, NULL);
  m->started = cli_mono_now();
}

void serve_metrics_destroy(serve_metrics *m) {
  free(m->drift_text);
  m->drift_text = NULL;
  pthread_mutex_destroy(&m->mu);
}

void serve_metrics_set_drift(serve_metrics *m, char *text) {
  pthread_mutex_lock(&m->mu);
  free(m->drift_text);
  m->drift_text = text;
  pthread_mutex_unlock(&m->mu);
}

void serve_metrics_response(serve_metrics *m, int code) {
  if (code < 100 || code >= 600) return;
  pthread_mutex_lock(&m->mu);
  m->c.by_code[code]++;
  pthread_mutex_unlock(&m->mu);
}

static int bucket(const double *le, int n, double v) {
  int i = 0;
  while (i < n && v > le[i]) i++;
  return i; /* n: +Inf */
}

void serve_metrics_infer_latency(serve_metrics *m, double seconds) {
  int b = bucket(serve_lat_le, SERVE_LAT_BUCKETS, seconds);
  pthread_mutex_lock(&m->mu);
  m->c.lat_counts[b]++;
  m->c.lat_sum += seconds;
  pthread_mutex_unlock(&m->mu);
}

void serve_metrics_batch(serve_metrics *m, int64_t rows) {
  int b = bucket(batch_le, SERVE_BATCH_BUCKETS, (double)rows);
  pthread_mutex_lock(&m->mu);
  m->c.batch_counts[b]++;
  m->c.batch_rows_sum += (uint64_t)rows;
  pthread_mutex_unlock(&m->mu);
}

void serve_metrics_model(serve_metrics *m, const serve_model *model, bool reloaded) {
  pthread_mutex_lock(&m->mu);
  snprintf(m->c.model, sizeof m->c.model, "%s", model->name);
  snprintf(m->c.version, sizeof m->c.version, "%s", model->version);
  snprintf(m->c.sha256, sizeof m->c.sha256, "%s", model->sha256);
  if (reloaded) m->c.reloads++;
  pthread_mutex_unlock(&m->mu);
}

void serve_metrics_version(serve_metrics *m, int role, const char *version, int code,
                           double seconds, bool fault) {
  if (role < 0 || role > 1) return;
  int b = bucket(serve_lat_le, SERVE_LAT_BUCKETS, seconds);
  pthread_mutex_lock(&m->mu);
  if (role == 1) {
    int64_t sec = (int64_t)cli_mono_now();
    serve_second *s = &m->canary_ring[sec % SERVE_SLO_RING];
    if (s->sec != sec) *s = (serve_second){.sec = sec};
    s->n++;
    s->faults += fault;
    s->lat[b]++;
  }
  serve_version_counters *v = &m->role[role];
  if (strcmp(v->version, version)) { /* a reload: the figures start again */
    memset(v, 0, sizeof *v);
    snprintf(v->version, sizeof v->version, "%s", version);
  }
  v->requests++;
  if (code >= 400) v->errors++;
  v->lat_counts[b]++;
  v->lat_sum += seconds;
  pthread_mutex_unlock(&m->mu);
}

void serve_metrics_feedback(serve_metrics *m, int role, const char *version, int labelled,
                            int correct) {
  if (role < 0 || role > 1) return;
  pthread_mutex_lock(&m->mu);
  serve_version_counters *v = &m->role[role];
  if (!strcmp(v->version, version)) { /* not for a version reloaded away since */
    v->labelled += (uint64_t)labelled;
    v->correct += (uint64_t)correct;
    if (role == 1) {
      int64_t sec = (int64_t)cli_mono_now();
      serve_second *s = &m->canary_ring[sec % SERVE_SLO_RING];
      if (s->sec != sec) *s = (serve_second){.sec = sec};
      s->labelled += (uint32_t)labelled;
      s->correct += (uint32_t)correct;
    }
  }
  pthread_mutex_unlock(&m->mu);
}

void serve_metrics_canary_accuracy(serve_metrics *m, double window_s, int64_t *labelled,
                                   int64_t *correct) {
  int64_t now = (int64_t)cli_mono_now(), lab = 0, ok = 0;
  pthread_mutex_lock(&m->mu);
  for (int64_t sec = now - (int64_t)window_s + 1; sec <= now; sec++) {
    const serve_second *s = &m->canary_ring[((sec % SERVE_SLO_RING) + SERVE_SLO_RING) % SERVE_SLO_RING];
    if (s->sec != sec) continue;
    lab += s->labelled;
    ok += s->correct;
  }
  pthread_mutex_unlock(&m->mu);
  *labelled = lab;
  *correct = ok;
}

void serve_metrics_canary_window(serve_metrics *m, double window_s, int64_t *n, int64_t *faults,
                                 double *p99) {
  int64_t now = (int64_t)cli_mono_now(), span = (int64_t)(window_s + 0.999);
  if (span > SERVE_SLO_RING) span = SERVE_SLO_RING;
  uint64_t lat[SERVE_LAT_BUCKETS + 1] = {0}, total = 0, bad = 0;
  pthread_mutex_lock(&m->mu);
  for (int64_t sec = now - span + 1; sec <= now; sec++) {
    const serve_second *s = &m->canary_ring[((sec % SERVE_SLO_RING) + SERVE_SLO_RING) % SERVE_SLO_RING];
    if (s->sec != sec) continue;
    total += s->n;
    bad += s->faults;
    for (int b = 0; b <= SERVE_LAT_BUCKETS; b++) lat[b] += s->lat[b];
  }
  pthread_mutex_unlock(&m->mu);
  *n = (int64_t)total;
  *faults = (int64_t)bad;
  *p99 = 0;
  uint64_t cum = 0;
  for (int b = 0; b <= SERVE_LAT_BUCKETS && total; b++) {
    cum += lat[b];
    if (cum * 100 >= total * 99) {
      *p99 = b < SERVE_LAT_BUCKETS ? serve_lat_le[b] : INFINITY;
      break;
    }
  }
}

void serve_metrics_reload_failed(serve_metrics *m) {
  pthread_mutex_lock(&m->mu);
  m->c.reload_failures++;
  m->c.reload_last_failure = (double)time(NULL);
  pthread_mutex_unlock(&m->mu);
}

void serve_metrics_refused(serve_metrics *m, serve_refused why) {
  pthread_mutex_lock(&m->mu);
  m->c.refused[why]++;
  pthread_mutex_unlock(&m->mu);
}

void serve_metrics_reload_retry(serve_metrics *m, int attempts, double next_in_s) {
  pthread_mutex_lock(&m->mu);
  m->c.reload_attempts = attempts;
  m->c.reload_next_retry = attempts ? (double)time(NULL) + next_in_s : 0;
  pthread_mutex_unlock(&m->mu);
}

/* A growing text buffer. */
typedef struct {
  char *p;
  size_t len, cap;
  bool oom;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  if (t->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->oom = true;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap * 2 + (size_t)n + 1;
    char *p = realloc(t->p, cap);
    if (!p) {
      t->oom = true;
      return;
    }
    t->p = p;
    t->cap = cap;
  }
}

static void head(text *t, const char *name, const char *type, const char *help) {
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value with \, " and newline escaped. */
static const char *esc(const char *s, char *buf, size_t cap) {
  size_t o = 0;
  for (; *s && o + 3 < cap; s++) {
    if (*s == '\\' || *s == '"') buf[o++] = '\\', buf[o++] = *s;
    else if (*s == '\n') buf[o++] = '\\', buf[o++] = 'n';
    else buf[o++] = *s;
  }
  buf[o] = '\0';
  return buf;
}

/* labels: "" or 'a="x",' (a trailing comma) put before le and in _sum,
 * _count braces. */
static void histogram_l(text *t, const char *name, const char *labels, const double *le, int n,
                        const uint64_t *counts, double sum) {
  uint64_t cum = 0;
  for (int i = 0; i < n; i++) {
    cum += counts[i];
    put(t, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, le[i], (unsigned long long)cum);
  }
  cum += counts[n];
  size_t ll = strlen(labels);
  char bare[200];
  snprintf(bare, sizeof bare, "%.*s", ll ? (int)ll - 1 : 0, labels); /* without its comma */
  put(t, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels, (unsigned long long)cum);
  if (ll)
    put(t, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, bare, sum, name, bare,
        (unsigned long long)cum);
  else
    put(t, "%s_sum %.9g\n%s_count %llu\n", name, sum, name, (unsigned long long)cum);
}

static void histogram(text *t, const char *name, const double *le, int n, const uint64_t *counts,
                      double sum) {
  histogram_l(t, name, "", le, n, counts, sum);
}

char *serve_metrics_format(serve_metrics *m, size_t *len) {
  text t = {.cap = 8192};
  if (!(t.p = malloc(t.cap))) return NULL;
  t.p[0] = '\0';
  pthread_mutex_lock(&m->mu);
  serve_counters s = m->c; /* a consistent copy; the atomics are read below */
  serve_version_counters roles[2] = {m->role[0], m->role[1]};
  uint64_t s_rollbacks = m->canary_rollbacks;
  pthread_mutex_unlock(&m->mu);

  head(&t, "ember_serve_requests_total", "counter", "HTTP requests answered, by status code.");
  uint64_t errors = 0;
  for (int c = 100; c < 600; c++) {
    if (!s.by_code[c]) continue;
    put(&t, "ember_serve_requests_total{code=\"%d\"} %llu\n", c,
        (unsigned long long)s.by_code[c]);
    if (c >= 400) errors += s.by_code[c];
  }
  head(&t, "ember_serve_errors_total", "counter",
       "HTTP requests answered with an error status (4xx or 5xx).");
  put(&t, "ember_serve_errors_total %llu\n", (unsigned long long)errors);

  head(&t, "ember_serve_infer_duration_seconds", "histogram",
       "Inference request latency from its first byte to its response.");
  double lat_sum = s.lat_sum;
  histogram(&t, "ember_serve_infer_duration_seconds", serve_lat_le, SERVE_LAT_BUCKETS, s.lat_counts,
            lat_sum);
  head(&t, "ember_serve_batch_size", "histogram", "Rows per forward pass.");
  histogram(&t, "ember_serve_batch_size", batch_le, SERVE_BATCH_BUCKETS, s.batch_counts,
            (double)s.batch_rows_sum);

  head(&t, "ember_serve_queue_depth", "gauge", "Inference requests waiting for a worker.");
  put(&t, "ember_serve_queue_depth %d\n", atomic_load(&m->queue_jobs));
  head(&t, "ember_serve_queue_rows", "gauge", "Rows waiting for a worker.");
  put(&t, "ember_serve_queue_rows %d\n", atomic_load(&m->queue_rows));
  head(&t, "ember_serve_inflight_requests", "gauge",
       "Inference requests received and not yet answered.");
  put(&t, "ember_serve_inflight_requests %d\n", atomic_load(&m->inflight));

  char name[300], ver[80], sha[160];
  esc(s.model, name, sizeof name);
  esc(s.version, ver, sizeof ver);
  esc(s.sha256, sha, sizeof sha);
  head(&t, "ember_serve_model_version", "gauge", "The registry version of the served model.");
  put(&t, "ember_serve_model_version{model=\"%s\"} %s\n", name, s.version[0] ? ver : "0");
  head(&t, "ember_serve_model_info", "gauge", "The served model (always 1).");
  put(&t, "ember_serve_model_info{model=\"%s\",version=\"%s\",sha256=\"%s\"} 1\n", name, ver, sha);
  head(&t, "ember_serve_reloads_total", "counter", "Times a new model version was swapped in.");
  put(&t, "ember_serve_reloads_total %llu\n", (unsigned long long)s.reloads);
  head(&t, "ember_serve_reload_failures_total", "counter",
       "Times loading a new model version failed (the old one kept serving).");
  put(&t, "ember_serve_reload_failures_total %llu\n", (unsigned long long)s.reload_failures);
  static const char *const why[] = {"max_connections", "max_connections_per_ip", "bad_request",
                                    "header_timeout"};
  head(&t, "ember_serve_connections_refused_total", "counter",
       "Connections answered and closed before their first request reached the handler.");
  for (int i = 0; i < 4; i++)
    put(&t, "ember_serve_connections_refused_total{reason=\"%s\"} %llu\n", why[i],
        (unsigned long long)s.refused[i]);
  head(&t, "ember_serve_reload_retry_attempts", "gauge",
       "Failed loads of the version the alias names (0: none failing).");
  put(&t, "ember_serve_reload_retry_attempts %d\n", s.reload_attempts);
  head(&t, "ember_serve_reload_last_failure_timestamp_seconds", "gauge",
       "Unix time of the last failed load (0: none).");
  put(&t, "ember_serve_reload_last_failure_timestamp_seconds %.0f\n", s.reload_last_failure);
  head(&t, "ember_serve_reload_next_retry_timestamp_seconds", "gauge",
       "Unix time of the next try of a version that failed to load (0: none due).");
  put(&t, "ember_serve_reload_next_retry_timestamp_seconds %.0f\n", s.reload_next_retry);
  /* per served version: the stable one and the canary, by role */
  static const char *const role_name[2] = {"stable", "canary"};
  head(&t, "ember_serve_version_requests_total", "counter",
       "Inference requests answered, by the version that answered (stable or canary).");
  for (int r = 0; r < 2; r++)
    if (roles[r].version[0])
      put(&t, "ember_serve_version_requests_total{role=\"%s\",version=\"%s\"} %llu\n",
          role_name[r], esc(roles[r].version, ver, sizeof ver),
          (unsigned long long)roles[r].requests);
  head(&t, "ember_serve_version_errors_total", "counter",
       "Inference requests answered with an error status, by version.");
  for (int r = 0; r < 2; r++)
    if (roles[r].version[0])
      put(&t, "ember_serve_version_errors_total{role=\"%s\",version=\"%s\"} %llu\n",
          role_name[r], esc(roles[r].version, ver, sizeof ver),
          (unsigned long long)roles[r].errors);
  head(&t, "ember_serve_version_feedback_total", "counter",
       "Answered rows that feedback gave a true class, by the version that answered.");
  for (int r = 0; r < 2; r++)
    if (roles[r].version[0])
      put(&t, "ember_serve_version_feedback_total{role=\"%s\",version=\"%s\"} %llu\n",
          role_name[r], esc(roles[r].version, ver, sizeof ver),
          (unsigned long long)roles[r].labelled);
  head(&t, "ember_serve_version_correct_total", "counter",
       "Of those, the rows the version's answer got right.");
  for (int r = 0; r < 2; r++)
    if (roles[r].version[0])
      put(&t, "ember_serve_version_correct_total{role=\"%s\",version=\"%s\"} %llu\n",
          role_name[r], esc(roles[r].version, ver, sizeof ver),
          (unsigned long long)roles[r].correct);
  head(&t, "ember_serve_version_accuracy", "gauge",
       "Accuracy on the rows given feedback, by version (absent before any feedback).");
  for (int r = 0; r < 2; r++)
    if (roles[r].version[0] && roles[r].labelled)
      put(&t, "ember_serve_version_accuracy{role=\"%s\",version=\"%s\"} %.6f\n", role_name[r],
          esc(roles[r].version, ver, sizeof ver),
          (double)roles[r].correct / (double)roles[r].labelled);
  head(&t, "ember_serve_version_infer_duration_seconds", "histogram",
       "Inference request latency, by the version that answered.");
  for (int r = 0; r < 2; r++) {
    if (!roles[r].version[0]) continue;
    char labels[160];
    snprintf(labels, sizeof labels, "role=\"%s\",version=\"%s\",", role_name[r],
             esc(roles[r].version, ver, sizeof ver));
    histogram_l(&t, "ember_serve_version_infer_duration_seconds", labels, serve_lat_le,
                SERVE_LAT_BUCKETS, roles[r].lat_counts, roles[r].lat_sum);
  }
  head(&t, "ember_serve_canary_rollbacks_total", "counter",
       "Times the canary broke an objective and its traffic went back to the stable version.");
  put(&t, "ember_serve_canary_rollbacks_total %llu\n", (unsigned long long)s_rollbacks);
  head(&t, "ember_serve_canary_share", "gauge",
       "The share of requests routed to the canary (0 to 1; 0: no canary).");
  put(&t, "ember_serve_canary_share %.3f\n", atomic_load(&m->canary_permille) / 1000.0);
  pthread_mutex_lock(&m->mu);
  if (m->drift_text) put(&t, "%s", m->drift_text);
  pthread_mutex_unlock(&m->mu);
  head(&t, "ember_serve_uptime_seconds", "gauge", "Seconds since the server started.");
  put(&t, "ember_serve_uptime_seconds %.3f\n", cli_mono_now() - m->started);
  if (t.oom) {
    free(t.p);
    return NULL;
  }
  *len = t.len;
  return t.p;
}
