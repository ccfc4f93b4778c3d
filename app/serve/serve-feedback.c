/* serve-feedback.c: labels for answered requests, and each version's
 * accuracy from them.
 *
 *   POST /v2/models/NAME/feedback  {"id": "r17", "labels": [3]}
 *
 * Every answered inference request that carried an "id" (of up to 63
 * bytes) and at most SERVE_FEEDBACK_ROWS rows is remembered with the
 * version that answered and the class it gave each row, in a table of the
 * last SERVE_FEEDBACK_SLOTS requests (a newer request takes an older
 * one's slot when its probe window is full). Feedback names the request
 * and gives the true class of each row: the answering version's labelled
 * and correct counts grow (ember_serve_version_feedback_total,
 * ember_serve_version_correct_total, ember_serve_version_accuracy), and a
 * canary's land in its objectives' window (--slo-min-accuracy). A request
 * is labelled once: a second feedback is 409. */
#include "serve-private.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBE 8

static uint64_t fnv(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

serve_feedback *serve_feedback_new(void) {
  serve_feedback *f = calloc(1, sizeof *f);
  if (f) pthread_mutex_init(&f->mu, NULL);
  return f;
}

void serve_feedback_free(serve_feedback *f) {
  if (!f) return;
  pthread_mutex_destroy(&f->mu);
  free(f);
}

void serve_feedback_answered(serve_feedback *f, const serve_model *m, int role, const char *id,
                             const float *out, int64_t rows) {
  int classes = em_drift_classes(m->out_shape, m->out_ndim);
  if (!f || !id || !classes || rows < 1 || rows > SERVE_FEEDBACK_ROWS ||
      strlen(id) >= sizeof f->slot[0].id)
    return;
  uint64_t h = fnv(id);
  pthread_mutex_lock(&f->mu);
  serve_feedback_slot *pick = NULL;
  for (int k = 0; k < PROBE; k++) { /* the same id again, else a free slot, else the oldest */
    serve_feedback_slot *s = &f->slot[(h + (uint64_t)k) % SERVE_FEEDBACK_SLOTS];
    if (s->seq && !strcmp(s->id, id)) {
      pick = s;
      break;
    }
    if (!pick || (pick->seq && (!s->seq || s->seq < pick->seq))) pick = s;
  }
  snprintf(pick->id, sizeof pick->id, "%s", id);
  snprintf(pick->version, sizeof pick->version, "%s", m->version);
  pick->role = role;
  pick->rows = (int)rows;
  pick->labelled = false;
  for (int64_t i = 0; i < rows; i++) pick->pred[i] = em_drift_argmax(out + i * classes, classes);
  pick->seq = ++f->seq;
  pthread_mutex_unlock(&f->mu);
}

int serve_feedback_take(serve_feedback *f, serve_metrics *metrics, const char *body, size_t len,
                        char *msg, size_t cap) {
  json_error_t je;
  json_t *o = json_loadb(body, len, 0, &je);
  const char *id = json_string_value(json_object_get(o, "id"));
  json_t *labels = json_object_get(o, "labels");
  int code = 0;
  if (!o || !id || !json_is_array(labels) || json_array_size(labels) == 0) {
    snprintf(msg, cap, "feedback is {\"id\": the request's id, \"labels\": [the true class of "
             "each of its rows]}");
    code = 400;
    goto out;
  }
  int n = (int)json_array_size(labels), lab[SERVE_FEEDBACK_ROWS];
  for (int i = 0; i < n && i < SERVE_FEEDBACK_ROWS; i++) {
    json_t *v = json_array_get(labels, (size_t)i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1 << 20) {
      snprintf(msg, cap, "labels[%d] is not a class index (a whole number from 0)", i);
      code = 400;
      goto out;
    }
    lab[i] = (int)json_integer_value(v);
  }
  uint64_t h = fnv(id);
  pthread_mutex_lock(&f->mu);
  serve_feedback_slot *s = NULL;
  for (int k = 0; k < PROBE && !s; k++) {
    serve_feedback_slot *t = &f->slot[(h + (uint64_t)k) % SERVE_FEEDBACK_SLOTS];
    if (t->seq && !strcmp(t->id, id)) s = t;
  }
  if (!s) {
    snprintf(msg, cap, "no answered request with id '%.63s' among the last ones this server "
             "keeps (%d; requests of up to %d rows that carried an id)", id,
             SERVE_FEEDBACK_SLOTS, SERVE_FEEDBACK_ROWS);
    code = 404;
  } else if (s->labelled) {
    snprintf(msg, cap, "request '%.63s' was labelled already", id);
    code = 409;
  } else if (n != s->rows) {
    snprintf(msg, cap, "request '%.63s' had %d row%s: give %d label%s, not %d", id, s->rows,
             s->rows == 1 ? "" : "s", s->rows, s->rows == 1 ? "" : "s", n);
    code = 400;
  } else {
    int correct = 0;
    for (int i = 0; i < n; i++) correct += lab[i] == s->pred[i];
    s->labelled = true;
    serve_metrics_feedback(metrics, s->role, s->version, n, correct);
    json_t *r = json_pack("{s:s, s:s, s:i, s:i}", "id", s->id, "model_version", s->version,
                          "labelled", n, "correct", correct);
    char *txt = r ? json_dumps(r, JSON_COMPACT) : NULL;
    snprintf(msg, cap, "%s", txt ? txt : "{}");
    free(txt);
    json_decref(r);
  }
  pthread_mutex_unlock(&f->mu);
out:
  json_decref(o);
  return code;
}
