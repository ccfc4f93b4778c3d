/* serve-model.c: the served model and its slot. A request takes a
 * reference to the model in the slot when it is parsed and drops it
 * once answered; a reload puts the new model in the slot under the
 * mutex (the swap is one pointer store) and drops the slot's reference
 * to the old one, which is freed when its last request is done. */
#include "serve-private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void serve_mutex_cond_init(pthread_mutex_t *mu, pthread_cond_t *cv) {
  pthread_mutex_init(mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
}

serve_model *serve_model_new(cli_model *cm, const char *name, const char *version,
                             em_quant_mode quant, em_error *err) {
  serve_model *m = calloc(1, sizeof *m);
  if (!m) {
    em_error_set(err, EM_ERR_NOMEM, "out of memory loading the model");
    return NULL;
  }
  atomic_init(&m->refs, 1);
  snprintf(m->name, sizeof m->name, "%s", name); /* name may point into cm */
  snprintf(m->version, sizeof m->version, "%s", version);
  m->cm = *cm;
  memset(cm, 0, sizeof *cm);
  if (m->cm.registered && m->cm.ref.sha256)
    snprintf(m->sha256, sizeof m->sha256, "%s", m->cm.ref.sha256);
  const em_spec *spec = m->cm.spec;
  m->in_dtype = em_spec_input_dtype(spec);
  m->in_ndim = em_spec_input_shape(spec, m->in_shape);
  m->out_ndim = em_spec_output_shape(spec, m->out_shape);
  m->in_numel = m->out_numel = 1;
  for (int d = 0; d < m->in_ndim; d++) m->in_numel *= m->in_shape[d];
  for (int d = 0; d < m->out_ndim; d++) m->out_numel *= m->out_shape[d];
  if (em_model_dtype(m->cm.model) != EM_DTYPE_F32) {
    em_error_set(err, EM_ERR_INVALID, "model '%s' is not f32: serve runs f32 models", name);
    cli_model_close(&m->cm);
    free(m);
    return NULL;
  }
  em_quant_report rep;
  if (quant != EM_QUANT_NONE && (em_model_quantize(m->cm.model, quant, &rep, err) != EM_OK ||
                                 cli_quant_check(&rep, name, err) != EM_OK)) {
    cli_model_close(&m->cm);
    free(m);
    return NULL;
  }
  if (m->cm.registered) m->drift = serve_drift_new(m->cm.ref.reference_json, m->cm.label);
  return m;
}

void serve_model_ref(serve_model *m) { atomic_fetch_add(&m->refs, 1); }

bool serve_model_same_io(const serve_model *a, const serve_model *b) {
  if (a->in_dtype != b->in_dtype || a->in_ndim != b->in_ndim || a->out_ndim != b->out_ndim)
    return false;
  for (int d = 0; d < a->in_ndim; d++)
    if (a->in_shape[d] != b->in_shape[d]) return false;
  for (int d = 0; d < a->out_ndim; d++)
    if (a->out_shape[d] != b->out_shape[d]) return false;
  return true;
}

void serve_model_unref(serve_model *m) {
  if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
  serve_drift_free(m->drift);
  cli_model_close(&m->cm);
  free(m);
}

void serve_slot_init(serve_slot *s, serve_model *m) {
  pthread_mutex_init(&s->mu, NULL);
  s->cur = m;
}

serve_model *serve_slot_acquire(serve_slot *s) {
  pthread_mutex_lock(&s->mu);
  serve_model *m = s->cur;
  serve_model_ref(m);
  pthread_mutex_unlock(&s->mu);
  return m;
}

void serve_slot_swap(serve_slot *s, serve_model *m) {
  pthread_mutex_lock(&s->mu);
  serve_model *old = s->cur;
  s->cur = m;
  pthread_mutex_unlock(&s->mu);
  serve_model_unref(old);
}

void serve_slot_clear(serve_slot *s) {
  serve_model_unref(s->cur);
  s->cur = NULL;
  pthread_mutex_destroy(&s->mu);
}
