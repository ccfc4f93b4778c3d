/* em-serve-scrape.h: what the Deploy page reads off a server's /metrics
 * (the Prometheus text `ember serve` writes, app/serve/serve-metrics.c):
 * per role (stable, canary) the version, its request and error counters,
 * its latency histogram and its feedback accuracy; the canary's share and
 * rollbacks; the drift gauges. No widgets: the page and its test parse
 * through here, and percentiles over an interval come from the difference
 * of two scrapes. */
#pragma once

#include <glib.h>

#define EM_SCRAPE_BUCKETS 24

typedef struct {
  char version[32];           /* "" when the role serves nothing */
  double requests, errors;    /* counters since the version was loaded */
  double le[EM_SCRAPE_BUCKETS]; /* histogram bucket edges (seconds), +Inf last */
  double cum[EM_SCRAPE_BUCKETS]; /* cumulative counts */
  int n_buckets;
  double accuracy;            /* NAN before any feedback */
  double drift_psi_max;       /* the largest PSI of its features; NAN: not judged */
  char drift_worst[32];       /* that feature's name */
  double drift_js;            /* NAN: not judged */
  int drift_detected;         /* -1: not judged */
} EmScrapeRole;

typedef struct {
  EmScrapeRole role[2];       /* 0 stable, 1 canary */
  double canary_share;        /* 0..1 */
  double canary_rollbacks;
  double drift_events;
  double uptime_s;
} EmScrape;

/* Parses text (NUL-terminated); unknown lines are skipped. */
void em_scrape_parse(const char *text, EmScrape *out);
/* The q-quantile (0..1) in seconds of the requests between two scrapes of
 * a role (linear inside a bucket, Prometheus's histogram_quantile); NAN
 * when none came in between or the version changed. */
double em_scrape_quantile(const EmScrapeRole *before, const EmScrapeRole *now, double q);
