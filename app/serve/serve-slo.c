/* serve-slo.c: the canary's service-level objectives. Every 100 ms the
 * judge reads the canary's requests of the last --slo-window-s seconds
 * (serve_metrics_canary_window: a ring of per-second counts and latency
 * histograms) and, once they are at least --slo-min-requests, checks
 * their p99 latency against --slo-p99-ms and their fault rate (5xx, or
 * an output that overflowed) against --slo-error-rate. The first broken
 * objective sends the canary's share to 0 at once (requests already
 * routed to it finish there; new ones all go to the stable version), and
 * the rollback goes into the registry's alias audit log with the figures
 * ("canary-rollback", `ember model history`), beside the canary's start
 * and end. */
#include "serve-private.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static void record(serve_judge *j, const char *action, const char *detail) {
  if (!j->store) return;
  em_error err = {0};
  const char *at = strchr(j->canary_ref, '@');
  if (em_store_model_audit(j->store, j->model, at ? at + 1 : j->canary_ref, action,
                           j->canary_version, j->stable_version, detail, &err) != EM_OK)
    fprintf(stderr, "ember serve: warning: could not record the %s in the registry: %s\n",
            action, err.msg);
}

/* The broken objective's figures into why (empty: none broken). */
static void judge_once(serve_judge *j, char *why, size_t cap) {
  int64_t n, faults;
  double p99;
  why[0] = '\0';
  serve_metrics_canary_window(&j->srv->metrics, j->slo.window_s, &n, &faults, &p99);
  if (n < j->slo.min_requests) n = 0; /* too few to judge latency and faults */
  double rate = n ? (double)faults / (double)n : 0;
  if (n && j->slo.error_rate >= 0 && rate > j->slo.error_rate)
    snprintf(why, cap, "error rate %.3f > %.3f (%lld of %lld requests in %g s)", rate,
             j->slo.error_rate, (long long)faults, (long long)n, j->slo.window_s);
  else if (n && j->slo.p99_s > 0 && p99 > j->slo.p99_s)
    snprintf(why, cap, "p99 latency over %g ms > %g ms (%lld requests in %g s)", p99 * 1e3,
             j->slo.p99_s * 1e3, (long long)n, j->slo.window_s);
  if (why[0] || j->slo.min_accuracy < 0) return;
  int64_t labelled, correct;
  serve_metrics_canary_accuracy(&j->srv->metrics, j->slo.window_s, &labelled, &correct);
  double acc = labelled ? (double)correct / (double)labelled : 1;
  if (labelled >= j->slo.min_requests && acc < j->slo.min_accuracy)
    snprintf(why, cap, "accuracy %.3f < %.3f (%lld of %lld labelled rows in %g s)", acc,
             j->slo.min_accuracy, (long long)correct, (long long)labelled, j->slo.window_s);
}

/* Every 100 ms; after a rollback the canary is judged no more. */
static bool judge_tick(void *arg) {
  serve_judge *j = arg;
  char why[256];
  judge_once(j, why, sizeof why);
  if (!why[0]) return true;
  atomic_store(&j->srv->canary_permille, 0);
  atomic_store(&j->srv->metrics.canary_permille, 0);
  pthread_mutex_lock(&j->srv->metrics.mu);
  j->srv->metrics.canary_rollbacks++;
  pthread_mutex_unlock(&j->srv->metrics.mu);
  fprintf(stderr, "ember serve: the canary %s (version %d) broke its objective: %s; its "
          "traffic goes back to version %d\n", j->canary_ref, j->canary_version, why,
          j->stable_version);
  record(j, "canary-rollback", why);
  atomic_store(&j->rolled_back, true);
  return false;
}

em_status serve_judge_start(serve_judge *j, em_error *err) {
  char detail[200];
  snprintf(detail, sizeof detail, "%.1f%% of the traffic", atomic_load(&j->srv->canary_permille) / 10.0);
  record(j, "canary-start", detail);
  return serve_ticker_start(&j->ticker, 0.1, judge_tick, j, "the canary's judge", err);
}

void serve_judge_stop(serve_judge *j) {
  if (j->ticker.started) {
    serve_ticker_stop(&j->ticker);
    if (!atomic_load(&j->rolled_back)) record(j, "canary-end", "the server stopped");
  }
  if (j->store) em_store_close(j->store);
  j->store = NULL;
}
