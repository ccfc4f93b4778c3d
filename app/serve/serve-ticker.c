/* serve-ticker.c: a thread that calls a function every period until it is
 * stopped (or the function says it is done): the canary's judge (every
 * 100 ms) and the drift judge (every second) run on one each. */
#include "serve-private.h"

#include <errno.h>
#include <math.h>
#include <time.h>

static void *ticker_main(void *arg) {
  serve_ticker *t = arg;
  pthread_mutex_lock(&t->mu);
  bool go_on = true;
  while (!t->stopping && go_on) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double s = floor(t->period_s);
    ts.tv_sec += (time_t)s;
    ts.tv_nsec += (long)((t->period_s - s) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    while (!t->stopping && pthread_cond_timedwait(&t->cv, &t->mu, &ts) != ETIMEDOUT) {}
    if (t->stopping) break;
    pthread_mutex_unlock(&t->mu);
    go_on = t->tick(t->user);
    pthread_mutex_lock(&t->mu);
  }
  pthread_mutex_unlock(&t->mu);
  return NULL;
}

em_status serve_ticker_start(serve_ticker *t, double period_s, bool (*tick)(void *user),
                             void *user, const char *what, em_error *err) {
  t->period_s = period_s;
  t->tick = tick;
  t->user = user;
  t->stopping = false;
  serve_mutex_cond_init(&t->mu, &t->cv);
  if (pthread_create(&t->thread, NULL, ticker_main, t) != 0) {
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    return em_error_set(err, EM_ERR_IO, "could not start %s's thread", what);
  }
  t->started = true;
  return EM_OK;
}

void serve_ticker_stop(serve_ticker *t) {
  if (!t->started) return;
  pthread_mutex_lock(&t->mu);
  t->stopping = true;
  pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->mu);
  pthread_join(t->thread, NULL);
  pthread_cond_destroy(&t->cv);
  pthread_mutex_destroy(&t->mu);
  t->started = false;
}
