/* serve-reload.c: the registry watcher. Every poll_ms it resolves
 * NAME@ALIAS again; when the alias points at another version it loads
 * that version here, off the request path, and swaps it into the slot
 * (serve-model.c). A version that fails to load is reported once and the
 * old one keeps serving; the watcher tries again when the alias moves. */
#include "serve-private.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void check_once(serve_watcher *w, int *failed_version) {
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
  if (version == w->served_version || version == *failed_version) return;

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
  if (!m) {
    fprintf(stderr, "ember serve: %s moved to version %d but it failed to load (still serving "
            "version %d): %s\n", w->ref, version, w->served_version, err.msg);
    serve_metrics_reload_failed(&w->srv->metrics);
    *failed_version = version;
    return;
  }
  int old = w->served_version;
  serve_metrics_model(&w->srv->metrics, m, true);
  serve_slot_swap(&w->srv->slot, m);
  w->served_version = version;
  *failed_version = 0;
  fprintf(stderr, "ember serve: %s moved: now serving version %d (was %d; loaded in %.0f ms)\n",
          w->ref, version, old, 1000 * (cli_mono_now() - t0));
}

static void *watch_main(void *arg) {
  serve_watcher *w = arg;
  int failed_version = 0;
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
    check_once(w, &failed_version);
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
