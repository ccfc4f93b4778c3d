/* serve-reload.c: the registry watcher. Every poll_ms it resolves
 * NAME@ALIAS again; when the alias points at another version it loads
 * that version here, off the request path, and swaps it into the slot
 * (serve-model.c). A version that fails to load leaves the old one
 * serving and is tried again with back-off (1 s, doubling to 60 s; each
 * at the first poll past its time), so that fixing the file (or the
 * registry) is enough: it used to be tried again only when the alias
 * moved. /metrics shows the attempts, the last failure's time and the
 * next try's. */
#include "serve-private.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RETRY_FIRST_S 1.0
#define RETRY_MAX_S 60.0

/* The retry state of a version that failed to load (version 0: none). */
typedef struct {
  int version;
  int attempts;
  double next;  /* monotonic seconds */
  double delay; /* until the try after the next */
} retry_state;

static void check_once(serve_watcher *w, int *failed_version, retry_state *rs) {
  em_error err = {0};
  em_version_ref ref;
  if (em_store_resolve_version(w->store, w->ref, &ref, &err) != EM_OK) {
    if (*failed_version != -1) fprintf(stderr, "ember serve: cannot resolve %s: %s\n", w->ref,
                                       err.msg);
    *failed_version = -1;
    return;
  }
  int version = ref.version;
  em_version_ref_clear(&ref);
  *failed_version = 0;
  if (version == w->served_version) {
    if (rs->version) serve_metrics_reload_retry(&w->srv->metrics, 0, 0); /* rolled back */
    rs->version = 0;
    return;
  }
  if (version == rs->version && cli_mono_now() < rs->next) return;

  cli_model cm;
  double t0 = cli_mono_now();
  serve_model *m = NULL;
  char vtext[32];
  snprintf(vtext, sizeof vtext, "%d", version);
  if (cli_model_open_ref(w->store, w->ref, &cm, &err) == EM_OK) {
    /* the alias may have moved again between the two look-ups */
    snprintf(vtext, sizeof vtext, "%d", cm.ref.version);
    version = cm.ref.version;
    m = serve_model_new(&cm, cm.ref.name, vtext, w->quant, &err);
  }
  if (m && w->slot) { /* a canary stands in for the stable version: the same tensors */
    serve_model *stable = serve_slot_acquire(&w->srv->slot);
    if (!serve_model_same_io(stable, m)) {
      em_error_set(&err, EM_ERR_SHAPE, "its input or output shape differs from the stable "
                   "version %s's", stable->version);
      serve_model_unref(m);
      m = NULL;
    }
    serve_model_unref(stable);
  }
  if (!m) {
    if (rs->version != version) *rs = (retry_state){version, 0, 0, RETRY_FIRST_S};
    rs->attempts++;
    rs->next = cli_mono_now() + rs->delay;
    fprintf(stderr, "ember serve: %s moved to version %d but it failed to load (still serving "
            "version %d; attempt %d, next in %.0f s): %s\n", w->ref, version,
            w->served_version, rs->attempts, rs->delay, err.msg);
    serve_metrics_reload_failed(&w->srv->metrics);
    serve_metrics_reload_retry(&w->srv->metrics, rs->attempts, rs->delay);
    rs->delay = rs->delay * 2 < RETRY_MAX_S ? rs->delay * 2 : RETRY_MAX_S;
    return;
  }
  if (rs->version) serve_metrics_reload_retry(&w->srv->metrics, 0, 0);
  rs->version = 0;
  int old = w->served_version;
  if (!w->slot) serve_metrics_model(&w->srv->metrics, m, true);
  serve_slot_swap(w->slot ? w->slot : &w->srv->slot, m);
  w->served_version = version;
  *failed_version = 0;
  fprintf(stderr, "ember serve: %s moved: now serving version %d%s%s (was %d; loaded in %.0f ms)\n",
          w->ref, version, w->role ? " as the " : "", w->role ? w->role : "", old,
          1000 * (cli_mono_now() - t0));
}

static void *watch_main(void *arg) {
  serve_watcher *w = arg;
  int failed_version = 0; /* -1: the alias could not be resolved (reported once) */
  retry_state rs = {0};
  pthread_mutex_lock(&w->mu);
  while (!w->stopping) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += w->poll_ms / 1000;
    ts.tv_nsec += (long)(w->poll_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    while (!w->stopping && pthread_cond_timedwait(&w->cv, &w->mu, &ts) != ETIMEDOUT) {}
    if (w->stopping) break;
    pthread_mutex_unlock(&w->mu);
    check_once(w, &failed_version, &rs);
    pthread_mutex_lock(&w->mu);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

em_status serve_watcher_start(serve_watcher *w, em_error *err) {
  serve_mutex_cond_init(&w->mu, &w->cv);
  w->stopping = false;
  if (pthread_create(&w->thread, NULL, watch_main, w) != 0)
    return em_error_set(err, EM_ERR_IO, "could not start the registry watcher");
  w->started = true;
  return EM_OK;
}

void serve_watcher_stop(serve_watcher *w) {
  if (w->started) {
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    w->started = false;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
  }
  if (w->store) em_store_close(w->store);
  w->store = NULL;
}
